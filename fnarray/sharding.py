"""Meshes and shardings with JAX's names (``jax.sharding``): ``Mesh``, ``PartitionSpec`` (``P``),
``NamedSharding``, ``SingleDeviceSharding``, ``make_mesh``, ``AxisType``, and the ambient mesh of JAX 0.10
(``set_mesh``/``use_mesh``/``get_mesh``: ``shard_map`` and ``device_put(x, P(...))`` then need no ``mesh=``).

A ``Mesh`` is an n-dimensional array of fnarray devices with a name per dimension. A ``NamedSharding``
splits each dimension of an array over the mesh axes its ``PartitionSpec`` names (``P("x", None)``: rows
over ``x``, columns whole) and replicates it over the others. On the jax backend these become JAX's own
``jax.sharding.Mesh`` / ``NamedSharding`` (``Mesh.jax_mesh``, ``NamedSharding.jax_sharding``), so
``fa.device_put(x, sharding)`` gives a global ``jax.Array`` that XLA partitions (GSPMD).

On the mlx backend a mesh spans the processes of an mlx run, one device per process, 1-D
(``fnarray.lowering.mlx.spmd``: global arrays hold this process's shard; ``shard_map`` runs on
``mx.distributed``).

Backends without a distributed engine (numpy, opencl, webgpu) have one device: a mesh of one device works
there (every axis of size 1: ``shard_map`` is then a ``vmap`` over size-1 named axes); a larger mesh raises
naming the backends that can (jax: ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` on a CPU, GPUs,
TPUs, several processes with ``fnarray.distributed``; mlx: several processes with ``mx.distributed``).
"""

from __future__ import annotations

import contextlib
import enum
import math
import threading
import weakref
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import ShapeError
from fnarray.devices.sharding import Sharding, SingleDeviceSharding

__all__ = ["Mesh", "PartitionSpec", "P", "Sharding", "NamedSharding", "SingleDeviceSharding", "Shard", "make_mesh",
           "ENGINE_BACKENDS", "AxisType", "set_mesh", "use_mesh", "get_mesh", "get_abstract_mesh", "typeof",
           "ArrayType", "reshard"]

#: Backends whose engine runs programs over many devices or processes.
ENGINE_BACKENDS = ("jax", "mlx")
_HOW = ("the jax backend (several XLA devices: GPUs, TPUs, or CPU devices with "
        "XLA_FLAGS=--xla_force_host_platform_device_count=N; or processes started with fnarray.distributed) or "
        "the mlx backend (processes started with fnarray.distributed / mlx.launch)")


def _no_engine(backend: str, n: int) -> ValueError:
    return ValueError(f"a mesh of {n} devices on the {backend} backend: {backend} has no distributed engine and "
                      f"one device, so only a mesh of one device works there. Use {_HOW}.")


class PartitionSpec(tuple):
    """How each dimension of an array is split over mesh axes (``jax.sharding.PartitionSpec``).

    Each entry is ``None`` (not split), a mesh axis name, or a tuple of names (split over their product,
    the first major). Missing trailing entries mean ``None``.
    """

    def __new__(cls, *parts):
        norm = []
        for p in parts:
            if isinstance(p, list):
                p = tuple(p)
            if isinstance(p, tuple) and len(p) == 1:
                p = p[0]
            norm.append(p)
        return super().__new__(cls, norm)

    def __repr__(self):  # as JAX prints it: P('x',), P('x', None), P()
        return "P" + repr(tuple(self))

    def axis_names(self) -> tuple:
        """Every mesh axis name this spec uses, in order."""
        out = []
        for p in self:
            if p is None:
                continue
            out.extend(p if isinstance(p, tuple) else (p,))
        return tuple(out)

    def padded(self, ndim: int) -> "PartitionSpec":
        return PartitionSpec(*(tuple(self) + (None,) * (ndim - len(self))))

    def __reduce__(self):
        return (PartitionSpec, tuple(self))


