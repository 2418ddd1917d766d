"""Helpers that several lowerings share."""

from __future__ import annotations

import math

__all__ = ["dot_general_as_matmul"]


def dot_general_as_matmul(dimension_numbers, lhs_shape, rhs_shape):
    """``dot_general`` as one batched matmul: ``(lperm, rperm, B, M, K, N)``.

    Transposing the lhs by ``lperm`` and reshaping to ``(B, M, K)``, the rhs by ``rperm`` to
    ``(B, K, N)``, their matmul reshaped to the output shape is the ``dot_general`` (batch, lhs free,
    rhs free dimensions, in that order, as XLA).
    """
    (lc, rc), (lb, rb) = dimension_numbers
    lfree = [i for i in range(len(lhs_shape)) if i not in lc and i not in lb]
    rfree = [i for i in range(len(rhs_shape)) if i not in rc and i not in rb]
    lperm = list(lb) + lfree + list(lc)
    rperm = list(rb) + list(rc) + rfree
    B = math.prod(lhs_shape[i] for i in lb)
    M = math.prod(lhs_shape[i] for i in lfree)
    K = math.prod(lhs_shape[i] for i in lc)
    N = math.prod(rhs_shape[i] for i in rfree)
    return lperm, rperm, B, M, K, N
