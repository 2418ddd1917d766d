"""The viscous Burgers equation on a periodic domain, solved pseudo-spectrally, with ``grad`` through the solver.

``u_t + u u_x = nu u_xx`` on ``[0, 2 pi)``, ``--points`` grid points. In Fourier space (``fnp.fft.rfft``)
the viscous term is diagonal and the nonlinear term ``-(u^2 / 2)_x`` is computed on the grid (2/3-rule
dealiasing). Time stepping is the integrating-factor fourth-order Runge-Kutta scheme ("IFRK4": the
viscosity integrated exactly, Trefethen, "Spectral Methods in MATLAB", ch. 10), ``--steps`` steps of ``dt``
inside one ``fa.scan``.

The inverse problem: the final state ``u(T)`` is observed for an unknown viscosity; starting from a wrong
guess, gradient descent on ``log nu`` (Adam, ``fa.optim``) with ``fa.grad`` through all the steps (every
``rfft``/``irfft`` transposed) recovers it. The script prints the recovered viscosity, the final misfit,
and the gradient against a central finite difference at the initial guess.

Usage::

    python examples/spectral.py [--points 64] [--steps 100] [--dt 0.01] [--nu 0.07] [--guess 0.02]
                                [--iters 80] [--lr 0.05] [--device numpy:0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from _cli import device_from_arg


def initial_condition(points):
    """``u0 f32[points]``: a smooth periodic profile that steepens into a front."""
    x = 2 * np.pi * np.arange(points) / points
    return (np.sin(x) + 0.5 * np.cos(2 * x) + 0.2).astype(np.float32)


def wavenumbers(points):
    """``(ik c64[points//2+1], dealias f32[points//2+1], k2 f32[points//2+1])`` for ``rfft`` of ``points``."""
    k = np.arange(points // 2 + 1, dtype=np.float64)
    dealias = (k < points / 3).astype(np.float32)    # the 2/3 rule
    return (1j * k).astype(np.complex64), dealias, (k * k).astype(np.float32)


def solve(nu, u0, *, steps, dt):
    """``u(T)`` for viscosity ``nu`` (a scalar array) from ``u0`` after ``steps`` IFRK4 steps of ``dt``."""
    n = u0.shape[-1]
    ik, dealias, k2 = (fnp.asarray(a) for a in wavenumbers(n))
    half = fnp.exp(-nu * k2 * (dt / 2))          # the integrating factor over half a step
    e_half = fnp.astype(half, fnp.complex64)
    e_full = e_half * e_half

    def nonlinear(v):
        u = fnp.fft.irfft(v, n=n)
        return -0.5 * ik * fnp.fft.rfft(u * u) * dealias

    def step(v, _):
        a = nonlinear(v)
        b = nonlinear(e_half * (v + (dt / 2) * a))
        c = nonlinear(e_half * v + (dt / 2) * b)
        d = nonlinear(e_full * v + dt * e_half * c)
        v = e_full * v + (dt / 6) * (e_full * a + 2 * e_half * (b + c) + d)
        return v, None

    v, _ = fa.scan(step, fnp.fft.rfft(u0), None, length=steps)
    return fnp.fft.irfft(v, n=n)


def misfit(log_nu, u0, observed, *, steps, dt):
    """Mean squared difference between ``u(T)`` at ``exp(log_nu)`` and the observation."""
    return fnp.mean((solve(fnp.exp(log_nu), u0, steps=steps, dt=dt) - observed) ** 2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--dt", type=float, default=0.01)
    p.add_argument("--nu", type=float, default=0.07, help="the viscosity that made the observation")
    p.add_argument("--guess", type=float, default=0.02, help="the first guess of the viscosity")
    p.add_argument("--iters", type=int, default=80)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true", help="print nothing (main() still returns the results)")
    args = p.parse_args(argv)
    if args.points < 4 or args.steps < 1 or args.dt <= 0 or args.nu <= 0 or args.guess <= 0 or args.iters < 0:
        p.error("--points >= 4, --steps >= 1 and positive --dt, --nu and --guess are needed")
    device = device_from_arg(p, args.device)
    say = (lambda *a: None) if args.quiet else print
    kw = {"steps": args.steps, "dt": args.dt}

    u0 = fa.device_put(fnp.asarray(initial_condition(args.points)), device)
    observed = fa.jit(lambda nu, u: solve(nu, u, **kw), device=device)(fnp.asarray(np.float32(args.nu)), u0)
    loss_and_grad = fa.jit(fa.value_and_grad(lambda ln, u, obs: misfit(ln, u, obs, **kw)), device=device)

    log_nu = fnp.asarray(np.float32(math.log(args.guess)))
    # The gradient at the first guess against a central finite difference (float32: a relative step of 1e-2).
    loss_fn = fa.jit(lambda ln, u, obs: misfit(ln, u, obs, **kw), device=device)
    h = 1e-2
    fd = (float(loss_fn(log_nu + h, u0, observed)) - float(loss_fn(log_nu - h, u0, observed))) / (2 * h)
    first_loss, g0 = loss_and_grad(log_nu, u0, observed)
    say(f"guess nu={args.guess:.4f}: misfit {float(first_loss):.3e}, d misfit / d log nu = {float(g0):.5e} "
        f"(central difference {fd:.5e})")

    opt = fa.optim.adam(args.lr)
    state = opt.init(log_nu)
    loss = first_loss
    for it in range(args.iters):
        loss, g = loss_and_grad(log_nu, u0, observed)
        updates, state = opt.update(g, state, log_nu)
        log_nu = fa.optim.apply_updates(log_nu, updates)
        if not args.quiet and (it % 10 == 0 or it == args.iters - 1):
            say(f"iter {it:3d}: nu={math.exp(float(log_nu)):.5f} misfit {float(loss):.3e}")
    nu_hat = math.exp(float(log_nu))
    final = float(loss_fn(log_nu, u0, observed))
    say(f"recovered nu={nu_hat:.5f} (true {args.nu}), relative error {abs(nu_hat - args.nu) / args.nu:.2e}, "
        f"misfit {final:.3e} (from {float(first_loss):.3e})")
    return {"nu": nu_hat, "misfit": final, "first_misfit": float(first_loss), "grad0": float(g0), "fd0": fd,
            "observed": np.asarray(observed)}


if __name__ == "__main__":
    main()
