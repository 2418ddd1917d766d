"""mlx:0's shape-polymorphic eager calls (``fnarray.devices.shapeless``): float32 arrays straight to MLX.

MLX's operations take arrays of any shape and only build graph nodes, so an eager call on a new shape needs none
of the keyed path's per-shape work (a record, the primitives' eager misses: ~25 Python calls a primitive on
mlx:0, a decode loop's first pass 18-24x raw MLX; issue 28). These rules compute the call with the MLX operations
that the general path's primitives run on this backend (``common.RULES`` at float32, which are MLX's functions
themselves), from the arguments alone, for:

- ``exp``, ``log``, ``tanh``... (``eager_ops``' unary functions) and ``add``, ``subtract``, ``multiply``,
  ``divide``, ``maximum``, ``minimum`` of two arrays of one rank, broadcast as NumPy does (the general path's
  ``broadcast_in_dim`` is exact, and MLX broadcasts the same way);
- ``matmul`` of two matrices, ``transpose`` (``.T``) of a matrix or more, ``concatenate`` of arrays of one rank;
- ``sum``, ``max`` and ``min`` over int or tuple axes, with ``keepdims``.

Each operand must be a float32, not weakly typed, non-empty array on a device whose operations run on MLX's one
device (``mlx[cpu]`` without a GPU: no stream to pick) with an ``mx.array`` buffer, and each operand and the
result at most ``memory.SMALL_BYTES`` (the size the general path checks against the device's memory above). The
rules' results have one interned aval per shape (``_KNOWN``), so an operand made by a rule skips the tests of its
aval (a growing loop's shapes are new at every step: no last hit serves them), and a call on avals a rule served
before is found by their ids (``_SERVED_CALLS``: no aval test or shape arithmetic again). Anything else
(another dtype, a Python scalar operand, a rank promotion, an error to raise: a contraction that does not match,
an axis out of range) returns None and takes the keyed path, which raises its own errors.
``tests/test_mlx_shapeless.py`` compares every rule with the general path and NumPy.
"""

from __future__ import annotations

import math

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.ir import Params
from fnarray.core.shaped import ShapedArray, broadcast_same_rank
from fnarray.devices import eager_ops, memory
from fnarray.devices.array_impl import ArrayImpl
from fnarray.lowering.mlx.common import RULES, mx

__all__ = ["DTYPES", "rules"]

_F32 = dtypes.float32
_MAX_ELEMENTS = memory.SMALL_BYTES // _F32.itemsize
_MXA = mx.array if mx is not None else None
_DEVICES: set = set()  # ids of the devices the rules serve (``rules``; devices live as long as the process)

_AVALS: dict = {}  # shape -> its float32 aval: one object per shape, as the executables' outputs share one
# The ids of ``_AVALS``' avals and of the other avals ``_plain_aval`` passed (kept alive there and in ``_PASSED``,
# so no other live aval has one): float32, strong, non-empty and at most ``_MAX_ELEMENTS`` (the rules make no
# other), so an operand whose aval is one of them needs no test of those; a growing loop's results all are, and
# its placed operands (``q``, a new row) are after their first test.
_KNOWN: set = set()
_PASSED: list = []
_MX_NAME = {P.div: "divide"}  # MLX's names of the primitives whose rule is one expression of an MLX function


# The calls ``matmul``, ``x.T``, ``concatenate`` and the reductions served, by the ids of their operands' avals (and
# their static arguments) -> those avals and what the call made of them: the result's aval, the axes in range. A
# call on avals served before (a loop whose shapes repeat, or a growing loop's later passes over the same lengths)
# skips the operands' tests and the shape arithmetic. An entry holds its avals and is taken only where they are the
# operands' own (``is``): an id is never read for another object. One dict for all (the keys' first items differ),
# emptied when full.
_SERVED_CALLS: dict = {}


def _aval(shape):
    av = _AVALS.get(shape)
    if av is None:
        if len(_AVALS) >= 4096:
            _forget()
        av = ShapedArray(shape, _F32)
        _KNOWN.add(id(av))  # (before ``_AVALS`` keeps it: ``_forget``)
        _AVALS[shape] = av
    return av


