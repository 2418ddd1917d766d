"""The mlx backend: the IR lowered to ``mlx.core`` for Apple silicon (``mlx[cpu]`` elsewhere).

Devices. ``fa.devices("mlx")`` lists the Metal (or CUDA) GPU first when MLX sees
one (``mlx:0``, platform ``gpu``), then the CPU (``mlx:1``, or ``mlx:0`` on a
machine without a GPU, platform ``cpu``). MLX arrays live in unified memory, so
a device only chooses the stream an operation runs on.

Semantics. Every primitive has a rule in ``RULES`` (``rule(params, in_avals,
out_avals) -> fn(*arrays)``) that reproduces ``numpy_impls`` with MLX
operations: integer division and remainder by zero give 0 (and ``INT_MIN // -1``
never reaches MLX, where it would trap), shifts past the bit width give 0 or -1,
float -> int casts saturate with NaN -> 0, gathers clamp and scatters drop
out-of-bounds indices, NaN sorts last, ``max``/``min`` propagate NaN, ``sign(NaN)``
is NaN. ``lgamma``, ``digamma`` and ``erfc``, which MLX lacks, come from their
decompositions (``fnarray.core.decompositions``); other things MLX lacks are composed
here: ``population_count`` (bit slicing), ``nextafter`` (bit
arithmetic), padding with interior/negative widths, bitwise reductions (a tree of
halvings), integer ``dot_general`` (products summed in blocks; MLX's matmul is
floating-point only), multi-key ``sort`` (successive stable argsorts).

Unsupported (these fall back to numpy with a ``FallbackWarning``, see
``supports``): ``complex128`` everywhere (MLX has no such dtype); ``float64``
on the GPU (Metal has none); on the CPU, ``float64`` only where MLX computes it
exactly — its CPU transcendental functions round through float32 (``exp`` of a
float64 is float32-accurate), so float64 transcendental and special functions
fall back (``_F64_APPROXIMATE``); ``complex64`` outside the operations that MLX
implements for it (``_COMPLEX_OK``); ``custom_lin`` (never executed).

Evaluation is lazy, as MLX's: an executable builds the graph and returns
unevaluated ``mx.array`` s. Values are forced only where fnarray needs them:
``to_host`` (``np.asarray``, ``.item()``, ``bool()``), ``block_until_ready``,
a host-driven loop's predicate (``fnarray.devices.host_control``) and fallback
transfers. Host transfers avoid copies where MLX allows: ``to_host`` returns a
view of the MLX buffer (unified memory; fnarray marks it read-only), while
``to_device`` copies, because MLX cannot adopt a NumPy buffer and fnarray arrays
must not see later writes to the caller's array.

Control flow. MLX has no loop primitive: ``Capabilities(control_flow="host")``
makes the partitioner run ``while``, ``scan`` and ``cond`` from the host
(``fnarray.devices.host_control``), with the straight-line code around them
lowered here. ``call``, ``remat`` and custom-derivative calls are inlined.

``mx.compile``, measured on this machine (Linux, ``mlx[cpu]`` 0.32.4, 2 cores shared
with other jobs; best of 4 interleaved rounds, two runs; with ``mx.eval`` of the result):

==============================================  ===============  ===============
                                                eager            mx.compile
==============================================  ===============  ===============
``tanh(a*x+b)*x+1``, f32, 4M elements            86-92 ms         88-96 ms
same, 16K elements                               322-342 us       351-384 us
same, 1K elements                                26 us            20-21 us
same, 4 elements (one call's dispatch)           26-27 us         14 us
digits MLP train step (64-128-128-10, batch 64)  2.4-2.9 ms       2.1-2.4 ms
first call of that step, kernels not on disk     5-16 ms          ~1 s per fused kernel (8 s)
==============================================  ===============  ===============

(Single unrepeated runs on the loaded machine scattered by 2x either way, e.g. 148 vs 310 ms for
the 4M chain; the table keeps the interleaved minima.) On the Linux CPU a compiled program saves
the per-operation dispatch (~6-10 us each) but its fused C++ kernels are no faster per element
than MLX's eager ones, and a cold compile generates and builds C++ (~1 s per fused kernel, cached
on disk under ``/tmp/mlx``). So the policy (``COMPILE_MODE = "auto"``) is per platform:

- ``gpu``: every program is wrapped in ``mx.compile`` from its first call
  (fusion saves memory traffic and kernel launches; Metal kernels build in ms);
- ``cpu``: a program is compiled only if its largest array has at most
  ``CPU_COMPILE_MAX_ELEMENTS`` elements (below the measured crossover, where
  dispatch dominates) and only from its ``CPU_COMPILE_AFTER_CALLS``-th call, so
  that one-shot programs never pay the cold compile; large programs stay eager.

``COMPILE_MODE = "always"`` or ``"never"`` overrides the policy (tests use it).
"""

from __future__ import annotations

import math
import weakref

import ml_dtypes
import numpy as np

from fnarray.core import profile as _profile
from fnarray.core import dtypes
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.core import primitives as P
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Literal, Program
from fnarray.core.passes import dce, program_from_eqn
from fnarray.core.subprograms import CALL_PROGRAM, CONTROL_FLOW, subprograms
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered
from fnarray.lowering.zero_size import drop_zero_size, has_zero_size, is_fill

try:
    import mlx.core as mx
except ImportError as _e:  # pragma: no cover - exercised where mlx is missing
    mx = None
    _IMPORT_ERROR = f"the mlx backend needs MLX: {_e} (to fix: pip install 'mlx[cpu]' on Linux, 'mlx' on macOS)"
else:
    _IMPORT_ERROR = None

__all__ = ["make_backend", "RULES", "MlxBackend", "MlxLowered", "COMPILE_MODE", "CPU_COMPILE_MAX_ELEMENTS",
           "CPU_COMPILE_AFTER_CALLS"]

#: ``"auto"`` (the per-platform policy of the module docstring), ``"always"`` or ``"never"``.
COMPILE_MODE = "auto"
#: On the CPU, programs whose largest array is at most this big are compiled (measured crossover ~16K).
CPU_COMPILE_MAX_ELEMENTS = 16384
#: On the CPU, a program is compiled from this call on (a cold compile costs ~1 s per fused kernel).
CPU_COMPILE_AFTER_CALLS = 16

RULES: dict = {}

_BF16 = np.dtype(ml_dtypes.bfloat16)
_LOW = (dtypes.float16, dtypes.bfloat16)
_F32 = dtypes.float32


