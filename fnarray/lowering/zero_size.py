"""The zero-size pass: a program rewritten so that no equation computes on an empty array.

Zero-size operands and outputs are legal for every primitive (docs/design.md, "State and
memory"), and nothing is launched where nothing is done. Rather than teach every
kernel group, index computation and MLX rule about empty shapes, the backends that
need it (the kernel scheduler, the mlx lowering) run this pass first:

- an equation whose outputs are all zero-size is dropped: its outputs have no
  elements, so nothing needs computing;
- an equation with a non-empty output that reads a zero-size operand gets the
  result that the empty operand implies, written without reading it (a table keyed
  by primitive, ``REWRITES``): a reduction over an empty axis is its identity, a
  ``dot_general`` over an empty contraction is zero, a ``pad`` of an empty array is
  its padding value, ``concatenate`` drops its empty pieces, a gather from an empty
  axis is zero (as the numpy reference (``lowering/numpy/``)), a scatter of no updates and a dynamic update of
  an empty slice are their operand;
- a zero-size value that is still needed (a program output, an operand of a
  control-flow or call equation the backend runs from the host) is defined by a
  *fill*: ``broadcast_in_dim`` of a scalar literal to the empty shape, which
  ``is_fill`` recognises and the backends produce without any work (an empty
  buffer, no kernel, no MLX call).

``argmax``/``argmin`` over an empty axis never get here: their shape rule raises
``ShapeError`` at trace time on every backend, as on numpy:0.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.shaped import ShapedArray

__all__ = ["drop_zero_size", "is_fill", "has_zero_size"]


def _empty(a) -> bool:
    return isinstance(a, Var) and 0 in a.aval.shape


def has_zero_size(prog: Program) -> bool:
    """Whether any input, output or equation of ``prog`` (not its sub-programs) has a zero-size array."""
    if any(0 in v.aval.shape for v in prog.constvars + prog.invars):
        return True
    # (every equation input is an earlier output, an input or a literal: the outputs are enough)
    return any(0 in o.aval.shape for e in prog.eqns for o in e.outputs) or any(_empty(a) for a in prog.outvars)


def _literal(value, aval) -> Literal:
    return Literal(np.asarray(value).astype(aval.dtype), ShapedArray((), aval.dtype, aval.weak_type))


def _broadcast(x, out: Var) -> Eqn:
    """``out`` = the scalar atom ``x`` broadcast to ``out``'s shape."""
    return Eqn(P.broadcast_in_dim, (x,), Params(shape=out.aval.shape, broadcast_dimensions=()), (out,))


def fill(out: Var, value=0) -> Eqn:
    """The equation defining ``out`` as ``value`` everywhere (a fill when ``out`` is empty); ``-1`` in an
    unsigned dtype is every bit set."""
    return _broadcast(_literal(value, out.aval), out)


def is_fill(e: Eqn) -> bool:
    """Whether ``e`` defines a zero-size value from a literal (no work at all)."""
    return (e.primitive == P.broadcast_in_dim and isinstance(e.inputs[0], Literal)
            and all(o.aval.size == 0 for o in e.outputs))


# ------------------------------------------------------------------------------ identities


def _lowest(d):
    if d == np.bool_:
        return False
    if dtypes.is_int(d):   # int4/uint4 too (ml_dtypes' limits; NumPy's iinfo has none)
        return dtypes.iinfo(d).min
    return -np.inf if not np.isnan(np.asarray(-np.inf).astype(d)) else dtypes.finfo(d).min   # e4m3fn: no inf


def _highest(d):
    if d == np.bool_:
        return True
    if dtypes.is_int(d):
        return dtypes.iinfo(d).max
    return np.inf if not np.isnan(np.asarray(np.inf).astype(d)) else dtypes.finfo(d).max


IDENTITY = {
    P.reduce_sum: lambda d: 0,
    P.reduce_prod: lambda d: 1,
    P.reduce_max: _lowest,
    P.reduce_min: _highest,
    P.reduce_and: lambda d: True if d == np.bool_ else -1,   # every bit set, unsigned too
    P.reduce_or: lambda d: False if d == np.bool_ else 0,
}


