"""Batching rule table (conventions of ``jax.interpreters.batching``).

``primitive_batchers[prim](args, dims, **params) -> (out, out_dim)``: ``args``
are the unbatched-view values (batched ones carry their batch axis at
``dims[i]``; ``dims[i]`` is ``None`` for an unbatched argument, and at least one
is not ``None``). For ``multiple_results`` primitives it returns
``(outs, out_dims)``. ``out_dim`` is an int or ``None``.
"""

from __future__ import annotations

__all__ = ["primitive_batchers", "not_mapped"]

not_mapped = None
primitive_batchers: dict = {}
