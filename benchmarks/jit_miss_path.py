"""jit's miss path, phase by phase, for one decode step's program (issue 28, first calls on mlx:0).

The step is ``programs.py``'s ``decode_jit`` step (a cache grown by a row, ``softmax(q @ cache.T) @ cache``: 13
equations). For each phase (``trace``: ``trace_to_program``; ``cse``; ``Generated``: the mlx program's passes and
source; ``compile_program``: partitioning, passes, lowering and compiling for the device) it prints the best
microseconds of 9 rounds and the Python bytecode instructions the phase executes (``sys.settrace`` opcode
events: the same count on a loaded machine, where times scatter 10-30%; a proxy for Python-bound work, not a
time). Run it from two checkouts to compare them.

Usage: PYTHONPATH=. python benchmarks/jit_miss_path.py [--device mlx:0]
Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import timeit

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import passes
from fnarray.core.builder import trace_to_program
from fnarray.core.shaped import ShapedArray
from fnarray.devices import partition

W = 64


def _step(cache, q, row):
    cache = fnp.concatenate([cache, row], axis=0)
    sc = q @ cache.T
    e = fnp.exp(sc - sc.max(axis=-1, keepdims=True))
    return [cache, (e / e.sum(axis=-1, keepdims=True)) @ cache]


def _opcodes(f) -> int:
    """Bytecode instructions ``f()`` executes (after one call that warms its caches)."""
    f()
    n = [0]

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            n[0] += 1
        return tracer
    sys.settrace(tracer)
    try:
        f()
    finally:
        sys.settrace(None)
    return n[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="mlx:0")
    args = ap.parse_args(argv)
    dev = fa.devices(args.device.split(":")[0])[int(args.device.split(":")[1])]
    avals = tuple(ShapedArray(s, np.dtype(np.float32)) for s in ((10, W), (1, W), (1, W)))
    prog, _ = trace_to_program(_step, avals)
    phases = [("trace", lambda: trace_to_program(_step, avals)), ("cse", lambda: passes.cse(prog)),
              ("compile_program", lambda: partition.compile_program(prog, dev))]
    if dev.platform == "cpu" and args.device.startswith("mlx"):
        from fnarray.lowering.mlx.program import Generated
        phases.insert(2, ("Generated", lambda: Generated(prog)))
    print(f"jit miss path of a {len(prog.eqns)}-equation decode step on {dev}")
    print("| phase | best us | opcodes |\n|---|---:|---:|")
    for name, f in phases:
        us = min(timeit.repeat(f, number=200, repeat=9)) / 200 * 1e6
        print(f"| {name} | {us:.1f} | {_opcodes(f)} |")


if __name__ == "__main__":
    main()
