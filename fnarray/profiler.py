"""``fnarray.profiler``: where a running program spends its time, layer by layer.

``with fa.profiler.trace("trace.json"):`` records, for every jitted call and eager operation
on every backend, spans of these kinds (the *layers*):

- ``dispatch``: fnarray's own Python time (flattening, cache look-ups, placement, launching);
- ``trace``: building the IR (a jit cache miss, control-flow bodies, ``grad``'s linearization);
- ``lower``: the backend's lowering, kernel scheduling on the kernel backends;
- ``compile``: numpy code generation, XLA, ``mx.compile``, OpenCL program builds, WGSL pipelines;
- ``transfer``: host -> device and device -> host copies, with their bytes (and, for reads, the
  user's line that asked for the value);
- ``kernel``: running an executable, waited for; on opencl and webgpu one span per kernel launch,
  named by kernel, whose duration is the device's own time (``device_us``: OpenCL profiling events,
  WebGPU timestamp queries) where the device offers it, else the launch's wall time until its wait;
  the host's time around the launches of a call (recording, submitting, waiting) is ``dispatch``;
- ``fallback``: a segment of a program run on numpy:0 because the device cannot run it;
- ``loop``: one iteration of a loop that the host drives (``while``/``scan`` on mlx, opencl, webgpu).

The trace file is Chrome / Perfetto trace-event JSON (``{"traceEvents": [...]}``, complete
events ``ph: "X"``, times in microseconds): open it in https://ui.perfetto.dev or
``chrome://tracing``. ``fa.profiler.summary()`` prints a table of the layers' self times (a span's
time less its children's) and a verdict naming the dominant layer and what to do about it.

Under the profiler every launch is waited for, so that time lands in the layer that spent it
(asynchronous dispatch is suspended while recording); the ``dispatch`` times are those of the
profiled call path, which does a little more bookkeeping than the unprofiled one. On numpy:0 an
eager operation's arithmetic runs inside its dispatch (NumPy computes as it is called).

When nothing records, the call path is untouched: ``trace`` swaps the profiled jit call, eager
apply and transfer functions in when it starts and back when it ends, and the lower layers test
one module global (``fnarray.core.profile.recorder``) on their slow paths and once per kernel
executable call. ``benchmarks/call_overhead.py`` measures the call path.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import threading

from fnarray.core import profile as _core
from fnarray.core import tracing
from fnarray.core.passes import consts_as_inputs
from fnarray.core.shaped import ShapedArray

__all__ = ["trace", "start_trace", "stop_trace", "summary", "source", "Profile", "Summary", "LAYERS"]

LAYERS = _core.KINDS
_lock = threading.Lock()
_last: list = []          # the last finished Profile
_saved: dict = {}         # what was swapped in: name -> original
_patched: dict = {}       # id(backend) -> (backend, {attr: had_own_attr})


# ------------------------------------------------------------------------------ what the profiler swaps in


def _jit_call(self, *args, **kwargs):
    """``Jitted.__call__`` while recording: the same stages, each in its span, every launch waited for."""
    from fnarray import tree_util
    from fnarray.core import primitives as P
    name = getattr(self.fun, "__name__", "fun")
    with _core.span("dispatch", f"jit({name})", where=_core.user_frame()) as sp:
        statics, leaves, in_tree, avals = self._prepare(args, kwargs)
        traced = tracing.trace_level() > 0 or any(isinstance(x, tracing.Tracer) for x in leaves)
        entry = self._trace(statics, leaves, in_tree, avals)
        if traced or any(isinstance(c, tracing.Tracer) for c in entry.consts):
            closed = consts_as_inputs(entry.program)
            outs = P.call.bind(*entry.consts, *leaves, program=closed, name=name)
            return tree_util.tree_unflatten(entry.out_tree, outs)
        device = self._target_device(leaves)
        _watch(device.impl)
        sp.args.update(function=name, signature=avals, statics=statics, device=str(device))
        ex = self._executable(entry, (in_tree, avals, statics), device, self._donated_positions(args))
        return self._run(_TimedEntry(ex, f"run {name} on {device}", device), leaves, device, args)


class _TimedEntry:
    """A compiled jit entry whose executable runs in a ``kernel`` span and is waited for."""

    __slots__ = ("const_bufs", "out_avals", "out_tree", "device", "exe")

    def __init__(self, ex, label, device):
        self.const_bufs, self.out_avals, self.out_tree, self.device = ex.const_bufs, ex.out_avals, ex.out_tree, device
        self.exe = _timed(ex.exe, label, device)


def _timed(exe, label, device):
    impl = device.impl

    def run(bufs):
        with _core.span("kernel", label, device=str(device)) as sp:
            outs = exe(bufs)
            # Kernels and fallback segments that were spans of their own were waited for: what is still
            # pending is copies into the results' buffers; otherwise the wait is the computation itself.
            waited = bool(sp.kids & _WAITED)
            with _core.span("transfer" if waited else "kernel", "wait for results"):
                for b in outs:
                    impl.block_until_ready(b)
            if waited:  # what is left of this span is launching the kernels
                sp.kind = "dispatch"
                if "fallback" in sp.kids:
                    sp.args["fallback"] = True
                if "kernel" in sp.kids:  # host time around kernel launches: recording, submitting, waiting
                    sp.args["launches"] = True
        return outs
    return run


_WAITED = frozenset({"kernel", "fallback"})


def _eager(primitive, args, params):
    with _core.span("dispatch", primitive.name, where=_core.user_frame()):
        return _saved["eager_apply"](primitive, args, params)


def _eager_executable(primitive, params, avals, device):
    _watch(device.impl)
    exe, out_avals = _saved["eager_executable"](primitive, params, avals, device)
    return _timed(exe, f"{primitive.name} on {device}", device), out_avals


def _nbytes(x) -> int:
    try:
        return int(getattr(x, "nbytes", 0))
    except (TypeError, ValueError):
        return 0


def _timed_to_device(backend, orig, array, device):
    import numpy as np
    a = np.asarray(array)
    with _core.span("transfer", f"host->{device}", bytes=a.nbytes, shape=a.shape, dtype=a.dtype.name):
        return orig(a, device)


def _timed_to_host(backend, orig, buf):
    with _core.span("transfer", f"{backend.name}->host", where=_core.user_frame()) as sp:
        out = orig(buf)
        sp.args["bytes"] = _nbytes(out)
    return out


def _watch(backend):
    """Time ``backend``'s transfers while recording (patched on its instance, removed at the end)."""
    if id(backend) in _patched or _core.recorder is None:
        return
    with _lock:
        if id(backend) in _patched:
            return
        own = {k: k in vars(backend) for k in ("to_device", "to_host")}
        _patched[id(backend)] = (backend, own, {k: vars(backend).get(k) for k in own})
        backend.to_device = functools.partial(_timed_to_device, backend, backend.to_device)
        backend.to_host = functools.partial(_timed_to_host, backend, backend.to_host)


