"""More NumPy functions that ``jax.numpy`` has, each a short composite of the namespace.

``ediff1d``, ``unwrap``, ``resize``, ``choose``, ``fromfunction``, ``apply_over_axes``, ``put_along_axis``
and ``bitwise_count``: written over ``fnarray.numpy`` (and ``fnarray.core.lax`` for ``bitwise_count``),
so they run eagerly, under ``jit``, ``grad`` and ``vmap``, on every backend. Sources: the NumPy reference for
each function (numpy.org/doc/stable/reference), whose results the tests compare against through JAX.
"""

from __future__ import annotations

import math

__all__ = ["apply_over_axes", "bitwise_count", "choose", "ediff1d", "fromfunction", "put_along_axis", "resize",
           "unwrap"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened ``ary`` (``numpy.ediff1d``).

    Args: ary: any array. to_end, to_begin: values appended / prepended (flattened) to the differences.
    Returns: a 1-d array of ``ary``'s dtype, ``size - 1`` long plus the extra values.
    """
    fnp = _np()
    x = fnp.ravel(fnp.asarray(ary))
    parts = [x[1:] - x[:-1]]
    if to_begin is not None:
        parts.insert(0, fnp.ravel(fnp.asarray(to_begin, x.dtype)))
    if to_end is not None:
        parts.append(fnp.ravel(fnp.asarray(to_end, x.dtype)))
    return fnp.concatenate(parts)


def unwrap(p, discont=None, axis=-1, period=2 * math.pi):
    """``p`` with jumps larger than ``discont`` along ``axis`` replaced by their ``period`` complement
    (``numpy.unwrap``): phase unwrapping.

    Args: p: a real array. discont: the smallest jump that is unwrapped (default ``period / 2``).
      axis: the axis along which to unwrap. period: the period of the values.
    Returns: an array of ``p``'s shape in its floating dtype; the first element along ``axis`` is unchanged.
    """
    fnp = _np()
    x = fnp.asarray(p)
    x = fnp.astype(x, fnp.result_type(x, 1.0))
    half = period / 2
    discont = half if discont is None else fnp.maximum(discont, half)
    d = fnp.diff(x, axis=axis)
    dd = fnp.mod(d + half, period) - half
    dd = fnp.where((dd == -half) & (d > 0), half, dd)
    correction = fnp.where(fnp.abs(d) < discont, 0, dd - d)
    zero = fnp.zeros_like(fnp.take(x, fnp.arange(1), axis=axis))
    return x + fnp.cumsum(fnp.concatenate([zero, correction], axis=axis), axis=axis)


def resize(a, new_shape):
    """``a`` flattened, repeated as often as needed and cut to ``new_shape`` (``numpy.resize``).

    Args: a: any array. new_shape: an int or a tuple of ints (static).
    Returns: an array of ``new_shape`` and ``a``'s dtype (zeros if ``a`` is empty, as NumPy).
    """
    fnp = _np()
    x = fnp.ravel(fnp.asarray(a))
    shape = (new_shape,) if isinstance(new_shape, int) else tuple(new_shape)
    n = math.prod(shape)
    if x.shape[0] == 0:
        return fnp.zeros(shape, x.dtype)
    return fnp.reshape(fnp.tile(x, -(-n // x.shape[0]))[:n], shape)


def choose(a, choices, out=None, mode="raise"):
    """Element ``i`` of ``choices[a[i]]`` (``numpy.choose``): a multi-way select, broadcast together.

    Args: a: integer indices. choices: a sequence of arrays (or an array whose first axis lists them).
      out: only None. mode: ``"raise"`` (as JAX: indices are not checked, out-of-range ones clamp),
      ``"wrap"`` (modulo the number of choices) or ``"clip"``.
    Returns: an array of the broadcast shape and the choices' dtype.
    Raises: ``ValueError`` for a given ``out`` or an unknown mode.
    """
    fnp = _np()
    if out is not None:
        raise ValueError("choose: out must be None (arrays are immutable); use the returned array")
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    idx = fnp.asarray(a)
    cs = [fnp.asarray(c) for c in choices]
    n = len(cs)
    idx = fnp.mod(idx, n) if mode == "wrap" else fnp.clip(idx, 0, n - 1)
    arrays = fnp.broadcast_arrays(idx, *cs)
    return fnp.take_along_axis(fnp.stack(arrays[1:]), arrays[0][None], axis=0)[0]


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(*indices, **kwargs)`` on the index grids of ``shape`` (``numpy.fromfunction``).

    Args: function: called once with one array per axis (``indices(shape, dtype)``). shape: a tuple of ints.
      dtype: the grids' dtype (default float, as NumPy).
    Returns: whatever ``function`` returns.
    """
    fnp = _np()
    return function(*fnp.indices(tuple(shape), dtype=dtype), **kwargs)


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` applied for each axis in turn, keeping the rank (``numpy.apply_over_axes``).

    Args: func: ``f(array, axis)`` returning an array of the same rank or one less (then the axis is
      re-inserted). a: an array. axes: an int or a sequence of ints.
    Returns: the final array. Raises: ``ValueError`` when ``func`` changes the rank otherwise.
    """
    fnp = _np()
    x = fnp.asarray(a)
    for axis in (axes,) if isinstance(axes, int) else axes:
        y = func(x, axis)
        if y.ndim == x.ndim - 1:
            y = fnp.expand_dims(y, axis)
        elif y.ndim != x.ndim:
            raise ValueError(f"apply_over_axes: func must keep the rank {x.ndim} or drop one axis, got rank {y.ndim}")
        x = y
    return x


def put_along_axis(arr, indices, values, axis, inplace=True, *, mode=None):
    """A copy of ``arr`` with ``values`` written at ``indices`` along ``axis`` (``numpy.put_along_axis``).

    Args: arr: any array. indices: integers, of ``arr``'s rank (or 1-d with ``axis=None``). values:
      broadcast to ``indices``' shape. axis: an int, or None for the flattened ``arr``. inplace: must be
      False (as ``jax.numpy``). mode: accepted for JAX's signature (out-of-range indices are dropped).
    Returns: an array of ``arr``'s shape and dtype.
    Raises: ``ValueError`` for ``inplace=True``.
    """
    fnp = _np()
    if inplace:
        raise ValueError("put_along_axis: arrays are immutable; pass inplace=False and use the returned array "
                         "(as jax.numpy)")
    x = fnp.asarray(arr)
    idx = fnp.asarray(indices)
    if axis is None:
        return fnp.reshape(put_along_axis(fnp.ravel(x), fnp.ravel(idx), fnp.ravel(fnp.asarray(values)), 0,
                                          inplace=False), x.shape)
    axis = axis % x.ndim
    shape = tuple(max(s, t) if i != axis else t for i, (s, t) in enumerate(zip(x.shape, idx.shape)))
    idx = fnp.broadcast_to(idx, shape)
    grids = [fnp.reshape(fnp.arange(n), tuple(n if j == i else 1 for j in range(len(shape))))
             for i, n in enumerate(shape)]
    grids[axis] = idx
    return x.at[tuple(grids)].set(fnp.broadcast_to(fnp.asarray(values, x.dtype), shape), mode=mode)


def bitwise_count(x, /):
    """The number of 1 bits in ``|x|`` per element (``numpy.bitwise_count``), as ``uint8``.

    Args: x: an integer or bool array. Returns: a ``uint8`` array of ``x``'s shape.
    """
    from fnarray.core import lax
    fnp = _np()
    v = fnp.asarray(x)
    if v.dtype != fnp.bool:
        v = fnp.abs(v)
    return fnp.astype(lax.population_count(v), fnp.uint8)

