"""Batching rules of the window primitives (``fnarray.core.windows``), in ``primitive_batchers``.

The batch axis becomes one more window dimension of extent 1, stride 1, no padding and no dilation, so each
example's windows stay within that example (as JAX's ``_reduce_window_batch_rule``). The two-operand
selections first bring both operands' batch axes to the front (broadcasting an unbatched one).
"""

from __future__ import annotations

from fnarray.core import lax
from fnarray.core import windows as W
from fnarray.core.avals import get_aval
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["window_params_with_axis"]


def window_params_with_axis(axis, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    """The window params with a trivial window inserted at ``axis``."""
    def ins(t, v):
        return t[:axis] + (v,) + t[axis:]
    return dict(window_dimensions=ins(window_dimensions, 1), window_strides=ins(window_strides, 1),
                padding=ins(padding, (0, 0)), base_dilation=ins(base_dilation, 1),
                window_dilation=ins(window_dilation, 1))


def _reduce_window_batch(prim):
    def rule(vals, dims, **window):
        (x,), (d,) = vals, dims
        return prim.bind(x, **window_params_with_axis(d, **window)), d
    rule.__name__ = f"{prim.name}_batch"
    return rule


def _to_front(x, d, size):
    shape = get_aval(x).shape
    if d is None:
        return lax.broadcast_in_dim(x, (size,) + shape, tuple(range(1, len(shape) + 1)))
    if d == 0:
        return x
    perm = [d] + [i for i in range(len(shape)) if i != d]
    return lax.transpose(x, perm)


def _select_batch(prim):
    def rule(vals, dims, *, select_prim, **window):
        size = next(get_aval(v).shape[d] for v, d in zip(vals, dims, strict=True) if d is not None)
        a, b = (_to_front(v, d, size) for v, d in zip(vals, dims, strict=True))
        return prim.bind(a, b, select_prim=select_prim, **window_params_with_axis(0, **window)), 0
    rule.__name__ = f"{prim.name}_batch"
    return rule


for _p in (W.reduce_window_sum_p, W.reduce_window_max_p, W.reduce_window_min_p):
    primitive_batchers[_p] = _reduce_window_batch(_p)
for _p in (W.select_and_gather_add_p, W.select_and_scatter_add_p):
    primitive_batchers[_p] = _select_batch(_p)
