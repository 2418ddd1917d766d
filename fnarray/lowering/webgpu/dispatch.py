"""How a webgpu plan runs: its buffers and bind groups made once, small calls sharing one command buffer.

A WebGPU command buffer runs once (``GPUCommandBuffer`` is single-use, and render bundles hold no compute
work), so each call records its work: what makes the recording cheap is that everything it refers to already
exists. A ``Runner`` (one per compiled plan) owns

- the *arena*: a buffer per intermediate value, kept from call to call (never an output, so no array the
  user holds can alias it);
- *staging* buffers for the inputs and outputs up to ``STAGE_BYTES``: a call copies its inputs into them
  (one ``copy_buffer_to_buffer`` each) and its outputs out of them into fresh buffers from the GPU's pool
  (one copy each), so that every bind group binds only buffers the runner owns;
- one bind group per kernel launch over those buffers, made when the runner is made.

A call then records, into the GPU's open command encoder (``_GPU.encoder``): the input copies, one compute
pass with ``set_pipeline`` (skipped when the previous launch used the same pipeline), ``set_bind_group`` and
``dispatch_workgroups`` per kernel, the output copies: at most ``3 * kernels + inputs + outputs + 5`` API calls
(with the encoder's ``finish`` and ``submit``), and no buffer, pipeline or bind group made after the first
call. The encoder is submitted once it holds ``BATCH_LAUNCHES`` kernels, at the end of a call of
``ALONE_LAUNCHES`` kernels or more, and before any other use of the queue (a readback; a wait; the profiler's
own submits; a large upload's ``write_buffer``, which wgpu runs ahead of the next submit's work). A small upload
(``STAGED_UPLOAD_BYTES``) is recorded instead: written into a staging buffer that no recorded work reads, then
copied into its buffer by the encoder, in order with the calls recorded around it. A command buffer
costs a fixed ~30 us on lavapipe however little it holds, so forty decode steps or an eager loop's
operations share a few. Work is not started until then, which a CPU adapter does not miss (it runs the work
inside ``submit``); on a GPU the bound keeps the delay to a few small kernels.

Larger inputs and outputs, and intermediates past the GPU's budget for runner-held memory (``HELD_BYTES``
over all runners), are bound directly instead: their launches keep a small cache of bind groups by buffer
identity (a data set passed every call binds once).

The in-order queue makes the reuse safe without waiting: a call's copies into the staging buffers run
after the previous call's kernels have read them (within one command buffer too: its copies and passes run
in order). A buffer given back to the pool while a recorded call still reads it is reused only by later
recorded work or after a flush; one let go is kept by wgpu until the work that uses it has run. Two threads
calling one runner take the GPU's lock for the whole recording, so their work does not interleave.

Under the profiler a call is recorded the same way, with a timestamp pair around each kernel (one compute
pass each) where the device has timestamp queries, submitted once and waited for; each kernel becomes a
``kernel`` span of its device time, and the rest of the call (recording, submission, waiting) stays in the
enclosing span, which the profiler counts as ``dispatch``.
"""

from __future__ import annotations

import time
import weakref

import numpy as np

from fnarray.core import profile as _profile
from fnarray.lowering.kernels.lowered import donated_must_copy

__all__ = ["Runner", "STAGE_BYTES", "HELD_BYTES", "BATCH_LAUNCHES", "ALONE_LAUNCHES", "STAGED_UPLOAD_BYTES",
           "STAGED_UPLOADS_HELD"]

