"""Partitioning and fallback (docs/design.md, "Partitioning and fallback").

Before lowering, every equation is checked with its backend's ``supports``
(an equation holding sub-programs is supported only if all of theirs are, so
an unsupported equation inside a loop body moves the whole loop). Unsupported
equations are cut into segments that run on the numpy backend, with explicit
transfers between devices (``host_control.HostDriven`` runs the segments; on a
backend without loops it also drives control flow from the host). ``fnarray.config.fallback`` chooses between a
``FallbackWarning`` (once per primitive, dtype and device) and raising
``UnsupportedOnDevice``.
"""

from __future__ import annotations

import warnings

from fnarray.core import profile as _profile
from fnarray.core.config import config
from fnarray.core.errors import FallbackWarning, UnsupportedOnDevice
from fnarray.core.ir import Program
from fnarray.core.passes import cse, has_effect, program_from_eqn, subprograms, walk_eqns
from fnarray.core.primitives import EFFECTS
from fnarray.devices import host_control, memory
from fnarray.devices.backend import Device, decompose_for
from fnarray.devices.scratch import SCRATCH

__all__ = ["compile_program", "compile_eqn", "unsupported_reason", "lower_program"]

_warned: set = set()


#: The public functions that make each effect (``primitives.EFFECTS``), for messages.
_CALLBACK_API = {"debug_callback": "fnarray.debug.print / fnarray.debug.callback",
                 "pure_callback": "fnarray.pure_callback"}


def unsupported_reason(eqn, device: Device) -> str | None:
    """Why ``device`` cannot run ``eqn`` (checking its sub-programs too), or ``None``."""
    backend = device.impl
    if eqn.primitive in EFFECTS:
        if getattr(backend, "host_callbacks", False):
            return None
        return (f"{eqn.primitive.name} ({_CALLBACK_API.get(eqn.primitive.name, 'a host callback')}) calls Python on "
                "the host: the program is cut there and the callback runs on numpy:0")
    r = backend.supports(eqn, device)
    if r is not None:
        return r
    host_driven = backend.capabilities(device).control_flow == "host"
    for sub in subprograms(eqn):
        for e in sub.eqns:
            if host_driven and e.primitive in EFFECTS:
                continue  # the host drives this sub-program and cuts it at the callback
            r = unsupported_reason(e, device)
            if r is not None:
                return r
    return None


def _dtype_of(eqn):
    for a in list(eqn.inputs) + list(eqn.outputs):
        return a.aval.dtype.name
    return "-"


