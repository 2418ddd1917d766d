"""Autodiff rule tables and the helpers that fill them (conventions of ``jax.interpreters.ad``).

- ``primitive_jvps[prim](primals, tangents, **params) -> (primal_out, tangent_out)``:
  ``primals``/``tangents`` are lists; a tangent may be a symbolic ``Zero``.
  For ``multiple_results`` primitives both outputs are lists. The rule returns
  ``Zero(aval)`` for a tangent that is identically zero.
- ``primitive_transposes[prim](ct, *args, **params) -> list``: one cotangent per
  argument (``None`` for arguments that are not linear). Linear arguments come
  as ``UndefinedPrimal(aval)``; ``ct`` may be ``Zero`` (for multiple results, a
  list of cotangents).
- ``partial_eval_rules[prim](trace, tracers, **params)``: for higher-order
  primitives, splits an equation with known and unknown inputs (see ``ad``).

Tangents of integer and boolean values have dtype ``float0`` (as in JAX) and
are always ``Zero``.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.avals import get_aval
from fnarray.core.shaped import ShapedArray

__all__ = ["Zero", "UndefinedPrimal", "primitive_jvps", "primitive_transposes", "partial_eval_rules",
           "defjvp", "defjvp_zero", "deflinear", "tangent_aval", "is_undefined", "instantiate_zeros",
           "add_tangents", "zeros_like_aval", "zero_from_primal", "staged"]

primitive_jvps: dict = {}
primitive_transposes: dict = {}
partial_eval_rules: dict = {}
#: ``fnarray.transforms.control_flow.cond``, which that module installs here at import: a rule that stages a
#: data-dependent choice (cummax's tie test) calls it without importing control_flow (which reaches the rules).
staged: dict = {}


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """The abstract value of tangents of ``aval``: same dtype if inexact, else ``float0``."""
    if dtypes.is_inexact(aval.dtype):
        return ShapedArray(aval.shape, aval.dtype, aval.weak_type)
    return ShapedArray(aval.shape, dtypes.float0, False)


class Zero:
    """A symbolic zero tangent or cotangent of abstract value ``aval``."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    @staticmethod
    def from_primal(x):
        return Zero(tangent_aval(_aval(x)))

    def __repr__(self):
        return f"Zero({self.aval.str_short()})"


def zero_from_primal(x) -> Zero:
    return Zero(tangent_aval(_aval(x)))


class UndefinedPrimal:
    """A linear input of a transposed equation: only its abstract value is known."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self):
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined(x) -> bool:
    return isinstance(x, UndefinedPrimal)


_aval = get_aval  # fnarray.core.avals


def zeros_like_aval(aval: ShapedArray):
    """A concrete (or traced) array of zeros of ``aval`` (float0 gives a bool array of zeros); a weak
    ``aval`` gives weak zeros, as JAX's ``zeros_like_aval`` (the gradient of an unused Python-float input is
    weak)."""
    from fnarray.core import lax
    if aval.dtype == dtypes.float0:
        return lax.full(aval.shape, False, dtypes.bool_)
    zeros = lax.full(aval.shape, 0, aval.dtype)
    if not aval.weak_type:
        return zeros
    from fnarray.core.primitives import convert_element_type
    return convert_element_type.bind(zeros, new_dtype=aval.dtype, weak_type=True)


def instantiate_zeros(t):
    """Materialize a symbolic ``Zero``; other values pass through."""
    return zeros_like_aval(t.aval) if isinstance(t, Zero) else t


def add_tangents(a, b):
    """``a + b`` where either may be a symbolic ``Zero``."""
    from fnarray.core import lax
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    return lax.add(a, b)


def defjvp(prim, *jvp_fns):
    """Define the JVP of a single-output ``prim`` from one function per input.

    ``jvp_fns[i](t_i, primal_out, *primals, **params)`` gives input ``i``'s
    contribution to the output tangent (``None``: the input is not
    differentiable). Contributions of zero tangents are skipped.
    """
    def rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        acc = None
        for fn, t in zip(jvp_fns, tangents, strict=False):
            if fn is None or isinstance(t, Zero):
                continue
            c = fn(t, out, *primals, **params)
            acc = c if acc is None else add_tangents(acc, c)
        if acc is None:
            acc = Zero(tangent_aval(_aval(out)))
        return out, acc
    primitive_jvps[prim] = rule
    return rule


def defjvp_zero(prim):
    """The output tangent is always zero (comparisons, integer ops, ``stop_gradient``)."""
    def rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if prim.multiple_results:
            return out, [Zero(tangent_aval(_aval(o))) for o in out]
        return out, Zero(tangent_aval(_aval(out)))
    primitive_jvps[prim] = rule
    return rule


def deflinear(prim, transpose_rule):
    """``prim`` is linear in all its array inputs: its JVP applies ``prim`` to the tangents.

    ``transpose_rule(ct, *args, **params)`` is registered as its transpose.
    """
    def rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(isinstance(t, Zero) for t in tangents):
            if prim.multiple_results:
                return out, [Zero(tangent_aval(_aval(o))) for o in out]
            return out, Zero(tangent_aval(_aval(out)))
        ts = [instantiate_zeros(t) for t in tangents]
        return out, prim.bind(*ts, **params)
    primitive_jvps[prim] = rule
    primitive_transposes[prim] = transpose_rule
    return rule
