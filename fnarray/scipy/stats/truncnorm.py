"""The truncated normal distribution (mirrors ``jax.scipy.stats.truncnorm``; ``scipy.stats.truncnorm``).

A normal of ``loc`` and ``scale`` restricted to ``[a, b]``, the bounds given in standard units (``(bound - loc) /
scale``), as SciPy. The log of the normal mass between the bounds is computed in the tail they lie in (``log_ndtr``
differences), so far tails keep their precision (JAX's ``_log_gauss_mass``). Arguments broadcast together; the
result has the promoted floating dtype (``float32`` for integers); NaN where ``a >= b``.

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats
from fnarray.scipy.stats import norm
from fnarray.scipy.stats.gumbel_r import _log1mexp

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "sf"]


def _log_diff(x, y):
    """``log(exp(x) - exp(y))`` for ``x >= y``; ``-inf`` where they are equal."""
    import fnarray.numpy as fnp
    return fnp.where(x == y, -np.inf, x + _log1mexp(x - y))


def _log_gauss_mass(a, b):
    """``log(Phi(b) - Phi(a))``: in the left tail for ``b <= 0``, mirrored for ``a > 0``, else ``log1p`` of the
    two tails' complement."""
    import fnarray.numpy as fnp
    right = a > 0
    lo, hi = fnp.where(right, -b, a), fnp.where(right, -a, b)
    tail = _log_diff(special.log_ndtr(hi), special.log_ndtr(lo))
    central = fnp.log1p(-special.ndtr(a) - special.ndtr(-b))
    return fnp.where((b <= 0) | right, tail, central)


def logpdf(x, a, b, loc=0, scale=1):
    """``norm.logpdf(x, loc, scale) - log(Phi(b) - Phi(a))`` inside ``[a, b]`` (standard units), ``-inf``
    outside."""
    import fnarray.numpy as fnp
    x, a, b, loc, scale = floats("truncnorm.logpdf", x, a, b, loc, scale)
    out = norm.logpdf(x, loc, scale) - _log_gauss_mass(a, b)
    z = (x - loc) / scale
    out = fnp.where((z < a) | (z > b), -np.inf, out)
    return fnp.where(a >= b, np.nan, out)


def pdf(x, a, b, loc=0, scale=1):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, a, b, loc, scale))


def logcdf(x, a, b, loc=0, scale=1):
    """``log((Phi(z) - Phi(a)) / (Phi(b) - Phi(a)))``; near 1 (above ``-0.1``) by ``log1p(-sf)``; 0 at and above
    ``b``, ``-inf`` at and below ``a``."""
    import fnarray.numpy as fnp
    x, a, b, loc, scale = floats("truncnorm.logcdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    mass = _log_gauss_mass(a, b)
    below = _log_gauss_mass(a, z) - mass
    above = _log_gauss_mass(z, b) - mass
    out = fnp.where(below > -0.1, fnp.log1p(-fnp.exp(above)), below)
    out = fnp.where(z >= b, 0.0, fnp.where(z <= a, -np.inf, out))
    return fnp.where(a >= b, np.nan, out)


def cdf(x, a, b, loc=0, scale=1):
    """``exp(logcdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logcdf(x, a, b, loc, scale))


def logsf(x, a, b, loc=0, scale=1):
    """``logcdf`` of the mirrored distribution: ``logcdf(-x, -b, -a, -loc, scale)``."""
    x, a, b, loc, scale = floats("truncnorm.logsf", x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


def sf(x, a, b, loc=0, scale=1):
    """``exp(logsf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logsf(x, a, b, loc, scale))
