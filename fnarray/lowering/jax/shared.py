"""Programs that differ only in their scalar literals share one ``jax.jit`` (one XLA compile per avals).

``jacfwd(lambda x: tanh(c * x) * x)`` staged for 40 values of ``c`` (``config.stage_eager_transforms``,
``benchmarks/programs.py``'s ``jacobians_staged``) traces 40 programs whose text differs only in the literal
``c``: each was its own ``jax.jit``, its own JAX trace, MLIR lowering and XLA compile (~0.1 s of CPU each for
programs of 10-60 equations, most of it XLA's fixed cost per program), where raw JAX's eager sweep compiles each
primitive once per shape and reuses it across the functions.

Here a program's *structure* is its text with every literal replaced by its dtype and weak type (the variables
numbered in order of definition; the equations' primitives and parameters, the inputs' avals, the values of the
constants compiled in: ``backend._inlined``). The first program of a structure is compiled as it is, its
literals constants of the XLA program (as ``jax.jit`` compiles a closed-over float). A later program of the same
structure whose literals all equal the first's (by bit pattern) reuses its ``jax.jit``; one whose literals differ
at some positions gets a ``jax.jit`` of the structure that reads the literals at those positions (and the
positions any earlier program of the structure changed) as scalar arguments, passed as device scalars made
once per program. Every later program of the structure then finds that one: two XLA compiles a structure, not
one a program. Only literals that have actually differed are read as arguments, so a decomposition's polynomial
coefficients stay constants of the XLA program.

The table holds what it made weakly (``Made``): the executables go with the last program that uses them, as
they did unshared.

Not shared: programs with sub-programs (control flow, calls) or effects, programs whose inputs are packed
(``backend.PACK_INPUTS_ABOVE``), parameters that cannot be hashed.
"""

from __future__ import annotations

import weakref

from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.ir import Literal, Program, Var
from fnarray.core.passes import param_key, has_effect, subprograms

__all__ = ["structure", "lifted", "Made", "Shared", "lookup", "stats"]

#: programs lowered through this module: ``made`` jax.jit objects, ``reused`` (a program served by one already made)
stats = {"made": 0, "reused": 0}

# structure key -> ``Shared``
_shared = LRUCache(lambda: config.jit_global_cache_size)


def structure(prog: Program, inlined: dict, donate: tuple):
    """``(key, literals)``: the program's text with its literals' values left out (hashable), and the literals in
    the order they appear (equation inputs, then outputs); ``None`` where the program is not shared (sub-programs,
    effects, unhashable parameters)."""
    number: dict = {}
    lits: list = []
    parts: list = [tuple(donate)]
    for i, v in enumerate(list(prog.constvars) + list(prog.invars)):
        number[v] = i
        parts.append(v.aval)
    for i in sorted(inlined):   # the constants compiled in: by value
        a = inlined[i]
        parts.append((i, a.dtype.str, a.shape, a.tobytes()))

    def atom(a):
        if type(a) is Literal:
            lits.append(a)
            return (a.aval.dtype, a.aval.weak_type)
        return number[a]

    for e in prog.eqns:
        if subprograms(e) or has_effect(e):
            return None
        ins = tuple(atom(a) for a in e.inputs)
        params = tuple((k, param_key(v)) for k, v in sorted(e.params.items()))
        for o in e.outputs:
            number[o] = len(number)
        parts.append((e.primitive, ins, params, tuple(o.aval for o in e.outputs)))
    parts.append(tuple(atom(a) for a in prog.outvars))
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:
        return None
    return key, lits


def lifted(prog: Program, positions) -> tuple[Program, list]:
    """``prog`` with the literals at ``positions`` (in ``structure``'s order) read from new trailing inputs:
    ``(program, those inputs' literals)``."""
    positions = set(positions)
    count = [0]
    new_in: list = []
    taken: list = []

    def atom(a):
        if type(a) is not Literal:
            return a
        k = count[0]
        count[0] += 1
        if k not in positions:
            return a
        v = Var(a.aval)
        new_in.append(v)
        taken.append(a)
        return v

    eqns = [e._replace(inputs=tuple(atom(a) for a in e.inputs)) for e in prog.eqns]
    outvars = [atom(a) for a in prog.outvars]
    return Program(prog.constvars, list(prog.invars) + new_in, eqns, outvars), taken


class Made:
    """One ``make(positions)`` value, held by the ``Lowered`` objects it serves: the structure's table holds it
    weakly, so its executables go when the last program using them does (as they did unshared)."""

    __slots__ = ("value", "__weakref__")

    def __init__(self, value):
        self.value = value


class Shared:
    """What one structure has made: the first program's literal keys, the positions that have differed since,
    and a weak reference to the ``Made`` of each (lifted positions, the literals kept as constants)."""

    __slots__ = ("first", "positions", "made")

    def __init__(self, lits):
        self.first = tuple(a._key for a in lits)
        self.positions = frozenset()
        self.made: dict = {}


def lookup(key, lits, make) -> tuple[Made, list]:
    """The ``Made`` of ``make(positions)`` serving a program of structure ``key`` and literals ``lits`` (its
    caller keeps it alive), and the positions of the literals it reads as arguments (sorted)."""
    entry = _shared.get(key)
    if entry is None:
        entry = _shared.put(key, Shared(lits))
    differ = {i for i, (a, b) in enumerate(zip(lits, entry.first, strict=True)) if a._key != b}
    positions = entry.positions = entry.positions | differ
    kept = tuple(a._key for i, a in enumerate(lits) if i not in positions)
    vkey = (positions, kept)
    ref = entry.made.get(vkey)
    got = None if ref is None else ref()
    if got is None:
        got = Made(make(sorted(positions)))
        entry.made[vkey] = weakref.ref(got)
        stats["made"] += 1
    else:
        stats["reused"] += 1
    return got, sorted(positions)
