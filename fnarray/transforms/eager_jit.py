"""Eager calls of ``fnarray.numpy``'s functions as cached jitted programs.

Called eagerly, ``fnp.sum(x, axis=0)``, ``x @ y`` or ``x[1]`` run their primitives one by one through
``bind`` and the eager cache: 50-100 Python calls and 30-90 us on numpy:0 for what NumPy does in 1-3 us.
As ``jax.numpy`` jits its functions, ``install`` wraps each of ``fnarray.numpy``'s array functions so that
a call on concrete arrays (``ArrayImpl``), from a thread that stages nothing, with the profiler off and
``debug_nans``/``debug_infs`` off, is keyed by

    (the function, the pytree structure of its arguments, each array's aval, each other leaf's value)

and runs one jitted program of the whole function (``fnarray.jit``'s hot path: a few Python calls) from the
call its device's ``Capabilities.eager_programs`` says. ``"first_call"`` (jax: XLA takes 10-100 ms a program):
the first call compiles the whole function, so each new shape costs one compile, not one per primitive and then
one more for the whole function on the second call. A call's Python floats that float32 holds exactly
(``-2.0``, ``0.5``, ``1e3``) are its program's inputs there, weakly typed float32 scalars as ``jax.jit`` passes
Python floats (``_WEAK_FLOAT_POLICIES``: one program for every value, a random initialiser's bounds included); a
key holding another float (``0.1``) or a complex constant waits for its second call (a loop over new step sizes
would otherwise compile each), as does one whose function needs a float's value (its trace with the float as an
input fails). ``"second_call"`` (numpy) and
``"repeated_call"`` (mlx): the first call of a key takes the general path, so a loop over ever new static values
(``x[i]`` for each ``i``) traces and compiles nothing; from the second call (``_TAPE_CALLS``) the key's *tape*
serves it (``fnarray.transforms.eager_tape``: numpy's second call's general path recorded, ~1.5x a general call;
mlx's *first* call's, ``_RECORD_FIRST``, kept until the second; or where the record is refused the function
traced once at the key's avals at the next call, ~30-80 us; replayed on the
eager cache's own one-primitive executables, ~3-5 us a call against the general path's 10-80 us), and its
program comes once the tape has run ``TAPED_PROGRAM_CALL`` times or ``TAPE_BUDGET_S`` seconds (a program costs
0.35-1.5 ms to trace and lower and saves ~1 us a call against a tape, more where it fuses large arrays). A key
whose tape cannot be made gets its program at its second call (numpy: programs compile in milliseconds) or its
``REPEATED_CALL``-th (mlx: the general path compiles nothing, MLX's operations being lazy graph nodes). Either
way each key is traced for its tape and compiled at most once while it stays cached (``cache_info()["tapes"]``
and ``["made"]`` count them; ``tests/test_eager_jit.py`` pins it per backend). A backend sees
``fnarray.devices.backend.compiling.eager`` set while such a program compiles (mlx then never gives it to
``mx.compile``; a program recompiled after jit's global LRU evicted its executable is compiled as any jitted
program).

Arrays are the program's arguments; every other leaf (ints, bools, strings, floats, complex and NumPy
scalars, dtypes, slices, ``Ellipsis``) is a constant of it, compared by value and type (``1``, ``True`` and
``1.0`` are three keys; so are ``0.0`` and ``-0.0``).
A call with any other leaf (a NumPy array, a callable, a tracer, an object of the user's), with arrays on
two devices, or without an array takes the general path. So does a key whose program failed to trace or to
compile (a data-dependent shape: ``nonzero``, ``unique``, boolean masks), from then on, and any error of a
cached call: the general path then raises its own error (or succeeds).

The programs are jitted on the device of their arrays, which is where the general path runs them, with
the same committed flag (``tests/test_eager_jit.py`` compares both paths). Devices whose
``eager_programs`` is ``"tapes"`` (opencl, webgpu: a program would compile kernels of its own, 0.1-1 s on PoCL
and lavapipe) get a key's tape from its second call, as numpy, and never its program: the tape replays the very
one-kernel executables the general path launched, so a repeated eager call costs its launches and a few
microseconds of Python, not the general path's ~20-30 us a primitive, and compiles nothing (a tape traced where
the record was refused takes only executables the eager cache holds: ``eager_tape.make(compile=False)``). Devices
whose ``eager_programs`` is ``"off"`` run every call through the general path.

Memory: the programs and tapes are an ``LRUCache`` of at most half of ``config.jit_global_cache_size`` entries
(each one jitted function holding one executable, or a tape holding its equations' eager executables; half, so
that the global LRU of executables does not evict them under this cache), the keys not yet given either (with
their count of calls) another of ``config.eager_cache_size``.
"""

from __future__ import annotations

import functools
import inspect
import time
import types

import numpy as np

from fnarray.core import dtypes, tracing
from fnarray.core import profile as _profile
from fnarray.core.cache import LRUCache, used_since
from fnarray.core.config import config
from fnarray.core.prng import KeyArray
from fnarray.core.shaped import ShapedArray
from fnarray.devices import placement
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.backend import compiling
from fnarray.devices import array_impl, eager_ops, shapeless
from fnarray.devices.eager_ops import _APPLY, _STATE, _fast_now
from fnarray.devices.lookup import DEFAULT_NOW, current_default
from fnarray.transforms import eager_tape
from fnarray.transforms.jit import Jitted

__all__ = ["install", "install_methods", "cache_info", "wrapped"]

_POLICY: dict = {}   # id(device) -> its Capabilities.eager_programs (devices live as long as the process)

