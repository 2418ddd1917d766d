"""Tracing machinery: traces, tracers and ``bind`` (the Autodidax architecture).

``bind(primitive, *args, **params)`` finds the innermost trace among the
arguments (a stack of ``MainTrace`` levels, plus an optional *dynamic* trace
that stages everything, for ``jit``), raises every argument into it and lets
it process the primitive. The bottom of the stack is evaluation on devices,
which ``fnarray.devices`` installs through ``set_eager_apply``.

The trace stack and the dynamic trace are per thread (``threading.local``), as
JAX keeps its trace state: a function traced in one thread never sees another
thread's levels, so several threads may trace, ``jit`` and run at once.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from fnarray.core import primitives
from fnarray.core.array import Array
from fnarray.core.errors import (ConcretizationError, TracerArrayConversionError, TracerBoolConversionError,
                                  TracerIntegerConversionError, TracerLeakError, not_initialized)
from fnarray.core.ir import Params

__all__ = ["MainTrace", "Trace", "Tracer", "EvalTrace", "bind", "new_main", "new_dynamic",
           "full_raise", "full_lower", "find_top_trace", "user_frame", "is_scalar",
           "set_eager_apply", "current_dynamic", "trace_level", "transforming"]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MainTrace:
    """One level of the trace stack: a trace type and its global data."""

    __slots__ = ("level", "trace_type", "global_data", "alive")

    def __init__(self, level, trace_type, global_data):
        self.level, self.trace_type, self.global_data, self.alive = level, trace_type, global_data, True

    def with_cur_sublevel(self):
        return self.trace_type(self)

    def __repr__(self):
        return f"MainTrace({self.level}, {self.trace_type.__name__})"


class Trace:
    """Interprets primitives on its tracers. Subclasses override the three hooks."""

    __slots__ = ("main",)

    def __init__(self, main: MainTrace):
        self.main = main

    def pure(self, val):
        """Lift a value from outside any trace (an array or a scalar)."""
        raise NotImplementedError

    def lift(self, val):
        """Lift a tracer of a lower level."""
        return self.pure(val)

    def process_primitive(self, primitive, tracers, params):
        raise NotImplementedError

    def full_raise(self, val):
        if not isinstance(val, Tracer):
            if type(val) is np.ndarray:   # a NumPy array the function returns: a constant, as in JAX
                val = _numpy_constant(val)
            return self.pure(val)
        main = val._trace.main
        if main is self.main:
            return val
        if not main.alive:
            raise _leak(val)
        if main.level < self.main.level:
            return self.lift(val)
        raise TracerLeakError(
            f"a value of an inner transformation ({main.trace_type.__name__}, level {main.level}) "
            f"reached an outer one ({self.main.trace_type.__name__}, level {self.main.level}); "
            "this happens when a traced value is stored outside the function and used later")


def _no_numpy_constant(x):
    raise not_initialized("a NumPy array in a traced function")


_numpy_constant = _no_numpy_constant   # fnarray.numpy's asarray, installed by core.avals.set_asarray


def set_numpy_constant(fn) -> None:
    """Install how ``Trace.full_raise`` makes a NumPy array into an ``Array`` (``core.avals.set_asarray`` does)."""
    global _numpy_constant
    _numpy_constant = fn


def live(t: "Tracer") -> "Tracer":
    """``t``, or the ``TracerLeakError`` of a tracer whose transformation has returned (a leaked value)."""
    if not t._trace.main.alive:
        raise _leak(t)
    return t


def _leak(t):
    return TracerLeakError(
        f"a traced value ({t.aval.str_short()} from {t._trace.main.trace_type.__name__}) was used after the "
        "transformation that made it returned. Do not keep traced values in globals or closures "
        "across calls; return them from the transformed function instead.")


def user_frame():
    """The innermost stack frame outside the fnarray package, as ``file:line``."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG_DIR + os.sep) and "<frozen" not in fn and "contextlib" not in fn:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


#: the conversions that JAX reports with their own subclass of ``ConcretizationTypeError`` (``jax.errors``)
_CONVERSION_ERRORS = {"bool()": TracerBoolConversionError, "int()": TracerIntegerConversionError,
                      "__index__": TracerIntegerConversionError,
                      "converting to a NumPy array": TracerArrayConversionError}

