"""``fnarray.lax``'s convolutions, as ``jax.lax``'s: ``conv_general_dilated`` and its shorthands.

They turn JAX's argument forms (padding strings, dimension-number strings, ``None`` dilations) into the
primitive's canonical params (``fnarray.core.conv``) and bind it.
"""

from __future__ import annotations

import operator

from fnarray.core import dtypes
from fnarray.core.avals import asarray, get_aval
from fnarray.core.conv import (ConvDimensionNumbers, canonical_precision, conv_dimension_numbers,
                               conv_general_dilated_p, dilate_dim, padtype_to_pads)
from fnarray.core.errors import ShapeError

__all__ = ["conv_general_dilated", "conv", "conv_with_general_padding", "conv_transpose", "conv_dimension_numbers",
           "ConvDimensionNumbers", "padtype_to_pads"]


def _int_tuple(name, value, n, default=1):
    if value is None:
        return (default,) * n
    if isinstance(value, int):
        value = (value,) * n
    try:
        out = tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(f"conv: {name} must be a sequence of ints, got {value!r}") from None
    if len(out) != n:
        raise ShapeError(f"conv: {name} needs {n} entries (one per spatial dimension), got {out}")
    if any(v < 1 for v in out):
        raise ValueError(f"conv: {name} must be >= 1 in every spatial dimension, got {out}")
    return out


def _pad_pairs(padding, n):
    try:
        pads = tuple(tuple(operator.index(v) for v in p) for p in padding)
    except TypeError:
        raise TypeError(f"conv: padding must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of (low, high) int "
                        f"pairs, got {padding!r}") from None
    if len(pads) != n or any(len(p) != 2 for p in pads):
        raise ShapeError(f"conv: padding needs {n} (low, high) pairs (one per spatial dimension), got {pads}")
    return pads


def _operand(x):
    """Arrays and tracers as they are; NumPy arrays, lists and scalars as Arrays (``jax.lax`` takes them too)."""
    return x if hasattr(x, "aval") else asarray(x)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None):
    """General N-d convolution (cross-correlation), as ``jax.lax.conv_general_dilated``.

    Args:
      lhs: the input, rank ``n + 2`` (batch, feature and ``n`` spatial dimensions, laid out as
        ``dimension_numbers`` says).
      rhs: the kernel, rank ``n + 2`` (output features, input features / ``feature_group_count``, spatial).
      window_strides: ``n`` ints >= 1.
      padding: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or ``n`` ``(low, high)`` pairs (negative crops).
      lhs_dilation: ``n`` ints >= 1 (``None``: 1), the input's dilation (a transposed convolution).
      rhs_dilation: ``n`` ints >= 1 (``None``: 1), the kernel's dilation (atrous convolution).
      dimension_numbers: ``None`` (``NC...``/``OI...``/``NC...``), strings such as ``("NHWC", "HWIO", "NHWC")``,
        or a ``ConvDimensionNumbers``.
      feature_group_count: groups of input features (grouped and depthwise convolutions).
      batch_group_count: groups of the input batch (what the kernel gradient of a grouped convolution uses).
      precision: ``None``, ``"default"``, ``"high"``, ``"highest"`` (or a pair): passed to XLA on the jax backend.
      preferred_element_type: the accumulation and result dtype (e.g. ``float32`` for ``bfloat16`` operands).

    Returns:
      An array laid out as ``dimension_numbers``' output spec, of the operands' dtype (or the preferred one).

    Raises:
      ShapeError: feature or batch counts that do not fit the group counts, wrong numbers of strides, dilations
        or padding pairs, dimension numbers that disagree with the ranks, a window larger than the padded input.
      ValueError: strides or dilations <= 0, an unknown padding string, string padding with ``lhs_dilation``.
      DTypeError: operands of different dtypes, or bool.

    Method: XLA's ConvGeneralDilated semantics (see ``fnarray.core.conv``). Example::

        y = fa.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    """
    lhs, rhs = _operand(lhs), _operand(rhs)
    la, ra = get_aval(lhs), get_aval(rhs)
    dn = conv_dimension_numbers(la.shape, ra.shape, dimension_numbers)
    n = la.ndim - 2
    strides = _int_tuple("window_strides", window_strides, n)
    lhs_dil = _int_tuple("lhs_dilation", lhs_dilation, n)
    rhs_dil = _int_tuple("rhs_dilation", rhs_dilation, n)
    if isinstance(padding, str):
        if any(d != 1 for d in lhs_dil):
            raise ValueError(f"conv_general_dilated: string padding {padding!r} with lhs_dilation {lhs_dil} is not "
                             f"defined; give explicit (low, high) pairs or use fnarray.lax.conv_transpose")
        in_sp = [la.shape[d] for d in dn.lhs_spec[2:]]
        win = [dilate_dim(ra.shape[d], r) for d, r in zip(dn.rhs_spec[2:], rhs_dil, strict=True)]
        pads = padtype_to_pads(in_sp, win, strides, padding)
    else:
        pads = _pad_pairs(padding, n)
    for name, g in (("feature_group_count", feature_group_count), ("batch_group_count", batch_group_count)):
        if operator.index(g) < 1:
            raise ValueError(f"conv_general_dilated: {name} must be >= 1, got {g}")
    pet = dtypes.canonicalize(preferred_element_type) if preferred_element_type is not None else None
    return conv_general_dilated_p.bind(
        lhs, rhs, window_strides=strides, padding=pads, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
        dimension_numbers=dn, feature_group_count=operator.index(feature_group_count),
        batch_group_count=operator.index(batch_group_count), precision=canonical_precision(precision),
        preferred_element_type=pet)


