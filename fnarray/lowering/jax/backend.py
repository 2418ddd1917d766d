"""The jax backend: the IR lowered to ``jax.lax``, one ``jax.jit`` per program.

Devices ``jax:N`` are what ``jax.devices()`` reports (CPU here; CUDA GPUs and
TPUs where JAX sees them). Every primitive has a rule in ``RULES`` that
reproduces the reference semantics of the numpy reference (``lowering/numpy/``) (integer division by
zero gives 0, saturating float->int casts, NaN sorting last...). Programs with
64-bit types are lowered and run inside ``jax.enable_x64(True)`` so the user's
own JAX configuration is never changed; programs without them do not pay for it.
Random numbers come from fnarray's Threefry (plain uint32 primitives), so they
equal the other backends' bit for bit.
"""

from __future__ import annotations

import contextlib
import importlib
import functools
import weakref

import numpy as np

from fnarray.core import profile as _profile
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.decompositions import accumulates_in_low_precision
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Program
from fnarray.core.passes import dce, walk_eqns
from fnarray.devices import compile_cache
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered


try:
    import jax
    import jax.numpy as jnp
    from jax import lax
except ImportError as e:  # pragma: no cover - exercised where jax is missing
    raise BackendUnavailable("the jax backend needs JAX: not installed (to fix: pip install 'fnarray[jax]')") from e

#: The rule modules, one per primitive family; importing one registers its rules into ``common.RULES``.
FAMILIES = ("elementwise", "structural", "reductions", "dot", "attention", "conv", "windows", "linalg", "fft",
            "quantized", "prng", "control_flow", "spmd", "pallas")
for _family in FAMILIES:
    importlib.import_module(f"{__package__}.{_family}")
from fnarray.lowering.jax.common import RULES, interpret as _interpret, manual  # noqa: E402
from fnarray.lowering.jax import spmd  # noqa: E402  (imported by the loop above; its mesh functions)
from fnarray.lowering.jax.elementwise import wrap_float8_rules  # noqa: E402
from fnarray.lowering.jax.dot import fold_transposes  # noqa: E402
from fnarray.lowering.jax.shared import lifted, lookup, structure  # noqa: E402
from fnarray.lowering.jax import transfer  # noqa: E402

wrap_float8_rules()

__all__ = ["make_backend", "RULES", "JaxBackend"]

_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}

# ------------------------------------------------------------------------------ backend

# XLA's own float32 form of these is far less accurate than fnarray's decomposition (XLA's float32 erfc is 60 ulps
# off near x = 8.6, measured against math.erfc): below float64 the decomposition is used.
_INACCURATE_BELOW_F64 = frozenset({P.erfc})
_SCANS = frozenset({P.cumsum, P.cumprod, P.cumlogsumexp})

_X64 = frozenset({dtypes.float64, dtypes.int64, dtypes.uint64, dtypes.complex128})


def _needs_x64(prog: Program) -> bool:
    """Whether the program holds any 64-bit type (then it runs inside ``jax.enable_x64``)."""
    seen = {v.aval.dtype for v in list(prog.constvars) + list(prog.invars)}
    for e in walk_eqns(prog):
        seen.update(a.aval.dtype for a in e.inputs)
        seen.update(o.aval.dtype for o in e.outputs)
        seen.update(p for p in e.params.values() if isinstance(p, np.dtype))
    return not seen.isdisjoint(_X64)


def _x64(on: bool):
    return jax.enable_x64(True) if on else contextlib.nullcontext()


#: Programs with more inputs than this take their small inputs packed, one flat array per dtype: XLA's
#: compile time grows faster than linearly in the number of parameters (measured on the CPU:
#: ``jnp.concatenate`` of 2,000 small arrays under ``jax.jit`` compiles in 24 s; packed, 2.8 s).
PACK_INPUTS_ABOVE = 128
_PACK_MAX_ELEMENTS = 4096


