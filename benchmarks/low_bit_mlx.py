"""Low-bit dtypes on mlx:0 against ``ml_dtypes``' own NumPy ufuncs in the same run: float8 and int4 arithmetic,
a sum and a product under ``jit`` (on mlx by upcasting in the program since the fourteenth session; before it,
through the numpy fallback: run this file with the older checkout on ``PYTHONPATH`` for that column).

    python benchmarks/low_bit_mlx.py [--n 1048576] [--rounds 20]

Prints the load, then per case the best wall-clock milliseconds of raw NumPy (``ml_dtypes`` arrays; its float8
ufuncs compute in float32 and round once, as ours), of raw MLX on the bytes (``mx.from_fp8``, the operation in
float32, ``mx.to_fp8``, which saturates overflow and NaN where ml_dtypes gives NaN; int4 as uint8 bytes, the low
nibble kept; the bytes copied from NumPy and back, as an mlx:0 program does) and of mlx:0, and mlx:0's ratios.
"""

from __future__ import annotations

import argparse
import warnings

import _checkout  # noqa: F401  (this checkout's fnarray first on sys.path)
import ml_dtypes
import numpy as np
from _timing import best_of, load_line


def operands(fa, fnp, dev, n, k):
    """The cases' operands and programs, shared with ``low_bit_kernels.py``: ``(host, on_dev, programs, e4)``:
    float8 ``a, b`` and int4 ``p, q`` of ``n`` elements and float8 ``x, w`` of ``k x k`` (seed 0), the same
    arrays put on ``dev``, the jitted ``a*b+a``, ``p+q-p*q``, ``sum`` and ``@``, and the float8 dtype."""
    rng = np.random.default_rng(0)
    e4 = np.dtype(ml_dtypes.float8_e4m3fn)
    i4 = np.dtype(ml_dtypes.int4)
    a, b = (rng.standard_normal(n) * 3).astype(e4), (rng.standard_normal(n) * 3).astype(e4)
    p, q = rng.integers(-8, 8, n).astype(i4), rng.integers(-8, 8, n).astype(i4)
    x, w = (rng.standard_normal((k, k))).astype(e4), (rng.standard_normal((k, k))).astype(e4)
    host = (a, b, p, q, x, w)
    programs = (fa.jit(lambda u, v: u * v + u), fa.jit(lambda u, v: u + v - u * v), fa.jit(lambda u: fnp.sum(u)),
                fa.jit(lambda u, v: u @ v))
    return host, tuple(fa.device_put(v, dev) for v in host), programs, e4


def _cases(fa, fnp, n, k):
    """``(name, raw NumPy, raw MLX, fnarray)`` callables for each case."""
    import mlx.core as mx
    (a, b, p, q, x, w), (ad, bd, pd, qd, xd, wd), (fma, add4, total, prod), e4 = operands(
        fa, fnp, fa.get_device("mlx:0"), n, k)

    def mlx_raw(fn, *arrays):   # raw MLX on the bytes (from NumPy, as ours): mx.from_fp8 / mx.to_fp8 around fn
        def run():
            return np.array(fn(*(mx.array(v.view(np.uint8)) for v in arrays)))
        return run
    up, down = (lambda v: mx.from_fp8(v, dtype=mx.float32)), mx.to_fp8
    return [("e4m3 a*b+a", lambda: a * b + a, mlx_raw(lambda u, v: down(up(u) * up(v) + up(u)), a, b),
             lambda: np.asarray(fma(ad, bd))),
            ("int4 a+b-a*b", lambda: p + q - p * q, mlx_raw(lambda u, v: mx.bitwise_and(u + v - u * v, 15), p, q),
             lambda: np.asarray(add4(pd, qd))),
            ("e4m3 sum", lambda: np.sum(a, dtype=np.float32).astype(e4), mlx_raw(lambda u: down(mx.sum(up(u))), a),
             lambda: np.asarray(total(ad))),
            (f"e4m3 {k}x{k} @", lambda: (x.astype(np.float32) @ w.astype(np.float32)).astype(e4),
             mlx_raw(lambda u, v: down(up(u) @ up(v)), x, w), lambda: np.asarray(prod(xd, wd)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    import fnarray as fa
    import fnarray.numpy as fnp
    print(load_line())
    print(f"fnarray from {fa.__file__}")
    warnings.simplefilter("ignore", fa.FallbackWarning)
    print(f"{'case':18} {'NumPy ms':>9} {'MLX ms':>9} {'mlx:0 ms':>9} {'/NumPy':>7} {'/MLX':>7}")
    for name, raw, raw_mlx, ours in _cases(fa, fnp, args.n, args.k):
        wall, _ = best_of([raw, raw_mlx, ours], args.rounds)
        print(f"{name:18} {wall[0] * 1e3:9.3f} {wall[1] * 1e3:9.3f} {wall[2] * 1e3:9.3f} "
              f"{wall[2] / wall[0]:7.2f} {wall[2] / wall[1]:7.2f}")


if __name__ == "__main__":
    main()
