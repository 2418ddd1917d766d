"""The jax backend: the IR lowered to ``jax.lax``, one ``jax.jit`` per program.

Devices ``jax:N`` are what ``jax.devices()`` reports (CPU here; CUDA GPUs and
TPUs where JAX sees them). Every primitive has a rule in ``RULES`` that
reproduces the reference semantics of ``numpy_impls`` (integer division by
zero gives 0, saturating float->int casts, NaN sorting last...). Programs with
64-bit types are lowered and run inside ``jax.enable_x64(True)`` so the user's
own JAX configuration is never changed; programs without them do not pay for it.
Random numbers come from fnarray's Threefry (plain uint32 primitives), so they
equal the other backends' bit for bit.
"""

from __future__ import annotations

import contextlib
import functools
import weakref

import threading

import numpy as np

from fnarray.core import profile as _profile
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.decompositions import accumulates_in_low_precision
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Literal, Program
from fnarray.core.passes import dce, walk_eqns
from fnarray.core.prng import threefry2x32_p
from fnarray.devices import compile_cache
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered
from fnarray.lowering.jax.conv import conv_general_dilated_rule

try:
    import jax
    import jax.numpy as jnp
    from jax import lax
    import jax.extend.random as jax_random_ext
except ImportError as e:  # pragma: no cover - exercised where jax is missing
    raise BackendUnavailable("the jax backend needs JAX: not installed (to fix: pip install 'fnarray[jax]')") from e

from fnarray.lowering.jax import windows as jax_windows  # noqa: E402  (imports jax: after the check above)

__all__ = ["make_backend", "RULES", "JaxBackend"]

RULES: dict = {}


def rule(prim):
    def deco(fn):
        RULES[prim] = fn
        return fn
    return deco


def _direct(prim, fn):
    RULES[prim] = lambda *args, **params: fn(*args)


# ------------------------------------------------------------------------------ elementwise

for _p, _f in [(P.neg, lax.neg), (P.sign, lax.sign), (P.floor, lax.floor), (P.ceil, lax.ceil),
               (P.is_finite, lax.is_finite), (P.exp, lax.exp), (P.exp2, lax.exp2), (P.log, lax.log),
               (P.log1p, lax.log1p), (P.expm1, lax.expm1), (P.tanh, lax.tanh), (P.logistic, lax.logistic),
               (P.sin, lax.sin), (P.cos, lax.cos), (P.tan, lax.tan), (P.asin, lax.asin), (P.acos, lax.acos),
               (P.atan, lax.atan), (P.sinh, lax.sinh), (P.cosh, lax.cosh), (P.asinh, lax.asinh),
               (P.acosh, lax.acosh), (P.atanh, lax.atanh), (P.sqrt, lax.sqrt), (P.rsqrt, lax.rsqrt),
               (P.cbrt, lax.cbrt), (P.erf, lax.erf), (P.erf_inv, lax.erf_inv), (P.lgamma, lax.lgamma),
               (P.digamma, lax.digamma), (P.abs_p, lax.abs), (P.not_p, lax.bitwise_not), (P.real, lax.real),
               (P.imag, lax.imag), (P.conj, lax.conj), (P.population_count, lax.population_count)]:
    _direct(_p, _f)
_direct(P.erfc, lax.erfc)



def _digamma(x):
    # XLA gives NaN at 0; the reference gives the pole's sign there (-inf at +0, +inf at -0), which
    # -1/x is. XLA flushes subnormal inputs, so they land here too, as the subnormal rule allows.
    return jnp.where(x == 0, -1 / x, lax.digamma(x)).astype(x.dtype)


RULES[P.digamma] = _digamma
RULES[P.abs_p] = lambda x: x if jnp.issubdtype(x.dtype, jnp.unsignedinteger) else lax.abs(x)


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


