"""The jax backend's rules for the linear-algebra primitives: ``jax.lax.linalg``, whose names and parameters
fnarray's primitives share (registered into ``common.RULES``)."""

from __future__ import annotations

from jax import lax

from fnarray.core import linalg as L
from fnarray.lowering.jax.common import RULES

__all__ = ["register"]


def _cholesky(x):
    # The primitive reads only the lower triangle, as JAX's cholesky_p (LAPACK potrf) does; JAX fills a
    # matrix that is not positive definite with NaN.
    return lax.linalg.cholesky(x, symmetrize_input=False)


def _triangular_solve(a, b, **params):
    return lax.linalg.triangular_solve(a, b, **params)


def _lu(x):
    return list(lax.linalg.lu(x))


def _qr(x, *, full_matrices):
    return list(lax.linalg.qr(x, full_matrices=full_matrices))


def _eigh(x, *, lower):
    v, w = lax.linalg.eigh(x, lower=lower, symmetrize_input=False)
    return [v, w]


def _svd(x, *, full_matrices, compute_uv):
    if not compute_uv:
        return [lax.linalg.svd(x, full_matrices=full_matrices, compute_uv=False)]
    u, s, vh = lax.linalg.svd(x, full_matrices=full_matrices, compute_uv=True)
    return [s, u, vh]


def register(rules: dict) -> None:
    """Fill the rule table ``RULES``."""
    rules[L.cholesky_p] = _cholesky
    rules[L.triangular_solve_p] = _triangular_solve
    rules[L.lu_p] = _lu
    rules[L.qr_p] = _qr
    rules[L.eigh_p] = _eigh
    rules[L.svd_p] = _svd


register(RULES)
