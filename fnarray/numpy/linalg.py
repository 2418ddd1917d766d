"""``fnarray.numpy.linalg``: the array API 2024.12 linear-algebra extension, plus NumPy's ``norm``,
``lstsq``, ``cond``, ``multi_dot``, ``tensorsolve`` and ``tensorinv``.

Every function is a composite of fnarray's primitives (the factorizations of ``fnarray.lax.linalg``:
``cholesky``, ``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``), so it runs eagerly and under
``jit``, ``grad`` and ``vmap`` on every backend, batched over leading axes (``[..., M, N]``).

Dtypes: integer and boolean inputs are promoted to float32 (64-bit integers to float64 with x64 on, as
``jax.numpy.linalg``); float16/bfloat16 are computed in float32 (LAPACK has no half precision); float64 and
the complex dtypes are kept.

Bad input, as NumPy and JAX:

- a matrix argument of rank < 2 or not square where a square one is needed raises ``ShapeError``
  (a ``ValueError``); mismatched ``solve`` operands raise ``ShapeError`` naming both shapes;
- ``solve`` and ``inv`` of a singular matrix (an exactly zero pivot of its LU factorization, NumPy's
  test) raise ``LinAlgError`` (also ``numpy.linalg.LinAlgError``) when called on concrete arrays. Under
  ``jit``, ``vmap`` or ``grad`` nothing is checked (JAX's behaviour): the result has inf or NaN;
- ``cholesky`` of a matrix that is not positive definite never raises: its factor is NaN (JAX's
  behaviour; ``fnarray.scipy.linalg.cholesky(check_finite=True)`` raises instead).

Derivatives are those of the factorizations (JAX's formulas), so: where eigenvalues or singular values
repeat, the derivative of eigenvectors/singular vectors (and of ``pinv``, ``lstsq``, ``matrix_norm(ord=2)``
at a tie) is inf/NaN, as in JAX; the derivative of ``det`` at a singular matrix is NaN (JAX computes a
cofactor there).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import linalg as L
from fnarray.core.errors import LinAlgError, ShapeError
from fnarray.core.tracing import Tracer
from fnarray.numpy import _creation, _elementwise as E, _indexing, _manipulation as M, _reductions as R
from fnarray.numpy import _linalg
from fnarray.numpy._util import asarray_internal, check_arraylike, normalize_axis

__all__ = [
    "EighResult", "QRResult", "SVDResult", "SlogdetResult", "LinAlgError",
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power",
    "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot",
    "trace", "vecdot", "vector_norm",
    "norm", "lstsq", "cond", "multi_dot", "tensorsolve", "tensorinv",
]


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class QRResult(NamedTuple):
    Q: object
    R: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


# ----------------------------------------------------------------------------- helpers


def _inexact_dtype(d):
    if dtypes.is_complex(d) or d in (dtypes.float32, dtypes.float64):
        return d
    # ints, bools, float16/bfloat16: float32 (LAPACK has no half); 64-bit ints float64 under x64 (to_inexact)
    return dtypes.to_inexact(d) if dtypes.is_int(d) else dtypes.float32


def _float(name, x, *, min_rank=0):
    check_arraylike(f"linalg.{name}", x)
    x = asarray_internal(x)
    if x.ndim < min_rank:
        raise ShapeError(f"linalg.{name} needs an array of rank >= {min_rank} (matrices in the last two axes), "
                         f"got shape {x.shape}")
    d = _inexact_dtype(x.dtype)
    return lax.convert_element_type(x, d) if d != x.dtype else x


def _matrix(name, x, *, square=False):
    x = _float(name, x, min_rank=2)
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.{name} needs square matrices in the last two axes, got shape {x.shape}")
    return x


def _pair(name, a, b):
    """Both operands as arrays of one inexact dtype."""
    check_arraylike(f"linalg.{name}", a, b)
    a, b = asarray_internal(a), asarray_internal(b)
    d, _ = dtypes.promote_types(_inexact_dtype(a.dtype), _inexact_dtype(b.dtype))
    return lax.convert_element_type(a, d), lax.convert_element_type(b, d)


def _real_dtype(d):
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def _is_concrete(*xs) -> bool:
    return not any(isinstance(x, Tracer) for x in xs)


def _swap(x):
    return M.swapaxes(x, -1, -2)


def _h(x):
    return E.conj(_swap(x)) if dtypes.is_complex(x.dtype) else _swap(x)


def _broadcast_batch(x, batch):
    return M.broadcast_to(x, tuple(batch) + x.shape[-2:]) if x.shape[:-2] != tuple(batch) else x


def _lu_diag(lu):
    return _linalg.diagonal(lu, axis1=-2, axis2=-1)


def _check_nonsingular(name, lu, *inputs):
    """NumPy's eager test: an exactly zero pivot of the LU factorization is a singular matrix."""
    if _is_concrete(lu, *inputs) and lu.size and bool(R.any(E.equal(_lu_diag(lu), 0))):
        raise LinAlgError(f"linalg.{name}: singular matrix (a zero pivot in its LU factorization, shape "
                          f"{lu.shape}); under jit the result would be inf/NaN. Check the matrix, or use "
                          "linalg.lstsq / linalg.pinv for a least-squares answer")


