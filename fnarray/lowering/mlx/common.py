"""What every part of the mlx backend shares: the MLX import, the rule table, dtypes and transfers.

``RULES`` maps a primitive to ``factory(params, in_avals, out_avals) -> fn(*arrays)``; the rules are in
one module per primitive family (``backend.FAMILIES``), the devices and the compile policy in ``backend.py``.
A rule whose function is one expression makes it with ``expression``: ``program.Generated`` then writes that
expression into the program's source instead of a call of the function (one Python frame less per equation).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from fnarray.core import dtypes

try:
    import mlx.core as mx
except ImportError as _e:  # pragma: no cover - exercised where mlx is missing
    mx = None
    IMPORT_ERROR = f"the mlx backend needs MLX: {_e} (to fix: pip install 'mlx[cpu]' on Linux, 'mlx' on macOS)"
else:
    IMPORT_ERROR = None

RULES: dict = {}

#: The primitives whose rule makes a function that reads no dimension size, neither when it is made nor when it
#: runs (no ``x.shape``, no size-derived constant): it depends on the equation's params, dtypes and ranks alone
#: (for non-empty operands, not low-bit: programs with either are never shared), so one generated program serves
#: every program equal to its own up to its sizes (``core/size_free.py``) and ``mx.compile(shapeless=True)`` may
#: trace it once for all (``program.Generated.shape_free``). ``prim -> None`` where every function of the rule
#: qualifies, or ``check(fn) -> bool`` where only some do. Each family marks its own rules.
SHAPE_FREE: dict = {}

_BF16 = np.dtype(ml_dtypes.bfloat16)
LOW = (dtypes.float16, dtypes.bfloat16)
F32 = dtypes.float32
F32_EXACT = 2 ** 24  # ints of at most this magnitude are exact in float32 (no rounding to agree on)


def _mx_dtypes():
    return {
        dtypes.bool_: mx.bool_, dtypes.int8: mx.int8, dtypes.int16: mx.int16, dtypes.int32: mx.int32,
        dtypes.int64: mx.int64, dtypes.uint8: mx.uint8, dtypes.uint16: mx.uint16, dtypes.uint32: mx.uint32,
        dtypes.uint64: mx.uint64, dtypes.float16: mx.float16, dtypes.bfloat16: mx.bfloat16,
        dtypes.float32: mx.float32, dtypes.float64: mx.float64, dtypes.complex64: mx.complex64,
    }


_MX: dict = _mx_dtypes() if mx is not None else {}


def mx_dtype(d):
    """The MLX dtype of a NumPy dtype."""
    return _MX[np.dtype(d)]


def from_numpy(a):
    """A NumPy array (or scalar) as an ``mx.array`` of the same dtype (a copy).

    A dtype MLX cannot hold (complex128) stays a read-only NumPy array: equations on it fall back to
    numpy, which takes such buffers as they are. So does a zero-size array, which no MLX operation
    receives (the zero-size pass rewrites every program first).
    """
    a = np.asarray(a)
    if not a.dtype.isnative:  # '>f4' from a big-endian file is float32 (its aval), not a dtype MLX lacks
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype not in _MX or a.size == 0:
        # MLX 0.32 can hang on empty arrays (a reduction of one blocks in a later evaluation): an
        # empty buffer stays a NumPy array, and no MLX operation ever receives one (``zero_size``).
        a = np.array(a, copy=True)
        a.flags.writeable = False
        return a
    if a.dtype == _BF16:  # NumPy's buffer protocol cannot describe bfloat16: move the bits
        return mx.view(mx.array(a.view(np.uint16)), mx.bfloat16)
    if a.ndim and not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return mx.array(a, dtype=mx_dtype(a.dtype))


def to_numpy(buf):
    """An ``mx.array`` as a NumPy array: a view of MLX's buffer (evaluating it first)."""
    if isinstance(buf, np.ndarray):
        return buf
    if buf.dtype == mx.bfloat16:
        return np.asarray(mx.view(buf, mx.uint16)).view(_BF16)
    return np.asarray(buf)


def constant(value, d):
    """A rank-0 MLX constant of dtype ``d``."""
    return from_numpy(np.asarray(value, dtype=d))


def rule(prim, shape_free=False):
    """Register ``factory(params, in_avals, out_avals) -> fn(*arrays)`` for ``prim`` (``shape_free``: mark it in
    ``SHAPE_FREE``, ``True`` for every function it makes or a ``check(fn)``)."""
    def deco(fn):
        RULES[prim] = fn
        if shape_free:
            SHAPE_FREE[prim] = None if shape_free is True else shape_free
        return fn
    return deco


def upcast_low(fn):
    """Compute float16/bfloat16 in float32 and round back (the reference does so)."""
    def factory(params, in_avals, out_avals):
        d = in_avals[0].dtype
        if d in LOW:
            md = mx_dtype(d)
            return lambda *xs: fn(*[x.astype(mx.float32) for x in xs]).astype(md)
        return fn
    return factory


def mx_op(name, upcast):
    """The factory of an MLX function used as it is (resolved when a program is lowered, not per call)."""
    def factory(params, in_avals, out_avals):
        fn = getattr(mx, name)
        return upcast_low(fn)(params, in_avals, out_avals) if upcast else fn
    return factory


def expression(template: str, nargs: int, **consts):
    """A rule's function ``fn(a0, ..., a{nargs-1})`` that is the one Python expression ``template`` (``{0}``,
    ``{1}``, ...: the arguments; ``{name}``: the constant ``consts[name]``, fixed when the program is lowered;
    ``consts`` holds only those it names).

    ``fn.inline`` is ``(template, consts)``: ``program.Generated`` writes the expression into the generated source
    (the constants as names of its globals), so a program runs exactly the MLX calls ``fn`` makes
    without a call of ``fn``. The function is compiled once per template (``_expression_maker``) and bound to
    the constants. ``template`` may use ``mx`` (``mlx.core``) and builtins only.
    """
    fn = _expression_maker(template, nargs, tuple(consts))(mx, *consts.values())
    fn.inline = (template, consts)
    return fn


@functools.lru_cache(maxsize=None)
def _expression_maker(template, nargs, names):
    """``make(mx, *constants) -> fn(*arrays)`` of ``expression``'s ``template`` (compiled once per template)."""
    args = [f"a{i}" for i in range(nargs)]
    body = template.format(*args, **{n: n for n in names})
    src = f"def make(mx, {', '.join(names)}):\n    return lambda {', '.join(args)}: {body}\n"
    glb: dict = {}
    exec(compile(src, "<fnarray mlx rule>", "exec"), glb)  # noqa: S102 (our own template)
    return glb["make"]
