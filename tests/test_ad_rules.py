"""JVP and transpose rules of the first-order primitives (``fnarray.transforms.ad_rules``).

Every JVP rule is called directly, eagerly, and compared with central finite
differences of ``prim.bind`` in float64 (a few cases in float32 against float64
finite differences); the same rule is then traced under ``jit``, verified and
run, and must agree with the eager result. Every transpose rule is checked with
the dot-product identity ``<ct, L(t)> == <L^T(ct), t>`` (the real pairing
``Re(sum(a * b))``, JAX's convention for complex values). The conventions at
ties are checked against values computed here with NumPy, and against JAX.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from helpers import check_traced

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import linalg as LA
from fnarray.core import primitives as P
from fnarray.core import spmd as _spmd
from fnarray.core.fft import FftType, fft_p
from fnarray.core import windows as W
from fnarray.transforms import ad_rules
from fnarray.transforms.ad_tables import UndefinedPrimal, Zero, primitive_jvps, primitive_transposes, tangent_aval

F64, F32, C128, I32 = np.float64, np.float32, np.complex128, np.int32


def _rng(name):
    """A generator seeded from the case name (stable across runs, unlike hash())."""
    return np.random.default_rng(sum(map(ord, name)) * 7919)


def _inexact(a) -> bool:
    return np.asarray(a).dtype.kind in "fc"


def _rand_like(rng, a):
    a = np.asarray(a)
    t = rng.standard_normal(a.shape)
    if a.dtype.kind == "c":
        t = t + 1j * rng.standard_normal(a.shape)
    return t.astype(a.dtype)


def _aval(a):
    a = np.asarray(a)
    return fa.ShapedArray(a.shape, np.dtype(a.dtype))


# ----------------------------------------------------------------------------- JVP cases


class Case(NamedTuple):
    name: str
    prim: P.Primitive
    params: dict
    make: Callable            # rng -> list of NumPy inputs
    h: float = 1e-6           # finite-difference step (linear functions take larger ones)
    rtol: float = 1e-5
    hermitian: bool = False   # Hermitian tangents (cholesky, eigh read one triangle; their rules, as JAX's,
                              # take the tangent of the whole Hermitian matrix)


def u(lo, hi, shape=(3, 4), dtype=F64):
    return lambda rng: rng.uniform(lo, hi, shape).astype(dtype)


def away(lo, hi, gap, shape=(3, 4)):
    """Uniform in [lo, hi] with |x| >= gap."""
    def f(rng):
        x = rng.uniform(gap, max(abs(lo), abs(hi)), shape)
        return np.where(rng.random(shape) < 0.5, -x, x).clip(lo, hi)
    return f


def cplx(shape=(3, 4), scale=1.0):
    return lambda rng: (scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))).astype(C128)


def args(*makers):
    return lambda rng: [m(rng) for m in makers]


def fixed(*values):
    return lambda rng: [np.asarray(v) for v in values]


def distinct(shape, dtype=F64):
    """Values with no ties (a permutation of well separated numbers)."""
    def f(rng):
        n = math.prod(shape)
        return (rng.permutation(n) * 0.37 - n * 0.1 + rng.uniform(0, 0.1, n)).reshape(shape).astype(dtype)
    return f


def ints(lo, hi, shape):
    return lambda rng: rng.integers(lo, hi, shape, endpoint=True).astype(I32)


def _i(*v):
    if len(v) == 1 and np.ndim(v[0]) == 0:
        return np.int32(v[0])
    return np.asarray(v, I32)


UNARY = [
    ("exp", P.exp, u(-2, 2)), ("exp2", P.exp2, u(-2, 2)), ("log", P.log, u(0.2, 3)),
    ("log2", P.log2, u(0.1, 4)), ("log10", P.log10, u(0.1, 4)),
    ("log1p", P.log1p, u(-0.8, 3)), ("expm1", P.expm1, u(-2, 2)), ("tanh", P.tanh, u(-2, 2)),
    ("logistic", P.logistic, u(-4, 4)), ("sin", P.sin, u(-3, 3)), ("cos", P.cos, u(-3, 3)),
    ("tan", P.tan, u(-1.2, 1.2)), ("asin", P.asin, u(-0.9, 0.9)), ("acos", P.acos, u(-0.9, 0.9)),
    ("atan", P.atan, u(-3, 3)), ("sinh", P.sinh, u(-2, 2)), ("cosh", P.cosh, u(-2, 2)),
    ("asinh", P.asinh, u(-3, 3)), ("acosh", P.acosh, u(1.1, 4)), ("atanh", P.atanh, u(-0.9, 0.9)),
    ("sqrt", P.sqrt, u(0.1, 4)), ("rsqrt", P.rsqrt, u(0.1, 4)), ("cbrt", P.cbrt, away(-4, 4, 0.2)),
    ("erf", P.erf, u(-2, 2)), ("erfc", P.erfc, u(-2, 4)), ("erf_inv", P.erf_inv, u(-0.9, 0.9)),
    ("lgamma", P.lgamma, u(0.1, 6)),
    ("lgamma_neg", P.lgamma, lambda rng: -rng.integers(0, 4, (3, 4)) - rng.uniform(0.1, 0.9, (3, 4))),
    ("digamma", P.digamma, u(0.05, 30)),
    ("digamma_neg", P.digamma, lambda rng: -rng.integers(0, 4, (3, 4)) - rng.uniform(0.1, 0.9, (3, 4))),
    ("abs", P.abs_p, away(-3, 3, 0.1)), ("neg", P.neg, u(-3, 3)), ("copy", P.copy_p, u(-3, 3)),
    # holomorphic functions of complex values, and |z|
    ("exp_c", P.exp, cplx()), ("log_c", P.log, cplx()), ("sin_c", P.sin, cplx()), ("sqrt_c", P.sqrt, cplx()),
    ("tanh_c", P.tanh, cplx(scale=0.5)), ("logistic_c", P.logistic, cplx(scale=0.5)),
    ("atan_c", P.atan, cplx(scale=0.5)), ("rsqrt_c", P.rsqrt, cplx()), ("abs_c", P.abs_p, cplx()),
    ("real", P.real, cplx()), ("imag", P.imag, cplx()), ("conj", P.conj, cplx()),
]

def _conv_params(strides, padding, lhs_dil, rhs_dil, dn, g=1, b=1):
    from fnarray.core.conv import ConvDimensionNumbers
    return {"window_strides": strides, "padding": padding, "lhs_dilation": lhs_dil, "rhs_dilation": rhs_dil,
            "dimension_numbers": ConvDimensionNumbers(*dn), "feature_group_count": g, "batch_group_count": b,
            "precision": None, "preferred_element_type": None}


_NCHW = ((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
_NHWC = ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
from fnarray.core.prng import threefry2x32_p  # noqa: E402

_CONV = P.PRIMITIVES["conv_general_dilated"]   # fnarray.core.conv (tests/test_conv.py has the full table)

CASES = [Case(n, p, {}, args(m)) for n, p, m in UNARY]

CASES += [Case(f"integer_pow_{y}", P.integer_pow, {"y": y}, args(away(-2, 2, 0.3))) for y in (1, 2, 3, -2)]
CASES += [Case("name", P.name_p, {"name": "h"}, args(u(-2, 2)))]   # checkpoint_name's identity


def _one_device_sharding():
    from fnarray.testing.cases import _one_device_sharding as s
    return s()


CASES += [Case("sharding_constraint", _spmd.sharding_constraint_p, {"sharding": _one_device_sharding()},
               args(u(-3, 3, (3, 4))))]

CASES += [
    Case("convert_f64_c128", P.convert_element_type, {"new_dtype": dtypes.complex128, "weak_type": False},
         args(u(-2, 2))),
    Case("convert_c128_f64", P.convert_element_type, {"new_dtype": dtypes.float64, "weak_type": False},
         args(cplx())),
    Case("convert_f32_f64", P.convert_element_type, {"new_dtype": dtypes.float64, "weak_type": False},
         args(u(-2, 2, dtype=F32)), h=0.5, rtol=1e-5),
    Case("convert_f64_f32", P.convert_element_type, {"new_dtype": dtypes.float32, "weak_type": False},
         args(u(-2, 2)), h=1e-1, rtol=1e-5),
]

# binary (with rank-0 operands meeting full-shape ones)
CASES += [
    Case("add", P.add, {}, args(u(-2, 2), u(-2, 2))),
    Case("add_scalar_x", P.add, {}, args(u(-2, 2, ()), u(-2, 2))),
    Case("sub", P.sub, {}, args(u(-2, 2), u(-2, 2))),
    Case("sub_scalar_y", P.sub, {}, args(u(-2, 2), u(-2, 2, ()))),
    Case("mul", P.mul, {}, args(u(-2, 2), u(-2, 2))),
    Case("mul_scalar_x", P.mul, {}, args(u(-2, 2, ()), u(-2, 2))),
    Case("mul_c", P.mul, {}, args(cplx(), cplx())),
    Case("div", P.div, {}, args(u(-2, 2), away(-2, 2, 0.5))),
    Case("div_scalar_y", P.div, {}, args(u(-2, 2), away(-2, 2, 0.5, ()))),
    Case("div_scalar_x", P.div, {}, args(u(-2, 2, ()), away(-2, 2, 0.5))),
    Case("rem", P.rem, {}, lambda rng: [np.array([[5.3, -5.3, 2.2, -0.7]] * 3) + rng.uniform(0, .1, (3, 4)),
                                        np.array([[2.0, 2.0, -0.9, 0.5]] * 3) + rng.uniform(0, .1, (3, 4))]),
    Case("pow", P.pow_p, {}, args(u(0.3, 3), u(-2, 2))),
    Case("pow_scalar_y", P.pow_p, {}, args(u(0.3, 3), u(-2, 2, ()))),
    Case("pow_scalar_x", P.pow_p, {}, args(u(0.3, 3, ()), u(-2, 2))),
    Case("pow_c", P.pow_p, {}, args(cplx(), cplx(scale=0.5))),
    Case("max", P.max_p, {}, args(distinct((3, 4)), lambda rng: distinct((3, 4))(rng) + 0.05)),
    Case("min", P.min_p, {}, args(distinct((3, 4)), lambda rng: distinct((3, 4))(rng) + 0.05)),
    Case("max_scalar", P.max_p, {}, args(u(-2, 2), lambda rng: np.float64(0.123))),
    Case("atan2", P.atan2, {}, args(u(-2, 2), u(-2, 2))),
    Case("complex", P.complex_p, {}, args(u(-2, 2), u(-2, 2))),
    Case("complex_scalar_y", P.complex_p, {}, args(u(-2, 2), u(-2, 2, ()))),
]

CASES += [
    Case("select_n_bool", P.select_n, {}, lambda rng: [rng.random((3, 4)) < 0.5, u(-2, 2)(rng), u(-2, 2)(rng)]),
    Case("select_n_int", P.select_n, {}, lambda rng: [ints(-1, 3, (3, 4))(rng), u(-2, 2)(rng), u(-2, 2)(rng),
                                                      u(-2, 2)(rng)]),
    Case("select_n_scalar_pred", P.select_n, {}, lambda rng: [np.bool_(True), u(-2, 2)(rng), u(-2, 2)(rng)]),
    Case("broadcast_in_dim", P.broadcast_in_dim, {"shape": (2, 3, 4), "broadcast_dimensions": (0, 2)},
         args(u(-2, 2, (2, 1))), h=1e-2),
    Case("broadcast_scalar", P.broadcast_in_dim, {"shape": (2, 3), "broadcast_dimensions": ()},
         args(u(-2, 2, ())), h=1e-2),
    Case("reshape", P.reshape, {"new_sizes": (4, 3)}, args(u(-2, 2)), h=1e-2),
    Case("transpose", P.transpose, {"permutation": (2, 0, 1)}, args(u(-2, 2, (2, 3, 4))), h=1e-2),
    Case("rev", P.rev, {"dimensions": (0, 1)}, args(u(-2, 2)), h=1e-2),
    Case("slice", P.slice_p, {"start_indices": (1, 0), "limit_indices": (3, 4), "strides": (1, 2)},
         args(u(-2, 2)), h=1e-2),
    Case("pad", P.pad, {"padding_config": ((1, -1, 1), (-1, 2, 0))}, args(u(-2, 2), u(-2, 2, ())), h=1e-2),
    Case("concatenate", P.concatenate, {"dimension": 1}, args(u(-2, 2, (3, 2)), u(-2, 2), u(-2, 2, (3, 1))),
         h=1e-2),
    Case("dynamic_slice", P.dynamic_slice, {"slice_sizes": (2, 2)},
         lambda rng: [u(-2, 2)(rng), _i(1), _i(7)], h=1e-2),   # the second start is clamped
    Case("dynamic_update_slice", P.dynamic_update_slice, {},
         lambda rng: [u(-2, 2)(rng), u(-2, 2, (2, 3))(rng), _i(-1), _i(2)], h=1e-2),
    Case("gather", P.gather, {"axes": (0,)},
         lambda rng: [u(-2, 2)(rng), _i([2], [0], [2], [5], [-1])], h=1e-2),   # repeats, clamped
    Case("gather_2axes", P.gather, {"axes": (2, 0)},
         lambda rng: [u(-2, 2, (3, 2, 4))(rng), _i([[1, 2], [3, 0]], [[1, 2], [0, 9]])], h=1e-2),
    Case("scatter_add", P.scatter_add, {"axes": (0,)},
         lambda rng: [u(-2, 2)(rng), _i([2], [0], [2], [5], [-1]), u(-2, 2, (5, 4))(rng)], h=1e-2),
    Case("scatter", P.scatter, {"axes": (0,)},
         lambda rng: [u(-2, 2)(rng), _i([2], [0], [2], [5]), u(-2, 2, (4, 4))(rng)], h=1e-2),
    Case("scatter_2axes", P.scatter, {"axes": (1, 0)},
         lambda rng: [u(-2, 2)(rng), _i([1, 2], [3, 0], [1, 2], [0, 9]), u(-2, 2, (4,))(rng)], h=1e-2),
    Case("scatter_mul", P.scatter_mul, {"axes": (0,)},
         lambda rng: [u(-2, 2)(rng), _i([2], [0], [2], [5], [1], [1], [2]),
                      np.concatenate([u(-2, 2, (5, 4))(rng), [[0.0, 0.0, 1.5, 0.0]], [[0.0, 1.0, 0.0, 0.0]]])]),
    Case("scatter_min", P.scatter_min, {"axes": (0,)},
         lambda rng: [distinct((3, 4))(rng), _i([2], [0], [2], [5]), distinct((4, 4))(rng) + 0.013]),
    Case("scatter_max", P.scatter_max, {"axes": (1,)},
         lambda rng: [distinct((3, 4))(rng), _i([3], [0], [3], [-2]), distinct((4, 3))(rng) + 0.013]),
    Case("reduce_sum", P.reduce_sum, {"axes": (0, 2)}, args(u(-2, 2, (2, 3, 4))), h=1e-2),
    Case("reduce_prod", P.reduce_prod, {"axes": (1,)}, args(u(-2, 2))),
    Case("reduce_prod_zeros", P.reduce_prod, {"axes": (0, 2)},
         lambda rng: [np.where(np.arange(24).reshape(2, 3, 4) % 7 == 0, 0.0, u(-2, 2, (2, 3, 4))(rng))]),
    Case("reduce_max", P.reduce_max, {"axes": (1,)}, args(distinct((3, 4)))),
    Case("reduce_min", P.reduce_min, {"axes": (0, 1)}, args(distinct((3, 4)))),
    Case("cumsum", P.cumsum, {"axis": 1}, args(u(-2, 2)), h=1e-2),
    Case("cumsum_rev", P.cumsum, {"axis": 0, "reverse": True}, args(u(-2, 2)), h=1e-2),
    Case("cumprod", P.cumprod, {"axis": 1}, args(u(-2, 2))),
    Case("cumprod_zeros", P.cumprod, {"axis": 1, "reverse": True},
         fixed([[1.5, 0.0, 2.0, -0.5, 0.0, 3.0], [0.5, 2.0, -1.0, 0.0, 0.7, 1.1]])),
    Case("cummax", P.cummax, {"axis": 1}, args(distinct((3, 5)))),
    Case("cummax_rev", P.cummax, {"axis": 0, "reverse": True}, args(distinct((4, 3)))),
    Case("cummin", P.cummin, {"axis": 1}, args(distinct((3, 5)))),
    Case("cumlogsumexp", P.cumlogsumexp, {"axis": 1}, args(u(-3, 3, (3, 7)))),
    Case("cumlogsumexp_rev", P.cumlogsumexp, {"axis": 0, "reverse": True}, args(u(-3, 3, (5, 2)))),
    # a range where cumsum(exp(x)) overflows float64
    Case("cumlogsumexp_wide", P.cumlogsumexp, {"axis": 0}, fixed([-800.0, 0.0, 750.0, 760.0, -5.0])),
    Case("sort", P.sort, {"dimension": 1, "is_stable": True, "num_keys": 1}, args(distinct((3, 5)))),
    Case("sort_multi", P.sort, {"dimension": 0, "is_stable": True, "num_keys": 1},
         lambda rng: [distinct((4, 3))(rng), u(-2, 2, (4, 3))(rng), ints(0, 9, (4, 3))(rng)]),
    Case("sort_2keys", P.sort, {"dimension": 0, "is_stable": True, "num_keys": 2},
         lambda rng: [_i([1, 2], [1, 0], [0, 2]), distinct((3, 2))(rng), u(-2, 2, (3, 2))(rng)]),
    Case("dot_matmul", P.dot_general, {"dimension_numbers": (((1,), (0,)), ((), ())),
                                       "preferred_element_type": None}, args(u(-2, 2, (3, 4)), u(-2, 2, (4, 5)))),
    Case("dot_batch", P.dot_general, {"dimension_numbers": (((2, 0), (3, 0)), ((1,), (2,))),
                                      "preferred_element_type": None},
         args(u(-2, 2, (2, 3, 4, 5)), u(-2, 2, (2, 6, 3, 4)))),
    Case("dot_c", P.dot_general, {"dimension_numbers": (((0,), (1,)), ((), ())), "preferred_element_type": None},
         args(cplx((3, 2)), cplx((4, 3)))),
]

# window reductions and the max/min gradients' selections (fnarray.core.windows); more in tests/test_windows.py
_WIN = {"window_dimensions": (2, 3), "window_strides": (2, 1), "padding": ((1, 0), (-1, 2)),
        "base_dilation": (1, 2), "window_dilation": (2, 1)}
CASES += [
    Case("reduce_window_sum", W.reduce_window_sum_p, _WIN, args(u(-2, 2, (5, 4))), h=1e-2),
    Case("reduce_window_max", W.reduce_window_max_p, _WIN, args(distinct((5, 4)))),
    Case("reduce_window_min", W.reduce_window_min_p, _WIN, args(distinct((5, 4)))),
    Case("select_and_gather_add", W.select_and_gather_add_p, {"select_prim": P.ge, **_WIN},
         args(u(-2, 2, (5, 4)), distinct((5, 4))), h=1e-2),
    Case("select_and_scatter_add", W.select_and_scatter_add_p, {"select_prim": P.le, **_WIN},
         args(u(-2, 2, (2, 6)), distinct((5, 4))), h=1e-2),
]
CASES += [
    Case("conv_strided_dilated", _CONV, _conv_params((2, 1), ((1, -1), (0, 1)), (1, 2), (2, 1), _NCHW),
         args(u(-1, 1, (2, 3, 5, 4)), u(-1, 1, (4, 3, 2, 2)))),
    Case("conv_groups_nhwc", _CONV, _conv_params((1, 1), ((0, 0), (1, 1)), (1, 1), (1, 1), _NHWC, g=2),
         args(u(-1, 1, (2, 4, 5, 4)), u(-1, 1, (3, 2, 2, 4)))),
    Case("conv_batch_groups", _CONV, _conv_params((1,), ((1, 0),), (1,), (1,), ((0, 1, 2),) * 3, b=2),
         args(u(-1, 1, (4, 2, 6)), u(-1, 1, (4, 2, 3)))),
]


def _spd(n, batch=()):
    def f(rng):
        a = rng.standard_normal(batch + (n, n))
        return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
    return f


def _lower(n, batch=()):
    return lambda rng: np.tril(rng.standard_normal(batch + (n, n))) + 3 * np.eye(n)


_TS = dict(left_side=True, lower=True, transpose_a=False, conjugate_a=False, unit_diagonal=False)
# The linear-algebra primitives (fnarray/core/linalg.py; more cases, and JAX as a second reference, in
# tests/test_linalg.py).
CASES += [
    Case("cholesky", LA.cholesky_p, {}, args(_spd(3, (2,))), hermitian=True),
    Case("triangular_solve", LA.triangular_solve_p, _TS, args(_lower(3, (2,)), u(-1, 1, (2, 3, 2)))),
    Case("triangular_solve_right_t", LA.triangular_solve_p, dict(_TS, left_side=False, transpose_a=True),
         args(_lower(3), u(-1, 1, (2, 3)))),
    Case("lu", LA.lu_p, {}, args(u(-1, 1, (2, 3, 3)))),
    Case("qr", LA.qr_p, {"full_matrices": False}, args(u(-1, 1, (4, 3)))),
    Case("eigh", LA.eigh_p, {"lower": True}, args(_spd(3)), hermitian=True),
    Case("svd", LA.svd_p, {"full_matrices": False, "compute_uv": True}, args(u(-1, 1, (3, 2)))),
]

# The fft primitive (fnarray.core.fft): each type, odd and even lengths, 2-D; linear, so exact to rounding.
_FFT = [("fft_c2c", FftType.FFT, (5,), cplx((2, 5))), ("fft_ifft_2d", FftType.IFFT, (3, 4), cplx((3, 4))),
        ("fft_rfft_even", FftType.RFFT, (6,), u(-1, 1, (2, 6))), ("fft_rfft_odd_2d", FftType.RFFT, (3, 5),
                                                                   u(-1, 1, (3, 5))),
        ("fft_irfft_even", FftType.IRFFT, (6,), cplx((2, 4))), ("fft_irfft_odd_2d", FftType.IRFFT, (3, 5),
                                                                   cplx((3, 3)))]
CASES += [Case(n, fft_p, {"fft_type": t, "fft_lengths": k}, args(m), h=1e-2) for n, t, k, m in _FFT]

# float32 rules against float64 finite differences
CASES32 = [
    Case("exp_f32", P.exp, {}, args(u(-2, 2, dtype=F32))),
    Case("tan_f32", P.tan, {}, args(u(-1, 1, dtype=F32))),
    Case("digamma_f32", P.digamma, {}, args(u(0.3, 8, dtype=F32))),
    Case("mul_f32", P.mul, {}, args(u(-2, 2, dtype=F32), u(-2, 2, dtype=F32))),
    Case("pow_f32", P.pow_p, {}, args(u(0.5, 2, dtype=F32), u(-1, 1, dtype=F32))),
    Case("reduce_prod_f32", P.reduce_prod, {"axes": (0,)}, args(u(0.5, 1.5, dtype=F32))),
    Case("cumlogsumexp_f32", P.cumlogsumexp, {"axis": 1}, args(u(-30, 30, (2, 9), dtype=F32))),
    Case("dot_f32", P.dot_general, {"dimension_numbers": (((1,), (2,)), ((0,), (0,))),
                                    "preferred_element_type": None},
         args(u(-1, 1, (2, 3, 4), dtype=F32), u(-1, 1, (2, 5, 3), dtype=F32))),
]

# outputs that carry no tangent; inputs may be float (tangents given) or int/bool
ZERO_CASES = [
    Case("sign", P.sign, {}, args(u(-2, 2))), Case("sign_c", P.sign, {}, args(cplx())),
    Case("floor", P.floor, {}, args(u(-2, 2))), Case("ceil", P.ceil, {}, args(u(-2, 2))),
    Case("round", P.round_p, {}, args(u(-2, 2))), Case("is_finite", P.is_finite, {}, args(u(-2, 2))),
    Case("stop_gradient", P.stop_gradient, {}, args(u(-2, 2))),
    Case("nextafter", P.nextafter, {}, args(u(-2, 2), u(-2, 2))),
    Case("bitcast_f2i", P.bitcast_convert_type, {"new_dtype": dtypes.int64}, args(u(-2, 2))),
    Case("bitcast_i2f", P.bitcast_convert_type, {"new_dtype": dtypes.float32}, args(ints(0, 99, (3,)))),
    Case("iota", P.iota, {"dtype": dtypes.float32, "shape": (2, 3), "dimension": 1}, lambda rng: []),
    Case("convert_f2i", P.convert_element_type, {"new_dtype": dtypes.int32, "weak_type": False},
         args(u(-2, 2))),
    Case("convert_i2f", P.convert_element_type, {"new_dtype": dtypes.float64, "weak_type": False},
         args(ints(-3, 3, (3,)))),
    Case("argmax", P.argmax, {"axes": (1,), "index_dtype": dtypes.int32}, args(u(-2, 2))),
    Case("argmin", P.argmin, {"axes": (0,), "index_dtype": dtypes.int32}, args(u(-2, 2))),
    Case("add_int", P.add, {}, args(ints(-3, 3, (3,)), ints(-3, 3, (3,)))),
    Case("max_int", P.max_p, {}, args(ints(-3, 3, (3,)), ints(-3, 3, (3,)))),
    Case("neg_int", P.neg, {}, args(ints(-3, 3, (3,)))),
    Case("abs_int", P.abs_p, {}, args(ints(-3, 3, (3,)))),
    Case("mul_int", P.mul, {}, args(ints(-3, 3, (3,)), ints(-3, 3, (3,)))),
    Case("div_int", P.div, {}, args(ints(-3, 3, (3,)), ints(1, 3, (3,)))),
    Case("rem_int", P.rem, {}, args(ints(-3, 3, (3,)), ints(1, 3, (3,)))),
    Case("integer_pow_int", P.integer_pow, {"y": 3}, args(ints(-3, 3, (3,)))),
    Case("integer_pow_0", P.integer_pow, {"y": 0}, args(u(-2, 2))),
    Case("select_n_int_cases", P.select_n, {}, lambda rng: [rng.random(3) < .5, ints(0, 3, (3,))(rng),
                                                            ints(0, 3, (3,))(rng)]),
    Case("reduce_sum_int", P.reduce_sum, {"axes": (0,)}, args(ints(-3, 3, (3,)))),
    Case("reduce_max_int", P.reduce_max, {"axes": (0,)}, args(ints(-3, 3, (3,)))),
    Case("cumsum_int", P.cumsum, {"axis": 0}, args(ints(-3, 3, (3,)))),
    Case("sort_int", P.sort, {"dimension": 0, "is_stable": True, "num_keys": 1}, args(ints(-3, 3, (3,)))),
    Case("dot_int", P.dot_general, {"dimension_numbers": (((0,), (0,)), ((), ())), "preferred_element_type": None},
         args(ints(-3, 3, (3,)), ints(-3, 3, (3,)))),
    Case("reduce_and", P.reduce_and, {"axes": (0,)}, lambda rng: [rng.random(3) < .5]),
    Case("reduce_or", P.reduce_or, {"axes": (0,)}, lambda rng: [rng.random(3) < .5]),
    Case("not", P.not_p, {}, args(ints(-3, 3, (3,)))),
    Case("population_count", P.population_count, {}, args(ints(0, 99, (3,)))),
    Case("threefry2x32", threefry2x32_p, {},
         lambda rng: [np.uint32(7), np.uint32(9), np.zeros(3, np.uint32), np.arange(3, dtype=np.uint32)]),
] + [Case(p.name, p, {}, args(u(-2, 2), u(-2, 2))) for p in (P.eq, P.ne, P.lt, P.le, P.gt, P.ge)] + [
    Case(p.name, p, {}, args(ints(0, 7, (3,)), ints(0, 7, (3,))))
    for p in (P.and_p, P.or_p, P.xor_p, P.shift_left, P.shift_right_arithmetic, P.shift_right_logical)]


def _tangents(rng, xs):
    """Random tangents for inexact inputs, ``Zero(float0)`` for the others."""
    ts = []
    for x in xs:
        if _inexact(x):
            ts.append(_rand_like(rng, x))
        else:
            ts.append(None)
    return ts


def _as_tangent(x, t):
    if t is None:
        return Zero(tangent_aval(_aval(x)))
    return fnp.asarray(t)


def _bind_np(prim, params, xs):
    out = prim.bind(*[fnp.asarray(x) for x in xs], **params)
    if prim.multiple_results:
        return [np.asarray(o) for o in out]
    return [np.asarray(out)]


def _finite_difference(prim, params, xs, ts, h, wide=False):
    def at(s):
        pts = []
        for x, t in zip(xs, ts, strict=True):
            x = np.asarray(x)
            if wide and x.dtype == F32:
                x, t = x.astype(F64), (None if t is None else np.asarray(t, F64))
            pts.append(x if t is None else (x + s * t).astype(x.dtype))
        return _bind_np(prim, params, pts)
    plus, minus = at(h), at(-h)
    return [(p.astype(np.result_type(p, F64)) - m) / (2 * h) if p.dtype.kind in "fc" else None
            for p, m in zip(plus, minus, strict=True)]


def _run_rule(prim, params, xs, ts):
    arrs = [fnp.asarray(x) for x in xs]
    out, tan = primitive_jvps[prim](arrs, [_as_tangent(x, t) for x, t in zip(xs, ts, strict=True)], **params)
    if not prim.multiple_results:
        out, tan = [out], [tan]
    return out, tan


def _jit_rule(prim, params, xs, ts):
    """The same rule traced under jit (tangents as arguments), verified, run."""
    diff = [i for i, t in enumerate(ts) if t is not None]
    n = len(xs)

    def f(*a):
        tangents = [Zero(tangent_aval(_aval(x))) for x in xs]
        for k, i in enumerate(diff):
            tangents[i] = a[n + k]
        _, tan = primitive_jvps[prim](list(a[:n]), tangents, **params)
        tan = tan if prim.multiple_results else [tan]
        return [fnp.zeros(1) if isinstance(t, Zero) else t for t in tan]

    inputs = [fnp.asarray(x) for x in xs] + [fnp.asarray(ts[i]) for i in diff]
    check_traced(f, *inputs)
    return fa.jit(f)(*inputs)


def _check_case(case, wide=False):
    rng = _rng(case.name)
    xs = case.make(rng)
    ts = _tangents(rng, xs)
    if case.hermitian:
        ts = [None if t is None else (t + np.conj(np.swapaxes(t, -1, -2))) / 2 for t in ts]
    out, tan = _run_rule(case.prim, case.params, xs, ts)
    want_out = _bind_np(case.prim, case.params, xs)
    fd = _finite_difference(case.prim, case.params, xs, ts, case.h, wide)
    jit_tan = _jit_rule(case.prim, case.params, xs, ts)
    for k, (o, t, w, d) in enumerate(zip(out, tan, want_out, fd, strict=True)):
        np.testing.assert_array_equal(np.asarray(o), w, err_msg=f"{case.name}: primal output {k}")
        if d is None:
            assert isinstance(t, Zero), f"{case.name}: output {k} is not inexact but has a tangent"
            continue
        assert not isinstance(t, Zero), f"{case.name}: output {k} has a Zero tangent"
        assert t.shape == w.shape and t.dtype == w.dtype, f"{case.name}: tangent {t.dtype}{t.shape}"
        got = np.asarray(t)
        scale = max(1.0, float(np.max(np.abs(d)))) if d.size else 1.0
        np.testing.assert_allclose(got, d, rtol=case.rtol, atol=case.rtol * scale,
                                   err_msg=f"{case.name}: tangent {k} vs finite differences")
        np.testing.assert_allclose(np.asarray(jit_tan[k]), got, rtol=1e-6 if wide else 1e-12, atol=1e-12,
                                   err_msg=f"{case.name}: jit vs eager")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_jvp_finite_differences(case):
    _check_case(case)


@pytest.mark.parametrize("case", CASES32, ids=[c.name for c in CASES32])
def test_jvp_float32(case):
    _check_case(case._replace(h=1e-6, rtol=3e-4), wide=True)


@pytest.mark.parametrize("case", ZERO_CASES, ids=[c.name for c in ZERO_CASES])
def test_jvp_zero(case):
    rng = _rng(case.name)
    xs = case.make(rng)
    ts = _tangents(rng, xs)
    out, tan = _run_rule(case.prim, case.params, xs, ts)
    for o, t, w in zip(out, tan, _bind_np(case.prim, case.params, xs), strict=True):
        np.testing.assert_array_equal(np.asarray(o), w)
        assert isinstance(t, Zero), f"{case.name}: expected a Zero tangent, got {t!r}"
        assert t.aval == tangent_aval(o.aval), f"{case.name}: {t.aval} != {tangent_aval(o.aval)}"
        if not dtypes.is_inexact(o.dtype):
            assert t.aval.dtype == dtypes.float0


#: Rules tested in their own files, where their inputs need more than this table gives (a case here differentiates
#: every float input).
ELSEWHERE = {
    "pallas_call": "its JVP rule raises naming custom_vjp (tests/test_pallas.py, with a custom_vjp backward kernel)",
    "dot_product_attention": "its JVP is the decomposition's (the mask operand is bool, the key lengths int32): "
                             "tests/test_attention.py checks grad in q, k, v and bias against float64 finite "
                             "differences on every device, and with lower_right (mask='causal' with key lengths: "
                             "the run-time offset) in q, k, v",
    "quantized_matmul": "linear in x only (the scales and biases are constants whose gradient raises): "
                        "tests/test_quantize.py checks its JVP and transpose in x against float64 finite differences",
}


def test_every_first_order_primitive_has_a_jvp_rule():
    # Effects (debug_callback) have no outputs to differentiate: tests/test_debug.py checks their rules under grad.
    # Collectives need a named axis: tests/test_collectives.py checks their rules against JAX under vmap.
    first_order = [p for p in P.PRIMITIVES.values() if p.kind not in ("control", "effect", "collective")]
    missing = [p.name for p in first_order if p not in primitive_jvps and p.name not in ad_rules.NO_JVP]
    assert not missing, f"no JVP rule and no stated reason: {missing}"
    for name, reason in ad_rules.NO_JVP.items():
        assert reason, f"{name} is listed without a reason"
    tested = {c.prim for c in CASES + CASES32 + ZERO_CASES}
    untested = [p.name for p in first_order if p in primitive_jvps and p not in tested and p.name not in ELSEWHERE]
    assert not untested, f"JVP rules without a test case: {untested}"


# ----------------------------------------------------------------------------- ties and special points


def _jvp(prim, xs, ts, **params):
    arrs = [fnp.asarray(x) for x in xs]
    tangents = [Zero(tangent_aval(_aval(x))) if t is None else fnp.asarray(t) for x, t in zip(xs, ts, strict=True)]
    out, tan = primitive_jvps[prim](arrs, tangents, **params)
    return out, tan


def test_max_min_ties_split_half():
    x = np.array([1.0, 2.0, 3.0, np.nan])
    y = np.array([1.0, 5.0, 3.0, 0.0])
    tx, ty = np.array([1.0, 10.0, 2.0, 1.0]), np.array([3.0, 20.0, 6.0, 1.0])
    for prim in (P.max_p, P.min_p):
        _, t = _jvp(prim, [x, y], [tx, ty])
        win_x = (x > y) if prim is P.max_p else (x < y)
        want = np.where(x == y, 0.5 * (tx + ty), np.where(win_x, tx, ty))
        want[3] = 0.0   # NaN result: no source equals it
        np.testing.assert_allclose(np.asarray(t), want, err_msg=prim.name)


def test_reduce_max_ties_split_evenly():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, -1.0, 0.0, 4.0]])
    t = np.arange(12.0).reshape(3, 4) + 1
    _, got = _jvp(P.reduce_max, [x], [t], axes=(1,))
    hit = x == x.max(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(got), (t * hit).sum(1) / hit.sum(1))
    _, got = _jvp(P.reduce_min, [x], [t], axes=(0, 1))
    hit = x == x.min()
    np.testing.assert_allclose(np.asarray(got), (t * hit).sum() / hit.sum())


def test_scatter_max_ties_split_evenly():
    x = np.array([1.0, 4.0, 0.0])
    idx = _i([1], [1], [0], [2])
    upd = np.array([4.0, 2.0, 7.0, 0.0])
    tx, tu = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0, 40.0])
    out, t = _jvp(P.scatter_max, [x, idx, upd], [tx, None, tu], axes=(0,))
    np.testing.assert_allclose(np.asarray(out), [7.0, 4.0, 0.0])
    # position 0: the update 7 wins; position 1: x and the update 4 tie; position 2: x and 0 tie
    np.testing.assert_allclose(np.asarray(t), [30.0, (2.0 + 10.0) / 2, (3.0 + 40.0) / 2])


def test_scatter_mul_with_zero_and_repeated_updates():
    x = np.array([2.0, 3.0])
    idx = _i([0], [0], [0], [1], [1])
    upd = np.array([0.0, 5.0, 7.0, 0.0, 0.0])
    tu = np.array([1.0, 10.0, 100.0, 1.0, 1.0])
    _, t = _jvp(P.scatter_mul, [x, idx, upd], [None, None, tu], axes=(0,))
    # position 0: d/du0 = 2 * 5 * 7; the others carry the factor 0; position 1: two zeros -> 0
    np.testing.assert_allclose(np.asarray(t), [2.0 * 5 * 7 * 1.0, 0.0])


def test_pow_at_zero():
    """JAX's derivatives at x == 0 (test_rules_against_jax_jvp checks ``pow_p``'s rule): ``fnp.power`` with an
    integer exponent array has 0 in x at y == 0 (JAX's ``lax.pow`` with an integer exponent), not 0 * inf."""
    y = np.array([0.0, 1.0, 2.0, 3.0, 0.5, -1.0], np.float32)
    k = np.array([0, 1, 2], np.int32)   # d/dv (v ** 0 + v ** 1 + v ** 2) at 0: 0 + 1 + 0, JAX's too
    assert float(fa.grad(lambda v: fnp.sum(fnp.power(v, k)))(np.float32(0.0))) == 1.0
    # a Python-number base (2.0 ** y, a literal in the program) differentiates in y as an array base does
    yf = y[:5]
    for base in (2.0, 0.0):
        g = fa.grad(lambda v, b=base: fnp.sum(b ** v))(yf)
        np.testing.assert_allclose(np.asarray(g), 0.0 if base == 0 else np.log(2.0) * 2.0 ** yf, rtol=1e-6)
    # floor division is piecewise constant: zero derivative, by a zero divisor too (JAX's), not 0 * inf
    g = fa.grad(lambda v: fnp.sum(v // 0.0 + v // 0.7))(yf)
    np.testing.assert_array_equal(np.asarray(g), np.zeros(5))


def test_sort_tangents_follow_permutation():
    x = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 4.0]])
    t = np.array([[30.0, 10.0, 20.0], [5.0, -10.0, 40.0]])
    out, tan = _jvp(P.sort, [x], [t], dimension=1, is_stable=True, num_keys=1)
    np.testing.assert_array_equal(np.asarray(out[0]), np.sort(x, 1))
    np.testing.assert_array_equal(np.asarray(tan[0]), np.take_along_axis(t, np.argsort(x, 1), 1))


