"""``lax.reduce_window`` and its shortcuts (as ``jax.lax``), over the primitives of ``fnarray.core.windows``.

Re-exported by ``fnarray.lax``. ``reduce_window`` recognises its ``computation`` by tracing it once on two
scalars of the operand's dtype: ``lax.add``, ``lax.max``, ``lax.min``, ``fnarray.numpy.add`` / ``maximum`` /
``minimum``, ``operator.add`` or a lambda that does the same all become the matching primitive; anything else
(a product, a general callable, a pytree of operands) is rejected with an error that says what is supported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from fnarray.core import dtypes
from fnarray.core import lax
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.core.conv import padtype_to_pads  # one definition (fnarray.lax exports it from lax_conv)
from fnarray.core.avals import asarray, get_aval
from fnarray.core.errors import ShapeError, check_callable
from fnarray.core.ir import Var
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import is_scalar

__all__ = ["reduce_window", "reduce_window_sum", "reduce_window_max", "reduce_window_min"]

_MAX_TAPS = 1024  # window taps of the general composite: each is a slice and a computation in the program


def _ints(name, value, rank, default):
    if value is None:
        return (default,) * rank
    if isinstance(value, (int, np.integer)) or not isinstance(value, Sequence):
        raise ShapeError(f"reduce_window: {name} must be a sequence of {rank} ints (one per operand "
                         f"dimension), got {value!r}")
    out = tuple(int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v for v in value)
    if len(out) != rank:
        raise ShapeError(f"reduce_window: {name} has {len(out)} entries for an operand of rank {rank}: {value!r}")
    return out


def _window(operand_shape, window_dimensions, window_strides, padding, base_dilation, window_dilation):
    """Normalised static params of the primitives; errors name the argument."""
    rank = len(operand_shape)
    wd = _ints("window_dimensions", window_dimensions, rank, 1)
    ws = _ints("window_strides", window_strides, rank, 1)
    bd = _ints("base_dilation", base_dilation, rank, 1)
    wdil = _ints("window_dilation", window_dilation, rank, 1)
    if isinstance(padding, str):
        if all(isinstance(v, int) and v >= 1 for v in wd + ws + wdil):
            dilated = [W.dilate_dim(w, d) for w, d in zip(wd, wdil, strict=True)]
            pads = tuple(tuple(p) for p in padtype_to_pads(operand_shape, dilated, ws, padding))
        else:
            pads = padtype_to_pads(operand_shape, (1,) * rank, (1,) * rank, padding)  # checks the string
            pads = tuple(tuple(p) for p in pads)
    else:
        try:
            pads = tuple((int(lo), int(hi)) for lo, hi in padding)
        except (TypeError, ValueError):
            raise ShapeError(f"reduce_window: padding must be 'VALID', 'SAME', 'SAME_LOWER' or a sequence of "
                             f"{rank} (lo, hi) int pairs, got {padding!r}") from None
    params = dict(window_dimensions=wd, window_strides=ws, padding=pads, base_dilation=bd,
                  window_dilation=wdil)
    W.window_out_shape("reduce_window", operand_shape, **params)  # the bad-input errors, before binding
    return params


@functools.lru_cache(maxsize=256)
def binary_primitive(computation, dtype):
    """The primitive ``computation(a, b)`` is, on two scalars of ``dtype``, where it is exactly one binary primitive
    of ``a`` and ``b`` (``fnarray.lax.add``, ``fnp.maximum``, ``operator.mul``, ``lambda a, b: a & b``...);
    else ``None`` (traced once per computation and dtype)."""
    from fnarray.core.builder import trace_to_program  # noqa: PLC0415 (builder imports tracing machinery)
    aval = ShapedArray((), dtype)
    try:
        prog, _ = trace_to_program(lambda a, b: [computation(a, b)], [aval, aval], debug_name="computation")
    except Exception:  # noqa: BLE001 (any failure means: not one of the computations we know)
        return None
    if len(prog.eqns) != 1 or len(prog.outvars) != 1:
        return None
    eqn = prog.eqns[0]
    if not isinstance(prog.outvars[0], Var) or prog.outvars[0] is not eqn.outputs[0] or len(eqn.inputs) != 2:
        return None
    if sorted(map(id, eqn.inputs)) != sorted(map(id, prog.invars)):
        return None
    return eqn.primitive


def _monoid(computation, dtype) -> str | None:
    """``"add"``, ``"max"`` or ``"min"`` if ``computation(a, b)`` on two scalars of ``dtype`` is exactly that
    one primitive of ``a`` and ``b``; else ``None``."""
    return {P.add: "add", P.max_p: "max", P.min_p: "min"}.get(binary_primitive(computation, dtype))


def _computation_name(computation) -> str:
    return getattr(computation, "__qualname__", None) or getattr(computation, "__name__", None) or repr(computation)


def _is_identity(init, op, d) -> bool:
    """Whether ``init`` is known here to be ``op``'s identity in dtype ``d`` (then no extra step is needed)."""
    if not (is_scalar(init) or isinstance(init, np.ndarray)):
        return False
    v = np.asarray(init)
    if v.shape != ():
        return False
    v = v.item()
    if op == "add":
        return v == 0
    if dtypes.is_int(d):
        info = dtypes.iinfo(d)
        return v <= info.min if op == "max" else v >= info.max
    return v == (-math.inf if op == "max" else math.inf)


