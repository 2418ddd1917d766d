"""Where an eager pass of a ``benchmarks/programs.py`` workload goes on webgpu:0, by layer (issue 28).

The workload's steady pass (``decode``: 40 eager decode steps, 320 launches; ``stack``: one ``fnp.stack`` of
5,000 arrays, 173 launches) runs in one process, warmed as ``programs.py`` warms it (its tapes replaying), in
three forms, rounds alternated, the best of ``--rounds`` each (process and calling-thread CPU a pass):

- ``real``: as is;
- ``no record``: ``dispatch.Runner`` binds, pools and keeps its bind groups as always, but records no pass
  command (``calls.record`` a no-op): what is left is the layers above the runner and the runner's own Python;
- ``stub``: ``Runner.__call__`` returns output buffers without binding or recording: the layers above the runner
  (the namespace, ``eager_jit``'s key, the tape's replay, deferred values, ``ArrayImpl``).

So ``real - no record`` is wgpu-native's share of the calling thread (pass commands, the pass's end, ``finish``,
``submit``) and lavapipe's threads (process less thread), and ``no record - stub`` the runner's Python. Also printed:
dispatches, submits and bind groups made in one real pass (wgpu-native's C calls counted). Needs webgpu:0 recording
through wgpu-native (``native.Native``).

Usage: python benchmarks/webgpu_eager_layers.py [--workload decode|stack] [--rounds 5]
Prints a line per form and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import time

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import programs
from fnarray.lowering.webgpu import backend, dispatch


def steady_pass(workload):
    """The workload's timed pass, warmed: ``programs._steady``'s function, run three times more (record, replays)."""
    runs = []
    real_steady = programs._steady
    programs._steady = lambda fn: (runs.append(fn), 0.0)[1]
    try:
        getattr(programs, workload)(programs._lib("fnarray", "webgpu:0"), False)
    finally:
        programs._steady = real_steady
    for _ in range(3):
        runs[0]()
    return runs[0]


def counted(fn, gpu):
    """``{C function: calls}`` of wgpu-native's pass commands and bind groups in one call of ``fn``, and submits."""
    calls, lib, n = gpu.calls, gpu.calls.lib, collections.Counter()

    class Counting:
        def __getattr__(self, name):
            f = getattr(lib, name)
            return lambda *a: (n.update([name]), f(*a))[1]
    submits, calls.lib = gpu.submits, Counting()
    try:
        fn()
    finally:
        calls.lib = lib
    return {"dispatches": n["wgpuComputePassEncoderDispatchWorkgroups"],
            "bind groups made": n["wgpuDeviceCreateBindGroup"], "submits": gpu.submits - submits}


def forms(gpu):
    """``{form: (Runner.__call__, calls.record)}`` (see the module docstring)."""
    real_call, real_record = dispatch.Runner.__call__, gpu.calls.record
    spare = {}

    def stub(self, bufs):
        made = {}
        for k, nbytes, dtype, shape in self.fresh:
            b = spare.get(nbytes)
            if b is None:
                b = spare[nbytes] = gpu.device.create_buffer(size=nbytes, usage=gpu.usage)
            made[k] = backend.WGBuffer(b, dtype, shape, gpu)
        return self._outputs(bufs, made)
    return {"real": (real_call, real_record),
            "no record": (real_call, lambda cp, launches, groups, last: last),
            "stub": (stub, real_record)}


def timed(fn):
    p0, t0 = time.process_time(), time.thread_time()
    fn()
    return (time.process_time() - p0) * 1e3, (time.thread_time() - t0) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="decode", choices=("decode", "stack"))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    fn = steady_pass(args.workload)
    import fnarray as fa
    gpu = fa.devices("webgpu")[0].impl.gpu
    print(f"{args.workload}, webgpu:0, {time.strftime('%H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}; "
          f"one real pass: {counted(fn, gpu)}")
    best, kinds = {}, forms(gpu)
    # the stub's rounds last: its spare buffers go back to the pool with its outputs, shared by several arrays,
    # which no real call may bind afterwards
    for form in ["real", "no record"] * args.rounds + ["stub"] * args.rounds:
        dispatch.Runner.__call__, gpu.calls.record = kinds[form]
        try:
            got = timed(fn)
        finally:
            dispatch.Runner.__call__, gpu.calls.record = kinds["real"]
        gpu.flush()
        best[form] = min(best.get(form, got), got)
    for form, (p, t) in best.items():
        print(f"  {form:9s}: process {p:.2f} ms, calling thread {t:.2f} ms a pass (best of {args.rounds})")
    print(f"load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
