"""One or more cases for every primitive: the backend parity tier (docs/design.md, "Testing") and `fnarray doctor`.

A case is ``(name, primitive, inputs, params)``: ``inputs`` are NumPy arrays
(made from a fixed seed), ``params`` the primitive's static parameters. The
parity tests run each case on a device and compare with the numpy backend.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.passes import consts_as_inputs
from fnarray.core.shaped import ShapedArray

rng = np.random.default_rng(0)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def i32(*shape, lo=-20, hi=20):
    return rng.integers(lo, hi, shape).astype(np.int32)


def u32(*shape):
    return rng.integers(0, 2**32 - 1, shape, dtype=np.uint64).astype(np.uint32)


def bools(*shape):
    return rng.random(shape) < 0.5


def _special_f32():
    return np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 3e9, -3e9, 0.5], np.float32)


CASES = []


def _spmd_p():
    from fnarray.core import spmd
    return spmd


def case(case_name, prim, inputs, **params):
    CASES.append((case_name, prim, inputs, params))


# Elementwise unary on floats (domains chosen so results are finite where the function is).
for p, lo, hi in [(P.neg, -3, 3), (P.sign, -3, 3), (P.floor, -3, 3), (P.ceil, -3, 3), (P.round_p, -3, 3),
                  (P.is_finite, -3, 3), (P.exp, -3, 3), (P.exp2, -3, 3), (P.log, 0.1, 3), (P.log1p, -0.5, 3),
                  (P.expm1, -3, 3), (P.tanh, -3, 3), (P.logistic, -5, 5), (P.sin, -3, 3), (P.cos, -3, 3),
                  (P.tan, -1, 1), (P.asin, -0.9, 0.9), (P.acos, -0.9, 0.9), (P.atan, -3, 3), (P.sinh, -2, 2),
                  (P.cosh, -2, 2), (P.asinh, -3, 3), (P.acosh, 1.1, 3), (P.atanh, -0.9, 0.9), (P.sqrt, 0, 3),
                  (P.rsqrt, 0.1, 3), (P.cbrt, -3, 3), (P.erf, -2, 2), (P.erf_inv, -0.9, 0.9),
                  (P.lgamma, 0.5, 4), (P.digamma, 0.5, 4), (P.abs_p, -3, 3), (P.stop_gradient, -3, 3),
                  (P.copy_p, -3, 3)]:
    case(p.name, p, [f32(3, 4, lo=lo, hi=hi)])
case("name", P.name_p, [f32(3, 4)], name="a")
case("round_halves", P.round_p, [np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32)])
case("not_bool", P.not_p, [bools(5)])
_c64 = (f32(5) + 1j * f32(5)).astype(np.complex64)
case("complex", P.complex_p, [f32(5), f32(5)])
for _p in (P.real, P.imag, P.conj, P.abs_p, P.exp, P.sign):
    case(_p.name + "_c64", _p, [_c64])
case("mul_c64", P.mul, [_c64, _c64[::-1].copy()])
case("not_int", P.not_p, [i32(5)])
case("population_count", P.population_count, [u32(6)])
case("integer_pow", P.integer_pow, [f32(4)], y=3)
case("integer_pow_neg", P.integer_pow, [f32(4, lo=0.5, hi=2)], y=-2)
case("is_finite_special", P.is_finite, [_special_f32()])
case("abs_int", P.abs_p, [i32(6)])
case("neg_int", P.neg, [i32(6)])

# Binary elementwise, floats, with a rank-0 operand too.
for p, lo, hi in [(P.add, -3, 3), (P.sub, -3, 3), (P.mul, -3, 3), (P.div, 0.5, 3), (P.rem, 0.5, 3),
                  (P.pow_p, 0.5, 2), (P.max_p, -3, 3), (P.min_p, -3, 3), (P.atan2, -3, 3),
                  (P.nextafter, -3, 3), (P.eq, -1, 1), (P.ne, -1, 1), (P.lt, -1, 1), (P.le, -1, 1),
                  (P.gt, -1, 1), (P.ge, -1, 1)]:
    case(p.name, p, [f32(3, 4, lo=lo, hi=hi), f32(3, 4, lo=lo, hi=hi)])
case("add_rank0", P.add, [f32(3, 4), np.float32(1.5)])
case("mul_rank0_left", P.mul, [np.float32(-2.0), f32(5)])
case("max_nan", P.max_p, [np.array([np.nan, 1, 2], np.float32), np.array([0, np.nan, 3], np.float32)])
case("min_nan", P.min_p, [np.array([np.nan, 1, 2], np.float32), np.array([0, np.nan, 3], np.float32)])
case("pow_zero_zero", P.pow_p, [np.array([0.0, 2.0], np.float32), np.array([0.0, 0.0], np.float32)])
# Integer semantics pinned by docs/design.md.
case("div_int", P.div, [i32(8), np.array([3, -3, 0, 1, -1, 0, 7, -2], np.int32)])
case("rem_int", P.rem, [i32(8), np.array([3, -3, 0, 1, -1, 0, 7, -2], np.int32)])
for p in (P.add, P.sub, P.mul, P.max_p, P.min_p, P.eq, P.lt):
    case(p.name + "_int", p, [i32(6), i32(6)])
for p in (P.and_p, P.or_p, P.xor_p):
    case(p.name + "_int", p, [i32(6), i32(6)])
    case(p.name + "_bool", p, [bools(6), bools(6)])
_shifts = np.array([0, 1, 5, 31, 32, 33, -1, 100], np.int32)
_svals = np.array([1, -8, 12345, -1, 7, -7, 3, -100], np.int32)
case("shift_left", P.shift_left, [_svals, _shifts])
case("shift_right_arithmetic", P.shift_right_arithmetic, [_svals, _shifts])
case("shift_right_logical", P.shift_right_logical, [_svals, _shifts])
case("shift_left_u32", P.shift_left, [u32(8), _shifts.astype(np.uint32)])
case("shift_right_logical_u32", P.shift_right_logical, [u32(8), np.array([0, 1, 5, 31, 32, 33, 3, 100],
                                                                          np.uint32)])
case("add_u32_wraps", P.add, [u32(6), u32(6)])
case("mul_u32_wraps", P.mul, [u32(6), u32(6)])
case("xor_u32", P.xor_p, [u32(6), u32(6)])

case("select_n_bool", P.select_n, [bools(3, 4), f32(3, 4), f32(3, 4)])
case("select_n_int", P.select_n, [np.array([0, 1, 2, 1], np.int32), f32(4), f32(4), f32(4)])
case("select_n_scalar", P.select_n, [np.bool_(True), f32(4), f32(4)])

# Conversions.
case("f32_to_i32_saturates", P.convert_element_type, [_special_f32()], new_dtype=dtypes.int32, weak_type=False)
case("f32_to_u8", P.convert_element_type, [_special_f32()], new_dtype=dtypes.uint8, weak_type=False)
case("i32_to_f32", P.convert_element_type, [i32(6)], new_dtype=dtypes.float32, weak_type=False)
case("f32_to_bool", P.convert_element_type, [_special_f32()], new_dtype=dtypes.bool_, weak_type=False)
case("bool_to_f32", P.convert_element_type, [bools(6)], new_dtype=dtypes.float32, weak_type=False)
case("i32_to_i8_wraps", P.convert_element_type, [i32(6, lo=-300, hi=300)], new_dtype=dtypes.int8,
     weak_type=False)
case("u32_to_f32", P.convert_element_type, [u32(6)], new_dtype=dtypes.float32, weak_type=False)
case("bitcast_f32_u32", P.bitcast_convert_type, [f32(6)], new_dtype=dtypes.uint32)
case("bitcast_u32_f32", P.bitcast_convert_type, [np.array([0x3F800000, 0x7FC00000, 0], np.uint32)],
     new_dtype=dtypes.float32)

# Structural.
case("iota", P.iota, [], dtype=dtypes.int32, shape=(3, 4), dimension=1)
case("iota_f32", P.iota, [], dtype=dtypes.float32, shape=(5,), dimension=0)
case("broadcast_in_dim", P.broadcast_in_dim, [f32(4)], shape=(3, 4), broadcast_dimensions=(1,))
case("broadcast_in_dim_ones", P.broadcast_in_dim, [f32(3, 1)], shape=(2, 3, 5), broadcast_dimensions=(1, 2))
case("reshape", P.reshape, [f32(3, 4)], new_sizes=(2, 6))
case("transpose", P.transpose, [f32(2, 3, 4)], permutation=(2, 0, 1))
case("rev", P.rev, [f32(3, 4)], dimensions=(0, 1))
case("slice", P.slice_p, [f32(5, 6)], start_indices=(1, 0), limit_indices=(4, 6), strides=(2, 3))
case("dynamic_slice", P.dynamic_slice, [f32(5, 6), np.int32(3), np.int32(-2)], slice_sizes=(3, 2))
case("dynamic_update_slice", P.dynamic_update_slice, [f32(5, 6), f32(2, 3), np.int32(4), np.int32(1)])
case("pad", P.pad, [f32(3, 4), np.float32(0.5)], padding_config=((1, 2, 0), (-1, 1, 1)))
case("concatenate", P.concatenate, [f32(2, 3), f32(4, 3)], dimension=0)
case("gather", P.gather, [f32(5, 4), np.array([[0], [4], [7], [-3]], np.int32)], axes=(0,))
case("gather_2axes", P.gather, [f32(3, 4, 5), np.array([[0, 1], [2, 9], [-1, 3]], np.int32)], axes=(2, 0))
_sidx = np.array([[0], [2], [2], [9], [-1], [1]], np.int32)
for p in (P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max):
    case(p.name, p, [f32(4, 3), _sidx, f32(6, 3)], axes=(0,))
case("scatter_unique", P.scatter, [f32(4, 3), np.array([[0], [3], [9]], np.int32), f32(3, 3)], axes=(0,))

# Reductions.
for p in (P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min):
    case(p.name, p, [f32(3, 4, 5, lo=0.5, hi=1.5)], axes=(0, 2))
    case(p.name + "_int", p, [i32(3, 4, lo=-3, hi=4)], axes=(1,))
case("reduce_max_nan", P.reduce_max, [np.array([[1, np.nan], [2, 3]], np.float32)], axes=(1,))
case("reduce_max_empty", P.reduce_max, [np.zeros((0, 3), np.float32)], axes=(0,))
case("reduce_and", P.reduce_and, [bools(3, 4)], axes=(1,))
case("reduce_or", P.reduce_or, [bools(3, 4)], axes=(0,))
case("reduce_or_int", P.reduce_or, [i32(3, 4)], axes=(0,))
case("argmax", P.argmax, [f32(3, 5)], axes=(1,), index_dtype=dtypes.int32)
case("argmin", P.argmin, [f32(3, 5)], axes=(0,), index_dtype=dtypes.int32)
case("argmax_nan", P.argmax, [np.array([1, np.nan, 3, np.nan], np.float32)], axes=(0,), index_dtype=dtypes.int32)
case("argmax_ties", P.argmax, [np.array([1, 3, 3, 2], np.float32)], axes=(0,), index_dtype=dtypes.int32)
for p in (P.cumsum, P.cumprod, P.cummax, P.cummin, P.cumlogsumexp):
    case(p.name, p, [f32(3, 5, lo=0.5, hi=1.5)], axis=1, reverse=False)
    case(p.name + "_rev", p, [f32(4, 3, lo=0.5, hi=1.5)], axis=0, reverse=True)
case("cumsum_int", P.cumsum, [i32(6)], axis=0, reverse=False)
case("sort", P.sort, [f32(3, 6)], dimension=1, is_stable=True, num_keys=1)
case("sort_nan_zero", P.sort, [np.array([3, np.nan, 0.0, -0.0, -1, np.nan, 0.0], np.float32),
                               np.arange(7, dtype=np.int32)], dimension=0, is_stable=True, num_keys=1)
case("sort_2keys", P.sort, [np.array([1, 0, 1, 0, 1], np.int32), np.array([5, 4, 3, 2, 1], np.int32),
                            np.arange(5, dtype=np.int32)], dimension=0, is_stable=True, num_keys=2)
case("dot_general_matmul", P.dot_general, [f32(3, 4), f32(4, 5)], dimension_numbers=(((1,), (0,)), ((), ())),
     preferred_element_type=None)
case("dot_general_batch", P.dot_general, [f32(2, 3, 4), f32(2, 5, 4)],
     dimension_numbers=(((2,), (2,)), ((0,), (0,))), preferred_element_type=None)
case("dot_general_int", P.dot_general, [i32(3, 4, lo=-5, hi=5), i32(4, 2, lo=-5, hi=5)],
     dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=None)
# int8 products summed in int32 (preferred_element_type): 40 x 100 x 100 overflows int8 and int16
case("dot_general_int8_to_int32", P.dot_general,
     [np.full((2, 40), 100, np.int8), rng.integers(-128, 128, (40, 3)).astype(np.int8)],
     dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=np.dtype(np.int32))


def _closed(fun, avals):
    prog, consts = trace_to_program(fun, avals)
    assert not consts
    return consts_as_inputs(prog)


def _control_cases():
    from fnarray.core import lax
    s = ShapedArray((), dtypes.float32)
    v = ShapedArray((4,), dtypes.float32)
    i = ShapedArray((), dtypes.int32)
    b1 = _closed(lambda x: [lax.mul(x, 2.0)], [v])
    b2 = _closed(lambda x: [lax.sin(x)], [v])
    case("cond", P.cond, [np.int32(1), f32(4)], branches=(b1, b2))
    case("cond_clamped", P.cond, [np.int32(7), f32(4)], branches=(b1, b2))
    cond_p = _closed(lambda k, x: [lax.lt(k, 5)], [i, v])
    body_p = _closed(lambda k, x: [lax.add(k, 1), lax.mul(x, 1.5)], [i, v])
    case("while", P.while_p, [np.int32(0), f32(4)], cond_program=cond_p, body_program=body_p,
         cond_nconsts=0, body_nconsts=0)
    scan_p = _closed(lambda c, x: [lax.add(c, x), lax.mul(c, x)], [s, s])
    case("scan", P.scan, [np.float32(0.5), f32(6)], program=scan_p, num_consts=0, num_carry=1, length=6,
         reverse=False, unroll=1)
    case("scan_reverse", P.scan, [np.float32(0.5), f32(6)], program=scan_p, num_consts=0, num_carry=1,
         length=6, reverse=True, unroll=1)
    call_p = _closed(lambda x, y: [lax.add(lax.mul(x, y), 1.0)], [v, v])
    case("call", P.call, [f32(4), f32(4)], program=call_p, name="f")
    case("remat", P.remat, [f32(4), f32(4)], program=call_p, prevent_cse=True)


_control_cases()


class _ShapeCheck:
    """A callback that checks the shapes it is given (hashable by them, as a ``debug_callback`` param)."""

    def __init__(self, *shapes):
        self.shapes = shapes

    def __call__(self, *args):
        got = tuple(np.shape(a) for a in args)
        if got != self.shapes:
            raise AssertionError(f"debug_callback passed shapes {got}, expected {self.shapes}")

    def __hash__(self):
        return hash(self.shapes)

    def __eq__(self, other):
        return isinstance(other, _ShapeCheck) and other.shapes == self.shapes


def _effect_cases():
    # No outputs to compare: the case checks that every backend runs the callback with the right values' shapes.
    from fnarray import tree_util
    from fnarray.debug import _HostCallback
    tree = tree_util.tree_structure(((0, 0), {}))
    case("debug_callback", P.debug_callback, [f32(3), np.int32(4)],
         callback=_HostCallback(_ShapeCheck((3,), ()), ()), in_tree=tree)
    case("debug_callback_empty", P.debug_callback, [f32(0, 2), np.int32(4)],
         callback=_HostCallback(_ShapeCheck((0, 2), ()), ()), in_tree=tree)
    from fnarray._callback import _PureCallback
    from fnarray.core.shaped import ShapedArray
    one = tree_util.tree_structure(((0,), {}))
    for name, shape in (("pure_callback", (3, 2)), ("pure_callback_empty", (0, 2))):
        case(name, P.pure_callback, [f32(*shape)], callback=_PureCallback(_affine_sum, ()), in_tree=one,
             out_tree=tree_util.tree_structure((0, 0)), vmap_method=None,
             result_avals=(ShapedArray(shape, np.dtype(np.float32)), ShapedArray((2,), np.dtype(np.int32))))


def _affine_sum(x):
    """A pure host function for ``pure_callback``'s cases: ``(2 x + 1, column sums as int32)`` in float32."""
    x = np.asarray(x, np.float32)
    return x * np.float32(2) + np.float32(1), np.sum(np.round(x), axis=0).astype(np.int32)