def test_trigamma_against_jax():
    jax = pytest.importorskip("jax")
    from jax.scipy.special import polygamma
    x = np.array([-3.7, -0.5, 0.01, 0.3, 0.5, 1.0, 2.5, 9.99, 10.0, 40.0, 1234.5])
    with jax.enable_x64(True):
        want = np.asarray(polygamma(1, x))
    got = np.asarray(ad_rules.trigamma(fnp.asarray(x)))
    np.testing.assert_allclose(got, want, rtol=1e-11)
    got32 = np.asarray(ad_rules.trigamma(fnp.asarray(x[2:].astype(F32))))
    np.testing.assert_allclose(got32, want[2:], rtol=2e-6)


def test_rules_against_jax_jvp():
    """Second oracle: jax.jvp of the matching jax.lax op (ties and the special points included)."""
    jax = pytest.importorskip("jax")
    jlax = jax.lax
    x = np.array([0.0, 0.0, 2.0, 1.0, 3.0])
    y = np.array([0.0, 2.0, 0.0, 1.0, 0.5])
    tx, ty = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([0.5, 0.25, 1.0, 2.0, -1.0])
    m = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    tm = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    checks = [
        (P.max_p, jlax.max, (x, y), (tx, ty), {}, {}),
        (P.min_p, jlax.min, (x, y), (tx, ty), {}, {}),
        (P.pow_p, jlax.pow, (x, y), (tx, ty), {}, {}),   # NaN at (0, 0), as JAX; see also test_pow_at_zero
        (P.pow_p, jlax.pow, (x, y - 1), (tx, None), {}, {}),   # in x alone: NaN at 0 ** 0.0, -inf at 0 ** -1.0
        (P.pow_p, jlax.pow, (x, y - 1), (None, ty), {}, {}),   # in y alone: log(0) as 0, NaN at 0 ** -1.0
        (P.abs_p, jlax.abs, (x - y,), (tx,), {}, {}),     # +t at 0, as JAX
        (P.cummax, lambda a: jlax.cummax(a, 1, reverse=True), (m[:, ::-1],), (tm,), {"axis": 1, "reverse": True},
         {}),   # ties share the tangent as JAX's prefix scan splits it
        (P.atan2, jlax.atan2, (x + 1, y), (tx, ty), {}, {}),
        (P.reduce_max, lambda a: jlax.reduce_max(a, (1,)), (m,), (tm,), {"axes": (1,)}, {}),
        (P.reduce_prod, lambda a: jlax.reduce_prod(a, (0, 1)), (np.array([[0.0, 2.0], [3.0, 4.0]]),),
         (tm[:, :2],), {"axes": (0, 1)}, {}),
        (P.cumprod, lambda a: jlax.cumprod(a, 1), (np.array([[2.0, 0.0, 3.0, 4.0]]),),
         (np.array([[1.0, 2.0, 3.0, 4.0]]),), {"axis": 1}, {}),
        (P.cumlogsumexp, lambda a: jlax.cumlogsumexp(a, 0, reverse=True), (x,), (tx,),
         {"axis": 0, "reverse": True}, {}),
        (P.digamma, jlax.digamma, (x + 0.5,), (tx,), {}, {}),
        (P.abs_p, jlax.abs, (np.array([1 + 2j, -3j, 0j]),), (np.array([1 - 1j, 2 + 1j, 1 + 1j]),), {}, {}),
    ]
    def jax_tangent(jfn, xs, ts):
        live = [i for i, t in enumerate(ts) if t is not None]   # None: a constant operand (a symbolic zero)

        def only_live(*a):
            full = list(xs)
            for i, v in zip(live, a, strict=True):
                full[i] = v
            return jfn(*full)
        return jax.jvp(only_live, tuple(xs[i] for i in live), tuple(ts[i] for i in live))[1]

    with jax.enable_x64(True):   # one jitted program for every check: JAX's op-by-op compiles took ~20 s
        wants = jax.jit(lambda: [jax_tangent(jfn, xs, ts) for _, jfn, xs, ts, _, _ in checks])()
    for (prim, _, xs, ts, params, _), want in zip(checks, wants, strict=True):
        _, got = _jvp(prim, list(xs), list(ts), **params)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12, err_msg=prim.name)


