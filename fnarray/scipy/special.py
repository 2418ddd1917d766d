"""Special functions (mirrors ``jax.scipy.special``; SciPy's names and conventions).

Every function is a composite of fnarray primitives, so it runs, differentiates and vectorizes on every
backend. Integer and bool inputs are computed in ``float32``; float16 and bfloat16 in float32, rounded once.
The formulas are chosen to stay accurate in float32 in the tails (``log_ndtr(-40)``, ``ndtri(1e-30)``,
``gammaln(1e30)``, ``i0e(1e4)``); each function's docstring names its method. Derivatives are the
analytic ones (``custom_jvp``) where differentiating the formula would be inaccurate or NaN at a boundary
(``xlogy(0, y)``, ``log_ndtr`` in the tails, ``ndtri``, ``gammainc``, ``betainc``).

SciPy is used only as the tests' oracle, never imported here.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.numpy._bessel import bessel_ie, i0_of, scaled_up
from fnarray.scipy._util import floats, from_math, to_math
from fnarray.scipy._util import log1p as _log1p
from fnarray.transforms.ad import custom_jvp

__all__ = [
    "betainc", "betaln", "digamma", "entr", "erf", "erfc", "erfinv", "expit", "gammainc", "gammaincc", "gammaln", "i0",
    "i0e", "i1", "i1e", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "polygamma",
    "softmax", "xlog1py", "xlogy", "zeta", "beta", "boxcox", "boxcox1p", "comb", "factorial", "gamma", "gammasgn",
    "kl_div", "loggamma", "poch", "rel_entr",
]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _unary(name, x):
    (x,) = floats(name, x)
    return x, x.dtype


# ----------------------------------------------------------------------------- error function family


def erf(x):
    """Error function (``scipy.special.erf``; ``jax.scipy.special.erf``).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, _ = _unary("erf", x)
    return lax.erf(x)


def erfc(x):
    """Complementary error function ``1 - erf(x)`` without cancellation (``scipy.special.erfc``).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype, accurate in relative terms for large ``x``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, _ = _unary("erfc", x)
    return lax.erfc(x)


def erfinv(x):
    """Inverse error function on ``[-1, 1]`` (``scipy.special.erfinv``); ``±1`` give ``±inf``, outside NaN.

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, _ = _unary("erfinv", x)
    return lax.erf_inv(x)


def ndtr(x):
    """Standard normal CDF ``Phi(x) = erfc(-x / sqrt(2)) / 2`` (``scipy.special.ndtr``).

    Written with ``erfc`` (not ``1 + erf``), so that the lower tail keeps its relative accuracy down to the
    underflow of the dtype (``ndtr(-37)`` is ~5.7e-300 in float64, ~1e-38 near float32's limit).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype, in ``[0, 1]``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, d = _unary("ndtr", x)
    (xm,) = to_math(x)
    return from_math(0.5 * lax.erfc(xm * -math.sqrt(0.5)), d)


def _log_ndtr_bounds(d):
    # Below this bound log(ndtr(x)) is replaced by the asymptotic series (JAX's bounds: above, ndtr keeps its
    # relative accuracy in the dtype; below, the series' first omitted term is below the dtype's epsilon).
    return -37.0 if d == dtypes.float64 else -10.0


def _log_ndtr_value(x, series_order):
    fnp = _fnp()
    lower = _log_ndtr_bounds(x.dtype)
    x_mid = fnp.clip(x, lower, 0.0)
    mid = fnp.log(0.5 * lax.erfc(x_mid * -math.sqrt(0.5)))
    # Above 0, log1p(-ndtr(-x)): log(ndtr(x)) would round ndtr(x) near 1 first (4% off at x = 5 in float32).
    x_hi = fnp.maximum(x, 0.0)
    hi = _log1p(-0.5 * lax.erfc(x_hi * math.sqrt(0.5)))
    x_lo = fnp.minimum(x, lower)
    # log Phi(x) = -x^2/2 - log(-x) - log(sqrt(2 pi)) + log(1 + sum_k (-1)^k (2k-1)!! / x^(2k)) (Abramowitz
    # and Stegun 26.2.12, asymptotic for x -> -inf).
    inv2 = 1.0 / (x_lo * x_lo)
    series = fnp.ones_like(x_lo)
    term = fnp.ones_like(x_lo)
    for k in range(1, series_order + 1):
        term = term * (-(2 * k - 1)) * inv2
        series = series + term
    lo = -0.5 * x_lo * x_lo - fnp.log(-x_lo) - _LOG_SQRT_2PI + _log1p(series - 1.0)
    return fnp.where(x > 0.0, hi, fnp.where(x > lower, mid, lo))


def _log_ndtr(x, series_order):
    (xm,) = to_math(x)
    return from_math(_log_ndtr_value(xm, series_order), x.dtype)


_log_ndtr_cj = custom_jvp(_log_ndtr, nondiff_argnums=(1,))


@_log_ndtr_cj.defjvp
def _log_ndtr_jvp(series_order, primals, tangents):
    (x,), (t,) = primals, tangents
    out = _log_ndtr_cj(x, series_order)
    # d/dx log Phi(x) = phi(x) / Phi(x) = exp(log phi(x) - log Phi(x)), finite in both tails.
    return out, t * _fnp().exp(-0.5 * x * x - _LOG_SQRT_2PI - out)


def log_ndtr(x, series_order=3):
    """``log(ndtr(x))``, accurate in both tails (``scipy.special.log_ndtr``; ``jax.scipy.special.log_ndtr``).

    Three regions: ``log1p(-ndtr(-x))`` above 0; ``log(ndtr(x))`` down to -10 (float32) or -20 (float64);
    below -10 (float32) or -37 (float64) the asymptotic series of Abramowitz and Stegun 26.2.12
    with ``series_order`` terms, so that ``log_ndtr(-40) = -804.608...`` in float32. The derivative is
    ``phi(x) / Phi(x)``, computed as ``exp(log phi - log_ndtr)`` (finite for every finite ``x``).

    Args:
      x: a real array or scalar.
      series_order: the number of terms of the asymptotic series, an int in ``[0, 30]``.

    Returns:
      An array of ``x``'s shape and floating dtype, ``<= 0``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
      ValueError: ``series_order`` is not an int in ``[0, 30]``.
    """
    if isinstance(series_order, bool) or not isinstance(series_order, (int, np.integer)) \
            or not 0 <= series_order <= 30:
        raise ValueError(f"log_ndtr: series_order must be an int in [0, 30], got {series_order!r}")
    x, _ = _unary("log_ndtr", x)
    return _log_ndtr_cj(x, int(series_order))


def _ndtri_value(p):
    fnp = _fnp()
    d = p.dtype
    # Central part, exp(-2) < p < 1 - exp(-2): sqrt(2) * erfinv(2p - 1), where 2p - 1 keeps its accuracy.
    central = math.sqrt(2.0) * lax.erf_inv(2.0 * p - 1.0)
    # Tails: q = min(p, 1 - p) (1 - p is exact for p >= 1/2), x0 from Abramowitz and Stegun 26.2.23
    # (|error| < 4.5e-4), then Newton's method on log_ndtr(x) = log(q), which keeps the relative accuracy
    # of q however small it is.
    upper = p > 0.5
    q = fnp.where(upper, 1.0 - p, p)
    q = fnp.clip(q, dtypes.finfo(d).tiny, 0.5)
    t = fnp.sqrt(-2.0 * fnp.log(q))
    num = 2.515517 + t * (0.802853 + t * 0.010328)
    den = 1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    x = num / den - t
    log_q = fnp.log(q)
    for _ in range(3 if d == dtypes.float64 else 2):
        f = _log_ndtr_value(x, 3 if d != dtypes.float64 else 8)
        x = x - (f - log_q) * fnp.exp(f + 0.5 * x * x + _LOG_SQRT_2PI)
    tail = fnp.where(upper, -x, x)
    edge = math.exp(-2.0)
    r = fnp.where((p > edge) & (p < 1.0 - edge), central, tail)
    r = fnp.where(p == 0.0, -np.inf, fnp.where(p == 1.0, np.inf, r))
    return fnp.where((p < 0.0) | (p > 1.0) | fnp.isnan(p), np.nan, r)


@custom_jvp
def _ndtri(p):
    (pm,) = to_math(p)
    return from_math(_ndtri_value(pm), p.dtype)


@_ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    (p,), (t,) = primals, tangents
    x = _ndtri(p)
    # d/dp Phi^-1(p) = 1 / phi(x) = sqrt(2 pi) exp(x^2 / 2).
    return x, t * _fnp().exp(0.5 * x * x + _LOG_SQRT_2PI)


def ndtri(p):
    """The inverse of ``ndtr``: the standard normal quantile function (``scipy.special.ndtri``).

    Method: ``sqrt(2) * erfinv(2p - 1)`` for ``exp(-2) < p < 1 - exp(-2)``; in the tails an initial value from
    Abramowitz and Stegun 26.2.23 refined by Newton's method on ``log_ndtr(x) = log(min(p, 1 - p))`` (two
    steps in float32, three in float64), so that ``ndtri(1e-30)`` keeps full relative accuracy. 0 gives
    ``-inf``, 1 gives ``inf``, outside ``[0, 1]`` NaN. The derivative is ``1 / phi(ndtri(p))``.

    Args:
      p: a real array or scalar of probabilities.

    Returns:
      An array of ``p``'s shape and floating dtype.

    Raises:
      TypeError: ``p`` is not an array or a scalar.
      DTypeError: ``p`` is complex.
    """
    p, _ = _unary("ndtri", p)
    return _ndtri(p)


# ----------------------------------------------------------------------------- logistic


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))`` (``scipy.special.expit``).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype, in ``[0, 1]``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, _ = _unary("expit", x)
    return lax.logistic(x)


def logit(x):
    """``log(x / (1 - x))``, the inverse of ``expit`` (``scipy.special.logit``), as ``log(x) - log1p(-x)``.

    Args:
      x: a real array or scalar in ``[0, 1]`` (0 gives ``-inf``, 1 gives ``inf``, outside NaN).

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    fnp = _fnp()
    x, _ = _unary("logit", x)
    return fnp.log(x) - _log1p(-x)


