"""4-bit quantized against float32 matrix-vector products (a decode step's layer) on the kernel backends.

Decoding a language model multiplies one row (up to a few) by every weight matrix: the time is the time to read
the weights, and 4-bit weights (MLX's affine format, group size 64) are 6.4x fewer bytes than float32. Per
device, in one interleaved run: ``x @ W.T`` with ``W`` float32 (``dot_general``'s kernels) against
``fa.quantized_matmul`` on the packed words (``kernels/groups/quantized.py``), for 1 and 4 rows; the ratio is
float32 time / 4-bit time (above 1: 4-bit is faster), in wall time and in process CPU time. Both jitted,
warmed, best of N alternating calls, with the result read back each call (so the time includes one transfer
of the small result).

    PYTHONPATH=. python benchmarks/quantized.py [--size 4096] [--number 10] [--devices opencl:0,webgpu:0] [--rows 1,4]
        [--mode affine|mxfp4|float8_e4m3fn|float8_e5m2]

``--mode`` picks the low-bit weights: MLX's affine 4-bit (the default), ``mxfp4`` (group size 32, E8M0 scales), or
float8 weights upcast in the product, ``x @ w8.astype(float32).T`` (one byte an element; the product's loads convert
the bytes in registers: ``kernels/groups/dot.py``'s word form; "4-bit" columns are then float8's, the error the
kernel's against float64 on the same weights). For PoCL 3.1: ``sh benchmarks/pocl31.sh /work/pocl31 run python
benchmarks/quantized.py --devices opencl:0``.

With ``--rows 64,256 --size 1024`` it times prefill-sized products, where the kernels take their tiled form
(``kernels/groups/quantized.py``) against float32's register-tiled (PoCL) or local-memory (lavapipe) matmul.

``--bits`` picks the affine width (2, 3, 4, 5, 6, 8; group size 64). ``--before`` adds, interleaved, the matrix-vector
form of before the eleventh session (``quantized.WIDE`` off: one output column per work item, each recomputing its
group's ``sum(x)``; PoCL keeps it for one row of fewer than 1024 columns anyway) as a "before" column, the ratio
float32 / before beside the others.

``--size`` defaults to 4096 on opencl and 2048 on webgpu (Mesa lavapipe is a slow CPU rasteriser); the load
average is printed first (``uptime``): compare runs at similar loads.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import available_devices, best_of, load_line  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402



def _cases(fa, dev, n, rows, bits=4, group_size=64, mode="affine", columns=False, before=False):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    wd, xd = fa.device_put(w, dev), fa.device_put(x, dev)
    if mode.startswith("float8"):
        return _float8_cases(fa, dev, (x, xd, w, wd), np.dtype(getattr(ml_dtypes, mode)), columns)
    if mode == "mxfp4":
        group_size = 32
    packed = [fa.device_put(np.asarray(a), dev) for a in fa.quantize(w, group_size=group_size, bits=bits, mode=mode)]
    f32 = fa.jit(lambda x, w: x @ w.T)
    q4 = fa.jit(lambda x, *p: fa.quantized_matmul(x, *p, group_size=group_size, bits=bits, mode=mode))
    ref = x @ w.T
    got = np.asarray(q4(xd, *packed))
    err = np.abs(got - ref).max() / np.abs(ref).max()   # quantization error, not a kernel error
    fns = (lambda: np.asarray(f32(xd, wd)), lambda: np.asarray(q4(xd, *packed)))
    if before:
        from fnarray.lowering.kernels.groups import quantized as Q
        old = fa.jit(lambda x, *p: fa.quantized_matmul(x, *p, group_size=group_size, bits=bits, mode=mode))
        Q.WIDE = False
        try:
            np.asarray(old(xd, *packed))   # compiled now, in the form of before
        finally:
            Q.WIDE = True
        fns += (lambda: np.asarray(old(xd, *packed)),)
    return fns, err


def _float8_cases(fa, dev, arrays, dtype, columns):
    """``x @ w.T`` float32 against ``x @ w8.astype(float32).T`` on the float8 bytes ``w8`` (``columns``: ``x @ w``
    against ``x @ w8.astype(float32)``); the error is the kernel's (against float64 on the same float8 weights)."""
    x, xd, w, wd = arrays
    w8 = w.astype(dtype)
    w8d = fa.device_put(w8, dev)
    if columns:
        f32, f8 = fa.jit(lambda x, w: x @ w), fa.jit(lambda x, w: x @ w.astype(np.float32))
        w8 = w8.T
    else:
        f32, f8 = fa.jit(lambda x, w: x @ w.T), fa.jit(lambda x, w: x @ w.astype(np.float32).T)
    ref = x.astype(np.float64) @ w8.astype(np.float64).T
    err = np.abs(np.asarray(f8(xd, w8d)) - ref).max() / np.abs(ref).max()
    return (lambda: np.asarray(f32(xd, wd)), lambda: np.asarray(f8(xd, w8d))), err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--rows", default="1,4", help="rows of x, comma-separated (prefill: --rows 64,256 --size 1024)")
    ap.add_argument("--mode", default="affine", choices=("affine", "mxfp4", "float8_e4m3fn", "float8_e5m2"),
                    help="the low-bit weights: MLX's affine 4-bit (group size 64), mxfp4 (group size 32, E8M0 "
                         "scales) or float8 upcast in the product")
    ap.add_argument("--columns", action="store_true",
                    help="with a float8 mode: x @ w (the bytes along the output axis) instead of x @ w.T")
    ap.add_argument("--bits", type=int, default=4, help="affine bits (2, 3, 4, 5, 6, 8)")
    ap.add_argument("--before", action="store_true",
                    help="also time the one-column matrix-vector form of before (affine, interleaved)")
    args = ap.parse_args(argv)
    import fnarray as fa
    print(load_line())
    extra = f" {'before ms':>9} {'ratio':>6} {'cpu bef':>7} {'ratio':>6}" if args.before else ""
    print(f"{'device':10} {'size':>6} {'rows':>4} {'float32 ms':>11} {'4-bit ms':>9} {'ratio':>6} "
          f"{'cpu f32':>8} {'cpu 4b':>7} {'ratio':>6} {'rel. err':>9}" + extra)
    for name, dev in available_devices(fa, args.devices):
        n = args.size or (2048 if dev.backend == "webgpu" else 4096)
        for rows in (int(r) for r in args.rows.split(",")):
            fns, err = _cases(fa, dev, n, rows, bits=args.bits, mode=args.mode, columns=args.columns,
                              before=args.before)
            wall, cpu = best_of(fns, args.number)
            (t32, t4), (c32, c4) = wall[:2], cpu[:2]
            more = (f" {wall[2] * 1e3:9.2f} {t32 / wall[2]:6.2f} {cpu[2] * 1e3:7.2f} {c32 / cpu[2]:6.2f}"
                    if args.before else "")
            print(f"{name:10} {n:6d} {rows:4d} {t32 * 1e3:11.2f} {t4 * 1e3:9.2f} {t32 / t4:6.2f} "
                  f"{c32 * 1e3:8.2f} {c4 * 1e3:7.2f} {c32 / c4:6.2f} {err:9.1e}" + more, flush=True)


if __name__ == "__main__":
    main()
