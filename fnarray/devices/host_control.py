"""Host-driven control flow, for backends whose library has no loops (``Capabilities.control_flow == "host"``).

MLX, OpenCL and WebGPU cannot express a data-dependent loop inside one
executable. For such a device, ``partition.compile_program`` hands the program
to ``HostDriven`` whenever a top-level equation needs the host
(``needs_host``): the program is cut at its ``while``, ``scan`` and ``cond``
equations (and at ``call``-like equations whose sub-programs hold one). The
straight-line segments between the cuts are compiled as ordinary device
executables (and fall back to numpy per segment, as ``_Partitioned`` does); each
control-flow equation becomes a small Python driver around device executables of
its sub-programs, which are themselves compiled through ``compile_program`` (so
nested loops work, and fall back the same way):

- ``while``: the cond and body sub-programs are two device executables. Each
  iteration runs the cond executable, reads back its one-element predicate
  (``to_host``: the one synchronisation per iteration), and runs the body
  executable if it is true. The carry never leaves the device.
- ``scan``: a step program ``(consts, carry, xs, i) -> (carry, y)`` slices
  ``xs[i]`` on the device (``dynamic_slice``) and calls the body; the host loops
  ``i`` over the length (backwards for ``reverse``) passing a rank-0 index
  buffer, and stacks the ``y`` s on the device at the end (``concatenate`` in
  groups that respect ``max_buffers_per_kernel``). No value is read back.
- ``cond``: reads back the index (one synchronisation), clamps it, and runs
  only that branch's executable.

Cost: one device-to-host readback of a predicate per ``while`` iteration (and
one per ``cond``), plus one executable launch per iteration; for a
latency-bound loop this readback dominates, so prefer ``scan``/``fori_loop`` with
a static trip count (no readback at all) where the algorithm allows. Measured on
MLX's CPU here (1000 iterations of a small body, body compiled after warm-up):
~25 us per ``scan`` iteration, ~29 us per ``while`` iteration.

A backend may define ``schedule(bufs)`` (start evaluating buffers without
waiting); the drivers call it on the carry every ``SCHEDULE_EVERY`` iterations,
which keeps a lazy backend's (MLX's) graph from growing over a whole loop. (Every
iteration would cost more than it saves: on MLX's CPU a 1000-step ``fori_loop``
measured 30 us per iteration when scheduling each one, 17-20 us without.)
"""

from __future__ import annotations

import contextlib

import numpy as np

from fnarray.core import dtypes
from fnarray.core import profile as _profile
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.passes import consts_as_inputs, dce
from fnarray.core.primitives import EFFECTS
from fnarray.core.subprograms import CALL_PROGRAM, CONTROL_FLOW, subprograms
from fnarray.core.shaped import ShapedArray
from fnarray.devices.backend import Device, get_backend

__all__ = ["CONTROL_PRIMITIVES", "needs_host", "needs_host_driving", "HostDriven", "compile_control_eqn"]

#: Primitives the host drives on a ``control_flow="host"`` device.
CONTROL_PRIMITIVES = CONTROL_FLOW
# Equations that only call a sub-program: cut out when the sub-program needs the host.
_CALL_PROGRAM = CALL_PROGRAM
_STACK_GROUP = 64  # most operands of one stacking program (fewer where the device allows fewer buffers)
#: Iterations between two ``schedule`` calls of a host-driven loop.
SCHEDULE_EVERY = 64
_NO_SPAN = contextlib.nullcontext()


def needs_host(eqn) -> bool:
    """Whether ``eqn`` is, or (through its sub-programs) holds, a control-flow equation."""
    if eqn.primitive in CONTROL_PRIMITIVES or eqn.primitive in EFFECTS:
        return True  # a host callback inside a sub-program: the host runs that sub-program's segments
    return any(needs_host(e) for sub in subprograms(eqn) for e in sub.eqns)


def needs_host_driving(program: Program, placements) -> bool:
    """Whether an equation placed on the device (``placements[i]`` true) needs the host."""
    return any(on_dev and needs_host(e) for e, on_dev in zip(program.eqns, placements, strict=True))


#: ``compile_program(program, device) -> executable``: the partitioner's, set by ``partition`` when it is
#: imported (the two recurse: a host-driven program's segments are compiled by the partitioner).
compile_program = None


