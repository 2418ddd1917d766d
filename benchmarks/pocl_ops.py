"""One-op float32 kernels on opencl:0: fnarray's generated kernel, the same with the driver's built-ins, by hand.

Made to find which operations the generated OpenCL loses on a given PoCL (issue 28: on Debian's PoCL 3.1 the
chain ``tanh(a*x+b)*x+1`` took 16.5 ms against a hand-written kernel's 5.6 ms, where on PyOpenCL's PoCL 3.0
ours is 10x faster than the hand-written one). Each case is ``y = f(x)`` over 4M float32 (``x`` standard
normal times 3; ``|x|`` where the function needs it), and three kernels compute it:

- ``ours``: ``fa.jit(f)`` as fnarray generates it today (the call-free helpers of
  ``fnarray/lowering/kernels/opencl_c.py``: ``_HELPERS`` and ``_BUILTINS``);
- ``ours, built-in``: the same jitted map with that case's helpers and builtin spellings removed while it is
  traced and compiled, so the kernel calls the driver's OpenCL C function (``tanh(x)``, ``sqrt(x)``...);
- ``hand``: a hand-written PyOpenCL kernel ``if (i < n) y[i] = EXPR;`` with the driver's function, 64
  work items a group (the form of ``opencl_vs_raw.py``'s reference kernels).

Timed alternately, best of ``--number`` calls, ``--repeat`` times; printed: the median best (ms) and ours / hand,
built-in / hand (> 1: slower than the hand-written kernel), the platform (PoCL version) and the load average.
Run it once per PoCL (``sh benchmarks/pocl31.sh /work/pocl31 run python benchmarks/pocl_ops.py`` for 3.1).
Asserts nothing but that the three agree to float32 tolerance.

``--forms NAME`` (a case name: ``tanh``, ``log``, ``tanh(a*x+b)*x+1``...) instead times kernel *forms* of that
case with raw PyOpenCL on every OpenCL platform the process sees, alternating platforms and forms (under
``pocl31.sh ... run`` both PoCLs are listed, so 3.0 and 3.1 share one run's load): the source fnarray
generates (its map form: values computed once, stores under the work-group-uniform branch), that form with
the driver's built-in, and the plain ``if (i < n) y[i] = ...`` kernel with fnarray's helper, with the built-in,
and with no bounds test at all. That tells the helper's code from the kernel's shape.

Usage: python benchmarks/pocl_ops.py [--device opencl:0] [--repeat 3] [--number 7] [--only NAME] [--forms NAME]
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
    """``name -> (fnarray function of (x, a, b), hand OpenCL expression of x/a/b, helper keys, prep)``."""
    pos = np.abs
    return {
        "x*2+1 (memory floor)": (lambda x, a, b: x * 2 + 1, "x * 2.0f + 1.0f", (), None),
        "tanh": (lambda x, a, b: fnp.tanh(x), "tanh(x)", ("tanh",), None),
        "exp": (lambda x, a, b: fnp.exp(x), "exp(x)", ("exp",), None),
        "log": (lambda x, a, b: fnp.log(x), "log(x)", ("log",), pos),
        "sin": (lambda x, a, b: fnp.sin(x), "sin(x)", ("sin",), None),
        "cos": (lambda x, a, b: fnp.cos(x), "cos(x)", ("cos",), None),
        "sqrt": (lambda x, a, b: fnp.sqrt(x), "sqrt(x)", ("sqrt",), pos),
        "rsqrt": (lambda x, a, b: fa.lax.rsqrt(x), "rsqrt(x)", ("rsqrt",), pos),
        "floor": (lambda x, a, b: fnp.floor(x), "floor(x)", ("floor",), None),
        "ceil": (lambda x, a, b: fnp.ceil(x), "ceil(x)", ("ceil",), None),
        "round (rint)": (lambda x, a, b: fnp.round(x), "rint(x)", ("rint",), None),
        "abs": (lambda x, a, b: fnp.abs(x), "fabs(x)", (), None),
        "sigmoid": (lambda x, a, b: fa.nn.sigmoid(x), "1.0f / (1.0f + exp(-x))", ("exp",), None),
        "expm1": (lambda x, a, b: fnp.expm1(x), "expm1(x)", ("expm1",), None),
        "log1p": (lambda x, a, b: fnp.log1p(x), "log1p(x)", ("log1p",), pos),
        "erf": (lambda x, a, b: fa.lax.erf(x), "erf(x)", ("erf",), None),
        "pow(|x|, 1.7)": (lambda x, a, b: fnp.power(x, 1.7), "pow(x, 1.7f)", ("pow",), pos),
        "tanh(a*x+b)*x+1": (lambda x, a, b: fnp.tanh(a * x + b) * x + 1.0, "tanh(a * x + b) * x + 1.0f",
                            ("tanh",), None),
        "a*x+b, then *x+1 (no tanh)": (lambda x, a, b: (a * x + b) * x + 1.0, "(a * x + b) * x + 1.0f", (),
                                       None),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--only", default=None)
    ap.add_argument("--forms", default=None, help="time kernel forms of this case on every OpenCL platform")
    args = ap.parse_args(argv)
    if args.forms:
        return forms(args)
    import pyopencl as cl

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.devices.placement import parse_device
    C = importlib.import_module("fnarray.lowering.kernels.opencl_c")
    dev = parse_device(args.device)
    state = dev.impl.state(dev)
    ctx, queue = state.context, state.queue
    n, wg = 1 << 22, 64
    rng = np.random.default_rng(0)
    x0 = (rng.standard_normal(n) * 3).astype(np.float32)
    a0, b0 = rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
    mf = cl.mem_flags
    load0 = os.getloadavg()
    rows = []
    for name, (f, expr, keys, prep) in _cases(fa, fnp).items():
        if args.only and args.only not in name:
            continue
        x = prep(x0) if prep is not None else x0
        xd, ad, bd = (fa.device_put(fnp.asarray(v), dev) for v in (x, a0, b0))
        ours = fa.jit(lambda x, a, b, f=f: f(x, a, b))
        got = np.asarray(ours(xd, ad, bd))
        saved_h = {k: C._HELPERS.pop(k) for k in keys if k in C._HELPERS}
        saved_b = {k: C._BUILTINS.pop(k) for k in list(C._BUILTINS) if k[0] in keys}
        try:
            plain = fa.jit(lambda x, a, b, f=f: f(x, a, b))
            got_plain = np.asarray(plain(xd, ad, bd))
        finally:
            C._HELPERS.update(saved_h)
            C._BUILTINS.update(saved_b)
        src = ("__kernel void k(__global const float* xs, __global const float* as, __global const float* bs,"
               " __global float* y, const int n) { int i = get_global_id(0);"
               f" if (i < n) {{ float x = xs[i], a = as[i], b = bs[i]; y[i] = {expr}; }} }}")
        knl = cl.Kernel(cl.Program(ctx, src).build(), "k")
        bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=v) for v in (x, a0, b0)]
        out = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * n)

        def hand():
            knl(queue, (n,), (wg,), *bufs, out, np.int32(n))
            state.finish()   # (fnarray's held eager launches let go too: opencl backend.py, hold)
        hand()
        got_hand = np.empty(n, np.float32)
        cl.enqueue_copy(queue, got_hand, out)
        for other in (got_plain, got_hand):
            np.testing.assert_allclose(got, other, rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=name)
        fns = [lambda: ours(xd, ad, bd).block_until_ready(), lambda: plain(xd, ad, bd).block_until_ready(), hand]
        reps = [vs_tinygrad._best(fns, args.number) for _ in range(args.repeat)]
        med = [statistics.median(r[k] for r in reps) * 1e3 for k in range(3)]
        rows.append((name, med, bool(keys)))
    load1 = os.getloadavg()
    print(f"4M float32 maps on {args.device}: {ctx.devices[0].platform.version}; {args.repeat} repeats of best-of-"
          f"{args.number}, alternating; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} -> "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}\n")
    print("| function | ours (ms) | ours, built-in (ms) | hand, built-in (ms) | ours / hand | built-in / hand |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, med, switched in rows:
        b_ms, b_ratio = (f"{med[1]:.2f}", f"{med[1] / med[2]:.2f}") if switched else ("=", "-")
        print(f"| {name} | {med[0]:.2f} | {b_ms} | {med[2]:.2f} | {med[0] / med[2]:.2f} | {b_ratio} |", flush=True)


def _generated(fa, fnp, C, f, keys, xs, builtin):
    """fnarray's OpenCL source for ``f`` on ``xs`` (helpers and builtin spellings of ``keys`` off if ``builtin``)."""
    saved_h = {k: C._HELPERS.pop(k) for k in keys if k in C._HELPERS} if builtin else {}
    saved_b = {k: C._BUILTINS.pop(k) for k in list(C._BUILTINS) if k[0] in keys} if builtin else {}
    try:
        jf = fa.jit(lambda x, a, b: f(x, a, b))
        jf(*xs)
        text = jf.lower(*xs).as_text()
    finally:
        C._HELPERS.update(saved_h)
        C._BUILTINS.update(saved_b)
    src = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    assert src.count("__kernel void ") == 1, f"expected one kernel:\n{text}"
    name = src.split("__kernel void ")[1].split("(")[0]
    params = src.split("__kernel void ")[1].split(")")[0]
    return src, name, params


