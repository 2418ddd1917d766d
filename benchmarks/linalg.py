"""A Cholesky solve (``cholesky`` + two ``triangular_solve``) on every fnarray device against raw JAX and NumPy.

The problem (issue "linear algebra"): a batch of 64 symmetric positive definite float32 matrices of size
256 and 16 right-hand sides each, ``x = (L L^T)^-1 y`` with ``L = cholesky(a)``, jitted. The references:
raw JAX (``jax.jit`` of ``lax.linalg.cholesky`` and two ``lax.linalg.triangular_solve``, XLA on the CPU:
LAPACK potrf/trsm) and NumPy (``np.linalg.cholesky``, then ``np.linalg.solve`` twice: NumPy has no
triangular solve, so that is an LU solve of the triangular factors).

Every candidate runs once per round, in turn, for ``--rounds`` rounds (interleaved: the shared machine's
load hits all alike); the table has each one's best time, the ratios reference time / fnarray time (>= 1:
fnarray is faster) and the load average before and after. Each result is checked against float64.

Usage:  OPENBLAS_NUM_THREADS=1 python benchmarks/linalg.py [--devices numpy:0,jax:0,opencl:0,webgpu:0]
        [--n 256] [--batch 64] [--rhs 16] [--rounds 3]
Prints a Markdown table; asserts nothing but the results' accuracy.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
from fnarray.devices.placement import parse_device


def cho_solve(a, y):
    c = fa.lax.linalg.cholesky(a, symmetrize_input=False)
    z = fa.lax.linalg.triangular_solve(c, y, left_side=True, lower=True)
    return fa.lax.linalg.triangular_solve(c, z, left_side=True, lower=True, transpose_a=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="numpy:0,jax:0,opencl:0,webgpu:0")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rhs", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    n, nb, k = args.n, args.batch, args.rhs
    m = rng.normal(size=(nb, n, n))
    a = (m @ np.swapaxes(m, -1, -2) / n + np.eye(n)).astype(np.float32)
    y = rng.normal(size=(nb, n, k)).astype(np.float32)
    want = np.linalg.solve(a.astype(np.float64), y.astype(np.float64))

    candidates = {}   # name -> (call returning a host array, blocking)
    for name in args.devices.split(","):
        dev = parse_device(name)
        jf = fa.jit(cho_solve, device=dev)
        da, dy = fa.device_put(a, dev), fa.device_put(y, dev)
        candidates[f"fnarray {dev}"] = (lambda jf=jf, da=da, dy=dy: jf(da, dy).block_until_ready(),
                                        lambda jf=jf, da=da, dy=dy: np.asarray(jf(da, dy)))

    @jax.jit
    def jax_cho_solve(a, y):
        c = jax.lax.linalg.cholesky(a, symmetrize_input=False)
        z = jax.lax.linalg.triangular_solve(c, y, left_side=True, lower=True)
        return jax.lax.linalg.triangular_solve(c, z, left_side=True, lower=True, transpose_a=True)

    ja, jy = jnp.asarray(a), jnp.asarray(y)
    candidates["raw JAX"] = (lambda: jax_cho_solve(ja, jy).block_until_ready(),
                             lambda: np.asarray(jax_cho_solve(ja, jy)))

    def numpy_cho_solve():
        c = np.linalg.cholesky(a)
        return np.linalg.solve(np.swapaxes(c, -1, -2), np.linalg.solve(c, y))

    candidates["raw NumPy"] = (numpy_cho_solve, numpy_cho_solve)

    first = {}
    for name, (_, result) in candidates.items():
        t = time.perf_counter()
        got = result()
        first[name] = time.perf_counter() - t
        err = float(np.abs(got - want).max() / np.abs(want).max())
        if not err < 1e-3:
            raise AssertionError(f"{name}: relative error {err:.2e} against float64")

    load0 = os.getloadavg()
    times = {name: [] for name in candidates}
    for _ in range(args.rounds):
        for name, (run, _) in candidates.items():
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    load1 = os.getloadavg()
    best = {name: min(ts) for name, ts in times.items()}

    print(f"Cholesky solve, {nb} x float32 [{n}, {n}] with {k} right-hand sides; best of {args.rounds} "
          f"interleaved rounds; load average {load0[0]:.1f} before, {load1[0]:.1f} after")
    print()
    print("| candidate | first call (ms) | best (ms) | raw JAX / this | raw NumPy / this |")
    print("|---|---|---|---|---|")
    for name, t in best.items():
        print(f"| {name} | {first[name] * 1e3:.0f} | {t * 1e3:.1f} | {best['raw JAX'] / t:.2f} | "
              f"{best['raw NumPy'] / t:.2f} |")


if __name__ == "__main__":
    main()
