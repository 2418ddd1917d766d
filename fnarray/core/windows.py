"""Windowed reductions: the primitives of ``lax.reduce_window`` and of its max/min gradients (as ``jax.lax``).

Every primitive here takes the same static window parameters, with JAX's names:

- ``window_dimensions``: the window's extent along every operand dimension (a tuple of ints >= 1);
- ``window_strides``: how far the window moves along every dimension (ints >= 1);
- ``padding``: one ``(lo, hi)`` pair per dimension, added around the (base-dilated) operand; negative
  values crop;
- ``base_dilation``: the operand is dilated first, ``d - 1`` holes between neighbouring elements (ints >= 1);
- ``window_dilation``: ``d - 1`` holes between neighbouring window taps (ints >= 1).

Along one dimension of size ``n`` the padded extent is ``lo + hi + dilate(n, base_dilation)`` with
``dilate(n, d) = 0 if n == 0 else 1 + d * (n - 1)``, the window covers ``dilate(w, window_dilation)``
elements, and the output has ``(padded - window) // stride + 1`` elements. A window larger than a
non-empty padded extent is an error (JAX returns an empty result there, which is almost always a mistake);
an empty padded extent gives an empty output.

The holes and the padding hold the reduction's identity (0 for a sum, the dtype's lowest value for a max,
its highest for a min), so they never win.

``select_and_gather_add(tangents, operand, select_prim=...)`` is JAX's JVP of ``reduce_window_max``
(``select_prim=ge``) or ``_min`` (``le``): for every window, the tangent at the window's *first* maximal
(minimal) element of ``operand``, in row-major order of the window taps; a NaN counts as maximal (minimal),
so the first NaN of a window is selected, as NaN propagates through the reduction. Padding and holes are
never selected unless the whole window is padding, and then they contribute 0.
``select_and_scatter_add(source, operand, select_prim=...)`` is its transpose: each element of ``source``
(one per window) is added to the operand position that the same rule selects, as XLA's
``SelectAndScatter`` does; positions selected by no window get 0. Both are linear in their first
argument, so gradients of any order follow. Unlike JAX's, both take ``base_dilation`` and
``window_dilation``, so max pooling with dilated windows is differentiable in reverse mode too.
"""

from __future__ import annotations

import itertools

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.conv import dilate_dim  # one definition, shared with the convolutions
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["reduce_window_sum_p", "reduce_window_max_p", "reduce_window_min_p", "select_and_gather_add_p",
           "select_and_scatter_add_p", "REDUCE_WINDOW", "WINDOW_PRIMITIVES", "dilate_dim", "window_out_shape",
           "SELECT_PRIMS", "tap_slices"]


def tap_slices(out_shape, window_dimensions, window_strides, window_dilation):
    """For every window tap (row-major), the slices of the padded operand it reads, of shape ``out_shape``."""
    for tap in itertools.product(*(range(w) for w in window_dimensions)):
        yield tuple(slice(k * wd, k * wd + (m - 1) * s + 1, s) if m else slice(0, 0)
                    for k, wd, s, m in zip(tap, window_dilation, window_strides, out_shape, strict=True))


