"""Where an array lives, in JAX's vocabulary (``Array.sharding``): ``SingleDeviceSharding``, ``NamedSharding``,
``Shard``.

An array on one device has a ``SingleDeviceSharding`` (``jax.sharding.SingleDeviceSharding``'s attributes); a
global array over a mesh has a ``NamedSharding`` (``devices/mesh.py``), re-exported by ``fnarray.sharding``. Which
devices this process addresses, and the library's own sharding, are asked of the mesh's backend
(``Backend.addressable_devices``, ``Backend.native_sharding``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fnarray.devices.mesh import Mesh, check_spec, parts_size

__all__ = ["Sharding", "SingleDeviceSharding", "NamedSharding", "Shard"]


class Sharding:
    """The base of the shardings (``jax.sharding.Sharding``): ``SingleDeviceSharding`` and ``NamedSharding``."""

    __slots__ = ()


class SingleDeviceSharding(Sharding):
    """The whole array on one device (``jax.sharding.SingleDeviceSharding``).

    Attributes:
      device_set: ``{device}``.
      addressable_devices: ``{device}``, every device of this process.
      is_fully_addressable: ``True``; num_devices: 1; memory_kind: ``None``.
    """

    __slots__ = ("_device",)

    def __init__(self, device, *, memory_kind=None):
        if memory_kind is not None:
            raise ValueError(f"SingleDeviceSharding: fnarray has no memory kinds, got memory_kind={memory_kind!r}")
        self._device = device

    @property
    def device_set(self) -> set:
        return {self._device}

    @property
    def addressable_devices(self) -> set:
        return {self._device}

    @property
    def is_fully_addressable(self) -> bool:
        return True

    @property
    def is_fully_replicated(self) -> bool:
        return True

    @property
    def num_devices(self) -> int:
        return 1

    @property
    def memory_kind(self):
        return None

    def shard_shape(self, global_shape) -> tuple:
        """The shape of the one shard: the whole ``global_shape``."""
        return tuple(global_shape)

    def is_equivalent_to(self, other, ndim: int) -> bool:
        return isinstance(other, SingleDeviceSharding) and other._device == self._device

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding) and other._device == self._device

    def __hash__(self):
        return hash(("SingleDeviceSharding", self._device))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device})"


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
        self._native = None

    @property
    def device_set(self) -> set:
        return set(self.mesh.devices.flat)

    @property
    def addressable_devices(self) -> set:
        return self.mesh.impl.addressable_devices(self.mesh)

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
        """The same sharding as a ``jax.sharding.NamedSharding`` (jax meshes only: ``ValueError`` elsewhere;
        ``Backend.native_sharding``)."""
        if self._native is None:
            self._native = self.mesh.impl.native_sharding(self)
        return self._native

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
