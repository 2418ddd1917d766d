"""Devices, placement rules and eager execution.

Placement follows JAX: an array made without a device is *uncommitted* on the
default device and follows committed operands; ``device_put`` commits.
Operations on committed arrays of different devices raise an error naming
both. Eager execution is ``jit`` of a one-equation program, cached per
(primitive, params, input types, device) (docs/design.md).
"""

from __future__ import annotations

import warnings
from threading import get_ident

import numpy as np

from fnarray.core import dtypes, tracing
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.errors import DTypeError
from fnarray.core.ir import Params
from fnarray.core.shaped import ShapedArray
from fnarray.devices import array_impl
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.backend import Device
from fnarray.devices.lookup import DEFAULT_NOW, current_default, default_device, devices, \
    parse_device
from fnarray.devices.mesh import PartitionSpec, ambient_mesh, check_spec
from fnarray.devices.sharding import NamedSharding, Sharding, SingleDeviceSharding

__all__ = ["devices", "default_device", "parse_device", "device_put", "put_sharded", "array_from_numpy",
           "import_dlpack", "eager_apply", "eager_key", "placement_device"]

# ``eager_direct`` calls the numpy backend's NumPy functions from this module: their RuntimeWarnings for the pinned
# edge cases (``x / 0.0`` is ``inf``) are silenced here as in ``fnarray.lowering.numpy``, which the general path runs.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.devices\.placement")


_CHECKED_BYTES = 1 << 26

# Leaf types device_put turns into arrays besides ndarrays, NumPy scalars and Python numbers.
_NOT_ARRAYS = (str, bytes, bytearray, memoryview, type(Ellipsis), slice, type)


def _check_leaf(leaf, where):
    """A ``DTypeError`` naming the type of a leaf that is not an array nor a number."""
    if isinstance(leaf, _NOT_ARRAYS) or not (isinstance(leaf, (np.ndarray, np.generic))
                                             or hasattr(leaf, "__array__") or hasattr(leaf, "__dlpack__")):
        raise DTypeError(f"{where} got a {type(leaf).__name__} ({_short_repr(leaf)}); it places arrays: NumPy "
                         "arrays, fnarray Arrays and Python or NumPy numbers and bools (lists, tuples, dicts and "
                         "None are walked as pytrees, as in jax.device_put). Convert the value to numbers first.")


def _short_repr(x):
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


# Placed arrays of one shape and dtype share one ShapedArray (at most _AVALS_SIZE kept; cleared when full),
# so that the eager operators' identity test of two operands' avals (eager_ops) holds for them as it does
# for an executable's outputs. A lookup also costs less than building the named tuple.
_AVALS: dict = {}
_AVALS_SIZE = 256


def _placed_aval(shape, d, weak_type) -> ShapedArray:
    key = (shape, d, weak_type)
    av = _AVALS.get(key)
    if av is None:
        if len(_AVALS) >= _AVALS_SIZE:
            _AVALS.clear()
        av = _AVALS[key] = ShapedArray(shape, d, weak_type)
    return av


def array_from_numpy(value, device: Device | None = None, *, weak_type: bool = False,
                     committed: bool = False) -> ArrayImpl:
    """Wrap a NumPy array (copied if writeable) as an ``ArrayImpl`` on ``device``; a 64-bit array becomes
    32-bit while ``config.enable_x64`` is off (``dtypes.canonicalize``), as JAX's ``device_put``."""
    v = np.asarray(value)
    d = dtypes.canonicalize(v.dtype)
    if d != v.dtype:
        v = v.astype(d)
    aval = _placed_aval(v.shape, d, weak_type)
    dev = device if device is not None else default_device()
    if v.nbytes > _CHECKED_BYTES:  # small arrays fit everywhere: keep the common path free of the check
        from fnarray.devices import memory
        memory.check_avals([aval], dev, "fnarray.device_put")
    return ArrayImpl.make(aval, dev, dev.impl.to_device(v, dev), committed)


