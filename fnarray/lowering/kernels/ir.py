"""The loop-level kernel IR that the kernel backends' renderers print.

A ``Kernel`` is a list of parameters (global buffers and scalar arguments), a
body of statements and an optional fixed work-group size. Statements are few:
immutable locals (``Let``), mutable locals (``Decl``/``Assign``), stores to
global, work-group (``local``) or private arrays, counted ``For`` loops,
``If``, ``Barrier`` and array declarations. Expressions are immutable and
compare structurally, so builders deduplicate them with a dict.

The op set is closed (``OPS``); every renderer prints each op, or rewrites it
into others before printing (WGSL has no ``erf``; a renderer without 64-bit
types is never given them: the scheduler only uses the dtypes of the target's
``Capabilities``). There is no pointer arithmetic and no ``goto``: buffers are
indexed with int32 expressions and control flow is structured.

Complex values (``complex64``/``complex128``) are two-component vectors; only
``cmake``, ``creal`` and ``cimag`` touch them, everything else is expanded into
real arithmetic by the rules that build the kernel.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fnarray.core import families
from fnarray.core import primitives as _primitives  # noqa: F401  (the families' members)

__all__ = ["without", "Expr", "Const", "Sym", "Special", "Load", "Lane", "Broadcast", "vector_dtype", "Op", "Cast", "Bitcast",
           "Select", "Let", "Decl",
           "Assign", "Store", "Atomic", "ATOMIC_OPS", "ATOMIC_DTYPES", "For", "If", "Barrier", "ArrayDecl",
           "Comment", "BufferParam", "ScalarParam",
           "Kernel", "OPS", "const", "INT32", "BOOL", "UINT32", "walk_exprs", "map_exprs", "map_stmts", "children",
           "rebuild", "atomic_buffers", "walk_stmts"]

INT32 = np.dtype(np.int32)
UINT32 = np.dtype(np.uint32)
BOOL = np.dtype(np.bool_)

# The closed op set: name -> (arity, kind). "infix"/"prefix" ops are C operators with C semantics on the
# operand type (integer division truncates; shifts need 0 <= amount < width: the rules guard them);
# "func" ops are math functions of OpenCL C's names; comparisons yield bool.
OPS: dict[str, tuple[int, str]] = {}
for _n in ("add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "land", "lor"):
    OPS[_n] = (2, "infix")
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    OPS[_n] = (2, "compare")
for _n in ("neg", "not", "lnot"):
    OPS[_n] = (1, "prefix")
for _n in ("exp", "exp2", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
           "cosh", "asinh", "acosh", "atanh", "sqrt", "rsqrt", "cbrt", "erf", "lgamma", "floor", "ceil", "rint",
           "trunc", "fabs", "popcount", "isnan", "isinf", "isfinite"):
    OPS[_n] = (1, "func")
for _n in ("pow", "atan2", "nextafter", "hypot", "fmod", "copysign", "min", "max"):
    OPS[_n] = (2, "func")
# The functions of C's math library that a unary primitive is by its name (``Primitive.library``: log10...).
families.on_family("unary", lambda p: p.library and OPS.setdefault(p.name, (1, "func")))
# Four values of one dtype as a vector of ``vector_dtype`` (a store of four elements at once; WGSL ``vec4(...)``).
OPS["vector4"] = (4, "func")
OPS["cmake"] = (2, "complex")
OPS["creal"] = (1, "complex")
OPS["cimag"] = (1, "complex")


class Expr:
    """Base of expressions; every expression has a ``dtype``.

    An expression's hash is computed once, from its fields (its operands' hashes are theirs, computed once), and
    kept in the slot ``_hash``: the renderers' memos are keyed by expressions, and a structural hash of each
    would hash the whole sub-expression at every lookup. The slot is no field: equality, ``repr`` and pickles (the
    persistent compile cache's plans; a str's hash differs between processes) do not see it, and an unpickled
    expression computes its hash again. Threads racing on a first hash store the same value."""

    __slots__ = ("_hash",)

    def __hash__(self):
        h = _getattr(self, "_hash", None)
        if h is None:
            h = self._field_hash()
            object.__setattr__(self, "_hash", h)
        return h


_getattr = getattr


def _frozen(cls):
    cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
    if issubclass(cls, Expr):   # the dataclass's hash of the fields, computed once (``Expr.__hash__``)
        cls._field_hash, cls.__hash__ = cls.__hash__, Expr.__hash__
    return cls


@_frozen
class Const(Expr):
    """A scalar constant, kept as its bit pattern so that -0.0 and NaNs stay distinct keys."""

    bits: bytes
    dtype: np.dtype

    @property
    def value(self):
        return np.frombuffer(self.bits, self.dtype)[0]


def const(value, dtype) -> Const:
    """``Const`` of a Python or NumPy scalar converted to ``dtype``."""
    dtype = np.dtype(dtype)
    return Const(np.asarray(value, dtype).tobytes(), dtype)


@_frozen
class Sym(Expr):
    """A named value: a scalar kernel argument, a loop counter or a local."""

    name: str
    dtype: np.dtype


@_frozen
class Special(Expr):
    """A work-item builtin: ``global_id``, ``local_id``, ``group_id``, ``global_size`` of ``dim``; ``lane``: the
    work item's index in its subgroup (WGSL ``subgroup_invocation_id``; only where ``Broadcast`` is used)."""

    kind: str
    dim: int
    dtype: np.dtype = INT32


