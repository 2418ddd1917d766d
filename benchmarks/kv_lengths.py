"""Decode step time over a large, mostly empty ``KVCache``: attention masked to the filled keys (before) against
``key_value_seq_lengths`` (``KVCache.attend`` now: the fused kernel's key loop stops at the filled length).

The model is ``examples/llm.py``'s llama architecture at ``benchmarks/llm.py``'s size (width 256, 8 query / 4
key-value heads, 4 blocks, SwiGLU 768, vocabulary 96), randomly initialised, float32. Per device, in one interleaved
run (best of ``--number`` alternating calls after two warm-up calls each): the example's jitted decode step with
``--filled`` positions filled in caches of ``--capacity``, once with ``KVCache.attend`` masking (the form before
key lengths: ``dot_product_attention(q, keys, values, mask=causal_mask(1))``, every position walked) and once as it
is; and one ``dot_product_attention`` call of one head group (8 / 4 heads of 64) both ways. The greedy tokens of
both forms are checked equal.

    PYTHONPATH=. python benchmarks/kv_lengths.py [--devices opencl:0,webgpu:0] [--capacity 1024] [--filled 16]

The load average is printed first: compare runs at similar loads (docs/traps.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import importlib.util  # noqa: E402

import numpy as np  # noqa: E402

VOCAB = 96


def _bench_llm():
    """``benchmarks/llm.py`` (its interleaved timer ``_best``), loaded by path: ``llm`` is the example's name here."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm.py")
    spec = importlib.util.spec_from_file_location("bench_llm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _masked_attend(self, queries, *, scale=None):
    """``KVCache.attend`` before key lengths: the whole capacity, a mask keeping the filled keys."""
    from fnarray.nn import dot_product_attention
    return dot_product_attention(queries, self.keys, self.values, mask=self.causal_mask(queries.shape[1]),
                                 scale=scale)


def _decode_step(fa, llm, model, dev, filled, capacity, masked):
    """A zero-argument decode call (its jitted functions traced here, with the chosen ``attend``) and its token."""
    from fnarray import nn
    original = nn.KVCache.attend
    if masked:
        nn.KVCache.attend = _masked_attend
    try:
        prefill, decode, counts = llm.make_generators(dev, 0.9, 1.0)
        ids = fa.device_put(np.arange(filled, dtype=np.int32)[None] % VOCAB, dev)
        key = fa.random.key(0)
        token, caches = prefill(model, model.make_caches(1, capacity, dev), ids, key, greedy=True)
        first = int(decode(model, caches, token, key, greedy=True)[0][0])
        assert counts["decode"] == 1, counts   # traced here, with this attend
    finally:
        nn.KVCache.attend = original

    def run():
        return int(decode(model, caches, token, key, greedy=True)[0][0])
    return run, first


def _attention_calls(fa, dev, filled, capacity):
    """One head group's attention over the cache both ways (masked, key lengths), jitted."""
    from fnarray import nn
    rng = np.random.default_rng(0)
    q = fa.device_put(rng.standard_normal((1, 1, 8, 64)).astype(np.float32), dev)
    k, v = (fa.device_put(rng.standard_normal((1, capacity, 4, 64)).astype(np.float32), dev) for _ in range(2))
    mask = fa.device_put((np.arange(capacity) < filled)[None, None, None, :], dev)
    lens = fa.device_put(np.array([filled], np.int32), dev)
    masked = fa.jit(lambda q, k, v, m: nn.dot_product_attention(q, k, v, mask=m))
    lengths = fa.jit(lambda q, k, v, n: nn.dot_product_attention(q, k, v, key_value_seq_lengths=n))
    return (lambda: masked(q, k, v, mask).block_until_ready()), (lambda: lengths(q, k, v, lens).block_until_ready())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--filled", type=int, default=16)
    args = ap.parse_args(argv)
    import fnarray as fa
    import llm
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    base = llm.Llama(VOCAB, 256, 8, 4, 4, 768, key=fa.random.key(0))
    print(f"cache {args.capacity} positions, {args.filled} filled; best of {args.number} interleaved calls")
    print(f"{'device':10} {'call':22} {'masked ms':>10} {'lengths ms':>10} {'masked / lengths':>16}")
    for name in args.devices.split(","):
        try:
            dev = fa.get_device(name)
        except Exception as e:  # a device this machine lacks: say so and go on
            print(f"{name:10} unavailable: {e}")
            continue
        model = fa.device_put(base, dev)
        before, tok_before = _decode_step(fa, llm, model, dev, args.filled, args.capacity, masked=True)
        after, tok_after = _decode_step(fa, llm, model, dev, args.filled, args.capacity, masked=False)
        assert tok_before == tok_after, (tok_before, tok_after)
        fns = [before, after, *_attention_calls(fa, dev, args.filled, args.capacity)]
        times = _bench_llm()._best(fns, args.number)
        for label, (m, n) in (("decode step (model)", times[:2]), ("attention, 1 query", times[2:])):
            print(f"{name:10} {label:22} {m * 1e3:10.2f} {n * 1e3:10.2f} {m / n:16.2f}", flush=True)


if __name__ == "__main__":
    main()
