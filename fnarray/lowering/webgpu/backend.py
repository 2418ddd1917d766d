"""The webgpu backend: WGSL kernels run through wgpu-py (Vulkan, Metal, D3D12 or OpenGL).

Device ``webgpu:0`` is the first adapter that gives a working device: the one
``WGPU_BACKEND_TYPE`` names (``Vulkan``, ``OpenGL``, ``Metal``, ``D3D12``), else
the adapter wgpu prefers (a discrete GPU first; here Mesa's lavapipe on Vulkan,
then llvmpipe on OpenGL). Its description names the adapter, its backend and driver.

Programs go through the shared kernel scheduler (``fnarray.lowering.kernels``):
the same kernels as the opencl backend, printed as WGSL by ``render_wgsl``. The
runtime here holds:

- storage buffers (``bool`` stored as ``u32``; ``float16`` only where the
  adapter has ``shader-f16``), created from NumPy arrays and read back only when
  the user reads values (``__array__``, ``.item()``, ``block_until_ready``);
- a buffer pool: a buffer whose array is gone serves the next array of its size
  (no allocation, no zero-fill), safe because one in-order queue runs all work;
- a pipeline cache keyed by WGSL source, so one compiled pipeline serves every
  program that schedules the same kernel;
- one command encoder, and in it one compute pass, that calls record into (through
  wgpu-native's C functions where wgpu-py's internals allow: ``native.py``), submitted when
  it holds enough kernels or before the host next uses the queue (``dispatch.py``): no host
  round trip between kernels (host-driven control flow adds one predicate readback per
  iteration).

Threads: wgpu-py objects are not safe to use from several threads at once, so every
use of one GPU's device and queue (allocation, upload, launch, readback, pipeline
creation) holds that GPU's lock; a buffer whose array is collected (in any thread,
inside any code) is only queued for the pool, which takes it back under the lock.
The pipeline and layout caches are LRUs of ``fnarray.config.kernel_cache_size``.

Limits are read from the device, never assumed. The device is requested with
WebGPU's default compute limits (``PORTABLE_LIMITS``: 256 invocations per
work-group...), what every browser gives, even where the native adapter allows
more; buffer sizes and the storage buffers per stage (up to
``NATIVE_STORAGE_BUFFERS``: fewer, bigger kernels) are the adapter's.
``fa.export.webgpu`` schedules within ``portable_limits()`` (8 storage buffers
per kernel), so that an exported bundle runs everywhere. The scheduler never binds more storage buffers
than ``maxStorageBuffersPerShaderStage``, a dispatch of more than
``maxComputeWorkgroupsPerDimension`` work-groups folds into a second dimension,
and an array larger than ``maxStorageBufferBindingSize`` cannot be bound: its
equations fall back to numpy (or raise ``UnsupportedOnDevice`` with
``fnarray.config.fallback = "error"``). Donated inputs are not reused (a kernel
never writes a buffer it also reads, which WebGPU forbids within one dispatch).

Only standard WebGPU is used (no ``shader-f64``/``shader-int64`` of native wgpu), so
native and browser results agree: ``float32``, ``int32``, ``uint32``, ``bool``, ``complex64`` (a
``vec2<f32>``, for the kernels that have a complex form: the element rules that expand it into real
arithmetic, sums, products, matrix products, additive scatters and ``fft``; the others fall back naming the
primitive) and, with ``shader-f16``, ``float16``. Other dtypes go through the partitioner's fallback.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import functools
import math
import os
import re
import sys
import tempfile
import threading
import time

import numpy as np

from fnarray.core import dtypes
from fnarray.core import profile as _profile
from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.decompositions import accumulates_in_low_precision
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Literal
from fnarray.devices import teardown
from fnarray.devices.backend import Backend, Capabilities, Device
from fnarray.devices.host_control import CONTROL_PRIMITIVES
from fnarray.lowering.kernels import Schedule, schedule_program, tuning
from fnarray.lowering.kernels.lowered import KernelLowered, taken_over
from fnarray.lowering.kernels.ir import BufferParam
from fnarray.lowering.kernels.schedule import CALLS, REDUCTIONS, SCHEDULED
from fnarray.lowering.kernels import deferred, facts, phases, wgsl
from fnarray.core.fft import fft_p
from fnarray.core.quantized import quantized_matmul_p
from fnarray.core.pallas import pallas_call_p
from fnarray.lowering.kernels.groups.pallas import unsupported_reason as pallas_unsupported_reason
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.windows import WINDOW_PRIMITIVES
from fnarray.lowering.kernels.groups.fft import unsupported_reason as fft_unsupported_reason
from fnarray.lowering.kernels.groups.quantized import unsupported_reason as quantized_unsupported_reason
from fnarray.lowering.kernels.groups.attention import unsupported_reason as attention_unsupported_reason
from fnarray.lowering.kernels.groups import linalg
from fnarray.lowering.kernels.no_kernel import EXPECTED_DECOMPOSITIONS, EXPECTED_FALLBACKS, no_kernel_reason
from fnarray.lowering.kernels.wgsl import DEFAULT_GROUP_SIZE, render_wgsl, uniform_bytes, wgsl_layout
from fnarray.lowering.webgpu import dispatch, driver_threads, native
from fnarray.lowering.webgpu.dispatch import Runner

__all__ = ["make_backend", "WebGPUBackend", "WGBuffer", "PORTABLE_LIMITS"]

_HINT = ("pip install wgpu (and a Vulkan, Metal, D3D12 or OpenGL driver; on Debian/Ubuntu without a GPU: "
         "apt-get install mesa-vulkan-drivers)")
_F16 = np.dtype(np.float16)
_U8 = np.dtype(np.uint8)
#: The dtypes a webgpu buffer holds: ``uint8`` and the low-bit ones as their bytes, four to a u32 word, only read.
_BASE_DTYPES = frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_, dtypes.complex64, _U8,
                          *dtypes.LOW_BIT_DTYPES})


#: The primitives whose kernels take the low-bit dtypes as their bytes (four to a u32 word, read by byte, written by
#: an atomic byte store: ``kernels/wgsl.py``): conversions (bit for bit as ml_dtypes: ``kernels/rules.py``) and data
#: movement; those of ``core/low_bit_upcast.UPCAST_PRIMITIVES`` compute between conversions to and from
#: float32/int32 (``WebGPUBackend.keeps_low_bit``).
_LOW_BIT_PRIMITIVES = frozenset({P.convert_element_type, P.reshape, P.transpose, P.broadcast_in_dim, P.slice_p,
                                 P.rev, P.concatenate, P.copy_p, P.stop_gradient, P.name_p})


def _low_bit_reason(eqn):
    """Why an equation touching a float8/int4/uint4 or uint8 array cannot run here, or ``None``: their buffers hold
    the bytes four to a u32 word, which kernels read (``astype`` out of them; ``quantized_matmul``'s mxfp4 E8M0
    scales, uint8) and write (low-bit bytes only, ``kernels/wgsl.py``'s atomic byte store)."""
    d = next((a.aval.dtype for a in list(eqn.inputs) + list(eqn.outputs)
              if dtypes.is_low_bit(a.aval.dtype) or a.aval.dtype == _U8), None)
    if d is None:
        return None
    if d == _U8 and eqn.primitive is quantized_matmul_p:
        return None   # the mxfp4 scales, read as bytes
    if d != _U8 and (eqn.primitive in CONTROL_PRIMITIVES or eqn.primitive in CALLS):
        return None   # the carries are buffers; the partitioner checks the sub-programs' equations
    if d != _U8 and eqn.primitive not in _LOW_BIT_PRIMITIVES:
        return (f"WGSL has no {d.name} type: webgpu kernels read and write its bytes, converting them (astype) and "
                "moving them; its arithmetic computes in float32/int32 between conversions "
                "(core/low_bit_upcast.py), and this operation has no such form, so it runs on numpy:0")
    if d == _U8 and eqn.primitive is not P.convert_element_type:
        return ("WGSL has no uint8 type: webgpu kernels only read its bytes, converting them (astype to a WebGPU "
                "dtype); arithmetic, slicing and every other operation on it run on numpy:0")
    out = eqn.outputs[0].aval.dtype
    if out == _U8:
        return ("WGSL has no 8-bit type: webgpu kernels write the low-bit dtypes' bytes (an atomic byte store) but "
                "no uint8, so casts into it run on numpy:0")
    return None


# Primitives whose kernels have no complex form (from the kernel facts): complex64 is vec2<f32> in WGSL.
_COMPLEX_BAD = frozenset(p for p in SCHEDULED if p not in facts.complex_ok() and p not in CALLS)
_MAX_ELEMENTS = 2**31 - 1
#: Outputs (rows, columns) per work item of the untiled matrix product on a CPU adapter (``groups/dot.py``:
#: lavapipe gathers every operand load; an 8 x 4 block loads 12 elements for 32 products). The digits MLP
#: step's CPU time on lavapipe: 14.4-15.0 ms with one output per work item, 4.8-5.0 with 4 x 4, 4.1-4.2 with
#: 8 x 4, 4.2-4.3 with 4 x 8 (load 10-12).
CPU_DOT_BLOCK = (8, 4)
#: Rows per work item of a Pallas kernel with a ``dot`` in row mode on a CPU adapter (``groups/pallas.py``,
#: ``render(row_tile=)``: lavapipe's flash attention 0.63-0.68x the time of one row; eleventh session)
CPU_PALLAS_ROW_TILE = 2
#: On a CPU adapter, a low-bit operand whose elements a product uses more than this many times (more than two of
#: its blocks of 8 rows would convert each byte; not a decode step's weights) is converted by a map kernel first,
#: not in the product's loop (``groups/dot.py``, ``converted_first``; 256x256 float8 ``@``: 48 -> 8.7 ms, load ~16).
CPU_DOT_UPCAST_REUSE = 16
#: ``(k, size)``: on a CPU adapter, a product of a contraction of ``k`` or less and an output of ``size`` elements or
#: more declines epilogues that read other arrays element by element (``groups/dot.py``, ``DotGroup.takes_root``;
#: native, not browser bundles): the VAE step's K = 32 weight gradients then store, and a map kernel applies the
#: momentum update (the step 0.85-0.88x the CPU time, interleaved, load 11-14).
CPU_DOT_STREAMED = (32, 1 << 16)
#: Bytes: on a CPU adapter, a product's operand read four elements per load whose whole buffer has at most this many
#: bytes is bound as a uniform buffer (``groups/dot.py``'s ``dot_uniform``; native, not browser bundles): lavapipe
#: (Mesa 22.3) gathers a uniform array's per-lane elements in one go and a storage array's lane by lane, in a loop
#: with a branch per lane. WebGPU's default ``maxUniformBufferBindingSize`` (64 KiB), which the device is made with.
CPU_DOT_UNIFORM = 1 << 16
#: Output positions (of the last spatial dimension) per work item of the direct convolution on a CPU adapter
#: (``groups/conv.py``: one weight load serves that many multiply-adds).
CPU_CONV_POSITIONS = 4
#: The longest row (elements) whose computed operand a work item's row kernel keeps in a private array between its
#: loops on a CPU adapter (``groups/reduce.py``, ``_ReduceKernel.cache_rows``; native, not browser bundles).
CPU_ROW_CACHE = 256
#: groups/base.py's ``map_uniform``: a map operand smaller than this (bytes) stays a storage binding, whose kernel
#: serves every size (a whole uniform array's length is part of the source: a compile per size)
CPU_MAP_UNIFORM_LEAST = 1 << 14
#: ``(outputs, rows)``: on a CPU adapter a reduction into at least ``outputs`` outputs of rows of at most ``rows``
#: elements keeps a work item per output, not a work-group cooperating through barriers (``groups/reduce.py``,
#: ``ReduceGroup.cooperative``; native, not browser bundles).
CPU_REDUCE_PER_ITEM = (16, 4096)
#: ``recompute_below`` on a CPU adapter (``kernels/__init__.py``'s ``schedule_program``): an expensive value under
#: a broadcast of fewer elements is recomputed by each of them, not given a launch of its own (a lavapipe launch
#: costs ~30-40 us of CPU: the staged jacobian sweep's map-form programs 2 launches -> 1, 280 -> 200 a sweep, as
#: on opencl)
CPU_RECOMPUTE = 1024
#: ``kernels/phases.py``'s bound on a CPU adapter: consecutive small launches whose work together stays under this
#: many statements (``phases.work_estimate``) run as the phases of one work-group of one dispatch
CPU_PHASES_BELOW = 1 << 16
#: Free buffers the pool keeps per byte size: ``_POOLED_PER_SIZE``, and more of a small size, up to
#: ``_POOLED_SMALL_BYTES`` of them and ``_POOLED_SMALL_MOST`` buffers (each wgpu-py buffer costs ~1.5 KB of host
#: memory). A new buffer costs ~90 us of the calling thread (``create_buffer``) and more in lavapipe's threads:
#: a staged jacobian sweep holds 120 results of 256 bytes, and with 64 kept its every pass made 56 buffers
#: (8.7 -> 5.9 ms of CPU a sweep with them pooled, load 5).
_POOLED_PER_SIZE = 64
_POOLED_SMALL_BYTES = 1 << 20
_POOLED_SMALL_MOST = 1024


def _pooled_per_size(size: int) -> int:
    """How many free buffers of ``size`` bytes the pool keeps."""
    return max(_POOLED_PER_SIZE, min(_POOLED_SMALL_MOST, _POOLED_SMALL_BYTES // max(size, 1)))


#: The compute limits WebGPU gives by default on every adapter (browsers included); the device asks
#: for these, not for what a native adapter could give, so that kernels are portable.
PORTABLE_LIMITS = {
    "max-storage-buffers-per-shader-stage": 8,
    "max-uniform-buffers-per-shader-stage": 12,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroup-size-x": 256,
    "max-compute-workgroup-size-y": 256,
    "max-compute-workgroup-size-z": 64,
    "max-compute-workgroup-storage-size": 16384,
    "max-compute-workgroups-per-dimension": 65535,
    "max-bind-groups": 4,
}
#: Storage buffers per kernel asked of a native adapter, up to what it offers (lavapipe: 32), where
#: ``PORTABLE_LIMITS`` would give 8: more buffers per kernel let the scheduler fuse more, and on lavapipe each
#: launch costs ~0.1-0.7 ms of waiting (the digits MLP step of ``benchmarks/digits_step.py``: 22 kernels at 8,
#: 14 at 32, 0.80x the CPU time; tenth session). ``fa.export.webgpu`` schedules under ``portable_limits()``
#: (8), so bundles run everywhere.
NATIVE_STORAGE_BUFFERS = 32
#: Uniform buffers per stage asked of a native adapter, up to what it offers (lavapipe: 15), where
#: ``PORTABLE_LIMITS`` gives 12: a map's 64 KiB windows (``groups/base.py``'s ``map_uniform``) take several a
#: launch where their uniform bindings fit (the VAE step's momentum update, 6 bindings a window: 1 window a launch
#: at 12, 2 at 15). The products' windows stay within the portable 12 (``_uniform_windows``).
NATIVE_UNIFORM_BUFFERS = 15
_PORTABLE = contextvars.ContextVar("fnarray_webgpu_portable", default=False)


@contextlib.contextmanager
def portable_limits():
    """Within the block, the webgpu backend's ``capabilities`` are WebGPU's default limits (``PORTABLE_LIMITS``:
    8 storage buffers per kernel) whatever the native device was opened with: ``fa.export.webgpu`` schedules a
    browser bundle's kernels under it. Per thread and per context (a ``contextvars`` variable)."""
    token = _PORTABLE.set(True)
    try:
        yield
    finally:
        _PORTABLE.reset(token)


def _tuning_facts(gpu) -> tuple:
    """``Capabilities.tuning_facts`` of a webgpu adapter: its kind (``"cpu"`` for a CPU adapter, lavapipe) and,
    where the adapter's name says it (lavapipe: ``"llvmpipe (LLVM 15.0.6, 256 bits)"``), the width of the
    vectors its compiler runs the work items in (``simd_bits``) and the major version of that LLVM."""
    facts = [("device", "cpu" if gpu.adapter_type.lower() == "cpu" else "gpu")]
    name = str(gpu.info.get("device", ""))
    bits = re.search(r"(\d+) bits", name)
    if bits:
        facts.append(("simd_bits", int(bits.group(1))))
    llvm = re.search(r"LLVM (\d+)", name)
    if llvm:
        facts.append(("llvm", int(llvm.group(1))))
    return tuple(facts)


def _subgroup_lanes(gpu, caps) -> int:
    """The subgroup size of a CPU adapter whose device has subgroups (lavapipe runs a subgroup as one vector of
    ``simd_bits / 32`` work items: the adapter's name says the width), or 0 where unknown or absent."""
    bits = dict(caps.tuning_facts).get("simd_bits")
    if not getattr(gpu, "has_subgroups", False) or not bits or bits % 32:
        return 0
    gpu.device   # opened now: a device that refused the feature clears has_subgroups (_GPU._request_device)
    return bits // 32 if gpu.has_subgroups else 0


def _uniform_windows(gpu, native=False) -> tuple:
    """``(bindings, alignment)`` of the scheduler option ``dot_uniform_windows`` (``groups/dot.py``: a product's
    large operand bound as several uniform windows): the device's uniform buffers per shader stage (within
    ``PORTABLE_LIMITS``' 12 unless ``native``) less the one of the kernel's scalars, and its
    ``minUniformBufferOffsetAlignment`` (bytes)."""
    lim = gpu.device.limits
    key = "max-uniform-buffers-per-shader-stage"
    bindings = lim.get(key, 12) if native else min(lim.get(key, 12), PORTABLE_LIMITS[key])
    return (max(0, bindings - 1),
            max(16, lim.get("min-uniform-buffer-offset-alignment", 256)))


def _map_options(gpu) -> dict:
    """The scheduler options of map kernels on a CPU adapter (native, not browser bundles): ``map_vec4``
    (``groups/base.py``: a work item's four flat elements read from each float32 operand at its own element as one
    vec4 and stored as one) and ``map_uniform`` (there, each such operand of 16-64 KiB read through a uniform
    binding, whose lanes lavapipe gathers at once: 16K-element momentum updates 0.40x the vec4 storage time; a
    larger map launched in 64 KiB windows of its operands, the VAE's update 0.12x its CPU time, as many full
    windows a launch as the device's uniform buffers hold: ``NATIVE_UNIFORM_BUFFERS``)."""
    return {"map_vec4": True, "map_uniform": (_uniform_windows(gpu, native=True)[0], CPU_DOT_UNIFORM,
                                              CPU_MAP_UNIFORM_LEAST)}


def _import_wgpu():
    if not os.environ.get("XDG_RUNTIME_DIR") and sys.platform.startswith("linux"):
        # Mesa's drivers print "XDG_RUNTIME_DIR is invalid or not set" on every start of a headless
        # process; a private runtime folder (mode 0700, as the spec asks) keeps that noise away.
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="fnarray-xdg-")
    try:
        import wgpu
    except ImportError as e:
        raise BackendUnavailable(f"the webgpu backend needs wgpu-py: not installed (to fix: {_HINT})") from e
    return wgpu


# ------------------------------------------------------------------------------------------- buffers


_WINDOW_REDUCTIONS = frozenset(WINDOW_PRIMITIVES)   # one work item walks every tap of its window


def _loop_cap(info) -> int | None:
    """The loop iterations one invocation may run: Mesa's llvmpipe-based drivers (lavapipe) stop an
    invocation's loops after 65,535 iterations in all, without an error (measured: a 70,000-element
    ``cumsum`` came back with zeros from element 65,536 on)."""
    text = " ".join(str(info.get(k, "")) for k in ("device", "description", "vendor", "architecture")).lower()
    return 65535 if "llvmpipe" in text or "lavapipe" in text else None


class WGBuffer:
    """A device array: a wgpu storage buffer holding ``size`` elements of ``dtype`` (row-major ``shape``).

    ``bool`` elements are stored as ``u32``. The wgpu buffer is at least 4 bytes and a multiple
    of 4 (WebGPU's binding rules), so a zero-size or odd-size array still binds. ``shared``: a view or a deferred
    eager value reads it too (``kernels/deferred.py``), so an in-place update must not take it over.
    """

    __slots__ = ("buffer", "dtype", "shape", "gpu", "shared", "__weakref__")

    def __init__(self, buffer, dtype, shape, gpu):
        self.buffer, self.dtype, self.shape, self.gpu = buffer, np.dtype(dtype), tuple(shape), gpu
        self.shared = False

    def take_over(self) -> WGBuffer:
        """A ``WGBuffer`` that owns this memory from now on: an in-place update's output
        (``dispatch.Runner._outputs``); this one (and every array holding it) holds none."""
        b = WGBuffer(self.buffer, self.dtype, self.shape, self.gpu)
        self.buffer = None
        return b

    def __del__(self):
        # The wgpu buffer goes back to its GPU's pool: the next array of that size reuses it without a new
        # allocation (and without the zero-fill WebGPU gives a fresh buffer). One in-order queue makes this
        # safe: work already submitted on the buffer runs before any later use.
        b = self.buffer
        if b is not None:
            try:
                self.gpu.release(b)
            except Exception:  # noqa: BLE001 (interpreter shutdown: the device may be gone)
                pass

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * storage_itemsize(self.dtype)

    def __repr__(self):
        return f"WGBuffer({self.dtype.name}{list(self.shape)})"


def storage_itemsize(dtype) -> int:
    """Bytes per element in a WGSL buffer (``bool`` is a ``u32``)."""
    d = np.dtype(dtype)
    return 4 if d == np.bool_ else d.itemsize


def _padded(nbytes: int) -> int:
    return max(4, (nbytes + 3) // 4 * 4)


# ------------------------------------------------------------------------------------------- the GPU


def _kernel_cache_size() -> int:
    return config.kernel_cache_size


def _locked(method):
    """Run ``method`` holding its GPU's lock (wgpu-py objects are not thread-safe)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)
    return run


class _GPU:
    """One wgpu adapter, its device and queue, the buffer pool and the pipeline cache."""

    def __init__(self, wgpu, adapter):
        self.wgpu = wgpu
        self.adapter = adapter
        info = adapter.info
        self.info = info
        self.backend_type = str(info.get("backend_type", "?"))
        self.adapter_type = str(info.get("adapter_type", "?"))
        self.has_f16 = "shader-f16" in adapter.features
        # subgroup operations (WGSL subgroupBroadcast): the products' subgroup form on a CPU adapter
        self.has_subgroups = "subgroup" in adapter.features
        self._device = None
        self.limits = dict(adapter.limits)
        self.lock = threading.RLock()   # held for every use of the wgpu device and queue
        self.pipelines = LRUCache(_kernel_cache_size)   # WGSL source -> (pipeline, bind-group layout)
        self.layouts = LRUCache(_kernel_cache_size)     # (written flags, uniform) -> bind-group layout
        self.pool: dict = {}            # padded byte size -> free wgpu buffers
        self._pool_caps: dict = {}      # padded byte size -> how many of them the pool keeps (_pooled_per_size)
        self.pool_bytes = 0
        self.pool_limit = 256 << 20
        self.held_bytes = 0             # buffer bytes the plans' runners keep between calls (dispatch.py)
        self.pending = False            # work queued since the last wait (a readback waits for all of it)
        self._recording = None          # the command encoder small calls record into (dispatch.py), or None
        self._pass = None               # its open compute pass, which consecutive calls share, or None
        self.pass_pipeline = None       # the pipeline last set in that pass (dispatch.Runner skips setting it again)
        self.calls = None               # how calls record (native.Native or native.Public), made with the device
        self.open_launches = 0          # kernels recorded into it
        self.open_wide = False          # one of them has more than one work-group (dispatch.Runner.wide)
        self.wide_queued = False        # such a kernel was submitted since the last wait
        self.driver_threads = None      # lavapipe's threads, kept on one CPU for narrow work (driver_threads.py)
        self.submits = 0                # command buffers submitted (tests count them)
        self._returned = collections.deque()  # buffers given back by finalizers, pooled at the next alloc
        self._dirty: set = set()        # ids of buffers pooled while the encoder was open (its work may use them)
        self.usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        if self.adapter_type.lower() == "cpu":   # groups/dot.py's dot_uniform binds small operands as uniforms
            self.usage |= wgpu.BufferUsage.UNIFORM

    def describe(self) -> str:
        i = self.info
        driver = i.get("description") or ""
        return (f"{i.get('device', '?')} via {self.backend_type} ({self.adapter_type.lower()})"
                + (f", {driver}" if driver else "") + (", shader-f16" if self.has_f16 else ""))

    @property
    def device(self):
        d = self._device
        if d is None:
            d = self._open()
        return d

    @_locked
    def _open(self):
        if self._device is not None:  # opened by another thread meanwhile
            return self._device
        lim = self.adapter.limits
        # The compute limits every WebGPU implementation (a browser included) gives by default: the device
        # is made with those, except the storage and uniform buffers per stage (the adapter's, up to
        # NATIVE_STORAGE_BUFFERS and NATIVE_UNIFORM_BUFFERS; exports schedule within PORTABLE_LIMITS' 8 storage
        # buffers, and no map windows). Buffer sizes are the adapter's.
        want = {k: min(v, lim[k]) for k, v in PORTABLE_LIMITS.items() if k in lim}
        for key, most in (("max-storage-buffers-per-shader-stage", NATIVE_STORAGE_BUFFERS),
                          ("max-uniform-buffers-per-shader-stage", NATIVE_UNIFORM_BUFFERS)):
            if key in lim:
                want[key] = max(want[key], min(most, lim[key]))
        want.update({k: lim[k] for k in ("max-storage-buffer-binding-size", "max-buffer-size") if k in lim})
        feats = ["shader-f16"] if self.has_f16 else []
        if self.has_subgroups:
            feats.append("subgroup")
        # Timestamp queries only serve the profiler (kernel device times); asked for where offered.
        self.has_timestamps = "timestamp-query" in self.adapter.features
        if self.has_timestamps:
            feats.append("timestamp-query")
        keep_threads = driver_threads.enabled() and driver_threads.applies(self.info)
        before = driver_threads.task_ids() if keep_threads else None
        try:
            dev = self._request_device(feats, want)
        except Exception as e:  # noqa: BLE001 (a broken driver may raise anything)
            raise BackendUnavailable(f"webgpu adapter {self.describe()} gave no device: {type(e).__name__}: {e} "
                                     f"(to fix: {_HINT}, or pick another adapter with WGPU_BACKEND_TYPE)") from e
        self._device = dev
        self.queue = dev.queue
        if keep_threads:
            self.driver_threads = driver_threads.opened_since(before)
        self.calls = native.make(dev)
        self.limits = dict(dev.limits)
        # At exit: wait for the queued work, and keep the device, queue and pool out of the interpreter's
        # teardown (fnarray/devices/teardown.py).
        self._exit_probe = dev.create_buffer(size=4, usage=self.usage)
        teardown.keep_until_exit(self, self._finish)
        return dev

    def _request_device(self, feats, want):
        """The wgpu device with ``feats`` and limits ``want``; where asking for subgroups fails, the device
        without them (``has_subgroups`` then false: the products keep their blocked form)."""
        try:
            return self.adapter.request_device_sync(required_features=feats, required_limits=want)
        except Exception:  # noqa: BLE001 (a broken driver may raise anything)
            if "subgroup" not in feats:
                raise
        self.has_subgroups = False
        return self.adapter.request_device_sync(required_features=[f for f in feats if f != "subgroup"],
                                                required_limits=want)

    def _finish(self):
        """Block until every queued command has run (a 4-byte readback after them: see docs/traps.md)."""
        with self.lock:
            self.flush()
            self.queue.read_buffer(self._exit_probe, 0, 4)
            self.waited()

    # ------------------------------------------------------------------ the open command encoder
    def encoder(self):
        """The open command encoder, its compute pass ended (lock held): donated inputs' copies record into it,
        calls into its compute pass (``compute_pass``), ``flush`` submits it. Every other use of the queue
        (``read_buffer``, a submit of its own, an upload into a buffer that recorded work may use) flushes first,
        so the queue still runs the work in the order the calls were made (dispatch.py's module docstring)."""
        if self._pass is not None:
            self._end_pass()
        enc = self._recording
        if enc is None:
            enc = self._recording = self.device.create_command_encoder()
        return enc

    def compute_pass(self):
        """The open command encoder's compute pass, which consecutive calls record their kernels into (lock held):
        begun where none is open (its pipeline ``pass_pipeline`` then unset)."""
        cp = self._pass
        if cp is None:
            cp = self._pass = self.encoder().begin_compute_pass()
            self.pass_pipeline = None
        return cp

    def _end_pass(self):
        cp, self._pass, self.pass_pipeline = self._pass, None, None
        cp.end()

    def submit(self, enc):
        """Submit ``enc`` after the open encoder's work (lock held)."""
        self.flush()
        if self.driver_threads is not None:
            self._place(True)
        self.queue.submit([enc.finish()])
        self.submits += 1
        self.pending = True

    @_locked
    def flush(self):
        """Submit the open command encoder, if any."""
        enc = self._recording
        if enc is not None:
            if self._pass is not None:
                self._end_pass()
            if self.driver_threads is not None:
                self._place(self.open_wide)
            self._recording, self.open_launches, self.open_wide = None, 0, False
            self.queue.submit([enc.finish()])
            self.submits += 1
            self.pending = True
            self._dirty.clear()   # what the submitted work uses, it uses before any later write

    def _place(self, wide):
        """Before a submit (lock held): lavapipe's threads gathered on one CPU while every kernel submitted since
        the last wait runs as one work-group, given back their own CPU masks before a wider one
        (``driver_threads.py``: each dispatch's hand-off then stays on one CPU; big kernels keep every worker)."""
        if wide:
            self.driver_threads.release()
            self.wide_queued = True
        elif not self.wide_queued:
            self.driver_threads.gather()

    def waited(self):
        """Record that every queued command has run (lock held): after a readback or a device wait."""
        self.pending = self.wide_queued = False

    # ------------------------------------------------------------------ buffers
    @_locked
    def alloc(self, dtype, shape) -> WGBuffer:
        n = math.prod(shape) * storage_itemsize(dtype)
        self.check_size(n, dtype, shape)
        return WGBuffer(self._pooled(_padded(n)), dtype, shape, self)

    def alloc_fresh(self, fresh, vals, made):
        """A runner's per-call outputs (lock held): for each ``(slot, size, dtype, shape)`` of ``fresh`` (padded
        bytes checked when the runner was made, a NumPy dtype, a tuple) a ``WGBuffer`` from the pool into
        ``made[slot]``, its wgpu buffer into ``vals[slot]``. One pass over the returned buffers for them all, and no
        dtype or shape normalised again: a decode step's two outputs cost ~1 us less of the calling thread."""
        self._take_returned()
        pool, new = self.pool, WGBuffer.__new__
        for k, size, dtype, shape in fresh:
            free, b = pool.get(size), None
            while free:
                self.pool_bytes -= size
                b = free.pop()
                if _alive(b):
                    break
                b = None
            if b is None:
                b = self.device.create_buffer(size=size, usage=self.usage)
            w = made[k] = new(WGBuffer)
            w.buffer, w.dtype, w.shape, w.gpu, w.shared = b, dtype, shape, self, False
            vals[k] = b

    def _pooled(self, size):
        """A wgpu buffer of ``size`` bytes: a free one from the pool, else a new one (lock held)."""
        self._take_returned()
        free = self.pool.get(size)
        while free:
            self.pool_bytes -= size
            b = free.pop()
            if _alive(b):
                return b
        return self.device.create_buffer(size=size, usage=self.usage)

    def _upload_target(self, size):
        """A buffer of ``size`` bytes for an upload, which no work recorded in the open encoder uses (lock held):
        ``write_buffer`` runs before the next submit's work, so it may run ahead of that work. A pooled one not
        given back while the encoder was open; where the pool has only such ones, a new buffer (up to
        ``dispatch.NEW_UPLOAD_BYTES``), or the encoder is submitted first (then every pooled buffer will do)."""
        self._take_returned()
        free = self.pool.get(size)
        dirty = self._dirty
        if free and dirty:
            for j in range(len(free) - 1, -1, -1):
                b = free[j]
                if id(b) not in dirty and _alive(b):
                    del free[j]
                    self.pool_bytes -= size
                    return b
            if size <= dispatch.NEW_UPLOAD_BYTES:
                return self.device.create_buffer(size=size, usage=self.usage)
            self.flush()
        return self._pooled(size)

    def release(self, buffer):
        """Give ``buffer`` back for reuse by ``alloc``; pooled at the next allocation.

        Called from finalizers, at any point of any thread: only an atomic append here, no lock.
        """
        self._returned.append(buffer)

    def _take_returned(self):
        """Pool the returned buffers: up to ``pool_limit`` bytes and ``_pooled_per_size`` of each size (lock held).
        A decode step returns two buffers and takes two (``alloc_fresh``): the per-size bound is looked up, not
        computed, per buffer."""
        returned = self._returned
        if not returned:
            return
        pool, caps = self.pool, self._pool_caps
        dirty = self._dirty if self._recording is not None else None   # work recorded before may still use it
        while returned:
            try:
                buffer = returned.popleft()
            except IndexError:
                break
            size = buffer.size
            # A buffer finalized in the same garbage-collection cycle as its WGBuffer may already be
            # released by wgpu-py; pooling it would hand a dead buffer to a later bind group (a wgpu panic).
            # Buffers beyond the bounds are let go (wgpu-py frees them with the last reference).
            free = pool.get(size)
            if free is None:
                free = pool[size] = []
                caps[size] = _pooled_per_size(size)
            if _alive(buffer) and self.pool_bytes + size <= self.pool_limit and len(free) < caps[size]:
                free.append(buffer)
                self.pool_bytes += size
                if dirty is not None:
                    dirty.add(id(buffer))

    def check_size(self, nbytes, dtype, shape):
        """Raise ``ValueError`` where an array of ``dtype``/``shape`` (``nbytes``) exceeds the device's maxBufferSize."""
        cap = self.limits.get("max-buffer-size")
        if cap is not None and nbytes > cap:
            raise ValueError(f"an array of {np.dtype(dtype).name}{list(shape)} ({nbytes} bytes) exceeds this "
                             f"webgpu device's maxBufferSize ({cap} bytes); keep it on another device "
                             "(fnarray.device_put(x, 'numpy')) or split it")

    @_locked
    def upload(self, array: np.ndarray) -> WGBuffer:
        a = np.asarray(array)
        if not a.dtype.isnative:  # the buffer's dtype is its aval's, native ('>i2' was kept and read back so)
            a = a.astype(a.dtype.newbyteorder("="))
        d = a.dtype
        if d == np.bool_:
            data = a.astype(np.uint32)
        else:
            data = np.ascontiguousarray(a)
        raw = data.tobytes()
        self.check_size(len(raw), d, a.shape)
        pad = _padded(len(raw)) - len(raw)
        if pad:
            raw += b"\0" * pad
        # A pooled buffer written through the queue: queue order runs the write after the work already
        # submitted on that buffer. A new buffer per upload (create_buffer_with_data) grew the pool by one
        # wgpu-py buffer object per call, since uploads never drew from it (issue 12).
        buf = self._upload_target(len(raw))
        self.queue.write_buffer(buf, 0, raw)
        self.pending = True
        return WGBuffer(buf, d, a.shape, self)

    @_locked
    def download(self, b: WGBuffer) -> np.ndarray:
        n = b.nbytes
        if b.buffer is None:   # dispatch.py: a donated buffer an in-place update took over
            raise taken_over(b)
        if n == 0:
            return np.zeros(b.shape, b.dtype)
        self.flush()
        raw = self.queue.read_buffer(b.buffer, 0, _padded(n))
        self.waited()  # the readback ran after everything queued before it
        if b.dtype == np.bool_:
            return np.frombuffer(raw, np.uint32, b.size).astype(np.bool_).reshape(b.shape)
        return np.frombuffer(raw, b.dtype, b.size).reshape(b.shape)

    @_locked
    def wait(self, b: WGBuffer):
        """Block until the queued work that writes ``b`` is done.

        wgpu-native's blocking device poll (``wgpuDevicePoll`` with ``wait``: every submission done) where wgpu-py
        has it: on lavapipe a wait then costs 110-150 us of CPU time, against 400-550 us for a 4-byte readback
        (``queue.read_buffer``: a staging buffer, a submit and a map handed to wgpu-py's polling thread), used
        where it has not (docs/traps.md: ``on_submitted_work_done_sync`` is broken in wgpu-py 0.32).
        Nothing to do when no work was queued since the last wait (which waited for all of it): waiting for
        20 results of one call waits once."""
        if self.pending:
            self.flush()
            poll = getattr(self.device, "_poll_wait", None)
            if poll is not None:
                poll()
            else:
                self.queue.read_buffer(b.buffer, 0, 4)
            self.waited()

    # ------------------------------------------------------------------ pipelines
    @_locked
    def bind_group_layout(self, rw: tuple, uniform: bool):
        """The layout of buffers (``rw[k]``: ``True`` written, ``False`` read, ``"uniform"`` an array read through
        a uniform binding, ``BufferParam.uniform``) then, if ``uniform``, one uniform buffer of scalars."""
        key = (rw, uniform)
        bgl = self.layouts.get(key)
        if bgl is None:
            wgpu = self.wgpu
            kinds = {True: "storage", False: "read-only-storage", "uniform": "uniform"}
            entries = [{"binding": k, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kinds[w]}}
                       for k, w in enumerate(rw)]
            if uniform:
                entries.append({"binding": len(rw), "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": "uniform"}})
            bgl = self.layouts.put(key, self.device.create_bind_group_layout(entries=entries))
        return bgl

    @_locked
    def pipeline(self, source: str, entry: str, rw: tuple, uniform: bool):
        """The compute pipeline of WGSL ``source`` and its bind-group layout (cached by source text)."""
        hit = self.pipelines.get(source)
        if hit is None:
            with _profile.span("compile", f"WGSL pipeline {entry}"):
                hit = self._new_pipeline(source, entry, rw, uniform)
            hit = self.pipelines.put(source, hit)
        return hit

    def _new_pipeline(self, source, entry, rw, uniform):
        dev = self.device
        bgl = self.bind_group_layout(rw, uniform)
        try:
            module = dev.create_shader_module(code=source)
            layout = dev.create_pipeline_layout(bind_group_layouts=[bgl])
            pipe = dev.create_compute_pipeline(layout=layout, compute={"module": module, "entry_point": entry})
        except Exception as e:  # noqa: BLE001 (wgpu reports validation errors with several classes)
            raise RuntimeError(f"the WGSL compiler rejected fnarray's generated kernel {entry} (a bug in "
                               f"fnarray; please report it): {e}\n--- source ---\n{source}") from None
        return (pipe, bgl)

    @_locked
    def dispatch_timed(self, step, buffers, bg):
        """Run one launch (its bind group ``bg`` over ``buffers``) alone and wait for it; its device time in
        microseconds from timestamp queries, or ``None`` where the device has none (the profiler's path; never on
        the call path)."""
        wgpu, dev = self.wgpu, self.device
        enc = dev.create_command_encoder()
        qs = None
        if self.has_timestamps:
            qs = dev.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            cp = enc.begin_compute_pass(timestamp_writes={
                "query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
        else:
            cp = enc.begin_compute_pass()
        cp.set_pipeline(step.pipeline)
        cp.set_bind_group(0, bg)
        cp.dispatch_workgroups(*step.groups)
        cp.end()
        if qs is not None:
            out = dev.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
            enc.resolve_query_set(qs, 0, 2, out, 0)
        self.submit(enc)
        if qs is None:
            if buffers:
                self.queue.read_buffer(buffers[0], 0, 4)  # waits for the launch (docs/traps.md: no work-done wait)
                self.waited()
            return None
        t0, t1 = np.frombuffer(self.queue.read_buffer(out, 0, 16), np.uint64)
        self.waited()
        return float(t1 - t0) / 1e3 if t1 >= t0 else None

    @_locked
    def uniform(self, raw: bytes):
        usage = self.wgpu.BufferUsage.UNIFORM | self.wgpu.BufferUsage.COPY_DST
        raw = raw + b"\0" * (-len(raw) % 16)
        return self.device.create_buffer_with_data(data=raw, usage=usage)

    @_locked
    def bind_group(self, bgl, buffers, uniform, windows=None):
        """A bind group of ``buffers`` (then ``uniform``, or ``None``); ``windows[k]``: ``(offset, size)`` in bytes
        where binding ``k`` is a window of its buffer (``_Step.windows``), else ``None``."""
        entries = [{"binding": k, "resource": {"buffer": b} | native.window_entry(windows, k)}
                   for k, b in enumerate(buffers)]
        if uniform is not None:
            entries.append({"binding": len(buffers), "resource": {"buffer": uniform}})
        return self.device.create_bind_group(layout=bgl, entries=entries)


def _alive(buffer) -> bool:
    """Whether wgpu-py still holds the native buffer behind ``buffer``."""
    return getattr(buffer, "_internal", True) is not None


def _adapters(wgpu):
    """Adapters to try, best first: the one wgpu prefers (``WGPU_BACKEND_TYPE`` if set), then the others."""
    try:
        a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception:  # noqa: BLE001 (no adapter or a broken driver: try the list)
        a = None
    if a is not None:
        yield a
    try:
        others = wgpu.gpu.enumerate_adapters_sync()
    except Exception as e:  # noqa: BLE001
        raise BackendUnavailable(f"wgpu could not list adapters: {type(e).__name__}: {e} (to fix: {_HINT})") from e
    seen = {_adapter_key(a)} if a is not None else set()
    for b in others:
        if _adapter_key(b) not in seen:
            seen.add(_adapter_key(b))
            yield b


def _adapter_key(a):
    i = a.info
    return (i.get("device"), i.get("backend_type"), i.get("vendor_id"), i.get("device_id"))


# ------------------------------------------------------------------------------------------- backend


class _Step:
    """One kernel launch of a plan: pipeline, what it binds (value slots), uniform, work-groups. A call makes the
    bind groups of the launches that bind its own buffers (``dispatch.Runner``, ``native.py``)."""

    __slots__ = ("source", "entry", "pipeline", "bgl", "slots", "writes", "uniform", "groups", "launch", "windows")

    def __init__(self, source, entry, pipeline, bgl, slots, writes, uniform, groups, launch):
        self.source, self.entry, self.pipeline, self.bgl = source, entry, pipeline, bgl
        self.slots, self.writes, self.uniform, self.groups, self.launch = slots, writes, uniform, groups, launch
        # (byte offset, size) of each binding that is a window of its buffer (BufferParam.offset), else None
        params = [p for p in launch.kernel.params if isinstance(p, BufferParam)]
        windows = tuple((p.offset, p.uniform * np.dtype(p.dtype).itemsize) if p.uniform and p.offset >= 0 else None
                        for p in params)
        self.windows = windows if any(windows) else None


class _Plan:
    """A schedule bound to one GPU: value slots (inputs first, then buffers made per call) and steps."""

    def __init__(self, gpu: _GPU, sched):
        self.gpu = gpu
        self.schedule = sched
        slot_of: dict = {}
        for i, spec in enumerate(sched.inputs):
            slot_of.setdefault(spec, i)
        self.n_inputs = len(sched.inputs)
        allocs = []

        def slot(spec):
            k = slot_of.get(spec)
            if k is None:
                k = self.n_inputs + len(allocs)
                slot_of[spec] = k
                allocs.append(spec)
            return k

        self.steps = []
        rendered: dict = {}   # equal kernels (a product's row windows; copies built apart): one render, keyed by IR
        for launch in sched.launches:
            kernel = launch.kernel
            if kernel.local_size is None:
                kernel = dataclasses.replace(kernel, local_size=tuple(launch.local_size))
            same = (kernel.body, kernel.name, kernel.local_size, kernel.math,
                    tuple(dataclasses.replace(p, offset=-1) if isinstance(p, BufferParam) else p for p in kernel.params))
            if same not in rendered:
                rendered[same] = (wgsl_layout(kernel), render_wgsl(kernel))
            layout, source = rendered[same]
            slots, rw, scalars = [], [], {}
            for p, a in zip(kernel.params, launch.args, strict=True):
                if isinstance(p, BufferParam):
                    slots.append(slot(a))
                    rw.append("uniform" if p.uniform else bool(p.writes))
                else:
                    scalars[p.name] = a
            gs = tuple(launch.global_size) + (1,) * (3 - len(launch.global_size))
            ls = layout.group_size
            if any(g % l for g, l in zip(gs, ls, strict=True)):
                raise ValueError(f"kernel {kernel.name}: global size {gs} is not a multiple of the work-group "
                                 f"size {ls}")
            groups = tuple(g // l for g, l in zip(gs, ls, strict=True))
            lim = gpu.limits.get("max-compute-workgroups-per-dimension", 65535)
            if max(groups) > lim:
                raise ValueError(f"kernel {kernel.name} needs {groups} work-groups; this adapter allows {lim} "
                                 "per dimension (the scheduler folds larger launches: was max_dispatch set?)")
            if min(groups) == 0:
                continue
            pipe, bgl = gpu.pipeline(source, kernel.name, tuple(rw), layout.uniform_binding is not None)
            uni = gpu.uniform(uniform_bytes(layout, scalars)) if layout.uniform_fields else None
            self.steps.append(_Step(source, kernel.name, pipe, bgl, tuple(slots), tuple(rw), uni, groups, launch))
        self.outputs = []
        for o in sched.outputs:
            if isinstance(o, Literal):
                self.outputs.append(gpu.upload(np.asarray(o.val, o.aval.dtype)))
            else:
                self.outputs.append(slot(o))
        self.n_slots = self.n_inputs + len(allocs)
        self.allocs = [(self.n_inputs + i, spec) for i, spec in enumerate(allocs)]

    def executable(self):
        """The callable ``bufs -> outputs`` that runs this plan (``dispatch.Runner``: buffers and bind
        groups made once, calls recorded into the GPU's open command encoder)."""
        return Runner(self)


class WebGPULowered(KernelLowered):
    """A program scheduled into WGSL kernels for one webgpu device."""

    def __init__(self, program, device, backend, donate=()):
        super().__init__(program, device, donate)
        self.backend = backend

    def _schedule_now(self):
        caps = self.backend.capabilities(self.device)
        opts = self._donate_options()
        if not caps.tiling_pays:   # a CPU adapter (lavapipe)
            opts.update(dot_block=CPU_DOT_BLOCK, dot_upcast_reuse=CPU_DOT_UPCAST_REUSE, recompute_below=CPU_RECOMPUTE)
            opts["dot_vec4"] = True          # groups/dot.py: operands read four elements per load where aligned
            # the product's sizes and strides as constants, not uniforms: lavapipe then folds the address
            # arithmetic (the transformer step 248 -> 217-221 CPU ms, the MLP's 4.0 -> 3.5-3.8, load 9-12)
            opts["bake_dot"] = True
            opts["scatter_columns"] = True   # groups/scatter.py: a work item per column where it is less work
            opts["conv_positions"] = CPU_CONV_POSITIONS
            # kernels/schedule.py: a costly inlined value read by several equations gets a buffer (the
            # transformer's residual stream was recomputed, gather included, in every layernorm pass; the VAE
            # grid's random bits in each of 100 slices): transformer step 198-206 -> 179-187 CPU ms, VAE grid
            # 121-123 -> 98-100 (load 7-9)
            opts["share_values"] = True
            opts["concat_branches"] = True   # kernels/emitter.py: one piece evaluated per element, not all
            if not _PORTABLE.get():
                # groups/pallas.py: two rows per work item in row mode (not in browser bundles: Chromium's
                # SwiftShader took minutes to compile the flash-attention example's kernel in that form)
                opts["pallas_row_tile"] = CPU_PALLAS_ROW_TILE
                # groups/pallas.py: a dot operand computed elementwise from a load (flash attention's q * scale)
                # read as vec4 lanes (lavapipe, interleaved, load 10: the flash example 0.96-0.97x the time)
                opts["pallas_lane_maps"] = True
                # groups/reduce.py: a work item's loops over float32 rows of a multiple of 4 read them, and store
                # its row values, four elements per load and store (lavapipe, interleaved, load 3-4: softmax
                # [1024, 256] 1.8x, layernorm 1.7x; the transformer step 173-174 -> 156-157 CPU ms)
                opts.update(row_vec4=True, **_map_options(self.backend.gpu))   # and map kernels' vectors
                # groups/reduce.py: a row's computed operand (a gathered embedding, a masked score row) in a private
                # array between its loops; what a row's loop reads at one place for the row (a token id) loaded before
                opts["row_cache"], opts["row_hoist"] = CPU_ROW_CACHE, True
                # groups/reduce.py: many outputs of rows of a few thousand elements: a work item per output
                # (lavapipe switches a work-group's coroutines at every barrier of the combining tree)
                opts["reduce_per_item"] = CPU_REDUCE_PER_ITEM
                # groups/dot.py: the blocked and subgroup products store four adjacent float32 columns as one
                # vec4 (lavapipe stores each lane's element in a loop); the epilogue's values are unchanged
                opts["dot_store4"] = True
                # groups/dot.py: a large product of a contraction of 32 or less takes no epilogue that reads
                # another array element by element (lavapipe's loads and stores after the accumulators cost ~2x a map
                # kernel's): the VAE step's weight gradients store, a map kernel applies the momentum update
                opts["dot_streamed"] = CPU_DOT_STREAMED
                # groups/dot.py: a product reads an operand whose batch dimensions do not collapse to one stride
                # (attention's per-head views) where it lies, with no dot_operand_copy kernel first
                opts["dot_batch_views"] = True
                # groups/dot.py: a product's operand of at most 64 KiB (a weight of the transformer, the VAE's
                # activations) read through a uniform binding (lavapipe gathers those per lane in one go); a larger
                # one read four rows or columns a load (a weight gradient's x.T) through several uniform windows
                opts["dot_uniform"] = CPU_DOT_UNIFORM
                opts["dot_uniform_windows"] = _uniform_windows(self.backend.gpu)
                lanes = _subgroup_lanes(self.backend.gpu, caps)
                if lanes:
                    # groups/dot.py: a subgroup shares the product's lhs rows (broadcast), each work item
                    # 4 columns of 32 rows: the transformer's products 1.6-2.5x faster than the blocks
                    opts["dot_subgroup"] = lanes
                    # groups/attention.py: a decode step's few query rows get a subgroup each, the lanes
                    # splitting the head (a work item per row left 7 of lavapipe's 8 lanes idle)
                    opts["attention_subgroup"] = lanes
        if tuning.active(self.device):
            opts["tuner"] = _Timer(self.device, self.backend.gpu, caps.max_workgroup_size)
        return schedule_program(self.program, caps, workgroup=DEFAULT_GROUP_SIZE, **opts)

    def _named_source(self, kernel):
        return _named_source(kernel)

    def _compile_schedule(self, sched):
        return _Plan(self.backend.gpu, self._dispatched(sched)).executable()

    def _dispatched(self, sched):
        """``sched`` as dispatched: on a CPU adapter (native, not browser bundles), consecutive small launches as
        the phases of one work-group of one dispatch (``kernels/phases.py``: lavapipe costs ~30 us of CPU a
        dispatch however little it holds)."""
        caps = self.backend.capabilities(self.device)
        if caps.tiling_pays or _PORTABLE.get():
            return sched
        uniform = self.backend.gpu.limits.get("max-uniform-buffers-per-shader-stage", 12)
        return phases.merged_schedule(sched, caps.max_buffers_per_kernel, CPU_PHASES_BELOW, DEFAULT_GROUP_SIZE,
                                      uniform)

    def launch_plan(self):
        """What ``compile()`` runs, for a straight-line program: a plan with value slots (``n_inputs``,
        ``allocs``), ``steps`` in dispatch order (WGSL source, entry, bound slots, work-groups, launch) and
        ``outputs``; ``None`` when the host drives control flow. The browser export reads it."""
        plan = self._schedules()
        return None if plan.host_driven else _Plan(self.backend.gpu, self._dispatched(plan.schedule))


def _named_source(kernel):
    return kernel.name, render_wgsl(kernel)


class _Timer(tuning.LaunchTimer):
    """Times candidate kernels on the webgpu adapter for ``kernels/tuning.py``: one submission of the launches
    and a wait for its last output, by process CPU time on a CPU adapter (lavapipe runs in this process's
    threads), by wall time on a GPU."""

    def __init__(self, device, gpu, workgroup_limit):
        super().__init__(device, workgroup_limit)
        self.gpu = gpu

    def source(self, kernel):
        return render_wgsl(kernel)

    def prepare(self, launches, inputs, output):
        gpu = self.gpu
        run = _Plan(gpu, Schedule(inputs, launches, [output], None)).executable()
        bufs = [gpu.upload(self.sample(s)) for s in inputs]
        clock = time.process_time if gpu.adapter_type.lower() == "cpu" else time.perf_counter

        def timed():
            t0 = clock()
            gpu.wait(run(bufs)[0])
            return clock() - t0
        return timed


class WebGPUBackend(Backend):
    #: What the parity cases run on numpy:0 here, and why (``Backend.expected_fallbacks``, shared by the kernel
    #: backends: ``kernels/no_kernel.py``); int8 casts fall back through ``Capabilities.dtypes``, casts into uint8
    #: through ``read_only_dtypes``.
    expected_fallbacks = EXPECTED_FALLBACKS
    #: The dtypes held as bytes, four to a u32 word, that kernels read but never write (``_low_bit_reason``; the
    #: low-bit dtypes' bytes are written by an atomic byte store, ``kernels/wgsl.py``).
    read_only_dtypes = frozenset({_U8})
    expected_decompositions = EXPECTED_DECOMPOSITIONS | {"erfc"}
    name = "webgpu"
    updates_in_place = True   # donated inputs: groups/in_place.py, dispatch.py

    def __init__(self, wgpu, gpu: _GPU):
        self.wgpu = wgpu
        self.gpu = gpu
        platform = "cpu" if gpu.adapter_type.lower() == "cpu" else "gpu"
        self._devices = [Device("webgpu", 0, platform, gpu.describe(), handle=gpu)]
        self._caps = None
        self._portable_caps = None   # (``_caps``, the same within portable_limits()), made on first use

    def devices(self):
        return self._devices

    def capabilities(self, device=None) -> Capabilities:
        caps = self._caps
        if caps is None:
            caps = self._caps = self._native_capabilities()
        if not _PORTABLE.get():
            return caps
        made = self._portable_caps   # (the capabilities it was made from, the portable ones)
        if made is None or made[0] is not caps:
            portable = PORTABLE_LIMITS["max-storage-buffers-per-shader-stage"]
            made = self._portable_caps = (caps, dataclasses.replace(
                caps, max_buffers_per_kernel=min(portable, caps.max_buffers_per_kernel)))
        return made[1]

    def _native_capabilities(self) -> Capabilities:
        """The ``Capabilities`` of the device as opened (its limits, dtypes, adapter kind)."""
        lim = self.gpu.limits
        ds = set(_BASE_DTYPES)
        if self.gpu.has_f16:
            ds.add(_F16)
        return Capabilities(
            dtypes=frozenset(ds),
            max_buffers_per_kernel=lim["max-storage-buffers-per-shader-stage"],
            max_workgroup_size=min(lim["max-compute-invocations-per-workgroup"],
                                   lim["max-compute-workgroup-size-x"]),
            max_dispatch=lim["max-compute-workgroups-per-dimension"],
            local_memory=True, local_memory_bytes=int(lim.get("max-compute-workgroup-storage-size", 16384)),
            atomics=False, tiling_pays=self.gpu.adapter_type.lower() != "cpu",
            control_flow="host", max_buffer_bytes=int(lim["max-buffer-size"]),
            max_loop_iterations=_loop_cap(self.gpu.info),
            # A CPU adapter (lavapipe) runs 4 elements per invocation of a map kernel faster
            # (docs/performance.md); a GPU keeps one, whose neighbouring invocations read
            # neighbouring elements.
            items_per_work_item=4 if self.gpu.adapter_type.lower() == "cpu" else 1,
            memory_check="compiled", tunable=True, tuning_facts=_tuning_facts(self.gpu), word_stores=True,
            eager_programs="tapes")

    def keeps_low_bit(self, eqn, device):
        """Whether the kernels take ``eqn``'s low-bit bytes as they are (``_LOW_BIT_PRIMITIVES``); the other
        equations of ``core/low_bit_upcast.UPCAST_PRIMITIVES`` are computed in float32/int32 between conversions."""
        return eqn.primitive in _LOW_BIT_PRIMITIVES

    def lowers_natively(self, eqn, device):
        prim = eqn.primitive
        if prim in CONTROL_PRIMITIVES or prim in CALLS:
            return True
        if accumulates_in_low_precision(eqn):  # the kernels accumulate in the operand dtype
            return False
        return prim in SCHEDULED and wgsl.renders_primitive(prim)

    def supports(self, eqn, device):
        prim = eqn.primitive
        if prim is P.custom_lin:
            return "custom_lin only appears in linear programs that are transposed, never run"
        caps = self.capabilities(device)
        cap = self.gpu.limits.get("max-storage-buffer-binding-size")
        for a in list(eqn.inputs) + list(eqn.outputs):
            d = a.aval.dtype
            if d not in caps.dtypes:
                f16 = "float16" if self.gpu.has_f16 else "float16 where the adapter has shader-f16"
                return f"WebGPU has no {d.name} (it computes in float32, int32, uint32, bool, complex64 and {f16})"
            n = a.aval.size * storage_itemsize(d)
            if cap is not None and n > cap:
                return (f"an operand {a.aval.str_short()} of {n} bytes exceeds the maxStorageBufferBindingSize "
                        f"of {device} ({cap} bytes)")
            if a.aval.size > _MAX_ELEMENTS:
                return f"kernels index with int32: {a.aval.str_short()} has more than 2**31 - 1 elements"
        why = _low_bit_reason(eqn)
        if why is not None:
            return why
        if prim in CONTROL_PRIMITIVES or prim in CALLS:
            return None  # driven from the host / inlined; the partitioner checks their sub-programs
        why = linalg.oversize_reason(eqn, caps)
        if why is not None:
            return why
        if prim not in SCHEDULED:
            return no_kernel_reason(prim, "webgpu")
        if prim is P.dot_general and any(isinstance(a, Literal) for a in eqn.inputs):
            return "dot_general of a literal operand (an array of it is needed)"
        if prim in _COMPLEX_BAD and any(dtypes.is_complex(a.aval.dtype) for a in eqn.inputs):
            return f"the webgpu kernels have no complex form of {prim.name}"
        if prim in REDUCTIONS and dtypes.is_complex(eqn.inputs[0].aval.dtype) and prim not in (
                P.reduce_sum, P.reduce_prod):
            return f"{prim.name} of complex values"
        if prim is fft_p:
            return fft_unsupported_reason(eqn)
        if prim is quantized_matmul_p:
            return quantized_unsupported_reason(eqn, caps)
        if prim is pallas_call_p:   # a user kernel the kernel IR cannot express runs in the interpreter
            return pallas_unsupported_reason(eqn, caps)
        if prim is dot_product_attention_p:
            return attention_unsupported_reason(eqn, caps)
        loops = caps.max_loop_iterations
        if prim in _WINDOW_REDUCTIONS and loops is not None and math.prod(eqn.params["window_dimensions"]) > loops:
            # one work item walks every tap: past the driver's loop limit it stopped early, silently (a
            # window sum of 90,000 taps was 32550.5, not 45000)
            return (f"{prim.name} over a window of {math.prod(eqn.params['window_dimensions'])} taps: "
                    f"{device} stops a shader invocation's loops after {loops} iterations")
        limit = caps.max_buffers_per_kernel
        if prim is P.sort and limit is not None and eqn.params["num_keys"] + 1 > limit:
            # The scheduler splits every other kernel to fit the limit (a concatenate into a tree, a
            # sort's copies into chunks), but one compare-exchange step binds every key and the index.
            return (f"sort by {eqn.params['num_keys']} keys needs {eqn.params['num_keys'] + 1} storage buffers "
                    f"in one kernel; a WebGPU shader stage may bind {limit}")
        return None

    def lower(self, program, device, donate=()):
        return WebGPULowered(program, device, self, donate)

    def eager_fast(self, primitive, params, in_avals, device):
        """Eager ``reshape`` as a view, broadcasts and transposes deferred into the elementwise operation that
        reads them (``kernels/deferred.py``); ``None`` (compiled as any program) for the other primitives."""
        return deferred.eager_fast(primitive, params, in_avals, device, self.gpu.lock)

    def to_device(self, array, device):
        return self.gpu.upload(np.asarray(array))

    def to_host(self, buf):
        return self.gpu.download(buf)

    def block_until_ready(self, buf):
        if buf.nbytes:
            buf.buffer   # noqa: B018 (a deferred eager value runs now: kernels/deferred.py)
            self.gpu.wait(buf)
        return buf

    def delete(self, buf):
        # Nothing here: several arrays may share one ``WGBuffer`` (a jitted call's output that is one of its
        # inputs, donated or not), so the deleted array only drops its reference; the buffer goes back to the
        # pool (``WGBuffer.__del__``) when the last array holding it goes, at once where it was the only one.
        # Releasing it here left the other arrays a dead buffer (tests/test_webgpu_backend.py
        # test_inputs_returned_as_outputs_survive_donation_and_delete).
        pass


def make_backend():
    """The webgpu backend on the first working adapter.

    Raises ``BackendUnavailable`` (with the fix) when wgpu-py is missing, no
    adapter is found, or the driver fails.
    """
    wgpu = _import_wgpu()
    native.parse_wgpu_types()   # ~45 C type strings in one parse, not one each (~1-3 s a process)
    errors = []
    for adapter in _adapters(wgpu):
        gpu = _GPU(wgpu, adapter)
        try:
            gpu.device  # noqa: B018 (opening the device is the check that the driver works)
        except BackendUnavailable as e:
            errors.append(str(e))
            continue
        return WebGPUBackend(wgpu, gpu)
    want = os.environ.get("WGPU_BACKEND_TYPE")
    why = "; ".join(errors) if errors else "no adapter found" + (f" for WGPU_BACKEND_TYPE={want}" if want else "")
    raise BackendUnavailable(f"webgpu: {why} (to fix: {_HINT})")
