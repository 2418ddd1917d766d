"""A 4-bit dequantizing matrix-vector product: ``W @ x`` with ``W`` in MLX's affine format
(``docs/quantization.md``: ``fa.quantize(w, group_size, bits=4)``), the float weights never in memory.

Program instance ``i`` computes ``block`` output rows. Its refs hold the rows' packed ``uint32`` words (eight
4-bit integers each, element ``j`` at bits ``4 (j % 8)`` of word ``j // 8``), their scales and biases (one per group
of ``group_size``); the kernel takes the integers apart with shifts and masks, dequantizes them as
``scale * q + bias`` and reduces each row against ``x``. On OpenCL/WebGPU the dequantized row is never stored:
the reduction computes each element where it reads it. ``compiler_params`` asks for row mode with ``row_tile``
rows per work item (``docs/kernels.md``): an item reduces its rows together, so each element of ``x`` is loaded
once for all of them (against 8-row blocks of one row per item: 0.3x the time on lavapipe, 0.6-1.0x on PoCL).

Run: ``python examples/kernels/quantized_matvec.py --device opencl:0``.
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


def qmv_kernel(x_ref, w_ref, s_ref, b_ref, o_ref, *, group_size):
    w = w_ref[...]                                        # (block, words) uint32
    block, words = w.shape
    shifts = fnp.arange(8, dtype=fnp.uint32) * 4
    q = (w[:, :, None] >> shifts[None, None, :]) & 15     # (block, words, 8): element 8 * word + lane
    k = words * 8
    q = q.reshape(block, k // group_size, group_size).astype(fnp.float32)
    wd = (q * s_ref[...][:, :, None] + b_ref[...][:, :, None]).reshape(block, k)
    o_ref[...] = fnp.sum(wd * x_ref[...][None, :], axis=1).astype(o_ref.dtype)


def quantized_matvec(x, w, scales, biases, group_size=64, block=64, row_tile=8):
    """``W @ x`` for a float vector ``x`` ``(k,)`` and 4-bit weights ``w`` ``(n, k / 8)`` with ``scales``/``biases``
    ``(n, k / group_size)`` (``fa.quantize(W, group_size, bits=4)``); the result is ``(n,)``. ``block`` rows per
    program instance, ``row_tile`` of them per work item (one where it does not divide ``block``)."""
    n, words = w.shape
    block = min(block, n)
    if n % block:
        raise ValueError(f"quantized_matvec kernel: block={block} must divide the {n} rows")
    groups = scales.shape[1]
    return pl.pallas_call(
        functools.partial(qmv_kernel, group_size=group_size), out_shape=pl.ShapeDtypeStruct((n,), x.dtype),
        grid=(n // block,),
        in_specs=[pl.BlockSpec((words * 8,), lambda i: (0,)), pl.BlockSpec((block, words), lambda i: (i, 0)),
                  pl.BlockSpec((block, groups), lambda i: (i, 0)), pl.BlockSpec((block, groups), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((block,), lambda i: (i,)), name="quantized_matvec",
        compiler_params={"rows": True, "row_tile": row_tile if block % row_tile == 0 else 1})(x, w, scales, biases)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    x = f32(512)
    w, s, b = fa.quantize(f32(256, 512), group_size=64, bits=4)
    want = fa.quantized_matmul(x, w, s, b, transpose=True, group_size=64, bits=4)
    print(f"{dev}: max error {float(fnp.max(fnp.abs(quantized_matvec(x, w, s, b) - want))):.2e}")


if __name__ == "__main__":
    main()