# Functions left to the general path: they make arrays from non-arrays, return no array, return their input,
# or have shapes that depend on values (tracing them would fail for every key).
_EXCLUDED = frozenset({
    "__array_namespace_info__", "arange", "array", "asarray", "broadcast_shapes", "can_cast", "empty", "eye",
    "from_dlpack", "full", "identity", "indices", "isdtype", "issubdtype", "linspace", "logspace", "ones",
    "promote_types", "result_type", "tri", "zeros", "argwhere", "flatnonzero", "nonzero", "unique",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "bincount", "_copy", "_view",
    # checks of values that only concrete arrays get (a singular matrix, a q outside [0, 1] raise eagerly;
    # under jit the result is inf/NaN, as JAX's)
    "inv", "solve", "matrix_power", "tensorsolve", "tensorinv", "quantile", "percentile", "nanquantile",
    "nanpercentile",
})

_SLOT = object()     # where a program's template takes its next array
_KEY_SLOT = object()  # where it takes the words of typed keys (KeyArray)
_VALUE_LEAVES = frozenset({int, bool, str, type(None), type(Ellipsis), type,
                           dtypes.ScalarMeta})  # keyed by their value (ScalarMeta: fnp.float32...)


def _programs_size() -> int:
    return config.jit_global_cache_size // 2


def _seen_size() -> int:
    return config.eager_cache_size


class _Program:
    """A key's jitted program, or its tape (``eager_tape``: ``jitted`` is None) with its count of calls and the
    count at which the program is made (``limit``: ``TAPED_PROGRAM_CALL``, ``TAPE_BUDGET_S``).

    ``call`` is the program's direct entry (``Jitted.direct_entry``: the executable's entry, the output avals
    and structure), taken after the program's first call, which a hit calls itself: the key already matched
    the arrays' avals and device, which jit's hot path would compare again (~1 us a call). ``call`` is ``None``
    while there is no entry yet (jit's path serves and asks again after a call), ``False`` where there is none
    (jit's path serves from then on). ``jitted`` and ``tape`` both ``None``: the key takes the general path."""

    __slots__ = ("jitted", "used", "call", "out_avals", "out_tree", "single", "tape", "calls", "limit", "run")

    def __init__(self, jitted, tape=None, calls=0, replay=True):
        self.jitted, self.used, self.call = jitted, False, None
        self.tape, self.calls, self.limit = tape, calls, 0
        # the tape's replay (``Tape.replay``: a generated straight-line function), which the wrapper calls itself;
        # made at the tape's first replay (``_hit``) where ``replay`` is false
        self.run = tape.replay() if tape is not None and replay else None

    def take_hot(self, n, device):
        """Take the jitted function's direct entry (``Jitted.direct_entry``) for ``n`` arrays on ``device``, after
        the program's first call (its second would otherwise make jit's hot record through jit's keyed path:
        ~70 us, and 360 of them in the decode loop's second run on jax:0); ``call`` is ``False`` where it has
        none (jit's path serves from then on)."""
        entry = self.jitted.direct_entry(n, device)
        if not entry:
            self.call = entry  # None: asked again after the next call; False: never
            return
        self.call, self.out_avals, self.out_tree, self.single = entry


# A hit marks its program used (rehashing the key to reorder the LRU would cost more than the lookup);
# eviction gives used programs a second chance (CLOCK), as the eager cache does.
_programs = LRUCache(_programs_size, second_chance=used_since)
_programs_d = _programs._d
_seen = LRUCache(_seen_size)
_seen_d = _seen._d


_stats = {"programs": 0, "tapes": 0}  # programs made since the process started (a counter for tests and benchmarks)


def cache_info() -> dict:
    """``{"programs": n, "seen": n, "bound": n, "made": n}``: the cached programs, the keys seen but not yet given
    a program, the bound of the programs, and how many programs were made (traced and compiled, each once per
    key while it stays cached) since the process started."""
    return {"programs": len(_programs), "seen": len(_seen), "bound": _programs_size(), "made": _stats["programs"],
            "tapes": _stats["tapes"]}


def _add(x, key, arrays) -> bool:
    """Append ``x``'s part of a call's key (each value after its type, so the flat key reads one way only; an
    array's aval) and its arrays; False where ``x`` has no key (the call takes the general path)."""
    t = type(x)
    if t is ArrayImpl:
        key.append(x.aval)
        arrays.append(x)
    elif t in _VALUE_LEAVES:
        key += (t, x)
    elif t is KeyArray and type(x._data) is ArrayImpl:  # typed keys: their words are the program's argument
        key.append(t)
        key.append(x._data.aval)
        arrays.append(x._data)
    elif t is tuple or t is list:
        key += (t, len(x))
        return _add_all(x, key, arrays)
    elif t is float:
        key.append(t)
        key.append(x if x else str(x))  # 0.0 and -0.0 compare equal: their strings do not
    elif t is slice:
        key.append(t)
        for p in (x.start, x.stop, x.step):
            if p is not None and type(p) is not int:
                return False
            key.append(p)
    elif isinstance(x, np.dtype):
        key.append(np.dtype)
        key.append(x)
    elif t is complex:
        key.append(t)
        key.append(repr(x))
    elif isinstance(x, np.generic):
        key.append(t)
        key.append(x.tobytes())
    else:
        return False
    return True


def _add_all(xs, key, arrays) -> bool:
    """``_add`` of each of ``xs``, its first two cases inline (``concatenate([a, b])``, ``axes=(1, 0)``: no call
    per element)."""
    for x in xs:
        t = type(x)
        if t is ArrayImpl:
            key.append(x.aval)
            arrays.append(x)
        elif t in _VALUE_LEAVES:
            key += (t, x)
        elif not _add(x, key, arrays):
            return False
    return True


def _elsewhere(dev, arrays) -> bool:
    """Whether a call on ``arrays`` (all on ``dev``) runs on another device: none is committed and ``dev`` is not
    the default (JAX runs an operation on uncommitted arrays on the default device: the general path moves them)."""
    return dev is not DEFAULT_NOW[0] and dev is not current_default() and not any(a._committed for a in arrays)


