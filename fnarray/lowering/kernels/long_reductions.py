"""Reductions over more elements than a device lets one kernel's loops run, in two levels.

The reduce group gives each output element one work item, or one work-group whose invocations each loop over a
share of the reduced elements. Mesa's lavapipe (the webgpu device here) stops every loop of an invocation after
65,535 iterations in all, silently (``long_scans.py``): a work-group of 128 summing 8,388,481 elements came back
without the last one (``sum``, ``max``, ``argmax``, ``linalg.norm`` all wrong from 65,535 * 128 elements on; a
softmax row of 3,000,000, whose kernel loops over the row three times, already lost its tail). A device whose
``Capabilities.max_loop_iterations`` is set gets each reduction of more than ``LONG_ROWS`` times that many elements
per output rewritten, before scheduling, as two reductions:

1. move the reduced axes last and view the operand as ``(outputs, R)``;
2. reduce blocks of ``block`` elements: the first ``nb * block`` as ``(outputs, nb, block)`` over the last axis
   (``nb`` outputs per output, each within the limit), and the remaining tail, if any, as one more;
3. reduce the ``nb`` (+ 1) partial results.

A ``dot_general`` whose work items each loop over the whole contraction gets the same treatment from more than
``limit`` contracted elements on (its kernels read four at a time where aligned, so 262,140 was the measured
edge; a product of 300,000 came back wrong): the operands as ``(batch, M, K)`` and ``(batch, K, N)``, the first
``nb * block`` of ``K`` as ``nb`` more batch entries whose products are summed, plus the tail's product.

``argmax``/``argmin`` keep each block's extreme value and the global index of its first occurrence; the
``argmax``/``argmin`` of the block values picks the block (the first on ties, as the one-level op would), and a
masked sum takes its index. The rewrite is a ``call`` of a traced sub-program that the scheduler inlines. A sum's
partial results change its rounding (towards pairwise summation's, more accurate); the other ops are exact.
"""

from __future__ import annotations

import math

from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.ir import Eqn, Params, Program

__all__ = ["split_long_reductions", "LONG_ROWS"]

_REDUCE = {P.reduce_sum: lax.reduce_sum, P.reduce_prod: lax.reduce_prod, P.reduce_max: lax.reduce_max,
           P.reduce_min: lax.reduce_min, P.reduce_and: lax.reduce_and, P.reduce_or: lax.reduce_or}
_ARG = {P.argmax: (lax.argmax, lax.reduce_max), P.argmin: (lax.argmin, lax.reduce_min)}

#: A reduction of more than ``LONG_ROWS * max_loop_iterations`` elements per output is split in two levels: up to
#: that size the reduce group's work-group of 128 loops at most a quarter of the limit per pass over the row, room
#: for the three passes of a fused softmax or layernorm row (a full sum of 1024 x 1024 keeps its one kernel).
LONG_ROWS = 32


def _block(limit: int) -> int:
    """The elements of a first-level block: the largest power of two within ``limit`` and 65,536."""
    return 1 << (min(limit, 1 << 16).bit_length() - 1)


def _rows(x, axes):
    """``x`` with the reduced ``axes`` last, viewed as ``(outputs, R)``, and the shape of the result."""
    shape = x.aval.shape
    keep = tuple(i for i in range(len(shape)) if i not in axes)
    perm = keep + tuple(axes)
    if perm != tuple(range(len(shape))):
        x = lax.transpose(x, perm)
    out = tuple(shape[i] for i in keep)
    return lax.reshape(x, (math.prod(out), math.prod(shape[a] for a in axes))), out


def _blocks(x, block):
    """``x`` ``(O, R)`` as its first ``nb * block`` elements ``(O, nb, block)`` and the rest ``(O, t)`` (None if
    ``block`` divides ``R``), and ``nb``."""
    o, r = x.aval.shape
    nb = r // block
    head = lax.reshape(lax.slice(x, (0, 0), (o, nb * block)), (o, nb, block))
    tail = lax.slice(x, (0, nb * block), (o, r)) if nb * block != r else None
    return head, tail, nb


def _reduced(red, x, block):
    """``red`` of ``x`` ``(O, R)`` over its last axis, by blocks: ``(O,)``."""
    o = x.aval.shape[0]
    head, tail, _ = _blocks(x, block)
    parts = [red(head, (2,))]
    if tail is not None:
        parts.append(lax.reshape(red(tail, (1,)), (o, 1)))
    return red(lax.concatenate(parts, 1) if len(parts) > 1 else parts[0], (1,))


def _arg_reduced(prim, x, block, index_dtype):
    """``argmax``/``argmin`` (``prim``) of ``x`` ``(O, R)`` over its last axis, by blocks: ``(O,)``."""
    arg, red = _ARG[prim]
    if x.aval.dtype == dtypes.bool_:
        x = lax.convert_element_type(x, dtypes.int32)
    o = x.aval.shape[0]
    head, tail, nb = _blocks(x, block)
    starts = lax.mul(lax.iota(index_dtype, (o, nb), 1), lax.full((o, nb), block, index_dtype))
    vals, idxs = [red(head, (2,))], [lax.add(starts, arg(head, 2, index_dtype))]
    if tail is not None:
        vals.append(lax.reshape(red(tail, (1,)), (o, 1)))
        idxs.append(lax.reshape(lax.add(arg(tail, 1, index_dtype), lax.full((o,), nb * block, index_dtype)), (o, 1)))
    vals = lax.concatenate(vals, 1) if len(vals) > 1 else vals[0]
    idxs = lax.concatenate(idxs, 1) if len(idxs) > 1 else idxs[0]
    n = vals.aval.shape[1]
    pick = lax.broadcast_in_dim(arg(vals, 1, index_dtype), (o, n), (0,))
    hit = lax.eq(lax.iota(index_dtype, (o, n), 1), pick)
    return lax.reduce_sum(lax.select(hit, idxs, lax.full((o, n), 0, index_dtype)), (1,))


