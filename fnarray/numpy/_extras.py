"""NumPy / ``jax.numpy`` functions outside the array API that research programs use, as composites.

Each is written over the namespace (so it works eagerly, under ``jit``, ``grad`` and ``vmap``, on
every backend) and follows ``jax.numpy``'s semantics where NumPy's differ: 32-bit default dtypes,
index arrays of ``int32``, shapes that must be static. Sources: the NumPy reference for each
function (numpy.org/doc/stable/reference), whose results the tests compare against in float64.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from fnarray.core import dtypes
from fnarray.core.array import Array
from fnarray.core.errors import ShapeError
from fnarray.core.tracing import Tracer

__all__ = ["allclose", "array_equal", "array_equiv", "isin", "tril_indices", "triu_indices", "diag_indices",
           "tril_indices_from", "triu_indices_from", "diag_indices_from", "unravel_index", "ravel_multi_index",
           "nanvar", "nanstd", "nanargmax", "nanargmin", "nanprod", "nancumsum", "nancumprod", "rint", "fabs",
           "around", "copy", "modf", "divmod", "ndim", "shape", "size", "isscalar", "iscomplexobj", "isrealobj",
           "append", "rollaxis", "trapezoid", "vander", "cov", "corrcoef", "digitize", "geomspace", "isneginf",
           "isposinf", "polyval", "matvec", "vecmat", "ix_"]


# Functions whose results are Python values or the shapes of their inputs: eager calls stay on the
# general path (fnarray/transforms/eager_jit.py would turn their ints into arrays)
NOT_ARRAY_RESULTS = ("ndim", "shape", "size", "isscalar", "iscomplexobj", "isrealobj", "copy", "tril_indices",
                     "triu_indices", "diag_indices", "tril_indices_from", "triu_indices_from", "diag_indices_from",
                     "ravel_multi_index")


def _np():
    from fnarray import numpy as fnp
    return fnp


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``all(isclose(a, b, ...))`` as a 0-d bool array (``jax.numpy.allclose``; NumPy returns a Python bool)."""
    fnp = _np()
    return fnp.all(fnp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """Whether two arrays have the same shape and elements (``jax.numpy.array_equal``): a 0-d bool array.

    Different shapes give ``False`` (a static answer, as in JAX); ``equal_nan`` counts NaNs equal.
    """
    fnp = _np()
    a1, a2 = fnp.asarray(a1), fnp.asarray(a2)
    if a1.shape != a2.shape:
        return fnp.asarray(False)
    eq = a1 == a2
    if equal_nan:
        eq = eq | (fnp.isnan(a1) & fnp.isnan(a2))
    return fnp.all(eq)


def array_equiv(a1, a2):
    """Whether two arrays are equal after broadcasting (``jax.numpy.array_equiv``); ``False`` if they cannot."""
    fnp = _np()
    a1, a2 = fnp.asarray(a1), fnp.asarray(a2)
    try:
        np.broadcast_shapes(a1.shape, a2.shape)
    except ValueError:
        return fnp.asarray(False)
    return fnp.all(a1 == a2)


def isin(element, test_elements, assume_unique=False, invert=False, *, method="auto"):
    """Whether each element of ``element`` occurs in ``test_elements`` (``jax.numpy.isin``), of ``element``'s shape.

    A comparison of every pair (``O(n m)`` memory, as JAX's default for small inputs).
    """
    fnp = _np()
    e = fnp.asarray(element)
    t = fnp.ravel(fnp.asarray(test_elements))
    out = fnp.any(fnp.expand_dims(e, -1) == t, axis=-1)
    return ~out if invert else out


def _static_int(v, what):
    if isinstance(v, Tracer):   # (the ConcretizationTypeError JAX raises, naming the user's line)
        v._concrete(f"{what}: a size from a traced value, {v!r} (array shapes must be known when tracing)")
    if isinstance(v, Array):
        v = np.asarray(v)
    if isinstance(v, np.ndarray):
        if v.ndim:
            raise TypeError(f"{what}: expected a Python int, got an array of shape {v.shape}")
        v = v.item()
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
        raise TypeError(f"{what}: expected a Python int (static), got {v!r}")
    return int(v)


def tril_indices(n, k=0, m=None):
    """Row and column indices of the lower triangle of an ``(n, m)`` matrix (``jax.numpy.tril_indices``), ``int32``
    (``int64`` with ``enable_x64`` on)."""
    n = _static_int(n, "tril_indices")
    m = n if m is None else _static_int(m, "tril_indices")
    r, c = np.tril_indices(n, _static_int(k, "tril_indices"), m)
    fnp = _np()
    return fnp.asarray(r.astype(dtypes.default_int())), fnp.asarray(c.astype(dtypes.default_int()))


def triu_indices(n, k=0, m=None):
    """Row and column indices of the upper triangle of an ``(n, m)`` matrix (``jax.numpy.triu_indices``), ``int32``
    (``int64`` with ``enable_x64`` on)."""
    n = _static_int(n, "triu_indices")
    m = n if m is None else _static_int(m, "triu_indices")
    r, c = np.triu_indices(n, _static_int(k, "triu_indices"), m)
    fnp = _np()
    return fnp.asarray(r.astype(dtypes.default_int())), fnp.asarray(c.astype(dtypes.default_int()))


def diag_indices(n, ndim=2):
    """``ndim`` copies of ``arange(n)`` (``jax.numpy.diag_indices``): indices of the main diagonal."""
    fnp = _np()
    i = fnp.arange(_static_int(n, "diag_indices"))
    return tuple(i for _ in range(_static_int(ndim, "diag_indices")))


def _square_2d(arr, what):
    if arr.ndim != 2:
        raise ShapeError(f"{what}: expected a 2-d array, got shape {tuple(arr.shape)}")


def tril_indices_from(arr, k=0):
    """``tril_indices`` for a 2-d array's shape (``numpy.tril_indices_from``)."""
    _square_2d(arr, "tril_indices_from")
    return tril_indices(arr.shape[0], k, arr.shape[1])


def triu_indices_from(arr, k=0):
    """``triu_indices`` for a 2-d array's shape (``numpy.triu_indices_from``)."""
    _square_2d(arr, "triu_indices_from")
    return triu_indices(arr.shape[0], k, arr.shape[1])


def diag_indices_from(arr):
    """``diag_indices`` for an array whose axes all have one length (``numpy.diag_indices_from``)."""
    if arr.ndim < 2 or len(set(arr.shape)) != 1:
        raise ShapeError(f"diag_indices_from: expected an array of >= 2 equal axes, got shape {tuple(arr.shape)}")
    return diag_indices(arr.shape[0], arr.ndim)


def unravel_index(indices, shape):
    """Flat indices to a tuple of coordinate arrays for ``shape`` (``jax.numpy.unravel_index``).

    As JAX: out-of-range indices are clamped into ``[-size, size)`` and negative ones count from the end.
    """
    fnp = _np()
    i = fnp.asarray(indices)
    shape = tuple(int(d) for d in shape)
    total = math.prod(shape)
    i = fnp.clip(i, -total, total - 1) if total else i
    i = fnp.where(i < 0, i + total, i)
    out = []
    for d in reversed(shape):
        out.append(i % d if d else i * 0)
        i = i // d if d else i
    return tuple(reversed(out))


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """Coordinate arrays to flat indices (``jax.numpy.ravel_multi_index``); ``mode`` ``'clip'`` or ``'wrap'``.

    ``mode='raise'`` (NumPy's default) needs concrete indices, as in JAX.
    """
    fnp = _np()
    dims = tuple(int(d) for d in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"ravel_multi_index: {len(multi_index)} index arrays for {len(dims)} dimensions")
    if order not in ("C", "F"):
        raise ValueError(f"ravel_multi_index: order must be 'C' or 'F', got {order!r}")
    idx = [fnp.asarray(i) for i in multi_index]
    if mode == "raise":
        for i, d in zip(idx, dims, strict=True):
            host = np.asarray(i)
            if host.size and (host.min() < 0 or host.max() >= d):
                raise ValueError(f"ravel_multi_index: an index is out of bounds for a dimension of size {d}")
    elif mode == "clip":
        idx = [fnp.clip(i, 0, d - 1) for i, d in zip(idx, dims, strict=True)]
    elif mode == "wrap":
        idx = [i % d for i, d in zip(idx, dims, strict=True)]
    else:
        raise ValueError(f"ravel_multi_index: mode must be 'raise', 'clip' or 'wrap', got {mode!r}")
    order_dims = range(len(dims)) if order == "C" else reversed(range(len(dims)))
    out = None
    for ax in order_dims:
        out = idx[ax] if out is None else out * dims[ax] + idx[ax]
    return out


def _nan_mask(a):
    fnp = _np()
    a = fnp.asarray(a)
    return a, fnp.isnan(a)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    """The variance ignoring NaNs (``jax.numpy.nanvar``); an all-NaN slice gives NaN.

    ``mean=``: the NaN-ignoring mean over ``axis``, already computed, broadcastable to ``a``'s shape (e.g.
    ``nanmean(a, axis, keepdims=True)``); it replaces the mean's computation (as JAX)."""
    fnp = _np()
    a, nan = _nan_mask(a)
    if where is not None:
        nan = nan | ~fnp.asarray(where, dtype=bool)
    n = fnp.sum(~nan, axis=axis, keepdims=True)
    if mean is None:
        mean = fnp.sum(fnp.where(nan, 0, a), axis=axis, keepdims=True) / n
    dev = fnp.where(nan, 0, a - mean)
    sq = dev * fnp.conj(dev) if fnp.iscomplexobj(dev) else dev * dev
    v = fnp.sum(sq, axis=axis, keepdims=keepdims) / fnp.maximum(
        (n if keepdims else fnp.squeeze(n, axis=axis) if axis is not None else fnp.reshape(n, ())) - ddof, 0)
    v = fnp.real(v) if fnp.iscomplexobj(v) else v
    return v.astype(dtype) if dtype is not None else v


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None):
    """The standard deviation ignoring NaNs (``jax.numpy.nanstd``); arguments (``mean=`` included) as ``nanvar``."""
    return _np().sqrt(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean))


