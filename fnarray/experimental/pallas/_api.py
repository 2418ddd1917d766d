"""Pallas's user API over the ``pallas_call`` primitive (``fnarray.core.pallas``): tracing a kernel body.

A kernel is traced once per call signature into a ``Program`` whose inputs are the grid indices and one value
per ref. A ``Ref`` is a Python object holding its ref's current contents (a tracer); ``ref[idx]`` binds
``pallas_load`` on it, ``ref[idx] = v`` binds ``pallas_store`` and makes the result the ref's new contents.
``fori_loop`` and ``when`` inside a kernel trace their bodies with every writable ref as part of the carry
(``pallas_loop``, ``pallas_when``), so the stores they make are seen after them.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import DTypeError, ShapeError, check_callable
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.pallas import (ATOMIC_OPS, Block, KernelBody, pallas_atomic_p, pallas_call_p, pallas_load_p,
                                 pallas_loop_p, pallas_store_p, pallas_when_p)
from fnarray.core.shaped import ShapeDtypeStruct, ShapedArray
from fnarray.core.tracing import Tracer
from fnarray.transforms import control_flow

__all__ = ["BlockSpec", "GridSpec", "Local", "VMEM", "SMEM", "ANY", "ShapeDtypeStruct", "Slice", "ds", "dslice",
           "pallas_call", "program_id", "num_programs", "load", "store", "when", "atomic_add", "atomic_max",
           "atomic_min", "multiple_of", "max_contiguous", "cdiv", "dot"]

_INT32 = np.dtype(np.int32)
_SUPPORTED_INDEX = ("integers (Python or traced int scalars), slices with static bounds and step 1, pl.ds(start, "
                    "size) with a static size, and ...")


# ------------------------------------------------------------------------------------------ small types


@dataclasses.dataclass(frozen=True)
class Local:
    """A scratch ref in work-group (OpenCL ``__local``, WGSL ``var<workgroup>``) memory, private to one
    program instance: ``pl.Local((8, 128), fnp.float32)`` in ``scratch_shapes``. ``VMEM``/``SMEM`` (Pallas
    TPU's names) are the same thing here."""

    shape: tuple
    dtype: object

    def __post_init__(self):
        shape = (self.shape,) if isinstance(self.shape, (int, np.integer)) else tuple(self.shape)
        if any(not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0 for n in shape):
            raise ShapeError(f"pl.Local (pl.VMEM): the shape must be non-negative ints, got {self.shape!r}; e.g. "
                             f"pl.VMEM((8, 128), fnp.float32)")   # int(8.7) would have made 8 rows
        object.__setattr__(self, "shape", tuple(int(n) for n in shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))


VMEM = SMEM = Local
#: ``memory_space=pl.ANY`` (accepted and ignored: every operand is in device memory).
ANY = "any"


@dataclasses.dataclass(frozen=True)
class Slice:
    """``pl.ds(start, size)``: ``size`` elements (static) from ``start`` (an int or a traced int scalar)."""

    start: object
    size: int
    stride: int = 1

    def __post_init__(self):
        if not isinstance(self.size, (int, np.integer)) or isinstance(self.size, bool) or self.size < 0:
            raise TypeError(f"pl.ds needs a static non-negative int size, got {self.size!r}")
        if self.stride != 1:
            raise NotImplementedError(f"pl.ds(stride={self.stride}) is not supported; slices have stride 1")


def ds(start, size, stride=1):
    """``Slice(start, size)``: ``size`` consecutive elements from ``start`` (Pallas's ``pl.ds``/``pl.dslice``).

    Args:
      start: int or traced integer scalar. size: a static int. stride: only 1.

    Raises:
      ``TypeError`` for a traced size; ``NotImplementedError`` for a stride other than 1.
    """
    return Slice(start, int(size) if isinstance(size, (int, np.integer)) else size, stride)


dslice = ds


class BlockSpec:
    """Which block of an operand or result each program instance sees (Pallas's ``pl.BlockSpec``).

    Args:
      block_shape: one int per array axis (``None`` squeezes an axis of block size 1 away in the ref), or
        ``None`` for the whole array.
      index_map: ``(*grid_indices) -> block indices`` (one per axis); block ``b`` of an axis of block size ``n``
        starts at element ``b * n``. ``None``: block 0 of every axis.
      memory_space: accepted for compatibility (``pl.ANY``...); ignored.

    Pallas's older order ``BlockSpec(index_map, block_shape)`` is accepted too.
    """

    def __init__(self, block_shape=None, index_map=None, *, memory_space=None, pipeline_mode=None):
        if callable(block_shape) and not callable(index_map):
            block_shape, index_map = index_map, block_shape
        self.block_shape = None if block_shape is None else tuple(block_shape)
        self.index_map = index_map
        self.memory_space = memory_space

    def __repr__(self):
        return f"BlockSpec({self.block_shape}, {getattr(self.index_map, '__name__', self.index_map)})"


@dataclasses.dataclass
class GridSpec:
    """``grid``, ``in_specs``, ``out_specs`` and ``scratch_shapes`` in one object (Pallas's ``pl.GridSpec``)."""

    grid: tuple = ()
    in_specs: object = None
    out_specs: object = None
    scratch_shapes: tuple = ()


def cdiv(a, b):
    """``ceil(a / b)`` of ints (Pallas's ``pl.cdiv``)."""
    return -(-a // b)


def multiple_of(x, n):
    """``x``, promised to be a multiple of ``n`` (a hint; fnarray's kernels do not use it yet)."""
    return x


def max_contiguous(x, n):
    """``x`` (a Triton hint; ignored)."""
    return x


def dot(a, b, trans_a=False, trans_b=False, allow_tf32=None, precision=None):
    """``a @ b`` of 2-d blocks with optional transposes (Pallas's ``pl.dot``)."""
    import fnarray.numpy as fnp
    a = fnp.swapaxes(a, -1, -2) if trans_a else a
    b = fnp.swapaxes(b, -1, -2) if trans_b else b
    return fnp.matmul(a, b)


# ------------------------------------------------------------------------------------------ the kernel context


class _Kernel:
    """The kernel body being traced: its grid indices and refs."""

    def __init__(self, grid, pids, name):
        self.grid, self.pids, self.name = grid, pids, name
        self.refs: list = []


_state = threading.local()


def _stack():
    s = getattr(_state, "stack", None)
    if s is None:
        s = _state.stack = []
    return s


def _current(what):
    s = _stack()
    if not s:
        raise RuntimeError(f"{what} is only available inside a kernel body traced by pl.pallas_call")
    return s[-1]


def program_id(axis):
    """The index of this program instance along grid axis ``axis`` (an int32 scalar; Pallas's
    ``pl.program_id``). Raises ``ValueError`` for an axis the grid does not have."""
    k = _current("pl.program_id")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"pl.program_id(axis): the axis must be a static int naming a grid axis (0 to "
                        f"{len(k.grid) - 1} for the grid {k.grid}), got {axis!r}")
    if not -len(k.grid) <= axis < len(k.grid):
        raise ValueError(f"pl.program_id({axis}): the grid {k.grid} has {len(k.grid)} axes")
    return k.pids[axis]


def num_programs(axis):
    """The grid's size along ``axis`` (a static int here; Pallas's ``pl.num_programs``)."""
    k = _current("pl.num_programs")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"pl.num_programs(axis): the axis must be a static int naming a grid axis (0 to "
                        f"{len(k.grid) - 1} for the grid {k.grid}), got {axis!r}")
    if not -len(k.grid) <= axis < len(k.grid):
        raise ValueError(f"pl.num_programs({axis}): the grid {k.grid} has {len(k.grid)} axes")
    return k.grid[axis]


