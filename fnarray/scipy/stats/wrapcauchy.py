"""The wrapped Cauchy distribution on ``[0, 2 pi]`` (mirrors ``jax.scipy.stats.wrapcauchy``;
``scipy.stats.wrapcauchy`` without ``loc`` and ``scale``, as JAX).

Density ``(1 - c**2) / (2 pi (1 + c**2 - 2 c cos x))``; arguments broadcast together; the result has the
promoted floating dtype (``float32`` for integers); ``-inf`` (log) outside ``[0, 2 pi]``; NaN unless ``0 < c < 1``,
and at a NaN ``x`` (SciPy's rule; JAX's ``-inf``).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.scipy._util import floats

__all__ = ["logpdf", "pdf"]


def logpdf(x, c):
    """``log(1 - c**2) - log(2 pi) - log(1 + c**2 - 2 c cos x)`` on ``[0, 2 pi]``."""
    import fnarray.numpy as fnp
    x, c = floats("wrapcauchy.logpdf", x, c)
    out = fnp.log(1 - c * c) - math.log(2 * math.pi) - fnp.log(1 + c * c - 2 * c * fnp.cos(x))
    out = fnp.where((x < 0) | (x > 2 * math.pi), -np.inf, out)
    return fnp.where((c > 0) & (c < 1), out, np.nan)


def pdf(x, c):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, c))
