"""Batching, JVP and transpose rules of the linear-algebra primitives (``fnarray/core/linalg.py``).

Every linear-algebra primitive is batched over its leading axes, so its batching rule (registered for the
whole ``linalg`` family) moves each operand's batch axis to the front and binds the same primitive: the
results are batched at axis 0. The JVP rules are the formulas of ``jax/_src/lax/linalg.py``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, families, lax
from fnarray.core import linalg as L
from fnarray.core.avals import get_aval
from fnarray.transforms.ad_tables import Zero, is_undefined, primitive_jvps, primitive_transposes, zero_from_primal
from fnarray.transforms.batching import move_batch_dim
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["linalg_batch"]


def _batch_rule(prim):
    def rule(vals, dims, **params):
        size = next(get_aval(v).shape[d] for v, d in zip(vals, dims, strict=True) if d is not None)
        xs = [move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)]
        out = prim.bind(*xs, **params)
        if prim.multiple_results:
            return out, [0] * len(out)
        return out, 0
    rule.__name__ = f"{prim.name}_batch"
    return rule


def linalg_batch(prim) -> None:
    """Register the family's batching rule for ``prim`` (every operand's batch axis at the front)."""
    primitive_batchers[prim] = _batch_rule(prim)


families.on_family("linalg", linalg_batch)


# ----------------------------------------------------------------------------- helpers (fnarray.core.lax only)

def _shape(x):
    return get_aval(x).shape


def _dtype(x):
    return get_aval(x).dtype


def _mm(a, b):
    """Matrix product over the last two axes, batched over the (equal) leading ones."""
    nd = len(_shape(a))
    batch = tuple(range(nd - 2))
    return lax.dot_general(a, b, (((nd - 1,), (nd - 2,)), (batch, batch)))


def _T(x):
    nd = len(_shape(x))
    return lax.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _H(x):
    t = _T(x)
    return lax.conj(t) if dtypes.is_complex(_dtype(x)) else t


def _c(x, value):
    """A rank-0 constant of ``x``'s dtype (a strong NumPy scalar literal)."""
    return np.asarray(value, _dtype(x))[()]


def _full_mask(x, keep):
    """``keep(i, j)`` over the last two axes of ``x`` as a 0/1 array of ``x``'s shape and dtype."""
    shape = _shape(x)
    p, q = shape[-2:]
    i = lax.iota(dtypes.int32, (p, q), 0)
    j = lax.iota(dtypes.int32, (p, q), 1)
    m = lax.convert_element_type(keep(i, j), _dtype(x))
    nd = len(shape)
    return lax.broadcast_in_dim(m, shape, (nd - 2, nd - 1))


def _tril(x, k=0):
    return lax.mul(x, _full_mask(x, lambda i, j: lax.le(j, lax.add(i, np.int32(k)))))


def _triu(x, k=0):
    return lax.mul(x, _full_mask(x, lambda i, j: lax.ge(j, lax.add(i, np.int32(k)))))


def _eye_like(x):
    """The identity (``eye(p, q)``) broadcast to ``x``'s shape and dtype."""
    return _full_mask(x, lax.eq)


def _diagonal(x):
    """The diagonal of square matrices ``[..., n, n]`` as ``[..., n]``."""
    nd = len(_shape(x))
    return lax.reduce_sum(lax.mul(x, _eye_like(x)), (nd - 1,))


def _rows(x, lo, hi):
    s = _shape(x)
    return lax.slice(x, (0,) * len(s), s[:-2] + (hi, s[-1])) if lo == 0 else \
        lax.slice(x, (0,) * (len(s) - 2) + (lo, 0), s[:-2] + (hi, s[-1]))


def _cols(x, lo, hi):
    s = _shape(x)
    return lax.slice(x, (0,) * (len(s) - 1) + (lo,), s[:-1] + (hi,))


def _as(x, d):
    return lax.convert_element_type(x, d)


def _row_vec(v, shape):
    """``v [..., k]`` broadcast along the rows of ``shape [..., p, k]`` (``v[..., None, :]``)."""
    nd = len(shape)
    return lax.broadcast_in_dim(v, shape, tuple(range(nd - 2)) + (nd - 1,))


def _col_vec(v, shape):
    """``v [..., p]`` broadcast along the columns of ``shape [..., p, k]`` (``v[..., :, None]``)."""
    nd = len(shape)
    return lax.broadcast_in_dim(v, shape, tuple(range(nd - 2)) + (nd - 2,))


