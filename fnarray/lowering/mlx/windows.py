"""The mlx backend's rules for the window primitives (``fnarray.core.windows``), registered in ``common.RULES``.

MLX has no window reduction, so every window primitive is the tap formulation of ``window_taps``: the
operand padded and dilated once (``mx.pad``, interior padding by expand + pad + reshape), one strided slice
per window tap, combined with ``mx.maximum``/``mx.minimum`` (which propagate NaN), ``+`` and ``mx.where``.
Rules follow ``common.RULES``'s convention: ``factory(params, in_avals, out_avals) -> fn(*arrays)``. float16 and
bfloat16 sums accumulate in float32, as the reference.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import windows as W
from fnarray.lowering import window_taps
from fnarray.lowering.mlx.common import RULES, mx

__all__ = []

_WINDOW = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
LOW = (dtypes.float16, dtypes.bfloat16)


class _MlxOps:
    """The array functions ``window_taps`` needs, in MLX."""

    @staticmethod
    def pad(x, fill, config):
        for axis, (_, _, interior) in enumerate(config):
            n = x.shape[axis]
            if interior and n > 1:
                # (.., n, ..) -> (.., n, 1 + interior, ..) padded with fill -> merged -> the last gap cut off
                y = mx.expand_dims(x, axis + 1)
                widths = [(0, 0)] * y.ndim
                widths[axis + 1] = (0, interior)
                y = mx.pad(y, widths, constant_values=fill)
                shape = list(x.shape)
                shape[axis] = n * (1 + interior)
                y = y.reshape(shape)
                x = y[tuple(slice(0, n + (n - 1) * interior) if i == axis else slice(None) for i in range(y.ndim))]
        widths = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config]
        if any(w != (0, 0) for w in widths):
            x = mx.pad(x, widths, constant_values=fill)
        if any(lo < 0 or hi < 0 for lo, hi, _ in config):
            x = x[tuple(slice(max(-lo, 0), x.shape[i] - max(-hi, 0)) for i, (lo, hi, _) in enumerate(config))]
        return x

    where = staticmethod(lambda c, a, b: mx.where(c, a, b))
    isnan = staticmethod(lambda x: mx.isnan(x))
    maximum = staticmethod(lambda a, b: mx.maximum(a, b))
    minimum = staticmethod(lambda a, b: mx.minimum(a, b))

    @staticmethod
    def int_full(shape, value):
        return mx.full(shape, value, dtype=mx.int32)


def _window(params):
    return {k: params[k] for k in _WINDOW}


def _reduce_window(op):
    def factory(params, in_avals, out_avals):
        window, d = _window(params), in_avals[0].dtype
        out_shape = out_avals[0].shape
        low = op == "add" and d in LOW

        def f(x):
            md = x.dtype
            y = window_taps.reduce_window(_MlxOps, x.astype(mx.float32) if low else x, op,
                                          np.dtype(np.float32) if low else d, out_shape, window)
            return y.astype(md) if low else y
        return f
    return factory


def _select_and_gather_add(params, in_avals, out_avals):
    window, sel = _window(params), params["select_prim"]
    d, out_shape = in_avals[1].dtype, out_avals[0].shape
    return lambda t, x: window_taps.select_and_gather_add(_MlxOps, t, x, d, sel, out_shape, window)


def _select_and_scatter_add(params, in_avals, out_avals):
    window, sel = _window(params), params["select_prim"]
    source_shape, (shape, d) = in_avals[0].shape, (in_avals[1].shape, in_avals[1].dtype)
    low = in_avals[0].dtype in LOW

    def f(s, x):
        md = s.dtype
        y = window_taps.select_and_scatter_add(_MlxOps, s.astype(mx.float32) if low else s, x, shape, d, sel,
                                               source_shape, window)
        return y.astype(md) if low else y
    return f


RULES[W.reduce_window_sum_p] = _reduce_window("add")
RULES[W.reduce_window_max_p] = _reduce_window("max")
RULES[W.reduce_window_min_p] = _reduce_window("min")
RULES[W.select_and_gather_add_p] = _select_and_gather_add
RULES[W.select_and_scatter_add_p] = _select_and_scatter_add