# ----------------------------------------------------------------------------- transposes


class TCase(NamedTuple):
    name: str
    prim: P.Primitive
    params: dict
    make: Callable       # rng -> list of NumPy inputs
    linear: tuple        # positions of the linear inputs (given as UndefinedPrimal)
    zeroed: tuple = ()   # known inputs that L takes as zeros (an add with a known term is affine)


TCASES = [
    TCase("triangular_solve_b", LA.triangular_solve_p, _TS, args(_lower(3, (2,)), u(-1, 1, (2, 3, 2))), (1,)),
    TCase("triangular_solve_b_right_conj", LA.triangular_solve_p,
          dict(_TS, left_side=False, lower=False, transpose_a=True, conjugate_a=True, unit_diagonal=True),
          lambda rng: [np.triu(cplx((3, 3))(rng)) + 3 * np.eye(3), cplx((2, 3))(rng)], (1,)),
    TCase("neg", P.neg, {}, args(u(-1, 1)), (0,)),
    TCase("sharding_constraint", _spmd.sharding_constraint_p, {"sharding": _one_device_sharding()},
          args(u(-1, 1, (3, 4))), (0,)),
    TCase("copy", P.copy_p, {}, args(u(-1, 1)), (0,)),
    TCase("real", P.real, {}, args(cplx()), (0,)),
    TCase("imag", P.imag, {}, args(cplx()), (0,)),
    TCase("conj", P.conj, {}, args(cplx()), (0,)),
    TCase("complex", P.complex_p, {}, args(u(-1, 1), u(-1, 1)), (0, 1)),
    TCase("complex_scalar_x", P.complex_p, {}, args(u(-1, 1, ()), u(-1, 1)), (0, 1)),
    TCase("convert_f64_f32", P.convert_element_type, {"new_dtype": dtypes.float32, "weak_type": False},
          args(u(-1, 1)), (0,)),
    TCase("convert_f64_c128", P.convert_element_type, {"new_dtype": dtypes.complex128, "weak_type": False},
          args(u(-1, 1)), (0,)),
    TCase("convert_c128_f64", P.convert_element_type, {"new_dtype": dtypes.float64, "weak_type": False},
          args(cplx()), (0,)),
    TCase("add", P.add, {}, args(u(-1, 1), u(-1, 1)), (0, 1)),
    TCase("add_scalar_y", P.add, {}, args(u(-1, 1), u(-1, 1, ())), (0, 1)),
    TCase("add_only_x", P.add, {}, args(u(-1, 1, ()), u(-1, 1)), (0,), (1,)),
    TCase("sub", P.sub, {}, args(u(-1, 1), u(-1, 1)), (0, 1)),
    TCase("sub_scalar_x", P.sub, {}, args(u(-1, 1, ()), u(-1, 1)), (0, 1)),
    TCase("mul_x", P.mul, {}, args(u(-1, 1), u(-1, 1)), (0,)),
    TCase("mul_y", P.mul, {}, args(u(-1, 1), u(-1, 1)), (1,)),
    TCase("mul_scalar_x", P.mul, {}, args(u(-1, 1, ()), u(-1, 1)), (0,)),
    TCase("mul_scalar_y", P.mul, {}, args(u(-1, 1, ()), u(-1, 1)), (1,)),
    TCase("mul_c", P.mul, {}, args(cplx(), cplx()), (1,)),
    TCase("div", P.div, {}, args(u(-1, 1), away(-2, 2, 0.5)), (0,)),
    TCase("div_scalar_x", P.div, {}, args(u(-1, 1, ()), away(-2, 2, 0.5)), (0,)),
    TCase("div_scalar_y", P.div, {}, args(u(-1, 1), away(-2, 2, 0.5, ())), (0,)),
    TCase("select_n_bool", P.select_n, {}, lambda rng: [rng.random((3, 4)) < .5, u(-1, 1)(rng), u(-1, 1)(rng)],
          (1, 2)),
    TCase("select_n_int", P.select_n, {}, lambda rng: [ints(-1, 3, (3, 4))(rng), u(-1, 1)(rng), u(-1, 1)(rng),
                                                       u(-1, 1)(rng)], (1, 3), (2,)),
    TCase("select_n_scalar", P.select_n, {}, lambda rng: [np.bool_(False), u(-1, 1)(rng), u(-1, 1)(rng)], (1, 2)),
    TCase("broadcast_in_dim", P.broadcast_in_dim, {"shape": (2, 3, 4, 1), "broadcast_dimensions": (0, 2, 3)},
          args(u(-1, 1, (1, 4, 1))), (0,)),
    TCase("broadcast_scalar", P.broadcast_in_dim, {"shape": (2, 3), "broadcast_dimensions": ()},
          args(u(-1, 1, ())), (0,)),
    TCase("reshape", P.reshape, {"new_sizes": (2, 6)}, args(u(-1, 1)), (0,)),
    TCase("transpose", P.transpose, {"permutation": (1, 2, 0)}, args(u(-1, 1, (2, 3, 4))), (0,)),
    TCase("rev", P.rev, {"dimensions": (1,)}, args(u(-1, 1)), (0,)),
    TCase("slice", P.slice_p, {"start_indices": (1, 1), "limit_indices": (3, 4), "strides": (2, 2)},
          args(u(-1, 1)), (0,)),
    TCase("slice_empty", P.slice_p, {"start_indices": (1, 2), "limit_indices": (1, 4), "strides": (1, 1)},
          args(u(-1, 1)), (0,)),
    TCase("pad", P.pad, {"padding_config": ((2, -1, 1), (-2, 1, 2))}, args(u(-1, 1), u(-1, 1, ())), (0, 1)),
    TCase("pad_x", P.pad, {"padding_config": ((0, 3, 0), (1, 1, 0))}, args(u(-1, 1), u(-1, 1, ())), (0,), (1,)),
    TCase("concatenate", P.concatenate, {"dimension": 0},
          args(u(-1, 1, (2, 4)), u(-1, 1), u(-1, 1, (1, 4))), (0, 2), (1,)),
    TCase("dynamic_slice", P.dynamic_slice, {"slice_sizes": (2, 3)},
          lambda rng: [u(-1, 1)(rng), _i(5), _i(-1)], (0,)),
    TCase("dynamic_update_slice", P.dynamic_update_slice, {},
          lambda rng: [u(-1, 1)(rng), u(-1, 1, (2, 2))(rng), _i(1), _i(3)], (0, 1)),
    TCase("gather", P.gather, {"axes": (1,)}, lambda rng: [u(-1, 1)(rng), _i([3], [0], [3], [9], [-4])], (0,)),
    TCase("gather_2axes", P.gather, {"axes": (0, 2)},
          lambda rng: [u(-1, 1, (3, 2, 4))(rng), _i([[1, 2], [3, 0]], [[1, 2], [0, 9]])], (0,)),
    TCase("scatter_add", P.scatter_add, {"axes": (0,)},
          lambda rng: [u(-1, 1)(rng), _i([2], [0], [2], [5], [-1]), u(-1, 1, (5, 4))(rng)], (0, 2)),
    TCase("scatter", P.scatter, {"axes": (0,)},
          lambda rng: [u(-1, 1)(rng), _i([2], [0], [2], [5]), u(-1, 1, (4, 4))(rng)], (0, 2)),
    TCase("scatter_2axes", P.scatter, {"axes": (1, 0)},
          lambda rng: [u(-1, 1)(rng), _i([1, 2], [3, 0], [1, 2], [0, 9]), u(-1, 1, (4,))(rng)], (0, 2)),
    TCase("reduce_sum", P.reduce_sum, {"axes": (0, 2)}, args(u(-1, 1, (2, 3, 4))), (0,)),
    TCase("cumsum", P.cumsum, {"axis": 1}, args(u(-1, 1)), (0,)),
    TCase("cumsum_rev", P.cumsum, {"axis": 0, "reverse": True}, args(u(-1, 1)), (0,)),
    TCase("dot_lhs", P.dot_general, {"dimension_numbers": (((2, 0), (3, 0)), ((1,), (2,))),
                                     "preferred_element_type": None},
          args(u(-1, 1, (2, 3, 4, 5)), u(-1, 1, (2, 6, 3, 4))), (0,)),
    TCase("dot_rhs", P.dot_general, {"dimension_numbers": (((2, 0), (3, 0)), ((1,), (2,))),
                                     "preferred_element_type": None},
          args(u(-1, 1, (2, 3, 4, 5)), u(-1, 1, (2, 6, 3, 4))), (1,)),
    TCase("dot_matmul_rhs", P.dot_general, {"dimension_numbers": (((1,), (0,)), ((), ())),
                                            "preferred_element_type": None},
          args(u(-1, 1, (3, 4)), u(-1, 1, (4, 2))), (1,)),
    TCase("dot_batch_last", P.dot_general, {"dimension_numbers": (((0,), (1,)), ((2,), (0,))),
                                            "preferred_element_type": None},
          args(u(-1, 1, (3, 5, 2)), u(-1, 1, (2, 3, 4))), (0,)),
    TCase("dot_preferred", P.dot_general, {"dimension_numbers": (((1,), (0,)), ((), ())),
                                           "preferred_element_type": dtypes.float64},
          args(u(-1, 1, (3, 4), F32), u(-1, 1, (4, 2), F32)), (1,)),
    TCase("dot_c_lhs", P.dot_general, {"dimension_numbers": (((1,), (0,)), ((), ())),
                                       "preferred_element_type": None}, args(cplx((3, 4)), cplx((4, 2))), (0,)),
]
TCASES += [
    TCase("reduce_window_sum", W.reduce_window_sum_p, _WIN, args(u(-1, 1, (5, 4))), (0,)),
    TCase("reduce_window_sum_same", W.reduce_window_sum_p,
          {"window_dimensions": (3, 1), "window_strides": (2, 1), "padding": ((1, 1), (0, 0)),
           "base_dilation": (1, 1), "window_dilation": (1, 1)}, args(u(-1, 1, (6, 2))), (0,)),
    TCase("select_and_gather_add", W.select_and_gather_add_p, {"select_prim": P.ge, **_WIN},
          args(u(-1, 1, (5, 4)), distinct((5, 4))), (0,)),
    TCase("select_and_scatter_add", W.select_and_scatter_add_p, {"select_prim": P.le, **_WIN},
          args(u(-1, 1, (2, 6)), distinct((5, 4))), (0,)),
    TCase("conv_lhs", _CONV, _conv_params((2, 1), ((1, -1), (0, 1)), (1, 2), (2, 1), _NCHW),
          args(u(-1, 1, (2, 3, 5, 4)), u(-1, 1, (4, 3, 2, 2))), (0,)),
    TCase("conv_rhs", _CONV, _conv_params((2, 1), ((1, -1), (0, 1)), (1, 2), (2, 1), _NCHW),
          args(u(-1, 1, (2, 3, 5, 4)), u(-1, 1, (4, 3, 2, 2))), (1,)),
    TCase("conv_lhs_groups", _CONV, _conv_params((1, 1), ((0, 0), (1, 1)), (1, 1), (1, 1), _NHWC, g=2),
          args(u(-1, 1, (2, 4, 5, 4)), u(-1, 1, (3, 2, 2, 4))), (0,)),
    TCase("conv_rhs_batch_groups", _CONV, _conv_params((1,), ((1, 0),), (1,), (1,), ((0, 1, 2),) * 3, b=2),
          args(u(-1, 1, (4, 2, 6)), u(-1, 1, (4, 2, 3))), (1,)),
]
TCASES += [TCase(n, fft_p, {"fft_type": t, "fft_lengths": k}, args(m), (0,)) for n, t, k, m in _FFT]
TCASES += [TCase("name", P.name_p, {"name": "h"}, args(u(-1, 1)), (0,))]


