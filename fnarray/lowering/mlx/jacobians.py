"""Eager ``jacfwd``/``jacrev``/``hessian`` on mlx through MLX's own ``mx.vmap``/``mx.jvp``/``mx.vjp`` (issue 28).

fnarray's Jacobians interpret their function under JVP, partial-evaluation and batching tracers, primitive by
primitive, each level a Python rule (~2,700 Python calls a Jacobian of a five-operation function: 3.5-3.8x raw
MLX's ``vmap`` of ``jvp``/``vjp`` on ``benchmarks/programs.py``'s sweep). On an mlx device, an eager call whose
function uses only the primitives of ``DIFFERENTIABLE`` runs instead as raw MLX runs it: the function's Python
runs once, under ``_MxTrace``, whose tracers hold the MLX arrays of MLX's own transforms and apply each
primitive's mlx rule (``common.RULES``, as the eager path does) to them; MLX differentiates and vectorizes those
operations. This is the one place where fnarray leaves differentiation to a backend's library, and only where the
two agree: the IR transforms stay the definition (every other call, every other backend, ``jit``, ``vmap``).

The rule: ``DIFFERENTIABLE`` holds the primitives whose mlx rule MLX differentiates as fnarray's own JVP rule
(``transforms/ad_rules.py``) does, up to float rounding: smooth real arithmetic, products, sums, comparisons,
``select_n`` and data movement, on float32 (int32 and bool values may feed them; a float -> int conversion may
not). Anything else the function binds *refuses* the call: ``stop_gradient`` (whose mlx rule is the identity),
``custom_jvp_call``/``custom_vjp_call`` (whose rules MLX would not see), ``max``/``min`` (whose ties MLX and JAX
split differently), a jitted call, a value read on the host (Python control flow on a value, which fnarray's
transform allows on primal values), another device's array. A refused call runs as fnarray's transform (``None``),
the function's Python a second time, and that function (its code, closure and defaults, at those avals) is not
tried again. So are a call with keyword arguments, ``has_aux``, several ``argnums``, a differentiated argument
that is not a strongly typed float32 array, a call inside another transformation, while a thread stages, with
the profiler recording or ``debug_nans``/``debug_infs`` on.

``jacrev`` and ``hessian`` need the function's output aval before MLX's ``vjp`` runs it (the cotangent basis). A
code object's first call at given avals runs by forward mode (``jacfwd``, ``jacfwd`` of ``jacfwd``: the same
Jacobian) where the differentiated array has at most ``FORWARD_FIRST`` elements, else as fnarray's transform, and
the output aval it shows is kept (``_outputs``); a later call whose function returns another aval runs as
fnarray's transform once and corrects the entry. Results are fnarray's in layout (``O + I``), dtype and committed
flag, and in value up to float rounding (``tests/test_mlx_backend.py`` compares both paths); the identity bases are
made once per shape (raw MLX's ``mx.eye`` at each call is two more operations of every Jacobian's graph).

Staged calls (``config.stage_eager_transforms``: ``staged``, ``Backend.staged_jacobian``) follow the same rule, with
the staged semantics (``transforms/staged_transforms.py``): the function's Python runs once per staged key (its
fingerprint) and avals, under ``_Recorder``, which writes each rule it applies and each constant it lifts into a
``_Tape``; every call, the first included, replays the tape under MLX's transforms, the arguments in its first
slots (the differentiated one an array of MLX's transforms; the others are inputs, not constants). The recording
shows the output aval, so ``jacrev``/``hessian`` need no forward first call. The tape lives in the staged
program's cache entry; a function the rule refuses runs as that entry's jitted program (its Python a second time
at that first call). Issue 28: the jitted program's trace, IR transforms and lowering made the first staged sweep
of ``benchmarks/programs.py`` 8.7x raw MLX.
"""
from __future__ import annotations

import math
import types

import numpy as np

from fnarray.core import dtypes, tracing
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.config import config
from fnarray.core.ir import Params
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer
from fnarray.devices import placement
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.lookup import default_device
from fnarray.lowering.mlx.common import F32_EXACT, mx

__all__ = ["DIFFERENTIABLE", "jacobian", "learn", "staged", "stats"]

