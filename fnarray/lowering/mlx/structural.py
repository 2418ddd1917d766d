"""MLX rules of the structural primitives: shapes, slices, padding, concatenation, gathers, scatters.

They register into ``common.RULES``; semantics as the numpy reference (``lowering/numpy/``): gathers clamp,
scatters drop out-of-bounds indices, padding with interior and negative widths.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.mlx.common import RULES, constant, expression, mx_dtype, mx, rule

# ------------------------------------------------------------------------------ structural

@rule(P.iota)
def _iota(params, in_avals, out_avals):
    d, shape, dim = params["dtype"], params["shape"], params["dimension"]
    md = mx_dtype(d)
    inter = [1] * len(shape)
    inter[dim] = shape[dim]
    count_dtype = mx.int64 if d in (dtypes.int64, dtypes.uint64) else mx.int32

    return expression("mx.broadcast_to(mx.arange({n}, dtype={count}).astype({md}).reshape({inter}), {shape})", 0,
                      n=shape[dim], count=count_dtype, md=md, inter=inter, shape=shape)


@rule(P.broadcast_in_dim)
def _broadcast_in_dim(params, in_avals, out_avals):
    shape, bd = params["shape"], params["broadcast_dimensions"]
    inter = [1] * len(shape)
    for i, dim in enumerate(bd):
        inter[dim] = in_avals[0].shape[i]
    # (a reshape or broadcast to the shape an array has returns the array itself in MLX: left out, same graph)
    consts = {} if tuple(inter) == tuple(in_avals[0].shape) else {"inter": inter}
    x = "{0}.reshape({inter})" if consts else "{0}"
    if tuple(shape) != tuple(inter):
        x, consts["shape"] = f"mx.broadcast_to({x}, {{shape}})", shape
    return expression(x, 1, **consts)


@rule(P.reshape)
def _reshape(params, in_avals, out_avals):
    return expression("{0}.reshape({shape})", 1, shape=list(params["new_sizes"]))


@rule(P.transpose, shape_free=True)
def _transpose(params, in_avals, out_avals):
    return expression("mx.transpose({0}, {perm})", 1, perm=list(params["permutation"]))


@rule(P.rev)
def _rev(params, in_avals, out_avals):
    dims = set(params["dimensions"])
    if not dims:
        return lambda x: x
    idx = tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(in_avals[0].ndim))
    return lambda x: x[idx]


@rule(P.slice_p)
def _slice(params, in_avals, out_avals):
    idx = tuple(slice(s, l, st) for s, l, st in zip(params["start_indices"], params["limit_indices"],
                                                     params["strides"], strict=True))
    if out_avals[0].size == 0:
        md, shape = mx_dtype(out_avals[0].dtype), out_avals[0].shape
        return lambda x: mx.zeros(shape, md)
    return expression("{0}[{idx}]", 1, idx=idx)


def _clamped_index(s, d, hi):
    """A rank-0 integer index clamped into [0, hi], as int32 (clamped in its own dtype when wide)."""
    if d.itemsize >= 4:
        return mx.clip(s, 0, hi).astype(mx.int32)
    return mx.clip(s.astype(mx.int32), 0, hi)


def _clamped_text(s, d, hi):
    """``_clamped_index`` as a ``common.expression`` template: ``s`` and ``hi`` are its fields' text."""
    if d.itemsize >= 4:
        return f"mx.clip({s}, 0, {hi}).astype(mx.int32)"
    return f"mx.clip({s}.astype(mx.int32), 0, {hi})"


@rule(P.dynamic_slice)
def _dynamic_slice(params, in_avals, out_avals):
    sizes = tuple(params["slice_sizes"])
    x_aval = in_avals[0]
    if x_aval.ndim == 0:
        return lambda x: x
    if out_avals[0].size == 0:
        md = mx_dtype(x_aval.dtype)
        return lambda x, *starts: mx.zeros(sizes, md)
    his = [n - k for n, k in zip(x_aval.shape, sizes, strict=True)]
    axes, starts, bounds = _moving_axes(his, in_avals[1:], 1)
    if not axes:   # the slice is the whole array: every start clamps to 0
        return lambda x, *starts: x
    return expression(f"mx.slice({{0}}, {starts}, {{axes}}, {{sizes}})", len(in_avals), axes=axes, sizes=sizes,
                      **bounds)


