"""How a webgpu plan runs: its arena made once, calls binding their own buffers, small calls sharing one pass.

A WebGPU command buffer runs once (``GPUCommandBuffer`` is single-use, and render bundles hold no compute
work), so each call records its work. A ``Runner`` (one per compiled plan) owns the *arena*: a buffer per
intermediate value, kept from call to call (never an output, so no array the user holds can alias it). Kernels
that bind only arena buffers get their bind group once, when the runner is made; the others bind the call's
own buffers (its inputs, and its outputs: fresh buffers from the GPU's pool), so each call makes their bind
groups and releases them once recorded (wgpu keeps what a recorded command uses), except where a launch's
binder keeps its last bind groups (``KEPT_BIND_BYTES``, ``KEPT_GROUPS``): a call given the buffers of one of
the last calls binds its bind group again (a jitted decode step's runner pass after pass, ``stack`` of the same
arrays: 168 bind groups of 31 buffers a call; an eager decode step's operations, given one of three sets of pooled
buffers in turn). Binding directly, nothing is copied: an earlier design copied small inputs and outputs through
staging buffers so that every bind group could be made once, but on lavapipe a recorded copy costs ~3-6 us of CPU
and splits the calls' compute passes (~15-20 us each), while a bind group made through wgpu-native's C function
costs ~2.5 us with its release (``native.py``; through wgpu-py's ``create_bind_group`` ~20-35 us).

A call records, into the GPU's open command encoder and its open compute pass (``_GPU.compute_pass``: the pass is
shared by consecutive calls, and ended only when something else is recorded into the encoder or it is
submitted), per kernel ``set_pipeline`` (skipped when the pass's current pipeline is the same),
``set_bind_group`` and ``dispatch_workgroups``: at most ``3 * kernels`` pass commands and one bind group made
and released per kernel that binds the call's buffers, all through ``native.Native`` (wgpu-native's C functions)
where wgpu-py's internals are as expected; no copy, and no buffer, pipeline or layout made once the pool holds
buffers of the outputs' sizes. The encoder is submitted once it holds ``BATCH_LAUNCHES`` kernels, at the end of a
call of ``ALONE_LAUNCHES`` kernels or more, and before any other use of the queue (a readback; a wait; the
profiler's own submits). A command buffer costs a fixed ~30 us on lavapipe however little it holds, so forty
decode steps or an eager loop's operations share a few. Work is not started until then, which a CPU adapter
does not miss (it runs the work inside ``submit``); on a GPU the bound keeps the delay to a few small kernels.

Uploads (``_GPU.upload``) are written with ``queue.write_buffer``, which wgpu runs before the next submit's work:
into a buffer that no work recorded in the open encoder uses (one pooled before the encoder opened, or a new one
up to ``NEW_UPLOAD_BYTES``), so no upload records a copy, ends the pass or (below that bound) submits.

The in-order queue makes the reuse safe without waiting: a call's kernels write the arena after the previous
call's kernels have read it (within one pass too: wgpu orders the dispatches of a pass and puts barriers
between them where one writes what another uses). A buffer given back to the pool while a recorded call still
reads it is reused only by later recorded work (as an output) or after a flush; one let go is kept by wgpu
until the work that uses it has run. Two threads calling one runner take the GPU's lock for the whole
recording, so their work does not interleave.

Under the profiler a call is recorded the same way, with a timestamp pair around each kernel (one compute
pass each) where the device has timestamp queries, submitted once and waited for; each kernel becomes a
``kernel`` span of its device time, and the rest of the call (recording, submission, waiting) stays in the
enclosing span, which the profiler counts as ``dispatch``.
"""

from __future__ import annotations

import math
import time
import weakref

import numpy as np

from fnarray.core import profile as _profile
from fnarray.lowering.kernels import phases
from fnarray.lowering.kernels.lowered import donated_must_copy, taken_over

__all__ = ["Runner", "HELD_BYTES", "BATCH_LAUNCHES", "ALONE_LAUNCHES", "NEW_UPLOAD_BYTES", "KEPT_BIND_BYTES",
           "KEPT_GROUPS", "WIDE_WORK"]