def device_put(x, device=None):
    """Place ``x`` (an array, NumPy value or pytree of them) on ``device``, committed.

    Mirrors ``jax.device_put``. Operations on committed arrays run on their device;
    uncommitted ones follow committed operands (docs/design.md, placement).

    Args:
      x: an ``Array``, NumPy array, Python or NumPy scalar, or a pytree of them.
        Inside a transform, traced leaves are returned unchanged.
      device: a ``Device`` or a string such as ``"opencl:0"``; ``None`` puts the
        values on the default device uncommitted; a ``fnarray.sharding.NamedSharding`` makes global
        arrays split over its mesh (``x.sharding``, ``x.addressable_shards``, as JAX); a ``PartitionSpec``
        splits them over the ambient mesh (``fnarray.sharding.set_mesh``; ``ValueError`` without one).

    Returns:
      The same structure with ``Array`` leaves of the same shapes. NumPy arrays
      keep their dtype, except that 64-bit ones become 32-bit while ``fnarray.config.enable_x64`` is off
      (the default; ``float64`` → ``float32``, as JAX without x64, silently); Python scalars become
      weakly-typed ``float32``/``int32``/``complex64``/``bool``.

    Raises:
      DTypeError: a leaf whose dtype fnarray does not have (strings, objects...).
      TypeError, ValueError, BackendUnavailable: an invalid ``device`` (see ``get_device``).
      RuntimeError: ``x`` holds an array that was donated or deleted.
      TracerLeakError: ``x`` holds a traced value whose transformation has returned (a leaked tracer).
    """
    import optree
    if isinstance(device, PartitionSpec):  # JAX 0.10: over the ambient mesh
        device = NamedSharding(ambient_mesh(f"device_put(x, {device!r})"), device)
    if isinstance(device, Sharding):  # a global array laid out over a mesh (fnarray.sharding)
        return optree.tree_map(lambda leaf: tracing.live(leaf) if isinstance(leaf, tracing.Tracer) else
                               put_sharded(leaf, device), x, none_is_leaf=False, namespace="fnarray")
    dev = parse_device(device) if device is not None else None
    if type(x) is np.ndarray:  # one NumPy array (a loop's fresh state): no tree to walk (~4 us of 10 on jax:0)
        return array_from_numpy(x, dev or default_device(), committed=dev is not None)

    def put(leaf):
        if isinstance(leaf, tracing.Tracer):
            return tracing.live(leaf)
        target = dev or default_device()
        if isinstance(leaf, ArrayImpl):
            if leaf.device == target:
                return ArrayImpl.make(leaf.aval, target, leaf.buf(), committed=dev is not None)
            return ArrayImpl.make(leaf.aval, target, _transfer(leaf.buf(), leaf.device, target),
                             committed=dev is not None)
        if tracing.is_scalar(leaf):
            d, w = dtypes.dtype_of_scalar(leaf)
            return array_from_numpy(np.asarray(leaf, d), target, weak_type=w, committed=dev is not None)
        _check_leaf(leaf, "fnarray.device_put")
        return array_from_numpy(leaf, target, committed=dev is not None)

    return optree.tree_map(put, x, none_is_leaf=False, namespace="fnarray")


def put_sharded(x, sharding):
    """``x`` (an array or NumPy value, not a pytree) placed as ``sharding`` says: a global array.

    A ``SingleDeviceSharding`` or a mesh of one device: the array committed to that device; a larger mesh: its
    backend's ``put_global`` (jax: ``jax.device_put`` with the JAX sharding, each device receiving its shard).
    Raises ``ValueError``/``ShapeError`` for a spec that does not fit the mesh or ``x``'s shape.
    """
    if isinstance(sharding, SingleDeviceSharding):
        (dev,) = sharding.device_set
        return device_put(x, dev)
    mesh = sharding.mesh
    if not isinstance(x, ArrayImpl):
        # fnarray's dtype and weak-type rules, the value kept on the host when the mesh has several devices: each
        # device then receives its shard from the host (jax: 0.10 ms for 8 x 8 KiB shards) rather than from a copy
        # on the default device (0.53 ms: JAX reshuffles it between devices)
        x = device_put(x, parse_device("numpy:0") if mesh.size > 1 else None)
    check_spec(sharding.spec, mesh, x.shape, "device_put: NamedSharding spec")
    if mesh.size == 1:
        return device_put(x, mesh.devices.flat[0])
    return mesh.impl.put_global(x, sharding)


def _transfer(buf, src: Device, dst: Device):
    if src == dst:
        return buf
    return dst.impl.to_device(src.impl.to_host(buf), dst)


def placement_device(arrays, where: str) -> Device:
    """The device an operation on ``arrays`` runs on, JAX's rule: the device of the committed ones (an error
    where they name two), else the default device, wherever the uncommitted ones lie (they move there)."""
    committed = None
    for a in arrays:
        if a._committed:
            if committed is None:
                committed = a._device
            elif a._device != committed:
                raise ValueError(
                    f"{where} got arrays committed to different devices: {committed} and {a._device}. "
                    f"Move one with fnarray.device_put(x, {str(committed)!r}) first.")
    return committed or current_default()