# XLA's own float32 form of these is far less accurate than fnarray's decomposition (XLA's float32 erfc is 60 ulps
# off near x = 8.6, measured against math.erfc): below float64 the decomposition is used.
_INACCURATE_BELOW_F64 = frozenset({P.erfc})
_SCANS = frozenset({P.cumsum, P.cumprod, P.cumlogsumexp})
RULES[P.round_p] = lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
RULES[P.stop_gradient] = lambda x: x
RULES[P.copy_p] = lambda x: x
RULES[P.name_p] = lambda x, *, name: x
RULES[P.integer_pow] = lambda x, *, y: lax.integer_pow(x, y)


def _bcast(x, y):
    """Rank-0 operands broadcast in fnarray's binary primitives; lax wants equal shapes."""
    sx, sy = jnp.shape(x), jnp.shape(y)
    if sx == sy:
        return x, y
    if sx == ():
        return lax.broadcast(x, sy), y
    return x, lax.broadcast(y, sx)


def _binary(prim, fn):
    def f(x, y):
        return fn(*_bcast(x, y))
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
    return lax.add(*_bcast(x, y))


def _sub(x, y):
    if (jnp.shape(x) == jnp.shape(y) or jnp.shape(y) == ()) and _is_zero_const(y, True):
        return _plus_zero(lax.broadcast(x, jnp.shape(y)) if jnp.shape(x) == () else x)  # x - (-0.0) = x + 0.0
    return lax.sub(*_bcast(x, y))


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


@rule(P.convert_element_type)
def _convert(x, *, new_dtype, weak_type=False):
    src = x.dtype
    if src == new_dtype:
        return x
    if new_dtype == np.bool_:
        return x != 0
    if jnp.issubdtype(src, jnp.complexfloating) and not dtypes.is_complex(new_dtype):
        x = lax.real(x)
        src = x.dtype
    if jnp.issubdtype(src, jnp.floating) and dtypes.is_int(new_dtype):
        info = np.iinfo(new_dtype)
        hi = np.array(info.max, new_dtype)
        lo = np.array(info.min, new_dtype)
        xf = lax.convert_element_type(x, np.float32) if src in (dtypes.float16, dtypes.bfloat16) else x
        t = jnp.where(jnp.isnan(xf), jnp.zeros_like(xf), xf)
        conv = lax.convert_element_type(jnp.clip(t, float(info.min), float(info.max)), new_dtype)
        return jnp.where(t >= float(info.max), hi, jnp.where(t <= float(info.min), lo, conv))
    return lax.convert_element_type(x, new_dtype)


RULES[P.bitcast_convert_type] = lambda x, *, new_dtype: lax.bitcast_convert_type(x, new_dtype)

# ------------------------------------------------------------------------------ structural

RULES[P.iota] = lambda *, dtype, shape, dimension: lax.broadcasted_iota(dtype, shape, dimension)
RULES[P.broadcast_in_dim] = lambda x, *, shape, broadcast_dimensions: lax.broadcast_in_dim(
    x, shape, broadcast_dimensions)
RULES[P.reshape] = lambda x, *, new_sizes: lax.reshape(x, new_sizes)
RULES[P.transpose] = lambda x, *, permutation: lax.transpose(x, permutation)
RULES[P.rev] = lambda x, *, dimensions: lax.rev(x, dimensions)
RULES[P.slice_p] = lambda x, *, start_indices, limit_indices, strides: lax.slice(
    x, start_indices, limit_indices, strides)
def _clamp_starts(starts, sizes, shape):
    # XLA clamps start indices into range; jax.lax would first wrap negative ones (NumPy style).
    return [jnp.clip(s, 0, n - k).astype(s.dtype) for s, k, n in zip(starts, sizes, shape, strict=True)]


RULES[P.dynamic_slice] = lambda x, *starts, slice_sizes: lax.dynamic_slice(
    x, _clamp_starts(starts, slice_sizes, x.shape), slice_sizes)
RULES[P.dynamic_update_slice] = lambda x, u, *starts: lax.dynamic_update_slice(
    x, u, _clamp_starts(starts, u.shape, x.shape))
