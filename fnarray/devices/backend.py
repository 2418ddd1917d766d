"""The interface every backend implements, its capabilities and the registry.

A backend's package (``fnarray.lowering.<name>``) has a ``backend`` module that defines
``make_backend()`` returning a ``Backend``; it is imported lazily, the first time its devices are
asked for, so that optional libraries (jax, mlx, pyopencl, wgpu) are only
imported when used. A backend that cannot start raises ``BackendUnavailable``
with the reason and the command that fixes it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import threading

import numpy as np

from fnarray.core.errors import BackendUnavailable, FnArrayError
from fnarray.core.ir import Eqn, Program

__all__ = ["Device", "Capabilities", "Backend", "Lowered", "register_backend", "get_backend",
           "backend_names", "backend_error", "decompose_for", "no_engine_error"]


class Device:
    """A device of a backend, printed ``backend:id`` (``numpy:0``, ``jax:0``).

    Attributes: ``backend`` (name), ``id`` (int), ``platform`` (``cpu``,
    ``gpu``, ``tpu``...), ``description`` (what the library reports).
    Made by the backends (``fnarray.devices()``, ``fnarray.get_device``); as
    ``jax.Device``, users do not construct it.

    Args:
      backend: the backend's registered name.
      id: the device's index within its backend.
      platform: ``"cpu"``, ``"gpu"``, ``"tpu"``, ...
      description: a human-readable description (default: built from the above).
      handle: the backend library's own device object.
      reason: for a device listed by ``devices(all=True)`` whose backend cannot
        start, why and how to fix it; ``None`` for a usable device.
    """

    __slots__ = ("backend", "id", "platform", "description", "handle", "reason", "_key")

    def __init__(self, backend: str, id: int, platform: str, description: str = "", handle=None,
                 reason: str | None = None):
        self.backend, self.id, self.platform = backend, id, platform
        self.reason = reason  # why the device is unusable (devices(all=True)), else None
        self.description = description or f"{backend} {platform} device {id}"
        self.handle = handle  # the library's own device object
        self._key = (backend, id)

    def __eq__(self, other):
        return isinstance(other, Device) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __str__(self):
        return f"{self.backend}:{self.id}"

    def __repr__(self):
        extra = f", unavailable: {self.reason}" if self.reason else ""
        return f"Device({self.backend}:{self.id}, platform={self.platform!r}{extra})"

    @property
    def impl(self) -> "Backend":
        b = _BACKENDS.get(self.backend)  # (``get_backend``'s first line: a started backend, without its call)
        return b if b is not None else get_backend(self.backend)


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend's device can do; the partitioner and kernel scheduler read it.

    ``dtypes``: the dtypes it computes in. ``max_buffers_per_kernel``,
    ``max_workgroup_size``, ``max_dispatch``: kernel limits (``None`` = no limit).
    ``local_memory``, ``atomics``, ``tiling_pays``: kernel-scheduler hints. ``local_memory_bytes``: the
    work-group (local) memory one kernel may use, as the device reports it (OpenCL's ``CL_DEVICE_LOCAL_MEM_SIZE``,
    WebGPU's ``maxComputeWorkgroupStorageSize`` of the device fnarray opened); ``None``: not reported.
    ``control_flow``: ``"native"`` (the library has loops) or ``"host"``
    (the partitioner drives loops from Python). ``max_loop_iterations``: the most
    loop iterations one kernel invocation may run (Mesa's lavapipe stops at 65,535
    silently); longer cumulative lines are split into blocked scans.
    ``max_buffer_bytes``, ``memory_bytes``: the largest single buffer and the device's memory
    (``None`` = the host's physical memory); ``devices.memory`` checks allocations against them.
    ``uniform_guard``: elementwise kernels test their bounds once per work-group (full work-groups
    run the body unconditionally, the last one element by element): CPU OpenCL compilers such as
    PoCL vectorise across work items only where the body is not under a per-item branch.
    ``items_per_work_item``: elements each work item of a flat elementwise kernel computes (4 on
    Mesa's lavapipe, where fewer, fuller invocations run faster).
    ``matmul_tiling``: the form of the large matrix-product and convolution kernels where
    ``tiling_pays``: ``"local"`` (tiles staged in work-group memory, for GPUs) or ``"register"``
    (operands packed into panels, register tiles, no work-group memory: CPU OpenCL devices, where
    local memory is emulated and barriers cost; ``lowering/kernels/groups/register_tiles.py``).
    ``eager_programs``: when an eager call of a namespace function runs as one jitted program of the whole
    function (``transforms/eager_jit.py``): ``"off"`` (never: every primitive is its own program, as kernel
    backends, whose composites would compile kernels of their own), ``"first_call"`` (from the first: a slow
    compiler, such as XLA, then compiles each new shape once, not per primitive and then again for the whole
    function), ``"second_call"`` and ``"repeated_call"`` (a key's first call takes the general path, so a loop
    over new constants compiles nothing; from its second (mlx: third), its tape, ``transforms/eager_tape.py``, and its
    program once the tape has run ``eager_jit.TAPED_PROGRAM_CALL`` times or ``TAPE_BUDGET_S`` seconds); the two
    differ for a key that gets no tape: its program from its second call (``"second_call"``: compiles cost
    milliseconds) or from its ``eager_jit.REPEATED_CALL``-th (``"repeated_call"``: a backend whose general path
    compiles nothing, as mlx's lazy operations); ``"tapes"``: a key's tape from its second call, as
    ``"second_call"``, and never its program (kernel backends: the tape replays the general path's own one-kernel
    executables, where a program would compile kernels of its own).
    ``memory_check``: how ``devices.memory`` sizes a program before it runs. ``"values"``: every value
    at the program's top level is a buffer (numpy, mlx: each equation allocates its result).
    ``"compiled"``: the backend's compiler decides which values get buffers (XLA fuses, the kernel
    scheduler computes most values inline), so where the values do not fit, the lowered program's
    own count after fusion (``Lowered.memory_use``) decides; the outputs are always counted.
    ``reference``: the backend runs every primitive itself (the numpy backend, which defines the semantics
    and which the others fall back to): its programs are never decomposed or partitioned.
    ``tunable``: its kernel compiler has choices that ``config.autotune`` and ``fnarray tune`` time on the
    device (``lowering/kernels/tuning.py``: the opencl and webgpu backends).
    ``tuning_facts``: what the kernel groups' cost models (``lowering/kernels/tuning.py``, ``Tunable.cost``)
    know of the device, as ``(name, value)`` pairs: ``("device", "cpu" | "gpu")``, ``("compiler", "pocl")``,
    ``("llvm", 15)`` (the major version of the LLVM a CPU driver compiles with), ``("simd_bits", 256)`` (the
    vector width a CPU driver runs work items in: lavapipe's); empty: no model applies.
    ``horizontal_fusion``: the kernel scheduler merges independent map kernels of different shapes (an optimizer's
    update of each parameter leaf) into one launch over their concatenated work items
    (``lowering/kernels/groups/horizontal.py``).
    ``word_stores``: the device's kernels write one-byte elements (the low-bit dtypes) a 32-bit word at a time:
    a map kernel's work item computes the four elements of a word and stores the word (WGSL has no 8-bit type;
    other writers of such a buffer update their byte atomically). The map kernel then computes four elements
    per item (``groups/base.py``, ``MapGroup.items_per``).
    """

    dtypes: frozenset
    max_buffers_per_kernel: int | None = None
    max_workgroup_size: int | None = None
    max_dispatch: int | None = None
    local_memory: bool = False
    local_memory_bytes: int | None = None
    atomics: bool = False
    tiling_pays: bool = False
    control_flow: str = "native"
    max_loop_iterations: int | None = None
    max_buffer_bytes: int | None = None
    memory_bytes: int | None = None
    uniform_guard: bool = False
    items_per_work_item: int = 1
    matmul_tiling: str = "local"
    eager_programs: str = "off"
    memory_check: str = "values"
    reference: bool = False
    tunable: bool = False
    tuning_facts: tuple = ()
    horizontal_fusion: bool = True
    word_stores: bool = False