class Ref:
    """A kernel's view of one block: ``ref[idx]`` loads, ``ref[idx] = v`` stores (``shape``, ``dtype``)."""

    def __init__(self, kernel, state, kind, index):
        self.kernel, self.state, self.kind, self.index = kernel, state, kind, index
        self.unmasked_reads = False

    @property
    def shape(self):
        return tuple(get_aval(self.state).shape)

    @property
    def dtype(self):
        return get_aval(self.state).dtype

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"Ref({self.kind} {self.index}: {self.dtype.name}{list(self.shape)})"

    def __getitem__(self, idx):
        return load(self, idx)

    def __setitem__(self, idx, value):
        store(self, idx, value)

    def __jax_array__(self):
        return load(self, ...)

    def __array__(self, *a, **k):
        raise TypeError(f"{self!r} is a kernel ref: read it with ref[...] first")


def _int32(x, where):
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{where}: a boolean index")
    if isinstance(x, (int, np.integer)):
        return np.int32(x)
    a = get_aval(x)
    if a.shape != () or not dtypes.is_int(a.dtype):
        raise TypeError(f"{where}: an index of {a.str_short()} is not supported; indices are {_SUPPORTED_INDEX}")
    return x if a.dtype == _INT32 else lax.convert_element_type(x, _INT32)


def _indexer(ref, idx, where):
    """``(indexer, starts)`` of ``ref[idx]`` (``fnarray.core.pallas``'s form)."""
    shape = ref.shape
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(i is Ellipsis for i in idx):
        k = idx.index(Ellipsis)
        if Ellipsis in idx[k + 1:]:
            raise IndexError(f"{where}: more than one ... in an index")
        idx = idx[:k] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[k + 1:]
    if len(idx) > len(shape):
        raise IndexError(f"{where}: {len(idx)} indices for a ref of shape {shape}")
    idx = idx + (slice(None),) * (len(shape) - len(idx))
    indexer, starts = [], []
    for d, (i, n) in enumerate(zip(idx, shape, strict=True)):
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise NotImplementedError(f"{where}: a slice with step {i.step} is not supported; indices are "
                                          f"{_SUPPORTED_INDEX}")
            lo, hi = i.start, i.stop
            if any(v is not None and not isinstance(v, (int, np.integer)) for v in (lo, hi)):
                raise TypeError(f"{where}: slice bounds must be static ints (use pl.ds(start, size) for a "
                                f"traced start), got {i}")
            lo, hi, _ = slice(lo, hi).indices(n)
            indexer.append(("s", max(hi - lo, 0)))
            starts.append(np.int32(lo))
        elif isinstance(i, Slice):
            indexer.append(("s", int(i.size)))
            starts.append(_int32(i.start, where))
        elif i is None:
            raise IndexError(f"{where}: None (a new axis) in a ref index; index the ref, then reshape")
        else:
            if not isinstance(i, (int, np.integer, Tracer)) and np.ndim(i) != 0:
                raise NotImplementedError(f"{where}: an index array of shape {np.shape(i)} on axis {d}; indices "
                                          f"are {_SUPPORTED_INDEX} (gather with pl.ds and masks)")
            if isinstance(i, (int, np.integer)) and not isinstance(i, bool) and not -n <= i < n:
                raise IndexError(f"{where}: index {i} is out of bounds for axis {d} of size {n}")
            if isinstance(i, (int, np.integer)) and i < 0:
                i = int(i) + n
            indexer.append(("i",))
            starts.append(_int32(i, where))
    return tuple(indexer), starts