P = PartitionSpec

#: the last Mesh made per (names, shape, devices), weakly held (``from_jax_sharding`` returns it)
_made: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class AxisType(enum.Enum):
    """How a mesh axis is used (``jax.sharding.AxisType``).

    ``Explicit``: arrays carry their split over the axis in their type (``fa.typeof(x)`` prints
    ``float32[8@x]``) and ``shard_map`` infers ``in_specs`` from it and refuses ``in_specs`` that contradict
    it; ``Auto``: the compiler chooses (``in_specs`` must be given); ``Manual``: inside ``shard_map``.
    """
    Auto = "Auto"
    Explicit = "Explicit"
    Manual = "Manual"

    def __repr__(self):
        return self.value


def _to_devices(devices):
    from fnarray.devices.placement import parse_device
    arr = np.asarray(devices, dtype=object)
    flat = [parse_device(d) if not hasattr(d, "backend") or isinstance(d, str) else d for d in arr.flat]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(arr.shape)


class Mesh:
    """An n-dimensional array of devices with named axes (``jax.sharding.Mesh``).

    Args:
      devices: an array (nested lists or ``np.ndarray``) of fnarray ``Device`` objects or device strings,
        one dimension per axis name; every device once, all of one backend.
      axis_names: one hashable name per dimension.
      axis_types: an ``AxisType`` per axis, or one for all (default ``AxisType.Auto``, as ``jax.sharding.Mesh``).
    Attributes:
      devices, axis_names, axis_types, shape (``{name: size}``), axis_sizes, size, backend, jax_mesh (jax only).
    Raises:
      ``ValueError`` for a repeated device or name, a dimension/name count mismatch, devices of several
      backends, more than one device on a backend without a distributed engine, or, on mlx, a mesh that is
      not 1-D over every process of the run in order (or one of another process's device).
    """

    def __init__(self, devices, axis_names, axis_types=None):
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        self.axis_names = tuple(axis_names)
        self.axis_types = _axis_types(axis_types, len(self.axis_names), AxisType.Auto)
        devs = _to_devices(devices)
        if devs.ndim == 0:
            devs = devs.reshape(1)
        if devs.ndim != len(self.axis_names):
            raise ValueError(f"Mesh: devices of shape {devs.shape} need {devs.ndim} axis names, got "
                             f"{self.axis_names!r}")
        if len(set(self.axis_names)) != len(self.axis_names):
            raise ValueError(f"Mesh: axis names {self.axis_names!r} repeat a name")
        flat = list(devs.flat)
        backends = sorted({d.backend for d in flat})
        if len(backends) != 1:
            raise ValueError(f"Mesh: devices of several backends ({', '.join(backends)}); a mesh holds one "
                             "backend's devices")
        self.backend = backends[0]
        if len(flat) > 1 and self.backend not in ENGINE_BACKENDS:
            raise _no_engine(self.backend, len(flat))
        if len(set(flat)) != len(flat):
            raise ValueError(f"Mesh: a device appears twice in {[str(d) for d in flat]}")
        if self.backend == "mlx":  # one device per process, on mx.distributed (fnarray.lowering.mlx.spmd)
            from fnarray.lowering.mlx.spmd import check_mesh
            check_mesh(devs)
        self.devices = devs
        self._jax = None
        _made[self._key()] = self  # so that a global array's mesh read back from JAX keeps these axis types

    @property
    def shape(self) -> dict:
        return dict(zip(self.axis_names, self.devices.shape, strict=True))

    @property
    def axis_sizes(self) -> tuple:
        return tuple(self.devices.shape)

    @property
    def size(self) -> int:
        return int(self.devices.size)

    @property
    def device_ids(self):
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    @property
    def jax_mesh(self):
        """The same mesh as a ``jax.sharding.Mesh`` (jax backend only)."""
        if self.backend != "jax":
            raise ValueError(f"Mesh.jax_mesh: this mesh holds {self.backend} devices, not jax ones")
        if self._jax is None:
            import jax
            handles = np.vectorize(lambda d: d.handle, otypes=[object])(self.devices)
            # NOTE: JAX's mesh is always Auto: fnarray's programs carry no shardings in their types, and JAX's
            # Explicit mode would ask each traced operation for a sharding rule. The types act at fnarray's level.
            self._jax = jax.sharding.Mesh(handles, self.axis_names)
        return self._jax

    def explicit(self, name) -> bool:
        """Whether the axis ``name`` is ``AxisType.Explicit``."""
        return self.axis_types[self.axis_names.index(name)] is AxisType.Explicit

    def _key(self):
        # axis_types left out: a global array's mesh read back from JAX (always Auto there) equals the one made
        return (self.axis_names, self.devices.shape, tuple(str(d) for d in self.devices.flat))

    def __eq__(self, other):
        return isinstance(other, Mesh) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        shape = ", ".join(f"'{n}': {s}" for n, s in self.shape.items())
        return f"Mesh({shape}, backend={self.backend})"

    def __enter__(self):
        _ambient().append(self)
        return self

    def __exit__(self, *exc):
        _ambient().pop()
        return False


