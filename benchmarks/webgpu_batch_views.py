"""The transformer training step on webgpu:0 (lavapipe) with its attention products reading per-head operand views
in place against copying them first (issue 28).

The attention products of ``examples/transformer_lm.py`` multiply ``[batch, seq, heads, d]`` views per
(batch, head): the two batch dimensions do not collapse to one stride, so without the scheduler option
``dot_batch_views`` (``lowering/kernels/groups/dot.py``, ``DotGroup.plan``'s ``split``) each such operand is first
written in (batch, rows, columns) order by a ``dot_operand_copy`` kernel; with it the product unravels the batch
index over both dimensions and reads the view where it lies. ``dot.BATCH_VIEWS`` switches the option's effect.
``backward_steps.py``'s transformer step (batch 16, context 64, width 64, 2 layers, Adam) is jitted both ways in
one process and called interleaved: best of ``--rounds`` rounds of ``--calls`` calls, process CPU time (lavapipe's
threads included) and wall-clock per step, and each variant's kernels per step and copies per step.

Usage: python benchmarks/webgpu_batch_views.py [--rounds 7] [--calls 4]
Asserts nothing.
"""

from __future__ import annotations

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import backward_steps
import fnarray as fa
from fnarray.lowering.kernels.groups import dot

VARIANTS = (("copies", False), ("views", True))


def lowered(dev, step, args, views, calls):
    """``(callable making calls steps, kernels per step, dot_operand_copy kernels per step)`` with
    ``dot.BATCH_VIEWS = views`` while the step is scheduled."""
    run, names = _timing.jit_swapped(fa, dot, "BATCH_VIEWS", views, dev, step, args, calls)
    return run, len(names), sum(n.startswith("dot_operand_copy") for n in names)


def main(argv=None):
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=7, calls=4)
    step, args = backward_steps.STEPS["transformer"](dev)
    built = [lowered(dev, step, args, views, a.calls) for _, views in VARIANTS]
    wall, cpu = _timing.best_of([run for run, _, _ in built], a.rounds)
    print(f"{'variant':>8} | {'kernels':>7} {'copies':>6} | {'CPU ms/step':>11} {'wall ms/step':>12}")
    for (name, _), (_, kernels, copies), w, c in zip(VARIANTS, built, wall, cpu, strict=True):
        print(f"{name:>8} | {kernels:7d} {copies:6d} | {c / a.calls * 1e3:11.1f} {w / a.calls * 1e3:12.1f}")
    print(f"views / copies: CPU {cpu[1] / cpu[0]:.2f}x, wall {wall[1] / wall[0]:.2f}x")
    print(_timing.load_line())


if __name__ == "__main__":
    main()
