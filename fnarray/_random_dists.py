"""Samplers of ``fnarray.random`` that need rejection loops or linear algebra: ``gamma``, ``loggamma``, ``beta``,
``dirichlet``, ``chisquare``, ``t``, ``f``, ``binomial``, ``poisson`` and ``multivariate_normal`` (mirrors
``jax.random``; re-exported there).

The rejection samplers run one bounded ``while_loop`` over the whole sample: iteration ``i`` draws fresh
normals and uniforms for every element from ``fold_in(key, i)``, and each element keeps its first accepted
proposal, so element ``j``'s value depends only on the key and ``j`` (deterministic per key, eagerly, under
``jit`` and ``vmap``, on every backend). The loop stops when every element is accepted, or after
``_MAX_TRIES`` rounds: the acceptance rates are above 0.95 (gamma) and 0.9 (Poisson), so stopping at the cap
has probability below 1e-100 per element; an element that still has no accepted proposal then keeps a
documented fallback (the mode) rather than looping on: never a hang.

The values differ from JAX's (other streams), but the distributions are the same; the tests check moments
and Kolmogorov-Smirnov distances against SciPy.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.scipy._util import log1p as _log1p
from fnarray.transforms.ad import custom_jvp

__all__ = ["beta", "binomial", "chisquare", "dirichlet", "f", "gamma", "loggamma", "multivariate_normal", "poisson",
           "t"]

_MAX_TRIES = 100


def _fnp():
    import fnarray.numpy as fnp
    return fnp


#: ``fnarray.random`` itself, set by it when it imports this module (its samplers and checks are used here, and
#: it re-exports the distributions defined here).
random = None


def _r():
    return random


def _float_param(name, v, dtype, what):
    """``(value array, compute dtype, result dtype)`` for a floating parameter."""
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike(name, v)
    r = _r()
    d = r._float_dtype(dtype, name)
    a = asarray_internal(v)
    if dtypes.is_complex(a.dtype):
        raise DTypeError(f"{name}: {what} must be real, got {a.dtype.name}")
    m = dtypes.float32 if d.itemsize < 4 else d
    return lax.convert_element_type(a, m), m, d


def _sample_shape(name, shape, param_shape):
    r = _r()
    if shape is None:
        return tuple(param_shape)
    shape = r._shape_arg(shape, name)
    r._broadcastable_to(param_shape, shape, name, "the parameter")
    return shape


def _broadcast(a, shape):
    return a if a.shape == tuple(shape) else lax.broadcast_to_rank_shape(a, shape)


# ----------------------------------------------------------------------------- gamma


def _marsaglia_tsang(key, a, shape, m):
    """Gamma(a) samples for ``a >= 1`` (arrays of ``shape``): Marsaglia and Tsang (2000), "A simple method for
    generating gamma variables", with ``d = a - 1/3``, ``c = 1 / sqrt(9 d)``: propose ``d v``, ``v = (1 + c z)**3``
    with ``z`` standard normal, accept when ``log u < z**2 / 2 + d - d v + d log v``."""
    from fnarray.transforms.control_flow import while_loop
    fnp = _fnp()
    r = _r()
    dd = a - 1.0 / 3.0
    c = 1.0 / fnp.sqrt(9.0 * dd)

    def cond(s):
        return (s[0] < _MAX_TRIES) & ~fnp.all(s[2])

    def body(s):
        i, x, done = s
        # One Threefry pass per round (what the loop body costs to compile dominates on XLA): two uniforms per
        # element, the first turned into the normal z by the inverse CDF (-inf at 0 is simply rejected).
        uu = r.uniform(r.fold_in(key, i), (2,) + tuple(shape), m)
        z = math.sqrt(2.0) * lax.erf_inv(2.0 * uu[0] - 1.0)
        u = uu[1]
        v = 1.0 + c * z
        v3 = v * v * v
        pos = v3 > 0
        v3s = fnp.where(pos, v3, 1.0)
        ok = pos & (fnp.log(u) < 0.5 * z * z + dd - dd * v3s + dd * fnp.log(v3s))
        take = ok & ~done
        return i + 1, fnp.where(take, dd * v3s, x), done | ok

    init = (np.int32(0), dd, fnp.zeros(shape, dtype=dtypes.bool_))
    return while_loop(cond, body, init)[1]


def _log_gamma_sample(key, a, shape, m):
    """``log`` of Gamma(a) samples (no gradient): ``a < 1`` is boosted, ``G(a) = G(a + 1) U**(1/a)`` (Marsaglia and
    Tsang), in log space so that tiny ``a`` gives tiny samples rather than zeros."""
    fnp = _fnp()
    r = _r()
    a = lax.stop_gradient(a)
    valid = a > 0
    zero = a == 0
    a = fnp.where(valid, a, 1.0)
    boost = a < 1.0
    k_main, k_boost = r._split2(key)
    x = _marsaglia_tsang(k_main, fnp.where(boost, a + 1.0, a), shape, m)
    u = r.uniform(k_boost, shape, m, minval=float(dtypes.finfo(m).tiny), maxval=1.0)
    log_x = fnp.log(x) + fnp.where(boost, fnp.log(u) / a, 0.0)
    # a = 0 is the limit of Gamma(a) at 0 (as JAX): a sample of 0, log -inf; a < 0 and NaN give NaN.
    return fnp.where(valid, log_x, fnp.where(zero, -np.inf, np.nan))


def _gamma_cdf_derivatives(a, x):
    from fnarray.scipy.special import _igamma_all
    _, _, dpda, dpdx = _igamma_all(a, x)
    return dpda, dpdx


@custom_jvp
def _gamma_reparam(a, x):
    return x


@_gamma_reparam.defjvp
def _gamma_reparam_jvp(primals, tangents):
    # Implicit reparameterization (Figurnov et al. 2018): x = F^-1(u; a) with F = gammainc(a, .), so
    # dx/da = -(dF/da) / (dF/dx) at the sample.
    (a, x), (ta, _) = primals, tangents
    dpda, dpdx = _gamma_cdf_derivatives(a, x)
    return x, ta * (-dpda / dpdx)


@custom_jvp
def _log_gamma_reparam(a, log_x):
    return log_x


@_log_gamma_reparam.defjvp
def _log_gamma_reparam_jvp(primals, tangents):
    # d log x / da = -(dF/da) / (x dF/dx), with x dF/dx = exp(a log x - x - lgamma(a)) computed in log space.
    fnp = _fnp()
    (a, log_x), (ta, _) = primals, tangents
    x = fnp.exp(log_x)
    dpda, _ = _gamma_cdf_derivatives(a, x)
    x_dpdx = fnp.exp(a * log_x - x - lax.lgamma(a))
    return log_x, ta * (-dpda / x_dpdx)


def _log_gamma_draw(k, a, shape, m):
    """``log`` of Gamma(a, 1) samples of ``shape`` in dtype ``m``, differentiable in ``a`` (the implicit
    reparameterization)."""
    return _log_gamma_reparam(a, lax.stop_gradient(_log_gamma_sample(k, a, shape, m)))


def _gamma_setup(name, key, a, shape, dtype):
    r = _r()
    k = r._check_key(key, name)
    a, m, d = _float_param(name, a, dtype, "a")
    shape = _sample_shape(name, shape, a.shape)
    return k, _broadcast(a, shape), shape, m, d


def gamma(key, a, shape=None, dtype=None):
    """Gamma(a, 1) samples (mirrors ``jax.random.gamma``).

    Method: Marsaglia and Tsang (2000) for ``a >= 1`` (a bounded rejection loop, see the module docstring);
    ``a < 1`` by ``G(a + 1) U**(1/a)``. Differentiable in ``a`` by implicit reparameterization (Figurnov et
    al. 2018: ``dx/da = -(dP/da) / (dP/dx)`` with ``P = gammainc(a, .)`` at the sample), as JAX.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      a: the shape parameter, a non-negative float scalar or array: ``a = 0`` gives 0 (the limit, as JAX),
        tiny ``a`` (1e-30) tiny positive samples or 0 where they underflow, ``a < 0`` NaN.
      shape: the sample shape (default ``a``'s shape); ``a`` must broadcast to it.
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``, positive.

    Raises:
      TypeError: ``key`` is not a key, or ``a`` not an array or scalar.
      DTypeError: a non-floating ``dtype``, or a complex ``a``.
      ShapeError: ``a`` does not broadcast to ``shape``.
    """
    fnp = _fnp()
    k, a, shape, m, d = _gamma_setup("gamma", key, a, shape, dtype)
    x = fnp.exp(_log_gamma_sample(k, a, shape, m))
    return lax.convert_element_type(_gamma_reparam(a, lax.stop_gradient(x)), d)


def loggamma(key, a, shape=None, dtype=None):
    """``log`` of Gamma(a, 1) samples, accurate for tiny ``a`` (mirrors ``jax.random.loggamma``).

    Same method and gradient as ``gamma``, in log space.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      a: the shape parameter, a non-negative float scalar or array: ``a = 0`` gives ``-inf`` (as JAX), tiny
        ``a`` (1e-30) samples near ``log(u) / a`` (about -1e30), ``a < 0`` NaN.
      shape: the sample shape (default ``a``'s shape); ``a`` must broadcast to it.
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not a key, or ``a`` not an array or scalar.
      DTypeError: a non-floating ``dtype``, or a complex ``a``.
      ShapeError: ``a`` does not broadcast to ``shape``.
    """
    k, a, shape, m, d = _gamma_setup("loggamma", key, a, shape, dtype)
    return lax.convert_element_type(_log_gamma_draw(k, a, shape, m), d)


def beta(key, a, b, shape=None, dtype=None):
    """Beta(a, b) samples (mirrors ``jax.random.beta``): ``Ga / (Ga + Gb)`` of two independent gamma samples,
    formed in log space (so tiny ``a`` and ``b`` give 0s and 1s, not NaN); differentiable in ``a`` and ``b``.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      a, b: non-negative float scalars or arrays: ``a = 0`` gives 0 and ``b = 0`` gives 1 (as JAX), both 0
        NaN; tiny ones give 0s and 1s.
      shape: the sample shape (default: the broadcast shape of ``a`` and ``b``).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype`` in ``[0, 1]``.

    Raises:
      TypeError: ``key`` is not a key, or ``a``/``b`` not arrays or scalars.
      DTypeError: a non-floating ``dtype``, or complex parameters.
      ShapeError: ``a`` and ``b`` do not broadcast to ``shape``.
    """
    from fnarray.numpy._util import broadcast_shapes
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "beta")
    a, m, d = _float_param("beta", a, dtype, "a")
    b, _, _ = _float_param("beta", b, dtype, "b")
    shape = _sample_shape("beta", shape, broadcast_shapes(a.shape, b.shape, name="beta"))
    a, b = _broadcast(a, shape), _broadcast(b, shape)
    ka, kb = r._split2(k)
    la, lb = _log_gamma_draw(ka, a, shape, m), _log_gamma_draw(kb, b, shape, m)
    return lax.convert_element_type(fnp.exp(la - fnp.logaddexp(la, lb)), d)


def dirichlet(key, alpha, shape=None, dtype=None):
    """Dirichlet(alpha) samples (mirrors ``jax.random.dirichlet``): independent gamma samples normalized along
    the last axis, in log space; differentiable in ``alpha``.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      alpha: non-negative concentrations, a float array ``(..., K)`` with ``K >= 1``: a zero concentration gets
        weight 0 (as JAX); a slice of zeros only gives NaN.
      shape: the batch shape (default ``alpha.shape[:-1]``); ``alpha.shape[:-1]`` must broadcast to it.
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape + (K,)`` and ``dtype`` whose last axis sums to 1.

    Raises:
      TypeError: ``key`` is not a key, or ``alpha`` not an array.
      DTypeError: a non-floating ``dtype``, or a complex ``alpha``.
      ShapeError: ``alpha`` has no axis, or its batch shape does not broadcast to ``shape``.
    """
    from fnarray.nn._functions import logsumexp
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "dirichlet")
    alpha, m, d = _float_param("dirichlet", alpha, dtype, "alpha")
    if alpha.ndim < 1:
        raise ShapeError("dirichlet needs alpha with at least one axis (the categories), got a scalar; "
                         "pass an array of shape (..., K)")
    batch = _sample_shape("dirichlet", shape, alpha.shape[:-1])
    full = tuple(batch) + (alpha.shape[-1],)
    alpha = _broadcast(alpha, full)
    lg = _log_gamma_draw(k, alpha, full, m)
    out = fnp.exp(lg - logsumexp(lg, axis=-1, keepdims=True))
    return lax.convert_element_type(out, d)


# ----------------------------------------------------------------------------- chi-square, Student's t, F


def _fill_doc(parts):
    """A decorator filling the ``{name}`` fields of a function's docstring from the dict ``parts`` (docstring
    sections that several samplers share, written once)."""
    def fill(f):
        if f.__doc__:   # None under python -OO
            f.__doc__ = f.__doc__.format(**parts)
        return f
    return fill


_fill_df_doc = _fill_doc({
    "df_args": "key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).\n"
               "      df: positive float scalar or array, the degrees of freedom.\n"
               "      shape: the sample shape (default ``df``'s shape); ``df`` must broadcast to it.\n"
               "      dtype: float16, bfloat16, float32 (default) or float64.",
    "df_raises": "TypeError: ``key`` is not a key, or ``df`` not an array or scalar.\n"
                 "      DTypeError: a non-floating ``dtype``, or a complex ``df``.\n"
                 "      ShapeError: ``df`` does not broadcast to ``shape``."})


def _df_setup(name, key, dfs, shape, dtype):
    """``(key, [df broadcast to shape, ...], shape, compute dtype, result dtype)`` for the ``df`` parameters."""
    from fnarray.numpy._util import broadcast_shapes
    k = _r()._check_key(key, name)
    params = [_float_param(name, v, dtype, what) for what, v in dfs]
    m, d = params[0][1], params[0][2]
    shape = _sample_shape(name, shape, broadcast_shapes(*(a.shape for a, _, _ in params), name=name))
    return k, [_broadcast(a, shape) for a, _, _ in params], shape, m, d


def _chisquare(k, df, shape, m):
    return _fnp().exp(_log_gamma_draw(k, df / 2, shape, m)) * 2


@_fill_df_doc
def chisquare(key, df, shape=None, dtype=None):
    """Chi-square samples with ``df`` degrees of freedom (mirrors ``jax.random.chisquare``): ``2 exp(loggamma(df /
    2))``, as JAX composes it (this module's gamma stream, so other values than JAX's; the same distribution).

    Args:
      {df_args}

    Returns:
      An array of ``shape`` and ``dtype``, positive; differentiable in ``df`` (the gamma's reparameterization).

    Raises:
      {df_raises}
    """
    k, (df,), shape, m, d = _df_setup("chisquare", key, [("df", df)], shape, dtype)
    return lax.convert_element_type(_chisquare(k, df, shape, m), d)


@_fill_df_doc
def t(key, df, shape=None, dtype=None):
    """Student's t samples with ``df`` degrees of freedom (mirrors ``jax.random.t``): ``n sqrt((df / 2) / g)``
    for ``n`` normal from the first of ``split(key)`` and ``g`` Gamma(df / 2) from the second, as JAX composes it
    (``n`` is JAX's normal stream, ``g`` this module's gamma stream: other values than JAX's, the same
    distribution).

    Args:
      {df_args}

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      {df_raises}
    """
    r = _r()
    k, (df,), shape, m, d = _df_setup("t", key, [("df", df)], shape, dtype)
    kn, kg = r._split2(k)
    half = df / 2
    g = _fnp().exp(_log_gamma_draw(kg, half, shape, m))
    return lax.convert_element_type(r.normal(kn, shape, m) * _fnp().sqrt(half / g), d)


def f(key, dfnum, dfden, shape=None, dtype=None):
    """F-distribution samples (mirrors ``jax.random.f``): ``(chisquare(dfnum) / dfnum) / (chisquare(dfden) /
    dfden)``, the denominator's chi-square from the first of ``split(key)`` and the numerator's from the second,
    as JAX composes it (this module's gamma stream: other values than JAX's, the same distribution).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      dfnum, dfden: positive float scalars or arrays, the numerator's and denominator's degrees of freedom.
      shape: the sample shape (default: the broadcast shape of ``dfnum`` and ``dfden``).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``, positive.

    Raises:
      TypeError: ``key`` is not a key, or a parameter not an array or scalar.
      DTypeError: a non-floating ``dtype``, or a complex parameter.
      ShapeError: the parameters do not broadcast to ``shape``.
    """
    k, (num, den), shape, m, d = _df_setup("f", key, [("dfnum", dfnum), ("dfden", dfden)], shape, dtype)
    k_den, k_num = _r()._split2(k)
    return lax.convert_element_type((_chisquare(k_num, num, shape, m) / num) / (_chisquare(k_den, den, shape, m)
                                                                                 / den), d)


# ----------------------------------------------------------------------------- binomial

# Stirling's series tail log(k!) - [(k + 1/2) log(k + 1) - (k + 1) + log(2 pi) / 2] for k = 0..9 (TensorFlow's and
# JAX's table for BTRS); beyond, the series' first three terms.
_STIRLING_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
                  0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
                  0.00925546218271273, 0.00833056343336287)


def _stirling_tail(k):
    fnp = _fnp()
    kc = fnp.clip(k, 0.0, 9.0)
    kp1sq = (kc + 1) * (kc + 1)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (kc + 1)
    table = fnp.asarray(np.asarray(_STIRLING_TAIL, np.float64).astype(kc.dtype))
    return fnp.where(k <= 9, fnp.take(table, fnp.floor(kc).astype(dtypes.int32)), approx)


def _btrs_accepts(u, v, n, q):
    """``(k, accepted)`` of one BTRS round (Hormann 1993, "The generation of binomial random variates"; the form of
    TensorFlow's and JAX's) for ``n`` trials of probability ``q <= 1/2`` from uniforms ``u``, ``v``."""
    fnp = _fnp()
    stddev = fnp.sqrt(n * q * (1 - q))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * q
    r = q / (1 - q)
    mode = fnp.floor((n + 1) * q)
    uu = u - 0.5
    us = 0.5 - fnp.abs(uu)
    k = fnp.floor((2 * a / us + b) * uu + n * q + 0.5)
    lv = fnp.log(v * (2.83 + 5.1 / b) * stddev / (a / (us * us) + b))
    ub = ((mode + 0.5) * fnp.log((mode + 1) / (r * (n - mode + 1))) + (n + 1) * fnp.log((n - mode + 1) / (n - k + 1))
          + (k + 0.5) * fnp.log(r * (n - k + 1) / (k + 1)) + _stirling_tail(mode) + _stirling_tail(n - mode)
          - _stirling_tail(k) - _stirling_tail(n - k))
    return k, ((us >= 0.07) & (v <= 0.92 - 4.2 / b)) | ((k >= 0) & (k <= n) & (lv <= ub))


def _binomial_loop(key, n, q, shape, m):
    """Binomial counts (float) of ``n`` (integral, finite, >= 0) trials of probability ``q`` in ``[0, 1/2]``: where
    ``n q <= 10`` the inversion by geometric waiting times (one success a round), else BTRS (acceptance above
    0.9), as JAX and TensorFlow choose."""
    from fnarray.transforms.control_flow import while_loop
    fnp = _fnp()
    r = _r()
    inv = n * q <= 10.0
    n_b, q_b = fnp.where(inv, 1e4, n), fnp.where(inv, 0.5, q)
    log1mq = _log1p(-fnp.where(inv, q, 0.5))
    cap = max(_MAX_TRIES, 80)   # inversion: n q <= 10 successes and one more round, past 80 with p < 1e-40

    def cond(s):
        return (s[0] < cap) & ~fnp.all(s[3])

    def body(s):
        i, k, total, done = s
        uv = r.uniform(r.fold_in(key, i), (2,) + tuple(shape), m)
        u, v = uv[0], uv[1]
        reached = total + fnp.ceil(fnp.log(u) / log1mq)     # the waiting time of the next success
        kb, accepted = _btrs_accepts(u, v, n_b, q_b)
        k_new = fnp.where(inv, fnp.where(reached <= n, k + 1, k), kb)
        new_done = fnp.where(inv, reached > n, accepted)
        return i + 1, fnp.where(done, k, k_new), fnp.where(inv & ~done, reached, total), done | new_done

    zeros = fnp.zeros(shape, dtype=m)
    # The fallback after the cap (probability below 1e-40): the count reached (inversion) or the mode (BTRS).
    init = (np.int32(0), fnp.where(inv, zeros, fnp.floor((n_b + 1) * q_b)), zeros, q == 0)
    return while_loop(cond, body, init)[1]


def binomial(key, n, p, shape=None, dtype=None):
    """Binomial(n, p) samples: successes in ``n`` trials of probability ``p`` (mirrors ``jax.random.binomial``).

    Method (JAX's and TensorFlow's choice): with ``q = min(p, 1 - p)``, the inversion by geometric waiting times
    where ``n q <= 10``, else Hormann's BTRS transformed rejection; ``n - k`` where ``p > 1/2``. A bounded
    ``while_loop`` drawing from ``fold_in(key, i)`` (the module docstring): other values than JAX's, the same
    distribution. A non-integral ``n`` is floored (as NumPy and JAX).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      n: the number of trials, a float or integer scalar or array (``inf`` gives ``inf``; negative or NaN, NaN).
      p: the success probability, a float scalar or array (outside ``[0, 1]`` or NaN gives NaN).
      shape: the sample shape (default: the broadcast shape of ``n`` and ``p``).
      dtype: float16, bfloat16, float32 (default) or float64: the counts are floats, as JAX's.

    Returns:
      An array of ``shape`` and ``dtype`` holding whole numbers in ``[0, n]``.

    Raises:
      TypeError: ``key`` is not a key, or ``n``/``p`` not arrays or scalars.
      DTypeError: a non-floating ``dtype``, or complex parameters.
      ShapeError: ``n`` and ``p`` do not broadcast to ``shape``.
    """
    fnp = _fnp()
    k, (n, p), shape, m, d = _df_setup("binomial", key, [("n", n), ("p", p)], shape, dtype)
    n, p = lax.stop_gradient(n), lax.stop_gradient(p)
    below = p < 0.5
    q = fnp.where(below, p, 1.0 - p)
    invalid = fnp.isnan(n) | (n < 0) | fnp.isnan(q) | (q < 0)
    finite = fnp.where(invalid | fnp.isinf(n), 0.0, fnp.floor(n))
    counts = _binomial_loop(k, finite, fnp.where(invalid, 0.0, q), shape, m)
    counts = fnp.where(below, counts, finite - counts)
    counts = fnp.where(fnp.isinf(n), np.inf, counts)
    return lax.convert_element_type(fnp.where(invalid, np.nan, counts), d)


# ----------------------------------------------------------------------------- Poisson


_KNUTH_BELOW = 10.0


def _stirling_correction(x):
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))


def _log_pmf_unnormalized(k, lam):
    """``k log lam - lam - lgamma(k + 1)`` without the cancellation of its terms at large ``lam`` (in float32
    at ``lam = 1e7`` the plain sum loses all digits): for ``k >= 8`` with Stirling's series,
    ``-lam ((1 + e) log1p(e) - e) - log sqrt(2 pi k) - stirling(k)``, ``k = lam (1 + e)``."""
    fnp = _fnp()
    plain = k * fnp.log(lam) - lam - lax.lgamma(k + 1.0)
    big = k >= 8.0
    kb = fnp.where(big, k, 8.0)
    e = (kb - lam) / lam
    stirling = -lam * ((1.0 + e) * _log1p(e) - e) - 0.5 * fnp.log(2 * math.pi * kb) - _stirling_correction(kb)
    return fnp.where(big, stirling, plain)


def _poisson_loop(key, lam, shape, m):
    """Poisson counts (float) of ``lam`` (>= 0, finite): for ``lam < 10`` Knuth's method (count unit-rate
    exponential arrivals before ``lam``: one arrival per iteration), else Hörmann (1993), "The transformed
    rejection method for generating Poisson random variables" (PTRS; acceptance above 0.9)."""
    from fnarray.transforms.control_flow import while_loop
    fnp = _fnp()
    r = _r()
    small = lam < _KNUTH_BELOW
    lam_big = fnp.where(small, _KNUTH_BELOW, lam)
    slam = fnp.sqrt(lam_big)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2.0)
    log_inv_alpha = fnp.log(inv_alpha)
    # Knuth needs about lam + a few sqrt(lam) iterations; the cap covers lam < 10 with probability 1 - 1e-40.
    cap = max(_MAX_TRIES, 80)

    def cond(s):
        return (s[0] < cap) & ~fnp.all(s[3])

    def body(s):
        i, k, t, done = s
        uv = r.uniform(r.fold_in(key, i), (2,) + tuple(shape), m)   # one Threefry pass per round
        u, v = uv[0], uv[1]
        # Knuth: t accumulates exponential arrival times; stop once it passes lam.
        t_new = t - _log1p(-u)
        knuth_done = t_new > lam
        # PTRS
        uu = u - 0.5
        us = 0.5 - fnp.abs(uu)
        kk = fnp.floor((2.0 * a / us + b) * uu + lam_big + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        reject = (kk < 0) | ((us < 0.013) & (v > us))
        kks = fnp.maximum(kk, 0.0)
        lhs = fnp.log(v) + log_inv_alpha - fnp.log(a / (us * us) + b)
        accept = quick | (~reject & (lhs <= _log_pmf_unnormalized(kks, lam_big)))
        new_small = (~done) & knuth_done
        new_big = (~done) & accept
        k_out = fnp.where(small, fnp.where(new_small | done, k, k + 1.0), fnp.where(new_big, kks, k))
        return i + 1, k_out, fnp.where(small, t_new, t), done | fnp.where(small, knuth_done, accept)

    zeros = fnp.zeros(shape, dtype=m)
    # The fallback after the cap (probability below 1e-40): floor(lam), the mode.
    init = (np.int32(0), fnp.where(small, zeros, fnp.floor(lam_big)), zeros, fnp.zeros(shape, dtype=dtypes.bool_))
    _, k, _, done = while_loop(cond, body, init)
    return fnp.where(small & ~done, fnp.floor(lam), k)


def poisson(key, lam, shape=None, dtype=None):
    """Poisson(lam) counts (mirrors ``jax.random.poisson``).

    Method: Knuth's counting of exponential arrivals for ``lam < 10``; Hörmann's transformed rejection
    with squeeze (PTRS, 1993) above, with the acceptance test written without the cancellation of
    ``k log lam - lgamma(k + 1)`` (correct in float32 for ``lam`` up to about 1e7, where counts stop being exact
    in float32; float64 ``lam`` computes in float64). One bounded ``while_loop`` (module docstring): never a
    hang. ``lam = 0`` gives 0; a negative or NaN ``lam`` gives -1; counts beyond the dtype saturate.
    Not differentiable (integer output).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      lam: the rate, a non-negative float scalar or array.
      shape: the sample shape (default ``lam``'s shape); ``lam`` must broadcast to it.
      dtype: an integer dtype (default int32).

    Returns:
      An integer array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not a key, or ``lam`` not an array or scalar.
      DTypeError: a non-integer ``dtype``, or a complex ``lam``.
      ShapeError: ``lam`` does not broadcast to ``shape``.
    """
    from fnarray.numpy._util import asarray_internal, check_arraylike
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "poisson")
    d = dtypes.default_int() if dtype is None else dtypes.requested(dtype, "poisson")
    if not dtypes.is_int(d):
        raise DTypeError(f"poisson samples integer dtypes, got {d.name}")
    check_arraylike("poisson", lam)
    lam = asarray_internal(lam)
    if dtypes.is_complex(lam.dtype):
        raise DTypeError(f"poisson: lam must be real, got {lam.dtype.name}")
    m = dtypes.float64 if lam.dtype == dtypes.float64 else dtypes.float32
    lam = lax.stop_gradient(lax.convert_element_type(lam, m))
    shape = _sample_shape("poisson", shape, lam.shape)
    lam = _broadcast(lam, shape)
    bad = (lam < 0) | fnp.isnan(lam)
    lam_s = fnp.where(bad | fnp.isinf(lam), 0.0, lam)
    counts = _poisson_loop(k, lam_s, shape, m)
    info = np.iinfo(d)
    top = float(min(info.max, 2 ** 62))
    counts = fnp.where(fnp.isinf(lam), top, fnp.minimum(counts, top))
    counts = fnp.where(lam == 0, 0.0, counts)
    counts = fnp.where(bad, -1.0, counts)
    if info.min == 0:
        counts = fnp.maximum(counts, 0.0)
    return lax.convert_element_type(counts, d)


