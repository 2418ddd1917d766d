"""JVP and transpose rules of the first-order primitives (fills the tables of ``ad_tables``).

Rules are written with ``fnarray.core.lax`` only, so they run eagerly, under
``jit`` and under other transformations alike. Tangent computations are linear
in the tangents and use only primitives that have a transpose rule here, so
that ``vjp`` can transpose every JVP.

Conventions, where the derivative is not unique:

- ``max``/``min``: at a tie each operand gets half of its tangent (as JAX).
- ``reduce_max``/``reduce_min`` and ``scatter_max``/``scatter_min``: the
  tangent is split evenly among all the sources equal to the result (as JAX).
- ``cummax``/``cummin``: the JVP of their parallel prefix scan of pairwise
  ``max``/``min`` (as JAX): tied elements share the tangent in the shares
  that the scan's tree gives (e.g. 1/2, 1/4).
- ``sort``: the tangents follow the primal permutation (equal keys keep the
  order that the sort itself gives them).
- ``pow(x, y)`` (as JAX): the derivative in ``x`` is ``y * x ** (y - 1)``, so
  NaN at ``0 ** 0.0`` (0 * inf; ``fnp.power`` with an integer exponent array
  gives 0, as JAX's ``lax.pow`` with an integer ``y``); the derivative
  in ``y`` is ``log(x) * x ** y`` with ``log(0)`` taken as 0: 0 at ``x == 0``
  for ``y >= 0``, NaN for ``y < 0``.
- ``abs`` at 0: ``+t`` (as JAX; PyTorch 0), so ``hypot`` at (0, 0) has 1/2.
- ``sign``, ``floor``, ``ceil``, ``round``, ``stop_gradient``, comparisons,
  ``nextafter`` and integer/bitwise operations: zero tangent.
- Complex cotangents follow JAX's convention: transposes are those of the real
  bilinear pairing ``Re(sum(a * b))`` (no conjugation).

``digamma``'s derivative, the trigamma function, is computed here from lax
operations (reflection, recurrence, asymptotic series), so that it too can be
differentiated again.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.errors import ConcretizationError
from fnarray.core.prng import threefry2x32_p
from fnarray.core.shaped import ShapedArray
from fnarray.transforms.ad_tables import (
    Zero,
    add_tangents,
    defjvp,
    defjvp_zero,
    deflinear,
    instantiate_zeros,
    is_undefined,
    primitive_jvps,
    primitive_transposes,
    staged,
    tangent_aval,
)

__all__ = ["NO_JVP", "ZERO_TANGENT_PRIMITIVES", "trigamma"]

# First-order primitives without a JVP rule, with the reason. Empty: every one has a rule
# (the ones whose output cannot change to first order get a zero rule, listed below).
NO_JVP: dict[str, str] = {}
# The primitives of a pallas_call kernel body (fnarray.core.pallas): a kernel is differentiated by custom_vjp.
for _p in ("pallas_load", "pallas_store", "pallas_atomic", "pallas_loop", "pallas_when"):
    NO_JVP[_p] = "only inside a pallas_call kernel body, which is differentiated by custom_vjp"


# ----------------------------------------------------------------------------- helpers


_aval = get_aval  # fnarray.core.avals


def _is_pynum(v) -> bool:
    return isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic)


def _const(like, value):
    """A scalar literal of ``like``'s dtype (a Python scalar for float32/complex64, so weak types survive)."""
    d = _aval(like).dtype
    if d == dtypes.float32:
        return float(np.real(value))
    if d == dtypes.complex64:
        return complex(value)
    return np.asarray(value).astype(d)[()]


def _full_like(like, value):
    a = _aval(like)
    return lax.full(a.shape, value, a.dtype)


def _zeros(aval: ShapedArray):
    return lax.full(aval.shape, 0, aval.dtype)


def _bcast(x, shape):
    """Broadcast a rank-0 ``x`` (or one already of ``shape``) to ``shape``."""
    shape = tuple(shape)
    if _aval(x).shape == shape and not _is_pynum(x):
        return x
    return lax.broadcast_in_dim(x, shape, ())


def _where(pred, on_true, on_false):
    """``select`` with rank-0 broadcasting; a Python number becomes a constant of the other case's dtype."""
    arrays = [v for v in (on_true, on_false) if not _is_pynum(v)]
    dt = _aval(arrays[0]).dtype
    shape = max((_aval(v).shape for v in (pred, *arrays)), key=len)

    def case(v):
        if _is_pynum(v):
            return lax.full(shape, v, dt)
        return _bcast(v, shape)

    if _aval(pred).shape not in ((), shape):
        raise ValueError(f"_where: predicate of shape {_aval(pred).shape} does not fit {shape}")
    return lax.select(pred, case(on_true), case(on_false))


def _safe_nonzero(n):
    """``n`` with its zeros replaced by ones (a denominator where the numerator is then masked)."""
    return _where(lax.eq(n, _const(n, 0)), 1, n)


def _unbroadcast(aval: ShapedArray, ct):
    """Sum a cotangent back to a rank-0 operand that was broadcast in a binary op."""
    s = _aval(ct).shape
    if s == aval.shape:
        return ct
    return lax.reduce_sum(ct, tuple(range(len(s))))


def _out_zero(out):
    return Zero(tangent_aval(_aval(out)))


def _zero_cts(args):
    return [Zero(a.aval) if is_undefined(a) else None for a in args]


def _take_along_axis(x, idx, axis):
    """``x`` indexed by ``idx`` (of ``x``'s shape, int32) along ``axis`` through one ``gather``."""
    shape = _aval(idx).shape
    nd = len(shape)
    cols = [lax.reshape(idx if d == axis else lax.iota(dtypes.int32, shape, d), shape + (1,)) for d in range(nd)]
    return lax.gather(x, lax.concatenate(cols, nd), tuple(range(nd)))


def _shift(x, k, axis, fill):
    """``x`` shifted by ``k`` positions toward higher indices along ``axis``, filled with ``fill``."""
    nd = _aval(x).ndim
    cfg = [(k, -k, 0) if d == axis else (0, 0, 0) for d in range(nd)]
    return lax.pad(x, _const(x, fill), cfg)


def _index_upper_bounds(indices, x_shape, axes):
    """An array shaped like ``indices`` holding, in column k, the largest valid index along ``axes[k]``."""
    a = _aval(indices)
    cols = [lax.full(a.shape[:-1] + (1,), x_shape[ax] - 1, a.dtype) for ax in axes]
    return lax.concatenate(cols, a.ndim - 1)