def _result(shape, dev, buf, committed):
    """The array of ``buf``, of ``shape`` (float32) on ``dev``."""
    av = _AVALS.get(shape)
    if av is None:
        av = _aval(shape)
    r = ArrayImpl()  # ArrayImpl.make inline, as the other eager hot paths
    r.aval, r._device, r._buf, r._committed, r._host = av, dev, buf, committed, None
    return r


def _plain(x) -> bool:
    """A float32, strongly typed, non-empty array with an MLX buffer on a device the rules serve (``_unary``,
    ``_binary`` and ``_matmul`` make the same test inline)."""
    if type(x) is not ArrayImpl or type(x._buf) is not _MXA or id(x._device) not in _DEVICES:
        return False
    av = x.aval
    return id(av) in _KNOWN or _plain_aval(av)


def _plain_aval(av) -> bool:
    """``av`` is float32, strongly typed, non-empty and of at most ``_MAX_ELEMENTS`` (what ``_KNOWN``'s avals are;
    one that passes joins them)."""
    if av.dtype == _F32 and not av.weak_type and 0 not in av.shape and math.prod(av.shape) <= _MAX_ELEMENTS:
        if len(_PASSED) >= 4096:
            _forget()
        _KNOWN.add(id(av))  # (before the reference is kept: ``_forget`` may run between, in another thread)
        _PASSED.append(av)
        return True
    return False


def _forget():
    """Empty the interned avals and what is known of them; ``_KNOWN`` first and last, so that an id another thread
    adds meanwhile (before it keeps the aval, ``_aval`` and ``_plain_aval``) is never left without its aval."""
    _KNOWN.clear()
    _AVALS.clear()
    _PASSED.clear()
    _SERVED_CALLS.clear()
    _KNOWN.clear()


def _elementwise(prim, arity):
    """The float32 function of an elementwise primitive's rule (MLX's function itself: ``mx.exp``)."""
    av = ShapedArray((1,), _F32)
    fn = RULES[prim](Params(), [av] * arity, [av])
    inline = getattr(fn, "inline", None)  # ``common.expression``'s ``mx.divide({0}, {1})``: that function itself
    name = _MX_NAME.get(prim, prim.name)
    if inline is not None and not inline[1] and inline[0] == f"mx.{name}({{0}}, {{1}})":
        return getattr(mx, name)
    return fn


def _unary(fn):
    def rule(args, kwargs):
        if kwargs or len(args) != 1:
            return None
        x = args[0]
        if type(x) is not ArrayImpl:
            return None
        av, buf, dev = x.aval, x._buf, x._device
        if type(buf) is not _MXA or id(dev) not in _DEVICES or (id(av) not in _KNOWN and not _plain_aval(av)):
            return None
        r = ArrayImpl()  # (``_result`` inline: the aval is the operand's)
        r.aval, r._device, r._buf, r._committed, r._host = av, dev, fn(buf), x._committed, None
        return r
    rule.fn = fn  # (``eager_ops`` keeps it as the operator's last hit: the same call for a repeated aval)
    return rule


def _binary(fn):
    def rule(args, kwargs):
        if kwargs or len(args) != 2:
            return None
        x, y = args
        if type(x) is not ArrayImpl or type(y) is not ArrayImpl:
            return None
        a, b, dev = x.aval, y.aval, x._device
        xb, yb = x._buf, y._buf
        if type(xb) is not _MXA or type(yb) is not _MXA or y._device is not dev or id(dev) not in _DEVICES:
            return None
        if a is b:
            if id(a) not in _KNOWN and not _plain_aval(a):
                return None
        else:
            m = _SERVED_CALLS.get((id(a), id(b)))
            if m is not None and m[0] is a and m[1] is b:  # (a pair served before: tested, its result known)
                a = m[2]
            else:
                a = _pair(a, b)
                if a is None:
                    return None
        r = ArrayImpl()  # (``_result`` inline)
        r.aval, r._device, r._buf, r._committed, r._host = a, dev, fn(xb, yb), x._committed or y._committed, None
        return r
    rule.fn = fn
    return rule


