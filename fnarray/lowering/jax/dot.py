"""The jax backend's rule for ``dot_general`` (bool as int32, float16/bfloat16 accumulated in float32, int4 widened
to a wider ``preferred_element_type`` first)."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.jax.common import lax, rule


@rule(P.dot_general)
def _dot_general(x, y, *, dimension_numbers, preferred_element_type=None):
    if x.dtype == np.bool_:
        r = lax.dot_general(x.astype(np.int32), y.astype(np.int32), dimension_numbers)
        return r > 0
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        r = lax.dot_general(x, y, dimension_numbers, preferred_element_type=np.float32)
        return r.astype(preferred_element_type or x.dtype)
    if x.dtype in (dtypes.int4, dtypes.uint4) and preferred_element_type not in (None, x.dtype):
        # XLA's CPU backend refuses an int4 dot with a wider result: widen the operands first (exact)
        x, y = (lax.convert_element_type(v, preferred_element_type) for v in (x, y))
    return lax.dot_general(x, y, dimension_numbers, preferred_element_type=preferred_element_type)


def fold_transposes(prog):
    """``prog`` with each ``dot_general`` reading a ``transpose``'s output reading the transpose's input instead,
    the permutation moved into its dimension numbers (where the free axes keep their order, so the output is
    the same). ``x @ w.T`` then reaches XLA as one ``dot_general`` contracting ``w``'s last axis (as
    ``jnp.einsum('...d,od->...o')``), which XLA CPU runs as its library product; as a ``transpose`` feeding a
    ``dot`` it fused both into one loop, single-threaded for a one-row product (``examples/llm.py``'s float32
    decode step at width 1024: 1.5-1.9x raw JAX's einsum). Sub-programs are left as they are.
    """
    from fnarray.core.ir import Eqn, Program, Var
    from fnarray.core.passes import dce
    made = {}   # transpose output var -> (its input, permutation)
    eqns, changed = [], False
    for e in prog.eqns:
        if e.primitive is P.transpose:
            made[e.outputs[0]] = (e.inputs[0], tuple(e.params["permutation"]))
        elif e.primitive is P.dot_general:
            (lc, rc), (lb, rb) = e.params["dimension_numbers"]
            ins, dims = list(e.inputs), [[lc, lb], [rc, rb]]
            for side, a in enumerate(e.inputs):
                src = made.get(a) if isinstance(a, Var) else None
                if src is None:
                    continue
                base, perm = src
                contract, batch = dims[side]
                free = [i for i in range(len(perm)) if i not in contract and i not in batch]
                moved = [perm[i] for i in free]
                if moved != sorted(moved):
                    continue   # the free axes would come out in another order
                ins[side] = base
                dims[side] = [tuple(perm[i] for i in contract), tuple(perm[i] for i in batch)]
            if ins != list(e.inputs):
                (lc, lb), (rc, rb) = dims
                e = Eqn(e.primitive, tuple(ins), e.params.replace(dimension_numbers=((lc, rc), (lb, rb))),
                        e.outputs)
                changed = True
        eqns.append(e)
    if not changed:
        return prog
    return dce(Program(prog.constvars, prog.invars, eqns, prog.outvars))[0]
