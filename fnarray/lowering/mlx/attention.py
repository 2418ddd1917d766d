"""``dot_product_attention`` on mlx (registered into ``common.RULES``): ``mx.fast.scaled_dot_product_attention``
where its arguments fit, else ``lowering/attention_math.py`` in ``mlx.core``.

MLX's kernel takes ``(B, N, T, H)`` operands (the rule transposes the queries, and the keys and values unless they
come heads first, ``kv_heads_first``: on the CPU MLX's attention is a composite whose products copy keys and values
that are not contiguous per head, a copy of the whole cache every decode step), grouped-query heads as they are, and
one mask:
``"causal"`` (aligned at the bottom right: the primitive's ``lower_right`` without key lengths for ``T <= S``, and
for ``T == S`` its top-left causal mask too) or an array. For float32
the bias, the mask, the key lengths, the causal and the window conditions become one additive float32 mask
(``MASKED_LOGIT`` where a key is removed, so a row with every key removed averages the values, as JAX's; adding it
to a logit rounds to it for any logit below ~1e31). For float16/bfloat16 that stand-in overflows, so only unmasked
or square-causal calls take the kernel, the others the composite. float64 runs on numpy
(``rules._F64_APPROXIMATE``): MLX 0.32's float64 ``exp`` on the CPU has float32 precision (2.6e-7 off), so no float64
form here is float64-accurate.

``share_length_masks`` (``program.py``, before generating a program's Python) splits a float32 call masked by key
lengths alone (a decode step's) into the mask's equation and the kernel's, one mask equation per distinct lengths
value and key count: the layers of a model that read one offset (``examples/llm.py``'s, mlx-lm's mask from
``cache[0]``) then build one mask a step, not one a layer (~12 us of MLX calls each on the CPU). With
``host_lengths`` (a program that runs eagerly: ``backend._compile``) the lengths are read on the host once per
distinct value instead (``LENGTH_SLICE``, one ``tolist()``: the step's offset is evaluated already, ~4 us) and the
kernel reads the keys and values sliced to the longest length (``SLICED_ATTENTION``, no mask where every length
reaches it), as raw MLX slices its cache with a Python int: the kernel walks the filled positions, not the whole
capacity (~20 us a layer of a decode step at 64 of 128 positions). ``mx.compile`` cannot read values, so its
form keeps the mask.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.attention import (MASKED_LOGIT, acc_dtype, dot_product_attention_p, key_sizes, lengths_operand,
                                    split_operands)
from fnarray.lowering.attention_math import attention, keep_mask, query_offsets
from fnarray.core.ir import Eqn, Program, Var
from fnarray.core.shaped import ShapedArray
from fnarray.lowering.mlx.common import RULES, expression, mx, mx_dtype
from fnarray.lowering.mlx.fused import Fused

__all__ = ["mlx_attention", "share_length_masks", "host_length_slice"]


def _fast_mask(mx, q, k, bias, mask, params, lengths=None):
    """MLX's ``mask`` argument for float32 operands: None, ``"causal"`` or one additive float32 array."""
    T, S = q.shape[1], key_sizes(k.shape, params.get("kv_heads_first", False))[0]
    is_causal, local_window, lower_right = params["is_causal"], params["local_window"], params.get("lower_right")
    offset = query_offsets(mx, [lengths], T, S, lengths is not None, lower_right)
    if lengths is not None:   # (B, 1, 1, S): key s stays while s < kv_lengths[b]
        m = mx.arange(S)[None, None, None, :] < lengths[:, None, None, None]
        mask = m if mask is None else mx.logical_and(mask, m)
    if bias is None and mask is None and local_window is None:
        if not is_causal:
            return None
        if (T == S or lower_right) and T <= S:
            return "causal"
    keep = keep_mask(mx, T, S, is_causal, local_window, offset)
    if mask is not None:
        keep = mask if keep is None else mx.logical_and(keep, mask)
    add = bias.astype(mx.float32) if bias is not None else mx.array(0.0, dtype=mx.float32)
    if keep is None:
        return add
    return mx.where(keep, add, mx.array(MASKED_LOGIT, dtype=mx.float32))


