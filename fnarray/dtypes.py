"""Dtype names a JAX program imports from ``jax.dtypes`` (mirrors ``jax.dtypes``).

``prng_key`` and ``extended`` are the abstract types of typed PRNG keys (``fa.random.key``'s dtype
``key<fry>``, ``fnarray.core.dtypes.KeyDType``): ``fnp.issubdtype(k.dtype, fa.dtypes.prng_key)`` is True
for typed keys and False for raw ``uint32[2]`` ones, as in JAX. The rest are ``fnarray.numpy``'s functions
under JAX's names; ``float8_e4m3fn``, ``float8_e5m2``, ``int4``, ``uint4`` are the low-bit dtypes (also in
``fnarray.numpy``) and ``TypePromotionError`` what promoting them with another dtype raises (as
``jax.dtypes.TypePromotionError``: a ``ValueError``, here also an ``fa.DTypeError``).
"""

from __future__ import annotations

from fnarray.core.dtypes import (bfloat16, extended, float0, float8_e4m3fn, float8_e5m2, int4, prng_key,
                                 uint4)
from fnarray.core.errors import TypePromotionError
from fnarray.core.dtypes import canonicalize as canonicalize_dtype
from fnarray.numpy import finfo, iinfo, issubdtype, result_type

__all__ = ["TypePromotionError", "bfloat16", "canonicalize_dtype", "extended", "finfo", "float0", "float8_e4m3fn",
           "float8_e5m2", "iinfo", "int4", "issubdtype", "prng_key", "result_type", "uint4"]
