"""Attention written out as products and a softmax, run as the attention kernel (the kernel scheduler's pass).

``softmax((q @ k.T) * c, axis=-1) @ v`` over 2-D float32 rows, written as a user writes it (two ``dot_general``,
a ``reduce_max``, ``exp``, a ``reduce_sum`` and a division: ``fnarray.nn.softmax`` or the same by hand), is three
kernels on the kernel backends: the logits' product, the softmax's row kernel and the weighted sum's product. The
``dot_product_attention`` kernel (``groups/attention.py``) computes the same in one launch, a work item per query
row walking the keys with an online softmax, without the logits in memory. A decode step over a small cache is
a few tiny launches, and on CPU drivers a launch costs more than its work (lavapipe ~20 us of thread hand-off,
PoCL ~22 us of enqueue and finish; docs/performance.md "Attention written out runs as one kernel"), so
``fold_softmax_products`` replaces such a chain by one ``dot_product_attention`` equation when every value
between the two products is used only by the chain and a row's walk is short (``ROW_WALK``: one work item per
query row does all of a row's work, which only pays while the rows are small).

The equation it writes takes the 2-D operands themselves, ``q`` ``(T, H)`` and ``k``, ``v`` ``(S, H)``, and writes
the ``(T, H)`` result: the same memory as the primitive's ``(1, T, 1, H)`` and ``(1, S, 1, H)`` layouts, which the
attention group reads (``groups/attention.py`` ``as_heads``), so no reshape is copied. It exists only inside the
scheduler (the primitive's own rule asks for rank 4).

Where the keys and values are one value made by a ``concatenate`` along the rows (a decode step's cache grown by a
row: ``cache = concatenate([cache, row])``), the equation takes the concatenation's pieces instead (``q, *pieces``,
the parameter ``kv_pieces`` their rows) and, where anything else reads the grown cache, writes it as its second
output: the attention kernel reads each key from the piece holding it and its first query row stores the keys it
walks (``groups/attention.py`` ``_Pieces``). A decode step is then one launch instead of two, and the kernel takes
the number of keys and the pieces' ends as scalar arguments, so the step of every length is one source: one
pipeline or program compiled for a whole growing loop, set once in a pass of its steps (issue 28: a launch costs
lavapipe ~20-30 us of CPU, more than a decode step's work).

Results: the online softmax rounds differently (the sums rescaled per block of keys, ``o / l`` as ``o * (1 / l)``,
a scale ``/ c`` applied as ``* (1 / c)``): equal to the unfused kernels within float32 rounding. Non-finite logits
give what the unfused chain gives: NaN rows for a NaN or ``+inf`` logit and for rows of ``-inf`` logits alone
(tests/test_softmax_products.py).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.ir import Eqn, Literal, Program, Params, Var
from fnarray.core.passes import dce, read_counts
from fnarray.lowering.kernels.groups.attention import UNROLL_HEAD

__all__ = ["fold_softmax_products", "ROW_WALK"]

#: Most keys x head size of one query row folded into the attention kernel (a work item walks them twice: logits,
#: then weighted values). A decode step over 64 cached rows of head size 64 is 4,096.
ROW_WALK = 4096
#: Most pieces of a concatenation that the attention kernel reads its keys and values from (``_from_pieces``): each
#: is a binding of its own (WebGPU's portable limit is 8 storage buffers a kernel).
MAX_PIECES = 4
_F32 = np.dtype(np.float32)
_ROWS = ((1,), (0,))   # contracting dimensions of a (T, S) @ (S, H) product, no batch dimensions


def fold_softmax_products(prog: Program) -> Program:
    """``prog`` with every matched chain (module docstring) replaced by one ``dot_product_attention`` equation over
    2-D rows; ``prog`` itself when nothing matches."""
    uses = read_counts(prog)
    for a in prog.outvars:
        if isinstance(a, Var):
            uses[a] = uses.get(a, 0) + 2   # an output is never a chain's private value
    producer = {o: e for e in prog.eqns for o in e.outputs}
    replace, dropped = {}, set()
    for e in prog.eqns:
        if e.primitive is P.dot_general:
            matched = _match(e, producer, uses)
            if matched is not None:
                folded, cat = _from_pieces(*matched, e, prog, producer, uses)
                replace[id(e)] = folded
                if cat is not None:
                    dropped.add(id(cat))
    if not replace:
        return prog
    eqns = [replace.get(id(e), e) for e in prog.eqns if id(e) not in dropped]
    out, _ = dce(Program(prog.constvars, prog.invars, eqns, prog.outvars))
    return out


def _match(e, producer, uses):
    """The attention equation for the weighted sum ``e`` (``probabilities @ v``) and the chain's logits product, or
    None."""
    probs, v = e.inputs
    div = _made_by(probs, P.div, producer, uses)
    if not _product_2d(e) or not isinstance(v, Var) or div is None:
        return None
    weights, norm = div.inputs
    total = _row_stat(norm, producer, uses, P.reduce_sum)
    ex = _made_by(weights, P.exp, producer, uses, 2)
    if total is None or total.inputs[0] is not weights or ex is None:
        return None
    sub = _made_by(ex.inputs[0], P.sub, producer, uses)
    if sub is None:
        return None
    logits, shift = sub.inputs
    top = _row_stat(shift, producer, uses, P.reduce_max)
    if top is None or top.inputs[0] is not logits or _private(logits, producer, uses, 2) is None:
        return None
    scale, raw = _scaled(producer[logits], producer, uses)
    first = producer.get(raw)
    if first is None or first.primitive is not P.dot_general or not _product_2d(first):
        return None
    q, kt = first.inputs
    k = _transposed(kt, producer)
    if not (isinstance(q, Var) and k is not None and k.aval.shape == v.aval.shape):
        return None
    S, H = k.aval.shape
    if any(a.aval.dtype != _F32 for a in (q, k, v)) or S * H > ROW_WALK or H > UNROLL_HEAD:
        return None
    params = Params(scale=scale, is_causal=False, local_window=None, has_bias=False, has_mask=False,
                    has_lengths=False, lower_right=False)
    return Eqn(dot_product_attention_p, (q, k, v), params, e.outputs), first


def _from_pieces(att, logits, e, prog, producer, uses):
    """``(equation, concatenation)``: where the keys and values of the folded ``att`` (``logits``: the chain's
    product ``q @ k.T``, ``e`` its weighted sum, where ``att`` goes) are one value that a ``concatenate`` of at most
    ``MAX_PIECES`` 2-D rows makes (a decode step's grown cache), ``att`` reading them from those pieces (the
    parameter ``kv_pieces``: their rows), with the concatenation as its second output where anything else reads it,
    and the ``concatenate`` equation it replaces; else ``(att, None)``. Anything else that reads the concatenation
    must come after ``e``, where ``att`` makes it."""
    q, k, v = att.inputs
    cat = producer.get(k)
    if (k is not v or cat is None or cat.primitive is not P.concatenate or cat.params["dimension"] != 0
            or not 1 < len(cat.inputs) <= MAX_PIECES or not all(isinstance(a, Var) for a in cat.inputs)):
        return att, None
    chain = {id(e)}
    kt = logits.inputs[1]
    if uses.get(kt) == 1:
        chain.add(id(producer[kt]))   # the transpose, which dce removes with the chain
    for x in prog.eqns:
        if x is e:
            break
        if id(x) not in chain and any(a is k for a in x.inputs):
            return att, None
    params = Params(att.params, kv_pieces=tuple(a.aval.shape[0] for a in cat.inputs))
    outputs = e.outputs + ((k,) if uses.get(k, 0) > 2 else ())   # read by the transpose and the weighted sum
    return Eqn(dot_product_attention_p, (q, *cat.inputs), params, outputs), cat


def _product_2d(e) -> bool:
    """``e`` is a ``(T, S) @ (S, H)`` product of float32 rows without a conversion of its result."""
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    x, y = e.inputs
    pet = e.params.get("preferred_element_type")
    return ((tuple(lc), tuple(rc)) == _ROWS and not lb and not rb and x.aval.ndim == 2 and y.aval.ndim == 2
            and (pet is None or np.dtype(pet) == _F32) and e.outputs[0].aval.dtype == _F32)


def _private(v, producer, uses, n=1):
    """``v`` when it is a computed value read exactly ``n`` times, by the chain (never a program output)."""
    return v if isinstance(v, Var) and v in producer and uses.get(v) == n else None


def _made_by(v, primitive, producer, uses, n=1):
    """The ``primitive`` equation that makes ``v``, when ``v`` is private to the chain (read ``n`` times), or None."""
    if _private(v, producer, uses, n) is None:
        return None
    e = producer[v]
    return e if e.primitive is primitive else None


def _row_stat(v, producer, uses, reduction):
    """The ``reduction`` over axis 1 of a ``(T, S)`` value that ``v`` broadcasts back along its rows (through a
    ``(T, 1)`` reshape and ``stop_gradient``, as ``keepdims`` and ``fnarray.nn.softmax`` write it), or None."""
    b = _made_by(v, P.broadcast_in_dim, producer, uses)
    if b is None:
        return None
    T, S = v.aval.shape
    src = b.inputs[0]
    if tuple(b.params["broadcast_dimensions"]) != ((0, 1) if src.aval.shape == (T, 1) else (0,)):
        return None
    while True:
        if _private(src, producer, uses) is None:
            return None
        e = producer[src]
        if e.primitive is reduction:
            ok = tuple(e.params["axes"]) == (1,) and e.inputs[0].aval.shape == (T, S)
            return e if ok else None
        if e.primitive not in (P.reshape, P.stop_gradient) or src.aval.shape not in ((T, 1), (T,)):
            return None
        src = e.inputs[0]


def _scaled(e, producer, uses):
    """``(scale, unscaled logits)``: ``x * c``, ``c * x`` or ``x / c`` by a finite float literal, else ``(1.0, the
    value e makes)``."""
    if e.primitive in (P.mul, P.div):
        x, y = e.inputs
        if e.primitive is P.mul and isinstance(x, Literal):
            x, y = y, x
        if isinstance(y, Literal) and isinstance(x, Var) and _private(x, producer, uses) is not None:
            c = float(y.val)
            if np.isfinite(c) and c != 0:
                return (c if e.primitive is P.mul else 1.0 / c), x
    return 1.0, e.outputs[0]


def _transposed(kt, producer):
    """``k`` where ``kt`` is ``transpose(k)`` of a 2-D ``k`` (the logits' ``q @ k.T``), else None."""
    e = producer.get(kt)
    if e is None or e.primitive is not P.transpose or tuple(e.params["permutation"]) != (1, 0):
        return None
    k = e.inputs[0]
    return k if isinstance(k, Var) else None