#: The tracer classes whose ``full_lower`` is ``Tracer``'s (the tracer itself): ``bind`` returns their values as
#: they are (filled by ``Tracer.__init_subclass__``).
_LOWERS_TO_ITSELF: set = set()


class Tracer(Array):
    """A value inside a transformation. Subclasses define ``aval``."""

    __slots__ = ("_trace",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.full_lower is Tracer.full_lower:
            _LOWERS_TO_ITSELF.add(cls)

    def full_lower(self):
        return self

    def _concrete(self, what):
        if not self._trace.main.alive:   # a leaked tracer: not a value of the running transformation
            raise _leak(self)
        where = user_frame()
        raise _CONVERSION_ERRORS.get(what, ConcretizationError)(
            f"{what} on a traced value {self.aval.str_short()} at {where}: Python control flow "
            "and conversions need concrete values, which this function does not have while it "
            "is transformed. Use fnarray.numpy.where(c, x, y) for elementwise choices and "
            "fnarray.cond / fnarray.while_loop / fnarray.fori_loop for control flow, or mark the "
            "argument static (jit's static_argnums).")

    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self._concrete("converting to a NumPy array"))
        return v if dtype is None else v.astype(dtype)

    def __repr__(self):
        """``Traced<f32[]>with<PartialEvalTrace>``; the tracers of ``jit``, ``grad``/``jvp`` and ``vmap`` print as
        JAX's (``JitTracer(~float32[])``...), for code that prints inside them to debug."""
        return f"Traced<{self.aval.str_short()}>with<{type(self._trace).__name__}>"


def jax_type(aval) -> str:
    """``aval`` as JAX's tracers print it: ``float32[3,4]``, ``~float32[]`` where weakly typed."""
    return f"{'~' if aval.weak_type else ''}{np.dtype(aval.dtype).name}[{','.join(map(str, aval.shape))}]"


def is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, complex, np.generic))


class EvalTrace(Trace):
    """The bottom of the stack: evaluates primitives on devices."""

    __slots__ = ()

    def pure(self, val):
        return val

    lift = pure

    def process_primitive(self, primitive, args, params):
        return _eager_apply(primitive, args, params)


def _no_eager(primitive, args, params):
    raise not_initialized(f"{primitive.name} has no device runtime to run on")


_eager_apply = _no_eager
_first_apply = None  # the eager apply installed first (fnarray.devices'); the profiler swaps in its own
_direct = None  # bind's eager path while ``plain`` holds (``fnarray.devices.placement.eager_direct``)

#: True while no thread stages primitives (no ``new_dynamic`` block is open anywhere) and the eager apply is the
#: one installed first: a concrete operation may then skip ``bind`` (``fnarray.devices.eager_ops``, jit's hot
#: path) without reading this thread's trace state. When false, those paths check the thread's own state.
plain = False
_staging = 0  # new_dynamic blocks open, over all threads
_staging_lock = threading.Lock()


def _update_plain() -> None:
    global plain
    plain = _staging == 0 and _direct is not None and _eager_apply is _first_apply


def set_eager_apply(fn, direct=None) -> None:
    """Install eager evaluation (``fnarray.devices`` does this at import; the profiler swaps its own in).

    ``direct(primitive, args, kwargs)``, given with the first apply only: what ``bind`` calls instead while
    ``plain`` holds and no argument is a tracer (``kwargs``: bind's own keyword dict, no ``Params`` made)."""
    global _eager_apply, _first_apply, _direct
    with _staging_lock:
        _eager_apply = fn
        if _first_apply is None:
            _first_apply, _direct = fn, direct
        _update_plain()


class _TraceState(threading.local):
    """One thread's trace state: the stack of levels (evaluation at the bottom) and the dynamic traces.

    ``threading.local`` runs ``__init__`` once in every thread that touches it, so a new thread starts
    with only the evaluation level, whatever other threads are tracing.
    """

    def __init__(self):
        self.stack: list[MainTrace] = [MainTrace(0, EvalTrace, None)]
        self.dynamic: list[MainTrace] = [self.stack[0]]


_state = _TraceState()


def current_dynamic() -> MainTrace:
    """This thread's innermost dynamic trace (the evaluation level when nothing is staged)."""
    return _state.dynamic[-1]


