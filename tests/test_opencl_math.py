"""Float32 math functions against NumPy on edge values: the OpenCL renderer's call-free forms and WGSL's builtins.

On opencl:0 ``floor``, ``ceil``, ``round``, ``trunc``, ``sqrt``, ``rsqrt``, ``sin``, ``cos``, ``expm1``, ``log1p``,
``erf`` and ``pow`` print as helpers without library calls (``fnarray/lowering/kernels/opencl_math.py``); the roundings
and square roots must equal NumPy's float32 results bit for bit, the others stay within their documented ulp
bounds of the float64 result, and every special value (NaN, infinities, signed zeros, subnormals, 2^23 +- 0.5,
1e30) comes out as NumPy's. The same values run on numpy:0 and webgpu:0 (WGSL's builtins, which promise less for
subnormals and huge arguments: there only the values WGSL specifies are compared).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import fnarray as fa
import fnarray.numpy as fnp
from helpers import require_backend

_TINY = float(np.finfo(np.float32).tiny)
_EDGES = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, _TINY, -_TINY, 0.5, -0.5,
                     1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 2.0 ** 23 - 0.5, -(2.0 ** 23 - 0.5), 2.0 ** 23,
                     2.0 ** 23 + 1, -(2.0 ** 23 + 1), 2.0 ** 24, 1e30, -1e30, 3.4e38, -3.4e38, 1.0, -1.0,
                     np.pi, -np.pi, np.pi / 2, 2.0 ** 20 - 0.5, 2.0 ** 20, -(2.0 ** 20), 1e7, -1e7, 17.3, -17.4,
                     88.72, 88.73, -0.99999994, -1.0000001, 0.875, 0.87499994, 4.0, 3.9999998])


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    parts = [_EDGES, rng.standard_normal(3000).astype(np.float32) * 10, rng.uniform(-1, 1, 1000) * 2.0 ** 20,
             np.geomspace(1e-38, 1e38, 600), -np.geomspace(1e-38, 1e38, 600), rng.uniform(-25, 95, 1000)]
    return np.concatenate([np.asarray(p, np.float32) for p in parts])


# The call-free forms are OpenCL's; numpy:0 is the reference's own run and webgpu:0 the other kernel target (jax and
# mlx run their own libraries, which tests/test_parity.py covers).
_BACKENDS = ("numpy", "opencl", "webgpu")


@pytest.fixture(params=_BACKENDS)
def kernel_device(request):
    return require_backend(request.param)[0]


def _run(f, device, *xs):
    return np.asarray(fa.jit(f, device=device)(*(fa.device_put(fnp.asarray(x), device) for x in xs)))


def _keep(x, device):
    """The inputs WGSL's builtins are held to: no subnormals (lavapipe may flush them)."""
    if device.backend != "webgpu":
        return np.ones(x.shape, bool)
    return ~((x != 0) & (np.abs(x) < _TINY))


_EXACT = {"floor": (fnp.floor, np.floor), "ceil": (fnp.ceil, np.ceil), "round": (fnp.round, np.round),
          "trunc": (fnp.trunc, np.trunc), "sqrt": (fnp.sqrt, np.sqrt),
          "rsqrt": (fa.lax.rsqrt, lambda v: np.float32(1) / np.sqrt(v))}


@pytest.mark.parametrize("name", list(_EXACT))
def test_roundings_and_square_roots_equal_numpy_bit_for_bit(kernel_device, name):
    device = kernel_device
    f, ref = _EXACT[name]
    x = _inputs()
    got = _run(f, device, x)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = ref(x).astype(np.float32)
    keep = _keep(x, device)
    if device.backend == "webgpu":   # lavapipe's sqrt and inverseSqrt are not correctly rounded
        if name in ("sqrt", "rsqrt"):
            np.testing.assert_allclose(got[keep], want[keep], rtol=3e-7, equal_nan=True, err_msg=name)
            return
        keep &= np.abs(x) < 2.0 ** 31   # WGSL's round/floor of huge values go through its own conversions
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    bad = keep & ~same
    assert not bad.any(), f"{name} on {device}: x={x[bad][:6]} got={got[bad][:6]} want={want[bad][:6]}"