def _clamp_indices(indices, x_shape, axes):
    """Indices clamped into bounds as ``gather`` does (so that ``scatter_add`` does not drop them)."""
    lo = lax.max(indices, _const(indices, 0))
    return lax.min(lo, _index_upper_bounds(indices, x_shape, axes))


def _in_bounds(indices, x_shape, axes):
    """bool of the batch shape of ``indices``: which index tuples a scatter does not drop."""
    ok = lax.bitwise_and(lax.ge(indices, _const(indices, 0)),
                         lax.le(indices, _index_upper_bounds(indices, x_shape, axes)))
    return lax.reduce_and(ok, (_aval(indices).ndim - 1,))


def _batch_to_updates(v, updates_shape, nbatch):
    """Broadcast an array of the scatter batch shape over the trailing window dims of the updates."""
    return lax.broadcast_in_dim(v, updates_shape, tuple(range(nbatch)))


def _cast(x, like):
    return lax.convert_element_type(x, _aval(like).dtype)


# ----------------------------------------------------------------------------- zero-tangent primitives

# Outputs that are constant to first order (piecewise constant, integer or boolean valued, or
# defined to carry no derivative). Their JVP rule returns a symbolic ``Zero``.
ZERO_TANGENT_PRIMITIVES = (
    P.sign, P.floor, P.ceil, P.round_p,          # piecewise constant (sign as JAX, complex too)
    P.is_finite, P.eq, P.ne, P.lt, P.le, P.gt, P.ge,  # boolean results
    P.not_p, P.and_p, P.or_p, P.xor_p, P.population_count,  # integer/boolean operands
    P.shift_left, P.shift_right_arithmetic, P.shift_right_logical,
    P.reduce_and, P.reduce_or, P.argmax, P.argmin,
    P.nextafter,                                 # a one-ulp step: derivative zero (as JAX)
    P.stop_gradient,                             # by definition
    P.bitcast_convert_type,                      # reinterprets bits: not differentiable, zero (as JAX)
    P.iota,                                      # no inputs
    threefry2x32_p,                              # integer bits
)
for _p in ZERO_TANGENT_PRIMITIVES:
    defjvp_zero(_p)


# ----------------------------------------------------------------------------- unary elementwise


def _unary(prim, coef):
    """Register ``tangent = t * coef(x, out)``."""
    def jvp(t, out, x, **params):
        return lax.mul(t, coef(x, out))
    jvp.__name__ = f"{prim.name}_jvp"
    defjvp(prim, jvp)


def _sq(x):
    return lax.mul(x, x)


_unary(P.exp, lambda x, out: out)
_unary(P.exp2, lambda x, out: lax.mul(out, _const(out, math.log(2.0))))
_unary(P.log, lambda x, out: lax.div(_const(x, 1), x))
_unary(P.log2, lambda x, out: lax.div(_const(x, 1 / math.log(2)), x))
_unary(P.log10, lambda x, out: lax.div(_const(x, 1 / math.log(10)), x))
_unary(P.log1p, lambda x, out: lax.div(_const(x, 1), lax.add(x, _const(x, 1))))
_unary(P.expm1, lambda x, out: lax.add(out, _const(out, 1)))
_unary(P.tanh, lambda x, out: lax.sub(_const(out, 1), _sq(out)))
_unary(P.logistic, lambda x, out: lax.mul(out, lax.sub(_const(out, 1), out)))
_unary(P.sin, lambda x, out: lax.cos(x))
_unary(P.cos, lambda x, out: lax.neg(lax.sin(x)))
_unary(P.tan, lambda x, out: lax.add(_const(out, 1), _sq(out)))
_unary(P.asin, lambda x, out: lax.rsqrt(lax.sub(_const(x, 1), _sq(x))))
_unary(P.acos, lambda x, out: lax.neg(lax.rsqrt(lax.sub(_const(x, 1), _sq(x)))))
_unary(P.atan, lambda x, out: lax.div(_const(x, 1), lax.add(_const(x, 1), _sq(x))))
_unary(P.sinh, lambda x, out: lax.cosh(x))
_unary(P.cosh, lambda x, out: lax.sinh(x))
_unary(P.asinh, lambda x, out: lax.rsqrt(lax.add(_sq(x), _const(x, 1))))
_unary(P.acosh, lambda x, out: lax.rsqrt(lax.mul(lax.sub(x, _const(x, 1)), lax.add(x, _const(x, 1)))))
_unary(P.atanh, lambda x, out: lax.div(_const(x, 1), lax.sub(_const(x, 1), _sq(x))))
_unary(P.sqrt, lambda x, out: lax.div(_const(out, 0.5), out))
_unary(P.rsqrt, lambda x, out: lax.mul(_const(out, -0.5), lax.div(out, x)))
# (1/3) out ** -2 as JAX's: the second derivative at 0 is -inf (a division by out ** 2 gave NaN)
_unary(P.cbrt, lambda x, out: lax.mul(_const(out, 1 / 3), lax.integer_pow(out, -2)))
_unary(P.erf, lambda x, out: lax.mul(_const(x, 2 / math.sqrt(math.pi)), lax.exp(lax.neg(_sq(x)))))
_unary(P.erfc, lambda x, out: lax.mul(_const(x, -2 / math.sqrt(math.pi)), lax.exp(lax.neg(_sq(x)))))
_unary(P.erf_inv, lambda x, out: lax.mul(_const(x, math.sqrt(math.pi) / 2), lax.exp(_sq(out))))
_unary(P.lgamma, lambda x, out: lax.digamma(x))


