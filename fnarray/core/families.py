"""Primitive families: what is uniform across a family is registered once, for every member (docs/design.md,
"Families and decompositions").

A primitive is declared with its family (``Primitive(..., kind=...)``; ``primitives.unary``/``binary`` set
it). A rule table that treats a family uniformly registers a function with ``on_family(kind, register)``:
``register(primitive)`` runs for every member defined so far and for every member defined later, as JAX's
``unop`` calls ``defvectorized``. So the batching rule of an elementwise op, its kernel-compiler entry and its
parity case come from the family, and a new member costs only what is specific to it (its definition, JVP,
numpy reference, and an entry per backend that has a native function for it).

A table that needs something else for one member registers that member's own rule after the family's: the
last registration wins.
"""

from __future__ import annotations

__all__ = ["FAMILIES", "on_family", "members", "announce"]

#: The families, in the order the matrix of ``python -m fnarray primitives`` groups them.
FAMILIES = ("unary", "binary", "reduce", "cumulative", "structural", "other", "linalg", "control", "collective",
            "effect", "kernel")   # kernel: the primitives of a pallas_call body (fnarray.core.pallas)

_MEMBERS: dict = {k: [] for k in FAMILIES}
_HOOKS: dict = {k: [] for k in FAMILIES}


def announce(prim) -> None:
    """Called by ``Primitive.__init__``: ``prim`` joins its family and gets the family's registrations."""
    if prim.kind not in _MEMBERS:
        raise ValueError(f"primitive {prim.name!r} has family {prim.kind!r}; expected one of {', '.join(FAMILIES)}")
    _MEMBERS[prim.kind].append(prim)
    for register in _HOOKS[prim.kind]:
        register(prim)


def on_family(kind: str, register) -> None:
    """Run ``register(primitive)`` for every member of family ``kind``, present and future."""
    if kind not in _HOOKS:
        raise ValueError(f"unknown family {kind!r}; expected one of {', '.join(FAMILIES)}")
    _HOOKS[kind].append(register)
    for prim in list(_MEMBERS[kind]):
        register(prim)


def members(kind: str) -> list:
    """The primitives of family ``kind``, in definition order."""
    return list(_MEMBERS[kind])
