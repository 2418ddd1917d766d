"""First-call latency of the digits training step, cold and warm, with the persistent compilation cache.

For each device, three fresh processes run ``examples/digits_mlp.make_train_step``'s jitted step once
(then once more, for the steady state): ``off`` without ``FNARRAY_CACHE_DIR``, ``cold`` with an empty
cache folder, ``warm`` with the folder the cold process filled. Each prints the first call's time
(trace + lower + compile + run, waited for) and the second's. PoCL's own kernel cache is turned off
(``POCL_KERNEL_CACHE=0``) so that only fnarray's cache persists between the processes; BLAS runs one
thread (``OPENBLAS_NUM_THREADS=1``: tiny matrices on a busy machine).

With ``--pocl-cache`` PoCL keeps its compiled kernels too (its default), in a fresh folder per
measurement: then ``warm`` is what a user sees in a second process, with both caches filled.

Usage: python benchmarks/first_call.py [--device numpy:0 --device jax:0 ...] [--pocl-cache]
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
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
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
