"""The IR-building trace: turns a Python function into a ``Program``.

Used by ``jit``, ``make_ir``, linearization and control-flow bodies. It is a
*dynamic* trace (``new_dynamic``): every primitive bound while it is active is
staged, even on plain arrays created inside the function. Captured arrays
(``Array`` or tracers of outer levels) become constant variables, never
literals; Python and NumPy scalars become ``Literal`` atoms, and equations
whose inputs are all literals are folded at trace time. Small host arrays
(``_SHARED_CONSTANT_ELEMENTS``) of equal values become one constant variable
(``_value_key``), so that CSE merges the work done on them: ``fa.nn.RoPE``
makes its frequencies anew each call, and a model's layers then share one
angle computation a step.
"""

from __future__ import annotations

from fnarray.core import profile as _profile
from fnarray.core.array import Array
from fnarray.core.dtypes import dtype_of_scalar
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer, is_scalar, jax_type, new_dynamic, new_main

import numpy as np

__all__ = ["BuilderTrace", "BuilderTracer", "trace_to_program", "set_literal_folder"]

#: Captured arrays with a host (NumPy) buffer of at most this many elements are keyed by their values
#: (``_value_key``): equal ones become one constant variable. (Bigger ones would cost a hash of their bytes.)
_SHARED_CONSTANT_ELEMENTS = 4096

# Primitives of these kinds are folded when all their inputs are literals.
_FOLDABLE_KINDS = frozenset({"unary", "binary"})
_FOLDABLE_NAMES = frozenset({"select_n"})


def _no_folder(primitive, vals, params):
    return None


_fold = _no_folder
_new = object.__new__
_new_tuple = tuple.__new__
_VAR_IDS = Var._ids   # (``Var.__init__``'s counter: numbers stay unique across both ways of making one)


def set_literal_folder(fn) -> None:
    """Install the scalar evaluator used for constant folding (the numpy backend)."""
    global _fold
    _fold = fn


class BuilderTracer(Tracer):
    # (``aval`` a slot, not a property over one: the namespace functions and the shape rules read a tracer's
    # aval ~4 times an equation, issue 28)
    __slots__ = ("aval", "literal")

    def __init__(self, trace, aval, literal=None):
        self._trace = trace
        self.aval = aval
        self.literal = literal

    def _concrete(self, what):
        if self.literal is not None:
            import numpy as np
            return np.asarray(self.literal.val)
        return super()._concrete(what)

    def __repr__(self):
        return f"JitTracer({jax_type(self.aval)})"   # (JAX's text for a staged value)


class Builder:
    """Collects equations and constants while a function is traced."""

    def __init__(self):
        self.eqns = []
        self.vars = {}          # id(tracer) -> Var
        self.tracers = []       # keeps tracers alive so that ids stay unique
        self.consts = {}        # id(value) -> (tracer, value)
        self.by_value = {}      # _value_key(value) -> (tracer, value), small host arrays only
        self.captured = []      # keeps every captured value alive, so that ids stay unique

    def new_tracer(self, trace, aval, literal=None):
        t = BuilderTracer(trace, aval, literal)
        self.tracers.append(t)
        if literal is None:
            self.vars[id(t)] = Var(aval)
        return t

    def atom(self, t):
        return t.literal if t.literal is not None else self.vars[id(t)]

    def release(self):
        """Drop the tracers once the program is built. Each tracer reaches this builder through its trace's
        ``main.global_data``, and the builder held them all: a cycle per trace, freed only by CPython's cycle
        collector, whose collections (the young ones mostly, and the full ones they set off, walking the whole
        heap) cost a jitted decode step ~90 us of each new length's ~470 us on mlx:0 (issue 28). Without
        the cycle the trace's objects go as their last reference does."""
        self.tracers.clear()
        self.consts.clear()
        self.by_value.clear()


