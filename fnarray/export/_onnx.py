"""``fnarray.export.onnx``: a jitted function's IR as an ONNX model.

The function is traced (``jit(f).trace``), its calls inlined
(``_flatten.straight_line(keep_control=True)``: ``scan``, ``cond`` and ``while``
stay) and each equation lowered by one rule of ``RULES``, a table keyed by
primitive: ``rule(g, eqn, ins) -> out names``, where ``g`` is the graph being
built and ``ins`` the ONNX names of the equation's inputs. A new primitive
(a convolution, a pooling window) is one more entry.

The rules reproduce fnarray's semantics (docs/design.md), not ONNX's defaults:
gather indices are clamped (``Min``/``Max`` before ``GatherND``), scatter drops
out-of-bounds updates (they go to a padding row that is sliced off), integer
division and remainder by zero give 0, float-to-int casts saturate with NaN -> 0,
``max``/``min`` and their reductions propagate NaN, ``argmax``/``argmin`` return
the first NaN, ``sort`` is stable with NaN last (two stable ``TopK`` passes).
``scan`` becomes a ``Loop`` of static trip count, ``while`` a ``Loop`` with a
condition, ``cond`` a chain of ``If``. Sub-graphs read the values they close
over from the enclosing graph by name, as ONNX allows.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile

import numpy as np

from fnarray.core.log import logged_step
from fnarray.core import dtypes
from fnarray.core import linalg as _L
from fnarray.core import primitives as P
from fnarray.core.fft import fft_p
from fnarray.core.quantized import quantized_matmul_p, weight_shape
from fnarray.core import pallas as _pallas
from fnarray.lowering.packed import FLOAT_FORMATS, acc_dtype, unpack_plan
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.decompositions import decompose
from fnarray.core.errors import UnsupportedOnDevice
from fnarray.core.ir import Literal, Program, check_program
from fnarray.core.shaped import ShapedArray
from fnarray.export._flatten import straight_line
from fnarray.export._names import export_leaves, out_names

__all__ = ["onnx", "RULES", "UNSUPPORTED", "DEFAULT_OPSET"]

DEFAULT_OPSET = 18
_MIN_OPSET = 17
_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool"}
_I64_MIN = np.iinfo(np.int64).min

from fnarray.core import collectives as _collectives  # noqa: E402
from fnarray.core import spmd as _spmd  # noqa: E402

#: ``rule(g, eqn, ins) -> name or list of names`` per primitive.
RULES: dict = {}
#: Primitives without an ONNX lowering, each with the reason given at export.
UNSUPPORTED = {
    P.erf_inv: "ONNX has no inverse error function",
    P.erfc: "ONNX has no complementary error function (and 1 - Erf loses it above x of about 3.9 in float32)",
    P.log2: "ONNX has no base-2 logarithm",
    P.lgamma: "ONNX has no log-gamma function",
    P.digamma: "ONNX has no digamma function",
    P.nextafter: "ONNX has no nextafter",
    P.population_count: "ONNX has no population count",
    P.bitcast_convert_type: "ONNX has no bitcast operator (fnarray.random's uniform and normal use one)",
    P.complex_p: "ONNX Runtime has no complex tensors",
    P.real: "ONNX Runtime has no complex tensors",
    P.imag: "ONNX Runtime has no complex tensors",
    P.conj: "ONNX Runtime has no complex tensors",
    fft_p: "ONNX Runtime has no complex tensors (ONNX's DFT holds (re, im) pairs in a real tensor)",
    P.custom_lin: "it only exists inside reverse-mode differentiation",
    P.debug_callback: ("fnarray.debug.print / fnarray.debug.callback call Python, which an ONNX model cannot; "
                       "remove the debug call before exporting"),
    P.pure_callback: "fnarray.pure_callback calls Python, which an ONNX model cannot",
    **{p: "a collective needs a named axis: inside vmap(axis_name=) its batching rule replaces it before export"
       for p in _collectives.COLLECTIVES},
    _spmd.shard_map_p: "an ONNX model runs on one device: export the per-device function instead",
    _pallas.pallas_call_p: ("ONNX has no user kernels: export the same computation written with fnarray operations "
                            "(each examples/kernels/ kernel has one)"),
    **{p: "only inside a pallas_call kernel body" for p in _pallas.KERNEL_PRIMITIVES},
}
UNSUPPORTED.update({p: f"ONNX has no matrix factorizations ({p.name}); only Det among linear algebra"
                    for p in (_L.cholesky_p, _L.triangular_solve_p, _L.lu_p, _L.qr_p, _L.eigh_p, _L.svd_p)})


def _rule(*prims):
    def deco(fn):
        for p in prims:
            RULES[p] = fn
        return fn
    return deco


# ------------------------------------------------------------------------------------------- graph


class _Names:
    """Fresh value names, unique across the model and its sub-graphs (ONNX scoping needs that)."""

    def __init__(self):
        self.n = 0

    def fresh(self, hint: str = "v") -> str:
        self.n += 1
        return f"_{hint}{self.n}"


class _Graph:
    """The nodes of one ONNX graph (the main graph or a Loop/If body) being built."""

    def __init__(self, onnx_mod, names: _Names, opset: int, parent=None):
        self.onnx, self.names, self.opset = onnx_mod, names, opset
        self.nodes: list = []
        self._consts: dict = {}
        #: the values of names that are initializers (captured constants, baked arguments): name -> ndarray
        self.known: dict = {} if parent is None else parent.known

    def node(self, op, inputs, n_out=1, **attrs):
        outs = [self.names.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=None) -> str:
        a = np.asarray(value, dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        name = self._consts.get(key)
        if name is None:
            name = self.names.fresh("c")
            tensor = self.onnx.numpy_helper.from_array(a, name)
            self.nodes.append(self.onnx.helper.make_node("Constant", [], [name], value=tensor))
            self._consts[key] = name
        return name

    def i64(self, values) -> str:
        return self.const(np.asarray(list(values), np.int64).reshape(-1))

    def scalar(self, value, dtype) -> str:
        return self.const(np.asarray(value).astype(dtype))

    def value_info(self, name, aval):
        return self.onnx.helper.make_tensor_value_info(name, _elem_type(self.onnx, aval.dtype), list(aval.shape))

    def sub(self) -> "_Graph":
        return _Graph(self.onnx, self.names, self.opset, parent=self)

    def graph(self, name, inputs, outputs, initializers=()):
        return self.onnx.helper.make_graph(self.nodes, name, inputs, outputs, initializer=list(initializers))


def _elem_type(onnx_mod, dtype):
    return onnx_mod.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _check_dtypes(e) -> None:
    for a in list(e.inputs) + list(e.outputs):
        name = np.dtype(a.aval.dtype).name
        if name not in _DTYPES:
            raise UnsupportedOnDevice(
                f"fnarray.export.onnx: {e.primitive.name} on {name} cannot be exported: ONNX Runtime has no "
                f"{name} tensors for it (the model takes {', '.join(sorted(_DTYPES))}); cast first "
                "(fnarray.numpy.astype) or export without that operation")


def _rule_for(e):
    """The equation's rule; raises naming the primitive (and dtype) when there is none."""
    prim = e.primitive
    rule = RULES.get(prim)
    if rule is None:
        why = UNSUPPORTED.get(prim, "no rule in fnarray.export._onnx.RULES")
        dts = ", ".join(dict.fromkeys(np.dtype(a.aval.dtype).name for a in list(e.inputs) + list(e.outputs)))
        raise UnsupportedOnDevice(f"fnarray.export.onnx: {prim.name} ({dts}) cannot be exported to ONNX: {why}. "
                                  "Rewrite the function without it, or compute that part before the export.")
    _check_dtypes(e)
    return rule


def _lower(g: _Graph, program, in_names) -> list[str]:
    """Emit ``program``'s equations into ``g``; returns the names of its outputs."""
    env = dict(zip(program.invars, in_names, strict=True))

    def read(a):
        if isinstance(a, Literal):
            return g.const(np.asarray(a.val, a.aval.dtype))
        return env[a]

    for e in program.eqns:
        rule = _rule_for(e)
        if e.outputs and all(0 in v.aval.shape for v in e.outputs) and not e.primitive.multiple_results:
            # A zero-size result is a constant (and ONNX Runtime's Expand to a 0 dimension gives size 1).
            v = e.outputs[0]
            env[v] = g.const(np.zeros(v.aval.shape, v.aval.dtype))
            continue
        outs = rule(g, e, [read(a) for a in e.inputs])
        outs = [outs] if isinstance(outs, str) else list(outs)
        for v, n in zip(e.outputs, outs, strict=True):
            env[v] = n
    return [read(a) for a in program.outvars]


