"""Automatic differentiation: forward mode, partial evaluation, transposition.

The design follows JAX's ("You only linearize once", Radul et al., 2023, and
the Autodidax tutorial):

- ``jvp`` runs the function under a ``JVPTrace`` whose tracers carry a primal
  and a tangent; each primitive's rule comes from ``ad_tables.primitive_jvps``.
- ``linearize`` runs the JVP under a partial-evaluation trace in which primals
  are *known* (computed now, so Python control flow on them works) and
  tangents are *unknown* (staged into a linear ``Program``); known values that
  the linear program reads become its residuals.
- ``vjp`` transposes that linear program (``backward_pass``) with the rules of
  ``ad_tables.primitive_transposes``; ``grad`` is ``vjp`` with a unit cotangent.

Every rule is IR -> IR, so derivatives run on every backend.
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.interpreter import eval_program, literal_value
from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.passes import consts_as_inputs, dce
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer, find_top_trace, is_scalar, new_main
from fnarray.transforms import ad_rules  # noqa: F401  (fills the rule tables)
from fnarray.transforms import fft_rules  # noqa: F401  (the fft primitive's rules)
from fnarray.transforms.ad_tables import (UndefinedPrimal, Zero, add_tangents, instantiate_zeros,
                                          partial_eval_rules, primitive_jvps, primitive_transposes,
                                          tangent_aval, zeros_like_aval)

__all__ = ["jvp", "linearize", "vjp", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian",
           "custom_jvp", "custom_vjp", "checkpoint", "remat", "stop_gradient", "jvp_program",
           "partial_eval_program", "transpose_program", "backward_pass", "JVPTrace", "PartialEvalTrace"]


def _arrays(leaves):
    """NumPy arrays among the leaves become fnarray arrays (as JAX accepts NumPy inputs)."""
    from fnarray.devices.placement import array_from_numpy
    return [array_from_numpy(x) if isinstance(x, np.ndarray) else x for x in leaves]


_aval = get_aval  # fnarray.core.avals


# ================================================================================ forward mode


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self):
        return _aval(self.primal)

    def _concrete(self, what):
        p = self.primal
        if isinstance(p, Array):
            return p._concrete(what)
        return np.asarray(p)


class JVPTrace(Trace):
    __slots__ = ()

    def pure(self, val):
        return JVPTracer(self, val, Zero(tangent_aval(_aval(val))))

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        rule = primitive_jvps.get(primitive)
        if rule is None:
            raise NotImplementedError(f"differentiation rule for '{primitive.name}' is not implemented")
        out_p, out_t = rule(primals, tangents, **params)
        if primitive.multiple_results:
            return [JVPTracer(self, p, t) for p, t in zip(out_p, out_t, strict=True)]
        return JVPTracer(self, out_p, out_t)


def _jvp_flat(fun_flat, primals, tangents):
    """Run ``fun_flat`` with JVP tracers; returns (primal outs, tangent outs — possibly Zero)."""
    with new_main(JVPTrace) as main:
        trace = JVPTrace(main)
        ins = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents, strict=True)]
        outs = fun_flat(*ins)
        outs = [trace.full_raise(o) for o in outs]
        return [o.primal for o in outs], [o.tangent for o in outs]


def _check_tangent(p, t, i):
    pa = _aval(p)
    if isinstance(t, Zero):
        return t
    ta = _aval(t) if not (isinstance(t, np.ndarray) and t.dtype == dtypes.float0) else ShapedArray(
        t.shape, dtypes.float0)
    want = tangent_aval(pa)
    if want.dtype == dtypes.float0:
        if ta.shape != pa.shape and ta.shape != ():
            raise ShapeError(f"jvp: tangent {i} has shape {ta.shape}, primal has shape {pa.shape}")
        return Zero(want)
    if ta.shape != pa.shape:
        raise ShapeError(f"jvp: primal {i} has shape {pa.shape} but its tangent has shape {ta.shape}; "
                         "tangents must match their primals' shapes")
    if ta.dtype != pa.dtype:
        raise DTypeError(f"jvp: primal {i} has dtype {pa.dtype.name} but its tangent has dtype {ta.dtype.name}; "
                         "tangents must have their primals' dtypes")
    return t


def _float0_zeros(aval):
    return np.zeros(aval.shape, dtype=dtypes.float0)


def _out_tangent(t, p):
    if isinstance(t, Zero):
        a = tangent_aval(_aval(p))
        return _float0_zeros(a) if a.dtype == dtypes.float0 else zeros_like_aval(a)
    return t


def jvp(fun, primals, tangents, has_aux=False):
    """Forward-mode derivative (mirrors ``jax.jvp``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      primals: a tuple or list of the arguments.
      tangents: the same structure; each tangent has its primal's shape and dtype
        (integer and bool primals take ``float0`` tangents or zeros).
      has_aux: if true, ``fun`` returns ``(output, aux)``; ``aux`` is returned
        undifferentiated.

    Returns:
      ``(primals_out, tangents_out)``: ``fun(*primals)`` and the Jacobian applied to
      ``tangents``, with the output's structure, shapes and dtypes (integer and bool
      outputs get ``float0`` tangents); ``(primals_out, tangents_out, aux)`` with
      ``has_aux``.

    Raises:
      TypeError: ``primals``/``tangents`` are not tuples or lists, their structures
        differ, or with ``has_aux`` ``fun`` does not return a pair.
      ShapeError: a tangent's shape differs from its primal's.
      DTypeError: a tangent's dtype differs from its primal's.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp takes primals and tangents as tuples or lists of arguments, "
                        f"got {type(primals).__name__} and {type(tangents).__name__}")
    p_flat, p_tree = tree_util.tree_flatten(tuple(primals))
    t_flat, t_tree = tree_util.tree_flatten(tuple(tangents))
    p_flat, t_flat = _arrays(p_flat), [t if (isinstance(t, np.ndarray) and t.dtype == dtypes.float0) else x
                                       for t, x in zip(t_flat, _arrays(t_flat), strict=True)]
    if p_tree != t_tree:
        raise TypeError(f"jvp: primals and tangents must have the same structure, got {p_tree} and {t_tree}")
    t_flat = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_flat, t_flat, strict=True))]
    aux_store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        if has_aux:
            out, aux = _split_aux(out)
            aux_store.append(aux)
        leaves, tree = tree_util.tree_flatten(out)
        aux_store.insert(0, tree)
        return leaves

    out_p, out_t = _jvp_flat(flat, p_flat, t_flat)
    out_tree = aux_store[0]
    out_t = [_out_tangent(t, p) for t, p in zip(out_t, out_p, strict=True)]
    res = (tree_util.tree_unflatten(out_tree, out_p), tree_util.tree_unflatten(out_tree, out_t))
    if has_aux:
        return res + (_lower_aux(aux_store[1]),)
    return res


def _split_aux(out):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        kind = "an array" if isinstance(out, Array) else type(out).__name__
        raise TypeError(f"has_aux=True needs the function to return a pair (output, aux), got {kind}")
    return out[0], out[1]


def _lower_aux(aux):
    from fnarray.core.tracing import full_lower
    return tree_util.tree_map(full_lower, aux)


# ================================================================================ partial evaluation


class PETracer(Tracer):
    """A value of partial evaluation: known (``known`` holds its value) or unknown (a Var)."""

    __slots__ = ("_aval", "is_known", "value")

    def __init__(self, trace, aval, is_known, value=None):
        self._trace = trace
        self._aval = aval
        self.is_known = is_known
        self.value = value

    @property
    def aval(self):
        return self._aval

    def _concrete(self, what):
        if self.is_known:
            v = self.value
            if isinstance(v, Array):
                return v._concrete(what)
            return np.asarray(v)
        return super()._concrete(what)


