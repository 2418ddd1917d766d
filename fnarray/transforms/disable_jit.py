"""``fnarray.disable_jit``: a scope inside which jitted functions run their Python function, eagerly
(``jax.disable_jit``).

``off`` is the switch ``Jitted.__call__`` reads first (one attribute read a call). Inside the scope a jitted
function calls ``fun(*args, **kwargs)`` itself, on the default device (or the one given to ``jit(device=)``), so
Python ``print``, breakpoints and NumPy conversions see concrete arrays; nothing is traced, cached or compiled
(``fnarray.numpy``'s own functions, which eager calls run as cached programs, are unchanged: their values are the
same). The switch is process-wide, not per thread.
"""

from __future__ import annotations

import contextlib

__all__ = ["disable_jit"]

off = False  # read by Jitted.__call__


@contextlib.contextmanager
def disable_jit(disable: bool = True):
    """A context manager inside which ``fnarray.jit`` functions run eagerly, op by op (``jax.disable_jit``).

    Args:
      disable: ``True`` turns compilation off inside the scope; ``False`` turns it back on (inside an outer
        ``disable_jit()``). Scopes nest; leaving one restores the state it found.

    Returns:
      A context manager (``with fnarray.disable_jit(): ...``); it yields ``None``.

    Raises:
      Nothing of its own: errors of the function surface where its Python line runs, with concrete values (what
      raised ``ConcretizationError`` under ``jit``, a Python branch on a value, just runs).
    """
    global off
    before, off = off, bool(disable)
    try:
        yield
    finally:
        off = before
