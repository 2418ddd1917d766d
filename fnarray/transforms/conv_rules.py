"""JVP, transpose and batching rules of ``conv_general_dilated`` (registered into the AD and batching tables).

- JVP: the convolution is bilinear, so the output tangent is ``conv(t_lhs, rhs) + conv(lhs, t_rhs)``.
- Transpose with respect to the input: a convolution of the cotangent with the kernel flipped in space and its
  two feature dimensions exchanged; the forward strides become ``lhs_dilation`` and the forward
  ``lhs_dilation`` becomes the strides; padding so that the result has the input's size. A feature-grouped
  kernel is regrouped (the group moves from the output features to the input features); a batch-grouped
  forward convolution becomes a feature-grouped one whose result features are folded back into the batch.
- Transpose with respect to the kernel: a convolution of the input (batch and feature dimensions exchanged)
  with the cotangent as the kernel; the forward strides become the kernel dilation and the forward kernel
  dilation the strides; ``feature_group_count`` and ``batch_group_count`` exchange their parts.
- Batching: the mapped axis is folded into the input's batch (a batched input), into the output features (a
  batched kernel) or into the feature groups (both), with the batch groups kept contiguous.

Method: the convolution algebra of XLA's ConvGeneralDilated, as JAX's ``_conv_general_dilated_transpose_lhs``
and ``_rhs`` derive it (re-derived here index by index; see the comments).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import lax
from fnarray.core.avals import get_aval
from fnarray.core.conv import ConvDimensionNumbers, conv_general_dilated_p, dilate_dim
from fnarray.transforms.ad_tables import Zero, defjvp, is_undefined, primitive_transposes, zeros_like_aval
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["conv_general_dilated_transpose_lhs", "conv_general_dilated_transpose_rhs",
           "conv_general_dilated_batch"]

_conv = conv_general_dilated_p


def _shape(x):
    return get_aval(x).shape


def _cast(x, dtype):
    return x if get_aval(x).dtype == dtype else lax.convert_element_type(x, dtype)


def _split_axis(x, axis, n):
    """``x`` with dimension ``axis`` (of size ``n * m``) split into ``(n, m)``, ``n`` first."""
    s = _shape(x)
    return lax.reshape(x, s[:axis] + (n, s[axis] // n) + s[axis + 1:])


def _merge_axis(x, src, dst):
    """Dimension ``src`` folded into dimension ``dst`` as its major part (``dst`` counts without ``src``)."""
    nd = len(_shape(x))
    perm = [i for i in range(nd) if i != src]
    perm.insert(dst, src)
    x = lax.transpose(x, perm)
    s = _shape(x)
    return lax.reshape(x, s[:dst] + (s[dst] * s[dst + 1],) + s[dst + 2:])


def _swap(spec):
    return (spec[1], spec[0]) + tuple(spec[2:])


def _params(window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count,
            batch_group_count, precision, preferred_element_type):
    return dict(window_strides=tuple(window_strides), padding=tuple(padding), lhs_dilation=tuple(lhs_dilation),
                rhs_dilation=tuple(rhs_dilation), dimension_numbers=dimension_numbers,
                feature_group_count=feature_group_count, batch_group_count=batch_group_count,
                precision=precision, preferred_element_type=preferred_element_type)


# ----------------------------------------------------------------------------- JVP


def _jvp_lhs(t, out, lhs, rhs, **params):
    return _conv.bind(t, rhs, **params)


def _jvp_rhs(t, out, lhs, rhs, **params):
    return _conv.bind(lhs, t, **params)


defjvp(_conv, _jvp_lhs, _jvp_rhs)


# ----------------------------------------------------------------------------- transposes


def conv_general_dilated_transpose_lhs(ct, rhs, lhs_aval, *, window_strides, padding, lhs_dilation, rhs_dilation,
                                       dimension_numbers, feature_group_count, batch_group_count, precision=None,
                                       preferred_element_type=None):
    """The cotangent of the input: ``ct`` (the result's cotangent) correlated with the flipped kernel."""
    ls, rs, os_ = dimension_numbers
    if lhs_aval.size == 0 or get_aval(rhs).size == 0 or get_aval(ct).size == 0:
        return zeros_like_aval(lhs_aval)
    G, B = feature_group_count, batch_group_count
    work = get_aval(ct).dtype
    rhs = _cast(rhs, work)
    groups = max(G, B)
    if groups > 1:
        # Kernel (groups * OG, I) -> (OG, groups * I): in the transposed convolution the input features are
        # the forward output features (OG per group) and the output features the forward input features.
        rhs = _merge_axis(_split_axis(rhs, rs[0], groups), rs[0], rs[1])
    # Forward: out[o] = sum_k x~[o*s + k*rd] w[k], x~ the dilated (ld), padded (lo) input. So
    # ct_x[i] = sum_k g^[i*ld + lo - k*rd] w[k] with g^ the cotangent dilated by s; with the kernel flipped
    # (k = K-1-k') that is a correlation of g^ padded by (K-1)*rd - lo in front, stride ld.
    pads = []
    for k in range(len(window_strides)):
        n_in = dilate_dim(lhs_aval.shape[ls[2 + k]], lhs_dilation[k])
        win = dilate_dim(_shape(rhs)[rs[2 + k]], rhs_dilation[k])
        n_out = dilate_dim(_shape(ct)[os_[2 + k]], window_strides[k])
        lo = win - 1 - padding[k][0]
        # padded length n_in + win - 1 gives (n_in + win - 1 - win) // ld + 1 = the input's size.
        pads.append((lo, n_in + win - 1 - n_out - lo))
    flipped = lax.rev(rhs, tuple(rs[2:]))
    dn = ConvDimensionNumbers(os_, _swap(rs), ls)
    out = _conv.bind(ct, flipped, **_params(lhs_dilation, pads, window_strides, rhs_dilation, dn, groups, 1,
                                            precision, None))
    if B > 1:
        # The result's features are (B, C): fold the batch-group axis back into the batch, as its major part.
        out = _merge_axis(_split_axis(out, ls[1], B), ls[1], ls[0])
    return _cast(out, lhs_aval.dtype)


def conv_general_dilated_transpose_rhs(ct, lhs, rhs_aval, *, window_strides, padding, lhs_dilation, rhs_dilation,
                                       dimension_numbers, feature_group_count, batch_group_count, precision=None,
                                       preferred_element_type=None):
    """The cotangent of the kernel: the input correlated with ``ct`` (batch and features exchanged)."""
    ls, rs, os_ = dimension_numbers
    if rhs_aval.size == 0 or get_aval(lhs).size == 0 or get_aval(ct).size == 0:
        return zeros_like_aval(rhs_aval)
    work = get_aval(ct).dtype
    lhs = _cast(lhs, work)
    G, B = feature_group_count, batch_group_count
    # Feature groups split the (new) batch = the input features; batch groups split the (new) features.
    new_g, new_b = (B, 1) if B > 1 else (1, G)
    # ct_w[o, c, k] = sum_{n, p} x~[n, c, k*rd + p*s] g[n, o, p]: a correlation of x~ (batch c, features n)
    # with g as the kernel (out features o, in features n, taps p dilated by s), stride rd, output size K.
    pads = []
    for k in range(len(window_strides)):
        n_in = dilate_dim(_shape(lhs)[ls[2 + k]], lhs_dilation[k])
        win = dilate_dim(rhs_aval.shape[rs[2 + k]], rhs_dilation[k])
        n_out = dilate_dim(_shape(ct)[os_[2 + k]], window_strides[k])
        lo = padding[k][0]
        # padded length n_out + win - 1 gives (win - 1) // rd + 1 = the kernel's size.
        pads.append((lo, n_out + win - 1 - n_in - lo))
    dn = ConvDimensionNumbers(_swap(ls), _swap(os_), _swap(rs))
    out = _conv.bind(lhs, ct, **_params(rhs_dilation, pads, lhs_dilation, window_strides, dn, new_g, new_b,
                                        precision, None))
    return _cast(out, rhs_aval.dtype)


def conv_general_dilated_transpose(ct, lhs, rhs, **params):
    if is_undefined(lhs) and is_undefined(rhs):
        raise TypeError("conv_general_dilated is linear in one operand at a time; both operands of this "
                        "convolution depend on the differentiated inputs, so it cannot be transposed")
    if isinstance(ct, Zero):
        return [Zero(lhs.aval) if is_undefined(lhs) else None, Zero(rhs.aval) if is_undefined(rhs) else None]
    if is_undefined(lhs):
        return [conv_general_dilated_transpose_lhs(ct, rhs, lhs.aval, **params), None]
    return [None, conv_general_dilated_transpose_rhs(ct, lhs, rhs.aval, **params)]


primitive_transposes[_conv] = conv_general_dilated_transpose


# ----------------------------------------------------------------------------- batching


def _canonical(x, bdim, spec):
    """``x`` (mapped at ``bdim``, or not mapped) as ``(V, a, b, *spatial)`` / ``(a, b, *spatial)`` by ``spec``."""
    if bdim is None:
        return lax.transpose(x, spec)
    nd = len(_shape(x))
    front = [bdim] + [i for i in range(nd) if i != bdim]      # the mapped axis first, the rest in order
    return lax.transpose(x, [front[0]] + [front[1 + d] for d in spec])


def conv_general_dilated_batch(vals, dims, *, window_strides, padding, lhs_dilation, rhs_dilation,
                               dimension_numbers, feature_group_count, batch_group_count, precision=None,
                               preferred_element_type=None):
    """Fold the mapped axis into one convolution (in the canonical ``NC...``/``OI...`` layout)."""
    (lhs, rhs), (ld, rd) = vals, dims
    ls, rs, os_ = dimension_numbers
    nd = len(ls)
    G, B = feature_group_count, batch_group_count
    x = _canonical(lhs, ld, ls)
    w = _canonical(rhs, rd, rs)
    V = _shape(x)[0] if ld is not None else _shape(w)[0]
    iota = tuple(range(nd))
    canon = ConvDimensionNumbers(iota, iota, iota)

    def conv(a, b, g, bg):
        return _conv.bind(a, b, **_params(window_strides, padding, lhs_dilation, rhs_dilation, canon, g, bg,
                                          precision, preferred_element_type))

    if ld is not None and rd is None:
        if B == 1:
            out = conv(_merge_axis(x, 0, 0), w, G, 1)                       # batch (V * N)
            out = _split_axis(out, 0, V)                                     # (V, N, O, ...)
        else:
            # Batch groups are contiguous blocks of N: keep them outermost, (B, V, NB) -> B * (V * NB).
            x = _split_axis(x, 1, B)                                         # (V, B, NB, C, ...)
            x = _merge_axis(_merge_axis(x, 0, 1), 0, 0)                      # (B * V * NB, C, ...)
            out = _split_axis(conv(x, w, 1, B), 0, V)                        # (V, NB, O, ...)
    elif rd is not None and ld is None:
        # The kernels' output features side by side, inside each group: (groups, V, OG) -> O * V.
        groups = max(G, B)
        w = _split_axis(w, 1, groups)                                        # (V, groups, OG, I, ...)
        w = _merge_axis(_merge_axis(w, 0, 1), 0, 0)                          # (groups * V * OG, I, ...)
        out = conv(x, w, G, B)                                               # (N', groups * V * OG, ...)
        out = _split_axis(_split_axis(out, 1, groups), 2, V)                 # (N', groups, V, OG, ...)
        out = lax.transpose(out, [2, 0, 1] + list(range(3, nd + 2)))         # (V, N', groups, OG, ...)
        out = _merge_axis(out, 2, 2)                                         # (V, N', O, ...)
    else:
        if B == 1:
            # Each example's features and kernels become a feature group of their own (V outermost).
            x = _merge_axis(x, 0, 1)                                         # (N, V * C, ...)
            out = conv(x, _merge_axis(w, 0, 0), G * V, 1)                    # (N, V * O, ...)
        else:
            x = _merge_axis(x, 0, 0)                                         # (V * N, C, ...): V * B groups
            out = conv(x, _merge_axis(w, 0, 0), 1, B * V)                    # (NB, V * O, ...)
        out = lax.transpose(_split_axis(out, 1, V), [1, 0] + list(range(2, nd + 1)))   # (V, N', O, ...)
    # (V, N', O, *S') -> the output spec's layout, the mapped axis first.
    inv = np.argsort(os_)
    return lax.transpose(out, [0] + [1 + int(i) for i in inv]), 0


primitive_batchers[_conv] = conv_general_dilated_batch
