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

__all__ = ["cdf", "entropy", "logpmf", "pmf"]


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


#: ``entropy`` sums ``-p log p`` over ``k < _ENTROPY_TERMS`` below ``_ENTROPY_SUM_BELOW`` (at ``mu = 100`` the
#: omitted tail starts 15 standard deviations out) and uses the asymptotic series above (within 1e-9 relative of
#: SciPy's sum at ``mu = 100``, closer beyond)
_ENTROPY_TERMS = 250
_ENTROPY_SUM_BELOW = 100.0


def entropy(mu, loc=0):
    """The entropy ``-sum p log p`` (mirrors ``jax.scipy.stats.poisson.entropy``): the sum over ``k < 250`` for
    ``mu < 100``, ``log(2 pi e mu) / 2 - 1/(12 mu) - 1/(24 mu**2) - 19/(360 mu**3)`` above (JAX's series to its
    first correction, SciPy's accuracy with the next two); 0 at ``mu = 0``, NaN for ``mu < 0`` (SciPy; JAX sums
    there). ``loc`` only broadcasts."""
    import fnarray.numpy as fnp
    mu, loc = floats("poisson.entropy", mu, loc)
    k = fnp.arange(_ENTROPY_TERMS, dtype=mu.dtype).reshape((_ENTROPY_TERMS,) + (1,) * mu.ndim)
    small = fnp.minimum(mu, _ENTROPY_SUM_BELOW)
    summed = fnp.sum(special.entr(pmf(k, small)), axis=0)
    big = fnp.maximum(mu, _ENTROPY_SUM_BELOW)
    series = (0.5 * fnp.log(2 * np.pi * np.e * big) - 1 / (12 * big) - 1 / (24 * big ** 2)
              - 19 / (360 * big ** 3))
    out = fnp.where(mu < _ENTROPY_SUM_BELOW, summed, series)
    return fnp.where(mu < 0, np.nan, fnp.where(mu == 0, 0.0, out))
