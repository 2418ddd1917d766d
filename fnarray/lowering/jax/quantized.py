"""``quantized_matmul`` on jax (registered into ``common.RULES``): unpacking and scaling as elementwise ops on the
packed words feeding a dot.

XLA's CPU backend fuses the producers of a dot into it only for a matrix-vector product written as a vector
times a transposed matrix (``x @ wd.T``: a ``transpose`` then a ``dot`` contracting the matrix's first axis, which
it emits as one loop fusion reading the packed words); ``lax.dot_general`` contracting the weights' last axis
directly, or any product of several rows, runs as a library call that fuses nothing, so the float weights were
written to memory on every call and read back (the HLO of ``examples/llm.py``'s 4-bit decode step at width 1024:
one ``f32[2816,1024]`` loop fusion per weight, 7x slower than float32). So:

- up to ``DECODE_ROWS`` rows of ``x`` (a decode step): one fused matrix-vector product per row (each reads the
  packed words; 2816 x 2816 4-bit, one row: 0.38x the float32 product's time, against 2.6x before);
- more rows (prefill): the dequantized weights feeding one ``dot_general``, whose blocked product amortizes
  writing them over the rows.
"""

from __future__ import annotations

from fnarray.core.quantized import FLOAT_MODES, quantized_matmul_p
from fnarray.lowering.jax.common import RULES
from fnarray.lowering.packed import acc_dtype, fp_weights, unpack

__all__ = ["jax_quantized_matmul", "DECODE_ROWS"]

#: Rows of ``x`` up to which the product is one fused matrix-vector product per row.
DECODE_ROWS = 4


def jax_quantized_matmul(x, w, scales, biases=None, *, transpose, group_size, bits, mode):
    """``x @ dequantize(w).T`` (``transpose``) or ``x @ dequantize(w)`` for ``x (..., k)``, accumulated in float32
    (float64 for float64); the floating modes (no biases) look their element and scale values up in tables; the
    jitted program's only weight input is the packed uint32 array (see the module
    docstring for the two forms). Source: MLX's ``quantized_matmul`` (the format), XLA CPU's fusion of
    matrix-vector products."""
    import jax.numpy as jnp
    from jax import lax
    acc = acc_dtype(x.dtype)
    if mode in FLOAT_MODES:
        wd = fp_weights(jnp, w, scales, acc, mode, jnp.asarray)
    else:
        q = unpack(jnp, w, bits, jnp.asarray).astype(acc)
        rows, cols = q.shape
        q = q.reshape(rows, cols // group_size, group_size)
        wd = (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)
    m = 1
    for d in x.shape[:-1]:
        m *= d
    if m <= DECODE_ROWS:
        xs = x.astype(acc).reshape(m, x.shape[-1])
        mat = wd.T if transpose else wd
        out = jnp.stack([jnp.matmul(xs[i], mat, preferred_element_type=acc) for i in range(m)]) if m else \
            jnp.zeros((0, mat.shape[1]), acc)
        return out.reshape(x.shape[:-1] + (mat.shape[1],)).astype(x.dtype)
    contract = (1,) if transpose else (0,)
    out = lax.dot_general(x.astype(acc), wd, (((x.ndim - 1,), contract), ((), ())),
                          preferred_element_type=acc)
    return out.astype(x.dtype)


RULES[quantized_matmul_p] = jax_quantized_matmul
