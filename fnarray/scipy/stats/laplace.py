"""The Laplace (double exponential) distribution (mirrors ``jax.scipy.stats.laplace``; ``scipy.stats.laplace``).

Density ``exp(-|x - loc| / scale) / (2 scale)``.
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

__all__ = ["cdf", "logpdf", "pdf", "ppf"]


def logpdf(x, loc=0, scale=1):
    """``-|x - loc| / scale - log(2 scale)``."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("laplace.logpdf", x, loc, scale)
    return positive_scale(-fnp.abs(x - loc) / scale - fnp.log(scale) - math.log(2.0), scale)


def pdf(x, loc=0, scale=1):
    """The Laplace density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0, scale=1):
    """``exp(z) / 2`` for ``z = (x - loc) / scale < 0``, else ``1 - exp(-z) / 2``."""
    import fnarray.numpy as fnp
    x, loc, scale = floats("laplace.cdf", x, loc, scale)
    z = (x - loc) / scale
    half = 0.5 * fnp.exp(-fnp.abs(z))
    return positive_scale(fnp.where(z < 0, half, 1.0 - half), scale)


def ppf(q, loc=0, scale=1):
    """The inverse of ``cdf`` for ``q`` in ``[0, 1]`` (NaN outside):
    ``loc - scale sign(q - 1/2) log1p(-2 |q - 1/2|)``."""
    import fnarray.numpy as fnp
    q, loc, scale = floats("laplace.ppf", q, loc, scale)
    d = q - 0.5
    out = loc - scale * fnp.sign(d) * fnp.log1p(-2.0 * fnp.abs(d))
    return positive_scale(fnp.where((q < 0) | (q > 1), fnp.nan, out), scale)
