"""NumPy reference implementations of the linear-algebra primitives (``fnarray/core/linalg.py``).

NumPy's ``linalg`` does what it has (Cholesky, QR, eigh, SVD: LAPACK underneath, as JAX on the CPU); NumPy
has no LU and no triangular solve, so those two are written here, vectorized over the batch: LU as LAPACK's
``getf2`` (partial pivoting on the first largest ``|re| + |im|``), the triangular solve by substitution,
one row at a time (so a zero pivot gives IEEE inf/NaN instead of an error). Where NumPy raises
``LinAlgError`` (a matrix that is not positive definite, an SVD or eigh that does not converge on NaN
input) that matrix gets NaN results, as JAX's; every other matrix of the batch keeps its own.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import linalg as L
from fnarray.lowering.numpy.common import IMPLS

__all__ = ["register", "lu_factor", "triangular_solve"]


def _finish(outs, out_avals):
    return [np.ascontiguousarray(np.asarray(o).reshape(a.shape).astype(a.dtype, copy=False))
            for o, a in zip(outs, out_avals, strict=True)]


def _per_matrix(fn, x3, out_avals, nbatch):
    """``fn(x3)`` on the batch ``[B, m, n]``; if NumPy raises, one matrix at a time, NaN for those that fail."""
    with np.errstate(all="ignore"):
        try:
            return fn(x3)
        except np.linalg.LinAlgError:
            pass
        outs = [np.empty((x3.shape[0],) + a.shape[nbatch:], a.dtype) for a in out_avals]
        for b in range(x3.shape[0]):
            try:
                r = fn(x3[b:b + 1])
            except np.linalg.LinAlgError:
                r = [np.full((1,) + o.shape[1:], np.nan, o.dtype) for o in outs]
            for o, v in zip(outs, r, strict=True):
                o[b] = v[0]
        return outs


def _eye_batch(nb, p, q, dtype):
    return np.broadcast_to(np.eye(p, q, dtype=dtype), (nb, p, q))


# ----------------------------------------------------------------------------- the factorizations

def _cholesky(x3):
    return [np.linalg.cholesky(np.tril(x3))]


def _cholesky_impl(params, in_avals, out_avals):
    nbatch = in_avals[0].ndim - 2

    def f(x):
        if x.size == 0:
            return np.zeros(out_avals[0].shape, out_avals[0].dtype)
        x3 = x.reshape((-1,) + x.shape[-2:])
        # A failed matrix is NaN in its lower triangle; the strict upper triangle stays zero (as JAX).
        return np.tril(_finish(_per_matrix(_cholesky, x3, out_avals, nbatch), out_avals)[0])
    return f


def triangular_solve(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """The reference triangular solve on NumPy arrays ``a [..., m, m]``, ``b`` (see ``fnarray.core.linalg``)."""
    t = np.tril(a) if lower else np.triu(a)
    m = a.shape[-1]
    if unit_diagonal:
        t = t.copy()
        t[..., np.arange(m), np.arange(m)] = 1
    if conjugate_a:
        t = np.conj(t)
    low = lower
    if transpose_a:
        t, low = np.swapaxes(t, -1, -2), not low
    rhs = b
    if not left_side:  # x @ T = b  <=>  T^T @ x^T = b^T
        t, low, rhs = np.swapaxes(t, -1, -2), not low, np.swapaxes(b, -1, -2)
    y = np.zeros(rhs.shape, np.result_type(t, rhs))
    order = range(m) if low else range(m - 1, -1, -1)
    with np.errstate(all="ignore"):
        for i in order:
            done = slice(0, i) if low else slice(i + 1, m)
            acc = rhs[..., i, :] - np.matmul(t[..., i:i + 1, done], y[..., done, :])[..., 0, :]
            y[..., i, :] = acc if unit_diagonal else acc / t[..., i, i][..., None]
    return y if left_side else np.swapaxes(y, -1, -2)


def _triangular_solve_impl(params, in_avals, out_avals):
    out = out_avals[0]

    def f(a, b):
        if b.size == 0:
            return np.zeros(out.shape, out.dtype)
        return np.ascontiguousarray(triangular_solve(a, b, **params).astype(out.dtype, copy=False))
    return f


def lu_factor(x3):
    """LU with partial pivoting of ``x3 [B, m, n]`` as LAPACK's ``getf2``: ``[lu, pivots, permutation]``."""
    a = np.array(x3, copy=True)
    nb, m, n = a.shape
    k = min(m, n)
    pivots = np.zeros((nb, k), np.int32)
    perm = np.broadcast_to(np.arange(m, dtype=np.int32), (nb, m)).copy()
    rows = np.arange(nb)
    with np.errstate(all="ignore"):
        for j in range(k):
            col = a[:, j:, j]
            mag = np.abs(col.real) + np.abs(col.imag) if np.iscomplexobj(col) else np.abs(col)
            p = np.argmax(mag, axis=1) + j
            pivots[:, j] = p
            aj, ap = a[rows, j].copy(), a[rows, p].copy()
            a[rows, j], a[rows, p] = ap, aj
            qj, qp = perm[rows, j].copy(), perm[rows, p].copy()
            perm[rows, j], perm[rows, p] = qp, qj
            piv = a[:, j, j]
            # A zero pivot means the whole column below is zero: LAPACK then leaves it unscaled (still zero).
            safe = np.where(piv == 0, np.ones_like(piv), piv)
            a[:, j + 1:, j] /= safe[:, None]
            a[:, j + 1:, j + 1:] -= a[:, j + 1:, j:j + 1] * a[:, j:j + 1, j + 1:]
    return [a, pivots, perm]


