"""The program's fractional float literals as scalar kernel arguments: one source for kernels that differ only there.

Programs that differ only in a constant (``tanh(c * x) * x`` for many ``c``, a learning rate, a schedule's
step size) schedule into kernels whose sources differ only in that number, and a driver builds each source
on its own (PoCL: 40 ms a program, then ~150 ms for each kernel's work-group function at its first launch,
docs/traps.md). ``literals_as_args`` rewrites a finished schedule: each float constant of a kernel whose value
is one of the program's scalar float literals and not a whole number (``0.5 + 0.1 k``, not the ``1`` of
``1 - t * t`` or a rule's ``2``) becomes a scalar parameter, set once when the executable is made, so such
kernels print the same source and are built once. Whole numbers stay in the source: they are shared by every
such program anyway, and the compiler may fold them. The rewrite is after every rule and tuning decision (they
saw the constants), and the value reaches the kernel exactly (a scalar argument of the constant's dtype), so
results are the same bits.

Used by the OpenCL backend (``opencl/backend.py``), whose drivers compile each new source; WebGPU's kernels
keep their constants.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.core.ir import Literal
from fnarray.core.passes import walk_eqns
from fnarray.lowering.kernels.groups.base import Launch, Schedule
from fnarray.lowering.kernels.ir import Const, ScalarParam, Sym, map_exprs, walk_exprs

__all__ = ["literals_as_args", "with_scalar_args", "MAX_LITERAL_ARGS"]

#: At most this many constants of one kernel become arguments (the first ones met; the rest stay in the source).
MAX_LITERAL_ARGS = 8
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _fractional_literals(program) -> set:
    """``(dtype, bits)`` of every scalar float literal of ``program`` that is finite and not a whole number,
    in float32 and float64 (a literal's dtype may differ from the kernel constant it becomes)."""
    found = set()
    for e in walk_eqns(program):
        for a in e.inputs:
            if not isinstance(a, Literal) or a.aval.size != 1 or np.dtype(a.aval.dtype).kind != "f":
                continue
            v = float(np.asarray(a.val).reshape(()))
            if np.isfinite(v) and v != round(v):
                found.update((d, np.asarray(v, d).tobytes()) for d in _DTYPES)
    return found


def _as_args(launch, wanted) -> Launch:
    """``launch`` with its constants in ``wanted`` (``(dtype, bits)``) as scalar parameters ``lit0``,
    ``lit1``... in the order the body first reads them (so equal kernels name them alike)."""
    kernel = launch.kernel
    order: dict = {}
    for e in walk_exprs(kernel.body):
        if isinstance(e, Const) and (e.dtype, e.bits) in wanted and e not in order and len(order) < MAX_LITERAL_ARGS:
            order[e] = None
    if not order:
        return launch

    def body(syms):
        names = dict(zip(order, syms, strict=True))
        return map_exprs(kernel, lambda e: names.get(e, e) if isinstance(e, Const) else e).body
    return with_scalar_args(launch, "lit", [(c.dtype, c.value) for c in order], body)


def with_scalar_args(launch, prefix: str, values, body) -> Launch:
    """``launch`` with a scalar parameter for each ``(dtype, value)`` of ``values``, named ``<prefix>0``,
    ``<prefix>1``... (skipping names the kernel already uses), set to ``value``, and its body ``body(syms)`` (``syms``:
    those parameters' ``Sym``, in order). Used here and by ``int_args``."""
    kernel = launch.kernel
    taken = {getattr(p, "name", None) for p in kernel.params}
    taken |= {e.name for e in walk_exprs(kernel.body) if isinstance(e, Sym)}
    syms, n = [], 0
    for dtype, _ in values:
        while f"{prefix}{n}" in taken:
            n += 1
        syms.append(Sym(f"{prefix}{n}", dtype))
        n += 1
    params = kernel.params + tuple(ScalarParam(s.name, s.dtype) for s in syms)
    args = launch.args + tuple(v for _, v in values)
    return Launch(dataclasses.replace(kernel, params=params, body=body(syms)), args, launch.global_size,
                  launch.local_size, launch.eqns, launch.kind)


def literals_as_args(sched: Schedule) -> Schedule:
    """``sched`` with each kernel's fractional program literals as scalar arguments (the module docstring); the
    same schedule where the program has none."""
    if sched.program is None:
        return sched
    wanted = _fractional_literals(sched.program)
    if not wanted:
        return sched
    return sched.with_launches(_as_args(la, wanted) for la in sched.launches)
