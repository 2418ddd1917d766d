"""One training step of ``examples/transformer_lm.py`` on jax:0 against the same model written in raw JAX.

Both sides train the same character-level transformer (token and position embeddings,
pre-norm blocks of LayerNorm, causal 4-head attention and a GELU MLP, a final LayerNorm and
linear head; softmax cross-entropy; Adam with optax's defaults) from the same initial weights
on the same batches. fnarray runs the example's ``make_train_step`` (fnarray.nn modules, one
jitted call: draw the windows, ``value_and_grad``, Adam) on ``--device`` (default jax:0); the
raw side writes the forward pass in ``jax.numpy``/``jax.nn`` with a dict of weights, takes
``jax.value_and_grad`` and applies Adam by hand, all under one ``jax.jit``.

Each side runs warm-up steps (compiles), then ``--repeat`` rounds of ``--steps`` steps,
interleaved; the best round of each is reported in wall-clock and CPU time per step, with the
ratio. The losses of the last step of both sides are printed as a sanity check (they use the
same batches, so they should agree to float32 rounding). Asserts nothing.

Usage: python benchmarks/transformer_step.py [--device jax:0] [--steps 50] [--repeat 5] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import transformer_lm as lm  # noqa: E402

B1, B2, EPS = 0.9, 0.999, 1e-8


def weights_of(model):
    """The model's arrays as ``{keystr path: np.ndarray}``."""
    return {fa.tree_util.keystr(p): np.asarray(x) for p, x in fa.tree_util.tree_flatten_with_path(model)[0]}


def make_raw_step(cfg, lr, batch_size, context, n_layers, heads):
    """The same step in raw JAX: ``(params, m, v, count, data, starts) -> (params, m, v, count, loss)``."""
    import jax
    import jax.numpy as jnp

    def layernorm(p, name, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]

    def linear(p, name, x, bias=True):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if bias else y

    def forward(p, ids):
        b, t = ids.shape
        h = p[".tok.weight"][ids] + p[".pos.weight"][jnp.arange(t)]
        for i in range(n_layers):
            pre = f".blocks[{i}]"
            a = layernorm(p, pre + ".ln1", h)
            hs = a.shape[-1] // heads
            q = linear(p, pre + ".attn.query_proj", a, False).reshape(b, t, heads, hs)
            k = linear(p, pre + ".attn.key_proj", a, False).reshape(b, t, heads, hs)
            v = linear(p, pre + ".attn.value_proj", a, False).reshape(b, t, heads, hs)
            o = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, heads * hs)
            h = h + linear(p, pre + ".attn.output_proj", o, False)
            m = layernorm(p, pre + ".ln2", h)
            h = h + linear(p, pre + ".mlp.layers[1]", jax.nn.gelu(linear(p, pre + ".mlp.layers[0]", m)))
        return linear(p, ".head", layernorm(p, ".ln_f", h))

    def loss_fn(p, windows):
        logp = jax.nn.log_softmax(forward(p, windows[:, :-1]), -1)
        return -jnp.mean(jnp.take_along_axis(logp, windows[:, 1:, None], -1))

    @jax.jit
    def step(p, m, v, count, data, starts):
        windows = data[starts[:, None] + jnp.arange(context + 1)[None, :]]
        loss, g = jax.value_and_grad(loss_fn)(p, windows)
        count = count + 1
        c1 = 1 - B1 ** count
        c2 = 1 - B2 ** count
        m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, m, g)
        v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, v, g)
        p = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + EPS), p, m, v)
        return p, m, v, count, loss

    return step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="jax:0")
    ap.add_argument("--steps", type=int, default=50, help="steps per timed round (default 50)")
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds per side (default 5)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp

    device = fa.get_device(args.device)
    data_np = lm.encode(lm.load_text())
    model = lm.TransformerLM(len(lm.VOCAB), args.context, args.dim, args.heads, args.layers, key=fa.random.key(0))
    model = fa.device_put(model, device)
    opt = fa.optim.adam(args.lr)
    state = opt.init(model)
    fa_step = lm.make_train_step(opt, args.batch_size, args.context, device)
    data_fa = fa.device_put(data_np, device)

    params = {k: jnp.asarray(v) for k, v in weights_of(model).items()}
    m = jax.tree.map(jnp.zeros_like, params)
    v = jax.tree.map(jnp.zeros_like, params)
    count = jnp.zeros((), jnp.int32)
    raw_step = make_raw_step(None, args.lr, args.batch_size, args.context, args.layers, args.heads)
    data_jax = jnp.asarray(data_np)
    # The raw side gets the same windows as fnarray's on-device draw (the same fa.random stream).
    draw = fa.jit(lambda key: fa.random.randint(key, (args.batch_size,), 0, data_np.shape[0] - args.context - 1))
    n_total = args.steps * (args.repeat + 1)
    keys = [fa.random.fold_in(fa.random.key(1), i) for i in range(n_total)]
    starts = [jnp.asarray(np.asarray(draw(k))) for k in keys]

    def run_fa(lo, hi):
        nonlocal model, state
        w0, c0 = time.perf_counter(), time.process_time()
        for i in range(lo, hi):
            model, state, loss = fa_step(model, state, data_fa, keys[i])
        loss = float(loss)
        return (time.perf_counter() - w0) / (hi - lo), (time.process_time() - c0) / (hi - lo), loss

    def run_raw(lo, hi):
        nonlocal params, m, v, count
        w0, c0 = time.perf_counter(), time.process_time()
        for i in range(lo, hi):
            params, m, v, count, loss = raw_step(params, m, v, count, data_jax, starts[i])
        loss = float(loss)
        return (time.perf_counter() - w0) / (hi - lo), (time.process_time() - c0) / (hi - lo), loss

    t_compile_fa = run_fa(0, args.steps)
    t_compile_raw = run_raw(0, args.steps)
    fa_t, raw_t = [], []
    for r in range(1, args.repeat + 1):
        lo, hi = r * args.steps, (r + 1) * args.steps
        fa_t.append(run_fa(lo, hi))
        raw_t.append(run_raw(lo, hi))
    wall_fa, cpu_fa = min(t[0] for t in fa_t), min(t[1] for t in fa_t)
    wall_raw, cpu_raw = min(t[0] for t in raw_t), min(t[1] for t in raw_t)
    print(f"transformer LM step ({args.layers} blocks, width {args.dim}, {args.heads} heads, context {args.context}, "
          f"batch {args.batch_size}), best of {args.repeat} rounds of {args.steps} steps")
    print(f"  {'':38s} {'wall ms/step':>13s} {'CPU ms/step':>12s}")
    print(f"  {'fnarray.nn on ' + str(device):38s} {wall_fa * 1e3:13.3f} {cpu_fa * 1e3:12.3f}")
    print(f"  {'raw JAX (jax.jit of the same step)':38s} {wall_raw * 1e3:13.3f} {cpu_raw * 1e3:12.3f}")
    print(f"  ratio fnarray / raw JAX: {wall_fa / wall_raw:.2f}x wall, {cpu_fa / cpu_raw:.2f}x CPU "
          f"(warm-up rounds incl. compile: {t_compile_fa[0] * 1e3:.1f} vs {t_compile_raw[0] * 1e3:.1f} ms/step)")
    print(f"  sanity: last loss fnarray {fa_t[-1][2]:.5f}, raw JAX {raw_t[-1][2]:.5f}")
    return {"fnarray_wall": wall_fa, "raw_wall": wall_raw, "ratio": wall_fa / wall_raw,
            "fnarray_loss": fa_t[-1][2], "raw_loss": raw_t[-1][2]}


if __name__ == "__main__":
    main()
