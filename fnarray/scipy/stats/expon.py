"""The exponential distribution (mirrors ``jax.scipy.stats.expon``; ``scipy.stats.expon``).

Density ``exp(-(x - loc) / scale) / scale`` for ``x >= loc``, 0 below.
Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers);
NaN where ``scale`` is not positive, as SciPy.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy._util import floats, positive_scale

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _z(name, x, loc, scale):
    x, loc, scale = floats(name, x, loc, scale)
    return (x - loc) / scale, scale


def logpdf(x, loc=0, scale=1):
    """``-z - log(scale)`` for ``z = (x - loc) / scale >= 0``, ``-inf`` below."""
    import fnarray.numpy as fnp
    z, scale = _z("expon.logpdf", x, loc, scale)
    return positive_scale(fnp.where(z < 0, -np.inf, -z - fnp.log(scale)), scale)


def pdf(x, loc=0, scale=1):
    """The exponential density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``1 - exp(-z)`` (by ``expm1``) for ``z >= 0``, 0 below."""
    import fnarray.numpy as fnp
    z, scale = _z("expon.cdf", x, loc, scale)
    return positive_scale(fnp.where(z < 0, 0.0, -fnp.expm1(-fnp.maximum(z, 0.0))), scale)


def logcdf(x, loc=0, scale=1):
    """``log(cdf)``: ``log(-expm1(-z))``, ``-inf`` at and below ``loc``."""
    import fnarray.numpy as fnp
    return fnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``1 - cdf``: ``exp(-z)`` for ``z >= 0``, 1 below."""
    import fnarray.numpy as fnp
    return fnp.exp(logsf(x, loc, scale))


def logsf(x, loc=0, scale=1):
    """``-z`` for ``z >= 0``, 0 below."""
    import fnarray.numpy as fnp
    z, scale = _z("expon.logsf", x, loc, scale)
    return positive_scale(fnp.where(z < 0, 0.0, -z), scale)


def ppf(q, loc=0, scale=1):
    """``loc - scale log1p(-q)`` for ``q`` in ``[0, 1]`` (``inf`` at 1), NaN outside."""
    import fnarray.numpy as fnp
    q, loc, scale = floats("expon.ppf", q, loc, scale)
    return positive_scale(fnp.where((q < 0) | (q > 1), fnp.nan, loc - scale * fnp.log1p(-q)), scale)