def _axis_types(axis_types, n, default):
    if axis_types is None:
        return (default,) * n
    if isinstance(axis_types, AxisType):
        return (axis_types,) * n
    types = tuple(axis_types)
    if len(types) != n or not all(isinstance(t, AxisType) for t in types):
        raise ValueError(f"Mesh: axis_types {axis_types!r} must be one fnarray.sharding.AxisType per axis ({n})")
    return types


# ----------------------------------------------------------------------------- the ambient mesh (per thread)

_local = threading.local()


def _ambient() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def get_mesh():
    """The ambient mesh of this thread (``jax.sharding.get_mesh``), or ``None`` when none is set."""
    stack = _ambient()
    return stack[-1] if stack else None


def get_abstract_mesh():
    """The ambient mesh (``jax.sharding.get_abstract_mesh``; fnarray has one mesh type), or ``None``."""
    return get_mesh()


class set_mesh(contextlib.AbstractContextManager):  # noqa: N801 (JAX's name, a function there)
    """Make ``mesh`` this thread's ambient mesh (``jax.set_mesh`` / ``jax.sharding.set_mesh``).

    ``set_mesh(mesh)`` sets it until changed; ``with set_mesh(mesh):`` sets it for the block and restores the
    previous one after. ``shard_map`` without ``mesh=``, ``device_put(x, P(...))`` and ``make_mesh``-free
    code read it. Each thread has its own (a new thread starts without one).

    Args:
      mesh: a ``Mesh``, or ``None`` to clear it.
    Raises:
      ``TypeError`` for anything else.
    """

    def __init__(self, mesh):
        if mesh is not None and not isinstance(mesh, Mesh):
            raise TypeError(f"set_mesh: expected a fnarray.sharding.Mesh (fnarray.make_mesh) or None, got "
                            f"{type(mesh).__name__}")
        stack = _ambient()
        self._previous = list(stack)
        stack[:] = [mesh] if mesh is not None else []
        self.mesh = mesh

    def __enter__(self):
        return self.mesh

    def __exit__(self, *exc):
        _ambient()[:] = self._previous
        return False


use_mesh = set_mesh  # JAX 0.6's name for the context manager