RULES[P.pad] = lambda x, v, *, padding_config: lax.pad(x, v, padding_config)
#: From this many operands a concatenate is lowered flat (see ``_concatenate``).
FLAT_CONCATENATE_FROM = 32


@rule(P.concatenate)
def _concatenate(*xs, dimension):
    # NOTE: XLA's CPU compiler takes time superlinear in the operand count for a concatenate along a
    # leading dimension of 2-d pieces (1,000 pieces of (1, 3): 105 s measured) but not for 1-d pieces
    # (1.7 s); row-major, concatenating along the leading axis is concatenating the flat arrays.
    if len(xs) < FLAT_CONCATENATE_FROM or xs[0].ndim < 2:
        return lax.concatenate(xs, dimension)
    moved = [jnp.moveaxis(x, dimension, 0) if dimension else x for x in xs]
    rest = moved[0].shape[1:]
    flat = lax.concatenate([x.reshape(-1) for x in moved], 0)
    out = flat.reshape((sum(x.shape[0] for x in moved),) + rest)
    return jnp.moveaxis(out, 0, dimension) if dimension else out


def _moved(x, axes):
    return jnp.moveaxis(x, axes, tuple(range(len(axes))))


@rule(P.gather)
def _gather(x, indices, *, axes):
    if any(x.shape[a] == 0 for a in axes):
        shape = indices.shape[:-1] + tuple(n for i, n in enumerate(x.shape) if i not in axes)
        return jnp.zeros(shape, x.dtype)
    idx = tuple(jnp.clip(indices[..., k], 0, x.shape[a] - 1) for k, a in enumerate(axes))
    return _moved(x, axes)[idx]


# Booleans add as logical or and multiply as logical and (NumPy's bool arithmetic); jnp's .at[].add
# rejects bool, so those scatters use max and min, which are or and and on booleans.
_BOOL_SCATTER = {"add": "max", "multiply": "min"}


def _scatter(method):
    def f(x, indices, updates, *, axes):
        if indices.size == 0 or any(x.shape[a] == 0 for a in axes):
            return x
        m = _BOOL_SCATTER.get(method, method) if x.dtype == np.bool_ else method
        # Negative indices are out of bounds (dropped), not counted from the end as jnp's would be.
        idx = tuple(jnp.where(indices[..., k] < 0, x.shape[a], indices[..., k]) for k, a in enumerate(axes))
        out = getattr(_moved(x, axes).at[idx], m)(updates, mode="drop")
        return jnp.moveaxis(out, tuple(range(len(axes))), axes)
    return f


RULES[P.scatter] = _scatter("set")
RULES[P.scatter_add] = _scatter("add")
RULES[P.scatter_mul] = _scatter("multiply")
RULES[P.scatter_min] = _scatter("min")
RULES[P.scatter_max] = _scatter("max")

# ------------------------------------------------------------------------------ reductions

RULES[P.reduce_sum] = lambda x, *, axes: lax.reduce_sum(x, axes) if x.dtype not in (
    dtypes.float16, dtypes.bfloat16) else lax.convert_element_type(
    lax.reduce_sum(lax.convert_element_type(x, np.float32), axes), x.dtype)
RULES[P.reduce_prod] = lambda x, *, axes: lax.reduce_prod(x, axes)


def _nan_first_max(a, b):
    return lax.select(lax.ne(a, a) | lax.gt(a, b), a, b)


def _nan_first_min(a, b):
    return lax.select(lax.ne(a, a) | lax.lt(a, b), a, b)


