"""XLA's CPU code for float32 ``erf_inv`` (and the ``log1p``/``log`` it calls), evaluated in NumPy with the
same operations in the same order, so that the numpy backend's float32 ``erf_inv`` (and hence
``fnarray.random.normal`` and the samplers and initialisers built on it) is bitwise XLA's.

What XLA computes (jaxlib 0.10 on x86-64 with FMA, read from its dumped LLVM IR and machine code):

- ``erf_inv(x)``: ``w = -log1p(-(x * x))``; for ``w < 5`` the degree-8 polynomial (Giles 2010, "Approximating
  the erfinv function", single-precision branch) in ``w - 2.5``, else the other one in ``sqrt(w) - 3``,
  by Horner's rule with every step one fused multiply-add; times ``x``; ``+-1`` give ``+-inf``.
- ``log1p(t)``: for ``|t| < sqrt(2) - 1``, ``t + (t**3 * P(t) / Q(t) - t**2 / 2)`` with the rational
  approximation of Cephes (degree 6 over 6, Horner by fused multiply-adds); else ``log(1 + t)``.
- ``log(y)``: Cephes' ``logf``: ``y = m * 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))``, a degree-8
  polynomial in ``z = m - 1`` split in three interleaved Horner chains, ``e * log(2)`` in two parts.

LLVM contracts every ``a * b + c`` into one fused multiply-add (rounded once); ``fma`` below emulates that
exactly in float64 (the product of two float32 is exact; the one sum is corrected where it lands on a
float32 rounding tie). On a CPU without FMA, XLA itself rounds differently, so bitwise agreement with JAX
holds for the x86-64/AArch64 FMA code XLA emits, and within a few ulp otherwise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["erf_inv", "fma", "log", "log1p"]

_F = np.float32


def _bits(u: int) -> np.float32:
    return np.array(u, np.uint32).view(_F)[()]


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` of float32 arrays rounded once to float32 (IEEE 754 fusedMultiplyAdd)."""
    a, b, c = (np.asarray(v, _F).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a * b                       # exact: 24 + 24 bits fit in 53
        s = p + c
        back = s - c
        err = (p - back) + (c - (s - back))   # TwoSum: exactly (p + c) - s
        r = s.astype(_F)
        r64 = r.astype(np.float64)
        other = np.where(s > r64, np.nextafter(r, _F(np.inf)), np.nextafter(r, _F(-np.inf))).astype(np.float64)
        # s exactly halfway between two float32: the exact sum lies on err's side of it
        tie = (s != r64) & (np.abs(s - r64) == np.abs(other - s)) & (err != 0)
        out = np.where(tie & ((other - s) * err > 0), other, r64)
    return out.astype(_F)


# Cephes logf: the polynomial's coefficients (high degree first) and log(2) in two parts
_LOG_P = tuple(map(_bits, (0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF, 0xBE2AAE50,
                           0x3E4CCEAC, 0xBE7FFFFC, 0x3EAAAAAA)))
_LN2_HI, _LN2_LO = _bits(0x3F318000), _bits(0xB95E8083)
_SQRT_HALF, _MIN_NORMAL = _bits(0x3F3504F3), _bits(0x00800000)
# Cephes log1pf's rational approximation on |t| < sqrt(2) - 1 (numerator, denominator; high degree first)
_LOG1P_P = (_F(4.527e-05),) + tuple(map(_bits, (0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD,
                                                0x41A05101)))
_LOG1P_Q = (_F(1.0),) + tuple(map(_bits, (0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A,
                                          0x42707982)))
_LOG1P_SMALL = _bits(0x3ED413CD)


def log(y) -> np.ndarray:
    """XLA CPU's float32 natural logarithm; ``log(0) = -inf``, ``log(inf) = inf``, negative or NaN -> NaN."""
    y = np.asarray(y, _F)
    m = np.where(y > _MIN_NORMAL, y, _MIN_NORMAL).astype(_F)
    word = m.view(np.uint32)
    exponent = (word >> np.uint32(23)).astype(np.int32) - 127
    mant = ((word & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(_F)   # in [0.5, 1)
    below = mant < _SQRT_HALF
    e = (exponent.astype(_F) + _F(1)) - np.where(below, _F(1), _F(0))
    z = (mant - _F(1)) + np.where(below, mant, _F(0))
    z2 = z * z
    z3 = z2 * z
    a, b, c = (fma(z, _LOG_P[i], _LOG_P[i + 1]) for i in (0, 3, 6))
    a, b, c = fma(a, z, _LOG_P[2]), fma(b, z, _LOG_P[5]), fma(c, z, _LOG_P[8])
    c = fma(fma(fma(a, z3, b), z3, c), z3, e * _LN2_LO)
    r = fma(e, _LN2_HI, fma(z2, _F(-0.5), z) + c)
    with np.errstate(invalid="ignore"):
        r = np.where((y < 0) | np.isnan(y), _F(np.nan), r)
    return np.where(y == 0, _F(-np.inf), np.where(y == np.inf, _F(np.inf), r)).astype(_F)


def _flush(x):
    """Subnormals to zero of the same sign (XLA CPU runs with flush-to-zero and denormals-are-zero)."""
    return np.where(np.abs(x) < _MIN_NORMAL, np.copysign(_F(0), x), x).astype(_F)


def log1p(t) -> np.ndarray:
    """XLA CPU's float32 ``log1p``: Cephes' rational approximation near 0, ``log(1 + t)`` elsewhere."""
    t = _flush(np.asarray(t, _F))
    t2 = t * t
    num, den = _LOG1P_P[0], _LOG1P_Q[0]
    for p, q in zip(_LOG1P_P[1:], _LOG1P_Q[1:]):
        num, den = fma(num, t, p), fma(den, t, q)
    with np.errstate(all="ignore"):
        small = t + fma(t2, _F(-0.5), (t * t2) * (num / den))
        return np.where(np.abs(t) < _LOG1P_SMALL, small, log(t + _F(1))).astype(_F)


# Giles (2010), single precision: coefficients high degree first, for w < 5 and for w >= 5
_ERF_INV_SMALL = tuple(map(_F, (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)))
_ERF_INV_LARGE = tuple(map(_F, (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)))


def erf_inv(x) -> np.ndarray:
    """XLA's float32 ``erf_inv`` (``xla::ErfInv`` for F32) as XLA CPU evaluates it; ``|x| > 1`` -> NaN."""
    x = _flush(np.asarray(x, _F))
    with np.errstate(all="ignore"):
        w = -log1p(_flush(x * -x))
        small = w < _F(5)
        arg = np.where(small, w + _F(-2.5), np.sqrt(w) + _F(-3)).astype(_F)
        p = np.where(small, _ERF_INV_SMALL[0], _ERF_INV_LARGE[0]).astype(_F)
        for cs, cl in zip(_ERF_INV_SMALL[1:], _ERF_INV_LARGE[1:]):
            p = fma(p, arg, np.where(small, cs, cl))
        return np.where(np.abs(x) == 1, x * _F(np.inf), p * x).astype(_F)
