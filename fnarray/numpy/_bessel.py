"""The modified Bessel functions of orders 0 and 1, ``exp(-|x|) I_n(x)`` and ``I_0``: ``fnarray.numpy.i0``, and the
core of ``fnarray.scipy.special``'s ``i0``/``i0e``/``i1``/``i1e`` (which import it from here: the namespace
imports nothing from ``fnarray.scipy``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError

__all__ = ["i0"]


def _np():
    import fnarray.numpy as fnp
    return fnp


def _split(d):
    """(crossover, series terms, asymptotic terms) for i0e/i1e: the power series below the crossover (positive
    terms, no cancellation), Hankel's asymptotic expansion above it, each to the dtype's epsilon."""
    return (20.0, 40, 30) if d == dtypes.float64 else (10.0, 22, 14)


def bessel_ie(x, order):
    """``exp(-|x|) I_order(x)`` for order 0 or 1 (A&S 9.6.10 series, 9.7.1 asymptotic expansion)."""
    fnp = _np()
    cross, n_series, n_asym = _split(x.dtype)
    ax = fnp.abs(x)
    small = ax <= cross
    xs = fnp.where(small, x, 0.0)
    q = 0.25 * xs * xs
    # I_0(x) = sum_k q^k / (k!)^2 ; I_1(x) = (x/2) sum_k q^k / (k! (k+1)!)  (in Horner form, reversed)
    acc = fnp.ones_like(q)
    for k in range(n_series, 0, -1):
        acc = 1.0 + acc * q / (k * (k + order))
    series = acc if order == 0 else 0.5 * xs * acc
    series = series * fnp.exp(-fnp.abs(xs))
    # exp(-x) I_nu(x) ~ (2 pi x)^(-1/2) sum_k c_k / x^k, c_k = c_{k-1} ((2k-1)^2 - 4 nu^2) / (8k).
    xl = fnp.where(small, cross, ax)
    inv = 1.0 / xl
    coefs = [1.0]
    for k in range(1, n_asym + 1):
        coefs.append(coefs[-1] * ((2 * k - 1) ** 2 - 4 * order * order) / (8 * k))
    poly = fnp.full_like(inv, coefs[-1])
    for c in coefs[-2::-1]:
        poly = c + poly * inv
    # rsqrt(x), not sqrt(1/x): 1/x is subnormal for x > 8.5e37 in float32 (flushed to 0 by XLA).
    asym = poly * lax.rsqrt(xl) * math.sqrt(1 / (2 * math.pi))
    if order == 1:
        asym = fnp.where(x < 0.0, -asym, asym)
    return fnp.where(small, series, asym)


def scaled_up(e, x):
    """``exp(|x|) * e`` as ``(exp(|x|/2) * e) * exp(|x|/2)``: no overflow before the result overflows (float32's
    ``exp(89)`` does, its ``I0(89) = 1.9e37`` does not)."""
    half = _np().exp(0.5 * _np().abs(x))
    return (half * e) * half


def i0_of(x):
    """``I0(x)`` for ``x`` of a floating dtype of at least 32 bits: ``exp(|x|) i0e(x)`` split in halves
    (``scaled_up``); ``I0(±inf) = inf``."""
    return _np().where(_np().isinf(x), np.inf, scaled_up(bessel_ie(x, 0), x))


def i0(x):
    """The modified Bessel function of the first kind of order 0 (``numpy.i0``; ``jax.numpy.i0``).

    The same function as ``fnarray.scipy.special.i0``: ``exp(|x|) * i0e(x)``, Abramowitz and Stegun 9.6.10's
    series below 10 (float32) or 20 (float64), 9.7.1's asymptotic expansion above; differentiable (its
    derivative ``I1``). Half-precision inputs are computed in float32.

    Args:
      x: a real array or scalar of shape ``S``; integers and bool promote to ``float32``.

    Returns: an array of shape ``S`` and ``x``'s floating dtype; ``i0(±inf) = inf`` (JAX's gives NaN).

    Raises: ``DTypeError`` for complex ``x`` (as ``jax.numpy.i0``); ``TypeError`` for a non-array.
    """
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike("i0", x)
    x = asarray_internal(x)
    if dtypes.is_complex(x.dtype):
        raise DTypeError(f"i0 is defined for real inputs, got {x.dtype.name}; pass the real part "
                         "(fnarray.numpy.real) if that is what you mean")
    d = dtypes.to_inexact(x.dtype)
    m = dtypes.float32 if d in (dtypes.float16, dtypes.bfloat16) else d
    y = i0_of(lax.convert_element_type(x, m) if x.dtype != m else x)
    return lax.convert_element_type(y, d) if d != m else y
