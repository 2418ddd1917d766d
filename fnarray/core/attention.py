"""The ``dot_product_attention`` primitive: scaled dot-product attention as one equation.

``dot_product_attention[scale, is_causal, local_window, has_bias, has_mask, has_lengths] q k v [bias] [mask]
[kv_lengths]``:

- ``q`` is ``(B, T, N, H)``, ``k`` and ``v`` ``(B, S, K, H)`` of ``q``'s float dtype; ``K`` divides ``N``
  (grouped-query attention: query head ``n`` reads key/value head ``n // (N // K)``).
- ``bias`` (when ``has_bias``) is a float array of rank 4 whose every axis is 1 or the matching size of
  ``(B, N, T, S)``; it is added to the scaled logits. ``mask`` (when ``has_mask``) is a bool array of the same
  kind; ``False`` removes a key.
- ``kv_lengths`` (when ``has_lengths``) is int32 ``(B,)``: key ``s`` of batch element ``b`` stays only when
  ``s < kv_lengths[b]`` (``jax.nn.dot_product_attention``'s ``key_value_seq_lengths``; a length of 0 or below removes
  every key, one of ``S`` or more none). It is data, not a parameter: a kernel backend stops its key loop there, so
  one compiled kernel serves every length (a decode step over a fixed-capacity cache reads only the filled keys).
- ``is_causal`` keeps key ``s <= t`` (a lower-triangular ``(T, S)`` mask aligned at the top left, as
  ``jax.nn.dot_product_attention``); ``local_window = (left, right)`` keeps ``t - left <= s <= t + right``.
- The result is ``(B, T, N, H)`` of ``q``'s dtype: ``softmax(q k^T * scale + bias, masked) v`` over ``s``, with the
  logits, the softmax and the weighted sum of ``v`` computed in float32 (float64 for float64 inputs) and rounded
  once. A removed logit becomes ``-0.7 * finfo(float32).max`` (JAX's stand-in for ``-inf``), so a query whose
  every key is removed averages the values uniformly instead of giving NaN.

One primitive rather than the composite so that a kernel backend can run it as one kernel with an online
softmax over blocks of keys (``fnarray.lowering.kernels.groups.attention``), without the ``(B, N, T, S)`` logits
in memory; ``attention_composite`` below is its decomposition (the ONNX export, the derivatives) and what the
numpy reference computes. Source: Vaswani et al., "Attention is all you need" (2017), eq. 1; the masking
conventions of ``jax.nn.dot_product_attention``; the online softmax of Milakov & Gimelshein (2018) and Dao et al.,
"FlashAttention" (2022).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import lax
from fnarray.core.decompositions import defdecomposition
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["dot_product_attention_p", "attention_composite", "acc_dtype", "MASKED_LOGIT", "split_operands",
           "lengths_operand"]

#: The logit a removed key gets (JAX's ``_get_large_negative`` for float32 logits).
MASKED_LOGIT = float(np.float32(-0.7 * float(np.finfo(np.float32).max)))


def acc_dtype(d):
    """The dtype the logits, softmax and sums are computed in: float64 for float64, else float32."""
    return np.dtype(np.float64) if np.dtype(d) == np.float64 else np.dtype(np.float32)


def split_operands(operands, has_bias, has_mask):
    """``(q, k, v, bias or None, mask or None)`` from the equation's operands (the lengths, last, are
    ``lengths_operand``'s)."""
    q, k, v, *rest = operands
    bias = rest.pop(0) if has_bias else None
    mask = rest.pop(0) if has_mask else None
    return q, k, v, bias, mask


def lengths_operand(operands, has_lengths=False):
    """The ``kv_lengths`` operand (always the last one) or None."""
    return operands[-1] if has_lengths else None


def _check_broadcast(name, aval, full):
    if aval.ndim != 4 or any(a not in (1, f) for a, f in zip(aval.shape, full, strict=True)):
        raise ShapeError(f"dot_product_attention: {name} of shape {aval.shape} must have rank 4 with each axis 1 "
                         f"or the matching size of (B, N, T, S) = {full}")


