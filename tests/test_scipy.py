"""``fnarray.scipy`` (special, stats, linalg) against SciPy as the oracle.

The full tables run on numpy:0 in float32 and float64 (the reference rounded to the dtype; the tails
included: ``log_ndtr(-40)``, ``ndtri(1e-30)``, ``gammaln(1e30)``, ``logsumexp`` with ``-inf``); a selection
runs on every device under ``jit`` in float32. Gradients are checked against central finite differences in
float64, ``vmap`` against a loop.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.scipy import linalg as fl
from fnarray.scipy import special as fsp
from fnarray.scipy import stats as fst

from helpers import check_traced

sp = pytest.importorskip("scipy.special", reason="the oracle is SciPy (pip install scipy)")
ss = pytest.importorskip("scipy.stats")
sl = pytest.importorskip("scipy.linalg")

F32, F64 = np.float32, np.float64


def _x(*v):
    return np.array(v, np.float64)


_NDTR_X = _x(-40, -38, -20, -12, -10.5, -10, -9, -5, -3, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 3, 5, 5.5, 8, 9, 20,
             40, np.inf, -np.inf, np.nan)
_P = _x(1e-37, 1e-30, 1e-10, 1e-5, 0.01, 0.1, 0.13, 0.14, 0.3, 0.5, 0.5 + 1e-6, 0.7, 0.86, 0.87, 0.99, 1 - 1e-6,
        0, 1, -0.5, 1.5)
_BESSEL_X = _x(-1e4, -50, -20.5, -19.5, -10.5, -9.5, -3, -1, -1e-3, 0, 0.3, 1, 2.5, 9.9, 10.1, 19.9, 20.1, 50,
               700, 1e4, 1e8, np.inf)
_I_X = _x(-700, -50, -20.5, -3, -1, -1e-3, 0, 0.3, 1, 2.5, 9.9, 10.1, 19.9, 20.1, 50, 88, 700, np.nan)
# zeta(x, q): q > 0, then the domain's edges (x = 1, x < 1, the poles q = 0, -2, a non-integer x at q < 0)
_ZETA_X = _x(1.5, 2, 2, 3, 4.5, 10, 30, 50, 2, 3, 200, 1, 0.5, 2, 2, 2.5, 4, np.nan, 2, 2, 5, 3)
_ZETA_Q = _x(1, 1, 0.3, 1e-3, 2.5, 5, 0.7, 1, 40, 1e3, 1, 2, 1, 0, -2, -2.5, -2.5, 1, -7.5, -0.3, -1e-3, -3.75)
_IG_A = _x(0.1, 0.5, 1, 1, 2, 5, 10, 10, 30, 100, 100, 1000, 3, 2, -1, 1)
_IG_X = _x(0.05, 2, 0.5, 3, 1e-3, 4.9, 11, 30, 20, 90, 120, 1000, 0, np.inf, 1, -1)
_BETA_A = _x(0.1, 0.5, 1, 3, 7.9, 8, 10, 100, 1e4, 1e6, 0.5, 30)
_BETA_B = _x(0.2, 0.5, 20, 3, 9, 8, 1e3, 100, 1e4, 1e6, 1e6, 5)
_GAMMA_X = _x(0.1, 0.5, 1, 2.5, 10, 100, 1e10, 1e30, -0.5, -2.5)


# name: (fnarray function, SciPy function, inputs, rtol float32, rtol float64)
SPECIAL = {
    "erf": (fsp.erf, sp.erf, (_x(-5, -1, -1e-3, 0, 0.3, 2, 4),), 2e-6, 1e-14),
    "erfc": (fsp.erfc, sp.erfc, (_x(-5, -1, 0, 0.3, 2, 5, 9, 26),), 1e-5, 1e-13),
    "erfinv": (fsp.erfinv, sp.erfinv, (_x(-1, -0.999, -0.3, 0, 0.5, 0.99999, 1, 2),), 1e-5, 1e-13),
    "ndtr": (fsp.ndtr, sp.ndtr, (_NDTR_X,), 1e-5, 1e-13),
    "log_ndtr": (fsp.log_ndtr, sp.log_ndtr, (_NDTR_X,), 1e-5, 1e-13),
    "ndtri": (fsp.ndtri, sp.ndtri, (_P,), 2e-6, 1e-14),
    "expit": (fsp.expit, sp.expit, (_x(-100, -10, 0, 10, 100),), 1e-6, 1e-15),
    "logit": (fsp.logit, sp.logit, (_x(0, 1e-7, 0.1, 0.5, 0.9, 1 - 1e-7, 1, 2),), 1e-6, 1e-15),
    "gammaln": (fsp.gammaln, sp.gammaln, (_GAMMA_X,), 1e-6, 1e-13),
    "digamma": (fsp.digamma, sp.digamma, (_x(0.1, 0.5, 1, 2.5, 10, 100, 1e10, -0.5, -2.5),), 1e-5, 1e-9),
    # scipy's own betaln(0.5, 1e6) is 1.5e-10 off (mpmath): hence 1e-9 in float64.
    "betaln": (fsp.betaln, sp.betaln, (_BETA_A, _BETA_B), 2e-6, 1e-9),
    "xlogy": (fsp.xlogy, sp.xlogy, (_x(0, 0, 1, 2.5, -1), _x(0, 1, 0, 3, 2)), 1e-6, 1e-15),
    "xlog1py": (fsp.xlog1py, sp.xlog1py, (_x(0, 0, 1, 2.5, -1), _x(-1, 1, 1e-9, 3, 2)), 1e-6, 1e-15),
    "entr": (fsp.entr, sp.entr, (_x(-1, 0, 1e-30, 0.5, 1, 10),), 1e-6, 1e-15),
    "i0e": (fsp.i0e, sp.i0e, (_BESSEL_X,), 1e-6, 1e-14),
    "i1e": (fsp.i1e, sp.i1e, (_BESSEL_X,), 1e-6, 1e-14),
    "i0": (fsp.i0, sp.i0, (_I_X,), 2e-6, 5e-14),
    "i1": (fsp.i1, sp.i1, (_I_X,), 2e-6, 5e-14),
    "zeta": (fsp.zeta, sp.zeta, (_ZETA_X, _ZETA_Q), 2e-5, 1e-13),
    "multigammaln": (lambda a: fsp.multigammaln(a, 3), lambda a: sp.multigammaln(a, 3),
                     (_x(1.01, 1.5, 2, 3.7, 10, 1e3, 1e6),), 2e-6, 1e-14),
    "gammainc": (fsp.gammainc, sp.gammainc, (_IG_A, _IG_X), 2e-5, 1e-12),
    "gammaincc": (fsp.gammaincc, sp.gammaincc, (_IG_A, _IG_X), 2e-5, 1e-12),
}

# Run on every device (float32, under jit).
DEVICE_SPECIAL = ("log_ndtr", "ndtri", "i0e", "i1", "zeta", "betaln", "xlogy")


def _reference(ref, args, dtype):
    with np.errstate(all="ignore"):
        return np.asarray(ref(*[a.astype(dtype).astype(F64) for a in args])).astype(dtype)


def _check(got, want, rtol, atol=0.0, msg=""):
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype}, expected {want.dtype}"
    np.testing.assert_allclose(got.astype(F64), want.astype(F64), rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=msg)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_special_against_scipy(name, dtype):
    fn, ref, args, r32, r64 = SPECIAL[name]
    if name == "ndtri" and dtype == F64:
        args = (np.where(args[0] == 1e-37, 1e-300, args[0]),)
    want = _reference(ref, args, dtype)
    got = fn(*[fnp.asarray(a.astype(dtype)) for a in args])
    # atol: below the dtype's smallest normal number SciPy may flush to 0 what fnarray keeps (ndtr(-38)).
    _check(got, want, r32 if dtype == F32 else r64, atol=float(np.finfo(dtype).tiny), msg=name)


def _on_device(device, table, names, rtol):
    """Every function of ``names`` in one jitted call on ``device`` (one compile), against SciPy in float32."""
    args = {n: [np.asarray(a, F64).astype(F32) for a in table[n][2]] for n in names}
    ins = {n: [fa.device_put(fnp.asarray(a), device) for a in args[n]] for n in names}
    got = fa.jit(lambda d: {n: table[n][0](*d[n]) for n in names}, device=device)(ins)
    for n in names:
        # Other backends' exp/log/erfc are a few ulps apart from NumPy's; the tails amplify them.
        _check(got[n], _reference(table[n][1], args[n], F32), max(table[n][3], rtol), atol=1e-30,
               msg=f"{n} on {device}")


def test_special_on_device(device):
    _on_device(device, SPECIAL, DEVICE_SPECIAL, 1e-4)


def test_tails_named_in_the_issue():
    assert np.isclose(float(fsp.log_ndtr(-40.0)), sp.log_ndtr(-40.0), rtol=1e-6)
    assert np.isclose(float(fsp.log_ndtr(np.float32(-1e3))), sp.log_ndtr(-1e3), rtol=1e-6)
    assert np.isclose(float(fsp.gammaln(np.float32(1e30))), sp.gammaln(1e30), rtol=1e-6)
    assert np.isclose(float(fsp.ndtri(np.float32(1e-30))), sp.ndtri(1e-30), rtol=1e-6)
    assert float(fsp.log_ndtr(np.float32(-np.inf))) == -np.inf
    assert float(fsp.ndtri(0.0)) == -np.inf and float(fsp.ndtri(1.0)) == np.inf


# ----------------------------------------------------------------------------- logsumexp, softmax

_LSE_A = np.array([[0.5, -np.inf, 2.0, 1e4], [-np.inf, -np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0, 3.0]])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_against_scipy(dtype, axis, keepdims):
    a = _LSE_A.astype(dtype)
    with np.errstate(all="ignore"):
        want = sp.logsumexp(a.astype(F64), axis=axis, keepdims=keepdims).astype(dtype)
    _check(fsp.logsumexp(fnp.asarray(a), axis=axis, keepdims=keepdims), np.asarray(want), 1e-6)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_logsumexp_b_and_sign(dtype):
    a = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -np.inf], [1.0, 1.0, 1.0]], dtype)
    b = np.array([[1.0, -2.0, 0.5], [1.0, -1.0, 3.0], [0.0, 0.0, 0.0]], dtype)
    for axis in (None, 1):
        with np.errstate(all="ignore"):
            w, ws = sp.logsumexp(a.astype(F64), axis=axis, b=b.astype(F64), return_sign=True)
        g, gs = fsp.logsumexp(fnp.asarray(a), axis=axis, b=fnp.asarray(b), return_sign=True)
        _check(g, np.asarray(w).astype(dtype), 1e-5, 1e-6)
        _check(gs, np.asarray(ws).astype(dtype), 0)
    # where= excludes elements, as if they were -inf
    mask = np.array([[True, False, True], [True, True, False], [False, False, True]])
    want = sp.logsumexp(np.where(mask, a, -np.inf).astype(F64), axis=1).astype(dtype)
    _check(fsp.logsumexp(fnp.asarray(a), axis=1, where=fnp.asarray(mask)), want, 1e-6)


@pytest.mark.enable_x64
def test_softmax_defaults_are_scipys():
    x = np.array([[1.0, 2.0, -np.inf], [0.5, 4.0, 1.0]], F64)
    _check(fsp.softmax(fnp.asarray(x)), sp.softmax(x), 1e-14)
    _check(fsp.softmax(fnp.asarray(x), axis=1), sp.softmax(x, axis=1), 1e-14)
    _check(fsp.log_softmax(fnp.asarray(x), axis=0), sp.log_softmax(x, axis=0), 1e-14)


# ----------------------------------------------------------------------------- gradients


def _fd(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


# name: (scalar function of float64 arguments, points, index of the differentiated argument)
GRADS = [
    ("log_ndtr", lambda x: fsp.log_ndtr(x), [-50.0, -15.0, -3.0, 0.5, 6.0, 12.0]),
    ("ndtri", lambda p: fsp.ndtri(p), [1e-20, 0.01, 0.3, 0.7, 0.999]),
    ("ndtr", lambda x: fsp.ndtr(x), [-8.0, -1.0, 0.0, 2.0]),
    ("gammainc_x", lambda x: fsp.gammainc(2.5, x), [0.1, 2.0, 5.0, 20.0]),
    ("gammainc_a", lambda a: fsp.gammainc(a, 3.0), [0.5, 2.0, 3.5, 10.0]),
    ("gammaincc_a", lambda a: fsp.gammaincc(a, 12.0), [0.5, 2.0, 15.0]),
    ("betaln", lambda a: fsp.betaln(a, 9.0), [0.3, 2.0, 8.5, 50.0]),
    ("xlogy", lambda x: fsp.xlogy(x, 3.0), [0.0, 1.5]),
    ("xlog1py_y", lambda y: fsp.xlog1py(2.0, y), [-0.5, 1e-3, 4.0]),
    ("i0e", lambda x: fsp.i0e(x), [-3.0, 0.7, 9.0, 25.0]),
    ("i1e", lambda x: fsp.i1e(x), [-3.0, 0.7, 9.0, 25.0]),
    ("i0", lambda x: fsp.i0(x), [-3.0, 0.0, 0.7, 9.0, 25.0]),
    ("i1", lambda x: fsp.i1(x), [-3.0, 0.0, 0.7, 9.0, 25.0]),
    ("zeta_x", lambda x: fsp.zeta(x, 1.5), [1.5, 2.0, 7.0]),
    ("zeta_q", lambda q: fsp.zeta(2.5, q), [0.1, 1.0, 30.0]),
    ("polygamma_x", lambda x: fsp.polygamma(2, x), [0.3, 2.0, 40.0]),
    ("polygamma_negative_x", lambda x: fsp.polygamma(1, x), [-2.5, -0.3]),  # zeta's negative-q branch (cond)
    ("multigammaln", lambda a: fsp.multigammaln(a, 4), [1.7, 20.0]),
    ("logit", lambda x: fsp.logit(x), [0.01, 0.5, 0.9]),
    ("entr", lambda x: fsp.entr(x), [0.1, 2.0]),
    ("norm.logcdf", lambda x: fst.norm.logcdf(x, 1.0, 2.0), [-70.0, 0.0, 9.0]),
    ("gamma.logpdf_a", lambda a: fst.gamma.logpdf(2.0, a, 0.0, 1.5), [0.7, 3.0]),
    ("t.logpdf_df", lambda df: fst.t.logpdf(0.7, df), [1.5, 30.0]),
]


@pytest.mark.parametrize("name,f,points", GRADS, ids=[g[0] for g in GRADS])
@pytest.mark.enable_x64
def test_grad_against_finite_differences(name, f, points):
    g = fa.jit(fa.grad(lambda x: f(x)))
    for x0 in points:
        x = np.float64(x0)
        h = 1e-6 * max(1.0, abs(x0)) if x0 > 1e-3 or x0 < 0 else x0 * 1e-4 if x0 > 0 else 1e-6
        want = _fd(lambda v: float(f(np.float64(v))), x, h)
        got = float(g(x))
        assert np.isclose(got, want, rtol=2e-6, atol=1e-9), f"{name}'({x0}): {got} vs finite differences {want}"


@pytest.mark.parametrize("dtype", [F32, F64])
def test_polygamma_against_scipy(dtype):
    n = np.array([0, 0, 1, 1, 2, 3, 4, 1, 3, 0, 1, -1])
    x = np.array([2.0, 0.1, 0.3, 30.0, 5.0, -2.5, 1e3, 0.0, -3.0, -2.0, np.nan, 1.0])
    x = np.broadcast_to(x, (2,) + x.shape).copy()
    got = fsp.polygamma(n, fnp.asarray(x.astype(dtype)))
    with np.errstate(all="ignore"):
        want = sp.polygamma(n, x.astype(dtype).astype(F64)).astype(dtype)
    want[:, -1] = np.nan  # a negative order: NaN (as JAX; SciPy's polygamma(-1, x) is not the integral either)
    # n = 0 is the digamma primitive's accuracy (2e-11 in float64; 1e-9 in its own test), n >= 1 zeta's
    _check(got[:, :2], want[:, :2], 2e-5 if dtype == F32 else 1e-10, msg="polygamma n = 0")
    _check(got[:, 2:], want[:, 2:], 2e-5 if dtype == F32 else 1e-13, msg="polygamma")


def test_new_special_edges():
    from fnarray.core.errors import DTypeError
    # I0/I1 at the infinities (SciPy's i0(inf) is NaN; JAX's and the limit are inf), odd I1, empty arrays
    np.testing.assert_array_equal(np.asarray(fsp.i0(np.array([np.inf, -np.inf], F32))), [np.inf, np.inf])
    np.testing.assert_array_equal(np.asarray(fsp.i1(np.array([np.inf, -np.inf], F32))), [np.inf, -np.inf])
    assert float(fsp.i0(np.float32(89.0))) == pytest.approx(sp.i0(89.0), rel=1e-5)  # exp(89) alone overflows
    for f in (fsp.i0, fsp.i1, lambda v: fsp.zeta(v, 2.0), lambda v: fsp.polygamma(1, v),
              lambda v: fsp.multigammaln(v, 2)):
        out = f(np.zeros((0, 3), F32))
        assert out.shape == (0, 3) and out.dtype == np.float32
    assert float(fsp.zeta(3.0)) == pytest.approx(sp.zeta(3.0), rel=1e-6)  # Riemann's, q = None
    # far negative q: the split's cancellation leaves an absolute error ~ eps * zeta(x, f) (zeta(3, 0.5) = 8.4)
    assert float(fsp.zeta(3.0, -30.5)) == pytest.approx(sp.zeta(3.0, -30.5), abs=1e-5)
    with pytest.raises(DTypeError, match="integer dtype"):
        fsp.polygamma(1.0, 2.0)
    with pytest.raises(TypeError, match="Python int"):
        fsp.multigammaln(2.0, 2.5)
    with pytest.raises(ValueError, match=">= 1"):
        fsp.multigammaln(2.0, 0)


@pytest.mark.enable_x64
def test_new_special_vmap_and_trace():
    x = np.array([[1.5, 2.0, 9.0], [3.0, 4.0, 40.0]])
    q = np.array([0.5, 1.0, 3.0])
    _check(fa.vmap(fsp.zeta, in_axes=(0, None))(x, q), sp.zeta(x, q), 1e-13)
    _check(fa.vmap(fsp.i1)(x), sp.i1(x), 5e-14)
    check_traced(fsp.zeta, x[0], q)
    check_traced(lambda v: fsp.polygamma(2, v), q)
    check_traced(fa.grad(lambda v: fsp.i0(v)), np.float64(1.5))


@pytest.mark.enable_x64
def test_logsumexp_grad_is_softmax_and_finite_at_minus_inf():
    a = np.array([1.0, -np.inf, 2.0, -3.0])
    b = np.array([1.0, 1.0, 0.5, 2.0])
    g = np.asarray(fa.grad(lambda v: fsp.logsumexp(v, b=b))(a))
    e = b * np.exp(a)
    np.testing.assert_allclose(g, e / e.sum(), rtol=1e-14)


def test_xlogy_grad_at_zero_is_jaxs():
    gx, gy = fa.grad(lambda x, y: fsp.xlogy(x, y), argnums=(0, 1))(np.float64(0.0), np.float64(2.0))
    assert float(gx) == pytest.approx(np.log(2.0)) and float(gy) == 0.0


@pytest.mark.enable_x64
def test_gammainc_vmap_and_trace():
    a = np.array([0.5, 3.0, 40.0])
    x = np.array([[0.2, 4.0, 35.0], [1.0, 1.0, 50.0]])
    got = fa.vmap(fsp.gammainc, in_axes=(None, 0))(a, x)
    _check(got, sp.gammainc(a, x), 1e-12)
    check_traced(fsp.gammainc, a, x[0])
    check_traced(fa.grad(lambda v: fsp.gammainc(v, 2.0)), np.float64(1.5))


def test_special_bad_input():
    from fnarray.core.errors import DTypeError, ShapeError
    with pytest.raises(DTypeError, match="real"):
        fsp.ndtr(fnp.asarray(np.array([1j])))
    with pytest.raises(ShapeError):
        fsp.xlogy(fnp.ones(3), fnp.ones(4))
    with pytest.raises(ValueError, match="series_order"):
        fsp.log_ndtr(1.0, series_order=-1)
    with pytest.raises(TypeError):
        fsp.erf("1")


# ----------------------------------------------------------------------------- stats

_ZS = _x(-40, -5, -1, 0, 0.3, 2, 8)
_POS = _x(0.01, 0.3, 1, 2.5, 9, 40)
_UNIT = _x(-0.1, 0, 0.01, 0.3, 0.5, 0.99, 1, 1.2)
_KS = _x(-1, 0, 1, 2, 3, 7, 25, 2.5)

# name: (fnarray function, SciPy function, inputs, rtol float32, rtol float64)
STATS = {
    "norm.logpdf": (fst.norm.logpdf, ss.norm.logpdf, (_ZS, 0.5, 2.0), 1e-6, 1e-14),
    "norm.pdf": (fst.norm.pdf, ss.norm.pdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "norm.cdf": (fst.norm.cdf, ss.norm.cdf, (_ZS, 0.5, 2.0), 1e-5, 1e-13),
    "norm.logcdf": (fst.norm.logcdf, ss.norm.logcdf, (_ZS, 0.5, 2.0), 1e-5, 1e-13),
    "norm.sf": (fst.norm.sf, ss.norm.sf, (_ZS, 0.5, 2.0), 1e-5, 1e-13),
    "norm.logsf": (fst.norm.logsf, ss.norm.logsf, (_ZS, 0.5, 2.0), 1e-5, 1e-13),
    "norm.ppf": (fst.norm.ppf, ss.norm.ppf, (_UNIT, 0.5, 2.0), 2e-6, 1e-14),
    "norm.isf": (fst.norm.isf, ss.norm.isf, (_UNIT, 0.5, 2.0), 2e-6, 1e-14),
    "t.logpdf": (fst.t.logpdf, ss.t.logpdf, (_ZS, 3.5, 0.5, 2.0), 2e-6, 1e-13),
    "t.pdf": (fst.t.pdf, ss.t.pdf, (_ZS, 3.5, 0.5, 2.0), 1e-5, 1e-13),
    "gamma.logpdf": (fst.gamma.logpdf, ss.gamma.logpdf, (_ZS, 2.5, -1.0, 1.5), 2e-6, 1e-13),
    "gamma.pdf": (fst.gamma.pdf, ss.gamma.pdf, (_POS, 0.7), 1e-5, 1e-13),
    "gamma.cdf": (fst.gamma.cdf, ss.gamma.cdf, (_POS, 2.5, 0.0, 1.5), 1e-5, 1e-12),
    "gamma.sf": (fst.gamma.sf, ss.gamma.sf, (_POS, 2.5, 0.0, 1.5), 1e-5, 1e-12),
    "gamma.logcdf": (fst.gamma.logcdf, ss.gamma.logcdf, (_POS, 2.5), 1e-5, 1e-12),
    "gamma.logsf": (fst.gamma.logsf, ss.gamma.logsf, (_POS, 2.5), 1e-5, 1e-12),
    "beta.logpdf": (fst.beta.logpdf, ss.beta.logpdf, (_UNIT, 2.5, 0.7), 2e-6, 1e-13),
    "beta.pdf": (fst.beta.pdf, ss.beta.pdf, (_UNIT, 2.5, 3.0), 1e-5, 1e-13),
    "bernoulli.logpmf": (fst.bernoulli.logpmf, ss.bernoulli.logpmf, (_x(-1, 0, 1, 2, 0.5), 0.3), 1e-6, 1e-15),
    "bernoulli.pmf": (fst.bernoulli.pmf, ss.bernoulli.pmf, (_x(-1, 0, 1, 2), 0.3), 1e-6, 1e-15),
    "bernoulli.cdf": (fst.bernoulli.cdf, ss.bernoulli.cdf, (_x(-1, 0, 0.5, 1, 2), 0.3), 1e-6, 1e-15),
    "bernoulli.ppf": (fst.bernoulli.ppf, ss.bernoulli.ppf, (_UNIT, 0.3), 0, 0),
    "poisson.logpmf": (fst.poisson.logpmf, ss.poisson.logpmf, (_KS, 3.5), 2e-6, 1e-13),
    "poisson.pmf": (fst.poisson.pmf, ss.poisson.pmf, (_KS, 3.5), 1e-5, 1e-13),
    "poisson.cdf": (fst.poisson.cdf, ss.poisson.cdf, (_KS, 3.5), 1e-5, 1e-12),
    "uniform.logpdf": (fst.uniform.logpdf, ss.uniform.logpdf, (_UNIT, 0.2, 0.5), 1e-6, 1e-15),
    "uniform.pdf": (fst.uniform.pdf, ss.uniform.pdf, (_UNIT, 0.2, 0.5), 1e-6, 1e-15),
    "uniform.cdf": (fst.uniform.cdf, ss.uniform.cdf, (_UNIT, 0.2, 0.5), 1e-6, 1e-15),
    "uniform.logcdf": (fst.uniform.logcdf, ss.uniform.logcdf, (_UNIT, 0.2, 0.5), 1e-6, 1e-15),
    "uniform.ppf": (fst.uniform.ppf, ss.uniform.ppf, (_UNIT, 0.2, 0.5), 1e-6, 1e-15),
    "laplace.logpdf": (fst.laplace.logpdf, ss.laplace.logpdf, (_ZS, 0.5, 2.0), 1e-6, 1e-14),
    "laplace.pdf": (fst.laplace.pdf, ss.laplace.pdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "laplace.cdf": (fst.laplace.cdf, ss.laplace.cdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "laplace.ppf": (fst.laplace.ppf, ss.laplace.ppf, (_UNIT, 0.5, 2.0), 2e-6, 1e-14),
    "expon.logpdf": (fst.expon.logpdf, ss.expon.logpdf, (_ZS, -1.0, 2.0), 1e-6, 1e-14),
    "expon.pdf": (fst.expon.pdf, ss.expon.pdf, (_ZS, -1.0, 2.0), 2e-6, 1e-14),
    "expon.cdf": (fst.expon.cdf, ss.expon.cdf, (_ZS, -1.0, 2.0), 2e-6, 1e-14),
    "expon.logcdf": (fst.expon.logcdf, ss.expon.logcdf, (_ZS, -1.0, 2.0), 2e-6, 1e-14),
    "expon.sf": (fst.expon.sf, ss.expon.sf, (_ZS, -1.0, 2.0), 2e-6, 1e-14),
    "expon.logsf": (fst.expon.logsf, ss.expon.logsf, (_ZS, -1.0, 2.0), 2e-6, 1e-14),
    "expon.ppf": (fst.expon.ppf, ss.expon.ppf, (_UNIT, -1.0, 2.0), 2e-6, 1e-14),
    "cauchy.logpdf": (fst.cauchy.logpdf, ss.cauchy.logpdf, (_ZS, 0.5, 2.0), 1e-6, 1e-14),
    "cauchy.pdf": (fst.cauchy.pdf, ss.cauchy.pdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "cauchy.cdf": (fst.cauchy.cdf, ss.cauchy.cdf, (_ZS, 0.5, 2.0), 1e-5, 1e-13),
    "cauchy.ppf": (fst.cauchy.ppf, ss.cauchy.ppf, (_UNIT, 0.5, 2.0), 1e-5, 1e-12),
    "logistic.logpdf": (fst.logistic.logpdf, ss.logistic.logpdf, (_ZS, 0.5, 2.0), 1e-6, 1e-14),
    "logistic.pdf": (fst.logistic.pdf, ss.logistic.pdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "logistic.cdf": (fst.logistic.cdf, ss.logistic.cdf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "logistic.sf": (fst.logistic.sf, ss.logistic.sf, (_ZS, 0.5, 2.0), 2e-6, 1e-14),
    "logistic.ppf": (fst.logistic.ppf, ss.logistic.ppf, (_UNIT, 0.5, 2.0), 2e-6, 1e-14),
    "logistic.isf": (fst.logistic.isf, ss.logistic.isf, (_UNIT, 0.5, 2.0), 2e-6, 1e-14),
}
DEVICE_STATS = ("gamma.cdf", "poisson.logpmf", "t.logpdf", "laplace.cdf", "expon.ppf", "cauchy.logpdf",
                "logistic.logpdf")


def _stats_args(args, dtype):
    return [np.asarray(a, F64).astype(dtype) for a in args]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", sorted(STATS))
def test_stats_against_scipy(name, dtype):
    fn, ref, args, r32, r64 = STATS[name]
    args = _stats_args(args, dtype)
    want = _reference(ref, args, dtype)
    got = fn(*[fnp.asarray(a) for a in args])
    _check(got, want, r32 if dtype == F32 else r64, atol=1e-30, msg=name)


@pytest.mark.parametrize("dist", ["laplace", "expon", "cauchy", "logistic"])
def test_new_stats_edges_as_scipy(dist):
    """Infinite and NaN points, and scales that are not positive (SciPy: NaN), for the distributions the
    eleventh session's probe added."""
    x = np.array([-1.0, 0.0, 0.5, np.nan, np.inf, -np.inf], F32)
    q = np.array([0.0, 0.3, 1.0, -0.1, 1.5, np.nan], F32)
    for fn in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf"):
        if not hasattr(getattr(fst, dist), fn):
            continue
        for scale in (2.0, -1.0, 0.0, np.nan):
            pts = q if fn in ("ppf", "isf") else x
            got = np.asarray(getattr(getattr(fst, dist), fn)(pts, 0.5, scale))
            with np.errstate(all="ignore"):
                want = getattr(getattr(ss, dist), fn)(pts.astype(F64), 0.5, scale)
            np.testing.assert_allclose(got, want.astype(F32), rtol=1e-5, atol=1e-30, err_msg=f"{dist}.{fn} {scale}")