def _moving_axes(his, start_avals, first):
    """``(axes, starts, bounds)``: the axes whose start can move (``hi > 0``: a start on any other axis clamps to 0,
    so it is not read), ``starts``, the expression (a ``common.expression`` template; the starts are its
    arguments from ``{first}`` on, their bounds its constants ``hi{axis}``) of their clamped starts as one int32
    array, and those bounds by name. A KV cache's one-token update moves along one axis of four: 4 graph nodes
    where clamping and stacking every axis's start made 13 (MLX evaluates every node: ~2-3 us each on the CPU)."""
    axes = tuple(i for i, h in enumerate(his) if h > 0)
    return axes, "mx.stack([" + ", ".join(_clamped_text(f"{{{first + i}}}", start_avals[i].dtype, f"{{hi{i}}}")
                                          for i in axes) + "])", {f"hi{i}": his[i] for i in axes}


@rule(P.dynamic_update_slice)
def _dynamic_update_slice(params, in_avals, out_avals):
    x_aval, u_aval = in_avals[0], in_avals[1]
    if x_aval.ndim == 0:
        return lambda x, u: u
    if u_aval.size == 0:
        return lambda x, u, *starts: x
    his = [n - k for n, k in zip(x_aval.shape, u_aval.shape, strict=True)]
    axes, starts, bounds = _moving_axes(his, in_avals[2:], 2)
    if not axes:   # the update covers the whole array
        return lambda x, u, *starts: u
    return expression(f"mx.slice_update({{0}}, {{1}}, {starts}, {{axes}})", len(in_avals), axes=axes, **bounds)


@rule(P.pad)
def _pad(params, in_avals, out_avals):
    config = params["padding_config"]
    shape = in_avals[0].shape
    out_shape = out_avals[0].shape
    md = mx_dtype(in_avals[0].dtype)
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config]
    if out_avals[0].size == 0:
        return lambda x, pv: mx.zeros(out_shape, md)

    def f(x, pv):
        cur = list(shape)
        for a, (_, _, interior) in enumerate(config):
            n = cur[a]
            if interior and n > 1:
                # (.., n, ..) -> (.., n, 1 + interior, ..) padded with pv -> merged -> last gap cut off
                y = mx.expand_dims(x, a + 1)
                pw = [(0, 0)] * (len(cur) + 1)
                pw[a + 1] = (0, interior)
                y = mx.pad(y, pw, constant_values=pv)
                merged = cur[:a] + [n * (1 + interior)] + cur[a + 1:]
                y = y.reshape(merged)
                cur[a] = n + (n - 1) * interior
                x = y[tuple(slice(0, cur[a]) if i == a else slice(None) for i in range(len(cur)))]
        if any(w != (0, 0) for w in widths):
            x = mx.pad(x, widths, constant_values=pv)
            cur = [n + lo + hi for n, (lo, hi) in zip(cur, widths, strict=True)]
        crop = tuple(slice(-lo if lo < 0 else 0, n + hi if hi < 0 else n)
                     for n, (lo, hi, _) in zip(cur, config, strict=True))
        if any(lo < 0 or hi < 0 for lo, hi, _ in config):
            x = x[crop]
        return x
    return f


#: Concatenations of more operands than this are a plain function of ``*arrays``, not ``expression``'s generated
#: one: its source (and ``compile``'s time, ~0.2 s for ``fnp.stack`` of 5,000 arrays, issue 28) grows with the
#: count, and each count is a template of its own.
CONCATENATE_INLINE_MAX = 32


@rule(P.concatenate, shape_free=True)
def _concatenate(params, in_avals, out_avals):
    n = len(in_avals)
    dim = params["dimension"]
    if n > CONCATENATE_INLINE_MAX:
        def concatenate(*xs):
            return mx.concatenate(list(xs), axis=dim)
        return concatenate
    return expression("mx.concatenate([" + ", ".join(f"{{{i}}}" for i in range(n)) + "], axis={dim})", n, dim=dim)


def _front(ndim, axes):
    """The permutation that moves ``axes`` to the front (in order), and its inverse."""
    perm = list(axes) + [i for i in range(ndim) if i not in axes]
    inv = [0] * ndim
    for i, p in enumerate(perm):
        inv[p] = i
    return perm, inv, perm == list(range(ndim))


def _index_parts(indices, idx_dtype, axes, shape):
    """The clamped per-axis index arrays (int32) of a gather's ``indices``."""
    parts = []
    for k, a in enumerate(axes):
        col = indices[..., k]
        parts.append(_clamped_index(col, idx_dtype, shape[a] - 1))
    return parts


