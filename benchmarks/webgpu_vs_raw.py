"""fnarray's webgpu backend against hand-written WGSL run through wgpu-py, on the same adapter.

Measures (issue "webgpu backend"):
  a) per-call time of a jitted 4-element function (call + wait) against one hand-written
     dispatch with a prepared bind group (submit + wait);
  b) the fused chain ``tanh(a*x+b)*x+1`` on three float32 arrays of 16M elements against one
     hand-written WGSL kernel (target: raw / fnarray >= 0.8);
  c) what WGSL's missing IEEE guarantees cost: the same hand-written kernel with
     ``max(v, 0)`` against fnarray's NaN-propagating select, and with the builtin ``tanh``
     against fnarray's ``tanh`` (which keeps NaN and -0 on every driver);
  d) one training step of the digits MLP (64-128-128-10, ReLU, softmax cross-entropy, Adam,
     batch 64) in one jitted call, with ``fallback = "error"`` (nothing runs on numpy), and the
     same step on the numpy backend for scale; the first call (trace + schedule + pipelines).

Both sides wait for their result the same way (a 4-byte readback of the output: wgpu-py 0.32's
``on_submitted_work_done_sync`` is broken) and are timed interleaved, best of ``--repeat``.
Ratios: raw time / fnarray time for throughput rows (>= 1 means fnarray is as fast), fnarray /
raw for per-call rows. Prints a Markdown table; asserts nothing.

Usage: python benchmarks/webgpu_vs_raw.py [--size 16777216] [--repeat 5]
       WGPU_BACKEND_TYPE=OpenGL python benchmarks/webgpu_vs_raw.py   # another adapter
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend_vs_raw import fn_chain, fn_init, make_fn_step  # noqa: E402

WG = 64


def _raw_source(expr: str, names: str) -> str:
    """A hand-written WGSL kernel ``y[i] = expr`` over float32 arrays named by the letters of ``names``
    (``v`` is ``x[i]``)."""
    n_inputs = len(names)
    binds = "\n".join(f"@group(0) @binding({k}) var<storage, read> {c}: array<f32>;" for k, c in enumerate(names))
    return f"""{binds}
