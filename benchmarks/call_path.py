"""The call path on each backend against its raw library, in one process, interleaved (issue 17 item 4).

Rows (f32[4] operands, so that fnarray's own time per call dominates):
  jax:0   cached jitted ``a*2+1`` vs ``jax.jit`` (returning, and waited for with ``block_until_ready``);
          eager ``x * 2.0``, ``x @ y``, ``sum(x, axis=0)``, ``x[1]`` (f32[4, 4]) vs ``jax.numpy``'s;
  numpy:0 eager ``x * 2.0``, ``x * y``, ``fnp.multiply(x, y)``, ``fnp.exp(x)``, and on f32[4, 4] ``x @ y``,
          ``sum(x, axis=0)``, ``x[1]``, ``x + row`` vs NumPy's; cached jitted ``a*2+1`` vs NumPy's expression;
  mlx:0   eager ``x * 2.0`` vs MLX's (both evaluated); cached jitted ``a*2+1`` vs ``mx.compile``.
Each round times every variant for ``--number`` calls, alternating; a cell is the minimum over ``--rounds``.
The machine is shared: read the ratios, with the load average printed beside them.

Usage: python benchmarks/call_path.py [--rounds 9] [--number 3000] [--rows jax,numpy,mlx] [--json]
Prints a Markdown table (or one JSON object); asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp


def _rows(which):
    x4 = np.arange(4, dtype=np.float32)
    m44 = np.arange(16, dtype=np.float32).reshape(4, 4)
    rows = {}
    if "jax" in which:
        import jax
        import jax.numpy as jnp
        xj = jax.device_put(x4)
        xf = fa.device_put(x4, "jax:0")
        f = fa.jit(lambda a: a * 2.0 + 1.0)
        g = jax.jit(lambda a: a * 2.0 + 1.0)
        # Not waited per call, but the last result is waited for inside the timing (``_timed``): XLA's
        # asynchronous backlog must not spill into the next row's time.
        rows["jax:0 jitted a*2+1"] = (lambda: f(xf), lambda: g(xj), "jax.jit")
        rows["jax:0 jitted a*2+1, waited"] = (lambda: f(xf).block_until_ready(),
                                              lambda: g(xj).block_until_ready(), "jax.jit")
        rows["jax:0 eager x*2.0, waited"] = (lambda: (xf * 2.0).block_until_ready(),
                                             lambda: (xj * 2.0).block_until_ready(), "jnp")
        mj, mf = jax.device_put(m44), fa.device_put(m44, "jax:0")
        rows["jax:0 eager x @ y, waited"] = (lambda: (mf @ mf).block_until_ready(),
                                             lambda: (mj @ mj).block_until_ready(), "jnp")
        rows["jax:0 eager sum(x, axis=0), waited"] = (lambda: fnp.sum(mf, axis=0).block_until_ready(),
                                                      lambda: jnp.sum(mj, axis=0).block_until_ready(), "jnp")
        rows["jax:0 eager x[1], waited"] = (lambda: mf[1].block_until_ready(),
                                            lambda: mj[1].block_until_ready(), "jnp")
        del jnp
    if "numpy" in which:
        xn = fa.device_put(x4, "numpy:0")
        yn = fa.device_put(x4[::-1].copy(), "numpy:0")
        y4 = x4[::-1].copy()
        h = fa.jit(lambda a: a * 2.0 + 1.0)
        rows["numpy:0 eager x*2.0"] = (lambda: xn * 2.0, lambda: x4 * 2.0, "NumPy")
        rows["numpy:0 eager x*y"] = (lambda: xn * yn, lambda: x4 * y4, "NumPy")
        rows["numpy:0 jitted a*2+1"] = (lambda: h(xn), lambda: x4 * 2.0 + 1.0, "NumPy")
        rows["numpy:0 eager fnp.multiply(x, y)"] = (lambda: fnp.multiply(xn, yn), lambda: np.multiply(x4, y4),
                                                    "NumPy")
        rows["numpy:0 eager fnp.exp(x)"] = (lambda: fnp.exp(xn), lambda: np.exp(x4), "NumPy")
        mn = fa.device_put(m44, "numpy:0")
        rows["numpy:0 eager x @ y"] = (lambda: mn @ mn, lambda: m44 @ m44, "NumPy")
        rows["numpy:0 eager sum(x, axis=0)"] = (lambda: fnp.sum(mn, axis=0), lambda: np.sum(m44, axis=0), "NumPy")
        rows["numpy:0 eager x[1]"] = (lambda: mn[1], lambda: m44[1], "NumPy")
        rows["numpy:0 eager x + row (broadcast)"] = (lambda: mn + xn, lambda: m44 + x4, "NumPy")
    if "mlx" in which:
        import mlx.core as mx
        xm = mx.array(x4)
        xx = fa.device_put(x4, "mlx:0")
        k = fa.jit(lambda a: a * 2.0 + 1.0)
        km = mx.compile(lambda a: a * 2.0 + 1.0)
        rows["mlx:0 eager x*2.0, evaluated"] = (lambda: (xx * 2.0).block_until_ready(),
                                                lambda: mx.eval(xm * 2.0), "MLX")
        rows["mlx:0 jitted a*2+1, evaluated"] = (lambda: k(xx).block_until_ready(),
                                                 lambda: mx.eval(km(xm)), "mx.compile")
    return rows


def _timed(fn, number):
    """Mean seconds per call of ``number`` calls, the last result waited for (asynchronous backends)."""
    t0 = time.perf_counter()
    for _ in range(number):
        r = fn()
    if hasattr(r, "block_until_ready"):
        r.block_until_ready()
    return (time.perf_counter() - t0) / number


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=3000)
    ap.add_argument("--rows", default="jax,numpy,mlx")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = _rows(args.rows.split(","))
    load0 = os.getloadavg()[0]
    for fa_fn, raw_fn, _ in rows.values():  # warm: traces, compiles, the fast paths' entries
        for _ in range(20):
            fa_fn()
            raw_fn()
    best = {name: [float("inf"), float("inf")] for name in rows}
    for _ in range(args.rounds):
        for name, (fa_fn, raw_fn, _) in rows.items():
            for i, fn in enumerate((fa_fn, raw_fn)):
                t = _timed(fn, args.number) * 1e6
                best[name][i] = min(best[name][i], t)
    load = (load0, os.getloadavg()[0])
    if args.json:
        print(json.dumps({"rows": best, "load": load}))
        return
    print(f"load average {load[0]:.2f} -> {load[1]:.2f}; minimum over {args.rounds} rounds of {args.number} calls")
    print("| call | fnarray (us) | raw (us) | raw form | fnarray / raw |")
    print("|---|---:|---:|---|---:|")
    for name, (tf, tr) in best.items():
        print(f"| {name} | {tf:.2f} | {tr:.2f} | {rows[name][2]} | {tf / tr:.2f} |")


if __name__ == "__main__":
    main()
