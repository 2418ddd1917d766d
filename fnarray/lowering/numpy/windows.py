"""NumPy reference implementations of the window primitives (``fnarray.core.windows``): the semantics.

Each implementation builds the padded, base-dilated operand once (holes and padding hold the reduction's
identity) and then loops over the window's taps: tap ``k`` reads one strided view of the padded operand,
``padded[k * window_dilation :: window_strides]`` cut to the output's extent, so memory stays at one padded
operand plus the output, whatever the window (no ``windows x outputs`` patch array), and the Python loop runs
``prod(window_dimensions)`` times. The selection rule of the max/min gradients ("the first maximal element of
a window, a NaN counting as maximal") is written once, in ``_selected_tap``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.lowering.numpy.common import IMPLS

__all__ = ["reduce_window", "select_and_gather_add", "select_and_scatter_add", "padded_operand"]

#: the float dtypes a window sums in float32, rounding once (float8 too: ml_dtypes' own float8 additions round each)
_LOW = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)


def _lowest(d):
    if d == dtypes.float8_e4m3fn:
        return -448.0   # no infinities in this dtype (-inf would become NaN)
    return dtypes.iinfo(d).min if dtypes.is_int(d) else -np.inf


def _highest(d):
    if d == dtypes.float8_e4m3fn:
        return 448.0
    return dtypes.iinfo(d).max if dtypes.is_int(d) else np.inf


def _full_layout(shape, padding, base_dilation):
    """(positive padding, crops, dilated shape): the padded operand is ``full[crops]``, where ``full`` is the
    dilated operand with the positive part of the padding around it."""
    dilated = tuple(W.dilate_dim(n, d) for n, d in zip(shape, base_dilation, strict=True))
    pos = tuple((max(lo, 0), max(hi, 0)) for lo, hi in padding)
    full = tuple(lo + n + hi for n, (lo, hi) in zip(dilated, pos, strict=True))
    crops = tuple(slice(max(-lo, 0), m - max(-hi, 0)) for m, (lo, hi) in zip(full, padding, strict=True))
    return pos, crops, full


def padded_operand(x, fill, padding, base_dilation, dtype=None):
    """``x`` dilated by ``base_dilation`` and padded by ``padding`` (negative crops), holes and pads = ``fill``."""
    x = np.asarray(x)
    dtype = x.dtype if dtype is None else dtype
    pos, crops, full = _full_layout(x.shape, padding, base_dilation)
    out = np.full(full, fill, dtype=dtype)
    inner = tuple(slice(lo, lo + W.dilate_dim(n, d), d)
                  for n, (lo, _), d in zip(x.shape, pos, base_dilation, strict=True))
    out[inner] = x
    return out[crops]


def reduce_window(x, op, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    """The reference of ``reduce_window_{sum,max,min}``; ``op`` is ``"add"``, ``"max"`` or ``"min"``."""
    x = np.asarray(x)
    d = x.dtype
    out_shape = W.window_out_shape("reduce_window", x.shape, window_dimensions=window_dimensions,
                                   window_strides=window_strides, padding=padding, base_dilation=base_dilation,
                                   window_dilation=window_dilation)
    acc = np.dtype(np.float32) if d in _LOW else d
    fill = {"add": 0, "max": _lowest(d), "min": _highest(d)}[op]
    ufunc = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]  # maximum/minimum propagate NaN
    if 0 in out_shape:
        return np.zeros(out_shape, d)
    padded = padded_operand(x, fill, padding, base_dilation, acc)
    out = None
    for view in W.tap_slices(out_shape, window_dimensions, window_strides, window_dilation):
        if out is None:
            out = padded[view].copy()
        else:
            ufunc(out, padded[view], out=out)
    return out.astype(d, copy=False)


def _selected_tap(operand, select_prim, out_shape, window):
    """Per window, the index (row-major over the taps) of its first maximal (``ge``) / minimal (``le``)
    element, a NaN counting as maximal/minimal; padding and holes lose to every element."""
    d = operand.dtype
    greater = select_prim is P.ge
    fill = _lowest(d) if greater else _highest(d)
    padded = padded_operand(operand, fill, window["padding"], window["base_dilation"])
    floating = dtypes.is_inexact(d)
    best = index = best_nan = None
    views = W.tap_slices(out_shape, window["window_dimensions"], window["window_strides"],
                       window["window_dilation"])
    for k, view in enumerate(views):
        v = padded[view]
        if best is None:
            best, index = v.copy(), np.zeros(out_shape, np.int64)
            best_nan = np.isnan(v) if floating else np.zeros(out_shape, bool)
            continue
        better = (v > best) if greater else (v < best)
        if floating:
            v_nan = np.isnan(v)
            better = (better | v_nan) & ~best_nan
            best_nan = best_nan | v_nan
        np.copyto(best, v, where=better)
        index[better] = k
    return index


def _window_params(params):
    return {k: params[k] for k in ("window_dimensions", "window_strides", "padding", "base_dilation",
                                   "window_dilation")}


def select_and_gather_add(tangents, operand, *, select_prim, **window):
    """The reference of ``select_and_gather_add``: per window, ``tangents`` at the selected element."""
    tangents, operand = np.asarray(tangents), np.asarray(operand)
    out_shape = W.window_out_shape("select_and_gather_add", operand.shape, **window)
    if 0 in out_shape:
        return np.zeros(out_shape, tangents.dtype)
    index = _selected_tap(operand, select_prim, out_shape, window)
    padded_t = padded_operand(tangents, 0, window["padding"], window["base_dilation"])
    out = np.zeros(out_shape, tangents.dtype)
    views = W.tap_slices(out_shape, window["window_dimensions"], window["window_strides"],
                       window["window_dilation"])
    for k, view in enumerate(views):
        np.copyto(out, padded_t[view], where=index == k)
    return out


def select_and_scatter_add(source, operand, *, select_prim, **window):
    """The reference of ``select_and_scatter_add``: each window's ``source`` value added at its selected
    element; the result has ``operand``'s shape and ``source``'s dtype."""
    source, operand = np.asarray(source), np.asarray(operand)
    d = source.dtype
    acc = np.dtype(np.float32) if d in _LOW else d
    out_shape = W.window_out_shape("select_and_scatter_add", operand.shape, **window)
    if 0 in out_shape or operand.size == 0:
        return np.zeros(operand.shape, d)
    index = _selected_tap(operand, select_prim, out_shape, window)
    pos, crops, full_shape = _full_layout(operand.shape, window["padding"], window["base_dilation"])
    full = np.zeros(full_shape, acc)
    padded = full[crops]  # a view: adding into it adds into ``full``
    views = W.tap_slices(out_shape, window["window_dimensions"], window["window_strides"],
                       window["window_dilation"])
    for k, view in enumerate(views):
        padded[view] += np.where(index == k, source, 0).astype(acc, copy=False)
    inner = tuple(slice(lo, lo + W.dilate_dim(n, bd), bd)
                  for n, (lo, _), bd in zip(operand.shape, pos, window["base_dilation"], strict=True))
    return full[inner].astype(d)


def _reduce_window_impl(op):
    def factory(params, in_avals, out_avals):
        window = _window_params(params)
        return lambda x: reduce_window(x, op, **window)
    return factory


def _select_impl(fn):
    def factory(params, in_avals, out_avals):
        return lambda a, b: fn(a, b, select_prim=params["select_prim"], **_window_params(params))
    return factory


IMPLS[W.reduce_window_sum_p] = _reduce_window_impl("add")
IMPLS[W.reduce_window_max_p] = _reduce_window_impl("max")
IMPLS[W.reduce_window_min_p] = _reduce_window_impl("min")
IMPLS[W.select_and_gather_add_p] = _select_impl(select_and_gather_add)
IMPLS[W.select_and_scatter_add_p] = _select_impl(select_and_scatter_add)
