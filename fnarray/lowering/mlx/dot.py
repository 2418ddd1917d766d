"""The mlx backend's rule for ``dot_general`` (integer products summed in blocks: MLX's matmul is
floating-point only; registered into ``common.RULES``)."""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.lowering.mlx.common import LOW, mx_dtype, mx, rule


_INT_DOT_BLOCK = 1 << 22  # elements of the broadcast product per block (integer dot_general)


@rule(P.dot_general)
def _dot_general(params, in_avals, out_avals):
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    la, ra = in_avals
    d = la.dtype
    out_d = out_avals[0].dtype
    out_shape = list(out_avals[0].shape)
    mo = mx_dtype(out_d)
    lperm, rperm, B, M, K, N = dot_general_as_matmul(params["dimension_numbers"], la.shape, ra.shape)
    l_ident, r_ident = lperm == list(range(la.ndim)), rperm == list(range(ra.ndim))
    if B * M * N == 0:
        return lambda x, y: mx.zeros(out_shape, mo)

    # Without batch dimensions the operands are matrices: reshaping to (M, K) and (K, N) leaves a 2-D operand (a
    # one-token step's (1, D) rows, a (D, N) weight) and the (M, N) result of a 2-D output as they are, where a
    # (1, M, K) batch of one added a graph node for each (MLX evaluates every node: ~2-3 us each on the CPU).
    lshape, rshape = ([B, M, K], [B, K, N]) if lb else ([M, K], [K, N])

    def operands(x, y):
        a = x if l_ident else mx.transpose(x, lperm)
        b = y if r_ident else mx.transpose(y, rperm)
        return a.reshape(lshape), b.reshape(rshape)

    if dtypes.is_inexact(d):
        low = d in LOW

        def f(x, y):
            a, b = operands(x, y)
            if low:
                a, b = a.astype(mx.float32), b.astype(mx.float32)
            r = mx.matmul(a, b).reshape(out_shape)
            return r if r.dtype == mo else r.astype(mo)
        return f

    # Integers and bool: MLX's matmul is floating-point only. Sum exact (wrapping) products in blocks of K, in
    # the result's integer dtype (``preferred_element_type``: int8 operands summed in int32, as XLA).
    is_bool = d == dtypes.bool_
    work = mx.int32 if is_bool else mx_dtype(out_d if out_d.kind in "iu" else d)
    widen = work != mx_dtype(d)
    block = max(1, _INT_DOT_BLOCK // max(1, B * M * N))

    def fi(x, y):
        a, b = operands(x, y)
        if widen:
            a, b = a.astype(work), b.astype(work)
        a, b = a.reshape([B, M, K]), b.reshape([B, K, N])
        acc = None
        for k0 in range(0, max(K, 1), block):
            part = a[:, :, k0:k0 + block, None] * b[:, None, k0:k0 + block, :]
            s = mx.sum(part, axis=2)
            acc = s if acc is None else acc + s
        if acc is None or K == 0:
            acc = mx.zeros([B, M, N], work)
        if is_bool:
            acc = acc > 0
        return acc.reshape(out_shape).astype(mo)
    return fi
