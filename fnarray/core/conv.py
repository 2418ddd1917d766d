"""The convolution primitive ``conv_general_dilated``: its parameters and its shape/dtype rule.

Semantics (as XLA's ConvGeneralDilated and ``jax.lax.conv_general_dilated``). Let the operands be seen through
``dimension_numbers`` as ``lhs[N, C, *S]`` (batch, feature, spatial), ``rhs[O, I, *K]`` (output feature,
input feature, kernel spatial) and the result as ``out[N', O, *S']``. For each spatial dimension ``i``:

1. the input is dilated by ``lhs_dilation[i]`` (``d - 1`` zeros between neighbours: size ``(s - 1) * d + 1``),
2. padded with ``padding[i] = (lo, hi)`` zeros (negative values crop),
3. the kernel is dilated by ``rhs_dilation[i]`` (its window spans ``(k - 1) * d + 1``),
4. the kernel slides over the padded input with stride ``window_strides[i]``; the result has
   ``(padded - window) // stride + 1`` positions (a window larger than the padded input is an error).

This is a cross-correlation (the kernel is not flipped). ``feature_group_count = G`` splits the input features
into ``G`` groups of ``C / G`` (which must equal ``I``) and the output features into ``G`` groups of ``O / G``;
group ``g`` of the output sees only group ``g`` of the input (``G == C`` is a depthwise convolution).
``batch_group_count = B`` splits the input batch into ``B`` groups of ``N / B`` (``N' = N / B``) and the output
features into ``B`` groups: output feature group ``b`` is the convolution of batch group ``b``. At most one of the
two counts exceeds 1. Integers wrap; float16/bfloat16 accumulate in float32; ``preferred_element_type`` names the
accumulation and result dtype (bfloat16 operands with float32 give a float32 result).

``ConvDimensionNumbers`` and ``padtype_to_pads`` live here so that every layer (lax wrappers, rules, lowerings,
windowed reductions) uses one definition.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["ConvDimensionNumbers", "conv_general_dilated_p", "conv_dimension_numbers", "padtype_to_pads",
           "canonical_precision", "conv_shape", "dilate_dim"]


class ConvDimensionNumbers(NamedTuple):
    """Where the dimensions of a convolution's operands are, as ``jax.lax.ConvDimensionNumbers``.

    ``lhs_spec``: (batch dimension, feature dimension, spatial dimensions...) of the input;
    ``rhs_spec``: (output-feature dimension, input-feature dimension, spatial dimensions...) of the kernel;
    ``out_spec``: (batch dimension, feature dimension, spatial dimensions...) of the result.
    Each is a tuple of ints, a permutation of ``range(ndim)``.
    """

    lhs_spec: tuple
    rhs_spec: tuple
    out_spec: tuple


_PAIRS = (("N", "C"), ("O", "I"), ("N", "C"))
_WHAT = ("lhs (input)", "rhs (kernel)", "out (result)")


def _spec_from_string(strings, ranks):
    """JAX's reading of ``("NCHW", "OIHW", "NCHW")``: spatial dims are matched by letter, ordered as the kernel's."""
    if len(strings) != 3 or not all(isinstance(s, str) for s in strings):
        raise TypeError(f"conv dimension_numbers as strings needs three strings (lhs, rhs, out), got {strings!r}")
    for s, (a, b), what, rank in zip(strings, _PAIRS, _WHAT, ranks, strict=True):
        if s.count(a) != 1 or s.count(b) != 1:
            raise ShapeError(f"conv dimension_numbers: the {what} spec {s!r} needs exactly one {a!r} and one {b!r}")
        if len(set(s)) != len(s):
            raise ShapeError(f"conv dimension_numbers: the {what} spec {s!r} repeats a letter")
        if rank is not None and len(s) != rank:
            raise ShapeError(f"conv dimension_numbers: the {what} spec {s!r} has {len(s)} letters but the {what} "
                             f"has rank {rank}; give one letter per dimension")
    lhs, rhs, out = strings
    spatial = [set(s) - set(p) for s, p in zip(strings, _PAIRS, strict=True)]
    if not spatial[0] == spatial[1] == spatial[2]:
        raise ShapeError(f"conv dimension_numbers {strings!r}: the spatial letters of lhs, rhs and out must agree")
    order = [c for c in rhs if c not in _PAIRS[1]]

    def perm(s, pair):
        return (s.index(pair[0]), s.index(pair[1])) + tuple(s.index(c) for c in order)
    return ConvDimensionNumbers(perm(lhs, _PAIRS[0]), perm(rhs, _PAIRS[1]), perm(out, _PAIRS[2]))


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> ConvDimensionNumbers:
    """``dimension_numbers`` (None, three strings, three int tuples or ``ConvDimensionNumbers``) as ints.

    Args:
      lhs_shape, rhs_shape: the operands' shapes (equal ranks, at least 2).
      dimension_numbers: ``None`` (``NC...``, ``OI...``, ``NC...``), strings such as
        ``("NHWC", "HWIO", "NHWC")``, or a ``ConvDimensionNumbers``.

    Returns:
      A ``ConvDimensionNumbers`` of int tuples.

    Raises:
      ShapeError: ranks that differ or are below 2, or specs that do not fit the ranks.
      TypeError: a ``dimension_numbers`` of another form.
    """
    lr, rr = len(lhs_shape), len(rhs_shape)
    if lr != rr:
        raise ShapeError(f"conv: lhs and rhs need the same rank, got lhs shape {tuple(lhs_shape)} and rhs shape "
                         f"{tuple(rhs_shape)}")
    if lr < 2:
        raise ShapeError(f"conv: operands need rank >= 2 (batch/feature dimensions), got shape {tuple(lhs_shape)}")
    if dimension_numbers is None:
        iota = tuple(range(lr))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, ConvDimensionNumbers) or (
            isinstance(dimension_numbers, (tuple, list)) and len(dimension_numbers) == 3
            and not any(isinstance(s, str) for s in dimension_numbers)):
        dn = ConvDimensionNumbers(*(tuple(operator.index(i) for i in s) for s in dimension_numbers))
        check_dimension_numbers(dn, lr)
        return dn
    if isinstance(dimension_numbers, (tuple, list)):
        return _spec_from_string(tuple(dimension_numbers), (lr, rr, lr))
    raise TypeError(f"conv dimension_numbers must be None, a ConvDimensionNumbers or three strings such as "
                    f"('NCHW', 'OIHW', 'NCHW'), got {dimension_numbers!r}")


def check_dimension_numbers(dn, ndim):
    for spec, what in zip(dn, _WHAT, strict=True):
        if sorted(spec) != list(range(ndim)):
            raise ShapeError(f"conv dimension_numbers: the {what} spec {tuple(spec)} must be a permutation of "
                             f"range({ndim}) for operands of rank {ndim}")


def dilate_dim(size: int, dilation: int) -> int:
    """The size of ``size`` elements with ``dilation - 1`` holes between neighbours (0 stays 0)."""
    return 0 if size == 0 else (size - 1) * dilation + 1


def padtype_to_pads(in_shape, window_shape, window_strides, padding):
    """``"SAME"``, ``"SAME_LOWER"`` or ``"VALID"`` as ``(lo, hi)`` pairs, as ``jax.lax.padtype_to_pads``.

    SAME gives ``ceil(n / stride)`` outputs, the odd padding element at the end; SAME_LOWER puts it at the start.

    Raises:
      ValueError: another string (the message lists the three).
    """
    if not isinstance(padding, str):
        raise TypeError(f"padding type must be a string, got {padding!r}")
    p = padding.upper()
    if p == "VALID":
        return tuple((0, 0) for _ in in_shape)
    if p not in ("SAME", "SAME_LOWER"):
        raise ValueError(f"unknown padding {padding!r}: expected 'SAME', 'SAME_LOWER', 'VALID' or a sequence of "
                         f"(low, high) pairs, one per spatial dimension")
    pads = []
    for n, w, s in zip(in_shape, window_shape, window_strides, strict=True):
        out = -(-n // s)
        total = max(0, (out - 1) * s + w - n)
        small = total // 2
        pads.append((small, total - small) if p == "SAME" else (total - small, small))
    return tuple(pads)


def canonical_precision(precision):
    """``None``, or a hashable spelling of JAX's precision (``"DEFAULT"``, ``"HIGH"``, ``"HIGHEST"``, or a pair).

    The backends compute in the operands' (or ``preferred_element_type``'s) precision whatever it says; it is kept
    so that the jax lowering can pass it on.
    """
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)):
        if len(precision) != 2:
            raise ValueError(f"precision as a sequence needs two entries (lhs, rhs), got {precision!r}")
        return tuple(canonical_precision(p) for p in precision)
    name = getattr(precision, "name", None) or str(precision).split(".")[-1]
    name = name.upper()
    aliases = {"BFLOAT16": "DEFAULT", "FASTEST": "DEFAULT", "TENSORFLOAT32": "HIGH", "FLOAT32": "HIGHEST"}
    name = aliases.get(name, name)
    if name not in ("DEFAULT", "HIGH", "HIGHEST"):
        raise ValueError(f"unknown precision {precision!r}: expected None, 'default', 'high' or 'highest'")
    return name


def _ints(name, value, n, minimum):
    if len(value) != n:
        raise ShapeError(f"conv_general_dilated: {name} needs {n} entries (one per spatial dimension), "
                         f"got {tuple(value)}")
    for v in value:
        if v < minimum:
            raise ValueError(f"conv_general_dilated: {name} must be >= {minimum}, got {tuple(value)}")


def conv_shape(lhs_shape, rhs_shape, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
               feature_group_count, batch_group_count):
    """The result shape of ``conv_general_dilated`` (the checks of its shape rule; see the module docstring)."""
    dn = dimension_numbers
    if not isinstance(dn, ConvDimensionNumbers):
        raise TypeError(f"conv_general_dilated (the primitive) takes a ConvDimensionNumbers, got {dn!r}; "
                        f"fnarray.lax.conv_general_dilated converts strings and None")
    ndim = len(lhs_shape)
    if len(rhs_shape) != ndim:
        raise ShapeError(f"conv_general_dilated: lhs and rhs need the same rank, got {tuple(lhs_shape)} and "
                         f"{tuple(rhs_shape)}")
    check_dimension_numbers(dn, ndim)
    nsp = ndim - 2
    _ints("window_strides", window_strides, nsp, 1)
    _ints("lhs_dilation", lhs_dilation, nsp, 1)
    _ints("rhs_dilation", rhs_dilation, nsp, 1)
    if len(padding) != nsp or any(len(p) != 2 for p in padding):
        raise ShapeError(f"conv_general_dilated: padding needs {nsp} (low, high) pairs (one per spatial dimension), "
                         f"got {tuple(padding)}")
    G, B = feature_group_count, batch_group_count
    if G < 1 or B < 1:
        raise ValueError(f"conv_general_dilated: feature_group_count and batch_group_count must be >= 1, got "
                         f"{G} and {B}")
    if G > 1 and B > 1:
        raise ValueError(f"conv_general_dilated: at most one of feature_group_count ({G}) and batch_group_count "
                         f"({B}) may exceed 1")
    n, c = lhs_shape[dn.lhs_spec[0]], lhs_shape[dn.lhs_spec[1]]
    o, i = rhs_shape[dn.rhs_spec[0]], rhs_shape[dn.rhs_spec[1]]
    if c % G:
        raise ShapeError(f"conv_general_dilated: feature_group_count={G} does not divide the input's {c} features "
                         f"(lhs shape {tuple(lhs_shape)})")
    if c // G != i:
        raise ShapeError(f"conv_general_dilated: the input has {c} features, so with feature_group_count={G} the "
                         f"kernel needs {c // G} input features, but rhs shape {tuple(rhs_shape)} has {i} (dimension "
                         f"{dn.rhs_spec[1]})")
    if o % G:
        raise ShapeError(f"conv_general_dilated: feature_group_count={G} does not divide the kernel's {o} output "
                         f"features (rhs shape {tuple(rhs_shape)})")
    if n % B:
        raise ShapeError(f"conv_general_dilated: batch_group_count={B} does not divide the input's batch of {n} "
                         f"(lhs shape {tuple(lhs_shape)})")
    if o % B:
        raise ShapeError(f"conv_general_dilated: batch_group_count={B} does not divide the kernel's {o} output "
                         f"features (rhs shape {tuple(rhs_shape)})")
    spatial = []
    for k in range(nsp):
        s = lhs_shape[dn.lhs_spec[2 + k]]
        w = dilate_dim(rhs_shape[dn.rhs_spec[2 + k]], rhs_dilation[k])
        lo, hi = padding[k]
        padded = dilate_dim(s, lhs_dilation[k]) + lo + hi
        if padded < 0:
            raise ShapeError(f"conv_general_dilated: negative padding {tuple(padding[k])} in spatial dimension {k} "
                             f"crops more than the (dilated) input's {dilate_dim(s, lhs_dilation[k])} elements")
        if w > padded:
            raise ShapeError(f"conv_general_dilated: in spatial dimension {k} the (dilated) kernel window of {w} is "
                             f"larger than the padded input of {padded} (input {s}, lhs_dilation {lhs_dilation[k]}, "
                             f"padding {tuple(padding[k])}); pad more or use a smaller kernel")
        spatial.append((padded - w) // window_strides[k] + 1)
    out = [0] * ndim
    out[dn.out_spec[0]] = n // B
    out[dn.out_spec[1]] = o
    for k in range(nsp):
        out[dn.out_spec[2 + k]] = spatial[k]
    return tuple(out)


def _conv_rule(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
               feature_group_count, batch_group_count, precision=None, preferred_element_type=None):
    for a, what in ((lhs, "lhs"), (rhs, "rhs")):
        if dtypes.is_bool(a.dtype):
            raise DTypeError(f"conv_general_dilated accepts numeric dtypes (not bool), got {what} {a.dtype.name}")
    if lhs.dtype != rhs.dtype:
        raise DTypeError(f"conv_general_dilated needs operands of one dtype, got {lhs.dtype.name} and "
                         f"{rhs.dtype.name}; convert one (fnarray.lax.convert_element_type)")
    shape = conv_shape(lhs.shape, rhs.shape, window_strides=window_strides, padding=padding,
                       lhs_dilation=lhs_dilation, rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
                       feature_group_count=feature_group_count, batch_group_count=batch_group_count)
    if preferred_element_type is not None:
        pe = np.dtype(preferred_element_type)
        if dtypes.is_bool(pe) or (dtypes.is_inexact(lhs.dtype) and not dtypes.is_inexact(pe)):
            raise DTypeError(f"conv_general_dilated: preferred_element_type {pe.name} does not fit operands of "
                             f"{lhs.dtype.name}")
        return ShapedArray(shape, pe, False)
    return ShapedArray(shape, lhs.dtype, lhs.weak_type and rhs.weak_type)


conv_general_dilated_p = Primitive(
    "conv_general_dilated", _conv_rule, kind="other",
    doc=("N-d convolution (cross-correlation) as XLA's ConvGeneralDilated: input dilated by lhs_dilation, padded "
         "(negative pads crop), kernel dilated by rhs_dilation, strided; feature and batch groups; ints wrap, "
         "float16/bfloat16 accumulate in float32, preferred_element_type sets the result dtype."))