#: The primitives whose mlx rule MLX differentiates as fnarray's JVP rule does (module docstring).
DIFFERENTIABLE = frozenset({
    P.add, P.sub, P.mul, P.div, P.neg, P.exp, P.log, P.log1p, P.expm1, P.tanh, P.sin, P.cos, P.sinh, P.cosh,
    P.logistic, P.sqrt, P.rsqrt, P.integer_pow, P.dot_general, P.reduce_sum, P.broadcast_in_dim, P.reshape,
    P.transpose, P.slice_p, P.concatenate, P.rev, P.select_n, P.convert_element_type, P.copy_p,
    P.eq, P.ne, P.lt, P.le, P.gt, P.ge,
})
_F32 = dtypes.float32
_SCALARS = frozenset({bool, int, float})
_NO_PARAMS = Params()
_WEAK_F32 = ShapedArray((), _F32, True)   # a Python float's aval
_F32_SCALAR = ShapedArray((), _F32, False)   # a Python int's beside a float32 value (``dtypes.scalar_literal``)
_VALUES = frozenset({dtypes.float32, dtypes.int32, dtypes.bool_})   # the dtypes a value of the function may have

#: counters for tests: eager calls MLX's transforms served, calls (or staged records) refused, staged records made,
#: staged calls replayed
stats = {"native": 0, "refused": 0, "taped": 0, "replayed": 0}

_rules: dict = {}     # (primitive, [params,] avals) -> (fn, out aval), for ``_generation[0]``: configuration, device
_generation = [None]
_outputs: dict = {}   # (code, argnum, avals, kind) -> the function's output aval (jacrev, hessian)
_refused: dict = {}   # (code, argnum, avals, closure ids) of functions that refused: fnarray's transform after
_bases: dict = {}     # shape -> MLX's identity basis, (n,) + shape (made once, evaluated); () -> the scalar 1
#: ``jacrev`` and ``hessian``'s first call of a function at avals whose differentiated array has at most this many
#: elements runs by forward mode (``jacfwd``, ``jacfwd`` of ``jacfwd``: the same Jacobian, ``n`` or ``n * n`` JVPs),
#: which shows the output aval that reverse mode needs; a larger one runs as fnarray's transform.
FORWARD_FIRST = 64
_KEPT = 1024          # each dict is emptied when it reaches this many entries
_SUM_ALL: dict = {}   # aval -> the ``_rules`` key of its sum over every axis


class _Refused(Exception):
    """The function did something ``DIFFERENTIABLE`` does not cover (module docstring)."""


class _MxTracer(Tracer):
    """A value of the function under ``_MxTrace``: ``buf``, an MLX array of MLX's transforms, and its aval."""

    __slots__ = ("buf", "aval")

    def __init__(self, trace, buf, aval):
        self._trace, self.buf, self.aval = trace, buf, aval

    def _concrete(self, what):
        raise _refuse(self._trace.main)   # (fnarray's transform raises its own ConcretizationError)

    def sum(self, *args, **kwargs):
        """``Array.sum``; of every axis of a float32 value at once (``fnarray.numpy.sum``'s reduction there)."""
        av = self.aval
        trace = self._trace
        if args or kwargs or av.dtype != _F32 or not av.shape or not trace.main.alive:
            return Array.sum(self, *args, **kwargs)
        key = _SUM_ALL.get(av)
        if key is None:
            key = (P.reduce_sum, frozenset({("axes", tuple(range(av.ndim)))}), (av,))
            _keep(_SUM_ALL, av, key)
        hit = _rules.get(key)
        if hit is None:
            return trace.process_primitive(P.reduce_sum, [self], Params(axes=tuple(range(av.ndim))))
        if type(self) is not _MxTracer:   # (a ``_Slot``: recorded)
            return trace.apply(hit, self)
        return _MxTracer(trace, hit[0](self.buf), hit[1])


def _refuse(main):
    main.global_data["refused"] = True   # (kept even if the function catches the exception)
    return _Refused()


