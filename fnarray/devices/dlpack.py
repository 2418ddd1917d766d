"""DLPack in and out: which exchanges share memory and which copy.

fnarray arrays are immutable, so what is shared must stay unwritten:

Out (``Array.__dlpack__``, called by ``np.from_dlpack``, ``torch.from_dlpack``,
``jnp.from_dlpack``...): the buffer itself (the host NumPy buffer of a numpy:0
array, the ``jax.Array`` of a jax:0 array: no host copy) goes only to a consumer
that takes a read-only DLPack >= 1.0 capsule *and* keeps it read-only. A consumer
of the 2023.12 protocol, which passes ``copy=`` and ``max_version >= (1, 0)``
(NumPy >= 2.1), does. PyTorch 2.13 passes only ``max_version``, accepts the
read-only flag and then writes through it (measured: a ``torch.from_dlpack`` of a
read-only NumPy array mutated it), so it gets a copy, unless it asks for
``copy=False`` (``torch.from_dlpack(x, copy=False)``), which shares: the tensor must
then not be written. A legacy consumer (no ``max_version``: JAX 0.10's
``jnp.from_dlpack``) cannot be told "read-only" and gets a copy; for a jax:0 array
that copy stays on the device (``jnp.array(buf, copy=True)``).

In (``fnarray.numpy.from_dlpack``): shares the producer's memory by default (the
array API's ``copy=None``), as ``jax.numpy.from_dlpack`` does: on numpy:0 the buffer
is a read-only NumPy view of the producer's memory, on jax:0 the ``jax.Array`` from
``jax.dlpack.from_dlpack`` (a ``jax.Array`` is taken as it is). Sharing with an
immutable producer (JAX) is safe; a mutable one (a torch tensor) must not be written
afterwards, or pass ``copy=True``. Other backends (mlx, opencl, webgpu) copy.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.shaped import ShapedArray

__all__ = ["export_capsule", "import_dlpack", "shares_with"]


def shares_with(kwargs: dict) -> bool:
    """Whether a consumer calling ``__dlpack__(**kwargs)`` may get our buffer itself (see the module doc)."""
    mv = kwargs.get("max_version")
    if mv is None or tuple(mv) < (1, 0):
        return False
    copy = kwargs.get("copy", "absent")
    return copy is False or (copy is None and "copy" in kwargs)


def export_capsule(arr, kwargs: dict):
    """The DLPack capsule ``arr.__dlpack__(**kwargs)`` returns (shared or copied by ``shares_with``)."""
    kw = {k: v for k, v in kwargs.items() if v is not None or k == "copy"}
    kw.pop("stream", None)
    if kw.get("copy") is None:
        kw.pop("copy", None)
    share = kwargs.get("copy") is not True and shares_with(kwargs)
    if kwargs.get("copy") is False and not share:
        raise BufferError("fnarray arrays are immutable: without a copy they can only be handed to a DLPack >= 1.0 "
                          "consumer as a read-only capsule; call with max_version=(1, 0) or allow a copy")
    if arr.device.backend == "jax":
        buf = arr.buf()
        if not share:
            import jax.numpy as jnp
            buf = jnp.array(buf, copy=True)  # on the same device: no host round trip
        kw.pop("copy", None)
        return buf.__dlpack__(**kw)
    v = arr._value()
    if not share:
        kw.pop("copy", None)
        v = np.array(v, copy=True)  # writeable: a legacy capsule can be exported
    return v.__dlpack__(**kw)


def import_dlpack(x, device=None, copy=None):
    """An ``ArrayImpl`` over ``x``'s DLPack memory on ``device`` (shared where ``copy`` allows, see the module doc).

    Returns ``None`` where this path does not apply (another backend, a dtype to
    convert, ``copy=True``): the caller then copies as for any NumPy array.
    """
    from fnarray.devices.array_impl import ArrayImpl
    from fnarray.devices.placement import default_device, parse_device

    if copy is True or type(x).__module__.split(".")[0] == "mlx":
        return None
    dev = parse_device(device) if device is not None else default_device()
    committed = device is not None
    if dev.backend == "numpy" and type(dev.impl).to_device is _numpy_to_device():
        v = np.from_dlpack(x, copy=copy)
        if not _native(v.dtype):
            return None
        if v.flags.writeable:
            v = v.view()
            v.flags.writeable = False
        return ArrayImpl.make(ShapedArray(v.shape, dtypes.canonicalize(v.dtype)), dev, v, committed)
    if dev.backend == "jax":
        import jax
        import jax.dlpack
        if isinstance(x, jax.Array):
            buf = x
        else:
            # Scoped x64, as the jax backend's own transfers: a float64 tensor stays float64.
            with jax.enable_x64(True):
                buf = jax.dlpack.from_dlpack(x, copy=copy)
        if buf.devices() != {dev.handle}:
            if copy is False:
                raise BufferError(f"from_dlpack(copy=False): the array is on {buf.devices()}, not on {dev}")
            with jax.enable_x64(True):
                buf = jax.device_put(buf, dev.handle)
        if not _native(np.dtype(buf.dtype)):
            return None
        return ArrayImpl.make(ShapedArray(tuple(buf.shape), dtypes.canonicalize(np.dtype(buf.dtype))), dev, buf,
                         committed)
    return None


def _numpy_to_device():
    from fnarray.lowering.numpy.backend import NumpyBackend
    return NumpyBackend.to_device


def _native(d) -> bool:
    try:
        return dtypes.canonicalize(d) == np.dtype(d)
    except Exception:  # noqa: BLE001 (a dtype fnarray does not have)
        return False

