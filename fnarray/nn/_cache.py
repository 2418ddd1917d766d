"""``KVCache``: a fixed-capacity key/value cache for autoregressive decoding (the role of mlx-lm's ``KVCache``).

The cache holds ``keys`` and ``values`` of shape ``(B, K, capacity, H)``, heads first (mlx-lm's layout, and
``dot_product_attention``'s with ``kv_heads_first=True``: each head's keys contiguous, so that a library's product
reads the cache in place; in the default ``(B, capacity, K, H)`` MLX's CPU attention copied the whole cache every
step), and the number of filled positions ``offset`` as an int32 array. ``update`` writes new entries at ``offset`` with
``dynamic_update_slice`` and returns a new cache (modules are immutable): every shape stays the same from the first
token to the last, so a jitted decode step taking and returning the cache is traced and compiled once for a whole
generation, and ``offset`` is data, never a static argument. ``attend`` passes the filled length as
``key_value_seq_lengths`` (a run-time operand: the fused kernel's key loop stops there, so a decode step costs the
filled positions, not the capacity) and, for several new positions, ``mask="causal"`` (the queries aligned at the end
of the filled keys: a causal mask with a run-time offset, no mask array).
"""

from __future__ import annotations

import numpy as np

from fnarray.core.errors import ShapeError
from fnarray.nn._module import Module

