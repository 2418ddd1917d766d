"""Linear algebra: products, contractions and diagonals (array API 2024.12 and NumPy).

Every product promotes its operands to one dtype (JAX's lattice) and lowers to the
``dot_general`` primitive, whose output lists batch dimensions first, then the free
dimensions of the left operand, then those of the right (as XLA). Boolean products are
logical (or of ands), as in NumPy. Mismatched contracting dimensions raise ``ContractionShapeError``
naming both operands: a ``ShapeError`` (``ValueError``) that is also the ``TypeError`` JAX raises.
"""

from __future__ import annotations

import math

from fnarray.core import dtypes, lax
from fnarray.core.errors import ContractionShapeError, ShapeError
from fnarray.numpy._manipulation import matrix_transpose  # noqa: F401  (one definition, re-exported here)
from fnarray.numpy._util import (asarray_internal, aval_of, broadcast_shapes, check_arraylike, normalize_axis, promote,
                                  same_dtype)

__all__ = [
    "cross",
    "diagonal",
    "dot",
    "einsum",
    "inner",
    "kron",
    "matmul",
    "matrix_transpose",
    "outer",
    "tensordot",
    "trace",
    "vdot",
    "vecdot",
]


# ----------------------------------------------------------------------------- helpers


def _arrays(name, *xs):
    """Check, convert and promote ``xs`` to arrays of one dtype."""
    if same_dtype(xs) is not None:
        return list(xs)  # arrays of one dtype: nothing to convert (``promote`` changes only a dtype)
    check_arraylike(name, *xs)
    return [asarray_internal(x) for x in promote(name, *[asarray_internal(x) for x in xs])]


def _dot(a, b, contract, batch=((), ()), preferred_element_type=None):
    out = lax.dot_general(a, b, (contract, batch))
    if preferred_element_type is not None:
        out = lax.convert_element_type(out, preferred_element_type)
    return out


def _conj(x):
    return lax.conj(x) if dtypes.is_complex(x.dtype) else x


def _multiply(a, b):
    from fnarray.numpy._elementwise import multiply
    return multiply(a, b)


def _moveaxis_last(x, axis):
    perm = [i for i in range(x.ndim) if i != axis] + [axis]
    return lax.transpose(x, perm)


def _diagonal_last2(x):
    """The main diagonal of the last two axes of ``x`` (sizes ``r`` and ``c``): shape ``rest + (min(r, c),)``."""
    *rest, r, c = x.shape
    d = min(r, c)
    x = lax.slice(x, (0,) * x.ndim, tuple(rest) + (d, d))
    flat = lax.reshape(x, tuple(rest) + (d * d,))
    if d <= 1:
        return flat
    # Row-major, element (i, i) sits at i * (d + 1).
    return lax.slice(flat, (0,) * len(flat.shape), flat.shape, (1,) * len(rest) + (d + 1,))


# ----------------------------------------------------------------------------- products


def _out_sharding(x, out_sharding):
    """``x`` laid out as ``out_sharding`` says (``jax.numpy``'s argument): a ``NamedSharding``, or a ``PartitionSpec``
    over the ambient mesh (``fnarray.sharding.set_mesh``); ``None`` leaves it to the compiler."""
    if out_sharding is None:
        return x
    from fnarray import sharding as sh
    from fnarray.core.spmd import sharding_constraint_p
    if not isinstance(out_sharding, sh.NamedSharding):
        out_sharding = sh.NamedSharding(sh.ambient_mesh("out_sharding=PartitionSpec(...)"), out_sharding)
    sh.check_spec(out_sharding.spec, out_sharding.mesh, x.shape, "out_sharding")
    return sharding_constraint_p.bind(x, sharding=out_sharding)


_MATRIX_DN = (((1,), (0,)), ((), ()))


