"""Dispatch on the kernel backends: the kernels' device time against a cached training step's wall time.

For the digits MLP (``examples/digits_mlp.py``, 64-128-128-10) and CNN (``examples/digits_cnn.py``) training
steps (gather the batch, ``value_and_grad``, Adam; batch 64, as ``benchmarks/digits_step.py``), on each
``--device``: the wall time of a cached jitted step (steps run back to back, the last one waited for, best
of three runs) and the sum of the kernels' device times per step (``device_us`` of the profiler's kernel
spans: OpenCL profiling events, WebGPU timestamp queries; best of three profiled runs between the timed
ones), whose ratio is the share of the step the device spends computing (issue 28 item 3: >= 80%). Also
the host's share: the CPU time of the calling thread per step (recording and submitting; on a busy machine
steadier than wall times), the kernels per step and the profiler's layer shares.

Each (checkout, device, model) runs in a fresh process, interleaved round by round, so that ``--checkout``
given twice (say the main checkout and a branch) compares before and after under the same load:

    python benchmarks/kernel_dispatch.py --checkout /work/main --checkout . --rounds 2

Usage: python benchmarks/kernel_dispatch.py [--device opencl:0 --device webgpu:0] [--model mlp --model cnn]
       [--checkout PATH ...] [--rounds 1] [--steps 30]
Prints one row per measurement and the load average; asserts nothing.
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


def measure(device, model, steps):
    """``{wall_ms, device_ms, kernels, shares}`` of one model's cached step on ``device`` (in this process)."""
    import numpy as np

    import fnarray as fa
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import digits_cnn
    import digits_mlp
    mod = digits_mlp if model == "mlp" else digits_cnn
    x, _, y, _ = digits_mlp.load_data()
    rng = np.random.default_rng(0)
    batches = [rng.permutation(x.shape[0])[:64].astype(np.int32) for _ in range(steps)]
    opt = fa.optim.adam(1e-3)
    params = fa.device_put({k: np.asarray(v) for k, v in mod.init_params(fa.random.key(0)).items()}, device)
    state = opt.init(params)
    step = digits_mlp.make_train_step(opt, device, loss=None if model == "mlp" else mod.loss_fn)
    xd, yd = fa.device_put(x, device), fa.device_put(y, device)
    for idx in batches[:3]:   # compiles, and the driver's first launches
        params, state, loss = step(params, state, xd, yd, idx)
    float(loss)
    walls, hosts, devices = [], [], []
    n = min(steps, 10)
    for _ in range(3):   # a timed run, then a profiled one, three times: the best of each
        t0, c0 = time.perf_counter(), time.thread_time()
        for idx in batches:
            params, state, loss = step(params, state, xd, yd, idx)
        hosts.append((time.thread_time() - c0) / steps * 1e3)
        float(loss)
        walls.append((time.perf_counter() - t0) / steps * 1e3)
        with fa.profiler.trace() as h:
            for idx in batches[:n]:
                params, state, loss = step(params, state, xd, yd, idx)
            float(loss)
        kernels = [r for r in h.profile.records if r.kind == "kernel" and "device_us" in r.args]
        devices.append(sum(r.args["device_us"] for r in kernels) / n / 1e3)
    s = fa.profiler.summary(h.profile, print=False)
    return {"wall_ms": min(walls), "walls": walls, "host_ms": min(hosts),
            "device_ms": min(devices),
            "kernels": len(kernels) / n, "shares": {k: round(v, 3) for k, v in s.shares.items() if v >= 0.01},
            "verdict": s.verdict.split(":")[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="devices (default opencl:0 and webgpu:0)")
    ap.add_argument("--model", action="append", choices=("mlp", "cnn"), help="models (default both)")
    ap.add_argument("--checkout", action="append", help="fnarray checkouts to compare (default this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30, help="steps per timed run (the CNN on webgpu: a quarter)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        device, model, steps = args.child.split(",")
        print(json.dumps(measure(device, model, int(steps))))
        return None
    devices = args.device or ["opencl:0", "webgpu:0"]
    models = args.model or ["mlp", "cnn"]
    checkouts = [os.path.abspath(c) for c in (args.checkout or [ROOT])]
    print(f"{'checkout':24s} {'device':9s} {'model':5s} {'wall ms/step':>12s} {'device ms':>10s} {'device/wall':>11s} "
          f"{'host ms':>8s} {'kernels':>7s}  load   profile shares")
    rows = []
    for _ in range(args.rounds):
        for device in devices:
            for model in models:
                steps = max(4, args.steps // 4) if (model == "cnn" and device.startswith("webgpu")) else args.steps
                for c in checkouts:
                    env = dict(os.environ, PYTHONPATH=c, OPENBLAS_NUM_THREADS="1")
                    load = os.getloadavg()[0]
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                          f"{device},{model},{steps}"], env=env, capture_output=True, text=True)
                    if out.returncode:
                        print(f"{c[-24:]:24s} {device:9s} {model:5s} failed: {out.stderr.strip()[-300:]}")
                        continue
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    r.update(checkout=c, device=device, model=model, load=load)
                    rows.append(r)
                    shares = " ".join(f"{k} {v * 100:.0f}%" for k, v in r["shares"].items())
                    print(f"{c[-24:]:24s} {device:9s} {model:5s} {r['wall_ms']:12.3f} {r['device_ms']:10.3f} "
                          f"{r['device_ms'] / r['wall_ms'] * 100:10.0f}% {r['host_ms']:8.3f} {r['kernels']:7.0f} "
                          f"{load:5.1f}   {shares}",
                          flush=True)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return rows


if __name__ == "__main__":
    main()
