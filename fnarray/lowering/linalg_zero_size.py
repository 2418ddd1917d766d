"""Zero-size rewrites of the linear-algebra primitives (for ``fnarray.lowering.zero_size``).

A factorization of a matrix with no rows or no columns can still have non-empty results, as the numpy
reference gives them: ``lu``'s permutation is the identity ``arange(m)``; ``qr``'s and ``svd``'s square
factors (``q``, ``u``, ``vh``) are identity matrices; everything else is empty (or zero). They are written
here as equations that read nothing, so no backend ever receives the empty matrix.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import linalg as L
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Params, Var
from fnarray.core.shaped import ShapedArray

__all__ = ["register"]


def _iota(shape, dim):
    v = Var(ShapedArray(shape, dtypes.int32))
    return v, Eqn(P.iota, (), Params(dtype=dtypes.int32, shape=shape, dimension=dim), (v,))


def _identity(out: Var):
    """Equations defining ``out [..., p, q]`` as ``eye(p, q)`` broadcast over its batch."""
    *batch, p, q = out.aval.shape
    i, ei = _iota((p, q), 0)
    j, ej = _iota((p, q), 1)
    same = Var(ShapedArray((p, q), dtypes.bool_))
    eq = Eqn(P.eq, (i, j), Params(), (same,))
    val = Var(ShapedArray((p, q), out.aval.dtype))
    cv = Eqn(P.convert_element_type, (same,), Params(new_dtype=out.aval.dtype, weak_type=False), (val,))
    nb = len(batch)
    bc = Eqn(P.broadcast_in_dim, (val,), Params(shape=out.aval.shape, broadcast_dimensions=(nb, nb + 1)), (out,))
    return [ei, ej, eq, cv, bc]


def _arange(out: Var):
    *batch, m = out.aval.shape
    i, ei = _iota((m,), 0)
    nb = len(batch)
    return [ei, Eqn(P.broadcast_in_dim, (i,), Params(shape=out.aval.shape, broadcast_dimensions=(nb,)), (out,))]


def _define(outs, how, fill):
    """Equations for each output: ``how[k](out)`` for a non-empty one, ``fill(out)`` otherwise."""
    eqns = []
    for k, o in enumerate(outs):
        if o.aval.size == 0:
            eqns.append(fill(o))
        else:
            eqns.extend(how[k](o) if how[k] is not None else [fill(o)])
    return eqns, {}


def register(rewrites: dict, fill) -> None:
    """Add the rewrites to ``zero_size.REWRITES`` (``fill(out)`` defines ``out`` as zeros)."""
    rewrites[L.lu_p] = lambda e: _define(e.outputs, (None, None, _arange), fill)
    rewrites[L.qr_p] = lambda e: _define(e.outputs, (_identity, None), fill)
    rewrites[L.svd_p] = lambda e: _define(e.outputs, (None, _identity, _identity), fill)
