"""Layer normalisation over the last axis, fused: one kernel reads each row once and writes
``(x - mean) / sqrt(var + eps) * weight + bias``.

The grid walks blocks of rows; the weight and bias are whole-array refs every instance reads. Mean and variance
are reductions over the block's rows (kept in work-group memory on OpenCL/WebGPU), the rest is elementwise.

Run: ``python examples/kernels/layer_norm.py --device opencl:0``.
"""

from __future__ import annotations

import functools

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def layer_norm_kernel(x_ref, w_ref, b_ref, o_ref, *, eps):
    x = x_ref[...].astype(fnp.float32)
    mean = fnp.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    var = fnp.mean(xc * xc, axis=-1, keepdims=True)
    y = xc * fa.lax.rsqrt(var + eps) * w_ref[...] + b_ref[...]
    o_ref[...] = y.astype(o_ref.dtype)


def layer_norm(x, weight, bias, eps=1e-5, block_rows=8):
    """``fa.nn.LayerNorm``'s computation on a 2-d ``(rows, features)`` array (``weight``/``bias``: ``(features,)``)."""
    rows, feats = x.shape
    br = min(block_rows, rows)
    if rows % br:
        raise ValueError(f"layer_norm kernel: block_rows={br} must divide the {rows} rows")
    spec = pl.BlockSpec((br, feats), lambda i: (i, 0))
    vec = pl.BlockSpec((feats,), lambda i: (0,))
    kernel = functools.partial(layer_norm_kernel, eps=eps)
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // br,),
                          in_specs=[spec, vec, vec], out_specs=spec, name="layer_norm")(x, weight, bias)


def reference(x, weight, bias, eps=1e-5):
    """The same with fnarray's operations."""
    mean = fnp.mean(x, axis=-1, keepdims=True)
    var = fnp.var(x, axis=-1, keepdims=True)
    return (x - mean) / fnp.sqrt(var + eps) * weight + bias


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    x, w, b = f32(64, 96), f32(96), f32(96)
    err = float(fnp.max(fnp.abs(layer_norm(x, w, b) - reference(x, w, b))))
    print(f"{dev}: max error {err:.2e}")


if __name__ == "__main__":
    main()
