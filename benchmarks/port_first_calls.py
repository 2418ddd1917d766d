"""First calls of a ported JAX program: a pseudo-spectral Burgers solver against raw JAX and raw MLX.

The program (the twenty-second session's new-user port, rewritten here so that it is kept): 1-D viscous Burgers,
``rfft``/``irfft`` with 2/3 dealiasing, RK4 in ``lax.scan`` (200 steps) under ``jit``, then its energy's
``grad`` with respect to the viscosity, ``vmap`` over initial amplitudes and ``value_and_grad`` with respect to
viscosity and initial state, called twice with different viscosities (the second call should compile nothing).
``--form jitted`` wraps each transform in ``jit`` (``jit(grad(f))``), ``--form eager`` calls the transforms
eagerly around the jitted solver (``grad(f)``, as tutorials often do): fnarray compiled the eager form's forward
and backward programs again at every call until the twenty-third session (``transforms/derived.py``).

Each cell is a fresh process, rounds interleaved: raw JAX (``jax.jit``), fnarray on jax:0, raw MLX (the scan
as a Python loop under ``mx.compile``, which MLX has instead of loops) and fnarray on mlx:0. Each prints its
stages' wall times and its process CPU (user + system, import included), which is what to compare on a loaded
machine.

Usage: python benchmarks/port_first_calls.py [--rounds 3] [--form jitted|eager] [--cells jax,jax:0,mlx,mlx:0]
Prints one line a cell and round; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
N, STEPS, DT = 128, 200, 1e-3
STAGES = ("simulate", "grad", "vmap", "value_and_grad", "value_and_grad_again")


def _program(jax, jnp, lax, eager):
    """The stages of the Burgers program written against ``jax``'s API (JAX itself or fnarray)."""
    length = 2 * math.pi
    x = jnp.linspace(0.0, length, N, endpoint=False)
    k = jnp.fft.rfftfreq(N, d=length / N) * 2 * jnp.pi
    dealias = (jnp.abs(k) < (2.0 / 3.0) * jnp.max(jnp.abs(k))).astype(jnp.float32)

    def rhs(u_hat, nu):
        u = jnp.fft.irfft(u_hat, n=N)
        return -0.5j * k * jnp.fft.rfft(u * u) * dealias - nu * k ** 2 * u_hat

    def rk4(u_hat, nu):
        k1 = rhs(u_hat, nu)
        k2 = rhs(u_hat + 0.5 * DT * k1, nu)
        k3 = rhs(u_hat + 0.5 * DT * k2, nu)
        k4 = rhs(u_hat + DT * k3, nu)
        return u_hat + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    @jax.jit
    def simulate(u0, nu):
        def body(u_hat, _):
            u_hat = rk4(u_hat, nu)
            return u_hat, jnp.fft.irfft(u_hat, n=N)
        u_hat, traj = lax.scan(body, jnp.fft.rfft(u0), None, length=STEPS)
        return jnp.fft.irfft(u_hat, n=N), traj

    def energy(nu, u0):
        return 0.5 * jnp.sum(simulate(u0, nu)[0] ** 2) * (length / N)

    wrap = (lambda f: f) if eager else jax.jit
    u0 = jnp.sin(x) + 0.5 * jnp.sin(2 * x)
    vg = wrap(jax.value_and_grad(energy, argnums=(0, 1)))
    return {"simulate": lambda: simulate(u0, 0.05)[1],
            "grad": lambda: wrap(jax.grad(energy))(0.05, u0),
            "vmap": lambda: wrap(jax.vmap(lambda a: energy(0.05, a * u0)))(jnp.linspace(0.5, 1.5, 4)),
            "value_and_grad": lambda: vg(0.05, u0)[1][1],
            "value_and_grad_again": lambda: vg(0.06, u0)[1][1]}


def _mlx_program(eager):
    """The same stages in raw MLX: the scan is a Python loop under ``mx.compile``."""
    import mlx.core as mx
    import numpy as np
    length = 2 * math.pi
    x = mx.array(np.linspace(0.0, length, N, endpoint=False).astype(np.float32))
    k = mx.array((np.fft.rfftfreq(N, d=length / N) * 2 * np.pi).astype(np.float32))
    dealias = (mx.abs(k) < (2.0 / 3.0) * mx.max(mx.abs(k))).astype(mx.float32)

    def rhs(u_hat, nu):
        u = mx.fft.irfft(u_hat, n=N)
        return (-0.5j * k) * mx.fft.rfft(u * u) * dealias - nu * k ** 2 * u_hat

    def simulate_py(u0, nu):
        u_hat, traj = mx.fft.rfft(u0), []
        for _ in range(STEPS):
            k1 = rhs(u_hat, nu)
            k2 = rhs(u_hat + 0.5 * DT * k1, nu)
            k3 = rhs(u_hat + 0.5 * DT * k2, nu)
            k4 = rhs(u_hat + DT * k3, nu)
            u_hat = u_hat + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            traj.append(mx.fft.irfft(u_hat, n=N))
        return mx.fft.irfft(u_hat, n=N), mx.stack(traj)
    simulate = mx.compile(simulate_py)

    def energy(nu, u0):
        return 0.5 * mx.sum(simulate(u0, nu)[0] ** 2) * (length / N)

    wrap = (lambda f: f) if eager else mx.compile
    u0 = mx.sin(x) + 0.5 * mx.sin(2 * x)
    nu = mx.array(0.05)
    vg = wrap(mx.value_and_grad(energy, argnums=(0, 1)))
    return {"simulate": lambda: simulate(u0, nu)[1],
            "grad": lambda: wrap(mx.grad(energy))(nu, u0),
            "vmap": lambda: wrap(mx.vmap(lambda a: energy(nu, a * u0)))(mx.array(np.linspace(0.5, 1.5, 4),
                                                                               mx.float32)),
            "value_and_grad": lambda: vg(nu, u0)[1][1],
            "value_and_grad_again": lambda: vg(nu * 1.2, u0)[1][1]}


def child(cell, eager):
    """Run the stages in this process; print ``{"stages": {...}, "cpu_s": ...}``."""
    if cell == "mlx":
        import mlx.core as mx
        stages, wait = _mlx_program(eager), mx.eval
    elif cell == "jax":
        import jax
        import jax.numpy as jnp
        stages, wait = _program(jax, jnp, jax.lax, eager), jax.block_until_ready
    else:
        os.environ["FNARRAY_DEVICE"] = cell
        import _checkout  # noqa: F401  (this checkout's fnarray)
        import fnarray as fa
        import fnarray.numpy as fnp
        stages, wait = _program(fa, fnp, fa.lax, eager), fa.block_until_ready
    times = {}
    for name in STAGES:
        t0 = time.perf_counter()
        wait(stages[name]())
        times[name] = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"stages": times, "cpu_s": ru.ru_utime + ru.ru_stime}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--form", choices=("jitted", "eager"), default="jitted")
    p.add_argument("--cells", default="jax,jax:0,mlx,mlx:0")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child, args.form == "eager")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    for r in range(args.rounds):
        for cell in args.cells.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", cell, "--form", args.form], env=env,
                                 capture_output=True, text=True, check=False)
            load = os.getloadavg()[0]
            if out.returncode:
                print(f"round {r} {cell}: failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            stages = " ".join(f"{k} {v:.3f}" for k, v in res["stages"].items())
            print(f"round {r} {args.form} {cell:6s} load {load:4.1f}  process CPU {res['cpu_s']:.2f} s  {stages}",
                  flush=True)


if __name__ == "__main__":
    main()
