"""``Array``'s arithmetic and comparison operators on concrete arrays: the eager hot path.

Through the namespace, ``x * 2.0`` is ~40 Python calls (``multiply``, ``elementwise``, promotion,
``lax.mul``, ``bind``, ``eager_apply``, the eager cache, the executable) around a NumPy call that costs
~1 us by itself. The operators of ``ArrayImpl`` (``+ - * /``, the six comparisons, unary ``-``) first
look for an entry of the eager cache keyed by (operator, the array's aval, the other operand's Python
type: ``ArrayImpl`` for an array of the same aval), with the device's id added for a second device. It
holds the primitive's implementation itself (the NumPy function on numpy:0, ``jax.jit``'s callable or the
eager executable on other backends), the output's aval and the backend's conversion of a Python scalar.

An entry is made only after the general path ran the same operation, and only where that path's
promotion is a fixed rule of the operand types:

- two arrays of one aval (dtype, shape, strong type) on one device;
- an array of a strong dtype ``d`` with a Python ``float`` or ``int`` that it absorbs
  (``dtypes.scalar_operand_dtype``: the scalar stays a weak literal, or becomes a strong one of ``d``,
  through the same ``dtypes.scalar_literal`` as the namespace's);

and only where the operator is that one primitive at that dtype (``+`` of bools is ``or``, ``/`` of
integers converts first: those stay general). Before an entry is kept, the general path's result must have
the aval and device of the primitive's own eager executable at those input avals (made here if the general
path ran the whole function as one program, ``fnarray.transforms.eager_jit``). On a device whose compiles are slow
(``eager_programs`` ``"first_call"``: XLA) a binary operator's miss in such a case runs the function under
``eager_jit``'s wrapper, primitive by primitive, so that a new shape compiles that one primitive once, and not the
wrapper's program of it first (issue 28: ``x * 2.0`` in a loop whose shape grows compiled each shape twice).

``install_namespace`` gives ``fnarray.numpy``'s elementwise functions of the same primitives (``add`` ...
``not_equal``, ``maximum``, ``minimum``, ``negative``, ``abs``, ``exp``, ``log``, ``sqrt``, ``sin`` ... at the
dtypes where each is exactly one primitive) the same entries, so ``fnp.multiply(x, y)`` costs one call more
than ``x * y``.

Everything else takes the general path: tracers or a transformation in progress, NumPy operands,
broadcasting, weak-typed arrays, the profiler recording, ``debug_nans``/``debug_infs`` on, a changed
configuration (``config.generation``). So does any error of the fast call: the general path then runs
the operation again and raises its own error. The NumPy functions' ``RuntimeWarning``s are silenced for
this module as for the numpy backend's (``x / 0.0`` is pinned to ``inf``). ``tests/test_eager_ops.py``
compares the two paths over dtypes, scalar kinds and values.

Entries share the eager cache's bound (``config.eager_cache_size``) and its ``clear()``; a hit marks its
entry used, as a general hit does (second-chance eviction). Lookups take no lock. Each operator first
compares its last hit (aval, device, configuration) by identity, and hashes a key only when that differs;
an evicted entry empties the last hit that holds it.
"""

from __future__ import annotations

import functools
import math
import warnings

from fnarray.core import dtypes, families, tracing
from fnarray.core import primitives as P
from fnarray.core.array import _OPERAND_TYPES, Array, foreign_operand
from fnarray.core.config import config
from fnarray.devices import array_impl, placement, shapeless
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.lookup import DEFAULT_NOW, current_default

__all__ = ["install_namespace", "namespace_primitives", "serves"]

warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.devices\.eager_ops")

_STATE = tracing._state          # this thread's trace levels
_APPLY = placement.eager_apply   # the unprofiled eager apply: the fast path runs only while it is installed
_D = placement._eager_d          # the eager cache's mapping (GIL-atomic gets, no lock)
_PARAMS = tracing._NO_PARAMS     # what ``bind`` passes for a primitive without params
_SERVED = shapeless.SERVED        # id(device) -> the dtypes a backend's rules of any shape take there


