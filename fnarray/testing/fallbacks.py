"""Which parity cases a device is expected to run on numpy:0, and why: no silent fallback in the tests.

Each backend lists the primitives it is expected to fall back on in its own ``expected_fallbacks`` table
(``Backend.expected_fallbacks``: ``{(primitive name, dtype name or "*"): reason}``), beside its ``supports`` (a
backend whose devices differ gives the table per device too, ``device_fallbacks(device)``: mlx runs Pallas
kernels as Metal on a GPU with Metal only); a case whose dtypes the device's ``Capabilities.dtypes`` lack is
expected to fall back too (WGSL has no float64), and so is one with a result of a dtype the backend holds but
only reads (``Backend.read_only_dtypes``: webgpu's uint8 and low-bit bytes). ``tests/test_parity.py`` runs every
other case with ``fallback="error"``, so a deleted or broken native lowering fails there instead of passing through
the fallback, and checks that every expected case still falls back (a table that is no longer true fails too).
``python -m fnarray primitives --fallbacks`` prints the tables (``fallback_rows``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core.shaped import ShapedArray

__all__ = ["case_dtype", "expected_fallback", "fallback_rows"]


def _avals(prim, inputs, params):
    ins = [ShapedArray(np.shape(a), np.asarray(a).dtype) for a in inputs]
    out = prim.abstract_eval(*ins, **params)
    return ins, (list(out) if prim.multiple_results else [out])


def case_dtype(prim, inputs, params) -> str:
    """The dtype a fallback of this case is reported under: its first operand's (its first result's if none),
    as ``partition``'s ``FallbackWarning`` and ``UnsupportedOnDevice`` name it."""
    ins, outs = _avals(prim, inputs, params)
    first = (ins or outs)[0]
    return first.dtype.name


def expected_fallback(device, prim, inputs, params) -> str | None:
    """Why ``device`` is expected to run the case ``(prim, inputs, params)`` on numpy:0, or ``None`` (it must
    run natively: a fallback is a failure)."""
    caps = device.impl.capabilities(device)
    ins, outs = _avals(prim, inputs, params)
    for a in ins + outs:
        if a.dtype not in caps.dtypes:
            return f"{device} has no {a.dtype.name} (Capabilities.dtypes)"
    for a in outs:
        if a.dtype in getattr(device.impl, "read_only_dtypes", ()):
            return f"{device} reads {a.dtype.name} but writes none (read_only_dtypes)"
    per_device = getattr(device.impl, "device_fallbacks", None)   # a table that differs between its devices
    table = per_device(device) if per_device is not None else getattr(device.impl, "expected_fallbacks", {})
    return table.get((prim.name, case_dtype(prim, inputs, params))) or table.get((prim.name, "*"))


def fallback_rows(backends) -> list[tuple[str, str, str, str]]:
    """``(backend, primitive, dtype, reason)`` for every entry of each backend's ``expected_fallbacks`` table
    (``backends``: ``Backend`` objects), sorted; a backend without entries gets one row saying so."""
    rows = []
    for b in backends:
        table = getattr(b, "expected_fallbacks", {})
        if not table:
            rows.append((b.name, "-", "-", "none: every parity case runs natively (beyond missing dtypes)"))
        rows.extend((b.name, p, d, r) for (p, d), r in sorted(table.items()))
    return rows
