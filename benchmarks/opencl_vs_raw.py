"""fnarray's opencl backend against hand-written PyOpenCL kernels and NumPy, in one run.

Rows (issue "opencl backend"):
  a) the chain ``tanh(a*x+b)*x+1`` on three float32 arrays of 16M elements, fnarray's fused kernel against
     the same chain hand-written in OpenCL C (target >= 0.9x); PoCL's ``tanh`` dominates, so the chain is
     also timed with tanh written through ``exp`` (both sides);
  b) the arithmetic-only chain ``clip((a*x+b)*x+1, -4, 4)`` against NumPy's unfused evaluation (target
     >= 2x) and against the memory floor (a hand-written copy kernel moving the same bytes);
  c) float32 matmul 1024x1024 against a naive OpenCL kernel (target >= 3x) and NumPy's BLAS (reported);
  d) one training step of the digits MLP (64-128-128-10, ReLU, softmax cross-entropy, Adam, batch 64),
     fnarray on the OpenCL device against fnarray on the numpy backend; and its first call.

Usage:  python benchmarks/opencl_vs_raw.py [--device opencl:0] [--size 16777216] [--repeat 5]
Times are the best of ``--repeat`` runs; the machine is shared, so they vary from run to run. A ratio is
reference time / fnarray time (>= 1: fnarray is faster). Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.devices.placement import parse_device

from backend_vs_raw import fn_init, make_fn_step

RAW_SOURCE = """
__kernel void chain_tanh(__global const float* a, __global const float* x, __global const float* b,
                         __global float* out, const int n) {
    int i = get_global_id(0);
    if (i < n) { float xv = x[i]; out[i] = tanh(a[i] * xv + b[i]) * xv + 1.0f; }
}
__kernel void chain_exp(__global const float* a, __global const float* x, __global const float* b,
                        __global float* out, const int n) {
    int i = get_global_id(0);
    if (i < n) {
        float xv = x[i];
        float u = a[i] * xv + b[i];
        float e = exp(-2.0f * fabs(u));
        out[i] = copysign((1.0f - e) / (1.0f + e), u) * xv + 1.0f;
    }
}
__kernel void copy(__global const float* src, __global float* dst, const int n) {
    int i = get_global_id(0);
    if (i < n) dst[i] = src[i];
}
__kernel void matmul_naive(__global const float* A, __global const float* B, __global float* C,
                           const int M, const int N, const int K) {
    int j = get_global_id(0), i = get_global_id(1);
    if (i >= M || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
    C[i * N + j] = acc;
}
"""


def best(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def best_pair(ours, ref, repeat):
    """Best times of two functions measured alternately (a shared machine's load then hits both alike)."""
    ours()
    ref()
    t_ours, t_ref = [], []
    for _ in range(repeat):
        for fn, acc in ((ours, t_ours), (ref, t_ref)):
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    return min(t_ours), min(t_ref)


def chain(a, x, b):
    return fnp.tanh(a * x + b) * x + 1.0


def chain_exp(a, x, b):
    u = a * x + b
    e = fnp.exp(-2.0 * fnp.abs(u))
    return fnp.copysign((1.0 - e) / (1.0 + e), u) * x + 1.0


def chain_clip(a, x, b):
    return fnp.clip((a * x + b) * x + 1.0, -4.0, 4.0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--size", type=int, default=16 * 1024 * 1024, help="elements of the chains' arrays")
    ap.add_argument("--matmul", type=int, default=1024, help="matmul size (square)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    import pyopencl as cl

    dev = parse_device(args.device)
    state = dev.impl.state(dev)
    ctx, queue = state.context, state.queue
    prog = cl.Program(ctx, RAW_SOURCE).build()
    rows = []

    def row(name, ours, ref, ref_name, target=""):
        rows.append((name, ours * 1e3, ref * 1e3, ref_name, ref / ours, target))

    def pair(name, ours, ref, ref_name, target="", repeat=args.repeat):
        row(name, *best_pair(ours, ref, repeat), ref_name, target)

    # ---------------------------------------------------------------- a) and b): 16M-element chains
    n = args.size
    rng = np.random.default_rng(0)
    host = [rng.uniform(-1, 1, n).astype(np.float32) for _ in range(3)]
    mf = cl.mem_flags
    raw_in = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=h) for h in host]
    raw_out = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * n)
    wg = 64

    def raw(kernel_name):
        knl = cl.Kernel(prog, kernel_name)
        gsize = (-(-n // wg) * wg,)

        def run():
            knl(queue, gsize, (wg,), *raw_in, raw_out, np.int32(n))
            state.finish()   # (fnarray's held eager launches let go too: opencl backend.py, hold)
        return run

    a, x, b = (fa.device_put(fnp.asarray(h), dev) for h in host)
    for name, fn, kname in (("tanh(a*x+b)*x+1", chain, "chain_tanh"),
                            ("same, tanh through exp", chain_exp, "chain_exp")):
        jf = fa.jit(fn, device=dev)
        pair(f"{name}, {n / 2**20:.0f}M f32", lambda: jf(a, x, b).block_until_ready(), raw(kname),
             "hand-written OpenCL", ">= 0.9x" if kname == "chain_tanh" else "")
        check = np.asarray(jf(a, x, b))[:1000]
        want = np.tanh(host[0][:1000].astype(np.float64) * host[1][:1000] + host[2][:1000]) * host[1][:1000] + 1
        np.testing.assert_allclose(check, want, rtol=1e-5, atol=1e-5)

    jclip = fa.jit(chain_clip, device=dev)
    ha, hx, hb = host
    pair(f"clip((a*x+b)*x+1, -4, 4), {n / 2**20:.0f}M f32", lambda: jclip(a, x, b).block_until_ready(),
         lambda: np.clip((ha * hx + hb) * hx + 1.0, -4.0, 4.0), "NumPy (unfused)", ">= 2x")
    copy = cl.Kernel(prog, "copy")
    dst = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * n)

    def floor():  # the chain moves 4 arrays: two read+write passes of one array
        for _ in range(2):
            copy(queue, (-(-n // wg) * wg,), (wg,), raw_in[0], dst, np.int32(n))
        state.finish()
    pair("same, against the memory floor", lambda: jclip(a, x, b).block_until_ready(), floor,
         "copy kernel, same bytes")

    # ---------------------------------------------------------------- c) matmul
    m = args.matmul
    A, B = rng.uniform(-1, 1, (m, m)).astype(np.float32), rng.uniform(-1, 1, (m, m)).astype(np.float32)
    fa_a, fa_b = fa.device_put(fnp.asarray(A), dev), fa.device_put(fnp.asarray(B), dev)
    jm = fa.jit(lambda p, q: p @ q, device=dev)
    ours = best(lambda: jm(fa_a, fa_b).block_until_ready(), args.repeat)
    np.testing.assert_allclose(np.asarray(jm(fa_a, fa_b)), A.astype(np.float64) @ B, rtol=1e-3, atol=1e-3)
    bufA = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=A)
    bufB = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=B)
    bufC = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * m * m)
    naive = cl.Kernel(prog, "matmul_naive")

    def run_naive():
        naive(queue, (m, m), (16, 16), bufA, bufB, bufC, np.int32(m), np.int32(m), np.int32(m))
        state.finish()
    flops = 2 * m ** 3
    row(f"matmul {m}x{m} f32 ({flops / ours / 1e9:.1f} GFLOP/s)", ours, best(run_naive, 1), "naive OpenCL", ">= 3x")
    pair("same", lambda: jm(fa_a, fa_b).block_until_ready(), lambda: A @ B, "NumPy BLAS")

    # ---------------------------------------------------------------- d) the digits MLP step
    opt, step = make_fn_step()
    xb = rng.uniform(0, 1, (64, 64)).astype(np.float32)
    yb = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    steps, firsts = [], []
    for d in (dev, parse_device("numpy:0")):
        p = {k: fa.device_put(fnp.asarray(v), d) for k, v in fn_init().items()}
        s = opt.init(p)
        xs, ys = fa.device_put(fnp.asarray(xb), d), fa.device_put(fnp.asarray(yb), d)
        js = fa.jit(step, device=d)
        t0 = time.perf_counter()
        out = js(p, s, xs, ys)
        out[2].block_until_ready()
        firsts.append(time.perf_counter() - t0)
        state_box = [p, s]

        def one(js=js, xs=xs, ys=ys, box=state_box):
            box[0], box[1], loss = js(box[0], box[1], xs, ys)
            loss.block_until_ready()
        steps.append(one)
    pair("digits MLP step (grad + Adam), batch 64", steps[0], steps[1], "fnarray numpy backend",
         repeat=max(args.repeat, 30))
    rows.append(("digits MLP step, first call (trace + compile)", firsts[0] * 1e3, float("nan"), "-", float("nan"),
                 ""))

    load = os.getloadavg()
    print(f"device: {dev} ({dev.description}); platform {ctx.devices[0].platform.version}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| case | fnarray (ms) | reference (ms) | reference | ratio (ref/fnarray) | target |")
    print("|---|---:|---:|---|---:|---|")
    for name, o, r, rn, ratio, target in rows:
        rs = "-" if np.isnan(r) else f"{r:.2f}"
        qs = "-" if np.isnan(ratio) else f"{ratio:.2f}x"
        print(f"| {name} | {o:.2f} | {rs} | {rn} | {qs} | {target} |")


if __name__ == "__main__":
    main()
