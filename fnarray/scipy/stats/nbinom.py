"""The negative binomial distribution: ``k`` failures before the ``n``-th success (mirrors
``jax.scipy.stats.nbinom``; ``scipy.stats.nbinom``).

Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import lax
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``lgamma(y + n) - lgamma(n) - lgamma(y + 1) + xlogy(n, p) + xlogy(y, 1 - p)`` for ``y = k - loc >= 0``,
    ``-inf`` below and at non-integral ``y`` (SciPy's rule; JAX evaluates the formula there)."""
    import fnarray.numpy as fnp
    k, n, p, loc = floats("nbinom.logpmf", k, n, p, loc)
    y = k - loc
    comb = lax.lgamma(y + n) - lax.lgamma(n) - lax.lgamma(y + 1)
    out = comb + (special.xlogy(n, p) + special.xlogy(y, 1 - p))
    return fnp.where((y < 0) | (fnp.floor(y) < y), -np.inf, out)


def pmf(k, n, p, loc=0):
    """The probability of ``k``: ``exp(logpmf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, n, p, loc))
