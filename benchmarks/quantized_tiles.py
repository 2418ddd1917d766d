"""The tiled (prefill) ``quantized_matmul`` kernels per mode against numpy:0's reference and float32's matmul.

``x @ W.T`` with ``x`` ``(rows, n)`` and ``W`` ``(n, n)`` quantized as affine 4-bit (group 32), mxfp4, mxfp8 and
nvfp4 (``fnarray.core.quantized``), more than 4 rows, so opencl and webgpu take the tiled form
(``kernels/groups/quantized.py``: a copy kernel lays the words out in panels, a work item computes a tile of rows
x columns). Per device, one interleaved run (best of ``--number`` alternating calls, jitted, warmed, the result
read back each call) of: float32 ``x @ W.T`` on the device, each mode on numpy:0 (what a fallback runs: the
reference dequantizes blocks of weight rows and calls BLAS) and each mode on the device with
``fallback="error"``. With ``--before`` each floating mode is also compiled in the same process as before the
tenth session ("old": ``quantized.FLOAT_PANELS`` off, the panels hold the packed codes, decoded per element in
the product kernel; ``x @ W`` with the 3 x 16 tile it had, ``DEFAULT_TILE``, instead of ``COLUMNS_TILE``), so before
and after are interleaved too. Times
are process CPU ms (steadier than wall time on a loaded machine, docs/traps.md); the load average is printed
first.

    PYTHONPATH=. python benchmarks/quantized_tiles.py [--size 1024] [--rows 256] [--number 7]
        [--devices opencl:0,webgpu:0] [--modes affine,mxfp4,mxfp8,nvfp4] [--before] [--columns]

``--columns`` times ``x @ W`` (``transpose=False``, the ``_tiled_columns`` form, which reads the words in place).

For PoCL 3.1: ``sh benchmarks/pocl31.sh /work/pocl31 run python benchmarks/quantized_tiles.py --devices opencl:0``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import best_of, load_line  # noqa: E402

import numpy as np  # noqa: E402


def _product(fa, dev, x, parts, mode, opts):
    """A zero-argument call of a freshly jitted ``quantized_matmul`` on ``dev`` (compiled at its first call)."""
    q = fa.jit(functools.partial(fa.quantized_matmul, mode=mode, **opts))
    args = [fa.device_put(a, dev) for a in (x, *parts)]
    return functools.partial(lambda q, args: np.asarray(q(*args)), q, args)


def _driver(dev):
    """The OpenCL platform's version (PoCL 3.0 or 3.1); empty for other devices."""
    return dev.impl.state(dev).cl_device.platform.version if dev.backend == "opencl" else ""


def _calls(fa, dev, n, rows, modes, before, columns=False):
    """``(label, call, relative error against float32)`` per column (``columns``: ``x @ W``, ``transpose=False``)."""
    from fnarray.lowering.kernels.groups import quantized as Q
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    ref = x @ (w if columns else w.T)
    f32 = fa.jit(lambda x, w: x @ (w if columns else w.T))
    xd, wd = fa.device_put(x, dev), fa.device_put(w, dev)
    cols = [("float32", lambda: np.asarray(f32(xd, wd)))]
    cpu = fa.devices("numpy")[0]
    for mode in modes:
        opts = dict(group_size=32, bits=4) if mode == "affine" else {}
        parts = [np.asarray(a) for a in fa.quantize(w, mode=mode, **opts)]
        opts["transpose"] = not columns
        cols.append((f"{mode} np", _product(fa, cpu, x, parts, mode, opts)))
        if before:
            columns_tile = dict(Q.COLUMNS_TILE)
            Q.FLOAT_PANELS = False
            Q.COLUMNS_TILE.update(Q.DEFAULT_TILE)
            try:
                call = _product(fa, dev, x, parts, mode, opts)
                call()   # compiled now, with the codes in the panels and x @ W's tile of before
            finally:
                Q.FLOAT_PANELS = True
                Q.COLUMNS_TILE.update(columns_tile)
            cols.append((f"{mode} old", call))
        cols.append((mode, _product(fa, dev, x, parts, mode, opts)))
    out = []
    for label, call in cols:
        out.append((label, call, np.abs(call() - ref).max() / np.abs(ref).max()))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rows", default="256")
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--modes", default="affine,mxfp4,mxfp8,nvfp4")
    ap.add_argument("--before", action="store_true")
    ap.add_argument("--columns", action="store_true", help="x @ W (transpose=False: the _tiled_columns form)")
    args = ap.parse_args(argv)
    import fnarray as fa
    print(load_line())
    fa.config.fallback = "error"   # each product on its device's own kernels, or an error
    known = {str(d): d for d in fa.devices(all_backends=True)}
    for name in args.devices.split(","):
        dev = known[name]
        print(name, _driver(dev))
        for rows in (int(r) for r in args.rows.split(",")):
            cols = _calls(fa, dev, args.size, rows, args.modes.split(","), args.before, args.columns)
            _, cpu = best_of([c for _, c, _ in cols], args.number)
            form = "x @ W" if args.columns else "x @ W.T"
            print(f"  {args.size} x {args.size}, {rows} rows, {form}, process CPU ms (relative error vs float32):")
            for (label, _, err), t in zip(cols, cpu, strict=True):
                print(f"    {label:12} {t * 1e3:8.2f}   {err:.4f}")
    print(load_line())


if __name__ == "__main__":
    main()