def trigamma(x):
    """The trigamma function ``polygamma(1, x)`` (derivative of ``digamma``) from lax operations.

    Args: ``x``: a float array of any shape. Returns: an array of ``x``'s shape and dtype;
    +inf at 0 and large values near the other poles (non-positive integers).
    Mirrors ``scipy.special.polygamma(1, x)``.

    Below 1/2 the reflection ``psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)`` applies; above,
    ten steps of ``psi1(z) = 1/z^2 + psi1(z + 1)`` bring the argument past 10, where the
    asymptotic series in Bernoulli numbers (seven terms) is accurate to float64 precision.
    """
    reflect = lax.lt(x, _const(x, 0.5))
    z = _where(reflect, lax.sub(_const(x, 1), x), x)
    acc = _zeros(_aval(z))
    for k in range(10):
        zk = lax.add(z, _const(z, k)) if k else z
        acc = lax.add(acc, lax.div(_const(z, 1), _sq(zk)))
    inv = lax.div(_const(z, 1), lax.add(z, _const(z, 10)))
    inv2 = _sq(inv)
    poly = _const(z, 7 / 6)
    for c in (-691 / 2730, 5 / 66, -1 / 30, 1 / 42, -1 / 30, 1 / 6):
        poly = lax.add(_const(z, c), lax.mul(inv2, poly))
    series = lax.mul(inv, lax.add(_const(z, 1), lax.mul(inv, lax.add(_const(z, 0.5), lax.mul(inv, poly)))))
    pos = lax.add(acc, series)
    s = lax.sin(lax.mul(x, _const(x, math.pi)))
    refl = lax.sub(lax.div(_const(x, math.pi ** 2), _sq(s)), pos)
    return _where(reflect, refl, pos)


_unary(P.digamma, lambda x, out: trigamma(x))


def abs_jvp(t, out, x):
    if not dtypes.is_complex(_aval(x).dtype):
        return _where(lax.ge(x, _const(x, 0)), t, lax.neg(t))   # +t at 0 (and -t at NaN), as JAX
    # d|z| = Re(conj(z) t) / |z|, taken as 0 at z = 0
    num = lax.real(lax.mul(lax.conj(x), t))
    zero = lax.eq(out, _const(out, 0))
    return _where(zero, 0, lax.div(num, _safe_nonzero(out)))


defjvp(P.abs_p, abs_jvp)


def integer_pow_jvp(t, out, x, *, y):
    """``t * y * x ** (y - 1)`` for ``y != 0`` (the rule below gives ``Zero`` for ``y == 0``)."""
    coef = _const(x, y) if y == 1 else lax.mul(_const(x, y), x if y == 2 else lax.integer_pow(x, y - 1))
    return lax.mul(t, coef)


def _integer_pow_rule(primals, tangents, *, y):
    x, = primals
    t, = tangents
    out = P.integer_pow.bind(x, y=y)
    if isinstance(t, Zero) or y == 0:
        return out, _out_zero(out)
    return out, integer_pow_jvp(t, out, x, y=y)


primitive_jvps[P.integer_pow] = _integer_pow_rule


def neg_transpose(ct, x):
    return [Zero(x.aval) if isinstance(ct, Zero) else lax.neg(ct)]


deflinear(P.neg, neg_transpose)


def copy_transpose(ct, x):
    return [Zero(x.aval) if isinstance(ct, Zero) else ct]


deflinear(P.copy_p, copy_transpose)
# checkpoint_name: the primal is named (what policies see), the tangent passes as it is (as JAX's name_p)
defjvp(P.name_p, lambda t, out, x, **params: t)
primitive_transposes[P.name_p] = lambda ct, x, **params: copy_transpose(ct, x)


def real_transpose(ct, x):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    return [lax.complex(ct, _const(ct, 0))]


def imag_transpose(ct, x):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    return [lax.complex(_const(ct, 0), lax.neg(ct))]


def conj_transpose(ct, x):
    return [Zero(x.aval) if isinstance(ct, Zero) else lax.conj(ct)]


deflinear(P.real, real_transpose)
deflinear(P.imag, imag_transpose)
deflinear(P.conj, conj_transpose)


def complex_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return _zero_cts([x, y])
    return [_unbroadcast(x.aval, lax.real(ct)) if is_undefined(x) else None,
            _unbroadcast(y.aval, lax.neg(lax.imag(ct))) if is_undefined(y) else None]


def _complex_jvp(primals, tangents):
    x, y = primals
    out = P.complex_p.bind(x, y)
    if all(isinstance(t, Zero) for t in tangents):
        return out, _out_zero(out)
    tx, ty = (instantiate_zeros(t) for t in tangents)
    return out, lax.complex(tx, ty)


primitive_jvps[P.complex_p] = _complex_jvp
primitive_transposes[P.complex_p] = complex_transpose


def convert_element_type_jvp(primals, tangents, *, new_dtype, weak_type=False):
    x, = primals
    t, = tangents
    out = P.convert_element_type.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    if isinstance(t, Zero) or not dtypes.is_inexact(new_dtype) or not dtypes.is_inexact(_aval(x).dtype):
        return out, _out_zero(out)
    return out, P.convert_element_type.bind(t, new_dtype=new_dtype, weak_type=weak_type)


def convert_element_type_transpose(ct, x, *, new_dtype, weak_type=False):
    a = x.aval
    if not (dtypes.is_inexact(a.dtype) and dtypes.is_inexact(new_dtype)):
        raise TypeError(f"convert_element_type from {a.dtype.name} to {new_dtype.name} is not linear; only "
                        "conversions between floating/complex dtypes can be transposed")
    if isinstance(ct, Zero):
        return [Zero(a)]
    return [P.convert_element_type.bind(ct, new_dtype=a.dtype, weak_type=a.weak_type)]


primitive_jvps[P.convert_element_type] = convert_element_type_jvp
primitive_transposes[P.convert_element_type] = convert_element_type_transpose


# ----------------------------------------------------------------------------- binary elementwise


def _binary(prim, *fns):
    """``defjvp`` whose contributions are broadcast to the output shape (a rank-0 operand's tangent)."""
    def wrap(fn):
        if fn is None:
            return None

        def contribution(t, out, x, y, **params):
            return _bcast(fn(t, out, x, y, **params), _aval(out).shape)
        contribution.__name__ = fn.__name__
        return contribution
    defjvp(prim, *(wrap(f) for f in fns))


def _first(t, out, x, y):
    return t


def _neg_second(t, out, x, y):
    return lax.neg(t)


def _mul_x(t, out, x, y):
    return lax.mul(t, y)


def _mul_y(t, out, x, y):
    return lax.mul(x, t)


def _div_x(t, out, x, y):
    return lax.div(t, y)


def _div_y(t, out, x, y):
    return lax.neg(lax.mul(t, lax.div(out, y)))


def _rem_y(t, out, x, y):
    q = lax.div(x, y)
    return lax.neg(lax.mul(t, lax.mul(lax.sign(q), lax.floor(lax.abs(q)))))


