"""``log2`` as a primitive: exact at powers of two where the backend has a base-2 logarithm, on every device."""

from __future__ import annotations

import math

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from tests.helpers import on_device


def test_log2_float32_accuracy_and_specials(device):
    xs = np.random.default_rng(0).uniform(1e-3, 1e4, 4000).astype(np.float32)
    got = np.asarray(fa.jit(fnp.log2)(on_device(xs, device)), np.float64)
    ref = np.log2(xs.astype(np.float64))
    ulps = np.abs(got - ref) / np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 3, f"{device}: {ulps.max():.1f} ulps"
    sp = np.asarray(fnp.log2(on_device(np.array([0.0, -1.0, np.inf, np.nan, 1.0], np.float32), device)))
    assert sp[0] == -np.inf and np.isnan(sp[1]) and sp[2] == np.inf and np.isnan(sp[3]) and sp[4] == 0


def test_log2_exact_at_powers_of_two(device):
    k = np.arange(-30, 31)
    got = np.asarray(fnp.log2(on_device(np.float32(2.0) ** k.astype(np.float32), device)))
    if device.backend == "jax":  # XLA has no base-2 logarithm: the decomposition log(x)/log(2), 1 ulp off at some
        np.testing.assert_allclose(got, k, rtol=2e-7)
    else:
        np.testing.assert_array_equal(got, k.astype(np.float32))


def test_log2_gradient_and_complex():
    xs = np.array([0.3, 1.0, 7.5], np.float32)
    g = np.asarray(fa.vmap(fa.grad(fnp.log2))(fnp.asarray(xs)))
    np.testing.assert_allclose(g, 1 / (xs * math.log(2)), rtol=1e-6)
    z = np.array([1 + 1j, -2j], np.complex64)
    np.testing.assert_allclose(np.asarray(fnp.log2(fnp.asarray(z))), np.log2(z), rtol=1e-6)
