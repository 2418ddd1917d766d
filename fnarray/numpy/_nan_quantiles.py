"""Quantiles that ignore NaN (``numpy.nanquantile``, ``nanpercentile``, ``nanmedian``), as composites.

The reduced axes move to the end and are flattened; a sort puts the NaNs last, so the ``n`` valid values
of each slice come first and the quantile's position is ``q * (n - 1)`` within them (per slice, unlike
``quantile``'s one position for all). A slice of only NaNs gives NaN. Methods as ``quantile``.
Source: the NumPy reference (numpy.org/doc/stable/reference/generated/numpy.nanquantile.html).
"""

from __future__ import annotations

__all__ = ["nanmedian", "nanpercentile", "nanquantile"]

_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _np():
    from fnarray import numpy as fnp
    return fnp


def _flat_tail(x, axis):
    """``x`` with the axes ``axis`` moved to the end and flattened into one; the kept axes' indices."""
    fnp = _np()
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in (
        (axis,) if isinstance(axis, int) else axis))
    keep = [i for i in range(x.ndim) if i not in axes]
    rest = tuple(x.shape[i] for i in keep)
    return fnp.reshape(fnp.transpose(x, keep + list(axes)), rest + (-1,)), axes


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th quantiles over ``axis`` ignoring NaNs (``numpy.nanquantile``; ``jax.numpy.nanquantile``).

    Args: as ``quantile`` (``out`` only ``None``; ``overwrite_input`` ignored).
    Returns: shape ``Q + S without axis`` in ``a``'s floating dtype; NaN for slices of only NaNs.
    Raises: ``ValueError`` for an unknown method or a given ``out``.
    """
    fnp = _np()
    if method not in _METHODS:
        raise ValueError(f"nanquantile: method must be one of {', '.join(_METHODS)}, got {method!r}")
    if out is not None:
        raise ValueError("nanquantile: out must be None (arrays are immutable); use the returned array")
    x = fnp.asarray(a)
    x = fnp.astype(x, fnp.result_type(x, 1.0))
    flat, axes = _flat_tail(x, axis)
    srt = fnp.sort(flat, axis=-1)
    n = fnp.sum(~fnp.isnan(flat), axis=-1)
    qa = fnp.asarray(q, x.dtype)
    qb = fnp.reshape(qa, qa.shape + (1,) * (flat.ndim - 1))
    pos = qb * fnp.astype(fnp.maximum(n - 1, 0), x.dtype)
    lo_f, hi_f = fnp.floor(pos), fnp.ceil(pos)
    srt_b = fnp.broadcast_to(srt, qa.shape + srt.shape)

    def take(p):
        idx = fnp.astype(p, fnp.int32)[..., None]
        return fnp.take_along_axis(srt_b, idx, axis=-1)[..., 0]

    if method == "lower":
        res = take(lo_f)
    elif method == "higher":
        res = take(hi_f)
    elif method == "nearest":
        res = take(fnp.round(pos))
    else:
        lo, hi = take(lo_f), take(hi_f)
        t = fnp.where(lo_f == hi_f, 0.0, 0.5) if method == "midpoint" else pos - lo_f
        res = fnp.where(t == 0, lo, lo + (hi - lo) * t)
    res = fnp.where(n == 0, fnp.nan, res)
    if keepdims:
        res = fnp.expand_dims(res, tuple(qa.ndim + i for i in sorted(axes)))
    return res


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th percentiles ignoring NaNs (``numpy.nanpercentile``): ``nanquantile`` with ``q / 100``."""
    return nanquantile(a, _np().asarray(q) / 100, axis, out, overwrite_input, method, keepdims)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median over ``axis`` ignoring NaNs (``numpy.nanmedian``): ``nanquantile(a, 0.5, ...)``."""
    return nanquantile(a, 0.5, axis, out, overwrite_input, "linear", keepdims)
