"""Piecewise-linear interpolation and histograms: ``interp``, ``histogram``, ``histogram_bin_edges``.

Composites over the namespace (eager, ``jit``, ``grad`` in the values, ``vmap``), following ``jax.numpy``
where it departs from NumPy: results are inexact of the promoted dtype (float32 by default), and the number of
bins must be static while the range may be traced. Sources: the NumPy reference for ``numpy.interp``,
``numpy.histogram`` and ``numpy.histogram_bin_edges``; the tests compare with NumPy in float64 and with JAX.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core.errors import DTypeError, ShapeError

__all__ = ["interp", "histogram", "histogram_bin_edges"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _inexact(fnp, *arrays):
    """``arrays`` as arrays of the inexact dtype they promote to (an integer or bool one with a Python float: the
    default float, as ``jax.numpy``'s inexact promotion)."""
    arrays = [fnp.asarray(a) for a in arrays]
    d = fnp.result_type(*arrays)
    if not fnp.issubdtype(d, fnp.inexact):
        d = fnp.result_type(d, 1.0)
    return [a.astype(d) for a in arrays]


def interp(x, xp, fp, left=None, right=None, period=None):
    """The piecewise-linear interpolant through ``(xp, fp)`` at ``x`` (``numpy.interp``, ``jax.numpy.interp``).

    Args:
      x: array of any shape, the points to evaluate at.
      xp: 1-d, increasing sample points (not checked, as NumPy; with ``period``, any order).
      fp: 1-d values at ``xp``, the same length (real or complex).
      left, right: the value for ``x < xp[0]`` / ``x > xp[-1]`` (default ``fp[0]`` / ``fp[-1]``).
      period: a period of the x-coordinates: ``x`` and ``xp`` are taken modulo it (``left``/``right`` ignored).

    Returns:
      An array of ``x``'s shape and the inexact dtype ``x``, ``xp`` and ``fp`` promote to.

    Raises:
      ShapeError: ``xp`` or ``fp`` is not 1-d, or their lengths differ, or they are empty.
      DTypeError: ``x`` or ``xp`` is complex.
      ValueError: ``period`` is zero.
    """
    fnp = _np()
    x, xp = _inexact(fnp, x, xp)
    if fnp.iscomplexobj(x) or fnp.iscomplexobj(xp):
        raise DTypeError("interp: x and xp must be real (fp may be complex)")
    (fp,) = _inexact(fnp, fp)
    fp = fp.astype(fnp.result_type(fp, x))
    if xp.ndim != 1 or fp.ndim != 1:
        raise ShapeError(f"interp: xp and fp must be 1-d, got shapes {tuple(xp.shape)} and {tuple(fp.shape)}")
    if xp.shape[0] != fp.shape[0] or xp.shape[0] == 0:
        raise ShapeError(f"interp: xp and fp must have the same non-zero length, got {xp.shape[0]} and "
                         f"{fp.shape[0]}")
    if period is not None:
        if isinstance(period, (int, float, np.number)) and period == 0:
            raise ValueError("interp: period must be non-zero")
        period = fnp.abs(fnp.asarray(period, dtype=fnp.real(x).dtype))
        x = x % period
        xp = xp % period
        order = fnp.argsort(xp)
        xp, fp = xp[order], fp[order]
        xp = fnp.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = fnp.concatenate([fp[-1:], fp, fp[:1]])
    n = xp.shape[0]
    if n == 1:
        mid = fnp.broadcast_to(fp[0], x.shape)
    else:
        i = fnp.clip(fnp.searchsorted(xp, x, side="right"), 1, n - 1)
        x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
        dx = x1 - x0
        flat = fnp.abs(dx) <= fnp.finfo(dx.dtype).eps     # repeated sample points: no division by ~0
        mid = fnp.where(flat, f0, f0 + (x - x0) / fnp.where(flat, 1, dx) * (f1 - f0))
    if period is not None:
        return mid
    lo = fp[0] if left is None else fnp.asarray(left).astype(fp.dtype)
    hi = fp[-1] if right is None else fnp.asarray(right).astype(fp.dtype)
    return fnp.where(x < xp[0], lo, fnp.where(x > xp[-1], hi, mid))


def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002 (NumPy's name)
    """The edges of ``histogram``'s bins (``numpy.histogram_bin_edges``, ``jax.numpy.histogram_bin_edges``).

    Args:
      a: values, any shape (flattened).
      bins: a static number of equal-width bins, or a 1-d array of edges (returned as given, cast).
      range: ``(lo, hi)``, may be traced; default ``(a.min(), a.max())``; an empty range widens to
        ``(lo - 0.5, hi + 0.5)``, as NumPy.
      weights: unused (NumPy's string ``bins`` rules need them; those are not supported).

    Returns:
      A 1-d array of ``bins + 1`` edges (or ``bins``' length), of ``a``'s inexact dtype.

    Raises:
      NotImplementedError: string ``bins`` (``"auto"``...). TypeError: a non-integer number of bins.
      ValueError: fewer than one bin, or ``range`` not a pair. ShapeError: ``bins`` of rank > 1.
    """
    fnp = _np()
    if isinstance(bins, str):
        raise NotImplementedError(f"histogram: bins={bins!r} (NumPy's estimators) is not supported; pass a "
                                  "number of bins or the edges")
    (a,) = _inexact(fnp, a)
    if np.ndim(bins) == 1:
        return fnp.asarray(bins).astype(a.dtype)
    if np.ndim(bins) > 1:
        raise ShapeError(f"histogram: bins must be an int or 1-d edges, got shape {np.shape(bins)}")
    try:
        count = operator.index(bins)
    except TypeError:
        raise TypeError(f"histogram: the number of bins must be a static int, got {bins!r} (pass the edges as "
                        "a 1-d array to use traced ones)") from None
    if count < 1:
        raise ValueError(f"histogram: bins must be positive, got {count}")
    if range is None:
        if a.size == 0:
            lo, hi = fnp.asarray(0, a.dtype), fnp.asarray(1, a.dtype)
        else:
            lo, hi = fnp.min(a), fnp.max(a)
    else:
        pair = list(range) if isinstance(range, (tuple, list)) else None
        if pair is None:
            r = fnp.asarray(range)
            pair = [r[0], r[1]] if r.shape == (2,) else None
        if pair is None or len(pair) != 2 or any(np.ndim(v) != 0 for v in pair):
            raise ValueError(f"histogram: range must be a pair of scalars (lo, hi), got {range!r}")
        lo, hi = (fnp.asarray(v).astype(a.dtype) for v in pair)
    same = lo == hi
    return fnp.linspace(fnp.where(same, lo - 0.5, lo), fnp.where(same, hi + 0.5, hi), count + 1, dtype=a.dtype)


def histogram(a, bins=10, range=None, weights=None, density=None):  # noqa: A002 (NumPy's name)
    """Counts (or summed ``weights``) of ``a`` in bins (``numpy.histogram``, ``jax.numpy.histogram``).

    Bins are half-open ``[e_i, e_{i+1})`` except the last, which holds its right edge; values outside the
    edges are not counted. NaNs are not counted.

    Args:
      a: values, any shape (flattened).
      bins, range: as ``histogram_bin_edges``.
      weights: an array of ``a``'s shape summed per bin instead of counting 1s.
      density: divide by the total and the bin widths, so the histogram integrates to 1.

    Returns:
      ``(hist, bin_edges)``: ``hist`` 1-d of the number of bins, inexact (as ``jax.numpy``, float32 counts by
      default), and the edges.

    Raises:
      ShapeError: ``weights`` of another shape than ``a``; the errors of ``histogram_bin_edges``.
    """
    fnp = _np()
    if weights is None:
        (a,) = _inexact(fnp, a)
        weights = fnp.ones_like(a)
    else:
        if np.shape(a) != np.shape(weights):
            raise ShapeError(f"histogram: weights of shape {np.shape(weights)} differ from a's {np.shape(a)}")
        a, weights = _inexact(fnp, a, weights)
    edges = histogram_bin_edges(a, bins, range)
    a, weights = fnp.ravel(a), fnp.ravel(weights)
    n = edges.shape[0]
    slot = fnp.searchsorted(edges, a, side="right")
    slot = fnp.where(a == edges[-1], n - 1, slot)       # the last bin is closed on the right
    counts = fnp.zeros(n + 1, weights.dtype).at[slot].add(weights)[1:n]
    if density:
        counts = counts / fnp.diff(edges) / fnp.sum(counts)
    return counts, edges