def _not_bool(d) -> bool:
    return d != dtypes.bool_


def _real(d) -> bool:
    return not dtypes.is_complex(d)


def _any(d) -> bool:
    return True


def _real_not_bool(d) -> bool:
    return d != dtypes.bool_ and not dtypes.is_complex(d)


def _has_abs(d) -> bool:
    return d != dtypes.bool_ and not dtypes.is_unsigned(d)  # ``abs`` of an unsigned array is no primitive


# operator -> (primitive, the dtypes at which fnarray.numpy's function is exactly that primitive, reflected).
# ``divide`` promotes before its elementwise step and so converts a scalar quietly (``_QUIET``).
_QUIET = frozenset({"truediv", "rtruediv"})
_BINARY = {
    "add": (P.add, _not_bool, False), "radd": (P.add, _not_bool, True),
    "sub": (P.sub, _not_bool, False), "rsub": (P.sub, _not_bool, True),
    "mul": (P.mul, _not_bool, False), "rmul": (P.mul, _not_bool, True),
    "truediv": (P.div, dtypes.is_inexact, False), "rtruediv": (P.div, dtypes.is_inexact, True),
    "lt": (P.lt, _real, False), "le": (P.le, _real, False), "gt": (P.gt, _real, False),
    "ge": (P.ge, _real, False), "eq": (P.eq, _any, False), "ne": (P.ne, _any, False),
    # fnarray.numpy's functions that are no operator
    "maximum": (P.max_p, _real_not_bool, False), "minimum": (P.min_p, _real_not_bool, False),
}
# operator or fnarray.numpy function -> (primitive, the dtypes at which the function is exactly that primitive)
# (The primitives NumPy has by their own name, ``Primitive.library``, are fnarray.numpy's function of that name at
# float dtypes; erf is scipy's, not NumPy's.)
_UNARY = {"neg": (P.neg, _not_bool), "abs": (P.abs_p, _has_abs), "erf": (P.erf, dtypes.is_float)}
_UNARY.update({p.name: (p, dtypes.is_float) for p in families.members("unary") if p.library})

# fnarray.numpy's binary functions -> (the code of ``f(array, x2)``, of ``f(Python scalar, array)`` or None)
_NAMESPACE_BINARY = {
    "add": ("add", "radd"), "subtract": ("sub", "rsub"), "multiply": ("mul", "rmul"),
    "divide": ("truediv", "rtruediv"), "less": ("lt", None), "less_equal": ("le", None),
    "greater": ("gt", None), "greater_equal": ("ge", None), "equal": ("eq", None), "not_equal": ("ne", None),
    "maximum": ("maximum", None), "minimum": ("minimum", None),
}
# fnarray.numpy's unary functions -> code (``_UNARY``)
_NAMESPACE_UNARY = {"negative": "neg", **{name: name for name in _UNARY if name != "neg"}}


def namespace_primitives(arity: int) -> dict:
    """``{name: primitive}``: fnarray.numpy's elementwise functions of ``arity`` (1 or 2) arrays that are exactly
    that one primitive at float dtypes (the tables above; ``lowering/mlx/shapeless.py`` serves them on any shape)."""
    if arity == 1:
        return {name: _UNARY[code][0] for name, code in _NAMESPACE_UNARY.items()}
    return {name: _BINARY[code][0] for name, (code, _) in _NAMESPACE_BINARY.items()}


def _fast_now() -> bool:
    """This thread stages nothing and the unprofiled eager apply is installed (``tracing.plain`` says so for
    every thread at once, and is read first)."""
    return _STATE.dynamic[-1].level == 0 and tracing._eager_apply is _APPLY


