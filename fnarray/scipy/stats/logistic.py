"""The logistic distribution (mirrors ``jax.scipy.stats.logistic``; ``scipy.stats.logistic``).

Density ``exp(-z) / (scale (1 + exp(-z))**2)``, ``z = (x - loc) / scale``; the cdf is the sigmoid.
Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers);
NaN where ``scale`` is not positive, as SciPy.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

from fnarray.scipy import special
from fnarray.scipy._util import floats, positive_scale

__all__ = ["cdf", "isf", "logpdf", "pdf", "ppf", "sf"]


def _z(name, x, loc, scale):
    x, loc, scale = floats(name, x, loc, scale)
    return (x - loc) / scale, loc, scale


def logpdf(x, loc=0, scale=1):
    """``-|z| - 2 log1p(exp(-|z|)) - log(scale)`` (symmetric, so no overflow for large ``|z|``)."""
    import fnarray.numpy as fnp
    z, _, scale = _z("logistic.logpdf", x, loc, scale)
    a = fnp.abs(z)
    return positive_scale(-a - 2.0 * fnp.log1p(fnp.exp(-a)) - fnp.log(scale), scale)


def pdf(x, loc=0, scale=1):
    """The logistic density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``sigmoid(z)``."""
    z, _, scale = _z("logistic.cdf", x, loc, scale)
    return positive_scale(special.expit(z), scale)


def sf(x, loc=0, scale=1):
    """``sigmoid(-z)``."""
    z, _, scale = _z("logistic.sf", x, loc, scale)
    return positive_scale(special.expit(-z), scale)


def ppf(q, loc=0, scale=1):
    """``loc + scale logit(q)`` (``-inf``/``inf`` at 0 and 1, NaN outside ``[0, 1]``)."""
    q, loc, scale = floats("logistic.ppf", q, loc, scale)
    return positive_scale(loc + scale * special.logit(q), scale)


def isf(q, loc=0, scale=1):
    """``ppf(1 - q)``: ``loc - scale logit(q)``."""
    q, loc, scale = floats("logistic.isf", q, loc, scale)
    return positive_scale(loc - scale * special.logit(q), scale)
