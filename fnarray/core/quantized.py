"""The ``quantized_matmul`` primitive: a matrix product with weights in MLX's affine quantized format.

MLX's format (``mx.quantize(w, group_size, bits)``, mode ``"affine"``): a float matrix ``w`` of shape
``(..., n, k)`` is cut into groups of ``group_size`` consecutive elements along its last axis; each group
has a float ``scale`` and ``bias`` and holds integers ``q`` in ``[0, 2**bits - 1]`` with
``w ~ scale * q + bias``. The integers of one row form one little-endian bit stream, element ``j`` at bits
``[j * bits, (j + 1) * bits)``, stored in ``uint32`` words (so for 3, 5 and 6 bits an element may span two
words): the packed row has ``k * bits // 32`` words, the scales and biases ``k // group_size`` entries.

``quantized_matmul[transpose, group_size, bits, mode="affine"] x w scales biases``:

- ``transpose=True`` (a ``Linear`` layer's ``x @ W.T``): ``w`` is ``(n, k * bits / 32)`` uint32, ``scales``
  and ``biases`` ``(n, k / group_size)``, ``x`` is ``(..., k)``; the result ``(..., n)``.
- ``transpose=False`` (``x @ W``): ``w`` is ``(k, n * bits / 32)``, ``scales``/``biases``
  ``(k, n / group_size)``, ``x`` is ``(..., k)``; the result ``(..., n)``.

``quantized_matmul[..., mode="mxfp4"] x w scales`` (MLX's ``mode="mxfp4"``, the OCP microscaling format): 4-bit
E2M1 elements (a sign bit, two exponent bits, one mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
negations), packed as the affine format's 4-bit stream, and one ``uint8`` E8M0 scale per group of 32 (the
power of two ``2**(s - 127)``); there are no biases, so the equation has three operands. ``mode="mxfp8"``:
8-bit E4M3 elements (one byte each, four to a word, the first in the low byte) with the same E8M0 scales per group
of 32; ``mode="nvfp4"``: E2M1 elements as mxfp4 with one ``uint8`` E4M3 scale per group of 16 (NVIDIA's format
without its global scale, which ``mx.quantized_matmul`` does not take). These three are the "floating" modes
(``FLOAT_MODES``): ``uint8`` scales, no biases.

``x``, ``scales`` and ``biases`` share one float dtype, which is the result's (floating modes: ``x``'s; their
scales are ``uint8``). The product accumulates in
float32 (float64 for float64), as ``mx.quantized_matmul``. It is linear in ``x``; the quantized weights are
constants (no tangent: differentiate ``dequantize(w, scales, biases)`` instead). Every backend computes it
without materialising the float weights in memory (``fnarray.lowering.packed`` and each backend's
``quantized.py``, the kernel group ``fnarray.lowering.kernels.groups.quantized``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["quantized_matmul_p", "BITS", "GROUP_SIZES", "MODES", "FLOAT_MODES", "check_format", "weight_shape"]

#: The bit widths and group sizes of MLX's affine format (mlx 0.32).
BITS = (1, 2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)
#: MLX's modes, each with its default ``(group_size, bits)``; the floating modes have only these.
MODES = {"affine": (64, 4), "mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}
#: The modes with low-bit float elements, ``uint8`` scales and no biases.
FLOAT_MODES = ("mxfp4", "mxfp8", "nvfp4")


def check_format(group_size, bits, mode="affine", where="quantize"):
    """``(group_size, bits)`` with MLX's defaults of ``mode`` for ``None``; raises ``ValueError`` for a mode,
    group size or bit width MLX does not have (a floating mode has one of each)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"[{where}] mode={mode!r} is not a quantization mode; use one of {tuple(MODES)} (as MLX)")
    default_gs, default_bits = MODES[mode]
    group_size = default_gs if group_size is None else group_size
    bits = default_bits if bits is None else bits
    for name, v in (("group_size", group_size), ("bits", bits)):
        # 4.0 == 4 and True == 1 pass the membership tests below: bits=True quantized to 1 bit, silently
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"[{where}] {name} must be an int, got {v!r} ({type(v).__name__}); e.g. "
                            f"group_size=64, bits=4")
    if mode in FLOAT_MODES:
        if group_size != default_gs or bits != default_bits:
            raise ValueError(f"[{where}] mode={mode!r} needs group_size={default_gs} and bits={default_bits} (as "
                             f"MLX), got group_size={group_size!r} and bits={bits!r}")
        return group_size, bits
    if group_size not in GROUP_SIZES:
        raise ValueError(f"[{where}] group_size={group_size!r} is not supported; use one of {GROUP_SIZES} "
                         f"(as MLX)")
    if bits not in BITS:
        raise ValueError(f"[{where}] bits={bits!r} is not supported; use one of {BITS} (as MLX)")
    return group_size, bits