def trace_level() -> int:
    """This thread's dynamic trace level: 0 when primitives on plain values evaluate eagerly."""
    return _state.dynamic[-1].level


def transforming() -> bool:
    """Whether this thread has a trace open (a transformation's level or a dynamic one) above evaluation."""
    return len(_state.stack) > 1 or _state.dynamic[-1].level > 0


class new_main:  # noqa: N801 (used as the function it was: ``with new_main(...) as main``)
    """Push a new level of ``trace_type`` (this thread's stack); it is marked dead when the block ends.

    (A class, not a ``contextlib`` generator: every trace opens one and a ``new_dynamic``, ~3 us a trace of
    generator and context-manager machinery against ~7 us for the whole trace of ``lambda x: x``; issue 28.)"""

    __slots__ = ("main",)

    def __init__(self, trace_type, global_data=None):
        stack = _state.stack
        self.main = MainTrace(len(stack), trace_type, global_data)

    def __enter__(self):
        _state.stack.append(self.main)
        return self.main

    def __exit__(self, *exc):
        _state.stack.pop()
        self.main.alive = False
        return False


class new_dynamic:  # noqa: N801
    """Make ``main`` this thread's dynamic trace: primitives on plain values are staged into it."""

    __slots__ = ("main",)

    def __init__(self, main: MainTrace):
        self.main = main

    def __enter__(self):
        global _staging, plain
        with _staging_lock:
            _staging += 1
            plain = False  # before this thread binds anything inside the block
        _state.dynamic.append(self.main)

    def __exit__(self, *exc):
        global _staging
        _state.dynamic.pop()
        with _staging_lock:
            _staging -= 1
            _update_plain()
        return False


def find_top_trace(args) -> Trace:
    top = _state.dynamic[-1]
    for a in args:
        if isinstance(a, Tracer):
            m = a._trace.main
            if m.level > top.level:
                top = m
            if not m.alive:
                raise _leak(a)
    return top.trace_type(top)


def full_raise(trace: Trace, val):
    return trace.full_raise(val)


def full_lower(val):
    if isinstance(val, Tracer):
        return val.full_lower()
    return val


_NO_PARAMS = Params()
_new = object.__new__


def bind(primitive, *args, **params):
    """Apply ``primitive`` to ``args`` in the innermost trace; the entry point of every op."""
    if plain:  # no thread stages anything: without a tracer among the arguments, evaluation (the direct path)
        for a in args:
            if isinstance(a, Tracer):
                break
        else:
            return _direct(primitive, args, params)
    if params:  # (``Params.taking``, inline: a Python call an equation less)
        p = _new(Params)
        p._d, p._hash, p._subs = params, None, None
    else:
        p = _NO_PARAMS
    top = _state.dynamic[-1]
    level = top.level
    trace = None  # the trace of the innermost tracer, where it is above the dynamic level (find_top_trace, inline)
    raised = True  # every argument a tracer of the dynamic level: its own raise (a jit trace's common equation)
    for a in args:
        if isinstance(a, Tracer):
            t = a._trace
            m = t.main
            if not m.alive:
                raise _leak(a)
            if m.level > level:
                level, trace = m.level, t  # traces hold only their main: the tracer's own serves (no new one)
                raised = False
            elif m is not top:
                raised = False
            elif trace is None and level:
                trace = t  # a tracer of the dynamic level (a jit trace's values): its trace, not a new one
        else:
            raised = False
    if trace is None:
        if level == 0:
            return _eager_apply(primitive, args, p)
        trace = top.trace_type(top)
    if raised and args:   # (the arguments as they are: no list of their raises made, a frame less an equation)
        tracers = args
    else:
        main = trace.main  # (a tracer of the top level is its own raise: no call for it)
        tracers = [a if isinstance(a, Tracer) and a._trace.main is main else trace.full_raise(a) for a in args]
    outs = trace.process_primitive(primitive, tracers, p)
    if primitive.multiple_results:
        return [full_lower(o) for o in outs]
    if type(outs) in _LOWERS_TO_ITSELF:  # (a jit trace's tracer: no ``full_lower`` call an equation)
        return outs
    return outs.full_lower() if isinstance(outs, Tracer) else outs  # full_lower, inline


primitives.set_bind(bind)