def mlx_attention(params, in_avals, out_avals):
    """``mx.fast.scaled_dot_product_attention`` for float32 (and plain or square-causal float16/bfloat16 calls),
    the composite for the other float16/bfloat16 calls."""
    import mlx.core as mx
    dtype = np.dtype(in_avals[0].dtype)
    heads_first = params.get("kv_heads_first", False)
    T, S = in_avals[0].shape[1], key_sizes(in_avals[1].shape, heads_first)[0]
    removes = params["has_bias"] or params["has_mask"] or params.get("has_lengths", False)
    square = T == S or (params.get("lower_right", False) and T <= S)   # MLX's "causal" is the primitive's mask
    plain = not removes and params["local_window"] is None and (not params["is_causal"] or square)
    scale = params["scale"]

    def fast(*xs):
        q, k, v, bias, mask = split_operands(xs, params["has_bias"], params["has_mask"])
        m = _fast_mask(mx, q, k, bias, mask, params, lengths_operand(xs, params.get("has_lengths", False)))
        t = (0, 2, 1, 3)
        if not heads_first:
            k, v = k.transpose(t), v.transpose(t)
        out = mx.fast.scaled_dot_product_attention(q.transpose(t), k, v, scale=scale, mask=m)
        return out.transpose(t)

    def composite(*xs):
        acc = acc_dtype(dtype)
        def cast(x, d):
            return x.astype(mx_dtype(d)) if isinstance(x, mx.array) else mx.array(x, dtype=mx_dtype(d))
        out = attention(mx, cast, xs, acc, **params)
        return out.astype(mx_dtype(dtype))

    if dtype == np.float32 or (dtype.itemsize == 2 and plain):
        return fast
    return composite


RULES[dot_product_attention_p] = mlx_attention


def _length_mask_rule(params, in_avals, out_avals):
    """Key lengths ``(B,)`` -> ``(B, 1, 1, S)`` float32: 0 where ``s < lengths[b]``, else ``MASKED_LOGIT``
    (``_fast_mask``'s mask of a call with key lengths alone)."""
    return expression("mx.where(mx.arange({S})[None, None, None, :] < {0}[:, None, None, None], {zero}, {masked})", 1,
                      S=params["S"], zero=mx.array(0.0, dtype=mx.float32),
                      masked=mx.array(MASKED_LOGIT, dtype=mx.float32))


def _masked_attention_rule(params, in_avals, out_avals):
    """``mx.fast.scaled_dot_product_attention`` of ``(q, k, v, additive mask)`` in the primitive's layouts."""
    kv = "{1}, {2}" if params["kv_heads_first"] else "{1}.transpose(0, 2, 1, 3), {2}.transpose(0, 2, 1, 3)"
    return expression("mx.fast.scaled_dot_product_attention({0}.transpose(0, 2, 1, 3), " + kv +
                      ", scale={scale}, mask={3}).transpose(0, 2, 1, 3)", 4, scale=params["scale"])


def host_length_slice(lengths, S):
    """``(n, mask)`` for key lengths ``lengths`` (an ``mx.array`` ``(B,)``, read on the host) over ``S`` keys: the
    keys to keep, ``n = min(max(lengths), S)``, and ``None`` where every length reaches ``n``, else the additive
    float32 mask ``(B, 1, 1, n)`` of ``_fast_mask``. A length below 1 (a row with every key removed, whose result
    is the mean of all ``S`` values) gives ``n = S`` and the mask over all of them."""
    import mlx.core as mx
    ls = lengths.tolist()
    lo, n = min(ls), min(max(ls), S)
    if lo < 1:
        n = S
    elif lo >= n:
        return n, None
    keep = mx.arange(n)[None, None, None, :] < lengths[:, None, None, None]
    return n, mx.where(keep, mx.array(0.0, dtype=mx.float32), mx.array(MASKED_LOGIT, dtype=mx.float32))


