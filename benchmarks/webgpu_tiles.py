"""Every subgroup tile of the VAE's and transformer's matrix products on webgpu:0 (lavapipe), against the tile
the cost model takes (issue 28).

``dot.SUBGROUP_TUNABLE`` (``lowering/kernels/groups/dot.py``) declares the subgroup form's tiles (rows per subgroup
x columns per work item, at most ``BLOCK_ACCUMULATORS`` accumulators); in mode ``"fast"`` (the default)
``_subgroup_cost`` picks one per product, untimed. Each product of ``webgpu_products.SHAPES`` is jitted once per
tile (``fa.config.autotune = "off"`` with ``dot.SUBGROUP_TILE`` set to the tile) and once as mode ``"fast"``
builds it; the calls are timed interleaved: process CPU time (lavapipe's threads included) of ``--calls`` calls,
best of ``--rounds``. ``*`` marks the tile whose kernel source is the model's; ``max |d|`` is the largest
difference of any tile's result from the model's (each accumulator adds in the contraction's order: 0).

Usage: python benchmarks/webgpu_tiles.py [--workloads vae,transformer] [--rounds 5] [--calls 10] [--tiles 32x4,32x4r]
Asserts nothing.
"""

from __future__ import annotations

import sys

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import fnarray as fa
from fnarray.lowering.kernels.groups import dot
from webgpu_products import SHAPES, operands


def tiles(only=None) -> list:
    """The subgroup tiles ``SUBGROUP_TUNABLE`` declares for lavapipe's 8 lanes, the default first (``only``: the
    names, ``name``, of those to keep)."""
    out = dot.SUBGROUP_TUNABLE.candidates(dict(dot.SUBGROUP_TILE), {"lanes": 8})
    return [t for t in out if only is None or name(t) in only]


def name(tile) -> str:
    """A tile's column name: rows x cols, ``r`` for the row order (``_accumulate``'s ``order="rows"``)."""
    return f"{tile['rows']}x{tile['cols']}" + ("r" if tile.get("order") == "rows" else "")


def built(dev, f, args, tile, calls):
    """``(run, dot source, result)`` of ``f`` jitted with the subgroup ``tile`` forced (``None``: as mode
    ``"fast"`` chooses); ``run`` makes ``calls`` calls."""
    old_mode, old_tile = fa.config.autotune, dot.SUBGROUP_TILE
    fa.config.autotune = "fast" if tile is None else "off"
    dot.SUBGROUP_TILE = tile or old_tile
    try:
        jf = fa.jit(lambda *a: f(*a), device=dev)   # a new function: fa.jit caches by function
        out = np.asarray(jf(*args))
        source = [k.source for k in jf.lower(*args).kernels() if "dot" in k.name]
    finally:
        fa.config.autotune, dot.SUBGROUP_TILE = old_mode, old_tile

    def run():
        for _ in range(calls - 1):
            jf(*args)
        fa.block_until_ready(jf(*args))
    return run, source, out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    only = None
    if "--tiles" in argv:   # a comma-separated list of tile names (``name``): only those
        at = argv.index("--tiles")
        only, argv[at:at + 2] = argv[at + 1].split(","), []
    a, dev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10, workloads=SHAPES)
    rng = np.random.default_rng(0)
    names = [name(t) for t in tiles(only)]
    for work in a.workloads.split(","):
        print(f"{'x':>2} {'batch x M x N x K':>18} {'layout':>8} | CPU ms/call " + " ".join(f"{n:>7}" for n in names)
              + " | model  max |d|")
        for shape in SHAPES[work]:
            args, f = operands(dev, shape, rng)
            runs = [built(dev, f, args, t, a.calls) for t in tiles(only)]
            model = built(dev, f, args, None, a.calls)
            _, cpu = _timing.best_of([r[0] for r in runs], a.rounds, warm=1)
            marks = ["*" if r[1] == model[1] else " " for r in runs]
            diff = max(float(np.max(np.abs(r[2] - model[2]))) for r in runs)
            count, b, m, n, k, lhs, rhs = shape
            cells = " ".join(f"{c / a.calls * 1e3:6.2f}{s}" for c, s in zip(cpu, marks, strict=True))
            print(f"{count:>2} {f'{b}x{m}x{n}x{k}':>18} {lhs + ',' + rhs:>8} | {'':11} {cells} | "
                  f"{names[marks.index('*')] if '*' in marks else '?':>5}  {diff:.1g}", flush=True)
    print(_timing.load_line())


if __name__ == "__main__":
    main()
