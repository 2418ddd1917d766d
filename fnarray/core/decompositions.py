"""Decompositions: a primitive written once as a composite of other primitives (docs/design.md, "Families and
decompositions").

``DECOMPOSITIONS[primitive]`` holds a function over ``fnarray.core.lax`` that computes the primitive from
other primitives, and optionally a predicate saying where it may not be used (for instance a float32-accurate
formula is no substitute for float64). ``decompose(program, native)`` expands, before lowering, every equation
that ``native(eqn)`` says the backend cannot lower itself and that has an applicable
decomposition (sub-programs included, recursively, and decompositions that use decomposed primitives). The
numpy backend's implementation stays the semantics; a decomposition is tested against it on every backend.

Everything here is IR -> IR: it knows no backend; backends say what they lower natively
(``Backend.lowers_natively``) and ``fnarray.devices.partition`` runs the pass.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Callable, NamedTuple

import ml_dtypes
import numpy as np

from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.ir import Eqn, IRError, Literal, Params, Program, Var
from fnarray.core.subprograms import rewrite_equations

__all__ = ["Decomposition", "DECOMPOSITIONS", "defdecomposition", "decomposition_for", "decompose"]


class Decomposition(NamedTuple):
    """``fn(*operands, **params)`` returns the primitive's result(s) built from other primitives;
    ``unusable(*in_avals, **params)`` returns ``None`` where ``fn`` is exact enough, else the reason it is not."""

    fn: Callable
    unusable: Callable | None = None


DECOMPOSITIONS: dict = {}


def defdecomposition(prim, unusable=None):
    """Register the decorated function as ``prim``'s decomposition (one per primitive)."""
    def deco(fn):
        if prim in DECOMPOSITIONS:
            raise ValueError(f"{prim.name} has a decomposition already")
        DECOMPOSITIONS[prim] = Decomposition(fn, unusable)
        return fn
    return deco


def decomposition_for(eqn: Eqn) -> tuple[Decomposition | None, str | None]:
    """``(decomposition, None)`` if ``eqn`` may be decomposed, else ``(None, why not)``."""
    d = DECOMPOSITIONS.get(eqn.primitive)
    if d is None:
        return None, f"{eqn.primitive.name} has no decomposition"
    if d.unusable is not None:
        why = d.unusable(*[a.aval for a in eqn.inputs], **eqn.params)
        if why is not None:
            return None, why
    return d, None


_lock = threading.Lock()


@functools.lru_cache(maxsize=512)
def _traced(prim, params, in_avals, out_avals) -> Program:
    from fnarray.core.builder import trace_to_program
    fn = DECOMPOSITIONS[prim].fn

    def flat(*xs):
        outs = fn(*xs, **params)
        outs = list(outs) if prim.multiple_results else [outs]
        fixed = []
        for o, want in zip(outs, out_avals, strict=True):
            got = get_aval(o)
            if (got.shape, got.dtype) != (want.shape, want.dtype):
                raise IRError(f"the decomposition of {prim.name} returned {got.str_short()} where the primitive "
                              f"gives {want.str_short()}: fix {fn.__name__}")
            if got.weak_type != want.weak_type or isinstance(o, (int, float)):
                o = P.convert_element_type.bind(o, new_dtype=want.dtype, weak_type=want.weak_type)
            fixed.append(o)
        return fixed

    prog, consts = trace_to_program(flat, list(in_avals), debug_name=fn.__name__)
    if consts:
        raise IRError(f"{fn.__name__} captured {len(consts)} arrays; a decomposition may only use its operands "
                      "and scalar constants")
    return prog


