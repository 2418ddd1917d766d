"""``jax.lax`` conveniences that JAX programs call, as composites of ``fnarray.core.lax`` and the namespace.

``dynamic_slice_in_dim`` and its siblings, ``index_in_dim``, ``clamp``, ``square``, ``reciprocal``, ``dot``,
``batch_matmul``, ``full_like``, ``broadcast``, ``broadcasted_iota``, ``collapse``, ``sort_key_val``,
``top_k`` and the ``Precision`` enum (accepted wherever JAX takes ``precision=``; every backend computes
float32 products in float32, so it changes nothing). Each follows the ``jax.lax`` function of the same
name (jax.readthedocs.io, ``jax.lax``); it sits above ``core/`` because ``top_k`` uses the namespace.
"""

from __future__ import annotations

import enum

import numpy as np

from fnarray.core import dtypes
from fnarray.core import lax as _lax
from fnarray.core.avals import get_aval

__all__ = ["Precision", "dot", "batch_matmul", "clamp", "square", "reciprocal", "full_like", "broadcast",
           "broadcasted_iota", "collapse", "sort_key_val", "top_k", "dynamic_slice_in_dim", "dynamic_index_in_dim",
           "dynamic_update_slice_in_dim", "dynamic_update_index_in_dim", "index_in_dim"]


class Precision(enum.Enum):
    """``jax.lax.Precision``: ``DEFAULT``, ``HIGH``, ``HIGHEST`` (accepted, and without effect here)."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


def _axis(axis, ndim, what):
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{what}: axis {axis} is out of range for an operand of rank {ndim}")
    return axis % ndim if ndim else 0


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    """``jax.lax.dot``: vector-vector, matrix-vector or matrix-matrix product (the last axis of ``lhs``
    against the first of ``rhs``; both rank 1 or 2).

    Args: ``lhs``, ``rhs`` arrays of equal dtype; ``precision`` ignored; ``preferred_element_type``
      as ``dot_general``'s.
    Returns: the product, of shape ``lhs.shape[:-1] + rhs.shape[1:]``.
    Raises: TypeError for operands of rank other than 1 or 2 (as JAX).
    """
    a, b = get_aval(lhs), get_aval(rhs)
    if a.ndim not in (1, 2) or b.ndim not in (1, 2):
        raise TypeError(f"lax.dot takes operands of rank 1 or 2, got shapes {a.shape} and {b.shape}; use "
                        "lax.dot_general or fnarray.numpy.matmul for batches")
    return _lax.dot_general(lhs, rhs, (((a.ndim - 1,), (0,)), ((), ())),
                            preferred_element_type=preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    """``jax.lax.batch_matmul``: ``(..., m, k) @ (..., k, n)`` with equal batch axes (no broadcasting)."""
    a, b = get_aval(lhs), get_aval(rhs)
    if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"batch_matmul needs operands of equal rank >= 2 with equal batch axes, got shapes "
                         f"{a.shape} and {b.shape}")
    batch = tuple(range(a.ndim - 2))
    return _lax.dot_general(lhs, rhs, (((a.ndim - 1,), (a.ndim - 2,)), (batch, batch)))


def clamp(min, x, max):  # noqa: A002 (JAX's argument names)
    """``jax.lax.clamp``: ``x`` limited to ``[min, max]`` (``min``/``max`` scalars or of ``x``'s shape).

    NaN in ``x`` stays NaN (max/min propagate NaN, docs/design.md). Derivatives as JAX's ``clamp_p``: ``x``'s
    where ``min < x < max``, ``min``'s where ``x < min < max``, ``max``'s where ``max < x``; at the bounds none
    (``fnp.clip``, as ``jnp.clip``, splits a tie in halves instead).
    """
    from fnarray import numpy as fnp
    from fnarray.numpy._util import is_weakly_typed
    weak = all(is_weakly_typed(v) for v in (min, x, max))   # Python scalars throughout: weak, as JAX's
    x = fnp.asarray(x)
    lo = fnp.asarray(min, dtype=x.dtype)
    hi = fnp.asarray(max, dtype=x.dtype)

    def only_where(cond, v):   # v's value everywhere, its tangent only where cond
        return fnp.where(cond, v, _lax.stop_gradient(v))
    x_in = only_where((x > lo) & (x < hi), x)
    lo_in = only_where((lo > x) & (lo < hi), lo)
    hi_in = only_where(hi < x, hi)
    out = fnp.minimum(fnp.maximum(x_in, lo_in), hi_in)
    if weak:
        out = _lax.convert_element_type(out, out.dtype, weak_type=True)
    return out


def square(x):
    """``jax.lax.square``: ``x * x``."""
    return _lax.integer_pow(x, 2)


def reciprocal(x):
    """``jax.lax.reciprocal``: ``1 / x`` (``integer_pow(x, -1)``)."""
    return _lax.integer_pow(x, -1)


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """``jax.lax.full_like``: ``fill_value`` in ``x``'s shape (or ``shape``) and dtype (or ``dtype``); outside
    ``jit``, on ``x``'s device, committed, where ``x`` is committed there and not weakly typed (or ``dtype`` is
    given), as JAX's (``placement.like_device``)."""
    from fnarray.devices.placement import device_put, like_device
    a = get_aval(x)
    out = _lax.full(a.shape if shape is None else tuple(shape), fill_value, a.dtype if dtype is None else dtype)
    dev = like_device(x, dtype is None and a.weak_type)
    return out if dev is None else device_put(out, dev)


