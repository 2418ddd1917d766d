"""``jax.scipy.stats``'s summary functions: ``sem``, ``rankdata`` and ``mode`` (re-exported by
``fnarray.scipy.stats``).

Ties are found by sorting along the axis: each sorted position knows where its run of equal values starts
(a running maximum of the run starts) and ends (a reversed running minimum of the run ends), so the ranks and the
counts need no ``unique`` with a static size and no ``vmap`` over the slices.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError

__all__ = ["ModeResult", "mode", "rankdata", "sem"]

_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


def _propagate_only(name, nan_policy, omit_ok=False):
    allowed = ("propagate", "omit", "raise")
    if nan_policy not in allowed:
        raise ValueError(f"{name}: nan_policy must be one of {allowed}, got {nan_policy!r}")
    if nan_policy == "raise" or (nan_policy == "omit" and not omit_ok):
        raise NotImplementedError(f"{name}: nan_policy={nan_policy!r} is not supported (as in JAX: the check would "
                                  "read the data back); test for NaN outside and pass nan_policy='propagate'")


def sem(a, axis=0, ddof=1, nan_policy="propagate", *, keepdims=False):
    """The standard error of the mean, ``std(a, ddof) / sqrt(n)`` along ``axis`` (mirrors
    ``jax.scipy.stats.sem``; ``scipy.stats.sem``).

    Args:
      a: an array (integers promote to float32).
      axis: the axis (``None``: all of ``a``).
      ddof: the delta degrees of freedom of the standard deviation (default 1).
      nan_policy: ``"propagate"`` (NaN in, NaN out) or ``"omit"`` (NaNs left out: ``nanstd`` over the count of
        the others).
      keepdims: keep the reduced axis with length 1.

    Returns:
      An array of ``a``'s floating dtype with ``axis`` reduced.

    Raises:
      ValueError: another ``nan_policy``; DTypeError: a complex ``a``.
    """
    import fnarray.numpy as fnp
    from fnarray.scipy._util import floats
    _propagate_only("sem", nan_policy, omit_ok=True)
    (b,) = floats("sem", a)
    if nan_policy == "omit":
        count = fnp.sum(~fnp.isnan(b), axis=axis, keepdims=keepdims)
        return fnp.nanstd(b, axis=axis, ddof=ddof, keepdims=keepdims) / fnp.sqrt(count.astype(b.dtype))
    size = b.size if axis is None else b.shape[axis]
    return fnp.std(b, axis=axis, ddof=ddof, keepdims=keepdims) / np.sqrt(np.asarray(size, b.dtype))


def _runs(s):
    """For ``s`` sorted along its last axis: ``(new, start, end)``, whether each position starts a run of equal
    values, and the first and last positions of its run."""
    import fnarray.numpy as fnp
    n = s.shape[-1]
    pos = lax.iota(dtypes.int32, s.shape, s.ndim - 1)
    differs = s[..., 1:] != s[..., :-1]
    edge = fnp.ones(s.shape[:-1] + (1,), bool)
    new = fnp.concatenate([edge, differs], axis=-1)
    last = fnp.concatenate([differs, edge], axis=-1)
    start = lax.cummax(fnp.where(new, pos, 0), axis=s.ndim - 1)
    end = lax.cummin(fnp.where(last, pos, n - 1), axis=s.ndim - 1, reverse=True)
    return new, start, end


def rankdata(a, method="average", *, axis=None, nan_policy="propagate"):
    """Ranks of ``a``'s values, 1 for the smallest (mirrors ``jax.scipy.stats.rankdata``; ``scipy.stats.rankdata``).

    Ties: ``"average"`` their mean rank, ``"min"``/``"max"`` the lowest/highest, ``"dense"`` consecutive ranks
    over the distinct values, ``"ordinal"`` distinct ranks in the order of appearance.

    Args:
      a: an array.
      method: one of ``"average"`` (default), ``"min"``, ``"max"``, ``"dense"``, ``"ordinal"``.
      axis: rank along this axis (default ``None``: over the flattened array).
      nan_policy: ``"propagate"`` only: a slice holding NaN ranks as all NaN.

    Returns:
      An array of the default float (float32; float64 with x64 on, as JAX) of ``a``'s shape, or flat for
      ``axis=None``.

    Raises:
      ValueError: an unknown ``method`` or ``nan_policy``; NotImplementedError: ``"omit"`` or ``"raise"``.
    """
    import fnarray.numpy as fnp
    _propagate_only("rankdata", nan_policy)
    if method not in _RANK_METHODS:
        raise ValueError(f"rankdata: unknown method {method!r}; expected one of {_RANK_METHODS}")
    a = fnp.asarray(a)
    if dtypes.is_complex(a.dtype):
        raise DTypeError(f"rankdata ranks real values, got {a.dtype.name}")
    out_dtype = dtypes.default_float()
    x = fnp.ravel(a) if axis is None else fnp.moveaxis(a, axis, -1)
    if x.shape[-1] == 0:
        return fnp.zeros(x.shape, out_dtype) if axis is None else fnp.moveaxis(fnp.zeros(x.shape, out_dtype), -1, axis)
    order = lax.iota(dtypes.int32, x.shape, x.ndim - 1)
    s, sorter = lax.sort((x, order), dimension=x.ndim - 1, num_keys=1)
    inv = fnp.argsort(sorter, axis=-1)
    new, start, end = _runs(s)
    if method == "ordinal":
        ranks = order + 1
    elif method == "dense":
        ranks = fnp.cumsum(new.astype(dtypes.int32), axis=-1)
    elif method == "min":
        ranks = start + 1
    elif method == "max":
        ranks = end + 1
    else:
        ranks = (start + end).astype(out_dtype) / 2 + 1
    ranks = fnp.take_along_axis(ranks.astype(out_dtype), inv, axis=-1)
    if dtypes.is_float(x.dtype):
        ranks = fnp.where(fnp.any(fnp.isnan(x), axis=-1, keepdims=True), np.nan, ranks)
    return ranks if axis is None else fnp.moveaxis(ranks, -1, axis)


class ModeResult(NamedTuple):
    """``mode``'s result: the most frequent value and how often it occurs."""
    mode: object
    count: object


