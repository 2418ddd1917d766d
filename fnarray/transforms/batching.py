"""Batching: ``vmap``, the batch trace, ``batch_program`` and the batching rules.

A ``BatchTracer`` holds a value ``val`` of the level below and ``batch_dim``,
the axis of ``val`` that runs over the examples (``None``: the value is the
same for every example and has no such axis). ``BatchTrace.process_primitive``
binds the primitive on the values directly when nothing is batched and
otherwise looks up the primitive's rule in ``primitive_batchers``
(``fnarray.transforms.batching_tables``; convention of
``jax.interpreters.batching``)::

    rule(vals, dims, **params) -> (out, out_dim)      # lists for multiple results

Rules only call ``fnarray.core.lax`` on the values, so they work on concrete
arrays, on IR-building tracers (``jit(vmap(f))``) and on the tracers of an
outer ``vmap`` (nested ``vmap``). A rule may put the output's batch axis
anywhere; ``vmap`` moves it to ``out_axes`` at the end.

``batch_program`` batches a closed ``Program`` into another one (batch axis
0) by re-tracing it (``fnarray.core.interpreter.eval_program``) under a batch
trace; the higher-order primitives (``call``, ``remat``, the custom calls
here, ``cond``/``while``/``scan`` in ``control_flow``) batch their
sub-programs with it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import types
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import optree

from fnarray import tree_util
from fnarray.core import avals, collectives, dtypes, families, lax
from fnarray.core.avals import get_aval
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import ConcretizationError, FnArrayError, ShapeError, check_callable
from fnarray.core.interpreter import eval_program
from fnarray.core.ir import Program
from fnarray.core.prng import threefry2x32_p
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer, is_scalar, jax_type, new_main, user_frame
from fnarray.transforms.batching_tables import collective_batchers, not_mapped, primitive_batchers
from fnarray.transforms.derived import derived
from fnarray.transforms import batching_windows  # noqa: F401  (the window primitives' rules)

__all__ = [
    "BatchTrace",
    "BatchTracer",
    "batch_program",
    "defbroadcasting",
    "defreducer",
    "defvectorized",
    "eval_program",
    "move_batch_dim",
    "not_mapped",
    "primitive_batchers",
    "vmap",
]


# ----------------------------------------------------------------------------- values and axes


_aval = get_aval  # fnarray.core.avals


def _shape(x) -> tuple:
    av = getattr(x, "aval", None)  # an array's or tracer's own aval, without ``get_aval``'s call (issue 28)
    if type(av) is ShapedArray:
        return av.shape
    return _aval(x).shape


_KEPT_DIMS: dict = {}  # (rank, dst) -> the axes an unbatched operand keeps when ``move_batch_dim`` adds one at dst


def move_batch_dim(x, src, dst: int, size: int | None = None):
    """``x`` with its batch axis moved from ``src`` to ``dst``.

    ``src=None`` (``x`` is not batched) broadcasts ``x`` along a new axis of
    length ``size`` (needed only then) at ``dst``. ``dst`` is an axis of the result (``0 <= dst <= x.ndim``
    when ``src`` is ``None``). Works on arrays, tracers and scalars.
    """
    shape = _shape(x)
    if src is None:  # (the output has one more axis than ``x``: never ``lax.broadcast_in_dim``'s identity case)
        n = len(shape)
        out_shape = shape[:dst] + (int(size),) + shape[dst:]
        dims = _KEPT_DIMS.get((n, dst))
        if dims is None:
            dims = _KEPT_DIMS[(n, dst)] = tuple(i if i < dst else i + 1 for i in range(n))
        return P.broadcast_in_dim.bind(x, shape=out_shape, broadcast_dimensions=dims)
    if src == dst:
        return x
    perm = [i for i in range(len(shape)) if i != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)


def _axis_size(vals, dims) -> int:
    for v, d in zip(vals, dims, strict=True):
        if d is not None:
            return _shape(v)[d]
    raise FnArrayError("a batching rule was called with no batched argument")


def _unbatched_shape(x, d) -> tuple:
    s = _shape(x)
    return s if d is None else s[:d] + s[d + 1:]


def _shift_axes(axes, bdim):
    """Axes of the unbatched view as axes of a value batched at ``bdim``."""
    return tuple(a if a < bdim else a + 1 for a in axes)


# ----------------------------------------------------------------------------- tracer and trace


class BatchTracer(Tracer):
    """A value inside ``vmap``: ``val`` with the examples along ``batch_dim`` (or ``None``)."""

    __slots__ = ("batch_dim", "val", "_av")

    def __init__(self, trace, val, batch_dim):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim
        self._av = None  # the aval, made at its first read (``val`` and ``batch_dim`` never change)

    @property
    def aval(self) -> ShapedArray:
        av = self._av
        if av is None:
            a = _aval(self.val)
            d = self.batch_dim
            av = self._av = a if d is None else ShapedArray(a.shape[:d] + a.shape[d + 1:], a.dtype, a.weak_type)
        return av

    def full_lower(self):
        return self.val if self.batch_dim is None else self

    def __repr__(self):
        return f"VmapTracer(aval={jax_type(self.aval)}, batched={jax_type(_aval(self.val))})"   # (JAX's text)

    def _concrete(self, what):
        if self.batch_dim is None:
            v = self.val
            return v._concrete(what) if isinstance(v, Tracer) else np.asarray(v)
        size = _shape(self.val)[self.batch_dim]
        raise ConcretizationError(
            f"{what} on a value batched by vmap ({self.aval.str_short()} for each of {size} examples) "
            f"at {user_frame()}: the examples may disagree, so Python control flow and conversions "
            "cannot depend on it. Use fnarray.numpy.where(c, x, y) for elementwise choices and "
            "fnarray.cond / fnarray.while_loop for control flow (their batching rules handle each "
            "example), or pass the value with in_axes=None if it is the same for every example.")

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._concrete("converting to a NumPy array"), dtype)


class BatchAxis(NamedTuple):
    """What a ``vmap`` level maps over: ``size`` examples, and the axis ``name`` (``None``: unnamed)."""
    size: int
    name: object = None


class _RuleAxis(threading.local):
    """The axis of the batching rule running in this thread: ``batch_program`` batches sub-programs
    over it, so a collective inside a ``jit`` or a loop body meets the named axis it names."""

    def __init__(self):
        self.stack: list = [None]


_rule_axis = _RuleAxis()


class BatchTrace(Trace):
    """The trace of one ``vmap`` level; ``main.global_data`` is its ``BatchAxis``."""

    __slots__ = ()

    @property
    def axis_size(self) -> int:
        return self.main.global_data.size

    @property
    def axis_name(self):
        return self.main.global_data.name

    def pure(self, val):
        return BatchTracer(self, val, not_mapped)

    lift = pure

    def new_batched(self, val, dim):
        """A tracer of this level holding ``val`` batched along ``dim`` (``axis_index`` makes one)."""
        return BatchTracer(self, val, dim)

    def process_primitive(self, primitive, tracers, params):
        vals, dims = [], []
        unbatched = True
        for t in tracers:  # (one pass: every primitive under ``vmap`` comes here; issue 28)
            vals.append(t.val)
            d = t.batch_dim
            dims.append(d)
            if d is not None:
                unbatched = False
        axis = self.main.global_data
        if primitive in collective_batchers:
            # A collective: the reduction it means over this level's axis if it names it, else a
            # value passed through per example (collective_rules).
            out, out_dim = collective_batchers[primitive](vals, dims, axis, **params)
            return BatchTracer(self, out, out_dim)
        name = axis.name
        if unbatched and name is not None and vals and _uses_axis(params, name):
            # A sub-program names this axis: batch it even though no operand varies.
            vals[0], dims[0] = move_batch_dim(vals[0], None, 0, self.axis_size), 0
            unbatched = False
        if unbatched:
            out = primitive.bind(*vals, **params)
            if primitive.multiple_results:
                return [BatchTracer(self, o, None) for o in out]
            return BatchTracer(self, out, None)
        rule = primitive_batchers.get(primitive)
        if rule is None:
            raise FnArrayError(
                f"vmap has no batching rule for the primitive {primitive.name!r}, so it cannot be "
                "vectorized. Pass the arguments it depends on with in_axes=None, or compute it with "
                "a Python loop over the examples and fnarray.numpy.stack.")
        stack = _rule_axis.stack  # (this thread's list: read once)
        stack.append(axis)
        try:
            out, out_dim = rule(vals, dims, **params)
        finally:
            stack.pop()
        if primitive.multiple_results:
            return [BatchTracer(self, o, d) for o, d in zip(out, out_dim, strict=True)]
        return BatchTracer(self, out, out_dim)


def _uses_axis(params, name) -> bool:
    """Whether a sub-program among ``params`` holds a collective over ``name``."""
    for v in params.values():
        progs = (v,) if isinstance(v, Program) else v if isinstance(v, tuple) else ()
        for p in progs:
            if isinstance(p, Program) and name in collectives.program_axis_names(p):
                return True
    return False


@contextlib.contextmanager
def _named_main(size, name):
    """A new batch level over ``size`` examples; a named one is bound in the axis environment too."""
    with new_main(BatchTrace, BatchAxis(size, name)) as main:
        if name is None:
            yield main
            return
        collectives.push_axis(collectives.AxisFrame(name, size, main))
        try:
            yield main
        finally:
            collectives.pop_axis()


# ----------------------------------------------------------------------------- batching programs


def batch_program(program: Program, axis_size: int, in_batched: Sequence[bool],
                  instantiate: bool | Sequence[bool], axis_name=None) -> tuple[Program, list[bool]]:
    """Batch a closed program: batched inputs and outputs get a leading axis of ``axis_size``.

    Args:
      program: a ``Program`` without constvars (sub-programs take captured values as inputs).
      axis_size: the number of examples.
      in_batched: one bool per input; a batched input has shape ``(axis_size,) + aval.shape``.
      instantiate: a bool, or one per output: outputs marked True are batched (broadcast)
        even when they do not depend on a batched input.
      axis_name: the name of the axis (collectives over it become its reductions); by default the
        axis of the batching rule that calls ``batch_program``, if it is named.
    Returns: ``(batched_program, out_batched)``: the new closed program and, per output,
      whether it is batched (its batch axis is 0).
    Raises: ``ValueError`` when the program has constvars or a length does not match.
    """
    if program.constvars:
        raise ValueError("batch_program needs a closed program (no constvars); turn its constants into "
                         "leading inputs with fnarray.core.passes.consts_as_inputs first")
    in_batched = [bool(b) for b in in_batched]
    if len(in_batched) != len(program.invars):
        raise ValueError(f"batch_program: in_batched has {len(in_batched)} entries for a program of "
                         f"{len(program.invars)} inputs")
    n_out = len(program.outvars)
    inst = [bool(instantiate)] * n_out if isinstance(instantiate, (bool, np.bool_)) else \
        [bool(b) for b in instantiate]
    if len(inst) != n_out:
        raise ValueError(f"batch_program: instantiate has {len(inst)} entries for a program of "
                         f"{n_out} outputs")
    in_avals = [ShapedArray((axis_size,) + a.shape, a.dtype, a.weak_type) if b else a
                for a, b in zip(program.in_avals, in_batched, strict=True)]
    out_batched: list[bool] = []
    if axis_name is None:
        ctx = _rule_axis.stack[-1]
        axis_name = ctx.name if ctx is not None and ctx.size == axis_size else None

    def batched_fun(*args):
        with _named_main(axis_size, axis_name) as main:
            trace = BatchTrace(main)
            tracers = [BatchTracer(trace, a, 0 if b else None)
                       for a, b in zip(args, in_batched, strict=True)]
            outs = eval_program(program, (), tracers)
            res = []
            for o, want in zip(outs, inst, strict=True):
                t = trace.full_raise(o)
                d = t.batch_dim
                if d is None and not want:
                    res.append(t.val)
                    out_batched.append(False)
                else:
                    res.append(move_batch_dim(t.val, d, 0, axis_size))
                    out_batched.append(True)
        return res

    prog, consts = trace_to_program(batched_fun, in_avals, debug_name="batched")
    if consts:
        raise FnArrayError("batch_program produced a program that captures values; batching rules "
                           "must build everything from their inputs")
    return prog, out_batched


# ----------------------------------------------------------------------------- rule helpers


def _vectorized(prim):
    def rule(vals, dims, **params):
        return prim.bind(vals[0], **params), dims[0]
    rule.__name__ = f"{prim.name}_batch"
    return rule


def defvectorized(prim):
    """``prim`` acts on each element alone (one operand): the batch axis stays where it is."""
    primitive_batchers[prim] = _vectorized(prim)


def _broadcasting(prim):
    def rule(vals, dims, **params):
        d0 = _aligned(vals, dims)
        if d0 is not None:
            return prim.bind(*vals, **params), d0
        size, full, shapes = _broadcast_plan(vals, dims)
        args = []
        for v, d, s in zip(vals, dims, shapes, strict=True):
            rank = len(s)
            if d is None:
                args.append(v if rank == 0 else move_batch_dim(v, None, 0, size))
            elif rank == 0 and full:
                args.append(lax.broadcast_in_dim(move_batch_dim(v, d, 0, size), (size,) + full, (0,)))
            else:
                args.append(move_batch_dim(v, d, 0, size))
        return prim.bind(*args, **params), 0
    rule.__name__ = f"{prim.name}_batch"
    return rule


def _broadcast_plan(vals, dims):
    """``(size, full, shapes)`` of a broadcasting rule's operands in one pass: the batch size, the longest unbatched
    shape (the first of that rank) and each operand's unbatched shape (each aval read once; issue 28)."""
    size = None
    full = None
    shapes = []
    for v, d in zip(vals, dims, strict=True):
        s = _shape(v)
        if d is not None:
            if size is None:
                size = s[d]
            s = s[:d] + s[d + 1:]
        shapes.append(s)
        if full is None or len(s) > len(full):
            full = s
    if size is None:
        raise FnArrayError("a batching rule was called with no batched argument")
    return size, full, shapes


