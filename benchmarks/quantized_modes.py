"""MLX's quantization modes against float32 in a matrix-vector product (a decode step's layer), per device.

One interleaved run per device: ``x @ W.T`` with ``W`` float32 against ``fa.quantized_matmul`` on ``W`` quantized
as affine 4-bit (group 32), mxfp4, mxfp8 and nvfp4 (``fnarray.core.quantized``). Each column is the best of
``--number`` alternating calls (jitted, warmed, the small result read back each call) in process CPU ms, which is
steadier than wall time on a loaded machine (docs/traps.md); the load average is printed first.

    PYTHONPATH=. python benchmarks/quantized_modes.py [--size 4096] [--rows 1] [--number 10] [--devices opencl:0,mlx:0]
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

MODES = ("affine", "mxfp4", "mxfp8", "nvfp4")


def _calls(fa, dev, n, rows):
    """Zero-argument callables (float32, then one per mode) and each mode's relative error against float32."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    xd, wd = fa.device_put(x, dev), fa.device_put(w, dev)
    f32 = fa.jit(lambda x, w: x @ w.T)
    calls, errs = [lambda: np.asarray(f32(xd, wd))], []
    ref = x @ w.T
    for mode in MODES:
        opts = dict(group_size=32, bits=4) if mode == "affine" else {}
        parts = [fa.device_put(np.asarray(a), dev) for a in fa.quantize(w, mode=mode, **opts)]
        q = fa.jit(functools.partial(fa.quantized_matmul, mode=mode, **opts))
        errs.append(np.abs(np.asarray(q(xd, *parts)) - ref).max() / np.abs(ref).max())
        calls.append(functools.partial(lambda q, parts: np.asarray(q(xd, *parts)), q, parts))
    return calls, errs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--number", type=int, default=10)
    ap.add_argument("--devices", default="opencl:0,mlx:0")
    args = ap.parse_args(argv)
    import fnarray as fa
    print(load_line())
    print(f"{'device':10} {'size':>5} {'rows':>4} {'float32':>8} " + " ".join(f"{m:>8}" for m in MODES)
          + "   (process CPU ms; relative error of each mode)")
    fa.config.fallback = "error"   # each product on its device's own kernels, or an error
    known = {str(d): d for d in fa.devices(all_backends=True)}
    for name in args.devices.split(","):
        calls, errs = _calls(fa, known[name], args.size, args.rows)
        _, cpu = best_of(calls, args.number)
        print(f"{name:10} {args.size:>5} {args.rows:>4} " + " ".join(f"{c * 1e3:>8.2f}" for c in cpu)
              + "   " + " ".join(f"{e:.3f}" for e in errs))


if __name__ == "__main__":
    main()