def _lu_solve(lu, perm, b):
    """``x`` with ``a x = b`` from ``lu(a)`` (``b [..., M, K]`` with ``a``'s batch)."""
    idx = M.broadcast_to(M.expand_dims(perm, -1), perm.shape + (b.shape[-1],))
    pb = _indexing.take_along_axis(b, idx, axis=-2, mode="promise_in_bounds")
    y = L.triangular_solve(lu, pb, left_side=True, lower=True, unit_diagonal=True)
    return L.triangular_solve(lu, y, left_side=True, lower=False)


def _pivot_sign(pivots, dtype):
    """``(-1) ** (number of row swaps)`` of LAPACK's pivots, in ``dtype``."""
    k = pivots.shape[-1]
    swaps = R.sum(E.not_equal(pivots, _creation.arange(k, dtype=dtypes.int32)), axis=-1)
    odd = E.equal(E.remainder(swaps, 2), 1)
    return M.where(odd, np.asarray(-1, dtype)[()], np.asarray(1, dtype)[()])


# ----------------------------------------------------------------------------- factorizations


def cholesky(x, /, *, upper=False, symmetrize_input=True):
    """Cholesky factor (array API ``linalg.cholesky``; ``jax.numpy.linalg.cholesky``).

    Args:
        x: ``[..., M, M]`` Hermitian positive-definite matrices (integers promote to float32).
        upper: return the upper factor ``U = L^H`` (``x = U^H U``) instead of ``L`` (``x = L L^H``).
        symmetrize_input: factor ``(x + x^H) / 2`` (JAX's default; gradients are then symmetric).

    Returns:
        The factor, ``x``'s shape and (inexact) dtype. A matrix that is not positive definite gives NaN in
        the factor's triangle (JAX's behaviour; NumPy raises): nothing is raised.

    Raises:
        ShapeError: rank < 2 or non-square matrices.
    """
    x = _matrix("cholesky", x, square=True)
    l_ = L.cholesky(x, symmetrize_input=symmetrize_input)
    return _h(l_) if upper else l_