class _Compiling(threading.local):
    eager = False


#: ``compiling.eager`` is true while ``transforms/eager_jit.py`` traces and compiles the program of an eager call
#: in this thread: a backend may compile it as the eager code it stands for (mlx: never through ``mx.compile``,
#: whose compile per new shape raw MLX's eager calls never pay).
compiling = _Compiling()


class Lowered:
    """A program lowered for one device (as ``jax.stages.Lowered``)."""

    def __init__(self, program: Program, device: Device):
        self.program = program
        self.device = device

    def as_text(self) -> str:
        """The backend's text for the program (NumPy code, StableHLO, kernel source)."""
        raise NotImplementedError

    def memory_use(self):
        """The buffers the compiled program allocates besides its inputs, after the backend's fusion:
        a list of ``(what, bytes)`` (``what`` names the buffer for messages), or ``None`` where the
        backend cannot tell (then the program's values are counted). Read by ``devices.memory`` for
        backends with ``Capabilities(memory_check="compiled")``."""
        return None

    def compile(self):
        """An executable: ``exe(bufs) -> bufs`` over constvars + invars in order.

        It may carry ``exe.call_args``: the same computation called as ``call_args(*bufs)``, returning a
        sequence of output buffers, with nothing in between (``jax.jit``'s own callable, the generated NumPy
        function): jit's hot path calls that directly.
        """
        raise NotImplementedError