def _install(rec):
    from fnarray.devices import backend as backend_mod
    from fnarray.devices import placement
    from fnarray.transforms.jit import Jitted
    with _lock:
        if _core.recorder is not None:
            raise RuntimeError("fnarray.profiler: a trace is already being recorded; stop it first "
                               "(fnarray.profiler.stop_trace()) or nest nothing")
        _saved.update(jit_call=Jitted.__call__, eager_apply=placement.eager_apply,
                      eager_executable=placement._eager_executable)
        _core.recorder = rec
        Jitted.__call__ = _jit_call
        placement._eager_executable = _eager_executable
        tracing.set_eager_apply(_eager)
    for b in list(backend_mod._BACKENDS.values()):
        _watch(b)


def _uninstall():
    from fnarray.devices import placement
    from fnarray.transforms.jit import Jitted
    with _lock:
        _core.recorder = None
        Jitted.__call__ = _saved.pop("jit_call")
        placement._eager_executable = _saved.pop("eager_executable")
        tracing.set_eager_apply(_saved.pop("eager_apply"))
        for backend, own, old in _patched.values():
            for k, had in own.items():
                if had:
                    setattr(backend, k, old[k])
                else:
                    vars(backend).pop(k, None)
        _patched.clear()


# ------------------------------------------------------------------------------ the public API