def broadcast(operand, sizes, sharding=None):
    """``jax.lax.broadcast``: new leading axes of ``sizes``: shape ``tuple(sizes) + operand.shape``."""
    a = get_aval(operand)
    sizes = tuple(int(s) for s in sizes)
    return _lax.broadcast_in_dim(operand, sizes + tuple(a.shape), tuple(range(len(sizes), len(sizes) + a.ndim)))


def broadcasted_iota(dtype, shape, dimension, sharding=None):
    """``jax.lax.broadcasted_iota``: ``0, 1, ...`` along ``dimension`` of ``shape``, broadcast over the rest."""
    shape = tuple(int(s) for s in shape)
    return _lax.iota(dtypes.canonicalize(dtype), shape, _axis(dimension, len(shape), "broadcasted_iota"))


def collapse(operand, start_dimension, stop_dimension=None):
    """``jax.lax.collapse``: axes ``start_dimension .. stop_dimension - 1`` merged into one."""
    shape = tuple(get_aval(operand).shape)
    stop = len(shape) if stop_dimension is None else stop_dimension
    start = start_dimension % len(shape) if shape else 0
    stop = stop % (len(shape) + 1) if stop >= 0 else stop + len(shape)
    merged = int(np.prod(shape[start:stop], dtype=np.int64))
    return _lax.reshape(operand, shape[:start] + (merged,) + shape[stop:])


def sort_key_val(keys, values, dimension=-1, is_stable=True):
    """``jax.lax.sort_key_val``: ``keys`` sorted along ``dimension`` and ``values`` permuted with them."""
    return _lax.sort((keys, values), dimension=dimension, is_stable=is_stable, num_keys=1)


def top_k(operand, k, *, axis=-1):
    """``jax.lax.top_k``: the ``k`` largest entries along ``axis`` (default the last), largest first, and their
    indices.

    Ties keep the lower index first; NaN counts as the largest value (NaN sorts last, docs/design.md).
    Returns ``(values, indices)`` of ``operand``'s shape with ``k`` along ``axis``, indices ``int32``.
    Raises ValueError for ``k`` outside ``[0, operand.shape[axis]]`` or an axis out of range.
    """
    from fnarray import numpy as fnp
    x = fnp.asarray(operand)
    k = int(k)
    axis = _axis(axis, x.ndim, "top_k")
    if x.ndim == 0 or not 0 <= k <= x.shape[axis]:
        raise ValueError(f"top_k: k={k} must lie in [0, {x.shape[axis] if x.ndim else 0}] for shape "
                         f"{tuple(x.shape)} along axis {axis}")
    idx = _lax.slice_in_dim(fnp.argsort(x, axis=axis, stable=True, descending=True), 0, k, axis=axis).astype(fnp.int32)
    return fnp.take_along_axis(x, idx, axis=axis), idx


def _starts(ndim, axis, index):
    return [index if d == axis else 0 for d in range(ndim)]


def dynamic_slice_in_dim(operand, start_index, slice_size, axis=0):
    """``jax.lax.dynamic_slice_in_dim``: ``slice_size`` entries from a (traced) ``start_index`` along ``axis``.

    The start is clamped so the slice fits, as ``dynamic_slice``.
    """
    a = get_aval(operand)
    axis = _axis(axis, a.ndim, "dynamic_slice_in_dim")
    sizes = tuple(int(slice_size) if d == axis else a.shape[d] for d in range(a.ndim))
    return _lax.dynamic_slice(operand, _starts(a.ndim, axis, start_index), sizes)


def dynamic_index_in_dim(operand, index, axis=0, keepdims=True):
    """``jax.lax.dynamic_index_in_dim``: entry ``index`` (traced, clamped) along ``axis``; the axis kept
    (length 1) unless ``keepdims=False``."""
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    if keepdims:
        return out
    a = get_aval(out)
    axis = _axis(axis, a.ndim, "dynamic_index_in_dim")
    return _lax.reshape(out, a.shape[:axis] + a.shape[axis + 1:])


def dynamic_update_slice_in_dim(operand, update, start_index, axis):
    """``jax.lax.dynamic_update_slice_in_dim``: ``update`` written from ``start_index`` along ``axis``."""
    a = get_aval(operand)
    axis = _axis(axis, a.ndim, "dynamic_update_slice_in_dim")
    return _lax.dynamic_update_slice(operand, update, _starts(a.ndim, axis, start_index))


def dynamic_update_index_in_dim(operand, update, index, axis):
    """``jax.lax.dynamic_update_index_in_dim``: ``update`` (with or without the ``axis``) written at ``index``."""
    a, u = get_aval(operand), get_aval(update)
    axis = _axis(axis, a.ndim, "dynamic_update_index_in_dim")
    if u.ndim == a.ndim - 1:
        update = _lax.reshape(update, u.shape[:axis] + (1,) + u.shape[axis:])
    return dynamic_update_slice_in_dim(operand, update, index, axis)


def index_in_dim(operand, index, axis=0, keepdims=True):
    """``jax.lax.index_in_dim``: entry ``index`` (a static int; negative counts from the end) along ``axis``."""
    a = get_aval(operand)
    axis = _axis(axis, a.ndim, "index_in_dim")
    n = a.shape[axis]
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"index_in_dim: index {i} is out of bounds for axis {axis} of size {n}")
    i %= n
    out = _lax.slice_in_dim(operand, i, i + 1, 1, axis)
    return out if keepdims else _lax.reshape(out, a.shape[:axis] + a.shape[axis + 1:])