def _operator(primitive, general, reflected=False, recorded=False):
    """``_MxTracer``'s ``+ - * /``: a strongly typed float32 value with a Python ``float``/``int`` or with a value
    of its own aval applies ``primitive`` at once (``fnarray.numpy``'s promotion of those operands, as
    ``numpy._util._fast_binary`` makes it: a float stays a weak literal, an int becomes a float32 one); anything
    else is ``Array``'s ``general`` operator (issue 28: ~11 Python calls an operation, against ~2). ``recorded``:
    ``_Slot``'s, whose scalar operand and result are ``_Recorder``'s (``scalar``, ``apply``: the tape's)."""
    def method(self, other):
        av = self.aval
        trace = self._trace
        if av.dtype != _F32 or av.weak_type or not trace.main.alive:
            return general(self, other)
        t = type(other)
        if t is float or (t is int and -F32_EXACT <= other <= F32_EXACT):
            aval = _WEAK_F32 if t is float else _F32_SCALAR   # (an int: a float32 literal, exact, no rounding)
            o = trace.scalar(other, aval) if recorded else _MxTracer(trace, mx.array(other, dtype=mx.float32), aval)
        elif t is type(self) and other._trace.main is trace.main and other.aval == av:
            o = other
        else:
            return general(self, other)
        a, b = (o, self) if reflected else (self, o)
        hit = _rules.get((primitive, (a.aval, b.aval)))   # (``process_primitive``'s key and lookup, inline)
        if hit is None:
            return trace.process_primitive(primitive, [a, b], _NO_PARAMS)
        return trace.apply(hit, a, b) if recorded else _MxTracer(trace, hit[0](a.buf, b.buf), hit[1])
    method.__name__ = general.__name__
    return method


def _operators(cls, recorded):
    for name, p in (("add", P.add), ("sub", P.sub), ("mul", P.mul), ("truediv", P.div)):
        setattr(cls, f"__{name}__", _operator(p, getattr(Array, f"__{name}__"), recorded=recorded))
        setattr(cls, f"__r{name}__", _operator(p, getattr(Array, f"__r{name}__"), True, recorded))


_operators(_MxTracer, False)


class _MxTrace(Trace):
    """Applies each primitive's mlx rule to the MLX arrays of the tracers; ``main.global_data``: the device and
    what the call saw (``refused``, ``committed``, ``out``)."""

    __slots__ = ()

    def pure(self, val):
        state = self.main.global_data
        if type(val) is ArrayImpl and val._device is state["device"] and val._buf is not None:
            if val._committed:
                state["committed"] = True
            return _MxTracer(self, val._buf, val.aval)
        if type(val) is float:
            return _MxTracer(self, mx.array(val, dtype=mx.float32), _WEAK_F32)   # (``scalar_to_device``'s own)
        if type(val) in _SCALARS or isinstance(val, np.generic):
            d, weak = dtypes.dtype_of_scalar(val)
            return _MxTracer(self, state["impl"].scalar_to_device(val, d, state["device"]), ShapedArray((), d, weak))
        raise _refuse(self.main)   # another trace's tracer, another device, a NumPy array...

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        if len(tracers) == 1:   # (unary operations, inline: the commonest after the operators)
            t = tracers[0]
            hit = _rules.get((primitive, (t.aval,)) if not params._d else None)
            if hit is not None:
                return _MxTracer(self, hit[0](t.buf), hit[1])
        avals = tuple([t.aval for t in tracers])
        d = params._d
        key = (primitive, frozenset(d.items()), avals) if d else (primitive, avals)
        hit = _rules.get(key)
        if hit is None:
            hit = _miss(self.main, primitive, params, avals, key)
        return _MxTracer(self, hit[0](*[t.buf for t in tracers]), hit[1])


def _miss(main, primitive, params, avals, key):
    """``(fn, out aval)``: ``primitive``'s mlx rule at ``avals``, made and kept under ``key``, or the refusal."""
    hit = _rule(primitive, params, avals, main.global_data["device"])
    if hit is None:
        raise _refuse(main)
    _keep(_rules, key, hit)
    return hit


def _rule(primitive, params, avals, device):
    """``(fn, out aval)`` of ``primitive`` at ``avals`` where ``DIFFERENTIABLE`` and the dtypes allow, else
    ``None``."""
    if primitive not in DIFFERENTIABLE or primitive.multiple_results:
        return None
    out = primitive.abstract_eval(*avals, **params._d)
    if out.dtype not in _VALUES or any(a.dtype not in _VALUES for a in avals):
        return None
    if primitive is P.convert_element_type and out.dtype != _F32 and avals[0].dtype == _F32:
        return None   # (float -> int or bool: fnarray's derivative is zero, MLX's cast back would not be)
    fn = device.impl.eager_rule(primitive, params, avals, (out,), device)
    return None if fn is None else (fn, out)


def _keep(d, key, value):
    if len(d) >= _KEPT:
        d.clear()
    d[key] = value


def _where(fun, args, argnum):
    """The key of a call's function and avals (``_outputs``, ``_refused``)."""
    if len(args) == 1:
        return fun.__code__, argnum, args[0].aval
    return fun.__code__, argnum, tuple([a.aval if type(a) is ArrayImpl else type(a) for a in args])