def _check_static_range(ref, indexer, starts, what, verb, fix):
    """``IndexError`` for an unmasked ``pl.ds`` with a static start that leaves the ref: the interpreter raised
    only when it ran, and opencl/webgpu read or wrote memory past the block (undefined values, or the wrong
    rows of the array)."""
    for d, (e, start, n) in enumerate(zip(indexer, starts, ref.shape, strict=True)):
        if e[0] == "s" and isinstance(start, (int, np.integer)) and not 0 <= int(start) <= n - e[1]:
            lo = int(start)
            raise IndexError(f"{what} a ref of shape {ref.shape} at [{lo}:{lo + e[1]}] on axis {d} {verb} "
                             f"elements outside the ref (axis size {n}) without a mask; {fix}, or keep "
                             f"pl.ds(start, size) within 0..{n}")


def _as_block(value, shape, dtype, where, what):
    """``value`` (array, tracer or scalar) broadcast to ``shape``, in ``dtype`` where it is weakly typed."""
    import fnarray.numpy as fnp
    if isinstance(value, (int, float, bool, np.generic)) and not isinstance(value, complex):
        return np.asarray(value, dtype)[()]   # a literal of the body (the primitives broadcast scalars)
    weak = isinstance(value, (int, float, bool, complex)) or getattr(get_aval(value), "weak_type", False)
    v = fnp.asarray(value)
    a = get_aval(v)
    if a.dtype != dtype:
        if weak or dtype == np.bool_:
            v = lax.convert_element_type(v, dtype)
        else:
            raise DTypeError(f"{where}: {what} of dtype {a.dtype.name} for a {np.dtype(dtype).name} ref (cast it "
                             f"with .astype)")
    if a.shape != tuple(shape):
        try:
            v = fnp.broadcast_to(v, shape)
        except Exception:
            raise ShapeError(f"{where}: {what} of shape {a.shape} does not broadcast to the block {shape}") from None
    return v


def _ref(x, where):
    if not isinstance(x, Ref):
        raise TypeError(f"{where} takes a kernel ref (an argument of the kernel), got {type(x).__name__}")
    return x


def load(x_ref, idx=..., *, mask=None, other=None, cache_modifier=None, eviction_policy=None, volatile=False):
    """The block ``x_ref[idx]``; where ``mask`` is false, ``other`` (0 if not given) (Pallas's ``pl.load``).

    Args:
      x_ref: a kernel ref. idx: ints, static slices, ``pl.ds``, ``...`` (one per ref axis, missing trailing
        axes whole). mask: bool array of the block's shape (or broadcastable). other: the value where masked.

    Returns:
      the block (the ref's dtype; the shape of the slices, integer-indexed axes dropped).

    Raises:
      ``IndexError``/``NotImplementedError`` for index forms the kernels do not support (index arrays,
      steps); the interpreter raises ``IndexError`` for unmasked elements outside the ref.
    """
    ref = _ref(x_ref, "pl.load")
    indexer, starts = _indexer(ref, idx, "pl.load")
    if mask is None:
        _check_static_range(ref, indexer, starts, "pl.load: a load of", "reads", "pass mask= (and other=) to pl.load")
    shape = tuple(e[1] for e in indexer if e[0] == "s")
    extra = []
    if mask is not None:
        extra.append(_as_block(mask, shape, np.dtype(np.bool_), "pl.load", "mask"))
    else:
        ref.unmasked_reads = True
    if other is not None:
        if mask is None:
            raise ValueError("pl.load: other= without mask= (other fills the masked elements)")
        extra.append(_as_block(other, shape, ref.dtype, "pl.load", "other"))
    return pallas_load_p.bind(ref.state, *starts, *extra, indexer=indexer, masked=mask is not None,
                              has_other=other is not None)


def _writable(ref, where):
    if ref.kind == "in":
        raise ValueError(f"{where}: the kernel {ref.kernel.name!r} writes input ref {ref.index}; inputs are "
                         f"read-only. Write an output ref (input_output_aliases={{{ref.index}: k}} makes output k "
                         f"start as this input)")


def store(x_ref, idx, val=None, *, mask=None, eviction_policy=None):
    """``x_ref[idx] = val`` where ``mask`` holds (Pallas's ``pl.store``; ``store(ref, val)`` stores it all).

    Raises:
      ``ValueError`` for a store into an input ref; ``DTypeError`` for a value of another (strong) dtype;
      ``ShapeError`` for a value that does not broadcast to the block.
    """
    ref = _ref(x_ref, "pl.store")
    if val is None:
        idx, val = ..., idx
    _writable(ref, "pl.store")
    indexer, starts = _indexer(ref, idx, "pl.store")
    if mask is None:
        _check_static_range(ref, indexer, starts, "pl.store: a store to", "writes", "pass mask= to pl.store")
    shape = tuple(e[1] for e in indexer if e[0] == "s")
    v = _as_block(val, shape, ref.dtype, "pl.store", "a value")
    extra = [] if mask is None else [_as_block(mask, shape, np.dtype(np.bool_), "pl.store", "mask")]
    ref.state = pallas_store_p.bind(ref.state, v, *starts, *extra, indexer=indexer, masked=mask is not None)