class _OpEntry:
    """A fast operator's cached implementation (an eager-cache value beside the general ``_EagerEntry``).

    ``memo`` is the one-element list of the operator's last hit that may hold this entry; ``forget`` (called
    by the eager cache when it evicts or clears the entry, and by ``_insert`` when it replaces it) empties it, so
    an evicted entry is not served, and clears ``live``: while it is set, the primitive's own entry, which the
    general path runs, is kept in the cache with it (``placement._used_since``)."""

    __slots__ = ("fn", "conv", "out_aval", "device", "generation", "used", "memo", "live")

    def __init__(self, fn, conv, out_aval, device):
        self.fn, self.conv, self.out_aval, self.device = fn, conv, out_aval, device
        self.generation = config.generation
        self.used = False
        self.memo = None
        self.live = True

    def forget(self):
        self.live = False
        memo = self.memo
        if memo is not None and memo[0][-1] is self:
            memo[0] = _NO_MEMO  # (another thread may have just read the old hit: it is still correct)


# An operator's last hit, ``(aval, [scalar type,] device, generation, fn, out_aval, conv, entry)``, compared
# by identity before any key is hashed (hashing an aval's dtype is most of a lookup): a loop's ``x * y`` meets
# the same aval objects every time (an executable's outputs share one, and so do placed arrays of one shape
# and dtype). One tuple in a one-element list per operator and operand kind, replaced whole, so a thread
# reads either the old hit or the new one.
_NO_MEMO = (None,) * 8


def _lookup(key, dev):
    """The entry for ``key`` on ``dev``: entries of a second device of one key are keyed with its id too."""
    e = _D.get(key)
    if e is not None and e.device is not dev:
        e = _D.get(key + (id(dev),))
        if e is not None and e.device is not dev:
            return None
    return e


def _remember(memo, key, dev, *head):
    """The last hit for ``key`` on ``dev`` if its entry is current (then kept in ``memo``), else None."""
    e = _lookup(key, dev)
    if e is None or e.generation != config.generation:
        return None
    e.memo = memo
    m = memo[0] = head + (dev, e.generation, e.fn, e.out_aval, e.conv, e)
    return m


def _binary(code, general, raw=None, name=None):
    """``ArrayImpl``'s operator ``code`` (or the namespace function of qualified name ``name``, which a backend's
    rule of any shape may serve: ``fnarray.devices.shapeless``) over ``general``."""
    # the last hits with an array operand and with a Python scalar, and (``pairs``) the last broadcast a backend's
    # rule of any shape served: ``(aval, other aval, ...)``; ``arrays`` and ``pairs`` also hold the avals of the
    # last call such a rule served (``_shapeless``)
    arrays, scalars = [_NO_MEMO, None, None], [_NO_MEMO]
    pairs = [_NO_MEMO, None, None]

    def method(self, other):
        t = type(other)
        if t is ArrayImpl:
            if self._device is not DEFAULT_NOW[0] and not (self._committed or other._committed) \
                    and self._device is not current_default():
                return general(self, other)  # uncommitted arrays off the default device: moved there (bind)
            av, oav = self.aval, other.aval
            if oav is not av and oav != av:  # two avals (a broadcast): the general path, nothing to learn
                dev = self._device
                if av.dtype in _SERVED.get(id(dev), ()) and (tracing.plain or _fast_now()):
                    m = pairs[0]
                    a, b = self._buf, other._buf
                    if (m[0] is av and m[1] is oav and m[2] is dev and other._device is dev and a is not None
                            and b is not None and m[3] == config.generation):
                        r = ArrayImpl()  # (the rule's last result for these two avals: its function and aval)
                        r.aval, r._device, r._buf, r._host = m[5], dev, m[4](a, b), None
                        r._committed = self._committed or other._committed
                        return r
                    out = _shapeless(name, (self, other), pairs, av, oav)  # (no wrapper: two calls less)
                    if out is not None:
                        return out
                return general(self, other)
            if tracing.plain or _fast_now():
                # The entry is keyed by this array's aval alone (the other's must equal it: operands of two
                # avals, a broadcast, go to the general path without a lookup, and learn nothing there).
                dev = self._device
                m = arrays[0]
                if m[0] is not av or m[1] is not dev or m[2] != config.generation:
                    if av.dtype in _SERVED.get(id(dev), ()):  # (a backend's rule of any shape serves it)
                        out = _shapeless(name, (self, other), arrays, av)
                        if out is not None:
                            return out
                        # declined (a large, weak or empty operand): the learned entry, as for other dtypes
                    m = _remember(arrays, (code, av, ArrayImpl), dev, av)
                a, b = self._buf, other._buf
                if m is not None and other._device is dev and a is not None and b is not None:
                    m[6].used = True
                    try:
                        out = m[3](a, b)
                    except Exception:  # the general path raises its own error (or succeeds: an OOM race)
                        return general(self, other)
                    r = ArrayImpl()  # what ArrayImpl.make(...) does, inline
                    r.aval, r._device, r._buf, r._host = m[4], dev, out, None
                    r._committed = self._committed or other._committed
                    return r
        elif t is float or t is int:
            if (tracing.plain or _fast_now()) and \
                (self._device is DEFAULT_NOW[0] or self._committed or self._device is current_default()):
                av, dev = self.aval, self._device
                m = scalars[0]
                if m[0] is not av or m[1] is not t or m[2] is not dev or m[3] != config.generation:
                    m = _remember(scalars, (code, av, t), dev, av, t)
                a = self._buf
                if m is not None and a is not None:
                    m[7].used = True
                    try:
                        out = m[4](a, m[6](other))
                    except Exception:
                        return general(self, other)
                    r = ArrayImpl()
                    r.aval, r._device, r._buf, r._committed, r._host = m[5], dev, out, self._committed, None
                    return r
        return _miss(code, general, self, other, raw=raw)
    method.__name__ = general.__name__
    method.__doc__ = general.__doc__
    return method


