"""Reductions and cumulative functions (array API 2024.12 plus NumPy's and JAX's extras).

Every function reduces over ``axis`` (an int, a tuple of ints, negative counting from the
end, or ``None`` for all axes) and keeps the reduced axes as size 1 with ``keepdims=True``.
Default result dtypes follow ``jax.numpy``: ``sum``/``prod`` of bool and of integers narrower
than 32 bits accumulate in the default ``int32`` (``uint32`` for unsigned), floats keep their
dtype, and ``mean``/``var``/``std``/``median``/``quantile`` of integers give ``float32``.
Pinned semantics (docs/design.md): ``max``/``min`` propagate NaN, ``argmax``/``argmin`` return
the first NaN, and indices are ``int32``. Lists are not accepted (as ``jax.numpy``): convert
them with ``fnarray.numpy.asarray``. NumPy's ``out=`` is accepted for signature compatibility
but must be ``None`` (arrays are immutable).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.tracing import Tracer, is_scalar
from fnarray.numpy._util import (
    asarray_internal,
    aval_of,
    broadcast_shapes,
    check_arraylike,
    normalize_axes,
    normalize_axis,
    promote,
)

__all__ = [
    "all",
    "amax",
    "amin",
    "any",
    "argmax",
    "argmin",
    "average",
    "count_nonzero",
    "cumprod",
    "cumsum",
    "cumulative_prod",
    "cumulative_sum",
    "diff",
    "logsumexp",
    "max",
    "mean",
    "median",
    "min",
    "nanmax",
    "nanmean",
    "nanmin",
    "nansum",
    "percentile",
    "prod",
    "ptp",
    "quantile",
    "std",
    "sum",
    "var",
]

_LOW_FLOATS = (dtypes.float16, dtypes.bfloat16)


# ----------------------------------------------------------------------------- helpers


def _prep(name, x, out=None):
    """``x`` as a strong-typed array; ``out`` must be None."""
    if out is not None:
        raise TypeError(f"{name}: the out= argument is not supported, as fnarray arrays are immutable; "
                        "use the returned array instead")
    if not isinstance(x, Array):   # (an array, the common case: neither check nor conversion to call)
        check_arraylike(name, x)
        x = asarray_internal(x)
    if x.weak_type:
        x = lax.convert_element_type(x, x.dtype, weak_type=False)
    return x


def _convert(x, d):
    return lax.convert_element_type(x, d) if x.dtype != d else x


def _sum_dtype(d):
    """The accumulation dtype of ``sum``/``prod`` without ``dtype=`` (as ``jax.numpy.sum``): bool and narrower
    integers widen to the default integer's width (``int32``/``uint32``; 64-bit with ``enable_x64`` on)."""
    if d.kind == "f" or d.kind == "c":   # (floats keep their dtype: no default integer to look up)
        return d
    di = dtypes.default_int()
    if dtypes.is_bool(d):
        return di
    if dtypes.is_unsigned(d) and d.itemsize < di.itemsize:
        return dtypes.uint64 if di.itemsize == 8 else dtypes.uint32
    if dtypes.is_signed(d) and d.itemsize < di.itemsize:
        return di
    return d


def _float_dtype(d):
    """The result dtype of a statistic (mean, var, quantile) of dtype ``d``: ``dtypes.to_inexact`` (integers ->
    float32; 64-bit ones float64 with ``enable_x64`` on, as JAX)."""
    return dtypes.to_inexact(d)


def _real_dtype(d):
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def _kept_shape(shape, axes):
    return tuple([1 if i in axes else n for i, n in enumerate(shape)])


def _finish(y, shape, axes, keepdims):
    return lax.reshape(y, _kept_shape(shape, axes)) if keepdims else y


def _expand_back(y, shape, axes):
    """Broadcast a reduced ``y`` back to the unreduced ``shape``."""
    kept = [i for i in range(len(shape)) if i not in axes]
    return lax.broadcast_in_dim(y, shape, kept)


def _scalar(v, d):
    return np.asarray(v).astype(d)[()]


def _full(shape, v, d):
    return lax.full(shape, _scalar(v, d), d)


def _select(pred, on_true, on_false):
    """``lax.select`` where either case may be a Python scalar (broadcast to ``pred``'s shape)."""
    shape = aval_of(pred).shape
    d = aval_of(on_true).dtype if not is_scalar(on_true) else aval_of(on_false).dtype
    if is_scalar(on_true):
        on_true = _full(shape, on_true, d)
    if is_scalar(on_false):
        on_false = _full(shape, on_false, d)
    return lax.select(pred, on_true, on_false)


