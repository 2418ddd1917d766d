"""``jax.scipy.linalg.schur``, ``sqrtm`` and ``polar``.

``schur`` is LAPACK's ``gees`` run on the host through ``fnarray.pure_callback`` (SciPy's binding, imported on
first use): JAX's ``schur`` too is LAPACK on the CPU only, without a derivative. ``sqrtm`` is JAX's method (the
complex Schur form, then Björck and Hammarling's recurrence on the triangle), the recurrence written one
superdiagonal at a time. ``polar`` goes through the singular value decomposition, which is differentiable.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.scipy._util import matrix

__all__ = ["polar", "schur", "sqrtm"]


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _square(name, a):
    a = matrix(name, a)
    if a.ndim != 2:
        raise ValueError(f"{name} takes one square matrix (2-d, as JAX), got shape {a.shape}; map it over a batch "
                         "with fnarray.vmap")
    return a


class _Gees:
    """The host side of ``schur``: SciPy's ``schur`` of one matrix, cast to the declared dtype (hashable, so
    that equal calls trace to equal programs)."""

    def __init__(self, output, dtype):
        self.output, self.dtype = output, np.dtype(dtype)
        self.__name__ = f"schur({output!r})"

    def __call__(self, a):
        try:
            import scipy.linalg
        except ImportError:
            raise ImportError("fnarray.scipy.linalg.schur (and sqrtm) call LAPACK through SciPy on the host: "
                              "pip install scipy") from None
        a = np.asarray(a)
        t, z = np.empty(a.shape, self.dtype), np.empty(a.shape, self.dtype)
        for idx in np.ndindex(*a.shape[:-2]):  # a batch: one gees a matrix (JAX's schur takes batches too)
            if np.isfinite(a[idx]).all():
                t[idx], z[idx] = scipy.linalg.schur(a[idx], output=self.output)
            else:  # NaN/inf: NaNs (as JAX's LAPACK call), not SciPy's "array must not contain infs or NaNs"
                t[idx], z[idx] = np.nan, np.nan
        return t, z

    def __hash__(self):
        return hash((_Gees, self.output, self.dtype))

    def __eq__(self, other):
        return type(other) is _Gees and (other.output, other.dtype) == (self.output, self.dtype)


def schur(a, output="real"):
    """The Schur decomposition ``a = Z T Z^H`` of a square matrix (``jax.scipy.linalg.schur``).

    Method: LAPACK's ``gees`` (through ``scipy.linalg.schur``) on the host, called with ``fnarray.pure_callback``
    so that it runs under ``jit`` (on every backend: kernel backends cut the program there) and ``vmap`` (one
    call per matrix). As JAX's, it has no derivative.

    Args:
      a: a float or complex matrix of shape ``(n, n)``, or a batch ``(..., n, n)`` of them (one LAPACK call
        each). A matrix with a NaN or an infinity gives NaNs.
      output: ``"real"`` (``T`` quasi-upper-triangular, 2x2 blocks for complex pairs; for real ``a``) or
        ``"complex"`` (``T`` upper triangular, complex).

    Returns:
      ``(T, Z)``, both ``a``'s shape: ``a``'s dtype for ``"real"``, its complex dtype for ``"complex"``; ``Z``
      unitary.

    Raises:
      ValueError: another ``output``; under ``grad``.
      ShapeError: a non-square matrix.
      DTypeError: a non-numeric one.
      ImportError: (when it runs) SciPy is not installed.
    """
    import fnarray as fa
    if output not in ("real", "complex"):
        raise ValueError(f"schur: output must be 'real' or 'complex', got {output!r}")
    a = matrix("schur", a)
    d = a.dtype if output == "real" or dtypes.is_complex(a.dtype) else np.dtype(
        np.complex128 if a.dtype == np.float64 else np.complex64)
    out = fa.ShapeDtypeStruct(a.shape, d)
    return fa.pure_callback(_Gees(output, d), (out, out), a, vmap_method="sequential")


def _sqrt_triangle(t):
    """The upper triangular square root ``R`` of an upper triangular ``t`` (``R @ R = t``; Björck and Hammarling
    1983): the diagonal is ``sqrt(diag(t))``; superdiagonal ``d`` is ``(t - (R @ R)) / (r_ii + r_jj)`` there,
    where ``R`` holds the diagonals below ``d`` (so ``(R @ R)[i, i + d]`` is the recurrence's sum). A zero
    numerator gives 0 (JAX's rule, for repeated zero eigenvalues)."""
    fnp = _fnp()
    n = t.shape[0]
    root = fnp.sqrt(fnp.diagonal(t))
    r = fnp.diag(root)
    for d in range(1, n):
        num = fnp.diagonal(t, d) - fnp.diagonal(r @ r, d)
        den = root[:-d] + root[d:]
        r = r + fnp.diag(fnp.where(num == 0, 0, num / fnp.where(num == 0, 1, den)), d)
    return r


def sqrtm(A, blocksize=1):  # noqa: N803 (JAX's name)
    """The principal square root ``X`` of a square matrix, ``X @ X = A`` (``jax.scipy.linalg.sqrtm``).

    Method: JAX's, the complex Schur method of Björck and Hammarling (1983): ``A = Z T Z^H`` (``schur(A,
    "complex")``, LAPACK on the host), the triangular root ``R`` of ``T`` column-free (one superdiagonal at a
    time), ``X = Z R Z^H``. Not differentiable (``schur`` is not).

    Args:
      A: a float or complex matrix of shape ``(n, n)``.
      blocksize: JAX's; only 1 (unblocked) is supported, as in JAX.

    Returns:
      An ``(n, n)`` array in ``A``'s complex dtype (``complex64`` for ``float32``), as JAX's.

    Raises:
      NotImplementedError: ``blocksize > 1`` (as JAX).
      ShapeError, DTypeError: as ``schur``.
      ValueError: a batch of matrices (as JAX's); under ``grad``.
    """
    if blocksize > 1:
        raise NotImplementedError("sqrtm: blocked algorithm (blocksize > 1) is not supported, as in JAX; pass "
                                  "blocksize=1")
    fnp = _fnp()
    t, z = schur(_square("sqrtm", A), output="complex")
    return fnp.matmul(z @ _sqrt_triangle(t), fnp.conj(z.T))


def polar(a, side="right", *, method="qdwh", eps=None, max_iterations=None):
    """The polar decomposition ``a = U P`` (``side="right"``) or ``a = P U`` (``"left"``)
    (``jax.scipy.linalg.polar``).

    Method: the thin singular value decomposition ``a = W S V^H`` (JAX's ``method="svd"``): ``U = W V^H``,
    ``P = V S V^H`` (right) or ``W S W^H`` (left). JAX's default ``"qdwh"`` (Nakatsukasa, Bai and Gygi's
    iteration) converges to the same factors; it is computed here through the SVD as well, so ``eps`` and
    ``max_iterations`` are accepted and unused. Differentiable (where the singular values are distinct) and
    batched over leading axes.

    Args:
      a: a float or complex array of shape ``(..., m, n)``.
      side: ``"right"`` or ``"left"``.
      method: ``"qdwh"`` or ``"svd"``.

    Returns:
      ``(U, P)``: ``U`` of shape ``(..., m, n)`` (orthonormal columns for ``m >= n``, rows otherwise) and ``P``
      Hermitian positive semidefinite, ``(..., n, n)`` (right) or ``(..., m, m)`` (left); ``a``'s dtype.

    Raises:
      ValueError: ``a`` of rank < 2, another ``side`` or ``method``.
      NotImplementedError: ``method="qdwh"`` with ``m < n`` and ``side="right"`` or ``m > n`` and
        ``side="left"`` (as JAX).
    """
    fnp = _fnp()
    if fnp.ndim(a) < 2:
        raise ValueError(f"polar: the input a must be at least 2-d, got shape {fnp.shape(a)}")
    if side not in ("right", "left"):
        raise ValueError(f"polar: side must be 'right' or 'left', got {side!r}")
    if method not in ("qdwh", "svd"):
        raise ValueError(f"polar: unknown method {method!r}; use 'qdwh' or 'svd'")
    a = matrix("polar", a, square=False)
    m, n = a.shape[-2:]
    if method == "qdwh" and ((m < n and side == "right") or (m > n and side == "left")):
        raise NotImplementedError(f"polar: method='qdwh' supports m >= n with side='right' and m <= n with "
                                  f"side='left' (as JAX), got shape {a.shape} with side={side!r}; use "
                                  "method='svd'")
    w, s, vh = fnp.linalg.svd(a, full_matrices=False)
    s = s.astype(w.dtype)[..., None, :]
    unitary = w @ vh
    if side == "right":
        v = fnp.conj(fnp.swapaxes(vh, -1, -2))
        return unitary, (v * s) @ vh
    return unitary, (w * s) @ fnp.conj(fnp.swapaxes(w, -1, -2))
