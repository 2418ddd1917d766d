"""``config.explain_cache_misses`` (JAX's ``jax_explain_cache_misses``): why ``jit`` traced or compiled again.

With the setting on, each trace of a jitted function (a miss of its trace cache) logs one WARNING through the
``fnarray.jit`` logger: the function (qualified name, file:line), the call site, and why: its first call (and
whether another function object defined at the same place was traced before: a function made anew in a loop),
a signature evicted from a full cache, or what differs from the most similar signature traced before (the
argument's path, ``args[0]['w']``, with its old and new type; a static value; the structure; the 64-bit
setting). A ``jit(shapeless=True)`` trace says whether its pattern of sizes is new or why renaming the pattern's
trace failed. A compile that reuses a trace (another device, a setting that changes lowering, other jit options)
logs why as well.

Only jit's miss path calls here, and only when the setting is on: the hit path reads nothing of it. The
wording is this module's own (JAX's ``pjit`` logs "TRACING CACHE MISS" with similar facts).
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import sys
import threading
import weakref

from fnarray.core.config import config
from fnarray.tree_util import DictKey, SequenceKey, keystr, tree_flatten_with_path

__all__ = ["logger", "Evictions", "explain_trace", "explain_compile"]

logger = logging.getLogger("fnarray.jit")

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fnarray's folder: frames here are not sites
_MOST = 4          # differences named in one message
_COMPARED = 64     # earlier signatures compared (the most recent)
_STRUCTURE = 10    # the weight of a difference of structure against one property of one leaf
_local = threading.local()   # the signature this thread just explained a trace for (its compile says nothing)
_sites_lock = threading.Lock()
#: (file, line, qualname) -> a weak reference to the last function of that code traced (``None``: not weakly held)
_SITES: collections.OrderedDict = collections.OrderedDict()
_NOT_GIVEN = "not given"


class Evictions:
    """The trace keys a function's trace cache evicted while the setting was on (the most recent
    ``config.jit_cache_size``); ``note`` is the cache's ``on_evict``."""

    __slots__ = ("keys", "lock")

    def __init__(self):
        self.keys: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()

    def note(self, key, _value) -> None:
        if not config.explain_cache_misses:
            return
        with self.lock:
            self.keys[key] = None
            while len(self.keys) > max(1, config.jit_cache_size):
                self.keys.popitem(last=False)

    def __contains__(self, key) -> bool:
        with self.lock:
            return key in self.keys


def _unwrap(fun):
    while isinstance(fun, functools.partial):
        fun = fun.func
    return getattr(fun, "__func__", fun)   # a bound method: its function


def _code(fun):
    f = _unwrap(fun)
    return getattr(f, "__code__", None) or getattr(getattr(type(f), "__call__", None), "__code__", None)


def _describe(fun) -> str:
    f = _unwrap(fun)
    name = getattr(f, "__qualname__", None) or type(f).__qualname__
    mod = getattr(f, "__module__", None)
    code = _code(fun)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "no Python source"
    return f"{mod + '.' if mod else ''}{name} ({where})"


def _call_site() -> str:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PKG):
        frame = frame.f_back
    return "unknown" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _internal(fun) -> bool:
    """fnarray's own functions (eager namespace programs, library jits): not the user's misses."""
    code = _code(fun)
    return code is not None and code.co_filename.startswith(_PKG)


def _seen_before(fun) -> "str | None":
    """Record ``fun``'s definition site; ``"same"`` where this very function was recorded before (its caches were
    dropped), ``"other"`` where another function of the same code was, else ``None``."""
    code = _code(fun)
    if code is None:
        return None
    f = _unwrap(fun)
    site = (code.co_filename, code.co_firstlineno, getattr(f, "__qualname__", ""))
    try:
        ref = weakref.ref(f)
    except TypeError:
        ref = None
    with _sites_lock:
        missing = object()
        before = _SITES.pop(site, missing)
        _SITES[site] = ref
        while len(_SITES) > max(1, config.jit_global_cache_size):
            _SITES.popitem(last=False)
    if before is missing:
        return None
    return "same" if before is not None and before() is f else "other"


def _aval(a) -> str:
    return a.str_short() + (" (weak: a Python scalar)" if a.weak_type else "")


def _entry(tree, k) -> str:
    if tree.type is dict or isinstance(k, str) and issubclass(tree.type, dict):
        return f"[{k!r}]"
    return f".{k}" if isinstance(k, str) else f"[{k}]"


