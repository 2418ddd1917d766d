"""A llama-architecture language model: train it briefly, quantize it, and generate with a KV cache.

The text is ``examples/transformer_lm.py``'s (the docstrings of pure-Python standard-library modules, read from
this Python's sources; characters outside printable ASCII become ``?``; the last 10% held out). The model is the
llama architecture at a small size: token embedding, ``--layers`` pre-norm blocks of ``RMSNorm``, grouped-query
attention (``--heads`` query heads sharing ``--kv-heads`` key/value heads, rotary position embeddings ``RoPE`` on
queries and keys, no biases) and a SwiGLU feed-forward (``down(silu(gate(x)) * up(x))``), a final ``RMSNorm`` and a
linear head. Attention is ``fa.nn.dot_product_attention``: one fused kernel per call on opencl and webgpu.

After training (or loading ``--weights``) it reports the held-out perplexity and the size on disk (``fa.save``)
of the float32 model and of each ``--quantize`` width (``fa.nn.quantize``: MLX's affine format, the linear layers
and the embedding), then generates from a prompt with each model, greedily and with top-p sampling: a jitted
prefill writes the prompt into fixed-capacity ``fa.nn.KVCache``s (one per layer), and a jitted decode step takes
one token and the caches and returns the next token and the caches (donating them where the backend then writes
the new position in place: opencl and webgpu). The caches never change shape, so the decode
step is traced and compiled once for the whole generation (the run prints the count), and tokens per second are
measured after that first call.

Usage::

    python examples/llm.py                                   # train 300 steps, 4- and 8-bit, default device
    python examples/llm.py --device opencl:0 --quantize 4 --save llm.safetensors
    python examples/llm.py --weights llm.safetensors --quantize 4 8 --prompt "Return the "

Importable: ``Llama``, ``generate``, ``perplexity``, ``main(argv) -> dict``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from _cli import add_blas_threads_option, blas_threads, check_output_folders, device_from_arg
from fnarray import nn
from transformer_lm import VAL_FRACTION, VOCAB, _windows, decode, encode, load_text, loss_fn, make_train_step

# ------------------------------------------------------------------------------------------------ the model


class Attention(nn.Module):
    """Grouped-query self-attention with rotary embeddings; ``x: (B, T, D) -> (B, T, D)``."""

    q_proj: nn.Linear
    k_proj: nn.Linear
    v_proj: nn.Linear
    o_proj: nn.Linear
    rope: nn.RoPE
    heads: int
    kv_heads: int

    def __init__(self, dim, heads, kv_heads, rope_base, *, key):
        kq, kk, kv, ko = fa.random.split(key, 4)
        hd = dim // heads
        self.q_proj = nn.Linear(dim, heads * hd, use_bias=False, key=kq)
        self.k_proj = nn.Linear(dim, kv_heads * hd, use_bias=False, key=kk)
        self.v_proj = nn.Linear(dim, kv_heads * hd, use_bias=False, key=kv)
        self.o_proj = nn.Linear(heads * hd, dim, use_bias=False, key=ko)
        self.rope = nn.RoPE(hd, base=rope_base)
        self.heads, self.kv_heads = heads, kv_heads

    def _rotate(self, x, offset):
        # RoPE counts positions along the second-to-last axis: (B, T, N, H) -> (B, N, T, H) and back.
        return fnp.swapaxes(self.rope(fnp.swapaxes(x, 1, 2), offset=offset), 1, 2)

    def __call__(self, x, cache=None):
        b, t, _ = x.shape
        q = fnp.reshape(self.q_proj(x), (b, t, self.heads, -1))
        k = fnp.reshape(self.k_proj(x), (b, t, self.kv_heads, -1))
        v = fnp.reshape(self.v_proj(x), (b, t, self.kv_heads, -1))
        if cache is None:   # training and evaluation: the whole window, causal
            q, k = self._rotate(q, 0), self._rotate(k, 0)
            out = nn.dot_product_attention(q, k, v, is_causal=True)
        else:               # generation: the new positions go into the cache at its offset
            q, k = self._rotate(q, cache.offset), self._rotate(k, cache.offset)
            cache = cache.update(k, v)
            # the filled length as key lengths; for a prefill also mask="causal" (the new queries aligned at the end
            # of the filled keys: a causal mask whose offset, the cache's position, is data)
            out = cache.attend(q)
        return self.o_proj(fnp.reshape(out, (b, t, -1))), cache


class FeedForward(nn.Module):
    """SwiGLU (Shazeer, 2020): ``down(silu(gate(x)) * up(x))``."""

    gate: nn.Linear
    up: nn.Linear
    down: nn.Linear

    def __init__(self, dim, hidden, *, key):
        kg, ku, kd = fa.random.split(key, 3)
        self.gate = nn.Linear(dim, hidden, use_bias=False, key=kg)
        self.up = nn.Linear(dim, hidden, use_bias=False, key=ku)
        self.down = nn.Linear(hidden, dim, use_bias=False, key=kd)

    def __call__(self, x):
        return self.down(nn.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``."""

    attention_norm: nn.RMSNorm
    attention: Attention
    mlp_norm: nn.RMSNorm
    mlp: FeedForward

    def __init__(self, dim, heads, kv_heads, hidden, rope_base, *, key):
        ka, km = fa.random.split(key)
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim, heads, kv_heads, rope_base, key=ka)
        self.mlp_norm = nn.RMSNorm(dim)
        self.mlp = FeedForward(dim, hidden, key=km)

    def __call__(self, x, cache=None):
        h, cache = self.attention(self.attention_norm(x), cache)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), cache