def _reflected(code, general, raw=None):
    scalars = [_NO_MEMO]

    def method(self, other):
        t = type(other)
        if (t is float or t is int) and (tracing.plain or _fast_now()) and \
                (self._device is DEFAULT_NOW[0] or self._committed or self._device is current_default()):
            av, dev = self.aval, self._device
            m = scalars[0]
            if m[0] is not av or m[1] is not t or m[2] is not dev or m[3] != config.generation:
                m = _remember(scalars, (code, av, t), dev, av, t)
            a = self._buf
            if m is not None and a is not None:
                m[7].used = True
                try:
                    out = m[4](m[6](other), a)
                except Exception:
                    return general(self, other)
                r = ArrayImpl()
                r.aval, r._device, r._buf, r._committed, r._host = m[5], dev, out, self._committed, None
                return r
        return _miss(code, general, self, other, raw=raw)
    method.__name__ = general.__name__
    method.__doc__ = general.__doc__
    return method


def _unary(code, general, name=None):
    """``ArrayImpl``'s operator ``code`` (or the namespace function of qualified name ``name``: any operand, where
    others go to ``general`` through ``_miss``) over ``general``."""
    last = [_NO_MEMO, None, None]  # (and the aval of the last call a rule served: ``_shapeless``)

    def method(x, /):  # (``x``: the name of the namespace function's operand, which its errors say)
        if type(x) is ArrayImpl and (tracing.plain or _fast_now()) and \
                (x._device is DEFAULT_NOW[0] or x._committed or x._device is current_default()):
            av, dev = x.aval, x._device
            m = last[0]
            if m[0] is not av or m[1] is not dev or m[2] != config.generation:
                if _SLOW.get(id(dev)):
                    # a device whose compiles are slow has no unary entries (``_miss`` learns none): eager_jit's
                    # program of the function serves the call, reached without a lookup or the miss's checks
                    # (8 of a jax:0 decode step's 44 Python calls)
                    return general(x)
                if av.dtype in _SERVED.get(id(dev), ()):
                    # nor one whose backend's rule of any shape serves it (``fnarray.devices.shapeless``: mlx's
                    # float32), where an entry per new shape costs more than the rule saves
                    out = _shapeless(name, (x,), last, av)
                    if out is not None:
                        return out
                    # declined (a large, weak or empty operand): the learned entry, as for other dtypes
                m = _remember(last, (code, av), dev, av)
            a = x._buf
            if m is not None and a is not None:
                m[6].used = True
                try:
                    out = m[3](a)
                except Exception:
                    return general(x)
                r = ArrayImpl()
                r.aval, r._device, r._buf, r._committed, r._host = m[4], dev, out, x._committed, None
                return r
        if type(x) is not ArrayImpl:   # (a tracer: ``_miss`` would call ``general`` at once)
            return general(x)
        return _miss(code, general, x)
    method.__name__ = general.__name__
    method.__doc__ = general.__doc__
    return method