def _pair(a, b):
    """The aval of the result of a binary rule on operands of the avals ``a`` and ``b`` (two objects), kept in
    ``_SERVED_CALLS`` by their ids; None where either is not plain (``_plain_aval``), their ranks differ (a rank
    promotion: the keyed path and its checks), they do not broadcast or the result is larger than
    ``_MAX_ELEMENTS``."""
    if (id(a) not in _KNOWN and not _plain_aval(a)) or (id(b) not in _KNOWN and not _plain_aval(b)):
        return None
    sa, sb = a.shape, b.shape
    out = a
    if sa != sb:
        if len(sa) != len(sb):
            return None
        shape = broadcast_same_rank(sa, sb)
        if shape is None or math.prod(shape) > _MAX_ELEMENTS:
            return None
        out = _aval(shape)
    if len(_SERVED_CALLS) >= 4096:  # (bounded: emptied when full)
        _SERVED_CALLS.clear()
    _SERVED_CALLS[(id(a), id(b))] = (a, b, out)
    return out


def _matmul(args, kwargs):
    if len(args) != 2:
        return None
    if kwargs:  # (``precision``, ``preferred_element_type``, ``out_sharding``: their defaults only)
        for v in kwargs.values():
            if v is not None:
                return None
    x, y = args
    if type(x) is not ArrayImpl or type(y) is not ArrayImpl:
        return None
    av, bv, dev, xb, yb = x.aval, y.aval, x._device, x._buf, y._buf  # (``_plain`` of both, inline)
    if type(xb) is not _MXA or type(yb) is not _MXA or y._device is not dev:
        return None
    m = _SERVED_CALLS.get((_matmul, id(av), id(bv)))
    if m is None or m[0] is not av or m[1] is not bv or m[2] is not dev:  # (served avals: checked already)
        if (id(dev) not in _DEVICES or (id(av) not in _KNOWN and not _plain_aval(av))
                or (id(bv) not in _KNOWN and not _plain_aval(bv))):
            return None
        a, b = av.shape, bv.shape
        if len(a) != 2 or len(b) != 2 or a[1] != b[0] or a[0] * b[1] > _MAX_ELEMENTS:
            return None
        out = (a[0], b[1])
        m = (av, bv, dev, _AVALS.get(out) or _aval(out))
        if len(_SERVED_CALLS) >= 4096:  # (bounded: emptied when full)
            _SERVED_CALLS.clear()
        _SERVED_CALLS[_matmul, id(av), id(bv)] = m
    r = ArrayImpl()
    r.aval, r._device, r._buf, r._committed, r._host = m[3], dev, mx.matmul(xb, yb), x._committed or y._committed, None
    return r


def _transpose(args, kwargs):
    n = len(args)
    if n == 1 and not kwargs:  # ``x.T``, ``transpose(x)``: the axes reversed
        axes = None
    elif n + len(kwargs) == 2 and (n == 2 or "axes" in kwargs):
        axes = args[1] if n == 2 else kwargs["axes"]
    else:
        return None
    x = args[0]
    if axes is None and type(x) is ArrayImpl:  # (an aval ``x.T`` served: checked already)
        av = x.aval
        m = _SERVED_CALLS.get((_transpose, id(av)))
        if m is not None and m[0] is av and m[1] is x._device and type(x._buf) is _MXA:
            r = ArrayImpl()
            r.aval, r._device, r._buf, r._committed, r._host = m[2], m[1], mx.transpose(x._buf), x._committed, None
            return r
    if not _plain(x):
        return None
    av = x.aval
    shape = av.shape
    n = len(shape)
    if n < 2:
        return None
    if axes is None:
        t = shape[::-1]
        out = _AVALS.get(t)
        if out is None:
            out = _aval(t)
        r = ArrayImpl()  # (``_result`` inline)
        r.aval, r._device, r._buf, r._committed, r._host = out, x._device, mx.transpose(x._buf), x._committed, None
        if len(_SERVED_CALLS) >= 4096:  # (bounded: emptied when full)
            _SERVED_CALLS.clear()
        _SERVED_CALLS[(_transpose, id(av))] = (av, x._device, out)
        return r
    if type(axes) not in (tuple, list) or sorted(axes) != list(range(n)) or not all(type(i) is int for i in axes):
        return None
    return _result(tuple([shape[i] for i in axes]), x._device, mx.transpose(x._buf, axes), x._committed)


