"""Row softmax and layernorm on webgpu:0 against hand-written WGSL kernels of the same shape, and NumPy.

The hand kernels are what one would write for these rows by hand: a workgroup of ``WG`` invocations per
row, each invocation striding over the row (invocation ``l`` reads columns ``l, l + WG, ...``, so
neighbouring invocations read neighbouring floats), the row's statistics combined by a tree in
workgroup memory (``WG / 2, WG / 4, ... 1`` with a ``workgroupBarrier`` between steps), then the
normalised row written by the same invocations. Softmax keeps ``exp(x - max)`` in the output row
between its sum and its scaling (one ``exp`` per element, x read twice); layernorm takes the mean and
then the variance around it (x read three times, as fnarray's kernel). They run through wgpu-py
directly with their buffers and bind group prepared once; both sides wait for a 4-byte readback.

fnarray's side is ``fa.jit`` of ``fa.nn.softmax(x, axis=-1)`` and of the layernorm written with
``fnp.mean`` (with a scale and shift ``* g + b``: the hand kernel does the same). NumPy's side is the
same formulas in float32. Timed interleaved (fnarray, hand, NumPy in turn), best of ``--repeat``;
ratios fnarray / hand and fnarray / NumPy (> 1: fnarray slower). Prints a Markdown table and the load
average; asserts nothing (the values are checked against NumPy before timing).

Usage: python benchmarks/webgpu_rows.py [--rows 4096] [--cols 1024] [--repeat 7] [--wg 16]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp

WG = 16   # the hand kernels' workgroup (--wg): 8-16 measured fastest on lavapipe, 256 2-4x slower

_TREE = """
    workgroupBarrier();
    for (var s = {wg}u / 2u; s > 0u; s = s / 2u) {{
        if (l < s) {{
            {combine}
        }}
        workgroupBarrier();
    }}
