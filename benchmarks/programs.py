"""Whole-program workloads of the shapes users bring, fnarray on each device against raw JAX (and numpy:0).

Each workload runs in a fresh process per (library, device), interleaved, so that first calls include
tracing and compiling as a user's script sees them:

- ``grid``: the VAE example's jitted 10x10 image grid of ``random.bernoulli`` samples (100 slices of one
  draw): first call, then the steady state of a cached call;
- ``decode``: an eager decode loop whose attention cache grows by one row a step (concatenate, a matrix
  product, softmax, 40 steps), run twice in one process: the second run shows what stays compiled;
- ``stack``: ``stack`` of 5,000 small arrays, eagerly.

Usage: python benchmarks/programs.py [--device numpy:0 --device jax:0 ...] [--repeats 2]
Prints seconds (best of the repeats) and fnarray / raw JAX where raw JAX runs the same program; asserts
nothing. Run at a load average below 2 for numbers worth quoting (the table prints it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKLOADS = ("grid", "decode", "stack")


def _libs(which, device):
    """``(np_, random, jit, put, ready)`` for raw JAX or fnarray on ``device``."""
    if which == "jax":
        import jax
        import jax.numpy as jnp
        return jnp, jax.random, jax.jit, (lambda x: x), jax.block_until_ready
    import fnarray as fa
    import fnarray.numpy as fnp

    def ready(tree):
        for leaf in fa.tree_util.tree_leaves(tree):
            leaf.block_until_ready()
        return tree
    return fnp, fa.random, fa.jit, (lambda x: fa.device_put(x, device)), ready


def grid(np_, random, jit, put, ready):
    def image_grid(v):
        images = iter(v.reshape((-1, 28, 28)))
        return np_.vstack([np_.hstack([next(images).T for _ in range(10)][::-1]) for _ in range(10)]).T
    f = jit(lambda k, v: image_grid(random.bernoulli(k, v)))
    k, v = put(random.key(0)), put(np_.full((100, 784), 0.3))
    t0 = time.perf_counter()
    ready(f(k, v))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(20):
        ready(f(k, v))
    return {"first_s": first, "steady_s": (time.perf_counter() - t0) / 20}


def decode(np_, random, jit, put, ready):
    q = put(np_.ones((1, 64)) * 0.01)
    row = put(np_.ones((1, 64)) * 0.02)

    def run():
        cache = put(np_.zeros((1, 64)))
        out = None
        for _ in range(40):
            cache = np_.concatenate([cache, row], axis=0)
            s = q @ cache.T
            w = np_.exp(s - s.max(axis=-1, keepdims=True))
            out = (w / w.sum(axis=-1, keepdims=True)) @ cache
        return ready(out)
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    run()
    return {"first_s": first, "steady_s": time.perf_counter() - t0}


def stack(np_, random, jit, put, ready):
    xs = [put(np_.full((3,), float(i))) for i in range(5000)]
    t0 = time.perf_counter()
    ready(np_.stack(xs))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    ready(np_.stack(xs))
    return {"first_s": first, "steady_s": time.perf_counter() - t0}


def child(which, device, name):
    out = globals()[name](*_libs(which, device))
    print(json.dumps(out))


def _one(which, device, name):
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    env.pop("FNARRAY_CACHE_DIR", None)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", which, device, name], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1][:60]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _best(runs, field):
    vals = [r[field] for r in runs if field in r]
    return min(vals) if vals else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", default=None)
    ap.add_argument("--workload", action="append", default=None, choices=WORKLOADS)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(*args.child)
    devices = args.device or ["numpy:0", "jax:0"]
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'workload':8s} {'device':9s} {'first s':>8s} {'steady s':>9s} {'raw jax first':>14s} "
          f"{'raw steady':>11s} {'first x':>8s} {'steady x':>9s}")
    for name in args.workload or WORKLOADS:
        raw = []
        ours = {d: [] for d in devices}
        for _ in range(args.repeats):      # interleaved
            raw.append(_one("jax", "", name))
            for d in devices:
                ours[d].append(_one("fnarray", d, name))
        rf, rs = _best(raw, "first_s"), _best(raw, "steady_s")
        for d in devices:
            f, s = _best(ours[d], "first_s"), _best(ours[d], "steady_s")
            err = next((r["error"] for r in ours[d] if "error" in r), "")
            print(f"{name:8s} {d:9s} {f:8.3f} {s:9.4f} {rf:14.3f} {rs:11.4f} {f / rf:8.2f} {s / rs:9.2f} {err}",
                  flush=True)


if __name__ == "__main__":
    main()
