"""The low-bit dtypes' arithmetic on mlx by upcasting inside the program (``low_bit.UPCAST_PRIMITIVES``).

Each low-bit operand's bytes are decoded (a float8 to float32, exactly; int4/uint4 to int32), the wider dtype's
own rule computes (every dtype in the equation, ``preferred_element_type`` included, widened alike), and a
low-bit result is encoded back: a float8 by ``low_bit.float32_to_float8`` (round to nearest even once, each
format's overflow and NaN), int4/uint4 as their low four bits (wrap-around). That is the numpy reference's
(``lowering/numpy``: float8 computed in float32 and rounded once; ml_dtypes' int4 wraps), bit for bit where
the float32 computation is exact or correctly rounded in both (add, sub, mul, div, sqrt, max/min, compares,
casts, and sums and products while float32 holds them exactly); sums that round in float32 may differ in
their order of additions, and ``exp``/``log``/... in MLX's float32 last bit, as for float32 itself.
Where the value is not what a bit operation reads, int4/uint4's first operand is decoded as its nibble
(``_NIBBLE_AS``: unsigned for a logical shift and a bit count, signed for an arithmetic shift; an int32 shift by
4 to 31 then leaves the 4-bit answer in the low bits); a float ``cummin`` is ``-cummax(-x)`` (NumPy keeps the
newer of two equal zeros, as MLX's cummax and not its cummin); float8 ``nextafter`` steps the code itself.
Registered over the other families' rules, so imported last (``backend.FAMILIES``). Source: ml_dtypes
(float8 ufuncs: float32 arithmetic rounded once; int4: wrap-around).
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.mlx import attention, conv, dot, elementwise, reductions, structural, windows  # noqa: F401 (their rules are wrapped here)
from fnarray.lowering.mlx.common import RULES, mx
from fnarray.lowering.mlx.low_bit import UPCAST_PRIMITIVES, bits_of, decode, float32_to_float8

__all__ = ["widened", "upcast_rule"]


def widened(d):
    """The dtype a low-bit ``d`` computes in here (float32 for a float8, int32 for int4/uint4); ``d`` otherwise."""
    if not dtypes.is_low_bit(d):
        return d
    return dtypes.float32 if dtypes.is_float(d) else dtypes.int32


def _wide_aval(a):
    from fnarray.core.shaped import ShapedArray
    return a if not dtypes.is_low_bit(a.dtype) else ShapedArray(a.shape, widened(a.dtype))


def _decoder(d):
    """``fn(x) -> mx.array`` of the values of an operand of dtype ``d`` in ``widened(d)``."""
    if not dtypes.is_low_bit(d):
        return lambda x: x
    if d == dtypes.float8_e4m3fn and hasattr(mx, "from_fp8"):   # one operation (a NaN's payload aside, as decode)
        return lambda x: mx.from_fp8(bits_of(x), dtype=mx.float32)
    dec, mid = decode(d)
    if mid == dtypes.float32:
        return lambda x: dec(bits_of(x))
    return lambda x: dec(bits_of(x)).astype(mx.int32)


def _encoder(d):
    """``fn(x) -> bytes`` of a result of dtype ``d`` computed in ``widened(d)``."""
    if not dtypes.is_low_bit(d):
        return lambda x: x
    if dtypes.is_float(d):
        return lambda x: float32_to_float8(x, d)
    return lambda x: mx.bitwise_and(x, 15).astype(mx.uint8)   # int4/uint4 wrap: the low four bits


#: The operations that agree with their results modulo 16 (a ring's and the bitwise ones): on int4/uint4 they
#: compute on the bytes as uint8 (a nibble is its value modulo 16), then keep the low four bits; no decoding.
_MOD16 = frozenset({P.add, P.sub, P.mul, P.neg, P.and_p, P.or_p, P.xor_p, P.not_p, P.reduce_and, P.reduce_or})
#: The bit operations whose first int4/uint4 operand is read as its four bits, not its value: unsigned (a logical
#: shift, a count of the bits) or signed (an arithmetic shift: bit 3 is the sign, uint4's too, as numpy:0 and
#: XLA); in int32 a shift by 4 to 31 then leaves the 4-bit answer in the low four bits (0, or -1 filled).
_NIBBLE_AS = {P.shift_right_logical: dtypes.uint4, P.population_count: dtypes.uint4,
              P.shift_right_arithmetic: dtypes.int4}


def _as_uint8(a):
    from fnarray.core.shaped import ShapedArray
    return ShapedArray(a.shape, dtypes.uint8)


def _cummin_by_cummax(params, in_avals, out_avals):
    """float32 ``cummin`` as ``-cummax(-x)``: NumPy's ``minimum.accumulate`` keeps the newer of two equal values
    (the sign of the last zero), as MLX's ``cummax`` does and its ``cummin`` does not (measured, MLX 0.32)."""
    fn = RULES[P.cummax](params, in_avals, out_avals)
    return lambda x: mx.negative(fn(mx.negative(x)))