def _atomic(op):
    def f(x_ref, idx, val, *, mask=None):
        ref = _ref(x_ref, f"pl.atomic_{op}")
        _writable(ref, f"pl.atomic_{op}")
        indexer, starts = _indexer(ref, idx, f"pl.atomic_{op}")
        shape = tuple(e[1] for e in indexer if e[0] == "s")
        v = _as_block(val, shape, ref.dtype, f"pl.atomic_{op}", "a value")
        extra = [] if mask is None else [_as_block(mask, shape, np.dtype(np.bool_), f"pl.atomic_{op}", "mask")]
        new, old = pallas_atomic_p.bind(ref.state, v, *starts, *extra, op=op, indexer=indexer,
                                        masked=mask is not None)
        ref.state = new
        return old
    f.__name__ = f"atomic_{op}"
    f.__doc__ = (f"Atomically ``x_ref[idx] = {op}(x_ref[idx], val)`` where ``mask`` holds; returns the old values "
                 f"(Pallas's ``pl.atomic_{op}``). ``x_ref``: an int32, uint32 or float32 output ref; ``val`` "
                 f"and ``mask`` broadcast to the indexed block. Program instances run one after another in the "
                 f"interpreter, at once on opencl/webgpu (the device's atomics; float32 by a compare-and-swap "
                 f"loop), so float sums round in the order they ran. Raises as ``pl.store`` does for a bad index "
                 f"or an input ref; an atomic on a scratch ref, or of another dtype, falls back to the "
                 f"interpreter on opencl/webgpu. Source: JAX's Pallas, docs.jax.dev/en/latest/pallas.")
    return f


atomic_add, atomic_max, atomic_min = (_atomic(o) for o in ATOMIC_OPS)


# ------------------------------------------------------------------------------------------ loops and when


def _writable_refs(k):
    return [r for r in k.refs if r.kind != "in"]


def _trace_with_refs(k, fn, lead_avals, user_avals, where):
    """Trace ``fn(*lead, *user)`` with the writable refs' contents as extra inputs and outputs: ``(program
    with consts as leading inputs, consts, number of user outputs)``."""
    refs = _writable_refs(k)
    saved = [r.state for r in refs]
    ref_avals = [get_aval(s) for s in saved]
    nout = []

    def flat(*xs):
        n = len(lead_avals)
        lead, user, states = xs[:n], xs[n:n + len(user_avals)], xs[n + len(user_avals):]
        for r, s in zip(refs, states, strict=True):
            r.state = s
        try:
            outs = list(fn(*lead, *user))
            nout.append(len(outs))
            return outs + [r.state for r in refs]
        finally:
            for r, s in zip(refs, saved, strict=True):
                r.state = s

    prog, consts = trace_to_program(flat, list(lead_avals) + list(user_avals) + ref_avals, debug_name=where)
    ins, n = list(prog.invars), len(lead_avals)   # (*lead, *consts, *user, *ref states): the primitives' order
    prog = Program([], ins[:n] + list(prog.constvars) + ins[n:], prog.eqns, prog.outvars)
    return prog, consts, refs, nout[0]


def _kernel_fori_loop(lower, upper, body_fun, init_val):
    s = _stack()
    if not s:
        return None
    k = s[-1]
    leaves, tree = tree_util.tree_flatten(init_val)
    import fnarray.numpy as fnp
    leaves = [fnp.asarray(v) for v in leaves]
    avals = [get_aval(v).strip_weak() if hasattr(get_aval(v), "strip_weak") else get_aval(v) for v in leaves]
    avals = [ShapedArray(a.shape, a.dtype) for a in avals]
    lo, hi = _int32(lower, "fori_loop (lower)"), _int32(upper, "fori_loop (upper)")

    def body(i, *carry):
        out = body_fun(i, tree_util.tree_unflatten(tree, list(carry)))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != tree:
            raise TypeError(f"fori_loop in a kernel: body_fun returned {out_tree}, the carry is {tree}")
        res = []
        for o, a in zip(out_leaves, avals, strict=True):
            o = fnp.asarray(o)
            if get_aval(o).shape != a.shape:
                raise ShapeError(f"fori_loop in a kernel: body_fun changes a carry of shape {a.shape} to "
                                 f"{get_aval(o).shape}")
            res.append(o if get_aval(o).dtype == a.dtype else lax.convert_element_type(o, a.dtype))
        return res

    prog, consts, refs, nuser = _trace_with_refs(k, body, [ShapedArray((), _INT32)], avals, "fori_loop")
    carry = [lax.convert_element_type(v, a.dtype) if get_aval(v).dtype != a.dtype else v
             for v, a in zip(leaves, avals, strict=True)]
    outs = pallas_loop_p.bind(lo, hi, *consts, *carry, *[r.state for r in refs], body=prog,
                              num_consts=len(consts))
    for r, o in zip(refs, outs[nuser:], strict=True):
        r.state = o
    return (tree_util.tree_unflatten(tree, list(outs[:nuser])),)


control_flow.kernel_fori_loop = _kernel_fori_loop


