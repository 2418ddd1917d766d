"""The multinomial distribution (mirrors ``jax.scipy.stats.multinomial``; ``scipy.stats.multinomial``).

Counts ``x`` along the last axis, ``n`` trials, probabilities ``p`` along the last axis; batch axes broadcast.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: ``x`` or ``n`` is not an integer array (as JAX: counts must be integers), or ``p`` is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpmf", "pmf"]


def logpmf(x, n, p):
    """``lgamma(n + 1) + sum(xlogy(x, p) - lgamma(x + 1))`` over the last axis where the counts sum to ``n``,
    ``-inf`` elsewhere (per batch element; JAX compares the sum of the whole ``x``). The result has ``p``'s
    floating dtype and the batch shape."""
    import fnarray.numpy as fnp
    (p,) = floats("multinomial.logpmf", p)
    x, n = fnp.asarray(x), fnp.asarray(n)
    if not (dtypes.is_int(x.dtype) and dtypes.is_int(n.dtype)):
        raise DTypeError(f"multinomial.logpmf needs integer counts x and n, got x.dtype={x.dtype.name}, "
                         f"n.dtype={n.dtype.name}; pass integer arrays (x.astype(int))")
    x, n = x.astype(p.dtype), n.astype(p.dtype)
    out = lax.lgamma(n + 1) + fnp.sum(special.xlogy(x, p) - lax.lgamma(x + 1), axis=-1)
    return fnp.where(fnp.sum(x, axis=-1) == n, out, -np.inf)


def pmf(x, n, p):
    """The probability of the counts ``x``: ``exp(logpmf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(x, n, p))
