"""``SingleDeviceSharding``: where an array lives, in JAX's vocabulary (``Array.sharding``).

An array on one device has this sharding (``jax.sharding.SingleDeviceSharding``'s attributes); a global
array over a mesh has a ``fnarray.sharding.NamedSharding``.
"""

from __future__ import annotations

__all__ = ["Sharding", "SingleDeviceSharding"]


class Sharding:
    """The base of the shardings (``jax.sharding.Sharding``): ``SingleDeviceSharding`` and
    ``fnarray.sharding.NamedSharding``."""

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