def _aligned(vals, dims):
    """The batch axis that the batched operands share, where they also share one shape and the others are rank 0
    (the operation then applies as it is), else ``None``; one pass, no lists (every elementwise operation under
    ``vmap`` asks; at least one operand is batched)."""
    d0 = s0 = None
    for v, d in zip(vals, dims, strict=True):
        s = _shape(v)
        if d is None:
            if s != ():
                return None
        elif d0 is None:
            d0, s0 = d, s
        elif d != d0 or s != s0:
            return None
    return d0


def defbroadcasting(prim):
    """``prim`` is elementwise over operands of one shape, where a rank-0 operand broadcasts."""
    primitive_batchers[prim] = _broadcasting(prim)


def _reducer(prim):
    def rule(vals, dims, *, axes, **params):
        d = dims[0]
        out_dim = d - sum(1 for a in axes if a < d)
        return prim.bind(vals[0], axes=_shift_axes(axes, d), **params), out_dim
    rule.__name__ = f"{prim.name}_batch"
    return rule


def defreducer(prim):
    """``prim`` reduces the ``axes`` of its one operand (the ``reduce_*`` family, ``argmax``...)."""
    primitive_batchers[prim] = _reducer(prim)


def _cumulative(prim):
    def rule(vals, dims, *, axis, **params):
        d = dims[0]
        return prim.bind(vals[0], axis=_shift_axes((axis,), d)[0], **params), d
    rule.__name__ = f"{prim.name}_batch"
    return rule