def _closure_ids(fun):
    """The identities of what ``fun`` closes over and its defaults: a refusal is kept per function of a code, so
    that ``hessian(lambda x, f=f: f(x).sum())`` of one ``f`` that refuses leaves the others of that code alone (an
    identity reused after its object died can only send a call to fnarray's transform)."""
    ids = [id(v) for v in fun.__defaults__ or ()]
    for cell in fun.__closure__ or ():
        try:
            ids.append(id(cell.cell_contents))
        except ValueError:   # an empty cell
            ids.append(None)
    return tuple(ids)


def jacobian(kind, fun, args, argnum, x):
    """``kind`` (``"jacfwd"``, ``"jacrev"``, ``"hessian"``) of ``fun`` at ``args``, differentiated at ``argnum``
    (the concrete array ``x``), through MLX's transforms, as an ``ArrayImpl`` on ``x``'s device; ``None`` where the
    module docstring's rule leaves the call to fnarray's transform (which then ``learn``s the output aval)."""
    device = _served(fun, args, x)
    if device is None:
        return None
    av = x.aval
    where = _where(fun, args, argnum)
    refusal = where + _closure_ids(fun)
    if refusal in _refused:
        return None
    out_aval = None
    run = kind
    if kind != "jacfwd":
        out_aval = _outputs.get(where + (kind,))
        if out_aval is None:
            if av.size > FORWARD_FIRST:
                return None   # (fnarray's transform runs it; ``learn`` keeps its output aval)
            run = "forward " + kind   # (the same Jacobian by forward mode, which needs no output aval)
    state = {"device": device, "impl": device.impl, "refused": False, "committed": x._committed, "out": None,
             "expect": out_aval}
    try:
        buf = _run(run, _traced(fun, args, argnum, state), x, out_aval, device)
    except Exception:  # noqa: BLE001 (refused, or MLX or the function failed: fnarray's transform decides)
        buf = None
    out = state["out"]
    if out is not None and out_aval is not None and out != out_aval:   # (another output aval: learn it again)
        _keep(_outputs, where + (kind,), out)
        return None
    if buf is None or state["refused"] or out is None:
        _keep(_refused, refusal, True)
        stats["refused"] += 1
        return None
    if out_aval is None and kind != "jacfwd":
        _keep(_outputs, where + (kind,), out)
    stats["native"] += 1
    shape = out.shape + av.shape * (2 if kind == "hessian" else 1)
    return ArrayImpl.make(ShapedArray(shape, out.dtype), device, buf, state["committed"])


def _served(fun, args, x):
    """``x``'s device where the module docstring's rule lets MLX's transforms take a call of ``fun`` at ``args``
    (before the function runs), else ``None``; ``_rules`` is emptied for another configuration or device."""
    av = x.aval
    if (type(fun) is not types.FunctionType or x._buf is None or av.dtype != _F32 or av.weak_type or not av.size
            or not tracing.plain or tracing.transforming() or placement.debug_check is not None):
        return None   # (``plain``: no thread stages and the profiler is off; ``debug_check``: debug_nans/infs)
    device = x._device
    if len(args) > 1:
        for a in args:
            if type(a) is ArrayImpl and a._device is not device:
                return None
    gen = (config.generation, device)
    if gen != _generation[0]:   # (another configuration or device: rules made anew)
        _rules.clear()
        _generation[0] = gen
    return device


def learn(kind, fun, args, argnum, x, result):
    """Keep the output aval of ``fun`` that ``result`` (fnarray's ``kind`` of it at ``args``, differentiated at
    ``argnum``: ``x``) shows, for ``jacobian``'s later calls of ``jacrev`` and ``hessian``."""
    if kind == "jacfwd" or type(fun) is not types.FunctionType or type(result) is not ArrayImpl:
        return
    key = _where(fun, args, argnum) + (kind,)
    if key not in _outputs:
        r = result.aval
        _keep(_outputs, key, ShapedArray(r.shape[:r.ndim - x.aval.ndim * (2 if kind == "hessian" else 1)], r.dtype))


def _traced(fun, args, argnum, state):
    """``g(xm) -> MLX array``: ``fun`` at ``args`` with ``xm`` (an array of MLX's transforms) at ``argnum``,
    under ``_MxTrace``; its output aval goes to ``state["out"]``."""
    aval = args[argnum].aval

    def g(xm):
        with tracing.new_main(_MxTrace, state) as main:
            full = list(args)
            full[argnum] = _MxTracer(_MxTrace(main), xm, aval)
            out = fun(*full)
            if (type(out) is not _MxTracer or out._trace.main is not main or out.aval.dtype != _F32
                    or out.aval.weak_type):
                raise _refuse(main)
            state["out"] = out.aval
            expect = state["expect"]
            if expect is not None and out.aval != expect:
                raise _Refused()   # (``jacobian`` learns the new aval; not a refusal of the function)
            return out.buf
    return g


