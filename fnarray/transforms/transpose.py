"""Transposition of linear programs (the backward pass of ``vjp``).

Rules come from ``ad_tables.primitive_transposes`` and receive
``UndefinedPrimal`` for the linear inputs (JAX's ``ad.backward_pass``;
Autodidax part 4, "transposition").
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.builder import trace_to_program
from fnarray.core.interpreter import literal_value
from fnarray.core.ir import Literal, Program, Var
from fnarray.core.passes import consts_as_inputs
from fnarray.transforms import ad_rules  # noqa: F401  (fills the rule tables)
from fnarray.transforms.ad_tables import (
    UndefinedPrimal,
    Zero,
    add_tangents,
    instantiate_zeros,
    primitive_transposes,
    tangent_aval,
    zeros_like_aval,
)


def backward_pass(program: Program, args, cts_out):
    """Transpose ``program`` (linear in the inputs given as ``UndefinedPrimal``).

    Args:
      args: one value per constvar+invar; linear ones are ``UndefinedPrimal``.
      cts_out: one cotangent per output (``Zero`` allowed).
    Returns: the cotangents of the linear inputs, in order (``Zero`` where none flowed).
    """
    inputs = list(program.constvars) + list(program.invars)
    primal_env, linear, lin_eqns = _forward_nonlinear(program, inputs, args)

    def read(a):
        return literal_value(a) if isinstance(a, Literal) else primal_env[a]

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
            # a custom_vjp's bwd gets zeros of its outputs' own types (weak where they are, as JAX's); the
            # other rules take strong zeros
            weak = e.primitive.name == "custom_lin"
            ct_arg = [c if c is not None else zeros_like_aval(o.aval if weak else o.aval.strip_weak())
                      for c, o in zip(cts, e.outputs, strict=True)]
        else:
            ct_arg = cts[0]
        cts_in = rule(ct_arg, *invals, **e.params)
        for a, c in zip(e.inputs, cts_in, strict=True):
            add_ct(a, c)
    return [ct_env.get(v, Zero(tangent_aval(v.aval))) for v, a in zip(inputs, args, strict=True)
            if isinstance(a, UndefinedPrimal)]


def _forward_nonlinear(program, inputs, args):
    """``(primal_env, linear, lin_eqns)``: the equations that read no linear value evaluated forward (their
    values by variable), the linear variables (the ``UndefinedPrimal`` inputs and what depends on them) and
    the equations that read them, in order."""
    primal_env, linear = {}, set()
    for v, a in zip(inputs, args, strict=True):
        if isinstance(a, UndefinedPrimal):
            linear.add(v)
        else:
            primal_env[v] = a
    lin_eqns = []
    for e in program.eqns:
        if any(isinstance(a, Var) and a in linear for a in e.inputs):
            lin_eqns.append(e)
            linear.update(e.outputs)
        else:
            ins = [literal_value(a) if isinstance(a, Literal) else primal_env[a] for a in e.inputs]
            outs = e.primitive.bind(*ins, **e.params)
            outs = outs if e.primitive.multiple_results else [outs]
            for v, o in zip(e.outputs, outs, strict=True):
                primal_env[v] = o
    return primal_env, linear, lin_eqns


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
