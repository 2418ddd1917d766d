"""First-call latency of the digits training step, cold and warm, with the persistent compilation cache.

For each device, three fresh processes run ``examples/digits_mlp.make_train_step``'s jitted step once
(then once more, for the steady state): ``off`` without ``FNARRAY_CACHE_DIR``, ``cold`` with an empty
cache folder, ``warm`` with the folder the cold process filled. Each prints the first call's time
(trace + lower + compile + run, waited for) and the second's. PoCL's own kernel cache is turned off
(``POCL_KERNEL_CACHE=0``) so that only fnarray's cache persists between the processes; BLAS runs one
thread (``OPENBLAS_NUM_THREADS=1``: tiny matrices on a busy machine).

With ``--pocl-cache`` PoCL keeps its compiled kernels too (its default), in a fresh folder per
measurement: then ``warm`` is what a user sees in a second process, with both caches filled.

With ``--vs-jax`` it measures instead the first call (trace + lower + XLA compile + run, waited for) of whole
programs on jax:0 against raw ``jax.jit`` of the same program, each in a fresh process, and prints the ratio
and fnarray's build time per IR equation: the VAE example's 10x10 image grid of ``random.bernoulli`` samples
(100 slices of one draw), the same grid of ``sin``, and a jitted ``grad`` of a 64-64-128-10 MLP.

Usage: python benchmarks/first_call.py [--device numpy:0 --device jax:0 ...] [--pocl-cache] [--vs-jax]
Prints a table in milliseconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(device):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np

    import digits_mlp
    import fnarray as fa
    rng = np.random.default_rng(0)
    x = rng.random((256, 64), dtype=np.float32)
    y = rng.integers(0, 10, 256).astype(np.int32)
    idx = np.arange(64, dtype=np.int32)
    opt = fa.optim.adam(1e-3)
    params = fa.device_put({k: np.asarray(v) for k, v in digits_mlp.init_params(fa.random.key(0)).items()}, device)
    state = opt.init(params)
    xs, ys, ids = fa.device_put(x, device), fa.device_put(y, device), fa.device_put(idx, device)
    step = digits_mlp.make_train_step(opt, device)
    for leaf in fa.tree_util.tree_leaves((params, state)):
        leaf.block_until_ready()
    t0 = time.perf_counter()
    params, state, loss = step(params, state, xs, ys, ids)
    float(loss)
    t1 = time.perf_counter()
    params, state, loss = step(params, state, xs, ys, ids)
    float(loss)
    t2 = time.perf_counter()
    print(json.dumps({"first_ms": (t1 - t0) * 1e3, "second_ms": (t2 - t1) * 1e3}))


def _programs(np_, random):
    """The --vs-jax workloads, written once over a NumPy-like namespace and a random module."""
    def image_grid(imagevecs):
        images = iter(imagevecs.reshape((-1, 28, 28)))
        return np_.vstack([np_.hstack([next(images).T for _ in range(10)][::-1]) for _ in range(10)]).T

    def mlp_loss(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = np_.tanh(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        logits = logits - logits.max(axis=1, keepdims=True)
        return -np_.mean(np_.sum(y * (logits - np_.log(np_.sum(np_.exp(logits), axis=1, keepdims=True))), axis=1))

    return {"grid_bernoulli": lambda k, v: image_grid(random.bernoulli(k, v)),
            "grid_sin": lambda k, v: image_grid(np_.sin(v)),
            "mlp_grad": mlp_loss}


def _args(np_, random, name):
    import numpy as np
    if name.startswith("grid"):
        return random.key(0), np_.asarray(np.full((100, 784), 0.3, np.float32))
    rng = np.random.default_rng(0)
    sizes = (64, 64, 128, 10)
    params = [(np_.asarray(rng.standard_normal((a, b), dtype=np.float32)), np_.zeros(b, dtype=np_.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    return params, np_.asarray(rng.random((32, 64), dtype=np.float32)), np_.asarray(np.eye(10, dtype=np.float32)[
        rng.integers(0, 10, 32)])


def child_vs_jax(which, name):
    if which == "jax":
        import jax
        import jax.numpy as jnp
        f = _programs(jnp, jax.random)[name]
        if name == "mlp_grad":
            f = jax.grad(f)
        args = _args(jnp, jax.random, name)
        t0 = time.perf_counter()
        jax.block_until_ready(jax.jit(f)(*args))
        print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3, "eqns": 0}))
        return
    import fnarray as fa
    import fnarray.numpy as fnp
    f = _programs(fnp, fa.random)[name]
    if name == "mlp_grad":
        f = fa.grad(f)
    args = fa.device_put(_args(fnp, fa.random, name), "jax:0")
    t0 = time.perf_counter()
    for leaf in fa.tree_util.tree_leaves(fa.jit(f)(*args)):
        leaf.block_until_ready()
    ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"ms": ms, "eqns": len(fa.make_ir(f)(*args).eqns)}))


def vs_jax(repeats=3):
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    env.pop("FNARRAY_CACHE_DIR", None)

    def one(which, name):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--vs-jax-child", which, name], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=900)
        if out.returncode:
            raise RuntimeError(f"{which} {name}: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'program':16s} {'fnarray ms':>11s} {'raw jax ms':>11s} {'ratio':>6s} {'eqns':>5s} {'ms/eqn':>7s}")
    for name in ("grid_bernoulli", "grid_sin", "mlp_grad"):
        ours, raw = [], []
        for _ in range(repeats):           # interleaved, best of each
            ours.append(one("fnarray", name))
            raw.append(one("jax", name))
        o, r = min(x["ms"] for x in ours), min(x["ms"] for x in raw)
        n = ours[0]["eqns"]
        print(f"{name:16s} {o:11.0f} {r:11.0f} {o / r:6.2f} {n:5d} {o / n:7.2f}", flush=True)


def run(device, cache, pocl_dir=None):
    env = dict(os.environ, POCL_KERNEL_CACHE="0", PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    if pocl_dir is not None:  # PoCL's own kernel cache on, in a folder of this measurement
        env.update(POCL_KERNEL_CACHE="1", POCL_CACHE_DIR=pocl_dir)
    env.pop("FNARRAY_CACHE_DIR", None)
    if cache is not None:
        env["FNARRAY_CACHE_DIR"] = cache
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", device], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"{device}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", default=None)
    ap.add_argument("--pocl-cache", action="store_true",
                    help="keep PoCL's own kernel cache on (fresh for 'off' and 'cold', filled for 'warm')")
    ap.add_argument("--vs-jax", action="store_true", help="build time of whole programs on jax:0 against raw JAX")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--vs-jax-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.vs_jax_child:
        return child_vs_jax(*args.vs_jax_child)
    if args.vs_jax:
        return vs_jax()
    devices = args.device or ["numpy:0", "jax:0", "mlx:0", "opencl:0", "webgpu:0"]
    print(f"{'device':10s} {'off first ms':>13s} {'cold first ms':>14s} {'warm first ms':>14s} {'warm/cold':>9s} "
          f"{'steady ms':>10s}")
    for d in devices:
        with tempfile.TemporaryDirectory(prefix="fnarray-cache-") as tmp:
            pocl = (lambda name: os.path.join(tmp, name)) if args.pocl_cache else (lambda name: None)
            off = run(d, None, pocl("pocl-off"))
            cold = run(d, os.path.join(tmp, "fnarray"), pocl("pocl"))
            warm = run(d, os.path.join(tmp, "fnarray"), pocl("pocl"))
        print(f"{d:10s} {off['first_ms']:13.1f} {cold['first_ms']:14.1f} {warm['first_ms']:14.1f} "
              f"{warm['first_ms'] / cold['first_ms']:9.2f} {warm['second_ms']:10.2f}", flush=True)


if __name__ == "__main__":
    main()
