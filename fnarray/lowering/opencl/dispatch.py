"""How an opencl schedule runs: kernels and their arguments set once, one enqueue per kernel per call.

An ``Executable`` (one per compiled schedule) makes its ``cl.Kernel`` objects once and keeps, from call
to call, an *arena*: a buffer per intermediate value (never an output, so no array the user holds can
alias it). Every argument that does not change between calls (scalars, arena buffers) is set when the
executable is made; a call sets only the arguments bound to its inputs and to its outputs (fresh buffers
from the device's memory pool, since the caller keeps them), then enqueues each kernel once, without
waiting: a cached call costs ``kernels`` enqueues, at most one ``set_arg`` per input or output binding,
and one pool allocation per output, and makes no program, kernel or buffer (the pool reuses freed
blocks). Intermediates past the device's budget for executable-held memory (``HELD_BYTES`` over all
executables) are allocated per call instead.

A donated input (``jit(donate_argnums=...)``) that a ``dynamic_update_slice`` or a scatter updates in place
(the scheduler's ``donate`` option: ``groups/in_place.py``) is written by its kernel where it lies: the output
takes its buffer over, and the donated ``CLBuffer`` is left holding none (as JAX deletes a donated array, every
array sharing it is then unusable); an array passed both as the donated argument and as another (or a cached
device scalar) is copied first, so that the other keeps its value. A KV cache's decoding step then writes one
position instead of copying the cache.

A layout copy that reads only the call's inputs into arena buffers (``_mark_kept``: the tiled ``quantized_matmul``'s
panels of a model's weights) is left out of a call whose input buffers are the very ones its last run read (kept by
weak reference: a freed buffer, whose block the pool may hand to another array, or one taken over by an in-place
update, runs it again): a 4-bit prefill then copies its weights once instead of every call (PoCL 3.0, width 1024:
11 of its 83 ms of kernel time; docs/performance.md, "opencl:0 4-bit prefill: the panel copy kept").

A one-kernel executable that keeps nothing and updates no input (every eager operation) has a shorter call
(``_direct_call``: its bindings planned once, no slot list) and ``one(*bufs)``, which ``placement.eager_direct``
calls straight from ``bind``; on a CPU device its launch, when small (``HOLD_ITEMS`` work items), is *held*: it
waits for a user event that opens once ``HOLD_LAUNCHES`` are held or as soon as anything else is enqueued or the
host waits (``_DeviceState.hold``), so that PoCL's worker threads wake once a batch of eager launches, not once
each (the eager jacobian sweep: docs/performance.md, "opencl:0 eager launches held"). Any other executable's small
launches are held the same way (an eager ``stack`` of 5,000 arrays: 50 launches of 100 inputs each, 5.7-6.5 ->
2.7-3.0x numpy:0's process CPU with its tape, load 8); a larger launch lets the held ones go first.

An executable of many small inputs (at least ``KEEP_BOUND_INPUTS``, ``KEEP_BOUND_BYTES`` in all: an eager
``stack``'s concatenate of 5,000 arrays, 50 launches of 100 inputs) keeps the input buffers its last call bound
(``_bound``): a call given the very same buffers again (compared by identity, in C) while no buffer of the device
was taken over since (``_DeviceState.taken``) sets only its fresh buffers' arguments, since a ``cl.Kernel`` keeps
its arguments (``stack``'s 5,000 ``set_arg`` calls, ~0.4 ms of its ~3 ms, and the per-input checks of ``_env``).
The kept buffers stay alive until another call binds others (so no freed block is reused under a kept argument):
hence the bound on their bytes.

The in-order queue makes the arena safe without waiting: the next call's kernels write it after this
call's have read it. A ``cl.Kernel`` holds its arguments, so setting the per-call ones and enqueueing
is one step under the device's lock (two threads calling one executable take turns).

Under the profiler a call enqueues the same kernels on a profiling queue (under the lock, after the main
queue has finished, so that no other call shares the arena meanwhile), waits once for the last, and
records a ``kernel`` span per launch from its event's device times; the rest of the call (setting
arguments, enqueueing, waiting) stays in the enclosing span, which the profiler counts as ``dispatch``.
"""