def _shapeless(name, args, memo, av, oav=None):
    """The call of the rule of any shape of the namespace function ``name`` (``fnarray.devices.shapeless``) on
    ``args``, or None (no rule, a record under way, ``debug_nans``, or the rule does not serve these operands).
    The caller has checked that the call is plain (``_fast_now``); the namespace's wrapper would ask the same rule.

    A served call on the avals of the call the rule served before it (``memo[1]``, ``memo[2]``: ``av`` and, for a
    broadcast, ``oav``), whose rule names its function (``rule.fn``: one elementwise MLX function, whatever the
    shape), becomes the operator's last hit in ``memo[0]``, as a learned entry does: a loop whose shapes repeat
    then calls that function without the rule's checks from its third call, one whose shapes grow calls the rule
    each time and writes two avals a call, not a last hit (~0.25 us of an eager decode's operator, issue 28)."""
    rule = _RULES.get(name)
    if rule is None or array_impl.recording is not None or placement.debug_check is not None:
        return None
    out = rule(args, _NO_KWARGS)
    if out is not None:
        if memo[1] is not av or memo[2] is not oav:
            memo[1], memo[2] = av, oav
        else:
            fn = getattr(rule, "fn", None)
            if fn is not None:
                head = (av,) if oav is None else (av, oav)
                memo[0] = head + (out._device, config.generation, fn, out.aval, None, _RULE_ENTRY)
    return out


_RULES = shapeless.RULES
_NO_KWARGS: dict = {}
# the entry of a last hit that a rule of any shape made (``_shapeless``): in no cache, so never forgotten; only its
# ``used`` flag is written (one object for all, not one made at each call of a growing loop)
_RULE_ENTRY = _OpEntry(None, None, None, None)


def _miss(code, general, x, *other, raw=None):
    """The general path, then (where the case is one of the fixed rules) an entry for the next call.

    ``raw``: the namespace function under ``fnarray.transforms.eager_jit``'s wrapper (its general path, primitive
    by primitive). A binary case of a fixed rule on a device whose compiles are slow (``eager_programs``
    ``"first_call"``: XLA) runs through it, so that a new shape compiles the one primitive that the entry then
    calls, and not the whole function's program first (the same one primitive) and that executable after it."""
    if other and type(other[0]) is ArrayImpl and other[0].aval != x.aval:
        return general(x, *other)  # two avals (a broadcast): no fixed rule of the operand types (``_binary_case``)
    if not (type(x) is ArrayImpl and _STATE.dynamic[-1].level == 0 and tracing._eager_apply is _APPLY
            and placement.debug_check is None) or x.aval.weak_type:
        return general(x, *other)
    av, dev = x.aval, x._device
    case = _binary_case(code, av, dev, other[0]) if other else _unary_case(code, av)
    if case is None:
        return general(x, *other)
    slow = _slow_compiles(dev)
    out = (raw if other and slow and raw is not None else general)(x, *other)
    if type(out) is ArrayImpl and (other or not slow):
        # A device whose compiles are slow compiles no primitive for a unary function: its whole-function program
        # (``eager_jit``) serves the case, and a second compile of each new shape would cost more than the entry
        # saves; nor does it look for one made elsewhere (``_unary`` then goes to ``general`` at once). Operators
        # keep their entries (x * 2.0 is the loop body everyone writes), made by ``raw``.
        _learn(case, out, dev)
    return out


