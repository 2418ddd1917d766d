"""Scatter kernels (``scatter``, ``scatter_add``/``mul``/``min``/``max``): ``ScatterGroup``.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.lowering.kernels.groups.base import SCATTERS, Group, analyse_val, index_vars, kernel_name, make_launch
from fnarray.lowering.kernels.index import ix_data, ix_var, unravel
from fnarray.lowering.kernels.ir import INT32, Cast, const
from fnarray.lowering.kernels.rules import (
    add_of,
    max_of,
    min_of,
    mul_of,
    op,
)

# ---------------------------------------------------------------------------- scatter


class ScatterGroup(Group):
    """Each work item owns one output element and walks the updates in order: deterministic, no atomics."""

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
                    b.assign(acc, combine(e.primitive, b, acc, u))
            b.store(ctx.output(b, args, out), gid, acc)
        b.name = kernel_name("scatter", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "scatter")]


def combine(primitive, b, acc, u):
    """The value of an element after a scatter ``primitive`` (replace, add, mul, min, max) applies update ``u`` to
    its value ``acc``."""
    how = _COMBINE.get(primitive)
    return u if how is None else how(b, acc, u)


_COMBINE = {P.scatter_add: add_of, P.scatter_mul: mul_of, P.scatter_min: min_of, P.scatter_max: max_of}


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {p: ScatterGroup for p in SCATTERS}