def _compile(program: Program, device: Device):
    return compile_program(program, device)


def _scalar(value, dtype):
    return np.asarray(value, dtype=dtype)


class _Const:
    """A literal input of a host-driven step, as a buffer made once."""

    __slots__ = ("buf",)

    def __init__(self, buf):
        self.buf = buf


class HostDriven:
    """An executable ``bufs -> bufs`` that runs a program's control flow from the host.

    Args:
      program: the program (inputs: constvars + invars).
      device: a device whose capabilities say ``control_flow="host"``.
      placements: one bool per equation of ``program``: whether it runs on ``device``
        (false: on the numpy backend, after ``partition._report``).
      drive_control: drive control-flow equations from the host (false: keep them in the device's
        segments, for backends whose library has loops).
    """

    def __init__(self, program: Program, device: Device, placements, drive_control: bool = True):
        # drive_control=False: only cut between device and numpy segments (the partitioner's
        # fallback on a backend with native control flow); loops stay inside device segments.
        self.device = device
        self.numpy_device = get_backend("numpy").devices()[0]
        placed = {id(e): p for e, p in zip(program.eqns, placements, strict=True)}
        self.inputs = list(program.constvars) + list(program.invars)
        live, _ = dce(program)
        self.outvars = live.outvars
        groups = []  # (kind, eqns): kind "device", "fallback" (on numpy:0) or "host"
        for e in live.eqns:
            on_dev = placed[id(e)]
            kind = "host" if drive_control and on_dev and needs_host(e) else ("device" if on_dev else "fallback")
            if kind != "host" and groups and groups[-1][0] == kind:
                groups[-1][1].append(e)
            else:
                groups.append((kind, [e]))
        later = []
        needed = {v for v in self.outvars if isinstance(v, Var)}
        for _, eqns in reversed(groups):
            later.append(set(needed))
            for e in eqns:
                needed.update(a for a in e.inputs if isinstance(a, Var))
        later.reverse()
        self.steps = []
        self.fallbacks = {}  # step index -> the equations of a segment that falls back to numpy
        for (kind, eqns), after in zip(groups, later, strict=True):
            dev = self.numpy_device if kind == "fallback" else device
            if kind == "host":
                e = eqns[0]
                ins = [_Const(device.impl.to_device(_scalar(a.val, a.aval.dtype), device))
                       if isinstance(a, Literal) else a for a in e.inputs]
                self.steps.append((dev, compile_control_eqn(e, device), ins, list(e.outputs)))
                continue
            defined = {o for e in eqns for o in e.outputs}
            ins, seen = [], set()
            for e in eqns:
                for a in e.inputs:
                    if isinstance(a, Var) and a not in defined and a not in seen:
                        seen.add(a)
                        ins.append(a)
            outs = [o for e in eqns for o in e.outputs if o in after]
            if kind == "fallback" and device != self.numpy_device:
                self.fallbacks[len(self.steps)] = eqns
            self.steps.append((dev, _compile(Program([], ins, eqns, outs), dev), ins, outs))

    def __call__(self, bufs):
        device = self.device
        env = {v: (b, device) for v, b in zip(self.inputs, bufs, strict=True)}
        profiling = _profile.recorder is not None
        for k, (dev, exe, ins, outs) in enumerate(self.steps):
            if profiling and k in self.fallbacks:
                with _profile.span("fallback", _fallback_label(self.fallbacks[k], device), device=str(device),
                                   _eqns=self.fallbacks[k]):
                    self._step(env, dev, exe, ins, outs)
            else:
                self._step(env, dev, exe, ins, outs)
        return self._results(env)

    @staticmethod
    def _step(env, dev, exe, ins, outs):
        args = []
        for a in ins:
            if type(a) is _Const:
                args.append(a.buf)
                continue
            b, where = env[a]
            if where != dev:
                b = dev.impl.to_device(where.impl.to_host(b), dev)
            args.append(b)
        for v, b in zip(outs, exe(args), strict=True):
            env[v] = (b, dev)

    def _results(self, env):
        device = self.device
        res = []
        for v in self.outvars:
            if isinstance(v, Literal):
                res.append(device.impl.to_device(_scalar(v.val, v.aval.dtype), device))
                continue
            b, where = env[v]
            if where != device:
                b = device.impl.to_device(where.impl.to_host(b), device)
            res.append(b)
        return res