def _keyed(fn, args, kwargs):
    """``(key, arrays)`` of a call, or None where the call takes the general path. Keyword arguments are keyed in
    the call's order (another order is another key, with the same program: ``_program`` fills them by name).
    The key does not say whether the device runs programs (``_policy``: asked on a miss, ``_early``)."""
    if not kwargs:  # one or two arrays on one device: the commonest calls, their key made at once
        n = len(args)
        if n == 2:
            x, y = args
            if type(x) is ArrayImpl and type(y) is ArrayImpl:
                dev = x._device
                if y._device is dev and not _elsewhere(dev, args):
                    return (fn, x.aval, y.aval, id(dev), config.generation), args
        elif n == 1:
            x = args[0]
            if type(x) is ArrayImpl and not _elsewhere(x._device, args):
                return (fn, x.aval, id(x._device), config.generation), args
    key = [fn]
    arrays = []
    if not _add_all(args, key, arrays):
        return None
    if kwargs:
        for name, x in kwargs.items():
            if name == "device" and x is not None:  # ``zeros_like(x, device=d)``: the key's program runs on x's
                return None                           # device; the general path puts the result on d
            t = type(x)
            if t in _VALUE_LEAVES:  # ``axis=-1, keepdims=True``
                key += (name, t, x)
            else:
                key.append(name)
                if not _add(x, key, arrays):
                    return None
    if not arrays:
        return None
    dev = arrays[0]._device
    if len(arrays) > 1:
        for a in arrays:
            if a._device is not dev:
                return None
    if _elsewhere(dev, arrays):
        return None
    key.append(id(dev))  # devices live as long as the process (a Device's own hash is a Python call)
    key.append(config.generation)
    return tuple(key), arrays


def _device_policy(dev) -> str:
    """``dev``'s ``Capabilities.eager_programs`` (kept by the device's id, which is the key's)."""
    policy = _POLICY.get(id(dev))
    if policy is None:
        policy = _POLICY[id(dev)] = dev.impl.capabilities(dev).eager_programs
    return policy


def _policy(key) -> str:
    """The ``eager_programs`` policy of a key's device (``_early`` read it first)."""
    return _POLICY[key[-2]]


def _template(x):
    t = type(x)
    if t is ArrayImpl:
        return _SLOT
    if t is KeyArray:
        return _KEY_SLOT
    if t is tuple or t is list:
        return t(_template(y) for y in x)
    return x


def _fill(x, arrays):
    if x is _SLOT:
        return next(arrays)
    if x is _KEY_SLOT:
        return KeyArray(next(arrays))
    t = type(x)
    if t is tuple or t is list:
        return t(_fill(y, arrays) for y in x)
    return x


def _program(fn, args, kwargs):
    """``g(*arrays)``: ``fn`` of the call's arguments with its arrays replaced by ``g``'s (in their order)."""
    args_t, kwargs_t = _template(args), {name: _template(v) for name, v in kwargs.items()}  # ``_keyed``'s order

    def program(*arrays):
        it = iter(arrays)
        a = _fill(args_t, it)
        return fn(*a, **{name: _fill(v, it) for name, v in kwargs_t.items()})
    program.__name__ = getattr(fn, "__name__", "program")
    program.__signature__ = _STAR_ARRAYS  # jit reads it: inspect.signature of a fresh closure costs ~30 us
    return program


_clock = time.perf_counter

_STAR_ARRAYS = inspect.Signature([inspect.Parameter("arrays", inspect.Parameter.VAR_POSITIONAL)])


_BY_VALUE = (float, complex)

#: Under ``"repeated_call"`` (mlx), a key *without a tape* gets its program at its ``REPEATED_CALL``-th call: the
#: calls before take the general path. Measured on mlx:0 (``mlx[cpu]``, the decode loop of
#: ``benchmarks/programs.py``): a program costs ~0.35 ms to trace and lower (GC included: up to 1 ms under load)
#: and saves ~10-15 us a call against the general path, whose MLX operations compile nothing; so a key pays for
#: its program after ~30 calls (a ski rental: at most twice the cost of the better choice made in hindsight).
REPEATED_CALL = 32

_NEVER = 1 << 62  # a count of calls no key reaches (``"tapes"``: no key gets a program)

_GENERAL_CALLS = {"second_call": 1, "first_call": 0, "repeated_call": None,  # None: REPEATED_CALL - 1
                  "tapes": _NEVER}


#: How many calls of a key take the general path before its tape (``eager_tape``) serves it; ``None``: no tape
#: (jax: its program comes at the first call); ``"tapes"`` (opencl, webgpu) as numpy, the tape never giving way to
#: a program (issue 28, twenty-fifth session: the eager decode loop of ``benchmarks/programs.py`` 8.9 -> 3.7-4.4 ms
#: of process CPU a pass on opencl:0, 20-23 -> 12.6-13 ms on webgpu:0, quiet; its record pass ~2x a general one). A recorded tape costs ~1.5x a general call (a traced one ~3x), and
#: then saves ~60-80% of each call. numpy: from the second call (the tape replaces the program its second call
#: made before, 1 ms and more); mlx: from the second too, recorded at the first (``_RECORD_FIRST``). A key whose
#: tape cannot be made keeps the schedule of ``_general_calls``.
_TAPE_CALLS = {"second_call": 1, "first_call": None, "repeated_call": 1, "tapes": 1}

#: The policies whose keys record their *first* call (``eager_tape.record``) where their tape serves from the
#: second (``_TAPE_CALLS``): the tape waits in the key's ``_seen`` entry, and enters the programs' cache at the
#: second call, so that keys called once fill neither that cache nor pay more than the record. Not the keys of
#: functions that ``eager_ops``' entries serve first (``eager_ops.FAST_FIRST``: ``exp``, ``subtract``...; their
#: second call takes the entry their first call learned, and never the tape). mlx: a record
#: costs ~1.3-1.6x a general first call (issue 28, fourteenth session), and then each later call of the key is
#: a tape's (~7 us against the general path's ~20 us in the decode loop of ``benchmarks/programs.py``), where
#: recording the second call left that call at the general path's price plus the record's.
_RECORD_FIRST = frozenset({"repeated_call"})

