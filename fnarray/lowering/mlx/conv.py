"""The mlx lowering of ``conv_general_dilated``: ``mx.conv_general`` with the layout transposes it needs.

Registered into ``common.RULES``. ``mx.conv_general`` (MLX 0.32) takes the input as
``(N, *spatial, C)`` and the kernel as ``(O, *spatial, I)``, strides, (low, high) padding (negative crops),
input and kernel dilation, and feature groups in 1-D and 2-D. What it lacks is written around it:

- any layout: transposes to and from its layout (MLX fuses them into its copies);
- ``batch_group_count``: the batch groups become feature groups (``(B * NB, C) -> (NB, B * C)``, the kernel's
  output features already grouped), exact;
- feature groups in 3-D: one ``conv_general`` per group, concatenated along the features;
- negative padding with input dilation (MLX crops before it dilates): the crop as a slice of the input;
- float16/bfloat16: computed in float32 and rounded once, as the reference; ``preferred_element_type`` is the
  compute dtype.

It takes floating-point operands only (MLX has no integer or complex convolution) and 1 to 3 spatial
dimensions: ``unsupported_reason`` says so, and those equations fall back to numpy.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.conv import conv_general_dilated_p
from fnarray.lowering.mlx.common import RULES

__all__ = ["conv_general_dilated_factory", "unsupported_reason"]

LOW = (dtypes.float16, dtypes.bfloat16)


def unsupported_reason(in_avals, params):
    """Why ``mx.conv_general`` cannot run this equation, or ``None``."""
    d = in_avals[0].dtype
    if not dtypes.is_float(d):
        return f"MLX's conv_general takes floating-point operands only, got {d.name}"
    nsp = len(params["window_strides"])
    if not 1 <= nsp <= 3:
        return f"MLX's conv_general handles 1 to 3 spatial dimensions, got {nsp}"
    return None


def _crops(shape, lhs_spec, padding, lhs_dilation):
    """Negative padding as a slice of the input plus non-negative padding.

    MLX 0.32 crops before it dilates (a negative pad with ``input_dilation`` > 1 gives the wrong size), so the
    crop is done here: cutting ``c = q * d + r`` elements off the front of the dilated input is the input from
    element ``q`` (``r == 0``), or from ``q + 1`` behind ``d - r`` zeros of padding; the end likewise.
    Returns ``(crop, lo, hi)``: ``crop`` is ``None`` (no negative pads), ``"empty"`` (nothing is left) or a
    tuple of spatial slices.
    """
    lo, hi, slices, cut = [], [], [], False
    for k, ((a, b), d) in enumerate(zip(padding, lhs_dilation, strict=True)):
        n = shape[lhs_spec[2 + k]]
        start, stop = 0, n
        if a < 0:
            q, r = divmod(-a, d)
            start, a = (q + 1, d - r) if r else (q, 0)
            cut = True
        if b < 0:
            q, r = divmod(-b, d)
            stop, b = (n - q - 1, d - r) if r else (n - q, 0)
            cut = True
        lo.append(a)
        hi.append(b)
        slices.append(slice(start, stop))
    if not cut:
        return None, lo, hi
    if any(s.start >= s.stop for s in slices):
        return "empty", lo, hi
    return tuple(slices) + (slice(None),), lo, hi


def conv_general_dilated_factory(params, in_avals, out_avals):
    import mlx.core as mx  # noqa: PLC0415 (imported only when the mlx backend lowers a program)
    ls, rs, os_ = params["dimension_numbers"]
    nsp = len(params["window_strides"])
    G, B = params["feature_group_count"], params["batch_group_count"]
    out_d = np.dtype(out_avals[0].dtype)
    compute = np.dtype(np.float32) if out_d in LOW else out_d
    mc, mo = getattr(mx, compute.name), getattr(mx, out_d.name)
    cast_in = np.dtype(in_avals[0].dtype) != compute
    x_perm = [ls[0]] + list(ls[2:]) + [ls[1]]
    w_perm = [rs[0]] + list(rs[2:]) + [rs[1]]
    # mx result axes: (batch, spatial..., feature) -> the output spec's layout.
    out_perm = [0] * (nsp + 2)
    out_perm[os_[0]], out_perm[os_[1]] = 0, nsp + 1
    for i in range(nsp):
        out_perm[os_[2 + i]] = 1 + i
    ident = list(range(nsp + 2))
    crop, lo, hi = _crops(in_avals[0].shape, ls, params["padding"], params["lhs_dilation"])
    kw = dict(stride=list(params["window_strides"]), padding=(lo, hi), kernel_dilation=list(params["rhs_dilation"]),
              input_dilation=list(params["lhs_dilation"]))
    out_shape = [out_avals[0].shape[d] for d in [os_[0]] + list(os_[2:]) + [os_[1]]]
    groups = max(G, B)
    split_groups = groups > 1 and nsp == 3

    def f(x, w):
        if cast_in:
            x, w = x.astype(mc), w.astype(mc)
        x = x if x_perm == ident else mx.transpose(x, x_perm)
        w = w if w_perm == ident else mx.transpose(w, w_perm)
        if crop is not None:
            if crop == "empty":   # the padding crops every input element away: zeros
                r = mx.zeros(out_shape, mc)
                r = r if out_perm == ident else mx.transpose(r, out_perm)
                return r.astype(mo)
            x = x[(slice(None),) + crop]
        if B > 1:   # (B * NB, *S, C) -> (NB, *S, B * C): the batch groups as feature groups
            n = x.shape[0] // B
            x = x.reshape([B, n] + list(x.shape[1:]))
            x = mx.transpose(x, [1] + list(range(2, nsp + 2)) + [0, nsp + 2])
            x = x.reshape(list(x.shape[:nsp + 1]) + [-1])
        if split_groups:
            ci, co = x.shape[-1] // groups, w.shape[0] // groups
            r = mx.concatenate([mx.conv_general(x[..., g * ci:(g + 1) * ci], w[g * co:(g + 1) * co], **kw)
                                for g in range(groups)], axis=-1)
        else:
            r = mx.conv_general(x, w, groups=groups, **kw)
        r = r if out_perm == ident else mx.transpose(r, out_perm)
        return r.astype(mo) if r.dtype != mo else r
    return f


RULES[conv_general_dilated_p] = conv_general_dilated_factory
