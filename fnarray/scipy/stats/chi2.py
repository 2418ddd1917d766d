"""The chi-square distribution (mirrors ``jax.scipy.stats.chi2``; ``scipy.stats.chi2``).

``df`` degrees of freedom, ``loc`` and ``scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import lax
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x, df, loc=0, scale=1):
    """``xlogy(df/2 - 1, y) - y/2 - lgamma(df/2) - df log(2)/2 - log(scale)`` for ``y = (x - loc) / scale >= 0``,
    ``-inf`` below. At ``y = 0`` SciPy's limits (``-log 2`` for ``df = 2``, ``inf`` below, ``-inf`` above), where
    JAX's ``(df/2 - 1) log(y)`` gives NaN for ``df = 2``."""
    import fnarray.numpy as fnp
    x, df, loc, scale = floats("chi2.logpdf", x, df, loc, scale)
    y = (x - loc) / scale
    half = df / 2
    kernel = special.xlogy(half - 1, y) - y / 2
    norm = -(lax.lgamma(half) + df * (math.log(2.0) / 2))
    return fnp.where(x < loc, -np.inf, norm - fnp.log(scale) + kernel)


def pdf(x, df, loc=0, scale=1):
    """The chi-square density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, df, loc, scale))


def _half_y(name, x, df, loc, scale):
    import fnarray.numpy as fnp
    x, df, loc, scale = floats(name, x, df, loc, scale)
    return df / 2, fnp.clip((x - loc) / (scale * 2), 0, np.inf)


def cdf(x, df, loc=0, scale=1):
    """``gammainc(df/2, max(y, 0)/2)``."""
    return special.gammainc(*_half_y("chi2.cdf", x, df, loc, scale))


def logcdf(x, df, loc=0, scale=1):
    """``log(cdf)``."""
    import fnarray.numpy as fnp
    return fnp.log(cdf(x, df, loc, scale))


def sf(x, df, loc=0, scale=1):
    """``gammaincc(df/2, max(y, 0)/2)``: ``1 - cdf`` without cancellation."""
    return special.gammaincc(*_half_y("chi2.sf", x, df, loc, scale))


def logsf(x, df, loc=0, scale=1):
    """``log(sf)``."""
    import fnarray.numpy as fnp
    return fnp.log(sf(x, df, loc, scale))
