"""The jax backend's rules for the elementwise primitives (``jax.lax``'s, with the reference's integer and NaN
semantics)."""

from __future__ import annotations

import functools

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core import primitives as P
from fnarray.lowering.jax.common import RULES, direct, jax, jnp, lax, rule


# The primitives jax.lax (else jax.numpy) has by their own name (``Primitive.library``), then the others.
families.on_family("unary", lambda p: p.library and direct(p, getattr(lax, p.name, None) or getattr(jnp, p.name)))
for _p, _f in [(P.neg, lax.neg), (P.sign, lax.sign), (P.floor, lax.floor), (P.ceil, lax.ceil),
               (P.is_finite, lax.is_finite), (P.logistic, lax.logistic), (P.rsqrt, lax.rsqrt),
               (P.erf, lax.erf), (P.erf_inv, lax.erf_inv), (P.lgamma, lax.lgamma), (P.digamma, lax.digamma),
               (P.abs_p, lax.abs), (P.not_p, lax.bitwise_not), (P.real, lax.real), (P.imag, lax.imag),
               (P.conj, lax.conj), (P.population_count, lax.population_count)]:
    direct(_p, _f)
direct(P.erfc, lax.erfc)



def _digamma(x):
    # XLA gives NaN at 0; the reference gives the pole's sign there (-inf at +0, +inf at -0), which
    # -1/x is. XLA flushes subnormal inputs, so they land here too, as the subnormal rule allows.
    return jnp.where(x == 0, -1 / x, lax.digamma(x)).astype(x.dtype)


RULES[P.digamma] = _digamma


def _abs(x):
    if dtypes.is_unsigned(x.dtype):
        return x
    if x.dtype == dtypes.int4:   # JAX refuses abs of int4: in int8, wrapped back (|-8| is -8, as two's complement)
        return lax.convert_element_type(lax.abs(lax.convert_element_type(x, np.int8)), x.dtype)
    return lax.abs(x)


RULES[P.abs_p] = _abs


def _exp(x):
    out = lax.exp(x)
    if not jnp.iscomplexobj(x):
        return out
    # XLA's complex exp gives NaN + NaN j at several C99 Annex G cases (the array API's, NumPy's):
    # a zero imaginary part stays zero, and an infinite real part with an infinite or NaN imaginary part
    # gives 0 + 0j (at -inf) or inf + NaN j (at +inf). The same fix-up as the kernel backends' rule.
    a, b = lax.real(x), lax.imag(x)
    m = lax.exp(a)
    odd = ~lax.is_finite(b)
    ninf, pinf = (a == -jnp.inf) & odd, (a == jnp.inf) & odd
    zero = b == 0
    re = jnp.where(zero, m, jnp.where(ninf, 0.0, jnp.where(pinf, jnp.inf, lax.real(out)))).astype(a.dtype)
    im = jnp.where(zero, b, jnp.where(ninf, 0.0, jnp.where(pinf, jnp.nan, lax.imag(out)))).astype(a.dtype)
    return lax.complex(re, im)


RULES[P.exp] = lambda x: _exp(x)


RULES[P.round_p] = lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
RULES[P.stop_gradient] = lambda x: x
RULES[P.copy_p] = lambda x: x
RULES[P.name_p] = lambda x, *, name: x
RULES[P.integer_pow] = lambda x, *, y: lax.integer_pow(x, y)


@functools.cache
def _lax_broadcasts_rank0() -> bool:
    """Whether ``lax``'s binary operations take a rank-0 operand beside an array (JAX 0.5 and later: the jaxpr then
    holds no ``broadcast_in_dim`` per scalar literal, a third of a polynomial's equations for JAX to trace and
    lower on a first call)."""
    try:
        jax.eval_shape(lambda a: lax.add(a, np.float32(1)), jax.ShapeDtypeStruct((2,), np.float32))
        return True
    except TypeError:
        return False


def _bcast(x, y):
    """Rank-0 operands broadcast in fnarray's binary primitives; lax wants equal shapes."""
    sx, sy = jnp.shape(x), jnp.shape(y)
    if sx == sy:
        return x, y
    if sx == ():
        return lax.broadcast(x, sy), y
    return x, lax.broadcast(y, sx)


