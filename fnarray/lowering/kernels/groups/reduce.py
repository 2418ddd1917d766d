"""Reduction kernels: the monoids and ``ReduceGroup``.

One work-item per output, or, for long reductions into few outputs, a work-group per output
cooperating in local memory where the target has it; the elementwise epilogue is fused.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Var
from fnarray.lowering.kernels import facts
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import Emitter, Flat, NotFlat, shaped_index
from fnarray.lowering.kernels.groups.base import (
    REDUCTIONS,
    Group,
    Tracker,
    index_vars,
    kernel_name,
    make_launch,
    placed,
    uniform_binding,
    vectors_fit,
    vec4_binding,
)
from fnarray.lowering.kernels.index import IxData, IxDiv, IxMod, IxVar, ix_var, linearize, to_expr, unravel
from fnarray.lowering.kernels.ir import INT32, BufferParam, Lane, Op, Special, Sym, const, vector_dtype
from fnarray.lowering.kernels.tuning import Tunable
from fnarray.lowering.kernels.rules import (
    add_of,
    convert,
    highest,
    lowest,
    max_of,
    min_of,
    mul_of,
    op,
    select,
)

# ---------------------------------------------------------------------------- reductions

#: Whether elementwise values over a reduction's input shape that read its results at their own row
#: (softmax's ``exp(x - max) / sum``, layernorm's ``(x - mean) * rsqrt(var + eps)``) join the reduction's
#: kernel as one more loop over the row (``ReduceGroup.can_take_row_root``): one kernel instead of two,
#: and the row statistics never reach a buffer. Measured on both CPU adapters here, interleaved: softmax
#: and layernorm over 4096x1024 1.1-2x faster than the two-kernel form (docs/performance.md).
ROW_VALUES = True

#: Whether a work item's row loops that read float32 operands four elements a load (the scheduler option ``row_vec4``)
#: read them through uniform bindings where the scheduler options ``dot_uniform`` (bytes) and ``dot_uniform_windows``
#: (``(bindings, alignment)``) allow (native webgpu on a CPU adapter; lavapipe gathers a uniform array's lanes at once
#: and a storage buffer's lane by lane, docs/traps.md): a buffer of at most ``dot_uniform`` bytes whole (a layernorm's
#: scale and shift), a larger one read at the row's own elements (the attention scores under a softmax) through a
#: window of whole rows, the kernel dispatched once per window (``_row_windows``; one source for every window, its
#: first row and the window's offset scalars of the launch, ``base.placed``). The same loads and the same order of
#: the additions: the results are the storage kernel's bits. Off: storage bindings (an A/B switch).
UNIFORM_ROWS = True
#: The most dispatches (row windows) a row kernel is split into (``UNIFORM_ROWS``); a larger operand keeps its storage
#: binding. 4, as the products' ``dot.ROW_WINDOWS_MAX``: lavapipe's row kernels gain nothing from a window's gathers
#: (a layernorm's rows in 4 windows 0.97-0.99x the storage kernel's CPU time, a softmax over [256, 1024] in 16
#: windows 1.09-1.12x), and each dispatch costs ~30 us of CPU: the transformer step's four attention-softmax
#: gradient kernels in 16 windows each and two cross-entropy row kernels in 7 took 78 of its 290 dispatches; as 6,
#: ~0.91x the step's CPU time at load 6-10 (0.85-1.10x over six runs), ~1.0x at load 3-5 (docs/performance.md,
#: twenty-third session). 64 before.
ROW_WINDOWS_MOST = 4
#: The fewest loads of row windows (``UNIFORM_ROWS``: loops over the row that read one, each one ``vec4`` load an
#: iteration) for a row kernel to be dispatched once per window: a row read once (the causal softmax's scores, kept in a
#: private row by ``row_cache`` for the later loops) gained less than the extra dispatches cost (lavapipe, [16, 4, 64,
#: 64]: 1.14x the CPU time with 16 windows; a layernorm's rows, read by three loops, 0.50x; docs/performance.md).
ROW_WINDOW_READS = 2


_NO_FACT = facts.KernelFact("group", "other")


class _Monoid:
    """A reduction: accumulator dtypes, initial values and how to combine (value, position) pairs."""

    def __init__(self, prim, dtype):
        self.prim, self.dtype = prim, np.dtype(dtype)
        self.arg = prim in (P.argmax, P.argmin)

    def init(self):
        d = self.dtype
        p = self.prim
        if self.arg:
            return [const(0, d), const(-1, INT32)]
        if p == P.reduce_sum:
            return [const(0, d)]
        if p == P.reduce_prod:
            return [const(1, d)]
        if p == P.reduce_max:
            return [lowest(d)]
        if p == P.reduce_min:
            return [highest(d)]
        if p == P.reduce_and:
            # all bits set: -1 for signed types, the maximum for unsigned ones (a literal -1 overflows them)
            return [const(True, d) if d == np.bool_ else const(int(np.array(-1).astype(d)), d)]
        return [const(False, d) if d == np.bool_ else const(0, d)]

    def combine(self, b, acc, new, partial=False):
        """New accumulator values from ``acc`` and ``new`` (lists); for arg-reductions the second entry
        is the position, and ties and NaNs go to the smaller position. ``partial``: ``new`` is another work
        item's accumulator, which may be empty (position -1: a work-group's item past a row shorter than the
        group), and an empty one never wins (argmin of 100 floats above 0 read the idle items' initial 0.0)."""
        p = self.prim
        if self.arg:
            (av, ai), (nv, ni) = acc, new
            empty = op("lt", ai, const(0, INT32))
            better = op("gt", nv, av) if p == P.argmax else op("lt", nv, av)
            tie = op("eq", nv, av)
            if self.dtype.kind == "f":
                nn, an = b.let(op("isnan", nv)), b.let(op("isnan", av))
                better = op("lor", op("land", nn, op("lnot", an)), op("land", op("lnot", an), better))
                tie = op("lor", op("land", nn, an), tie)
            wins = op("lor", better, op("land", tie, op("lt", ni, ai)))
            if partial:
                wins = op("land", op("ge", ni, const(0, INT32)), wins)
            take = b.let(op("lor", empty, wins))
            return [select(take, nv, av), select(take, ni, ai)]
        a, x = acc[0], new[0]
        if p == P.reduce_sum:
            return [add_of(b, a, x)]
        if p == P.reduce_prod:
            return [mul_of(b, a, x)]
        if p == P.reduce_max:
            return [max_of(b, a, x)]
        if p == P.reduce_min:
            return [min_of(b, a, x)]
        if p == P.reduce_and:
            return [op("land" if a.dtype == np.bool_ else "and", a, x)]
        return [op("lor" if a.dtype == np.bool_ else "or", a, x)]

    def dtypes(self):
        return [self.dtype, INT32] if self.arg else [self.dtype]


#: The reduction kernel's tunable choices (``kernels/tuning.py``), for a work item per output: ``lanes``,
#: independent accumulators of its loop over the row (the sums are reassociated: results agree within float32
#: summation error), and ``wg``, work items per group. A cooperative kernel (a work-group per output) has
#: neither to choose.
def _reduce_cost(choice, default, facts) -> float:
    """The reduction's cost model: on a CPU OpenCL driver (PoCL) a work item's row loop is bound by the
    latency of its one accumulator chain, so its cost falls with independent accumulators up to the 8 that
    ``full`` tuning picked on both PoCLs (softmax and layer norm rows of 1024: 0.55-0.75x of 4 lanes;
    docs/performance.md); elsewhere the default. A work-group size away from the default costs a little."""
    away = (choice["wg"] != default["wg"]) * 0.01
    if facts.get("compiler") == "pocl" and facts.get("device") == "cpu":
        return away + 1.0 / choice["lanes"]
    return away + (choice["lanes"] != default["lanes"]) * 0.01


REDUCE_TUNABLE = Tunable("reduce", {"lanes": (1, 2, 4, 8), "wg": (32, 64, 128)},
                         doc="accumulators per work item's row loop and work-group size of a reduction kernel",
                         valid=lambda c, f: (not f.get("cooperative")
                                             and c["wg"] <= (f.get("workgroup_limit") or 1024)
                                             and (c["lanes"] == 1 or f.get("row", 0) >= c["lanes"])),
                         cost=_reduce_cost)


class ReduceGroup(Group):
    """Reductions over the same iteration space (input shape and axes), one accumulator each, with their
    elementwise producers inlined and the elementwise ops on their results as an epilogue."""

    kind = "reduce"
    accepts_roots = True

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.x_shape = eqn.inputs[0].aval.shape
        self.axes = tuple(sorted(eqn.params["axes"]))
        self.parts: list = []   # (eqn, operand, monoid)
        self.row_roots: list = []   # elementwise values over the input's shape computed after the reductions
        self.add_reduction(eqn)

    def add_reduction(self, eqn):
        self.parts.append((eqn, eqn.inputs[0], _Monoid(eqn.primitive, eqn.inputs[0].aval.dtype)))
        self.products.append(eqn.outputs[0])

    def matches(self, eqn) -> bool:
        """Whether ``eqn`` reduces over this group's iteration space."""
        return (eqn.primitive in REDUCTIONS and eqn.inputs[0].aval.shape == self.x_shape
                and tuple(sorted(eqn.params["axes"])) == self.axes)

    def operand_reads(self, x):
        return set(self.operand_read_keys(x))

    def operand_read_keys(self, x) -> dict:
        """``{buffer var: element keys}`` that computing operand ``x`` inline reads (not to be changed: kept for the
        run, since what lives in buffers is settled before the grouping; the transformer step asked 401 times
        about 55 operands: the sibling search, the group's analysis and each ``stages`` call)."""
        known = self.ctx.memo.setdefault("reduce.operand_read_keys", {})
        reads = known.get(x)
        if reads is None:
            b = KernelBuilder("analysis")
            reads = {}
            em = self.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
            em.val(x, shaped_index(x.aval.shape))
            known[x] = reads
        return reads

    def own_key(self, aval):
        """The key of element "this output element" of a value of ``aval`` (the group's output shape), in
        the index variables that ``operand_read_keys`` uses."""
        si = shaped_index(self.x_shape)
        idx = tuple(si[d] for d in range(len(self.x_shape)) if d not in self.axes)
        if aval.shape != self.shape:   # an epilogue value of the same size in another shape (keepdims)
            idx = unravel(linearize(idx, self.shape), aval.shape)
        return Emitter.key(aval, idx)

    def cooperative(self) -> bool:
        """Whether the kernel is a work-group per output element (long reductions into few outputs). With the
        scheduler option ``reduce_per_item`` ``(outputs, rows)`` (webgpu on a CPU adapter), a reduction into at
        least ``outputs`` outputs of rows of at most ``rows`` elements keeps a work item per output: lavapipe
        runs a work-group's invocations as coroutines switched at every barrier of the combining tree, which
        cost more than the work items' longer loops (a layernorm's column sums over 1024 rows 0.63x, softmax
        over [256, 1024] 0.54x the CPU time; fewer outputs leave the SIMD lanes idle, longer rows slower). A row
        whose loops would pass the device's ``max_loop_iterations`` always takes a work-group, however many outputs
        (lavapipe: ``max`` over f16[1024, 65536] came back without its last column)."""
        O, R, _ = self._sizes()
        if not (R > 64 and self.ctx.caps.local_memory):
            return False
        cap = getattr(self.ctx.caps, "max_loop_iterations", None)
        if cap is not None and (max(self.stages()) + 2) * R > cap:
            return True   # a work item's loops over the row would pass the driver's limit, however many outputs
        if O >= 1024:
            return False
        per_item = self.ctx.opts.get("reduce_per_item")
        return not per_item or O < per_item[0] or R > per_item[1]

    def coop_size(self, R) -> int:
        """The work-group size of the cooperative kernel for rows of ``R`` elements (a power of two)."""
        wg = 1 << min(int(math.log2(self.ctx.wg * 2)), (R - 1).bit_length())
        return min(wg, self.ctx.caps.max_workgroup_size or wg)

    def lanes(self, R, n=None) -> int:
        """Independent accumulators of a work-item's loop over a row of ``R``: ``n`` (a ``REDUCE_TUNABLE``
        choice; default the scheduler option ``row_lanes``) where the row has that many elements, else 1. A
        target whose compiler vectorises a work-item's own loops (PoCL on a CPU) gains from several (opencl:0
        here: layernorm 4096x1024 2-4x, softmax 1.5x faster with 4); one that vectorises across work-items
        (lavapipe) loses (~25 %)."""
        n = int(self.ctx.opts.get("row_lanes", 1) if n is None else n)
        return n if n > 1 and R >= n else 1

    def can_chain(self, eqn, dep_keys) -> bool:
        """Whether reduction ``eqn``, whose operand reads the results ``dep_keys`` (var -> keys) of this
        group, can run in this kernel after them: it reads each only at its own output element and none
        is an epilogue value (those are computed after every reduction). The next reduction's loop then
        reads them from a register (a work-item per output) or from the work-group's local memory."""
        if not self.matches(eqn):
            return False
        outs = {e.outputs[0] for e, _, _ in self.parts}
        return all(v in outs and all(k == self.own_key(v.aval) for k in keys) for v, keys in dep_keys.items())

    def can_take_row_root(self, v, reads) -> bool:
        """Whether elementwise value ``v`` (``reads``: var -> keys, from ``root_reads``) can be computed in
        this kernel after its reductions, in one more loop over each row: it has the input's shape and
        reads this group's results (reductions, their epilogue, earlier row values) only at its own row
        (at its own element for row values), and nothing a later kernel computes. The normalised row of
        a softmax or a layernorm then costs no second kernel, and the row statistics no buffer."""
        if not ROW_VALUES or v.aval.shape != self.x_shape or not self.parts or math.prod(self.shape) == 0:
            return False
        limit = self.ctx.caps.max_buffers_per_kernel
        cap = getattr(self.ctx.caps, "max_loop_iterations", None)
        if cap is not None and not self.cooperative() and (max(self.stages()) + 2) * self._sizes()[1] > cap:
            return False   # a work-item per row would loop past the driver's limit (lavapipe: 65,535 in all)
        outside = {r for r in reads if r not in self.products}
        if limit is not None and len(self.reads | outside) + len(self.products) + 1 > limit:
            return False
        own = linearize(shaped_index(self.x_shape), self.x_shape)
        for r, keys in reads.items():
            pg = self.ctx.group_of.get(r)
            if pg is None or pg.index < self.index:
                continue
            if pg is not self:
                return False
            if r in self.row_roots:
                want = own
            elif r in self.products and r.aval.size == math.prod(self.shape):
                want = self.own_key(r.aval)
            else:
                return False
            if want is None or any(k != want for k in keys):
                return False
        return True

    def kept_operands(self) -> dict:
        """``{operand: row value}``: reduction operands that a row value reads at its own element and that
        cost a transcendental to compute (softmax's ``exp(x - max)``, read by ``exp(x - max) / sum``). Their
        reduction's loop stores each into the row value's output buffer, whose loop reads it back there
        instead of computing it again (one ``exp`` per element, not two); the row value then overwrites it."""
        ctx = self.ctx
        kept, taken = {}, set()
        for _, x, m in self.parts:
            e = ctx.producer.get(x) if isinstance(x, Var) else None
            if (e is None or m.arg or x in kept or ctx.in_buffer(x) or x.aval.shape != self.x_shape
                    or facts.FACTS.get(e.primitive, _NO_FACT).cost != "expensive"):
                continue
            for v in self.row_roots:
                if v in ctx.needed and v not in taken and v.aval.dtype == x.aval.dtype and self._uses(v, x):
                    kept[x] = v
                    taken.add(v)
                    break
        return kept

    def _uses(self, v, x) -> bool:
        """Whether ``v``'s inlined expression reads ``x`` at its own element (through elementwise ops
        whose operands all have ``v``'s shape, so that no index changes on the way)."""
        seen, todo = set(), [v]
        while todo:
            u = todo.pop()
            if u is x:
                return True
            e = self.ctx.producer.get(u)
            if u in seen or e is None or (u is not v and self.ctx.in_buffer(u)):
                continue
            seen.add(u)
            if facts.FACTS.get(e.primitive, _NO_FACT).emit not in ("rule", "func"):
                continue
            if all(not isinstance(a, Var) or a.aval.shape == u.aval.shape for a in e.inputs):
                todo.extend(a for a in e.inputs if isinstance(a, Var))
        return False

    def row_invariants(self) -> dict:
        """``{stage: [values]}``: elementwise values of the output's shape that the later loops read and that
        depend only on this group's reductions (layernorm's mean ``sum / n``), by the stage after whose
        results they can be computed: once per row before the loops, not once per element inside them."""
        ctx = self.ctx
        red_stage = {e.outputs[0]: st for (e, _, _), st in zip(self.parts, self.stages(), strict=True)}
        memo: dict = {}

        def stage_of(u):   # the latest reduction stage u depends on, or None if u is not row-invariant
            if not isinstance(u, Var):
                return -1
            if u in red_stage:
                return red_stage[u]
            if u in memo:
                return memo[u]
            memo[u] = None
            e = ctx.producer.get(u)
            if (e is not None and u.aval.shape == self.shape and not ctx.in_buffer(u)
                    and facts.FACTS.get(e.primitive, _NO_FACT).emit in ("rule", "func")):
                sts = [stage_of(a) for a in e.inputs]
                if all(st is not None for st in sts):
                    memo[u] = max(sts)
            return memo[u]

        found: dict = {}
        starts = [x for _, x, _ in self.parts] + list(self.row_roots)
        seen, todo = set(), list(starts)
        while todo:
            u = todo.pop()
            if not isinstance(u, Var) or u in seen:
                continue
            seen.add(u)
            st = stage_of(u)
            if st is not None and st >= 0 and u not in red_stage:
                found.setdefault(st, []).append(u)
                continue
            e = ctx.producer.get(u)
            if e is not None and (u in starts or not ctx.in_buffer(u)):
                todo.extend(e.inputs)
        order = ctx.order
        return {st: sorted(vs, key=lambda v: order.get(id(ctx.producer[v]), 0)) for st, vs in found.items()}

    def add_row_root(self, v, reads):
        self.row_roots.append(v)
        self.products.append(v)
        self.reads |= {r for r in reads if r not in self.products}

    def stages(self):
        """Stage of each part: 0, or one more than the latest stage of a part whose result it reads."""
        out_stage: dict = {}
        stages = []
        for e, x, _ in self.parts:
            reads = self.operand_reads(x)
            st = max((out_stage[v] + 1 for v in reads if v in out_stage), default=0)
            stages.append(st)
            out_stage[e.outputs[0]] = st
        return stages

    def analyse(self):
        for _, x, _ in self.parts:
            self.reads |= self.operand_reads(x)

    def _sizes(self):
        shape = self.x_shape
        R = math.prod(shape[a] for a in self.axes)
        O = math.prod(self.shape)
        contiguous = all(b - a == 1 for a, b in zip(self.axes[:-1], self.axes[1:], strict=True))
        inner = math.prod(shape[self.axes[-1] + 1:]) if self.axes and contiguous else None
        return O, R, inner

    def codegen(self):
        O, R, _ = self._sizes()
        if O == 0:
            return []
        default = {"lanes": int(self.ctx.opts.get("row_lanes", 1)), "wg": self.ctx.wg}
        return self.ctx.tuned(REDUCE_TUNABLE, default, self._variant,
                              {"cooperative": self.cooperative(), "row": R})

    def _variant(self, choice):
        O, R, inner = self._sizes()
        stages = self.stages()
        chained = max(stages) > 0
        parallel = self.cooperative()
        if inner is not None and not chained and not self.row_roots:
            # chained or row values: shaped indices, so a result read back is the register
            try:
                return self._gen(O, R, inner, parallel, True, choice)
            except NotFlat:
                pass
        return self._gen(O, R, inner, parallel, False, choice)

    def _gen(self, O, R, inner, parallel, flat, choice, vectors=True, windows=True):
        """One kernel for the whole group in one of three layouts: a work-group per output combining its
        work-items' accumulators in local memory (``cooperative``), the same for dependent stages
        (``cooperative_stages``), or a work-item per output (``per_item``). ``vectors=False``: no ``vec4``
        reads of the rows (``_ReduceKernel.vector_vars``), where a vector binding would exceed the target's
        buffers per kernel or alias a buffer the kernel writes."""
        stages = self.stages()
        chained = max(stages) > 0
        k = _ReduceKernel(self, O, R, inner, parallel, flat, choice, vectors, windows)
        if parallel and not chained and not self.row_roots:
            k.cooperative()
        elif parallel:
            k.cooperative_stages(stages)
        else:
            k.per_item()
        b = k.b
        b.name = kernel_name("reduce", k.tracker.eqns)
        launch = make_launch(b, k.args, k.scalars, k.gsize, k.lsize, k.tracker.eqns, "reduce", fixed_local=parallel)
        if k.vectors_bound and not vectors_fit(self.ctx.caps, launch):
            return self._gen(O, R, inner, parallel, flat, choice, vectors=False)
        if k.windows and k.window_reads < ROW_WINDOW_READS:   # too few reads of windows: one dispatch for every row
            return self._gen(O, R, inner, parallel, flat, choice, vectors, windows=False)
        return k.window_launches(launch) if k.windows else [launch]


def _row_windows(O, R, limits) -> tuple:
    """``(per, ((o0, o1, offset), ...))``: windows of a buffer of ``O`` rows of ``R`` float32 elements (row-major, ``R``
    a multiple of 4) of ``per`` whole rows each (``4 per R`` bytes, at most ``limit`` and a multiple of ``align``;
    ``limits = (limit, align)``), window ``i`` holding the rows ``o0 .. o1 - 1`` from byte ``offset``: the last one moved
    back to end at the buffer's end, so that every window has the same size (one kernel source reads them all). ``()``
    where the buffer fits one binding, its size is not a multiple of ``align``, or more than ``ROW_WINDOWS_MOST``
    windows would be needed."""
    limit, align = limits
    row, total = 4 * R, 4 * R * O
    if total <= limit or total % align or row % 16:
        return ()
    step = align // math.gcd(align, row)   # rows a window's size is a multiple of, so that every offset is aligned
    per = limit // row // step * step
    if per == 0 or -(-O // per) > ROW_WINDOWS_MOST:
        return ()
    return per, tuple((o0, min(O, o0 + per), min(o0 * row, total - per * row)) for o0 in range(0, O, per))


def _of_indices(ix) -> bool:
    """Whether the index form ``ix`` is made of index variables only (no data value: a gather's index is a local
    of the kernel being built, which a scratch builder's analysis names otherwise)."""
    for t, _ in ix.terms:
        if isinstance(t, IxData) or (isinstance(t, (IxDiv, IxMod)) and not _of_indices(t.x)):
            return False
    return True


def _mentions(ix, name) -> bool:
    """Whether the index form ``ix`` depends on the index variable ``name``."""
    for t, _ in ix.terms:
        if (isinstance(t, IxVar) and t.name == name) or (isinstance(t, (IxDiv, IxMod)) and _mentions(t.x, name)):
            return True
    return False


class _ReduceKernel:
    """One reduce kernel being built for ``ReduceGroup._gen``: its builder, emitter and index state, and the
    steps its layouts are made of. ``out`` is the output element's index (coordinates, or ``Flat``); with
    ``flat`` the input element ``r`` of the row is ``base + r * I``; ``rows`` is the row length ``R`` as an
    expression (a kernel argument when flat)."""

    def __init__(self, group, O, R, inner, parallel, flat, choice, vectors=True, windows=True):
        self.g, self.ctx, self.R, self.inner, self.flat = group, group.ctx, R, inner, flat
        self.choice = choice  # REDUCE_TUNABLE's
        ctx = self.ctx
        b = self.b = KernelBuilder("k")
        self.args: dict = {}
        self.tracker = Tracker(ctx)
        for e, _, _ in group.parts:
            self.tracker.add(e)
        self.em = ctx.emitter(b, args=self.args, computes=set(group.roots) | set(group.row_roots),
                              tracker=self.tracker)
        self.scalars: dict = {}
        self.O, self.shape = O, group.x_shape
        self.vectors = vectors and not parallel and self._rows_aligned()
        self.windows = self._windows() if windows and self.vectors else ()
        self.window_names: set = set()   # the uniform bindings of the windows (``_row_windows``) that a load reads
        self.window_reads = 0   # the loads of them
        if parallel:
            self.wg = group.coop_size(R)
            self.o, self.lid = Special("group_id", 0), Special("local_id", 0)
            self.gsize, self.lsize = (O * self.wg,), (self.wg,)
        elif self.windows:   # a dispatch per window of rows: the work item's row counted from the window's first
            gid, self.gsize, self.lsize = ctx.gid(b, self.windows[0], choice["wg"])
            self.o = b.let(op("add", gid, b.scalar("o_base")), "o")
            self.scalars.update(o_base=0, w_off=self.windows[1][0][2] // 16)
        else:
            self.o, self.gsize, self.lsize = ctx.gid(b, O, choice["wg"])
        self.red_shape = tuple(self.shape[a] for a in group.axes)
        self.kept = group.kept_operands() if group.row_roots else {}
        self.invariants = group.row_invariants()
        self.out = self.base = self.I = self.rows = None  # set by ``setup``
        self.vector_names: dict = {}   # (buffer var, whether its window is read) -> its vec4 binding's name
        # row values stored (and kept operands stored into them) four elements at a time, through a vec4
        # binding of their output buffer, which every loop of the kernel then takes four elements at a time
        f32 = np.dtype(np.float32)
        self.vector_out = {v for v in group.row_roots if v in ctx.needed and v.aval.dtype == f32} \
            if self.vectors else set()
        self.pending: dict = {}   # vector_out value -> its four lanes' values, by fold
        self.vectors_bound = False
        self.cache: dict = {}     # operand -> the private array holding its row (``cache_rows``)
        self.kept_rows: dict = {}   # kept operand -> the private array holding its row (``cache_rows``)
        self.cache_filled = False   # whether the first loop has stored them (later loops read them there)

    # ------------------------------------------------------------------ the three layouts
    def cooperative(self):
        """A work-group per output: each work-item folds a strided part of the row, the tree combines them,
        work-item 0 finishes."""
        b, lid, wg = self.b, self.lid, self.wg
        self.setup()
        arrays = self.tree(self.g.parts, self.accumulate(lid, const(wg, INT32)))
        with b.when(op("eq", lid, const(0, INT32))):
            self.finish(self.slot0(self.g.parts, arrays))

    def cooperative_stages(self, stages):
        """Dependent reductions, cooperatively: every work-item reads a stage's results from local memory
        (after the tree's last barrier) before the next stage's loop; work-item 0 stores them."""
        b, g, lid, wg = self.b, self.g, self.lid, self.wg
        self.setup()
        for st in range(max(stages) + 1):
            parts = [p for p, s_ in zip(g.parts, stages, strict=True) if s_ == st]
            vals = self.slot0(parts, self.tree(parts, self.accumulate(lid, const(wg, INT32), parts)))
            self.results(parts, vals, store_if=op("eq", lid, const(0, INT32)))
            self.hoist(st)
        if g.row_roots:
            self.roots_everywhere(op("eq", lid, const(0, INT32)))
            self.row_values(lid, const(wg, INT32))
        else:
            with b.when(op("eq", lid, const(0, INT32))):
                g.emit_roots(b, self.em, self.args, self.out, self.o)

    def per_item(self):
        """A work-item per output, its stages one loop over the row each, then the row values."""
        b = self.b
        self.scalars["O"] = self.windows[1][0][1] if self.windows else self.O   # a window's end row, or all of them
        with b.when(op("lt", self.o, b.scalar("O"))):
            self.setup()
            self.cache_rows()
            self.staged()
            self.row_values(const(0, INT32), None)

    # ------------------------------------------------------------------ steps
    def setup(self):
        """The output element's coordinates (shaped) or its first input element (flat)."""
        b, o = self.b, self.o
        if self.flat:
            Rs, Is = b.scalar("R"), b.scalar("I")
            self.scalars.update(R=self.R, I=self.inner)
            self.I, self.rows = Is, Rs
            self.base = b.let(op("add", op("mul", op("mul", op("div", o, Is), Rs), Is), op("rem", o, Is)), "base")
            self.out = Flat(o)
        else:
            self.rows = const(self.R, INT32)
            self.out = index_vars(b, o, self.g.shape)

    def cache_rows(self):
        """The operands of the first loop over the row that a later loop reads again at the same element,
        kept in a private array of the row (the scheduler option ``row_cache``: the longest row kept; a work
        item per output, shaped indices), so that the later loops read them there instead of computing them
        again (layernorm's gathered embedding row, read by its variance and its normalised row; a masked
        attention row, read by its sum of exps and its softmax). Only values computed inline (not a plain
        buffer read) of float32 are kept: each later loop then reads one private element where it would
        have gathered and recomputed; the values and the order of the additions are unchanged. The kept
        operands (``kept_operands``: softmax's ``exp(x - max)``) get a private row as well, where the reduction's
        loop stores them and the row values' loop reads them, instead of their row value's output buffer (a store
        and a load of a storage buffer per element, each a loop over the lanes on lavapipe: the causal softmax's
        kernel over [4096, 64] 0.6-0.75x the CPU time, docs/performance.md)."""
        g, ctx = self.g, self.ctx
        limit = int(ctx.opts.get("row_cache", 0) or 0)
        stages = g.stages()
        if self.flat or not limit or self.R > limit or (max(stages) == 0 and not g.row_roots):
            return
        f32 = np.dtype(np.float32)
        for x in self.kept:
            if x.aval.dtype == f32:
                self.kept_rows[x] = self.b.array("private", f32, self.R, "kept")
        later = [x for (_, x, _), st in zip(g.parts, stages, strict=True) if st > 0] + list(g.row_roots)
        first = [x for (_, x, _), st in zip(g.parts, stages, strict=True) if st == 0]
        for x in dict.fromkeys(first):
            if (isinstance(x, Var) and x not in self.kept and x.aval.dtype == f32 and x.aval.shape == self.shape
                    and not ctx.in_buffer(x) and ctx.producer.get(x) is not None
                    and any(g._uses(v, x) for v in later)):
                self.cache[x] = self.b.array("private", f32, self.R, "row")

    def cached_row(self, r, k=None):
        """Seed the kept operands (``cache_rows``) at element ``r`` (``r + k``) from their private arrays."""
        if not self.cache_filled:
            return
        b = self.b
        at = r if not k else b.let(op("add", r, const(k, INT32)))
        xi = self.x_index(r, k)
        for x, arr in self.cache.items():
            self.em.seed(x, xi, b.load(arr, at, x.aval.dtype, "private"))

    def x_index(self, r, k=None):
        """The coordinates of the row's element ``r`` in the reduced operand; with ``k``, of element ``r + k``
        of a loop over ``r`` by steps of 4 (``r`` then at most ``R - 4``, so that ``r + k`` stays in the row)."""
        g = self.g
        row = ix_var(r.name, self.R) if k is None else ix_var(r.name, self.R - 3) + k
        kidx = iter(unravel(row, self.red_shape) if self.red_shape else ())
        oidx = iter(self.out)
        return tuple(next(kidx) if d in g.axes else next(oidx) for d in range(len(self.shape)))

    def x_at(self, x, r, k=None):
        b = self.b
        if self.flat:
            return self.em.val(x, Flat(b.let(op("add", self.base, op("mul", r, self.I)))))
        return self.em.val(x, self.x_index(r, k))

    # ------------------------------------------------------------------ vec4 reads of the rows
    def _rows_aligned(self) -> bool:
        """Whether the row loops may take four elements per iteration (the scheduler option ``row_vec4``, webgpu
        on a CPU adapter, where each lane's scalar load is a gather): a work-item per output over the last axis
        only, shaped indices, and a row length that is a multiple of 4. Each such loop then reads its operands
        one ``vec4`` per four elements where their keys allow (``vector_reads``) and stores its row values, and
        the kept operands into them, one ``vec4`` each (``store_vectors``); the elements are still folded one
        at a time in order, so the results are the scalar form's, bit for bit."""
        g = self.g
        return bool(self.ctx.opts.get("row_vec4", False) and not self.flat and self.R % 4 == 0
                    and g.axes == (len(self.shape) - 1,))

    def vector_reads(self, xs, r, row_values=False) -> list:
        """``[(buffer var, key)]``: the float32 buffers that computing the values ``xs`` at the element ``r`` of a
        loop by steps of 4 reads at ``key = r + 4m`` (``r`` itself, with coefficient 1 and in no division, plus
        terms and a constant that are multiples of 4), and that this kernel does not write: each such read is one
        ``vec4`` load, whose lane ``k`` is the element at ``key + k`` (what the loop's element ``r + k`` reads
        there when the key is affine in the row position; any element it seeds is right either way). Found by
        emitting ``xs`` into a scratch builder (``ctx.emitter``'s analysis form) that knows what the kernel's
        emitter knows; empty unless ``_rows_aligned``. ``row_values``: ``xs`` are the row values (their loop
        reads the kept operands back from their buffers, ``kept_operands``)."""
        if not self.vectors:
            return []
        g, f32 = self.g, np.dtype(np.float32)
        reads = self._loop_reads(xs, r, 0, row_values)
        row = ix_var(r.name, self.R - 3)
        found = []
        for u, keys in reads.items():
            if u in g.products or u in g.roots or u.aval.dtype != f32 or u.aval.size == 1:
                continue
            for key in sorted(keys, key=repr):
                off = key - row
                if (off.const % 4 == 0 and all(c % 4 == 0 for _, c in off.terms) and _of_indices(key)
                        and (row.is_const() or (key != off and not _mentions(off, r.name)))):
                    found.append((u, key))
        return found

    def _loop_reads(self, xs, r, k, row_values) -> dict:
        """``{buffer var: keys}`` that computing ``xs`` at the row's element ``r`` (``r + k``: ``x_index``) of a loop
        reads: ``xs`` emitted into a scratch builder (``ctx.emitter``'s analysis form) that knows what the kernel's
        emitter knows, the kept operands (``row_values``) and the cached rows read where the loop reads them."""
        g = self.g
        reads: dict = {}
        an = self.ctx.emitter(KernelBuilder("analysis"), computes=set(g.roots) | set(g.row_roots),
                              on_read=lambda var, key: reads.setdefault(var, set()).add(key))
        an.adopt(self.em)
        xi = self.x_index(r, k)
        for x in self.kept if row_values else ():
            an.seed(x, xi, const(0, x.aval.dtype))
        for x in self.cache if self.cache_filled else ():   # read from the private row, not recomputed
            an.seed(x, xi, const(0, x.aval.dtype))
        for x in xs:
            an.val(x, xi)
        return reads

    def hoist_reads(self, xs, vec, row_values=False):
        """Load before a loop over the row the buffer elements that computing ``xs`` reads at the same place for
        every element of the row (layernorm's token id, a bias of the output's own column, a scalar), each seeded
        for the loop's body to find (the scheduler option ``row_hoist``, webgpu on a CPU adapter: lavapipe loads a
        storage element lane by lane, in a loop, and does not move a load out of the row's loop itself). ``vec``:
        the loop takes four elements per iteration. The values read are the same; only where they are loaded."""
        if not self.ctx.opts.get("row_hoist") or self.flat:
            return
        g, b, row = self.g, self.b, Sym("fa_row", INT32)
        for u, keys in self._loop_reads(xs, row, 0 if vec else None, row_values).items():
            if u in g.products or u in g.roots:
                continue
            for key in keys:
                if key != "zero" and (not _of_indices(key) or _mentions(key, row.name)):
                    continue
                at = const(0, INT32) if key == "zero" else to_expr(key)
                self.em.seed_key(u, key, b.let(b.load(self.em.buffer_of(u), at, u.aval.dtype), "row_inv"))

    def vectorised(self, xs, row_values=False) -> bool:
        """Whether a loop over the row computing ``xs`` takes four elements per iteration: some of its reads
        are ``vec4`` loads (``vector_reads``, asked of a counter that is not the loop's yet)."""
        return bool(self.vectors and (self.vector_out or self.vector_reads(xs, Sym("fa_row", INT32), row_values)))

    def wide_output(self, v) -> str:
        """The name of the vec4 binding (read and written) of row value ``v``'s output buffer."""
        name = vec4_binding(self.b, self.args, self.ctx.spec(v), v.aval.dtype, writes=True)
        self.vectors_bound = True
        return name

    def store_vectors(self, r, values):
        """``{row value: its four values}`` at ``r .. r + 3`` stored as one vec4 each."""
        b = self.b
        at = b.let(op("div", to_expr(linearize(self.x_index(r, 0), self.shape)), const(4, INT32)))
        for v, vals in values.items():
            b.store(self.wide_output(v), at, Op("vector4", tuple(vals), vector_dtype(v.aval.dtype)))

    def vector_loads(self, reads, r):
        """``reads``' ``vec4`` loads (``vector_reads`` at the loop's element ``r``), each lane seeded as its element in
        the emitter."""
        b, em, four = self.b, self.em, const(4, INT32)
        vdt = vector_dtype(np.float32)
        for u, key in reads:
            window = bool(self.windows) and u.aval.size == self.O * self.R and key == linearize(
                self.x_index(r, 0), self.shape)   # the row's own elements
            name = self.vector_names.get((u, window))
            if name is None:
                name = self.vector_names[u, window] = self.row_binding(u, window)
            at = op("div", to_expr(key), four)
            if name in self.window_names:
                at = op("sub", at, b.scalar("w_off"))
                self.window_reads += 1
            v = b.load(name, at, vdt)
            for k in range(4):
                em.seed_key(u, key + k, b.let(Lane(v, k, u.aval.dtype)))

    def row_binding(self, u, window) -> str:
        """The ``vec4`` binding of float32 operand ``u``'s buffer for ``vector_loads`` (``UNIFORM_ROWS``): the whole
        buffer as a uniform array where it has at most ``dot_uniform`` bytes, else this launch's window of its rows
        (``window``: it is read at the row's own elements, ``_row_windows``), while the stage has uniform bindings
        left (``dot_uniform_windows``); else a storage binding."""
        b, ctx, f32 = self.b, self.ctx, np.dtype(np.float32)
        spec = ctx.spec(u)
        self.vectors_bound = True   # ``vectors_fit`` checks them all (a buffer also bound written refuses any)
        size = 4 * math.prod(spec.shape)
        room = ctx.opts.get("dot_uniform_windows", (0, 16))[0] - sum(
            isinstance(p, BufferParam) and bool(p.uniform) for p in b.params)
        if UNIFORM_ROWS and room > 0 and size % 16 == 0 and size <= ctx.opts.get("dot_uniform", 0):
            return uniform_binding(b, self.args, spec, f32)
        if UNIFORM_ROWS and room > 0 and window and size == 4 * self.O * self.R:
            per, wins = self.windows
            name = uniform_binding(b, self.args, spec, f32, (wins[0][2], 4 * per * self.R))
            self.window_names.add(name)
            return name
        return vec4_binding(b, self.args, spec, f32)

    def _windows(self) -> tuple:
        """``_row_windows`` of this kernel's rows where ``UNIFORM_ROWS`` and the scheduler options allow."""
        opts = self.ctx.opts
        if not (UNIFORM_ROWS and opts.get("dot_uniform") and opts.get("dot_uniform_windows")):
            return ()
        return _row_windows(self.O, self.R, (opts["dot_uniform"], opts["dot_uniform_windows"][1]))

    def window_launches(self, launch) -> list:
        """``launch`` once per window of rows (``_row_windows``): its window bindings placed at the window's offset,
        the scalars ``o_base`` (the window's first row), ``O`` (its end) and ``w_off`` (its offset in vectors)."""
        return [placed(launch, dict.fromkeys(self.window_names, at), {"o_base": o0, "O": o1, "w_off": at // 16})
                for o0, o1, at in self.windows[1]]

    def hoist(self, st):
        for u in self.invariants.get(st, ()):
            self.em.seed(u, self.out, self.em.val(u, self.out))

    def row_values(self, start, step):
        """The row values (softmax's exp(x - max) / sum), one more loop over the row after the reductions."""
        b, g, em, ctx = self.b, self.g, self.em, self.ctx
        if not g.row_roots:
            return
        vec = step is None and self.vectorised(g.row_roots, row_values=True)
        if step is None:
            self.hoist_reads(g.row_roots, vec, row_values=True)
        with b.loop(start, self.rows, const(4, INT32) if vec else step) as r:
            if vec:
                self.vector_loads(self.vector_reads(g.row_roots, r, row_values=True), r)
            kept = {}
            for x, v in self.kept.items() if vec else ():   # read back four at a time before any store
                if v in self.vector_out and x not in self.kept_rows:
                    at = op("div", to_expr(linearize(self.x_index(r, 0), self.shape)), const(4, INT32))
                    w = b.let(b.load(self.wide_output(v), at, vector_dtype(x.aval.dtype)), "kept")
                    kept[x] = [b.let(Lane(w, k, x.aval.dtype)) for k in range(4)]
            stores: dict = {}
            for k in range(4) if vec else [None]:
                self.cached_row(r, k)
                xi = self.x_index(r, k)
                pos = b.let(to_expr(linearize(xi, self.shape)))
                for x, v in self.kept.items():   # stored there by the reduction's loop, by this work-item
                    if x in self.kept_rows:
                        at = r if not k else b.let(op("add", r, const(k, INT32)))
                        em.seed(x, xi, b.let(b.load(self.kept_rows[x], at, x.aval.dtype, "private")))
                        continue
                    em.seed(x, xi, kept[x][k] if x in kept else
                            b.let(b.load(ctx.output(b, self.args, v), pos, x.aval.dtype), "kept"))
                for v in g.row_roots:
                    val = em.val(v, xi)
                    em.seed(v, xi, val)
                    if v in self.vector_out and vec:
                        stores.setdefault(v, []).append(val)
                    elif v in ctx.needed:
                        b.store(ctx.output(b, self.args, v), pos, val)
            self.store_vectors(r, stores)

    def fold(self, parts, accs, r, k=None):
        """One element ``r`` (``r + k``: ``x_index``) of the row folded into the accumulators ``accs`` (kept
        operands stored)."""
        b = self.b
        self.cached_row(r, k)
        for (_, x, m), acc in zip(parts, accs, strict=True):
            xv = self.x_at(x, r, k)
            if x in self.cache and not self.cache_filled:
                b.store(self.cache[x], r if not k else b.let(op("add", r, const(k, INT32))), xv, space="private")
            if x in self.kept_rows:
                b.store(self.kept_rows[x], r if not k else b.let(op("add", r, const(k, INT32))), xv, space="private")
            elif x in self.kept and k is not None and self.kept[x] in self.vector_out:
                self.pending.setdefault(self.kept[x], []).append(xv)
            elif x in self.kept:
                b.store(self.ctx.output(b, self.args, self.kept[x]),
                        b.let(to_expr(linearize(self.x_index(r, k), self.shape))), xv)
            pos = r if not k else b.let(op("add", r, const(k, INT32)))
            for a, v in zip(acc, m.combine(b, acc, [xv, pos] if m.arg else [xv]), strict=True):
                b.assign(a, v)

    def fresh(self, parts):
        b = self.b
        return [[b.var(d, v) for d, v in zip(m.dtypes(), m.init(), strict=True)] for _, _, m in parts]

    def accumulate(self, start, step, parts=None):
        """The accumulators of ``parts`` over the row from ``start`` by ``step`` (``None``: every element, in
        ``lanes`` independent accumulators where the group allows)."""
        b = self.b
        parts = self.g.parts if parts is None else parts
        accs = self.fresh(parts)
        U = self.g.lanes(self.R, self.choice["lanes"]) if step is None else 1
        xs = [x for _, x, _ in parts]
        if step is None and U == 1 and self.vectorised(xs):
            # four elements per iteration, each folded in order: the same results, bit for bit
            self.hoist_reads(xs, True)
            with b.loop(start, self.rows, const(4, INT32)) as r:
                self.vector_loads(self.vector_reads(xs, r), r)
                for k in range(4):
                    self.fold(parts, accs, r, k)
                self.store_vectors(r, self.pending)
                self.pending = {}
            return accs
        if U == 1:
            if step is None:
                self.hoist_reads(xs, False)
            with b.loop(start, self.rows, step) as r:
                self.fold(parts, accs, r)
            return accs
        # U independent accumulators over r = U*j + k (a work-item per row): the compiler can vectorise
        # the row's loop, which one accumulator's chain of rounding-ordered additions forbids. The tail
        # goes to lane 0; the lanes are combined in order (arg-reductions compare positions, so ties
        # still go to the first index).
        lanes = [accs] + [self.fresh(parts) for _ in range(U - 1)]
        end = b.let(op("mul", op("div", self.rows, const(U, INT32)), const(U, INT32)), "end")
        with b.loop(start, end, const(U, INT32)) as r:
            for k, lane in enumerate(lanes):
                self.fold(parts, lane, r if k == 0 else b.let(op("add", r, const(k, INT32))))
        with b.loop(end, self.rows) as r:
            self.fold(parts, accs, r)
        for lane in lanes[1:]:
            for (_, _, m), acc, other in zip(parts, accs, lane, strict=True):
                for a, v in zip(acc, [b.let(v) for v in m.combine(b, acc, other)], strict=True):
                    b.assign(a, v)
        return accs

    def results(self, parts, accs, store_if=None):
        """The reductions' results from their accumulators: seeded for later reads, stored where needed."""
        b, ctx, o = self.b, self.ctx, self.o
        for (e, _, m), vals in zip(parts, accs, strict=True):
            outv = e.outputs[0]
            res = b.let(convert(b, vals[1], outv.aval.dtype)) if m.arg else b.let(vals[0])
            self.em.seed(outv, self.out, res)  # a later stage's operand reads it here, from the register
            if outv in ctx.needed:
                if store_if is None:
                    b.store(ctx.output(b, self.args, outv), o, res)
                else:
                    with b.when(store_if):
                        b.store(ctx.output(b, self.args, outv), o, res)

    def finish(self, accs):
        self.results(self.g.parts, accs)
        self.g.emit_roots(self.b, self.em, self.args, self.out, self.o)

    def roots_everywhere(self, store_if):
        """``emit_roots`` in every work-item of the group (the row values read them), stored by one."""
        b, g, em, ctx = self.b, self.g, self.em, self.ctx
        idx = self.out
        for r in g.roots:
            ridx = idx
            if r.aval.shape != g.shape:   # same size, other shape: seed the reshape's way back
                ridx = unravel(linearize(idx, g.shape), r.aval.shape)
                back = unravel(linearize(ridx, r.aval.shape), g.shape)
                for p in g.products:
                    if p.aval.shape == g.shape and em.known(p, idx) is not None:
                        em.seed(p, back, em.known(p, idx))
            v = em.val(r, ridx)
            em.seed(r, ridx, v)
            if r in ctx.needed:
                with b.when(store_if):
                    b.store(ctx.output(b, self.args, r), self.o, v)

    def staged(self):
        """Dependent reductions (softmax's max, then its sum of exp(x - max)): one loop over the row per
        stage, each stage's results seeded before the next stage's loop reads them."""
        g = self.g
        stages = g.stages()
        for st in range(max(stages) + 1):
            parts = [p for p, s in zip(g.parts, stages, strict=True) if s == st]
            self.results(parts, self.accumulate(const(0, INT32), None, parts))
            self.cache_filled = bool(self.cache)
            self.hoist(st)
        g.emit_roots(self.b, self.em, self.args, self.out, self.o)

    def tree(self, parts, accs):
        """The work-group's accumulators combined in local memory; returns the arrays (slot 0: result)."""
        b, lid, wg = self.b, self.lid, self.wg
        arrays = []
        for (_, _, m), acc in zip(parts, accs, strict=True):
            arrs = [b.array("local", d, wg, "red") for d in m.dtypes()]
            for arr, a in zip(arrs, acc, strict=True):
                b.store(arr, lid, a, space="local")
            arrays.append(arrs)
        b.barrier()
        s = wg // 2
        while s >= 1:
            with b.when(op("lt", lid, const(s, INT32))):
                other = b.let(op("add", lid, const(s, INT32)))
                for (_, _, m), arrs in zip(parts, arrays, strict=True):
                    ds = m.dtypes()
                    mine = [b.load(arr, lid, d, "local") for arr, d in zip(arrs, ds, strict=True)]
                    theirs = [b.load(arr, other, d, "local") for arr, d in zip(arrs, ds, strict=True)]
                    new = [b.let(v) for v in m.combine(b, mine, theirs, partial=True)]
                    for arr, v in zip(arrs, new, strict=True):
                        b.store(arr, lid, v, space="local")
            b.barrier()
            s //= 2
        return arrays

    def slot0(self, parts, arrays):
        b = self.b
        return [[b.load(arr, const(0, INT32), d, "local") for arr, d in zip(arrs, m.dtypes(), strict=True)]
                for (_, _, m), arrs in zip(parts, arrays, strict=True)]


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {p: ReduceGroup for p in REDUCTIONS}
