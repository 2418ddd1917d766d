"""Dense linear algebra with SciPy's names and conventions (mirrors ``jax.scipy.linalg``).

Every function is written over the linear-algebra primitives of ``fnarray.lax.linalg`` (``cholesky``,
``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``), so it is batched over leading axes, differentiable
through those primitives' rules and runs on every backend. Integer and bool inputs are computed in
``float32``; float16/bfloat16 in float32.

As in JAX, SciPy's ``overwrite_*`` and ``check_finite`` arguments are accepted and ignored (arrays are
immutable, and a finiteness check would read every input back to the host); a matrix that is not positive
definite gives a ``cholesky`` of NaNs and a singular ``solve``/``inv`` gives inf/NaN, never an error. For an
eager error, ``cholesky``/``cho_factor`` take ``check_pd=True``: it raises ``LinAlgError`` (a
``numpy.linalg.LinAlgError``) naming the first matrix of the batch that is not positive definite.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import linalg as lax_linalg
from fnarray.core.errors import ConcretizationError, DTypeError, LinAlgError, ShapeError
from fnarray.scipy._util import matrix as _matrix

__all__ = ["block_diag", "cho_factor", "cho_solve", "cholesky", "det", "eigh", "expm", "inv", "lu", "lu_factor",
           "lu_solve", "qr", "solve", "solve_triangular", "svd"]


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _rhs(name, a, b):
    """``(b as an array of a's dtype with a's batch broadcast, whether b was a vector)``."""
    from fnarray.numpy._util import asarray_internal, broadcast_shapes, check_arraylike
    check_arraylike(name, b)
    b = asarray_internal(b)
    d = dtypes.result_type((a.dtype, False), (b.dtype, b.weak_type))[0]
    if d not in lax_linalg.LINALG_DTYPES:
        d = dtypes.float32
    n = a.shape[-1]
    # As NumPy 2 and JAX >= 0.5: b is a vector only when it is 1-d; a batch of vectors is (..., n, 1).
    vector = b.ndim == 1
    if b.ndim < 1 or (b.shape[-1] if vector else b.shape[-2]) != n:
        raise ShapeError(f"{name}: b of shape {b.shape} does not match a of shape {a.shape}: b must be "
                         f"({n},) or (..., {n}, k); for a batch of vectors pass b[..., None]")
    if vector:
        b = b[..., None]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], name=name)
    a = _bcast(lax.convert_element_type(a, d) if a.dtype != d else a, batch + a.shape[-2:])
    b = _bcast(lax.convert_element_type(b, d) if b.dtype != d else b, batch + b.shape[-2:])
    return a, b, vector


def _bcast(x, shape):
    return x if x.shape == tuple(shape) else lax.broadcast_to_rank_shape(x, tuple(shape))


def _ct(x):
    """The conjugate transpose of the last two axes."""
    fnp = _fnp()
    t = fnp.matrix_transpose(x)
    return fnp.conj(t) if dtypes.is_complex(x.dtype) else t


def _check_pd(name, factor):
    from fnarray.core.tracing import Tracer
    if isinstance(factor, Tracer):
        raise ConcretizationError(f"{name}(check_pd=True) reads the factor back to raise eagerly, which is "
                                  "impossible under jit/vmap/grad; there, test fnarray.numpy.isnan on the result")
    f = np.asarray(factor)
    bad = np.isnan(f).any(axis=(-2, -1))
    if bad.any():
        where = "" if bad.ndim == 0 else f" (batch element {tuple(int(i) for i in np.argwhere(bad)[0])})"
        raise LinAlgError(f"{name}: the matrix is not positive definite{where}; the factor would be "
                                    "NaN. Add a small multiple of the identity (jitter) or check the input")


# ----------------------------------------------------------------------------- Cholesky


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, check_pd=False):
    """The Cholesky factor of Hermitian positive-definite matrices (``scipy.linalg.cholesky``).

    Args:
      a: ``(..., n, n)`` float or complex; only its symmetric part ``(a + a^H) / 2`` is used.
      lower: return the lower factor ``L`` (``a = L L^H``); by default the upper ``U = L^H`` (``a = U^H U``),
        as SciPy and JAX.
      overwrite_a, check_finite: accepted for SciPy compatibility and ignored (as JAX).
      check_pd: raise ``LinAlgError`` for a matrix that is not positive definite (eager only).

    Returns:
      The triangular factor, of ``a``'s shape and dtype, zero in the other triangle; for a matrix that is not
      positive definite NaN in the factor's triangle, as JAX (or an error with ``check_pd``).

    Raises:
      ShapeError: ``a`` is not a batch of square matrices.
      DTypeError: ``a`` has no float or complex dtype.
      LinAlgError: (a ``numpy.linalg.LinAlgError``) with ``check_pd``, a matrix that is not positive definite.
      ConcretizationError: ``check_pd`` under a transform.
    """
    del overwrite_a, check_finite
    a = _matrix("cholesky", a)
    low = lax_linalg.cholesky(a)
    if check_pd:
        _check_pd("cholesky", low)
    return low if lower else _ct(low)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, check_pd=False):
    """``(c, lower)`` for ``cho_solve`` (``scipy.linalg.cho_factor``): ``c = cholesky(a, lower)``.

    Unlike SciPy, the other triangle of ``c`` is zero (not left over from ``a``), as JAX.

    Args:
      a: ``(..., n, n)`` Hermitian positive definite.
      lower: which factor.
      overwrite_a, check_finite: ignored (as JAX).
      check_pd: as ``cholesky``.

    Returns:
      ``(c, lower)``.

    Raises:
      As ``cholesky``.
    """
    return cholesky(a, lower=lower, check_pd=check_pd), bool(lower)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` from ``cho_factor(a)`` (``scipy.linalg.cho_solve``): two triangular solves.

    Args:
      c_and_lower: ``(c, lower)`` from ``cho_factor``.
      b: ``(n,)`` or ``(..., n, k)`` (a batch of vectors: ``(..., n, 1)``, as NumPy 2);
        batch axes broadcast with ``c``'s.
      overwrite_b, check_finite: ignored (as JAX).

    Returns:
      ``x`` of the broadcast shape of ``b``.

    Raises:
      ShapeError: ``b`` does not match ``c``.
      TypeError: ``c_and_lower`` is not a pair.
    """
    del overwrite_b, check_finite
    try:
        c, lower = c_and_lower
    except (TypeError, ValueError):
        raise TypeError("cho_solve needs (c, lower) as returned by cho_factor") from None
    c = _matrix("cho_solve", c)
    c, b, vector = _rhs("cho_solve", c, b)
    low = c if lower else _ct(c)
    y = lax_linalg.triangular_solve(low, b, left_side=True, lower=True)
    x = lax_linalg.triangular_solve(low, y, left_side=True, lower=True, transpose_a=True, conjugate_a=True)
    return x[..., 0] if vector else x


