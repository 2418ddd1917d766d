"""What one compute dispatch costs the CPU on the WebGPU adapter, apart from fnarray (issue 28 item 3).

Records ``--dispatches`` dispatches of a trivial kernel (``o[i] = in0[i] + ... + in{k-1}[i]``, 64 lanes a
work-group) into one compute pass, submits it and waits, through wgpu-py alone: the process's CPU time per
dispatch (every thread: wgpu-native, the driver's workers) and the calling thread's, best of ``--rounds``.
Variants: ``k`` = 1 and 31 storage bindings (31 is a ``stack`` launch's), 1 and 4 work-groups, one bind group
for all dispatches or one each. With ``--lp-threads N`` each variant also runs in a child process with
``LP_NUM_THREADS=N`` (Mesa llvmpipe/lavapipe's worker threads; 0 runs a dispatch in the submitting thread).

Measured (lavapipe, 2 cores, load 8): ~30 us of CPU a one-work-group dispatch with the worker threads, ~7-8 us
without them; the calling thread's share ~6 us either way. So a small-kernel program's launches cost mostly the
driver's hand-off to its workers, which fewer launches save and fnarray's recording does not.

Usage: python benchmarks/webgpu_dispatch_cost.py [--dispatches 300] [--rounds 3] [--lp-threads 0]
Prints one line per variant and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _shader(k: int) -> str:
    decl = "".join(f"@group(0) @binding({i}) var<storage, read> in{i}: array<f32>;\n" for i in range(k))
    body = " + ".join(f"in{i}[g.x]" for i in range(k))
    return (decl + f"@group(0) @binding({k}) var<storage, read_write> o: array<f32>;\n"
            "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
            f"  if (g.x < arrayLength(&o)) {{ o[g.x] = {body}; }}\n}}\n")


def measure(k: int, groups: int, distinct: bool, n: int, rounds: int) -> dict:
    """CPU microseconds a dispatch (process, calling thread), best of ``rounds`` passes of ``n`` dispatches."""
    import wgpu
    dev = wgpu.gpu.request_adapter_sync().request_device_sync(
        required_limits={"max-storage-buffers-per-shader-stage": 32})
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    pipe = dev.create_compute_pipeline(layout="auto", compute={
        "module": dev.create_shader_module(code=_shader(k)), "entry_point": "main"})
    bufs = [dev.create_buffer(size=256 * groups, usage=usage) for _ in range(k + 1)]
    entries = [{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)]
    bgs = [dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
           for _ in range(n if distinct else 1)]
    best = None
    for _ in range(rounds):
        c0, t0 = time.process_time(), time.thread_time()
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipe)
        for j in range(n):
            cp.set_bind_group(0, bgs[j % len(bgs)])
            cp.dispatch_workgroups(groups)
        cp.end()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(bufs[-1], 0, 4)   # waits for the pass
        took = (time.process_time() - c0, time.thread_time() - t0)
        best = took if best is None or took[0] < best[0] else best
    return {"process_us": round(best[0] / n * 1e6, 1), "thread_us": round(best[1] / n * 1e6, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dispatches", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lp-threads", type=int, default=None)
    ap.add_argument("--one", help=argparse.SUPPRESS)   # a child's variant: k,groups,distinct
    args = ap.parse_args(argv)
    if args.one:
        k, groups, distinct = (int(v) for v in args.one.split(","))
        print(json.dumps(measure(k, groups, bool(distinct), args.dispatches, args.rounds)))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.1f}")
    envs = [("LP_NUM_THREADS unset", {})]
    if args.lp_threads is not None:
        envs.append((f"LP_NUM_THREADS={args.lp_threads}", {"LP_NUM_THREADS": str(args.lp_threads)}))
    for k in (1, 31):
        for groups in (1, 4):
            for distinct in (0, 1):
                row = []
                for label, extra in envs:
                    env = {k_: v for k_, v in os.environ.items() if k_ != "LP_NUM_THREADS"} | extra
                    out = subprocess.run([sys.executable, __file__, "--one", f"{k},{groups},{distinct}",
                                          "--dispatches", str(args.dispatches), "--rounds", str(args.rounds)],
                                         env=env, capture_output=True, text=True, check=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    row.append(f"{label}: {r['process_us']} us process / {r['thread_us']} us thread")
                print(f"bindings {k:2d}, work-groups {groups}, {'a bind group each' if distinct else 'one bind group'}"
                      f": " + "; ".join(row))
    print(f"load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