class Backend:
    """One backend: its devices, what it supports, and how it lowers programs."""

    name = "?"

    def devices(self) -> list[Device]:
        raise NotImplementedError

    def capabilities(self, device: Device) -> Capabilities:
        raise NotImplementedError

    #: The parity cases (``fnarray.testing.cases``) this backend is expected to run on numpy:0, beyond the
    #: dtypes its ``Capabilities.dtypes`` lack: ``{(primitive name, dtype name or "*"): reason}``, the dtype
    #: being the equation's first operand's (as the ``FallbackWarning`` names it). ``tests/test_parity.py``
    #: runs every other case with ``fallback="error"`` (so a deleted or broken native lowering fails) and
    #: checks that each listed one still falls back; ``python -m fnarray primitives --fallbacks`` prints them.
    expected_fallbacks: dict = {}
    #: The decomposable primitives (``core/decompositions.py``) this backend lowers through their decomposition
    #: rather than natively (``lowers_natively`` false at their first parity case), by name: a native rule lost
    #: from the backend's table would otherwise pass unnoticed through the decomposition
    #: (``tests/test_parity.py::test_decompositions_are_the_expected_ones``).
    expected_decompositions: frozenset = frozenset()

    #: Whether compiled programs can call Python host callbacks in place (``debug_callback``); when not,
    #: the partitioner cuts the program there and runs the callback on numpy:0.
    host_callbacks = False
    #: Whether ``lower`` takes ``consts=``: the values of the program's constvars, given where they are fixed
    #: for the executable's whole life (jit's traced constants), so that the backend may compile the small ones
    #: into the program as literals (``jax.jit`` does the same with the NumPy constants a function closes over;
    #: XLA then folds them: unpacking shifts, RoPE frequencies). The executable still takes every input.
    inlines_constants = False
    #: Whether ``jit(donate_argnums=...)`` makes a ``dynamic_update_slice`` or scatter of a donated input write
    #: only its update into the donated buffer (the kernel backends: ``lowering/kernels/groups/in_place.py``), so
    #: that a decoding step's KV cache update costs the new positions, not a copy of the cache. False where
    #: donation changes no cost (numpy) or was measured slower (XLA on the CPU: docs/performance.md, "jax:0
    #: against raw JAX"); ``examples/llm.py`` donates its caches where it is true.
    updates_in_place = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Every way into a backend's ``lower`` (jit's stages, the partitioner, the browser export) first expands
        # the primitives it does not lower natively into their decompositions (fnarray.core.decompositions).
        if "lower" in cls.__dict__:
            cls.lower = _decomposing(cls.__dict__["lower"])

    def lowers_natively(self, eqn: Eqn, device: Device) -> bool:
        """Whether this backend has its own lowering of ``eqn``'s primitive at its dtypes (else the primitive's
        decomposition is used, where there is one, and otherwise it falls back)."""
        return True

    #: ``keeps_low_bit(eqn, device) -> bool`` where the backend holds the low-bit dtypes as bytes and computes on
    #: them in a wider dtype: whether it takes ``eqn`` (a primitive of ``core/low_bit_upcast.UPCAST_PRIMITIVES``
    #: with a low-bit dtype) as it is; the equations it rejects are rewritten into conversions around the wide
    #: operation before lowering (``decompose_for``). ``None`` (the default): the backend takes them all.
    keeps_low_bit = None

    def supports(self, eqn: Eqn, device: Device) -> str | None:
        """``None`` if the device runs ``eqn``, else the reason it cannot."""
        caps = self.capabilities(device)
        for a in list(eqn.inputs) + list(eqn.outputs):
            if a.aval.dtype not in caps.dtypes:
                return f"{device.backend} has no {a.aval.dtype.name}"
        return None

    def lower(self, program: Program, device: Device, donate=()) -> Lowered:
        """Lower ``program``; ``donate`` lists input positions (constvars + invars) whose buffers
        the executable may reuse. A backend with ``inlines_constants`` also takes ``consts=``."""
        raise NotImplementedError

    def eager_executable(self, primitive, params, in_avals, device):
        """A callable ``bufs -> bufs`` applying one primitive (cached by the caller)."""
        raise NotImplementedError

    def eager_call(self, primitive, params, in_avals, out_avals):
        """Optionally, ``fn(*bufs) -> buf`` applying a one-output primitive to buffers of this backend with
        nothing in between (the numpy backend's NumPy function), for ``Array``'s fast operators; ``None``
        (the default): they call the eager executable."""
        return None

    #: Optionally, ``eager_jacobian(kind, fun, args, argnum, x) -> Array | None``: an eager ``kind`` (``"jacfwd"``,
    #: ``"jacrev"``, ``"hessian"``) of ``fun`` at concrete ``args``, differentiated at ``argnum`` (the array ``x``
    #: of this backend), by the backend library's own transforms where the backend's rule allows; ``None``:
    #: fnarray's transform runs it, then ``learn_jacobian(kind, fun, args, argnum, x, result)``. The mlx backend's
    #: is ``lowering/mlx/jacobians.py``.
    eager_jacobian = None
    #: Optionally, ``staged_jacobian(kind, fun, args, argnum, x, tapes) -> Array | None``: the same for a staged
    #: call (``config.stage_eager_transforms``, ``transforms/staged_transforms.py``), where ``fun``'s Python may
    #: run once per avals: ``tapes`` is a dict the staged program's cache entry owns (what the backend keeps of
    #: ``fun`` lives and dies with it); ``None``: the staged program runs it. The mlx backend's is
    #: ``lowering/mlx/jacobians.py``'s ``staged``.
    staged_jacobian = None

    def tape_steps(self, steps, eqns, starts, outs):
        """Optionally, an eager tape's steps rewritten for this backend (``transforms/eager_tape.py``): ``steps``
        are ``(call, input slots, single)``, ``eqns[q]`` step ``q``'s ``(primitive, params, in_avals, out_avals)``,
        ``starts[q]`` the slot of its first output, ``outs`` the tape's output slots. Returns as many steps, each
        with its outputs' count and their values unchanged where a later step or an output reads them (the mlx
        backend's keepdims reductions and implicit broadcasts, ``lowering/mlx/keepdims.py``). The default: ``steps``
        as they are."""
        return steps

    def to_device(self, array, device: Device):
        """A NumPy array (or scalar) into a buffer on ``device``."""
        raise NotImplementedError

    def to_host(self, buf):
        """A buffer into a NumPy array (read-only where no copy was made)."""
        raise NotImplementedError

    def scalar_to_device(self, value, dtype, device):
        """A Python or NumPy scalar as a rank-0 buffer of ``dtype`` on ``device``."""
        return self.to_device(np.asarray(value, dtype), device)

    def scalar_converter(self, dtype, device):
        """``conv(value)``: ``scalar_to_device(value, dtype, device)`` as one callable (``Array``'s fast
        operators keep it per operation)."""
        return functools.partial(self.scalar_to_device, dtype=dtype, device=device)

    def block_until_ready(self, buf):
        return buf

    def block_until_ready_all(self, bufs):
        """Wait for each of ``bufs`` (``fnarray.block_until_ready`` of a pytree); a backend whose library waits
        for several at once overrides it."""
        for b in bufs:
            self.block_until_ready(b)

    def delete(self, buf):
        pass

    # DLPack (``fnarray.devices.dlpack`` decides what is shared; these say how this backend's buffers do it).

    def dlpack_capsule(self, arr, share: bool, kwargs: dict):
        """The DLPack capsule of array ``arr`` (on this backend) for ``__dlpack__(**kwargs)``: its memory itself
        where ``share``, else a copy's; default: its host NumPy value's."""
        v = np.asarray(arr)
        if not share:
            kwargs.pop("copy", None)
            v = np.array(v, copy=True)  # writeable: a legacy capsule can be exported
        return v.__dlpack__(**kwargs)

    def dlpack_device(self, arr):
        """``(device type, device id)`` of array ``arr`` for ``__dlpack_device__``; default: the host (kDLCPU)."""
        return (1, 0)

    def dlpack_import(self, x, device: Device, copy):
        """``(buffer, dtype)`` over ``x``'s DLPack memory on ``device`` (``copy=False``: never a copy), or
        ``None`` where this backend does not share (the caller then copies through NumPy)."""
        return None

    # Meshes and global arrays (``fnarray.sharding``; the types are in ``devices/mesh.py`` and
    # ``devices/sharding.py``). The defaults are those of a backend without a distributed engine: a mesh holds one
    # device, and every array lies whole on its device.

    #: Whether meshes of several of this backend's devices run (it has a distributed engine: XLA's SPMD
    #: partitioner on jax, ``mx.distributed`` on mlx); ``make_mesh`` refuses larger meshes elsewhere.
    spmd = False

    def check_mesh(self, devices) -> None:
        """Raise ``ValueError`` for a mesh of ``devices`` (an object array of this backend's ``Device``) that this
        backend cannot run; default: more than one device (``no_engine_error``). ``Mesh`` calls it."""
        if devices.size > 1:
            raise no_engine_error(devices.flat[0].backend, devices.size)

    def mesh_devices(self, devices: list, axis_shapes: tuple) -> list:
        """The devices ``make_mesh(axis_shapes)`` takes from ``devices`` (this backend's, in order), or a
        ``ValueError`` saying how to get a mesh of that shape here; default: ``devices`` as they are (``make_mesh``
        takes the first ``prod(axis_shapes)`` and says when there are too few)."""
        return devices

    def addressable_devices(self, mesh) -> set:
        """The devices of ``mesh`` this process holds (``NamedSharding.addressable_devices``); default: those that
        are not another process's (``Device.remote``)."""
        return {d for d in mesh.devices.flat if not getattr(d, "remote", False)}

    def native_mesh(self, mesh):
        """The library's own mesh for ``mesh`` (``Mesh.jax_mesh``); default: ``ValueError``."""
        raise ValueError(f"Mesh.jax_mesh: this mesh holds {mesh.backend} devices, not jax ones")

    def native_sharding(self, sharding):
        """The library's own sharding for the ``NamedSharding`` ``sharding`` (``NamedSharding.jax_sharding``);
        default: ``ValueError``."""
        raise ValueError(f"NamedSharding.jax_sharding: this sharding's mesh holds {sharding.mesh.backend} devices, "
                         "not jax ones")

    def sharding_from_native(self, native):
        """A fnarray sharding for the library's own sharding object ``native`` (a ``jax.sharding.Sharding`` read
        from a checkpoint template); default: ``TypeError``."""
        raise TypeError(f"the {self.name} backend has no sharding objects of its own; got {native!r}")

    def put_global(self, array, sharding):
        """``device_put(array, sharding)`` for a ``NamedSharding`` over a mesh of several of this backend's
        devices: a global ``ArrayImpl``. ``array`` is an ``ArrayImpl`` (on any device) whose shape the spec was
        checked against; default: ``ValueError`` (``check_mesh`` refuses such meshes first)."""
        raise no_engine_error(sharding.mesh.backend, sharding.mesh.size)

    def array_sharding(self, array):
        """``array.sharding`` when ``array`` (an ``ArrayImpl`` on this backend) is a global array: its
        ``NamedSharding``; ``None`` (the default) for an array whole on its device (a ``SingleDeviceSharding``)."""
        return None

    def addressable_shards(self, array):
        """``array.addressable_shards`` of a global array: a ``Shard`` per device of this process; ``None`` (the
        default) for an array whole on its device (one shard, itself)."""
        return None

    def is_fully_addressable(self, array) -> bool:
        """Whether this process holds every shard of ``array`` (``jax.Array.is_fully_addressable``); default:
        ``True``."""
        return True

    def binds_shard_map(self, mesh) -> bool:
        """Whether ``shard_map`` over ``mesh`` binds one ``shard_map`` equation that this backend lowers (its
        ``spmd`` rules); default ``False``: a mesh of one device, where ``shard_map`` is a ``vmap`` of size 1 per
        mesh axis (``transforms/shard_map.py``)."""
        return False

    def shard_map_operand(self, value, sharding):
        """A concrete operand (or captured constant) of a ``shard_map`` equation over this backend's mesh as the
        equation takes it, given the ``NamedSharding`` its spec asks for; default: ``value`` as it is (jax places
        it over the mesh once, so that its compiled call does not copy it each time)."""
        return value


