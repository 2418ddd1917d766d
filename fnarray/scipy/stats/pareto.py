"""The Pareto distribution (mirrors ``jax.scipy.stats.pareto``; ``scipy.stats.pareto``).

Density ``b / z**(b + 1) / scale`` for ``z = (x - loc) / scale >= 1``; arguments broadcast together; the result
has the promoted floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy._util import floats

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _z(name, x, b, loc, scale):
    x, b, loc, scale = floats(name, x, b, loc, scale)
    return (x - loc) / scale, b, x < loc + scale, scale


def logpdf(x, b, loc=0, scale=1):
    """``log(b / scale) - (b + 1) log(z)`` for ``z >= 1``, ``-inf`` below."""
    import fnarray.numpy as fnp
    z, b, below, scale = _z("pareto.logpdf", x, b, loc, scale)
    return fnp.where(below, -np.inf, -(fnp.log(scale / b) + (b + 1) * fnp.log(z)))


def pdf(x, b, loc=0, scale=1):
    """The Pareto density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, b, loc, scale))


def cdf(x, b, loc=0, scale=1):
    """``1 - z**-b`` for ``z >= 1``, 0 below."""
    import fnarray.numpy as fnp
    z, b, below, _ = _z("pareto.cdf", x, b, loc, scale)
    return fnp.where(below, 0.0, 1 - fnp.power(z, -b))


def logcdf(x, b, loc=0, scale=1):
    """``log1p(-z**-b)`` for ``z >= 1``, ``-inf`` below."""
    import fnarray.numpy as fnp
    z, b, below, _ = _z("pareto.logcdf", x, b, loc, scale)
    return fnp.where(below, -np.inf, fnp.log1p(-fnp.power(z, -b)))


def logsf(x, b, loc=0, scale=1):
    """``-b log(z)`` for ``z >= 1``, 0 below."""
    import fnarray.numpy as fnp
    z, b, below, _ = _z("pareto.logsf", x, b, loc, scale)
    return fnp.where(below, 0.0, -b * fnp.log(z))


def sf(x, b, loc=0, scale=1):
    """``z**-b`` for ``z >= 1``, 1 below: ``exp(logsf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logsf(x, b, loc, scale))


def ppf(q, b, loc=0, scale=1):
    """``loc + scale (1 - q)**(-1/b)`` for ``q`` in ``[0, 1]`` (``inf`` at 1), NaN outside or for NaN ``q``."""
    import fnarray.numpy as fnp
    q, b, loc, scale = floats("pareto.ppf", q, b, loc, scale)
    out = loc + scale * fnp.power(1 - q, -1 / b)
    return fnp.where(fnp.isnan(q) | (q < 0) | (q > 1), np.nan, out)