def ambient_mesh(what: str) -> Mesh:
    """The ambient mesh, or a ``ValueError`` saying that ``what`` needs one."""
    mesh = get_mesh()
    if mesh is None:
        raise ValueError(f"{what} needs a mesh: pass mesh=, or set one with fnarray.sharding.set_mesh(mesh) "
                         "(a context manager too)")
    return mesh


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """A mesh of the given shape over the first devices (``jax.make_mesh``).

    Args:
      axis_shapes: the size of each axis, e.g. ``(4, 2)``.
      axis_names: a name per axis, e.g. ``("data", "model")``.
      axis_types: an ``AxisType`` per axis (default ``AxisType.Explicit``, as JAX 0.10's ``make_mesh``).
      devices: the devices to use (default: the devices of the default device's backend,
        ``fnarray.devices(backend)``, in order).
    Returns:
      A ``Mesh``.
    Raises:
      ``ValueError`` when there are fewer devices than ``prod(axis_shapes)`` (naming how to get more), or
      for a backend without a distributed engine and more than one device.
    """
    from fnarray.devices import placement
    axis_shapes = tuple(int(s) for s in axis_shapes)
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    if len(axis_shapes) != len(axis_names):
        raise ValueError(f"make_mesh: {len(axis_shapes)} axis sizes {axis_shapes} for {len(axis_names)} names "
                         f"{tuple(axis_names)!r}")
    n = math.prod(axis_shapes)
    if devices is None:
        backend = placement.default_device().backend
        if n > 1 and backend not in ENGINE_BACKENDS:
            from fnarray import distributed
            backend = distributed._state["backend"] or backend  # the devices of the distributed run
        devices = placement.devices(backend)
        if n > 1 and backend not in ENGINE_BACKENDS:
            raise _no_engine(backend, n)
    devs = list(_to_devices(devices).flat)
    if n == 1 and devs and getattr(devs[0], "remote", False):  # a mesh of one device: this process's
        devs = [d for d in devs if not getattr(d, "remote", False)]
    if devs and devs[0].backend == "mlx" and len(devs) != n and n > 1:
        raise ValueError(f"make_mesh: a mesh of shape {axis_shapes} over {len(devs)} mlx devices; on the mlx "
                         f"backend a mesh over processes holds every process once: make_mesh(({len(devs)},), "
                         f"(name,)) here, or start {n} processes (python -m fnarray.distributed.launch -n {n} "
                         "--backend mlx, or mlx.launch)")
    if len(devs) < n:
        raise ValueError(f"make_mesh: a mesh of shape {axis_shapes} needs {n} devices, but only {len(devs)} are "
                         f"given ({', '.join(str(d) for d in devs)}). On a CPU, start Python with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for {n} jax devices.")
    arr = np.empty(n, dtype=object)
    arr[:] = devs[:n]
    return Mesh(arr.reshape(axis_shapes), axis_names, _axis_types(axis_types, len(axis_shapes), AxisType.Explicit))


def check_spec(spec, mesh: Mesh, shape=None, what="PartitionSpec") -> PartitionSpec:
    """``spec`` checked against ``mesh`` (names exist, each once) and, given ``shape``, divisibility.

    Raises: ``ValueError`` naming the axis and the mesh's axes; ``ShapeError`` for a dimension that its mesh
    axes do not divide.
    """
    if not isinstance(spec, PartitionSpec):
        if spec is None:
            spec = PartitionSpec()
        elif isinstance(spec, tuple):
            spec = PartitionSpec(*spec)
        else:
            raise TypeError(f"{what}: expected a PartitionSpec (fnarray.sharding.P(...)), got {spec!r}")
    names = spec.axis_names()
    for n in names:
        if n not in mesh.axis_names:
            raise ValueError(f"{what} {spec!r} names the axis {n!r}, which the mesh does not have (its axes: "
                             f"{mesh.axis_names!r}); use one of those names or None")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} {spec!r} uses a mesh axis twice; each axis may split one dimension")
    if shape is not None:
        if len(spec) > len(shape):
            raise ShapeError(f"{what} {spec!r} has {len(spec)} entries for an array of rank {len(shape)} "
                             f"(shape {tuple(shape)})")
        for dim, (size, part) in enumerate(zip(shape, spec.padded(len(shape)), strict=True)):
            k = parts_size(part, mesh)
            if size % k:
                raise ShapeError(f"{what} {spec!r}: dimension {dim} of shape {tuple(shape)} has size {size}, not "
                                 f"divisible by {k} (the size of mesh axes {part!r}); pad the array or choose "
                                 "another axis")
    return spec


