"""``jit``: trace once per input signature, lower for a device, run the executable.

Staged as JAX's ahead-of-time API: ``jit(f).trace(*args)`` -> ``Traced``
(``.program``), ``.lower(*args)`` -> ``Lowered`` (``.as_text()``,
``.compile()``), ``.compile()`` -> ``Compiled``. The cache key is the input
pytree structure, every input's ``ShapedArray`` (with ``weak_type``), the
static argument values, the target device and the configuration that changes
lowering. Inside another transformation, a jitted call is one ``call``
equation holding the traced program, so ``grad(jit(f))`` and ``vmap(jit(f))``
work on every backend. ``jit(f, shapeless=True)`` lets one trace serve the calls
that differ from it only in their sizes (``shapeless_jit``: MLX's contract).

Caches (docs/design.md, "State and memory"): as JAX, the caches belong to the function,
not to the wrapper: ``jit(f)`` made twice, or ``jit(f)(x)`` written in a loop, traces
``f`` once per signature. ``_FUNCTIONS`` maps a function, held weakly and compared
as JAX compares it (by ``==``: a bound method is its function and its object), to
its ``_FunctionCache``: the traced programs (an LRU of ``config.jit_cache_size``;
a trace does not depend on jit's options, whose effect is already in its key) and,
per set of options (static arguments, donation, device), an ``_Executables``
(an LRU of executables of the same size, the fast table and the hot record).
Entries die with their function; ``_FUNCTIONS`` itself is an LRU of
``config.jit_global_cache_size`` functions; a callable that cannot be held weakly
or hashed gets caches of its own wrapper, as before. A global LRU of
``config.jit_global_cache_size`` executables over all functions holds only weak
references and, when full, evicts the least recently used executable from its
function. Lookups are GIL-atomic dictionary operations (no lock on the call
path); a miss traces (or compiles) in one thread per key while the others that
missed the same key wait for it (``_once``), so a function first called from 8
threads at once traces once, as in JAX.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import threading
import weakref

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, tracing
from fnarray.core.collectives import axis_frame, free_axis_names, lift_for_program
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.errors import check_callable, int_tuple
from fnarray.core.ir import Program
from fnarray.core.passes import consts_as_inputs, cse
from fnarray.core.shaped import ShapeDtypeStruct, ShapedArray
from fnarray.core.size_free import size_free_key
from fnarray.devices import nan_check
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.partition import at_sizes, compile_program
from fnarray.devices.lookup import DEFAULT_NOW, current_default
from fnarray.devices.placement import default_device, parse_device, placement_device
from fnarray.transforms import cache_miss, disable_jit, shapeless_jit
from fnarray.transforms.signature_diff import describe_mismatch

__all__ = ["jit", "make_ir", "Traced", "Lowered", "Compiled", "leaf_aval"]

_TRACE_STATE = tracing._state  # this thread's trace levels (a threading.local)
_MISS = shapeless_jit.MISS  # a tier of the call path does not apply: the next one decides


def _operand(x):
    """A NumPy array argument of a jitted call made while tracing, as the call equation's operand (an array)."""
    if isinstance(x, np.ndarray):
        from fnarray.core.avals import asarray
        return asarray(x)
    return x


def _leaf_shardings(leaves) -> tuple:
    from fnarray.transforms.shard_map import leaf_shardings
    return leaf_shardings(leaves)


def leaf_aval(x, where="argument") -> ShapedArray:
    """The abstract value of an argument leaf (array, tracer, NumPy value or Python scalar)."""
    if isinstance(x, ArrayImpl) or isinstance(x, tracing.Tracer):
        return x.aval
    if isinstance(x, (bool, int, float, complex)):
        d, w = dtypes.dtype_of_scalar(x)
        if w and dtypes.is_int(d) and not dtypes.fits_weak_int(x):
            wider = ("an array of a wider dtype (fnarray.numpy.asarray(x, dtype='int64') with "
                     "fnarray.config.update('enable_x64', True)), " if d == dtypes.int32 else "")
            raise OverflowError(f"{where} is the Python int {x}, which does not fit {d.name} (a Python int "
                                f"argument is a weak {d.name}, as in JAX); pass it as {wider}a float, or mark it "
                                "static (static_argnums) if it is configuration")
        return ShapedArray((), d, w)
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(np.shape(x), dtypes.canonicalize(x.dtype), False)
    if _is_foreign_array(x):
        return leaf_aval(foreign_to_numpy(x), where)
    if isinstance(x, ShapeDtypeStruct):   # an abstract argument (eval_shape, make_jaxpr, trace/lower)
        return ShapedArray(x.shape, dtypes.canonicalize(x.dtype), x.weak_type)
    raise TypeError(f"{where} is a {type(x).__name__}, which is not an array; jitted functions take "
                    "arrays (fnarray's, NumPy's, or another library's with __array__ or __dlpack__), scalars "
                    "and pytrees of them. Mark it static with static_argnums or static_argnames if it is "
                    "configuration.")


def _is_foreign_array(x) -> bool:
    t = type(x)
    return not isinstance(x, (str, bytes)) and (hasattr(t, "__array__") or hasattr(t, "__dlpack__"))


def foreign_to_numpy(x) -> np.ndarray:
    """Another library's array (a ``jax.Array``, a CPU ``torch.Tensor``...) as a NumPy array, as ``jax.numpy``
    takes NumPy arrays: by ``__array__`` (zero-copy where the library allows), else by DLPack."""
    try:
        return np.asarray(x)
    except Exception as e:
        if not hasattr(type(x), "__dlpack__"):
            raise TypeError(f"a {type(x).__module__}.{type(x).__qualname__} could not be read as an array "
                            f"({e}); convert it to a NumPy array first") from e
        return np.from_dlpack(x)


def _hashable_static(v, key):
    """``v``, checked hashable; ``key``: its position (int) or keyword (str), named only in the error (a call with
    a static keyword builds no text)."""
    try:
        hash(v)
    except TypeError:
        name = f"#{key}" if isinstance(key, int) else repr(key)
        raise TypeError(f"static argument {name} has the unhashable type {type(v).__name__}; static "
                        "arguments are part of the cache key and must be hashable (use a tuple "
                        "instead of a list, or pass the value as a regular argument)") from None
    return v


class _Entry:
    """A traced program (``exe is None``) or an executable for one device: the cached value of jit."""

    __slots__ = ("program", "consts", "out_tree", "out_avals", "device", "exe", "const_bufs", "generation",
                 "owner", "ckey", "gid", "axis_names", "hot", "__weakref__")

    def __init__(self, program, consts, out_tree):
        self.program, self.consts, self.out_tree = program, consts, out_tree
        self.out_avals = program.out_avals
        self.device = self.exe = self.const_bufs = self.generation = None
        self.owner = self.ckey = self.gid = self.axis_names = self.hot = None


