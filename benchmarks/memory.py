"""Resident memory of fnarray's caches per backend: flat once the caches are full (issue 12).

Each backend runs in its own subprocess (so that numbers do not mix), which prints its resident set
size (VmRSS from /proc/self/status, MiB) after these phases:

  warm-up      import, the device started, one jitted function and one eager op called 100 times
  cached       10,000 calls of that jitted function on the same input (every call a cache hit)
  100 shapes   a new jitted function, 10,000 calls cycling over 100 input shapes
  1000 shapes  a new jitted function, 10,000 calls cycling over 1,000 input shapes
  eager        10,000 eager operations (x * 2.0 + 1.0 is two) cycling over 100 shapes

For the shape phases it also prints the RSS after the first cycle (the cache is full then, at
``fnarray.config.jit_cache_size`` entries) and the growth per call after it. With the default
``jit_cache_size`` (128) the 100 shapes all stay cached, and cycling over 1,000 shapes misses on
every call (each call traces and compiles): memory must stay flat all the same. On jax:0 a compile
costs ~0.1-0.3 s here, so its 1,000-shape phase makes ``--miss-calls`` calls (default 1,500) instead.

Usage: python benchmarks/memory.py [--devices numpy:0,jax:0,...] [--calls 10000] [--miss-calls 1500]
Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mib() -> float:
    """Current resident set size in MiB (Linux /proc; elsewhere the peak from ``resource``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _measure(device: str, calls: int, miss_calls: int) -> dict:
    import numpy as np

    import fnarray as fa
    import fnarray.numpy as fnp

    dev = fa.get_device(device)
    out = {"device": str(dev), "jit_cache_size": fa.config.jit_cache_size,
           "eager_cache_size": fa.config.eager_cache_size}
    rng = np.random.default_rng(0)

    def inputs(n_shapes, base=1):
        return [fa.device_put(rng.standard_normal(base + k).astype(np.float32), dev) for k in range(n_shapes)]

    def fun(x):
        return fnp.sin(x) * 2.0 + fnp.cos(x) * x

    def settle():
        gc.collect()
        return rss_mib()

    f = fa.jit(fun, device=dev)
    x = inputs(1, 64)[0]
    for _ in range(100):
        f(x)
        x * 2.0 + 1.0
    np.asarray(f(x))
    out["warm-up"] = settle()

    t = time.perf_counter()
    for _ in range(calls):
        y = f(x)
    np.asarray(y)
    out["cached"] = settle()
    out["cached_us"] = (time.perf_counter() - t) / calls * 1e6

    for n_shapes, n_calls, name in ((100, calls, "100 shapes"), (1000, calls, "1000 shapes")):
        if name == "1000 shapes" and dev.backend == "jax":
            n_calls = min(n_calls, miss_calls)
        xs = inputs(n_shapes, 200)
        g = fa.jit(fun, device=dev)
        t = time.perf_counter()
        full = None
        for i in range(n_calls):
            y = g(xs[i % n_shapes])
            if i == n_shapes - 1:
                np.asarray(y)
                full = settle()
        np.asarray(y)
        out[name] = {"calls": n_calls, "after first cycle": full, "end": settle(),
                     "entries": g.cache_info()["executables"], "seconds": time.perf_counter() - t}
        del g, xs
        gc.collect()

    xs = inputs(100, 300)
    t = time.perf_counter()
    for i in range(calls // 2):
        y = xs[i % 100] * 2.0 + 1.0
        if i == 99:
            np.asarray(y)
            full = settle()
    np.asarray(y)
    out["eager"] = {"calls": calls, "after first cycle": full, "end": settle(),
                    "seconds": time.perf_counter() - t}
    return out


def _child(device, calls, miss_calls):
    print(json.dumps(_measure(device, calls, miss_calls)), flush=True)


def _run(device, calls, miss_calls):
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", device, "--calls", str(calls),
           "--miss-calls", str(miss_calls)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=_ROOT)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"device": device, "error": (p.stderr.strip().splitlines() or ["no output"])[-1]}


def _row(r):
    if "error" in r:
        return f"{r['device']:10s} failed: {r['error']}"
    cells = [f"{r['device']:10s}", f"{r['warm-up']:8.1f}", f"{r['cached']:8.1f}"]
    for name in ("100 shapes", "1000 shapes", "eager"):
        p = r[name]
        per_call = (p["end"] - p["after first cycle"]) * 1024 * 1024 / max(1, p["calls"] - 100)
        cells.append(f"{p['after first cycle']:7.1f} -> {p['end']:7.1f} ({per_call:+5.0f} B/call, {p['calls']})")
    return "  ".join(cells)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="numpy:0,jax:0,mlx:0,opencl:0,webgpu:0")
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--miss-calls", type=int, default=1500, help="calls of jax:0's 1,000-shape phase")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sys.path.insert(0, _ROOT)
        return _child(args.child, args.calls, args.miss_calls)
    try:
        load = os.getloadavg()
        print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    except OSError:
        pass
    print("RSS in MiB. Shape phases: after the first cycle -> after all calls (growth per call after the "
          "first cycle, number of calls)")
    print(f"{'device':10s}  {'warm-up':>8s}  {'cached':>8s}  {'100 shapes':^44s}  {'1000 shapes':^44s}  "
          f"{'eager (100 shapes)':^44s}")
    for d in args.devices.split(","):
        r = _run(d.strip(), args.calls, args.miss_calls)
        print(_row(r), flush=True)
        if "error" not in r:
            extra = {k: r[k] for k in ("jit_cache_size", "eager_cache_size")}
            secs = {k: round(r[k]["seconds"], 1) for k in ("100 shapes", "1000 shapes", "eager")}
            print(f"{'':10s}  cached call {r['cached_us']:.0f} us; seconds per phase {secs}; {extra}; "
                  f"entries kept: {r['100 shapes']['entries']}, {r['1000 shapes']['entries']}", flush=True)


if __name__ == "__main__":
    main()
