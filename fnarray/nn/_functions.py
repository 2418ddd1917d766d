"""Activation functions, softmax, ``logsumexp``, ``one_hot`` and ``standardize`` (mirrors ``jax.nn``).

The piecewise functions are written with ``select`` so that their derivative at the kinks is
JAX's (``relu'(0) = 0``), NaN inputs give NaN, and the branch that is not taken is evaluated at a
safe point (so that its derivative, multiplied by zero, never produces NaN).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.tracing import is_scalar

__all__ = [
    "celu",
    "elu",
    "gelu",
    "glu",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "hard_tanh",
    "identity",
    "leaky_relu",
    "log1mexp",
    "logmeanexp",
    "log_sigmoid",
    "log_softmax",
    "logsumexp",
    "mish",
    "one_hot",
    "relu",
    "relu6",
    "selu",
    "sigmoid",
    "silu",
    "soft_sign",
    "softmax",
    "softplus",
    "sparse_plus",
    "sparse_sigmoid",
    "squareplus",
    "standardize",
    "swish",
    "tanh",
]


# ----------------------------------------------------------------------------- helpers


def _weak_in_weak_out(fn):
    """``fn(x, ...)`` weakly typed where ``x`` is (a Python scalar: ``relu(1.0)``), as ``jax.nn``'s activations."""
    @functools.wraps(fn)
    def activation(x, *args, **kwargs):
        from fnarray.numpy._util import aval_of, is_weakly_typed
        out = fn(x, *args, **kwargs)
        if is_weakly_typed(x) and not aval_of(out).weak_type:
            out = lax.convert_element_type(out, aval_of(out).dtype, weak_type=True)
        return out
    return activation


def _array(x, name):
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike(name, x)
    return asarray_internal(x)


def _real(x, name, allow_int=False):
    """``x`` as an array of a real dtype; integers and bools become float32 unless ``allow_int``."""
    x = _array(x, name)
    if dtypes.is_complex(x.dtype):
        raise DTypeError(f"{name} is defined for real inputs, got {x.dtype.name}")
    if dtypes.is_bool(x.dtype) or (dtypes.is_int(x.dtype) and not allow_int):
        x = lax.convert_element_type(x, dtypes.to_inexact(x.dtype), weak_type=x.weak_type)
    return x


def _where(pred, on_true, on_false):
    """``on_true`` where ``pred`` else ``on_false``, with NumPy promotion; ``pred`` has the result shape."""
    from fnarray.numpy._util import promote
    a, b = promote("where", on_true, on_false)
    shape = pred.shape

    def full(v):
        if is_scalar(v):
            d = v.dtype if isinstance(v, np.generic) else dtypes.dtype_of_scalar(v)[0]
            return lax.full(shape, v, d)
        return v if v.shape == shape else lax.broadcast_to_rank_shape(v, shape)

    a, b = full(a), full(b)
    if a.dtype != b.dtype:
        b = lax.convert_element_type(b, a.dtype)
    return lax.select(pred, a, b)


def _const(v, x):
    """A literal of ``x``'s dtype."""
    return np.asarray(v, x.dtype)[()]


def _axes(axis, ndim):
    from fnarray.numpy._util import normalize_axes
    return normalize_axes(axis, ndim)


def _keep(r, shape, axes):
    return lax.reshape(r, tuple(1 if i in axes else n for i, n in enumerate(shape)))


def _max_keep(x, axes):
    return _keep(lax.reduce_max(x, axes), x.shape, axes)


def _sum_keep(x, axes):
    return _keep(lax.reduce_sum(x, axes), x.shape, axes)


def _bcast_to(v, shape):
    return v if v.shape == tuple(shape) else lax.broadcast_to_rank_shape(v, shape)


# ----------------------------------------------------------------------------- activations


