"""fnarray's log: the ``fnarray`` logger (``logging``), ``FNARRAY_LOG``, and progress lines for long steps.

``FNARRAY_LOG=info`` (or ``debug``, ``warning``) at import attaches a handler that writes the ``fnarray``
logger's records at that level to standard error; without it fnarray configures nothing and a program
configures the ``fnarray`` logger as any other (``logging.getLogger("fnarray").setLevel(logging.INFO)``
with a handler of its own).

``slow_step(what)`` wraps a step that may take long (a compile, an export): a step that passes
``SLOW_S`` seconds logs ``what: still running after N s`` at INFO every ``EVERY_S`` seconds from one
watchdog thread, and ``what: done in N s`` at INFO when it ends; at DEBUG every step logs when it starts.
A step shorter than ``SLOW_S`` logs nothing at INFO and costs a lock and two dict operations.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

__all__ = ["logger", "slow_step", "configure_from_env", "SLOW_S", "EVERY_S", "LEVELS"]

logger = logging.getLogger("fnarray")
#: Seconds after which a step reports itself; then every ``EVERY_S`` seconds while it runs.
SLOW_S = 2.0
EVERY_S = 5.0
#: The values ``FNARRAY_LOG`` takes.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

_lock = threading.Lock()
_active: dict = {}          # id -> [what, start, next report]
_thread: "threading.Thread | None" = None
_handler: "logging.Handler | None" = None


def configure_from_env(value: "str | None" = None) -> None:
    """Attach a standard-error handler at the level ``FNARRAY_LOG`` names (``value`` overrides it).

    Raises:
      ValueError: a value that is not one of ``LEVELS`` (case-insensitive).
    """
    global _handler
    value = os.environ.get("FNARRAY_LOG", "") if value is None else value
    if not value:
        return
    level = LEVELS.get(value.strip().lower())
    if level is None:
        raise ValueError(f"FNARRAY_LOG={value!r}: expected one of {', '.join(LEVELS)} (or unset for no log)")
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(asctime)s fnarray %(levelname)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(_handler)
    logger.setLevel(level)


def _watch() -> None:
    """The watchdog thread: reports the steps that run past their next report time."""
    while True:
        time.sleep(0.25)
        now = time.perf_counter()
        due = []
        with _lock:
            for entry in _active.values():
                if now >= entry[2]:
                    due.append((entry[0], now - entry[1]))
                    entry[2] += EVERY_S
        for what, elapsed in due:
            logger.info("%s: still running after %.0f s", what, elapsed)


class slow_step:
    """A context manager reporting a step that takes more than ``SLOW_S`` seconds (see the module docstring).

    ``what`` is a string, or a callable returning one (called only when a line is logged)."""

    __slots__ = ("what", "start", "key")

    def __init__(self, what):
        self.what = what

    def _text(self) -> str:
        return self.what() if callable(self.what) else str(self.what)

    def __enter__(self):
        global _thread
        if not logger.isEnabledFor(logging.INFO):
            self.key = None
            return self
        self.start = time.perf_counter()
        self.key = id(self)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s ...", self._text())
        with _lock:
            _active[self.key] = [self._text() if callable(self.what) else self.what, self.start,
                                 self.start + SLOW_S]
            if _thread is None:
                _thread = threading.Thread(target=_watch, name="fnarray-log-watchdog", daemon=True)
                _thread.start()
        return self

    def __exit__(self, *exc):
        if self.key is None:
            return False
        with _lock:
            _active.pop(self.key, None)
        elapsed = time.perf_counter() - self.start
        if elapsed >= SLOW_S:
            logger.info("%s: %s in %.1f s", self._text(), "failed" if exc[0] is not None else "done", elapsed)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: done in %.3f s", self._text(), elapsed)
        return False


def logged_step(describe):
    """A decorator running the function inside ``slow_step(describe(*args, **kwargs))``."""
    import functools

    def decorate(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with slow_step(lambda: describe(*args, **kwargs)):
                return fn(*args, **kwargs)
        return run
    return decorate
