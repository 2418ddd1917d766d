"""The jax backend's own guarantees: devices, 64-bit scoping, donation, eager caching, transforms."""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import require_backend


@pytest.fixture(scope="module")
def jdev():
    return require_backend("jax")[0]


def test_devices_report_platform(jdev):
    import jax
    devs = fa.devices("jax")
    assert len(devs) == len(jax.devices())
    for i, d in enumerate(devs):
        assert str(d) == f"jax:{i}"
        assert d.platform in ("cpu", "gpu", "tpu")
        assert jax.devices()[i].device_kind in d.description
    assert fa.devices(all_backends=True)[0].backend == "numpy"  # the embedded default stays first


@pytest.mark.enable_x64
def test_float64_without_touching_jax_config(jdev):
    import jax
    before = jax.config.jax_enable_x64
    x = fa.device_put(fnp.asarray(np.linspace(0, 1, 5)), jdev)  # float64 stays float64
    assert x.dtype == np.float64
    y = fa.jit(lambda a: fnp.sin(a) * 1e-300 * 1e300)(x)
    assert y.dtype == np.float64
    np.testing.assert_allclose(np.asarray(y), np.sin(np.linspace(0, 1, 5)), rtol=1e-15)
    assert jax.config.jax_enable_x64 == before
    z = fa.device_put(fnp.asarray(np.array([2**40 + 1], np.int64)), jdev) + np.int64(1)
    assert z.dtype == np.int64 and int(z[0]) == 2**40 + 2


def test_32bit_programs_do_not_enter_x64(jdev):
    from fnarray.lowering.jax.backend import JaxLowered
    x = fa.device_put(fnp.ones(3), jdev)
    low = fa.jit(lambda a: a + 1).lower(x)
    assert isinstance(low._backend_lowered, JaxLowered) and not low._backend_lowered.x64
    assert "stablehlo" in low.as_text()


def test_device_put_copies_numpy_memory(jdev, monkeypatch):
    # jax.device_put(may_alias=False) of a NumPy array aligned to 64 bytes aliased its memory (JAX 0.10): a write
    # to the NumPy array changed the fnarray array. And its Python cost ~30 us a call, 10x jaxlib's copying entry
    # that fnarray calls instead (lowering/jax/transfer.py; benchmarks/programs.py's decode loop places its cache
    # once a pass): jax.device_put is not called.
    import jax

    def refused(*args, **kwargs):
        raise AssertionError("jax.device_put called: jaxlib's batched_device_put was not used")
    monkeypatch.setattr(jax, "device_put", refused)
    room = np.zeros(1024 + 16, np.float32)
    start = (-room.ctypes.data % 64) // 4
    host = room[start:start + 1024]
    assert host.ctypes.data % 64 == 0
    host[:] = np.arange(1024)
    swapped = np.arange(6, dtype=">i4")[::2]   # a non-native, strided view
    x, y = fa.device_put(host, jdev), fa.device_put(swapped, jdev)
    monkeypatch.undo()
    host[:], swapped[:] = -1, -1
    np.testing.assert_array_equal(np.asarray(x), np.arange(1024, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 4])
    assert y.dtype == np.int32


def test_donation_invalidates_input(jdev):
    f = fa.jit(lambda p, g: p - 0.1 * g, donate_argnums=0, device=jdev)
    p = fa.device_put(fnp.ones(1024), jdev)
    out = f(p, fnp.ones(1024))
    np.testing.assert_allclose(np.asarray(out), 0.9, rtol=1e-6)
    assert p.is_deleted()
    with pytest.raises(RuntimeError, match="donated"):
        p + 1


def test_eager_ops_are_cached(jdev):
    from fnarray.devices import placement
    x = fa.device_put(fnp.ones(3), jdev)
    x * 2.0
    n = len(placement._eager_cache)
    for _ in range(5):
        x * 2.0
    assert len(placement._eager_cache) == n


def test_committed_devices_conflict(jdev):
    a = fa.device_put(fnp.ones(3), jdev)
    b = fa.device_put(fnp.ones(3), "numpy:0")
    with pytest.raises(ValueError, match="jax:0.*numpy:0|numpy:0.*jax:0"):
        a + b
    c = fnp.ones(3)  # uncommitted: follows the committed operand
    assert (a + c).device == jdev


def test_transform_compositions_on_jax(jdev):
    def f(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2)

    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    xs = rng.standard_normal((5, 4, 3)).astype(np.float32)
    wj, xj = fa.device_put(fnp.asarray(w), jdev), fa.device_put(fnp.asarray(xs), jdev)
    wn, xn = fnp.asarray(w), fnp.asarray(xs)
    per_ex = fa.jit(fa.vmap(fa.grad(f), in_axes=(None, 0)))
    got, want = per_ex(wj, xj), per_ex(wn, xn)
    assert got.device == jdev
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    h = fa.hessian(lambda v: fnp.sum(fnp.sin(v) * v))
    np.testing.assert_allclose(np.asarray(fa.jit(h)(wj[:, 0])), np.asarray(h(wn[:, 0])), rtol=1e-5, atol=1e-6)

    def loop(c):
        return fa.fori_loop(0, 4, lambda i, v: v * 1.5 + fnp.sin(v), c)
    np.testing.assert_allclose(np.asarray(fa.jit(fa.grad(lambda v: fnp.sum(loop(v))))(wj[:, 0])),
                               np.asarray(fa.grad(lambda v: fnp.sum(loop(v)))(wn[:, 0])), rtol=1e-5, atol=1e-6)


def test_random_bits_equal_numpy_backend(jdev):
    k = fa.random.key(42)
    a = fa.jit(lambda k: fa.random.bits(k, (100,)), device=jdev)(k)
    b = fa.jit(lambda k: fa.random.bits(k, (100,)), device="numpy:0")(k)
    assert a.device == jdev
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    u = fa.jit(lambda k: fa.random.uniform(k, (100,)), device=jdev)(k)
    np.testing.assert_array_equal(np.asarray(u), np.asarray(fa.random.uniform(k, (100,))))


@pytest.mark.enable_x64
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_programs_differing_in_a_literal_share_one_jax_jit(jdev, dtype):
    """Programs whose text differs only in a literal (``c`` closed over) share one ``jax.jit``
    (``lowering/jax/shared.py``): the first compiled as it is, the second and later through one program that reads
    the literals that differed (``c``, not the ``1.0``) as arguments; results against NumPy, signed zeros kept."""
    import re
    from fnarray.lowering.jax import shared
    shared._shared.clear()
    x = fa.device_put(np.array([-1.5, 0.25, 2.0], dtype), jdev)
    made, texts, kept = shared.stats["made"], [], []   # (kept: the table holds what it made weakly)
    for c in (3.0, -0.0, 0.5, 3.0, 0.0):
        f, g = fa.jit(lambda a, c=c: a * c + 1.0), fa.jit(lambda a, c=c: a * c)
        kept += [f, g]
        np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x) * dtype(c) + dtype(1))
        np.testing.assert_array_equal(np.signbit(np.asarray(g(x))), np.signbit(np.asarray(x) * dtype(c)))
        texts.append(f.lower(x).as_text())
    # two jax.jit objects for each of the two structures (a * c + 1.0, a * c), not one for each of the ten programs
    assert shared.stats["made"] - made == 4
    args = [len(re.findall(r"%arg\d+:", t.split("@main(")[1].split("->")[0])) for t in texts]
    assert args == [1, 2, 2, 2, 2]