def _fallback_label(eqns, device) -> str:
    """``sin (float64), cos (float64) on numpy:0 for webgpu:0``: what a fallback segment runs."""
    seen = []
    for e in eqns:
        a = (list(e.inputs) + list(e.outputs))[:1]
        item = f"{e.primitive.name} ({a[0].aval.dtype.name})" if a else e.primitive.name
        if item not in seen:
            seen.append(item)
    more = f" +{len(seen) - 4} more" if len(seen) > 4 else ""
    return f"{', '.join(seen[:4])}{more} on numpy:0 for {device}"


def compile_control_eqn(eqn, device: Device):
    """A host driver ``bufs -> bufs`` for one ``while``/``scan``/``cond`` (or call-like) equation."""
    prim = eqn.primitive
    if prim is P.while_p:
        return _While(eqn, device)
    if prim is P.scan:
        return _Scan(eqn, device)
    if prim is P.cond:
        return _Cond(eqn, device)
    if prim in _CALL_PROGRAM:
        return _compile(consts_as_inputs(eqn.params[_CALL_PROGRAM[prim]]), device)
    raise TypeError(f"{prim.name} is not a control-flow primitive the host can drive")


def _read_scalar(device: Device, buf):
    return np.asarray(device.impl.to_host(buf)).reshape(())[()]


class _While:
    """``while cond(carry): carry = body(carry)`` with one predicate readback per iteration."""

    def __init__(self, eqn, device):
        p = eqn.params
        self.cn, self.bn = p["cond_nconsts"], p["body_nconsts"]
        self.cond = _compile(p["cond_program"], device)
        self.body = _compile(p["body_program"], device)
        self.device = device
        self.schedule = getattr(device.impl, "schedule", None)

    def __call__(self, bufs):
        cn, bn = self.cn, self.bn
        cc, bc, carry = list(bufs[:cn]), list(bufs[cn:cn + bn]), list(bufs[cn + bn:])
        cond, body, schedule, device = self.cond, self.body, self.schedule, self.device
        n = 0
        profiling = _profile.recorder is not None
        while True:
            with _profile.span("loop", "while iteration", iteration=n) if profiling else _NO_SPAN:
                if not _read_scalar(device, cond(cc + carry)[0]):
                    break
                carry = list(body(bc + carry))
            n += 1
            if schedule is not None and n % SCHEDULE_EVERY == 0:
                schedule(carry)
        return carry


class _Cond:
    """Runs the branch that the (clamped) index selects, after reading the index back."""

    def __init__(self, eqn, device):
        self.branches = [_compile(b, device) for b in eqn.params["branches"]]
        self.device = device

    def __call__(self, bufs):
        n = len(self.branches)
        i = int(_read_scalar(self.device, bufs[0]))
        return list(self.branches[min(max(i, 0), n - 1)](list(bufs[1:])))


