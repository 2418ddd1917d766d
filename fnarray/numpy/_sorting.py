"""Sorting, searching and set functions (array API 2024.12, NumPy and JAX extras).

Sorting lowers to the multi-operand ``sort`` primitive: ``argsort`` sorts ``(keys, iota)``
and keeps the permuted iota. NaN sorts last (docs/design.md), -0.0 sorts equal to 0.0, complex
numbers sort by real part then imaginary part (as NumPy). A descending sort is the reverse of
the ascending one, so NaN comes first there, and a stable descending ``argsort`` keeps equal
elements in their original order (array API). Indices are ``int32``.

Functions whose output shape depends on the input's values (``unique*``, ``nonzero``,
``argwhere``, ``flatnonzero``, ``bincount`` without ``length``) run eagerly only; inside
``jit``/``vmap``/``grad`` they raise ``ConcretizationError`` unless given a static ``size``
(or ``length``), as in ``jax.numpy``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes, lax, tracing
from fnarray.core.array import Array
from fnarray.core.errors import ConcretizationError, DTypeError, ShapeError
from fnarray.core.tracing import Tracer
from fnarray.numpy._util import asarray_internal, aval_of, check_arraylike, normalize_axis, promote

__all__ = [
    "UniqueAllResult",
    "UniqueCountsResult",
    "UniqueInverseResult",
    "argpartition",
    "argsort",
    "argwhere",
    "bincount",
    "flatnonzero",
    "lexsort",
    "nonzero",
    "partition",
    "searchsorted",
    "sort",
    "top_k",
    "unique",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
]


class UniqueAllResult(NamedTuple):
    """Result of ``unique_all`` (the array API's ``unique_all`` result; ``numpy.lib.UniqueAllResult``).

    Fields: ``values``, ``indices`` (first occurrences), ``inverse_indices`` and ``counts``, the
    index arrays ``int32`` (NumPy: ``int64``).
    """
    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class UniqueCountsResult(NamedTuple):
    """Result of ``unique_counts`` (array API; ``numpy.lib.UniqueCountsResult``): ``values``, ``counts`` (``int32``)."""
    values: Array
    counts: Array


class UniqueInverseResult(NamedTuple):
    """Result of ``unique_inverse`` (array API; ``numpy.lib.UniqueInverseResult``): ``values``, ``inverse_indices``."""
    values: Array
    inverse_indices: Array


# ----------------------------------------------------------------------------- helpers


def _prep(name, x):
    check_arraylike(name, x)
    return asarray_internal(x)


def _scalar(v, d):
    return np.asarray(v).astype(d)[()]


def _i32(x):
    return lax.convert_element_type(x, dtypes.int32) if aval_of(x).dtype != dtypes.int32 else x


def _index(x):
    """Indices computed in ``int32`` as the default integer (``int64`` with ``enable_x64`` on, as JAX's)."""
    d = dtypes.default_int()
    return lax.convert_element_type(x, d) if aval_of(x).dtype != d else x


def _sort_keys(x):
    """The sort keys of ``x``: itself, or (real, imag) for complex."""
    if dtypes.is_complex(x.dtype):
        return [lax.real(x), lax.imag(x)]
    return [x]


def _is_traced(*xs):
    return any(isinstance(x, Tracer) for x in xs) or tracing.current_dynamic().level > 0


def _require_concrete(name, x, hint):
    if _is_traced(x):
        raise ConcretizationError(
            f"{name} returns an array whose shape depends on the values of its input, so it cannot run "
            f"inside jit, vmap or grad (got {aval_of(x).str_short()}). {hint}")


def _take_1d(a, idx):
    """``a[idx]`` for 1-d ``a`` and int32 ``idx`` of any shape (clamped, as gathers are)."""
    return lax.gather(a, lax.reshape(idx, aval_of(idx).shape + (1,)), (0,))


def _flatten(x):
    return lax.reshape(x, (x.size,))


# ----------------------------------------------------------------------------- sorting


def _sorted_with_iota(x, ax, descending):
    """(sorted values, int32 permutation) of ``x`` along ``ax``; stable in both directions."""
    n = x.shape[ax]
    src = lax.rev(x, (ax,)) if descending else x
    iota = lax.iota(dtypes.int32, x.shape, ax)
    keys = _sort_keys(src)
    outs = lax.sort(keys + ([src] if len(keys) > 1 else []) + [iota], dimension=ax, num_keys=len(keys))
    vals, perm = outs[-2], outs[-1]
    if descending:
        # Sorting the reversed array stably puts equal elements last-index-first; reversing the
        # result restores first-index-first among equals.
        vals = lax.rev(vals, (ax,))
        perm = lax.rev(lax.sub(_scalar(n - 1, dtypes.int32), perm), (ax,))
    return vals, perm


def _sort_axis(name, x, axis):
    if axis is None:
        return _flatten(x), 0
    if x.ndim == 0:
        raise ShapeError(f"{name} needs an array of rank >= 1 (or axis=None), got a 0-d array")
    return x, normalize_axis(axis, x.ndim)


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """Sorted copy of ``a`` along ``axis`` (array API ``sort``; ``numpy.sort``).

    Args:
      a: real, bool or complex array. axis: int, or None to sort the flattened array.
      stable: accepted for the array API; sorts are always stable. kind, order: NumPy's, ignored.
      descending: sort from largest to smallest (NaN first).

    Returns: an array of ``a``'s shape and dtype. NaN sorts last (ascending).

    Raises: ``ShapeError`` for a 0-d array with an int axis, or an axis out of range.
    """
    if order is not None:
        raise TypeError("sort: order= (structured arrays) is not supported; fnarray arrays hold numbers")
    x, ax = _sort_axis("sort", _prep("sort", a), axis)
    if x.shape[ax] <= 1:
        return x
    if not descending and not dtypes.is_complex(x.dtype):
        return lax.sort(x, dimension=ax)
    return _sorted_with_iota(x, ax, descending)[0]


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """Indices that sort ``a`` along ``axis`` (array API ``argsort``; ``numpy.argsort``).

    Args: as ``sort``. Equal elements keep their original order, also when descending.

    Returns: an ``int32`` array of ``a``'s shape (1-d for ``axis=None``); NumPy returns ``int64``.
    """
    if order is not None:
        raise TypeError("argsort: order= (structured arrays) is not supported; fnarray arrays hold numbers")
    x, ax = _sort_axis("argsort", _prep("argsort", a), axis)
    if x.shape[ax] == 0:
        return lax.convert_element_type(x, dtypes.default_int())
    return _index(_sorted_with_iota(x, ax, descending)[1])


def lexsort(keys, axis=-1):
    """Indirect stable sort by several keys, the last key primary (``numpy.lexsort``).

    Args: keys: a sequence of arrays of one shape, or an array whose first axis indexes the
    keys. axis: the axis to sort along.

    Returns: ``int32`` indices of the keys' shape.

    Raises: ``ShapeError`` for no keys or keys of different shapes; ``DTypeError`` for complex keys.
    """
    if isinstance(keys, (Array, np.ndarray)):
        k = asarray_internal(keys)
        if k.ndim == 0:
            raise ShapeError("lexsort needs a sequence of keys or an array of rank >= 1")
        keys = [lax.reshape(lax.slice_in_dim(k, i, i + 1, axis=0), k.shape[1:]) for i in range(k.shape[0])]
    else:
        keys = [_prep("lexsort", k) for k in keys]
    if not keys:
        raise ShapeError("lexsort needs at least one key")
    shape = keys[0].shape
    for k in keys:
        if k.shape != shape:
            raise ShapeError(f"lexsort: all keys need one shape, got {shape} and {k.shape}")
        if dtypes.is_complex(k.dtype):
            raise DTypeError("lexsort: complex keys are not supported; pass their real and imaginary parts as keys")
    if len(shape) == 0:
        raise ShapeError("lexsort: keys must have rank >= 1")
    ax = normalize_axis(axis, len(shape))
    iota = lax.iota(dtypes.int32, shape, ax)
    if shape[ax] == 0:
        return _index(iota)
    return _index(lax.sort(list(reversed(keys)) + [iota], dimension=ax, num_keys=len(keys))[-1])


def _check_kth(name, kth, n):
    ks = [kth] if isinstance(kth, (int, np.integer)) else list(np.asarray(kth).ravel())
    for k in ks:
        if not -n <= int(k) < n:
            raise ShapeError(f"{name}: kth={int(k)} is out of range for an axis of size {n}")


def partition(a, kth, axis=-1):
    """Partially sorted copy (``numpy.partition``): element ``kth`` is where a sort puts it, smaller
    elements before it and larger after. This implementation returns the fully sorted array, a
    valid partition for every ``kth``.

    Raises: ``ShapeError`` for ``kth`` out of range.
    """
    x, ax = _sort_axis("partition", _prep("partition", a), axis)
    _check_kth("partition", kth, x.shape[ax])
    return sort(x, axis=ax)


def argpartition(a, kth, axis=-1):
    """Indices that partition ``a`` (``numpy.argpartition``); returns the full ``argsort``, a valid
    answer for every ``kth``. Raises: ``ShapeError`` for ``kth`` out of range."""
    x, ax = _sort_axis("argpartition", _prep("argpartition", a), axis)
    _check_kth("argpartition", kth, x.shape[ax])
    return _i32(argsort(x, axis=ax))  # int32 with x64 on too, as jax.numpy.argpartition


def top_k(operand, k):
    """The ``k`` largest elements along the last axis and their indices (``jax.lax.top_k``).

    Args: operand: real array of rank >= 1, last axis of size ``n``; k: int in ``[0, n]``.

    Returns: ``(values, indices)`` of shape ``operand.shape[:-1] + (k,)``, values in descending
    order (NaN counts as largest), equal values by increasing index; indices ``int32``.

    Raises: ``ShapeError`` for 0-d input or ``k`` out of range; ``DTypeError`` for complex.
    """
    x = _prep("top_k", operand)
    if x.ndim == 0:
        raise ShapeError("top_k needs an array of rank >= 1, got a 0-d array")
    if dtypes.is_complex(x.dtype):
        raise DTypeError(f"top_k is not defined for complex arrays (got {x.dtype.name})")
    n, k = x.shape[-1], int(k)
    if not 0 <= k <= n:
        raise ShapeError(f"top_k: k={k} must lie in [0, {n}] for an array of shape {x.shape}")
    ax = x.ndim - 1
    if n == 0:
        return x, lax.convert_element_type(x, dtypes.int32)
    vals, perm = _sorted_with_iota(x, ax, descending=True)
    return lax.slice_in_dim(vals, 0, k, axis=ax), lax.slice_in_dim(perm, 0, k, axis=ax)


# ----------------------------------------------------------------------------- searching


def _lt_nan_last(x, y):
    """``x < y`` in the order where NaN is largest."""
    lt = lax.lt(x, y)
    if not dtypes.is_float(aval_of(x).dtype):
        return lt
    return lax.bitwise_or(lt, lax.bitwise_and(lax.ne(y, y), lax.eq(x, x)))


def _le_nan_last(x, y):
    """``x <= y`` in the order where NaN is largest."""
    le = lax.le(x, y)
    if not dtypes.is_float(aval_of(x).dtype):
        return le
    return lax.bitwise_or(le, lax.ne(y, y))


def searchsorted(a, v, side="left", sorter=None, *, method="scan"):
    """Insertion points of ``v`` in the sorted 1-d ``a`` (array API ``searchsorted``; NumPy's).

    A vectorized binary search (``ceil(log2(n + 1))`` steps of gathers and comparisons), so it runs
    under ``jit``. NaN is ordered last, as ``sort`` puts it.

    Args:
      a: 1-d real array sorted ascending (or made so by ``sorter``).
      v: values to insert, any shape. side: ``'left'`` (first suitable index) or ``'right'`` (last).
      sorter: optional ``int32`` indices that sort ``a``. method: accepted for ``jax.numpy``; ignored.

    Returns: ``int32`` indices in ``[0, len(a)]`` of ``v``'s shape.

    Raises: ``ShapeError`` if ``a`` is not 1-d; ``ValueError`` for a bad ``side``; ``DTypeError``
    for complex input.
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    check_arraylike("searchsorted", a, v)
    a0 = asarray_internal(a)
    if a0.ndim != 1:
        raise ShapeError(f"searchsorted needs a 1-d sorted array, got shape {a0.shape}")
    x, vals = [asarray_internal(t) for t in promote("searchsorted", a0, v)]
    if dtypes.is_complex(x.dtype):
        raise DTypeError("searchsorted is not defined for complex arrays")
    if sorter is not None:
        s = _prep("searchsorted", sorter)
        if s.shape != x.shape or not dtypes.is_int(s.dtype):
            raise ShapeError(f"searchsorted: sorter must be integer indices of shape {x.shape}, got "
                             f"{s.aval.str_short()}")
        x = _take_1d(x, _i32(s))
    n = x.shape[0]
    lo = lax.full(vals.shape, 0, dtypes.int32)
    if n == 0:
        return lo
    hi = lax.full(vals.shape, n, dtypes.int32)
    goes_right = _lt_nan_last if side == "left" else _le_nan_last
    for _ in range(n.bit_length()):
        mid = lax.div(lax.add(lo, hi), _scalar(2, dtypes.int32))
        right = goes_right(_take_1d(x, mid), vals)
        active = lax.lt(lo, hi)
        lo = lax.select(lax.bitwise_and(active, right), lax.add(mid, _scalar(1, dtypes.int32)), lo)
        hi = lax.select(lax.bitwise_and(active, lax.bitwise_not(right)), mid, hi)
    return lo


# ----------------------------------------------------------------------------- sets


_UNIQUE_HINT = ("Call it outside the transformation, or use fnarray.numpy.unique(x, size=N, fill_value=...) "
                "for a fixed-size result.")


def _differs(cur, prev, equal_nan):
    """``cur != prev`` elementwise, NaN equal to NaN where ``equal_nan`` (NaN != NaN otherwise)."""
    new = lax.ne(cur, prev)
    if equal_nan and dtypes.is_inexact(aval_of(cur).dtype):
        def nan(t):
            return lax.bitwise_or(lax.ne(lax.real(t), lax.real(t)), lax.ne(lax.imag(t), lax.imag(t))) \
                if dtypes.is_complex(aval_of(t).dtype) else lax.ne(t, t)
        new = lax.bitwise_and(new, lax.bitwise_not(lax.bitwise_and(nan(cur), nan(prev))))
    return new


def _runs(new):
    """(first-of-run flags, run ids) of sorted data whose neighbours differ where ``new`` (length n - 1)."""
    first = lax.concatenate([lax.full((1,), True, dtypes.bool_), new], 0)
    return first, lax.sub(lax.cumsum(_i32(first), 0), _scalar(1, dtypes.int32))


def _unique_parts(x, equal_nan):
    """Sort the flattened ``x``: (sorted values, permutation, first-of-run flags, run ids)."""
    flat = _flatten(x)
    n = flat.size
    vals, perm = _sorted_with_iota(flat, 0, descending=False)
    if n == 0:
        return vals, perm, lax.full((0,), False, dtypes.bool_), lax.full((0,), 0, dtypes.int32)
    prev, cur = lax.slice_in_dim(vals, 0, n - 1), lax.slice_in_dim(vals, 1, n)
    return (vals, perm) + _runs(_differs(cur, prev, equal_nan))  # NaN != NaN: each NaN its own run


def _unique_slices_parts(x, ax, equal_nan):
    """``_unique_parts`` for the slices of ``x`` along axis ``ax``: they are moved to the front as rows of shape
    ``(n, *rest)`` and sorted lexicographically (first element primary; complex by real, then imaginary part)."""
    order = (ax,) + tuple(i for i in range(x.ndim) if i != ax)
    rows = lax.transpose(x, order) if order != tuple(range(x.ndim)) else x
    n = rows.shape[0]
    flat = lax.reshape(rows, (n, rows.size // n if n else 0))
    iota = lax.iota(dtypes.int32, n)
    keys = [k for j in range(flat.shape[1])
            for k in _sort_keys(lax.reshape(lax.slice_in_dim(flat, j, j + 1, axis=1), (n,)))]
    perm = lax.sort(keys + [iota], dimension=0, num_keys=len(keys))[-1] if keys and n else iota
    vals = lax.gather(rows, lax.reshape(perm, (n, 1)), (0,))
    if n == 0:
        return vals, perm, lax.full((0,), False, dtypes.bool_), lax.full((0,), 0, dtypes.int32)
    sv = lax.gather(flat, lax.reshape(perm, (n, 1)), (0,))
    differs = _differs(lax.slice_in_dim(sv, 1, n), lax.slice_in_dim(sv, 0, n - 1), equal_nan)
    return (vals, perm) + _runs(lax.reduce_or(differs, (1,)))


def _scatter_runs(first, run, size, updates, fill):
    """``out[run[i]] = updates[i]`` for the first element of each run; other slots hold ``fill``."""
    d = aval_of(updates).dtype
    out = lax.broadcast_in_dim(fill, (size,), ()) if isinstance(fill, Array) else lax.full((size,), fill, d)
    target = lax.select(first, run, lax.full(run.shape, size, dtypes.int32))  # size: dropped
    return lax.scatter(out, lax.reshape(target, run.shape + (1,)), updates, (0,))


def _static_size(name, size, fill_value):
    """``size`` as an int, checked with ``fill_value`` (a scalar)."""
    size = int(size)
    if size < 0:
        raise ValueError(f"{name}: size must be >= 0, got {size}")
    if fill_value is not None and np.ndim(fill_value) != 0:
        raise ValueError(f"{name}: fill_value must be a scalar (or 0-d array), got shape {np.shape(fill_value)}")
    return size


def _unique_size(name, x, first, size, fill_value):
    if size is None:
        _require_concrete(name, x, _UNIQUE_HINT)
        return int(np.asarray(lax.reduce_sum(_i32(first), (0,)))) if first.shape[0] else 0
    size = _static_size(name, size, fill_value)
    if size and not first.shape[0] and fill_value is None:
        raise ValueError(f"{name}: an empty input with size={size} needs a fill_value= for the {size} "
                         "missing values (as jax.numpy.unique)")
    return size


def _fill_scalar(fill_value, d):
    if isinstance(fill_value, Array):
        return lax.convert_element_type(lax.reshape(fill_value, ()), d)
    return _scalar(fill_value, d)


def _unique_slices(x, ax, vals, first, run, size, fill_value):
    """The unique slices (rows ``vals`` sorted, the first of each run kept) padded to ``size`` and moved back to
    axis ``ax``; padding slices repeat the smallest slice, or hold ``fill_value``."""
    n = vals.shape[0]
    pos = _scatter_runs(first, run, size, lax.iota(dtypes.int32, n), 0)
    out = lax.gather(vals, lax.reshape(pos, (size, 1)), (0,)) if n else lax.full(
        (size,) + vals.shape[1:], _fill_scalar(0 if fill_value is None else fill_value, x.dtype), x.dtype)
    if fill_value is not None and n:
        valid = lax.lt(lax.iota(dtypes.int32, size), lax.reduce_sum(_i32(first), (0,)))
        fill = lax.broadcast_in_dim(_fill_scalar(fill_value, x.dtype), out.shape, ())
        out = lax.select(lax.broadcast_in_dim(valid, out.shape, (0,)), out, fill)
    order = tuple(range(1, ax + 1)) + (0,) + tuple(range(ax + 1, x.ndim))
    return lax.transpose(out, order) if ax else out


def _unique(name, ar, equal_nan, size, fill_value, want_index, want_inverse, want_counts, axis=None):
    x = _prep(name, ar)
    if axis is None:
        vals, perm, first, run = _unique_parts(x, equal_nan)
    else:
        if x.ndim == 0:
            raise ShapeError(f"{name}: axis={axis} needs an array of rank >= 1, got a 0-d array")
        ax = normalize_axis(axis, x.ndim)
        vals, perm, first, run = _unique_slices_parts(x, ax, equal_nan)
    n = vals.shape[0]
    size = _unique_size(name, x, first, size, fill_value)
    if axis is not None:
        out = [_unique_slices(x, ax, vals, first, run, size, fill_value)]
    else:
        if fill_value is None:
            fill = lax.reshape(lax.slice_in_dim(vals, 0, 1), ()) if n else _scalar(0, x.dtype)
        else:
            fill = _fill_scalar(fill_value, x.dtype)
        out = [_scatter_runs(first, run, size, vals, fill)]
    if want_index:  # padding: the smallest value's index, as jax.numpy
        out.append(_scatter_runs(first, run, size, perm, lax.reshape(lax.slice_in_dim(perm, 0, 1), ()) if n else 0))
    if want_inverse:
        inv = lax.scatter(lax.full((n,), 0, dtypes.int32), lax.reshape(perm, (n, 1)), run, (0,))
        out.append(lax.reshape(inv, x.shape) if axis is None else inv)
    if want_counts:
        counts = lax.scatter_add(lax.full((size,), 0, dtypes.int32), lax.reshape(run, (n, 1)),
                                 lax.full((n,), 1, dtypes.int32), (0,))
        out.append(counts)
    return out[:1] + [_index(o) for o in out[1:]]


def unique_values(x, /, *, size=None, fill_value=None):
    """The distinct values of ``x``, sorted (array API ``unique_values``; ``jax.numpy.unique_values``).

    Returns a 1-d array of ``x``'s dtype. Raises: ``ConcretizationError`` inside ``jit``/``vmap``/``grad``
    without ``size``.
    NaNs are distinct (``equal_nan=False``, array API); ``size``/``fill_value`` as ``unique``'s (JAX's).
    """
    return _unique("unique_values", x, False, size, fill_value, False, False, False)[0]


def unique_counts(x, /, *, size=None, fill_value=None):
    """Distinct values and how often each occurs (array API ``unique_counts``; ``jax.numpy.unique_counts``).

    Returns: ``UniqueCountsResult(values, counts)``, counts ``int32`` (0 in padding slots).
    NaNs are distinct (``equal_nan=False``, array API); ``size``/``fill_value`` as ``unique``'s (JAX's).
    """
    return UniqueCountsResult(*_unique("unique_counts", x, False, size, fill_value, False, False, True))


def unique_inverse(x, /, *, size=None, fill_value=None):
    """Distinct values and, for each element of ``x``, the index of its value (array API
    ``unique_inverse``; ``jax.numpy.unique_inverse``).

    Returns: ``UniqueInverseResult(values, inverse_indices)``; ``inverse_indices`` has ``x``'s
    shape, ``int32``, and ``values[inverse_indices] == x``.
    NaNs are distinct (``equal_nan=False``, array API); ``size``/``fill_value`` as ``unique``'s (JAX's).
    """
    return UniqueInverseResult(*_unique("unique_inverse", x, False, size, fill_value, False, True, False))


def unique_all(x, /, *, size=None, fill_value=None):
    """Distinct values, first-occurrence indices (into the flattened ``x``), inverse indices and
    counts (array API ``unique_all``; ``jax.numpy.unique_all``). Indices are ``int32``.

    Returns: ``UniqueAllResult(values, indices, inverse_indices, counts)``.
    NaNs are distinct (``equal_nan=False``, array API); ``size``/``fill_value`` as ``unique``'s (JAX's).
    """
    return UniqueAllResult(*_unique("unique_all", x, False, size, fill_value, True, True, True))


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True,
           size=None, fill_value=None, sorted=True):
    """Sorted distinct values of the flattened ``ar``, or its distinct slices along ``axis`` (``numpy.unique``;
    ``jax.numpy.unique``).

    Args:
      ar: array. return_index / return_inverse / return_counts: also return the first-occurrence
        indices, the inverse indices and the counts (all ``int32``).
      axis: None (the flattened ``ar``: values 1-d, inverse of ``ar``'s shape) or an int: the distinct slices
        ``ar[..., i, ...]`` along it, sorted lexicographically (values of shape ``ar.shape`` with ``n_unique`` at
        ``axis``; indices into that axis; inverse of shape ``(ar.shape[axis],)``).
      equal_nan: collapse all NaNs into one value (NumPy's default).
      size: a static result length; makes the function usable under ``jit``. Extra values are
        dropped; missing slots hold ``fill_value`` (default: the smallest value), the smallest value's index and
        count 0.
      sorted: accepted for NumPy 2.3/JAX; the result is always sorted (JAX ignores it too).

    Returns: the values, or a tuple ``(values, [indices], [inverse], [counts])``.

    Raises: ``ConcretizationError`` inside ``jit``/``vmap``/``grad`` without ``size``; ``ValueError`` for an
    empty input with ``size > 0`` and no ``fill_value`` (as JAX); ``ShapeError`` for ``axis`` out of range.
    """
    out = _unique("unique", ar, equal_nan, size, fill_value, return_index, return_inverse, return_counts, axis)
    return out[0] if len(out) == 1 else tuple(out)


def _nonzero_flat(name, x, size, hint):
    """(flat indices of the non-zero elements, padded to ``size``, and a validity mask)."""
    mask = _flatten(x if dtypes.is_bool(x.dtype) else lax.ne(x, lax.zeros_like(x)))
    n = mask.shape[0]
    if size is None:
        _require_concrete(name, x, hint)
        size = int(np.asarray(lax.reduce_sum(_i32(mask), (0,)))) if n else 0
    size = _static_size(name, size, None)
    if n == 0:
        return lax.full((size,), 0, dtypes.int32), lax.full((size,), False, dtypes.bool_)
    pos = lax.sub(lax.cumsum(_i32(mask), 0), _scalar(1, dtypes.int32))
    count = lax.reshape(lax.slice_in_dim(pos, n - 1, n), ())
    flat = _scatter_runs(mask, pos, size, lax.iota(dtypes.int32, n), 0)
    valid = lax.le(lax.iota(dtypes.int32, size), count)
    return flat, valid


_NONZERO_HINT = "Call it outside the transformation, or pass a static size= (and fill_value=) as in jax.numpy."


def _unravel(flat, valid, shape, fill_value):
    fills = fill_value if isinstance(fill_value, (tuple, list)) else (fill_value,) * len(shape)
    if len(fills) != len(shape):
        raise ValueError(f"nonzero: fill_value has {len(fills)} entries for an array of rank {len(shape)}")
    out = []
    stride = 1
    for n, f in reversed(list(zip(shape, fills, strict=True))):
        idx = lax.div(flat, _scalar(stride, dtypes.int32))
        idx = lax.rem(idx, _scalar(n, dtypes.int32)) if n else idx
        fill = lax.full(flat.shape, 0 if f is None else int(f), dtypes.int32)
        out.append(lax.select(valid, idx, fill))
        stride *= n
    return tuple(_index(o) for o in reversed(out))


def nonzero(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements, one ``int32`` array per axis (array API ``nonzero``).

    Args:
      a: array of rank >= 1.
      size, fill_value: a static number of results (extra dropped, missing filled with
        ``fill_value``, default 0; a tuple gives one fill per axis), for use under ``jit``.

    Returns: a tuple of ``a.ndim`` 1-d arrays, in row-major order.

    Raises: ``ShapeError`` for 0-d input; ``ConcretizationError`` inside ``jit``/``vmap``/``grad``
    without ``size``.
    """
    x = _prep("nonzero", a)
    if x.ndim == 0:
        raise ShapeError("nonzero of a 0-d array is not allowed (array API, NumPy 2); use "
                         "nonzero(atleast_1d(a)) instead")
    flat, valid = _nonzero_flat("nonzero", x, size, _NONZERO_HINT)
    return _unravel(flat, valid, x.shape, fill_value)


def flatnonzero(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements of the flattened ``a`` (``numpy.flatnonzero``); ``int32``.

    ``size``/``fill_value`` as in ``nonzero``.
    """
    x = _prep("flatnonzero", a)
    return nonzero(_flatten(x), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size=None, fill_value=None):
    """Indices of the non-zero elements as rows (``numpy.argwhere``): shape ``(count, a.ndim)``,
    ``int32``. ``size``/``fill_value`` as in ``nonzero``."""
    x = _prep("argwhere", a)
    if x.ndim == 0:
        rows = nonzero(lax.reshape(x, (1,)), size=size)[0]
        return lax.full((rows.shape[0], 0), 0, dtypes.default_int())
    cols = nonzero(x, size=size, fill_value=fill_value)
    return lax.concatenate([lax.reshape(c, c.shape + (1,)) for c in cols], 1)


def bincount(x, weights=None, minlength=0, *, length=None):
    """Counts of each non-negative integer in ``x`` (``numpy.bincount``; ``jax.numpy.bincount``).

    Args:
      x: 1-d array of non-negative integers (or bool).
      weights: optional array of ``x``'s shape; sums these instead of counting.
      minlength: minimum result length (eager).
      length: static result length (required under ``jit``; then ``minlength`` is ignored and
        values outside ``[0, length)`` are dropped).

    Returns: a 1-d array: ``int32`` counts, or sums in ``weights``' dtype (bool weights count as
    ``int32``).

    Raises: ``ShapeError`` for non-1-d input; ``DTypeError`` for non-integer ``x``; ``ValueError``
    for negative values (eager) or negative ``minlength``; ``ConcretizationError`` under ``jit``
    without ``length``.
    """
    v = _prep("bincount", x)
    if not (dtypes.is_int(v.dtype) or dtypes.is_bool(v.dtype)):
        raise DTypeError(f"bincount needs integer input, got {v.dtype.name}")
    if v.ndim != 1:
        raise ShapeError(f"bincount needs a 1-d array, got shape {v.shape}")
    minlength = int(minlength)
    if minlength < 0:
        raise ValueError(f"bincount: minlength must be >= 0, got {minlength}")
    if length is None:
        _require_concrete("bincount", v, "Pass a static length= to use it inside a transformation.")
        host = np.asarray(v).astype(np.int64)
        if host.size and host.min() < 0:
            raise ValueError(f"bincount: x holds the negative value {host.min()}; values must be >= 0")
        length = max(int(host.max()) + 1 if host.size else 0, minlength)
    length = int(length)
    if length < 0:
        raise ValueError(f"bincount: length must be >= 0, got {length}")
    idx = lax.reshape(_i32(v), v.shape + (1,))
    if weights is None:
        upd = lax.full(v.shape, 1, dtypes.default_int())
    else:
        upd = _prep("bincount", weights)
        if upd.shape != v.shape:
            raise ShapeError(f"bincount: weights of shape {upd.shape} must match x of shape {v.shape}")
        if dtypes.is_bool(upd.dtype):
            upd = _index(upd)
        if upd.weak_type:
            upd = lax.convert_element_type(upd, upd.dtype)
    return lax.scatter_add(lax.full((length,), 0, upd.dtype), idx, upd, (0,))
