"""The kernel scheduler: an IR program grouped into kernels for a target's capabilities.

Steps (``schedule(program, caps)``):

1. ``call``, ``remat`` and the custom-derivative calls are inlined; dead code goes.
2. *Materialisation*: which variables live in buffers. Program outputs, the
   results of reductions and of the opaque ops (``dot_general``, sort,
   cumulative ops, scatters) and the bases of ``dot_general`` operands do;
   every other variable is computed inline, inside each kernel that reads it
   (``Emitter``), unless its inlined expression grows past a cost limit, or an
   expensive value would be recomputed under a broadcast, or a kernel would
   need more buffers than the target allows.
3. *Grouping*, in program order. Each materialised elementwise variable (a
   "root") joins the most recent kernel that iterates over its shape and whose
   inputs it can read, else it starts a new map kernel: so an elementwise chain
   with its broadcasts, reshapes, transposes, slices and gathers is one kernel,
   several outputs of one shape share a kernel, and a reduction or a matrix
   multiply takes the elementwise ops on its result as an epilogue (bias + relu
   after a matmul is one kernel). A root reads a value of its own kernel only
   at its own element; anything else must come from an earlier kernel. A map
   kernel also computes independent elementwise values of another shape on its
   first work items (a loop counter beside the loop's arrays), and reductions
   over the same iteration space share one kernel.
4. *Code*: each group writes its kernels in the kernel IR, with sizes and
   strides as scalar arguments where that costs nothing (flat elementwise
   kernels, reductions, matrix multiplies), so one compiled kernel serves many
   shapes.

The result is a ``Schedule``: buffers, launches in order (kernel, arguments,
work sizes, the IR equations each kernel fused) and the outputs.

The kernel groups are in ``groups/`` (one module per kind: ``base`` with the elementwise map kernel,
``reduce``, ``dot``, ``cumulative``, ``sort``, ``scatter``, ``conv``, ``windows``...); this module holds the
preparation passes, the context of one scheduling run, the tables ``GROUPS`` and ``OPERAND_VIEWS`` (collected
in one loop from every group module that exports them: a new module needs no edit here) and the
materialisation and grouping passes.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil

from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.passes import dce, read_counts
from fnarray.lowering.kernels import facts
from fnarray.lowering.kernels import groups as groups_package
from fnarray.lowering.kernels.emitter import INJECTIVE, Emitter, shaped_index
from fnarray.lowering.kernels.groups.base import CALLS, REDUCTIONS, SCATTERS, BufSpec, Launch, MapGroup, Schedule
from fnarray.lowering.kernels.groups.horizontal import fuse_horizontal
from fnarray.lowering.kernels.groups.in_place import InPlaceUpdateGroup, in_place_updates
from fnarray.lowering.kernels.groups.reduce import ReduceGroup
from fnarray.lowering.kernels.index import linearize
from fnarray.lowering.kernels.ir import INT32, Let, Special, Sym
from fnarray.lowering.kernels import tuning
from fnarray.lowering.kernels.long_reductions import split_long_reductions
from fnarray.lowering.kernels.long_scans import split_long_scans
from fnarray.lowering.kernels.opencl_c import uses_helpers
from fnarray.lowering.kernels.rules import op
from fnarray.lowering.kernels.softmax_products import fold_softmax_products
from fnarray.lowering.zero_size import drop_zero_size

__all__ = ["schedule", "Schedule", "Launch", "BufSpec", "inline_calls", "SCHEDULED", "REDUCTIONS", "OPAQUE",
           "CALLS", "GROUPS", "OPERAND_VIEWS"]

_EXPENSIVE = facts.with_cost("expensive")
_FREE = facts.with_cost("free")
_COST_LIMIT = 240      # largest inlined expression tree (duplicates counted) before a value is materialised
_EXPENSIVE_COST = 10
_JOIN_WINDOW = 64    # how many of the latest kernels a new elementwise root may join or ride along with
_HOIST_SIZE = 1024  # elements of a kernel from which one-element expensive values get their own kernel
#: With the scheduler option ``share_values`` (CPU targets: lavapipe, PoCL): an inlined elementwise value read by
#: two or more equations whose expression costs at least this and reads three buffers, or costs twice this,
#: gets a buffer (``_Inlining._shared``), so its readers load it once instead of recomputing it
_SHARED_COST = 10


# ------------------------------------------------------------------------------------------ preparation


def inline_calls(prog: Program) -> Program:
    """``prog`` with ``call``/``remat``/custom-derivative calls replaced by their bodies (fresh variables)."""
    if not any(e.primitive in CALLS for e in prog.eqns):
        return prog
    sub: dict = {}

    def rd(a):
        return sub.get(a, a) if isinstance(a, Var) else a

    out = []

    def emit(eqns, env):
        for e in eqns:
            ins = tuple(env.get(a, a) if isinstance(a, Var) else a for a in e.inputs)
            if e.primitive in CALLS:
                body = e.params[CALLS[e.primitive]]
                inner = dict(zip(body.invars, ins, strict=True))
                emit(body.eqns, inner)
                for o, r in zip(e.outputs, body.outvars, strict=True):
                    env[o] = inner.get(r, r) if isinstance(r, Var) else r
            else:
                outs = tuple(Var(o.aval) for o in e.outputs) if env is not sub else e.outputs
                for o, n in zip(e.outputs, outs, strict=True):
                    if n is not o:
                        env[o] = n
                out.append(Eqn(e.primitive, ins, e.params, outs))

    emit(prog.eqns, sub)
    return Program(prog.constvars, prog.invars, out, [rd(a) for a in prog.outvars])


def _fold_dot_transposes(prog: Program) -> Program:
    """``transpose(dot_general(x, y))`` that swaps the two operands' free dimensions becomes
    ``dot_general(y, x)`` (reverse-mode weight gradients are of this form), so no transposing kernel
    runs; only where the transpose is the product's sole use."""
    uses = read_counts(prog)
    outs = {a for a in prog.outvars if isinstance(a, Var)}
    producer = {o: e for e in prog.eqns for o in e.outputs}
    replace: dict = {}
    drop: set = set()
    for e in prog.eqns:
        if e.primitive != P.transpose:
            continue
        u = e.inputs[0]
        d = producer.get(u)
        if d is None or d.primitive != P.dot_general or uses.get(u) != 1 or u in outs:
            continue
        (lc, rc), (lb, rb) = d.params["dimension_numbers"]
        x, y = d.inputs
        nb = len(lb)
        nl = x.aval.ndim - len(lc) - nb
        nr = y.aval.ndim - len(rc) - nb
        swap = tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)) + tuple(range(nb, nb + nl))
        if tuple(e.params["permutation"]) != swap:
            continue
        params = d.params.replace(dimension_numbers=((tuple(rc), tuple(lc)), (tuple(rb), tuple(lb))))
        replace[id(e)] = Eqn(P.dot_general, (y, x), params, e.outputs)
        drop.add(id(d))
    if not replace:
        return prog
    eqns = [replace.get(id(e), e) for e in prog.eqns if id(e) not in drop]
    return Program(prog.constvars, prog.invars, eqns, prog.outvars)


