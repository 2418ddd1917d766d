"""Program-to-program passes shared by transforms and backends."""

from __future__ import annotations

import weakref

import numpy as np

from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.core.primitives import EFFECTS
from fnarray.core.subprograms import map_subprograms, subprograms

__all__ = ["cse", "dce", "has_effect", "param_key", "program_from_eqn", "read_counts", "subprograms", "walk_eqns"]

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
        outs = e.outputs
        # (one output, the common equation, without a generator: dce runs ~3 times on a jitted program)
        if (outs[0] in live if len(outs) == 1 else any(o in live for o in outs)) or has_effect(e):
            kept.append(e)
            for a in e.inputs:
                if isinstance(a, Var):
                    live.add(a)
    kept.reverse()
    used_inputs = [v in live for v in prog.invars]
    return Program(prog.constvars, prog.invars, kept, outvars), used_inputs


def program_from_eqn(primitive, params, in_avals, out_avals) -> Program:
    """A program of one equation over fresh variables."""
    ins = [Var(a) for a in in_avals]
    outs = [Var(a) for a in out_avals]
    return Program([], ins, [Eqn(primitive, tuple(ins), params, tuple(outs))], outs)


def read_counts(prog: Program) -> dict:
    """``{variable: how many equation inputs of prog read it}`` (its top-level equations; outputs not counted)."""
    counts: dict = {}
    for e in prog.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                counts[a] = counts.get(a, 0) + 1
    return counts


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
    return prog.derived("consts_as_inputs", lambda: Program([], prog.constvars + prog.invars, prog.eqns,
                                                             prog.outvars))


# ----------------------------------------------------------------------------- common subexpressions


def param_key(v):
    """A cache-key form of one parameter value in which values that compare equal but differ in meaning stay
    apart: ``0.0``/``-0.0``, ``1``/``True``/``1.0`` (the rule docs/design.md states for literals)."""
    t = type(v)
    if t is int:  # the common params first, by exact type (the isinstance chain below serves subclasses)
        return ("int", v)
    if t is tuple:
        for x in v:
            if type(x) is not int:
                return ("tuple",) + tuple(param_key(x) for x in v)
        return ("ints",) + v  # axes, shapes, permutations: no element needs its own key
    if t is str or v is None:
        return v
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, complex):
        return ("complex", v.real.hex(), v.imag.hex())
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str, v.tobytes())
    if isinstance(v, tuple):
        return ("tuple",) + tuple(param_key(x) for x in v)
    return v


def _eqn_key(eqn: Eqn, inputs: tuple):
    # (sorted by name alone: names are unique, so no two items' values are ever compared)
    params = tuple((k, param_key(v)) for k, v in sorted(eqn.params.items()))
    return eqn.primitive, inputs, params


def cse(prog: Program) -> Program:
    """Common-subexpression elimination: an equation with the same primitive, parameters and inputs as an
    earlier one is dropped and its outputs read the earlier outputs (sub-programs too, each on its own).

    Equations with effects (``has_effect``) are never merged. Literals match by dtype, weak type and bit
    pattern, and float parameters by bit pattern, so ``0.0``/``-0.0`` stay apart. Returns ``prog`` itself
    when nothing changes, so caches keyed by program identity keep hitting. A program that grows with a
    Python loop repeating the same work (random bits drawn twice from one key, a broadcast written in a
    loop) then lowers and compiles its distinct work once.
    """
    return _cse(prog, {})


def _cse(prog: Program, memo: dict) -> Program:
    done = memo.get(id(prog))
    if done is not None:
        return done[1]
    env: dict = {}
    seen: dict = {}
    eqns = []
    changed = False
    for e in prog.eqns:
        ins = tuple(env.get(a, a) if isinstance(a, Var) else a for a in e.inputs)
        if subprograms(e):
            new = map_subprograms(e, lambda p: _cse(p, memo))
            effect = has_effect(new)
        else:  # (most equations: one walk of the params, not three)
            new, effect = e, e.primitive in EFFECTS
        if ins != e.inputs or new is not e:
            new = new._replace(inputs=ins)
            changed = True
        if not effect:
            try:
                key = _eqn_key(new, ins)
                hit = seen.get(key)
            except TypeError:       # an unhashable parameter: keep the equation as it is
                key = hit = None
            if hit is not None and all(a.aval == b.aval for a, b in zip(hit, new.outputs, strict=True)):
                env.update(zip(new.outputs, hit, strict=True))
                changed = True
                continue
            if key is not None:
                seen[key] = new.outputs
        eqns.append(new)
    out = prog
    if changed:
        outvars = [env.get(a, a) if isinstance(a, Var) else a for a in prog.outvars]
        out = Program(prog.constvars, prog.invars, eqns, outvars)
    memo[id(prog)] = (prog, out)    # the original is held so that its id is not reused meanwhile
    return out
