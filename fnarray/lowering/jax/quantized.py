"""``quantized_matmul`` on jax (registered into ``common.RULES``): unpacking and scaling as elementwise ops on the
packed words feeding a dot.

XLA's CPU backend fuses the producers of a dot into it only for a matrix-vector product written as a vector
times a transposed matrix (``x @ wd.T``: a ``transpose`` then a ``dot`` contracting the matrix's first axis, which
it emits as one loop fusion reading the packed words); ``lax.dot_general`` contracting the weights' last axis
directly, or any product of several rows, runs as a library call that fuses nothing, so the float weights were
written to memory on every call and read back (the HLO of ``examples/llm.py``'s 4-bit decode step at width 1024:
one ``f32[2816,1024]`` loop fusion per weight, 7x slower than float32). So, up to ``DECODE_ROWS`` rows of ``x``
(a decode step), one fused matrix-vector product per row, each reading the packed words (2816 x 2816 4-bit, one
row: 0.38x the float32 product's time, against 2.6x before):

- XLA fuses a dot's producers only while its vector is under 16 KiB (``kFusionThresholdBytes`` of XLA's CPU
  instruction fusion: 4064 float32 elements fuse, 4096 do not, measured with jax 0.10.2), so the contraction is
  cut into ``_chunks`` under ``FUSED_VECTOR_BYTES`` and the partial products summed (issue 30: a 4096 x 4096
  4-bit product, one row, wrote a transposed ``f32[4096,4096]`` copy on every call, 36-38x float32's time);
- the fused product is fast only where the contraction runs along memory, which with ``transpose=False``
  (``x @ W``, the packed words along the output axis) it does not: there each row's product reads the float
  weights written by one loop fusion (tenth session, 2048 x 2048 4-bit, one row, XLA on one thread, load 11:
  materialising 10-17 ms against float32's 2.2 ms; the fused strided forms were all slower: a fused column
  reduction or product 26-38 ms, the words re-packed along the contraction by a reduce 43 ms, transposed by a
  scatter 26 ms, dequantized in 32-128-row blocks in a loop 14-16 ms. XLA's CPU pipeline expands
  optimization barriers before simplifying, so a transposed copy of the words cannot be forced through one);
- the floating modes decode their elements by bit arithmetic (``e2m1_values``, ``e4m3_values``), not by a table
  gather: XLA copies cheap elementwise producers into each row's fusion but not a gather, which several rows'
  products read and so was written whole (the looked-up weights, before the tenth session); their scales are
  still looked up (a small array).

More rows (prefill): the dequantized weights feed one ``dot_general``, whose blocked product amortizes writing
them over the rows.
"""

from __future__ import annotations

import numpy as np

from fnarray.core.quantized import FLOAT_MODES, quantized_matmul_p
from fnarray.lowering.jax.common import RULES
from fnarray.lowering.packed import FLOAT_FORMATS, acc_dtype, unpack

__all__ = ["jax_quantized_matmul", "DECODE_ROWS", "FUSED_VECTOR_BYTES", "e2m1_values", "e4m3_values"]

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


def _float_bits(jnp, lax, bits):
    """float32 values of uint32 IEEE bit patterns."""
    return lax.bitcast_convert_type(bits.astype(jnp.uint32), jnp.float32)


def _through_half(jnp, lax, c, shift, exponent_gap):
    """float32 of a small float's unsigned bits ``c`` placed at bit ``shift`` of a float16 (its exponent field is
    then the float16's, 15 - ``exponent_gap`` too small, which one power-of-two product restores): the float16 to
    float32 conversion reads float16 subnormals right, where XLA's CPU float32 arithmetic flushes float32
    subnormals to zero (measured), and costs less than selecting the subnormal case (mxfp8, 2048 x 2048, one row:
    1.6 against 2.2-2.5 ms for bit selects)."""
    half = lax.bitcast_convert_type((c << shift).astype(jnp.uint16), jnp.float16)
    return half.astype(jnp.float32) * np.float32(2.0 ** exponent_gap)


def _with_sign(jnp, lax, magnitude, sign_bit):
    """``magnitude`` (float32, non-negative) with the sign bit ``sign_bit`` (uint32, 0 or 1)."""
    return _float_bits(jnp, lax, lax.bitcast_convert_type(magnitude, jnp.uint32) | (sign_bit << 31))


def e2m1_values(jnp, lax, c):
    """float32 values of 4-bit E2M1 codes ``c`` (uint32), ``packed.E2M1`` by bit arithmetic: sign ``c >> 3``,
    exponent (bias 1) and mantissa ``c & 7`` read as a float16's top bits (bias 15: times ``2**14``; ``e = 0`` a
    subnormal, ``0.5 * m``). Source: OCP Microscaling Formats v1.0."""
    return _with_sign(jnp, lax, _through_half(jnp, lax, c & 7, 9, 14), (c >> 3) & 1)