def _split_wide(prog: Program, limit) -> Program:
    """``concatenate`` of more operands than a kernel may bind becomes a tree of concatenates of at
    most ``limit - 2`` operands each (one buffer is the output; one spare for a fused producer), so
    the scheduler gives each level its own kernels. Linear in the number of operands."""
    if limit is None or not any(e.primitive == P.concatenate and len(e.inputs) > limit - 2 for e in prog.eqns):
        return prog
    k = max(2, limit - 2)
    out = []
    for e in prog.eqns:
        if e.primitive != P.concatenate or len(e.inputs) <= k:
            out.append(e)
            continue
        dim = e.params["dimension"]
        pieces = list(e.inputs)
        while len(pieces) > k:
            level = []
            for i in range(0, len(pieces), k):
                chunk = tuple(pieces[i:i + k])
                if len(chunk) == 1:
                    level.append(chunk[0])
                    continue
                shape = list(chunk[0].aval.shape)
                shape[dim] = sum(a.aval.shape[dim] for a in chunk)
                v = Var(chunk[0].aval.update(shape=tuple(shape)))
                out.append(Eqn(P.concatenate, chunk, e.params, (v,)))
                level.append(v)
            pieces = level
        out.append(Eqn(P.concatenate, tuple(pieces), e.params, e.outputs))
    return Program(prog.constvars, prog.invars, out, prog.outvars)