def _all_at_front(vals, dims):
    size = _axis_size(vals, dims)
    return [move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)], size


# ----------------------------------------------------------------------------- elementwise

# Registered per family (fnarray.core.families): every member, present and future, gets the rule.
families.on_family("unary", defvectorized)
families.on_family("binary", defbroadcasting)
families.on_family("reduce", defreducer)
families.on_family("cumulative", lambda p: primitive_batchers.__setitem__(p, _cumulative(p)))


def select_n_batch(vals, dims):
    which, cases = vals[0], vals[1:]
    wd, cds = dims[0], dims[1:]
    case_shape = _unbatched_shape(cases[0], cds[0])
    wshape = _unbatched_shape(which, wd)
    if wd is None and wshape == () and all(d == cds[0] for d in cds):
        return P.select_n.bind(which, *cases), cds[0]
    size = _axis_size(vals, dims)
    cases = [move_batch_dim(c, d, 0, size) for c, d in zip(cases, cds, strict=True)]
    if wd is None and wshape == ():
        return P.select_n.bind(which, *cases), 0
    which = move_batch_dim(which, wd, 0, size)
    if wshape == () and case_shape != ():
        which = lax.broadcast_in_dim(which, (size,) + case_shape, (0,))
    return P.select_n.bind(which, *cases), 0


primitive_batchers[P.select_n] = select_n_batch


def threefry2x32_batch(vals, dims):
    outs, d = _broadcasting(threefry2x32_p)(vals, dims)
    return outs, [d, d]


primitive_batchers[threefry2x32_p] = threefry2x32_batch

# iota takes no operands, so nothing it computes is ever batched: it needs no rule.

# ----------------------------------------------------------------------------- structural


def broadcast_in_dim_batch(vals, dims, *, shape, broadcast_dimensions):
    x = move_batch_dim(vals[0], dims[0], 0, None)
    size = _shape(x)[0]
    return P.broadcast_in_dim.bind(x, shape=(size,) + tuple(shape),
                                   broadcast_dimensions=(0,) + tuple(b + 1 for b in broadcast_dimensions)), 0


def reshape_batch(vals, dims, *, new_sizes):
    x = move_batch_dim(vals[0], dims[0], 0, None)
    return P.reshape.bind(x, new_sizes=(_shape(x)[0],) + tuple(new_sizes)), 0


def transpose_batch(vals, dims, *, permutation):
    d = dims[0]
    return P.transpose.bind(vals[0], permutation=(d,) + _shift_axes(permutation, d)), 0


def rev_batch(vals, dims, *, dimensions):
    d = dims[0]
    return P.rev.bind(vals[0], dimensions=_shift_axes(dimensions, d)), d


def slice_batch(vals, dims, *, start_indices, limit_indices, strides):
    x, d = vals[0], dims[0]
    starts, limits, steps = list(start_indices), list(limit_indices), list(strides)
    starts.insert(d, 0)
    limits.insert(d, _shape(x)[d])
    steps.insert(d, 1)
    return P.slice_p.bind(x, start_indices=tuple(starts), limit_indices=tuple(limits),
                          strides=tuple(steps)), d


