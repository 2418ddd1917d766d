"""The window kernels: ``reduce_window_sum/max/min`` and the max/min gradients as kernels.

Every kernel here owns its output elements (no atomics, deterministic) and walks window taps in
row-major order, as the reference (``fnarray.lowering.numpy.windows``) does:

- ``reduce_window_*``: one work item per output element; taps that fall into padding or between
  base-dilated elements hold the identity, so they are skipped. The operand is read through the
  emitter, so its elementwise producers (a ReLU before a pooling) are computed in the same kernel,
  and the elementwise ops on the result fuse as an epilogue.
- ``select_and_gather_add`` (the JVP of a max/min pooling): per output element, the scan that finds
  the window's first maximal (minimal) element, a NaN counting as maximal, with the tangent beside it.
- ``select_and_scatter_add`` (its transpose, the pooling's gradient): one work item per operand
  element, which visits each window containing it, repeats that window's scan and adds the window's
  source value when the scan selects this element: ``prod(window)**2`` taps per element, no scatter.

Padding and holes take part in the scans with the value the reference gives them (the dtype's lowest
value for a max, its highest for a min), so ties with them resolve as there.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.core.ir import Var
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import (
    Group,
    Tracker,
    analyse_val,
    contiguous_strides,
    index_vars,
    kernel_name,
    make_launch,
)
from fnarray.lowering.kernels.index import ix_const, ix_data
from fnarray.lowering.kernels.ir import BOOL, INT32, const
from fnarray.lowering.kernels.rules import add_of, convert, highest, lowest, max_of, min_of, op, select
from fnarray.lowering.zero_size import IDENTITY, REWRITES, fill

__all__ = ["WindowGroup", "SelectGroup", "GROUPS", "OPERAND_VIEWS"]

_REDUCE = {W.reduce_window_sum_p: "add", W.reduce_window_max_p: "max", W.reduce_window_min_p: "min"}


class _Window:
    """The static window parameters of one equation, per dimension."""

    def __init__(self, params, shape):
        self.shape = tuple(shape)
        self.dims = tuple(params["window_dimensions"])
        self.strides = tuple(params["window_strides"])
        self.pad_lo = tuple(lo for lo, _ in params["padding"])
        self.bdil = tuple(params["base_dilation"])
        self.wdil = tuple(params["window_dilation"])
        self.taps = math.prod(self.dims)

    def position(self, b, d, y, w):
        """``(ok, p)``: whether tap ``w`` of the window at output position ``y`` (dimension ``d``) reads an
        operand element, and which; ``y`` and ``w`` are kernel expressions."""
        q = b.let(op("sub", op("mul", y, const(self.strides[d], INT32)), const(self.pad_lo[d], INT32)))
        if not isinstance(w, int) or w:
            q = b.let(op("add", q, op("mul", w if not isinstance(w, int) else const(w, INT32),
                                      const(self.wdil[d], INT32))))
        n, bd = self.shape[d], self.bdil[d]
        if bd > 1:
            qc = b.let(select(op("lt", q, const(0, INT32)), const(0, INT32), q))
            p = b.let(op("div", qc, const(bd, INT32)))
            on_grid = op("eq", op("rem", qc, const(bd, INT32)), const(0, INT32))
            ok = op("land", op("land", op("ge", q, const(0, INT32)), on_grid), op("lt", p, const(n, INT32)))
        else:
            p = q
            ok = op("land", op("ge", q, const(0, INT32)), op("lt", q, const(n, INT32)))
        return b.let(ok), p

    def index(self, b, ps):
        """The operand index (``Ix``) of in-range positions ``ps``, clamped so that it is safe to read."""
        out = []
        for p, n in zip(ps, self.shape, strict=True):
            if n == 1:
                out.append(ix_const(0))
                continue
            pc = b.let(select(op("lt", p, const(0, INT32)), const(0, INT32),
                              select(op("gt", p, const(n - 1, INT32)), const(n - 1, INT32), p)))
            out.append(ix_data(pc, 0, n - 1))
        return tuple(out)


def _coords(idx):
    """Kernel expressions of an output index tuple (``Ix``) from ``index_vars``."""
    from fnarray.lowering.kernels.index import to_expr
    return [to_expr(i) for i in idx]


def _tap_loops(b, win, body, d=0, taps=()):
    """Nested loops over the window taps (row-major), calling ``body(taps)`` innermost."""
    if d == len(win.dims):
        body(list(taps))
        return
    with b.loop(const(0, INT32), const(win.dims[d], INT32)) as w:
        _tap_loops(b, win, body, d + 1, (*taps, w))


def _flat_tap(win, taps):
    """The row-major number of a tap (kernel expression)."""
    e = const(0, INT32)
    for w, n in zip(taps, win.dims, strict=True):
        e = op("add", op("mul", e, const(n, INT32)), w)
    return e


def _fill_value(prim_kind, dtype):
    """The value padding and holes hold: the reduction's identity."""
    if prim_kind == "add":
        return const(0, dtype)
    return lowest(dtype) if prim_kind == "max" else highest(dtype)