def _permute_rows(x, perm):
    """``x[..., perm, :]``: a product with the one-hot permutation matrix (linear in ``x``)."""
    s = _shape(x)
    m = s[-2]
    nd = len(s)
    pshape = s[:-2] + (m, m)
    rows = lax.broadcast_in_dim(perm, pshape, tuple(range(nd - 1)))
    cols = lax.broadcast_in_dim(lax.iota(dtypes.int32, m), pshape, (nd - 1,))
    onehot = lax.convert_element_type(lax.eq(rows, cols), _dtype(x))
    return _mm(onehot, x), onehot


def _zeros(prim, out):
    outs = list(out) if prim.multiple_results else [out]
    zs = [zero_from_primal(o) for o in outs]
    return zs if prim.multiple_results else zs[0]


# ----------------------------------------------------------------------------- cholesky

def cholesky_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    l = L.cholesky_p.bind(x)
    if isinstance(t, Zero):
        return l, zero_from_primal(l)
    # Murray (2016), arXiv:1602.07527: dL = L phi(L^-1 dX L^-H), phi = lower triangle with half the diagonal.
    tmp = L.triangular_solve(l, t, left_side=False, lower=True, transpose_a=True, conjugate_a=True)
    inner = L.triangular_solve(l, tmp, left_side=True, lower=True)
    phi = lax.add(_tril(inner, -1), lax.mul(lax.mul(inner, _eye_like(inner)), _c(inner, 0.5)))
    return l, _mm(l, phi)


# ----------------------------------------------------------------------------- triangular_solve