class Profile:
    """A finished recording: ``records`` (spans), ``trace_events()``, ``save(path)``, ``summary()``."""

    def __init__(self, rec: "_core.Recorder"):
        self.records = rec.finish()
        self.dropped = rec.dropped
        self.sources = dict(rec.sources)
        self.wall_ns = rec.t_end - rec.t0
        self.pid = rec.pid

    def trace_events(self) -> dict:
        """The Chrome / Perfetto trace-event JSON object: ``{"traceEvents": [...]}``."""
        events = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0, "args": {"name": "fnarray"}}]
        for r in self.records:
            events.append({"name": r.name, "cat": r.kind, "ph": "X", "pid": self.pid, "tid": r.tid,
                           "ts": r.start / 1e3, "dur": r.dur / 1e3,
                           "args": {k: _jsonable(v) for k, v in r.args.items() if not k.startswith("_")}})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"producer": "fnarray.profiler", "dropped_spans": self.dropped}}

    def save(self, path) -> None:
        """Write the trace-event JSON to ``path``."""
        with open(path, "w") as f:
            json.dump(self.trace_events(), f)

    def summary(self) -> "Summary":
        return Summary(self)


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, ShapedArray):
        return v.str_short()
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def start_trace(path=None) -> None:
    """Start recording (``jax.profiler.start_trace``'s name); ``stop_trace()`` ends it and writes ``path``."""
    rec = _core.Recorder()
    rec.path = path
    _install(rec)


def stop_trace() -> Profile:
    """Stop recording; write the trace file given to ``start_trace`` (if any); returns the ``Profile``."""
    rec = _core.recorder
    if rec is None:
        raise RuntimeError("fnarray.profiler.stop_trace: no trace is being recorded (start_trace first)")
    _uninstall()
    prof = Profile(rec)
    if rec.path is not None:
        prof.save(rec.path)
    _last[:] = [prof]
    return prof


@contextlib.contextmanager
def trace(path=None):
    """Record every jitted call and eager operation inside the block.

    Args:
      path: where to write the Chrome/Perfetto trace-event JSON at the end (``None``: nowhere; the
        ``Profile`` is still available to ``summary()``).

    Returns:
      A context manager; ``as h`` gives a holder whose ``h.profile`` is the ``Profile`` once the block
      has ended (as ``jax.profiler.trace``, which writes a TensorBoard trace instead).

    Raises:
      RuntimeError: a trace is already being recorded (traces do not nest).

    Example::

        with fa.profiler.trace("step.json"):
            for _ in range(10):
                params = step(params, batch)
        fa.profiler.summary()
    """
    start_trace(path)
    holder = _Holder()
    try:
        yield holder
    finally:
        holder.profile = stop_trace()


class _Holder:
    profile: "Profile | None" = None


def source(kernel_name: str) -> str:
    """The generated source of a kernel named in the last profile (OpenCL C or WGSL)."""
    if not _last:
        raise RuntimeError("fnarray.profiler.source: nothing was recorded yet (use fnarray.profiler.trace)")
    try:
        return _last[0].sources[kernel_name]
    except KeyError:
        names = ", ".join(sorted(_last[0].sources)[:10]) or "none"
        raise KeyError(f"no kernel {kernel_name!r} in the last profile; its kernels: {names}") from None


def summary(profile: "Profile | None" = None, file=None, print: bool = True) -> "Summary":  # noqa: A002
    """Print the summary of ``profile`` (default: the last one recorded) once, and return it.

    Args:
      profile: a ``Profile`` (``trace(...) as h`` gives ``h.profile``); default the last trace's.
      file: where to print (default ``sys.stdout``).
      print: ``False`` to return the summary without printing it.

    Returns:
      A ``Summary``: ``str(s)`` (and ``s.text``) is the printed table; ``.dominant``, ``.verdict``,
      ``.shares``, ``.totals_ns``, ``.counts`` for programs. Its ``repr`` is one line, so that calling
      ``fa.profiler.summary()`` at a prompt shows the table once (as ``pstats.Stats.print_stats``,
      which prints and returns its ``Stats``).

    Raises:
      RuntimeError: nothing was recorded yet and no ``profile`` was given.

    The table lists each layer's self time, its share of the recorded time, the number of spans
    and their mean; the verdict names the dominant layer and what to do about it.
    """
    if profile is None:
        if not _last:
            raise RuntimeError("fnarray.profiler.summary: nothing was recorded yet (use fnarray.profiler.trace)")
        profile = _last[0]
    if not isinstance(profile, Profile):
        raise TypeError(f"fnarray.profiler.summary: profile must be a Profile (what trace()'s holder or stop_trace() "
                        f"gives), got {type(profile).__name__}; call summary() for the last one")
    s = Summary(profile)
    if print:
        out = file if file is not None else sys.stdout
        out.write(s.text + "\n")
    return s


# ------------------------------------------------------------------------------ the summary


