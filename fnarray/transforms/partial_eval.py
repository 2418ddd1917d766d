"""Partial evaluation: known values computed now, unknown ones staged into a program.

``linearize`` runs the JVP under this trace with primals known and tangents
unknown; the known values the staged (linear) program reads are its residuals
(JAX's ``partial_eval.py``; Autodidax part 4, "linearize and vjp via partial
evaluation"; "You only linearize once", Radul et al., 2023).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.interpreter import eval_program
from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.passes import consts_as_inputs, dce
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer, is_scalar, new_main
from fnarray.transforms.ad_tables import (
    partial_eval_rules,
)


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

    def __repr__(self):   # a known value prints as that value (``grad``'s primal: JAX's ``GradTracer(primal=1.0, ...``)
        return repr(self.value) if self.is_known else super().__repr__()


class _Recipe:
    """How a known value not saveable under a checkpoint policy was computed, so that the unknown side can
    compute it again instead of reading it as a residual (``vars``: its outputs once staged)."""

    __slots__ = ("primitive", "params", "inputs", "values", "vars")

    def __init__(self, primitive, params, inputs, values):
        self.primitive, self.params, self.inputs, self.values, self.vars = primitive, params, inputs, values, None


class _PEBuilder:
    """``saveable``: ``None`` (every known value the unknown side reads is a residual), or a checkpoint
    policy's ``saveable(primitive, in_avals, params) -> bool``: a known value that is not saveable is
    recomputed on the unknown side from its inputs (recursively, down to saveable values and the inputs)."""

    def __init__(self, saveable=None):
        self.eqns = []
        self.vars = {}       # id(tracer) -> Var, for unknown tracers and residuals
        self.residuals = {}  # id(value) -> (Var, value)
        self.keep = []
        self.saveable = saveable
        self.recipes = {}    # id(known value) -> _Recipe (only with a policy)

    def var_of_unknown(self, t):
        return self.vars[id(t)]

    def _recompute(self, recipe, value):
        """The Var of ``value`` computed again on the unknown side (its equation staged once)."""
        if recipe.vars is None:
            ins = tuple(self.residual(t.value, t.aval) for t in recipe.inputs)
            recipe.vars = [Var(get_aval(v)) for v in recipe.values]
            self.eqns.append(Eqn(recipe.primitive, ins, recipe.params, tuple(recipe.vars)))
        return recipe.vars[next(i for i, v in enumerate(recipe.values) if v is value)]

    def residual(self, value, aval):
        if is_scalar(value):
            d, w = dtypes.dtype_of_scalar(value)
            return Literal(value, ShapedArray((), d, w))
        recipe = self.recipes.get(id(value))
        if recipe is not None:
            return self._recompute(recipe, value)
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
        return PETracer(self, get_aval(value), True, value)

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
        values = []
        for t in tracers:  # (a loop, not ``all`` of a generator: every primitive under ``vjp`` asks; issue 28)
            if not t.is_known:
                break
            values.append(t.value)
        else:
            out = primitive.bind(*values, **params)
            b = self.main.global_data
            if b.saveable is not None and not b.saveable(primitive, [t.aval for t in tracers], params):
                values = list(out) if primitive.multiple_results else [out]
                recipe = _Recipe(primitive, params, list(tracers), values)
                ins = {id(t.value) for t in tracers}
                for v in values:  # a value handed through (an input, or one made before) keeps its own source
                    if not is_scalar(v) and id(v) not in ins and id(v) not in b.recipes:
                        b.recipes[id(v)] = recipe
                        b.keep.append(v)  # the id stays this value's
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


def _pe_flat(fun_flat, known_vals, unknown_avals, order, saveable=None):
    """Run ``fun_flat`` with known and unknown inputs (``order[i]`` True = unknown).

    Returns ``(outs_known: list[bool], known_out_values, program, residual_values)``
    where ``program`` takes ``[*residuals, *unknown inputs]`` and returns the unknown outputs.
    ``saveable``: a checkpoint policy's test (``_PEBuilder``); values it refuses are recomputed in ``program``.
    """
    builder = _PEBuilder(saveable)
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
    # (each tracer reaches the builder through its trace's main, and the builder held them: a reference cycle per
    # linearization left to CPython's cycle collector; core.builder's ``Builder.release`` says why that costs)
    builder.keep.clear()
    builder.recipes.clear()
    prog, used = dce(prog)
    # Drop residuals the program no longer reads.
    n = len(res_vars)
    keep = [i for i in range(n) if used[i]]
    prog = Program([], [res_vars[i] for i in keep] + unknown_ins, prog.eqns, prog.outvars)
    return out_known, known_outs, prog, [res_vals[i] for i in keep]


def partial_eval_program(program: Program, unknowns, instantiate=False, saveable=None):
    """Split a closed program by which inputs are unknown.

    Args:
      unknowns: one bool per input of ``program``.
      instantiate: bool or one bool per output: outputs to force unknown.
      saveable: ``None`` (residuals: every known value the unknown side reads), or a checkpoint policy's
        ``saveable(primitive, in_avals, params)``: the other known values are recomputed by the unknown side.
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
        out_known, known_outs, uprog, res = _pe_flat(body, list(known_vals), unknown_avals, unknowns, saveable)
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