_effect_cases()


def _family_cases():
    """Every elementwise primitive without a case above gets its family's: float32 operands in [0.5, 2]
    (inside the domain of the usual float functions), so a new member needs no line here."""
    have = {c[1] for c in CASES}
    for kind, arity in (("unary", 1), ("binary", 2)):
        for p in families.members(kind):
            if p not in have:
                case(p.name, p, [f32(3, 4, lo=0.5, hi=2.0) for _ in range(arity)])


_family_cases()

def _one_device_sharding():
    from fnarray.sharding import Mesh, NamedSharding, P as PSpec
    return NamedSharding(Mesh(["numpy:0"], ("x",)), PSpec("x"))


case("sharding_constraint", _spmd_p().sharding_constraint_p, [f32(3, 4)], sharding=_one_device_sharding())
case("sharding_constraint_empty", _spmd_p().sharding_constraint_p, [f32(0, 4)], sharding=_one_device_sharding())

# Primitives that only exist inside transformations and are never executed by a backend as one equation: the
# collectives need a named axis and shard_map a mesh (tests/test_collectives.py, tests/test_sharding.py).
from fnarray.core import collectives as _collectives  # noqa: E402
from fnarray.core import spmd as _spmd  # noqa: E402

# The kernel-only primitives exist only inside a pallas_call's body (tests/test_pallas.py runs them there).
from fnarray.core import pallas as _pallas  # noqa: E402