"""


def _softmax_source(cols: int, wg: int = WG) -> str:
    """One workgroup per row: max, sum of exp(x - max) (kept in y), then y / sum."""
    tree = _TREE.format(wg=wg, combine="red[l] = max(red[l], red[l + s]);")
    tree2 = _TREE.format(wg=wg, combine="red[l] = red[l] + red[l + s];")
    return f"""
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<workgroup> red: array<f32, {wg}>;
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_id) li: vec3<u32>) {{
    let l = li.x;
    let base = w.x * {cols}u;
    var m = -3.4028235e38f;
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        m = max(m, x[base + c]);
    }}
    red[l] = m;
{tree}
    m = red[0];
    workgroupBarrier();
    var t = 0.0f;
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        let e = exp(x[base + c] - m);
        y[base + c] = e;
        t = t + e;
    }}
    red[l] = t;
{tree2}
    let inv = 1.0f / red[0];
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        y[base + c] = y[base + c] * inv;
    }}
}}
"""


def _layernorm_source(cols: int, wg: int = WG) -> str:
    """One workgroup per row: mean, variance around it, then (x - mean) * rsqrt(var + eps) * g + b."""
    tree = _TREE.format(wg=wg, combine="red[l] = red[l] + red[l + s];")
    return f"""
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
var<workgroup> red: array<f32, {wg}>;
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_id) li: vec3<u32>) {{
    let l = li.x;
    let base = w.x * {cols}u;
    var t = 0.0f;
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        t = t + x[base + c];
    }}
    red[l] = t;
{tree}
    let mu = red[0] / {float(cols)}f;
    workgroupBarrier();
    var q = 0.0f;
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        let d = x[base + c] - mu;
        q = q + d * d;
    }}
    red[l] = q;
{tree}
    let r = inverseSqrt(red[0] / {float(cols)}f + 1e-5f);
    for (var c = l; c < {cols}u; c = c + {wg}u) {{
        y[base + c] = (x[base + c] - mu) * r * g[c] + b[c];
    }}
}}
"""


class Hand:
    """A hand-written kernel, one workgroup per row, with its buffers and bind group prepared once."""

    def __init__(self, gpu, source, inputs, rows, cols):
        import wgpu
        dev = gpu.device
        self.gpu, self.shape = gpu, (rows, cols)
        module = dev.create_shader_module(code=source)
        self.pipe = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.ins = [dev.create_buffer_with_data(data=np.ascontiguousarray(a), usage=usage) for a in inputs]
        self.out = dev.create_buffer(size=4 * rows * cols, usage=usage)
        self.bg = dev.create_bind_group(layout=self.pipe.get_bind_group_layout(0), entries=[
            {"binding": k, "resource": {"buffer": buf}} for k, buf in enumerate(self.ins + [self.out])])
        if rows > 65535:
            raise SystemExit(f"--rows {rows}: one dispatch dimension holds at most 65535 workgroups")
        self.rows = rows

    def __call__(self):
        dev = self.gpu.device
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipe)
        cp.set_bind_group(0, self.bg)
        cp.dispatch_workgroups(self.rows, 1, 1)
        cp.end()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(self.out, 0, 4)

    def result(self):
        return np.frombuffer(self.gpu.device.queue.read_buffer(self.out), np.float32).reshape(self.shape)


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_layernorm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b


def _fa_layernorm(v, g, b):
    mu = fnp.mean(v, axis=-1, keepdims=True)
    var = fnp.mean(fnp.square(v - mu), axis=-1, keepdims=True)
    return (v - mu) * fa.lax.rsqrt(var + 1e-5) * g + b


def interleaved(fns, repeat):
    """Best time per call of each function, called in alternation (a busy machine hits all alike)."""
    for f in fns:
        f()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, f in enumerate(fns):
            t = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--wg", type=int, default=WG, help="the hand kernels' workgroup size (a power of two)")
    args = ap.parse_args(argv)
    dev = fa.devices("webgpu")[0]
    gpu = dev.impl.gpu
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.rows, args.cols)) * 3).astype(np.float32)
    g = rng.standard_normal(args.cols).astype(np.float32)
    b = rng.standard_normal(args.cols).astype(np.float32)
    xd, gd, bd = (fa.device_put(v, dev) for v in (x, g, b))

    cases = []
    f_sm = fa.jit(lambda v: fa.nn.softmax(v, axis=-1))
    h_sm = Hand(gpu, _softmax_source(args.cols, args.wg), [x], args.rows, args.cols)
    cases.append(("row softmax", f_sm, (xd,), h_sm, lambda: _np_softmax(x), 1e-5, 1e-7))
    f_ln = fa.jit(_fa_layernorm)
    h_ln = Hand(gpu, _layernorm_source(args.cols, args.wg), [x, g, b], args.rows, args.cols)
    cases.append(("layernorm (* g + b)", f_ln, (xd, gd, bd), h_ln, lambda: _np_layernorm(x, g, b), 1e-3, 1e-4))

    rows = []
    for name, f, fargs, hand, ref, rtol, atol in cases:
        want = ref()
        hand()
        np.testing.assert_allclose(hand.result(), want, rtol=rtol, atol=atol)
        np.testing.assert_allclose(np.asarray(f(*fargs)), want, rtol=rtol, atol=atol)
        n_kernels = len(f.lower(*fargs).kernels())
        t_f, t_h, t_n = interleaved([lambda f=f, a=fargs: f(*a).block_until_ready(), hand, ref], args.repeat)
        rows.append((name, n_kernels, t_f, t_h, t_n))

    print(f"device: {dev} — {dev.description}; {args.rows}x{args.cols} float32, best of {args.repeat}; "
          f"hand workgroup {args.wg}; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| case | fnarray kernels | fnarray (ms) | hand WGSL (ms) | NumPy (ms) | fnarray / hand | fnarray / NumPy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, nk, t_f, t_h, t_n in rows:
        print(f"| {name} | {nk} | {t_f * 1e3:.1f} | {t_h * 1e3:.1f} | {t_n * 1e3:.1f} | {t_f / t_h:.2f} | "
              f"{t_f / t_n:.2f} |")


if __name__ == "__main__":
    main()