def test_stats_on_device(device):
    _on_device(device, STATS, DEVICE_STATS, 1e-4)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_multivariate_normal_logpdf(dtype):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 3, 3))
    cov = (a @ a.transpose(0, 2, 1) + np.eye(3)).astype(dtype)
    mean = rng.normal(size=(2, 3)).astype(dtype)
    x = rng.normal(size=(4, 1, 3)).astype(dtype)   # broadcasts against the batch of 2 distributions
    want = np.stack([[ss.multivariate_normal(mean[j], cov[j]).logpdf(x[i, 0]) for j in range(2)] for i in range(4)])
    r = 1e-5 if dtype == F32 else 1e-12
    _check(fst.multivariate_normal.logpdf(fnp.asarray(x), fnp.asarray(mean), fnp.asarray(cov)), want.astype(dtype), r)
    want1 = ss.multivariate_normal(mean[0], np.diag(np.diag(cov[0]))).logpdf(x[:, 0])
    _check(fst.multivariate_normal.logpdf(x[:, 0], mean[0], np.diag(cov[0])), want1.astype(dtype), r)
    _check(fst.multivariate_normal.pdf(x[:, 0], mean[0], cov[0]),
           ss.multivariate_normal(mean[0], cov[0]).pdf(x[:, 0]).astype(dtype), r)


