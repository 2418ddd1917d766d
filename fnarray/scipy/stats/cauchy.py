"""The Cauchy distribution (mirrors ``jax.scipy.stats.cauchy``; ``scipy.stats.cauchy``).

Density ``1 / (pi scale (1 + z**2))``, ``z = (x - loc) / scale``.
Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers);
NaN where ``scale`` is not positive, as SciPy.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import math

from fnarray.scipy._util import floats, positive_scale
from fnarray.scipy._util import log1p as _log1p

__all__ = ["cdf", "isf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def logpdf(x, loc=0, scale=1):
    """``-log(pi) - log(scale) - log1p(z**2)``."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("cauchy.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return positive_scale(-math.log(math.pi) - fnp.log(scale) - _log1p(z * z), scale)


def pdf(x, loc=0, scale=1):
    """The Cauchy density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``1/2 + arctan(z) / pi``."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("cauchy.cdf", x, loc, scale)
    return positive_scale(0.5 + fnp.arctan((x - loc) / scale) / math.pi, scale)


def ppf(q, loc=0, scale=1):
    """``loc + scale tan(pi (q - 1/2))`` for ``q`` in ``[0, 1]`` (``-inf``/``inf`` at the ends), NaN outside."""
    import fnarray.numpy as fnp
    q, loc, scale = floats("cauchy.ppf", q, loc, scale)
    out = loc + scale * fnp.tan(math.pi * (q - 0.5))
    out = fnp.where(q == 0, -fnp.inf, fnp.where(q == 1, fnp.inf, out))
    return positive_scale(fnp.where((q < 0) | (q > 1), fnp.nan, out), scale)


def logcdf(x, loc=0, scale=1):
    """``log(cdf)``."""
    import fnarray.numpy as fnp
    return fnp.log(cdf(x, loc, scale))


def sf(x, loc=0, scale=1):
    """``1 - cdf``, as the mirrored ``cdf(-x, -loc, scale)`` (no cancellation in the right tail)."""
    x, loc, scale = floats("cauchy.sf", x, loc, scale)
    return cdf(-x, -loc, scale)


def logsf(x, loc=0, scale=1):
    """``log(sf)``."""
    x, loc, scale = floats("cauchy.logsf", x, loc, scale)
    return logcdf(-x, -loc, scale)


def isf(q, loc=0, scale=1):
    """The inverse of ``sf``: ``loc + scale / tan(pi q)`` below 1/2 and ``loc - scale / tan(pi (1 - q))`` above
    (the cotangent, exact near both ends where JAX's ``tan(pi/2 - pi q)`` loses digits); ``inf`` at 0, ``-inf`` at
    1, NaN outside ``[0, 1]``."""
    import fnarray.numpy as fnp
    q, loc, scale = floats("cauchy.isf", q, loc, scale)
    low = q < 0.5
    cot = 1 / fnp.tan(math.pi * fnp.where(low, q, 1 - q))
    out = loc + scale * fnp.where(low, cot, -cot)
    return positive_scale(fnp.where((q < 0) | (q > 1), fnp.nan, out), scale)