def mode(a, axis=0, nan_policy="propagate", keepdims=False):
    """The most frequent value along ``axis`` and its count, the smallest value among ties (mirrors
    ``jax.scipy.stats.mode``; ``scipy.stats.mode``).

    Args:
      a: an array (a scalar is taken as one element).
      axis: the axis (``None``: all of ``a``).
      nan_policy: ``"propagate"`` only (NaNs are each their own value and sort last, as JAX's ``unique``).
      keepdims: keep the reduced axis with length 1.

    Returns:
      ``ModeResult(mode, count)``: ``mode`` of ``a``'s dtype and ``count`` int32, the reduced shape; an empty axis
      gives NaN and 0 (float32, as JAX).

    Raises:
      ValueError: an unknown ``nan_policy``; NotImplementedError: ``"omit"`` or ``"raise"``.
    """
    import fnarray.numpy as fnp
    from fnarray.numpy._util import normalize_axis
    _propagate_only("mode", nan_policy)
    x = fnp.atleast_1d(fnp.asarray(a))
    if axis is None:
        shape = (1,) * x.ndim if keepdims else ()
        x = fnp.ravel(x)
    else:
        ax = normalize_axis(axis, x.ndim)
        shape = tuple(1 if i == ax else d for i, d in enumerate(x.shape)) if keepdims else (
            x.shape[:ax] + x.shape[ax + 1:])
        x = fnp.moveaxis(x, ax, -1)
    if x.shape[-1] == 0:
        return ModeResult(fnp.full(shape, np.nan, fnp.float32), fnp.zeros(shape, fnp.float32))
    s = fnp.sort(x, axis=-1)
    _, start, end = _runs(s)
    counts = end - start + 1
    best = fnp.argmax(counts, axis=-1)[..., None]
    value = fnp.take_along_axis(s, best, axis=-1)
    count = fnp.take_along_axis(counts, best, axis=-1)
    return ModeResult(fnp.reshape(value, shape), fnp.reshape(count, shape).astype(dtypes.int32))
