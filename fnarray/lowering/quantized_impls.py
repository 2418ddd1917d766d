"""``quantized_matmul`` on the library backends: NumPy (the reference), JAX and MLX.

Each function is registered in its backend's table by that backend's module (``numpy_impls.IMPLS``,
``jax.RULES``, ``mlx.RULES``), so this module imports no backend library at import time. The OpenCL and
WebGPU kernels are ``fnarray.lowering.kernels.groups.quantized``.

The packed format (``fnarray.core.quantized``) is one little-endian bit stream per row. 32 consecutive
elements fill exactly ``bits`` words, so a row is read as chunks of ``bits`` words: element ``j`` of a chunk
starts in word ``j * bits // 32`` at bit ``s = j * bits % 32`` and, where ``s + bits > 32`` (3, 5 and 6
bits), continues in the next word. ``unpack`` writes that once over any array module with NumPy's names
(NumPy, ``jax.numpy``, ``mlx.core``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["unpack", "unpack_plan", "numpy_quantized_matmul", "jax_quantized_matmul", "mlx_quantized_matmul"]

_CHUNK_ROWS = 512   # rows of dequantized weights the NumPy reference holds at once


def unpack_plan(bits):
    """Per element ``j < 32`` of a chunk: ``(low word, high word, shift)`` as uint32 NumPy arrays."""
    j = np.arange(32)
    lo = j * bits // 32
    shift = j * bits % 32
    hi = np.minimum(lo + 1, bits - 1)
    return lo, hi, shift.astype(np.uint32)


def unpack(xp, w, bits, asarray=None):
    """The ``bits``-bit integers (uint32, shape ``(..., words * 32 // bits)``) of packed words ``w``.

    ``xp`` is the array module (``numpy``, ``jax.numpy``, ``mlx.core``); ``asarray`` makes its arrays from
    NumPy ones (default ``xp.array``). No shift reaches 32 bits (undefined in C, which MLX's kernels are).
    """
    asarray = asarray or xp.array
    lead = tuple(w.shape[:-1])
    mask = asarray(np.uint32((1 << bits) - 1))
    if 32 % bits == 0:
        # Whole elements per word: each word shifted by every element's offset (a broadcast, no gather).
        per = 32 // bits
        shifts = asarray((np.arange(per) * bits).astype(np.uint32))
        v = xp.bitwise_and(xp.right_shift(xp.expand_dims(w, -1), shifts), mask)
        return xp.reshape(v, lead + (w.shape[-1] * per,))
    lo, hi, shift = unpack_plan(bits)
    chunks = w.shape[-1] // bits
    w3 = xp.reshape(w, lead + (chunks, bits))
    low = xp.take(w3, asarray(lo.astype(np.int32)), axis=-1)
    v = xp.right_shift(low, asarray(shift))
    # The high word's bits land at 32 - s; (h << 1) << (31 - s) keeps each shift below 32.
    high = xp.take(w3, asarray(hi.astype(np.int32)), axis=-1)
    up = xp.left_shift(xp.left_shift(high, asarray(np.uint32(1))), asarray((31 - shift).astype(np.uint32)))
    v = xp.bitwise_and(xp.bitwise_or(v, up), mask)
    return xp.reshape(v, lead + (chunks * 32,))


def _acc_dtype(d):
    return np.dtype(np.float64) if d == np.float64 else np.dtype(np.float32)


def _unpack_bytes(w, bits):
    """``unpack`` for 2, 4 and 8 bits through the words' little-endian bytes, in uint8 (4x less memory traffic
    than uint32: the NumPy reference's 4096 x 4096 4-bit product 57 -> 28 ms)."""
    by = np.ascontiguousarray(w, dtype="<u4").view(np.uint8)   # the stream is little-endian on any host
    per = 8 // bits
    out = np.empty(by.shape + (per,), np.uint8)
    mask = np.uint8((1 << bits) - 1)
    for i in range(per):
        np.bitwise_and(np.right_shift(by, np.uint8(i * bits)), mask, out=out[..., i])
    return out.reshape(w.shape[0], -1)


def _dequantize_np(w, scales, biases, group_size, bits, dtype):
    q = (_unpack_bytes(w, bits) if 8 % bits == 0 else unpack(np, w, bits, np.asarray)).astype(dtype)
    rows, cols = q.shape
    q = q.reshape(rows, cols // group_size, group_size)
    q *= scales.astype(dtype)[:, :, None]
    q += biases.astype(dtype)[:, :, None]
    return q.reshape(rows, cols)


def numpy_quantized_matmul(params, in_avals, out_avals):
    """The reference: blocks of ``_CHUNK_ROWS`` weight rows dequantized in the accumulation dtype at a time
    (never the whole float matrix), each multiplied with NumPy."""
    transpose, gs, bits = params["transpose"], params["group_size"], params["bits"]
    out_aval = out_avals[0]
    acc = _acc_dtype(out_aval.dtype)

    def f(x, w, scales, biases):
        xs = np.asarray(x, acc)
        out = np.zeros(out_aval.shape, acc)
        for r in range(0, w.shape[0], _CHUNK_ROWS):
            block = _dequantize_np(w[r:r + _CHUNK_ROWS], scales[r:r + _CHUNK_ROWS], biases[r:r + _CHUNK_ROWS],
                                   gs, bits, acc)
            if transpose:
                out[..., r:r + block.shape[0]] = xs @ block.T
            else:
                out += xs[..., r:r + block.shape[0]] @ block
        return out.astype(out_aval.dtype)
    return f


def jax_quantized_matmul(x, w, scales, biases, *, transpose, group_size, bits):
    """Unpacking and scaling written as elementwise ops on the packed words feeding one ``dot_general``, which
    XLA fuses (the jitted program's only weight input stays the packed uint32 array)."""
    import jax.numpy as jnp
    from jax import lax
    acc = _acc_dtype(x.dtype)
    q = unpack(jnp, w, bits, jnp.asarray).astype(acc)
    rows, cols = q.shape
    q = q.reshape(rows, cols // group_size, group_size)
    wd = (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)
    contract = (1,) if transpose else (0,)
    out = lax.dot_general(x.astype(acc), wd, (((x.ndim - 1,), contract), ((), ())),
                          preferred_element_type=acc)
    return out.astype(x.dtype)


def mlx_quantized_matmul(params, in_avals, out_avals):
    """``mx.quantized_matmul`` (float32, float16, bfloat16); float64 (MLX's kernel has none) unpacks with MLX's
    integer ops and multiplies in float64."""
    import mlx.core as mx
    transpose, gs, bits = params["transpose"], params["group_size"], params["bits"]
    if in_avals[0].dtype != np.float64:
        return lambda x, w, s, b: mx.quantized_matmul(x, w, s, b, transpose=transpose, group_size=gs, bits=bits)

    def f(x, w, s, b):
        q = unpack(mx, w, bits).astype(mx.float64)
        rows, cols = q.shape
        q = q.reshape(rows, cols // gs, gs)
        wd = (q * s[:, :, None] + b[:, :, None]).reshape(rows, cols)
        return mx.matmul(x, wd.T if transpose else wd)
    return f
