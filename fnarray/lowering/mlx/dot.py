"""The mlx backend's rule for ``dot_general`` (integer products summed in blocks: MLX's matmul is
floating-point only; registered into ``common.RULES``)."""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.lowering.mlx.common import F32, LOW, expression, mx_dtype, mx, rule


_INT_DOT_BLOCK = 1 << 22  # elements of the broadcast product per block (integer dot_general)


def _size_free_product(fn) -> bool:
    """Whether a product's function reads no size: the one expression of a floating product whose operands are
    the matrices themselves (transposed perhaps, its result cast perhaps), with no reshape to the sizes of these
    operands (``_float_product``), as a decode step's ``q @ cache.T``."""
    inline = getattr(fn, "inline", None)
    return inline is not None and set(inline[1]) <= {"lperm", "rperm", "mo"}


@rule(P.dot_general, shape_free=_size_free_product)
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

    if dtypes.is_inexact(d) and la.dtype == ra.dtype:   # one expression: the result's dtype is known here
        return _float_product(d, mo, (la.shape, lshape, None if l_ident else lperm),
                              (ra.shape, rshape, None if r_ident else rperm), out_shape)
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


def _float_product(d, mo, left, right, out_shape):
    """The floating product of two operands of dtype ``d`` as one ``common.expression`` (``left``, ``right``:
    ``(shape, matrix shape, transposition or None)``): float16/bfloat16 computed in float32 (as the reference),
    the result cast to ``mo`` where it differs from the product's dtype (float32 for those, else ``d``). A reshape
    to the shape an array has is left out where the avals show it (MLX returns the array itself for one: the same
    graph, without the ~0.3 us Python call; ~3 a product in a one-token step)."""
    consts = {}

    def operand(i, shape, matrix, perm):
        side = "lr"[i]
        a = f"{{{i}}}"
        if perm is not None:
            a, consts[f"{side}perm"] = f"mx.transpose({a}, {{{side}perm}})", perm
            shape = [shape[p] for p in perm]
        if list(shape) != list(matrix):
            a, consts[f"{side}shape"] = f"{a}.reshape({{{side}shape}})", matrix
        return a + ".astype(mx.float32)" if d in LOW else a
    r = f"mx.matmul({operand(0, *left)}, {operand(1, *right)})"
    if list(left[1][:-1]) + [right[1][-1]] != list(out_shape):
        r, consts["out_shape"] = f"{r}.reshape({{out_shape}})", out_shape
    if mx_dtype(F32 if d in LOW else d) != mo:
        r, consts["mo"] = f"{r}.astype({{mo}})", mo
    return expression(r, 2, **consts)
