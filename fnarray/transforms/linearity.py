"""Which primitives are linear in which operands: the check ``linear_transpose`` makes before it transposes.

``check_linear(program, name)`` walks a traced program from its inputs: an equation none of whose operands depend
on the inputs is free (constants, values computed from them); one that does must be linear in the operands that
depend on them, by ``LINEAR_RULES`` (keyed by primitive name), or the walk raises ``NotImplementedError`` naming
the primitive (JAX's ``linear_transpose`` raises so when it meets a primitive with no transpose rule, ``sin``,
``max``). Affine pieces (``x + 1``, a constant pad value) pass, as in JAX: the transpose is of the linear part.
Call-like equations (``jit``'s ``call``, ``remat``, the custom-derivative calls) are checked through the
program they run.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.ir import Program, Var
from fnarray.core.subprograms import CALL_PROGRAM

__all__ = ["LINEAR_RULES", "check_linear"]


def _joint(eqn, dep):
    """Linear in all its operands together (``add``, ``reshape``, ``concatenate``, ``fft``, ...)."""
    return None


def _only(positions, others):
    """Linear in the operands at ``positions`` together; the ``others`` (indices, a predicate, a denominator)
    must not depend on the inputs (``positions`` None: every operand but the first)."""
    def rule(eqn, dep):
        bad = [i for i, d in enumerate(dep) if d and (i == 0 if positions is None else i not in positions)]
        if bad:
            return f"its {others} (operand {bad[0]}) depends on them"
        return None
    return rule


def _one_factor(eqn, dep):
    """Bilinear (``mul``, ``dot_general``, a convolution): linear when exactly one factor depends on the inputs."""
    if sum(dep) > 1:
        return "both of its factors depend on them"
    return None


def _to_inexact(eqn, dep):
    """``convert_element_type`` to a float or complex dtype (to an integer or bool it is not linear)."""
    new = eqn.params["new_dtype"]
    if not dtypes.is_inexact(new):
        return f"it converts an input-dependent value to {dtypes.canonicalize(new)}"
    return None


#: Per primitive name: ``rule(eqn, dep) -> None`` when the equation is linear in the operands flagged in ``dep``
#: (one bool per operand, True where it depends on the inputs), else a phrase saying why not.
LINEAR_RULES = {
    **{name: _joint for name in (
        "add", "sub", "neg", "reshape", "transpose", "broadcast_in_dim", "concatenate", "slice", "rev",
        "reduce_sum", "cumsum", "reduce_window_sum", "real", "imag", "conj", "complex", "copy", "name",
        "sharding_constraint", "fft", "pad")},
    "convert_element_type": _to_inexact,
    "select_n": _only(None, "predicate"),
    "dynamic_slice": _only((0,), "start index"),
    "dynamic_update_slice": _only((0, 1), "start index"),
    "gather": _only((0,), "index array"),
    "scatter_add": _only((0, 2), "index array"),
    "div": _only((0,), "denominator"),
    "mul": _one_factor,
    "dot_general": _one_factor,
    "conv_general_dilated": _one_factor,
}


def check_linear(program: Program, name: str = "fun") -> list:
    """Raise ``NotImplementedError`` unless ``program`` is linear in its invars (its constvars are constants).

    Returns one bool per output: whether it depends on the inputs.
    """
    return _walk(program, [False] * len(program.constvars) + [True] * len(program.invars), name)


def _walk(program: Program, in_dep: list, name: str) -> list:
    dep = {v for v, d in zip(list(program.constvars) + list(program.invars), in_dep, strict=True) if d}
    for eqn in program.eqns:
        flags = [isinstance(a, Var) and a in dep for a in eqn.inputs]
        if not any(flags):
            continue
        outs = _eqn_outputs(eqn, flags, name)
        dep.update(o for o, d in zip(eqn.outputs, outs, strict=True) if d)
    return [isinstance(a, Var) and a in dep for a in program.outvars]


def _eqn_outputs(eqn, flags, name):
    prim = eqn.primitive.name
    sub = eqn.params.get(CALL_PROGRAM[eqn.primitive]) if eqn.primitive in CALL_PROGRAM else None
    if sub is not None and len(sub.invars) + len(sub.constvars) == len(flags):
        return _walk(sub, flags, name)
    if sub is not None and len(sub.invars) == len(flags):
        return _walk(sub, [False] * len(sub.constvars) + flags, name)
    rule = LINEAR_RULES.get(prim)
    why = f"{prim!r} is not linear" if rule is None else rule(eqn, flags)
    if why is not None:
        raise NotImplementedError(
            f"linear_transpose: {name} is not linear in its inputs: it applies {prim!r} to a value that depends on "
            f"them ({why}); linear_transpose expects a function linear in its arguments (sums, scalings, "
            "reshapes, products with constants, dot products with one input-dependent side, fft, ...); for the "
            "derivative of a non-linear function at a point use fnarray.vjp(fun, *primals)")
    return [True] * len(eqn.outputs)