# ----------------------------------------------------------------------------- linalg


def _spd(rng, n, dtype, batch=()):
    a = rng.normal(size=batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def _close(got, want, dtype, scale=1.0):
    tol = 2e-4 if np.dtype(dtype) in (np.dtype(F32), np.dtype(np.complex64)) else 1e-10
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale * max(1.0, float(np.max(np.abs(want)))))


def _linalg_cases(rng, dtype):
    """(name, fnarray call, SciPy result) for the table."""
    a = rng.normal(size=(4, 4)).astype(dtype)
    s = _spd(rng, 4, dtype)
    b = rng.normal(size=(4, 2)).astype(dtype)
    v = b[:, 0].copy()
    r = rng.normal(size=(3, 5)).astype(dtype)
    cases = [
        ("cholesky", lambda: fl.cholesky(s), sl.cholesky(s)),
        ("cholesky_lower", lambda: fl.cholesky(s, lower=True), sl.cholesky(s, lower=True)),
        ("cho_solve", lambda: fl.cho_solve(fl.cho_factor(s), b), sl.cho_solve(sl.cho_factor(s), b)),
        ("cho_solve_lower_vec", lambda: fl.cho_solve(fl.cho_factor(s, lower=True), v),
         sl.cho_solve(sl.cho_factor(s, lower=True), v)),
        ("solve_triangular_unit", lambda: fl.solve_triangular(a, v, lower=True, unit_diagonal=True),
         sl.solve_triangular(a, v, lower=True, unit_diagonal=True)),
        ("lu", lambda: fl.lu(a), sl.lu(a)),
        ("lu_wide", lambda: fl.lu(r), sl.lu(r)),
        ("lu_tall", lambda: fl.lu(r.T), sl.lu(r.T)),
        ("lu_permute_l", lambda: fl.lu(a, permute_l=True), sl.lu(a, permute_l=True)),
        ("lu_factor", lambda: fl.lu_factor(a), sl.lu_factor(a)),
        ("solve", lambda: fl.solve(a, b), sl.solve(a, b)),
        ("solve_pos", lambda: fl.solve(s, v, assume_a="pos"), sl.solve(s, v, assume_a="pos")),
        ("solve_pos_lower", lambda: fl.solve(np.tril(s), v, assume_a="pos", lower=True),
         sl.solve(s, v, assume_a="pos")),
        ("inv", lambda: fl.inv(a), sl.inv(a)),
        ("det", lambda: fl.det(a), sl.det(a)),
        ("eigh_w", lambda: fl.eigh(s, eigvals_only=True), sl.eigh(s, eigvals_only=True)),
        ("eigh_generalized_w", lambda: fl.eigh(s, _spd(np.random.default_rng(1), 4, dtype), eigvals_only=True),
         sl.eigh(s, _spd(np.random.default_rng(1), 4, dtype), eigvals_only=True)),
        ("svd_s", lambda: fl.svd(r, compute_uv=False), sl.svd(r, compute_uv=False)),
        ("block_diag", lambda: fl.block_diag(a[:2, :2], v, dtype(3)), sl.block_diag(a[:2, :2], v, dtype(3))),
    ]
    for trans in (0, 1, 2):
        for lower in (False, True):
            cases.append((f"solve_triangular_{trans}_{lower}",
                          (lambda t=trans, lo=lower: fl.solve_triangular(a, b, trans=t, lower=lo)),
                          sl.solve_triangular(a, b, trans=trans, lower=lower)))
        lu_piv = sl.lu_factor(a)
        cases.append((f"lu_solve_{trans}", (lambda t=trans: fl.lu_solve(fl.lu_factor(a), b, trans=t)),
                      sl.lu_solve(lu_piv, b, trans=trans)))
    for scale in (1e-3, 0.1, 1.0, 3.0, 10.0):
        m = (a * dtype(scale)).astype(dtype)
        cases.append((f"expm_{scale:g}", (lambda m=m: fl.expm(m)), sl.expm(m.astype(F64)).astype(dtype)))
    return cases


