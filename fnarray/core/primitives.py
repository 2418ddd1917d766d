"""The closed set of primitives and their shape/dtype rules.

Each primitive is defined once here with its abstract-evaluation rule
(``ShapedArray`` in, ``ShapedArray`` out). Every other rule lives in a table
keyed by the primitive, beside the machinery that uses it: JVP and transpose
rules in ``fnarray.transforms.ad``, batching rules in
``fnarray.transforms.batching``, lowerings in ``fnarray.lowering.<backend>``.

Conventions (as ``jax.lax``): arrays are positional, static parameters are
keyword-only and hashable. Binary elementwise primitives take operands of
equal shape and dtype, except that a rank-0 operand broadcasts. Semantics that
every backend reproduces are stated in each primitive's ``doc``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core.errors import ContractionShapeError, DTypeError, ShapeError
from fnarray.core.shaped import ShapedArray

__all__ = ["Primitive", "PRIMITIVES"]

PRIMITIVES: dict[str, "Primitive"] = {}

#: ``ShapedArray((shape, dtype, weak_type))`` without the named tuple's Python ``__new__`` (the rules below that
#: every traced equation runs: a call an equation less, issue 28); the three fields in order, all given
_shaped = functools.partial(tuple.__new__, ShapedArray)


class Primitive:
    """A named operation of the IR with its shape/dtype rule.

    ``abstract_eval(*avals, **params)`` returns one ``ShapedArray`` (or a list
    when ``multiple_results``). ``bind(*args, **params)`` applies it to arrays
    or tracers through the innermost active trace.
    """

    __slots__ = ("name", "multiple_results", "abstract_eval", "doc", "kind", "library", "__weakref__")

    def __init__(self, name, abstract_eval, *, multiple_results=False, doc="", kind="other", library=False):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is defined twice")
        self.name = name
        self.abstract_eval = abstract_eval
        self.multiple_results = multiple_results
        self.doc = doc
        self.kind = kind  # "unary", "binary", "reduce", "cumulative", "structural", "control", "other"
        # Whether NumPy, jax.numpy/jax.lax, mlx.core and C's math library (OpenCL C, the kernel IR) each have this
        # function under this name: the backends' tables, the lax wrapper and the eager fast path register it
        # from this flag (``families.on_family``); a library that lacks the name gets an entry of its own.
        self.library = library
        PRIMITIVES[name] = self
        families.announce(self)  # the family's uniform rules (fnarray.core.families)

    def bind(self, *args, **params):
        return _bind(self, *args, **params)

    def __repr__(self):
        return self.name

    def __reduce__(self):
        # Pickled by name (one object per primitive): what the persistent cache of kernel schedules needs.
        return (primitive_named, (self.name,))


def primitive_named(name: str) -> "Primitive":
    """The primitive called ``name``; ``KeyError`` if there is none."""
    return PRIMITIVES[name]


def _bind(prim, *args, **params):  # replaced by fnarray.core.tracing at import
    raise RuntimeError("tracing machinery not loaded")


def set_bind(fn):
    """Install ``fn(primitive, *args, **params)`` as every primitive's ``bind`` (``fnarray.core.tracing``'s): the
    method itself, so that ``prim.bind(x)`` is one Python call, not two (every operation binds)."""
    global _bind
    _bind = fn
    Primitive.bind = fn


# ----------------------------------------------------------------------------- helpers


def _dtype_check(name, aval, ok, what):
    if not ok(aval.dtype):
        raise DTypeError(f"{name} accepts {what}, got {aval.dtype.name}")


_NUMERIC = (lambda d: not dtypes.is_bool(d), "numeric dtypes (not bool)")
_INEXACT = (dtypes.is_inexact, "floating or complex dtypes")
_FLOAT = (dtypes.is_float, "floating dtypes")
_INT = (dtypes.is_int, "integer dtypes")
_INT_OR_BOOL = (lambda d: dtypes.is_int(d) or dtypes.is_bool(d), "integer or boolean dtypes")
_ANY = (lambda d: True, "any dtype")
_NOT_COMPLEX = (lambda d: not dtypes.is_complex(d), "real (non-complex) dtypes")
_REAL_NUMERIC = (lambda d: not dtypes.is_complex(d) and not dtypes.is_bool(d), "real numeric dtypes")
_FLOAT_OR_INT = (lambda d: dtypes.is_float(d) or dtypes.is_int(d), "real numeric dtypes")


def _real_of(d):
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def unary(name, accepts=_INEXACT, out_dtype=None, doc="", library=False):
    ok, what = accepts

    def rule(x, **params):
        _dtype_check(name, x, ok, what)
        d = out_dtype(x.dtype) if out_dtype else x.dtype
        return _shaped((x.shape, d, x.weak_type and out_dtype is None))

    return Primitive(name, rule, doc=doc, kind="unary", library=library)


def _broadcast_elementwise(name, avals):
    shapes = {a.shape for a in avals if a.shape != ()}
    if len(shapes) > 1:
        raise ShapeError(f"{name} needs operands of equal shape (or rank 0), got "
                         f"{', '.join(str(a.shape) for a in avals)}")
    return shapes.pop() if shapes else ()


def binary(name, accepts=_NUMERIC, out_dtype=None, doc=""):
    ok, what = accepts

    def rule(x, y, **params):
        shape = x.shape if x.shape == y.shape else _broadcast_elementwise(name, (x, y))
        if x.dtype != y.dtype:
            raise DTypeError(f"{name} needs operands of one dtype, got {x.dtype.name} and {y.dtype.name}")
        _dtype_check(name, x, ok, what)
        d = out_dtype(x.dtype) if out_dtype else x.dtype
        return _shaped((shape, d, x.weak_type and y.weak_type and out_dtype is None))

    return Primitive(name, rule, doc=doc, kind="binary")


def _bool(_):
    return dtypes.bool_


# ----------------------------------------------------------------------------- elementwise

neg = unary("neg", _NUMERIC)
sign = unary("sign", _NUMERIC)
floor = unary("floor", _FLOAT)
ceil = unary("ceil", _FLOAT)
round_p = unary("round", _FLOAT, doc="Round half to even (as numpy.round).")
is_finite = unary("is_finite", _FLOAT, _bool)
exp = unary("exp", library=True)
exp2 = unary("exp2", library=True)
log = unary("log", library=True)
log1p = unary("log1p", library=True)
log2 = unary("log2", _FLOAT, doc="Base-2 logarithm, exact at powers of two (log2(2**k) == k).")
log10 = unary("log10", _FLOAT, library=True, doc="Base-10 logarithm (numpy.log10), each backend's own.")
expm1 = unary("expm1", library=True)
tanh = unary("tanh", library=True)
logistic = unary("logistic", doc="1 / (1 + exp(-x)).")
sin, cos, tan = unary("sin", library=True), unary("cos", library=True), unary("tan", library=True)
asin, acos, atan = unary("asin", library=True), unary("acos", library=True), unary("atan", library=True)
sinh, cosh = unary("sinh", library=True), unary("cosh", library=True)
asinh, acosh, atanh = unary("asinh", library=True), unary("acosh", library=True), unary("atanh", library=True)
sqrt = unary("sqrt", library=True)
rsqrt = unary("rsqrt")
cbrt = unary("cbrt", _FLOAT, library=True)
erf = unary("erf", _FLOAT)
erfc = unary("erfc", _FLOAT, doc="1 - erf(x), computed without the cancellation: accurate in relative terms "
                                "for large x (erfc(4) is about 1.5e-8 in float32, where 1 - erf(4) rounds to 0).")
erf_inv = unary("erf_inv", _FLOAT)
lgamma = unary("lgamma", _FLOAT)
digamma = unary("digamma", _FLOAT)
abs_p = unary("abs", _NUMERIC, _real_of)
not_p = unary("not", _INT_OR_BOOL, doc="Logical not for bool, bitwise not for integers.")
real = unary("real", (dtypes.is_complex, "complex dtypes"), _real_of)
imag = unary("imag", (dtypes.is_complex, "complex dtypes"), _real_of)
conj = unary("conj", (dtypes.is_complex, "complex dtypes"))
population_count = unary("population_count", _INT)
stop_gradient = unary("stop_gradient", _ANY, doc="Identity whose derivative is zero.")
copy_p = unary("copy", _ANY)
name_p = unary("name", _ANY, doc="Identity naming its operand (param name: str) for checkpoint policies "
               "(jax.ad_checkpoint.checkpoint_name); its tangent is not named.")


def _integer_pow_rule(x, *, y):
    _dtype_check("integer_pow", x, *_NUMERIC)
    if not isinstance(y, int):
        raise TypeError(f"integer_pow's exponent must be a Python int, got {type(y).__name__}")
    if y < 0 and dtypes.is_int(x.dtype):
        raise DTypeError("integer_pow with a negative exponent needs a floating operand")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


integer_pow = Primitive("integer_pow", _integer_pow_rule, kind="unary",
                        doc="x ** y for a static Python int y.")

add = binary("add")
sub = binary("sub")
mul = binary("mul")
div = binary("div", doc="Integer division truncates toward zero; integer division by zero gives 0.")
rem = binary("rem", _REAL_NUMERIC, doc="Sign of the dividend (C fmod); integer remainder by zero gives 0.")
pow_p = binary("pow", _INEXACT, doc="0 ** 0 == 1.")
max_p = binary("max", _ANY, doc="Propagates NaN.")
min_p = binary("min", _ANY, doc="Propagates NaN.")
atan2 = binary("atan2", _FLOAT)
nextafter = binary("nextafter", _FLOAT)
and_p = binary("and", _INT_OR_BOOL)
or_p = binary("or", _INT_OR_BOOL)
xor_p = binary("xor", _INT_OR_BOOL)
shift_left = binary("shift_left", _INT, doc="Shift by >= the bit width (or < 0) gives 0.")
shift_right_arithmetic = binary(
    "shift_right_arithmetic", _INT,
    doc="Shift by >= the bit width (or < 0) gives 0, or -1 for a negative operand.")
shift_right_logical = binary("shift_right_logical", _INT, doc="Shift by >= the bit width (or < 0) gives 0.")
eq = binary("eq", _ANY, _bool)
ne = binary("ne", _ANY, _bool)
lt = binary("lt", _NOT_COMPLEX, _bool)
le = binary("le", _NOT_COMPLEX, _bool)
gt = binary("gt", _NOT_COMPLEX, _bool)
ge = binary("ge", _NOT_COMPLEX, _bool)


def _complex_rule(x, y):
    shape = _broadcast_elementwise("complex", (x, y))
    if x.dtype != y.dtype or x.dtype not in (dtypes.float32, dtypes.float64):
        raise DTypeError(f"complex needs two float32 or two float64 operands, got {x.dtype.name}, {y.dtype.name}")
    return ShapedArray(shape, dtypes.complex64 if x.dtype == dtypes.float32 else dtypes.complex128)


complex_p = Primitive("complex", _complex_rule, kind="binary")


def _select_n_rule(which, *cases):
    if not cases:
        raise ValueError("select_n needs at least one case")
    if which.dtype != dtypes.bool_ and which.dtype != dtypes.int32:
        raise DTypeError(f"select_n's selector must be bool or int32, got {which.dtype.name}")
    if which.dtype == dtypes.bool_ and len(cases) > 2:
        raise DTypeError("a bool selector chooses between at most 2 cases")
    c0 = cases[0]
    for c in cases[1:]:
        if c.shape != c0.shape or c.dtype != c0.dtype:
            raise ShapeError(f"select_n's cases must agree, got {c0.str_short()} and {c.str_short()}")
    if which.shape not in ((), c0.shape):
        raise ShapeError(f"select_n's selector has shape {which.shape}, expected () or {c0.shape}")
    return ShapedArray(c0.shape, c0.dtype, all(c.weak_type for c in cases))


select_n = Primitive("select_n", _select_n_rule, kind="other",
                     doc="cases[which]; a bool selector picks cases[1] where True.")


def _convert_rule(x, *, new_dtype, weak_type=False):
    return ShapedArray(x.shape, new_dtype, weak_type)


convert_element_type = Primitive(
    "convert_element_type", _convert_rule, kind="unary",
    doc="Float -> int truncates toward zero and saturates; NaN -> 0. Complex -> real keeps the real part.")


def _bitcast_rule(x, *, new_dtype):
    if x.dtype.itemsize != new_dtype.itemsize:
        raise DTypeError(f"bitcast_convert_type needs dtypes of one width, got "
                         f"{x.dtype.name} and {new_dtype.name}")
    return ShapedArray(x.shape, new_dtype)


bitcast_convert_type = Primitive("bitcast_convert_type", _bitcast_rule, kind="unary")

# ----------------------------------------------------------------------------- structural


def _check_shape(shape, what):
    for d in shape:  # (a loop, exact ints first: every broadcast and reshape of every trace checks its shape)
        if not (d >= 0 if type(d) is int else isinstance(d, (int, np.integer)) and d >= 0):
            raise ShapeError(f"{what}: dimensions must be non-negative ints, got {shape}")


def _check_indices_fit(name, size, dtype, fix):
    """Indices ``0 .. size - 1`` in the integer ``dtype`` must not wrap: past 2**31 - 1 an int32 index
    would silently be negative (an argmax of 2**31 + 64 elements gave -2147483587)."""
    if dtypes.is_int(dtype) and size - 1 > dtypes.iinfo(dtype).max:
        raise ShapeError(f"{name}: the indices of an axis of {size} elements do not fit in {dtype.name} "
                         f"(at most {dtypes.iinfo(dtype).max}); {fix}")


def _iota_rule(*, dtype, shape, dimension):
    _check_shape(shape, "iota")
    if not 0 <= dimension < len(shape):
        raise ShapeError(f"iota dimension {dimension} out of range for shape {shape}")
    _check_indices_fit("iota", shape[dimension], dtype,
                       "count in a wider dtype (int64 where the device has it) or along a shorter axis")
    return ShapedArray(tuple(shape), dtype)


iota = Primitive("iota", _iota_rule, kind="structural", doc="Counts 0, 1, ... along `dimension`.")


def _broadcast_in_dim_rule(x, *, shape, broadcast_dimensions):
    _check_shape(shape, "broadcast_in_dim")
    if len(broadcast_dimensions) != len(x.shape):
        raise ShapeError(f"broadcast_in_dim: operand of rank {x.ndim} needs {x.ndim} "
                         f"broadcast_dimensions, got {broadcast_dimensions}")
    prev, rank = -1, len(shape)
    for d in broadcast_dimensions:  # strictly increasing from 0 up, below the rank (one loop, no list or set)
        if not prev < d < rank:
            raise ShapeError(f"broadcast_in_dim: broadcast_dimensions {broadcast_dimensions} must be "
                             f"strictly increasing and within rank {len(shape)}")
        prev = d
    for i, d in enumerate(broadcast_dimensions):
        if x.shape[i] not in (1, shape[d]):
            raise ShapeError(f"broadcast_in_dim: operand dimension {i} of size {x.shape[i]} "
                             f"cannot broadcast to size {shape[d]} of {shape}")
    return _shaped((tuple(shape), x.dtype, x.weak_type))


broadcast_in_dim = Primitive("broadcast_in_dim", _broadcast_in_dim_rule, kind="structural")


def _reshape_rule(x, *, new_sizes):
    _check_shape(new_sizes, "reshape")
    if math.prod(new_sizes) != math.prod(x.shape):
        raise ShapeError(f"cannot reshape {x.shape} ({x.size} elements) into {tuple(new_sizes)}")
    return _shaped((tuple(new_sizes), x.dtype, x.weak_type))


reshape = Primitive("reshape", _reshape_rule, kind="structural", doc="Row-major reshape.")


def _transpose_rule(x, *, permutation):
    if sorted(permutation) != list(range(len(x.shape))):
        raise ShapeError(f"transpose: {permutation} is not a permutation of {x.ndim} axes")
    shape = x.shape
    return _shaped((tuple([shape[p] for p in permutation]), x.dtype, x.weak_type))


transpose = Primitive("transpose", _transpose_rule, kind="structural")


def _rev_rule(x, *, dimensions):
    if any(not 0 <= d < x.ndim for d in dimensions) or len(set(dimensions)) != len(dimensions):
        raise ShapeError(f"rev: dimensions {dimensions} invalid for rank {x.ndim}")
    return x


rev = Primitive("rev", _rev_rule, kind="structural")


def _slice_rule(x, *, start_indices, limit_indices, strides):
    if not (len(start_indices) == len(limit_indices) == len(strides) == x.ndim):
        raise ShapeError(f"slice needs {x.ndim} starts, limits and strides")
    shape = []
    for s, l, st, n in zip(start_indices, limit_indices, strides, x.shape, strict=True):
        if not (0 <= s <= l <= n) or st < 1:
            raise ShapeError(f"slice [{start_indices}:{limit_indices}:{strides}] out of bounds for {x.shape}")
        shape.append(max(0, -(-(l - s) // st)))
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


slice_p = Primitive("slice", _slice_rule, kind="structural", doc="Static strided slice; bounds must fit.")


def _index_operands(name, idxs, n):
    if len(idxs) != n:
        raise ShapeError(f"{name} needs {n} start indices, got {len(idxs)}")
    for i in idxs:
        if i.shape != () or not dtypes.is_int(i.dtype):
            raise DTypeError(f"{name}'s start indices must be integer scalars, got {i.str_short()}")


def _dynamic_slice_rule(x, *starts, slice_sizes):
    _index_operands("dynamic_slice", starts, x.ndim)
    if len(slice_sizes) != x.ndim or any(not 0 <= s <= n for s, n in zip(slice_sizes, x.shape, strict=True)):
        raise ShapeError(f"dynamic_slice sizes {slice_sizes} do not fit in {x.shape}")
    return ShapedArray(tuple(slice_sizes), x.dtype, x.weak_type)


dynamic_slice = Primitive("dynamic_slice", _dynamic_slice_rule, kind="structural",
                          doc="Start indices are clamped so that the slice fits (as XLA).")


def _dynamic_update_slice_rule(x, update, *starts):
    _index_operands("dynamic_update_slice", starts, x.ndim)
    if update.ndim != x.ndim or any(u > n for u, n in zip(update.shape, x.shape, strict=True)):
        raise ShapeError(f"dynamic_update_slice: update {update.shape} does not fit in {x.shape}")
    if update.dtype != x.dtype:
        raise DTypeError(f"dynamic_update_slice: update dtype {update.dtype.name} != {x.dtype.name}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


dynamic_update_slice = Primitive("dynamic_update_slice", _dynamic_update_slice_rule, kind="structural",
                                 doc="Start indices are clamped so that the update fits (as XLA).")


def _pad_rule(x, pad_value, *, padding_config):
    if len(padding_config) != x.ndim:
        raise ShapeError(f"pad needs {x.ndim} (low, high, interior) triples, got {len(padding_config)}")
    if pad_value.shape != () or pad_value.dtype != x.dtype:
        raise DTypeError(f"pad value must be a {x.dtype.name} scalar, got {pad_value.str_short()}")
    shape = []
    for (lo, hi, interior), n in zip(padding_config, x.shape, strict=True):
        if interior < 0:
            raise ShapeError("pad: interior padding must be >= 0")
        m = lo + hi + n + max(0, n - 1) * interior
        if m < 0:
            raise ShapeError(f"pad: negative padding {padding_config} removes more than {x.shape}")
        shape.append(m)
    return ShapedArray(tuple(shape), x.dtype, x.weak_type)


pad = Primitive("pad", _pad_rule, kind="structural", doc="Low/high padding may be negative (cropping).")


def _concatenate_rule(*xs, dimension):
    if not xs:
        raise ShapeError("concatenate needs at least one operand")
    x0 = xs[0]
    if not 0 <= dimension < len(x0.shape):   # (``len``, not the ``ndim`` property: a call less)
        raise ShapeError(f"concatenate: dimension {dimension} out of range for rank {x0.ndim}")
    head, tail = x0.shape[:dimension], x0.shape[dimension + 1:]
    size, weak = 0, True
    for x in xs:  # (one loop of C comparisons: ``stack`` of 5,000 arrays checks each, issue 28)
        if x is not x0:
            if x.dtype != x0.dtype:
                raise DTypeError(f"concatenate: dtypes differ ({x0.dtype.name}, {x.dtype.name})")
            s = x.shape
            if len(s) != len(x0.shape) or s[:dimension] != head or s[dimension + 1:] != tail:
                raise ShapeError(f"concatenate along {dimension}: shapes {x0.shape} and {s} do not fit")
        size += x.shape[dimension]
        weak = weak and x.weak_type
    shape = list(x0.shape)
    shape[dimension] = size
    return _shaped((tuple(shape), x0.dtype, weak))


concatenate = Primitive("concatenate", _concatenate_rule, kind="structural")


def _gather_shape(name, x, indices, axes):
    if not dtypes.is_int(indices.dtype) or indices.ndim < 1 or indices.shape[-1] != len(axes):
        raise ShapeError(f"{name}: indices must be integer with last dimension {len(axes)}, "
                         f"got {indices.str_short()}")
    _check_axes(name, x, axes)
    rest = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return indices.shape[:-1] + rest


def _gather_rule(x, indices, *, axes):
    return ShapedArray(_gather_shape("gather", x, indices, axes), x.dtype, x.weak_type)


gather = Primitive(
    "gather", _gather_rule, kind="other",
    doc=("out[b..., r...] = x at position indices[b..., k] along axes[k] and r... along the other axes. "
         "Indices are clamped into bounds."))


def _scatter_rule(x, indices, updates, *, axes):
    want = _gather_shape("scatter", x, indices, axes)
    if updates.shape != want or updates.dtype != x.dtype:
        raise ShapeError(f"scatter: updates must be {ShapedArray(want, x.dtype).str_short()}, "
                         f"got {updates.str_short()}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


_SCATTER_DOC = "The transpose form of gather: updates at out-of-bounds indices are dropped. "
scatter = Primitive("scatter", _scatter_rule, kind="other",
                    doc=_SCATTER_DOC + "With repeated indices one of the updates wins.")
scatter_add = Primitive("scatter_add", _scatter_rule, kind="other", doc=_SCATTER_DOC + "Repeats add up.")
scatter_mul = Primitive("scatter_mul", _scatter_rule, kind="other", doc=_SCATTER_DOC + "Repeats multiply.")
scatter_min = Primitive("scatter_min", _scatter_rule, kind="other", doc=_SCATTER_DOC)
scatter_max = Primitive("scatter_max", _scatter_rule, kind="other", doc=_SCATTER_DOC)

# ----------------------------------------------------------------------------- reductions


def _check_axes(name, x, axes):
    if len(axes) == 1 and 0 <= axes[0] < len(x.shape):  # one axis in range (the common case: no set)
        return
    if len(set(axes)) != len(axes) or any(not 0 <= a < x.ndim for a in axes):
        raise ShapeError(f"{name}: axes {axes} invalid for rank {x.ndim}: each must lie in [0, {x.ndim}) and "
                         "appear once")


def reduction(name, accepts=_ANY, doc=""):
    ok, what = accepts

    def rule(x, *, axes):
        _dtype_check(name, x, ok, what)
        _check_axes(name, x, axes)
        return _shaped((tuple([n for i, n in enumerate(x.shape) if i not in axes]), x.dtype, x.weak_type))

    return Primitive(name, rule, kind="reduce", doc=doc)


reduce_sum = reduction("reduce_sum", _NUMERIC)
reduce_prod = reduction("reduce_prod", _NUMERIC)
reduce_max = reduction("reduce_max", _ANY, doc="Propagates NaN; the identity is the dtype's lowest value.")
reduce_min = reduction("reduce_min", _ANY, doc="Propagates NaN; the identity is the dtype's highest value.")
reduce_and = reduction("reduce_and", _INT_OR_BOOL)
reduce_or = reduction("reduce_or", _INT_OR_BOOL)


def _arg_rule(name):
    def rule(x, *, axes, index_dtype):
        _check_axes(name, x, axes)
        if len(axes) != 1:
            raise ShapeError(f"{name} reduces exactly one axis, got {axes}")
        if x.shape[axes[0]] == 0:
            raise ShapeError(f"{name} of an empty axis (shape {x.shape}, axis {axes[0]})")
        _dtype_check(name, x, *_NOT_COMPLEX)
        if not dtypes.is_int(index_dtype):   # as JAX; a float32 index_dtype gave float positions
            raise DTypeError(f"{name}: index_dtype must be an integer dtype (int32, int64...), got "
                             f"{np.dtype(index_dtype).name}")
        _check_indices_fit(name, x.shape[axes[0]], index_dtype,
                           f"pass index_dtype=int64 to fnarray.lax.{name} (where the device has int64), or "
                           f"reduce pieces of the axis and combine them")
        return ShapedArray(tuple(n for i, n in enumerate(x.shape) if i != axes[0]), index_dtype)
    return rule


argmax = Primitive("argmax", _arg_rule("argmax"), kind="reduce", doc="First maximum; NaN counts as the maximum.")
argmin = Primitive("argmin", _arg_rule("argmin"), kind="reduce", doc="First minimum; NaN counts as the minimum.")


def cumulative(name, accepts=_NUMERIC):
    ok, what = accepts

    def rule(x, *, axis, reverse=False):
        _dtype_check(name, x, ok, what)
        _check_axes(name, x, (axis,))
        return x

    return Primitive(name, rule, kind="cumulative")


cumsum = cumulative("cumsum")
cumprod = cumulative("cumprod")
cummax = cumulative("cummax", _NOT_COMPLEX)
cummin = cumulative("cummin", _NOT_COMPLEX)
cumlogsumexp = cumulative("cumlogsumexp", _FLOAT)


def _sort_rule(*xs, dimension, is_stable, num_keys):
    if not xs:
        raise ShapeError("sort needs at least one operand")
    for x in xs:
        if x.shape != xs[0].shape:
            raise ShapeError(f"sort operands must share a shape, got {xs[0].shape} and {x.shape}")
    _check_axes("sort", xs[0], (dimension,))
    if not 1 <= num_keys <= len(xs):
        raise ValueError(f"sort: num_keys={num_keys} with {len(xs)} operands")
    for x in xs[:num_keys]:
        _dtype_check("sort", x, *_NOT_COMPLEX)
    return list(xs)


sort = Primitive("sort", _sort_rule, multiple_results=True, kind="other",
                 doc="Sorts all operands by the first num_keys (lexicographic); NaN sorts last; -0.0 == 0.0.")


_MATRIX_DN = (((1,), (0,)), ((), ()))   # a matrix product's dimension numbers


def _dot_general_rule(lhs, rhs, *, dimension_numbers, preferred_element_type=None):
    ls, rs = lhs.shape, rhs.shape
    if dimension_numbers == _MATRIX_DN and len(ls) == 2 and len(rs) == 2 and ls[1] == rs[0] \
            and lhs.dtype == rhs.dtype:
        # two matrices whose inner sizes agree (``@``, the common product: the general checks below pass; ~4x
        # cheaper, and every traced product asks; issue 28)
        return _shaped(((ls[0], rs[1]), preferred_element_type or lhs.dtype, lhs.weak_type and rhs.weak_type))
    (lc, rc), (lb, rb) = dimension_numbers
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise ShapeError(f"dot_general: mismatched dimension_numbers {dimension_numbers}")
    _check_axes("dot_general", lhs, tuple(lc) + tuple(lb))   # before the sizes are read (an axis 5 of a
    _check_axes("dot_general", rhs, tuple(rc) + tuple(rb))   # matrix was "tuple index out of range")
    for a, b in zip(lc, rc, strict=True):
        if lhs.shape[a] != rhs.shape[b]:
            raise ContractionShapeError(
                f"dot_general: contracting dimension {a} of lhs {lhs.shape} (size {lhs.shape[a]}) "
                f"!= dimension {b} of rhs {rhs.shape} (size {rhs.shape[b]})")
    for a, b in zip(lb, rb, strict=True):
        if lhs.shape[a] != rhs.shape[b]:
            raise ContractionShapeError(
                f"dot_general: batch dimension {a} of lhs {lhs.shape} != {b} of rhs {rhs.shape}")
    if lhs.dtype != rhs.dtype:
        raise DTypeError(f"dot_general needs one dtype, got {lhs.dtype.name} and {rhs.dtype.name}")
    lfree = [n for i, n in enumerate(lhs.shape) if i not in lc and i not in lb]
    rfree = [n for i, n in enumerate(rhs.shape) if i not in rc and i not in rb]
    shape = tuple(lhs.shape[i] for i in lb) + tuple(lfree) + tuple(rfree)
    d = preferred_element_type or lhs.dtype
    return _shaped((shape, d, lhs.weak_type and rhs.weak_type))


dot_general = Primitive(
    "dot_general", _dot_general_rule, kind="other",
    doc="Output dims: batch, then lhs free, then rhs free (as XLA). Bool operands mean logical or-of-ands.")

# ----------------------------------------------------------------------------- higher-order


def _check_closed(prog, name):
    from fnarray.core.ir import check_program, IRError  # noqa: PLC0415 (ir imports nothing of ours)
    if prog.constvars:
        raise IRError(f"{name}: sub-programs take their constants as inputs; found constvars")
    check_program(prog)


def _avals_match(got, want):
    return len(got) == len(want) and all((g.shape, g.dtype) == (w.shape, w.dtype)
                                         for g, w in zip(got, want, strict=True))


def _fmt(avals):
    return "(" + ", ".join(a.str_short() for a in avals) + ")"


def _cond_rule(index, *ops, branches):
    if index.shape != () or index.dtype != dtypes.int32:
        raise DTypeError(f"cond's index must be an int32 scalar, got {index.str_short()}")
    for b in branches:
        _check_closed(b, "cond")
        if not _avals_match(ops, b.in_avals):
            raise ShapeError(f"cond: branch takes {_fmt(b.in_avals)}, given {_fmt(ops)}")
        if not _avals_match(b.out_avals, branches[0].out_avals):
            raise ShapeError(f"cond: branches return different types: {_fmt(branches[0].out_avals)} "
                             f"and {_fmt(b.out_avals)}")
    # an output is weak where every branch's is (JAX's join of the branches' types)
    return [ShapedArray(a.shape, a.dtype, all(b.out_avals[i].weak_type for b in branches))
            for i, a in enumerate(branches[0].out_avals)]


cond = Primitive("cond", _cond_rule, multiple_results=True, kind="control",
                 doc="Runs branches[clamp(index, 0, len-1)](*ops).")


def _while_rule(*args, cond_program, body_program, cond_nconsts, body_nconsts):
    _check_closed(cond_program, "while")
    _check_closed(body_program, "while")
    cc, bc, init = args[:cond_nconsts], args[cond_nconsts:cond_nconsts + body_nconsts], \
        args[cond_nconsts + body_nconsts:]
    if not _avals_match(tuple(cc) + tuple(init), cond_program.in_avals):
        raise ShapeError(f"while: cond takes {_fmt(cond_program.in_avals)}, given {_fmt(tuple(cc) + init)}")
    co = cond_program.out_avals
    if len(co) != 1 or co[0].shape != () or co[0].dtype != dtypes.bool_:
        raise DTypeError(f"while: cond must return one bool scalar, returns {_fmt(co)}")
    if not _avals_match(tuple(bc) + tuple(init), body_program.in_avals):
        raise ShapeError(f"while: body takes {_fmt(body_program.in_avals)}, given {_fmt(tuple(bc) + init)}")
    if not _avals_match(body_program.out_avals, init):
        raise ShapeError(f"while: body returns {_fmt(body_program.out_avals)}, carry is {_fmt(init)}")
    return list(body_program.out_avals)  # the body's output types, weak types included (as JAX)


while_p = Primitive("while", _while_rule, multiple_results=True, kind="control")


def _scan_rule(*args, program, num_consts, num_carry, length, reverse, unroll=1):
    _check_closed(program, "scan")
    consts, carry, xs = args[:num_consts], args[num_consts:num_consts + num_carry], args[num_consts + num_carry:]
    for x in xs:
        if x.ndim == 0 or x.shape[0] != length:
            raise ShapeError(f"scan: every xs leaf needs leading dimension {length}, got {x.str_short()}")
    x_avals = tuple(ShapedArray(x.shape[1:], x.dtype, x.weak_type) for x in xs)
    if not _avals_match(tuple(consts) + tuple(carry) + x_avals, program.in_avals):
        raise ShapeError(f"scan: body takes {_fmt(program.in_avals)}, "
                         f"given {_fmt(tuple(consts) + tuple(carry) + x_avals)}")
    outs = program.out_avals
    if not _avals_match(outs[:num_carry], carry):
        raise ShapeError(f"scan: body returns carry {_fmt(outs[:num_carry])}, expected {_fmt(carry)}")
    ys = [ShapedArray((length,) + y.shape, y.dtype, y.weak_type) for y in outs[num_carry:]]
    return list(outs[:num_carry]) + ys  # the body's output types, weak types included (as JAX)


scan = Primitive("scan", _scan_rule, multiple_results=True, kind="control")


def _call_rule(*args, program, name="call"):
    _check_closed(program, "call")
    if not _avals_match(args, program.in_avals):
        raise ShapeError(f"call {name}: takes {_fmt(program.in_avals)}, given {_fmt(args)}")
    return list(program.out_avals)


call = Primitive("call", _call_rule, multiple_results=True, kind="control", doc="A nested jitted program.")


def _custom_call_rule(*args, call_program, **params):
    return _call_rule(*args, program=call_program)


custom_jvp_call = Primitive("custom_jvp_call", _custom_call_rule, multiple_results=True, kind="control",
                            doc="Runs call_program; differentiation uses the user's JVP rule.")
custom_vjp_call = Primitive("custom_vjp_call", _custom_call_rule, multiple_results=True, kind="control",
                            doc="Runs call_program; reverse-mode uses the user's forward/backward rules.")


def _remat_rule(*args, program, prevent_cse=True, policy=None):
    return _call_rule(*args, program=program, name="remat")


remat = Primitive("remat", _remat_rule, multiple_results=True, kind="control",
                  doc="Runs program; its residuals are recomputed in the backward pass.")


def _custom_lin_rule(*args, num_res, out_avals, bwd, in_tree=None):
    return list(out_avals)


custom_lin = Primitive(
    "custom_lin", _custom_lin_rule, multiple_results=True, kind="control",
    doc=("The linear part of a custom_vjp function inside reverse-mode differentiation: residuals + tangents "
         "-> output tangents. It is only ever transposed (which calls the user's bwd), never evaluated."))


# ----------------------------------------------------------------------------- effects


def _debug_callback_rule(*args, callback, in_tree, nbatch=0):
    return []


debug_callback = Primitive(
    "debug_callback", _debug_callback_rule, multiple_results=True, kind="effect",
    doc=("Calls a Python function on the host with its inputs as NumPy arrays (fnarray.debug.callback/print); "
         "no outputs. An effect: dead-code elimination keeps it, it runs in program order. ``callback`` is a "
         "hashable wrapper, ``in_tree`` the pytree structure of the call's arguments, ``nbatch`` the number of "
         "leading axes that vmap added (the callback runs once per index, in C order)."))


def _pure_callback_rule(*args, callback, in_tree, out_tree, result_avals, vmap_method=None, nbatch=0):
    return list(result_avals)


pure_callback = Primitive(
    "pure_callback", _pure_callback_rule, multiple_results=True, kind="effect",
    doc=("Calls a Python function on the host with its inputs as NumPy arrays and returns its results "
         "(fnarray.pure_callback): ``result_avals`` their avals, ``out_tree`` their pytree structure, ``in_tree`` "
         "the arguments' (as debug_callback), ``vmap_method`` JAX's, ``nbatch`` the leading axes that a "
         "sequential vmap added (the function runs once per index, C order, the results stacked). Held as an "
         "effect: never merged with an equal call nor folded; kept even when its results are unused."))

#: Primitives with effects: never removed by dead-code elimination, never folded or reordered.
EFFECTS = frozenset({debug_callback, pure_callback})
