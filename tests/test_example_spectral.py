"""``examples/spectral.py``: the pseudo-spectral Burgers solver against the same scheme in NumPy float64, and the
viscosity recovered by gradient descent through the solver (its gradient against a finite difference)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import spectral  # noqa: E402


def _ifrk4_64(nu, u0, steps, dt):
    """IFRK4 for viscous Burgers in NumPy float64 (the scheme of the example, written independently)."""
    n = len(u0)
    k = np.arange(n // 2 + 1)
    ik = 1j * k
    keep = k < n / 3
    e = np.exp(-nu * k * k * dt / 2)

    def nl(v):
        u = np.fft.irfft(v, n)
        return -0.5 * ik * np.fft.rfft(u * u) * keep

    v = np.fft.rfft(np.asarray(u0, np.float64))
    for _ in range(steps):
        a = nl(v)
        b = nl(e * (v + dt / 2 * a))
        c = nl(e * v + dt / 2 * b)
        d = nl(e * e * v + dt * e * c)
        v = e * e * v + dt / 6 * (e * e * a + 2 * e * (b + c) + d)
    return np.fft.irfft(v, n)


def test_solver_matches_numpy_float64():
    u0 = spectral.initial_condition(32)
    got = fa.jit(lambda nu, u: spectral.solve(nu, u, steps=50, dt=0.02))(fnp.asarray(np.float32(0.05)),
                                                                          fnp.asarray(u0))
    want = _ifrk4_64(0.05, u0, 50, 0.02)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)
    assert np.abs(want - u0).max() > 0.1   # the state moved: the comparison is not of u0 with itself


def test_viscosity_recovered_by_gradient_descent():
    out = spectral.main(["--quiet", "--points", "32", "--steps", "30", "--dt", "0.02", "--iters", "50",
                         "--lr", "0.05"])
    assert abs(out["nu"] - 0.07) / 0.07 < 0.05, out["nu"]
    assert out["misfit"] < out["first_misfit"] / 100
    assert abs(out["grad0"] - out["fd0"]) <= 0.02 * abs(out["fd0"]), (out["grad0"], out["fd0"])


def test_bad_command_line(capsys):
    with pytest.raises(SystemExit) as e:
        spectral.main(["--points", "2"])
    assert e.value.code == 2
    assert "--points >= 4" in capsys.readouterr().err
