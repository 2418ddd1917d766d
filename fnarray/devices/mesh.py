"""Meshes and partition specs with JAX's names (``jax.sharding``): ``Mesh``, ``PartitionSpec`` (``P``), ``AxisType``,
and the per-thread ambient mesh (``set_mesh``/``use_mesh``/``get_mesh``). ``fnarray.sharding`` is the public
facade that re-exports them.

What differs per backend (how many devices a mesh may hold, the library's own mesh) is asked of the mesh's
backend: ``Backend.check_mesh``, ``Backend.native_mesh`` (``devices/backend.py``).
"""

from __future__ import annotations

import contextlib
import enum
import math
import threading
import weakref

import numpy as np

from fnarray.core.errors import ShapeError
from fnarray.devices.lookup import parse_device

__all__ = ["Mesh", "PartitionSpec", "P", "AxisType", "set_mesh", "use_mesh", "get_mesh", "get_abstract_mesh",
           "ambient_mesh", "known_mesh", "check_spec", "parts_size", "to_devices", "axis_types_of"]


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

#: the last Mesh made per (names, shape, devices), weakly held (``known_mesh`` returns it)
_made: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def known_mesh(devices: np.ndarray, axis_names) -> "Mesh":
    """The ``Mesh`` of ``devices`` (an object array of ``Device``) and ``axis_names`` made last in this process,
    with its axis types, or a new one (Auto axes): a global array's mesh read back from a library (JAX) is then
    the one the program made."""
    key = (tuple(axis_names), devices.shape, tuple(str(d) for d in devices.flat))
    return _made.get(key) or Mesh(devices, axis_names)


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


def to_devices(devices) -> np.ndarray:
    """``devices`` (nested lists or an array of ``Device`` objects or device strings) as an object array of
    ``Device``."""
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
        self.axis_types = axis_types_of(axis_types, len(self.axis_names), AxisType.Auto)
        devs = to_devices(devices)
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
        flat[0].impl.check_mesh(devs)  # more than one device needs a distributed engine; mlx: one per process
        if len(set(flat)) != len(flat):
            raise ValueError(f"Mesh: a device appears twice in {[str(d) for d in flat]}")
        self.devices = devs
        self._native = None
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
    def impl(self):
        """The ``Backend`` of the mesh's devices."""
        return self.devices.flat[0].impl

    @property
    def jax_mesh(self):
        """The same mesh as a ``jax.sharding.Mesh`` (jax backend only: ``ValueError`` elsewhere;
        ``Backend.native_mesh``)."""
        if self._native is None:
            self._native = self.impl.native_mesh(self)
        return self._native

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


def axis_types_of(axis_types, n, default):
    """An ``AxisType`` per axis of ``n`` from ``axis_types`` (``None``: ``default``; one ``AxisType``: for every axis);
    ``ValueError`` for anything else."""
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