class Summary:
    """Layer totals (``totals_ns``, ``counts``, ``shares``), the ``dominant`` layer and a ``verdict``."""

    def __init__(self, profile: Profile):
        self.profile = profile
        recs = profile.records
        self.totals_ns = {k: 0 for k in LAYERS}
        self.counts = {k: 0 for k in LAYERS}
        for r in recs:
            self.totals_ns[r.kind] = self.totals_ns.get(r.kind, 0) + r.self_ns
            self.counts[r.kind] = self.counts.get(r.kind, 0) + 1
        total = sum(self.totals_ns.values())
        self.total_ns = total
        self.shares = {k: (v / total if total else 0.0) for k, v in self.totals_ns.items()}
        # Tracing, lowering and compiling are one cost for the verdict: what a cache miss pays.
        groups = {k: v for k, v in self.totals_ns.items() if k not in _COMPILING}
        groups["compile"] = sum(self.totals_ns[k] for k in _COMPILING)
        # Copies made because a segment fell back to numpy:0 are the fallback's cost, for the verdict.
        moved = sum(r.self_ns for r in recs if r.kind == "transfer" and _under_fallback(r))
        groups["transfer"] -= moved
        groups["fallback"] += moved
        self.fallback_transfer_ns = moved
        self.dominant = max(groups, key=groups.get) if total else None
        self.dominant_share = groups[self.dominant] / total if total else 0.0
        self.verdict = _verdict(self, recs) if total else "nothing was recorded"

    def __str__(self):
        p = self.profile
        lines = [f"fnarray profile: {len(p.records)} spans, {self.total_ns / 1e6:.1f} ms in fnarray calls "
                 f"of {p.wall_ns / 1e6:.1f} ms recorded",
                 f"{'layer':10s} {'total ms':>10s} {'share':>7s} {'count':>8s} {'mean us':>9s}"]
        for k in self.totals_ns:
            n = self.counts[k]
            t = self.totals_ns[k]
            mean = f"{t / n / 1e3:9.1f}" if n else f"{'-':>9s}"
            lines.append(f"{k:10s} {t / 1e6:10.2f} {self.shares[k] * 100:6.1f}% {n:8d} {mean}")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)

    @property
    def text(self) -> str:
        """The table that ``summary()`` prints."""
        return str(self)

    def __repr__(self):
        lead = f"{self.dominant} {self.dominant_share * 100:.0f}%" if self.dominant else "nothing recorded"
        return f"<fnarray.profiler.Summary: {lead} of {self.total_ns / 1e6:.1f} ms; print(s) for the table>"


def _top(counter: dict, n=3):
    return sorted(counter.items(), key=lambda kv: -kv[1])[:n]


_COMPILING = ("trace", "lower", "compile")


def _under_fallback(r) -> bool:
    p = r.parent
    while p is not None:
        if p.kind == "fallback" or p.args.get("fallback"):
            return True
        p = p.parent
    return False


def _verdict(s: Summary, recs) -> str:
    kind = s.dominant
    share = f"{s.dominant_share * 100:.0f}%"
    return _VERDICTS[kind](s, recs, share)


def _dispatch_verdict(s, recs, share):
    around = [r for r in recs if r.kind == "dispatch" and r.args.get("launches")]
    around_ns = sum(r.self_ns for r in around)
    if around and 2 * around_ns >= s.totals_ns["dispatch"]:
        return _launch_verdict(s, recs, share, around, around_ns)
    calls = [r for r in recs if r.kind == "dispatch" and r.parent is None]
    n = len(calls)
    mean = sum(r.dur for r in calls) / n / 1e3 if n else 0.0
    names: dict = {}
    for r in calls:
        names[r.name] = names.get(r.name, 0) + 1
    top = ", ".join(f"{k} x{v}" for k, v in _top(names))
    wheres: dict = {}
    for r in calls:
        w = r.args.get("where")
        if w:
            wheres[w] = wheres.get(w, 0) + 1
    where = f" (most from {_top(wheres, 1)[0][0]})" if wheres else ""
    return (f"dispatch dominates ({share}): {n} top-level calls averaging {mean:.1f} us each ({top}){where}. "
            "Many tiny calls: jit a larger function (put the whole loop body or step under fa.jit), "
            "or batch the work (fa.vmap, larger arrays) so each call does more.")