def _nanarg(a, axis, keepdims, fill, fn, what):
    fnp = _np()
    a, nan = _nan_mask(a)
    res = fn(fnp.where(nan, fill, a), axis=axis, keepdims=keepdims)
    all_nan = fnp.all(nan, axis=axis, keepdims=keepdims)
    return fnp.where(all_nan, -1, res)


def nanargmax(a, axis=None, out=None, keepdims=None):
    """The index of the maximum ignoring NaNs (``jax.numpy.nanargmax``); an all-NaN slice gives -1 (NumPy raises)."""
    fnp = _np()
    return _nanarg(a, axis, bool(keepdims), -np.inf, fnp.argmax, "nanargmax")


def nanargmin(a, axis=None, out=None, keepdims=None):
    """The index of the minimum ignoring NaNs (``jax.numpy.nanargmin``); an all-NaN slice gives -1 (NumPy raises)."""
    fnp = _np()
    return _nanarg(a, axis, bool(keepdims), np.inf, fnp.argmin, "nanargmin")


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """The product with NaNs counted as 1 (``jax.numpy.nanprod``)."""
    fnp = _np()
    a, nan = _nan_mask(a)
    r = fnp.prod(fnp.where(nan, 1, a), axis=axis, dtype=dtype, keepdims=keepdims, where=where)
    return r * initial if initial is not None else r


