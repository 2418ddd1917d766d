"""The von Mises distribution on the circle (mirrors ``jax.scipy.stats.vonmises``; ``scipy.stats.vonmises``
without ``loc`` and ``scale``, as JAX).

Density ``exp(kappa cos x) / (2 pi I0(kappa))``, periodic in ``x``; arguments broadcast together; the result has
the promoted floating dtype (``float32`` for integers); NaN where ``kappa <= 0``.

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["logpdf", "pdf"]


def logpdf(x, kappa):
    """``kappa (cos x - 1) - log(2 pi i0e(kappa))`` (the exponentially scaled Bessel function, so large ``kappa``
    does not overflow)."""
    import fnarray.numpy as fnp
    x, kappa = floats("vonmises.logpdf", x, kappa)
    out = kappa * (fnp.cos(x) - 1) - fnp.log(2 * math.pi * special.i0e(kappa))
    return fnp.where(kappa > 0, out, np.nan)


def pdf(x, kappa):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, kappa))