def _subgraph(g: _Graph, program, in_names, name):
    """An input-less sub-graph (an ``If`` branch) running ``program`` on names of the enclosing graph."""
    sg = g.sub()
    return _finish(sg, _lower(sg, program, in_names), [a.strip_weak() for a in program.out_avals], name)


def _finish(sg: _Graph, outs, avals, name, inputs=()):
    """Identity every output into a fresh name (a sub-graph output must be its own value) and make the graph."""
    infos = []
    for o, aval in zip(outs, avals, strict=True):
        fresh = sg.node("Identity", [o])
        infos.append(sg.value_info(fresh, aval))
    return sg.graph(name, list(inputs), infos)


# ------------------------------------------------------------------------------------------- elementwise


def _av(e, i=0):
    return e.inputs[i].aval


def _out(e, i=0):
    return e.outputs[i].aval


def _simple(op):
    def rule(g, e, ins):
        return g.node(op, ins)
    return rule


for _p, _op in [(P.exp, "Exp"), (P.log, "Log"), (P.tanh, "Tanh"), (P.sin, "Sin"), (P.cos, "Cos"),
                (P.tan, "Tan"), (P.asin, "Asin"), (P.acos, "Acos"), (P.atan, "Atan"), (P.sinh, "Sinh"),
                (P.cosh, "Cosh"), (P.asinh, "Asinh"), (P.acosh, "Acosh"), (P.atanh, "Atanh"), (P.sqrt, "Sqrt"),
                (P.erf, "Erf"), (P.floor, "Floor"), (P.ceil, "Ceil"), (P.round_p, "Round"),
                (P.logistic, "Sigmoid"), (P.stop_gradient, "Identity"), (P.copy_p, "Identity"), (P.name_p, "Identity"),
                (_spmd.sharding_constraint_p, "Identity"),
                (P.abs_p, "Abs"), (P.sign, "Sign"), (P.add, "Add"), (P.sub, "Sub"), (P.mul, "Mul"),
                (P.pow_p, "Pow"), (P.eq, "Equal"), (P.lt, "Less"), (P.le, "LessOrEqual"), (P.gt, "Greater"),
                (P.ge, "GreaterOrEqual")]:
    RULES[_p] = _simple(_op)


def _one(g, e, v):
    return g.scalar(v, _av(e).dtype)


@_rule(P.neg)
def _neg(g, e, ins):
    if dtypes.is_unsigned(_av(e).dtype):
        return g.node("Sub", [_one(g, e, 0), ins[0]])
    return g.node("Neg", ins)


@_rule(P.ne)
def _ne(g, e, ins):
    return g.node("Not", [g.node("Equal", ins)])


@_rule(P.is_finite)
def _is_finite(g, e, ins):
    return g.node("Not", [g.node("Or", [g.node("IsNaN", ins), g.node("IsInf", ins)])])


@_rule(P.exp2)
def _exp2(g, e, ins):
    return g.node("Pow", [_one(g, e, 2), ins[0]])


@_rule(P.log1p)
def _log1p(g, e, ins):
    return g.node("Log", [g.node("Add", [ins[0], _one(g, e, 1)])])


@_rule(P.expm1)
def _expm1(g, e, ins):
    return g.node("Sub", [g.node("Exp", ins), _one(g, e, 1)])


@_rule(P.rsqrt)
def _rsqrt(g, e, ins):
    return g.node("Reciprocal", [g.node("Sqrt", ins)])


@_rule(P.log10)
def _log10(g, e, ins):
    return g.node("Mul", [g.node("Log", ins), _one(g, e, 1 / math.log(10))])


@_rule(P.cbrt)
def _cbrt(g, e, ins):
    mag = g.node("Pow", [g.node("Abs", ins), _one(g, e, 1 / 3)])
    return g.node("Mul", [g.node("Sign", ins), mag])


@_rule(P.integer_pow)
def _integer_pow(g, e, ins):
    y = e.params["y"]
    x = ins[0]
    if y == 0:
        return g.const(np.ones(_out(e).shape, _out(e).dtype))
    acc, base, k = None, x, abs(y)
    while k:
        if k & 1:
            acc = base if acc is None else g.node("Mul", [acc, base])
        k >>= 1
        if k:
            base = g.node("Mul", [base, base])
    return g.node("Div", [_one(g, e, 1), acc]) if y < 0 else acc


def _nan_either(g, a, b):
    return g.node("Or", [g.node("IsNaN", [a]), g.node("IsNaN", [b])])


def _minmax(op, bool_op):
    def rule(g, e, ins):
        d = _av(e).dtype
        if d == np.bool_:
            return g.node(bool_op, ins)
        m = g.node(op, ins)
        if not dtypes.is_inexact(d):
            return m
        return g.node("Where", [_nan_either(g, *ins), g.node("Add", ins), m])
    return rule


RULES[P.max_p] = _minmax("Max", "Or")
RULES[P.min_p] = _minmax("Min", "And")


def _int_guarded(g, e, ins, op, **attrs):
    """``op`` on integers with y == 0 giving 0 and (signed) y == -1 done without the trapping case."""
    x, y = ins
    d = _av(e).dtype
    zero, one = _one(g, e, 0), _one(g, e, 1)
    bad = g.node("Equal", [y, zero])
    if dtypes.is_signed(d):
        minus = g.node("Equal", [y, _one(g, e, -1)])
        bad_all = g.node("Or", [bad, minus])
    else:
        bad_all = bad
    safe = g.node("Where", [bad_all, one, y])
    r = g.node(op, [x, safe], **attrs)
    if dtypes.is_signed(d):
        # x / -1 is -x (INT_MIN stays INT_MIN, as two's complement wraps); x % -1 is 0.
        r = g.node("Where", [minus, g.node("Neg", [x]) if op == "Div" else zero, r])
    return g.node("Where", [bad, zero, r])


@_rule(P.div)
def _div(g, e, ins):
    if dtypes.is_int(_av(e).dtype):
        return _int_guarded(g, e, ins, "Div")
    return g.node("Div", ins)


@_rule(P.rem)
def _rem(g, e, ins):
    if dtypes.is_int(_av(e).dtype):
        return _int_guarded(g, e, ins, "Mod", fmod=1)
    return g.node("Mod", ins, fmod=1)


@_rule(P.atan2)
def _atan2(g, e, ins):
    a, b = ins
    zero = _one(g, e, 0)
    r = g.node("Atan", [g.node("Div", [a, b])])
    turn = g.node("Where", [g.node("GreaterOrEqual", [a, zero]), _one(g, e, math.pi), _one(g, e, -math.pi)])
    r = g.node("Add", [r, g.node("Where", [g.node("Less", [b, zero]), turn, zero])])
    both_zero = g.node("And", [g.node("Equal", [a, zero]), g.node("Equal", [b, zero])])
    return g.node("Where", [both_zero, g.node("Where", [g.node("Less", [b, zero]), turn, zero]), r])


def _need_opset(g, e, opset, what):
    if g.opset < opset:
        raise UnsupportedOnDevice(f"fnarray.export.onnx: {e.primitive.name} on {np.dtype(_av(e).dtype).name} "
                                  f"needs {what}, which ONNX has from opset {opset}; export with opset={opset}")


def _logic(bool_op, bit_op):
    def rule(g, e, ins):
        if _av(e).dtype == np.bool_:
            return g.node(bool_op, ins)
        _need_opset(g, e, 18, bit_op)
        return g.node(bit_op, ins)
    return rule


RULES[P.and_p] = _logic("And", "BitwiseAnd")
RULES[P.or_p] = _logic("Or", "BitwiseOr")
RULES[P.xor_p] = _logic("Xor", "BitwiseXor")
RULES[P.not_p] = _logic("Not", "BitwiseNot")


def _unsigned(d):
    return np.dtype(f"u{np.dtype(d).itemsize}")