@pytest.mark.parametrize("dtype", [F32, F64])
def test_linalg_against_scipy(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        for name, call, want in _linalg_cases(np.random.default_rng(0), dtype):
            got = call()
            gots = got if isinstance(got, tuple) else (got,)
            wants = want if isinstance(want, tuple) else (want,)
            for g, w in zip(gots, wants, strict=True):
                try:
                    _close(g, w, dtype)
                except AssertionError as e:
                    raise AssertionError(f"{name} ({np.dtype(dtype).name}): {e}") from None


@pytest.mark.enable_x64
def test_linalg_decompositions_reconstruct():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(2, 5, 3))
    q, r = fl.qr(a)
    _close(np.asarray(q) @ np.asarray(r), a, F64)
    q, r = fl.qr(a, mode="economic")
    assert q.shape == (2, 5, 3) and r.shape == (2, 3, 3)
    (r_only,) = fl.qr(a, mode="r")
    assert r_only.shape == (2, 5, 3)
    u, s, vh = fl.svd(a, full_matrices=False)
    _close(np.asarray(u) * np.asarray(s)[..., None, :] @ np.asarray(vh), a, F64)
    spd = _spd(rng, 4, F64, (3,))
    w, v = fl.eigh(spd)
    _close(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)), spd, F64)
    other = _spd(rng, 4, F64)
    w, v = fl.eigh(spd[0], other)
    _close(spd[0] @ np.asarray(v), other @ np.asarray(v) * np.asarray(w), F64)
    p, l_, u_ = fl.lu(a)
    _close(np.asarray(p) @ np.asarray(l_) @ np.asarray(u_), a, F64)