#: Buffer memory all runners of one GPU may hold between calls (their arenas); past it a runner allocates its
#: intermediates per call from the pool, as before this module.
HELD_BYTES = 128 << 20
#: A call records into the GPU's open command encoder, which is submitted once it holds this many kernels (or
#: when the host next uses the queue: an upload, a readback, a wait); a call of ``ALONE_LAUNCHES`` kernels or
#: more is submitted at its end. A command buffer costs ~30 us on lavapipe (min of rounds; 80-160 us at load 7)
#: however little it holds: small calls (an eager operation, a decode step) share one.
BATCH_LAUNCHES = 64
ALONE_LAUNCHES = 16
#: An upload is written (``queue.write_buffer``, which runs before the next submit's work) into a buffer that no
#: work recorded in the open command encoder uses: a pooled one not given back while the encoder was open
#: (``_GPU._upload_target``). Where the pool has only such buffers of its size, an upload of up to this many bytes
#: takes a new buffer (which then joins the pool: the pool's bounds keep their number), a larger one submits the
#: encoder first. Neither records a copy nor, below the bound, submits: a jacobian sweep uploads a small array per
#: few calls (784 of its 3,048 calls submitted for an upload before uploads were staged; then 1,548 staged copies,
#: each ending the calls' shared compute pass).
NEW_UPLOAD_BYTES = 64 << 10
#: A runner's launches that bind the call's own buffers keep their last bind group, and the buffers it binds, up
#: to this many bytes of those buffers in all (``Runner._binders``, ``native.Native.bind_groups``): a call given
#: the same buffers as the last one (a decode step pass after pass, ``stack`` of the same arrays) makes no bind
#: group. The bound is what a runner may keep alive past its arrays' lives (a kept buffer is not freed; most are
#: pooled anyway); ``stack`` of 5,000 arrays of three floats keeps ~140 KB.
KEPT_BIND_BYTES = 256 << 10
#: Bind groups a launch's binder keeps where ``KEPT_BIND_BYTES`` leaves room (its buffers counted once per group):
#: an eager decode loop's operations are given one of three sets of pooled buffers in turn, pass after pass (the
#: pool's order), so one kept bind group missed at every call (280 bind groups made a pass of 40 steps, ~8 us of
#: the calling thread each); with three or more kept, none.
KEPT_GROUPS = 4
#: A launch of more than one work-group whose work (``phases.work_estimate``: statements run over all its work
#: items) exceeds this gives lavapipe's threads their own CPUs back at its submit (``Runner.wide``,
#: ``_GPU._place``); a smaller one (an eager loop's concatenation of a growing cache, 2-41 work-groups of a copy)
#: runs with the threads kept on one CPU like a one-work-group launch: its few microseconds of work gain nothing
#: from a second CPU, and every dispatch submitted with it until the next wait paid the hand-off across CPUs
#: (~35 us of CPU against ~5; driver_threads.py), the eager decode loop's 360 a pass.
WIDE_WORK = phases.MERGE_BELOW
#: Most timestamp queries in one query set (WebGPU's limit is 4096).
_MAX_QUERIES = 4096


