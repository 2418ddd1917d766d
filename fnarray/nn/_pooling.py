"""Pooling (mirrors ``flax.linen``'s ``max_pool``, ``avg_pool``, ``min_pool``): windows over the spatial axes.

Layout as flax: ``(*batch, *spatial, features)``, channels last, any number of leading batch axes (none
too); ``window_shape`` and ``strides`` cover the spatial axes only. Each function is one window reduction
(``fnarray.lax.reduce_window_max/sum/min``), so its gradient is the primitive's: max pooling routes each
cotangent to the first maximal element of its window, as XLA does.
"""

from __future__ import annotations

import math

from fnarray.core import dtypes
from fnarray.core.errors import ShapeError

__all__ = ["max_pool", "avg_pool", "min_pool"]


def _window(name, x, window_shape, strides, padding):
    """The full-rank window params of a pooling call; errors name the argument."""
    try:
        window_shape = tuple(int(w) for w in window_shape)
        strides = (1,) * len(window_shape) if strides is None else tuple(int(s) for s in strides)
    except TypeError:
        raise ShapeError(f"{name}: window_shape and strides must be sequences of ints, got {window_shape!r} and "
                         f"{strides!r}") from None
    k = len(window_shape)
    if x.ndim < k + 1:
        raise ShapeError(f"{name}: inputs of shape {tuple(x.shape)} have no room for {k} spatial axes and a "
                         f"feature axis (window_shape={window_shape}); layout is (*batch, *spatial, features)")
    if len(strides) != k:
        raise ShapeError(f"{name}: strides {strides} must have one entry per window dimension ({k})")
    batch = x.ndim - k - 1
    if not isinstance(padding, str):
        try:
            padding = tuple((int(lo), int(hi)) for lo, hi in padding)
        except (TypeError, ValueError):
            raise ShapeError(f"{name}: padding must be 'VALID', 'SAME' or {k} (lo, hi) pairs, got {padding!r}") \
                from None
        if len(padding) != k:
            raise ShapeError(f"{name}: padding {padding} must have one (lo, hi) pair per window dimension ({k})")
        padding = ((0, 0),) * batch + padding + ((0, 0),)
    return (1,) * batch + window_shape + (1,), (1,) * batch + strides + (1,), padding


def max_pool(inputs, window_shape, strides=None, padding="VALID"):
    """Max pooling (``flax.linen.max_pool``).

    Args:
      inputs: ``(*batch, *spatial, features)``, a real dtype.
      window_shape: the window's extent along each spatial axis, e.g. ``(2, 2)``.
      strides: one per spatial axis (default 1).
      padding: ``"VALID"``, ``"SAME"`` or one ``(lo, hi)`` pair per spatial axis; padding never wins.
    Returns:
      ``(*batch, *pooled, features)`` of the inputs' dtype. NaN propagates. The gradient goes to the
      first maximal element of each window (row-major), as XLA's.
    Raises:
      ShapeError: a window rank that does not fit the inputs, wrong-length strides or padding, a window
        larger than the padded input; DTypeError: complex inputs.
    Source: ``flax.linen.pooling``; the reduction is ``lax.reduce_window`` with ``max``.
    """
    from fnarray import numpy as fnp
    from fnarray.core.lax_windows import reduce_window_max
    x = fnp.asarray(inputs)
    dims, strides, padding = _window("max_pool", x, window_shape, strides, padding)
    return reduce_window_max(x, dims, strides, padding)


def min_pool(inputs, window_shape, strides=None, padding="VALID"):
    """Min pooling (``flax.linen.min_pool``): as ``max_pool`` with the minimum.

    Args:
      inputs: ``(*batch, *spatial, features)``, a real dtype.
      window_shape: the window's extent along each spatial axis, e.g. ``(2, 2)``.
      strides: one per spatial axis (default 1).
      padding: ``"VALID"``, ``"SAME"`` or one ``(lo, hi)`` pair per spatial axis; padding never wins.
    Returns:
      ``(*batch, *pooled, features)`` of the inputs' dtype. NaN propagates. The gradient goes to the
      first minimal element of each window (row-major), as XLA's.
    Raises:
      ShapeError: a window rank that does not fit the inputs, wrong-length strides or padding, a window
        larger than the padded input; DTypeError: complex inputs.
    Source: ``flax.linen.pooling``; the reduction is ``lax.reduce_window`` with ``min``.
    """
    from fnarray import numpy as fnp
    from fnarray.core.lax_windows import reduce_window_min
    x = fnp.asarray(inputs)
    dims, strides, padding = _window("min_pool", x, window_shape, strides, padding)
    return reduce_window_min(x, dims, strides, padding)


def avg_pool(inputs, window_shape, strides=None, padding="VALID", count_include_pad=True):
    """Average pooling (``flax.linen.avg_pool``).

    Args:
      inputs: ``(*batch, *spatial, features)``; integer and bool inputs are averaged in float32.
      window_shape, strides, padding: as ``max_pool``'s; padding holds zeros.
      count_include_pad: divide by the window size (``True``, flax's default) or by the number of input
        elements each window covers (``False``).
    Returns:
      ``(*batch, *pooled, features)``, floating.
    Raises:
      As ``max_pool``.
    Source: ``flax.linen.pooling``: a sum window divided by the window size or by the sum window of ones.
    """
    from fnarray import numpy as fnp
    from fnarray.core.lax_windows import reduce_window_sum
    x = fnp.asarray(inputs)
    if not dtypes.is_inexact(x.dtype):
        x = x.astype(dtypes.float32)
    dims, strides, pads = _window("avg_pool", x, window_shape, strides, padding)
    total = reduce_window_sum(x, dims, strides, pads)
    if count_include_pad:
        return total / fnp.asarray(math.prod(dims), dtype=x.dtype)
    # The count of real elements per window is the same for every batch index and feature: one spatial slice.
    k = len(tuple(window_shape))
    ones = fnp.ones(x.shape[x.ndim - k - 1:-1] + (1,), dtype=x.dtype)
    count = reduce_window_sum(ones, dims[-k - 1:], strides[-k - 1:], pads if isinstance(pads, str) else pads[-k - 1:])
    return total / count