def eigh(x, /, UPLO=None, symmetrize_input=True):
    """Eigenvalues and eigenvectors of Hermitian matrices (array API ``linalg.eigh``).

    Args:
        x: ``[..., M, M]``. UPLO: ``"L"`` (default) or ``"U"``, the triangle read when
            ``symmetrize_input=False``. symmetrize_input: use ``(x + x^H) / 2`` (JAX's default).

    Returns:
        ``EighResult(eigenvalues [..., M] real ascending, eigenvectors [..., M, M] in the columns)``.
        Gradients through the eigenvectors are inf/NaN where eigenvalues repeat (as JAX).

    Raises:
        ShapeError: rank < 2 or non-square. ValueError: ``UPLO`` not ``"L"``/``"U"``.
    """
    x = _matrix("eigh", x, square=True)
    lower = _uplo(UPLO)
    v, w = L.eigh(x, lower=lower, symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def _uplo(UPLO):
    if UPLO is None or UPLO == "L":
        return True
    if UPLO == "U":
        return False
    raise ValueError(f"UPLO must be 'L' or 'U', got {UPLO!r}")


def eigvalsh(x, /, UPLO=None, symmetrize_input=True):
    """Eigenvalues of Hermitian matrices, ascending (array API ``linalg.eigvalsh``): ``[..., M]`` real.

    Raises: ShapeError: rank < 2 or non-square.
    """
    return eigh(x, UPLO=UPLO, symmetrize_input=symmetrize_input).eigenvalues


def qr(x, /, mode="reduced"):
    """QR decomposition (array API ``linalg.qr``; NumPy's ``mode="r"`` too).

    Args:
        x: ``[..., M, N]``. mode: ``"reduced"`` (``Q [..., M, K]``, ``R [..., K, N]``, ``K = min(M, N)``),
            ``"complete"`` (``Q [..., M, M]``, ``R [..., M, N]``) or ``"r"`` (``R`` alone, reduced).

    Returns:
        ``QRResult(Q, R)`` (LAPACK's signs: those of NumPy and JAX), or ``R`` for ``mode="r"``.

    Raises:
        ShapeError: rank < 2. ValueError: an unknown mode.
    """
    x = _matrix("qr", x)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    q, r = L.qr(x, full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def svd(x, /, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular value decomposition (array API ``linalg.svd``; NumPy's ``compute_uv``).

    Args:
        x: ``[..., M, N]``. full_matrices: ``U [..., M, M]``, ``Vh [..., N, N]``; else ``[..., M, K]``,
            ``[..., K, N]``. compute_uv: return ``S`` alone when ``False``. hermitian: accepted for NumPy's
            signature (the general algorithm is used).

    Returns:
        ``SVDResult(U, S, Vh)`` with ``S [..., K]`` real, descending; or ``S``.

    Raises:
        ShapeError: rank < 2.
    """
    x = _matrix("svd", x)
    if not compute_uv:
        return L.svd(x, compute_uv=False)
    return SVDResult(*L.svd(x, full_matrices=full_matrices, compute_uv=True))


def svdvals(x, /):
    """Singular values, descending (array API ``linalg.svdvals``): ``[..., min(M, N)]`` real.

    Raises: ShapeError: rank < 2.
    """
    return L.svd(_matrix("svdvals", x), compute_uv=False)


# ----------------------------------------------------------------------------- solving and inverting


def solve(x1, x2, /):
    """Solves ``x1 @ x = x2`` (array API 2024.12 ``linalg.solve``), through the LU factorization.

    Args:
        x1: ``[..., M, M]``. x2: ``[M]`` (one vector, for every matrix of ``x1``) or ``[..., M, K]``; batch
            axes broadcast.

    Returns:
        ``x`` of the broadcast shape (``x1.shape[:-1]`` for a vector ``x2``), the promoted inexact dtype.

    Raises:
        ShapeError: non-square ``x1`` or an ``x2`` whose ``M`` differs. LinAlgError: a singular ``x1``
        (concrete arrays only; under ``jit`` the result is inf/NaN).
    """
    a, b = _pair("solve", x1, x2)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"linalg.solve needs x1 of square matrices [..., M, M], got shape {a.shape}")
    m = a.shape[-1]
    vector = b.ndim == 1
    if vector:
        if b.shape[0] != m:
            raise ShapeError(f"linalg.solve: x2 of shape {b.shape} does not fit x1 of shape {a.shape} "
                             f"(needs {m} rows)")
        b = M.broadcast_to(M.expand_dims(b, -1), a.shape[:-2] + (m, 1))
    elif b.shape[-2] != m:
        raise ShapeError(f"linalg.solve: x2 of shape {b.shape} does not fit x1 of shape {a.shape}: x2 needs "
                         f"{m} rows in its second-to-last axis (a 1-d x2 is one vector)")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if not vector else a.shape[:-2]
    a, b = _broadcast_batch(a, batch), _broadcast_batch(b, batch)
    lu, _piv, perm = L.lu(a)
    _check_nonsingular("solve", lu, x1, x2)
    x = _lu_solve(lu, perm, b)
    return M.squeeze(x, -1) if vector else x


def inv(x, /):
    """Inverse of each matrix (array API ``linalg.inv``), through the LU factorization.

    Args: x: ``[..., M, M]``.

    Returns: the inverses, ``x``'s shape and inexact dtype.

    Raises:
        ShapeError: rank < 2 or non-square. LinAlgError: a singular matrix (concrete arrays only; under
        ``jit`` the result is inf/NaN).
    """
    x = _matrix("inv", x, square=True)
    return _inv(x, check=True, original=x)


def _inv(x, *, check, original=None):
    lu, _piv, perm = L.lu(x)
    if check:
        _check_nonsingular("inv", lu, original)
    eye = M.broadcast_to(_creation.eye(x.shape[-1], dtype=x.dtype), x.shape)
    return _lu_solve(lu, perm, eye)


def det(x, /):
    """Determinant of each matrix (array API ``linalg.det``), from the LU factorization.

    Args: x: ``[..., M, M]``. Returns: ``[...]``, the inexact dtype (0 for a singular matrix). Its derivative
    ``trace(adj(x) dx)`` (JAX's cofactor form) is finite at singular matrices too.

    Raises: ShapeError: rank < 2 or non-square.
    """
    return _det(_matrix("det", x, square=True))


def _det_of(x):
    lu, piv, _perm = L.lu(x)
    return E.multiply(_pivot_sign(piv, x.dtype), R.prod(_lu_diag(lu), axis=-1))


def _cofactor_solve(a, b):
    """``(det(a), adj(a) @ b)``, finite for a singular ``a`` too (JAX's ``_cofactor_solve``, ``det``'s JVP).

    With ``a = p l u``, ``det(a) a^-1 b = prod(diag u) u^-1 l^-1 p^-1 b``. ``u``'s last pivot replaced by
    ``1 / (sign prod(diag u)[:-1])`` gives the last row without dividing by a zero pivot (rank n - 1); the other rows
    are scaled by ``det(a)`` (0 then). Where that solve still overflows (rank < n - 1) the result is 0.
    """
    n = a.shape[-1]
    if n == 1:
        return a[..., 0, 0], b
    lu, piv, perm = L.lu(a)
    partial = E.multiply(R.cumprod(_lu_diag(lu), axis=-1), M.expand_dims(_pivot_sign(piv, a.dtype), -1))
    lu = lu.at[..., -1, -1].set(E.divide(1, partial[..., -2]))
    probe = L.triangular_solve(lu, _creation.ones(a.shape[:-1], a.dtype), left_side=True, lower=False)
    low_rank = M.expand_dims(R.any(E.logical_not(E.isfinite(probe)), axis=-1), (-2, -1))
    idx = M.broadcast_to(M.expand_dims(perm, -1), perm.shape + (n,))
    x = M.where(low_rank, 0, _indexing.take_along_axis(b, idx, axis=-2, mode="promise_in_bounds"))
    x = L.triangular_solve(lu, x, left_side=True, lower=True, unit_diagonal=True)
    x = M.concatenate([E.multiply(x[..., :-1, :], partial[..., -1, None, None]), x[..., -1:, :]], axis=-2)
    x = L.triangular_solve(lu, x, left_side=True, lower=False)
    return partial[..., -1], M.where(low_rank, 0, x)


def _det_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y, z = _cofactor_solve(x, t)
    return y, _linalg.trace(z, axis1=-2, axis2=-1)


def _make_det():
    from fnarray.transforms.ad import custom_jvp
    f = custom_jvp(_det_of)
    f.defjvp(_det_jvp)
    return f


_det = _make_det()   # d det(a) = trace(adj(a) da): finite at singular matrices, as JAX's (LU's JVP gave NaN)


def slogdet(x, /):
    """Sign and log of the absolute determinant (array API ``linalg.slogdet``).

    Args: x: ``[..., M, M]``.

    Returns:
        ``SlogdetResult(sign, logabsdet)``: ``sign`` in x's dtype (``+-1``, a unit complex number, or 0 for a
        singular matrix), ``logabsdet`` real (``-inf`` for a singular matrix).

    Raises: ShapeError: rank < 2 or non-square.
    """
    x = _matrix("slogdet", x, square=True)
    lu, piv, _perm = L.lu(x)
    d = _lu_diag(lu)
    mag = E.abs(d)
    logabs = R.sum(E.log(mag), axis=-1)
    zero = E.equal(mag, 0)
    unit = M.where(zero, np.asarray(0, x.dtype)[()],
                   E.divide(d, M.where(zero, np.asarray(1, mag.dtype)[()], mag).astype(x.dtype)))
    sign = E.multiply(_pivot_sign(piv, x.dtype), R.prod(unit, axis=-1))
    return SlogdetResult(sign, logabs)


def matrix_power(x, n, /):
    """``x`` raised to the integer power ``n`` (array API ``linalg.matrix_power``), by repeated squaring.

    Args:
        x: ``[..., M, M]`` (integer matrices stay integer for ``n >= 0``). n: a Python int; ``n < 0`` inverts
            first (so ``x`` must be invertible), ``n == 0`` gives the identity.

    Returns: ``x``'s shape; its dtype (the inexact one for ``n < 0``).

    Raises:
        TypeError: ``n`` not an integer. ShapeError: rank < 2 or non-square. LinAlgError: ``n < 0`` and a
        singular matrix (concrete arrays).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"linalg.matrix_power needs an integer exponent, got {type(n).__name__} {n!r}")
    check_arraylike("linalg.matrix_power", x)
    x = asarray_internal(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.matrix_power needs square matrices [..., M, M], got shape {x.shape}")
    n = int(n)
    if n == 0:
        return M.broadcast_to(_creation.eye(x.shape[-1], dtype=x.dtype), x.shape)
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else _linalg.matmul(result, base)
        n >>= 1
        if n:
            base = _linalg.matmul(base, base)
    return result


def pinv(x, /, rtol=None, hermitian=False, *, rcond=None):
    """Moore-Penrose pseudo-inverse (array API ``linalg.pinv``), through the SVD.

    Args:
        x: ``[..., M, N]``. rtol: singular values at most ``rtol * max(s)`` are treated as zero; default
            ``max(M, N) * eps`` (the array API's); a float or an array broadcasting with the batch.
        hermitian: accepted for NumPy's signature. rcond: NumPy's older name for ``rtol``.

    Returns: ``[..., N, M]``.

    Raises: ShapeError: rank < 2.
    """
    x = _matrix("pinv", x)
    m, n = x.shape[-2:]
    if x.size == 0:
        return M.broadcast_to(np.zeros((), x.dtype)[()], x.shape[:-2] + (n, m))
    u, s, vh = L.svd(x, full_matrices=False)
    cutoff = _cutoff(s, rtol if rtol is not None else rcond, m, n)
    keep = E.greater(s, cutoff)
    s_inv = M.where(keep, E.divide(1, M.where(keep, s, np.asarray(1, s.dtype)[()])), np.asarray(0, s.dtype)[()])
    return _linalg.matmul(E.multiply(_h(vh), M.expand_dims(s_inv, -2).astype(x.dtype)), _h(u))


def _cutoff(s, rtol, m, n):
    """``rtol * max(s)`` per matrix, as ``[..., 1]`` (default ``rtol = max(M, N) * eps``)."""
    if rtol is None:
        rtol = max(m, n) * float(dtypes.finfo(s.dtype).eps)
    smax = R.max(s, axis=-1, keepdims=True)
    rt = asarray_internal(rtol)
    if rt.ndim:
        rt = M.expand_dims(rt, -1)
    return E.multiply(rt.astype(s.dtype), smax)


def matrix_rank(x, /, rtol=None, *, tol=None, hermitian=False):
    """Rank of each matrix: singular values above ``rtol * max(s)`` (array API ``linalg.matrix_rank``).

    Args:
        x: ``[..., M, N]`` (a vector or scalar: 1 if any entry is non-zero, as NumPy). rtol: default
            ``max(M, N) * eps``; tol: NumPy's absolute tolerance (overrides ``rtol``). hermitian: accepted.

    Returns: ``[...]``, int32 (the default integer dtype).
    """
    check_arraylike("linalg.matrix_rank", x)
    x0 = asarray_internal(x)
    if x0.ndim < 2:
        return R.any(E.not_equal(x0, 0)).astype(dtypes.int32)
    x = _matrix("matrix_rank", x0)
    m, n = x.shape[-2:]
    if min(m, n) == 0:
        return M.broadcast_to(np.int32(0), x.shape[:-2])
    s = L.svd(x, compute_uv=False)
    if tol is not None:
        t = asarray_internal(tol).astype(s.dtype)
        cut = M.expand_dims(t, -1) if t.ndim else t
    else:
        cut = _cutoff(s, rtol, m, n)
    return R.sum(E.greater(s, cut), axis=-1).astype(dtypes.int32)


def lstsq(a, b, rcond=None, *, numpy_resid=False):
    """Least-squares solution of ``a @ x = b`` through the SVD (``numpy.linalg.lstsq``, ``jax.numpy.linalg.lstsq``).

    Args:
        a: ``[M, N]``. b: ``[M]`` or ``[M, K]``. rcond: singular values at most ``rcond * max(s)`` count as
            zero; default ``max(M, N) * eps``. numpy_resid: NumPy's residuals (empty unless ``a`` has full
            column rank ``N < M``; needs concrete arrays); by default JAX's: always ``sum(|b - a x|^2)``.

    Returns:
        ``(x [N] or [N, K], residuals [] or [K], rank (int32), s [min(M, N)])``.

    Raises:
        ShapeError: ``a`` not 2-d, ``b`` not 1-d/2-d, or their rows differ.
    """
    a, b = _pair("lstsq", a, b)
    if a.ndim != 2 or b.ndim not in (1, 2):
        raise ShapeError(f"linalg.lstsq needs a 2-d a and a 1-d or 2-d b, got shapes {a.shape} and {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"linalg.lstsq: a {a.shape} and b {b.shape} need the same number of rows")
    m, n = a.shape
    vec = b.ndim == 1
    bm = M.expand_dims(b, -1) if vec else b
    if min(m, n) == 0:
        x = M.broadcast_to(np.zeros((), a.dtype)[()], (n, bm.shape[1]))
        s = M.broadcast_to(np.zeros((), _real_dtype(a.dtype))[()], (0,))
        rank = np.int32(0)
    else:
        u, s, vh = L.svd(a, full_matrices=False)
        keep = E.greater(s, _cutoff(s, rcond, m, n))
        s_inv = M.where(keep, E.divide(1, M.where(keep, s, np.asarray(1, s.dtype)[()])),
                        np.asarray(0, s.dtype)[()])
        x = _linalg.matmul(_h(vh), E.multiply(M.expand_dims(s_inv, -1).astype(a.dtype), _linalg.matmul(_h(u), bm)))
        rank = R.sum(keep).astype(dtypes.int32)
    r = E.subtract(bm, _linalg.matmul(a, x))
    resid = R.sum(E.real(E.multiply(r, E.conj(r))) if dtypes.is_complex(r.dtype) else E.multiply(r, r), axis=0)
    if numpy_resid and not (int(rank) == n and m > n):
        resid = M.broadcast_to(np.zeros((), resid.dtype)[()], (0,))
    elif vec:
        resid = M.reshape(resid, ())
    if vec:
        x = M.squeeze(x, -1)
    return x, resid, asarray_internal(rank), s


def cond(x, p=None):
    """Condition number (``numpy.linalg.cond``): ``norm(x, p) * norm(inv(x), p)``; for ``p`` None, 2 or -2
    the ratio of extreme singular values. A singular matrix gives inf (as NumPy), never an error.

    Raises: ShapeError: rank < 2 (and non-square for ``p`` other than None/2/-2).
    """
    x = _matrix("cond", x)
    if p is None or p in (2, -2):
        s = L.svd(x, compute_uv=False)
        smax, smin = R.max(s, axis=-1), R.min(s, axis=-1)
        return E.divide(smax, smin) if p != -2 else E.divide(smin, smax)
    if x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.cond(p={p!r}) needs square matrices, got shape {x.shape}")
    r = E.multiply(norm(x, p, axis=(-2, -1)), norm(_inv(x, check=False), p, axis=(-2, -1)))
    # NumPy: a singular matrix (NaN from the inverse, not from x) has condition number inf.
    bad = E.logical_and(E.isnan(r), E.logical_not(R.any(E.isnan(x), axis=(-2, -1))))
    return M.where(bad, np.asarray(np.inf, r.dtype)[()], r)


# ----------------------------------------------------------------------------- norms


def _abs_real(x):
    a = E.abs(x)
    return a if dtypes.is_inexact(a.dtype) else a.astype(dtypes.to_inexact(a.dtype))


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """Vector norm over ``axis`` (array API ``linalg.vector_norm``).

    Args:
        x: any shape (integers promote to float32). axis: None (all axes, flattened), an int or a tuple.
        keepdims: keep the reduced axes as size 1. ord: ``2`` (default), ``1``, ``inf``, ``-inf``, ``0``
            (number of non-zeros), or any other number ``p`` (``sum(|x|**p) ** (1/p)``).

    Returns: the norms, real dtype (complex64 -> float32).

    Raises: ValueError: ``ord`` not a number.
    """
    x = _float("vector_norm", x)
    if axis is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, x.ndim) for a in axis)
    else:
        axes = (normalize_axis(axis, x.ndim),)
    if isinstance(ord, str) or ord is None or isinstance(ord, bool):
        raise ValueError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    a = _abs_real(x)
    kw = dict(axis=axes, keepdims=keepdims)
    if ord == 2:
        out = E.sqrt(R.sum(E.multiply(a, a), **kw))
    elif ord == 1:
        out = R.sum(a, **kw)
    elif ord == math.inf:
        out = R.max(a, **kw, initial=0) if _has_empty(a, axes) else R.max(a, **kw)
    elif ord == -math.inf:
        out = R.min(a, **kw, initial=math.inf) if _has_empty(a, axes) else R.min(a, **kw)
    elif ord == 0:
        out = R.sum(E.not_equal(a, 0).astype(a.dtype), **kw)
    else:
        p = float(ord)
        out = E.power(R.sum(E.power(a, np.asarray(p, a.dtype)[()]), **kw), np.asarray(1.0 / p, a.dtype)[()])
    return out


def _has_empty(a, axes):
    return any(a.shape[i] == 0 for i in axes)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """Matrix norm of the last two axes (array API ``linalg.matrix_norm``).

    Args:
        x: ``[..., M, N]``. keepdims: keep the two axes as size 1. ord: ``"fro"`` (default), ``"nuc"``
            (sum of singular values), ``1``/``-1`` (max/min column sum of ``|x|``), ``inf``/``-inf``
            (max/min row sum), ``2``/``-2`` (largest/smallest singular value).

    Returns: ``[...]`` (or ``[..., 1, 1]``), real dtype.

    Raises: ShapeError: rank < 2. ValueError: another ``ord``.
    """
    x = _matrix("matrix_norm", x)
    return _matrix_norm(x, ord, keepdims)


def _matrix_norm(x, ord, keepdims, rows=-2, cols=-1):
    rows, cols = normalize_axis(rows, x.ndim), normalize_axis(cols, x.ndim)
    if (rows, cols) != (x.ndim - 2, x.ndim - 1):
        keep = [i for i in range(x.ndim) if i not in (rows, cols)]
        out = _matrix_norm(M.permute_dims(x, keep + [rows, cols]), ord, False)
        if keepdims:
            out = M.expand_dims(out, tuple(sorted((rows, cols))))
        return out
    a = _abs_real(x)
    if ord == "fro" or ord is None:
        out = E.sqrt(R.sum(E.multiply(a, a), axis=(-2, -1)))
    elif ord == "nuc":
        out = R.sum(_svdvals_or_zero(x), axis=-1)
    elif ord in (1, -1):
        col = R.sum(a, axis=-2)
        out = R.max(col, axis=-1) if ord == 1 else R.min(col, axis=-1)
    elif ord in (math.inf, -math.inf):
        row = R.sum(a, axis=-1)
        out = R.max(row, axis=-1) if ord == math.inf else R.min(row, axis=-1)
    elif ord in (2, -2):
        s = _svdvals_or_zero(x)
        out = R.max(s, axis=-1) if ord == 2 else R.min(s, axis=-1)
    else:
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}")
    if keepdims:
        out = M.expand_dims(out, (-2, -1))
    return out


def _svdvals_or_zero(x):
    return L.svd(x, compute_uv=False)


def norm(x, ord=None, axis=None, keepdims=False):
    """Matrix or vector norm (``numpy.linalg.norm``).

    ``axis=None``: the 2-norm of the flattened array when ``ord`` is None, else a vector norm (rank 1) or
    a matrix norm (rank 2). An int axis: a vector norm; a pair of axes: a matrix norm.

    Raises: ValueError: an ``ord`` the kind of norm does not have, or ``axis=None`` with ``ord`` on rank > 2.
    """
    x = _float("norm", x)
    if axis is None:
        if ord is None:
            return vector_norm(x, axis=None, keepdims=keepdims, ord=2)
        if x.ndim == 1:
            return vector_norm(x, axis=0, keepdims=keepdims, ord=ord)
        if x.ndim == 2:
            return _matrix_norm(x, ord, keepdims)
        raise ValueError(f"linalg.norm: an ord needs a 1-d or 2-d array or an axis, got shape {x.shape}")
    if isinstance(axis, (tuple, list)) and len(axis) == 2:
        return _matrix_norm(x, ord, keepdims, axis[0], axis[1])
    if isinstance(axis, (tuple, list)):
        if len(axis) != 1:
            raise ValueError(f"linalg.norm: axis must be an int or a pair of ints, got {axis!r}")
        axis = axis[0]
    if isinstance(ord, str):
        raise ValueError(f"linalg.norm: ord {ord!r} is a matrix norm; a vector norm (one axis) needs a number")
    return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)


# ----------------------------------------------------------------------------- products and structure


def matmul(x1, x2, /):
    """Matrix product (array API ``linalg.matmul``: ``fnarray.numpy.matmul``)."""
    return _linalg.matmul(x1, x2)


def matrix_transpose(x, /):
    """Swaps the last two axes (array API ``linalg.matrix_transpose``)."""
    return M.matrix_transpose(x)


def tensordot(x1, x2, /, *, axes=2):
    """Tensor contraction (array API ``linalg.tensordot``: ``fnarray.numpy.tensordot``)."""
    return _linalg.tensordot(x1, x2, axes=axes)


def vecdot(x1, x2, /, *, axis=-1):
    """Dot product of vectors along ``axis``, conjugating ``x1`` (array API ``linalg.vecdot``)."""
    return _linalg.vecdot(x1, x2, axis=axis)


def outer(x1, x2, /):
    """Outer product of two 1-d arrays (array API ``linalg.outer``).

    Raises: ShapeError: an operand that is not 1-d (``fnarray.numpy.outer`` flattens instead).
    """
    check_arraylike("linalg.outer", x1, x2)
    a, b = asarray_internal(x1), asarray_internal(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"linalg.outer needs two 1-d arrays, got shapes {a.shape} and {b.shape}")
    return _linalg.outer(a, b)


def cross(x1, x2, /, *, axis=-1):
    """Cross product of 3-vectors along ``axis`` (array API ``linalg.cross``); other axes broadcast.

    Raises: ShapeError: ``axis`` does not have size 3 in both.
    """
    return _linalg.cross(x1, x2, axis=axis)


def diagonal(x, /, *, offset=0):
    """Diagonals of the last two axes (array API ``linalg.diagonal``): ``[..., k]``."""
    return _linalg.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def trace(x, /, *, offset=0, dtype=None):
    """Sums of the diagonals of the last two axes (array API ``linalg.trace``); dtype as ``sum``."""
    return _linalg.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)