class _PEBuilder:
    def __init__(self):
        self.eqns = []
        self.vars = {}       # id(tracer) -> Var, for unknown tracers and residuals
        self.residuals = {}  # id(value) -> (Var, value)
        self.keep = []

    def var_of_unknown(self, t):
        return self.vars[id(t)]

    def residual(self, value, aval):
        if is_scalar(value):
            d, w = dtypes.dtype_of_scalar(value)
            return Literal(value, ShapedArray((), d, w))
        hit = self.residuals.get(id(value))
        if hit is None:
            hit = (Var(aval), value)
            self.residuals[id(value)] = hit
            self.keep.append(value)
        return hit[0]


class PartialEvalTrace(Trace):
    """Known values are computed now (one level down); unknown ones are staged into a program."""

    __slots__ = ()

    @property
    def builder(self) -> _PEBuilder:
        return self.main.global_data

    # -- the interface control-flow rules use -------------------------------------
    def known(self, value):
        return PETracer(self, _aval(value), True, value)

    def is_known(self, t) -> bool:
        return t.is_known

    def known_value(self, t):
        return t.value

    def new_unknown(self, aval):
        t = PETracer(self, aval, False)
        self.builder.vars[id(t)] = Var(aval)
        self.builder.keep.append(t)
        return t

    def instantiate(self, t):
        """An unknown tracer standing for ``t`` (a known value becomes a residual)."""
        if not t.is_known:
            return t
        out = PETracer(self, t.aval, False)
        b = self.builder
        b.keep.append(out)
        atom = b.residual(t.value, t.aval)
        if isinstance(atom, Literal):
            # A literal has no variable: materialize it with a copy equation.
            v = Var(t.aval)
            b.eqns.append(Eqn(P.copy_p, (atom,), _params(), (v,)))
            b.vars[id(out)] = v
        else:
            b.vars[id(out)] = atom
        return out

    def atom(self, t):
        if t.is_known:
            return self.builder.residual(t.value, t.aval)
        return self.builder.var_of_unknown(t)

    def stage(self, primitive, tracers, params):
        """Stage an equation whose outputs are all unknown; returns the output tracers (a list)."""
        b = self.builder
        avals = primitive.abstract_eval(*[t.aval for t in tracers], **params)
        avals = list(avals) if primitive.multiple_results else [avals]
        outs = [self.new_unknown(a) for a in avals]
        b.eqns.append(Eqn(primitive, tuple(self.atom(t) for t in tracers), params,
                          tuple(b.var_of_unknown(o) for o in outs)))
        return outs

    # -- the Trace interface ---------------------------------------------------------
    def pure(self, val):
        return self.known(val)

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        if all(t.is_known for t in tracers):
            out = primitive.bind(*[t.value for t in tracers], **params)
            if primitive.multiple_results:
                return [self.known(o) for o in out]
            return self.known(out)
        rule = partial_eval_rules.get(primitive)
        if rule is not None:
            return rule(self, tracers, **params)
        outs = self.stage(primitive, tracers, params)
        return outs if primitive.multiple_results else outs[0]


def _params(**kw):
    from fnarray.core.ir import Params
    return Params(kw)


def _pe_flat(fun_flat, known_vals, unknown_avals, order):
    """Run ``fun_flat`` with known and unknown inputs (``order[i]`` True = unknown).

    Returns ``(outs_known: list[bool], known_out_values, program, residual_values)``
    where ``program`` takes ``[*residuals, *unknown inputs]`` and returns the unknown outputs.
    """
    builder = _PEBuilder()
    with new_main(PartialEvalTrace, builder) as main:
        trace = PartialEvalTrace(main)
        kv, ua = iter(known_vals), iter(unknown_avals)
        ins = [trace.new_unknown(next(ua)) if u else trace.known(next(kv)) for u in order]
        outs = fun_flat(*ins)
        outs = [trace.full_raise(o) for o in outs]
        unknown_ins = [builder.var_of_unknown(t) for t, u in zip(ins, order, strict=True) if u]
        out_known = [o.is_known for o in outs]
        known_outs = [o.value for o in outs if o.is_known]
        out_vars = [builder.var_of_unknown(o) for o in outs if not o.is_known]
    res_vars = [v for v, _ in builder.residuals.values()]
    res_vals = [val for _, val in builder.residuals.values()]
    prog = Program([], res_vars + unknown_ins, builder.eqns, out_vars)
    prog, used = dce(prog)
    # Drop residuals the program no longer reads.
    n = len(res_vars)
    keep = [i for i in range(n) if used[i]]
    prog = Program([], [res_vars[i] for i in keep] + unknown_ins, prog.eqns, prog.outvars)
    return out_known, known_outs, prog, [res_vals[i] for i in keep]


def partial_eval_program(program: Program, unknowns, instantiate=False):
    """Split a closed program by which inputs are unknown.

    Args:
      unknowns: one bool per input of ``program``.
      instantiate: bool or one bool per output: outputs to force unknown.
    Returns: ``(known_program, unknown_program, out_unknowns, num_res, known_consts)``.
    ``known_program`` maps ``[*known_consts, *known inputs]`` to ``[*known outputs, *residuals]``
    (``known_consts`` are arrays that the known side created, usually none);
    ``unknown_program`` maps ``[*residuals, *unknown inputs]`` to the unknown outputs.
    """
    program = consts_as_inputs(program)
    unknowns = list(unknowns)
    n_out = len(program.outvars)
    inst = [instantiate] * n_out if isinstance(instantiate, bool) else list(instantiate)
    known_avals = [v.aval for v, u in zip(program.invars, unknowns, strict=True) if not u]
    unknown_avals = [v.aval for v, u in zip(program.invars, unknowns, strict=True) if u]
    store = {}

    def known_fun(*known_vals):
        def body(*xs):
            outs = eval_program(program, [], list(xs))
            tr = _current_pe_trace(xs)
            return [tr.instantiate(tr.full_raise(o)) if i else o for o, i in zip(outs, inst, strict=True)]
        out_known, known_outs, uprog, res = _pe_flat(body, list(known_vals), unknown_avals, unknowns)
        store["out_known"], store["uprog"], store["num_res"] = out_known, uprog, len(res)
        return list(known_outs) + list(res)

    kprog, kconsts = trace_to_program(known_fun, known_avals)
    kprog = consts_as_inputs(kprog)
    out_unknowns = [not k for k in store["out_known"]]
    return kprog, store["uprog"], out_unknowns, store["num_res"], kconsts


def _current_pe_trace(xs):
    for x in xs:
        if isinstance(x, PETracer):
            return x._trace
    raise RuntimeError("partial evaluation lost its trace")


# ================================================================================ transposition


def backward_pass(program: Program, args, cts_out):
    """Transpose ``program`` (linear in the inputs given as ``UndefinedPrimal``).

    Args:
      args: one value per constvar+invar; linear ones are ``UndefinedPrimal``.
      cts_out: one cotangent per output (``Zero`` allowed).
    Returns: the cotangents of the linear inputs, in order (``Zero`` where none flowed).
    """
    inputs = list(program.constvars) + list(program.invars)
    primal_env, linear = {}, set()
    for v, a in zip(inputs, args, strict=True):
        if isinstance(a, UndefinedPrimal):
            linear.add(v)
        else:
            primal_env[v] = a

    def read(a):
        return literal_value(a) if isinstance(a, Literal) else primal_env[a]

    lin_eqns = []
    for e in program.eqns:
        if any(isinstance(a, Var) and a in linear for a in e.inputs):
            lin_eqns.append(e)
            linear.update(e.outputs)
        else:
            outs = e.primitive.bind(*[read(a) for a in e.inputs], **e.params)
            outs = outs if e.primitive.multiple_results else [outs]
            for v, o in zip(e.outputs, outs, strict=True):
                primal_env[v] = o

    ct_env: dict = {}

    def add_ct(v, ct):
        if ct is None or isinstance(ct, Zero) or not isinstance(v, Var) or v not in linear:
            return
        if not dtypes.is_inexact(v.aval.dtype):
            return  # integer values carry no cotangent
        ct_env[v] = add_tangents(ct_env[v], ct) if v in ct_env else ct

    for v, ct in zip(program.outvars, cts_out, strict=True):
        add_ct(v, ct)

    for e in reversed(lin_eqns):
        cts = [ct_env.pop(o, None) for o in e.outputs]
        if all(c is None for c in cts):
            continue
        rule = primitive_transposes.get(e.primitive)
        if rule is None:
            raise NotImplementedError(
                f"reverse-mode differentiation needs a transpose rule for '{e.primitive.name}', which is not "
                "linear in its differentiated inputs")
        invals = [UndefinedPrimal(a.aval) if isinstance(a, Var) and a in linear else read(a) for a in e.inputs]
        if e.primitive.multiple_results:
            ct_arg = [c if c is not None else zeros_like_aval(o.aval.strip_weak())
                      for c, o in zip(cts, e.outputs, strict=True)]
        else:
            ct_arg = cts[0]
        cts_in = rule(ct_arg, *invals, **e.params)
        for a, c in zip(e.inputs, cts_in, strict=True):
            add_ct(a, c)
    return [ct_env.get(v, Zero(tangent_aval(v.aval))) for v, a in zip(inputs, args, strict=True)
            if isinstance(a, UndefinedPrimal)]


