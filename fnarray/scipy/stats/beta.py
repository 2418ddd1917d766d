"""The beta distribution (mirrors ``jax.scipy.stats.beta``; ``scipy.stats.beta``): densities and
distribution functions (by ``fnarray.scipy.special.betainc``).

Shapes ``a``, ``b``, ``loc`` and ``scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers). Outside ``[loc, loc + scale]`` the density is 0; the ``cdf`` is
0 below ``loc`` and 1 above ``loc + scale``.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats
from fnarray.scipy._util import log1p as _log1p

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def logpdf(x, a, b, loc=0, scale=1):
    """``xlogy(a - 1, y) + xlog1py(b - 1, -y) - betaln(a, b) - log(scale)``, ``y = (x - loc) / scale``;
    ``-inf`` outside ``[0, 1]``."""
    import fnarray.numpy as fnp
    x, a, b, loc, scale = floats("beta.logpdf", x, a, b, loc, scale)
    y = (x - loc) / scale
    outside = (y < 0) | (y > 1)
    ys = fnp.where(outside, 0.5, y)
    out = special.xlogy(a - 1.0, ys) + special.xlog1py(b - 1.0, -ys) - special.betaln(a, b) - fnp.log(scale)
    return fnp.where(outside, -np.inf, out)


def pdf(x, a, b, loc=0, scale=1):
    """The beta density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, a, b, loc, scale))


def _y(name, x, a, b, loc, scale):
    import fnarray.numpy as fnp
    x, a, b, loc, scale = floats(name, x, a, b, loc, scale)
    return fnp.clip((x - loc) / scale, 0.0, 1.0), a, b


def cdf(x, a, b, loc=0, scale=1):
    """``P(X <= x) = betainc(a, b, y)``, ``y = clip((x - loc) / scale, 0, 1)``."""
    y, a, b = _y("beta.cdf", x, a, b, loc, scale)
    return special.betainc(a, b, y)


def sf(x, a, b, loc=0, scale=1):
    """``P(X > x) = betainc(b, a, 1 - y)``, accurate in the upper tail."""
    y, a, b = _y("beta.sf", x, a, b, loc, scale)
    return special.betainc(b, a, 1.0 - y)


def logcdf(x, a, b, loc=0, scale=1):
    """``log`` of ``cdf``: ``log(cdf)`` below 1/2, else ``log1p(-sf)`` (accurate as ``cdf`` nears 1)."""
    import fnarray.numpy as fnp
    p, q = cdf(x, a, b, loc, scale), sf(x, a, b, loc, scale)
    return fnp.where(p < 0.5, fnp.log(p), _log1p(-q))


def logsf(x, a, b, loc=0, scale=1):
    """``log`` of ``sf``: ``log(sf)`` below 1/2, else ``log1p(-cdf)``."""
    import fnarray.numpy as fnp
    p, q = cdf(x, a, b, loc, scale), sf(x, a, b, loc, scale)
    return fnp.where(q < 0.5, fnp.log(q), _log1p(-p))
