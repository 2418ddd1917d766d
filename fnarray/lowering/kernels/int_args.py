"""A kernel's int32 constants that differ between kernels of one structure as scalar arguments: one source a size.

A loop whose arrays grow by a row a step (a decode's cache) compiles a program for each new length, and each
schedules into kernels whose sources differ only in int32 constants that follow the length (a bound, a stride, a
clamp): PoCL built each anew (~0.3 s a kernel without its cache; the ``decode_jit`` workload's first pass, 40
lengths, 12.9 s). ``IntArgs`` keeps, per device, the *structure* of each kernel met (its IR with each int32
constant a placeholder numbered by its place in the body: an unrolled loop's ``row + 20`` is another place than a
length's ``20``) and the values it first had. A later kernel of a known structure gets the places whose values
have differed as scalar arguments (``ilit0``, ``ilit1``...; places whose values have been equal in every kernel so
far share one): its source is then the one every later length of that structure shares, built once. Places that
never differed stay constants (a row length, an unroll offset), where the compiler folds them; so does every
constant of a structure met once (a program run at one size loses nothing). A constant that differs where
it is a divisor, a remainder's modulus or a shift amount keeps the kernel as it is (a division by an argument
costs far more than one by a constant, which the compiler turns into a multiplication). The values reach the
kernel as int32 arguments set when the executable is made: the same bits.

Used by the OpenCL backend (``opencl/backend.py``), after ``literal_args`` and ``phases``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.core.cache import LRUCache
from fnarray.lowering.kernels.groups.base import Launch, Schedule
from fnarray.lowering.kernels.ir import INT32, Const, Op, Sym, children, map_stmts, rebuild
from fnarray.lowering.kernels.literal_args import with_scalar_args

__all__ = ["IntArgs", "MAX_INT_ARGS"]

#: At most this many constants of one kernel become arguments (past it the kernel keeps its own source).
MAX_INT_ARGS = 8
_DIVISORS = ("div", "rem", "shl", "shr")   # ops whose second operand a constant must stay


class IntArgs:
    """Per device: the structures of the kernels met (``maxsize``: how many are kept, least recently used
    dropped), each with the constants it first had and its places lifted so far, in classes of places whose values
    have always been equal (the module docstring)."""

    def __init__(self, maxsize):
        self._known = LRUCache(maxsize)

    def schedule(self, sched: Schedule) -> Schedule:
        """``sched`` with each launch through ``launch``; the same schedule where none changes."""
        launches = [self.launch(la) for la in sched.launches]
        if all(a is b for a, b in zip(launches, sched.launches, strict=True)):
            return sched
        return Schedule(sched.inputs, launches, sched.outputs, sched.program)

    def launch(self, launch: Launch) -> Launch:
        """``launch`` with its places whose constants have differed in its structure as scalar arguments, or as it
        is. A kernel is first known by a cheap key (name, parameters, statements at the top); its structure (a walk
        and a hash of its whole IR, ~5 ms for a large kernel) is made only once a second kernel of that key comes."""
        kernel = launch.kernel
        key = (kernel.name, kernel.params, len(kernel.body), kernel.local_size, kernel.math)
        seen = self._known.get(key)
        if seen is None:
            self._known.put(key, {"first": kernel, "structures": {}})
            return launch
        structures = seen["structures"]
        if seen["first"] is not None:   # the key's first kernel, its structure made now
            first = _structure(seen["first"])
            if first is not None:
                structures[first[0]] = [first[1], ()]
            seen["first"] = None
        made = _structure(kernel)
        if made is None:
            return launch
        structure, values, divisors = made
        entry = structures.setdefault(structure, [values, ()])   # (the structure hashed once)
        if entry[0] is values:   # the structure's first kernel
            return launch
        first, classes = entry
        new = tuple(p for p, (a, b) in enumerate(zip(first, values, strict=True)) if a != b and not _placed(classes, p))
        # a class's places keep one argument while their values stay equal; new places join by first and current value
        classes = tuple(sorted(_split(classes, values) + _split((new,) if new else (), values, first)))
        if not classes or len(classes) > MAX_INT_ARGS or divisors & {p for c in classes for p in c}:
            return launch
        entry[1] = classes
        return _as_args(launch, classes, values)


def _structure(kernel):
    """``(structure, values, divisor places)`` of ``kernel``: its IR with each int32 constant's place a
    placeholder, the constants by place, and the places that are divisors, moduli or shift amounts; ``None``
    where it has no int32 constant."""
    values, divisors = [], set()

    def hole(c, place, divisor):
        values.append(c)
        if divisor:
            divisors.add(place)
        return Sym(f"\0int{place}", INT32)
    structure = _places(kernel, hole)
    return (structure, tuple(values), divisors) if values else None


def _places(kernel, leaf):
    """``kernel`` with its int32 constant at each place (depth first, in statement order) replaced by
    ``leaf(const, place, divisor)`` (``divisor``: it is a divisor, a remainder's modulus or a shift amount)."""
    count = [0]

    def rw(e, divisor=False):
        if isinstance(e, Const):
            if e.dtype != INT32:
                return e
            count[0] += 1
            return leaf(e, count[0] - 1, divisor)
        kids = children(e)
        if not kids:
            return e
        div = isinstance(e, Op) and e.op in _DIVISORS
        return rebuild(e, [rw(c, div and i == 1) for i, c in enumerate(kids)])
    return dataclasses.replace(kernel, body=map_stmts(kernel.body, rw))


def _placed(classes, place) -> bool:
    return any(place in c for c in classes)


def _split(classes, values, first=None) -> tuple:
    """``classes`` (tuples of places) each split into the places of one value in ``values`` (and in ``first``)."""
    out = []
    for c in classes:
        groups: dict = {}
        for p in c:
            groups.setdefault((values[p], first[p] if first is not None else None), []).append(p)
        out.extend(tuple(g) for g in groups.values())
    return tuple(out)


def _as_args(launch, classes, values) -> Launch:
    """``launch`` with the constants at each class of places a scalar parameter ``ilit0``, ``ilit1``... (in the
    order of the classes)."""
    def body(syms):
        of = {p: syms[k] for k, c in enumerate(classes) for p in c}
        return _places(launch.kernel, lambda c, place, _divisor: of.get(place, c)).body
    return with_scalar_args(launch, "ilit", [(INT32, int(np.asarray(values[c[0]].value))) for c in classes], body)