# ------------------------------------------------------------------------------------------ the scheduler


class _Ctx:
    """What the groups share while writing code: materialisation, buffers and who reads what."""

    def __init__(self, prog, caps, opts):
        self.prog, self.caps, self.opts = prog, caps, opts
        self.producer: dict = {}
        self.order = {id(e): i for i, e in enumerate(prog.eqns)}
        for e in prog.eqns:
            for o in e.outputs:
                self.producer[o] = e
        self.inputs = list(prog.constvars) + list(prog.invars)
        self.input_set = set(self.inputs)
        self.materialized: set = set()
        self.specs: dict = {}
        self.needed: set = set()   # materialised variables some other kernel (or the caller) reads
        self.wg = min(opts.get("workgroup", 128), caps.max_workgroup_size or 1024)
        self._nspec = 0
        self.memo: dict = {}  # what a group module computes once per run, by its name (``dot.converted_first``)
        # ``dynamic_update_slice`` and scatter equations written into their donated operand
        # (``groups/in_place.py``): the result shares the operand's buffer.
        self.in_place = in_place_updates(prog, opts.get("donate"))
        for e in prog.eqns:
            if id(e) in self.in_place:
                self.specs[e.outputs[0]] = self.spec(self.in_place[id(e)])

    def spec(self, key, shape=None, dtype=None) -> BufSpec:
        s = self.specs.get(key)
        if s is None:
            if isinstance(key, Var):
                shape, dtype = key.aval.shape, key.aval.dtype
            s = BufSpec(shape, dtype, f"t{self._nspec}")
            self._nspec += 1
            self.specs[key] = s
        return s

    def in_buffer(self, v) -> bool:
        return v in self.input_set or v in self.materialized

    def emitter(self, b, on_read=None, args=None, computes=(), tracker=None):
        """An ``Emitter`` over ``b``; buffer reads become parameters recorded in ``args``. Variables in
        ``computes`` are computed by this kernel even when materialised; ``tracker`` records the
        equations inlined."""
        def buffer_of(v):
            if v in computes or not self.in_buffer(v):
                return None
            if args is None:
                return "x"
            spec = self.spec(v)
            name = b.buffer(spec, v.aval.dtype, False, "in")
            args[name] = spec
            return name
        em = Emitter(b, self.producer, buffer_of, on_read, tracker.add if tracker is not None else None)
        em.branches = bool(self.opts.get("concat_branches", False))
        em.uniform = bool(self.opts.get("uniform_pieces", True))
        return em

    def output(self, b, args, v, hint="out") -> str:
        spec = self.spec(v)
        name = b.buffer(spec, v.aval.dtype, True, hint)
        args[name] = spec
        return name

    def tuned(self, tunable, default, build, facts=None):
        """The launches of ``build(choice)`` for the choice of ``tunable`` (a group's declared table) that
        ``kernels/tuning.py`` makes with the backend's ``tuner`` option; ``build(default)`` without one.
        ``default`` is first replaced by the table's cost model's choice for this device (``tuning.modelled``,
        from ``Capabilities.tuning_facts`` and ``facts``), except in mode ``"off"``."""
        facts = {**dict(self.caps.tuning_facts), "workgroup_limit": self.caps.max_workgroup_size, **(facts or {})}
        default = tuning.modelled(tunable, default, facts)
        tuner = self.opts.get("tuner")
        if tuner is None:
            return build(default)
        return tuner.tuned(tunable, default, build, facts)

    def gid(self, b, n_items, wg):
        """The linear work-item id and the launch sizes for ``n_items`` items in groups of ``wg``."""
        groups = max(1, -(-n_items // wg))
        lim = self.caps.max_dispatch
        if lim is None or groups <= lim:
            b.emit(Let("gid", Special("global_id", 0)))
            return Sym("gid", INT32), (groups * wg,), (wg,)
        rows = -(-groups // lim)
        cols = -(-groups // rows)   # balanced: 65,536 groups run as 32,768 x 2, not 65,535 x 2
        b.emit(Let("gid", op("add", Special("global_id", 0), op("mul", Special("global_id", 1),
                                                                  Special("global_size", 0)))))
        return Sym("gid", INT32), (cols * wg, rows), (wg, 1)


def _collect_groups():
    """``GROUPS`` and ``OPERAND_VIEWS`` of every module of ``groups/`` that exports them (a new group module
    is found here without an edit); each primitive's kernel fact becomes ``("group", <module name>)``."""
    table: dict = {}
    views: dict = {}
    for info in sorted(pkgutil.iter_modules(groups_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{groups_package.__name__}.{info.name}")
        for p, cls in getattr(module, "GROUPS", {}).items():
            if p in table:
                raise ValueError(f"kernel groups: {p.name} is claimed by {table[p].__module__} and {module.__name__}")
            table[p] = cls
            facts.add_group_fact(p, info.name)
        views.update(getattr(module, "OPERAND_VIEWS", {}))
    return table, views


#: primitive -> the kernel group class that starts a kernel for it, from the group modules' ``GROUPS``.
#: ``OPERAND_VIEWS``: the groups that read their operands in place: primitive -> ``view(ctx, operand)`` giving
#: ``(base var, offset, strides)``; the bases get buffers (``_materialize``).
GROUPS, OPERAND_VIEWS = _collect_groups()
#: The primitives with a kernel group of their own other than the reductions (which share kernels).
OPAQUE = frozenset(GROUPS) - REDUCTIONS
#: Every primitive the scheduler turns into kernels (control flow is driven from the host).
SCHEDULED = INJECTIVE | frozenset(GROUPS) | frozenset(CALLS)


# ------------------------------------------------------------------------------------------ the passes


def _materialize(ctx):
    """Decide which variables get buffers (``ctx.materialized``): the seeds (``_seed_materialized``), then, in
    program order, what the buffer limit and the inlining cost limit add (``_Inlining``)."""
    _seed_materialized(ctx)
    inlining = _Inlining(ctx)
    for e in ctx.prog.eqns:
        if e.primitive in INJECTIVE and id(e) not in ctx.in_place:
            inlining.elementwise(e)
        else:
            inlining.opaque(e)


def _seed_materialized(ctx):
    """The variables that always live in buffers: the program's outputs, every result of a non-injective
    equation, and the bases of the operand views (``OPERAND_VIEWS``)."""
    prog = ctx.prog
    M = ctx.materialized
    for a in prog.outvars:
        if isinstance(a, Var) and a not in ctx.input_set:
            M.add(a)
    for e in prog.eqns:
        if e.primitive not in INJECTIVE or id(e) in ctx.in_place:
            M.update(e.outputs)
    for e in prog.eqns:
        view_of = OPERAND_VIEWS.get(e.primitive)
        if view_of is not None:
            for a in e.inputs:
                view = view_of(ctx, a)
                if view is not None and view[0] not in ctx.input_set:
                    M.add(view[0])


class _Inlining:
    """The cost of each inlined elementwise value (its expression tree, duplicates counted) and the buffers it
    reads (tracked only against a buffer limit): a value whose cost or reads pass the limits is materialised."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.M = ctx.materialized
        self.limit = ctx.caps.max_buffers_per_kernel
        self.cost: dict = {}
        self.leaves: dict = {}
        self.readers: dict = {}
        if ctx.opts.get("share_values"):
            for e in ctx.prog.eqns:
                for a in {a for a in e.inputs if isinstance(a, Var)}:
                    self.readers[a] = self.readers.get(a, 0) + 1

    def cost_of(self, a):
        if not isinstance(a, Var) or self.ctx.in_buffer(a):
            return 0
        return self.cost[a]

    def leaves_of(self, a):
        if not isinstance(a, Var):
            return frozenset()
        if self.ctx.in_buffer(a):
            return frozenset([a])
        return self.leaves[a]

    def fit(self, atoms, reserved):
        """Materialise operands of ``atoms`` (those reading the most buffers first) until the buffers
        they read, plus ``reserved`` others (outputs, scratch), fit in one kernel."""
        leaves_of = self.leaves_of
        lv = frozenset().union(*(leaves_of(a) for a in atoms)) if atoms else frozenset()
        if len(lv) + reserved <= self.limit:
            return lv
        inner = sorted({a for a in atoms if isinstance(a, Var) and not self.ctx.in_buffer(a)},
                       key=lambda a: len(leaves_of(a)), reverse=True)
        for a in inner:
            self.M.add(a)
            lv = frozenset().union(*(leaves_of(b) for b in atoms))
            if len(lv) + reserved <= self.limit:
                break
        return lv

    def opaque(self, e):
        """A kernel of its own inlines the producers of all its operands at once: their buffers together,
        plus its outputs (and a sort's index and scratch), must fit the limit."""
        if self.limit is not None and e.primitive == P.sort:
            for a in e.inputs:   # the sort kernels read each operand beside the index and scratch
                self.fit((a,), 3)
        elif self.limit is not None:
            self.fit(e.inputs, len(e.outputs) + (0 if e.primitive in SCATTERS else 1))

    def elementwise(self, e):
        """The cost and reads of ``e``'s result, materialising the operands that would pass the limits."""
        cost_of, M, limit = self.cost_of, self.M, self.limit
        v = e.outputs[0]
        own = _EXPENSIVE_COST if e.primitive in _EXPENSIVE else (0 if e.primitive in _FREE else 1)
        if v.aval.size >= _HOIST_SIZE:
            # An expensive value of one element used by a large kernel is computed once, by its own
            # small kernel, rather than by every work item.
            for a in e.inputs:
                if isinstance(a, Var) and a.aval.size == 1 and cost_of(a) >= _EXPENSIVE_COST:
                    M.add(a)
        total = own + sum(cost_of(a) for a in e.inputs)
        if total > _COST_LIMIT:
            self._shed(e, total)
        # Leaves are tracked only against a limit (unbounded sets would make long chains quadratic).
        lv = self.fit(e.inputs, 2) if limit is not None else frozenset()
        if limit is not None:
            total = own + sum(cost_of(a) for a in e.inputs)
        if e.primitive == P.broadcast_in_dim:
            # An expensive value broadcast to 4x its size gets a buffer, unless the broadcast has fewer elements
            # than the scheduler option ``recompute_below``: each element then recomputes it inline (a small
            # jacobian's ``tanh(c * x)`` under its ``[8, 8]`` broadcast: one launch, not two)
            x = e.inputs[0]
            if (isinstance(x, Var) and v.aval.size >= 4 * max(x.aval.size, 1) and cost_of(x) >= _EXPENSIVE_COST
                    and v.aval.size >= self.ctx.opts.get("recompute_below", 0)):
                M.add(x)
                total, lv = own, frozenset([x])
        self.cost[v] = total
        self.leaves[v] = lv
        if self.readers.get(v, 0) >= 2 and self._shared(e, v, total, lv):
            M.add(v)

    def _shared(self, e, v, total, lv) -> bool:
        """Whether ``v`` (``e``'s result, of inlined cost ``total`` reading buffers ``lv``), read by two or more
        equations, gets a buffer under the scheduler option ``share_values``: its expression costs at least
        ``_SHARED_COST`` and reads three or more buffers (a gather's indices and table, a residual stream's
        sum: every reader would load them all again, in every pass of a row reduction), or costs twice
        that (random bits). Cheaper values that read one or two buffers stay inline, so a softmax's
        ``exp(x - max)`` is still computed in its reduction's row loop (one kernel); so do values under
        ``_HOIST_SIZE`` elements and growing broadcasts."""
        if total < _SHARED_COST or v.aval.size < _HOIST_SIZE:
            return False
        if e.primitive == P.broadcast_in_dim and v.aval.size > e.inputs[0].aval.size:
            return False
        return len(lv) >= 3 or total >= 2 * _SHARED_COST

    def _shed(self, e, total):
        """The costliest operands of ``e`` get buffers first until its cost is within ``_COST_LIMIT`` (one pass:
        linear in the number of operands)."""
        uses: dict = {}
        for a in e.inputs:
            if isinstance(a, Var) and not self.ctx.in_buffer(a):
                uses[a] = uses.get(a, 0) + 1
        for a in sorted(uses, key=self.cost_of, reverse=True):
            if total <= _COST_LIMIT:
                break
            total -= self.cost_of(a) * uses[a]
            self.M.add(a)


def _place(ctx, groups, e):
    """Put equation ``e``'s materialised outputs into groups."""
    if all(o.aval.size == 0 for o in e.outputs):
        return   # a zero-size fill (``zero_size.is_fill``): nothing to launch
    if id(e) in ctx.in_place:
        _place_in_place(ctx, groups, e)
        return
    cls = GROUPS.get(e.primitive)
    if cls is ReduceGroup:
        target = _sibling_reduction(ctx, groups, e)
        if target is not None:
            target.reads |= target.operand_reads(e.inputs[0]) - set(target.products)  # own results: registers
            target.add_reduction(e)
            ctx.group_of[e.outputs[0]] = target
            return
    if cls is not None:
        g = cls(ctx, e)
        g.analyse()
        g.index = len(groups)
        groups.append(g)
        for o in e.outputs:
            ctx.group_of[o] = g
        return
    for v in e.outputs:
        if v in ctx.materialized:
            _place_root(ctx, groups, v)


def _place_root(ctx, groups, v):
    """Put the materialised elementwise value ``v`` into a recent group that can compute it at its own element
    (a map kernel of its size, a reduction's row loop, a larger map kernel as a guest), else a new map kernel."""
    producer_group = ctx.group_of
    probe = MapGroup(ctx, v.aval.shape)
    reads = probe.root_reads(v)
    own = linearize(shaped_index(v.aval.shape), v.aval.shape)
    target = guest_of = row_host = None
    # Only the latest groups are candidates: a program of thousands of kernels (a concatenate of
    # thousands of arrays) would otherwise cost quadratic time here.
    for g in reversed(groups[-_JOIN_WINDOW:]):
        if g.accepts_roots and math.prod(g.shape) == v.aval.size and _can_join(ctx, g, reads, own, v):
            target = g
            break
        if isinstance(g, ReduceGroup) and g.can_take_row_root(v, reads):   # a row after its statistics
            row_host = g
            break
        if guest_of is None and _can_host(ctx, g, reads, v):
            guest_of = g
        if any(producer_group.get(r) is g for r in reads):
            break
    if row_host is not None:
        row_host.add_row_root(v, reads)
        producer_group[v] = row_host
        return
    if target is None and guest_of is not None:
        if math.prod(guest_of.shape) < v.aval.size:
            guest_of.regrow(v.aval.shape)
            guest_of.add_root(v, set(reads))
        else:
            guest_of.add_guest(v, set(reads))
        producer_group[v] = guest_of
        return
    if target is None:
        target = MapGroup(ctx, v.aval.shape)
        target.index = len(groups)
        groups.append(target)
    target.add_root(v, set(reads))
    producer_group[v] = target


def _place_in_place(ctx, groups, e):
    """An in-place ``dynamic_update_slice`` or scatter (``groups/in_place.py``): written by a recent map kernel
    that reads nothing it needs to wait for (a cache update beside the rotated query: one launch) or by a recent
    in-place update kernel (a layer's key and value caches: one launch), else by a kernel of its own."""
    g = InPlaceUpdateGroup(ctx, e)
    g.analyse()
    host = None
    for cand in reversed(groups[-_JOIN_WINDOW:]):
        if type(cand) in (MapGroup, InPlaceUpdateGroup) and g.can_join(cand, ctx.group_of,
                                                                      ctx.caps.max_buffers_per_kernel):
            host = cand
            break
        if any(ctx.group_of.get(r) is cand for r in g.reads):
            break
    if host is None:
        g.index = len(groups)
        groups.append(g)
    elif type(host) is InPlaceUpdateGroup:
        host.absorb(g)
        g = host
    else:
        g.take_over(host)
        groups[host.index] = g
        for v in host.products:
            ctx.group_of[v] = g
    ctx.group_of[e.outputs[0]] = g


def _can_host(ctx, g, reads, v):
    """Whether map kernel ``g`` can also compute ``v``, an elementwise value of another shape that reads
    nothing ``g`` computes (a loop counter beside the loop's arrays): one launch instead of two. The
    larger of the two shapes becomes the kernel's."""
    if not isinstance(g, MapGroup) or math.prod(g.shape) in (v.aval.size, 0) or v.aval.size == 0:
        return False
    limit = ctx.caps.max_buffers_per_kernel
    if limit is not None and len(g.reads | set(reads)) + len(g.products) + 1 > limit:
        return False
    for r in reads:
        pg = ctx.group_of.get(r)
        if pg is not None and pg.index >= g.index:
            return False
    return True


def _sibling_reduction(ctx, groups, e):
    """An earlier reduction kernel over the same iteration space that ``e`` can share, or ``None``.

    ``e`` may also read results of that kernel at its own output element (a softmax's sum of
    ``exp(x - max)``): it then runs in the same kernel, in a loop after theirs (``ReduceGroup.stages``).
    """
    probe = ReduceGroup(ctx, e)
    read_keys = probe.operand_read_keys(e.inputs[0])
    reads = set(read_keys)
    limit = ctx.caps.max_buffers_per_kernel
    for g in reversed(groups[-_JOIN_WINDOW:]):
        dep = {r: keys for r, keys in read_keys.items() if ctx.group_of.get(r) is g}
        if dep:
            if not (isinstance(g, ReduceGroup) and g.can_chain(e, dep)):
                return None
            if limit is not None and len(g.reads | (reads - set(dep))) + len(g.products) + 1 > limit:
                return None
            return g
        if isinstance(g, ReduceGroup) and g.matches(e):
            if limit is not None and len(g.reads | reads) + len(g.products) + 1 > limit:
                return None
            return g
    return None


def _can_join(ctx, g, reads, own, v):
    limit = ctx.caps.max_buffers_per_kernel
    if limit is not None and len(g.reads | set(reads)) + len(g.products) + 1 > limit:
        return False
    if isinstance(g, InPlaceUpdateGroup) and any(u.outputs[0] in reads for u in g.updates):
        return False   # its work items write the updated elements, not their own: a read would race with them
    for r, keys in reads.items():
        pg = ctx.group_of.get(r)
        if pg is None or pg.index < g.index:
            continue
        if pg is not g:
            return False
        if r.aval.size != v.aval.size or any(k != own and not (k == "zero" and v.aval.size == 1) for k in keys):
            return False
    return g.takes_root(reads, own)


def tune_kernels(ctx, launches) -> list:
    """``launches`` with each kernel's kernel-level tunable choices made (``tuning.MATH``: a float32
    transcendental as fnarray's polynomial or the driver's built-in, where the renderer has both)."""
    tuner = ctx.opts.get("tuner")
    if tuner is None or "builtin" not in tuner.math_forms:
        return launches
    out = []
    for la in launches:
        if not uses_helpers(la.kernel):
            out.append(la)
            continue

        def build(choice, la=la):
            return [Launch(dataclasses.replace(la.kernel, math=choice["math"]), la.args, la.global_size,
                           la.local_size, la.eqns, la.kind)]
        out.extend(tuner.tuned(tuning.MATH, {"math": "fnarray"}, build))
    return out


def schedule(program: Program, caps, **opts) -> Schedule:
    """Group ``program`` (straight-line: no ``cond``/``while``/``scan``) into kernels for ``caps``.

    ``opts``: see ``schedule_program``; ``donate`` (``{input position: output position or None}``, positions
    among constvars + invars and outvars) lets a ``dynamic_update_slice`` of a donated input, or a scatter into
    it, write into that input's buffer, which the output then shares (``groups/in_place.py``)."""
    loops = getattr(caps, "max_loop_iterations", None)
    prog = inline_calls(split_long_reductions(split_long_scans(program, loops), loops))
    prog, _ = dce(prog)
    # No kernel ever sees a zero-size array: empty results need no launch (the runtimes allocate an
    # empty buffer for an output no kernel writes) and results of empty operands are constants.
    prog, _ = dce(drop_zero_size(prog))
    prog = _split_wide(prog, caps.max_buffers_per_kernel)
    prog = _fold_dot_transposes(prog)
    prog = fold_softmax_products(prog)
    ctx = _Ctx(prog, caps, opts)
    _materialize(ctx)
    groups: list = []
    ctx.group_of = {}
    for e in prog.eqns:
        _place(ctx, groups, e)
    outset = {a for a in prog.outvars if isinstance(a, Var)}
    ctx.needed = set(outset)
    for g in groups:
        for r in g.reads:
            if ctx.group_of.get(r) is not g:
                ctx.needed.add(r)
    groups = fuse_horizontal(ctx, groups, _JOIN_WINDOW)
    launches = []
    for g in groups:
        launches.extend(g.codegen())
    launches = tune_kernels(ctx, launches)
    inputs = [ctx.spec(v) for v in ctx.inputs]
    outputs = [a if isinstance(a, Literal) else ctx.spec(a) for a in prog.outvars]
    return Schedule(inputs, launches, outputs, prog)
