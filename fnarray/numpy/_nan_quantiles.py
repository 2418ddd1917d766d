"""Quantiles that ignore NaN (``numpy.nanquantile``, ``nanpercentile``, ``nanmedian``).

``quantile``'s code (``_reductions._quantile``) with ``ignore_nan``: the sort puts the NaNs last, so the ``n``
valid values of each slice come first and the quantile's position is ``q * (n - 1)`` within them (per slice,
unlike ``quantile``'s one position for all). A slice of only NaNs gives NaN. Methods, dtypes, infinities and
errors as ``quantile``. Source: the NumPy reference (numpy.org/doc/stable/reference/generated/numpy.nanquantile.html).
"""

from __future__ import annotations

from fnarray.numpy._reductions import _quantile

__all__ = ["nanmedian", "nanpercentile", "nanquantile"]


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th quantiles over ``axis`` ignoring NaNs (``numpy.nanquantile``; ``jax.numpy.nanquantile``).

    Args: as ``quantile`` (``out`` only ``None``; ``overwrite_input`` ignored).
    Returns: shape ``Q + S without axis`` in ``a``'s floating dtype (``float32`` for integers, as ``quantile``);
      NaN for slices of only NaNs and for empty slices.
    Raises: ``ValueError`` for an unknown method or (when ``q`` is concrete) q outside [0, 1]; ``TypeError`` for a
      given ``out``; ``DTypeError`` for complex input.
    """
    return _quantile("nanquantile", a, q, axis, out, method, keepdims, scale=1, ignore_nan=True)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    """The ``q``-th percentiles ignoring NaNs (``numpy.nanpercentile``): ``nanquantile`` with ``q / 100``,
    ``q`` in [0, 100]."""
    return _quantile("nanpercentile", a, q, axis, out, method, keepdims, scale=100, ignore_nan=True)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median over ``axis`` ignoring NaNs (``numpy.nanmedian``): ``nanquantile(a, 0.5, ...)``."""
    return _quantile("nanmedian", a, 0.5, axis, out, "linear", keepdims, scale=1, ignore_nan=True)