def when(condition):
    """``@pl.when(cond)`` runs the decorated function (no arguments) where the scalar ``cond`` holds
    (Pallas's ``pl.when``); its stores are seen afterwards. A Python bool decides at trace time."""
    def deco(f):
        if isinstance(condition, (bool, np.bool_)):
            if condition:
                f()
            return None
        k = _current("pl.when")
        import fnarray.numpy as fnp
        pred = fnp.asarray(condition)
        if get_aval(pred).shape != ():
            raise ShapeError(f"pl.when needs a scalar condition, got {get_aval(pred).str_short()}")
        if get_aval(pred).dtype != np.bool_:
            pred = lax.ne(pred, lax.convert_element_type(np.int32(0), get_aval(pred).dtype))

        def body():
            out = f()
            if out is not None:
                raise TypeError("a pl.when body returns nothing (write its results to refs)")
            return []

        prog, consts, refs, _ = _trace_with_refs(k, lambda: body(), [], [], "when")
        outs = pallas_when_p.bind(pred, *consts, *[r.state for r in refs], body=prog, num_consts=len(consts))
        for r, o in zip(refs, outs, strict=True):
            r.state = o
        return None
    return deco


# ------------------------------------------------------------------------------------------ pallas_call


def _out_leaf(x, where):
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"{where}: out_shape leaves need .shape and .dtype (pl.ShapeDtypeStruct, "
                        f"jax.ShapeDtypeStruct, an array), got {type(x).__name__}")
    return ShapedArray(tuple(int(n) for n in shape), dtypes.canonicalize(np.dtype(dtype)))


#: the most program instances of a grid: ``pl.program_id`` is an int32
_MAX_INSTANCES = 2**31 - 1


def _grid(grid):
    if grid is None:
        return ()
    if isinstance(grid, (int, np.integer)):
        grid = (grid,)
    out = []
    for g in grid:
        if not isinstance(g, (int, np.integer)) or isinstance(g, bool) or g < 0:
            raise TypeError(f"pallas_call: grid entries must be static non-negative ints, got {grid!r}")
        out.append(int(g))
    if math.prod(out) > _MAX_INSTANCES:   # pl.program_id is an int32: larger grids would wrap
        raise ValueError(f"pallas_call: the grid {tuple(out)} has {math.prod(out)} program instances, more than "
                         f"{_MAX_INSTANCES} (program ids are int32); use larger blocks or loop inside the kernel "
                         f"(fa.lax.fori_loop)")
    return tuple(out)


def _spec_list(specs, n, what, name):
    if specs is None:
        return [None] * n
    if isinstance(specs, BlockSpec):
        specs = [specs]
    leaves = tree_util.tree_leaves(specs, is_leaf=lambda x: x is None or isinstance(x, BlockSpec))
    if len(leaves) != n:
        raise ValueError(f"pallas_call {name}: {len(leaves)} {what} for {n} arrays")
    return leaves


def _trace_index_map(index_map, grid, ndim, where):
    try:
        inspect.signature(index_map).bind(*range(len(grid)))
    except TypeError:
        raise TypeError(f"{where}: the index_map {getattr(index_map, '__name__', index_map)!r} cannot take "
                        f"{len(grid)} arguments (one per grid axis of {grid})") from None
    except ValueError:
        pass   # a builtin without a signature: call it

    def flat(*g):
        out = index_map(*g)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(out) != ndim:
            raise ValueError(f"{where}: the index_map returns {len(out)} block indices for an array of {ndim} "
                             f"axes")
        return [_int32(o, where + " (index_map)") for o in out]

    prog, consts = trace_to_program(flat, [ShapedArray((), _INT32)] * len(grid), debug_name="index_map")
    if consts:
        raise ValueError(f"{where}: the index_map captures arrays; it may use only the grid indices")
    return prog


def _block(spec, aval, grid, where):
    shape = tuple(aval.shape)
    if spec is None or spec.block_shape is None:
        if spec is not None and spec.index_map is not None and shape:
            raise ValueError(f"{where}: an index_map without a block_shape")
        return Block(shape, None, shape)
    bs = spec.block_shape
    if len(bs) != len(shape):
        raise ShapeError(f"{where}: block_shape {bs} has {len(bs)} axes, the array {shape} has {len(shape)}")
    for n, s in zip(bs, shape, strict=True):
        if n is not None and (not isinstance(n, (int, np.integer)) or n <= 0):
            raise ShapeError(f"{where}: block_shape entries must be positive ints or None, got {bs}")
        if n is not None and n > s and s > 0:
            raise ShapeError(f"{where}: block_shape {bs} is larger than the array {shape}")
    bs = tuple(None if n is None else int(n) for n in bs)
    imap = None if spec.index_map is None else _trace_index_map(spec.index_map, grid, len(shape), where)
    return Block(bs, imap, shape)


def _check_grid_corners(kname, grid, blocks):
    """Raise ``IndexError`` when an index_map sends a corner of the grid (every combination of each axis's first
    and last index, up to 5 axes) to a block past its array: on a device that reads and writes arbitrary memory,
    where the interpreter raises the same error. Affine index maps (the usual ones) are checked entirely."""
    import itertools

    from fnarray.lowering.numpy.pallas import block_offsets
    from fnarray.lowering.numpy.program import compile_numpy
    if not grid or len(grid) > 5 or any(int(g) <= 0 for g in grid):
        return
    corners = list(itertools.product(*[sorted({0, int(g) - 1}) for g in grid]))
    for blk in blocks:
        if blk.index_map is None or any(s == 0 for s in blk.shape):
            continue
        imap = compile_numpy(blk.index_map)
        for pid in corners:
            block_offsets(blk, [int(v) for v in imap([np.int32(p) for p in pid])], kname)