def _run(kind, g, x, out_aval, device):
    """The Jacobian's MLX array (module docstring), on the device's stream."""
    shape = x.aval.shape
    if kind == "jacfwd" or kind == "forward jacrev":
        jac = _jacfwd(g, shape)
    elif kind == "jacrev":
        jac = _jacrev(g, shape, out_aval.shape)
    elif kind == "hessian":
        jac = _jacfwd(_jacrev(g, shape, out_aval.shape), shape)
    else:   # (forward hessian)
        jac = _jacfwd(_jacfwd(g, shape), shape)
    handle = device.handle
    if mx.default_device() == handle:
        return jac(x._buf)
    with mx.stream(handle):
        return jac(x._buf)


def _basis(shape):
    """The identity basis over ``shape``'s elements, ``(n,) + shape``, float32, and for ``()`` the scalar 1 (made
    and evaluated once: raw MLX's ``mx.eye`` each call is two more operations of each Jacobian's graph)."""
    b = _bases.get(shape)
    if b is None:
        n = math.prod(shape)
        b = mx.eye(n, dtype=mx.float32).reshape((n,) + shape) if shape else mx.array(1.0, dtype=mx.float32)
        mx.eval(b)
        _keep(_bases, shape, b)
    return b


def _jacfwd(g, shape):
    """``xb -> O + I``: a JVP per input element, vectorized (``mx.vmap`` of ``mx.jvp``)."""
    if len(shape) == 1:   # (the basis' rows are the tangents and the columns ``I``: no reshape either side)
        return lambda xb: mx.vmap(lambda t: mx.jvp(g, [xb], [t])[1][0], in_axes=0, out_axes=-1)(_basis(shape))

    def jac(xb):
        basis = _basis(shape) if shape else _basis((1,))   # (a scalar ``x``: one tangent of shape ())
        cols = mx.vmap(lambda t: mx.jvp(g, [xb], [t.reshape(shape)])[1][0], in_axes=0, out_axes=-1)(basis)
        return cols.reshape(cols.shape[:-1] + shape)
    return jac


def _jacrev(g, shape, out_shape):
    """``xb -> O + I``: a VJP per output element, vectorized (one ``mx.vjp`` for a scalar output)."""
    def jac(xb):
        if not out_shape:
            return mx.vjp(g, [xb], [_basis(())])[1][0]
        rows = mx.vmap(lambda c: mx.vjp(g, [xb], [c])[1][0])(_basis(out_shape))   # (m,) + I
        return rows if len(out_shape) == 1 else rows.reshape(out_shape + shape)
    return jac


# ---------------------------------------------------------------------------------------- staged: record, replay
class _Tape:
    """The MLX operations a function applied at its first staged call: ``steps`` ``(fn, input slots)`` over the
    slots ``args + consts + outputs of the steps``; ``out`` the result's slot, ``aval`` its aval, ``committed``
    whether a committed array the function closes over was read, ``results`` the Jacobians' avals by kind and
    argnum."""

    __slots__ = ("nargs", "consts", "steps", "out", "aval", "committed", "results")

    def __init__(self, nargs):
        self.nargs, self.consts, self.steps, self.results = nargs, [], [], {}   # results: (kind, argnum) -> aval

    def finish(self, out, aval, committed):
        """Number the slots (recorded as ``("a" | "c" | "s", i)``: argument, constant, step) for ``replay``."""
        first = {"a": 0, "c": self.nargs, "s": self.nargs + len(self.consts)}
        self.steps = [(fn, tuple([first[k] + i for k, i in ins])) for fn, ins in self.steps]
        self.out, self.aval, self.committed = first[out[0]] + out[1], aval, committed

    def replay(self, bufs):
        """The result's MLX array for the arguments' ``bufs`` (arrays of MLX's transforms among them)."""
        env = bufs + self.consts
        for fn, ins in self.steps:
            if len(ins) == 1:
                env.append(fn(env[ins[0]]))
            elif len(ins) == 2:
                env.append(fn(env[ins[0]], env[ins[1]]))
            else:
                env.append(fn(*[env[i] for i in ins]))
        return env[self.out]


