"""The data-parallel step of ``examples/data_parallel.py`` on 1, 2, 4 and 8 XLA host devices: fnarray's
``jit(shard_map(...))`` against raw JAX writing the same step with ``jax.shard_map``, and the communication
share of the step.

One process with 8 forced host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``, set here
before JAX starts); the mesh of each size takes the first devices. Both sides train the same 64-64-10
perceptron on the same global batch (``--batch``, split over the devices) with SGD, and each step's
gradients are ``pmean``'ed over the mesh. Same batch, dtypes (float32, int32 labels), placement (parameters
replicated, batch split) and no donation on both sides. Each side runs ``--warmup`` steps, then ``--steps``
timed steps (the parameters of one step feed the next; every output waited for at the end), interleaved over
``--repeat`` rounds in alternating order; the best round is reported (a busy machine disturbs less), and the
``raw/fa`` ratio of the round medians next to it, and the ratio of the best rounds' CPU time (``cpu``: the
work each side does, which a busy machine hardly changes). The communication share is
``1 - t(step without the pmean) / t(step)`` on the raw JAX side. The target is fnarray >= 0.9 of raw JAX's
speed (the ``raw/fa`` column). The load average is printed with each size (the machine may be shared).
Asserts nothing.

Usage: python benchmarks/data_parallel.py [--batch 512] [--steps 20] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
from _checkout import ROOT as _ROOT  # noqa: E402  (this checkout's fnarray, not an installed one)

import numpy as np  # noqa: E402

_EXAMPLE = os.path.join(_ROOT, "examples", "data_parallel.py")


def _example():
    """examples/data_parallel.py by path (this file has the same name, so not through sys.path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("data_parallel_example", _EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def raw_jax_step(mesh, lr, comm=True):
    import jax
    import jax.numpy as jnp
    P = jax.sharding.PartitionSpec

    def loss(p, x, y):
        h = jnp.maximum(x @ p["w1"] + p["b1"], 0.0)
        logits = h @ p["w2"] + p["b2"]
        m = jnp.max(logits, axis=-1, keepdims=True)  # the example's formula, term for term
        logp = logits - m - jnp.log(jnp.sum(jnp.exp(logits - m), axis=-1, keepdims=True))
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def local(p, x, y):
        value, g = jax.value_and_grad(loss)(p, x, y)
        if comm:
            g = jax.lax.pmean(g, "data")
            value = jax.lax.pmean(value, "data")
        return jax.tree.map(lambda a, b: a - lr * b, p, g), value
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()),
                                 check_vma=False))


def timed(step, params, x, y, n):
    """Seconds per step, wall clock and this process's CPU time (all its threads: a shared machine slows
    the first, hardly the second)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        params, loss = step(params, x, y)
    for v in (*params.values(), loss):
        v.block_until_ready()
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    import jax

    import fnarray as fa
    from fnarray.sharding import NamedSharding, P

    ex = _example()
    x_all, y_all = ex.load_data()
    r = np.random.RandomState(0)
    idx = r.randint(0, len(x_all), a.batch)
    x, y = x_all[idx], y_all[idx]
    p0 = ex.init_params(0)
    print(f"global batch {a.batch}, {a.steps} steps per round, best of {a.repeat}; {jax.__version__}")
    print(f"{'devices':>7} {'fnarray ms':>11} {'raw JAX ms':>11} {'raw/fa':>7} {'median':>7} {'cpu':>7} "
          f"{'comm share':>11} {'load':>5}")
    for n in (1, 2, 4, 8):
        mesh = fa.make_mesh((n,), ("data",), devices=fa.devices("jax")[:n])
        fa_step = ex.data_parallel_step(mesh, 0.1)
        raw, raw_nocomm = raw_jax_step(mesh.jax_mesh, 0.1), raw_jax_step(mesh.jax_mesh, 0.1, comm=False)
        rep, dat = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        fp = {k: fa.device_put(v, rep) for k, v in p0.items()}
        jp = {k: jax.device_put(v, rep.jax_sharding) for k, v in p0.items()}
        fx, fy = fa.device_put(x, dat), fa.device_put(y, dat)
        jx, jy = jax.device_put(x, dat.jax_sharding), jax.device_put(y, dat.jax_sharding)
        sides = ((fa_step, fp, fx, fy), (raw, jp, jx, jy), (raw_nocomm, jp, jx, jy))
        for step, p, xx, yy in sides:
            timed(step, p, xx, yy, a.warmup)
        times, cpus = [[], [], []], [[], [], []]
        for r in range(a.repeat):
            order = range(3) if r % 2 == 0 else reversed(range(3))  # neither side always runs first
            for i in order:
                step, p, xx, yy = sides[i]
                t, c = timed(step, p, xx, yy, a.steps)
                times[i].append(t)
                cpus[i].append(c)
        t_fa, t_raw, t_nc = (min(t) for t in times)
        med = [sorted(t)[len(t) // 2] for t in times]
        c_fa, c_raw = min(cpus[0]), min(cpus[1])
        share = max(0.0, 1 - t_nc / t_raw)
        print(f"{n:>7} {t_fa * 1e3:>11.3f} {t_raw * 1e3:>11.3f} {t_raw / t_fa:>7.2f} {med[1] / med[0]:>7.2f} "
              f"{c_raw / c_fa:>7.2f} {share:>10.0%} {os.getloadavg()[0]:>5.1f}", flush=True)


if __name__ == "__main__":
    main()
