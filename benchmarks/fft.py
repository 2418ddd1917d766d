"""A 2-D FFT (1024 x 1024, complex64) through fnarray against raw NumPy, JAX and MLX, in one interleaved run.

Each row times ``fnp.fft.fft2`` jitted on one device and the raw library's own 2-D FFT on the same data
(``np.fft.fft2``; ``jax.jit(jnp.fft.fft2)``; ``mx.fft.fft2`` evaluated), alternating the two in every round
so that the machine's load falls on both alike. The ratio is fnarray's median / the raw median (1.0: as
fast; above 1: slower). The opencl and webgpu rows (fnarray's Stockham kernels, no raw FFT library on
those devices) are compared with NumPy's. The load average is printed with the table; nothing is asserted.

Usage::

    python benchmarks/fft.py [--size 1024] [--rounds 7] [--devices numpy:0,jax:0,mlx:0,opencl:0,webgpu:0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _raw(device, x):
    """The raw library's 2-D FFT of ``x`` as a function that waits for its result, or ``None``."""
    if device.backend == "jax":
        import jax
        import jax.numpy as jnp
        f = jax.jit(jnp.fft.fft2)
        xj = jax.device_put(x)
        return "jax.jit(jnp.fft.fft2)", lambda: f(xj).block_until_ready()
    if device.backend == "mlx":
        import mlx.core as mx
        xm = mx.array(x)
        return "mx.fft.fft2", lambda: mx.eval(mx.fft.fft2(xm))
    return "np.fft.fft2", lambda: np.fft.fft2(x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--devices", default="numpy:0,jax:0,mlx:0,opencl:0,webgpu:0")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    n = args.size
    x = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(np.complex64)
    want = np.fft.fft2(x.astype(np.complex128))
    rows = []
    for name in args.devices.split(","):
        try:
            device = fa.get_device(name)
        except (ValueError, fa.BackendUnavailable) as e:
            print(f"{name}: skipped ({e})")
            continue
        xd = fa.device_put(fnp.asarray(x), device)
        f = fa.jit(fnp.fft.fft2, device=device)
        out = f(xd)
        err = float(np.abs(np.asarray(out) - want).max() / np.abs(want).max())
        raw_name, raw = _raw(device, x)
        raw()
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(_timed(lambda: f(xd).block_until_ready()))
            theirs.append(_timed(raw))
        mo, mt = statistics.median(ours), statistics.median(theirs)
        rows.append((str(device), mo, raw_name, mt, mo / mt, err))
    load = os.getloadavg()
    print(f"2-D FFT {n}x{n} complex64, median of {args.rounds} interleaved rounds; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("| device | fnarray (ms) | raw | raw (ms) | fnarray / raw | max rel. error vs float64 |")
    print("|---|---|---|---|---|---|")
    for dev, mo, raw_name, mt, ratio, err in rows:
        print(f"| {dev} | {mo * 1e3:.1f} | {raw_name} | {mt * 1e3:.1f} | {ratio:.2f} | {err:.1e} |")
    return rows


if __name__ == "__main__":
    main()