@rule(P.gather)
def _gather(params, in_avals, out_avals):
    axes = tuple(params["axes"])
    x_aval, i_aval = in_avals
    out_shape = out_avals[0].shape
    md = mx_dtype(x_aval.dtype)
    if any(x_aval.shape[a] == 0 for a in axes) or out_avals[0].size == 0:
        return lambda x, indices: mx.zeros(out_shape, md)
    perm, _, ident = _front(x_aval.ndim, axes)

    def f(x, indices):
        parts = _index_parts(indices, i_aval.dtype, axes, x_aval.shape)
        moved = x if ident else mx.transpose(x, perm)
        if len(parts) == 1:
            return mx.take(moved, parts[0], axis=0)
        return moved[tuple(parts)]
    return f


def _scatter_identity(kind, d):
    if kind == "add":
        return complex(-0.0, -0.0) if dtypes.is_complex(d) else (-0.0 if dtypes.is_float(d) else 0)
    if kind == "multiply":
        return 1
    if kind == "minimum":
        return True if d == dtypes.bool_ else (np.inf if dtypes.is_inexact(d) else np.iinfo(d).max)
    return False if d == dtypes.bool_ else (-np.inf if dtypes.is_inexact(d) else np.iinfo(d).min)


def _scatter(kind):
    def factory(params, in_avals, out_avals):
        axes = tuple(params["axes"])
        x_aval, i_aval, u_aval = in_avals
        d = x_aval.dtype
        if i_aval.size == 0 or u_aval.size == 0 or any(x_aval.shape[a] == 0 for a in axes):
            return lambda x, indices, updates: x
        k = kind
        if d == dtypes.bool_ and kind in ("add", "multiply"):
            k = "maximum" if kind == "add" else "minimum"  # bool add is or, bool multiply is and
        perm, inv, ident = _front(x_aval.ndim, axes)
        sizes = [x_aval.shape[a] for a in axes]
        idt = i_aval.dtype
        zero_i = constant(0, idt)
        bounds = [constant(n, idt) if n <= np.iinfo(idt).max else None for n in sizes]
        fill = constant(_scatter_identity(k, d), d) if k != "set" else None
        nan_propagating = k in ("maximum", "minimum") and dtypes.is_float(d)  # docs/design.md: max/min propagate NaN

        def valid(indices):
            ok = None
            for j, b in enumerate(bounds):
                col = indices[..., j]
                c = col >= zero_i
                if b is not None:
                    c = c & (col < b)
                ok = c if ok is None else ok & c
            return ok

        def f(x, indices, updates):
            ok = valid(indices)
            parts = _index_parts(indices, idt, axes, x_aval.shape)
            moved = x if ident else mx.transpose(x, perm)
            if k == "set":
                # Out-of-bounds updates go to an extra slot past the end of each axis, cut off afterwards.
                pw = [(0, 1) if i < len(axes) else (0, 0) for i in range(x_aval.ndim)]
                padded = mx.pad(moved, pw)
                parts = [mx.where(ok, p, n) for p, n in zip(parts, sizes, strict=True)]
                padded[tuple(parts)] = updates
                out = padded[tuple(slice(0, n) for n in sizes)]
            else:
                okb = ok.reshape(ok.shape + (1,) * (updates.ndim - ok.ndim))
                upd = mx.where(okb, updates, fill)
                where = tuple(parts) if len(parts) > 1 else parts[0]
                if nan_propagating:
                    # MLX's scatter maximum/minimum compare with a NaN losing (x.at[i].maximum(1.5) of a NaN
                    # gives 1.5, and a NaN update followed by 0 gives 0): scatter without NaNs, then put
                    # a NaN where the operand had one or any in-bounds update to that element was one.
                    u_nan = mx.isnan(upd)
                    hits = mx.zeros(moved.shape, dtype=mx.int32).at[where].add(u_nan.astype(mx.int32))
                    out = getattr(moved.at[where], k)(mx.where(u_nan, fill, upd))
                    out = mx.where(mx.isnan(moved) | (hits > 0), constant(np.nan, d), out)
                else:
                    out = getattr(moved.at[where], k)(upd)
            return out if ident else mx.transpose(out, inv)
        return f
    return factory


RULES[P.scatter] = _scatter("set")
RULES[P.scatter_add] = _scatter("add")
RULES[P.scatter_mul] = _scatter("multiply")
RULES[P.scatter_min] = _scatter("minimum")
RULES[P.scatter_max] = _scatter("maximum")