def _concatenate(args, kwargs):
    n = len(args)
    if n == 1:
        xs, axis = args[0], kwargs.get("axis", 0) if kwargs else 0
    elif n == 2 and "axis" not in kwargs:
        xs, axis = args
    else:
        return None
    if kwargs:
        for k, v in kwargs.items():
            if k != "axis" and (k != "dtype" or v is not None):
                return None
    if type(axis) is not int or (type(xs) is not list and type(xs) is not tuple):
        return None
    if len(xs) == 2:  # (two operands whose avals were served together: checked already)
        x0, x1 = xs
        if type(x0) is ArrayImpl and type(x1) is ArrayImpl:
            a0, a1 = x0.aval, x1.aval
            m = _SERVED_CALLS.get((_concatenate, id(a0), id(a1), axis))
            if m is not None and m[0] is a0 and m[1] is a1:
                dev, b0, b1 = x0._device, x0._buf, x1._buf
                if m[4] is dev and x1._device is dev and type(b0) is _MXA and type(b1) is _MXA:
                    r = ArrayImpl()
                    r.aval, r._device, r._buf, r._committed, r._host = m[3], dev, mx.concatenate([b0, b1], m[2]), \
                        x0._committed or x1._committed, None
                    return r
    elif len(xs) < 2:
        return None
    x0 = xs[0]
    if type(x0) is not ArrayImpl or id(x0._device) not in _DEVICES:
        return None
    return _concatenate_new(xs, axis)


def _concatenate_new(xs, axis):
    """``_concatenate`` of operands whose avals it has not served together (``xs``: two or more, the first an array
    on a device the rules serve; ``axis`` an int as given), or None where the keyed path must take the call."""
    x0 = xs[0]
    dev, shape = x0._device, x0.aval.shape
    nd = len(shape)
    if not -nd <= axis < nd:
        return None
    axis0, axis = axis, axis % nd  # (as given, the memo's key; in range)
    before, after = shape[:axis], shape[axis + 1:]
    total, committed, bufs = 0, False, []
    for x in xs:  # (``_plain`` of each, inline)
        if type(x) is not ArrayImpl or x._device is not dev or type(x._buf) is not _MXA:
            return None
        av = x.aval
        if id(av) not in _KNOWN and not _plain_aval(av):
            return None
        s = av.shape
        if len(s) != nd or s[axis + 1:] != after or (axis and s[:axis] != before):
            return None
        total += s[axis]
        committed = committed or x._committed
        bufs.append(x._buf)
    out = before + (total,) + after
    if math.prod(out) > _MAX_ELEMENTS:
        return None
    av = _AVALS.get(out)
    if av is None:
        av = _aval(out)
    if len(xs) == 2:
        if len(_SERVED_CALLS) >= 4096:  # (bounded: emptied when full)
            _SERVED_CALLS.clear()
        a0, a1 = xs[0].aval, xs[1].aval
        _SERVED_CALLS[(_concatenate, id(a0), id(a1), axis0)] = (a0, a1, axis, av, dev)
    r = ArrayImpl()  # (``_result`` inline)
    r.aval, r._device, r._buf, r._committed, r._host = av, dev, mx.concatenate(bufs, axis), committed, None
    return r


# the keyword arguments a reduction takes here: its axes and keepdims, and the others at their defaults
_REDUCTION_DEFAULTS = {"dtype": None, "out": None, "initial": None, "where": None, "promote_integers": True}


