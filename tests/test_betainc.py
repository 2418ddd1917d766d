"""``fnarray.scipy.special.betainc`` and ``fnarray.scipy.stats.beta``'s distribution functions against SciPy.

The full table (tails: ``x`` near 0 and 1, ``a, b`` from 1e-2 to 1e3) runs on numpy:0 in float32 and float64;
one jitted float32 selection runs on every device. Derivatives are checked against central finite differences
of SciPy's ``betainc`` and against ``scipy.stats.beta.pdf``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.scipy import special as fsp
from fnarray.scipy import stats as fst

sp = pytest.importorskip("scipy.special", reason="the oracle is SciPy (pip install scipy)")
ss = pytest.importorskip("scipy.stats")

F32, F64 = np.float32, np.float64

_AB = np.array([1e-2, 0.1, 0.5, 1, 2.5, 7.9, 8, 21, 100, 1e3])
_X = np.array([1e-30, 1e-10, 1e-5, 1e-3, 0.05, 0.3, 0.5, 0.7, 0.95, 1 - 1e-3, 1 - 1e-6, 0, 1])


def _table():
    a, b, x = np.meshgrid(_AB, _AB, _X, indexing="ij")
    return a.ravel(), b.ravel(), x.ravel()


def _ref(f, *args):
    with np.errstate(all="ignore"):
        return np.asarray(f(*[np.asarray(v, F64) for v in args]))


# (rtol, atol) per dtype. float32: the fraction's rounding errors grow with its length (9e-6 relative at
# a = b = 1000, x = 0.5), and 1 - I_{1-x}(b, a) amplifies them where the result is small (9e-5 relative at
# a = 1000, b = 0.01, x = 0.999). float64: SciPy's own betainc(0.5, 0.5, 1 - 1e-6) is 2.8e-14 off (from
# 1 - betainc(0.5, 0.5, 1e-6)), and a = 1000, b = 0.01, x = 0.999 loses 2.5e-13 relative as above.
_TOL = {F32: (2e-4, 1e-5), F64: (5e-13, 5e-14)}


@pytest.mark.parametrize("dtype", [F32, F64])
def test_betainc_against_scipy(dtype):
    a, b, x = (v.astype(dtype) for v in _table())
    got = np.asarray(fsp.betainc(fnp.asarray(a), fnp.asarray(b), fnp.asarray(x)))
    assert got.dtype == dtype
    want = _ref(sp.betainc, a, b, x)
    rtol, atol = _TOL[dtype]
    tiny = float(np.finfo(dtype).tiny)
    # Relative accuracy down to the smallest normal number (e.g. I_{1e-5}(8, 21) = 6e-37 in float32).
    np.testing.assert_allclose(got, want.astype(dtype), rtol=rtol, atol=tiny * 1e3)
    np.testing.assert_allclose(got, want.astype(dtype), rtol=0, atol=atol)


@pytest.mark.enable_x64
def test_betainc_large_parameters_and_broadcasting():
    a = np.array([[1e4], [1e5]])
    b = np.array([1e4, 2e4, 1e5])
    x = np.float64(0.5005)
    got = np.asarray(fsp.betainc(a, b, x))
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, sp.betainc(a, b, x), rtol=1e-11, atol=1e-300)


def test_betainc_edges_and_domain_are_scipys():
    inf, nan = np.inf, np.nan
    a = np.array([2, 2, 0, 0, 0, 1, 1, 1, 0, inf, 1, inf, -1, 2, 2, 2, nan, 2, 2, 0.5])
    b = np.array([3, 3, 1, 1, 0, 0, 0, 0, inf, 1, inf, inf, 1, -1, 3, 3, 2, nan, 2, 0.5])
    x = np.array([0, 1, 0, 1, 0.5, 0, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, -0.1, 1.1, 0.5, 0.5, nan, 0.5])
    for dtype in (F32, F64):
        got = np.asarray(fsp.betainc(*(fnp.asarray(v.astype(dtype)) for v in (a, b, x))))
        np.testing.assert_allclose(got, _ref(sp.betainc, a, b, x).astype(dtype), rtol=1e-6, equal_nan=True)


@pytest.mark.enable_x64
def test_betainc_dtypes_and_errors():
    assert fsp.betainc(1, 2, 0.5).dtype == F64   # Python scalars: the default float, float64 with x64 on
    assert fsp.betainc(np.float16(1), np.float16(2), np.float16(0.5)).dtype == np.float16
    assert fsp.betainc(np.float32(1), 2.0, np.float64(0.5)).dtype == F64
    with pytest.raises(TypeError):
        fsp.betainc("a", 2.0, 0.5)
    with pytest.raises(Exception, match="real"):
        fsp.betainc(1.0 + 1j, 2.0, 0.5)
    with pytest.raises(Exception, match="broadcast"):
        fsp.betainc(np.ones(2), np.ones(3), 0.5)


def _fd(f, v, h):
    return (f(v + h) - f(v - h)) / (2 * h)


_GRAD_POINTS = [(0.5, 3.0, 0.2), (2.5, 0.7, 0.9), (30.0, 40.0, 0.45), (300.0, 200.0, 0.6), (0.02, 5.0, 0.01),
                (2.5, 0.7, 1e-4), (5.0, 1.5, 0.999)]


@pytest.mark.enable_x64
def test_betainc_grad_x_is_the_beta_density():
    g = fa.jit(fa.grad(fsp.betainc, argnums=2))
    for a0, b0, x0 in _GRAD_POINTS:
        a, b, x = F64(a0), F64(b0), F64(x0)
        got = float(g(a, b, x))
        h = 1e-5 * min(x0, 1 - x0)
        fd = _fd(lambda v: sp.betainc(a0, b0, v), x0, h)
        assert np.isclose(got, ss.beta.pdf(x0, a0, b0), rtol=1e-11), (a0, b0, x0, got)
        assert np.isclose(got, fd, rtol=1e-6), (a0, b0, x0, got, fd)
    # at the edges: the density (b at x = 0 for a = 1; 0 for a > 1)
    np.testing.assert_allclose([float(g(F64(1), F64(3), F64(0))), float(g(F64(2), F64(3), F64(0)))], [3, 0])
    g32 = float(fa.grad(fsp.betainc, argnums=2)(F32(30), F32(40), F32(0.45)))
    assert np.isclose(g32, ss.beta.pdf(F32(0.45), 30, 40), rtol=1e-5)


@pytest.mark.enable_x64
def test_betainc_grad_a_b_against_finite_differences():
    ga = fa.jit(fa.grad(fsp.betainc, argnums=0))
    gb = fa.jit(fa.grad(fsp.betainc, argnums=1))
    for a0, b0, x0 in _GRAD_POINTS:
        a, b, x = F64(a0), F64(b0), F64(x0)
        fda = _fd(lambda v: sp.betainc(v, b0, x0), a0, 1e-5 * a0)
        fdb = _fd(lambda v: sp.betainc(a0, v, x0), b0, 1e-5 * b0)
        got_a, got_b = float(ga(a, b, x)), float(gb(a, b, x))
        assert np.isclose(got_a, fda, rtol=1e-6, atol=1e-12), (a0, b0, x0, got_a, fda)
        assert np.isclose(got_b, fdb, rtol=1e-6, atol=1e-12), (a0, b0, x0, got_b, fdb)


@pytest.mark.enable_x64
def test_betainc_vmap_and_jit():
    a = np.array([0.5, 2.0, 30.0])
    x = np.array([[0.1, 0.5], [0.9, 0.999], [0.4, 0.6]])
    got = fa.vmap(fa.vmap(fsp.betainc, in_axes=(None, None, 0)), in_axes=(0, None, 0))(a, F64(3.0), x)
    np.testing.assert_allclose(np.asarray(got), sp.betainc(a[:, None], 3.0, x), rtol=1e-13)
    gx = fa.vmap(fa.grad(fsp.betainc, argnums=2))(a, np.full(3, 3.0), x[:, 0])
    np.testing.assert_allclose(np.asarray(gx), ss.beta.pdf(x[:, 0], a, 3.0), rtol=1e-11)


_STATS_X = np.array([-0.5, 0.0, 1e-6, 0.05, 0.3, 0.5, 0.8, 0.999, 1.0, 1.7, 2.1, 2.5, 3.0])
_STATS_A = np.array([0.5, 2.0, 3.0, 0.9, 2.0, 2.0, 5.0, 1.0, 2.0, 3.0, 0.3, 2.0, 2.0])
_STATS_B = np.array([0.5, 3.0, 40.0, 8.0, 2.0, 0.5, 1.0, 1.0, 7.0, 2.0, 0.4, 2.0, 2.0])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", ["cdf", "logcdf", "sf", "logsf"])
def test_beta_distribution_functions_against_scipy(name, dtype):
    x, a, b = (v.astype(dtype) for v in (_STATS_X, _STATS_A, _STATS_B))
    loc, scale = dtype(-0.5), dtype(3.0)
    rtol = 2e-5 if dtype == F32 else 1e-12
    for args, kw in [((x, a, b), {}), ((x, a, b, loc, scale), {}), ((x, a, b), {"loc": loc, "scale": scale})]:
        got = np.asarray(getattr(fst.beta, name)(*args, **kw))
        assert got.dtype == dtype
        want = _ref(getattr(ss.beta, name), *args, *kw.values()).astype(dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=float(np.finfo(dtype).tiny), err_msg=name)


@pytest.mark.enable_x64
def test_beta_logsf_tail_and_grad():
    # sf(0.999; 2, 7) = 8.4e-24: computed directly, not as 1 - cdf
    np.testing.assert_allclose(float(fst.beta.logsf(F64(0.999), F64(2), F64(7))), ss.beta.logsf(0.999, 2, 7),
                               rtol=1e-12)
    g = float(fa.grad(fst.beta.cdf)(F64(0.7), F64(2.0), F64(3.0), F64(0.5), F64(0.5)))
    np.testing.assert_allclose(g, ss.beta.pdf(0.7, 2, 3, 0.5, 0.5), rtol=1e-11)


def test_betainc_on_device(device):
    a, b, x = (v.astype(F32) for v in _table())
    sel = slice(None, None, 7)
    a, b, x = a[sel], b[sel], x[sel]
    put = lambda v: fa.device_put(fnp.asarray(v), device)  # noqa: E731
    sx = _STATS_X.astype(F32)
    f = fa.jit(lambda a_, b_, x_, s_: (fsp.betainc(a_, b_, x_), fst.beta.cdf(s_, F32(2), F32(3), F32(-0.5), F32(3))),
               device=device)
    got, cdf = f(put(a), put(b), put(x), put(sx))
    # other backends' exp/log/lgamma are a few ulps apart from NumPy's, and 1 - I_{1-x}(b, a) amplifies them
    # where b is small and x near 1 (6e-5 absolute on webgpu:0 at a = 1000, b = 0.01, x = 0.999)
    np.testing.assert_allclose(np.asarray(got), _ref(sp.betainc, a, b, x).astype(F32), rtol=1e-3, atol=1e-4,
                               err_msg=str(device))
    np.testing.assert_allclose(np.asarray(cdf), _ref(ss.beta.cdf, sx, 2, 3, -0.5, 3).astype(F32), rtol=1e-4,
                               atol=1e-6, err_msg=str(device))


@pytest.mark.enable_x64
def test_betaln_float64_near_the_stirling_threshold():
    # betaln's Stirling branch starts at 20 in float64 (at 8 it was 4e-14 relative off at (8, 8), 5e-14 at (0.5, 9))
    a = np.array([8, 10, 15, 19.9, 20, 25, 8, 12, 0.5, 3])
    b = np.array([8, 12, 15, 19.9, 20, 30, 100, 1e3, 9, 15])
    np.testing.assert_allclose(np.asarray(fsp.betaln(a, b)), sp.betaln(a, b), rtol=2e-14)