def _pow_x(t, out, x, y):
    # y * x ** (y - 1), as JAX's for a float y: NaN at 0 ** 0.0 (0 * inf); fnarray.numpy.pow gives 0 for an
    # integer exponent array (JAX's lax.pow with an integer y) by a select around pow
    return lax.mul(t, lax.mul(y, lax.pow(x, lax.sub(y, _const(y, 1)))))


def _pow_y(t, out, x, y):
    # log(x) * x ** y with log(0) taken as 0 (as JAX): 0 where x == 0 and y > 0, NaN where y < 0 (0 * inf)
    if _is_pynum(x):   # a literal base (2.0 ** y): a scalar of the result's dtype, for _where's dtype
        x = lax.full((), x, _aval(out).dtype)
    return lax.mul(t, lax.mul(lax.log(_safe_nonzero(x)), out))


def _balanced_coef(a, b, out):
    """1 where ``a`` alone equals ``out``, 1/2 where both operands do, else 0."""
    a_hit = lax.eq(a, out) if _aval(a).shape == _aval(out).shape else lax.eq(_bcast(a, _aval(out).shape), out)
    b_hit = lax.eq(_bcast(b, _aval(out).shape), out)
    half = _where(b_hit, _full_like(out, 0.5), 1)
    return _where(a_hit, half, 0)


def _extremum_x(t, out, x, y):
    return lax.mul(t, _balanced_coef(x, y, out))


def _extremum_y(t, out, x, y):
    return lax.mul(t, _balanced_coef(y, x, out))


def _atan2_x(t, out, x, y):
    return lax.mul(t, lax.div(y, lax.add(_sq(x), _sq(y))))


def _atan2_y(t, out, x, y):
    return lax.neg(lax.mul(t, lax.div(x, lax.add(_sq(x), _sq(y)))))


_binary(P.add, _first, _first)
_binary(P.sub, _first, _neg_second)
_binary(P.mul, _mul_x, _mul_y)
_binary(P.div, _div_x, _div_y)
_binary(P.rem, _first, _rem_y)
_binary(P.pow_p, _pow_x, _pow_y)
_binary(P.max_p, _extremum_x, _extremum_y)
_binary(P.min_p, _extremum_x, _extremum_y)
_binary(P.atan2, _atan2_x, _atan2_y)


def add_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return _zero_cts([x, y])
    return [_unbroadcast(x.aval, ct) if is_undefined(x) else None,
            _unbroadcast(y.aval, ct) if is_undefined(y) else None]


def sub_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return _zero_cts([x, y])
    return [_unbroadcast(x.aval, ct) if is_undefined(x) else None,
            _unbroadcast(y.aval, lax.neg(ct)) if is_undefined(y) else None]


def mul_transpose(ct, x, y):
    if is_undefined(x) and is_undefined(y):
        raise TypeError("mul is linear in one operand at a time; both operands of this mul depend on "
                        "the differentiated inputs, so it cannot be transposed")
    if isinstance(ct, Zero):
        return _zero_cts([x, y])
    if is_undefined(x):
        return [_unbroadcast(x.aval, lax.mul(ct, y)), None]
    return [None, _unbroadcast(y.aval, lax.mul(x, ct))]


def div_transpose(ct, x, y):
    if is_undefined(y):
        raise TypeError("div is linear in its numerator only; its denominator depends on the "
                        "differentiated inputs, so it cannot be transposed")
    if isinstance(ct, Zero):
        return _zero_cts([x, y])
    return [_unbroadcast(x.aval, lax.div(ct, y)), None]


primitive_transposes[P.add] = add_transpose
primitive_transposes[P.sub] = sub_transpose
primitive_transposes[P.mul] = mul_transpose
primitive_transposes[P.div] = div_transpose


# ----------------------------------------------------------------------------- select_n


def select_n_jvp(primals, tangents):
    which = primals[0]
    out = P.select_n.bind(*primals)
    case_ts = tangents[1:]
    if all(isinstance(t, Zero) for t in case_ts):
        return out, _out_zero(out)
    return out, P.select_n.bind(which, *(instantiate_zeros(t) for t in case_ts))


def select_n_transpose(ct, which, *cases):
    if is_undefined(which):
        raise TypeError("select_n is not linear in its selector")
    if isinstance(ct, Zero):
        return [None] + _zero_cts(cases)
    zeros = _zeros(_aval(ct))
    res = [None]
    for i, c in enumerate(cases):
        if is_undefined(c):
            res.append(P.select_n.bind(which, *(ct if j == i else zeros for j in range(len(cases)))))
        else:
            res.append(None)
    return res


primitive_jvps[P.select_n] = select_n_jvp
primitive_transposes[P.select_n] = select_n_transpose


# ----------------------------------------------------------------------------- structural


def broadcast_in_dim_transpose(ct, x, *, shape, broadcast_dimensions):
    a = x.aval
    if isinstance(ct, Zero):
        return [Zero(a)]
    new = [d for d in range(len(shape)) if d not in broadcast_dimensions]
    stretched = [d for i, d in enumerate(broadcast_dimensions) if a.shape[i] == 1 and shape[d] != 1]
    summed = lax.reduce_sum(ct, tuple(sorted(new + stretched)))
    return [lax.reshape(summed, a.shape)]


def reshape_transpose(ct, x, *, new_sizes):
    return [Zero(x.aval) if isinstance(ct, Zero) else lax.reshape(ct, x.aval.shape)]


def transpose_transpose(ct, x, *, permutation):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return [lax.transpose(ct, inverse)]


def rev_transpose(ct, x, *, dimensions):
    return [Zero(x.aval) if isinstance(ct, Zero) else lax.rev(ct, dimensions)]


def slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    a = x.aval
    if isinstance(ct, Zero):
        return [Zero(a)]
    out_shape = _aval(ct).shape
    if 0 in out_shape:
        return [_zeros(a)]
    cfg = []
    for s, st, n, m in zip(start_indices, strides, a.shape, out_shape, strict=True):
        last = s + (m - 1) * st
        cfg.append((s, n - last - 1, st - 1))
    return [lax.pad(ct, _const(ct, 0), cfg)]


deflinear(P.broadcast_in_dim, broadcast_in_dim_transpose)
deflinear(P.reshape, reshape_transpose)
deflinear(P.transpose, transpose_transpose)
deflinear(P.rev, rev_transpose)
deflinear(P.slice_p, slice_transpose)