def transpose_program(program: Program, linear) -> Program:
    """The transpose of a closed program linear in the inputs marked ``linear``.

    Returns a program taking ``[*non-linear inputs, *output cotangents]`` and returning
    the cotangents of the linear inputs (zeros instantiated).
    """
    program = consts_as_inputs(program)
    linear = list(linear)
    nonlin_avals = [v.aval for v, l in zip(program.invars, linear, strict=True) if not l]
    ct_avals = [a.aval.strip_weak() for a in program.outvars]
    lin_avals = [v.aval for v, l in zip(program.invars, linear, strict=True) if l]
    n = len(nonlin_avals)

    def fun(*xs):
        nonlin, cts = list(xs[:n]), list(xs[n:])
        it = iter(nonlin)
        args = [UndefinedPrimal(v.aval) if l else next(it) for v, l in zip(program.invars, linear, strict=True)]
        out = backward_pass(program, args, cts)
        return [instantiate_zeros(c) if not isinstance(c, Zero) else zeros_like_aval(tangent_aval(a))
                for c, a in zip(out, lin_avals, strict=True)]

    prog, consts = trace_to_program(fun, nonlin_avals + ct_avals)
    if consts:
        raise RuntimeError("transpose_program captured constants; the program must be closed")
    return prog


# ================================================================================ program-level jvp


def jvp_program(program: Program, nonzeros, instantiate=False):
    """The JVP of a closed program as a program.

    Args:
      nonzeros: one bool per input: whether its tangent is (possibly) nonzero.
      instantiate: bool or one bool per output: tangents to produce even if zero.
    Returns: ``(program, out_nonzeros)``: the program takes ``[*primals, *tangents of the
    nonzero inputs]`` and returns ``[*primal outs, *tangents of the nonzero outputs]``.
    """
    program = consts_as_inputs(program)
    nonzeros = list(nonzeros)
    n_out = len(program.outvars)
    inst = [instantiate] * n_out if isinstance(instantiate, bool) else list(instantiate)
    in_avals = [v.aval for v in program.invars]
    t_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzeros, strict=True) if nz]
    store = {}

    def fun(*xs):
        primals = list(xs[:len(in_avals)])
        ts = iter(xs[len(in_avals):])
        tangents = [next(ts) if nz else Zero(tangent_aval(a)) for a, nz in zip(in_avals, nonzeros, strict=True)]
        outs_p, outs_t = _jvp_flat(lambda *a: eval_program(program, [], list(a)), primals, tangents)
        out_nz = [not isinstance(t, Zero) or i for t, i in zip(outs_t, inst, strict=True)]
        store["nz"] = out_nz
        return list(outs_p) + [instantiate_zeros(t) for t, nz in zip(outs_t, out_nz, strict=True) if nz]

    prog, consts = trace_to_program(fun, in_avals + t_avals)
    if consts:
        prog = consts_as_inputs(prog)
        raise RuntimeError("jvp_program captured constants; the program must be closed")
    return prog, store["nz"]


# ================================================================================ linearize / vjp


def _linearize_flat(fun_flat, primals):
    """JVP + partial evaluation. Returns (primal outs, linear program, residuals, out tangent is-zero)."""
    t_avals = [tangent_aval(_aval(p)) for p in primals]
    diff = [a.dtype != dtypes.float0 for a in t_avals]

    def jvp_fun(*xs):
        n = len(primals)
        ps, ts = xs[:n], iter(xs[n:])
        tangents = [next(ts) if d else Zero(a) for a, d in zip(t_avals, diff, strict=True)]
        outs_p, outs_t = _jvp_flat(fun_flat, list(ps), tangents)
        zero_out = [isinstance(t, Zero) for t in outs_t]
        store["zero"] = zero_out
        store["n_out"] = len(outs_p)
        return list(outs_p) + [t for t in outs_t if not isinstance(t, Zero)]

    store: dict = {}
    order = [False] * len(primals) + [True] * sum(diff)
    out_known, known_outs, prog, res = _pe_flat(
        jvp_fun, list(primals), [a for a, d in zip(t_avals, diff, strict=True) if d], order)
    n_out = store["n_out"]
    if not all(out_known[:n_out]):
        raise RuntimeError("linearize: a primal output depends on tangents (internal error)")
    primal_outs = known_outs[:n_out]
    # Tangent outputs that came out known (they do not depend on the inputs' tangents) are zero.
    lin_known = out_known[n_out:]
    return primal_outs, prog, res, store["zero"], lin_known, diff


def linearize(fun, *primals):
    """Evaluate ``fun`` and its linearization at ``primals`` (mirrors ``jax.linearize``).

    The primal computation runs once; ``f_jvp`` replays only the linear part
    (JVP followed by partial evaluation, as in JAX).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      *primals: the point to linearize at.

    Returns:
      ``(fun(*primals), f_jvp)``: ``f_jvp(*tangents)`` takes tangents with the
      primals' structure, shapes and dtypes and returns the output tangents with
      the output's structure, shapes and dtypes (``float0`` for integer outputs).

    Raises:
      TypeError: (from ``f_jvp``) tangents whose structure differs from the primals'.
      ShapeError, DTypeError: (from ``f_jvp``) a tangent whose shape or dtype differs
        from its primal's.
    """
    p_flat, p_tree = tree_util.tree_flatten(primals)
    p_flat = _arrays(p_flat)
    out_tree_store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        leaves, tree = tree_util.tree_flatten(out)
        out_tree_store.append(tree)
        return leaves

    outs, prog, res, zero, lin_known, diff = _linearize_flat(flat, p_flat)
    out_tree = out_tree_store[0]

    def f_jvp(*tangents):
        t_flat, t_tree = tree_util.tree_flatten(tangents)
        if t_tree != p_tree:
            raise TypeError(f"linearize: tangents must have the primals' structure {p_tree}, got {t_tree}")
        t_in = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_flat, t_flat, strict=True))]
        t_in = [instantiate_zeros(t) for t, d in zip(t_in, diff, strict=True) if d]
        lin_outs = iter(eval_program(prog, [], res + t_in))
        nz = iter(lin_known)
        out_t = []
        for z, p in zip(zero, outs, strict=True):
            if z:
                out_t.append(_out_tangent(Zero(tangent_aval(_aval(p))), p))
            else:
                k = next(nz)
                out_t.append(_out_tangent(Zero(tangent_aval(_aval(p))), p) if k else next(lin_outs))
        return tree_util.tree_unflatten(out_tree, out_t)

    return tree_util.tree_unflatten(out_tree, outs), f_jvp


