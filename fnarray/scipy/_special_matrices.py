"""Structured matrices of ``scipy.linalg`` (as ``jax.scipy.linalg``): ``toeplitz``, ``hankel``, ``circulant``,
``companion`` from arrays; ``hilbert``, ``hadamard``, ``pascal``, ``dft`` from a size.

The ones built from arrays gather from the concatenated inputs with static index tables (so they batch over
leading axes, differentiate and run on every backend); the ones built from a size are constants made on the
host. Source: the SciPy reference (docs.scipy.org/doc/scipy/reference/linalg.html#special-matrices).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["circulant", "companion", "dft", "hadamard", "hankel", "hilbert", "pascal", "toeplitz"]


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _vectors(name, *xs):
    fnp = _fnp()
    xs = [fnp.asarray(x) for x in xs]
    for x in xs:
        if x.ndim == 0:
            raise ValueError(f"{name}: expected arrays of rank >= 1 (the last axis is the vector), got a scalar")
    return xs


def toeplitz(c, r=None):
    """The Toeplitz matrix with first column ``c`` and first row ``r`` (``scipy.linalg.toeplitz``).

    Args:
      c: ``(..., m)``. r: ``(..., n)``; default ``conj(c)`` (Hermitian). ``r[..., 0]`` is ignored.
    Returns:
      ``(..., m, n)``, ``T[i, j] = c[i - j]`` for ``i >= j`` else ``r[j - i]``.
    Raises:
      ``ValueError`` for scalars.
    """
    fnp = _fnp()
    (c,) = _vectors("toeplitz", c)
    r = fnp.conj(c) if r is None else _vectors("toeplitz", r)[0]
    m, n = c.shape[-1], r.shape[-1]
    batch = np.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    vals = fnp.concatenate([fnp.broadcast_to(fnp.flip(r[..., 1:], -1), batch + (n - 1,)),
                            fnp.broadcast_to(c, batch + (m,))], axis=-1)
    idx = n - 1 + np.arange(m)[:, None] - np.arange(n)[None, :]
    return vals[..., fnp.asarray(idx)]


def hankel(c, r=None):
    """The Hankel matrix with first column ``c`` and last row ``r`` (``scipy.linalg.hankel``).

    Args:
      c: ``(..., m)``. r: ``(..., n)``; default zeros. ``r[..., 0]`` is ignored.
    Returns:
      ``(..., m, n)``, ``H[i, j] = c[i + j]`` for ``i + j < m`` else ``r[i + j - m + 1]``.
    Raises:
      ``ValueError`` for scalars.
    """
    fnp = _fnp()
    (c,) = _vectors("hankel", c)
    r = fnp.zeros_like(c) if r is None else _vectors("hankel", r)[0]
    m, n = c.shape[-1], r.shape[-1]
    batch = np.broadcast_shapes(c.shape[:-1], r.shape[:-1])
    vals = fnp.concatenate([fnp.broadcast_to(c, batch + (m,)), fnp.broadcast_to(r[..., 1:], batch + (n - 1,))],
                           axis=-1)
    return vals[..., fnp.asarray(np.arange(m)[:, None] + np.arange(n)[None, :])]


def circulant(c):
    """The circulant matrix with first column ``c`` (``scipy.linalg.circulant``): ``C[i, j] = c[(i - j) % n]``.

    Args:
      c: ``(..., n)``.
    Returns:
      ``(..., n, n)``.
    Raises:
      ``ValueError`` for scalars.
    """
    fnp = _fnp()
    (c,) = _vectors("circulant", c)
    n = c.shape[-1]
    return c[..., fnp.asarray((np.arange(n)[:, None] - np.arange(n)[None, :]) % n)]


def companion(a):
    """The companion matrix of the polynomial with coefficients ``a``, highest power first
    (``scipy.linalg.companion``): first row ``-a[1:] / a[0]``, ones on the subdiagonal.

    Args:
      a: ``(..., n)`` with ``n >= 2``.
    Returns:
      ``(..., n - 1, n - 1)`` floating.
    Raises:
      ``ValueError`` for ``n < 2``.
    """
    fnp = _fnp()
    (a,) = _vectors("companion", a)
    n = a.shape[-1]
    if n < 2:
        raise ValueError(f"companion: needs at least 2 coefficients, got {n}")
    a = fnp.astype(a, fnp.result_type(a, 1.0))
    first = -a[..., 1:] / a[..., :1]
    below = fnp.broadcast_to(fnp.eye(n - 2, n - 1, dtype=a.dtype), a.shape[:-1] + (n - 2, n - 1))
    return fnp.concatenate([first[..., None, :], below], axis=-2)


def hilbert(n):
    """The ``n x n`` Hilbert matrix ``H[i, j] = 1 / (i + j + 1)`` (``scipy.linalg.hilbert``).

    Args:
      n: the size, a Python int.
    Returns:
      a ``float32`` array of shape ``(n, n)``.
    Raises:
      ``TypeError`` when ``n`` is not an int (from ``numpy.arange``).
    """
    i = np.arange(n)
    return _fnp().asarray(1.0 / (i[:, None] + i[None, :] + 1), dtype=_fnp().float32)


def hadamard(n, dtype=int):
    """The ``n x n`` Hadamard matrix of Sylvester's construction (``scipy.linalg.hadamard``).

    Args:
      n: a power of 2. dtype: the result's dtype (default int: ``int32``).
    Returns:
      an array of shape ``(n, n)`` of 1 and -1.
    Raises:
      ``ValueError`` when ``n`` is not a positive power of 2.
    """
    if n < 1 or n & (n - 1):
        raise ValueError(f"hadamard: n must be a positive power of 2, got {n}")
    h = np.ones((1, 1), np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return _fnp().asarray(h, dtype=dtype)


def pascal(n, kind=None):
    """The ``n x n`` Pascal matrix of binomial coefficients (``scipy.linalg.pascal``).

    Args:
      n: the size. kind: ``"symmetric"`` (default, ``C(i + j, i)``), ``"lower"`` (``C(i, j)``) or
        ``"upper"``.
    Returns:
      a ``float32`` matrix (as ``jax.scipy.linalg``; exact up to ``2**24``).
    Raises:
      ``ValueError`` for another kind.
    """
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise ValueError(f"pascal: kind must be 'symmetric', 'lower' or 'upper', got {kind!r}")
    if kind == "symmetric":
        p = [[math.comb(i + j, i) for j in range(n)] for i in range(n)]
    else:
        p = [[math.comb(i, j) for j in range(n)] for i in range(n)]
    p = np.array(p, np.int64).reshape(n, n)
    return _fnp().asarray(p.T if kind == "upper" else p, dtype=_fnp().float32)


def dft(n, scale=None, *, dtype=None):
    """The ``n``-point discrete Fourier transform matrix ``exp(-2 pi i j k / n)`` (``scipy.linalg.dft``).

    Args:
      n: the size. scale: None, ``"n"`` (divide by ``n``) or ``"sqrtn"`` (by ``sqrt(n)``). dtype: a complex
        dtype (default ``complex64``).
    Returns:
      an array of shape ``(n, n)``.
    Raises:
      ``ValueError`` for another scale.
    """
    if scale not in (None, "n", "sqrtn"):
        raise ValueError(f"dft: scale must be None, 'n' or 'sqrtn', got {scale!r}")
    k = np.arange(n)
    m = np.exp(-2j * np.pi * np.outer(k, k) / n)
    m = m / n if scale == "n" else m / math.sqrt(n) if scale == "sqrtn" else m
    return _fnp().asarray(m, dtype=dtype or _fnp().complex64)