class _Scan:
    """A scan: the host loops over the length; slicing and stacking stay on the device."""

    def __init__(self, eqn, device):
        p = eqn.params
        body = p["program"]
        self.nc, self.nk, self.length, self.reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
        self.device = device
        self.schedule = getattr(device.impl, "schedule", None)
        in_avals = [a.aval for a in eqn.inputs]
        self.y_avals = [o.aval for o in eqn.outputs[self.nk:]]
        self.step = _compile(_step_program(body, in_avals, self.nc + self.nk), device)
        caps = device.impl.capabilities(device)
        limit = caps.max_buffers_per_kernel
        self.group = max(2, min(_STACK_GROUP, (limit - 1) if limit else _STACK_GROUP))
        self._stackers: dict = {}

    def __call__(self, bufs):
        n_fixed = self.nc + self.nk
        consts, carry, xs = list(bufs[:self.nc]), list(bufs[self.nc:n_fixed]), list(bufs[n_fixed:])
        dev = self.device
        if self.length == 0:
            return carry + [dev.impl.to_device(np.zeros(a.shape, a.dtype), dev) for a in self.y_avals]
        ys = [[None] * self.length for _ in self.y_avals]
        order = range(self.length - 1, -1, -1) if self.reverse else range(self.length)
        step, schedule, nk = self.step, self.schedule, self.nk
        profiling = _profile.recorder is not None
        for n, i in enumerate(order, 1):
            with _profile.span("loop", "scan step", iteration=i) if profiling else _NO_SPAN:
                outs = step(consts + carry + xs + [dev.impl.to_device(np.int32(i), dev)])
            carry = list(outs[:nk])
            for col, y in zip(ys, outs[nk:], strict=True):
                col[i] = y
            if schedule is not None and n % SCHEDULE_EVERY == 0:
                schedule(outs)
        return carry + [self._stack(col, aval) for col, aval in zip(ys, self.y_avals, strict=True)]

    def _stack(self, pieces, aval):
        """``pieces`` (each ``aval.shape[1:]``) stacked along a new leading axis, on the device."""
        item = ShapedArray(aval.shape[1:], aval.dtype)
        g = self.group
        parts = [(self._run(("stack", item, len(pieces[i:i + g])), pieces[i:i + g]), len(pieces[i:i + g]))
                 for i in range(0, len(pieces), g)]
        while len(parts) > 1:  # more pieces than one program may take: concatenate the groups, in groups
            merged = []
            for i in range(0, len(parts), g):
                grp = parts[i:i + g]
                if len(grp) == 1:
                    merged.append(grp[0])
                    continue
                leads = tuple(n for _, n in grp)
                merged.append((self._run(("concat", item, leads), [b for b, _ in grp]), sum(leads)))
            parts = merged
        return parts[0][0]

    def _run(self, key, bufs):
        exe = self._stackers.get(key)
        if exe is None:
            exe = _compile(_stack_program(*key), self.device)
            self._stackers[key] = exe
        return exe(list(bufs))[0]


def _stack_program(kind: str, item: ShapedArray, count) -> Program:
    """``kind="stack"``: ``count`` arrays of ``item`` -> one of ``(count,) + item.shape``;
    ``kind="concat"``: arrays of ``(n,) + item.shape`` for each ``n`` in ``count`` -> their concatenation."""
    eqns = []
    if kind == "stack":
        ins = [Var(item) for _ in range(count)]
        rows = []
        row_aval = ShapedArray((1,) + item.shape, item.dtype)
        dims = tuple(range(1, 1 + item.ndim))
        for v in ins:
            r = Var(row_aval)
            eqns.append(Eqn(P.broadcast_in_dim, (v,), Params(shape=row_aval.shape, broadcast_dimensions=dims), (r,)))
            rows.append(r)
        total = count
    else:
        ins = [Var(ShapedArray((n,) + item.shape, item.dtype)) for n in count]
        rows, total = ins, sum(count)
    out = Var(ShapedArray((total,) + item.shape, item.dtype))
    eqns.append(Eqn(P.concatenate, tuple(rows), Params(dimension=0), (out,)))
    return Program([], ins, eqns, [out])


def _step_program(body: Program, in_avals, n_fixed: int) -> Program:
    """``(consts, carry, xs, i) -> body(consts, carry, xs[i])``: one scan iteration as one program."""
    fixed = [Var(v.aval) for v in body.invars[:n_fixed]]
    xs = [Var(a) for a in in_avals[n_fixed:]]
    i = Var(ShapedArray((), dtypes.int32))
    zero = Literal(np.int32(0), ShapedArray((), dtypes.int32))
    eqns, slices = [], []
    for x in xs:
        rest = x.aval.shape[1:]
        row = Var(ShapedArray((1,) + rest, x.aval.dtype))
        eqns.append(Eqn(P.dynamic_slice, (x, i) + (zero,) * len(rest), Params(slice_sizes=(1,) + rest), (row,)))
        item = Var(ShapedArray(rest, x.aval.dtype))
        eqns.append(Eqn(P.reshape, (row,), Params(new_sizes=rest), (item,)))
        slices.append(item)
    outs = [Var(a) for a in body.out_avals]
    eqns.append(Eqn(P.call, tuple(fixed + slices), Params(program=body, name="scan_body"), tuple(outs)))
    return Program([], fixed + xs + [i], eqns, outs)
