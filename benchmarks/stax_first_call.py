"""First calls of ``example_libraries.stax`` layers on jax:0 against raw JAX's ``jax.example_libraries.stax``.

Issue 28 item 2 ("eager execution compiles each shape once"). For each layer, a fresh process runs JAX's init and
apply at a new shape, then fnarray's on jax:0 (same key, same input), and prints for each its XLA compiles (JAX's
``/jax/core/compile/backend_compile_duration`` events), their seconds, and the process CPU time of init + apply
(the results read back), with fnarray's CPU time as a ratio of JAX's (``--fnarray-first``: fnarray's run first,
paying XLA's one-time set-up in the process). Layers: ``Dense(5)`` on ``(2, 3)``, the
test suite's small CNN (``Conv``, ``Elu``, ``MaxPool``, ``Flatten``, ``Dense``, ``Softmax`` on ``(2, 7, 7, 2)``)
and MLP (three ``Dense`` layers on ``(3, 6)``). With ``--sampler`` the same for one first call of a sampler of
``random`` at ``(3, 5)`` (``truncated_normal`` between -2 and 2, ``normal``, ``uniform``, ``bernoulli`` at 0.5,
``categorical`` of zero logits). With ``--loop`` the same for a loop whose shape grows each step, run twice (the
first pass compiles each new shape, the second, ``steady``, none): ``scalars`` (a row appended to a cache of width 8,
then ``cache * 2.0 + 1``, ``(y - cache) / 4.0``, ``0.5 * z``, a sum: operators with Python scalars and arrays of one
shape, 24 steps) and ``decode`` (``benchmarks/programs.py``'s eager decode step, width 32, 24 steps).

Usage: python benchmarks/stax_first_call.py [--layer Dense --layer cnn ...] [--sampler normal ...] [--loop scalars]
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _checkout  # noqa: F401 (this checkout's fnarray first on sys.path)

LAYERS = ("Dense", "cnn", "mlp")
SAMPLERS = ("truncated_normal", "normal", "uniform", "bernoulli", "categorical")
LOOPS = ("scalars", "decode")
LOOP_STEPS = 24


def _loop_step(np_, name):
    """One step of a growing loop (``--loop``) written with ``np_`` (``jax.numpy`` or ``fnarray.numpy``)."""
    def scalars(cache, row):
        cache = np_.concatenate([cache, row], axis=0)
        y = cache * 2.0 + 1
        z = (y - cache) / 4.0
        return cache, np_.sum(0.5 * z)

    def decode(cache, row):
        cache = np_.concatenate([cache, row], axis=0)
        sc = row @ cache.T
        e = np_.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    return {"scalars": scalars, "decode": decode}[name]


def _sampler(random, name, zeros):
    """``(key, *args)`` -> the sampler's first call at ``(3, 5)``, for ``random`` (JAX's or fnarray's)."""
    args = {"truncated_normal": (-2.0, 2.0, (3, 5)), "normal": ((3, 5),), "uniform": ((3, 5),),
            "bernoulli": (0.5, (3, 5)), "categorical": (zeros,)}[name]
    return lambda key: getattr(random, name)(key, *args)


def _layer(stax, name):
    return {
        "Dense": (lambda: stax.Dense(5), (2, 3)),
        "cnn": (lambda: stax.serial(stax.Conv(4, (3, 3)), stax.Elu, stax.MaxPool((2, 2), (2, 2)), stax.Flatten,
                                    stax.Dense(3), stax.Softmax), (2, 7, 7, 2)),
        "mlp": (lambda: stax.serial(stax.Dense(8), stax.Relu, stax.Dense(8), stax.Tanh, stax.Dense(4),
                                    stax.LogSoftmax), (3, 6)),
    }[name]


