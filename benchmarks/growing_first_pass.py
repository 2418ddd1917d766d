"""First and second passes of a loop whose shapes grow, fnarray mlx:0 against raw MLX in one process (issue 28).

The loop is ``benchmarks/programs.py``'s decode step (concatenate a row to the cache, a softmax over ``q @
cache.T``, its product with the cache), ``--steps`` steps from a one-row cache of width ``w``: every step's shapes
are new. ``programs.py``'s "first" column is a fresh process's first pass, which also pays each library's first
calls; here both libraries first run a warm-up pass at another width, then each of ``--widths`` trials runs a
first pass at a width not seen before (each key of each step new) and a second pass at that width (fnarray's
tapes or programs of the first), alternating fnarray and raw MLX. Times: the thread's CPU time, with the garbage
collector off during a pass (a full collection of fnarray's ~70k objects lands in some passes, ~30 ms); printed:
the medians in ms and fnarray over raw.

    PYTHONPATH=. python benchmarks/growing_first_pass.py [--jit] [--steps 40] [--widths 10]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import load_line  # noqa: E402

import numpy as np  # noqa: E402


def _loop(np_, put, ready, jit, steps):
    """``run(w)``: ``steps`` decode steps from a one-row cache of width ``w`` in namespace ``np_``."""
    def step(cache, q, row):
        cache = np_.concatenate([cache, row], axis=0)
        sc = q @ cache.T
        e = np_.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    f = jit(step) if jit is not None else step

    def run(w):
        q, row = put(np.full((1, w), 0.01, np.float32)), put(np.full((1, w), 0.02, np.float32))
        cache = put(np.zeros((1, w), np.float32))
        for _ in range(steps):
            cache, out = f(cache, q, row)
        ready(out)
    return run


def _pass_ms(run, w) -> float:
    gc.collect()
    gc.disable()
    try:
        t = time.thread_time()
        run(w)
        return (time.thread_time() - t) * 1e3
    finally:
        gc.enable()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jit", action="store_true", help="the step under fnarray.jit / mx.compile")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--widths", type=int, default=10)
    args = ap.parse_args(argv)
    import fnarray as fa
    import fnarray.numpy as fnp
    import mlx.core as mx
    dev = fa.get_device("mlx:0")
    ours = _loop(fnp, lambda x: fa.device_put(x, dev), lambda y: y.block_until_ready(),
                 fa.jit if args.jit else None, args.steps)
    raw = _loop(mx, mx.array, mx.eval, mx.compile if args.jit else None, args.steps)
    print(load_line())
    for run in (ours, raw):  # (each library's first calls, outside the trials)
        run(64)
        run(64)
    times = {k: [] for k in ("first", "second", "raw first", "raw second")}
    for w in range(16, 16 + args.widths):
        for label, run in (("", ours), ("raw ", raw)):
            times[label + "first"].append(_pass_ms(run, w))
            times[label + "second"].append(_pass_ms(run, w))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'jitted' if args.jit else 'eager'} decode, {args.steps} steps, median of {args.widths} widths (ms, "
          "thread CPU):")
    for k in ("first", "second"):
        print(f"  {k:6} pass: fnarray {med[k]:8.2f}  raw MLX {med['raw ' + k]:7.2f}  "
              f"x raw {med[k] / med['raw ' + k]:6.2f}")


if __name__ == "__main__":
    main()
