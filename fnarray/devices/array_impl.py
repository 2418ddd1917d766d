"""``ArrayImpl``: a concrete array, a buffer on one device."""

from __future__ import annotations

import numpy as np

from fnarray.core.array import Array
from fnarray.core.shaped import ShapedArray
from fnarray.devices import dlpack
from fnarray.devices.lookup import parse_device
from fnarray.devices.sharding import Shard, SingleDeviceSharding

__all__ = ["ArrayImpl", "set_placement"]

_ABSENT = object()

#: The recorder of a general eager call (``fnarray.transforms.eager_tape.Recorder``) while one records, else None:
#: a host read of any array's value (``_value``, DLPack) then taints it (its tape is not made from the record).
recording = None


class ArrayImpl(Array):
    """A concrete, immutable array: an abstract value, a device and its buffer.

    ``committed`` is JAX's placement flag: an array made without a device
    follows its operands (uncommitted); ``device_put`` commits it.
    """

    __slots__ = ("aval", "_device", "_buf", "_committed", "_host", "__weakref__")

    # No ``__init__``: ``ArrayImpl()`` then five slot stores is what the call paths (eager operators, jit's hot
    # path) inline, ~0.13 us under a Python ``__init__`` frame, a tenth of an eager op on small arrays.
    # ``make`` is the constructor everywhere else.

    @staticmethod
    def make(aval: ShapedArray, device, buf, committed: bool = False) -> "ArrayImpl":
        """An array of abstract value ``aval`` whose buffer ``buf`` is on ``device``.

        Args:
          aval: the ``ShapedArray`` (shape, dtype, weak type) the buffer holds.
          device: the ``Device`` holding ``buf``.
          buf: the backend's buffer (a NumPy array on numpy:0, a ``jax.Array`` on jax:0, ...).
          committed: JAX's placement flag (``device_put`` commits).

        Returns:
          The ``ArrayImpl``.
        """
        r = ArrayImpl()
        r.aval, r._device, r._buf, r._committed, r._host = aval, device, buf, committed, None
        return r

    @property
    def device(self):
        """The ``Device`` holding this array."""
        return self._device

    def devices(self):
        return {self._device}

    @property
    def committed(self) -> bool:
        return self._committed

    def buf(self):
        b = self._buf
        if b is None:
            raise RuntimeError(f"this array ({self.aval.str_short()}) was donated to a jitted call "
                               "or deleted, and can no longer be used")
        return b

    def call_view(self) -> tuple:
        """``(buffer or None if donated/deleted, device, committed)`` in one call: what a jitted call reads of
        each argument (the upper layers read no private field)."""
        return self._buf, self._device, self._committed

    def is_deleted(self) -> bool:
        return self._buf is None

    def delete(self) -> None:
        """Free the buffer; later uses raise ``RuntimeError``."""
        if self._buf is not None:
            self._device.impl.delete(self._buf)
        self._buf = None
        self._host = None

    def _value(self) -> np.ndarray:
        if recording is not None:
            recording.tainted = True  # (any thread's read: a spurious taint only costs a traced tape)
        h = self._host
        if h is None:
            h = self._device.impl.to_host(self.buf())
            if h.dtype != self.aval.dtype:
                h = h.astype(self.aval.dtype)
            if h.flags.writeable:
                h.flags.writeable = False
            self._host = h
        return h

    def _concrete(self, what):
        return self._value()

    def __array__(self, dtype=None, copy=None):
        v = self._value()
        if dtype is not None and np.dtype(dtype) != v.dtype:
            if copy is False:
                raise ValueError(f"converting {v.dtype} to {np.dtype(dtype)} needs a copy")
            return v.astype(dtype)
        if copy:
            return v.copy()
        return v

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=_ABSENT):
        """DLPack export: the buffer itself for consumers that keep it read-only, else a copy.

        NumPy (DLPack >= 1.0 with ``copy=``) shares; PyTorch (which ignores the read-only flag)
        and legacy consumers (JAX 0.10) get a copy, on the device for a jax:0 array; an
        explicit ``copy=False`` shares. See ``fnarray.devices.dlpack``.
        """
        if recording is not None:
            recording.tainted = True
        kw = {"stream": stream, "max_version": max_version, "dl_device": dl_device}
        if copy is not _ABSENT:  # whether the consumer speaks the 2023.12 protocol (passes copy=) matters
            kw["copy"] = copy
        return dlpack.export_capsule(self, kw)

    def __dlpack_device__(self):
        return self._device.impl.dlpack_device(self)

    def to_device(self, device, /, *, stream=None):
        """Array API ``to_device``: the same values on ``device`` (committed there)."""
        return _placement.device_put(self, device)

    @property
    def sharding(self):
        """How the array is laid out (``jax.Array.sharding``): a ``SingleDeviceSharding`` (whole on
        ``self.device``), or a ``NamedSharding`` for a global array over a mesh (``Backend.array_sharding``)."""
        s = self._device.impl.array_sharding(self)
        return SingleDeviceSharding(self._device) if s is None else s

    @property
    def addressable_shards(self) -> list:
        """The shards on this process's devices (``jax.Array.addressable_shards``), each a ``Shard``."""
        shards = self._device.impl.addressable_shards(self)
        if shards is None:  # whole on its device: one shard, the array itself
            return [Shard(self._device, tuple(slice(None) for _ in self.aval.shape), 0, self)]
        return shards

    @property
    def is_fully_addressable(self) -> bool:
        """Whether every shard is on this process's devices (``jax.Array.is_fully_addressable``)."""
        return self._device.impl.is_fully_addressable(self)

    def block_until_ready(self):
        """Wait until the value is computed; returns ``self``."""
        b = self._buf
        if b is None:
            self.buf()  # raises: donated or deleted
        self._device.impl.block_until_ready(b)
        return self

    def __repr__(self):
        if self._buf is None:
            return f"Array(<deleted>, shape={self.shape}, dtype={self.dtype.name})"
        if not self.is_fully_addressable and not self.sharding.is_fully_replicated:
            return (f"Array(<split over processes: this one holds {len(self.addressable_shards)} shard(s)>, "
                    f"shape={self.shape}, dtype={self.dtype.name}, sharding={self.sharding!r})")
        v = self._value()
        body = np.array2string(v, separator=", ", prefix="Array(")
        weak = ", weak_type=True" if self.aval.weak_type else ""
        if v.size == 0:
            return f"Array([], shape={self.shape}, dtype={self.dtype.name}{weak})"
        return f"Array({body}, dtype={self.dtype.name}{weak})"

    def __str__(self):
        return str(self._value())

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self._value().item(), spec)
        return format(str(self), spec)

    def __reduce__(self):
        return (_rebuild, (np.array(self._value()), self.aval.weak_type, str(self._device), self._committed))

    def __deepcopy__(self, memo):
        # A new buffer on the same device, same placement (a donation of one must not delete the other).
        dev = self._device
        return ArrayImpl.make(self.aval, dev, dev.impl.to_device(self._value(), dev), self._committed)

    __copy__ = lambda self: self.__deepcopy__({})  # noqa: E731


def _rebuild(value, weak, device=None, committed=False):
    """Unpickle: on the same device where this process has it, else uncommitted on the default device."""
    dev = None
    if device is not None:
        try:
            dev = parse_device(device)
        except Exception:  # noqa: BLE001 (another machine: that backend may not exist here)
            dev, committed = None, False
    return _placement.array_from_numpy(value, dev, weak_type=weak, committed=bool(committed and dev is not None))


class _Placement:
    """``device_put`` and ``array_from_numpy`` of ``devices.placement``, which imports this module and installs
    them with ``set_placement`` (``to_device`` and unpickling call them)."""

    device_put = array_from_numpy = None


_placement = _Placement()


def set_placement(device_put, array_from_numpy) -> None:
    """Install the placement functions (called once by ``devices.placement`` when it is imported)."""
    _placement.device_put, _placement.array_from_numpy = device_put, array_from_numpy

