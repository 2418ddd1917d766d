"""Float32 math cases shared by the tests of the kernel-IR math bodies on webgpu:0 (``test_webgpu_backend.py``)
and opencl:0 (``test_transcendental.py``): inputs, float64 references (NumPy, ``math``) and tolerances."""

from __future__ import annotations

import math

import numpy as np


def ufunc(fn):
    """``fn`` of Python floats applied elementwise, in float64."""
    return lambda *xs: np.frompyfunc(fn, len(xs), 1)(*[x.astype(np.float64) for x in xs]).astype(np.float64)


def lgamma_ref(v):
    """C's lgamma: +inf at the poles and at +-inf, NaN for NaN."""
    if math.isnan(v):
        return v
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return math.inf
    return math.lgamma(v)


LIN = np.linspace(-4, 4, 1001).astype(np.float32)
POS = np.linspace(0.01, 6, 1001).astype(np.float32)
UNIT = np.linspace(-0.999, 0.999, 1001).astype(np.float32)
Y = np.linspace(-3, 3, 1001).astype(np.float32)
SPECIAL = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 3e9, -3e9, 0.5, 1.0, -1.0], np.float32)

# op, inputs, float64 reference, tolerance (rtol = atol)
HELPER_CASES = [
    ("erf", [LIN], ufunc(math.erf), 1e-5),
    ("lgamma", [POS], ufunc(math.lgamma), 2e-5),
    ("lgamma", [np.linspace(-3.9, 0.4, 1001).astype(np.float32) + np.float32(1e-3)], ufunc(math.lgamma), 5e-5),
    ("log1p", [POS - 0.5], np.log1p, 1e-5),
    ("expm1", [LIN], np.expm1, 1e-5),
    ("cbrt", [LIN], np.cbrt, 1e-5),
    ("asin", [UNIT], np.arcsin, 1e-5),
    ("acos", [UNIT], np.arccos, 1e-5),
    ("atan", [LIN * 10], np.arctan, 1e-5),
    ("acosh", [POS + 1], np.arccosh, 1e-5),
    ("tanh", [LIN], np.tanh, 1e-5),
    ("log10", [POS], np.log10, 1e-5),
    ("pow", [np.abs(LIN) + np.float32(0.1), Y], np.power, 1e-5),
    ("fmod", [LIN * 100, Y + np.float32(1e-3)], np.fmod, 0.0),
    ("atan2", [LIN, Y], np.arctan2, 1e-5),
    ("hypot", [LIN, Y], np.hypot, 1e-5),
    ("copysign", [LIN, Y], np.copysign, 0.0),
    ("max", [LIN, Y], np.maximum, 0.0),
    ("min", [LIN, Y], np.minimum, 0.0),
]
# op, reference: every pair of SPECIAL values / every SPECIAL value
BINARY_SPECIAL = [("pow", np.power), ("fmod", np.fmod), ("max", np.maximum), ("min", np.minimum),
                  ("nextafter", np.nextafter), ("hypot", np.hypot), ("atan2", np.arctan2),
                  ("copysign", np.copysign)]
UNARY_SPECIAL = [("erf", ufunc(math.erf)), ("lgamma", ufunc(lgamma_ref)), ("log1p", np.log1p), ("expm1", np.expm1),
                 ("cbrt", np.cbrt), ("tanh", np.tanh), ("asin", np.arcsin), ("acos", np.arccos),
                 ("atan", np.arctan), ("acosh", np.arccosh), ("log", np.log), ("log10", np.log10)]


def check_binary_special(run, name, reference):
    """``run(name, [a, b])`` on every pair of ``SPECIAL`` values against ``reference``: the same NaNs, infinities
    and signed zeros, finite values to float32 rounding."""
    a, b = (g.ravel().copy() for g in np.meshgrid(SPECIAL, SPECIAL))
    got = run(name, [a, b])
    with np.errstate(all="ignore"):
        want = reference(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]), err_msg=name)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=0, err_msg=name)


def check_unary_special(run, name, reference):
    """``run(name, [SPECIAL])`` against ``reference`` in float64: the same NaNs, values to float32 rounding and
    signed zeros (lgamma(1) = lgamma(2) = 0 only to float32 rounding, sign aside)."""
    got = run(name, [SPECIAL])
    with np.errstate(all="ignore"):
        want = reference(SPECIAL.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
    ok = ~np.isnan(want)
    tol = 2e-5 if name == "lgamma" else 1e-6
    np.testing.assert_allclose(got[ok], want[ok], rtol=tol, atol=tol, err_msg=name)
    if name != "lgamma":
        np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]), err_msg=name)
