"""What every kernel group shares: the primitive sets, the schedule's data types, views and launches.

``Group`` is the interface of a kernel group (its roots, the values it reads, the kernels it writes);
``MapGroup`` is the elementwise kernel that every other group's epilogue builds on.
"""

from __future__ import annotations

import abc
import dataclasses
import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Var
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import Flat, NotFlat, shaped_index
from fnarray.lowering.kernels.index import linearize, to_expr, unravel
from fnarray.lowering.kernels.ir import INT32, UINT32, BufferParam, Cast, Lane, Let, Op, Special, Sym, const, vector_dtype
from fnarray.lowering.kernels.rules import (
    LOW_BIT,
    op,
    select,
)
from fnarray.lowering.kernels.tuning import Tunable

CALLS = CALL_PROGRAM  # the call-like primitives and the param of the program each runs (core/subprograms.py)
REDUCTIONS = frozenset({P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min, P.reduce_and, P.reduce_or,
                        P.argmax, P.argmin})
CUMULATIVE = frozenset({P.cumsum, P.cumprod, P.cummax, P.cummin, P.cumlogsumexp})
SCATTERS = frozenset({P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max})
VIEW_OPS = frozenset({P.transpose, P.reshape, P.broadcast_in_dim})


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

    def with_launches(self, launches) -> Schedule:
        """This schedule with ``launches`` (an iterable) in place of its own: itself where they are its own
        launches, the same objects in the same order (a compile-time pass that changed none: ``kernels/phases.py``,
        ``literal_args``, ``int_args``)."""
        launches = list(launches)
        if len(launches) == len(self.launches) and all(a is b for a, b in zip(launches, self.launches, strict=True)):
            return self
        return Schedule(self.inputs, launches, self.outputs, self.program)


# ------------------------------------------------------------------------------------------ dot views


def contiguous_strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(out[::-1])


def reshape_strides(old_shape, old_strides, new_shape):
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


def collapse_stride(dims, shape, strides):
    """One stride for iterating ``dims`` (row-major, in that order) as one index, or ``None``."""
    live = [d for d in dims if shape[d] != 1]
    if not live:
        return 0
    for a, c in zip(live[:-1], live[1:], strict=True):
        if strides[a] != strides[c] * shape[c]:
            return None
    return strides[live[-1]]


def make_launch(b, args, scalars, global_size, local_size, eqns, kind, fixed_local=False):
    kernel = b.build(local_size if fixed_local else None)
    vals = []
    for p in kernel.params:
        vals.append(args[p.name] if isinstance(p, BufferParam) else scalars[p.name])
    return Launch(kernel, vals, global_size, local_size, eqns, kind)


def vec4_binding(b, args, spec, dtype, writes=False) -> str:
    """The ``vec4`` binding of ``spec``'s buffer (elements of ``dtype`` read four to a load; ``writes``: stored four
    to a store too), recorded in ``args``: one binding per buffer and access, shared by every caller in a kernel
    (the builder's key ``("vec4", spec)``). ``vectors_fit`` checks the launch afterwards."""
    name = b.buffer(("vec4", spec), vector_dtype(dtype), writes, "wide")
    args[name] = spec
    return name


