"""The ``dot_product_attention`` primitive: scaled dot-product attention as one equation.

``dot_product_attention[scale, is_causal, local_window, has_bias, has_mask, has_lengths, lower_right, kv_heads_first]
q k v [bias] [mask] [kv_lengths]``:

- ``q`` is ``(B, T, N, H)``, ``k`` and ``v`` ``(B, S, K, H)`` of ``q``'s float dtype, or with ``kv_heads_first``
  ``(B, K, S, H)`` (MLX's and mlx-lm's cache layout: each head's keys contiguous, so a library's product reads them
  in place); ``K`` divides ``N`` (grouped-query attention: query head ``n`` reads key/value head ``n // (N // K)``).
- ``bias`` (when ``has_bias``) is a float array of rank 4 whose every axis is 1 or the matching size of
  ``(B, N, T, S)``; it is added to the scaled logits. ``mask`` (when ``has_mask``) is a bool array of the same
  kind; ``False`` removes a key.
- ``kv_lengths`` (when ``has_lengths``) is int32 ``(B,)``: key ``s`` of batch element ``b`` stays only when
  ``s < kv_lengths[b]`` (``jax.nn.dot_product_attention``'s ``key_value_seq_lengths``; a length of 0 or below removes
  every key, one of ``S`` or more none). It is data, not a parameter: a kernel backend stops its key loop there, so
  one compiled kernel serves every length (a decode step over a fixed-capacity cache reads only the filled keys).
- ``is_causal`` keeps key ``s <= p`` and ``local_window = (left, right)`` keeps ``p - left <= s <= p + right``, where
  ``p`` is query ``t``'s position: ``p = t`` (a lower-triangular ``(T, S)`` mask aligned at the top left, as
  ``jax.nn.dot_product_attention``), or with ``lower_right`` the queries aligned at the end of the keys,
  ``p = t + L - T`` with ``L`` the key length (``kv_lengths[b]`` when ``has_lengths``, clamped to ``[0, S + T]``,
  else ``S``): MLX's ``mask="causal"`` (FlashAttention 2.1's bottom-right alignment). With key lengths the offset
  ``L - T`` is data: the ``T`` new queries of a prefill into a cache holding ``L - T`` keys, one compiled kernel
  for every fill.
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
           "lengths_operand", "offset_limit", "key_sizes"]

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


def key_sizes(shape, kv_heads_first=False):
    """``(S, K)``, the key positions and key/value heads, of a key or value shape in the primitive's layout
    (``(B, S, K, H)``, or ``(B, K, S, H)`` with ``kv_heads_first``)."""
    return (shape[2], shape[1]) if kv_heads_first else (shape[1], shape[2])


def offset_limit(T, S):
    """The key lengths' clamp ``[0, S + T]`` for the ``lower_right`` offset ``L - T``: below 0 every query's position
    is before the first key, at ``S + T`` the first query's is past the last, so clamping changes no mask and keeps
    ``t + L - T`` in int32."""
    return 0, S + T


def _check_broadcast(name, aval, full):
    if aval.ndim != 4 or any(a not in (1, f) for a, f in zip(aval.shape, full, strict=True)):
        raise ShapeError(f"dot_product_attention: {name} of shape {aval.shape} must have rank 4 with each axis 1 "
                         f"or the matching size of (B, N, T, S) = {full}")


def _rule(*operands, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False, lower_right=False,
          kv_heads_first=False):
    if len(operands) != 3 + has_bias + has_mask + has_lengths:
        raise ShapeError(f"dot_product_attention takes q, k, v{', bias' if has_bias else ''}"
                         f"{', mask' if has_mask else ''}{', kv_lengths' if has_lengths else ''}; got {len(operands)} "
                         "operands")
    q, k, v, bias, mask = split_operands(operands, has_bias, has_mask)
    layout = "(B, K, S, H)" if kv_heads_first else "(B, S, K, H)"
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise ShapeError(f"dot_product_attention needs q (B, T, N, H) and k, v {layout}; got shapes {q.shape}, "
                         f"{k.shape}, {v.shape}")
    if not dtypes.is_float(q.dtype) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise DTypeError(f"dot_product_attention needs q, k and v of one float dtype, got {q.dtype.name}, "
                         f"{k.dtype.name}, {v.dtype.name}")
    B, T, N, H = q.shape
    S, K = key_sizes(k.shape, kv_heads_first)
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != H:
        raise ShapeError(f"dot_product_attention: k {k.shape} and v {v.shape} must both be {layout} with B={B}, "
                         f"H={H}")
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
    for name, flag in (("lower_right", lower_right), ("kv_heads_first", kv_heads_first)):
        if not isinstance(flag, bool):
            raise TypeError(f"dot_product_attention: {name} must be a bool, got {flag!r}")
    return ShapedArray(q.shape, q.dtype, q.weak_type)


dot_product_attention_p = Primitive(
    "dot_product_attention", _rule, kind="other",
    doc="softmax(q k^T * scale + bias, masked) v for q (B, T, N, H), k, v (B, S, K, H) or with kv_heads_first "
        "(B, K, S, H) (grouped-query heads), "
        "with an optional bias and bool mask broadcastable to (B, N, T, S), int32 key lengths (B,), a causal mask "
        "and a local window (aligned at the top left, or with lower_right at the end of the keys: the key lengths "
        "when given, so a run-time offset); "
        "float32 accumulation; removed logits are -0.7 * float32 max (JAX's convention).")


def keep_mask(T, S, is_causal, local_window, offset=None):
    """The bool mask of the causal and window conditions as ``fnarray.core.lax`` values, or None: ``(T, S)``, or
    ``(B, T, S)`` when ``offset`` (int32 ``(B,)``, each batch element's query positions past ``t``) is given."""
    if not is_causal and local_window is None:
        return None
    shape = (T, S) if offset is None else (lax.shape(offset)[0], T, S)
    t = lax.iota(dtypes.int32, shape, len(shape) - 2)
    s = lax.iota(dtypes.int32, shape, len(shape) - 1)
    if offset is not None:
        t = lax.add(t, lax.broadcast_in_dim(offset, shape, (0,)))
    keep = None
    if is_causal:
        keep = lax.le(s, t)
    if local_window is not None:
        left, right = local_window
        win = lax.bitwise_and(lax.le(t, lax.add(s, np.int32(left))), lax.ge(t, lax.sub(s, np.int32(right))))
        keep = win if keep is None else lax.bitwise_and(keep, win)
    return keep


def _offsets(operands, B, T, S, has_lengths, lower_right):
    """The ``lower_right`` offsets ``L - T`` as int32 ``(B,)`` (``L`` the clamped key lengths, or ``S``), or None."""
    if not lower_right:
        return None
    lengths = lengths_operand(operands, has_lengths)
    if lengths is None:
        return lax.full((B,), np.int32(S - T))
    lo, hi = offset_limit(T, S)
    clamped = lax.min(lax.max(lengths, lax.full((B,), np.int32(lo))), lax.full((B,), np.int32(hi)))
    return lax.sub(clamped, lax.full((B,), np.int32(T)))


@defdecomposition(dot_product_attention_p)
def attention_composite(*operands, scale, is_causal, local_window, has_bias, has_mask, has_lengths=False,
                        lower_right=False, kv_heads_first=False):
    """The primitive as two ``dot_general``s and a softmax over the ``(B, N, T, S)`` logits."""
    q, k, v, bias, mask = split_operands(operands, has_bias, has_mask)
    B, T, N, H = lax.shape(q)
    S, K = key_sizes(lax.shape(k), kv_heads_first)
    s_axis, k_axis = (2, 1) if kv_heads_first else (1, 2)
    G = N // K
    out_dtype = lax.dtype(q)
    acc = acc_dtype(out_dtype)
    qf = lax.reshape(lax.convert_element_type(q, acc), (B, T, K, G, H))
    kf = lax.convert_element_type(k, acc)
    vf = lax.convert_element_type(v, acc)
    # (B, K, T, G, S): batch axes (b, k), then q's free axes (t, g), then k's (s).
    logits = lax.dot_general(qf, kf, (((4,), (3,)), ((0, 2), (0, k_axis))))
    logits = lax.reshape(lax.transpose(logits, (0, 1, 3, 2, 4)), (B, N, T, S))
    logits = lax.mul(logits, np.asarray(scale, acc)[()])
    full = (B, N, T, S)
    if bias is not None:
        logits = lax.add(logits, lax.broadcast_in_dim(lax.convert_element_type(bias, acc), full, (0, 1, 2, 3)))
    offsets = _offsets(operands, B, T, S, has_lengths, lower_right)
    keep = keep_mask(T, S, is_causal, local_window, offsets)
    if keep is not None:
        keep = lax.broadcast_in_dim(keep, full, (2, 3) if offsets is None else (0, 2, 3))
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
    out = lax.dot_general(probs, vf, (((4,), (s_axis,)), ((0, 1), (0, k_axis))))
    out = lax.reshape(lax.transpose(out, (0, 3, 1, 2, 4)), (B, T, N, H))
    return lax.convert_element_type(out, out_dtype)
