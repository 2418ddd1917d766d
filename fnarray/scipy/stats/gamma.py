"""The gamma distribution (mirrors ``jax.scipy.stats.gamma``; ``scipy.stats.gamma``).

Shape ``a``, ``loc`` and ``scale``; arguments broadcast together; the result has the promoted floating
dtype (``float32`` for integers). Below ``loc`` the density is 0 (log-density ``-inf``).

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
from fnarray.scipy._util import log1p as _log1p

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x, a, loc=0, scale=1):
    """``xlogy(a - 1, y) - y - lgamma(a) - log(scale)``, ``y = (x - loc) / scale``; ``-inf`` for ``y < 0``."""
    import fnarray.numpy as fnp
    x, a, loc, scale = floats("gamma.logpdf", x, a, loc, scale)
    y = (x - loc) / scale
    ys = fnp.where(y < 0, 1.0, y)
    out = special.xlogy(a - 1.0, ys) - ys - lax.lgamma(a) - fnp.log(scale)
    return fnp.where(y < 0, -np.inf, out)


def pdf(x, a, loc=0, scale=1):
    """The gamma density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, a, loc, scale))


def _y(name, x, a, loc, scale):
    import fnarray.numpy as fnp
    x, a, loc, scale = floats(name, x, a, loc, scale)
    return fnp.maximum((x - loc) / scale, 0.0), a


def cdf(x, a, loc=0, scale=1):
    """``P(X <= x) = gammainc(a, y)``, ``y = max((x - loc) / scale, 0)``."""
    y, a = _y("gamma.cdf", x, a, loc, scale)
    return special.gammainc(a, y)


def logcdf(x, a, loc=0, scale=1):
    """``log`` of ``cdf``: ``log(cdf)`` below 1/2, else ``log1p(-sf)`` (accurate as ``cdf`` nears 1)."""
    import fnarray.numpy as fnp
    p, q = cdf(x, a, loc, scale), sf(x, a, loc, scale)
    return fnp.where(p < 0.5, fnp.log(p), _log1p(-q))


def sf(x, a, loc=0, scale=1):
    """``P(X > x) = gammaincc(a, y)``, accurate in the upper tail."""
    y, a = _y("gamma.sf", x, a, loc, scale)
    return special.gammaincc(a, y)


def logsf(x, a, loc=0, scale=1):
    """``log`` of ``sf``: ``log(sf)`` below 1/2, else ``log1p(-cdf)``."""
    import fnarray.numpy as fnp
    p, q = cdf(x, a, loc, scale), sf(x, a, loc, scale)
    return fnp.where(q < 0.5, fnp.log(q), _log1p(-p))