def _nextafter_float8(d):
    """``nextafter`` of two float8 arrays on their bytes: one step of the sign-magnitude code toward ``y`` (the
    smallest subnormal with ``y``'s sign from a zero), ``y`` where equal, NaN where either is NaN, as ml_dtypes'
    ``nextafter`` (numpy:0). The comparisons are on the float32 values (exact)."""
    dec = _decoder(d)
    nan = mx.array(np.array(np.nan, np.float32))

    def f(x, y):
        bx, by = bits_of(x), bits_of(y)
        fx, fy = dec(bx), dec(by)
        up = (fx < fy) == (fx > 0)   # away from zero: the magnitude's code plus one
        moved = mx.where(up, bx + 1, bx - 1).astype(mx.uint8)
        from_zero = mx.bitwise_or(mx.bitwise_and(by, 0x80), 1).astype(mx.uint8)
        r = mx.where(fx == 0, from_zero, moved)
        r = mx.where(fx == fy, by, r)
        return mx.where(mx.isnan(fx) | mx.isnan(fy), float32_to_float8(nan, d), r)
    return f


_LOW_BIT = frozenset(dtypes.LOW_BIT_DTYPES)


def upcast_rule(prim, rule):
    """The rule ``rule(params, in_avals, out_avals)`` of ``prim`` over low-bit operands: decoded, computed in the
    wider dtypes, the low-bit results encoded (module docstring); the rule itself where no dtype is low-bit."""
    multiple_results = prim.multiple_results

    @functools.wraps(rule)   # (the rule's own line stays its site: ``_rule_sites``)
    def factory(params, in_avals, out_avals):
        # (a loop, not ``any`` over a generator: each new shape's first eager call of every wrapped rule asks)
        for a in (*in_avals, *out_avals):
            if a.dtype in _LOW_BIT:
                break
        else:
            return rule(params, in_avals, out_avals)
        if prim in _MOD16 and all(a.dtype in (dtypes.int4, dtypes.uint4) for a in in_avals):
            fn = rule(params, [_as_uint8(a) for a in in_avals], [_as_uint8(a) for a in out_avals])
            return lambda *xs: mx.bitwise_and(fn(*(bits_of(x) for x in xs)), 15)
        if prim is P.nextafter:
            return _nextafter_float8(in_avals[0].dtype)
        wide_params = {k: (widened(v) if isinstance(v, np.dtype) else v) for k, v in params.items()}
        wide_in, wide_out = [_wide_aval(a) for a in in_avals], [_wide_aval(a) for a in out_avals]
        decs = [_decoder(a.dtype) for a in in_avals]
        encs = [_encoder(a.dtype) for a in out_avals]
        if prim in _NIBBLE_AS and in_avals[0].dtype in (dtypes.int4, dtypes.uint4):
            decs[0] = _decoder(_NIBBLE_AS[prim])
        if prim is P.cummin and dtypes.is_float(in_avals[0].dtype):
            fn = _cummin_by_cummax(wide_params, wide_in, wide_out)
        else:
            fn = rule(wide_params, wide_in, wide_out)
        if multiple_results:
            return lambda *xs: [e(r) for e, r in zip(encs, fn(*(d(x) for d, x in zip(decs, xs))))]
        enc = encs[0]
        return lambda *xs: enc(fn(*(d(x) for d, x in zip(decs, xs))))
    return factory


for _prim in UPCAST_PRIMITIVES:
    RULES[_prim] = upcast_rule(_prim, RULES[_prim])