def _expand(eqn: Eqn) -> list:
    """``eqn`` as the equations of its decomposition, over fresh variables, ending in ``eqn``'s outputs."""
    in_avals = tuple(a.aval for a in eqn.inputs)
    out_avals = tuple(o.aval for o in eqn.outputs)
    with _lock:  # the builder's trace state is per thread, but the cache is shared
        prog = _traced(eqn.primitive, eqn.params, in_avals, out_avals)
    env = dict(zip(prog.invars, eqn.inputs, strict=True))
    # Outputs of the composite that are computed by one of its equations take the original output variable.
    rename = {}
    for o, target in zip(prog.outvars, eqn.outputs, strict=True):
        if isinstance(o, Var) and o not in rename and o not in env:
            rename[o] = target
    out = []
    for e in prog.eqns:
        outs = tuple(rename.get(o) or Var(o.aval) for o in e.outputs)
        env.update(zip(e.outputs, outs, strict=True))
        out.append(Eqn(e.primitive, tuple(a if isinstance(a, Literal) else env[a] for a in e.inputs), e.params,
                       outs))
    for o, target in zip(prog.outvars, eqn.outputs, strict=True):
        if isinstance(o, Var) and rename.get(o) is target:
            continue
        # An operand returned as is, a literal, or one value returned twice: copy it into the output.
        src = o if isinstance(o, Literal) else env[o]
        if src.aval.shape != target.aval.shape:
            out.append(Eqn(P.broadcast_in_dim, (src,), Params(shape=target.aval.shape, broadcast_dimensions=()),
                           (target,)))
        else:
            out.append(Eqn(P.copy_p, (src,), Params(), (target,)))
    return out


def decompose(program: Program, native: Callable) -> Program:
    """``program`` with every equation that ``native(eqn)`` rejects and that has a usable decomposition
    expanded into it (in sub-programs too; a decomposition's own equations are expanded in turn). Returns
    ``program`` itself when nothing changes."""

    def expand(e):
        if e.primitive in DECOMPOSITIONS and not native(e) and decomposition_for(e)[0] is not None:
            return _expand(e)
        return None

    return rewrite_equations(program, expand, again=True)


# ------------------------------------------------------------------------------------------ special functions
# Each is written in fnarray.core.lax for the real floating dtypes, computing float16/bfloat16 in float32 (as
# the reference does). Their accuracy is tested against the numpy reference on every backend that uses them.


def _float32_only(x, **params):
    if x.dtype.itemsize > 4:
        return (f"the {x.dtype.name} form needs more accuracy than the float32 formula gives: "
                "it falls back where there is no native lowering")
    return None


def _horner(lax, x, coefs, dtype):
    """``coefs[0] + x * (coefs[1] + x * (...))``."""
    acc = dtype.type(coefs[-1])
    for c in coefs[-2::-1]:
        acc = lax.add(lax.mul(acc, x), dtype.type(c))
    return acc


# Least-squares (Chebyshev-weighted, relative) fits made for fnarray in float64:
# erf(z) / z as a polynomial in z**2 on [0, 0.5];
_ERFC_SMALL = (1.12837917, -0.376126386, 0.11283776, -0.026863338, 0.00520122611, -0.000770668437)
# erfc(z) * exp(z**2) as a polynomial in z - 1.5 on [0.5, 2.5];
_ERFC_MID = (0.321585415, -0.163622922, 0.076151122, -0.0329308304, 0.0133763507, -0.0051462351, 0.00189043086,
             -0.00066185962, 0.000215027594, -7.16026436e-05, 3.00058803e-05, -8.53909611e-06)
# z * erfc(z) * exp(z**2) as a polynomial in 1 / z**2 on [2.5, 10.5] (erfc(10.5) underflows float32).
_ERFC_LARGE = (0.564189564, -0.282090376, 0.422763512, -1.04157781, 3.29980446, -10.3784077, 24.0865349,
               -27.5850888)