class WindowGroup(Group):
    """One ``reduce_window_*`` with its operand's producers inlined and its consumers as an epilogue."""

    kind = "window"
    accepts_roots = True

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.products.append(out)
        self.win = _Window(eqn.params, eqn.inputs[0].aval.shape)

    def analyse(self):
        analyse_val(self, self.eqn.inputs[0])

    def codegen(self):
        ctx = self.ctx
        n = math.prod(self.shape)
        if n == 0:
            return []
        e = self.eqn
        x, out = e.inputs[0], e.outputs[0]
        kind = _REDUCE[e.primitive]
        b, args, tracker, em = self._kernel_start()
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        d = x.aval.dtype
        adt = np.dtype(np.float32) if d == np.float16 else d
        with b.when(op("lt", gid, const(n, INT32))):
            idx = index_vars(b, gid, self.shape)
            ys = _coords(idx)
            acc = b.var(adt, _fill_value(kind, adt))

            def body(taps):
                ok, ps = None, []
                for dim, w in enumerate(taps):
                    okd, p = self.win.position(b, dim, ys[dim], w)
                    ok = okd if ok is None else b.let(op("land", ok, okd))
                    ps.append(p)
                with b.when(ok if ok is not None else const(True, BOOL)):
                    v = b.let(convert(b, em.val(x, self.win.index(b, ps)), adt))
                    comb = add_of if kind == "add" else (max_of if kind == "max" else min_of)
                    b.assign(acc, comb(b, acc, v))

            _tap_loops(b, self.win, body)
            res = b.let(convert(b, acc, out.aval.dtype))
            em.seed(out, idx, res)
            if out in ctx.needed:
                b.store(ctx.output(b, args, out), gid, res)
            self.emit_roots(b, em, args, idx, gid)
        b.name = kernel_name("window", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "window")]