def placed(x) -> bool:
    """Whether an operation on the array ``x`` and uncommitted operands runs on ``x``'s device: ``x`` is committed
    or lies on the default device (JAX runs an operation on uncommitted arrays on the default device, wherever
    they lie: ``placement_device``)."""
    return x._device is DEFAULT_NOW[0] or x._committed or x._device is current_default()


def like_device(x, weak: bool):
    """The device a ``*_like`` creation of ``x`` is committed to, or ``None`` (the default device, uncommitted): as
    JAX's ``lax.full_like`` takes ``x``'s sharding outside ``jit``, ``zeros_like(x)`` of a concrete array committed
    to a device lies there, committed, unless its result is weakly typed (``weak``: no dtype given and ``x``
    weak). A tracer's or an uncommitted array's result takes the default device. Before, an optimiser's
    ``zeros_like(params)`` of parameters committed to webgpu:0 lay on numpy:0, and numpy:0's eager program of the
    key (its third call) committed it where the first two calls had not."""
    if type(x) is ArrayImpl and x._committed and not weak:
        return x._device
    return None


# ------------------------------------------------------------------------------- eager

def _eager_cache_size() -> int:
    return config.eager_cache_size


class _EagerEntry:
    # step: the executable's entry for a tape (``eager_tape._entry``: ``(call, single)``), made at its first tape;
    # one: ``fn(*bufs) -> buf`` for ``eager_direct`` (None: not looked up yet; False: the entry has none);
    # kept_by: the fast operators' entries made from this one (``eager_ops._OpEntry``), or None
    __slots__ = ("exe", "out_avals", "used", "step", "one", "kept_by")

    def __init__(self, exe, out_avals):
        self.exe, self.out_avals, self.used, self.step, self.one = exe, out_avals, False, None, None
        self.kept_by = None

    def live_keepers(self) -> list:
        """The entries of ``kept_by`` still cached (``eager_ops._OpEntry.live``), which ``kept_by`` is trimmed to
        (``None`` where there are none): the one filter of the eager cache's second chance (``_used_since``) and
        of ``eager_ops._learn``, which adds an entry."""
        live = [e for e in self.kept_by or () if e.live]
        self.kept_by = live or None
        return live


def _used_since(entry) -> bool:
    """The eager cache's second chance: ``entry`` was used since it last came up, or it is the primitive's entry
    of a fast operator's entry still cached (``kept_by``). A fast operator's hits never touch the primitive's
    entry, which the general path needs, so without this a loop served by the operator would leave it to be
    evicted, and the same loop under the profiler (whose eager apply is the general path) would compile it again
    in the middle of a warmed loop (``tests/test_profiler.py``)."""
    used, entry.used = entry.used, False
    if used:
        return True
    if getattr(entry, "kept_by", None):  # (the fast operators' own entries have none)
        return bool(entry.live_keepers())
    return False


# eager_key(primitive, params, input types, device) -> _EagerEntry; at most
# fnarray.config.eager_cache_size entries. A hit only marks its entry used (re-hashing the key to
# reorder an LRU costs ~0.5 us here, a tenth of an eager call's own time), and eviction gives used
# entries a second chance (CLOCK). Lookups take no lock; a miss compiles outside the lock and the first
# insert wins, so threads share one executable.
def _eager_dropped(key, entry) -> None:
    forget = getattr(entry, "forget", None)  # the fast operators' entries (eager_ops) keep a last hit
    if forget is not None:
        forget()


_eager_cache = LRUCache(_eager_cache_size, on_evict=_eager_dropped, second_chance=_used_since)
_eager_d = _eager_cache._d


_NO_ITEMS = frozenset()


def eager_key(primitive, params, avals, device) -> tuple:
    """The eager cache's key of one primitive: ``(primitive, params' items, avals, device id, fallback mode)``.

    The params are a ``frozenset`` of their items (hashed and compared in C: a ``Params``' own ``__hash__`` and
    ``__eq__`` are Python calls, and every bind makes a new one), the device its id (a ``Device``'s hash is a
    Python call; the entry's executable holds its device, so the id is not reused while the entry lives), and
    the fallback mode changes what compiles."""
    d = params._d
    return (primitive, frozenset(d.items()) if d else _NO_ITEMS, avals, id(device), config._fallback)


