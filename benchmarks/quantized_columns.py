"""``quantized_matmul(..., transpose=False)`` (``x @ W``) with many rows: the tiled form against the matrix-vector
form it had before, and against float32's matmul, on the kernel backends.

``transpose=False`` is the gradient of a quantized layer with respect to its input (and ``x @ W`` with weights
quantized along their output axis). Per device, in one interleaved run (``benchmarks/quantized.py``'s timer: best
wall and process-CPU seconds of ``--number`` alternating calls, the result read back each call): ``x @ W`` with
``W`` float32 (``dot_general``'s kernels), ``fa.quantized_matmul(transpose=False)`` as it is (the tiled form above 4
rows: ``rm x rn`` outputs per work item, each weight dequantized once per ``rm`` rows; ``groups/quantized.py``'s
``_tiled_columns``) and the same product compiled with the tiled form off (the matrix-vector form: one output
column per work item for 4 rows, the element's bit offset a run-time shift). Ratios above 1: the tiled form faster.

    PYTHONPATH=. python benchmarks/quantized_columns.py [--size 1024] [--rows 64,256] [--devices opencl:0,webgpu:0]

The load average is printed first (``uptime``): compare runs at similar loads (docs/traps.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import available_devices, best_of, load_line  # noqa: E402

import numpy as np  # noqa: E402


@contextlib.contextmanager
def _matrix_vector_form():
    """Kernels scheduled meanwhile take the matrix-vector form for any number of rows (the form before)."""
    from fnarray.lowering.kernels.groups import quantized
    saved = quantized.tiled
    quantized.tiled = lambda m, caps: False
    try:
        yield
    finally:
        quantized.tiled = saved


def _calls(fa, dev, n, rows, bits, group_size):
    """``(float32, tiled, matrix-vector)`` zero-argument calls (each compiled here) and the tiled form's largest
    difference from the matrix-vector form's, relative to the result's magnitude."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = fa.device_put(rng.standard_normal((rows, n)).astype(np.float32), dev)
    wd = fa.device_put(w, dev)
    packed = [fa.device_put(np.asarray(a), dev) for a in fa.quantize(w, group_size=group_size, bits=bits)]
    f32 = fa.jit(lambda x, w: x @ w)

    def product(x, wq, s, b):
        return fa.quantized_matmul(x, wq, s, b, transpose=False, group_size=group_size, bits=bits)

    tiled, matvec = fa.jit(product), fa.jit(lambda *a: product(*a))
    got = np.asarray(tiled(x, *packed))
    with _matrix_vector_form():
        before = np.asarray(matvec(x, *packed))   # compiled now, with the tiled form off
    diff = float(np.abs(got - before).max() / np.abs(before).max())
    return (lambda: np.asarray(f32(x, wd)), lambda: np.asarray(tiled(x, *packed)),
            lambda: np.asarray(matvec(x, *packed))), diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--number", type=int, default=7)
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--rows", default="64,256")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    args = ap.parse_args(argv)
    import fnarray as fa
    print(load_line())
    print(f"x @ W, {args.size} x {args.size}, {args.bits}-bit group {args.group_size}; best of {args.number}")
    print(f"{'device':10} {'rows':>4} {'float32 ms':>10} {'tiled ms':>9} {'mat-vec ms':>10} {'mv/tiled':>8} "
          f"{'f32/tiled':>9} {'cpu mv/tiled':>12} {'diff':>8}")
    for name, dev in available_devices(fa, args.devices):
        for rows in (int(r) for r in args.rows.split(",")):
            fns, diff = _calls(fa, dev, args.size, rows, args.bits, args.group_size)
            (t32, tt, tm), (_, ct, cm) = best_of(fns, args.number)
            print(f"{name:10} {rows:4d} {t32 * 1e3:10.2f} {tt * 1e3:9.2f} {tm * 1e3:10.2f} {tm / tt:8.2f} "
                  f"{t32 / tt:9.2f} {cm / ct:12.2f} {diff:8.1e}", flush=True)


if __name__ == "__main__":
    main()