def parts_size(part, mesh: Mesh) -> int:
    """How many pieces one spec entry splits a dimension into."""
    if part is None:
        return 1
    names = part if isinstance(part, tuple) else (part,)
    return math.prod(mesh.shape[n] for n in names)


class Shard(NamedTuple):
    """One addressable piece of a global array (``jax.Shard``): its device, index (slices) and data."""
    device: object
    index: tuple
    replica_id: int
    data: object


class NamedSharding(Sharding):
    """An array split over ``mesh`` as ``spec`` says (``jax.sharding.NamedSharding``).

    Args:
      mesh: a ``Mesh``; spec: a ``PartitionSpec``.
    Raises:
      ``ValueError`` when ``spec`` names an axis the mesh lacks or one twice.
    """

    def __init__(self, mesh: Mesh, spec=None, *, memory_kind=None):
        if not isinstance(mesh, Mesh):
            raise TypeError(f"NamedSharding: expected a fnarray.sharding.Mesh, got {type(mesh).__name__}")
        if memory_kind is not None:
            raise ValueError(f"NamedSharding: fnarray has no memory kinds, got memory_kind={memory_kind!r}")
        self.mesh = mesh
        self.spec = check_spec(spec, mesh, what="NamedSharding spec")
        self._jax = None

    @property
    def device_set(self) -> set:
        return set(self.mesh.devices.flat)

    @property
    def addressable_devices(self) -> set:
        if self.mesh.backend == "jax":
            from fnarray.distributed import process_index
            me = process_index()
            return {d for d in self.mesh.devices.flat if getattr(d.handle, "process_index", 0) == me}
        return {d for d in self.mesh.devices.flat if not getattr(d, "remote", False)}

    @property
    def is_fully_addressable(self) -> bool:
        return self.addressable_devices == self.device_set

    @property
    def is_fully_replicated(self) -> bool:
        return all(parts_size(p, self.mesh) == 1 for p in self.spec)

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    @property
    def memory_kind(self):
        return None

    def shard_shape(self, global_shape) -> tuple:
        """The shape of each shard of an array of ``global_shape``."""
        spec = check_spec(self.spec, self.mesh, global_shape, "NamedSharding spec")
        return tuple(s // parts_size(p, self.mesh) for s, p in zip(global_shape, spec.padded(len(global_shape)),
                                                                   strict=True))

    def devices_indices_map(self, global_shape) -> dict:
        """``{device: index}``: the slices of the global array each device holds."""
        shard = self.shard_shape(global_shape)
        spec = self.spec.padded(len(global_shape))
        out = {}
        for pos in np.ndindex(*self.mesh.axis_sizes):
            coord = dict(zip(self.mesh.axis_names, pos, strict=True))
            index = []
            for dim, part in enumerate(spec):
                names = () if part is None else part if isinstance(part, tuple) else (part,)
                k = 0
                for n in names:  # the first name is the major one
                    k = k * self.mesh.shape[n] + coord[n]
                index.append(slice(k * shard[dim], (k + 1) * shard[dim]) if names else slice(None))
            out[self.mesh.devices[pos]] = tuple(index)
        return out

    def addressable_devices_indices_map(self, global_shape) -> dict:
        mine = self.addressable_devices
        return {d: i for d, i in self.devices_indices_map(global_shape).items() if d in mine}

    @property
    def jax_sharding(self):
        """The same sharding as a ``jax.sharding.NamedSharding`` (jax meshes only)."""
        if self._jax is None:
            import jax
            self._jax = jax.sharding.NamedSharding(self.mesh.jax_mesh, jax.sharding.PartitionSpec(*self.spec))
        return self._jax

    def is_equivalent_to(self, other, ndim: int) -> bool:
        if isinstance(other, NamedSharding):
            return other.mesh == self.mesh and other.spec.padded(ndim) == self.spec.padded(ndim)
        return self.mesh.size == 1 and isinstance(other, SingleDeviceSharding) and \
            other.device_set == self.device_set

    def __eq__(self, other):
        return isinstance(other, NamedSharding) and other.mesh == self.mesh and tuple(other.spec) == tuple(self.spec)

    def __hash__(self):
        return hash(("NamedSharding", self.mesh, tuple(self.spec)))

    def __repr__(self):
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