def _vjp_flat(fun_flat, primals):
    outs, prog, res, zero, lin_known, diff = _linearize_flat(fun_flat, primals)

    def f_vjp_flat(cts):
        lin_cts = []
        nz = iter(lin_known)
        for z, c in zip(zero, cts, strict=True):
            if not z:
                if not next(nz):
                    lin_cts.append(c)
        args = list(res) + [UndefinedPrimal(v.aval) for v in prog.invars[len(res):]]
        cts_in = iter(backward_pass(prog, args, lin_cts))
        out = []
        for p, d in zip(primals, diff, strict=True):
            a = tangent_aval(_aval(p))
            if d:
                c = next(cts_in)
                out.append(zeros_like_aval(a) if isinstance(c, Zero) else c)
            else:
                out.append(_float0_zeros(a))
        return out

    return outs, f_vjp_flat


def vjp(fun, *primals, has_aux=False):
    """Reverse-mode derivative (mirrors ``jax.vjp``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      *primals: the point at which to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``; ``aux`` is returned
        undifferentiated.

    Returns:
      ``(fun(*primals), f_vjp)``, and ``aux`` third with ``has_aux``.
      ``f_vjp(cotangent)`` takes a cotangent with the output's structure and
      shapes and returns a tuple with one cotangent per primal argument, each with
      that argument's structure, shape and dtype (``float0`` zeros for integer and
      bool arguments).

    Raises:
      TypeError: with ``has_aux``, ``fun`` does not return a pair; (from ``f_vjp``)
        the cotangent's structure differs from the output's.
      ShapeError: (from ``f_vjp``) a cotangent's shape differs from its output's.
    """
    p_flat, p_tree = tree_util.tree_flatten(primals)
    p_flat = _arrays(p_flat)
    store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        if has_aux:
            out, aux = _split_aux(out)
            store.append(("aux", aux))
        leaves, tree = tree_util.tree_flatten(out)
        store.append(("tree", tree))
        return leaves

    outs, f_flat = _vjp_flat(flat, p_flat)
    out_tree = dict(store)["tree"]

    def f_vjp(ct):
        ct_flat, ct_tree = tree_util.tree_flatten(ct)
        if ct_tree != out_tree:
            raise TypeError(f"vjp: the cotangent must have the output's structure {out_tree}, got {ct_tree}")
        for i, (c, o) in enumerate(zip(ct_flat, outs, strict=True)):
            ca, oa = _aval(c), _aval(o)
            if ca.shape != oa.shape:
                raise ShapeError(f"vjp: cotangent {i} has shape {ca.shape}, the output has shape {oa.shape}")
        return tuple(tree_util.tree_unflatten(p_tree, f_flat(ct_flat)))

    primal_out = tree_util.tree_unflatten(out_tree, outs)
    if has_aux:
        return primal_out, f_vjp, _lower_aux(dict(store)["aux"])
    return primal_out, f_vjp


# ================================================================================ grad & friends