def pad_batch(vals, dims, *, padding_config):
    (x, pv), (xd, pd) = vals, dims
    if pd is None:
        config = list(padding_config)
        config.insert(xd, (0, 0, 0))
        return P.pad.bind(x, pv, padding_config=tuple(config)), xd
    # A batched padding value: pad with zeros, then choose the padding value where a mask of
    # the padded positions says so.
    size = _shape(pv)[pd]
    dt = _aval(pv).dtype
    x = move_batch_dim(x, xd, 0, size)
    padded = P.pad.bind(x, np.zeros((), dt)[()], padding_config=((0, 0, 0),) + tuple(padding_config))
    inner = lax.full(_shape(x)[1:], True, dtypes.bool_)
    mask = P.pad.bind(inner, np.False_, padding_config=tuple(padding_config))
    out_shape = _shape(padded)
    mask = lax.broadcast_in_dim(mask, out_shape, tuple(range(1, len(out_shape))))
    fill = lax.broadcast_in_dim(move_batch_dim(pv, pd, 0, size), out_shape, (0,))
    return P.select_n.bind(mask, fill, padded), 0


def concatenate_batch(vals, dims, *, dimension):
    xs, _ = _all_at_front(vals, dims)
    return P.concatenate.bind(*xs, dimension=dimension + 1), 0


def sort_batch(vals, dims, *, dimension, is_stable, num_keys):
    xs, _ = _all_at_front(vals, dims)
    outs = P.sort.bind(*xs, dimension=dimension + 1, is_stable=is_stable, num_keys=num_keys)
    return outs, [0] * len(outs)


primitive_batchers[P.broadcast_in_dim] = broadcast_in_dim_batch
primitive_batchers[P.reshape] = reshape_batch
primitive_batchers[P.transpose] = transpose_batch
primitive_batchers[P.rev] = rev_batch
primitive_batchers[P.slice_p] = slice_batch
primitive_batchers[P.pad] = pad_batch
primitive_batchers[P.concatenate] = concatenate_batch
primitive_batchers[P.sort] = sort_batch

# ----------------------------------------------------------------------------- dynamic slicing


def _clamped_starts(starts, sdims, sizes, shape, size):
    """Start indices as int32 arrays of shape ``(size,)``, clamped so the window fits (as XLA)."""
    out = []
    for s, d, k, n in zip(starts, sdims, sizes, shape, strict=True):
        s = lax.convert_element_type(move_batch_dim(s, d, 0, size) if d is not None else s, dtypes.int32)
        s = lax.min(lax.max(s, np.int32(0)), np.int32(n - k))
        out.append(s if d is not None else lax.broadcast_in_dim(s, (size,), ()))
    return out


def _gather_window(x, x_batched, axis, start, k, size):
    """Per example ``b``, the ``k`` elements from ``start[b]`` along ``axis`` of the unbatched view.

    ``x`` is batched at 0 when ``x_batched``; the result is batched at 0 with ``axis`` of
    length ``k``. ``start`` holds in-bounds int32 starts of shape ``(size,)``.
    """
    pos = lax.add(lax.broadcast_in_dim(start, (size, k), (0,)), lax.iota(dtypes.int32, (size, k), 1))
    if x_batched:
        idx = lax.concatenate([lax.iota(dtypes.int32, (size, k, 1), 0), lax.reshape(pos, (size, k, 1))], 2)
        out = lax.gather(x, idx, (0, axis + 1))
    else:
        out = lax.gather(x, lax.reshape(pos, (size, k, 1)), (axis,))
    # the window axis comes out at 1; put it back at its place (after the batch axis)
    return move_batch_dim(out, 1, axis + 1, size)


def dynamic_slice_batch(vals, dims, *, slice_sizes):
    x, starts = vals[0], vals[1:]
    xd, sds = dims[0], dims[1:]
    size = _axis_size(vals, dims)
    if all(d is None for d in sds):
        starts = list(starts)
        starts.insert(xd, np.int32(0))
        sizes = list(slice_sizes)
        sizes.insert(xd, size)
        return P.dynamic_slice.bind(x, *starts, slice_sizes=tuple(sizes)), xd
    # Batched starts give a different window per example: gather each batched axis's window.
    shape = _unbatched_shape(x, xd)
    x_batched = xd is not None
    if x_batched:
        x = move_batch_dim(x, xd, 0, size)
    # First cut the axes whose start is the same for every example with one dynamic_slice.
    if any(d is None and k < n for d, k, n in zip(sds, slice_sizes, shape, strict=True)):
        fixed = [s if d is None else np.int32(0) for s, d in zip(starts, sds, strict=True)]
        sizes = [k if d is None else n for d, k, n in zip(sds, slice_sizes, shape, strict=True)]
        if x_batched:
            fixed, sizes = [np.int32(0)] + fixed, [size] + sizes
        x = P.dynamic_slice.bind(x, *fixed, slice_sizes=tuple(sizes))
    for axis, (s, d, k, n) in enumerate(zip(starts, sds, slice_sizes, shape, strict=True)):
        if d is None:
            continue
        (start,) = _clamped_starts([s], [d], [k], [n], size)
        x = _gather_window(x, x_batched, axis, start, k, size)
        x_batched = True
    return x, 0


def dynamic_update_slice_batch(vals, dims):
    (x, update), starts = vals[:2], vals[2:]
    (xd, ud), sds = dims[:2], dims[2:]
    size = _axis_size(vals, dims)
    x = move_batch_dim(x, xd, 0, size)
    update = move_batch_dim(update, ud, 0, size)
    if all(d is None for d in sds):
        return P.dynamic_update_slice.bind(x, update, np.int32(0), *starts), 0
    # Batched starts: scatter every element of each example's window to its place.
    shape, ushape = _shape(x)[1:], _shape(update)[1:]
    grid = (size,) + ushape
    rank = len(shape)
    clamped = _clamped_starts(starts, sds, ushape, shape, size)
    cols = [lax.iota(dtypes.int32, grid, 0)]
    for axis, s in enumerate(clamped):
        cols.append(lax.add(lax.broadcast_in_dim(s, grid, (0,)), lax.iota(dtypes.int32, grid, axis + 1)))
    idx = lax.concatenate([lax.reshape(c, grid + (1,)) for c in cols], rank + 1)
    return P.scatter.bind(x, idx, update, axes=tuple(range(rank + 1))), 0


