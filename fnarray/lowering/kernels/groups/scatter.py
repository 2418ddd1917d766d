"""Scatter kernels (``scatter``, ``scatter_add``/``mul``/``min``/``max``): ``ScatterGroup``.

Each output element walks the updates whose index can land on it. An index column that is an ``iota`` of an
update batch dimension (``take_along_axis``'s and ``x[arange(n)]``'s transposes: the batch coordinates
concatenated beside the data's) is read off the program (``iota_dim``): that batch coordinate is then the
output's own coordinate, and the walk skips the batch dimension (the cross-entropy gradient of a 16x64x96
transformer batch walked 1,024 updates per output element; now one). The order of the updates that land on
one element is unchanged, so results are bit for bit the same.

On CPUs (OpenCL's PoCL, webgpu's lavapipe) the scheduler option ``scatter_columns`` lets a work item own a
column instead, where that is less work than the element walk (see ``ScatterGroup._plan_columns``): the
embedding gradient of the transformer LM (1,024 data-indexed rows into a 96 x 64 table) went from 5.5 to
0.09 ms on PoCL 3.0.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal
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


#: Parallel lanes assumed of a CPU when ``_plan_columns`` weighs the column kernel's fewer work items
#: (lavapipe and PoCL: 8-wide SIMD over work items on 2 threads).
CPU_LANES = 16


class ScatterGroup(Group):
    """Each work item owns one output element and walks the updates in order: deterministic, no atomics.

    With the scheduler option ``scatter_columns`` (CPU OpenCL, webgpu on a CPU adapter), where it costs less
    than the element walk (which skips the pinned batch dimensions), each work item owns a *column* instead:
    every output element with the same coordinates outside the scattered axes. It copies the operand's column
    (or a first kernel copies the whole operand, where the columns are few or long), then walks the updates
    in order, combining each into the element it addresses: the same order of combination per element (so the
    same result, bit for bit), ``u`` steps per column instead of ``u`` per element. An embedding gradient of
    1,024 rows into a 1,536 x 64 table: 98,304 work items of 1,024 steps became 64 of 2,560. A one-hot
    target's gradient (every axis scattered, the batch columns pinned) keeps its one-update element walk.
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
        pinned = {}   # batch dimension -> (index column, output axis): the column is that dimension's iota
        for k, a in enumerate(axes):
            j = iota_dim(ctx.producer, indices, k)
            if j is not None and j not in pinned:
                pinned[j] = (k, a)
        walked = tuple(d for d in range(len(batch)) if d not in pinned)
        wshape = tuple(batch[d] for d in walked)
        nb = math.prod(wshape)
        columns = self._plan_columns(nb, math.prod(batch))
        if columns is not None:
            return self._columns(batch, math.prod(batch), columns == "copy first")
        b, args, tracker, em = self._kernel_start()
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        dt = out.aval.dtype
        with b.when(op("lt", gid, const(n, INT32))):
            idx = index_vars(b, gid, self.shape)
            acc = b.var(dt, em.val(x, idx))
            rest = tuple(i for d, i in enumerate(idx) if d not in axes)
            guard = None   # an output coordinate past its batch dimension receives no update
            for j, (_, a) in pinned.items():
                if batch[j] < out.aval.shape[a]:
                    g = op("lt", em.index_expr(idx[a]), const(batch[j], INT32))
                    guard = g if guard is None else op("land", guard, g)
            inside = b.when(guard) if guard is not None else contextlib.nullcontext()
            skip = {k for k, _ in pinned.values()}
            with inside, b.loop(const(0, INT32), const(nb, INT32)) as bi:
                walk = iter(unravel(ix_var(bi.name, nb), wshape) if wshape else ())
                bidx = tuple(idx[pinned[d][1]] if d in pinned else next(walk) for d in range(len(batch)))
                match = None
                for k, a in enumerate(axes):
                    if k in skip:
                        continue
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

    def _plan_columns(self, walked, nb):
        """``None`` (the element kernel), ``"one kernel"`` or ``"copy first"`` (the column kernel, after a
        kernel copying the operand): the column kernel where asked for, within the target's loop limit,
        and less work than the element kernel's (its fewer work items counted as at least ``CPU_LANES``).
        ``walked``: the updates an element's walk visits (those of the batch dimensions not pinned to an
        output coordinate, ``iota_dim``); ``nb``: all updates, which a column walks."""
        if not self.ctx.opts.get("scatter_columns", False) or nb == 0:
            return None
        shape, axes = self.shape, self.eqn.params["axes"]
        cells = math.prod(shape[a] for a in axes)
        columns = math.prod(shape) // max(cells, 1)
        cap = self.ctx.caps.max_loop_iterations or (1 << 30)
        element = cells * columns * walked / CPU_LANES
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
                        u = combine(self.eqn.primitive, b, b.load(oname, addr, dt), u)
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

def combine(primitive, b, acc, u):
    """The value of an element after a scatter ``primitive`` (replace, add, mul, min, max) applies update ``u`` to
    its value ``acc``."""
    how = _COMBINE.get(primitive)
    return u if how is None else how(b, acc, u)


_COMBINE = {P.scatter_add: add_of, P.scatter_mul: mul_of, P.scatter_min: min_of, P.scatter_max: max_of}


