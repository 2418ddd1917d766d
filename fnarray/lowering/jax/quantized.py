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
- XLA fuses a dot's producers only while its vector is under 16 KiB (``kFusionThresholdBytes`` of XLA's CPU
  instruction fusion: 4064 float32 elements fuse, 4096 do not, measured with jax 0.10.2), so with
  ``transpose`` the contraction is cut into ``_chunks`` under ``FUSED_VECTOR_BYTES`` and the partial products
  summed (issue 30: a 4096 x 4096 4-bit product, one row, wrote a transposed ``f32[4096,4096]`` copy on every
  call, 36-38x float32's time);
- more rows (prefill): the dequantized weights feeding one ``dot_general``, whose blocked product amortizes
  writing them over the rows.
"""

from __future__ import annotations

from fnarray.core.quantized import FLOAT_MODES, quantized_matmul_p
from fnarray.lowering.jax.common import RULES
from fnarray.lowering.packed import acc_dtype, fp_weights, unpack

__all__ = ["jax_quantized_matmul", "DECODE_ROWS", "FUSED_VECTOR_BYTES"]

#: Rows of ``x`` up to which the product is one fused matrix-vector product per row.
DECODE_ROWS = 4
#: XLA's CPU backend fuses the producers of a matrix-vector dot only for a vector of fewer bytes than this.
FUSED_VECTOR_BYTES = 16 * 1024


def _chunks(k, step, itemsize):
    """``[(start, stop)]`` cutting ``k`` contraction elements into near-equal chunks, each a multiple of ``step``
    (whole packed words and groups) and of fewer than ``FUSED_VECTOR_BYTES`` bytes at ``itemsize``; one chunk
    where ``k`` already fits."""
    if k * itemsize < FUSED_VECTOR_BYTES:
        return [(0, k)]
    most = max(step, (FUSED_VECTOR_BYTES // itemsize - 1) // step * step)
    count = -(-k // most)
    size = -(-(k // step) // count) * step
    return [(a, min(a + size, k)) for a in range(0, k, size)]


def _dequantize(jnp, w, scales, biases, acc, group_size, bits, mode):
    """The float weights (``acc``) of packed words ``w`` with their scales (and biases)."""
    if mode in FLOAT_MODES:
        return fp_weights(jnp, w, scales, acc, mode, jnp.asarray)
    q = unpack(jnp, w, bits, jnp.asarray).astype(acc)
    rows, cols = q.shape
    q = q.reshape(rows, cols // group_size, group_size)
    return (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)


def jax_quantized_matmul(x, w, scales, *biases, transpose, group_size, bits, mode):
    """``x @ dequantize(w).T`` (``transpose``) or ``x @ dequantize(w)`` for ``x (..., k)``, accumulated in float32
    (float64 for float64); the floating modes (no biases) look their element and scale values up in tables; the
    jitted program's only weight input is the packed uint32 array (see the module
    docstring for the two forms). Source: MLX's ``quantized_matmul`` (the format), XLA CPU's fusion of
    matrix-vector products."""
    import jax.numpy as jnp
    from jax import lax
    acc = acc_dtype(x.dtype)
    m = 1
    for d in x.shape[:-1]:
        m *= d
    k = x.shape[-1]
    if 0 < m <= DECODE_ROWS and transpose:
        # One fused matrix-vector product per row and contraction chunk (the module docstring), summed.
        xs = x.astype(acc).reshape(m, k)
        parts = []
        for a, b in _chunks(k, max(32, group_size), acc.itemsize):
            wa, wb, ga, gb = a * bits // 32, b * bits // 32, a // group_size, b // group_size
            wd = _dequantize(jnp, w[:, wa:wb], scales[:, ga:gb], biases[0][:, ga:gb] if biases else None, acc,
                             group_size, bits, mode)
            parts.append(jnp.stack([jnp.matmul(xs[i, a:b], wd.T, preferred_element_type=acc) for i in range(m)]))
        # Summed behind an optimization barrier: an add of two dots becomes XLA's output fusion of the second,
        # which then no longer fuses its dequantizing producers (measured: a transposed copy again).
        out = parts[0] if len(parts) == 1 else sum(lax.optimization_barrier(parts))
        return out.reshape(x.shape[:-1] + (out.shape[1],)).astype(x.dtype)
    wd = _dequantize(jnp, w, scales, biases[0] if biases else None, acc, group_size, bits, mode)
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
