"""The low-bit dtypes' operations as equations in a wider dtype: an IR -> IR pass for backends that hold
float8_e4m3fn, float8_e5m2, int4 and uint4 as bytes and only convert them (the kernel backends: opencl, webgpu).

``upcast_low_bit(program, keep)`` rewrites each equation of ``UPCAST_PRIMITIVES`` that has a low-bit operand or
result and that ``keep(eqn)`` rejects into three steps: ``convert_element_type`` of each low-bit operand to its
wider dtype (float32 for a float8, exactly; int32 for int4/uint4), the same primitive over the wider dtypes
(a dtype parameter, ``preferred_element_type``, widened alike), and ``convert_element_type`` of each low-bit
result back (a float8 rounded to nearest even once, with its format's overflow and NaN; int4/uint4 wrapped to
their low four bits). That is the numpy reference's arithmetic (``lowering/numpy``: float8 computed in float32
and rounded once, as ml_dtypes' ufuncs; int4 wraps), so a backend whose conversions are ml_dtypes' bit for bit
(``kernels/rules.py``: ``low_bit_value``, ``to_low_bit``) computes them natively and equally, where its float32
operation is the reference's (exact or correctly rounded: add, mul, div, sqrt, compares, max/min, data movement).
The bit operations that read an int4/uint4 operand's four bits rather than its value (``NIBBLE_AS``) convert it
through the 4-bit dtype of that reading first (a logical shift and a bit count read it unsigned, an arithmetic
shift signed): in int32, a shift of the value by 4 to 31 leaves the 4-bit answer in the low four bits.
A float8 NaN becomes one NaN of its format (its payload and sign are not kept; no operation here reads them).
Not here: ``nextafter`` (it steps the float8 code, not the float32 value) and what a backend already takes on
the bytes (conversions, bit casts, data movement: ``keep``). Source: ml_dtypes (float8 ufuncs in float32,
rounded once; int4 wrap-around), the mlx backend's ``lowering/mlx/low_bit_upcast.py`` (the same rule per rule).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.quantized import quantized_matmul_p
from fnarray.core.shaped import ShapedArray
from fnarray.core.subprograms import rewrite_equations

__all__ = ["UPCAST_PRIMITIVES", "NIBBLE_AS", "widened", "needs_upcast", "upcast_low_bit"]

#: The primitives computed on low-bit values in a wider dtype (module docstring): elementwise maps, compares,
#: reductions, scans, products (``quantized_matmul``'s float8 activations too), windows, scatters, and the data
#: movement a byte backend may lack (``pad``, ``select_n``, dynamic slices, ``gather``).
UPCAST_PRIMITIVES = frozenset({
    P.neg, P.sign, P.abs_p, P.floor, P.ceil, P.round_p, P.is_finite, P.exp, P.log, P.sqrt, P.rsqrt, P.tanh,
    P.logistic, P.sin, P.cos, P.not_p, P.integer_pow, P.add, P.sub, P.mul, P.div, P.rem, P.max_p, P.min_p,
    P.and_p, P.or_p, P.xor_p, P.eq, P.ne, P.lt, P.le, P.gt, P.ge, P.reduce_sum, P.reduce_prod, P.reduce_max,
    P.reduce_min, P.argmax, P.argmin, P.dot_general, P.sort, P.gather, P.pad, P.cumsum, P.cumprod, P.cummax,
    P.cummin, P.cumlogsumexp, P.exp2, P.log1p, P.expm1, P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min,
    P.scatter_max, P.tan, P.asin, P.acos, P.atan, P.sinh, P.cosh, P.asinh, P.acosh, P.atanh, P.cbrt, P.erf,
    P.erf_inv, P.erfc, P.lgamma, P.digamma, P.log2, P.log10, P.atan2, P.pow_p, P.shift_left,
    P.shift_right_logical, P.shift_right_arithmetic, P.population_count, P.reduce_and, P.reduce_or, P.select_n,
    P.dynamic_slice, P.dynamic_update_slice, W.reduce_window_sum_p, W.reduce_window_max_p, W.reduce_window_min_p,
    W.select_and_gather_add_p, W.select_and_scatter_add_p, conv_general_dilated_p, dot_product_attention_p,
    quantized_matmul_p})

#: The bit operations whose first int4/uint4 operand is read as its four bits (unsigned: a logical shift, a bit
#: count; signed: an arithmetic shift, bit 3 the sign for uint4 too, as numpy:0 and XLA).
NIBBLE_AS = {P.shift_right_logical: dtypes.uint4, P.population_count: dtypes.uint4,
             P.shift_right_arithmetic: dtypes.int4}


def widened(d):
    """The dtype a low-bit ``d`` computes in (float32 for a float8, int32 for int4/uint4); ``d`` otherwise."""
    if not dtypes.is_low_bit(d):
        return d
    return dtypes.float32 if dtypes.is_float(d) else dtypes.int32


def needs_upcast(eqn: Eqn) -> bool:
    """Whether ``eqn`` is one this pass rewrites (a primitive of ``UPCAST_PRIMITIVES`` with a low-bit operand or
    result), whatever the backend."""
    return eqn.primitive in UPCAST_PRIMITIVES and any(
        dtypes.is_low_bit(a.aval.dtype) for a in (*eqn.inputs, *eqn.outputs))


def _convert(x, dtype, weak_type=False) -> tuple[Var, Eqn]:
    out = Var(ShapedArray(x.aval.shape, dtype, weak_type))
    return out, Eqn(P.convert_element_type, (x,), Params(new_dtype=dtype, weak_type=weak_type), (out,))


def _widen_input(prim, i, x, eqns):
    d = x.aval.dtype
    if not dtypes.is_low_bit(d):
        return x
    nibble = i == 0 and d in (dtypes.int4, dtypes.uint4) and NIBBLE_AS.get(prim, d) != d
    if isinstance(x, Literal):   # a literal of the wider dtype (a kernel prints no low-bit constant)
        v = np.asarray(x.val).astype(NIBBLE_AS[prim]) if nibble else np.asarray(x.val)
        return Literal(v.astype(widened(d)), ShapedArray((), widened(d), x.aval.weak_type))
    if nibble:
        x, e = _convert(x, NIBBLE_AS[prim])   # int4 <-> uint4 keeps the four bits
        eqns.append(e)
    x, e = _convert(x, widened(d))
    eqns.append(e)
    return x


def _upcast(eqn: Eqn) -> list:
    """``eqn`` as its wide equation between conversions (module docstring), ending in ``eqn``'s outputs."""
    prim, eqns = eqn.primitive, []
    ins = [_widen_input(prim, i, x, eqns) for i, x in enumerate(eqn.inputs)]
    params = Params({k: (widened(v) if isinstance(v, np.dtype) else v) for k, v in eqn.params.items()})
    wide = prim.abstract_eval(*[x.aval for x in ins], **params)
    wide = list(wide) if prim.multiple_results else [wide]
    outs, back = [], []
    for o, w in zip(eqn.outputs, wide, strict=True):
        if not dtypes.is_low_bit(o.aval.dtype):
            outs.append(o)
            continue
        v = Var(w)
        outs.append(v)
        back.append(Eqn(P.convert_element_type, (v,), Params(new_dtype=o.aval.dtype, weak_type=o.aval.weak_type),
                        (o,)))
    return [*eqns, Eqn(prim, tuple(ins), params, tuple(outs)), *back]


def upcast_low_bit(program: Program, keep) -> Program:
    """``program`` with every equation that ``needs_upcast`` and that ``keep(eqn)`` rejects computed in the wider
    dtypes (module docstring), in sub-programs too. Returns ``program`` itself when nothing changes."""
    return rewrite_equations(program, lambda e: _upcast(e) if needs_upcast(e) and not keep(e) else None)
