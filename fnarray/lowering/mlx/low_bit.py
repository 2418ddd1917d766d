"""The low-bit dtypes (``float8_e4m3fn``, ``float8_e5m2``, ``int4``, ``uint4``) on mlx, which has none of them.

Storage. Outside a program such an array is a read-only NumPy array of its dtype (``common.from_numpy`` keeps it
so, and ``to_numpy`` gives it back as it is), so transfers, the numpy fallback and the host see ml_dtypes' own
arrays. Inside a program (``program.Generated``) it is an ``mx.uint8`` array of its bytes (``bits_of`` at the
program's entry, ``typed`` at its exit, the bytes as ml_dtypes lays them out: int4/uint4 in a byte's low four
bits); such a program is never given to ``mx.compile`` (``typed`` reads the bytes back).

Operations (``LOW_BIT_PRIMITIVES``): data movement and ``select_n`` (the structural rules, unchanged, on the
bytes), bit casts between a float8 and the 8-bit integers, and ``convert_element_type`` (``low_bit_convert``),
bit for bit as ml_dtypes:

- float8 -> wider: ``mx.from_fp8`` for e4m3fn where the installed MLX has it (0.32 does; it reads 0x7F/0xFF as
  NaN, as ml_dtypes), else the bytes placed in a float16 (``e4m3_to_float32``); e5m2 is a float16's top byte;
- into a float8 (``float32_to_float8``): round to nearest even on the float8's grid by one float32 addition of a
  power of two whose unit in the last place is that grid's spacing (``(a + c) - c``, exact otherwise), then the
  value's code through float16 (which holds every float8 value); e4m3fn's overflow and infinities give NaN,
  e5m2's infinity; e4m3fn through ``mx.to_fp8`` where MLX has it, which rounds as ml_dtypes but saturates
  overflow and NaN to 448 (measured with MLX 0.32.4): those are set to NaN after it;
- int4/uint4: the low four bits, sign-extended for int4; into them, integers wrap and floats truncate, saturate
  and take NaN to 0 (the design's float -> int rule).

Arithmetic, compares, reductions, scans, shifts, sorts, gathers, scatters, windows and products
(``UPCAST_PRIMITIVES``: every primitive of the parity cases but convolutions of int4/uint4 and
``quantized_matmul`` of float8 activations, which MLX has no form for) compute in a wider dtype inside the
program (``low_bit_upcast.py``, over this module's ``decode`` and ``float32_to_float8``). float64 into a float8
falls back (ml_dtypes rounds once from float64; this rounds from float32), as does every other operation on
these dtypes (``low_bit_reason`` says so). Source: ml_dtypes (the formats and conversions),
OCP 8-bit floating point v1.0.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.conv import conv_general_dilated_p
from fnarray.lowering.mlx import elementwise
from fnarray.lowering.mlx.common import RULES, mx, mx_dtype

__all__ = ["LOW_BIT_PRIMITIVES", "low_bit_reason", "bits_of", "typed", "low_bit_convert", "e4m3_to_float32",
           "float32_to_float8", "UPCAST_PRIMITIVES", "decode"]

#: The primitives that take the low-bit dtypes on their bytes: conversions and data movement.
LOW_BIT_PRIMITIVES = frozenset({P.convert_element_type, P.bitcast_convert_type, P.reshape, P.transpose,
                                P.broadcast_in_dim, P.slice_p, P.rev, P.concatenate, P.copy_p, P.select_n,
                                P.dynamic_slice, P.dynamic_update_slice, P.stop_gradient, P.name_p})
#: The primitives computed by upcasting (``low_bit_upcast.py``): the operands decoded to float32 (float8) or
#: int32 (int4/uint4), the wider dtype's rule, a low-bit result encoded back (rounded once / wrapped).
UPCAST_PRIMITIVES = frozenset({
    P.neg, P.sign, P.abs_p, P.floor, P.ceil, P.round_p, P.is_finite, P.exp, P.log, P.sqrt, P.rsqrt, P.tanh,
    P.logistic, P.sin, P.cos, P.not_p, P.integer_pow, P.add, P.sub, P.mul, P.div, P.rem, P.max_p, P.min_p,
    P.and_p, P.or_p, P.xor_p, P.eq, P.ne, P.lt, P.le, P.gt, P.ge, P.reduce_sum, P.reduce_prod, P.reduce_max,
    P.reduce_min, P.argmax, P.argmin, P.dot_general, P.sort, P.gather, P.pad, P.cumsum, P.cumprod, P.cummax,
    P.exp2, P.log1p, P.expm1, P.scatter, P.scatter_add,
    # fifteenth session: the other float functions, bit operations on the nibble, the remaining scans, scatters,
    # windows and products (``low_bit_upcast``: cummin as -cummax(-x), shifts and population_count of a nibble)
    P.tan, P.asin, P.acos, P.atan, P.sinh, P.cosh, P.asinh, P.acosh, P.atanh, P.cbrt, P.erf, P.erf_inv, P.log2,
    P.log10, P.atan2, P.pow_p, P.nextafter, P.cummin, P.cumlogsumexp, P.shift_left, P.shift_right_logical,
    P.shift_right_arithmetic, P.population_count, P.reduce_and, P.reduce_or, P.scatter_mul, P.scatter_min,
    P.scatter_max, W.reduce_window_sum_p, W.reduce_window_max_p, W.reduce_window_min_p, W.select_and_gather_add_p,
    W.select_and_scatter_add_p, conv_general_dilated_p, dot_product_attention_p})
_FLOAT8 = (dtypes.float8_e4m3fn, dtypes.float8_e5m2)
#: Per float8: (mantissa bits, smallest normal exponent, largest finite value, the code of an overflow).
_GRID = {dtypes.float8_e4m3fn: (3, -6, 448.0, 0x7F), dtypes.float8_e5m2: (2, -14, 57344.0, 0x7C)}
#: The dtypes a conversion into or out of a low-bit dtype handles here (float64 only out of one).
_CONVERTIBLE = frozenset({dtypes.bool_, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8,
                          dtypes.uint16, dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16,
                          dtypes.float32, *dtypes.LOW_BIT_DTYPES})


def low_bit_reason(prim, eqn_dtypes, params):
    """Why an equation with a low-bit dtype among ``eqn_dtypes`` cannot run on mlx, or ``None``."""
    low = sorted((d for d in eqn_dtypes if dtypes.is_low_bit(d)), key=str)
    if not low:
        return None
    d = low[0]
    if prim in UPCAST_PRIMITIVES:
        return None
    if prim not in LOW_BIT_PRIMITIVES:
        return (f"MLX has no {d.name} dtype: mlx holds its bytes, converts them, moves them and computes the "
                "arithmetic, compares, reductions, scans, scatters, windows and products by upcasting "
                "(lowering/mlx/low_bit.py); "
                f"{prim.name} is not among them and runs on numpy:0 (cast to float32 first to compute on mlx)")
    others = [e for e in eqn_dtypes if not dtypes.is_low_bit(e)]
    if prim is P.bitcast_convert_type and (any(dtypes.is_int(e) for e in low) or
                                           any(e.itemsize != 1 for e in others)):
        return f"mlx bit-casts a float8 only to or from a one-byte integer, not {' and '.join(map(str, eqn_dtypes))}"
    if prim is P.convert_element_type:
        bad = [e for e in others if e not in _CONVERTIBLE and not (e == dtypes.float64 and params["new_dtype"] == e)]
        if bad:
            return (f"mlx converts {d.name} from and to bool, integers, float16, bfloat16 and float32 (and into "
                    f"float64), not {bad[0].name} (float64 -> float8 rounds once from float64 on numpy:0)")
    return None


def bits_of(x):
    """A low-bit array's bytes as ``mx.uint8`` (a NumPy array of the dtype, or already bytes)."""
    if isinstance(x, mx.array):
        return x
    x = np.asarray(x)   # (``ascontiguousarray`` would make a rank-0 constant rank 1)
    return mx.array(np.ascontiguousarray(x).view(np.uint8).reshape(x.shape))


