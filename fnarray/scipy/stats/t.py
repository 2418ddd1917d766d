"""Student's t distribution (mirrors ``jax.scipy.stats.t``; ``scipy.stats.t``).

``df`` degrees of freedom, ``loc`` and ``scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import math

from fnarray.core import lax
from fnarray.scipy._util import floats
from fnarray.scipy._util import log1p as _log1p

__all__ = ["logpdf", "pdf"]


def logpdf(x, df, loc=0, scale=1):
    """``log`` of the t density: ``lgamma((df+1)/2) - lgamma(df/2) - log(sqrt(df pi) scale)
    - (df+1)/2 log1p(z**2 / df)``, ``z = (x - loc) / scale``."""
    import fnarray.numpy as fnp
    x, df, loc, scale = floats("t.logpdf", x, df, loc, scale)
    z = (x - loc) / scale
    half = 0.5 * (df + 1.0)
    return (lax.lgamma(half) - lax.lgamma(0.5 * df) - 0.5 * fnp.log(df * math.pi) - fnp.log(scale)
            - half * _log1p(z * z / df))


def pdf(x, df, loc=0, scale=1):
    """The t density at ``x``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, df, loc, scale))