def _arg_name(path, positions) -> str:
    """A dynamic leaf's path in ``(dyn_args, dyn_kwargs)`` as the call wrote it: ``args[2]['w']``, ``kwargs['b']``."""
    head, rest = path[0], path[2:]
    if isinstance(head, SequenceKey) and head.idx == 0 and isinstance(path[1], SequenceKey):
        i = path[1].idx
        return f"args[{positions[i] if i < len(positions) else i}]" + keystr(rest)
    if isinstance(path[1], DictKey):
        return f"kwargs[{path[1].key!r}]" + keystr(rest)
    return keystr(path)


def _positions(statics, n_dyn) -> list:
    """The call's position of each dynamic positional argument (static positions left out)."""
    static_at = {k for k, _ in statics if isinstance(k, int)}
    out, i = [], 0
    while len(out) < n_dyn:
        if i not in static_at:
            out.append(i)
        i += 1
    return out


def _tree_diff(t0, t1, where) -> "str | None":
    """The first node where two structures differ, in words; ``None`` where they are equal."""
    if t0 == t1:
        return None
    if t0.is_leaf() or t1.is_leaf() or t0.type is not t1.type or t0.entries() != t1.entries():
        return f"{where or 'the arguments'}: structure before {t0}, now {t1}"
    for k, c0, c1 in zip(t0.entries(), t0.children(), t1.children()):
        d = _tree_diff(c0, c1, where + _entry(t0, k))
        if d is not None:
            return d
    return f"{where or 'the arguments'}: structure before {t0}, now {t1}"


def _structure_diff(t0, t1, statics) -> str:
    """Where the structures of two calls' ``(dynamic args, dynamic kwargs)`` differ, in words."""
    (args0, kw0), (args1, kw1) = t0.children(), t1.children()
    if args0 == args1:
        return _tree_diff(kw0, kw1, "kwargs") or ""
    if args0.num_children != args1.num_children:
        return f"the number of (dynamic) positional arguments: before {args0.num_children}, now {args1.num_children}"
    positions = _positions(statics, args1.num_children)
    for j, (c0, c1) in enumerate(zip(args0.children(), args1.children())):
        d = _tree_diff(c0, c1, f"args[{positions[j]}]")
        if d is not None:
            return d
    return _tree_diff(args0, args1, "args") or ""


def _leaf_names(in_tree, statics) -> list:
    try:
        pairs, _ = tree_flatten_with_path(in_tree.unflatten(list(range(in_tree.num_leaves))))
        positions = _positions(statics, in_tree.children()[0].num_children)
        return [_arg_name(p, positions) for p, _ in pairs]
    except Exception:  # noqa: BLE001 (a custom node whose unflatten refuses ints: leaf numbers instead)
        return [f"leaf {i}" for i in range(in_tree.num_leaves)]


def _static_name(k) -> str:
    return f"static args[{k}]" if isinstance(k, int) else f"static kwargs[{k!r}]"


def _static(v) -> str:
    return _NOT_GIVEN if v is _NOT_GIVEN else repr(v)


def _score(old, new) -> int:
    """How many properties differ between two trace keys (a structure counts as ``_STRUCTURE``): ``_closest``'s
    measure, counted without building text."""
    if old[0] != new[0]:
        n = _STRUCTURE
    else:
        n = sum((a.shape != b.shape) + (a.dtype != b.dtype) + (a.weak_type != b.weak_type)
                for a, b in zip(old[1], new[1]) if a is not b)
    if old[2] != new[2]:
        s0, s1 = dict(old[2]), dict(new[2])
        n += sum(k not in s0 or k not in s1 or s0[k] != s1[k] for k in set(s0) | set(s1))
    return n + (old[3:] != new[3:])


def _differences(old, new, names) -> list:
    """What differs between two trace keys ``(in_tree, avals, statics, x64[, shardings])``, one phrase each."""
    out = []
    if old[0] != new[0]:
        out.append(_structure_diff(old[0], new[0], new[2]))
    else:
        for name, a, b in zip(names(), old[1], new[1]):
            if a != b:
                what = [w for w, x, y in (("shape", a.shape, b.shape), ("dtype", a.dtype, b.dtype),
                                          ("weak type", a.weak_type, b.weak_type)) if x != y]
                verb = "differ" if len(what) > 1 else "differs"
                out.append(f"{name}: {' and '.join(what)} {verb}: before {_aval(a)}, now {_aval(b)}")
    s0, s1 = dict(old[2]), dict(new[2])
    for k in sorted(set(s0) | set(s1), key=str):
        a, b = s0.get(k, _NOT_GIVEN), s1.get(k, _NOT_GIVEN)
        if (a is _NOT_GIVEN) != (b is _NOT_GIVEN) or type(a) is not type(b) or a != b:
            out.append(f"{_static_name(k)}: before {_static(a)}, now {_static(b)}")
    if old[3] != new[3]:
        out.append(f"configuration: enable_x64 before {old[3]}, now {new[3]}")
    if old[4:] != new[4:]:
        out.append("the arguments' shardings (shard_map inferred its in_specs from them)")
    return out