NOT_EXECUTED = {P.custom_lin, P.custom_jvp_call, P.custom_vjp_call, *_collectives.COLLECTIVES, _spmd.shard_map_p,
                *_pallas.KERNEL_PRIMITIVES}


# ---------------------------------------------------------------------------------- zero-size operands
# Every executed primitive once more with zero-size dimensions (docs/design.md: zero-size operands and
# outputs are legal everywhere and launch nothing): empty results, and non-empty results of empty
# operands (a reduction's identity, a matmul over an empty contraction, the padding of an empty array).

def _emptied(a):
    """``a``'s dtype with a zero-size shape: ``(0,)`` for a vector, ``(n, 0, ...)`` otherwise."""
    a = np.asarray(a)
    if a.ndim == 0:
        return a
    shape = (0,) if a.ndim == 1 else (a.shape[0], 0) + a.shape[2:]
    return np.zeros(shape, a.dtype)


def _elementwise_empty_cases():
    seen = set()
    for name, prim, inputs, params in list(CASES):
        if prim.kind not in ("unary", "binary") or prim in seen or not any(np.ndim(a) for a in inputs):
            continue
        seen.add(prim)
        case(name + "_empty", prim, [_emptied(a) for a in inputs], **params)


_elementwise_empty_cases()
case("select_n_empty", P.select_n, [bools(0, 3), f32(0, 3), f32(0, 3)])
case("select_n_scalar_empty", P.select_n, [np.bool_(False), f32(2, 0), f32(2, 0)])
case("iota_empty", P.iota, [], dtype=dtypes.int32, shape=(0, 3), dimension=1)
case("broadcast_in_dim_empty", P.broadcast_in_dim, [f32(0)], shape=(2, 0), broadcast_dimensions=(1,))
case("broadcast_in_dim_to_empty", P.broadcast_in_dim, [f32(3, 1)], shape=(0, 3, 5), broadcast_dimensions=(1, 2))
case("reshape_empty", P.reshape, [f32(3, 0)], new_sizes=(0, 5))
case("reshape_empty_1d", P.reshape, [f32(0)], new_sizes=(0, 3))
case("transpose_empty", P.transpose, [f32(2, 0, 3)], permutation=(2, 0, 1))
case("rev_empty", P.rev, [f32(0, 4)], dimensions=(0, 1))
case("slice_to_empty", P.slice_p, [f32(5, 6)], start_indices=(2, 0), limit_indices=(2, 6), strides=(1, 1))
case("slice_empty", P.slice_p, [f32(4, 0)], start_indices=(1, 0), limit_indices=(3, 0), strides=(1, 1))
case("dynamic_slice_to_empty", P.dynamic_slice, [f32(5, 6), np.int32(3), np.int32(1)], slice_sizes=(0, 2))
case("dynamic_update_slice_empty_update", P.dynamic_update_slice, [f32(5, 6), f32(0, 3), np.int32(4),
                                                                    np.int32(1)])