def _eager_executable(primitive, params, avals, device, compile=True):
    """``(executable, out_avals)`` of one primitive on ``device`` from the eager cache, compiled on a miss (or,
    with ``compile=False``, ``None`` on a miss)."""
    hit = _eager_entry(primitive, params, avals, device, compile)
    return None if hit is None else (hit.exe, hit.out_avals)


def _eager_entry(primitive, params, avals, device, compile=True):
    """The eager cache's ``_EagerEntry`` of one primitive on ``device``, compiled on a miss (or, with
    ``compile=False``, ``None`` on a miss)."""
    d = params._d
    key = (primitive, frozenset(d.items()) if d else _NO_ITEMS, avals, id(device), config._fallback)  # eager_key
    hit = _eager_d.get(key)
    if hit is None:
        if not compile:
            return None
        from fnarray.devices.partition import compile_eqn
        # ``params._d``: the ``Params``' dict itself (splatting the mapping goes through ``Mapping.keys``)
        out = primitive.abstract_eval(*avals, **getattr(params, "_d", params))
        out_avals = tuple(out) if primitive.multiple_results else (out,)
        hit = _eager_cache.put(key, _EagerEntry(compile_eqn(primitive, params, avals, out_avals, device),
                                                out_avals))
    else:
        hit.used = True
    return hit


# a few entries: one per Python scalar type and NumPy scalar dtype, for each ``enable_x64`` setting (it picks
# both defaults and canonicalisation)
_SCALAR_AVALS: dict = {False: {}, True: {}}


def _scalar_aval(a):
    key = type(a) if not isinstance(a, np.generic) else a.dtype
    cache = _SCALAR_AVALS[config.enable_x64]
    av = cache.get(key)
    if av is None:
        d, w = dtypes.dtype_of_scalar(a)
        av = cache[key] = ShapedArray((), d, w)
    return av


def eager_apply(primitive, args, params):
    """Evaluate one primitive on concrete arguments (arrays or scalars)."""
    # The common case in one pass: arrays (not a subclass) with buffers, on one device, and Python/NumPy scalars
    # (each primitive of a first call of a function takes this path: issue 28 item 2).
    device = None
    committed = False
    avals, bufs = [], []
    for a in args:
        if type(a) is ArrayImpl:
            b = a._buf
            if b is None or (device is not None and a._device is not device):
                break  # deleted or donated, or a second device: the general loop below
            device = a._device
            if a._committed:
                committed = True
            avals.append(a.aval)
            bufs.append(b)
        elif type(a) in _PY_SCALARS:
            avals.append(_scalar_aval(a))
            bufs.append(a)  # converted below, once the device is known
        else:
            break
    else:
        if device is None:
            device = default_device()
        elif not committed and device is not DEFAULT_NOW[0] \
                and device is not current_default():
            return _eager_apply_general(primitive, args, params)  # uncommitted: moved to the default device
        impl = None
        for k, a in enumerate(bufs):
            if type(a) in _PY_SCALARS:
                if impl is None:
                    impl = device.impl
                bufs[k] = impl.scalar_to_device(a, avals[k].dtype, device)
        return _eager_run(primitive, args, params, tuple(avals), bufs, device, committed)
    return _eager_apply_general(primitive, args, params)


_PY_SCALARS = frozenset({bool, int, float, complex})


def _eager_run(primitive, args, params, avals, bufs, device, committed):
    hit = _eager_entry(primitive, params, avals, device)
    rec = array_impl.recording
    if rec is not None and rec.thread == get_ident():  # a general eager call being recorded (eager_tape.record)
        return rec.record(primitive, args, params, avals, bufs, device, committed, hit, _eager_done)
    outs = hit.exe(bufs)
    return _eager_done(primitive, args, hit.out_avals, outs, device, committed)


def _eager_done(primitive, args, out_avals, outs, device, committed):
    """``_eager_run``'s result: the outputs ``outs`` (buffers) of ``primitive`` as arrays."""
    if primitive.multiple_results:
        res = [ArrayImpl.make(av, device, b, committed) for av, b in zip(out_avals, outs, strict=True)]
    else:
        if len(outs) != 1:
            raise ValueError(f"{primitive.name}: {len(outs)} outputs for one result")
        r = ArrayImpl()  # ArrayImpl.make inline
        r.aval, r._device, r._buf, r._committed, r._host = out_avals[0], device, outs[0], committed, None
        res = [r]
    if debug_check is not None:  # fnarray.config.debug_nans / debug_infs (fnarray.devices.nan_check)
        debug_check(primitive, args, res)
    return res if primitive.multiple_results else res[0]