_ENGINES_HOW = ("the jax backend (several XLA devices: GPUs, TPUs, or CPU devices with "
                "XLA_FLAGS=--xla_force_host_platform_device_count=N; or processes started with fnarray.distributed) "
                "or the mlx backend (processes started with fnarray.distributed / mlx.launch)")


def no_engine_error(backend: str, n: int) -> ValueError:
    """The error for a mesh of ``n`` devices on ``backend``, which has no distributed engine (``Backend.spmd``)."""
    return ValueError(f"a mesh of {n} devices on the {backend} backend: {backend} has no distributed engine and "
                      f"one device, so only a mesh of one device works there. Use {_ENGINES_HOW}.")


def decompose_for(program: Program, device: Device) -> Program:
    """``program`` with what ``device``'s backend does not lower natively expanded into its decompositions (and,
    first, its low-bit operations in a wider dtype where the backend asks for that: ``Backend.keeps_low_bit``)."""
    from fnarray.core.decompositions import decompose
    backend = device.impl
    if backend.keeps_low_bit is not None:
        from fnarray.core.low_bit_upcast import upcast_low_bit
        program = upcast_low_bit(program, lambda eqn: backend.keeps_low_bit(eqn, device))
    return decompose(program, lambda eqn: backend.lowers_natively(eqn, device))