def uniform_binding(b, args, spec, dtype, window=None) -> str:
    """The ``vec4`` binding of ``spec``'s buffer as a read-only uniform buffer (``BufferParam.uniform``: WGSL's
    ``var<uniform>`` array of the buffer's whole vectors), recorded in ``args``; the caller checks that the buffer
    fits the target's uniform binding (the scheduler option ``dot_uniform``). Mesa 22.3's lavapipe loads a uniform
    array at per-lane addresses as one gather, a storage array lane by lane in a loop with a branch and a bounds
    test per lane (docs/performance.md, fifteenth session). ``window = (offset, size)`` (bytes, multiples of 16):
    only that range of the buffer, as its own binding (``BufferParam.offset``; ``groups/dot.py``'s windows).
    ``vectors_fit`` checks the launch afterwards."""
    if window is None:
        name = b.buffer(("uniform", spec), vector_dtype(dtype), False, "uni", uniform=math.prod(spec.shape) // 4)
    else:
        offset, size = window
        name = b.buffer(("uniform", spec, offset), vector_dtype(dtype), False, "uni", uniform=size // 16,
                        offset=offset)
    args[name] = spec
    return name


def vectors_fit(caps, launch) -> bool:
    """Whether ``launch``'s vector bindings (``ir.vector_dtype`` buffer parameters) keep within the target's
    storage buffers per kernel (``caps.max_buffers_per_kernel``; uniform arrays, ``BufferParam.uniform``, not
    counted: the product group keeps those within the uniform buffers of a stage itself) and bind no buffer
    twice where either binding is written (WebGPU refuses a buffer bound read-only and writable at once; buffers
    compared by identity): a buffer the kernel writes may be bound as vectors only, as the reduce group's row
    values are. Used by the groups that read ``vec4`` operands on CPU adapters (``groups/dot.py``,
    ``groups/reduce.py``)."""
    bufs = [(p, a) for p, a in zip(launch.kernel.params, launch.args, strict=True) if isinstance(p, BufferParam)]
    limit = caps.max_buffers_per_kernel
    if limit is not None and sum(not p.uniform for p, _ in bufs) > limit:   # uniform arrays have their own limit
        return False
    for i, (p, a) in enumerate(bufs):   # a vector binding beside another binding of its buffer, either written
        if np.dtype(p.dtype).subdtype is not None and any(
                id(a2) == id(a) and (p.writes or p2.writes) for j, (p2, a2) in enumerate(bufs) if j != i):
            return False
    return True


def kernel_name(kind, eqns):
    names = []
    for e in eqns:
        n = e.primitive.name
        if n not in names and e.primitive not in (P.copy_p, P.stop_gradient):
            names.append(n)
    tail = "_".join(names[:4]) if names else "copy"
    return f"{kind}_{tail}"


class Tracker:
    """Records the equations a kernel fuses (printed with the kernel, in program order)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._eqns: dict = {}

    def add(self, e):
        self._eqns.setdefault(id(e), e)

    @property
    def eqns(self):
        return sorted(self._eqns.values(), key=lambda e: self.ctx.order.get(id(e), 0))


def index_vars(b, gid, shape, prefix="i"):
    """Let-bind ``i0, i1, ...`` (row-major coordinates of ``gid`` in ``shape``); returns the ``Ix`` tuple."""
    strides = contiguous_strides(shape)
    for d, (n, s) in enumerate(zip(shape, strides, strict=True)):
        if n == 1:
            continue
        e = gid if s == 1 else op("div", gid, const(s, INT32))
        if d > 0:
            e = op("rem", e, const(n, INT32))
        b.emit(Let(f"{prefix}{d}", e))
    return shaped_index(shape, prefix)


# ------------------------------------------------------------------------------------------ groups


class Group(abc.ABC):
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

    def _kernel_start(self, name="k"):
        """A kernel of this group's equation ``self.eqn``: ``(builder, args, tracker, emitter)``, the tracker
        holding the equation and the emitter computing the group's roots."""
        b = KernelBuilder(name)
        args: dict = {}
        tracker = Tracker(self.ctx)
        tracker.add(self.eqn)
        return b, args, tracker, self.ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)

    def input_buffers(self, b, args) -> list:
        """A read-only buffer parameter of kernel ``b`` per operand of ``self.eqn``, in order (recorded in
        ``args``); returns their names."""
        names = []
        for a in self.eqn.inputs:
            spec = self.ctx.spec(a)
            name = b.buffer(spec, a.aval.dtype, False, "in")
            args[name] = spec
            names.append(name)
        return names

    def takes_root(self, reads, own) -> bool:   # noqa: ARG002 (a hook: DotGroup declines some epilogues)
        """Whether a root with buffer reads ``reads`` (``root_reads``) computed at element ``own`` of this group
        may join it, once the scheduler found that it can (``schedule._can_join``): yes, but where a group's
        form makes some roots cost more inside it than in a map kernel of their own."""
        return True

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

    def emit_roots(self, b, em, args, idx, store_index, store_guards=None):
        """Compute the roots at ``idx`` and store the needed ones at ``store_index``; with ``store_guards``
        ``(first, then)``, the values are computed where this is called and stored under ``first``, else
        under ``then``."""
        stores = self.root_values(b, em, idx, lambda r: self.ctx.output(b, args, r))
        if store_guards is None:
            for name, v in stores:
                b.store(name, store_index, v)
            return
        first, then = store_guards
        with b.when(first):
            for name, v in stores:
                b.store(name, store_index, v)
        with b.otherwise(), b.when(then):
            for name, v in stores:
                b.store(name, store_index, v)

    def root_values(self, b, em, idx, binding) -> list:
        """``[(binding(root), value)]``: the roots computed at ``idx`` (seeded in ``em``), for each root the kernel
        stores (``ctx.needed``) its value beside the buffer ``binding`` names for it (called in root order, as each
        root is computed: the kernel's bindings are numbered in that order)."""
        stores = []
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
                stores.append((binding(r), v))
        return stores

    def analyse(self):  # noqa: B027 (map kernels compute only roots, which add their reads when they join)
        """Set ``self.reads`` for the group's own computation (roots add theirs when they join)."""

    @abc.abstractmethod
    def codegen(self) -> list:
        """The group's launches, in order."""