class SelectGroup(Group):
    """``select_and_gather_add`` (per window) or ``select_and_scatter_add`` (per operand element)."""

    kind = "window"
    accepts_roots = True

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.products.append(out)
        operand = eqn.inputs[1]
        self.win = _Window(eqn.params, operand.aval.shape)
        self.greater = eqn.params["select_prim"] is P.ge
        self.wshape = W.window_out_shape(eqn.primitive.name, operand.aval.shape,
                                         **{k: eqn.params[k] for k in ("window_dimensions", "window_strides",
                                                                        "padding", "base_dilation",
                                                                        "window_dilation")})

    def analyse(self):
        analyse_val(self, *self.eqn.inputs)

    def _scan(self, b, em, ys, on_tap):
        """The selection scan of the window at output position ``ys``: returns the selected tap's number
        (a mutable local); ``on_tap(taps, flat, ok, ps)`` may record values per tap as it goes."""
        operand = self.eqn.inputs[1]
        d = operand.aval.dtype
        floating = d.kind == "f"
        pad = lowest(d) if self.greater else highest(d)
        best = b.var(d, pad, "best")
        best_nan = b.var(BOOL, const(False, BOOL), "bnan")
        index = b.var(INT32, const(-1, INT32), "sel")

        def body(taps):
            ok, ps = None, []
            for dim, w in enumerate(taps):
                okd, p = self.win.position(b, dim, ys[dim], w)
                ok = okd if ok is None else b.let(op("land", ok, okd))
                ps.append(p)
            flat = b.let(_flat_tap(self.win, taps), "tap")
            v = em.val(operand, self.win.index(b, ps))
            if ok is not None:
                v = b.let(select(ok, v, pad))
            better = op("gt", v, best) if self.greater else op("lt", v, best)
            first = op("lt", index, const(0, INT32))
            if floating:
                vnan = b.let(op("isnan", v, dtype=BOOL))
                better = op("land", op("lor", better, vnan), op("lnot", best_nan))
                take = b.let(op("lor", first, better))
                b.assign(best_nan, op("lor", best_nan, vnan))
            else:
                take = b.let(op("lor", first, better))
            b.assign(best, select(take, v, best))
            b.assign(index, select(take, flat, index))
            if on_tap is not None:
                on_tap(take, ok, ps)

        _tap_loops(b, self.win, body)
        return index

    def codegen(self):
        ctx = self.ctx
        n = math.prod(self.shape)
        if n == 0:
            return []
        e = self.eqn
        first, _operand = e.inputs
        out = e.outputs[0]
        b, args, tracker, em = self._kernel_start()
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        dt = out.aval.dtype
        adt = np.dtype(np.float32) if dt == np.float16 else dt
        launches = []
        selected = None
        if e.primitive is W.select_and_scatter_add_p and self._two_pass():
            selected, first_launch = self._selections()
            launches.append(first_launch)
        with b.when(op("lt", gid, const(n, INT32))):
            idx = index_vars(b, gid, self.shape)
            here = _coords(idx)
            if e.primitive is W.select_and_gather_add_p:
                acc = b.var(adt, const(0, adt), "tan")

                def on_tap(take, ok, ps):
                    t = b.let(convert(b, em.val(first, self.win.index(b, ps)), adt))
                    if ok is not None:
                        t = b.let(select(ok, t, const(0, adt)))
                    b.assign(acc, select(take, t, acc))

                self._scan(b, em, here, on_tap)
            else:
                acc = self._scatter(b, em, first, here, adt, selected, args)
            res = b.let(convert(b, acc, dt))
            em.seed(out, idx, res)
            if out in ctx.needed:
                b.store(ctx.output(b, args, out), gid, res)
            self.emit_roots(b, em, args, idx, gid)
        b.name = kernel_name("select", tracker.eqns)
        return launches + [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "window")]

    def _two_pass(self) -> bool:
        """Whether the scatter first writes every window's selected tap (``taps`` loop iterations per work
        item twice) rather than repeating the scans (``taps**2``): for large windows, and where the target
        caps loop lengths below the one-pass count."""
        taps = self.win.taps
        cap = getattr(self.ctx.caps, "max_loop_iterations", None)
        return taps > 16 or (cap is not None and 2 * taps * (taps + 1) > cap)

    def _selections(self):
        """``(buffer, launch)``: a kernel writing each window's selected tap number (int32, -1: none)."""
        ctx = self.ctx
        m = math.prod(self.wshape)
        spec = ctx.spec(("selected", id(self)), self.wshape, INT32)
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        tracker.add(self.eqn)
        em = ctx.emitter(b, args=args, tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, m, ctx.wg)
        with b.when(op("lt", gid, const(m, INT32))):
            ys = _coords(index_vars(b, gid, self.wshape))
            sel = self._scan(b, em, ys, None)
            name = b.buffer(spec, INT32, True, "sel")
            args[name] = spec
            b.store(name, gid, sel)
        b.name = kernel_name("select_taps", tracker.eqns)
        return spec, make_launch(b, args, {}, gsize, lsize, tracker.eqns, "window")

    def _scatter(self, b, em, source, ps, adt, selected=None, args=None):
        """The sum, over the windows that contain operand element ``ps``, of their source value where
        their scan selects it (the scan repeated here, or its result read from buffer ``selected``)."""
        win = self.win
        acc = b.var(adt, const(0, adt), "grad")

        def body(taps):
            # Window y covers ps through tap w when y * stride = ps * base_dilation + pad_lo - w * window_dilation.
            ok, ys = None, []
            for d, w in enumerate(taps):
                t = b.let(op("sub", const(win.pad_lo[d], INT32), op("mul", w, const(win.wdil[d], INT32))))
                t = b.let(op("add", t, op("mul", ps[d], const(win.bdil[d], INT32))))
                s, m = win.strides[d], self.wshape[d]
                tc = b.let(select(op("lt", t, const(0, INT32)), const(0, INT32), t))
                y = b.let(op("div", tc, const(s, INT32))) if s > 1 else tc
                okd = op("land", op("ge", t, const(0, INT32)), op("lt", y, const(m, INT32)))
                if s > 1:
                    okd = op("land", okd, op("eq", op("rem", tc, const(s, INT32)), const(0, INT32)))
                okd = b.let(okd)
                ok = okd if ok is None else b.let(op("land", ok, okd))
                ys.append(y)
            flat = b.let(_flat_tap(win, taps), "mine")
            with b.when(ok):
                yidx = tuple(ix_data(b.let(select(op("lt", y, const(m - 1, INT32)), y, const(m - 1, INT32))), 0,
                                     m - 1) if m > 1 else ix_const(0) for y, m in zip(ys, self.wshape, strict=True))
                if selected is None:
                    sel = self._scan(b, em, ys, None)
                else:
                    name = b.buffer(selected, INT32, False, "sel")
                    args[name] = selected
                    lin = const(0, INT32)
                    for y, m in zip(ys, self.wshape, strict=True):
                        ym = b.let(select(op("lt", y, const(m - 1, INT32)), y, const(m - 1, INT32)))
                        lin = op("add", op("mul", lin, const(m, INT32)), ym)
                    sel = b.load(name, b.let(lin), INT32)
                with b.when(op("eq", sel, flat)):
                    v = b.let(convert(b, em.val(source, yidx), adt))
                    b.assign(acc, add_of(b, acc, v))

        _tap_loops(b, win, body)
        return acc


