"""The opencl backend: fused OpenCL C kernels run through PyOpenCL.

Devices ``opencl:N`` are the OpenCL devices that open a context, GPUs first, so
``opencl:0`` is the first GPU, else a CPU device (PoCL's ``pthread`` device on a
machine without a GPU). A device that fails to open is skipped; a machine with
none (or without PyOpenCL) makes the backend unavailable with the reason, never
a crash.

Programs go through the kernel scheduler (``fnarray.lowering.kernels``), which
groups them into fused kernels for the device's ``Capabilities``; each kernel
is printed as OpenCL C by ``render_opencl``. Here lives the runtime:

- buffers (``CLBuffer``) stay on the device between kernels and calls;
  ``bool`` is stored as ``uchar`` and complex values as ``float2``/``double2``.
  Intermediate and output buffers come from a memory pool; one in-order queue
  per device makes reuse safe without waiting;
- programs are built once per kernel source (all new kernels of a lowering in
  one build) and cached by source, so the same kernel in another program,
  shape or eager call is not built again;
- a jitted call enqueues all its kernels without a host round trip, each once,
  with the arguments that do not change between calls set when it was compiled
  (``dispatch.py``); only reading values (``to_host``), ``block_until_ready``, a
  host-driven loop's predicate and fallback transfers wait for the queue. On a
  CPU device small eager launches are held back in batches (``_DeviceState.hold``):
  each wait, and anything else taking the ``queue``, lets them go first.

Threads: a ``cl.Kernel`` holds its arguments, so setting them and enqueueing is
one step under the device's lock (an executable, and its kernels, may be shared
by threads: one jitted function, or an eager operation); building programs
takes the lock too. The program cache is an LRU of
``fnarray.config.kernel_cache_size`` sources per device (an executable keeps
its own kernels alive, so an evicted program only gets rebuilt if asked again).

dtypes: ``bool``, ``int8``/``uint8``, ``int16``/``uint16``, ``int32``/``uint32``,
``float32`` and ``complex64`` everywhere; ``int64``/``uint64`` on full-profile
devices; ``float64``/``complex128`` where the device has ``cl_khr_fp64``;
``float16`` where it has ``cl_khr_fp16``. ``bfloat16`` is not supported (its
equations take the partitioner's fallback path).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import threading
import time
import warnings

import numpy as np

from fnarray.core import dtypes
from fnarray.core import profile as _profile
from fnarray.core import primitives as P
from fnarray.core.fft import fft_p
from fnarray.core.quantized import quantized_matmul_p
from fnarray.core.pallas import pallas_call_p
from fnarray.lowering.kernels.groups.pallas import unsupported_reason as pallas_unsupported_reason
from fnarray.core.attention import dot_product_attention_p
from fnarray.lowering.kernels.groups.fft import unsupported_reason as fft_unsupported_reason
from fnarray.lowering.kernels.groups.quantized import unsupported_reason as quantized_unsupported_reason
from fnarray.lowering.kernels.groups.attention import unsupported_reason as attention_unsupported_reason
from fnarray.core.cache import LRUCache, used_since
from fnarray.core.config import config
from fnarray.core.decompositions import accumulates_in_low_precision
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Literal, Program
from fnarray.devices import compile_cache, teardown
from fnarray.devices.backend import Backend, Capabilities, Device
from fnarray.lowering.kernels import Schedule, render_opencl, schedule_program, tuning
from fnarray.lowering.kernels.lowered import KernelLowered, taken_over
from fnarray.lowering.kernels.literal_args import literals_as_args
from fnarray.lowering.kernels import phases
from fnarray.lowering.kernels.int_args import IntArgs
from fnarray.core.subprograms import CONTROL_FLOW
from fnarray.lowering.kernels import deferred, facts
from fnarray.lowering.kernels.groups import linalg
from fnarray.lowering.kernels.no_kernel import EXPECTED_DECOMPOSITIONS, EXPECTED_FALLBACKS, no_kernel_reason
from fnarray.lowering.kernels.schedule import CALLS, REDUCTIONS, SCHEDULED
from fnarray.lowering.opencl.dispatch import Executable

try:
    import pyopencl as cl
    import pyopencl.tools as cl_tools
except ImportError as e:  # pragma: no cover - exercised where pyopencl is missing
    raise BackendUnavailable("the opencl backend needs PyOpenCL: not installed (to fix: pip install pyopencl, "
                             "and an OpenCL driver, e.g. pip install pocl-binary-distribution)") from e

__all__ = ["make_backend", "OpenCLBackend", "CLBuffer", "OpenCLLowered"]

_CONTROL = CONTROL_FLOW
_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}
# Primitives whose kernels have no complex form (from the kernel facts).
_COMPLEX_BAD = frozenset(p for p in SCHEDULED if p not in facts.complex_ok() and p not in CALLS)
_MAX_ELEMENTS = 2**31 - 1


#: The primitives whose kernels take the low-bit dtypes (held as their bytes): conversions (in registers, bit for bit
#: as ml_dtypes: kernels/rules.py's to_low_bit/low_bit_value) and data movement (the bytes as they are); those of
#: ``core/low_bit_upcast.UPCAST_PRIMITIVES`` compute between conversions to and from float32/int32
#: (``OpenCLBackend.keeps_low_bit``); every other operation on them runs on numpy:0.
_LOW_BIT_PRIMITIVES = frozenset({P.convert_element_type, P.bitcast_convert_type, P.reshape, P.transpose,
                                 P.broadcast_in_dim, P.slice_p, P.rev, P.concatenate, P.copy_p, P.stop_gradient,
                                 P.name_p})


def _low_bit_reason(eqn):
    """Why an equation touching a float8/int4/uint4 array cannot run here, or ``None``."""
    low = [a.aval.dtype for a in list(eqn.inputs) + list(eqn.outputs) if dtypes.is_low_bit(a.aval.dtype)]
    if not low:
        return None
    d = low[0]
    if eqn.primitive in _CONTROL or eqn.primitive in CALLS:
        return None   # the carries are buffers; the partitioner checks the sub-programs' equations
    if eqn.primitive not in _LOW_BIT_PRIMITIVES:
        return (f"OpenCL C has no {d.name} type: kernels convert its bytes, in registers (astype, bit casts), "
                "move them (transpose, reshape, slice, concatenate...), and compute its arithmetic in "
                "float32/int32 between conversions (core/low_bit_upcast.py); this operation has no such form, "
                "so it runs on numpy:0")
    src, dst = eqn.inputs[0].aval.dtype, eqn.outputs[0].aval.dtype
    if eqn.primitive is P.convert_element_type and src == dtypes.float64 and dtypes.is_float(dst):
        return (f"float64 -> {dst.name} rounds once from float64 (ml_dtypes); the kernels round from float32 "
                "only: cast to float32 first, or let numpy:0 do it")
    return None

class CLBuffer:
    """A device array: an OpenCL buffer holding ``shape`` elements of ``dtype`` (row-major).

    ``bool`` is stored as one byte per element; a zero-size array holds a small dummy buffer. ``owner``: its
    device's ``_DeviceState``. ``shared``: a view or a deferred eager value reads it too (``kernels/deferred.py``),
    so an in-place update must not take it over.
    """

    __slots__ = ("mem", "shape", "dtype", "owner", "shared", "__weakref__")

    def __init__(self, mem, shape, dtype, owner):
        self.mem, self.shape, self.dtype, self.owner = mem, tuple(shape), np.dtype(dtype), owner
        self.shared = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self):
        return f"CLBuffer({self.dtype.name}{list(self.shape)})"


_POOL_HELD_BYTES = 256 << 20   # free pooled memory always kept (as the webgpu backend's pool_limit)
#: Small eager launches a CPU device holds back at most (``_DeviceState.hold``; 0: none held)
HOLD_LAUNCHES = 32
#: Work items of a launch that may be held (``dispatch.Executable``: a one-kernel executable's launch)
HOLD_ITEMS = 4096


def _kernel_cache_size() -> int:
    return config.kernel_cache_size


def _storage(dtype):
    return np.dtype(np.uint8) if dtype == np.bool_ or dtypes.is_low_bit(dtype) else np.dtype(dtype)


#: Programs whose binaries wait for the exit (PoCL, ``_DeviceState._build``) at most; past it the oldest are
#: stored at once, so a long process building many programs keeps a bounded number of them alive.
PENDING_BINARIES_MAX = 256


class _DeviceState:
    """One OpenCL device: context, in-order queue, memory pool, program cache and capabilities."""

    def __init__(self, cl_device):
        self.cl_device = cl_device
        self.context = cl.Context([cl_device])
        self._queue = cl.CommandQueue(self.context)
        self._profiling_queue = None
        self.pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(self._queue))
        # small eager launches held behind a user event (``hold``); on CPU devices only (PoCL: its worker threads
        # woken once a batch, not once a launch)
        self.hold_items = HOLD_ITEMS if not cl_device.type & cl.device_type.GPU and HOLD_LAUNCHES > 0 else 0
        self._gate = None             # the cl.UserEvent the held launches wait for, or None
        self._held = 0
        self.lock = threading.RLock()  # kernel arguments + enqueue, builds, pool allocation
        self.programs = LRUCache(_kernel_cache_size)  # kernel source -> built cl.Program
        self.int_args = IntArgs(_kernel_cache_size)    # kernel structures met, their varying constants
        self.sources = LRUCache(_kernel_cache_size, second_chance=used_since)   # kernel IR -> _Source
        try:  # PoCL compiles kernels lazily (``_build``)
            self.is_pocl = "Portable Computing Language" in cl_device.platform.name
        except cl.Error:  # pragma: no cover (a driver without the query)
            self.is_pocl = False
        self.pending_binaries: list = []  # (cache folder, key, cl.Program) to store at exit (``_build``)
        self.scalars: dict = {}       # (dtype, bytes) -> CLBuffer of a 0-d value (arrays are immutable)
        self.held_bytes = 0           # buffer bytes executables keep between calls (dispatch.py: arenas)
        self.taken = 0                # buffers an in-place update took over so far (dispatch.py: kept bindings)
        ext = cl_device.extensions.split()
        self.fp64 = "cl_khr_fp64" in ext
        self.fp16 = "cl_khr_fp16" in ext
        full = cl_device.profile == "FULL_PROFILE"
        ds = {dtypes.bool_, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.float32, dtypes.complex64, *dtypes.LOW_BIT_DTYPES}
        if full:
            ds |= {dtypes.int64, dtypes.uint64}
        if self.fp64:
            ds |= {dtypes.float64, dtypes.complex128}
        if self.fp16:
            ds.add(dtypes.float16)
        is_gpu = bool(cl_device.type & cl.device_type.GPU)
        self.caps = Capabilities(
            dtypes=frozenset(ds),
            max_buffers_per_kernel=max(8, cl_device.max_parameter_size // 8 - 24),
            max_workgroup_size=int(cl_device.max_work_group_size),
            max_dispatch=None,
            local_memory=cl_device.local_mem_size >= 16384,
            local_memory_bytes=int(cl_device.local_mem_size),
            atomics="cl_khr_global_int32_base_atomics" in ext or not cl_device.version.startswith("OpenCL 1.0"),
            tiling_pays=True,
            matmul_tiling="local" if is_gpu else "register",
            control_flow="host",
            max_buffer_bytes=int(cl_device.max_mem_alloc_size),
            memory_bytes=int(cl_device.global_mem_size),
            uniform_guard=not is_gpu, memory_check="compiled", tunable=True, eager_programs="tapes",
            tuning_facts=_tuning_facts(cl_device, is_gpu))
        self.workgroup = 128 if is_gpu else 64
        self.row_lanes = 1 if is_gpu else 4   # accumulators per work-item row loop (groups/reduce.py: lanes)
        self.missing_reason = {
            dtypes.float64: "cl_khr_fp64 is absent", dtypes.complex128: "cl_khr_fp64 is absent",
            dtypes.float16: "cl_khr_fp16 is absent", dtypes.bfloat16: "OpenCL C has no bfloat16",
            dtypes.int64: "an embedded-profile device has no 64-bit integers",
            dtypes.uint64: "an embedded-profile device has no 64-bit integers",
        }

    @property
    def queue(self):
        """The in-order queue, the held launches let go first (what is enqueued on it may be waited for)."""
        if self._gate is not None:
            with self.lock:
                self.release()
        return self._queue

    def hold(self, kernel, gsize, lsize):
        """Enqueue a small eager launch (lock held) behind the device's gate: a ``cl.UserEvent`` that opens once
        ``HOLD_LAUNCHES`` wait, or as anything else is enqueued or waited for (``queue``, ``wait``, ``download``).
        Each launch on its own woke PoCL's worker threads, ~2.5 context switches of the calling thread's core a
        launch (docs/performance.md, "opencl:0 eager launches held")."""
        gate = self._gate
        if gate is None:
            gate = self._gate = cl.UserEvent(self.context)
            self._held = 0
        cl.enqueue_nd_range_kernel(self._queue, kernel, gsize, lsize, wait_for=(gate,))
        self._held += 1
        if self._held >= HOLD_LAUNCHES:
            self.release()

    def release(self):
        """Let the held launches run (lock held)."""
        gate = self._gate
        if gate is not None:
            self._gate = None
            gate.set_status(cl.command_execution_status.COMPLETE)

    def wait(self):
        """Block until every command queued on the main queue has run. Under the lock, so that no launch another
        thread holds meanwhile is waited for (held until its batch fills); ``clFinish``, since a marker's event
        waited for cost PoCL ~10 us more (the staged jacobian sweep's 120 waits: 3 -> 9 ms)."""
        with self.lock:
            self.release()
            self._queue.finish()

    def finish(self):
        """Block until every command queued on this device has run."""
        self.wait()
        if self._profiling_queue is not None:
            self._profiling_queue.finish()

    def store_binaries(self):
        """Write the program binaries ``_build`` deferred into the persistent cache (called at exit)."""
        with self.lock:
            pending, self.pending_binaries = self.pending_binaries, []
        self._store(pending)

    @staticmethod
    def _store(pending):
        """Read each ``(cache folder, key, cl.Program)``'s binary and write it into the persistent cache."""
        for root, k, prog in pending:
            if compile_cache.cache_dir() != root:  # the cache folder changed since: not this one's entry
                continue
            binaries = prog.binaries
            if binaries and binaries[0]:
                compile_cache.put("opencl", k, bytes(binaries[0]))

    def at_exit(self):
        """``finish``, then ``store_binaries`` (``teardown.keep_until_exit``)."""
        self.finish()
        self.store_binaries()

    def profiling_queue(self):
        """A second in-order queue with profiling events, made on first use (only the profiler uses it)."""
        q = self._profiling_queue
        if q is None:
            q = self._profiling_queue = cl.CommandQueue(
                self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        return q

    # ------------------------------------------------------------------ buffers
    def alloc(self, shape, dtype) -> CLBuffer:
        n = max(math.prod(shape) * np.dtype(dtype).itemsize, 16)   # bool: one byte, as _storage's uint8
        return self.alloc_bytes(n, shape, dtype)

    def alloc_bytes(self, n, shape, dtype) -> CLBuffer:
        """``alloc`` of ``n`` bytes (``max(size * itemsize, 16)``, worked out by the caller once: dispatch.py)."""
        with self.lock:
            mem = self.pool.allocate(n)
            self._trim()
        return CLBuffer(mem, shape, dtype, self)

    def alloc_plan(self, plan) -> list:
        """``alloc_bytes`` of each ``(n, shape, dtype)`` of ``plan`` (``shape`` a tuple, ``dtype`` an ``np.dtype``:
        a one-kernel executable's fresh buffers, ``dispatch.Executable._direct_call``; lock held), each
        ``CLBuffer`` made without its ``__init__`` (~0.25 us of an eager launch's ~4)."""
        allocate, new = self.pool.allocate, CLBuffer.__new__
        out = []
        for n, shape, dtype in plan:
            b = new(CLBuffer)
            b.mem, b.shape, b.dtype, b.owner, b.shared = allocate(n), shape, dtype, self, False
            out.append(b)
        self._trim()
        return out

    def _trim(self):
        """PyOpenCL's pool keeps every freed block for reuse and never gives one back: arrays of ever new sizes
        grew the process without bound (40 arrays of 10-400 MB, each freed: 6 GB held). Free blocks stay only while
        they are at most the bytes in use (a loop's next step reuses them) or ``_POOL_HELD_BYTES`` (lock held)."""
        pool = self.pool
        held = pool.managed_bytes - pool.active_bytes
        if held > _POOL_HELD_BYTES and held > pool.active_bytes:
            pool.free_held()

    def upload(self, array) -> CLBuffer:
        a = np.asarray(array)
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        if a.dtype == np.bool_ or dtypes.is_low_bit(a.dtype):   # bytes (ml_dtypes' types export no buffer format)
            host = np.ascontiguousarray(a).view(np.uint8)
        else:
            host = np.ascontiguousarray(a)
        if a.ndim == 0:
            key = (a.dtype, host.tobytes())
            hit = self.scalars.get(key)
            if hit is not None:
                return hit
        flags = cl.mem_flags.READ_WRITE
        if host.nbytes:
            mem = cl.Buffer(self.context, flags | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        else:
            mem = cl.Buffer(self.context, flags, 16)
        buf = CLBuffer(mem, a.shape, a.dtype, self)
        if a.ndim == 0 and len(self.scalars) < 4096:
            self.scalars[key] = buf
        return buf

    def download(self, buf: CLBuffer) -> np.ndarray:
        """``buf``'s elements in a new host array. The copy is enqueued under the lock, after the held launches are
        let go (so it waits for no launch held later: the queue is in order), and waited for outside it, so that
        other threads enqueue meanwhile (their launches run after the copy)."""
        if buf.mem is None:   # dispatch.py: a donated buffer an in-place update took over
            raise taken_over(buf)
        host = np.empty(buf.shape, _storage(buf.dtype))
        if host.nbytes:
            mem = buf.mem
            with self.lock:
                self.release()
                done = cl.enqueue_copy(self._queue, host, mem, is_blocking=False)
                self._queue.flush()
            done.wait()
        return host.view(buf.dtype) if buf.dtype == np.bool_ or dtypes.is_low_bit(buf.dtype) else host

    # ------------------------------------------------------------------ programs
    def build(self, sources):
        """Build the sources not built yet, all in one program; returns ``{source: cl.Program}``."""
        with self.lock:
            got = {s: self.programs.get(s) for s in dict.fromkeys(sources)}
            new = [s for s, p in got.items() if p is None]
            if new:
                text = "\n".join(new)
                try:
                    with warnings.catch_warnings(), _profile.span("compile", "OpenCL program build",
                                                                  kernels=len(new)):
                        warnings.simplefilter("ignore")
                        prog = self._build(text)
                except cl.Error as e:
                    raise RuntimeError(f"the OpenCL compiler rejected fnarray's generated kernels (a bug in "
                                       f"fnarray; please report it): {e}\n--- source ---\n{text}") from None
                for s in new:
                    got[s] = self.programs.put(s, prog)
        return got

    def named_source(self, kernel):
        """``_named_source(kernel)``, rendered once for equal kernels: a kernel met again (the transformer step's
        second layer, its backward's copies of the forward's; stack's 50 concatenations) costs a hash and a
        comparison of its IR, not a render (the transformer's first call: 146 kernels, 74 sources)."""
        source = self.sources.peek(kernel)
        if source is None:
            source = self.sources.put(kernel, _Source(_named_source(kernel)))
        source.used = True
        return source.named

    def _build(self, text):
        """``cl.Program(text).build()``, through the persistent cache of program binaries when it is on."""
        if compile_cache.cache_dir() is None:
            return cl.Program(self.context, text).build()
        d = self.cl_device
        k = compile_cache.key(text, cl.VERSION_TEXT, d.platform.name, d.platform.version, d.name, d.version,
                              d.driver_version)
        binary = compile_cache.get("opencl", k)
        if binary is not None:
            try:
                return cl.Program(self.context, [d], [binary]).build()
            except cl.Error:  # a binary the driver no longer accepts: compile the source again
                pass
        prog = cl.Program(self.context, text).build()
        if not self.is_pocl:
            self._store([(compile_cache.cache_dir(), k, prog)])  # compiled by the build already: cheap to read
        else:
            # PoCL compiles a kernel at its first launch, for the launch's work-group size; reading
            # ``prog.binaries`` makes it compile every kernel once more, for any size (about as long as the
            # launches' compile: a cold first call twice as slow, docs/performance.md "The persistent cache, cold,
            # on PoCL"). So the binary is read at exit, after the process's calls. (Storing none while PoCL's own
            # kernel cache is on was measured too: a later process then builds from source through PoCL's cache,
            # 0.05-0.1 s slower on its first call than from the binary.)
            with self.lock:
                self.pending_binaries.append((compile_cache.cache_dir(), k, prog))
                excess = max(0, len(self.pending_binaries) - PENDING_BINARIES_MAX)
                over = self.pending_binaries[:excess]
                del self.pending_binaries[:excess]
            self._store(over)   # bounded memory: the oldest, long since launched, are stored now
        return prog


# ------------------------------------------------------------------------------------------ kernels


def _named_source(kernel):
    """The kernel's OpenCL C with a name made unique by a digest of its text (kernels built together)."""
    text = render_opencl(kernel)
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    name = f"{kernel.name}_{digest}"
    # The name appears once in the text, in the signature (opencl_c.py: ``__kernel ... void NAME(``): renaming
    # it there gives the text the renamed kernel renders to, without rendering it a second time (0.3-0.4 s of
    # the digits step's first call on PoCL; docs/performance.md "First call with cold kernel caches").
    old = f" void {kernel.name}("
    if text.count(old) == 1:
        return name, text.replace(old, f" void {name}(", 1)
    return name, render_opencl(_renamed(kernel, name))


class _Source:
    """A kernel's ``(name, source)`` in ``_DeviceState.sources``; ``used``: met since the cache last came to it."""

    __slots__ = ("named", "used")

    def __init__(self, named):
        self.named, self.used = named, True


def _renamed(kernel, name):
    return dataclasses.replace(kernel, name=name)


def _tuning_facts(cl_device, is_gpu) -> tuple:
    """``Capabilities.tuning_facts`` of an OpenCL device: its kind, and for PoCL the major version of the LLVM
    it compiles with (read from the platform's version, e.g. ``"OpenCL 3.0 PoCL 3.1+debian ... LLVM 15.0.6"``)."""
    facts = [("device", "gpu" if is_gpu else "cpu")]
    try:
        version = cl_device.platform.version
    except cl.Error:  # pragma: no cover (a driver without the query)
        version = ""
    if "PoCL" in version:
        facts.append(("compiler", "pocl"))
        m = re.search(r"LLVM (\d+)", version)
        if m:
            facts.append(("llvm", int(m.group(1))))
    return tuple(facts)


class OpenCLLowered(KernelLowered):
    """A program scheduled into OpenCL C kernels for one device."""

    def __init__(self, program: Program, device: Device, state: _DeviceState, donate=()):
        super().__init__(program, device, donate)
        self.state = state

    def _schedule_now(self):
        opts = self._donate_options()
        if self.state.caps.matmul_tiling == "register":   # a CPU device (PoCL)
            # groups/scatter.py: a work item per column where it is less work (an embedding's gradient: each
            # element walked all 1,024 token rows, 5.5 ms on PoCL 3.0; by column 0.1 ms).
            opts["scatter_columns"] = True
            # kernels/schedule.py: a costly inlined value read by several equations gets a buffer (the
            # transformer step 38.6-39.4 -> 34.9-35.6 CPU ms, the VAE grid 36-38 -> 27-29, load 7-8)
            opts["share_values"] = True
            # kernels/emitter.py: a concatenation of more than two pieces as if branches (the VAE grid
            # 26.8-27.4 -> 22.1-22.9 CPU ms, load 7-8)
            opts["concat_branches"] = True
            # kernels/uniform_pieces.py: not on PoCL, where the branch tree above reads the VAE grid's 100 slices
            # faster than one chain at shifted slices with its divisions (4.5-4.9 vs 17-19 ns an element, 25
            # slices 5-7 vs 8-12, load 22; benchmarks/concat_pieces.py); lavapipe is the other way round
            opts["uniform_pieces"] = False
            # groups/pallas.py: a reduction of several rows per item reads float32/uint32 inputs as float4/uint4
            # lanes (``_lane_load``; only there on OpenCL) where PoCL compiles with LLVM 15 or later (PoCL 3.1:
            # the 4-bit matvec example 0.80x the time; PoCL 3.0, LLVM 14: 1.3x, so not there)
            facts = dict(self.state.caps.tuning_facts)
            opts["lane_vec4"] = facts.get("compiler") == "pocl" and facts.get("llvm", 0) >= 15
            # kernels/schedule.py: an expensive value under a broadcast of fewer than 1024 elements recomputed
            # by each element, not a launch of its own (a PoCL launch costs ~70 us of its threads' CPU time; the
            # jacobians_staged sweep's map-form programs 2 launches -> 1)
            opts["recompute_below"] = 1024
        if tuning.active(self.device):
            opts["tuner"] = _Timer(self.device, self.state)
        return schedule_program(self.program, self.state.caps, workgroup=self.state.workgroup,
                                row_lanes=self.state.row_lanes, **opts)

    def _cache_identity(self):
        return f"{super()._cache_identity()}|workgroup={self.state.workgroup}"

    def _named_source(self, kernel):
        return _named_source(kernel)

    def _compile_schedule(self, sched):
        # kernels/literal_args.py: programs that differ only in a constant share their kernels' sources, each
        # built once (the jacobians_staged sweep's 40 functions of five forms)
        sched = literals_as_args(sched)
        if self.state.caps.matmul_tiling == "register":   # a CPU device (PoCL)
            # kernels/phases.py: consecutive small launches as the phases of one launch of one work item (a PoCL
            # launch's cost is mostly its worker threads waking and taking locks: the jitted decode step's concat
            # and attention kernels 2 launches -> 1); ``kernels()`` still lists the scheduled kernels
            sched = phases.merged_schedule(sched, self.state.caps.max_buffers_per_kernel, phases.MERGE_BELOW)
        # kernels/int_args.py: kernels that differ only in int32 constants following a size (a growing cache's
        # length) share one source, those constants as arguments: built once, not once a length
        sched = sched.with_launches(map(self.state.int_args.launch, sched.launches))
        named = [self.state.named_source(launch.kernel) for launch in sched.launches]
        return Executable(self.state, sched, named)


class _Timer(tuning.LaunchTimer):
    """Times candidate kernels on one OpenCL device for ``kernels/tuning.py``: by process CPU time on a CPU
    device (PoCL runs its work in this process's threads; docs/traps.md), by wall time on a GPU."""

    math_forms = ("fnarray", "builtin")

    def __init__(self, device, state):
        super().__init__(device, state.caps.max_workgroup_size)
        self.state = state

    def source(self, kernel):
        return render_opencl(kernel)

    def prepare(self, launches, inputs, output):
        state = self.state
        exe = Executable(state, Schedule(inputs, launches, [], None), [_named_source(la.kernel) for la in launches])
        bufs = [state.upload(self.sample(s)) for s in inputs]
        cpu = not (state.cl_device.type & cl.device_type.GPU)

        def run():
            if cpu:
                return tuning.measure_process_time(lambda: exe(bufs), state.finish)
            t0 = time.perf_counter()
            exe(bufs)
            state.finish()
            return time.perf_counter() - t0
        return run


class OpenCLBackend(Backend):
    #: What the parity cases run on numpy:0 here, and why (``Backend.expected_fallbacks``, shared by the kernel
    #: backends: ``kernels/no_kernel.py``).
    expected_fallbacks = EXPECTED_FALLBACKS
    expected_decompositions = EXPECTED_DECOMPOSITIONS
    name = "opencl"
    updates_in_place = True   # donated inputs: groups/in_place.py, dispatch.py

    def __init__(self):
        self._devices = []
        self._states = {}
        errors = []
        found = []
        try:
            platforms = cl.get_platforms()
        except cl.Error as e:  # no ICD loader configuration, or no platform at all
            raise BackendUnavailable(f"opencl: no OpenCL platform ({e}) (to fix: install an OpenCL driver, e.g. "
                                     "pip install pocl-binary-distribution)") from None
        for platform in platforms:
            try:
                devs = platform.get_devices()
            except cl.Error as e:
                errors.append(f"{platform.name}: {e}")
                continue
            for d in devs:
                found.append((0 if d.type & cl.device_type.GPU else 1, len(found), platform, d))
        for _, _, platform, d in sorted(found, key=lambda t: (t[0], t[1])):
            try:
                state = _DeviceState(d)
            except Exception as e:  # noqa: BLE001 (a broken driver must not crash the caller)
                errors.append(f"{d.name.strip()}: {type(e).__name__}: {e}")
                continue
            # At exit: finish its queues, and keep context, queues, pool and programs out of the interpreter's
            # teardown (fnarray/devices/teardown.py: the segfault at exit).
            teardown.keep_until_exit(state, state.at_exit)
            i = len(self._devices)
            kind = "gpu" if d.type & cl.device_type.GPU else "cpu"
            desc = f"{platform.name.strip()} {d.name.strip()} ({d.version.strip()})"
            dev = Device("opencl", i, kind, desc, handle=d)
            self._devices.append(dev)
            self._states[dev] = state
        if not self._devices:
            why = "; ".join(errors) if errors else "no OpenCL platform or device found"
            raise BackendUnavailable(f"opencl: {why} (to fix: install an OpenCL driver, e.g. "
                                     "pip install pocl-binary-distribution)")

    def devices(self):
        return self._devices

    def state(self, device) -> _DeviceState:
        return self._states[device]

    def capabilities(self, device):
        return self._states[device].caps

    def keeps_low_bit(self, eqn, device):
        """Whether the kernels take ``eqn``'s low-bit bytes as they are (``_LOW_BIT_PRIMITIVES``); the other
        equations of ``core/low_bit_upcast.UPCAST_PRIMITIVES`` are computed in float32/int32 between conversions."""
        return eqn.primitive in _LOW_BIT_PRIMITIVES

    def lowers_natively(self, eqn, device):
        if accumulates_in_low_precision(eqn):  # the kernels accumulate in the operand dtype
            return False
        return eqn.primitive in SCHEDULED or eqn.primitive in _CONTROL or eqn.primitive in CALLS

    def supports(self, eqn, device):
        prim = eqn.primitive
        r = _UNSUPPORTED.get(prim)
        if r is not None:
            return r
        state = self._states[device]
        for a in list(eqn.inputs) + list(eqn.outputs):
            d = a.aval.dtype
            if d not in state.caps.dtypes:
                why = state.missing_reason.get(d, "OpenCL C has no such type")
                return f"{device} ({device.description}) has no {d.name}: {why}"
            if a.aval.size > _MAX_ELEMENTS:
                return f"kernels index with int32: {a.aval.str_short()} has more than 2**31 - 1 elements"
        why = _low_bit_reason(eqn)
        if why is not None:
            return why
        if prim in _CONTROL or prim in CALLS:
            return None  # driven from the host / inlined; their sub-programs are checked by the partitioner
        why = linalg.oversize_reason(eqn, state.caps)
        if why is not None:
            return why
        if prim not in SCHEDULED:
            return no_kernel_reason(prim, "opencl")
        if prim in _COMPLEX_BAD and any(dtypes.is_complex(a.aval.dtype) for a in eqn.inputs):
            return f"the opencl kernels have no complex form of {prim.name}"
        if prim == P.dot_general and any(isinstance(a, Literal) for a in eqn.inputs):
            return "dot_general of a literal operand (an array of it is needed)"
        if prim is fft_p:
            return fft_unsupported_reason(eqn)
        if prim is quantized_matmul_p:
            return quantized_unsupported_reason(eqn, state.caps)
        if prim is pallas_call_p:   # a user kernel the kernel IR cannot express runs in the interpreter
            return pallas_unsupported_reason(eqn, state.caps)
        if prim is dot_product_attention_p:
            return attention_unsupported_reason(eqn, state.caps)
        if prim in REDUCTIONS and dtypes.is_complex(eqn.inputs[0].aval.dtype) and prim not in (
                P.reduce_sum, P.reduce_prod):
            return f"{prim.name} of complex values"
        return None

    def lower(self, program, device, donate=()):
        return OpenCLLowered(program, device, self._states[device], donate)

    def eager_fast(self, primitive, params, in_avals, device):
        """Eager ``reshape`` as a view, broadcasts and transposes deferred into the elementwise operation that
        reads them (``kernels/deferred.py``); ``None`` (compiled as any program) for the other primitives."""
        return deferred.eager_fast(primitive, params, in_avals, device, self._states[device].lock)

    def to_device(self, array, device):
        return self._states[device].upload(array)

    def to_host(self, buf):
        return buf.owner.download(buf)

    def block_until_ready(self, buf):
        buf.mem   # noqa: B018 (a deferred eager value runs now: kernels/deferred.py)
        buf.owner.wait()
        return buf

    def delete(self, buf):
        # Several arrays may share one buffer (device_put to the same device, cached scalars, an output
        # that is an input): the memory goes back to the pool when the last reference goes, not here.
        pass


def make_backend():
    """The opencl backend on the devices that open (GPUs first); ``BackendUnavailable`` if none does."""
    return OpenCLBackend()

