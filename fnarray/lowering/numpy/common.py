"""NumPy implementations of every primitive: the reference semantics. This module holds the table and the
registration helpers; the implementations are in one module per primitive family (``FAMILIES`` of ``backend.py``).

``IMPLS[primitive](params, in_avals, out_avals)`` returns a callable over NumPy
arrays. These rules define what every other backend reproduces (docs/design.md,
"The numpy backend defines the semantics"): integer division and remainder by
zero give 0, shifts past the bit width give 0 (or -1), float-to-int casts
saturate with NaN -> 0, gathers clamp and scatters drop out-of-bounds indices,
NaN sorts last and propagates through max/min.
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray.core import dtypes


__all__ = ["IMPLS", "LOW", "direct", "with_params", "factory", "upcast", "pyfunc"]

IMPLS: dict = {}


def direct(prim, fn):
    """Register the elementwise ``fn(*arrays)`` (its ``plain`` form, if any, for dtypes outside ``LOW``)."""
    plain = getattr(fn, "plain", None)
    if plain is None:
        IMPLS[prim] = lambda params, in_avals, out_avals: fn
    else:
        # Dispatch on the dtype once, when the equation is compiled, not on every call.
        IMPLS[prim] = lambda params, in_avals, out_avals: fn if in_avals[0].dtype in LOW else plain


def with_params(prim):
    """Register ``fn(*args, **params)``; params are bound once per compiled equation."""
    def deco(fn):
        IMPLS[prim] = lambda params, in_avals, out_avals: functools.partial(fn, **params) if params else fn
        return fn
    return deco


def factory(prim):
    """Register ``factory(params, in_avals, out_avals) -> callable``."""
    def deco(fn):
        IMPLS[prim] = fn
        return fn
    return deco


#: the dtypes computed in float32 and cast back (as XLA on the CPU); the float8 dtypes too, so that each
#: operation rounds once (ml_dtypes' own float8 ufuncs chain float8 roundings: rsqrt is 1/sqrt in float8)
LOW = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)


def upcast(fn):
    """Compute in float32 for float16/bfloat16/float8 (what XLA does on the CPU), casting back."""
    def f(x):
        if x.dtype in LOW:
            return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
        return fn(x)
    f.plain = fn
    return f


def pyfunc(fn):
    """Elementwise through a Python math function, in float64."""
    uf = np.frompyfunc(fn, 1, 1)

    def f(x):
        return np.asarray(uf(np.asarray(x, np.float64)), dtype=np.float64).astype(x.dtype)
    return f
