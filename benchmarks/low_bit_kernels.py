"""Low-bit dtypes on the kernel backends (opencl:0, webgpu:0) against ``ml_dtypes``' own NumPy ufuncs in the same
run: float8 and int4 arithmetic, a float8 sum and product under ``jit``, computed in float32/int32 between
conversions since the sixteenth session (``core/low_bit_upcast.py``); ``--mode fallback`` measures the path before
it (each equation on numpy:0 through the fallback, the bytes copied to the host and back), in the same checkout.

    python benchmarks/low_bit_kernels.py [--devices opencl:0,webgpu:0] [--n 1048576] [--k 256] [--rounds 10]
                                         [--mode native|fallback]

Prints the load, then per device and case the best wall-clock milliseconds of raw NumPy (``ml_dtypes`` arrays,
which compute float8 in float32 rounded once, as ours) and of the device (the result left on it, waited for), and
the ratio. Run the two modes alternately (separate processes) for an A/B on a loaded machine.
"""

from __future__ import annotations

import argparse
import warnings

import _checkout  # noqa: F401  (this checkout's fnarray first on sys.path)
import numpy as np
from _timing import available_devices, best_of, load_line
from low_bit_mlx import operands


def _cases(fa, fnp, dev, n, k):
    """``(name, raw NumPy, fnarray on dev)`` callables for each case."""
    (a, b, p, q, x, w), (ad, bd, pd, qd, xd, wd), (fma, add4, total, prod), e4 = operands(fa, fnp, dev, n, k)

    def on_device(fn, *args):
        return lambda: fa.block_until_ready(fn(*args))
    return [("e4m3 a*b+a", lambda: a * b + a, on_device(fma, ad, bd)),
            ("int4 a+b-a*b", lambda: p + q - p * q, on_device(add4, pd, qd)),
            ("e4m3 sum", lambda: np.sum(a, dtype=np.float32).astype(e4), on_device(total, ad)),
            (f"e4m3 {k}x{k} @", lambda: (x.astype(np.float32) @ w.astype(np.float32)).astype(e4),
             on_device(prod, xd, wd))]


def _as_before(dev):
    """Make ``dev``'s backend take every low-bit equation as it is (no upcasting): its ``supports`` then sends
    the arithmetic to numpy:0, as before the sixteenth session."""
    impl = dev.impl
    impl.keeps_low_bit = lambda eqn, device: True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--mode", choices=("native", "fallback"), default="native")
    args = ap.parse_args()
    import fnarray as fa
    import fnarray.numpy as fnp
    print(load_line())
    print(f"fnarray from {fa.__file__}; mode {args.mode}")
    warnings.simplefilter("ignore", fa.FallbackWarning)
    print(f"{'device':9} {'case':16} {'NumPy ms':>9} {'device ms':>10} {'/NumPy':>7}")
    for name, dev in available_devices(fa, args.devices):
        if args.mode == "fallback":
            _as_before(dev)
        for case, raw, ours in _cases(fa, fnp, dev, args.n, args.k):
            wall, _ = best_of([raw, ours], args.rounds)
            print(f"{name:9} {case:16} {wall[0] * 1e3:9.3f} {wall[1] * 1e3:10.3f} {wall[1] / wall[0]:7.2f}")


if __name__ == "__main__":
    main()