def _pair(a, b) -> float:
    """The real pairing Re(sum(a * b)), in float64/complex128."""
    a, b = np.asarray(a), np.asarray(b)
    wide = np.complex128 if (a.dtype.kind == "c" or b.dtype.kind == "c") else F64
    return float(np.real(np.sum(a.astype(wide) * b.astype(wide))))


def _transpose_pairs(case, jit=False):
    rng = _rng(case.name)
    xs = case.make(rng)
    xs = [np.zeros_like(x) if i in case.zeroed else x for i, x in enumerate(xs)]
    ts = {i: _rand_like(rng, xs[i]) for i in case.linear}
    lin_out = _bind_np(case.prim, case.params, [ts.get(i, x) for i, x in enumerate(xs)])[0]
    ct = _rand_like(rng, lin_out)
    rule = primitive_transposes[case.prim]

    def transpose(ct_arr, *known):
        it = iter(known)
        invals = [UndefinedPrimal(fa.ShapedArray(np.shape(x), np.dtype(np.asarray(x).dtype)))
                  if i in case.linear else next(it) for i, x in enumerate(xs)]
        cts = rule(ct_arr, *invals, **case.params)
        return [cts[i] for i in case.linear]

    known = [fnp.asarray(x) for i, x in enumerate(xs) if i not in case.linear]
    if jit:
        check_traced(transpose, fnp.asarray(ct), *known)
        cts = fa.jit(transpose)(fnp.asarray(ct), *known)
    else:
        cts = transpose(fnp.asarray(ct), *known)
    lhs = _pair(ct, lin_out)
    rhs = 0.0
    for i, c in zip(case.linear, cts, strict=True):
        assert c.shape == np.shape(xs[i]) and c.dtype == np.asarray(xs[i]).dtype, \
            f"{case.name}: cotangent {i} is {c.dtype}{c.shape}, input is {np.asarray(xs[i]).dtype}{np.shape(xs[i])}"
        rhs += _pair(c, ts[i])
    return lhs, rhs, lin_out