def iota_dim(producer, indices, k):
    """The batch dimension ``j`` such that ``indices[..., k]`` equals the coordinate along ``j`` everywhere
    (an ``iota``, through broadcasts, unit reshapes, a concatenation of columns, integer casts and clamps and
    wraps that cannot change it), else ``None``; ``producer`` maps the program's variables to their equations."""
    form = _form(producer, indices, {indices.aval.ndim - 1: k}, [64])
    if form is not None and form[0] == "iota" and form[1] < indices.aval.ndim - 1:
        return form[1]
    return None


def _form(producer, v, fixed, budget):
    """``v`` with the coordinates ``fixed`` ({dimension: position}) as a function of the others: ``("const", c)``,
    ``("iota", d, n)`` (the coordinate along ``d``, ``0 <= . < n``) or ``None`` (anything else, or past
    ``budget[0]`` equations looked at)."""
    if isinstance(v, Literal):
        return ("const", v.val.item()) if v.aval.ndim == 0 else None
    e = producer.get(v)
    budget[0] -= 1
    if e is None or budget[0] < 0:
        return None
    p, shape = e.primitive, v.aval.shape
    if p is P.iota:
        d = e.params["dimension"]
        if d in fixed:
            return ("const", fixed[d])
        return ("iota", d, shape[d]) if shape[d] > 1 else ("const", 0)
    if p is P.broadcast_in_dim:
        src = e.inputs[0]
        dims = e.params["broadcast_dimensions"]
        sub = {od: (0 if src.aval.shape[od] == 1 else fixed[d]) for od, d in enumerate(dims) if d in fixed}
        f = _form(producer, src, sub, budget)
        if f is None or f[0] == "const":
            return f
        return ("iota", dims[f[1]], f[2])
    if p is P.reshape:
        return _reshaped(producer, e.inputs[0], shape, fixed, budget)
    if p is P.concatenate:
        c = e.params["dimension"]
        if c not in fixed:
            return None
        at = fixed[c]
        for src in e.inputs:
            if at < src.aval.shape[c]:
                return _form(producer, src, {**fixed, c: at}, budget)
            at -= src.aval.shape[c]
        return None
    if p is P.convert_element_type:   # between integers, where every value fits (no wrap)
        if not (np.issubdtype(e.inputs[0].aval.dtype, np.integer) and np.issubdtype(v.aval.dtype, np.integer)):
            return None
        f = _form(producer, e.inputs[0], fixed, budget)
        info = np.iinfo(v.aval.dtype)
        lo, hi = (f[1], f[1]) if f is not None and f[0] == "const" else (0, f[2] - 1 if f is not None else 0)
        return f if f is not None and info.min <= lo and hi <= info.max else None
    if p is P.select_n:   # a selector that is the same everywhere picks one case
        which = _form(producer, e.inputs[0], fixed, budget)
        cases = e.inputs[1:]
        if which is None or which[0] != "const" or not 0 <= int(which[1]) < len(cases):
            return None
        return _form(producer, cases[int(which[1])], fixed, budget)
    if p in _CLAMPS:
        forms = [_form(producer, a, fixed, budget) for a in e.inputs]
        return None if any(f is None for f in forms) else _CLAMPS[p](*forms)
    return None


def _reshaped(producer, src, shape, fixed, budget):
    """A reshape that only adds or drops unit dimensions: the same form with its dimensions renumbered."""
    old = [d for d, n in enumerate(src.aval.shape) if n != 1]
    new = [d for d, n in enumerate(shape) if n != 1]
    if [src.aval.shape[d] for d in old] != [shape[d] for d in new]:
        return None
    to_old = dict(zip(new, old, strict=True))
    f = _form(producer, src, {to_old[d]: at for d, at in fixed.items() if d in to_old}, budget)
    if f is None or f[0] == "const":
        return f
    return ("iota", new[old.index(f[1])], f[2])


def _max_form(a, b):
    if a[0] == "const" and b[0] == "const":
        return ("const", max(a[1], b[1]))
    it, c = (a, b) if a[0] == "iota" else (b, a)
    return it if c[0] == "const" and c[1] <= 0 else None


def _min_form(a, b):
    if a[0] == "const" and b[0] == "const":
        return ("const", min(a[1], b[1]))
    it, c = (a, b) if a[0] == "iota" else (b, a)
    return it if c[0] == "const" and c[1] >= it[2] - 1 else None


def _add_form(a, b):
    if a[0] == "const" and b[0] == "const":
        return ("const", a[1] + b[1])
    it, c = (a, b) if a[0] == "iota" else (b, a)
    return it if c[0] == "const" and c[1] == 0 else None


def _lt_form(a, b):
    """``a < b`` where it is the same at every coordinate (the negative-index wrap's test: ``iota < 0``)."""
    if a[0] == "const" and b[0] == "const":
        return ("const", a[1] < b[1])
    if a[0] == "iota" and b[0] == "const":
        return ("const", False) if b[1] <= 0 else (("const", True) if b[1] >= a[2] else None)
    if a[0] == "const" and b[0] == "iota":
        return ("const", True) if a[1] < 0 else (("const", False) if a[1] >= b[2] - 1 else None)
    return None


def _ge_form(a, b):
    f = _lt_form(a, b)
    return None if f is None else ("const", not f[1])


_CLAMPS = {P.max_p: _max_form, P.min_p: _min_form, P.add: _add_form, P.lt: _lt_form, P.ge: _ge_form}


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {p: ScatterGroup for p in SCATTERS}
