"""The uniform distribution on ``[loc, loc + scale]`` (mirrors ``jax.scipy.stats.uniform``).

Arguments broadcast together; the result has the promoted floating dtype (``float32`` for integers).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy._util import floats

__all__ = ["cdf", "logcdf", "logpdf", "pdf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-log(scale)`` on ``[loc, loc + scale]``, ``-inf`` elsewhere."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("uniform.logpdf", x, loc, scale)
    return fnp.where((x < loc) | (x > loc + scale), -np.inf, -fnp.log(scale))


def pdf(x, loc=0, scale=1):
    """``1 / scale`` on ``[loc, loc + scale]``, 0 elsewhere."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``clip((x - loc) / scale, 0, 1)``."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("uniform.cdf", x, loc, scale)
    return fnp.clip((x - loc) / scale, 0.0, 1.0)


def logcdf(x, loc=0, scale=1):
    """``log`` of ``cdf``."""
    import fnarray.numpy as fnp
    return fnp.log(cdf(x, loc, scale))


def ppf(q, loc=0, scale=1):
    """``loc + q * scale`` for ``q`` in ``[0, 1]``, NaN outside."""
    import fnarray.numpy as fnp
    q, loc, scale = floats("uniform.ppf", q, loc, scale)
    return fnp.where((q < 0) | (q > 1), np.nan, loc + q * scale)