def pad_transpose(ct, x, pad_value, *, padding_config):
    if isinstance(ct, Zero):
        return _zero_cts([x, pad_value])
    ct_shape = _aval(ct).shape
    # undo low/high padding (re-growing what negative padding cropped), then drop interior padding
    unpadded = lax.pad(ct, _const(ct, 0), [(-lo, -hi, 0) for lo, hi, _ in padding_config])
    ushape = _aval(unpadded).shape
    ct_x = lax.slice(unpadded, (0,) * len(ushape), ushape, [i + 1 for _, _, i in padding_config])
    res = [ct_x if is_undefined(x) else None, None]
    if is_undefined(pad_value):
        everything = lax.reduce_sum(ct, tuple(range(len(ct_shape))))
        res[1] = lax.sub(everything, lax.reduce_sum(ct_x, tuple(range(len(ct_shape)))))
    return res


deflinear(P.pad, pad_transpose)


def concatenate_transpose(ct, *xs, dimension):
    if isinstance(ct, Zero):
        return _zero_cts(xs)
    res = []
    start = 0
    for x in xs:
        n = _aval(x).shape[dimension]
        if is_undefined(x):
            res.append(lax.slice_in_dim(ct, start, start + n, 1, dimension) if n else _zeros(x.aval))
        else:
            res.append(None)
        start += n
    return res


deflinear(P.concatenate, concatenate_transpose)


def dynamic_slice_jvp(primals, tangents, *, slice_sizes):
    x, *starts = primals
    t = tangents[0]
    out = P.dynamic_slice.bind(x, *starts, slice_sizes=slice_sizes)
    if isinstance(t, Zero):
        return out, _out_zero(out)
    return out, P.dynamic_slice.bind(t, *starts, slice_sizes=slice_sizes)


def dynamic_slice_transpose(ct, x, *starts, slice_sizes):
    if any(is_undefined(s) for s in starts):
        raise TypeError("dynamic_slice is not linear in its start indices")
    if isinstance(ct, Zero):
        return [Zero(x.aval)] + [None] * len(starts)
    return [P.dynamic_update_slice.bind(_zeros(x.aval), ct, *starts)] + [None] * len(starts)


primitive_jvps[P.dynamic_slice] = dynamic_slice_jvp
primitive_transposes[P.dynamic_slice] = dynamic_slice_transpose


def dynamic_update_slice_jvp(primals, tangents):
    x, update, *starts = primals
    tx, tu = tangents[:2]
    out = P.dynamic_update_slice.bind(x, update, *starts)
    if isinstance(tx, Zero) and isinstance(tu, Zero):
        return out, _out_zero(out)
    return out, P.dynamic_update_slice.bind(instantiate_zeros(tx), instantiate_zeros(tu), *starts)


def dynamic_update_slice_transpose(ct, x, update, *starts):
    if any(is_undefined(s) for s in starts):
        raise TypeError("dynamic_update_slice is not linear in its start indices")
    if isinstance(ct, Zero):
        return _zero_cts([x, update]) + [None] * len(starts)
    ua = _aval(update)
    ct_x = P.dynamic_update_slice.bind(ct, _zeros(ua), *starts) if is_undefined(x) else None
    ct_u = P.dynamic_slice.bind(ct, *starts, slice_sizes=ua.shape) if is_undefined(update) else None
    return [ct_x, ct_u] + [None] * len(starts)


primitive_jvps[P.dynamic_update_slice] = dynamic_update_slice_jvp
primitive_transposes[P.dynamic_update_slice] = dynamic_update_slice_transpose


# ----------------------------------------------------------------------------- gather and scatter


def gather_jvp(primals, tangents, *, axes):
    x, indices = primals
    t = tangents[0]
    out = P.gather.bind(x, indices, axes=axes)
    if isinstance(t, Zero):
        return out, _out_zero(out)
    return out, P.gather.bind(t, indices, axes=axes)


def gather_transpose(ct, x, indices, *, axes):
    if is_undefined(indices):
        raise TypeError("gather is not linear in its indices")
    a = x.aval
    if isinstance(ct, Zero):
        return [Zero(a), None]
    if a.size == 0:
        return [_zeros(a), None]
    # gather clamps its indices where scatter_add would drop them: clamp first
    idx = _clamp_indices(indices, a.shape, axes)
    return [P.scatter_add.bind(_zeros(a), idx, ct, axes=axes), None]


primitive_jvps[P.gather] = gather_jvp
primitive_transposes[P.gather] = gather_transpose


def scatter_add_jvp(primals, tangents, *, axes):
    x, indices, updates = primals
    tx, _, tu = tangents
    out = P.scatter_add.bind(x, indices, updates, axes=axes)
    if isinstance(tx, Zero) and isinstance(tu, Zero):
        return out, _out_zero(out)
    return out, P.scatter_add.bind(instantiate_zeros(tx), indices, instantiate_zeros(tu), axes=axes)


def _gather_kept(ct, indices, updates_aval, x_shape, axes):
    """``gather(ct, indices)`` with zeros for the index tuples that a scatter drops."""
    g = P.gather.bind(ct, indices, axes=axes)
    nbatch = _aval(indices).ndim - 1
    ok = _batch_to_updates(_in_bounds(indices, x_shape, axes), updates_aval.shape, nbatch)
    return _where(ok, g, 0)


def scatter_add_transpose(ct, x, indices, updates, *, axes):
    if is_undefined(indices):
        raise TypeError("scatter_add is not linear in its indices")
    if isinstance(ct, Zero):
        return [Zero(x.aval) if is_undefined(x) else None, None,
                Zero(updates.aval) if is_undefined(updates) else None]
    ua = _aval(updates)
    ct_x = ct if is_undefined(x) else None
    ct_u = _gather_kept(ct, indices, ua, _aval(x).shape, axes) if is_undefined(updates) else None
    return [ct_x, None, ct_u]


primitive_jvps[P.scatter_add] = scatter_add_jvp
primitive_transposes[P.scatter_add] = scatter_add_transpose


