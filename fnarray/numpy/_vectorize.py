"""Functions that map a Python function over an array: ``vectorize``, ``apply_along_axis``, ``piecewise``.

As ``jax.numpy``, each is built on ``vmap`` (or an elementwise select), so the function is traced once and
runs as one program, not called per element as NumPy does. Sources: the NumPy reference (the generalized
ufunc signature of ``numpy.vectorize``) and ``jax.numpy.vectorize``'s documented behaviour; the tests compare
with NumPy and JAX.
"""

from __future__ import annotations

import functools
import operator
import re

from fnarray.core.errors import ShapeError, check_callable
from fnarray.numpy._util import normalize_axis
from fnarray.transforms.batching import vmap

__all__ = ["vectorize", "apply_along_axis", "piecewise"]

_DIMS = r"\((?:\w+(?:,\s*\w+)*)?\)"
_SIGNATURE = re.compile(rf"^\s*({_DIMS}(?:,\s*{_DIMS})*)\s*->\s*({_DIMS}(?:,\s*{_DIMS})*)\s*$")


def _np():
    from fnarray import numpy as fnp
    return fnp


def _parse_signature(signature):
    """``"(m,n),(n)->(m)"`` -> ``([("m", "n"), ("n",)], [("m",)])``; ``ValueError`` if malformed."""
    m = _SIGNATURE.match(signature)
    if m is None:
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r} (e.g. '(n),(n)->()')")

    def groups(text):
        return [tuple(d.strip() for d in g.split(",") if d.strip()) for g in re.findall(r"\(([^)]*)\)", text)]

    return groups(m.group(1)), groups(m.group(2))


def _bind_core_dims(arrays, in_core, sizes):
    """Check each array has its core dims (trailing axes) and that a named dim has one size everywhere."""
    for i, (a, core) in enumerate(zip(arrays, in_core, strict=True)):
        if a.ndim < len(core):
            raise ShapeError(f"vectorize: argument {i} of shape {tuple(a.shape)} has fewer axes than its core "
                             f"dimensions {core}")
        for name, n in zip(core, a.shape[a.ndim - len(core):], strict=True):
            if sizes.setdefault(name, n) != n:
                raise ShapeError(f"vectorize: core dimension {name!r} is {sizes[name]} in one argument and {n} in "
                                 f"argument {i}")


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """``pyfunc`` mapped over the leading (loop) axes of its array arguments (``numpy.vectorize``,
    ``jax.numpy.vectorize``), by ``vmap``: traced once on one element (or core block), not called per element.

    Args:
      pyfunc: the function of the core (per-element) arguments.
      excluded: positions (ints) or keyword names (strs) of arguments passed through as they are.
      signature: a generalized ufunc signature such as ``"(n),(n)->()"`` or ``"(m,n)->(m),(n)"``: each
        argument's trailing axes given to ``pyfunc``; None: every argument is a scalar core.

    Returns:
      The vectorized function. Its arguments' loop axes broadcast together; its result (or each result, for
      several outputs) has the loop shape followed by the output core dims.

    Raises:
      ValueError: a malformed signature, or a call with another number of mapped arguments than it names.
      ShapeError: an argument lacks its core axes, a core dim's sizes disagree, or the loop shapes do not
        broadcast; a result whose core axes disagree with the signature.
    """
    fnp = _np()
    check_callable(pyfunc, "vectorize", "pyfunc")
    excluded = frozenset(excluded)
    parsed = None if signature is None else _parse_signature(signature)

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        fixed_kw = {k: v for k, v in kwargs.items() if k in excluded}
        mapped_kw = sorted(k for k in kwargs if k not in excluded)
        slots = [i for i in range(len(args)) if i not in excluded]
        arrays = [fnp.asarray(args[i]) for i in slots] + [fnp.asarray(kwargs[k]) for k in mapped_kw]
        in_core, out_core = parsed if parsed is not None else ([()] * len(arrays), None)
        if len(in_core) != len(arrays):
            raise ValueError(f"vectorize: the signature {signature!r} names {len(in_core)} inputs, the call maps "
                             f"{len(arrays)}")
        sizes = {}
        _bind_core_dims(arrays, in_core, sizes)
        loop = fnp.broadcast_shapes(*[a.shape[:a.ndim - len(c)] for a, c in zip(arrays, in_core, strict=True)])
        arrays = [fnp.broadcast_to(a, loop + a.shape[a.ndim - len(c):]) for a, c in zip(arrays, in_core,
                                                                                         strict=True)]

        def core(*xs):
            full = list(args)
            for i, x in zip(slots, xs, strict=False):
                full[i] = x
            kw = dict(fixed_kw, **dict(zip(mapped_kw, xs[len(slots):], strict=True)))
            return pyfunc(*full, **kw)

        f = core
        for _ in loop:
            f = vmap(f)
        out = f(*arrays)
        if out_core is not None:
            _check_outputs(out, out_core, len(loop), sizes)
        return out

    return wrapped