_SLOW: dict = {}  # id(device) -> whether its Capabilities.eager_programs is "first_call" (devices outlive this)


def _slow_compiles(dev) -> bool:
    slow = _SLOW.get(id(dev))
    if slow is None:
        slow = _SLOW[id(dev)] = dev.impl.capabilities(dev).eager_programs == "first_call"
    return slow


def _learn(case, out, dev):
    """After the general path computed ``out`` for a fixed-rule ``case`` (``_binary_case``, ``_unary_case``) on
    ``dev``: an entry for the next such call, where the primitive's eager executable (the general path made it,
    unless it ran the whole function as a program: made here) gives ``out``'s aval."""
    prim, in_avals, key, conv = case
    try:
        base = placement._eager_entry(prim, _PARAMS, in_avals, dev)
    except Exception:  # noqa: BLE001 (no entry: the general path keeps serving this case)
        return
    if base is None:
        return
    exe, out_avals = base.exe, base.out_avals
    if len(out_avals) != 1 or out.aval != out_avals[0] or out._device is not dev:
        return
    fn = dev.impl.eager_call(prim, _PARAMS, in_avals, out_avals)
    if fn is None:
        fn = _one_output(exe, len(in_avals))
        if fn is None:
            return
    entry = _OpEntry(fn, conv, out_avals[0], dev)
    if _insert(key, entry, dev):  # the primitive's entry stays cached while this one is (``_OpEntry.live``)
        base.kept_by = base.live_keepers() + [entry]  # (the forgotten ones dropped)


def _binary_case(code, av, dev, other):
    """``(primitive, in_avals, key, converter)`` of a binary operator whose other operand is an array of the
    same aval and device, or a Python scalar that the fixed promotion rule takes; ``None`` for other cases."""
    prim, accepts, reflected = _BINARY[code]
    if not accepts(av.dtype):
        return None
    t = type(other)
    if t is ArrayImpl:
        if reflected or other.aval != av or other._device is not dev:
            return None
        return prim, (av, other.aval), (code, av, ArrayImpl), None
    if t is float or t is int:
        rule = dtypes.scalar_operand_dtype(av.dtype, t)
        if rule is None:
            return None
        d, weak = rule
        if t is int and weak:
            dtypes.check_weak_int(other, d)
        quiet = code in _QUIET
        lit_aval = placement._scalar_aval(other if weak else dtypes.scalar_literal(other, d, quiet))
        in_avals = (lit_aval, av) if reflected else (av, lit_aval)
        return prim, in_avals, (code, av, t), _converter(dev, lit_aval.dtype, weak, quiet)
    return None


def _unary_case(code, av):
    prim, accepts = _UNARY[code]
    if not accepts(av.dtype):
        return None
    return prim, (av,), (code, av), None


def _insert(key, entry, dev) -> bool:
    """``entry`` into the eager cache under ``key``: the key's first device keeps the short key, others are
    looked up by the device's id too; a stale entry (another configuration, or an id reused) is replaced (and
    forgotten). False where a current entry of the key was there already (``entry`` is dropped)."""
    old = _D.get(key)
    if old is not None and old.device is not dev and old.generation == config.generation:
        key = key + (id(dev),)
        old = _D.get(key)
    if old is None:
        return placement._eager_cache.put(key, entry) is entry
    if old.generation != config.generation or old.device is not dev:
        placement._eager_cache.set(key, entry)
        old.forget()
        return True
    return False


