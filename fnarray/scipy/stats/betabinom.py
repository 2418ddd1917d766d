"""The beta-binomial distribution (mirrors ``jax.scipy.stats.betabinom``; ``scipy.stats.betabinom``).

Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, a, b, loc=0):
    """``-log1p(n) - betaln(n - y + 1, y + 1) + betaln(y + a, n - y + b) - betaln(a, b)`` for
    ``y = k - loc`` a whole number in ``[0, n]`` (0 where ``y = n = 0``), ``-inf`` elsewhere (SciPy's support;
    JAX floors ``k``), NaN where ``n < 0``, ``a <= 0`` or ``b <= 0`` (JAX's rule)."""
    import fnarray.numpy as fnp
    k, n, a, b, loc = floats("betabinom.logpmf", k, n, a, b, loc)
    y = k - loc
    comb = -(fnp.log1p(n) + special.betaln(n - y + 1, y + 1))
    out = comb + (special.betaln(y + a, n - y + b) - special.betaln(a, b))
    out = fnp.where((y == 0) & (n == 0), 0.0, out)
    out = fnp.where((y < 0) | (y > n) | (fnp.floor(y) < y) | (y + a <= 0), -np.inf, out)
    return fnp.where((n < 0) | (a <= 0) | (b <= 0), np.nan, out)


def pmf(k, n, a, b, loc=0):
    """The probability of ``k``: ``exp(logpmf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, n, a, b, loc))
