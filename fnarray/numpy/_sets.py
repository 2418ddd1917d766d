"""Set operations on flattened arrays (``jax.numpy``'s ``union1d``, ``intersect1d``, ``setdiff1d``, ``setxor1d``).

Each sorts the concatenated or single input, keeps the first element of every run of equal values that
passes a membership test (``isin``), and packs the kept values to the front. The number of results depends
on the values, so eager calls give exactly the results and calls under ``jit``/``vmap`` need a static
``size``: extra results are dropped and missing ones filled with ``fill_value`` (JAX's defaults: the
smallest result for ``union1d``, ``intersect1d`` and ``setxor1d``, 0 for ``setdiff1d``).
Source: the NumPy reference (numpy.org/doc/stable/reference/routines.set.html).
"""

from __future__ import annotations

__all__ = ["intersect1d", "setdiff1d", "setxor1d", "union1d"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _sorted_flat(*arrays):
    fnp = _np()
    return fnp.sort(fnp.concatenate([fnp.ravel(fnp.asarray(a)) for a in arrays]))


def _first_of_runs(s):
    """For a sorted 1-d ``s``: True at the first element of every run of equal values."""
    fnp = _np()
    if s.shape[0] == 0:
        return fnp.zeros((0,), bool)
    return fnp.concatenate([fnp.ones((1,), bool), s[1:] != s[:-1]])


def _packed(s, keep, size, fill_value, fill_smallest):
    """The elements of ``s`` where ``keep``, in order; with ``size``, padded with ``fill_value``."""
    fnp = _np()
    if size is None:
        return s[fnp.nonzero(keep)[0]]
    idx = fnp.nonzero(keep, size=size, fill_value=0)[0]
    picked = s[idx] if s.shape[0] else fnp.zeros((size,), s.dtype)
    if fill_value is None:
        fill_value = picked[0] if fill_smallest and size else 0
    return fnp.where(fnp.arange(size) < fnp.sum(keep), picked, fnp.asarray(fill_value, s.dtype))


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted unique values found in ``ar1`` or ``ar2`` (``numpy.union1d``; ``jax.numpy.union1d``).

    Args: ar1, ar2: arrays of any shape (flattened). size, fill_value: see the module's docstring.
    Returns: a 1-d array of the promoted dtype. Raises: ``ConcretizationError`` under ``jit`` without ``size``.
    """
    s = _sorted_flat(ar1, ar2)
    return _packed(s, _first_of_runs(s), size, fill_value, True)


def intersect1d(ar1, ar2, assume_unique=False, return_indices=False, *, size=None, fill_value=None):
    """The sorted unique values found in both ``ar1`` and ``ar2`` (``numpy.intersect1d``).

    Args: ar1, ar2: arrays (flattened). assume_unique: accepted (the result is the same).
      return_indices: only ``False``. size, fill_value: see the module's docstring.
    Returns: a 1-d array of the promoted dtype.
    Raises: ``NotImplementedError`` for ``return_indices=True``; ``ConcretizationError`` under ``jit``
    without ``size``.
    """
    if return_indices:
        raise NotImplementedError("intersect1d: return_indices=True is not supported; compute the indices with "
                                  "searchsorted on the sorted inputs")
    fnp = _np()
    s = _sorted_flat(ar1)
    keep = _first_of_runs(s) & fnp.isin(s, ar2)
    return _packed(fnp.astype(s, fnp.result_type(s, ar2)), keep, size, fill_value, True)


def setdiff1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted unique values of ``ar1`` that are not in ``ar2`` (``numpy.setdiff1d``).

    Args: ar1, ar2: arrays (flattened). assume_unique: accepted (the result is the same).
      size, fill_value: see the module's docstring (default fill 0).
    Returns: a 1-d array of ``ar1``'s dtype. Raises: ``ConcretizationError`` under ``jit`` without ``size``.
    """
    fnp = _np()
    s = _sorted_flat(ar1)
    return _packed(s, _first_of_runs(s) & ~fnp.isin(s, ar2), size, fill_value, False)


def setxor1d(ar1, ar2, assume_unique=False, *, size=None, fill_value=None):
    """The sorted unique values found in exactly one of ``ar1`` and ``ar2`` (``numpy.setxor1d``).

    Args: ar1, ar2: arrays (flattened). assume_unique: accepted (the result is the same).
      size, fill_value: see the module's docstring.
    Returns: a 1-d array of the promoted dtype. Raises: ``ConcretizationError`` under ``jit`` without ``size``.
    """
    fnp = _np()
    s = _sorted_flat(ar1, ar2)
    keep = _first_of_runs(s) & (fnp.isin(s, ar1) != fnp.isin(s, ar2))
    return _packed(s, keep, size, fill_value, True)
