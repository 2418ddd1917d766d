"""Probability distributions (mirrors ``jax.scipy.stats``): each a module of functions with SciPy's
parameters (``loc`` and ``scale`` where SciPy has them).

Continuous: ``norm``, ``multivariate_normal``, ``t``, ``gamma``, ``beta``, ``uniform``, ``laplace``, ``expon``,
``cauchy``, ``logistic``, ``chi2``, ``pareto``, ``gumbel_r``, ``gumbel_l``, ``gennorm``, ``truncnorm``, ``vonmises``,
``wrapcauchy``, ``dirichlet``. Discrete: ``bernoulli``, ``poisson``, ``binom``, ``nbinom``, ``geom``, ``betabinom``,
``multinomial``. Summaries: ``sem``, ``rankdata``, ``mode``; ``gaussian_kde``.
Densities outside the support are 0 (log-densities ``-inf``), as in SciPy.

Raises (every distribution's functions):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: the shapes do not broadcast.
"""

from fnarray.scipy.stats import (bernoulli, beta, betabinom, binom, cauchy, chi2, dirichlet, expon, gamma, gennorm,
                                 geom, gumbel_l, gumbel_r, laplace, logistic, multinomial, multivariate_normal,
                                 nbinom, norm, pareto, poisson, t, truncnorm, uniform, vonmises, wrapcauchy)
from fnarray.scipy.stats._kde import gaussian_kde
from fnarray.scipy.stats._summary import ModeResult, mode, rankdata, sem

__all__ = ["bernoulli", "beta", "betabinom", "binom", "cauchy", "chi2", "dirichlet", "expon", "gamma",
           "gaussian_kde", "gennorm", "geom", "gumbel_l", "gumbel_r", "laplace", "logistic", "mode", "multinomial",
           "multivariate_normal", "nbinom", "norm", "pareto", "poisson", "rankdata", "sem", "t", "truncnorm",
           "uniform", "vonmises", "wrapcauchy", "ModeResult"]
