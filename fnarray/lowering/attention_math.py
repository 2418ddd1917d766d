"""``dot_product_attention`` over any array library with NumPy's names (NumPy, ``jax.numpy``, ``mlx.core``), shared
by the library backends' rules (``numpy/attention.py``, ``jax/attention.py``, ``mlx/attention.py``); it imports no
backend library. The kernel backends' form is ``fnarray.lowering.kernels.groups.attention``.

The semantics are the primitive's (``fnarray.core.attention``): logits, softmax and the weighted sum of the values
in float32 (float64 for float64), removed logits at ``MASKED_LOGIT``, one rounding at the end. Grouped-query heads
are a reshape of the queries to ``(B, K, G, T, H)`` against keys ``(B, K, 1, H, S)``: no key or value is repeated.
"""

from __future__ import annotations

from fnarray.core.attention import MASKED_LOGIT, key_sizes, lengths_operand, offset_limit, split_operands

__all__ = ["attention", "keep_mask", "query_offsets"]


def query_offsets(xp, operands, T, S, has_lengths=False, lower_right=False):
    """The ``lower_right`` offsets of the query positions: None (aligned at the top left), the int ``S - T``, or
    with key lengths ``clip(kv_lengths, 0, S + T) - T`` shaped ``(B, 1, 1, 1)`` (data: a run-time offset)."""
    if not lower_right:
        return None
    lengths = lengths_operand(operands, has_lengths)
    if lengths is None:
        return S - T
    lo, hi = offset_limit(T, S)
    return (xp.minimum(xp.maximum(lengths, lo), hi) - T)[:, None, None, None]


def keep_mask(xp, T, S, is_causal, local_window, offset=None):
    """The bool mask of the causal and window conditions, or None: ``(T, S)``, broadcast against ``offset``
    (``query_offsets``) when given."""
    if not is_causal and local_window is None:
        return None
    t = xp.arange(T)[:, None]
    s = xp.arange(S)[None, :]
    if offset is not None:
        t = t + offset
    keep = None
    if is_causal:
        keep = s <= t
    if local_window is not None:
        left, right = local_window
        win = xp.logical_and(t <= s + left, t >= s - right)
        keep = win if keep is None else xp.logical_and(keep, win)
    return keep


def attention(xp, cast, operands, acc, *, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False,
              lower_right=False, kv_heads_first=False):
    """The primitive on ``operands`` (arrays of ``xp``) computed in the NumPy dtype ``acc``
    (``fnarray.core.attention.acc_dtype``), the result left in it; ``cast(x, numpy_dtype)`` converts an array."""
    q, k, v, bias, mask = split_operands(operands, has_bias, has_mask)
    B, T, N, H = q.shape
    S, K = key_sizes(k.shape, kv_heads_first)
    G = N // K
    heads = (0, 1, 2, 3) if kv_heads_first else (0, 2, 1, 3)                      # k, v to (B, K, S, H)
    qg = cast(q, acc).reshape(B, T, K, G, H).transpose(0, 2, 3, 1, 4)          # (B, K, G, T, H)
    kt = cast(k, acc).transpose(heads[:2] + (3, heads[2]))[:, :, None]          # (B, K, 1, H, S)
    logits = xp.matmul(qg, kt).reshape(B, N, T, S) * scale
    if bias is not None:
        logits = logits + cast(bias, acc)
    keep = keep_mask(xp, T, S, is_causal, local_window, query_offsets(xp, operands, T, S, has_lengths, lower_right))
    if mask is not None:
        keep = mask if keep is None else xp.logical_and(keep, mask)
    lengths = lengths_operand(operands, has_lengths)
    if lengths is not None:   # (B, 1, 1, S): key s stays while s < kv_lengths[b]
        m = xp.arange(S)[None, None, None, :] < lengths[:, None, None, None]
        keep = m if keep is None else xp.logical_and(keep, m)
    if keep is not None:
        logits = xp.where(keep, logits, cast(MASKED_LOGIT, acc))
    top = logits.max(axis=-1, keepdims=True)
    e = xp.exp(logits - top)
    probs = (e / e.sum(axis=-1, keepdims=True)).reshape(B, K, G, T, S)
    vt = cast(v, acc).transpose(heads)[:, :, None]                              # (B, K, 1, S, H)
    out = xp.matmul(probs, vt).transpose(0, 3, 1, 2, 4).reshape(B, T, N, H)    # (B, T, K, G, H) -> (B, T, N, H)
    return out

