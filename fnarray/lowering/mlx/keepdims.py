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

``tape_steps`` makes the same rewrite on an eager tape's steps (``transforms/eager_tape.py``; a tape replays the
eager executables of one primitive each, which ``x.max(axis=-1, keepdims=True)`` and ``x - m`` run as two MLX
calls each): the reduction's step becomes MLX's keepdims reduction and the reshape's step passes it on; a
broadcast read only by such a binary operation passes its operand on. No step is removed (the tape's slots stay
where they are): the steps left are Python's identity, no MLX call and no graph node.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Program, Var
from fnarray.lowering.mlx.common import LOW, SHAPE_FREE, expression, mx
from fnarray.lowering.mlx.fused import Fused, rewrite_each

__all__ = ["keep_reduced_axes", "tape_steps", "same"]


def _keepdims_rule(name):
    def rule(params, in_avals, out_avals):
        return expression(f"mx.{name}({{0}}, axis={{axes}}, keepdims=True)", 1, axes=list(params["axes"]))
    return rule


#: the reductions rewritten, as ``Fused`` stand-ins named after them
KEEPDIMS = {p: Fused(f"{p.name}_keepdims", _keepdims_rule(name))
            for p, name in ((P.reduce_sum, "sum"), (P.reduce_max, "max"), (P.reduce_min, "min"))}
SHAPE_FREE.update(dict.fromkeys(KEEPDIMS.values()))  # (MLX's reduction over the axes: reads no size)
#: binary primitives whose mlx rule, on floating-point operands, is one MLX call broadcasting as NumPy does
BROADCASTING = frozenset({P.add, P.sub, P.mul, P.div, P.max_p, P.min_p})


def _real_float(aval) -> bool:
    d = aval.dtype
    return dtypes.is_float(d) and not dtypes.is_complex(d) and not dtypes.is_low_bit(d)


def _keeps(x_aval, axes, out_aval) -> bool:
    """Whether a reduction of ``x_aval`` over ``axes`` reshaped to ``out_aval`` is MLX's keepdims reduction."""
    if not axes or not _real_float(x_aval) or any(x_aval.shape[a] == 0 for a in axes):
        return False
    return tuple(out_aval.shape) == tuple(1 if i in axes else s for i, s in enumerate(x_aval.shape))


def _kept(producer, e):
    """The ``Fused`` keepdims equation replacing ``e = reshape(reduce(x))``, else ``None``."""
    r = producer.get(e.inputs[0]) if isinstance(e.inputs[0], Var) else None
    if r is None or r.primitive not in KEEPDIMS:
        return None
    x = r.inputs[0]
    axes = tuple(r.params["axes"])
    if not isinstance(x, Var) or not _keeps(x.aval, axes, e.outputs[0].aval):
        return None
    return Eqn(KEEPDIMS[r.primitive], (x,), {"axes": axes}, e.outputs)


def _numpy_broadcast(src, dims, shape) -> bool:
    """Whether ``broadcast_in_dim`` of a ``src``-shaped operand along ``dims`` to ``shape`` is NumPy's broadcast."""
    lead = len(shape) - len(src)
    if tuple(dims) != tuple(range(lead, len(shape))):
        return False
    return all(s == 1 or s == shape[lead + i] for i, s in enumerate(src))


def _implicit(producer, a, shape):
    """The operand of ``a = broadcast_in_dim(operand)`` where it broadcasts to ``shape`` by NumPy's rule, else
    ``None``."""
    b = producer.get(a) if isinstance(a, Var) else None
    if b is None or b.primitive is not P.broadcast_in_dim or not isinstance(b.inputs[0], Var):
        return None
    if not _numpy_broadcast(b.inputs[0].aval.shape, b.params["broadcast_dimensions"], shape):
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


# ------------------------------------------------------------------------------------------------ eager tapes
def same(x):
    """A tape step that passes its operand on (a reshape or broadcast that MLX's neighbouring call makes); a
    tape's generated replay names the operand in its place, with no call (``passes_operand``,
    ``transforms/tape_source.py``)."""
    return x


same.passes_operand = True


_MX_NAMES = {P.reduce_sum: "sum", P.reduce_max: "max", P.reduce_min: "min"}


def _keepdims_step(name, axes):
    fn = getattr(mx, name)

    def step(x):
        return fn(x, axis=axes, keepdims=True)
    return step


def tape_steps(steps, eqns, starts, outs):
    """An eager tape's steps with ``keep_reduced_axes``' rewrites (the mlx backend's ``Backend.tape_steps``: its
    arguments and result). Only steps that call the rule itself (``single``: MLX's one device, no stream to pick)
    are rewritten, and only values that one step reads and that are not outputs of the tape change their shape;
    float16/bfloat16 reductions keep their rule (it sums in float32), as everything not floating-point does."""
    producer = {starts[q]: q for q, e in enumerate(eqns) if len(e[3]) == 1}
    readers: dict = {}
    for _call, ins, _single in steps:
        for s in ins:
            readers[s] = readers.get(s, 0) + 1
    outs = set(outs)
    new = list(steps)
    for q, (prim, params, in_avals, out_avals) in enumerate(eqns):
        call, ins, single = new[q]
        if not single or len(ins) != len(in_avals):
            continue
        if prim is P.reshape:
            r = producer.get(ins[0])
            if r is None or readers.get(ins[0]) != 1 or ins[0] in outs or not new[r][2]:
                continue
            rprim, rparams, r_in, _r_out = eqns[r]
            axes = tuple(rparams.get("axes", ()))
            if rprim in _MX_NAMES and r_in[0].dtype not in LOW and _keeps(r_in[0], axes, out_avals[0]):
                new[r] = (_keepdims_step(_MX_NAMES[rprim], list(axes)), new[r][1], True)
                new[q] = (same, ins, True)
        elif prim in BROADCASTING and _real_float(out_avals[0]) and len(ins) == 2:
            shape = tuple(out_avals[0].shape)
            for j in (0, 1):
                a, b = producer.get(ins[j]), in_avals[1 - j]
                if a is None or tuple(b.shape) != shape or b.dtype != in_avals[j].dtype or not new[a][2]:
                    continue
                bprim, bparams, b_in, _b_out = eqns[a]
                if (bprim is P.broadcast_in_dim and len(new[a][1]) == 1 and readers.get(ins[j]) == 1
                        and ins[j] not in outs and b_in[0].dtype == b.dtype
                        and _numpy_broadcast(b_in[0].shape, bparams["broadcast_dimensions"], shape)):
                    new[a] = (same, new[a][1], True)
                    break
    return new
