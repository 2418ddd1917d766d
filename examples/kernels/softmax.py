"""A fused row softmax kernel with its backward kernel, joined by ``custom_vjp``.

Forward: one program instance per block of rows reads the rows once, takes each row's max, the exponentials
and their sum, and writes ``exp(x - max) / sum`` (one pass over memory; three or more unfused). Backward: for
``y = softmax(x)`` and the cotangent ``dy``, ``dx = y * (dy - sum(dy * y, axis=-1))``, another kernel of the same
grid. ``fa.grad`` through ``softmax`` runs both kernels.

Run: ``python examples/kernels/softmax.py --device opencl:0``.
"""

from __future__ import annotations


import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def _row_blocks(x, block_rows):
    rows = x.shape[0]
    block_rows = min(block_rows, rows)
    if rows % block_rows:
        raise ValueError(f"softmax kernel: block_rows={block_rows} must divide the {rows} rows")
    return block_rows, pl.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0))


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...].astype(fnp.float32)
    e = fnp.exp(x - fnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / fnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def softmax_backward_kernel(y_ref, dy_ref, dx_ref):
    y, dy = y_ref[...], dy_ref[...]
    dx_ref[...] = y * (dy - fnp.sum(dy * y, axis=-1, keepdims=True))


def softmax_forward(x, block_rows=4):
    """``softmax(x, axis=-1)`` of a 2-d float array ``(rows, cols)`` by the forward kernel."""
    br, spec = _row_blocks(x, block_rows)
    return pl.pallas_call(softmax_kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // br,),
                          in_specs=[spec], out_specs=spec, name="softmax")(x)


def softmax_backward(y, dy, block_rows=4):
    """The softmax's vector-Jacobian product from its output ``y`` and cotangent ``dy`` (the backward kernel)."""
    br, spec = _row_blocks(y, block_rows)
    return pl.pallas_call(softmax_backward_kernel, out_shape=pl.ShapeDtypeStruct(y.shape, y.dtype),
                          grid=(y.shape[0] // br,), in_specs=[spec, spec], out_specs=spec,
                          name="softmax_backward")(y, dy)


@fa.custom_vjp
def softmax(x):
    """Row softmax of a 2-d array with a fused forward and a fused backward kernel (differentiable)."""
    return softmax_forward(x)


def _fwd(x):
    y = softmax_forward(x)
    return y, y


def _bwd(y, dy):
    return (softmax_backward(y, dy),)


softmax.defvjp(_fwd, _bwd)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    x = f32(64, 128)
    y, want = softmax(x), fa.nn.softmax(x, axis=-1)
    g = fa.grad(lambda v: fnp.sum(softmax(v) ** 2))(x)
    gw = fa.grad(lambda v: fnp.sum(fa.nn.softmax(v, axis=-1) ** 2))(x)
    print(f"{dev}: forward max error {float(fnp.max(fnp.abs(y - want))):.2e}, "
          f"gradient max error {float(fnp.max(fnp.abs(g - gw))):.2e}")


if __name__ == "__main__":
    main()