class _SizeFreeKey:
    """The key of ``_Executables.sizes`` (a program's ``size_free_key``, its device, configuration and donation),
    hashed once: the decode step's key has ~280 nested elements, ~3 us a hash and ~3.5 us a comparison, and a
    tuple hashes itself anew at each lookup (the LRU's lookup and its touch: two hashes and two comparisons a new
    length; issue 28). Equal where the keys are."""

    __slots__ = ("key", "_hash")

    def __init__(self, *key):
        self.key = key
        self._hash = hash(key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (type(other) is _SizeFreeKey and self._hash == other._hash and self.key == other.key)


def _per_function_size() -> int:
    return config.jit_cache_size


def _global_size() -> int:
    return config.jit_global_cache_size


def _unfast(fast, ckey, ex, hot=None):
    """Drop ``ex`` from the fast table (which holds a subset of the executables) and from the hot records
    (``hot``: ``[last call's record, {avals: record}]``, ``_Executables``)."""
    if fast.get(ckey[0]) is ex:
        fast.pop(ckey[0], None)
    if hot is not None:
        h = hot[0]
        if h is not None and h.gid == ex.gid:
            hot[0] = None
        by_avals = hot[1]
        h = by_avals.get(ckey[0][1])
        if h is not None and h.gid == ex.gid:
            by_avals.pop(ckey[0][1], None)


def _unindex(by_ckey, fast, hot, gid, ex):
    """The function's LRU evicted ``ex``: drop it from the lookup tables too."""
    if by_ckey.get(ex.ckey) is ex:
        by_ckey.pop(ex.ckey, None)
    _unfast(fast, ex.ckey, ex, hot)


class _Hot:
    """The last call's executable with what a repeated call needs, checked without building a key.

    Made for calls whose leaves are all arrays on the executable's device and whose keyword arguments, if any,
    are static. A call hits when its static arguments equal the record's (same type, ``==``), its dynamic
    positional arguments read by ``read`` (``None``: every one an array) to arrays of exactly
    ``in_avals`` on ``device``, and the configuration is unchanged. ``donated``: the leaf positions deleted
    after the call (``donate_argnums``).
    """

    __slots__ = ("gid", "ckey", "tree", "read", "n", "in_avals", "device", "generation", "const_bufs",
                 "committed", "call", "star", "recover", "entry", "out_avals", "out_tree", "single", "lean", "one",
                 "nargs", "static_pos", "static_kw", "dyn_pos", "donated", "flat_out")

    def __init__(self, ex, tree, in_avals, device, committed, nargs=None, statics=(), donated=()):
        # No reference to ``ex`` itself (which holds this record): an evicted executable is freed at once.
        self.gid, self.ckey = ex.gid, ex.ckey
        self.tree, self.n, self.in_avals, self.device = tree, len(in_avals), in_avals, device
        self.read = None if tree is None else _reader(tree)  # the positional arguments' leaves
        self.generation = config.generation
        self.const_bufs = tuple(ex.const_bufs)
        self.committed = committed
        # The backend's direct entry (jax.jit's callable, the generated NumPy function) where the executable
        # offers one with its error translation beside it (``star``); else the executable itself.
        self.call, self.recover, self.star = _direct_entry(ex.exe)
        self.entry = getattr(ex.exe, "call_args", None)   # the whole direct entry (``direct_entry``)
        self.out_avals = tuple(ex.out_avals)
        self.out_tree = ex.out_tree
        self.single = ex.out_tree.num_nodes == 1 and ex.out_tree.num_leaves == 1  # the output is one array
        # the output is a plain tuple of arrays (a decode step's ``(cache, out)``): made as a tuple, no unflatten
        t = ex.out_tree
        self.flat_out = (not self.single and t.type is tuple and t.num_nodes == t.num_leaves + 1
                         and t.num_children == t.num_leaves)
        # static arguments: by position (the call's positional count ``nargs`` is then fixed) and by keyword
        # (none, the common call: no generators made; each new length of a growing loop makes a record)
        self.static_pos = tuple((k, v) for k, v in statics if isinstance(k, int)) if statics else ()
        self.static_kw = tuple((k, v) for k, v in statics if isinstance(k, str)) if statics else ()
        self.nargs = nargs
        self.dyn_pos = None
        if self.static_pos:
            static_at = {k for k, _ in self.static_pos}
            self.dyn_pos = tuple(i for i in range(nargs) if i not in static_at)
        self.donated = tuple(donated)
        # positional arrays in, a direct entry, no constants or donation, arrays or a tuple of them out: run by
        # ``__call__`` itself
        self.lean = tree is None and self.star and (self.single or self.flat_out) and not self.const_bufs and \
            not statics and not self.donated
        self.one = self.lean and self.n == 1 and self.single   # one array in, one out


def _direct_entry(exe):
    """``(call, recover, star)`` for a hot record of executable ``exe``. Where ``exe`` has a direct entry
    (``call_args(*bufs)``, its errors translated by ``reraise``; ``star`` true): ``call`` is it, or, where the
    backend also offers it in two parts, the part without its Python frame (``call_direct``: jax.jit's callable,
    whose softmax's max keeps a fallback beside it), and ``recover(e, bufs)`` the outputs of ``call``'s error ``e``
    (``call_fallback``: the backend's second try) or raises it translated. Else ``(exe, None, False)``: ``exe(bufs)``
    translates its own errors."""
    call, reraise = getattr(exe, "call_args", None), getattr(exe, "reraise", None)
    if call is None or reraise is None:
        return exe, None, False
    direct = getattr(exe, "call_direct", None)
    fallback = getattr(exe, "call_fallback", None) if direct is not None else None
    if fallback is None:
        def recover(e, bufs):
            reraise(e)
        return call, recover, True

    def recover_by_fallback(e, bufs):
        try:
            return fallback(e, bufs)
        except Exception as again:  # noqa: BLE001  (``e`` itself where the fallback does not apply)
            reraise(again)
    return direct, recover_by_fallback, True


def _frozen(tree) -> bool:
    """Whether every node of ``tree`` is a tuple, a named tuple, ``None`` or an ``fnarray.nn.Module``: containers
    that cannot change after they are made, so that one object always has the same leaves."""
    if tree.is_leaf():
        return True
    t = tree.type
    if not (t is tuple or t is type(None) or getattr(t, "_fa_is_module", False)
            or (issubclass(t, tuple) and hasattr(t, "_fields"))):
        return False
    return all(_frozen(c) for c in tree.children())


#: The attribute under which a module keeps its leaves for jit's hot path: ``(treedef, leaves)``.
LEAVES_ATTR = "_fa_leaves"


def _reader(tree):
    """How the hot path reads the leaves of an argument of structure ``tree``: ``None`` for an array leaf, else
    ``read(x) -> leaves``, ``None`` where ``x`` does not have that structure.

    A tuple is read element by element. A module whose whole structure is immutable (``_frozen``: a model, a
    ``KVCache``) keeps its leaves in ``LEAVES_ATTR`` at its first read: the same object passed again (a model
    from step to step) costs one attribute read instead of a flatten (~0.4 us per module: 13 us a call for the ~30
    modules of examples/llm.py's model at benchmarks/call_path.py's size). Any other structure is flattened along
    ``tree`` (``flatten_up_to``)."""
    if tree.is_leaf():
        return None
    t = tree.type
    if t is tuple:
        subs = tuple(_reader(c) for c in tree.children())
        n = len(subs)

        def read_tuple(x):
            if type(x) is not tuple or len(x) != n:
                return None
            out = []
            for c, r in zip(x, subs):
                if r is None:
                    out.append(c)
                    continue
                got = r(c)
                if got is None:
                    return None
                out.extend(got)
            return out
        return read_tuple

    def read_other(x):
        try:
            return tree.flatten_up_to(x)
        except (ValueError, TypeError):
            return None
    if getattr(t, "_fa_is_module", False) and _frozen(tree):
        def read_module(x):
            d = getattr(x, "__dict__", None) if type(x) is t else None
            if d is None:
                return read_other(x)
            kept = d.get(LEAVES_ATTR)
            if kept is not None and (kept[0] is tree or kept[0] == tree):
                return kept[1]
            try:
                leaves = tuple(tree.flatten_up_to(x))
            except (ValueError, TypeError):
                return None
            d[LEAVES_ATTR] = (tree, leaves)
            return leaves
        return read_module
    return read_other


def _evict_from_owner(gid, ref):
    """The global LRU dropped ``gid``: remove that executable from its jitted function's caches."""
    ex = ref()
    if ex is None:
        return
    j = ex.owner() if ex.owner is not None else None
    if j is not None:
        j._forget(ex)


# Executables of every jitted function, least recently used first: id -> weakref to the _Entry. Only weak
# references, so an executable lives exactly as long as its function keeps it; a dead one is dropped.
# The ids are ints (their hash costs nothing), so the call path's LRU touches stay cheap.
_GLOBAL = LRUCache(_global_size, on_evict=_evict_from_owner)
_GLOBAL_D = _GLOBAL._d          # the call path touches it directly (one GIL-atomic move_to_end)
_GIDS = itertools.count()
_DEAD: collections.deque = collections.deque()  # ids of collected executables, removed at the next insert


def _died(gid):
    # A weakref callback may run inside any code (garbage collection): only an atomic append here.
    _DEAD.append(gid)


def _register_global(ex) -> None:
    while _DEAD:
        try:
            _GLOBAL.pop(_DEAD.popleft())
        except IndexError:
            break
    gid = ex.gid
    _GLOBAL.put(gid, weakref.ref(ex, lambda _, gid=gid: _died(gid)))


def jit_cache_info():
    """Sizes of jit's global caches: ``{"global": (executables, bound), "functions": (entries, bound)}``."""
    _purge_functions()
    return {"global": (len(_GLOBAL), config.jit_global_cache_size),
            "functions": (len(_FUNCTIONS), config.jit_global_cache_size)}


# ---------------------------------------------------------------------- one trace or compile per key at a time

_WAIT_S = 10.0  # a waiter builds on its own after this long (a build that waits on the waiter never hangs)


class _Building:
    """A trace or compile in progress in ``thread``; ``done`` is held until it ends (well or not).

    A plain lock, taken here and released by the builder (``threading.Event`` made a condition and a lock, ~2 us
    of each new shape's call, twice: issue 28); a waiter takes it and gives it back at once (``wait``)."""

    __slots__ = ("done", "thread")

    def __init__(self, thread):
        self.done, self.thread = threading.Lock(), thread
        self.done.acquire()

    def wait(self, timeout) -> bool:
        """Whether the build ended within ``timeout`` seconds."""
        if not self.done.acquire(timeout=timeout):
            return False
        self.done.release()
        return True


def _once(lock, building, key, lookup, build):
    """``lookup()`` if it finds a value, else ``build()`` (which caches what it built), run by one thread per
    ``key`` at a time: the threads that miss together wait for the first one's value instead of building
    their own. A build that fails, or whose value is not cached, leaves the waiters to build in turn; the
    builder's own thread re-entering (a recursive function) builds again; a wait longer than ``_WAIT_S``
    builds independently (never a hang, even when the build waits on a waiter)."""
    me = threading.get_ident()
    while True:
        with lock:
            value = lookup()
            if value is not None:
                return value
            b = building.get(key)
            if b is None:
                b = building[key] = _Building(me)
                break
        if b.thread == me or not b.wait(_WAIT_S):
            return build()
    try:
        return build()
    finally:
        with lock:
            if building.get(key) is b:
                del building[key]
        b.done.release()


# ---------------------------------------------------------------------- the caches of one function

class _Executables:
    """One function's executables for one set of jit options, shared by every ``jit`` of it with those options.

    ``compiled``: an LRU of ``config.jit_cache_size`` executables keyed by their int id; ``by_ckey``: the same
    looked up by (trace key, device, configuration); ``fast``: trace key -> one of them, for calls on its
    device with the current configuration; ``hot``: ``[_Hot or None, {avals: _Hot}]``, the last call's
    executable, and the records of calls of positional arrays only by their avals (a loop whose shapes take
    turns, as a decode loop's growing cache: each call a hit without a key).
    """

    __slots__ = ("by_ckey", "fast", "hot", "compiled", "compiled_d", "lock", "building", "sizes", "__weakref__")

    def __init__(self):
        self.by_ckey: dict = {}
        self.fast: dict = {}
        self.hot = [None, {}]
        self.compiled = LRUCache(_per_function_size,
                                 on_evict=functools.partial(_unindex, self.by_ckey, self.fast, self.hot))
        self.compiled_d = self.compiled._d
        self.lock = threading.Lock()
        self.building: dict = {}  # ckey -> _Building
        # _SizeFreeKey (program key up to sizes, device, configuration, donation) -> (that key, an executable
        # that serves every size) (``Jitted._sized``; the ``config.jit_cache_size`` most recently used)
        self.sizes = LRUCache(_per_function_size)

    def _forget(self, ex):
        """Drop executable ``ex`` (the global LRU evicted it)."""
        if self.compiled.pop(ex.gid) is not None:
            _unindex(self.by_ckey, self.fast, self.hot, ex.gid, ex)


class _FunctionCache:
    """What jit keeps for one function: its traces (shared by all options: a trace's key holds the static
    values and the structure, which is all the options change), its signature, and an ``_Executables`` per
    options. Holds no reference to the function, so that an entry of ``_FUNCTIONS`` dies with it."""

    __slots__ = ("traces", "signature", "options", "lock", "building", "spec_dependent", "evictions", "__weakref__")

    _NO_SIGNATURE = object()

    def __init__(self):
        # (treedef, avals, statics) -> _Entry (device-independent); the keys it evicts are noted while
        # config.explain_cache_misses is on
        self.evictions = cache_miss.Evictions()
        self.traces = LRUCache(_per_function_size, on_evict=self.evictions.note)
        self.signature = self._NO_SIGNATURE
        self.options: dict = {}   # (static_argnums, static_argnames, donate_argnums, device) -> _Executables
        self.lock = threading.Lock()
        self.building: dict = {}  # trace key -> _Building
        # set once a trace inferred shard_map in_specs from its arguments' shardings: from then on the traces and
        # executables are keyed by the arguments' shardings too, and the fast and hot paths are off
        self.spec_dependent = False

    def signature_of(self, fun):
        sig = self.signature
        if sig is self._NO_SIGNATURE:
            try:
                sig = inspect.signature(fun)
            except (TypeError, ValueError):
                sig = None
            self.signature = sig
        return sig

    def executables(self, options) -> _Executables:
        ex = self.options.get(options)
        if ex is None:
            with self.lock:
                ex = self.options.setdefault(options, _Executables())
        return ex


# Functions -> their _FunctionCache, keyed by a weak reference (equal when the functions are equal, as JAX's
# weakref_lru_cache keys jit), least recently used evicted beyond config.jit_global_cache_size.
_FUNCTIONS = LRUCache(_global_size)
_FUNCTIONS_DEAD: collections.deque = collections.deque()  # keys of collected functions, to drop


def _purge_functions():
    while _FUNCTIONS_DEAD:
        try:
            ref = _FUNCTIONS_DEAD.popleft()
        except IndexError:
            break
        _FUNCTIONS.pop(ref)


def _function_died(ref):
    # A weakref callback may run inside any code, the cache's own lock held by this very thread included:
    # drop the entry now only when the lock is free, else at the next lookup.
    _FUNCTIONS_DEAD.append(ref)
    if _FUNCTIONS._lock.acquire(blocking=False):
        _FUNCTIONS._lock.release()
        _purge_functions()


def function_cache(fun) -> _FunctionCache:
    """``fun``'s caches, shared by every ``jit`` of ``fun`` (or of a function equal to it) while it lives; a
    private one for callables that cannot be held weakly, hashed or compared."""
    if _FUNCTIONS_DEAD:
        _purge_functions()
    try:
        hit = _FUNCTIONS.get(weakref.ref(fun))
        if hit is None:
            hit = _FUNCTIONS.put(weakref.ref(fun, _function_died), _FunctionCache())
    except Exception:  # noqa: BLE001 (not weakly referenceable, unhashable, or an __eq__ that raises)
        return _FunctionCache()
    return hit


def _hot_dynamic_args(hot, args, kwargs):
    """``args`` without its static ones when they, and the keyword arguments, equal the hot record's;
    ``_MISS`` otherwise (also where a static value's own ``__eq__`` raises: the general path then decides)."""
    try:
        if kwargs or hot.static_kw:
            if kwargs is None or len(kwargs) != len(hot.static_kw):
                return _MISS
            for k, v in hot.static_kw:
                a = kwargs.get(k, _MISS)
                if a is not v and not (type(a) is type(v) and a == v):
                    return _MISS
        if hot.static_pos:
            if len(args) != hot.nargs:
                return _MISS
            for i, v in hot.static_pos:
                a = args[i]
                if a is not v and not (type(a) is type(v) and a == v):
                    return _MISS
            return tuple([args[i] for i in hot.dyn_pos])
    except Exception:  # noqa: BLE001
        return _MISS
    return args


class Jitted:
    """A function compiled by ``fnarray.jit``. Its caches are ``fun``'s (``function_cache``), shared with every
    other ``Jitted`` of ``fun``; ``shared=False`` gives it caches of its own (for functions made per call, such
    as ``eager_jit``'s programs, which would only crowd the table of functions)."""

    def __init__(self, fun, static_argnums=(), static_argnames=(), donate_argnums=(), device=None, shared=True,
                 shapeless=False):
        check_callable(fun, "jit")
        shapeless = shapeless_jit.check_flag(shapeless)
        self.fun = fun
        functools.update_wrapper(self, fun, updated=())  # never copy fun.__dict__ over ours
        cache = function_cache(fun) if shared else _FunctionCache()
        self._sig = cache.signature_of(fun)
        static_argnums = int_tuple(static_argnums, "jit", "static_argnums",
                                   str_hint="; name parameters with static_argnames=")
        donate_argnums = int_tuple(donate_argnums, "jit", "donate_argnums")
        static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        params = list(self._sig.parameters) if self._sig else []
        self._check_argnums(static_argnums, static_argnames, donate_argnums, params)
        nums, names = set(static_argnums), set(static_argnames)
        for n in static_argnames:  # as JAX: a name also makes its position static, and the reverse
            if n in params:
                nums.add(params.index(n))
        for i in static_argnums:
            if 0 <= i < len(params):
                names.add(params[i])
        self.static_argnums = tuple(sorted(nums))
        self.static_argnames = tuple(sorted(names))
        self.donate_argnums = donate_argnums
        self.device = parse_device(device) if device is not None else None
        # The function's caches (module docstring), shared with every jit of it; the attributes below are
        # their tables, so the call path reads them as plain attributes.
        self._cache = cache
        options = (self.static_argnums, self.static_argnames, self.donate_argnums, self.device)
        tables = self._tables = cache.executables(options + ("shapeless",) if shapeless else options)
        # ``shapeless=True``: traces by their pattern of sizes (``shapeless_jit``), else None
        self._shapeless = shapeless_jit.store(tables) if shapeless else None
        self._traces = cache.traces
        self._by_ckey, self._fast, self._hot = tables.by_ckey, tables.fast, tables.hot
        self._compiled = tables.compiled
        self._compiled_d = tables.compiled_d            # the call path touches it directly (GIL-atomic)
        self._last_tree = None      # the input structure of the last call without kwargs or statics

    def _check_argnums(self, static_argnums, static_argnames, donate_argnums, params):
        """As jax.jit: argument numbers and names that cannot refer to a parameter are errors."""
        if self._sig is None:
            return
        kinds = [p.kind for p in self._sig.parameters.values()]
        if inspect.Parameter.VAR_POSITIONAL in kinds:
            return
        n_pos = sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                    for k in kinds)
        name = getattr(self.fun, "__name__", "fun")
        for what, nums in (("static_argnums", static_argnums), ("donate_argnums", donate_argnums)):
            for i in nums:
                if not -n_pos <= i < n_pos:
                    raise ValueError(f"jit: {what} {i} does not refer to a positional parameter of {name}, "
                                     f"which has {n_pos} ({', '.join(params[:n_pos]) or 'none'})")
        if inspect.Parameter.VAR_KEYWORD not in kinds:
            for n in static_argnames:
                if n not in params:
                    raise ValueError(f"jit: static_argnames {n!r} is not a parameter of {name}; its parameters "
                                     f"are {', '.join(params) or 'none'}")
        both = {i % n_pos for i in static_argnums} & {i % n_pos for i in donate_argnums} if n_pos else set()
        if both:
            raise ValueError(f"jit: argument {sorted(both)[0]} of {name} is both static and donated; a static "
                             "argument is a hashable Python value, not a buffer to donate")

    # ------------------------------------------------------------------ argument handling
    def _split(self, args, kwargs):
        nargs = len(args)
        statics = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self.static_argnums or i - nargs in self.static_argnums:
                statics.append((i, _hashable_static(a, i)))
            else:
                dyn_args.append(a)
        dyn_kwargs = {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                statics.append((k, _hashable_static(v, k)))
            else:
                dyn_kwargs[k] = v
        return tuple(statics), tuple(dyn_args), dyn_kwargs

    def _flat_fun(self, statics, in_tree, nargs_dyn):
        fun = self.fun
        static_pos = {k: v for k, v in statics if isinstance(k, int)}
        static_kw = {k: v for k, v in statics if isinstance(k, str)}
        out_store = []

        def flat(*leaves):
            dyn_args, dyn_kwargs = tree_util.tree_unflatten(in_tree, leaves)
            it = iter(dyn_args)
            n = len(dyn_args) + len(static_pos)
            full = [static_pos[i] if i in static_pos else next(it) for i in range(n)]
            out = fun(*full, **dyn_kwargs, **static_kw)
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_store.append(out_tree)
            return out_leaves
        return flat, out_store

    def _trace(self, statics, leaves, in_tree, avals):
        key = (in_tree, avals, statics, config.enable_x64)  # x64 changes what tracing makes (np.float64 values)
        if self._cache.spec_dependent:
            key += (_leaf_shardings(leaves),)
        entry = self._traces.get(key)
        if entry is None and self._shapeless is not None:   # a trace of these sizes' pattern, renamed
            entry = self._shapeless.derived(key, avals, _Entry)
        if entry is not None:
            return entry

        def build():
            from fnarray.transforms.shard_map import traced_arguments
            if config.explain_cache_misses:
                cache_miss.explain_trace(self.fun, key, self._traces, self._cache.evictions, self._shapeless)
            flat, out_store = self._flat_fun(statics, in_tree, len(leaves))
            frames = []

            def traced(*tracers):  # shard_map may infer in_specs from what the argument tracers stand for
                with traced_arguments(tracers, leaves) as frame:
                    frames.append(frame)
                    return flat(*tracers)
            prog, consts = trace_to_program(traced, avals, debug_name=getattr(self.fun, "__name__", "fun"))
            entry = _Entry(prog, consts, out_store[0])
            k = key
            if frames[0].used and not self._cache.spec_dependent:
                self._became_spec_dependent()
                k = key + (_leaf_shardings(leaves),)
            if not (consts and any(isinstance(c, tracing.Tracer) for c in consts)):  # (no generator for none)
                entry = self._traces.put(k, entry)
            return entry
        cache = self._cache
        entry = _once(cache.lock, cache.building, key, lambda: self._traces.get(key), build)
        if self._shapeless is not None:
            self._shapeless.remember(key, avals, entry)
        return entry

    def _became_spec_dependent(self):
        """A trace read its arguments' shardings (shard_map inferred in_specs): key by them from now on."""
        cache = self._cache
        with cache.lock:
            cache.spec_dependent = True
            for tables in cache.options.values():
                tables.fast.clear()
                tables.hot[0] = None
                tables.hot[1].clear()

    def _prepare(self, args, kwargs):
        statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        avals = tuple(leaf_aval(x, f"argument {i} of {getattr(self.fun, '__name__', 'fun')}")
                      for i, x in enumerate(leaves))
        return statics, leaves, in_tree, avals

    def _target_device(self, leaves):
        arrays = [x for x in leaves if isinstance(x, ArrayImpl)]
        if self.device is not None:
            for a in arrays:
                if a.committed and a.device != self.device:
                    raise ValueError(f"jit(device={self.device}) got an argument committed to {a.device}; "
                                     f"move it with fnarray.device_put(x, {str(self.device)!r}) first")
            return self.device
        return placement_device(arrays, f"jit({getattr(self.fun, '__name__', 'fun')})") if arrays \
            else default_device()

    def _donated_positions(self, args):
        """Leaf positions (among the dynamic leaves) of the donated positional arguments."""
        if not self.donate_argnums:
            return ()
        donate = {i % len(args) for i in self.donate_argnums if -len(args) <= i < len(args)}
        pos, off = [], 0
        for i, a in enumerate(args):
            if i in self.static_argnums:
                continue
            n = len(tree_util.tree_leaves(a))
            if i in donate:
                pos.extend(range(off, off + n))
            off += n
        return tuple(pos)

    def _executable(self, entry, key, device, donated=()):
        ckey = (key, device, config.lowering_key())
        hit = self._by_ckey.get(ckey)
        if hit is None:
            tables = self._tables
            return _once(tables.lock, tables.building, ckey, lambda: self._by_ckey.get(ckey),
                         lambda: self._compile(entry, key, ckey, device, donated))
        self._compiled.touch(hit.gid)
        _GLOBAL.touch(hit.gid)
        return hit

    def _compile(self, entry, key, ckey, device, donated):
        """Compile ``entry`` for ``device`` and insert it in the tables (outside the tables' lock: compiling
        may take long; ``_once`` lets one thread per key do it)."""
        if config.explain_cache_misses:
            cache_miss.explain_compile(self.fun, ckey, self._by_ckey, self._shapeless is not None and
                                       entry in self._shapeless.sources)
        hit = _Entry(entry.program, entry.consts, entry.out_tree)
        hit.device = device
        n = len(entry.consts)
        debugging = config.debug_nans or config.debug_infs
        if debugging:
            donated = ()  # the inputs are needed again to re-run the call op by op
            hit.exe = compile_program(entry.program, device, donate=(), consts=entry.consts)
            hit.exe = nan_check.wrap_executable(hit.exe, self, key, entry.program, device)
        else:
            hit.exe = self._sized(entry.program, ckey, device, tuple(n + p for p in donated), entry.consts)
        hit.const_bufs = [_to(c, device) for c in entry.consts]
        hit.owner, hit.ckey, hit.gid = weakref.ref(self._tables), ckey, next(_GIDS)
        with self._tables.lock:
            cached = self._by_ckey.setdefault(ckey, hit)
        if cached is hit:
            self._compiled.put(hit.gid, hit)  # may evict (and so unindex) the least recently used
            _register_global(hit)
            if hit.gid not in self._compiled_d or hit.gid not in _GLOBAL_D:  # a bound of 0: keep nothing
                self._compiled.pop(hit.gid)
                _unindex(self._by_ckey, self._fast, self._hot, hit.gid, hit)
        return cached

    def _sized(self, program, ckey, device, donate, consts):
        """``compile_program``'s executable for ``program``, or the one of an earlier program equal to it up to its
        sizes (``core.size_free``) where that one serves every size (``shape_free``: a decode step's program at
        each new cache length on mlx:0, one executable, no lowering; issue 28)."""
        sizes = self._tables.sizes
        skey = None
        if len(sizes):  # (keyed only once an executable serves every size: nothing to pay on other backends)
            skey = _SizeFreeKey(size_free_key(program), device, ckey[2], donate)
            hit = sizes.peek(skey) if skey.key[0] is not None else None
            if hit is not None:
                sizes.touch(hit[0])  # (by the stored key itself: found by identity, not compared again)
                return at_sizes(hit[1], program, device)
        exe = compile_program(program, device, donate=donate, consts=consts)
        if getattr(exe, "shape_free", False):
            if skey is None:
                skey = _SizeFreeKey(size_free_key(program), device, ckey[2], donate)
            if skey.key[0] is not None:
                sizes.put(skey, (skey, exe))   # (a thread that compiled the same key first keeps its own)
        return exe

    def cache_info(self):
        """Entries in this function's caches: ``{"traces": n, "executables": n, "bound": n}``."""
        return {"traces": len(self._traces), "executables": len(self._compiled), "bound": config.jit_cache_size}

    # ------------------------------------------------------------------ calling
    def _hot_evicted(self, hot):
        """``hot``'s executable was evicted meanwhile (by another thread): still valid for this call; drop it
        from the lookup tables."""
        ex = self._fast.get(hot.ckey[0])
        if ex is not None and ex.gid == hot.gid:
            _unfast(self._fast, hot.ckey, ex, self._hot)
            return
        if self._hot[0] is hot:
            self._hot[0] = None
        by_avals = self._hot[1]
        if by_avals.get(hot.in_avals) is hot:
            by_avals.pop(hot.in_avals, None)

    def __call__(self, *args, **kwargs):
        # The hot path (docs/design.md "The call path"): an earlier call's record, when this call's arrays have its
        # types and device; no key is built (a PyTreeSpec's hash alone costs ~0.4 us). The commonest call runs here
        # (positional arrays, a ``lean`` record: a decode step, ``a * 2 + 1``), with no Python frame but this one
        # between the caller and the backend's entry: JAX records the Python stack with each call's outputs, ~0.4
        # us a frame (issue 28). The other tiers: _call_hot (a record's general case: statics, pytrees,
        # donation), then _call_keyed (flatten, _scan, key) with _call_fast (the fast table) or _call_traced
        # (trace, stage or compile).
        if disable_jit.off and disable_jit.disabled():
            return self._call_eagerly(args, kwargs)
        hot = self._hot[0]
        if hot is not None and hot.generation == config.generation and \
                (tracing.plain or _TRACE_STATE.dynamic[-1].level == 0):
            if hot.one and len(args) == 1 and not kwargs:   # the shortest: the last call's one array again
                x = args[0]
                if type(x) is ArrayImpl and x._buf is not None and x._device is hot.device and \
                        (x.aval is hot.in_avals[0] or x.aval == hot.in_avals[0]) and \
                        (hot.committed or x._committed or x._device is DEFAULT_NOW[0]
                         or x._device is current_default()):
                    try:
                        outs = hot.call(x._buf)
                    except Exception as e:
                        outs = hot.recover(e, [x._buf])
                    return self._hot_outputs(hot, outs, hot.device, hot.committed or x._committed)
            if self._shapeless is not None and self._shapeless.direct and not kwargs:
                out = self._shapeless.call(args)  # positional arrays of a derived pattern on mlx:0 (shapeless_jit)
                if out is not _MISS:
                    return out
            if not kwargs and (hot.lean or self._hot[1]):
                # positional arrays: one pass (type, buffer, one device), then the last call's record where these
                # are its avals (compared as objects first: one executable's outputs share their avals), else
                # their own record (a loop whose shapes grow or take turns: one lookup, not two checks)
                avals, bufs, committed, dev = [], [], False, None
                for x in args:
                    b = x._buf if type(x) is ArrayImpl else None
                    if b is None or (x._device is not dev and dev is not None):
                        break   # a scalar, a NumPy array, a container, a deleted array, another device
                    dev = x._device
                    avals.append(x.aval)
                    bufs.append(b)
                    if x._committed:
                        committed = True
                else:
                    avals = tuple(avals)
                    h = hot if hot.lean and avals == hot.in_avals else self._hot[1].get(avals)
                    if h is not None and h.generation == config.generation and h.device is dev and \
                            (committed or h.committed or dev is DEFAULT_NOW[0]
                             or dev is current_default()):  # (uncommitted arrays: the default device's)
                        if h.lean:
                            try:
                                outs = h.call(*bufs)
                            except Exception as e:
                                outs = h.recover(e, bufs)
                            return self._hot_outputs(h, outs, dev, committed or h.committed)
                        hot = h   # constants, donation, a nested output structure, no direct entry: below
            out = self._call_hot(hot, args, kwargs)
            if out is not _MISS:
                return out
        return self._call_keyed(args, kwargs)

    def _call_eagerly(self, args, kwargs):
        """Inside ``fnarray.disable_jit()``: the Python function itself, on ``jit(device=)``'s device if given."""
        if self.device is None:
            return self.fun(*args, **kwargs)
        with default_device(self.device):
            return self.fun(*args, **kwargs)

    def _call_hot(self, hot, args, kwargs):
        """The hot record's general case: the same static arguments, ``args`` read along its structure, each leaf an
        array of its aval on its device, run (donation checked and done); ``_MISS`` otherwise."""
        dev = hot.device
        args = _hot_dynamic_args(hot, args, kwargs)
        if args is _MISS:
            return _MISS
        if hot.read is None:
            leaves = args
        else:
            leaves = hot.read(args)
            if leaves is None:
                return _MISS
        if len(leaves) != hot.n:
            return _MISS
        bufs, committed = list(hot.const_bufs), hot.committed
        # The arrays' slots read directly (Python 3.11 specializes a slot read: two reads cost less than one
        # ``call_fields`` call and its tuple, 1.6 against 3.0 us over 20 leaves); ArrayImpl's own code, inlined.
        for x, av in zip(leaves, hot.in_avals):
            if type(x) is not ArrayImpl:
                return _MISS
            b = x._buf
            if b is None or x._device is not dev or (x.aval is not av and x.aval != av):
                return _MISS
            bufs.append(b)
            if x._committed:
                committed = True
        if not committed and dev is not DEFAULT_NOW[0] and dev is not current_default():
            return _MISS  # uncommitted arrays: the call runs on the default device (_target_device)
        if hot.donated and len(set(map(id, leaves))) != len(leaves):
            _check_donation(leaves, hot.donated, self.fun)
        if hot.star:
            try:
                outs = hot.call(*bufs)
            except Exception as e:
                outs = hot.recover(e, bufs)
        else:
            outs = hot.call(bufs)
        for p in hot.donated:
            leaves[p].delete()
        return self._hot_outputs(hot, outs, dev, committed)

    def _hot_outputs(self, hot, outs, dev, committed):
        """The output buffers ``outs`` of a call of record ``hot`` as arrays on ``dev`` (``committed``), in its output
        structure; ``hot`` becomes the last call's record and its executable the most recently used. (After the
        backend's call: a frame on the stack during the call costs more, ``__call__``.)"""
        self._hot[0] = hot
        try:  # LRU order, per function and global: two GIL-atomic moves of int keys, no lock
            self._compiled_d.move_to_end(hot.gid)
            _GLOBAL_D.move_to_end(hot.gid)
        except KeyError:
            self._hot_evicted(hot)
        if hot.single:
            r = ArrayImpl()  # ArrayImpl.make inline (one Python frame less per call)
            r.aval, r._device, r._buf, r._committed, r._host = hot.out_avals[0], dev, outs[0], committed, None
            return r
        made = []
        for av, b in zip(hot.out_avals, outs):  # ArrayImpl.make inline: ~50 ns an output less
            r = ArrayImpl()
            r.aval, r._device, r._buf, r._committed, r._host = av, dev, b, committed, None
            made.append(r)
        # a plain tuple of arrays (a decode step's ``(cache, out)``) made directly: no ``out_tree.unflatten``
        return tuple(made) if hot.flat_out else hot.out_tree.unflatten(made)

    def _call_keyed(self, args, kwargs):
        """The general path: flatten, key, then the fast table's executable (``_call_fast``) or a trace and an
        executable from the caches (``_call_traced``)."""
        guessed = False
        if kwargs or self.static_argnums:
            statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
            leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        else:
            statics, leaves, last = (), None, self._last_tree
            if last is not None:
                # Flattening along the last call's structure costs ~1 us where a full flatten costs ~9 us
                # (optree, 21 leaves); a structure that differs raises, and a container where the last
                # call had an array shows up as a non-array leaf (checked by _scan), both then re-flattened.
                try:
                    leaves, in_tree, guessed = last.flatten_up_to((args, {})), last, True
                except ValueError:
                    pass
            if leaves is None:
                leaves, in_tree = tree_util.tree_flatten((args, {}))
                self._last_tree = in_tree
        scan = self._scan(leaves, args, in_tree, guessed)
        if scan is None:  # a guessed structure that was wrong: flatten properly
            self._last_tree = None
            return self(*args)
        avals, bufs, dev, plain, committed, traced = scan
        key = (in_tree, avals, statics)
        if not traced:
            fast = self._fast.get(key)
            if fast is not None and fast.generation == config.generation:
                out = self._call_fast(fast, leaves, bufs, dev, plain, committed, args, kwargs)
                if out is not _MISS:
                    return out
        return self._call_traced(statics, leaves, in_tree, avals, key, traced, args)

    def _scan(self, leaves, args, in_tree, guessed):
        """One pass over the leaves: ``(avals, bufs, device, plain, committed, traced)``, the abstract values for
        the key and, for the common case (``plain``: every leaf an array on one device, none deleted), the
        buffers, their device and the committed flag as well; ``None`` when a guessed structure was wrong."""
        avals, bufs = [], []
        traced = _TRACE_STATE.dynamic[-1].level > 0
        plain = True
        committed = self.device is not None
        dev = None
        for x in leaves:
            if type(x) is ArrayImpl:
                b, x_dev = x._buf, x._device   # slot reads, as _call_hot's (a decode step has ~100 leaves)
                avals.append(x.aval)
                if dev is None:
                    dev = x_dev
                if b is None or x_dev is not dev:
                    plain = False
                if x._committed:
                    committed = True
                bufs.append(b)
            else:
                if guessed:  # judge this leaf only once the structure is known to be the last call's
                    guessed = False
                    if tree_util.tree_structure((args, {})) != in_tree:
                        return None
                plain = False
                if isinstance(x, tracing.Tracer):
                    traced = True
                avals.append(leaf_aval(x, f"an argument of {getattr(self.fun, '__name__', 'fun')}"))
        return tuple(avals), bufs, dev, plain, committed, traced

    def _call_fast(self, fast, leaves, bufs, dev, plain, committed, args, kwargs):
        """Run the fast table's executable ``fast`` (valid in this configuration) where this call's arrays allow:
        plain arrays on its device launch at once (and make it the hot record), others are placed on it
        (``_run``); ``_MISS`` when the call belongs on another device."""
        try:  # LRU order, per function and global: two GIL-atomic moves of int keys, no lock
            gid = fast.gid
            self._compiled_d.move_to_end(gid)
            _GLOBAL_D.move_to_end(gid)
        except KeyError:  # evicted meanwhile (by another thread): still valid for this call,
            _unfast(self._fast, fast.ckey, fast, self._hot)  # and the next one compiles again
        device = fast.device
        if dev is None and self.device is None and device is not default_device():
            return _MISS  # no array argument: the default device decides, and it is not this entry's
        if not committed and dev is not None and device is not DEFAULT_NOW[0] \
                and device is not current_default():
            return _MISS  # uncommitted arrays: the default device decides, and it is not this entry's
        if plain and (dev is None or dev is device):
            if self.donate_argnums:
                out = self._run(fast, leaves, device, args)
            else:
                out_bufs = fast.exe(fast.const_bufs + bufs if fast.const_bufs else bufs)
                out = tree_util.tree_unflatten(fast.out_tree, [
                    ArrayImpl.make(av, device, b, committed) for av, b in zip(fast.out_avals, out_bufs)])
            if dev is not None and fast.hot is not False:
                self._make_hot(fast, args)
            return out
        if self.device is None:
            for x in leaves:
                if type(x) is ArrayImpl and x.device is not device:
                    return _MISS
        return self._run(fast, leaves, device, args)

    def _call_traced(self, statics, leaves, in_tree, avals, key, traced, args):
        """The trace of this signature, then: inside a transformation (or a named vmap), one ``call`` equation;
        else its executable for the target device, compiled if missing, made the fast table's entry."""
        entry = self._trace(statics, leaves, in_tree, avals)
        if self._cache.spec_dependent:
            key += (_leaf_shardings(leaves),)
        if not traced:  # inside a named vmap, a program with collectives over its axis is batched over it
            lifted = lift_for_program(leaves, entry.program)
            if lifted is not None:
                leaves, traced = lifted, True
            else:
                # A trace made inside a named vmap may name axes that are not bound at this call: the
                # collective's NameError, not a lowering error (the trace cache does not key on axes).
                if entry.axis_names is None:
                    entry.axis_names = tuple(free_axis_names(entry.program))
                for n in entry.axis_names:
                    axis_frame(n, f"jit({getattr(self.fun, '__name__', 'fun')}) runs a collective")
        if traced or (entry.consts and any(isinstance(c, tracing.Tracer) for c in entry.consts)):
            closed = consts_as_inputs(entry.program)
            leaves = [_operand(x) for x in leaves]
            outs = P.call.bind(*entry.consts, *leaves, program=closed,
                               name=getattr(self.fun, "__name__", "fun"))
            return tree_util.tree_unflatten(entry.out_tree, outs)
        device = self._target_device(leaves)
        ex = self._executable(entry, key, device, self._donated_positions(args))
        if self._shapeless is not None:   # (mlx:0: a derived program's executable, called directly from now on)
            flat = not (self.static_argnums or self.donate_argnums or self._cache.spec_dependent) and \
                in_tree == tree_util.tree_structure((tuple(leaves), {}))
            self._shapeless.executable(entry, ex, self.device is not None, flat)
        # The entry serves later calls on any device: a hit checks that its arrays are on the entry's
        # device, or, with no array argument, that the entry's device is the default one.
        ex.generation = config.generation
        if self._cache.spec_dependent:   # keyed by shardings, which the fast and hot paths do not look at
            return self._run(ex, leaves, device, args)
        self._fast[key] = ex
        if ex.gid not in self._compiled_d:  # evicted meanwhile: keep the tables consistent
            _unfast(self._fast, ex.ckey, ex, self._hot)
        # The hot record from the first call on: a loop whose shapes grow (a decode step) calls each shape's
        # executable once a pass, so a record made at the second call left every later pass on the keyed path
        # (flatten, scan, key) for one call of each shape (issue 28, seventeenth session). Donating calls too, as
        # ``_call_fast`` makes theirs: a record holds the donated leaves' positions, never an input; the leaves
        # are checked before the run, which deletes the donated ones.
        hot = ex.hot is not False and _on_device(leaves, device)
        out = self._run(ex, leaves, device, args)
        if hot:
            self._make_hot(ex, args)
        return out

    def _make_hot(self, ex, args):
        """Make ``ex`` (just run from the fast table, with array leaves on its device) the hot record; ``args``:
        the call's positional arguments. An executable called with dynamic keyword arguments gets none
        (``ex.hot = False``)."""
        h = ex.hot
        if h is None:
            in_tree, avals, statics = ex.ckey[0]
            args_tree, kwargs_tree = in_tree.children()  # the structure of (dynamic args, dynamic kwargs)
            # dynamic keyword arguments; or donation beside a static position counted from the end, where the
            # donated leaves' positions (_donated_positions) are not sure to be the ones _donate deletes
            if kwargs_tree.num_nodes != 1 or (self.donate_argnums and any(i < 0 for i in self.static_argnums)):
                ex.hot = False
                return
            nargs = args_tree.num_children
            flat = args_tree.num_leaves == nargs and args_tree.num_nodes == nargs + 1
            h = ex.hot = _Hot(ex, None if flat else args_tree, avals, ex.device, self.device is not None,
                              len(args), statics, self._donated_positions(args))
        h.generation = config.generation  # the fast table checked that ex is valid in this configuration
        if ex.gid in self._compiled_d:  # not evicted meanwhile
            self._hot[0] = h
            if h.tree is None and not h.static_pos and not h.static_kw:
                self._hot[1][h.in_avals] = h
                if ex.gid not in self._compiled_d:  # evicted meanwhile: keep the tables consistent
                    _unfast(self._fast, ex.ckey, ex, self._hot)

    def direct_entry(self, nargs, device):
        """The direct entry of this function's one executable, for a caller that checks the arguments itself.

        After this function's first call (``nargs`` positional arrays, no keywords or statics, on ``device``), a
        caller that keys calls of its own (``eager_jit``: the key already holds each array's aval and device)
        may call the executable without jit's hot path comparing them again (~1 us a call). Returns
        ``(call, out_avals, out_tree, single)``: ``call(*bufs)`` takes the ``nargs`` buffers as they are and returns
        the output buffers (errors untranslated: the caller re-runs its own general path on any), ``out_avals``
        their avals, ``out_tree`` their structure, ``single`` whether the output is one array. The outputs lie on
        ``device``; the caller sets their committed flag (any argument committed). ``None`` where there is none
        yet (not one executable for ``device`` in this configuration: ask again after a call), ``False`` where
        there will be none (constants to pass, a structure other than ``nargs`` arrays, a fixed ``device=``
        whose outputs are always committed, a backend without a direct entry: ``call_args`` and ``reraise``);
        the caller then calls this ``Jitted`` as usual.
        """
        if self.static_argnums or self.static_argnames or self.donate_argnums:
            return False
        h = self._hot[0]
        if h is None:  # after a first call: the fast table holds the executable but no hot record yet
            fast = self._fast
            if len(fast) != 1:
                return None
            ex = next(iter(fast.values()), None)
            if ex is None or ex.device is not device or ex.generation != config.generation:
                return None
            self._make_hot(ex, [None] * nargs)
            h = self._hot[0]
            if h is None:
                return None
        if not h.star or h.tree is not None or h.n != nargs or h.const_bufs or h.committed or h.device is not device \
                or h.static_pos or h.static_kw or h.donated:
            return False
        return h.entry, h.out_avals, h.out_tree, h.single

    def _run(self, ex, leaves, device, args):
        bufs = list(ex.const_bufs)
        committed = self.device is not None
        for x in leaves:
            if type(x) is ArrayImpl:
                b, x_dev, x_committed = x.call_view()
                if b is None:
                    x.buf()  # raises: donated or deleted
                if x_dev is not device:
                    b = _to(x, device)
                committed = committed or x_committed
                bufs.append(b)
            elif type(x) in _PY_SCALARS and not self.donate_argnums:
                # a device scalar the backend may keep (jax:0 caches them: no upload per call); a donated
                # call gets a buffer of its own, which XLA may reuse for an output
                bufs.append(device.impl.scalar_to_device(x, dtypes.dtype_of_scalar(x)[0], device))
            else:
                bufs.append(_to(x, device))
        if self.donate_argnums and len(set(map(id, leaves))) != len(leaves):
            _check_donation(leaves, self._donated_positions(args), self.fun)
        out_bufs = ex.exe(bufs)
        outs = [ArrayImpl.make(av, device, b, committed) for av, b in zip(ex.out_avals, out_bufs, strict=True)]
        if self.donate_argnums:
            self._donate(args, leaves)
        return tree_util.tree_unflatten(ex.out_tree, outs)

    def _donate(self, args, leaves):
        for i in self.donate_argnums:
            if i < len(args):
                for leaf in tree_util.tree_leaves(args[i]):
                    if isinstance(leaf, ArrayImpl):
                        leaf.delete()

    # ------------------------------------------------------------------ ahead of time
    def trace(self, *args, **kwargs) -> "Traced":
        """Trace at the given arguments' types; returns a ``Traced`` with ``.program``."""
        statics, leaves, in_tree, avals = self._prepare(args, kwargs)
        entry = self._trace(statics, leaves, in_tree, avals)
        return Traced(self, entry, (in_tree, avals, statics), leaves, self._donated_positions(args))

    def lower(self, *args, **kwargs) -> "Lowered":
        """Trace and lower for the target device; returns a ``Lowered``."""
        return self.trace(*args, **kwargs).lower()

    def eval_shape(self, *args, **kwargs):
        """The output pytree of ``ShapedArray`` without running anything."""
        t = self.trace(*args, **kwargs)
        return tree_util.tree_unflatten(t.entry.out_tree, list(t.program.out_avals))

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self):
        return f"<jitted {getattr(self.fun, '__name__', 'function')}>"