case("dynamic_update_slice_empty", P.dynamic_update_slice, [f32(0, 6), f32(0, 3), np.int32(0), np.int32(1)])
case("pad_empty", P.pad, [f32(0, 3), np.float32(0.5)], padding_config=((1, 2, 0), (0, 1, 1)))
case("pad_empty_to_empty", P.pad, [f32(0, 3), np.float32(0.5)], padding_config=((0, 0, 0), (1, 1, 0)))
case("concatenate_empty_pieces", P.concatenate, [f32(0, 3), f32(2, 3), f32(0, 3)], dimension=0)
case("concatenate_empty", P.concatenate, [f32(0, 3), f32(0, 3)], dimension=0)
case("concatenate_empty_dim1", P.concatenate, [f32(2, 0), f32(2, 3), f32(2, 0), f32(2, 1)], dimension=1)
case("gather_from_empty_axis", P.gather, [f32(0, 4), np.array([[0], [2], [-1]], np.int32)], axes=(0,))
case("gather_no_indices", P.gather, [f32(5, 4), np.zeros((0, 1), np.int32)], axes=(0,))
for _p in (P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max):
    case(_p.name + "_no_updates", _p, [f32(4, 3), np.zeros((0, 1), np.int32), f32(0, 3)], axes=(0,))