_TRANS = {0: (False, False), "N": (False, False), 1: (True, False), "T": (True, False), 2: (True, True),
          "C": (True, True)}


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, debug=None,
                     check_finite=True):
    """Solve ``op(a) x = b`` for triangular ``a`` (``scipy.linalg.solve_triangular``).

    Args:
      a: ``(..., n, n)``; only the triangle named by ``lower`` is read (not its diagonal with
        ``unit_diagonal``).
      b: ``(n,)`` or ``(..., n, k)`` (a batch of vectors: ``(..., n, 1)``, as NumPy 2);
        batch axes broadcast with ``a``'s.
      trans: ``0``/``"N"`` (``a``), ``1``/``"T"`` (``a^T``) or ``2``/``"C"`` (``a^H``).
      lower: ``a`` is lower (else upper) triangular.
      unit_diagonal: assume ones on the diagonal.
      overwrite_b, debug, check_finite: ignored (as JAX).

    Returns:
      ``x`` of ``b``'s (broadcast) shape and the promoted dtype.

    Raises:
      ValueError: an unknown ``trans``.
      ShapeError: ``a`` not square, or ``b`` does not match it.
    """
    del overwrite_b, debug, check_finite
    if trans not in _TRANS:
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    transpose, conj = _TRANS[trans]
    a = _matrix("solve_triangular", a)
    a, b, vector = _rhs("solve_triangular", a, b)
    x = lax_linalg.triangular_solve(a, b, left_side=True, lower=bool(lower), transpose_a=transpose,
                                    conjugate_a=conj, unit_diagonal=bool(unit_diagonal))
    return x[..., 0] if vector else x


# ----------------------------------------------------------------------------- LU


