"""Small calls on webgpu:0 sharing command buffers, against one submit per call, in one process (issue 28).

Runs ``programs.py``'s small-call workloads (``decode`` eager, ``decode_jit``, ``jacobians``) on webgpu:0 three
ways, alternating round by round after one warm-up run of each workload: ``dispatch.BATCH_LAUNCHES`` set to 0
(every call submitted at its end: the behaviour before the open command encoder), the open encoder with
``dispatch.NEW_UPLOAD_BYTES`` set to 0 (an upload whose pooled buffers the open encoder's work may still use
submits it first, rather than take a new buffer), and both defaults; it prints the best wall and CPU time of each and the command buffers submitted. All run in
the same process, so the load is shared; the ratios are the numbers to read.

Usage: python benchmarks/webgpu_submits.py [--rounds 5] [--workloads decode,decode_jit,jacobians]
Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import programs

from fnarray.lowering.webgpu import dispatch


def _runs(name, L):
    """The workload's steady-state callable: ``programs``' function with its timer captured."""
    captured = []
    real = programs._timed
    programs._timed = lambda fn: (captured.append(fn), real(fn))[1]
    try:
        getattr(programs, name)(L, False)
    finally:
        programs._timed = real
    return captured[-1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workloads", default="decode,decode_jit,jacobians")
    args = ap.parse_args(argv)
    L = programs._lib("fnarray", "webgpu:0")
    gpu = L.put(0.0)._buf.gpu
    batch, staged = dispatch.BATCH_LAUNCHES, dispatch.NEW_UPLOAD_BYTES
    variants = {"one submit a call": (0, staged), "shared, no new upload buffers": (batch, 0), "shared": (batch, staged)}
    load0 = os.getloadavg()[0]
    print(f"webgpu:0 {gpu.describe()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {load0:.1f}")
    print("| workload | " + " | ".join(f"{v} (ms wall / CPU, submits)" for v in variants)
          + " | wall ratios to shared |")
    print("|---|" + "---:|" * (len(variants) + 1))
    for name in [w for w in args.workloads.split(",") if w]:
        fn = _runs(name, L)
        best = {}
        for _ in range(args.rounds):
            for v, (b, st) in variants.items():
                dispatch.BATCH_LAUNCHES, dispatch.NEW_UPLOAD_BYTES = b, st
                s0, c0, t0 = gpu.submits, time.process_time(), time.perf_counter()
                fn()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                old = best.get(v)
                if old is None or wall < old[0]:
                    best[v] = (wall, cpu, gpu.submits - s0)
        dispatch.BATCH_LAUNCHES, dispatch.NEW_UPLOAD_BYTES = batch, staged
        cells = " | ".join(f"{w * 1e3:.1f} / {c * 1e3:.1f}, {n}" for w, c, n in best.values())
        ratios = " / ".join(f"{best[v][0] / best['shared'][0]:.2f}" for v in variants if v != "shared")
        print(f"| {name} | {cells} | {ratios} |", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