def _launch_verdict(s, recs, share, around, around_ns):
    """Dispatch that is mostly host time around kernel launches (opencl, webgpu): name that layer."""
    ids = {id(r) for r in around}
    launches = sum(1 for r in recs if r.kind == "kernel" and r.parent is not None and id(r.parent) in ids)
    per_call = launches / len(around)
    per_launch = around_ns / launches / 1e3 if launches else 0.0
    head = (f"dispatch dominates ({share}), {around_ns / s.total_ns * 100:.0f}% of the time in the host's work "
            f"around kernel launches (recording and submitting them, waiting for the device): {len(around)} calls "
            f"of {per_call:.0f} kernels each, ~{per_launch:.1f} us per launch beyond the kernels' own device time.")
    if per_call < 4:
        return (f"{head} Many tiny calls: jit a larger function (put the whole loop body or step under fa.jit) or "
                "batch the work (fa.vmap, larger arrays) so that each call launches more work.")
    return (f"{head} Give each launch more work: a larger batch per call, fa.vmap over many small problems, or more "
            "of the loop under one fa.jit; on a CPU driver (PoCL, lavapipe) part of it is the driver's own cost per "
            "launch and per wait.")


def _compile_verdict(s, recs, share):
    # Which functions were traced more than once, and what changed between their signatures.
    traced: dict = {}
    for r in recs:
        if r.kind == "trace" and r.parent is not None and r.parent.kind == "dispatch" and r.parent.args.get("function"):
            traced.setdefault(r.parent.args["function"], []).append(r.parent)
    layer = "compilation" if s.totals_ns["compile"] >= max(s.totals_ns["trace"], s.totals_ns["lower"]) else \
        ("tracing" if s.totals_ns["trace"] >= s.totals_ns["lower"] else "lowering")
    head = (f"compile dominates ({share}: trace {s.shares['trace'] * 100:.0f}%, lower "
            f"{s.shares['lower'] * 100:.0f}%, compile {s.shares['compile'] * 100:.0f}%; mostly {layer})")
    worst = sorted(traced.items(), key=lambda kv: -len(kv[1]))
    if worst and len(worst[0][1]) > 1:
        fun, calls = worst[0]
        sigs = [", ".join(_jsonable(a) for a in c.args["signature"]) for c in calls]
        statics = {repr(c.args.get("statics")) for c in calls}
        if len(set(sigs)) > 1:
            shown = "; ".join(f"({x})" for x in list(dict.fromkeys(sigs))[:4])
            return (f"{head}: {fun} was traced and compiled {len(calls)} times because its input shapes change "
                    f"from call to call: {shown}{' ...' if len(set(sigs)) > 4 else ''}. Keep shapes fixed "
                    "(pad batches to one size, or bucket them into a few sizes) so one compiled program is reused.")
        if len(statics) > 1:
            shown = "; ".join(list(statics)[:4])
            return (f"{head}: {fun} was recompiled {len(calls)} times because its static arguments change: "
                    f"{shown}. Pass values that change as regular (traced) arguments, not static_argnums.")
    funs = ", ".join(sorted(traced)) or "the eager operations"
    return (f"{head}: first calls of {funs} (a cold cache). This is a one-time cost per input signature; "
            "if every process pays it, set fa.config.compilation_cache_dir (FNARRAY_CACHE_DIR) to keep compiled "
            "programs across processes, and time the steady state after a warm-up call.")


def _transfer_verdict(s, recs, share):
    tr = [r for r in recs if r.kind == "transfer"]
    d2h = [r for r in tr if r.name.endswith("->host")]
    h2d = [r for r in tr if r.name.startswith("host->")]
    nb = sum(int(r.args.get("bytes", 0) or 0) for r in tr)
    wheres: dict = {}
    for r in d2h:
        w = r.args.get("where")
        if w:
            wheres[w] = wheres.get(w, 0) + 1
    where = ", ".join(f"{k} x{v}" for k, v in _top(wheres))
    return (f"transfer dominates ({share}): {len(d2h)} device->host and {len(h2d)} host->device copies, "
            f"{nb / 1e6:.1f} MB in all" + (f"; reads from {where}" if where else "") +
            ". Data moves to the host inside the loop: keep values on the device between steps (no np.asarray, "
            "float(), .item() or print of results each step; device_put inputs once) and read back once at the end.")