_PY_SCALARS = (bool, int, float, complex)


def _check_donation(leaves, donated, fun) -> None:
    """The ``RuntimeError`` of a call that passes a donated array again at another position (``f(a, a)`` with
    ``donate_argnums=0``, or both donated), as XLA's and so JAX's (``INVALID_ARGUMENT``, "Toy example for this
    bug: f(donate(a), a)"; jax-ml/jax#9635): the outputs may overwrite a donated buffer while another position
    still reads it. ``leaves``: the call's flattened dynamic arguments; ``donated``: the positions among them that
    are donated. Arrays are compared as objects, as JAX's are: two arrays that share a buffer inside fnarray
    (``x.copy()`` of an immutable array) are two arguments, and the backends copy the donated one. (The hot path
    calls it only where some object repeats.)"""
    first: dict = {}
    for i, x in enumerate(leaves):
        if type(x) is not ArrayImpl:
            continue
        j = first.setdefault(id(x), i)
        if j != i and (i in donated or j in donated):
            which = "both donated" if i in donated and j in donated else f"{j if j in donated else i} donated"
            raise RuntimeError(
                f"jit({getattr(fun, '__name__', 'fun')}): array arguments {j} and {i} of the call (flattened, static "
                f"arguments left out) are one array, {which} (donate_argnums): the outputs may overwrite a donated "
                "buffer before the other argument is read, so XLA and JAX refuse f(donate(a), a). Pass a copy as "
                "one of them (a.copy()), or do not donate it")