def _reduction(fn):
    def rule(args, kwargs):
        n = len(args)
        if n == 2 and "axis" not in kwargs:
            axis = args[1]
        elif n == 1:
            axis = kwargs.get("axis") if kwargs else None
        else:
            return None
        keepdims = False
        if kwargs:
            keepdims = kwargs.get("keepdims", False)
            if len(kwargs) > ("axis" in kwargs) + ("keepdims" in kwargs):
                for k, v in kwargs.items():
                    if k not in ("axis", "keepdims") and (k not in _REDUCTION_DEFAULTS
                                                          or v is not _REDUCTION_DEFAULTS[k]):
                        return None
        x = args[0]
        if type(x) is not ArrayImpl or type(keepdims) is not bool:
            return None
        av, buf, dev = x.aval, x._buf, x._device  # (``_plain`` inline)
        if type(buf) is not _MXA:
            return None
        key = (rule, id(av), axis, keepdims) if axis is None or type(axis) is int else None
        if key is not None:  # (an aval this reduction served with these arguments on ``dev``: checked already)
            m = _SERVED_CALLS.get(key)
            if m is not None and m[0] is av and m[3] is dev:
                r = ArrayImpl()
                r.aval, r._device, r._buf, r._committed, r._host = m[2], dev, fn(buf, m[1], keepdims), \
                    x._committed, None
                return r
        if id(dev) not in _DEVICES or (id(av) not in _KNOWN and not _plain_aval(av)):
            return None
        shape = av.shape
        nd = len(shape)
        if type(axis) is int:  # (the common call: one axis)
            if not -nd <= axis < nd:
                return None
            a = axes = axis % nd  # (MLX takes one axis as an int: ~60 ns less than a list)
            out = shape[:a] + (1,) + shape[a + 1:] if keepdims else shape[:a] + shape[a + 1:]
        else:
            axes = _axes(axis, nd)
            if not axes:
                return None
            out = tuple([1 if i in axes else d for i, d in enumerate(shape)]) if keepdims else \
                tuple([d for i, d in enumerate(shape) if i not in axes])
        out_av = _AVALS.get(out)
        if out_av is None:
            out_av = _aval(out)
        if key is not None:
            if len(_SERVED_CALLS) >= 4096:  # (bounded: emptied when full)
                _SERVED_CALLS.clear()
            _SERVED_CALLS[key] = (av, axes, out_av, dev)
        r = ArrayImpl()  # (``_result`` inline)
        r.aval, r._device, r._buf, r._committed, r._host = out_av, dev, fn(buf, axes, keepdims), x._committed, None
        return r
    return rule


def _axes(axis, n):
    """``axis`` (None or a tuple of ints) as a sorted list of non-negative axes of a rank-``n`` array, or None where
    it is out of range or repeated (the keyed path raises)."""
    if axis is None:
        return list(range(n))
    if type(axis) is not tuple:
        return None
    axes = sorted([i % n for i in axis if type(i) is int and -n <= i < n])
    if len(axes) != len(axis) or len(set(axes)) != len(axes):
        return None
    return axes


# the namespace functions that are exactly one elementwise primitive at float32 (``eager_ops``' tables), by name;
# comparisons (bool results) are left out
_UNARY = eager_ops.namespace_primitives(1)
_BINARY = {name: p for name, p in eager_ops.namespace_primitives(2).items()
           if p.abstract_eval(_aval((1,)), _aval((1,))).dtype == _F32}


#: the dtypes the rules take (``fnarray.devices.shapeless.SERVED``)
DTYPES = frozenset({_F32})


def rules(devices) -> dict:
    """``{qualified name of a namespace function: rule}`` serving ``devices`` (the mlx devices whose operations
    run on MLX's one device), for ``fnarray.devices.shapeless.register``."""
    _DEVICES.update(id(d) for d in devices)
    out = {f"fnarray.numpy.{name}": _unary(_elementwise(prim, 1)) for name, prim in _UNARY.items()}
    out.update({f"fnarray.numpy.{name}": _binary(_elementwise(prim, 2)) for name, prim in _BINARY.items()})
    out.update({"fnarray.numpy.matmul": _matmul, "fnarray.numpy.transpose": _transpose,
                "fnarray.numpy.concatenate": _concatenate, "fnarray.numpy.sum": _reduction(mx.sum),
                "fnarray.numpy.max": _reduction(mx.max), "fnarray.numpy.min": _reduction(mx.min)})
    return out