def _isnan(x):
    if dtypes.is_complex(x.dtype):
        return lax.bitwise_or(_isnan(lax.real(x)), _isnan(lax.imag(x)))
    if not dtypes.is_inexact(x.dtype):
        return _full(x.shape, False, dtypes.bool_)
    return lax.ne(x, x)


def _where_mask(name, where, shape):
    """The ``where=`` argument as a bool array of ``shape``."""
    check_arraylike(name, where)
    w = asarray_internal(where)
    if w.dtype != dtypes.bool_:
        raise DTypeError(f"{name}: where= must be a boolean array, got {w.dtype.name}")
    if broadcast_shapes(w.shape, shape, name=f"{name} (where=)") != tuple(shape):
        raise ShapeError(f"{name}: where= of shape {w.shape} does not broadcast to the array's shape {shape}")
    return lax.broadcast_to_rank_shape(w, tuple(shape))


def _count(shape, axes):
    return math.prod(shape[a] for a in axes)


def _reject_complex(name, x):
    if dtypes.is_complex(x.dtype):
        raise DTypeError(f"{name} is not defined for complex arrays (got {x.dtype.name}): complex numbers have "
                         "no order; reduce abs(x), or the real and imaginary parts, instead")


def _lowest(d):
    if dtypes.is_bool(d):
        return False
    if dtypes.is_int(d):
        return dtypes.iinfo(d).min
    return -np.inf


def _highest(d):
    if dtypes.is_bool(d):
        return True
    if dtypes.is_int(d):
        return dtypes.iinfo(d).max
    return np.inf


# ----------------------------------------------------------------------------- sum and product


def _sum_like(name, reduce_fn, bool_fn, identity, a, axis, dtype, out, keepdims, initial, where,
              promote_integers):
    x = _prep(name, a, out)
    axes = normalize_axes(axis, x.ndim)
    if dtype is not None:
        d = dtypes.requested(dtype, name)
    else:
        d = _sum_dtype(x.dtype) if promote_integers else x.dtype
        if dtypes.is_bool(d):
            d = dtypes.default_int()
    if dtypes.is_bool(d):
        # A boolean sum is a logical or, a boolean product a logical and (as NumPy and JAX).
        b = x if dtypes.is_bool(x.dtype) else lax.ne(x, lax.zeros_like(x))
        if where is not None:
            b = _select(_where_mask(name, where, x.shape), b, identity == 1)
        y = bool_fn(b, axes)
        if initial is not None:
            combine = lax.bitwise_or if identity == 0 else lax.bitwise_and
            y = combine(y, _scalar(bool(initial), dtypes.bool_))
        return _finish(y, x.shape, axes, keepdims)
    x = _convert(x, d)
    if where is not None:
        x = _select(_where_mask(name, where, x.shape), x, identity)
    y = reduce_fn(x, axes)
    if initial is not None:
        combine = lax.add if identity == 0 else lax.mul
        y = combine(y, _scalar(initial, d))
    return _finish(y, x.shape, axes, keepdims)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
        promote_integers=True):
    """Sum of elements over ``axis`` (array API ``sum``; ``jax.numpy.sum``).

    Args:
      a: array of any numeric or bool dtype, shape ``S``.
      axis: int, tuple of ints or None (all axes); negative axes count from the end.
      dtype: accumulation and result dtype. Default: bool and integers narrower than 32 bits
        give ``int32`` (``uint32`` if unsigned); other dtypes are kept.
      keepdims: keep reduced axes as size 1.
      initial: a scalar added to the result.
      where: bool array broadcastable to ``S``; only those elements are summed.
      promote_integers: False keeps the input's integer dtype.

    Returns: the reduced array (``S`` without ``axis``). An empty sum is 0.

    Differences from NumPy: small integers accumulate in 32 bits (NumPy uses the platform
    integer, ``int64``); ``out=`` raises, as arrays are immutable.

    Raises: ``ShapeError`` for an axis out of range or repeated; ``TypeError`` for ``out=``.
    """
    return _sum_like("sum", lax.reduce_sum, lax.reduce_or, 0, a, axis, dtype, out, keepdims, initial, where,
                     promote_integers)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None,
         promote_integers=True):
    """Product of elements over ``axis`` (array API ``prod``; ``jax.numpy.prod``).

    Arguments, dtypes and errors are those of ``sum``; an empty product is 1.
    """
    return _sum_like("prod", lax.reduce_prod, lax.reduce_and, 1, a, axis, dtype, out, keepdims, initial, where,
                     promote_integers)


# ----------------------------------------------------------------------------- max and min