def _user_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning to the first frame outside fnarray."""
    import os
    import sys
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    f, level = sys._getframe(2), 2
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(pkg):
        f, level = f.f_back, level + 1
    return level


def _report(eqn, device, reason):
    if eqn.primitive in EFFECTS:
        return  # a host callback is expected to run on the host: neither a warning nor an error
    msg = (f"{eqn.primitive.name} ({_dtype_of(eqn)}) cannot run on {device}: {reason}")
    if config.fallback == "error":
        err = UnsupportedOnDevice(f"{msg}. Set fnarray.config.fallback = 'warn' (or FNARRAY_FALLBACK=warn) to run "
                                  "it on the numpy backend, or move the computation to a device that has it.")
        err.primitive, err.dtype, err.reason = eqn.primitive.name, _dtype_of(eqn), reason
        raise err
    key = (eqn.primitive.name, _dtype_of(eqn), str(device), reason)
    if config.fallback == "warn" and key not in _warned:
        _warned.add(key)
        warnings.warn(f"{msg}; running it on numpy:0 instead", FallbackWarning, stacklevel=_user_stacklevel())


# Primitives that only ever appear in programs that are transformed further, never run. Running one is
# a user error with its own message, raised before partitioning: falling back to numpy:0 first would
# print a FallbackWarning about an internal primitive before the real error.
_NOT_RUNNABLE = {
    "custom_lin": ("a custom_vjp function cannot be forward-mode differentiated (jvp, jacfwd): it only defines "
                   "reverse mode. Use fnarray.custom_jvp for forward mode, or grad/vjp/jacrev."),
}


def _check_runnable(program: Program):
    for e in walk_eqns(program):
        msg = _NOT_RUNNABLE.get(e.primitive.name)
        if msg is not None:
            raise TypeError(msg)


def lower_program(program: Program, device: Device, donate=(), consts=None):
    """The backend's ``Lowered`` for the whole program (no partitioning); ``consts``: the constvars' values, for a
    backend that inlines small constants (``Backend.inlines_constants``)."""
    with _profile.span("lower", f"lower for {device}", device=str(device), eqns=len(program.eqns)):
        kwargs = {}
        if donate:
            kwargs["donate"] = tuple(donate)
        if consts is not None and program.constvars and device.impl.inlines_constants:
            kwargs["consts"] = tuple(consts)
        return device.impl.lower(program, device, **kwargs)


def _compiled(lowered, device):
    with _profile.span("compile", f"compile for {device}", device=str(device)):
        return lowered.compile()


def compile_program(program: Program, device: Device, donate=(), consts=None):
    """An executable ``bufs -> bufs`` for ``program`` on ``device`` (inputs: constvars + invars).

    Falls back per segment when the device cannot run some equations. ``donate``: input
    positions whose buffers the executable may reuse (honoured when nothing falls back).
    ``consts``: the values of the constvars, where every call passes these same values (jit's traced
    constants): a backend with ``inlines_constants`` may compile the small ones in as literals.
    A value larger than the device can hold raises ``ResourceExhaustedError`` here, before
    anything is allocated; an out-of-memory error of the backend at run time is translated
    into the same error.
    """
    program = cse(program)
    fits = memory.check_program(program, device)
    exe = _translating(_compile_program(program, device, donate, recount=not fits, consts=consts),
                       program.out_avals, device)
    # (a decomposition may write constants made from sizes: such a program serves its own sizes only)
    exe.shape_free = getattr(exe.__wrapped__, "shape_free", False) and decompose_for(program, device) is program
    return exe


def at_sizes(exe, program: Program, device: Device):
    """``compile_program``'s executable ``exe``, which serves every size (``shape_free``), for ``program``: the
    same program up to its sizes (``core.size_free.size_free_key``), checked against the device's memory as
    ``compile_program`` checks it, its out-of-memory errors naming this program's results."""
    memory.check_program(program, device)
    shared = getattr(exe.__wrapped__, "shared_by_sizes", None)  # (the backend's word: several sizes run it)
    if shared is not None:
        shared()
    out = _translating(exe.__wrapped__, program.out_avals, device)
    out.shape_free = True
    return out


class _Translating:
    """An executable whose backend's out-of-memory errors become fnarray's ``ResourceExhaustedError``.

    Transparent otherwise: attributes are the wrapped executable's (``__wrapped__`` is it); its direct entries
    ``call_args`` and ``one`` (``None`` where it has none) are copied at once, which every new eager entry's tape
    step and fast operator read (a ``__getattr__`` call each otherwise: issue 28, each new shape's first call).
    """

    __slots__ = ("__wrapped__", "_out_avals", "_device", "call_args", "one", "shape_free")

    def __init__(self, exe, out_avals, device):
        self.__wrapped__, self._out_avals, self._device = exe, out_avals, device
        self.call_args, self.one = getattr(exe, "call_args", None), getattr(exe, "one", None)
        self.shape_free = False  # (``compile_program``: whether it serves the program at every size)

    def __call__(self, bufs):
        try:
            return self.__wrapped__(bufs)
        except Exception as e:
            self.reraise(e)

    def reraise(self, e: Exception):
        """Raise ``e`` as fnarray's ``ResourceExhaustedError`` where it is an out-of-memory error, else as is
        (for callers of ``call_args``, which bypasses ``__call__``)."""
        err = memory.translate(e, self._device, self._out_avals)
        if err is None:
            raise e
        raise err from e

    def __getattr__(self, name):
        return getattr(self.__wrapped__, name)


_translating = _Translating


