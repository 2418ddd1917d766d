"""Batching rule table (conventions of ``jax.interpreters.batching``).

``primitive_batchers[prim](args, dims, **params) -> (out, out_dim)``: ``args``
are the unbatched-view values (batched ones carry their batch axis at
``dims[i]``; ``dims[i]`` is ``None`` for an unbatched argument, and at least one
is not ``None``). For ``multiple_results`` primitives it returns
``(outs, out_dims)``. ``out_dim`` is an int or ``None``.
"""

from __future__ import annotations

__all__ = ["primitive_batchers", "collective_batchers", "not_mapped"]

not_mapped = None
primitive_batchers: dict = {}

#: Collectives (``fnarray.core.collectives``): ``rule(vals, dims, axis, **params) -> (out, out_dim)`` where
#: ``axis`` is the batch level's ``BatchAxis(size, name)``; called even when no operand is batched (a
#: collective over the level's own axis acts on values every example shares).
collective_batchers: dict = {}
