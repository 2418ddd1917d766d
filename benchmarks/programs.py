"""Whole programs of the shapes users bring, on every backend, against raw JAX, raw MLX and numpy:0 (issue 28).

Workloads (each one program, written once against a small adapter ``L`` so that raw JAX, raw MLX and fnarray
run the same operations; fnarray's transformer is ``examples/transformer_lm.py``'s own step):

- ``vae``: an epoch of a VAE (784-H-H-(10, 10) encoder, 10-H-H-784 decoder, Bernoulli likelihood, Gaussian KL,
  momentum SGD; JAX's ``mnist_vae`` example's program on synthetic binary images), one jitted step per batch;
  then its jitted ``evaluate``: a test ELBO and the image grid (``nrow x nrow`` Bernoulli samples of the decoder,
  each sliced out and concatenated into one picture). Two rows: ``vae epoch`` and ``vae grid``;
- ``transformer``: the training step of ``examples/transformer_lm.py`` (fnarray.nn, ``fa.value_and_grad``,
  ``fa.optim.adam``, one ``fa.jit``) against the same network written in raw JAX (``transformer_step.py``'s
  ``make_raw_step``) and in raw MLX (below, ``mx.compile``);
- ``decode`` / ``decode_jit``: a decode loop whose attention cache grows by one row a step (concatenate, a
  matrix product, softmax), eager and with the step jitted (a new shape, so a compile, every step);
  ``decode_shapeless``: the step jitted with ``shapeless=True`` (fnarray's ``fa.jit`` and raw MLX's
  ``mx.compile``: one trace for every length; raw JAX has no such option: plain ``jax.jit``);
- ``jacobians``: ``jacfwd``, ``jacrev`` and ``hessian`` of many small distinct functions, eagerly, as a
  notebook calls them (MLX has no jacobian: ``vmap`` of ``jvp`` / ``vjp``, as its docs write it);
  ``jacobians_staged``: the same with ``fa.config.stage_eager_transforms`` on (opt-in: each transform of each
  function one cached jitted program; the raw libraries run the plain sweep);
- ``stack``: ``stack`` of 5,000 small arrays, eagerly.

"first" is the first run of the workload in a fresh process (tracing and compiling included, imports and
data preparation not); "steady" the same work again in that process (an epoch, a step, a loop, a sweep; the fastest of
``STEADY_PASSES`` passes of the loop, the sweep, the stack and the image grid).
Every (library, device, workload) runs in its own process; the rounds are interleaved (each round runs every
workload on every side before the next round starts) and the best of ``--repeats`` is kept.

Columns: seconds, then the ratios fnarray / raw (raw JAX on jax:0's rows, raw MLX on mlx:0's) and fnarray /
fnarray on numpy:0, for the first call and the steady state; the load average before and after.

Usage: python benchmarks/programs.py [--quick] [--workloads vae,decode] [--backends numpy:0,jax:0]
                                     [--repeats 1] [--timeout 900] [--clock wall|cpu]
``--quick`` shrinks every size; its run is then mostly process starts and first compiles (22 minutes for
all six workloads on all five backends at load average 15 on 2 cores; filter with ``--workloads``/``--backends``
for a few minutes). Per-process progress goes to stderr. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = ("vae", "transformer", "decode", "decode_jit", "decode_shapeless", "jacobians", "jacobians_staged",
             "stack")
BACKENDS = ("numpy:0", "jax:0", "mlx:0", "opencl:0", "webgpu:0")
RAW = {"jax:0": "jax", "mlx:0": "mlx"}   # the raw library each device's rows are compared with

# sizes: full, quick
SIZES = {
    "vae": dict(n=(1024, 128), hidden=(512, 64), batch=(32, 32), nrow=(10, 4), test=(256, 64)),
    "transformer": dict(dim=(64, 32), context=(64, 32), batch=(16, 8), layers=(2, 1), steps=(20, 5)),
    "decode": dict(steps=(40, 10), width=(64, 32)),
    "jacobians": dict(functions=(40, 8), n=(8, 4)),
    "jacobians_staged": dict(functions=(40, 8), n=(8, 4)),
    "stack": dict(arrays=(5000, 500)),
}


def _size(workload, quick):
    return {k: v[1 if quick else 0] for k, v in SIZES[workload].items()}


class _Lib:
    """The adapter: ``np`` (the array namespace) and the transformations, keys, placement and sync."""


def _lib(which, device):
    """The adapter for ``which`` in ``("jax", "mlx", "fnarray")`` (fnarray on ``device``)."""
    L = _Lib()
    L.name = which
    if which == "jax":
        import jax
        import jax.numpy as jnp
        L.np, L.jit, L.value_and_grad, L.tree_map = jnp, jax.jit, jax.value_and_grad, jax.tree.map
        L.jacfwd, L.jacrev, L.hessian = jax.jacfwd, jax.jacrev, jax.hessian
        L.key, L.split = jax.random.key, jax.random.split
        L.normal, L.bernoulli = jax.random.normal, jax.random.bernoulli
        L.put, L.ready = jnp.asarray, jax.block_until_ready
        return L
    if which == "mlx":
        import mlx.core as mx
        from mlx.utils import tree_map
        L.np, L.jit, L.value_and_grad, L.tree_map = mx, mx.compile, mx.value_and_grad, tree_map
        L.key = mx.random.key
        L.split = lambda k, n: [s for s in mx.random.split(k, n)]
        L.normal = lambda k, shape: mx.random.normal(shape, key=k)
        L.bernoulli = lambda k, p: mx.random.bernoulli(p, key=k)
        L.put = mx.array

        def ready(tree):
            mx.eval(tree)
            return tree
        L.ready = ready

        def jacfwd(f):
            def jac(x):
                eye = mx.eye(x.shape[0], dtype=x.dtype)
                return mx.vmap(lambda t: mx.jvp(f, [x], [t])[1][0])(eye).T
            return jac

        def jacrev(f):
            def jac(x):
                eye = mx.eye(f(x).shape[0], dtype=x.dtype)
                return mx.vmap(lambda c: mx.vjp(f, [x], [c])[1][0])(eye)
            return jac
        L.jacfwd, L.jacrev, L.hessian = jacfwd, jacrev, lambda g: jacfwd(mx.grad(g))
        return L
    import fnarray as fa
    import fnarray.numpy as fnp
    L.np, L.jit, L.value_and_grad, L.tree_map = fnp, fa.jit, fa.value_and_grad, fa.tree.map
    L.jacfwd, L.jacrev, L.hessian = fa.jacfwd, fa.jacrev, fa.hessian
    L.key = lambda seed: fa.device_put(fa.random.key(seed), device)
    L.split = fa.random.split
    L.normal, L.bernoulli = fa.random.normal, fa.random.bernoulli
    L.put = lambda a: fa.device_put(a, device)

    L.ready = fa.block_until_ready   # (as raw MLX's ``mx.eval(tree)`` and ``jax.block_until_ready``: the tree at once)
    L.device = device
    return L


#: the clock of ``_timed``: wall time, or the process's CPU time with ``--clock cpu`` (lavapipe and PoCL run
#: kernels in the process's own threads; CPU time scatters less on a loaded machine)
_CLOCK = [time.perf_counter]


def _timed(fn):
    t0 = _CLOCK[0]()
    fn()
    return _CLOCK[0]() - t0


#: passes a steady cell takes the fastest of (a pass of 1-20 ms scattered 2x between runs on a loaded machine)
STEADY_PASSES = 3


def _steady(fn):
    """The fastest of ``STEADY_PASSES`` timed passes of ``fn`` after its first (the library's and raw alike)."""
    return min(_timed(fn) for _ in range(STEADY_PASSES))


# ---------------------------------------------------------------------------------------------------- the VAE
def image_grid(np_, nrow, images):
    """``nrow x nrow`` images ``[k, 784]`` as one ``[28 nrow, 28 nrow]`` picture (slices, transposes, concats)."""
    ims = [images[i].reshape((28, 28)) for i in range(nrow * nrow)]
    rows = [np_.concatenate([ims[r * nrow + c].T for c in range(nrow)][::-1], axis=0) for r in range(nrow)]
    return np_.concatenate(rows, axis=1).T


def vae(L, quick):
    s = _size("vae", quick)
    np_, h, latent, batch, nrow = L.np, s["hidden"], 10, s["batch"], s["nrow"]
    rng = np.random.default_rng(0)
    shapes = {"e0": (784, h), "e1": (h, h), "mu": (h, latent), "sg": (h, latent),
              "d0": (latent, h), "d1": (h, h), "d2": (h, 784)}
    params = {}
    for name, (i, o) in shapes.items():
        params[name + "w"] = L.put(rng.normal(0, i ** -0.5, (i, o)).astype(np.float32))
        params[name + "b"] = L.put(np.zeros(o, np.float32))
    mom = L.tree_map(lambda p: p * 0, params)
    train = (rng.random((s["n"], 784)) < 0.3).astype(np.float32)
    batches = [L.put(train[i:i + batch]) for i in range(0, s["n"], batch)]
    keys = [L.key(i) for i in range(len(batches))]
    test = L.put(rng.random((s["test"], 784)).astype(np.float32))

    def relu(x):
        return np_.maximum(x, 0)

    def softplus(x):
        return np_.logaddexp(x, 0.0)

    def encode(p, x):
        hid = relu(relu(x @ p["e0w"] + p["e0b"]) @ p["e1w"] + p["e1b"])
        return hid @ p["muw"] + p["mub"], softplus(hid @ p["sgw"] + p["sgb"])

    def decode(p, z):
        return relu(relu(z @ p["d0w"] + p["d0b"]) @ p["d1w"] + p["d1b"]) @ p["d2w"] + p["d2b"]

    def elbo(p, key, x):
        mu, s2 = encode(p, x)
        logits = decode(p, mu + np_.sqrt(s2) * L.normal(key, mu.shape))
        loglik = -np_.sum(softplus(-logits) * x + softplus(logits) * (1 - x))
        kl = -0.5 * np_.sum(1 + np_.log(s2) - mu * mu - s2)
        return loglik - kl

    def step(p, m, key, x):
        loss, g = L.value_and_grad(lambda p: -elbo(p, key, x) / batch)(p)
        m = L.tree_map(lambda m, g: 0.9 * m + g, m, g)
        return L.tree_map(lambda p, m: p - 1e-3 * m, p, m), m, loss

    def evaluate(p, key, images):
        k1, k2, k3 = L.split(key, 3)
        test_elbo = elbo(p, k2, L.bernoulli(k1, images)) / images.shape[0]
        z = L.normal(k3, (nrow * nrow, latent))
        sampled = L.bernoulli(k3, 1 / (1 + np_.exp(-decode(p, z))))
        return test_elbo, image_grid(np_, nrow, sampled)

    step, evaluate = L.jit(step), L.jit(evaluate)
    state = [params, mom]

    def epoch():
        p, m = state
        for key, x in zip(keys, batches):
            p, m, loss = step(p, m, key, x)
        L.ready(loss)
        state[:] = [p, m]

    eval_key = L.key(1234)
    first_epoch = _timed(epoch)
    first_grid = _timed(lambda: L.ready(evaluate(state[0], eval_key, test)))
    steady_epoch = _timed(epoch)
    steady_grid = _steady(lambda: L.ready(evaluate(state[0], eval_key, test)))
    return {"vae epoch": {"first_s": first_epoch, "steady_s": steady_epoch},
            "vae grid": {"first_s": first_grid, "steady_s": steady_grid}}


# ------------------------------------------------------------------------------------------- the transformer
def _mlx_transformer_step(lr, batch, context, layers, heads):
    """``transformer_step.make_raw_step`` written in raw MLX (same network, Adam by hand, ``mx.compile``)."""
    import mlx.core as mx
    from mlx.utils import tree_map
    b1, b2, eps = 0.9, 0.999, 1e-8

    def layernorm(p, name, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * mx.rsqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]

    def linear(p, name, x, bias=True):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if bias else y

    def gelu(x):   # the tanh form, jax.nn.gelu's default
        return 0.5 * x * (1 + mx.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    def forward(p, ids):
        b, t = ids.shape
        h = p[".tok.weight"][ids] + p[".pos.weight"][mx.arange(t)]
        causal = mx.tril(mx.ones((t, t), dtype=mx.bool_))
        for i in range(layers):
            pre = f".blocks[{i}]"
            a = layernorm(p, pre + ".ln1", h)
            hs = a.shape[-1] // heads
            q, k, v = (linear(p, pre + f".attn.{n}_proj", a, False).reshape(b, t, heads, hs).transpose(0, 2, 1, 3)
                       for n in ("query", "key", "value"))
            scores = mx.where(causal, (q @ k.transpose(0, 1, 3, 2)) * hs ** -0.5, -1e9)
            o = (mx.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, heads * hs)
            h = h + linear(p, pre + ".attn.output_proj", o, False)
            m = layernorm(p, pre + ".ln2", h)
            h = h + linear(p, pre + ".mlp.layers[1]", gelu(linear(p, pre + ".mlp.layers[0]", m)))
        return linear(p, ".head", layernorm(p, ".ln_f", h))

    def loss_fn(p, windows):
        logits = forward(p, windows[:, :-1])
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return -mx.mean(mx.take_along_axis(logp, windows[:, 1:, None], axis=-1))

    grad_fn = mx.value_and_grad(loss_fn)

    @mx.compile
    def step(p, m, v, count, data, starts):
        windows = data[starts[:, None] + mx.arange(context + 1)[None, :]]
        loss, g = grad_fn(p, windows)
        count = count + 1
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count
        m = tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        p = tree_map(lambda p, m, v: p - lr * (m / c1) / (mx.sqrt(v / c2) + eps), p, m, v)
        return p, m, v, count, loss

    return step


def transformer(L, quick):
    s = _size("transformer", quick)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    sys.path.insert(0, HERE)
    import fnarray as fa
    import transformer_lm as lm
    import transformer_step
    data_np = lm.encode(lm.load_text())[:200_000]
    model = lm.TransformerLM(len(lm.VOCAB), s["context"], s["dim"], 4, s["layers"], key=fa.random.key(0))
    rng = np.random.default_rng(1)
    nsteps = s["steps"]
    starts = [rng.integers(0, len(data_np) - s["context"] - 1, s["batch"]).astype(np.int32)
              for _ in range(nsteps + 1)]
    if L.name == "fnarray":
        model = fa.device_put(model, L.device)
        opt = fa.optim.adam(3e-3)
        st = [model, opt.init(model)]
        f = lm.make_train_step(opt, s["batch"], s["context"], L.device)
        data = fa.device_put(data_np, L.device)
        keys = [L.key(i) for i in range(nsteps + 1)]

        def run(i):
            st[0], st[1], loss = f(st[0], st[1], data, keys[i])
            return loss
    else:
        params = {k: L.put(v) for k, v in transformer_step.weights_of(model).items()}
        zeros = L.tree_map(lambda p: p * 0, params)
        st = [params, zeros, L.tree_map(lambda p: p * 0, params), L.put(np.zeros((), np.int32))]
        make = transformer_step.make_raw_step if L.name == "jax" else _mlx_transformer_step
        f = make(None, 3e-3, s["batch"], s["context"], s["layers"], 4) if L.name == "jax" else \
            make(3e-3, s["batch"], s["context"], s["layers"], 4)
        data = L.put(data_np)
        starts_dev = [L.put(x) for x in starts]

        def run(i):
            out = f(*st, data, starts_dev[i])
            st[:] = out[:4]
            return out[4]
    first = _timed(lambda: L.ready(run(0)))

    def rest():
        for i in range(1, nsteps + 1):
            loss = run(i)
        L.ready(loss)
    return {"transformer step": {"first_s": first, "steady_s": _timed(rest) / nsteps}}


# -------------------------------------------------------------------------------------------------- decoding
def _decode(L, quick, jitted, shapeless=False):
    s = _size("decode", quick)
    np_, w = L.np, s["width"]
    q = L.put(np.full((1, w), 0.01, np.float32))
    row = L.put(np.full((1, w), 0.02, np.float32))

    def step(cache, q, row):
        cache = np_.concatenate([cache, row], axis=0)
        sc = q @ cache.T
        e = np_.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    if shapeless and L.name != "jax":   # (JAX has no shapeless jit: its plain one)
        step = L.jit(step, shapeless=True)
    elif jitted:
        step = L.jit(step)

    def run():
        cache = L.put(np.zeros((1, w), np.float32))
        for _ in range(s["steps"]):
            cache, out = step(cache, q, row)
        L.ready(out)
    name = "decode shapeless" if shapeless else "decode jitted" if jitted else "decode eager"
    return {name: {"first_s": _timed(run), "steady_s": _steady(run)}}


def decode(L, quick):
    return _decode(L, quick, False)


def decode_jit(L, quick):
    return _decode(L, quick, True)


def decode_shapeless(L, quick):
    return _decode(L, quick, True, shapeless=True)


# ------------------------------------------------------------------------------------------------ jacobians
def jacobians(L, quick):
    s = _size("jacobians", quick)
    np_, n = L.np, s["n"]
    rng = np.random.default_rng(2)
    x = L.put(rng.uniform(-1, 1, n).astype(np.float32))
    mat = L.put(rng.normal(0, n ** -0.5, (n, n)).astype(np.float32))
    forms = (lambda x, c: np_.tanh(c * x) * x,
             lambda x, c: np_.sin(c * x) + x * x,
             lambda x, c: np_.exp(-c * x * x) * x,
             lambda x, c: x / (1 + c * x * x),
             lambda x, c: np_.tanh(mat @ (c * x)))
    funcs = [(lambda form, c: lambda x: form(x, c))(forms[k % len(forms)], 0.5 + 0.1 * k)
             for k in range(s["functions"])]

    def sweep():
        out = []
        for f in funcs:
            out += [L.jacfwd(f)(x), L.jacrev(f)(x), L.hessian(lambda x, f=f: f(x).sum())(x)]
        L.ready(out)
    return {"jacobians": {"first_s": _timed(sweep), "steady_s": _steady(sweep)}}


def jacobians_staged(L, quick):
    """The same sweep with ``fa.config.stage_eager_transforms`` on (fnarray): each transform of each function a
    cached jitted program, keyed by the function's fingerprint (the raw libraries run the plain sweep)."""
    if L.name != "fnarray":
        return {"jacobians staged": jacobians(L, quick)["jacobians"]}
    import fnarray as fa
    before, fa.config.stage_eager_transforms = fa.config.stage_eager_transforms, True
    try:   # tests run the workloads in their own process: the setting must not outlive the sweep
        return {"jacobians staged": jacobians(L, quick)["jacobians"]}
    finally:
        fa.config.stage_eager_transforms = before


# ---------------------------------------------------------------------------------------------------- stack
def stack(L, quick):
    s = _size("stack", quick)
    xs = [L.put(np.full((3,), float(i), np.float32)) for i in range(s["arrays"])]
    L.ready(xs)
    return {"stack": {"first_s": _timed(lambda: L.ready(L.np.stack(xs))),
                      "steady_s": _steady(lambda: L.ready(L.np.stack(xs)))}}


# ---------------------------------------------------------------------------------------------- the driver
def child(which, device, name, quick):
    out = globals()[name](_lib(which, device), quick)
    print(json.dumps(out))


def _one(which, device, name, quick, timeout, clock="wall"):
    """One fresh process: ``{row: {"first_s", "steady_s"}}`` or ``{"error": text}``."""
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    env.pop("FNARRAY_CACHE_DIR", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", which, device or "-", name, "--clock", clock]
    try:
        out = subprocess.run(cmd + (["--quick"] if quick else []), env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout} s"}
    if out.returncode:
        lines = out.stderr.strip().splitlines() or ["(no output)"]
        return {"error": lines[-1][:80]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _best(runs, row, field):
    vals = [r[row][field] for r in runs if row in r]
    return min(vals) if vals else float("nan")


def _ratio(a, b):
    return "—" if not (math.isfinite(a) and math.isfinite(b) and b > 0) else f"{a / b:.2f}"


def _secs(v):
    return "—" if not math.isfinite(v) else (f"{v:.3g}" if v >= 0.01 else f"{v * 1e3:.3g} ms")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of " + ", ".join(WORKLOADS))
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated fnarray devices")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds; the best is kept")
    ap.add_argument("--quick", action="store_true", help="small sizes (compiles still dominate)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per process before it is given up")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="seconds of wall time (default) or of the process's CPU time")
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.clock == "cpu":
        _CLOCK[0] = time.process_time
    if args.child:
        which, device, name = args.child
        return child(which, None if device == "-" else device, name, args.quick)
    workloads = [w for w in args.workloads.split(",") if w]
    backends = [b for b in args.backends.split(",") if b]
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workloads {bad}; choose among {', '.join(WORKLOADS)}")
    sides = [("fnarray", "numpy:0")] if "numpy:0" not in backends else []   # the reference column
    for b in backends:
        sides.append(("fnarray", b))
        if b in RAW:
            sides.append((RAW[b], None))
    load0 = os.getloadavg()
    print(f"benchmarks/programs.py {'--quick ' if args.quick else ''}--workloads {','.join(workloads)} "
          f"--backends {','.join(backends)} --repeats {args.repeats} --clock {args.clock}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    runs = {(w, side): [] for w in workloads for side in sides}
    for _ in range(args.repeats):                      # interleaved rounds
        for w in workloads:
            for side in sides:
                t0 = time.perf_counter()
                runs[w, side].append(_one(side[0], side[1], w, args.quick, args.timeout, args.clock))
                print(f"  {w} {side[0]} {side[1] or ''}: {time.perf_counter() - t0:.1f} s in the process "
                      f"(load {os.getloadavg()[0]:.1f}) {json.dumps(runs[w, side][-1])}", file=sys.stderr,
                      flush=True)
    print()
    print("| workload | device | first (s) | steady (s) | first / raw | steady / raw | raw | "
          "first / numpy:0 | steady / numpy:0 | note |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    for w in workloads:
        ref = runs[w, ("fnarray", "numpy:0")]
        rows = sorted({row for r in ref + [x for b in backends for x in runs[w, ("fnarray", b)]] for row in r
                       if row != "error"})
        for row in rows:
            for b in backends:
                ours = runs[w, ("fnarray", b)]
                f, s = _best(ours, row, "first_s"), _best(ours, row, "steady_s")
                nf, ns = _best(ref, row, "first_s"), _best(ref, row, "steady_s")
                raw_name, rf, rs = "", float("nan"), float("nan")
                notes = [r["error"] for r in ours if "error" in r]
                if b in RAW:
                    raw = runs[w, (RAW[b], None)]
                    raw_name = f"{RAW[b]} {_secs(_best(raw, row, 'first_s'))} / {_secs(_best(raw, row, 'steady_s'))}"
                    rf, rs = _best(raw, row, "first_s"), _best(raw, row, "steady_s")
                    notes += [f"raw: {r['error']}" for r in raw if "error" in r]
                print(f"| {row} | {b} | {_secs(f)} | {_secs(s)} | {_ratio(f, rf)} | {_ratio(s, rs)} | {raw_name} | "
                      f"{_ratio(f, nf)} | {_ratio(s, ns)} | {'; '.join(notes)} |", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
