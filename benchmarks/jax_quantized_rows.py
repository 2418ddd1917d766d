"""jax:0's quantized decode products (1-4 rows) against float32 and against raw JAX unpacking by hand.

One interleaved run: per mode (affine 4-bit group 64, mxfp4, mxfp8, nvfp4), rows of ``x`` and orientation
(``x @ W.T``, MLX's ``transpose=True``; ``x @ W``, ``transpose=False``): the float32 product in ``jax.jit``,
``fa.quantized_matmul`` jitted on jax:0, and raw JAX doing the same unpacking by hand (shifts and masks, the
floating modes' element and scale values looked up in tables with ``jnp.take``, then one ``jnp.matmul``). Each
column is the median of ``--number`` alternating calls in process CPU ms (the result waited for each call; steadier
than wall time on a loaded machine, docs/traps.md); XLA is asked for one thread (``XLA_FLAGS``), so CPU time is
the product's own work; the load average is printed first.

    PYTHONPATH=. python benchmarks/jax_quantized_rows.py [--size 2048] [--rows 1,2,4] [--number 21] \\
        [--modes affine,mxfp4] [--bits 4] [--group-size 64] [--forms x@W.T,x@W]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import load_line  # noqa: E402

import numpy as np  # noqa: E402

MODES = ("affine", "mxfp4", "mxfp8", "nvfp4")


def _raw(jnp, mode, transpose, group_size, bits):
    """Raw JAX: the product with the weights unpacked by hand (tables gathered for the floating modes)."""
    from fnarray.lowering.packed import FLOAT_FORMATS

    def f(x, w, scales, biases=None):
        if 32 % bits:   # 3, 5, 6 bits cross words: gathers of each element's low and high word (``packed.unpack``;
            # a static slice and shift per element, stacked, measured 2.5x slower: 3 bits, 2048², 16 rows)
            from fnarray.lowering.packed import unpack
            q = unpack(jnp, w, bits, jnp.asarray)
        else:
            per = 32 // bits
            shifts = jnp.asarray((np.arange(per) * bits).astype(np.uint32))
            q = ((w[:, :, None] >> shifts) & jnp.uint32((1 << bits) - 1)).reshape(w.shape[0], -1)
        rows, cols = q.shape
        if mode == "affine":
            q = q.astype(jnp.float32).reshape(rows, cols // group_size, group_size)
            wd = q * scales[:, :, None] + biases[:, :, None]
        else:
            elements, scale_values, _, _ = FLOAT_FORMATS[mode]
            q = jnp.take(jnp.asarray(elements), q.astype(jnp.int32), axis=0).reshape(rows, cols // group_size,
                                                                                   group_size)
            wd = q * jnp.take(jnp.asarray(scale_values), scales.astype(jnp.int32), axis=0)[:, :, None]
        wd = wd.reshape(rows, cols)
        return jnp.matmul(x, wd.T if transpose else wd)
    return f


def _mlx_call(parts, x, mode, transpose, bits, group_size):
    """MLX's own ``mx.quantized_matmul`` on the same packed weights (a reference of what a fused kernel does);
    ``None`` where MLX is not installed."""
    try:
        import mlx.core as mx
    except ImportError:
        return None
    mparts, mxx = [mx.array(a) for a in parts], mx.array(x)
    opts = dict(group_size=group_size, bits=bits) if mode == "affine" else {}
    biases = mparts[2] if mode == "affine" else None

    def call():
        mx.eval(mx.quantized_matmul(mxx, mparts[0], mparts[1], biases, transpose=transpose, mode=mode, **opts))
    return call


def _calls(fa, jax, dev, n, rows, mode, transpose, bits=4, group_size=64):
    """Zero-argument callables: float32, fnarray, raw JAX; and fnarray's and raw's largest error against
    float64."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    opts = dict(group_size=group_size, bits=bits) if mode == "affine" else {}
    group_size, bits = fa.core.quantized.check_format(opts.get("group_size"), opts.get("bits"), mode)
    parts = [np.asarray(a) for a in fa.quantize(w, mode=mode, **opts)]
    wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
    ref = x @ (wd.T if transpose else wd)
    jparts, jx, jw = [jax.device_put(a) for a in parts], jax.device_put(x), jax.device_put(w)
    f32 = jax.jit(lambda x, w: x @ w.T if transpose else x @ w)
    raw = jax.jit(_raw(jax.numpy, mode, transpose, group_size, bits))
    q = fa.jit(functools.partial(fa.quantized_matmul, transpose=transpose, mode=mode, **opts), device=dev)
    fparts, fx = [fa.device_put(a, dev) for a in parts], fa.device_put(x, dev)
    errs = [np.abs(np.asarray(q(fx, *fparts)) - ref).max(), np.abs(np.asarray(raw(jx, *jparts)) - ref).max()]
    calls = [lambda: f32(jx, jw).block_until_ready(), lambda: q(fx, *fparts).block_until_ready(),
             lambda: raw(jx, *jparts).block_until_ready()]
    return calls + [_mlx_call(parts, x, mode, transpose, bits, group_size)], errs