# ----------------------------------------------------------------------------- gamma family


def gammaln(x):
    """``log|Gamma(x)|`` (``scipy.special.gammaln``), by the ``lgamma`` primitive; ``+inf`` at the poles and at
    ``+inf``, ``-inf`` at ``-inf`` (as SciPy: ``|Gamma|`` decays there; C's ``lgamma`` gives ``+inf``), and exactly 0
    at its zeros 1 and 2 (where XLA's float32 ``lgamma`` is 4 ulps of 1 off).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    fnp = _fnp()
    x, _ = _unary("gammaln", x)
    return fnp.where(x == -np.inf, -np.inf, _lgamma(x))


def _lgamma(x):
    """``lax.lgamma`` with its zeros at 1 and 2 exact (the correction is a constant: the derivative stays)."""
    y = lax.lgamma(x)
    return y - lax.stop_gradient(_fnp().where((x == 1.0) | (x == 2.0), y, 0.0))


def digamma(x):
    """The digamma function ``d/dx log Gamma(x)`` (``scipy.special.digamma``): ``-inf`` at ``+0``, ``+inf`` at
    ``-0`` (the pole's sign, as SciPy; a backend that flushes subnormals gives the same for them), NaN at the
    negative integers.

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, _ = _unary("digamma", x)
    return lax.digamma(x)


def _stirling_correction(x):
    """``lgamma(x) - ((x - 1/2) log x - x + log sqrt(2 pi))`` for ``x >= 8``: the Stirling series to
    ``x**-9`` (below 6e-12 absolute at 8)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 * (1 / 1680 - inv2 / 1188))))


def betaln(a, b):
    """``log|B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)`` (``scipy.special.betaln``).

    For positive arguments the cancellation of the three ``lgamma``s at large arguments is avoided as in
    R's ``lbeta`` (from the Stirling series: with ``p = min(a, b)``, ``q = max(a, b)``, ``q >= 8``, 20 in
    float64), so that ``betaln(1e6, 1e6)`` keeps its relative accuracy in float32; otherwise the three ``lgamma``s.
    Edges: ``+inf`` where an argument is 0 (and the other >= 0), ``-inf`` where one is ``+inf`` and the other
    positive and finite, NaN at ``(inf, inf)`` and for NaN (SciPy gives ``+inf`` for ``(nan, 0)``); negative
    arguments go through the three ``lgamma``s (NaN where two poles meet, as ``betaln(-1, 1)``, which SciPy
    takes as the limit 0).

    Args:
      a, b: real arrays or scalars, broadcast together.

    Returns:
      An array of the broadcast shape and the promoted floating dtype.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    fnp = _fnp()
    a, b = floats("betaln", a, b)
    d = a.dtype
    a, b = to_math(a, b)
    p, q = fnp.minimum(a, b), fnp.maximum(a, b)
    plain = _lgamma(a) + _lgamma(b) - _lgamma(a + b)
    # Stirling's series to x**-9 is 6e-12 off at 8 (enough for float32), 1e-17 at 20.
    lo = 20.0 if a.dtype == dtypes.float64 else 8.0
    both = p >= lo
    one = (q >= lo) & (p > 0.0)
    # Each branch is evaluated on clamped arguments, so that the others' derivatives stay finite.
    pb, qb = fnp.maximum(p, lo), fnp.maximum(q, lo)
    ratio = pb / (pb + qb)
    big = (-0.5 * fnp.log(qb) + _LOG_SQRT_2PI + _stirling_correction(pb) + _stirling_correction(qb)
           - _stirling_correction(pb + qb) + (pb - 0.5) * fnp.log(ratio) + qb * _log1p(-ratio))
    ps = fnp.where(one, p, 1.0)
    r1 = ps / (ps + qb)
    mixed = (lax.lgamma(ps) + _stirling_correction(qb) - _stirling_correction(ps + qb) + ps
             - ps * fnp.log(ps + qb) + (qb - 0.5) * _log1p(-r1))
    r = fnp.where(both, big, fnp.where(one, mixed, plain))
    # Edges of the domain a, b >= 0 (SciPy's values): a pole where either is 0, -inf where one is +inf and the
    # other positive and finite (B(a, b) ~ Gamma(p) q**-p -> 0); NaN at inf, inf.
    r = fnp.where((q == np.inf) & (p > 0.0), -np.inf, r)
    r = fnp.where((p == 0.0) & (q >= 0.0), np.inf, r)
    return from_math(fnp.where((p == np.inf) | fnp.isnan(a) | fnp.isnan(b), np.nan, r), d)


def _prefix(a, x, shift):
    """``exp(a log x - x - lgamma(a + shift))`` (shift 0 or 1) and its logarithm's derivative in ``a``.

    For ``a >= 8`` the logarithm is ``a (log1p(e) - e) - log sqrt(2 pi a) - stirling(a)`` with ``e = (x - a) / a``
    (``lgamma`` by Stirling's series), which avoids the cancellation of ``a log x`` against ``lgamma(a+1)``:
    in float32 that cancellation costs 4e-4 relative at ``a = x = 1000``.
    """
    fnp = _fnp()
    log_x = fnp.log(x)
    plain = a * log_x - x - lax.lgamma(a + 1.0)
    big = a >= 8.0
    ab = fnp.where(big, a, 8.0)
    e = (x - ab) / ab
    stirling = ab * (_log1p(e) - e) - 0.5 * fnp.log(2 * math.pi * ab) - _stirling_correction(ab)
    log_pre = fnp.where(big, stirling, plain)
    if shift == 0.0:
        log_pre = log_pre + fnp.log(a)
    return fnp.exp(log_pre), log_x - lax.digamma(a + shift)


_IGAMMA_MAX_ITERATIONS = 2000