@pytest.mark.enable_x64
def test_linalg_batched_matches_loop():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 4, 4))
    s = _spd(rng, 4, F64, (3,))
    b = rng.normal(size=(4, 2))
    _close(fl.det(a), np.linalg.det(a), F64)
    _close(fl.solve(a, b), np.linalg.solve(a, b), F64)
    _close(fl.cho_solve(fl.cho_factor(s), b), np.stack([sl.cho_solve(sl.cho_factor(x), b) for x in s]), F64)
    _close(fl.expm(a), np.stack([sl.expm(x) for x in a]), F64)
    _close(fl.lu_solve(fl.lu_factor(a), b), np.stack([sl.lu_solve(sl.lu_factor(x), b) for x in a]), F64)
    _close(fa.vmap(fl.inv)(a), np.linalg.inv(a), F64)
    _close(fa.vmap(lambda x: fl.expm(x))(a), np.stack([sl.expm(x) for x in a]), F64)


def test_linalg_on_device(device):
    rng = np.random.default_rng(5)
    s = _spd(rng, 5, F32, (2,))
    a = rng.normal(size=(2, 5, 5)).astype(F32)
    b = rng.normal(size=(5, 3)).astype(F32)
    put = lambda v: fa.device_put(fnp.asarray(v), device)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        got = fa.jit(lambda s_, b_: fl.cho_solve(fl.cho_factor(s_, lower=True), b_), device=device)(put(s), put(b))
        _close(got, np.stack([sl.cho_solve(sl.cho_factor(x, lower=True), b) for x in s]), F32)
        got = fa.jit(lambda a_, b_: fl.solve_triangular(a_, b_, trans=1, lower=True), device=device)(put(a), put(b))
        _close(got, np.stack([sl.solve_triangular(x, b, trans=1, lower=True) for x in a]), F32)
        _close(fa.jit(fl.det, device=device)(put(a)), np.linalg.det(a), F32)