def _extremum(name, is_max, a, axis, out, keepdims, initial, where):
    x = _prep(name, a, out)
    _reject_complex(name, x)
    axes = normalize_axes(axis, x.ndim)
    if initial is None:
        if where is not None:
            raise ValueError(f"{name} with where= needs initial=: the masked-out slices would otherwise have no "
                             "value (pass e.g. initial=-inf for max)")
        if 0 in x.shape and builtins.any(x.shape[i] == 0 for i in axes):
            raise ValueError(f"{name} of an empty array (shape {x.shape}, axis {axis}) has no value; "
                             "pass initial= to give the result of an empty reduction")
    if where is not None:
        ident = _lowest(x.dtype) if is_max else _highest(x.dtype)
        x = _select(_where_mask(name, where, x.shape), x, ident)
    y = (lax.reduce_max if is_max else lax.reduce_min)(x, axes)
    if initial is not None:
        y = (lax.max if is_max else lax.min)(y, _scalar(initial, x.dtype))
    return _finish(y, x.shape, axes, keepdims)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum over ``axis`` (array API ``max``; ``jax.numpy.max``); NaN propagates.

    Args:
      a: real or bool array of shape ``S``.
      axis, keepdims: as ``sum``.
      initial: a scalar included in every reduction (needed for empty reductions and ``where``).
      where: bool array broadcastable to ``S``; only those elements count.

    Returns: an array of ``a``'s dtype and ``S`` without ``axis``.

    Raises: ``ValueError`` for an empty reduction (or ``where=``) without ``initial``;
    ``DTypeError`` for complex input.
    """
    return _extremum("max", True, a, axis, out, keepdims, initial, where)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum over ``axis`` (array API ``min``; ``jax.numpy.min``); NaN propagates.

    Arguments, results and errors are those of ``max``.
    """
    return _extremum("min", False, a, axis, out, keepdims, initial, where)


amax, amin = max, min


def _arg_extremum(name, is_max, a, axis, out, keepdims):
    x = _prep(name, a, out)
    _reject_complex(name, x)
    if axis is None:
        ax, shape = 0, x.shape
        x = lax.reshape(x, (x.size,))
    else:
        ax, shape = normalize_axis(axis, x.ndim), x.shape
    if x.shape[ax] == 0:
        raise ValueError(f"{name} of an empty sequence (shape {shape}, axis {axis}) has no answer; "
                         "check the array's size first")
    y = (lax.argmax if is_max else lax.argmin)(x, ax, dtypes.default_int())
    if keepdims:
        y = lax.reshape(y, (1,) * len(shape) if axis is None else _kept_shape(shape, (ax,)))
    return y


def argmax(a, axis=None, out=None, keepdims=False):
    """Index of the first maximum along ``axis`` (array API ``argmax``; ``jax.numpy.argmax``).

    Args:
      a: real or bool array. axis: int, or None to search the flattened array.
      keepdims: keep the reduced axis (all axes for ``axis=None``) as size 1.

    Returns: an ``int32`` array (NumPy: ``int64``); a NaN counts as the maximum, so the first
    NaN wins, as in NumPy.

    Raises: ``ValueError`` for an empty axis; ``DTypeError`` for complex input.
    """
    return _arg_extremum("argmax", True, a, axis, out, keepdims)


def argmin(a, axis=None, out=None, keepdims=False):
    """Index of the first minimum along ``axis`` (array API ``argmin``; ``jax.numpy.argmin``).

    As ``argmax``; a NaN counts as the minimum, so the first NaN wins.
    """
    return _arg_extremum("argmin", False, a, axis, out, keepdims)


# ----------------------------------------------------------------------------- logical


def _logical(name, is_all, a, axis, out, keepdims, where):
    x = _prep(name, a, out)
    axes = normalize_axes(axis, x.ndim)
    b = x if dtypes.is_bool(x.dtype) else lax.ne(x, lax.zeros_like(x))
    if where is not None:
        b = _select(_where_mask(name, where, x.shape), b, is_all)
    y = (lax.reduce_and if is_all else lax.reduce_or)(b, axes)
    return _finish(y, x.shape, axes, keepdims)


def all(a, axis=None, out=None, keepdims=False, *, where=None):
    """Whether every element over ``axis`` is true (non-zero) (array API ``all``; ``jax.numpy.all``).

    Args: a: array of any dtype (NaN counts as true); axis, keepdims, where: as ``sum``.
    Returns: a bool array; ``True`` for an empty reduction.
    """
    return _logical("all", True, a, axis, out, keepdims, where)


def any(a, axis=None, out=None, keepdims=False, *, where=None):
    """Whether some element over ``axis`` is true (non-zero) (array API ``any``; ``jax.numpy.any``).

    Args: as ``all``. Returns: a bool array; ``False`` for an empty reduction.
    """
    return _logical("any", False, a, axis, out, keepdims, where)


