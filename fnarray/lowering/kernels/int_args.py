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

A kernel equal to one met before (a network's second layer; the transformer step's 146 kernels are 74 distinct)
reuses what was made of it (``_Made``: its structure, its lifted kernel), for the cost of a hash and a comparison
of its IR. Used by the OpenCL backend (``opencl/backend.py``), after ``literal_args`` and ``phases``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.core.cache import LRUCache, used_since
from fnarray.lowering.kernels.groups.base import Launch
from fnarray.lowering.kernels.ir import (
    INT32,
    Bitcast,
    Broadcast,
    Cast,
    Const,
    Lane,
    Load,
    Op,
    Select,
    Sym,
    children,
    map_stmts,
    rebuild,
)
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
        # kernel -> _Made: what ``_structure`` and ``_as_args`` made of it (a kernel met again, the second layer's
        # copy of the first's, costs a hash and a comparison of its IR); hits do not reorder (``second_chance``)
        self._made = LRUCache(maxsize, second_chance=used_since)

    def launch(self, launch: Launch) -> Launch:
        """``launch`` with its places whose constants have differed in its structure as scalar arguments, or as it
        is. A kernel is first known by a cheap key (name, parameters, statements at the top); its structure (a walk
        of its whole IR, ~1 ms for a large kernel) is made only once a second kernel of that key comes, and once
        for equal kernels (``_Made``)."""
        kernel = launch.kernel
        key = (kernel.name, kernel.params, len(kernel.body), kernel.local_size, kernel.math)
        seen = self._known.get(key)
        if seen is None:
            self._known.put(key, {"first": kernel, "structures": {}})
            return launch
        structures = seen["structures"]
        if seen["first"] is not None:   # the key's first kernel, its structure made now
            first = self._of(seen["first"]).structure
            if first is not None:
                structures[first[0]] = [first[1], ()]
            seen["first"] = None
        made = self._of(kernel)
        if made.structure is None:
            return launch
        structure, values, divisors = made.structure
        entry = structures.setdefault(structure, fresh := [values, ()])   # (the structure hashed once)
        if entry is fresh:   # the structure's first kernel
            return launch
        first, classes = entry
        new = tuple(p for p, (a, b) in enumerate(zip(first, values, strict=True)) if a != b and not _placed(classes, p))
        # a class's places keep one argument while their values stay equal; new places join by first and current value
        classes = tuple(sorted(_split(classes, values) + _split((new,) if new else (), values, first)))
        if not classes or len(classes) > MAX_INT_ARGS or divisors & {p for c in classes for p in c}:
            return launch
        entry[1] = classes
        lifted = made.lifted.get(classes)
        if lifted is None:
            out = _as_args(launch, classes, values)
            made.lifted[classes] = (out.kernel, out.args[len(launch.args):])
            return out
        kernel, extra = lifted
        return Launch(kernel, launch.args + extra, launch.global_size, launch.local_size, launch.eqns, launch.kind)

    def _of(self, kernel) -> _Made:
        made = self._made.peek(kernel)
        if made is None:
            made = self._made.put(kernel, _Made(_structure(kernel)))
        made.used = True
        return made


class _Made:
    """What ``IntArgs`` made of one kernel: its ``_structure`` and, by classes of places lifted, the kernel with
    them as arguments and the values of those arguments (``lifted``: the same for every equal kernel); ``used``:
    met since the cache last came to it."""

    __slots__ = ("structure", "lifted", "used")

    def __init__(self, structure):
        self.structure, self.lifted, self.used = structure, {}, True


def _structure(kernel):
    """``(structure, values, divisor places)`` of ``kernel``: its IR with each int32 constant a placeholder (as
    nested tuples: equal for two kernels exactly where their IR is equal but for int32 constants), the constants
    by place, and the places that are divisors, moduli or shift amounts; ``None`` where it has no int32 constant.
    Each distinct node is visited once (``_Forms``): the IR is a graph whose shared subexpressions a tree walk
    would rebuild at every place they occur."""
    forms = _Forms()
    values, divisors = [], set()

    def rw(e):
        form, consts, divs = forms.of(e)
        divisors.update(len(values) + d for d in divs)
        values.extend(consts)
        return form
    structure = dataclasses.replace(kernel, body=map_stmts(kernel.body, rw))
    return (structure, tuple(values), divisors) if values else None


_HOLE = "\0int"   # an int32 constant's place in a structure


class _Forms:
    """``of(e)``: ``(form, constants, divisors)`` of the expression ``e``, each node once (by identity): ``form``
    the expression as nested tuples with ``_HOLE`` for each int32 constant, ``constants`` those constants in
    ``_places``' order, ``divisors`` the positions among them that are a divisor, modulus or shift amount."""

    def __init__(self):
        self._seen: dict = {}

    def of(self, e):
        made = self._seen.get(id(e))
        if made is None:
            made = self._seen[id(e)] = self._make(e)
        return made

    def _make(self, e):
        if isinstance(e, Const):
            return (_HOLE, (e,), ()) if e.dtype == INT32 else (e, (), ())
        kids = children(e)
        if not kids:
            return e, (), ()
        form, consts, divs = [_SHELLS[type(e)](e)], (), ()
        divides = isinstance(e, Op) and e.op in _DIVISORS
        for i, kid in enumerate(kids):
            f, c, d = self.of(kid)
            form.append(f)
            if divides and i == 1 and f is _HOLE:
                d = (0,)
            divs += tuple(len(consts) + k for k in d) if d else ()
            consts += c
        return tuple(form), consts, divs


#: what tells apart the nodes with sub-expressions besides those (``ir.children``), by type
_SHELLS = {Op: lambda e: ("op", e.op, e.dtype), Cast: lambda e: ("cast", e.dtype),
           Bitcast: lambda e: ("bitcast", e.dtype), Select: lambda e: ("select",),
           Load: lambda e: ("load", e.space, e.name, e.dtype), Lane: lambda e: ("lane", e.lane, e.dtype),
           Broadcast: lambda e: ("broadcast", e.lane, e.dtype)}


def _places(kernel, leaf):
    """``kernel`` with its int32 constant at each place (depth first, in statement order, as ``_structure``
    numbers them) replaced by ``leaf(const, place)``; sub-expressions without one are kept as they are."""
    forms, count = _Forms(), [0]

    def rw(e):
        if not forms.of(e)[1]:
            return e
        if isinstance(e, Const):
            count[0] += 1
            return leaf(e, count[0] - 1)
        return rebuild(e, [rw(c) for c in children(e)])
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
        return _places(launch.kernel, lambda c, place: of.get(place, c)).body
    return with_scalar_args(launch, "ilit", [(INT32, int(np.asarray(values[c[0]].value))) for c in classes], body)
