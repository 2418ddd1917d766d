"""fnarray on a JAX or MLX device against hand-written code in the raw library, in one run.

Measures (issue "jax backend" / "mlx backend"):
  a) per-call time of a jitted 4-element function;
  b) the fused chain ``tanh(a*x+b)*x+1`` on three float32 arrays of 16M elements (throughput);
  c) one training step of the digits MLP (64-128-128-10, ReLU, softmax cross-entropy, Adam,
     batch 64): forward, backward and the Adam update in one jitted call;
  d) the first call (trace + compile) of (c).

Usage:
  python benchmarks/backend_vs_raw.py --device jax:0     # any JAX device: jax:0 on a GPU host is the GPU
  python benchmarks/backend_vs_raw.py --device mlx:cpu
Ratios are raw time / fnarray time for throughput rows (>= 1 means fnarray is as fast),
fnarray time / raw time for per-call rows. Prints a Markdown table; asserts nothing.

Raw MLX is timed both through ``mx.compile`` and eagerly (on the Linux CPU build the compiled
form is slower for large arrays and faster for small ones); each row compares with the faster
of the two, named in the table. Row (d) times the raw variant that won row (c).
"""

from __future__ import annotations

import argparse
import time
import timeit

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.devices.placement import parse_device

SIZES = (64, 128, 128, 10)


def best(fn, number, repeat):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def fastest(fns, number, repeat):
    """``(time, name)`` of the fastest of ``{name: fn}``."""
    return min((best(fn, number, repeat), name) for name, fn in fns.items())


# ------------------------------------------------------------------------ fnarray versions

def fn_chain(a, x, b):
    return fnp.tanh(a * x + b) * x + 1.0


def fn_init(seed=0):
    rng = np.random.default_rng(seed)
    params = {}
    for i, (m, n) in enumerate(zip(SIZES[:-1], SIZES[1:]), 1):
        params[f"w{i}"] = (rng.standard_normal((m, n)) * np.sqrt(2 / m)).astype(np.float32)
        params[f"b{i}"] = np.zeros(n, np.float32)
    return params


def fn_loss(p, x, y):
    h = fa.nn.relu(x @ p["w1"] + p["b1"])
    h = fa.nn.relu(h @ p["w2"] + p["b2"])
    logits = h @ p["w3"] + p["b3"]
    return -fnp.mean(fnp.sum(fa.nn.log_softmax(logits) * y, axis=-1))


def make_fn_step():
    opt = fa.optim.adam(1e-3)

    def step(params, state, x, y):
        loss, g = fa.value_and_grad(fn_loss)(params, x, y)
        updates, state = opt.update(g, state, params)
        return fa.optim.apply_updates(params, updates), state, loss
    return opt, step


# ------------------------------------------------------------------------ raw JAX versions

