"""Decode and prefill step times over a large, mostly empty ``KVCache``: attention masked to the filled keys (before)
against ``key_value_seq_lengths`` (``KVCache.attend`` now: the fused kernel's key loop stops at the filled length) and,
for a prefill into a cache already holding keys, against ``mask="causal"`` with the key lengths (a causal mask with a
run-time offset: each query walks only the keys up to its position, no mask array read).

The model is ``examples/llm.py``'s llama architecture at ``benchmarks/llm.py``'s size (width 256, 8 query / 4
key-value heads, 4 blocks, SwiGLU 768, vocabulary 96), randomly initialised, float32. Per device, in one interleaved
run (best of ``--number`` alternating calls after two warm-up calls each): the example's jitted decode step with
``--filled`` positions filled in caches of ``--capacity``, once with ``KVCache.attend`` masking (the form before
key lengths: ``dot_product_attention(q, keys, values, mask=causal_mask(1))``, every position walked) and once as it
is; and one ``dot_product_attention`` call of one head group (8 / 4 heads of 64) both ways. The greedy tokens of
both forms are checked equal. With ``--prompt P`` also the jitted prefill of ``P`` tokens into caches holding
``--filled`` (attention before: ``mask=causal_mask(P)`` with the key lengths, every filled key walked and the mask
read per key; now ``mask="causal"``) and one such attention call of ``P`` queries, both ways.

    PYTHONPATH=. python benchmarks/kv_lengths.py [--devices opencl:0,webgpu:0] [--capacity 1024] [--filled 16]
        [--prompt 64]

The load average is printed first: compare runs at similar loads (docs/traps.md).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import available_devices, best_of, load_line  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


import numpy as np  # noqa: E402

VOCAB = 96


def _masked_attend(self, queries, *, scale=None):
    """``KVCache.attend`` before key lengths: the whole capacity, a mask keeping the filled keys."""
    from fnarray.nn import dot_product_attention
    return dot_product_attention(queries, self.keys, self.values, mask=self.causal_mask(queries.shape[1]),
                                 scale=scale)


def _mask_array_attend(self, queries, *, scale=None):
    """``KVCache.attend`` before ``mask="causal"``: the key lengths and, for several positions, a mask array."""
    from fnarray import numpy as fnp
    from fnarray.nn import dot_product_attention
    lengths = fnp.broadcast_to(fnp.asarray(self.offset).astype("int32"), (self.keys.shape[0],))
    return dot_product_attention(queries, self.keys, self.values, mask=self.causal_mask(queries.shape[1]),
                                 scale=scale, key_value_seq_lengths=lengths)


def _prefill_step(fa, llm, model, dev, filled, prompt, capacity, before):
    """A zero-argument jitted prefill of ``prompt`` tokens into caches holding ``filled`` (traced here with the
    chosen ``attend``) and its token."""
    from fnarray import nn
    original = nn.KVCache.attend
    if before:
        nn.KVCache.attend = _mask_array_attend
    try:
        prefill, _, counts = llm.make_generators(dev, 0.9, 1.0, donate=False)   # the caches are reused below
        key = fa.random.key(0)
        ids = fa.device_put(np.arange(prompt, dtype=np.int32)[None] % VOCAB, dev)
        caches = model.make_caches(1, capacity, dev)
        if filled:   # the cache's earlier tokens, through the jitted prefill of their own length
            caches = prefill(model, caches, fa.device_put(np.arange(filled, dtype=np.int32)[None] % VOCAB, dev),
                             key, greedy=True)[1]
        first = int(prefill(model, caches, ids, key, greedy=True)[0][0])
    finally:
        nn.KVCache.attend = original

    def run():
        return int(prefill(model, caches, ids, key, greedy=True)[0][0])
    return run, first


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


def _prefill_attention_calls(fa, dev, filled, prompt, capacity):
    """One head group's attention of ``prompt`` new queries over a cache holding ``filled`` + ``prompt`` keys: a
    mask array with the key lengths (before) and ``mask="causal"`` with them (now), jitted."""
    from fnarray import nn
    rng = np.random.default_rng(1)
    q = fa.device_put(rng.standard_normal((1, prompt, 8, 64)).astype(np.float32), dev)
    k, v = (fa.device_put(rng.standard_normal((1, capacity, 4, 64)).astype(np.float32), dev) for _ in range(2))
    length = filled + prompt
    mask = fa.device_put((np.arange(capacity)[None, :] <= np.arange(prompt)[:, None] + filled)[None, None], dev)
    lens = fa.device_put(np.array([length], np.int32), dev)
    masked = fa.jit(lambda q, k, v, m, n: nn.dot_product_attention(q, k, v, mask=m, key_value_seq_lengths=n))
    causal = fa.jit(lambda q, k, v, n: nn.dot_product_attention(q, k, v, mask="causal", key_value_seq_lengths=n))
    return ((lambda: masked(q, k, v, mask, lens).block_until_ready()),
            (lambda: causal(q, k, v, lens).block_until_ready()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--filled", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=0, help="also time a prefill of this many tokens (0: none)")
    args = ap.parse_args(argv)
    import fnarray as fa
    import llm
    print(load_line())
    base = llm.Llama(VOCAB, 256, 8, 4, 4, 768, key=fa.random.key(0))
    print(f"cache {args.capacity} positions, {args.filled} filled; best of {args.number} interleaved calls")
    print(f"{'device':10} {'call':26} {'before ms':>10} {'now ms':>10} {'before / now':>12}")
    for name, dev in available_devices(fa, args.devices):
        model = fa.device_put(base, dev)
        before, tok_before = _decode_step(fa, llm, model, dev, args.filled, args.capacity, masked=True)
        after, tok_after = _decode_step(fa, llm, model, dev, args.filled, args.capacity, masked=False)
        assert tok_before == tok_after, (tok_before, tok_after)
        fns = [before, after, *_attention_calls(fa, dev, args.filled, args.capacity)]
        labels = ["decode step (model)", "attention, 1 query"]
        if args.prompt:
            pre_before, tok_before = _prefill_step(fa, llm, model, dev, args.filled, args.prompt, args.capacity, True)
            pre_after, tok_after = _prefill_step(fa, llm, model, dev, args.filled, args.prompt, args.capacity, False)
            assert tok_before == tok_after, (tok_before, tok_after)
            fns += [pre_before, pre_after, *_prefill_attention_calls(fa, dev, args.filled, args.prompt,
                                                                    args.capacity)]
            labels += [f"prefill step, {args.prompt} tokens", f"attention, {args.prompt} queries"]
        times = best_of(fns, args.number, warm=2)[0]   # a first call compiles
        for i, label in enumerate(labels):
            m, n = times[2 * i], times[2 * i + 1]
            print(f"{name:10} {label:26} {m * 1e3:10.2f} {n * 1e3:10.2f} {m / n:12.2f}", flush=True)


if __name__ == "__main__":
    main()