def _on_device(leaves, device) -> bool:
    """Whether ``leaves`` are one or more live arrays, every one on ``device`` (what a hot record needs)."""
    for x in leaves:
        if type(x) is not ArrayImpl or x._buf is None or x._device is not device:
            return False
    return bool(leaves)


def _to(x, device):
    """A leaf (array or scalar) as a buffer on ``device``."""
    if isinstance(x, ArrayImpl):
        if x.device == device:
            return x.buf()
        return device.impl.to_device(x.device.impl.to_host(x.buf()), device)
    if isinstance(x, _PY_SCALARS):
        d, _ = dtypes.dtype_of_scalar(x)
        return device.impl.to_device(np.asarray(x, d), device)
    x = np.asarray(foreign_to_numpy(x))
    return device.impl.to_device(x.astype(dtypes.canonicalize(x.dtype), copy=False), device)  # x64 off: 32-bit


class Traced:
    """A traced jitted function: ``.program`` (the IR; ``.jaxpr``, JAX's name, is the same) and ``.lower()``."""

    def __init__(self, jitted, entry, key, leaves, donated=()):
        self.jitted, self.entry, self.key, self._leaves = jitted, entry, key, leaves
        self.donated = tuple(donated)   # leaf positions of the donated arguments (``donate_argnums``)

    @property
    def program(self) -> Program:
        return self.entry.program

    jaxpr = program   # jax.jit(f).trace(x).jaxpr: the program make_jaxpr prints

    @property
    def consts(self):
        return list(self.entry.consts)

    def lower(self, device=None) -> "Lowered":
        dev = parse_device(device) if device is not None else self.jitted._target_device(self._leaves)
        return Lowered(self, dev)

    def __str__(self):
        return str(self.program)