def _operands(x, y):
    """``x, y`` for one of ``lax``'s binary operations: a rank-0 operand as it is where ``lax`` broadcasts it
    itself, else broadcast here (``_bcast``)."""
    return (x, y) if _lax_broadcasts_rank0() else _bcast(x, y)


def _binary(prim, fn):
    def f(x, y):
        return fn(*_operands(x, y))
    RULES[prim] = f


def _is_zero_const(v, negative: bool) -> bool:
    """A concrete float constant (a literal of the program, never a traced value) whose every element is +0.0
    (``negative``: -0.0)."""
    if isinstance(v, jax.core.Tracer) or not isinstance(v, (float, np.ndarray, np.generic)):
        return False
    a = np.asarray(v)
    return a.dtype.kind == "f" and a.size > 0 and not np.any(a) and bool(np.all(np.signbit(a) == negative))


def _plus_zero(x):
    """``x + 0.0`` with IEEE's sign: XLA's simplifier folds ``x + 0.0`` to ``x``, which keeps -0.0 (IEEE: +0.0)."""
    return lax.select(x == 0, jnp.zeros_like(x), x)


def _add(x, y):
    if jnp.shape(x) == jnp.shape(y) or jnp.shape(x) == ():  # the constant is tested before it is broadcast
        if _is_zero_const(x, False):
            return _plus_zero(lax.broadcast(y, jnp.shape(x)) if jnp.shape(y) == () else y)
    if jnp.shape(x) == jnp.shape(y) or jnp.shape(y) == ():
        if _is_zero_const(y, False):
            return _plus_zero(lax.broadcast(x, jnp.shape(y)) if jnp.shape(x) == () else x)
    return lax.add(*_operands(x, y))


def _sub(x, y):
    if (jnp.shape(x) == jnp.shape(y) or jnp.shape(y) == ()) and _is_zero_const(y, True):
        return _plus_zero(lax.broadcast(x, jnp.shape(y)) if jnp.shape(x) == () else x)  # x - (-0.0) = x + 0.0
    return lax.sub(*_operands(x, y))


RULES[P.add], RULES[P.sub] = _add, _sub
for _p, _f in [(P.mul, lax.mul), (P.pow_p, lax.pow), (P.max_p, lax.max),
               (P.min_p, lax.min), (P.atan2, lax.atan2), (P.nextafter, lax.nextafter),
               (P.and_p, lax.bitwise_and), (P.or_p, lax.bitwise_or), (P.xor_p, lax.bitwise_xor),
               (P.shift_left, lax.shift_left), (P.shift_right_arithmetic, lax.shift_right_arithmetic),
               (P.shift_right_logical, lax.shift_right_logical), (P.eq, lax.eq), (P.ne, lax.ne),
               (P.lt, lax.lt), (P.le, lax.le), (P.gt, lax.gt), (P.ge, lax.ge), (P.complex_p, lax.complex)]:
    _binary(_p, _f)


def _int_safe(fn):
    """Integer division/remainder by zero gives 0 (docs/design.md), where XLA gives -1 or x."""
    def f(x, y):
        x, y = _bcast(x, y)
        if not jnp.issubdtype(x.dtype, jnp.integer):
            return fn(x, y)
        zero = y == 0
        return lax.select(zero, jnp.zeros_like(x), fn(x, lax.select(zero, jnp.ones_like(y), y)))
    return f


RULES[P.div] = _int_safe(lax.div)
RULES[P.rem] = _int_safe(lax.rem)


@rule(P.select_n)
def _select_n(which, *cases):
    if which.dtype == jnp.bool_ or len(cases) == 1:
        return lax.select_n(which, *cases)
    return lax.select_n(lax.clamp(jnp.int32(0), which, jnp.int32(len(cases) - 1)), *cases)


_HALF_AND_FLOAT8 = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)