def nancumsum(a, axis=None, dtype=None, out=None):
    """The cumulative sum with NaNs counted as 0 (``jax.numpy.nancumsum``)."""
    fnp = _np()
    a, nan = _nan_mask(a)
    return fnp.cumsum(fnp.where(nan, 0, a), axis=axis, dtype=dtype)


def nancumprod(a, axis=None, dtype=None, out=None):
    """The cumulative product with NaNs counted as 1 (``jax.numpy.nancumprod``)."""
    fnp = _np()
    a, nan = _nan_mask(a)
    return fnp.cumprod(fnp.where(nan, 1, a), axis=axis, dtype=dtype)


def rint(x, /):
    """Round to the nearest integer, halves to even (``numpy.rint``); integers unchanged."""
    return _np().round(x)


def fabs(x, /):
    """The absolute value of a real array (``numpy.fabs``); integers and bools give ``float32`` (as jax.numpy)."""
    fnp = _np()
    x = fnp.asarray(x)
    if fnp.iscomplexobj(x):
        raise TypeError("fabs: complex input is not supported (as numpy.fabs); use abs")
    if not fnp.issubdtype(x.dtype, fnp.floating):
        x = x.astype(fnp.float32)
    return fnp.abs(x)


def around(a, decimals=0, out=None):
    """``round(a, decimals)`` (``numpy.around``)."""
    return _np().round(a, decimals=decimals)