class Lowered:
    """A traced program lowered for one device: ``.as_text()``, ``.compile()``."""

    def __init__(self, traced: Traced, device):
        self.traced, self.device = traced, device
        # lowered as the call lowers it: with the donated inputs (their positions after the constants) and the
        # traced constants where the backend compiles small ones in
        n = len(traced.entry.consts)
        kwargs = {}
        donate = tuple(n + p for p in traced.donated)
        if donate:
            kwargs["donate"] = donate
        if device.impl.inlines_constants and traced.entry.consts:
            kwargs["consts"] = tuple(traced.entry.consts)
        self._backend_lowered = device.impl.lower(cse(traced.program), device, **kwargs)

    @property
    def program(self) -> Program:
        return self.traced.program

    def as_text(self) -> str:
        """The backend's text: generated NumPy code, StableHLO, or kernel source."""
        return self._backend_lowered.as_text()

    def kernels(self):
        """The generated kernels (kernel backends only)."""
        k = getattr(self._backend_lowered, "kernels", None)
        if k is None:
            raise TypeError(f"the {self.device.backend} backend does not generate kernels")
        return k()

    def compile(self) -> "Compiled":
        ex = self.traced.jitted._executable(self.traced.entry, self.traced.key, self.device)
        return Compiled(self.traced.jitted, ex, self.traced.key)


