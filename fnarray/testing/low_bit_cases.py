"""The parity cases (``testing.cases.CASES``) in the low-bit dtypes: one case per primitive and dtype.

Each case's float32 operands become a float8 (rounded to nearest even), or, for int4/uint4, its float32 operands
``round(3 x)`` clipped to the 4-bit range and its 32-bit integer operands clipped there (indices too, where the
primitive takes a 4-bit index; else only the first operand); a case whose primitive refuses the dtypes is left
out, and so are user kernels (``pallas_call``: their bodies are written for float32). ``tests/test_lowbit_dtypes.py``
runs them on every device against numpy:0 with the backends' expected-fallback tables (``testing.fallbacks``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fnarray.core.shaped import ShapedArray

__all__ = ["LOW_BIT", "low_bit_cases"]

LOW_BIT = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.int4,
                                      ml_dtypes.uint4))
_SKIP = frozenset({"pallas_call"})


def _cast(x, d, ints):
    x = np.asarray(x)
    lo, hi = (-8, 7) if d.name == "int4" else (0, 15)
    if x.dtype == np.float32:
        x = np.clip(np.nan_to_num(x), -9, 16) if not d.name.startswith("float8") else x   # (NaN: no 4-bit integer)
        return x.astype(d) if d.name.startswith("float8") else np.clip(np.round(x * 3), lo, hi).astype(
            np.int8).astype(d)
    if ints and x.dtype in (np.int32, np.uint32):
        return np.clip(x.astype(np.int64), lo, hi).astype(np.int8).astype(d)
    return x


def _accepts(prim, inputs, params):
    try:
        prim.abstract_eval(*(ShapedArray(np.shape(x), np.asarray(x).dtype) for x in inputs), **params)
    except Exception:  # noqa: BLE001 (any refusal: the primitive does not take these dtypes)
        return False
    return True


def _variant(prim, inputs, params, d):
    """The case's operands in ``d`` (module docstring), or ``None`` where no variant is accepted."""
    tries = [[_cast(x, d, False) for x in inputs]]
    if not d.name.startswith("float8"):
        tries += [[_cast(x, d, True) for x in inputs], [_cast(x, d, i == 0) for i, x in enumerate(inputs)]]
    for v in tries:
        if any(np.asarray(x).dtype == d for x in v) and _accepts(prim, v, params):
            return v
    return None


def low_bit_cases(cases):
    """``[(name, primitive, inputs, params)]``: the first case of each primitive of ``cases`` that has a variant
    in each low-bit dtype (``name`` is the case's name and the dtype's)."""
    out, seen = [], set()
    for name, prim, inputs, params in cases:
        if prim.name in _SKIP:
            continue
        for d in LOW_BIT:
            if (prim.name, d) in seen:
                continue
            v = _variant(prim, inputs, params, d)
            if v is not None:
                seen.add((prim.name, d))
                out.append((f"{name}-{d.name}", prim, v, params))
    return out
