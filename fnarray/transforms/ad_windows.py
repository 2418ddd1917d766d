"""JVP and transpose rules of the window primitives (``fnarray.core.windows``), in the tables of ``ad_tables``.

- ``reduce_window_sum`` is linear; its transpose spreads each cotangent over the operand elements of its
  window: the cotangent, dilated by the strides and padded so that every window position lines up, summed
  over windows of the same size with ``base_dilation`` as the stride (the correlation with a window of ones,
  which is its own flip). This is the construction of JAX's ``_reduce_window_sum_transpose_rule``.
- ``reduce_window_max``/``_min``: the tangent of the window's *first* maximal (minimal) element
  (``select_and_gather_add``, as JAX's JVP), not the even split of ``reduce_max``: max pooling's gradient
  goes to one element per window, as in XLA.
- ``select_and_gather_add`` and ``select_and_scatter_add`` are linear in their first argument and constant
  in the operand (the selection is piecewise constant), each the other's transpose, so every order of
  derivative stays within these primitives.
"""

from __future__ import annotations

from fnarray.core import lax
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.core.avals import get_aval
from fnarray.transforms.ad_tables import (Zero, defjvp, deflinear, instantiate_zeros, is_undefined, primitive_jvps,
                                          primitive_transposes, tangent_aval)

__all__ = ["reduce_window_sum_transpose"]


def _zeros(aval):
    return lax.full(aval.shape, 0, aval.dtype)


def reduce_window_sum_transpose(ct, x, *, window_dimensions, window_strides, padding, base_dilation,
                                window_dilation):
    aval = x.aval
    if isinstance(ct, Zero):
        return [Zero(aval)]
    ct_aval = get_aval(ct)
    if aval.size == 0 or ct_aval.size == 0:
        return [_zeros(aval)]
    config = []
    for n, w, s, (lo, _), bd, wd, m in zip(aval.shape, window_dimensions, window_strides, padding, base_dilation,
                                           window_dilation, ct_aval.shape, strict=True):
        window = W.dilate_dim(w, wd)
        before = window - 1 - lo  # the first window starts lo elements before the operand
        after = W.dilate_dim(n, bd) + window - 1 - W.dilate_dim(m, s) - before
        config.append((before, after, s - 1))
    spread = lax.pad(ct, lax.full((), 0, ct_aval.dtype), config)
    rank = len(aval.shape)
    return [W.reduce_window_sum_p.bind(spread, window_dimensions=window_dimensions, window_strides=base_dilation,
                                       padding=((0, 0),) * rank, base_dilation=(1,) * rank,
                                       window_dilation=window_dilation)]


deflinear(W.reduce_window_sum_p, reduce_window_sum_transpose)


def _chooser_jvp(select_prim):
    def jvp(t, out, x, **window):
        return W.select_and_gather_add_p.bind(t, x, select_prim=select_prim, **window)
    return jvp


defjvp(W.reduce_window_max_p, _chooser_jvp(P.ge))
defjvp(W.reduce_window_min_p, _chooser_jvp(P.le))


def _linear_in_first(prim):
    """JVP of a primitive linear in its first argument and constant in its second (the operand)."""
    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        t = tangents[0]
        if isinstance(t, Zero):
            return out, Zero(tangent_aval(get_aval(out)))
        return out, prim.bind(instantiate_zeros(t), primals[1], **params)
    jvp.__name__ = f"{prim.name}_jvp"
    return jvp


def _transpose_to(other, name):
    def transpose(ct, first, operand, **params):
        if is_undefined(operand):
            raise TypeError(f"{name} is linear only in its first argument; its operand cannot be a linear input "
                            f"of a transposition")
        if isinstance(ct, Zero):
            return [Zero(first.aval), None]
        return [other.bind(ct, operand, **params), None]
    transpose.__name__ = f"{name}_transpose"
    return transpose


primitive_jvps[W.select_and_gather_add_p] = _linear_in_first(W.select_and_gather_add_p)
primitive_jvps[W.select_and_scatter_add_p] = _linear_in_first(W.select_and_scatter_add_p)
primitive_transposes[W.select_and_gather_add_p] = _transpose_to(W.select_and_scatter_add_p, "select_and_gather_add")
primitive_transposes[W.select_and_scatter_add_p] = _transpose_to(W.select_and_gather_add_p, "select_and_scatter_add")