# ----------------------------------------------------------------------------- multivariate normal


def multivariate_normal(key, mean, cov, shape=None, dtype=None, method="cholesky"):
    """Multivariate normal samples ``mean + A z`` with ``A A^T = cov`` (mirrors ``jax.random.multivariate_normal``).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      mean: ``(..., n)`` float array.
      cov: ``(..., n, n)`` symmetric positive (semi-)definite float array; its batch shape broadcasts with
        ``mean``'s.
      shape: the batch shape of the result (default: the broadcast batch shape of ``mean`` and ``cov``).
      dtype: float16, bfloat16, float32 (default) or float64.
      method: ``"cholesky"`` (default; a non-positive-definite ``cov`` gives NaN), ``"eigh"`` or ``"svd"``
        (both accept positive semi-definite ``cov``: ``A = U sqrt(max(s, 0))``).

    Returns:
      An array of ``shape + (n,)`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not a key.
      ValueError: ``method`` is not one of the three.
      DTypeError: a non-floating ``dtype``, or complex parameters.
      ShapeError: ``mean`` is not at least 1-d, ``cov`` is not ``(..., n, n)`` matching ``mean``, or the batch
        shapes do not broadcast to ``shape``.
    """
    from fnarray.numpy._util import broadcast_shapes
    fnp = _fnp()
    r = _r()
    if method not in ("cholesky", "eigh", "svd"):
        raise ValueError(f"multivariate_normal: method must be 'cholesky', 'eigh' or 'svd', got {method!r}")
    k = r._check_key(key, "multivariate_normal")
    mean, m, d = _float_param("multivariate_normal", mean, dtype, "mean")
    cov, _, _ = _float_param("multivariate_normal", cov, dtype, "cov")
    if mean.ndim < 1:
        raise ShapeError(f"multivariate_normal: mean must be at least 1-d (..., n), got shape {mean.shape}")
    n = mean.shape[-1]
    if cov.ndim < 2 or cov.shape[-2:] != (n, n):
        raise ShapeError(f"multivariate_normal: cov must have shape (..., {n}, {n}) to match mean of shape "
                         f"{mean.shape}, got {cov.shape}")
    batch = broadcast_shapes(mean.shape[:-1], cov.shape[:-2], name="multivariate_normal")
    shape = _sample_shape("multivariate_normal", shape, batch)
    from fnarray.core import linalg as lax_linalg
    if method == "cholesky":
        factor = lax_linalg.cholesky(cov)
    elif method == "eigh":
        v, w = lax_linalg.eigh(cov)
        factor = v * fnp.sqrt(fnp.maximum(w, 0.0))[..., None, :]
    else:
        u, s, _ = lax_linalg.svd(cov)
        factor = u * fnp.sqrt(fnp.maximum(s, 0.0))[..., None, :]
    z = r.normal(k, tuple(shape) + (n,), m)
    out = mean + fnp.matmul(factor, z[..., None])[..., 0]
    return lax.convert_element_type(_broadcast(out, tuple(shape) + (n,)), d)
