"""A ``pmap`` training step on 8 XLA host devices: ``fa.pmap`` against ``jax.pmap`` on the same step.

The step is the classic data-parallel update (a tanh regression's gradient ``pmean``'ed over the ``batch``
axis, parameters replicated as 8 copies), batch ``(8, 32, 64)`` float32 handed in as NumPy arrays each step (so
each side places it on the devices every call, as a ``pmap`` loop over host batches does), the parameters of one
step feeding the next. Rows: ``fa.pmap`` with NumPy batches; ``fa.pmap`` with batches already on ``jax:0`` (a
placement from one device: what ``device_put`` of a NumPy value to a ``NamedSharding`` did before the
twenty-fourth session); ``jax.pmap``. Each row: ``--steps`` steps, ``--repeat`` rounds interleaved, process CPU
time a step (min and median). Asserts nothing.

Usage: python benchmarks/pmap_step.py [--steps 40] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
from _checkout import ROOT as _ROOT  # noqa: E402,F401  (this checkout's fnarray, not an installed one)

import numpy as np  # noqa: E402

import fnarray as fa  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def make_update(np_, grad, lax):
    """The step ``(w, x, y) -> (w', loss)`` written with one library's ``numpy``, ``grad`` and ``lax``."""
    def update(w, x, y):
        loss = lambda w: np_.mean((np_.tanh(x @ w) - y) ** 2)
        return w - 0.5 * lax.pmean(grad(loss)(w), "batch"), lax.pmean(loss(w), "batch")
    return update


def cpu_ms_a_step(step, w, x, y, steps) -> float:
    t = time.process_time()
    for _ in range(steps):
        w, loss = step(w, x, y)
    np.asarray(loss)
    return (time.process_time() - t) / steps * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    r = np.random.RandomState(0)
    w = np.broadcast_to(r.randn(64, 16).astype(np.float32) * 0.1, (8, 64, 16)).copy()
    x, y = r.randn(8, 32, 64).astype(np.float32), r.randn(8, 32, 16).astype(np.float32)
    fstep = fa.pmap(make_update(fa.numpy, fa.grad, fa.lax), "batch")
    rows = {"fa.pmap, NumPy batches": (fstep, x, y),
            "fa.pmap, batches on jax:0": (fstep, fa.device_put(x, "jax:0"), fa.device_put(y, "jax:0")),
            "jax.pmap, NumPy batches": (jax.pmap(make_update(jnp, jax.grad, jax.lax), "batch"), x, y)}
    times = {k: [] for k in rows}
    for k, (step, xs, ys) in rows.items():
        cpu_ms_a_step(step, w, xs, ys, 3)   # compile
    for _ in range(args.repeat):
        for k, (step, xs, ys) in rows.items():
            times[k].append(cpu_ms_a_step(step, w, xs, ys, args.steps))
    print(f"load average {os.getloadavg()[0]:.1f}; CPU ms a step over {args.steps} steps, {args.repeat} rounds")
    for k, v in times.items():
        print(f"{k:28s} min {min(v):.3f}  median {sorted(v)[len(v) // 2]:.3f}")


if __name__ == "__main__":
    main()