def _reduce_program(eqn, limit):
    """The traced two-level form of reduction ``eqn``."""
    prim, aval, block = eqn.primitive, eqn.inputs[0].aval, _block(limit)
    axes = tuple(sorted(eqn.params["axes"]))

    def f(x):
        rows, out = _rows(x, axes)
        if prim in _ARG:
            y = _arg_reduced(prim, rows, block, eqn.params["index_dtype"])
        else:
            y = _reduced(_REDUCE[prim], rows, block)
        return [lax.reshape(y, out)]

    prog, consts = trace_to_program(f, [aval], debug_name=f"blocked_{prim.name}")
    if consts:  # the body makes only literals and new values; a capture would be a bug here
        raise RuntimeError(f"blocked {prim.name}: the sub-program captured {len(consts)} values")
    return prog


def _contracted(x, batch, free, contract, k_last):
    """Operand ``x`` as ``(batch, rows, K)`` (``k_last``) or ``(batch, K, rows)``."""
    shape = x.aval.shape
    dims = batch + (free + contract if k_last else contract + free)
    if dims != tuple(range(len(shape))):
        x = lax.transpose(x, dims)
    sizes = [math.prod(shape[i] for i in d) for d in (batch, free, contract)]
    return lax.reshape(x, (sizes[0], sizes[1], sizes[2]) if k_last else (sizes[0], sizes[2], sizes[1]))


def _dot_program(eqn, limit):
    """The traced form of ``dot_general`` ``eqn`` as products over blocks of its contraction, summed."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    pet = eqn.params["preferred_element_type"]
    la, ra = eqn.inputs[0].aval, eqn.inputs[1].aval
    block, out_shape = _block(limit), eqn.outputs[0].aval.shape
    batched = (((2,), (1,)), ((0,), (0,)))

    def f(x, y):
        lf = tuple(i for i in range(len(la.shape)) if i not in lc and i not in lb)
        rf = tuple(i for i in range(len(ra.shape)) if i not in rc and i not in rb)
        x, y = _contracted(x, tuple(lb), lf, tuple(lc), True), _contracted(y, tuple(rb), rf, tuple(rc), False)
        (nbt, m, k), n = x.aval.shape, y.aval.shape[2]
        nb = k // block
        xh = lax.reshape(lax.slice(x, (0, 0, 0), (nbt, m, nb * block)), (nbt, m, nb, block))
        xh = lax.reshape(lax.transpose(xh, (0, 2, 1, 3)), (nbt * nb, m, block))
        yh = lax.reshape(lax.slice(y, (0, 0, 0), (nbt, nb * block, n)), (nbt * nb, block, n))
        out = lax.dot_general(xh, yh, batched, preferred_element_type=pet)
        out = lax.reduce_sum(lax.reshape(out, (nbt, nb, m, n)), (1,))
        if nb * block != k:
            xt, yt = lax.slice(x, (0, 0, nb * block), (nbt, m, k)), lax.slice(y, (0, nb * block, 0), (nbt, k, n))
            out = lax.add(out, lax.dot_general(xt, yt, batched, preferred_element_type=pet))
        return [lax.reshape(out, out_shape)]

    prog, consts = trace_to_program(f, [la, ra], debug_name="blocked_dot_general")
    if consts:  # the body makes only literals and new values; a capture would be a bug here
        raise RuntimeError(f"blocked dot_general: the sub-program captured {len(consts)} values")
    return prog


def _long(e, limit) -> bool:
    """Whether reduction ``e`` reduces more than ``LONG_ROWS * limit`` elements into each output, or product ``e``
    contracts more than ``limit``."""
    if e.primitive is P.dot_general:
        contract = e.params["dimension_numbers"][0][0]
        shape = e.inputs[0].aval.shape
        return e.outputs[0].aval.size > 0 and math.prod(shape[a] for a in contract) > limit
    if e.primitive not in _REDUCE and e.primitive not in _ARG:
        return False
    shape = e.inputs[0].aval.shape
    return math.prod(shape) > 0 and math.prod(shape[a] for a in e.params["axes"]) > LONG_ROWS * limit


def split_long_reductions(prog: Program, limit: int | None) -> Program:
    """``prog`` with every reduction of more than ``LONG_ROWS * limit`` elements per output, and every product
    contracting more than ``limit``, in two levels."""
    if limit is None:
        return prog
    eqns, changed = [], False
    for e in prog.eqns:
        if _long(e, limit):
            sub = _dot_program(e, limit) if e.primitive is P.dot_general else _reduce_program(e, limit)
            eqns.append(Eqn(P.call, e.inputs, Params(program=sub, name="blocked_reduce"), e.outputs))
            changed = True
        else:
            eqns.append(e)
    return Program(prog.constvars, prog.invars, eqns, prog.outvars) if changed else prog