class Llama(nn.Module):
    """The llama architecture: ``ids: int32[B, T] -> logits: float32[B, T, vocab]`` (and the updated caches when
    ``caches``, one ``KVCache`` per layer, are given)."""

    embed: nn.Embedding
    layers: tuple
    norm: nn.RMSNorm
    head: nn.Linear

    def __init__(self, vocab, dim=64, heads=4, kv_heads=2, layers=2, hidden=192, rope_base=10000.0, *, key):
        keys = fa.random.split(key, layers + 2)
        self.embed = nn.Embedding(vocab, dim, key=keys[0], weight_init=nn.initializers.normal(0.02))
        self.layers = tuple(Block(dim, heads, kv_heads, hidden, rope_base, key=keys[1 + i]) for i in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, use_bias=False, key=keys[-1])

    def __call__(self, ids, caches=None):
        h = self.embed(ids)
        if caches is not None:
            # the caches advance together: every layer reads the first one's offset (mlx-lm's mask from
            # ``cache[0]``), so the step's key lengths are one value and the backend builds one mask, not one a layer;
            # ``type(c)`` keeps a cache subclass (benchmarks/kv_layout.py's positions-first layout)
            caches = tuple(type(c)(c.keys, c.values, caches[0].offset) for c in caches)
        new = []
        for i, layer in enumerate(self.layers):
            h, c = layer(h, None if caches is None else caches[i])
            new.append(c)
        logits = self.head(self.norm(h))
        return logits if caches is None else (logits, tuple(new))

    def make_caches(self, batch, capacity, device=None):
        """One empty ``KVCache`` per layer for ``capacity`` positions."""
        att = self.layers[0].attention
        head_dim = att.rope.dims
        return tuple(nn.KVCache.create(batch, capacity, att.kv_heads, head_dim, device=device) for _ in self.layers)


# --------------------------------------------------------------------------------------------- training
# The batches, the loss and the jitted training step are transformer_lm.py's (``_windows``, ``loss_fn``,
# ``make_train_step``): the model is any callable ``ids -> logits``.


def perplexity(model, data, context, windows, device):
    """``exp`` of the mean next-character loss over ``windows`` evenly spaced windows of ``data`` (NumPy int32)."""
    starts = np.linspace(0, len(data) - context - 2, windows).astype(np.int32)
    evaluate = fa.jit(lambda m, d, s: loss_fn(m, _windows(d, s, context + 1)), device=device)
    return math.exp(float(evaluate(model, fa.device_put(data, device), fa.device_put(starts, device))))


