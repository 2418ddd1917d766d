"""In-place updates of donated inputs: ``InPlaceUpdateGroup``.

A ``dynamic_update_slice(x, u, *starts)`` whose operand ``x`` is a donated input (``schedule``'s ``donate``
option: a jitted call's ``donate_argnums``, an exported step's state) that nothing else reads, and whose result
is the program output that ``x`` is donated to, is written into ``x``'s buffer: one work item per element of
``u`` stores it at the clamped ``starts``; the rest of ``x`` is neither read nor written, and the result shares
``x``'s buffer (as XLA's ``input_output_aliases``). A key/value cache of 1,024 positions then costs one
position's bytes per decoding step instead of a copy of the whole cache.

``in_place_updates(prog, donate)`` finds those equations; the scheduler gives each a group of this kind.
"""

from __future__ import annotations

import math

from fnarray.core import primitives as P
from fnarray.core.ir import Var
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import MapGroup, Tracker, analyse_val, index_vars, kernel_name, make_launch
from fnarray.lowering.kernels.index import linearize
from fnarray.lowering.kernels.ir import INT32, const
from fnarray.lowering.kernels.rules import op

__all__ = ["InPlaceUpdateGroup", "in_place_updates"]


def in_place_updates(prog, donate) -> dict:
    """``{id(eqn): donated input var}`` for the ``dynamic_update_slice`` equations of ``prog`` that can write
    into their donated operand.

    ``donate`` maps input positions (constvars then invars) to the output position each may become (``None``:
    any output). An equation qualifies when its operand ``x`` is such an input, ``x`` has no other use (no other
    equation, operand or output reads it: an earlier value read after the write would be wrong), and its result
    is that output (and no other output)."""
    if not donate:
        return {}
    inputs = list(prog.constvars) + list(prog.invars)
    donated = {inputs[i]: o for i, o in donate.items() if 0 <= i < len(inputs)}
    uses: dict = {}
    for e in prog.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
    outs = list(prog.outvars)
    found = {}
    for e in prog.eqns:
        if e.primitive is not P.dynamic_update_slice:
            continue
        x, o = e.inputs[0], e.outputs[0]
        if not isinstance(x, Var) or x not in donated or uses.get(x) != 1 or x in outs:
            continue
        if e.inputs[1].aval.size == 0 or x.aval.size == 0 or outs.count(o) != 1:
            continue
        want = donated[x]
        if want is not None and not (0 <= want < len(outs) and outs[want] is o):
            continue
        found[id(e)] = x
    return found


class InPlaceUpdateGroup(MapGroup):
    """``dynamic_update_slice`` written into its donated operand's buffer: a kernel over the update's elements
    (the update's producers computed inline), the operand's other elements untouched. Being a map kernel over
    the update's shape, it also computes the elementwise roots of that size and the guests that a map kernel
    would (the rotated query beside the rotated keys of a cache update)."""

    kind = "update"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.inputs[1].aval.shape)
        self.eqn = eqn
        self.products.append(eqn.outputs[0])

    def analyse(self):
        analyse_val(self, *self.eqn.inputs[1:])

    def can_join(self, host, producer_group, limit) -> bool:
        """Whether this update can be written by the earlier map kernel ``host`` (``producer_group``: var ->
        group): everything it reads comes from kernels before ``host``, and the buffers fit ``limit``."""
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

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        x, u, starts = e.inputs[0], e.inputs[1], e.inputs[2:]
        n = math.prod(self.shape)     # the update's size, or more when a larger guest made the group grow
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        tracker.add(e)
        em = ctx.emitter(b, args=args, computes=set(self.roots) | set(self.guests), tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, const(u.aval.size, INT32))):
            idx = index_vars(b, gid, u.aval.shape, "u")
            # The starts clamped so that the update fits (as dynamic_update_slice, JAX's and XLA's).
            at = tuple(i + em.clamp_index(em.val(s, ()), 0, dim - k)
                       for i, s, dim, k in zip(idx, starts, x.aval.shape, u.aval.shape, strict=True))
            value = em.val(u, idx)
            b.store(ctx.output(b, args, e.outputs[0]), em.index_expr(linearize(at, x.aval.shape)), value)
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