def _packing(prog: Program, donate, inlined=()):
    """``{dtype: [input positions]}`` of the small inputs to pack, or ``None``; ``inlined``: the positions of the
    constants compiled in as literals (neither counted nor packed: the program does not read them)."""
    ins = list(prog.constvars) + list(prog.invars)
    if len(ins) - len(inlined) <= PACK_INPUTS_ABOVE or donate:
        return None
    groups: dict = {}
    for i, v in enumerate(ins):
        if v.aval.size <= _PACK_MAX_ELEMENTS and i not in inlined:
            groups.setdefault(v.aval.dtype, []).append(i)
    return {d: pos for d, pos in groups.items() if len(pos) > 1} or None


#: Constants (``consts=``) of at most this many elements are compiled into the program as literals, as
#: ``jax.jit`` compiles the NumPy arrays a function closes over; larger ones stay parameters. A parameter hides
#: its value from XLA: a quantized embedding row unpacked with shifts read from a parameter and recomputed
#: inside each of the first block's products made ``examples/llm.py``'s 4-bit decode step 1.2x raw JAX's.
INLINE_CONSTS_UP_TO = 4096


def _inlined(prog: Program, consts):
    """``{constvar position: NumPy value}`` of the constants compiled in as literals."""
    if not consts:
        return {}
    out = {}
    for i, (v, c) in enumerate(zip(prog.constvars, consts, strict=True)):
        if v.aval.size <= INLINE_CONSTS_UP_TO:
            try:
                a = np.asarray(c)
            except Exception:  # noqa: BLE001  (not readable here, e.g. a global array of other processes:
                continue       # it stays a parameter)
            if a.shape == tuple(v.aval.shape) and a.dtype == v.aval.dtype:
                out[i] = a
    return out


def _unpacked(n, packing):
    """The positions of the ``n`` inputs that ``packing`` does not pack."""
    packed = {i for pos in packing.values() for i in pos}
    return [i for i in range(n) if i not in packed]


def _program_fn(prog: Program, ins, inlined, packing):
    """The function ``jax.jit`` traces: ``prog`` interpreted on its arguments (constvars, then invars; the packed
    ones first where ``packing`` packs them), the inlined constants' arguments replaced by their values."""
    if packing is None:
        if inlined:
            def fn(*args):
                vals = list(args)
                for i, a in inlined.items():
                    vals[i] = a
                return _interpret(prog, vals)
        else:
            def fn(*args):
                return _interpret(prog, list(args))
        return fn
    rest = _unpacked(len(ins), packing)

    def fn(*args):
        # args: one flat array per packed dtype (in ``packing`` order), then the other inputs.
        vals = [None] * len(ins)
        for flat, pos in zip(args, packing.values(), strict=False):
            off = 0
            for i in pos:
                aval = ins[i].aval
                vals[i] = lax.slice(flat, (off,), (off + aval.size,)).reshape(aval.shape)
                off += aval.size
        for i, a in zip(rest, args[len(packing):], strict=True):
            vals[i] = a
        for i, a in inlined.items():
            vals[i] = a
        return _interpret(prog, vals)
    return fn


def _jits(prog: Program, inlined, packing, donate):
    """``(jitted, gspmd)``: ``jax.jit`` of ``prog`` (``_program_fn``), and, for a program with float max/min
    reductions, the same traced with plain reductions (``None`` otherwise; ``compile``'s fallback)."""
    fn = _program_fn(prog, list(prog.constvars) + list(prog.invars), inlined, packing)
    jitted = jax.jit(fn, donate_argnums=donate)
    gspmd = None
    if any(e.primitive in (P.reduce_max, P.reduce_min) for e in walk_eqns(prog)):
        def fn_gspmd(*args):
            manual.gspmd = getattr(manual, "gspmd", 0) + 1
            try:
                return fn(*args)
            finally:
                manual.gspmd -= 1
        gspmd = jax.jit(fn_gspmd, donate_argnums=donate)
    return jitted, gspmd