def multi_dot(arrays, *, precision=None):
    """The product of several matrices in the cheapest order (``numpy.linalg.multi_dot``).

    The first may be 1-d (a row vector), the last 1-d (a column vector); the order is chosen from the
    shapes by dynamic programming over the chain (fewest multiplications), as NumPy.

    Raises: ValueError: fewer than two arrays. ShapeError: inner sizes that differ, or a middle array not 2-d.
    """
    arrays = [asarray_internal(a) for a in arrays]
    if len(arrays) < 2:
        raise ValueError(f"linalg.multi_dot needs at least two arrays, got {len(arrays)}")
    first_vec, last_vec = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first_vec:
        arrays[0] = M.expand_dims(arrays[0], 0)
    if last_vec:
        arrays[-1] = M.expand_dims(arrays[-1], -1)
    for i, a in enumerate(arrays):
        if a.ndim != 2:
            raise ShapeError(f"linalg.multi_dot: array {i} has shape {a.shape}; each must be 2-d (the first "
                             "and last may be 1-d)")
    for i in range(len(arrays) - 1):
        if arrays[i].shape[1] != arrays[i + 1].shape[0]:
            raise ShapeError(f"linalg.multi_dot: array {i} {arrays[i].shape} and array {i + 1} "
                             f"{arrays[i + 1].shape} do not chain")
    dims = [arrays[0].shape[0]] + [a.shape[1] for a in arrays]
    order = _chain_order(dims)

    def product(i, j):
        if i == j:
            return arrays[i]
        k = order[i][j]
        return _linalg.matmul(product(i, k), product(k + 1, j))
    out = product(0, len(arrays) - 1)
    if first_vec:
        out = M.squeeze(out, 0)
    if last_vec:
        out = M.squeeze(out, -1)
    return out


