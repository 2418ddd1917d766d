"""Functions that edit an array's elements or layout by index: ``delete``, ``insert``, ``compress``,
``extract``, ``put`` and ``fill_diagonal``, as ``jax.numpy`` spells them.

NumPy's in-place ``put``/``fill_diagonal`` need ``inplace=False`` here, as in ``jax.numpy`` (arrays are
immutable). ``delete`` and ``insert`` take static positions: NumPy itself lays out the result (on an array of
element numbers), so every form NumPy accepts (ints, slices, sequences, masks, negative positions) means the
same, and fnarray gathers the elements in one ``take``. Sources: the NumPy reference of each function and
``jax.numpy``'s documented departures; the tests compare with NumPy and JAX.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core.array import Array
from fnarray.core.errors import AxisError, ConcretizationError, ShapeError
from fnarray.core.tracing import Tracer

__all__ = ["delete", "insert", "compress", "extract", "put", "fill_diagonal"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _static_positions(obj, what):
    """``obj`` as a NumPy value (int, slice or array): positions must be known when tracing."""
    if isinstance(obj, slice):
        return obj
    if isinstance(obj, Tracer):
        raise ConcretizationError(f"{what}: the positions must be static (a Python int, slice, list or a concrete "
                                  f"array), got a traced {obj.aval.str_short()}: the result's shape depends on them")
    return np.asarray(obj)


def _flat_or_axis(fnp, arr, axis, what):
    arr = fnp.asarray(arr)
    if axis is None:
        return fnp.ravel(arr), 0
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{what}: axis must be an int or None, got {axis!r}") from None
    if not -arr.ndim <= axis < arr.ndim:
        raise AxisError(f"{what}: axis {axis} is out of bounds for an array of {arr.ndim} axes")
    return arr, axis % arr.ndim


def delete(arr, obj, axis=None, *, assume_unique_indices=False):
    """``arr`` without the entries at ``obj`` along ``axis`` (``numpy.delete``, ``jax.numpy.delete``).

    Args:
      arr: any array; flattened first when ``axis`` is None.
      obj: static positions: an int, a slice, a sequence or array of ints (repeats count once, negative ones
        from the end) or a boolean mask of the axis' length.
      axis: the axis to delete along, or None.
      assume_unique_indices: accepted for ``jax.numpy``; the positions must be static either way.

    Returns:
      An array of ``arr``'s dtype, shorter along ``axis``.

    Raises:
      ConcretizationError: traced positions. IndexError: a position out of bounds (as NumPy).
      AxisError: ``axis`` out of range.
    """
    fnp = _np()
    a, ax = _flat_or_axis(fnp, arr, axis, "delete")
    pos = _static_positions(obj, "delete")
    n = a.shape[ax]
    if not isinstance(pos, slice) and pos.dtype.kind not in "biu" and pos.size:
        raise IndexError(f"delete: positions must be integers or booleans, got {pos.dtype}")
    try:
        keep = np.delete(np.arange(n, dtype=np.int32), pos if isinstance(pos, slice) else pos.astype(
            bool if pos.dtype == np.bool_ else np.int64))
    except IndexError:
        raise IndexError(f"delete: a position in {obj!r} is out of bounds for axis {ax} of length {n}") from None
    except ValueError as e:
        raise ValueError(f"delete: {e} (axis {ax} of length {n})") from None
    return fnp.take(a, fnp.asarray(keep.astype(np.int32)), axis=ax)


def insert(arr, obj, values, axis=None):
    """``arr`` with ``values`` inserted before the positions ``obj`` along ``axis`` (``numpy.insert``).

    Args:
      arr: any array; flattened first when ``axis`` is None.
      obj: static positions (an int, a slice or a sequence of ints, negative ones from the end, as NumPy).
      values: an array broadcast as ``numpy.insert`` does and cast to ``arr``'s dtype; may be traced.
      axis: the axis to insert along, or None.

    Returns:
      An array of ``arr``'s dtype, longer along ``axis``.

    Raises:
      ConcretizationError: traced positions. IndexError: a position out of bounds. ValueError: values that do
      not broadcast (NumPy's messages).
    """
    fnp = _np()
    a, ax = _flat_or_axis(fnp, arr, axis, "insert")
    pos = _static_positions(obj, "insert")
    v = fnp.asarray(values).astype(a.dtype)
    # NumPy lays out the result on element numbers: k + 1 for a's k-th element, -(j + 1) for values' j-th
    mine = np.arange(1, a.size + 1, dtype=np.int64).reshape(a.shape)
    theirs = -np.arange(1, v.size + 1, dtype=np.int64).reshape(v.shape)
    layout = np.insert(mine, pos, theirs, axis=ax)
    source = np.where(layout > 0, layout - 1, a.size - layout - 1).astype(np.int32)
    both = fnp.concatenate([fnp.ravel(a), fnp.ravel(v)])
    return fnp.reshape(fnp.take(both, fnp.asarray(source.ravel())), layout.shape)


def compress(condition, a, axis=None, *, size=None, fill_value=0, out=None):
    """The slices of ``a`` along ``axis`` where the 1-d ``condition`` is True (``numpy.compress``).

    Args:
      condition: a 1-d array taken as booleans; shorter than the axis: the rest is False; entries past the axis
        must be False.
      a: any array; flattened when ``axis`` is None.
      axis: the axis, or None.
      size: a static length for the result along ``axis`` (``jax.numpy``): the selected slices first, then
        slices of ``fill_value``; needed when ``condition`` is traced.
      fill_value: the value of the padding slices.
      out: not supported (must be None).

    Returns:
      An array of ``a``'s dtype.

    Raises:
      ShapeError: ``condition`` is not 1-d. ValueError: a True entry past the axis, or ``size`` out of
      ``[0, a.shape[axis]]``. ConcretizationError: a traced ``condition`` without ``size``.
      NotImplementedError: ``out``.
    """
    fnp = _np()
    if out is not None:
        raise NotImplementedError("compress: out= is not supported (arrays are immutable)")
    arr, ax = _flat_or_axis(fnp, a, axis, "compress")
    # a NumPy or Python condition stays static, so it selects under jit and vmap too
    static = None if isinstance(condition, Array) else np.asarray(condition).astype(bool)
    cond = fnp.asarray(condition).astype(bool) if static is None else static
    if cond.ndim != 1:
        raise ShapeError(f"compress: condition must be 1-d, got shape {tuple(cond.shape)}")
    n = arr.shape[ax]
    cond, extra = cond[:n], cond[n:]
    if extra.shape[0] and not isinstance(extra, Tracer) and bool(np.any(np.asarray(extra))):
        raise ValueError(f"compress: condition has True entries past the axis' length {n}")
    arr = fnp.moveaxis(arr, ax, 0)[:cond.shape[0]]
    if size is None:
        if isinstance(cond, Tracer):
            raise ConcretizationError("compress: a traced condition needs size= (the result's length depends on "
                                      "how many entries are True)")
        picked = fnp.take(arr, fnp.asarray(np.flatnonzero(np.asarray(cond)).astype(np.int32)), axis=0)
    else:
        size = operator.index(size)
        if not 0 <= size <= arr.shape[0]:
            raise ValueError(f"compress: size must be in [0, {arr.shape[0]}], got {size}")
        cond = fnp.asarray(cond)
        filled = fnp.where(fnp.reshape(cond, (-1,) + (1,) * (arr.ndim - 1)), arr,
                           fnp.asarray(fill_value).astype(arr.dtype))
        picked = filled[fnp.argsort(cond, stable=True, descending=True)[:size]]
    return fnp.moveaxis(picked, 0, ax)


def extract(condition, arr, *, size=None, fill_value=0):
    """The elements of ``arr`` where ``condition`` is True, flattened (``numpy.extract``, ``jax.numpy.extract``).

    Args:
      condition: booleans, flattened (a NumPy or Python one stays static, so it works under ``jit``).
      arr: any array, flattened; ``condition``'s shape need not match (extra entries must be False).
      size, fill_value: as ``compress`` (``jax.numpy``): a static result length, padded with ``fill_value``.

    Returns:
      A 1-d array of ``arr``'s dtype.

    Raises:
      As ``compress``.
    """
    fnp = _np()
    flat = fnp.ravel(condition) if isinstance(condition, Array) else np.ravel(condition)
    return compress(flat, fnp.ravel(fnp.asarray(arr)), size=size, fill_value=fill_value)


def put(a, ind, v, mode=None, *, inplace=True):
    """A copy of ``a`` with the flat positions ``ind`` set to ``v`` (``numpy.put``, ``jax.numpy.put``).

    Args:
      a: any array.
      ind: integer flat positions (any shape, may be traced).
      v: values, flattened and repeated to ``ind``'s length (cast to ``a``'s dtype).
      mode: None (``jax.numpy``'s default: a negative position counts from the end, then positions are
        clamped into ``[0, a.size - 1]``), ``"clip"`` (clamped as given, a negative one to 0) or ``"wrap"``
        (taken modulo ``a.size``). NumPy's default ``"raise"`` is not supported.
      inplace: must be False, as ``jax.numpy`` (NumPy's default True would change ``a`` in place).

    Returns:
      An array of ``a``'s shape and dtype.

    Raises:
      ValueError: ``inplace=True`` or an unknown ``mode``. NotImplementedError: ``mode="raise"``.
    """
    fnp = _np()
    if inplace:
        raise ValueError("put: arrays are immutable; pass inplace=False to get the updated array (jax.numpy's rule)")
    a, ind, v = fnp.asarray(a), fnp.ravel(fnp.asarray(ind)), fnp.ravel(fnp.asarray(v))
    if a.size == 0 or ind.shape[0] == 0 or v.shape[0] == 0:
        return a
    if not fnp.issubdtype(ind.dtype, fnp.integer):
        raise IndexError(f"put: positions must be integers, got {ind.dtype}")
    reps = -(-ind.shape[0] // v.shape[0])
    v = fnp.tile(v, reps)[:ind.shape[0]] if reps > 1 or v.shape[0] != ind.shape[0] else v
    if mode is None:
        ind = fnp.clip(fnp.where(ind < 0, ind + a.size, ind), 0, a.size - 1)
    elif mode == "clip":
        ind = fnp.clip(ind, 0, a.size - 1)
    elif mode == "wrap":
        ind = ind % a.size
    elif mode == "raise":
        raise NotImplementedError("put: mode='raise' cannot check traced positions (as jax.numpy); use None, "
                                  "'clip' or 'wrap'")
    else:
        raise ValueError(f"put: mode must be None, 'clip' or 'wrap', got {mode!r}")
    return fnp.reshape(fnp.ravel(a).at[ind].set(v), a.shape)


def fill_diagonal(a, val, wrap=False, *, inplace=True):
    """A copy of ``a`` with its main diagonal set to ``val`` (``numpy.fill_diagonal``, ``jax.numpy``).

    Args:
      a: an array of rank >= 2; of rank > 2, all axes of one length.
      val: a scalar, or values repeated along the diagonal (flattened).
      wrap: must be False (NumPy's wrapping of tall matrices is not supported, as ``jax.numpy``).
      inplace: must be False, as ``jax.numpy``.

    Returns:
      An array of ``a``'s shape and dtype.

    Raises:
      ValueError: ``inplace=True``, rank < 2, or unequal axes of rank > 2. NotImplementedError: ``wrap=True``.
    """
    fnp = _np()
    if inplace:
        raise ValueError("fill_diagonal: arrays are immutable; pass inplace=False to get the updated array "
                         "(jax.numpy's rule)")
    if wrap:
        raise NotImplementedError("fill_diagonal: wrap=True is not supported (as jax.numpy)")
    a, val = fnp.asarray(a), fnp.asarray(val)
    if a.ndim < 2:
        raise ValueError(f"fill_diagonal: a must have rank >= 2, got shape {tuple(a.shape)}")
    if a.ndim > 2 and len(set(a.shape)) != 1:
        raise ValueError(f"fill_diagonal: all axes must have one length for rank > 2, got {tuple(a.shape)}")
    n = min(a.shape)
    if n == 0:
        return a
    if val.ndim:
        val = fnp.ravel(val)
        if val.shape[0] == 0:
            return a
        val = fnp.tile(val, -(-n // val.shape[0]))[:n]
    i = fnp.arange(n)
    return a.at[(i,) * a.ndim].set(val)
