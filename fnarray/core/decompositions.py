"""Decompositions: a primitive written once as a composite of other primitives (DESIGN.md, "Families and
decompositions").

``DECOMPOSITIONS[primitive]`` holds a function over ``fnarray.core.lax`` that computes the primitive from
other primitives, and optionally a predicate saying where it may not be used (for instance a float32-accurate
formula is no substitute for float64). ``decompose(program, native)`` expands, before lowering, every equation
that ``native(eqn)`` says the backend cannot lower itself and that has an applicable
decomposition (sub-programs included, recursively, and decompositions that use decomposed primitives). The
numpy backend's implementation stays the semantics; a decomposition is tested against it on every backend.

Everything here is IR -> IR: it knows no backend; backends say what they lower natively
(``Backend.lowers_natively``) and ``fnarray.devices.partition`` runs the pass.
"""

from __future__ import annotations

import functools
import threading
from typing import Callable, NamedTuple

from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, IRError, Literal, Params, Program, Var

__all__ = ["Decomposition", "DECOMPOSITIONS", "defdecomposition", "decomposition_for", "decompose"]


class Decomposition(NamedTuple):
    """``fn(*operands, **params)`` returns the primitive's result(s) built from other primitives;
    ``unusable(*in_avals, **params)`` returns ``None`` where ``fn`` is exact enough, else the reason it is not."""

    fn: Callable
    unusable: Callable | None = None


DECOMPOSITIONS: dict = {}


def defdecomposition(prim, unusable=None):
    """Register the decorated function as ``prim``'s decomposition (one per primitive)."""
    def deco(fn):
        if prim in DECOMPOSITIONS:
            raise ValueError(f"{prim.name} has a decomposition already")
        DECOMPOSITIONS[prim] = Decomposition(fn, unusable)
        return fn
    return deco


def decomposition_for(eqn: Eqn) -> tuple[Decomposition | None, str | None]:
    """``(decomposition, None)`` if ``eqn`` may be decomposed, else ``(None, why not)``."""
    d = DECOMPOSITIONS.get(eqn.primitive)
    if d is None:
        return None, f"{eqn.primitive.name} has no decomposition"
    if d.unusable is not None:
        why = d.unusable(*[a.aval for a in eqn.inputs], **eqn.params)
        if why is not None:
            return None, why
    return d, None


_lock = threading.Lock()


@functools.lru_cache(maxsize=512)
def _traced(prim, params, in_avals, out_avals) -> Program:
    from fnarray.core import lax
    from fnarray.core.builder import trace_to_program
    fn = DECOMPOSITIONS[prim].fn

    def flat(*xs):
        outs = fn(*xs, **params)
        outs = list(outs) if prim.multiple_results else [outs]
        fixed = []
        for o, want in zip(outs, out_avals, strict=True):
            got = lax._aval(o)
            if (got.shape, got.dtype) != (want.shape, want.dtype):
                raise IRError(f"the decomposition of {prim.name} returned {got.str_short()} where the primitive "
                              f"gives {want.str_short()}: fix {fn.__name__}")
            if got.weak_type != want.weak_type or isinstance(o, (int, float)):
                o = P.convert_element_type.bind(o, new_dtype=want.dtype, weak_type=want.weak_type)
            fixed.append(o)
        return fixed

    prog, consts = trace_to_program(flat, list(in_avals), debug_name=fn.__name__)
    if consts:
        raise IRError(f"{fn.__name__} captured {len(consts)} arrays; a decomposition may only use its operands "
                      "and scalar constants")
    return prog


def _expand(eqn: Eqn) -> list:
    """``eqn`` as the equations of its decomposition, over fresh variables, ending in ``eqn``'s outputs."""
    in_avals = tuple(a.aval for a in eqn.inputs)
    out_avals = tuple(o.aval for o in eqn.outputs)
    with _lock:  # the builder's trace state is per thread, but the cache is shared
        prog = _traced(eqn.primitive, eqn.params, in_avals, out_avals)
    env = dict(zip(prog.invars, eqn.inputs, strict=True))
    # Outputs of the composite that are computed by one of its equations take the original output variable.
    rename = {}
    for o, target in zip(prog.outvars, eqn.outputs, strict=True):
        if isinstance(o, Var) and o not in rename and o not in env:
            rename[o] = target
    out = []
    for e in prog.eqns:
        outs = tuple(rename.get(o) or Var(o.aval) for o in e.outputs)
        env.update(zip(e.outputs, outs, strict=True))
        out.append(Eqn(e.primitive, tuple(a if isinstance(a, Literal) else env[a] for a in e.inputs), e.params,
                       outs))
    for o, target in zip(prog.outvars, eqn.outputs, strict=True):
        if isinstance(o, Var) and rename.get(o) is target:
            continue
        # An operand returned as is, a literal, or one value returned twice: copy it into the output.
        src = o if isinstance(o, Literal) else env[o]
        if src.aval.shape != target.aval.shape:
            out.append(Eqn(P.broadcast_in_dim, (src,), Params(shape=target.aval.shape, broadcast_dimensions=()),
                           (target,)))
        else:
            out.append(Eqn(P.copy_p, (src,), Params(), (target,)))
    return out


def _map_subprograms(eqn: Eqn, fn) -> Eqn:
    new = {}
    for k, v in eqn.params.items():
        if isinstance(v, Program):
            w = fn(v)
            if w is not v:
                new[k] = w
        elif isinstance(v, tuple) and any(isinstance(p, Program) for p in v):
            w = tuple(fn(p) if isinstance(p, Program) else p for p in v)
            if any(a is not b for a, b in zip(w, v, strict=True)):
                new[k] = w
    return eqn._replace(params=eqn.params.replace(**new)) if new else eqn


def decompose(program: Program, native: Callable) -> Program:
    """``program`` with every equation that ``native(eqn)`` rejects and that has a usable decomposition
    expanded into it (in sub-programs too). Returns ``program`` itself when nothing changes."""
    changed = False
    eqns = []
    work = list(reversed(program.eqns))
    while work:
        e = work.pop()
        if e.primitive in DECOMPOSITIONS and not native(e):
            d, _ = decomposition_for(e)
            if d is not None:
                work.extend(reversed(_expand(e)))
                changed = True
                continue
        f = _map_subprograms(e, lambda p: decompose(p, native))
        changed = changed or f is not e
        eqns.append(f)
    if not changed:
        return program
    return Program(program.constvars, program.invars, eqns, program.outvars)

