"""Pallas example kernels (``examples/kernels/``) against fnarray's own generated kernels for the same
computation, on opencl:0 and webgpu:0, as ratios in one run (issue 29).

Each row times ``jit`` of the Pallas kernel and ``jit`` of the same computation written with fnarray's
operations (which the kernel compiler fuses and tiles itself), interleaved: ``repeats`` rounds, each running
both once, the median per side, in process CPU time, with the outputs read back (the wait is part of
it). A ratio below 1
means the hand-written kernel is faster. ``--tinygrad`` adds the softmax and matmul kernels against tinygrad
(``DEV=CL``, ``TinyJit``) on the same PoCL platform (``vs_tinygrad.py``'s setup).

Run: ``python benchmarks/kernels.py [--quick] [--devices opencl:0,webgpu:0]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)

import fnarray as fa
from _timing import available_devices

sys.path.insert(0, os.path.join(_checkout.ROOT, "examples"))
from kernels import flash_attention, layer_norm, matmul, quantized_matvec, softmax, vector_add  # noqa: E402


def _cases(quick):
    rng = np.random.default_rng(0)

    def f32(*s):
        return rng.standard_normal(s).astype(np.float32)

    n = 1 << (16 if quick else 20)
    rows, cols = (64, 256) if quick else (256, 1024)
    mm = 64 if quick else 256
    heads, length, d = (1, 64, 32) if quick else (4, 256, 32)
    qn, qk = (128, 256) if quick else (1024, 1024)
    w, s, b = (np.asarray(a) for a in fa.quantize(f32(qn, qk), group_size=64, bits=4))
    return [
        ("vector_add", vector_add.vector_add, lambda x, y: x + y, (f32(n), f32(n))),
        ("softmax (fused rows)", softmax.softmax_forward, lambda x: fa.nn.softmax(x, axis=-1), (f32(rows, cols),)),
        ("layer_norm", layer_norm.layer_norm, layer_norm.reference, (f32(rows, cols), f32(cols), f32(cols))),
        ("matmul (32x32 tiles)", lambda x, y: matmul.matmul(x, y, 32, 32, 32), lambda x, y: x @ y,
         (f32(mm, mm), f32(mm, mm))),
        ("flash_attention (causal)", flash_attention.flash_attention, flash_attention.reference,
         (f32(heads, length, d), f32(heads, length, d), f32(heads, length, d))),
        ("flash_attention vs fused", flash_attention.flash_attention, _fused_attention,
         (f32(heads, length, d), f32(heads, length, d), f32(heads, length, d))),
        ("4-bit matvec", quantized_matvec.quantized_matvec,
         lambda x, w, s, b: fa.quantized_matmul(x, w, s, b, transpose=True, group_size=64, bits=4),
         (f32(qk), w, s, b)),
    ]


def _fused_attention(q, k, v):
    """The flash-attention example's computation by fnarray's own fused kernel (``dot_product_attention``, one
    work item per query row; ``groups/attention.py``), its ``(heads, length, d)`` operands as ``(1, length,
    heads, d)`` (the transposes are copy kernels, part of the time)."""
    def t(x):
        return x.transpose(1, 0, 2)[None]
    return fa.nn.dot_product_attention(t(q), t(k), t(v), is_causal=True)[0].transpose(1, 0, 2)


def _run(f, args):
    out = f(*args)
    np.asarray(out)


def _time(fa_fn, args, repeats):
    """Process CPU time per call (docs/internals.md: on these CPU devices wall times under load scatter 3x,
    CPU times 1.3x); a GPU adapter would need wall time."""
    samples = []
    for _ in range(repeats):
        t0 = time.process_time()
        _run(fa_fn, args)
        samples.append(time.process_time() - t0)
    return samples


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--devices", default="opencl:0,webgpu:0")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--only", default="", help="comma-separated kernel names (prefixes of the labels) to run")
    p.add_argument("--tinygrad", action="store_true", help="softmax and matmul against tinygrad on opencl:0 too")
    args = p.parse_args(argv)
    fa.config.fallback = "error"   # a kernel that falls back would time the interpreter
    print(f"{'device':<10} {'kernel':<26} {'pallas ms':>10} {'fnarray ms':>11} {'ratio':>7}")
    for name, dev in available_devices(fa, args.devices):
        for label, kernel, own, inputs in _cases(args.quick):
            if args.only and not label.startswith(tuple(args.only.split(","))):
                continue
            xs = [fa.device_put(a, dev) for a in inputs]
            fk, fo = fa.jit(kernel), fa.jit(own)
            _run(fk, xs)
            _run(fo, xs)   # compiled and warm
            tk, to = [], []
            for _ in range(args.repeats):
                tk += _time(fk, xs, 1)
                to += _time(fo, xs, 1)
            mk, mo = statistics.median(tk) * 1e3, statistics.median(to) * 1e3
            print(f"{name:<10} {label:<26} {mk:>10.3f} {mo:>11.3f} {mk / mo:>6.2f}x", flush=True)
    if args.tinygrad:
        _vs_tinygrad(args)
    print(f"\nload average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1, 5, 15 min)")


def _vs_tinygrad(args):
    """The softmax and matmul kernels on opencl:0 against tinygrad's on the same platform."""
    from vs_tinygrad import _point_tinygrad_at_pyopencl_pocl, _sync
    _point_tinygrad_at_pyopencl_pocl()
    os.environ.setdefault("DEV", "CL")
    try:
        from tinygrad import Tensor, TinyJit
    except ImportError as e:
        print(f"tinygrad: not installed ({e})")
        return
    dev = fa.get_device("opencl:0")
    cases = {label: (kernel, inputs) for label, kernel, _, inputs in _cases(args.quick)
             if label.startswith(("softmax", "matmul"))}
    theirs = {"softmax (fused rows)": TinyJit(lambda v: v.softmax(-1).realize()),
              "matmul (32x32 tiles)": TinyJit(lambda u, v: (u @ v).realize())}
    from tinygrad import Device
    tdev = Device["CL"]
    ours = dev.handle.platform.version.strip()
    print(f"\ntinygrad on {getattr(tdev, 'device_name', '?')}; fnarray's opencl:0 is {ours}")
    print(f"{'kernel':<26} {'pallas ms':>10} {'tinygrad ms':>12} {'ratio':>7} {'max diff':>9}   (opencl:0, DEV=CL)")
    for label, (kernel, inputs) in cases.items():
        fk = fa.jit(kernel)
        xs = [fa.device_put(a, dev) for a in inputs]
        g = theirs[label]
        try:
            ts = [Tensor(np.ascontiguousarray(a)).realize() for a in inputs]

            def tg_run(g=g, ts=ts):
                return _sync(g(*ts))
            for _ in range(3):   # TinyJit captures on its second call
                _run(fk, xs)
                tg_run()
            diff = float(np.abs(np.asarray(fk(*xs)) - tg_run().numpy()).max())
        except (AttributeError, OSError, RuntimeError) as e:   # no libOpenCL.so.1 (ocl-icd-libopencl1)
            print(f"tinygrad: cannot run on OpenCL here ({e})")
            return
        tk, tt = [], []
        for _ in range(args.repeats):
            tk += _time(fk, xs, 1)
            t0 = time.process_time()
            tg_run()
            tt.append(time.process_time() - t0)
        mk, mt = statistics.median(tk) * 1e3, statistics.median(tt) * 1e3
        print(f"{label:<26} {mk:>10.3f} {mt:>12.3f} {mk / mt:>6.2f}x {diff:>9.1e}", flush=True)


if __name__ == "__main__":
    main()
