"""Cumulative kernels (``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp``): ``CumulativeGroup``.

A work-item per line scanning it serially; or, for few long lines where the target has local memory, a
work-group per line: each work-item scans one contiguous chunk of the line's aggregate, work-item 0 scans
the chunks' aggregates in local memory (exclusive prefixes), and each work-item scans its chunk again
from its prefix, storing (the "reduce, then scan" form; three phases, two barriers).
"""

from __future__ import annotations

import math

from fnarray.core import primitives as P
from fnarray.lowering.kernels.emitter import Flat, NotFlat
from fnarray.lowering.kernels.groups.base import (
    CUMULATIVE,
    Group,
    analyse_val,
    index_vars,
    kernel_name,
    linear_index,
    make_launch,
)
from fnarray.lowering.kernels.index import ix_const, ix_data, linearize
from fnarray.lowering.kernels.ir import INT32, Special, const
from fnarray.lowering.kernels.rules import (
    add_of,
    logaddexp,
    max_of,
    min_of,
    mul_of,
    op,
    select,
)

# ---------------------------------------------------------------------------- cumulative ops


class CumulativeGroup(Group):
    kind = "cumulative"

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.x = eqn.inputs[0]
        self.products.append(out)

    def analyse(self):
        analyse_val(self, self.x)

    def codegen(self):
        shape = self.shape
        axis = self.eqn.params["axis"]
        L = shape[axis]
        lines = math.prod(shape) // L if L else 0
        if lines == 0 or L == 0:
            return []
        if self.cooperative(lines, L):
            return self._gen(lines, L, math.prod(shape[axis + 1:]), flat=False, wg=self.coop_size(L))
        try:
            return self._gen(lines, L, math.prod(shape[axis + 1:]), flat=True)
        except NotFlat:
            return self._gen(lines, L, math.prod(shape[axis + 1:]), flat=False)

    def cooperative(self, lines, L) -> bool:
        """Whether each line gets a work-group (few long lines), as the reductions' rule."""
        caps = self.ctx.caps
        return bool(L > 64 and lines < 1024 and caps.local_memory
                    and (caps.max_dispatch is None or lines <= caps.max_dispatch))

    def coop_size(self, L) -> int:
        wg = 1 << min(int(math.log2(self.ctx.wg * 2)), (L - 1).bit_length())
        cap = self.ctx.caps.max_workgroup_size or wg
        while wg > cap:
            wg //= 2
        return wg

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

    def _gen(self, lines, L, inner, flat, wg=None):
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start()
        scalars = {}
        out = self.eqn.outputs[0]
        reverse = self.eqn.params.get("reverse", False)
        axis = self.eqn.params["axis"]
        dt = out.aval.dtype
        if wg is not None:
            gid = Special("group_id", 0)
            gsize, lsize = (lines * wg,), (wg,)
            self._coop(b, em, args, gid, Special("local_id", 0), wg, L, dt, reverse, axis)
            b.name = kernel_name("scan", tracker.eqns)
            return [make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "cumulative", fixed_local=True)]
        gid, gsize, lsize = ctx.gid(b, lines, ctx.wg)
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
                oidx = index_vars(b, gid, other) if other else ()

                def at(t):
                    tix = ix_data(t, 0, L - 1) if L > 1 else ix_const(0)
                    it = iter(oidx)
                    idx = tuple(tix if d == axis else next(it) for d in range(len(self.shape)))
                    return idx, b.let(linear_index(linearize(idx, self.shape)), "pos")

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
        b.name = kernel_name("scan", tracker.eqns)
        return [make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "cumulative")]

    def _coop(self, b, em, args, line, lid, wg, L, dt, reverse, axis):
        """The work-group scan of line ``line`` (see the module docstring); no barrier under a condition."""
        ctx = self.ctx
        out = self.eqn.outputs[0]
        chunk = -(-L // wg)
        n_chunks = -(-L // chunk)
        other = tuple(n for d, n in enumerate(self.shape) if d != axis)
        oidx = index_vars(b, line, other) if other else ()

        def at(t):
            t = b.let(op("sub", const(L - 1, INT32), t)) if reverse else t
            it = iter(oidx)
            idx = tuple(ix_data(t, 0, L - 1) if d == axis else next(it) for d in range(len(self.shape)))
            return idx, b.let(linear_index(linearize(idx, self.shape)), "pos")

        lo = b.let(op("mul", lid, const(chunk, INT32)), "lo")
        hi = b.let(select(op("lt", op("add", lo, const(chunk, INT32)), const(L, INT32)),
                          op("add", lo, const(chunk, INT32)), const(L, INT32)), "hi")
        aggs = b.array("local", dt, wg, "agg")
        pres = b.array("local", dt, wg, "pre")
        with b.when(op("lt", lo, hi)):   # phase 1: the chunk's aggregate
            acc = b.var(dt, em.val(self.x, at(lo)[0]))
            with b.loop(op("add", lo, const(1, INT32)), hi) as t:
                b.assign(acc, self._combine(b, acc, em.val(self.x, at(t)[0])))
            b.store(aggs, lid, acc, space="local")
        b.barrier()
        with b.when(op("eq", lid, const(0, INT32))):   # phase 2: exclusive prefixes of the aggregates
            run = b.var(dt, b.load(aggs, const(0, INT32), dt, "local"))
            with b.loop(const(1, INT32), const(n_chunks, INT32)) as k:
                b.store(pres, k, run, space="local")
                b.assign(run, self._combine(b, run, b.load(aggs, k, dt, "local")))
        b.barrier()
        name = ctx.output(b, args, out)
        with b.when(op("lt", lo, hi)):   # phase 3: the chunk again, from its prefix
            idx0, pos0 = at(lo)
            first = b.let(em.val(self.x, idx0))
            acc = b.var(dt, first)
            with b.when(op("gt", lid, const(0, INT32))):
                b.assign(acc, self._combine(b, b.load(pres, lid, dt, "local"), first))
            b.store(name, pos0, acc)
            with b.loop(op("add", lo, const(1, INT32)), hi) as t:
                idx, pos = at(t)
                b.assign(acc, self._combine(b, acc, em.val(self.x, idx)))
                b.store(name, pos, acc)


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {p: CumulativeGroup for p in CUMULATIVE}