@_frozen
class Load(Expr):
    """Element ``index`` of a ``global``, ``local`` or ``private`` array."""

    space: str
    name: str
    index: Expr
    dtype: np.dtype


def vector_dtype(dtype, lanes: int = 4) -> np.dtype:
    """The dtype of a ``lanes``-wide vector of ``dtype`` (a NumPy subarray dtype). A buffer parameter of it is
    bound as vectors (WGSL ``array<vec4<f32>>``), a ``Load`` of it yields one vector (element ``i`` of the
    buffer is lane ``i % lanes`` of vector ``i // lanes``), and ``Lane`` takes one element of that vector. Only
    renderers whose ``types`` name the vector dtype print it (WGSL); the kernel groups use it where the target
    asks (the scheduler option ``dot_vec4``)."""
    return np.dtype((np.dtype(dtype), (lanes,)))


@_frozen
class Lane(Expr):
    """Element ``lane`` (a Python int) of the vector value ``x`` (a ``Load`` of a ``vector_dtype`` buffer);
    ``dtype``: the element's."""

    x: Expr
    lane: int
    dtype: np.dtype


@_frozen
class Broadcast(Expr):
    """The value ``x`` (a scalar or a ``vector_dtype`` value) of the work item at index ``lane`` (a Python int)
    of the subgroup, in every work item of it (WGSL ``subgroupBroadcast``). Only renderers that print it (WGSL)
    are given one, in control flow that every work item of the subgroup takes (the blocked product's subgroup
    form, ``groups/dot.py``, where the scheduler option ``dot_subgroup`` asks)."""

    x: Expr
    lane: int
    dtype: np.dtype


@_frozen
class Op(Expr):
    op: str
    args: tuple
    dtype: np.dtype


@_frozen
class Cast(Expr):
    """A value conversion (C cast semantics: float -> int truncates; the rules guard the range)."""

    x: Expr
    dtype: np.dtype


@_frozen
class Bitcast(Expr):
    """The same bits read as another type of the same width."""

    x: Expr
    dtype: np.dtype


@_frozen
class Select(Expr):
    """``a`` where ``cond`` else ``b`` (both evaluated)."""

    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self):
        return self.a.dtype


# ------------------------------------------------------------------------------------------ statements


@_frozen
class Let:
    """An immutable local ``name = value``."""

    name: str
    value: Expr


@_frozen
class Decl:
    """A mutable local of ``dtype``, initialised to ``value``."""

    name: str
    dtype: np.dtype
    value: Expr


