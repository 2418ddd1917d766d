"""Array manipulation functions: the array API (2024.12) set and NumPy's common extras.

Every function here is a composite of structural primitives (``reshape``,
``transpose``, ``slice``, ``rev``, ``concatenate``, ``pad``, ``gather``...), so
it works eagerly and under every transform. Shapes are static: arguments that
decide an output shape (``reshape``'s shape, ``split``'s sections, ``repeat``'s
repeats) must be concrete; the errors say what to pass instead under ``jit``.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.builder import trace_to_program
from fnarray.core.cache import LRUCache
from fnarray.core.errors import ConcretizationError, DTypeError, ShapeError
from fnarray.core.tracing import Tracer, is_scalar
from fnarray.numpy import _sorting, _util
from fnarray.numpy._util import asarray_internal, aval_of, normalize_axes, normalize_axis, promote
from fnarray.numpy._util import broadcast_shapes as _broadcast_shapes

__all__ = [
    "_copy",
    "_cummax_method",
    "_cummin_method",
    "_logcumsumexp_method",
    "_rsqrt_method",
    "_reshape_method",
    "_transpose_method",
    "_view",
    "array_split",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_arrays",
    "broadcast_shapes",
    "broadcast_to",
    "column_stack",
    "concat",
    "concatenate",
    "dsplit",
    "dstack",
    "expand_dims",
    "flip",
    "fliplr",
    "flipud",
    "hsplit",
    "hstack",
    "matrix_transpose",
    "moveaxis",
    "pad",
    "permute_dims",
    "ravel",
    "repeat",
    "reshape",
    "roll",
    "rot90",
    "select",
    "split",
    "squeeze",
    "stack",
    "swapaxes",
    "tile",
    "transpose",
    "unstack",
    "vsplit",
    "vstack",
    "where",
]


# ----------------------------------------------------------------------------- helpers

def _arr(x):
    """``x`` as an Array (or tracer); Python scalars become weak 0-d arrays."""
    return x if isinstance(x, Array) else asarray_internal(x)


def _static_int(v, what):
    """A Python int from an int-like static value; a traced value raises ``ConcretizationError``."""
    if isinstance(v, Tracer):
        raise ConcretizationError(
            f"{what} must be a static int, got a traced value {v.aval.str_short()}: it decides the "
            "shape of the result, which must be known while tracing. Pass a Python int (or mark the "
            "argument static with jit's static_argnums).")
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, got a bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(v).__name__} {v!r}") from None


def _static_ints(v, what):
    """A tuple of Python ints from an int or a sequence of ints."""
    if isinstance(v, Tracer):
        _static_int(v, what)
    if isinstance(v, (Array, np.ndarray)) and np.ndim(v) == 0:
        return (_static_int(v, what),)
    if isinstance(v, (list, tuple, Array, np.ndarray)):
        return tuple(_static_int(e, what) for e in (np.asarray(v).tolist() if isinstance(v, (Array, np.ndarray))
                                                     else v))
    return (_static_int(v, what),)


def _seq_of_arrays(arrays, name):
    """The list of arrays of a sequence argument (an Array is split along its first axis)."""
    if isinstance(arrays, Array):
        if arrays.ndim == 0:
            raise ShapeError(f"{name} needs a sequence of arrays, got a 0-d array")
        return list(unstack(arrays, axis=0))
    if isinstance(arrays, np.ndarray):
        return [asarray_internal(a) for a in arrays]
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name} needs a sequence (list or tuple) of arrays, got {type(arrays).__name__}")
    return [a if isinstance(a, Array) else asarray_internal(a) for a in arrays]   # (``_arr`` inline)


def _promote_arrays(name, arrays, dtype=None):
    """Arrays converted to their common dtype (JAX's promotion), or to ``dtype`` when given."""
    if not arrays:
        return []
    if dtype is not None:
        return [lax.convert_element_type(a, dtype) for a in arrays]
    return promote(name, *arrays)


def _slice_axis(x, start, stop, axis, step=1):
    """``x[..., start:stop:step, ...]`` along ``axis`` for in-bounds ``0 <= start <= stop``."""
    return lax.slice_in_dim(x, start, stop, step, axis)


def _move_front_to(x, k, pos):
    """Move the first ``k`` dimensions of ``x`` so that they start at position ``pos``."""
    if pos == 0 or k == 0:
        return x
    nd = len(aval_of(x).shape)
    perm = list(range(k, k + pos)) + list(range(k)) + list(range(k + pos, nd))
    return lax.transpose(x, perm)


# ----------------------------------------------------------------------------- shapes


def _shape_arg(shape, name):
    if isinstance(shape, (list, tuple)):
        return tuple(_static_int(s, f"{name}: a dimension of the shape") for s in shape)
    return _static_ints(shape, f"{name}: the shape")


def _infer_shape(size, shape, x_shape):
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if any(s < -1 for s in shape) or len(unknown) > 1:
        raise ShapeError(f"reshape: shape {shape} may hold non-negative sizes and at most one -1")
    if unknown:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape an array of shape {x_shape} ({size} elements) into {shape}: "
                             "the -1 dimension cannot be inferred")
        shape = tuple(size // known if s == -1 else s for s in shape)
    if math.prod(shape) != size:
        raise ShapeError(f"cannot reshape an array of shape {x_shape} ({size} elements) into shape "
                         f"{shape} ({math.prod(shape)} elements)")
    return shape


def reshape(x, /, shape, order="C", *, copy=None):
    """``x`` with a new shape holding the same elements (array API ``reshape``, ``numpy.reshape``).

    Args:
      x: array of any shape and dtype.
      shape: int or tuple of ints; one entry may be ``-1`` (inferred).
      order: ``"C"`` (row-major, default) or ``"F"`` (column-major).
      copy: accepted for the array API; arrays are immutable, so no copy is ever observable.

    Returns:
      An array of ``shape`` and ``x``'s dtype.

    Raises:
      ShapeError: the sizes do not match, or ``-1`` cannot be inferred.
      ConcretizationError: ``shape`` is traced.

    Example: ``fnp.reshape(fnp.arange(6), (2, -1)).shape == (2, 3)``.
    """
    x = _arr(x)
    shape = _infer_shape(x.size, _shape_arg(shape, "reshape"), x.shape)
    if order == "C":
        return lax.reshape(x, shape)
    if order == "F":
        xt = lax.transpose(x, tuple(reversed(range(x.ndim))))
        y = lax.reshape(xt, tuple(reversed(shape)))
        return lax.transpose(y, tuple(reversed(range(len(shape)))))
    raise ValueError(f"reshape: order must be 'C' or 'F', got {order!r}")


def ravel(a, order="C"):
    """``a`` flattened to one dimension (``numpy.ravel``); ``order`` is ``"C"`` or ``"F"``.

    Returns a 1-d array of ``a.size`` elements and ``a``'s dtype.
    """
    return reshape(a, (-1,), order=order)


def _permutation(axes, ndim, name):
    if type(axes) is tuple and len(axes) == ndim and all(type(a) is int for a in axes) and sorted(axes) == list(
            range(ndim)):
        return axes  # the common case (``x.T``, non-negative axes): already a permutation
    axes = tuple(normalize_axis(a, ndim, f"{name} axis") for a in _static_ints(axes, f"{name} axes"))
    if sorted(axes) != list(range(ndim)):
        raise ShapeError(f"{name}: axes {axes} must be a permutation of the {ndim} axes of the array")
    return axes


def permute_dims(x, /, axes):
    """``x`` with its axes permuted: result axis ``i`` is ``x``'s axis ``axes[i]`` (array API).

    Raises ``ShapeError`` when ``axes`` is not a permutation of ``range(x.ndim)`` (negative
    axes count from the end).
    """
    x = _arr(x)
    return lax.transpose(x, _permutation(axes, x.ndim, "permute_dims"))


def transpose(a, axes=None):
    """``numpy.transpose``: axes reversed (``axes=None``) or permuted as ``permute_dims``."""
    a = _arr(a)
    if axes is None:
        return lax.transpose(a, tuple(reversed(range(a.ndim))))
    return permute_dims(a, axes)


def matrix_transpose(x, /):
    """The last two axes swapped (array API ``matrix_transpose``); ``x`` needs rank >= 2."""
    x = _arr(x)
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose needs an array of rank >= 2, got shape {x.shape}")
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return lax.transpose(x, perm)


def _transpose_method(self, *axes):
    """``Array.transpose``: ``x.transpose()``, ``x.transpose(1, 0)`` or ``x.transpose((1, 0))``."""
    if not axes or (len(axes) == 1 and axes[0] is None):
        return transpose(self)
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = axes[0]
    return permute_dims(self, axes)


def _reshape_method(self, *shape, order="C", copy=None):
    """``Array.reshape``: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    return reshape(self, shape, order=order, copy=copy)


def moveaxis(a, source, destination):
    """``a`` with axes ``source`` moved to positions ``destination`` (array API ``moveaxis``; ``numpy.moveaxis``).

    ``source`` and ``destination`` are ints or equal-length sequences of distinct axes. No
    difference from NumPy beyond immutability (the result is a new array, not a view).

    Raises:
      ShapeError: an axis out of range (``AxisError``), ``source`` and ``destination`` of
        different lengths, or a repeated axis.
    """
    a = _arr(a)
    src = tuple(normalize_axis(s, a.ndim, "moveaxis source") for s in _static_ints(source, "source"))
    dst = tuple(normalize_axis(d, a.ndim, "moveaxis destination")
                for d in _static_ints(destination, "destination"))
    if len(src) != len(dst):
        raise ShapeError(f"moveaxis: source {source} and destination {destination} need equal lengths")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(f"moveaxis: repeated axis in source {source} or destination {destination}")
    rest = [i for i in range(a.ndim) if i not in src]
    perm = [None] * a.ndim
    for s, d in zip(src, dst, strict=True):
        perm[d] = s
    it = iter(rest)
    perm = [p if p is not None else next(it) for p in perm]
    return lax.transpose(a, perm)


def swapaxes(a, axis1, axis2):
    """``a`` with axes ``axis1`` and ``axis2`` exchanged (``numpy.swapaxes``)."""
    a = _arr(a)
    i, j = normalize_axis(axis1, a.ndim, "axis1"), normalize_axis(axis2, a.ndim, "axis2")
    perm = list(range(a.ndim))
    perm[i], perm[j] = j, i
    return lax.transpose(a, perm)


def expand_dims(a, axis):
    """``a`` with size-1 axes inserted at ``axis`` (int or tuple), positions in the result.

    Mirrors ``numpy.expand_dims`` / array API ``expand_dims``. Raises ``ShapeError`` for an
    axis outside ``[-(a.ndim + k), a.ndim + k)`` (``k`` new axes) or a repeated axis.
    """
    a = _arr(a)
    axes = _static_ints(axis, "expand_dims axis")
    out_nd = a.ndim + len(axes)
    norm = tuple(normalize_axis(ax, out_nd, "expand_dims axis") for ax in axes)
    if len(set(norm)) != len(norm):
        raise ShapeError(f"expand_dims: repeated axis in {axis}")
    it = iter(a.shape)
    shape = tuple(1 if i in norm else next(it) for i in range(out_nd))
    return lax.reshape(a, shape)


def squeeze(a, axis=None):
    """``a`` without its size-1 axes (``axis=None``) or without the given ones.

    Mirrors ``numpy.squeeze`` / array API ``squeeze``. Raises ``ShapeError`` if a named
    axis does not have size 1.
    """
    a = _arr(a)
    if axis is None:
        axes = tuple(i for i, n in enumerate(a.shape) if n == 1)
    else:
        axes = normalize_axes(_static_ints(axis, "squeeze axis"), a.ndim, "squeeze axis")
    for ax in axes:
        if a.shape[ax] != 1:
            raise ShapeError(f"squeeze: axis {ax} of shape {a.shape} has size {a.shape[ax]}, "
                             "only axes of size 1 can be squeezed")
    return lax.reshape(a, tuple(n for i, n in enumerate(a.shape) if i not in axes))


# ----------------------------------------------------------------------------- broadcasting


def broadcast_shapes(*shapes):
    """The broadcast of ``shapes`` (ints or tuples of ints) as a tuple (``numpy.broadcast_shapes``).

    Raises ``ShapeError`` when the shapes do not broadcast together.
    """
    return _broadcast_shapes(*[_shape_arg(s, "broadcast_shapes") for s in shapes], name="broadcast_shapes")


def broadcast_to(x, /, shape):
    """``x`` broadcast to ``shape`` by NumPy's rules (array API ``broadcast_to``).

    Raises ``ShapeError`` if ``x``'s shape does not broadcast to ``shape`` (its sizes,
    aligned from the right, must be 1 or equal).
    """
    x = _arr(x)
    shape = _shape_arg(shape, "broadcast_to")
    nd = len(shape) - x.ndim
    if nd < 0 or any(s < 0 for s in shape) or any(
            n not in (1, shape[nd + i]) for i, n in enumerate(x.shape)):
        raise ShapeError(f"broadcast_to: an array of shape {x.shape} cannot be broadcast to {shape} "
                         "(sizes aligned from the right must be 1 or equal)")
    if x.shape == shape:
        return x
    return lax.broadcast_in_dim(x, shape, tuple(range(nd, len(shape))))


def broadcast_arrays(*arrays):
    """The arrays broadcast to their common shape (array API ``broadcast_arrays``; ``numpy.broadcast_arrays``).

    Differences from NumPy: a list, as the array API specifies (NumPy 2 returns a tuple); the
    results are new immutable arrays, not read-only views.
    """
    arrays = [_arr(a) for a in arrays]
    shape = _broadcast_shapes(*[a.shape for a in arrays], name="broadcast_arrays")
    return [broadcast_to(a, shape) for a in arrays]


# ----------------------------------------------------------------------------- joining


def concat(arrays, /, *, axis=0):
    """Arrays joined along an existing ``axis`` (array API ``concat``).

    Args:
      arrays: a sequence of arrays of one rank (>= 1) whose shapes agree except along ``axis``.
      axis: the axis to join along; ``None`` flattens every array first.

    Returns:
      An array of the promoted dtype (JAX's promotion, weak types included).

    Raises:
      ShapeError: no arrays, 0-d arrays with an int axis, or shapes that do not fit.
    """
    arrays = _seq_of_arrays(arrays, "concat")
    if not arrays:
        raise ShapeError("concat needs at least one array")
    arrays = [a if isinstance(a, Array) else asarray_internal(a) for a in _promote_arrays("concat", arrays)]
    if axis is None:
        arrays = [lax.reshape(a, (a.size,)) for a in arrays]
        axis = 0
    s0 = arrays[0].shape
    nd = len(s0)
    if nd == 0:
        raise ShapeError("concat: 0-d arrays cannot be joined along an axis; use stack, or axis=None")
    ax = normalize_axis(axis, nd, "concat axis")
    for a in arrays[1:]:   # (slices compared, no generator: every traced step that grows a cache passes here)
        s = a.shape
        if len(s) != nd or s[:ax] != s0[:ax] or s[ax + 1:] != s0[ax + 1:]:
            raise ShapeError(f"concat along axis {ax}: shapes {arrays[0].shape} and {a.shape} differ "
                             "in rank or outside that axis")
    return lax.concatenate(arrays, ax)


def concatenate(arrays, axis=0, dtype=None):
    """``numpy.concatenate``: ``concat`` with an optional result ``dtype``."""
    arrays = _seq_of_arrays(arrays, "concatenate")
    if dtype is not None:
        arrays = _promote_arrays("concatenate", arrays, dtypes.canonicalize(dtype))
    return concat(arrays, axis=axis)


def stack(arrays, axis=0, *, dtype=None):
    """Arrays of one shape joined along a new ``axis`` (array API ``stack``, ``numpy.stack``).

    Returns an array of shape ``shape[:axis] + (len(arrays),) + shape[axis:]`` of the promoted
    dtype. Raises ``ShapeError`` for no arrays or different shapes.
    """
    arrays = _seq_of_arrays(arrays, "stack")
    if not arrays:
        raise ShapeError("stack needs at least one array")
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ShapeError(f"stack needs arrays of one shape, got {sorted(shapes)}")
    arrays = [_arr(a) for a in _promote_arrays("stack", arrays,
                                                 None if dtype is None else dtypes.canonicalize(dtype))]
    shape = arrays[0].shape
    ax = normalize_axis(axis, len(shape) + 1, "stack axis")
    new = shape[:ax] + (1,) + shape[ax:]
    if (len(arrays) > _ONE_PROGRAM_ABOVE and ax == len(shape)
            and not any(isinstance(a, Tracer) for a in arrays)):  # (otherwise two equations: ``_stacked``)
        return _stack_program(arrays, ax, new)
    return _stacked(arrays, ax, new)


def _stacked(arrays, ax, new):
    """``stack`` of arrays of one shape as equations: one ``concatenate`` along ``ax`` and one ``reshape``
    splitting that axis where ``ax`` is an axis of the arrays (2 equations for any number of arrays: issue 28,
    the eager stack of 5,000 arrays traced, checked and lowered 5,000 reshapes), else (0-d arrays, a new last
    axis) a reshape of each array and a ``concatenate``."""
    shape = arrays[0].shape
    if ax < len(shape) and len(arrays) > 1:
        return lax.reshape(lax.concatenate(list(arrays), ax), new[:ax] + (len(arrays),) + new[ax + 1:])
    return lax.concatenate([lax.reshape(a, new) for a in arrays], ax)


#: Eager ``stack`` of more arrays than this along a new last axis (or of 0-d arrays) runs as one program (the
#: reshapes and the concatenate in one ``call``), not one eager reshape per array: 5,000 arrays were 5,000 copy
#: kernels on opencl and webgpu. Along an axis of the arrays it is two equations (``_stacked``) and needs none.
_ONE_PROGRAM_ABOVE = 16
_STACK_PROGRAMS = LRUCache(16)   # (input avals, axis) -> the traced program


def _stack_program(arrays, ax, new):
    """``stack`` of concrete ``arrays`` as one ``call`` of a program traced once per signature: one compile
    and, on the kernel backends, the reshapes fused into the concatenate's kernels."""
    avals = tuple(a.aval for a in arrays)
    key = (avals, ax)
    prog = _STACK_PROGRAMS.get(key)
    if prog is None:
        def flat(*xs):
            return [_stacked(xs, ax, new)]
        prog, _ = trace_to_program(flat, avals, debug_name="stack")
        prog = _STACK_PROGRAMS.put(key, prog)
    return P.call.bind(*arrays, program=prog, name="stack")[0]


def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple of arrays of rank ``x.ndim - 1`` (array API)."""
    x = _arr(x)
    if x.ndim == 0:
        raise ShapeError("unstack needs an array of rank >= 1, got a 0-d array")
    ax = normalize_axis(axis, x.ndim, "unstack axis")
    rest = x.shape[:ax] + x.shape[ax + 1:]
    return tuple(lax.reshape(_slice_axis(x, i, i + 1, ax), rest) for i in range(x.shape[ax]))


def _atleast(nd, arrays):
    out = []
    for a in arrays:
        a = _arr(a)
        if a.ndim < nd:
            if nd == 3 and a.ndim == 2:
                a = lax.reshape(a, a.shape + (1,))
            elif nd == 3 and a.ndim == 1:
                a = lax.reshape(a, (1,) + a.shape + (1,))
            else:
                a = lax.reshape(a, (1,) * (nd - a.ndim) + a.shape)
        out.append(a)
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys):
    """Each input as an array of rank >= 1 (``numpy.atleast_1d``); one array or a list."""
    return _atleast(1, arys)


def atleast_2d(*arys):
    """Each input with rank >= 2; a 1-d ``(N,)`` becomes ``(1, N)`` (``numpy.atleast_2d``)."""
    return _atleast(2, arys)


def atleast_3d(*arys):
    """Each input with rank >= 3: ``(N,)`` -> ``(1, N, 1)``, ``(M, N)`` -> ``(M, N, 1)`` (``numpy.atleast_3d``)."""
    return _atleast(3, arys)


def _as_list(v):
    return v if isinstance(v, list) else [v]


def hstack(tup, dtype=None):
    """Arrays joined column-wise (``numpy.hstack``): along axis 0 for 1-d inputs, else axis 1."""
    arrs = _as_list(atleast_1d(*_seq_of_arrays(tup, "hstack")))
    return concatenate(arrs, axis=0 if arrs[0].ndim == 1 else 1, dtype=dtype)


def vstack(tup, dtype=None):
    """Arrays joined row-wise after ``atleast_2d`` (``numpy.vstack``)."""
    return concatenate(_as_list(atleast_2d(*_seq_of_arrays(tup, "vstack"))), axis=0, dtype=dtype)


def dstack(tup, dtype=None):
    """Arrays joined along the third axis after ``atleast_3d`` (``numpy.dstack``)."""
    return concatenate(_as_list(atleast_3d(*_seq_of_arrays(tup, "dstack"))), axis=2, dtype=dtype)


def column_stack(tup):
    """1-d arrays as columns of a 2-d array, other arrays joined along axis 1 (``numpy.column_stack``)."""
    arrs = []
    for a in _seq_of_arrays(tup, "column_stack"):
        arrs.append(lax.reshape(a, (a.size, 1)) if a.ndim < 2 else a)
    return concatenate(arrs, axis=1)


# ----------------------------------------------------------------------------- splitting


def _split_points(n, indices_or_sections, name, equal):
    """Start/stop pairs of the pieces of an axis of size ``n``."""
    if isinstance(indices_or_sections, (list, tuple, np.ndarray)) or (
            isinstance(indices_or_sections, Array) and indices_or_sections.ndim > 0):
        idx = _static_ints(indices_or_sections, f"{name} indices")
        bounds = [0] + list(idx) + [n]
        out = []
        for a, b in itertools.pairwise(bounds):
            start, stop, _ = slice(a, b).indices(n)
            out.append((start, max(start, stop)))
        return out
    sections = _static_int(indices_or_sections, f"{name} sections")
    if sections <= 0:
        raise ValueError(f"{name}: the number of sections must be > 0, got {sections}")
    if equal and n % sections:
        raise ShapeError(f"{name}: an axis of size {n} cannot be split into {sections} equal sections; "
                         "use array_split for unequal pieces")
    each, extra = divmod(n, sections)
    sizes = [each + 1] * extra + [each] * (sections - extra)
    starts = np.cumsum([0] + sizes[:-1]).tolist()
    return [(s, s + k) for s, k in zip(starts, sizes, strict=True)]


def _split(x, indices_or_sections, axis, name, equal):
    x = _arr(x)
    if x.ndim == 0:
        raise ShapeError(f"{name} needs an array of rank >= 1, got a 0-d array")
    ax = normalize_axis(axis, x.ndim, f"{name} axis")
    return [_slice_axis(x, a, b, ax) for a, b in _split_points(x.shape[ax], indices_or_sections, name, equal)]


def split(ary, indices_or_sections, axis=0):
    """``ary`` split along ``axis`` (``numpy.split``), as a list of arrays.

    ``indices_or_sections``: an int ``N`` (``N`` equal pieces; ``ShapeError`` if the axis size
    is not divisible) or a sequence of split points (Python slicing semantics, so points past
    the end give empty pieces).
    """
    return _split(ary, indices_or_sections, axis, "split", True)


def array_split(ary, indices_or_sections, axis=0):
    """``numpy.array_split``: as ``split``, but ``N`` sections may be unequal (the first ones longer)."""
    return _split(ary, indices_or_sections, axis, "array_split", False)


def hsplit(ary, indices_or_sections):
    """``numpy.hsplit``: ``split`` along axis 1 (axis 0 for 1-d arrays)."""
    ary = _arr(ary)
    if ary.ndim == 0:
        raise ShapeError("hsplit needs an array of rank >= 1")
    return split(ary, indices_or_sections, axis=1 if ary.ndim > 1 else 0)


def vsplit(ary, indices_or_sections):
    """``numpy.vsplit``: ``split`` along axis 0 of an array of rank >= 2."""
    ary = _arr(ary)
    if ary.ndim < 2:
        raise ShapeError(f"vsplit needs an array of rank >= 2, got shape {ary.shape}")
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    """``numpy.dsplit``: ``split`` along axis 2 of an array of rank >= 3."""
    ary = _arr(ary)
    if ary.ndim < 3:
        raise ShapeError(f"dsplit needs an array of rank >= 3, got shape {ary.shape}")
    return split(ary, indices_or_sections, axis=2)


# ----------------------------------------------------------------------------- reordering


def flip(x, axis=None):
    """``x`` with the order of elements reversed along ``axis`` (int, tuple, or ``None`` = all).

    Mirrors array API ``flip`` / ``numpy.flip``.
    """
    x = _arr(x)
    return lax.rev(x, normalize_axes(axis if axis is None else _static_ints(axis, "flip axis"),
                                     x.ndim, "flip axis"))


def fliplr(m):
    """``numpy.fliplr``: reverse axis 1 (rank >= 2)."""
    m = _arr(m)
    if m.ndim < 2:
        raise ShapeError(f"fliplr needs an array of rank >= 2, got shape {m.shape}")
    return lax.rev(m, (1,))


def flipud(m):
    """``numpy.flipud``: reverse axis 0 (rank >= 1)."""
    m = _arr(m)
    if m.ndim < 1:
        raise ShapeError("flipud needs an array of rank >= 1")
    return lax.rev(m, (0,))


def _roll_axis(x, shift, ax):
    n = x.shape[ax]
    if n == 0:
        return x
    if isinstance(shift, Tracer):
        if not dtypes.is_int(shift.dtype) or shift.ndim != 0:
            raise TypeError(f"roll: a traced shift must be an integer scalar, got {shift.aval.str_short()}")
        s = lax.convert_element_type(shift, dtypes.int32)
        s = lax.rem(s, np.int32(n))
        s = lax.select(lax.lt(s, np.int32(0)), lax.add(s, np.int32(n)), s)
        doubled = lax.concatenate([x, x], ax)
        starts = [np.int32(0)] * x.ndim
        starts[ax] = lax.sub(np.int32(n), s)
        sizes = list(x.shape)
        return lax.dynamic_slice(doubled, starts, sizes)
    s = _static_int(shift, "roll shift") % n
    if s == 0:
        return x
    return lax.concatenate([_slice_axis(x, n - s, n, ax), _slice_axis(x, 0, n - s, ax)], ax)


def roll(a, shift, axis=None):
    """``a`` with elements shifted cyclically by ``shift`` along ``axis`` (array API ``roll``; ``numpy.roll``).

    ``shift`` and ``axis`` are ints or sequences broadcast together; ``axis=None`` rolls the
    flattened array and restores the shape. A traced scalar ``shift`` is allowed (one
    ``dynamic_slice`` of the doubled axis), as in ``jax.numpy.roll``.

    Raises:
      TypeError: a traced ``shift`` that is not an integer scalar.
      ShapeError: ``shift`` and ``axis`` sequences of different lengths, or an axis out of range.
    """
    a = _arr(a)
    if axis is None:
        flat = lax.reshape(a, (a.size,))
        shifts = shift if isinstance(shift, (list, tuple)) else [shift]
        for s in shifts:
            flat = _roll_axis(flat, s, 0)
        return lax.reshape(flat, a.shape)
    axes = _static_ints(axis, "roll axis")
    shifts = list(shift) if isinstance(shift, (list, tuple)) else [shift]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(axes) != len(shifts):
        raise ShapeError(f"roll: shift {shift} and axis {axis} must have the same length (or one of them 1)")
    out = a
    for s, ax in zip(shifts, axes, strict=True):
        out = _roll_axis(out, s, normalize_axis(ax, a.ndim, "roll axis"))
    return out


def rot90(m, k=1, axes=(0, 1)):
    """``m`` rotated by 90 degrees ``k`` times in the plane ``axes`` (``numpy.rot90``).

    Raises ``ShapeError`` for rank < 2 or equal axes.
    """
    m = _arr(m)
    ax = _static_ints(axes, "rot90 axes")
    if len(ax) != 2 or m.ndim < 2:
        raise ShapeError(f"rot90 needs two axes of an array of rank >= 2, got axes {axes}, shape {m.shape}")
    a0, a1 = (normalize_axis(a, m.ndim, "rot90 axes") for a in ax)
    if a0 == a1:
        raise ShapeError(f"rot90: axes {axes} must be two different axes")
    k = _static_int(k, "rot90 k") % 4
    if k == 0:
        return m
    if k == 2:
        return lax.rev(m, (a0, a1) if a0 < a1 else (a1, a0))
    perm = list(range(m.ndim))
    perm[a0], perm[a1] = a1, a0
    if k == 1:
        return lax.transpose(lax.rev(m, (a1,)), perm)
    return lax.rev(lax.transpose(m, perm), (a1,))


def tile(A, reps):
    """``A`` repeated ``reps`` times along each axis (array API ``tile``; ``numpy.tile``).

    ``reps`` is an int or tuple of non-negative ints; the shorter of ``A.shape`` and
    ``reps`` is padded with leading ones. Result shape: ``A.shape[i] * reps[i]``. ``reps``
    must be static (Python ints), as in ``jax.numpy.tile``.

    Raises:
      ValueError: a negative entry in ``reps``.
    """
    A = _arr(A)
    reps = _static_ints(reps, "tile reps")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: reps must be non-negative, got {reps}")
    d = max(len(reps), A.ndim)
    shape = (1,) * (d - A.ndim) + A.shape
    reps = (1,) * (d - len(reps)) + reps
    wide = tuple(v for r, n in zip(reps, shape, strict=True) for v in (r, n))
    y = lax.broadcast_in_dim(lax.reshape(A, shape), wide, tuple(range(1, 2 * d, 2)))
    return lax.reshape(y, tuple(r * n for r, n in zip(reps, shape, strict=True)))


def _repeat_traced(x, repeats, ax, total):
    """``repeat`` with traced repeats and a static ``total`` length: position p takes the element
    whose cumulative end is the first one above p (the last element fills any tail)."""
    n = x.shape[ax]
    r = lax.convert_element_type(repeats, dtypes.int32)
    if r.shape == (1,) or r.ndim == 0:
        r = lax.broadcast_in_dim(lax.reshape(r, ()), (n,), ())
    elif r.shape != (n,):
        raise ShapeError(f"repeat: repeats of shape {r.shape} do not match axis {ax} of size {n}")
    ends = lax.cumsum(r, 0)
    pos = lax.iota(dtypes.int32, (total, n), 0)
    src = lax.reduce_sum(lax.convert_element_type(lax.le(lax.broadcast_in_dim(ends, (total, n), (1,)), pos),
                                                  dtypes.int32), (1,))
    return _take_static_axis(x, lax.reshape(src, (total, 1)), ax)


def _take_static_axis(x, idx_col, ax):
    """``x`` gathered along ``ax`` at the indices of the ``(m, 1)`` int32 array ``idx_col``."""
    g = lax.gather(x, idx_col, (ax,))
    return _move_front_to(g, 1, ax)


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Each element of ``a`` repeated along ``axis`` (array API ``repeat``; ``numpy.repeat``, ``jax.numpy.repeat``).

    Args:
      a: array; ``axis=None`` repeats the flattened array.
      repeats: a non-negative int (every element the same number of times), or an integer
        array of one count per element along ``axis`` (or of length 1). An array of counts
        decides the output length, so it must be concrete, unless ``total_repeat_length``
        gives the length: then counts may be traced; a shorter total truncates and a longer
        one repeats the last element (as JAX).

    Returns:
      An array of ``a``'s dtype.

    Raises:
      ConcretizationError: traced ``repeats`` array without ``total_repeat_length``.
      ValueError: negative repeats. ShapeError: counts of the wrong length.
    """
    a = _arr(a)
    if axis is None:
        a = lax.reshape(a, (a.size,))
        axis = 0
    ax = normalize_axis(axis, a.ndim, "repeat axis")
    n = a.shape[ax]
    if isinstance(repeats, Tracer):
        if total_repeat_length is None:
            raise ConcretizationError(
                f"repeat: traced repeats {repeats.aval.str_short()} decide the length of the result, which "
                "must be static under jit; pass total_repeat_length=<int> (the output length along the "
                "axis), or pass repeats as a Python int or a concrete array")
        if not dtypes.is_int(repeats.dtype):
            raise DTypeError(f"repeat: repeats must be integers, got {repeats.dtype.name}")
        return _repeat_traced(a, repeats, ax, _static_int(total_repeat_length, "total_repeat_length"))
    reps = np.asarray(repeats)
    if reps.dtype.kind not in "iu":
        raise DTypeError(f"repeat: repeats must be integers, got {reps.dtype}")
    if (reps < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative, got {reps.tolist()}")
    if reps.ndim == 0 or reps.shape == (1,):
        r = int(reps.reshape(()))
        if total_repeat_length is None:
            shape = a.shape[:ax + 1] + (r,) + a.shape[ax + 1:]
            dims = tuple(i for i in range(a.ndim + 1) if i != ax + 1)
            y = lax.broadcast_in_dim(a, shape, dims)
            return lax.reshape(y, a.shape[:ax] + (n * r,) + a.shape[ax + 1:])
        reps = np.full((n,), r)
    if reps.shape != (n,):
        raise ShapeError(f"repeat: repeats of shape {reps.shape} do not match axis {ax} of size {n} "
                         "(give one count per element, or a single count)")
    src = np.repeat(np.arange(n, dtype=np.int32), reps)
    if total_repeat_length is not None:
        total = _static_int(total_repeat_length, "total_repeat_length")
        src = np.concatenate([src[:total], np.full(max(0, total - src.size), n - 1, np.int32)])
    if n == 0:
        if src.size:
            raise ValueError(f"repeat: cannot fill {src.size} positions from an empty axis {ax}")
        return a
    return _take_static_axis(a, asarray_internal(src.reshape(-1, 1)), ax)


# ----------------------------------------------------------------------------- padding


def _pairs(v, ndim, what):
    arr = np.asarray(v)
    try:
        return np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ShapeError(f"pad: {what} of shape {arr.shape} does not broadcast to ({ndim}, 2) "
                         "(one (before, after) pair per axis)") from None


def _pad_source_index(n, before, after, mode):
    """For each position of a padded axis, the index of the element of the original axis it copies."""
    p = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(p, 0, n - 1)
    if mode == "wrap":
        return np.mod(p, n)
    if mode == "reflect":
        if n == 1:
            return np.zeros_like(p)
        q = np.mod(p, 2 * n - 2)
        return np.where(q < n, q, 2 * n - 2 - q)
    q = np.mod(p, 2 * n)  # symmetric: the edge element is repeated
    return np.where(q < n, q, 2 * n - 1 - q)


_PAD_MODES = ("constant", "empty", "edge", "reflect", "symmetric", "wrap")


def _pad_value(v, d):
    if isinstance(v, Array):
        if v.ndim != 0:
            raise ShapeError(f"pad: an array constant value must be 0-d, got shape {v.shape}")
        return lax.convert_element_type(v, d)
    with np.errstate(all="ignore"):
        return np.asarray(v).astype(d)[()]


def pad(array, pad_width, mode="constant", *, constant_values=0, reflect_type="even"):
    """``array`` padded along each axis (``numpy.pad``).

    Args:
      array: array of any rank.
      pad_width: static ints broadcast to ``(ndim, 2)`` (before, after) pairs: ``k``,
        ``(before, after)`` or one pair per axis; all ``>= 0``.
      mode: ``"constant"`` (fill with ``constant_values``), ``"empty"`` (filled with 0 here),
        ``"edge"``, ``"reflect"`` (mirror without the edge), ``"symmetric"`` (mirror with the
        edge) or ``"wrap"`` (periodic).
      constant_values: scalar (possibly a traced 0-d array) or per-axis pairs, cast to the
        array's dtype; later axes' values fill the corners, as NumPy.
      reflect_type: only ``"even"``.

    Returns:
      An array of ``array``'s dtype with each axis ``before + n + after`` long.

    Raises:
      ValueError: unknown mode, negative widths, or a non-constant mode extending an empty axis.
      ShapeError: ``pad_width`` does not broadcast to ``(ndim, 2)``.
    """
    x = _arr(array)
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: mode {mode!r} is not supported; use one of {', '.join(_PAD_MODES)}")
    if reflect_type != "even":
        raise ValueError(f"pad: only reflect_type='even' is supported, got {reflect_type!r}")
    if isinstance(pad_width, Tracer):
        _static_int(pad_width, "pad width")
    widths = _pairs(pad_width, x.ndim, "pad_width")
    if widths.dtype.kind not in "iu":
        raise TypeError(f"pad: pad_width must hold ints, got {widths.dtype}")
    if (widths < 0).any():
        raise ValueError(f"pad: pad_width must be non-negative, got {widths.tolist()}")
    widths = [(int(b), int(a)) for b, a in widths]
    if mode in ("constant", "empty"):
        if mode == "empty":
            constant_values = 0
        if isinstance(constant_values, Array) or np.ndim(constant_values) == 0:
            v = _pad_value(constant_values, x.dtype)
            return lax.pad(x, v, [(b, a, 0) for b, a in widths])
        values = _pairs(constant_values, x.ndim, "constant_values")
        out = x
        for ax, ((b, a), (vb, va)) in enumerate(zip(widths, values, strict=True)):
            for width, val, before in ((b, vb, True), (a, va, False)):
                if width:
                    cfg = [(0, 0, 0)] * x.ndim
                    cfg[ax] = (width, 0, 0) if before else (0, width, 0)
                    out = lax.pad(out, _pad_value(val, x.dtype), cfg)
        return out
    out = x
    for ax, (b, a) in enumerate(widths):
        if b == 0 and a == 0:
            continue
        n = x.shape[ax]
        if n == 0:
            raise ValueError(f"pad: cannot extend the empty axis {ax} with mode {mode!r}; "
                             "use mode='constant' (or 'empty')")
        src = _pad_source_index(n, b, a, mode).astype(np.int32)
        out = _take_static_axis(out, asarray_internal(src.reshape(-1, 1)), ax)
    return out


# ----------------------------------------------------------------------------- where / select


def _as_bool(c):
    c = _arr(c)
    if c.dtype == dtypes.bool_:
        return c
    return lax.ne(c, np.asarray(0, c.dtype)[()])


def where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (``numpy.where``, array API ``where``).

    Args:
      condition: array (non-bool values count as ``!= 0``).
      x, y: arrays or scalars, promoted to one dtype (JAX's promotion; Python scalars are weak).
      size, fill_value: only for the one-argument form (see below).

    Returns:
      Three arguments: an array of the broadcast shape of all three and the promoted dtype.
      One argument: ``nonzero(condition)``, a tuple of int32 index arrays. Its length depends
      on the data, so it needs a concrete ``condition`` unless a static ``size`` is given.

    Raises:
      TypeError: only one of ``x``, ``y`` given.
      ShapeError: shapes that do not broadcast.
      ConcretizationError: one-argument form on a traced condition without ``size``.
    """
    if x is None and y is None:
        return _sorting.nonzero(_arr(condition), size=size, fill_value=fill_value)
    if x is None or y is None:
        raise TypeError("where takes one argument (condition) or three (condition, x, y), not two")
    if size is not None or fill_value is not None:
        raise TypeError("where: size and fill_value apply to the one-argument form only")
    c = _as_bool(condition)
    x, y = (v if isinstance(v, (Array, np.ndarray)) or is_scalar(v) else _arr(v) for v in (x, y))
    d, weak = dtypes.result_type(*[(av.dtype, av.weak_type) for av in (aval_of(x), aval_of(y))])
    x, y = promote("where", x, y)
    shape = _broadcast_shapes(c.shape, aval_of(x).shape, aval_of(y).shape, name="where")
    # scalars become arrays of the full shape here (broadcast_in_dim of a literal)
    cases = [lax.broadcast_in_dim(v, shape, ()) if is_scalar(v) else broadcast_to(v, shape) for v in (y, x)]
    if c.shape != () and c.shape != shape:
        c = broadcast_to(c, shape)
    out = lax.select_n(c, *cases)
    if out.weak_type != weak:
        out = lax.convert_element_type(out, d, weak_type=weak)
    return out


def select(condlist, choicelist, default=0):
    """``choicelist[i]`` where ``condlist[i]`` is the first true condition, else ``default``.

    Mirrors ``numpy.select``. Conditions must be bool arrays; the choices and ``default``
    are promoted to one dtype and everything broadcasts to one shape.

    Raises ``ValueError`` for lists of different lengths or empty lists, ``DTypeError`` for
    non-bool conditions.
    """
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError(f"select: condlist ({len(condlist)}) and choicelist ({len(choicelist)}) "
                         "must have the same length")
    if not condlist:
        raise ValueError("select needs at least one condition")
    conds = [_arr(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != dtypes.bool_:
            raise DTypeError(f"select: condition {i} has dtype {c.dtype.name}; conditions must be bool "
                             "(compare explicitly, e.g. x != 0)")
    out = default
    for c, v in zip(reversed(conds), reversed(choicelist), strict=True):
        out = where(c, v, out)
    return out


# ----------------------------------------------------------------------------- Array methods


def _copy(self):
    """``Array.copy``: an array with the same value in a buffer of its own."""
    return P.copy_p.bind(_arr(self))


def _rsqrt_method(self):
    """``Array.rsqrt`` (``mlx.core.array.rsqrt``, ``jax.lax.rsqrt``): ``1 / sqrt(self)`` elementwise; integer and
    bool arrays are promoted to the default float first, as ``sqrt`` promotes them."""
    x = _arr(self)
    if not dtypes.is_inexact(x.dtype):
        x = lax.convert_element_type(x, dtypes.to_inexact(x.dtype), weak_type=x.weak_type)
    return lax.rsqrt(x)


def _mlx_cumulative(primitive, name):
    """An ``mlx.core.array`` cumulative method ``(axis=None, *, reverse=False, inclusive=True)``: over the flattened
    array when ``axis`` is None, by ``lax``'s ``primitive``."""

    def method(self, axis=None, *, reverse=False, inclusive=True):
        if not inclusive:
            raise ValueError(f"x.{name}(inclusive=False) is not supported: take the inclusive result and shift it "
                             "by one along the axis (fnp.concatenate with the identity in front)")
        x = _arr(self)
        if axis is None:
            x, axis = ravel(x), 0
        return getattr(lax, primitive)(x, axis, reverse)

    method.__name__ = f"_{name}_method"
    method.__doc__ = f"``Array.{name}`` (``mlx.core.array.{name}(axis=None, *, reverse=False)``, ``lax.{primitive}``)."
    return method


_cummax_method = _mlx_cumulative("cummax", "cummax")
_cummin_method = _mlx_cumulative("cummin", "cummin")
_logcumsumexp_method = _mlx_cumulative("cumlogsumexp", "logcumsumexp")


def _view(self, dtype=None):
    """``Array.view``: the same bits reinterpreted as ``dtype`` of the same width (a bitcast).

    Raises ``DTypeError`` when the widths differ (views that change the last axis' length
    are not supported).
    """
    x = _arr(self)
    if dtype is None:
        return x
    d = dtypes.canonicalize(dtype)
    if d.itemsize != x.dtype.itemsize:
        raise DTypeError(f"view: {x.dtype.name} ({x.dtype.itemsize} bytes) cannot be viewed as {d.name} "
                         f"({d.itemsize} bytes); only views between dtypes of one width are supported "
                         "(use lax.bitcast_convert_type on a reshaped array)")
    if d == x.dtype:
        return x
    return lax.bitcast_convert_type(x, d)


_util.stack = stack  # asarray of a list holding arrays (the one implementation of stack)
