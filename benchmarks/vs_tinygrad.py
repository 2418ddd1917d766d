"""fnarray's opencl backend against tinygrad on the same OpenCL device, in one process.

Cases (issue "kernels as fast as the best compiler on the same device"): the elementwise chain
``tanh(a*x+b)*x+1`` and the arithmetic chain ``clip((a*x+b)*x+1, -4, 4)`` (4M float32), a row softmax
and a layernorm over 4096x1024, float32 matmuls 512^2 and 1024^2, one SGD training step of the digits
MLP (64-128-128-10, ReLU, softmax cross-entropy, batch 64) and, where ``fa.lax.conv_general_dilated``
exists, a 3x3 SAME convolution (batch 32, 32x32, 32->64 channels, NHWC/HWIO on our side, NCHW on
tinygrad's). fnarray runs each case jitted on ``--device``; tinygrad under ``TinyJit`` with
``DEV=CL``. Both run the same OpenCL platform: the script points tinygrad's ICD loader at the PoCL that
PyOpenCL ships (a vendors folder in a temporary directory), unless ``OCL_ICD_VENDORS`` is already set.

Setup: ``pip install tinygrad``. tinygrad's OpenCL runtime loads ``libOpenCL``: where ``OPENCL_PATH`` is unset
the script names PyOpenCL's bundled loader (so no system ``ocl-icd-libopencl1`` is needed and both libraries
read one platform list). ``pocl-opencl-icd`` adds Debian's own PoCL as a second platform, listed first, so
``opencl:0`` changes: do not install it; ``sh benchmarks/pocl31.sh /work/pocl31 run python
benchmarks/vs_tinygrad.py`` runs this script on Debian's PoCL 3.1 unpacked beside the wheel's (the platform
of each side is printed).

Each case is timed ``--repeat`` times; one repeat is the best of ``--number`` calls of each side,
measured alternately (the machine's load hits both alike). Printed: milliseconds and the ratio
fnarray / tinygrad (> 1: fnarray is slower) as the median and spread over the repeats, and the load
average. Asserts nothing.

Usage:  python benchmarks/vs_tinygrad.py [--device opencl:0] [--repeat 3] [--number 5] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)


def _point_tinygrad_at_pyopencl_pocl():
    """An ICD vendors folder naming PyOpenCL's bundled PoCL, so tinygrad opens the same platform; and, where
    ``OPENCL_PATH`` is unset, tinygrad's loader set to PyOpenCL's bundled ``libOpenCL`` (so no system
    ``ocl-icd-libopencl1`` is needed and both libraries read one platform list: ``benchmarks/pocl31.sh``)."""
    import glob
    import pyopencl
    here = os.path.join(os.path.dirname(pyopencl.__file__), ".libs")
    loaders = glob.glob(os.path.join(here, "libOpenCL*.so*"))
    if loaders and not os.environ.get("OPENCL_PATH"):
        os.environ["OPENCL_PATH"] = loaders[0]
    if os.environ.get("OCL_ICD_VENDORS"):
        return
    libs = glob.glob(os.path.join(here, "libpocl*.so*"))
    if not libs:
        return  # a PyOpenCL built against the system loader: tinygrad sees the same ICDs already
    folder = tempfile.mkdtemp(prefix="fnarray-ocl-vendors-")
    with open(os.path.join(folder, "pocl.icd"), "w") as f:
        f.write(libs[0] + "\n")
    os.environ["OCL_ICD_VENDORS"] = folder


def _best(fns, number):
    """Each of ``fns`` called once to warm, then the best seconds of ``number`` calls of each, alternating
    (also used by ``opencl_math.py`` and ``conv_parts.py``)."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(number):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def _cases(dev, fa, fnp, Tensor, TinyJit):
    """``name -> (fnarray thunk, tinygrad thunk, check)``; each thunk runs the case once, synchronously."""
    rng = np.random.default_rng(0)
    out = {}

    def put(a):
        return fa.device_put(fnp.asarray(a), dev)

    def tg(a):
        return Tensor(np.ascontiguousarray(a)).realize()

    # elementwise and arithmetic chains
    n = 1 << 22
    a, x, b = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    fa_ab = [put(v) for v in (a, x, b)]
    tg_ab = [tg(v) for v in (a, x, b)]
    f_tanh = fa.jit(lambda a, x, b: fnp.tanh(a * x + b) * x + 1.0)
    g_tanh = TinyJit(lambda a, x, b: ((a * x + b).tanh() * x + 1.0).realize())
    out["elementwise chain tanh(a*x+b)*x+1, 4M f32"] = (
        lambda: f_tanh(*fa_ab).block_until_ready(), lambda: _sync(g_tanh(*tg_ab)),
        lambda: np.testing.assert_allclose(np.asarray(f_tanh(*fa_ab)), g_tanh(*tg_ab).numpy(), rtol=1e-4, atol=1e-5))
    f_ar = fa.jit(lambda a, x, b: fnp.clip((a * x + b) * x + 1.0, -4.0, 4.0))
    g_ar = TinyJit(lambda a, x, b: ((a * x + b) * x + 1.0).clip(-4.0, 4.0).realize())
    out["arithmetic chain clip((a*x+b)*x+1), 4M f32"] = (
        lambda: f_ar(*fa_ab).block_until_ready(), lambda: _sync(g_ar(*tg_ab)),
        lambda: np.testing.assert_allclose(np.asarray(f_ar(*fa_ab)), g_ar(*tg_ab).numpy(), rtol=1e-5, atol=1e-5))

    # row softmax and layernorm
    rows = rng.standard_normal((4096, 1024)).astype(np.float32)
    gamma = rng.standard_normal(1024).astype(np.float32)
    beta = rng.standard_normal(1024).astype(np.float32)
    fr, fg, fb = put(rows), put(gamma), put(beta)
    tr, tgm, tb = tg(rows), tg(gamma), tg(beta)
    f_sm = fa.jit(lambda v: fa.nn.softmax(v, axis=-1))
    g_sm = TinyJit(lambda v: v.softmax(-1).realize())
    out["row softmax 4096x1024"] = (
        lambda: f_sm(fr).block_until_ready(), lambda: _sync(g_sm(tr)),
        lambda: np.testing.assert_allclose(np.asarray(f_sm(fr)), g_sm(tr).numpy(), rtol=1e-4, atol=1e-7))

    def ln(v, g, b):
        mu = fnp.mean(v, axis=-1, keepdims=True)
        var = fnp.mean(fnp.square(v - mu), axis=-1, keepdims=True)
        return (v - mu) * fa.lax.rsqrt(var + 1e-5) * g + b

    f_ln = fa.jit(ln)
    g_ln = TinyJit(lambda v, g, b: (v.layernorm(axis=-1, eps=1e-5) * g + b).realize())
    out["layernorm 4096x1024"] = (
        lambda: f_ln(fr, fg, fb).block_until_ready(), lambda: _sync(g_ln(tr, tgm, tb)),
        lambda: np.testing.assert_allclose(np.asarray(f_ln(fr, fg, fb)), g_ln(tr, tgm, tb).numpy(),
                                           rtol=1e-3, atol=1e-4))

    # matmuls
    for size in (512, 1024):
        p = rng.standard_normal((size, size)).astype(np.float32)
        q = rng.standard_normal((size, size)).astype(np.float32)
        fp, fq, tp, tq = put(p), put(q), tg(p), tg(q)
        f_mm = fa.jit(lambda u, v: u @ v)
        g_mm = TinyJit(lambda u, v: (u @ v).realize())
        out[f"matmul {size}^2 f32"] = (
            lambda f_mm=f_mm, fp=fp, fq=fq: f_mm(fp, fq).block_until_ready(),
            lambda g_mm=g_mm, tp=tp, tq=tq: _sync(g_mm(tp, tq)),
            lambda f_mm=f_mm, g_mm=g_mm, fp=fp, fq=fq, tp=tp, tq=tq: np.testing.assert_allclose(
                np.asarray(f_mm(fp, fq)), g_mm(tp, tq).numpy(), rtol=1e-3, atol=1e-3))

    # MLP training step (SGD, identical initial parameters)
    sizes = (64, 128, 128, 10)
    ws = [(rng.standard_normal((i, o)) * np.sqrt(2 / i)).astype(np.float32) for i, o in zip(sizes, sizes[1:])]
    bs = [np.zeros(o, np.float32) for o in sizes[1:]]
    xb = rng.standard_normal((64, 64)).astype(np.float32)
    yb = rng.integers(0, 10, 64)
    onehot = np.eye(10, dtype=np.float32)[yb]
    lr = 0.05

    def fa_loss(params, xv, yv):
        h = xv
        for i, (w, bias) in enumerate(params):
            h = h @ w + bias
            if i < len(params) - 1:
                h = fa.nn.relu(h)
        return -fnp.mean(fnp.sum(fa.nn.log_softmax(h, axis=-1) * yv, axis=-1))

    @fa.jit
    def fa_step(params, xv, yv):
        loss, g = fa.value_and_grad(fa_loss)(params, xv, yv)
        return [(w - lr * gw, bias - lr * gb) for (w, bias), (gw, gb) in zip(params, g)], loss

    state = {"p": [(put(w), put(bias)) for w, bias in zip(ws, bs)]}
    fx, fy = put(xb), put(onehot)

    def fa_run():
        state["p"], loss = fa_step(state["p"], fx, fy)
        loss.block_until_ready()

    tparams = [Tensor(w.copy()).realize() for w in ws] + [Tensor(bias.copy()).realize() for bias in bs]
    tx, ty = tg(xb), tg(onehot)

    @TinyJit
    def tg_step(xv, yv):
        h = xv
        nl = len(ws)
        for i in range(nl):
            h = h @ tparams[i] + tparams[nl + i]
            if i < nl - 1:
                h = h.relu()
        loss = -(h.log_softmax(-1) * yv).sum(-1).mean()
        grads = loss.gradient(*tparams)
        for t, g in zip(tparams, grads, strict=True):
            t.assign(t - lr * g)
        Tensor.realize(loss, *tparams)
        return loss

    out["MLP step 64-128-128-10, batch 64 (SGD)"] = (fa_run, lambda: _sync(tg_step(tx, ty)), None)

    # a convolution layer, once fnarray has convolutions
    if hasattr(fa.lax, "conv_general_dilated"):
        xi = rng.standard_normal((32, 32, 32, 32)).astype(np.float32)     # NHWC
        ki = (rng.standard_normal((3, 3, 32, 64)) * 0.1).astype(np.float32)  # HWIO
        fxi, fki = put(xi), put(ki)
        txi, tki = tg(xi.transpose(0, 3, 1, 2)), tg(ki.transpose(3, 2, 0, 1))
        f_cv = fa.jit(lambda v, k: fa.lax.conv_general_dilated(v, k, (1, 1), "SAME",
                                                               dimension_numbers=("NHWC", "HWIO", "NHWC")))
        g_cv = TinyJit(lambda v, k: v.conv2d(k, padding=1).realize())
        out["conv 3x3 SAME, 32x32x32 -> 64, batch 32"] = (
            lambda: f_cv(fxi, fki).block_until_ready(), lambda: _sync(g_cv(txi, tki)),
            lambda: np.testing.assert_allclose(np.asarray(f_cv(fxi, fki)),
                                               g_cv(txi, tki).numpy().transpose(0, 2, 3, 1), rtol=1e-3, atol=1e-3))
    return out