#: the ``compiler_params`` keys fnarray reads, each with its check and what it means (docs/kernels.md)
_PARAMS = {"workgroup": ("a positive int", "the work items per program instance on opencl/webgpu, e.g. 64"),
           "rows": ("a bool", "True: one work item per row of the blocks (row mode), False: never"),
           "stage": ("a bool", "True: a transposed dot operand staged in work-group memory"),
           "tile": ("a positive int", "the most outputs of a dot's register tile per work item: 16 or 64"),
           "row_tile": ("a positive int", "the rows each work item takes in row mode (rows=True), e.g. 2, 4 or 8 "
                                          "(a value that does not divide the rows runs one row per item)")}
#: JAX's per-backend ``compiler_params`` entries (``{"triton": {...}}``, ``{"mosaic": {...}}``): accepted, unused
_JAX_BACKEND_PARAMS = ("triton", "mosaic", "mosaic_gpu")


def _param_ok(key, v):
    if _PARAMS[key][0] == "a bool":
        return isinstance(v, (bool, np.bool_))
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1


def _check_compiler_params(compiler_params):
    """``compiler_params`` as a dict of the keys fnarray reads (``None`` where none was given);
    ``ValueError``/``TypeError`` for a key fnarray does not read or a value of the wrong kind (lowering would
    take ``int()``/``bool()`` of it: ``row_tile=2.5`` silently as 2, ``stage="False"`` as ``True``, ``tile=0``
    a ``ZeroDivisionError`` on opencl). JAX's backend entries and ``CompilerParams`` objects are accepted, unused.
    """
    if compiler_params is None or not isinstance(compiler_params, dict):
        if isinstance(compiler_params, (str, bytes, int, float, list, tuple, set)):
            raise TypeError(f"pallas_call: compiler_params must be a dict such as {{'workgroup': 64}}, got "
                            f"{compiler_params!r}; fnarray reads the keys {', '.join(_PARAMS)}")
        return None if compiler_params is None else {}   # JAX's pltpu.CompilerParams(...) and the like: unused
    out = {}
    for key, v in compiler_params.items():
        if key in _JAX_BACKEND_PARAMS:
            continue
        if key not in _PARAMS:
            raise ValueError(f"pallas_call: compiler_params has the key {key!r}, which fnarray does not read; its "
                             f"keys are {', '.join(_PARAMS)} (JAX's per-backend entries "
                             f"{', '.join(_JAX_BACKEND_PARAMS)} are accepted and ignored). Check the spelling")
        if not _param_ok(key, v):
            raise ValueError(f"pallas_call: compiler_params {key} must be {_PARAMS[key][0]}, got {v!r}; it is "
                             f"{_PARAMS[key][1]}")
        out[key] = v
    return out


def _aliases(input_output_aliases):
    """``input_output_aliases`` as sorted ``(input, output)`` int pairs; ``TypeError`` for anything but a dict of
    ints (a list of pairs was an ``AttributeError``, ``{0.5: 0}`` silently input 0)."""
    if not input_output_aliases:
        return ()
    if not isinstance(input_output_aliases, dict):
        raise TypeError(f"pallas_call: input_output_aliases must be a dict {{input index: output index}}, got "
                        f"{input_output_aliases!r}; e.g. input_output_aliases={{0: 0}}")
    for i, o in input_output_aliases.items():
        if any(not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)) for v in (i, o)):
            raise TypeError(f"pallas_call: input_output_aliases maps input indices to output indices (ints), got "
                            f"{{{i!r}: {o!r}}}")
    return tuple(sorted((int(i), int(o)) for i, o in input_output_aliases.items()))


def _unwritten_results(leaves, out_avals, aliases):
    """The results of a grid with no program instance: each output as it starts, its aliased input or zeros (what
    the interpreter gives; docs/kernels.md, "Results the kernel does not write")."""
    import fnarray.numpy as fnp
    start = {o: i for i, o in aliases}
    return [leaves[start[k]] if k in start else fnp.zeros(a.shape, a.dtype) for k, a in enumerate(out_avals)]