def jax_versions():
    import jax
    import jax.numpy as jnp

    def chain(a, x, b):
        return jnp.tanh(a * x + b) * x + 1.0

    def loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        logits = h @ p["w3"] + p["b3"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    def step(params, state, x, y):
        m, v, t = state
        lval, g = jax.value_and_grad(loss)(params, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: 0.999 * v_ + 0.001 * g_ * g_, v, g)
        mh = jax.tree_util.tree_map(lambda m_: m_ / (1 - 0.9 ** t), m)
        vh = jax.tree_util.tree_map(lambda v_: v_ / (1 - 0.999 ** t), v)
        params = jax.tree_util.tree_map(lambda p_, a, b: p_ - 1e-3 * a / (jnp.sqrt(b) + 1e-8), params, mh, vh)
        return params, (m, v, t), lval

    def init_state(params):
        z = jax.tree_util.tree_map(jnp.zeros_like, params)
        return (z, z, jnp.zeros((), jnp.float32))

    def put(x, dev):
        return jax.device_put(x, dev)

    def block(x):
        return jax.block_until_ready(x)

    return dict(jits={"jax.jit": jax.jit}, chain=chain, step=step, init_state=init_state, put=put, block=block)


def mlx_versions():
    import mlx.core as mx
    import mlx.nn as mnn

    def chain(a, x, b):
        return mx.tanh(a * x + b) * x + 1.0

    def loss(p, x, y):
        h = mnn.relu(x @ p["w1"] + p["b1"])
        h = mnn.relu(h @ p["w2"] + p["b2"])
        logits = h @ p["w3"] + p["b3"]
        return -mx.mean(mx.sum((logits - mx.logsumexp(logits, axis=-1, keepdims=True)) * y, axis=-1))

    vg = mx.value_and_grad(loss)

    def step(params, state, x, y):
        m, v, t = state
        lval, g = vg(params, x, y)
        t = t + 1
        m = {k: 0.9 * m[k] + 0.1 * g[k] for k in g}
        v = {k: 0.999 * v[k] + 0.001 * g[k] * g[k] for k in g}
        params = {k: params[k] - 1e-3 * (m[k] / (1 - 0.9 ** t)) / (mx.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
                  for k in params}
        return params, (m, v, t), lval

    def init_state(params):
        z = {k: mx.zeros_like(v) for k, v in params.items()}
        return (z, z, mx.array(0.0))

    def block(x):
        mx.eval(x)
        return x

    return dict(jits={"mx.compile": mx.compile, "eager": lambda fn: fn}, chain=chain, step=step,
                init_state=init_state, put=lambda x, dev: mx.array(x), block=block)


# ------------------------------------------------------------------------ the run

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="jax:0")
    ap.add_argument("--size", type=int, default=16 * 1024 * 1024, help="elements of the chain's arrays")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    dev = parse_device(args.device)
    raw = jax_versions() if dev.backend == "jax" else mlx_versions()
    handle = dev.handle
    rows = []

    # (a) per call
    x4 = np.arange(4, dtype=np.float32)
    f = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    xf = fa.device_put(fnp.asarray(x4), dev)
    xr = raw["put"](x4, handle)
    t_f = best(lambda: f(xf).block_until_ready(), 3000, args.repeat)
    rfs = {k: j(lambda a: a * 2.0 + 1.0) for k, j in raw["jits"].items()}
    t_r, how = fastest({k: (lambda rf=rf: raw["block"](rf(xr))) for k, rf in rfs.items()}, 3000, args.repeat)
    rows.append(("(a) jitted call, f32[4] (us)", t_f * 1e6, t_r * 1e6, t_f / t_r, "<= 2.0", how))

    # (b) fused chain, throughput
    n = args.size
    rng = np.random.default_rng(0)
    a, x, b = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    g = fa.jit(fn_chain, device=dev)
    af, xf2, bf = (fa.device_put(fnp.asarray(v), dev) for v in (a, x, b))
    ar, xr2, br = (raw["put"](v, handle) for v in (a, x, b))
    rgs = {k: j(raw["chain"]) for k, j in raw["jits"].items()}
    for rg in rgs.values():
        np.testing.assert_allclose(np.asarray(g(af, xf2, bf)), np.asarray(rg(ar, xr2, br)), rtol=1e-5, atol=1e-5)
    t_f = best(lambda: g(af, xf2, bf).block_until_ready(), 5, args.repeat)
    t_r, how = fastest({k: (lambda rg=rg: raw["block"](rg(ar, xr2, br))) for k, rg in rgs.items()}, 5, args.repeat)
    rows.append((f"(b) tanh(a*x+b)*x+1, {n / 2**20:.1f}M f32 (ms)", t_f * 1e3, t_r * 1e3, t_r / t_f, ">= 0.9", how))

    # (c)/(d) digits MLP training step
    params = fn_init()
    xb = rng.random((64, 64)).astype(np.float32)
    yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    opt, fstep = make_fn_step()
    pf = fa.device_put({k: fnp.asarray(v) for k, v in params.items()}, dev)
    sf = opt.init(pf)
    xbf, ybf = fa.device_put(fnp.asarray(xb), dev), fa.device_put(fnp.asarray(yb), dev)
    jstep = fa.jit(fstep, device=dev)
    t0 = time.perf_counter()
    out = jstep(pf, sf, xbf, ybf)
    out[2].block_until_ready()
    first_f = time.perf_counter() - t0
    xbr, ybr = raw["put"](xb, handle), raw["put"](yb, handle)
    state = {"f": (pf, sf)}
    firsts, runs = {}, {}
    for k, j in raw["jits"].items():
        pr = {name: raw["put"](v, handle) for name, v in params.items()}
        sr = raw["init_state"](pr)
        rstep = j(raw["step"])
        t0 = time.perf_counter()
        pr2, sr2, loss0 = rstep(pr, sr, xbr, ybr)
        raw["block"](loss0)
        firsts[k] = time.perf_counter() - t0
        state[k] = (pr2, sr2)

        def run_r(k=k, rstep=rstep):
            p, s = state[k]
            p, s, loss = rstep(p, s, xbr, ybr)
            state[k] = (p, s)
            raw["block"](loss)
        runs[k] = run_r

    def run_f():
        p, s = state["f"]
        p, s, loss = jstep(p, s, xbf, ybf)
        state["f"] = (p, s)
        loss.block_until_ready()

    t_f = best(run_f, 200, args.repeat)
    t_r, how = fastest(runs, 200, args.repeat)
    rows.append(("(c) digits MLP train step (us)", t_f * 1e6, t_r * 1e6, t_r / t_f, ">= 0.9", how))
    rows.append(("(d) first call of (c), trace+compile (ms)", first_f * 1e3, firsts[how] * 1e3,
                 first_f / firsts[how], "reported", how))

    lib = "JAX" if dev.backend == "jax" else "MLX"
    print(f"device: {dev} — {dev.description}")
    print(f"| measure | fnarray | raw {lib} | ratio | target | raw {lib} form |")
    print("|---|---|---|---|---|---|")
    for name, fv, rv, ratio, target, how in rows:
        print(f"| {name} | {fv:.2f} | {rv:.2f} | {ratio:.2f} | {target} | {how} |")


if __name__ == "__main__":
    main()
