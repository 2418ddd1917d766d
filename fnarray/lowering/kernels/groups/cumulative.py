"""Cumulative kernels (``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp``): ``_CumGroup``.
"""

from __future__ import annotations

import math

from fnarray.core import primitives as P
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import Flat, NotFlat
from fnarray.lowering.kernels.groups.base import (
    _analyse_val,
    _Group,
    _index_vars,
    _kernel_name,
    _launch,
    _lin,
    _Tracker,
)
from fnarray.lowering.kernels.index import ix_const, ix_data, linearize
from fnarray.lowering.kernels.ir import INT32, const
from fnarray.lowering.kernels.rules import (
    add_of,
    logaddexp,
    max_of,
    min_of,
    mul_of,
    op,
)

# ---------------------------------------------------------------------------- cumulative ops


class _CumGroup(_Group):
    kind = "cumulative"

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.x = eqn.inputs[0]
        self.products.append(out)

    def analyse(self):
        _analyse_val(self, self.x)

    def codegen(self):
        shape = self.shape
        axis = self.eqn.params["axis"]
        L = shape[axis]
        lines = math.prod(shape) // L if L else 0
        if lines == 0 or L == 0:
            return []
        try:
            return self._gen(lines, L, math.prod(shape[axis + 1:]), flat=True)
        except NotFlat:
            return self._gen(lines, L, math.prod(shape[axis + 1:]), flat=False)

    def _combine(self, b, acc, x):
        p = self.eqn.primitive
        if p == P.cumsum:
            return add_of(b, acc, x)
        if p == P.cumprod:
            return mul_of(b, acc, x)
        if p == P.cummax:
            return max_of(b, acc, x)
        if p == P.cummin:
            return min_of(b, acc, x)
        return logaddexp(b, acc, x)

    def _gen(self, lines, L, inner, flat):
        ctx = self.ctx
        b = KernelBuilder("k")
        args, scalars = {}, {}
        tracker = _Tracker(ctx)
        tracker.add(self.eqn)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        out = self.eqn.outputs[0]
        reverse = self.eqn.params.get("reverse", False)
        axis = self.eqn.params["axis"]
        gid, gsize, lsize = ctx.gid(b, lines, ctx.wg)
        dt = out.aval.dtype
        with b.when(op("lt", gid, b.scalar("lines"))):
            scalars["lines"] = lines
            if flat:
                Ls, Is = b.scalar("L"), b.scalar("I")
                scalars.update(L=L, I=inner)
                base = b.let(op("add", op("mul", op("mul", op("div", gid, Is), Ls), Is), op("rem", gid, Is)), "base")

                def at(t):
                    pos = b.let(op("add", base, op("mul", t, Is)), "pos")
                    return Flat(pos), pos
            else:
                other = tuple(n for d, n in enumerate(self.shape) if d != axis)
                oidx = _index_vars(b, gid, other) if other else ()

                def at(t):
                    tix = ix_data(t, 0, L - 1) if L > 1 else ix_const(0)
                    it = iter(oidx)
                    idx = tuple(tix if d == axis else next(it) for d in range(len(self.shape)))
                    return idx, b.let(_lin(linearize(idx, self.shape)), "pos")

            length = b.scalar("L") if flat else const(L, INT32)
            last = b.let(op("sub", length, const(1, INT32)), "last") if reverse else None

            def position(t):
                return b.let(op("sub", last, t)) if reverse else t

            idx0, pos0 = at(position(const(0, INT32)))
            acc = b.var(dt, em.val(self.x, idx0))
            name = ctx.output(b, args, out)
            b.store(name, pos0, acc)
            with b.loop(const(1, INT32), length) as t:
                idx, pos = at(position(t))
                b.assign(acc, self._combine(b, acc, em.val(self.x, idx)))
                b.store(name, pos, acc)
        b.name = _kernel_name("scan", tracker.eqns)
        return [_launch(b, args, scalars, gsize, lsize, tracker.eqns, "cumulative")]