def test_cholesky_not_positive_definite():
    s = -np.eye(3)
    assert np.isnan(np.asarray(fl.cholesky(s))[np.triu_indices(3)]).all()   # as JAX: NaN in the factor's triangle
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        fl.cholesky(s, check_pd=True)
    with pytest.raises(np.linalg.LinAlgError, match=r"batch element \(1,\)"):
        fl.cho_factor(np.stack([np.eye(3), s]), check_pd=True)
    with pytest.raises(fa.ConcretizationError, match="check_pd"):
        fa.jit(lambda x: fl.cholesky(x, check_pd=True))(np.eye(2))
    fl.cholesky(np.eye(3), check_pd=True)


def test_linalg_bad_input():
    from fnarray.core.errors import ShapeError
    with pytest.raises(ShapeError, match="square"):
        fl.cholesky(np.ones((2, 3)))
    with pytest.raises(ShapeError, match="does not match"):
        fl.solve(np.eye(3), np.ones(4))
    with pytest.raises(ShapeError, match=r"b\[\.\.\., None\]"):
        fl.solve(np.eye(3)[None].repeat(2, 0), np.ones((2, 3)))
    with pytest.raises(ValueError, match="assume_a"):
        fl.solve(np.eye(3), np.ones(3), assume_a="banded")
    with pytest.raises(ValueError, match="trans"):
        fl.solve_triangular(np.eye(3), np.ones(3), trans=3)
    with pytest.raises(ValueError, match="pivoting"):
        fl.qr(np.eye(3), pivoting=True)
    # integers are promoted to float32
    assert fl.inv(np.eye(2, dtype=np.int32)).dtype == np.float32