@rule(P.convert_element_type)
def _convert(x, *, new_dtype, weak_type=False):
    src = x.dtype
    if src == new_dtype:
        return x
    if new_dtype == np.bool_:
        return x != 0
    if src == np.bool_ and dtypes.is_inexact(new_dtype):
        # through uint8: XLA's simplifier rewrites ``convert(pred) * y`` as ``select(pred, y, 0)``, which gives 0
        # for False * inf (and False * NaN) where NumPy's 0.0 * inf is NaN (``jnp`` itself gives 0 there)
        x = lax.convert_element_type(x, np.uint8)
    if jnp.issubdtype(src, jnp.complexfloating) and not dtypes.is_complex(new_dtype):
        x = lax.real(x)
        src = x.dtype
    if jnp.issubdtype(src, jnp.floating) and dtypes.is_int(new_dtype):
        info = dtypes.iinfo(new_dtype)
        hi = np.array(info.max, new_dtype)
        lo = np.array(info.min, new_dtype)
        # half and float8 compared in float32 (2**31 - 1 is inf or NaN in float8_e4m3fn)
        xf = lax.convert_element_type(x, np.float32) if src in _HALF_AND_FLOAT8 else x
        t = jnp.where(jnp.isnan(xf), jnp.zeros_like(xf), xf)
        conv = lax.convert_element_type(jnp.clip(t, float(info.min), float(info.max)), new_dtype)
        return jnp.where(t >= float(info.max), hi, jnp.where(t <= float(info.min), lo, conv))
    return lax.convert_element_type(x, new_dtype)


RULES[P.bitcast_convert_type] = lambda x, *, new_dtype: lax.bitcast_convert_type(x, new_dtype)


# ----------------------------------------------------------------------------- float8 in float32
# XLA evaluates some float8 functions in float8 steps (exp2 as exp of a float8 product, logistic, log1p):
# the reference computes every float8 operation in float32 and rounds once, as it does float16/bfloat16.
_EXACT_IN_F8 = frozenset({P.neg, P.sign, P.floor, P.ceil, P.round_p, P.is_finite, P.abs_p, P.not_p, P.real,
                          P.imag, P.conj, P.population_count, P.stop_gradient, P.copy_p, P.name_p,
                          P.convert_element_type, P.bitcast_convert_type})
_FLOAT8 = frozenset({dtypes.float8_e4m3fn, dtypes.float8_e5m2})


def _float8_in_float32(fn):
    @functools.wraps(fn)   # ``__wrapped__``: ``primitives NAME`` shows the wrapped rule's own line
    def rule(x, *rest, **params):
        d = x.dtype
        if d not in _FLOAT8:
            return fn(x, *rest, **params)
        up = [lax.convert_element_type(a, np.float32) if a.dtype in _FLOAT8 else a for a in (x, *rest)]
        return lax.convert_element_type(fn(*up, **params), d)
    return rule


def _int4_in_int8(fn):
    """``fn`` over int4/uint4 ``x`` in int8/uint8 (JAX's bitwise reductions refuse them), wrapped back."""
    @functools.wraps(fn)
    def rule(x, **params):
        wide = {dtypes.int4: np.int8, dtypes.uint4: np.uint8}.get(x.dtype)
        if wide is None:
            return fn(x, **params)
        return lax.convert_element_type(fn(lax.convert_element_type(x, wide), **params), x.dtype)
    return rule


def wrap_float8_rules():
    """Make the float-valued elementwise rules compute float8 operands in float32 (``backend.py`` calls it once
    every family module has registered its rules), and the sums and products too (XLA adds float8 in float8
    steps; the reference, as for float16, in float32, rounded once); int4/uint4 bitwise reductions in 8 bits."""
    from fnarray.core import windows as W
    inexact = [p for p in families.members("unary") if p not in _EXACT_IN_F8]
    for p in inexact + [P.add, P.sub, P.mul, P.div, P.rem, P.pow_p, P.atan2, P.reduce_sum, P.reduce_prod,
                        P.cumsum, P.cumprod, P.cumlogsumexp, P.scatter_add, P.scatter_mul, W.reduce_window_sum_p,
                        W.select_and_scatter_add_p]:
        if p in RULES:
            RULES[p] = _float8_in_float32(RULES[p])
    for p in (P.reduce_and, P.reduce_or):
        RULES[p] = _int4_in_int8(RULES[p])


def _population_count(x):
    if x.dtype == dtypes.int4:   # XLA's int4 popcount is wrong (-1 gives -8): count the low 4 bits in uint8
        u = lax.bitwise_and(lax.convert_element_type(x, np.uint8), np.uint8(15))
        return lax.convert_element_type(lax.population_count(u), x.dtype)
    return lax.population_count(x)


RULES[P.population_count] = _population_count
