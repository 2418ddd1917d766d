"""The profiler's recording core: spans on per-thread stacks (``fnarray.profiler`` is the public side).

Every layer below ``fnarray.profiler`` may record here without importing upward. When nothing
records, ``recorder`` is ``None``: a hook costs one global lookup, and the slow paths (tracing,
lowering, compiling) call ``span`` unconditionally, which then returns a shared do-nothing context.

A span has a kind (its layer: ``dispatch``, ``trace``, ``lower``, ``compile``, ``transfer``,
``kernel``, ``fallback``, ``loop``), a name and arguments. Spans nest per thread; a span's *self*
time is its duration less its children's, so the layers' self times add up to the time covered.
"""

from __future__ import annotations

import os
import threading
import time

from fnarray.core import log as _log

__all__ = ["recorder", "span", "completed", "device_spans", "Recorder", "Span", "KINDS", "user_frame"]

#: The layers, in the order the summary lists them.
KINDS = ("dispatch", "trace", "lower", "compile", "transfer", "kernel", "fallback", "loop")
#: Most spans one recording keeps (memory stays bounded in a long loop); later ones are counted only.
MAX_SPANS = 2_000_000

recorder: "Recorder | None" = None
_clock = time.perf_counter_ns


class Span:
    """One open span; ``__exit__`` records it. ``args`` may be added to until then."""

    __slots__ = ("rec", "kind", "name", "args", "start", "child_ns", "children", "kids", "parent", "index")

    def __init__(self, rec, kind, name, args):
        self.rec, self.kind, self.name, self.args = rec, kind, name, args
        self.child_ns = 0
        self.children = 0
        self.kids = set()  # the kinds of its children
        self.parent = None
        self.index = -1

    def __enter__(self):
        stack = self.rec._stack()
        self.parent = stack[-1] if stack else None
        stack.append(self)
        self.start = _clock()
        return self

    def __exit__(self, *exc):
        end = _clock()
        self.rec._close(self, end)
        return False


class _Null:
    """The context ``span`` returns when nothing records."""

    args: dict = {}
    kind = name = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _Null()


def span(kind: str, name: str, **args):
    """A context manager recording a span of ``kind`` (one of ``KINDS``) when a recorder is active.

    Lowering and compiling spans also report themselves on the ``fnarray`` logger when they run long
    (``fnarray.core.log.slow_step``: ``FNARRAY_LOG=info``), recording or not."""
    rec = recorder
    inner = _NULL if rec is None else Span(rec, kind, name, args)
    if kind in _LOGGED and _log.logger.isEnabledFor(_log.logging.INFO):
        return _Logged(inner, kind, name, args)
    return inner


def silent(kind: str) -> bool:
    """Whether a ``span`` of ``kind`` would do nothing now (no recorder, and not logged): a hot caller then skips
    making its name and arguments (an eager compile of each new shape on numpy:0 formats the device's name)."""
    return recorder is None and not (kind in _LOGGED and _log.logger.isEnabledFor(_log.logging.INFO))


def completed(kind: str, name: str, start_ns: int, dur_ns: int, **args) -> None:
    """Record a span that already ended, as a child of this thread's innermost open span (when recording).

    For time the host did not watch: a kernel's device time from timestamp queries or profiling events,
    placed on the host clock by the caller (``start_ns`` on ``time.perf_counter_ns``'s clock). The
    enclosing span's self time loses ``dur_ns``, so host time around the kernels stays with it."""
    rec = recorder
    if rec is not None:
        rec.add_completed(kind, name, start_ns, max(int(dur_ns), 0), args)


def device_spans(launches, begin_ns: int, end_ns: int) -> None:
    """Record a ``kernel`` span per launch from the device's own clock, inside the host interval
    ``[begin_ns, end_ns]`` (recording started, wait returned), as children of the innermost open span.

    ``launches``: ``(name, device_start_ns, device_end_ns, args)``, in launch order, on the device's clock
    (OpenCL profiling events, WebGPU timestamp queries); a pair that runs backwards is skipped. The last
    launch is placed to end when the wait returned; a start before ``begin_ns`` (clocks that drift) is
    moved to it. ``device_us`` is added to each span's arguments: its duration is the device's time, so
    that the enclosing span's self time is the host's time around the kernels (recording, submitting,
    waiting), which the profiler counts as ``dispatch``."""
    if recorder is None:
        return
    good = [(n, int(t0), int(t1), a) for n, t0, t1, a in launches if t1 >= t0]
    if not good:
        return
    shift = end_ns - max(t1 for _, _, t1, _ in good)
    for name, t0, t1, args in good:
        start = max(t0 + shift, begin_ns)
        dur = min(t1 - t0, max(end_ns - start, 0))
        completed("kernel", name, start, dur, device_us=(t1 - t0) / 1e3, **args)