def _mx_dtypes():
    return {
        dtypes.bool_: mx.bool_, dtypes.int8: mx.int8, dtypes.int16: mx.int16, dtypes.int32: mx.int32,
        dtypes.int64: mx.int64, dtypes.uint8: mx.uint8, dtypes.uint16: mx.uint16, dtypes.uint32: mx.uint32,
        dtypes.uint64: mx.uint64, dtypes.float16: mx.float16, dtypes.bfloat16: mx.bfloat16,
        dtypes.float32: mx.float32, dtypes.float64: mx.float64, dtypes.complex64: mx.complex64,
    }


_MX: dict = _mx_dtypes() if mx is not None else {}


def _md(d):
    """The MLX dtype of a NumPy dtype."""
    return _MX[np.dtype(d)]


def from_numpy(a):
    """A NumPy array (or scalar) as an ``mx.array`` of the same dtype (a copy).

    A dtype MLX cannot hold (complex128) stays a read-only NumPy array: equations on it fall back to
    numpy, which takes such buffers as they are. So does a zero-size array, which no MLX operation
    receives (the zero-size pass rewrites every program first).
    """
    a = np.asarray(a)
    if a.dtype not in _MX or a.size == 0:
        # MLX 0.32 can hang on empty arrays (a reduction of one blocks in a later evaluation): an
        # empty buffer stays a NumPy array, and no MLX operation ever receives one (``zero_size``).
        a = np.array(a, copy=True)
        a.flags.writeable = False
        return a
    if a.dtype == _BF16:  # NumPy's buffer protocol cannot describe bfloat16: move the bits
        return mx.view(mx.array(a.view(np.uint16)), mx.bfloat16)
    if a.ndim and not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return mx.array(a, dtype=_md(a.dtype))


def to_numpy(buf):
    """An ``mx.array`` as a NumPy array: a view of MLX's buffer (evaluating it first)."""
    if isinstance(buf, np.ndarray):
        return buf
    if buf.dtype == mx.bfloat16:
        return np.asarray(mx.view(buf, mx.uint16)).view(_BF16)
    return np.asarray(buf)


def _const(value, d):
    """A rank-0 MLX constant of dtype ``d``."""
    return from_numpy(np.asarray(value, dtype=d))


def rule(prim):
    """Register ``factory(params, in_avals, out_avals) -> fn(*arrays)`` for ``prim``."""
    def deco(fn):
        RULES[prim] = fn
        return fn
    return deco


def _upcast(fn):
    """Compute float16/bfloat16 in float32 and round back (the reference does so)."""
    def factory(params, in_avals, out_avals):
        d = in_avals[0].dtype
        if d in _LOW:
            md = _md(d)
            return lambda *xs: fn(*[x.astype(mx.float32) for x in xs]).astype(md)
        return fn
    return factory


def _mx_op(name, upcast):
    """The factory of an MLX function used as it is (resolved when a program is lowered, not per call)."""
    def factory(params, in_avals, out_avals):
        fn = getattr(mx, name)
        return _upcast(fn)(params, in_avals, out_avals) if upcast else fn
    return factory


# ------------------------------------------------------------------------------ elementwise

for _p, _name in [(P.floor, "floor"), (P.ceil, "ceil"), (P.round_p, "round"), (P.exp, "exp"), (P.log, "log"),
                  (P.log2, "log2"), (P.log1p, "log1p"), (P.expm1, "expm1"), (P.tanh, "tanh"),
                  (P.sin, "sin"), (P.cos, "cos"), (P.tan, "tan"), (P.asin, "arcsin"), (P.acos, "arccos"),
                  (P.atan, "arctan"), (P.sinh, "sinh"), (P.cosh, "cosh"), (P.asinh, "arcsinh"),
                  (P.acosh, "arccosh"), (P.atanh, "arctanh"), (P.sqrt, "sqrt"), (P.rsqrt, "rsqrt"),
                  (P.erf, "erf"), (P.erf_inv, "erfinv"), (P.pow_p, "power"), (P.atan2, "arctan2")]:
    RULES[_p] = _mx_op(_name, upcast=True)


@rule(P.pow_p)
def _pow(params, in_avals, out_avals):
    real_pow = _mx_op("power", upcast=True)(params, in_avals, out_avals)
    if not dtypes.is_complex(in_avals[0].dtype):
        return real_pow

    def f(x, y):
        # MLX's complex power gives NaN at 0 ** 0; the reference (NumPy, XLA) gives 1.
        r = mx.power(x, y)
        return mx.where((x == 0) & (y == 0), mx.ones_like(r), r)
    return f

for _p, _name in [(P.neg, "negative"), (P.is_finite, "isfinite"), (P.real, "real"), (P.imag, "imag"),
                  (P.conj, "conj"), (P.abs_p, "abs"), (P.add, "add"), (P.sub, "subtract"), (P.mul, "multiply"),
                  (P.max_p, "maximum"), (P.min_p, "minimum"), (P.eq, "equal"), (P.ne, "not_equal"),
                  (P.lt, "less"), (P.le, "less_equal"), (P.gt, "greater"), (P.ge, "greater_equal"),
                  (P.and_p, "bitwise_and"), (P.or_p, "bitwise_or"), (P.xor_p, "bitwise_xor")]:
    RULES[_p] = _mx_op(_name, upcast=False)


def _identity(params, in_avals, out_avals):
    return lambda x: x


RULES[P.stop_gradient] = _identity
RULES[P.copy_p] = _identity


@rule(P.exp2)
def _exp2(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):
        ln2 = _const(math.log(2.0), d)
        return lambda x: mx.exp(x * ln2)
    two = _const(2.0, _F32 if d in _LOW else d)
    return _upcast(lambda x: mx.power(two, x))(params, in_avals, out_avals)


@rule(P.logistic)
def _logistic(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):  # MLX's sigmoid is real-only; the reference's complex form is this one
        one = _const(1, d)
        return lambda x: one / (one + mx.exp(-x))
    return _upcast(lambda x: mx.sigmoid(x))(params, in_avals, out_avals)