def _rule(*operands, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False):
    if len(operands) != 3 + has_bias + has_mask + has_lengths:
        raise ShapeError(f"dot_product_attention takes q, k, v{', bias' if has_bias else ''}"
                         f"{', mask' if has_mask else ''}{', kv_lengths' if has_lengths else ''}; got {len(operands)} "
                         "operands")
    q, k, v, bias, mask = split_operands(operands, has_bias, has_mask)
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise ShapeError(f"dot_product_attention needs q (B, T, N, H) and k, v (B, S, K, H); got shapes {q.shape}, "
                         f"{k.shape}, {v.shape}")
    if not dtypes.is_float(q.dtype) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise DTypeError(f"dot_product_attention needs q, k and v of one float dtype, got {q.dtype.name}, "
                         f"{k.dtype.name}, {v.dtype.name}")
    B, T, N, H = q.shape
    _, S, K, _ = k.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != H:
        raise ShapeError(f"dot_product_attention: k {k.shape} and v {v.shape} must both be (B={B}, S, K, H={H})")
    if K == 0 or N % K:
        raise ShapeError(f"dot_product_attention: the {N} query heads must be a multiple of the {K} key heads")
    full = (B, N, T, S)
    if bias is not None:
        _check_broadcast("bias", bias, full)
        if not dtypes.is_float(bias.dtype):
            raise DTypeError(f"dot_product_attention: bias must be floating, got {bias.dtype.name}")
    if mask is not None:
        _check_broadcast("mask", mask, full)
        if mask.dtype != dtypes.bool_:
            raise DTypeError(f"dot_product_attention: mask must be boolean, got {mask.dtype.name}")
    lengths = lengths_operand(operands, has_lengths)
    if lengths is not None and (lengths.shape != (B,) or lengths.dtype != dtypes.int32):
        raise ShapeError(f"dot_product_attention: kv_lengths must be int32 of shape ({B},), got "
                         f"{lengths.dtype.name}{list(lengths.shape)}")
    if local_window is not None and (len(local_window) != 2 or not all(isinstance(w, int) for w in local_window)):
        raise ValueError(f"dot_product_attention: local_window must be None or a (left, right) pair of ints, got "
                         f"{local_window!r}")
    if not isinstance(scale, float):
        raise TypeError(f"dot_product_attention: scale must be a Python float, got {scale!r}")
    return ShapedArray(q.shape, q.dtype, q.weak_type)


dot_product_attention_p = Primitive(
    "dot_product_attention", _rule, kind="other",
    doc="softmax(q k^T * scale + bias, masked) v for q (B, T, N, H), k, v (B, S, K, H) (grouped-query heads), "
        "with an optional bias and bool mask broadcastable to (B, N, T, S), int32 key lengths (B,), a causal mask "
        "and a local window; "
        "float32 accumulation; removed logits are -0.7 * float32 max (JAX's convention).")


def keep_mask(T, S, is_causal, local_window):
    """The ``(T, S)`` bool mask of the causal and window conditions as ``fnarray.core.lax`` values, or None."""
    if not is_causal and local_window is None:
        return None
    t = lax.iota(dtypes.int32, (T, S), 0)
    s = lax.iota(dtypes.int32, (T, S), 1)
    keep = None
    if is_causal:
        keep = lax.le(s, t)
    if local_window is not None:
        left, right = local_window
        win = lax.bitwise_and(lax.le(t, lax.add(s, np.int32(left))), lax.ge(t, lax.sub(s, np.int32(right))))
        keep = win if keep is None else lax.bitwise_and(keep, win)
    return keep


@defdecomposition(dot_product_attention_p)
def attention_composite(*operands, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False):
    """The primitive as two ``dot_general``s and a softmax over the ``(B, N, T, S)`` logits."""
    q, k, v, bias, mask = split_operands(operands, has_bias, has_mask)
    B, T, N, H = lax.shape(q)
    _, S, K, _ = lax.shape(k)
    G = N // K
    out_dtype = lax.dtype(q)
    acc = acc_dtype(out_dtype)
    qf = lax.reshape(lax.convert_element_type(q, acc), (B, T, K, G, H))
    kf = lax.convert_element_type(k, acc)
    vf = lax.convert_element_type(v, acc)
    # (B, K, T, G, S): batch axes (b, k), then q's free axes (t, g), then k's (s).
    logits = lax.dot_general(qf, kf, (((4,), (3,)), ((0, 2), (0, 2))))
    logits = lax.reshape(lax.transpose(logits, (0, 1, 3, 2, 4)), (B, N, T, S))
    logits = lax.mul(logits, np.asarray(scale, acc)[()])
    full = (B, N, T, S)
    if bias is not None:
        logits = lax.add(logits, lax.broadcast_in_dim(lax.convert_element_type(bias, acc), full, (0, 1, 2, 3)))
    keep = keep_mask(T, S, is_causal, local_window)
    if keep is not None:
        keep = lax.broadcast_in_dim(keep, full, (2, 3))
    if mask is not None:
        m = lax.broadcast_in_dim(mask, full, (0, 1, 2, 3))
        keep = m if keep is None else lax.bitwise_and(keep, m)
    lengths = lengths_operand(operands, has_lengths)
    if lengths is not None:
        m = lax.lt(lax.iota(dtypes.int32, full, 3), lax.broadcast_in_dim(lengths, full, (0,)))
        keep = m if keep is None else lax.bitwise_and(keep, m)
    if keep is not None:
        logits = lax.select(keep, logits, lax.full(full, np.asarray(MASKED_LOGIT, acc)[()]))
    top = lax.reduce_max(logits, (3,))
    e = lax.exp(lax.sub(logits, lax.broadcast_in_dim(top, full, (0, 1, 2))))
    total = lax.reduce_sum(e, (3,))
    probs = lax.div(e, lax.broadcast_in_dim(total, full, (0, 1, 2)))
    probs = lax.reshape(probs, (B, K, G, T, S))
    # (B, K, G, T, H): batch axes (b, k), probs' free axes (g, t), v's (h).
    out = lax.dot_general(probs, vf, (((4,), (1,)), ((0, 1), (0, 2))))
    out = lax.reshape(lax.transpose(out, (0, 3, 1, 2, 4)), (B, T, N, H))
    return lax.convert_element_type(out, out_dtype)
