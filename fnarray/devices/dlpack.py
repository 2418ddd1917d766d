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

In (``fnarray.numpy.from_dlpack``, through ``placement.import_dlpack`` and the backend's ``dlpack_import``):
shares the producer's memory by default (the
array API's ``copy=None``), as ``jax.numpy.from_dlpack`` does: on numpy:0 the buffer
is a read-only NumPy view of the producer's memory, on jax:0 the ``jax.Array`` from
``jax.dlpack.from_dlpack`` (a ``jax.Array`` is taken as it is). Sharing with an
immutable producer (JAX) is safe; a mutable one (a torch tensor) must not be written
afterwards, or pass ``copy=True``. Other backends (mlx, opencl, webgpu) copy.
"""

from __future__ import annotations

__all__ = ["export_capsule", "shares_with"]


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
    return arr.device.impl.dlpack_capsule(arr, share, kw)