#: The kinds of span that report a long run on the ``fnarray`` logger.
_LOGGED = frozenset(("lower", "compile"))


class _Logged:
    """A span (or ``_NULL``) inside a ``slow_step`` that names it."""

    __slots__ = ("inner", "step")

    def __init__(self, inner, kind, name, args):
        where = f" on {args['device']}" if "device" in args and str(args["device"]) not in name else ""
        self.inner = inner
        self.step = _log.slow_step(f"{kind}: {name}{where}")

    def __enter__(self):
        self.step.__enter__()
        return self.inner.__enter__()

    def __exit__(self, *exc):
        try:
            return self.inner.__exit__(*exc)
        finally:
            self.step.__exit__(*exc)


class Record:
    """A finished span: what the trace file and the summary read."""

    __slots__ = ("kind", "name", "args", "start", "dur", "self_ns", "tid", "parent")

    def __init__(self, kind, name, args, start, dur, self_ns, tid, parent):
        self.kind, self.name, self.args = kind, name, args
        self.start, self.dur, self.self_ns, self.tid, self.parent = start, dur, self_ns, tid, parent


class Recorder:
    """Collects spans from every thread (thread-safe: one stack per thread, one lock for the list)."""

    def __init__(self):
        self.records: list[Record] = []
        self.dropped = 0
        self.t0 = _clock()
        self.t_end = None
        self.pid = os.getpid()
        self.sources: dict = {}     # kernel name -> generated source
        self.eqns: dict = {}        # fallback span name -> the equations it ran (for the native-device advice)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tids: dict = {}

    def _stack(self):
        s = getattr(self._local, "stack", None)
        if s is None:
            s = self._local.stack = []
            with self._lock:
                self._tids[threading.get_ident()] = len(self._tids) + 1
            self._local.tid = self._tids[threading.get_ident()]
        return s

    def _close(self, sp: Span, end: int):
        stack = self._stack()
        # Spans close in reverse order of opening (they are context managers); tolerate an exception that
        # unwound through a span whose __exit__ did not run by dropping everything above this one.
        while stack and stack[-1] is not sp:
            stack.pop()
        if stack:
            stack.pop()
        self._record(sp, end)

    def add_completed(self, kind, name, start, dur, args):
        """A span that ended already (``completed``): a child of the thread's innermost open span."""
        stack = self._stack()
        sp = Span(self, kind, name, args)
        sp.parent = stack[-1] if stack else None
        sp.start = start
        self._record(sp, start + dur)

    def _record(self, sp: Span, end: int):
        dur = end - sp.start
        parent = sp.parent
        if parent is not None:
            parent.child_ns += dur
            parent.children += 1
            parent.kids.add(sp.kind)
        rec = Record(sp.kind, sp.name, sp.args, sp.start - self.t0, dur, max(dur - sp.child_ns, 0),
                     self._local.tid, None)
        sp.index = rec  # children closed earlier point at their parent Span; resolved in ``finish``
        with self._lock:
            if len(self.records) < MAX_SPANS:
                self.records.append((rec, sp, parent))
            else:
                self.dropped += 1

    def finish(self):
        """Stop recording: resolve parents; returns the list of ``Record``."""
        self.t_end = _clock()
        out = []
        with self._lock:
            for rec, _sp, parent in self.records:
                rec.parent = parent.index if parent is not None and isinstance(parent.index, Record) else None
                out.append(rec)
            self.records = out
        return out


def user_frame() -> str:
    """``file:line`` of the innermost frame outside the fnarray package (where the user's code called in)."""
    import sys
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(pkg):
        f = f.f_back
    if f is None:
        return "?"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
