"""The Dirichlet distribution (mirrors ``jax.scipy.stats.dirichlet``; ``scipy.stats.dirichlet``).

``alpha`` is one-dimensional, ``(K,)``; ``x`` has the categories on its *first* axis (SciPy's convention), ``K``
of them or ``K - 1`` (the last is then ``1 - sum``), any further axes a batch. Points off the open simplex (an entry
not positive, or a sum more than 1e-6 from 1) get ``-inf``.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: ``alpha`` is not one-dimensional, or ``x``'s first axis is neither ``K`` nor ``K - 1`` long.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import lax
from fnarray.core.errors import ShapeError
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpdf", "pdf"]


def logpdf(x, alpha):
    """``sum(xlogy(alpha - 1, x)) - (sum(lgamma(alpha)) - lgamma(sum(alpha)))`` over the first axis; the result
    has ``x``'s batch shape (``x.shape[1:]``)."""
    import fnarray.numpy as fnp
    x, alpha = floats("dirichlet.logpdf", x, alpha, shape=False)
    if alpha.ndim != 1:
        raise ShapeError(f"dirichlet: alpha must be one-dimensional, got shape {alpha.shape}")
    k = alpha.shape[0]
    if x.ndim == 0 or x.shape[0] not in (k, k - 1):
        raise ShapeError(f"dirichlet: x's first axis must have {k} or {k - 1} entries (alpha has {k}), got x of "
                         f"shape {x.shape}")
    if x.shape[0] != k:
        x = fnp.concatenate([x, 1 - fnp.sum(x, axis=0, keepdims=True)], axis=0)
    norm = fnp.sum(lax.lgamma(alpha)) - lax.lgamma(fnp.sum(alpha))
    alpha = fnp.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
    out = fnp.sum(special.xlogy(alpha - 1, x), axis=0) - norm
    simplex = fnp.all(x > 0, axis=0) & (fnp.abs(fnp.sum(x, axis=0) - 1) < 1e-6)
    return fnp.where(simplex, out, -np.inf)


def pdf(x, alpha):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, alpha))
