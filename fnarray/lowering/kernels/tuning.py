"""Autotuning: pick one of a kernel's variants for a device, by a cost model or by timing, and remember it.

``choose(device, signature, candidates, measure, default)`` is the one entry point: the kernel groups
(through the schedule, ``docs/internals.md``, "Tunable choices") and user kernels (``pallas.autotune``)
call it with the variants they can build. What it does depends on ``fnarray.config.autotune``
(env ``FNARRAY_AUTOTUNE``):

- ``"off"``: the default, always; nothing is timed, no cache is read.
- ``"fast"`` (the default mode): a choice already cached for this (device, signature) is reused; otherwise,
  where the caller gives a cost model (``cost=``), the ``fast_candidates`` cheapest candidates by that model are
  timed on the device and the fastest is kept; without a cost model, the default (nothing is timed). The
  kernel groups' tables carry cost models of their own (``Tunable.cost``), which ``modelled`` applies before
  ``choose`` is asked: in mode ``"fast"`` a kernel is then written in the model's choice with no timing at
  all, so a first call compiles each kernel once.
- ``"full"``: every candidate is timed on the device (one warm-up run, then the median of ``repeats`` runs;
  a candidate whose ``measure`` raises is skipped) and the fastest kept, as tinygrad's BEAM search and
  Triton's ``autotune`` do. A choice cached by an earlier ``"full"`` search is reused.

Choices are cached per (device name, driver version, signature): in memory (an ``LRUCache`` of
``MEMORY_ENTRIES``, thread-safe; one search per key at a time) and, when
``fnarray.config.compilation_cache_dir`` is set, on disk in ``<dir>/tuning/<device>.json`` (one JSON file per
device; an update takes an advisory lock, merges with what other processes wrote and renames a temporary
file over the old one, so two processes never lose each other's entries or leave a partial file). A cached
choice that is no longer among the candidates (the code changed) is searched again.

Timing follows the advice in docs/traps.md: the measure callable should run the candidate to completion
(enqueue and finish); ``measure_process_time`` wraps a function to time it by process CPU time, which
scatters less than wall time on a loaded CPU device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import statistics
import tempfile
import threading
import time
from typing import Callable

from fnarray.core.cache import LRUCache
from fnarray.core.config import config

__all__ = ["choose", "device_identity", "cache_version", "stats", "decisions", "clear", "measure_process_time",
           "Decision", "MEMORY_ENTRIES", "TuningError"]

#: choices kept in memory (all devices together)
MEMORY_ENTRIES = 4096
#: decisions kept for ``decisions()`` (the ``tune`` command's table)
_LOG_ENTRIES = 1024
_FORMAT = 1  # the on-disk format's version


class TuningError(ValueError):
    """``choose`` was called with candidates it cannot work with (empty, not JSON-able, default absent)."""


@dataclasses.dataclass
class Decision:
    """One choice: where it came from (``"default"``, ``"memory"``, ``"disk"``, ``"fast"``, ``"full"``) and the
    median seconds of every candidate timed (JSON text of the candidate -> seconds; ``inf`` for one that failed)."""
    device: str
    driver: str
    signature: str
    choice: dict
    source: str
    mode: str
    times: dict
    default: dict | None = None


_memory = LRUCache(MEMORY_ENTRIES)
_log: list = []
_lock = threading.Lock()
_key_locks: dict = {}
_counts = {"measured": 0, "searches": 0, "memory_hits": 0, "disk_hits": 0, "defaults": 0, "modelled": 0}
_disk_seen: dict = {}  # file path -> (mtime_ns, size, entries)


def stats() -> dict:
    """Counters since the process started (or ``clear()``): ``measured`` (calls of a ``measure``), ``searches``
    (signatures timed), ``memory_hits``, ``disk_hits``, ``defaults`` (the default taken without timing),
    ``modelled`` (a cost model's choice other than the hand-tuned default, ``modelled``)."""
    return dict(_counts)


def decisions() -> list:
    """The ``Decision`` of every ``choose`` call that did not hit the memory cache (the latest last, bounded)."""
    with _lock:
        return list(_log)


def clear(memory: bool = True, counts: bool = True) -> None:
    """Forget the in-memory choices and the decision log (the disk cache is left alone), and zero ``stats()``."""
    with _lock:
        if memory:
            _memory.clear()
            _disk_seen.clear()
            _log.clear()
        if counts:
            for k in _counts:
                _counts[k] = 0


def device_identity(device) -> tuple:
    """``(name, driver version)`` of an fnarray ``Device`` (its OpenCL device, its WebGPU adapter) or of a
    string (itself, ``""``): the part of the cache key that says where a choice was measured."""
    if isinstance(device, str):
        return device, ""
    handle = getattr(device, "handle", None)
    if handle is not None and hasattr(handle, "driver_version") and hasattr(handle, "platform"):  # cl.Device
        try:
            name = f"{handle.platform.name.strip()} {handle.name.strip()}"
            driver = f"{handle.platform.version.strip()} {handle.driver_version.strip()}"
            return name, driver
        except Exception:  # noqa: BLE001 (a released device: fall back to the description)
            pass
    info = getattr(handle, "info", None)
    if isinstance(info, dict) or hasattr(info, "get"):  # a wgpu adapter's info
        name = f"{info.get('vendor', '')} {info.get('device', '')} {info.get('backend_type', '')}".strip()
        driver = f"{info.get('description', '')} {info.get('architecture', '')}".strip()
        return name, driver
    return getattr(device, "description", None) or str(device), ""


def _canon(candidate) -> str:
    try:
        return json.dumps(candidate, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise TuningError(f"fnarray.tuning: a candidate must be a dict of JSON values (ints, floats, strings, "
                          f"bools, lists), got {candidate!r} ({e})") from None


def _mode() -> str:
    return config.autotune


def choose(device, signature: str, candidates: list, measure: Callable[[dict], float], default: dict, *,
           cost: Callable[[dict], float] | None = None, fast_candidates: int = 3, repeats: int = 5,
           mode: str | None = None, margin: float = 0.05, skip_below: float | None = None) -> dict:
    """The candidate to use for the kernel ``signature`` on ``device``.

    Args:
      device: an fnarray ``Device`` or a string naming the device (``device_identity`` gives the cache key).
      signature: what identifies the kernel and its sizes (its source before the choices, shapes, dtypes);
        one choice is cached per signature.
      candidates: the variants, each a dict of JSON values (e.g. ``{"wg": 64, "vec": 4}``).
      measure: ``measure(candidate) -> seconds`` runs the candidate once to completion; called only in modes
        ``"fast"`` (with ``cost``) and ``"full"``. It may raise for a candidate that cannot run there (that one
        is skipped). ``None``: nothing can be timed now (a kernel being traced): a cached choice, else the
        default.
      default: the choice without tuning; returned by mode ``"off"``, by ``"fast"`` without a cost model, and
        when no candidate could be timed. Need not be among ``candidates``.
      cost: an optional cost model, ``cost(candidate) -> a number`` (lower is better), for mode ``"fast"``.
      fast_candidates: how many of the cheapest candidates by ``cost`` mode ``"fast"`` times.
      repeats: timed runs per candidate after one warm-up (the median is compared).
      margin: the default, when it was timed, is kept unless a candidate is faster by more than this fraction
        (timings on a shared machine scatter; a choice should not flip on noise).
      skip_below: when the default is a candidate and one run of it takes less than this many seconds, the
        search stops there and keeps it (a kernel that small gains less than its variants cost to compile).
      mode: overrides ``fnarray.config.autotune`` for this call.

    Returns:
      The chosen candidate (one of ``candidates``, or ``default``).

    Raises:
      TuningError: ``candidates`` is empty or holds something that is not JSON-able.
      ValueError: ``mode`` is not ``"off"``, ``"fast"`` or ``"full"``.

    Source: the design of tinygrad's BEAM search (time every variant on the device, cache per device) and
    Triton's ``autotune`` (configs, warm-up, median of repeats); written for fnarray.
    """
    mode = _checked_mode(mode)
    if mode == "off":
        _counts["defaults"] += 1
        return default
    candidates, canon = _canonical(signature, candidates)
    if len(candidates) == 1 and _canon(default) == canon[0]:
        return default
    name, driver = device_identity(device)
    key = (name, driver, signature)
    hit = _memory_hit(key, canon, candidates, mode)
    if hit is not None:
        return hit
    with _key_lock(key):
        hit = _memory_hit(key, canon, candidates, mode)
        if hit is None:
            hit = _disk_hit(key, canon, candidates, mode, default)
        if hit is not None:
            return hit
        if measure is None or (mode == "fast" and cost is None):
            _counts["defaults"] += 1
            return default
        pool = sorted(candidates, key=cost)[:max(1, fast_candidates)] if mode == "fast" else candidates
        return _timed_choice(key, candidates, canon, pool, measure, default, mode, repeats, margin, skip_below)


def _checked_mode(mode):
    mode = _mode() if mode is None else mode
    if mode not in ("off", "fast", "full"):
        raise ValueError(f"fnarray.tuning.choose: mode must be 'off', 'fast' or 'full', got {mode!r}")
    return mode


def _canonical(signature, candidates):
    """``(candidates as a list, their canonical JSON)``; ``TuningError`` for none or one not JSON-able."""
    candidates = list(candidates)
    if not candidates:
        raise TuningError(f"fnarray.tuning.choose({signature!r}): no candidates")
    return candidates, [_canon(c) for c in candidates]


def _memory_hit(key, canon, candidates, mode):
    """The choice this process made for ``key`` (one of ``candidates``; in mode ``"full"`` only a timed one),
    else ``None``."""
    hit = _memory.get(key)
    if hit is not None and hit[0] in canon and (mode != "full" or hit[1] == "full"):
        _counts["memory_hits"] += 1
        return candidates[canon.index(hit[0])]
    return None


def _disk_hit(key, canon, candidates, mode, default):
    """The choice the persistent cache holds for ``key`` (kept in memory too), else ``None``."""
    name, driver, signature = key
    stored = _disk_get(name, driver, signature)
    if stored is not None and stored.get("choice") in canon and (mode != "full" or stored.get("mode") == "full"):
        _counts["disk_hits"] += 1
        _memory.set(key, (stored["choice"], stored.get("mode", "fast")))
        chosen = candidates[canon.index(stored["choice"])]
        _record(Decision(name, driver, signature, chosen, "disk", stored.get("mode", "?"),
                         stored.get("times", {}), default))
        return chosen
    return None


def _timed_choice(key, candidates, canon, pool, measure, default, mode, repeats, margin, skip_below):
    """Time ``pool`` and keep the fastest (the default unless another beats it by ``margin``), in memory and
    on disk; the default when nothing could be timed."""
    name, driver, signature = key
    dkey = _canon(default)
    if skip_below is not None and dkey in canon:
        pool = [default] + [c for c in pool if _canon(c) != dkey]
    times = _search(pool, measure, repeats, skip_below if dkey in canon else None)
    finite = {k: t for k, t in times.items() if t != float("inf")}
    if not finite:
        _counts["defaults"] += 1
        _record(Decision(name, driver, signature, default, "default", mode, times, default))
        return default
    best = min(finite, key=finite.get)
    if dkey in finite and dkey in canon and finite[best] > finite[dkey] * (1 - margin):
        best = dkey
    chosen = candidates[canon.index(best)]
    _memory.set(key, (best, mode))
    _disk_put(name, driver, signature, {"choice": best, "mode": mode, "times": finite})
    _record(Decision(name, driver, signature, chosen, mode, mode, times, default))
    return chosen


@contextlib.contextmanager
def _key_lock(key):
    with _lock:
        entry = _key_locks.get(key)
        if entry is None:
            entry = _key_locks[key] = [threading.Lock(), 0]
        entry[1] += 1
    try:
        with entry[0]:
            yield
    finally:
        with _lock:
            entry[1] -= 1
            if entry[1] == 0:
                _key_locks.pop(key, None)


def _search(pool, measure, repeats, skip_below=None) -> dict:
    """Median seconds per candidate (JSON text -> seconds; ``inf`` where ``measure`` raised); with
    ``skip_below``, only the first (the default) when it runs faster than that."""
    _counts["searches"] += 1
    times = {}
    best = float("inf")
    for cand in pool:
        k = _canon(cand)
        try:
            _counts["measured"] += 1
            first = float(measure(cand))  # warm-up: first launches compile (docs/traps.md)
            runs = []
            for _ in range(max(1, repeats)):
                _counts["measured"] += 1
                t = float(measure(cand))
                runs.append(t)
                if len(runs) >= 2 and min(runs) > 3 * best:  # clearly slower than the best so far
                    break
            del first
        except Exception:  # noqa: BLE001 (a variant the device cannot build or run is simply not chosen)
            times[k] = float("inf")
            continue
        times[k] = statistics.median(runs)
        best = min(best, times[k])
        if skip_below is not None and len(times) == 1 and times[k] < skip_below:
            break
    return times


def _record(decision: Decision) -> None:
    with _lock:
        _log.append(decision)
        del _log[:-_LOG_ENTRIES]


def measure_process_time(run: Callable[[], object], finish: Callable[[], object] | None = None) -> float:
    """Seconds of process CPU time taken by ``run()`` and ``finish()`` (wait for the device) together.

    On a CPU device (PoCL, lavapipe) the kernel runs in this process's threads, and CPU time scatters less
    than wall time under load (docs/traps.md); elsewhere use wall time (``time.perf_counter``)."""
    t0 = time.process_time()
    run()
    if finish is not None:
        finish()
    return time.process_time() - t0


# ---------------------------------------------------------------------------------------------- disk


def _disk_path(name, driver):
    root = config.compilation_cache_dir
    if root is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:60] or "device"
    digest = hashlib.sha256(f"{name}\0{driver}".encode()).hexdigest()[:12]
    return os.path.join(root, "tuning", f"{slug}-{digest}.json")


def _read(path) -> dict:
    """The entries of one device's file (cached by modification time); ``{}`` when absent or unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    seen = _disk_seen.get(path)
    if seen is not None and seen[0] == st.st_mtime_ns and seen[1] == st.st_size:
        return seen[2]
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        entries = data["entries"] if data.get("format") == _FORMAT else {}
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError, KeyError, AttributeError):
        entries = {}  # a foreign or damaged file: ignored, replaced at the next write
    _disk_seen[path] = (st.st_mtime_ns, st.st_size, entries)
    return entries


def _disk_get(name, driver, signature):
    path = _disk_path(name, driver)
    if path is None:
        return None
    entry = _read(path).get(signature)
    return entry if isinstance(entry, dict) else None


@contextlib.contextmanager
def _file_lock(path):
    try:
        import fcntl
    except ImportError:  # no advisory locks (Windows): the rename still keeps the file whole
        yield
        return
    with open(path + ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _disk_put(name, driver, signature, entry) -> None:
    path = _disk_path(name, driver)
    if path is None:
        return
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        with _file_lock(path):
            _disk_seen.pop(path, None)
            entries = dict(_read(path))
            entries[signature] = entry
            data = {"format": _FORMAT, "device": name, "driver": driver, "entries": entries}
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
            tmp = None
    except OSError:
        pass  # a read-only cache folder: the choice is kept in memory only
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def cache_version(device) -> str:
    """What a cached kernel schedule for ``device`` must match: the mode and the state of the device's tuning
    file (its size and modification time), so a schedule made before a ``tune`` run is not reused after it."""
    mode = _mode()
    if mode == "off":
        return "off"
    path = _disk_path(*device_identity(device))
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        st = None
    return mode if st is None else f"{mode}:{st.st_size}:{st.st_mtime_ns}"


# ------------------------------------------------------------------------------------- kernel groups


@dataclasses.dataclass(frozen=True)
class Tunable:
    """A kernel group's declared tunable choices: ``choices`` maps a name to the values it may take (each a
    JSON value); the candidates are their product, less those ``valid(candidate, facts)`` refuses (``facts``:
    what the caller knows, e.g. the device's work-group limit). ``doc`` says what each choice changes.
    Declared in the group's module beside the code that reads the choice (``docs/internals.md``,
    "Tunable choices")."""
    kind: str
    choices: dict
    doc: str = ""
    valid: Callable | None = None
    #: an optional cost model, ``cost(candidate, default, facts) -> a number`` (lower is better): mode
    #: ``"fast"`` uses the cheapest candidate where nothing is cached (``modelled``), untimed
    cost: Callable | None = None

    def candidates(self, default: dict, facts: dict | None = None) -> list:
        """Every valid combination (dicts), the default first (it is always a candidate)."""
        names = sorted(self.choices)
        out = [dict(default)]
        seen = {_canon(default)}
        combos = [[]]
        for n in names:
            combos = [c + [v] for c in combos for v in self.choices[n]]
        for combo in combos:
            cand = {**default, **dict(zip(names, combo, strict=True))}
            k = _canon(cand)
            if k in seen or (self.valid is not None and not self.valid(cand, facts or {})):
                continue
            seen.add(k)
            out.append(cand)
        return out


def modelled(tunable: Tunable, default: dict, facts: dict | None = None, mode: str | None = None) -> dict:
    """The choice ``tunable``'s cost model predicts for a target described by ``facts`` (the backend's
    ``Capabilities.tuning_facts`` and the group's own, e.g. a product's rows and columns): in modes ``"fast"``
    and ``"full"`` the cheapest of ``tunable.candidates(default, facts)`` by ``tunable.cost`` (the first, the
    default, on a tie); ``default`` itself in mode ``"off"``, for a table without a model, or when the model
    prices every candidate alike. Nothing is timed: ``choose`` (modes ``"fast"`` with a cached choice and
    ``"full"``) starts from this choice as its default."""
    mode = _mode() if mode is None else mode
    if mode == "off" or tunable.cost is None:
        return default
    facts = facts or {}
    cands = tunable.candidates(default, facts)
    costs = [tunable.cost(c, default, facts) for c in cands]
    best = min(range(len(cands)), key=lambda i: (costs[i], i))
    if best:
        _counts["modelled"] += 1
    return cands[best]


#: The kernel-level choice of every kernel with a float32 transcendental on a renderer that has its own forms
#: (OpenCL C: ``opencl_c._HELPERS``, call-free polynomials that PoCL 3.0 vectorises; PoCL 3.1's built-ins
#: vectorise too and were 3x faster there: docs/traps.md). Read by ``schedule.tune_kernels``.
MATH = Tunable("math", {"math": ("fnarray", "builtin")},
               doc="a float32 transcendental as fnarray's polynomial or the driver's built-in function")


class LaunchTimer:
    """What a backend gives the scheduler to tune with (``schedule(..., tuner=...)``): the device, how a kernel
    is rendered (its source is part of a signature), which ``math`` forms its renderer has, and ``time``.
    Subclasses implement ``time(launches) -> seconds`` (one run of the launches to completion, on buffers of
    made-up values, kept between calls for the same launches) and ``source(kernel) -> str``."""

    math_forms: tuple = ()
    #: kernels whose default runs faster than this (seconds) keep it untimed further (``choose``'s ``skip_below``):
    #: a tiny kernel's launch costs more than any variant saves, and each variant costs a compile
    skip_below = 50e-6

    def __init__(self, device, workgroup_limit=None):
        self.device = device
        self.workgroup_limit = workgroup_limit
        self._runs: dict = {}

    def source(self, kernel) -> str:  # pragma: no cover (abstract)
        raise NotImplementedError

    def prepare(self, launches, inputs, output):  # pragma: no cover (abstract)
        """A callable that runs ``launches`` once to completion and returns its seconds; ``inputs``: the
        buffers the launches read and none writes (their values are given here), ``output``: one they write."""
        raise NotImplementedError

    def time(self, launches) -> float:
        """Seconds of one run of ``launches`` (prepared at the first call for them within one ``tuned``)."""
        key = tuple(map(id, launches))
        run = self._runs.get(key)
        if run is None:
            from fnarray.lowering.kernels.ir import BufferParam
            written, inputs, output = set(), [], None
            for la in launches:
                for p, a in zip(la.kernel.params, la.args, strict=True):
                    if isinstance(p, BufferParam) and p.writes:
                        written.add(a)
                        output = a
            for la in launches:
                for p, a in zip(la.kernel.params, la.args, strict=True):
                    if isinstance(p, BufferParam) and a not in written and a not in inputs:
                        inputs.append(a)
            run = self._runs[key] = self.prepare(launches, inputs, output)
        return run()

    @staticmethod
    def sample(spec):
        """Made-up values for a buffer ``spec`` read by a timed kernel: floats in [-2, 2), else zeros (in
        range as indices)."""
        import numpy as np
        if spec.dtype.kind == "f":
            return np.random.default_rng(0).uniform(-2, 2, spec.shape).astype(spec.dtype)
        return np.zeros(spec.shape, spec.dtype)

    def signature(self, kind: str, launches) -> str:
        """``kind`` and a digest of the launches' sources, scalar arguments, buffer shapes and work sizes."""
        h = hashlib.sha256(kind.encode())
        for la in launches:
            h.update(self.source(la.kernel).encode())
            h.update(repr([(a.shape, a.dtype.str) if hasattr(a, "shape") else a for a in la.args]).encode())
            h.update(repr((la.global_size, la.local_size)).encode())
        return f"{kind}:{h.hexdigest()[:24]}"

    def tuned(self, tunable: Tunable, default: dict, build: Callable[[dict], list], facts: dict | None = None,
              cost: Callable | None = None) -> list:
        """The launches of the chosen candidate of ``tunable`` (``build(candidate) -> launches``)."""
        base = build(default)
        if not base:
            return base
        facts = dict(facts or {})
        if self.workgroup_limit is not None:
            facts.setdefault("workgroup_limit", self.workgroup_limit)
        cands = tunable.candidates(default, facts)
        if len(cands) < 2:
            return base
        built = {_canon(default): base}

        def variant(c):
            k = _canon(c)
            if k not in built:
                built[k] = build(c)
            return built[k]

        try:
            choice = choose(self.device, self.signature(tunable.kind, base), cands,
                            lambda c: self.time(variant(c)), default, cost=cost, skip_below=self.skip_below)
            return variant(choice)
        finally:
            self._runs.clear()


def digest_of(values) -> str:
    """A short hex digest of ``values``' repr (for signatures made by callers)."""
    return hashlib.sha256(repr(values).encode()).hexdigest()[:16]


def active(device) -> bool:
    """Whether lowering for ``device`` should consult ``choose`` at all: mode ``"full"``, or mode ``"fast"`` with
    some choice known for the device (in memory or on disk). Otherwise every choice is its default, and the
    scheduler skips the work of making signatures."""
    mode = _mode()
    if mode == "off":
        return False
    if mode == "full":
        return True
    name, driver = device_identity(device)
    if any(k[0] == name and k[1] == driver for k in list(_memory.keys())):
        return True
    path = _disk_path(name, driver)
    return path is not None and os.path.exists(path)
