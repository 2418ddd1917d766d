"""CPython's automatic garbage collection paused while fnarray builds kernel IR (``paused``).

Scheduling a program into kernels and rendering their sources allocates hundreds of thousands of small objects
(the kernel IR's frozen dataclasses and the tuples holding them). Each allocation counts toward the collector's
thresholds, and the full collections they set off walk the whole heap, JAX's, NumPy's and the user's objects
included: 0.3-0.4 s of the transformer step's 2 s first call on opencl:0 (docs/performance.md, "opencl:0 first
call with warm caches", twenty-second session). The IR holds no reference cycles, so those collections find
nothing of it to free. ``paused()`` turns automatic collection off for its block, and back on when the last block
open in any thread ends (only if it was on when the first began); an explicit ``gc.collect()`` still runs.

Used by ``lowering/kernels/lowered.py`` around scheduling and compiling a program (the kernel backends: opencl,
webgpu); user code (tracing) runs outside it.
"""

from __future__ import annotations

import contextlib
import gc
import threading

__all__ = ["paused"]

_lock = threading.Lock()
_state = {"open": 0, "was_on": False}   # blocks open in all threads; whether collection was on at the first


@contextlib.contextmanager
def paused():
    """A block in which CPython's automatic garbage collection does not run (the module docstring)."""
    with _lock:
        if _state["open"] == 0:
            _state["was_on"] = gc.isenabled()
            gc.disable()
        _state["open"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["open"] -= 1
            if _state["open"] == 0 and _state["was_on"]:
                gc.enable()
