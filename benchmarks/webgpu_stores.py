"""The VAE and transformer steps' products on webgpu:0 (lavapipe) with their outputs stored four columns at a time
against one element per store (issue 28).

lavapipe stores each lane's element of a work item's scalar store in a loop; with the scheduler option
``dot_store4`` (native webgpu on a CPU adapter) the blocked and subgroup products (``lowering/kernels/groups/dot.py``
``DotGroup._store_block``) store four adjacent float32 columns as one ``vec4`` and read the epilogue's operands
four elements at a time where aligned; ``dot.WIDE_STORES = False`` restores the scalar kernels. Each product of ``SHAPES`` (its count per step beside it) is timed plain and with the
epilogue a training step fuses into it (``EPILOGUES``), both ways in one process, interleaved: process CPU time
(lavapipe's threads included) of ``--calls`` calls whose outputs are all kept alive (a step writes fresh buffers,
not the pool's last one), best of ``--rounds``. The last line per workload sums count x time over its products.

Usage: python benchmarks/webgpu_stores.py [--workloads vae,transformer] [--rounds 5] [--calls 10]
Asserts nothing (tests/test_webgpu_backend.py checks the results).
"""

from __future__ import annotations

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import fnarray as fa
from fnarray.lowering.kernels.groups import dot

#: workload -> [(count per step, M, N, K, lhs layout, epilogue)]: a layout "col" reads the lhs transposed
#: (``x.T @ d``, a weight gradient); the rhs is ``[K, N]`` as it lies
SHAPES = {
    "vae": [(1, 784, 512, 32, "col", "momentum"), (2, 512, 512, 32, "col", "momentum"),
            (1, 512, 784, 32, "col", "momentum"), (2, 32, 512, 512, "row", "relu"),
            (1, 32, 784, 512, "row", "bias")],
    "transformer": [(2, 1024, 256, 64, "row", "gelu"), (8, 1024, 64, 64, "row", "none"),
                    (2, 256, 64, 1024, "col", "adam"), (2, 64, 256, 1024, "col", "adam")],
}
VARIANTS = (("scalar", False), ("vec4", True))


def epilogue(kind):
    """``(f(product, a, b), what a and b are)``: the elementwise tail a step fuses into the product."""
    import fnarray.numpy as fnp
    if kind == "momentum":   # the VAE's momentum SGD: m' = 0.9 m + g, p' = p - 1e-3 m'
        def f(g, m, p):
            m2 = 0.9 * m + g
            return p - 1e-3 * m2, m2
    elif kind == "adam":     # an Adam update's moments and parameter
        def f(g, m, p):
            m2 = 0.9 * m + 0.1 * g
            return p - 3e-3 * m2 / (fnp.sqrt(0.999 * p * p + 0.001 * g * g) + 1e-8), m2
    elif kind == "relu":
        def f(y, b, _):
            return fnp.maximum(y + b[0], 0)
    elif kind == "bias":
        def f(y, b, _):
            return y + b[0]
    elif kind == "gelu":
        def f(y, b, _):
            z = y + b[0]
            return 0.5 * z * (1 + fnp.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))
    else:
        def f(y, *_):
            return y
    return f


def operands(dev, shape, rng):
    _, m, n, k, lhs, _ = shape
    x = rng.standard_normal((m, k) if lhs == "row" else (k, m)).astype(np.float32)
    y = rng.standard_normal((k, n)).astype(np.float32)
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)
    return [fa.device_put(v, dev) for v in (x, y, a, b)]


def lowered(dev, shape, args, wide, calls):
    """The product of ``shape`` with its epilogue, jitted on ``dev`` with vec4 stores on or off, called once:
    a callable running ``calls`` calls, every output kept until the last is waited for."""
    tail, lhs = epilogue(shape[5]), shape[4]

    def f(x, y, a, b):
        return tail((x if lhs == "row" else x.T) @ y, a, b)
    old = dot.WIDE_STORES
    dot.WIDE_STORES = wide
    try:
        jf = fa.jit(f, device=dev)
        fa.block_until_ready(jf(*args))
    finally:
        dot.WIDE_STORES = old

    def run():
        kept = [jf(*args) for _ in range(calls)]
        fa.block_until_ready(kept)
    return run


def main(argv=None):
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10, workloads=SHAPES)

    def measure(shape, rng):
        args = operands(dev, shape, rng)

        def row(ms):
            count, m, n, k, lhs, tail = shape
            return (f"{count:>2} {f'{m}x{n}x{k}':>16} {lhs:>4} {tail:>9} | {ms[0]:7.3f} {ms[1]:7.3f} | "
                    f"{ms[1] / ms[0]:5.2f}")
        return [lowered(dev, shape, args, wide, a.calls) for _, wide in VARIANTS], row
    _timing.product_sweep(a, SHAPES, f"{'x':>2} {'M x N x K':>16} {'lhs':>4} {'epilogue':>9} | "
                          "CPU ms/call scalar vec4 | ratio", measure)

if __name__ == "__main__":
    main()