def _with_args(jitted, extra):
    """``jitted`` called with the device scalars ``extra`` after its arguments."""
    def call(*bufs):
        return jitted(*bufs, *extra)
    return call


def _with_fallback(jitted, gspmd, x64):
    """The executable ``bufs -> outputs`` of ``jitted``, whose float max/min reductions keep NaNs with a comparator
    XLA's partitioner refuses over arrays sharded across devices: such calls take ``gspmd``, the program traced
    with plain reductions. Outside x64, its direct entries: ``call_args(*bufs)``, and the same in two parts for
    jit's hot path, ``call_direct`` (jax.jit's callable) then on its error ``call_fallback(e, bufs)``: JAX records
    the Python stack with each call's outputs, so a frame less between the caller and JAX is ~0.4 us a call."""
    def exe(bufs):
        with _x64(x64):
            try:
                return list(jitted(*bufs))
            except jax.errors.JaxRuntimeError as e:
                return list(call_fallback(e, bufs))

    def call_fallback(e, bufs):
        if not isinstance(e, jax.errors.JaxRuntimeError) or "Unsupported reduction computation" not in str(e):
            raise e
        return gspmd(*bufs)
    if not x64:
        # (a softmax's max is such a reduction: without the list and the context manager, ~1.5 us a call less)
        def call_args(*bufs):
            try:
                return jitted(*bufs)
            except jax.errors.JaxRuntimeError as e:
                return call_fallback(e, bufs)
        exe.call_args, exe.call_direct, exe.call_fallback = call_args, jitted, call_fallback
    return exe