@group(0) @binding({n_inputs}) var<storage, read_write> y: array<f32>;
@compute @workgroup_size({WG})
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{
    let i = g.x + g.y * nw.x * {WG}u;
    if (i >= arrayLength(&y)) {{
        return;
    }}
    let v = x[i];
    y[i] = {expr};
}}
"""


class Raw:
    """A hand-written kernel with its buffers and bind group prepared once, as one would write it."""

    def __init__(self, gpu, source, inputs, n):
        import wgpu
        dev = gpu.device
        self.gpu, self.n = gpu, n
        module = dev.create_shader_module(code=source)
        self.pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.ins = [dev.create_buffer_with_data(data=a, usage=usage) for a in inputs]
        self.out = dev.create_buffer(size=max(16, 4 * n), usage=usage)
        self.bg = dev.create_bind_group(layout=self.pipe.get_bind_group_layout(0), entries=[
            {"binding": k, "resource": {"buffer": b}} for k, b in enumerate(self.ins + [self.out])])
        groups = -(-n // WG)
        self.groups = (min(groups, 65535), -(-groups // 65535))

    def __call__(self):
        dev = self.gpu.device
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipe)
        cp.set_bind_group(0, self.bg)
        cp.dispatch_workgroups(*self.groups)
        cp.end()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(self.out, 0, 4)

    def result(self):
        return np.frombuffer(self.gpu.device.queue.read_buffer(self.out), np.float32)[: self.n]


def interleaved(fns, number, repeat):
    """Best time per call of each function, timed in alternation (a busy machine hits all alike)."""
    for f in fns:
        f()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, f in enumerate(fns):
            t = time.perf_counter()
            for _ in range(number):
                f()
            best[k] = min(best[k], (time.perf_counter() - t) / number)
    return best


def _throughput_rows(dev, gpu, n, repeat):
    """Rows (b) and (c): 16M-element kernels against hand-written WGSL (their buffers freed on return)."""
    rows = []
    # (b) the fused chain
    rng = np.random.default_rng(0)
    a, x, b = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    g = fa.jit(fn_chain, device=dev)
    af, xf2, bf = (fa.device_put(v, dev) for v in (a, x, b))
    raw = Raw(gpu, _raw_source("tanh(a[i] * v + b[i]) * v + 1.0", "axb"), [a, x, b], n)
    raw()
    np.testing.assert_allclose(np.asarray(g(af, xf2, bf)), raw.result(), rtol=1e-5, atol=1e-5)
    t_f, t_r = interleaved([lambda: g(af, xf2, bf).block_until_ready(), raw], 1, repeat)
    rows.append((f"(b) tanh(a*x+b)*x+1, {n / 2**20:.0f}M f32 (ms)", t_f * 1e3, t_r * 1e3, t_r / t_f, ">= 0.8"))

    # (c) the cost of NaN-safe max and tanh: fnarray's kernels against raw WGSL builtins
    relu = fa.jit(lambda a, x: fnp.maximum(a * x, 0.0), device=dev)
    raw_relu = Raw(gpu, _raw_source("max(a[i] * v, 0.0)", "ax"), [a, x], n)
    t_f, t_r = interleaved([lambda: relu(af, xf2).block_until_ready(), raw_relu], 1, repeat)
    rows.append(("(c) max(a*x, 0): NaN-propagating vs WGSL max (ms)", t_f * 1e3, t_r * 1e3, t_r / t_f,
                 "reported"))
    th = fa.jit(lambda a, x: fnp.tanh(a * x), device=dev)
    raw_th = Raw(gpu, _raw_source("tanh(a[i] * v)", "ax"), [a, x], n)
    t_f, t_r = interleaved([lambda: th(af, xf2).block_until_ready(), raw_th], 1, repeat)
    rows.append(("(c) tanh(a*x): NaN/-0-safe vs WGSL tanh (ms)", t_f * 1e3, t_r * 1e3, t_r / t_f, "reported"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=16 * 1024 * 1024, help="elements of the chain's arrays")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="training steps per timing of (d)")
    args = ap.parse_args(argv)
    dev = fa.devices("webgpu")[0]
    gpu = dev.impl.gpu
    rows = []

    # (a) per call
    x4 = np.arange(4, dtype=np.float32)
    f = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    xf = fa.device_put(x4, dev)
    raw4 = Raw(gpu, _raw_source("v * 2.0 + 1.0", "x"), [x4], 4)
    t_f, t_r = interleaved([lambda: f(xf).block_until_ready(), raw4], 200, args.repeat)
    rows.append(("(a) jitted call + wait, f32[4] (us)", t_f * 1e6, t_r * 1e6, t_f / t_r, "reported"))

    rows.extend(_throughput_rows(dev, gpu, args.size, args.repeat))

    # (d) digits MLP training step, nothing on numpy
    ref = fa.devices("numpy")[0]
    rng = np.random.default_rng(1)
    xb = rng.random((64, 64)).astype(np.float32)
    yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    old = fa.config.fallback
    fa.config.fallback = "error"
    try:
        first, states = {}, {}
        for d in (dev, ref):
            opt, fstep = make_fn_step()
            p = fa.device_put(fn_init(), d)
            s = opt.init(p)
            xbd, ybd = fa.device_put(xb, d), fa.device_put(yb, d)
            jstep = fa.jit(fstep, device=d)
            t0 = time.perf_counter()
            p, s, loss = jstep(p, s, xbd, ybd)
            loss.block_until_ready()
            first[d.backend] = time.perf_counter() - t0
            states[d.backend] = [jstep, p, s, xbd, ybd]

        def stepper(name):
            def run():
                st = states[name]
                for _ in range(args.steps):
                    st[1], st[2], loss = st[0](st[1], st[2], st[3], st[4])
                loss.block_until_ready()
            return run

        t_w, t_n = interleaved([stepper("webgpu"), stepper("numpy")], 1, args.repeat)
        times = (t_w / args.steps, t_n / args.steps)
        nk = len(states["webgpu"][0].lower(*states["webgpu"][1:]).kernels())
    finally:
        fa.config.fallback = old
    rows.append((f"(d) digits MLP train step, {nk} kernels, one submit (us) [vs numpy backend]",
                 times[0] * 1e6, times[1] * 1e6, times[1] / times[0], "reported"))
    rows.append(("(d) first call of the step: trace + schedule + pipelines (ms) [vs numpy backend]",
                 first["webgpu"] * 1e3, first["numpy"] * 1e3, first["webgpu"] / first["numpy"], "reported"))

    print(f"device: {dev} — {dev.description}")
    print("| measure | fnarray | raw WGSL | ratio | target |")
    print("|---|---|---|---|---|")
    for name, fv, rv, ratio, target in rows:
        print(f"| {name} | {fv:.2f} | {rv:.2f} | {ratio:.2f} | {target} |")


if __name__ == "__main__":
    main()