primitive_batchers[P.dynamic_slice] = dynamic_slice_batch
primitive_batchers[P.dynamic_update_slice] = dynamic_update_slice_batch

# ----------------------------------------------------------------------------- gather / scatter


def _with_batch_index(idx):
    """``idx`` batched at 0, shape ``(B, ..., k)``, with the example number prepended: ``(B, ..., k+1)``."""
    s = _shape(idx)
    b = lax.iota(_aval(idx).dtype, s[:-1] + (1,), 0)
    return lax.concatenate([b, idx], len(s) - 1)


def gather_batch(vals, dims, *, axes):
    (x, idx), (xd, id_) = vals, dims
    if id_ is None:
        # The batch axis is one of the operand's kept axes; it comes out among them.
        new_axes = _shift_axes(axes, xd)
        kept_before = sum(1 for i in range(xd) if i not in new_axes)
        return P.gather.bind(x, idx, axes=new_axes), len(_shape(idx)) - 1 + kept_before
    size = _axis_size(vals, dims)
    idx = move_batch_dim(idx, id_, 0, size)
    if xd is None:
        return P.gather.bind(x, idx, axes=tuple(axes)), 0
    x = move_batch_dim(x, xd, 0, size)
    return P.gather.bind(x, _with_batch_index(idx), axes=(0,) + _shift_axes(axes, 0)), 0


def _scatter(prim):
    def rule(vals, dims, *, axes):
        (x, idx, upd), (xd, id_, ud) = vals, dims
        size = _axis_size(vals, dims)
        x = move_batch_dim(x, xd, 0, size)
        if id_ is None:
            # Same indices for every example: the batch axis is a kept axis of the operand, so it
            # sits after the index batch axes in the updates.
            upd = move_batch_dim(upd, ud, len(_shape(idx)) - 1, size)
            return prim.bind(x, idx, upd, axes=_shift_axes(axes, 0)), 0
        idx = _with_batch_index(move_batch_dim(idx, id_, 0, size))
        upd = move_batch_dim(upd, ud, 0, size)
        return prim.bind(x, idx, upd, axes=(0,) + _shift_axes(axes, 0)), 0
    rule.__name__ = f"{prim.name}_batch"
    return rule


primitive_batchers[P.gather] = gather_batch
for _p in (P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max):
    primitive_batchers[_p] = _scatter(_p)

# ----------------------------------------------------------------------------- dot_general


def dot_general_batch(vals, dims, *, dimension_numbers, preferred_element_type=None):
    (lhs, rhs), (ld, rd) = vals, dims
    (lc, rc), (lb, rb) = dimension_numbers
    if ld is not None and rd is not None:
        dn = ((_shift_axes(lc, ld), _shift_axes(rc, rd)),
              ((ld,) + _shift_axes(lb, ld), (rd,) + _shift_axes(rb, rd)))
        return P.dot_general.bind(lhs, rhs, dimension_numbers=dn,
                                  preferred_element_type=preferred_element_type), 0
    if ld is not None:
        # The batch axis is a free axis of lhs; free axes come out after the batch axes.
        lc2, lb2 = _shift_axes(lc, ld), _shift_axes(lb, ld)
        free = [i for i in range(len(_shape(lhs))) if i not in lc2 and i not in lb2]
        dn = ((lc2, tuple(rc)), (lb2, tuple(rb)))
        out_dim = len(lb) + free.index(ld)
    else:
        rc2, rb2 = _shift_axes(rc, rd), _shift_axes(rb, rd)
        free = [i for i in range(len(_shape(rhs))) if i not in rc2 and i not in rb2]
        lhs_free = len(_shape(lhs)) - len(lc) - len(lb)
        dn = ((tuple(lc), rc2), (tuple(lb), rb2))
        out_dim = len(lb) + lhs_free + free.index(rd)
    return P.dot_general.bind(lhs, rhs, dimension_numbers=dn,
                              preferred_element_type=preferred_element_type), out_dim


primitive_batchers[P.dot_general] = dot_general_batch

# ----------------------------------------------------------------------------- calls


def _call_like(prim, key):
    """Batch a primitive that runs the closed program ``params[key]`` on its operands."""
    def rule(vals, dims, **params):
        args, size = _batched_at_front(vals, dims)
        program, out_batched = _batched_sub_program(params[key], size, tuple(d is not None for d in dims))
        outs = prim.bind(*args, **{**params, key: program})
        return outs, [0 if b else None for b in out_batched]
    rule.__name__ = f"{prim.name}_batch"
    return rule


def _batched_sub_program(program, size, in_batched):
    """``batch_program(program, size, in_batched, False)``, kept on ``program`` (``derived``: an eager ``vmap``
    of a jitted function batches its program once, not at every call) unless it names an axis that the
    context binds (its collectives' batched form depends on the frames around it)."""
    def make():
        return batch_program(program, size, in_batched, False)
    if derived(program, "free_axis_names", (), lambda: bool(collectives.free_axis_names(program))):
        return make()
    ctx = _rule_axis.stack[-1]
    axis_name = ctx.name if ctx is not None and ctx.size == size else None
    return derived(program, "batch", (size, in_batched, axis_name), make)


def _batched_at_front(vals, dims):
    size = _axis_size(vals, dims)
    return [v if d is None else move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)], size


primitive_batchers[P.call] = _call_like(P.call, "program")
primitive_batchers[P.remat] = _call_like(P.remat, "program")


# The custom calls keep their rules under vmap (as JAX): the call program is batched with every
# output batched, and the user's rules (Python callables on flat lists, see ``transforms.ad``)
# are wrapped to run per example under a batch trace of their own.


def _enter(trace, x, batched):
    return BatchTracer(trace, x, 0) if batched else x


def _leave(trace, x, size):
    t = trace.full_raise(x)
    return move_batch_dim(t.val, t.batch_dim, 0, size)


def _is_value(x) -> bool:
    return isinstance(x, Array) or is_scalar(x)