def e4m3_values(jnp, lax, c):
    """float32 values of E4M3 bytes ``c`` (uint32 below 256; ``ml_dtypes.float8_e4m3fn``, ``packed.E4M3``) by bit
    arithmetic: sign bit 7, exponent (bias 7) and mantissa ``c & 0x7F`` read as a float16's top bits (bias 15:
    times ``2**8``; ``e = 0`` a subnormal, ``m * 2**-9``); ``0x7F`` and ``0xFF`` are NaN. Source: OCP 8-bit
    floating point v1.0."""
    value = _with_sign(jnp, lax, _through_half(jnp, lax, c & 0x7F, 7, 8), (c >> 7) & 1)
    return jnp.where((c & 0x7F) == 0x7F, np.float32(np.nan), value)


#: Per floating mode: the decoder of its elements (``packed.FLOAT_FORMATS``' element tables).
_ELEMENT_DECODERS = {"mxfp4": e2m1_values, "mxfp8": e4m3_values, "nvfp4": e2m1_values}


def _dequantize(jnp, w, scales, biases, acc, group_size, bits, mode):
    """The float weights (``acc``) of packed words ``w`` with their scales (and biases), elementwise (the floating
    modes' element values by bit arithmetic, no gather)."""
    from jax import lax
    q = unpack(jnp, w, bits, jnp.asarray)
    rows, cols = q.shape
    if mode in FLOAT_MODES:
        # Elements by bit arithmetic; scales (one a group) from their table: written once where several rows
        # read them, a small array, and faster than decoding them again for every element (nvfp4's E4M3 scales,
        # 2048 x 2048, four rows: 2.8 against 4.3-5.9 ms).
        q = _ELEMENT_DECODERS[mode](jnp, lax, q).astype(acc)
        s = jnp.take(jnp.asarray(FLOAT_FORMATS[mode][1].astype(acc)), scales.astype(jnp.int32), axis=0)
        return (q.reshape(rows, cols // group_size, group_size) * s[:, :, None]).reshape(rows, cols)
    q = q.astype(acc).reshape(rows, cols // group_size, group_size)
    return (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)


def _decode_rows(jnp, lax, xs, w, scales, biases, acc, group_size, bits, mode):
    """``(m, n)``: each row of ``xs (m, k)`` times the dequantized weights ``w (n, k)`` (``transpose``) as fused
    matrix-vector products, one per row and contraction chunk (the module docstring), summed."""
    parts = []
    for a, b in _chunks(xs.shape[1], max(32, group_size), acc.itemsize):
        wa, wb, ga, gb = a * bits // 32, b * bits // 32, a // group_size, b // group_size
        wd = _dequantize(jnp, w[:, wa:wb], scales[:, ga:gb], None if biases is None else biases[:, ga:gb], acc,
                         group_size, bits, mode)
        parts.append(jnp.stack([jnp.matmul(xs[i, a:b], wd.T, preferred_element_type=acc)
                                for i in range(xs.shape[0])]))
    # Summed behind an optimization barrier: an add of two dots becomes XLA's output fusion of the second,
    # which then no longer fuses its dequantizing producers (measured: a transposed copy again).
    return parts[0] if len(parts) == 1 else sum(lax.optimization_barrier(parts))


def jax_quantized_matmul(x, w, scales, *biases, transpose, group_size, bits, mode):
    """``x @ dequantize(w).T`` (``transpose``) or ``x @ dequantize(w)`` for ``x (..., k)``, accumulated in float32
    (float64 for float64); the floating modes (no biases) decode their element and scale values by bit
    arithmetic; the jitted program's only weight input is the packed uint32 array, and up to ``DECODE_ROWS`` rows
    no float weight matrix is written (see the module docstring). Source: MLX's ``quantized_matmul`` (the
    format), XLA CPU's fusion of matrix-vector products."""
    import jax.numpy as jnp
    from jax import lax
    acc = acc_dtype(x.dtype)
    m = int(np.prod(x.shape[:-1], dtype=np.int64))
    k = x.shape[-1]
    bias = biases[0] if biases else None
    if 0 < m <= DECODE_ROWS and transpose:
        out = _decode_rows(jnp, lax, x.astype(acc).reshape(m, k), w, scales, bias, acc, group_size, bits, mode)
        return out.reshape(x.shape[:-1] + (out.shape[1],)).astype(x.dtype)
    wd = _dequantize(jnp, w, scales, bias, acc, group_size, bits, mode)
    if 0 < m <= DECODE_ROWS:
        # transpose=False: the packed words run along the output axis; see the module docstring.
        xs = x.astype(acc).reshape(m, k)
        out = jnp.stack([jnp.matmul(xs[i], wd, preferred_element_type=acc) for i in range(m)])
        return out.reshape(x.shape[:-1] + (out.shape[1],)).astype(x.dtype)
    contract = (1,) if transpose else (0,)
    out = lax.dot_general(x.astype(acc), wd, (((x.ndim - 1,), contract), ((), ())),
                          preferred_element_type=acc)
    return out.astype(x.dtype)


assert set(_ELEMENT_DECODERS) == set(FLOAT_FORMATS) == set(FLOAT_MODES)
RULES[quantized_matmul_p] = jax_quantized_matmul