def _converter(dev, d, weak, quiet):
    """``conv(value)``: a device scalar of the value the general path passes for a Python scalar ``value`` of
    this case. The last value's buffer is kept: a loop's ``x * 2.0`` passes the same float object every time
    (an identity test, so ``0.0``/``-0.0``, ``1``/``True`` and NaNs are never confused); buffers are immutable."""
    to_device = dev.impl.scalar_converter(d, dev)
    if weak:
        make = to_device
    else:
        def make(value):
            return to_device(dtypes.scalar_literal(value, d, quiet))
    last = [None]
    quiet_cast = not weak and d in (dtypes.float64, dtypes.complex128)  # a float or int converts without warning

    def conv(value):
        hit = last[0]
        if hit is not None and hit[0] is value:
            return hit[1]
        buf = make(value)
        if quiet_cast or (weak and (type(value) is int or not _F32_MAX < abs(value) < math.inf)):
            last[0] = (value, buf)  # only values whose conversion cannot warn: a cached one would warn once
        return buf
    return conv


_F32_MAX = float(dtypes.finfo(dtypes.float32).max)


def _one_output(exe, n):
    """``fn(*bufs) -> buf`` over a one-output executable: through its direct entry (``call_args``, as jit's hot
    path) where it has one, else the executable itself."""
    call = getattr(exe, "call_args", None)
    if call is not None and getattr(exe, "reraise", None) is not None:
        # Errors are not translated here: any error of a fast call re-runs the general path, which does.
        one = getattr(exe, "one", None)  # mlx: the rule of one output itself (``buf -> buf``, no list)
        if one is not None:
            return one
        if n == 1:
            def fn(a):
                return call(a)[0]
        else:
            def fn(a, b):
                return call(a, b)[0]
    elif n == 1:
        def fn(a):
            return exe([a])[0]
    else:
        def fn(a, b):
            return exe([a, b])[0]
    return fn


_DUNDER = {"add": "__add__", "radd": "__radd__", "sub": "__sub__", "rsub": "__rsub__", "mul": "__mul__",
           "rmul": "__rmul__", "truediv": "__truediv__", "rtruediv": "__rtruediv__", "lt": "__lt__",
           "le": "__le__", "gt": "__gt__", "ge": "__ge__", "eq": "__eq__", "ne": "__ne__", "neg": "__neg__"}


def install_namespace(ns, unwrap=None) -> None:
    """Give ``ArrayImpl`` its fast operators, and replace ``ns``'s (``fnarray.numpy``'s) elementwise functions
    of ``_NAMESPACE_BINARY`` and ``_NAMESPACE_UNARY`` (and their aliases) by ones that take the same entries
    first. ``unwrap(fn)``: the function under a wrapper ``fn`` of ``fnarray.transforms.eager_jit`` (None for
    others), whose general path a binary miss on a ``"first_call"`` device takes (``_miss``).

    ``fnp.multiply(x, y)`` of concrete arrays then costs what ``x * y`` does (plus a call), not the general
    path's ~40 Python calls. A wrapper's own fast method falls back to the function it replaced (never to
    ``Array``'s operator, which calls the namespace again); other operand types go to it directly.
    """
    for name, (code, rcode) in _NAMESPACE_BINARY.items():
        fn = getattr(ns, name)
        raw = None if unwrap is None else unwrap(fn)
        qualname = f"{ns.__name__}.{name}"
        _replace(ns, fn, _namespace_binary(fn, code, rcode, raw, qualname), (code, rcode))
        # ArrayImpl's operators, which tried the same entries already, fall back to the replaced function
        # itself (Array's operator would call the new one, and so look them up a second time).
        for c, reflected in ((code, False), (rcode, True)):
            if c in _DUNDER:
                raw_op = None if raw is None else _operator(raw, reflected)
                _install_operator(c, _reflected(c, _operator(fn, reflected), raw_op) if reflected else
                                  _binary(c, _operator(fn, reflected), raw_op, qualname))
    for name, code in _NAMESPACE_UNARY.items():
        fn = getattr(ns, name)
        qualname = f"{ns.__name__}.{name}"
        _replace(ns, fn, _namespace_unary(fn, code, qualname), (code,))
        if code in _DUNDER:
            _install_operator(code, _unary(code, fn, qualname))