#: Inputs and outputs up to this many bytes go through the runner's staging buffers (a copy each call);
#: larger ones are bound directly (a copy would cost more than a bind group).
STAGE_BYTES = 256 << 10
#: Buffer memory all runners of one GPU may hold between calls (arena and staging); past it a runner
#: allocates its intermediates per call from the pool, as before this module.
HELD_BYTES = 128 << 20
#: A call records into the GPU's open command encoder, which is submitted once it holds this many kernels (or
#: when the host next uses the queue: an upload, a readback, a wait); a call of ``ALONE_LAUNCHES`` kernels or
#: more is submitted at its end. A command buffer costs ~30 us on lavapipe (min of rounds; 80-160 us at load 7)
#: however little it holds: small calls (an eager operation, a decode step) share one.
BATCH_LAUNCHES = 64
ALONE_LAUNCHES = 16
#: An upload of up to this many bytes while the GPU's command encoder is open is written into a staging buffer
#: (``queue.write_buffer``: no recorded work reads that buffer, so running ahead of the encoder is harmless) and
#: copied into its pooled buffer by a copy recorded into the encoder, after the work recorded before it: no
#: submit (a jacobian sweep uploads a small array per call: 784 submits of 3,048 calls went to uploads). Larger
#: uploads, and any once the open encoder's staged bytes pass ``STAGED_UPLOADS_HELD`` (or its count
#: ``BATCH_LAUNCHES``), submit the encoder and write the buffer directly. 0: every upload submits first.
STAGED_UPLOAD_BYTES = 64 << 10
STAGED_UPLOADS_HELD = 4 << 20
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
        # They are bound directly, never staged, and the output that shares one takes its buffer over.
        self.updated = sorted({k for st in plan.steps for k, w in zip(st.slots, st.writes, strict=True)
                               if w and k < plan.n_inputs})
        self._owned = []                       # WGBuffers this runner keeps (arena and staging)
        self._held = 0                         # their bytes
        template = [None] * plan.n_slots       # the wgpu buffer of every slot that does not change
        with gpu.lock:
            budget = HELD_BYTES - gpu.held_bytes
            self._place_inputs(plan, template, budget)
            stage_out = self._place_slots(plan, template, budget)
            gpu.held_bytes += self._held
            # Launches over owned buffers only get their bind group now, once.
            self.binds = [gpu.bind_group(st.bgl, [template[k] for k in st.slots], st.uniform)
                          if all(template[k] is not None for k in st.slots) else None for st in plan.steps]
        weakref.finalize(self, _give_back, gpu, self._held).atexit = False
        self.template = template
        self.stage_out = list(stage_out.items())
        self.outs = self._output_plan(plan)
        self._queries = None

    def _own(self, spec):
        """A buffer for ``spec`` that this runner keeps (and counts against ``HELD_BYTES``)."""
        buf = self.gpu.alloc(spec.dtype, spec.shape)
        self._owned.append(buf)
        self._held += buf.buffer.size
        return buf.buffer

    def _place_inputs(self, plan, template, budget):
        """Each bound input: copied into a staging buffer of its own (up to ``STAGE_BYTES``, within the
        budget) or bound directly."""
        inputs = plan.schedule.inputs
        bound = {k for st in plan.steps for k in st.slots}
        self.stage_in = []                     # (input index, staging buffer, bytes)
        self.direct_in = []                    # input indices bound directly
        for i in range(plan.n_inputs):
            if i not in bound:
                continue
            nb = _nbytes(inputs[i])
            if i in self.updated:
                self.direct_in.append(i)
                continue
            if nb <= STAGE_BYTES and self._held + nb <= budget:
                template[i] = self._own(inputs[i])
                self.stage_in.append((i, template[i], nb))
            else:
                self.direct_in.append(i)

    def _place_slots(self, plan, template, budget):
        """Every other slot: an arena buffer (intermediates), a staging buffer (small outputs a kernel writes)
        or a fresh buffer per call (``self.fresh``); returns ``{slot: (staging buffer, bytes, spec)}``."""
        written = {k for st in plan.steps for k, w in zip(st.slots, st.writes, strict=True) if w}
        out_slots = {o for o in plan.outputs if isinstance(o, int)}
        self.fresh = []                        # (slot, spec): allocated per call and bound directly
        stage_out = {}                         # slot -> (staging buffer, bytes, spec)
        for k, spec in plan.allocs:
            nb = _nbytes(spec)
            if k in out_slots:
                if k in written and nb <= STAGE_BYTES and self._held + nb <= budget:
                    stage_out[k] = (self._own(spec), nb, spec)
                    template[k] = stage_out[k][0]
                else:
                    self.fresh.append((k, spec))
            elif self._held + nb <= budget:
                template[k] = self._own(spec)
            else:
                self.fresh.append((k, spec))
        return stage_out

    def _output_plan(self, plan):
        """Where each output comes from: ``("in", input index) | ("stage", index in stage_out) |
        ("fresh", slot) | ("const", WGBuffer)``."""
        order = {k: j for j, (k, _) in enumerate(self.stage_out)}
        outs = []
        for o in plan.outputs:
            if not isinstance(o, int):
                outs.append(("const", o))
            elif o < self.n_inputs:
                outs.append(("in", o))
            elif o in order:
                outs.append(("stage", order[o]))
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
        with gpu.lock:  # one recording and submit at a time per GPU (the bind-group caches too)
            vals, made = self._bind(bufs)
            # made before anything is recorded: what may raise happens before the shared encoder holds a part
            # of this call
            binds = [bg if bg is not None else st.bind_group(gpu, [vals[k] for k in st.slots])
                     for st, bg in zip(self.steps, self.binds, strict=True)]
            enc = gpu.encoder()
            self._copy_shared(bufs, made, enc)
            for i, staging, nb in self.stage_in:
                enc.copy_buffer_to_buffer(bufs[i].buffer, 0, staging, 0, nb)
            if self.steps:
                cp = enc.begin_compute_pass()
                last = None
                for st, bg in zip(self.steps, binds, strict=True):
                    if st.pipeline is not last:
                        cp.set_pipeline(st.pipeline)
                        last = st.pipeline
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(*st.groups)
                cp.end()
            staged = self._copy_out(enc)
            gpu.open_launches += len(self.steps)
            gpu.pending = True
            if gpu.open_launches >= BATCH_LAUNCHES or len(self.steps) >= ALONE_LAUNCHES:
                gpu.flush()
        return self._outputs(bufs, made, staged)

    def _bind(self, bufs):
        """The buffer of every slot for this call, and the per-call ``WGBuffer``s by slot (lock held)."""
        gpu = self.gpu
        vals = self.template.copy()
        for i in self.direct_in:
            vals[i] = bufs[i].buffer
        made = {}
        for k, spec in self.fresh:
            b = made[k] = gpu.alloc(spec.dtype, spec.shape)
            vals[k] = b.buffer
        for i in self.updated:
            if donated_must_copy(bufs, i, _memory):
                b = made[("copy", i)] = gpu.alloc(bufs[i].dtype, bufs[i].shape)
                vals[i] = b.buffer
        return vals, made

    def _copy_shared(self, bufs, made, enc):
        """Record the copies of the updated inputs that ``_bind`` gave a buffer of their own (lock held)."""
        for i in self.updated:
            b = made.get(("copy", i))
            if b is not None:
                enc.copy_buffer_to_buffer(bufs[i].buffer, 0, b.buffer, 0, b.buffer.size)

    def _copy_out(self, enc):
        """Fresh buffers for the staged outputs, their copies recorded (lock held)."""
        gpu = self.gpu
        staged = []
        for _, (staging, nb, spec) in self.stage_out:
            b = gpu.alloc(spec.dtype, spec.shape)
            enc.copy_buffer_to_buffer(staging, 0, b.buffer, 0, nb)
            staged.append(b)
        return staged

    def _outputs(self, bufs, made, staged):
        out = []
        for kind, v in self.outs:
            if kind == "stage":
                out.append(staged[v])
            elif kind == "fresh":
                out.append(made[v])
            elif kind == "in" and v in self.updated:
                # updated in place: the output takes the donated buffer over (the donated array, which jit
                # deletes after the call, then holds none)
                b = made.get(("copy", v))
                if b is None:
                    src = bufs[v]
                    b = type(src)(src.buffer, src.dtype, src.shape, src.gpu)
                    src.buffer = None
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
            dev = gpu.device
            enc = dev.create_command_encoder()
            self._copy_shared(bufs, made, enc)
            for i, staging, nb in self.stage_in:
                enc.copy_buffer_to_buffer(bufs[i].buffer, 0, staging, 0, nb)
            if not timed:
                gpu.submit(enc)
                for st, bg in zip(self.steps, self.binds, strict=True):
                    with _profile.span("kernel", st.entry, workgroups=st.groups):
                        gpu.dispatch_timed(st, [vals[k] for k in st.slots], bind_group=bg)
                enc = dev.create_command_encoder()
            else:
                for j, (st, bg) in enumerate(zip(self.steps, self.binds, strict=True)):
                    cp = enc.begin_compute_pass(timestamp_writes={
                        "query_set": qs, "beginning_of_pass_write_index": 2 * j,
                        "end_of_pass_write_index": 2 * j + 1})
                    cp.set_pipeline(st.pipeline)
                    cp.set_bind_group(0, bg if bg is not None else st.bind_group(gpu, [vals[k] for k in st.slots]))
                    cp.dispatch_workgroups(*st.groups)
                    cp.end()
                enc.resolve_query_set(qs, 0, 2 * len(self.steps), resolve, 0)
            staged = self._copy_out(enc)
            gpu.submit(enc)
            if timed:
                raw = gpu.queue.read_buffer(resolve, 0, 16 * len(self.steps))   # waits for the call
                gpu.pending = False
                end = time.perf_counter_ns()
                stamps = np.frombuffer(raw, np.uint64).reshape(-1, 2)
                _profile.device_spans([(st.entry, t0, t1, {"workgroups": st.groups})
                                       for st, (t0, t1) in zip(self.steps, stamps.tolist(), strict=True)], begin, end)
        return self._outputs(bufs, made, staged)

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


def _memory(buf):
    """The ``wgpu`` buffer a ``WGBuffer`` wraps (``donated_must_copy``'s accessor)."""
    return buf.buffer


def _give_back(gpu, held):
    with gpu.lock:
        gpu.held_bytes -= held
