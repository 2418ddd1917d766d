"""``dot_product_attention`` on jax (registered into ``common.RULES``): ``jax.nn.dot_product_attention``; other
dtypes through ``lowering/attention_math.py`` in ``jax.numpy``: JAX's softmax runs in float32 even for float64 inputs
(the primitive's in float64), and its float16/bfloat16 products ask for a dot algorithm XLA's CPU backend refuses
under ``jit`` ("The precision 'F16_F16_F32' is not supported by dot_general on CPU", jax 0.10)."""

from __future__ import annotations

import numpy as np

from fnarray.core.attention import acc_dtype, dot_product_attention_p, lengths_operand, split_operands
from fnarray.lowering.attention_math import attention
from fnarray.lowering.jax.common import RULES

__all__ = ["jax_attention"]


def jax_attention(*xs, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False):
    """``jax.nn.dot_product_attention(q, k, v, bias, mask, scale=, is_causal=, key_value_seq_lengths=,
    local_window_size=)``."""
    import jax
    import jax.numpy as jnp
    params = dict(scale=scale, is_causal=is_causal, local_window=local_window, has_bias=has_bias, has_mask=has_mask,
                  has_lengths=has_lengths)
    q, k, v, bias, mask = split_operands(xs, has_bias, has_mask)
    dtype = np.dtype(q.dtype)
    if k.shape[1] == 0:
        return jnp.zeros(q.shape, q.dtype)
    if dtype != np.float32:
        return attention(jnp, lambda x, d: jnp.asarray(x, d), xs, acc_dtype(dtype), **params).astype(q.dtype)
    return jax.nn.dot_product_attention(q, k, v, bias, mask, scale=scale, is_causal=is_causal,
                                        key_value_seq_lengths=lengths_operand(xs, has_lengths),
                                        local_window_size=local_window)


RULES[dot_product_attention_p] = jax_attention
