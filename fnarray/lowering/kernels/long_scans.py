"""Cumulative ops over lines longer than a device lets one kernel loop run, as a blocked scan.

The cumulative kernel gives each line to one invocation, which loops over the line. Some
drivers bound the iterations of a shader invocation's loops: Mesa's lavapipe (Vulkan on
llvmpipe, the webgpu device here) stops every loop of an invocation after 65,535 iterations in
all, silently, so a ``cumsum`` of 70,000 elements came back with zeros from element 65,536 on.
A device whose ``Capabilities.max_loop_iterations`` is set gets each longer cumulative op
rewritten, before scheduling, as the classic two-level (blocked) scan:

1. pad the line with the op's identity to ``nb * B`` elements and view it as ``(nb, B)``;
2. scan each block of ``B`` (a line of ``B``, within the limit);
3. scan the ``nb`` block totals (recursively, if ``nb`` is over the limit too) and shift
   them by one (an exclusive scan of the totals);
4. combine each block with the total of the blocks before it, and drop the padding.

Every op here is associative (``add``, ``mul``, ``max``, ``min``, ``logaddexp``), so the result
equals the one-loop scan up to floating-point reassociation. The rewrite is a ``call`` of a
traced sub-program that the scheduler inlines (``inline_calls``), so it needs no kernel of
its own.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.ir import Eqn, Params, Program

__all__ = ["split_long_scans"]

_OPS = {P.cumsum: lax.cumsum, P.cumprod: lax.cumprod, P.cummax: lax.cummax, P.cummin: lax.cummin,
        P.cumlogsumexp: lax.cumlogsumexp}


def _identity(prim, dtype):
    """The value that leaves a line's scan unchanged when it is appended (padding) or prepended."""
    if prim is P.cumsum:
        return 0
    if prim is P.cumlogsumexp:
        return -np.inf
    if prim is P.cumprod:
        return 1
    big = prim is P.cummin
    if dtypes.is_float(dtype):
        return np.inf if big else -np.inf
    if dtype == dtypes.bool_:
        return big
    info = np.iinfo(dtype)
    return int(info.max) if big else int(info.min)


def _combine(prim, a, b):
    """``a (op) b`` for the scan's op, elementwise, equal shapes and dtypes."""
    if prim is P.cumsum:
        return lax.bitwise_or(a, b) if a.aval.dtype == dtypes.bool_ else lax.add(a, b)
    if prim is P.cumprod:
        return lax.bitwise_and(a, b) if a.aval.dtype == dtypes.bool_ else lax.mul(a, b)
    if prim is P.cummax:
        return lax.max(a, b)
    if prim is P.cummin:
        return lax.min(a, b)
    # logaddexp, with equal infinities kept (inf - inf would be NaN) and NaN propagated by max.
    m = lax.max(a, b)
    s = lax.add(m, lax.log1p(lax.exp(lax.neg(lax.abs(lax.sub(a, b))))))
    return lax.select(lax.eq(lax.abs(m), lax.full(m.aval.shape, np.inf, m.aval.dtype)), m, s)


def _blocked(prim, x, block, limit):
    """The scan of ``x`` along its last axis (forward), blocks of ``block`` elements."""
    shape, d = x.aval.shape, x.aval.dtype
    n = shape[-1]
    nb = -(-n // block)
    ident = _identity(prim, d)
    if nb * block != n:
        pad = [(0, 0, 0)] * (len(shape) - 1) + [(0, nb * block - n, 0)]
        x = lax.pad(x, lax.full((), ident, d), pad)
    lead = shape[:-1]
    blocks = lax.reshape(x, lead + (nb, block))
    inner = _OPS[prim](blocks, axis=len(lead) + 1, reverse=False)
    totals = lax.reshape(lax.slice(inner, (0,) * (len(lead) + 1) + (block - 1,), lead + (nb, block)),
                         lead + (nb,))
    carry = _blocked(prim, totals, block, limit) if nb > limit else _OPS[prim](totals, axis=len(lead),
                                                                               reverse=False)
    before = lax.concatenate([lax.full(lead + (1,), ident, d),
                              lax.slice(carry, (0,) * (len(lead) + 1), lead + (nb - 1,))], len(lead))
    before = lax.broadcast_in_dim(before, lead + (nb, block), tuple(range(len(lead) + 1)))
    out = lax.reshape(_combine(prim, before, inner), lead + (nb * block,))
    if nb * block != n:
        out = lax.slice(out, (0,) * len(shape), shape)
    return out


def _scan_program(eqn, limit):
    prim, axis, reverse = eqn.primitive, eqn.params["axis"], eqn.params["reverse"]
    aval = eqn.inputs[0].aval
    nd = len(aval.shape)
    block = min(limit, 4096)

    def f(x):
        perm = tuple(i for i in range(nd) if i != axis) + (axis,)
        y = lax.transpose(x, perm) if axis != nd - 1 else x
        if reverse:
            y = lax.rev(y, (nd - 1,))
        y = _blocked(prim, y, block, limit)
        if reverse:
            y = lax.rev(y, (nd - 1,))
        if axis != nd - 1:
            y = lax.transpose(y, tuple(int(i) for i in np.argsort(perm)))
        return [y]

    prog, consts = trace_to_program(f, [aval], debug_name=f"blocked_{prim.name}")
    if consts:  # the body makes only literals and new values; a capture would be a bug here
        raise RuntimeError(f"blocked {prim.name}: the sub-program captured {len(consts)} values")
    return prog


def split_long_scans(prog: Program, limit: int | None) -> Program:
    """``prog`` with every cumulative op over more than ``limit`` elements as a blocked scan."""
    if limit is None:
        return prog
    eqns, changed = [], False
    for e in prog.eqns:
        if e.primitive in _OPS and e.inputs[0].aval.shape[e.params["axis"]] > limit:
            eqns.append(Eqn(P.call, e.inputs, Params(program=_scan_program(e, limit), name="blocked_scan"),
                            e.outputs))
            changed = True
        else:
            eqns.append(e)
    return Program(prog.constvars, prog.invars, eqns, prog.outvars) if changed else prog