def pallas_call(kernel, out_shape, *, grid_spec=None, grid=(), in_specs=None, out_specs=None, scratch_shapes=(),
                input_output_aliases=None, interpret=False, compiler_params=None, name=None, debug=False,
                cost_estimate=None, backend=None, **unsupported):
    """A function running ``kernel`` once per program instance of ``grid`` (Pallas's ``pl.pallas_call``).

    Args:
      kernel: ``kernel(*in_refs, *out_refs, *scratch_refs)``; reads and writes blocks through its refs.
      out_shape: a pytree of ``ShapeDtypeStruct``-likes (``.shape``, ``.dtype``): the results.
      grid: int or tuple of ints: the program instances (``pl.program_id(axis)`` in the kernel).
      in_specs, out_specs: one ``BlockSpec`` (or ``None``: the whole array) per operand / result.
      scratch_shapes: ``pl.Local(shape, dtype)`` (``pl.VMEM``) refs in work-group memory.
      input_output_aliases: ``{input index: output index}``: the output starts as that input's value.
      interpret: run in fnarray's interpreter (the numpy reference) on every backend.
      compiler_params: dict of hints on opencl/webgpu (``{"workgroup": 64}``; ``{"rows": True}``: one work item per
        row without barriers where the kernel allows it, ``{"rows": True, "row_tile": 2}``: two rows per work
        item; ``stage``, ``tile``: docs/kernels.md); JAX's ``triton``/``mosaic`` entries and ``CompilerParams``
        objects are accepted and ignored, other keys raise.
      name: the kernel's name (in kernel source and errors).

    Returns:
      ``f(*args)`` returning the results (the structure of ``out_shape``). Works under ``jit``, ``vmap`` (a
      grid axis is added) and ``custom_vjp``; ``grad`` without a ``custom_vjp`` raises.

    Raises:
      ``TypeError``/``ValueError``/``ShapeError`` for bad specs (wrong ``index_map`` arity, block shapes of the
      wrong rank, a padded block read without a mask, mismatched aliases, a kernel writing an input, a
      ``compiler_params`` key fnarray does not read or a value of the wrong kind: ``workgroup``, ``tile``,
      ``row_tile`` positive ints, ``rows``, ``stage`` bools).

    Example::

        >>> def add_kernel(x_ref, y_ref, o_ref):
        ...     o_ref[...] = x_ref[...] + y_ref[...]
        >>> pl.pallas_call(add_kernel, out_shape=pl.ShapeDtypeStruct((8,), fnp.float32))(x, y)
    """
    if unsupported:
        raise TypeError(f"pallas_call: unsupported arguments {sorted(unsupported)}; supported are grid, "
                        f"grid_spec, in_specs, out_specs, scratch_shapes, input_output_aliases, interpret, "
                        f"compiler_params, name, debug, cost_estimate")
    if grid_spec is not None:
        grid, in_specs, out_specs = grid_spec.grid, grid_spec.in_specs, grid_spec.out_specs
        scratch_shapes = grid_spec.scratch_shapes or scratch_shapes
    check_callable(kernel, "pallas_call", "the kernel (a function of refs)")
    kname = name or getattr(kernel, "__name__", "kernel")
    grid_t = _grid(grid)
    out_leaves, out_tree = tree_util.tree_flatten(out_shape)
    out_avals = tuple(_out_leaf(x, f"pallas_call {kname}") for x in out_leaves)
    checked = _check_compiler_params(compiler_params)
    params_t = tuple(sorted((str(k), bool(v) if isinstance(v, (bool, np.bool_)) else int(v))
                            for k, v in (checked or {}).items()))
    aliases = _aliases(input_output_aliases)

    def call(*args):
        import fnarray.numpy as fnp
        leaves = [fnp.asarray(a) for a in tree_util.tree_leaves(args)]
        in_avals = [get_aval(a) for a in leaves]
        ispecs = _spec_list(in_specs, len(leaves), "in_specs", kname)
        ospecs = _spec_list(out_specs, len(out_avals), "out_specs", kname)
        in_blocks = tuple(_block(s, a, grid_t, f"pallas_call {kname}: in_specs[{i}]")
                          for i, (s, a) in enumerate(zip(ispecs, in_avals, strict=True)))
        out_blocks = tuple(_block(s, a, grid_t, f"pallas_call {kname}: out_specs[{i}]")
                           for i, (s, a) in enumerate(zip(ospecs, out_avals, strict=True)))
        _check_grid_corners(kname, grid_t, in_blocks + out_blocks)
        for i, o in aliases:
            if not (0 <= i < len(leaves) and 0 <= o < len(out_avals)):
                raise ValueError(f"pallas_call {kname}: input_output_aliases {{{i}: {o}}} names an input or output "
                                 f"that does not exist ({len(leaves)} inputs, {len(out_avals)} outputs)")
            a, b = in_avals[i], out_avals[o]
            if (tuple(a.shape), a.dtype) != (tuple(b.shape), b.dtype):
                raise ValueError(f"pallas_call {kname}: input {i} ({a.str_short()}) aliased to output {o} "
                                 f"({b.str_short()}): shapes and dtypes must match")
        scratch = []
        for s in scratch_shapes or ():
            if not hasattr(s, "shape") or not hasattr(s, "dtype"):
                raise TypeError(f"pallas_call {kname}: scratch_shapes take pl.Local(shape, dtype), got {s!r}")
            if any(not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0 for n in s.shape):
                raise ShapeError(f"pallas_call {kname}: scratch_shapes entries take shapes of non-negative ints, "
                                 f"got {tuple(s.shape)!r}; e.g. pl.VMEM((8, 128), fnp.float32)")
            scratch.append(ShapedArray(tuple(int(n) for n in s.shape), dtypes.canonicalize(np.dtype(s.dtype))))
        body, refs, consts = _trace_body(kernel, kname, grid_t, in_blocks, in_avals, out_blocks, out_avals, scratch)
        for kind, blocks in (("in", in_blocks), ("out", out_blocks)):
            for i, blk in enumerate(blocks):
                ref = refs[kind][i]
                if blk.padded and ref.unmasked_reads:
                    raise ShapeError(f"pallas_call {kname}: the block {blk.block_shape} does not divide the {kind}put "
                                     f"{i} of shape {blk.shape}, and the kernel reads it without a mask: the last "
                                     f"block is padded. Pass mask= (and other=) to pl.load, or choose a block "
                                     f"shape that divides the array")
        if consts:   # arrays the kernel captured: whole-array operands after the user's
            leaves = leaves + [fnp.asarray(c) for c in consts]
            in_blocks = in_blocks + tuple(Block(tuple(get_aval(c).shape), None, tuple(get_aval(c).shape))
                                          for c in consts)
        if 0 in grid_t:   # no program instance runs (opencl/webgpu would launch one work-group regardless)
            return tree_util.tree_unflatten(out_tree, _unwritten_results(leaves, out_avals, aliases))
        outs = pallas_call_p.bind(*leaves, body=KernelBody(body), grid=grid_t, in_blocks=in_blocks,
                                  out_blocks=out_blocks,
                                  scratch=tuple(scratch), out_avals=out_avals, aliases=aliases, name=kname,
                                  interpret=bool(interpret), compiler_params=params_t)
        return tree_util.tree_unflatten(out_tree, list(outs))

    call.__name__ = kname
    return call