def _compile_program(program: Program, device: Device, donate=(), recount=False, consts=None):
    # recount: the program's values did not all fit, but the backend's compiler decides which get buffers;
    # what the lowered program allocates decides (a host-driven program's segments are checked one by one).
    _check_runnable(program)
    if device.impl.capabilities(device).reference:
        return _compiled(lower_program(program, device), device)
    # Decomposed first, so that a primitive the backend lowers as a composite does not fall back.
    program = decompose_for(program, device)
    placements = []
    for e in program.eqns:
        r = unsupported_reason(e, device)
        if r is not None:
            _report(e, device, r)
        placements.append(r is None)
    if device.impl.capabilities(device).control_flow == "host":
        if host_control.needs_host_driving(program, placements):
            return host_control.HostDriven(program, device, placements)
    if all(placements):
        lowered = lower_program(program, device, donate, consts)
        if recount:
            memory.check_lowered(lowered, device)
        return _compiled(lowered, device)
    return host_control.HostDriven(program, device, placements, drive_control=False)


def compile_eqn(primitive, params, in_avals, out_avals, device: Device):
    """An executable for one primitive (eager execution), through the same fallback."""
    if _profile.silent("compile"):
        return _compile_eqn(primitive, params, in_avals, out_avals, device)
    with _profile.span("compile", f"eager {primitive.name} for {device}", device=str(device)):
        return _compile_eqn(primitive, params, in_avals, out_avals, device)


#: id(device) -> ``(backend, whether its eager_fast needs partition's checks first)``: what ``_compile_eqn`` asks
#: of the backend that depends on no equation, once per device (each new shape's first eager call of every
#: primitive compiles one: issue 28), kept with the backend object it was asked of (a backend registered again
#: under its name is asked again).
_EAGER_CHECKS: dict = {}


def _checks_first(backend, device) -> bool:
    """Whether ``backend``'s ``eager_fast`` on ``device`` needs ``_compile_eqn``'s own checks (a one-equation
    program, ``unsupported_reason``, effects) first: not on a reference backend (numpy: it runs everything), nor
    where its ``eager_fast_known`` makes them itself (``eager_fast_checks``: mlx)."""
    known = _EAGER_CHECKS.get(id(device))
    if known is None or known[0] is not backend:
        known = _EAGER_CHECKS[id(device)] = (backend, not backend.capabilities(device).reference
                                             and not getattr(backend, "eager_fast_checks", False))
    return known[1]


def _compile_eqn(primitive, params, in_avals, out_avals, device: Device):
    backend = device.impl
    memory.check_avals(out_avals, device, f"the operation {primitive.name} (eager: its result is a buffer of its "
                       "own; under fnarray.jit a backend that fuses may need none)")
    # scratch that does not fit where the backend's compiler decides: the program's path measures the lowered one
    # (most primitives have no scratch: ``SCRATCH`` asked here, without the call)
    fits = primitive not in SCRATCH or memory.check_eqn(primitive, params, in_avals, out_avals, device,
                                                        f"the operation {primitive.name}")
    fast = getattr(backend, "eager_fast", None) if fits else None
    # The fast path skips partitioning: only for what the device supports (fallback needs the slow one).
    # An equation holding a host callback goes through partitioning too, unless the backend calls it in place.
    # A reference backend (numpy) needs no program for it (a first call of each new shape makes one: ~2 us).
    prog = None
    # A backend whose ``eager_fast_known`` makes these checks itself (``eager_fast_checks``: mlx) is asked directly.
    if fast is not None and _checks_first(backend, device):
        prog = program_from_eqn(primitive, params, in_avals, out_avals)
        if not (backend.lowers_natively(prog.eqns[0], device) and unsupported_reason(prog.eqns[0], device) is None
                and (backend.host_callbacks or not has_effect(prog.eqns[0]))):
            fast = None
    if fast is not None:
        known = getattr(backend, "eager_fast_known", None)  # (the output avals given: numpy)
        exe = (fast(primitive, params, in_avals, device) if known is None
               else known(primitive, params, in_avals, out_avals, device))
        if exe is not None:
            return _translating(exe, tuple(out_avals), device)
    if prog is None:
        prog = program_from_eqn(primitive, params, in_avals, out_avals)
    return compile_program(prog, device)


host_control.compile_program = compile_program