def _padded(nbytes: int) -> int:
    return max(4, (nbytes + 3) // 4 * 4)


def _nbytes(spec) -> int:
    itemsize = 4 if np.dtype(spec.dtype) == np.bool_ else np.dtype(spec.dtype).itemsize
    return _padded(spec.size * itemsize)


class Runner:
    """Runs one ``_Plan`` (see the module docstring); ``runner(bufs) -> outputs`` (``WGBuffer``s)."""

    def __init__(self, plan):
        gpu = self.gpu = plan.gpu
        self.steps = plan.steps
        self.n_inputs = plan.n_inputs
        # Inputs a kernel writes: donated ones that a dynamic_update_slice updates in place (groups/in_place.py).
        # The output that shares one takes its buffer over.
        self.updated = sorted({k for st in plan.steps for k, w in zip(st.slots, st.writes, strict=True)
                               if w is True and k < plan.n_inputs})
        bound = {k for st in plan.steps for k in st.slots}
        self.bound_in = [i for i in range(plan.n_inputs) if i in bound]
        self._owned = []                       # the arena's WGBuffers
        self._held = 0                         # their bytes
        template = [None] * plan.n_slots       # the wgpu buffer of every arena slot (the same every call)
        calls = self.calls = gpu.calls
        with gpu.lock:
            self._place_slots(plan, template, HELD_BYTES - gpu.held_bytes)
            gpu.held_bytes += self._held
            # Launches over arena buffers only get their bind group now, once; the others a binder.
            self.fixed = [gpu.bind_group(st.bgl, [template[k] for k in st.slots], st.uniform, st.windows)
                          if all(template[k] is not None for k in st.slots) else None for st in plan.steps]
            self.binders = self._binders(plan, template)
        weakref.finalize(self, _give_back, gpu, self._held).atexit = False
        if self.binders:
            weakref.finalize(self, _forget, gpu, self.binders).atexit = False
        self.template = template
        self.launches = [(calls.handle(st.pipeline), None if bg is None else calls.handle(bg), st.groups)
                         for st, bg in zip(plan.steps, self.fixed, strict=True)]
        # a launch of more than one work-group and more than WIDE_WORK: lavapipe's threads get their own CPUs back
        # first (_GPU._place)
        self.wide = any(math.prod(st.groups) > 1 and _busy(st.launch) for st in plan.steps)
        self.outs = self._output_plan(plan)
        self._queries = None

    def _place_slots(self, plan, template, budget):
        """Every slot past the inputs: an arena buffer (an intermediate, within the budget) or a fresh buffer per
        call (an output, or an intermediate past the budget: ``self.fresh``)."""
        out_slots = {o for o in plan.outputs if isinstance(o, int)}
        self.fresh = []                        # (slot, bytes, dtype, shape): allocated per call
        for k, spec in plan.allocs:
            nb = _nbytes(spec)
            if k not in out_slots and self._held + nb <= budget:
                buf = self.gpu.alloc(spec.dtype, spec.shape)
                self._owned.append(buf)
                self._held += buf.buffer.size
                template[k] = buf.buffer
            else:
                self.gpu.check_size(nb, spec.dtype, spec.shape)
                self.fresh.append((k, nb, np.dtype(spec.dtype), tuple(spec.shape)))

    def _binders(self, plan, template):
        """A binder per launch that binds the call's own buffers, paired with its slots; those whose call buffers
        come to ``KEPT_BIND_BYTES`` or less in all keep their last bind group (``native.Native.bind_groups``), so
        that a call given the same buffers as the last one makes none, and within what the bound leaves, their
        last ``KEPT_GROUPS`` (lock held)."""
        nbytes = {i: _nbytes(spec) for i, spec in enumerate(plan.schedule.inputs)}
        nbytes.update({k: nb for k, nb, _, _ in self.fresh})
        own, kept = [], 0
        for st, bg in zip(plan.steps, self.fixed, strict=True):
            if bg is not None:
                continue
            size = sum(nbytes[k] for k in st.slots if template[k] is None)
            keep = kept + size <= KEPT_BIND_BYTES
            kept += size if keep else 0
            own.append((st, size, int(keep)))
        binders = []
        for st, size, keep in own:
            if keep and kept + (KEPT_GROUPS - 1) * size <= KEPT_BIND_BYTES:
                keep, kept = KEPT_GROUPS, kept + (KEPT_GROUPS - 1) * size
            binders.append((self.calls.binder(st.bgl, [template[k] for k in st.slots], st.uniform, st.windows,
                                              keep=keep), st.slots))
        return binders

    def _output_plan(self, plan):
        """Where each output comes from: ``("in", input index) | ("fresh", slot) | ("const", WGBuffer)``."""
        outs = []
        for o in plan.outputs:
            if not isinstance(o, int):
                outs.append(("const", o))
            elif o < self.n_inputs:
                outs.append(("in", o))
            else:
                outs.append(("fresh", o))
        return outs

    # ------------------------------------------------------------------ the call
    def __call__(self, bufs):
        if _profile.recorder is not None:
            return self.profiled(bufs)
        if len(bufs) != self.n_inputs:
            raise ValueError(f"this webgpu executable takes {self.n_inputs} buffers, got {len(bufs)}")
        gpu = self.gpu
        calls = self.calls
        with gpu.lock:  # one recording and submit at a time per GPU
            vals, made = self._bind(bufs)
            # made before anything is recorded: what may raise happens before the shared encoder holds a part
            # of this call
            groups = calls.bind_groups(self.binders, vals) if self.binders else ()
            if self.updated and any(("copy", i) in made for i in self.updated):   # ends the calls' pass
                self._copy_shared(bufs, made, gpu.encoder())
            if self.launches:
                cp, last, gpu.pass_pipeline = gpu.compute_pass(), gpu.pass_pipeline, None
                try:
                    gpu.pass_pipeline = calls.record(cp, self.launches, groups, last)
                finally:
                    calls.release(groups)
            gpu.open_launches += len(self.launches)
            gpu.pending = True
            if self.wide:
                gpu.open_wide = True
            if gpu.open_launches >= BATCH_LAUNCHES or len(self.launches) >= ALONE_LAUNCHES:
                gpu.flush()
        return self._outputs(bufs, made)

    def _bind(self, bufs):
        """The buffer of every slot for this call, and the per-call ``WGBuffer``s by slot (lock held)."""
        gpu = self.gpu
        vals = self.template.copy()
        for i in self.bound_in:
            b = vals[i] = bufs[i].buffer
            if b is None:   # a buffer an in-place update took over (``_outputs``)
                raise taken_over(bufs[i])
        made = {}
        if self.fresh:
            gpu.alloc_fresh(self.fresh, vals, made)
        for i in self.updated:
            # a copy too where a view or a deferred eager value reads the buffer (kernels/deferred.py)
            if bufs[i].shared or donated_must_copy(bufs, i, _memory):
                b = made[("copy", i)] = gpu.alloc(bufs[i].dtype, bufs[i].shape)
                vals[i] = b.buffer
        return vals, made

    def _copy_shared(self, bufs, made, enc):
        """Record the copies of the updated inputs that ``_bind`` gave a buffer of their own (lock held)."""
        for i in self.updated:
            b = made.get(("copy", i))
            if b is not None:
                enc.copy_buffer_to_buffer(bufs[i].buffer, 0, b.buffer, 0, b.buffer.size)

    def _outputs(self, bufs, made):
        out = []
        for kind, v in self.outs:
            if kind == "fresh":
                out.append(made[v])
            elif kind == "in" and v in self.updated:
                # updated in place: the output takes the donated buffer over (the donated array, which jit
                # deletes after the call, then holds none)
                b = made.get(("copy", v))
                if b is None:
                    b = bufs[v].take_over()
                out.append(b)
            elif kind == "in":
                out.append(bufs[v])
            else:
                out.append(v)
        return out

    # ------------------------------------------------------------------ under the profiler
    def profiled(self, bufs):
        """The call under the profiler: the same recording with a pass and a timestamp pair per kernel,
        one submit, one wait; ``kernel`` spans of the device times (see the module docstring). Without
        timestamp queries each kernel is submitted and waited for alone, its span the wall time."""
        gpu = self.gpu
        rec = _profile.recorder
        if rec is not None:
            for st in self.steps:
                rec.sources.setdefault(st.entry, st.source)
        timed = gpu.has_timestamps and 0 < 2 * len(self.steps) <= _MAX_QUERIES
        if timed:
            qs, resolve = self._query_set()
        begin = time.perf_counter_ns()
        with gpu.lock:
            vals, made = self._bind(bufs)
            binds = [bg if bg is not None
                     else gpu.bind_group(st.bgl, [vals[k] for k in st.slots], st.uniform, st.windows)
                     for st, bg in zip(self.steps, self.fixed, strict=True)]
            dev = gpu.device
            enc = dev.create_command_encoder()
            self._copy_shared(bufs, made, enc)
            if not timed:
                gpu.submit(enc)
                for st, bg in zip(self.steps, binds, strict=True):
                    with _profile.span("kernel", st.entry, workgroups=st.groups):
                        gpu.dispatch_timed(st, [vals[k] for k in st.slots], bg)
            else:
                for j, (st, bg) in enumerate(zip(self.steps, binds, strict=True)):
                    cp = enc.begin_compute_pass(timestamp_writes={
                        "query_set": qs, "beginning_of_pass_write_index": 2 * j,
                        "end_of_pass_write_index": 2 * j + 1})
                    cp.set_pipeline(st.pipeline)
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(*st.groups)
                    cp.end()
                enc.resolve_query_set(qs, 0, 2 * len(self.steps), resolve, 0)
                gpu.submit(enc)
                raw = gpu.queue.read_buffer(resolve, 0, 16 * len(self.steps))   # waits for the call
                gpu.waited()
                end = time.perf_counter_ns()
                stamps = np.frombuffer(raw, np.uint64).reshape(-1, 2)
                _profile.device_spans([(st.entry, t0, t1, {"workgroups": st.groups})
                                       for st, (t0, t1) in zip(self.steps, stamps.tolist(), strict=True)], begin, end)
        return self._outputs(bufs, made)

    def _query_set(self):
        """The timestamp query set and its resolve buffer (made on the first profiled call)."""
        if self._queries is None:
            with _profile.span("compile", "WebGPU timestamp queries"):   # one-off set-up, not dispatch
                self._queries = self._make_query_set()
        return self._queries

    def _make_query_set(self):
        wgpu, dev = self.gpu.wgpu, self.gpu.device
        n = 2 * len(self.steps)
        qs = dev.create_query_set(type=wgpu.QueryType.timestamp, count=n)
        resolve = dev.create_buffer(size=8 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        # wgpu-py parses the C declarations of a timestamped pass on its first use (~80 ms of pycparser, once
        # per process): record one empty such pass here, never submitted, so that no call's dispatch pays it.
        with self.gpu.lock:
            cp = dev.create_command_encoder().begin_compute_pass(timestamp_writes={
                "query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
            cp.end()
        return qs, resolve


def _busy(launch) -> bool:
    """Whether ``launch``'s work exceeds ``WIDE_WORK`` (or has no bound)."""
    work = phases.work_estimate(launch)
    return work is None or work > WIDE_WORK


def _memory(buf):
    """The ``wgpu`` buffer a ``WGBuffer`` wraps (``donated_must_copy``'s accessor)."""
    return buf.buffer


def _forget(gpu, binders):
    """Release the bind groups a runner's binders keep (the runner is gone)."""
    with gpu.lock:
        gpu.calls.forget(binders)


def _give_back(gpu, held):
    with gpu.lock:
        gpu.held_bytes -= held