from __future__ import annotations

import math
import time
import weakref

import numpy as np
import pyopencl as cl

from fnarray.core import profile as _profile
from fnarray.core.ir import Literal
from fnarray.lowering.kernels.ir import BufferParam
from fnarray.lowering.kernels.lowered import donated_must_copy, taken_over
from fnarray.lowering.kernels.deferred import settled

__all__ = ["Executable", "HELD_BYTES", "KEEP_BOUND_INPUTS", "KEEP_BOUND_BYTES"]

#: Buffer memory all executables of one device may keep between calls (their arenas).
HELD_BYTES = 128 << 20
#: Inputs an executable needs at least to keep its last call's input bindings (see the module docstring) ...
KEEP_BOUND_INPUTS = 32
#: ... and the most bytes those inputs may hold in all (they stay alive until the next call binds others).
KEEP_BOUND_BYTES = 256 << 10


def _nbytes(spec) -> int:
    return _bytes(spec.shape, spec.dtype)


def _bytes(shape, dtype) -> int:
    return max(math.prod(shape) * np.dtype(dtype).itemsize, 16)   # as _DeviceState.alloc (bool: one byte)


class _Step:
    __slots__ = ("kernel", "gsize", "lsize", "dyn", "name", "source", "kept", "seen", "held", "dyn_fresh")


