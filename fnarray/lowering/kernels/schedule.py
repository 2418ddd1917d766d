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
"""

from __future__ import annotations

import abc
import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.fft import fft_p
from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.passes import dce
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.lowering.kernels import facts
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import INJECTIVE, Emitter, Flat, NotFlat, shaped_index
from fnarray.lowering.kernels.long_scans import split_long_scans
from fnarray.lowering.kernels.index import ix_const, ix_data, ix_var, linearize, to_expr, unravel
from fnarray.lowering.kernels.ir import INT32, BufferParam, Cast, Let, Special, Sym, const
from fnarray.lowering.zero_size import drop_zero_size
from fnarray.lowering.kernels.rules import (add_of, convert, highest, logaddexp, lowest, max_of, min_of, mul_of,
                                            op, select)

__all__ = ["schedule", "Schedule", "Launch", "BufSpec", "inline_calls", "SCHEDULED", "REDUCTIONS", "OPAQUE",
           "CALLS"]

CALLS = CALL_PROGRAM  # the call-like primitives and the param of the program each runs (core/subprograms.py)
REDUCTIONS = frozenset({P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min, P.reduce_and, P.reduce_or,
                        P.argmax, P.argmin})
CUMULATIVE = frozenset({P.cumsum, P.cumprod, P.cummax, P.cummin, P.cumlogsumexp})
SCATTERS = frozenset({P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max})
OPAQUE = frozenset({P.dot_general, P.sort, fft_p}) | CUMULATIVE | SCATTERS
# Every primitive the scheduler turns into kernels (control flow is driven from the host).
SCHEDULED = INJECTIVE | REDUCTIONS | OPAQUE | frozenset(CALLS)

# Cost classes from the kernel facts (fnarray.lowering.kernels.facts).
_EXPENSIVE = facts.with_cost("expensive")
_FREE = facts.with_cost("free")
_COST_LIMIT = 240      # largest inlined expression tree (duplicates counted) before a value is materialised
_EXPENSIVE_COST = 10
_VIEW_OPS = frozenset({P.transpose, P.reshape, P.broadcast_in_dim})
_JOIN_WINDOW = 64    # how many of the latest kernels a new elementwise root may join or ride along with
_HOIST_SIZE = 1024  # elements of a kernel from which one-element expensive values get their own kernel


class BufSpec:
    """A buffer of the schedule: ``shape`` and ``dtype`` (identity-hashed)."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype, name):
        self.shape, self.dtype, self.name = tuple(shape), np.dtype(dtype), name

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"BufSpec({self.name}:{self.dtype.name}{list(self.shape)})"


class Launch:
    """One kernel launch: the kernel IR, its arguments (``BufSpec`` or Python scalar per parameter),
    work sizes, and the IR equations it fused (for inspection)."""

    __slots__ = ("kernel", "args", "global_size", "local_size", "eqns", "kind")

    def __init__(self, kernel, args, global_size, local_size, eqns, kind):
        self.kernel, self.args = kernel, tuple(args)
        self.global_size, self.local_size = tuple(global_size), local_size
        self.eqns, self.kind = tuple(eqns), kind


class Schedule:
    """Inputs (``BufSpec`` per constvar + invar), launches in order, outputs (``BufSpec`` or ``Literal``)."""

    def __init__(self, inputs, launches, outputs, program):
        self.inputs, self.launches, self.outputs, self.program = inputs, launches, outputs, program


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
    uses: dict = {}
    for e in prog.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
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


# ------------------------------------------------------------------------------------------ dot views