class Compiled:
    """A compiled jitted function; call it with arguments of the traced types."""

    def __init__(self, jitted, entry, key):
        self.jitted, self.entry, self.key = jitted, entry, key

    def __call__(self, *args, **kwargs):
        statics, leaves, in_tree, avals = self.jitted._prepare(args, kwargs)
        if (in_tree, avals, statics) != self.key:
            raise TypeError(f"this Compiled does not fit these arguments: "
                            f"{describe_mismatch(self.key, (in_tree, avals, statics))}. Call the jitted function "
                            "instead (it will retrace for the new signature), or compile it for these arguments")
        ex = self.entry
        out_bufs = ex.exe(ex.const_bufs + [_to(x, ex.device) for x in leaves])
        outs = [ArrayImpl.make(av, ex.device, b) for av, b in zip(ex.out_avals, out_bufs, strict=True)]
        return tree_util.tree_unflatten(ex.out_tree, outs)

    def as_text(self):
        dev = self.entry.device
        kwargs = {"consts": tuple(self.entry.consts)} if dev.impl.inlines_constants and self.entry.consts else {}
        return dev.impl.lower(self.entry.program, dev, **kwargs).as_text()


def jit(fun=None, *, static_argnums=(), static_argnames=(), donate_argnums=(), device=None, in_shardings=None,
        out_shardings=None, shapeless=False):
    """Compile ``fun`` for a device, tracing once per input signature (mirrors ``jax.jit``).

    Args:
      fun: a function of arrays, scalars and pytrees of them, returning the same.
      static_argnums / static_argnames: arguments that are configuration: hashable
        values that become part of the cache key (a new value retraces).
      donate_argnums: positional arguments whose buffers the call may reuse; the
        donated arrays are deleted after the call and using them raises. A donated
        array passed again in the same call (``f(a, a)``) raises ``RuntimeError``, as
        XLA's refusal in JAX; pass a copy (``a.copy()``) instead.
      device: the device to run on (``Device`` or a string like ``"numpy:0"``);
        default: the committed inputs' device, else the default device.
      in_shardings / out_shardings: ``fnarray.sharding`` shardings (a pytree prefix of the positional
        arguments / of the outputs; ``None`` leaves one free): inputs are placed so before the call, outputs
        are constrained so inside the program, and XLA (GSPMD) propagates the rest (``jax.jit``'s).
      shapeless: ``True`` promises, as ``mx.compile(fun, shapeless=True)`` in MLX, that ``fun``'s computation does
        not depend on its arguments' sizes: a call whose arguments differ from a traced call's only in their
        sizes (same structure, ranks, dtypes, weak types, static values, and the same sizes of 0 and 1 and
        equalities between sizes) runs that trace's program renamed to its sizes, without running ``fun``
        (``fnarray.transforms.shapeless_jit``), once a trace at a second size confirmed that its program is the
        first one renamed; mlx:0 calls one ``mx.compile(shapeless=True)`` function for all of them. As in MLX,
        Python that reads a size (``if x.shape[0] > 8``, a constant equal to a size, a
        reshape to sizes computed from a shape) gets the program of the size it was traced at where it gave the
        same program at both traced sizes. Where the
        renamed program does not type-check at the new sizes, or ties a size in a way a renaming cannot follow
        (``x[1:]``, ``mean``'s divisor), ``fun`` is traced at them as without ``shapeless``. Default ``False``.

    Returns:
      A ``Jitted`` callable with ``fun``'s signature and outputs (same structure,
      shapes and dtypes), and ``.trace``, ``.lower`` and ``.eval_shape``; with
      ``fun=None``, a decorator taking ``fun``.

    Raises:
      TypeError: ``fun`` is not callable, or ``shapeless`` is not a bool; (when called) an argument is not an array
        or scalar, or a static argument is unhashable.
      ValueError: ``static_argnums``/``static_argnames``/``donate_argnums`` name no
        parameter of ``fun`` or an argument both static and donated; (when called)
        with ``device=``, an argument committed to another device.
      ConcretizationError: (when called) ``fun`` needs a concrete value of a traced
        argument (``if x > 0:``).
      RuntimeError: (when called) a donated or deleted array, or a donated array
        passed at two positions.

    Usable as a decorator, with or without arguments. As in JAX, the caches belong to ``fun`` (held weakly;
    equal callables share them), not to the returned wrapper: ``jit(f)`` made twice, or ``jit(f)(x)`` in a
    loop, traces ``f`` once per signature; the last ``fnarray.config.jit_global_cache_size`` functions keep
    their caches.
    """
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, device=device, in_shardings=in_shardings,
                                 out_shardings=out_shardings, shapeless=shapeless)
    if in_shardings is not None or out_shardings is not None:
        from fnarray.transforms.shard_map import jit_with_shardings
        return jit_with_shardings(lambda f: Jitted(f, static_argnums, static_argnames, donate_argnums, device,
                                                   shapeless=shapeless), fun, in_shardings, out_shardings)
    return Jitted(fun, static_argnums, static_argnames, donate_argnums, device, shapeless=shapeless)