def _shift(kind):
    def rule(g, e, ins):
        _need_opset(g, e, 18, "BitwiseNot")
        x, y = ins
        d = np.dtype(_av(e).dtype)
        u = _unsigned(d)
        bits = d.itemsize * 8
        zero = _one(g, e, 0)
        ok = g.node("And", [g.node("GreaterOrEqual", [y, zero]), g.node("Less", [y, _one(g, e, bits)])])
        ys = g.node("Where", [ok, y, zero])

        def as_u(v):
            return v if d == u else g.node("Cast", [v], to=_elem_type(g.onnx, u))

        def back(v):
            return v if d == u else g.node("Cast", [v], to=_elem_type(g.onnx, d))

        if kind != "arithmetic":
            r = back(g.node("BitShift", [as_u(x), as_u(ys)], direction="LEFT" if kind == "left" else "RIGHT"))
            return g.node("Where", [ok, r, zero])
        # Arithmetic right shift: shift the complement of a negative value logically, complement back.
        if dtypes.is_signed(d):
            neg = g.node("Less", [x, zero])
            fill = g.node("Where", [neg, _one(g, e, -1), zero])
        else:
            neg = g.node("GreaterOrEqual", [x, _one(g, e, 1 << (bits - 1))])
            fill = g.node("Where", [neg, _one(g, e, np.iinfo(d).max), zero])
        src = g.node("Where", [neg, g.node("BitwiseNot", [x]), x])
        r = back(g.node("BitShift", [as_u(src), as_u(ys)], direction="RIGHT"))
        r = g.node("Where", [neg, g.node("BitwiseNot", [r]), r])
        return g.node("Where", [ok, r, fill])
    return rule


RULES[P.shift_left] = _shift("left")
RULES[P.shift_right_logical] = _shift("logical")
RULES[P.shift_right_arithmetic] = _shift("arithmetic")


@_rule(P.select_n)
def _select_n(g, e, ins):
    which, cases = ins[0], ins[1:]
    if len(cases) == 1:
        return g.node("Identity", [cases[0]])
    if _av(e).dtype == np.bool_:
        return g.node("Where", [which, cases[1], cases[0]])
    out = cases[0]
    for k in range(1, len(cases)):  # the largest k <= which: clamps as fnarray's select_n does
        out = g.node("Where", [g.node("GreaterOrEqual", [which, g.scalar(k, np.int32)]), cases[k], out])
    return out


@_rule(P.convert_element_type)
def _convert(g, e, ins):
    src, dst = np.dtype(_av(e).dtype), np.dtype(e.params["new_dtype"])
    x = ins[0]
    if src == dst:
        return g.node("Identity", [x])
    if dst == np.bool_:
        return g.node("Not", [g.node("Equal", [x, g.scalar(0, src)])])
    to = _elem_type(g.onnx, dst)
    if dtypes.is_float(src) and dtypes.is_int(dst):
        info = np.iinfo(dst)
        lo, hi = g.scalar(float(info.min), src), g.scalar(float(info.max), src)
        clean = g.node("Where", [g.node("IsNaN", [x]), g.scalar(0, src), x])
        clipped = g.node("Clip", [clean, lo, hi])
        # float(info.max) may round up past the int range (2**31 in float32): saturate that case explicitly.
        return g.node("Where", [g.node("GreaterOrEqual", [clipped, hi]), g.scalar(info.max, dst),
                                g.node("Cast", [clipped], to=to)])
    return g.node("Cast", [x], to=to)


# ------------------------------------------------------------------------------------------- structural


@_rule(P.iota)
def _iota(g, e, ins):
    p = e.params
    shape, dim, d = tuple(p["shape"]), p["dimension"], np.dtype(p["dtype"])
    n = shape[dim]
    work = d if d.name in ("float32", "float64", "int16", "int32", "int64") else np.dtype(np.int64)
    r = g.node("Range", [g.scalar(0, work), g.scalar(n, work), g.scalar(1, work)])
    if work != d:
        r = g.node("Cast", [r], to=_elem_type(g.onnx, d))
    inter = [n if i == dim else 1 for i in range(len(shape))]
    r = g.node("Reshape", [r, g.i64(inter)])
    return g.node("Expand", [r, g.i64(shape)]) if tuple(inter) != shape else r


@_rule(P.broadcast_in_dim)
def _broadcast_in_dim(g, e, ins):
    shape, bd = tuple(e.params["shape"]), e.params["broadcast_dimensions"]
    inter = [1] * len(shape)
    for i, d in enumerate(bd):
        inter[d] = _av(e).shape[i]
    x = ins[0]
    if tuple(inter) != _av(e).shape:
        x = g.node("Reshape", [x, g.i64(inter)], allowzero=1)
    return g.node("Expand", [x, g.i64(shape)]) if tuple(inter) != shape else g.node("Identity", [x])


@_rule(P.reshape)
def _reshape(g, e, ins):
    return g.node("Reshape", [ins[0], g.i64(e.params["new_sizes"])], allowzero=1)


@_rule(P.transpose)
def _transpose(g, e, ins):
    return g.node("Transpose", ins, perm=list(e.params["permutation"]))


def _flip(g, x, axes):
    if not axes:
        return g.node("Identity", [x])
    k = len(axes)
    return g.node("Slice", [x, g.i64([-1] * k), g.i64([_I64_MIN] * k), g.i64(axes), g.i64([-1] * k)])


@_rule(P.rev)
def _rev(g, e, ins):
    return _flip(g, ins[0], list(e.params["dimensions"]))


def _slice(g, x, starts, limits, steps=None):
    n = len(starts)
    args = [x, g.i64(starts), g.i64(limits), g.i64(range(n))]
    if steps is not None:
        args.append(g.i64(steps))
    return g.node("Slice", args)


@_rule(P.slice_p)
def _slice_rule(g, e, ins):
    p = e.params
    if _av(e).ndim == 0:
        return g.node("Identity", ins)
    return _slice(g, ins[0], p["start_indices"], p["limit_indices"], p["strides"])


def _clamped_starts(g, starts, sizes, shape):
    """The start indices as one int64 vector, each clamped into ``[0, n - k]``."""
    parts = []
    for s, k, n in zip(starts, sizes, shape, strict=True):
        s64 = g.node("Cast", [s], to=_elem_type(g.onnx, np.int64))
        s64 = g.node("Max", [g.node("Min", [s64, g.scalar(n - k, np.int64)]), g.scalar(0, np.int64)])
        parts.append(g.node("Reshape", [s64, g.i64([1])]))
    return parts[0] if len(parts) == 1 else g.node("Concat", parts, axis=0)


@_rule(P.dynamic_slice)
def _dynamic_slice(g, e, ins):
    x, starts = ins[0], ins[1:]
    sizes, shape = e.params["slice_sizes"], _av(e).shape
    if not shape:
        return g.node("Identity", [x])
    st = _clamped_starts(g, starts, sizes, shape)
    return g.node("Slice", [x, st, g.node("Add", [st, g.i64(sizes)]), g.i64(range(len(shape)))])


@_rule(P.dynamic_update_slice)
def _dynamic_update_slice(g, e, ins):
    x, upd, starts = ins[0], ins[1], ins[2:]
    shape, ushape = _av(e).shape, _av(e, 1).shape
    if not shape or math.prod(ushape) == 0:
        return g.node("Where", [g.const(True), upd, x]) if not shape else g.node("Identity", [x])
    st = _clamped_starts(g, starts, ushape, shape)
    grid = np.stack(np.indices(ushape, dtype=np.int64), axis=-1)
    idx = g.node("Add", [g.const(grid), g.node("Reshape", [st, g.i64([1] * len(shape) + [len(shape)])])])
    return g.node("ScatterND", [x, idx, upd])


@_rule(P.pad)
def _pad(g, e, ins):
    x = pad_node(g, ins[0], _av(e).shape, e.params["padding_config"], ins[1])
    return g.node("Identity", [x]) if x == ins[0] else x


def pad_node(g, x, shape, cfg, pv):
    """``x`` (of ``shape``) padded by ``cfg``'s ``(lo, hi, interior)`` triples with the scalar named ``pv``;
    negative lo/hi crop. Returns ``x`` itself when there is nothing to do."""
    shape = list(shape)
    for d, (_, _, interior) in enumerate(cfg):
        n = shape[d]
        if interior <= 0 or n <= 1:
            continue
        # Interleave: (.., n, 1, ..) padded to (.., n, 1 + interior, ..), flattened, the tail cropped.
        x = g.node("Reshape", [x, g.i64(shape[:d + 1] + [1] + shape[d + 1:])], allowzero=1)
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + d + 1] = interior
        x = g.node("Pad", [x, g.i64(pads), pv], mode="constant")
        flat = shape[:d] + [n * (1 + interior)] + shape[d + 1:]
        x = g.node("Reshape", [x, g.i64(flat)], allowzero=1)
        shape[d] = n + (n - 1) * interior
        x = _slice(g, x, [0] * len(shape), shape)
    lows, highs = [lo for lo, _, _ in cfg], [hi for _, hi, _ in cfg]
    pos = [max(v, 0) for v in lows] + [max(v, 0) for v in highs]
    if any(pos):
        x = g.node("Pad", [x, g.i64(pos), pv], mode="constant")
    if any(v < 0 for v in lows + highs):
        padded = [n + max(lo, 0) + max(hi, 0) for n, lo, hi in zip(shape, lows, highs, strict=True)]
        starts = [-lo if lo < 0 else 0 for lo in lows]
        limits = [n + hi if hi < 0 else n for n, hi in zip(padded, highs, strict=True)]
        x = _slice(g, x, starts, limits)
    return x


