"""The jax backend's rules for the window primitives (``fnarray.core.windows``); registered into ``common.RULES``.

``reduce_window_{sum,max,min}`` are ``jax.lax.reduce_window`` with the monoid's identity (XLA's ReduceWindow;
float16/bfloat16 sums accumulate in float32, as the reference). The selections of the max/min gradients use
the tap formulation of ``window_taps`` rather than XLA's SelectAndScatter: it reproduces the reference's
rule for NaN (the first NaN of a window is selected) and takes integer operands and window dilation, which
XLA's and JAX's own ``select_and_scatter_add`` do not.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from fnarray.core import dtypes
from fnarray.core import windows as W
from fnarray.lowering import window_taps
from fnarray.lowering.jax.common import RULES

__all__: list = []

_WINDOW = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")


class _JaxOps:
    """The array functions ``window_taps`` needs, in JAX."""

    @staticmethod
    def pad(x, fill, config):
        return lax.pad(x, jnp.asarray(fill, x.dtype), [tuple(c) for c in config])

    where = staticmethod(jnp.where)
    isnan = staticmethod(jnp.isnan)
    maximum = staticmethod(lax.max)
    minimum = staticmethod(lax.min)

    @staticmethod
    def int_full(shape, value):
        return jnp.full(shape, value, jnp.int32)


def _reduce_window(op, computation):
    def f(x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
        d = np.dtype(x.dtype)
        acc = x.astype(jnp.float32) if d in (dtypes.float16, dtypes.bfloat16) and op == "add" else x
        init = jnp.asarray(window_taps.identity(op, d), acc.dtype)
        out = lax.reduce_window(acc, init, computation, window_dimensions, window_strides, padding,
                                base_dilation, window_dilation)
        return out.astype(x.dtype)
    return f


def _out_shape(shape, params):
    return W.window_out_shape("window", tuple(shape), **{k: params[k] for k in _WINDOW})


def _select_and_gather_add(t, x, *, select_prim, **window):
    out_shape = _out_shape(x.shape, window)
    if 0 in out_shape:
        return jnp.zeros(out_shape, t.dtype)
    return window_taps.select_and_gather_add(_JaxOps, t, x, np.dtype(x.dtype), select_prim, out_shape, window)


def _select_and_scatter_add(s, x, *, select_prim, **window):
    out_shape = _out_shape(x.shape, window)
    if 0 in out_shape or x.size == 0:
        return jnp.zeros(x.shape, s.dtype)
    return window_taps.select_and_scatter_add(_JaxOps, s, x, tuple(x.shape), np.dtype(x.dtype), select_prim,
                                              out_shape, window)


RULES[W.reduce_window_sum_p] = _reduce_window("add", lax.add)
RULES[W.reduce_window_max_p] = _reduce_window("max", lax.max)
RULES[W.reduce_window_min_p] = _reduce_window("min", lax.min)
RULES[W.select_and_gather_add_p] = _select_and_gather_add
RULES[W.select_and_scatter_add_p] = _select_and_scatter_add