@pytest.mark.parametrize("case", TCASES, ids=[t.name for t in TCASES])
def test_transpose_dot_product(case):
    lhs, rhs, out = _transpose_pairs(case)
    tol = 1e-5 if out.dtype == F32 or any(np.asarray(x).dtype == F32 for x in case.make(_rng(case.name))) else 1e-10
    assert abs(lhs - rhs) <= tol * (1 + abs(lhs)), f"{case.name}: <ct, L t> = {lhs}, <L^T ct, t> = {rhs}"
    jl, jr, _ = _transpose_pairs(case, jit=True)
    assert abs(jl - jr) <= tol * (1 + abs(jl)), f"{case.name} under jit: {jl} vs {jr}"


def test_transpose_zero_cotangent():
    x = UndefinedPrimal(fa.ShapedArray((3,), dtypes.float64))
    y = fnp.asarray(np.ones(3))
    ct = Zero(fa.ShapedArray((3,), dtypes.float64))
    for prim in (P.add, P.mul, P.div):
        res = primitive_transposes[prim](ct, x, y)
        assert isinstance(res[0], Zero) and res[0].aval == x.aval and res[1] is None


def test_transpose_rejects_nonlinear_use():
    a = UndefinedPrimal(fa.ShapedArray((3,), dtypes.float64))
    ct = fnp.asarray(np.ones(3))
    with pytest.raises(TypeError, match="linear"):
        primitive_transposes[P.mul](ct, a, a)
    with pytest.raises(TypeError, match="denominator"):
        primitive_transposes[P.div](ct, fnp.asarray(np.ones(3)), a)