def _install_operator(code, method):
    dunder = _DUNDER[code]
    method.__name__, method.__doc__ = dunder, getattr(Array, dunder).__doc__
    setattr(ArrayImpl, dunder, method)


_OPERANDS = (Array,) + _OPERAND_TYPES  # what Array's operators accept (others give NotImplemented)


def _operator(fn, reflected):
    """``Array``'s operator over ``fn`` (a namespace function): NotImplemented for other operand types."""
    if reflected:
        def general(self, other):
            if not isinstance(other, _OPERANDS):
                return foreign_operand(other, fn.__name__)
            return fn(other, self)
    else:
        def general(self, other):
            if not isinstance(other, _OPERANDS):
                return foreign_operand(other, fn.__name__)
            return fn(self, other)
    return general


#: The namespace functions (as they were before ``install_namespace`` replaced them) whose calls take this
#: module's entries first: a call of one reaches the function itself on a miss only, after which an entry
#: serves the same operands (``fnarray.transforms.eager_jit`` records no tape at the first call of such a key).
FAST_FIRST: set = set()


#: Each function of ``FAST_FIRST`` -> ``(code, reflected code or None)`` of a binary function, ``(code,)`` of a
#: unary one: the keys of the entries that serve its calls (``serves``).
_CODES: dict = {}


def serves(fn, args) -> bool:
    """Whether a current entry of this module serves ``fn(*args)`` (``fn`` one of ``FAST_FIRST``; ``args``
    positional), so that the call never reaches ``fn`` while the unprofiled eager apply is installed: the
    profiler's caller (``fnarray.transforms.eager_jit``) then takes the general path, whose primitive entry the
    entry keeps cached (``placement._used_since``), and makes no program the unprofiled loop never makes."""
    codes = _CODES.get(fn)
    if codes is None or len(args) != len(codes):
        return False
    key = _entry_key(codes, *args)
    if key is None:
        return False
    dev = (args[0] if type(args[0]) is ArrayImpl else args[1])._device
    e = _lookup(key, dev)
    return e is not None and e.generation == config.generation


def _entry_key(codes, x, y=_NO_MEMO):
    """The key of the entry that serves a call of the function of ``codes`` (``_CODES``) on ``x`` (and ``y``),
    as ``_unary``, ``_binary`` and ``_reflected`` look it up; None where none does."""
    if y is _NO_MEMO:
        return (codes[0], x.aval) if type(x) is ArrayImpl else None
    tx, ty = type(x), type(y)
    if tx is ArrayImpl:
        if ty is ArrayImpl:
            return (codes[0], x.aval, ty) if y.aval == x.aval and y._device is x._device else None
        return (codes[0], x.aval, ty) if ty is float or ty is int else None
    if ty is ArrayImpl and codes[1] is not None and (tx is float or tx is int):
        return codes[1], y.aval, tx
    return None


def _replace(ns, old, new, codes):
    FAST_FIRST.add(old)
    _CODES[old] = codes
    functools.update_wrapper(new, old)
    for attr, value in list(vars(ns).items()):
        if value is old:  # the name and its aliases (``absolute``, ``arcsin``...)
            setattr(ns, attr, new)


def _namespace_binary(fn, code, rcode, raw=None, name=None):
    fast = _binary(code, fn, raw, name)
    rraw = None if raw is None else (lambda x, s: raw(s, x))
    rfast = _reflected(rcode, lambda x, s: fn(s, x), rraw) if rcode is not None else None

    def f(x1, x2, /):
        if type(x1) is ArrayImpl:
            return fast(x1, x2)
        if rfast is not None and type(x2) is ArrayImpl:
            t = type(x1)
            if t is float or t is int:
                return rfast(x2, x1)
        return fn(x1, x2)
    return f


def _namespace_unary(fn, code, name=None):
    return _unary(code, fn, name)  # (its method takes any operand: one Python call less than a wrapper)