case("scatter_add_into_empty", P.scatter_add, [f32(4, 0), np.array([[1], [3]], np.int32), f32(2, 0)], axes=(0,))
for _p in (P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min):
    case(_p.name + "_empty_axis", _p, [f32(0, 3)], axes=(0,))
    case(_p.name + "_empty_all_int", _p, [i32(0)], axes=(0,))
    case(_p.name + "_empty_kept_axis", _p, [f32(0, 3)], axes=(1,))
for _p in (P.reduce_and, P.reduce_or):
    case(_p.name + "_empty_axis", _p, [bools(3, 0)], axes=(1,))
    case(_p.name + "_empty_axis_u32", _p, [u32(0, 2)], axes=(0,))
case("argmax_empty", P.argmax, [f32(0, 3)], axes=(1,), index_dtype=dtypes.int32)
case("argmin_empty", P.argmin, [i32(4, 0, 2)], axes=(2,), index_dtype=dtypes.int32)
for _p in (P.cumsum, P.cumprod, P.cummax, P.cummin, P.cumlogsumexp):
    case(_p.name + "_empty", _p, [f32(0, 3)], axis=1, reverse=False)
    case(_p.name + "_empty_axis_rev", _p, [f32(3, 0)], axis=1, reverse=True)
case("sort_empty", P.sort, [f32(3, 0)], dimension=1, is_stable=True, num_keys=1)
case("sort_empty_2ops", P.sort, [f32(0), i32(0)], dimension=0, is_stable=True, num_keys=1)
case("dot_general_empty_contraction", P.dot_general, [f32(3, 0), f32(0, 4)],
     dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=None)
case("dot_general_empty_rows", P.dot_general, [f32(0, 4), f32(4, 5)], dimension_numbers=(((1,), (0,)), ((), ())),
     preferred_element_type=None)
case("dot_general_empty_batch_int", P.dot_general, [i32(0, 3, 4), i32(0, 4, 2)],
     dimension_numbers=(((2,), (1,)), ((0,), (0,))), preferred_element_type=None)

# Reductions past the sizes where libraries switch algorithms (docs/traps.md: 2048 on XLA's CPU; a parallel
# tree in the kernel backends from 64 elements): 4097 and 100003 elements.
_big = rng.uniform(-1, 1, 100003).astype(np.float32)
_big_ties = np.concatenate([_big[:50000], [2.0], _big[50001:70000], [2.0], _big[70001:]]).astype(np.float32)
case("reduce_sum_4097", P.reduce_sum, [_big[:4097].reshape(1, 4097)], axes=(1,))
case("reduce_sum_100003", P.reduce_sum, [_big], axes=(0,))
case("reduce_max_4097", P.reduce_max, [_big[:4097]], axes=(0,))
case("reduce_min_100003", P.reduce_min, [_big], axes=(0,))
case("argmax_ties_100003", P.argmax, [_big_ties], axes=(0,), index_dtype=dtypes.int32)
case("argmin_4097", P.argmin, [_big[:4097]], axes=(0,), index_dtype=dtypes.int32)
case("reduce_or_4097", P.reduce_or, [np.arange(4097, dtype=np.int32)], axes=(0,))