#: Under ``_RECORD_FIRST``, a function whose first calls made this many tapes in a row with none of their keys
#: called again (``_unpromoted``) stops recording its keys' first calls: a loop whose shapes grow (a decode loop's
#: cache, a stack of ever more rows) makes a new key at every step, and each record costs ~0.3-0.6x a general call
#: for a tape no call runs (issue 28: 20-25% of mlx:0's first pass of such a loop). Its keys then record at their
#: second call (``_taped``, as numpy's), and the first key of it called a second time resumes the records. The
#: cost moves to a second pass of such a loop, whose keys past the bound record instead of replaying: at 64, the
#: decode loop of ``benchmarks/programs.py`` (40 steps, two products a step) read 3.5 -> 5.5 ms in its second pass
#: for ~8% off its first (s20-mlxfirst, load 15-17), so the bound sits above the loops that are run again.
RECORD_UNPROMOTED = 256

#: function -> how many of its keys' first calls made a tape since one of its keys was last called a second time
#: (counted without a lock: a lost count is harmless; one entry per wrapped function, a fixed set).
_unpromoted: dict = {}

#: A key served by its tape gets its program at its ``TAPED_PROGRAM_CALL``-th call, or once its tape has run for
#: ``TAPE_BUDGET_S`` seconds in all (counted as calls at the time of the tape's first run), whichever comes
#: first (a ski rental with the tape's own time as the rent):
#: a program costs 0.35-1.5 ms to trace and lower (and its share of the garbage collector's gen-2 passes) and
#: saves ~1-5 us a call against a tape on small arrays (numpy:0, mlx:0), more on large ones where the program
#: fuses (numpy:0, 1M elements: ``std`` 2.9 -> 2.2 ms, ``softmax`` 5.4 -> 3.0 ms).
TAPED_PROGRAM_CALL = 1024
TAPE_BUDGET_S = 0.005


def _tape_calls(key):
    n = _TAPE_CALLS[_policy(key)]
    return _NEVER if n is None else n


def _general_calls(key) -> int:
    """How many calls of a key take the general path before its program is made: one where the device
    compiles programs cheaply (``"second_call"``) or the key holds a float or complex constant (a NumPy one
    too), which a loop may change on every call (under ``_WEAK_FLOAT_POLICIES`` only the floats that could not go
    in as inputs: ``_weak_float_call`` served the others); ``REPEATED_CALL - 1`` under ``"repeated_call"``."""
    n = _GENERAL_CALLS[_policy(key)]
    if n is None:
        return REPEATED_CALL - 1
    if n == 0 and any(type(k) is type and issubclass(k, _BY_VALUE + (np.inexact,)) for k in key):
        return 1
    return n


def _make(fn, args, kwargs, key, arrays, general=None):
    """The key's program, made and called (or the general path's result, where it cannot be made: ``fn`` of the
    call's arguments, or ``general``'s result where it is given)."""
    # a fresh function per key: caches of its own, not an entry of jit's table of functions
    jitted = Jitted(_program(fn, args, kwargs), shared=False)
    _stats["programs"] += 1
    try:
        compiling.eager = True
        with np.errstate(all="ignore"):  # tracing converts literals the general path converts quietly
            out = jitted(*arrays)
    except Exception:  # not traceable as a program (or an error): the general path, from now on
        compiling.eager = False
        old = _programs_d.get(key)
        if old is not None and old.tape is not None:
            old.limit = float("inf")  # the key keeps its tape
        else:
            _programs.put(key, _Program(None))
        return fn(*args, **kwargs) if general is None else general()
    finally:
        compiling.eager = False
    p = _Program(jitted)
    p.take_hot(len(arrays), arrays[0]._device)
    _programs.set(key, p)
    _seen.pop(key)
    return out


_UNSEEN = object()  # ``_early``'s default: the caller did not look the key up in ``_seen``


def _early(fn, args, kwargs, key, arrays, seen=_UNSEEN):
    """A call of a key without a program nor a tape: the general path (counted), the key's tape made now
    (``_taped``, from the call ``_tape_calls`` says), or its program made now (``_make``). ``seen``: the key's
    ``_seen`` entry where the caller looked it up already."""
    # [calls so far, tape failed (True), or its record refused (_TRACE: the next tape is traced)]: counted in place
    # (no lock; a lost count is harmless). Looked up without reordering (``_seen_d``: a reorder re-hashes the key,
    # ~0.3 us of a general call): the keys not yet given a tape or a program leave in the order they came, and a
    # key pushed out before its tape's call only counts its calls again.
    if seen is _UNSEEN:
        seen = _seen_d.get(key)
    if seen is None:
        if _device_policy(arrays[0]._device) == "off":  # kernels per primitive (opencl, webgpu): the general path
            return fn(*args, **kwargs)
        if (_policy(key) in _RECORD_FIRST and _tape_calls(key) == 1 and _records_first(fn, arrays)
                and _unpromoted.get(fn, 0) < RECORD_UNPROMOTED):
            return _first_recorded(fn, args, kwargs, key, arrays)
    elif len(seen) > 2 and seen[1] is False:  # the first call's recorded tape: it serves from now on
        return _promoted(fn, args, kwargs, key, arrays, seen)
    elif fn in _unpromoted:  # a key called again: its function's first calls are worth recording
        _unpromoted.pop(fn, None)
    if _policy(key) in _WEAK_FLOAT_POLICIES:
        out = _weak_float_call(fn, args, kwargs, key, arrays, seen)
        if out is not _NO_PROGRAM:
            return out
    n = 0 if seen is None else seen[0]
    if n >= _tape_calls(key) and (seen is None or seen[1] is not True):
        out = _taped(fn, args, kwargs, key, arrays, n, seen is None or seen[1] is False)
        if type(out) is _Refused:  # the call ran (its result stands); its tape is traced at the next call
            seen = _seen.get(key)
            if seen is None:
                seen = _seen.put(key, [n, _TRACE])
            seen[0], seen[1] = n + 1, _TRACE
            return out.out
        if out is not _NO_TAPE:
            return out
        seen = _seen.get(key)
        if seen is None:
            seen = _seen.put(key, [n, True])
        seen[1] = True
    if n >= _general_calls(key):
        return _make(fn, args, kwargs, key, arrays)
    if seen is None:
        _seen.put(key, [1, False])
    else:
        seen[0] = n + 1
    return fn(*args, **kwargs)