# ----------------------------------------------------------------------------- global arrays


def device_put_sharded(x, sharding):
    """``x`` (an array or NumPy value, not a pytree) placed as ``sharding`` says: a global array.

    On the jax backend: ``jax.device_put`` with the JAX sharding (each device receives its shard). On a
    mesh of one device: the array committed to that device.
    """
    from fnarray.devices.array_impl import ArrayImpl
    from fnarray.devices.placement import device_put
    if isinstance(sharding, SingleDeviceSharding):
        (dev,) = sharding.device_set
        return device_put(x, dev)
    if not isinstance(x, ArrayImpl):
        x = device_put(x)  # dtype and weak-type rules of fnarray (float64 kept, scalars weak)
    check_spec(sharding.spec, sharding.mesh, x.shape, "device_put: NamedSharding spec")
    mesh = sharding.mesh
    first = mesh.devices.flat[0]
    if mesh.size == 1:
        return device_put(x, first)
    if mesh.backend == "mlx":
        from fnarray.lowering.mlx.spmd import put_global
        return put_global(x, sharding)
    if mesh.backend != "jax":  # pragma: no cover - Mesh refuses such meshes
        raise _no_engine(mesh.backend, mesh.size)
    import jax
    value = x.buf() if x.device.backend == "jax" else np.asarray(x)
    x64 = np.dtype(x.dtype).itemsize == 8
    ctx = jax.enable_x64(True) if x64 else _null()
    with ctx:
        buf = jax.device_put(value, sharding.jax_sharding, may_alias=False)
    return ArrayImpl.make(x.aval, first, buf, committed=True)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def array_sharding(arr):
    """``arr.sharding``: a ``NamedSharding`` for a jax array over several devices, else its device's."""
    dev = arr.device
    if dev.backend == "jax":
        s = arr.buf().sharding
        if len(s.device_set) > 1:
            return from_jax_sharding(s, dev.impl)
    g = _mlx_global(arr)
    if g is not None:
        return g.sharding
    return SingleDeviceSharding(dev)


def _mlx_global(arr):
    """The ``GlobalBuffer`` of a global array over mlx processes, else ``None``."""
    if arr.device.backend != "mlx" or not hasattr(arr.device, "process_index"):
        return None
    from fnarray.lowering.mlx.spmd import GlobalBuffer
    b = arr.buf()
    return b if isinstance(b, GlobalBuffer) else None


def from_jax_sharding(s, backend):
    """A fnarray ``NamedSharding`` for JAX's sharding ``s`` (a ``NamedSharding`` or any ``Sharding``)."""
    import jax
    by_handle = {d.handle: d for d in backend.devices()}
    if isinstance(s, jax.sharding.NamedSharding):
        devs = np.vectorize(lambda h: by_handle[h], otypes=[object])(s.mesh.devices)
        key = (tuple(s.mesh.axis_names), devs.shape, tuple(str(d) for d in devs.flat))
        mesh = _made.get(key) or Mesh(devs, s.mesh.axis_names)
        out = NamedSharding(mesh, PartitionSpec(*s.spec))
        out._jax = s
        return out
    # Another kind (GSPMD's positional sharding): a 1-D mesh over its devices, replicated.
    devs = [by_handle[h] for h in sorted(s.device_set, key=lambda h: h.id)]
    return NamedSharding(Mesh(devs, ("devices",)), PartitionSpec())


