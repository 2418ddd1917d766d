"""Regression tests for the outside reports of issue 27, one section per class of failure.

Each section's reference is independent of fnarray: SciPy (special functions, truncated-normal quantiles),
NumPy (reduction dtypes), float64 finite differences (degenerate gradients), JAX (samplers at their edges).

Tiers (docs/design.md, "Testing"): the reduction ``dtype=`` table (input x output dtype, per function) runs whole on
numpy:0; the other devices run the parity tier (``_parity_pair``): a third of the pairs, a different third for each
function, every input and output dtype among them for each function.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special as ss

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.scipy.special as fsp
from tests.helpers import on_device

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _run(device, fn, *args):
    """``fn`` of ``args`` (NumPy arrays) on ``device``, as NumPy; a backend without the dtype falls back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(fn(*[on_device(a, device) for a in args]))


# ----------------------------------------------------------------------------- 1. special functions at their edges


def _points(dt):
    """Poles, zeros, +-inf, NaN, subnormals, the dtype's extremes and the edges of [0, 1] and [-1, 1]."""
    fi = np.finfo(dt)
    sub = float(fi.smallest_subnormal) * 4
    return np.array([0.0, -0.0, 1.0, -1.0, -2.0, 0.5, 2.0, 1e-30, -1e-30, sub, -sub, float(fi.tiny), float(fi.max),
                     -float(fi.max), np.inf, -np.inf, np.nan, 30.0, -30.0, 1e4, 0.999999, -0.999999, 1e-8,
                     1 - 1e-7], dt)


def _grid_points(dt):
    return np.array([0.0, -0.0, 1e-30, 0.5, 1.0, 2.0, 30.0, np.inf, np.nan, -1.0,
                     float(np.finfo(dt).smallest_subnormal) * 4], dt)


_UNARY = ["erf", "erfc", "erfinv", "ndtr", "log_ndtr", "ndtri", "expit", "logit", "gammaln", "digamma", "entr",
          "i0e", "i1e", "i0", "i1"]
_BINARY = ["betaln", "gammainc", "gammaincc", "xlogy", "xlog1py", "zeta"]
_TERNARY = ["betainc"]
_REDUCTIONS = ["logsumexp", "softmax", "log_softmax"]
# Accurate in absolute terms where the result crosses zero (lgamma's zeros at 1 and 2) or is a probability.
_ABSOLUTE = {"gammaln", "betaln", "betainc", "gammainc", "gammaincc", "loggamma"}
_RTOL = {F32: 5e-5, F64: 1e-9}

# Where fnarray keeps another value than SciPy on purpose, each with the reason (the docstrings say so too).
_DEVIATIONS = {
    "betaln": (lambda a, b: (np.isnan(a) | np.isnan(b) | (a < 0) | (b < 0)
                             | _subnormal(a, a.dtype) & (np.isinf(b) | _subnormal(b, b.dtype))
                             | _subnormal(b, b.dtype) & np.isinf(a)),
               "NaN stays NaN (SciPy: betaln(nan, 0) = inf); negative arguments take the three lgammas, NaN where "
               "two poles meet (SciPy takes limits: betaln(-1, 1) = 0); a subnormal with inf is -inf (SciPy's "
               "overflow gives NaN); two subnormals give NaN on MLX, which flushes inside lgamma but not in the "
               "comparison that catches the pole"),
    "i0": (lambda x: np.isinf(x), "I0(+-inf) = inf, the limit (SciPy's Cephes gives NaN); the finite edges agree"),
    "i1": (lambda x: np.isinf(x), "I1(+-inf) = +-inf, the limit (SciPy's Cephes gives NaN); the finite edges agree"),
    "beta": (lambda a, b: np.isnan(a) | np.isnan(b) | np.signbit(a) | np.signbit(b),
             "negative arguments take gammasgn and betaln, with SciPy's limits where a positive integer meets a pole "
             "(beta(1, -2) = -0.5) or only a + b is one (0), NaN where two negative integers meet (SciPy: inf); -0 keeps the sign of gamma(-0) = -inf (SciPy: beta(-0, 1) = inf); NaN stays NaN (SciPy: "
             "beta(0, nan) = inf)"),
    "comb": (lambda n, k: np.isposinf(n) & (k >= 20),
             "comb(inf, k) = inf for every integer k >= 1, the limit (SciPy: NaN from k = 20)"),
    "poch": (lambda z, m: np.isinf(z) | (z < 0) & (z == np.floor(z)) & (np.abs(m) < 1e-20),
             "poch(+-inf, m): the limits (inf for m > 0, 0 for m < 0; NaN for z = -inf), where SciPy gives NaN for "
             "some m; at a negative-integer z and a tiny non-integer m, 0 as for any non-integer m (SciPy: NaN "
             "below |m| ~ 1e-10)"),
    "zeta": (lambda x, q: np.isposinf(x) & (q > 1),
             "zeta(inf, q > 1) = 0, the limit (SciPy gives NaN); zeta(inf, inf) stays NaN (inf ** -inf, where SciPy "
             "gives 0)"),
}