@_frozen
class Assign:
    name: str
    value: Expr


@_frozen
class Store:
    space: str
    name: str
    index: Expr
    value: Expr


#: The read-modify-write operations of ``Atomic`` and the element types they take (32-bit, as OpenCL C's
#: core atomics and WGSL's ``atomic<T>``; float32 through a compare-and-swap loop on the bits).
ATOMIC_OPS = ("add", "max", "min")
ATOMIC_DTYPES = (np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.float32))


@_frozen
class Atomic:
    """An atomic read-modify-write of element ``index`` of the global buffer ``name``: ``name[index] =
    op(name[index], value)`` for ``op`` in ``ATOMIC_OPS``, the element's old value bound to the immutable local
    ``result`` (``None``: not kept). Integer ``max``/``min`` compare as the buffer's dtype; float32 ``max``/``min``
    propagate NaN (as ``numpy.maximum``). A buffer that a kernel updates atomically is one WGSL declares of
    atomic elements: every other access of it in that kernel is an atomic load or store there."""

    op: str
    name: str
    index: Expr
    value: Expr
    result: str | None = None


@_frozen
class For:
    """``for (var = start; var < stop; var += step) body`` over int32."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple


@_frozen
class If:
    cond: Expr
    then: tuple
    orelse: tuple = ()


@_frozen
class Barrier:
    """A work-group barrier over local memory, or (``space="global"``) over global and local memory:
    the work-group's stores to its buffers are visible to the whole group after it."""

    space: str = "local"


@_frozen
class ArrayDecl:
    """An array in ``local`` (work-group) or ``private`` memory, of constant ``size``."""

    space: str
    name: str
    dtype: np.dtype
    size: int


@_frozen
class Comment:
    text: str


@_frozen
class BufferParam:
    """A global buffer argument; ``writes`` says whether the kernel stores to it. ``uniform``: 0 for a storage
    buffer, else the length (in ``dtype`` elements) of a read-only array bound as a uniform buffer (WGSL's
    ``var<uniform>``, a fixed size; only where a scheduler option asks for it: ``groups/dot.py``'s
    ``dot_uniform``). ``offset``: for a uniform array, the byte offset in the buffer where it starts (a window of
    a larger buffer, ``groups/dot.py``'s ``dot_uniform_windows``; a multiple of the target's
    ``minUniformBufferOffsetAlignment``), -1 for the whole buffer."""

    name: str
    dtype: np.dtype
    writes: bool
    uniform: int = 0
    offset: int = -1


@_frozen
class ScalarParam:
    name: str
    dtype: np.dtype


@_frozen
class Kernel:
    """One kernel: ``name``, ``params`` (in launch order), ``body``; ``local_size`` fixed or ``None``;
    ``math``: how a renderer spells float32 transcendentals, ``"fnarray"`` (its own call-free polynomials,
    where the renderer has them: ``opencl_c._HELPERS``) or ``"builtin"`` (the driver's library functions),
    a tunable choice (``kernels/tuning.py``, ``schedule.KERNEL_TUNABLES``)."""

    name: str
    params: tuple
    body: tuple
    local_size: Any = None
    math: str = "fnarray"


# ------------------------------------------------------------------------------------------ traversal


def children(e):
    if isinstance(e, Op):
        return e.args
    if isinstance(e, (Cast, Bitcast, Lane, Broadcast)):
        return (e.x,)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    if isinstance(e, Load):
        return (e.index,)
    return ()


def walk_exprs(stmts):
    """Every expression (and sub-expression) of the statements, depth first, each object once: a sub-expression
    shared by several is met at its first place only (every caller asks which expressions occur; a tree walk
    would go through a shared one at each place)."""
    seen: set = set()
    stack: list = []
    for e in _stmt_exprs(stmts):
        stack.append(e)
        while stack:
            e = stack.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            yield e
            kids = children(e)
            if kids:
                stack.extend(reversed(kids))


