"""First eager calls (issue 28 item 2): the general path's cheaper bookkeeping keeps its semantics.

``placement.eager_apply``'s one-pass case (arrays of one device and Python scalars), the eager compile of a
primitive without a one-equation program on a reference backend (``partition.compile_eqn``,
``NumpyBackend.eager_fast_known``), ``Params``' hash, and ``LRUCache.put``'s insert without an eviction pass are
compared against NumPy float64 and against the general loop they shortcut, with every primitive new to the
eager cache (the cache cleared first), on every installed backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import tracing
from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.errors import ShapeError
from fnarray.core.ir import Params
from fnarray.devices import placement


@pytest.fixture
def fresh():
    """Every primitive new to the eager cache, as for a shape never seen (restored empty after)."""
    placement._eager_cache.clear()
    yield
    placement._eager_cache.clear()


def test_first_calls_match_numpy(device, fresh):
    rng = np.random.default_rng(0)
    for n in (1, 3, 7):  # each n a new shape: every primitive compiled at its call
        xv = rng.standard_normal(n).astype(np.float32)
        m = rng.standard_normal((n + 1, 2)).astype(np.float32)
        x, mm = fa.device_put(xv, device), fa.device_put(m, device)
        np.testing.assert_allclose(np.asarray(fnp.tanh(2.0 * x + 1.0) * x + 1),
                                   np.tanh(2.0 * xv.astype(np.float64) + 1.0) * xv + 1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(fnp.sum(mm, axis=0)), m.astype(np.float64).sum(0), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(mm @ mm.T), m.astype(np.float64) @ m.T, rtol=1e-5, atol=1e-6)
        idx = fa.device_put(np.array([0, -1], np.int32), device)
        np.testing.assert_array_equal(np.asarray(x[idx]), xv[[0, -1]])
        np.testing.assert_array_equal(np.asarray(fnp.concatenate([mm, mm])), np.concatenate([m, m]))


def _outcome(fn, *args):
    try:
        r = fn(*args)
    except Exception as e:  # noqa: BLE001 (compared: type and message)
        return type(e), str(e)
    return r.aval, str(r.device), r._committed, np.asarray(r).tobytes()


@pytest.mark.parametrize("scalar", [2, 2.5, True, 1 + 2j, np.float32(2.5), np.int32(3)], ids=repr)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64, np.bool_])
def test_one_pass_matches_general_loop(device, fresh, scalar, dtype):
    """A primitive bound eagerly on an array and a scalar (either side), or two arrays: the one-pass case and the
    general loop give the same value, aval (weak type included), device and committed flag, or the same error."""
    x = fa.device_put(np.arange(4).astype(dtype), device)  # committed
    for prim, args in ((P.mul, (x, scalar)), (P.add, (scalar, x)), (P.sub, (x, x)), (P.neg, (x,))):
        fast = _outcome(placement.eager_apply, prim, args, tracing._NO_PARAMS)
        slow = _outcome(placement._eager_apply_general, prim, args, tracing._NO_PARAMS)
        assert fast == slow, (prim, args)


def test_python_scalars_only_take_the_default_device(fresh):
    out = placement.eager_apply(P.add, (2.0, 3.0), tracing._NO_PARAMS)
    ref = placement._eager_apply_general(P.add, (2.0, 3.0), tracing._NO_PARAMS)
    assert out.aval == ref.aval and out.aval.weak_type
    assert out.device == ref.device == fa.devices()[0] and not out._committed
    assert float(out) == 5.0


def test_deleted_and_foreign_operands_raise_as_before(fresh):
    x = fa.device_put(np.ones(3, np.float32), "numpy:0")
    y = fa.device_put(np.ones(3, np.float32), "numpy:0")
    y.delete()
    with pytest.raises(RuntimeError):
        placement.eager_apply(P.add, (x, y), tracing._NO_PARAMS)
    with pytest.raises(TypeError, match="expected an fnarray Array or a scalar"):
        placement.eager_apply(P.add, (x, np.ones(3, np.float32)), tracing._NO_PARAMS)


def test_two_devices_place_as_before(fresh):
    devs = [d for d in fa.devices(all_backends=True) if d.backend != "numpy"]
    if not devs:
        pytest.skip("one backend installed")
    x = fa.device_put(np.ones(3, np.float32), "numpy:0")
    y = fa.device_put(np.ones(3, np.float32) * 2, devs[0])
    try:
        ref = placement._eager_apply_general(P.add, (x, y), tracing._NO_PARAMS)
    except Exception as e:  # noqa: BLE001 (whatever the general loop raises, the fast entry raises too)
        with pytest.raises(type(e)):
            placement.eager_apply(P.add, (x, y), tracing._NO_PARAMS)
        return
    out = placement.eager_apply(P.add, (x, y), tracing._NO_PARAMS)
    assert out.device == ref.device and out._committed == ref._committed
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 3.0, np.float32))


def test_eager_compile_errors_keep_their_type(fresh):
    """A rule's error at a new shape is the rule's (the compile made no program first)."""
    x = fa.device_put(np.ones(3, np.float32), "numpy:0")
    y = fa.device_put(np.ones(4, np.float32), "numpy:0")
    fast = _outcome(placement.eager_apply, P.add, (x, y), tracing._NO_PARAMS)
    assert fast[0] is ShapeError and "equal shape" in fast[1]


def test_params_hash_is_order_free():
    a, b = Params({"axes": (0,), "keepdims": False}), Params({"keepdims": False, "axes": (0,)})
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Params({"axes": (1,), "keepdims": False})}) == 2
    with pytest.raises(TypeError):
        hash(Params({"x": [1]}))  # unhashable values stay unhashable


def test_lru_put_bound_and_first_value():
    c = LRUCache(3)
    assert [c.put(k, k * 10) for k in range(3)] == [0, 10, 20]
    assert c.put(1, 99) == 10  # the first value inserted stays
    c.put(3, 30)
    assert len(c._d) == 3 and 0 not in c._d  # evicted once full
    z = LRUCache(0)
    assert z.put("a", 1) == 1 and len(z._d) == 0