def _platform(fa, device):
    """The OpenCL platform version of fnarray's ``device`` (``PoCL 3.0-rc2 ...`` or ``PoCL 3.1+debian ...``)."""
    from fnarray.devices.placement import parse_device
    dev = parse_device(device)
    return dev.impl.state(dev).context.devices[0].platform.version


def _tinygrad_platform():
    """The version of the first OpenCL platform, the one tinygrad's ``CL`` device opens (through pyopencl,
    which reads the same ICD list when ``OPENCL_PATH`` names its loader)."""
    import pyopencl as cl
    return cl.get_platforms()[0].version


def _sync(t):
    from tinygrad import Device
    Device[t.device].synchronize()
    return t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--only", default=None, help="run the cases whose name contains this text")
    args = ap.parse_args(argv)
    _point_tinygrad_at_pyopencl_pocl()
    os.environ.setdefault("DEV", "CL")
    try:
        from tinygrad import Tensor, TinyJit
    except ImportError as e:
        sys.exit(f"vs_tinygrad: tinygrad is not installed ({e}); pip install tinygrad (see the docstring)")
    import fnarray as fa
    import fnarray.numpy as fnp

    cases = _cases(args.device, fa, fnp, Tensor, TinyJit)
    load0 = os.getloadavg()
    print(f"fnarray {args.device} vs tinygrad DEV={os.environ['DEV']}; {args.repeat} repeats of best-of-"
          f"{args.number}, alternating; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print(f"fnarray's platform: {_platform(fa, args.device)}; tinygrad's: {_tinygrad_platform()}\n")
    print("| case | fnarray (ms) | tinygrad (ms) | ratio fnarray/tinygrad (median, range) |")
    print("|---|---|---|---|")
    for name, (ours, theirs, check) in cases.items():
        if args.only and args.only not in name:
            continue
        if check is not None:
            check()
        pairs = [_best((ours, theirs), args.number) for _ in range(args.repeat)]
        ratios = [o / t for o, t in pairs]
        o_ms = statistics.median(o for o, _ in pairs) * 1e3
        t_ms = statistics.median(t for _, t in pairs) * 1e3
        print(f"| {name} | {o_ms:.2f} | {t_ms:.2f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |", flush=True)
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