def _eager_apply_general(primitive, args, params):
    """``eager_apply`` for arguments on several devices, array subclasses, deleted arrays and errors."""
    arrays = [x for x in args if isinstance(x, ArrayImpl)]
    committed = any(a._committed for a in arrays)
    device = placement_device(arrays, primitive.name)
    avals, bufs = [], []
    for a in args:
        if type(a) is ArrayImpl:
            avals.append(a.aval)
            b = a._buf
            if b is None:
                a.buf()  # raises: donated or deleted
            bufs.append(b if a._device is device else _transfer(b, a._device, device))
        elif tracing.is_scalar(a):
            av = _scalar_aval(a)
            avals.append(av)
            bufs.append(device.impl.scalar_to_device(a, av.dtype, device))
        elif isinstance(a, ArrayImpl):  # a subclass
            avals.append(a.aval)
            bufs.append(a.buf() if a._device is device else _transfer(a.buf(), a._device, device))
        else:
            raise TypeError(f"{primitive.name} got {type(a).__name__}; expected an fnarray Array or a scalar. "
                            "Wrap NumPy arrays with fnarray.numpy.asarray.")
    return _eager_run(primitive, args, params, tuple(avals), bufs, device, committed)


def eager_direct(primitive, args, params):
    """``bind``'s eager path while ``tracing.plain`` holds (no thread stages, the unprofiled eager apply is installed)
    and no argument is a tracer: ``params`` is ``bind``'s own keyword dict.

    Where every argument is an ``ArrayImpl`` on one device and the eager cache holds the primitive at their avals,
    the backend's one-output implementation itself runs (``_one``: the NumPy function on numpy:0, the MLX rule on
    mlx:0) and its buffer is wrapped: one Python frame between ``bind`` and the backend's operation, against
    ``eager_apply``'s four (issue 28: ~1 us of ~3 us an eager primitive on mlx:0). A hit while this thread
    records (``eager_tape.record``) is recorded with that implementation as its step (``Recorder.record_one``:
    nothing looked up again when the tape is made). Everything else (scalars, several devices, deleted arrays, a
    first call, multiple results, another thread's recording, a step the recorder declines, or ``debug_nans``)
    is ``eager_apply``'s, and so is any error of the direct call (the general path raises its own, translated)."""
    device = None
    committed = False
    avals, bufs = [], []
    for a in args:
        if type(a) is not ArrayImpl:
            return eager_apply(primitive, args, _as_params(params))
        b = a._buf
        if b is None or (device is not None and a._device is not device):
            return eager_apply(primitive, args, _as_params(params))
        device = a._device
        if a._committed:
            committed = True
        avals.append(a.aval)
        bufs.append(b)
    if not committed and device is not None and device is not DEFAULT_NOW[0] \
            and device is not current_default():
        return eager_apply(primitive, args, _as_params(params))  # uncommitted: moved to the default device
    avals = tuple(avals)
    key = (primitive, frozenset(params.items()) if params else _NO_ITEMS, avals, id(device), config._fallback)
    hit = _eager_d.get(key)  # eager_key, inline
    if hit is not None and debug_check is None:
        one = hit.one
        if one is None:
            one = hit.one = _one(hit, primitive, _as_params(params), avals, device)
        if one is not False:
            hit.used = True
            rec = array_impl.recording
            if rec is not None:  # a general eager call being recorded (eager_tape.record): its step, resolved
                if rec.thread == get_ident():
                    try:
                        r = rec.record_one(hit, one, primitive, params, args, bufs, device, committed)
                    except Exception:  # the general path raises its own error, translated (or succeeds)
                        return eager_apply(primitive, args, _as_params(params))
                    if r is not None:
                        return r
                return _eager_run(primitive, args, _as_params(params), avals, bufs, device, committed)
            try:
                out = one(*bufs)
            except Exception:  # the general path raises its own error, translated (or succeeds: an OOM race)
                return eager_apply(primitive, args, _as_params(params))
            r = ArrayImpl()  # ArrayImpl.make inline
            r.aval, r._device, r._buf, r._committed, r._host = hit.out_avals[0], device, out, committed, None
            return r
    if device is None:
        return eager_apply(primitive, args, _as_params(params))
    return _eager_run(primitive, args, _as_params(params), avals, bufs, device, committed)


