"""The matrix products of the transformer and VAE training steps on webgpu:0 (lavapipe): the subgroup form
against the blocked product (issue 28).

On a CPU adapter with subgroups, ``DotGroup._subgroup`` (``lowering/kernels/groups/dot.py``) runs the products:
a subgroup of work items shares its lhs rows by broadcast, each work item computing 4 columns of 16 or 32 rows;
``dot.SUBGROUP_PRODUCTS = False`` restores the blocked product (8 x 4 outputs per work item, 8 x 16 past
``BLOCK_MIN_WORK``). Each product of ``SHAPES`` (its count per step beside it) is lowered both ways in one process
and timed interleaved: process CPU time (lavapipe's threads included) of ``--calls`` calls, best of ``--rounds``.
The last line per workload sums count x time over its products. ``--cold`` turns Mesa's shader cache off
(``MESA_SHADER_CACHE_DISABLE``) and prints each variant's first call (compile included) in CPU seconds.

Usage: python benchmarks/webgpu_products.py [--workloads transformer,vae] [--rounds 5] [--calls 10] [--cold]
Asserts nothing.
"""

from __future__ import annotations

import os
import sys
import time

if "--cold" in sys.argv:
    os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"   # before the driver loads

import numpy as np  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import _timing  # noqa: E402
import fnarray as fa  # noqa: E402
from fnarray.lowering.kernels.groups import dot  # noqa: E402

#: workload -> [(count per step, batch, rows M, columns N, contraction K, lhs layout, rhs layout)]: a layout
#: "row" holds the operand as it is multiplied (lhs [M, K], rhs [K, N]), "col" transposed (lhs.T, rhs.T)
SHAPES = {
    "transformer": [(8, 1, 1024, 64, 64, "row", "col"), (8, 1, 1024, 64, 64, "row", "row"),
                    (8, 1, 64, 64, 1024, "col", "row"), (2, 1, 1024, 256, 64, "row", "col"),
                    (2, 1, 1024, 256, 64, "row", "row"), (2, 1, 1024, 64, 256, "row", "col"),
                    (2, 1, 1024, 64, 256, "row", "row"), (2, 1, 64, 256, 1024, "col", "row"),
                    (2, 1, 256, 64, 1024, "col", "row"), (1, 1, 1024, 96, 64, "row", "col"),
                    (1, 1, 1024, 64, 96, "row", "row"), (1, 1, 96, 64, 1024, "col", "row"),
                    (4, 64, 64, 64, 16, "row", "row"), (4, 64, 64, 16, 64, "row", "row"),
                    (2, 64, 16, 64, 64, "row", "row"), (2, 64, 64, 16, 64, "col", "row")],
    "vae": [(1, 1, 32, 512, 784, "row", "row"), (2, 1, 32, 512, 512, "row", "row"),
            (2, 1, 32, 512, 512, "row", "col"), (1, 1, 32, 784, 512, "row", "row"),
            (1, 1, 32, 512, 784, "row", "col"), (1, 1, 512, 784, 32, "col", "row"),
            (1, 1, 784, 512, 32, "col", "row"), (2, 1, 512, 512, 32, "col", "row")],
}
VARIANTS = (("blocked", False), ("subgroup", True))


def operands(dev, shape, rng):
    """The two operands of ``shape`` on ``dev`` as they lie in memory, and the product of them."""
    _, b, m, n, k, lhs, rhs = shape
    lead = (b,) if b > 1 else ()
    x = rng.standard_normal(lead + ((m, k) if lhs == "row" else (k, m))).astype(np.float32)
    y = rng.standard_normal(lead + ((k, n) if rhs == "row" else (n, k))).astype(np.float32)

    def product(x, y):
        return (x if lhs == "row" else x.swapaxes(-1, -2)) @ (y if rhs == "row" else y.swapaxes(-1, -2))
    return [fa.device_put(v, dev) for v in (x, y)], product


def lowered(dev, f, args, subgroups, calls):
    """``f`` jitted on ``dev`` and called once with the subgroup form on or off: ``(first call's CPU s, a
    callable running ``calls`` calls)``."""
    old = dot.SUBGROUP_PRODUCTS
    dot.SUBGROUP_PRODUCTS = subgroups
    try:
        jf = fa.jit(lambda *a: f(*a), device=dev)   # a new function: fa.jit caches by function
        t = time.process_time()
        fa.block_until_ready(jf(*args))
        first = time.process_time() - t
    finally:
        dot.SUBGROUP_PRODUCTS = old

    def run():
        for _ in range(calls - 1):
            jf(*args)
        fa.block_until_ready(jf(*args))
    return first, run


def main(argv=None):
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10, workloads=SHAPES,
                                    flags={"--cold": "Mesa's shader cache off; first calls printed"})

    def measure(shape, rng):
        args, f = operands(dev, shape, rng)
        built = [lowered(dev, f, args, on, a.calls) for _, on in VARIANTS]

        def row(ms):
            count, b, m, n, k, lhs, rhs = shape
            first = f" | {built[0][0]:6.2f} {built[1][0]:6.2f}" if a.cold else ""
            return (f"{count:>2} {f'{b}x{m}x{n}x{k}':>20} {lhs + ',' + rhs:>8} | {ms[0]:7.3f} {ms[1]:8.3f} | "
                    f"{ms[1] / ms[0]:5.2f}{first}")
        return [run for _, run in built], row
    _timing.product_sweep(a, SHAPES, f"{'x':>2} {'batch x M x N x K':>20} {'layout':>8} | CPU ms/call blocked "
                          "subgroup | ratio" + (" | first call s blocked subgroup" if a.cold else ""), measure)

if __name__ == "__main__":
    main()