def _reduce_extreme(plain, nan_first, bool_reduce, identity):
    """max/min reductions that propagate NaN (docs/design.md "Edge cases").

    XLA's CPU reduce_max/reduce_min lose a NaN in arrays longer than ~2048 elements (its
    vectorized loop uses maxps/minps, which return the second operand on NaN), so float
    reductions use a comparator that keeps a NaN operand: measured ~1.7x the plain
    reduction on 10M float32 elements, where an extra isnan any-reduction cost ~4.5x.
    """
    def f(x, *, axes):
        if x.dtype == np.bool_:
            return bool_reduce(x, axes)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return plain(x, axes)
        if getattr(manual, "gspmd", 0):
            # XLA's SPMD partitioner refuses a reduction with a custom comparator over a sharded operand
            # ("Unsupported reduction computation"): the plain reduction with the NaNs found apart
            nan = lax.reduce_or(lax.ne(x, x), axes)
            return lax.select(nan, jnp.full(nan.shape, np.nan, x.dtype), plain(x, axes))
        return lax.reduce(x, np.array(identity, x.dtype), nan_first, axes)
    return f


RULES[P.reduce_max] = _reduce_extreme(lax.reduce_max, _nan_first_max, lax.reduce_or, -np.inf)
RULES[P.reduce_min] = _reduce_extreme(lax.reduce_min, _nan_first_min, lax.reduce_and, np.inf)
RULES[P.reduce_and] = lambda x, *, axes: lax.reduce_and(x, axes)
RULES[P.reduce_or] = lambda x, *, axes: lax.reduce_or(x, axes)
RULES[P.argmax] = lambda x, *, axes, index_dtype: lax.argmax(x, axes[0], index_dtype)
RULES[P.argmin] = lambda x, *, axes, index_dtype: lax.argmin(x, axes[0], index_dtype)
RULES[P.cumsum] = lambda x, *, axis, reverse=False: lax.cumsum(x, axis, reverse)
RULES[P.cumprod] = lambda x, *, axis, reverse=False: lax.cumprod(x, axis, reverse)


def _cum_extreme(fn):
    def f(x, *, axis, reverse=False):
        if x.dtype == np.bool_:  # lax.cummax/cummin take numbers only; on booleans they are or/and
            return fn(x.astype(np.uint8), axis, reverse).astype(np.bool_)
        return fn(x, axis, reverse)
    return f


RULES[P.cummax] = _cum_extreme(lax.cummax)
RULES[P.cummin] = _cum_extreme(lax.cummin)
RULES[P.cumlogsumexp] = lambda x, *, axis, reverse=False: lax.cumlogsumexp(x, axis, reverse)


@rule(P.sort)
def _sort(*xs, dimension, is_stable, num_keys):
    if xs[0].ndim == 0:
        return list(xs)
    # fnarray sorts -0.0 equal to 0.0 and every NaN last; XLA's total order does neither.
    keys = []
    for k in xs[:num_keys]:
        if jnp.issubdtype(k.dtype, jnp.floating):
            k = jnp.where(jnp.isnan(k), jnp.array(np.nan, k.dtype), k + jnp.zeros((), k.dtype))
        keys.append(k)
    out = lax.sort(tuple(keys) + tuple(xs), dimension=dimension, is_stable=True, num_keys=num_keys)
    return list(out[num_keys:])


# fft (its own module, fnarray.lowering.jax.fft): jax.lax.fft.
from fnarray.core.fft import fft_p as _fft_p  # noqa: E402
from fnarray.lowering.jax.fft import jax_fft as _jax_fft  # noqa: E402

RULES[_fft_p] = _jax_fft

# quantized_matmul (fnarray.lowering.jax.quantized): unpacking and scaling fused by XLA into one dot.
from fnarray.core.quantized import quantized_matmul_p as _quantized_matmul_p  # noqa: E402
from fnarray.lowering.jax.quantized import jax_quantized_matmul as _jax_qmm  # noqa: E402

RULES[_quantized_matmul_p] = _jax_qmm

from fnarray.lowering.jax.attention import RULES as _ATTENTION  # noqa: E402  (jax.nn.dot_product_attention)

RULES.update(_ATTENTION)


@rule(P.dot_general)
def _dot_general(x, y, *, dimension_numbers, preferred_element_type=None):
    if x.dtype == np.bool_:
        r = lax.dot_general(x.astype(np.int32), y.astype(np.int32), dimension_numbers)
        return r > 0
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        r = lax.dot_general(x, y, dimension_numbers, preferred_element_type=np.float32)
        return r.astype(preferred_element_type or x.dtype)
    return lax.dot_general(x, y, dimension_numbers, preferred_element_type=preferred_element_type)