class _Slot(_MxTracer):
    """A value of the function under ``_Recorder``: its aval and its slot of the tape (``at``), no MLX array
    (``buf``: a constant's, else ``None``: the record applies nothing, the replays do)."""

    __slots__ = ("at",)

    def __init__(self, trace, buf, aval, at):
        self._trace, self.buf, self.aval, self.at = trace, buf, aval, at


_operators(_Slot, True)


class _Recorder(_MxTrace):
    """``_MxTrace``'s rules and refusals, written into ``main.global_data["tape"]`` instead of applied."""

    __slots__ = ()

    def pure(self, val):
        t = _MxTrace.pure(self, val)
        return self._constant(t.buf, t.aval)

    lift = pure

    def scalar(self, value, aval):
        """A Python ``float`` or ``int`` operand of ``_operator``'s, of ``aval``: a constant of the tape."""
        return self._constant(mx.array(value, dtype=mx.float32), aval)

    def _constant(self, buf, aval):
        consts = self.main.global_data["tape"].consts
        consts.append(buf)
        return _Slot(self, buf, aval, ("c", len(consts) - 1))

    def apply(self, hit, *tracers):
        """``hit`` (a rule and its output aval: ``_hit``'s) on ``tracers``: a step of the tape."""
        steps = self.main.global_data["tape"].steps
        steps.append((hit[0], [t.at for t in tracers]))
        return _Slot(self, None, hit[1], ("s", len(steps) - 1))

    def process_primitive(self, primitive, tracers, params):
        avals = tuple([t.aval for t in tracers])
        d = params._d
        key = (primitive, frozenset(d.items()), avals) if d else (primitive, avals)
        return self.apply(_rules.get(key) or _miss(self.main, primitive, params, avals, key), *tracers)


_NOT_TAPED = object()   # a ``staged`` key whose function refused: the staged program (jit) runs it


def staged(kind, fun, args, argnum, x, tapes):
    """``kind`` of ``fun`` at ``args`` (concrete arrays) differentiated at ``argnum`` (``x``), for a staged call
    (``config.stage_eager_transforms``, ``Backend.staged_jacobian``): the MLX operations the function applies
    are recorded once per avals into ``tapes`` (the staged program's own dict) and replayed under MLX's
    transforms; ``None`` where the module docstring's rule leaves the call to the staged program."""
    device = _served(fun, args, x)
    if device is None:
        return None
    key = (x.aval if len(args) == 1 else tuple([a.aval for a in args]), device, config.generation)
    tape = tapes.get(key)
    if tape is None:
        tape = tapes[key] = _record(fun, args, device)
    if tape is _NOT_TAPED:
        return None
    bufs = [a._buf for a in args]

    def g(xm):
        env = bufs[:]
        env[argnum] = xm
        return tape.replay(env)
    try:
        buf = _run(kind, g, x, tape.aval, device)
    except Exception:  # noqa: BLE001 (an MLX limitation: the staged program decides)
        tapes[key] = _NOT_TAPED
        return None
    stats["replayed"] += 1
    aval = tape.results.get((kind, argnum))
    if aval is None:
        aval = tape.results[kind, argnum] = ShapedArray(
            tape.aval.shape + x.aval.shape * (2 if kind == "hessian" else 1), _F32)
    committed = tape.committed or (x._committed if len(args) == 1 else any([a._committed for a in args]))
    return ArrayImpl.make(aval, device, buf, committed)


def _record(fun, args, device):
    """``fun``'s ``_Tape`` at ``args``, or ``_NOT_TAPED`` where it does something the rule refuses."""
    tape = _Tape(len(args))
    state = {"device": device, "impl": device.impl, "refused": False, "committed": False, "tape": tape}
    try:   # (arrays the function makes without operands are made on the arguments' device: ``transforms/ad.py``)
        with default_device(device), tracing.new_main(_Recorder, state) as main:
            trace = _Recorder(main)
            out = fun(*[_Slot(trace, None, a.aval, ("a", i)) for i, a in enumerate(args)])
            if (type(out) is not _Slot or out._trace.main is not main or out.aval.dtype != _F32
                    or out.aval.weak_type):
                raise _refuse(main)
    except Exception:  # noqa: BLE001 (refused, or the function failed: the staged program decides)
        state["refused"] = True
    if state["refused"]:
        stats["refused"] += 1
        return _NOT_TAPED
    stats["taped"] += 1
    tape.finish(out.at, out.aval, state["committed"])
    return tape
