"""Call-path overhead of fnarray on a backend, against the raw library in the same run.

Measures (docs/design.md, "The call path is the product's hot loop"):
  a) a cached jitted call of a 4-element function vs. the same NumPy expression;
  b) an eager operation (``x * 2.0``) vs. NumPy's;
  c) the per-equation cost of a jitted program of N chained ops vs. N NumPy calls;
  d) an arithmetic chain on 1M float32 elements, jitted, vs. NumPy's single expression (which reuses
     its temporaries' buffers; the numpy backend's generated code does so with ``out=``).

Usage: python benchmarks/call_overhead.py [--device numpy:0] [--repeat 5]
Prints a table of microseconds and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp


def best(fn, number, repeat):
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="device name, e.g. numpy:0 (default: the default device)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args(argv)
    dev = fa.devices()[0] if args.device is None else args.device

    xn = np.arange(4, dtype=np.float32)
    x = fa.device_put(fnp.asarray(xn), dev)
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    f(x).block_until_ready()

    rows = []
    t_jit = best(lambda: f(x).block_until_ready(), args.number, args.repeat)
    t_np = best(lambda: xn * 2.0 + 1.0, args.number, args.repeat)
    rows.append(("jitted a*2+1 on f32[4]", t_jit, t_np))
    t_eager = best(lambda: (x * 2.0).block_until_ready(), args.number, args.repeat)
    t_np1 = best(lambda: xn * 2.0, args.number, args.repeat)
    rows.append(("eager x*2 on f32[4]", t_eager, t_np1))

    n = 200

    def chain(a):
        for _ in range(n):
            a = a * 1.0001 + 0.5
        return a

    c1, c2 = np.float32(1.0001), np.float32(0.5)

    def np_chain(a):  # the fastest plain NumPy: constants already float32
        for _ in range(n):
            a = a * c1 + c2
        return a

    g = fa.jit(chain)
    g(x).block_until_ready()
    t_chain = best(lambda: g(x).block_until_ready(), 200, args.repeat)
    t_np_chain = best(lambda: np_chain(xn), 200, args.repeat)
    n_eqns = len(fa.make_ir(chain)(x).eqns)

    print(f"device: {fa.device_put(x, dev).device} ({x.device.description})")
    print(f"{'measure':34s} {'fnarray us':>11s} {'raw us':>8s} {'own us':>8s} {'ratio':>6s}")
    for name, a, b in rows:
        print(f"{name:34s} {a:11.2f} {b:8.2f} {a - b:8.2f} {a / b:6.2f}")
    per_eqn = (t_chain - t_np_chain) / n_eqns
    print(f"{'jitted chain of ' + str(n_eqns) + ' eqns':34s} {t_chain:11.1f} {t_np_chain:8.1f} "
          f"{t_chain - t_np_chain:8.1f} {t_chain / t_np_chain:6.2f}")
    print(f"interpreter overhead per equation: {per_eqn:.3f} us")

    big_n = np.random.default_rng(0).standard_normal((3, 1 << 20)).astype(np.float32)
    big = [fa.device_put(fnp.asarray(v), dev) for v in big_n]
    arith = fa.jit(lambda a, x, b: ((a * x + b) * x + 1.0) * 0.5 - a)
    arith(*big).block_until_ready()
    a_, x_, b_ = big_n
    times_f, times_n = [], []
    for _ in range(args.repeat * 4):  # alternating, so that the machine's load hits both alike
        times_f.append(best(lambda: arith(*big).block_until_ready(), 5, 1))
        times_n.append(best(lambda: ((a_ * x_ + b_) * x_ + np.float32(1.0)) * np.float32(0.5) - a_, 5, 1))
    tf, tn = min(times_f), min(times_n)
    print(f"{'arithmetic chain, 1M f32':34s} {tf:11.1f} {tn:8.1f} {tf - tn:8.1f} {tf / tn:6.2f}  "
          "(raw: NumPy's single expression)")
    print(f"load average: {' '.join(f'{v:.2f}' for v in __import__('os').getloadavg())}")


if __name__ == "__main__":
    main()