@rule(P.sign)
def _sign(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_float(d):  # MLX's sign(NaN) is 0; the reference keeps NaN
        return lambda x: mx.where(mx.isnan(x), x, mx.sign(x))
    return lambda x: mx.sign(x)


@rule(P.not_p)
def _not(params, in_avals, out_avals):
    if in_avals[0].dtype == dtypes.bool_:
        return lambda x: mx.logical_not(x)
    return lambda x: mx.bitwise_invert(x)


@rule(P.cbrt)
def _cbrt(params, in_avals, out_avals):
    d = in_avals[0].dtype
    third = _const(1.0 / 3.0, _F32 if d in _LOW else d)

    def f(x):
        r = mx.power(mx.abs(x), third)
        return mx.where(x < 0, -r, r)
    return _upcast(f)(params, in_avals, out_avals)


@rule(P.integer_pow)
def _integer_pow(params, in_avals, out_avals):
    y = params["y"]

    def positive(x, n):
        acc, base = None, x
        while n:
            if n & 1:
                acc = base if acc is None else acc * base
            n >>= 1
            if n:
                base = base * base
        return acc

    if y == 0:
        return lambda x: mx.ones_like(x)
    if y > 0:
        return lambda x: positive(x, y)
    one = _const(1, in_avals[0].dtype)
    return lambda x: one / positive(x, -y)


# lgamma and digamma (which MLX lacks) are written once, in fnarray.core.decompositions.


_UNSIGNED_OF = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_SIGNED_OF = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


@rule(P.population_count)
def _population_count(params, in_avals, out_avals):
    d = in_avals[0].dtype
    width = d.itemsize * 8
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = _md(ud), _md(d)

    def c(pattern):  # a byte pattern repeated over the width
        return _const(int.from_bytes(bytes([pattern]) * d.itemsize, "little"), ud)

    m1, m2, m4, h01 = c(0x55), c(0x33), c(0x0F), c(0x01)
    s1, s2, s4, top = _const(1, ud), _const(2, ud), _const(4, ud), _const(width - 8, ud)

    def f(x):
        u = mx.view(x, mu) if d != ud else x
        u = u - mx.bitwise_and(mx.right_shift(u, s1), m1)
        u = mx.bitwise_and(u, m2) + mx.bitwise_and(mx.right_shift(u, s2), m2)
        u = mx.bitwise_and(u + mx.right_shift(u, s4), m4)
        if width > 8:
            u = mx.right_shift(u * h01, top)
        return mx.view(u, md) if d != ud else u
    return f


def _trunc_div_signed(x, y, zero, one, minus_one):
    """x / y truncated toward zero for signed integers, with y == 0 -> 0 and y == -1 -> -x (wrapping)."""
    bad = (y == zero) | (y == minus_one)
    ys = mx.where(bad, one, y)
    q = mx.floor_divide(x, ys)
    r = x - q * ys
    q = q + ((r != zero) & ((x < zero) != (ys < zero))).astype(q.dtype)
    q = mx.where(y == minus_one, zero - x, q)
    return mx.where(y == zero, zero, q)


@rule(P.div)
def _div(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if not dtypes.is_int(d):
        return lambda x, y: mx.divide(x, y)
    zero, one = _const(0, d), _const(1, d)
    if dtypes.is_unsigned(d):
        return lambda x, y: mx.where(y == zero, zero, mx.floor_divide(x, mx.where(y == zero, one, y)))
    minus_one = _const(-1, d)
    return lambda x, y: _trunc_div_signed(x, y, zero, one, minus_one)


@rule(P.rem)
def _rem(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_int(d):
        zero, one = _const(0, d), _const(1, d)
        if dtypes.is_unsigned(d):
            return lambda x, y: mx.where(y == zero, zero, mx.remainder(x, mx.where(y == zero, one, y)))
        minus_one = _const(-1, d)

        def irem(x, y):
            q = _trunc_div_signed(x, y, zero, one, minus_one)
            return mx.where(y == zero, zero, x - q * y)
        return irem

    def frem(x, y):
        # C fmod: for non-negative operands MLX's floored remainder is exactly fmod; the sign is x's.
        r = mx.remainder(mx.abs(x), mx.abs(y))
        return mx.where(x < 0, -r, r)
    return _upcast(frem)(params, in_avals, out_avals)


@rule(P.nextafter)
def _nextafter(params, in_avals, out_avals):
    d = in_avals[0].dtype
    sd = _SIGNED_OF[d.itemsize]
    ms = _md(sd)
    md = _md(d)
    one_i = _const(1, sd)  # also the bits of the smallest subnormal
    sign_bit = _const(np.array(1, _UNSIGNED_OF[d.itemsize]) << (8 * d.itemsize - 1), _UNSIGNED_OF[d.itemsize])
    mu = _md(_UNSIGNED_OF[d.itemsize])
    zero = _const(0, d)

    def f(x, y):
        bx = mx.view(x, ms)
        up = (x < y) == (x > zero)  # moving away from zero adds one to the magnitude bits
        moved = mx.where(up, bx + one_i, bx - one_i)
        y_sign = mx.bitwise_and(mx.view(y, mu), sign_bit)
        from_zero = mx.bitwise_or(mx.view(one_i, mu), y_sign)
        r = mx.where(x == zero, mx.view(from_zero, ms), moved)
        r = mx.view(r, md)
        r = mx.where(x == y, y, r)
        return mx.where(mx.isnan(x) | mx.isnan(y), x + y, r)
    return f


def _shift_ok(y, width, zero_y):
    return (y >= zero_y) & (y < width)


@rule(P.shift_left)
def _shift_left(params, in_avals, out_avals):
    d = in_avals[0].dtype
    zero, width = _const(0, d), _const(d.itemsize * 8, d)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        return mx.where(ok, mx.left_shift(x, mx.where(ok, y, zero)), zero)
    return f


@rule(P.shift_right_logical)
def _shift_right_logical(params, in_avals, out_avals):
    d = in_avals[0].dtype
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = _md(ud), _md(d)
    zero, width, zero_u = _const(0, d), _const(d.itemsize * 8, d), _const(0, ud)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        s = mx.where(ok, y, zero)
        if d != ud:
            x, s = mx.view(x, mu), mx.view(s, mu)
        r = mx.where(ok, mx.right_shift(x, s), zero_u)
        return mx.view(r, md) if d != ud else r
    return f


@rule(P.shift_right_arithmetic)
def _shift_right_arithmetic(params, in_avals, out_avals):
    d = in_avals[0].dtype
    sd = _SIGNED_OF[d.itemsize]
    ms, md = _md(sd), _md(d)
    zero, width = _const(0, d), _const(d.itemsize * 8, d)
    zero_s, minus_one_s = _const(0, sd), _const(-1, sd)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        s = mx.where(ok, y, zero)
        if d != sd:
            x, s = mx.view(x, ms), mx.view(s, ms)
        r = mx.where(ok, mx.right_shift(x, s), mx.where(x < zero_s, minus_one_s, zero_s))
        return mx.view(r, md) if d != sd else r
    return f


@rule(P.complex_p)
def _complex(params, in_avals, out_avals):
    shape = out_avals[0].shape

    def f(x, y):
        x, y = mx.broadcast_to(x, shape), mx.broadcast_to(y, shape)
        pair = mx.stack([x, y], axis=-1)  # (re, im) pairs in memory order are complex64 values
        return mx.view(pair, mx.complex64).reshape(shape)
    return f


@rule(P.select_n)
def _select_n(params, in_avals, out_avals):
    n = len(in_avals) - 1
    if n == 1:
        return lambda which, c0: c0
    if in_avals[0].dtype == dtypes.bool_:
        return lambda which, c0, c1: mx.where(which, c1, c0)
    bounds = [_const(j, dtypes.int32) for j in range(n - 1)]

    def f(which, *cases):
        r = cases[-1]
        for j in range(n - 2, -1, -1):  # which <= j picks case j: clamps below 0 and above n-1
            r = mx.where(which <= bounds[j], cases[j], r)
        return r
    return f


# ------------------------------------------------------------------------------ conversions

@rule(P.convert_element_type)
def _convert(params, in_avals, out_avals):
    src, dst = in_avals[0].dtype, params["new_dtype"]
    if src == dst:
        return lambda x: x
    mdst = _md(dst)
    if dst == dtypes.bool_:
        zero = _const(0, src)
        return lambda x: mx.not_equal(x, zero)
    real_first = dtypes.is_complex(src) and not dtypes.is_complex(dst)
    if real_first:
        src = _F32
    if dtypes.is_inexact(src) and dtypes.is_int(dst):
        info = np.iinfo(dst)
        fd = _F32 if src in _LOW else src
        lo_f, hi_f = _const(float(info.min), fd), _const(float(info.max), fd)
        lo_i, hi_i = _const(info.min, dst), _const(info.max, dst)
        zero = _const(0, fd)
        low = src in _LOW

        def f2i(x):
            if real_first:
                x = mx.real(x)
            if low:
                x = x.astype(mx.float32)
            t = mx.where(mx.isnan(x), zero, x)
            conv = mx.clip(t, lo_f, hi_f).astype(mdst)
            return mx.where(t >= hi_f, hi_i, mx.where(t <= lo_f, lo_i, conv))
        return f2i
    if real_first:
        return lambda x: mx.real(x).astype(mdst)
    return lambda x: x.astype(mdst)


@rule(P.bitcast_convert_type)
def _bitcast(params, in_avals, out_avals):
    md = _md(params["new_dtype"])
    return lambda x: mx.view(x, md)


# ------------------------------------------------------------------------------ structural

@rule(P.iota)
def _iota(params, in_avals, out_avals):
    d, shape, dim = params["dtype"], params["shape"], params["dimension"]
    md = _md(d)
    inter = [1] * len(shape)
    inter[dim] = shape[dim]
    count_dtype = mx.int64 if d in (dtypes.int64, dtypes.uint64) else mx.int32

    def f():
        r = mx.arange(shape[dim], dtype=count_dtype).astype(md)
        return mx.broadcast_to(r.reshape(inter), shape)
    return f


@rule(P.broadcast_in_dim)
def _broadcast_in_dim(params, in_avals, out_avals):
    shape, bd = params["shape"], params["broadcast_dimensions"]
    inter = [1] * len(shape)
    for i, dim in enumerate(bd):
        inter[dim] = in_avals[0].shape[i]
    if tuple(inter) == tuple(in_avals[0].shape):
        return lambda x: mx.broadcast_to(x, shape)
    return lambda x: mx.broadcast_to(x.reshape(inter), shape)


@rule(P.reshape)
def _reshape(params, in_avals, out_avals):
    shape = list(params["new_sizes"])
    return lambda x: x.reshape(shape)


@rule(P.transpose)
def _transpose(params, in_avals, out_avals):
    perm = list(params["permutation"])
    return lambda x: mx.transpose(x, perm)


@rule(P.rev)
def _rev(params, in_avals, out_avals):
    dims = set(params["dimensions"])
    if not dims:
        return lambda x: x
    idx = tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(in_avals[0].ndim))
    return lambda x: x[idx]


@rule(P.slice_p)
def _slice(params, in_avals, out_avals):
    idx = tuple(slice(s, l, st) for s, l, st in zip(params["start_indices"], params["limit_indices"],
                                                     params["strides"], strict=True))
    if out_avals[0].size == 0:
        md, shape = _md(out_avals[0].dtype), out_avals[0].shape
        return lambda x: mx.zeros(shape, md)
    return lambda x: x[idx]


def _clamped_index(s, d, hi):
    """A rank-0 integer index clamped into [0, hi], as int32 (clamped in its own dtype when wide)."""
    if d.itemsize >= 4:
        return mx.clip(s, 0, hi).astype(mx.int32)
    return mx.clip(s.astype(mx.int32), 0, hi)


@rule(P.dynamic_slice)
def _dynamic_slice(params, in_avals, out_avals):
    sizes = tuple(params["slice_sizes"])
    x_aval = in_avals[0]
    if x_aval.ndim == 0:
        return lambda x: x
    if out_avals[0].size == 0:
        md = _md(x_aval.dtype)
        return lambda x, *starts: mx.zeros(sizes, md)
    his = [n - k for n, k in zip(x_aval.shape, sizes, strict=True)]
    sdt = [a.dtype for a in in_avals[1:]]
    axes = tuple(range(x_aval.ndim))

    def f(x, *starts):
        st = mx.stack([_clamped_index(s, d, h) for s, d, h in zip(starts, sdt, his, strict=True)])
        return mx.slice(x, st, axes, sizes)
    return f


@rule(P.dynamic_update_slice)
def _dynamic_update_slice(params, in_avals, out_avals):
    x_aval, u_aval = in_avals[0], in_avals[1]
    if x_aval.ndim == 0:
        return lambda x, u: u
    if u_aval.size == 0:
        return lambda x, u, *starts: x
    his = [n - k for n, k in zip(x_aval.shape, u_aval.shape, strict=True)]
    sdt = [a.dtype for a in in_avals[2:]]
    axes = tuple(range(x_aval.ndim))

    def f(x, u, *starts):
        st = mx.stack([_clamped_index(s, d, h) for s, d, h in zip(starts, sdt, his, strict=True)])
        return mx.slice_update(x, u, st, axes)
    return f


@rule(P.pad)
def _pad(params, in_avals, out_avals):
    config = params["padding_config"]
    shape = in_avals[0].shape
    out_shape = out_avals[0].shape
    md = _md(in_avals[0].dtype)
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in config]
    if out_avals[0].size == 0:
        return lambda x, pv: mx.zeros(out_shape, md)

    def f(x, pv):
        cur = list(shape)
        for a, (_, _, interior) in enumerate(config):
            n = cur[a]
            if interior and n > 1:
                # (.., n, ..) -> (.., n, 1 + interior, ..) padded with pv -> merged -> last gap cut off
                y = mx.expand_dims(x, a + 1)
                pw = [(0, 0)] * (len(cur) + 1)
                pw[a + 1] = (0, interior)
                y = mx.pad(y, pw, constant_values=pv)
                merged = cur[:a] + [n * (1 + interior)] + cur[a + 1:]
                y = y.reshape(merged)
                cur[a] = n + (n - 1) * interior
                x = y[tuple(slice(0, cur[a]) if i == a else slice(None) for i in range(len(cur)))]
        if any(w != (0, 0) for w in widths):
            x = mx.pad(x, widths, constant_values=pv)
            cur = [n + lo + hi for n, (lo, hi) in zip(cur, widths, strict=True)]
        crop = tuple(slice(-lo if lo < 0 else 0, n + hi if hi < 0 else n)
                     for n, (lo, hi, _) in zip(cur, config, strict=True))
        if any(lo < 0 or hi < 0 for lo, hi, _ in config):
            x = x[crop]
        return x
    return f


@rule(P.concatenate)
def _concatenate(params, in_avals, out_avals):
    dim = params["dimension"]
    return lambda *xs: mx.concatenate(list(xs), axis=dim)


def _front(ndim, axes):
    """The permutation that moves ``axes`` to the front (in order), and its inverse."""
    perm = list(axes) + [i for i in range(ndim) if i not in axes]
    inv = [0] * ndim
    for i, p in enumerate(perm):
        inv[p] = i
    return perm, inv, perm == list(range(ndim))


def _index_parts(indices, idx_dtype, axes, shape):
    """The clamped per-axis index arrays (int32) of a gather's ``indices``."""
    parts = []
    for k, a in enumerate(axes):
        col = indices[..., k]
        parts.append(_clamped_index(col, idx_dtype, shape[a] - 1))
    return parts


@rule(P.gather)
def _gather(params, in_avals, out_avals):
    axes = tuple(params["axes"])
    x_aval, i_aval = in_avals
    out_shape = out_avals[0].shape
    md = _md(x_aval.dtype)
    if any(x_aval.shape[a] == 0 for a in axes) or out_avals[0].size == 0:
        return lambda x, indices: mx.zeros(out_shape, md)
    perm, _, ident = _front(x_aval.ndim, axes)

    def f(x, indices):
        parts = _index_parts(indices, i_aval.dtype, axes, x_aval.shape)
        moved = x if ident else mx.transpose(x, perm)
        if len(parts) == 1:
            return mx.take(moved, parts[0], axis=0)
        return moved[tuple(parts)]
    return f


def _scatter_identity(kind, d):
    if kind == "add":
        return complex(-0.0, -0.0) if dtypes.is_complex(d) else (-0.0 if dtypes.is_float(d) else 0)
    if kind == "multiply":
        return 1
    if kind == "minimum":
        return True if d == dtypes.bool_ else (np.inf if dtypes.is_inexact(d) else np.iinfo(d).max)
    return False if d == dtypes.bool_ else (-np.inf if dtypes.is_inexact(d) else np.iinfo(d).min)


def _scatter(kind):
    def factory(params, in_avals, out_avals):
        axes = tuple(params["axes"])
        x_aval, i_aval, u_aval = in_avals
        d = x_aval.dtype
        if i_aval.size == 0 or u_aval.size == 0 or any(x_aval.shape[a] == 0 for a in axes):
            return lambda x, indices, updates: x
        k = kind
        if d == dtypes.bool_ and kind in ("add", "multiply"):
            k = "maximum" if kind == "add" else "minimum"  # bool add is or, bool multiply is and
        perm, inv, ident = _front(x_aval.ndim, axes)
        sizes = [x_aval.shape[a] for a in axes]
        idt = i_aval.dtype
        zero_i = _const(0, idt)
        bounds = [_const(n, idt) if n <= np.iinfo(idt).max else None for n in sizes]
        fill = _const(_scatter_identity(k, d), d) if k != "set" else None
        nan_propagating = k in ("maximum", "minimum") and dtypes.is_float(d)  # DESIGN.md: max/min propagate NaN

        def valid(indices):
            ok = None
            for j, b in enumerate(bounds):
                col = indices[..., j]
                c = col >= zero_i
                if b is not None:
                    c = c & (col < b)
                ok = c if ok is None else ok & c
            return ok

        def f(x, indices, updates):
            ok = valid(indices)
            parts = _index_parts(indices, idt, axes, x_aval.shape)
            moved = x if ident else mx.transpose(x, perm)
            if k == "set":
                # Out-of-bounds updates go to an extra slot past the end of each axis, cut off afterwards.
                pw = [(0, 1) if i < len(axes) else (0, 0) for i in range(x_aval.ndim)]
                padded = mx.pad(moved, pw)
                parts = [mx.where(ok, p, n) for p, n in zip(parts, sizes, strict=True)]
                padded[tuple(parts)] = updates
                out = padded[tuple(slice(0, n) for n in sizes)]
            else:
                okb = ok.reshape(ok.shape + (1,) * (updates.ndim - ok.ndim))
                upd = mx.where(okb, updates, fill)
                where = tuple(parts) if len(parts) > 1 else parts[0]
                if nan_propagating:
                    # MLX's scatter maximum/minimum compare with a NaN losing (x.at[i].maximum(1.5) of a NaN
                    # gives 1.5, and a NaN update followed by 0 gives 0): scatter without NaNs, then put
                    # a NaN where the operand had one or any in-bounds update to that element was one.
                    u_nan = mx.isnan(upd)
                    hits = mx.zeros(moved.shape, dtype=mx.int32).at[where].add(u_nan.astype(mx.int32))
                    out = getattr(moved.at[where], k)(mx.where(u_nan, fill, upd))
                    out = mx.where(mx.isnan(moved) | (hits > 0), _const(np.nan, d), out)
                else:
                    out = getattr(moved.at[where], k)(upd)
            return out if ident else mx.transpose(out, inv)
        return f
    return factory


RULES[P.scatter] = _scatter("set")
RULES[P.scatter_add] = _scatter("add")
RULES[P.scatter_mul] = _scatter("multiply")
RULES[P.scatter_min] = _scatter("minimum")
RULES[P.scatter_max] = _scatter("maximum")


# ------------------------------------------------------------------------------ reductions

def _reduction(name):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        d = in_avals[0].dtype
        md = _md(d)
        if not axes:
            return lambda x: x
        fn = getattr(mx, name)
        if d in _LOW:
            return lambda x: fn(x.astype(mx.float32), axis=axes).astype(md)

        def f(x):
            r = fn(x, axis=axes)
            return r if r.dtype == md else r.astype(md)  # MLX widens small integers
        return f
    return factory


RULES[P.reduce_sum] = _reduction("sum")
RULES[P.reduce_prod] = _reduction("prod")


def _lowest(d):
    return False if d == dtypes.bool_ else (np.iinfo(d).min if dtypes.is_int(d) else -np.inf)


def _highest(d):
    return True if d == dtypes.bool_ else (np.iinfo(d).max if dtypes.is_int(d) else np.inf)


def _extremum(name, bool_name, identity):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        x_aval = in_avals[0]
        d = x_aval.dtype
        if not axes:
            return lambda x: x
        if any(x_aval.shape[a] == 0 for a in axes):
            val, shape, md = _const(identity(d), d), out_avals[0].shape, _md(d)
            return lambda x: mx.full(shape, val, dtype=md)
        fn = getattr(mx, bool_name if d == dtypes.bool_ else name)
        return lambda x: fn(x, axis=axes)
    return factory


RULES[P.reduce_max] = _extremum("max", "any", _lowest)
RULES[P.reduce_min] = _extremum("min", "all", _highest)


def _fold(x, axes, shape, op, identity):
    """Reduce ``axes`` of ``x`` with a binary ``op`` by repeated halving (MLX has no bitwise reductions)."""
    rest = [i for i in range(len(shape)) if i not in axes]
    rest_shape = [shape[i] for i in rest]
    n = math.prod(shape[a] for a in axes)
    y = mx.transpose(x, rest + list(axes)).reshape(rest_shape + [n])
    if n == 0:
        return mx.full(rest_shape, identity, dtype=identity.dtype)
    while n > 1:
        if n % 2:
            y = mx.concatenate([y, mx.full(rest_shape + [1], identity, dtype=identity.dtype)], axis=-1)
            n += 1
        h = n // 2
        y = op(y[..., :h], y[..., h:])
        n = h
    return y.reshape(rest_shape)


def _bitwise_reduction(bool_name, op_name, identity):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        x_aval = in_avals[0]
        d = x_aval.dtype
        if not axes:
            return lambda x: x
        if d == dtypes.bool_:
            fn = getattr(mx, bool_name)
            return lambda x: fn(x, axis=axes)
        op = getattr(mx, op_name)
        ident = _const(np.asarray(identity).astype(d), d)  # -1 means all bits set, unsigned too
        return lambda x: _fold(x, axes, x_aval.shape, op, ident)
    return factory


RULES[P.reduce_and] = _bitwise_reduction("all", "bitwise_and", -1)
RULES[P.reduce_or] = _bitwise_reduction("any", "bitwise_or", 0)


def _arg(name):
    def factory(params, in_avals, out_avals):
        axis = params["axes"][0]
        md = _md(params["index_dtype"])
        fn = getattr(mx, name)  # MLX returns the first extremum, and the first NaN, as the reference
        return lambda x: fn(x, axis=axis).astype(md)
    return factory


RULES[P.argmax] = _arg("argmax")
RULES[P.argmin] = _arg("argmin")


def _cumulative(name):
    def factory(params, in_avals, out_avals):
        axis, reverse = params["axis"], params.get("reverse", False)
        d = in_avals[0].dtype
        md = _md(d)
        fn = getattr(mx, name)
        if in_avals[0].size == 0:
            return lambda x: x
        if d in _LOW:
            return lambda x: fn(x.astype(mx.float32), axis=axis, reverse=reverse).astype(md)

        def f(x):
            r = fn(x, axis=axis, reverse=reverse)
            return r if r.dtype == md else r.astype(md)
        return f
    return factory


RULES[P.cumsum] = _cumulative("cumsum")
RULES[P.cumprod] = _cumulative("cumprod")
RULES[P.cummax] = _cumulative("cummax")
RULES[P.cummin] = _cumulative("cummin")
RULES[P.cumlogsumexp] = _cumulative("logcumsumexp")


@rule(P.sort)
def _sort(params, in_avals, out_avals):
    dim, num_keys = params["dimension"], params["num_keys"]
    x_aval = in_avals[0]
    if x_aval.ndim == 0 or x_aval.shape[dim] == 0:
        return lambda *xs: list(xs)
    key_low = [a.dtype in _LOW for a in in_avals[:num_keys]]
    key_float = [dtypes.is_float(a.dtype) for a in in_avals[:num_keys]]
    zeros = [_const(0, _F32 if low else a.dtype) if fl else None
             for a, low, fl in zip(in_avals[:num_keys], key_low, key_float, strict=True)]

    def key(k, low, z):
        if low:
            k = k.astype(mx.float32)
        if z is not None:
            k = mx.where(k == z, z, k)  # -0.0 sorts equal to 0.0 (MLX sorts NaN last already)
        return k

    if len(in_avals) == 1:
        return lambda x: [mx.sort(x, axis=dim)]  # stable; -0.0 == 0.0 and NaN last in MLX

    def f(*xs):
        keys = [key(k, low, z) for k, low, z in zip(xs[:num_keys], key_low, zeros, strict=True)]
        # Lexicographic order from stable sorts, least significant key first.
        order = mx.argsort(keys[-1], axis=dim)
        for k in reversed(keys[:-1]):
            order = mx.take_along_axis(order, mx.argsort(mx.take_along_axis(k, order, axis=dim), axis=dim),
                                       axis=dim)
        return [mx.take_along_axis(x, order, axis=dim) for x in xs]
    return f


_INT_DOT_BLOCK = 1 << 22  # elements of the broadcast product per block (integer dot_general)


@rule(P.dot_general)
def _dot_general(params, in_avals, out_avals):
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    la, ra = in_avals
    d = la.dtype
    out_d = out_avals[0].dtype
    out_shape = list(out_avals[0].shape)
    mo = _md(out_d)
    lperm, rperm, B, M, K, N = dot_general_as_matmul(params["dimension_numbers"], la.shape, ra.shape)
    l_ident, r_ident = lperm == list(range(la.ndim)), rperm == list(range(ra.ndim))
    if B * M * N == 0:
        return lambda x, y: mx.zeros(out_shape, mo)

    def operands(x, y):
        a = x if l_ident else mx.transpose(x, lperm)
        b = y if r_ident else mx.transpose(y, rperm)
        return a.reshape([B, M, K]), b.reshape([B, K, N])

    if dtypes.is_inexact(d):
        low = d in _LOW

        def f(x, y):
            a, b = operands(x, y)
            if low:
                a, b = a.astype(mx.float32), b.astype(mx.float32)
            r = mx.matmul(a, b).reshape(out_shape)
            return r if r.dtype == mo else r.astype(mo)
        return f

    # Integers and bool: MLX's matmul is floating-point only. Sum exact (wrapping) products in blocks of K.
    work = mx.int32 if d == dtypes.bool_ else _md(d)
    block = max(1, _INT_DOT_BLOCK // max(1, B * M * N))
    is_bool = d == dtypes.bool_

    def fi(x, y):
        a, b = operands(x, y)
        if is_bool:
            a, b = a.astype(work), b.astype(work)
        acc = None
        for k0 in range(0, max(K, 1), block):
            part = a[:, :, k0:k0 + block, None] * b[:, None, k0:k0 + block, :]
            s = mx.sum(part, axis=2)
            acc = s if acc is None else acc + s
        if acc is None or K == 0:
            acc = mx.zeros([B, M, N], work)
        if is_bool:
            acc = acc > 0
        return acc.reshape(out_shape).astype(mo)
    return fi


# ------------------------------------------------------------------------------ calls (inlined)

def _call(key):
    def factory(params, in_avals, out_avals):
        fn = _generated(params[key]).fn
        return lambda *args: fn(*args)
    return factory


for _p, _k in CALL_PROGRAM.items():
    RULES[_p] = _call(_k)

# while, scan and cond run from the host (fnarray.devices.host_control); custom_lin never runs.
_HOST = CONTROL_FLOW
_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}

# ------------------------------------------------------------------------------ what falls back

# MLX's CPU kernels compute these in float32 precision even for float64 inputs (measured against NumPy
# in float64: relative errors of 1e-8..2e-6 where the other float64 functions are within 4e-16), so
# float64 runs them on numpy. lgamma is composed with sin, cumlogsumexp is MLX's logcumsumexp.
_F64_APPROXIMATE = frozenset({P.exp, P.logistic, P.sin, P.cos, P.erf, P.erf_inv, P.lgamma, P.cumlogsumexp})
# What MLX implements for complex64 (everything else with a complex64 operand falls back).
_COMPLEX_OK = frozenset({
    P.neg, P.add, P.sub, P.mul, P.div, P.pow_p, P.integer_pow, P.exp, P.exp2, P.log, P.log1p, P.sqrt, P.rsqrt,
    P.sin, P.cos, P.tan, P.asin, P.acos, P.atan, P.sinh, P.cosh, P.tanh, P.asinh, P.acosh, P.atanh, P.logistic,
    P.abs_p, P.sign, P.real, P.imag, P.conj, P.eq, P.ne, P.complex_p, P.select_n, P.convert_element_type,
    P.iota, P.broadcast_in_dim, P.reshape, P.transpose, P.rev, P.slice_p, P.dynamic_slice, P.dynamic_update_slice,
    P.pad, P.concatenate, P.gather, P.scatter, P.scatter_add, P.scatter_mul, P.reduce_sum, P.reduce_prod,
    P.cumsum, P.cumprod, P.dot_general, P.stop_gradient, P.copy_p, P.call, P.remat, P.custom_jvp_call,
    P.custom_vjp_call, P.while_p, P.scan, P.cond,
})

# fft (its own module, fnarray.lowering.fft_impls): mx.fft in complex64/float32.
from fnarray.core.fft import fft_p as _fft_p  # noqa: E402
from fnarray.lowering import fft_impls as _fft_impls  # noqa: E402

RULES[_fft_p] = _fft_impls.mlx_fft
_COMPLEX_OK = _COMPLEX_OK | {_fft_p}


def _dtype_reason(prim, eqn_dtypes, platform):
    if dtypes.complex128 in eqn_dtypes:
        return "MLX has no complex128"
    if dtypes.float64 in eqn_dtypes:
        if platform != "cpu":
            return "MLX has no float64 on the GPU"
        if prim in _F64_APPROXIMATE:
            return f"MLX computes {prim.name} of float64 in float32 precision on the CPU"
    if dtypes.complex64 in eqn_dtypes and prim not in _COMPLEX_OK:
        return f"MLX has no complex64 {prim.name}"
    return None


def _eqn_dtypes(eqn):
    ds = {a.aval.dtype for a in eqn.inputs}
    ds.update(o.aval.dtype for o in eqn.outputs)
    for p in eqn.params.values():
        if isinstance(p, np.dtype):
            ds.add(p)
    return ds


# ------------------------------------------------------------------------------ code generation

class _Generated:
    """Python source for a straight-line program over MLX arrays, and the function it defines."""

    def __init__(self, prog: Program, execute: bool = True):
        prog, _ = dce(prog)
        prog, _ = dce(drop_zero_size(prog))
        names: dict = {}
        glb: dict = {"__name__": "fnarray.lowering.mlx_program"}
        consts, lines = [], []
        # mx.compile is never given empty (NumPy) buffers: such programs stay eager.
        self.has_empty = has_zero_size(prog)
        self.max_elements = max([v.aval.size for v in list(prog.constvars) + list(prog.invars)] +
                                [o.aval.size for e in prog.eqns for o in e.outputs] + [0])

        def name(a):
            if isinstance(a, Literal):
                k = f"k{len(consts)}"
                consts.append(f"#   {k} = {a.val!r} ({a.aval.dtype.name})")
                if execute:
                    glb[k] = from_numpy(np.asarray(a.val, a.aval.dtype))
                return k
            if a not in names:
                names[a] = f"v{len(names)}"
            return names[a]

        ins = [name(v) for v in list(prog.constvars) + list(prog.invars)]
        for i, e in enumerate(prog.eqns):
            f = f"f{i}_{e.primitive.name}"
            if is_fill(e):  # a zero-size value: an empty NumPy buffer, made once, never given to MLX
                k = f"e{i}"
                o = e.outputs[0].aval
                consts.append(f"#   {k} = empty {o.str_short()}")
                if execute:
                    glb[k] = from_numpy(np.zeros(o.shape, o.dtype))
                lines.append(f"    {name(e.outputs[0])} = {k}")
                continue
            if execute:
                if e.primitive in _HOST:
                    raise ValueError(f"{e.primitive.name} runs from the host; compile it through "
                                     "fnarray.devices.partition.compile_program")
                glb[f] = RULES[e.primitive](e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])
            elif e.primitive in _HOST:
                f = f"host_{e.primitive.name}"
            args = ", ".join(name(a) for a in e.inputs)
            outs = [name(o) for o in e.outputs]
            if e.primitive.multiple_results or e.primitive in _HOST:
                lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")
                lines.append(f"    {lhs} = {f}({args})")
            else:
                lines.append(f"    {outs[0]} = {f}({args})")
        lines.append(f"    return [{', '.join(name(a) for a in prog.outvars)}]")
        header = (["# MLX program; constants:"] + consts) if consts else []
        self.source = "\n".join(header + [f"def program({', '.join(ins)}):"] + lines) + "\n"
        self.n_eqns = len(prog.eqns)
        self.fn = None
        if execute:
            exec(compile(self.source, "<fnarray mlx program>", "exec"), glb)  # noqa: S102 (our own codegen)
            self.fn = glb["program"]