#: The map kernel's tunable choices (``kernels/tuning.py``): ``per``, elements per work item (each under its
#: own bounds test; the default is ``Capabilities.items_per_work_item``), ``wg``, work items per group
#: (default: the scheduler's ``workgroup`` option), and ``guard``, the bounds test once per work-group with
#: the values computed at a clamped element (``True``, the default where ``Capabilities.uniform_guard``: PoCL
#: 3.0 vectorises only that form) or a plain ``if (gid < n)`` per item.
def _map_cost(choice, default, facts) -> float:
    """The map kernel's cost model: the hand-tuned default, except that PoCL compiling with LLVM 15 or later
    (Debian's PoCL 3.1) turns the clamped-element loads of the once-per-work-group test into gathers and
    vectorises a per-item ``if (gid < n)`` instead (4M ``log``: 52 vs 3.7 ms; docs/traps.md), so there the
    per-item test costs less. Each choice away from the default costs a little (nothing else is modelled)."""
    away = sum(choice[k] != default[k] for k in choice) * 0.01
    if facts.get("compiler") == "pocl" and facts.get("llvm", 0) >= 15:
        return away + (1.0 if choice["guard"] else 0.0)
    return away


MAP_TUNABLE = Tunable("map", {"per": (1, 2, 4), "wg": (64, 128, 256), "guard": (True, False)},
                      doc="elements per work item, work-group size and bounds-test form of an elementwise kernel",
                      valid=lambda c, f: (c["wg"] <= (f.get("workgroup_limit") or 1024)
                                          and (c["per"] == 1 or not c["guard"])),
                      cost=_map_cost)


class EquationGroup(Group):
    """A group of one equation with a kernel of its own (attention, the quantized product, ``pallas_call``): it
    reads its array inputs from their buffers and produces every output."""

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape if eqn.outputs else ())
        self.eqn = eqn
        self.products.extend(eqn.outputs)

    def analyse(self):
        self.reads |= {a for a in self.eqn.inputs if isinstance(a, Var)}


#: Elements of a one-byte dtype in a 32-bit word: what a work item computes where the kernel stores words
#: (``MapGroup.packed_roots``).
WORD = 4
#: The most windows of ``MapGroup.chunk_launches`` one launch takes (past the uniform buffers' own bound).
MAP_WINDOWS_MOST = 8


