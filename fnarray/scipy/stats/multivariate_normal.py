"""The multivariate normal distribution (mirrors ``jax.scipy.stats.multivariate_normal``).

Raises (every function):
  TypeError: an argument is not an array or a scalar.
  DTypeError: an argument is complex.
  ShapeError: ``mean`` is not ``(..., n)``, ``cov`` not ``(..., n, n)`` (or a scalar or a vector of
    variances), or ``x`` not ``(..., n)``; or the batch shapes do not broadcast.
  ValueError: ``allow_singular`` is not None or False.
"""

from __future__ import annotations

import math

from fnarray.core import linalg as lax_linalg
from fnarray.core.errors import ShapeError
from fnarray.scipy._util import floats

__all__ = ["logpdf", "pdf"]


def logpdf(x, mean, cov, allow_singular=None):
    """``-(n log(2 pi) + log det cov + (x - mean)^T cov^-1 (x - mean)) / 2``, through the Cholesky factor of
    ``cov`` (``L``: ``log det cov = 2 sum log diag L``, the quadratic form ``|L^-1 (x - mean)|^2``).

    Args:
      x: ``(..., n)`` points.
      mean: ``(..., n)``.
      cov: ``(..., n, n)`` symmetric positive definite; a scalar or ``(n,)`` means a diagonal (as JAX). A
        matrix that is not positive definite gives NaN.
      allow_singular: must be None or False (as JAX).

    Returns:
      ``(...)``: the broadcast batch shape, the promoted floating dtype.
    """
    import fnarray.numpy as fnp
    if allow_singular:
        raise ValueError("multivariate_normal.logpdf: allow_singular=True is not offered (as JAX)")
    x, mean, cov = floats("multivariate_normal.logpdf", x, mean, cov, shape=False)
    if mean.ndim < 1:
        mean = fnp.broadcast_to(mean, x.shape[-1:])
    n = mean.shape[-1]
    if x.ndim < 1 or x.shape[-1] != n:
        raise ShapeError(f"multivariate_normal.logpdf: x of shape {x.shape} does not match mean of shape "
                         f"{mean.shape}: x must be (..., {n})")
    diff = x - mean
    if cov.ndim < 2:
        if cov.ndim == 1 and cov.shape[0] != n:
            raise ShapeError(f"multivariate_normal.logpdf: a vector cov must have {n} variances, got {cov.shape}")
        var = fnp.broadcast_to(cov, (n,))
        return -0.5 * (n * math.log(2 * math.pi) + fnp.sum(fnp.log(var)) + fnp.sum(diff * diff / var, axis=-1))
    if cov.shape[-2:] != (n, n):
        raise ShapeError(f"multivariate_normal.logpdf: cov must be (..., {n}, {n}) to match mean of shape "
                         f"{mean.shape}, got {cov.shape}")
    low = lax_linalg.cholesky(cov)
    batch = fnp.broadcast_shapes(diff.shape[:-1], cov.shape[:-2])
    low_b = fnp.broadcast_to(low, batch + (n, n))
    diff_b = fnp.broadcast_to(diff, batch + (n,))
    z = lax_linalg.triangular_solve(low_b, diff_b[..., None], left_side=True, lower=True)[..., 0]
    log_det = 2.0 * fnp.sum(fnp.log(fnp.diagonal(low, axis1=-2, axis2=-1)), axis=-1)
    return -0.5 * (n * math.log(2 * math.pi) + log_det + fnp.sum(z * z, axis=-1))


def pdf(x, mean, cov):
    """The density, ``exp(logpdf(x, mean, cov))``."""
    import fnarray.numpy as fnp
    return fnp.exp(logpdf(x, mean, cov))