__all__ = ["KVCache"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _heads_first(x):
    """``(B, T, K, H) -> (B, K, T, H)``; one position (a decode step) is a reshape, no transpose."""
    fnp = _np()
    if x.shape[1] == 1:
        return fnp.reshape(x, (x.shape[0], x.shape[2], 1, x.shape[3]))
    return fnp.swapaxes(x, 1, 2)


class KVCache(Module):
    """A fixed-capacity key/value cache: ``keys``, ``values`` ``(B, K, capacity, H)`` (heads first) and ``offset``
    (int32, rank 0).

    Make one with ``KVCache.create(batch, capacity, kv_heads, head_dim)``; each step calls
    ``cache = cache.update(k, v)`` with the new positions' keys and values ``(B, T, K, H)`` and then
    ``cache.attend(q)`` (``dot_product_attention(q, cache.keys, cache.values, mask="causal",
    key_value_seq_lengths=[cache.offset] * B, kv_heads_first=True)``, the same as ``mask=cache.causal_mask(T)``).
    Built directly, ``KVCache(keys, values, offset)`` checks its fields: ``ShapeError`` for keys or values that are
    not rank 4 or differ in shape, ``TypeError`` for an ``offset`` that is not an integer scalar, ``ValueError`` for
    a concrete ``offset`` outside ``0 .. capacity``. Writing past ``capacity`` raises eagerly but is not detected under ``jit`` (``dynamic_update_slice`` clamps
    its start, as JAX's): size the cache for the whole generation. Source: the KV cache of autoregressive
    transformers (Pope et al., "Efficiently scaling transformer inference", 2022); the fixed-shape
    form of ``jax`` decoding loops; the heads-first layout of mlx-lm's ``KVCache``.
    """

    keys: object
    values: object
    offset: object

    @classmethod
    def create(cls, batch, capacity, kv_heads, head_dim, dtype="float32", device=None):
        """An empty cache: zeros of shape ``(batch, kv_heads, capacity, head_dim)`` and ``offset = 0``.

        Args:
          batch, capacity, kv_heads, head_dim: positive ints; dtype: the keys' and values' dtype; device: where
            the arrays live (default: the default device).
        Returns: a ``KVCache``.
        Raises: ``TypeError`` for a size that is not an int; ``ValueError`` for a size below 1.
        """
        import fnarray as fa
        fnp = _np()
        sizes = dict(batch=batch, capacity=capacity, kv_heads=kv_heads, head_dim=head_dim)
        odd = {k: v for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, (int, np.integer))}
        if odd:
            raise TypeError(f"KVCache.create: sizes must be ints, got {odd}")
        bad = {k: v for k, v in sizes.items() if int(v) < 1}
        if bad:
            raise ValueError(f"KVCache.create: sizes must be at least 1, got {bad}")
        shape = (int(batch), int(kv_heads), int(capacity), int(head_dim))
        arrays = (fnp.zeros(shape, dtype=dtype), fnp.zeros(shape, dtype=dtype), fnp.zeros((), dtype="int32"))
        if device is not None:
            arrays = tuple(fa.device_put(a, device) for a in arrays)
        return cls(*arrays)

    def __check_init__(self):
        """The fields' checks (see the class); unflattening a pytree does not run them."""
        from fnarray.core.tracing import Tracer
        shapes = {}
        for name in ("keys", "values"):
            shape = getattr(getattr(self, name), "shape", None)
            if shape is None or len(shape) != 4:
                raise ShapeError(f"KVCache: {name} must be an array of shape (B, K, capacity, H) (heads first), got "
                                 f"{'a ' + type(getattr(self, name)).__name__ if shape is None else tuple(shape)}; "
                                 f"make an empty cache with KVCache.create(batch, capacity, kv_heads, head_dim)")
            shapes[name] = tuple(shape)
        if shapes["keys"] != shapes["values"]:
            raise ShapeError(f"KVCache: keys {shapes['keys']} and values {shapes['values']} must have the same shape "
                             f"(B, K, capacity, H)")
        off = self.offset
        dtype = getattr(off, "dtype", None)
        if isinstance(off, (bool, np.bool_)) or np.shape(off) != () or not (
                isinstance(off, (int, np.integer)) or dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)):
            raise TypeError(f"KVCache: offset must be an integer scalar (the filled positions), got {off!r}")
        capacity = shapes["keys"][2]
        if not isinstance(off, Tracer) and not 0 <= int(off) <= capacity:
            raise ValueError(f"KVCache: offset must lie in 0..{capacity} (the filled positions of a cache of "
                             f"capacity {capacity}), got {int(off)}")

    @property
    def capacity(self) -> int:
        """The positions the cache holds (its third axis)."""
        return self.keys.shape[2]

    def update(self, keys, values):
        """A new cache with ``keys``, ``values`` ``(B, T, K, H)`` written at positions ``offset .. offset + T - 1``.

        Raises: ``ShapeError`` when the batch, heads or head size differ from the cache's, keys and values hold
        different numbers of positions, ``T`` exceeds the
        capacity, or (eagerly, with a concrete ``offset``) ``offset + T`` does; past the end under ``jit`` the
        write is clamped: see the class.
        """
        from fnarray import lax
        fnp = _np()
        keys, values = fnp.asarray(keys), fnp.asarray(values)
        B, K, C, H = self.keys.shape
        for name, x in (("keys", keys), ("values", values)):
            if x.ndim != 4 or x.shape[0] != B or x.shape[2:] != (K, H) or x.shape[1] > C:
                raise ShapeError(f"KVCache.update: {name} must be (B={B}, T<={C}, K={K}, H={H}), got "
                                 f"{tuple(x.shape)}")
        if keys.shape[1] != values.shape[1]:
            raise ShapeError(f"KVCache.update: keys {tuple(keys.shape)} and values {tuple(values.shape)} must hold "
                             f"the same number of new positions")
        from fnarray.core.tracing import Tracer
        if not isinstance(self.offset, Tracer) and int(self.offset) + keys.shape[1] > C:
            raise ShapeError(f"KVCache.update: {keys.shape[1]} new positions at offset {int(self.offset)} overflow "
                             f"the capacity {C}; create the cache with capacity >= the whole generation")
        zero = fnp.zeros((), dtype="int32")
        start = (zero, zero, self.offset, zero)
        new_keys = lax.dynamic_update_slice(self.keys, _heads_first(keys.astype(self.keys.dtype)), start)
        new_values = lax.dynamic_update_slice(self.values, _heads_first(values.astype(self.values.dtype)), start)
        # checked above: built as unflattening does, without the constructor's checks (an eager int(offset) each)
        new = {"keys": new_keys, "values": new_values, "offset": self.offset + keys.shape[1]}
        return KVCache._fa_from_fields(list(new.items()), [])

    def causal_mask(self, length):
        """``(1, 1, length, capacity)`` bool: after an ``update`` of ``length`` positions, query ``t`` keeps the
        filled keys ``s <= offset - length + t`` (causal within the new positions, every earlier one)."""
        fnp = _np()
        t = fnp.arange(length, dtype="int32")[:, None]
        s = fnp.arange(self.capacity, dtype="int32")[None, :]
        return (s <= self.offset - length + t)[None, None]

    def attend(self, queries, *, scale=None):
        """``dot_product_attention(queries, keys, values, mask=causal_mask(T))`` for queries ``(B, T, N, H)`` of the
        positions just written (``N`` a multiple of the cache's ``K``), computed as
        ``dot_product_attention(..., key_value_seq_lengths=[offset] * B, kv_heads_first=True)``, for several
        positions with ``mask="causal"`` (queries aligned at the end of the ``offset`` filled keys: query ``t`` keeps
        keys ``s <= offset - T + t``, ``causal_mask``'s condition, as a run-time offset). The same result, but the fused
        kernel walks only the keys each query keeps, not the whole capacity, and reads no mask."""
        from fnarray.nn._attention import dot_product_attention
        fnp = _np()
        q = fnp.asarray(queries)
        T = q.shape[1]
        lengths = fnp.broadcast_to(fnp.asarray(self.offset).astype("int32"), (self.keys.shape[0],))
        mask = None if T == 1 else "causal"
        return dot_product_attention(q, self.keys, self.values, mask=mask, scale=scale, key_value_seq_lengths=lengths,
                                     kv_heads_first=True)
