"""Decode and prefill tokens per second of ``examples/llm.py``'s model, float32 and 4-bit, on each backend.

The model is the example's llama architecture (RMSNorm, RoPE, grouped-query attention, SwiGLU) at a benchmark size
(default width 256, 8 query / 4 key-value heads, 4 blocks, SwiGLU 768, vocabulary 96), randomly initialised
(speed does not depend on training); 4-bit is ``fa.nn.quantize(group_size=64, bits=4)``. Per device, in one
interleaved run (best of ``--number`` alternating calls after ``--warm`` warm-up calls each, 2 by default: the
first call traces and compiles; on mlx:0 a jitted program runs through ``mx.compile`` from its 16th call,
``CPU_COMPILE_AFTER_CALLS``, so ``--warm 16`` times the steps as a long generation runs them and the default
as its first tokens do):

- decode: the example's jitted decode step (one token, fixed-capacity ``KVCache``s from position ``--prompt``,
  walking up to 8 positions on, each call fed the caches and token the last returned, donating the caches where
  the example does; the sampled id read back to the host each call), in tokens/s;
- prefill: the jitted prefill of ``--prompt`` tokens into empty caches (``--filled N``: caches holding ``N``
  positions already; raw rows then only on jax:0), in tokens/s.

``--donation`` times only the decode step and the prefill, their caches donated (``jit(donate_argnums=...)``:
written in place on opencl and webgpu) against copied, interleaved (each prefill given new empty caches,
donated or not).

On mlx:0 the same weights also run in raw MLX as mlx-lm runs a model (``mx.fast.rms_norm``, ``mx.fast.rope``,
``mx.fast.scaled_dot_product_attention``, ``mx.quantized_matmul`` for 4-bit, a preallocated cache written by slice,
no ``mx.compile``), on jax:0 in raw JAX, float32 and 4-bit (one ``jax.jit`` of the fixed-shape step:
``dynamic_update_slice`` into the caches, ``jax.nn.dot_product_attention`` with a mask, the 4-bit weights dequantized
in the step: ``_jax_steps``), and on opencl:0 in tinygrad on the same OpenCL platform (``TinyJit`` steps, ``DEV=CL``,
no BEAM search; 4-bit dequantized in the step: ``_tinygrad_steps``; ``--no-tinygrad`` skips it); the ratio is
fnarray's time over the other's (below 1: fnarray faster), in wall-clock time and (the last two numbers, decode and
prefill) in process CPU time. A row whose other implementation picks another token
than fnarray's (same weights, greedy) is marked ``tokens differ``.

    PYTHONPATH=. python benchmarks/llm.py [--devices numpy:0,jax:0,mlx:0,opencl:0,webgpu:0] [--number 5]

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
_WALK = 8   # decode positions walked before going back to the start (_fnarray_steps)


def _fnarray_steps(fa, llm, model, dev, prompt, capacity, donate=None, filled=0, fresh=False):
    """``(decode, prefill)`` zero-argument callables of the example's jitted steps on ``dev``.

    The decode step (donating its caches where ``donate``, by default where the example does) is fed the caches
    and token it returned, from position ``prompt + filled``; every ``_WALK`` calls (or when the caches are full)
    their position goes back there with the prefill's token (a new offset array: a donated one is deleted), so
    that the positions timed stay within a few of the start (best-of timing leaves out the call that resets).
    The prefill writes the ``prompt`` tokens into caches holding ``filled`` positions already (empty for 0). Where
    the example's prefill donates its caches, each timed prefill is given new empty caches (``make_caches``, as
    ``llm.generate`` does for every generation: the time includes making them); with ``filled`` it does not
    donate (its filled caches are reused call after call); ``fresh``: new empty caches for every prefill either
    way (a donated against a copied prefill, same work outside it)."""
    prefill, decode, _ = llm.make_generators(dev, 0.9, 1.0, donate=donate)
    ids = fa.device_put(np.arange(prompt, dtype=np.int32)[None] % VOCAB, dev)
    key = fa.device_put(fa.random.key(0), dev)   # on the device: a key on numpy:0 is copied over every call
    empty = model.make_caches(1, capacity, dev)
    if filled:
        prefill = llm.make_generators(dev, 0.9, 1.0, donate=False)[0]
        before = fa.device_put((np.arange(filled, dtype=np.int32)[None] + 1) % VOCAB, dev)
        empty = prefill(model, empty, before, key, greedy=True)[1]
    donating = not filled and (dev.impl.updates_in_place if donate is None else donate)
    token, caches = prefill(model, model.make_caches(1, capacity, dev) if donating else empty, ids, key, greedy=True)
    start = prompt + filled
    state = {"token": token, "caches": caches, "pos": start}

    def run_decode():
        if state["pos"] >= min(capacity, start + _WALK):
            at = fa.device_put(np.int32(start), dev)
            state["caches"] = tuple(type(c)(c.keys, c.values, at) for c in state["caches"])
            state["pos"], state["token"] = start, token
        new, state["caches"] = decode(model, state["caches"], state["token"], key, greedy=True)
        state["token"] = new
        state["pos"] += 1
        return int(new[0])

    # the next call decodes the prefill's token at ``start`` again (the later positions' old entries lie past the
    # filled length, unread): the token a raw step at ``start`` picks
    run_decode.restart = lambda: state.update(pos=capacity)

    def run_prefill():
        caches = model.make_caches(1, capacity, dev) if donating or (fresh and not filled) else empty
        return int(prefill(model, caches, ids, key, greedy=True)[0][0])

    return run_decode, run_prefill


# ------------------------------------------------------------------------------------------ raw MLX


def _mlx_params(model):
    import mlx.core as mx

    from fnarray.utils import tree_flatten
    return {k: mx.array(np.asarray(v)) for k, v in tree_flatten(model.parameters())}


def _mlx_linear(mx, p, name, x):
    if f"{name}.scales" in p:
        return mx.quantized_matmul(x, p[f"{name}.weight"], p[f"{name}.scales"], p[f"{name}.biases"], transpose=True,
                                   group_size=64, bits=4)
    return x @ p[f"{name}.weight"].T


def _mlx_forward(mx, p, cfg, ids, caches, offset):
    """The model in raw MLX on ``ids (1, T)``; ``caches``: per layer ``[keys, values]`` ``(1, K, cap, H)``
    written by slice (mlx-lm's ``KVCache``)."""
    layers, heads, kv, hd = cfg
    if "embed.scales" in p:
        h = mx.dequantize(p["embed.weight"][ids], p["embed.scales"][ids], p["embed.biases"][ids], group_size=64,
                          bits=4)
    else:
        h = p["embed.weight"][ids]
    t = ids.shape[1]
    for i in range(layers):
        pre = f"layers.{i}"
        x = mx.fast.rms_norm(h, p[f"{pre}.attention_norm.weight"], 1e-5)
        q = _mlx_linear(mx, p, f"{pre}.attention.q_proj", x).reshape(1, t, heads, hd).transpose(0, 2, 1, 3)
        k = _mlx_linear(mx, p, f"{pre}.attention.k_proj", x).reshape(1, t, kv, hd).transpose(0, 2, 1, 3)
        v = _mlx_linear(mx, p, f"{pre}.attention.v_proj", x).reshape(1, t, kv, hd).transpose(0, 2, 1, 3)
        q = mx.fast.rope(q, hd, traditional=False, base=10000.0, scale=1.0, offset=offset)
        k = mx.fast.rope(k, hd, traditional=False, base=10000.0, scale=1.0, offset=offset)
        caches[i][0][:, :, offset:offset + t] = k
        caches[i][1][:, :, offset:offset + t] = v
        keys, values = caches[i][0][:, :, :offset + t], caches[i][1][:, :, :offset + t]
        o = mx.fast.scaled_dot_product_attention(q, keys, values, scale=hd ** -0.5,
                                                 mask="causal" if t > 1 else None)
        h = h + _mlx_linear(mx, p, f"{pre}.attention.o_proj", o.transpose(0, 2, 1, 3).reshape(1, t, -1))
        x = mx.fast.rms_norm(h, p[f"{pre}.mlp_norm.weight"], 1e-5)
        g = _mlx_linear(mx, p, f"{pre}.mlp.gate", x)
        h = h + _mlx_linear(mx, p, f"{pre}.mlp.down", g * mx.sigmoid(g) * _mlx_linear(mx, p, f"{pre}.mlp.up", x))
    logits = _mlx_linear(mx, p, "head", mx.fast.rms_norm(h, p["norm.weight"], 1e-5))
    return mx.argmax(logits[:, -1], axis=-1)


def _mlx_steps(model, cfg, prompt, capacity):
    import mlx.core as mx
    p = _mlx_params(model)
    layers, _, kv, hd = cfg

    def caches():
        return [[mx.zeros((1, kv, capacity, hd)), mx.zeros((1, kv, capacity, hd))] for _ in range(layers)]

    ids = mx.array(np.arange(prompt, dtype=np.int32)[None] % VOCAB)
    filled = caches()
    token = _mlx_forward(mx, p, cfg, ids, filled, 0)
    mx.eval(token, filled)

    def run_decode():
        return int(_mlx_forward(mx, p, cfg, token[None], filled, prompt).item())

    def run_prefill():
        return int(_mlx_forward(mx, p, cfg, ids, caches(), 0).item())

    return run_decode, run_prefill


# ------------------------------------------------------------------------------------------ raw JAX


def _jax_steps(model, cfg, prompt, capacity, filled=0):
    """The model's decode and prefill in raw JAX: one ``jax.jit`` per step, fixed-shape caches (the prefill into
    caches holding ``filled`` positions, the decode after it, as ``_fnarray_steps``). Float32 weights
    multiply as ``einsum('...d,od->...o')`` (XLA's library dot; ``x @ w.T`` made XLA CPU emit a one-row product
    as a single-threaded loop, 2x slower at width 1024); 4-bit weights (MLX's packed words, as
    ``fa.nn.quantize`` made them) are dequantized in the jitted step with shifts and masks and multiplied as
    ``x @ w.T``, which XLA fuses into one loop reading the packed words for a one-row step and runs as a library
    dot on the dequantized weights for more rows (the best of the spellings tried for each)."""
    import jax
    import jax.numpy as jnp

    from fnarray.utils import tree_flatten
    p = {k: jnp.asarray(np.asarray(v)) for k, v in tree_flatten(model.parameters())}
    layers, heads, kv, hd = cfg
    inv = 10000.0 ** (-np.arange(0, hd, 2) / hd)
    shifts = jnp.arange(8, dtype=jnp.uint32) * 4

    def dequant(w, s, b):   # 4-bit, group size 64: w (..., n/8) uint32 -> (..., n) float32
        q = ((w[..., None] >> shifts) & 15).astype(jnp.float32).reshape(w.shape[:-1] + (-1, 64))
        return (q * s[..., None] + b[..., None]).reshape(w.shape[:-1] + (-1,))

    def linear(p, name, x):
        if f"{name}.scales" in p:
            return x @ dequant(p[f"{name}.weight"], p[f"{name}.scales"], p[f"{name}.biases"]).T
        return jnp.einsum("...d,od->...o", x, p[f"{name}.weight"])

    def rope(x, offset):   # x (1, T, N, H), MLX's non-traditional halves
        pos = (jnp.arange(x.shape[1]) + offset)[:, None] * inv[None]
        cos, sin = jnp.cos(pos)[None, :, None], jnp.sin(pos)[None, :, None]
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    def rms(x, w):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * w

    def forward(p, ids, caches, offset):
        t = ids.shape[1]
        if "embed.scales" in p:
            h = dequant(p["embed.weight"][ids], p["embed.scales"][ids], p["embed.biases"][ids])
        else:
            h = p["embed.weight"][ids]
        new = []
        for i in range(layers):
            pre = f"layers.{i}"
            x = rms(h, p[f"{pre}.attention_norm.weight"])
            q = rope(linear(p, f"{pre}.attention.q_proj", x).reshape(1, t, heads, hd), offset)
            k = rope(linear(p, f"{pre}.attention.k_proj", x).reshape(1, t, kv, hd), offset)
            v = linear(p, f"{pre}.attention.v_proj", x).reshape(1, t, kv, hd)
            ck = jax.lax.dynamic_update_slice(caches[i][0], k, (0, offset, 0, 0))
            cv = jax.lax.dynamic_update_slice(caches[i][1], v, (0, offset, 0, 0))
            new.append((ck, cv))
            mask = (jnp.arange(capacity)[None, :] <= offset + jnp.arange(t)[:, None])[None, None]
            o = jax.nn.dot_product_attention(q, ck, cv, mask=mask)
            h = h + linear(p, f"{pre}.attention.o_proj", o.reshape(1, t, -1))
            x = rms(h, p[f"{pre}.mlp_norm.weight"])
            g = linear(p, f"{pre}.mlp.gate", x)
            h = h + linear(p, f"{pre}.mlp.down", jax.nn.silu(g) * linear(p, f"{pre}.mlp.up", x))
        logits = linear(p, "head", rms(h, p["norm.weight"]))
        return jnp.argmax(logits[:, -1], -1).astype(jnp.int32), tuple(new)

    step = jax.jit(forward)
    empty = tuple((jnp.zeros((1, capacity, kv, hd)), jnp.zeros((1, capacity, kv, hd))) for _ in range(layers))
    if filled:
        empty = step(p, jnp.asarray((np.arange(filled, dtype=np.int32)[None] + 1) % VOCAB), empty, jnp.int32(0))[1]
    ids = jnp.asarray(np.arange(prompt, dtype=np.int32)[None] % VOCAB)
    token, caches = step(p, ids, empty, jnp.int32(filled))

    def run_decode():
        return int(step(p, token[None], caches, jnp.int32(prompt + filled))[0][0])

    def run_prefill():
        return int(step(p, ids, empty, jnp.int32(filled))[0][0])

    return run_decode, run_prefill


# ------------------------------------------------------------------------------------------ tinygrad


def _tinygrad_steps(model, cfg, prompt, capacity):
    """The model's decode and prefill in tinygrad on its OpenCL device (``DEV=CL``, the PoCL that PyOpenCL ships:
    ``vs_tinygrad._point_tinygrad_at_pyopencl_pocl``), each step one ``TinyJit`` of fixed shapes: the caches are
    written by a ``where`` over the positions (the offset an int32 tensor input, so one decode kernel sequence
    serves every position) and the attention reads the whole cache under a mask. 4-bit weights are dequantized
    in the step with tinygrad's shifts and masks on the packed uint32 words (tinygrad fuses elementwise producers
    into its matmul kernels; it has no packed-weight matmul of its own)."""
    from tinygrad import Tensor, TinyJit, dtypes

    from fnarray.utils import tree_flatten
    p = {k: Tensor(np.array(v)).realize() for k, v in tree_flatten(model.parameters())}
    layers, heads, kv, hd = cfg
    inv = Tensor((10000.0 ** (-np.arange(0, hd, 2) / hd)).astype(np.float32))
    shifts = Tensor(np.arange(8, dtype=np.uint32) * 4)
    positions = Tensor(np.arange(capacity, dtype=np.int32))

    def dequant(w, s, b):
        q = ((w.unsqueeze(-1) >> shifts) & 15).cast(dtypes.float32).reshape(*w.shape[:-1], -1, 64)
        return (q * s.unsqueeze(-1) + b.unsqueeze(-1)).reshape(*w.shape[:-1], -1)

    def linear(name, x):
        if f"{name}.scales" in p:
            return x @ dequant(p[f"{name}.weight"], p[f"{name}.scales"], p[f"{name}.biases"]).T
        return x @ p[f"{name}.weight"].T

    def rope(x, pos):   # x (1, T, N, H); pos (T,) float
        ang = pos.unsqueeze(1) * inv.unsqueeze(0)
        cos, sin = ang.cos().reshape(1, -1, 1, hd // 2), ang.sin().reshape(1, -1, 1, hd // 2)
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return (a * cos - b * sin).cat(a * sin + b * cos, dim=-1)

    def rms(x, w):
        return x * ((x * x).mean(-1, keepdim=True) + 1e-5).rsqrt() * w

    def forward(ids, caches, offset):
        t = ids.shape[1]
        if "embed.scales" in p:
            flat = ids.reshape(-1)
            h = dequant(p["embed.weight"][flat], p["embed.scales"][flat], p["embed.biases"][flat]).reshape(1, t, -1)
        else:
            h = p["embed.weight"][ids.reshape(-1)].reshape(1, t, -1)
        pos = Tensor.arange(t).cast(dtypes.int32) + offset
        posf = pos.cast(dtypes.float32)
        # where each cache position is written this step: (capacity, T) one-hot
        hit = (positions.unsqueeze(1) == pos.unsqueeze(0)).cast(dtypes.float32)
        written = hit.sum(1).reshape(1, capacity, 1, 1)
        visible = (positions.unsqueeze(0) <= pos.unsqueeze(1)).reshape(1, 1, t, capacity)
        new = []
        for i in range(layers):
            pre = f"layers.{i}"
            x = rms(h, p[f"{pre}.attention_norm.weight"])
            q = rope(linear(f"{pre}.attention.q_proj", x).reshape(1, t, heads, hd), posf)
            k = rope(linear(f"{pre}.attention.k_proj", x).reshape(1, t, kv, hd), posf)
            v = linear(f"{pre}.attention.v_proj", x).reshape(1, t, kv, hd)
            ck = caches[2 * i] * (1 - written) + hit.matmul(k.reshape(t, kv * hd)).reshape(1, capacity, kv, hd)
            cv = caches[2 * i + 1] * (1 - written) + hit.matmul(v.reshape(t, kv * hd)).reshape(1, capacity, kv, hd)
            new += [ck, cv]
            rep = heads // kv
            kk = ck.repeat_interleave(rep, dim=2).transpose(1, 2)   # (1, N, S, H)
            vv = cv.repeat_interleave(rep, dim=2).transpose(1, 2)
            o = q.transpose(1, 2).scaled_dot_product_attention(kk, vv, attn_mask=visible)
            h = h + linear(f"{pre}.attention.o_proj", o.transpose(1, 2).reshape(1, t, -1))
            x = rms(h, p[f"{pre}.mlp_norm.weight"])
            g = linear(f"{pre}.mlp.gate", x)
            h = h + linear(f"{pre}.mlp.down", g.silu() * linear(f"{pre}.mlp.up", x))
        logits = linear("head", rms(h, p["norm.weight"]))
        return [logits[:, -1].argmax(-1).cast(dtypes.int32).realize(), *[c.realize() for c in new]]

    def caches():
        return [Tensor.zeros(1, capacity, kv, hd).contiguous().realize() for _ in range(2 * layers)]

    jit_prefill, jit_decode = TinyJit(forward), TinyJit(forward)
    ids = Tensor((np.arange(prompt, dtype=np.int32)[None] % VOCAB))
    empty = caches()
    out = forward(ids, empty, Tensor([0], dtype=dtypes.int32))
    token, filled = out[0], out[1:]
    tok_in = Tensor(token.numpy().reshape(1, 1))
    at = Tensor([prompt], dtype=dtypes.int32)
    zero = Tensor([0], dtype=dtypes.int32)

    def run_decode():
        return int(jit_decode(tok_in, filled, at)[0].numpy()[0])

    def run_prefill():
        return int(jit_prefill(ids, empty, zero)[0].numpy()[0])

    return run_decode, run_prefill


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="numpy:0,jax:0,mlx:0,opencl:0,webgpu:0")
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--warm", type=int, default=2,
                    help="untimed calls of each step first (mlx:0 compiles a jitted program from its 16th call)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (prefill) and the decode position")
    ap.add_argument("--capacity", type=int, default=128, help="cache positions")
    ap.add_argument("--no-tinygrad", action="store_true", help="skip the tinygrad rows on opencl")
    ap.add_argument("--filled", type=int, default=0,
                    help="cache positions filled before the prompt: the prefill writes into a filled cache (also "
                         "timed into empty caches, interleaved), the decode steps after both (raw rows: JAX only)")
    ap.add_argument("--donation", action="store_true",
                    help="time only the decode step and the prefill, with their caches donated and copied (jit "
                         "donate_argnums and not), interleaved; the ratio copied / donated in wall clock and CPU "
                         "time")
    args = ap.parse_args(argv)
    if args.prompt + args.filled >= args.capacity:
        ap.error(f"--prompt {args.prompt} + --filled {args.filled} must leave room in --capacity {args.capacity}")
    tinygrad = False
    if "opencl" in args.devices and not (args.no_tinygrad or args.filled or args.donation):
        from vs_tinygrad import _point_tinygrad_at_pyopencl_pocl
        _point_tinygrad_at_pyopencl_pocl()   # before PyOpenCL lists its platforms: both see one list
        os.environ.setdefault("DEV", "CL")
        try:
            import tinygrad as _tinygrad  # noqa: F401
            tinygrad = True
        except ImportError:
            print("tinygrad is not installed: no tinygrad rows (pip install tinygrad)")
    import fnarray as fa
    import llm
    from fnarray import nn
    print(load_line())
    cfg = (args.layers, args.heads, args.kv_heads, args.dim // args.heads)
    base = llm.Llama(VOCAB, args.dim, args.heads, args.kv_heads, args.layers, args.hidden, key=fa.random.key(0))
    print(f"model: width {args.dim}, {args.heads}/{args.kv_heads} heads, {args.layers} blocks, SwiGLU {args.hidden}; "
          f"prompt {args.prompt} after {args.filled} filled positions, cache {args.capacity}")
    if args.donation:
        return _donation(fa, llm, nn, base, args)
    print(f"{'device':10} {'weights':8} {'decode tok/s':>12} {'prefill tok/s':>13} {'raw decode':>10} "
          f"{'raw prefill':>11} {'decode x raw':>12} {'prefill x raw':>13} {'(CPU time)':>10}")
    for name, dev, models in _devices_and_models(fa, nn, base, args.devices):
        fns, labels = [], []
        for label, m in models:
            fns.extend(_fnarray_steps(fa, llm, m, dev, args.prompt, args.capacity, filled=args.filled))
            labels.append(label)
        raw = []
        if dev.backend == "jax":
            raw = [_jax_steps(m, cfg, args.prompt, args.capacity, args.filled) for _, m in models]
        elif args.filled:
            pass   # the raw MLX and tinygrad steps start from empty caches
        elif dev.backend == "mlx":
            raw = [_mlx_steps(m, cfg, args.prompt, args.capacity) for _, m in models]
        elif dev.backend == "opencl" and tinygrad:
            raw = []
            for _, m in models:
                try:
                    raw.append(_tinygrad_steps(m, cfg, args.prompt, args.capacity))
                except Exception as e:  # noqa: BLE001  (say what tinygrad could not run, and go on)
                    print(f"{name:10} tinygrad failed: {type(e).__name__}: {str(e)[:200]}")
                    break
        for pair in raw:
            fns.extend(pair)
        if args.filled:   # the same prefill into empty caches, for the last column
            fns.extend(_fnarray_steps(fa, llm, m, dev, args.prompt, args.capacity)[1] for _, m in models)
        times, cpu = best_of(fns, args.number, warm=args.warm)   # a first call compiles
        for fn in fns:
            getattr(fn, "restart", lambda: None)()
        tokens = [fn() for fn in fns]
        for i, label in enumerate(labels):
            dec, pre = times[2 * i], times[2 * i + 1]
            line = f"{name:10} {label:8} {1 / dec:12.1f} {args.prompt / pre:13.1f}"
            if i < len(raw):
                rdec, rpre = times[2 * len(labels) + 2 * i], times[2 * len(labels) + 2 * i + 1]
                r = 2 * len(labels) + 2 * i
                line += (f" {1 / rdec:10.1f} {args.prompt / rpre:11.1f} {dec / rdec:12.2f} {pre / rpre:13.2f} "
                         f"{cpu[2 * i] / cpu[r]:5.2f} {cpu[2 * i + 1] / cpu[r + 1]:4.2f}")
                ours, theirs = tokens[2 * i:2 * i + 2], tokens[2 * len(labels) + 2 * i:2 * len(labels) + 2 * i + 2]
                if ours != theirs:
                    line += f"  tokens differ: {ours} vs {theirs}"
            if args.filled:
                k = 2 * len(labels) + 2 * len(raw) + i
                empty = times[k]
                line += (f"  into empty caches: {args.prompt / empty:.1f} tok/s (filled / empty {pre / empty:.2f}, "
                         f"CPU time {cpu[2 * i + 1] / cpu[k]:.2f})")
            print(line, flush=True)


def _devices_and_models(fa, nn, base, names):
    """``(name, device, [("float32", model), ("4-bit", model)])`` for each device of the comma-separated ``names``
    this machine has (a line for each it lacks), the models on it."""
    for name, dev in available_devices(fa, names):
        yield name, dev, [("float32", fa.device_put(base, dev)),
                          ("4-bit", fa.device_put(nn.quantize(base, group_size=64, bits=4), dev))]


def _donation(fa, llm, nn, base, args):
    """``--donation``: per device and weights, the decode step and the prefill with donated caches against copied
    ones."""
    print(f"{'device':10} {'weights':8} {'step':8} {'donated tok/s':>13} {'copied tok/s':>12} "
          f"{'copied / donated':>16} {'(CPU time)':>10}")
    for name, dev, models in _devices_and_models(fa, nn, base, args.devices):
        fns = [step for _, m in models for d in (True, False)
               for step in _fnarray_steps(fa, llm, m, dev, args.prompt, args.capacity, donate=d, filled=args.filled,
                                          fresh=True)]
        wall, cpu = best_of(fns, args.number, warm=args.warm)
        for i, (label, _) in enumerate(models):
            for j, (step, tokens) in enumerate((("decode", 1), ("prefill", args.prompt))):
                don, cop = 4 * i + j, 4 * i + 2 + j
                print(f"{name:10} {label:8} {step:8} {tokens / wall[don]:13.1f} {tokens / wall[cop]:12.1f} "
                      f"{wall[cop] / wall[don]:16.2f} {cpu[cop] / cpu[don]:10.2f}", flush=True)

if __name__ == "__main__":
    main()
