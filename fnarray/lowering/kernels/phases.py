"""Consecutive small launches of a schedule as the phases of one launch: of one work item (CPU OpenCL), of one
work-group (CPU webgpu).

On PoCL every launch costs its calling thread an enqueue (a lock the driver's worker threads also take) and wakes
the worker threads, which then wait on each other's locks: measured on a growing-cache decode step (a
concatenation, then an attention kernel of one work item), 42% of the process's CPU time was PoCL's two worker
threads and 3% the kernels' own code (docs/performance.md, "opencl:0 decode: small launches as one, one source for
every length"). Where the kernels are that small, fewer launches is the lever, not faster kernels.

``merge_small`` rewrites a finished schedule: a run of consecutive launches that each tell work items apart only by
``global_id(0)`` (and ``group_id(0)``/``local_id(0)`` where the work-group size is fixed; no local memory, barrier
or atomic) and whose estimated work together stays under a bound becomes one launch of one work item that runs each
original kernel's body in order, for every work item of its own launch (a loop over its global size, its
``global_id`` the loop counter): the same statements on the same values, so results are the same bits. One work item runs them in program order, so a phase reads what an earlier
phase wrote without a barrier. Each buffer is one parameter however many phases bind it (an intermediate one
phase writes and a later one reads is one pointer, so ``restrict`` holds); scalar parameters are renamed per
phase.

The work estimate counts statements executed (a loop's body times its trip count): the merged launch runs on one
of the device's threads, so a run is merged only while its work is small next to a launch's cost. Used by the
OpenCL backend on CPU devices when it compiles a schedule (``merged_schedule``, after ``literals_as_args``; a
lowered program's ``kernels()`` lists the scheduled kernels, as they were before both); GPU devices keep one
launch per kernel.

WebGPU on a CPU adapter (lavapipe, ~30 us of CPU a dispatch) takes the same runs in another form (``group``): one
launch of one *work-group* of ``group`` items, each phase a loop over its work items strided by the group (the
first from ``local_id``), and a ``storageBarrier`` (with a ``workgroupBarrier``) before a phase that reads or
writes what an earlier phase since the last barrier wrote, or writes what it read. WGSL orders the storage
accesses of invocations only at a barrier, and only within one work-group, so the run is one work-group (the
barriers are at the top of the body: uniform control flow); llvmpipe runs its items eight to a vector, not one
work item's scalar code. A uniform binding (``BufferParam.uniform``: a product's small operand, a window) is one
binding per buffer, length and offset, within ``max_uniform`` with the scalars' struct; a buffer some phase
writes has one binding. Not as work-group ranges of one dispatch (each launch its own work-groups, a branch on
the work-group's id): Mesa 22.3's llvmpipe runs an ``if`` under an execution mask, so every work-group ran every
launch's code (docs/performance.md, "webgpu:0: small launches as phases, map windows a launch", twenty-second
session).
"""

from __future__ import annotations

import dataclasses

from fnarray.lowering.kernels.groups.base import Launch, Schedule
from fnarray.lowering.kernels.ir import (
    INT32,
    ArrayDecl,
    Atomic,
    Barrier,
    BufferParam,
    Const,
    For,
    If,
    Let,
    Load,
    Op,
    ScalarParam,
    Select,
    Special,
    Store,
    Sym,
    const,
    map_exprs,
    walk_exprs,
    walk_stmts,
)

__all__ = ["merged_schedule", "merge_small", "work_estimate", "MERGE_BELOW"]

#: The default bound (statements executed, ``work_estimate``) of one merged launch: a few tens of microseconds of
#: one thread, about one PoCL launch's cost.
MERGE_BELOW = 1 << 16

_NAME_MAX = 48   # characters of the merged kernel's name taken from its phases' names


def work_estimate(launch) -> int | None:
    """Statements ``launch`` executes over all its work items (a loop's body counted once per trip, its trips from
    the loop's bounds and the launch's integer arguments: ``_upper``; an ``If``'s longer branch; a kernel's guard of
    the work items past its last counts only those below it), or ``None`` where a loop's trips have no bound."""
    body = launch.kernel.body
    lets = {s.name: s.value for s in walk_stmts(body) if isinstance(s, Let)}
    for p, a in zip(launch.kernel.params, launch.args, strict=True):   # scalar arguments (a product's sizes)
        if isinstance(p, ScalarParam) and p.dtype.kind in "iu":
            lets[p.name] = const(a, p.dtype)
    items = 1
    for n in launch.global_size:
        items *= n
    total = 0
    for s in body:   # the guard ``if (gid < n)`` of the items past a kernel's last: only ``n`` run its body
        busy = _guarded(s, lets)
        cost = _statements(s.then if busy is not None else (s,), lets)
        if cost is None:
            return None
        total += min(items, busy if busy is not None else items) * cost
    return total


