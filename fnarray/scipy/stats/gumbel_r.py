"""The right-skewed Gumbel distribution (mirrors ``jax.scipy.stats.gumbel_r``; ``scipy.stats.gumbel_r``).

CDF ``exp(-exp(-z))`` for ``z = (x - loc) / scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers); NaN where ``scale`` is not positive, as SciPy and JAX.

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.scipy._util import floats, positive_scale

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _z(name, x, loc, scale):
    x, loc, scale = floats(name, x, loc, scale)
    return (x - loc) / scale, scale


def _log1mexp(t):
    """``log(1 - exp(-t))`` for ``t >= 0``: by ``expm1`` below ``log 2``, by ``log1p`` above (Maechler 2012)."""
    import fnarray.numpy as fnp
    return fnp.where(t < math.log(2.0), fnp.log(-fnp.expm1(-t)), fnp.log1p(-fnp.exp(-t)))


def logpdf(x, loc=0, scale=1):
    """``-log(scale) - z - exp(-z)``."""
    import fnarray.numpy as fnp
    z, scale = _z("gumbel_r.logpdf", x, loc, scale)
    return positive_scale(-fnp.log(scale) - (z + fnp.exp(-z)), scale)


def pdf(x, loc=0, scale=1):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def logcdf(x, loc=0, scale=1):
    """``-exp(-z)``."""
    import fnarray.numpy as fnp
    z, scale = _z("gumbel_r.logcdf", x, loc, scale)
    return positive_scale(-fnp.exp(-z), scale)


def cdf(x, loc=0, scale=1):
    """``exp(-exp(-z))``."""
    import fnarray.numpy as fnp
    return fnp.exp(logcdf(x, loc, scale))


def logsf(x, loc=0, scale=1):
    """``log(1 - exp(-exp(-z)))``, accurate in both tails."""
    import fnarray.numpy as fnp
    z, scale = _z("gumbel_r.logsf", x, loc, scale)
    return positive_scale(_log1mexp(fnp.exp(-z)), scale)


def sf(x, loc=0, scale=1):
    """``-expm1(-exp(-z))``: ``1 - cdf`` without cancellation."""
    import fnarray.numpy as fnp
    z, scale = _z("gumbel_r.sf", x, loc, scale)
    return positive_scale(-fnp.expm1(-fnp.exp(-z)), scale)


def ppf(p, loc=0, scale=1):
    """``loc - scale log(-log p)`` for ``0 < p < 1``; ``-inf`` at 0 and ``inf`` at 1 (SciPy's ends: JAX gives NaN
    there), NaN outside ``[0, 1]``."""
    import fnarray.numpy as fnp
    p, loc, scale = floats("gumbel_r.ppf", p, loc, scale)
    out = loc - scale * fnp.log(-fnp.log(p))
    return positive_scale(fnp.where((p < 0) | (p > 1), np.nan, out), scale)