def _igamma_parts(a, x):
    """``(P, Q, dP/da)`` of the regularized incomplete gamma function at valid ``a > 0, x > 0``.

    Where ``x < a + 1`` the power series of ``P`` (Abramowitz and Stegun 6.5.29), elsewhere the continued
    fraction of ``Q`` (A&S 6.5.31) evaluated by the modified Lentz method; both carry their derivative in
    ``a`` alongside. One ``while_loop`` runs both until every element has converged (relative change below
    the dtype's epsilon), at most 2,000 iterations.
    """
    from fnarray.transforms.control_flow import while_loop
    fnp = _fnp()
    d = a.dtype
    eps = float(dtypes.finfo(d).eps)
    tiny = float(dtypes.finfo(d).tiny) * 16
    use_series = x < a + 1.0
    # Series: S = sum_n t_n, t_0 = 1, t_n = t_{n-1} x / (a + n); dt_n/da = t_n u_n, u_n = u_{n-1} - 1/(a + n).
    zero, one = fnp.zeros_like(a), fnp.ones_like(a)
    # Continued fraction (Lentz): h = 1 / (b_0 + a_1 / (b_1 + ...)), b_i = x + 2i + 1 - a, a_i = -i (i - a).
    b0 = x + 1.0 - a
    b0 = fnp.where(fnp.abs(b0) < tiny, tiny, b0)
    init = (np.int32(0), one, one, zero, zero,          # i, t, S, u, dS
            one / tiny + zero, 1.0 / b0, 1.0 / b0, zero, 1.0 / (b0 * b0), 1.0 / (b0 * b0),  # c, dd, h, dc, ddd, dh
            fnp.zeros(a.shape, dtype=dtypes.bool_))

    def cond(s):
        return (s[0] < _IGAMMA_MAX_ITERATIONS) & ~fnp.all(s[-1])

    def body(s):
        i, t, S, u, dS, c, dd, h, dc, ddd, dh, done = s
        n = (i + 1).astype(d)
        # series
        t_new = t * x / (a + n)
        u_new = u - 1.0 / (a + n)
        S_new = S + t_new
        dS_new = dS + t_new * u_new
        # Done when both the sum and its derivative have stopped changing (for an integer a the fraction's
        # value terminates exactly, a_i = 0 at i = a, while its derivative in a does not).
        series_done = (t_new <= eps * S_new) & (fnp.abs(t_new * u_new) <= eps * fnp.abs(dS_new))
        # continued fraction; the derivatives in a of d, c and h (dd holds d itself, ddd its derivative)
        an = -n * (n - a)
        dan = n
        b = x + 2.0 * n + 1.0 - a
        db = -1.0
        den = an * dd + b
        den = fnp.where(fnp.abs(den) < tiny, tiny, den)
        d_new = 1.0 / den
        dd_new = -(dan * dd + an * ddd + db) * d_new * d_new
        c_new = b + an / c
        dc_new = db + dan / c - an * dc / (c * c)
        small_c = fnp.abs(c_new) < tiny
        c_new = fnp.where(small_c, tiny, c_new)
        dc_new = fnp.where(small_c, 0.0, dc_new)
        delta = c_new * d_new
        ddelta = dc_new * d_new + c_new * dd_new
        h_new = h * delta
        dh_new = dh * delta + h * ddelta
        cf_done = (fnp.abs(delta - 1.0) <= eps) & (fnp.abs(dh_new - dh) <= eps * fnp.abs(dh_new))
        newly = fnp.where(use_series, series_done, cf_done)
        keep = done

        def upd(old, new):
            return fnp.where(keep, old, new)
        return (i + 1, upd(t, t_new), upd(S, S_new), upd(u, u_new), upd(dS, dS_new), upd(c, c_new),
                upd(dd, d_new), upd(h, h_new), upd(dc, dc_new), upd(ddd, dd_new), upd(dh, dh_new), done | newly)

    _, _, S, _, dS, _, _, h, _, _, dh, _ = while_loop(cond, body, init)
    # P from the series: prefix(a, x, 1) * S; Q from the fraction: prefix(a, x, 0) * h.
    pre1, dlog1 = _prefix(a, x, 1.0)
    pre0, dlog0 = _prefix(a, x, 0.0)
    p_series = pre1 * S
    dp_series = p_series * dlog1 + pre1 * dS
    q_cf = pre0 * h
    dq_cf = q_cf * dlog0 + pre0 * dh
    p = fnp.where(use_series, p_series, 1.0 - q_cf)
    q = fnp.where(use_series, 1.0 - p_series, q_cf)
    dpda = fnp.where(use_series, dp_series, -dq_cf)
    return p, q, dpda


_Q_SMALL_A_TERMS = 30  # x < 1.5: the series' terms x**n / n! fall below 1e-20 of its sum by n = 30
_EULER_GAMMA = 0.5772156649015329


def _zeta(k, n=100):
    """Riemann's zeta at an integer ``k >= 2``: the sum to ``n`` and the Euler-Maclaurin tail (below 1e-30 off)."""
    head = math.fsum(m ** -float(k) for m in range(1, n))
    return head + n ** (1.0 - k) / (k - 1) + 0.5 * n ** -float(k) + k * n ** (-k - 1.0) / 12


# lgamma(1 + a) = -gamma a + sum_{k >= 2} (-1)**k zeta(k) a**k / k (A&S 6.1.33): 18 terms reach 1e-20 below 0.1.
_LGAMMA1P = tuple((-1) ** k * _zeta(k) / k for k in range(2, 20))


def _lgamma1p(a):
    """``lgamma(1 + a)`` keeping its relative accuracy for tiny ``a`` (where ``1 + a`` rounds to 1)."""
    fnp = _fnp()
    acc = fnp.zeros_like(a)
    for c in _LGAMMA1P[::-1]:
        acc = (acc + c) * a
    series = a * (acc - _EULER_GAMMA)
    return fnp.where(a < 0.1, series, lax.lgamma(a + 1.0))


def _q_small_a(a, x):
    """``Q(a, x)`` for ``a < 1/2`` and ``x < a + 1``, where ``1 - P`` cancels (``P`` tends to 1 as ``a -> 0``):
    ``Q = -expm1(a log x - lgamma(a + 1)) - x**a / Gamma(a + 1) * a * T`` with
    ``T = sum_{n >= 1} (-x)**n / (n! (a + n))``, from the series ``gamma(a, x) = sum_n (-1)**n x**(a + n) /
    (n! (a + n))`` (as Boost's ``tgamma_small_upper_part``). Keeps relative accuracy at ``a = 1e-30``."""
    fnp = _fnp()
    log_pre = a * fnp.log(x) - _lgamma1p(a)
    term = fnp.ones_like(x)
    total = fnp.zeros_like(x)
    for n in range(1, _Q_SMALL_A_TERMS + 1):
        term = term * (-x) / n
        total = total + term / (a + n)
    return -lax.expm1(log_pre) - fnp.exp(log_pre) * a * total


def _igamma_all(a, x):
    """``(P, Q, dP/da, dP/dx)`` everywhere: 0/1 at ``x = 0`` and ``x = inf``, NaN outside the domain."""
    fnp = _fnp()
    # a = 0 is SciPy's and JAX's limit P(0, x) = 1 for x > 0 (the mass sits at 0); P(0, 0) and P(inf, inf) are NaN.
    bad = ((a < 0.0) | (x < 0.0) | fnp.isnan(a) | fnp.isnan(x) | ((a == 0.0) & (x == 0.0))
           | (fnp.isinf(a) & fnp.isinf(x)))
    edge = (x == 0.0) | fnp.isinf(x) | fnp.isinf(a) | (a == 0.0)
    ok = ~(bad | edge)
    a_s, x_s = fnp.where(ok, a, 1.0), fnp.where(ok, x, 1.0)
    p, q, dpda = _igamma_parts(a_s, x_s)
    small_a = ok & (a < 0.5) & (x < a + 1.0)
    q = fnp.where(small_a, _q_small_a(fnp.where(small_a, a, 0.25), fnp.where(small_a, x, 0.5)), q)
    dpdx = fnp.exp((a_s - 1.0) * fnp.log(x_s) - x_s - lax.lgamma(a_s))
    p_edge = fnp.where(fnp.isinf(a) | (x == 0.0), 0.0, 1.0)
    p = fnp.where(ok, p, fnp.where(bad, np.nan, p_edge))
    q = fnp.where(ok, q, fnp.where(bad, np.nan, 1.0 - p_edge))
    dpda = fnp.where(ok, dpda, fnp.where(bad, np.nan, 0.0))
    dpdx = fnp.where(ok, dpdx, fnp.where(bad, np.nan, 0.0))
    return p, q, dpda, dpdx


@custom_jvp
def _gammainc(a, x):
    d = a.dtype
    a, x = to_math(a, x)
    return from_math(_igamma_all(a, x)[0], d)


@_gammainc.defjvp
def _gammainc_jvp(primals, tangents):
    (a, x), (ta, tx) = primals, tangents
    d = a.dtype
    am, xm = to_math(a, x)
    p, _, dpda, dpdx = _igamma_all(am, xm)
    return from_math(p, d), ta * from_math(dpda, d) + tx * from_math(dpdx, d)


@custom_jvp
def _gammaincc(a, x):
    d = a.dtype
    a, x = to_math(a, x)
    return from_math(_igamma_all(a, x)[1], d)


@_gammaincc.defjvp
def _gammaincc_jvp(primals, tangents):
    (a, x), (ta, tx) = primals, tangents
    d = a.dtype
    am, xm = to_math(a, x)
    _, q, dpda, dpdx = _igamma_all(am, xm)
    return from_math(q, d), -(ta * from_math(dpda, d) + tx * from_math(dpdx, d))


