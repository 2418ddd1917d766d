"""The linear-algebra primitives and their wrappers (as ``jax.lax.linalg``), public as ``fnarray.lax.linalg``.

Each primitive works on the last two axes and is batched over every leading axis; inputs are ``float32``,
``float64``, ``complex64`` or ``complex128`` (``fnarray.numpy.linalg`` promotes integers first). Names,
parameters and the order of the results are JAX's (``jax/_src/lax/linalg.py``):

- ``cholesky(x)``: the lower factor ``L`` (``L @ L^H == x``), reading only the lower triangle of ``x``; its
  strict upper triangle is zero. A matrix that is not positive definite gives NaN in its whole lower
  triangle (that batch element only; the upper stays zero), as JAX does; nothing raises.
- ``triangular_solve(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal)``: ``op(a) @ x = b``
  (``left_side``) or ``x @ op(a) = b``; reads only the triangle of ``a`` named by ``lower`` (and not its
  diagonal with ``unit_diagonal``); a zero on the diagonal makes that matrix's solution non-finite
  (inf/NaN; the numpy reference substitutes row by row with IEEE arithmetic, mlx gives NaN).
- ``lu(x)``: LAPACK's ``getrf`` with partial pivoting: ``(lu, pivots, permutation)``, ``pivots`` and
  ``permutation`` ``int32``, ``x[..., permutation, :] == L @ U`` (``L`` unit lower in ``lu``'s strict lower
  triangle, ``U`` in its upper triangle). A singular matrix is factored (``U`` has a zero pivot).
- ``qr(x, full_matrices)``: Householder QR as LAPACK's ``geqrf``/``orgqr``: ``(q, r)``.
- ``eigh(x, lower)``: ``(v, w)``: eigenvectors in the columns of ``v``, eigenvalues ``w`` (real) ascending;
  reads only the triangle named by ``lower``.
- ``svd(x, full_matrices, compute_uv)``: ``(s, u, vh)`` (``(s,)`` without ``compute_uv``), ``s``
  descending, as ``jax.lax.linalg.svd_p``; the wrapper ``svd`` returns ``(u, s, vh)``.

Derivatives (``fnarray/transforms/linalg_rules.py``) are JAX's formulas. Where eigenvalues (``eigh``) or
singular values (``svd``) repeat, the derivative of the eigen/singular *vectors* divides by their gap: it
is inf/NaN there, exactly as JAX's, while the derivative of the values themselves stays finite.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["cholesky", "triangular_solve", "lu", "qr", "eigh", "svd", "symmetrize", "cholesky_p",
           "triangular_solve_p", "lu_p", "qr_p", "eigh_p", "svd_p", "LINALG_DTYPES"]

#: The dtypes every linear-algebra primitive accepts (as LAPACK: s, d, c, z).
LINALG_DTYPES = (dtypes.float32, dtypes.float64, dtypes.complex64, dtypes.complex128)


def _check(name, x, *, square=False):
    if x.dtype not in LINALG_DTYPES:
        raise DTypeError(f"{name} accepts float32, float64, complex64 or complex128, got {x.dtype.name}; "
                         "convert first (fnarray.numpy.linalg promotes integers to a float dtype)")
    if x.ndim < 2:
        raise ShapeError(f"{name} needs a matrix (rank >= 2, the last two axes), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{name} needs square matrices (last two axes equal), got shape {x.shape}")


def _real(d):
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def _cholesky_rule(x):
    _check("cholesky", x, square=True)
    return ShapedArray(x.shape, x.dtype)


def _triangular_solve_rule(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    _check("triangular_solve", a, square=True)
    _check("triangular_solve", b)
    if a.dtype != b.dtype:
        raise DTypeError(f"triangular_solve needs a and b of one dtype, got {a.dtype.name} and {b.dtype.name}")
    if a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"triangular_solve needs a and b with the same batch dimensions, got a {a.shape} and "
                         f"b {b.shape} (broadcast them first)")
    m = a.shape[-1]
    k = b.shape[-2] if left_side else b.shape[-1]
    if k != m:
        side = "b.shape[-2]" if left_side else "b.shape[-1]"
        raise ShapeError(f"triangular_solve(left_side={left_side}): {side} must equal a's size {m}, got a "
                         f"{a.shape} and b {b.shape}")
    return ShapedArray(b.shape, b.dtype)


def _lu_rule(x):
    _check("lu", x)
    *batch, m, n = x.shape
    batch = tuple(batch)
    return [ShapedArray(x.shape, x.dtype), ShapedArray(batch + (min(m, n),), dtypes.int32),
            ShapedArray(batch + (m,), dtypes.int32)]


def _qr_rule(x, *, full_matrices):
    _check("qr", x)
    *batch, m, n = x.shape
    batch, k = tuple(batch), min(m, n)
    qc = m if full_matrices else k
    return [ShapedArray(batch + (m, qc), x.dtype), ShapedArray(batch + (qc, n), x.dtype)]


def _eigh_rule(x, *, lower):
    _check("eigh", x, square=True)
    return [ShapedArray(x.shape, x.dtype), ShapedArray(x.shape[:-1], _real(x.dtype))]


def _svd_rule(x, *, full_matrices, compute_uv):
    _check("svd", x)
    *batch, m, n = x.shape
    batch, k = tuple(batch), min(m, n)
    s = ShapedArray(batch + (k,), _real(x.dtype))
    if not compute_uv:
        return [s]
    um, vn = (m, n) if full_matrices else (k, k)
    return [s, ShapedArray(batch + (m, um), x.dtype), ShapedArray(batch + (vn, n), x.dtype)]


cholesky_p = Primitive(
    "cholesky", _cholesky_rule, kind="linalg",
    doc=("Lower Cholesky factor of each matrix of the batch, from its lower triangle only; strict upper "
         "triangle zero; NaN in the lower triangle of a matrix that is not positive definite (as JAX)."))
triangular_solve_p = Primitive(
    "triangular_solve", _triangular_solve_rule, kind="linalg",
    doc=("Solves op(a) x = b (left_side) or x op(a) = b reading only a's lower/upper triangle (no diagonal "
         "with unit_diagonal); op transposes/conjugates; a zero pivot gives a non-finite solution, never raises."))
lu_p = Primitive(
    "lu", _lu_rule, multiple_results=True, kind="linalg",
    doc=("LU with partial pivoting (LAPACK getrf: first largest |re|+|im| in the column): lu, pivots int32, "
         "permutation int32 with x[perm] == L U; singular matrices are factored, never raise."))
qr_p = Primitive(
    "qr", _qr_rule, multiple_results=True, kind="linalg",
    doc="Householder QR (LAPACK geqrf signs): q (m x m, or m x k reduced) and r upper triangular.")
eigh_p = Primitive(
    "eigh", _eigh_rule, multiple_results=True, kind="linalg",
    doc=("Hermitian eigendecomposition from the lower (lower=True) or upper triangle: v (columns), then w "
         "real, ascending (JAX's order of results)."))
svd_p = Primitive(
    "svd", _svd_rule, multiple_results=True, kind="linalg",
    doc="Singular values s (real, descending), then u and vh when compute_uv (JAX's svd_p order).")


# ----------------------------------------------------------------------------- wrappers (jax.lax.linalg)


def _lax():
    from fnarray.core import lax  # noqa: PLC0415 (core.lax is light; imported late to keep this module first)
    return lax


def _swap_last(x):
    lax = _lax()
    n = lax.shape(x).__len__()
    perm = tuple(range(n - 2)) + (n - 1, n - 2)
    return lax.transpose(x, perm)


def symmetrize(x):
    """``(x + x^H) / 2`` over the last two axes (``jax.lax.linalg.symmetrize``)."""
    lax = _lax()
    xh = _swap_last(x)
    if dtypes.is_complex(lax.dtype(x)):
        xh = lax.conj(xh)
    half = lax.full((), 0.5, lax.dtype(x))
    return lax.mul(lax.add(x, xh), half)


def cholesky(x, *, symmetrize_input: bool = True):
    """Cholesky factor of each matrix (``jax.lax.linalg.cholesky``).

    Args:
        x: ``[..., n, n]``, float32/float64/complex64/complex128, Hermitian positive definite.
        symmetrize_input: use ``(x + x^H) / 2`` (JAX's default), so the gradient is symmetric; else only
            the lower triangle of ``x`` is read.

    Returns:
        ``L`` of ``x``'s shape and dtype, lower triangular, ``L @ L^H == x``; a matrix that is not positive
        definite gives NaN in its lower triangle (no error is raised, as in JAX).

    Raises:
        ShapeError: not a batch of square matrices. DTypeError: not a float or complex dtype.
    """
    if symmetrize_input:
        x = symmetrize(x)
    return cholesky_p.bind(x)


def triangular_solve(a, b, *, left_side: bool = False, lower: bool = False, transpose_a: bool = False,
                     conjugate_a: bool = False, unit_diagonal: bool = False):
    """Solves a triangular system (``jax.lax.linalg.triangular_solve``).

    Args:
        a: ``[..., m, m]``; only its ``lower`` (or upper) triangle is read.
        b: ``[..., m, n]`` with ``left_side``, else ``[..., n, m]``; or one rank less (a vector per matrix).
        left_side: solve ``op(a) @ x = b``; else ``x @ op(a) = b``.
        lower, transpose_a, conjugate_a, unit_diagonal: which triangle; ``op`` transposes and/or conjugates
            ``a``; a unit diagonal is assumed and not read.

    Returns:
        ``x`` of ``b``'s shape and dtype.

    Raises:
        ShapeError: mismatched shapes. DTypeError: different or non-float dtypes.
    """
    lax = _lax()
    conjugate_a = bool(conjugate_a) and dtypes.is_complex(lax.dtype(a))
    singleton = len(lax.shape(b)) == len(lax.shape(a)) - 1
    if singleton:
        bs = lax.shape(b)
        b = lax.reshape(b, bs + (1,) if left_side else bs[:-1] + (1, bs[-1]))
    out = triangular_solve_p.bind(a, b, left_side=bool(left_side), lower=bool(lower),
                                  transpose_a=bool(transpose_a), conjugate_a=conjugate_a,
                                  unit_diagonal=bool(unit_diagonal))
    if singleton:
        os_ = lax.shape(out)
        out = lax.reshape(out, os_[:-1] if left_side else os_[:-2] + (os_[-1],))
    return out


def lu(x):
    """LU decomposition with partial pivoting (``jax.lax.linalg.lu``).

    Args:
        x: ``[..., m, n]`` float or complex.

    Returns:
        ``(lu, pivots, permutation)``: ``lu`` as ``x`` (``L``'s unit lower part below the diagonal, ``U`` on
        and above), ``pivots`` ``int32 [..., min(m, n)]`` (row ``i`` was swapped with ``pivots[i]``),
        ``permutation`` ``int32 [..., m]`` with ``x[..., permutation, :] == L @ U``.

    Raises:
        ShapeError: rank below 2. DTypeError: not a float or complex dtype.
    """
    return tuple(lu_p.bind(x))


def qr(x, *, full_matrices: bool = True):
    """QR decomposition (``jax.lax.linalg.qr``).

    Args:
        x: ``[..., m, n]`` float or complex.
        full_matrices: ``q`` is ``[..., m, m]`` and ``r`` ``[..., m, n]``; else ``[..., m, k]`` and
            ``[..., k, n]`` with ``k = min(m, n)``.

    Returns:
        ``(q, r)``, ``q`` with orthonormal columns, ``r`` upper triangular, ``q @ r == x``.

    Raises:
        ShapeError: rank below 2. DTypeError: not a float or complex dtype.
    """
    return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))


def eigh(x, *, lower: bool = True, symmetrize_input: bool = True):
    """Eigendecomposition of Hermitian matrices (``jax.lax.linalg.eigh``).

    Args:
        x: ``[..., n, n]`` float or complex.
        lower: without ``symmetrize_input``, read the lower (else upper) triangle.
        symmetrize_input: use ``(x + x^H) / 2`` first (JAX's default).

    Returns:
        ``(v, w)``: eigenvectors ``v[..., :, i]`` (dtype of ``x``) of eigenvalues ``w[..., i]`` (real),
        ascending. Gradients through ``v`` are inf/NaN where eigenvalues repeat (they divide by the gaps),
        as JAX's; gradients through ``w`` stay finite.

    Raises:
        ShapeError: not a batch of square matrices. DTypeError: not a float or complex dtype.
    """
    if symmetrize_input:
        x = symmetrize(x)
    return tuple(eigh_p.bind(x, lower=bool(lower)))


def svd(x, *, full_matrices: bool = True, compute_uv: bool = True):
    """Singular value decomposition (``jax.lax.linalg.svd``).

    Args:
        x: ``[..., m, n]`` float or complex.
        full_matrices: ``u`` ``[..., m, m]`` and ``vh`` ``[..., n, n]``; else ``[..., m, k]``, ``[..., k, n]``.
        compute_uv: return the vectors too.

    Returns:
        ``(u, s, vh)`` with ``compute_uv``, else ``s``: singular values, real, descending. Gradients through
        ``u``/``vh`` are inf/NaN where singular values repeat (as JAX's); through ``s`` they stay finite.

    Raises:
        ShapeError: rank below 2. DTypeError: not a float or complex dtype.
    """
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    if compute_uv:
        s, u, vh = outs
        return u, s, vh
    return outs[0]
