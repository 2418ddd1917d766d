"""``fnarray.experimental``: the names JAX programs import from ``jax.experimental`` (``shard_map``, ``pallas``,
``ode.odeint``, the ``enable_x64`` / ``disable_x64`` context managers, ``io_callback``)."""

from __future__ import annotations

from fnarray._callback import io_callback
from fnarray.core.config import x64_scope

__all__ = ["enable_x64", "disable_x64", "io_callback"]


def enable_x64(new_val: bool = True):
    """A context manager: 64-bit dtypes kept (``new_val=True``) or narrowed to 32-bit (``False``) inside the
    ``with`` block, in this thread only, as ``jax.enable_x64`` (JAX 0.10's name, ``fnarray.enable_x64`` here too;
    ``jax.experimental.enable_x64`` before); the global ``fnarray.config.enable_x64`` and other threads are
    unaffected.

    Args:
      new_val: ``True`` keeps 64-bit dtypes (JAX's 64-bit defaults) inside the block, ``False`` narrows them.

    Returns:
      A context manager (``with fnarray.enable_x64():``) restoring the thread's previous setting at its end.

    Raises:
      TypeError: ``new_val`` is not a ``bool``.
    """
    return x64_scope(new_val)


def disable_x64():
    """A context manager: 64-bit dtypes narrowed to 32-bit inside the ``with`` block, in this thread only, as
    ``jax.experimental.disable_x64``."""
    return x64_scope(False)