def _chain_order(dims):
    """Split points of the cheapest parenthesization of a matrix chain with sizes ``dims`` (CLRS 15.2)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def tensorsolve(a, b, axes=None):
    """Solves ``tensordot(a, x, x.ndim) = b`` for ``x`` (``numpy.linalg.tensorsolve``).

    Args: a: shape ``b.shape + x.shape`` (after moving ``axes`` to the end). b: any shape.

    Returns: ``x`` of shape ``a.shape[b.ndim:]``.

    Raises: ShapeError: the sizes do not make a square system. LinAlgError: singular (concrete arrays).
    """
    a, b = _pair("tensorsolve", a, b)
    if axes is not None:
        axes = [normalize_axis(ax, a.ndim) for ax in axes]
        keep = [i for i in range(a.ndim) if i not in axes]
        a = M.permute_dims(a, keep + axes)
    xshape = a.shape[b.ndim:]
    n = math.prod(xshape)
    if math.prod(b.shape) != n or a.shape[:b.ndim] != b.shape:
        raise ShapeError(f"linalg.tensorsolve: a {a.shape} and b {b.shape} do not make a square system "
                         "(a.shape must be b.shape followed by x's shape, with as many elements in each)")
    x = solve(M.reshape(a, (n, n)), M.reshape(b, (n,)))
    return M.reshape(x, xshape)


def tensorinv(a, ind=2):
    """Inverse of ``a`` under ``tensordot(., ., ind)`` (``numpy.linalg.tensorinv``).

    Returns: shape ``a.shape[ind:] + a.shape[:ind]``.

    Raises: ValueError: ``ind <= 0``. ShapeError: the two parts differ in size. LinAlgError: singular.
    """
    a = _float("tensorinv", a)
    if ind <= 0:
        raise ValueError(f"linalg.tensorinv: ind must be a positive integer, got {ind}")
    left, right = a.shape[:ind], a.shape[ind:]
    n = math.prod(left)
    if math.prod(right) != n:
        raise ShapeError(f"linalg.tensorinv: a {a.shape} splits at ind={ind} into {left} and {right}, which "
                         "differ in size")
    return M.reshape(inv(M.reshape(a, (n, n))), right + left)