def gammainc(a, x):
    """The regularized lower incomplete gamma function ``P(a, x)`` (``scipy.special.gammainc``).

    Method: for ``x < a + 1`` the power series (Abramowitz and Stegun 6.5.29), else ``1 - Q`` with ``Q`` from
    the continued fraction (A&S 6.5.31, modified Lentz), iterated in one bounded ``while_loop`` (at most
    2,000 iterations, ample for ``a`` up to about 1e6). Differentiable in both arguments: ``dP/dx`` is
    ``x**(a-1) exp(-x) / Gamma(a)``; ``dP/da`` is carried through the same iterations (forward and reverse
    mode both work: the rule is a ``custom_jvp``). ``P(a, 0) = 0``, ``P(a, inf) = 1``, ``P(0, x) = 1`` for
    ``x > 0`` (SciPy's and JAX's limit), ``P(inf, x) = 0`` for finite ``x``; ``a < 0``, ``x < 0``,
    ``P(0, 0)`` and ``P(inf, inf)`` give NaN.

    Args:
      a: positive real array or scalar (the shape parameter).
      x: non-negative real array or scalar; broadcast with ``a``.

    Returns:
      An array of the broadcast shape and the promoted floating dtype, in ``[0, 1]``.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    a, x = floats("gammainc", a, x)
    return _gammainc(a, x)


def gammaincc(a, x):
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)`` (``scipy.special.gammaincc``).

    Computed directly (the continued fraction where ``x >= a + 1``; for ``a < 1/2`` below it, Boost's small-``a``
    form with ``expm1``, where ``1 - P`` would cancel: ``gammaincc(1e-30, 0.5) = 5.6e-31``), so small upper
    tails keep their relative accuracy. See ``gammainc`` for the method, the domain and the derivatives.

    Args:
      a: positive real array or scalar.
      x: non-negative real array or scalar; broadcast with ``a``.

    Returns:
      An array of the broadcast shape and the promoted floating dtype, in ``[0, 1]``.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    a, x = floats("gammaincc", a, x)
    return _gammaincc(a, x)


# ----------------------------------------------------------------------------- x log y


@custom_jvp
def _xlogy(x, y):
    fnp = _fnp()
    # 0 where x == 0, except that a NaN y stays NaN (as SciPy; JAX gives 0).
    zero = (x == 0.0) & ~fnp.isnan(y)
    return fnp.where(zero, 0.0, x * fnp.log(fnp.where(zero, 1.0, y)))


@_xlogy.defjvp
def _xlogy_jvp(primals, tangents):
    fnp = _fnp()
    (x, y), (tx, ty) = primals, tangents
    return _xlogy(x, y), tx * fnp.log(y) + ty * x / y


@custom_jvp
def _xlog1py(x, y):
    fnp = _fnp()
    zero = (x == 0.0) & ~fnp.isnan(y)
    return fnp.where(zero, 0.0, x * _log1p(fnp.where(zero, 0.0, y)))


@_xlog1py.defjvp
def _xlog1py_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return _xlog1py(x, y), tx * _log1p(y) + ty * x / (1.0 + y)


def xlogy(x, y):
    """``x * log(y)``, 0 where ``x == 0`` (even for ``y = 0``; NaN for a NaN ``y``) (``scipy.special.xlogy``).

    The derivative is JAX's: ``log(y)`` in ``x`` and ``x / y`` in ``y`` (NaN in ``y`` at ``x = y = 0``).

    Args:
      x, y: real arrays or scalars, broadcast together.

    Returns:
      An array of the broadcast shape and the promoted floating dtype.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    x, y = floats("xlogy", x, y)
    return _xlogy(x, y)


def xlog1py(x, y):
    """``x * log1p(y)``, 0 where ``x == 0`` (even for ``y = -1``; NaN for a NaN ``y``) (``scipy.special.xlog1py``).

    Args:
      x, y: real arrays or scalars, broadcast together.

    Returns:
      An array of the broadcast shape and the promoted floating dtype.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    x, y = floats("xlog1py", x, y)
    return _xlog1py(x, y)


def entr(x):
    """Elementwise entropy ``-x log x`` for ``x > 0``, 0 at 0, ``-inf`` for ``x < 0`` (``scipy.special.entr``).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    fnp = _fnp()
    x, _ = _unary("entr", x)
    # Near 1, log1p(x - 1) (x - 1 is exact there): WGSL's log may be 2**-21 off in absolute terms near 1.
    # The other branches see x = 1, so that no NaN reaches the derivative through them.
    xs = fnp.where(x <= 0.0, 1.0, x)
    near_one = fnp.abs(xs - 1.0) < 0.25
    log_x = fnp.where(near_one, _log1p(xs - 1.0), fnp.log(fnp.where(near_one, 1.0, xs)))
    # At 0 the value 0 with JAX's one-sided derivatives (+inf, then -inf): -x log x by a rule of its own. Elsewhere
    # it sees 0, whose infinite derivative the select's zero cotangent never reaches.
    at_zero = -_xlogx(fnp.where(x == 0.0, x, 0.0)) + 0.0   # +0, as SciPy
    return fnp.where(x < 0.0, -np.inf, fnp.where(x == 0.0, at_zero, -xs * log_x))


@custom_jvp
def _xlogx(x):
    """``x log x`` of a non-negative ``x`` (0 at 0), whose derivative ``log x + 1`` is ``-inf`` at 0."""
    fnp = _fnp()
    return fnp.where(x == 0.0, 0.0, x * fnp.log(fnp.where(x == 0.0, 1.0, x)))


@_xlogx.defjvp
def _xlogx_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _xlogx(x), t * (_fnp().log(x) + 1.0)


# ----------------------------------------------------------------------------- incomplete beta


_IBETA_MAX_ITERATIONS = 1000


def _ibeta_log_front(a, b, x, y, log_x, log_y):
    """``log(x**a y**b / B(a, b))`` (``y = 1 - x``), for valid ``a, b > 0`` and ``0 < x < 1``.

    Where both ``a, b >= 8`` (20 in float64) from Stirling's series (the idea of Boost's
    ``ibeta_power_terms``): with ``dx = x b - y a = (a + b) (x - a / (a + b))`` it is
    ``a (log1p(dx/a) - dx/a) + b (log1p(-dx/b) + dx/b) + log sqrt(a b / (2 pi (a + b))) - stirling(a)
    - stirling(b) + stirling(a + b)``, which avoids the cancellation of ``a log x`` against ``betaln`` (in
    float32 it costs 1e-4 relative at ``a = b = 1000``); ``log1p(dx/a)`` is ``log x + log1p(b/a)`` where
    ``dx/a < -1/2`` (small ``x``, where ``1 + dx/a`` cancels). Elsewhere ``a log x + b log y - betaln(a, b)``.
    """
    fnp = _fnp()
    # Stirling's series to x**-9 is 6e-12 off at 8 (enough for float32), 1e-17 at 20.
    lo = 20.0 if a.dtype == dtypes.float64 else 8.0
    big = (a >= lo) & (b >= lo)
    ab, bb = fnp.where(big, a, lo), fnp.where(big, b, lo)
    dx = x * bb - y * ab
    ea, eb = dx / ab, -dx / bb
    # log1p(ea) = log(x (a + b) / a): directly from log x where ea nears -1 (small x), as 1 + ea cancels there.
    la = fnp.where(ea < -0.5, log_x + _log1p(bb / ab), _log1p(fnp.maximum(ea, -0.5)))
    lb = fnp.where(eb < -0.5, log_y + _log1p(ab / bb), _log1p(fnp.maximum(eb, -0.5)))
    stirling = (ab * (la - ea) + bb * (lb - eb)
                + 0.5 * fnp.log(ab * bb / (ab + bb)) - _LOG_SQRT_2PI
                - _stirling_correction(ab) - _stirling_correction(bb) + _stirling_correction(ab + bb))
    plain = a * log_x + b * log_y - betaln(a, b)
    return fnp.where(big, stirling, plain)


