"""JVP and batching rules of ``dot_product_attention`` (``fnarray.core.attention``).

The JVP is the JVP of the primitive's decomposition (``attention_composite``: two ``dot_general``s and a softmax),
primal output included: under ``grad`` the backward pass needs the softmax's probabilities as residuals, which the
decomposition computes and the fused kernel does not keep, so binding the fused primitive as well would compute
the forward pass twice. The tangent program is made of linear primitives, so reverse mode transposes it without a
rule of its own here. (A FlashAttention-style
backward that recomputes the softmax per key block is the faster path on a kernel backend; not written yet.)
The bool mask and the int32 key lengths have no tangent.

Batching folds the mapped axis into the primitive's batch axis ``B``: every operand gets the mapped axis first
(unmapped ones broadcast along it), ``(V, B, ...)`` becomes ``(V * B, ...)``, and the result is split back. A
bias or mask whose batch axis is 1 stays so when it is not mapped (it broadcasts over ``V * B``); the key lengths
``(B,)`` always fold to ``(V * B,)``.
"""

from __future__ import annotations

from fnarray.core import lax
from fnarray.core.attention import attention_composite, dot_product_attention_p, lengths_operand, split_operands
from fnarray.core.avals import get_aval
from fnarray.transforms.ad_tables import primitive_jvps
from fnarray.transforms.batching import move_batch_dim
from fnarray.transforms.batching_tables import primitive_batchers
from fnarray.transforms.jvp import _jvp_flat

__all__ = ["dot_product_attention_jvp", "dot_product_attention_batch"]


def dot_product_attention_jvp(primals, tangents, **params):
    """The JVP of ``attention_composite`` (the mask's tangent is zero)."""
    (out,), (t_out,) = _jvp_flat(lambda *xs: [attention_composite(*xs, **params)], list(primals), list(tangents))
    return out, t_out


def _fold(x, d, size, batch):
    """``x`` with the mapped axis first (broadcast when unmapped) merged into its batch axis of size ``batch``."""
    x = move_batch_dim(x, d, 0, size)
    shape = get_aval(x).shape
    if shape[1] != batch:   # a bias or mask with a batch axis of 1: broadcast before merging
        x = lax.broadcast_in_dim(x, (size, batch) + shape[2:], tuple(range(len(shape))))
    return lax.reshape(x, (size * batch,) + shape[2:])


def dot_product_attention_batch(vals, dims, **params):
    """``vmap``: the mapped axis folded into ``B`` (see the module)."""
    size = next(get_aval(v).shape[d] for v, d in zip(vals, dims, strict=True) if d is not None)
    q_shape = get_aval(vals[0]).shape
    B = [n for i, n in enumerate(q_shape) if i != dims[0]][0]   # q's own batch axis, the mapped one left out
    q, k, v, bias, mask = split_operands(list(zip(vals, dims, strict=True)), params["has_bias"], params["has_mask"])
    pairs = list(zip(vals, dims, strict=True))
    lengths = lengths_operand(pairs, params.get("has_lengths", False))
    folded = [_fold(x, d, size, B) for x, d in (q, k, v)]
    for extra in (bias, mask):
        if extra is None:
            continue
        x, d = extra
        if d is None and get_aval(x).shape[0] == 1:
            folded.append(x)
        else:
            folded.append(_fold(x, d, size, B))
    if lengths is not None:
        folded.append(_fold(*lengths, size, B))
    out = dot_product_attention_p.bind(*folded, **params)
    shape = get_aval(out).shape
    return lax.reshape(out, (size, B) + shape[1:]), 0


primitive_jvps[dot_product_attention_p] = dot_product_attention_jvp
primitive_batchers[dot_product_attention_p] = dot_product_attention_batch
