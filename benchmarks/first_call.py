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

With ``--breakdown`` it splits the first call of the digits step (no fnarray cache, PoCL's kernel cache off) on
opencl:0 and webgpu:0 into its parts, timed by wrapping the functions that do them: ``schedule`` (kernel
schedule), ``render`` (kernel source), ``build`` (clBuildProgram, one per jitted program) or ``pipeline``
(WGSL module + compute pipeline, one per distinct kernel), ``launch`` (enqueueing) and ``wait`` (waiting for
the results: on PoCL, its compile of each kernel at its first launch), the rest being trace, partition and
dispatch, with the number of calls of each.

Usage: python benchmarks/first_call.py [--device numpy:0 --device jax:0 ...] [--pocl-cache] [--vs-jax] [--breakdown]
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


def _wrap(parts, counts, owner, attr, part):
    """Replace ``owner.attr`` by a wrapper adding its time to ``parts[part]`` and its calls to ``counts[part]``."""
    f = getattr(owner, attr)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            parts[part] = parts.get(part, 0.0) + (time.perf_counter() - t0) * 1e3
            counts[part] = counts.get(part, 0) + 1
    setattr(owner, attr, timed)


def _instrument(device, parts, counts):
    """Wrap the backend functions that make up a first call on ``device`` (``--breakdown``)."""
    if device.startswith("opencl"):
        from fnarray.lowering.opencl import backend, dispatch
        _wrap(parts, counts, backend, "render_opencl", "render")
        _wrap(parts, counts, backend.OpenCLLowered, "_schedule_now", "schedule")
        _wrap(parts, counts, backend._DeviceState, "_build", "build")
        _wrap(parts, counts, dispatch.cl, "enqueue_nd_range_kernel", "launch")
    elif device.startswith("webgpu"):
        from fnarray.lowering.webgpu import backend
        _wrap(parts, counts, backend, "render_wgsl", "render")
        _wrap(parts, counts, backend.WebGPULowered, "_schedule_now", "schedule")
        _wrap(parts, counts, backend._GPU, "_new_pipeline", "pipeline")


def child_breakdown(device):
    """The digits step's first call on ``device`` split into parts (``--breakdown``); prints one JSON line."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np

    import digits_mlp
    import fnarray as fa
    parts, counts = {}, {}
    _instrument(device, parts, counts)
    rng = np.random.default_rng(0)
    opt = fa.optim.adam(1e-3)
    params = fa.device_put({k: np.asarray(v) for k, v in digits_mlp.init_params(fa.random.key(0)).items()}, device)
    state = opt.init(params)
    args = fa.device_put((rng.random((256, 64), dtype=np.float32), rng.integers(0, 10, 256).astype(np.int32),
                          np.arange(64, dtype=np.int32)), device)
    step = digits_mlp.make_train_step(opt, device)
    for leaf in fa.tree_util.tree_leaves((params, state)):
        leaf.block_until_ready()
    parts.clear()
    counts.clear()
    t0 = time.perf_counter()
    _, _, loss = step(params, state, *args)
    t1 = time.perf_counter()
    float(loss)
    t2 = time.perf_counter()
    parts["wait"] = (t2 - t1) * 1e3
    first = (t2 - t0) * 1e3
    parts["other"] = first - sum(parts.values())
    print(json.dumps({"first_ms": first, "parts_ms": parts, "counts": counts}))


def breakdown(devices):
    """Print the ``--breakdown`` table: one row per device, a column per part (ms, and calls)."""
    env = dict(os.environ, POCL_KERNEL_CACHE="0", PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1", FNARRAY_AUTOTUNE="off")
    env.pop("FNARRAY_CACHE_DIR", None)
    names = ("schedule", "render", "build", "pipeline", "launch", "wait", "other")
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'device':10s} {'first ms':>9s} " + " ".join(f"{n:>14s}" for n in names))
    for d in devices:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--breakdown-child", d], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=900)
        if out.returncode:
            raise RuntimeError(f"{d}: {out.stderr[-2000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        cells = [f"{r['parts_ms'][n]:8.0f}" + (f" ({r['counts'][n]:3d})" if n in r["counts"] else " " * 6)
                 if n in r["parts_ms"] else f"{'—':>14s}" for n in names]
        print(f"{d:10s} {r['first_ms']:9.0f} " + " ".join(cells), flush=True)


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
    ap.add_argument("--breakdown", action="store_true", help="the first call's parts on opencl:0 and webgpu:0")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--breakdown-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--vs-jax-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.breakdown_child:
        return child_breakdown(args.breakdown_child)
    if args.breakdown:
        return breakdown(args.device or ["opencl:0", "webgpu:0"])
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
