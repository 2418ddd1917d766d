"""The geometric distribution on ``{1, 2, ...}`` (mirrors ``jax.scipy.stats.geom``; ``scipy.stats.geom``).

Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpmf", "pmf"]


def logpmf(k, p, loc=0):
    """``xlog1py(k - loc - 1, -p) + log(p)`` for ``k - loc >= 1``, ``-inf`` below and at non-integral
    ``k - loc`` (SciPy's rule; JAX evaluates the formula there)."""
    import fnarray.numpy as fnp
    k, p, loc = floats("geom.logpmf", k, p, loc)
    x = k - loc
    return fnp.where((x <= 0) | (fnp.floor(x) < x), -np.inf, special.xlog1py(x - 1, -p) + fnp.log(p))


def pmf(k, p, loc=0):
    """The probability of ``k``: ``exp(logpmf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, p, loc))