def forms(args):
    """The ``--forms`` table: see the module docstring."""
    import pyopencl as cl

    import fnarray as fa
    import fnarray.numpy as fnp
    C = importlib.import_module("fnarray.lowering.kernels.opencl_c")
    f, expr, keys, prep = _cases(fa, fnp)[args.forms]
    n, wg = 1 << 22, 64
    rng = np.random.default_rng(0)
    x0 = (rng.standard_normal(n) * 3).astype(np.float32)
    x = prep(x0) if prep is not None else x0
    a0, b0 = rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)
    host = {"x": x, "a": a0, "b": b0}
    xs = [fa.device_put(fnp.asarray(v), "opencl:0") for v in (x, a0, b0)]
    gen, gen_name, gen_params = _generated(fa, fnp, C, f, keys, xs, False)
    gen_b, gen_b_name, _ = _generated(fa, fnp, C, f, keys, xs, True)
    # the generated kernel takes (n, its inputs, out); for timing, which input is which does not matter
    ins = [p.split("*")[-1].strip() for p in gen_params.split(",") if "const float*" in p]
    order = ["x", "a", "b"] if len(ins) == 3 else ["x"]
    helpers = "".join(C._HELPERS[k][1] + "\n" for k in keys if k in C._HELPERS)
    helper_expr = expr
    for k in keys:
        if k in C._HELPERS:
            helper_expr = helper_expr.replace(f"{k}(", f"{C._HELPERS[k][0]}(")
    plain = ("__kernel void k(__global const float* xs, __global const float* as, __global const float* bs, "
             "__global float* y, const int n) {{ int i = get_global_id(0); {guard} "
             "{{ float x = xs[i], a = as[i], b = bs[i]; y[i] = {e}; }} }}")
    variants = [("generated (ours)", gen, gen_name, "gen"),
                ("generated form, built-in", gen_b, gen_b_name, "gen"),
                ("if (i < n), helper", helpers + plain.format(guard="if (i < n)", e=helper_expr), "k", "plain"),
                ("if (i < n), built-in", plain.format(guard="if (i < n)", e=expr), "k", "plain"),
                ("no bounds test, helper", helpers + plain.format(guard="", e=helper_expr), "k", "plain"),
                ("no bounds test, built-in", plain.format(guard="", e=expr), "k", "plain")]
    if not any(k in C._HELPERS for k in keys):   # no helper: the built-in rows are the only ones
        variants = [v for v in variants if "helper" not in v[0] and v[0] != "generated form, built-in"]
    mf = cl.mem_flags
    runs, names, plats = [], [], []
    for platform in cl.get_platforms():
        dev = platform.get_devices()[0]
        ctx = cl.Context([dev])
        queue = cl.CommandQueue(ctx)
        bufs = {k: cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=v) for k, v in host.items()}
        out = cl.Buffer(ctx, mf.WRITE_ONLY, 4 * n)
        plats.append(platform.version.split("  ")[0].replace("OpenCL 3.0 ", ""))
        for label, src, kname, kind in variants:
            knl = cl.Kernel(cl.Program(ctx, src).build(), kname)
            if kind == "gen":
                call_args = (np.int32(n), *[bufs[v] for v in order], out)
            else:
                call_args = (bufs["x"], bufs["a"], bufs["b"], out, np.int32(n))

            def run(knl=knl, call_args=call_args, queue=queue):
                knl(queue, (n,), (wg,), *call_args)
                queue.finish()
            runs.append(run)
            names.append((plats[-1], label))
    load0 = os.getloadavg()
    reps = [vs_tinygrad._best(runs, args.number) for _ in range(args.repeat)]
    med = [statistics.median(r[k] for r in reps) * 1e3 for k in range(len(runs))]
    load1 = os.getloadavg()
    print(f"kernel forms of {args.forms} over 4M float32, every platform, {args.repeat} repeats of best-of-"
          f"{args.number}, alternating; load average {load0[0]:.2f} -> {load1[0]:.2f}\n")
    print("| form | " + " | ".join(f"{p} (ms)" for p in plats) + " |")
    print("|---|" + "---:|" * len(plats))
    per = len(variants)
    for j, (label, *_) in enumerate(variants):
        print(f"| {label} | " + " | ".join(f"{med[i * per + j]:.2f}" for i in range(len(plats))) + " |")


if __name__ == "__main__":
    main()