# Convolutions: their rule lives in jax_conv.py.
RULES[conv_general_dilated_p] = conv_general_dilated_rule

# ------------------------------------------------------------------------------ control flow


def _interpret(prog: Program, args):
    env = {}
    for v, x in zip(list(prog.constvars) + list(prog.invars), args, strict=True):
        env[v] = x

    def read(a):
        return np.asarray(a.val) if isinstance(a, Literal) else env[a]

    for e in prog.eqns:
        outs = RULES[e.primitive](*[read(a) for a in e.inputs], **e.params)
        if not e.primitive.multiple_results:
            outs = [outs]
        for v, o in zip(e.outputs, outs, strict=True):
            env[v] = o
    return [read(a) for a in prog.outvars]


@rule(threefry2x32_p)
def _threefry2x32(k0, k1, x0, x1):
    # JAX's own primitive: a rolled loop on CPUs (which XLA's fusion cannot copy into every reader of the
    # random bits), its own kernel on GPUs.
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in (k0, k1, x0, x1)))
    ops = [jnp.broadcast_to(jnp.asarray(a, jnp.uint32), shape) for a in (k0, k1, x0, x1)]
    return list(jax_random_ext.threefry2x32_p.bind(*ops))


@rule(P.cond)
def _cond(index, *ops, branches):
    fns = [functools.partial(_branch, b) for b in branches]
    return lax.switch(index, fns, *ops)


def _branch(prog, *ops):
    return _interpret(prog, list(ops))


@rule(P.while_p)
def _while(*args, cond_program, body_program, cond_nconsts, body_nconsts):
    cc = list(args[:cond_nconsts])
    bc = list(args[cond_nconsts:cond_nconsts + body_nconsts])
    init = tuple(args[cond_nconsts + body_nconsts:])
    out = lax.while_loop(lambda c: _interpret(cond_program, cc + list(c))[0],
                         lambda c: tuple(_interpret(body_program, bc + list(c))), init)
    return list(out)


@rule(P.scan)
def _scan(*args, program, num_consts, num_carry, length, reverse, unroll=1):
    consts = list(args[:num_consts])
    carry = tuple(args[num_consts:num_consts + num_carry])
    xs = tuple(args[num_consts + num_carry:])

    def body(c, x):
        outs = _interpret(program, consts + list(c) + list(x))
        return tuple(outs[:num_carry]), tuple(outs[num_carry:])

    c, ys = lax.scan(body, carry, xs, length=length, reverse=reverse, unroll=unroll)
    return list(c) + list(ys)


RULES[P.call] = lambda *args, program, name="call": _interpret(program, list(args))
RULES[P.remat] = lambda *args, program, prevent_cse=True, policy=None: _interpret(program, list(args))
RULES[P.custom_jvp_call] = lambda *args, call_program, **kw: _interpret(call_program, list(args))
RULES[P.custom_vjp_call] = lambda *args, call_program, **kw: _interpret(call_program, list(args))

#: per thread, how many ``shard_map`` bodies are being lowered around the current rule (lowering/jax/spmd.py)
manual = threading.local()


def _debug_callback(*args, callback, in_tree, nbatch=0):
    def host(*xs):
        callback.run(in_tree, [np.asarray(x) for x in xs], nbatch)
    # NOTE: JAX refuses ordered effects over several devices; inside a shard_map body each device calls the
    # function with its block, unordered across devices (as jax.debug.print there)
    jax.debug.callback(host, *args, ordered=not getattr(manual, "depth", 0))
    return []


RULES[P.debug_callback] = _debug_callback

RULES.update(jax_windows.RULES)  # reduce_window and the max/min gradients' selections

_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}

# ------------------------------------------------------------------------------ backend

_X64 = frozenset({dtypes.float64, dtypes.int64, dtypes.uint64, dtypes.complex128})