def _argnums_tuple(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _check_diff_args(args, argnums, name, allow_int=False):
    for i in argnums:
        if not -len(args) <= i < len(args):
            raise ValueError(f"{name}: argnums {i} is out of range for {len(args)} positional arguments")
        for leaf in tree_util.tree_leaves(args[i]):
            a = _aval(leaf)
            if not dtypes.is_inexact(a.dtype) and not allow_int:
                raise DTypeError(
                    f"{name} requires real- or complex-valued inputs (floating dtypes), but argument {i} has "
                    f"dtype {a.dtype.name}. Integer and boolean inputs have no derivative; convert them with "
                    ".astype(float) or pass allow_int=True to get float0 zeros.")


def _argnums_partial(fun, args, kwargs, nums):
    """``(f, diff_args)``: ``f(*diff_args)`` is ``fun(*args, **kwargs)`` with the arguments at
    ``nums`` replaced by ``f``'s own (the other arguments are held fixed)."""
    nums_n = tuple(i % len(args) for i in nums)

    def f(*dargs):
        full = list(args)
        for i, d in zip(nums_n, dargs, strict=True):
            full[i] = d
        return fun(*full, **kwargs)

    return f, tuple(args[i] for i in nums_n)


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """``(fun(*args), grad of fun)`` in one pass (mirrors ``jax.value_and_grad``).

    Args:
      fun: a function returning a scalar (shape ``()``) of a floating dtype.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(value, aux)``.
      holomorphic: allow a complex output (``fun`` is assumed holomorphic).
      allow_int: allow integer/bool differentiated arguments (their gradient is
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature returning ``(value, grad)``, or
      ``((value, aux), grad)`` with ``has_aux``. ``grad`` has the structure, shapes
      and dtypes of the argument at ``argnums`` (a tuple of them when ``argnums``
      is a tuple).

    Raises:
      TypeError: ``fun`` is not callable; (when called) the output is not a scalar
        (the message names ``jacrev``/``vjp``), or with ``has_aux`` not a pair.
      ValueError: (when called) an ``argnums`` entry is out of range.
      DTypeError: (when called) a differentiated argument is not floating (without
        ``allow_int``), the output is integer or bool, or it is complex without
        ``holomorphic``.
    """
    if not callable(fun):
        raise TypeError(f"grad needs a callable, got {type(fun).__name__} {fun!r}")
    multiple = not isinstance(argnums, int)
    nums = _argnums_tuple(argnums)

    @functools.wraps(fun)
    def vg(*args, **kwargs):
        _check_diff_args(args, nums, "grad", allow_int)
        f, diff_args = _argnums_partial(fun, args, kwargs, nums)
        if has_aux:
            out, f_vjp, aux = vjp(f, *diff_args, has_aux=True)
        else:
            out, f_vjp = vjp(f, *diff_args)
        oa = _aval(out) if isinstance(out, (Array, np.ndarray)) or is_scalar(out) else None
        if oa is None or oa.shape != ():
            shape = oa.shape if oa is not None else type(out).__name__
            raise TypeError(f"grad requires a scalar output (shape ()), got {shape}. For a non-scalar output "
                            "use fnarray.jacrev or fnarray.vjp, or reduce it (e.g. .sum()) first.")
        if not dtypes.is_inexact(oa.dtype):
            raise DTypeError(f"grad requires a floating output, got {oa.dtype.name}: an integer or boolean "
                             "function is piecewise constant. Differentiate a float expression instead (for "
                             "example before a comparison or a cast).")
        if dtypes.is_complex(oa.dtype) and not holomorphic:
            raise DTypeError("grad of a complex output needs holomorphic=True (as in JAX)")
        g = f_vjp(lax.full((), 1, oa.dtype))
        g = g if multiple else g[0]
        return ((out, aux), g) if has_aux else (out, g)

    return vg


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The gradient of a scalar function, by reverse mode (mirrors ``jax.grad``).

    Args:
      fun: a function returning a scalar (shape ``()``) of a floating dtype.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(value, aux)``.
      holomorphic: allow a complex output (``fun`` is assumed holomorphic).
      allow_int: allow integer/bool differentiated arguments (their gradient is
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature giving the gradient with respect to the
      arguments at ``argnums`` (same structure, shapes and dtypes; a tuple when
      ``argnums`` is a tuple); ``(grad, aux)`` with ``has_aux``.

    Raises:
      The errors of ``value_and_grad``: ``TypeError`` for a non-callable ``fun`` or
      a non-scalar output, ``ValueError`` for an out-of-range ``argnums``,
      ``DTypeError`` for non-floating arguments or outputs.
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @functools.wraps(fun)
    def g(*args, **kwargs):
        (value, *aux), gr = _unpack(vg(*args, **kwargs), has_aux)
        return (gr, aux[0]) if has_aux else gr

    return g


def _unpack(res, has_aux):
    v, g = res
    if has_aux:
        return (v[0], v[1]), g
    return (v,), g


def _std_basis(leaves):
    """An identity basis over the flattened leaves: (total, *leaf shapes) per leaf."""
    sizes = [_aval(x).size for x in leaves]
    total = sum(sizes)
    dt = [tangent_aval(_aval(x)).dtype for x in leaves]
    out, off = [], 0
    for x, n, d in zip(leaves, sizes, dt, strict=True):
        a = _aval(x)
        eye = np.zeros((total, n), dtype=d if d != dtypes.float0 else np.float32)
        eye[off:off + n] = np.eye(n, dtype=eye.dtype)
        off += n
        from fnarray.devices.placement import array_from_numpy
        out.append(array_from_numpy(eye.reshape((total,) + a.shape)))
    return out, total


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian by forward mode, one JVP per input element, vectorized (mirrors ``jax.jacfwd``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.

    Returns:
      A function with ``fun``'s signature returning the Jacobian: for an output leaf
      of shape ``O`` and an input leaf of shape ``I``, a block of shape ``O + I``
      in the output's dtype, nested as output structure over input structure (a
      tuple of inputs when ``argnums`` is a tuple); ``(jacobian, aux)`` with
      ``has_aux``.

    Raises:
      DTypeError: (when called) a differentiated argument is not floating.
      ValueError: (when called) an ``argnums`` entry is out of range.
      TypeError: (when called) ``fun`` is a ``custom_vjp`` function (forward mode is
        not defined for it), or with ``has_aux`` does not return a pair.
    """
    from fnarray.transforms.batching import vmap
    nums = _argnums_tuple(argnums)
    multiple = not isinstance(argnums, int)

    def jac(*args, **kwargs):
        _check_diff_args(args, nums, "jacfwd")
        nums_n = tuple(i % len(args) for i in nums)
        dargs = tuple(args[i] for i in nums_n)
        d_flat, d_tree = tree_util.tree_flatten(dargs)

        def f_flat(*xs):
            full = list(args)
            for i, d in zip(nums_n, tree_util.tree_unflatten(d_tree, list(xs)), strict=True):
                full[i] = d
            out = fun(*full, **kwargs)
            if has_aux:
                out, aux = _split_aux(out)
                return out, aux
            return out

        basis, total = _std_basis(d_flat)

        def push(*ts):
            r = jvp(f_flat, tuple(d_flat), tuple(ts), has_aux=has_aux)
            return (r[1], r[2]) if has_aux else r[1]

        res = vmap(push, in_axes=0, out_axes=-1)(*basis) if not has_aux else vmap(
            push, in_axes=0, out_axes=(-1, None))(*basis)
        out_t, aux = (res if has_aux else (res, None))
        # out_t leaves: O + (total,) -> split the last axis into the input leaves' shapes.
        in_shapes = [_aval(x).shape for x in d_flat]

        def split(leaf):
            o_shape = leaf.shape[:-1]
            ends = np.cumsum([int(np.prod(s)) for s in in_shapes])
            parts = [lax.slice_in_dim(leaf, int(e - int(np.prod(s))), int(e), axis=leaf.ndim - 1)
                     for e, s in zip(ends, in_shapes, strict=True)] if len(in_shapes) > 1 else [leaf]
            blocks = [lax.reshape(p, o_shape + s) for p, s in zip(parts, in_shapes, strict=True)]
            tree = tree_util.tree_unflatten(d_tree, blocks)
            return tree if multiple else tree[0]

        jac_tree = tree_util.tree_map(split, out_t)
        return (jac_tree, aux) if has_aux else jac_tree

    return jac


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The Jacobian by reverse mode, one VJP per output element, vectorized (mirrors ``jax.jacrev``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.
      allow_int: allow integer/bool differentiated arguments (their blocks are
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature returning the Jacobian: for an output leaf
      of shape ``O`` and an input leaf of shape ``I``, a block of shape ``O + I``
      in the input's dtype, nested as output structure over input structure (a
      tuple of inputs when ``argnums`` is a tuple); ``(jacobian, aux)`` with
      ``has_aux``.

    Raises:
      DTypeError: (when called) a differentiated argument is not floating (without
        ``allow_int``).
      ValueError: (when called) an ``argnums`` entry is out of range.
      TypeError: (when called) with ``has_aux`` ``fun`` does not return a pair.
    """
    from fnarray.transforms.batching import vmap
    nums = _argnums_tuple(argnums)
    multiple = not isinstance(argnums, int)

    def jac(*args, **kwargs):
        _check_diff_args(args, nums, "jacrev", allow_int)
        f, dargs = _argnums_partial(fun, args, kwargs, nums)
        if has_aux:
            out, f_vjp, aux = vjp(f, *dargs, has_aux=True)
        else:
            out, f_vjp = vjp(f, *dargs)
        o_flat, o_tree = tree_util.tree_flatten(out)
        basis, total = _std_basis(o_flat)

        def pull(*cts):
            return f_vjp(tree_util.tree_unflatten(o_tree, list(cts)))

        cts = vmap(pull)(*basis)  # tuple over dargs, each leaf (total,) + I
        o_shapes = [_aval(x).shape for x in o_flat]
        offsets = np.cumsum([0] + [int(np.prod(s)) for s in o_shapes])

        def block(k):
            def f_leaf(leaf):
                part = lax.slice_in_dim(leaf, int(offsets[k]), int(offsets[k + 1]), axis=0)
                return lax.reshape(part, o_shapes[k] + leaf.shape[1:])
            t = tree_util.tree_map(f_leaf, cts)
            return t if multiple else t[0]

        jac_tree = tree_util.tree_unflatten(o_tree, [block(k) for k in range(len(o_flat))])
        return (jac_tree, aux) if has_aux else jac_tree

    return jac


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Hessian, ``jacfwd(jacrev(fun))`` (mirrors ``jax.hessian``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees), usually a scalar.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.

    Returns:
      A function with ``fun``'s signature returning blocks of shape ``O + I + I``
      (output leaf shape ``O``, input leaf shape ``I``); for a scalar ``fun`` of one
      array of shape ``(n,)``, an ``(n, n)`` array.

    Raises:
      The errors of ``jacfwd`` and ``jacrev``: ``DTypeError`` for non-floating
      arguments, ``ValueError`` for an out-of-range ``argnums``, ``TypeError`` for a
      ``custom_vjp`` function (forward mode over it is not defined).
    """
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux), argnums, has_aux=has_aux)


def stop_gradient(x):
    """Identity whose derivative is zero; works on pytrees (mirrors ``jax.lax.stop_gradient``).

    Args:
      x: an array or a pytree of arrays; non-floating leaves pass through.

    Returns:
      ``x`` with the same structure, shapes and dtypes, treated as a constant by
      every differentiation transform.

    Raises:
      Nothing beyond the pytree errors of ``tree_util.tree_map`` (an unregistered
      container is a leaf and passes through).
    """
    return lax.stop_gradient(x)


# ================================================================================ custom rules


def _trace_flat(fun, args, kwargs=None):
    """Trace ``fun(*args)`` into a closed program; returns (program, consts, in_tree, out_tree, flat args)."""
    from fnarray.transforms.jit import leaf_aval
    flat, in_tree = tree_util.tree_flatten(tuple(args))
    avals = [leaf_aval(x) for x in flat]
    store = []

    def f(*xs):
        out = fun(*tree_util.tree_unflatten(in_tree, list(xs)))
        leaves, tree = tree_util.tree_flatten(out)
        store.append(tree)
        return leaves

    prog, consts = trace_to_program(f, avals)
    return prog, consts, in_tree, store[0], flat


def _check_rule_avals(rule, what, expected, got):
    """Raise naming ``rule`` when a custom rule's outputs differ in shape or dtype from ``expected``
    (as JAX checks custom_jvp tangents and custom_vjp cotangents). Python scalars stand for any
    inexact dtype (they are weak); ``None`` and symbolic zeros are accepted."""
    name = getattr(rule, "__name__", repr(rule))
    for i, (want, x) in enumerate(zip(expected, got, strict=True)):
        if x is None or isinstance(x, Zero):
            continue
        if isinstance(x, np.ndarray) and x.dtype == dtypes.float0:
            have = ShapedArray(x.shape, dtypes.float0)
        else:
            have = _aval(x)
        same_dtype = have.dtype == want.dtype or (have.weak_type and is_scalar(x) and dtypes.is_inexact(want.dtype))
        if want.dtype == dtypes.float0:
            same_dtype = have.dtype == dtypes.float0 or not dtypes.is_inexact(have.dtype) or is_scalar(x)
        if have.shape != want.shape or not same_dtype:
            raise TypeError(f"custom rule {name} returned {what} {i} of type {have.dtype.name}{list(have.shape)}, "
                            f"expected {want.dtype.name}{list(want.shape)} (the shape and dtype of the "
                            f"corresponding {'input' if what == 'cotangent' else 'primal output'})"
                            "; fix the rule so that its outputs match")


def _split_nondiff(args, nondiff_argnums):
    """``(static, dyn, rebuild)``: the arguments at ``nondiff_argnums``, the others, and a function
    putting a new list of the others back among the static ones in their original positions."""
    nd = {i % len(args) for i in nondiff_argnums} if args else set()
    static = [args[i] for i in sorted(nd)]
    dyn = [a for i, a in enumerate(args) if i not in nd]

    def rebuild(dyn_args):
        it = iter(dyn_args)
        return [args[i] if i in nd else next(it) for i in range(len(args))]

    return static, dyn, rebuild


class custom_jvp:
    """A function with a user-defined JVP rule (mirrors ``jax.custom_jvp``).

    Use as a decorator, then ``@f.defjvp`` on ``jvp(primals, tangents) -> (primal_out, tangent_out)``.
    ``nondiff_argnums`` are passed first to the rule and get no tangents. Values the
    function closes over are treated as constants (no tangent flows to them).
    Reverse mode (``grad``, ``vjp``) transposes the linear part of the rule, as in JAX.

    Args:
      fun: the function (of arrays or pytrees, positional arguments only).
      nondiff_argnums: positions of arguments that are not differentiated (static
        Python values or arrays); they are passed first to the rule.

    Calling the wrapped function returns ``fun``'s output (same structure, shapes
    and dtypes).

    Raises:
      TypeError: (when called) no rule was defined with ``defjvp``/``defjvps``, or
        the rule does not return ``(primal_out, tangent_out)`` with the function's
        output structure.
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp_fn):
        """Set the JVP rule (mirrors ``jax.custom_jvp.defjvp``); usable as a decorator.

        Args:
          jvp_fn: ``jvp_fn(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``; ``primals``
            and ``tangents`` are tuples of the differentiable arguments (tangents with their primals'
            shapes and dtypes, zeros instantiated); ``tangent_out`` has ``primal_out``'s structure.

        Returns:
          ``jvp_fn`` itself.

        Raises:
          Nothing here; a rule that returns the wrong structure raises ``TypeError`` when the
          function is differentiated.
        """
        self.jvp = jvp_fn
        return jvp_fn

    def defjvps(self, *tangent_fns):
        """One tangent function per argument (as ``jax.custom_jvp.defjvps``); their results are summed.

        Args:
          *tangent_fns: for argument ``i``, ``fn(t_i, primal_out, *primals)`` returning its tangent
            contribution (of ``primal_out``'s structure and shapes), or ``None`` for an argument
            with no contribution.

        Returns:
          The assembled JVP rule.

        Raises:
          Nothing here; contributions of mismatched structure raise from ``tree_util.tree_map``
          when the function is differentiated.
        """
        def jvp_fn(primals, tangents):
            out = self.fun(*primals)
            acc = None
            for fn, t in zip(tangent_fns, tangents, strict=False):
                if fn is None:
                    continue
                c = fn(t, out, *primals)
                acc = c if acc is None else tree_util.tree_map(lax.add, acc, c)
            return out, acc
        self.jvp = jvp_fn
        return jvp_fn

    def __call__(self, *args):
        if self.jvp is None:
            raise TypeError(f"custom_jvp function {getattr(self.fun, '__name__', '')} has no JVP rule: define one "
                            "with @f.defjvp before calling it")
        static, dyn, rebuild = _split_nondiff(args, self.nondiff_argnums)
        direct = self._call_directly(args, static, dyn, rebuild)
        if direct is not None:
            return direct[0]

        def f(*d):
            return self.fun(*rebuild(d))

        prog, consts, in_tree, out_tree, flat = _trace_flat(f, dyn)
        user_jvp = self.jvp
        n_consts = len(consts)

        def jvp_flat(primals, tangents):
            ps = tree_util.tree_unflatten(in_tree, list(primals[n_consts:]))
            ts = tree_util.tree_unflatten(in_tree, [instantiate_zeros(t) for t in tangents[n_consts:]])
            # Closed-over values that this JVP differentiates (tracers of the calling JVP level) are
            # constants for the rule: it runs with their primals, so no tangent reaches them and none
            # of them leaks out through the rule's Python closure (or re-enters this rule forever).
            own = {c._trace.main for c, p in zip(consts, primals[:n_consts], strict=True)
                   if isinstance(c, JVPTracer) and c.primal is p}
            if own:
                return _rule_with_constant_closure(lambda p, t: user_jvp(*static, p, t), (tuple(ps), tuple(ts)),
                                                   own, out_tree)
            out, t_out = user_jvp(*static, tuple(ps), tuple(ts)) if static else user_jvp(tuple(ps), tuple(ts))
            o_flat, o_tree = tree_util.tree_flatten(out)
            t_flat, t_tree = tree_util.tree_flatten(t_out)
            if o_tree != out_tree or t_tree != out_tree:
                raise TypeError(f"custom_jvp rule must return (primal_out, tangent_out) of the function's output "
                                f"structure {out_tree}; got {o_tree} and {t_tree}")
            _check_jvp_rule_outputs(user_jvp, prog, o_flat, t_flat)
            return o_flat, t_flat

        jvp_flat.__name__ = getattr(user_jvp, "__name__", "jvp")
        outs = P.custom_jvp_call.bind(*consts, *flat, call_program=consts_as_inputs(prog), jvp=jvp_flat,
                                      num_consts=n_consts, symbolic_zeros=False)
        return tree_util.tree_unflatten(out_tree, outs)

    def _call_directly(self, args, static, dyn, rebuild):
        """``(result,)`` computed without tracing ``fun``, as JAX does, or ``None`` for the staged path.

        With concrete arguments and no transformation, ``fun`` itself runs (once, on concrete values, so
        Python control flow on them works). When the innermost transformation is a JVP, only the rule
        runs, on the primals (concrete under ``grad``/``jvp`` outside ``jit``). A result that still holds
        a tracer of that level (``fun`` or the rule closes over a value being transformed) falls back
        to the staged path, which treats closed-over values as constants.
        """
        flat, _ = tree_util.tree_flatten(tuple(dyn))
        top = find_top_trace(flat)
        if top.main.level == 0:
            out = self.fun(*args)
            if not any(isinstance(o, Tracer) for o in tree_util.tree_leaves(out)):
                return (out,)
            return None
        in_tree = tree_util.tree_structure(tuple(dyn))
        if isinstance(top, PartialEvalTrace):
            # Known values of a partial evaluation (the primal side of grad) are computed one level down.
            tracers = [top.full_raise(a) for a in flat]
            if not all(t.is_known for t in tracers):
                return None
            out = self(*rebuild(tree_util.tree_unflatten(in_tree, [t.value for t in tracers])))
            return (tree_util.tree_map(top.known, out),)
        if not isinstance(top, JVPTrace):
            return None
        tracers = [top.full_raise(a) for a in flat]
        ps = tree_util.tree_unflatten(in_tree, [t.primal for t in tracers])
        ts = tree_util.tree_unflatten(in_tree, [instantiate_zeros(t.tangent) for t in tracers])
        out, t_out = self.jvp(*static, tuple(ps), tuple(ts)) if static else self.jvp(tuple(ps), tuple(ts))
        o_flat, o_tree = tree_util.tree_flatten(out)
        t_flat, t_tree = tree_util.tree_flatten(t_out)
        if any(isinstance(x, JVPTracer) and x._trace.main is top.main for x in o_flat + t_flat):
            return None
        if t_tree != o_tree:
            raise TypeError(f"custom_jvp rule {getattr(self.jvp, '__name__', 'jvp')} must return (primal_out, "
                            f"tangent_out) of one structure; got {o_tree} and {t_tree}")
        o_avals = [_aval(o) for o in o_flat]
        _check_rule_avals(self.jvp, "tangent output", [tangent_aval(a.strip_weak()) for a in o_avals], t_flat)
        outs = [JVPTracer(top, o, _rule_tangent(t, a)) for o, t, a in zip(o_flat, t_flat, o_avals, strict=True)]
        return (tree_util.tree_unflatten(o_tree, outs),)


