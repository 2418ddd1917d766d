"""Grids, index helpers, windows and finite differences: ``mgrid``, ``ogrid``, ``s_``, ``index_exp``,
``hanning``, ``hamming``, ``blackman``, ``bartlett``, ``kaiser`` and ``gradient`` (``jax.numpy``'s names).

Grids and windows have static shapes, so NumPy computes them and fnarray returns them in the 32-bit default
dtypes (as ``jax.numpy``: float32 or int32 with x64 off); ``gradient`` is a composite over the namespace
(``jit``, ``grad``, ``vmap``). Sources: the NumPy reference of each name (``numpy.gradient``'s second-order
central differences, first-order edges); the tests compare with NumPy and JAX.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core.errors import ShapeError

__all__ = ["mgrid", "ogrid", "s_", "index_exp", "hanning", "hamming", "blackman", "bartlett", "kaiser", "gradient"]


def _np():
    from fnarray import numpy as fnp
    return fnp


class _Grid:
    """``mgrid[a:b:s, ...]`` (``numpy.mgrid``, ``jax.numpy.mgrid``): a dense mesh of static ranges, one array of
    shape ``(ndim, n_1, ..., n_ndim)`` (a 1-d range for one slice); ``ogrid[...]``: the open mesh, a list of
    arrays that broadcast together. A complex step ``5j`` means 5 points, ends included; int32 for integer
    ranges, float32 otherwise (x64 off). Raises ``TypeError`` for a key that is not slices."""

    __slots__ = ("_sparse",)

    def __init__(self, sparse):
        self._sparse = sparse

    def __getitem__(self, key):
        fnp = _np()
        for k in key if isinstance(key, tuple) else (key,):
            if not isinstance(k, slice):
                raise TypeError(f"{'ogrid' if self._sparse else 'mgrid'}[...] takes slices (start:stop:step), "
                                f"got {k!r}")
        grid = (np.ogrid if self._sparse else np.mgrid)[key]
        if isinstance(grid, (list, tuple)):
            return [fnp.asarray(g) for g in grid]
        return fnp.asarray(grid)

    def __repr__(self):
        return "ogrid" if self._sparse else "mgrid"


mgrid = _Grid(sparse=False)
ogrid = _Grid(sparse=True)
s_ = np.s_            # plain Python index objects: the same for every array library
index_exp = np.index_exp


def _window(name, fn, M):
    fnp = _np()
    try:
        m = operator.index(M)
    except TypeError:
        raise TypeError(f"{name}: M must be a static int, got {M!r}") from None
    return fnp.asarray(fn(m))   # NumPy's float64: the default float (float32; float64 with x64 on, as jnp)


def hanning(M):
    """The Hann window of ``M`` points (``numpy.hanning``): the default float, empty for ``M <= 0``.

    Args:
      M: a static int.

    Returns:
      A 1-d array of ``max(M, 0)`` elements of the default float (float32; float64 with x64 on).

    Raises:
      TypeError: ``M`` is not an int (a traced one included).
    """
    return _window("hanning", np.hanning, M)


def hamming(M):
    """The Hamming window of ``M`` points (``numpy.hamming``).

    Args:
      M: a static int.

    Returns:
      A 1-d array of ``max(M, 0)`` elements of the default float (float32; float64 with x64 on).

    Raises:
      TypeError: ``M`` is not an int.
    """
    return _window("hamming", np.hamming, M)


def blackman(M):
    """The Blackman window of ``M`` points (``numpy.blackman``).

    Args:
      M: a static int.

    Returns:
      A 1-d array of ``max(M, 0)`` elements of the default float (float32; float64 with x64 on).

    Raises:
      TypeError: ``M`` is not an int.
    """
    return _window("blackman", np.blackman, M)


def bartlett(M):
    """The Bartlett (triangular) window of ``M`` points (``numpy.bartlett``).

    Args:
      M: a static int.

    Returns:
      A 1-d array of ``max(M, 0)`` elements of the default float (float32; float64 with x64 on).

    Raises:
      TypeError: ``M`` is not an int.
    """
    return _window("bartlett", np.bartlett, M)


def kaiser(M, beta):
    """The Kaiser window of ``M`` points and shape ``beta`` (``numpy.kaiser``).

    Args:
      M: a static int.
      beta: a static float, the window's shape (0 is rectangular).

    Returns:
      A 1-d array of ``max(M, 0)`` elements of the default float (float32; float64 with x64 on).

    Raises:
      TypeError: ``M`` is not an int, or ``beta`` is not a Python or NumPy number.
    """
    if not isinstance(beta, (int, float, np.number)):
        raise TypeError(f"kaiser: beta must be a static number, got {type(beta).__name__}")
    return _window("kaiser", lambda m: np.kaiser(m, float(beta)), M)


def _axis_gradient(fnp, f, ax, h):
    """The derivative of ``f`` along ``ax`` with spacing ``h`` (a scalar or 1-d coordinates)."""
    n = f.shape[ax]
    if n < 2:
        raise ShapeError(f"gradient: axis {ax} has {n} element(s); at least 2 are needed")

    def part(start, stop):
        return fnp.take(f, fnp.arange(start, stop), axis=ax)

    h = fnp.asarray(h)
    if h.ndim == 0:
        first = (part(1, 2) - part(0, 1)) / h
        last = (part(n - 1, n) - part(n - 2, n - 1)) / h
        inner = (part(2, n) - part(0, n - 2)) / (2 * h)
    else:
        if h.shape != (n,):
            raise ShapeError(f"gradient: coordinates of shape {tuple(h.shape)} for an axis of length {n}")
        d = fnp.diff(h)
        shape = [1] * f.ndim

        def along(v):
            shape[ax] = v.shape[0]
            return fnp.reshape(v, tuple(shape))

        first = (part(1, 2) - part(0, 1)) / along(d[:1])
        last = (part(n - 1, n) - part(n - 2, n - 1)) / along(d[-1:])
        a, b = along(d[:-1]), along(d[1:])           # the steps before and after each inner point
        inner = (a * a * part(2, n) - b * b * part(0, n - 2) + (b * b - a * a) * part(1, n - 1)) / (a * b * (a + b))
    return fnp.concatenate([first, inner, last], axis=ax) if n > 2 else fnp.concatenate([first, last], axis=ax)


def gradient(f, *varargs, axis=None, edge_order=None):
    """The derivative of sampled ``f`` by finite differences (``numpy.gradient``, ``jax.numpy.gradient``):
    second-order central differences inside, first-order one-sided ones at both ends.

    Args:
      f: an array (integers become float32).
      varargs: the spacing: nothing (1), one scalar for every axis, or one per axis, each a scalar or the
        1-d coordinates of that axis (non-uniform spacing, NumPy's formula).
      axis: an int, a tuple of ints or None (every axis).
      edge_order: None or 1 (second-order edges are not supported, as ``jax.numpy``).

    Returns:
      One array of ``f``'s shape for a single axis, else a list of them, one per axis.

    Raises:
      NotImplementedError: ``edge_order=2``. ShapeError: an axis shorter than 2, or coordinates of the wrong
      length. TypeError/ValueError: a spacing count that matches neither 1 nor the number of axes.
    """
    fnp = _np()
    from fnarray.numpy._util import normalize_axis
    if edge_order not in (None, 1):
        raise NotImplementedError("gradient: only edge_order=1 is supported (as jax.numpy)")
    f = fnp.asarray(f)
    if not fnp.issubdtype(f.dtype, fnp.inexact):
        f = f.astype(fnp.result_type(f.dtype, 1.0))
    axes = tuple(range(f.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(normalize_axis(a, f.ndim, "gradient axis") for a in axes)
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise ValueError(f"gradient: {len(varargs)} spacings for {len(axes)} axes (give none, one or one per axis)")
    out = [_axis_gradient(fnp, f, ax, h) for ax, h in zip(axes, spacing, strict=True)]
    return out[0] if len(out) == 1 else out