def count_nonzero(a, axis=None, keepdims=False):
    """Number of non-zero elements over ``axis`` (array API ``count_nonzero``; ``numpy.count_nonzero``).

    The result is an ``int32`` array (NumPy: ``intp``, a Python int for ``axis=None``).
    """
    x = _prep("count_nonzero", a)
    b = x if dtypes.is_bool(x.dtype) else lax.ne(x, lax.zeros_like(x))
    return sum(b, axis=axis, dtype=dtypes.default_int(), keepdims=keepdims)


# ----------------------------------------------------------------------------- statistics


def _stat_dtypes(name, x, dtype):
    """(result dtype, computation dtype) of a mean-like statistic."""
    d_out = dtypes.requested(dtype, name) if dtype is not None else _float_dtype(x.dtype)
    d_comp = d_out if dtypes.is_inexact(d_out) else _float_dtype(x.dtype)
    if d_comp in _LOW_FLOATS:
        d_comp = dtypes.float32  # accumulate half precision in float32, as jax.numpy does
    return d_out, d_comp


def _mean_parts(name, x, axes, d_comp, where):
    """(sum over axes, count) with ``where`` applied; count is a Python int or an array."""
    xc = _convert(x, d_comp)
    if where is None:
        return lax.reduce_sum(xc, axes), _count(x.shape, axes)
    mask = _where_mask(name, where, x.shape)
    xc = _select(mask, xc, 0)
    n = lax.reduce_sum(lax.convert_element_type(mask, _real_dtype(d_comp)), axes)
    return lax.reduce_sum(xc, axes), n


def _divide_by_count(s, n, d):
    if isinstance(n, int):
        return lax.div(s, _scalar(n, d))
    if dtypes.is_complex(d):
        n = lax.complex(n, lax.zeros_like(n))
    return lax.div(s, n)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """Arithmetic mean over ``axis`` (array API ``mean``; ``jax.numpy.mean``).

    Args:
      a: numeric or bool array of shape ``S``. axis, keepdims: as ``sum``.
      dtype: result dtype; default ``a``'s floating dtype (``float32`` for integers and bool).
        Half-precision inputs are accumulated in ``float32``.
      where: bool array broadcastable to ``S``; only those elements are averaged.

    Returns: the mean; NaN for an empty reduction. Integer and bool inputs give ``float32``
    (NumPy: ``float64``).
    """
    x = _prep("mean", a, out)
    axes = normalize_axes(axis, x.ndim)
    d_out, d_comp = _stat_dtypes("mean", x, dtype)
    s, n = _mean_parts("mean", x, axes, d_comp, where)
    return _finish(_convert(_divide_by_count(s, n, d_comp), d_out), x.shape, axes, keepdims)


def _correction(name, ddof, correction):
    if ddof is not None and correction is not None:
        raise ValueError(f"{name}: pass either ddof= (NumPy) or correction= (array API), not both")
    c = ddof if ddof is not None else correction
    return 0 if c is None else c


def var(a, axis=None, dtype=None, out=None, ddof=None, keepdims=False, *, where=None, correction=None):
    """Variance over ``axis`` (array API ``var``; ``jax.numpy.var``).

    ``sum(|a - mean(a)|**2) / max(N - correction, 0)`` where ``N`` is the number of elements
    reduced, so ``correction=1`` (NumPy's ``ddof=1``) gives the unbiased estimate.

    Args:
      a: numeric or bool array. axis, keepdims, where: as ``mean``.
      dtype: result dtype; default the real floating dtype of ``a`` (``float32`` for integers,
        ``float32`` for ``complex64``).
      correction / ddof: degrees-of-freedom correction (give at most one).

    Returns: a real floating array; NaN or inf where ``N - correction <= 0``.
    """
    x = _prep("var", a, out)
    axes = normalize_axes(axis, x.ndim)
    corr = _correction("var", ddof, correction)
    d_out, d_comp = _stat_dtypes("var", x, dtype)
    d_out = _real_dtype(d_out)
    s, n = _mean_parts("var", x, axes, d_comp, where)
    m = _divide_by_count(s, n, d_comp)
    centered = lax.sub(_convert(x, d_comp), _expand_back(m, x.shape, axes))
    if dtypes.is_complex(d_comp):
        sq = lax.add(lax.integer_pow(lax.real(centered), 2), lax.integer_pow(lax.imag(centered), 2))
    else:
        sq = lax.integer_pow(centered, 2)
    rd = _real_dtype(d_comp)
    if where is not None:
        sq = _select(_where_mask("var", where, x.shape), sq, 0)
    total = lax.reduce_sum(sq, axes)
    if isinstance(n, int):
        denom = _scalar(builtins.max(n - corr, 0), rd)
    else:
        denom = lax.max(lax.sub(n, _scalar(corr, rd)), lax.zeros_like(n))
    return _finish(_convert(lax.div(total, denom), d_out), x.shape, axes, keepdims)