_generated_cache: "weakref.WeakKeyDictionary[Program, _Generated]" = weakref.WeakKeyDictionary()


def _generated(prog: Program) -> _Generated:
    g = _generated_cache.get(prog)
    if g is None:
        g = _Generated(prog)
        _generated_cache[prog] = g
    return g


# ------------------------------------------------------------------------------ executables

def _on_stream(handle, fn):
    """Run ``fn`` on ``handle``'s stream when that is not MLX's default device."""
    def run(bufs):
        if mx.default_device() == handle:
            return fn(*bufs)
        with mx.stream(handle):
            return fn(*bufs)
    return run


class _WarmCompile:
    """Runs a program eagerly, and through ``mx.compile`` from its ``after``-th call on.

    Should MLX fail to compile the program, it keeps running eagerly (same operations, same results).
    """

    __slots__ = ("fn", "raw", "left", "handle")

    def __init__(self, fn, after, handle):
        self.raw, self.fn, self.left, self.handle = fn, fn, after, handle

    def __call__(self, bufs):
        if self.left > 0:  # > 0, not truthy: two threads may both decrement past zero
            self.left -= 1
            if self.left == 0:
                return self._switch(bufs)
        if mx.default_device() == self.handle:
            return self.fn(*bufs)
        with mx.stream(self.handle):
            return self.fn(*bufs)

    def _switch(self, bufs):
        compiled = mx.compile(self.raw)
        with mx.stream(self.handle), _profile.span("compile", "mx.compile (and its first run)"):
            try:
                out = compiled(*bufs)
            except Exception:  # an MLX compile limitation: stay eager
                return self.raw(*bufs)
        self.fn = compiled
        return out