#: The policies under which a key's Python floats that float32 holds exactly are its program's runtime inputs
#: (weakly typed float32 scalars, as ``jax.jit`` passes Python floats) from its first call: jax, where the general
#: path compiles one XLA program per primitive and shape, and a key whose floats were constants waited for its
#: second call (``_general_calls``), so that functions called once per shape with float constants (random
#: initialisers: ``truncated_normal(key, -2.0, 2.0, shape)``) compiled per primitive (issue 28: a stax ``Dense``
#: init made 43 compiles where JAX's made 13). Only floats that float32 holds exactly: the literal and the input
#: then have one value and one aval (weak float32), so promotion and rounding are the literal's (a float16 result
#: rounds the float once either way); others (``0.1``) keep their value keys.
_WEAK_FLOAT_POLICIES = frozenset({"first_call"})

_NO_PROGRAM = object()
_F32_MAX = float(np.finfo(np.float32).max)


def _exact_f32(x) -> bool:
    """Whether the Python float ``x`` is a float32 value (NaN not: its payload would not be kept)."""
    if x != x:
        return False
    if abs(x) > _F32_MAX:
        return abs(x) == float("inf")
    return float(np.float32(x)) == x


def _weak_floats(x, dev):
    """``x`` with each Python float that float32 holds exactly (``_exact_f32``) made a weakly typed float32 scalar
    on ``dev``, inside tuples and lists; ``x`` itself where it holds none."""
    t = type(x)
    if t is float:
        if not _exact_f32(x):
            return x
        if x == 0:  # (the backends' caches of scalars leave out zeros: -0.0 == 0.0)
            z = (str(x), id(dev))
            buf = _ZEROS.get(z)
            if buf is None:
                buf = _ZEROS[z] = dev.impl.scalar_to_device(x, dtypes.float32, dev)
        else:
            buf = dev.impl.scalar_to_device(x, dtypes.float32, dev)
        return ArrayImpl.make(_WEAK_F32, dev, buf, False)
    if t is tuple or t is list:
        ys = [_weak_floats(y, dev) for y in x]
        return x if all(y is z for y, z in zip(ys, x)) else t(ys)
    return x


_WEAK_F32 = ShapedArray((), dtypes.float32, True)
_ZEROS: dict = {}  # (str(0.0) or str(-0.0), id(device)) -> its buffer (devices live as long as the process)


def _weak_float_call(fn, args, kwargs, key, arrays, seen):
    """A call whose float constants go in as weakly typed scalars (``_WEAK_FLOAT_POLICIES``): served by the
    program of the key where they are arrays (made now where there is none), or ``_NO_PROGRAM`` where the call
    holds no such float or that program cannot be made (``fn`` needs a float's value: the call's own ``key``
    decides, with its floats as constants). At ``key``'s second call (``seen``) the key gets an alias of that
    program (``_alias``), so that a call repeated with the same floats is a hit."""
    weak = _weak_keyed(fn, args, kwargs, arrays[0]._device)
    if weak is None:
        return _NO_PROGRAM
    wargs, wkwargs, wkey, warrays = weak
    p = _programs_d.get(wkey)
    if p is None:
        out = _make(fn, wargs, wkwargs, wkey, warrays, general=lambda: _NO_PROGRAM)
        if out is _NO_PROGRAM:
            return out
        p = _programs_d.get(wkey)
    elif p.jitted is None:
        return _NO_PROGRAM
    else:
        out = _hit(fn, args, kwargs, wkey, warrays, p)
    if seen is None:
        _seen.put(key, [1, False])
    elif p is not None and p.call:
        _programs.put(key, _alias(p, arrays, warrays))
        _seen.pop(key)
    return out


def _weak_keyed(fn, args, kwargs, dev):
    """``(args, kwargs, key, arrays)`` of a call with its floats that float32 holds made weakly typed scalars on
    ``dev`` (``_weak_floats``); None where it holds none or that call has no key."""
    wargs = _weak_floats(args, dev)
    wkwargs = {name: _weak_floats(v, dev) for name, v in kwargs.items()}
    if wargs is args and all(wkwargs[name] is v for name, v in kwargs.items()):
        return None
    keyed = _keyed(fn, wargs, wkwargs)
    return None if keyed is None else (wargs, wkwargs) + keyed


def _alias(p, arrays, warrays):
    """A ``_Program`` for a key whose floats went in as the weakly typed scalars of ``warrays`` (the arrays of
    ``p``'s key): its direct entry takes the key's own arrays and puts those scalars' buffers in their places."""
    plan, j = [], 0
    for w in warrays:
        if j < len(arrays) and w is arrays[j]:
            plan.append(j)
            j += 1
        else:
            plan.append(w._buf)  # (a buffer, never an int)
    plan = tuple(plan)
    call, jitted = p.call, p.jitted

    def direct(*bufs):
        return call(*[bufs[i] if type(i) is int else i for i in plan])

    def program(*xs):
        return jitted(*[xs[i] if type(i) is int else w for i, w in zip(plan, warrays)])
    a = _Program(program)
    a.call, a.out_avals, a.out_tree, a.single = direct, p.out_avals, p.out_tree, p.single
    return a