def _scatter_winners(x_shape, indices, updates_shape, axes):
    """Which positions of the operand a ``scatter`` writes and which update elements win there.

    Every index tuple gets a distinct id; scattering the ids and gathering them back tells
    the winner of repeated indices, whatever order the backend applies them in.
    Returns (written: bool ``x_shape``, won: bool ``updates_shape``).
    """
    batch = _aval(indices).shape[:-1]
    n = math.prod(batch)
    ids = lax.add(lax.reshape(lax.iota(dtypes.int32, (n,), 0), batch), np.int32(1))
    ids_u = _batch_to_updates(ids, updates_shape, len(batch))
    scattered = P.scatter.bind(lax.full(x_shape, 0, dtypes.int32), indices, ids_u, axes=axes)
    written = lax.ne(scattered, np.int32(0))
    won = lax.eq(P.gather.bind(scattered, indices, axes=axes), ids_u)
    return written, won


def _scatter_linear(tx, indices, tu, written, won, axes):
    """The scatter of tangents ``tx``/``tu`` (either may be Zero) with known winners: linear in both."""
    res = None
    if not isinstance(tx, Zero):
        res = _where(written, 0, tx)
    if not isinstance(tu, Zero):
        x_aval = _aval(written).update(dtype=_aval(tu).dtype, weak_type=False)
        res = add_tangents(res if res is not None else Zero(x_aval),
                           P.scatter_add.bind(_zeros(x_aval), indices, _where(won, tu, 0), axes=axes))
    return res


def scatter_jvp(primals, tangents, *, axes):
    x, indices, updates = primals
    tx, _, tu = tangents
    out = P.scatter.bind(x, indices, updates, axes=axes)
    if isinstance(tx, Zero) and isinstance(tu, Zero):
        return out, _out_zero(out)
    written, won = _scatter_winners(_aval(x).shape, indices, _aval(updates).shape, axes)
    return out, _scatter_linear(tx, indices, tu, written, won, axes)


def scatter_transpose(ct, x, indices, updates, *, axes):
    if is_undefined(indices):
        raise TypeError("scatter is not linear in its indices")
    if isinstance(ct, Zero):
        return [Zero(x.aval) if is_undefined(x) else None, None,
                Zero(updates.aval) if is_undefined(updates) else None]
    xa, ua = _aval(x), _aval(updates)
    written, won = _scatter_winners(xa.shape, indices, ua.shape, axes)
    ct_x = _where(written, 0, ct) if is_undefined(x) else None
    ct_u = _where(won, P.gather.bind(ct, indices, axes=axes), 0) if is_undefined(updates) else None
    return [ct_x, None, ct_u]


primitive_jvps[P.scatter] = scatter_jvp
primitive_transposes[P.scatter] = scatter_transpose


def scatter_mul_jvp(primals, tangents, *, axes):
    """Exact with zero and repeated updates: update j's coefficient is x times the product of
    the other updates at its position, from the product of the non-zero ones and a zero count."""
    x, indices, updates = primals
    tx, _, tu = tangents
    out = P.scatter_mul.bind(x, indices, updates, axes=axes)
    if isinstance(tx, Zero) and isinstance(tu, Zero):
        return out, _out_zero(out)
    xa = _aval(x)
    res = Zero(tangent_aval(_aval(out)))
    if not isinstance(tx, Zero):
        # the operand is scaled by the product of the updates at each position (a mul, so transposable)
        factor = P.scatter_mul.bind(lax.full(xa.shape, 1, xa.dtype), indices, updates, axes=axes)
        res = lax.mul(tx, factor)
    if not isinstance(tu, Zero):
        is_zero = lax.eq(updates, _const(updates, 0))
        nonzero = _where(is_zero, 1, updates)
        prod_nz = P.scatter_mul.bind(lax.full(xa.shape, 1, xa.dtype), indices, nonzero, axes=axes)
        n_zeros = P.scatter_add.bind(_zeros(xa), indices, _cast(is_zero, x), axes=axes)
        pg = P.gather.bind(prod_nz, indices, axes=axes)
        zg = P.gather.bind(n_zeros, indices, axes=axes)
        one_zero = _where(lax.eq(zg, _const(zg, 1)), pg, 0)
        no_zero = _where(lax.eq(zg, _const(zg, 0)), lax.div(pg, nonzero), 0)
        others = _where(is_zero, one_zero, no_zero)
        coef = lax.mul(P.gather.bind(x, indices, axes=axes), others)
        res = add_tangents(res, P.scatter_add.bind(_zeros(xa), indices, lax.mul(coef, tu), axes=axes))
    return out, res


primitive_jvps[P.scatter_mul] = scatter_mul_jvp


def _scatter_extremum_jvp(prim):
    def rule(primals, tangents, *, axes):
        x, indices, updates = primals
        tx, _, tu = tangents
        out = prim.bind(x, indices, updates, axes=axes)
        if isinstance(tx, Zero) and isinstance(tu, Zero):
            return out, _out_zero(out)
        xa = _aval(x)
        # every source equal to the result shares its tangent evenly
        u_hit = lax.eq(updates, P.gather.bind(out, indices, axes=axes))
        x_hit = lax.eq(x, out)
        n_upd = P.scatter_add.bind(_zeros(xa), indices, _cast(u_hit, x), axes=axes)
        n_ref = _safe_nonzero(lax.add(n_upd, _cast(x_hit, x)))
        res = Zero(tangent_aval(_aval(out)))
        if not isinstance(tx, Zero):
            res = lax.mul(tx, lax.div(_cast(x_hit, x), n_ref))
        if not isinstance(tu, Zero):
            coef = _where(u_hit, lax.div(_const(x, 1), P.gather.bind(n_ref, indices, axes=axes)), 0)
            res = add_tangents(res, P.scatter_add.bind(_zeros(xa), indices, lax.mul(coef, tu), axes=axes))
        return out, res
    rule.__name__ = f"{prim.name}_jvp"
    primitive_jvps[prim] = rule


_scatter_extremum_jvp(P.scatter_min)
_scatter_extremum_jvp(P.scatter_max)


# ----------------------------------------------------------------------------- reductions


def _kept_dims(ndim, axes):
    return tuple(d for d in range(ndim) if d not in axes)


def reduce_sum_transpose(ct, x, *, axes):
    a = x.aval
    if isinstance(ct, Zero):
        return [Zero(a)]
    return [lax.broadcast_in_dim(ct, a.shape, _kept_dims(a.ndim, axes))]


deflinear(P.reduce_sum, reduce_sum_transpose)