def test_every_transpose_rule_is_tested():
    # collectives: tests/test_collectives.py checks their transposes under vmap against JAX
    ours = {p for p in primitive_transposes if p.kind not in ("control", "collective")}
    tested = {c.prim for c in TCASES}
    assert not [p.name for p in ours - tested if p.name not in ELSEWHERE]


def test_jvp_of_linear_rules_is_transposable():
    """The tangent computations of the nonlinear rules use only primitives that have transposes.

    The JVP is traced with the tangent as an input; every equation that depends on it must be a
    primitive with a transpose rule.
    """
    from fnarray.core.ir import Var
    cases = [c for c in CASES + CASES32 if c.prim not in (P.sort,)] + [c for c in CASES if c.prim is P.sort]
    for case in cases:
        rng = _rng(case.name)
        xs = case.make(rng)
        ts = _tangents(rng, xs)
        diff = [i for i, t in enumerate(ts) if t is not None]
        n = len(xs)

        def f(*a, case=case, xs=xs, diff=diff, n=n):
            tangents = [Zero(tangent_aval(_aval(x))) for x in xs]
            for k, i in enumerate(diff):
                tangents[i] = a[k]
            _, tan = primitive_jvps[case.prim]([fnp.asarray(x) for x in xs], tangents, **case.params)
            return [t for t in (tan if case.prim.multiple_results else [tan]) if not isinstance(t, Zero)]

        prog = check_traced(f, *[fnp.asarray(ts[i]) for i in diff])
        linear = set(prog.invars)
        for e in prog.eqns:
            if any(isinstance(v, Var) and v in linear for v in e.inputs):
                assert e.primitive in primitive_transposes, \
                    f"{case.name}: tangent flows through {e.primitive.name}, which has no transpose"
                linear.update(e.outputs)


