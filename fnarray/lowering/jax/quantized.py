"""``quantized_matmul`` on jax: unpacking and scaling that XLA fuses into one dot (registered into ``common.RULES``)."""

from __future__ import annotations

from fnarray.core.quantized import quantized_matmul_p
from fnarray.lowering.jax.common import RULES
from fnarray.lowering.packed import acc_dtype, unpack

__all__ = ["jax_quantized_matmul"]


def jax_quantized_matmul(x, w, scales, biases, *, transpose, group_size, bits):
    """Unpacking and scaling written as elementwise ops on the packed words feeding one ``dot_general``, which
    XLA fuses (the jitted program's only weight input stays the packed uint32 array)."""
    import jax.numpy as jnp
    from jax import lax
    acc = acc_dtype(x.dtype)
    q = unpack(jnp, w, bits, jnp.asarray).astype(acc)
    rows, cols = q.shape
    q = q.reshape(rows, cols // group_size, group_size)
    wd = (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)
    contract = (1,) if transpose else (0,)
    out = lax.dot_general(x.astype(acc), wd, (((x.ndim - 1,), contract), ((), ())),
                          preferred_element_type=acc)
    return out.astype(x.dtype)


RULES[quantized_matmul_p] = jax_quantized_matmul