def _taped(fn, args, kwargs, key, arrays, n, recorded=True):
    """The key's tape made and run (its ``_Program`` entry kept), or ``_NO_TAPE`` where it cannot be made. The
    time of this first run sets the call at which the key gets its program (``TAPE_BUDGET_S``).

    ``recorded``: the tape is first made by recording this call's general path (``eager_tape.record``: the
    executables it runs, ~1.1x a general call, where a trace costs ~3x one); where the record is refused (a host
    read, a value from a path that runs no eager executable: ``eager_tape.Recorder``) the call's result is
    returned as ``_Refused`` and the next call traces (``eager_tape.make``); so does a key whose arrays are not
    distinct objects (a record cannot tell the places of one array apart)."""
    if recorded and len(arrays) == len({id(a) for a in arrays}):
        got = eager_tape.record(lambda: fn(*args, **kwargs), arrays)  # (the general path: its own warnings)
        if got is not None:
            out, t, spent = got
            if t is None:
                return _Refused(out)
            _stats["tapes"] += 1
            p = _Program(None, t, n + 1, replay=False)  # (its replay made at its first: this call is dear)
            # the tape's time per call: its executables' (recorded) and ~0.5 us of Python a step
            _schedule(p, n, spent + 5e-7 * (len(t.steps) + 1), key)
            _programs.put(key, p)
            _seen.pop(key)
            return out
    _stats["tapes"] += 1
    with np.errstate(all="ignore"):  # tracing converts literals the general path converts quietly
        t = eager_tape.make(_program(fn, args, kwargs), arrays, compile=_policy(key) != "tapes")
    if t is None:
        return _NO_TAPE
    p = _Program(None, t, n + 1)
    t0 = _clock()
    try:
        out = p.run(arrays)
    except Exception:  # the general path raises its own error (or succeeds)
        out = None
    _schedule(p, n, _clock() - t0, key)
    _programs.put(key, p)
    _seen.pop(key)
    return out if out is not None else fn(*args, **kwargs)


def _records_first(fn, arrays) -> bool:
    """Whether a first call of ``fn`` on ``arrays`` is recorded (``_RECORD_FIRST``): not where ``eager_ops``'
    entries serve its next calls (``eager_ops.FAST_FIRST``, arrays of one aval: those entries leave operands
    of two avals, a broadcast, to the function), nor where one array comes twice (a record cannot tell the places
    apart)."""
    if _WRAPPERS.get(fn) in eager_ops.FAST_FIRST:
        av = arrays[0].aval
        if all(a.aval == av for a in arrays):
            return False
    return len(arrays) == 1 or len(arrays) == len({id(a) for a in arrays})


def _first_recorded(fn, args, kwargs, key, arrays):
    """A key's first call under ``_RECORD_FIRST``: the general path, recorded; its tape (or, where the record is
    refused, the state that traces it at the next call) kept in the key's ``_seen`` entry."""
    got = eager_tape.record(lambda: fn(*args, **kwargs), arrays)  # (the general path: its own warnings)
    if got is None:  # another record under way (a nested key): the next call records
        _seen.put(key, [1, False])
        return fn(*args, **kwargs)
    out, t, spent = got
    if t is None:
        _seen.put(key, [1, _TRACE])
        return out
    _stats["tapes"] += 1
    _unpromoted[fn] = _unpromoted.get(fn, 0) + 1
    # the key's entry for its second call, made now (its replay generated): the second call only moves it
    p = _Program(None, t, 2)
    _schedule(p, 0, spent + 5e-7 * (len(t.steps) + 1), key)
    _seen.put(key, [1, False, p])
    return out


def _promoted(fn, args, kwargs, key, arrays, seen):
    """A key's second call under ``_RECORD_FIRST``: its recorded tape's entry (made by ``_first_recorded``)
    enters the programs' cache and runs (the general path where it cannot: a deleted array, an error, which the
    general path raises)."""
    p = seen[2]
    _programs.put(key, p)
    _seen_d.pop(key, None)  # (one GIL-atomic operation, as ``_early``'s lookup: no lock)
    if fn in _unpromoted:
        _unpromoted.pop(fn, None)  # (a key of it came back: its first calls keep recording)
    try:
        out = p.run(arrays)
    except Exception:  # the general path raises its own error (or succeeds)
        out = None
    return out if out is not None else fn(*args, **kwargs)


def _schedule(p, n, spent, key):
    """Set the call at which a tape that takes ``spent`` seconds a call gives way to its program (never under
    ``"tapes"``)."""
    if _policy(key) == "tapes":
        p.limit = float("inf")
        return
    p.limit = TAPED_PROGRAM_CALL - 1  # calls before the program's
    if spent > 0:
        p.limit = min(p.limit, n + 1 + TAPE_BUDGET_S / spent)


_NO_TAPE = object()
_TRACE = "trace"  # a ``_seen`` entry's state: the key's record was refused, its tape is traced


class _Refused:
    """A recorded call's result whose record made no tape."""

    __slots__ = ("out",)

    def __init__(self, out):
        self.out = out


def _hit(fn, args, kwargs, key, arrays, p):
    """A call of a key the programs' cache holds (``p``), but for its tape's replay, which the wrapper runs
    itself: the program's direct entry, jit's path, the tape's last call before its program (``_make``), or the
    general path (a key whose program and tape both failed)."""
    p.used = True
    call = p.call
    if call:
        bufs = []
        committed = False
        for a in arrays:
            b = a._buf
            if b is None:  # deleted or donated: jit's path raises (below)
                break
            bufs.append(b)
            if a._committed:
                committed = True
        else:
            try:
                outs = call(*bufs)
            except Exception:  # the general path raises its own error (or succeeds)
                return fn(*args, **kwargs)
            dev = arrays[0]._device
            if p.single:
                r = ArrayImpl()  # ArrayImpl.make inline, as jit's hot path
                r.aval, r._device, r._buf, r._committed, r._host = p.out_avals[0], dev, outs[0], committed, None
                return r
            return p.out_tree.unflatten([ArrayImpl.make(av, dev, b, committed) for av, b in zip(p.out_avals, outs)])
    if p.jitted is None:
        if p.tape is None:
            return fn(*args, **kwargs)
        if p.run is None and p.calls < p.limit:  # a recorded tape's first replay: its function made now
            p.run = p.tape.replay()
            p.calls += 1
            try:
                out = p.run(arrays)
            except Exception:  # the general path raises its own error (or succeeds)
                out = None
            return out if out is not None else fn(*args, **kwargs)
        return _make(fn, args, kwargs, key, arrays)  # (the wrapper replays a tape below its limit)
    try:
        out = p.jitted(*arrays)
    except Exception:  # the general path raises its own error (or succeeds)
        return fn(*args, **kwargs)
    if call is None:
        p.take_hot(len(arrays), arrays[0]._device)
    return out