def _trsolve_da(g_a, ans, a, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    m, n = _shape(ans)[-2:]
    k = 1 if unit_diagonal else 0
    g_a = _tril(g_a, -k) if lower else _triu(g_a, k)
    g_a = lax.neg(g_a)
    if transpose_a:
        g_a = _T(g_a)
    if conjugate_a:
        g_a = lax.conj(g_a)

    def a_inv(rhs):
        return L.triangular_solve_p.bind(a, rhs, left_side=left_side, lower=lower, transpose_a=transpose_a,
                                         conjugate_a=conjugate_a, unit_diagonal=unit_diagonal)
    # A solve costs about a product: order the two to do the cheaper one on the smaller operand (as JAX).
    if left_side:
        return a_inv(_mm(g_a, ans)) if m > n else _mm(a_inv(g_a), ans)
    return a_inv(_mm(ans, g_a)) if m < n else _mm(ans, a_inv(g_a))


def triangular_solve_jvp(primals, tangents, **params):
    a, b = primals
    ta, tb = tangents
    out = L.triangular_solve_p.bind(a, b, **params)
    acc = None
    if not isinstance(tb, Zero):
        acc = L.triangular_solve_p.bind(a, tb, **params)
    if not isinstance(ta, Zero):
        c = _trsolve_da(ta, out, a, **params)
        acc = c if acc is None else lax.add(acc, c)
    return out, (zero_from_primal(out) if acc is None else acc)


def triangular_solve_transpose(ct, a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    """Linear in ``b`` only: the cotangent of ``b`` is a solve with ``op(a)`` transposed (as JAX's)."""
    if is_undefined(a):
        raise TypeError("triangular_solve is not linear in its matrix a: only b can be transposed")
    if isinstance(ct, Zero):
        return [None, Zero(b.aval)]
    return [None, L.triangular_solve_p.bind(a, ct, left_side=left_side, lower=lower,
                                            transpose_a=not transpose_a, conjugate_a=conjugate_a,
                                            unit_diagonal=unit_diagonal)]


def triangular_solve_batch(vals, dims, **params):
    """A batched ``b`` with an unbatched ``a`` folds the batch into ``b``'s columns (rows): one solve."""
    (a, b), (da, db) = vals, dims
    if da is not None:
        return _batch_rule(L.triangular_solve_p)(vals, dims, **params)
    bs = _shape(b)
    nd = len(bs)
    if params["left_side"]:  # b [..., m, n]: the batch axis next to n, then merged with it
        y = move_batch_dim(b, db, nd - 1)
        ys = _shape(y)
        out = L.triangular_solve_p.bind(a, lax.reshape(y, ys[:-2] + (ys[-2] * ys[-1],)), **params)
        return lax.reshape(out, ys), nd - 1
    y = move_batch_dim(b, db, nd - 2)  # b [..., n, m]: the batch axis next to n (rows)
    ys = _shape(y)
    out = L.triangular_solve_p.bind(a, lax.reshape(y, ys[:-3] + (ys[-3] * ys[-2], ys[-1])), **params)
    return lax.reshape(out, ys), nd - 2


# ----------------------------------------------------------------------------- lu

def _eye(n, d, batch):
    e = lax.convert_element_type(lax.eq(lax.iota(dtypes.int32, (n, n), 0), lax.iota(dtypes.int32, (n, n), 1)), d)
    return lax.broadcast_in_dim(e, tuple(batch) + (n, n), (len(batch), len(batch) + 1))


def _lu_factors(lu, m, n):
    """``L [..., m, m]`` (unit lower) and ``U [..., n, n]`` (with an identity below ``k = min(m, n)`` rows)."""
    k = min(m, n)
    nb = len(_shape(lu)) - 2
    batch = _shape(lu)[:nb]
    d = _dtype(lu)
    zero = _c(lu, 0)
    l_ = _tril(_cols(lu, 0, k), -1)
    l_ = lax.pad(l_, zero, [(0, 0, 0)] * (nb + 1) + [(0, m - k, 0)])
    l_ = lax.add(l_, _eye(m, d, batch))
    u = lax.pad(_triu(_rows(lu, 0, k)), zero, [(0, 0, 0)] * nb + [(0, n - k, 0), (0, 0, 0)])
    if n > k:
        tail = lax.pad(_eye(n - k, d, batch), zero, [(0, 0, 0)] * nb + [(k, 0, 0), (k, 0, 0)])
        u = lax.add(u, tail)
    return l_, u


def lu_jvp(primals, tangents):
    # De Hoog, Anderssen and Lukas: with X = inv(L) P dA inv(U), dL = L tril(X, -1) and dU = triu(X) U.
    (a,), (t,) = primals, tangents
    lu, piv, perm = L.lu_p.bind(a)
    zi = [zero_from_primal(piv), zero_from_primal(perm)]
    if isinstance(t, Zero):
        return [lu, piv, perm], [zero_from_primal(lu)] + zi
    m, n = _shape(a)[-2:]
    l_, u = _lu_factors(lu, m, n)
    pa, _ = _permute_rows(t, perm)
    la = L.triangular_solve_p.bind(l_, pa, left_side=True, lower=True, transpose_a=False, conjugate_a=False,
                                   unit_diagonal=True)
    lau = L.triangular_solve_p.bind(u, la, left_side=False, lower=False, transpose_a=False, conjugate_a=False,
                                    unit_diagonal=False)
    dlu = lax.add(_mm(l_, _tril(lau, -1)), _mm(_triu(lau), u))
    return [lu, piv, perm], [dlu] + zi


# ----------------------------------------------------------------------------- qr

def _thin_qr_jvp(q, r, dx):
    """JVP of ``x = q r`` with ``q [..., m, n]``, ``r [..., n, n]`` (m >= n): J. Townsend's derivation."""
    dx_rinv = L.triangular_solve_p.bind(r, dx, left_side=False, lower=False, transpose_a=False,
                                        conjugate_a=False, unit_diagonal=False)
    qt = _mm(_H(q), dx_rinv)
    low = _tril(qt, -1)
    do = lax.sub(low, _H(low))  # skew-Hermitian
    if dtypes.is_complex(_dtype(qt)):  # the diagonal's imaginary part (zero for real input)
        im = lax.sub(qt, _as(lax.real(qt), _dtype(qt)))
        do = lax.add(do, lax.mul(_eye_like(qt), im))
    dq = lax.add(_mm(q, lax.sub(do, qt)), dx_rinv)
    dr = _mm(lax.sub(qt, do), r)
    return dq, dr


def _solve_adjoint(a, b):
    """``x`` with ``a^H x = b`` through ``lu(a)`` (what JAX's ``lu_solve(..., trans=2)`` does)."""
    lu, _piv, perm = L.lu_p.bind(a)
    n = _shape(a)[-1]
    l_, u = _lu_factors(lu, n, n)
    y = L.triangular_solve_p.bind(u, b, left_side=True, lower=False, transpose_a=True, conjugate_a=True,
                                  unit_diagonal=False)
    z = L.triangular_solve_p.bind(l_, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True,
                                  unit_diagonal=True)
    _, onehot = _permute_rows(z, perm)
    return _mm(_T(onehot), z)  # a = P^T L U, so a^H = U^H L^H P and x = P^T z


def qr_jvp(primals, tangents, *, full_matrices):
    (x,), (dx,) = primals, tangents
    q, r = L.qr_p.bind(x, full_matrices=full_matrices)
    if isinstance(dx, Zero):
        return [q, r], [zero_from_primal(q), zero_from_primal(r)]
    m, n = _shape(x)[-2:]
    if m < n:  # wide: x = [x1 x2] = q [r1 r2]; r2 = q^H x2
        dq, dr1 = _thin_qr_jvp(q, _cols(r, 0, m), _cols(dx, 0, m))
        dr2 = lax.add(_mm(_H(dq), _cols(x, m, n)), _mm(_H(q), _cols(dx, m, n)))
        return [q, r], [dq, lax.concatenate([dr1, dr2], len(_shape(x)) - 1)]
    q_mn = _cols(q, 0, n) if full_matrices else q
    r_nn = _rows(r, 0, n) if full_matrices else r
    dq_mn, dr_nn = _thin_qr_jvp(q_mn, r_nn, dx)
    if not full_matrices or m == n:
        return [q, r], [dq_mn, dr_nn]
    # The completed columns (arXiv:2409.13374, eqs. 32-33): Z = Q_pn (Q_nn - I)^-1.
    q_nn, q_pn, q_mp = _rows(q_mn, 0, n), _rows(q_mn, n, m), _cols(q, n, m)
    dq_nn, dq_pn = _rows(dq_mn, 0, n), _rows(dq_mn, n, m)
    z_h = _solve_adjoint(lax.sub(q_nn, _eye_like(q_nn)), _H(q_pn))
    z = _H(z_h)
    dq_mp = lax.sub(_mm(dq_mn, z_h), _mm(lax.add(q_mn, _mm(q_mp, z)), _H(lax.sub(dq_pn, _mm(z, dq_nn)))))
    nd = len(_shape(x))
    dq = lax.concatenate([dq_mn, dq_mp], nd - 1)
    dr = lax.pad(dr_nn, _c(dr_nn, 0), [(0, 0, 0)] * (nd - 2) + [(0, m - n, 0), (0, 0, 0)])
    return [q, r], [dq, dr]


# ----------------------------------------------------------------------------- eigh

def _degenerate_pairs(w, shape):
    """``[..., i, j]``: ``w_i`` and ``w_j`` (real, ``[..., n]``) are equal to within ``n`` ulps of the largest
    ``|w|`` of their matrix, the diagonal included: what an eigensolver cannot tell apart."""
    n = _shape(w)[-1]
    nd = len(shape)
    scale = lax.reduce_max(lax.abs(w), (nd - 2,))
    tol = lax.mul(scale, _c(w, n * float(np.finfo(_dtype(w)).eps)))
    gaps = lax.abs(lax.sub(_row_vec(w, shape), _col_vec(w, shape)))
    return lax.le(gaps, lax.broadcast_in_dim(tol, shape, tuple(range(nd - 2))))


def _masked_inverse(x, mask):
    """``1 / x`` where ``mask`` is false, 0 where it is true (no inf or NaN reaches either branch)."""
    one = _c(x, 1)
    safe = lax.select(mask, lax.full(_shape(x), one, _dtype(x)), x)
    return lax.select(mask, lax.zeros_like(x), lax.div(one, safe))


def _gap_inverse(w, d):
    """``F[..., i, j] = 1 / (w_j - w_i)``, and 0 where ``w_i`` and ``w_j`` are degenerate (the diagonal too).

    Inside a degenerate eigenspace the eigenvectors are any basis of it and their derivative is undefined
    (JAX puts inf there, which turns the whole gradient into NaN, even the parts that are well defined:
    a vector outside the subspace, or one coupled to the subspace only through other eigenvalues). The
    terms between such pairs are dropped, as if the perturbation did not rotate the basis within the
    subspace; every term between distinct eigenvalues is kept (docs/linalg.md)."""
    n = _shape(w)[-1]
    shape = _shape(w)[:-1] + (n, n)
    gaps = lax.sub(_row_vec(w, shape), _col_vec(w, shape))
    return _as(_masked_inverse(gaps, _degenerate_pairs(w, shape)), d)


def eigh_jvp(primals, tangents, *, lower):
    # Non-degenerate perturbation theory (Giles 2008): dw = diag(V^H dA V), dV = V (F o V^H dA V).
    (a,), (t,) = primals, tangents
    v, w = L.eigh_p.bind(a, lower=lower)
    if isinstance(t, Zero):
        return [v, w], [zero_from_primal(v), zero_from_primal(w)]
    d = _dtype(a)
    vav = _mm(_mm(_H(v), t), v)
    dv = _mm(v, lax.mul(_gap_inverse(w, d), vav))
    dw = _diagonal(lax.real(vav) if dtypes.is_complex(d) else vav)
    return [v, w], [dv, dw]


# ----------------------------------------------------------------------------- svd

def svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    (a,), (da,) = primals, tangents
    m, n = _shape(a)[-2:]
    if compute_uv and full_matrices and m != n:
        raise ValueError(
            f"the derivative of svd(full_matrices=True) of a non-square {m}x{n} matrix is not defined (the "
            "completing singular vectors are any basis of a null space; JAX raises too): use "
            "full_matrices=False, or compute_uv=False for the singular values alone")
    s, u, vt = L.svd_p.bind(a, full_matrices=False, compute_uv=True)
    outs = [s, u, vt] if compute_uv else [s]
    if isinstance(da, Zero):
        return outs, [zero_from_primal(o) for o in outs]
    d = _dtype(a)
    k = _shape(s)[-1]
    sq = _shape(s)[:-1] + (k, k)
    ut, v = _H(u), _H(vt)
    ds_mat = _mm(_mm(ut, da), v)
    ds = _diagonal(lax.real(ds_mat) if dtypes.is_complex(d) else ds_mat)
    if not compute_uv:
        return outs, [ds]
    s_row, s_col = _row_vec(s, sq), _col_vec(s, sq)
    eye = _eye(k, _dtype(s), sq[:-2])
    diffs = lax.mul(lax.add(s_row, s_col), lax.sub(s_row, s_col))
    # 1/(s_j^2 - s_i^2), and 0 between repeated singular values (the diagonal too), as eigh's _gap_inverse.
    f = _masked_inverse(diffs, _degenerate_pairs(s, sq))
    s_row_d = _as(s_row, d)
    dss = lax.mul(s_row_d, ds_mat)  # dS diag(s)
    sds = lax.mul(_as(s_col, d), ds_mat)  # diag(s) dS
    s_zero = _as(lax.eq(s, _c(s, 0)), _dtype(s))
    s_inv = lax.sub(lax.div(_c(s, 1), lax.add(s, s_zero)), s_zero)
    s_inv_mat = lax.mul(_row_vec(s_inv, sq), eye)
    fd = _as(f, d)
    du_dv_diag = lax.mul(lax.mul(lax.sub(ds_mat, _H(ds_mat)), _c(ds_mat, 0.5)), _as(s_inv_mat, d))
    du = _mm(u, lax.add(lax.mul(fd, lax.add(dss, _H(dss))), du_dv_diag))
    dv = _mm(v, lax.mul(fd, lax.add(sds, _H(sds))))
    if m > n:
        dav = _mm(da, v)
        du = lax.add(du, lax.div(lax.sub(dav, _mm(u, _mm(ut, dav))), _row_vec(_as(s, d), (*sq[:-2], m, k))))
    if n > m:
        dahu = _mm(_H(da), u)
        dv = lax.add(dv, lax.div(lax.sub(dahu, _mm(v, _mm(vt, dahu))), _row_vec(_as(s, d), (*sq[:-2], n, k))))
    return outs, [ds, du, _H(dv)]


primitive_jvps[L.cholesky_p] = cholesky_jvp
primitive_jvps[L.triangular_solve_p] = triangular_solve_jvp
primitive_transposes[L.triangular_solve_p] = triangular_solve_transpose
primitive_batchers[L.triangular_solve_p] = triangular_solve_batch
primitive_jvps[L.lu_p] = lu_jvp
primitive_jvps[L.qr_p] = qr_jvp
primitive_jvps[L.eigh_p] = eigh_jvp
primitive_jvps[L.svd_p] = svd_jvp