def _needs_x64(prog: Program) -> bool:
    """Whether the program holds any 64-bit type (then it runs inside ``jax.enable_x64``)."""
    seen = {v.aval.dtype for v in list(prog.constvars) + list(prog.invars)}
    for e in walk_eqns(prog):
        seen.update(a.aval.dtype for a in e.inputs)
        seen.update(o.aval.dtype for o in e.outputs)
        seen.update(p for p in e.params.values() if isinstance(p, np.dtype))
    return not seen.isdisjoint(_X64)


def _x64(on: bool):
    return jax.enable_x64(True) if on else contextlib.nullcontext()


#: Programs with more inputs than this take their small inputs packed, one flat array per dtype: XLA's
#: compile time grows faster than linearly in the number of parameters (measured on the CPU:
#: ``jnp.concatenate`` of 2,000 small arrays under ``jax.jit`` compiles in 24 s; packed, 2.8 s).
PACK_INPUTS_ABOVE = 128
_PACK_MAX_ELEMENTS = 4096


def _packing(prog: Program, donate):
    """``{dtype: [input positions]}`` of the small inputs to pack, or ``None``."""
    ins = list(prog.constvars) + list(prog.invars)
    if len(ins) <= PACK_INPUTS_ABOVE or donate:
        return None
    groups: dict = {}
    for i, v in enumerate(ins):
        if v.aval.size <= _PACK_MAX_ELEMENTS:
            groups.setdefault(v.aval.dtype, []).append(i)
    return {d: pos for d, pos in groups.items() if len(pos) > 1} or None


