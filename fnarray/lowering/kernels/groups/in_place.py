"""In-place updates of donated inputs: ``InPlaceUpdateGroup``.

A ``dynamic_update_slice(x, u, *starts)`` or a scatter (``scatter``, ``scatter_add``/``mul``/``min``/``max``)
whose operand ``x`` is a donated input (``schedule``'s ``donate`` option: a jitted call's ``donate_argnums``, an
exported step's state) that nothing else reads, and whose result is the program output that ``x`` is donated to,
is written into ``x``'s buffer: one work item per element of the update stores it at the clamped ``starts`` (a
scatter's: combines every update to its element, in order, where it is the element's first, and drops those out
of bounds); the rest of ``x`` is neither read nor written, and the result shares ``x``'s buffer (as XLA's
``input_output_aliases``). A key/value cache of 1,024 positions then costs one position's bytes per decoding
step instead of a copy of the whole cache.

``in_place_updates(prog, donate)`` finds those equations; the scheduler gives each a group of this kind.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Var
from fnarray.core.passes import read_counts
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import (SCATTERS, MapGroup, Tracker, analyse_val, index_vars, kernel_name,
                                                  make_launch)
from fnarray.lowering.kernels.groups.scatter import combine
from fnarray.lowering.kernels.index import ix_const, ix_data, ix_var, linearize, unravel
from fnarray.lowering.kernels.ir import INT32, Cast, const
from fnarray.lowering.kernels.rules import op

__all__ = ["InPlaceUpdateGroup", "in_place_updates"]


def in_place_updates(prog, donate) -> dict:
    """``{id(eqn): donated input var}`` for the ``dynamic_update_slice`` and scatter equations of ``prog`` that can
    write into their donated operand.

    ``donate`` maps input positions (constvars then invars) to the output position each may become (``None``:
    any output). An equation qualifies when its operand ``x`` is such an input, ``x`` has no other use (no other
    equation, operand or output reads it: an earlier value read after the write would be wrong), and its result
    is that output (and no other output)."""
    if not donate:
        return {}
    inputs = list(prog.constvars) + list(prog.invars)
    donated = {inputs[i]: o for i, o in donate.items() if 0 <= i < len(inputs)}
    uses = read_counts(prog)
    outs = list(prog.outvars)
    found = {}
    for e in prog.eqns:
        if e.primitive is not P.dynamic_update_slice and e.primitive not in SCATTERS:
            continue
        x, o = e.inputs[0], e.outputs[0]
        if not isinstance(x, Var) or x not in donated or uses.get(x) != 1 or x in outs:
            continue
        if _update_of(e).aval.size == 0 or x.aval.size == 0 or outs.count(o) != 1:
            continue
        want = donated[x]
        if want is not None and not (0 <= want < len(outs) and outs[want] is o):
            continue
        found[id(e)] = x
    return found


def _update_of(e):
    """The operand of ``e`` (a ``dynamic_update_slice`` or a scatter) whose elements it writes."""
    return e.inputs[1] if e.primitive is P.dynamic_update_slice else e.inputs[2]


class InPlaceUpdateGroup(MapGroup):
    """A ``dynamic_update_slice`` or scatter written into its donated operand's buffer: a kernel over the
    update's elements (the update's producers computed inline), the operand's other elements untouched. Being a
    map kernel over the update's shape, it also computes the elementwise roots of that size and the guests that
    a map kernel would (the rotated query beside the rotated keys of a cache update)."""

    kind = "update"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, _update_of(eqn).aval.shape)
        self.updates = [eqn]   # the equations this kernel writes in place (more after ``absorb``), in order
        self.products.append(eqn.outputs[0])

    @property
    def eqn(self):
        """The first update's equation."""
        return self.updates[0]

    def analyse(self):
        analyse_val(self, *self.eqn.inputs[1:])

    def can_join(self, host, producer_group, limit) -> bool:
        """Whether this update can be written by the earlier map kernel or in-place update kernel ``host``
        (``producer_group``: var -> group): everything it reads comes from kernels before ``host``, and the
        buffers fit ``limit``."""
        if limit is not None and len(host.reads | self.reads) + len(host.products) + 1 > limit:
            return False
        for r in self.reads:
            pg = producer_group.get(r)
            if pg is not None and pg.index >= host.index:
                return False
        return True

    def take_over(self, host):
        """Become the map kernel ``host``: its roots, guests, products, reads and place, plus the update (the
        kernel iterates over the larger of the two shapes; the smaller one's values become guests)."""
        if math.prod(host.shape) >= math.prod(self.shape):
            self.shape, self.roots, self.guests = host.shape, list(host.roots), list(host.guests)
        else:
            self.guests = list(host.guests) + list(host.roots)
        self.products = list(host.products) + self.products
        self.reads |= host.reads
        self.index = host.index

    def absorb(self, other):
        """Write ``other``'s update too (another cache's, beside this one's: one launch for a layer's keys and
        values); the kernel iterates over the larger of the shapes, the smaller one's values becoming guests."""
        size = _update_of(other.eqn).aval.size
        if size > math.prod(self.shape):
            self.guests = list(self.guests) + list(self.roots)
            self.roots, self.shape = [], _update_of(other.eqn).aval.shape
        self.updates.append(other.eqn)
        self.products.append(other.eqn.outputs[0])
        self.reads |= other.reads

    def codegen(self):
        ctx = self.ctx
        n = math.prod(self.shape)     # the largest update's size, or more when a larger guest made the group grow
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        for e in self.updates:
            tracker.add(e)
        em = ctx.emitter(b, args=args, computes=set(self.roots) | set(self.guests), tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        for k, e in enumerate(self.updates):
            u = _update_of(e)
            with b.when(op("lt", gid, const(u.aval.size, INT32))):
                idx = index_vars(b, gid, u.aval.shape, f"upd{k}_" if k else "upd")
                if e.primitive is P.dynamic_update_slice:
                    self._update_slice(b, em, args, idx, e)
                else:
                    self._scatter(b, em, args, gid, idx, e)
        if self.roots:
            with b.when(op("lt", gid, const(n, INT32))):
                self.emit_roots(b, em, args, index_vars(b, gid, self.shape), gid)
        by_shape: dict = {}
        for v in self.guests:
            by_shape.setdefault(v.aval.shape, []).append(v)
        for k, (shape, vs) in enumerate(by_shape.items()):
            with b.when(op("lt", gid, const(math.prod(shape), INT32))):
                idx = index_vars(b, gid, shape, f"g{k}_")
                for v in vs:
                    val = em.val(v, idx)
                    if v in ctx.needed:
                        b.store(ctx.output(b, args, v), gid, val)
        b.name = kernel_name("update", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "update")]

    def _update_slice(self, b, em, args, idx, e):
        """Element ``idx`` of ``e``'s update stored at its place: the starts clamped so that the update fits (as
        ``dynamic_update_slice``, JAX's and XLA's)."""
        x, u, starts = e.inputs[0], e.inputs[1], e.inputs[2:]
        at = tuple(i + em.clamp_index(em.val(s, ()), 0, dim - k)
                   for i, s, dim, k in zip(idx, starts, x.aval.shape, u.aval.shape, strict=True))
        b.store(self.ctx.output(b, args, e.outputs[0]), em.index_expr(linearize(at, x.aval.shape)), em.val(u, idx))

    def _scatter(self, b, em, args, gid, idx, e):
        """Element ``idx`` of scatter ``e``'s updates (batch index ``bi``, element ``r`` of the row): the work item
        of the first update to an element combines, in order, every update to it with the element's value and
        stores the result (deterministic: as ``ScatterGroup``, whose work items own output elements); updates out
        of bounds are dropped."""
        x, indices, updates = e.inputs
        axes = e.params["axes"]
        batch = indices.aval.shape[:-1]
        nb = math.prod(batch)
        bidx, ridx = idx[:len(batch)], idx[len(batch):]
        row = math.prod(updates.aval.shape[len(batch):])
        bi = b.let(op("div", gid, const(row, INT32)) if row > 1 else gid, "bi")

        def position(bix, k):
            return em.val(indices, tuple(bix) + (ix_data(const(k, INT32), k, k),))

        pos = [b.let(position(bidx, k)) for k in range(len(axes))]
        ok = None
        for p, a in zip(pos, axes, strict=True):
            d = p.dtype
            c = op("lt", p, const(x.aval.shape[a], d))
            if d.kind != "u":
                c = op("land", op("ge", p, const(0, d)), c)
            ok = b.let(c if ok is None else op("land", ok, c))

        def same(bj):
            bjx = unravel(ix_var(bj.name, nb), batch) if batch else ()
            m = None
            for k, p in enumerate(pos):
                c = b.let(op("eq", position(bjx, k), p))
                m = c if m is None else b.let(op("land", m, c))
            return (const(True, np.bool_) if m is None else m), bjx

        first = b.var(np.dtype(np.bool_), const(True, np.bool_) if ok is None else ok, "first")
        if nb > 1:
            with b.loop(const(0, INT32), bi) as bj:
                m, _ = same(bj)
                with b.when(m):
                    b.assign(first, const(False, np.bool_))
        with b.when(first):
            at, j = [], 0
            for d, n in enumerate(x.aval.shape):
                if d in axes:
                    p = pos[axes.index(d)]
                    at.append(ix_data(b.let(Cast(p, INT32)) if p.dtype != INT32 else p, 0, n - 1) if n > 1
                              else ix_const(0))
                else:
                    at.append(ridx[j])
                    j += 1
            dt = x.aval.dtype
            acc = b.var(dt, em.val(updates, idx) if e.primitive is P.scatter else em.val(x, tuple(at)))
            with b.loop(bi if e.primitive is not P.scatter else op("add", bi, const(1, INT32)),
                        const(nb, INT32)) as bj:
                m, bjx = same(bj)
                with b.when(m):
                    b.assign(acc, combine(e.primitive, b, acc, em.val(updates, tuple(bjx) + tuple(ridx))))
            b.store(self.ctx.output(b, args, e.outputs[0]), em.index_expr(linearize(tuple(at), x.aval.shape)), acc)