def _as_params(params):
    """``bind``'s keyword dict as the ``Params`` the general path takes."""
    return Params.taking(params) if params else tracing._NO_PARAMS


def _one(entry, primitive, params, avals, device):
    """``fn(*bufs) -> buf`` of an eager-cache entry of one output: the backend's implementation itself
    (``Backend.eager_call``, numpy) or the executable's ``one`` (mlx: the rule on the device's only stream), where
    the executable translates its errors (``reraise``) and so adds nothing but that; ``False`` elsewhere."""
    if primitive.multiple_results or len(entry.out_avals) != 1:
        return False
    fn = device.impl.eager_call(primitive, params, avals, entry.out_avals)
    if fn is not None:
        return fn
    exe = entry.exe
    if getattr(exe, "reraise", None) is not None:
        fn = getattr(exe, "one", None)
        if fn is not None:
            return fn
    return False


#: ``check(primitive, args, outs)`` while ``config.debug_nans`` or ``debug_infs`` is on, else ``None``.
debug_check = None


tracing.set_eager_apply(eager_apply, eager_direct)
array_impl.set_placement(device_put, array_from_numpy)



def block_until_ready(x, *more):
    """Wait until every array in the pytree ``x`` is computed (``jax.block_until_ready``); with several
    arguments, every array in each (MLX's ``mx.eval(a, b)`` is ``block_until_ready(a, b)``).

    Args:
      x: any pytree; leaves that are not fnarray arrays (NumPy values, scalars, tracers) are passed over.
      *more: further pytrees, waited for in the same way.
    Returns:
      ``x`` itself, or the tuple ``(x, *more)`` when more than one argument is given.
    Raises:
      RuntimeError: a leaf was donated (deleted) before.
    """
    import optree
    by_backend: dict = {}   # each backend waits for its buffers at once (MLX: one ``mx.eval`` of them all)
    for leaf in optree.tree_leaves((x, *more), none_is_leaf=False, namespace="fnarray"):
        if isinstance(leaf, ArrayImpl):
            b = leaf.buf()  # raises: donated or deleted
            impl = leaf._device.impl
            bufs = by_backend.get(impl)
            if bufs is None:
                bufs = by_backend[impl] = []
            bufs.append(b)
    for impl, bufs in by_backend.items():
        impl.block_until_ready_all(bufs)
    return (x, *more) if more else x


def device_get(x):
    """The pytree ``x`` with every fnarray array copied to a NumPy array on the host (``jax.device_get``).

    Args:
      x: any pytree.
    Returns:
      the same structure; ``Array`` leaves become read-only ``numpy.ndarray`` of the same shape and
      dtype (bfloat16 as ``ml_dtypes.bfloat16``); other leaves are returned as they are.
    Raises:
      ConcretizationError: a traced leaf (inside ``jit``/``grad``/``vmap``).
    """
    import optree

    def get(leaf):
        if isinstance(leaf, tracing.Tracer):
            from fnarray.core.errors import ConcretizationError
            raise ConcretizationError("device_get needs concrete arrays; it was given a traced value "
                                      "(call it outside jit/grad/vmap)")
        if isinstance(leaf, ArrayImpl):
            return np.asarray(leaf)
        return leaf

    return optree.tree_map(get, x, none_is_leaf=False, namespace="fnarray")


def import_dlpack(x, device=None, copy=None):
    """An ``ArrayImpl`` over ``x``'s DLPack memory on ``device`` (shared where ``copy`` allows, see the module doc).

    Returns ``None`` where this path does not apply (another backend, a dtype to
    convert, ``copy=True``): the caller then copies as for any NumPy array.
    """
    # An mx.array (the producer's library, not a backend of ours) goes through the copy: its DLPack export raises
    # RuntimeError for bfloat16 ("Unsupported dtype in DLTensor", MLX 0.32) where the copy converts it.
    if copy is True or type(x).__module__.split(".")[0] == "mlx":
        return None
    dev = parse_device(device) if device is not None else default_device()
    got = dev.impl.dlpack_import(x, dev, copy)
    if got is None:
        return None
    buf, dtype = got
    if not _native(dtype):
        return None
    return ArrayImpl.make(ShapedArray(tuple(buf.shape), dtypes.canonicalize(dtype)), dev, buf, device is not None)


def _native(d) -> bool:
    try:
        return dtypes.canonicalize(d) == np.dtype(d)
    except Exception:  # noqa: BLE001 (a dtype fnarray does not have)
        return False