class JaxLowered(Lowered):
    def __init__(self, program, device, donate=()):
        super().__init__(program, device)
        compile_cache.configure_jax()
        self.x64 = _needs_x64(program)
        prog, _ = dce(program)
        self._prog = prog
        handle = device.handle
        ins = list(prog.constvars) + list(prog.invars)
        self._packing = packing = _packing(prog, donate)

        if packing is None:
            def fn(*args):
                return _interpret(prog, list(args))
        else:
            packed_pos = {i for pos in packing.values() for i in pos}
            rest = [i for i in range(len(ins)) if i not in packed_pos]
            self._rest = rest

            def fn(*args):
                # args: one flat array per packed dtype (in ``packing`` order), then the other inputs.
                vals = [None] * len(ins)
                for flat, pos in zip(args, packing.values(), strict=False):
                    off = 0
                    for i in pos:
                        aval = ins[i].aval
                        vals[i] = lax.slice(flat, (off,), (off + aval.size,)).reshape(aval.shape)
                        off += aval.size
                for i, a in zip(rest, args[len(packing):], strict=True):
                    vals[i] = a
                return _interpret(prog, vals)

        self._jitted = jax.jit(fn, donate_argnums=tuple(donate))
        self._gspmd = None
        if any(e.primitive in (P.reduce_max, P.reduce_min) for e in walk_eqns(prog)):
            def fn_gspmd(*args):
                manual.gspmd = getattr(manual, "gspmd", 0) + 1
                try:
                    return fn(*args)
                finally:
                    manual.gspmd -= 1
            self._gspmd = jax.jit(fn_gspmd, donate_argnums=tuple(donate))
        # A program without inputs has nothing to say where it runs: pin it to the device.
        self._pin = None if (prog.invars or prog.constvars) else handle

    def _jit_avals(self):
        """The abstract arguments of the jitted function (packed inputs first where they are packed)."""
        ins = list(self._prog.constvars) + list(self._prog.invars)
        if self._packing is None:
            return [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in ins]
        packed = [jax.ShapeDtypeStruct((sum(ins[i].aval.size for i in pos),), d) for d, pos in self._packing.items()]
        return packed + [jax.ShapeDtypeStruct(ins[i].aval.shape, ins[i].aval.dtype) for i in self._rest]

    def as_text(self) -> str:
        """StableHLO of the program (as ``jax.jit(f).lower(...).as_text()``)."""
        with _x64(self.x64):
            return self._jitted.lower(*self._jit_avals()).as_text()

    def memory_use(self):
        """XLA's own count after fusion (``Compiled.memory_analysis``): its temporary buffer and the outputs.
        Compiling here costs nothing later: the first call finds JAX's compilation cache warm."""
        with jax.default_device(self.device.handle), _x64(self.x64):
            m = self._jitted.lower(*self._jit_avals()).compile().memory_analysis()
        if m is None:
            return None
        return [("XLA's temporary buffers", int(m.temp_size_in_bytes)),
                ("the outputs", int(m.output_size_in_bytes) - int(m.alias_size_in_bytes))]

    def compile(self):
        jitted, x64 = self._jitted, self.x64
        if _profile.recorder is not None:
            # XLA compiles on the first call; under the profiler it compiles here, ahead of time, so that
            # its time is a span of its own (the first call then finds JAX's cache warm).
            with _profile.span("compile", "XLA compile", device=str(self.device)), _x64(x64):
                jitted.lower(*self._jit_avals()).compile()
        if self._packing is not None:
            jitted = self._packed_call(jitted)
        if self._pin is not None:
            pin = self._pin

            def exe(bufs):
                with jax.default_device(pin), _x64(x64):
                    return list(jitted(*bufs))
            return exe
        if self._gspmd is not None:
            # Float max/min reductions: their NaN-keeping comparator is refused by XLA's partitioner over
            # arrays sharded across devices; such calls take the program traced with plain reductions.
            gspmd = self._packed_call(self._gspmd) if self._packing is not None else self._gspmd

            def exe(bufs):
                with _x64(x64):
                    try:
                        return list(jitted(*bufs))
                    except jax.errors.JaxRuntimeError as e:
                        if "Unsupported reduction computation" not in str(e):
                            raise
                        return list(gspmd(*bufs))
            return exe
        if x64:
            def exe(bufs):
                with jax.enable_x64(True):
                    return list(jitted(*bufs))
        else:
            def exe(bufs):
                return list(jitted(*bufs))
            # jax.jit's callable itself: its C++ dispatch is the fastest entry (measured: Compiled.__call__ of
            # the AOT stages costs ~2 us more per call). jit's hot path calls it directly.
            exe.call_args = jitted
        return exe

    def _packed_call(self, jitted):
        """``jitted`` called on the inputs with the small ones of each dtype packed on the host (one
        transfer per dtype rather than one XLA parameter per array)."""
        groups = [(d, pos) for d, pos in self._packing.items()]
        rest, handle, x64 = self._rest, self.device.handle, self.x64

        def call(*bufs):
            packed = []
            with jax.default_device(handle), _x64(x64):
                for d, pos in groups:
                    flat = np.concatenate([np.asarray(bufs[i]).reshape(-1) for i in pos]).astype(d, copy=False)
                    packed.append(jnp.array(flat, copy=True))
            return jitted(*packed, *[bufs[i] for i in rest])
        return call


@functools.lru_cache(maxsize=1)
def _default_handle():
    return jax.devices()[0]


#: Device scalars kept for eager operations with Python or NumPy scalar operands (``scalar_to_device``).
_SCALAR_CACHE_SIZE = 256


