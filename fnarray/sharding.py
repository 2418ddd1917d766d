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

The types live in the devices layer (``fnarray/devices/mesh.py``: ``Mesh``, ``PartitionSpec``, ``AxisType``, the
ambient mesh; ``fnarray/devices/sharding.py``: the shardings); what differs per backend is a ``Backend`` hook
(``check_mesh``, ``put_global``, ``array_sharding``, ``addressable_shards``... in ``fnarray/devices/backend.py``).
This module re-exports them with ``make_mesh``, ``reshard`` and ``typeof``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fnarray import distributed
from fnarray.core import dtypes
from fnarray.core.avals import get_aval
from fnarray.core.prng import KeyArray
from fnarray.core.tracing import Tracer
from fnarray.devices import placement
from fnarray.devices.backend import get_backend, no_engine_error
from fnarray.devices.mesh import (AxisType, Mesh, P, PartitionSpec, axis_types_of, get_abstract_mesh, get_mesh,
                                  set_mesh, to_devices, use_mesh)
# Not in __all__, but importable from here before the types moved into devices/: kept so.
from fnarray.devices.mesh import ambient_mesh, check_spec, parts_size  # noqa: F401
from fnarray.devices.placement import put_sharded as device_put_sharded  # noqa: F401
from fnarray.devices.sharding import NamedSharding, Shard, Sharding, SingleDeviceSharding

__all__ = ["Mesh", "PartitionSpec", "P", "Sharding", "NamedSharding", "SingleDeviceSharding", "Shard", "make_mesh",
           "ENGINE_BACKENDS", "AxisType", "set_mesh", "use_mesh", "get_mesh", "get_abstract_mesh", "typeof",
           "ArrayType", "reshard"]
#: Backends whose engine runs programs over many devices or processes (``fnarray.distributed.ENGINES``; the
#: code asks each backend's ``Backend.spmd``).
ENGINE_BACKENDS = tuple(distributed.ENGINES)


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
    axis_shapes = tuple(int(s) for s in axis_shapes)
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    if len(axis_shapes) != len(axis_names):
        raise ValueError(f"make_mesh: {len(axis_shapes)} axis sizes {axis_shapes} for {len(axis_names)} names "
                         f"{tuple(axis_names)!r}")
    n = math.prod(axis_shapes)
    if devices is None:
        backend = placement.default_device().backend
        if n > 1 and not get_backend(backend).spmd:
            backend = distributed.engine_backend() or backend  # the devices of the distributed run
        devices = placement.devices(backend)
        if n > 1 and not get_backend(backend).spmd:
            raise no_engine_error(backend, n)
    devs = list(to_devices(devices).flat)
    if n == 1 and devs and getattr(devs[0], "remote", False):  # a mesh of one device: this process's
        devs = [d for d in devs if not getattr(d, "remote", False)]
    if devs:
        devs = devs[0].impl.mesh_devices(devs, axis_shapes)
    if len(devs) < n:
        raise ValueError(f"make_mesh: a mesh of shape {axis_shapes} needs {n} devices, but only {len(devs)} are "
                         f"given ({', '.join(str(d) for d in devs)}). On a CPU, start Python with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={n} for {n} jax devices.")
    arr = np.empty(n, dtype=object)
    arr[:] = devs[:n]
    return Mesh(arr.reshape(axis_shapes), axis_names, axis_types_of(axis_types, len(axis_shapes), AxisType.Explicit))



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
    if isinstance(x, KeyArray):   # typed keys: key<fry> over the batch shape (JAX prints key<fry>[])
        return ArrayType(x.shape, x.dtype, False, None)
    aval = get_aval(x)
    sharding = None
    if not isinstance(x, Tracer) and hasattr(x, "sharding"):
        s = x.sharding
        sharding = s if isinstance(s, NamedSharding) else None
    return ArrayType(tuple(aval.shape), aval.dtype, bool(aval.weak_type), sharding)
