"""``convolve`` and ``correlate`` (NumPy's 1-D functions) on the ``conv_general_dilated`` primitive.

Both promote their operands to one dtype (JAX's lattice); integers stay integers (and wrap), as in NumPy;
booleans give the logical or of ands, as NumPy's. The longer operand is the convolution's input and the shorter
its kernel, so either order costs the same.
"""

from __future__ import annotations

from fnarray.core import dtypes, lax
from fnarray.core.conv import ConvDimensionNumbers
from fnarray.core.errors import ShapeError
from fnarray.core.lax_conv import conv_general_dilated
from fnarray.numpy._util import asarray_internal, check_arraylike, promote

__all__ = ["convolve", "correlate"]

_DN = ConvDimensionNumbers((0, 1, 2), (0, 1, 2), (0, 1, 2))


def _operands(name, a, v, mode):
    check_arraylike(name, a, v)
    x, y = (asarray_internal(t) for t in promote(name, asarray_internal(a), asarray_internal(v)))
    for t, what in ((x, "a"), (y, "v")):
        if t.ndim != 1:
            raise ShapeError(f"{name}: {what} must be 1-D, got shape {t.shape}; for n-d arrays use "
                             f"fnarray.lax.conv_general_dilated")
        if t.shape[0] == 0:
            raise ValueError(f"{name}: {what} cannot be empty (got shape {t.shape})")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"{name}: mode must be 'full', 'same' or 'valid', got {mode!r}")
    return x, y


def _conj(x):
    return lax.conj(x) if dtypes.is_complex(x.dtype) else x


def _slide(x, k, mode):
    """``sum_j x[i + j] k[j]`` (``len(x) >= len(k)``) at the positions ``mode`` keeps."""
    m = k.shape[0]
    pads = {"valid": (0, 0), "full": (m - 1, m - 1), "same": (m // 2, (m - 1) // 2)}[mode]
    is_bool = x.dtype == dtypes.bool_
    if is_bool:
        x, k = lax.convert_element_type(x, dtypes.int32), lax.convert_element_type(k, dtypes.int32)
    out = conv_general_dilated(lax.reshape(x, (1, 1, x.shape[0])), lax.reshape(k, (1, 1, m)), (1,), (pads,),
                               dimension_numbers=_DN)
    out = lax.reshape(out, (out.shape[2],))
    return lax.gt(out, 0) if is_bool else out


def convolve(a, v, mode="full"):
    """Discrete linear convolution of two 1-D arrays, as ``numpy.convolve``.

    Args:
      a, v: 1-D arrays (non-empty), promoted to one dtype.
      mode: ``"full"`` (length ``n + m - 1``), ``"same"`` (length ``max(n, m)``, centred as NumPy's) or
        ``"valid"`` (length ``max(n, m) - min(n, m) + 1``).

    Returns:
      ``(a * v)[k] = sum_j a[j] v[k - j]`` at the positions of ``mode``.

    Raises:
      ShapeError: an operand that is not 1-D. ValueError: an empty operand or an unknown mode.
    """
    x, y = _operands("convolve", a, v, mode)
    if y.shape[0] > x.shape[0]:
        x, y = y, x
    return _slide(x, lax.rev(y, (0,)), mode)


def correlate(a, v, mode="valid"):
    """Cross-correlation of two 1-D arrays, as ``numpy.correlate``: ``c[k] = sum_n a[n + k] * conj(v[n])``.

    Args:
      a, v: 1-D arrays (non-empty), promoted to one dtype.
      mode: ``"valid"`` (the default, as NumPy's), ``"same"`` or ``"full"``.

    Returns:
      The correlation at the positions of ``mode``; when ``v`` is longer than ``a``, NumPy's convention
      (the conjugated, reversed correlation of ``v`` with ``a``).

    Raises:
      ShapeError: an operand that is not 1-D. ValueError: an empty operand or an unknown mode.
    """
    x, y = _operands("correlate", a, v, mode)
    if y.shape[0] > x.shape[0]:
        return lax.rev(_conj(_slide(y, _conj(x), mode)), (0,))
    return _slide(x, _conj(y), mode)