def _control_empty_cases():
    from fnarray.core import lax
    e = ShapedArray((0,), dtypes.float32)
    i = ShapedArray((), dtypes.int32)
    s = ShapedArray((), dtypes.float32)
    b1 = _closed(lambda x: [lax.mul(x, 2.0)], [e])
    b2 = _closed(lambda x: [lax.sin(x)], [e])
    case("cond_empty", P.cond, [np.int32(0), f32(0)], branches=(b1, b2))
    cond_p = _closed(lambda k, x: [lax.lt(k, 3)], [i, e])
    body_p = _closed(lambda k, x: [lax.add(k, 1), lax.mul(x, 1.5)], [i, e])
    case("while_empty_carry", P.while_p, [np.int32(0), f32(0)], cond_program=cond_p, body_program=body_p,
         cond_nconsts=0, body_nconsts=0)
    scan_p = _closed(lambda c, x: [lax.add(c, x), lax.mul(c, x)], [s, s])
    case("scan_length_0", P.scan, [np.float32(0.5), f32(0)], program=scan_p, num_consts=0, num_carry=1, length=0,
         reverse=False, unroll=1)
    call_p = _closed(lambda x, y: [lax.add(lax.mul(x, y), 1.0), lax.reduce_sum(x, (0,))], [e, e])
    case("call_empty", P.call, [f32(0), f32(0)], program=call_p, name="f")
    case("remat_empty", P.remat, [f32(0), f32(0)], program=call_p, prevent_cse=True)


_control_empty_cases()


def _fft_cases():
    """The fft primitive (fnarray.core.fft): each type, power-of-two (Stockham) and other (Bluestein) lengths."""
    from fnarray.core.fft import FftType, fft_p

    def c64(*shape):
        return (f32(*shape) + 1j * f32(*shape)).astype(np.complex64)
    case("fft_rfft", fft_p, [f32(3, 8)], fft_type=FftType.RFFT, fft_lengths=(8,))
    case("fft_fft_bluestein", fft_p, [c64(2, 12)], fft_type=FftType.FFT, fft_lengths=(12,))
    case("fft_ifft_2d", fft_p, [c64(2, 4, 5)], fft_type=FftType.IFFT, fft_lengths=(4, 5))
    case("fft_irfft_odd", fft_p, [c64(3, 4)], fft_type=FftType.IRFFT, fft_lengths=(7,))
    case("fft_empty_batch", fft_p, [c64(0, 8)], fft_type=FftType.FFT, fft_lengths=(8,))


_fft_cases()


def _quantized_cases():
    """quantized_matmul (fnarray.core.quantized): both layouts, a word-spanning width (3 bits), a batch of rows."""
    from fnarray.core.quantized import quantized_matmul_p as qmm
    packed = u32
    case("quantized_matmul_4bit", qmm, [f32(2, 64), packed(6, 8), f32(6, 2), f32(6, 2)], transpose=True,
         group_size=32, bits=4, mode="affine")
    own = np.random.default_rng(30)   # its own stream: the cases after it keep their data
    mx_args = [own.uniform(-2, 2, (2, 64)).astype(np.float32),
               own.integers(0, 2**32 - 1, (6, 8), dtype=np.uint64).astype(np.uint32),
               own.integers(117, 137, (6, 2)).astype(np.uint8)]   # E8M0 scales 2**-10 .. 2**9
    case("quantized_matmul_mxfp4", qmm, mx_args, transpose=True, group_size=32, bits=4, mode="mxfp4")
    own8 = np.random.default_rng(31)
    words = own8.integers(0, 2**32 - 1, (6, 16), dtype=np.uint64).astype(np.uint32)
    words &= np.uint32(0xBFBFBFBF)   # E4M3 codes with exponent fields below 8: magnitudes below 2
    case("quantized_matmul_mxfp8", qmm, [own8.uniform(-2, 2, (2, 64)).astype(np.float32), words,
                                        own8.integers(117, 137, (6, 2)).astype(np.uint8)],
         transpose=True, group_size=32, bits=8, mode="mxfp8")
    case("quantized_matmul_nvfp4_no_transpose", qmm,
         [own8.uniform(-2, 2, (3, 8)).astype(np.float32),
          own8.integers(0, 2**32 - 1, (8, 4), dtype=np.uint64).astype(np.uint32),
          own8.integers(24, 88, (8, 2)).astype(np.uint8)],   # E4M3 scales 2**-4 .. 2**4
         transpose=False, group_size=16, bits=4, mode="nvfp4")
    case("quantized_matmul_3bit_rows", qmm, [f32(5, 3, 64), packed(4, 6), f32(4, 1), f32(4, 1)], transpose=True,
         group_size=64, bits=3, mode="affine")
    case("quantized_matmul_no_transpose", qmm, [f32(3, 8), packed(8, 16), f32(8, 2), f32(8, 2)], transpose=False,
         group_size=32, bits=8, mode="affine")
    case("quantized_matmul_empty", qmm, [f32(0, 32), packed(4, 2), f32(4, 1), f32(4, 1)], transpose=True,
         group_size=32, bits=2, mode="affine")


_quantized_cases()


