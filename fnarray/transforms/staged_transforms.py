"""Eager ``jacfwd``/``jacrev``/``hessian`` calls staged into one jitted program (``config.stage_eager_transforms``).

Called on concrete arrays, a Jacobian interprets its function primitive by primitive under JVP and batching
tracers (~7,300 binds for ``benchmarks/programs.py``'s sweep of 40 small functions on mlx:0, 6-8x raw MLX's
``vmap`` of ``jvp``/``vjp``). With ``fnarray.config.stage_eager_transforms`` on (default off; env
``FNARRAY_STAGE_EAGER_TRANSFORMS=1``), the call runs ``fnarray.jit`` of the transformed function instead, cached
per *fingerprint* of the function: its code object, its closure cells' values, its defaults and the module
globals its code names (functions among them fingerprinted the same way, to a depth of ``_DEPTH``), so that
``hessian(lambda x, f=f: f(x).sum())`` made anew in a loop finds the program its first call made. jit keys
the arguments' avals, device and configuration as for any jitted call.

The rule (docs/design.md, "Staged eager transforms"): a value of the fingerprint is one of

- ``bool``/``int``/``str``/``bytes``/``None`` (by value), ``float``/``complex`` (by ``repr``: ``-0.0`` and
  ``nan`` keyed apart), tuples of these;
- a concrete array (``ArrayImpl``: immutable), a module, a class, a builtin, a NumPy dtype or ufunc (by identity,
  kept alive by the cache entry so that an identity is never reused while it is keyed);
- a Python function (recursively), ``functools.partial`` of one.

Any other value (a list, a dict, a NumPy array, an object of the user's: mutable state a later call may see
changed) leaves the call to the eager transform, as does a call with keyword arguments, with an argument that is
not a concrete array (a tracer: the call is being traced already), or a function whose trace failed (a
value-dependent branch) at its first staged call, which then runs eagerly (and raises the eager error, if any).

What changes with the setting on: the function's Python runs once per (fingerprint, avals) when it is traced,
not at every call (a ``print`` inside prints once), as under ``fnarray.jit``; results are jit's (equal to the
eager transform's up to float rounding of fused operations). Attributes read off a module or object at trace
time are not keyed (``np.pi``, ``model.w``): a program made before such a value changes keeps the old one.

A backend may run a staged call of one differentiated argument itself (``Backend.staged_jacobian``): mlx records
the function's MLX operations at its first call and replays them under MLX's own transforms
(``lowering/mlx/jacobians.py``), in the same cache entry, with the same semantics; the jitted program is then made
only for what it refuses.
"""

from __future__ import annotations

import functools
import types

import numpy as np

from fnarray.core import tracing
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.lookup import current_default

__all__ = ["call", "fingerprint", "stats", "NO"]

_DEPTH = 8
_BY_VALUE = frozenset({bool, int, str, bytes, type(None)})
_BY_REPR = frozenset({float, complex})
_BY_IDENTITY = (types.ModuleType, type, types.BuiltinFunctionType, np.dtype, np.ufunc)
NO = object()  # ``call``: run eagerly; as a cache entry: the staged call failed once (eager from then on)

_programs = LRUCache(lambda: config.eager_cache_size)
#: a fingerprint -> ``(tapes, kept)``: the dict a backend's ``staged_jacobian`` keeps its records of that function in,
#: shared by the entries of its transforms (``jacfwd`` and ``jacrev`` of one function record it once), and the
#: objects the fingerprint holds by identity (kept alive while the key is here: no identity is reused meanwhile)
_tapes = LRUCache(lambda: config.eager_cache_size)
stats = {"staged": 0, "refused": 0}  # programs made, and calls left eager by the rule (counters for tests)