class Executable:
    """Runs a schedule (see the module docstring): ``executable(bufs) -> outputs`` (``CLBuffer``s)."""

    def __init__(self, state, sched, named):
        self.state = state
        slots: dict = {}

        def slot(spec):
            if spec not in slots:
                slots[spec] = len(slots)
            return slots[spec]

        self.in_slots = [slot(s) for s in sched.inputs]
        inputs = set(sched.inputs)
        outputs = {o for o in sched.outputs if not isinstance(o, Literal)}
        built = state.build([src for _, src in named])
        self._arena = {}            # spec -> CLBuffer kept by this executable
        held = 0
        fresh = {}                  # spec -> None: allocated per call (outputs, intermediates past the budget)
        with state.lock:
            budget = HELD_BYTES - state.held_bytes
            self.steps = []
            for launch, (name, src) in zip(sched.launches, named, strict=True):
                st = _Step()
                knl = cl.Kernel(built[src], name)
                st.dyn = []         # (argument index, slot) set per call
                for i, (p, a) in enumerate(zip(launch.kernel.params, launch.args, strict=True)):
                    if not isinstance(p, BufferParam):
                        knl.set_arg(i, np.asarray(a, dtype=p.dtype))
                        continue
                    s = slot(a)
                    if a in inputs or a in outputs:
                        st.dyn.append((i, s))
                        if a not in inputs:
                            fresh[a] = None
                        continue
                    buf = self._arena.get(a)
                    if buf is None and a not in fresh:
                        nb = _nbytes(a)
                        if held + nb <= budget:
                            buf = self._arena[a] = state.alloc(a.shape, a.dtype)
                            held += nb
                        else:
                            fresh[a] = None
                    if buf is not None:
                        knl.set_arg(i, buf.mem)
                    else:
                        st.dyn.append((i, s))
                st.kernel, st.name, st.source = knl, name, src
                st.gsize, st.lsize = launch.global_size, launch.local_size
                st.held = math.prod(st.gsize) <= state.hold_items   # (a CPU device's small launch: hold)
                self.steps.append(st)
            state.held_bytes += held
        weakref.finalize(self, _give_back, state, held).atexit = False
        self.fresh = [(slot(a), a.shape, a.dtype) for a in fresh]
        self.outs = self._output_plan(sched, fresh, slot)
        self.nslots = len(slots)
        self._mark_kept(sched, slot)
        self._bound = None          # (input buffers, state.taken) whose arguments the kernels hold, or None
        self._keeps_bound = self._bound_plan(sched)
        self._direct = None if self._keeps_bound else self._direct_plan()
        #: ``one(*bufs) -> buffer`` of a one-output executable (``placement.eager_direct``'s direct call)
        self.one = None if len(self.outs) != 1 else self._one if self._direct is None else self._direct_one

    def _direct_plan(self):
        """What ``_direct_call`` needs of a one-kernel executable that keeps nothing and updates no input (every
        eager operation): ``(kernel, global size, local size, [(argument index, position in the call's list)],
        [(bytes, shape, dtype)] of the fresh buffers, [output's position in the list, or its constant buffer])``,
        the list being the inputs then the fresh buffers; ``None`` for any other executable."""
        if len(self.steps) != 1 or self.steps[0].kept is not None or self.updated:
            return None
        at = {}
        for j, s in enumerate(self.in_slots):
            at[s] = j
        for k, (s, _, _) in enumerate(self.fresh):
            at[s] = len(self.in_slots) + k
        outs = []
        for kind, v in self.outs:
            if kind == "slot":
                outs.append(at[v])
            elif kind == "const":
                outs.append(v)
            else:
                return None
        st = self.steps[0]
        held = math.prod(st.gsize) <= self.state.hold_items   # (a CPU device's small launch: _DeviceState.hold)
        bound = {s for _, s in st.dyn}
        if any(s not in bound for s in self.in_slots):
            return None   # (an input no argument binds: ``__call__`` checks every input)
        return (st.kernel, st.gsize, st.lsize, [(i, at[s]) for i, s in st.dyn],
                [(_bytes(shape, dt), tuple(shape), np.dtype(dt)) for _, shape, dt in self.fresh],
                outs[0] if len(outs) == 1 and type(outs[0]) is int else outs, held)

    def _bound_plan(self, sched) -> bool:
        """Whether calls keep their input bindings (the module docstring): at least ``KEEP_BOUND_INPUTS`` inputs of
        at most ``KEEP_BOUND_BYTES`` in all, each input in its own slot (slots ``0..n-1``), none updated in place;
        sets each step's ``dyn_fresh``, the per-call arguments that are not inputs (set at every call)."""
        n = len(self.in_slots)
        for st in self.steps:
            st.dyn_fresh = [(i, s) for i, s in st.dyn if s >= n]
        return (n >= KEEP_BOUND_INPUTS and not self.updated and self.in_slots == list(range(n))
                and sum(_nbytes(a) for a in sched.inputs) <= KEEP_BOUND_BYTES)

    def _mark_kept(self, sched, slot):
        """Sets each step's ``kept``: the slots of the inputs of a layout copy (a ``"copy"`` launch: the tiled
        ``quantized_matmul``'s panels, a product's packed operand) that reads only the call's inputs (none updated
        in place) and writes only arena buffers no other launch writes, so that its results stay valid while the
        same input buffers come back (a model's weights, call after call); ``None`` for every other step."""
        inputs = set(sched.inputs)
        updated = {sched.inputs[i] for i in self.updated}
        writers: dict = {}
        for launch in sched.launches:
            for p, a in zip(launch.kernel.params, launch.args, strict=True):
                if isinstance(p, BufferParam) and p.writes:
                    writers[a] = writers.get(a, 0) + 1
        for st, launch in zip(self.steps, sched.launches, strict=True):
            st.kept, st.seen = None, ()
            bound = [(p, a) for p, a in zip(launch.kernel.params, launch.args, strict=True)
                     if isinstance(p, BufferParam)]
            reads = [a for p, a in bound if not p.writes]
            writes = [a for p, a in bound if p.writes]
            if (launch.kind == "copy" and reads and writes and all(a in inputs and a not in updated for a in reads)
                    and all(a in self._arena and writers[a] == 1 for a in writes)):
                st.kept = tuple(dict.fromkeys(slot(a) for a in reads))

    def _to_run(self, env):
        """The steps this call enqueues: every step but the kept copies whose input buffers are the very ones
        (alive, not taken over) their last run read; those that run record their inputs (lock held)."""
        run = []
        for st in self.steps:
            if st.kept is not None:
                seen = st.seen
                if len(seen) == len(st.kept) and all(r() is env[s] for r, s in zip(seen, st.kept, strict=True)):
                    continue
                st.seen = tuple(weakref.ref(env[s]) for s in st.kept)
            run.append(st)
        return run

    def _output_plan(self, sched, fresh, slot):
        """Where each output comes from: ``("const", CLBuffer) | ("updated", input index) | ("slot", slot) |
        ("empty", spec)``; sets ``self.updated``, the inputs a kernel writes: donated ones that a
        ``dynamic_update_slice`` or scatter updates in place (groups/in_place.py), whose output takes the buffer
        over."""
        position = {a: i for i, a in enumerate(sched.inputs)}
        self.updated = sorted({position[a] for launch in sched.launches
                               for p, a in zip(launch.kernel.params, launch.args, strict=True)
                               if isinstance(p, BufferParam) and p.writes and a in position})
        outs = []
        for o in sched.outputs:
            if isinstance(o, Literal):
                outs.append(("const", self.state.upload(np.asarray(o.val, o.aval.dtype))))
            elif o in position and position[o] in self.updated:
                outs.append(("updated", position[o]))
            elif o in position or o in fresh:
                outs.append(("slot", slot(o)))
            else:  # an output no kernel writes (zero-size): a fresh empty buffer
                outs.append(("empty", o))
        return outs

    def __call__(self, bufs):
        if _profile.recorder is not None:
            return self._profiled(bufs)
        if self._direct is not None:
            return self._direct_call(bufs)
        state = self.state
        enqueue = cl.enqueue_nd_range_kernel
        with state.lock:  # this executable's kernels may be shared with another thread: args + enqueue at once
            bound = self._bound
            if bound is not None and bound[1] == state.taken and bound[0] == (
                    bufs if type(bufs) is tuple else tuple(bufs)):   # (identity, in C: buffers define no ``==``)
                env, copies = self._env_bound(bufs), _NO_COPIES
            else:
                bound = None
                self._bound = None   # (the kernels' arguments change now)
                env, copies = self._env(bufs)
            for st in self._to_run(env):
                knl = st.kernel
                for i, s in st.dyn if bound is None else st.dyn_fresh:
                    knl.set_arg(i, env[s].mem)
                if st.held:  # a small launch on a CPU device: held with the eager ones (``_DeviceState.hold``)
                    state.hold(knl, st.gsize, st.lsize)
                else:
                    enqueue(state.queue, knl, st.gsize, st.lsize)
            if bound is None and self._keeps_bound:
                self._bound = (tuple(bufs), state.taken)
        return self._outputs(env, bufs, copies)

    def _env_bound(self, bufs):
        """``_env`` of a call whose input buffers are the last call's (``_bound``): checked then, none taken over
        since; the fresh buffers from the pool (lock held)."""
        env = list(bufs)
        env += [None] * (self.nslots - len(env))
        alloc = self.state.alloc
        for s, shape, dt in self.fresh:
            env[s] = alloc(shape, dt)
        return env

    def _one(self, *bufs):
        return self(bufs)[0]

    def _direct_one(self, *bufs):
        """``one`` of a one-kernel executable (``_direct_plan``): ``__call__``'s path with the plan's check made once,
        when ``one`` was chosen (a frame less than ``_one``: ~0.07 us of the eager call's ~4 us)."""
        if _profile.recorder is not None:
            return self._profiled(bufs)[0]
        return self._direct_call(bufs)[0]

    def _direct_call(self, bufs):
        """``__call__`` of a one-kernel executable (``_direct_plan``): no slot list, no kept copies, no updated
        inputs to copy; the fresh buffers straight from the pool (the eager jacobian sweep's 2,216 launches), each
        bound buffer's memory read once (a deferred value runs here, once)."""
        knl, gsize, lsize, binds, fresh, outs, held = self._direct
        state = self.state
        with state.lock:  # as __call__: arguments and enqueue at once
            env = list(bufs)
            if fresh:
                env += state.alloc_plan(fresh)
            for i, k in binds:
                mem = env[k].mem
                if mem is None:   # taken over by an in-place update (bound, NULL crashed the kernel)
                    raise taken_over(env[k])
                knl.set_arg(i, mem)
            if held:
                state.hold(knl, gsize, lsize)
            else:
                cl.enqueue_nd_range_kernel(state.queue, knl, gsize, lsize)
        if type(outs) is int:   # (one output, a buffer of the call)
            return [env[outs]]
        return [env[k] if type(k) is int else k for k in outs]

    def _env(self, bufs):
        """The per-call buffers by slot: the inputs, then fresh outputs (and intermediates past the budget);
        and ``{input index: copy}`` of the updated inputs that need a buffer of their own (lock held)."""
        env = [None] * self.nslots
        for s, b in zip(self.in_slots, bufs, strict=True):
            if b.mem is None:   # a buffer an in-place update took over (bound, NULL crashed the kernel)
                raise taken_over(b)
            env[s] = b
        alloc = self.state.alloc
        for s, shape, dt in self.fresh:
            env[s] = alloc(shape, dt)
        copies = {}
        for i in self.updated:
            b = bufs[i]
            # a copy too where a view or a deferred eager value reads the buffer (kernels/deferred.py)
            if b.shared or donated_must_copy(bufs, i, _memory, self.state.scalars.values()):
                c = copies[i] = alloc(b.shape, b.dtype)
                cl.enqueue_copy(self.state.queue, c.mem, b.mem, byte_count=b.nbytes)
                env[self.in_slots[i]] = c
        return env, copies

    def _profiled(self, bufs):
        """``__call__`` under the profiler: the kernels on a profiling queue, one wait, spans from the events."""
        state = self.state
        rec = _profile.recorder
        if rec is not None:
            for st in self.steps:
                rec.sources.setdefault(st.name, st.source)
        begin = time.perf_counter_ns()
        # The whole call under the device's lock, waited for: the profiling queue is a second in-order queue,
        # so the main queue's earlier work is finished first, and no other thread's call (on either queue)
        # may use this executable's kernels or arena until these kernels have run.
        with state.lock:
            env, copies = self._env(bufs)
            self._bound = None   # (its arguments set below)
            state.queue.finish()
            queue = state.profiling_queue()
            events = []
            steps = self._to_run(env)
            for st in steps:
                knl = st.kernel
                for i, s in st.dyn:
                    knl.set_arg(i, env[s].mem)
                events.append(cl.enqueue_nd_range_kernel(queue, knl, st.gsize, st.lsize))
            if events:
                events[-1].wait()
            end = time.perf_counter_ns()
        if events:
            try:
                times = [(e.profile.start, e.profile.end) for e in events]
            except (cl.Error, AttributeError):  # a device without profiling information: no kernel spans
                times = None
            if times:
                _profile.device_spans([(st.name, t0, t1, {"global_size": tuple(st.gsize),
                                                          "local_size": tuple(st.lsize) if st.lsize else None})
                                       for st, (t0, t1) in zip(steps, times, strict=True)], begin, end)
        return self._outputs(env, bufs, copies)

    def _outputs(self, env, bufs, copies):
        state = self.state
        out = []
        for kind, v in self.outs:
            if kind == "slot":
                out.append(env[v])
            elif kind == "updated":
                # updated in place: the output takes the donated buffer over (the donated array, which jit
                # deletes after the call, then holds none), or is the copy _env made
                b = copies.get(v)
                if b is None:
                    src = settled(bufs[v])   # (a deferred value's buffer, run by ``_env``)
                    b = type(src)(src.mem, src.shape, src.dtype, src.owner)
                    with state.lock:
                        src.mem = None
                        state.taken += 1   # (kept bindings are checked again: ``_bound``)
                out.append(b)
            elif kind == "const":
                out.append(v)
            else:
                out.append(state.alloc(v.shape, v.dtype))
        return out


_NO_COPIES: dict = {}


def _memory(buf):
    """The OpenCL memory object a ``CLBuffer`` wraps (``donated_must_copy``'s accessor)."""
    return buf.mem


def _give_back(state, held):
    with state.lock:
        state.held_bytes -= held