def _plain_2d(x1, x2) -> bool:
    """Two matrices of one dtype that promotes to itself, whose inner sizes agree: ``matmul``'s common case,
    which needs no promotion, reshape, broadcast nor transpose (issue 28: a third of an eager ``@``'s Python)."""
    if same_dtype((x1, x2)) is None:
        return False
    a, b = x1.aval, x2.aval
    return len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0]


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None, out_sharding=None):
    """Matrix product with broadcasting of batch dimensions (array API ``matmul``; ``numpy.matmul``, ``@``).

    Differences from NumPy: JAX's promotion of the operands; ``precision`` and
    ``preferred_element_type`` are ``jax.numpy``'s; no ``out=``.

    Args:
      x1: array of shape ``(..., M, K)``, or ``(K,)`` (treated as a row, the row axis dropped after).
      x2: array of shape ``(..., K, N)``, or ``(K,)`` (treated as a column, dropped after).
      precision: accepted for ``jax.numpy`` compatibility; ignored.
      preferred_element_type: dtype of the result (default: the promoted dtype).
      out_sharding: the result's layout, a ``NamedSharding`` or a ``PartitionSpec`` over the ambient mesh
        (``jax.numpy``'s; ``None``: the compiler chooses).

    Returns: shape ``broadcast(x1 batch, x2 batch) + (M, N)`` (without the dropped axes),
    dtype the promotion of ``x1`` and ``x2``.

    Raises: ``ShapeError`` for 0-d operands, a contracting-dimension mismatch (naming both
    operands) or batch dimensions that do not broadcast.
    """
    if preferred_element_type is None and out_sharding is None and _plain_2d(x1, x2):
        return lax.dot_general(x1, x2, _MATRIX_DN)  # what the general path below binds for this case
    check_arraylike("matmul", x1, x2)
    a0, b0 = aval_of(x1), aval_of(x2)
    if a0.ndim == 0 or b0.ndim == 0:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {a0.str_short()} and {b0.str_short()}; "
                         "use multiply for products with scalars")
    a, b = _arrays("matmul", x1, x2)
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    if vec_a:
        a = lax.reshape(a, (1,) + a.shape)
    if vec_b:
        b = lax.reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise ContractionShapeError(
            f"matmul: contracting dimension of {a0.str_short()} (size {a.shape[-1]}) does not match "
            f"{b0.str_short()} (size {b.shape[-2]}); the last axis of x1 must equal the "
            "second-to-last axis of x2 (the only axis of a 1-d operand)")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], name="matmul (batch dimensions)")
    nb = len(batch)
    if b.ndim == 2:
        # No batch on the right: contract directly; the left's batch axes stay in front.
        out = _dot(a, b, ((a.ndim - 1,), (0,)), preferred_element_type=preferred_element_type)
    elif a.ndim == 2:
        # No batch on the left: the result comes out as (M, batch..., N); move M into place.
        out = _dot(a, b, ((1,), (b.ndim - 2,)), preferred_element_type=preferred_element_type)
        out = lax.transpose(out, tuple(range(1, nb + 1)) + (0, nb + 1))
    else:
        a = lax.broadcast_to_rank_shape(a, batch + a.shape[-2:])
        b = lax.broadcast_to_rank_shape(b, batch + b.shape[-2:])
        out = _dot(a, b, ((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))),
                   preferred_element_type=preferred_element_type)
    if vec_a:
        out = lax.squeeze(out, (out.ndim - 2,))
    if vec_b:
        out = lax.squeeze(out, (out.ndim - 1,))
    return _out_sharding(out, out_sharding)


def dot(a, b, *, precision=None, preferred_element_type=None, out_sharding=None):
    """NumPy's ``dot`` (``jax.numpy.dot``).

    Scalars multiply; 1-d with 1-d is the inner product; otherwise the last axis of ``a`` is
    contracted with the only axis of a 1-d ``b`` or the second-to-last axis of ``b``. The
    result's shape is ``a.shape[:-1] + b.shape[:-2] + b.shape[-1:]`` (for N-d ``b``). ``out_sharding``: as
    ``matmul``'s.

    Raises: ``ShapeError`` when the contracted sizes differ.
    """
    check_arraylike("dot", a, b)
    if aval_of(a).ndim == 0 or aval_of(b).ndim == 0:
        return _out_sharding(_multiply(a, b), out_sharding)
    x, y = _arrays("dot", a, b)
    yk = 0 if y.ndim == 1 else y.ndim - 2
    if x.shape[-1] != y.shape[yk]:
        raise ContractionShapeError(f"dot: shapes {x.shape} and {y.shape} are not aligned: the last axis of a (size "
                         f"{x.shape[-1]}) must equal axis {yk} of b (size {y.shape[yk]})")
    return _out_sharding(_dot(x, y, ((x.ndim - 1,), (yk,)), preferred_element_type=preferred_element_type),
                         out_sharding)


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """Dot product of the flattened arrays, conjugating ``a`` (``numpy.vdot``); a 0-d array.

    Raises: ``ShapeError`` when the sizes differ.
    """
    x, y = _arrays("vdot", a, b)
    if x.size != y.size:
        raise ContractionShapeError(f"vdot: arrays of {x.size} and {y.size} elements (shapes {x.shape}, "
                                    f"{y.shape}); vdot needs equal sizes")
    x, y = lax.reshape(_conj(x), (x.size,)), lax.reshape(y, (y.size,))
    return _dot(x, y, ((0,), (0,)), preferred_element_type=preferred_element_type)


