"""``jax.named_scope`` and ``jax.named_call``: names for parts of a program, accepted for JAX's code.

JAX writes the names into the HLO's metadata for profilers; fnarray's IR has no place for them, so the scope
is a context manager that does nothing and ``named_call`` returns the function itself. They exist so that
programs written for JAX run unchanged.
"""

from __future__ import annotations

import contextlib

__all__ = ["named_call", "named_scope"]


@contextlib.contextmanager
def named_scope(name: str):
    """A context manager naming the operations inside it (``jax.named_scope``); no effect in fnarray.

    Args:
      name: a string.
    Returns:
      a context manager.
    Raises:
      ``TypeError`` when ``name`` is not a string (as JAX).
    """
    if not isinstance(name, str):
        raise TypeError(f"named_scope: name must be a str, got {type(name).__name__}")
    yield


def named_call(fun, *, name: str | None = None):
    """``fun`` under a name for profilers (``jax.named_call``); returned unchanged in fnarray.

    Args:
      fun: a function. name: the name (ignored).
    Returns:
      ``fun`` itself.
    Raises:
      nothing.
    """
    return fun
