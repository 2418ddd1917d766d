"""Float32 math maps on opencl:0 with and without the call-free forms, against NumPy and tinygrad.

Each case is ``y = f(x)`` over 4M float32 (``x`` standard normal times 3; ``sqrt``/``rsqrt``/``log1p`` of
``|x|``), jitted. "before" switches the OpenCL renderer's call-free forms of this change off in the same process
(``opencl_math.HELPERS`` without floor/ceil/rint/sin/cos/expm1/log1p/erf/pow, ``opencl_math.BUILTINS`` empty:
PoCL's library calls), which compiles other kernel sources; the map kernel's form (values computed once, stores
under the work-group branch) is the same on both sides. tinygrad (``DEV=CL``, ``TinyJit``) runs in the same
process on the same PoCL where it has the op (see ``vs_tinygrad.py`` for the setup; skipped if it is not
installed). Every side of a case is timed alternately, best of ``--number`` calls, ``--repeat`` times;
printed: the median best (ms) and the ratios after / before, after / NumPy and after / tinygrad (< 1:
fnarray's form is faster), and the load average. Asserts nothing.

Usage: python benchmarks/opencl_math.py [--device opencl:0] [--repeat 3] [--number 7] [--only NAME]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import vs_tinygrad


def _cases(fa, fnp):
    """``name -> (fnarray function, NumPy function, tinygrad function or None, input transform)``."""
    pos = np.abs
    return {
        "floor": (fnp.floor, np.floor, lambda t: t.floor(), None),
        "ceil": (fnp.ceil, np.ceil, lambda t: t.ceil(), None),
        "round (half to even)": (fnp.round, np.round, lambda t: t.round(), None),
        "trunc": (fnp.trunc, np.trunc, lambda t: t.trunc(), None),
        "sqrt": (fnp.sqrt, np.sqrt, lambda t: t.sqrt(), pos),
        "rsqrt": (fa.lax.rsqrt, lambda v: 1 / np.sqrt(v), lambda t: t.rsqrt(), pos),
        "sin": (fnp.sin, np.sin, lambda t: t.sin(), None),
        "cos": (fnp.cos, np.cos, lambda t: t.cos(), None),
        "sigmoid": (fa.nn.sigmoid, lambda v: 1 / (1 + np.exp(-v)), lambda t: t.sigmoid(), None),
        "log1p": (fnp.log1p, np.log1p, None, pos),
        "expm1": (fnp.expm1, np.expm1, None, None),
        "erf": (fa.lax.erf, None, lambda t: t.erf(), None),
        "pow(|x|, 1.7)": (lambda v: fnp.power(v, 1.7), lambda v: np.power(v, np.float32(1.7)),
                          lambda t: t.pow(1.7), pos),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--only", default=None)
    args = ap.parse_args(argv)
    vs_tinygrad._point_tinygrad_at_pyopencl_pocl()
    os.environ.setdefault("DEV", "CL")
    try:
        from tinygrad import Tensor, TinyJit
    except ImportError:
        Tensor = TinyJit = None
    import fnarray as fa
    import fnarray.numpy as fnp
    C = importlib.import_module("fnarray.lowering.kernels.opencl_math")
    new = ("floor", "ceil", "rint", "sin", "cos", "expm1", "log1p", "erf", "pow")
    new_helpers = {k: C.HELPERS.pop(k) for k in new if k in C.HELPERS}
    new_builtins = dict(C.BUILTINS)
    dev = fa.devices(args.device.split(":")[0])[int(args.device.split(":")[1])]
    x0 = (np.random.default_rng(0).standard_normal(1 << 22) * 3).astype(np.float32)
    rows = []
    load0 = os.getloadavg()
    for name, (f, ref, tg, prep) in _cases(fa, fnp).items():
        if args.only and args.only not in name:
            continue
        x = prep(x0) if prep is not None else x0
        xd = fa.device_put(fnp.asarray(x), dev)
        before = fa.jit(lambda v, f=f: f(v))
        C.BUILTINS.clear()
        try:
            want = np.asarray(before(xd))
        finally:
            C.BUILTINS.update(new_builtins)
        C.HELPERS.update(new_helpers)
        after = fa.jit(lambda v, f=f: f(v))
        got = np.asarray(after(xd))
        for k in new_helpers:
            C.HELPERS.pop(k)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
        fns = [lambda: after(xd).block_until_ready(), lambda: before(xd).block_until_ready()]
        fns.append((lambda: ref(x)) if ref is not None else (lambda: None))
        if tg is not None and Tensor is not None:
            tx = Tensor(x).realize()
            g = TinyJit(lambda t, tg=tg: tg(t).realize())
            fns.append(lambda: vs_tinygrad._sync(g(tx)))
        reps = [vs_tinygrad._best(fns, args.number) for _ in range(args.repeat)]
        med = [statistics.median(r[k] for r in reps) * 1e3 for k in range(len(fns))]
        rows.append((name, med, ref is not None, len(fns) == 4))
    C.HELPERS.update(new_helpers)
    load1 = os.getloadavg()
    print(f"4M float32 maps on {args.device}, {args.repeat} repeats of best-of-{args.number}, alternating; load "
          f"average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} -> {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}\n")
    print("| function | after (ms) | before (ms) | NumPy (ms) | tinygrad (ms) | after / before | after / NumPy | "
          "after / tinygrad |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, med, has_np, has_tg in rows:
        np_ms = f"{med[2]:.2f}" if has_np else "-"
        tg_ms = f"{med[3]:.2f}" if has_tg else "-"
        print(f"| {name} | {med[0]:.2f} | {med[1]:.2f} | {np_ms} | {tg_ms} | {med[0] / med[1]:.2f} | "
              f"{(med[0] / med[2]) if has_np else float('nan'):.2f} | "
              f"{(med[0] / med[3]) if has_tg else float('nan'):.2f} |", flush=True)


if __name__ == "__main__":
    main()
