"""The mlx backend's ``mx.compile`` policy, measured: chains on large and small arrays, fnarray vs raw MLX.

For each size and chain: raw MLX eagerly, raw MLX under ``mx.compile``, and fnarray's ``jit`` on mlx:0 under
each ``COMPILE_MODE`` (``auto``: the policy of ``fnarray/lowering/mlx/backend.py``; ``always``; ``never``), every
call followed by ``mx.eval`` / ``block_until_ready``. Rounds alternate the variants (the machine is shared);
each cell is the minimum over rounds of the mean of ``--number`` calls.

Usage: python benchmarks/mlx_compile.py [--sizes 1024,16384,1048576,16777216] [--rounds 4]
Prints a Markdown table of milliseconds and ratios to the faster raw form; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.mlx import backend as mlx_backend


def arith(a, x, b):
    return ((a * x + b) * x + 1.0) * 0.5 - a


def tanh_chain_fa(a, x, b):
    return fnp.tanh(a * x + b) * x + 1.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,16384,1048576,16777216")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    import mlx.core as mx

    def tanh_chain_mx(a, x, b):
        return mx.tanh(a * x + b) * x + 1.0

    dev = fa.get_device("mlx:0")
    chains = {"arith ((a*x+b)*x+1)*0.5-a": (arith, arith), "tanh(a*x+b)*x+1": (tanh_chain_fa, tanh_chain_mx)}
    print(f"device: {dev} ({dev.description}); load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| chain | elements | raw eager ms | raw mx.compile ms | fnarray auto ms | fnarray always ms | "
          "fnarray never ms | auto / best raw |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for cname, (ffa, fmx) in chains.items():
        for n in (int(s) for s in args.sizes.split(",")):
            number = max(1, min(200, (1 << 22) // n))
            rng = np.random.default_rng(0)
            host = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
            raw = [mx.array(h) for h in host]
            arrs = [fa.device_put(h, dev) for h in host]
            compiled = mx.compile(fmx)
            variants = {"raw eager": lambda: mx.eval(fmx(*raw)), "raw compile": lambda: mx.eval(compiled(*raw))}
            for mode in ("auto", "always", "never"):
                mlx_backend.COMPILE_MODE = mode
                f = fa.jit(ffa)
                for _ in range(mlx_backend.CPU_COMPILE_AFTER_CALLS + 1):  # past the warm-up count
                    f(*arrs).block_until_ready()
                variants[mode] = (lambda f=f: f(*arrs).block_until_ready())
            mlx_backend.COMPILE_MODE = "auto"
            for fn in variants.values():
                fn()
            best = {k: float("inf") for k in variants}
            for _ in range(args.rounds):
                for k, fn in variants.items():
                    t0 = time.perf_counter()
                    for _ in range(number):
                        fn()
                    best[k] = min(best[k], (time.perf_counter() - t0) / number * 1e3)
            ref = min(best["raw eager"], best["raw compile"])
            print(f"| {cname} | {n} | {best['raw eager']:.3f} | {best['raw compile']:.3f} | {best['auto']:.3f} | "
                  f"{best['always']:.3f} | {best['never']:.3f} | {best['auto'] / ref:.2f} |", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