def _compile_policy(gen: _Generated, device: Device) -> int | None:
    """Call number from which ``mx.compile`` is used (1: from the first call), or ``None``: never."""
    if COMPILE_MODE == "never" or gen.n_eqns < 2 or gen.has_empty:
        return None
    if COMPILE_MODE == "always" or device.platform != "cpu":
        return 1
    if gen.max_elements <= CPU_COMPILE_MAX_ELEMENTS:
        return CPU_COMPILE_AFTER_CALLS
    return None


class MlxLowered(Lowered):
    """A program lowered to MLX operations; ``as_text()`` is the generated Python source."""

    def __init__(self, program, device, donate=()):
        super().__init__(program, device)
        self._host = any(_needs_host(e) for e in program.eqns)

    def as_text(self) -> str:
        return _Generated(self.program, execute=False).source

    def compile(self):
        if self._host:
            from fnarray.devices.host_control import HostDriven
            return HostDriven(self.program, self.device, [True] * len(self.program.eqns))
        gen = _Generated(self.program)
        after = _compile_policy(gen, self.device)
        handle = self.device.handle
        if after is None:
            return _on_stream(handle, gen.fn)
        return _WarmCompile(gen.fn, after, handle)


def _needs_host(eqn) -> bool:
    if eqn.primitive in _HOST:
        return True
    return any(_needs_host(e) for sub in subprograms(eqn) for e in sub.eqns)


