"""Program-to-program passes shared by transforms and backends."""

from __future__ import annotations

import weakref

from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.primitives import EFFECTS
from fnarray.core.subprograms import subprograms  # noqa: F401  (one definition; re-exported)

__all__ = ["dce", "has_effect", "program_from_eqn", "subprograms", "walk_eqns"]

_effectful: "weakref.WeakKeyDictionary[Program, bool]" = weakref.WeakKeyDictionary()


def _program_has_effect(prog: Program) -> bool:
    hit = _effectful.get(prog)
    if hit is None:
        hit = _effectful[prog] = any(has_effect(e) for e in prog.eqns)
    return hit


def has_effect(eqn: Eqn) -> bool:
    """Whether ``eqn`` is, or holds in a sub-program, an effect (``primitives.EFFECTS``: a host callback)."""
    if eqn.primitive in EFFECTS:
        return True
    for sub in subprograms(eqn):
        if _program_has_effect(sub):
            return True
    return False


def dce(prog: Program, used_outputs=None) -> tuple[Program, list[bool]]:
    """Dead-code elimination; equations with effects (``has_effect``) are always kept.

    Args:
      used_outputs: booleans, one per output, or ``None`` for all.
    Returns: ``(program, used_inputs)``: the program keeping only the used
    outputs' equations (and those outputs), and which inputs (invars) it still reads.
    Constvars are kept whether used or not, so callers' const lists stay aligned.
    """
    if used_outputs is None:
        used_outputs = [True] * len(prog.outvars)
    outvars = [v for v, u in zip(prog.outvars, used_outputs, strict=True) if u]
    live = {v for v in outvars if isinstance(v, Var)}
    kept = []
    for e in reversed(prog.eqns):
        if any(o in live for o in e.outputs) or has_effect(e):
            kept.append(e)
            live.update(a for a in e.inputs if isinstance(a, Var))
    kept.reverse()
    used_inputs = [v in live for v in prog.invars]
    return Program(prog.constvars, prog.invars, kept, outvars), used_inputs


def program_from_eqn(primitive, params, in_avals, out_avals) -> Program:
    """A program of one equation over fresh variables."""
    ins = [Var(a) for a in in_avals]
    outs = [Var(a) for a in out_avals]
    return Program([], ins, [Eqn(primitive, tuple(ins), params, tuple(outs))], outs)


def walk_eqns(prog: Program):
    """Every equation of ``prog`` and of its sub-programs, depth first."""
    for e in prog.eqns:
        yield e
        for sub in subprograms(e):
            yield from walk_eqns(sub)


def is_literal(a) -> bool:
    return isinstance(a, Literal)


def consts_as_inputs(prog: Program) -> Program:
    """The same program with its constvars turned into leading invars (for sub-programs)."""
    if not prog.constvars:
        return prog
    return Program([], list(prog.constvars) + list(prog.invars), prog.eqns, prog.outvars)