def _batched_jvp(jvp, size, in_batched):
    from fnarray.transforms.ad_tables import Zero

    def enter_tangent(trace, t, batched):
        if isinstance(t, Zero):
            return Zero(t.aval.update(shape=t.aval.shape[1:])) if batched else t
        return _enter(trace, t, batched)

    def leave_tangent(trace, t):
        if isinstance(t, Zero):
            return Zero(t.aval.update(shape=(size,) + t.aval.shape))
        return _leave(trace, t, size)

    def jvp_batched(primals, tangents):
        with new_main(BatchTrace, BatchAxis(size)) as main:
            trace = BatchTrace(main)
            ps = [_enter(trace, p, b) for p, b in zip(primals, in_batched, strict=True)]
            ts = [enter_tangent(trace, t, b) for t, b in zip(tangents, in_batched, strict=True)]
            outs, t_outs = jvp(ps, ts)
            return [_leave(trace, o, size) for o in outs], [leave_tangent(trace, t) for t in t_outs]

    jvp_batched.__name__ = f"vmap({getattr(jvp, '__name__', 'jvp')})"
    return jvp_batched


def custom_jvp_call_batch(vals, dims, *, call_program, jvp, **params):
    args, size = _batched_at_front(vals, dims)
    in_batched = tuple(d is not None for d in dims)
    program, _ = batch_program(call_program, size, in_batched, True)
    outs = P.custom_jvp_call.bind(*args, call_program=program, jvp=_batched_jvp(jvp, size, in_batched),
                                  **params)
    return outs, [0] * len(outs)


def _batched_fwd_bwd(fwd, bwd, size, in_batched, num_consts):
    def fwd_batched(primals):
        with new_main(BatchTrace, BatchAxis(size)) as main:
            trace = BatchTrace(main)
            outs, res, r_tree = fwd([_enter(trace, p, b) for p, b in zip(primals, in_batched, strict=True)])
            flags = tuple(_is_value(r) for r in res)
            res = [_leave(trace, r, size) if f else r for r, f in zip(res, flags, strict=True)]
            return [_leave(trace, o, size) for o in outs], res, (r_tree, flags)

    def bwd_batched(res, packed, cts):
        r_tree, flags = packed
        with new_main(BatchTrace, BatchAxis(size)) as main:
            trace = BatchTrace(main)
            rs = [_enter(trace, r, f) for r, f in zip(res, flags, strict=True)]
            c_in = bwd(rs, r_tree, [BatchTracer(trace, c, 0) for c in cts])
            out = []
            for c, b in zip(c_in, in_batched[num_consts:], strict=True):
                if c is None:
                    out.append(None)
                    continue
                c = _leave(trace, c, size)
                # an input shared by every example collects the cotangents of all of them
                out.append(c if b else lax.reduce_sum(c, (0,)))
            return out

    fwd_batched.__name__ = f"vmap({getattr(fwd, '__name__', 'fwd')})"
    bwd_batched.__name__ = f"vmap({getattr(bwd, '__name__', 'bwd')})"
    return fwd_batched, bwd_batched


def custom_vjp_call_batch(vals, dims, *, call_program, fwd, bwd, num_consts, **params):
    args, size = _batched_at_front(vals, dims)
    in_batched = tuple(d is not None for d in dims)
    program, _ = batch_program(call_program, size, in_batched, True)
    fwd_b, bwd_b = _batched_fwd_bwd(fwd, bwd, size, in_batched, num_consts)
    outs = P.custom_vjp_call.bind(*args, call_program=program, fwd=fwd_b, bwd=bwd_b, num_consts=num_consts,
                                  **params)
    return outs, [0] * len(outs)


def custom_lin_batch(vals, dims, **params):
    # custom_lin is only reached by vmap when a custom_vjp function's forward-mode tangent is computed
    # (jacfwd is vmap of jvp); reverse mode transposes it instead. Say so rather than "no batching rule".
    raise TypeError("a custom_vjp function cannot be forward-mode differentiated (jvp, jacfwd): it only "
                    "defines reverse mode. Use fnarray.custom_jvp for forward mode, or grad/vjp/jacrev.")


primitive_batchers[P.custom_jvp_call] = custom_jvp_call_batch
primitive_batchers[P.custom_vjp_call] = custom_vjp_call_batch
primitive_batchers[P.custom_lin] = custom_lin_batch

# ----------------------------------------------------------------------------- vmap


def _is_axis(a) -> bool:
    return a is None or (isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)))


def _check_axes_spec(spec, what):
    """Every leaf of an in_axes/out_axes specification is an int or None."""
    if _is_axis(spec):
        return
    if isinstance(spec, (tuple, list, dict)) or not tree_util.treedef_is_leaf(
            tree_util.tree_structure(spec)):
        children = optree.tree_flatten_one_level(spec, none_is_leaf=True,
                                                 namespace=tree_util.NAMESPACE).children
        for c in children:
            _check_axes_spec(c, what)
        return
    raise TypeError(f"vmap {what} entries must be ints or None, got {spec!r} "
                    f"({type(spec).__name__})")


def _entry_str(e) -> str:
    return f"[{e!r}]"


def _broadcast_prefix(spec, tree, name, what, out):
    """Append ``(name, leaf, axis)`` for each leaf of ``tree``, the axis taken from the prefix ``spec``."""
    if _is_axis(spec):
        paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=False,
                                                         namespace=tree_util.NAMESPACE)
        for p, leaf in zip(paths, leaves, strict=True):
            out.append((name + "".join(_entry_str(e) for e in p), leaf, spec))
        return
    structure = tree_util.tree_structure(tree)
    mismatch = tree_util.treedef_is_leaf(structure)
    if not mismatch:
        s = optree.tree_flatten_one_level(spec, none_is_leaf=True, namespace=tree_util.NAMESPACE)
        t = optree.tree_flatten_one_level(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE)
        mismatch = type(spec) is not type(tree) or tuple(s.entries) != tuple(t.entries)
    if mismatch:
        raise ValueError(
            f"vmap {what} specification {spec!r} does not match the structure of {name}, which is "
            f"{structure}: a specification must be an int, None, or a container of the same type "
            "and keys as the value (a prefix of its pytree)")
    for e, sc, tc in zip(s.entries, s.children, t.children, strict=True):
        _broadcast_prefix(sc, tc, name + _entry_str(e), what, out)


_NAMES: dict = {}  # (code object, nargs) -> ``_arg_names`` of a plain function (its parameters are its code's)