_ULP = {"sin": (fnp.sin, np.sin, 2.0), "cos": (fnp.cos, np.cos, 2.0), "expm1": (fnp.expm1, np.expm1, 2.0),
        "log1p": (fnp.log1p, np.log1p, 3.0), "erf": (fa.lax.erf, scipy.special.erf, 3.0)}


@pytest.mark.parametrize("name", list(_ULP))
def test_transcendentals_within_their_ulp_bounds_and_specials_as_numpy(kernel_device, name):
    device = kernel_device
    f, ref, bound = _ULP[name]
    x = _inputs(1)
    if name == "log1p":
        x = np.concatenate([x, np.float32([-1.0, -2.0, 1e-8, -1e-8])])
    got = _run(f, device, x).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        want = ref(x.astype(np.float64))
        want32 = want.astype(np.float32)
    keep = _keep(x, device)
    if device.backend == "webgpu" and name in ("sin", "cos"):
        keep &= np.abs(x) < 1e4     # WGSL does not specify sin/cos of large arguments
    np.testing.assert_array_equal(np.isnan(got[keep]), np.isnan(want32[keep]), err_msg=f"{name} NaN on {device}")
    np.testing.assert_array_equal(got[keep & np.isinf(want32)], want32[keep & np.isinf(want32)],
                                  err_msg=f"{name} infinities on {device}")
    zero = keep & (want32 == 0)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want32[zero]), err_msg=f"{name} zeros")
    fin = keep & np.isfinite(want32) & (np.abs(want32) >= _TINY)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-5 if device.backend != "webgpu" else 1e-4,
                               atol=1e-6, err_msg=f"{name} on {device}")
    if device.backend == "opencl":
        ulp = np.spacing(np.abs(want32[fin])).astype(np.float64)
        err = np.abs(got[fin] - want[fin]) / ulp
        assert err.max() <= bound, f"{name}: {err.max():.2f} ulp at x={x[fin][np.argmax(err)]}"


def test_pow_special_cases_as_numpy_and_within_one_ulp(kernel_device):
    device = kernel_device
    bases = np.float32([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, -3.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40,
                        1e30, -1e30, 0.999, 7.5, -7.5])
    exps = np.float32([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -3.0, np.inf, -np.inf, np.nan, 1.7, -2.5, 1e10,
                       16777217.0, 8388609.0, 127.0, -149.0, 0.001])
    b, e = (v.ravel() for v in np.meshgrid(bases, exps))
    rng = np.random.default_rng(2)
    b = np.concatenate([b, rng.uniform(0, 10, 3000), rng.uniform(-5, 5, 1000)]).astype(np.float32)
    e = np.concatenate([e, rng.uniform(-30, 30, 3000), np.round(rng.uniform(-20, 20, 1000))]).astype(np.float32)
    got = _run(fnp.power, device, b, e)
    with np.errstate(all="ignore"):
        want = np.power(b.astype(np.float64), e.astype(np.float64))
        want32 = want.astype(np.float32)
    keep = _keep(b, device)
    fin = keep & np.isfinite(want32) & (np.abs(want32) >= _TINY)
    rest = keep & ~fin & ~((want32 != 0) & (np.abs(want32) < _TINY))   # specials and overflow; not subnormals
    if device.backend == "webgpu":   # WGSL's pow is exp2(y log2 x): only x > 0 is specified
        rest &= b > 0
        fin &= b > 0
    same = (got[rest].view(np.int32) == want32[rest].view(np.int32)) | (np.isnan(got[rest]) & np.isnan(want32[rest]))
    assert same.all(), list(zip(b[rest][~same][:6], e[rest][~same][:6], got[rest][~same][:6]))
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-5 if device.backend != "webgpu" else 1e-3,
                               err_msg=f"pow on {device}")
    if device.backend == "opencl":
        ulp = np.spacing(np.abs(want32[fin])).astype(np.float64)
        assert (np.abs(got[fin] - want[fin]) / ulp).max() <= 1.0