def typed(x, dtype):
    """The bytes ``x`` (``mx.uint8``) as a read-only NumPy array of the low-bit ``dtype``."""
    if not isinstance(x, mx.array):
        return x
    out = np.array(x, copy=True).view(dtype)
    out.flags.writeable = False
    return out


def _u32(x):
    return x.astype(mx.uint32)


def _f32_of_bits(b):
    return mx.view(_u32(b), mx.float32)


def e4m3_to_float32(b, use_from_fp8=True):
    """float32 values of e4m3fn bytes ``b`` (``mx.uint8``): the magnitude of the low seven bits by ``mx.from_fp8``
    where MLX has it, else placed at a float16's exponent and mantissa (bias 15 against 7: times ``2**8``;
    float16 subnormals are converted exactly; 0x7F is NaN), then bit 7 as the float32 sign bit (NaNs keep it, as
    ml_dtypes')."""
    low = mx.bitwise_and(b, 0x7F)
    if use_from_fp8 and hasattr(mx, "from_fp8"):
        v = mx.from_fp8(low, dtype=mx.float32)
    else:
        v = mx.view(mx.left_shift(low.astype(mx.uint16), 7), mx.float16).astype(mx.float32) * 256.0
        v = mx.where(low == 0x7F, mx.array(np.float32(np.nan)), v)
    sign = mx.left_shift(mx.bitwise_and(b, 0x80).astype(mx.uint32), 24)
    return mx.view(mx.bitwise_or(mx.view(v, mx.uint32), sign), mx.float32)