def _apply(operand, init_value, op, params):
    x_aval = get_aval(operand)
    d = x_aval.dtype
    out = W.REDUCE_WINDOW[op].bind(operand, **params)
    if _is_identity(init_value, op, d):
        return out
    init = np.asarray(init_value).astype(d)[()] if is_scalar(init_value) else lax.convert_element_type(init_value, d)
    if get_aval(init).shape != ():
        raise ShapeError(f"reduce_window: init_value must be a scalar, got shape {get_aval(init).shape}")
    if op == "max":
        return lax.max(out, init)  # a rank-0 operand broadcasts
    if op == "min":
        return lax.min(out, init)
    return lax.add(out, init)  # as XLA runs it: init once per window; padding and holes add nothing


def _as_operand(x):
    return asarray(x) if isinstance(x, (np.ndarray, np.generic, list)) else x


def reduce_window(operand, init_value, computation, window_dimensions, window_strides=None, padding="VALID",
                  base_dilation=None, window_dilation=None):
    """Reduction over padded, dilated windows (as ``jax.lax.reduce_window``): sums, maxima and minima as one
    primitive each, any other computation as a composite.

    Args:
      operand: an array of any rank ``r``.
      init_value: a scalar. Each window's reduction starts from it, once (as XLA runs ReduceWindow; padding
        and the holes of ``base_dilation`` add nothing). Usually the identity: ``0`` for ``add``, ``-inf``
        (or the dtype's lowest value) for ``max``, ``inf`` for ``min``; other values are honoured.
      computation: ``fnarray.lax.add``, ``max`` or ``min`` (or ``fnarray.numpy.add`` / ``maximum`` /
        ``minimum``, ``operator.add``, or a function that computes one of them on two scalars): one primitive.
        Any other function of two scalars (``lax.mul``, ``fnp.logaddexp``, ``lambda a, b: a * b``...) runs as
        JAX runs it: each window folded from ``init_value`` over its taps on operand elements (padding adds
        nothing), as one strided slice and one ``computation`` call per window tap (it must be elementwise,
        and associative and commutative for the result not to depend on the order, as in JAX).
      window_dimensions: ``r`` ints >= 1, the window's extent along each dimension.
      window_strides: ``r`` ints >= 1 (default all 1).
      padding: ``"VALID"``, ``"SAME"``, ``"SAME_LOWER"`` (see ``padtype_to_pads``, computed from the dilated
        window) or ``r`` ``(lo, hi)`` pairs (negative values crop).
      base_dilation: ``r`` ints >= 1: ``d - 1`` holes between neighbouring operand elements (default 1).
      window_dilation: ``r`` ints >= 1: ``d - 1`` holes between neighbouring window taps (default 1).

    Returns:
      An array of the operand's dtype; along each dimension ``(padded - dilated_window) // stride + 1``
      elements.

    Raises:
      TypeError: ``computation`` is not callable or not elementwise, or ``operand`` is a pytree.
      ValueError: a computation other than add/max/min over a window of more than 1024 taps.
      ShapeError: (a ``ValueError``) wrong-length tuples, strides or dilations <= 0, an unknown padding
        string, a window larger than the padded operand.
      DTypeError: a dtype the reduction does not accept (bool sums, complex max/min).

    Example:
      >>> import fnarray.numpy as fnp
      >>> from fnarray import lax
      >>> lax.reduce_window(fnp.arange(6.0), 0.0, lax.add, (2,), (2,)).tolist()
      [1.0, 5.0, 9.0]
    """
    if isinstance(operand, (tuple, dict)):
        raise TypeError("reduce_window takes one array here; JAX's variadic form (a pytree of operands) is not "
                        "supported: call reduce_window once per array")
    operand = _as_operand(operand)
    aval = get_aval(operand)
    check_callable(computation, "reduce_window", "computation (a function of two scalars: fnarray.lax.add, max, "
                   "min, mul or your own)")
    op = _monoid(computation, aval.dtype)
    params = _window(aval.shape, window_dimensions, window_strides, padding, base_dilation, window_dilation)
    if op is None:
        return _general(operand, init_value, computation, params)
    return _apply(operand, init_value, op, params)


