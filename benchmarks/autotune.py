"""Autotuning's effect: fnarray with ``autotune="off"`` against ``"full"`` on one OpenCL device, interleaved,
beside tinygrad and the hand-written kernels of ``opencl_vs_raw.py``.

Cases: every case of ``vs_tinygrad.py`` (tanh and clip chains at 4M, softmax and layernorm 4096x1024,
matmul 512^2 and 1024^2, the digits MLP step, the 3x3 convolution) and the rows of ``opencl_vs_raw.py``
that have a hand-written kernel (the tanh chain at 16M against the driver's ``tanh`` in OpenCL C, the
clip chain against the copy kernel moving the same bytes, matmul 1024^2 against the naive kernel). Each
fnarray case is jitted twice, compiled once with ``fa.config.autotune = "off"`` (the hand-tuned defaults)
and once with ``"full"`` (every declared choice timed on the device: ``docs/internals.md``, "Tunable
choices"), in one process without a persistent cache; then each repeat is the best of ``--number`` calls
of off, full and the reference, alternating, so the machine's load hits all alike. Printed: the median
process-CPU milliseconds over ``--repeat`` repeats, the ratios full/off and full/reference (< 1: full is
faster) by CPU time and by wall time, the tuning time, and the load average at the start and end. Asserts
only that off and full agree.

Usage:  python benchmarks/autotune.py [--device opencl:0] [--repeat 3] [--number 5] [--only NAME]
        [--modes off,fast,full]
For PoCL 3.1 (Debian's, ``benchmarks/pocl31.sh``): ``source /work/pocl31/env.sh`` first (tinygrad then opens
the same platform through ``OCL_ICD_VENDORS``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
from opencl_vs_raw import RAW_SOURCE
from vs_tinygrad import _cases, _point_tinygrad_at_pyopencl_pocl


def _best2(fns, number):
    """Each of ``fns`` called once to warm, then the best of ``number`` calls of each, alternating: by wall time
    and by process CPU time (the kernels of PoCL and tinygrad's PoCL run in this process; under load CPU time
    scatters less: docs/traps.md). Returns ``(wall, cpu)`` lists."""
    for fn in fns:
        fn()
    wall, cpu = [float("inf")] * len(fns), [float("inf")] * len(fns)
    for _ in range(number):
        for k, fn in enumerate(fns):
            t, c = time.perf_counter(), time.process_time()
            fn()
            cpu[k] = min(cpu[k], time.process_time() - c)
            wall[k] = min(wall[k], time.perf_counter() - t)
    return wall, cpu


def _point_tinygrad_at_pyopencl_loader():
    """tinygrad loads ``libOpenCL.so.1`` from the system; without one, PyOpenCL's bundled ICD loader (as
    ``/work/pocl31/env.sh`` sets it)."""
    if os.environ.get("OPENCL_PATH"):
        return
    import ctypes.util
    if ctypes.util.find_library("OpenCL"):
        return
    import glob
    import pyopencl
    libs = glob.glob(os.path.join(os.path.dirname(pyopencl.__file__), ".libs", "libOpenCL*.so*"))
    if libs:
        os.environ["OPENCL_PATH"] = libs[0]


def _raw_cases(dev, fa, fnp, mode_cases):
    """``name -> (fnarray thunk factory, reference thunk, reference name)``: the hand-written kernels."""
    import pyopencl as cl
    state = dev.impl.state(dev)
    ctx, queue = state.context, state.queue
    prog = cl.Program(ctx, RAW_SOURCE).build()
    mf = cl.mem_flags
    rng = np.random.default_rng(0)
    n = 1 << 24
    host = [rng.uniform(-1, 1, n).astype(np.float32) for _ in range(3)]
    raw_in = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h) for h in host]
    raw_out = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * n)
    wg = 64
    tanh_k, copy_k, naive_k = (cl.Kernel(prog, k) for k in ("chain_tanh", "copy", "matmul_naive"))

    def raw_tanh():
        tanh_k(queue, (-(-n // wg) * wg,), (wg,), *raw_in, raw_out, np.int32(n))
        state.finish()   # (fnarray's held eager launches let go too: opencl backend.py, hold)

    def floor():
        for _ in range(2):
            copy_k(queue, (-(-n // wg) * wg,), (wg,), raw_in[0], raw_out, np.int32(n))
        state.finish()

    m = 1024
    A, B = rng.uniform(-1, 1, (m, m)).astype(np.float32), rng.uniform(-1, 1, (m, m)).astype(np.float32)
    bufA = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=A)
    bufB = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=B)
    bufC = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * m * m)

    def naive():
        naive_k(queue, (m, m), (16, 16), bufA, bufB, bufC, np.int32(m), np.int32(m), np.int32(m))
        state.finish()

    a, x, b = (fa.device_put(fnp.asarray(h), dev) for h in host)
    fa_A, fa_B = fa.device_put(fnp.asarray(A), dev), fa.device_put(fnp.asarray(B), dev)

    def make(fn, *args):
        def factory():
            jf = fa.jit(lambda *a: fn(*a))  # a function of its own per mode: jit caches per function
            return lambda: fa.block_until_ready(jf(*args)), lambda: np.asarray(jf(*args))
        return factory

    return {
        "raw: tanh(a*x+b)*x+1, 16M f32": (make(lambda a, x, b: fnp.tanh(a * x + b) * x + 1.0, a, x, b), raw_tanh,
                                          "hand-written OpenCL (driver tanh)"),
        "raw: clip((a*x+b)*x+1), 16M f32": (make(lambda a, x, b: fnp.clip((a * x + b) * x + 1.0, -4.0, 4.0), a, x, b),
                                            floor, "copy kernel, same bytes"),
        "raw: matmul 1024^2 f32": (make(lambda p, q: p @ q, fa_A, fa_B), naive, "naive OpenCL"),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--only", default=None, help="run the cases whose name contains this text")
    ap.add_argument("--no-tinygrad", action="store_true", help="only the hand-written references")
    ap.add_argument("--modes", default="off,full",
                    help="autotune modes to compare, the first the baseline (e.g. off,fast,full: fast writes each "
                         "kernel in its table's cost-model choice, untimed)")
    args = ap.parse_args(argv)
    modes = tuple(args.modes.split(","))
    if len(modes) < 2 or any(m not in ("off", "fast", "full") for m in modes):
        sys.exit(f"autotune: --modes takes two or more of off, fast, full; got {args.modes!r}")
    _point_tinygrad_at_pyopencl_pocl()
    _point_tinygrad_at_pyopencl_loader()
    os.environ.setdefault("DEV", "CL")
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.lowering.kernels import tuning
    fa.config.compilation_cache_dir = None
    dev = fa.get_device(args.device)
    rows = []  # (name, off thunk, full thunk, reference thunk or None, reference name, off/full value thunks)
    load0 = os.getloadavg()
    tune_s = {}
    if not args.no_tinygrad:
        try:
            from tinygrad import Tensor, TinyJit
        except ImportError as e:
            sys.exit(f"autotune: tinygrad is not installed ({e}); pass --no-tinygrad")
        by_mode = {}
        for mode in modes:
            fa.config.autotune = mode
            by_mode[mode] = _cases(str(dev), fa, fnp, Tensor, TinyJit)
            for name, (ours, _, _) in by_mode[mode].items():
                if args.only and args.only not in name:
                    continue
                t0 = time.perf_counter()
                ours()
                tune_s[name] = tune_s.get(name, 0.0) + (time.perf_counter() - t0 if mode == "full" else 0.0)
        for name, (_, theirs, _) in by_mode[modes[0]].items():
            if args.only and args.only not in name:
                continue
            rows.append((name, [by_mode[m][name][0] for m in modes], theirs, "tinygrad"))
    raw = _raw_cases(dev, fa, fnp, None)
    for name, (factory, ref, ref_name) in raw.items():
        if args.only and args.only not in name:
            continue
        made = {}
        for mode in modes:
            fa.config.autotune = mode
            run, value = factory()
            t0 = time.perf_counter()
            run()
            if mode == "full":
                tune_s[name] = time.perf_counter() - t0
            made[mode] = (run, value)
        for mode in modes[1:]:
            np.testing.assert_allclose(made[mode][1](), made[modes[0]][1](), rtol=1e-5, atol=1e-5)
        rows.append((name, [made[m][0] for m in modes], ref, ref_name))
    fa.config.autotune = "off"
    base, last = modes[0], modes[-1]
    print(f"fnarray {dev} ({dev.description}): autotune {' vs '.join(modes)}, {args.repeat} repeats of "
          f"best-of-{args.number}, alternating; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}\n")
    print("CPU ms: process CPU time (best of each repeat, median over repeats); wall: the same ratio by wall time\n")
    heads = "".join(f" {m} (CPU ms) |" for m in modes) + "".join(f" {m}/{base} |" for m in modes[1:])
    print(f"| case |{heads} wall {last}/{base} | reference (CPU ms) | {last}/reference | wall {last}/ref "
          "| reference | tuning (s) |")
    print("|---|" + "---:|" * (2 * len(modes) - 1) + "---:|---:|---:|---:|---|---:|")
    for name, ours, ref, ref_name in rows:
        fns = (*ours, ref)
        reps = [_best2(fns, args.number) for _ in range(args.repeat)]
        cpu = [statistics.median(t[1][k] for t in reps) for k in range(len(fns))]
        wall = [statistics.median(t[0][k] for t in reps) for k in range(len(fns))]
        o, f, r = cpu[0], cpu[-2], cpu[-1]
        cells = "".join(f" {c * 1e3:.2f} |" for c in cpu[:-1]) + "".join(f" {c / o:.2f} |" for c in cpu[1:-1])
        print(f"| {name} |{cells} {wall[-2] / wall[0]:.2f} | {r * 1e3:.2f} | {f / r:.2f} "
              f"| {wall[-2] / wall[-1]:.2f} | {ref_name} | {tune_s.get(name, 0.0):.1f} |", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; choices made: "
          f"{len(tuning.decisions())}, candidate runs timed: {tuning.stats()['measured']}")
    changed = [d for d in tuning.decisions() if d.default is not None and d.choice != d.default]
    for d in changed:
        print(f"  {d.signature.split(':')[0]}: {d.choice} (default {d.default})")


if __name__ == "__main__":
    main()
