"""Reductions that keep their axes, and broadcasts left to MLX's binary operations (``program.py`` rewrites a
program with ``keep_reduced_axes`` before generating its Python).

``x - x.max(axis=-1, keepdims=True)`` traces (as in JAX) to ``reduce_max``, a ``reshape`` putting the reduced axis
back as 1, a ``broadcast_in_dim`` to ``x``'s shape and ``sub``: four MLX calls, four graph nodes, where raw MLX
writes two (``mx.max(x, axis=-1, keepdims=True)``, and ``-`` broadcasts by itself as NumPy does). A softmax pays
this twice: the decode step of ``benchmarks/programs.py`` generated 13 MLX calls where raw MLX makes 9 (raw MLX
written the traced way measured 0.78-0.95 against 0.70 ms a 40-step decode loop, evaluated). The rewrite:

- ``reshape(reduce(x, axes))`` to ``x``'s shape with the reduced axes as 1 becomes one ``Fused`` equation, MLX's
  reduction with ``keepdims=True`` (floating-point operands over non-empty axes: the rules' integer and empty
  cases stay as they are);
- an operand ``broadcast_in_dim(a)`` of a floating-point ``add``/``sub``/``mul``/``div``/``max``/``min`` whose
  other operand already has the output's shape reads ``a`` itself, where ``a``'s shape broadcasts to the output's
  by NumPy's rule (its axes mapped to the trailing ones, each 1 or the output's): those rules are one MLX call
  each, which broadcasts the same way.

The values are the same bits (no arithmetic changes); the broadcast and reshape equations go where nothing else
reads them (``dce`` after the rewrite).
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Program, Var
from fnarray.lowering.mlx.common import expression
from fnarray.lowering.mlx.fused import Fused, rewrite_each

__all__ = ["keep_reduced_axes"]


def _keepdims_rule(name):
    def rule(params, in_avals, out_avals):
        return expression(f"mx.{name}({{0}}, axis={{axes}}, keepdims=True)", 1, axes=list(params["axes"]))
    return rule


#: the reductions rewritten, as ``Fused`` stand-ins named after them
KEEPDIMS = {p: Fused(f"{p.name}_keepdims", _keepdims_rule(name))
            for p, name in ((P.reduce_sum, "sum"), (P.reduce_max, "max"), (P.reduce_min, "min"))}
#: binary primitives whose mlx rule, on floating-point operands, is one MLX call broadcasting as NumPy does
BROADCASTING = frozenset({P.add, P.sub, P.mul, P.div, P.max_p, P.min_p})


def _real_float(aval) -> bool:
    d = aval.dtype
    return dtypes.is_float(d) and not dtypes.is_complex(d) and not dtypes.is_low_bit(d)


def _kept(producer, e):
    """The ``Fused`` keepdims equation replacing ``e = reshape(reduce(x))``, else ``None``."""
    r = producer.get(e.inputs[0]) if isinstance(e.inputs[0], Var) else None
    if r is None or r.primitive not in KEEPDIMS:
        return None
    x = r.inputs[0]
    axes = tuple(r.params["axes"])
    if not isinstance(x, Var) or not axes or not _real_float(x.aval) or any(x.aval.shape[a] == 0 for a in axes):
        return None
    want = tuple(1 if i in axes else s for i, s in enumerate(x.aval.shape))
    if tuple(e.outputs[0].aval.shape) != want:
        return None
    return Eqn(KEEPDIMS[r.primitive], (x,), {"axes": axes}, e.outputs)


def _implicit(producer, a, shape):
    """The operand of ``a = broadcast_in_dim(operand)`` where it broadcasts to ``shape`` by NumPy's rule, else
    ``None``."""
    b = producer.get(a) if isinstance(a, Var) else None
    if b is None or b.primitive is not P.broadcast_in_dim or not isinstance(b.inputs[0], Var):
        return None
    src = b.inputs[0].aval.shape
    lead = len(shape) - len(src)
    if tuple(b.params["broadcast_dimensions"]) != tuple(range(lead, len(shape))):
        return None
    if any(s != 1 and s != shape[lead + i] for i, s in enumerate(src)):
        return None
    return b.inputs[0]


def _broadcasting(producer, e):
    """``e`` reading the operand of a broadcast its MLX call makes by itself, else ``None``."""
    if e.primitive not in BROADCASTING or not _real_float(e.outputs[0].aval):
        return None
    shape = tuple(e.outputs[0].aval.shape)
    x, y = e.inputs
    for i, (a, other) in enumerate(((x, y), (y, x))):
        if not isinstance(other, Var) or tuple(other.aval.shape) != shape or other.aval.dtype != a.aval.dtype:
            continue
        src = _implicit(producer, a, shape)
        if src is not None:
            ins = (src, other) if i == 0 else (other, src)
            return Eqn(e.primitive, ins, e.params, e.outputs)
    return None


def _rewrite(producer, e):
    return _kept(producer, e) if e.primitive is P.reshape else _broadcasting(producer, e)


def keep_reduced_axes(prog: Program) -> Program:
    """``prog`` with its reductions reshaped back to their operand's rank made keepdims reductions, and the
    broadcasts its float binary operations would make anyway dropped from their operands (run ``dce`` after it);
    ``prog`` itself where nothing matches."""
    return rewrite_each(prog, _rewrite)
