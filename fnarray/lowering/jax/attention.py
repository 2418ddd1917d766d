"""``dot_product_attention`` on jax (registered into ``common.RULES``): ``jax.nn.dot_product_attention``; other
dtypes through ``lowering/attention_math.py`` in ``jax.numpy``: JAX's softmax runs in float32 even for float64 inputs
(the primitive's in float64), and its float16/bfloat16 products ask for a dot algorithm XLA's CPU backend refuses
under ``jit`` ("The precision 'F16_F16_F32' is not supported by dot_general on CPU", jax 0.10).

``jax.nn.dot_product_attention``'s causal mask and window are aligned at the top left only: with ``lower_right``
(queries aligned at the end of the keys, MLX's ``mask="causal"``) they become a bool ``(B|1, 1, T, S)`` mask
operand built from the offsets (``attention_math.query_offsets``: with key lengths, data)."""

from __future__ import annotations

import numpy as np

from fnarray.core.attention import acc_dtype, dot_product_attention_p, key_sizes, lengths_operand, split_operands
from fnarray.lowering.attention_math import attention, keep_mask, query_offsets
from fnarray.lowering.jax.common import RULES

__all__ = ["jax_attention"]


def jax_attention(*xs, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False, lower_right=False,
                  kv_heads_first=False):
    """``jax.nn.dot_product_attention(q, k, v, bias, mask, scale=, is_causal=, key_value_seq_lengths=,
    local_window_size=)`` (keys and values given heads first transposed to its ``(B, S, K, H)``)."""
    import jax
    import jax.numpy as jnp
    params = dict(scale=scale, is_causal=is_causal, local_window=local_window, has_bias=has_bias, has_mask=has_mask,
                  has_lengths=has_lengths, lower_right=lower_right, kv_heads_first=kv_heads_first)
    q, k, v, bias, mask = split_operands(xs, has_bias, has_mask)
    dtype = np.dtype(q.dtype)
    T, S = q.shape[1], key_sizes(k.shape, kv_heads_first)[0]
    if S == 0:
        return jnp.zeros(q.shape, q.dtype)
    if dtype != np.float32:
        return attention(jnp, lambda x, d: jnp.asarray(x, d), xs, acc_dtype(dtype), **params).astype(q.dtype)
    conditions = is_causal or local_window is not None
    offset = query_offsets(jnp, xs, T, S, has_lengths, lower_right) if conditions else None
    if offset is not None and not (isinstance(offset, int) and offset == 0):
        keep = keep_mask(jnp, T, S, is_causal, local_window, offset)
        keep = keep[None, None] if keep.ndim == 2 else keep
        mask = keep if mask is None else jnp.logical_and(mask, keep)
        is_causal, local_window = False, None
    if kv_heads_first:
        k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
    return jax.nn.dot_product_attention(q, k, v, bias, mask, scale=scale, is_causal=is_causal,
                                        key_value_seq_lengths=lengths_operand(xs, has_lengths),
                                        local_window_size=local_window)


RULES[dot_product_attention_p] = jax_attention