def _exp_neg_square(lax, z, m):
    """``exp(-z**2)`` for ``0 <= z <= 10.5`` within about 2 float32 ulps, whatever the accuracy of the
    backend's ``exp`` at large arguments (MLX's and WGSL's lose 60-120 ulps near exp(-80)).

    ``z**2 = h*h + (z-h)(z+h)`` with ``h`` = z rounded down to 8 fraction bits (``h*h`` is exact), and
    ``h*h = k ln2 + r`` (Cody-Waite: ``ln2`` in two parts, ``k*LN2_HI`` exact), so that the result is
    ``2**-k * exp(-r - (z-h)(z+h))``: one ``exp`` of a small argument and a power of two made from its bits.
    """
    import numpy as np
    f = m.type
    h = lax.div(lax.floor(lax.mul(z, f(256))), f(256))
    hh = lax.mul(h, h)
    k = lax.floor(lax.add(lax.mul(hh, f(1 / math.log(2))), f(0.5)))
    r = lax.sub(lax.sub(hh, lax.mul(k, f(_LN2_HI))), lax.mul(k, f(_LN2_LO)))
    small = lax.exp(lax.neg(lax.add(r, lax.mul(lax.sub(z, h), lax.add(z, h)))))
    # 2**-k as two factors 2**-k1 * 2**-k2 (each a normal float32 for k <= 160), from their exponent bits.
    i32 = np.dtype(np.int32)
    ki = lax.convert_element_type(k, i32)
    k1 = lax.shift_right_arithmetic(ki, np.int32(1))
    k2 = lax.sub(ki, k1)

    def pow2_neg(n):
        return lax.bitcast_convert_type(lax.shift_left(lax.sub(np.int32(127), n), np.int32(23)), m)

    return lax.mul(lax.mul(small, pow2_neg(k1)), pow2_neg(k2))


_LN2_HI = 0.693145751953125  # ln 2 to 16 bits: k * _LN2_HI is exact in float32 for k < 2**8
_LN2_LO = 1.4286068202862268e-06  # ln 2 - _LN2_HI


def erfc_float32(x):
    """``erfc`` within a few float32 ulps (relative) on the whole line, from exp and polynomials.

    |x| < 0.5: ``1 - x * S(x**2)``. Above, ``erfc(z) = exp(-z**2) * g(z)`` with ``g`` a polynomial (in
    ``z - 1.5`` up to 2.5, in ``1/z**2`` beyond) and ``exp(-z**2)`` from ``_exp_neg_square``: a plain
    ``exp(-z*z)`` would lose ``z**2 * 2**-24`` relative (about 80 ulps at z = 9). Negative x: ``2 - erfc(-x)``.
    """
    import numpy as np

    from fnarray.core import lax
    d = get_aval(x).dtype
    m = np.dtype(np.float32)
    xm = lax.convert_element_type(x, m) if d != m else x
    f = m.type
    z = lax.abs(xm)
    small = lax.sub(f(1), lax.mul(xm, _horner(lax, lax.mul(xm, xm), _ERFC_SMALL, m)))
    mid = _horner(lax, lax.sub(z, f(1.5)), _ERFC_MID, m)
    zl = lax.min(lax.max(z, f(2.5)), f(10.5))
    large = lax.div(_horner(lax, lax.div(f(1), lax.mul(zl, zl)), _ERFC_LARGE, m), zl)
    is_mid = lax.lt(z, f(2.5))
    zc = lax.select(is_mid, z, zl)  # bounded (infinities give 0 through the clamp, not inf - inf)
    r = lax.mul(_exp_neg_square(lax, zc, m), lax.select(is_mid, mid, large))
    r = lax.select(lax.lt(xm, f(0)), lax.sub(f(2), r), r)
    r = lax.select(lax.lt(z, f(0.5)), small, r)
    return lax.convert_element_type(r, d) if d != m else r


defdecomposition(P.erfc, unusable=_float32_only)(erfc_float32)


def _math_dtype(lax, x):
    """The dtype special functions compute in: float32 for float16/bfloat16 (as the reference), else x's."""
    import numpy as np
    d = get_aval(x).dtype
    return d, (np.dtype(np.float32) if d.itemsize < 4 else d)


def _in_dtype(lax, x, m):
    return lax.convert_element_type(x, m) if get_aval(x).dtype != m else x


def _where(lax, pred, a, b):
    """``lax.select`` with rank-0 cases broadcast to the predicate's shape."""
    shape = get_aval(pred).shape

    def full(v):
        return lax.broadcast_in_dim(v, shape, ()) if get_aval(v).shape != shape else v
    return lax.select(pred, full(a), full(b))


