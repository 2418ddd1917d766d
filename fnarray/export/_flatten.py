"""A program made straight-line for the browser: the export replays a fixed list of dispatches.

The browser runtime has no host loop of its own (no predicate readback between
dispatches), so every equation must become kernels known at export time:

- ``call``, ``remat`` and the custom-derivative calls are inlined;
- ``scan`` (its length is static) is unrolled: each iteration slices its row of
  ``xs`` with a static ``slice``, runs the body's equations on fresh variables,
  and the ``ys`` are stacked at the end with ``concatenate`` in groups small
  enough for the target's storage-buffer limit;
- ``cond`` whose branch index is a literal is replaced by that branch;
- ``while`` and a ``cond`` on a computed index cannot be replayed: they raise
  ``UnsupportedOnDevice`` naming the primitive and the way out.

A target with control flow of its own (ONNX's ``Loop`` and ``If``) passes
``keep_control=True``: then only the calls are inlined, and ``scan``, ``cond``
and ``while`` stay, each with its sub-programs made straight-line the same way.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.errors import UnsupportedOnDevice
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.shaped import ShapedArray
from fnarray.core.subprograms import CALL_PROGRAM

__all__ = ["straight_line"]

_CALLS = CALL_PROGRAM

_WHILE_HINT = ("a while_loop's trip count depends on values computed at run time, and the exported bundle is a "
               "fixed list of GPU dispatches with no host loop. Use fnarray.scan, or fori_loop with static Python "
               "bounds (a scan of known length), which the export unrolls")
_COND_HINT = ("this cond picks its branch from a value computed at run time, and the exported bundle is a fixed "
              "list of GPU dispatches with no host decision. Compute both branches and choose with "
              "fnarray.numpy.where, or make the predicate a Python value")


class _Builder:
    """Collects equations on fresh variables; ``stack_group`` bounds the operands of one concatenate."""

    def __init__(self, stack_group: int):
        self.eqns: list = []
        self.stack_group = max(2, stack_group)

    def emit(self, prim, inputs, **params):
        avals = [a.aval for a in inputs]
        out = prim.abstract_eval(*avals, **params)
        outs = tuple(Var(o) for o in out) if prim.multiple_results else (Var(out),)
        self.eqns.append(Eqn(prim, tuple(inputs), Params(params), outs))
        return outs if prim.multiple_results else outs[0]

    def row(self, x, t: int):
        """``x[t]`` for a static ``t``: a static slice of one row, reshaped to drop the axis."""
        shape = x.aval.shape
        start = (t,) + (0,) * (len(shape) - 1)
        limit = (t + 1,) + tuple(shape[1:])
        piece = self.emit(P.slice_p, [x], start_indices=start, limit_indices=limit, strides=(1,) * len(shape))
        return self.emit(P.reshape, [piece], new_sizes=tuple(shape[1:]))

    def stack(self, items, aval: ShapedArray):
        """``items`` (each of ``aval``) stacked along a new leading axis."""
        if not items:
            zero = Literal(np.zeros((), aval.dtype), ShapedArray((), aval.dtype))
            return self.emit(P.broadcast_in_dim, [zero], shape=(0,) + aval.shape, broadcast_dimensions=())
        dims = tuple(range(1, 1 + len(aval.shape)))
        level = [self.emit(P.broadcast_in_dim, [x], shape=(1,) + aval.shape, broadcast_dimensions=dims)
                 for x in items]
        while len(level) > 1:
            g = self.stack_group
            level = [chunk[0] if len(chunk) == 1 else self.emit(P.concatenate, chunk, dimension=0)
                     for chunk in (level[i:i + g] for i in range(0, len(level), g))]
        return level[0]


_SUB_PROGRAMS = {P.scan: ("program",), P.cond: ("branches",), P.while_p: ("cond_program", "body_program")}


def _inline_calls_in(e: Eqn, ins) -> dict:
    """The params of a kept control-flow equation, its sub-programs made straight-line (calls inlined)."""
    params = dict(e.params)
    for key in _SUB_PROGRAMS[e.primitive]:
        v = params[key]
        params[key] = tuple(straight_line(b, keep_control=True) for b in v) if isinstance(v, tuple) else \
            straight_line(v, keep_control=True)
    return params


def straight_line(program: Program, stack_group: int = 7, *, keep_control: bool = False) -> Program:
    """``program`` with calls inlined, scans unrolled and literal conds resolved (same constvars, invars).

    Args:
      program: a traced program (constvars, invars, equations, outputs).
      stack_group: the most operands of one ``concatenate`` that stacks a scan's outputs
        (one less than the target's storage buffers per kernel).
      keep_control: keep ``scan``, ``cond`` and ``while`` (their sub-programs with calls
        inlined) for a target that has loops and conditionals of its own.
    Returns: a ``Program`` without ``call``/``remat``/custom calls, and (unless ``keep_control``)
      without ``scan`` or ``cond``.
    Raises: ``UnsupportedOnDevice`` for a ``while`` or a ``cond`` on a computed index
      (unless ``keep_control``).
    """
    b = _Builder(stack_group)
    env: dict = {}

    def read(a):
        return env.get(a, a) if isinstance(a, Var) else a

    def run(eqns, env):
        for e in eqns:
            ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.inputs]
            prim = e.primitive
            if prim in _CALLS:
                outs = _inline(e.params[_CALLS[prim]], ins)
            elif keep_control and prim in _SUB_PROGRAMS:
                outs = list(b.emit(prim, ins, **_inline_calls_in(e, ins)))
            elif prim is P.scan:
                outs = _unroll(e, ins)
            elif prim is P.cond:
                index = ins[0]
                if not isinstance(index, Literal):
                    raise UnsupportedOnDevice(f"fnarray.export: cond cannot run in the browser: {_COND_HINT}.")
                branches = e.params["branches"]
                k = int(np.clip(int(index.val), 0, len(branches) - 1))
                outs = _inline(branches[k], ins[1:])
            elif prim is P.while_p:
                raise UnsupportedOnDevice(f"fnarray.export: while cannot run in the browser: {_WHILE_HINT}.")
            else:
                outs = [b.emit(prim, ins, **dict(e.params))] if not prim.multiple_results else \
                    list(b.emit(prim, ins, **dict(e.params)))
            for o, n in zip(e.outputs, outs, strict=True):
                env[o] = n

    def _inline(body, ins):
        inner = dict(zip(body.invars, ins, strict=True))
        run(body.eqns, inner)
        return [inner.get(r, r) if isinstance(r, Var) else r for r in body.outvars]

    def _unroll(e, ins):
        nc, nk, length = e.params["num_consts"], e.params["num_carry"], e.params["length"]
        body = e.params["program"]
        consts, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
        ys_avals = body.out_avals[nk:]
        ys = [[None] * length for _ in ys_avals]
        order = range(length - 1, -1, -1) if e.params["reverse"] else range(length)
        for t in order:
            rows = [b.row(x, t) for x in xs]
            outs = _inline(body, list(consts) + list(carry) + rows)
            carry = outs[:nk]
            for j, y in enumerate(outs[nk:]):
                ys[j][t] = y
        return list(carry) + [b.stack(col, aval) for col, aval in zip(ys, ys_avals, strict=True)]

    run(program.eqns, env)
    return Program(program.constvars, program.invars, b.eqns, [read(a) for a in program.outvars])
