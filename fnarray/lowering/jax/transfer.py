"""Host arrays onto a JAX device, always as a copy in memory XLA owns (the jax backend's ``to_device``).

``jax.device_put(a, may_alias=False)`` of a NumPy array does not copy where the array's memory is aligned to 64
bytes (JAX 0.10's NumPy handler does not read the copy semantics): the JAX array then aliases the NumPy buffer,
and a later write to the NumPy array changed the fnarray array (about one small array in four, by where the
allocator put it). Its Python path also costs ~30 us a call, more than the jitted call that reads the array
(``benchmarks/programs.py``'s decode loop places its cache once a pass). ``put`` calls the C++ entry that
``jax.device_put`` reaches after that Python, jaxlib's ``batched_device_put``, with ``force_copy``: ~4 us, a
copy whatever the alignment, nothing compiled. Where that entry is missing or refuses the arguments (another
jaxlib), ``jax.device_put`` of a private NumPy copy, which nothing else can write.
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

__all__ = ["put"]

try:
    from jaxlib import _jax as _jaxlib
    _entry = [_jaxlib.batched_device_put, jax.core.ShapedArray]
except (ImportError, AttributeError):  # pragma: no cover - another jaxlib: the public path
    _entry = [None, None]

_shardings: dict = {}   # device handle -> its SingleDeviceSharding
_avals: dict = {}       # (shape, dtype) -> JAX's ShapedArray (at most _AVALS_SIZE; cleared when full)
_AVALS_SIZE = 256


def _aval(shape, dtype):
    key = (shape, dtype)
    av = _avals.get(key)
    if av is None:
        if len(_avals) >= _AVALS_SIZE:
            _avals.clear()
        av = _avals[key] = _entry[1](shape, dtype)
    return av


def put(a: np.ndarray, handle, committed: bool, x64: bool):
    """``a`` (a NumPy array in native byte order) copied onto the JAX device ``handle``: a JAX array, committed to
    it or not (uncommitted arrays may meet global arrays sharded over several devices); ``x64``: ``a`` is of a
    64-bit dtype (kept as it is, not narrowed by JAX's ``jax_enable_x64`` setting)."""
    batched = _entry[0]
    if batched is not None:
        sharding = _shardings.get(handle)
        if sharding is None:
            sharding = _shardings[handle] = SingleDeviceSharding(handle)
        try:
            return batched(_aval(a.shape, a.dtype), sharding, [a], [handle], committed, True,
                           enable_x64=True if x64 else None)
        except TypeError:  # pragma: no cover - a jaxlib whose entry takes other arguments: the public path
            _entry[0] = None
    with jax.enable_x64(True) if x64 else contextlib.nullcontext():
        return jax.device_put(np.array(a, copy=True), handle if committed else None)