def _pallas_cases():
    """pallas_call (fnarray.core.pallas): a row-softmax kernel over a grid of two row blocks, whose params are
    traced by fnarray.experimental.pallas."""
    import fnarray
    import fnarray.experimental.pallas as pl

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        e = fnarray.numpy.exp(x - fnarray.numpy.max(x, axis=-1, keepdims=True))
        o_ref[...] = e / fnarray.numpy.sum(e, axis=-1, keepdims=True) + pl.program_id(0).astype(x.dtype)

    x = f32(4, 8)
    spec = pl.BlockSpec((2, 8), lambda i: (i, 0))
    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), in_specs=[spec],
                       out_specs=spec)
    (eqn,) = fnarray.make_ir(f)(x).eqns
    case("pallas_call_softmax", eqn.primitive, [x], **dict(eqn.params))
    empty = f32(0, 8)   # no rows: a grid of no program instance, an empty result
    f0 = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(empty.shape, empty.dtype), grid=(1,), in_specs=[spec],
                        out_specs=spec)
    (eqn,) = fnarray.make_ir(f0)(empty).eqns
    # traced with one instance, then given the zero grid: pallas_call itself binds no equation for a grid with a
    # zero axis (it returns the unwritten results), and the primitive's rules must still take one
    case("pallas_call_empty", eqn.primitive, [empty], **dict(eqn.params, grid=(0,)))


_pallas_cases()
def _attention_cases():
    """dot_product_attention (fnarray.core.attention): grouped-query heads with every mask kind, and plain."""
    from fnarray.core.attention import dot_product_attention_p as att
    case("dot_product_attention_gqa_masks", att, [f32(2, 3, 4, 8), f32(2, 5, 2, 8), f32(2, 5, 2, 8), f32(1, 4, 3, 5),
                                                  bools(2, 1, 3, 5)],
         scale=0.35, is_causal=True, local_window=(2, 0), has_bias=True, has_mask=True)
    case("dot_product_attention_plain", att, [f32(1, 4, 2, 4), f32(1, 19, 2, 4), f32(1, 19, 2, 4)], scale=0.5,
         is_causal=False, local_window=None, has_bias=False, has_mask=False)
    case("dot_product_attention_kv_lengths", att, [f32(2, 3, 4, 8), f32(2, 21, 2, 8), f32(2, 21, 2, 8),
                                                   bools(2, 1, 3, 21), np.array([0, 9], np.int32)],
         scale=0.35, is_causal=False, local_window=None, has_bias=False, has_mask=True, has_lengths=True)
    case("dot_product_attention_kv_lengths_causal", att, [f32(2, 3, 4, 8), f32(2, 21, 2, 8), f32(2, 21, 2, 8),
                                                          np.array([2, 21], np.int32)],
         scale=0.35, is_causal=True, local_window=None, has_bias=False, has_mask=False, has_lengths=True)
    # lower_right: the queries at the end of the keys (MLX's mask="causal"), the offset L - T data with key lengths
    # (below T, past S + T), with a window and a mask operand; without lengths the static S - T.
    case("dot_product_attention_lower_right_lengths", att, [f32(3, 4, 4, 8), f32(3, 21, 2, 8), f32(3, 21, 2, 8),
                                                            np.array([2, 13, 30], np.int32)],
         scale=0.35, is_causal=True, local_window=None, has_bias=False, has_mask=False, has_lengths=True,
         lower_right=True)
    case("dot_product_attention_lower_right_window_mask", att, [f32(2, 3, 4, 8), f32(2, 21, 2, 8), f32(2, 21, 2, 8),
                                                                bools(2, 1, 3, 21), np.array([7, 21], np.int32)],
         scale=0.35, is_causal=True, local_window=(4, 1), has_bias=False, has_mask=True, has_lengths=True,
         lower_right=True)
    case("dot_product_attention_lower_right_static", att, [f32(1, 5, 2, 4), f32(1, 19, 2, 4), f32(1, 19, 2, 4)],
         scale=0.5, is_causal=True, local_window=None, has_bias=False, has_mask=False, lower_right=True)
    # keys and values heads first (B, K, S, H): KVCache's layout
    case("dot_product_attention_heads_first", att, [f32(2, 3, 4, 8), f32(2, 2, 21, 8), f32(2, 2, 21, 8),
                                                    f32(1, 4, 3, 21), bools(2, 1, 3, 21), np.array([7, 21], np.int32)],
         scale=0.35, is_causal=True, local_window=(4, 1), has_bias=True, has_mask=True, has_lengths=True,
         lower_right=True, kv_heads_first=True)
    case("dot_product_attention_no_keys", att, [f32(1, 3, 2, 4), f32(1, 0, 2, 4), f32(1, 0, 2, 4)], scale=0.5,
         is_causal=False, local_window=None, has_bias=False, has_mask=False)


_attention_cases()


