"""``fnarray.experimental``: the names JAX programs import from ``jax.experimental`` (``shard_map``, ``pallas``,
``ode.odeint``, the ``enable_x64`` / ``disable_x64`` context managers)."""

from __future__ import annotations

from fnarray.core.config import x64_scope

__all__ = ["enable_x64", "disable_x64"]


def enable_x64(new_val: bool = True):
    """A context manager: 64-bit dtypes kept (``new_val=True``) or narrowed to 32-bit (``False``) inside the
    ``with`` block, in this thread only, as ``jax.experimental.enable_x64``; the global
    ``fnarray.config.enable_x64`` and other threads are unaffected. ``TypeError`` for a non-bool ``new_val``."""
    return x64_scope(new_val)


def disable_x64():
    """A context manager: 64-bit dtypes narrowed to 32-bit inside the ``with`` block, in this thread only, as
    ``jax.experimental.disable_x64``."""
    return x64_scope(False)
