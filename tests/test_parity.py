"""Backend parity tier: every primitive on every device against the numpy backend.

Each case of ``fnarray.testing.cases.CASES`` is run eagerly and under ``jit`` on each
available device and compared with the numpy backend (the reference), with
``fallback="error"`` unless the device's table says the case falls back
(``fnarray.testing.fallbacks``): a deleted or broken native lowering fails here.

Tiers (docs/design.md, "Testing"): numpy:0 runs every case eagerly and under ``jit``; the other devices run every
case under ``jit`` and eagerly the first case of each primitive (``_EAGER_CASES``): the eager path compiles the
same one-primitive program through the same lowering rule, so its other cases repeated the ``jit`` ones.
"""

import warnings

import numpy as np
import pytest

import fnarray as fa
from fnarray.core import dtypes
from fnarray.core.primitives import PRIMITIVES

from fnarray.core.errors import UnsupportedOnDevice
from fnarray.testing.cases import CASES, NOT_EXECUTED
from fnarray.testing.fallbacks import case_dtype, expected_fallback
from fnarray.testing.linalg_cases import canonical

REF = fa.devices("numpy")[0]
#: the first case of each primitive: the cases that every device runs eagerly as well as under ``jit``
_EAGER_CASES = frozenset({prim.name: name for name, prim, _, _ in reversed(CASES)}.values())


def _run(prim, inputs, params, device, jit):
    args = [fa.device_put(fa.numpy.asarray(x), device) for x in inputs]
    if jit:
        fn = fa.jit(lambda *a: prim.bind(*a, **params), device=device)
        out = fn(*args)
    else:
        out = prim.bind(*args, **params) if args else fa.jit(lambda: prim.bind(**params), device=device)()
    outs = out if isinstance(out, (list, tuple)) else [out]
    for o in outs:
        assert o.device == device, f"{prim.name} ran on {o.device}, expected {device}"
    return canonical(prim, [np.asarray(o) for o in outs])  # eigen/singular vectors: one sign (phase) each


def _tol(d):
    if d in (dtypes.float16, dtypes.bfloat16):
        return 1e-2
    if d in (dtypes.float32, dtypes.complex64):
        return 3e-5
    return 1e-12


def test_every_primitive_has_a_parity_case():
    covered = {p for _, p, _, _ in CASES} | NOT_EXECUTED
    missing = sorted(p.name for p in PRIMITIVES.values() if p not in covered)
    assert not missing, f"primitives without a parity case: {missing}"


def _has_zero_size(prim, inputs, params):
    from fnarray.core.shaped import ShapedArray
    avals = [ShapedArray(np.shape(a), np.asarray(a).dtype) for a in inputs]
    out = prim.abstract_eval(*avals, **params)
    outs = list(out) if prim.multiple_results else [out]
    return any(a.size == 0 for a in avals + outs)


def test_every_primitive_has_a_zero_size_case():
    # docs/design.md: zero-size operands and outputs are legal for every primitive on every backend.
    covered = {p for _, p, inputs, params in CASES if _has_zero_size(p, inputs, params)} | NOT_EXECUTED
    missing = sorted(p.name for p in PRIMITIVES.values() if p not in covered)
    assert not missing, f"primitives without a zero-size parity case: {missing}"


@pytest.mark.parametrize("name,prim,inputs,params", CASES, ids=[c[0] for c in CASES])
def test_parity(device, name, prim, inputs, params, monkeypatch):
    want = _run(prim, inputs, params, REF, jit=True)
    expected = expected_fallback(device, prim, inputs, params)
    monkeypatch.setattr(fa.config, "fallback", "error")
    if expected is not None:
        # The table must stay true: the case still falls back, under the primitive and dtype listed.
        with pytest.raises(UnsupportedOnDevice) as e:
            _run(prim, inputs, params, device, jit=True)
        assert (e.value.primitive, e.value.dtype) == (prim.name, case_dtype(prim, inputs, params)), (
            f"{name} on {device} is listed as falling back ({expected}) but {e.value.primitive} "
            f"({e.value.dtype}) fell back: {e.value.reason}")
        monkeypatch.setattr(fa.config, "fallback", "warn")
    for jit in (False, True) if device.backend == "numpy" or name in _EAGER_CASES else (True,):
        if expected is None:
            try:
                got = _run(prim, inputs, params, device, jit)
            except UnsupportedOnDevice as e:
                pytest.fail(f"{name} fell back to numpy:0 on {device} (jit={jit}): {e.primitive} ({e.dtype}): "
                            f"{e.reason}. Fix its lowering, or list it with the reason in the backend's "
                            "expected_fallbacks table (fnarray/testing/fallbacks.py says where).")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fa.FallbackWarning)
                got = _run(prim, inputs, params, device, jit)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, g.dtype, w.shape, w.dtype)
            if dtypes.is_inexact(w.dtype):
                np.testing.assert_allclose(g, w, rtol=_tol(w.dtype), atol=_tol(w.dtype), equal_nan=True,
                                           err_msg=f"{name} on {device} (jit={jit})")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{name} on {device} (jit={jit})")


def test_expected_fallback_tables_name_real_primitives():
    """Every entry of every backend's table names a primitive and a dtype (or ``*``) that exist, with a reason."""
    from fnarray.devices.backend import get_backend
    names = {p.name for p in PRIMITIVES.values()}
    for dev in fa.devices(all_backends=True):
        for (prim, dt), reason in get_backend(dev.backend).expected_fallbacks.items():
            assert prim in names, f"{dev.backend}: {prim} is no primitive"
            known = {d.name for d in (*dtypes.ALL_DTYPES, *dtypes.LOW_BIT_DTYPES)}   # (low-bit: low_bit_cases)
            assert dt == "*" or dt in known, f"{dev.backend}: {dt} is no dtype"
            assert len(reason) > 20, f"{dev.backend}: {prim} ({dt}) needs a reason"


def test_decompositions_are_the_expected_ones():
    """Each backend lowers natively every decomposable primitive except those its table lists: a native rule
    deleted from a backend (which the decomposition would silently replace) fails here."""
    from fnarray._primitives_cmd import _case_eqn
    from fnarray.core.decompositions import DECOMPOSITIONS
    from fnarray.devices.backend import get_backend
    for dev in fa.devices(all_backends=True):
        backend = get_backend(dev.backend)
        got = set()
        for prim in DECOMPOSITIONS:
            eqn = _case_eqn(prim)
            if eqn is not None and not backend.lowers_natively(eqn, dev):
                got.add(prim.name)
        assert got == set(backend.expected_decompositions), (
            f"{dev}: decomposed {sorted(got)}, its expected_decompositions table says "
            f"{sorted(backend.expected_decompositions)}")