def _permutation_matrix(perm, n, dtype):
    """``P`` with ``P[i, perm[i]] = 1`` (so ``P @ x == x[perm]``), batched over ``perm``'s leading axes."""
    fnp = _fnp()
    return (perm[..., :, None] == fnp.arange(n, dtype=perm.dtype)).astype(dtype)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True):
    """LU decomposition with partial pivoting, ``a = p @ l @ u`` (``scipy.linalg.lu``).

    Args:
      a: ``(..., m, n)`` float or complex.
      permute_l: return ``(p @ l, u)`` instead of ``(p, l, u)``.
      overwrite_a, check_finite: ignored (as JAX).

    Returns:
      ``(p, l, u)``: the permutation matrix ``p`` ``(..., m, m)`` of ``a``'s dtype, ``l`` ``(..., m, k)`` unit
      lower triangular and ``u`` ``(..., k, n)`` upper triangular, ``k = min(m, n)``.

    Raises:
      ShapeError: ``a`` has rank below 2.
      DTypeError: ``a`` has no float or complex dtype.
    """
    del overwrite_a, check_finite
    fnp = _fnp()
    a = _matrix("lu", a, square=False)
    m, n = a.shape[-2:]
    k = min(m, n)
    packed, _, perm = lax_linalg.lu(a)
    l_ = fnp.tril(packed[..., :, :k], k=-1) + fnp.eye(m, k, dtype=a.dtype)
    u = fnp.triu(packed[..., :k, :])
    # a[perm] = l u, so a = P^T l u with P[i, perm[i]] = 1.
    p = fnp.matrix_transpose(_permutation_matrix(perm, m, a.dtype))
    if permute_l:
        return fnp.matmul(p, l_), u
    return p, l_, u


def lu_factor(a, overwrite_a=False, check_finite=True):
    """``(lu, piv)`` for ``lu_solve`` (``scipy.linalg.lu_factor``; LAPACK's ``getrf``).

    Args:
      a: ``(..., n, n)`` float or complex.
      overwrite_a, check_finite: ignored (as JAX).

    Returns:
      ``lu`` (``l``'s strict lower part and ``u``) of ``a``'s shape and dtype, and ``piv`` ``int32 (..., n)``:
      row ``i`` was interchanged with row ``piv[i]``.

    Raises:
      ShapeError: ``a`` is not a batch of square matrices.
      DTypeError: ``a`` has no float or complex dtype.
    """
    del overwrite_a, check_finite
    a = _matrix("lu_factor", a)
    packed, piv, _ = lax_linalg.lu(a)
    return packed, piv


