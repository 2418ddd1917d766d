"""Row kernels on webgpu:0 (lavapipe) keeping a computed row in a private array between their loops, and
reductions into many outputs keeping a work item per output, against main's forms (issue 28).

A work item's row kernel (``lowering/kernels/groups/reduce.py``, a work item per output) loops over its row once per
dependent reduction and once more for its row values: layernorm's mean, variance and normalised row; softmax's
maximum, sum of exps and quotient. Each loop computed its operand again from the buffers: the transformer's
embedding-and-layernorm kernels gathered the token and position rows three times (index loads and clamps
included), its attention softmax evaluated the scale, the causal mask and the head transpose twice or three
times. With the scheduler option ``row_cache`` (``webgpu/backend.py``'s ``CPU_ROW_CACHE``, the longest row kept:
CPU adapters, native, not browser bundles) the first loop stores such an operand in a private array of the row
and the later loops read it there (``_ReduceKernel.cache_rows``). With ``reduce_per_item`` (``CPU_REDUCE_PER_ITEM``)
a reduction into many outputs of rows of up to a few thousand elements (a layernorm's column sums over the batch's
rows, a softmax over [256, 1024]) keeps a work item per output instead of a work-group combining through barriers
(``ReduceGroup.cooperative``). Each program is jitted three ways in one process (``off``: both options off, as
main; ``cache``: the row cache only; ``both``), the options swapped while the program is scheduled, and called
interleaved: best of ``--rounds`` rounds of ``--calls`` calls, process CPU time (lavapipe's threads included) and
wall-clock per call.

Programs: ``layernorm`` (the transformer's ``tok[ids] + pos[arange]`` then a layernorm, ``[16, 64, 64]``),
``softmax`` (a causal ``where(mask, s * scale, -1e9)`` softmax over ``[16, 4, 64, 64]``), ``columns`` (a layernorm
gradient's column sums, ``[1024, 64]`` over axis 0), ``wide`` (a softmax over ``[256, 1024]``), ``step``
(``backward_steps.py``'s transformer training step).

With ``--uniform-rows`` the variants are ``groups/reduce.py``'s ``UNIFORM_ROWS`` off (``storage``: the rows read from
storage bindings) and on (``uniform``: through uniform bindings, a larger operand through windows of whole rows, a
dispatch per window), row cache and a work item per output on in both (twentieth session).

Usage: python benchmarks/webgpu_row_cache.py [--rounds 7] [--calls 4] [--programs layernorm,softmax,columns,wide,step]
[--uniform-rows]
Asserts nothing.
"""

from __future__ import annotations

import argparse

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import backward_steps
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels.groups import reduce
from fnarray.lowering.webgpu import backend

B, T, D, V, HEADS = 16, 64, 64, 96, 4
#: (name, CPU_ROW_CACHE, CPU_REDUCE_PER_ITEM)
VARIANTS = (("off", 0, None), ("cache", backend.CPU_ROW_CACHE, None),
            ("both", backend.CPU_ROW_CACHE, backend.CPU_REDUCE_PER_ITEM))
#: ``--uniform-rows``: (name, ``reduce.UNIFORM_ROWS``)
UNIFORM_VARIANTS = (("storage", False), ("uniform", True))


def _layernorm(ids, tok, pos, g, b):
    h = tok[ids] + pos[fnp.arange(T)]
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / fnp.sqrt(var + 1e-5) * g + b


def _softmax(s):
    causal = fnp.tril(fnp.ones((T, T), bool))
    return fa.nn.softmax(fnp.where(causal, s * 0.125, -1e9), axis=-1)


def _columns(x, m, s):
    return fnp.sum((x - m) / s * x, axis=0), fnp.sum(x, axis=0)


