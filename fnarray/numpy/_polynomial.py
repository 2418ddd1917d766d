"""Polynomial arithmetic on coefficient arrays, highest power first (``numpy.polyadd`` and kin, as ``jax.numpy``).

Composites of the namespace (``convolve``, ``pad``, slicing, ``linalg.lstsq``), so they run under ``jit``, ``grad`` and
``vmap``; the coefficient counts are shapes, hence static. ``polyval`` lives in ``_extras.py``.
Source: the NumPy reference (numpy.org/doc/stable/reference/routines.polynomials-poly1d.html).
"""

from __future__ import annotations

__all__ = ["polyadd", "polyder", "polyfit", "polyint", "polymul", "polysub"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _coeffs(name, p):
    fnp = _np()
    p = fnp.asarray(p)
    if p.ndim != 1:
        raise ValueError(f"{name}: coefficients must be a 1-d array, got shape {p.shape}; pass one polynomial at "
                         f"a time (vmap over a batch)")
    return p


def _aligned(name, a1, a2):
    fnp = _np()
    a1, a2 = _coeffs(name, a1), _coeffs(name, a2)
    n = max(a1.shape[0], a2.shape[0])
    return fnp.pad(a1, (n - a1.shape[0], 0)), fnp.pad(a2, (n - a2.shape[0], 0))


def polyadd(a1, a2):
    """The sum of two polynomials (``numpy.polyadd``): the shorter is padded with leading zeros.

    Args: a1, a2: 1-d coefficient arrays, highest power first. Returns: the longer length, promoted dtype.
    Raises: ``ValueError`` for inputs that are not 1-d.
    """
    x, y = _aligned("polyadd", a1, a2)
    return x + y


def polysub(a1, a2):
    """The difference ``a1 - a2`` of two polynomials (``numpy.polysub``); as ``polyadd``."""
    x, y = _aligned("polysub", a1, a2)
    return x - y


def polymul(a1, a2, *, trim_leading_zeros=False):
    """The product of two polynomials (``numpy.polymul``): the full convolution of the coefficients.

    Args: a1, a2: 1-d coefficient arrays. trim_leading_zeros: only ``False`` (the length must be static).
    Returns: length ``len(a1) + len(a2) - 1``, promoted dtype.
    Raises: ``ValueError`` for inputs that are not 1-d; ``NotImplementedError`` for ``trim_leading_zeros``.
    """
    if trim_leading_zeros:
        raise NotImplementedError("polymul: trim_leading_zeros=True gives a value-dependent length; trim the "
                                  "result with numpy.trim_zeros on the host")
    return _np().convolve(_coeffs("polymul", a1), _coeffs("polymul", a2))


def polyder(p, m=1):
    """The ``m``-th derivative of a polynomial (``numpy.polyder``).

    Args: p: 1-d coefficients, highest power first. m: a non-negative int.
    Returns: ``max(len(p) - m, 0)`` coefficients in ``p``'s dtype. Raises: ``ValueError`` for ``m < 0``.
    """
    fnp = _np()
    p = _coeffs("polyder", p)
    if m < 0:
        raise ValueError(f"polyder: the order m must be non-negative, got {m}")
    for _ in range(m):
        n = p.shape[0] - 1
        if n <= 0:
            return p[:0]
        p = p[:-1] * fnp.arange(n, 0, -1, dtype=p.dtype)
    return p


def polyint(p, m=1, k=None):
    """The ``m``-th antiderivative of a polynomial (``numpy.polyint``), integration constants ``k``.

    Args: p: 1-d coefficients. m: a non-negative int. k: ``None`` (zeros), a scalar (used for every
      integration) or ``m`` constants, the first for the first integration.
    Returns: ``len(p) + m`` coefficients in ``p``'s floating dtype.
    Raises: ``ValueError`` for ``m < 0`` or ``k`` of a length other than ``m``.
    """
    fnp = _np()
    p = _coeffs("polyint", p)
    if m < 0:
        raise ValueError(f"polyint: the order m must be non-negative, got {m}")
    p = fnp.astype(p, fnp.result_type(p, 1.0))
    ks = fnp.zeros((m,), p.dtype) if k is None else fnp.ravel(fnp.asarray(k, p.dtype))
    if ks.shape[0] == 1 and m > 1:
        ks = fnp.broadcast_to(ks, (m,))
    if ks.shape[0] != m:
        raise ValueError(f"polyint: k must hold m={m} integration constants, got {ks.shape[0]}")
    for i in range(m):
        n = p.shape[0]
        p = fnp.concatenate([p / fnp.arange(n, 0, -1, dtype=p.dtype), ks[i:i + 1]])
    return p


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """The least-squares polynomial of degree ``deg`` through the points ``(x, y)`` (``numpy.polyfit``).

    The Vandermonde matrix's columns are scaled to unit norm before ``linalg.lstsq`` (as NumPy and JAX), which
    keeps high degrees well conditioned.

    Args: x: ``(M,)`` sample positions. y: ``(M,)`` or ``(M, K)`` values (``K`` fits at once). deg: the degree,
      a Python int. rcond: the relative cutoff of small singular values (default ``M * eps``). w: optional
      ``(M,)`` weights applied to the residuals. full, cov: only False.
    Returns: ``(deg + 1,)`` or ``(deg + 1, K)`` coefficients, highest power first, floating.
    Raises: ``ValueError`` for a negative degree or inputs of the wrong rank; ``NotImplementedError`` for
    ``full=True`` or ``cov=True``.
    """
    fnp = _np()
    if full or cov:
        raise NotImplementedError("polyfit: full=True and cov=True are not supported; compute the residuals from "
                                  "polyval(p, x) - y")
    if deg < 0:
        raise ValueError(f"polyfit: deg must be non-negative, got {deg}")
    x = fnp.asarray(x)
    y = fnp.asarray(y)
    dtype = fnp.result_type(x, y, 1.0)
    x, y = fnp.astype(x, dtype), fnp.astype(y, dtype)
    if x.ndim != 1 or y.ndim not in (1, 2) or y.shape[0] != x.shape[0]:
        raise ValueError(f"polyfit: expected x of shape (M,) and y of shape (M,) or (M, K), got {x.shape} and "
                         f"{y.shape}")
    lhs = fnp.vander(x, deg + 1)
    rhs = y
    if w is not None:
        w = fnp.astype(fnp.asarray(w), dtype)
        lhs = lhs * w[:, None]
        rhs = rhs * (w if y.ndim == 1 else w[:, None])
    rcond = x.shape[0] * fnp.finfo(dtype).eps if rcond is None else rcond
    scale = fnp.sqrt(fnp.sum(lhs * lhs, axis=0))
    coeffs = fnp.linalg.lstsq(lhs / scale, rhs, rcond=rcond)[0]
    return coeffs / (scale if y.ndim == 1 else scale[:, None])