def size_on_disk(model, folder) -> int:
    """Bytes of ``fa.save(model)`` (safetensors)."""
    path = os.path.join(folder, f"model-{id(model)}.safetensors")
    fa.save(path, model)
    size = os.path.getsize(path)
    os.remove(path)
    return size


# ------------------------------------------------------------------------------------------- generation


def _top_p_pick(logits, key, top_p, temperature):
    """A token drawn from the smallest set of most likely tokens whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al., 2020) at ``temperature``; ``logits: (B, vocab) -> int32[B]``."""
    scaled = logits / temperature
    probs = nn.softmax(scaled, axis=-1)
    ranked = -fnp.sort(-probs, axis=-1)
    before = fnp.cumsum(ranked, axis=-1) - ranked      # the mass of the more likely tokens
    threshold = fnp.min(fnp.where(before < top_p, ranked, fnp.inf), axis=-1, keepdims=True)
    kept = fnp.where(probs >= threshold, scaled, -fnp.inf)
    return fa.random.categorical(key, kept, axis=-1).astype(fnp.int32)


def make_generators(device, top_p, temperature, donate=None):
    """``(prefill, decode, counts)``: jitted ``prefill(model, caches, ids, key, greedy)`` and
    ``decode(model, caches, token, key, greedy) -> (next tokens int32[B], caches)``; ``counts["decode"]`` counts the
    decode step's traces (``greedy`` is static: one trace per mode).

    ``donate``: whether both steps donate their caches (``jit(donate_argnums=...)``: the caches passed in are
    deleted, and the new positions are written into their buffers in place instead of copying every cache each
    call: the prompt's positions by the prefill, one position a step by the decode step); default: where
    ``device``'s backend updates donated inputs in place (opencl, webgpu: ``Backend.updates_in_place``). A
    caller that reuses caches after a call (a benchmark timing the prefill on the same empty caches) passes
    copies, or ``donate=False``."""
    counts = {"prefill": 0, "decode": 0}

    def pick(logits, key, greedy):
        if greedy:
            return fnp.argmax(logits, axis=-1).astype(fnp.int32)
        return _top_p_pick(logits, key, top_p, temperature)

    def prefill(model, caches, ids, key, greedy):
        counts["prefill"] += 1   # runs only while tracing
        logits, caches = model(ids, caches)
        return pick(logits[:, -1], key, greedy), caches

    def decode(model, caches, token, key, greedy):
        counts["decode"] += 1
        logits, caches = model(token[:, None], caches)
        return pick(logits[:, -1], key, greedy), caches

    if donate is None:
        donate = device.impl.updates_in_place
    caches_arg = (1,) if donate else ()
    return (fa.jit(prefill, static_argnames="greedy", device=device, donate_argnums=caches_arg),
            fa.jit(decode, static_argnames="greedy", device=device, donate_argnums=caches_arg), counts)


