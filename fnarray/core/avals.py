"""Values into abstract values, and into arrays, for every layer (one definition each).

``get_aval(x)`` is the ``ShapedArray`` of anything the transforms and the namespace handle: an ``Array`` or
tracer, anything else with an ``aval`` (the AD markers ``Zero`` and ``UndefinedPrimal``), a NumPy array
(its dtype canonicalised, strong) or a Python/NumPy scalar (Python scalars weak, with the 32-bit defaults).

``asarray(x)`` turns a NumPy array or scalar into an ``Array``. It is a hook (docs/design.md: ``core/`` defines
hooks that upper layers fill): ``fnarray.numpy`` fills it at import with its ``asarray`` rules, so that the
transforms make arrays without importing the namespace.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import not_initialized
from fnarray.core.shaped import ShapedArray
from fnarray.core import tracing
from fnarray.core.tracing import is_scalar

__all__ = ["get_aval", "asarray", "set_asarray"]


def get_aval(x) -> ShapedArray:
    """The abstract value of ``x``; ``TypeError`` for anything that is not an array or a scalar."""
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    if is_scalar(x):
        d, w = dtypes.dtype_of_scalar(x)
        return ShapedArray((), d, w)
    if isinstance(x, np.ndarray):
        return ShapedArray(x.shape, dtypes.canonicalize(x.dtype), False)
    raise TypeError(f"expected an array or a scalar, got {type(x).__name__}")


def _no_asarray(x, dtype=None):
    raise not_initialized("converting to an array needs fnarray.numpy, which is not loaded")


_asarray = _no_asarray


def set_asarray(fn) -> None:
    """Install the namespace's ``asarray`` (``fnarray.numpy`` does at import)."""
    global _asarray
    _asarray = fn
    tracing.set_numpy_constant(fn)


def asarray(x, dtype=None):
    """``x`` (a NumPy array, scalar or array) as an ``Array``, by the namespace's rules."""
    return _asarray(x, dtype)