def _measure(name, order) -> dict:
    """One process's numbers: JAX's, then fnarray's on jax:0."""
    import time

    import jax
    import jax.monitoring
    import numpy as np
    from jax.example_libraries import stax as jstax

    import fnarray as fa
    from fnarray.example_libraries import stax as fstax
    compiles = []

    def listener(event, secs, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(secs)
    jax.monitoring.register_event_duration_secs_listener(listener)
    if name in LOOPS:
        return _measure_loop(name, compiles, order)
    if name in SAMPLERS:
        return _measure_sampler(name, compiles, order)
    make, shape = _layer(jstax, name)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    out = {}
    for lib in order:
        compiles.clear()
        t0 = time.process_time()
        if lib == "jax":
            init, apply = make()
            _s, params = init(jax.random.PRNGKey(7), shape)
            leaves = jax.tree_util.tree_leaves((params, apply(params, x)))
        else:
            init, apply = _layer(fstax, name)[0]()
            dev = fa.devices("jax")[0]
            _s, params = init(fa.device_put(fa.random.PRNGKey(7), dev), shape)
            leaves = fa.tree_util.tree_leaves((params, apply(params, fa.device_put(x, dev))))
        [np.asarray(a) for a in leaves]
        out[lib] = {"compiles": len(compiles), "compile_s": sum(compiles), "cpu_s": time.process_time() - t0}
    return out


def _measure_sampler(name, compiles, order) -> dict:
    import time

    import jax
    import numpy as np

    import fnarray as fa
    dev = fa.devices("jax")[0]
    zeros = np.zeros((3, 5), np.float32)
    out = {}
    libs = {"jax": (jax.random, jax.random.PRNGKey(7)),
            "fnarray": (fa.random, fa.device_put(fa.random.PRNGKey(7), dev))}
    for lib in order:
        random, key = libs[lib]
        draw = _sampler(random, name, zeros if lib == "jax" else fa.device_put(zeros, dev))
        compiles.clear()
        t0 = time.process_time()
        np.asarray(draw(key))
        out[lib] = {"compiles": len(compiles), "compile_s": sum(compiles), "cpu_s": time.process_time() - t0}
    return out


def _measure_loop(name, compiles, order) -> dict:
    """A growing loop's two passes (``--loop``), raw JAX's and fnarray's on jax:0: compiles and CPU seconds."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import fnarray as fa
    import fnarray.numpy as fnp
    dev = fa.devices("jax")[0]
    width = 8 if name == "scalars" else 32
    row = np.full((1, width), 0.02, np.float32)
    out = {}
    for lib in order:
        np_, put = (jnp, jnp.asarray) if lib == "jax" else (fnp, lambda a: fa.device_put(a, dev))
        step, r = _loop_step(np_, name), put(row)
        res = {}
        for part in ("", "steady_"):
            compiles.clear()
            t0 = time.process_time()
            cache = put(np.zeros((1, width), np.float32))
            for _ in range(LOOP_STEPS):
                cache, y = step(cache, r)
            np.asarray(y)
            res.update({part + "compiles": len(compiles), part + "cpu_s": time.process_time() - t0})
        out[lib] = res
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", action="append", choices=LAYERS)
    ap.add_argument("--sampler", action="append", choices=SAMPLERS)
    ap.add_argument("--loop", action="append", choices=LOOPS)
    ap.add_argument("--fnarray-first", action="store_true",
                    help="run fnarray's calls first in each process (XLA's one-time set-up then counts as fnarray's)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_measure(args.child, ("fnarray", "jax") if args.fnarray_first else ("jax", "fnarray"))))
        return
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    print(f"{'layer':16} {'jax compiles':>12} {'fa compiles':>11} {'jax cpu s':>9} {'fa cpu s':>8} {'fa/jax':>6}"
          f" {'steady jax/fa ms':>16}")
    for name in (args.layer or []) + (args.sampler or []) + (args.loop or []) or LAYERS:
        got = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name] + ["--fnarray-first"] * args.fnarray_first, env=env, check=True,
                             capture_output=True, text=True).stdout
        r = json.loads(got.strip().splitlines()[-1])
        j, f = r["jax"], r["fnarray"]
        print(f"{name:16} {j['compiles']:12d} {f['compiles']:11d} {j['cpu_s']:9.2f} {f['cpu_s']:8.2f} "
              f"{f['cpu_s'] / j['cpu_s']:6.2f}" + (f" {j['steady_cpu_s'] * 1e3:7.1f}/{f['steady_cpu_s'] * 1e3:.1f}"
                                                   f" ({j['steady_compiles']}/{f['steady_compiles']} compiles)"
                                                   if "steady_cpu_s" in f else ""))


if __name__ == "__main__":
    main()