@_rule(P.concatenate)
def _concatenate(g, e, ins):
    return g.node("Concat", ins, axis=e.params["dimension"])


# ------------------------------------------------------------------------------------------- gather / scatter


def _axes_first(g, x, ndim, axes):
    perm = list(axes) + [i for i in range(ndim) if i not in axes]
    return (x, perm) if perm == list(range(ndim)) else (g.node("Transpose", [x], perm=perm), perm)


@_rule(P.gather)
def _gather(g, e, ins):
    x, idx = ins
    axes = e.params["axes"]
    shape = _av(e).shape
    out = _out(e)
    if any(shape[a] == 0 for a in axes) or math.prod(out.shape) == 0:
        return g.const(np.zeros(out.shape, out.dtype))
    i64 = g.node("Cast", [idx], to=_elem_type(g.onnx, np.int64))
    clamped = g.node("Max", [g.node("Min", [i64, g.i64([shape[a] - 1 for a in axes])]), g.scalar(0, np.int64)])
    xt, _ = _axes_first(g, x, len(shape), axes)
    return g.node("GatherND", [xt, clamped])


def _scatter(reduction, opset):
    def rule(g, e, ins):
        if opset > g.opset:
            _need_opset(g, e, opset, f"ScatterND(reduction={reduction!r})")
        x, idx, upd = ins
        axes = e.params["axes"]
        shape = _av(e).shape
        if math.prod(_av(e, 2).shape) == 0 or any(shape[a] == 0 for a in axes):
            return g.node("Identity", [x])
        xt, perm = _axes_first(g, x, len(shape), axes)
        tshape = [shape[p] for p in perm]
        k = len(axes)
        # One padding row per scattered axis receives every out-of-bounds update; it is cropped after.
        pads = [0] * len(shape) + [1] * k + [0] * (len(shape) - k)
        xp = g.node("Pad", [xt, g.i64(pads)], mode="constant")
        i64 = g.node("Cast", [idx], to=_elem_type(g.onnx, np.int64))
        n = g.i64([shape[a] for a in axes])
        bad = g.node("Or", [g.node("Less", [i64, g.scalar(0, np.int64)]), g.node("GreaterOrEqual", [i64, n])])
        safe = g.node("Where", [bad, n, i64])
        r = g.node("ScatterND", [xp, safe, upd], **({} if reduction == "none" else {"reduction": reduction}))
        r = _slice(g, r, [0] * len(shape), tshape)
        if perm != list(range(len(shape))):
            r = g.node("Transpose", [r], perm=list(np.argsort(perm)))
        return r
    return rule


RULES[P.scatter] = _scatter("none", 17)
RULES[P.scatter_add] = _scatter("add", 17)
RULES[P.scatter_mul] = _scatter("mul", 17)
RULES[P.scatter_min] = _scatter("min", 18)
RULES[P.scatter_max] = _scatter("max", 18)


# ------------------------------------------------------------------------------------------- reductions


def _reduce_node(g, op, x, axes):
    """``op`` over ``axes`` (keepdims=0); axes are an input from opset 18 (13 for ReduceSum)."""
    if op == "ReduceSum" or g.opset >= 18:
        return g.node(op, [x, g.i64(axes)], keepdims=0)
    return g.node(op, [x], axes=list(axes), keepdims=0)


def _reduction(op):
    def rule(g, e, ins):
        axes = list(e.params["axes"])
        x = ins[0]
        d = np.dtype(_av(e).dtype)
        if not axes:
            return g.node("Identity", [x])
        if d == np.bool_:
            return (_all if op in ("ReduceMin", "ReduceProd") else _any)(g, x, axes)
        r = _reduce_node(g, op, x, axes)
        if op in ("ReduceMax", "ReduceMin") and dtypes.is_inexact(d):
            has_nan = _any(g, g.node("IsNaN", [x]), axes)
            r = g.node("Where", [has_nan, g.scalar(np.nan, d), r])
        return r
    return rule


def _any(g, b, axes):
    n = _reduce_node(g, "ReduceSum", g.node("Cast", [b], to=_elem_type(g.onnx, np.int32)), axes)
    return g.node("Greater", [n, g.scalar(0, np.int32)])


def _all(g, b, axes):
    return g.node("Not", [_any(g, g.node("Not", [b]), axes)])


RULES[P.reduce_sum] = _reduction("ReduceSum")
RULES[P.reduce_prod] = _reduction("ReduceProd")
RULES[P.reduce_max] = _reduction("ReduceMax")
RULES[P.reduce_min] = _reduction("ReduceMin")


def _fold(g, x, shape, axes, combine, identity):
    """Reduce ``axes`` with a binary ``combine`` in log2 steps: the axes moved first and flattened, halves combined."""
    rest = [i for i in range(len(shape)) if i not in axes]
    r = math.prod(shape[a] for a in axes)
    tail = [shape[i] for i in rest]
    if axes != list(range(len(axes))):
        x = g.node("Transpose", [x], perm=list(axes) + rest)
    x = g.node("Reshape", [x, g.i64([r] + tail)], allowzero=1)
    if r == 0:
        return g.node("Expand", [identity, g.i64(tail)])
    while r > 1:
        if r % 2:
            x = g.node("Concat", [x, g.node("Expand", [identity, g.i64([1] + tail)])], axis=0)
            r += 1
        h = r // 2
        x = combine(_slice(g, x, [0] * (1 + len(tail)), [h] + tail), _slice(g, x, [h] + [0] * len(tail), [r] + tail))
        r = h
    return g.node("Reshape", [x, g.i64(tail)], allowzero=1)


def _bool_reduction(kind):
    def rule(g, e, ins):
        axes = list(e.params["axes"])
        if not axes:
            return g.node("Identity", ins)
        d = np.dtype(_av(e).dtype)
        if d == np.bool_:
            return (_all if kind == "and" else _any)(g, ins[0], axes)
        op = "BitwiseAnd" if kind == "and" else "BitwiseOr"
        _need_opset(g, e, 18, op)
        identity = g.scalar(-1 if kind == "and" else 0, d)
        return _fold(g, ins[0], list(_av(e).shape), sorted(axes), lambda a, b: g.node(op, [a, b]), identity)
    return rule


RULES[P.reduce_and] = _bool_reduction("and")
RULES[P.reduce_or] = _bool_reduction("or")


def _arg(op):
    def rule(g, e, ins):
        axis = e.params["axes"][0]
        x = ins[0]
        d = np.dtype(_av(e).dtype)
        if d == np.bool_ or d.itemsize < 4 and dtypes.is_int(d):
            x = g.node("Cast", [x], to=_elem_type(g.onnx, np.int32))
        r = g.node(op, [x], axis=axis, keepdims=0, select_last_index=0)
        if dtypes.is_inexact(d):  # the first NaN wins, as in NumPy
            isnan = g.node("Cast", [g.node("IsNaN", [ins[0]])], to=_elem_type(g.onnx, np.int32))
            first_nan = g.node("ArgMax", [isnan], axis=axis, keepdims=0, select_last_index=0)
            has_nan = g.node("Greater", [_reduce_node(g, "ReduceSum", isnan, [axis]), g.scalar(0, np.int32)])
            r = g.node("Where", [has_nan, first_nan, r])
        out = np.dtype(e.params["index_dtype"])
        return r if out == np.int64 else g.node("Cast", [r], to=_elem_type(g.onnx, out))
    return rule


RULES[P.argmax] = _arg("ArgMax")
RULES[P.argmin] = _arg("ArgMin")


@_rule(P.cumsum)
def _cumsum(g, e, ins):
    p = e.params
    return g.node("CumSum", [ins[0], g.scalar(p["axis"], np.int64)], reverse=int(bool(p.get("reverse", False))))


def _logaddexp(g, e, a, b):
    d = _av(e).dtype
    m = _minmax("Max", "Or")(g, e, [a, b])
    diff = g.node("Neg", [g.node("Abs", [g.node("Sub", [a, b])])])
    r = g.node("Add", [m, g.node("Log", [g.node("Add", [g.scalar(1, d), g.node("Exp", [diff])])])])
    return g.node("Where", [g.node("Equal", [b, g.scalar(-np.inf, d)]), a, r])