def median_of(fns, number):
    """Each of ``fns`` called once, then ``number`` rounds calling each once in turn: the median process-CPU
    seconds of each (a best-of takes the clock's rare short readings on a loaded machine)."""
    for fn in fns:
        fn()
    cpu = [[] for _ in fns]
    for _ in range(number):
        for k, fn in enumerate(fns):
            c = time.process_time()
            fn()
            cpu[k].append(time.process_time() - c)
    return [float(np.median(c)) for c in cpu]


def _rows(fa, jax, dev, args):
    """One printed line per size, bits, mode, orientation and rows of ``args``."""
    for n in (int(v) for v in str(args.size).split(",")):
        for bits in (int(v) for v in str(args.bits).split(",")):
            for mode in args.modes.split(","):
                if mode != "affine" and bits != int(str(args.bits).split(",")[0]):
                    continue   # the floating modes have one format: run them once
                for transpose in [form == "x@W.T" for form in args.forms.split(",")]:
                    for rows in (int(r) for r in args.rows.split(",")):
                        calls, errs = _calls(fa, jax, dev, n, rows, mode, transpose, bits, args.group_size)
                        cpu = median_of([c for c in calls if c is not None and (args.mlx or c is not calls[3])],
                                        args.number) + [float("nan")]
                        print(f"{n:>5} {bits if mode == 'affine' else '-':>4} {mode:7} "
                              f"{'x@W.T' if transpose else 'x@W':7} {rows:>4} "
                              + " ".join(f"{t * 1e3:>8.3f}" for t in cpu[:4])
                              + f" {cpu[1] / cpu[0]:>7.2f} {cpu[1] / cpu[2]:>7.2f} {cpu[1] / cpu[3]:>7.2f}"
                              f"   {errs[0]:.1e} {errs[1]:.1e}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2048", help="weight widths (square), comma-separated")
    ap.add_argument("--rows", default="1,2,4")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--number", type=int, default=21)
    ap.add_argument("--bits", default="4", help="affine mode's bits (2, 3, 4, 5, 6, 8), comma-separated")
    ap.add_argument("--group-size", type=int, default=64, help="affine mode's group size (32, 64, 128)")
    ap.add_argument("--forms", default="x@W.T,x@W", help="orientations: x@W.T (transpose=True), x@W")
    ap.add_argument("--mlx", action="store_true", help="a column of MLX's own mx.quantized_matmul (mlx installed)")
    args = ap.parse_args(argv)
    import jax

    import fnarray as fa
    dev = fa.get_device("jax:0")
    print(load_line())
    print(f"{'size':>5} {'bits':>4} {'mode':7} {'form':7} {'rows':>4} {'float32':>8} {'fnarray':>8} {'raw':>8} "
          f"{'mlx':>8} {'fa/f32':>7} {'fa/raw':>7} {'fa/mlx':>7}"
          "   (CPU ms, median of alternating calls; largest error of fnarray, raw)")
    _rows(fa, jax, dev, args)


if __name__ == "__main__":
    main()