@_weak_in_weak_out
def relu(x):
    """Rectified linear unit ``max(x, 0)`` (mirrors ``jax.nn.relu``; Nair & Hinton 2010).

    The derivative at 0 is 0, as in JAX; NaN stays NaN.

    Args:
      x: a real array or scalar. Integers keep their dtype; bool becomes ``float32``.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "relu", allow_int=True)
    if not dtypes.is_inexact(x.dtype):
        return lax.max(x, lax.full((), 0, x.dtype))
    return _relu(x)


def _relu_impl(x):
    # max(x, 0) is one fast NumPy call where a select is a slow, branchy one.
    return lax.max(x, lax.full((), 0, x.dtype))


def _relu_jvp(primals, tangents):
    # Derivative 0 at 0, as jax.nn.relu; the tangent costs one multiply by the mask.
    (x,), (t,) = primals, tangents
    mask = lax.convert_element_type(lax.gt(x, lax.full((), 0, x.dtype)), x.dtype)
    return _relu(x), lax.mul(t, mask)


def _make_relu():
    from fnarray.transforms.ad import custom_jvp
    f = custom_jvp(_relu_impl)
    f.defjvp(_relu_jvp)
    return f


_relu = _make_relu()


@_weak_in_weak_out
def relu6(x):
    """``min(max(x, 0), 6)`` (mirrors ``jax.nn.relu6``); derivative 0 at 0 and at 6.

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32`` (as JAX's: its bound 6.0
        promotes them).

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "relu6")
    return _where(x <= 0, 0, _where(x >= 6, 6, x))


def leaky_relu(x, negative_slope=1e-2):
    """``x`` where ``x >= 0`` else ``negative_slope * x`` (mirrors ``jax.nn.leaky_relu``; Maas et al. 2013).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.
      negative_slope: a scalar (a Python float keeps ``x``'s dtype).

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "leaky_relu")
    return _where(x >= 0, x, negative_slope * x)


@_weak_in_weak_out
def elu(x, alpha=1.0):
    """Exponential linear unit: ``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``
    (mirrors ``jax.nn.elu``; Clevert et al. 2016).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.
      alpha: a scalar.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "elu")
    safe = _where(x > 0, 0, x)
    return _where(x > 0, x, alpha * lax.expm1(safe))


@_weak_in_weak_out
def celu(x, alpha=1.0):
    """Continuously-differentiable ELU: ``x`` if ``x > 0`` else ``alpha * expm1(x / alpha)``
    (mirrors ``jax.nn.celu``; Barron 2017).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.
      alpha: a non-zero scalar (0 gives NaN for negative ``x``).

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "celu")
    safe = _where(x > 0, 0, x)
    return _where(x > 0, x, alpha * lax.expm1(safe / alpha))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@_weak_in_weak_out
def selu(x):
    """Scaled ELU with the self-normalizing constants of Klambauer et al. 2017 (mirrors ``jax.nn.selu``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def gelu(x, approximate: bool = True):
    """Gaussian error linear unit (mirrors ``jax.nn.gelu``; Hendrycks & Gimpel 2016).

    ``approximate=True``: ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3)))``;
    ``approximate=False``: ``x/2 * (1 + erf(x / sqrt(2)))``.

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.
      approximate: use the ``tanh`` formula (JAX's default) instead of ``erf``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "gelu")
    if approximate:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
        out = 0.5 * x * (1.0 + lax.tanh(inner))
    else:
        out = 0.5 * x * (1.0 + lax.erf(x * (1.0 / math.sqrt(2.0))))
    return lax.convert_element_type(out, out.dtype)   # strongly typed, also for a Python scalar (as JAX's)


def sigmoid(x):
    """Logistic sigmoid ``1 / (1 + exp(-x))`` (mirrors ``jax.nn.sigmoid``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input), in ``[0, 1]``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    return lax.logistic(_real(x, "sigmoid"))


@_weak_in_weak_out
def softplus(x):
    """``log(1 + exp(x))``, computed stably as ``max(x, 0) + log1p(exp(-|x|))`` (mirrors ``jax.nn.softplus``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input);
      its derivative is ``sigmoid(x)`` (0.5 at 0).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "softplus")
    pos = x > 0
    neg_abs = _where(pos, -x, x)
    return _where(pos, x, 0) + lax.log1p(lax.exp(neg_abs))


@_weak_in_weak_out
def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)`` (mirrors ``jax.nn.log_sigmoid``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input), finite for large ``|x|``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "log_sigmoid")
    return -softplus(-x)


@_weak_in_weak_out
def soft_sign(x):
    """``x / (|x| + 1)`` (mirrors ``jax.nn.soft_sign``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "soft_sign")
    return x / (lax.abs(x) + 1)


def silu(x):
    """Sigmoid linear unit ``x * sigmoid(x)`` (mirrors ``jax.nn.silu``; ``swish`` is the same; Elfwing et al. 2018,
    Ramachandran et al. 2017).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "silu")
    return x * lax.logistic(x)


swish = silu


@_weak_in_weak_out
def hard_sigmoid(x):
    """``relu6(x + 3) / 6`` (mirrors ``jax.nn.hard_sigmoid``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input), in ``[0, 1]``.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "hard_sigmoid")
    return relu6(x + 3.0) / 6.0