def _profiled(fn, args, kwargs):
    """A call while ``fnarray.profiler`` records (its eager apply installed, so the wrapper's fast test fails):
    the key's program where the unprofiled call runs one, through ``Jitted.__call__``, which the profiler times
    (a ``dispatch`` span ``jit(<function>)`` with a ``kernel`` span of the executable); else the general path,
    whose primitives the profiler times one by one (a key's tape, whose replay would run untimed executables;
    a key not yet seen on numpy:0 and mlx:0, whose record would keep the profiler's timed executables; a call
    that an ``eager_ops`` entry serves unprofiled, which never reaches the wrapper: ``y * 1.0001`` on jax:0, whose
    key's second call would make a program).

    Without this, a jax:0 function that its program served from the first call has no per-primitive eager
    entries, so a profiled loop of it compiled each primitive once inside the trace, a cost the unprofiled loop
    never pays, and the verdict blamed compiling (issue 28). A key's miss on a ``"first_call"`` device takes
    ``_early``, as unprofiled: one compile of the whole function (its trace, lowering and compile in spans), not
    one per primitive; its floats that float32 holds go in as the weak inputs of the program that serves them
    (``_weak_float_call``), called through ``Jitted.__call__`` too."""
    if tracing.trace_level() != 0 or placement.debug_check is not None:
        return fn(*args, **kwargs)
    keyed = _keyed(fn, args, kwargs)
    if keyed is None:
        return fn(*args, **kwargs)
    key, arrays = keyed
    p = _programs_d.get(key)
    if p is None:
        if _device_policy(arrays[0]._device) != "first_call":
            return fn(*args, **kwargs)
        p = _weak_program(fn, args, kwargs, arrays[0]._device)
        if p is None:
            if not kwargs and eager_ops.serves(_WRAPPERS.get(fn), args):  # unprofiled, its entry serves it
                return fn(*args, **kwargs)
            return _early(fn, args, kwargs, key, arrays)
        p, arrays = p
    if p.jitted is None:
        return fn(*args, **kwargs)
    p.used = True
    try:
        return p.jitted(*arrays)
    except Exception:  # the general path raises its own error (or succeeds)
        return fn(*args, **kwargs)


def _weak_program(fn, args, kwargs, dev):
    """``(program, arrays)`` of the key where the call's floats are weak float32 inputs (``_weak_float_call``),
    where that key has a program; else None."""
    weak = _weak_keyed(fn, args, kwargs, dev)
    p = None if weak is None else _programs_d.get(weak[2])
    return None if p is None or p.jitted is None else (p, weak[3])


_WRAPPERS: dict = {}  # function -> its wrapper (a function exported by several modules is wrapped once)
_WRAPPED: set = set()  # the wrappers themselves


def _wrap(fn, module):
    w = _WRAPPERS.get(fn)
    if w is not None:
        return w
    if fn in _WRAPPED:
        return fn  # already a wrapper (imported from a module installed before)
    f = _wrapper(fn, f"{module}.{fn.__name__}")
    _WRAPPERS[fn] = functools.update_wrapper(f, fn)
    _WRAPPED.add(f)
    # Named after the namespace that exports it, where pickle and checkpoints (which refer to functions by
    # module and name, and check that the name gives the same object) find this wrapper.
    f.__module__ = module
    if "<" in f.__qualname__:  # made by a factory (``_arith.<locals>.f``): its public name
        f.__qualname__ = f.__name__
    return f


# A backend's rules of any shape (``fnarray.devices.shapeless``: mlx's float32 calls), asked first where the call's
# first array (``concatenate``'s: its list's first) has a dtype that the rules of its device serve: other devices'
# calls pay two lookups, no call.
_SHAPELESS = shapeless.RULES
_SERVED = shapeless.SERVED


def _wrapper(fn, qualname):
    """``fn``'s wrapper (``_wrap``; ``qualname``: its namespace's name): a rule of any shape, else the keyed call."""
    def f(*args, **kwargs):
        if (tracing.plain or (_STATE.dynamic[-1].level == 0 and tracing._eager_apply is _APPLY)) and \
                placement.debug_check is None:   # (``_fast_now()`` inline: every traced namespace call asks)
            x = args[0] if (n := len(args)) else None
            rule = _SHAPELESS.get(qualname)
            a = x[0] if rule is not None and (type(x) is list or type(x) is tuple) and x else x
            if (rule is not None and type(a) is ArrayImpl and a.aval.dtype in _SERVED.get(id(a._device), ())
                    and array_impl.recording is None  # (no record under way: ``eager_tape``)
                    and (a._device is DEFAULT_NOW[0] or a._committed or a._device is current_default())):
                out = rule(args, kwargs)
                if out is not None:
                    return out
            # ``_keyed``'s commonest keys made here, no call (an uncommitted array off the default device: ``_keyed``)
            keyed = None
            if type(x) is ArrayImpl and (x._device is DEFAULT_NOW[0] or x._committed or x._device is current_default()):
                if n == 1:
                    if not kwargs:
                        keyed = (fn, x.aval, id(x._device), config.generation), args
                    else:
                        key = [fn, x.aval]
                        for name, v in kwargs.items():
                            t = type(v)
                            if t not in _VALUE_LEAVES or (name == "device" and v is not None):  # (``_keyed``)
                                break
                            key += (name, t, v)
                        else:
                            key += (id(x._device), config.generation)
                            keyed = tuple(key), args
                elif n == 2 and not kwargs:
                    y = args[1]
                    if type(y) is ArrayImpl and y._device is x._device:
                        keyed = (fn, x.aval, y.aval, id(x._device), config.generation), args
            elif isinstance(x, tracing.Tracer):  # a transformation's value: no key holds one (the general path)
                return fn(*args, **kwargs)
            if keyed is None:
                keyed = _keyed(fn, args, kwargs)
            if keyed is not None:
                key, arrays = keyed
                p = _programs_d.get(key)
                if p is None:
                    seen = _seen_d.get(key)
                    if seen is not None and len(seen) > 2 and seen[1] is False:  # (``_early``'s first case)
                        return _promoted(fn, args, kwargs, key, arrays, seen)
                    return _early(fn, args, kwargs, key, arrays, seen)
                run, n = p.run, p.calls
                if run is None or n >= p.limit:
                    return _hit(fn, args, kwargs, key, arrays, p)
                p.used, p.calls = True, n + 1  # (no lock: a count lost to a race is harmless)
                try:
                    out = run(arrays)  # the key's tape (``Tape.replay``)
                except Exception:  # the general path raises its own error (or succeeds)
                    out = None
                if out is not None:
                    return out
        elif _profile.recorder is not None:
            return _profiled(fn, args, kwargs)
        return fn(*args, **kwargs)
    return f