def _int_tuple(name, what, value, rank, minimum):
    if (not isinstance(value, tuple) or len(value) != rank
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ShapeError(f"{name}: {what} must be a tuple of {rank} ints (one per operand dimension), "
                         f"got {value!r}")
    if minimum is not None and any(v < minimum for v in value):
        raise ShapeError(f"{name}: every element of {what} must be >= {minimum}, got {value}")


def window_out_shape(name, shape, *, window_dimensions, window_strides, padding, base_dilation,
                     window_dilation):
    """The output shape of a window reduction over ``shape``; ``ShapeError`` naming the bad argument."""
    rank = len(shape)
    _int_tuple(name, "window_dimensions", window_dimensions, rank, 1)
    _int_tuple(name, "window_strides", window_strides, rank, 1)
    _int_tuple(name, "base_dilation", base_dilation, rank, 1)
    _int_tuple(name, "window_dilation", window_dilation, rank, 1)
    if (not isinstance(padding, tuple) or len(padding) != rank
            or not all(isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, int) for v in p)
                       for p in padding)):
        raise ShapeError(f"{name}: padding must be a tuple of {rank} (lo, hi) int pairs (one per operand "
                         f"dimension), got {padding!r}")
    out = []
    for i, (n, w, s, (lo, hi), bd, wd) in enumerate(zip(shape, window_dimensions, window_strides, padding,
                                                         base_dilation, window_dilation, strict=True)):
        padded = lo + hi + dilate_dim(n, bd)
        window = dilate_dim(w, wd)
        if padded < 0:
            raise ShapeError(f"{name}: padding {(lo, hi)} of dimension {i} crops more than its "
                             f"{dilate_dim(n, bd)} elements (operand shape {tuple(shape)})")
        if padded == 0:
            out.append(0)
            continue
        if window > padded:
            raise ShapeError(
                f"{name}: the window of dimension {i} covers {window} elements (window_dimensions[{i}]={w}, "
                f"window_dilation[{i}]={wd}) but the padded operand has only {padded} there (size {n}, "
                f"padding {(lo, hi)}, base_dilation {bd}); use a smaller window or more padding")
        out.append((padded - window) // s + 1)
    return tuple(out)


def _reduce_window_rule(name, accepts, what):
    def rule(x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
        if not accepts(x.dtype):
            raise DTypeError(f"{name} accepts {what}, got {x.dtype.name}")
        shape = window_out_shape(name, x.shape, window_dimensions=window_dimensions,
                                 window_strides=window_strides, padding=padding, base_dilation=base_dilation,
                                 window_dilation=window_dilation)
        return ShapedArray(shape, x.dtype, x.weak_type)
    return rule


def _numeric(d):
    return not dtypes.is_bool(d)


def _real(d):
    return not dtypes.is_complex(d)


_DOC = ("Window reduction ({}) of the base-dilated, padded operand; padding and holes hold {}. "
        "See fnarray.core.windows for the parameters.")
reduce_window_sum_p = Primitive(
    "reduce_window_sum", _reduce_window_rule("reduce_window_sum", _numeric, "numeric dtypes (not bool)"),
    kind="other", doc=_DOC.format("sum; integers wrap", "0"))
reduce_window_max_p = Primitive(
    "reduce_window_max", _reduce_window_rule("reduce_window_max", _real, "real dtypes (not complex)"),
    kind="other", doc=_DOC.format("max; NaN propagates", "the dtype's lowest value (-inf for floats)"))
reduce_window_min_p = Primitive(
    "reduce_window_min", _reduce_window_rule("reduce_window_min", _real, "real dtypes (not complex)"),
    kind="other", doc=_DOC.format("min; NaN propagates", "the dtype's highest value (+inf for floats)"))

#: "add" / "max" / "min" -> its window-reduction primitive.
REDUCE_WINDOW = {"add": reduce_window_sum_p, "max": reduce_window_max_p, "min": reduce_window_min_p}

#: The comparison that selects a window's element: ``ge`` for max (gradient of reduce_window_max), ``le`` for min.
SELECT_PRIMS = (P.ge, P.le)


def _check_select(name, select_prim, operand):
    if select_prim not in SELECT_PRIMS:
        raise ValueError(f"{name}: select_prim must be the primitive ge (max) or le (min), got {select_prim!r}")
    if dtypes.is_complex(operand.dtype) or dtypes.is_bool(operand.dtype):
        raise DTypeError(f"{name}: the operand must be real numeric, got {operand.dtype.name}")


def _select_and_gather_add_rule(tangents, operand, *, select_prim, **window):
    name = "select_and_gather_add"
    _check_select(name, select_prim, operand)
    if tangents.shape != operand.shape:
        raise ShapeError(f"{name}: tangents {tangents.shape} and operand {operand.shape} must have one shape")
    if not dtypes.is_inexact(tangents.dtype):
        raise DTypeError(f"{name}: tangents must be floating, got {tangents.dtype.name}")
    return ShapedArray(window_out_shape(name, operand.shape, **window), tangents.dtype, tangents.weak_type)


def _select_and_scatter_add_rule(source, operand, *, select_prim, **window):
    name = "select_and_scatter_add"
    _check_select(name, select_prim, operand)
    want = window_out_shape(name, operand.shape, **window)
    if source.shape != want:
        raise ShapeError(f"{name}: source has shape {source.shape}; the windows of operand {operand.shape} "
                         f"give {want}")
    if not dtypes.is_inexact(source.dtype):
        raise DTypeError(f"{name}: source must be floating, got {source.dtype.name}")
    return ShapedArray(operand.shape, source.dtype, source.weak_type)


select_and_gather_add_p = Primitive(
    "select_and_gather_add", _select_and_gather_add_rule, kind="other",
    doc=("(tangents, operand) -> per window, tangents at the first maximal (select_prim=ge) or minimal (le) "
         "element of operand; a NaN counts as maximal/minimal. The JVP of reduce_window_max/min."))
select_and_scatter_add_p = Primitive(
    "select_and_scatter_add", _select_and_scatter_add_rule, kind="other",
    doc=("(source, operand) -> operand-shaped sum of each window's source value at the element that "
         "select_and_gather_add selects (the first maximal/minimal one, as XLA); the transpose of "
         "select_and_gather_add in its first argument."))

WINDOW_PRIMITIVES = (reduce_window_sum_p, reduce_window_max_p, reduce_window_min_p, select_and_gather_add_p,
                     select_and_scatter_add_p)