def _contiguous(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(out[::-1])


def _reshape_strides(old_shape, old_strides, new_shape):
    """Strides that read ``new_shape`` from a strided ``old_shape`` without a copy, or ``None``."""
    old = [(n, s) for n, s in zip(old_shape, old_strides, strict=True) if n != 1]
    new_idx = [i for i, n in enumerate(new_shape) if n != 1]
    out = [0] * len(new_shape)
    oi = ni = 0
    while oi < len(old) and ni < len(new_idx):
        op_, np_ = old[oi][0], new_shape[new_idx[ni]]
        oj, nj = oi + 1, ni + 1
        while op_ != np_:
            if np_ < op_:
                np_ *= new_shape[new_idx[nj]]
                nj += 1
            else:
                op_ *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            out[new_idx[k]] = stride
            stride *= new_shape[new_idx[k]]
        oi, ni = oj, nj
    return tuple(out)


def _collapse(dims, shape, strides):
    """One stride for iterating ``dims`` (row-major, in that order) as one index, or ``None``."""
    live = [d for d in dims if shape[d] != 1]
    if not live:
        return 0
    for a, c in zip(live[:-1], live[1:], strict=True):
        if strides[a] != strides[c] * shape[c]:
            return None
    return strides[live[-1]]


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
        return Emitter(b, self.producer, buffer_of, on_read, tracker.add if tracker is not None else None)

    def output(self, b, args, v, hint="out") -> str:
        spec = self.spec(v)
        name = b.buffer(spec, v.aval.dtype, True, hint)
        args[name] = spec
        return name

    def gid(self, b, n_items, wg):
        """The linear work-item id and the launch sizes for ``n_items`` items in groups of ``wg``."""
        groups = max(1, -(-n_items // wg))
        lim = self.caps.max_dispatch
        if lim is None or groups <= lim:
            b.emit(Let("gid", Special("global_id", 0)))
            return Sym("gid", INT32), (groups * wg,), (wg,)
        rows = -(-groups // lim)
        b.emit(Let("gid", op("add", Special("global_id", 0), op("mul", Special("global_id", 1),
                                                                  Special("global_size", 0)))))
        return Sym("gid", INT32), (lim * wg, rows), (wg, 1)


def _launch(b, args, scalars, global_size, local_size, eqns, kind, fixed_local=False):
    kernel = b.build(local_size if fixed_local else None)
    vals = []
    for p in kernel.params:
        vals.append(args[p.name] if isinstance(p, BufferParam) else scalars[p.name])
    return Launch(kernel, vals, global_size, local_size, eqns, kind)


def _kernel_name(kind, eqns):
    names = []
    for e in eqns:
        n = e.primitive.name
        if n not in names and e.primitive not in (P.copy_p, P.stop_gradient):
            names.append(n)
    tail = "_".join(names[:4]) if names else "copy"
    return f"{kind}_{tail}"


class _Tracker:
    """Records the equations a kernel fuses (printed with the kernel, in program order)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._eqns: dict = {}

    def add(self, e):
        self._eqns.setdefault(id(e), e)

    @property
    def eqns(self):
        return sorted(self._eqns.values(), key=lambda e: self.ctx.order.get(id(e), 0))


def _index_vars(b, gid, shape, prefix="i"):
    """Let-bind ``i0, i1, ...`` (row-major coordinates of ``gid`` in ``shape``); returns the ``Ix`` tuple."""
    strides = _contiguous(shape)
    for d, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if n == 1:
            continue
        e = gid if s == 1 else op("div", gid, const(s, INT32))
        if d > 0:
            e = op("rem", e, const(n, INT32))
        b.emit(Let(f"{prefix}{d}", e))
    return shaped_index(shape, prefix)


# ------------------------------------------------------------------------------------------ groups


class _Group(abc.ABC):
    kind = "?"
    accepts_roots = False

    def __init__(self, ctx, shape):
        self.ctx = ctx
        self.shape = tuple(shape)
        self.products: list = []   # materialised variables this group computes
        self.roots: list = []      # elementwise variables computed at the group's own element
        self.guests: list = []     # smaller elementwise variables computed beside them (map kernels)
        self.reads: set = set()    # materialised variables read
        self.index = -1

    def add_root(self, v, reads):
        self.roots.append(v)
        self.products.append(v)
        self.reads |= {r for r in reads if r not in self.products}

    def regrow(self, shape):
        """Iterate over the larger ``shape``: the current roots become guests."""
        self.guests.extend(self.roots)
        self.roots = []
        self.shape = tuple(shape)

    def add_guest(self, v, reads):
        """``v`` (smaller than the group's shape) is computed by the first ``v.size`` work items."""
        self.guests.append(v)
        self.products.append(v)
        self.reads |= set(reads)

    def root_reads(self, v):
        """The buffer reads of root ``v``'s inlined expression: ``{var: keys}``."""
        b = KernelBuilder("analysis")
        reads: dict = {}
        em = self.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key), computes={v})
        em.val(v, shaped_index(v.aval.shape))
        return reads

    def emit_roots(self, b, em, args, idx, store_index):
        for r in self.roots:
            ridx = idx
            if not isinstance(idx, Flat) and r.aval.shape != self.shape:  # same size, other shape
                ridx = unravel(linearize(idx, self.shape), r.aval.shape)
                # A reshape on the way back maps ridx to an index expression of the group's shape that
                # the index algebra need not simplify to idx: seed the group's products (the matmul's
                # accumulator, a reduction's result) at that expression too, or the reshape would read
                # them from a buffer that is never written when they are not needed outside.
                back = unravel(linearize(ridx, r.aval.shape), self.shape)
                for p in self.products:
                    if p.aval.shape == self.shape:
                        known = em.known(p, idx)
                        if known is not None:
                            em.seed(p, back, known)
            v = em.val(r, ridx)
            em.seed(r, ridx, v)
            if r in self.ctx.needed:
                b.store(self.ctx.output(b, args, r), store_index, v)

    def analyse(self):  # noqa: B027 (map kernels compute only roots, which add their reads when they join)
        """Set ``self.reads`` for the group's own computation (roots add theirs when they join)."""

    @abc.abstractmethod
    def codegen(self) -> list:
        """The group's launches, in order."""


class _MapGroup(_Group):
    kind = "map"
    accepts_roots = True

    def codegen(self):
        try:
            return self._gen(flat=True)
        except NotFlat:
            return self._gen(flat=False)

    def _gen(self, flat):
        ctx = self.ctx
        n = math.prod(self.shape)
        b = KernelBuilder("k")
        args: dict = {}
        tracker = _Tracker(ctx)
        em = ctx.emitter(b, args=args, computes=set(self.roots) | set(self.guests), tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        scalars = {}
        if flat:
            limit = b.scalar("n")
            scalars["n"] = n
            with b.when(op("lt", gid, limit)):
                self.emit_roots(b, em, args, Flat(gid), gid)
        else:
            with b.when(op("lt", gid, const(n, INT32))):
                idx = _index_vars(b, gid, self.shape)
                self.emit_roots(b, em, args, idx, gid)
        by_shape: dict = {}
        for v in self.guests:
            by_shape.setdefault(v.aval.shape, []).append(v)
        for k, (shape, vs) in enumerate(by_shape.items()):
            size = math.prod(shape)
            with b.when(op("lt", gid, const(size, INT32))):
                idx = Flat(gid) if flat else _index_vars(b, gid, shape, f"g{k}_")
                for v in vs:
                    val = em.val(v, idx)
                    if v in ctx.needed:
                        b.store(ctx.output(b, args, v), gid, val)
        b.name = _kernel_name("map", tracker.eqns)
        return [_launch(b, args, scalars, gsize, lsize, tracker.eqns, "map")]


# ---------------------------------------------------------------------------- reductions


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

    def combine(self, b, acc, new):
        """New accumulator values from ``acc`` and ``new`` (lists); for arg-reductions the second entry
        is the position, and ties and NaNs go to the smaller position."""
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
            take = b.let(op("lor", empty, op("lor", better, op("land", tie, op("lt", ni, ai)))))
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


class _ReduceGroup(_Group):
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
        self.add_reduction(eqn)

    def add_reduction(self, eqn):
        self.parts.append((eqn, eqn.inputs[0], _Monoid(eqn.primitive, eqn.inputs[0].aval.dtype)))
        self.products.append(eqn.outputs[0])

    def matches(self, eqn) -> bool:
        """Whether ``eqn`` reduces over this group's iteration space."""
        return (eqn.primitive in REDUCTIONS and eqn.inputs[0].aval.shape == self.x_shape
                and tuple(sorted(eqn.params["axes"])) == self.axes)

    def operand_reads(self, x):
        b = KernelBuilder("analysis")
        reads: dict = {}
        em = self.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
        em.val(x, shaped_index(x.aval.shape))
        return set(reads)

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
        O, R, inner = self._sizes()
        if O == 0:
            return []
        parallel = R > 64 and O < 1024 and self.ctx.caps.local_memory
        if inner is not None:
            try:
                return self._gen(O, R, inner, parallel, flat=True)
            except NotFlat:
                pass
        return self._gen(O, R, inner, parallel, flat=False)

    def _gen(self, O, R, inner, parallel, flat):
        ctx = self.ctx
        b = KernelBuilder("k")
        args: dict = {}
        tracker = _Tracker(ctx)
        for e, _, _ in self.parts:
            tracker.add(e)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        scalars = {}
        if parallel:
            wg = 1 << min(int(math.log2(ctx.wg * 2)), (R - 1).bit_length())
            wg = min(wg, ctx.caps.max_workgroup_size or wg)
            o, lid = Special("group_id", 0), Special("local_id", 0)
            gsize, lsize = (O * wg,), (wg,)
        else:
            o, gsize, lsize = ctx.gid(b, O, ctx.wg)
        shape = self.x_shape
        red_shape = tuple(shape[a] for a in self.axes)
        state = {}

        def x_at(x, r):
            if flat:
                return em.val(x, Flat(b.let(op("add", state["base"], op("mul", r, state["I"])))))
            kidx = iter(unravel(ix_var(r.name, R), red_shape) if red_shape else ())
            oidx = iter(state["out"])
            return em.val(x, tuple(next(kidx) if d in self.axes else next(oidx) for d in range(len(shape))))

        def setup():
            # The output element's coordinates (shaped) or its first input element (flat).
            if flat:
                Rs, Is = b.scalar("R"), b.scalar("I")
                scalars.update(R=R, I=inner)
                state["I"], state["R"] = Is, Rs
                state["base"] = b.let(op("add", op("mul", op("mul", op("div", o, Is), Rs), Is), op("rem", o, Is)),
                                      "base")
                state["out"] = Flat(o)
            else:
                state["R"] = const(R, INT32)
                state["out"] = _index_vars(b, o, self.shape)

        def accumulate(start, step):
            accs = [[b.var(d, v) for d, v in zip(m.dtypes(), m.init(), strict=True)] for _, _, m in self.parts]
            with b.loop(start, state["R"], step) as r:
                for (_, x, m), acc in zip(self.parts, accs, strict=True):
                    xv = x_at(x, r)
                    for a, v in zip(acc, m.combine(b, acc, [xv, r] if m.arg else [xv]), strict=True):
                        b.assign(a, v)
            return accs

        def finish(results):
            for (e, _, m), vals in zip(self.parts, results, strict=True):
                outv = e.outputs[0]
                res = b.let(convert(b, vals[1], outv.aval.dtype)) if m.arg else b.let(vals[0])
                em.seed(outv, state["out"], res)
                if outv in ctx.needed:
                    b.store(ctx.output(b, args, outv), o, res)
            self.emit_roots(b, em, args, state["out"], o)

        if parallel:
            setup()
            accs = accumulate(lid, const(wg, INT32))
            arrays = []
            for (_, _, m), acc in zip(self.parts, accs, strict=True):
                arrs = [b.array("local", d, wg, "red") for d in m.dtypes()]
                for arr, a in zip(arrs, acc, strict=True):
                    b.store(arr, lid, a, space="local")
                arrays.append(arrs)
            b.barrier()
            s = wg // 2
            while s >= 1:
                with b.when(op("lt", lid, const(s, INT32))):
                    other = b.let(op("add", lid, const(s, INT32)))
                    for (_, _, m), arrs in zip(self.parts, arrays, strict=True):
                        ds = m.dtypes()
                        mine = [b.load(arr, lid, d, "local") for arr, d in zip(arrs, ds, strict=True)]
                        theirs = [b.load(arr, other, d, "local") for arr, d in zip(arrs, ds, strict=True)]
                        new = [b.let(v) for v in m.combine(b, mine, theirs)]
                        for arr, v in zip(arrs, new, strict=True):
                            b.store(arr, lid, v, space="local")
                b.barrier()
                s //= 2
            with b.when(op("eq", lid, const(0, INT32))):
                finish([[b.load(arr, const(0, INT32), d, "local") for arr, d in zip(arrs, m.dtypes(), strict=True)]
                        for (_, _, m), arrs in zip(self.parts, arrays, strict=True)])
        else:
            scalars["O"] = O
            with b.when(op("lt", o, b.scalar("O"))):
                setup()
                finish(accumulate(const(0, INT32), None))
        b.name = _kernel_name("reduce", tracker.eqns)
        return [_launch(b, args, scalars, gsize, lsize, tracker.eqns, "reduce", fixed_local=parallel)]


# ---------------------------------------------------------------------------- matrix multiply


class _DotGroup(_Group):
    kind = "dot"
    accepts_roots = True

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.products.append(out)
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        lhs, rhs = eqn.inputs
        self.lc, self.rc, self.lb, self.rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
        self.lf = tuple(i for i in range(lhs.aval.ndim) if i not in lc and i not in lb)
        self.rf = tuple(i for i in range(rhs.aval.ndim) if i not in rc and i not in rb)
        ls, rs = lhs.aval.shape, rhs.aval.shape
        self.B = math.prod(ls[i] for i in lb)
        self.M = math.prod(ls[i] for i in self.lf)
        self.K = math.prod(ls[i] for i in lc)
        self.N = math.prod(rs[i] for i in self.rf)

    def plan(self, operand, groups):
        """``(base var, offset, strides per group)`` reading ``operand`` in place, or ``None``."""
        view = _view(self.ctx, operand)
        if view is None:
            return None
        base, offset, strides = view
        shape = operand.aval.shape
        out = []
        for dims in groups:
            s = _collapse(dims, shape, strides)
            if s is None:
                return None
            out.append(s)
        return base, offset, tuple(out)

    def operand_plans(self):
        lhs, rhs = self.eqn.inputs
        lp = self.plan(lhs, (self.lb, self.lf, self.lc))
        rp = self.plan(rhs, (self.rb, self.rc, self.rf))
        return lp, rp

    def analyse(self):
        lp, rp = self.operand_plans()
        for plan, v in zip((lp, rp), self.eqn.inputs, strict=True):
            if plan is not None:
                self.reads.add(plan[0])
            else:
                b = KernelBuilder("analysis")
                reads: dict = {}
                em = self.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
                em.val(v, shaped_index(v.aval.shape))
                self.reads |= set(reads)

    def _copy_launch(self, operand, groups, tag):
        """A kernel writing ``operand`` in (batch, rows, cols) order into a scratch buffer."""
        ctx = self.ctx
        shape = operand.aval.shape
        sizes = [math.prod(shape[d] for d in g) for g in groups]
        spec = ctx.spec(("dotcopy", id(self), tag), tuple(sizes), operand.aval.dtype)
        b = KernelBuilder("dot_operand_copy")
        args: dict = {}
        tracker = _Tracker(ctx)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        n = math.prod(sizes)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, const(n, INT32))):
            cidx = _index_vars(b, gid, tuple(sizes), "c")
            idx = [None] * len(shape)
            for g, ci in zip(groups, cidx, strict=True):
                sub = unravel(ci, tuple(shape[d] for d in g)) if g else ()
                for d, s in zip(g, sub, strict=True):
                    idx[d] = s
            v = em.val(operand, tuple(idx))
            name = b.buffer(spec, operand.aval.dtype, True, "out")
            args[name] = spec
            b.store(name, gid, v)
        stride = _contiguous(sizes)
        return _launch(b, args, {}, gsize, lsize, tracker.eqns, "copy"), (spec, 0, stride)

    def codegen(self):
        ctx = self.ctx
        launches = []
        lhs, rhs = self.eqn.inputs
        lp, rp = self.operand_plans()
        if lp is None:
            launch, lp = self._copy_launch(lhs, (self.lb, self.lf, self.lc), "lhs")
            launches.append(launch)
        else:
            lp = (ctx.spec(lp[0]), lp[1], lp[2])
        if rp is None:
            launch, rp = self._copy_launch(rhs, (self.rb, self.rc, self.rf), "rhs")
            launches.append(launch)
        else:
            rp = (ctx.spec(rp[0]), rp[1], rp[2])
        B, M, N, K = self.B, self.M, self.N, self.K
        if B * M * N == 0:
            return launches
        dt = lhs.aval.dtype
        tiled = (ctx.caps.tiling_pays and ctx.caps.local_memory and dt != np.bool_ and M * N * K >= (1 << 16)
                 and min(M, N) >= 8 and (ctx.caps.max_workgroup_size or 1024) >= self.TX * self.TY
                 and self._tiled_groups_fit())
        launches.append(self._tiled(lp, rp) if tiled else self._simple(lp, rp))
        return launches

    def _tiled_groups_fit(self) -> bool:
        """Whether the tiled kernel's work-groups per dimension (columns, rows, batch) stay within the
        target's dispatch limit; else the simple kernel runs, whose linear launch folds to fit."""
        lim = self.ctx.caps.max_dispatch
        if lim is None:
            return True
        groups = (-(-self.N // (self.TX * self.RX)), -(-self.M // (self.TY * self.RY)), self.B)
        return max(groups) <= lim

    def _params(self, b, lp, rp, args, scalars):
        lspec, loff, (lsb, lsm, lsk) = lp
        rspec, roff, (rsb, rsk, rsn) = rp
        dt = self.eqn.inputs[0].aval.dtype
        a = b.buffer(lspec, dt, False, "lhs")
        args[a] = lspec
        bb = b.buffer(rspec, dt, False, "rhs")
        args[bb] = rspec
        names = dict(M=self.M, N=self.N, K=self.K, a_off=loff, a_sb=lsb, a_sm=lsm, a_sk=lsk,
                     b_off=roff, b_sb=rsb, b_sk=rsk, b_sn=rsn)
        if self.ctx.opts.get("bake_dot", False):
            return a, bb, {k: const(v, INT32) for k, v in names.items()}
        syms = {k: b.scalar(k) for k in names}
        scalars.update(names)
        return a, bb, syms

    def _out_index(self, bexpr, mexpr, nexpr):
        """The output multi-index (``Ix``) of canonical (batch, row, column) kernel values."""
        lhs, rhs = self.eqn.inputs
        ls, rs = lhs.aval.shape, rhs.aval.shape
        parts = []
        for e, size, dims in ((bexpr, self.B, [ls[i] for i in self.lb]), (mexpr, self.M, [ls[i] for i in self.lf]),
                              (nexpr, self.N, [rs[i] for i in self.rf])):
            if not dims:
                continue
            parts.extend(unravel(ix_data(e, 0, size - 1), tuple(dims)))
        return tuple(parts)

    def _finish(self, b, em, args, bexpr, mexpr, nexpr, acc):
        ctx = self.ctx
        out = self.eqn.outputs[0]
        v = b.let(convert(b, acc, out.aval.dtype))
        idx = self._out_index(bexpr, mexpr, nexpr)
        em.seed(out, idx, v)
        flat = b.let(op("add", op("mul", op("add", op("mul", bexpr, const(self.M, INT32)), mexpr),
                                  const(self.N, INT32)), nexpr), "o")
        if out in ctx.needed:
            b.store(ctx.output(b, args, out), flat, v)
        self.emit_roots(b, em, args, idx, flat)

    def _simple(self, lp, rp):
        ctx = self.ctx
        b = KernelBuilder("k")
        args, scalars = {}, {}
        tracker = _Tracker(ctx)
        tracker.add(self.eqn)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        a, bb, s = self._params(b, lp, rp, args, scalars)
        total = self.B * self.M * self.N
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        dt = self.eqn.inputs[0].aval.dtype
        with b.when(op("lt", gid, const(total, INT32))):
            n = b.let(op("rem", gid, s["N"]), "n")
            mn = b.let(op("div", gid, s["N"]))
            m = b.let(op("rem", mn, s["M"]), "m")
            bi = b.let(op("div", mn, s["M"]), "bi")
            abase = b.let(op("add", op("add", s["a_off"], op("mul", bi, s["a_sb"])), op("mul", m, s["a_sm"])))
            bbase = b.let(op("add", op("add", s["b_off"], op("mul", bi, s["b_sb"])), op("mul", n, s["b_sn"])))
            acc = b.var(dt, const(0, dt))
            with b.loop(const(0, INT32), s["K"]) as k:
                x = b.load(a, op("add", abase, op("mul", k, s["a_sk"])), dt)
                y = b.load(bb, op("add", bbase, op("mul", k, s["b_sk"])), dt)
                b.assign(acc, add_of(b, acc, b.let(mul_of(b, x, y))))
            self._finish(b, em, args, bi, m, n, acc)
        b.name = _kernel_name("dot", tracker.eqns)
        return _launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot")

    # Tile shape of the local-memory kernel: (TX, TY) work items, each computing RY x RX outputs.
    TX, TY, RX, RY, BK = 16, 8, 4, 8, 16

    def _tiled(self, lp, rp):
        ctx = self.ctx
        TX, TY, RX, RY, BK = self.TX, self.TY, self.RX, self.RY, self.BK
        BM, BN = TY * RY, TX * RX
        b = KernelBuilder("k")
        args, scalars = {}, {}
        tracker = _Tracker(ctx)
        tracker.add(self.eqn)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        a, bb, s = self._params(b, lp, rp, args, scalars)
        dt = self.eqn.inputs[0].aval.dtype
        c0 = const(0, INT32)
        tx, ty, bz = Special("local_id", 0), Special("local_id", 1), Special("group_id", 2)
        row0 = b.let(op("mul", Special("group_id", 1), const(BM, INT32)), "row0")
        col0 = b.let(op("mul", Special("group_id", 0), const(BN, INT32)), "col0")
        tid = b.let(op("add", op("mul", ty, const(TX, INT32)), tx), "tid")
        abase = b.let(op("add", s["a_off"], op("mul", bz, s["a_sb"])))
        bbase = b.let(op("add", s["b_off"], op("mul", bz, s["b_sb"])))
        As = b.array("local", dt, BK * BM, "As")
        Bs = b.array("local", dt, BK * BN, "Bs")
        acc = b.array("private", dt, RY * RX, "acc")
        av = b.array("private", dt, RY, "a")
        bv = b.array("private", dt, RX, "b")
        with b.loop(c0, const(RY * RX, INT32)) as i:
            b.store(acc, i, const(0, dt), space="private")
        mlast, nlast, klast = (b.let(op("sub", s[k], const(1, INT32))) for k in ("M", "N", "K"))
        with b.loop(c0, s["K"], const(BK, INT32)) as k0:
            with b.loop(tid, const(BM * BK, INT32), const(TX * TY, INT32)) as l:
                r = b.let(op("div", l, const(BK, INT32)))
                c = b.let(op("rem", l, const(BK, INT32)))
                gi = b.let(op("add", row0, r))
                gk = b.let(op("add", k0, c))
                ok = b.let(op("land", op("lt", gi, s["M"]), op("lt", gk, s["K"])))
                gi_c = b.let(select(op("lt", gi, s["M"]), gi, mlast))
                gk_c = b.let(select(op("lt", gk, s["K"]), gk, klast))
                x = b.load(a, op("add", abase, op("add", op("mul", gi_c, s["a_sm"]), op("mul", gk_c, s["a_sk"]))), dt)
                b.store(As, op("add", op("mul", c, const(BM, INT32)), r), select(ok, x, const(0, dt)), space="local")
            with b.loop(tid, const(BK * BN, INT32), const(TX * TY, INT32)) as l:
                r = b.let(op("div", l, const(BN, INT32)))
                c = b.let(op("rem", l, const(BN, INT32)))
                gk = b.let(op("add", k0, r))
                gj = b.let(op("add", col0, c))
                ok = b.let(op("land", op("lt", gk, s["K"]), op("lt", gj, s["N"])))
                gk_c = b.let(select(op("lt", gk, s["K"]), gk, klast))
                gj_c = b.let(select(op("lt", gj, s["N"]), gj, nlast))
                y = b.load(bb, op("add", bbase, op("add", op("mul", gk_c, s["b_sk"]), op("mul", gj_c, s["b_sn"]))), dt)
                b.store(Bs, op("add", op("mul", r, const(BN, INT32)), c), select(ok, y, const(0, dt)), space="local")
            b.barrier()
            with b.loop(c0, const(BK, INT32)) as k:
                with b.loop(c0, const(RY, INT32)) as yy:
                    b.store(av, yy, b.load(As, op("add", op("mul", k, const(BM, INT32)),
                                                   op("add", op("mul", ty, const(RY, INT32)), yy)), dt, "local"),
                            space="private")
                with b.loop(c0, const(RX, INT32)) as xx:
                    b.store(bv, xx, b.load(Bs, op("add", op("mul", k, const(BN, INT32)),
                                                   op("add", tx, op("mul", xx, const(TX, INT32)))), dt, "local"),
                            space="private")
                with b.loop(c0, const(RY, INT32)) as yy:
                    with b.loop(c0, const(RX, INT32)) as xx:
                        slot = b.let(op("add", op("mul", yy, const(RX, INT32)), xx))
                        prod = b.let(mul_of(b, b.load(av, yy, dt, "private"), b.load(bv, xx, dt, "private")))
                        cur = b.load(acc, slot, dt, "private")
                        b.store(acc, slot, add_of(b, cur, prod), space="private")
            b.barrier()
        with b.loop(c0, const(RY, INT32)) as yy:
            with b.loop(c0, const(RX, INT32)) as xx:
                gi = b.let(op("add", row0, op("add", op("mul", ty, const(RY, INT32)), yy)), "gi")
                gj = b.let(op("add", col0, op("add", tx, op("mul", xx, const(TX, INT32)))), "gj")
                with b.when(op("land", op("lt", gi, s["M"]), op("lt", gj, s["N"]))):
                    v = b.load(acc, op("add", op("mul", yy, const(RX, INT32)), xx), dt, "private")
                    self._finish(b, em, args, bz, gi, gj, v)
        b.name = _kernel_name("dot_tiled", tracker.eqns)
        gsize = (-(-self.N // BN) * TX, -(-self.M // BM) * TY, self.B)
        return _launch(b, args, scalars, gsize, (TX, TY, 1), tracker.eqns, "dot", fixed_local=True)


def _view(ctx, v):
    """``(base var, offset, strides)`` reading ``v`` from a buffer through transposes, reshapes and
    broadcasts, where the base is (or will be) materialised; ``None`` for a literal."""
    if isinstance(v, Literal):
        return None
    if ctx.in_buffer(v) or v not in ctx.producer:
        return v, 0, _contiguous(v.aval.shape)
    e = ctx.producer[v]
    if e.primitive not in _VIEW_OPS:
        return v, 0, _contiguous(v.aval.shape)
    inner = _view(ctx, e.inputs[0])
    if inner is None:
        return v, 0, _contiguous(v.aval.shape)
    base, off, st = inner
    x = e.inputs[0].aval
    if e.primitive == P.transpose:
        return base, off, tuple(st[p] for p in e.params["permutation"])
    if e.primitive == P.reshape:
        ns = _reshape_strides(x.shape, st, v.aval.shape)
        return (base, off, ns) if ns is not None else (v, 0, _contiguous(v.aval.shape))
    bd = e.params["broadcast_dimensions"]
    out = [0] * v.aval.ndim
    for i, d in enumerate(bd):
        out[d] = st[i] if x.shape[i] == v.aval.shape[d] else 0
    return base, off, tuple(out)


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


def _lin(ix):
    return to_expr(ix)


def _reads(ctx, atom) -> set:
    """The buffers that computing ``atom`` inline reads."""
    if not isinstance(atom, Var):
        return set()
    b = KernelBuilder("analysis")
    reads: dict = {}
    em = ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
    em.val(atom, shaped_index(atom.aval.shape))
    return set(reads)


def _analyse_val(group, *atoms):
    b = KernelBuilder("analysis")
    reads: dict = {}
    em = group.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
    for a in atoms:
        if isinstance(a, Var):
            em.val(a, shaped_index(a.aval.shape))
    group.reads |= set(reads)


# ---------------------------------------------------------------------------- sort


class _SortGroup(_Group):
    """Bitonic sort of each line along ``dimension``, by the first ``num_keys`` operands, NaN last and
    stable (the original position breaks ties); lines are padded to a power of two."""

    kind = "sort"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.extend(eqn.outputs)

    def analyse(self):
        _analyse_val(self, *self.eqn.inputs)

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        dim, nk = e.params["dimension"], e.params["num_keys"]
        shape = self.shape
        if len(shape) == 0 or math.prod(shape) == 0:
            return self._copy_all()
        L = shape[dim]
        lines = math.prod(shape) // L
        Pn = 1 << (L - 1).bit_length()
        other = tuple(n for d, n in enumerate(shape) if d != dim)
        keys = e.inputs[:nk]
        idx_spec = ctx.spec(("sortidx", id(self)), (lines * Pn,), INT32)
        key_specs = [ctx.spec(("sortkey", id(self), k), (lines * Pn,), kv.aval.dtype) for k, kv in enumerate(keys)]
        launches = []

        def full_index(oidx, t):
            it = iter(oidx)
            return tuple(t if d == dim else next(it) for d in range(len(shape)))

        def line_index(b, row):
            return _index_vars(b, row, other, "o") if other else ()

        # 1. Copy the keys and positions into padded scratch lines (in as many kernels as the
        #    buffer limit needs; the first also writes the positions).
        for chunk_no, chunk in enumerate(self._chunks(list(zip(keys, key_specs, strict=True)),
                                                      lambda kv: kv[0], 2)):
            b = KernelBuilder("sort_init")
            args: dict = {}
            tracker = _Tracker(ctx)
            tracker.add(e)
            em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
            total = lines * Pn
            gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
            with b.when(op("lt", gid, const(total, INT32))):
                row = b.let(op("div", gid, const(Pn, INT32)), "row")
                p = b.let(op("rem", gid, const(Pn, INT32)), "p")
                if chunk_no == 0:
                    iname = b.buffer(idx_spec, INT32, True, "idx")
                    args[iname] = idx_spec
                    b.store(iname, gid, p)
                inside = b.let(op("lt", p, const(L, INT32)))
                pc = b.let(select(inside, p, const(L - 1, INT32)))
                idx = full_index(line_index(b, row), ix_data(pc, 0, L - 1) if L > 1 else ix_const(0))
                for kv, spec in chunk:
                    v = em.val(kv, idx)
                    kname = b.buffer(spec, kv.aval.dtype, True, "key")
                    args[kname] = spec
                    b.store(kname, gid, select(inside, v, const(0, kv.aval.dtype)))
            b.name = "sort_init"
            launches.append(_launch(b, args, {}, gsize, lsize, tracker.eqns, "sort"))

        # 2. The bitonic network: one kernel, launched once per (k, j) stage.
        if Pn > 1:
            step = self._step_kernel(idx_spec, key_specs, keys, L, Pn, lines)
            k = 2
            while k <= Pn:
                j = k // 2
                while j >= 1:
                    stage = {"jj": j, "kk": k}
                    args = [stage[a] if isinstance(a, str) else a for a in step.args]
                    launches.append(Launch(step.kernel, args, step.global_size, step.local_size, (e,), "sort"))
                    j //= 2
                k *= 2

        # 3. Gather every operand in sorted order (in chunks that fit the buffer limit).
        wanted = [(x, o) for x, o in zip(e.inputs, e.outputs, strict=True) if o in ctx.needed]
        for chunk in self._chunks(wanted, lambda xo: xo[0], 2):
            b = KernelBuilder("sort_gather")
            args = {}
            em = ctx.emitter(b, args=args)
            total = lines * L
            gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
            with b.when(op("lt", gid, const(total, INT32))):
                row = b.let(op("div", gid, const(L, INT32)), "row")
                t = b.let(op("rem", gid, const(L, INT32)), "t")
                iname = b.buffer(idx_spec, INT32, False, "idx")
                args[iname] = idx_spec
                src = b.load(iname, op("add", op("mul", row, const(Pn, INT32)), t), INT32)
                oidx = line_index(b, row)
                idx = full_index(oidx, ix_data(src, 0, L - 1) if L > 1 else ix_const(0))
                dest_idx = full_index(oidx, ix_data(t, 0, L - 1) if L > 1 else ix_const(0))
                dest = b.let(_lin(linearize(dest_idx, shape)), "dest")
                for x, o in chunk:
                    b.store(ctx.output(b, args, o), dest, em.val(x, idx))
            b.name = "sort_gather"
            launches.append(_launch(b, args, {}, gsize, lsize, (e,), "sort"))
        return launches

    def _chunks(self, items, atom_of, per_item):
        """``items`` in runs whose kernels fit the buffer limit: one index buffer, ``per_item - 1``
        buffers written per item, and the buffers each item's operand reads."""
        limit = self.ctx.caps.max_buffers_per_kernel
        if limit is None:
            return [items] if items else []
        out, run, reads = [], [], set()
        for it in items:
            r = _reads(self.ctx, atom_of(it))
            if run and len(reads | r) + (len(run) + 1) * (per_item - 1) + 1 > limit:
                out.append(run)
                run, reads = [], set()
            run.append(it)
            reads |= r
        if run:
            out.append(run)
        return out

    def _less(self, b, ka, kb, ia, ib, L):
        """Whether element a sorts before b: real before padding, then keys (NaN last), then position."""
        r = op("lt", ia, ib)
        for x, y in reversed(list(zip(ka, kb, strict=True))):
            if x.dtype.kind == "f":
                xn, yn = b.let(op("isnan", x)), b.let(op("isnan", y))
                lt = op("lor", op("land", op("lnot", xn), yn), op("lt", x, y))
                eq = op("lor", op("eq", x, y), op("land", xn, yn))
            else:
                lt, eq = op("lt", x, y), op("eq", x, y)
            r = b.let(op("lor", b.let(lt), op("land", b.let(eq), r)))
        apad = b.let(op("ge", ia, const(L, INT32)))
        bpad = b.let(op("ge", ib, const(L, INT32)))
        both_real = op("land", op("lnot", apad), op("lnot", bpad))
        return b.let(op("lor", op("land", op("lnot", apad), bpad),
                        op("lor", op("land", both_real, r), op("land", op("land", apad, bpad), op("lt", ia, ib)))))

    def _step_kernel(self, idx_spec, key_specs, keys, L, Pn, lines):
        ctx = self.ctx
        b = KernelBuilder("sort_step")
        args: dict = {}
        half = Pn // 2
        total = lines * half
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        jj, kk = b.scalar("jj"), b.scalar("kk")
        with b.when(op("lt", gid, const(total, INT32))):
            row = b.let(op("div", gid, const(half, INT32)), "row")
            q = b.let(op("rem", gid, const(half, INT32)), "q")
            i = b.let(op("add", op("mul", op("mul", op("div", q, jj), const(2, INT32)), jj), op("rem", q, jj)), "i")
            l = b.let(op("add", i, jj), "l")
            base = b.let(op("mul", row, const(Pn, INT32)), "base")
            gi = b.let(op("add", base, i))
            gl = b.let(op("add", base, l))
            iname = b.buffer(idx_spec, INT32, True, "idx")
            args[iname] = idx_spec
            names = []
            for spec, kv in zip(key_specs, keys, strict=True):
                n = b.buffer(spec, kv.aval.dtype, True, "key")
                args[n] = spec
                names.append(n)
            ia, il = b.load(iname, gi, INT32), b.load(iname, gl, INT32)
            ka = [b.load(n, gi, kv.aval.dtype) for n, kv in zip(names, keys, strict=True)]
            kl = [b.load(n, gl, kv.aval.dtype) for n, kv in zip(names, keys, strict=True)]
            up = b.let(op("eq", op("and", i, kk), const(0, INT32)))
            l_first = self._less(b, kl, ka, il, ia, L)
            i_first = self._less(b, ka, kl, ia, il, L)
            swap = b.let(op("lor", op("land", up, l_first), op("land", op("lnot", up), i_first)))
            with b.when(swap):
                b.store(iname, gi, il)
                b.store(iname, gl, ia)
                for n, x, y in zip(names, ka, kl, strict=True):
                    b.store(n, gi, y)
                    b.store(n, gl, x)
        kernel = b.build()
        vals = []
        for p in kernel.params:
            vals.append(args[p.name] if isinstance(p, BufferParam) else p.name)
        return Launch(kernel, vals, gsize, lsize, (self.eqn,), "sort")

    def _copy_all(self):
        """Rank-0 or empty operands: the outputs are the inputs."""
        ctx = self.ctx
        launches = []
        for x, o in zip(self.eqn.inputs, self.eqn.outputs, strict=True):
            n = o.aval.size
            if n == 0 or o not in ctx.needed:
                continue
            b = KernelBuilder("sort_copy")
            args: dict = {}
            em = ctx.emitter(b, args=args)
            gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
            with b.when(op("lt", gid, const(n, INT32))):
                b.store(ctx.output(b, args, o), gid, em.val(x, Flat(gid) if n > 1 else ()))
            launches.append(_launch(b, args, {}, gsize, lsize, (self.eqn,), "sort"))
        return launches


# ---------------------------------------------------------------------------- scatter


class _ScatterGroup(_Group):
    """Each work item owns one output element and walks the updates in order: deterministic, no atomics."""

    kind = "scatter"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.append(eqn.outputs[0])

    def analyse(self):
        _analyse_val(self, *self.eqn.inputs)

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
        b = KernelBuilder("k")
        args: dict = {}
        tracker = _Tracker(ctx)
        tracker.add(e)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        dt = out.aval.dtype
        with b.when(op("lt", gid, const(n, INT32))):
            idx = _index_vars(b, gid, self.shape)
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
        b.name = _kernel_name("scatter", tracker.eqns)
        return [_launch(b, args, {}, gsize, lsize, tracker.eqns, "scatter")]

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


_GROUPS = {P.dot_general: _DotGroup, P.sort: _SortGroup}
for _p in REDUCTIONS:
    _GROUPS[_p] = _ReduceGroup
for _p in CUMULATIVE:
    _GROUPS[_p] = _CumGroup
for _p in SCATTERS:
    _GROUPS[_p] = _ScatterGroup


# ------------------------------------------------------------------------------------------ the passes


def _materialize(ctx):
    prog = ctx.prog
    M = ctx.materialized
    for a in prog.outvars:
        if isinstance(a, Var) and a not in ctx.input_set:
            M.add(a)
    consumers: dict = {}
    for e in prog.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                consumers.setdefault(a, []).append(e)
        if e.primitive not in INJECTIVE:
            M.update(e.outputs)
    for e in prog.eqns:
        if e.primitive == P.dot_general:
            for a in e.inputs:
                view = _view(ctx, a)
                if view is not None and view[0] not in ctx.input_set:
                    M.add(view[0])
    limit = ctx.caps.max_buffers_per_kernel
    cost: dict = {}
    leaves: dict = {}

    def cost_of(a):
        if not isinstance(a, Var) or ctx.in_buffer(a):
            return 0
        return cost[a]

    def leaves_of(a):
        if not isinstance(a, Var):
            return frozenset()
        if ctx.in_buffer(a):
            return frozenset([a])
        return leaves[a]

    def fit(atoms, reserved):
        """Materialise operands of ``atoms`` (those reading the most buffers first) until the buffers
        they read, plus ``reserved`` others (outputs, scratch), fit in one kernel."""
        lv = frozenset().union(*(leaves_of(a) for a in atoms)) if atoms else frozenset()
        if len(lv) + reserved <= limit:
            return lv
        inner = sorted({a for a in atoms if isinstance(a, Var) and not ctx.in_buffer(a)},
                       key=lambda a: len(leaves_of(a)), reverse=True)
        for a in inner:
            M.add(a)
            lv = frozenset().union(*(leaves_of(b) for b in atoms))
            if len(lv) + reserved <= limit:
                break
        return lv

    for e in prog.eqns:
        if e.primitive not in INJECTIVE:
            # A kernel of its own inlines the producers of all its operands at once: their buffers
            # together, plus its outputs (and a sort's index and scratch), must fit the limit.
            if limit is not None and e.primitive == P.sort:
                for a in e.inputs:   # the sort kernels read each operand beside the index and scratch
                    fit((a,), 3)
            elif limit is not None:
                fit(e.inputs, len(e.outputs) + (0 if e.primitive in SCATTERS else 1))
            continue
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
            # The costliest operands get buffers first (one pass: linear in the number of operands).
            uses: dict = {}
            for a in e.inputs:
                if isinstance(a, Var) and not ctx.in_buffer(a):
                    uses[a] = uses.get(a, 0) + 1
            for a in sorted(uses, key=cost_of, reverse=True):
                if total <= _COST_LIMIT:
                    break
                total -= cost_of(a) * uses[a]
                M.add(a)
        # Leaves are tracked only against a limit (unbounded sets would make long chains quadratic).
        lv = fit(e.inputs, 2) if limit is not None else frozenset()
        if limit is not None:
            total = own + sum(cost_of(a) for a in e.inputs)
        if e.primitive == P.broadcast_in_dim:
            x = e.inputs[0]
            if isinstance(x, Var) and v.aval.size >= 4 * max(x.aval.size, 1) and cost_of(x) >= _EXPENSIVE_COST:
                M.add(x)
                total, lv = own, frozenset([x])
        cost[v] = total
        leaves[v] = lv


def _place(ctx, groups, e):
    """Put equation ``e``'s materialised outputs into groups."""
    if all(o.aval.size == 0 for o in e.outputs):
        return   # a zero-size fill (``zero_size.is_fill``): nothing to launch
    cls = _GROUPS.get(e.primitive)
    if cls is _ReduceGroup:
        target = _sibling_reduction(ctx, groups, e)
        if target is not None:
            target.add_reduction(e)
            target.reads |= target.operand_reads(e.inputs[0])
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
    producer_group = ctx.group_of
    for v in e.outputs:
        if v not in ctx.materialized:
            continue
        probe = _MapGroup(ctx, v.aval.shape)
        reads = probe.root_reads(v)
        own = linearize(shaped_index(v.aval.shape), v.aval.shape)
        target = guest_of = None
        # Only the latest groups are candidates: a program of thousands of kernels (a concatenate of
        # thousands of arrays) would otherwise cost quadratic time here.
        for g in reversed(groups[-_JOIN_WINDOW:]):
            if g.accepts_roots and math.prod(g.shape) == v.aval.size and _can_join(ctx, g, reads, own, v):
                target = g
                break
            if guest_of is None and _can_host(ctx, g, reads, v):
                guest_of = g
            if any(producer_group.get(r) is g for r in reads):
                break
        if target is None and guest_of is not None:
            if math.prod(guest_of.shape) < v.aval.size:
                guest_of.regrow(v.aval.shape)
                guest_of.add_root(v, set(reads))
            else:
                guest_of.add_guest(v, set(reads))
            producer_group[v] = guest_of
            continue
        if target is None:
            target = _MapGroup(ctx, v.aval.shape)
            target.index = len(groups)
            groups.append(target)
        target.add_root(v, set(reads))
        producer_group[v] = target


def _can_host(ctx, g, reads, v):
    """Whether map kernel ``g`` can also compute ``v``, an elementwise value of another shape that reads
    nothing ``g`` computes (a loop counter beside the loop's arrays): one launch instead of two. The
    larger of the two shapes becomes the kernel's."""
    if not isinstance(g, _MapGroup) or math.prod(g.shape) in (v.aval.size, 0) or v.aval.size == 0:
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
    """An earlier reduction kernel over the same iteration space that ``e`` can share, or ``None``."""
    probe = _ReduceGroup(ctx, e)
    reads = probe.operand_reads(e.inputs[0])
    limit = ctx.caps.max_buffers_per_kernel
    for g in reversed(groups[-_JOIN_WINDOW:]):
        if any(ctx.group_of.get(r) is g for r in reads):
            return None
        if isinstance(g, _ReduceGroup) and g.matches(e):
            if limit is not None and len(g.reads | reads) + len(g.products) + 1 > limit:
                return None
            return g
    return None


def _can_join(ctx, g, reads, own, v):
    limit = ctx.caps.max_buffers_per_kernel
    if limit is not None and len(g.reads | set(reads)) + len(g.products) + 1 > limit:
        return False
    for r, keys in reads.items():
        pg = ctx.group_of.get(r)
        if pg is None or pg.index < g.index:
            continue
        if pg is not g:
            return False
        if r.aval.size != v.aval.size or any(k != own and not (k == "zero" and v.aval.size == 1) for k in keys):
            return False
    return True


def schedule(program: Program, caps, **opts) -> Schedule:
    """Group ``program`` (straight-line: no ``cond``/``while``/``scan``) into kernels for ``caps``."""
    prog = inline_calls(split_long_scans(program, getattr(caps, "max_loop_iterations", None)))
    prog, _ = dce(prog)
    # No kernel ever sees a zero-size array: empty results need no launch (the runtimes allocate an
    # empty buffer for an output no kernel writes) and results of empty operands are constants.
    prog, _ = dce(drop_zero_size(prog))
    prog = _split_wide(prog, caps.max_buffers_per_kernel)
    prog = _fold_dot_transposes(prog)
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
    launches = []
    for g in groups:
        launches.extend(g.codegen())
    inputs = [ctx.spec(v) for v in ctx.inputs]
    outputs = [a if isinstance(a, Literal) else ctx.spec(a) for a in prog.outvars]
    return Schedule(inputs, launches, outputs, prog)


# The fft kernels (Stockham and Bluestein) are their own module; it builds on the groups above.
from fnarray.lowering.kernels.fft import FftGroup as _FftGroup  # noqa: E402

_GROUPS[fft_p] = _FftGroup