def _valid_mask(shape, config):
    """Which elements of the padded, base-dilated operand are the operand's (padding and holes are not)."""
    axes = []
    for n, (lo, hi, interior) in zip(shape, config, strict=True):
        size = lo + hi + n + max(n - 1, 0) * interior
        keep = np.zeros(max(size, 0), bool)
        pos = lo + np.arange(n) * (interior + 1)
        keep[pos[(pos >= 0) & (pos < size)]] = True
        axes.append(keep)
    rank = len(axes)
    mask = np.ones((), bool)
    for i, keep in enumerate(axes):       # the outer product of the per-axis masks
        mask = mask & keep.reshape((1,) * i + (-1,) + (1,) * (rank - i - 1))
    return mask


def _general(operand, init_value, computation, params):
    """``reduce_window`` with any other ``computation`` (a product, ``logaddexp``, a function of your own), as
    JAX runs it: each window folded from ``init_value`` over the taps that fall on operand elements (padding and
    base-dilation holes add nothing, as on the add/max/min paths). Written as one strided slice per window tap
    folded with ``computation`` on whole arrays (a ``select`` keeps the fold where a tap falls on padding; the
    function must be elementwise, as one written on two scalars with fnarray's operations is), so
    ``grad``/``vmap``/``jit`` follow; it costs a slice and a ``computation`` per tap."""
    aval = get_aval(operand)
    d = aval.dtype
    init = np.asarray(init_value).astype(d)[()] if is_scalar(init_value) else lax.convert_element_type(init_value, d)
    if get_aval(init).shape != ():
        raise ShapeError(f"reduce_window: init_value must be a scalar, got shape {get_aval(init).shape}")
    out_shape = W.window_out_shape("reduce_window", aval.shape, **params)
    taps = math.prod(params["window_dimensions"])
    if taps > _MAX_TAPS:
        raise ValueError(f"reduce_window: a computation other than add/max/min runs one step per window tap, and "
                         f"window_dimensions {params['window_dimensions']} has {taps} taps (at most {_MAX_TAPS}). "
                         "Use add, max or min (a product of positive values is exp of a window sum of logs), or "
                         "reduce in stages (two windows whose product is this one, with strides)")
    acc = lax.full(out_shape, init, d)
    if 0 in out_shape:
        return acc
    config = [(lo, hi, b - 1) for (lo, hi), b in zip(params["padding"], params["base_dilation"], strict=True)]
    padded = lax.pad(operand, lax.convert_element_type(init, d), config)
    valid = _valid_mask(aval.shape, config)
    strides = params["window_strides"]
    for tap in np.ndindex(*params["window_dimensions"]):
        starts = [int(t) * wd for t, wd in zip(tap, params["window_dilation"], strict=True)]
        limits = [s0 + (n - 1) * st + 1 for s0, n, st in zip(starts, out_shape, strides, strict=True)]
        index = tuple(slice(a, b, c) for a, b, c in zip(starts, limits, strides, strict=True))
        if not valid[index].any():
            continue
        folded = computation(acc, lax.slice(padded, starts, limits, strides))
        acc = folded if valid[index].all() or get_aval(folded).shape != tuple(out_shape) else \
            lax.select(asarray(np.ascontiguousarray(valid[index])), folded, acc)
        got = get_aval(acc)
        if got.shape != tuple(out_shape) or got.dtype != d:
            raise TypeError(f"reduce_window: computation {_computation_name(computation)} must return one value "
                            f"of its operands' dtype {d.name} per pair (elementwise), got {got.dtype.name}"
                            f"{list(got.shape)} from two {d.name}{list(out_shape)} arrays")
    return acc


def _shortcut(op, what):
    def f(operand, window_dimensions, window_strides=None, padding="VALID", base_dilation=None,
          window_dilation=None):
        operand = _as_operand(operand)
        aval = get_aval(operand)
        params = _window(aval.shape, window_dimensions, window_strides, padding, base_dilation, window_dilation)
        return W.REDUCE_WINDOW[op].bind(operand, **params)
    f.__name__ = f.__qualname__ = f"reduce_window_{what}"
    f.__doc__ = (f"``reduce_window`` with ``{op}`` and its identity as ``init_value`` (one primitive, "
                 f"``reduce_window_{what}``); the other arguments as ``reduce_window``'s.")
    return f


reduce_window_sum = _shortcut("add", "sum")
reduce_window_max = _shortcut("max", "max")
reduce_window_min = _shortcut("min", "min")
