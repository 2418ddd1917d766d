"""Reading the packed words of ``quantized_matmul``, shared by the library backends' rules (``numpy/quantized.py``,
``jax/quantized.py``, ``mlx/quantized.py``); it imports no backend library. The OpenCL and WebGPU kernels are
``fnarray.lowering.kernels.groups.quantized``.

The packed format (``fnarray.core.quantized``) is one little-endian bit stream per row. 32 consecutive
elements fill exactly ``bits`` words, so a row is read as chunks of ``bits`` words: element ``j`` of a chunk
starts in word ``j * bits // 32`` at bit ``s = j * bits % 32`` and, where ``s + bits > 32`` (3, 5 and 6
bits), continues in the next word. ``unpack`` writes that once over any array module with NumPy's names
(NumPy, ``jax.numpy``, ``mlx.core``).

Mode ``"mxfp4"`` packs 4-bit E2M1 codes the same way; ``E2M1`` is their values (code ``c``: sign bit 3, then
``0, 0.5, 1, 1.5, 2, 3, 4, 6``) and ``E8M0`` the value of each ``uint8`` scale ``s``, ``2**(s - 127)`` (``s = 0``
is ``2**-127``, a float32 subnormal; ``s = 255``, the format's NaN, is ``inf`` as in MLX's kernels).
Mode ``"mxfp8"`` packs 8-bit E4M3 codes (a byte each, the first in a word's low byte) and ``"nvfp4"`` E2M1 codes
with ``uint8`` E4M3 scales; ``E4M3`` is the value of each byte as MLX reads it (codes ``0x7F`` and ``0xFF`` are
NaN). ``FLOAT_FORMATS`` names each floating mode's element and scale tables, and ``fp_weights``
gives the float weights of any of them (``mxfp4_weights``: of mxfp4).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["unpack", "unpack_plan", "acc_dtype", "E2M1", "E8M0", "E4M3", "FLOAT_FORMATS", "fp_weights",
           "mxfp4_weights"]

#: The values of the 16 E2M1 codes (mxfp4 elements), float32.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
#: The values of the 256 E8M0 scales, float32: ``2**(s - 127)``, 255 as ``inf`` (``np.ldexp`` overflows there).
with np.errstate(over="ignore"):
    E8M0 = np.ldexp(np.float32(1.0), np.arange(256) - 127).astype(np.float32)


#: The values of the 256 E4M3 codes (mxfp8 elements, nvfp4 scales), float32: ``ml_dtypes.float8_e4m3fn``'s, which
#: MLX 0.32.4's ``from_fp8`` gives too (measured: 0x7F and 0xFF are NaN).
E4M3 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
#: Per floating mode: ``(element values, scale values, group size, bits)``.
FLOAT_FORMATS = {"mxfp4": (E2M1, E8M0, 32, 4), "mxfp8": (E4M3, E8M0, 32, 8), "nvfp4": (E2M1, E4M3, 16, 4)}


def unpack_plan(bits):
    """Per element ``j < 32`` of a chunk: ``(low word, high word, shift)`` as uint32 NumPy arrays."""
    j = np.arange(32)
    lo = j * bits // 32
    shift = j * bits % 32
    hi = np.minimum(lo + 1, bits - 1)
    return lo, hi, shift.astype(np.uint32)


def unpack(xp, w, bits, asarray=None):
    """The ``bits``-bit integers (uint32, shape ``(..., words * 32 // bits)``) of packed words ``w``.

    ``xp`` is the array module (``numpy``, ``jax.numpy``, ``mlx.core``); ``asarray`` makes its arrays from
    NumPy ones (default ``xp.array``). No shift reaches 32 bits (undefined in C, which MLX's kernels are).
    """
    asarray = asarray or xp.array
    lead = tuple(w.shape[:-1])
    mask = asarray(np.uint32((1 << bits) - 1))
    if 32 % bits == 0:
        # Whole elements per word: each word shifted by every element's offset (a broadcast, no gather).
        per = 32 // bits
        shifts = asarray((np.arange(per) * bits).astype(np.uint32))
        v = xp.bitwise_and(xp.right_shift(xp.expand_dims(w, -1), shifts), mask)
        return xp.reshape(v, lead + (w.shape[-1] * per,))
    lo, hi, shift = unpack_plan(bits)
    chunks = w.shape[-1] // bits
    w3 = xp.reshape(w, lead + (chunks, bits))
    low = xp.take(w3, asarray(lo.astype(np.int32)), axis=-1)
    v = xp.right_shift(low, asarray(shift))
    # The high word's bits land at 32 - s; (h << 1) << (31 - s) keeps each shift below 32.
    high = xp.take(w3, asarray(hi.astype(np.int32)), axis=-1)
    up = xp.left_shift(xp.left_shift(high, asarray(np.uint32(1))), asarray((31 - shift).astype(np.uint32)))
    v = xp.bitwise_and(xp.bitwise_or(v, up), mask)
    return xp.reshape(v, lead + (chunks * 32,))


def acc_dtype(d):
    """The accumulation dtype of a product in dtype ``d``: float64 for float64, else float32."""
    return np.dtype(np.float64) if d == np.float64 else np.dtype(np.float32)



def fp_weights(xp, w, scales, dtype, mode, asarray=None):
    """The float weights ``(rows, cols)`` of a floating mode's words ``w`` (``(rows, cols * bits // 32)`` uint32)
    and their uint8 scales (``(rows, cols // group_size)``): ``element[q] * scale[s]`` (``FLOAT_FORMATS``),
    computed in the NumPy dtype ``dtype`` over the array module ``xp`` (every product exact in float32: values of
    at most four significant bits)."""
    asarray = asarray or xp.array
    elements, scale_values, group, bits = FLOAT_FORMATS[mode]
    q = unpack(xp, w, bits, asarray)
    rows, cols = q.shape
    q = xp.take(asarray(elements.astype(dtype)), q.astype(xp.int32), axis=0)
    s = xp.take(asarray(scale_values.astype(dtype)), scales.astype(xp.int32), axis=0)
    return (q.reshape(rows, cols // group, group) * s[:, :, None]).reshape(rows, cols)


def mxfp4_weights(xp, w, scales, dtype, asarray=None):
    """``fp_weights`` of mode ``"mxfp4"``."""
    return fp_weights(xp, w, scales, dtype, "mxfp4", asarray)
