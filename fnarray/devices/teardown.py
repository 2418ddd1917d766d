"""Process exit that cannot crash in a driver: device state outlives the interpreter's teardown.

At exit CPython first runs ``atexit`` handlers, then clears modules and collects what is left in no
particular order, and only then do the C libraries' own destructors run. A backend's driver objects (an
OpenCL context, queue, memory pool and built programs; a wgpu device, queue and buffer pool) freed in that
second phase are released while kernels may still run on the driver's threads, and in whatever order the
collector meets them: that is where the opencl:0 segfault at exit came from (one run in two of a
notebook-style program, issue 27). So each backend registers its device state here when it starts:

1. at ``atexit``, every registered ``finish`` waits for the device's queued work (nothing runs on a driver
   thread afterwards);
2. the states themselves are then kept alive for good (one reference the collector never drops), so
   teardown never destroys a context, queue or pool; arrays and kernels the user still holds are freed
   against live ones (their release is a reference count in the driver), and the operating system takes
   everything back when the process ends, as it would for any process that never freed them.

``python -c`` programs, notebooks and pytest runs all exit through this path.
"""

from __future__ import annotations

import atexit
import ctypes
import threading

__all__ = ["keep_until_exit"]

_kept: list = []
_lock = threading.Lock()
_registered = False


def keep_until_exit(state, finish=None) -> None:
    """Keep ``state`` alive until the process ends, and call ``finish()`` (wait for its queued work) at exit.

    Args:
      state: a backend's per-device state (context, queues, pools, caches).
      finish: a callable taking no arguments, or ``None``; exceptions it raises at exit are ignored (the
        device may already be lost).
    """
    global _registered
    with _lock:
        _kept.append((state, finish))
        if not _registered:
            atexit.register(_at_exit)
            _registered = True


def _at_exit() -> None:
    with _lock:
        kept = list(_kept)
    for _, finish in reversed(kept):
        if finish is not None:
            try:
                finish()
            except Exception:  # noqa: BLE001 (a lost device at exit: nothing left to wait for)
                pass
    # One reference that module teardown cannot clear: the states (and the driver objects they own) are
    # never finalized by Python; the process's exit reclaims them.
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