def _ibeta_fraction(a, b, x):
    """The continued fraction ``h`` with ``I_x(a, b) = x**a (1-x)**b / (a B(a, b)) * h`` and its derivatives
    in ``a`` and ``b``, for valid ``a, b > 0``, ``0 < x <= (a + 1) / (a + b + 2)`` (where it converges fast).

    ``h = 1 / (1 + d_1 / (1 + d_2 / (1 + ...)))`` with ``d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m))`` and
    ``d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))`` (Abramowitz and Stegun 26.5.8; Numerical
    Recipes' ``betacf``; Cephes' ``incbcf``), evaluated by the modified Lentz method in one ``while_loop``
    (two terms an iteration, at most 1,000 iterations), the derivatives carried alongside, until the value
    and both derivatives change by less than the dtype's epsilon.
    """
    from fnarray.transforms.control_flow import while_loop
    fnp = _fnp()
    d = a.dtype
    eps = float(dtypes.finfo(d).eps)
    tiny = float(dtypes.finfo(d).tiny) * 16
    zero = fnp.zeros_like(a)

    def step(state, al, al_a, al_b):
        c, dd, h, c_a, c_b, d_a, d_b, h_a, h_b = state
        den = 1.0 + al * dd
        den = fnp.where(fnp.abs(den) < tiny, tiny, den)
        dn = 1.0 / den
        dn_a = -(al_a * dd + al * d_a) * dn * dn
        dn_b = -(al_b * dd + al * d_b) * dn * dn
        cn = 1.0 + al / c
        cn_a = al_a / c - al * c_a / (c * c)
        cn_b = al_b / c - al * c_b / (c * c)
        small = fnp.abs(cn) < tiny
        cn = fnp.where(small, tiny, cn)
        cn_a, cn_b = fnp.where(small, 0.0, cn_a), fnp.where(small, 0.0, cn_b)
        delta = cn * dn
        hn = h * delta
        hn_a = h_a * delta + h * (cn_a * dn + cn * dn_a)
        hn_b = h_b * delta + h * (cn_b * dn + cn * dn_b)
        return (cn, dn, hn, cn_a, cn_b, dn_a, dn_b, hn_a, hn_b), delta

    # The first term: h = 1 / (1 + d_1), d_1 = -(a + b) x / (a + 1).
    al1 = -(a + b) * x / (a + 1.0)
    den = 1.0 + al1
    den = fnp.where(fnp.abs(den) < tiny, tiny, den)
    d0 = 1.0 / den
    d0_a = x * (1.0 - b) / ((a + 1.0) * (a + 1.0)) * d0 * d0
    d0_b = x / (a + 1.0) * d0 * d0
    init = (np.int32(0), (zero + 1.0, d0, d0, zero, zero, d0_a, d0_b, d0_a, d0_b),
            fnp.zeros(a.shape, dtype=dtypes.bool_))

    def cond(s):
        return (s[0] < _IBETA_MAX_ITERATIONS) & ~fnp.all(s[-1])

    def body(s):
        i, state, done = s
        m = (i + 1).astype(d)
        a2m = a + 2.0 * m
        # even term d_{2m}
        q = x / ((a2m - 1.0) * a2m)
        al = m * (b - m) * q
        new, _ = step(state, al, -al * (1.0 / (a2m - 1.0) + 1.0 / a2m), m * q)
        # odd term d_{2m+1}
        q = x / (a2m * (a2m + 1.0))
        al = -(a + m) * (a + b + m) * q
        al_a = al * (1.0 / (a + m) + 1.0 / (a + b + m) - 1.0 / a2m - 1.0 / (a2m + 1.0))
        new, delta = step(new, al, al_a, -(a + m) * q)
        h_a, h_b = state[7], state[8]
        newly = ((fnp.abs(delta - 1.0) <= eps) & (fnp.abs(new[7] - h_a) <= eps * fnp.abs(new[7]))
                 & (fnp.abs(new[8] - h_b) <= eps * fnp.abs(new[8])))
        kept = tuple(fnp.where(done, o, n) for o, n in zip(state, new, strict=True))
        return i + 1, kept, done | newly

    _, (_, _, h, _, _, _, _, h_a, h_b), _ = while_loop(cond, body, init)
    return h, h_a, h_b


def _ibeta_all(a, b, x):
    """``(I, dI/da, dI/db, dI/dx)`` of ``I_x(a, b)`` everywhere (SciPy's and JAX's values at the edges)."""
    fnp = _fnp()
    nan = fnp.isnan(a) | fnp.isnan(b) | fnp.isnan(x)
    bad = (nan | (a < 0.0) | (b < 0.0) | (x < 0.0) | (x > 1.0) | ((a == 0.0) & (b == 0.0))
           | (fnp.isinf(a) & fnp.isinf(b)))
    edge = (x == 0.0) | (x == 1.0) | (a == 0.0) | (b == 0.0) | fnp.isinf(a) | fnp.isinf(b)
    ok = ~(bad | edge)
    a_s, b_s, x_s = fnp.where(ok, a, 1.0), fnp.where(ok, b, 1.0), fnp.where(ok, x, 0.5)
    y_s = 1.0 - x_s
    log_x, log_y = fnp.log(x_s), _log1p(-x_s)
    # Symmetry: I_x(a, b) = 1 - I_{1-x}(b, a) where the fraction converges slowly (x > (a + 1) / (a + b + 2)).
    flip = x_s * (a_s + b_s + 2.0) > a_s + 1.0
    fa_, fb_ = fnp.where(flip, b_s, a_s), fnp.where(flip, a_s, b_s)
    fx, fy = fnp.where(flip, y_s, x_s), fnp.where(flip, x_s, y_s)
    flx, fly = fnp.where(flip, log_y, log_x), fnp.where(flip, log_x, log_y)
    log_front = _ibeta_log_front(fa_, fb_, fx, fy, flx, fly)
    h, h_a, h_b = _ibeta_fraction(fa_, fb_, fx)
    front = fnp.exp(log_front - fnp.log(fa_))
    j = front * h
    # d/da log front = log x - digamma(a) + digamma(a + b); the 1/a of the prefactor's 1/a.
    dig_ab = lax.digamma(fa_ + fb_)
    j_a = j * (flx - lax.digamma(fa_) + dig_ab - 1.0 / fa_) + front * h_a
    j_b = j * (fly - lax.digamma(fb_) + dig_ab) + front * h_b
    p = fnp.where(flip, 1.0 - j, j)
    dpda = fnp.where(flip, -j_b, j_a)
    dpdb = fnp.where(flip, -j_a, j_b)
    # dI/dx is the beta density (the front is symmetric, so the flipped one serves).
    dpdx = fnp.exp(log_front - log_x - log_y)
    # Edges: 0 at x = 0 (or a = inf, or b = 0, for x < 1), else 1; the density by xlogy at x = 0 and 1.
    p_edge = fnp.where((x == 0.0) | ((fnp.isinf(a) | (b == 0.0)) & (x < 1.0)), 0.0, 1.0)
    a_e, b_e = fnp.where(ok | bad, 1.0, a), fnp.where(ok | bad, 1.0, b)
    x_e = fnp.where(ok | bad, 0.5, x)
    pdf_edge = fnp.exp(xlogy(a_e - 1.0, x_e) + xlog1py(b_e - 1.0, -x_e) - betaln(a_e, b_e))
    pdf_edge = fnp.where(fnp.isinf(a) | fnp.isinf(b) | (a == 0.0) | (b == 0.0), 0.0, pdf_edge)
    p = fnp.where(ok, p, fnp.where(bad, np.nan, p_edge))
    dpda = fnp.where(ok, dpda, fnp.where(bad, np.nan, 0.0))
    dpdb = fnp.where(ok, dpdb, fnp.where(bad, np.nan, 0.0))
    dpdx = fnp.where(ok, dpdx, fnp.where(bad, np.nan, pdf_edge))
    return p, dpda, dpdb, dpdx


@custom_jvp
def _betainc(a, b, x):
    d = a.dtype
    a, b, x = to_math(a, b, x)
    return from_math(_ibeta_all(a, b, x)[0], d)


@_betainc.defjvp
def _betainc_jvp(primals, tangents):
    (a, b, x), (ta, tb, tx) = primals, tangents
    d = a.dtype
    p, dpda, dpdb, dpdx = _ibeta_all(*to_math(a, b, x))
    return (from_math(p, d),
            ta * from_math(dpda, d) + tb * from_math(dpdb, d) + tx * from_math(dpdx, d))


def betainc(a, b, x):
    """The regularized incomplete beta function ``I_x(a, b) = B(x; a, b) / B(a, b)``
    (``jax.scipy.special.betainc``, ``scipy.special.betainc``).

    Method: the continued fraction of Abramowitz and Stegun 26.5.8 (as in Numerical Recipes' ``betai`` and
    Cephes' ``incbet``), evaluated by the modified Lentz method in one bounded ``while_loop`` (at most 2,000
    terms; never a hang), where ``x <= (a + 1) / (a + b + 2)``, else ``1 - I_{1-x}(b, a)``. The prefactor
    ``x**a (1-x)**b / B(a, b)`` is computed in log space, by Stirling's series where ``a, b >= 8`` (20 in
    float64), so that large ``a, b`` keep their relative accuracy in float32.
    Accuracy (against SciPy): float64 within 1e-13 for ``a, b`` up to 1e7 (the cap is reached beyond:
    1e-4 off at ``a = b = 1e8``); float32 within 1e-5 absolute for ``a, b`` up to 1e3 (the fraction's
    rounding grows with its length: 8e-5 at ``a = b = 1e6``). Where ``1 - I_{1-x}(b, a)`` is small (small
    ``b``, ``x`` near 1) it keeps the absolute, not the relative, accuracy.

    Derivatives (forward and reverse mode: the rule is a ``custom_jvp``): in ``x`` the beta density
    ``x**(a-1) (1-x)**(b-1) / B(a, b)``; in ``a`` and ``b`` (which JAX does not differentiate) the derivatives
    carried through the same continued fraction and the prefactor's ``log x - digamma(a) + digamma(a + b)``.

    Values at the edges are SciPy's and JAX's: ``I_0 = 0``, ``I_1 = 1``; ``a = 0`` gives 1 and ``b = 0``
    gives 0 inside ``(0, 1)``; ``a < 0``, ``b < 0``, ``a = b = 0``, ``x < 0``, ``x > 1`` or a NaN give NaN.

    Args:
      a, b: non-negative real arrays or scalars (the shape parameters).
      x: real array or scalar in ``[0, 1]``; broadcast with ``a`` and ``b``.

    Returns:
      An array of the broadcast shape and the promoted floating dtype, in ``[0, 1]``.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    a, b, x = floats("betainc", a, b, x)
    return _betainc(a, b, x)


# ----------------------------------------------------------------------------- Bessel functions


def i0e(x):
    """The exponentially scaled modified Bessel function of order 0, ``exp(-|x|) I0(x)`` (``scipy.special.i0e``).

    Method: the power series (Abramowitz and Stegun 9.6.10) for ``|x| <= 10`` (float32) or 20 (float64), where
    its terms are positive; beyond, Hankel's asymptotic expansion (A&S 9.7.1). Differentiable through both.

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype; ``i0e(±inf) = 0``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, d = _unary("i0e", x)
    (xm,) = to_math(x)
    return from_math(bessel_ie(xm, 0), d)