# name: (function of one float64 matrix or vector argument, its point)
_RNG = np.random.default_rng(7)
_A = _RNG.normal(size=(3, 3))
_S = _A @ _A.T + 3 * np.eye(3)
_B = _RNG.normal(size=(3, 2))
LINALG_GRADS = [
    ("cho_solve", lambda s: fnp.sum(fl.cho_solve(fl.cho_factor(s), _B) ** 2), _S),
    ("cholesky_logdet", lambda s: fnp.sum(fnp.log(fnp.diagonal(fl.cholesky(s, lower=True)))), _S),
    ("solve", lambda a: fnp.sum(fl.solve(a, _B) * _B), _A),
    ("solve_pos", lambda s: fnp.sum(fl.solve(s, _B, assume_a="pos") * _B), _S),
    ("inv", lambda a: fnp.sum(fl.inv(a) ** 2), _A),
    ("det", lambda a: fl.det(a), _A),
    ("expm", lambda a: fnp.sum(fl.expm(0.7 * a) * _S), _A),
    ("lu_solve", lambda b: fnp.sum(fl.lu_solve(fl.lu_factor(_A), b) ** 2), _B),
    ("solve_triangular", lambda a: fnp.sum(fl.solve_triangular(a, _B, lower=True, trans=1) ** 2), _S),
]