def _length_slice_rule(params, in_avals, out_avals):
    """Key lengths ``(B,)`` -> ``host_length_slice``'s ``(n, mask)`` (a Python pair, read by ``SLICED_ATTENTION``)."""
    S = params["S"]
    return lambda lengths: host_length_slice(lengths, S)


def _sliced_attention_rule(params, in_avals, out_avals):
    """``mx.fast.scaled_dot_product_attention`` of ``q`` over the first ``n`` keys and values, ``(n, mask) =``
    the fourth argument (``LENGTH_SLICE``'s)."""
    if params["kv_heads_first"]:
        kv = "{1}[:, :, :{3}[0]], {2}[:, :, :{3}[0]]"
    else:
        kv = "{1}[:, :{3}[0]].transpose(0, 2, 1, 3), {2}[:, :{3}[0]].transpose(0, 2, 1, 3)"
    return expression("mx.fast.scaled_dot_product_attention({0}.transpose(0, 2, 1, 3), " + kv +
                      ", scale={scale}, mask={3}[1]).transpose(0, 2, 1, 3)", 4, scale=params["scale"])


LENGTH_MASK = Fused("length_mask", _length_mask_rule)
MASKED_ATTENTION = Fused("masked_attention", _masked_attention_rule)
LENGTH_SLICE = Fused("length_slice", _length_slice_rule)
SLICED_ATTENTION = Fused("sliced_attention", _sliced_attention_rule)


def _masked_by_lengths_alone(e) -> bool:
    """Whether ``e`` is a float32 attention call whose only mask is its key lengths (a variable)."""
    p = e.params
    return (e.primitive is dot_product_attention_p and p.get("has_lengths", False) and not p["has_bias"] and
            not p["has_mask"] and not p["is_causal"] and p["local_window"] is None and
            e.inputs[0].aval.dtype == dtypes.float32 and isinstance(e.inputs[-1], Var))


def share_length_masks(prog: Program, host_lengths: bool = False) -> Program:
    """``prog`` with each float32 attention masked by key lengths alone made two equations, the additive mask
    (``LENGTH_MASK``, one per distinct lengths variable and key count: equal masks are built once) and the kernel on
    it (``MASKED_ATTENTION``); ``prog`` itself where there is none. The same MLX calls as ``mlx_attention``'s.

    ``host_lengths``: ``LENGTH_SLICE`` and ``SLICED_ATTENTION`` instead (the lengths read on the host, the keys
    sliced to them: for a program that runs eagerly, never through ``mx.compile``)."""
    make, attend = (LENGTH_SLICE, SLICED_ATTENTION) if host_lengths else (LENGTH_MASK, MASKED_ATTENTION)
    masks: dict = {}   # (lengths variable, key count) -> the mask variable
    eqns, changed = [], False
    for e in prog.eqns:
        if not _masked_by_lengths_alone(e):
            eqns.append(e)
            continue
        q, k, v, lengths = e.inputs
        heads_first = bool(e.params.get("kv_heads_first", False))
        S = key_sizes(k.aval.shape, heads_first)[0]
        m = masks.get((lengths, S))
        if m is None:
            m = masks[(lengths, S)] = Var(ShapedArray((q.aval.shape[0], 1, 1, S), dtypes.float32))
            eqns.append(Eqn(make, (lengths,), {"S": S}, (m,)))
        params = {"scale": e.params["scale"], "kv_heads_first": heads_first}
        eqns.append(Eqn(attend, (q, k, v, m), params, e.outputs))
        changed = True
    return Program(prog.constvars, prog.invars, eqns, prog.outvars) if changed else prog