class JaxBackend(Backend):
    #: Lowered through their decompositions (``Backend.expected_decompositions``): XLA's own forms are no better.
    expected_decompositions = frozenset({"erfc", "log2"})
    host_callbacks = True  # jax.debug.callback(ordered=True) inside the XLA program
    name = "jax"

    def __init__(self):
        self._scalars = LRUCache(_SCALAR_CACHE_SIZE)
        self._devices = []
        for i, d in enumerate(jax.devices()):
            platform = {"cuda": "gpu", "rocm": "gpu"}.get(d.platform, d.platform)
            self._devices.append(Device("jax", i, platform, f"JAX {jax.__version__} {d.device_kind} ({d})",
                                        handle=d))
        self._caps = Capabilities(dtypes=frozenset(dtypes.ALL_DTYPES), control_flow="native",
                                  eager_programs="first_call", memory_check="compiled")
        self._eager: "weakref.WeakValueDictionary" = {}

    def devices(self):
        return self._devices

    def capabilities(self, device):
        return self._caps

    def lowers_natively(self, eqn, device):
        if eqn.primitive in _INACCURATE_BELOW_F64 and eqn.inputs[0].aval.dtype.itemsize <= 4:
            return False
        if eqn.primitive in _SCANS and accumulates_in_low_precision(eqn):
            return False  # XLA scans float16 in float16: a cumprod of 6,001 factors was 5% off
        return eqn.primitive in RULES

    def supports(self, eqn, device):
        r = _UNSUPPORTED.get(eqn.primitive)
        if r is not None:
            return r
        if eqn.primitive not in RULES:
            return f"the jax backend has no rule for {eqn.primitive.name}"
        return None

    def lower(self, program, device, donate=()):
        return JaxLowered(program, device, donate)

    def scalar_to_device(self, value, dtype, device):
        """A Python or NumPy scalar as a rank-0 JAX array, from a bounded cache of device scalars.

        An eager ``x * 2`` otherwise uploads its ``2.0`` on every call (64% of the op's time measured on
        jax:0). JAX arrays are immutable, so one buffer serves every use. NaN and signed zeros are not
        cached (their keys would compare equal to other values); nor is anything once the cache holds
        ``_SCALAR_CACHE_SIZE`` entries of other values (least recently used are evicted).
        """
        if value != value or value == 0:
            return self.to_device(np.asarray(value, dtype), device)
        key = (type(value), value, dtype, device._key)  # the device's (backend, id): a C-level hash
        buf = self._scalars.get(key)
        if buf is None:
            buf = self._scalars.put(key, self.to_device(np.asarray(value, dtype), device))
        return buf

    def scalar_converter(self, dtype, device):
        """``scalar_to_device`` for one dtype and device, with the same bounded cache (``Array``'s fast
        operators keep one per operation)."""
        cache, dkey = self._scalars, device._key
        d = cache._d

        def conv(value):
            if value != value or value == 0:
                return self.to_device(np.asarray(value, dtype), device)
            key = (type(value), value, dtype, dkey)
            buf = d.get(key)
            if buf is None:
                return cache.put(key, self.to_device(np.asarray(value, dtype), device))
            try:
                d.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile
                pass
            return buf
        return conv

    def to_device(self, array, device):
        a = np.asarray(array)
        if not a.dtype.isnative:  # JAX refuses '>f4'; its aval is float32
            a = a.astype(a.dtype.newbyteorder("="))
        with _x64(a.dtype in _X64):
            # A copy into memory XLA owns: on the CPU, device_put of a NumPy array may alias the NumPy
            # buffer instead, and every later call then pays for it (a jitted MLP step measured 1.8x
            # slower with such inputs). may_alias=False copies without compiling anything; jnp.array(
            # copy=True) compiled and cached an XLA copy per new shape (~1.5 MiB each, never freed).
            if device.handle == _default_handle():
                # Uncommitted on JAX's default device, so that XLA may combine it with a global array
                # sharded over several devices (fa.device_put(x, NamedSharding)); a committed one would be
                # "incompatible devices" there. Where it runs is the same.
                return jax.device_put(a, may_alias=False)
            return jax.device_put(a, device.handle, may_alias=False)

    def to_host(self, buf):
        a = np.asarray(buf)
        return a

    def block_until_ready(self, buf):
        return buf.block_until_ready()

    def delete(self, buf):
        if not buf.is_deleted():
            buf.delete()


# The linear-algebra primitives' rules (jax.lax.linalg) live in their own module.
from fnarray.lowering.jax.linalg import register as _register_linalg  # noqa: E402

_register_linalg(RULES)


def make_backend():
    return JaxBackend()


from fnarray.lowering.jax import spmd as jax_spmd  # noqa: E402,F401  (the collectives and shard_map, registered into RULES)