def _closest(traces, key) -> str:
    """The differences from the most similar earlier signature (fewest properties differ; the most recent among
    equally close ones)."""
    closest, score = None, None
    for old in reversed(traces.keys()[-_COMPARED:]):
        if old != key:
            n = _score(old, key)
            if closest is None or n < score:
                closest, score = old, n
    best = [] if closest is None else _differences(closest, key, lambda: _leaf_names(key[0], key[2]))
    if not best:
        return "the signature was traced before but its trace was not kept (it held tracers of an outer " \
               "transformation)"
    more = f"; and {len(best) - _MOST} more" if len(best) > _MOST else ""
    return "differs from the closest earlier signature in " + "; ".join(best[:_MOST]) + more


def _shapeless_reason(store, key, avals) -> str:
    why = store.why_not_derived(key, avals)
    return f" (shapeless=True: {why})" if why else ""


def _logged(explain):
    """``explain`` made safe for jit's call path: a failure to explain (a static value whose ``==`` raises...) is
    logged as such instead of failing the call."""
    @functools.wraps(explain)
    def run(fun, *args):
        if _internal(fun):
            return
        try:
            explain(fun, *args)
        except Exception as e:  # noqa: BLE001 (the call goes on; the log says what went wrong)
            logger.warning("jit cache miss: %s: no explanation (%s: %s)", _describe(fun), type(e).__name__, e)
    return run


@_logged
def explain_trace(fun, key, traces, evictions, store=None) -> None:
    """Log why jit traces ``fun`` at trace key ``key`` (the setting is on; called before the trace). ``traces``: the
    function's trace cache; ``evictions``: its ``Evictions``; ``store``: its ``shapeless_jit.Store`` or ``None``."""
    _local.key = (id(fun), key[:3])
    if key in evictions:
        n = config.jit_cache_size
        reason = (f"this signature was traced before and evicted: the function's cache was full "
                  f"(fnarray.config.jit_cache_size = {n} signatures)")
    elif not len(traces):
        seen = _seen_before(fun)
        reason = "first call" + {
            None: "",
            "same": (" since its earlier traces were dropped (fnarray keeps the caches of the "
                     f"{config.jit_global_cache_size} most recently used functions: fnarray.config."
                     "jit_global_cache_size) or not kept (a trace that captured an outer grad's or vmap's "
                     "tracers is not cached), or another thread is tracing its first signature now"),
            "other": (" of this function object, but another function defined at the same place was traced "
                      "before: a function made anew each time (a lambda, closure or partial inside a loop or "
                      "another function) has caches of its own; make it once, outside")}[seen]
    else:
        _seen_before(fun)
        reason = _closest(traces, key)
    if store is not None and len(traces):
        reason += _shapeless_reason(store, key, key[1])
    logger.warning("jit cache miss: tracing %s for the call at %s: %s", _describe(fun), _call_site(), reason)


@_logged
def explain_compile(fun, ckey, by_ckey, derived) -> None:
    """Log why jit compiles ``fun``'s trace for ``ckey = (key, device, lowering configuration)`` where the trace
    was reused (a trace this thread just explained says nothing more). ``by_ckey``: the executables of these jit
    options by ``ckey``; ``derived``: the trace is a shapeless pattern's, renamed to new sizes."""
    if getattr(_local, "key", None) == (id(fun), ckey[0][:3]):
        _local.key = None
        return
    others = [c for c in list(by_ckey) if c[0] == ckey[0] and c != ckey]
    if others:
        old = others[-1]
        parts = [f"device: before {old[1]}, now {ckey[1]}"] if old[1] is not ckey[1] else []
        names = ("fallback", "debug_nans", "debug_infs", "enable_x64")
        parts += [f"setting {n}: before {a!r}, now {b!r}" for n, a, b in zip(names, old[2], ckey[2]) if a != b]
        reason = "its trace is reused; it was compiled before for another " + ("; ".join(parts) or "target")
    elif derived:
        reason = "shapeless=True renamed the trace of this pattern of sizes to new sizes; compiled for them"
    else:
        reason = (f"the trace was reused, but no executable of it for {ckey[1]} is kept: the first call with "
                  "these jit options (static_argnums, donate_argnums, device), or its executable was evicted "
                  f"(fnarray.config.jit_cache_size = {config.jit_cache_size} per function, jit_global_cache_size"
                  f" = {config.jit_global_cache_size} over all)")
    logger.warning("jit cache miss: compiling %s for the call at %s: %s", _describe(fun), _call_site(), reason)