def copy(a, order=None):
    """An array equal to ``a`` (``jax.numpy.copy``): arrays are immutable, so this is ``asarray(a)``."""
    return _np().asarray(a)


def modf(x, /, out=None):
    """``(fractional, integral)`` parts, both with ``x``'s sign (``numpy.modf``)."""
    fnp = _np()
    x = fnp.asarray(x)
    if not fnp.issubdtype(x.dtype, fnp.floating):
        x = x.astype(fnp.float32)
    whole = fnp.trunc(x)
    return x - whole, whole


def divmod(x1, x2, /):  # noqa: A001 (NumPy's name)
    """``(floor_divide(x1, x2), remainder(x1, x2))`` (``numpy.divmod``)."""
    fnp = _np()
    return fnp.floor_divide(x1, x2), fnp.remainder(x1, x2)


def ndim(a):
    """The number of axes of ``a`` (an array, scalar or nested list): a Python int (``numpy.ndim``)."""
    return len(shape(a))


def shape(a):
    """The shape of ``a`` (an array, scalar or nested list): a tuple of ints (``numpy.shape``)."""
    s = getattr(a, "shape", None)
    return tuple(s) if s is not None else np.shape(a)


def size(a, axis=None):
    """The number of elements of ``a`` (or along ``axis``): a Python int (``numpy.size``)."""
    s = shape(a)
    return math.prod(s) if axis is None else s[axis]


def isscalar(element):
    """Whether ``element`` is a scalar (``jax.numpy.isscalar``): Python and NumPy scalars and 0-d arrays count."""
    if isinstance(element, (builtins.bool, int, float, complex, np.generic)):
        return True
    return isinstance(element, (Array, np.ndarray)) and element.ndim == 0


def iscomplexobj(x):
    """Whether ``x``'s dtype is complex (``numpy.iscomplexobj``)."""
    d = getattr(x, "dtype", None)
    if d is None:
        d = np.asarray(x).dtype
    return np.issubdtype(d, np.complexfloating)


def isrealobj(x):
    """Whether ``x``'s dtype is not complex (``numpy.isrealobj``)."""
    return not iscomplexobj(x)


def append(arr, values, axis=None):
    """``concatenate`` of ``arr`` and ``values`` along ``axis``; flattened if ``axis`` is None (``numpy.append``)."""
    fnp = _np()
    arr, values = fnp.asarray(arr), fnp.asarray(values)
    if axis is None:
        return fnp.concatenate([fnp.ravel(arr), fnp.ravel(values)])
    return fnp.concatenate([arr, values], axis=axis)


