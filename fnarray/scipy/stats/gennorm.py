"""The generalized normal distribution (mirrors ``jax.scipy.stats.gennorm``; ``scipy.stats.gennorm``, without
``loc`` and ``scale``, as JAX).

Density ``beta / (2 Gamma(1/beta)) exp(-|x|**beta)``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers).

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

from fnarray.core import lax
from fnarray.scipy import special
from fnarray.scipy._util import floats

__all__ = ["cdf", "logpdf", "pdf"]


def logpdf(x, beta):
    """``log(beta / 2) - lgamma(1 / beta) - |x|**beta``."""
    import fnarray.numpy as fnp
    x, beta = floats("gennorm.logpdf", x, beta)
    return fnp.log(0.5 * beta) - lax.lgamma(1 / beta) - fnp.abs(x) ** beta


def pdf(x, beta):
    """The density at ``x``: ``exp(logpdf)``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, beta))


def cdf(x, beta):
    """``(1 + sign(x) gammainc(1 / beta, |x|**beta)) / 2``."""
    import fnarray.numpy as fnp
    x, beta = floats("gennorm.cdf", x, beta)
    return 0.5 * (1 + fnp.sign(x) * special.gammainc(1 / beta, fnp.abs(x) ** beta))
