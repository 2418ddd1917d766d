"""The window primitives as functional array code over window taps, for backends that build graphs (jax, mlx).

The algorithm is the NumPy reference's (``lowering/numpy/windows.py``), written without in-place updates: pad and
dilate the operand once, read one strided slice per window tap, and combine the slices with elementwise
operations, which XLA and MLX fuse. An ``xp`` adapter gives each backend's array functions:

- ``xp.pad(x, fill, config)``: ``config`` holds ``(lo, hi, interior)`` triples; negative lo/hi crop;
- ``xp.where(c, a, b)`` (``b`` may be a Python scalar), ``xp.isnan(x)``, ``xp.maximum``, ``xp.minimum``
  (NaN-propagating), ``xp.int_full(shape, value)`` (int32 indices).

Arrays must support basic slicing with steps and the comparison and arithmetic operators.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W

__all__ = ["reduce_window", "select_and_gather_add", "select_and_scatter_add", "identity"]


def identity(op, d):
    """The value that padding and holes hold for reduction ``op`` (``"add"``/``"max"``/``"min"``) in dtype ``d``."""
    if op == "add":
        return 0
    if dtypes.is_int(d):
        info = dtypes.iinfo(d)
        return int(info.min if op == "max" else info.max)
    if d == dtypes.float8_e4m3fn:   # no infinities (inf would be NaN): its finite extremes, as numpy:0's windows
        return -448.0 if op == "max" else 448.0
    return -np.inf if op == "max" else np.inf


def _pad_config(padding, base_dilation):
    return [(lo, hi, bd - 1) for (lo, hi), bd in zip(padding, base_dilation, strict=True)]


def _views(window, out_shape):
    return W.tap_slices(out_shape, window["window_dimensions"], window["window_strides"],
                      window["window_dilation"])


def reduce_window(xp, x, op, dtype, out_shape, window):
    """``reduce_window_{op}`` of ``x`` (of NumPy dtype ``dtype``); ``out_shape`` is the primitive's."""
    padded = xp.pad(x, identity(op, dtype), _pad_config(window["padding"], window["base_dilation"]))
    combine = {"add": lambda a, b: a + b, "max": xp.maximum, "min": xp.minimum}[op]
    out = None
    for view in _views(window, out_shape):
        v = padded[view]
        out = v if out is None else combine(out, v)
    return out


def _selected_tap(xp, operand, dtype, select_prim, out_shape, window):
    """Per window, the int32 index of its first maximal (``ge``) / minimal (``le``) tap, NaN counting as such."""
    op = "max" if select_prim is P.ge else "min"
    padded = xp.pad(operand, identity(op, dtype), _pad_config(window["padding"], window["base_dilation"]))
    floating = dtypes.is_inexact(dtype)
    best = index = best_nan = None
    for k, view in enumerate(_views(window, out_shape)):
        v = padded[view]
        if best is None:
            best, index = v, xp.int_full(out_shape, 0)
            best_nan = xp.isnan(v) if floating else None
            continue
        better = (v > best) if op == "max" else (v < best)
        if floating:
            v_nan = xp.isnan(v)
            better = (better | v_nan) & ~best_nan
            best_nan = best_nan | v_nan
        best = xp.where(better, v, best)
        index = xp.where(better, xp.int_full(out_shape, k), index)
    return index


def select_and_gather_add(xp, tangents, operand, operand_dtype, select_prim, out_shape, window):
    index = _selected_tap(xp, operand, operand_dtype, select_prim, out_shape, window)
    padded = xp.pad(tangents, 0, _pad_config(window["padding"], window["base_dilation"]))
    out = None
    for k, view in enumerate(_views(window, out_shape)):
        v = padded[view]
        out = v if out is None else xp.where(index == k, v, out)
    return out


def select_and_scatter_add(xp, source, operand, operand_shape, operand_dtype, select_prim, out_shape, window):
    """Each window's ``source`` value added at its selected element: per tap, the selected values are spread
    back to the padded operand's grid (interior padding by the stride, edge padding by the tap's offset),
    summed, then the padding is cut and the base dilation's holes dropped."""
    index = _selected_tap(xp, operand, operand_dtype, select_prim, out_shape, window)
    padded_shape = [lo + hi + W.dilate_dim(n, bd)
                    for n, (lo, hi), bd in zip(operand_shape, window["padding"], window["base_dilation"], strict=True)]
    total = None
    taps = np.ndindex(*window["window_dimensions"])
    for k, tap in enumerate(taps):
        picked = xp.where(index == k, source, 0)
        config = []
        for j, wd, s, m, p in zip(tap, window["window_dilation"], window["window_strides"], out_shape, padded_shape,
                                  strict=True):
            start = j * wd
            config.append((start, p - start - W.dilate_dim(m, s), s - 1))
        spread = xp.pad(picked, 0, config)
        total = spread if total is None else total + spread
    # Undo the padding (negative lo/hi re-grow what they cropped, as zeros), then keep every bd-th element.
    unpadded = xp.pad(total, 0, [(-lo, -hi, 0) for lo, hi in window["padding"]])
    return unpadded[tuple(slice(None, None, bd) for bd in window["base_dilation"])]
