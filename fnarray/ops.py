"""Segment reductions (mirrors ``jax.ops``): ``segment_sum``, ``segment_prod``, ``segment_max``, ``segment_min``.

``out[s] = reduce(data[i] for i with segment_ids[i] == s)`` over the leading axis of ``data``.
Each is one scatter into an array holding the reduction's identity (``.at[ids].add`` and friends),
so the gradients, ``vmap`` and every backend come from the scatter primitives. As in JAX, ids
outside ``[0, num_segments)``, negative ones included, are dropped, and an empty segment holds the
identity: 0 for a sum, 1 for a product, ``-inf``/``+inf`` (the dtype's lowest/highest integer) for
a max/min. Graph networks use them to aggregate messages per receiving node.
"""

from __future__ import annotations

import numpy as np

__all__ = ["segment_sum", "segment_prod", "segment_max", "segment_min"]


def _prepare(data, segment_ids, num_segments, what):
    from fnarray import numpy as fnp
    from fnarray.core.errors import DTypeError, ShapeError
    data = fnp.asarray(data)
    ids = fnp.asarray(segment_ids)
    if not fnp.issubdtype(ids.dtype, fnp.integer):
        raise DTypeError(f"{what}: segment_ids must be integers, got dtype {ids.dtype}")
    if data.ndim == 0 or ids.shape != data.shape[:ids.ndim]:
        raise ShapeError(f"{what}: segment_ids of shape {tuple(ids.shape)} must match the leading axes of data, "
                         f"got data of shape {tuple(data.shape)}")
    if num_segments is None:
        try:
            host = np.asarray(ids)
        except Exception:
            raise TypeError(f"{what}: num_segments=None needs concrete segment_ids to count the segments; under "
                            "jit or vmap pass num_segments= (a Python int)") from None
        num_segments = int(host.max()) + 1 if host.size else 0
    if not isinstance(num_segments, (int, np.integer)) or isinstance(num_segments, bool) or num_segments < 0:
        raise TypeError(f"{what}: num_segments must be a non-negative Python int, got {num_segments!r}")
    num_segments = int(num_segments)
    # negative ids are out of range (JAX does not count them from the end): send them past the end
    ids = fnp.where(ids < 0, num_segments, ids)
    if ids.ndim > 1:
        lead = int(np.prod(ids.shape))
        data = fnp.reshape(data, (lead,) + tuple(data.shape[ids.ndim:]))
        ids = fnp.reshape(ids, (lead,))
    return fnp, data, ids, num_segments


def _identity(dtype, op):
    from fnarray import numpy as fnp
    if op == "add":
        return 0
    if op == "multiply":
        return 1
    if dtype == np.bool_:
        return op == "min"
    if fnp.issubdtype(dtype, fnp.inexact):
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


def _segment(op, what, data, segment_ids, num_segments, indices_are_sorted, unique_indices):
    fnp, data, ids, n = _prepare(data, segment_ids, num_segments, what)
    out = fnp.full((n,) + tuple(data.shape[1:]), _identity(data.dtype, op), dtype=data.dtype)
    at = out.at[ids]
    kw = {"indices_are_sorted": indices_are_sorted, "unique_indices": unique_indices}
    return {"add": at.add, "multiply": at.multiply, "max": at.max, "min": at.min}[op](data, **kw)


def _doc(fn, reduce, empty):
    fn.__doc__ = f"""The {reduce} of ``data``'s rows per segment (``jax.ops.{fn.__name__}``).

    Args:
      data: an array ``(N, ...)`` (or ``segment_ids.shape + rest``).
      segment_ids: integer array ``(N,)`` (the leading axes of ``data``): each row's segment; ids
        outside ``[0, num_segments)`` (negative ones too) are dropped.
      num_segments: the number of segments (a Python int); ``None`` counts ``max(segment_ids) + 1``,
        which needs concrete ids (not under ``jit``).
      indices_are_sorted, unique_indices: hints, accepted for JAX's signature.
      bucket_size, mode: accepted for JAX's signature; only the default dropping of out-of-range ids
        exists (``mode`` must be ``None``).
    Returns:
      ``(num_segments, ...)`` of ``data``'s dtype; an empty segment holds {empty}.
    Raises:
      DTypeError: non-integer ids. ShapeError: ids that do not match ``data``'s leading axes.
      TypeError: ``num_segments=None`` with traced ids, or a ``num_segments`` that is not an int.
      ValueError: a ``mode`` other than ``None``.
    """
    return fn


def _no_mode(mode, what):
    if mode is not None:
        raise ValueError(f"{what}: mode={mode!r} is not supported; out-of-range segment ids are dropped (mode=None)")


def segment_sum(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    _no_mode(mode, "segment_sum")
    return _segment("add", "segment_sum", data, segment_ids, num_segments, indices_are_sorted, unique_indices)


def segment_prod(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                 bucket_size=None, mode=None):
    _no_mode(mode, "segment_prod")
    return _segment("multiply", "segment_prod", data, segment_ids, num_segments, indices_are_sorted, unique_indices)


def segment_max(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    _no_mode(mode, "segment_max")
    return _segment("max", "segment_max", data, segment_ids, num_segments, indices_are_sorted, unique_indices)


def segment_min(data, segment_ids, num_segments=None, indices_are_sorted=False, unique_indices=False,
                bucket_size=None, mode=None):
    _no_mode(mode, "segment_min")
    return _segment("min", "segment_min", data, segment_ids, num_segments, indices_are_sorted, unique_indices)


_doc(segment_sum, "sum", "0")
_doc(segment_prod, "product", "1")
_doc(segment_max, "maximum", "``-inf`` (the lowest integer, ``False`` for bool)")
_doc(segment_min, "minimum", "``+inf`` (the highest integer, ``True`` for bool)")
