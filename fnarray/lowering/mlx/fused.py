"""Patterns of a straight-line program that the mlx backend runs as one ``mx.fast`` call (``program.py`` rewrites
them before generating its Python).

``fa.nn.RMSNorm`` traces to ten equations (``integer_pow``, ``reduce_sum``, ``div``, ``reshape``, ``add``, ``sqrt``,
two ``broadcast_in_dim``, ``div``, ``mul``); MLX has the operation itself, ``mx.fast.rms_norm`` (one Metal kernel on
Apple GPUs; on the CPU MLX's own composite of ~6 nodes). A decode step of a small llama on mlx:0 spent ~13 graph
nodes and ~10 Python calls on each norm where raw MLX (as mlx-lm writes a model) spends one call
(docs/performance.md "mlx:0's decode step against raw MLX"). The rewrite keeps the equations' inputs and output;
the intermediate values stay where another equation reads them (dead-code elimination drops them otherwise).
Only float32 norms over the last axis with a weight of that axis's length are matched; the result differs from the
composite's by rounding (``x * rsqrt(ms + eps)`` against ``x / sqrt(ms + eps)``: a few float32 ulps).
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Literal, Program, Var
from fnarray.lowering.mlx.common import expression, mx

__all__ = ["Fused", "fuse_patterns", "rewrite_each"]


class Fused:
    """A stand-in primitive of the generated program (never bound, never seen outside the mlx lowering): ``name``
    for the program's text and ``rule(params, in_avals, out_avals) -> fn(*arrays)`` as ``common.RULES``'s."""

    multiple_results = False

    def __init__(self, name, rule):
        self.name, self.rule = name, rule

    def __repr__(self):
        return f"Fused({self.name})"


def _rms_norm_rule(params, in_avals, out_avals):
    return expression("mx.fast.rms_norm({0}, {1}, {eps})", 2, eps=params["eps"])


RMS_NORM = Fused("rms_norm", _rms_norm_rule)


def _made_by(producer, a, primitive):
    """The equation of ``primitive`` that makes ``a`` (a variable), else ``None``."""
    e = producer.get(a) if isinstance(a, Var) else None
    return e if e is not None and e.primitive is primitive else None


def _literal(a):
    return float(a.val) if isinstance(a, Literal) else None


def _inverse_rms(producer, b, x):
    """``eps`` where ``b`` is ``broadcast(sqrt(reshape(sum(x ** 2, last axis) / D) + eps))`` to ``x``'s shape
    (``fa.nn.RMSNorm``'s denominator), else ``None``."""
    n = x.aval.ndim
    bq = _made_by(producer, b, P.broadcast_in_dim)
    q = bq and _made_by(producer, bq.inputs[0], P.sqrt)
    add = q and _made_by(producer, q.inputs[0], P.add)
    if not add:
        return None
    r, eps = add.inputs
    if _literal(eps) is None:
        r, eps = eps, r
    keep = _made_by(producer, r, P.reshape)
    mean = keep and _made_by(producer, keep.inputs[0], P.div)
    total = mean and _made_by(producer, mean.inputs[0], P.reduce_sum)
    square = total and _made_by(producer, total.inputs[0], P.integer_pow)
    if not square or _literal(eps) is None or square.inputs[0] is not x or square.params["y"] != 2:
        return None
    if tuple(total.params["axes"]) != (n - 1,) or _literal(mean.inputs[1]) != x.aval.shape[-1]:
        return None
    if tuple(keep.outputs[0].aval.shape) != tuple(x.aval.shape[:-1]) + (1,):
        return None
    return _literal(eps)


def _rms_norm(producer, e):
    """The fused equation of ``e = mul(x / rms(x), broadcast(w))`` (float32, over the last axis), else ``None``."""
    if e.primitive is not P.mul or e.outputs[0].aval.dtype != dtypes.float32:
        return None
    for y, wb in (e.inputs, e.inputs[::-1]):
        quotient = _made_by(producer, y, P.div)
        bw = _made_by(producer, wb, P.broadcast_in_dim)
        if not quotient or not bw:
            continue
        x, b = quotient.inputs
        w = bw.inputs[0]
        if not isinstance(x, Var) or not isinstance(w, Var) or x.aval.ndim == 0 or x.aval.size == 0:
            continue
        if x.aval.dtype != dtypes.float32 or w.aval.dtype != dtypes.float32 or \
                tuple(w.aval.shape) != (x.aval.shape[-1],) or tuple(bw.params["broadcast_dimensions"]) != \
                (x.aval.ndim - 1,) or tuple(e.outputs[0].aval.shape) != tuple(x.aval.shape):
            continue
        eps = _inverse_rms(producer, b, x)
        if eps is not None:
            return Eqn(RMS_NORM, (x, w), {"eps": eps}, e.outputs)
    return None


def _rope_rule(params, in_avals, out_avals):
    dims, scale = params["dims"], params["scale"]
    # (MLX's freqs are periods: it takes their reciprocals, RoPE's own inverse frequencies to a rounding)
    return lambda x, inv, off: mx.fast.rope(x, dims, traditional=False, base=None, scale=scale, offset=off,
                                            freqs=mx.reciprocal(inv))


ROPE = Fused("rope", _rope_rule)


def _factor(producer, a, known):
    """``b`` where ``a = mul(known, b)`` (or ``mul(b, known)``), else ``None``; ``known``: a variable, or a
    predicate (``_same``)."""
    e = _made_by(producer, a, P.mul)
    if e is None:
        return None
    is_known = known if callable(known) else (lambda v: v is known)
    if is_known(e.inputs[0]):
        return e.inputs[1]
    return e.inputs[0] if is_known(e.inputs[1]) else None


def _same(producer, a, b=None):
    """Whether ``a`` and ``b`` are one value: the same variable, or broadcasts of one variable with the same
    parameters (a program that ``cse`` has not merged); with ``b`` left out, that test as a predicate of ``b``."""
    if b is None:
        return lambda v: _same(producer, a, v)
    if a is b:
        return True
    ea, eb = _made_by(producer, a, P.broadcast_in_dim), _made_by(producer, b, P.broadcast_in_dim)
    return bool(ea and eb and ea.inputs[0] is eb.inputs[0] and ea.params == eb.params)


def _positions(producer, a, length):
    """``(offset, scale)`` where ``a = (arange(length) + offset) * scale`` as ``fa.nn.RoPE`` traces it, ``offset``
    an int32 scalar variable (a cache's position; a Python number is a float32 constant, whose value a lowering
    does not see, and MLX takes integer offsets only), else ``None``."""
    scaled = _made_by(producer, a, P.mul)
    shifted = scaled and _made_by(producer, scaled.inputs[0], P.add)
    if not shifted or _literal(scaled.inputs[1]) is None:
        return None
    for base, off in (shifted.inputs, shifted.inputs[::-1]):
        if not _is_arange(producer, base, length):
            continue
        cast = _made_by(producer, off, P.convert_element_type)
        if cast is not None and isinstance(cast.inputs[0], Var) and cast.inputs[0].aval.dtype == dtypes.int32 and \
                cast.inputs[0].aval.ndim == 0:
            return cast.inputs[0], _literal(scaled.inputs[1])
    return None


def _is_arange(producer, a, length):
    """Whether ``a`` is ``iota(length)`` (float32), times 1.0 and plus 0.0 as ``fnp.arange`` may trace it."""
    plus = _made_by(producer, a, P.add)
    if plus is not None and _literal(plus.inputs[1]) == 0.0:
        a = plus.inputs[0]
    times = _made_by(producer, a, P.mul)
    if times is not None and _literal(times.inputs[1]) == 1.0:
        a = times.inputs[0]
    iota = _made_by(producer, a, P.iota)
    return iota is not None and tuple(iota.params["shape"]) == (length,) and iota.params["dtype"] == dtypes.float32


def _unbroadcast(producer, a):
    """The value ``a`` broadcasts (``broadcast_in_dim``), or ``a`` itself (a broadcast to its own shape is not
    traced)."""
    b = _made_by(producer, a, P.broadcast_in_dim)
    return b.inputs[0] if b is not None else a


def _angles(producer, theta, length, half):
    """``(inv, offset, scale)`` where ``theta (length, half)`` is ``positions[:, None] * inv[None, :]``
    (``_positions``; ``inv`` a float32 ``(half,)`` variable), else ``None``."""
    e = _made_by(producer, theta, P.mul)
    if e is None or tuple(theta.aval.shape) != (length, half):
        return None
    col, row = (_made_by(producer, _unbroadcast(producer, a), P.reshape) for a in e.inputs)
    if not col or not row or tuple(col.outputs[0].aval.shape) != (length, 1) or \
            tuple(row.outputs[0].aval.shape) != (1, half):
        return None
    inv = row.inputs[0]
    found = _positions(producer, col.inputs[0], length)
    if found is None or not isinstance(inv, Var) or inv.aval.dtype != dtypes.float32 or \
            tuple(inv.aval.shape) != (half,):
        return None
    return (inv,) + found


def _halves(producer, e):
    """``(x, cos, sin)`` where ``e = concatenate(x1 * cos - x2 * sin, x1 * sin + x2 * cos)`` along the last axis, with
    ``x1 = x[..., :D/2]``, ``x2 = x[..., D/2:]`` (``x``'s last axis ``D``), else ``None``."""
    if e.primitive is not P.concatenate or len(e.inputs) != 2 or e.params["dimension"] != e.outputs[0].aval.ndim - 1:
        return None
    lo, hi = _made_by(producer, e.inputs[0], P.sub), _made_by(producer, e.inputs[1], P.add)
    first = lo and hi and _made_by(producer, lo.inputs[0], P.mul)
    if not first:
        return None
    x1, c = first.inputs
    s = _factor(producer, hi.inputs[0], x1)
    x2 = None if s is None else _factor(producer, lo.inputs[1], _same(producer, s))
    if x2 is None or not _same(producer, _factor(producer, hi.inputs[1], x2), c):
        return None
    cut1, cut2 = _made_by(producer, x1, P.slice_p), _made_by(producer, x2, P.slice_p)
    if not cut1 or not cut2 or cut1.inputs[0] is not cut2.inputs[0]:
        return None
    x = cut1.inputs[0]
    if not isinstance(x, Var) or x.aval.shape[-1] % 2:
        return None
    half = x.aval.shape[-1] // 2
    if not (_is_half(cut1, x, 0, half) and _is_half(cut2, x, half, half)):
        return None
    return x, c, s


def _is_half(cut, x, start, half):
    """Whether the slice equation ``cut`` is ``x[..., start:start + half]`` (whole along the other axes)."""
    n = x.aval.ndim
    strides = cut.params["strides"] or (1,) * n
    return tuple(cut.params["start_indices"]) == (0,) * (n - 1) + (start,) and \
        tuple(cut.params["limit_indices"]) == tuple(x.aval.shape[:-1]) + (start + half,) and \
        all(st == 1 for st in strides)


def _broadcast_of(producer, a, primitive, n):
    """The ``primitive`` equation whose ``(L, D/2)`` value ``a`` broadcasts onto the last two of ``n`` axes."""
    b = _made_by(producer, a, P.broadcast_in_dim)
    if not b or tuple(b.params["broadcast_dimensions"]) != (n - 2, n - 1):
        return None
    return _made_by(producer, b.inputs[0], primitive)


def _rope(producer, e):
    """The fused equation of ``fa.nn.RoPE`` (``traditional=False``, float32, its rotated features at least 3-D)
    ending at ``e``, else ``None``. (With features past ``dims`` the match is the rotated slice's.)"""
    found = _halves(producer, e)
    if found is None:
        return None
    x, c, s = found
    shape = tuple(x.aval.shape)
    if x.aval.dtype != dtypes.float32 or len(shape) < 3 or x.aval.size == 0 or tuple(e.outputs[0].aval.shape) != shape:
        return None
    cos, sin = _broadcast_of(producer, c, P.cos, len(shape)), _broadcast_of(producer, s, P.sin, len(shape))
    if not cos or not sin or cos.inputs[0] is not sin.inputs[0]:
        return None
    angles = _angles(producer, cos.inputs[0], shape[-2], shape[-1] // 2)
    if angles is None:
        return None
    inv, offset, scale = angles
    return Eqn(ROPE, (x, inv, offset), {"dims": shape[-1], "scale": scale}, e.outputs)


#: The platforms whose programs get ``mx.fast.rope`` for ``fa.nn.RoPE``. Not the CPU: there MLX's ``rope`` is its
#: own composite, built by a ~15 us Python call (8 per decode step of the benchmark's model: ~120 us, against
#: ~17 us for the traced equations) into more graph nodes than fnarray's (645 against 583 for the step), measured
#: no faster (``benchmarks/llm.py``'s decode, interleaved: 1.18-1.25x raw MLX without it, 1.20-1.29x with it).
ROPE_PLATFORMS = frozenset({"gpu"})


def fuse_patterns(prog: Program, platform: str = "cpu") -> Program:
    """``prog`` with each matched pattern's last equation replaced by one ``Fused`` equation over the pattern's
    inputs (run ``dce`` after it): ``fa.nn.RMSNorm`` everywhere, ``fa.nn.RoPE`` on ``ROPE_PLATFORMS``; ``prog``
    itself where nothing matches."""
    if platform in ROPE_PLATFORMS:
        return rewrite_each(prog, lambda producer, e: _rms_norm(producer, e) or _rope(producer, e))
    return rewrite_each(prog, _rms_norm)


def rewrite_each(prog: Program, rewrite) -> Program:
    """``prog`` with each equation ``e`` replaced by ``rewrite(producer, e)`` where that is not ``None``
    (``producer``: each variable's equation so far, the rewritten ones included); ``prog`` itself where nothing
    was replaced."""
    producer: dict = {}
    eqns, changed = [], False
    for e in prog.eqns:
        new = rewrite(producer, e)
        if new is not None:
            e, changed = new, True
        for o in e.outputs:
            producer[o] = e
        eqns.append(e)
    return Program(prog.constvars, prog.invars, eqns, prog.outvars) if changed else prog
