"""The Poisson distribution (mirrors ``jax.scipy.stats.poisson``; ``scipy.stats.poisson``).

``k`` (a count) and the rate ``mu``; arguments broadcast together; the result has the promoted floating
dtype (``float32`` for integers).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import lax
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["cdf", "logpmf", "pmf"]


def logpmf(k, mu, loc=0):
    """``xlogy(k, mu) - lgamma(k + 1) - mu`` at ``k - loc`` a non-negative integer, ``-inf`` elsewhere."""
    import fnarray.numpy as fnp
    k, mu, loc = floats("poisson.logpmf", k, mu, loc)
    k = k - loc
    valid = (k >= 0) & (k == fnp.floor(k))
    ks = fnp.where(valid, k, 0.0)
    out = special.xlogy(ks, mu) - lax.lgamma(ks + 1.0) - mu
    return fnp.where(valid, out, -np.inf)


def pmf(k, mu, loc=0):
    """The probability of ``k``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, mu, loc))


def cdf(k, mu, loc=0):
    """``P(K <= k) = gammaincc(floor(k - loc) + 1, mu)``; 0 below 0."""
    import fnarray.numpy as fnp
    k, mu, loc = floats("poisson.cdf", k, mu, loc)
    k = fnp.floor(k - loc)
    ks = fnp.maximum(k, 0.0)
    return fnp.where(k < 0, 0.0, special.gammaincc(ks + 1.0, mu))