def _operand_buffer(ctx, a):
    """The select kernels read their operands many times per work item: they get buffers."""
    return (a, 0, contiguous_strides(a.aval.shape)) if isinstance(a, Var) else None


def _reduce_zero_size(e):
    """A window reduction of an empty operand with a non-empty result (all padding): the identity."""
    prim = {W.reduce_window_sum_p: P.reduce_sum, W.reduce_window_max_p: P.reduce_max,
            W.reduce_window_min_p: P.reduce_min}[e.primitive]
    return [fill(e.outputs[0], IDENTITY[prim](e.inputs[0].aval.dtype))], {}


def _select_zero_size(e):
    """No operand elements (or no windows): every result element is 0."""
    return [fill(e.outputs[0], 0)], {}


#: What ``schedule`` collects into its tables ``GROUPS`` and ``OPERAND_VIEWS``.
GROUPS: dict = {}
OPERAND_VIEWS: dict = {}
for _p in _REDUCE:
    GROUPS[_p] = WindowGroup
    REWRITES.setdefault(_p, _reduce_zero_size)
for _p in (W.select_and_gather_add_p, W.select_and_scatter_add_p):
    GROUPS[_p] = SelectGroup
    OPERAND_VIEWS[_p] = _operand_buffer
    REWRITES.setdefault(_p, _select_zero_size)