def _decomposing(lower):
    def lower_decomposed(self, program, device, *args, **kwargs):
        return lower(self, decompose_for(program, device), device, *args, **kwargs)
    lower_decomposed.__doc__ = lower.__doc__
    lower_decomposed.__wrapped__ = lower
    return lower_decomposed


_LOADERS = {
    "numpy": ("fnarray.lowering.numpy.backend", "pip install fnarray"),
    "jax": ("fnarray.lowering.jax.backend", "pip install 'fnarray[jax]'"),
    "mlx": ("fnarray.lowering.mlx.backend", "pip install 'fnarray[mlx]'"),
    "opencl": ("fnarray.lowering.opencl.backend", "pip install 'fnarray[opencl]'"),
    "webgpu": ("fnarray.lowering.webgpu.backend", "pip install 'fnarray[webgpu]'"),
}
_BACKENDS: dict[str, Backend] = {}
_ERRORS: dict[str, str] = {}
# Starting a backend happens once even when several threads ask at once: two instances would mean two
# device handles (two wgpu devices, two OpenCL contexts) whose buffers must never meet. Reentrant,
# since a backend's start may ask for another backend.
_START_LOCK = threading.RLock()


def register_backend(name: str, factory, install_hint: str = "") -> None:
    """Register a backend by name: ``factory()`` returns a ``Backend`` (or a module path).

    The factory runs on first use of the backend; registering an existing name
    replaces it and forgets its started instance and any recorded start error.

    Args:
      name: the backend's name, the ``backend`` part of device strings (``"name:0"``).
      factory: a zero-argument callable returning a ``Backend``, or the dotted path
        of a module whose ``make_backend()`` does.
      install_hint: what to install when the factory fails (shown in
        ``BackendUnavailable`` messages).

    Returns:
      None.

    Raises:
      Nothing at registration. On first use, a factory that raises (an
      ``ImportError`` or any other error) or finds no devices makes
      ``get_device`` raise ``BackendUnavailable`` (``devices`` skips the backend).
    """
    _LOADERS[name] = (factory, install_hint)
    _BACKENDS.pop(name, None)
    _ERRORS.pop(name, None)


