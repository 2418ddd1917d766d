"""The matrix products of the transformer and VAE training steps on webgpu:0 (lavapipe) with their small operands
read through uniform bindings against storage bindings (issue 28).

On a CPU adapter the scheduler option ``dot_uniform`` (``lowering/webgpu/backend.CPU_DOT_UNIFORM``, 64 KiB) binds a
product's ``vec4`` operand whose whole buffer fits as a WGSL ``var<uniform>`` array (``groups/dot.py``,
``_OperandReader.bind``): Mesa 22.3's lavapipe gathers a uniform array's per-lane elements at once and a storage
array's lane by lane. ``dot.UNIFORM_OPERANDS = False`` restores the storage bindings. Each product of
``webgpu_products.SHAPES`` (its count per step beside it) is lowered both ways in one process and timed
interleaved: process CPU time (lavapipe's threads included) of ``--calls`` calls, best of ``--rounds``; the last
line per workload sums count x time over its products; ``uniforms``: how many operands the new form binds so.

Usage: python benchmarks/webgpu_uniform_products.py [--workloads transformer,vae] [--rounds 5] [--calls 10]
Asserts nothing.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import fnarray as fa
from fnarray.lowering.kernels.groups import dot
from webgpu_products import SHAPES, operands


def uniforms(dev, f, args) -> int:
    """How many operands the product kernel of ``f`` binds as uniform arrays (``dot.UNIFORM_OPERANDS`` on)."""
    return sum(k.source.split("fn ")[0].count("var<uniform> uni") for k in fa.jit(f, device=dev).lower(*args).kernels())


def main(argv=None):
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10, workloads=SHAPES)

    def measure(shape, rng):
        args, f = operands(dev, shape, rng)
        runs = [_timing.jit_swapped(fa, dot, "UNIFORM_OPERANDS", on, dev, f, args, a.calls)[0] for on in (False, True)]

        def row(ms):
            count, b, m, n, k, lhs, rhs = shape
            return (f"{count:>2} {f'{b}x{m}x{n}x{k}':>20} {lhs + ',' + rhs:>8} | {uniforms(dev, f, args):>8} | "
                    f"{ms[0]:7.3f} {ms[1]:8.3f} | {ms[1] / ms[0]:5.2f}")
        return runs, row
    _timing.product_sweep(a, SHAPES, f"{'x':>2} {'batch x M x N x K':>20} {'layout':>8} | uniforms | "
                          "CPU ms/call storage uniform | ratio", measure)

if __name__ == "__main__":
    main()
