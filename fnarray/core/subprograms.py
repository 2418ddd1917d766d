"""The sub-programs of the control-flow and call primitives: which params hold them and how to walk them.

One definition for every pass that looks inside them (the kernel scheduler, the host driver, the browser
export, the decomposition pass, the mlx and numpy backends): ``SUBPROGRAM_PARAMS`` names, per primitive, the
params that hold a ``Program`` or a tuple of them; ``CALL_PROGRAM`` names the one program a call-like
primitive runs (``call``, ``remat`` and the custom-derivative calls, which run their primal program).
``subprograms(eqn)`` yields them and ``map_subprograms(eqn, fn)`` rebuilds an equation with them replaced;
``rewrite_equations(program, rewrite)`` is the skeleton of a pass that replaces some equations by others, in
sub-programs too (the decomposition pass and the low-bit upcast).
Both also handle programs held by params not listed here (a primitive added later), so a walk never misses one.
"""

from __future__ import annotations

from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Params, Program

__all__ = ["SUBPROGRAM_PARAMS", "CALL_PROGRAM", "CONTROL_FLOW", "subprograms", "map_subprograms",
           "rewrite_equations"]

#: The program a call-like primitive runs, by param name.
CALL_PROGRAM = {P.call: "program", P.remat: "program", P.custom_jvp_call: "call_program",
                P.custom_vjp_call: "call_program"}
#: Control flow proper (loops and branches), as opposed to calls.
CONTROL_FLOW = frozenset({P.cond, P.while_p, P.scan})
#: Every param that holds a sub-program (``branches`` holds a tuple of them).
SUBPROGRAM_PARAMS = {P.cond: ("branches",), P.while_p: ("cond_program", "body_program"), P.scan: ("program",),
                     **{p: (k,) for p, k in CALL_PROGRAM.items()}}


def subprograms(eqn: Eqn):
    """The sub-programs held in an equation's params (branches, bodies, called programs), in param order (a
    tuple: most equations hold none, and every pass asks each equation: issue 28, a first jitted call on mlx:0
    asked ~10 times an equation; the answer is kept on the ``Params``, which never change)."""
    params = eqn.params
    out = getattr(params, "_subs", None)
    if out is not None:
        return out
    if type(params) is Params:
        out = params._subs = _of_params(params._d)   # (the dict's own ``values``, not the Mapping's Python one)
        return out
    return _of_params(params)


def _of_params(params) -> tuple:
    out = _NONE
    for v in params.values():
        t = type(v)
        if t is Program:
            out = out + (v,)
        elif t is tuple:
            for p in v:
                if isinstance(p, Program):
                    out = out + (p,)
        elif isinstance(v, Program):  # (a subclass)
            out = out + (v,)
    return out


_NONE = ()


def map_subprograms(eqn: Eqn, fn) -> Eqn:
    """``eqn`` with each sub-program ``p`` replaced by ``fn(p)``; ``eqn`` itself when nothing changes."""
    if not subprograms(eqn):
        return eqn
    new = {}
    for k, v in eqn.params.items():
        t = type(v)
        if t is Program or (t is not tuple and isinstance(v, Program)):
            w = fn(v)
            if w is not v:
                new[k] = w
        elif t is tuple:
            for p in v:
                if isinstance(p, Program):
                    break
            else:
                continue
            w = tuple(fn(p) if isinstance(p, Program) else p for p in v)
            if any(a is not b for a, b in zip(w, v, strict=True)):
                new[k] = w
    return eqn._replace(params=eqn.params.replace(**new)) if new else eqn


def rewrite_equations(program: Program, rewrite, *, again: bool = False) -> Program:
    """``program`` with each equation ``e`` for which ``rewrite(e)`` returns a list of equations replaced by
    that list, and each other equation's sub-programs rewritten the same way (``rewrite(e)`` returns ``None`` to
    keep ``e``). With ``again``, the replacement equations are offered to ``rewrite`` in turn (a decomposition
    whose equations may themselves need decomposing); ``rewrite`` must then make progress, or this loops.
    Returns ``program`` itself when nothing changes, so callers can test ``is``."""
    changed = False
    eqns = []
    work = list(reversed(program.eqns))
    while work:
        e = work.pop()
        replacement = rewrite(e)
        if replacement is not None:
            changed = True
            if again:
                work.extend(reversed(replacement))
            else:
                eqns.extend(replacement)
            continue
        f = map_subprograms(e, lambda p: rewrite_equations(p, rewrite, again=again))
        changed = changed or f is not e
        eqns.append(f)
    if not changed:
        return program
    return Program(program.constvars, program.invars, eqns, program.outvars)