def _check_jvp_rule_outputs(rule, prog, o_flat, t_flat):
    out_avals = [v.aval for v in prog.outvars]
    _check_rule_avals(rule, "primal output", [ShapedArray(a.shape, a.dtype) for a in out_avals], o_flat)
    _check_rule_avals(rule, "tangent output", [tangent_aval(a) for a in out_avals], t_flat)



def _rule_tangent(t, aval):
    """A custom rule's tangent for a primal of ``aval``: symbolic zero for integer primals, scalars cast."""
    want = tangent_aval(aval)
    if want.dtype == dtypes.float0 or t is None:
        return Zero(want)
    if is_scalar(t) or isinstance(t, np.ndarray):
        return lax.convert_element_type(np.asarray(t, want.dtype) if is_scalar(t) else t, want.dtype)
    return t


def _rule_with_constant_closure(rule, args, mains, out_tree):
    """``rule(*args)`` traced, then run with its captured tracers of ``mains`` replaced by their primals."""
    prog, consts, _, rule_tree, flat = _trace_flat(rule, args)
    consts = [c.primal if isinstance(c, JVPTracer) and c._trace.main in mains else c for c in consts]
    out, t_out = tree_util.tree_unflatten(rule_tree, eval_program(prog, consts, flat))
    o_flat, o_tree = tree_util.tree_flatten(out)
    t_flat, t_tree = tree_util.tree_flatten(t_out)
    if o_tree != out_tree or t_tree != out_tree:
        raise TypeError(f"custom_jvp rule must return (primal_out, tangent_out) of the function's output "
                        f"structure {out_tree}; got {o_tree} and {t_tree}")
    return o_flat, t_flat