def _arg_names(fun, nargs):
    """The names of ``fun``'s first ``nargs`` positional arguments, for vmap's messages (a plain function's from a
    cache by its code: ``inspect.signature`` was ~25% of an eager ``vmap`` call's own time; issue 28)."""
    if type(fun) is types.FunctionType and "__wrapped__" not in fun.__dict__ and "__signature__" not in fun.__dict__:
        key = (fun.__code__, nargs)
        names = _NAMES.get(key)
        if names is None:
            if len(_NAMES) >= 4096:
                _NAMES.clear()
            names = _NAMES[key] = tuple(_signature_names(fun, nargs))
        return names
    return _signature_names(fun, nargs)


def _signature_names(fun, nargs):
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(nargs):
        p = params[i] if i < len(params) else None
        if p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(f"argument {p.name}")
        else:
            names.append(f"argument args[{i}]")
    return names


def _to_array(x):
    if isinstance(x, np.ndarray):
        return avals.asarray(x)
    return x


def vmap(fun, in_axes=0, out_axes=0, axis_name=None, axis_size=None, spmd_axis_name=None):
    """Vectorize ``fun`` over an axis of its arguments (mirrors ``jax.vmap``).

    ``vmap(f)(xs)`` equals stacking ``f(x)`` for every slice ``x`` of ``xs``
    along axis 0, computed as one batched program rather than a Python loop.

    Args:
      fun: a function of arrays, scalars and pytrees of them, returning the same.
      in_axes: the axis of each argument to map over: an int (negative counts from
        the end), ``None`` (not mapped: the same value for every example), or a tuple
        with one entry per positional argument, each entry an int, ``None`` or a
        container (tuple, list, dict...) of the same structure as that argument (a
        pytree prefix). Keyword arguments are always mapped over axis 0.
      out_axes: where the mapped axis goes in each output: an int (negative counts
        from the end of the output), ``None`` (only for outputs that are the same
        for every example) or a pytree prefix of the output.
      axis_size: the number of examples; needed only when no argument is mapped.
      axis_name: a hashable name for the mapped axis: the collectives of ``fnarray.lax`` (``psum``,
        ``all_gather``, ``ppermute``, ``axis_index``...) inside ``fun`` combine the examples along it
        (``jax.vmap``'s ``axis_name``; nested vmaps bind nested names). Every backend runs them.
      spmd_axis_name: accepted for ``jax.vmap``'s signature; only ``None`` (there is no implicit sharding).

    Returns:
      A function with ``fun``'s arguments whose outputs have an extra axis of
      the mapped size at ``out_axes`` (dtypes unchanged).

    Raises:
      ``ValueError`` (``ShapeError``) when mapped axes have different sizes (naming each
      argument and size), when an axis is out of range for its argument (naming the
      argument and shape), when ``in_axes``/``out_axes`` does not match the structure
      of the arguments/outputs, when ``out_axes`` is ``None`` for an output that varies
      over the examples, or when nothing is mapped and ``axis_size`` is not given;
      ``TypeError`` for specifications that are not ints, ``None`` or containers;
      ``ConcretizationError`` when ``fun`` needs a concrete value of a mapped one.

    Example::

        >>> import fnarray as fa, fnarray.numpy as fnp
        >>> fa.vmap(lambda a, b: a @ b, in_axes=(0, None))(fnp.ones((5, 2, 3)), fnp.ones((3,))).shape
        (5, 2)
    """
    in_axes = _checked_vmap_options(fun, in_axes, out_axes, axis_size, axis_name, spmd_axis_name)

    @functools.wraps(fun, updated=())
    def vmapped(*args, **kwargs):
        leaves_info, flat, axes = _mapped_leaves(fun, in_axes, args, kwargs)
        size = _common_size(leaves_info, flat, axes, axis_size)
        return _batched_call(fun, args, kwargs, flat, axes, size, axis_name, out_axes)

    return vmapped


def _batched_call(fun, args, kwargs, flat, axes, size, axis_name, out_axes):
    """``fun`` called on batch tracers of the argument leaves ``flat`` (mapped over ``axes``, ``size``
    examples), its outputs moved to ``out_axes``."""
    with _named_main(size, axis_name) as main:
        trace = BatchTrace(main)
        tracers = [x if ax is None else BatchTracer(trace, x, ax) for x, ax in zip(flat, axes, strict=True)]
        it = iter(tracers)
        n_pos = sum(len(tree_util.tree_leaves(a)) for a in args)
        pos_leaves = [next(it) for _ in range(n_pos)]
        kw_leaves = list(it)
        new_args = tree_util.tree_unflatten(tree_util.tree_structure(tuple(args)), pos_leaves)
        new_kwargs = tree_util.tree_unflatten(tree_util.tree_structure(kwargs), kw_leaves)
        out = fun(*new_args, **new_kwargs)
        out_info = []
        _broadcast_prefix(out_axes, out, "the output", "out_axes", out_info)
        results = []
        for name, leaf, ax in out_info:
            t = trace.full_raise(leaf)
            results.append(_place_output(t.val, t.batch_dim, ax, size, name))
    return tree_util.tree_unflatten(tree_util.tree_structure(out), results)


def _checked_vmap_options(fun, in_axes, out_axes, axis_size, axis_name, spmd_axis_name):
    """``vmap``'s options checked (the errors its docstring lists); returns ``in_axes`` (a top-level list as a
    tuple, as JAX)."""
    check_callable(fun, "vmap")
    if isinstance(in_axes, list):  # as JAX: a top-level list means a tuple (one entry per argument)
        in_axes = tuple(in_axes)
    if not (_is_axis(in_axes) or type(in_axes) is tuple):
        raise TypeError(f"vmap in_axes must be an int, None or a tuple with one entry per positional "
                        f"argument (each a pytree prefix of that argument), got {in_axes!r}")
    _check_axes_spec(in_axes, "in_axes")
    _check_axes_spec(out_axes, "out_axes")
    if axis_size is not None and (not isinstance(axis_size, (int, np.integer)) or axis_size < 0):
        raise TypeError(f"vmap axis_size must be a non-negative int, got {axis_size!r}")
    if spmd_axis_name is not None:
        raise NotImplementedError("vmap spmd_axis_name is not supported; shard the batch with "
                                  "fnarray.shard_map or jit(in_shardings=...) instead")
    if axis_name is not None:
        hash(axis_name)  # TypeError for an unhashable name, as jax.vmap
    return in_axes