def _lu_impl(params, in_avals, out_avals):
    def f(x):
        m = x.shape[-1 - 1]
        if x.size == 0:
            lu_, piv, perm = (np.zeros(o.shape, o.dtype) for o in out_avals)
            perm = np.broadcast_to(np.arange(m, dtype=np.int32), perm.shape).copy()
            return [lu_, piv, perm]
        x3 = x.reshape((-1,) + x.shape[-2:])
        return _finish(lu_factor(x3), out_avals)
    return f


def _qr_impl(params, in_avals, out_avals):
    full = params["full_matrices"]
    nbatch = in_avals[0].ndim - 2

    def f(x):
        m, n = x.shape[-2:]
        if x.size == 0:
            q, r = out_avals
            nb = int(np.prod(q.shape[:nbatch], dtype=np.int64))
            return _finish([_eye_batch(nb, *q.shape[nbatch:], q.dtype), np.zeros(r.shape, r.dtype)], out_avals)
        x3 = x.reshape((-1, m, n))
        return _finish(_per_matrix(lambda y: list(np.linalg.qr(y, mode="complete" if full else "reduced")),
                                   x3, out_avals, nbatch), out_avals)
    return f


def _eigh_impl(params, in_avals, out_avals):
    uplo = "L" if params["lower"] else "U"
    nbatch = in_avals[0].ndim - 2

    def eig(y):
        w, v = np.linalg.eigh(y, UPLO=uplo)
        return [v, w]

    def f(x):
        if x.size == 0:
            return [np.zeros(o.shape, o.dtype) for o in out_avals]
        x3 = x.reshape((-1,) + x.shape[-2:])
        return _finish(_per_matrix(eig, x3, out_avals, nbatch), out_avals)
    return f


def _svd_impl(params, in_avals, out_avals):
    full, uv = params["full_matrices"], params["compute_uv"]
    nbatch = in_avals[0].ndim - 2

    def dec(y):
        if not uv:
            return [np.linalg.svd(y, compute_uv=False)]
        u, s, vh = np.linalg.svd(y, full_matrices=full)
        return [s, u, vh]

    def f(x):
        if x.size == 0:
            outs = [np.zeros(out_avals[0].shape, out_avals[0].dtype)]
            nb = int(np.prod(out_avals[0].shape[:nbatch], dtype=np.int64))
            outs += [_eye_batch(nb, *o.shape[nbatch:], o.dtype) for o in out_avals[1:]]
            return _finish(outs, out_avals)
        x3 = x.reshape((-1,) + x.shape[-2:])
        return _finish(_per_matrix(dec, x3, out_avals, nbatch), out_avals)
    return f


def register(impls: dict) -> None:
    """Fill the reference table ``impls``."""
    impls[L.cholesky_p] = _cholesky_impl
    impls[L.triangular_solve_p] = _triangular_solve_impl
    impls[L.lu_p] = _lu_impl
    impls[L.qr_p] = _qr_impl
    impls[L.eigh_p] = _eigh_impl
    impls[L.svd_p] = _svd_impl


register(IMPLS)