class MlxBackend(Backend):
    name = "mlx"

    def __init__(self):
        self._devices = []
        version = getattr(mx, "__version__", "?")
        if mx.is_available(mx.gpu):
            kind = "Metal" if mx.metal.is_available() else "GPU"
            try:
                info = mx.device_info()
                label = info.get("device_name") or info.get("architecture") or kind
            except Exception:  # device_info differs between MLX builds; the description is cosmetic
                label = kind
            self._devices.append(Device("mlx", 0, "gpu", f"MLX {version} {kind} GPU ({label})", handle=mx.gpu))
        self._devices.append(Device("mlx", len(self._devices), "cpu", f"MLX {version} CPU", handle=mx.cpu))
        all_but = frozenset(dtypes.ALL_DTYPES) - {dtypes.complex128}
        self._caps = {
            "cpu": Capabilities(dtypes=all_but, control_flow="host"),
            "gpu": Capabilities(dtypes=all_but - {dtypes.float64}, control_flow="host"),
        }

    def devices(self):
        return self._devices

    def capabilities(self, device):
        return self._caps["cpu" if device.platform == "cpu" else "gpu"]

    def lowers_natively(self, eqn, device):
        return eqn.primitive in RULES or eqn.primitive in _HOST

    def supports(self, eqn, device):
        prim = eqn.primitive
        r = _UNSUPPORTED.get(prim)
        if r is not None:
            return r
        if prim not in RULES and prim not in _HOST:
            return f"the mlx backend has no rule for {prim.name}"
        return _dtype_reason(prim, _eqn_dtypes(eqn), device.platform)

    def lower(self, program, device, donate=()):
        # MLX reuses a buffer in place when nothing else holds it, so donation needs nothing here:
        # jit drops the donated arrays' references after the call.
        return MlxLowered(program, device, donate)

    def eager_fast(self, primitive, params, in_avals, device):
        """One primitive applied directly with MLX, or ``None`` where the general path is needed."""
        if primitive in _HOST or primitive not in RULES:
            return None
        out = primitive.abstract_eval(*in_avals, **params)
        outs = list(out) if primitive.multiple_results else [out]
        if any(a.size == 0 for a in list(in_avals) + outs):
            return None   # the general path runs the zero-size pass: no MLX call on an empty array
        if primitive in CALL_PROGRAM or any(
                isinstance(p, Program) for p in params.values()):
            from fnarray.devices.partition import unsupported_reason
            eqn = program_from_eqn(primitive, params, in_avals, outs).eqns[0]
            if _needs_host(eqn) or unsupported_reason(eqn, device) is not None:
                return None
        else:
            r = _dtype_reason(primitive, {a.dtype for a in in_avals} | {o.dtype for o in outs} |
                              {p for p in params.values() if isinstance(p, np.dtype)}, device.platform)
            if r is not None:
                return None
        fn = RULES[primitive](params, list(in_avals), outs)
        handle = device.handle
        if primitive.multiple_results:
            def apply(*bufs):
                return list(fn(*bufs))
        else:
            def apply(*bufs):
                return [fn(*bufs)]
        return _on_stream(handle, apply)

    def to_device(self, array, device):
        return from_numpy(array)

    def to_host(self, buf):
        return to_numpy(buf)

    def block_until_ready(self, buf):
        if isinstance(buf, mx.array):
            mx.eval(buf)
        return buf

    def schedule(self, bufs):
        """Start evaluating ``bufs`` without waiting (host-driven loops keep MLX's graphs short)."""
        arrays = [b for b in bufs if isinstance(b, mx.array)]
        if arrays:
            mx.async_eval(*arrays)


def make_backend():
    """The mlx backend; raises ``BackendUnavailable`` (with the fix) when ``mlx.core`` cannot be imported."""
    if mx is None:
        raise BackendUnavailable(_IMPORT_ERROR)
    return MlxBackend()