def _guarded(s, lets) -> int | None:
    """``n`` where ``s`` is ``if (global_id(0) < n)`` (the id directly or through a local) with a bound on ``n``."""
    if not (isinstance(s, If) and not s.orelse and isinstance(s.cond, Op) and s.cond.op == "lt"):
        return None
    x = s.cond.args[0]
    while isinstance(x, Sym) and x.name in lets:
        x = lets[x.name]
    if x != Special("global_id", 0):
        return None
    return _upper(s.cond.args[1], lets)


def _statements(stmts, lets) -> int | None:
    total = 0
    for s in stmts:
        if isinstance(s, For):
            stop, start = _upper(s.stop, lets), s.start.value if isinstance(s.start, Const) else 0
            body = _statements(s.body, lets)
            if stop is None or body is None or not isinstance(s.step, Const) or s.step.value <= 0:
                return None
            total += 1 + max(0, -(-(int(stop) - int(start)) // int(s.step.value))) * (body + 1)
        elif isinstance(s, If):
            then, orelse = _statements(s.then, lets), _statements(s.orelse, lets)
            if then is None or orelse is None:
                return None
            total += 1 + max(then, orelse)
        else:
            total += 1
    return total


def _upper(e, lets) -> int | None:
    """An upper bound of the int expression ``e`` (``lets``: the kernel's immutable locals by name), or ``None``:
    constants, sums, products and quotients by a constant (of the non-negative counts and sizes that bound loops),
    and minimums (``min``, or ``select(x < y, x, y)`` as the groups write a loop's last, shorter
    block: ``groups/attention.py``'s ``cnt``) of a bounded operand."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Sym):
        value = lets.get(e.name)
        return None if value is None else _upper(value, lets)
    if isinstance(e, Op) and e.op in ("add", "mul", "div"):   # of counts and sizes, not negative
        a, b = (_upper(x, lets) for x in e.args)
        if e.op == "div":
            return a if a is not None and isinstance(e.args[1], Const) and b > 0 else None
        return None if a is None or b is None else (a + b if e.op == "add" else a * b)
    pair = None
    if isinstance(e, Op) and e.op == "min":
        pair = e.args
    elif isinstance(e, Select) and isinstance(e.cond, Op) and e.cond.op in ("lt", "le") and (e.a, e.b) == e.cond.args:
        pair = (e.a, e.b)
    if pair is not None:
        known = [u for u in (_upper(x, lets) for x in pair) if u is not None]
        return min(known) if known else None
    if isinstance(e, Select):
        a, b = _upper(e.a, lets), _upper(e.b, lets)
        return None if a is None or b is None else max(a, b)
    return None


_ITEM_KINDS = ("global_id", "global_size", "group_id", "local_id")
_GROUP_KINDS = ("group_id", "local_id")


def _phase_ready(launch) -> bool:
    """Whether ``launch`` may be a phase: one-dimensional, its work items told apart only by ``global_id(0)``, and
    by ``group_id(0)``/``local_id(0)`` where its work-group size is fixed (a map's once-per-group bounds test), no
    work-group memory, barrier or atomic, and not a layout copy (which the OpenCL runtime may skip on its own:
    ``dispatch._mark_kept``)."""
    if launch.kind == "copy" or len(launch.global_size) != 1:
        return False
    body = launch.kernel.body
    for s in walk_stmts(body):
        if isinstance(s, (Barrier, Atomic)) or (isinstance(s, ArrayDecl) and s.space == "local"):
            return False
    fixed = launch.local_size is not None and len(launch.local_size) == 1
    for e in walk_exprs(body):
        if isinstance(e, Special) and (e.dim != 0 or e.kind not in _ITEM_KINDS or e.kind in _GROUP_KINDS and not fixed):
            return False
        if isinstance(e, Load) and e.space == "local":
            return False
    return True


def merged_schedule(sched: Schedule, max_buffers: int, below: int = MERGE_BELOW, group: int = 1,
                    max_uniform: int = 0) -> Schedule:
    """``sched`` with its launches merged by ``merge_small``; the same schedule where none is."""
    return sched.with_launches(merge_small(sched.launches, max_buffers, below, group, max_uniform))


def merge_small(launches, max_buffers: int, below: int = MERGE_BELOW, group: int = 1, max_uniform: int = 0) -> list:
    """``launches`` with each run of consecutive mergeable launches (``_phase_ready``, one ``math`` form, at most
    ``max_buffers`` parameters, at most ``max_uniform`` uniform bindings with the scalars' struct, together under
    ``below`` statements of ``work_estimate``) as one launch of one work item (``group`` 1: OpenCL) or of one
    work-group of ``group`` items (WebGPU) (the module docstring); the others as they are. A launch's own checks
    (``_phase_work``, walks of its IR) are made only once a neighbour passes the cheap ones with it (``_joined``:
    stack's 100-input concatenations never do)."""
    out: list = []
    run: list = []
    work, bindings = None, {}   # the run's work (None while its one launch is unchecked) and bindings

    def flush():
        out.append(_merged(run, bindings, group) if len(run) > 1 else run[0])
        run.clear()

    for la in launches:
        more = _joined(run, bindings, la, max_buffers, max_uniform) if run else None
        if more is not None and work is None:   # the run's one launch, checked now that ``la`` could join it
            first = _phase_work(run[0], below)
            if first is None:
                flush()
                more = None
            else:
                work = first[0]
        own = _phase_work(la, below) if more is not None else None
        if own is not None and work + own[0] <= below:
            run.append(la)
            work, bindings = work + own[0], more
            continue
        if run:
            flush()
        alone = _buffers([la]) if more is None or own is not None else None
        if alone is None:   # it cannot be a phase
            out.append(la)
            continue
        run.append(la)
        work, bindings = (None if own is None else own[0]), alone
    if run:
        flush()
    return out


def _joined(run, bindings, launch, max_buffers, max_uniform) -> dict | None:
    """The bindings of ``run`` (``bindings``) and ``launch`` together (``_buffers``) where ``launch`` may join
    ``run`` by the checks that walk no IR: one ``math`` form, at most ``max_buffers`` parameters, at most
    ``max_uniform`` uniform bindings with the scalars' struct; else ``None``."""
    if launch.kernel.math != run[0].kernel.math:
        return None
    more = _buffers([launch], dict(bindings))
    if more is None or len(more) + sum(_scalars(x) for x in run) + _scalars(launch) > max_buffers:
        return None
    uniforms = _uniforms(more)
    return None if uniforms and uniforms + 1 > max_uniform else more


def _phase_work(launch, below):
    """``(work_estimate, _buffers)`` of ``launch`` where it may be a phase (``_phase_ready``) of a run under
    ``below``, else ``None`` (the walk of ``_phase_ready`` last: a large kernel's estimate rules it out first)."""
    own = _buffers([launch])
    work = work_estimate(launch) if own is not None else None
    return None if work is None or work > below or not _phase_ready(launch) else (work, own)


def _scalars(launch) -> int:
    return sum(not isinstance(p, BufferParam) for p in launch.kernel.params)


def _uniforms(bindings) -> int:
    return sum(len(key) > 2 for key in bindings)


def _binding(p, a) -> tuple:
    """The binding of buffer parameter ``p`` given ``a``: ``(BufSpec, dtype)``, and for a uniform one (WGSL) its
    length and offset too."""
    return (a, p.dtype, p.uniform, p.offset) if p.uniform else (a, p.dtype)


def _buffers(launches, found=None) -> dict | None:
    """The distinct bindings the launches make (after ``found``'s, which it extends), in order of first binding:
    ``_binding`` -> writes (a buffer bound both as elements and as ``vector_dtype`` vectors is two); ``None`` where
    a buffer some launch writes has two bindings (two ``restrict`` pointers to one written buffer; in WGSL, a
    writable binding and another of one buffer in one dispatch)."""
    found = {} if found is None else found
    for la in launches:
        for p, a in zip(la.kernel.params, la.args, strict=True):
            if isinstance(p, BufferParam):
                key = _binding(p, a)
                found[key] = found.get(key, False) or p.writes
    specs: dict = {}
    for (spec, *_), writes in found.items():
        n, w = specs.get(spec, (0, False))
        specs[spec] = (n + 1, w or writes)
    if any(n > 1 and w for n, w in specs.values()):
        return None
    return found


def _merged(run, buffers, group=1) -> Launch:
    """The launches of ``run`` as one launch of one work item, or of one work-group of ``group`` items (the module
    docstring); ``buffers``: their ``_buffers``."""
    index = {key: i for i, key in enumerate(buffers)}
    dtypes: dict = {}
    params, args, body, eqns = [], [], [], []
    fence = _Fence() if group > 1 else None
    for k, la in enumerate(run):
        rename = {}
        for p, a in zip(la.kernel.params, la.args, strict=True):
            if isinstance(p, BufferParam):
                rename[p.name] = f"b{index[_binding(p, a)]}"
                dtypes.setdefault(rename[p.name], p)
            else:
                rename[p.name] = f"s{k}_{p.name}"
                params.append(ScalarParam(rename[p.name], p.dtype))
                args.append(a)
        if fence is not None and fence.needed(la) and body:
            body.append(Barrier("global"))
        body.append(_phase(la, rename, k, group))
        eqns.extend(la.eqns)
    # buffer parameters first, in order of first binding, each writable where any phase writes it
    bufs = [dataclasses.replace(dtypes[f"b{i}"], name=f"b{i}", writes=w) for i, w in enumerate(buffers.values())]
    first = run[0].kernel
    name = "phases_" + "_".join(la.kernel.name for la in run)[:_NAME_MAX].rstrip("_")
    kernel = dataclasses.replace(first, name=name, params=tuple(bufs) + tuple(params), body=tuple(body),
                                 local_size=(group,))
    return Launch(kernel, tuple(spec for spec, *_ in buffers) + tuple(args), (group,), (group,), eqns, "phases")


class _Fence:
    """Where a one-work-group run needs a barrier: before a phase that reads or writes a buffer an earlier phase
    since the last barrier wrote, or writes one such a phase read (another item may touch that element)."""

    def __init__(self):
        self.read, self.written = set(), set()

    def needed(self, launch) -> bool:
        """Whether a barrier must come before ``launch`` (which then counts as the first phase after it)."""
        read = {a for p, a in zip(launch.kernel.params, launch.args, strict=True)
                if isinstance(p, BufferParam) and not p.writes}
        written = {a for p, a in zip(launch.kernel.params, launch.args, strict=True)
                   if isinstance(p, BufferParam) and p.writes}
        clash = bool(written & (self.read | self.written) or read & self.written)
        if clash:
            self.read, self.written = set(), set()
        self.read |= read
        self.written |= written
        return clash


def _phase(launch, rename, k, items=1) -> For:
    """``launch``'s body as a loop over its work items, ``global_id(0)`` the loop counter (its group and its place
    in it: the counter's quotient and remainder by the work-group size), its parameters renamed by ``rename``; the
    loop of one work item (``items`` 1) or shared by the ``items`` work items of one work-group, strided by it."""
    kernel = launch.kernel
    taken = {e.name for e in walk_exprs(kernel.body) if isinstance(e, Sym)}
    taken |= {getattr(s, "name", None) for s in walk_stmts(kernel.body)} | {getattr(s, "var", None)
                                                                          for s in walk_stmts(kernel.body)}
    var = f"item{k}"
    while var in taken:
        var += "_"
    item = Sym(var, INT32)
    size = const(launch.global_size[0], INT32)

    group = const(launch.local_size[0] if launch.local_size else 1, INT32)
    specials = {"global_id": item, "global_size": size, "group_id": Op("div", (item, group), INT32),
                "local_id": Op("rem", (item, group), INT32)}

    def expr(e):
        if isinstance(e, Special):
            return specials[e.kind]
        if isinstance(e, Sym) and e.name in rename:
            return Sym(rename[e.name], e.dtype)
        if isinstance(e, Load) and e.space == "global":
            return Load(e.space, rename[e.name], e.index, e.dtype)
        return e

    body = map_exprs(kernel, expr).body
    start = const(0, INT32) if items == 1 else Special("local_id", 0)
    return For(var, start, size, const(items, INT32), tuple(_renamed_stores(body, rename)))


def _renamed_stores(stmts, rename):
    """``stmts`` with their stores (and atomics: none in a phase) to global buffers renamed by ``rename``."""
    for s in stmts:
        if isinstance(s, Store) and s.space == "global":
            yield dataclasses.replace(s, name=rename[s.name])
        elif isinstance(s, For):
            yield dataclasses.replace(s, body=tuple(_renamed_stores(s.body, rename)))
        elif isinstance(s, If):
            yield dataclasses.replace(s, then=tuple(_renamed_stores(s.then, rename)),
                                      orelse=tuple(_renamed_stores(s.orelse, rename)))
        else:
            yield s
