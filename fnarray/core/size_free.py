"""A program's key up to the sizes of its dimensions: two programs of one key are the same program at other sizes.

A decode step jitted at a cache of 5 rows and at one of 6 traces to two programs that differ only in their
dimension sizes (``f32[5,64]`` against ``f32[6,64]``, a ``broadcast_in_dim`` to ``(1, 6)`` against ``(1, 7)``).
``size_free_key`` writes a program with each size of 2 or more replaced by a symbol numbered in order of first
appearance (0 and 1 kept as they are: a pass treats them apart), so two programs get one key exactly where a
renaming of sizes maps one onto the other and keeps every equality and inequality between sizes: whatever a
pass or a lowering decides from comparing sizes with each other or with 0 and 1 it decides alike for both.
The shape parameters that restate their output's shape (``reshape``'s ``new_sizes``, ``broadcast_in_dim``'s
``shape``) are renamed as the avals are; every other parameter and every literal is kept exactly (a mean over a
growing axis divides by a literal that changes with it: a new key). ``jit`` uses the key to hand a new shape's
program the executable of an earlier one where that executable says it serves every size
(``shape_free``: ``devices/partition.py``).
"""

from __future__ import annotations

from fnarray.core import primitives as P
from fnarray.core.ir import Literal, Program
from fnarray.core.passes import param_key
from fnarray.core.subprograms import subprograms

__all__ = ["size_free_key"]

#: primitive -> the parameter that restates its output's shape (renamed with the sizes; ``jit(shapeless=True)``
#: renames the same: ``transforms/shapeless_jit.py``)
SHAPE_PARAMS = _SHAPE_PARAMS = {P.reshape: "new_sizes", P.broadcast_in_dim: "shape"}


def size_free_key(prog: Program):
    """``prog``'s key up to a renaming of its dimension sizes (module docstring); ``None`` for a program with
    sub-programs (a ``call``, a loop: their sizes are not renamed here)."""
    # (one loop over the equations, no helper calls for variables already named: jit keys each new length's
    # program of a growing loop with it, issue 28)
    sizes: dict = {}
    names: dict = {}
    shapes: dict = {}   # shape -> its renamed form (a program's values share few shapes)

    def dims(shape):
        got = shapes.get(shape)
        if got is None:
            # sizes of 2 or more as -1, -2, ... in order of first appearance (never equal to a size)
            got = shapes[shape] = tuple([d if d < 2 else sizes.setdefault(d, -1 - len(sizes)) for d in shape])
        return got

    def var(v):
        a = v.aval
        n = names[v] = (len(names), a.dtype, a.weak_type, dims(a.shape))
        return n

    ins = tuple([var(v) for v in prog.constvars] + [var(v) for v in prog.invars])
    eqns = []
    for e in prog.eqns:
        if subprograms(e):
            return None
        shape_param = _SHAPE_PARAMS.get(e.primitive)
        params = tuple([(k, dims(v) if k == shape_param else param_key(v)) for k, v in e.params.items()])
        atoms = []
        for a in e.inputs:
            if type(a) is Literal:
                atoms.append(a)
            else:
                n = names.get(a)
                atoms.append(var(a) if n is None else n)
        eqns.append((e.primitive, tuple(atoms), params, tuple([var(o) for o in e.outputs])))
    outs = tuple([a if type(a) is Literal else names.get(a) or var(a) for a in prog.outvars])
    return ins, tuple(eqns), outs