def _trace_body(kernel, kname, grid, in_blocks, in_avals, out_blocks, out_avals, scratch):
    ref_avals = ([ShapedArray(b.ref_shape, a.dtype) for b, a in zip(in_blocks, in_avals, strict=True)]
                 + [ShapedArray(b.ref_shape, a.dtype) for b, a in zip(out_blocks, out_avals, strict=True)]
                 + list(scratch))
    refs: dict = {}

    def flat(*xs):
        pids, states = xs[:len(grid)], xs[len(grid):]
        k = _Kernel(grid, pids, kname)
        kinds = ["in"] * len(in_blocks) + ["out"] * len(out_blocks) + ["scratch"] * len(scratch)
        counters: dict = {}
        for s, kind in zip(states, kinds, strict=True):
            i = counters.get(kind, 0)
            counters[kind] = i + 1
            k.refs.append(Ref(k, s, kind, i))
        _check_arity(kernel, kname, kinds)
        _stack().append(k)
        try:
            out = kernel(*k.refs)
        finally:
            _stack().pop()
        if out is not None:
            raise TypeError(f"pallas_call {kname}: the kernel returned a value; kernels write their results to "
                            f"their output refs and return None")
        for kind in ("in", "out", "scratch"):
            refs[kind] = [r for r in k.refs if r.kind == kind]
        return [r.state for r in refs["out"]]

    body, consts = trace_to_program(flat, [ShapedArray((), _INT32)] * len(grid) + ref_avals, debug_name=kname)
    body, consts = _iotas_inline(body, consts)
    return _consts_as_refs(body, len(grid) + len(in_blocks), consts), refs, consts


def _check_arity(kernel, kname, kinds):
    """A ``TypeError`` naming the refs a kernel is given when its signature cannot take them (rather than
    Python's ``missing 1 required positional argument`` from inside the trace)."""
    try:
        sig = inspect.signature(kernel)
    except (TypeError, ValueError):   # a builtin or C callable: let the call itself say
        return
    try:
        sig.bind(*kinds)
    except TypeError:
        words = {"in": ("input", "inputs"), "out": ("output", "outputs"), "scratch": ("scratch", "scratch")}
        counts = ", ".join(f"{kinds.count(k)} {words[k][kinds.count(k) != 1]}" for k in words if k in kinds)
        raise TypeError(f"pallas_call {kname}: the kernel is called with {len(kinds)} refs ({counts or 'none'}: one "
                        f"per input array leaf, then one per out_shape leaf, then the scratch_shapes), but its "
                        f"signature {sig} does not take {len(kinds)} positional arguments") from None


def _iotas_inline(body, consts):
    """The body with each captured array that counts along one axis (``fnp.arange(n)`` made inside the kernel,
    broadcast or not) made by an ``iota`` inside it instead: an operand would be read from memory by every
    program instance (on PoCL that costs a vector add half its speed), an iota is computed in place."""
    keep_vars, keep = [], []
    eqns = []
    for cv, c in zip(body.constvars, consts, strict=True):
        dim = _counting_axis(c)
        if dim is None:
            keep_vars.append(cv)
            keep.append(c)
            continue
        a = cv.aval
        eqns.append(Eqn(P.iota, (), Params(dtype=np.dtype(a.dtype), shape=tuple(a.shape), dimension=dim), (cv,)))
    if not eqns:
        return body, consts
    return Program(keep_vars, list(body.invars), eqns + list(body.eqns), body.outvars), keep


def _counting_axis(c):
    """The axis along which the concrete integer array ``c`` is ``0, 1, 2...`` (the same along the others), or
    ``None`` (a traced value, another array)."""
    if isinstance(c, Tracer):
        return None
    try:
        a = np.asarray(c)
    except Exception:  # noqa: BLE001 (a value that is not concrete: an operand as before)
        return None
    if a.dtype.kind not in "iu" or a.ndim == 0 or a.size == 0 or a.size > 1 << 16:
        return None
    for dim in range(a.ndim):
        if a.shape[dim] > 1 and np.array_equal(a, np.broadcast_to(
                np.arange(a.shape[dim], dtype=a.dtype).reshape([-1 if k == dim else 1 for k in range(a.ndim)]),
                a.shape)):
            return dim
    return None


def _consts_as_refs(body, at, consts):
    """The body with its captured arrays (``fnp.arange(n)`` made inside it, values of an enclosing trace) as
    extra input refs after the operands' (read whole at the start): ``pallas_call`` passes them as operands."""
    if not consts:
        return body
    refs, loads = [], []
    for cv in body.constvars:
        a = cv.aval
        rv = Var(ShapedArray(a.shape, a.dtype))
        refs.append(rv)
        zero = Literal(np.int32(0), ShapedArray((), _INT32))
        loads.append(Eqn(pallas_load_p, (rv,) + (zero,) * len(a.shape),
                         Params(indexer=tuple(("s", n) for n in a.shape), masked=False, has_other=False), (cv,)))
    ins = list(body.invars)
    return Program([], ins[:at] + refs + ins[at:], loads + list(body.eqns), body.outvars)