def programs(dev):
    """``{name: (function, arguments on dev)}``."""
    rng = np.random.default_rng(0)
    put = lambda a: fa.device_put(a, dev)   # noqa: E731
    ln_args = [put(rng.integers(0, V, (B, T)).astype(np.int32))] + [
        put(rng.normal(size=s).astype(np.float32)) for s in ((V, D), (T, D), (D,), (D,))]
    out = {"layernorm": (_layernorm, ln_args),
           "softmax": (_softmax, [put(rng.normal(size=(B, HEADS, T, T)).astype(np.float32))])}
    out["columns"] = (_columns, [put(rng.normal(size=(1024, D)).astype(np.float32)),
                                 put(rng.normal(size=(1024, 1)).astype(np.float32)),
                                 put(rng.uniform(1, 2, size=(1024, 1)).astype(np.float32))])
    out["wide"] = (lambda x: fa.nn.softmax(x, axis=-1), [put(rng.normal(size=(256, 1024)).astype(np.float32))])
    out["step"] = backward_steps.STEPS["transformer"](dev)
    return out


def _built(dev, f, args, calls, cache, per_item):
    """``_timing.jit_swapped`` with ``CPU_ROW_CACHE = cache`` and ``CPU_REDUCE_PER_ITEM = per_item``."""
    old = backend.CPU_REDUCE_PER_ITEM
    backend.CPU_REDUCE_PER_ITEM = per_item
    try:
        return _timing.jit_swapped(fa, backend, "CPU_ROW_CACHE", cache, dev, f, args, calls)
    finally:
        backend.CPU_REDUCE_PER_ITEM = old


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--programs", default="layernorm,softmax,columns,wide,step")
    ap.add_argument("--uniform-rows", action="store_true", help="reduce.UNIFORM_ROWS off against on")
    a = ap.parse_args(argv)
    print(_timing.load_line())
    dev = fa.get_device("webgpu:0")
    if a.uniform_rows:
        return _uniform_rows(dev, a)
    print(f"webgpu:0: {dev.description}; CPU ms (wall ms) per call, ratios to off")
    print("| program | kernels off / both | " + " | ".join(n for n, _, _ in VARIANTS) + " | cache / off | both / off |")
    print("|---|---:|" + "---:|" * (len(VARIANTS) + 2))
    table = programs(dev)
    for name in a.programs.split(","):
        f, args = table[name]
        built = [_built(dev, f, args, a.calls, cache, per_item) for _, cache, per_item in VARIANTS]
        wall, cpu = _timing.best_of([run for run, _ in built], a.rounds)
        c = [x / a.calls * 1e3 for x in cpu]
        w = [x / a.calls * 1e3 for x in wall]
        cells = " | ".join(f"{ci:.2f} ({wi:.2f})" for ci, wi in zip(c, w, strict=True))
        print(f"| {name} | {len(built[0][1])} / {len(built[-1][1])} | {cells} | {c[1] / c[0]:.2f} ({w[1] / w[0]:.2f}) "
              f"| {c[2] / c[0]:.2f} ({w[2] / w[0]:.2f}) |", flush=True)
    print(_timing.load_line())


def _uniform_rows(dev, a):
    """``--uniform-rows``: each program jitted with ``reduce.UNIFORM_ROWS`` off and on, called interleaved."""
    print(f"webgpu:0: {dev.description}; CPU ms (wall ms) per call, ratio uniform / storage")
    print("| program | launches storage / uniform | storage | uniform | uniform / storage |")
    print("|---|---:|---:|---:|---:|")
    table = programs(dev)
    for name in a.programs.split(","):
        f, args = table[name]
        built = [_timing.jit_swapped(fa, reduce, "UNIFORM_ROWS", on, dev, f, args, a.calls)
                 for _, on in UNIFORM_VARIANTS]
        wall, cpu = _timing.best_of([run for run, _ in built], a.rounds)
        c = [x / a.calls * 1e3 for x in cpu]
        w = [x / a.calls * 1e3 for x in wall]
        print(f"| {name} | {len(built[0][1])} / {len(built[1][1])} | {c[0]:.2f} ({w[0]:.2f}) | {c[1]:.2f} ({w[1]:.2f}) "
              f"| {c[1] / c[0]:.2f} ({w[1] / w[0]:.2f}) |", flush=True)
    print(_timing.load_line())


if __name__ == "__main__":
    main()