class JaxLowered(Lowered):
    def __init__(self, program, device, donate=(), consts=None):
        super().__init__(program, device)
        compile_cache.configure_jax()
        self.x64 = _needs_x64(program)
        prog, _ = dce(program)
        prog = fold_transposes(prog)
        self._prog = prog
        handle = device.handle
        ins = list(prog.constvars) + list(prog.invars)
        # The inlined constants' inputs are still passed (the executable takes every input) but unread: jax.jit
        # drops unused arguments from the XLA program.
        inlined = self.inlined = _inlined(prog, consts)
        self._packing = packing = _packing(prog, donate, inlined)
        self._donate = tuple(sorted(set(donate)))

        if packing is not None:
            self._rest = _unpacked(len(ins), packing)
        shared = None if packing is not None else structure(prog, inlined, self._donate)
        self._extra, self._made = (), None
        if shared is None:
            self._jitted, self._gspmd = _jits(prog, inlined, packing, self._donate)
        else:
            # programs of the same text but for their literals share one jax.jit (``shared``'s docstring)
            key, lits = shared

            def make(positions):
                return _jits(lifted(prog, positions)[0], inlined, None, self._donate)
            self._made, positions = lookup(key, lits, make)   # (held: the table holds it weakly)
            self._jitted, self._gspmd = self._made.value
            # (placed as any upload: uncommitted on JAX's default device, so a call on a sharded global array works)
            self._extra = tuple(device.impl.to_device(np.asarray(lits[i].val), device) for i in positions)
        # A program without inputs has nothing to say where it runs: pin it to the device.
        self._pin = None if (prog.invars or prog.constvars) else handle

    def _jit_avals(self):
        """The abstract arguments of the jitted function (packed inputs first where they are packed)."""
        ins = list(self._prog.constvars) + list(self._prog.invars)
        if self._packing is None:  # (and the literals read as arguments, ``shared``)
            return [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in ins] + \
                [jax.ShapeDtypeStruct((), e.dtype) for e in self._extra]
        packed = [jax.ShapeDtypeStruct((sum(ins[i].aval.size for i in pos),), d) for d, pos in self._packing.items()]
        return packed + [jax.ShapeDtypeStruct(ins[i].aval.shape, ins[i].aval.dtype) for i in self._rest]

    def as_text(self) -> str:
        """StableHLO of the program (as ``jax.jit(f).lower(...).as_text()``)."""
        with _x64(self.x64):
            return self._jitted.lower(*self._jit_avals()).as_text()

    def optimized_text(self) -> str:
        """XLA's optimised HLO of the program (as ``jax.jit(f).lower(...).compile().as_text()``): the fusions,
        copies and input/output aliasing that run."""
        with jax.default_device(self.device.handle), _x64(self.x64):
            return self._jitted.lower(*self._jit_avals()).compile().as_text()

    def memory_use(self):
        """XLA's own count after fusion (``Compiled.memory_analysis``): its temporary buffer and the outputs.
        Compiling here costs nothing later: the first call finds JAX's compilation cache warm."""
        with jax.default_device(self.device.handle), _x64(self.x64):
            m = self._jitted.lower(*self._jit_avals()).compile().memory_analysis()
        if m is None:
            return None
        return [("XLA's temporary buffers", int(m.temp_size_in_bytes)),
                ("the outputs", int(m.output_size_in_bytes) - int(m.alias_size_in_bytes))]

    def compile(self):
        exe = self._executable()
        if self._made is not None:
            exe.shared = self._made   # kept alive while the executable is (``shared``'s table holds it weakly)
        return exe

    def _executable(self):
        jitted, gspmd, x64 = self._jitted, self._gspmd, self.x64
        if self._extra:   # the literals this program reads as arguments (``shared``)
            jitted, gspmd = _with_args(jitted, self._extra), gspmd and _with_args(gspmd, self._extra)
        if _profile.recorder is not None:
            # XLA compiles on the first call; under the profiler it compiles here, ahead of time, so that
            # its time is a span of its own (the first call then finds JAX's cache warm).
            with _profile.span("compile", "XLA compile", device=str(self.device)), _x64(x64):
                self._jitted.lower(*self._jit_avals()).compile()
        if self._packing is not None:
            jitted = self._packed_call(jitted)
        if self._donate:
            jitted = self._unaliased(jitted)
        if self._pin is not None:
            pin = self._pin

            def exe(bufs):
                with jax.default_device(pin), _x64(x64):
                    return list(jitted(*bufs))
            return exe
        if gspmd is not None:
            # Float max/min reductions: their NaN-keeping comparator is refused by XLA's partitioner over
            # arrays sharded across devices; such calls take the program traced with plain reductions.
            return _with_fallback(jitted, self._packed_call(gspmd) if self._packing is not None else gspmd, x64)
        if x64:
            def exe(bufs):
                with jax.enable_x64(True):
                    return list(jitted(*bufs))
        else:
            def exe(bufs):
                return list(jitted(*bufs))
            # jax.jit's callable itself: its C++ dispatch is the fastest entry (measured: Compiled.__call__ of
            # the AOT stages costs ~2 us more per call). jit's hot path calls it directly.
            exe.call_args = jitted
        return exe

    def _unaliased(self, jitted):
        """``jitted`` with a donated buffer that the same call also passes at another position copied first: XLA
        refuses ``f(donate(a), a)`` (``INVALID_ARGUMENT``); ``jit`` refuses one array passed twice so too
        (``transforms/jit._check_donation``), but two arrays of fnarray may share one ``jax.Array`` (``x.copy()``
        and ``fnp.array(x)`` of an immutable array), which JAX would see as one buffer."""
        donated = self._donate

        def call(*bufs):
            ids = [id(b) for b in bufs]
            if len(set(ids)) == len(ids):
                return jitted(*bufs)
            bufs = list(bufs)
            for i in donated:
                if ids.count(ids[i]) > 1:
                    bufs[i] = jax.device_put(bufs[i], may_alias=False)
            return jitted(*bufs)
        return call

    def _packed_call(self, jitted):
        """``jitted`` called on the inputs with the small ones of each dtype packed on the host (one
        transfer per dtype rather than one XLA parameter per array). A group whose buffers are the very ones
        of the previous call (a model's weights from step to step) reuses that call's packed array."""
        groups = [(d, pos) for d, pos in self._packing.items()]
        rest, handle, x64 = self._rest, self.device.handle, self.x64
        last = [None] * len(groups)   # per group: (its buffers, the packed array) of the previous call

        def call(*bufs):
            packed = []
            with jax.default_device(handle), _x64(x64):
                for g, (d, pos) in enumerate(groups):
                    mine = [bufs[i] for i in pos]
                    prev = last[g]
                    if prev is not None and all(a is b for a, b in zip(mine, prev[0], strict=True)):
                        packed.append(prev[1])
                        continue
                    flat = np.concatenate([np.asarray(b).reshape(-1) for b in mine]).astype(d, copy=False)
                    arr = jnp.array(flat, copy=True)
                    last[g] = (mine, arr)
                    packed.append(arr)
            return jitted(*packed, *[bufs[i] for i in rest])
        return call