def _float8_to_float32(b, d):
    if d == dtypes.float8_e4m3fn:
        return e4m3_to_float32(b)
    return mx.view(mx.left_shift(b.astype(mx.uint16), 8), mx.float16).astype(mx.float32)   # e5m2: float16's top byte


#: The smallest float32 magnitude above which e4m3fn rounds to NaN: halfway between 448 and 480 (a tie rounds to
#: 448, its mantissa even).
_E4M3_NAN_ABOVE = 464.0


def float32_to_float8(x, d, use_to_fp8=True):
    """The bytes (``mx.uint8``) of float32 ``x`` rounded to nearest even into the float8 ``d``, as ml_dtypes.

    e4m3fn by ``mx.to_fp8`` where the installed MLX has it (round to nearest even, bit for bit as ml_dtypes for
    every finite value up to 464 in magnitude, measured over every float32 whose top 19 bits vary and a million
    random ones, MLX 0.32.4), its saturation of larger values, infinities and NaN to 448 replaced by NaN: 5 MLX
    operations against the grid addition's 15 (``use_to_fp8=False``, below, and e5m2's)."""
    if use_to_fp8 and d == dtypes.float8_e4m3fn and hasattr(mx, "to_fp8"):
        code = mx.to_fp8(x)   # (NaN fails the comparison: NaN too)
        return mx.where(mx.abs(x) <= _E4M3_NAN_ABOVE, code, mx.bitwise_or(code, 0x7F))
    mbits, emin, top, overflow = _GRID[d]
    u = mx.view(x, mx.uint32)
    sign = mx.right_shift(u, 31).astype(mx.uint8) * 128
    a = mx.abs(x)
    exponent = mx.right_shift(mx.view(a, mx.uint32), 23)   # biased; 255 for inf and NaN (set apart below)
    grid = mx.minimum(mx.maximum(exponent, 127 + emin), 200)
    c = _f32_of_bits(mx.left_shift(grid + (23 - mbits), 23))   # its unit in the last place: the grid's spacing
    r = (a + c) - c
    if d == dtypes.float8_e4m3fn:   # every e4m3 value / 2**8 is a float16; its code is the top bits after the sign
        code = mx.right_shift(mx.view((r * (2.0 ** -8)).astype(mx.float16), mx.uint16), 7)
        bad = mx.logical_or(r > top, mx.isnan(x))   # overflow, infinities and NaN: NaN
        code = mx.where(bad, overflow, code)
    else:                           # e5m2 is a float16's top byte
        code = mx.right_shift(mx.view(r.astype(mx.float16), mx.uint16), 8)
        code = mx.where(r > top, overflow, code)   # overflow and infinities
        code = mx.where(mx.isnan(x), 0x7E, code)
    return mx.bitwise_or(code.astype(mx.uint8), sign)


