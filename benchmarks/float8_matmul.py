"""Float8 weights against float32 weights in a matrix product (a decode step's layer) on the kernel backends.

``x @ w.astype(float32).T`` with ``w`` float8 (``float8_e4m3fn`` by default: one byte an element, held as bytes on
opencl and webgpu) against ``x @ w.T`` with ``w`` float32, in one interleaved run per device and row count. The
kernels read the float8 bytes in the product's operand loads and convert them in registers (``groups/dot.py``'s
``operand_view``), so the float32 weights are never written: a quarter of the bytes to read. The ratio is float32
time / float8 time (above 1: float8 is faster), in wall time and in process CPU time; both jitted, warmed, best of N
alternating calls, the result read back each call.

    PYTHONPATH=. python benchmarks/float8_matmul.py [--size 4096] [--number 10] [--devices opencl:0,webgpu:0]
        [--rows 1,4] [--dtype float8_e4m3fn]

``--size`` defaults to 4096 on opencl and 2048 on webgpu (lavapipe is a slow CPU rasteriser); the load average is
printed first (``uptime``): compare runs at similar loads. For PoCL 3.1: ``sh benchmarks/pocl31.sh /work/pocl31 run
python benchmarks/float8_matmul.py --devices opencl:0``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import best_of  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402


def _cases(fa, dev, n, rows, dtype):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    w8 = w.astype(dtype)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    wd, w8d, xd = fa.device_put(w, dev), fa.device_put(w8, dev), fa.device_put(x, dev)
    f32 = fa.jit(lambda x, w: x @ w.T)
    f8 = fa.jit(lambda x, w: x @ w.astype(np.float32).T)
    ref = x.astype(np.float64) @ w8.astype(np.float64).T
    err = np.abs(np.asarray(f8(xd, w8d)) - ref).max() / np.abs(ref).max()   # a kernel error: same weights
    return (lambda: np.asarray(f32(xd, wd)), lambda: np.asarray(f8(xd, w8d))), err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--rows", default="1,4", help="rows of x, comma-separated")
    ap.add_argument("--dtype", default="float8_e4m3fn", choices=("float8_e4m3fn", "float8_e5m2"))
    args = ap.parse_args(argv)
    import fnarray as fa
    dtype = np.dtype(getattr(ml_dtypes, args.dtype))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"{'device':10} {'size':>6} {'rows':>4} {'float32 ms':>11} {'float8 ms':>10} {'ratio':>6} "
          f"{'cpu f32':>8} {'cpu f8':>7} {'ratio':>6} {'rel. err':>9}")
    for name in args.devices.split(","):
        try:
            dev = fa.get_device(name)
        except Exception as e:  # a device this machine lacks: say so and go on
            print(f"{name:10} unavailable: {e}")
            continue
        n = args.size or (2048 if dev.backend == "webgpu" else 4096)
        for rows in (int(r) for r in args.rows.split(",")):
            fns, err = _cases(fa, dev, n, rows, dtype)
            (t32, t8), (c32, c8) = best_of(fns, args.number)
            print(f"{name:10} {n:6d} {rows:4d} {t32 * 1e3:11.2f} {t8 * 1e3:10.2f} {t32 / t8:6.2f} "
                  f"{c32 * 1e3:8.2f} {c8 * 1e3:7.2f} {c32 / c8:6.2f} {err:9.1e}", flush=True)


if __name__ == "__main__":
    main()
