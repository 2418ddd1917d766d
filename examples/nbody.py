"""A gravitational N-body simulation in the plane, stepped with ``fa.jit`` + ``fa.scan``.

A heavy star (mass 1) with ``bodies - 1`` light planets on nearly circular orbits
(radii 1, 1.6, 2.2, ..., slightly eccentric, random phases from ``--seed``),
in the centre-of-mass frame, with ``G = 1`` and a small softening length. The
integrator is kick-drift-kick leapfrog (velocity Verlet), which is symplectic: the
energy error stays bounded instead of growing, so the relative energy drift after
``T`` steps is a good check of the whole pipeline.

``fa.scan`` runs all ``--steps`` steps inside one jitted call and records the total
energy after every step. The script prints the relative energy drift at the end
and its largest value along the way, the angular momentum drift, and the time per
step (of a second run, so without compilation).

Usage::

    python examples/nbody.py [--bodies 5] [--steps 2000] [--dt 0.01] [--seed 0] [--device numpy:0]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import fnarray as fa
from _cli import device_from_arg
import fnarray.numpy as fnp

G = 1.0
SOFTENING = 1e-3


def initial_state(key, bodies):
    """``(positions f32[n, 2], velocities f32[n, 2], masses f32[n])`` of a star and its planets."""
    n_planets = bodies - 1
    k_phase, k_ecc = fa.random.split(key)
    star_mass = 1.0
    radii = 1.0 + 0.6 * np.arange(n_planets, dtype=np.float32)
    masses = np.concatenate([[star_mass], np.full(n_planets, 1e-3)]).astype(np.float32)
    phase = np.asarray(fa.random.uniform(k_phase, (n_planets,), maxval=2 * np.pi))
    speed_factor = 1.0 + np.asarray(fa.random.uniform(k_ecc, (n_planets,), minval=-0.05, maxval=0.05))
    pos = np.zeros((bodies, 2), np.float32)
    vel = np.zeros((bodies, 2), np.float32)
    pos[1:, 0], pos[1:, 1] = radii * np.cos(phase), radii * np.sin(phase)
    speed = np.sqrt(G * star_mass / radii) * speed_factor
    vel[1:, 0], vel[1:, 1] = -speed * np.sin(phase), speed * np.cos(phase)
    # the centre-of-mass frame: total momentum zero, centre of mass at the origin
    pos -= (masses[:, None] * pos).sum(0) / masses.sum()
    vel -= (masses[:, None] * vel).sum(0) / masses.sum()
    return pos.astype(np.float32), vel.astype(np.float32), masses


def accelerations(pos, masses):
    """Softened gravitational accelerations ``f32[n, 2]`` of bodies at ``pos: f32[n, 2]``."""
    diff = pos[None, :, :] - pos[:, None, :]                 # diff[i, j] = x_j - x_i
    r2 = fnp.sum(diff * diff, axis=-1) + SOFTENING ** 2
    inv_r3 = r2 ** -1.5
    return G * fnp.sum((masses[None, :] * inv_r3)[:, :, None] * diff, axis=1)


def energy(pos, vel, masses):
    """Total energy (kinetic + softened potential), a float32 scalar."""
    kinetic = 0.5 * fnp.sum(masses * fnp.sum(vel * vel, axis=-1))
    diff = pos[None, :, :] - pos[:, None, :]
    r = fnp.sqrt(fnp.sum(diff * diff, axis=-1) + SOFTENING ** 2)
    n = pos.shape[0]
    pairs = fnp.triu(fnp.ones((n, n), dtype=pos.dtype), k=1)  # each pair once
    potential = -G * fnp.sum(pairs * masses[:, None] * masses[None, :] / r)
    return kinetic + potential


def angular_momentum(pos, vel, masses):
    """Total angular momentum about the origin (z component), a float32 scalar."""
    return fnp.sum(masses * (pos[:, 0] * vel[:, 1] - pos[:, 1] * vel[:, 0]))


def simulate(pos, vel, masses, dt, steps):
    """``steps`` leapfrog steps of size ``dt`` (``steps`` static).

    Returns ``(pos, vel, energies f32[steps])``, the energy after every step.
    """
    def leapfrog(carry, _):
        x, v, a = carry
        v_half = v + 0.5 * dt * a
        x = x + dt * v_half
        a = accelerations(x, masses)
        v = v_half + 0.5 * dt * a
        return (x, v, a), energy(x, v, masses)

    (pos, vel, _), energies = fa.scan(leapfrog, (pos, vel, accelerations(pos, masses)), None, length=steps)
    return pos, vel, energies


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bodies", type=int, default=5, help="number of bodies, star included, >= 2 (default 5)")
    p.add_argument("--steps", type=int, default=2000, help="leapfrog steps (default 2000)")
    p.add_argument("--dt", type=float, default=0.01, help="time step (default 0.01; the inner orbit takes 6.28)")
    p.add_argument("--seed", type=int, default=0, help="seed of the orbital phases (default 0)")
    p.add_argument("--device", default=None,
                   help="a name from fnarray.devices(all_backends=True) (default: the default device)")
    args = p.parse_args(argv)
    args.device = device_from_arg(p, args.device)
    if args.bodies < 2:
        p.error(f"--bodies must be >= 2 (a star and at least one planet), got {args.bodies}")
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    if not (math.isfinite(args.dt) and args.dt > 0):
        p.error(f"--dt must be a positive finite time step, got {args.dt}")
    return args


def main(argv=None) -> dict:
    """Simulate and report; returns a dict.

    Keys: ``energy0``, ``energies`` (after every step, NumPy), ``drift`` (relative energy
    drift at the end), ``max_drift`` (largest along the way), ``angular_momentum_drift``,
    ``time_per_step`` (seconds, second run), ``positions``, ``device``.
    """
    args = parse_args(argv)
    dev = args.device
    pos0, vel0, masses = initial_state(fa.random.key(args.seed), args.bodies)
    pos, vel, m = (fa.device_put(a, dev) for a in (pos0, vel0, masses))
    run = fa.jit(simulate, static_argnums=(4,), device=dev)
    e0 = float(fa.jit(energy, device=dev)(pos, vel, m))
    l0 = float(fa.jit(angular_momentum, device=dev)(pos, vel, m))

    t0 = time.perf_counter()
    out = run(pos, vel, m, args.dt, args.steps)
    out[2].block_until_ready()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    pos_t, vel_t, energies = run(pos, vel, m, args.dt, args.steps)
    energies = np.asarray(energies)
    per_step = (time.perf_counter() - t0) / args.steps

    rel = np.abs(energies - e0) / abs(e0)
    l_t = float(fa.jit(angular_momentum, device=dev)(pos_t, vel_t, m))
    print(f"{args.bodies} bodies (a star and {args.bodies - 1} planets), {args.steps} leapfrog steps of dt={args.dt:g} "
          f"(t = {args.steps * args.dt:g})")
    print(f"  energy: initial {e0:.7f}, final {energies[-1]:.7f}")
    print(f"  relative energy drift: {rel[-1]:.2e} at the end, {rel.max():.2e} at most")
    print(f"  relative angular momentum drift: {abs(l_t - l0) / abs(l0):.2e}")
    print(f"time: {per_step * 1e6:.1f} us per step (one jitted fa.scan over all steps; "
          f"the first call, with compilation, took {first:.2f} s)")
    print(f"device: {dev}")
    return {"energy0": e0, "energies": energies, "drift": float(rel[-1]), "max_drift": float(rel.max()),
            "angular_momentum_drift": abs(l_t - l0) / abs(l0), "time_per_step": per_step,
            "positions": np.asarray(pos_t), "device": str(dev)}


if __name__ == "__main__":
    main()
