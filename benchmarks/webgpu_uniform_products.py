"""The matrix products of the transformer and VAE training steps on webgpu:0 (lavapipe) with their small operands
read through uniform bindings against storage bindings (issue 28).

On a CPU adapter the scheduler option ``dot_uniform`` (``lowering/webgpu/backend.CPU_DOT_UNIFORM``, 64 KiB) binds a
product's ``vec4`` operand whose whole buffer fits as a WGSL ``var<uniform>`` array (``groups/dot.py``,
``_OperandReader.bind``): Mesa 22.3's lavapipe gathers a uniform array's per-lane elements at once and a storage
array's lane by lane. ``dot.UNIFORM_OPERANDS = False`` restores the storage bindings. Each product of
``webgpu_products.SHAPES`` (its count per step beside it) is lowered both ways in one process and timed
interleaved: process CPU time (lavapipe's threads included) of ``--calls`` calls, best of ``--rounds``; the last
line per workload sums count x time over its products; ``uniforms``: how many uniform arrays the new form binds.
``--windows`` compares ``dot.UNIFORM_WINDOWS`` off and on instead (a larger operand read four rows or columns a
load bound as several 64 KiB uniform windows of its buffer, sixteenth session), whole-buffer uniforms on in both.
``--row-windows`` compares ``dot.UNIFORM_ROW_WINDOWS`` off and on (a large lhs read four contraction steps a load
bound as one 64 KiB uniform window of its rows per dispatch, nineteenth session). ``--batch-windows`` compares
``dot.UNIFORM_BATCH_WINDOWS`` off and on (a batched product's operands bound as uniform windows of whole batch
elements, one dispatch per window, nineteenth session).
``--cold`` turns Mesa's shader cache off (``MESA_SHADER_CACHE_DISABLE``) and adds each variant's first call (compile
included, and one profiled call) in CPU seconds.

Usage: python benchmarks/webgpu_uniform_products.py [--workloads transformer,vae] [--rounds 5] [--calls 10] [--windows]
       [--row-windows] [--batch-windows] [--cold]
Asserts nothing.
"""

from __future__ import annotations

import os
import sys
import time

if "--cold" in sys.argv:
    os.environ["MESA_SHADER_CACHE_DISABLE"] = "true"   # before the driver loads

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import _timing  # noqa: E402
import fnarray as fa  # noqa: E402
from fnarray.lowering.kernels.groups import dot  # noqa: E402
from webgpu_products import SHAPES, operands  # noqa: E402


def uniforms(dev, f, args) -> int:
    """How many operands the product kernel of ``f`` binds as uniform arrays (``dot.UNIFORM_OPERANDS`` on)."""
    return sum(k.source.split("fn ")[0].count("var<uniform> uni") for k in fa.jit(f, device=dev).lower(*args).kernels())


def main(argv=None):
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10, workloads=SHAPES,
                                    flags={"--windows": "dot.UNIFORM_WINDOWS off against on",
                                           "--row-windows": "dot.UNIFORM_ROW_WINDOWS off against on",
                                           "--batch-windows": "dot.UNIFORM_BATCH_WINDOWS off against on",
                                           "--cold": "Mesa's shader cache off; first calls in CPU s"})
    switch, names = (("UNIFORM_WINDOWS", "no windows windows") if a.windows else
                     ("UNIFORM_ROW_WINDOWS", "storage row windows") if a.row_windows else
                     ("UNIFORM_BATCH_WINDOWS", "storage batch windows") if a.batch_windows else
                     ("UNIFORM_OPERANDS", "storage uniform"))

    def measure(shape, rng):
        args, f = operands(dev, shape, rng)
        runs, first = [], []
        for on in (False, True):
            t = time.process_time()
            runs.append(_timing.jit_swapped(fa, dot, switch, on, dev, f, args, a.calls)[0])
            first.append(time.process_time() - t)

        def row(ms):
            count, b, m, n, k, lhs, rhs = shape
            return (f"{count:>2} {f'{b}x{m}x{n}x{k}':>20} {lhs + ',' + rhs:>8} | {uniforms(dev, f, args):>8} | "
                    f"{ms[0]:7.3f} {ms[1]:8.3f} | {ms[1] / ms[0]:5.2f}"
                    + (f" | first call {first[0]:.2f} -> {first[1]:.2f} s" if a.cold else ""))
        return runs, row
    _timing.product_sweep(a, SHAPES, f"{'x':>2} {'batch x M x N x K':>20} {'layout':>8} | uniforms | "
                          f"CPU ms/call {names} | ratio", measure)


if __name__ == "__main__":
    main()