def _stmt_exprs(stmts):
    """The statements' own expressions (not their sub-expressions), in program order, at every depth."""
    for s in stmts:
        if isinstance(s, (Let, Assign, Decl)):
            yield s.value
        elif isinstance(s, (Store, Atomic)):
            yield s.index
            yield s.value
        elif isinstance(s, For):
            yield s.start
            yield s.stop
            yield s.step
            yield from _stmt_exprs(s.body)
        elif isinstance(s, If):
            yield s.cond
            yield from _stmt_exprs(s.then)
            yield from _stmt_exprs(s.orelse)


def walk_stmts(stmts):
    """Every statement, at every depth of ``For`` bodies and ``If`` branches, in program order (each before the
    statements inside it)."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.orelse)


def atomic_buffers(stmts) -> dict:
    """The buffers the statements update atomically: name -> the dtype of the values (``Atomic``)."""
    return {s.name: s.value.dtype for s in walk_stmts(stmts) if isinstance(s, Atomic)}


def rebuild(e, kids):
    """``e`` with its sub-expressions replaced by ``kids`` (in ``children(e)``'s order)."""
    if isinstance(e, Op):
        return Op(e.op, tuple(kids), e.dtype)
    if isinstance(e, Cast):
        return Cast(kids[0], e.dtype)
    if isinstance(e, Bitcast):
        return Bitcast(kids[0], e.dtype)
    if isinstance(e, Select):
        return Select(*kids)
    if isinstance(e, Load):
        return Load(e.space, e.name, kids[0], e.dtype)
    if isinstance(e, Lane):
        return Lane(kids[0], e.lane, e.dtype)
    if isinstance(e, Broadcast):
        return Broadcast(kids[0], e.lane, e.dtype)
    return e


def map_exprs(kernel: Kernel, fn) -> Kernel:
    """The kernel with every expression rewritten bottom-up by ``fn(expr) -> expr`` (a renderer's
    rewrite pass: what a target cannot express is replaced before printing)."""
    memo: dict = {}

    def rw(e):
        r = memo.get(e)
        if r is None:
            kids = children(e)
            r = fn(rebuild(e, [rw(c) for c in kids]) if kids else e)
            memo[e] = r
        return r

    return dataclasses.replace(kernel, body=map_stmts(kernel.body, rw))


def map_stmts(stmts, rw) -> tuple:
    """``stmts`` with every statement's expressions (at every depth) replaced by ``rw(expr)``, in program order
    (a statement's index before its value, a loop's bounds before its body)."""
    out = []
    for s in stmts:
        if isinstance(s, Let):
            out.append(Let(s.name, rw(s.value)))
        elif isinstance(s, Decl):
            out.append(Decl(s.name, s.dtype, rw(s.value)))
        elif isinstance(s, Assign):
            out.append(Assign(s.name, rw(s.value)))
        elif isinstance(s, Store):
            out.append(Store(s.space, s.name, rw(s.index), rw(s.value)))
        elif isinstance(s, Atomic):
            out.append(dataclasses.replace(s, index=rw(s.index), value=rw(s.value)))
        elif isinstance(s, For):
            out.append(For(s.var, rw(s.start), rw(s.stop), rw(s.step), map_stmts(s.body, rw)))
        elif isinstance(s, If):
            out.append(If(rw(s.cond), map_stmts(s.then, rw), map_stmts(s.orelse, rw)))
        else:
            out.append(s)
    return tuple(out)


def without(stmts, drop) -> tuple:
    """``stmts`` with every statement for which ``drop(statement)`` is true removed, at every depth of ``For``
    bodies and ``If`` branches (``drop`` sees each statement once, outermost first)."""
    out = []
    for s in stmts:
        if drop(s):
            continue
        if isinstance(s, For):
            s = dataclasses.replace(s, body=without(s.body, drop))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=without(s.then, drop), orelse=without(s.orelse, drop))
        out.append(s)
    return tuple(out)
