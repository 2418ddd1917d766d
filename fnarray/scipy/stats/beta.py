"""The beta distribution (mirrors ``jax.scipy.stats.beta``; ``scipy.stats.beta``): densities.

Shapes ``a``, ``b``, ``loc`` and ``scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers). Outside ``[loc, loc + scale]`` the density is 0.

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpdf", "pdf"]


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