class MapGroup(Group):
    kind = "map"
    accepts_roots = True

    def codegen(self):
        ctx = self.ctx
        default = {"per": ctx.caps.items_per_work_item, "wg": ctx.wg, "guard": bool(ctx.caps.uniform_guard)}
        return ctx.tuned(MAP_TUNABLE, default, self._variant)

    def _variant(self, choice):
        try:
            return self._gen(True, choice)
        except NotFlat:
            return self._gen(False, choice)

    def _gen(self, flat, choice):
        ctx = self.ctx
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        em = ctx.emitter(b, args=args, computes=set(self.roots) | set(self.guests), tracker=tracker)
        per = self.items_per(flat, choice)
        gid, gsize, lsize = ctx.gid(b, -(-math.prod(self.shape) // per), choice["wg"])
        scalars: dict = {}
        seg = Segment(gid, Special("group_id", 0), lsize[0], len(gsize) == 1)
        if self.vector_items(flat, per) and self.uniform_chunks():
            return self.chunk_launches(choice)
        self.emit_body(b, em, args, scalars, seg, flat, per, choice)
        b.name = kernel_name("map", tracker.eqns)
        launch = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "map")
        if self.vector_items(flat, per) and not vectors_fit(ctx.caps, launch):
            self.scalar_items = True   # too many bindings with the vec4 ones (or one written and read): scalar
            return self._gen(flat, choice)
        return [launch]

    def items_per(self, flat, choice) -> int:
        """Elements per work item of this kernel for ``choice`` (``MAP_TUNABLE``'s ``per`` where it applies: flat
        indices, no guests and an element count that stays within int32 after the padding); ``WORD`` where the
        kernel stores words of bytes (``packed_roots``), flat or not."""
        n, per = math.prod(self.shape), choice["per"]
        if self.packed_roots() and n + WORD * choice["wg"] < 2 ** 31:
            return WORD
        if not (flat and per > 1 and self.roots and not self.guests and n + per * choice["wg"] < 2 ** 31):
            return 1
        return per

    def packed_roots(self) -> list:
        """The roots this kernel writes a 32-bit word at a time (``Capabilities.word_stores``: the stored roots of
        a one-byte dtype, ``LOW_BIT``), each work item computing the ``WORD`` elements of one word; none in a
        kernel with guests (its items compute one element each: those roots keep the target's byte store)."""
        ctx = self.ctx
        if not getattr(ctx.caps, "word_stores", False) or self.guests:
            return []
        return [r for r in self.roots if r in ctx.needed and np.dtype(r.aval.dtype) in LOW_BIT]

    def emit_body(self, b, em, args, scalars, seg, flat, per, choice):
        """The statements of the group's work items, at the work-item id ``seg.gid`` (``Segment``): the roots
        (``per`` elements per item, a flat or a shaped index, the bounds test as ``choice["guard"]`` asks) and
        then the guests on the first items. Element counts become scalar arguments named ``seg.name`` (added
        to ``scalars``), so one compiled kernel serves many shapes."""
        ctx, gid = self.ctx, seg.gid
        n = math.prod(self.shape)
        if self.vector_items(flat, per):
            scalars[seg.name] = n
            self._emit_vector4(b, em, args, gid, b.scalar(seg.name))
        elif per > 1:
            # Elements per * gid + k (k < per) of every root, each lane under its own bound test.
            limit = b.scalar(seg.name) if flat else const(n, INT32)
            if flat:
                scalars[seg.name] = n
            words = {r: b.var(UINT32, const(0, UINT32), "word") for r in self.packed_roots()} if per == WORD else {}
            for k in range(per):
                e = b.let(op("add", op("mul", gid, const(per, INT32)), const(k, INT32)), "e")
                with b.when(op("lt", e, limit)):
                    idx = Flat(e) if flat else index_vars(b, e, self.shape, f"{seg.prefix}l{k}_i")
                    self._emit_lane(b, em, args, idx, e, words, k)
            if words:   # word gid holds elements WORD * gid + k: one plain store each, no other item touches it
                with b.when(op("lt", op("mul", gid, const(WORD, INT32)), limit)):
                    for r, w in words.items():
                        b.store(ctx.output(b, args, r), gid, w)
        elif flat:
            limit = b.scalar(seg.name)
            scalars[seg.name] = n
            if choice.get("guard", ctx.caps.uniform_guard) and self.roots and seg.uniform:
                # Every item computes, at its own element or (past the end, in the last work-group) at the
                # last one, with no branch; the stores go in a branch uniform over the group for the
                # work-groups wholly inside, item by item in the last one. The CPU compilers vectorise that
                # across items: with the body in both branches (one copy per branch) PoCL did so only for
                # small bodies (a 4M erf map 3-4x slower, expm1 3x).
                full = b.let(op("lt", seg.group, op("div", limit, const(seg.wg, INT32))), "full")
                inside = b.let(op("lt", gid, limit), "inside")
                e = b.let(select(op("lor", full, inside), gid, op("sub", limit, const(1, INT32))), "e")
                self.emit_roots(b, em, args, Flat(e), e, store_guards=(full, inside))
            else:
                with b.when(op("lt", gid, limit)):
                    self.emit_roots(b, em, args, Flat(gid), gid)
        else:
            with b.when(op("lt", gid, const(n, INT32))):
                idx = index_vars(b, gid, self.shape, seg.prefix + "i")
                self.emit_roots(b, em, args, idx, gid)
        by_shape: dict = {}
        for v in self.guests:
            by_shape.setdefault(v.aval.shape, []).append(v)
        for k, (shape, vs) in enumerate(by_shape.items()):
            size = math.prod(shape)
            with b.when(op("lt", gid, const(size, INT32))):
                idx = Flat(gid) if flat else index_vars(b, gid, shape, f"{seg.prefix}g{k}_")
                for v in vs:
                    val = em.val(v, idx)
                    if v in ctx.needed:
                        b.store(ctx.output(b, args, v), gid, val)

    def vector_items(self, flat, per) -> bool:
        """Whether the work items take their four elements as ``vec4`` loads and stores (``_emit_vector4``): the
        scheduler option ``map_vec4`` (webgpu on a CPU adapter, where each lane's scalar load or store of a storage
        buffer is a loop over the lanes), four flat elements per item, no guests, no packed roots, an element
        count that is a multiple of 4 (no item holds a partial vector) and unset ``scalar_items`` (the launch's
        vector bindings did not fit, ``vectors_fit``)."""
        return bool(self.ctx.opts.get("map_vec4") and flat and per == 4 and not self.guests
                    and not getattr(self, "scalar_items", False) and not self.packed_roots()
                    and math.prod(self.shape) % 4 == 0)

    def uniform_chunks(self) -> bool:
        """Whether this map kernel is launched in windows of ``bytes`` of its elements (``chunk_launches``): the
        scheduler option ``map_uniform`` ``(bindings, bytes, least)`` (webgpu on a CPU adapter), float32 results of more
        than ``bytes``, no guests. A horizontal kernel (``groups/horizontal.py``) launches such a member apart,
        before its other members (no data passes between them)."""
        bindings, most, _ = self.ctx.opts.get("map_uniform", (0, 0, 0))
        return bool(bindings and not self.guests and self.ctx.caps.items_per_work_item == 4
                    and any(r.aval.dtype == np.float32 for r in self.roots)
                    and 4 * math.prod(self.shape) > most and math.prod(self.shape) % 4 == 0)

    def chunk_launches(self, choice) -> list:
        """One launch per ``bytes`` (``map_uniform``) of the elements, each reading its window of every float32
        operand of the map's size through a uniform binding (``_emit_vector4``; a window's offset is a multiple of
        64 KiB, within ``minUniformBufferOffsetAlignment``), several full windows a launch where their bindings
        fit the stage's uniform buffers (``_windows_a_launch``: a work item takes its vector of each). Launched
        in order on one queue, as separate kernels: their element ranges are disjoint, so the results are the one
        kernel's."""
        ctx = self.ctx
        items, step = math.prod(self.shape) // 4, ctx.opts["map_uniform"][1] // 16
        built: dict = {}   # (vectors, windows) a launch -> (its launch, its first vector): the others differ in offsets
        launches = []
        c0, full = 0, items // step
        per = self._windows_a_launch(choice, step) if full > 1 else 1
        while c0 < items:
            count = min(step, items - c0)
            windows = min(per, (items - c0) // step) if count == step else 1
            if (count, windows) not in built:
                built[count, windows] = (self._window_launch(choice, c0, count, windows), c0)
            launch, first = built[count, windows]
            launches.append(_moved(launch, first, c0, count * windows))
            c0 += count * windows
        if not all(vectors_fit(ctx.caps, launch) for launch in launches):
            self.scalar_items = True
            return self._gen(True, choice)
        return launches

    def _window_launch(self, choice, c0, count, windows):
        """The launch of ``windows`` consecutive windows of ``count`` vectors from vector ``c0``: each work item
        takes its vector of every window (``_emit_vector4`` once a window, the window's offset a constant)."""
        ctx = self.ctx
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        gid, gsize, lsize = ctx.gid(b, count, choice["wg"])
        base, n = b.scalar("base"), b.scalar("n")
        for w in range(windows):
            at = base if w == 0 else op("add", base, const(w * count, INT32))
            self._emit_vector4(b, em, args, gid, n, (at, c0 + w * count, count))
        b.name = kernel_name("map", tracker.eqns)
        return make_launch(b, args, {"n": 4 * (c0 + windows * count), "base": c0}, gsize, lsize, tracker.eqns, "map")

    def _windows_a_launch(self, choice, step) -> int:
        """How many full windows one launch takes: as many as the stage's uniform buffers hold the bindings of
        (``map_uniform``'s ``bindings``; ``MAP_WINDOWS_MOST`` at most), the one-window kernel's uniform bindings
        each. A lavapipe dispatch costs ~30 us of CPU however little it holds (``kernels/phases.py``); one
        dispatch of several windows' work items each in a branch by work-group ran every branch (Mesa 22.3)."""
        one = self._window_launch(choice, 0, step, 1)
        bound = sum(isinstance(p, BufferParam) and bool(p.uniform) for p in one.kernel.params)
        room = self.ctx.opts["map_uniform"][0]
        return max(1, min(MAP_WINDOWS_MOST, room // bound)) if bound else 1

    def _emit_vector4(self, b, em, args, gid, limit, window=None):
        """Elements ``4 gid .. 4 gid + 3`` of the roots (``vector_items``): each float32 buffer that the roots read
        at their own element is one ``vec4`` load (lane ``k`` seeded as element ``4 gid + k``), each float32 root
        stored is one ``vec4`` store; other reads and stores stay scalar. The values are computed one lane at a
        time by the same expressions as the scalar form: the results are its results, bit for bit."""
        ctx, f32 = self.ctx, np.dtype(np.float32)
        at = Sym("fa_e", INT32)
        reads: dict = {}
        an = ctx.emitter(KernelBuilder("analysis"), computes=set(self.roots),
                         on_read=lambda var, key: reads.setdefault(var, set()).add(key))
        for r in self.roots:
            an.val(r, Flat(at))
        wide = [u for u, keys in reads.items()
                if ("flat", at) in keys and u.aval.dtype == f32 and u.aval.size == math.prod(self.shape)]
        at = gid if window is None else b.let(op("add", gid, window[0]), "g")   # the item's vector, all told
        e0 = b.let(op("mul", at, const(4, INT32)), "e")
        with b.when(op("lt", e0, limit)):
            es = [e0] + [b.let(op("add", e0, const(k, INT32)), "e") for k in (1, 2, 3)]
            room, most, least = ctx.opts.get("map_uniform", (0, 0, 0))
            room -= sum(isinstance(p, BufferParam) and bool(p.uniform) for p in b.params)   # earlier segments'
            for u in wide:
                local = gid
                if room > 0 and window is not None:   # this launch's window of the buffer
                    name = uniform_binding(b, args, ctx.spec(u), f32, (16 * window[1], 16 * window[2]))
                elif room > 0 and least <= 4 * u.aval.size <= most:   # its length in the source: not the smallest
                    name = uniform_binding(b, args, ctx.spec(u), f32)
                else:
                    name, local = vec4_binding(b, args, ctx.spec(u), f32), at
                room -= 1
                v = b.load(name, local, vector_dtype(f32))
                for k in range(4):
                    em.seed_key(u, ("flat", es[k]), b.let(Lane(v, k, f32)))
            values: dict = {}
            for e in es:
                for r, v in self.root_values(b, em, Flat(e), lambda r: r):
                    values.setdefault(r, []).append(v)
            for r, vals in values.items():
                if r.aval.dtype == f32:
                    wide_out = vec4_binding(b, args, ctx.spec(r), f32, writes=True)
                    b.store(wide_out, at, Op("vector4", tuple(vals), vector_dtype(f32)))
                else:
                    name = ctx.output(b, args, r)
                    for e, v in zip(es, vals, strict=True):
                        b.store(name, e, v)

    def _emit_lane(self, b, em, args, idx, e, words, k):
        """The roots at element ``e`` (index ``idx``), lane ``k`` of its work item: the roots of ``words`` (root ->
        the item's word, a mutable uint32) put their byte at bits ``8k`` of the word, the others are stored."""
        for (r, name), v in self.root_values(b, em, idx, lambda r: (r, self.ctx.output(b, args, r))):
            if r in words:
                byte = op("and", Cast(v, UINT32), const(255, UINT32))
                b.assign(words[r], op("or", words[r], op("shl", byte, const(8 * k, UINT32))))
            else:
                b.store(name, e, v)


def _moved(launch, first, c0, count):
    """``launch`` (a window launch of ``MapGroup.chunk_launches``, built at vector ``first``) at vector ``c0``, its
    windows ``count`` vectors in all: its uniform windows' offsets moved along and its scalars ``n``, ``base`` set;
    the kernel's source is the same."""
    if c0 == first:
        return launch
    offsets = {p.name: p.offset + 16 * (c0 - first) for p in launch.kernel.params
               if isinstance(p, BufferParam) and p.uniform and p.offset >= 0}
    return placed(launch, offsets, {"n": 4 * (c0 + count), "base": c0})


def placed(launch, offsets, scalars) -> Launch:
    """``launch`` with its buffer parameters named in ``offsets`` bound at those byte offsets
    (``BufferParam.offset``) and its scalar parameters named in ``scalars`` given those values: one launch of a
    window kernel (a map's, a product's row or batch windows) moved to another window; the kernel's source, and so
    its pipeline, is the same."""
    k = launch.kernel
    params = tuple(dataclasses.replace(p, offset=offsets[p.name]) if p.name in offsets else p for p in k.params)
    args = [scalars.get(p.name, a) if not isinstance(p, BufferParam) else a
            for p, a in zip(k.params, launch.args, strict=True)]
    return Launch(dataclasses.replace(k, params=params), args, launch.global_size, launch.local_size, launch.eqns,
                  launch.kind)


class Segment:
    """Where a map kernel's work items are: ``gid``, the item's id (an int32 kernel expression, 0 at the first item
    of the map's range), ``group``, its work-group's id counted the same way, ``wg`` items per work-group,
    ``uniform`` (whether ``group`` is a true work-group id, so that a test of it is uniform over the group),
    ``name`` (the element count's scalar argument) and ``prefix`` (of the index variables' names). A plain map
    kernel is one segment starting at item 0; a horizontal kernel (``groups/horizontal.py``) has one per map."""

    __slots__ = ("gid", "group", "wg", "uniform", "name", "prefix")

    def __init__(self, gid, group, wg, uniform, name="n", prefix=""):
        self.gid, self.group, self.wg, self.uniform, self.name, self.prefix = gid, group, wg, uniform, name, prefix


def linear_index(ix):
    return to_expr(ix)


def tree_sum(terms):
    """The sum of ``terms`` (kernel expressions, at least one) as a balanced tree of adds: fewer dependent adds
    than a chain, so the lanes of a product or a group's partial sums add in parallel."""
    while len(terms) > 1:
        terms = [op("add", terms[i], terms[i + 1]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def inline_reads(ctx, atom) -> set:
    """The buffers that computing ``atom`` inline reads."""
    if not isinstance(atom, Var):
        return set()
    b = KernelBuilder("analysis")
    reads: dict = {}
    em = ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
    em.val(atom, shaped_index(atom.aval.shape))
    return set(reads)


def analyse_val(group, *atoms):
    b = KernelBuilder("analysis")
    reads: dict = {}
    em = group.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
    for a in atoms:
        if isinstance(a, Var):
            em.val(a, shaped_index(a.aval.shape))
    group.reads |= set(reads)