def weight_shape(w_shape, bits):
    """The float shape ``(rows, cols)`` a packed ``(rows, words)`` matrix stands for."""
    return tuple(w_shape[:-1]) + (w_shape[-1] * 32 // bits,)


def _check_scales(x, scales, biases, mode):
    """The dtype rules of the scales and biases: x's float dtype for affine, uint8 and none for the floating
    modes."""
    if mode in FLOAT_MODES:
        if biases:
            raise ShapeError(f"quantized_matmul with mode={mode!r} takes no biases (x, w, scales)")
        if scales.dtype != dtypes.uint8:
            raise DTypeError(f"quantized_matmul with mode={mode!r} needs uint8 scales, got {scales.dtype.name}")
        return
    if len(biases) != 1:
        raise ShapeError("quantized_matmul with mode='affine' takes x, w, scales and biases")
    if scales.dtype != x.dtype or biases[0].dtype != x.dtype:
        raise DTypeError(f"quantized_matmul needs x, scales and biases of one dtype, got {x.dtype.name}, "
                         f"{scales.dtype.name} and {biases[0].dtype.name} (fnarray.quantized_matmul promotes them)")


def _rule(x, w, scales, *biases, transpose, group_size, bits, mode):
    check_format(group_size, bits, mode, where="quantized_matmul")
    if w.dtype != dtypes.uint32:
        raise DTypeError(f"quantized_matmul needs packed uint32 weights, got {w.dtype.name} "
                         f"(make them with fnarray.quantize)")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"quantized_matmul needs a float x, got {x.dtype.name}")
    _check_scales(x, scales, biases, mode)
    if w.ndim != 2 or scales.ndim != 2 or any(b.ndim != 2 for b in biases):
        raise ShapeError(f"quantized_matmul needs 2-d weights, scales and biases, got shapes "
                         f"{' and '.join(str(a.shape) for a in (w, scales, *biases))}; multiply by each matrix "
                         f"of a stack in turn (w[i], scales[i], ...), or dequantize the stack (fnarray.dequantize) "
                         f"and use a matmul")
    if x.ndim < 1:
        raise ShapeError(f"quantized_matmul needs x of rank 1 or more (..., k), got a scalar; pass x of shape "
                         f"({weight_shape(w.shape, bits)[1 if transpose else 0]},) for one vector")
    rows, cols = weight_shape(w.shape, bits)
    groups = (rows, cols // group_size)
    if cols % group_size or scales.shape != groups or any(b.shape != groups for b in biases):
        raise ShapeError(f"quantized_matmul: packed weights {w.shape} at bits={bits} stand for a ({rows}, {cols}) "
                         f"matrix, whose scales and biases have shape {groups} for group_size={group_size}; "
                         f"got {' and '.join(str(a.shape) for a in (scales, *biases))}; pass the group_size and "
                         f"bits (and mode) that fnarray.quantize made them with")
    k, n = (cols, rows) if transpose else (rows, cols)
    if x.shape[-1] != k:
        raise ShapeError(f"quantized_matmul: the last axis of x {x.shape} must be {k}, the contraction of the "
                         f"({rows}, {cols}) dequantized weights with transpose={transpose}")
    return ShapedArray(x.shape[:-1] + (n,), x.dtype, x.weak_type)


quantized_matmul_p = Primitive(
    "quantized_matmul", _rule, kind="other",
    doc="x @ W.T (transpose=True) or x @ W with W in MLX's affine format (packed uint32 words of `bits`-bit "
        "integers, one scale and bias per group of group_size along W's rows) or its mxfp4/mxfp8/nvfp4 formats "
        "(E2M1 or E4M3 elements, a uint8 E8M0 or E4M3 scale per group of 32 or 16, no biases); accumulates in "
        "float32; linear in x, weights constant.")