def decode(src):
    """``fn(bytes) -> (mx.array, its dtype)``: a low-bit array's values as float32 (float8) or int8/uint8."""
    if src in _FLOAT8:
        return lambda b: _float8_to_float32(b, src), dtypes.float32
    if src == dtypes.int4:
        return lambda b: (mx.bitwise_xor(mx.bitwise_and(b, 15), 8).astype(mx.int8) - 8), dtypes.int8
    return lambda b: mx.bitwise_and(b, 15), dtypes.uint8


def _encode(dst, src, convert):
    """``fn(x) -> bytes`` of values ``x`` of ``src`` (not low-bit) into the low-bit ``dst``; ``convert(new_dtype,
    src)`` gives the elementwise rule's converter."""
    if dst in _FLOAT8:
        f32 = (lambda x: x) if src == dtypes.float32 else convert(dtypes.float32, src)
        return lambda x: float32_to_float8(f32(x), dst)
    if dtypes.is_inexact(src):   # truncate, saturate, NaN -> 0 (through the 8-bit rule), then the 4-bit range
        lo, hi = (-8, 7) if dst == dtypes.int4 else (0, 15)
        narrow = convert(dtypes.int8 if dst == dtypes.int4 else dtypes.uint8, src)
        return lambda x: mx.bitwise_and(mx.clip(narrow(x), lo, hi), 15).astype(mx.uint8)
    if src == dtypes.bool_:
        return lambda x: x.astype(mx.uint8)
    return lambda x: mx.bitwise_and(x, 15).astype(mx.uint8)   # integers wrap


def _signed_nan(decode, out, dst):
    """float8 -> ``dst`` (float16, bfloat16, float64) through float32, the byte's sign bit set again afterwards:
    MLX's float32 conversions drop a NaN's sign, which ml_dtypes keeps (measured: -NaN -> bfloat16 0x7FC0)."""
    width = {2: mx.uint16, 8: mx.uint64}[dst.itemsize]
    md = mx_dtype(dst)

    def f(x):
        b = bits_of(x)
        sign = mx.left_shift(mx.bitwise_and(b, 0x80).astype(width), 8 * dst.itemsize - 8)
        return mx.view(mx.bitwise_or(mx.view(out(decode(b)), width), sign), md)
    return f


def low_bit_convert(convert):
    """The ``convert_element_type`` rule for conversions touching a low-bit dtype, built over the elementwise rule
    ``convert(params, in_avals, out_avals)`` for the rest."""
    from fnarray.core.shaped import ShapedArray

    def rule_of(new_dtype, src):
        return convert({"new_dtype": new_dtype, "weak_type": False, "sharding": None}, [ShapedArray((), src)],
                       [ShapedArray((), new_dtype)])

    def factory(params, in_avals, out_avals):
        src, dst = in_avals[0].dtype, params["new_dtype"]
        if not (dtypes.is_low_bit(src) or dtypes.is_low_bit(dst)):
            return convert(params, in_avals, out_avals)
        if src == dst:
            return bits_of
        if dtypes.is_low_bit(src):
            dec, mid = decode(src)
            if dtypes.is_low_bit(dst):
                encode = _encode(dst, mid, rule_of)
                return lambda x: encode(dec(bits_of(x)))
            out = rule_of(dst, mid)
            if src in _FLOAT8 and dtypes.is_float(dst) and dst != dtypes.float32:
                return _signed_nan(dec, out, dst)
            return lambda x: out(dec(bits_of(x)))
        return _encode(dst, src, rule_of)
    return factory


def _bitcast_factory(bitcast):
    """The ``bitcast_convert_type`` rule, a float8's bytes to or from a one-byte integer added to ``bitcast``."""
    def factory(params, in_avals, out_avals):
        src, dst = in_avals[0].dtype, params["new_dtype"]
        if dtypes.is_low_bit(dst):
            return lambda x: mx.view(bits_of(x), mx.uint8)
        if dtypes.is_low_bit(src):
            md = mx_dtype(dst)
            return lambda x: mx.view(bits_of(x), md)
        return bitcast(params, in_avals, out_avals)
    return factory


# Over the elementwise family's two rules (imported above, so registered first).
assert elementwise.RULES is RULES
RULES[P.convert_element_type] = low_bit_convert(RULES[P.convert_element_type])
RULES[P.bitcast_convert_type] = _bitcast_factory(RULES[P.bitcast_convert_type])
