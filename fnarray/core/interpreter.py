"""Evaluate a ``Program`` by binding each equation in the current trace.

This is how transformations apply to a traced program: ``eval_program`` under
a JVP, batching or IR-building trace re-traces every equation through that
trace's rules.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.ir import Literal, Program

__all__ = ["eval_program", "literal_value"]


def literal_value(lit: Literal):
    """The value to bind for a literal: a Python scalar when the literal is weak and has its
    kind's default dtype (so weak types survive re-tracing), else a NumPy scalar."""
    v = lit.val
    if lit.aval.weak_type and dtypes.default_for_kind(_weak_kind(v.dtype)) == v.dtype:
        return v.item()
    return v


def _weak_kind(d):
    if dtypes.is_int(d):
        return "i*"
    if dtypes.is_float(d):
        return "f*"
    if dtypes.is_complex(d):
        return "c*"
    return d


def eval_program(prog: Program, consts, args) -> list:
    """Run ``prog`` on ``consts`` (for its constvars) and ``args`` (for its invars)."""
    env = {}
    for v, x in zip(prog.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(prog.invars, args, strict=True):
        env[v] = x

    def read(a):
        return literal_value(a) if isinstance(a, Literal) else env[a]

    for e in prog.eqns:
        outs = e.primitive.bind(*[read(a) for a in e.inputs], **e.params)
        if not e.primitive.multiple_results:
            outs = [outs]
        for v, o in zip(e.outputs, outs, strict=True):
            env[v] = o
    return [read(a) for a in prog.outvars]