@_weak_in_weak_out
def hard_silu(x):
    """``x * hard_sigmoid(x)`` (mirrors ``jax.nn.hard_silu``; ``hard_swish`` is the same; Howard et al. 2019).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "hard_silu")
    return x * hard_sigmoid(x)


hard_swish = hard_silu


@_weak_in_weak_out
def mish(x):
    """``x * tanh(softplus(x))`` (mirrors ``jax.nn.mish``; Misra, 2019).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "mish")
    return x * lax.tanh(softplus(x))


def squareplus(x, b=4):
    """``(x + sqrt(x**2 + b)) / 2``, a smooth ReLU without exponentials (mirrors ``jax.nn.squareplus``; Barron,
    2021).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.
      b: the smoothness, ``>= 0`` (``b = 0`` is ``relu``).

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input), positive.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "squareplus")
    return (x + lax.sqrt(x * x + b)) / 2


@_weak_in_weak_out
def sparse_plus(x):
    """0 for ``x <= -1``, ``(x + 1)**2 / 4`` between, ``x`` for ``x >= 1`` (mirrors ``jax.nn.sparse_plus``;
    sparsemax's smooth ReLU).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "sparse_plus")
    inside = (x + 1) * (x + 1) / 4
    return _where(x <= -1, 0, _where(x >= 1, x, inside))


@_weak_in_weak_out
def sparse_sigmoid(x):
    """``clip((x + 1) / 2, 0, 1)``, the derivative of ``sparse_plus`` (mirrors ``jax.nn.sparse_sigmoid``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "sparse_sigmoid")
    return 0.5 * lax.min(lax.max(x + 1, lax.full(x.shape, 0, x.dtype)), lax.full(x.shape, 2, x.dtype))


def log1mexp(x):
    """``log(1 - exp(-x))`` for ``x > 0``, accurate at both ends: ``log(-expm1(-x))`` below ``log 2`` and
    ``log1p(-exp(-x))`` above (mirrors ``jax.nn.log1mexp``; Maechler, 2012). NaN for ``x < 0``, ``-inf`` at 0.

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    return _log1mexp(_real(x, "log1mexp"))


def _log1mexp_impl(x):
    small = lax.lt(x, lax.full((), math.log(2.0), x.dtype))
    return lax.select(small, lax.log(lax.neg(lax.expm1(lax.neg(x)))), lax.log1p(lax.neg(lax.exp(lax.neg(x)))))


def _log1mexp_jvp(primals, tangents):
    # d/dx log(1 - exp(-x)) = 1 / expm1(x): one expression, so the branch not taken adds no 0 * inf (JAX's rule)
    (x,), (t,) = primals, tangents
    return _log1mexp(x), lax.div(t, lax.expm1(x))


def _make_log1mexp():
    from fnarray.transforms.ad import custom_jvp
    f = custom_jvp(_log1mexp_impl)
    f.defjvp(_log1mexp_jvp)
    return f


_log1mexp = _make_log1mexp()


def glu(x, axis=-1):
    """Gated linear unit ``a * sigmoid(b)`` of the two halves ``a, b`` of ``x`` along ``axis`` (mirrors
    ``jax.nn.glu``; Dauphin et al., 2017).

    Args:
      x: a real array whose ``axis`` has an even length.
      axis: the axis to split.

    Returns:
      An array of ``x``'s shape with ``axis`` halved, floating (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar. DTypeError: ``x`` is complex.
      ShapeError: ``axis`` has an odd length. AxisError: ``axis`` out of range.
    """
    from fnarray.numpy._util import normalize_axis
    x = _real(x, "glu")
    ax = normalize_axis(axis, x.ndim, "glu axis")
    n = x.shape[ax]
    if n % 2:
        raise ShapeError(f"glu: axis {axis} of shape {tuple(x.shape)} has an odd length; it is split in two halves")
    half = n // 2
    a = lax.slice_in_dim(x, 0, half, axis=ax)
    b = lax.slice_in_dim(x, half, n, axis=ax)
    return a * lax.logistic(b)


def identity(x):
    """``x`` itself, as an array (mirrors ``jax.nn.identity``: the activation that does nothing).

    Args:
      x: an array or a scalar.

    Returns:
      ``x`` as an array, its dtype unchanged.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    return _array(x, "identity")


@_weak_in_weak_out
def hard_tanh(x):
    """``x`` clipped to ``[-1, 1]`` (mirrors ``jax.nn.hard_tanh``).

    Args:
      x: a real array or scalar; integers keep their dtype (as JAX's), bool becomes ``float32``.

    Returns:
      An array of ``x``'s shape and dtype (``float32`` for bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "hard_tanh", allow_int=True)
    return _where(x > 1, 1, _where(x < -1, -1, x))


def tanh(x):
    """Hyperbolic tangent (mirrors ``jax.nn.tanh``).

    Args:
      x: a real array or scalar; integer and bool inputs are computed in ``float32``.

    Returns:
      An array of ``x``'s shape and floating dtype (``float32`` for integer/bool input).

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    return lax.tanh(_real(x, "tanh"))


# ----------------------------------------------------------------------------- normalizations


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False, where=None):
    """``log(sum(b * exp(a)))`` over ``axis``, stable for large inputs (mirrors ``jax.nn.logsumexp``).

    The maximum is subtracted before exponentiating and added back; it goes through
    ``stop_gradient``, so the gradient is exactly ``softmax(a)`` (times ``b``) and stays finite
    for inputs of any size. A maximum of ``±inf`` is replaced by 0 so that all-``-inf`` slices
    give ``-inf`` and slices containing ``+inf`` give ``+inf``.

    Args:
      a: a real array.
      axis: an int, a tuple of ints or ``None`` (all axes).
      b: optional scaling factors, broadcastable to ``a``.
      keepdims: keep the reduced axes with size 1.
      return_sign: also return the sign of the sum; the result is then ``log|sum|``.
      where: optional bool mask broadcastable to ``a``: only its True elements take part.
    Returns:
      A float array of the reduced shape (and the sign array of the same shape with
      ``return_sign``). Without ``return_sign``, a negative sum gives NaN. The dtype
      is ``a``'s floating dtype (promoted with ``b``'s), ``float32`` for integer input.

    Raises:
      ShapeError: an axis out of range or repeated, or a ``b`` that does not broadcast.
      TypeError: ``a`` or ``b`` is not an array or a scalar.
      DTypeError: ``a`` or ``b`` is complex.
    """
    from fnarray.numpy._util import broadcast_shapes, promote
    a = _real(a, "logsumexp")
    if where is not None:  # excluded elements count as -inf (with a weight of 0)
        mask = _where_mask(where, a, "logsumexp")
        b = _where(mask, 1 if b is None else b, 0)
        a = _where(mask, a, -np.inf)
    if b is not None:
        a, b = promote("logsumexp", a, _real(b, "logsumexp"))
        shape = broadcast_shapes(a.shape, b.shape, name="logsumexp")
        a, b = _bcast_to(a, shape), _bcast_to(b, shape)
    axes = _axes(axis, a.ndim)
    amax = lax.stop_gradient(_max_keep(a, axes))
    amax = _where(lax.is_finite(amax), amax, 0)
    e = lax.exp(a - amax)
    if b is not None:
        e = e * b
    s = _sum_keep(e, axes)
    sign = None
    if return_sign:
        sign = lax.sign(s)
        s = lax.abs(s)
    out = lax.log(s) + amax
    if not keepdims:
        kept = tuple(n for i, n in enumerate(a.shape) if i not in axes)
        out = lax.reshape(out, kept)
        sign = lax.reshape(sign, kept) if sign is not None else None
    return (out, sign) if return_sign else out


def logmeanexp(x, axis=None, where=None, keepdims: bool = False):
    """``log(mean(exp(x)))`` over ``axis``, stable for large inputs (``jax.nn.logmeanexp``): ``logsumexp``
    less the log of the number of elements taking part (those ``where`` keeps).

    Args:
      x: a real array. axis: an int, a tuple or None (all axes). where: optional bool mask
        broadcastable to ``x``. keepdims: keep the reduced axes with size 1.
    Returns:
      the reduced shape in ``x``'s floating dtype; ``-inf`` for a slice with no element.
    Raises:
      as ``logsumexp``.
    """
    import fnarray.numpy as fnp
    x = fnp.asarray(x)
    total = logsumexp(x, axis, keepdims=keepdims, where=where)
    ones = fnp.ones(x.shape, total.dtype) if where is None else fnp.astype(fnp.broadcast_to(where, x.shape),
                                                                             total.dtype)
    return total - fnp.log(fnp.sum(ones, axis=axis, keepdims=keepdims))


def _where_mask(where, x, name):
    """``where`` as a bool array of ``x``'s shape (``ShapeError`` where it does not broadcast to it)."""
    mask = _array(where, name)
    if not dtypes.is_bool(mask.dtype):
        raise DTypeError(f"{name}: where must be a bool array (True: the element takes part), got {mask.dtype.name}")
    try:
        np.broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        raise ShapeError(f"{name}: where of shape {mask.shape} does not broadcast to x's shape {x.shape}") from None
    return _bcast_to(mask, x.shape)


def _masked_shift(x, axes, where, name):
    """``(x - max, mask)``: the maximum over ``axes`` (of the elements ``where`` keeps; 0 for a slice it keeps
    none of), under ``stop_gradient``; ``mask`` is ``None`` without ``where``."""
    if where is None:
        return x - lax.stop_gradient(_max_keep(x, axes)), None
    mask = _where_mask(where, x, name)
    m = _max_keep(lax.select(mask, x, lax.full(x.shape, -np.inf, x.dtype)), axes)
    m = lax.select(lax.is_finite(m), m, lax.full(m.shape, 0, x.dtype))
    return x - lax.stop_gradient(m), mask


def softmax(x, axis=-1, where=None):
    """``exp(x) / sum(exp(x))`` over ``axis`` (mirrors ``jax.nn.softmax``).

    Computed as ``exp(x - max)`` normalized, with the maximum under ``stop_gradient``.

    Args:
      x: a real array.
      axis: an int, a tuple of ints or ``None``.
      where: ``None``, or a bool array broadcastable to ``x``: only its ``True`` elements take part; the others
        are 0 in the result (as JAX's ``where=``).

    Returns:
      A float array of ``x``'s shape (``float32`` for integer input) whose slices
      along ``axis`` sum to 1 (over the elements ``where`` keeps).

    Raises:
      ShapeError: an axis out of range or repeated (``AxisError``, a ``ShapeError``), or ``where`` that does not
        broadcast to ``x``.
      TypeError: ``x`` is not an array or a scalar, or ``axis`` is not an int or tuple.
      DTypeError: ``x`` is complex, or ``where`` is not bool.
    """
    x = _real(x, "softmax")
    axes = _axes(axis, x.ndim)
    shifted, mask = _masked_shift(x, axes, where, "softmax")
    unnormalized = lax.exp(shifted)
    if mask is None:
        return unnormalized / _sum_keep(unnormalized, axes)
    zeros = lax.full(x.shape, 0, x.dtype)
    unnormalized = lax.select(mask, unnormalized, zeros)
    return lax.select(mask, unnormalized / _sum_keep(unnormalized, axes), zeros)


def log_softmax(x, axis=-1, where=None):
    """``x - logsumexp(x)`` over ``axis`` (mirrors ``jax.nn.log_softmax``).

    Args:
      x: a real array.
      axis: an int, a tuple of ints or ``None``.
      where: ``None``, or a bool array broadcastable to ``x``: only its ``True`` elements take part; the others
        are ``-inf`` in the result (as JAX's ``where=``).

    Returns:
      A float array of ``x``'s shape (``float32`` for integer input).

    Raises:
      ShapeError: an axis out of range or repeated (``AxisError``, a ``ShapeError``), or ``where`` that does not
        broadcast to ``x``.
      TypeError: ``x`` is not an array or a scalar, or ``axis`` is not an int or tuple.
      DTypeError: ``x`` is complex, or ``where`` is not bool.
    """
    x = _real(x, "log_softmax")
    axes = _axes(axis, x.ndim)
    shifted, mask = _masked_shift(x, axes, where, "log_softmax")
    if mask is None:
        return shifted - lax.log(_sum_keep(lax.exp(shifted), axes))
    exps = lax.select(mask, lax.exp(shifted), lax.full(x.shape, 0, x.dtype))
    return lax.select(mask, shifted - lax.log(_sum_keep(exps, axes)), lax.full(x.shape, -np.inf, x.dtype))


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis`` (mirrors ``jax.nn.standardize``).

    Without ``mean``/``variance`` they are computed over ``axis`` (the variance as the mean of
    squared deviations, which is more accurate than JAX's ``E[x²] - E[x]²``).

    Args:
      x: a real array.
      axis: an int, a tuple of ints or ``None``.
      mean, variance: optional arrays broadcastable to ``x`` (for example running statistics).
      epsilon: added to the variance.

    Returns:
      A float array of ``x``'s shape (``float32`` for integer input).

    Raises:
      ShapeError: an axis out of range or repeated (``AxisError``, a ``ShapeError``).
      TypeError: ``x`` is not an array or a scalar, or ``axis`` is not an int or tuple.
      DTypeError: ``x`` is complex.
    """
    x = _real(x, "standardize")
    axes = _axes(axis, x.ndim)
    count = math.prod(x.shape[i] for i in axes)
    if mean is None:
        mean = _sum_keep(x, axes) / float(max(count, 1))
    centered = x - mean
    if variance is None:
        variance = _sum_keep(centered * centered, axes) / float(max(count, 1))
    return centered * lax.rsqrt(variance + epsilon)


def one_hot(x, num_classes: int, *, dtype=None, axis=-1):
    """One-hot encoding: ``out[..., c, ...] = (x[...] == c)`` (mirrors ``jax.nn.one_hot``).

    Args:
      x: an array of class indices (integers; floats are compared as they are).
      num_classes: a static non-negative int.
      dtype: the result dtype (default float32).
      axis: where the class axis goes in the result (an int in ``[-(x.ndim+1), x.ndim]``).
    Returns:
      An array of shape ``x.shape`` with ``num_classes`` inserted at ``axis``. Indices out of
      ``[0, num_classes)`` give rows of zeros.

    Raises:
      TypeError: a non-int ``num_classes``, or ``x`` not an array or a scalar.
      ValueError: a negative ``num_classes``.
      ShapeError: ``axis`` out of range (``AxisError``).
      DTypeError: an unsupported ``dtype``.
    """
    from fnarray.numpy._util import normalize_axis
    if isinstance(num_classes, (bool, np.bool_)) or not isinstance(num_classes, (int, np.integer)):
        raise TypeError(f"one_hot needs a static int num_classes, got {type(num_classes).__name__}; "
                        "the number of classes fixes the result's shape")
    n = int(num_classes)
    if n < 0:
        raise ValueError(f"one_hot: num_classes must be >= 0, got {n}")
    x = _array(x, "one_hot")
    d = dtypes.canonicalize(dtypes.default_float() if dtype is None else dtype)
    ax = normalize_axis(axis, x.ndim + 1)
    out_shape = x.shape[:ax] + (n,) + x.shape[ax:]
    cmp_dtype = x.dtype
    if dtypes.is_bool(cmp_dtype) or (dtypes.is_int(cmp_dtype) and cmp_dtype.itemsize < 4):
        cmp_dtype = dtypes.int32
    if cmp_dtype != x.dtype:
        x = lax.convert_element_type(x, cmp_dtype)
    spread = lax.broadcast_in_dim(x, out_shape, tuple(i for i in range(len(out_shape)) if i != ax))
    classes = lax.iota(cmp_dtype, out_shape, ax)
    return lax.convert_element_type(lax.eq(spread, classes), d)