def conv(lhs, rhs, window_strides, padding, precision=None, preferred_element_type=None):
    """``conv_general_dilated`` in the ``NC...``/``OI...`` layout without dilation, as ``jax.lax.conv``.

    Args, Returns, Raises: as ``conv_general_dilated``.
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, precision=None,
                              preferred_element_type=None):
    """``conv_general_dilated`` in the ``NC...``/``OI...`` layout, as ``jax.lax.conv_with_general_padding``.

    Args, Returns, Raises: as ``conv_general_dilated``.
    """
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                precision=precision, preferred_element_type=preferred_element_type)


def _transpose_padding(k, s, padding):
    """The (low, high) padding of a stride-``s`` transposed convolution with window ``k`` (JAX's convention)."""
    if padding == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total = k + s - 2 + max(k - s, 0)
        lo = k - 1
    else:
        raise ValueError(f"conv_transpose: padding string must be 'SAME' or 'VALID', got {padding!r}")
    return lo, total - lo


def _default_transpose_dn(ndim):
    if ndim < 2:
        raise ShapeError(f"conv_transpose: operands need rank >= 2, got rank {ndim}")
    letters = "HWDEFGJKLMPQRSTUVXYZ"[:ndim - 2]
    return ("N" + letters + "C", letters + "IO", "N" + letters + "C")


def conv_transpose(lhs, rhs, strides, padding, rhs_dilation=None, dimension_numbers=None, transpose_kernel=False,
                   precision=None, preferred_element_type=None):
    """Transposed convolution (the input dilated by ``strides``), as ``jax.lax.conv_transpose``.

    Args:
      lhs: the input; ``rhs``: the kernel.
      strides: ``n`` ints, the input's dilation.
      padding: ``"SAME"``, ``"VALID"`` or ``n`` ``(low, high)`` pairs.
      rhs_dilation: the kernel's dilation (``None``: 1).
      dimension_numbers: as ``conv_general_dilated``; ``None`` means ``N...C``/``...IO``/``N...C`` (channels last).
      transpose_kernel: flip the kernel's spatial dimensions and swap its feature dimensions, so that the result
        is the gradient of ``conv_general_dilated`` with respect to its input (as in TensorFlow's conv2d_transpose).
      precision, preferred_element_type: as ``conv_general_dilated``.

    Returns:
      The transposed convolution, laid out as the output spec.

    Raises:
      As ``conv_general_dilated``; ValueError for padding strings other than SAME and VALID.
    """
    lhs, rhs = _operand(lhs), _operand(rhs)
    la, ra = get_aval(lhs), get_aval(rhs)
    if dimension_numbers is None:
        dimension_numbers = _default_transpose_dn(la.ndim)
    dn = conv_dimension_numbers(la.shape, ra.shape, dimension_numbers)
    n = la.ndim - 2
    strides = _int_tuple("strides", strides, n)
    rhs_dil = _int_tuple("rhs_dilation", rhs_dilation, n)
    if isinstance(padding, str):
        win = [dilate_dim(ra.shape[d], r) for d, r in zip(dn.rhs_spec[2:], rhs_dil, strict=True)]
        pads = tuple(_transpose_padding(k, s, padding.upper()) for k, s in zip(win, strides, strict=True))
    else:
        pads = _pad_pairs(padding, n)
    if transpose_kernel:
        from fnarray.core import lax  # noqa: PLC0415 (lax does not import this module)
        rhs = lax.rev(rhs, tuple(dn.rhs_spec[2:]))
        perm = list(range(ra.ndim))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = perm[dn.rhs_spec[1]], perm[dn.rhs_spec[0]]
        rhs = lax.transpose(rhs, tuple(perm))
    return conv_general_dilated(lhs, rhs, (1,) * n, pads, strides, rhs_dil, dn, precision=precision,
                                preferred_element_type=preferred_element_type)
