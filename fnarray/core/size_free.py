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
    sub-programs (a ``call``, a loop: their sizes are not renamed here).

    Each variable's type (dtype, weak type, renamed shape) is written once, where the program defines it (its
    constants and inputs, then each equation's outputs, in order), and each use names it by its number: the
    key of two programs is one exactly where the programs are one up to a renaming of sizes."""
    # (one loop over the equations, an equation's outputs renamed inline: jit keys each new length's program of a
    # growing loop with it, issue 28; a use is an int, so the key has ~2/3 the elements to make, hash and compare
    # of one that repeats the type at every use)
    sizes: dict = {}
    names: dict = {}    # variable -> its number
    shapes: dict = {}   # shape -> its renamed form (a program's values share few shapes)

    def dims(shape):
        # sizes of 2 or more as -1, -2, ... in order of first appearance (never equal to a size)
        got = shapes[shape] = tuple([d if d < 2 else sizes.setdefault(d, -1 - len(sizes)) for d in shape])
        return got

    def typed(v):
        a = v.aval
        return a.dtype, a.weak_type, shapes.get(a.shape) or dims(a.shape)

    def undefined(v):  # a variable that nothing defined (a malformed program): keyed by its type where first used
        n = names[v] = (len(names),) + typed(v)
        return n

    ins = []
    for v in (*prog.constvars, *prog.invars):
        names[v] = len(names)
        ins.append(typed(v))
    eqns = []
    shape_params = _SHAPE_PARAMS
    for e in prog.eqns:
        if subprograms(e):
            return None
        shape_param = shape_params.get(e.primitive)
        params = []
        for k, v in e.params.items():
            if k == shape_param:
                got = shapes.get(v)
                params.append((k, dims(v) if got is None else got))
            else:   # (``param_key``'s commonest cases inline, the same keys: a call a parameter less)
                t = type(v)
                if t is int:
                    params.append((k, ("int", v)))
                elif t is str or v is None:
                    params.append((k, v))
                else:
                    params.append((k, param_key(v)))
        atoms = []
        for a in e.inputs:
            if type(a) is Literal:
                atoms.append(a)
            else:
                n = names.get(a)
                atoms.append(undefined(a) if n is None else n)
        outs = []
        for o in e.outputs:
            av = o.aval
            got = shapes.get(av.shape)
            names[o] = len(names)
            outs.append((av.dtype, av.weak_type, dims(av.shape) if got is None else got))
        eqns.append((e.primitive, tuple(atoms), tuple(params), tuple(outs)))
    outs = []
    for a in prog.outvars:
        if type(a) is not Literal:
            n = names.get(a)
            a = undefined(a) if n is None else n
        outs.append(a)
    return tuple(ins), tuple(eqns), tuple(outs)