def _cumulative(combine, identity):
    """A prefix scan in log2(n) steps (Hillis-Steele): each step combines x with x shifted by 2**k."""
    def rule(g, e, ins):
        p = e.params
        axis, rev = p["axis"], bool(p.get("reverse", False))
        aval = _av(e)
        d, n, nd = np.dtype(aval.dtype), aval.shape[p["axis"]], aval.ndim
        x = ins[0]
        if rev:
            x = _flip(g, x, [axis])
        ident = g.scalar(identity(d), d)
        s = 1
        while s < n:
            limits = list(aval.shape)
            limits[axis] = n - s
            head = _slice(g, x, [0] * nd, limits)
            pads = [0] * (2 * nd)
            pads[axis] = s
            shifted = g.node("Pad", [head, g.i64(pads), ident], mode="constant")
            x = combine(g, e, x, shifted)
            s *= 2
        if rev:
            x = _flip(g, x, [axis])
        return g.node("Identity", [x]) if x == ins[0] else x
    return rule


def _lowest(d):
    return -np.inf if dtypes.is_inexact(d) else np.iinfo(d).min


def _highest(d):
    return np.inf if dtypes.is_inexact(d) else np.iinfo(d).max


RULES[P.cumprod] = _cumulative(lambda g, e, a, b: g.node("Mul", [a, b]), lambda d: 1)
RULES[P.cummax] = _cumulative(lambda g, e, a, b: _minmax("Max", "Or")(g, e, [a, b]), _lowest)
RULES[P.cummin] = _cumulative(lambda g, e, a, b: _minmax("Min", "And")(g, e, [a, b]), _highest)
RULES[P.cumlogsumexp] = _cumulative(_logaddexp, lambda d: -np.inf)


def _topk_key(g, x, d):
    """``x`` in a dtype ONNX Runtime's TopK takes, order kept."""
    if d == np.bool_ or dtypes.is_int(d) and d.itemsize < 4 or d == np.uint16:
        return g.node("Cast", [x], to=_elem_type(g.onnx, np.int32))
    if d in (np.dtype(np.uint32), np.dtype(np.uint64)):
        return g.node("Cast", [x], to=_elem_type(g.onnx, np.int64)) if d == np.uint32 else x
    if d == np.float16:
        return g.node("Cast", [x], to=_elem_type(g.onnx, np.float32))
    return x


def _stable_order(g, key, d, axis, n):
    """The permutation that sorts ``key`` along ``axis`` stably, NaN last (int64 indices)."""
    k = g.i64([n])
    if dtypes.is_inexact(d):
        isnan = g.node("IsNaN", [key])
        finite_key = g.node("Where", [isnan, g.scalar(np.inf, d), key])
        _, o1 = g.node("TopK", [_topk_key(g, finite_key, d), k], n_out=2, axis=axis, largest=0, sorted=1)
        # Second stable pass on "is NaN" puts the NaNs after every number, each group in its order.
        nan_key = g.node("GatherElements", [g.node("Cast", [isnan], to=_elem_type(g.onnx, np.int32)), o1],
                         axis=axis)
        _, o2 = g.node("TopK", [nan_key, k], n_out=2, axis=axis, largest=0, sorted=1)
        return g.node("GatherElements", [o1, o2], axis=axis)
    _, o = g.node("TopK", [_topk_key(g, key, d), k], n_out=2, axis=axis, largest=0, sorted=1)
    return o


@_rule(P.sort)
def _sort(g, e, ins):
    p = e.params
    axis, nk = p["dimension"], p["num_keys"]
    aval = _av(e)
    if aval.ndim == 0 or aval.shape[axis] == 0:
        return [g.node("Identity", [x]) for x in ins]
    n = aval.shape[axis]
    order = None
    for j in range(nk - 1, -1, -1):  # least significant key first: each pass is stable
        key = ins[j] if order is None else g.node("GatherElements", [ins[j], order], axis=axis)
        o = _stable_order(g, key, np.dtype(_av(e, j).dtype), axis, n)
        order = o if order is None else g.node("GatherElements", [order, o], axis=axis)
    return [g.node("GatherElements", [x, order], axis=axis) for x in ins]


# ------------------------------------------------------------------------------------------- quantized_matmul

#: Bits whose packed integers ONNX has a tensor type for (``DequantizeLinear`` with ``block_size``, opset 21).
_QDQ_TYPES = {4: "UINT4", 8: "UINT8"}


@_rule(quantized_matmul_p)
def _quantized_matmul(g, e, ins):
    """``x @ W.T`` (or ``x @ W``) with ``W = q * scale + bias`` per group of ``group_size`` along W's rows.

    Weights known at export (captured or baked) with 4 or 8 bits, at opset >= 21: QDQ, the blocked
    ``DequantizeLinear`` of the integers as a ``uint4``/``uint8`` initializer; for ``x @ W.T`` laid out
    ``(contraction, outputs)`` feeding ``MatMul`` directly, the biases' part added after (``_qdq_product``: ONNX
    Runtime's graph optimizer turns the pattern into its ``MatMulNBits``), for ``x @ W`` (blocks along the output
    axis, which ``MatMulNBits`` does not take) plus the biases, then ``MatMul``. Otherwise (weights as
    inputs, 2, 3 and 6 bits, older opsets): the packed uint32 words unpacked with ``BitShift``/``BitwiseAnd``
    (``fnarray.lowering.packed.unpack`` in ONNX operators), scaled and shifted, then ``MatMul``. The floating
    modes (``"mxfp4"``, ``"mxfp8"``, ``"nvfp4"``): the words unpacked likewise, the element values (E2M1, E4M3) and
    scale values (E8M0, E4M3) looked up in constant tables (opset 18).
    """
    p = e.params
    transpose, gs, bits = p["transpose"], p["group_size"], p["bits"]
    x, w, scales, *biases = ins
    rows, cols = weight_shape(_av(e, 1).shape, bits)
    out = np.dtype(_out(e).dtype)
    acc = acc_dtype(out)
    known = g.known.get(w)

    def to_acc(v):
        return g.node("Cast", [v], to=_elem_type(g.onnx, acc)) if out != acc else v

    if p["mode"] in FLOAT_FORMATS:
        _need_opset(g, e, 18, "BitwiseAnd (unpacking the packed words)")
        wd = _float_weights(g, w, scales, (rows, cols), acc, p["mode"])
    elif transpose and known is not None and bits in _QDQ_TYPES and g.opset >= 21:
        r = _qdq_product(g, (to_acc(x), _av(e, 0).shape), (known, scales, biases[0]), (rows, cols, gs, bits), to_acc)
        return r if out == acc else g.node("Cast", [r], to=_elem_type(g.onnx, out))
    else:
        wd = _affine_weights(g, e, (w, scales, biases[0]), (rows, cols, gs, bits), known, to_acc)
    if transpose:
        wd = g.node("Transpose", [wd], perm=[1, 0])
    r = g.node("MatMul", [to_acc(x), wd])
    return r if out == acc else g.node("Cast", [r], to=_elem_type(g.onnx, out))


