"""A tiled matrix product with a BlockSpec grid: ``(M / bm, N / bn, K / bk)`` program instances, each adding the
product of one ``(bm, bk)`` tile of ``x`` and one ``(bk, bn)`` tile of ``y`` into its ``(bm, bn)`` output tile.

The output's index map ignores the ``k`` grid axis, so consecutive instances revisit the same output block and
accumulate into it; the first (``k == 0``) zeroes it (``pl.when``). On OpenCL and WebGPU each instance is one
work-group, and the two tiles of a ``dot`` are staged in work-group (local) memory once, then read by every work
item: the tile sizes are the knobs (``docs/kernels.md``, ``pl.autotune``).

Run: ``python examples/kernels/matmul.py --device opencl:0``.
"""

from __future__ import annotations


import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def matmul_kernel(x_ref, y_ref, o_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        o_ref[...] = fnp.zeros_like(o_ref)
    o_ref[...] += fnp.dot(x_ref[...], y_ref[...])


def matmul(x, y, bm=32, bn=32, bk=32, workgroup=None):
    """``x @ y`` of 2-d float arrays whose sizes the tile sizes divide."""
    m, k = x.shape
    k2, n = y.shape
    if k != k2:
        raise ValueError(f"matmul kernel: shapes {x.shape} and {y.shape} do not contract")
    bm, bn, bk = min(bm, m), min(bn, n), min(bk, k)
    if m % bm or n % bn or k % bk:
        raise ValueError(f"matmul kernel: tiles ({bm}, {bn}, {bk}) must divide ({m}, {n}, {k})")
    return pl.pallas_call(
        matmul_kernel, out_shape=pl.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)), pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        compiler_params=None if workgroup is None else {"workgroup": workgroup}, name="matmul")(x, y)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    x, y = f32(128, 96), f32(96, 64)
    print(f"{dev}: max error {float(fnp.max(fnp.abs(matmul(x, y) - x @ y))):.2e}")


if __name__ == "__main__":
    main()