def i1e(x):
    """The exponentially scaled modified Bessel function of order 1, ``exp(-|x|) I1(x)`` (``scipy.special.i1e``).

    Method as ``i0e`` (an odd function: ``i1e(-x) = -i1e(x)``).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, d = _unary("i1e", x)
    (xm,) = to_math(x)
    return from_math(bessel_ie(xm, 1), d)


def i0(x):
    """The modified Bessel function of order 0, ``I0(x)`` (``scipy.special.i0``; ``jax.scipy.special.i0``).

    Method: ``exp(|x|) * i0e(x)`` (see ``i0e``: A&S 9.6.10 series, 9.7.1 asymptotic expansion), the exponential
    split in halves so that the result overflows only where ``I0`` does. The derivative is ``I1`` (through ``i0e``'s).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype; ``i0(±inf) = inf``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, d = _unary("i0", x)
    (xm,) = to_math(x)
    return from_math(i0_of(xm), d)


def i1(x):
    """The modified Bessel function of order 1, ``I1(x)`` (``scipy.special.i1``; ``jax.scipy.special.i1``).

    Method as ``i0`` (``exp(|x|) * i1e(x)``); odd: ``i1(-x) = -i1(x)``, ``i1(±inf) = ±inf``. The derivative is
    ``I0(x) - I1(x) / x`` (``1/2`` at 0).

    Args:
      x: a real array or scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x, d = _unary("i1", x)
    (xm,) = to_math(x)
    return from_math(_fnp().where(_fnp().isinf(xm), xm, scaled_up(bessel_ie(xm, 1), xm)), d)


# ----------------------------------------------------------------------------- Hurwitz zeta, polygamma


def _bernoulli_even(m):
    """``B_2, B_4, ..., B_2m`` as exact fractions (the Akiyama-Tanigawa algorithm)."""
    from fractions import Fraction
    n = 2 * m
    a = [Fraction(0)] * (n + 1)
    out = []
    for i in range(n + 1):
        a[i] = Fraction(1, i + 1)
        for j in range(i, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        if i >= 2 and i % 2 == 0:
            out.append(a[0])
    return out


# (2j)! / B_2j for j = 1..16: Cephes zeta.c's table A (12, -720, 30240, ...), extended to 16 terms.
_EM_COEFS = tuple(float(math.factorial(2 * j) / b) for j, b in enumerate(_bernoulli_even(16), start=1))


def _hurwitz_zeta(x, q):
    """Hurwitz's ``zeta(x, q)`` on JAX's domain; for ``q < 0`` (integer ``x``) by the terms' split
    ``zeta(x, f) + (-1)**x (zeta(x, 1 - f) - zeta(x, 1 - q))`` with ``f = q - floor(q)``, every shift positive
    (the sum's tail at ``q + N`` near 0 would diverge). The split cancels where the result is small beside
    ``zeta(x, f)`` (``zeta(3, -30.5) = 5.2e-4`` is 8e-4 off in float32): absolute error ~ eps ``zeta(x, f)``."""
    from fnarray.transforms.control_flow import cond
    fnp = _fnp()
    neg = q < 0.0
    head = _hurwitz_positive(x, fnp.where(neg, q - fnp.floor(q), q))
    # the two further sums only when some q is negative (one branch runs; both under vmap)
    rest = cond(fnp.any(neg), _negative_q_terms, lambda x_, q_: fnp.zeros_like(x_), x, q)
    value = head + rest
    # the domain, as XLA's Zeta (JAX): inf at x = 1 and at the poles q = 0, -1, ...; NaN for x < 1 and for a
    # non-integer x with q <= 0 (q**-x not real)
    value = fnp.where((q <= 0.0) & (x != fnp.floor(x)), np.nan, value)
    value = fnp.where((q <= 0.0) & (q == fnp.floor(q)), np.inf, value)
    value = fnp.where(x < 1.0, np.nan, value)
    return fnp.where(x == 1.0, np.inf, value)


def _negative_q_terms(x, q):
    """``(-1)**x (zeta(x, 1 - f) - zeta(x, 1 - q))`` where ``q < 0``, else 0."""
    fnp = _fnp()
    neg = q < 0.0
    sign = fnp.where(fnp.fmod(x, 2.0) != 0.0, -1.0, 1.0)
    # 1 - f as ceil(q) - q: exact, where 1 - (q - floor(q)) rounds (q = -1e-3 would give zeta 1e-4 off)
    near = _hurwitz_positive(x, fnp.where(neg, fnp.ceil(q) - q, 1.0))
    far = _hurwitz_positive(x, fnp.where(neg, 1.0 - q, 1.0))
    return fnp.where(neg, sign * (near - far), 0.0)


def _hurwitz_positive(x, q):
    """Hurwitz's ``zeta(x, q)`` by Euler-Maclaurin summation with a fixed number of terms (as JAX's and Cephes'
    ``zeta``): ``sum_{k<N} (q+k)**-x + a**(1-x)/(x-1) + a**-x (1/2 + sum_{j<=M} B_2j/(2j)! x(x+1)..(x+2j-2)
    / a**(2j-1))`` with ``a = q + N``; ``N = M = 8`` in float32, 16 in float64."""
    fnp = _fnp()
    n = 16 if x.dtype == dtypes.float64 else 8
    s = fnp.power(q, -x)
    for k in range(1, n):
        s = s + fnp.power(q + float(k), -x)
    a = q + float(n)
    t0 = fnp.power(a, -x)
    tail = fnp.zeros_like(x)
    prod = fnp.ones_like(x)
    big = float(np.finfo(x.dtype).max)
    for j in range(n):
        # prod = x(x+1)...(x+2j) / a**(2j+1), clipped so that 0 * inf (x huge, t0 = 0) stays 0
        prod = fnp.minimum(prod * (x + float(2 * j)) / a, big)
        tail = tail + prod / _EM_COEFS[j]
        prod = prod * (x + float(2 * j + 1)) / a
    return s + fnp.power(a, 1.0 - x) / (x - 1.0) + t0 * (0.5 + tail)


def zeta(x, q=None):
    """Hurwitz's zeta function ``zeta(x, q) = sum_{k >= 0} (q + k)**-x`` (``scipy.special.zeta``;
    ``jax.scipy.special.zeta``); Riemann's ``zeta(x)`` when ``q`` is None (``q = 1``).

    Method: Euler-Maclaurin summation with a fixed number of terms (Cephes ``zeta.c``; JAX's ``zeta``): 8 direct
    terms and 8 Bernoulli corrections in float32, 16 and 16 in float64. Domain as JAX's: ``inf`` at ``x = 1`` and
    at ``q = 0, -1, -2, ...``; NaN for ``x < 1`` and for a non-integer ``x`` with ``q <= 0``. A negative
    non-integer ``q`` (integer ``x``: ``polygamma`` at negative ``x``) is split into sums at positive shifts
    (``zeta(x, f) + (-1)**x (zeta(x, 1 - f) - zeta(x, 1 - q))``, ``f = q - floor(q)``), accurate in absolute
    terms to the dtype's epsilon times ``zeta(x, f)``. Differentiable in
    both arguments through the sum (``d/dq = -x zeta(x + 1, q)``), as JAX's composite.

    Args:
      x: the exponent, a real array or scalar.
      q: the shift, a real array or scalar broadcasting with ``x``; None for Riemann's zeta.

    Returns:
      An array of the broadcast shape and the promoted floating dtype.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    if q is None:
        (x,) = floats("zeta", x)
        q = _fnp().ones_like(x)
    x, q = floats("zeta", x, q)
    d = x.dtype
    xm, qm = to_math(x, q)
    return from_math(_hurwitz_zeta(xm, qm), d)


def polygamma(n, x):
    """The polygamma function ``psi^(n)(x)``, the ``n``-th derivative of ``digamma`` (``scipy.special.polygamma``;
    ``jax.scipy.special.polygamma``).

    Method: ``digamma(x)`` for ``n = 0``, else ``(-1)**(n+1) n! zeta(n + 1, x)`` (A&S 6.4.10) with ``zeta``'s
    Euler-Maclaurin sum. The derivative in ``x`` is ``polygamma(n + 1, x)`` (through the sum).

    Args:
      n: the order, a non-negative integer array or scalar (an integer dtype, as JAX requires).
      x: a real array or scalar broadcasting with ``n``.

    Returns:
      An array of the broadcast shape and ``x``'s floating dtype; NaN for a negative ``n``.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: ``n`` is not of an integer dtype, or ``x`` is complex.
      ShapeError: the shapes do not broadcast.
    """
    from fnarray.core.errors import DTypeError
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike("polygamma", n, x)
    n_arr = asarray_internal(n)
    if not dtypes.is_int(n_arr.dtype):
        raise DTypeError(f"polygamma's n must be of an integer dtype (the derivative's order), got "
                         f"{n_arr.dtype.name}; pass an int (as jax.scipy.special.polygamma requires)")
    fnp = _fnp()
    (x,) = floats("polygamma", x)
    d = x.dtype
    (xm,) = to_math(x)
    nf = lax.convert_element_type(n_arr, xm.dtype)
    nf, xm = floats("polygamma", nf, xm)
    n1 = nf + 1.0
    sign = fnp.where(fnp.fmod(nf, 2.0) == 0.0, -1.0, 1.0)
    higher = sign * fnp.exp(lax.lgamma(n1)) * _hurwitz_zeta(n1, xm)
    out = fnp.where(nf == 0.0, lax.digamma(xm), higher)
    return from_math(fnp.where(nf < 0.0, np.nan, out), d)


def multigammaln(a, d):
    """The log of the multivariate gamma function, ``log Gamma_d(a) = d(d-1)/4 log(pi) + sum_{j<d} gammaln(a -
    j/2)`` (``scipy.special.multigammaln``; ``jax.scipy.special.multigammaln``; the normalizer of the Wishart
    density).

    As JAX's, no check of ``a > (d - 1)/2`` (SciPy raises there): the terms' ``gammaln`` gives what it gives.

    Args:
      a: a real array or scalar.
      d: the dimension, a Python int ``>= 1`` (static: it sets the number of terms).

    Returns:
      An array of ``a``'s shape and floating dtype.

    Raises:
      TypeError: ``a`` is not an array or a scalar, or ``d`` is not an int.
      ValueError: ``d < 1``.
      DTypeError: ``a`` is complex.
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise TypeError(f"multigammaln's d must be a Python int (the dimension, static), got {type(d).__name__}")
    if d < 1:
        raise ValueError(f"multigammaln's d must be >= 1, got {d}")
    (a,) = floats("multigammaln", a)
    out = _fnp().full_like(a, 0.25 * d * (d - 1) * math.log(math.pi))
    for j in range(int(d)):
        out = out + gammaln(a - 0.5 * j)
    return out


# ----------------------------------------------------------------------------- softmax family


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False, where=None):
    """``log(sum(b * exp(a)))`` over ``axis``, stable for large inputs (``scipy.special.logsumexp``;
    ``jax.scipy.special.logsumexp``).

    The maximum is subtracted (under ``stop_gradient``) and added back; slices of ``-inf`` give ``-inf``.
    ``where`` excludes elements (as if ``a`` were ``-inf`` there).

    Args:
      a: a real array.
      axis: an int, a tuple of ints or ``None`` (all axes).
      b: optional scaling factors, broadcastable to ``a`` (may be negative with ``return_sign``).
      keepdims: keep the reduced axes with size 1.
      return_sign: also return the sign of the sum; the first result is then ``log|sum|``.
      where: optional boolean mask broadcastable to ``a``.

    Returns:
      A float array of the reduced shape, and with ``return_sign`` the sign array (-1, 0 or 1) of the same
      shape. Without ``return_sign`` a negative sum gives NaN.

    Raises:
      ShapeError: an axis out of range or repeated, or ``b``/``where`` that does not broadcast.
      TypeError: ``a`` or ``b`` is not an array or a scalar.
      DTypeError: ``a`` or ``b`` is complex.
    """
    from fnarray.nn._functions import logsumexp as _lse
    if where is not None:
        fnp = _fnp()
        (a,) = floats("logsumexp", a)
        mask = fnp.broadcast_to(fnp.asarray(where), a.shape)
        a = fnp.where(mask, a, -np.inf)
        if b is not None:
            b = fnp.where(mask, b, 0.0)
    return _lse(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)


def softmax(x, /, *, axis=None):
    """``exp(x) / sum(exp(x))`` over ``axis`` (``scipy.special.softmax``: all axes by default).

    Args:
      x: a real array.
      axis: an int, a tuple of ints or ``None`` (all axes, SciPy's default).

    Returns:
      A float array of ``x``'s shape whose slices along ``axis`` sum to 1.

    Raises:
      ShapeError: an axis out of range or repeated.
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    from fnarray.nn._functions import softmax as _softmax
    return _softmax(x, axis=axis)


def log_softmax(x, /, *, axis=None):
    """``x - logsumexp(x)`` over ``axis`` (``scipy.special.log_softmax``: all axes by default); as SciPy, a
    ``+inf`` entry gives NaN there and ``-inf`` at the slice's finite entries.

    Args:
      x: a real array.
      axis: an int, a tuple of ints or ``None`` (all axes).

    Returns:
      A float array of ``x``'s shape.

    Raises:
      ShapeError: an axis out of range or repeated.
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    fnp = _fnp()
    from fnarray.nn._functions import log_softmax as _log_softmax
    if not isinstance(axis, (int, tuple, type(None))):
        return _log_softmax(x, axis=axis)  # its error for a bad axis
    (x,) = floats("log_softmax", x)
    # SciPy's shift: the maximum where it is finite, else 0, so that a +inf entry leaves the others at -inf
    # (jax.nn.log_softmax gives NaN for the whole slice).
    m = lax.stop_gradient(fnp.max(x, axis=axis, keepdims=True)) if x.size else fnp.zeros_like(x)
    shifted = x - fnp.where(fnp.isfinite(m), m, 0.0)
    return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=axis, keepdims=True))


def _install_eager_jit():
    import sys

    from fnarray.transforms import eager_jit  # eager calls run as cached jitted programs
    eager_jit.install(sys.modules[__name__], excluded=())


_install_eager_jit()



# ----------------------------------------------------------------------------- composites of the functions above
# gamma, gammasgn, loggamma (real), beta, factorial, comb, poch, rel_entr, kl_div, boxcox, boxcox1p: a few lines
# each over gammaln, betaln, xlogy and the namespace, so their accuracy, derivatives and backends are those of
# the functions they use (formulas from the SciPy reference; the tests compare with JAX's).


def _as_floats(*xs):
    """The arguments as arrays of their promoted floating dtype (NumPy semantics, no dtype errors here)."""
    fnp = _fnp()
    xs = [fnp.asarray(x) for x in xs]
    d = fnp.result_type(*xs, 1.0)
    return [fnp.astype(x, d) for x in xs]


def gammasgn(x):
    """The sign of the gamma function (``scipy.special.gammasgn``): 1 for ``x > 0``, ``(-1)**ceil(-x)`` for
    negative non-integers, the zero's sign at ``+-0`` (``gamma(+-0) = +-inf``), NaN at the negative integers and
    for NaN.

    Args:
      x: a real array.
    Returns:
      an array of ``x``'s shape and floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    (x,) = _as_floats(x)
    floor_x = fnp.floor(x)
    neg = fnp.where(fnp.mod(floor_x, 2) == 0, 1.0, -1.0)
    sign = fnp.where(x > 0, 1.0, fnp.where(x == 0, fnp.copysign(1.0, x), neg))
    return fnp.astype(fnp.where(((x < 0) & (x == floor_x)) | fnp.isnan(x), fnp.nan, sign), x.dtype)


def gamma(x):
    """The gamma function ``Γ(x)`` (``scipy.special.gamma``): ``gammasgn(x) * exp(gammaln(x))``.

    Args:
      x: a real array.
    Returns:
      ``x``'s shape and floating dtype; NaN at the poles, ``inf`` past the float range (``x > 171.6`` in
        float64, ``35.04`` in float32).
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    (x,) = _as_floats(x)
    return gammasgn(x) * _fnp().exp(gammaln(x))


def loggamma(x):
    """The principal branch of ``log Γ(x)`` for real ``x`` (``scipy.special.loggamma``): ``gammaln(x)``
    for ``x >= 0``, NaN for negative ``x`` (its value there is complex).

    Args:
      x: a real array (complex input is not supported).
    Returns:
      ``x``'s shape and floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    (x,) = _as_floats(x)
    return fnp.where(x < 0, fnp.nan, gammaln(x))


def beta(a, b):
    """The beta function ``B(a, b) = Γ(a) Γ(b) / Γ(a + b)`` (``scipy.special.beta``).

    Args:
      a, b: real arrays, broadcast together.
    Returns:
      the broadcast shape and promoted floating dtype; the sign from ``gammasgn`` of the three arguments,
        the magnitude ``exp(betaln(a, b))``: ``inf`` at a zero of either sign with that zero's sign (``gamma(-0)`` is
        ``-inf``; SciPy gives ``+inf``); SciPy's limits where poles cancel (JAX: NaN): ``Γ(n) / poch(b, n)`` for a
        positive integer ``n`` and a pole ``b`` (0 or a negative integer) with ``n + b <= 0``, either order
        (``beta(1, -2) = -0.5``), and a signed 0 where only ``a + b`` is a pole (``beta(-2.5, 1.5) = -0``); NaN where
        two negative integers meet (SciPy: ``inf``), where a pole ``b`` meets ``a > -b`` (SciPy: ``inf``), and for NaN.
        The gradient is NaN at those limits, finite elsewhere.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    a, b = _as_floats(a, b)
    val = gammasgn(a) * gammasgn(b) * gammasgn(a + b) * fnp.exp(betaln(a, b))
    pole_a, pole_b, pole_sum = _pole(a), _pole(b), _pole(a + b)
    whole_a = (a > 0) & (a == fnp.floor(a)) & fnp.isfinite(a)
    whole_b = (b > 0) & (b == fnp.floor(b)) & fnp.isfinite(b)
    swap = pole_a & whole_b
    limit = pole_sum & (pole_b & whole_a | swap)
    n = fnp.where(limit, fnp.where(swap, b, a), 1.0)   # elsewhere 1 and 1: finite, so no NaN reaches the gradient
    z = fnp.where(limit, fnp.where(swap, a, b), 1.0)
    val = fnp.where(limit, gamma(n) / poch(z, n), val)
    return fnp.where(pole_sum & ~pole_a & ~pole_b, gammasgn(a) * gammasgn(b) * 0.0, val).astype(val.dtype)


def factorial(n, exact=False):
    """``n!`` as ``Γ(n + 1)`` (``scipy.special.factorial``); 0 for negative ``n``.

    Args:
      n: a real array. exact: only False (exact integer results need Python integers).
    Returns:
      ``n``'s shape, floating.
    Raises:
      ``ValueError`` for ``exact=True``.
    """
    fnp = _fnp()
    if exact:
        raise ValueError("factorial: exact=True is not supported (as jax.scipy.special); use math.factorial "
                         "on Python ints")
    (n,) = _as_floats(n)
    return fnp.where(n < 0, 0.0, fnp.exp(gammaln(n + 1))).astype(n.dtype)


def comb(N, k, *, repetition=False):
    """The number of combinations of ``N`` things taken ``k`` at a time (``scipy.special.comb``, not exact):
    ``exp(gammaln(N + 1) - gammaln(k + 1) - gammaln(N - k + 1))``; 0 unless ``0 <= k <= N`` (so 0 for NaN, as
    SciPy); ``comb(inf, k)`` is 1 for ``k == 0`` and ``inf`` for a positive integer ``k``.

    Args:
      N, k: real arrays, broadcast together. repetition: count with repetition (``comb(N + k - 1, k)``).
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    N, k = _as_floats(N, k)
    if repetition:
        return comb(N + k - 1, k)
    val = fnp.exp(gammaln(N + 1) - gammaln(k + 1) - gammaln(N - k + 1))
    val = fnp.where(fnp.isposinf(N) & fnp.isfinite(k) & (k == fnp.floor(k)), fnp.where(k == 0, 1.0, fnp.inf), val)
    return fnp.where((k <= N) & (N >= 0) & (k >= 0), val, 0.0).astype(val.dtype)


def poch(z, m):
    """The Pochhammer symbol (rising factorial) ``Γ(z + m) / Γ(z)`` (``scipy.special.poch``); 1 for ``m == 0``.

    At the poles, as SciPy: for ``z`` a non-positive integer and an integer ``m``, the limit
    ``(-1)**m Γ(1 - z) / Γ(1 - z - m)`` (``poch(0, -1) = -1``; also where a tiny ``z`` plus an integer ``m``
    rounds onto a pole: ``poch(1e-30, -1) = -1``), 0 for a non-integer ``m``; ``inf`` where only ``z + m`` is a
    pole; for ``z = inf``, the limits ``inf`` for ``m > 0`` and 0 for ``m < 0`` (SciPy gives NaN for some).

    Args:
      z, m: real arrays, broadcast together.
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    z, m = _as_floats(z, m)
    zm = z + m
    val = gammasgn(zm) * gammasgn(z) * fnp.exp(gammaln(zm) - gammaln(z))
    z_pole, zm_pole = _pole(z), _pole(zm)
    m_int = fnp.isfinite(m) & (m == fnp.floor(m))
    # (-1)**m Γ(1 - z) / Γ(1 - z - m) for an integer m: the limit where z is a pole, and the value where z + m
    # rounded onto a pole (z tiny) unless 1 - z is one too (z a positive integer: a true pole, inf)
    reflect = m_int & (z_pole | zm_pole & ~_pole(1.0 - z))
    r = fnp.where(reflect, 1.0 - z, 2.0)  # elsewhere 2 - 0: finite, so that no NaN reaches the gradient
    mr = fnp.where(reflect, m, 0.0)
    sign = fnp.where(fnp.mod(mr, 2) == 0, 1.0, -1.0)
    reflected = fnp.where(_pole(r - mr), 0.0, sign * gammasgn(r - mr) * fnp.exp(gammaln(r) - gammaln(r - mr)))
    val = fnp.where(reflect, reflected, fnp.where(z_pole, 0.0, fnp.where(zm_pole, fnp.inf, val)))
    val = fnp.where(fnp.isposinf(z) & fnp.isfinite(m), fnp.where(m > 0, fnp.inf, 0.0), val)
    return fnp.where(m == 0, 1.0, val).astype(val.dtype)


def _pole(x):
    """Where ``x`` is a pole of the gamma function: 0 or a negative integer."""
    fnp = _fnp()
    return (x <= 0) & (x == fnp.floor(x)) & fnp.isfinite(x)


def rel_entr(p, q):
    """The elementwise relative entropy (``scipy.special.rel_entr``): ``p log(p / q)`` for ``p, q > 0``, 0 for
    ``p == 0, q >= 0``, ``inf`` otherwise, NaN where either is NaN (SciPy's cases); summed it is the KL divergence.

    Args:
      p, q: real arrays, broadcast together.
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    p, q = _as_floats(p, q)
    both = (p > 0) & (q > 0)
    val = xlogy(p, fnp.where(both, p, 1.0)) - xlogy(p, fnp.where(both, q, 1.0))
    val = fnp.where(fnp.isposinf(p), fnp.where(fnp.isposinf(q), fnp.nan, fnp.inf), val)  # inf - inf above
    val = fnp.where(both, val, fnp.where((p == 0) & (q >= 0), 0.0, fnp.inf))
    return fnp.where(fnp.isnan(p) | fnp.isnan(q), fnp.nan, val).astype(val.dtype)


def kl_div(p, q):
    """The elementwise KL divergence term (``scipy.special.kl_div``): ``p log(p / q) - p + q`` for ``p, q > 0``,
    ``q`` for ``p == 0, q >= 0``, ``inf`` otherwise, NaN where either is NaN (SciPy's cases: ``kl_div(1, inf)`` is
    ``-inf + inf``, NaN).

    Args:
      p, q: real arrays, broadcast together.
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    p, q = _as_floats(p, q)
    r = rel_entr(p, q)
    val = fnp.where((p > 0) & (q > 0), r - p + q, fnp.where((p == 0) & (q >= 0), q, fnp.inf))
    return fnp.where(fnp.isnan(p) | fnp.isnan(q), fnp.nan, val).astype(r.dtype)


def boxcox(x, lmbda):
    """The Box-Cox transformation (``scipy.special.boxcox``): ``(x**lmbda - 1) / lmbda``, ``log(x)`` at
    ``|lmbda| < 1e-19`` (as SciPy: ``(x**lmbda - 1) / lmbda`` equals ``log(x)`` there to rounding, except
    at ``x = 0``, where SciPy's ``-inf`` is kept); computed as ``expm1(lmbda * log(x)) / lmbda``.

    Args:
      x, lmbda: real arrays, broadcast together.
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    x, lmbda = _as_floats(x, lmbda)
    logx = fnp.log(x)
    return _box(logx, lmbda)


def boxcox1p(x, lmbda):
    """The Box-Cox transformation of ``1 + x`` (``scipy.special.boxcox1p``), accurate for small ``x``
    through ``log1p``.

    Args:
      x, lmbda: real arrays, broadcast together.
    Returns:
      the broadcast shape, promoted floating dtype.
    Raises:
      TypeError or DTypeError for arguments that are not real arrays or scalars (from the functions used).
    """
    fnp = _fnp()
    x, lmbda = _as_floats(x, lmbda)
    return _box(fnp.log1p(x), lmbda)


def _box(logx, lmbda):
    fnp = _fnp()
    tiny = fnp.abs(lmbda) < 1e-19
    safe = fnp.where(tiny, 1.0, lmbda)
    return fnp.where(tiny, logx, fnp.expm1(lmbda * logx) / safe)
