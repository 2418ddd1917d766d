"""The normal distribution (mirrors ``jax.scipy.stats.norm``; ``scipy.stats.norm``).

Every function takes ``loc`` (the mean) and ``scale`` (the standard deviation), broadcast with its first
argument; the result has the broadcast shape and the promoted floating dtype (``float32`` for integers).
The tails use ``log_ndtr`` and ``ndtri``, accurate in float32 far out (``logcdf(-40) = -804.6``).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import math

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["cdf", "isf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _z(name, x, loc, scale):
    x, loc, scale = floats(name, x, loc, scale)
    return (x - loc) / scale, loc, scale


def logpdf(x, loc=0, scale=1):
    """``log`` of the normal density ``exp(-z**2 / 2) / (scale sqrt(2 pi))``, ``z = (x - loc) / scale``."""
    import fnarray.numpy as fnp
    z, _, scale = _z("norm.logpdf", x, loc, scale)
    return -0.5 * z * z - fnp.log(scale) - 0.5 * math.log(2 * math.pi)


def pdf(x, loc=0, scale=1):
    """The normal density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``P(X <= x) = ndtr((x - loc) / scale)``."""
    z, _, _ = _z("norm.cdf", x, loc, scale)
    return special.ndtr(z)


def logcdf(x, loc=0, scale=1):
    """``log P(X <= x) = log_ndtr((x - loc) / scale)``, accurate far in the lower tail."""
    z, _, _ = _z("norm.logcdf", x, loc, scale)
    return special.log_ndtr(z)


def sf(x, loc=0, scale=1):
    """The survival function ``P(X > x) = ndtr(-(x - loc) / scale)``."""
    z, _, _ = _z("norm.sf", x, loc, scale)
    return special.ndtr(-z)


def logsf(x, loc=0, scale=1):
    """``log P(X > x) = log_ndtr(-(x - loc) / scale)``."""
    z, _, _ = _z("norm.logsf", x, loc, scale)
    return special.log_ndtr(-z)


def ppf(q, loc=0, scale=1):
    """The quantile function, ``loc + scale * ndtri(q)`` (NaN outside ``[0, 1]``)."""
    q, loc, scale = floats("norm.ppf", q, loc, scale)
    return loc + scale * special.ndtri(q)


def isf(q, loc=0, scale=1):
    """The inverse survival function, ``loc - scale * ndtri(q)`` (accurate for small ``q``)."""
    q, loc, scale = floats("norm.isf", q, loc, scale)
    return loc - scale * special.ndtri(q)