def wrapped(f):
    """The function that ``f`` wraps where ``f`` is one of this module's wrappers (``install``), else None: its
    general path, without the key's program (``eager_ops`` runs it for an operator's first call on a new shape)."""
    return f.__wrapped__ if f in _WRAPPED else None


def _rule_first(ns, name, generic):
    """``ArrayImpl``'s method ``generic`` (``Array``'s, which calls ``ns``'s function ``name`` on the array and its
    arguments) with the backend's rule of any shape (``_SHAPELESS``) asked first on a device that has rules (the rule
    tests the dtype), under the wrapper's own tests, then that function itself: ``x.sum(axis=-1)`` on mlx:0's
    float32 reaches MLX two Python frames sooner (``Array``'s forwarding method and the wrapper), other calls one
    sooner (``Array``'s method)."""
    qualname = f"{ns.__name__}.{name}"

    def method(self, *args, **kwargs):
        if (id(self._device) in _SERVED and (tracing.plain or _fast_now())
                and placement.debug_check is None and array_impl.recording is None and placement.placed(self)):
            rule = _SHAPELESS.get(qualname)
            if rule is not None:
                out = rule((self, *args), kwargs)
                if out is not None:
                    return out
        return getattr(ns, name)(self, *args, **kwargs)
    method.__name__, method.__doc__ = generic.__name__, generic.__doc__
    return method


def _rule_first_unary(ns, name, generic):
    """``_rule_first`` of a method of ``self`` alone (``x.T``), which packs no arguments."""
    qualname = f"{ns.__name__}.{name}"

    def method(self):
        if (id(self._device) in _SERVED and (tracing.plain or _fast_now())
                and placement.debug_check is None and array_impl.recording is None and placement.placed(self)):
            rule = _SHAPELESS.get(qualname)
            if rule is not None:
                out = rule((self,), _NO_KWARGS)
                if out is not None:
                    return out
        return getattr(ns, name)(self)
    method.__name__, method.__doc__ = generic.__name__, generic.__doc__
    return method


def _rule_first_binary(ns, name, generic):
    """``_rule_first`` of an operator (``x @ y``), which packs no arguments; an operand that is no ``ArrayImpl``
    takes ``generic`` (``Array``'s operator: ``NotImplemented`` for a foreign one)."""
    qualname = f"{ns.__name__}.{name}"

    def method(self, other):
        if type(other) is not ArrayImpl:
            return generic(self, other)
        if (id(self._device) in _SERVED and (tracing.plain or _fast_now())
                and placement.debug_check is None and array_impl.recording is None
                and (other._committed or placement.placed(self))):
            rule = _SHAPELESS.get(qualname)
            if rule is not None:
                out = rule((self, other), _NO_KWARGS)
                if out is not None:
                    return out
        return getattr(ns, name)(self, other)
    method.__name__, method.__doc__ = generic.__name__, generic.__doc__
    return method


_NO_KWARGS: dict = {}


def install_methods(ns) -> None:
    """Give ``ArrayImpl`` the methods of ``_rule_first`` over ``Array``'s (``ns``: ``fnarray.numpy``, whose functions
    they call): ``@``, ``.T``, ``.sum``, ``.max``, ``.min``."""
    from fnarray.core.array import Array
    for name in ("sum", "max", "min"):
        setattr(ArrayImpl, name, _rule_first(ns, name, getattr(Array, name)))
    ArrayImpl.__matmul__ = _rule_first_binary(ns, "matmul", Array.__matmul__)
    ArrayImpl.T = property(_rule_first_unary(ns, "transpose", Array.T.fget), doc=Array.T.__doc__)


def install(ns, excluded=(), private=()) -> None:
    """Wrap ``ns``'s array functions (those in its ``__all__``, and their aliases) as the module docstring says:
    ``fnarray.numpy`` and its ``linalg`` and ``fft``, ``fnarray.nn``, ``fnarray.random``, ``fnarray.scipy``'s
    ``special`` and ``linalg`` install themselves. ``excluded``: more names to leave alone; ``private``: private
    functions to wrap too (a public function, excluded, that picks one of them by its static arguments:
    ``random.truncated_normal``)."""
    public = set(ns.__all__) | {"_getitem", "_reshape_method", "_transpose_method"} | set(private)
    for name, value in list(vars(ns).items()):
        if (isinstance(value, types.FunctionType) and name in public and name not in _EXCLUDED
                and name not in excluded):
            setattr(ns, name, _wrap(value, ns.__name__))