def make_ir(fun, *, static_argnums=(), static_argnames=()):
    """``make_ir(f)(*args)`` returns the ``Program`` that ``jit`` would run (as ``jax.make_jaxpr``).

    Args:
      fun: a function of arrays, scalars and pytrees of them.
      static_argnums / static_argnames: arguments held as Python values (as in ``jit``).

    Returns:
      A function with ``fun``'s signature returning the traced ``Program`` (its
      input and output variables carry the flattened arguments' and outputs'
      shapes and dtypes); ``print`` it for the text form.

    Raises:
      The errors of ``jit``: ``TypeError`` for a non-callable ``fun`` or a non-array
      argument, ``ValueError`` for static arguments that name no parameter,
      ``ConcretizationError`` when ``fun`` needs a concrete value of a traced one.
    """
    j = Jitted(fun, static_argnums, static_argnames)

    @functools.wraps(fun)
    def traced(*args, **kwargs):
        return j.trace(*args, **kwargs).program
    return traced


def eval_shape(fun, *args, **kwargs):
    """The shapes and dtypes of ``fun(*args, **kwargs)`` without computing it (``jax.eval_shape``).

    Args:
      fun: a function of arrays, scalars and pytrees of them.
      *args, **kwargs: arrays, scalars or ``fa.ShapeDtypeStruct``s standing for arrays (pytrees of them).

    Returns:
      ``fun``'s output pytree with a ``fa.ShapeDtypeStruct`` (shape, dtype, weak type) per array.

    Raises:
      The errors of tracing ``fun`` under ``jit``: ``TypeError`` for an argument that is not an array, scalar
      or ``ShapeDtypeStruct``, ``ConcretizationError`` when ``fun`` needs a traced value's contents, and the
      shape and dtype errors ``fun``'s operations raise.

    Example:
      >>> fa.eval_shape(lambda a: a @ a.T, fa.ShapeDtypeStruct((3, 4), fnp.float32))
      ShapeDtypeStruct(shape=(3, 3), dtype=float32)
    """
    t = Jitted(fun).trace(*args, **kwargs)
    outs = [ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in t.program.out_avals]
    return tree_util.tree_unflatten(t.entry.out_tree, outs)