def unregister_backend(name: str) -> None:
    _LOADERS.pop(name, None)
    _BACKENDS.pop(name, None)
    _ERRORS.pop(name, None)


def backend_names() -> list[str]:
    return list(_LOADERS)


def get_backend(name: str) -> Backend:
    """The backend called ``name``, started on first use.

    Raises ``BackendUnavailable`` with the reason and install hint when its
    library or driver is missing, ``ValueError`` for an unknown name.
    """
    b = _BACKENDS.get(name)
    if b is not None:
        return b
    with _START_LOCK:
        return _start_backend(name)


def _start_backend(name: str) -> Backend:
    b = _BACKENDS.get(name)
    if b is not None:  # started by another thread while this one waited
        return b
    if name not in _LOADERS:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(_LOADERS)}")
    if name in _ERRORS:
        raise BackendUnavailable(_ERRORS[name])
    factory, hint = _LOADERS[name]
    try:
        if isinstance(factory, str):
            b = importlib.import_module(factory).make_backend()
        else:
            b = factory()
        if not b.devices():
            raise BackendUnavailable(f"backend {name!r} found no devices")
    except BackendUnavailable as e:
        _ERRORS[name] = f"{e}" + (f" (to fix: {hint})" if hint and "fix" not in str(e) else "")
        raise BackendUnavailable(_ERRORS[name]) from None
    except ImportError as e:
        if isinstance(factory, str) and e.name == factory:
            _ERRORS[name] = f"backend {name!r} is not part of this fnarray version ({factory} is missing)"
        else:
            _ERRORS[name] = f"backend {name!r} needs {e.name or e}: not installed (to fix: {hint})"
        raise BackendUnavailable(_ERRORS[name]) from None
    except FnArrayError:
        raise
    except Exception as e:  # a broken driver must not crash the caller
        _ERRORS[name] = f"backend {name!r} failed to start: {type(e).__name__}: {e}"
        raise BackendUnavailable(_ERRORS[name]) from None
    _BACKENDS[name] = b
    return b


def backend_error(name: str) -> str | None:
    """Why backend ``name`` is unavailable, or ``None`` if it starts."""
    try:
        get_backend(name)
        return None
    except BackendUnavailable as e:
        return str(e)