def _custom_jvp_call_jvp(primals, tangents, *, call_program, jvp, num_consts, symbolic_zeros):
    outs, t_outs = jvp(list(primals), list(tangents))
    return outs, t_outs


primitive_jvps[P.custom_jvp_call] = _custom_jvp_call_jvp


class custom_vjp:
    """A function with a user-defined reverse-mode rule (mirrors ``jax.custom_vjp``).

    ``f.defvjp(fwd, bwd)``: ``fwd(*args) -> (out, residuals)``,
    ``bwd(residuals, ct_out) -> tuple of cotangents, one per argument``.
    Forward mode (``jvp``, ``jacfwd``) of such a function raises, as in JAX.

    Args:
      fun: the function (of arrays or pytrees, positional arguments only).
      nondiff_argnums: positions of arguments that are not differentiated; they are
        passed first to ``bwd`` and get no cotangent.

    Calling the wrapped function returns ``fun``'s output (same structure, shapes
    and dtypes); ``bwd`` must return cotangents with each argument's shape.

    Raises:
      TypeError: (when called) no rule was defined with ``defvjp``; ``fwd`` does not
        return the function's output structure; ``bwd`` does not return a tuple of
        one cotangent per differentiable argument; the function is differentiated in
        forward mode.
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd = self.bwd = None
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd, bwd):
        """Set the forward and backward rules (mirrors ``jax.custom_vjp.defvjp``).

        Args:
          fwd: ``fwd(*args) -> (out, residuals)``, ``out`` with the function's output structure;
            ``residuals`` any pytree of arrays.
          bwd: ``bwd(*nondiff_args, residuals, ct_out) -> tuple`` with one cotangent per
            differentiable argument (each of that argument's shape; ``None`` for zero).

        Returns:
          None.

        Raises:
          Nothing here; rules of the wrong structure raise ``TypeError`` when the function is
          called or differentiated.
        """
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {getattr(self.fun, '__name__', '')} has no rule: define one "
                            "with f.defvjp(fwd, bwd) before calling it")
        static, dyn, rebuild = _split_nondiff(args, self.nondiff_argnums)

        prog, consts, in_tree, out_tree, flat = _trace_flat(lambda *d: self.fun(*rebuild(d)), dyn)
        fwd, bwd, n_consts = self.fwd, self.bwd, len(consts)
        ct_avals = [tangent_aval(_aval(x)) for x in flat]

        def fwd_flat(primals):
            out, res = fwd(*rebuild(tree_util.tree_unflatten(in_tree, list(primals[n_consts:]))))
            o_flat, o_tree = tree_util.tree_flatten(out)
            if o_tree != out_tree:
                raise TypeError(f"custom_vjp fwd must return (output, residuals) with the function's output "
                                f"structure {out_tree}, got {o_tree}")
            r_flat, r_tree = tree_util.tree_flatten(res)
            return o_flat, r_flat, r_tree

        def bwd_flat(res_flat, r_tree, cts_flat):
            res = tree_util.tree_unflatten(r_tree, list(res_flat))
            ct = tree_util.tree_unflatten(out_tree, list(cts_flat))
            cts = bwd(*static, res, ct) if static else bwd(res, ct)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(dyn):
                raise TypeError(f"custom_vjp bwd must return a tuple of {len(dyn)} cotangents (one per "
                                f"differentiable argument), got {type(cts).__name__}"
                                f"{'' if not isinstance(cts, (tuple, list)) else f' of length {len(cts)}'}")
            c_flat = _bwd_cotangents(bwd, dyn, cts)
            _check_rule_avals(bwd, "cotangent", ct_avals, c_flat)
            return c_flat

        fwd_flat.__name__ = getattr(fwd, "__name__", "fwd")
        bwd_flat.__name__ = getattr(bwd, "__name__", "bwd")
        outs = P.custom_vjp_call.bind(*consts, *flat, call_program=consts_as_inputs(prog), fwd=fwd_flat,
                                      bwd=bwd_flat, num_consts=n_consts, in_tree=in_tree)
        return tree_util.tree_unflatten(out_tree, outs)


def _bwd_cotangents(bwd, args, cts):
    """The flat cotangents of ``bwd``'s result, one per leaf of ``args`` (``None`` for a whole argument
    stands for zeros of every leaf, as in JAX); a structure that differs from the argument's raises."""
    out = []
    for i, (a, c) in enumerate(zip(args, cts, strict=True)):
        a_leaves, a_tree = tree_util.tree_flatten(a)
        if c is None:
            out.extend([None] * len(a_leaves))
            continue
        c_leaves, c_tree = tree_util.tree_flatten(c, is_leaf=lambda x: x is None)
        if c_tree != a_tree and len(c_leaves) != len(a_leaves):
            raise TypeError(f"custom_vjp bwd {getattr(bwd, '__name__', 'bwd')} returned a cotangent for argument "
                            f"{i} with structure {c_tree}, expected the argument's structure {a_tree}")
        out.extend(c_leaves)
    return out


