"""The first kernel: elementwise ``x + y`` in blocks, with a masked last block (Pallas's quickstart, blocked).

Each program instance ``i`` of the grid adds one block of ``block`` elements: its refs are the blocks the
``BlockSpec`` selects (``lambda i: (i,)``: block ``i``). A length that the block does not divide leaves the
last block padded past the array's end, so the loads there are masked (the stores past the end are dropped).

Run: ``python examples/kernels/vector_add.py --device webgpu:0``.
"""

from __future__ import annotations

import functools

import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def add_kernel(x_ref, y_ref, o_ref, *, n, block):
    i = pl.program_id(0)
    mask = i * block + fnp.arange(block) < n
    o_ref[...] = pl.load(x_ref, ..., mask=mask, other=0.0) + pl.load(y_ref, ..., mask=mask, other=0.0)


def vector_add(x, y, block=256):
    """``x + y`` of two 1-d arrays of one dtype, by blocks of ``block`` elements."""
    (n,) = x.shape
    block = min(block, n)
    spec = pl.BlockSpec((block,), lambda i: (i,))
    kernel = functools.partial(add_kernel, n=n, block=block)
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(pl.cdiv(n, block),),
                          in_specs=[spec, spec], out_specs=spec, name="vector_add")(x, y)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    x, y = f32(1000), f32(1000)
    print(f"{dev}: max error {float(fnp.max(fnp.abs(vector_add(x, y) - (x + y)))):.2e}")


if __name__ == "__main__":
    main()
