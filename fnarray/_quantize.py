"""``fa.quantize``, ``fa.dequantize`` and ``fa.quantized_matmul``: MLX's quantization (``mx.quantize``), modes
``"affine"``, ``"mxfp4"``, ``"mxfp8"`` and ``"nvfp4"``.

The format is described in ``fnarray.core.quantized``. ``quantize`` and ``dequantize`` are composites of
``fnarray.numpy`` functions (so they run on every backend, under ``jit`` and ``vmap``); ``quantized_matmul``
binds the ``quantized_matmul`` primitive, which every backend runs on the packed weights.

Rounding, as MLX's CPU kernel (``mlx/backend/cpu/quantized.cpp``, checked bit for bit against
``mx.quantize`` in ``tests/test_quantize.py``), per group of ``group_size`` values, in float32 (float64 for
float64 weights), ``n = 2**bits - 1``:

- ``scale = max((max - min) / n, 1e-7)``, negated unless ``|min| > |max|``; ``edge`` is ``min`` in the first
  case, ``max`` in the second;
- ``q0 = rint(edge / scale)``; where ``q0 != 0``: ``scale = edge / q0`` and ``bias = edge`` (so the group's
  largest magnitude is represented exactly), else ``bias = 0``;
- ``q = clip(rint((w - bias) / scale), 0, n)``; the dequantized value is ``scale * q + bias``.
- 1 bit (MLX's own rule): ``scale = max(max - min, 1e-7)``, ``bias = min``.

Kernel backends divide with their own accuracy (OpenCL and WGSL allow 2.5 ulp): on a GPU, a value at a
rounding tie may quantize one step apart from MLX's.

Mode ``"mxfp4"`` (groups of 32, 4-bit E2M1 elements, a ``uint8`` E8M0 scale ``s`` standing for ``2**(s - 127)``),
as MLX 0.32's CPU ``mx.quantize`` (measured bit for bit: ``tests/test_quantize.py``), computed in float32 on the
bits, so every backend gives the same words:

- ``amax = max |w|`` over the group; ``e = ceil(log2(amax / 6))`` exactly (from the float32 quotient's exponent
  and mantissa bits, not a rounded ``log2``), so ``amax / 2**e <= 6``; ``s = (e + 127) mod 256`` (MLX wraps
  the exponents of groups below ``2**-127`` alike). For float16 and bfloat16 weights the quotient
  ``amax / 6`` is rounded to that dtype first (MLX divides in it). An all-zero group (or one whose half-precision
  quotient underflows to 0) has ``s = 127``; a group holding an infinity or NaN has ``s = 128`` (``0`` for
  half-precision weights) and every element code 0, and so has a float16 group with ``e < -24`` (what MLX
  gives: its ``2**e`` is 0 in float16). Float64 weights are rounded to float32 first.
- each element ``x = w / 2**e`` takes the E2M1 value nearest to it, a tie going to the smaller magnitude
  (MLX takes the first minimum of ``|x - value|`` over its table), and saturates at 6; a negative ``x`` that
  rounds to 0 is code 0 (+0).

(This is not the OCP specification's rule, ``floor(log2(amax)) - 2`` and round-to-nearest-even, which can
clip the group's largest element; MLX's choice keeps every element in range.)

Mode ``"mxfp8"`` (groups of 32, 8-bit E4M3 elements, one byte each and four to a word, the same E8M0 scales),
measured the same way (x86-64, MLX 0.32.4):

- ``e = ceil(log2(amax / 448))`` with mxfp4's rules for the quotient (rounded to a half-precision dtype first),
  all-zero groups (``s = 127``) and non-finite ones (``s = 128``, ``0`` for half-precision weights);
- each element ``x = w / 2**e`` is converted as MLX's ``ToFP8``: round to nearest even (subnormals in steps of
  ``2**-9``), saturating at 448 from 464 on (infinities and NaNs included: ``0x7E``), the sign bit kept (``-0`` is
  ``0x80``);
- a non-finite group's elements are MLX's ``w / 0`` converted: ``0x7E`` or ``0xFE`` by the sign of ``w``, where
  ``0 / 0`` is x86's default NaN, negative (``0xFE``) for float32 and float16 weights, while bfloat16 makes every
  NaN positive (``0x7E``, its NaN weights too).

Mode ``"nvfp4"`` (groups of 16, E2M1 elements as mxfp4, a ``uint8`` E4M3 scale; MLX's optional ``global_scale``
is not taken):

- the scale byte is ``ToFP8(amax / 6)`` (the quotient rounded to a half-precision dtype first), so it rounds to
  nearest even and saturates at 448; its value ``d`` is MLX's ``FromFP8`` (``packed.E4M3``);
- each element takes the E2M1 value nearest ``w / d`` (rounded to a half-precision dtype) with mxfp4's ties, and
  code 0 where ``d = 0`` (a group below ``6 * 2**-10``: MLX divides by 0) or ``w`` is infinite or NaN (finite
  elements of a group with an infinite maximum keep their codes against ``d = 448``).

Dequantizing multiplies each element's value by its scale's value in the result dtype (default bfloat16), as MLX;
E4M3 codes ``0x7F``/``0xFF`` (the format's NaN, never produced) read as NaN there.

Computing it the same on every backend: XLA's CPU division is not correctly rounded (``amax / 6`` one ulp off
moved nvfp4 scales across E4M3 ties on jax:0), so the E8M0 exponents and the E4M3 scale bytes are read from the
approximate quotient and then corrected by comparing ``amax`` with exact thresholds (``_thresholds``, found once
with NumPy's division), and nvfp4's element codes come from ``|w| > t * d`` (``t * d`` exact) instead of a division.
jax:0 still differs on groups of subnormal weights, which XLA flushes to zero.
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray import numpy as fnp
from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.quantized import FLOAT_MODES, check_format, quantized_matmul_p, weight_shape
from fnarray.lowering.packed import E4M3, FLOAT_FORMATS, unpack
from fnarray.transforms.jit import jit

__all__ = ["quantize", "dequantize", "quantized_matmul"]


def _math_dtype(d):
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def _check_matrix(w, group_size, where):
    if w.ndim < 2:
        raise ShapeError(f"[{where}] the matrix to quantize needs at least 2 dimensions, got shape {w.shape}")
    if w.shape[-1] % group_size:
        raise ShapeError(f"[{where}] the last axis of the matrix (shape {w.shape}) must be divisible by "
                         f"group_size={group_size}; pad it or choose another group size")


def quantize(w, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
    """Quantize a float matrix in groups along its last axis (as ``mx.quantize``).

    Args:
      w: float array of shape ``(..., n, k)`` (float32, float16, bfloat16 or float64), ``k`` divisible by
        ``group_size``.
      group_size: consecutive elements that share a scale (and bias): 32, 64 or 128 (default 64) for
        ``"affine"``; 32 for ``"mxfp4"`` and ``"mxfp8"``; 16 for ``"nvfp4"``.
      bits: bits per element: 1, 2, 3, 4, 5, 6 or 8 (default 4) for ``"affine"``; 4 for ``"mxfp4"`` and
        ``"nvfp4"``; 8 for ``"mxfp8"``.
      mode: ``"affine"`` (MLX's default: integers with a float scale and bias per group), ``"mxfp4"`` (E2M1
        elements with a power-of-two E8M0 scale per group of 32, no biases), ``"mxfp8"`` (E4M3 elements, E8M0
        scales per 32) or ``"nvfp4"`` (E2M1 elements, an E4M3 scale per group of 16).

    Returns:
      ``"affine"``: ``(w_q, scales, biases)``: ``w_q`` uint32 of shape ``(..., n, k * bits // 32)`` (the packed
      bit streams), ``scales`` and ``biases`` of ``w``'s dtype and shape ``(..., n, k // group_size)``.
      ``"mxfp4"``: ``(w_q, scales)``: ``w_q`` uint32 ``(..., n, k // 8)``, ``scales`` uint8 ``(..., n, k // 32)``;
      ``"mxfp8"``: ``w_q`` ``(..., n, k // 4)``, ``scales`` ``(..., n, k // 32)``; ``"nvfp4"``: ``w_q``
      ``(..., n, k // 8)``, ``scales`` ``(..., n, k // 16)``. Bit-identical to ``mx.quantize`` (see the module for
      the rounding).

    Raises:
      ValueError: an unknown mode, or a ``group_size`` or ``bits`` the mode does not have; ``ShapeError`` (a
        ``ValueError``) for a rank below 2 or a last axis not divisible by ``group_size``.
      DTypeError: a non-float ``w``.

    Example:
      >>> w_q, scales, biases = fa.quantize(fnp.ones((8, 64)), group_size=64, bits=4)
      >>> w_q.shape, w_q.dtype, scales.shape
      ((8, 8), dtype('uint32'), (8, 1))
      >>> w_q, scales = fa.quantize(fnp.ones((8, 64)), mode="mxfp4")
      >>> w_q.shape, scales.dtype, scales.shape
      ((8, 8), dtype('uint8'), (8, 2))
      >>> [a.shape for m in ("mxfp8", "nvfp4") for a in fa.quantize(fnp.ones((8, 64)), mode=m)]
      [(8, 16), (8, 2), (8, 8), (8, 4)]
    """
    group_size, bits = check_format(group_size, bits, mode, "quantize")
    w = fnp.asarray(w)
    if not dtypes.is_float(w.dtype):
        raise DTypeError(f"[quantize] only float arrays can be quantized, got {w.dtype.name}")
    _check_matrix(w, group_size, "quantize")
    if mode in _FLOAT_QUANTIZE:
        return _FLOAT_QUANTIZE[mode](w)
    return _quantize(w, int(group_size), int(bits))


# quantize and dequantize run as one jitted program each (per shape and format): called eagerly on a kernel
# backend, op by op they compiled ~15 kernels (8.9 s on PoCL), on jax:0 one XLA program per op.
@functools.partial(jit, static_argnums=(1, 2))
def _quantize(w, group_size, bits):
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    md = _math_dtype(w.dtype)
    g = fnp.reshape(w.astype(md), lead + (k // group_size, group_size))
    n_bins = float((1 << bits) - 1)
    w_max, w_min = fnp.max(g, axis=-1), fnp.min(g, axis=-1)
    if bits == 1:   # MLX: bit 0 stands for the group's minimum, bit 1 for its maximum
        scale = fnp.maximum(w_max - w_min, np.asarray(1e-7, w_max.dtype))
        return _round_and_pack(g, scale, w_min, n_bins, bits, lead, k, w.dtype)
    low_side = fnp.abs(w_min) > fnp.abs(w_max)
    scale = fnp.maximum((w_max - w_min) / n_bins, np.asarray(1e-7, md))
    scale = fnp.where(low_side, scale, -scale)
    edge = fnp.where(low_side, w_min, w_max)
    q0 = fnp.rint(edge / scale)
    exact = q0 != 0
    scale = fnp.where(exact, edge / fnp.where(exact, q0, 1.0), scale)
    bias = fnp.where(exact, edge, 0.0)
    return _round_and_pack(g, scale, bias, n_bins, bits, lead, k, w.dtype)


def _round_and_pack(g, scale, bias, n_bins, bits, lead, k, dtype):
    """``(w_q, scales, biases)`` of groups ``g`` with their scales and biases (computed in float32/64)."""
    q = fnp.clip(fnp.rint((g - bias[..., None]) / scale[..., None]), 0.0, n_bins).astype(dtypes.uint32)
    return _pack(fnp.reshape(q, lead + (k,)), bits), scale.astype(dtype), bias.astype(dtype)


def _pack(q, bits):
    """uint32 integers below ``2**bits`` (last axis a multiple of 32) as MLX's little-endian bit streams."""
    lead, k = tuple(q.shape[:-1]), q.shape[-1]
    # Element j of a 32-element chunk starts at bit j * bits; word t of the chunk starts at bit 32 * t.
    # Its bits enter word t shifted left by j * bits - 32 * t, or right by the negation; a shift of 32
    # is the "does not touch this word" case (shifts by the bit width give 0: docs/design.md's semantics).
    offset = np.arange(32)[:, None] * bits - 32 * np.arange(bits)[None, :]
    left = np.where((offset >= 0) & (offset < 32), offset, 32).astype(np.uint32)
    right = np.where((offset < 0) & (offset > -bits), -offset, 32).astype(np.uint32)
    q = fnp.reshape(q, lead + (k // 32, 32, 1))
    parts = fnp.bitwise_or(fnp.left_shift(q, left), fnp.right_shift(q, right))
    # The parts of one word have disjoint bits, so their sum is their bitwise or.
    words = fnp.sum(parts, axis=-2, dtype=dtypes.uint32)
    return fnp.reshape(words, lead + (k // 32 * bits,))


def _e8m0_exponents(g, dtype, top):
    """``(e, scales, finite)`` of float32 groups ``g`` (last axis) of weights of ``dtype``: MLX's E8M0 exponent
    ``e = ceil(log2(amax / top))`` (the module docstring), its ``uint8`` scale byte, and whether the group's
    ``amax`` is finite."""
    amax = fnp.max(fnp.abs(g), axis=-1)
    quotient = _quotient(amax, top, dtype)
    finite = fnp.isfinite(amax)
    e = fnp.where(quotient > 0, _ceil_log2(fnp.where(quotient > 0, quotient, np.float32(1.0))), _E_LOW - 1)
    e = _exact(amax, e, _E_LOW - 1, _thresholds("e8m0", top, dtype.name))
    e = fnp.where(e < _E_LOW, 0, e)   # a quotient of 0: MLX's scale 2**0
    e = fnp.where(finite, e, -127 if dtype in (dtypes.float16, dtypes.bfloat16) else 1)
    return e, fnp.bitwise_and(e + 127, 255).astype(dtypes.uint8), finite


def _quotient(amax, top, dtype):
    """``amax / top`` (float32), rounded to ``dtype`` when it is a half-precision one (MLX divides in the weights'
    dtype; a half-precision quotient rounds to 0 below its subnormals). Not exact on every backend (XLA's CPU
    division is not correctly rounded): ``_exact`` corrects what is read from it."""
    quotient = amax / np.float32(top)
    half = dtype in (dtypes.float16, dtypes.bfloat16)
    return quotient.astype(dtype).astype(dtypes.float32) if half else quotient


#: The lowest E8M0 exponent ``_thresholds`` covers (float32's smallest quotient, ``2**-149``); one below it
#: stands for a quotient of 0.
_E_LOW = -149


@functools.lru_cache(maxsize=None)
def _thresholds(kind, top, dtype_name):
    """The float32 table ``t`` of a function ``f`` of ``amax >= 0`` that is monotone and steps by one at a time,
    ``f(a) = lo + #{k >= 1: a >= t[k]}``, from NumPy's correctly rounded division (``t[0] = -inf``, the last entry
    NaN: never reached): ``"e8m0"``: MLX's E8M0 exponent of ``amax / top`` (``lo = _E_LOW - 1`` for a quotient of
    0); ``"e4m3"``: MLX's E4M3 code of ``amax / top`` (``lo = 0``). Each ``t[k]`` is found by bisection over the
    float32 bit patterns."""
    import ml_dtypes
    dtype = np.dtype(getattr(ml_dtypes, dtype_name, None) or dtype_name)

    def f(bits):
        a = bits.astype(np.uint32).view(np.float32)
        with np.errstate(under="ignore", over="ignore"):
            q = (a / np.float32(top)).astype(dtype).astype(np.float32)
        if kind == "e4m3":   # round to nearest even E4M3, saturating at 448 (MLX's ToFP8)
            code = np.minimum(q, np.float32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8).astype(np.int64)
            return np.where(q >= 464, 126, code)
        m, ex = np.frexp(q)
        return np.where(np.isinf(q), 129, np.where(q > 0, np.where(m == 0.5, ex - 1, ex), _E_LOW - 1))

    lo = _E_LOW - 1 if kind == "e8m0" else 0
    hi = 128 if kind == "e8m0" else 126
    targets = np.arange(lo + 1, hi + 1)
    low = np.zeros(targets.shape, np.int64)               # f(low) < target, or low = 0
    high = np.full(targets.shape, 0x7F800000, np.int64)   # inf: past every finite a
    for _ in range(32):
        mid = (low + high) // 2
        reached = f(mid) >= targets
        high = np.where(reached, mid, high)
        low = np.where(reached, low, mid)
    first = np.where(f(low) >= targets, low, high)
    t = np.where(first < 0x7F800000, first, 0x7F800000).astype(np.uint32).view(np.float32)
    return np.concatenate([[-np.inf], t, [np.nan]]).astype(np.float32)


def _exact(a, approx, lo, table):
    """``f(a)`` (``_thresholds``' function, int32) from ``approx``, which is within one of it: one step up where
    ``a`` reaches the next threshold, one down where it is below its own (NaN ``a`` keeps ``approx``). Subnormal
    thresholds and ``a`` are left alone (XLA on the CPU flushes them: docs/traps.md; elsewhere the division
    there is exact)."""
    k = fnp.clip(approx - lo, 0, table.shape[0] - 2)
    t = fnp.asarray(table)
    up_t, own_t = fnp.take(t, k + 1), fnp.take(t, k)
    up = ((a >= up_t) & (up_t >= _TINY)).astype(dtypes.int32)
    down = ((a < own_t) & (a >= _TINY)).astype(dtypes.int32)
    return approx + up - down


_TINY = np.float32(2.0 ** -126)


def _e2m1_codes(x):
    """The E2M1 codes (uint32) nearest to float32 ``x``, a tie going to the smaller magnitude, saturating at 6; a
    negative ``x`` that rounds to 0 is code 0 (+0); NaN gives 0 (MLX's first minimum over NaN distances)."""
    a = fnp.abs(x)
    code = sum((a > t).astype(dtypes.uint32) for t in _E2M1_TIES)
    return fnp.where((x < 0) & (code > 0), code + np.uint32(8), code)


@jit
def _quantize_mxfp4(w):
    """``(w_q, scales)`` of mode ``"mxfp4"`` (the module docstring's rule), computed on float32 bits."""
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    g = fnp.reshape(w.astype(dtypes.float32), lead + (k // 32, 32))
    e, scales, finite = _e8m0_exponents(g, w.dtype, 6.0)
    code = _e2m1_codes(g / _pow2(fnp.maximum(e, -149))[..., None])
    # Where MLX's 2**e is not a number of the dtype (float16 below 2**-24) its quotients are inf or NaN: code 0.
    valid = finite & (e >= -24) if w.dtype == dtypes.float16 else finite
    code = fnp.where(valid[..., None], code, np.uint32(0))
    return _pack(fnp.reshape(code, lead + (k,)), 4), scales


@jit
def _quantize_mxfp8(w):
    """``(w_q, scales)`` of mode ``"mxfp8"`` (the module docstring's rule): mxfp4's exponents for ``amax / 448``,
    elements by ``_to_e4m3``."""
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    g = fnp.reshape(w.astype(dtypes.float32), lead + (k // 32, 32))
    e, scales, finite = _e8m0_exponents(g, w.dtype, 448.0)
    code = _to_e4m3(g / _pow2(fnp.maximum(e, -149))[..., None])
    valid = finite & (e >= -24) if w.dtype == dtypes.float16 else finite
    # MLX divides such groups by 0: +-inf and NaN saturate to +-448 (0x7E with the sign); 0 / 0 is x86's default
    # NaN, negative, and a bfloat16 NaN is made positive.
    negative = lax.bitcast_convert_type(g, dtypes.int32) < 0
    if w.dtype == dtypes.bfloat16:
        negative = negative & (g != 0) & ~fnp.isnan(g)
    else:
        negative = negative | (g == 0)
    code = fnp.where(valid[..., None], code, fnp.where(negative, np.uint32(0xFE), np.uint32(0x7E)))
    return _pack(fnp.reshape(code, lead + (k,)), 8), scales


@jit
def _quantize_nvfp4(w):
    """``(w_q, scales)`` of mode ``"nvfp4"`` (the module docstring's rule): an E4M3 scale byte for ``amax / 6``,
    E2M1 codes of the weights divided by its value, both decided by exact comparisons of the weights."""
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    g = fnp.reshape(w.astype(dtypes.float32), lead + (k // 16, 16))
    amax = fnp.max(fnp.abs(g), axis=-1)
    scales = _to_e4m3(_quotient(amax, 6.0, w.dtype)).astype(dtypes.int32)
    scales = _exact(amax, scales, 0, _thresholds("e4m3", 6.0, w.dtype.name))
    d = fnp.take(fnp.asarray(E4M3), scales)[..., None]
    # MLX's quotient w / d rounded to the dtype is above a tie t exactly where |w| > t * d (t * d is exact and
    # the next value above it divides to more than half an ulp above t), so no division is needed.
    a = fnp.abs(g)
    code = sum((a > t * d).astype(dtypes.uint32) for t in _E2M1_TIES)
    code = fnp.where((g < 0) & (code > 0), code + np.uint32(8), code)
    # A zero scale (MLX divides by it) or a non-finite weight is at the same distance from every value: code 0.
    code = fnp.where((d > 0) & fnp.isfinite(g), code, np.uint32(0))
    return _pack(fnp.reshape(code, lead + (k,)), 4), scales.astype(dtypes.uint8)


def _to_e4m3(x):
    """MLX's ``ToFP8`` (uint32 codes) of float32 ``x``: round to nearest even E4M3, saturating at 448 (inf and NaN
    too: 0x7E), the sign bit kept (so -0 and negative NaNs are 0x80 and 0xFE)."""
    bits = lax.bitcast_convert_type(x, dtypes.uint32)
    sign = fnp.bitwise_and(fnp.right_shift(bits, np.uint32(24)), np.uint32(0x80))
    a = fnp.bitwise_and(bits, np.uint32(0x7FFFFFFF))
    # Below 2**-6 (subnormal E4M3): multiples of 2**-9, rint rounding half to even.
    small = lax.bitcast_convert_type(fnp.minimum(a, np.uint32(121 << 23)), dtypes.float32)
    sub = fnp.rint(small * np.float32(512.0)).astype(dtypes.uint32)
    # Normal: the exponent rebiased (127 -> 7) and the significand's top three bits rounded half to even.
    odd = fnp.bitwise_and(fnp.right_shift(a, np.uint32(20)), np.uint32(1))
    normal = fnp.right_shift(a - np.uint32(120 << 23) + np.uint32(0x7FFFF) + odd, np.uint32(20))
    code = fnp.where(a < np.uint32(121 << 23), sub, normal)
    code = fnp.where(a >= np.uint32(0x43E80000), np.uint32(0x7E), code)   # 464 and up (inf, NaN): 448
    return fnp.bitwise_or(code, sign)


_FLOAT_QUANTIZE = {"mxfp4": _quantize_mxfp4, "mxfp8": _quantize_mxfp8, "nvfp4": _quantize_nvfp4}

#: The midpoints between consecutive E2M1 magnitudes (a tie rounds down: MLX's first minimum of |x - value|).
_E2M1_TIES = tuple(np.float32(t) for t in (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0))


def _ceil_log2(v):
    """``ceil(log2(v))`` exactly (int32) for finite float32 ``v > 0``, from its bits: the exponent, plus one
    unless the significand is a power of two; a subnormal ``v`` is first scaled by ``2**64`` (exact)."""
    sub = v < np.float32(2.0 ** -126)
    t = fnp.where(sub, v * np.float32(2.0 ** 64), v)
    bits = lax.bitcast_convert_type(t, dtypes.int32)
    exponent = fnp.right_shift(bits, 23) - 127
    up = (fnp.bitwise_and(bits, 0x7FFFFF) != 0).astype(dtypes.int32)
    return exponent + up - fnp.where(sub, 64, 0)


def _pow2(e):
    """``2.0**e`` (float32, exact) for int32 ``e`` in ``[-149, 128]`` from its bits (128 gives inf)."""
    normal = lax.bitcast_convert_type(fnp.left_shift(fnp.maximum(e + 127, 0), 23), dtypes.float32)
    tiny = lax.bitcast_convert_type(fnp.left_shift(1, fnp.clip(e + 149, 0, 22)), dtypes.float32)
    return fnp.where(e > -127, normal, tiny)


def _unpack(w, bits):
    """The integers (uint32, ``(..., words * 32 // bits)``) of packed words ``w``: ``packed.unpack`` over
    ``fnarray.numpy``. For 2, 4 and 8 bits each word is shifted by every element's offset (a broadcast, no gather):
    a gather of the words here made XLA CPU recompute a quantized embedding row inside every product reading it
    (examples/llm.py's 4-bit decode at width 256: the first block's q/k/v products 3-5x slower)."""
    return unpack(fnp, w, bits, fnp.asarray)


def dequantize(w, scales, biases=None, group_size: int | None = None, bits: int | None = None,
               mode: str = "affine", dtype=None):
    """The float matrix that quantized weights stand for (as ``mx.dequantize``): ``scale * q + bias``
    (``"affine"``) or ``element(q) * scale(s)`` (the floating modes: ``2**(s - 127) * e2m1(q)`` for
    ``"mxfp4"``, ``2**(s - 127) * e4m3(q)`` for ``"mxfp8"``, ``e4m3(s) * e2m1(q)`` for ``"nvfp4"``).

    Args:
      w: packed uint32 weights ``(..., n, k * bits // 32)`` from ``quantize``.
      scales: ``(..., n, k // group_size)``: floats (``"affine"``) or uint8 (the floating modes).
      biases: ``"affine"``: floats of the scales' dtype and shape; the floating modes: ``None``.
      group_size, bits, mode: as given to ``quantize`` (``None``: the mode's defaults).
      dtype: the result's float dtype; default the scales' dtype (``"affine"``) or bfloat16 (the floating modes,
        as MLX).

    Returns:
      ``(..., n, k)``; bit-identical to ``mx.dequantize`` where the backend does not contract
      ``scale * q + bias`` into a fused multiply-add (OpenCL may). The floating modes' element values and scales
      are each rounded into ``dtype`` and multiplied in it, as MLX (an E8M0 scale below float16's range is 0
      there; E4M3 codes ``0x7F``/``0xFF`` read as NaN, as MLX's ``from_fp8``).

    Raises:
      ValueError, DTypeError, ShapeError: unsupported format, non-uint32 ``w``, scales of the wrong dtype, biases
        given for a floating mode or missing for ``"affine"``, or shapes that do not match.
    """
    group_size, bits = check_format(group_size, bits, mode, "dequantize")
    w, scales = fnp.asarray(w), fnp.asarray(scales)
    if w.dtype != dtypes.uint32:
        raise DTypeError(f"[dequantize] needs packed uint32 weights, got {w.dtype.name} (make them with "
                         f"fnarray.quantize)")
    if w.ndim < 2:
        raise ShapeError(f"[dequantize] needs packed weights of at least 2 dimensions (rows, words), as quantize "
                         f"returns them, got shape {w.shape}")
    if mode in FLOAT_MODES:
        if biases is not None:
            raise ValueError(f"[dequantize] mode={mode!r} has no biases; pass biases=None")
        if scales.dtype != dtypes.uint8:
            raise DTypeError(f"[dequantize] mode={mode!r} needs uint8 scales, got {scales.dtype.name}")
        biases = scales
    elif biases is None:
        raise ValueError("[dequantize] mode='affine' needs the biases that quantize returned")
    else:
        biases = fnp.asarray(biases)
        if not dtypes.is_float(scales.dtype) or biases.dtype != scales.dtype:
            raise DTypeError(f"[dequantize] needs float scales and biases of one dtype, got {scales.dtype.name} "
                             f"and {biases.dtype.name}")
    full = weight_shape(w.shape, bits)
    groups = full[:-1] + (full[-1] // group_size,)
    if (w.shape[-1] * 32) % bits or full[-1] % group_size or scales.shape != groups or biases.shape != groups:
        raise ShapeError(f"[dequantize] packed weights {w.shape} at bits={bits} stand for shape {full}, whose "
                         f"scales and biases have shape {groups} at group_size={group_size}; got {scales.shape} "
                         f"and {biases.shape}; pass the group_size and bits that quantize made them with")
    if mode in FLOAT_MODES:
        out = dtypes.bfloat16 if dtype is None else dtypes.requested(dtype, "dequantize")
        if not dtypes.is_float(out):
            raise DTypeError(f"[dequantize] dtype must be a float dtype, got {out.name}")
        return _dequantize_float(w, scales, out, mode)
    if dtype is not None:
        out = dtypes.requested(dtype, "dequantize")
        if not dtypes.is_float(out):   # as MLX; the float values would be truncated
            raise DTypeError(f"[dequantize] dtype must be a float dtype, got {out.name}")
        return dequantize(w, scales, biases, group_size, bits).astype(out)
    return _dequantize(w, scales, biases, int(group_size), int(bits))


@functools.partial(jit, static_argnums=(2, 3))
def _dequantize_float(w, scales, dtype, mode):
    """As MLX: the element value of each code times its group's scale value (``packed.FLOAT_FORMATS``), each
    rounded into ``dtype``, multiplied in ``dtype``."""
    elements, scale_values, group, bits = FLOAT_FORMATS[mode]
    groups = tuple(scales.shape)
    q = fnp.take(fnp.asarray(elements), _unpack(w, bits).astype(dtypes.int32)).astype(dtype)
    scale = fnp.take(fnp.asarray(scale_values), scales.astype(dtypes.int32)).astype(dtype)
    # E8M0's s = 0, 2**-127, is subnormal in float32 and bfloat16, which XLA on the CPU flushes to 0 (docs/traps.md):
    # there the product is taken as (q * 2**-63) * 2**-64, the first exact, so it rounds once as MLX's.
    tiny = scale_values is not E4M3 and dtype != dtypes.float16 and dtype != dtypes.float64
    if tiny:
        low = (scales == 0)[..., None]
        scale = fnp.where(scales == 0, np.asarray(2.0 ** -63, dtype), scale)
    out = fnp.reshape(q, groups + (group,)) * scale[..., None]
    if tiny:
        out = fnp.where(low, out * np.asarray(2.0 ** -64, dtype), out)
    return fnp.reshape(out, groups[:-1] + (groups[-1] * group,))


@functools.partial(jit, static_argnums=(3, 4))
def _dequantize(w, scales, biases, group_size, bits):
    groups = tuple(scales.shape)
    q = fnp.reshape(_unpack(w, bits).astype(scales.dtype), groups + (group_size,))
    return fnp.reshape(q * scales[..., None] + biases[..., None], groups[:-1] + (groups[-1] * group_size,))


def quantized_matmul(x, w, scales, biases=None, transpose: bool = True, group_size: int | None = None,
                     bits: int | None = None, mode: str = "affine"):
    """``x @ dequantize(w).T`` (``transpose=True``) or ``x @ dequantize(w)``, without the float weights (as
    ``mx.quantized_matmul``).

    Args:
      x: ``(..., k)``; promoted with the scales' dtype (an integer ``x`` with float32 scales gives float32); for
        the floating modes, a float ``x`` keeps its dtype and an integer or bool one raises (as MLX).
      w: packed uint32 ``(n, k * bits // 32)`` for ``transpose=True``, ``(k, n * bits // 32)`` otherwise.
      scales: ``(n, k // group_size)`` (``(k, n // group_size)`` for ``transpose=False``), floats for
        ``"affine"``, uint8 for the floating modes (``"mxfp4"``, ``"mxfp8"``, ``"nvfp4"``).
      biases: as the scales for ``"affine"``; ``None`` for the floating modes.
      transpose, group_size, bits, mode: as ``mx.quantized_matmul`` (``None``: the mode's defaults).

    Returns:
      ``(..., n)`` in the promoted float dtype, accumulated in float32 (float64 for float64).

    Raises:
      ShapeError: the last axis of ``x`` does not match the weights, or weights of rank other than 2.
      DTypeError: non-uint32 ``w``, a result dtype that is not a float, floating-mode scales that are not uint8,
        or an integer or bool ``x`` in a floating mode (a ``TypeError``; MLX raises ``ValueError``).
      ValueError: an unsupported format, or biases given (missing) for a floating mode
        (``"affine"``).
      TypeError: differentiating with respect to ``scales`` or ``biases`` (the weights are constants).
    """
    group_size, bits = check_format(group_size, bits, mode, "quantized_matmul")
    x, scales = fnp.asarray(x), fnp.asarray(scales)
    params = dict(transpose=bool(transpose), group_size=int(group_size), bits=int(bits), mode=mode)
    if mode in FLOAT_MODES:
        if biases is not None:
            raise ValueError(f"[quantized_matmul] mode={mode!r} has no biases; pass biases=None")
        if not dtypes.is_float(x.dtype):
            raise DTypeError(f"[quantized_matmul] mode={mode!r} takes a floating x (float32, float16, bfloat16, as "
                             f"mx.quantized_matmul), got {x.dtype.name}; cast it first, x.astype('float32')")
        return quantized_matmul_p.bind(x, fnp.asarray(w), scales, **params)
    if biases is None:
        raise ValueError("[quantized_matmul] mode='affine' needs the biases that quantize returned")
    biases = fnp.asarray(biases)
    dt = fnp.result_type(x.dtype, scales.dtype, biases.dtype)
    if not dtypes.is_float(dt):
        raise DTypeError(f"[quantized_matmul] x ({x.dtype.name}), scales ({scales.dtype.name}) and biases "
                         f"({biases.dtype.name}) promote to {dt.name}, not a float dtype")
    return quantized_matmul_p.bind(x.astype(dt), fnp.asarray(w), scales.astype(dt), biases.astype(dt), **params)
