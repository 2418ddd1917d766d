"""Samplers of ``fnarray.random`` composed from its others, as ``jax.random`` composes them: ``rayleigh``,
``pareto``, ``weibull_min``, ``maxwell``, ``double_sided_maxwell``, ``triangular``, ``wald``, ``geometric``,
``orthogonal`` (from ``uniform``, ``exponential`` and ``normal``: JAX's values for the same key, to float
rounding), and ``generalized_normal``, ``ball``, ``multinomial`` (from ``gamma`` and ``binomial``, whose streams
differ from JAX's: the same distributions, other values). Re-exported by ``fnarray.random``.

Every function here raises ``TypeError`` for a key that is not a key or a shape that is not ints, ``DTypeError``
for a dtype of the wrong kind, and ``ShapeError`` when the parameters do not broadcast to ``shape``.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray._random_dists import _fill_doc
from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError

__all__ = ["ball", "double_sided_maxwell", "generalized_normal", "geometric", "maxwell", "multinomial", "orthogonal",
           "pareto", "rayleigh", "triangular", "wald", "weibull_min"]


#: ``fnarray.random`` itself, set by it when it imports this module (its samplers and checks are used here).
random = None


def _r():
    return random


def _fnp():
    import fnarray.numpy as fnp
    return fnp


_DOC_PARTS = {"key": "key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).",
              "dtype": "dtype: float16, bfloat16, float32 (default) or float64.",
              "raises": "TypeError, DTypeError, ShapeError: as the module docstring says"}
_DOC_PARTS["plain_tail"] = ("Returns:\n      An array of ``shape`` and ``dtype``.\n\n    Raises:\n      "
                            + _DOC_PARTS["raises"] + ".")


#: fills a docstring's ``{key}``, ``{dtype}``, ``{raises}`` and ``{plain_tail}`` (the Returns and Raises sections of a
#: sample of ``shape`` and ``dtype``) from ``_DOC_PARTS``
_documented = _fill_doc(_DOC_PARTS)


def _params(name, key, shape, dtype, *values):
    """``(raw key, sample shape, dtype, [each value as an array of dtype broadcast to the shape])``; ``shape=None``
    is the parameters' broadcast shape (JAX's ``_check_broadcast_shapes``)."""
    from fnarray.numpy._util import broadcast_shapes
    r = _r()
    k = r._check_key(key, name)
    d = r._float_dtype(dtype, name)
    arrays = [r._as_array(v) for v in values]
    for a in arrays:
        if dtypes.is_complex(a.dtype):
            raise DTypeError(f"{name}: the parameters must be real, got {a.dtype.name}")
    if shape is None:
        shape = broadcast_shapes(*(a.shape for a in arrays), name=name)
    else:
        shape = r._shape_arg(shape, name)
        for a in arrays:
            r._broadcastable_to(a.shape, shape, name, "a parameter")
    return k, shape, d, [_fnp().broadcast_to(lax.convert_element_type(a, d), shape) for a in arrays]


@_documented
def rayleigh(key, scale, shape=None, dtype=None):
    """Rayleigh samples ``scale * sqrt(-2 log u)``, ``u`` uniform on ``[0, 1)`` (mirrors ``jax.random.rayleigh``;
    JAX's values for the same key, to rounding; ``u = 0`` gives ``inf``, as JAX).

    Args:
      {key}
      scale: a float scalar or array, the scale (NaN samples where it is NaN).
      shape: the sample shape (default ``scale``'s shape); ``scale`` must broadcast to it.
      {dtype}

    {plain_tail}
    """
    k, shape, d, (scale,) = _params("rayleigh", key, shape, dtype, scale)
    u = _r()._uniform(k, shape, d, 0.0, 1.0, "rayleigh")
    return scale * lax.sqrt(lax.log(u) * np.asarray(-2, d)[()])


@_documented
def pareto(key, b, shape=None, dtype=None):
    """Pareto samples of density ``b / x**(b + 1)`` on ``[1, inf)``: ``exp(e / b)`` for ``e`` standard
    exponential (mirrors ``jax.random.pareto``; JAX's values to rounding).

    Args:
      {key}
      b: a float scalar or array, the shape parameter (``b <= 0`` gives values below 1 or ``inf``, as JAX).
      shape: the sample shape (default ``b``'s shape); ``b`` must broadcast to it.
      {dtype}

    {plain_tail}
    """
    k, shape, d, (b,) = _params("pareto", key, shape, dtype, b)
    return lax.exp(_r().exponential(k, shape, d) / b)


@_documented
def weibull_min(key, scale, concentration, shape=(), dtype=None):
    """Weibull samples ``(-log1p(-u)) ** (1 / concentration) * scale`` (mirrors ``jax.random.weibull_min``; JAX's
    values to rounding).

    Args:
      {key}
      scale, concentration: float scalars or arrays broadcast to ``shape``.
      shape: the sample shape (default ``()``, as JAX: the parameters must broadcast to it).
      {dtype}

    {plain_tail}
    """
    fnp = _fnp()
    k, shape, d, (scale, c) = _params("weibull_min", key, shape, dtype, scale, concentration)
    u = _r()._uniform(k, shape, d, 0.0, 1.0, "weibull_min")
    return fnp.power(-fnp.log1p(-u), 1.0 / c) * scale


@_documented
def maxwell(key, shape=(), dtype=None):
    """One-sided Maxwell samples (density ``∝ x**2 exp(-x**2 / 2)``): the norm of 3 standard normals along a new
    last axis (mirrors ``jax.random.maxwell``; JAX's values to rounding).

    Args:
      {key}
      shape: the sample shape.
      {dtype}

    Returns:
      An array of ``shape`` and ``dtype``, non-negative.

    Raises:
      {raises}.
    """
    r = _r()
    k = r._check_key(key, "maxwell")
    d = r._float_dtype(dtype, "maxwell")
    z = r.normal(k, r._shape_arg(shape, "maxwell") + (3,), d)
    return _fnp().linalg.norm(z, axis=-1)


@_documented
def double_sided_maxwell(key, loc, scale, shape=(), dtype=None):
    """Double-sided Maxwell samples ``sign * maxwell * scale + loc`` (mirrors ``jax.random.double_sided_maxwell``;
    JAX's values to rounding): the maxwell draw from the first of ``split(key)``, the Rademacher sign from the
    second.

    Args:
      {key}
      loc, scale: float scalars or arrays.
      shape: the sample shape is ``shape + P`` for ``P`` the broadcast shape of ``loc`` and ``scale``, and
        ``P + P`` for an empty ``shape`` (JAX's rule).
      {dtype}

    Returns:
      An array of the shape above and ``dtype``.

    Raises:
      {raises}.
    """
    from fnarray.numpy._util import broadcast_shapes
    r = _r()
    k = r._check_key(key, "double_sided_maxwell")
    d = r._float_dtype(dtype, "double_sided_maxwell")
    loc, scale = r._as_array(loc), r._as_array(scale)
    params = broadcast_shapes(loc.shape, scale.shape, name="double_sided_maxwell")
    shape = r._shape_arg(shape, "double_sided_maxwell")
    shape = (shape or params) + params
    k_max, k_sign = r._split2(k)
    x = maxwell(k_max, shape, d) * r.rademacher(k_sign, shape, d)
    return x * lax.convert_element_type(scale, d) + lax.convert_element_type(loc, d)


@_documented
def triangular(key, left, mode, right, shape=None, dtype=None):
    """Triangular samples on ``[left, right]`` peaking at ``mode`` (mirrors ``jax.random.triangular``; JAX's
    values to rounding): by inversion, ``left + sqrt(u (right - left) (mode - left))`` where ``u`` is below
    ``(mode - left) / (right - left)``, ``right - sqrt((1 - u) (right - left) (right - mode))`` above.

    Args:
      {key}
      left, mode, right: float scalars or arrays with ``left <= mode <= right`` (NaN samples otherwise, as JAX).
      shape: the sample shape (default: the parameters' broadcast shape).
      {dtype}

    {plain_tail}
    """
    fnp = _fnp()
    k, shape, d, (lo, mid, hi) = _params("triangular", key, shape, dtype, left, mode, right)
    u = _r()._uniform(k, shape, d, 0.0, 1.0, "triangular")
    width = hi - lo
    below = lo + lax.sqrt(u * width * (mid - lo))
    above = hi - lax.sqrt((1 - u) * width * (hi - mid))
    return fnp.where(u < (mid - lo) / width, below, above)


@_documented
def wald(key, mean, shape=None, dtype=None):
    """Wald (inverse Gaussian, unit shape) samples of mean ``mean`` (mirrors ``jax.random.wald``; JAX's values to
    rounding): Michael, Schucany and Haas's transformation of ``v`` normal (first of ``split(key)``) with the
    acceptance uniform ``z`` (second): ``x = m + m² y / 2 - m sqrt(4 m y + m² y²) / 2`` for ``y = v²``, then ``x``
    where ``z <= m / (m + x)``, else ``m² / x``.

    Args:
      {key}
      mean: a positive float scalar or array.
      shape: the sample shape (default ``mean``'s shape); ``mean`` must broadcast to it.
      {dtype}

    Returns:
      An array of ``shape`` and ``dtype``, positive.

    Raises:
      {raises}.
    """
    fnp = _fnp()
    r = _r()
    k, shape, d, (m,) = _params("wald", key, shape, dtype, mean)
    k1, k2 = r._split2(k)
    y = lax.integer_pow(r.normal(k1, shape, d), 2)
    z = r._uniform(k2, shape, d, 0.0, 1.0, "wald")
    m2 = lax.integer_pow(m, 2)
    x = m + m2 * y / 2 - m / 2 * lax.sqrt(4 * m * y + m2 * lax.integer_pow(y, 2))
    return fnp.where(z <= m / (m + x), x, m2 / x)


@_documented
def geometric(key, p, shape=None, dtype=None):
    """Geometric samples on ``{{1, 2, ...}}`` (trials to the first success): ``floor(log u / log1p(-p)) + 1`` with
    ``u`` uniform on ``(0, 1]`` in ``p``'s floating dtype (mirrors ``jax.random.geometric``; JAX's values).

    Args:
      {key}
      p: the success probability, a scalar or array (integers promote to float32; ``p = 1`` gives 1, ``p = 0``
        the dtype's conversion of ``inf``, as JAX).
      shape: the sample shape (default ``p``'s shape); ``p`` must broadcast to it.
      dtype: an integer dtype (default int32).

    Returns:
      An integer array of ``shape`` and ``dtype``.

    Raises:
      {raises}.
    """
    fnp = _fnp()
    r = _r()
    d = dtypes.default_int() if dtype is None else dtypes.requested(dtype, "geometric")
    if not dtypes.is_int(d):
        raise DTypeError(f"geometric samples integers: its dtype must be an integer dtype, got {d.name}")
    p = r._as_array(p)
    pd = p.dtype if dtypes.is_float(p.dtype) else dtypes.float32
    k, shape, _, (p,) = _params("geometric", key, shape, pd, p)
    u = r._uniform(k, shape, pd, 0.0, 1.0, "geometric")
    u = fnp.where(u == 0, np.asarray(1, pd)[()], u)
    return lax.convert_element_type(fnp.floor(lax.log(u) / lax.log1p(-p)) + 1, d)


@_documented
def orthogonal(key, n, shape=(), dtype=None, m=None):
    """Haar-random orthogonal (unitary for complex dtypes) matrices; semi-orthogonal for ``n != m`` (mirrors
    ``jax.random.orthogonal``): the QR factors of a normal ``(*shape, max(n, m), min(n, m))`` matrix, ``Q``'s
    columns times the signs of ``R``'s diagonal (Mezzadri 2007), transposed when ``n < m``; JAX's values to
    rounding where the QR factorizations agree.

    Args:
      {key}
      n: the number of rows, a non-negative Python int.
      shape: the batch shape.
      dtype: a float or complex dtype (default float32).
      m: the number of columns (default ``n``).

    Returns:
      An array of ``(*shape, n, m)`` and ``dtype``: rows orthonormal when ``n <= m``, columns when ``m <= n``.

    Raises:
      {raises}; also ``TypeError`` for a non-int ``n``
      or ``m``.
    """
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "orthogonal")
    shape = r._shape_arg(shape, "orthogonal")
    n = operator.index(n)
    m = n if m is None else operator.index(m)
    if n < 0 or m < 0:
        raise ShapeError(f"orthogonal: n and m must be non-negative, got n={n}, m={m}")
    d = dtypes.default_float() if dtype is None else dtypes.requested(dtype, "orthogonal")
    if not (dtypes.is_float(d) or dtypes.is_complex(d)):
        raise DTypeError(f"orthogonal samples floating or complex matrices, got dtype {d.name}")
    z = r.normal(k, shape + (max(n, m), min(n, m)), d)
    q, rr = fnp.linalg.qr(z)
    diag = fnp.diagonal(rr, 0, -2, -1)
    x = q * fnp.expand_dims(fnp.sign(diag), -2)
    return fnp.swapaxes(x, -1, -2) if n < m else x


@_documented
def generalized_normal(key, p, shape=(), dtype=None):
    """Generalized normal samples (density ``∝ exp(-|x|**p)``): ``sign * g ** (1 / p)`` with ``g`` Gamma(1/p)
    from the first of ``split(key)`` and a Rademacher sign from the second (mirrors
    ``jax.random.generalized_normal``; this gamma stream differs from JAX's: the same distribution, other values).

    Args:
      {key}
      p: the positive shape parameter, a float scalar (or an array broadcast to ``shape``).
      shape: the sample shape.
      {dtype}

    {plain_tail}
    """
    r = _r()
    k, shape, d, (p,) = _params("generalized_normal", key, shape, dtype, p)
    k_g, k_sign = r._split2(k)
    g = r.gamma(k_g, 1 / p, shape, d)
    return r.rademacher(k_sign, shape, d) * g ** (1 / p)


@_documented
def ball(key, d, p=2, shape=(), dtype=None):
    """Uniform samples from the unit ``L_p`` ball in ``d`` dimensions (mirrors ``jax.random.ball``; Barthe,
    Guédon, Mendelson and Naor 2005): ``g / (sum |g|**p + e) ** (1 / p)`` for ``g`` generalized normal of
    ``(*shape, d)`` (first of ``split(key)``) and ``e`` standard exponential of ``shape`` (second).

    Args:
      {key}
      d: the dimension, a non-negative Python int.
      p: the norm's order, a positive float (default 2).
      shape: the batch shape.
      {dtype}

    Returns:
      An array of ``(*shape, d)`` and ``dtype`` whose rows have ``L_p`` norm below 1.

    Raises:
      {raises}; also ``TypeError`` for a non-int ``d``.
    """
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "ball")
    shape = r._shape_arg(shape, "ball")
    dim = operator.index(d)
    dt = r._float_dtype(dtype, "ball")
    k_g, k_e = r._split2(k)
    g = generalized_normal(k_g, p, shape + (dim,), dt)
    e = r.exponential(k_e, shape, dt)
    radius = (fnp.sum(fnp.abs(g) ** p, axis=-1) + e) ** (1 / p)
    return lax.convert_element_type(g / radius[..., None], dt)


@_documented
def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1):
    """Multinomial counts of ``n`` trials over the categories of ``p``'s last axis (mirrors
    ``jax.random.multinomial``): a ``scan`` over the categories, each count ``binomial(n_left, p_i / p_rest)``
    with its own key of ``split(key, K)``, as JAX (this binomial stream differs from JAX's: the same
    distribution, other values).

    Args:
      {key}
      n: the number of trials, a scalar or array broadcast to ``shape[:-1]``.
      p: the category probabilities along the last axis (summing to 1), a float array of at least one axis.
      shape: the full result shape, its last axis the categories (default ``p.shape``; JAX's rule);
        ``p`` must broadcast to it.
      dtype: float16, bfloat16, float32 (default) or float64: the counts are floats, as JAX's.
      unroll: accepted for JAX's signature (``scan``'s unroll).

    Returns:
      An array of ``shape`` and ``dtype`` whose last axis sums to ``n``.

    Raises:
      {raises}; also ``ShapeError`` for a scalar ``p``.
    """
    fnp = _fnp()
    r = _r()
    k = r._check_key(key, "multinomial")
    d = r._float_dtype(dtype, "multinomial")
    n, p = r._as_array(n), r._as_array(p)
    if p.ndim < 1:
        raise ShapeError("multinomial needs p with at least one axis (the categories), got a scalar")
    m = fnp.result_type(n, p, dtypes.float32)
    shape = tuple(p.shape) if shape is None else r._shape_arg(shape, "multinomial")
    r._broadcastable_to(p.shape, shape, "multinomial", "p")
    r._broadcastable_to(n.shape, shape[:-1], "multinomial", "n")
    n = fnp.broadcast_to(n.astype(m), shape[:-1])
    p = fnp.moveaxis(fnp.broadcast_to(p.astype(m), shape), -1, 0)
    rest = lax.cumsum(p, 0, reverse=True)
    ratios = p / fnp.where(rest == 0, np.asarray(1, m)[()], rest)

    def step(left, ratio_key):
        ratio, kk = ratio_key
        count = r.binomial(kk, left, fnp.clip(ratio, 0, 1), dtype=m)
        return left - count, count

    from fnarray.lax import scan
    _, counts = scan(step, n, (ratios, r.split(k, shape[-1])), unroll=unroll)
    return lax.convert_element_type(fnp.moveaxis(counts, 0, -1), d)