@defdecomposition(P.digamma)
def digamma_composite(x):
    """``digamma``: reflection below 1/2 (``- pi / tan(pi x)``, the argument reduced to the nearest integer),
    six recurrence steps up to >= 6, then the asymptotic series; -inf at +0, +inf at -0 and NaN at the negative
    integers (as the reference)."""
    import numpy as np

    from fnarray.core import lax
    d, m = _math_dtype(lax, x)
    f = m.type
    x = _in_dtype(lax, x, m)
    reflect = lax.lt(x, f(0.5))
    z = _where(lax, reflect, lax.sub(f(1), x), x)
    acc = f(0)
    for _ in range(6):
        small = lax.lt(z, f(6))
        acc = _where(lax, small, lax.sub(acc, lax.div(f(1), z)), acc)
        z = _where(lax, small, lax.add(z, f(1)), z)
    inv = lax.div(f(1), z)
    inv2 = lax.mul(inv, inv)
    t = lax.sub(f(1 / 240), lax.mul(inv2, f(1 / 132)))
    t = lax.sub(f(1 / 252), lax.mul(inv2, t))
    t = lax.sub(f(1 / 120), lax.mul(inv2, t))
    t = lax.sub(f(1 / 12), lax.mul(inv2, t))
    r = lax.add(acc, lax.sub(lax.sub(lax.log(z), lax.mul(f(0.5), inv)), lax.mul(inv2, t)))
    pi = f(math.pi)
    r = _where(lax, reflect, lax.sub(r, lax.div(pi, lax.tan(lax.mul(pi, lax.sub(x, lax.round(x)))))), r)
    pole = lax.bitwise_and(lax.lt(x, f(0)), lax.eq(x, lax.floor(x)))
    r = _where(lax, pole, f(np.nan), r)
    # -1/x is the pole at zero with its sign (a backend that flushes a subnormal x gets the same).
    r = _where(lax, lax.eq(x, f(0)), lax.div(f(-1), x), r)
    return _in_dtype(lax, r, d)


@defdecomposition(P.lgamma)
def lgamma_composite(x):
    """``lgamma``: for ``z >= 1/2`` eight steps of ``Gamma(z+1) = z Gamma(z)`` up to >= 8, then Stirling's
    series; below, the reflection ``log(pi / |sin(pi x)|) - lgamma(1 - x)`` with ``sin`` of the argument
    reduced to the nearest integer; +inf at the poles and at +inf (as the reference)."""
    import numpy as np

    from fnarray.core import lax
    d, m = _math_dtype(lax, x)
    f = m.type
    x = _in_dtype(lax, x, m)
    reflect = lax.lt(x, f(0.5))
    z = _where(lax, reflect, lax.sub(f(1), x), x)
    prod = f(1)
    for _ in range(8):
        small = lax.lt(z, f(8))
        prod = _where(lax, small, lax.mul(prod, z), prod)
        z = _where(lax, small, lax.add(z, f(1)), z)
    inv = lax.div(f(1), z)
    inv2 = lax.mul(inv, inv)
    series = lax.mul(inv, lax.sub(f(1 / 12), lax.mul(inv2, lax.sub(f(1 / 360), lax.mul(inv2, f(1 / 1260))))))
    pos = lax.sub(lax.add(lax.sub(lax.mul(lax.sub(z, f(0.5)), lax.log(z)), z),
                          lax.add(f(0.5 * math.log(2 * math.pi)), series)), lax.log(prod))
    pi = f(math.pi)
    s = lax.abs(lax.sin(lax.mul(pi, lax.sub(x, lax.round(x)))))
    r = _where(lax, reflect, lax.sub(lax.log(lax.div(pi, s)), pos), pos)
    pole = lax.bitwise_or(lax.bitwise_and(reflect, lax.eq(x, lax.floor(x))), lax.eq(x, f(np.inf)))
    return _in_dtype(lax, _where(lax, pole, f(np.inf), r), d)


_ERF_INV_SMALL = (1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
                  -3.5233877e-06, 3.43273939e-07, 2.81022636e-08)
