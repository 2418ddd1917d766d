"""Scatter kernels (``scatter``, ``scatter_add``/``mul``/``min``/``max``): ``ScatterGroup``.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.lowering.kernels.groups.base import SCATTERS, Group, analyse_val, index_vars, kernel_name, make_launch
from fnarray.lowering.kernels.index import ix_data, ix_var, linearize, unravel
from fnarray.lowering.kernels.ir import INT32, Cast, const
from fnarray.lowering.kernels.rules import (
    add_of,
    max_of,
    min_of,
    mul_of,
    op,
)

# ---------------------------------------------------------------------------- scatter


#: Parallel lanes assumed of a CPU adapter when ``_plan_columns`` weighs the column kernel's fewer work items
#: (lavapipe: 8-wide SIMD over invocations on 2 threads).
CPU_LANES = 16


class ScatterGroup(Group):
    """Each work item owns one output element and walks the updates in order: deterministic, no atomics.

    With the scheduler option ``scatter_columns`` (webgpu on a CPU adapter), where it costs less, each work
    item owns a *column* instead: every output element with the same coordinates outside the scattered axes.
    It copies the operand's column (or a first kernel copies the whole operand, where the columns are few or
    long), then walks the updates in order, combining each into the element it addresses: the same order of
    combination per element (so the same result, bit for bit), ``u`` steps per column instead of ``u`` per
    element. An embedding gradient of 1,024 rows into a 1,536 x 64 table: 98,304 work items of 1,024 steps
    became 64 of 2,560; a one-hot target's gradient (every axis scattered) one work item of 1,024 steps after
    a copy kernel.
    """

    kind = "scatter"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.append(eqn.outputs[0])

    def analyse(self):
        analyse_val(self, *self.eqn.inputs)

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        x, indices, updates = e.inputs
        axes = e.params["axes"]
        out = e.outputs[0]
        n = out.aval.size
        if n == 0:
            return []
        batch = indices.aval.shape[:-1]
        nb = math.prod(batch)
        columns = self._plan_columns(nb)
        if columns is not None:
            return self._columns(batch, nb, columns == "copy first")
        b, args, tracker, em = self._kernel_start()
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        dt = out.aval.dtype
        with b.when(op("lt", gid, const(n, INT32))):
            idx = index_vars(b, gid, self.shape)
            acc = b.var(dt, em.val(x, idx))
            rest = tuple(i for d, i in enumerate(idx) if d not in axes)
            with b.loop(const(0, INT32), const(nb, INT32)) as bi:
                bidx = unravel(ix_var(bi.name, nb), batch) if batch else ()
                match = None
                for k, a in enumerate(axes):
                    pos = em.val(indices, tuple(bidx) + (ix_data(const(k, INT32), k, k),))
                    here = Cast(em.index_expr(idx[a]), pos.dtype) if pos.dtype != INT32 else em.index_expr(idx[a])
                    m = b.let(op("eq", pos, here))
                    match = m if match is None else b.let(op("land", match, m))
                with b.when(match if match is not None else const(True, np.bool_)):
                    u = em.val(updates, tuple(bidx) + rest)
                    b.assign(acc, self._combine(b, acc, u))
            b.store(ctx.output(b, args, out), gid, acc)
        b.name = kernel_name("scatter", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "scatter")]

    def _plan_columns(self, nb):
        """``None`` (the element kernel), ``"one kernel"`` or ``"copy first"`` (the column kernel, after a
        kernel copying the operand): the column kernel where asked for, within the target's loop limit,
        and less work than the element kernel's (its fewer work items counted as at least ``CPU_LANES``)."""
        if not self.ctx.opts.get("scatter_columns", False) or nb == 0:
            return None
        shape, axes = self.shape, self.eqn.params["axes"]
        cells = math.prod(shape[a] for a in axes)
        columns = math.prod(shape) // max(cells, 1)
        cap = self.ctx.caps.max_loop_iterations or (1 << 30)
        element = cells * columns * nb / CPU_LANES
        if cells + nb <= cap // 2 and columns >= CPU_LANES and (cells + nb) * columns / CPU_LANES < element:
            return "one kernel"
        if nb <= cap // 2 and cells * columns / CPU_LANES + nb * -(-columns // CPU_LANES) < element:
            return "copy first"
        return None

    def _columns(self, batch, nb, copy_first):
        """The column kernel (see the class docstring), after the copy kernel where ``copy_first``."""
        ctx = self.ctx
        x, indices, updates = self.eqn.inputs
        out = self.eqn.outputs[0]
        shape, axes = self.shape, tuple(self.eqn.params["axes"])
        rest_dims = [d for d in range(len(shape)) if d not in axes]
        rshape = tuple(shape[d] for d in rest_dims)
        ashape = tuple(shape[a] for a in axes)
        cells, columns = math.prod(ashape), math.prod(rshape)
        launches = [self._copy_operand()] if copy_first else []
        b, args, tracker, em = self._kernel_start()
        gid, gsize, lsize = ctx.gid(b, columns, ctx.wg)
        dt = out.aval.dtype
        oname = ctx.output(b, args, out)

        def full(rest, at):
            idx = [None] * len(shape)
            for d, i in zip(rest_dims, rest, strict=True):
                idx[d] = i
            for a, i in zip(axes, at, strict=True):
                idx[a] = i
            return tuple(idx)

        with b.when(op("lt", gid, const(columns, INT32))):
            rest = index_vars(b, gid, rshape, "j")
            if not copy_first:
                with b.loop(const(0, INT32), const(cells, INT32)) as c:
                    idx = full(rest, unravel(ix_var(c.name, cells), ashape))
                    b.store(oname, b.let(em.index_expr(linearize(idx, shape))), em.val(x, idx))
            with b.loop(const(0, INT32), const(nb, INT32)) as bi:
                bidx = unravel(ix_var(bi.name, nb), batch) if batch else ()
                ok, at = const(True, np.bool_), []
                for k, a in enumerate(axes):
                    pos = em.val(indices, tuple(bidx) + (ix_data(const(k, INT32), k, k),))
                    d = pos.dtype
                    inside = b.let(op("lt", pos, const(shape[a], d)))
                    if d.kind != "u":
                        inside = b.let(op("land", op("ge", pos, const(0, d)), inside))
                    ok = inside if k == 0 else b.let(op("land", ok, inside))
                    at.append(ix_data(b.let(Cast(pos, INT32)) if d != INT32 else pos, 0, shape[a] - 1))
                with b.when(ok):
                    addr = b.let(em.index_expr(linearize(full(rest, at), shape)))
                    u = em.val(updates, tuple(bidx) + tuple(rest))
                    if self.eqn.primitive != P.scatter:
                        u = self._combine(b, b.load(oname, addr, dt), u)
                    b.store(oname, addr, u)
        b.name = kernel_name("scatter", tracker.eqns)
        return launches + [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "scatter")]

    def _copy_operand(self):
        """A kernel writing the operand into the output buffer, one element per work item."""
        ctx = self.ctx
        x, out = self.eqn.inputs[0], self.eqn.outputs[0]
        b, args, tracker, em = self._kernel_start()
        n = out.aval.size
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, const(n, INT32))):
            b.store(ctx.output(b, args, out), gid, em.val(x, index_vars(b, gid, self.shape)))
        b.name = kernel_name("scatter_copy", tracker.eqns)
        return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "scatter")

    def _combine(self, b, acc, u):
        p = self.eqn.primitive
        if p == P.scatter:
            return u
        if p == P.scatter_add:
            return add_of(b, acc, u)
        if p == P.scatter_mul:
            return mul_of(b, acc, u)
        if p == P.scatter_min:
            return min_of(b, acc, u)
        return max_of(b, acc, u)


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {p: ScatterGroup for p in SCATTERS}