# ------------------------------------------------------------------------------ rewrites
# Each rule gets an equation with a non-empty output and at least one zero-size operand and returns
# ``(equations, aliases)``: what replaces it, and ``{output: atom}`` for outputs that are an operand.


def _reduction(e):
    out = e.outputs[0]
    d = e.inputs[0].aval.dtype
    if np.issubdtype(d, np.complexfloating) and e.primitive in (P.reduce_max, P.reduce_min):
        return None    # numpy:0 raises for an empty complex max/min; keep the equation (its error)
    return [fill(out, IDENTITY[e.primitive](d))], {}


def _dot_general(e):
    return [fill(e.outputs[0], 0)], {}


def _pad(e):
    return [_broadcast(e.inputs[1], e.outputs[0])], {}


def _concatenate(e):
    pieces = tuple(a for a in e.inputs if not _empty(a))
    if len(pieces) == 1:
        return [], {e.outputs[0]: pieces[0]}
    return [Eqn(e.primitive, pieces, e.params, e.outputs)], {}


def _gather(e):
    x, indices = e.inputs
    out = e.outputs[0]
    axes = e.params["axes"]
    if any(x.aval.shape[a] == 0 for a in axes):
        return [fill(out, 0)], {}
    if not axes and not _empty(x):    # no gathered axis: every batch element is x
        nb = indices.aval.ndim - 1
        return [Eqn(P.broadcast_in_dim, (x,), Params(shape=out.aval.shape,
                                                     broadcast_dimensions=tuple(range(nb, nb + x.aval.ndim))),
                    (out,))], {}
    return None


def _scatter(e):
    x, indices, updates = e.inputs
    if _empty(updates):
        return [], {e.outputs[0]: x}
    return None


def _dynamic_update_slice(e):
    if _empty(e.inputs[1]):
        return [], {e.outputs[0]: e.inputs[0]}
    return None


REWRITES = {P.dot_general: _dot_general, P.pad: _pad, P.concatenate: _concatenate, P.gather: _gather,
             P.dynamic_update_slice: _dynamic_update_slice}
REWRITES[conv_general_dilated_p] = _dot_general   # no features or an empty kernel: zeros
REWRITES[dot_product_attention_p] = _dot_general   # no keys: an empty weighted sum, zeros
for _p in IDENTITY:
    REWRITES[_p] = _reduction
for _p in (P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max):
    REWRITES[_p] = _scatter

# The linear-algebra primitives' rewrites live in their own module.
from fnarray.lowering.linalg_zero_size import register as _register_linalg  # noqa: E402

_register_linalg(REWRITES, fill)


# ------------------------------------------------------------------------------ the pass


def drop_zero_size(prog: Program) -> Program:
    """``prog`` with no work on zero-size arrays (see the module docstring); ``prog`` itself when it has
    none. Sub-programs (loop bodies, branches) are left to the backend, which lowers them through this
    pass too."""
    if not has_zero_size(prog):
        return prog
    sub: dict = {}     # var -> the atom that replaces it
    eqns: list = []
    dropped: set = set()   # zero-size vars whose equation was dropped (defined by a fill if read)
    filled: set = set()

    def rd(a):
        while isinstance(a, Var) and a in sub:
            a = sub[a]
        return a

    def need(a):
        """``a`` is read by an equation kept as it is: define it if its producer was dropped."""
        if isinstance(a, Var) and a in dropped and a not in filled:
            filled.add(a)
            eqns.append(fill(a))

    for e in prog.eqns:
        ins = tuple(rd(a) for a in e.inputs)
        if ins != e.inputs:
            e = Eqn(e.primitive, ins, e.params, e.outputs)
        if e.outputs and all(o.aval.size == 0 for o in e.outputs):
            dropped.update(e.outputs)
            continue
        if any(_empty(a) for a in ins):
            rule = REWRITES.get(e.primitive)
            done = rule(e) if rule is not None else None
            if done is not None:
                new, aliases = done
                for o, a in aliases.items():
                    sub[o] = a
                for n in new:
                    for a in n.inputs:
                        need(a)
                eqns.extend(new)
                continue
        for a in ins:
            need(a)
        eqns.append(e)
    outvars = [rd(a) for a in prog.outvars]
    for a in outvars:
        need(a)
    return Program(prog.constvars, prog.invars, eqns, outvars)
