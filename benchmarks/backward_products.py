"""The products of a training step on CPU OpenCL, forward and backward, with and without transposing packs.

A dense layer ``y = x @ w`` (``x: [b, i]``, ``w: [i, o]``, the upstream gradient ``d: [b, o]``) runs three
products per step: ``x @ w`` forward, ``x.T @ d`` (the weight's gradient) and ``d @ w.T`` (the input's); a
``Linear`` layer holding ``wt: [o, i]`` runs ``x @ wt.T``, ``d.T @ x`` and ``d @ wt``. On opencl's register-tiled
kernels (``lowering/kernels/groups/register_tiles.py``) an operand whose contraction runs along its memory and
whose panel lanes do not (the lhs ``x``, the rhs ``w.T``) is packed ``PACK_BLOCK`` contraction steps per work
item (``pack_block``); ``PACK_BLOCK = 1`` restores a panel row per work item (the kernels before). Each product
is lowered both ways in one process and timed interleaved (best of ``--rounds``: the call's wall-clock and
process CPU time, which on a CPU device counts the driver's threads), then profiled once per variant for the
pack's and the product's device time.

Run it under both PoCLs at once: ``sh benchmarks/pocl31.sh /work/pocl31 run python benchmarks/backward_products.py
--devices opencl:0,opencl:1`` (opencl:0 is then Debian's PoCL 3.1, opencl:1 the wheel's 3.0). Asserts nothing.

Usage: python benchmarks/backward_products.py [--devices opencl:0] [--rounds 9] [--shapes vae,mlp,transformer]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import _timing  # noqa: E402
import fnarray as fa
from fnarray.lowering.kernels.groups import dot, register_tiles

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: (batch, in, out) of the layers of the benchmarked programs
SHAPES = {
    "vae": [(32, 784, 512), (32, 512, 512), (32, 512, 784)],
    "mlp": [(64, 64, 128), (64, 128, 128)],
    "transformer": [(1024, 64, 256), (1024, 256, 64), (1024, 64, 96)],
    "rows": [(64, 512, 512), (100, 512, 512), (128, 784, 512), (256, 512, 784)],   # the transposed form's bound
}
PRODUCTS = {   # name -> (function, operands by name)
    "x @ w": (lambda x, w: x @ w, ("x", "w")),
    "x.T @ d": (lambda x, d: x.T @ d, ("x", "d")),
    "d @ w.T": (lambda d, w: d @ w.T, ("d", "w")),
    "x @ wt.T": (lambda x, wt: x @ wt.T, ("x", "wt")),
    "d.T @ x": (lambda d, x: d.T @ x, ("d", "x")),
    "d @ wt": (lambda d, wt: d @ wt, ("d", "wt")),
}


#: the variants compared: (name, ``register_tiles.PACK_BLOCK``, ``dot.TRANSPOSED_PRODUCTS``)
VARIANTS = (("before", 1, False), ("packs", register_tiles.PACK_BLOCK, False),
            ("after", register_tiles.PACK_BLOCK, True))


def lowered(dev, f, args, variant):
    """``f`` jitted on ``dev`` and called once under ``variant`` (its kernels are chosen then)."""
    old = register_tiles.PACK_BLOCK, dot.TRANSPOSED_PRODUCTS
    _, register_tiles.PACK_BLOCK, dot.TRANSPOSED_PRODUCTS = variant
    try:
        jf = fa.jit(lambda *a: f(*a), device=dev)   # a new function: fa.jit caches by function
        fa.block_until_ready(jf(*args))
    finally:
        register_tiles.PACK_BLOCK, dot.TRANSPOSED_PRODUCTS = old
    return lambda: fa.block_until_ready(jf(*args))


def device_us(call, reps=5, prefix="dot_pack"):
    """``(named, others)``: the device microseconds per call of the kernels whose names start with ``prefix``
    and of the others, from the profiler's kernel spans of ``reps`` calls."""
    with fa.profiler.trace() as h:
        for _ in range(reps):
            call()
    named = others = 0.0
    for r in h.profile.records:
        if r.kind == "kernel":
            us = r.args.get("device_us", r.dur / 1e3)
            if r.name.startswith(prefix):
                named += us
            else:
                others += us
    return named / reps, others / reps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--products", default=",".join(PRODUCTS), help="comma-separated, of " + ", ".join(PRODUCTS))
    a = ap.parse_args(argv)
    print(_timing.load_line())
    rng = np.random.default_rng(0)
    for name, dev in _timing.available_devices(fa, a.devices):
        print(f"{name}: {dev.impl.state(dev).cl_device.platform.version.split(' Linux')[0]}")
        names = [v[0] for v in VARIANTS]
        print(f"{'shape':>22} {'product':>9} | wall us {' '.join(f'{n:>6}' for n in names)} | wall, cpu / before "
              f"{' '.join(f'{n:>11}' for n in names[1:])} | pack/product device us "
              f"{' '.join(f'{n:>9}' for n in names)}")
        for group in a.shapes.split(","):
            for b, i, o in SHAPES[group]:
                vals = {"x": rng.standard_normal((b, i)), "w": rng.standard_normal((i, o)),
                        "d": rng.standard_normal((b, o)), "wt": rng.standard_normal((o, i))}
                vals = {k: fa.device_put(v.astype(np.float32), dev) for k, v in vals.items()}
                for pname in a.products.split(","):
                    f, operands = PRODUCTS[pname]
                    args = [vals[n] for n in operands]
                    calls = [lowered(dev, f, args, v) for v in VARIANTS]
                    wall, cpu = _timing.best_of(calls, a.rounds, warm=2)
                    dev_us = [device_us(c) for c in calls]
                    ratios = " ".join(f"{wall[k] / wall[0]:5.2f},{cpu[k] / cpu[0]:5.2f}" for k in range(1, len(calls)))
                    print(f"{group + f' {b}x{i}x{o}':>22} {pname:>9} | {' '.join(f'{w * 1e6:6.0f}' for w in wall)} "
                          f"| {ratios} | {' '.join(f'{p:4.0f}/{q:<4.0f}' for p, q in dev_us)}")
    print(_timing.load_line())


if __name__ == "__main__":
    main()