def reduce_prod_jvp(primals, tangents, *, axes):
    """Exact with zeros: each element's coefficient is the product of the others, from exclusive
    cumulative products in both directions over the flattened reduced axes."""
    x, = primals
    t, = tangents
    out = P.reduce_prod.bind(x, axes=axes)
    if isinstance(t, Zero):
        return out, _out_zero(out)
    a = _aval(x)
    kept = _kept_dims(a.ndim, axes)
    n = math.prod(a.shape[d] for d in axes)
    if n == 0:
        return out, _out_zero(out)
    flat_shape = tuple(a.shape[d] for d in kept) + (n,)
    last = len(kept)

    def flat(v):
        return lax.reshape(lax.transpose(v, kept + tuple(axes)), flat_shape)

    xf, tf = flat(x), flat(t)
    before = _shift(lax.cumprod(xf, last), 1, last, 1)
    after = _shift(lax.cumprod(xf, last, reverse=True), -1, last, 1)
    return out, lax.reduce_sum(lax.mul(lax.mul(before, after), tf), (last,))


primitive_jvps[P.reduce_prod] = reduce_prod_jvp


def _reduce_extremum_jvp(prim):
    def rule(primals, tangents, *, axes):
        x, = primals
        t, = tangents
        out = prim.bind(x, axes=axes)
        if isinstance(t, Zero):
            return out, _out_zero(out)
        a = _aval(x)
        hit = lax.eq(x, lax.broadcast_in_dim(out, a.shape, _kept_dims(a.ndim, axes)))
        count = lax.reduce_sum(_cast(hit, x), axes)
        total = lax.reduce_sum(_where(hit, t, 0), axes)
        return out, lax.div(total, _safe_nonzero(count))
    rule.__name__ = f"{prim.name}_jvp"
    primitive_jvps[prim] = rule


_reduce_extremum_jvp(P.reduce_max)
_reduce_extremum_jvp(P.reduce_min)


# ----------------------------------------------------------------------------- cumulative


def cumsum_transpose(ct, x, *, axis, reverse=False):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    return [lax.cumsum(ct, axis, not reverse)]


deflinear(P.cumsum, cumsum_transpose)


def cumprod_jvp(primals, tangents, *, axis, reverse=False):
    """Exact with zeros: with no zero so far the tangent is ``p * cumsum(t / x)``; with exactly
    one it is the product of the non-zero elements times that zero's tangent; else 0."""
    x, = primals
    t, = tangents
    out = P.cumprod.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero):
        return out, _out_zero(out)
    is_zero = lax.eq(x, _const(x, 0))
    nonzero = _where(is_zero, 1, x)
    p = lax.cumprod(nonzero, axis, reverse)
    n_zeros = lax.cumsum(_cast(is_zero, x), axis, reverse)
    none = lax.mul(p, lax.cumsum(lax.div(t, nonzero), axis, reverse))
    one = lax.mul(p, lax.cumsum(_where(is_zero, t, 0), axis, reverse))
    res = _where(lax.eq(n_zeros, _const(x, 0)), none, _where(lax.eq(n_zeros, _const(x, 1)), one, 0))
    return out, res


primitive_jvps[P.cumprod] = cumprod_jvp


def _cum_extremum_jvp(prim, pairwise):
    def rule(primals, tangents, *, axis, reverse=False):
        """As JAX: the JVP of ``associative_scan(pairwise)``, whose tree of pairwise extrema (each splitting a tie
        in halves) decides how tied elements share the tangent. Without a tie that is the tangent of the element
        that reached the running extremum, one gather (the scan costs ~15x that on numpy:0): ``cond`` picks."""
        x, = primals
        t, = tangents
        out = prim.bind(x, axis=axis, reverse=reverse)
        if isinstance(t, Zero):
            return out, _out_zero(out)
        y = lax.rev(out, (axis,)) if reverse else out
        xs = lax.rev(x, (axis,)) if reverse else x
        pos = lax.iota(dtypes.int32, _aval(x).shape, axis)
        # an element equal to the running extremum before it: a tie of two sources
        same = lax.bitwise_and(lax.ne(pos, np.int32(0)), lax.eq(y, _shift(y, 1, axis, 0)))
        tie = lax.reduce_or(lax.bitwise_and(same, lax.eq(xs, y)), tuple(range(len(_aval(x).shape))))
        scan = lambda x, t: _scan_tangent(pairwise, x, t, axis, reverse)   # noqa: E731
        source = lambda x, t: _source_tangent(y, pos, t, axis, reverse)     # noqa: E731
        try:   # a known value (eager, also under grad's partial evaluation): decided here, not by a cond
            return out, (scan if bool(tie) else source)(x, t)
        except ConcretizationError:   # traced (jit): both branches staged, one runs
            return out, staged["cond"](tie, scan, source, x, t)
    rule.__name__ = f"{prim.name}_jvp"
    primitive_jvps[prim] = rule


def _scan_tangent(pairwise, x, t, axis, reverse):
    """The tangent of ``associative_scan(pairwise)`` of ``x`` (JAX's cummax/cummin JVP)."""
    from fnarray._associative_scan import associative_scan

    def combine(a, b):
        (va, ta), (vb, tb) = a, b
        v = pairwise(va, vb)
        return v, lax.add(lax.mul(ta, _balanced_coef(va, vb, v)), lax.mul(tb, _balanced_coef(vb, va, v)))
    return associative_scan(combine, (x, t), reverse=reverse, axis=axis)[1]


def _source_tangent(y, pos, t, axis, reverse):
    """Each output's tangent from the element that first reached the running extremum ``y`` (in scan order;
    ``pos``: the positions along ``axis``)."""
    changed = lax.bitwise_or(lax.eq(pos, np.int32(0)), lax.ne(y, _shift(y, 1, axis, 0)))
    src = lax.cummax(_where(changed, pos, np.int32(0)), axis)
    res = _take_along_axis(lax.rev(t, (axis,)) if reverse else t, src, axis)
    return lax.rev(res, (axis,)) if reverse else res


_cum_extremum_jvp(P.cummax, lax.max)
_cum_extremum_jvp(P.cummin, lax.min)


def _nan_to_zero(v):
    return _where(lax.ne(v, v), 0, v)


