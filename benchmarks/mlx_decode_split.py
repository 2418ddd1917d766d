"""mlx:0's uncompiled decode step against raw MLX's, split into graph building and evaluation (issue 30).

The model and both steps are ``benchmarks/llm.py``'s (``_fnarray_steps``' jitted decode step, ``_mlx_forward``'s
raw MLX step as mlx-lm writes it), the caches filled by a prefill of ``--prompt`` tokens and every step decoding
the same token at that position. Each of ``--calls`` rounds runs one fnarray step and one raw step, alternating;
per step it takes the process CPU time of building the graph (the jitted call, the raw forward) and of evaluating
it (reading the token), and prints the medians in microseconds and fnarray's total over raw's. The jitted programs
stay eager (``COMPILE_MODE = "never"``: ``benchmarks/llm.py``'s default ``--warm 2``, a generation's first 15
tokens); medians of many alternating calls are steadier than ``llm.py``'s best of a few on a loaded machine.

    PYTHONPATH=. python benchmarks/mlx_decode_split.py [--calls 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import benchmark_module, load_line  # noqa: E402

import numpy as np  # noqa: E402


def _steps(fa, llm, bench, m, prompt, capacity):
    """``(fnarray build, fnarray read, raw build, raw read)``: zero-argument callables of one decode step each."""
    import mlx.core as mx
    dev = fa.get_device("mlx:0")
    prefill, decode, _ = llm.make_generators(dev, 0.9, 1.0)
    key = fa.device_put(fa.random.key(0), dev)
    ids = np.arange(prompt, dtype=np.int32)[None] % bench.VOCAB
    token, caches = prefill(m, m.make_caches(1, capacity, dev), fa.device_put(ids, dev), key, greedy=True)
    at = fa.device_put(np.int32(prompt), dev)
    caches = tuple(type(c)(c.keys, c.values, at) for c in caches)
    cfg = (len(m.layers), m.layers[0].attention.heads, m.layers[0].attention.kv_heads, m.layers[0].attention.rope.dims)
    p = bench._mlx_params(m)
    raw = [[mx.zeros((1, cfg[2], capacity, cfg[3])), mx.zeros((1, cfg[2], capacity, cfg[3]))] for _ in range(cfg[0])]
    raw_token = bench._mlx_forward(mx, p, cfg, mx.array(ids), raw, 0)
    mx.eval(raw_token, raw)
    out = {}
    return (lambda: out.__setitem__("f", decode(m, caches, token, key, greedy=True)[0]),
            lambda: int(out["f"][0]),
            lambda: out.__setitem__("r", bench._mlx_forward(mx, p, cfg, raw_token[None], raw, prompt)),
            lambda: int(out["r"].item()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--capacity", type=int, default=128)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import fnarray as fa
    import fnarray.lowering.mlx.backend as mlx_backend
    import llm
    from fnarray import nn
    bench = benchmark_module("llm")
    mlx_backend.COMPILE_MODE = "never"
    print(load_line())
    base = llm.Llama(bench.VOCAB, 256, 8, 4, 4, 768, key=fa.random.key(0))
    dev = fa.get_device("mlx:0")
    print(f"{'weights':8} {'build':>7} {'eval':>7} {'raw build':>9} {'raw eval':>8} {'x raw (CPU)':>11}")
    for label, m in (("float32", base), ("4-bit", nn.quantize(base, group_size=64, bits=4))):
        fns = _steps(fa, llm, bench, fa.device_put(m, dev), args.prompt, args.capacity)
        times = [[] for _ in fns]
        for i in range(args.calls + 10):
            for k, fn in enumerate(fns):
                c = time.process_time()
                fn()
                if i >= 10:   # (the first calls trace and warm up)
                    times[k].append(time.process_time() - c)
        us = [statistics.median(t) * 1e6 for t in times]
        print(f"{label:8} {us[0]:7.0f} {us[1]:7.0f} {us[2]:9.0f} {us[3]:8.0f} {(us[0] + us[1]) / (us[2] + us[3]):11.2f}",
              flush=True)


if __name__ == "__main__":
    main()