def std(a, axis=None, dtype=None, out=None, ddof=None, keepdims=False, *, where=None, correction=None):
    """Standard deviation, ``sqrt(var(...))`` (array API ``std``; ``jax.numpy.std``); arguments as ``var``."""
    v = var(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, where=where,
            correction=correction)
    return lax.sqrt(v)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean over ``axis`` (``numpy.average``; ``jax.numpy.average``).

    Args:
      a: numeric array of shape ``S``.
      axis: int, tuple or None. weights: None (plain mean), an array of shape ``S``, or (with an
        int ``axis``) a 1-d array of length ``S[axis]``.
      returned: also return the sum of the weights (broadcast to the result's shape).

    Returns: ``sum(a * w) / sum(w)`` in the promoted floating dtype of ``a`` and ``weights``
    (NaN where the weights sum to zero), or ``(average, sum_of_weights)``.

    Raises: ``ShapeError`` when ``weights`` does not fit ``a``.
    """
    x = _prep("average", a)
    axes = normalize_axes(axis, x.ndim)
    if weights is None:
        avg = mean(x, axis=axes, keepdims=keepdims)
        if not returned:
            return avg
        return avg, _full(avg.shape, _count(x.shape, axes), avg.dtype)
    w = _prep("average", weights)
    x, w = promote("average", x, w)
    d = _float_dtype(x.dtype)
    x, w = _convert(x, d), _convert(w, d)
    if w.shape != x.shape:
        if axis is None or isinstance(axis, (tuple, list)) or w.ndim != 1:
            raise ShapeError(f"average: weights of shape {w.shape} do not match a of shape {x.shape}; give "
                             "weights of a's shape, or 1-d weights together with an int axis")
        ax = axes[0]
        if w.shape[0] != x.shape[ax]:
            raise ShapeError(f"average: 1-d weights of length {w.shape[0]} do not match axis {axis} of "
                             f"a's shape {x.shape} (size {x.shape[ax]})")
        w = lax.broadcast_in_dim(w, x.shape, (ax,))
    wsum = lax.reduce_sum(w, axes)
    avg = lax.div(lax.reduce_sum(lax.mul(x, w), axes), wsum)
    avg = _finish(avg, x.shape, axes, keepdims)
    if returned:
        return avg, _finish(wsum, x.shape, axes, keepdims)
    return avg


def ptp(a, axis=None, out=None, keepdims=False):
    """Range ``max - min`` over ``axis`` (``numpy.ptp``; ``jax.numpy.ptp``).

    Raises: ``DTypeError`` for bool or complex input; ``ValueError`` for an empty reduction.
    """
    x = _prep("ptp", a, out)
    if dtypes.is_bool(x.dtype):
        raise DTypeError("ptp is not defined for bool arrays; convert with .astype(int) first")
    return lax.sub(max(x, axis=axis, keepdims=keepdims), min(x, axis=axis, keepdims=keepdims))


# ----------------------------------------------------------------------------- NaN-ignoring


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """Sum treating NaN as zero (``numpy.nansum``); arguments and dtypes as ``sum``."""
    x = _prep("nansum", a, out)
    if dtypes.is_inexact(x.dtype):
        x = _select(_isnan(x), lax.zeros_like(x), x)
    return sum(x, axis=axis, dtype=dtype, keepdims=keepdims, initial=initial, where=where)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """Mean of the non-NaN elements (``numpy.nanmean``); NaN where every element is NaN."""
    x = _prep("nanmean", a, out)
    if not dtypes.is_inexact(x.dtype):
        return mean(x, axis=axis, dtype=dtype, keepdims=keepdims, where=where)
    keep = lax.bitwise_not(_isnan(x))
    if where is not None:
        keep = lax.bitwise_and(keep, _where_mask("nanmean", where, x.shape))
    return mean(x, axis=axis, dtype=dtype, keepdims=keepdims, where=keep)


def _nan_extremum(name, is_max, a, axis, out, keepdims, initial, where):
    x = _prep(name, a, out)
    if not dtypes.is_float(x.dtype):
        return _extremum(name, is_max, x, axis, None, keepdims, initial, where)
    axes = normalize_axes(axis, x.ndim)
    nan = _isnan(x)
    if where is not None:
        nan = lax.bitwise_or(nan, lax.bitwise_not(_where_mask(name, where, x.shape)))
    filled = _select(nan, np.inf * (-1 if is_max else 1), x)
    y = _extremum(name, is_max, filled, axes, None, False, initial, None)
    if initial is None:
        y = _select(lax.reduce_and(nan, axes), np.nan, y)
    return _finish(y, x.shape, axes, keepdims)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Maximum ignoring NaN (``numpy.nanmax``); NaN where every element is NaN.

    Arguments and errors as ``max``.
    """
    return _nan_extremum("nanmax", True, a, axis, out, keepdims, initial, where)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    """Minimum ignoring NaN (``numpy.nanmin``); NaN where every element is NaN.

    Arguments and errors as ``min``.
    """
    return _nan_extremum("nanmin", False, a, axis, out, keepdims, initial, where)


# ----------------------------------------------------------------------------- cumulative


def _cumulative(name, prim, identity, x, axis, dtype, include_initial, promote_ints, flatten_none):
    if not flatten_none and x.ndim == 0:
        raise ShapeError(f"{name} needs an array of rank >= 1, got a 0-d array; reshape it first")
    if axis is None:
        if flatten_none or x.ndim <= 1:
            x = lax.reshape(x, (x.size,))
            axis = 0
        else:
            raise ShapeError(f"{name} of a {x.ndim}-d array needs axis= (only 1-d arrays may omit it)")
    ax = normalize_axis(axis, x.ndim)
    if dtype is not None:
        d = dtypes.requested(dtype, name)
        if dtypes.is_bool(d):
            return _cumulative_bool(prim, identity, x, ax, include_initial)
    else:
        d = _sum_dtype(x.dtype) if promote_ints else x.dtype
    if dtypes.is_bool(d):
        d = dtypes.default_int()
    x = _convert(x, d)
    y = prim(x, ax) if x.shape[ax] else x
    if include_initial:
        cfg = [(0, 0, 0)] * x.ndim
        cfg[ax] = (1, 0, 0)
        y = lax.pad(y, _scalar(identity, d), cfg)
    return y


def _cumulative_bool(prim, identity, x, ax, include_initial):
    """``dtype=bool`` (as NumPy): the elements as ``x != 0``, summed as a logical or (``cumsum``) or multiplied as
    a logical and (``cumprod``): the running count of ones (of zeros) is compared with 0."""
    b = x if dtypes.is_bool(x.dtype) else lax.ne(x, lax.zeros_like(x))
    if identity == 1:
        b = lax.bitwise_not(b)
    counts = _cumulative("", lax.cumsum, 0, _convert(b, dtypes.int32), ax, None, include_initial, False, False)
    seen = lax.gt(counts, lax.zeros_like(counts))
    return lax.bitwise_not(seen) if identity == 1 else seen


def cumsum(a, axis=None, dtype=None, out=None):
    """Cumulative sum along ``axis`` (``numpy.cumsum``; ``jax.numpy.cumsum``).

    Args: a: numeric or bool array; axis: int, or None to work on the flattened array;
    dtype: result dtype, default ``a``'s (bool gives ``int32``, as ``jax.numpy``; NumPy
    accumulates bool and small integers in ``int64``); ``dtype=bool`` gives the running logical or of
    ``a != 0`` (``cumprod``: the running logical and), as NumPy.
    Returns: an array of ``a``'s shape (1-d of ``a.size`` for ``axis=None``).
    """
    x = _prep("cumsum", a, out)
    return _cumulative("cumsum", lax.cumsum, 0, x, axis, dtype, False, False, True)


def cumprod(a, axis=None, dtype=None, out=None):
    """Cumulative product along ``axis`` (``numpy.cumprod``); arguments as ``cumsum``."""
    x = _prep("cumprod", a, out)
    return _cumulative("cumprod", lax.cumprod, 1, x, axis, dtype, False, False, True)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative sum (array API ``cumulative_sum``).

    Args:
      x: numeric or bool array of rank >= 1.
      axis: required unless ``x`` is 1-d; negative counts from the end.
      dtype: default as ``sum`` (small integers and bool accumulate in 32 bits).
      include_initial: prepend the sum of nothing (0), so the axis grows by one.

    Returns: an array of ``x``'s shape (axis one longer with ``include_initial``).

    Raises: ``ShapeError`` for a 0-d array or a missing axis on an N-d array.
    """
    x = _prep("cumulative_sum", x)
    return _cumulative("cumulative_sum", lax.cumsum, 0, x, axis, dtype, include_initial, True, False)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Cumulative product (array API ``cumulative_prod``); as ``cumulative_sum`` with initial value 1,
    except that integer dtypes are kept (bool gives ``int32``), as ``jax.numpy.cumulative_prod``."""
    x = _prep("cumulative_prod", x)
    return _cumulative("cumulative_prod", lax.cumprod, 1, x, axis, dtype, include_initial, False, False)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """``n``-th discrete difference along ``axis`` (array API ``diff``; ``numpy.diff``).

    Args:
      a: array of rank >= 1. n: number of times to difference (>= 0).
      axis: int. prepend / append: scalars or arrays joined to ``a`` along ``axis`` first
        (scalars and arrays broadcast to size 1 along ``axis``).

    Returns: an array with ``axis`` shorter by ``n``; bool arrays give ``a[i+1] != a[i]``.

    Raises: ``ShapeError`` for 0-d input or non-fitting ``prepend``/``append``; ``ValueError``
    for negative ``n``.
    """
    x = _prep("diff", a)
    if x.ndim == 0:
        raise ShapeError("diff needs an array of rank >= 1, got a 0-d array")
    n = int(n)
    if n < 0:
        raise ValueError(f"diff: order n must be >= 0, got {n}")
    ax = normalize_axis(axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        joined = []
        for p in promote("diff", *parts):
            p = asarray_internal(p)
            if p.ndim == 0:
                p = lax.broadcast_in_dim(p, _kept_shape(x.shape, (ax,)), ())
            elif p.ndim != x.ndim or builtins.any(p.shape[i] != x.shape[i] for i in range(x.ndim) if i != ax):
                raise ShapeError(f"diff: prepend/append of shape {p.shape} does not fit a of shape {x.shape}: "
                                 f"give a scalar or an array that matches a on every axis but {ax}")
            joined.append(p)
        x = lax.concatenate(joined, ax)
    for _ in range(n):
        m = x.shape[ax]
        if m == 0:
            break
        hi = lax.slice_in_dim(x, 1, m, axis=ax)
        lo = lax.slice_in_dim(x, 0, m - 1, axis=ax)
        x = lax.ne(hi, lo) if dtypes.is_bool(x.dtype) else lax.sub(hi, lo)
    return x


# ----------------------------------------------------------------------------- order statistics


_QUANTILE_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _check_q_range(name, q, top):
    """Raise for quantiles outside [0, top] when ``q`` is known now (not traced)."""
    if isinstance(q, Tracer):
        return
    v = np.asarray(q, dtype=np.float64)
    if v.size and not (np.all(v >= 0) and np.all(v <= top)):
        raise ValueError(f"{name}: q must lie in [0, {top}], got {q!r}")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th quantiles over ``axis`` (``numpy.quantile``; ``jax.numpy.quantile``).

    Args:
      a: real array of shape ``S``. q: scalar or array of quantiles in [0, 1] (shape ``Q``).
      axis: int, tuple or None (all axes). keepdims: as ``sum``.
      method: ``'linear'`` (default), ``'lower'``, ``'higher'``, ``'nearest'`` or ``'midpoint'``;
        NumPy's other methods (such as ``'inverted_cdf'``) raise ``ValueError``.
      overwrite_input: ignored, as arrays are immutable.

    Returns: an array of shape ``Q + S without axis`` in ``a``'s floating dtype (``float32``
    for integers). A slice containing NaN gives NaN; an empty slice gives NaN.

    Raises: ``ValueError`` for an unknown method or (when ``q`` is concrete) q outside [0, 1];
    ``DTypeError`` for complex input.
    """
    return _quantile("quantile", a, q, axis, out, method, keepdims, scale=1)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th percentiles over ``axis`` (``numpy.percentile``): ``quantile`` with ``q / 100``.

    ``q`` lies in [0, 100]; other arguments, results and errors are those of ``quantile``.
    """
    return _quantile("percentile", a, q, axis, out, method, keepdims, scale=100)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """Median over ``axis`` (``numpy.median``): ``quantile(a, 0.5, ...)``; NaN propagates.

    ``overwrite_input`` is ignored (arrays are immutable); integers give ``float32`` (NumPy:
    ``float64``).
    """
    return _quantile("median", a, 0.5, axis, out, "linear", keepdims, scale=1)


def _quantile(name, a, q, axis, out, method, keepdims, scale):
    x = _prep(name, a, out)
    _reject_complex(name, x)
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"{name}: method must be one of {', '.join(_QUANTILE_METHODS)}, got {method!r}")
    check_arraylike(name, q)
    _check_q_range(name, q, scale)
    axes = normalize_axes(axis, x.ndim)
    d_out = _float_dtype(x.dtype)
    d = dtypes.float32 if d_out in _LOW_FLOATS else d_out
    x = _convert(x, d)
    # Python q goes straight to the compute dtype: a float32 detour would round 0.3 in float64 inputs.
    qa = asarray_internal(q, d)
    if scale != 1:
        qa = lax.div(qa, _scalar(scale, d))
    q_shape = qa.shape
    keep = [i for i in range(x.ndim) if i not in axes]
    rest = tuple(x.shape[i] for i in keep)
    n = _count(x.shape, axes)
    out_shape = q_shape + (_kept_shape(x.shape, axes) if keepdims else rest)
    if n == 0:
        return _full(out_shape, np.nan, d_out)
    xt = lax.reshape(lax.transpose(x, keep + list(axes)), rest + (n,))
    srt = lax.sort(xt, dimension=len(rest))
    qf = lax.reshape(qa, (math.prod(q_shape),))
    pos = lax.mul(qf, _scalar(n - 1, d))
    lo_f = lax.floor(pos)
    hi_f = lax.ceil(pos)

    def take(idx_f):
        idx = lax.convert_element_type(idx_f, dtypes.int32)
        return lax.gather(srt, lax.reshape(idx, idx.shape + (1,)), (len(rest),))

    batch_shape = qf.shape + rest
    if method == "lower":
        res = take(lo_f)
    elif method == "higher":
        res = take(hi_f)
    elif method == "nearest":
        res = take(lax.round(pos))
    else:
        lo, hi = take(lo_f), take(hi_f)
        if method == "midpoint":
            t = _full(batch_shape, 0.5, d)
            t = _select(lax.broadcast_in_dim(lax.eq(lo_f, hi_f), batch_shape, (0,)), 0.0, t)
        else:
            t = lax.broadcast_in_dim(lax.sub(pos, lo_f), batch_shape, (0,))
        res = lax.add(lo, lax.mul(lax.sub(hi, lo), t))
        # Between an infinity and anything, the weighted form keeps the infinity (hi - lo is inf or NaN).
        one_minus_t = lax.sub(_full(batch_shape, 1, d), t)
        weighted = lax.add(lax.mul(lo, one_minus_t), lax.mul(hi, t))
        infinite = lax.bitwise_not(lax.bitwise_and(lax.is_finite(lo), lax.is_finite(hi)))
        res = _select(infinite, weighted, res)
        # Exact positions (t == 0) keep their value, infinities included. Equal finite neighbours give it
        # exactly (hi - lo is 0) and share the derivative as JAX's (1 - t, t): the median of a tie has 1/2 each.
        res = _select(lax.eq(t, lax.zeros_like(t)), lo, res)
    last = lax.slice_in_dim(srt, n - 1, n, axis=len(rest))
    has_nan = lax.broadcast_in_dim(lax.reshape(_isnan(last), rest), batch_shape,
                                   tuple(range(1, 1 + len(rest))))
    res = _select(has_nan, np.nan, res)
    return lax.reshape(_convert(res, d_out), out_shape)