def _mapped_leaves(fun, in_axes, args, kwargs):
    """``(leaves_info, flat, axes)``: ``(name, leaf, axis)`` of every argument leaf by ``in_axes`` (keyword
    arguments over axis 0), the leaves as arrays and their axes made non-negative (``ShapeError`` for an axis
    the leaf does not have)."""
    leaves_info = []  # (name, leaf, axis)
    names = _arg_names(fun, len(args))
    if isinstance(in_axes, tuple):
        if len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes is a tuple of {len(in_axes)} entries, {in_axes!r}, but the "
                             f"function was called with {len(args)} positional arguments; give one "
                             "entry per positional argument (or a single int or None for all)")
        for name, spec, a in zip(names, in_axes, args, strict=True):
            _broadcast_prefix(spec, a, name, "in_axes", leaves_info)
    else:
        for name, a in zip(names, args, strict=True):
            _broadcast_prefix(in_axes, a, name, "in_axes", leaves_info)
    for k, v in kwargs.items():
        _broadcast_prefix(0, v, f"keyword argument {k}", "in_axes", leaves_info)
    flat, axes = [], []
    for name, leaf, ax in leaves_info:
        leaf = _to_array(leaf)
        if ax is not None:
            shape = _shape_of_leaf(leaf, name)
            if not -len(shape) <= ax < len(shape):
                raise ShapeError(
                    f"vmap in_axes asks to map {name} over axis {ax}, but it has shape {shape} "
                    f"(rank {len(shape)}), so the axis must be in [{-len(shape)}, {len(shape)}); "
                    "choose an axis it has, or None to not map it")
            ax = ax % len(shape)
        flat.append(leaf)
        axes.append(ax)
    return leaves_info, flat, axes


def _shape_of_leaf(leaf, name):
    if isinstance(leaf, Array):
        return leaf.shape
    if is_scalar(leaf):
        return ()
    raise TypeError(f"vmap: {name} is a {type(leaf).__name__}, not an array; vmapped functions take "
                    "arrays, scalars and pytrees of them")


def _common_size(leaves_info, flat, axes, axis_size):
    mapped = [(name, _shape_of_leaf(x, name), ax) for (name, _, _), x, ax in zip(leaves_info, flat, axes, strict=True)
              if ax is not None]
    sizes = {s[ax] for _, s, ax in mapped}
    if axis_size is not None:
        sizes.add(int(axis_size))
    if len(sizes) > 1:
        parts = [f"{name} of shape {s} mapped over axis {ax} has size {s[ax]}" for name, s, ax in mapped]
        if axis_size is not None:
            parts.append(f"axis_size={axis_size}")
        raise ShapeError("vmap got inconsistent sizes for the mapped axes: " + "; ".join(parts)
                         + ". Every mapped axis must have the same size; fix the shapes or in_axes.")
    if not sizes:
        raise ValueError("vmap maps no argument (every in_axes entry is None, or there are no arrays), "
                         "so it cannot tell the number of examples; pass axis_size=N")
    return sizes.pop()


def _place_output(val, d, ax, size, name):
    if ax is None:
        if d is not None:
            raise ValueError(f"vmap out_axes is None for {name}, but {name} varies over the mapped axis "
                             "(it depends on a mapped input); use an int out_axes for it, or return a "
                             "value that is the same for every example")
        return _to_array_out(val)
    rank = len(_shape(val)) + (1 if d is None else 0)
    if not -rank <= ax < rank:
        raise ShapeError(f"vmap out_axes={ax} is out of range for {name}, which has rank {rank} "
                         f"with the mapped axis; use an axis in [{-rank}, {rank})")
    return move_batch_dim(val, d, ax % rank, size)


def _to_array_out(val):
    if is_scalar(val):
        return avals.asarray(val)
    return val


# ----------------------------------------------------------------------------- effects


def _debug_callback_batch(vals, dims, *, callback, in_tree, nbatch=0):
    """As JAX's ``debug.callback`` under ``vmap``: one call per example, in index order. Every argument
    gets the examples along a new leading axis (unbatched ones are broadcast); the callback's ``nbatch``
    counts those axes, outermost ``vmap`` first."""
    size = _axis_size(vals, dims)
    moved = [move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)]
    P.debug_callback.bind(*moved, callback=callback, in_tree=in_tree, nbatch=nbatch + 1)
    return [], []


primitive_batchers[P.debug_callback] = _debug_callback_batch


def _pure_callback_batch(vals, dims, *, vmap_method, result_avals, nbatch=0, **params):
    """As ``jax.pure_callback`` under ``vmap``, by ``vmap_method``: ``sequential`` (``_unrolled``) one call per
    example (the batch a new leading axis of every argument, counted by ``nbatch``), ``expand_dims`` one call
    with a size-1 leading axis on the unbatched arguments, ``broadcast_all`` with them broadcast to the batch,
    ``legacy_vectorized`` with them as they are; the results carry the batch first."""
    size = _axis_size(vals, dims)
    if params["callback"].ordered:
        raise ValueError("vmap of an ordered fnarray.experimental.io_callback (as JAX: its calls could not keep "
                         "their order); pass ordered=False, or call the function in a Python loop")
    if vmap_method is None:
        raise NotImplementedError(
            "vmap of fnarray.pure_callback needs a vmap_method: pass vmap_method='sequential' (one call per "
            "example), 'expand_dims' or 'broadcast_all' (one call on the whole batch) to pure_callback")
    batched = tuple(ShapedArray((size,) + tuple(a.shape), a.dtype) for a in result_avals)
    if vmap_method in ("sequential", "sequential_unrolled"):
        moved, nbatch = [move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)], nbatch + 1
    else:
        fill = {"expand_dims": 1, "broadcast_all": size}.get(vmap_method)
        moved = [v if d is None and fill is None else move_batch_dim(v, d, 0, fill)
                 for v, d in zip(vals, dims, strict=True)]
    outs = P.pure_callback.bind(*moved, vmap_method=vmap_method, result_avals=batched, nbatch=nbatch, **params)
    return outs, [0] * len(outs)


primitive_batchers[P.pure_callback] = _pure_callback_batch