def inner(a, b, *, precision=None, preferred_element_type=None):
    """Inner product over the last axes (``numpy.inner``): shape ``a.shape[:-1] + b.shape[:-1]``.

    Scalars multiply. Raises: ``ShapeError`` when the last axes differ in size.
    """
    check_arraylike("inner", a, b)
    if aval_of(a).ndim == 0 or aval_of(b).ndim == 0:
        return _multiply(a, b)
    x, y = _arrays("inner", a, b)
    if x.shape[-1] != y.shape[-1]:
        raise ContractionShapeError(f"inner: the last axes of {x.shape} and {y.shape} differ in size")
    return _dot(x, y, ((x.ndim - 1,), (y.ndim - 1,)), preferred_element_type=preferred_element_type)


def outer(a, b):
    """Outer product of the flattened arrays (``numpy.outer``): shape ``(a.size, b.size)``."""
    x, y = _arrays("outer", a, b)
    return _multiply(lax.reshape(x, (x.size, 1)), lax.reshape(y, (1, y.size)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    """Sum of products over the given axes (array API ``tensordot``; ``numpy.tensordot``).

    Args:
      a, b: arrays.
      axes: an int ``n`` (the last ``n`` axes of ``a`` with the first ``n`` of ``b``), or a pair
        ``(axes_a, axes_b)`` of ints or equal-length sequences, paired in order.

    Returns: shape ``a``'s free axes then ``b``'s free axes, in order.

    Raises: ``ShapeError`` for paired axes of different sizes or invalid axes.
    """
    x, y = _arrays("tensordot", a, b)
    if isinstance(axes, int):
        if axes < 0 or axes > x.ndim or axes > y.ndim:
            raise ShapeError(f"tensordot: axes={axes} must lie in [0, min(rank)] for shapes {x.shape} and "
                             f"{y.shape}")
        ax_a, ax_b = tuple(range(x.ndim - axes, x.ndim)), tuple(range(axes))
    else:
        try:
            pa, pb = axes
        except (TypeError, ValueError):
            raise TypeError(f"tensordot: axes must be an int or a pair of sequences, got {axes!r}") from None
        pa = (pa,) if isinstance(pa, int) else tuple(pa)
        pb = (pb,) if isinstance(pb, int) else tuple(pb)
        if len(pa) != len(pb):
            raise ShapeError(f"tensordot: axes {axes} pair {len(pa)} axes of a with {len(pb)} axes of b")
        ax_a = tuple(normalize_axis(i, x.ndim, "tensordot axis") for i in pa)
        ax_b = tuple(normalize_axis(i, y.ndim, "tensordot axis") for i in pb)
        if len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
            raise ShapeError(f"tensordot: repeated axes in {axes}")
    for i, j in zip(ax_a, ax_b, strict=True):
        if x.shape[i] != y.shape[j]:
            raise ContractionShapeError(f"tensordot: axis {i} of a {x.shape} (size {x.shape[i]}) does not match "
                                        f"axis {j} of b {y.shape} (size {y.shape[j]})")
    return _dot(x, y, (ax_a, ax_b), preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis=-1, precision=None, preferred_element_type=None):
    """Vector dot product ``sum(conj(x1) * x2)`` over ``axis`` (array API ``vecdot``; ``numpy.vecdot``).

    Differences from NumPy: JAX's promotion; a non-negative ``axis`` counts in the broadcast shape.

    Args:
      x1, x2: arrays whose other axes broadcast together.
      axis: the contracted axis, counted from the end of the broadcast shape (in ``[-N, -1]``
        with ``N`` the smaller rank; a non-negative axis counts in the broadcast shape).

    Returns: the broadcast shape without ``axis``.

    Raises: ``ShapeError`` when the contracted sizes differ or the other axes do not broadcast.
    """
    x, y = _arrays("vecdot", x1, x2)
    nd = max(x.ndim, y.ndim)
    if min(x.ndim, y.ndim) == 0:
        raise ShapeError(f"vecdot: operands must have rank >= 1, got shapes {x.shape} and {y.shape}")
    ax = axis - nd if axis >= 0 else axis
    if not -min(x.ndim, y.ndim) <= ax <= -1:
        raise ShapeError(f"vecdot: axis {axis} is out of range for shapes {x.shape} and {y.shape}")
    if x.shape[ax] != y.shape[ax]:
        raise ShapeError(f"vecdot: the contracted axis {axis} has size {x.shape[ax]} in x1 {x.shape} and "
                         f"{y.shape[ax]} in x2 {y.shape}; they must be equal")
    x, y = _moveaxis_last(x, x.ndim + ax), _moveaxis_last(y, y.ndim + ax)
    batch = broadcast_shapes(x.shape[:-1], y.shape[:-1], name="vecdot")
    k = x.shape[-1]
    x = lax.broadcast_to_rank_shape(x, batch + (k,))
    y = lax.broadcast_to_rank_shape(y, batch + (k,))
    nb = len(batch)
    return _dot(_conj(x), y, ((nb,), (nb,)), (tuple(range(nb)), tuple(range(nb))),
                preferred_element_type=preferred_element_type)


# ----------------------------------------------------------------------------- einsum


def einsum(subscripts, /, *operands, out=None, optimize="auto", precision=None, preferred_element_type=None,
           out_sharding=None):
    """Einstein summation (``numpy.einsum``; ``jax.numpy.einsum``).

    ``subscripts`` names each operand's axes with letters, e.g. ``"ij,jk->ik"``. Supported:
    explicit (``->``) and implicit output (letters used once, in alphabetical order), ``...``
    for broadcast leading axes, a letter repeated within one operand (its diagonal), letters
    summed away, size-1 axes broadcasting against their label's size, any number of operands
    (contracted pairwise, cheapest pair first, through ``dot_general``), and NumPy's
    interleaved form ``einsum(op0, [0, 1], op1, [1, 2], [0, 2])``. ``optimize`` and ``precision``
    are accepted for compatibility and ignored: the order is always the greedy one above. ``out_sharding``: as
    ``matmul``'s.

    Returns: the promoted dtype of the operands (or ``preferred_element_type``), with the
    output's axes in the order named.

    Raises: ``ValueError`` for malformed subscripts; ``ShapeError`` when one letter labels
    axes of different sizes or an operand's rank does not match its subscripts.
    """
    if out is not None:
        raise TypeError("einsum: the out= argument is not supported, as fnarray arrays are immutable")
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_subscripts((subscripts,) + operands)
    if not operands:
        raise ValueError("einsum needs at least one operand")
    arrays = _arrays("einsum", *operands)
    in_labels, out_labels = _parse_einsum(subscripts, [x.shape for x in arrays])
    sizes = _label_sizes(subscripts, arrays, in_labels)
    ops = [_einsum_diagonals(x, labels) for x, labels in zip(arrays, in_labels, strict=True)]
    ops = [_einsum_presum(x, labels, out_labels, ops, i) for i, (x, labels) in enumerate(ops)]
    while len(ops) > 1:
        i, j = _cheapest_pair(ops, sizes, out_labels)
        a, b = ops[i], ops[j]
        rest = [op for k, op in enumerate(ops) if k not in (i, j)]
        ops = rest + [_einsum_contract(a, b, out_labels, rest, sizes)]
    x, labels = ops[0]
    x, labels = _einsum_presum(x, labels, out_labels, [], -1)
    x = lax.transpose(x, tuple(labels.index(lbl) for lbl in out_labels))
    if preferred_element_type is not None:
        x = lax.convert_element_type(x, preferred_element_type)
    return _out_sharding(x, out_sharding)


def _interleaved_subscripts(args):
    """NumPy's ``einsum(op0, sub0, op1, sub1, ..., [out])`` as a subscripts string and operands."""
    args = list(args)
    out_sub = args.pop() if len(args) % 2 == 1 else None
    ops, subs = args[0::2], args[1::2]

    def letters(sub):
        parts = []
        for s in sub:
            if s is Ellipsis:
                parts.append("...")
            elif isinstance(s, int) and 0 <= s < 52:
                parts.append("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[s])
            else:
                raise ValueError(f"einsum: interleaved subscripts must be ints in [0, 52) or Ellipsis, got {s!r}")
        return "".join(parts)
    text = ",".join(letters(s) for s in subs)
    if out_sub is not None:
        text += "->" + letters(out_sub)
    return text, tuple(ops)


def _split_term(term, what):
    if term.count("...") > 1:
        raise ValueError(f"einsum: {what} {term!r} has more than one ellipsis '...'")
    letters = term.replace("...", "")
    bad = [c for c in letters if not (c.isascii() and c.isalpha())]
    if bad:
        raise ValueError(f"einsum: {what} {term!r} has invalid characters {bad}; use letters a-z, A-Z and '...'")
    return letters, "..." in term


def _parse_einsum(subscripts, shapes):
    """Labels (ints: character codes, negative for ellipsis axes) of each operand and of the output."""
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ValueError(f"einsum: subscripts {subscripts!r} have more than one '->'")
    lhs, rhs = s.split("->") if "->" in s else (s, None)
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands but {len(shapes)} "
                         "were given")
    parsed = []
    ell_rank = 0
    for i, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        letters, has_ell = _split_term(term, f"operand {i}'s subscripts")
        k = len(shape) - len(letters)
        if (has_ell and k < 0) or (not has_ell and k != 0):
            raise ShapeError(f"einsum: operand {i} has shape {tuple(shape)} (rank {len(shape)}) but its "
                             f"subscripts {term!r} name {len(letters)} axes" + (" and '...'" if has_ell else ""))
        parsed.append((term, letters, k if has_ell else 0))
        ell_rank = max(ell_rank, k if has_ell else 0)
    ell = list(range(-ell_rank, 0))
    in_labels = []
    for term, _letters, k in parsed:
        head, _, tail = term.partition("...")
        labels = [ord(c) for c in head]
        if "..." in term:
            labels += ell[ell_rank - k:] + [ord(c) for c in tail]
        in_labels.append(labels)
    counts = {}
    for labels in in_labels:
        for lbl in labels:
            counts[lbl] = counts.get(lbl, 0) + 1
    if rhs is None:
        out_labels = ell + sorted(lbl for lbl, n in counts.items() if n == 1 and lbl >= 0)
    else:
        letters, has_ell = _split_term(rhs, "output subscripts")
        if len(set(letters)) != len(letters):
            raise ValueError(f"einsum: output subscripts {rhs!r} repeat a letter")
        missing = [c for c in letters if ord(c) not in counts]
        if missing:
            raise ValueError(f"einsum: output letters {missing} do not appear in the inputs of {subscripts!r}")
        if ell_rank and not has_ell:
            raise ValueError(f"einsum: the inputs of {subscripts!r} have '...' axes but the output names no '...' "
                             "to hold them; add '...' to the output")
        head, _, tail = rhs.partition("...")
        out_labels = [ord(c) for c in head] + (ell if has_ell else []) + [ord(c) for c in tail]
    return in_labels, out_labels


def _label_str(lbl):
    return chr(lbl) if lbl >= 0 else f"...[{lbl}]"


def _label_sizes(subscripts, arrays, in_labels):
    sizes = {}
    for x, labels in zip(arrays, in_labels, strict=True):
        for lbl, n in zip(labels, x.shape, strict=True):
            m = sizes.get(lbl, n)
            if n != 1 and m != 1 and n != m:
                shapes = ", ".join(str(a.shape) for a in arrays)
                raise ShapeError(f"einsum: {_label_str(lbl)!r} in {subscripts!r} labels axes of sizes {m} and {n} "
                                 f"(operand shapes {shapes}); sizes must agree (or be 1)")
            sizes[lbl] = n if m == 1 else m
    return sizes


def _einsum_diagonals(x, labels):
    """Replace every letter repeated within one operand by the diagonal of its axes."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        lbl = next(lb for lb in labels if labels.count(lb) > 1)
        i = labels.index(lbl)
        j = labels.index(lbl, i + 1)
        if x.shape[i] != x.shape[j]:
            raise ShapeError(f"einsum: {_label_str(lbl)!r} is repeated within one operand over axes of sizes "
                             f"{x.shape[i]} and {x.shape[j]}; a diagonal needs equal sizes")
        keep = [k for k in range(x.ndim) if k not in (i, j)]
        x = _diagonal_last2(lax.transpose(x, keep + [i, j]))
        labels = [labels[k] for k in keep] + [lbl]
    return x, labels


def _reduce_labels(x, labels, drop):
    axes = tuple(k for k, lbl in enumerate(labels) if lbl in drop)
    if not axes:
        return x, labels
    red = lax.reduce_or if dtypes.is_bool(x.dtype) else lax.reduce_sum
    return red(x, axes), [lbl for lbl in labels if lbl not in drop]


def _einsum_presum(x, labels, out_labels, ops, index):
    """Sum away the labels of operand ``index`` that no other operand nor the output uses."""
    others = set(out_labels)
    for k, (_, lb) in enumerate(ops):
        if k != index:
            others.update(lb)
    return _reduce_labels(x, labels, {lbl for lbl in labels if lbl not in others})


def _pair_result(la, lb, keep):
    shared = [lbl for lbl in la if lbl in lb]
    batch = [lbl for lbl in shared if lbl in keep]
    contract = [lbl for lbl in shared if lbl not in keep]
    free_a = [lbl for lbl in la if lbl not in lb]
    free_b = [lbl for lbl in lb if lbl not in la]
    return batch, contract, free_a, free_b


def _cheapest_pair(ops, sizes, out_labels):
    best = None
    for i in range(len(ops)):
        for j in range(i + 1, len(ops)):
            keep = set(out_labels)
            for k, (_, lb) in enumerate(ops):
                if k not in (i, j):
                    keep.update(lb)
            batch, _, free_a, free_b = _pair_result(ops[i][1], ops[j][1], keep)
            cost = math.prod(sizes[lbl] for lbl in batch + free_a + free_b)
            if best is None or cost < best[0]:
                best = (cost, i, j)
    return best[1], best[2]


def _broadcast_label(x, labels, lbl, size):
    k = labels.index(lbl)
    if x.shape[k] == size:
        return x
    shape = x.shape[:k] + (size,) + x.shape[k + 1:]
    return lax.broadcast_in_dim(lax.reshape(x, x.shape[:k] + x.shape[k + 1:]), shape,
                                tuple(d for d in range(x.ndim) if d != k))


def _einsum_contract(a, b, out_labels, rest, sizes):
    (x, la), (y, lb) = a, b
    keep = set(out_labels)
    for _, lbls in rest:
        keep.update(lbls)
    batch, contract, free_a, free_b = _pair_result(la, lb, keep)
    for lbl in batch + contract:
        x = _broadcast_label(x, la, lbl, sizes[lbl])
        y = _broadcast_label(y, lb, lbl, sizes[lbl])
    dims = ((tuple(la.index(lbl) for lbl in contract), tuple(lb.index(lbl) for lbl in contract)),
            (tuple(la.index(lbl) for lbl in batch), tuple(lb.index(lbl) for lbl in batch)))
    out = lax.dot_general(x, y, dims)
    return out, batch + free_a + free_b


# ----------------------------------------------------------------------------- structure


def diagonal(x, /, offset=0, axis1=-2, axis2=-1):
    """Diagonals of the 2-d slices over ``axis1`` and ``axis2`` (array API ``linalg.diagonal``;
    ``numpy.diagonal`` with its axis arguments).

    Defaults take the last two axes, as the array API's ``linalg.diagonal`` (``numpy.diagonal``
    defaults to ``axis1=0, axis2=1``; pass them explicitly for NumPy's behaviour on N-d arrays).

    Args:
      x: array of rank >= 2. offset: 0 the main diagonal, > 0 above it, < 0 below it.
      axis1, axis2: the two (distinct) axes holding the matrices.

    Returns: shape ``x.shape without axis1 and axis2`` plus the diagonal's length last.

    Raises: ``ShapeError`` for rank < 2 or equal axes.
    """
    check_arraylike("diagonal", x)
    x = asarray_internal(x)
    if x.ndim < 2:
        raise ShapeError(f"diagonal needs an array of rank >= 2, got shape {x.shape}")
    a1, a2 = normalize_axis(axis1, x.ndim, "axis1"), normalize_axis(axis2, x.ndim, "axis2")
    if a1 == a2:
        raise ShapeError(f"diagonal: axis1 and axis2 must differ, both are {a1}")
    keep = [i for i in range(x.ndim) if i not in (a1, a2)]
    x = lax.transpose(x, keep + [a1, a2])
    r, c = x.shape[-2:]
    offset = int(offset)
    if offset >= 0:
        x = lax.slice_in_dim(x, min(offset, c), c, axis=x.ndim - 1)
    else:
        x = lax.slice_in_dim(x, min(-offset, r), r, axis=x.ndim - 2)
    return _diagonal_last2(x)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """Sum along a diagonal (``numpy.trace``; ``jax.numpy.trace``).

    Args: a: array of rank >= 2; offset, axis1, axis2: as ``diagonal`` (NumPy defaults 0, 1);
    dtype: accumulation dtype, default as ``sum`` (small integers and bool give ``int32``).
    Returns: shape ``a.shape without axis1 and axis2``.
    """
    from fnarray.numpy._reductions import sum as _sum
    return _sum(diagonal(a, offset=offset, axis1=axis1, axis2=axis2), axis=-1, dtype=dtype)


def kron(a, b):
    """Kronecker product (``numpy.kron``): blocks ``a[i, j] * b``.

    The operand of smaller rank gets leading size-1 axes; the result has shape
    ``a.shape * b.shape`` elementwise.
    """
    x, y = _arrays("kron", a, b)
    nd = max(x.ndim, y.ndim)
    xs = (1,) * (nd - x.ndim) + x.shape
    ys = (1,) * (nd - y.ndim) + y.shape
    x = lax.reshape(x, tuple(v for n in xs for v in (n, 1)))
    y = lax.reshape(y, tuple(v for n in ys for v in (1, n)))
    return lax.reshape(_multiply(x, y), tuple(m * n for m, n in zip(xs, ys, strict=True)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross product of 3-vectors (array API ``cross(x1, x2, axis=-1)``; ``numpy.cross``).

    Args:
      a, b: arrays whose vectors (size 3) lie along ``axisa`` / ``axisb``; other axes broadcast.
      axisc: axis of the result holding the vectors. axis: if given, overrides all three.

    Returns: the broadcast shape with the vectors along ``axisc``, in the promoted dtype.

    Raises: ``ShapeError`` when a vector axis does not have size 3 or the other axes do not
    broadcast.
    """
    from fnarray.numpy._elementwise import subtract
    x, y = _arrays("cross", a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError(f"cross needs arrays of rank >= 1, got shapes {x.shape} and {y.shape}")
    xa, ya = normalize_axis(axisa, x.ndim, "axisa"), normalize_axis(axisb, y.ndim, "axisb")
    if x.shape[xa] != 3 or y.shape[ya] != 3:
        raise ShapeError(f"cross needs vectors of size 3, got sizes {x.shape[xa]} (axis {axisa} of {x.shape}) and "
                         f"{y.shape[ya]} (axis {axisb} of {y.shape})")
    x, y = _moveaxis_last(x, xa), _moveaxis_last(y, ya)
    batch = broadcast_shapes(x.shape[:-1], y.shape[:-1], name="cross")

    def comp(v, i):
        return lax.broadcast_to_rank_shape(lax.reshape(lax.slice_in_dim(v, i, i + 1, axis=v.ndim - 1),
                                                       v.shape[:-1]), batch)
    x0, x1, x2 = (comp(x, i) for i in range(3))
    y0, y1, y2 = (comp(y, i) for i in range(3))
    parts = [subtract(_multiply(x1, y2), _multiply(x2, y1)),
             subtract(_multiply(x2, y0), _multiply(x0, y2)),
             subtract(_multiply(x0, y1), _multiply(x1, y0))]
    out = lax.concatenate([lax.reshape(p, batch + (1,)) for p in parts], len(batch))
    c = normalize_axis(axisc, out.ndim, "axisc")
    perm = list(range(out.ndim - 1))
    perm.insert(c, out.ndim - 1)
    return lax.transpose(out, perm)
