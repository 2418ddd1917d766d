"""ONNX rules of the window primitives (``fnarray.core.windows``), registered into ``_onnx.RULES``.

Every rule is the tap formulation of the NumPy reference: one ``Pad`` (interior padding for the base
dilation, the reduction's identity as the value), one strided ``Slice`` per window tap, combined with
``Add``, NaN-propagating ``Max``/``Min``, or ``Where`` for the selections of the max/min gradients (the first
maximal element of a window, the first NaN if any). ONNX's ``MaxPool``/``AveragePool`` are not used: they
know no base dilation, no negative padding and no integer sums, their NaN handling is the runtime's, and
the gradients (``select_and_scatter_add``) have no ONNX operator at all; the tap graphs express all of them
exactly, at ``prod(window_dimensions)`` nodes per step (4 for a 2x2 pool).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.export import _onnx as O
from fnarray.lowering.window_taps import identity

__all__ = []

_WINDOW = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
_LOW = (dtypes.float16, dtypes.bfloat16)


def _window(e):
    return {k: e.params[k] for k in _WINDOW}


def _padded(g, x, shape, window, fill, d):
    cfg = [(lo, hi, bd - 1) for (lo, hi), bd in zip(window["padding"], window["base_dilation"], strict=True)]
    return O.pad_node(g, x, shape, cfg, g.scalar(fill, d))


def _taps(g, padded, out_shape, window):
    for view in W.tap_slices(out_shape, window["window_dimensions"], window["window_strides"],
                             window["window_dilation"]):
        yield O._slice(g, padded, [s.start for s in view], [s.stop for s in view], [s.step for s in view])


def _combine(g, op, a, b, d):
    if op == "add":
        return g.node("Add", [a, b])
    m = g.node("Max" if op == "max" else "Min", [a, b])
    if not dtypes.is_inexact(d):
        return m
    return g.node("Where", [O._nan_either(g, a, b), g.node("Add", [a, b]), m])


def _reduce_window(op):
    def rule(g, e, ins):
        window, d = _window(e), np.dtype(O._av(e).dtype)
        x = ins[0]
        acc = np.dtype(np.float32) if op == "add" and d in _LOW else d
        if acc != d:
            x = g.node("Cast", [x], to=O._elem_type(g.onnx, acc))
        padded = _padded(g, x, O._av(e).shape, window, identity(op, d), acc)
        out = None
        for v in _taps(g, padded, O._out(e).shape, window):
            out = v if out is None else _combine(g, op, out, v, acc)
        if acc != d:
            out = g.node("Cast", [out], to=O._elem_type(g.onnx, d))
        return g.node("Identity", [out]) if out == ins[0] else out
    return rule


def _selected_tap(g, operand, shape, d, select_prim, out_shape, window):
    """Per window, the int32 index of its first maximal (``ge``) / minimal (``le``) tap, a NaN counting as such."""
    greater = select_prim is P.ge
    padded = _padded(g, operand, shape, window, identity("max" if greater else "min", d), d)
    floating = dtypes.is_inexact(d)
    best = index = best_nan = None
    for k, v in enumerate(_taps(g, padded, out_shape, window)):
        if best is None:
            best, index = v, g.const(np.zeros(out_shape, np.int32))
            best_nan = g.node("IsNaN", [v]) if floating else None
            continue
        better = g.node("Greater" if greater else "Less", [v, best])
        if floating:
            v_nan = g.node("IsNaN", [v])
            better = g.node("And", [g.node("Or", [better, v_nan]), g.node("Not", [best_nan])])
            best_nan = g.node("Or", [best_nan, v_nan])
        best = g.node("Where", [better, v, best])
        index = g.node("Where", [better, g.scalar(k, np.int32), index])
    return index


def _select_and_gather_add(g, e, ins):
    t, x = ins
    window, shape, d = _window(e), O._av(e, 1).shape, np.dtype(O._av(e, 1).dtype)
    out_shape, td = O._out(e).shape, np.dtype(O._av(e).dtype)
    index = _selected_tap(g, x, shape, d, e.params["select_prim"], out_shape, window)
    padded = _padded(g, t, shape, window, 0, td)
    out = None
    for k, v in enumerate(_taps(g, padded, out_shape, window)):
        out = v if out is None else g.node("Where", [g.node("Equal", [index, g.scalar(k, np.int32)]), v, out])
    return out


def _select_and_scatter_add(g, e, ins):
    s, x = ins
    window, shape, d = _window(e), O._av(e, 1).shape, np.dtype(O._av(e, 1).dtype)
    out_shape, sd = O._av(e, 0).shape, np.dtype(O._av(e).dtype)
    if 0 in out_shape:
        return g.const(np.zeros(shape, sd))
    acc = np.dtype(np.float32) if sd in _LOW else sd
    if acc != sd:
        s = g.node("Cast", [s], to=O._elem_type(g.onnx, acc))
    index = _selected_tap(g, x, shape, d, e.params["select_prim"], out_shape, window)
    zero = g.scalar(0, acc)
    padded_shape = [lo + hi + W.dilate_dim(n, bd)
                    for n, (lo, hi), bd in zip(shape, window["padding"], window["base_dilation"], strict=True)]
    total = None
    for k, tap in enumerate(np.ndindex(*window["window_dimensions"])):
        picked = g.node("Where", [g.node("Equal", [index, g.scalar(k, np.int32)]), s, zero])
        cfg = []
        for j, wd, st, m, p in zip(tap, window["window_dilation"], window["window_strides"], out_shape,
                                   padded_shape, strict=True):
            cfg.append((j * wd, p - j * wd - W.dilate_dim(m, st), st - 1))
        spread = O.pad_node(g, picked, out_shape, cfg, zero)
        total = spread if total is None else g.node("Add", [total, spread])
    unpadded = O.pad_node(g, total, padded_shape, [(-lo, -hi, 0) for lo, hi in window["padding"]], zero)
    dilated = [W.dilate_dim(n, bd) for n, bd in zip(shape, window["base_dilation"], strict=True)]
    if any(bd != 1 for bd in window["base_dilation"]):
        unpadded = O._slice(g, unpadded, [0] * len(shape), dilated, window["base_dilation"])
    if acc != sd:
        unpadded = g.node("Cast", [unpadded], to=O._elem_type(g.onnx, sd))
    return g.node("Identity", [unpadded]) if unpadded == ins[0] else unpadded


O.RULES[W.reduce_window_sum_p] = _reduce_window("add")
O.RULES[W.reduce_window_max_p] = _reduce_window("max")
O.RULES[W.reduce_window_min_p] = _reduce_window("min")
O.RULES[W.select_and_gather_add_p] = _select_and_gather_add
O.RULES[W.select_and_scatter_add_p] = _select_and_scatter_add
