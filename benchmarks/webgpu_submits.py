"""Small calls on webgpu:0 sharing command buffers, against one submit per call, in one process (issue 28).

Runs ``programs.py``'s small-call workloads (``decode`` eager, ``decode_jit``, ``jacobians``) on webgpu:0 with
``dispatch.BATCH_LAUNCHES`` set to 0 (every call submitted at its end: the behaviour before the open command
encoder) and to its default, alternating round by round after one warm-up run of each workload, and prints
the best wall and CPU time of each and the command buffers submitted. Both sides run in the same process,
so the load is shared; the ratio is the number to read.

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
    default = dispatch.BATCH_LAUNCHES
    load0 = os.getloadavg()[0]
    print(f"webgpu:0 {gpu.describe()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {load0:.1f}")
    print("| workload | one submit a call (ms wall / CPU, submits) | shared (ms wall / CPU, submits) | wall ratio |")
    print("|---|---:|---:|---:|")
    for name in [w for w in args.workloads.split(",") if w]:
        fn = _runs(name, L)
        best = {}
        for _ in range(args.rounds):
            for batch in (0, default):
                dispatch.BATCH_LAUNCHES = batch
                s0, c0, t0 = gpu.submits, time.process_time(), time.perf_counter()
                fn()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                old = best.get(batch)
                if old is None or wall < old[0]:
                    best[batch] = (wall, cpu, gpu.submits - s0)
        dispatch.BATCH_LAUNCHES = default
        a, b = best[0], best[default]
        print(f"| {name} | {a[0] * 1e3:.1f} / {a[1] * 1e3:.1f}, {a[2]} | {b[0] * 1e3:.1f} / {b[1] * 1e3:.1f}, {b[2]} | "
              f"{a[0] / b[0]:.2f} |", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