@functools.lru_cache(maxsize=2048)
def _global_names(code) -> tuple:
    """The names ``code`` (and the code objects it holds: lambdas, comprehensions) may read as globals."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_global_names(c))
    return tuple(sorted(names))


def _value(x, depth, keep):
    """The fingerprint of one value, or ``None`` where the rule refuses it."""
    t = type(x)
    if t in _BY_VALUE:
        return (t, x)
    if t in _BY_REPR:
        return (t, repr(x))
    if t is ArrayImpl or isinstance(x, _BY_IDENTITY):
        keep.append(x)
        return (t, id(x))
    if t is tuple:
        parts = [_value(y, depth, keep) for y in x]
        return None if None in parts else (tuple, *parts)
    if t is types.FunctionType:  # (each function once a fingerprint: a hessian's closures repeat the function)
        memo = keep[0]
        r = memo.get(id(x), memo)
        if r is memo:
            r = memo[id(x)] = _function(x, depth + 1, keep)
        return r
    if t is functools.partial:
        parts = [_value(y, depth, keep) for y in (x.func, x.args, tuple(sorted(x.keywords.items())))]
        return None if None in parts else (t, *parts)
    return None


def _function(f, depth, keep):
    """A function's fingerprint (code, closure values, defaults, named globals), or ``None``."""
    if depth > _DEPTH:
        return None
    lib = (f.__module__ or "").startswith("fnarray.")
    if lib and f.__closure__ is None:  # one of fnarray's module-level functions (``vmap``): itself
        keep.append(f)
        return (types.FunctionType, id(f))
    parts = [f.__code__]
    for cell in f.__closure__ or ():
        try:
            parts.append(_value(cell.cell_contents, depth, keep))
        except ValueError:  # an empty cell (a name assigned later in the enclosing function)
            parts.append(("empty",))
    parts.append(_value(f.__defaults__, depth, keep) if f.__defaults__ else ())
    if f.__kwdefaults__:
        parts.append(_value(tuple(sorted(f.__kwdefaults__.items())), depth, keep))
    if not lib:  # the user's globals (fnarray's are its own modules')
        g = f.__globals__
        for name in _global_names(f.__code__):
            if name in g:
                parts += (name, _value(g[name], depth, keep))
    return None if None in parts else tuple(parts)


def fingerprint(f):
    """``(key, kept)``: ``f``'s fingerprint (hashable) and the objects keyed by identity, or ``None`` where the
    module docstring's rule refuses a value ``f`` reads."""
    keep = [{}]  # the functions' fingerprints by id (the functions are alive: ``f`` holds them), then the kept
    key = _value(f, 0, keep)
    del keep[0]
    return None if key is None else (key, keep)


class _Staged:
    """A cache entry: the ``jit`` of the transform (made at its first use), the objects its key holds by
    identity (``kept``), and the records a backend's ``staged_jacobian`` keeps of the function (``tapes``, one
    dict for every transform of a fingerprint: ``_tapes``)."""

    __slots__ = ("jac", "jitted", "kept", "tapes")

    def __init__(self, jac, fp):
        self.jac, self.jitted, self.kept = jac, None, fp[1]
        self.tapes = _tapes.put(fp[0], ({}, fp[1]))[0]

    def program(self):
        if self.jitted is None:
            from fnarray.transforms.jit import jit
            self.jitted = jit(self.jac)
        return self.jitted


def call(kind, fun, jac, args, kwargs, argnum, scope):
    """``jac(*args, **kwargs)`` (the eager transform ``kind`` of ``fun``: a tuple of the transform's name and
    options), through a cached ``jit`` of it, run inside ``scope(args)``, where ``config.stage_eager_transforms`` is
    on and the module docstring's rule allows; ``NO`` where the caller runs it eagerly. With one differentiated
    argument (``argnum``, else ``None``), the argument's backend may run the call itself
    (``Backend.staged_jacobian``: mlx records the function's operations once and replays them under MLX's
    transforms), else the program runs it."""
    if kwargs or not args or not tracing.plain:  # (another thread staging, the profiler on: eager)
        return NO
    for x in args:
        if type(x) is not ArrayImpl:
            return NO
    fp = fingerprint(fun)
    if fp is None:
        stats["refused"] += 1
        return NO
    key = (kind, fp[0])
    entry = _programs.get(key)
    if entry is NO:
        return NO
    if entry is None:
        entry = _programs.put(key, _Staged(jac, fp))
        stats["staged"] += 1
    if argnum is not None and -len(args) <= argnum < len(args):
        x = args[argnum]
        native = x._device.impl.staged_jacobian
        # (an uncommitted argument off the default device: the program, which runs on the default device, as JAX)
        if native is not None and (x._committed or x._device is current_default()):
            out = native(kind[0], fun, args, argnum % len(args), x, entry.tapes)
            if out is not None:
                return out
    try:
        with scope(args):
            return entry.program()(*args)
    except Exception:  # noqa: BLE001 (not traceable, or the function's own error: the eager call decides)
        _programs.set(key, NO)
        return NO