def cumlogsumexp_jvp(primals, tangents, *, axis, reverse=False):
    """``dy_i = sum_{k<=i} exp(x_k - y_i) t_k`` as the linear recurrence
    ``dy_i = exp(y_{i-1} - y_i) dy_{i-1} + exp(x_i - y_i) t_i``, whose factors lie in [0, 1],
    solved by a log-depth parallel scan (stable where a cumulative sum of ``exp(x) t`` overflows)."""
    x, = primals
    t, = tangents
    out = P.cumlogsumexp.bind(x, axis=axis, reverse=reverse)
    if isinstance(t, Zero):
        return out, _out_zero(out)
    if reverse:
        x, t, y = lax.rev(x, (axis,)), lax.rev(t, (axis,)), lax.rev(out, (axis,))
    else:
        y = out
    n = _aval(x).shape[axis]
    decay = _nan_to_zero(lax.exp(lax.sub(_shift(y, 1, axis, -np.inf), y)))
    acc = lax.mul(_nan_to_zero(lax.exp(lax.sub(x, y))), t)
    step = 1
    while step < n:
        acc = lax.add(acc, lax.mul(decay, _shift(acc, step, axis, 0)))
        if 2 * step < n:
            decay = lax.mul(decay, _shift(decay, step, axis, 1))
        step *= 2
    return out, lax.rev(acc, (axis,)) if reverse else acc


primitive_jvps[P.cumlogsumexp] = cumlogsumexp_jvp


# ----------------------------------------------------------------------------- sort


def sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
    """Sorts an iota along with the operands and permutes each tangent with it."""
    shape = _aval(primals[0]).shape
    perm_in = lax.iota(dtypes.int32, shape, dimension)
    outs = P.sort.bind(*primals, perm_in, dimension=dimension, is_stable=is_stable, num_keys=num_keys)
    perm = outs[-1]
    outs = outs[:-1]
    tans = [Zero(tangent_aval(_aval(o))) if isinstance(t, Zero) else _take_along_axis(t, perm, dimension)
            for o, t in zip(outs, tangents, strict=True)]
    return outs, tans


primitive_jvps[P.sort] = sort_jvp


# ----------------------------------------------------------------------------- dot_general


def _dot_lhs(t, out, lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    return P.dot_general.bind(t, rhs, dimension_numbers=dimension_numbers,
                              preferred_element_type=preferred_element_type)


def _dot_rhs(t, out, lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    return P.dot_general.bind(lhs, t, dimension_numbers=dimension_numbers,
                              preferred_element_type=preferred_element_type)


defjvp(P.dot_general, _dot_lhs, _dot_rhs)


def _dot_operand_ct(ct, other, this_aval, other_aval, this_dims, other_dims, this_first):
    """The cotangent of one operand of ``dot_general`` given the other operand's value.

    ``this_dims``/``other_dims``: (contracting, batch) of each. The output of the forward dot is
    (batch, lhs free, rhs free); contracting ``ct`` with ``other`` over ``other``'s free dims
    gives (batch, this free, other's contracting dims in ascending order), then transposed.
    """
    (tc, tb), (oc, ob) = this_dims, other_dims
    nb = len(tb)
    t_free = [d for d in range(this_aval.ndim) if d not in tc and d not in tb]
    o_free = [d for d in range(other_aval.ndim) if d not in oc and d not in ob]
    if this_first:
        ct_other_free = tuple(range(nb + len(t_free), nb + len(t_free) + len(o_free)))
    else:
        ct_other_free = tuple(range(nb, nb + len(o_free)))
    if _aval(ct).dtype != other_aval.dtype:
        ct = lax.convert_element_type(ct, other_aval.dtype)
    paired = [tc[list(oc).index(o)] for o in sorted(oc)]
    # dot(ct, other)'s dims: batch (tb order), the remaining ct dims (this operand's free dims), then
    # other's remaining dims = its contracting dims in ascending order, each paired with one of tc.
    # dot(other, ct) puts those two groups the other way round; take whichever needs no transpose
    # (a weight gradient x^T @ ct comes out in place), else the first and transpose it.
    r_dims = list(tb) + t_free + paired
    swapped_dims = list(tb) + paired + t_free
    if swapped_dims == list(range(this_aval.ndim)) and r_dims != swapped_dims:
        dn = ((tuple(o_free), ct_other_free), (tuple(ob), tuple(range(nb))))
        return _cast(P.dot_general.bind(other, ct, dimension_numbers=dn, preferred_element_type=None),
                     this_aval.dtype)
    dn = ((ct_other_free, tuple(o_free)), (tuple(range(nb)), tuple(ob)))
    r = P.dot_general.bind(ct, other, dimension_numbers=dn, preferred_element_type=None)
    perm = [r_dims.index(d) for d in range(this_aval.ndim)]
    r = lax.transpose(r, perm)
    if _aval(r).dtype != this_aval.dtype:
        r = lax.convert_element_type(r, this_aval.dtype)
    return r


def _cast(x, dtype):
    return x if _aval(x).dtype == dtype else lax.convert_element_type(x, dtype)


def dot_general_transpose(ct, lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    if is_undefined(lhs) and is_undefined(rhs):
        raise TypeError("dot_general is linear in one operand at a time; both operands of this dot depend "
                        "on the differentiated inputs, so it cannot be transposed")
    (lc, rc), (lb, rb) = dimension_numbers
    if isinstance(ct, Zero):
        return _zero_cts([lhs, rhs])
    la, ra = _aval(lhs), _aval(rhs)
    if is_undefined(lhs):
        return [_dot_operand_ct(ct, rhs, la, ra, (lc, lb), (rc, rb), True), None]
    return [None, _dot_operand_ct(ct, lhs, ra, la, (rc, rb), (lc, lb), False)]


primitive_transposes[P.dot_general] = dot_general_transpose


del _p


# ----------------------------------------------------------------------------- effects


def _debug_callback_jvp(primals, tangents, **params):
    """A host callback sees the primal values; tangents pass it by (it has no outputs to differentiate)."""
    return P.debug_callback.bind(*primals, **params), []


primitive_jvps[P.debug_callback] = _debug_callback_jvp


def _pure_callback_jvp(primals, tangents, **params):
    raise ValueError("fnarray.pure_callback has no derivative (as jax.pure_callback): wrap the function that calls "
                     "it in fnarray.custom_jvp or fnarray.custom_vjp and give the derivative there")


primitive_jvps[P.pure_callback] = _pure_callback_jvp


# Convolutions have a module of their own (its JVP, transposes and batching rule fill the same tables).
from fnarray.transforms import conv_rules  # noqa: E402,F401
