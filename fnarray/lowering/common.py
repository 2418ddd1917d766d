"""Helpers that several lowerings share."""

from __future__ import annotations

import math

from fnarray.core.cache import LRUCache

__all__ = ["dot_general_as_matmul", "code_of"]

#: code objects of generated program sources, by (file name, source): a program traced again at a new shape
#: often has the same text (the numpy and mlx programs call rules bound in their globals), and Python's
#: ``compile`` of it costs ~50 us (a third of an eager key's program on mlx:0)
_CODE = LRUCache(512)


def code_of(source: str, filename: str):
    """The code object of generated Python ``source`` (``compile(source, filename, "exec")``), cached by text;
    thread-safe. Raises SyntaxError as ``compile`` does (a bug in a code generator)."""
    key = (filename, source)
    code = _CODE.get(key)
    if code is None:
        code = _CODE.put(key, compile(source, filename, "exec"))
    return code


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