# Functions of an integer order (``polygamma(n, x)``, ``multigammaln(a, d)``): their float argument's edges are
# tested beside SciPy in tests/test_scipy.py, order by order.
_INTEGER_ORDER = ["polygamma", "multigammaln"]
# Composed from the functions above (twenty-fifth session, s25b-apisweep; values at ordinary points against JAX in
# tests/test_api_sweep.py): their edges in float64 on numpy:0 (the building blocks' edges run on every device above,
# and the composites' own code is the same program on every backend).
_COMPOSED_UNARY = ["gamma", "gammasgn", "loggamma", "factorial"]
_COMPOSED_BINARY = ["beta", "comb", "poch", "rel_entr", "kl_div", "boxcox", "boxcox1p"]
_COMPOSED = _COMPOSED_UNARY + _COMPOSED_BINARY


def test_every_special_function_is_in_the_edge_table():
    assert set(fsp.__all__) == set(_UNARY + _BINARY + _TERNARY + _REDUCTIONS + _INTEGER_ORDER + _COMPOSED)


def _subnormal(v, dt):
    v = np.asarray(v, np.float64)
    return (v != 0) & (np.abs(v) < float(np.finfo(dt).tiny))


def _flushed(v, dt):
    v = np.asarray(v, dt)
    return np.where(_subnormal(v, dt), np.copysign(np.zeros_like(v), v), v).astype(dt)


def _agrees(got, want, dt, absolute):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        same_class = (np.isnan(got) == np.isnan(want)) & (np.isinf(got) == np.isinf(want))
        exact = (got == want) | (np.isnan(got) & np.isnan(want))
        scale = np.maximum(np.abs(want), 1.0 if absolute else float(np.finfo(dt).tiny))
        near = np.isfinite(want) & (np.abs(got - want) <= _RTOL[dt] * scale)
        # A subnormal result may come back as a zero of its sign (docs/design.md, "Subnormals").
        flushed = _subnormal(want, dt) & (got == 0) & (np.signbit(got) == np.signbit(want))
    return same_class & (exact | near) | flushed


def _check(name, device, dt, args, scipy_fn):
    args = [np.asarray(a, dt) for a in args]
    got = _run(device, getattr(fsp, name), *args)
    assert got.dtype == dt
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = scipy_fn(*[a.astype(np.float64) for a in args]).astype(dt)
        # A backend may flush subnormal inputs to zeros of their sign: the result at the flushed input also counts.
        want_flushed = scipy_fn(*[_flushed(a, dt).astype(np.float64) for a in args]).astype(dt)
    absolute = name in _ABSOLUTE
    ok = _agrees(got, want, dt, absolute)
    any_sub = np.zeros(got.shape, bool)
    for a in args:
        any_sub |= _subnormal(a, dt)
    # Results that depend on subnormal inputs are pinned only in sign (docs/design.md, "Subnormals").
    with np.errstate(invalid="ignore"):
        same_sign = (np.isnan(got) == np.isnan(want)) & (np.signbit(got) == np.signbit(want))
    ok |= any_sub & (_agrees(got, want_flushed, dt, absolute) | same_sign)
    if name in _DEVIATIONS:
        ok |= _DEVIATIONS[name][0](*args)
    bad = np.flatnonzero(~ok)
    cases = [f"{name}({', '.join(repr(float(a[i])) for a in args)}) = {got[i]!r}, SciPy {want[i]!r}"
             for i in bad[:8]]
    assert not len(bad), f"{device} {dt}: {len(bad)} of {got.size} differ from SciPy:\n" + "\n".join(cases)