class BuilderTrace(Trace):
    __slots__ = ()

    @property
    def builder(self) -> Builder:
        return self.main.global_data

    def new_arg(self, aval):
        return self.builder.new_tracer(self, aval)

    def pure(self, val):
        b = self.builder
        if is_scalar(val):
            d, w = dtype_of_scalar(val)
            return b.new_tracer(self, ShapedArray((), d, w), Literal(val, ShapedArray((), d, w)))
        if not isinstance(val, Array):
            raise TypeError(f"{type(val).__name__} is not an array or a scalar; expected an fnarray "
                            "Array, a NumPy scalar or a Python number")
        hit = b.consts.get(id(val))
        if hit is None:
            key = _value_key(val)
            hit = None if key is None else b.by_value.get(key)
            if hit is None:
                hit = (b.new_tracer(self, val.aval), val)
                if key is not None:
                    b.by_value[key] = hit
            b.consts[id(val)] = hit   # (a second value of an equal key maps to the first one's variable)
            b.captured.append(val)
        return hit[0]

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        b = self.main.global_data   # (the ``builder`` property, inline)
        bvars = b.vars
        # the inputs' atoms and avals in one loop (no generator: each equation of every trace passes here)
        ins, in_avals, all_literal = [], [], bool(tracers)
        for t in tracers:
            lit = t.literal
            if lit is None:
                all_literal = False
                ins.append(bvars[id(t)])
            else:
                ins.append(lit)
            in_avals.append(t.aval)
        if all_literal and (primitive.kind in _FOLDABLE_KINDS or primitive.name in _FOLDABLE_NAMES):
            folded = _fold(primitive, [t.literal.val for t in tracers], params)
            if folded is not None:
                aval = primitive.abstract_eval(*in_avals, **params)
                return b.new_tracer(self, aval, Literal(folded, aval))
        # ``**`` of the Params' own dict: of a Mapping it calls ``keys`` and ``__getitem__`` per item in Python
        avals = primitive.abstract_eval(*in_avals, **(params._d if type(params) is Params else params))
        ins = tuple(ins)
        if not primitive.multiple_results:
            # (one output, the common equation: new_tracer and atom inlined, and the tracer, its variable and the
            # equation made without their Python ``__init__``/``__new__`` frames: three calls an equation)
            t = _new(BuilderTracer)
            t._trace, t.aval, t.literal = self, avals, None
            b.tracers.append(t)
            v = _new(Var)
            v.aval, v._id = avals, next(_VAR_IDS)
            bvars[id(t)] = v
            b.eqns.append(_new_tuple(Eqn, (primitive, ins, params, (v,))))
            return t
        out_tracers = [b.new_tracer(self, a) for a in avals]
        b.eqns.append(Eqn(primitive, ins, params, tuple(bvars[id(t)] for t in out_tracers)))
        return out_tracers


def _value_key(val):
    """``(device, committed, aval, bytes)`` of a concrete array whose buffer is a NumPy array of at most
    ``_SHARED_CONSTANT_ELEMENTS`` elements (its values known without a device read), else ``None``."""
    if isinstance(val, Tracer) or not hasattr(val, "call_view"):
        return None
    buf, device, committed = val.call_view()
    if not isinstance(buf, np.ndarray) or buf.size > _SHARED_CONSTANT_ELEMENTS or buf.dtype.hasobject:
        return None
    return device, committed, val.aval, buf.dtype.str, np.ascontiguousarray(buf).tobytes()


def trace_to_program(flat_fun, in_avals, *, debug_name="fun"):
    """Trace ``flat_fun`` (a function of a flat list of values returning a flat
    list) at ``in_avals``; returns ``(program, consts)``.

    ``consts`` are the captured values (arrays or outer tracers) in the order
    of ``program.constvars``.
    """
    builder = Builder()
    with _profile.span("trace", debug_name, inputs=tuple(in_avals)), new_main(BuilderTrace, builder) as main:
        with new_dynamic(main):
            trace = BuilderTrace(main)
            in_tracers = [trace.new_arg(a) for a in in_avals]
            outs = flat_fun(*in_tracers)
            out_tracers = [trace.full_raise(o) for o in outs]
    constvars, constvals = [], []
    seen = set()
    for t, v in builder.consts.values():
        if id(t) not in seen:   # values of equal keys share one (tracer, value)
            seen.add(id(t))
            constvars.append(builder.vars[id(t)])
            constvals.append(v)
    prog = Program(constvars, [builder.vars[id(t)] for t in in_tracers], builder.eqns,
                   [builder.atom(t) for t in out_tracers])
    builder.release()
    return prog, constvals