def rollaxis(a, axis, start=0):
    """Move ``axis`` to before position ``start`` (``numpy.rollaxis``; prefer ``moveaxis``)."""
    fnp = _np()
    a = fnp.asarray(a)
    n = a.ndim
    axis = axis + n if axis < 0 else axis
    start = start + n if start < 0 else start
    if not (0 <= axis < n and 0 <= start <= n):
        raise ValueError(f"rollaxis: axis {axis} or start {start} out of range for {n} axes")
    if axis < start:
        start -= 1
    return fnp.moveaxis(a, axis, start)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` by the trapezoidal rule along ``axis`` at ``x`` or spacing ``dx`` (``numpy.trapezoid``)."""
    fnp = _np()
    y = fnp.moveaxis(fnp.asarray(y), axis, -1)
    if x is None:
        d = dx
    else:
        x = fnp.asarray(x)
        d = fnp.diff(x) if x.ndim == 1 else fnp.diff(fnp.moveaxis(x, axis, -1), axis=-1)
    return fnp.sum(d * (y[..., 1:] + y[..., :-1]), axis=-1) / 2


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-d ``x``: columns ``x**(N-1) ... x**0`` (``numpy.vander``), in ``x``'s dtype
    (as ``jnp.vander``; x64 on or off)."""
    fnp = _np()
    x = fnp.asarray(x)
    if x.ndim != 1:
        raise ShapeError(f"vander: x must be 1-d, got shape {tuple(x.shape)}")
    N = x.shape[0] if N is None else int(N)
    powers = fnp.arange(N) if increasing else fnp.arange(N - 1, -1, -1)
    # the powers in x's dtype, as jnp's: int32 x stays int32 with x64 on (arange's int64 would promote it)
    return fnp.power(x[:, None], powers if x.dtype == fnp.bool_ else powers.astype(x.dtype))


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """The covariance matrix of variables in ``m``'s rows (columns with ``rowvar=False``) (``numpy.cov``,
    ``jax.numpy.cov``).

    Args:
      m, y: 1-d or 2-d arrays of variables (``y``'s are appended); integers are computed in ``float32``.
      rowvar, bias, ddof: as NumPy's (``ddof`` overrides ``bias``).
      fweights: integer frequency weights, one per observation (their absolute values, as JAX's).
      aweights: observation weights, one per observation (their absolute values, as JAX's).
      dtype: a floating or complex dtype to compute in.

    Returns:
      ``(k, k)`` for ``k`` variables, ``()`` for one. The weighted form is NumPy's: the weighted mean, then the
      sum of ``w * x x^T`` over ``sum(w) - ddof * sum(w * aweights) / sum(w)``.

    Raises:
      ShapeError: weights that are not 1-d of one value per observation.
      TypeError: non-integer ``fweights``.
      ValueError: a non-inexact ``dtype``.
    """
    fnp = _np()
    X = fnp.atleast_2d(fnp.asarray(m))
    if not rowvar and X.shape[0] != 1:
        X = X.T
    if y is not None:
        Y = fnp.atleast_2d(fnp.asarray(y))
        if not rowvar and Y.shape[0] != 1:
            Y = Y.T
        X = fnp.concatenate([X, Y], axis=0)
    if dtype is not None and not fnp.issubdtype(dtype, fnp.inexact):
        raise ValueError(f"cov: dtype must be a floating or complex dtype; got {dtype}")
    if dtype is not None:
        X = X.astype(dtype)
    elif not fnp.issubdtype(X.dtype, fnp.inexact):
        X = X.astype(dtypes.to_inexact(X.dtype))
    ddof = (0 if bias else 1) if ddof is None else ddof
    n = X.shape[1]
    fw = _cov_weights(fweights, "fweights", n)
    aw = _cov_weights(aweights, "aweights", n)
    if fw is not None and not fnp.issubdtype(fw.dtype, fnp.integer):
        raise TypeError(f"cov: fweights must be integer; got {fw.dtype}")
    if fw is None and aw is None:
        Xc = X - fnp.mean(X, axis=1, keepdims=True)
        c = (Xc @ fnp.conj(Xc).T) / (n - ddof)
    else:
        w = (fw if aw is None else aw if fw is None else fw * aw).astype(fnp.finfo(X.dtype).dtype)
        w_sum = fnp.sum(w)
        if ddof == 0:
            f = w_sum
        elif aw is None:
            f = w_sum - ddof
        else:
            f = w_sum - ddof * fnp.sum(w * aw) / w_sum
        Xc = X - (X @ w)[:, None] / w_sum
        c = (Xc @ fnp.conj(Xc * w).T) / f
    return fnp.squeeze(c) if c.shape == (1, 1) else c


def _cov_weights(w, name, n):
    """``|w|`` for ``n`` observations, or None."""
    if w is None:
        return None
    fnp = _np()
    w = fnp.asarray(w)
    if w.ndim != 1 or w.shape[0] != n:
        raise ShapeError(f"cov: {name} must be 1-d with one weight per observation ({n}); got shape {tuple(w.shape)}")
    return fnp.abs(w)


def corrcoef(x, y=None, rowvar=True):
    """Pearson correlation coefficients (``numpy.corrcoef``), clipped into ``[-1, 1]`` for real inputs."""
    fnp = _np()
    c = cov(x, y, rowvar)
    if c.ndim == 0:
        return c / c
    d = fnp.sqrt(fnp.real(fnp.diagonal(c)))
    r = c / d[:, None] / d[None, :]
    return r if fnp.iscomplexobj(r) else fnp.clip(r, -1, 1)


def digitize(x, bins, right=False):
    """The index of the bin each ``x`` falls in, for monotonic ``bins`` (``numpy.digitize``), ``int32``
    (with ``enable_x64`` on too, as ``jax.numpy.digitize``).

    Increasing bins: ``bins[i-1] <= x < bins[i]`` (``right=False``) or ``bins[i-1] < x <= bins[i]``;
    decreasing bins mirror it. The direction is read from the first and last bins (which may be traced).
    """
    fnp = _np()
    bins = fnp.asarray(bins)
    if bins.ndim != 1:
        raise ShapeError(f"digitize: bins must be 1-d, got shape {tuple(bins.shape)}")
    up = fnp.searchsorted(bins, x, side="left" if right else "right")
    if bins.shape[0] < 2:
        return up
    n = bins.shape[0]
    down = (n - fnp.searchsorted(bins[::-1], x, side="right" if right else "left"))
    return fnp.where(bins[-1] < bins[0], down, up)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``num`` values spaced evenly on a log scale from ``start`` to ``stop`` (``numpy.geomspace``), real bounds.

    Negative bounds (both negative) give negative values, as NumPy; a zero bound raises ``ValueError``.
    """
    from fnarray.numpy._creation import sample_count
    fnp = _np()
    num = sample_count(num, "geomspace")
    host = (int, float, np.number, np.ndarray)
    if not (isinstance(start, host) and isinstance(stop, host)):    # arrays and tracers: traced bounds
        s_, e_ = fnp.asarray(start), fnp.asarray(stop)
        sign = fnp.sign(s_)
        out = sign * fnp.logspace(fnp.log10(s_ * sign), fnp.log10(e_ * sign), num, endpoint=endpoint, base=10.0)
    else:
        s, e = np.asarray(start), np.asarray(stop)
        if np.any(s == 0) or np.any(e == 0):
            raise ValueError("geomspace: a bound is zero (a geometric sequence cannot contain 0)")
        vals = np.geomspace(s.astype(np.float64), e.astype(np.float64), num, endpoint=endpoint)
        out = fnp.asarray(vals.astype(dtypes.default_float()) if dtype is None else vals)
    if dtype is not None:
        out = out.astype(dtype)
    return fnp.moveaxis(out, 0, axis) if axis != 0 else out


def isneginf(x, /, out=None):
    """Whether each element is ``-inf`` (``numpy.isneginf``)."""
    fnp = _np()
    x = fnp.asarray(x)
    return fnp.isinf(x) & (x < 0)


def isposinf(x, /, out=None):
    """Whether each element is ``+inf`` (``numpy.isposinf``)."""
    fnp = _np()
    x = fnp.asarray(x)
    return fnp.isinf(x) & (x > 0)


def polyval(p, x, *, unroll=16):
    """The polynomial ``p`` (highest power first) at ``x``, by Horner's rule (``jax.numpy.polyval``)."""
    fnp = _np()
    p = fnp.asarray(p)
    x = fnp.asarray(x)
    if p.ndim != 1:
        raise ShapeError(f"polyval: p must be 1-d, got shape {tuple(p.shape)}")
    y = fnp.zeros_like(x * p[0]) if p.shape[0] else fnp.zeros_like(x)
    for i in range(p.shape[0]):
        y = y * x + p[i]
    return y


def matvec(x1, x2, /):
    """``x1 @ x2`` of stacks of matrices ``(..., m, n)`` and vectors ``(..., n)`` (``numpy.matvec``)."""
    fnp = _np()
    return fnp.squeeze(fnp.matmul(x1, fnp.expand_dims(x2, -1)), -1)


def vecmat(x1, x2, /):
    """``conj(x1) @ x2`` of stacks of vectors ``(..., m)`` and matrices ``(..., m, n)`` (``numpy.vecmat``)."""
    fnp = _np()
    return fnp.squeeze(fnp.matmul(fnp.expand_dims(fnp.conj(x1), -2), x2), -2)


def ix_(*args):
    """Open-mesh index arrays from 1-d sequences (``numpy.ix_``): the i-th has shape ``(1,..,n_i,..,1)``."""
    fnp = _np()
    out = []
    for i, a in enumerate(args):
        a = fnp.asarray(a)
        if a.ndim != 1:
            raise ShapeError(f"ix_: argument {i} must be 1-d, got shape {tuple(a.shape)}")
        shp = [1] * len(args)
        shp[i] = a.shape[0]
        out.append(fnp.reshape(a, tuple(shp)))
    return tuple(out)