def _pivots_to_permutation(piv, m):
    """The row permutation of LAPACK-style pivots (``x[perm] == (row swaps applied in order)(x)``)."""
    from fnarray.transforms.control_flow import fori_loop
    fnp = _fnp()
    k = piv.shape[-1]
    rows = fnp.arange(m, dtype=piv.dtype)
    perm = fnp.broadcast_to(rows, piv.shape[:-1] + (m,))

    def swap(i, p):
        at_i = fnp.full(piv.shape[:-1] + (1,), i, dtype=piv.dtype)
        j = fnp.take_along_axis(piv, at_i, axis=-1, mode="promise_in_bounds")
        pj = fnp.take_along_axis(p, j, axis=-1, mode="promise_in_bounds")
        pi = fnp.take_along_axis(p, at_i, axis=-1, mode="promise_in_bounds")
        return fnp.where(rows == i, pj, fnp.where(rows == j, pi, p))

    return fori_loop(0, k, swap, perm)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``op(a) x = b`` from ``lu_factor(a)`` (``scipy.linalg.lu_solve``).

    Args:
      lu_and_piv: ``(lu, piv)`` from ``lu_factor``.
      b: ``(n,)`` or ``(..., n, k)`` (a batch of vectors: ``(..., n, 1)``, as NumPy 2);
        batch axes broadcast with ``lu``'s.
      trans: ``0`` (``a x = b``), ``1`` (``a^T x = b``) or ``2`` (``a^H x = b``).
      overwrite_b, check_finite: ignored (as JAX).

    Returns:
      ``x`` of ``b``'s (broadcast) shape.

    Raises:
      ValueError: an unknown ``trans``.
      TypeError: ``lu_and_piv`` is not a pair.
      ShapeError: ``b`` does not match ``lu``.
    """
    del overwrite_b, check_finite
    fnp = _fnp()
    if trans not in (0, 1, 2):
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    try:
        packed, piv = lu_and_piv
    except (TypeError, ValueError):
        raise TypeError("lu_solve needs (lu, piv) as returned by lu_factor") from None
    packed = _matrix("lu_solve", packed)
    piv = fnp.asarray(piv)
    n = packed.shape[-1]
    perm = _pivots_to_permutation(piv, n)
    packed, b, vector = _rhs("lu_solve", packed, b)
    perm = _bcast(perm, packed.shape[:-2] + (n,))
    if trans == 0:
        pb = fnp.take_along_axis(b, perm[..., :, None], axis=-2, mode="promise_in_bounds")
        y = lax_linalg.triangular_solve(packed, pb, left_side=True, lower=True, unit_diagonal=True)
        x = lax_linalg.triangular_solve(packed, y, left_side=True, lower=False)
    else:
        conj = trans == 2
        y = lax_linalg.triangular_solve(packed, b, left_side=True, lower=False, transpose_a=True, conjugate_a=conj)
        z = lax_linalg.triangular_solve(packed, y, left_side=True, lower=True, transpose_a=True, conjugate_a=conj,
                                        unit_diagonal=True)
        inverse = fnp.argsort(perm, axis=-1).astype(perm.dtype)
        x = fnp.take_along_axis(z, inverse[..., :, None], axis=-2, mode="promise_in_bounds")
    return x[..., 0] if vector else x


# ----------------------------------------------------------------------------- QR, eigh, SVD


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True):
    """QR decomposition (``scipy.linalg.qr``), Householder as LAPACK.

    Args:
      a: ``(..., m, n)`` float or complex.
      overwrite_a, lwork, check_finite: ignored (as JAX).
      mode: ``"full"`` (``q`` ``(..., m, m)``, ``r`` ``(..., m, n)``), ``"economic"`` (``(..., m, k)``,
        ``(..., k, n)``, ``k = min(m, n)``) or ``"r"`` (``r`` only, full shape).
      pivoting: must be False (column pivoting is not offered).

    Returns:
      ``(q, r)``, or ``(r,)`` for ``mode="r"`` (a one-tuple, as SciPy).

    Raises:
      ValueError: another ``mode`` (``"raw"`` included), or ``pivoting=True``.
      ShapeError: ``a`` has rank below 2.
    """
    del overwrite_a, lwork, check_finite
    if mode not in ("full", "economic", "r"):
        raise ValueError(f"qr: mode must be 'full', 'economic' or 'r', got {mode!r}")
    if pivoting:
        raise ValueError("qr: pivoting=True (column-pivoted QR, LAPACK geqp3) is not offered; use pivoting=False, "
                         "or fnarray.numpy.linalg.svd for a rank-revealing factorization")
    a = _matrix("qr", a, square=False)
    q, r = lax_linalg.qr(a, full_matrices=mode != "economic")
    return (r,) if mode == "r" else (q, r)


def eigh(a, b=None, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False, turbo=True,
         eigvals=None, type=1, check_finite=True):  # noqa: A002 (SciPy's name)
    """Eigenvalues (ascending) and eigenvectors of Hermitian matrices (``scipy.linalg.eigh``).

    With ``b`` (Hermitian positive definite) the generalized problem ``a v = w b v`` (``type=1``) is reduced
    to a standard one by ``b = L L^H``: ``L^-1 a L^-H``, and ``v = L^-H v'`` (``b``-orthonormal, as SciPy).

    Args:
      a: ``(..., n, n)``; only the triangle named by ``lower`` is read.
      b: optional ``(..., n, n)`` Hermitian positive definite.
      lower: read the lower (else upper) triangle.
      eigvals_only: return ``w`` only.
      overwrite_a, overwrite_b, turbo, check_finite: ignored (as JAX).
      eigvals: must be None (subsets are not offered).
      type: must be 1 for a generalized problem.

    Returns:
      ``(w, v)``: eigenvalues ``(..., n)`` (real) ascending and eigenvectors in the columns of ``v``; or ``w``.

    Raises:
      ValueError: ``eigvals`` given, or ``type`` other than 1 with ``b``.
      ShapeError: ``a`` (or ``b``) not a batch of square matrices of one size.
    """
    del overwrite_a, overwrite_b, turbo, check_finite
    if eigvals is not None:
        raise ValueError("eigh: eigvals (a subset of eigenvalues) is not offered; compute all and slice")
    fnp = _fnp()
    a = _matrix("eigh", a)
    if b is None:
        v, w = lax_linalg.eigh(a, lower=bool(lower), symmetrize_input=False)
        return w if eigvals_only else (w, v)
    if type != 1:
        raise ValueError(f"eigh: only type=1 (a v = w b v) is offered for a generalized problem, got {type}")
    b = _matrix("eigh", b)
    if b.shape[-1] != a.shape[-1]:
        raise ShapeError(f"eigh: a {a.shape} and b {b.shape} must have the same size")
    tri = fnp.tril if lower else fnp.triu
    a_full = tri(a) + _ct(tri(a, k=-1 if lower else 1))
    low = lax_linalg.cholesky(b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    low = _bcast(low, batch + low.shape[-2:])
    a_full = _bcast(a_full, batch + a_full.shape[-2:])
    t = lax_linalg.triangular_solve(low, a_full, left_side=True, lower=True)
    c = _ct(lax_linalg.triangular_solve(low, _ct(t), left_side=True, lower=True))
    v, w = lax_linalg.eigh(c)
    if eigvals_only:
        return w
    return w, lax_linalg.triangular_solve(low, v, left_side=True, lower=True, transpose_a=True, conjugate_a=True)


def svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True, lapack_driver="gesdd"):
    """Singular value decomposition ``a = u @ diag(s) @ vh`` (``scipy.linalg.svd``).

    Args:
      a: ``(..., m, n)`` float or complex.
      full_matrices: ``u`` ``(..., m, m)``, ``vh`` ``(..., n, n)``; else ``(..., m, k)``, ``(..., k, n)``.
      compute_uv: also return the singular vectors.
      overwrite_a, check_finite: ignored (as JAX).
      lapack_driver: ``"gesdd"`` or ``"gesvd"``; accepted and ignored (one algorithm serves both).

    Returns:
      ``(u, s, vh)`` with ``s`` ``(..., k)`` real and descending; or ``s``.

    Raises:
      ValueError: another ``lapack_driver``.
      ShapeError: ``a`` has rank below 2.
    """
    del overwrite_a, check_finite
    if lapack_driver not in ("gesdd", "gesvd"):
        raise ValueError(f"svd: lapack_driver must be 'gesdd' or 'gesvd', got {lapack_driver!r}")
    a = _matrix("svd", a, square=False)
    return lax_linalg.svd(a, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))


# ----------------------------------------------------------------------------- solve, inv, det


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, debug=False, check_finite=True, assume_a="gen"):
    """Solve ``a x = b`` (``scipy.linalg.solve``).

    Args:
      a: ``(..., n, n)``.
      b: ``(n,)`` or ``(..., n, k)`` (a batch of vectors: ``(..., n, 1)``, as NumPy 2);
        batch axes broadcast with ``a``'s.
      lower: with ``assume_a="pos"``, read the lower (else upper) triangle of ``a``.
      overwrite_a, overwrite_b, debug, check_finite: ignored (as JAX).
      assume_a: ``"gen"``, ``"sym"`` or ``"her"`` (LU with partial pivoting), or ``"pos"`` (Cholesky; ``a``
        Hermitian positive definite).

    Returns:
      ``x`` of ``b``'s (broadcast) shape. A singular ``a`` gives inf/NaN (as JAX; SciPy raises).

    Raises:
      ValueError: an unknown ``assume_a``.
      ShapeError: ``a`` not square or ``b`` does not match it.
    """
    del overwrite_a, overwrite_b, debug, check_finite
    if assume_a not in ("gen", "sym", "her", "pos"):
        raise ValueError(f"solve: assume_a must be 'gen', 'sym', 'her' or 'pos', got {assume_a!r}")
    fnp = _fnp()
    a = _matrix("solve", a)
    a, b2, vector = _rhs("solve", a, b)
    if assume_a == "pos":
        tri = fnp.tril if lower else fnp.triu
        full = tri(a) + _ct(tri(a, k=-1 if lower else 1))
        x = cho_solve((lax_linalg.cholesky(full), True), b2)
    else:
        x = lu_solve(lu_factor(a), b2)
    return x[..., 0] if vector else x


def inv(a, overwrite_a=False, check_finite=True):
    """The inverse of square matrices (``scipy.linalg.inv``), by LU with partial pivoting.

    Args:
      a: ``(..., n, n)``.
      overwrite_a, check_finite: ignored (as JAX).

    Returns:
      ``a^-1`` of ``a``'s shape and dtype; inf/NaN for a singular matrix (as JAX; SciPy raises).

    Raises:
      ShapeError: ``a`` is not a batch of square matrices.
    """
    del overwrite_a, check_finite
    fnp = _fnp()
    a = _matrix("inv", a)
    n = a.shape[-1]
    return solve(a, _bcast(fnp.eye(n, dtype=a.dtype), a.shape))


def det(a, overwrite_a=False, check_finite=True):
    """The determinant of square matrices (``scipy.linalg.det``): the product of ``u``'s diagonal in an LU
    decomposition, times the sign of its permutation.

    Args:
      a: ``(..., n, n)``.
      overwrite_a, check_finite: ignored (as JAX).

    Returns:
      ``(...)`` of ``a``'s dtype.

    Raises:
      ShapeError: ``a`` is not a batch of square matrices.
    """
    del overwrite_a, check_finite
    fnp = _fnp()
    a = _matrix("det", a)
    n = a.shape[-1]
    if n == 0:
        return fnp.ones(a.shape[:-2], dtype=a.dtype)
    packed, piv, _ = lax_linalg.lu(a)
    swaps = fnp.sum((piv != fnp.arange(n, dtype=piv.dtype)).astype(dtypes.int32), axis=-1)
    sign = 1 - 2 * (swaps % 2)
    return fnp.prod(fnp.diagonal(packed, axis1=-2, axis2=-1), axis=-1) * sign.astype(a.dtype)


# ----------------------------------------------------------------------------- expm


# Higham (2005), "The scaling and squaring method for the matrix exponential revisited", table 2.3 (double
# precision) and Higham's single-precision values: the largest 1-norm for which the [m/m] Pade approximant is
# accurate to the unit roundoff.
_THETA_64 = {3: 1.495585217958292e-2, 5: 2.539398330063230e-1, 7: 9.504178996162932e-1, 9: 2.097847961257068,
             13: 5.371920351148152}
_THETA_32 = {3: 4.258730016922831e-1, 5: 1.880152677804762, 7: 3.925724783138660}


def _pade_coefficients(m):
    """``b_j = (2m - j)! m! / ((2m)! j! (m - j)!)``, the coefficients of the [m/m] Pade approximant of exp."""
    f = math.factorial
    return [f(2 * m - j) * f(m) / (f(2 * m) * f(j) * f(m - j)) for j in range(m + 1)]


def _pade(a, powers, m):
    """``(p, q)``: numerator ``V + U`` and denominator ``V - U`` of the [m/m] approximant, with ``U`` the odd and
    ``V`` the even part, from the even powers ``powers[j] = a^(2j)``."""
    fnp = _fnp()
    b = _pade_coefficients(m)
    even = sum(b[2 * j] * powers[j] for j in range(m // 2 + 1))
    odd = fnp.matmul(a, sum(b[2 * j + 1] * powers[j] for j in range((m - 1) // 2 + 1)))
    return even + odd, even - odd


def expm(A, *, upper_triangular=False, max_squarings=16):  # noqa: N803 (JAX's name)
    """The matrix exponential (``scipy.linalg.expm``; ``jax.scipy.linalg.expm``).

    Method: Higham (2005), scaling and squaring with Pade approximants: the smallest degree ``m`` (3, 5, 7, 9
    or 13 in float64; 3, 5 or 7 in float32) whose threshold ``theta_m`` bounds the 1-norm, else the highest
    degree on ``A / 2**s`` followed by ``s`` squarings (``s <= max_squarings``). Every degree is computed and
    the right one selected per matrix (so it works under ``jit`` and ``vmap``), and the squarings run in a
    ``scan`` of ``max_squarings`` steps: the result is differentiable.

    Args:
      A: ``(..., n, n)`` float or complex.
      upper_triangular: accepted (JAX's hint) and ignored: the general method is used.
      max_squarings: the most squarings; a matrix needing more (a 1-norm above ``theta * 2**max_squarings``)
        gives a less accurate result rather than an error.

    Returns:
      ``exp(A)`` of ``A``'s shape and dtype.

    Raises:
      ShapeError: ``A`` is not a batch of square matrices.
      ValueError: ``max_squarings`` is not a non-negative int.
    """
    del upper_triangular
    from fnarray.transforms.control_flow import scan
    if isinstance(max_squarings, bool) or not isinstance(max_squarings, (int, np.integer)) or max_squarings < 0:
        raise ValueError(f"expm: max_squarings must be a non-negative int, got {max_squarings!r}")
    fnp = _fnp()
    a = _matrix("expm", A)
    n = a.shape[-1]
    if n == 0:
        return a
    real = dtypes.float64 if a.dtype in (dtypes.float64, dtypes.complex128) else dtypes.float32
    theta = _THETA_64 if real == dtypes.float64 else _THETA_32
    degrees = sorted(theta)
    top = degrees[-1]
    norm = fnp.max(fnp.sum(fnp.abs(a), axis=-2), axis=-1)   # the 1-norm, (...)
    s = fnp.ceil(fnp.log2(fnp.maximum(norm / theta[top], 1.0)))
    s = fnp.where(fnp.isfinite(s), fnp.clip(s, 0, max_squarings), 0).astype(dtypes.int32)
    eye = _bcast(fnp.eye(n, dtype=a.dtype), a.shape)

    def approximant(x, m):
        x2 = fnp.matmul(x, x)
        powers = [eye, x2]
        while len(powers) <= m // 2:
            powers.append(fnp.matmul(powers[-1], x2))
        p, q = _pade(x, powers, m)
        return solve(q, p)

    scale = fnp.exp2(-s.astype(real)).astype(a.dtype)[..., None, None]
    r = approximant(a * scale, top)
    for m in reversed(degrees[:-1]):
        r = fnp.where((norm <= theta[m])[..., None, None], approximant(a, m), r)

    def square(carry, i):
        return fnp.where((i < s)[..., None, None], fnp.matmul(carry, carry), carry), None

    r, _ = scan(square, r, fnp.arange(max_squarings, dtype=dtypes.int32))
    return r


def block_diag(*arrs):
    """The block-diagonal matrix of the given blocks (``scipy.linalg.block_diag``).

    Args:
      *arrs: arrays of rank at most 2 (a scalar is a 1x1 block, a vector a 1xn row).

    Returns:
      ``(sum of rows, sum of columns)`` of the promoted dtype; ``(1, 0)`` float32 for no blocks (as SciPy).

    Raises:
      ShapeError: a block of rank above 2.
      TypeError: a block is not an array or a scalar.
    """
    from fnarray.numpy._util import asarray_internal, check_arraylike, promote
    fnp = _fnp()
    if not arrs:
        return fnp.zeros((1, 0), dtype=dtypes.float32)
    check_arraylike("block_diag", *arrs)
    blocks = []
    for x in arrs:
        x = asarray_internal(x)
        if x.ndim > 2:
            raise ShapeError(f"block_diag takes blocks of rank at most 2, got shape {x.shape}")
        blocks.append(fnp.reshape(x, (1, 1) if x.ndim == 0 else (1, x.shape[0]) if x.ndim == 1 else x.shape))
    blocks = promote("block_diag", *blocks)
    total = sum(b.shape[1] for b in blocks)
    rows, col = [], 0
    for b in blocks:
        rows.append(fnp.pad(b, ((0, 0), (col, total - col - b.shape[1]))))
        col += b.shape[1]
    return fnp.concatenate(rows, axis=0)


def _install_eager_jit():
    import sys

    from fnarray.transforms import eager_jit  # eager calls run as cached jitted programs
    # dft, hadamard, hilbert and pascal are constants made on the host from a size: no program to cache
    eager_jit.install(sys.modules[__name__], excluded=("dft", "hadamard", "hilbert", "pascal"))


from fnarray.scipy._special_matrices import (circulant, companion, dft, hadamard, hankel, hilbert,  # noqa: E402
                                             pascal, toeplitz)

from fnarray.scipy._matrix_functions import polar, schur, sqrtm  # noqa: E402

__all__ += ["circulant", "companion", "dft", "hadamard", "hankel", "hilbert", "pascal", "toeplitz", "polar", "schur",
            "sqrtm"]
_install_eager_jit()