# ----------------------------------------------------------------------------- logsumexp


def logsumexp(a, axis=None, keepdims=False, *, b=None):
    """``log(sum(b * exp(a)))`` over ``axis``, computed stably (``jax.nn.logsumexp``,
    ``scipy.special.logsumexp``).

    The maximum is subtracted first (and treated as a constant for differentiation), so large
    inputs do not overflow; infinite maxima are handled (all ``-inf`` gives ``-inf``).

    Args:
      a: real array (integers are promoted to ``float32``). axis, keepdims: as ``sum``.
      b: optional scale factors, broadcastable to ``a``.

    Returns: a floating array of ``a``'s shape without ``axis``; ``-inf`` for an empty reduction.

    Raises: ``DTypeError`` for complex input.
    """
    x = _prep("logsumexp", a)
    _reject_complex("logsumexp", x)
    x = _convert(x, _float_dtype(x.dtype))
    if b is not None:
        x, bb = promote("logsumexp", x, _prep("logsumexp", b))
        bb = asarray_internal(bb)
        shape = broadcast_shapes(x.shape, bb.shape, name="logsumexp")
        x, bb = lax.broadcast_to_rank_shape(x, shape), lax.broadcast_to_rank_shape(bb, shape)
    axes = normalize_axes(axis, x.ndim)
    m = lax.stop_gradient(lax.reduce_max(x, axes))
    m = _select(lax.is_finite(m), m, 0)
    e = lax.exp(lax.sub(x, _expand_back(m, x.shape, axes)))
    if b is not None:
        e = lax.mul(e, bb)
    y = lax.add(lax.log(lax.reduce_sum(e, axes)), m)
    return _finish(y, x.shape, axes, keepdims)
