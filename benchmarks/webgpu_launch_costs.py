"""What each launch of a ``benchmarks/programs.py`` workload's step costs on webgpu:0, in process CPU time (issue 28).

On lavapipe the profiler (``fa.profiler.trace``) cannot time a kernel: the adapter has no timestamp queries, so each
launch is submitted and waited for alone and its span is its wall time, ~90-100 us of submit and wait included
(most of a small launch's span). Here the workload runs as ``programs.py`` runs it (the VAE's first epoch, the
transformer's first step), the plan with the most launches (the step) is taken, and each of its launches is
recorded ``--repeat`` times into one compute pass (one submit, one wait), its own bind group bound as the call bound
it: the process's CPU time of that pass less that of a pass of one launch, per launch, best of ``--rounds``
(lavapipe's threads included, as ``programs.py --clock cpu`` counts them). Rows grouped by kernel name, largest
first, then every launch in order with its work-groups. The sum is the step's kernel time as a CPU-time table sees
it, without the call's recording and submit.

Usage: python benchmarks/webgpu_launch_costs.py [--workload transformer|vae] [--repeat 20] [--rounds 3]
       [--source NAME]   (also print the WGSL of the first launch whose name starts with NAME)
Asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import programs
from fnarray.lowering.webgpu import dispatch

#: the call of ``programs._timed`` after which each workload has run its step at least once (the VAE's first
#: epoch and grid; the transformer's first step)
_AFTER = {"vae": 2, "transformer": 1}


class _Stop(Exception):
    """Raised once the workload's step has run: the runners it made are kept, nothing more runs."""


def step_runner(workload):
    """``(runner, slots)``: the ``dispatch.Runner`` of the workload's step (the plan with the most launches) and
    the buffers its last call bound, by slot."""
    seen, calls, orig_bind, orig_timed = {}, [0], dispatch.Runner._bind, programs._timed

    def bind(self, bufs):
        vals, made = orig_bind(self, bufs)
        seen[id(self)] = (self, vals)
        return vals, made

    def timed(fn):
        calls[0] += 1
        out = orig_timed(fn)
        if calls[0] == _AFTER[workload]:
            raise _Stop
        return out
    dispatch.Runner._bind, programs._timed = bind, timed
    try:
        getattr(programs, workload)(programs._lib("fnarray", "webgpu:0"), False)
    except _Stop:
        pass
    finally:
        dispatch.Runner._bind, programs._timed = orig_bind, orig_timed
    return max(seen.values(), key=lambda rv: len(rv[0].steps))


def launch_costs(runner, slots, repeat, rounds):
    """``[(kernel name, work-groups, CPU us)]`` of each launch of ``runner`` (bound to ``slots``)."""
    gpu = runner.gpu
    dev = gpu.device

    def run(st, bg, n):
        with gpu.lock:
            enc = dev.create_command_encoder()
            cp = enc.begin_compute_pass()
            cp.set_pipeline(st.pipeline)
            for _ in range(n):
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(*st.groups)
            cp.end()
            gpu.submit(enc)
            poll = getattr(dev, "_poll_wait", None)   # as ``_GPU.wait``: wgpu-native's blocking poll, or a readback
            if poll is not None:
                poll()
            else:
                dev.queue.read_buffer(slots[st.slots[-1]], 0, 4)
            gpu.waited()
    out = []
    for st, bg in zip(runner.steps, runner.fixed, strict=True):
        if bg is None:
            bg = gpu.bind_group(st.bgl, [slots[k] for k in st.slots], st.uniform, st.windows)
        run(st, bg, 2)
        best = float("inf")
        for _ in range(rounds):
            t = time.process_time()
            run(st, bg, repeat)
            many = time.process_time() - t
            t = time.process_time()
            run(st, bg, 1)
            best = min(best, (many - (time.process_time() - t)) / (repeat - 1))
        out.append((st.entry, st.groups, best * 1e6))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="transformer", choices=sorted(_AFTER))
    ap.add_argument("--repeat", type=int, default=20, help="launches in the timed pass")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes per launch; the best is kept")
    ap.add_argument("--source", default=None, help="print the WGSL of the first launch whose name starts so")
    args = ap.parse_args(argv)
    runner, slots = step_runner(args.workload)
    rows = launch_costs(runner, slots, args.repeat, args.rounds)
    by = collections.defaultdict(lambda: [0, 0.0])
    for name, _, us in rows:
        by[name][0] += 1
        by[name][1] += us
    total = sum(us for _, _, us in rows)
    print(f"{args.workload}: {len(rows)} launches, {total / 1e3:.2f} ms of CPU a step (each launch {args.repeat} "
          f"times in a pass, best of {args.rounds}); load {os.getloadavg()[0]:.1f}")
    for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / 1e3:8.3f} ms {100 * us / total:5.1f}% {n:4d}x {us / n:8.1f} us  {name[:100]}")
    print("---- every launch, in order")
    for name, groups, us in rows:
        print(f"{us:8.1f} us {str(groups):14s} {name[:100]}")
    for st in runner.steps if args.source else ():
        if st.entry.startswith(args.source):
            print(f"==== {st.entry} {st.groups}\n{st.source}")
            break


if __name__ == "__main__":
    sys.exit(main())
