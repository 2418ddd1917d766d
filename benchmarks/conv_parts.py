"""A conv layer's forward, input gradient and weight gradient, each on its own: fnarray against NumPy and tinygrad.

``x`` f32[32, 32, 32, 32] (NHWC), ``w`` f32[3, 3, 32, 64] (HWIO), stride 1, SAME (1.2 GFLOP each part). fnarray:
three jitted functions on ``--device`` (``y = conv(x, w)``; ``dx`` and ``dw`` through ``fa.vjp`` with a cotangent
f32[32, 32, 32, 64]); NumPy: im2col (a strided view copied into a (32768, 288) matrix) and one BLAS matmul per part
(col2im by 9 shifted adds for ``dx``); tinygrad (PyPI ``tinygrad``, ``DEV=CL``, ``TinyJit``, NCHW) in the same
process on the same PoCL (``vs_tinygrad.py`` says how it is set up; left out if not installed). Each repeat is the
best of ``--number`` calls of every side, alternating; printed: the median over ``--repeat`` (ms), the ratios
fnarray / NumPy and fnarray / tinygrad (< 1: fnarray faster) and the load average. Asserts nothing but that the
three agree.

Usage: python benchmarks/conv_parts.py [--device opencl:0] [--repeat 3] [--number 5]
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import vs_tinygrad

N, H, W, C, O, K = 32, 32, 32, 32, 64, 3
DN = ("NHWC", "HWIO", "NHWC")


def _np_parts(x, w, ct):
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    w2 = w.reshape(K * K * C, O)
    g = ct.reshape(N * H * W, O)

    def cols():
        win = np.lib.stride_tricks.sliding_window_view(xp, (K, K), axis=(1, 2))
        return np.ascontiguousarray(win.transpose(0, 1, 2, 4, 5, 3)).reshape(N * H * W, K * K * C)

    def fwd():
        return (cols() @ w2).reshape(N, H, W, O)

    def dx():
        dcols = (g @ w2.T).reshape(N, H, W, K, K, C)
        dxp = np.zeros_like(xp)
        for i in range(K):
            for j in range(K):
                dxp[:, i:i + H, j:j + W, :] += dcols[:, :, :, i, j, :]
        return dxp[:, 1:-1, 1:-1, :]

    def dw():
        return (cols().T @ g).reshape(K, K, C, O)
    return fwd, dx, dw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=5)
    args = ap.parse_args(argv)
    vs_tinygrad._point_tinygrad_at_pyopencl_pocl()
    os.environ.setdefault("DEV", "CL")
    try:
        from tinygrad import Tensor, TinyJit
    except ImportError:
        Tensor = None
    import fnarray as fa
    import fnarray.numpy as fnp

    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = (rng.standard_normal((K, K, C, O)) / np.sqrt(K * K * C)).astype(np.float32)
    ct = rng.standard_normal((N, H, W, O)).astype(np.float32)
    dev = fa.devices(args.device.split(":")[0])[int(args.device.split(":")[1])]
    xd, wd, cd = (fa.device_put(fnp.asarray(v), dev) for v in (x, w, ct))

    def conv(a, b):
        return fa.lax.conv_general_dilated(a, b, (1, 1), "SAME", dimension_numbers=DN)

    fa_fns = [fa.jit(conv), fa.jit(lambda a, b, g: fa.vjp(lambda a: conv(a, b), a)[1](g)[0]),
              fa.jit(lambda a, b, g: fa.vjp(lambda b: conv(a, b), b)[1](g)[0])]
    fa_args = [(xd, wd), (xd, wd, cd), (xd, wd, cd)]
    np_fns = _np_parts(x, w, ct)
    refs = [f() for f in np_fns]
    names = ["forward y", "input gradient dx", "weight gradient dw"]
    tg_fns = [None] * 3
    if Tensor is not None:
        tx, tw, tc = (Tensor(np.ascontiguousarray(v.transpose(p))).realize()
                      for v, p in ((x, (0, 3, 1, 2)), (w, (3, 2, 0, 1)), (ct, (0, 3, 1, 2))))
        g_f = TinyJit(lambda a, b: a.conv2d(b, padding=1).realize())
        g_dx = TinyJit(lambda a, b, g: a.conv2d(b, padding=1).gradient(a, gradient=g)[0].realize())
        g_dw = TinyJit(lambda a, b, g: a.conv2d(b, padding=1).gradient(b, gradient=g)[0].realize())
        tg_fns = [lambda: vs_tinygrad._sync(g_f(tx, tw)), lambda: vs_tinygrad._sync(g_dx(tx, tw, tc)),
                  lambda: vs_tinygrad._sync(g_dw(tx, tw, tc))]
        outs = [t().numpy() for t in tg_fns] + [t().numpy() for t in tg_fns]   # TinyJit captures on call 2
        for name, got, ref, p in zip(names, outs[3:], refs, ((0, 2, 3, 1), (0, 2, 3, 1), (2, 3, 1, 0)), strict=True):
            np.testing.assert_allclose(got.transpose(p), ref, rtol=2e-3, atol=2e-3, err_msg="tinygrad " + name)
    for name, f, a, ref in zip(names, fa_fns, fa_args, refs, strict=True):
        np.testing.assert_allclose(np.asarray(f(*a)), ref, rtol=2e-3, atol=2e-3, err_msg="fnarray " + name)
    load0 = os.getloadavg()
    print(f"conv 3x3 SAME, x f32[32,32,32,32] NHWC -> 64 features, {args.device}; {args.repeat} repeats of best-of-"
          f"{args.number}, alternating; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}\n")
    print("| part | fnarray (ms) | NumPy im2col + BLAS (ms) | tinygrad (ms) | fnarray / NumPy | fnarray / tinygrad |")
    print("|---|---:|---:|---:|---:|---:|")
    for k, name in enumerate(names):
        fns = [lambda k=k: fa_fns[k](*fa_args[k]).block_until_ready(), np_fns[k]]
        if tg_fns[k] is not None:
            fns.append(tg_fns[k])
        reps = [vs_tinygrad._best(fns, args.number) for _ in range(args.repeat)]
        med = [statistics.median(r[i] for r in reps) * 1e3 for i in range(len(fns))]
        tg = f"{med[2]:.1f}" if len(med) > 2 else "-"
        tr = f"{med[0] / med[2]:.2f}" if len(med) > 2 else "-"
        print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {tg} | {med[0] / med[1]:.2f} | {tr} |", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
