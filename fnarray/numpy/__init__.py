"""``fnarray.numpy``: the array API (2024.12) namespace, NumPy-style, on fnarray arrays.

``import fnarray.numpy as fnp``. Every function is a composite of fnarray's
primitives, so it works eagerly, under ``jit``, ``grad`` and ``vmap``, on every
backend. Semantics where the standard is silent follow docs/design.md (32-bit
defaults, JAX's promotion with weak types, clamped gathers, dropped scatters).
Each submodule's ``__all__`` is the public surface it contributes.
"""

from fnarray.core.array import Array, set_ops
from fnarray.numpy import (_binning, _convolve, _creation, _editing, _elementwise, _extras, _grids, _indexing, _info,
                           _linalg, _manipulation, _reductions, _sorting, _vectorize, _sets, _polynomial,
                           _nan_quantiles, _composites, _bessel)

_MODULES = (_info, _creation, _elementwise, _manipulation, _reductions, _linalg, _indexing, _sorting, _convolve,
            _extras, _binning, _editing, _vectorize, _grids, _sets, _polynomial, _nan_quantiles, _composites, _bessel)
for _m in _MODULES:
    for _name in _m.__all__:
        globals()[_name] = getattr(_m, _name)
__all__ = ["Array"] + [n for _m in _MODULES for n in _m.__all__]
ndarray = Array

# Array's operators and methods come from this namespace.
import sys as _sys  # noqa: E402

set_ops(_sys.modules[__name__])
from fnarray.numpy import fft  # noqa: E402,F401  (the fft extension: fnp.fft.fft...)
del _m, _name, _sys

from fnarray.numpy import linalg  # noqa: E402,F401  (the array API's linalg extension, fnp.linalg)
