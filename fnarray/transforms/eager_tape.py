"""Tapes: a key's program run equation by equation on the eager cache's executables (``eager_jit``'s middle stage).

``fnarray.transforms.eager_jit`` keys a namespace call on concrete arrays by its function, argument structure,
avals, constants, device and configuration. Its general path (``fnarray.numpy``'s Python, promotion, ``bind``,
the eager cache) costs 10-25 us a call on numpy:0 and mlx:0 (``benchmarks/call_path.py``); a whole-function
program costs 0.35-1.5 ms to trace, partition and lower. A tape sits between them: the function traced once at
the key's avals (``trace_to_program``, ~30-80 us: no partitioning, no lowering), each equation given the
executable the general path itself runs for that primitive at those avals (``placement._eager_executable``:
shared with the general path, compiled there on a miss), and then replayed per call as a flat list of
``executable(*buffers)`` calls: a few microseconds, with the general path's own numerics (the same one-primitive
executables, in the program's order).

A tape is first made by *recording* the call that needs it (``record``, ``Recorder``): the call runs the general
path as it would, and ``placement._eager_run`` hands each primitive's executable to the recorder (a primitive
the eager cache holds comes from ``bind``'s direct path with its implementation, ``Recorder.record_one``), which
notes where its inputs came from. That costs ~1.5x one general call where a trace costs ~3x (issue 28: a record
of the decode loop's keys on mlx:0 14-16 -> 10.2-10.4 ms, fourteenth session; their general path ~6.5). A record
is refused (the next call traces, as below) where the function read a value on the host while recording (its
Python may branch on it, where a trace would have failed), used a value that no recorded executable made (an operator's
fast entry, a nested key's tape or program, a jitted call, an array made from the host inside the function), ran
on another device or a host callback, or got one array in two places (a record cannot tell them apart).

A trace fails where the function reads values (a data-dependent shape, a check of a concrete value): the key
then has no tape (``make`` returns ``None``) and its caller keeps the general path, as a program that fails to
trace does. So does a program whose output is a literal or depends on no argument, whose constants are not
arrays of the key's device, or that holds an equation with effects (a host callback: left to the general path,
so that callbacks keep one place of execution).

Replays run on the arrays' device, as the general path does; an output is committed where an argument it depends
on is (the general path's rule, primitive by primitive). Equations without array inputs (``iota``, a broadcast
literal) run there too, as in a program; an *output* that depends on no argument (``zeros_like(x)``) would lie on
the default device, uncommitted, on the general path: such a function gets no tape. Any error of a replay is the
caller's to handle (``eager_jit`` then runs the general path, which raises its own error).
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np

from fnarray import tree_util
from fnarray.core.builder import trace_to_program
from fnarray.core.ir import Literal
from fnarray.core.passes import has_effect
from fnarray.core.primitives import EFFECTS
from fnarray.core.subprograms import subprograms
from fnarray.devices import array_impl, placement
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.backend import Backend
from fnarray.transforms import tape_source

__all__ = ["Tape", "make", "record", "Recorder"]

_clock = time.perf_counter
_SCALARS = frozenset({bool, int, float, complex})
_lock = threading.Lock()

# A step may call NumPy's function itself (the numpy backend's ``eager_call``): its RuntimeWarnings (``x / 0.0``,
# overflow to inf) are silenced here as the numpy backend's and ``eager_ops``' are (the general path warns not).
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.transforms\.eager_tape")


class Tape:
    """A traced program as ``steps``: ``(call, input slots, single)`` each, whose outputs (one buffer where
    ``single``, else a list) are appended to the slots.

    Slots: the call's array buffers (in ``eager_jit``'s key order), then ``fixed`` (the program's constants and
    literal buffers), then each step's outputs in order. ``outs`` are the output slots, ``out_avals`` their avals,
    ``out_tree`` the output structure (``single``: one array); ``out_deps``, where an output depends on some of the
    arguments only, the arguments of each (whose committed flags make its own, as on the general path).
    """

    __slots__ = ("steps", "fixed", "outs", "out_avals", "out_tree", "single", "n", "one", "out_deps", "nouts")

    def __init__(self, steps, fixed, outs, out_avals, out_tree, n, out_deps=None, nouts=None):
        self.steps, self.fixed, self.outs, self.out_avals, self.out_tree = steps, fixed, outs, out_avals, out_tree
        self.single = out_tree.num_nodes == 1 and out_tree.num_leaves == 1
        self.n, self.out_deps, self.nouts = n, out_deps, nouts
        # the commonest tape: one step of one output over the arguments in order, returned (``run``'s short path)
        self.one = (steps[0][0] if len(steps) == 1 and steps[0][2] and steps[0][1] == tuple(range(n)) and not fixed
                    and self.single and outs == (n,) and out_deps is None else None)

    def replay(self):
        """``run`` as one generated function of ``arrays`` (``fnarray.transforms.tape_source``: a straight line of
        the steps' calls, ~3x fewer bytecodes), or ``run`` itself where the tape is longer than
        ``tape_source.MAX_STEPS`` (or its arguments ``MAX_SLOTS``) or its steps' output counts are not known."""
        if self.nouts is not None:
            fn = tape_source.replay(self, self.nouts)
            if fn is not None:
                return fn
        return self.run

    def run(self, arrays):
        """The outputs (a pytree of ``ArrayImpl``) of the traced function of ``arrays`` (``ArrayImpl`` s of the
        key's avals on one device). Raises what a backend raises; ``None`` where an array was donated/deleted."""
        env = []
        committed = False
        for a in arrays:
            b = a._buf
            if b is None:
                return None
            env.append(b)
            if a._committed:
                committed = True
        one = self.one
        if one is not None:
            r = ArrayImpl()  # ArrayImpl.make inline, as jit's hot path
            r.aval, r._device, r._buf, r._committed, r._host = self.out_avals[0], arrays[0]._device, one(*env), \
                committed, None
            return r
        env += self.fixed
        for call, ins, single in self.steps:
            if single:
                env.append(call(*[env[i] for i in ins]))
            else:
                env += call(*[env[i] for i in ins])
        dev = arrays[0]._device
        if self.out_deps is not None:  # outputs that depend on some of the arguments only
            return self.out_tree.unflatten([
                arrays[i] if i < self.n else ArrayImpl.make(av, dev, env[i], any(arrays[k]._committed for k in ks))
                for i, av, ks in zip(self.outs, self.out_avals, self.out_deps)])
        if self.single:
            i = self.outs[0]
            if i < self.n:  # the function returned its argument
                return arrays[i]
            r = ArrayImpl()  # ArrayImpl.make inline, as jit's hot path
            r.aval, r._device, r._buf, r._committed, r._host = self.out_avals[0], dev, env[i], committed, None
            return r
        return self.out_tree.unflatten([arrays[i] if i < self.n else ArrayImpl.make(av, dev, env[i], committed)
                                        for i, av in zip(self.outs, self.out_avals)])


class _Step:
    """What ``has_effect`` reads of a recorded equation."""

    __slots__ = ("primitive", "params")

    def __init__(self, primitive, params):
        self.primitive, self.params = primitive, params


class Recorder:
    """The executables a general eager call runs, recorded as a tape's steps (``record``).

    ``placement._eager_run`` hands each primitive of this thread to ``record``, which runs it and notes which
    values it read: a call's argument, an earlier step's output, or a Python scalar converted on the device (a
    constant of the key, as a traced literal). Anything else taints the record (``tainted``): a value made by a
    path that runs no eager executable (an operator's fast entry, a nested key's tape or program, a jitted call,
    a transfer), an array from the host, another device, an effect; and so does any host read of a value while
    recording (``ArrayImpl._value``, DLPack): a function whose Python read a value may take another branch for
    other values, which a trace would have refused (a concrete value of a tracer)."""

    __slots__ = ("thread", "device", "slots", "deps", "keep", "fixed", "steps", "tainted", "spent", "n", "outputs",
                 "eqns")

    def __init__(self, arrays):
        self.n = n = len(arrays)
        self.thread = threading.get_ident()
        self.device = arrays[0]._device
        # each value's slot: an argument's index, ``n + k`` for the k-th fixed buffer (known as it comes), and
        # ``-1 - q`` for the q-th step output (its slot is known once the fixed buffers are counted: ``tape``)
        self.slots = dict(zip(map(id, arrays), range(n)))
        self.deps = {id(a): 1 << i for i, a in enumerate(arrays)}
        self.keep = list(arrays)  # the recorded values stay alive, so that their ids stay theirs
        self.fixed, self.steps = [], []
        self.eqns = []  # each step's (primitive, params, in_avals, out_avals), for ``Backend.tape_steps``
        self.tainted, self.spent, self.outputs = False, 0.0, 0

    def record(self, primitive, args, params, avals, bufs, device, committed, entry, done):
        """Run one primitive (as ``placement._eager_run``: ``entry`` is its eager-cache entry, ``done`` makes its
        arrays) and record it. An entry's tape step (``_entry``) is resolved, and its equation checked for
        effects, at its first record (kept as the entry's ``step``)."""
        exe, out_avals = entry.exe, entry.out_avals
        step = entry.step
        if step is None and not self.tainted and device is self.device:
            try:
                step = None if has_effect(_Step(primitive, params)) else _entry(exe, primitive, params, avals,
                                                                                 out_avals, device)
            except Exception:  # noqa: BLE001 (an executable without an entry: no tape from the record)
                step = None
            entry.step = step
        if self.tainted or step is None or device is not self.device:
            self.tainted = True
            return done(primitive, args, out_avals, exe(bufs), device, committed)
        ins, mask = [], 0
        slots, deps = self.slots, self.deps
        for a, b in zip(args, bufs):
            if type(a) is ArrayImpl:
                s = slots.get(id(a))
                if s is None:
                    self.tainted = True
                    return done(primitive, args, out_avals, exe(bufs), device, committed)
                ins.append(s)
                mask |= deps[id(a)]
            elif type(a) in _SCALARS or isinstance(a, np.generic):  # converted on the device by the general path
                ins.append(self.n + len(self.fixed))
                self.fixed.append(b)
            else:  # (an array of a subclass: its value is not known to be a constant)
                self.tainted = True
                return done(primitive, args, out_avals, exe(bufs), device, committed)
        t0 = _clock()
        outs = exe(bufs)
        self.spent += _clock() - t0
        res = done(primitive, args, out_avals, outs, device, committed)
        for r in res if primitive.multiple_results else (res,):
            self.outputs -= 1
            slots[id(r)] = self.outputs
            deps[id(r)] = mask
            self.keep.append(r)
        self.steps.append((step[0], step[1], ins, len(res) if primitive.multiple_results else 1))
        self.eqns.append((primitive, params, avals, out_avals))
        return res

    def record_one(self, entry, one, primitive, params, args, bufs, device, committed):
        """``record`` for ``placement.eager_direct``'s hit of one output: ``one(*bufs)`` (the eager-cache entry
        ``entry``'s implementation, on the recorder's device) run and recorded with ``one`` as its tape step
        (``params``: ``bind``'s keyword dict). ``None`` (nothing run) where the step needs ``record``'s checks:
        the record is tainted, the arrays are on another device, an argument is not a recorded value, or the
        equation holds an effect (checked once per entry: a clean entry's ``step`` is set to ``(one, True)``).
        Errors of ``one`` propagate."""
        if self.tainted or device is not self.device:
            return None
        if entry.step is None:
            if has_effect(_Step(primitive, params)):
                return None
            entry.step = (one, True)
        slots, deps = self.slots, self.deps
        ins, mask = [], 0
        for a in args:
            s = slots.get(id(a))
            if s is None:
                return None
            ins.append(s)
            mask |= deps[id(a)]
        t0 = _clock()
        out = one(*bufs)
        self.spent += _clock() - t0
        r = ArrayImpl()  # ArrayImpl.make inline
        r.aval, r._device, r._buf, r._committed, r._host = entry.out_avals[0], device, out, committed, None
        self.outputs -= 1
        slots[id(r)] = self.outputs
        deps[id(r)] = mask
        self.keep.append(r)
        self.steps.append((one, True, ins, 1))
        self.eqns.append((primitive, params, [a.aval for a in args], entry.out_avals))
        return r

    def tape(self, out):
        """The tape of the recorded call that returned ``out``, or ``None`` (tainted, or an output that is not
        an argument or a recorded step's, or depends on no argument: the rules of ``make``)."""
        if self.tainted or not self.steps:
            return None
        if type(out) is ArrayImpl:  # the commonest output: one array (its structure made once)
            leaves, out_tree = [out], _LEAF[0] or _leaf_tree(out)
        else:
            leaves, out_tree = tree_util.tree_flatten(out)
        n = self.n
        b1 = n + len(self.fixed) - 1  # a step's output -1 - q lies at slot n + len(fixed) + q
        slots, deps = self.slots, self.deps
        outs, masks = [], []
        for leaf in leaves:
            s = slots.get(id(leaf)) if type(leaf) is ArrayImpl else None
            if s is None or not deps[id(leaf)]:
                return None
            outs.append(s if s >= 0 else b1 - s)
            masks.append(deps[id(leaf)])
        steps = [(call, tuple([s if s >= 0 else b1 - s for s in ins]), single) for call, single, ins, _k in self.steps]
        nouts = tuple([k for _c, _s, _i, k in self.steps])
        steps = _for_backend(steps, self.eqns, nouts, b1 + 1, outs, self.device)
        out_deps = None
        every = (1 << n) - 1
        for m in masks:  # (a loop, not ``any`` over a generator: each new key's first call makes a tape)
            if m != every:
                out_deps = tuple(tuple(i for i in range(n) if m >> i & 1) for m in masks)
                break
        return Tape(steps, tuple(self.fixed), tuple(outs), tuple([leaf.aval for leaf in leaves]), out_tree, n,
                    out_deps, nouts)


_LEAF = [None]  # the pytree structure of one array


def _for_backend(steps, eqns, nouts, first, outs, dev) -> tuple:
    """``steps`` rewritten by ``dev``'s backend (``Backend.tape_steps``; ``first``: the slot of the first step's
    first output, ``nouts`` each step's count of outputs)."""
    starts, s = [], first
    for k in nouts:
        starts.append(s)
        s += k
    return tuple(dev.impl.tape_steps(steps, eqns, starts, outs))


def _leaf_tree(x):
    _LEAF[0] = tree_util.tree_flatten(x)[1]
    return _LEAF[0]


def record(call, arrays):
    """``(out, tape, seconds)``: ``call()`` (a general eager call of a key whose arrays are ``arrays``, each
    once) run while recording, the tape of what it ran (``None`` where the record is tainted: ``Recorder``),
    and the seconds its executables took (the tape's cost per call, but for its Python). ``None`` where another
    record is under way (in any thread: one at a time); the caller then makes its tape by tracing. Errors of
    ``call`` propagate (the general path's own)."""
    rec = Recorder(arrays)
    with _lock:
        if array_impl.recording is not None:
            return None
        array_impl.recording = rec
    try:
        out = call()
    finally:
        array_impl.recording = None
    try:
        tape = rec.tape(out)
    except Exception:  # noqa: BLE001 (an executable without an entry: no tape from the record)
        tape = None
    return out, tape, rec.spent


def _cached_entry(exe, eqn, avals, dev):
    """``_entry``, kept on the eager cache's entry of the executable (each new shape of a loop makes a tape of
    the same few primitives: ~3 us a step otherwise)."""
    e = placement._eager_d.get(placement.eager_key(eqn.primitive, eqn.params, avals, dev))
    if e is None or e.exe is not exe:
        return _entry(exe, eqn.primitive, eqn.params, avals, [v.aval for v in eqn.outputs], dev)
    step = e.step
    if step is None:
        step = e.step = _entry(exe, eqn.primitive, eqn.params, avals, [v.aval for v in eqn.outputs], dev)
    return step


def _entry(exe, primitive, params, avals, out_avals, dev):
    """``(call, single)`` for an equation's eager executable ``exe``: the backend's implementation itself where it
    offers one (``Backend.eager_call``, numpy; an executable's ``one``, mlx: ``call(*bufs) -> buf``, ``single``),
    else the executable's direct entry or the executable (``call(*bufs) -> [bufs]``). Errors are not translated
    here: the caller re-runs the general path on any."""
    impl = dev.impl
    if not primitive.multiple_results and type(impl).eager_call is not Backend.eager_call:  # (mlx: none, no call)
        fn = impl.eager_call(primitive, params, avals, list(out_avals))
        if fn is not None:
            return fn, True
    call = getattr(exe, "call_args", None)
    if call is not None and getattr(exe, "reraise", None) is not None:
        one = getattr(exe, "one", None)  # mlx: the rule of one output itself, beside its direct entry
        return (one, True) if one is not None and not primitive.multiple_results else (call, False)

    def run(*bufs):
        return exe(list(bufs))
    return run, False


def _trace(program, arrays):
    """``(program IR, consts, out_tree)`` of ``program(*arrays)`` traced at the arrays' avals."""
    store = []

    def flat(*tracers):
        leaves, tree = tree_util.tree_flatten(program(*tracers))
        store.append(tree)
        return leaves
    prog, consts = trace_to_program(flat, [a.aval for a in arrays], debug_name=getattr(program, "__name__", "fun"))
    return prog, consts, store[0]


def make(program, arrays, compile=True):
    """The tape of ``program`` (a function of arrays: ``eager_jit``'s template of a call) at ``arrays``' avals
    and device, or ``None`` where it cannot be made (the module docstring). Errors of tracing are caught
    (``None``); those of compiling an equation's executable are too. ``compile=False``: ``None`` where an
    equation's executable is not in the eager cache (a kernel backend, where a compile costs more than a tape
    saves in many calls)."""
    try:
        prog, consts, out_tree = _trace(program, arrays)
    except Exception:  # noqa: BLE001 (not traceable at these avals: the caller keeps the general path)
        return None
    dev = arrays[0]._device
    slots = {id(v): i for i, v in enumerate(prog.invars)}
    fixed = []
    for v, c in zip(prog.constvars, consts):
        if type(c) is not ArrayImpl or c._device is not dev or c._buf is None:
            return None
        slots[id(v)] = len(arrays) + len(fixed)
        fixed.append(c._buf)
    deps = {id(v): 1 << i for i, v in enumerate(prog.invars)}  # the arguments each value depends on (bits)
    try:
        steps = _steps(prog, dev, slots, fixed, len(arrays), deps, compile)
        nouts = tuple(len(eqn.outputs) for eqn in prog.eqns)
    except Exception:  # noqa: BLE001 (an equation without an eager executable here: the general path)
        return None
    if steps is None:
        return None
    outs, masks = [], []
    for o in prog.outvars:
        if type(o) is Literal or id(o) not in slots or not deps.get(id(o)):
            return None  # a constant output: the general path makes it on the default device, uncommitted
        outs.append(slots[id(o)])
        masks.append(deps[id(o)])
    n = len(arrays)
    out_deps = None
    if any(m != (1 << n) - 1 for m in masks):  # an output committed only by the arguments it depends on
        out_deps = tuple(tuple(i for i in range(n) if m >> i & 1) for m in masks)
    eqns = [(e.primitive, e.params, [x.aval for x in e.inputs], [o.aval for o in e.outputs]) for e in prog.eqns]
    steps = _for_backend(steps, eqns, nouts, n + len(fixed), outs, dev)
    return Tape(steps, tuple(fixed), tuple(outs), tuple(o.aval for o in prog.outvars), out_tree, n, out_deps, nouts)


def _steps(prog, dev, slots, fixed, n, deps, compile=True):
    """The tape's steps (filling ``slots``, ``fixed`` and each value's ``deps``), or ``None`` for an equation a
    tape leaves alone (or, without ``compile``, one the eager cache does not hold)."""
    steps = []
    count = n + len(fixed)  # slots so far; literals are added to ``fixed`` first (their slots move: see below)
    literals = []
    for eqn in prog.eqns:
        if has_effect(eqn):
            return None
        ins, avals, mask = [], [], 0
        for x in eqn.inputs:
            avals.append(x.aval)
            if type(x) is Literal:
                literals.append(dev.impl.scalar_to_device(x.val, x.aval.dtype, dev))
                ins.append(("literal", len(literals) - 1))
            else:
                ins.append(slots[id(x)])
                mask |= deps.get(id(x), 0)
        hit = placement._eager_executable(eqn.primitive, eqn.params, tuple(avals), dev, compile)
        if hit is None:
            return None
        exe, out_avals = hit
        if tuple(out_avals) != tuple(v.aval for v in eqn.outputs):
            return None
        for v in eqn.outputs:
            slots[id(v)] = ("step", count)
            deps[id(v)] = mask
            count += 1
        steps.append((*_cached_entry(exe, eqn, tuple(avals), dev), ins))
    # Literals go after the constants, so steps' slots move by their number.
    shift = len(literals)
    base = n + len(fixed)
    fixed.extend(literals)

    def slot(s):
        if type(s) is tuple:
            return base + s[1] if s[0] == "literal" else s[1] + shift
        return s
    for k, v in list(slots.items()):
        slots[k] = slot(v)
    return [(call, tuple(slot(s) for s in ins), single) for call, single, ins in steps]
