"""The mlx backend's rules for the linear-algebra primitives (registered into ``common.RULES``).

MLX's ``mx.linalg`` runs only on the CPU stream, so every call passes ``stream=mx.cpu`` (on an Apple GPU
device the rest of the program stays on the GPU; MLX moves the operands through unified memory). What
``mx.linalg`` lacks is composed here from MLX operations, so every result equals the numpy reference's:

- ``cholesky``: MLX returns LAPACK's partial factor for a matrix that is not positive definite; such a
  matrix is recognized by a diagonal entry that is not positive (LAPACK ``potrf`` stops there) and gets
  NaN in its lower triangle, as the reference.
- ``triangular_solve``: MLX solves ``a x = b`` with ``a`` lower or upper; transposition and the right side
  are transposes, a unit diagonal is written in. MLX inverts the triangle and raises on a zero pivot, so a
  matrix with one is solved with that pivot replaced and gets NaN (the documented non-finite result).
- ``lu``: ``mx.linalg.lu_factor`` (LAPACK ``getrf``) gives ``lu`` and the pivots; the permutation is the
  pivots' row swaps applied in order.
- ``qr(full_matrices=True)`` of a tall matrix: MLX has only the reduced form; the QR of the matrix padded
  with zero columns to a square gives the same Householder reflectors (the padding's reflectors are the
  identity), so its ``q`` is LAPACK's full ``q``.
- ``eigh`` and ``svd``: MLX raises on NaN or inf input; such a matrix gets NaN results, as the reference.
  ``svd`` computes the full matrices and slices the reduced ones.

complex64 is natively supported for ``eigh`` and ``svd`` only; the other four have no complex form in MLX
and fall back to numpy (the backend's dtype reason).
"""

from __future__ import annotations

from fnarray.core import linalg as L
from fnarray.lowering.mlx.common import RULES

try:
    import mlx.core as mx
except ImportError:  # pragma: no cover - the mlx backend reports the missing library itself
    mx = None

__all__ = ["register"]


def _eye(n, dtype):
    return mx.eye(n, dtype=dtype)


def _tril_mask(n):
    return mx.tril(mx.ones((n, n), dtype=mx.bool_))


def _nan_like(x):
    return mx.full(x.shape, float("nan"), dtype=x.dtype)


def _bcast_ok(ok, x):
    """A per-matrix boolean ``[...]`` broadcast over the trailing axes of ``x``."""
    return mx.reshape(ok, ok.shape + (1,) * (x.ndim - ok.ndim))


def _cholesky(params, in_avals, out_avals):
    def f(x):
        l_ = mx.linalg.cholesky(x, upper=False, stream=mx.cpu)
        ok = mx.all(mx.diagonal(l_, 0, -2, -1) > 0, axis=-1)
        n = x.shape[-1]
        failed = mx.where(_tril_mask(n), _nan_like(l_), mx.zeros_like(l_))
        return mx.where(_bcast_ok(ok, l_), l_, failed)
    return f


def _triangular_solve(params, in_avals, out_avals):
    left, lower = params["left_side"], params["lower"]
    trans, unit = params["transpose_a"], params["unit_diagonal"]

    def f(a, b):
        n = a.shape[-1]
        eye = _eye(n, mx.bool_)
        t, upper = a, not lower
        if unit:
            t = mx.where(eye, mx.ones_like(t), t)
        if trans:
            t, upper = mx.swapaxes(t, -1, -2), not upper
        rhs = b
        if not left:  # x t = b  <=>  t^T x^T = b^T
            t, upper, rhs = mx.swapaxes(t, -1, -2), not upper, mx.swapaxes(b, -1, -2)
        zero_pivot = mx.any(mx.diagonal(t, 0, -2, -1) == 0, axis=-1)
        t = mx.where(eye & (t == 0), mx.ones_like(t), t)
        x = mx.linalg.solve_triangular(t, rhs, upper=upper, stream=mx.cpu)
        x = mx.where(_bcast_ok(zero_pivot, x), _nan_like(x), x)
        return x if left else mx.swapaxes(x, -1, -2)
    return f


def _lu(params, in_avals, out_avals):
    m = in_avals[0].shape[-2]

    def f(x):
        lu, piv = mx.linalg.lu_factor(x, stream=mx.cpu)
        piv = piv.astype(mx.int32)
        idx = mx.arange(m, dtype=mx.int32)
        perm = mx.broadcast_to(idx, piv.shape[:-1] + (m,))
        for i in range(piv.shape[-1]):  # row i swapped with row piv[i], in order (LAPACK's laswp)
            j = piv[..., i:i + 1]
            pi = perm[..., i:i + 1]
            pj = mx.take_along_axis(perm, j, axis=-1)
            perm = mx.where(idx == i, pj, mx.where(idx == j, pi, perm))
        return [lu, piv, perm]
    return f


def _qr(params, in_avals, out_avals):
    m, n = in_avals[0].shape[-2:]
    pad = params["full_matrices"] and m > n

    def f(x):
        if pad:
            z = mx.zeros(x.shape[:-1] + (m - n,), dtype=x.dtype)
            q, r = mx.linalg.qr(mx.concatenate([x, z], axis=-1), stream=mx.cpu)
            return [q, r[..., :, :n]]
        q, r = mx.linalg.qr(x, stream=mx.cpu)
        return [q, r]
    return f


def _finite(x, mask=None):
    fin = mx.isfinite(x)
    if mask is not None:
        fin = fin | ~mask
    return mx.all(fin, axis=(-2, -1))


def _eigh(params, in_avals, out_avals):
    lower = params["lower"]

    def f(x):
        n = x.shape[-1]
        read = _tril_mask(n) if lower else mx.triu(mx.ones((n, n), dtype=mx.bool_))
        ok = _finite(x, read)
        safe = mx.where(_bcast_ok(ok, x), x, _eye(n, x.dtype))
        w, v = mx.linalg.eigh(safe, UPLO="L" if lower else "U", stream=mx.cpu)
        return [mx.where(_bcast_ok(ok, v), v, _nan_like(v)), mx.where(_bcast_ok(ok, w), w, _nan_like(w))]
    return f


def _svd(params, in_avals, out_avals):
    full, uv = params["full_matrices"], params["compute_uv"]
    m, n = in_avals[0].shape[-2:]
    k = min(m, n)

    def f(x):
        ok = _finite(x)
        safe = mx.where(_bcast_ok(ok, x), x, mx.zeros_like(x))

        def nan_where_failed(y):
            return mx.where(_bcast_ok(ok, y), y, _nan_like(y))
        if not uv:
            return [nan_where_failed(mx.linalg.svd(safe, compute_uv=False, stream=mx.cpu))]
        u, s, vh = mx.linalg.svd(safe, compute_uv=True, stream=mx.cpu)
        if not full:
            u, vh = u[..., :, :k], vh[..., :k, :]
        return [nan_where_failed(s), nan_where_failed(u), nan_where_failed(vh)]
    return f


def register(rules: dict) -> frozenset:
    """Fill the rule table ``rules``; returns the primitives whose rule also takes complex64."""
    rules[L.cholesky_p] = _cholesky
    rules[L.triangular_solve_p] = _triangular_solve
    rules[L.lu_p] = _lu
    rules[L.qr_p] = _qr
    rules[L.eigh_p] = _eigh
    rules[L.svd_p] = _svd
    return frozenset({L.eigh_p, L.svd_p})


#: the linear-algebra primitives whose MLX rule also takes complex64
COMPLEX_OK = register(RULES)
