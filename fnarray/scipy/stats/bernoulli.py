"""The Bernoulli distribution (mirrors ``jax.scipy.stats.bernoulli``; ``scipy.stats.bernoulli``).

``k`` (0 or 1) and the probability ``p``; arguments broadcast together; the result has the promoted floating
dtype (``float32`` for integers and bools).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["cdf", "logpmf", "pmf", "ppf"]


def logpmf(k, p, loc=0):
    """``log p`` at ``k - loc = 1``, ``log1p(-p)`` at 0, ``-inf`` elsewhere."""
    import fnarray.numpy as fnp
    k, p, loc = floats("bernoulli.logpmf", k, p, loc)
    k = k - loc
    out = special.xlogy(k, p) + special.xlog1py(1.0 - k, -p)
    return fnp.where((k == 0) | (k == 1), out, -np.inf)


def pmf(k, p, loc=0):
    """The probability of ``k``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, p, loc))


def cdf(k, p):
    """``P(K <= k)``: 0 below 0, ``1 - p`` on ``[0, 1)``, 1 from 1 (NaN for ``p`` outside ``[0, 1]``)."""
    import fnarray.numpy as fnp
    k, p = floats("bernoulli.cdf", k, p)
    out = fnp.where(k < 0, 0.0, fnp.where(k < 1, 1.0 - p, 1.0))
    return fnp.where((p < 0) | (p > 1) | fnp.isnan(k), np.nan, out)


def ppf(q, p):
    """The smallest ``k`` with ``cdf(k) >= q`` (SciPy's: -1 at ``q = 0``); NaN outside ``[0, 1]``."""
    import fnarray.numpy as fnp
    q, p = floats("bernoulli.ppf", q, p)
    out = fnp.where(q == 0, -1.0, fnp.where(q <= 1.0 - p, 0.0, 1.0)).astype(q.dtype)
    return fnp.where((p < 0) | (p > 1) | (q < 0) | (q > 1) | fnp.isnan(q), np.nan, out)
