"""Concatenation pieces that are one computation at shifted slices (``emitter._concatenate``).

An image grid concatenates ``x[0], x[1], ..., x[n-1]`` (each sliced, reshaped, transposed): its pieces are the
same chain of equations, and they differ only in where their ``slice`` starts, by ``k * step`` for piece ``k``.
Such a concatenation needs no choice between pieces: element ``i`` along the axis is element ``i % m`` of piece
``i // m`` (``m`` the pieces' common extent), and piece ``k`` is piece 0's chain with its slices started
``k * step`` further, so the kernel evaluates piece 0's chain once with shifted slice starts and loads one
element. A ``select`` chain evaluates every piece per element and a branch tree every piece's index arithmetic
on SIMD CPUs (lavapipe and PoCL execute both sides of a divergent ``if`` under a mask); this form costs the same
per element for 2 pieces or 1,000.

``slice_steps`` finds the steps, or says the pieces are not of that form.
"""

from __future__ import annotations

from fnarray.core import primitives as P
from fnarray.core.ir import Literal

__all__ = ["slice_steps"]

#: equations compared at most (all pieces together), so a concatenation of large unrelated pieces is refused quickly
_MAX_STEPS = 20_000


class _Walk:
    """The comparison of piece 0's chain with piece ``k``'s."""

    def __init__(self, em, k, budget):
        self.em, self.k, self.budget = em, k, budget
        self.seen: dict = {}      # id(equation of piece 0) -> the equation of piece k it matches
        self.leaves: set = set()  # variables shared by both chains (read unshifted)
        self.steps: dict = {}     # id(slice equation of piece 0) -> (equation, per-dimension step)

    def match(self, a, b) -> bool:
        if a is b:
            if not isinstance(a, Literal):
                self.leaves.add(a)
            return True
        if isinstance(a, Literal) or isinstance(b, Literal):
            return (isinstance(a, Literal) and isinstance(b, Literal) and a.aval == b.aval
                    and _same(a.val, b.val))
        em = self.em
        if a.aval != b.aval or em.buffer_of(a) is not None or em.buffer_of(b) is not None:
            return False
        ea, eb = em.producer.get(a), em.producer.get(b)
        if ea is None or eb is None:
            return False
        prev = self.seen.get(id(ea))
        if prev is not None:
            return prev is eb and ea.outputs.index(a) == eb.outputs.index(b)
        self.budget[0] -= 1
        if self.budget[0] < 0 or not self._same_equation(ea, eb, a, b):
            return False
        self.seen[id(ea)] = eb
        return all(self.match(x, y) for x, y in zip(ea.inputs, eb.inputs, strict=True))

    def _same_equation(self, ea, eb, a, b) -> bool:
        if ea.primitive is not eb.primitive or len(ea.inputs) != len(eb.inputs) \
                or ea.outputs.index(a) != eb.outputs.index(b):
            return False
        if ea.primitive is not P.slice_p:
            return _same(ea.params, eb.params)
        pa, pb = ea.params, eb.params
        if tuple(pa["strides"] or ()) != tuple(pb["strides"] or ()):
            return False
        delta = [y - x for x, y in zip(pa["start_indices"], pb["start_indices"], strict=True)]
        if any(d % self.k for d in delta):
            return False
        self.steps[id(ea)] = (ea, tuple(d // self.k for d in delta))
        return True


def _same(x, y) -> bool:
    """Equal params or literal values (an array-valued param compares as unequal rather than raising)."""
    try:
        return bool(x == y)
    except (TypeError, ValueError):
        return False


def _reaches(em, leaves, steps, budget) -> bool:
    """Whether a shared variable is computed from a slice that moves (it would be read shifted too)."""
    stack, seen = list(leaves), set()
    while stack:
        v = stack.pop()
        if isinstance(v, Literal) or id(v) in seen or em.buffer_of(v) is not None:
            continue
        seen.add(id(v))
        e = em.producer.get(v)
        if e is None:
            continue
        if id(e) in steps:
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return True
        stack.extend(e.inputs)
    return False


def slice_steps(em, pieces):
    """``{id(eqn): (eqn, step)}`` over the ``slice`` equations of ``pieces[0]``'s chain such that ``pieces[k]``
    is that chain with each of those slices started ``k * step`` further (a tuple per dimension; zero steps left
    out), or ``None`` where the pieces are not of that form.

    Args:
      em: the kernel's ``Emitter`` (its ``producer`` map and ``buffer_of``: a variable in a buffer is compared
        by identity, not by what made it).
      pieces: two or more IR variables of one aval.

    The walk compares equations (primitive, params, output position) from each piece back to the variables the
    pieces share; it gives up after ``_MAX_STEPS`` equations. Every piece must walk the same equations of piece
    0's chain and share the same variables with it, and no shared variable may be computed from a moving slice.
    """
    budget = [_MAX_STEPS]
    first = None
    for k in range(1, len(pieces)):
        w = _Walk(em, k, budget)
        if not w.match(pieces[0], pieces[k]):
            return None
        if first is None:
            first = w
        elif set(w.seen) != set(first.seen) or {id(v) for v in w.leaves} != {id(v) for v in first.leaves} \
                or any(first.steps[i][1] != s for i, (_e, s) in w.steps.items()):
            return None
    moving = {i: es for i, es in first.steps.items() if any(es[1])}
    if moving and _reaches(em, first.leaves, moving, budget):
        return None
    return moving
