"""The binomial distribution (mirrors ``jax.scipy.stats.binom``; ``scipy.stats.binom``).

``k`` successes in ``n`` trials of probability ``p``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers). Outside ``loc <= k <= loc + n`` and at non-integral
``k - loc`` the log-probability is ``-inf`` (SciPy's rule, as ``poisson``; JAX evaluates its ``gammaln`` formula
there); a non-integral ``n`` goes through ``gammaln`` as in JAX (SciPy answers NaN).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import lax
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpmf", "pmf"]


def logpmf(k, n, p, loc=0):
    """``log C(n, y) + xlogy(y, p) + xlog1py(n - y, -p)`` for ``y = k - loc`` in ``[0, n]``, ``-inf`` outside;
    0 where ``y = n = 0`` or where the linear term is exactly 0 (``p`` of 0 or 1 at the matching end), as JAX."""
    import fnarray.numpy as fnp
    k, n, p, loc = floats("binom.logpmf", k, n, p, loc)
    y = k - loc
    comb = lax.lgamma(n + 1) - (lax.lgamma(y + 1) + lax.lgamma(n - y + 1))
    linear = special.xlogy(y, p) + special.xlog1py(n - y, -p)
    out = fnp.where(((y == 0) & (n == 0)) | (linear == 0), 0.0, comb + linear)
    return fnp.where((k < loc) | (k >= loc + n + 1) | (fnp.floor(y) < y), -np.inf, out)


def pmf(k, n, p, loc=0):
    """The probability of ``k``: ``exp(logpmf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpmf(k, n, p, loc))