def _kernel_verdict(s, recs, share):
    by: dict = {}
    dev: dict = {}
    for r in recs:
        if r.kind == "kernel":
            by[r.name] = by.get(r.name, 0) + r.self_ns
            if "device_us" in r.args:
                dev[r.name] = dev.get(r.name, 0.0) + r.args["device_us"]
    top = _top(by)
    parts = []
    first_launch = False
    for name, t in top:
        d = f", device {dev[name] / 1e3:.2f} ms" if name in dev else ""
        if name in dev and t / 1e3 > 5 * dev[name] + 10_000:
            first_launch = True
        parts.append(f"{name} {t / 1e6:.2f} ms{d}")
    src = [n for n, _ in top if n in s.profile.sources]
    hint = (f" Their generated source: fa.profiler.source({src[0]!r})." if src else
            " Look at the program with fa.jit(f).lower(*args).as_text().")
    if first_launch:
        hint += (" Where the wall time far exceeds the device time, the driver compiled the kernel at its first "
                 "launch (PoCL, Mesa): a one-time cost; profile after a warm-up call.")
    kernels = [r for r in recs if r.kind == "kernel"]
    n = len(kernels)
    # The median launch, not the mean: a first launch that compiles (PoCL, Mesa) or one wait for a lazy
    # backend's queue (mlx) is an outlier among hundreds of launches.
    timed = sorted(r.args["device_us"] for r in kernels if "device_us" in r.args)
    median_us = timed[len(timed) // 2] if timed else (
        sorted(r.self_ns for r in kernels)[n // 2] / 1e3 if n else 0.0)
    if n >= _TINY_LAUNCHES and median_us < _TINY_LAUNCH_US:
        # Many launches that each do a few microseconds of work (jax:0 runs each eager operation as its own
        # XLA executable, opencl and webgpu a kernel each): the fixed cost per launch dominates, not arithmetic.
        return (f"kernel time dominates ({share}) in {n} launches of {median_us:.1f} us each "
                f"({'measured by the device, ' if timed else ''}median; by time: {'; '.join(parts)}): the launches' "
                "fixed cost, not the arithmetic. Many tiny operations: jit a larger function (put the whole loop "
                "body or step under fa.jit) or batch the work (fa.vmap, larger arrays) so that each launch does "
                "more; a faster device would not help.")
    return (f"kernel time dominates ({share}): the computation itself; by time: {'; '.join(parts)}.{hint} "
            "Use a device that computes faster, fewer or smaller operations, or a better-fusing formulation.")


# A profile whose kernels are at least this many launches whose median takes less than this many microseconds
# (the device's own time where it measures it, else the wall time of the launch and its wait) is dominated by
# launches, not arithmetic. lavapipe's submit-and-wait alone is ~125-220 us (docs/traps.md) and its timestamps
# give ~110 us to a kernel of 4 elements.
_TINY_LAUNCHES = 50
_TINY_LAUNCH_US = 300.0


def _fallback_verdict(s, recs, share):
    from fnarray.core.errors import BackendUnavailable
    from fnarray.devices.backend import backend_names, get_backend
    by: dict = {}
    eqns: dict = {}
    for r in recs:
        if r.kind == "fallback":
            by[r.name] = by.get(r.name, 0) + r.dur
            eqns.setdefault(r.name, r.args.get("_eqns") or [])
    name, _ = _top(by, 1)[0]
    native = []
    for bname in backend_names():
        try:
            b = get_backend(bname)
        except BackendUnavailable:
            continue
        for d in b.devices():
            if b.capabilities(d).reference:
                continue
            try:
                if eqns[name] and all(b.supports(e, d) is None for e in eqns[name]):
                    native.append(str(d))
            except Exception:  # noqa: BLE001 (advice only: a backend that cannot judge is skipped)
                continue
    where = (f"; {', '.join(native)} would run it natively" if native else
             "; no other loaded device runs it natively (numpy:0 does)")
    moved = f", with {s.fallback_transfer_ns / 1e6:.1f} ms of copies to and from numpy:0" \
        if s.fallback_transfer_ns else ""
    return (f"fallback dominates ({share}{moved}): {name}{where}. Move that computation to a device with the primitive "
            "and dtype (fa.device_put / jit(device=...)), or change the dtype (float64 -> float32 on webgpu).")


def _loop_verdict(s, recs, share):
    n = s.counts["loop"]
    return (f"host-driven loop overhead dominates ({share}): {n} iterations driven from Python, each with a "
            "launch (and a predicate readback for while_loop). Prefer fori_loop/scan with a static trip count, "
            "fewer and larger iterations, or the jax backend, which runs loops on the device.")


def _trace_verdict(s, recs, share):
    return _compile_verdict(s, recs, share)


_VERDICTS = {"dispatch": _dispatch_verdict, "trace": _trace_verdict, "lower": _trace_verdict,
             "compile": _compile_verdict, "transfer": _transfer_verdict, "kernel": _kernel_verdict,
             "fallback": _fallback_verdict, "loop": _loop_verdict}