def _narrow(a, real, cplx_):
    a = np.asarray(a)
    if a.dtype == F64:
        return a.astype(real)
    if a.dtype == C128:
        return a.astype(cplx_)
    return a


@pytest.mark.parametrize("real", ["float32", "float16", "bfloat16"])
def test_jvp_rules_keep_narrow_dtypes(real):
    """Every rule runs in narrower dtypes: tangents keep the output dtype, and float32 values agree
    with the float64 rule (the constants inside rules take each operand's dtype)."""
    real = dtypes.canonicalize(real)
    for case in CASES:
        if case.prim is P.convert_element_type:
            continue   # its dtypes are its parameters
        if real != dtypes.float32 and (case.prim is P.complex_p or case.name.endswith("_c") or
                                       case.prim in (P.real, P.imag, P.conj, fft_p) or "wide" in case.name or
                                       case.prim.kind == "linalg"):
            continue   # no complex type has float16 parts (nor fft: float32/64); the wide case overflows float16;
            #            LAPACK has no halves
        rng = _rng(case.name)
        xs64 = case.make(rng)
        ts64 = _tangents(rng, xs64)
        xs = [_narrow(x, real, np.complex64) for x in xs64]
        ts = [None if t is None else _narrow(t, real, np.complex64) for t in ts64]
        out, tan = _run_rule(case.prim, case.params, xs, ts)
        for o, t in zip(out, tan, strict=True):
            if isinstance(t, Zero):
                continue
            assert (t.dtype, t.shape) == (o.dtype, o.shape), f"{case.name}: tangent {t.dtype}{t.shape} for {o.aval}"
        if real == dtypes.float32:
            _, tan64 = _run_rule(case.prim, case.params, [_narrow(x, real, np.complex64).astype(
                np.asarray(x).dtype) for x in xs64], [None if t is None else np.asarray(tt).astype(
                    np.asarray(t).dtype) for t, tt in zip(ts64, ts, strict=True)])
            for t, w in zip(tan, tan64, strict=True):
                if isinstance(t, Zero):
                    continue
                w = np.asarray(w)
                scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
                np.testing.assert_allclose(np.asarray(t), w, rtol=2e-4, atol=2e-5 * scale, err_msg=case.name)