@pytest.mark.parametrize("name,f,x0", LINALG_GRADS, ids=[g[0] for g in LINALG_GRADS])
@pytest.mark.enable_x64
def test_linalg_grad_against_finite_differences(name, f, x0):
    g = np.asarray(fa.jit(fa.grad(f))(x0))
    want = np.zeros_like(x0)
    h = 1e-6
    for idx in np.ndindex(*x0.shape):
        e = np.zeros_like(x0)
        e[idx] = h
        want[idx] = (float(f(x0 + e)) - float(f(x0 - e))) / (2 * h)
    if name in ("cho_solve", "cholesky_logdet", "solve_pos"):
        # The symmetric part is what these read: compare the gradients of the symmetrized function.
        g, want = (g + g.T) / 2, (want + want.T) / 2
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.enable_x64
def test_python_scalars_promote_weakly_beside_float64():
    """0.7 beside a float64 argument is the float64 0.7 (not 0.7 rounded to float32), as JAX promotes."""
    import scipy.special as ss
    from fnarray.scipy.special import betainc, gammainc, xlogy
    x = np.float64(0.2)
    assert float(betainc(2.5, 0.7, x)) == pytest.approx(ss.betainc(2.5, 0.7, 0.2), rel=1e-13)
    assert float(gammainc(0.7, fnp.asarray(x))) == pytest.approx(ss.gammainc(0.7, 0.2), rel=1e-13)
    assert betainc(2.5, 0.7, np.float32(0.2)).dtype == np.float32
    assert xlogy(2, np.arange(3)).dtype == np.float64   # int64 -> float64 with x64 on, as JAX