def _float_weights(g, w, scales, shape, acc, mode):
    """A floating mode's float weights ``shape = (rows, cols)``: the unpacked element codes and the uint8 scales
    each looked up in a constant table (``lowering/packed.py``'s ``FLOAT_FORMATS``), multiplied per group."""
    rows, cols = shape
    elements, scale_values, group, bits = FLOAT_FORMATS[mode]
    codes = g.node("Cast", [_unpack_words(g, w, rows, cols, bits)], to=_elem_type(g.onnx, np.dtype(np.int64)))
    vals = g.node("Gather", [g.const(elements.astype(acc)), codes], axis=0)
    idx = g.node("Cast", [scales], to=_elem_type(g.onnx, np.dtype(np.int64)))
    sc = g.node("Gather", [g.const(scale_values.astype(acc)), idx], axis=0)
    wd = g.node("Mul", [g.node("Reshape", [vals, g.i64([rows, cols // group, group])]),
                        g.node("Unsqueeze", [sc, g.i64([2])])])
    return g.node("Reshape", [wd, g.i64([rows, cols])])


def _qdq_product(g, x_and_shape, operands, sizes, to_acc):
    """``x @ W.T`` for known 4/8-bit affine words in the form ONNX Runtime fuses into ``MatMulNBits``: the integers
    transposed at export to ``(cols, rows)`` (the contraction first, ONNX's low-nibble-first packing), a blocked
    ``DequantizeLinear`` along that axis (no zero point) feeding ``MatMul`` directly, plus the biases' part
    ``sum_g(x's group g) @ biases.T`` (``W = q * scale + bias`` per group, so ``x @ W.T`` splits exactly in two)."""
    x, x_shape = x_and_shape
    known, scales, biases = operands
    rows, cols, gs, bits = sizes
    data = np.frombuffer(np.ascontiguousarray(known, "<u4").tobytes(), np.uint8)
    if bits == 4:
        data = np.stack([data & 15, data >> 4], axis=-1)
    q_t = np.ascontiguousarray(data.reshape(rows, cols).T).reshape(-1)
    raw = (q_t[0::2] | (q_t[1::2] << 4) if bits == 4 else q_t).astype(np.uint8).tobytes()
    tensor = g.onnx.helper.make_tensor(g.names.fresh("q"), getattr(g.onnx.TensorProto, _QDQ_TYPES[bits]),
                                       [cols, rows], raw, raw=True)
    qname = g.names.fresh("q")
    g.nodes.append(g.onnx.helper.make_node("Constant", [], [qname], value=tensor))
    scales_t = g.node("Transpose", [to_acc(scales)], perm=[1, 0])
    wd = g.node("DequantizeLinear", [qname, scales_t], axis=0, block_size=gs)
    # x as (1, M, cols): a 2-d MatMul followed by an Add would be fused into Gemm first, which MatMulNBits is not
    m = int(np.prod(x_shape[:-1], dtype=np.int64))
    x3 = g.node("Reshape", [x, g.i64([1, m, cols])])
    sums = _reduce_node(g, "ReduceSum", g.node("Reshape", [x3, g.i64([1, m, cols // gs, gs])]), [-1])
    shift = g.node("MatMul", [sums, g.node("Transpose", [to_acc(biases)], perm=[1, 0])])
    y = g.node("Add", [g.node("MatMul", [x3, wd]), shift])
    return g.node("Reshape", [y, g.i64(list(x_shape[:-1]) + [rows])])


def _affine_weights(g, e, operands, sizes, known, to_acc):
    """The affine format's float weights ``(rows, cols)``: QDQ for known 4/8-bit words at opset >= 21, else the
    words unpacked with bit operators; then ``q * scale + bias``."""
    w, scales, biases = operands
    rows, cols, gs, bits = sizes
    acc = acc_dtype(np.dtype(_out(e).dtype))
    groups = g.i64([rows, cols // gs, gs])
    if known is not None and bits in _QDQ_TYPES and g.opset >= 21:
        # MLX's little-endian stream of 4- or 8-bit fields is ONNX's packed uint4/uint8 layout (low nibble
        # first): the words' bytes are the tensor's raw data as they are.
        raw = np.ascontiguousarray(known, "<u4").tobytes()
        tensor = g.onnx.helper.make_tensor(g.names.fresh("q"), getattr(g.onnx.TensorProto, _QDQ_TYPES[bits]),
                                           [rows, cols], raw, raw=True)
        qname = g.names.fresh("q")
        g.nodes.append(g.onnx.helper.make_node("Constant", [], [qname], value=tensor))
        wd = g.node("Reshape", [g.node("DequantizeLinear", [qname, to_acc(scales)], axis=1, block_size=gs), groups])
    else:
        _need_opset(g, e, 18, "BitwiseAnd (unpacking the packed words)")
        ints = g.node("Cast", [_unpack_words(g, w, rows, cols, bits)], to=_elem_type(g.onnx, acc))
        wd = g.node("Reshape", [ints, groups])
        wd = g.node("Mul", [wd, g.node("Unsqueeze", [to_acc(scales), g.i64([2])])])
    wd = g.node("Add", [wd, g.node("Unsqueeze", [to_acc(biases), g.i64([2])])])
    return g.node("Reshape", [wd, g.i64([rows, cols])])


def _unpack_words(g, w, rows, cols, bits):
    """The ``bits``-bit integers (uint32, ``(rows, cols)``) of packed uint32 words ``w`` (``packed.unpack``)."""
    mask = g.scalar((1 << bits) - 1, np.uint32)
    if 32 % bits == 0:
        per = 32 // bits
        shifts = g.const((np.arange(per) * bits).astype(np.uint32))
        v = g.node("BitShift", [g.node("Unsqueeze", [w, g.i64([2])]), shifts], direction="RIGHT")
        return g.node("Reshape", [g.node("BitwiseAnd", [v, mask]), g.i64([rows, cols])])
    lo, hi, shift = unpack_plan(bits)
    w3 = g.node("Reshape", [w, g.i64([rows, cols // 32, bits])])
    v = g.node("BitShift", [g.node("Gather", [w3, g.const(lo.astype(np.int64))], axis=2), g.const(shift)],
               direction="RIGHT")
    high = g.node("Gather", [w3, g.const(hi.astype(np.int64))], axis=2)
    # The high word's bits land at 32 - s; (h << 1) << (31 - s) keeps each shift below 32.
    up = g.node("BitShift", [g.node("BitShift", [high, g.scalar(1, np.uint32)], direction="LEFT"),
                             g.const((31 - shift).astype(np.uint32))], direction="LEFT")
    v = g.node("BitwiseAnd", [g.node("BitwiseOr", [v, up]), mask])
    return g.node("Reshape", [v, g.i64([rows, cols])])


@_rule(P.dot_general)
def _dot_general(g, e, ins):
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    la, ra = _av(e, 0), _av(e, 1)
    d, out = np.dtype(la.dtype), np.dtype(_out(e).dtype)
    if d == np.bool_:
        raise UnsupportedOnDevice("fnarray.export.onnx: dot_general on bool cannot be exported: ONNX has no "
                                  "boolean matrix product; cast the operands to int32 or float32 first")
    x, y = ins
    if d == np.float16 or d.itemsize < 4 and dtypes.is_int(d):
        work = np.dtype(np.float32) if d == np.float16 else np.dtype(np.int32)
        x, y = (g.node("Cast", [v], to=_elem_type(g.onnx, work)) for v in (x, y))
    else:
        work = d
    if not lb and lc == (la.ndim - 1,) and ra.ndim == 2 and rc in ((0,), (1,)):
        if rc == (1,):
            y = g.node("Transpose", [y], perm=[1, 0])
        r = g.node("MatMul", [x, y])
    else:
        letters = iter("abcdefghijklmnopqrstuvwxyz")
        lsub = [next(letters) for _ in range(la.ndim)]
        rsub = [None] * ra.ndim
        for a, b in zip(lb, rb, strict=True):
            rsub[b] = lsub[a]
        for a, b in zip(lc, rc, strict=True):
            rsub[b] = lsub[a]
        rsub = [s if s is not None else next(letters) for s in rsub]
        osub = [lsub[a] for a in lb] + [lsub[i] for i in range(la.ndim) if i not in lc and i not in lb] + \
            [rsub[i] for i in range(ra.ndim) if i not in rc and i not in rb]
        r = g.node("Einsum", [x, y], equation=f"{''.join(lsub)},{''.join(rsub)}->{''.join(osub)}")
    return r if work == out else g.node("Cast", [r], to=_elem_type(g.onnx, out))


# ------------------------------------------------------------------------------------------- convolutions


def _conv_prepare(g, e, x):
    """The input as ``(N, C, *S)``: transposed, dilated by ``lhs_dilation`` (zeros between elements) and cropped
    by the negative pads; returns it with its spatial sizes and the positive pads still to apply."""
    p = e.params
    ls = p["dimension_numbers"].lhs_spec
    shape = [_av(e).shape[d] for d in ls]
    if list(ls) != list(range(len(ls))):
        x = g.node("Transpose", [x], perm=list(ls))
    zero = g.scalar(0, _av(e).dtype)
    for k, ld in enumerate(p["lhs_dilation"]):
        d, n = 2 + k, shape[2 + k]
        if ld == 1 or n <= 1:
            continue
        # (.., n, 1, ..) padded to (.., n, ld, ..), flattened to n * ld, the trailing ld - 1 zeros cropped.
        x = g.node("Reshape", [x, g.i64(shape[:d + 1] + [1] + shape[d + 1:])], allowzero=1)
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + d + 1] = ld - 1
        x = g.node("Pad", [x, g.i64(pads), zero], mode="constant")
        x = g.node("Reshape", [x, g.i64(shape[:d] + [n * ld] + shape[d + 1:])], allowzero=1)
        shape[d] = (n - 1) * ld + 1
        x = _slice(g, x, [0] * len(shape), shape)
    crop_lo = [max(0, -lo) for lo, _ in p["padding"]]
    crop_hi = [max(0, -hi) for _, hi in p["padding"]]
    if any(crop_lo) or any(crop_hi):
        limits = [n - c for n, c in zip(shape[2:], crop_hi, strict=True)]
        x = _slice(g, x, [0, 0] + crop_lo, shape[:2] + limits)
        shape = shape[:2] + [n - a for n, a in zip(limits, crop_lo, strict=True)]
    grow = [(max(0, lo), max(0, hi)) for lo, hi in p["padding"]]
    return x, shape, grow


def _conv_out(g, e, r):
    """``r`` in the canonical ``(N, O, *S')`` layout as the output spec's."""
    os_ = e.params["dimension_numbers"].out_spec
    perm = [int(i) for i in np.argsort(os_)]
    return r if perm == list(range(len(perm))) else g.node("Transpose", [r], perm=perm)


def _conv_taps(g, e, x, w, shape, grow, work):
    """Exact for every dtype MatMul takes: per kernel tap, a strided slice of the input times the tap's matrix
    (the numpy reference's method)."""
    p = e.params
    G, B = p["feature_group_count"], p["batch_group_count"]
    rs = p["dimension_numbers"].rhs_spec
    wshape = [_av(e, 1).shape[d] for d in rs]
    out_canon = [_out(e).shape[d] for d in p["dimension_numbers"].out_spec]
    nsp = len(shape) - 2
    if any(lo or hi for lo, hi in grow):
        pads = [0, 0] + [lo for lo, _ in grow] + [0, 0] + [hi for _, hi in grow]
        x = g.node("Pad", [x, g.i64(pads), g.scalar(0, work)], mode="constant")
        shape = shape[:2] + [n + lo + hi for n, (lo, hi) in zip(shape[2:], grow, strict=True)]
    N, O, I = shape[0], wshape[0], wshape[1]
    NB, OG, P = N // B, O // max(G, B), math.prod(out_canon[2:])
    x = g.node("Reshape", [x, g.i64([B, NB, G, I] + shape[2:])], allowzero=1)
    if list(rs) != list(range(len(rs))):
        w = g.node("Transpose", [w], perm=list(rs))
    wg = [B, 1, 1, OG, I] if B > 1 else [1, 1, G, OG, I]
    acc = None
    for k in np.ndindex(*wshape[2:]):
        starts = [ki * rd for ki, rd in zip(k, p["rhs_dilation"], strict=True)]
        limits = [s + (n - 1) * st + 1 for s, n, st in zip(starts, out_canon[2:], p["window_strides"], strict=True)]
        view = x
        if nsp:
            view = g.node("Slice", [x, g.i64(starts), g.i64(limits), g.i64(range(4, 4 + nsp)),
                                    g.i64(p["window_strides"])])
        view = g.node("Reshape", [view, g.i64([B, NB, G, I, P])], allowzero=1)
        tap = w
        if nsp:
            tap = g.node("Slice", [w, g.i64(k), g.i64([ki + 1 for ki in k]), g.i64(range(2, 2 + nsp))])
        tap = g.node("Reshape", [tap, g.i64(wg)], allowzero=1)
        prod = g.node("MatMul", [tap, view])
        acc = prod if acc is None else g.node("Add", [acc, prod])
    acc = g.node("Transpose", [acc], perm=[1, 0, 2, 3, 4])
    return g.node("Reshape", [acc, g.i64([NB, O] + out_canon[2:])], allowzero=1)


@_rule(conv_general_dilated_p)
def _conv_general_dilated(g, e, ins):
    p = e.params
    d, out = np.dtype(_av(e).dtype), np.dtype(_out(e).dtype)
    x, w = ins
    if d == np.float16 or d.itemsize < 4 and dtypes.is_int(d) or (out != d and dtypes.is_float(out)):
        work = np.dtype(np.float32) if dtypes.is_float(d) else np.dtype(np.int32)
        work = np.promote_types(work, out) if dtypes.is_float(out) or dtypes.is_int(out) else work
        x, w = (g.node("Cast", [v], to=_elem_type(g.onnx, work)) for v in (x, w))
    else:
        work = d
    # Cast first so that the dilation's zeros and the padding are of the working dtype.
    e_work = e if work == d else _WorkEqn(e, work)
    x, shape, grow = _conv_prepare(g, e_work, x)
    G, B = p["feature_group_count"], p["batch_group_count"]
    nsp = len(shape) - 2
    if not dtypes.is_float(work) or nsp == 0:
        r = _conv_taps(g, e_work, x, w, shape, grow, work)
    else:
        if B > 1:   # batch groups as feature groups: (B * NB, C) -> (NB, B * C)
            nb = shape[0] // B
            x = g.node("Reshape", [x, g.i64([B, nb] + shape[1:])], allowzero=1)
            x = g.node("Transpose", [x], perm=[1, 0] + list(range(2, len(shape) + 1)))
            x = g.node("Reshape", [x, g.i64([nb, B * shape[1]] + shape[2:])], allowzero=1)
        rs = p["dimension_numbers"].rhs_spec
        if list(rs) != list(range(len(rs))):
            w = g.node("Transpose", [w], perm=list(rs))
        r = g.node("Conv", [x, w], group=max(G, B), strides=list(p["window_strides"]),
                   dilations=list(p["rhs_dilation"]), pads=[lo for lo, _ in grow] + [hi for _, hi in grow],
                   kernel_shape=[_av(e, 1).shape[dd] for dd in rs[2:]])
    r = _conv_out(g, e, r)
    return r if work == out else g.node("Cast", [r], to=_elem_type(g.onnx, out))


class _WorkEqn:
    """An equation seen with its operands in the working dtype (what the conversion casts gave)."""

    def __init__(self, e, work):
        self.params, self.outputs = e.params, e.outputs
        self.inputs = [_Retyped(a, work) for a in e.inputs]


class _Retyped:
    def __init__(self, atom, dtype):
        self.aval = ShapedArray(atom.aval.shape, dtype)


# ------------------------------------------------------------------------------------------- control flow


@_rule(P.cond)
def _cond(g, e, ins):
    index, ops = ins[0], ins[1:]
    branches = e.params["branches"]
    if len(branches) == 1:
        return _lower(g, branches[0], ops)
    return _if_chain(g, index, 0, branches, ops)


def _if_chain(g, index, k, branches, ops):
    """``branches[clamp(index)]`` as ``If(index < k + 1, branches[k], <the rest>)``."""
    out_avals = [a.strip_weak() for a in branches[0].out_avals]
    then_g = _subgraph(g, branches[k], ops, g.names.fresh("then"))
    if k + 1 == len(branches) - 1:
        else_g = _subgraph(g, branches[k + 1], ops, g.names.fresh("else"))
    else:
        sg = g.sub()
        outs = _if_chain(sg, index, k + 1, branches, ops)
        else_g = _finish(sg, outs, out_avals, g.names.fresh("else"))
    pred = g.node("Less", [index, g.scalar(k + 1, np.int32)])
    outs = g.node("If", [pred], n_out=len(out_avals), then_branch=then_g, else_branch=else_g)
    return [outs] if isinstance(outs, str) else outs


def _loop_inputs(g, carry_avals):
    it, c = g.names.fresh("iter"), g.names.fresh("cond")
    carry = [g.names.fresh("carry") for _ in carry_avals]
    infos = [g.onnx.helper.make_tensor_value_info(it, _elem_type(g.onnx, np.int64), []),
             g.onnx.helper.make_tensor_value_info(c, _elem_type(g.onnx, np.bool_), [])]
    infos += [g.value_info(n, a) for n, a in zip(carry, carry_avals, strict=True)]
    return it, c, carry, infos


@_rule(P.while_p)
def _while(g, e, ins):
    p = e.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, init = ins[:cn], ins[cn:cn + bn], ins[cn + bn:]
    carry_avals = [a.aval for a in e.inputs[cn + bn:]]
    first = _lower(g, p["cond_program"], list(cc) + list(init))[0]
    bg = g.sub()
    _, _, carry, infos = _loop_inputs(bg, carry_avals)
    new = _lower(bg, p["body_program"], list(bc) + carry)
    again = _lower(bg, p["cond_program"], list(cc) + new)[0]
    body = _finish(bg, [again] + new, [ShapedArray((), dtypes.bool_)] + carry_avals, g.names.fresh("while"),
                   infos)
    outs = g.node("Loop", ["", first] + list(init), n_out=len(init), body=body)
    return [outs] if isinstance(outs, str) else outs


@_rule(P.scan)
def _scan(g, e, ins):
    p = e.params
    nc, nk, length, rev = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    body_prog = p["program"]
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    carry_avals = [a.aval for a in e.inputs[nc:nc + nk]]
    y_avals = body_prog.out_avals[nk:]
    if length == 0:
        return [g.node("Identity", [c]) for c in init] + \
            [g.const(np.zeros(o.aval.shape, o.aval.dtype)) for o in e.outputs[nk:]]
    bg = g.sub()
    it, c, carry, infos = _loop_inputs(bg, carry_avals)
    t = bg.node("Sub", [bg.scalar(length - 1, np.int64), it]) if rev else it
    rows = [bg.node("Gather", [x, t], axis=0) for x in xs]
    outs = _lower(bg, body_prog, list(consts) + carry + rows)
    body = _finish(bg, [c] + outs, [ShapedArray((), dtypes.bool_)] + carry_avals + list(y_avals),
                   g.names.fresh("scan"), infos)
    res = g.node("Loop", [g.scalar(length, np.int64), g.const(True)] + list(init), n_out=nk + len(y_avals),
                 body=body)
    res = [res] if isinstance(res, str) else list(res)
    ys = res[nk:]
    if rev:  # the Loop stacks in iteration order, which runs backwards in time
        ys = [_flip(g, y, [0]) for y in ys]
    return res[:nk] + ys


# ------------------------------------------------------------------------------------------- export


def _import_onnx():
    try:
        import onnx as onnx_mod
        import onnx.numpy_helper  # noqa: F401
    except ImportError:
        raise ImportError("fnarray.export.onnx writes the model with the onnx package, which is not installed: "
                          "pip install 'fnarray[onnx]' (or pip install onnx)") from None
    return onnx_mod


@logged_step(lambda f, *a, path, **k: f"export of {getattr(f, '__name__', 'a function')} to {path} (onnx)")
def onnx(f, *example_args, path, bake_argnums=(), opset=None):
    """Export ``f`` as an ONNX model (a ``.onnx`` file) for ONNX Runtime and the runtimes that read ONNX.

    The function is traced at the shapes and dtypes of ``example_args`` (as
    ``jit(f).trace``), calls are inlined, and each equation is lowered by the
    rule table ``fnarray.export._onnx.RULES`` with fnarray's semantics (gathers
    clamp, scatters drop out-of-bounds updates, integer division by zero is 0,
    NaN propagates through max/min and sorts last). ``scan`` becomes an ONNX
    ``Loop``, ``while_loop`` a ``Loop`` with a condition, ``cond`` a chain of
    ``If``. The model is checked with ``onnx.checker.check_model`` before it
    is written. For example::

        fa.export.onnx(predict, params, np.zeros((1, 64), np.float32), path="digits.onnx",
                       bake_argnums=(0,))
        sess = onnxruntime.InferenceSession("digits.onnx")
        (probs,) = sess.run(None, {"x": x})

    Args:
      f: a function of arrays and pytrees of arrays returning the same (a ``jit`` function is fine).
      *example_args: positional arguments whose shapes and dtypes the model is made for
        (the model takes exactly these shapes).
      path: the ``.onnx`` file to write (replaced atomically: a temporary file, then a rename).
      bake_argnums: positions of arguments (a trained model's parameters) stored in the model
        as initializers with their example values; they are not model inputs. Arrays that
        ``f`` captures from outside are stored the same way (named ``const.<k>``).
      opset: the ONNX opset (default 18; at least 17). Bitwise operations, ``scatter_min``/
        ``scatter_max`` and integer shifts need 18.
    Returns:
      the ``onnx.ModelProto`` (also written to ``path``). Model inputs are named by ``f``'s
      parameter names, pytree leaves by dotted paths (``params.w1``, ``batch.0``), in the
      order ``jit`` flattens them; outputs ``out`` (one array) or ``out.0``, ``out.loss``...
      (as ``fnarray.export.webgpu`` names them).
    Raises:
      UnsupportedOnDevice: naming the primitive (and the dtype where that is the reason) for
        what ONNX cannot express here: complex and bfloat16 values, ``erf_inv``, ``lgamma``,
        ``digamma``, ``nextafter``, ``population_count``, ``bitcast_convert_type``, bitwise
        reductions of integers.
      ImportError: the ``onnx`` package is not installed (``pip install 'fnarray[onnx]'``).
      ValueError: an ``opset`` below 17, a ``bake_argnums`` entry that names no argument, two inputs with one
        name.
      TypeError: ``f`` is not callable or takes fewer positional arguments than given; ``bake_argnums`` that are
        not ints; ``path`` is not a str or ``os.PathLike``. IsADirectoryError: ``path`` is a folder.
      onnx.checker.ValidationError: the written graph does not validate (a bug: please report it).

    Mirrors no NumPy/JAX function; JAX's closest relative is ``jax.export`` (and
    ``torch.onnx.export`` in PyTorch).
    """
    from fnarray.transforms.jit import Jitted

    if not isinstance(path, (str, os.PathLike)) or os.path.isdir(path):
        what = "a folder" if isinstance(path, (str, os.PathLike)) else type(path).__name__
        raise (IsADirectoryError if what == "a folder" else TypeError)(
            f"fnarray.export.onnx: path must name the .onnx file to write, got {what} ({path!r})")
    onnx_mod = _import_onnx()
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if opset < _MIN_OPSET:
        raise ValueError(f"fnarray.export.onnx: opset={opset} is too old; the export needs opset >= {_MIN_OPSET}")
    fun, leaves = export_leaves("fnarray.export.onnx", f, example_args, bake_argnums, "the model's input names")
    traced = Jitted(fun).trace(*example_args)
    program, consts = traced.program, traced.consts
    if len(program.invars) != len(leaves):
        raise RuntimeError(f"fnarray.export.onnx: the traced program has {len(program.invars)} inputs for "
                           f"{len(leaves)} argument leaves")
    flat = straight_line(program, keep_control=True)
    # What ONNX has no operator for but fnarray can write in others (threefry2x32, ...) is expanded first.
    flat = decompose(flat, lambda e: e.primitive in RULES or e.primitive in UNSUPPORTED)
    check_program(flat)

    for e in flat.eqns:  # name the primitive before an input's dtype (the input may be what it consumes)
        _rule_for(e)
    helper, nph = onnx_mod.helper, onnx_mod.numpy_helper
    g = _Graph(onnx_mod, _Names(), opset)
    inits, inputs, in_names = [], [], []

    def typed(name, aval, what):
        dname = np.dtype(aval.dtype).name
        if dname not in _DTYPES:
            raise UnsupportedOnDevice(f"fnarray.export.onnx: {what} {name!r} has dtype {dname}, which ONNX Runtime "
                                      f"does not take; cast it to one of {', '.join(sorted(_DTYPES))} first")

    for k, (v, c) in enumerate(zip(flat.constvars, consts, strict=True)):
        name = f"const.{k}"
        typed(name, v.aval, "the captured constant")
        inits.append(nph.from_array(np.ascontiguousarray(np.asarray(c), v.aval.dtype), name))
        g.known[name] = np.asarray(c, v.aval.dtype)
        in_names.append(name)
    consts_names, in_names = in_names, []
    for v, (name, value, baked) in zip(flat.invars, leaves, strict=True):
        typed(name, v.aval, "the baked argument" if baked else "the input")
        if baked:
            inits.append(nph.from_array(np.ascontiguousarray(np.asarray(value), v.aval.dtype), name))
            g.known[name] = np.asarray(value, v.aval.dtype)
        else:
            inputs.append(g.value_info(name, v.aval))
        in_names.append(name)

    env = dict(zip(list(flat.constvars), consts_names, strict=True))
    outs = _lower_main(g, flat, env, in_names)
    outputs = []
    for name, src, a in zip(out_names(traced.entry.out_tree), outs, flat.out_avals, strict=True):
        g.nodes.append(helper.make_node("Identity", [src], [name]))
        outputs.append(g.value_info(name, a))
    used = _used_names(g.nodes)  # an initializer no node reads (packed words exported as QDQ) is dropped
    inits = [t for t in inits if t.name in used]
    graph = g.graph(getattr(fun, "__name__", "fnarray"), inputs, outputs, inits)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="fnarray",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx_mod.checker.check_model(model, full_check=True)
    _save(onnx_mod, model, path)
    return model


def _used_names(nodes) -> set:
    """Every value name the nodes (and the sub-graphs in their attributes) read."""
    used = set()
    for n in nodes:
        used.update(n.input)
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                used |= _used_names(sub.node)
    return used


def _lower_main(g, program, env, in_names):
    """``_lower`` for the main program, whose constvars are initializers."""
    closed = Program([], list(program.constvars) + list(program.invars), program.eqns, program.outvars)
    return _lower(g, closed, [env[v] for v in program.constvars] + list(in_names))


def _save(onnx_mod, model, path):
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".fnarray-onnx-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(model.SerializeToString())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