def _check_outputs(out, out_core, n_loop, sizes):
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(out_core):
        raise ShapeError(f"vectorize: the signature names {len(out_core)} outputs, the function returned "
                         f"{len(outs)}")
    for j, (o, core) in enumerate(zip(outs, out_core, strict=True)):
        shape = tuple(o.shape)[n_loop:]
        if len(shape) != len(core):
            raise ShapeError(f"vectorize: output {j} has core shape {shape}, the signature says {core}")
        for name, n in zip(core, shape, strict=True):
            if sizes.setdefault(name, n) != n:
                raise ShapeError(f"vectorize: output {j}'s core dimension {name!r} is {n}, the inputs gave "
                                 f"{sizes[name]}")


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``func1d`` applied to every 1-d slice of ``arr`` along ``axis`` (``numpy.apply_along_axis``), by ``vmap``.

    Args:
      func1d: a function of a 1-d array (and ``args``/``kwargs``), returning an array of any fixed shape.
      axis: the axis whose slices ``func1d`` takes (negative counts from the end).
      arr: an array of rank >= 1.

    Returns:
      ``arr``'s shape with ``axis`` replaced by the shape of ``func1d``'s result (removed for a scalar one).

    Raises:
      AxisError: ``axis`` out of range. ShapeError: ``arr`` is 0-d.
    """
    fnp = _np()
    arr = fnp.asarray(arr)
    if arr.ndim == 0:
        raise ShapeError("apply_along_axis: arr must have at least one axis")
    axis = normalize_axis(operator.index(axis), arr.ndim, "apply_along_axis")

    def f(v):
        return func1d(v, *args, **kwargs)

    # the axes after `axis` are mapped innermost and their results put last, then those before it first
    for i in range(1, arr.ndim - axis):
        f = vmap(f, in_axes=i, out_axes=-1)
    for _ in range(axis):
        f = vmap(f, in_axes=0, out_axes=0)
    return f(arr)


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[i](x)`` where ``condlist[i]`` holds (the last true condition wins), as ``numpy.piecewise``.

    Args:
      x: an array.
      condlist: a sequence (or an array whose leading axis is the sequence) of boolean arrays that broadcast to
        ``x``'s shape (as ``jax.numpy``).
      funclist: functions of ``x`` (elementwise, called on the whole array) or constants, one per condition,
        plus optionally one more: the value where no condition holds (default 0).
      args, kw: passed to each function.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      ValueError: ``funclist``'s length is neither ``len(condlist)`` nor one more. ShapeError: a condition that
        does not broadcast to ``x``'s shape.
    """
    fnp = _np()
    x = fnp.asarray(x)
    if isinstance(condlist, (list, tuple)):
        conds = [fnp.asarray(c) for c in condlist]
    else:
        c = fnp.asarray(condlist)      # an array: a stack of conditions, or one condition given alone
        conds = list(c) if c.ndim == x.ndim + 1 else [c]
    try:
        conds = [fnp.broadcast_to(c.astype(bool), x.shape) for c in conds]
    except ShapeError:
        raise ShapeError(f"piecewise: conditions of shapes {[tuple(c.shape) for c in conds]} do not broadcast to "
                         f"x's shape {tuple(x.shape)}") from None
    n = len(conds)
    funcs = list(funclist)
    if len(funcs) not in (n, n + 1):
        raise ValueError(f"piecewise: {n} conditions need {n} or {n + 1} functions, got {len(funcs)}")

    def value(fn):
        v = fn(x, *args, **kw) if callable(fn) else fn
        return fnp.broadcast_to(fnp.asarray(v).astype(x.dtype), x.shape)

    out = value(funcs[n]) if len(funcs) == n + 1 else fnp.zeros_like(x)
    for i in range(n):
        out = fnp.where(conds[i], value(funcs[i]), out)
    return out