@pytest.mark.parametrize("dt", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", _UNARY)
def test_unary_special_functions_at_their_edges(device, name, dt):
    _check(name, device, dt, [_points(dt)], getattr(ss, name))


@pytest.mark.parametrize("dt", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", _BINARY)
def test_binary_special_functions_at_their_edges(device, name, dt):
    q = _grid_points(dt)
    a, b = (v.ravel() for v in np.meshgrid(q, q, indexing="ij"))
    _check(name, device, dt, [a, b], getattr(ss, name))


@pytest.mark.enable_x64
@pytest.mark.parametrize("name", _COMPOSED)
def test_composed_special_functions_at_their_edges(name):
    """Zeros of both signs, poles (0, negative integers), +-inf, NaN, 1e-30 against SciPy in float64 (the
    binary ones on the grid of every pair)."""
    dev = fa.devices("numpy")[0]
    if name in _COMPOSED_UNARY:
        _check(name, dev, F64, [np.concatenate([_points(F64), [-2.5, -30.5, 171.0, 172.0, 1e-300]])],
               getattr(ss, name))
        return
    q = np.array([0.0, -0.0, 1e-30, 0.5, 1.0, 2.0, 3.0, 30.0, np.inf, -np.inf, np.nan, -1.0, -2.0, -0.5, -2.5])
    _check(name, dev, F64, [v.ravel() for v in np.meshgrid(q, q, indexing="ij")], getattr(ss, name))


@pytest.mark.parametrize("dt", [F32, F64], ids=["float32", "float64"])
def test_betainc_at_its_edges(device, dt):
    q = _grid_points(dt)
    xs = np.array([0.0, 1e-30, 0.5, 1.0, np.nan, -0.5, 1.5], dt)
    a, b, x = (v.ravel() for v in np.meshgrid(q, q, xs, indexing="ij"))
    _check("betainc", device, dt, [a, b, x], ss.betainc)


@pytest.mark.parametrize("dt", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", _REDUCTIONS)
def test_softmax_family_at_infinities(device, name, dt):
    rows = [[-np.inf, 0.0], [-np.inf, -np.inf], [np.inf, 1.0], [np.inf, -np.inf], [np.nan, 0.0], [1e30, -1e30],
            [float(np.finfo(dt).max), float(np.finfo(dt).max)]]
    ref = getattr(ss, name)
    for row in rows:
        x = np.array(row, dt)
        got = _run(device, getattr(fsp, name), x)
        with np.errstate(all="ignore"):
            want = np.asarray(ref(x.astype(np.float64))).astype(dt)
        assert _agrees(got, want, dt, False).all(), f"{device} {name}({row}) = {got}, SciPy {want}"


def test_digamma_pole_at_zero_has_its_sign(device):
    # The report: digamma([0, 1e-30]) was [nan, -1e30] (SciPy [-inf, -1e30]); a flushed subnormal was NaN on jax:0.
    got = _run(device, fsp.digamma, np.array([0.0, -0.0, 1e-30, -2.0, 1e-44], np.float32))
    assert got[0] == -np.inf and got[1] == np.inf and np.isnan(got[3])
    np.testing.assert_allclose(got[2], -1e30, rtol=1e-5)
    assert got[4] < -1e38


# ----------------------------------------------------------------------------- 3. reductions and scans with dtype=


_REDUCE_FNS = ["sum", "prod", "nansum", "nanprod", "cumsum", "cumprod", "nancumsum", "nancumprod",
               "cumulative_sum", "cumulative_prod", "mean", "nanmean"]
_IN_DTYPES = ["bool", "int8", "uint8", "int32", "float32", "complex64"]
_OUT_DTYPES = ["bool", "int8", "uint8", "int32", "float16", "float32", "complex64"]


def _reduce_inputs(din):
    """Values that every dtype pair converts the same way in NumPy and fnarray: small, and non-negative where
    an unsigned dtype is involved; with zeros (which bool sees) and without (for products)."""
    rows = [[3, 1, 2, 1, 2], [-1, 1, 0, 2, 0]]
    return [np.array(r).astype(din) for r in rows if not (din in ("bool", "uint8") and min(r) < 0)]


def _parity_pair(device, name, din, dout):
    """Whether ``name(x as din, dtype=dout)`` runs on ``device``: every pair on numpy:0; elsewhere the pairs whose
    positions in ``_IN_DTYPES`` and ``_OUT_DTYPES`` plus the function's in ``_REDUCE_FNS`` sum to a multiple of 3,
    and every pair of the tables' short rows (complex input: one output; ``nanmean``: three), so that each input
    and each output dtype runs for each function."""
    if device.backend == "numpy" or din == "complex64" or name == "nanmean":
        return True
    return (_IN_DTYPES.index(din) + _OUT_DTYPES.index(dout) + _REDUCE_FNS.index(name)) % 3 == 0


@pytest.mark.parametrize("name", _REDUCE_FNS)
def test_reduction_dtype_argument_is_numpys(device, name):
    np_fn = getattr(np, name)
    fails = []
    for din in _IN_DTYPES:
        for dout in _OUT_DTYPES:
            if not _parity_pair(device, name, din, dout):
                continue
            if np.dtype(din).kind == "c" and np.dtype(dout).kind != "c":
                continue  # NumPy drops the imaginary part with a warning; fnarray refuses complex -> real
            if name.startswith("nan") and name.endswith("mean") and np.dtype(dout).kind in "biu":
                continue  # NumPy's nanmean refuses integer and bool dtypes
            for x in _reduce_inputs(din):
                if np.dtype(dout).kind == "u" and (x.astype(np.float64) < 0).any():
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = np.asarray(np_fn(x, dtype=dout))
                    got = np.asarray(getattr(fnp, name)(on_device(x, device), dtype=dout))
                if got.dtype != want.dtype or not np.allclose(got.astype(np.complex128), want.astype(np.complex128),
                                                               rtol=2e-3):
                    fails.append(f"{name}({x.tolist()} as {din}, dtype={dout}) = {got.tolist()} ({got.dtype}), "
                                 f"NumPy {want.tolist()} ({want.dtype})")
    assert not fails, f"{device}: {len(fails)} differ from NumPy:\n" + "\n".join(fails[:10])


def test_cumsum_dtype_bool_is_a_running_or(device):
    # The report: cumsum([-1, 1], dtype=bool) gave [-1, 0] (int32); NumPy [True, True].
    x = on_device(np.array([-1, 1], np.int32), device)
    got = np.asarray(fnp.cumsum(x, dtype=bool))
    assert got.dtype == np.bool_ and got.tolist() == [True, True]
    got = np.asarray(fnp.cumprod(on_device(np.array([-1, 1, 0, 2], np.int32), device), dtype=bool))
    assert got.tolist() == np.cumprod(np.array([-1, 1, 0, 2]), dtype=bool).tolist()


# ----------------------------------------------------------------------------- 2. samplers at their edges


@pytest.mark.parametrize("lo,hi", [(8.0, 1e6), (-1e6, -8.0), (30.0, np.inf), (-np.inf, -30.0), (5.0, 5.5),
                                   (-3.0, -2.5), (100.0, 101.0)])
def test_truncated_normal_far_tails_follow_scipy(device, lo, hi):
    # The report: truncated_normal(key, 8, 1e6) gave samples near 1e6 (erf of both bounds rounds to 1 in float32).
    from scipy import stats
    n = 2000
    x = _run(device, lambda: fa.random.truncated_normal(fa.random.key(11), lo, hi, (n,))).astype(np.float64)
    assert np.all((x > lo) & (x < hi)), f"{device}: samples outside ({lo}, {hi}): {x[(x <= lo) | (x >= hi)][:5]}"
    dist = stats.truncnorm(lo, hi)
    qs = np.array([0.05, 0.5, 0.95])
    want = dist.ppf(qs)
    got = np.quantile(x, qs)
    # The sampling error of a quantile is about sqrt(q (1 - q) / n) / density; the scale is the interval's width
    # near the bound (1 / |bound| in a far tail).
    scale = min(hi - lo, 1.0 / max(min(abs(lo), abs(hi)), 1.0))
    assert np.all(np.abs(got - want) < 0.1 * scale), f"{device} ({lo}, {hi}): quantiles {got}, SciPy {want}"
    assert stats.kstest(x, dist.cdf).pvalue > 1e-4


def test_truncated_normal_float16_tails_follow_scipy():
    """float16 tails go through float32 (as ``log_ndtr``; ``-x²/2`` overflows float16 past 362): ``(12, 13)`` was 85
    float16 eps off, ``(8, inf)`` off as well (numpy:0; the other devices share the program's equations)."""
    from scipy import stats
    for lo, hi in ((12.0, 13.0), (8.0, np.inf)):
        x = np.asarray(fa.random.truncated_normal(fa.random.key(11), lo, hi, (400,), np.float16)).astype(np.float64)
        assert np.all((x > lo) & (x < hi)), (lo, hi, x[(x <= lo) | (x >= hi)][:5])
        qs = np.array([0.05, 0.5, 0.95])
        got, want = np.quantile(x, qs), stats.truncnorm(lo, hi).ppf(qs)
        assert np.all(np.abs(got - want) < 0.1 / lo + 2.0 ** -6), (lo, hi, got, want)


def _edge_pattern(v):
    v = np.asarray(v, np.float64)
    return np.where(np.isnan(v), "nan", np.where(v == -np.inf, "-inf", np.where(v == 0, "0", np.where(
        v == 1, "1", np.where(v < 0, "neg", "pos")))))


def test_gamma_family_at_zero_and_tiny_concentrations_as_jax(device):
    # The report: dirichlet(key, [0, 0.5, 0, 2]) was all NaN and loggamma(key, [0, 1]) began with NaN; JAX gives
    # zero weight to zero concentrations and -inf log samples. tiny a = 1e-30: samples underflow to 0 in gamma,
    # are about log(u) / a in loggamma, and are 0 or 1 in beta.
    import jax
    import jax.numpy as jnp
    a = np.array([0.0, 1e-30, 1.0, -1.0], np.float32)
    k = fa.random.key(0)
    jk = jax.random.key(0)
    cases = [
        (lambda x: fa.random.gamma(k, x), lambda x: jax.random.gamma(jk, x), [a]),
        (lambda x: fa.random.loggamma(k, x), lambda x: jax.random.loggamma(jk, x), [a]),
        (lambda x, y: fa.random.beta(k, x, y), lambda x, y: jax.random.beta(jk, x, y),
         [np.array([0.0, 0.0, 1.0, 0.0, 2.0], np.float32), np.array([1.0, 0.0, 0.0, 1e-30, 3.0], np.float32)]),
        (lambda x: fa.random.dirichlet(k, x), lambda x: jax.random.dirichlet(jk, x),
         [np.array([0.0, 0.5, 0.0, 2.0], np.float32)]),
        (lambda x: fa.random.dirichlet(k, x), lambda x: jax.random.dirichlet(jk, x),
         [np.array([0.0, 0.0], np.float32)]),
    ]
    for ours, theirs, args in cases:
        got = _run(device, ours, *args)
        want = np.asarray(theirs(*[jnp.asarray(v) for v in args]))
        assert _edge_pattern(got).tolist() == _edge_pattern(want).tolist(), f"{device}: {got} vs JAX {want}"
    lg = _run(device, lambda x: fa.random.loggamma(k, x, (200,)), np.float32(1e-30))
    assert np.all(np.isfinite(lg)) and np.all(lg < -1e25)
    b = _run(device, lambda x: fa.random.beta(k, x, x, (200,)), np.float32(1e-30))
    assert set(np.unique(b)) <= {0.0, 1.0} and 0 < b.mean() < 1
    d = _run(device, lambda x: fa.random.dirichlet(k, x, (50,)), np.array([0.0, 0.5, 0.0, 2.0], np.float32))
    assert np.all(d[:, [0, 2]] == 0) and np.allclose(d.sum(-1), 1, atol=1e-5)


def test_choice_with_probabilities_is_linear_in_memory(device):
    # The report: choice(key, 100000, (100000,), p=...) built an [n, n] comparison (37 GiB). n = draws = 10**6
    # would be 4 TB that way; a binary search over the cumulative sum needs a few MB.
    from scipy import stats
    n = 10**6
    w = (np.arange(n) % 10 + 1).astype(np.float32)
    got = _run(device, lambda p: fa.random.choice(fa.random.key(2), n, (n,), p=p), w / w.sum())
    assert got.min() >= 0 and got.max() < n
    counts = np.bincount(got % 10, minlength=10)
    expected = n * np.arange(1, 11) / 55.0
    assert stats.chisquare(counts, expected).pvalue > 1e-4, f"{device}: {counts} vs {expected}"
    blocks = np.bincount(got // 10_000, minlength=100)
    assert stats.chisquare(blocks, np.full(100, n / 100)).pvalue > 1e-4


# ----------------------------------------------------------------------------- 4. gradients at degenerate points


def _sym(rng, n):
    e = rng.standard_normal((n, n))
    return e + e.T


def _directional(device, f, a0, e, h=1e-6):
    """(forward-mode derivative of f at a0 along e, the float64 central finite difference)."""
    a0d, ed = on_device(a0, device), on_device(e, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = float(fa.grad(lambda t: f(a0d + t * ed))(np.float64(0.0)))
        fd = (float(f(on_device(a0 + h * e, device))) - float(f(on_device(a0 - h * e, device)))) / (2 * h)
    return g, fd


@pytest.mark.enable_x64   # float64 against float64 finite differences
def test_eigh_gradient_with_a_repeated_eigenvalue_is_finite(device):
    # The report: grad of eigh(D + p S)[1][1, -1] at p = 0, D = diag(4, 1, 1), S mixing the first two coordinates,
    # was NaN (JAX too); float64 finite differences give 1/3. The vector of 4 is unique: only the pair inside
    # the repeated eigenvalue 1 is ill-defined. v[1, -1] * v[0, -1] does not depend on the vector's sign, which
    # LAPACK flips between p = 0 and p != 0.
    d = np.diag([4.0, 1.0, 1.0])
    s = np.zeros((3, 3))
    s[0, 1] = s[1, 0] = 1.0

    def f(a):
        v = fnp.linalg.eigh(a)[1]
        return v[1, -1] * v[0, -1]
    g, fd = _directional(device, f, d, s)
    assert abs(g - 1 / 3) < 1e-6 and abs(fd - 1 / 3) < 1e-6, (g, fd)
    rng = np.random.default_rng(0)
    for _ in range(3):  # any symmetric direction, also ones that rotate the repeated pair
        g, fd = _directional(device, f, d, _sym(rng, 3))
        assert np.isfinite(g) and abs(g - fd) < 1e-5 * max(1.0, abs(fd)), (g, fd)
        g, fd = _directional(device, lambda a: fnp.sum(fnp.linalg.eigh(a)[0] ** 2), d, _sym(rng, 3))
        assert abs(g - fd) < 1e-5 * max(1.0, abs(fd)), (g, fd)


@pytest.mark.enable_x64   # float64 against float64 finite differences
def test_svd_gradient_with_repeated_singular_values_is_finite(device):
    a0 = np.diag([3.0, 1.0, 1.0, 0.0])[:, :3]  # singular values 3, 1, 1 of a 4x3 matrix
    rng = np.random.default_rng(1)

    def f(a):
        u, _, vt = fnp.linalg.svd(a, full_matrices=False)
        return u[1, 0] * u[0, 0] + vt[0, 2] * vt[0, 0]
    for _ in range(3):
        e = rng.standard_normal((4, 3))
        g, fd = _directional(device, f, a0, e)
        assert np.isfinite(g) and abs(g - fd) < 1e-5 * max(1.0, abs(fd)), (g, fd)
    g, fd = _directional(device, lambda a: fnp.sum(fnp.linalg.svd(a, compute_uv=False) ** 3), a0, e)
    assert abs(g - fd) < 1e-5 * max(1.0, abs(fd)), (g, fd)
