"""Probability distributions (mirrors ``jax.scipy.stats``): each a module of functions with SciPy's
parameters (``loc`` and ``scale`` where SciPy has them).

``norm``, ``multivariate_normal``, ``t``, ``gamma``, ``beta``, ``bernoulli``, ``poisson``, ``uniform``, ``laplace``,
``expon``, ``cauchy``, ``logistic``.
Densities outside the support are 0 (log-densities ``-inf``), as in SciPy.
"""

from fnarray.scipy.stats import (bernoulli, beta, cauchy, expon, gamma, laplace, logistic, multivariate_normal, norm,
                                 poisson, t, uniform)

__all__ = ["bernoulli", "beta", "cauchy", "expon", "gamma", "laplace", "logistic", "multivariate_normal", "norm",
           "poisson", "t", "uniform"]