def addressable_shards(arr) -> list:
    """``arr.addressable_shards``: a ``Shard`` per device of this process (``jax.Array.addressable_shards``)."""
    from fnarray.core.shaped import ShapedArray
    from fnarray.devices.array_impl import ArrayImpl
    dev = arr.device
    g = _mlx_global(arr)
    if g is not None:
        me = dev.process_index
        spec = g.sharding.spec.padded(arr.ndim)
        split = bool(spec.axis_names())
        aval = ShapedArray(tuple(g.local.shape), arr.dtype, arr.aval.weak_type)
        index = g.sharding.devices_indices_map(arr.shape)[dev]
        return [Shard(dev, index, 0 if split else me, ArrayImpl.make(aval, dev, g.local, committed=True))]
    if dev.backend != "jax":
        return [Shard(dev, tuple(slice(None) for _ in arr.shape), 0, arr)]
    by_handle = {d.handle: d for d in dev.impl.devices()}
    out = []
    for sh in arr.buf().addressable_shards:
        d = by_handle[sh.device]
        aval = ShapedArray(tuple(sh.data.shape), arr.dtype, arr.aval.weak_type)
        out.append(Shard(d, tuple(sh.index), sh.replica_id, ArrayImpl.make(aval, d, sh.data, committed=True)))
    return out


def is_fully_addressable(arr) -> bool:
    if arr.device.backend == "jax":
        return bool(arr.buf().is_fully_addressable)
    return _mlx_global(arr) is None


def reshard(xs, out_shardings):
    """``jax.sharding.reshard``: see ``fnarray.transforms.shard_map.reshard``."""
    from fnarray.transforms.shard_map import reshard as impl
    return impl(xs, out_shardings)


# ----------------------------------------------------------------------------- typeof


class ArrayType(NamedTuple):
    """What ``fa.typeof(x)`` returns (JAX's ``ShapedArray`` with its sharding): shape, dtype, weak type and, for a
    global array, its ``NamedSharding``. Printed as JAX prints it: ``float32[8@x,2]`` names the Explicit mesh axes
    each dimension is split over."""
    shape: tuple
    dtype: object
    weak_type: bool
    sharding: object

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self):
        spec = ()
        if isinstance(self.sharding, NamedSharding):
            spec = self.sharding.spec.padded(len(self.shape))
        dims = []
        for i, size in enumerate(self.shape):
            part = spec[i] if spec else None
            names = () if part is None else part if isinstance(part, tuple) else (part,)
            names = [n for n in names if self.sharding.mesh.explicit(n)]
            at = "" if not names else "@" + (names[0] if len(names) == 1 else "(" + ",".join(map(str, names)) + ")")
            dims.append(f"{size}{at}")
        name = self.dtype.name if dtypes.is_key(self.dtype) else np.dtype(self.dtype).name
        return f"{name}[{','.join(dims)}]"

    __repr__ = __str__


def typeof(x) -> ArrayType:
    """The type of ``x`` (``jax.typeof``): its shape, dtype, weak type and sharding.

    Args:
      x: an array, a traced value, or a Python/NumPy value.
    Returns:
      An ``ArrayType``; ``sharding`` is the array's ``NamedSharding`` for a global array, else ``None`` (traced
      values carry no sharding in fnarray).
    Raises:
      ``TypeError`` for a value that is not an array (``get_aval``'s error).
    """
    from fnarray.core.avals import get_aval
    from fnarray.core.tracing import Tracer
    from fnarray.core.prng import KeyArray
    if isinstance(x, KeyArray):   # typed keys: key<fry> over the batch shape (JAX prints key<fry>[])
        return ArrayType(x.shape, x.dtype, False, None)
    aval = get_aval(x)
    sharding = None
    if not isinstance(x, Tracer) and hasattr(x, "sharding"):
        s = x.sharding
        sharding = s if isinstance(s, NamedSharding) else None
    return ArrayType(tuple(aval.shape), aval.dtype, bool(aval.weak_type), sharding)
