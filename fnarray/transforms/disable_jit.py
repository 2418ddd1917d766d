"""``fnarray.disable_jit``: a scope inside which jitted functions run their Python function, eagerly
(``jax.disable_jit``).

``off`` is the switch ``Jitted.__call__`` reads first (one attribute read a call). Inside the scope a jitted
function calls ``fun(*args, **kwargs)`` itself, on the default device (or the one given to ``jit(device=)``), so
Python ``print``, breakpoints and NumPy conversions see concrete arrays; nothing is traced, cached or compiled
(``fnarray.numpy``'s own functions, which eager calls run as cached programs, are unchanged: their values are the
same). The scope is the thread's own, as JAX's: ``off`` says that some thread has one open (jit's hot path reads
only that while none is), ``disabled()`` whether the calling thread's innermost scope turned compilation off.
Before, ``off`` was the process's one switch: a scope in one thread made another thread's jitted functions run in
Python, and two threads' overlapping scopes left it on after both had closed (the second restored what the first
had set).
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["disable_jit"]

off = False  # read by Jitted.__call__: some thread has a scope open (then ``disabled()`` decides)
_open = 0  # the scopes open, all threads together (under ``_lock``)
_lock = threading.Lock()
_local = threading.local()


def disabled() -> bool:
    """Whether the calling thread's innermost ``disable_jit`` scope turned compilation off."""
    return getattr(_local, "disabled", False)


@contextlib.contextmanager
def disable_jit(disable: bool = True):
    """A context manager inside which ``fnarray.jit`` functions run eagerly, op by op (``jax.disable_jit``).

    Args:
      disable: ``True`` turns compilation off inside the scope; ``False`` turns it back on (inside an outer
        ``disable_jit()``). Scopes nest; leaving one restores the state it found. A scope holds for the thread
        that opened it (as JAX's): other threads' jitted functions still compile.

    Returns:
      A context manager (``with fnarray.disable_jit(): ...``); it yields ``None``.

    Raises:
      Nothing of its own: errors of the function surface where its Python line runs, with concrete values (what
      raised ``ConcretizationError`` under ``jit``, a Python branch on a value, just runs).
    """
    global off, _open
    before, _local.disabled = disabled(), bool(disable)
    with _lock:
        _open += 1
        off = True
    try:
        yield
    finally:
        _local.disabled = before
        with _lock:
            _open -= 1
            off = _open > 0