def _conv_cases():
    from fnarray.core.conv import ConvDimensionNumbers, conv_general_dilated_p as conv
    nchw = ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
    nhwc = ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))   # NHWC, HWIO, NHWC
    plain = dict(lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=1, batch_group_count=1,
                 precision=None, preferred_element_type=None)
    case("conv_general_dilated_nchw", conv, [f32(2, 3, 6, 5), f32(4, 3, 3, 2)], window_strides=(1, 2),
         padding=((1, 1), (0, 1)), dimension_numbers=nchw, **plain)
    case("conv_general_dilated_nhwc_groups_dilated", conv, [f32(2, 7, 6, 4), f32(2, 3, 2, 6)],
         window_strides=(2, 1), padding=((1, -1), (2, 0)), dimension_numbers=nhwc,
         **{**plain, "lhs_dilation": (1, 2), "rhs_dilation": (2, 1), "feature_group_count": 2})
    case("conv_general_dilated_1d_batch_groups", conv, [f32(4, 2, 9), f32(6, 2, 3)], window_strides=(2,),
         padding=((1, 2),), dimension_numbers=ConvDimensionNumbers((0, 1, 2), (0, 1, 2), (0, 1, 2)),
         **{**plain, "lhs_dilation": (1,), "rhs_dilation": (1,), "batch_group_count": 2})
    case("conv_general_dilated_int", conv, [i32(1, 2, 5, 4, lo=-5, hi=5), i32(3, 2, 2, 2, lo=-5, hi=5)],
         window_strides=(1, 1), padding=((0, 0), (1, 0)), dimension_numbers=nchw, **plain)
    case("conv_general_dilated_empty_features", conv, [f32(2, 0, 4, 4), f32(3, 0, 2, 2)], window_strides=(1, 1),
         padding=((0, 0), (0, 0)), dimension_numbers=nchw, **plain)
    case("conv_general_dilated_empty_batch", conv, [f32(0, 2, 4, 4), f32(3, 2, 2, 2)], window_strides=(1, 1),
         padding=((0, 0), (0, 0)), dimension_numbers=nchw, **plain)


_conv_cases()


def _window_cases():
    """reduce_window and the max/min gradients' selections (fnarray.core.windows): strides, padding (negative
    too), both dilations, ties, NaN, integers and empty operands."""
    from fnarray.core import windows as W

    def win(rank, w, s=None, pad=None, bd=None, wd=None):
        return dict(window_dimensions=w, window_strides=s or (1,) * rank, padding=pad or ((0, 0),) * rank,
                    base_dilation=bd or (1,) * rank, window_dilation=wd or (1,) * rank)

    pool = win(4, (1, 2, 2, 1), (1, 2, 2, 1))
    general = win(3, (2, 3, 1), (1, 2, 1), ((1, 0), (2, -1), (0, 0)), (2, 1, 1), (1, 2, 1))
    ties = np.array([[1, 3, 3, 0], [3, 2, 3, 3], [0, 3, 1, 3]], np.float32)
    nan = np.array([[1, np.nan, 2, 5], [np.nan, 0, 7, np.nan]], np.float32)
    # A few cases per primitive (each is a kernel compile on opencl/webgpu); tests/test_windows.py has the table.
    S, M, N = W.reduce_window_sum_p, W.reduce_window_max_p, W.reduce_window_min_p
    case("reduce_window_sum_general", S, [f32(3, 6, 2)], **general)
    case("reduce_window_sum_int", S, [i32(5, 4)], **win(2, (2, 2), (1, 2), ((1, 1), (0, 1))))
    case("reduce_window_max_pool", M, [f32(2, 4, 6, 3)], **pool)
    case("reduce_window_max_nan", M, [nan], **win(2, (1, 2)))
    case("reduce_window_min_general", N, [f32(3, 6, 2)], **general)
    case("reduce_window_min_int", N, [i32(5, 4)], **win(2, (2, 2), (1, 2), ((1, 1), (0, 1))))
    for p in (S, M, N):
        case(p.name + "_empty", p, [f32(0, 4)], **win(2, (1, 2)))
    for p in (W.select_and_gather_add_p, W.select_and_scatter_add_p):
        def first(x, params, p=p):
            if p is W.select_and_gather_add_p:
                return f32(*x.shape)
            return f32(*W.window_out_shape(p.name, x.shape, **params))
        for tag, prim, x, params in [("max_general", P.ge, f32(3, 6, 2), general),
                                     ("min_ties", P.le, ties, win(2, (2, 2), (1, 1), ((0, 1), (1, 0)))),
                                     ("max_int_pool", P.ge, i32(4, 6, lo=-3, hi=3), win(2, (2, 2), (2, 2))),
                                     ("max_empty", P.ge, f32(0, 4), win(2, (1, 2)))]:
            case(f"{p.name}_{tag}", p, [first(x, params), x], select_prim=prim, **params)


_window_cases()


def _threefry_cases():
    """The threefry2x32 primitive (fnarray.core.prng): one shape, a rank-0 high word as fnarray.random uses it."""
    from fnarray.core.prng import threefry2x32_p
    case("threefry2x32", threefry2x32_p, [u32(), u32(), u32(3, 5), u32(3, 5)])
    case("threefry2x32_scalar_counter", threefry2x32_p, [u32(), u32(), np.uint32(0), u32(7)])
    case("threefry2x32_empty", threefry2x32_p, [u32(), u32(), u32(0, 2), u32(0, 2)])


_threefry_cases()

# The linear-algebra primitives' cases live beside their definitions' tests (fnarray/testing/linalg_cases.py).
from fnarray.testing.linalg_cases import add_cases as _add_linalg_cases  # noqa: E402

_add_linalg_cases(case)