_ERF_INV_LARGE = (2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
                  0.00134934322, 0.000100950558, -0.000200214257)


@defdecomposition(P.erf_inv)
def erf_inv_composite(y):
    """``erf_inv``: Giles (2010), "Approximating the erfinv function" (its single-precision branches), then one
    Newton step on ``erf``; +-1 give +-inf and ``|y| > 1`` NaN (as the reference)."""
    import numpy as np

    from fnarray.core import lax
    d, m = _math_dtype(lax, y)
    f = m.type
    y = _in_dtype(lax, y, m)
    w = lax.neg(lax.log(lax.mul(lax.sub(f(1), y), lax.add(f(1), y))))
    p1 = _horner(lax, lax.sub(w, f(2.5)), _ERF_INV_SMALL, m)
    p2 = _horner(lax, lax.sub(lax.sqrt(lax.max(w, f(5))), f(3)), _ERF_INV_LARGE, m)
    x = lax.mul(lax.select(lax.lt(w, f(5)), p1, p2), y)
    # One Newton step: x -= (erf(x) - y) / (2/sqrt(pi) * exp(-x^2)).
    slope = lax.mul(f(2 / math.sqrt(math.pi)), lax.exp(lax.neg(lax.mul(x, x))))
    x = lax.sub(x, lax.div(lax.sub(lax.erf(x), y), slope))
    x = _where(lax, lax.eq(y, f(1)), f(np.inf), _where(lax, lax.eq(y, f(-1)), f(-np.inf), x))
    return _in_dtype(lax, _where(lax, lax.gt(lax.abs(y), f(1)), f(np.nan), x), d)


@defdecomposition(P.log2)
def log2_composite(x):
    """``log2`` as ``log(x) / log(2)`` (for backends without a base-2 logarithm: XLA has none); within about
    2 ulps, but not exact at every power of two."""
    from fnarray.core import lax
    d, m = _math_dtype(lax, x)
    r = lax.mul(lax.log(_in_dtype(lax, x, m)), m.type(1 / math.log(2)))
    return _in_dtype(lax, r, d)


# ------------------------------------------------------------------------------- low-precision accumulations
# A float16 sum accumulated in float16 stalls once its terms fall below half an ulp (512 + 0.25 is 512): a dot
# of 6,001 products 0.25 gave 512 instead of 1500 on webgpu:0. The reference (as XLA) accumulates float16 and
# bfloat16 in float32; a backend whose kernels accumulate in the operand dtype says that these equations are
# not native (``accumulates_in_low_precision``) and gets them computed in float32 here.

LOW_PRECISION = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})
ACCUMULATIONS = (P.dot_general, P.reduce_sum, P.reduce_prod, P.cumsum, P.cumprod, P.cumlogsumexp)


def accumulates_in_low_precision(eqn: Eqn) -> bool:
    """Whether ``eqn`` sums or multiplies many float16/bfloat16 terms (a product, reduction or scan)."""
    return eqn.primitive in ACCUMULATIONS and any(a.aval.dtype in LOW_PRECISION for a in eqn.inputs)


def _only_low_precision(*avals, **params):
    if any(a.dtype in LOW_PRECISION for a in avals):
        return None
    return "only float16/bfloat16 accumulations are rewritten (into float32)"


def _in_float32(prim):
    def composite(*xs, **params):
        want = prim.abstract_eval(*[get_aval(x) for x in xs], **params)
        f32 = np.dtype(np.float32)
        ys = [P.convert_element_type.bind(x, new_dtype=f32, weak_type=False) if get_aval(x).dtype in LOW_PRECISION
              else x for x in xs]
        if "preferred_element_type" in params:
            params = dict(params, preferred_element_type=None)
        out = prim.bind(*ys, **params)
        return P.convert_element_type.bind(out, new_dtype=want.dtype, weak_type=want.weak_type)
    composite.__name__ = f"{prim.name}_in_float32"
    return composite


for _p in ACCUMULATIONS:
    defdecomposition(_p, _only_low_precision)(_in_float32(_p))
