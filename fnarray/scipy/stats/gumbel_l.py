"""The left-skewed Gumbel distribution (mirrors ``jax.scipy.stats.gumbel_l``; ``scipy.stats.gumbel_l``): the
mirror image of ``gumbel_r``, ``gumbel_l(x; loc) = gumbel_r(-x; -loc)``.

CDF ``1 - exp(-exp(z))`` for ``z = (x - loc) / scale``; arguments broadcast together; the result has the promoted
floating dtype (``float32`` for integers); NaN where ``scale`` is not positive, as SciPy and JAX.

Errors: as every distribution's (``fnarray.scipy.stats``).
"""

from __future__ import annotations

import numpy as np

from fnarray.scipy._util import floats, positive_scale
from fnarray.scipy.stats import gumbel_r

__all__ = ["cdf", "logcdf", "logpdf", "logsf", "pdf", "ppf", "sf"]


def _mirror(name, x, loc, scale):
    x, loc, scale = floats(name, x, loc, scale)
    return -x, -loc, scale


def _mirrored(name, r_name, doc):
    """``gumbel_l``'s ``name``: ``gumbel_r``'s ``r_name`` at ``(-x, -loc, scale)``."""
    def f(x, loc=0, scale=1):
        return getattr(gumbel_r, r_name)(*_mirror(f"gumbel_l.{name}", x, loc, scale))
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


logpdf = _mirrored("logpdf", "logpdf", "``-log(scale) + z - exp(z)``.")
pdf = _mirrored("pdf", "pdf", "The density at ``x``.")
logcdf = _mirrored("logcdf", "logsf", "``log(1 - exp(-exp(z)))``, accurate in both tails.")
cdf = _mirrored("cdf", "sf", "``-expm1(-exp(z))``.")
logsf = _mirrored("logsf", "logcdf", "``-exp(z)``.")
sf = _mirrored("sf", "cdf", "``exp(-exp(z))``.")


def ppf(p, loc=0, scale=1):
    """``loc + scale log(-log1p(-p))`` for ``0 < p < 1``; ``-inf`` at 0 and ``inf`` at 1 (SciPy's ends: JAX gives
    NaN there), NaN outside ``[0, 1]``."""
    import fnarray.numpy as fnp
    p, loc, scale = floats("gumbel_l.ppf", p, loc, scale)
    out = loc + scale * fnp.log(-fnp.log1p(-p))
    return positive_scale(fnp.where((p < 0) | (p > 1), np.nan, out), scale)