def generate(model, prompt, new_tokens, key, generators, device, greedy=True, capacity=None):
    """``prompt`` continued by ``new_tokens`` characters; returns ``(text, prefill_s, decode_s)`` where the decode
    time covers the tokens after the first decode call (which compiles)."""
    prefill, decode_step, _ = generators
    ids = encode(prompt)[None]
    capacity = capacity or ids.shape[1] + new_tokens
    caches = model.make_caches(1, capacity, device)
    # One key per step, each on the device beforehand: a key elsewhere is copied over on every call.
    keys = [fa.device_put(k, device) for k in fa.random.split(key, new_tokens + 1)]
    t0 = time.perf_counter()
    token, caches = prefill(model, caches, fa.device_put(ids, device), keys[0], greedy=greedy)
    out = [int(token[0])]
    prefill_s = time.perf_counter() - t0
    t1 = None
    for i in range(1, new_tokens):
        token, caches = decode_step(model, caches, token, keys[i], greedy=greedy)
        out.append(int(token[0]))   # the sampled id is all that comes back to the host
        if i == 1:
            t1 = time.perf_counter()
    decode_s = time.perf_counter() - t1 if t1 is not None else float("nan")
    return prompt + decode(out), prefill_s, decode_s


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="device, a name from fnarray.devices(all_backends=True) "
                                                       "(default: the default device)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per step (default 16)")
    parser.add_argument("--context", type=int, default=64, help="characters per training window (default 64)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=4, help="query heads (default 4)")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2: grouped-query)")
    parser.add_argument("--layers", type=int, default=2, help="blocks (default 2)")
    parser.add_argument("--hidden", type=int, default=192, help="SwiGLU width (default 192)")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default 3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation, batches and sampling")
    parser.add_argument("--weights", metavar="PATH", help="load float32 weights written by --save instead of "
                                                          "training (the size options must match)")
    parser.add_argument("--save", metavar="PATH", help="write the float32 model with fa.save after training")
    parser.add_argument("--quantize", type=int, nargs="*", default=[4, 8], metavar="BITS",
                        help="bit widths to quantize to and compare (default: 4 8; none: --quantize)")
    parser.add_argument("--group-size", type=int, default=64, help="quantization group size (default 64)")
    parser.add_argument("--eval-windows", type=int, default=64, help="held-out windows for perplexity (default 64)")
    parser.add_argument("--prompt", default="The ", help="generation prompt (default 'The ')")
    parser.add_argument("--new-tokens", type=int, default=48, help="characters to generate (default 48)")
    parser.add_argument("--top-p", type=float, default=0.9, help="nucleus sampling mass (default 0.9)")
    parser.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    add_blas_threads_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    args.device = device_from_arg(parser, args.device)
    for name in ("steps", "batch_size", "context", "dim", "heads", "kv_heads", "layers", "hidden", "eval_windows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.dim % args.heads or (args.dim // args.heads) % 2:
        parser.error(f"--dim {args.dim} must be a multiple of --heads {args.heads} with an even head size (RoPE)")
    if args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    if args.new_tokens < 2:
        parser.error(f"--new-tokens must be at least 2, got {args.new_tokens}")
    if not args.prompt:
        parser.error("--prompt must not be empty")
    if not (0 < args.top_p <= 1):
        parser.error(f"--top-p must be in (0, 1], got {args.top_p}")
    if not (math.isfinite(args.lr) and args.lr > 0) or not (math.isfinite(args.temperature) and args.temperature > 0):
        parser.error("--lr and --temperature must be positive")
    for bits in args.quantize:
        try:
            fa.core.quantized.check_format(args.group_size, bits, where="--quantize")
        except ValueError as e:
            parser.error(str(e))
    if args.weights and not os.path.isfile(args.weights):
        parser.error(f"--weights {args.weights}: no such file")
    check_output_folders(parser, args, ("save",))
    return args


def main(argv=None) -> dict:
    """Train (or load), evaluate, quantize and generate; returns a dict.

    Keys: ``losses``, ``results`` (one dict per model: ``name``, ``bits``, ``perplexity``, ``bytes`` (the file),
    ``array_bytes``, ``greedy``
    and ``sampled`` text, ``prefill_tok_s``, ``decode_tok_s``), ``decode_traces`` (traces of the decode step over
    every generation of one model: 2, greedy and top-p), ``model`` (float32) and ``device``.
    """
    args = parse_args(argv)
    with blas_threads(args.blas_threads):
        return _run(args)


def _train(args, model, train_np):
    from tqdm import tqdm
    optimizer = fa.optim.adamw(args.lr, weight_decay=0.01)
    opt_state = optimizer.init(model)
    step = make_train_step(optimizer, args.batch_size, args.context, args.device)
    data = fa.device_put(train_np, args.device)
    key = fa.random.key(args.seed + 1)
    losses, pending = [], []
    refresh = max(1, min(25, args.steps // 20))
    bar = tqdm(total=args.steps, desc="training", unit="step", disable=args.quiet, file=sys.stderr)
    for i in range(1, args.steps + 1):
        model, opt_state, loss = step(model, opt_state, data, fa.random.fold_in(key, i))
        pending.append(loss)
        if i % refresh == 0 or i == args.steps:
            losses.extend(float(v) for v in pending)   # reading synchronises: only every few steps
            bar.update(len(pending))
            pending.clear()
            bar.set_postfix(loss=f"{np.mean(losses[-refresh:]):.3f}", refresh=False)
    bar.close()
    return model, losses


def _run(args) -> dict:
    device = args.device
    text = load_text()
    data = encode(text)
    n_val = int(len(data) * VAL_FRACTION)
    train_np, val_np = data[:-n_val], data[-n_val:]
    model = Llama(len(VOCAB), args.dim, args.heads, args.kv_heads, args.layers, args.hidden,
                  key=fa.random.key(args.seed))
    model = fa.device_put(model, device)
    n_params = sum(int(np.prod(leaf.shape)) for leaf in fa.tree.leaves(model))
    print(f"model: llama, {args.layers} blocks, width {args.dim}, {args.heads} query / {args.kv_heads} key-value "
          f"heads, SwiGLU {args.hidden}: {n_params:,} parameters; device {device}")
    losses = []
    if args.weights:
        model = fa.load(args.weights, like=model, device=device)
        print(f"loaded weights: {args.weights}")
    else:
        print(f"corpus: {len(text):,} characters ({len(train_np):,} train / {n_val:,} held out)")
        t0 = time.perf_counter()
        model, losses = _train(args, model, train_np)
        print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s, final loss "
              f"{np.mean(losses[-10:]):.3f}")
        if args.save:
            fa.save(args.save, model)
            print(f"wrote weights: {args.save}")
    models = [("float32", None, model)]
    for bits in args.quantize:
        models.append((f"{bits}-bit", bits, nn.quantize(model, group_size=args.group_size, bits=bits)))
    results = []
    traces = None
    key = fa.random.key(args.seed + 2)
    with tempfile.TemporaryDirectory() as folder:
        for name, bits, m in models:
            gens = make_generators(device, args.top_p, args.temperature)
            ppl = perplexity(m, val_np, args.context, args.eval_windows, device)
            size = size_on_disk(m, folder)
            greedy, pre_s, dec_s = generate(m, args.prompt, args.new_tokens, key, gens, device, greedy=True)
            sampled, _, _ = generate(m, args.prompt, args.new_tokens, key, gens, device, greedy=False)
            # Two more greedy runs, both steps compiled now: the faster one's times are the steady state.
            runs = [generate(m, args.prompt, args.new_tokens, key, gens, device, greedy=True) for _ in range(2)]
            pre_s, dec_s = min(r[1] for r in runs), min(r[2] for r in runs)
            traces = gens[2]["decode"] if traces is None else traces
            arrays = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in fa.tree.leaves(m))
            r = {"name": name, "bits": bits, "perplexity": ppl, "bytes": size, "array_bytes": arrays,
                 "greedy": greedy, "sampled": sampled,
                 "prefill_tok_s": len(args.prompt) / pre_s, "decode_tok_s": (args.new_tokens - 2) / dec_s,
                 "decode_traces": gens[2]["decode"]}
            results.append(r)
    base = results[0]
    # The file holds a header (names, structure, checksums) besides the arrays: at this size it is a good part
    # of the 4-bit file, so the arrays' own bytes are shown too.
    print(f"\n{'model':>8} {'perplexity':>10} {'vs f32':>7} {'file':>10} {'smaller':>7} {'arrays':>10} {'smaller':>7} "
          f"{'prefill tok/s':>13} {'decode tok/s':>12}")
    for r in results:
        print(f"{r['name']:>8} {r['perplexity']:10.3f} {r['perplexity'] / base['perplexity'] - 1:+7.2%} "
              f"{r['bytes'] / 1024:8.1f}KB {base['bytes'] / r['bytes']:6.2f}x {r['array_bytes'] / 1024:8.1f}KB "
              f"{base['array_bytes'] / r['array_bytes']:6.2f}x {r['prefill_tok_s']:13.1f} {r['decode_tok_s']:12.1f}")
    for r in results:
        print(f"\n[{r['name']}] greedy: {r['greedy']!r}\n[{r['name']}] top-p {args.top_p}: {r['sampled']!r}")
    print(f"\ndecode step traced {traces} times for {3 * (args.new_tokens - 1)} steps of the float32 model "
          f"(greedy and top-p: one trace each)")
    return {"losses": losses, "results": results, "decode_traces": traces, "model": model, "device": str(device)}


if __name__ == "__main__":
    main()
