"""``KernelLowered``: what the opencl and webgpu backends' lowered programs share."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import warnings

import numpy as np

from fnarray.core import gc_pause
from fnarray.core import profile as _profile
from fnarray.core.ir import Literal, pp_program
from fnarray.core.passes import walk_eqns
from fnarray.devices import compile_cache
from fnarray.devices.backend import Lowered
from fnarray.lowering.kernels import tuning
from fnarray.lowering.kernels.groups.base import BufSpec

__all__ = ["KernelLowered", "donated_must_copy", "taken_over"]

#: read the persistent cache's kernel schedules (``python -m fnarray tune`` turns it off, so that every kernel is
#: scheduled, and so tuned, again; new schedules are still written)
READ_SCHEDULE_CACHE = [True]


def donated_must_copy(bufs, i, memory, cached=()) -> bool:
    """Whether a kernel executable's call must copy its donated input ``i`` before a kernel updates it in place
    (``groups/in_place.py``), rather than write the caller's buffer: the opencl and webgpu dispatchers' one rule.

    Args:
        bufs: the call's input buffers (``CLBuffer``/``WGBuffer``: each with a ``shape``), by input position.
        i: the position of a donated input that a kernel of the call writes.
        memory: ``memory(buf)``, the device memory a buffer object wraps (``.mem``, ``.buffer``): two buffer
            objects may share it (``device_put`` to the same device, an array passed twice).
        cached: the device's cached buffers of 0-d values (opencl's ``state.scalars``), which every array of
            that value shares.

    Returns:
        True where the donated memory is also another input's (one array passed as the donated argument and as
        another, which must keep its value) or is a cached scalar's; the copy is then written, and becomes the
        output, while the caller's buffer keeps its value (JAX copies a donated buffer it cannot reuse too).
    """
    b = bufs[i]
    m = memory(b)
    if any(j != i and (c is b or memory(c) is m) for j, c in enumerate(bufs)):
        return True
    return not b.shape and any(v is b for v in cached)


def taken_over(buf) -> RuntimeError:
    """The error for using ``buf`` (a ``CLBuffer``/``WGBuffer``) after an in-place update took its memory over:
    another array sharing the buffer object (a jitted identity's output, ``device_put`` to its own device) was
    donated to a call that updated it in place, and the output now owns the memory. Raised by the opencl and
    webgpu dispatchers when a call binds it and by their downloads (was: a NULL buffer bound, a crash)."""
    return RuntimeError(f"this array ({buf.dtype.name}{list(buf.shape)}) shares its buffer with an array donated "
                        "to a jitted call, which updated it in place: it can no longer be used. Keep a copy "
                        "(fnp.copy(x)) before donating the other array, or do not donate it")


class KernelLowered(Lowered):
    """A program scheduled into kernels once, on first use; listed by ``kernels()``/``as_text()``.

    Subclasses give ``_schedule_now()`` (run ``schedule_program`` with the target's capabilities),
    ``_named_source(kernel) -> (name, source)`` and ``_compile_schedule(schedule)``; a program whose
    control flow the host must drive compiles to ``host_control.HostDriven`` instead.
    """

    def __init__(self, program, device, donate=()):
        super().__init__(program, device)
        self._plan = None
        # ``{input position: output position or None}``: a jitted call's donated arguments (any output) or an
        # exported step's state (its own output); a ``dynamic_update_slice`` or scatter of one is written into it
        # in place (the scheduler's ``donate`` option, ``groups/in_place.py``).
        self.donate = dict(donate) if isinstance(donate, dict) else {int(i): None for i in donate}

    def _schedules(self):
        if self._plan is None:
            with _profile.span("lower", f"schedule kernels for {self.device}", eqns=len(self.program.eqns)), \
                    gc_pause.paused():   # the IR's objects are acyclic: collections would only walk the heap
                self._plan = self._cached_schedule()
        return self._plan

    def _cache_identity(self) -> str:
        """What besides the program decides the schedule: the target's capabilities (subclasses add more)."""
        caps = self.device.impl.capabilities(self.device)
        fields = {f.name: getattr(caps, f.name) for f in dataclasses.fields(caps)}
        fields["dtypes"] = sorted(d.name for d in caps.dtypes)
        return (f"{self.device.backend}|{self.device.description}|{sorted(fields.items())}"
                f"|tuning={tuning.cache_version(self.device)}"
                + (f"|donate={sorted(self.donate.items())}" if self.donate else ""))

    def _donate_options(self) -> dict:
        """The scheduler options of the donation: ``{"donate": ...}``, or none."""
        return {"donate": self.donate} if self.donate else {}

    def _cached_schedule(self):
        """The schedule, from the persistent compilation cache when it is on (keyed by the program's text,
        its literals' bits, the target and the scheduler's own code), else made now."""
        if compile_cache.cache_dir() is None:
            return self._schedule_now()
        k = compile_cache.key(pp_program(self.program), _literal_bits(self.program), self._cache_identity(),
                              _code_digest())
        data = compile_cache.get("schedule", k) if READ_SCHEDULE_CACHE[0] else None
        if data is not None:
            try:
                return pickle.loads(data)  # noqa: S301 (fnarray's own cache folder; see compile_cache)
            except Exception as e:  # noqa: BLE001 (an entry from an incompatible build: rebuild it)
                warnings.warn(f"fnarray's cached kernel schedule could not be read ({type(e).__name__}: {e}); "
                              "it is rebuilt", compile_cache.CacheWarning, stacklevel=2)
        plan = self._schedule_now()
        try:
            data = pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return plan  # something in this schedule does not pickle: it is simply not kept
        compile_cache.put("schedule", k, data)
        return plan

    def kernels(self):
        """The generated kernels in launch order: each with its source, work sizes and the IR equations it
        fused (``print`` shows them)."""
        return self._schedules().listing(self._named_source)

    def as_text(self) -> str:
        """The source of every kernel, in launch order."""
        return str(self.kernels())

    def memory_use(self):
        """The schedule's buffers besides its inputs (intermediates the kernels pass on, and the outputs):
        values computed inline inside a kernel have none. ``None`` for a host-driven program, whose
        segments are checked as they compile."""
        plan = self._schedules()
        if plan.schedule is None:
            return None
        sched = plan.schedule
        inputs = set(sched.inputs)
        bufs = {a: None for launch in sched.launches for a in launch.args if isinstance(a, BufSpec)}
        bufs.update((o, None) for o in sched.outputs if isinstance(o, BufSpec))
        return [(f"{b.dtype.name}{list(b.shape)}", b.size * b.dtype.itemsize) for b in bufs if b not in inputs]

    def compile(self):
        plan = self._schedules()
        if plan.host_driven:
            from fnarray.devices import host_control
            return host_control.HostDriven(self.program, self.device, [True] * len(self.program.eqns))
        with gc_pause.paused():
            return self._compile_schedule(plan.schedule)


def _literal_bits(program) -> bytes:
    """Every literal's dtype, weak type and bit pattern, in order (the printed program shows values only)."""
    parts = []
    for e in walk_eqns(program):
        for a in e.inputs:
            if isinstance(a, Literal):
                v = np.asarray(a.val, a.aval.dtype)
                parts.append(f"{a.aval.dtype.name}{int(a.aval.weak_type)}".encode() + v.tobytes())
    for a in program.outvars:
        if isinstance(a, Literal):
            parts.append(np.asarray(a.val, a.aval.dtype).tobytes())
    return b"|".join(parts)


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """A digest of the scheduler's (with its group modules) and the IR's source files: a changed fnarray never
    reads an old schedule."""
    here = os.path.dirname(os.path.abspath(__file__))
    return source_digest((here, os.path.join(os.path.dirname(os.path.dirname(here)), "core")))


def source_digest(tops) -> str:
    """A sha256 digest of the ``.py`` files under the folders ``tops``, to every depth, by relative path."""
    h = hashlib.sha256()
    for top in tops:
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), "rb") as f:
                        h.update(os.path.relpath(os.path.join(folder, name), top).encode() + f.read())
    return h.hexdigest()