@functools.lru_cache(maxsize=1)
def _default_handle():
    return jax.devices()[0]


#: Device scalars kept for eager operations with Python or NumPy scalar operands (``scalar_to_device``).
_SCALAR_CACHE_SIZE = 256


class JaxBackend(Backend):
    #: Lowered through their decompositions (``Backend.expected_decompositions``): XLA's own forms are no better.
    expected_decompositions = frozenset({"erfc", "log2"})
    host_callbacks = True  # jax.debug.callback(ordered=True) inside the XLA program
    name = "jax"
    spmd = True  # meshes of several XLA devices, partitioned by XLA (GSPMD) and jax.shard_map

    def __init__(self):
        self._scalars = LRUCache(_SCALAR_CACHE_SIZE)
        self._devices = []
        for i, d in enumerate(jax.devices()):
            platform = {"cuda": "gpu", "rocm": "gpu"}.get(d.platform, d.platform)
            self._devices.append(Device("jax", i, platform, f"JAX {jax.__version__} {d.device_kind} ({d})",
                                        handle=d))
        self._caps = Capabilities(dtypes=frozenset(dtypes.KNOWN_DTYPES), control_flow="native",
                                  eager_programs="first_call", memory_check="compiled")
        self._eager: "weakref.WeakValueDictionary" = {}

    def devices(self):
        return self._devices

    def capabilities(self, device):
        return self._caps

    def lowers_natively(self, eqn, device):
        if eqn.primitive in _INACCURATE_BELOW_F64 and eqn.inputs[0].aval.dtype.itemsize <= 4:
            return False
        if eqn.primitive in _SCANS and accumulates_in_low_precision(eqn):
            return False  # XLA scans float16 in float16: a cumprod of 6,001 factors was 5% off
        return eqn.primitive in RULES

    def supports(self, eqn, device):
        r = _UNSUPPORTED.get(eqn.primitive)
        if r is not None:
            return r
        if eqn.primitive not in RULES:
            return f"the jax backend has no rule for {eqn.primitive.name}"
        return None

    #: Small traced constants become literals of the XLA program (``Backend.inlines_constants``).
    inlines_constants = True

    def lower(self, program, device, donate=(), consts=None):
        return JaxLowered(program, device, donate, consts)

    def scalar_to_device(self, value, dtype, device):
        """A Python or NumPy scalar as a rank-0 JAX array, from a bounded cache of device scalars.

        An eager ``x * 2`` otherwise uploads its ``2.0`` on every call (64% of the op's time measured on
        jax:0). JAX arrays are immutable, so one buffer serves every use. NaN and signed zeros are not
        cached (their keys would compare equal to other values); nor is anything once the cache holds
        ``_SCALAR_CACHE_SIZE`` entries of other values (least recently used are evicted).
        """
        if value != value or value == 0:
            return self.to_device(np.asarray(value, dtype), device)
        key = (type(value), value, dtype, device._key)  # the device's (backend, id): a C-level hash
        buf = self._scalars.get(key)
        if buf is None:
            buf = self._scalars.put(key, self.to_device(np.asarray(value, dtype), device))
        return buf

    def scalar_converter(self, dtype, device):
        """``scalar_to_device`` for one dtype and device, with the same bounded cache (``Array``'s fast
        operators keep one per operation)."""
        cache, dkey = self._scalars, device._key
        d = cache._d

        def conv(value):
            if value != value or value == 0:
                return self.to_device(np.asarray(value, dtype), device)
            key = (type(value), value, dtype, dkey)
            buf = d.get(key)
            if buf is None:
                return cache.put(key, self.to_device(np.asarray(value, dtype), device))
            try:
                d.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
            return buf
        return conv

    def to_device(self, array, device):
        a = np.asarray(array)
        if not a.dtype.isnative:  # JAX refuses '>f4'; its aval is float32
            a = a.astype(a.dtype.newbyteorder("="))
        # A copy into memory XLA owns, never an alias of the NumPy buffer (``transfer``'s docstring). Uncommitted
        # on JAX's default device, so that XLA may combine it with a global array sharded over several devices
        # (fa.device_put(x, NamedSharding)); a committed one would be "incompatible devices" there. Where it runs
        # is the same.
        handle = device.handle
        return transfer.put(a, handle, handle != _default_handle(), a.dtype in _X64)

    def to_host(self, buf):
        a = np.asarray(buf)
        return a

    def block_until_ready(self, buf):
        return buf.block_until_ready()

    def delete(self, buf):
        if not buf.is_deleted():
            buf.delete()

    def dlpack_capsule(self, arr, share, kwargs):
        buf = arr.buf()
        if not share:
            buf = jnp.array(buf, copy=True)  # on the same device: no host round trip
        kwargs.pop("copy", None)
        return buf.__dlpack__(**kwargs)

    def dlpack_device(self, arr):
        return arr.buf().__dlpack_device__()

    def dlpack_import(self, x, device, copy):
        import jax.dlpack
        if isinstance(x, jax.Array):
            buf = x
        else:
            # Scoped x64, as the backend's own transfers: a float64 tensor stays float64.
            with jax.enable_x64(True):
                buf = jax.dlpack.from_dlpack(x, copy=copy)
        if buf.devices() != {device.handle}:
            if copy is False:
                raise BufferError(f"from_dlpack(copy=False): the array is on {buf.devices()}, not on {device}")
            with jax.enable_x64(True):
                buf = jax.device_put(buf, device.handle)
        return buf, np.dtype(buf.dtype)

    # Meshes and global arrays (``Backend``'s hooks; the work is in ``spmd.py``).

    def check_mesh(self, devices):
        return None  # any mesh of jax devices: XLA partitions it

    def addressable_devices(self, mesh):
        return spmd.addressable_devices(mesh)

    def native_mesh(self, mesh):
        return spmd.native_mesh(mesh)

    def native_sharding(self, sharding):
        return spmd.native_sharding(sharding)

    def sharding_from_native(self, native):
        return spmd.sharding_from_native(native, self)

    def put_global(self, array, sharding):
        return spmd.put_global(array, sharding)

    def array_sharding(self, array):
        return spmd.array_sharding(array, self)

    def addressable_shards(self, array):
        return spmd.addressable_shards(array, self)

    def is_fully_addressable(self, array):
        return bool(array.buf().is_fully_addressable)

    def binds_shard_map(self, mesh):
        return True  # jax.shard_map, over a mesh of one device too

    def shard_map_operand(self, value, sharding):
        return spmd.shard_map_operand(value, sharding)


def make_backend():
    return JaxBackend()
