"""Concatenations of many slices of one array, per element, against the number of pieces: the chain read once at
shifted slices (``kernels/uniform_pieces.py``) against main's forms, and against NumPy (issue 28).

An image grid concatenates ``n`` images sliced out of one ``[n, h*w]`` array, each reshaped and transposed (the
VAE grid of ``programs.py``: 100 images, two levels of concatenation). Main's kernel chose the piece per element
by a ``select`` chain (every piece evaluated) or, with ``concat_branches`` (lavapipe, PoCL), a tree of ``if``s,
whose cost per element still grew with the pieces (SIMD lanes run a divergent branch's index arithmetic under a
mask). Each case is jitted twice in one process, with ``emitter.UNIFORM_PIECES`` on (this branch) and off (main's
kernel, byte-identical), and the calls are interleaved with raw NumPy's own ``concatenate`` of the same pieces:
best of ``--rounds`` rounds of ``--calls`` calls, wall-clock nanoseconds per output element (launch included) and
the ratios new / main and new / NumPy. On PoCL (opencl:0 here) the backend turns the form off (its branch tree
measured faster), so new and main are the same kernel there: the rows check that nothing changed.

Cases: ``grid`` (``nrow x nrow`` images, ``programs.py``'s ``image_grid``: ``nrow`` row concatenations of
``nrow`` pieces, then one of ``nrow`` rows), ``row`` (``n`` transposed images side by side, one level).

Usage: python benchmarks/concat_pieces.py [--devices webgpu:0,opencl:0] [--pieces 4,25,100,400] [--side 32]
                                          [--rounds 5] [--calls 4]
Asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels import emitter


def _grid_fn(np_, n, side):
    nrow = math.isqrt(n)

    def grid(x):
        ims = [x[i].reshape((side, side)) for i in range(nrow * nrow)]
        rows = [np_.concatenate([ims[r * nrow + c].T for c in range(nrow)][::-1], axis=0) for r in range(nrow)]
        return np_.concatenate(rows, axis=1).T
    return grid


def _row_fn(np_, n, side):
    def row(x):
        return np_.concatenate([x[i].reshape((side, side)).T for i in range(n)], axis=1)
    return row


CASES = {"grid": _grid_fn, "row": _row_fn}


def _runner(f, args, calls):
    def run():
        for _ in range(calls - 1):
            f(*args)
        fa.block_until_ready(f(*args))
    return run


def _numpy_runner(f, x, calls):
    def run():
        for _ in range(calls):
            f(x)
    return run


def measure(dev, case, n, side, rounds, calls):
    """``(ns per element new, main, numpy, first-call seconds new, main)`` of one case."""
    x = np.random.default_rng(0).normal(size=(n, side * side)).astype(np.float32)
    xd = fa.device_put(x, dev)
    runs, firsts = [], []
    for on in (True, False):
        emitter.UNIFORM_PIECES = on
        try:
            jf = fa.jit(CASES[case](fnp, n, side), device=dev)
            want = CASES[case](np, n, side)(x)
            t = time.perf_counter()
            got = np.asarray(jf(xd))
            firsts.append(time.perf_counter() - t)
            np.testing.assert_array_equal(got, want)   # a wrong kernel is not timed
        finally:
            emitter.UNIFORM_PIECES = True
        runs.append(_runner(jf, (xd,), calls))
    runs.append(_numpy_runner(CASES[case](np, n, side), x, calls))
    wall, _ = _timing.best_of(runs, rounds)
    size = want.size
    return [w / calls / size * 1e9 for w in wall] + firsts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="webgpu:0,opencl:0")
    ap.add_argument("--pieces", default="4,25,100,400", help="images (squares for grid)")
    ap.add_argument("--cases", default="grid,row")
    ap.add_argument("--side", type=int, default=32, help="image side (elements)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4)
    args = ap.parse_args()
    print(_timing.load_line())
    print(f"{'device':10} {'case':5} {'pieces':>6} {'new ns/el':>10} {'main ns/el':>11} {'numpy ns/el':>12} "
          f"{'new/main':>9} {'new/numpy':>10} {'first new s':>12} {'first main s':>13}")
    for name, dev in _timing.available_devices(fa, args.devices):
        for case in args.cases.split(","):
            for n in map(int, args.pieces.split(",")):
                new, old, raw, f_new, f_old = measure(dev, case, n, args.side, args.rounds, args.calls)
                print(f"{name:10} {case:5} {n:6d} {new:10.2f} {old:11.2f} {raw:12.2f} {new / old:9.3f} "
                      f"{new / raw:10.2f} {f_new:12.2f} {f_old:13.2f}", flush=True)
    print(_timing.load_line())


if __name__ == "__main__":
    main()