def _custom_vjp_call_jvp(primals, tangents, *, call_program, fwd, bwd, num_consts, in_tree):
    outs, res, r_tree = fwd(list(primals))
    out_avals = tuple(tangent_aval(_aval(o)) for o in outs)
    if all(isinstance(t, Zero) for t in tangents[num_consts:]):
        return outs, [Zero(a) for a in out_avals]
    ts = [instantiate_zeros(t) for t in tangents[num_consts:]]
    in_avals = tuple(_aval(p) for p in primals[num_consts:])
    t_outs = P.custom_lin.bind(*res, *ts, num_res=len(res), out_avals=out_avals,
                               bwd=_Bwd(bwd, r_tree, in_avals), in_tree=in_tree)
    return outs, t_outs


class _Bwd:
    """The user's bwd with its residual structure; hashable by identity (an equation param)."""

    def __init__(self, bwd, r_tree, in_avals):
        self.bwd, self.r_tree, self.in_avals = bwd, r_tree, in_avals
        self.__name__ = getattr(bwd, "__name__", "bwd")

    def __call__(self, res, cts):
        return self.bwd(res, self.r_tree, cts)


def _custom_lin_transpose(cts, *args, num_res, out_avals, bwd, in_tree=None):
    res = args[:num_res]
    cts = [instantiate_zeros(c) if isinstance(c, Zero) else c for c in cts]
    c_in = bwd(res, cts)
    out = [None] * num_res
    for c, a in zip(c_in, bwd.in_avals, strict=True):
        out.append(zeros_like_aval(tangent_aval(a)) if c is None else c)
    return out


primitive_jvps[P.custom_vjp_call] = _custom_vjp_call_jvp
primitive_transposes[P.custom_lin] = _custom_lin_transpose


def _custom_lin_jvp(primals, tangents, **params):
    raise TypeError("a custom_vjp function was differentiated twice in forward mode; custom_vjp defines reverse "
                    "mode only (as in JAX). Use custom_jvp for higher-order forward mode.")


primitive_jvps[P.custom_lin] = _custom_lin_jvp


# ================================================================================ call / remat


def _call_jvp(primals, tangents, *, program, name="call"):
    nz = [not isinstance(t, Zero) for t in tangents]
    jprog, out_nz = jvp_program(program, nz)
    outs = P.call.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                       name=f"jvp({name})")
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    t_out = [next(t_iter) if z else Zero(tangent_aval(v.aval)) for z, v in zip(out_nz, program.outvars,
                                                                                strict=True)]
    return outs[:n], t_out


def _call_partial_eval(trace, tracers, *, program, name="call"):
    unknowns = [not trace.is_known(t) for t in tracers]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns)
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    kouts = P.call.bind(*kconsts, *known_in, program=kprog, name=name)
    n_known = len(kouts) - num_res
    known_outs, res = kouts[:n_known], kouts[n_known:]
    res_tracers = [trace.known(r) for r in res]
    unknown_in = [t for t in tracers if not trace.is_known(t)]
    u_outs = trace.stage(P.call, res_tracers + unknown_in, _params(program=uprog, name=name))
    ki, ui = iter(known_outs), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _call_transpose(cts, *args, program, name="call"):
    linear = [isinstance(a, UndefinedPrimal) for a in args]
    tprog = transpose_program(program, linear)
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    cts = [instantiate_zeros(c) for c in cts]
    outs = iter(P.call.bind(*nonlin, *cts, program=tprog, name=f"transpose({name})"))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.call] = _call_jvp
partial_eval_rules[P.call] = _call_partial_eval
primitive_transposes[P.call] = _call_transpose


def checkpoint(fun, *, prevent_cse=True, static_argnums=()):
    """Rematerialization (mirrors ``jax.checkpoint``): in reverse mode, ``fun``'s
    intermediate values are recomputed in the backward pass instead of stored;
    only its inputs are kept as residuals (Griewank 1992's checkpointing; JAX's ``remat``).

    Args:
      fun: a function of arrays (pytrees), positional arguments only.
      prevent_cse: kept as a parameter of the ``remat`` primitive (as in JAX, it
        asks compilers not to merge the recomputation with the forward pass).
      static_argnums: an int or tuple of ints: positional arguments passed through
        as Python values (not traced).

    Returns:
      A function with ``fun``'s signature and outputs (same structure, shapes and
      dtypes).

    Raises:
      Nothing of its own; the wrapped function raises what ``fun`` raises while it
      is traced (e.g. ``ConcretizationError`` for Python control flow on a traced
      value).
    """
    static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args):
        nd = {i % len(args) for i in static_argnums} if args else set()
        dyn = [a for i, a in enumerate(args) if i not in nd]

        def f(*d):
            it = iter(d)
            return fun(*[args[i] if i in nd else next(it) for i in range(len(args))])

        prog, consts, in_tree, out_tree, flat = _trace_flat(f, dyn)
        outs = P.remat.bind(*consts, *flat, program=consts_as_inputs(prog), prevent_cse=prevent_cse)
        return tree_util.tree_unflatten(out_tree, outs)

    return wrapped


remat = checkpoint


def _remat_jvp(primals, tangents, *, program, prevent_cse=True):
    nz = [not isinstance(t, Zero) for t in tangents]
    jprog, out_nz = jvp_program(program, nz)
    outs = P.remat.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                        prevent_cse=prevent_cse)
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    return outs[:n], [next(t_iter) if z else Zero(tangent_aval(v.aval))
                      for z, v in zip(out_nz, program.outvars, strict=True)]


def _remat_partial_eval(trace, tracers, *, program, prevent_cse=True):
    unknowns = [not trace.is_known(t) for t in tracers]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns)
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    # The known outputs are computed now; the residuals of the known part are NOT kept:
    # the unknown part reruns the whole program from the inputs (rematerialization).
    n_known = sum(1 for u in out_unknowns if not u)
    kouts = P.remat.bind(*kconsts, *known_in, program=dce(kprog, [True] * n_known + [False] * num_res)[0],
                         prevent_cse=prevent_cse)
    full, _ = dce(program, out_unknowns)
    u_outs = trace.stage(P.remat, [trace.instantiate(t) if not u else t for t, u in zip(tracers, unknowns,
                                                                                          strict=True)],
                         _params(program=full, prevent_cse=prevent_cse))
    ki, ui = iter(kouts), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _remat_transpose(cts, *args, program, prevent_cse=True):
    # The staged program is the whole JVP (primal and tangent equations together, loops with primal
    # and tangent carries in one scan), so it is not linear as a whole: split it by the linear inputs
    # first, then the backward pass reruns the known (primal) part from the saved inputs and transposes
    # only the linear part. Transposing the mixed program directly failed on every loop
    # ("mul is linear in one operand at a time", "select_n is not linear in its selector").
    linear = [isinstance(a, UndefinedPrimal) for a in args]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, linear)
    n_known = sum(1 for u in out_unknowns if not u)
    n_lin = sum(linear)
    tuprog = transpose_program(uprog, [False] * num_res + [True] * n_lin)
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    u_cts = [instantiate_zeros(c) if c is not None else zeros_like_aval(v.aval.strip_weak())
             for c, v, u in zip(cts, program.outvars, out_unknowns, strict=True) if u]
    nonlin_avals = [_aval(a) for a in nonlin]
    ct_avals = [_aval(c) for c in u_cts]

    def backward(*xs):
        known_in, cts_in = list(xs[:len(nonlin)]), list(xs[len(nonlin):])
        res = eval_program(kprog, [], list(kconsts) + known_in)[n_known:]
        return eval_program(tuprog, [], list(res) + cts_in)

    bprog, bconsts = trace_to_program(backward, nonlin_avals + ct_avals)
    outs = iter(P.remat.bind(*bconsts, *nonlin, *u_cts, program=consts_as_inputs(bprog),
                             prevent_cse=prevent_cse))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.remat] = _remat_jvp
partial_eval_rules[P.remat] = _remat_partial_eval
primitive_transposes[P.remat] = _remat_transpose
