"""Atomics: a histogram (``pl.atomic_add`` of int32 counts) and column sums (``pl.atomic_add`` of float32 partial
sums) that many program instances update at once.

Each program instance of ``histogram`` counts one block of the values into the whole histogram with one atomic
add per value; the instances of ``column_sums`` each add one block of rows' sums into the result. The result
starts as the second operand (``input_output_aliases``): zeros, or any counts to add to. On opencl and webgpu
the adds are the device's atomics (OpenCL C ``atomic_add``; WGSL ``atomicAdd``; float32 by a compare-and-swap
loop on the bits), so the float sums' rounding depends on the order the instances ran in.

Run: ``python examples/kernels/histogram.py --device webgpu:0``.
"""

from __future__ import annotations

import functools

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def histogram_kernel(x_ref, counts_in_ref, counts_ref, *, block):
    del counts_in_ref   # the aliased start of counts_ref

    def body(i, carry):
        pl.atomic_add(counts_ref, x_ref[i], 1)
        return carry
    fa.lax.fori_loop(0, block, body, 0)


def histogram(x, counts, block=64):
    """``counts`` plus the number of each value ``0 <= v < len(counts)`` in the int32 vector ``x`` (whose length
    ``block`` divides), as ``np.bincount(x, minlength=len(counts)) + counts``."""
    (n,), bins = x.shape, counts.shape[0]
    block = min(block, n)
    if n % block:
        raise ValueError(f"histogram kernel: block={block} must divide the length {n}")
    whole = pl.BlockSpec((bins,), lambda i: (0,))
    return pl.pallas_call(functools.partial(histogram_kernel, block=block),
                          out_shape=pl.ShapeDtypeStruct((bins,), counts.dtype), grid=(n // block,),
                          in_specs=[pl.BlockSpec((block,), lambda i: (i,)), whole], out_specs=whole,
                          input_output_aliases={1: 0}, name="histogram")(x, counts)


def column_sums_kernel(x_ref, init_ref, o_ref):
    del init_ref
    pl.atomic_add(o_ref, (slice(None),), fnp.sum(x_ref[...], axis=0))


def column_sums(x, init, rows=8):
    """``init + x.sum(axis=0)`` of a float32 ``(n, m)`` array, one block of ``rows`` rows per program instance."""
    n, m = x.shape
    rows = min(rows, n)
    if n % rows:
        raise ValueError(f"column_sums kernel: rows={rows} must divide {n}")
    return pl.pallas_call(column_sums_kernel, out_shape=pl.ShapeDtypeStruct((m,), x.dtype), grid=(n // rows,),
                          in_specs=[pl.BlockSpec((rows, m), lambda i: (i, 0)), pl.BlockSpec((m,), lambda i: (0,))],
                          out_specs=pl.BlockSpec((m,), lambda i: (0,)), input_output_aliases={1: 0},
                          name="column_sums")(x, init)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    values = np.random.default_rng(0).integers(0, 16, 1024).astype(np.int32)
    got = histogram(fa.device_put(values, dev), fa.device_put(np.zeros(16, np.int32), dev))
    print(f"{dev}: histogram counts off by {int(np.abs(np.asarray(got) - np.bincount(values, minlength=16)).max())}")
    x = f32(64, 40)
    sums = column_sums(x, fnp.zeros(40, fnp.float32, device=dev))
    print(f"{dev}: column sums max error {float(np.abs(np.asarray(sums) - np.asarray(x).sum(0)).max()):.2e}")


if __name__ == "__main__":
    main()
