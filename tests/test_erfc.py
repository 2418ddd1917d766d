"""``erfc`` as a primitive: accurate in relative terms where ``1 - erf(x)`` cancels to 0, on every device.

The reference is Python's ``math.erfc`` in float64; float32 results are measured in float32 ulps of the
reference (``numpy.spacing``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax
from fnarray.core import primitives as P
from tests.helpers import on_device

F32 = np.dtype(np.float32)
_XS = np.linspace(-6.0, 9.0, 6001).astype(np.float32)


def _ulps(got, x):
    ref = np.array([math.erfc(float(v)) for v in x])
    return np.abs(np.asarray(got, np.float64) - ref) / np.spacing(ref.astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_erfc_float32_within_a_few_ulps(device, mode):
    x = on_device(_XS, device)
    f = fnp.erfc if mode == "eager" else fa.jit(fnp.erfc)
    got = np.asarray(f(x))
    assert got.dtype == F32
    err = _ulps(got, _XS)
    worst = int(err.argmax())
    assert err.max() <= 6, f"{device}: {err.max():.1f} ulps at x={_XS[worst]}"


def test_erfc_special_values(device):
    x = on_device(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 10.0, 30.0, -30.0], np.float32), device)
    got = np.asarray(fnp.erfc(x))
    np.testing.assert_array_equal(got[:4], [1.0, 1.0, 0.0, 2.0])
    assert np.isnan(got[4])
    assert 0 <= got[5] < 1e-43 and got[6] == 0 and got[7] == 2


def test_erfc_is_not_one_minus_erf(device):
    # Regression: fnp.erfc was 1 - erf(x), which is exactly 0 in float32 once erf(x) rounds to 1 (x > ~3.9).
    x = on_device(np.array([4.0, 5.0, 6.0], np.float32), device)
    assert np.all(np.asarray(fnp.subtract(1, fnp.erf(x))) == 0)  # the cancellation the primitive avoids
    got = np.asarray(fnp.erfc(x), np.float64)
    np.testing.assert_allclose(got, [math.erfc(4.0), math.erfc(5.0), math.erfc(6.0)], rtol=1e-6)
    assert got[0] == pytest.approx(1.5417257900280018e-08, rel=1e-6)


def test_erfc_gradient(device):
    xs = np.linspace(-6.0, 9.0, 301).astype(np.float32)
    x = on_device(xs, device)
    g = np.asarray(fa.vmap(fa.grad(fnp.erfc))(x), np.float64)
    ref = -2 / math.sqrt(math.pi) * np.exp(-xs.astype(np.float64) ** 2)
    # exp(-x*x) in float32 loses x**2 * 2**-24 relative: 1e-5 at x = 9.
    np.testing.assert_allclose(g, ref, rtol=2e-5, atol=1e-44)


def test_erfc_gradient_finite_differences():
    xs = np.array([-2.0, -0.3, 0.2, 0.7, 1.9, 3.1], np.float64)
    g = np.asarray(fa.vmap(fa.grad(fnp.erfc))(fnp.asarray(xs)), np.float64)
    h = 1e-6
    fd = np.array([(math.erfc(v + h) - math.erfc(v - h)) / (2 * h) for v in xs])
    np.testing.assert_allclose(g, fd, rtol=1e-6)


@pytest.mark.filterwarnings("ignore::fnarray.FallbackWarning")
@pytest.mark.enable_x64
def test_erfc_float64(device):
    # float64 is native on numpy, jax and opencl; on mlx it falls back (the decomposition is float32-accurate).
    xs = np.linspace(-6.0, 25.0, 311)
    try:
        x = on_device(xs, device)
    except Exception as e:  # a device without float64 refuses the array itself
        pytest.skip(f"{device} has no float64: {e}")
    got = np.asarray(fa.jit(fnp.erfc)(x))
    assert got.dtype == np.float64
    ref = np.array([math.erfc(v) for v in xs])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)


def test_erfc_is_one_primitive_in_the_ir():
    prog = fa.make_ir(fnp.erfc)(np.ones(3, np.float32))
    assert [e.primitive for e in prog.eqns] == [P.erfc]
    assert lax.erfc is not None


def test_erfc_float16_computes_in_float32(device):
    xs = np.array([0.25, 1.0, 2.0, -1.5], np.float16)
    got = np.asarray(fnp.erfc(on_device(xs, device)))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), [math.erfc(float(v)) for v in xs], rtol=2e-3)
