"""DLPack with PyTorch (CPU) and JAX, both ways: which exchanges share memory, which copy, and immutability kept.

Sharing is checked by data pointers (``tensor.data_ptr()``, ``ndarray.ctypes.data``,
``jax.Array.unsafe_buffer_pointer()``); values against the producer's own.
The policy is in ``fnarray/devices/dlpack.py`` and ``docs/interop.md``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import BACKEND_UNAVAILABLE, require_backend

try:
    import torch
    _TORCH_ERROR = None
except ModuleNotFoundError as e:
    torch, _TORCH_ERROR = None, e
except ImportError as e:   # installed but broken: a fault of this machine's install, which CI counts
    torch, _TORCH_ERROR = None, e


@pytest.fixture
def needs_torch():
    # Per test, not per module (the numpy and JAX exchanges run without torch): every skip names the reason. torch is
    # optional (the `interop` extra, not in `all`),
    # so its absence is a plain skip, which FNARRAY_REQUIRE_ALL_BACKENDS=1 leaves a skip; .ci/run installs it
    # where the machine holds a wheel. An install that fails to import is a missing backend, which CI fails on.
    if torch is None:
        if isinstance(_TORCH_ERROR, ModuleNotFoundError) and _TORCH_ERROR.name == "torch":
            pytest.skip("torch is not installed (optional: pip install -e '.[interop]', or a CPU build with "
                        "pip install torch --index-url https://download.pytorch.org/whl/cpu)")
        pytest.skip(f"{BACKEND_UNAVAILABLE}: torch is installed but does not import ({_TORCH_ERROR})")


jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

SHARING = ["numpy:0", "jax:0"]


def _dev(name):
    if name.startswith("jax"):
        require_backend("jax")
    return fa.devices(name.split(":")[0])[0]


def _ptr(a):
    """The address of an fnarray array's buffer (host view for numpy:0, the XLA buffer for jax:0)."""
    if a.device.backend == "jax":
        return a.buf().unsafe_buffer_pointer()
    return a._value().ctypes.data


# ------------------------------------------------------------------------------------------- out of fnarray


@pytest.mark.parametrize("dev", SHARING)
def test_numpy_consumer_shares_read_only(dev):
    a = fa.device_put(fnp.arange(6, dtype=fnp.float32) * 2, _dev(dev))
    n = np.from_dlpack(a)
    assert n.ctypes.data == _ptr(a)
    assert not n.flags.writeable
    with pytest.raises(ValueError):
        n[0] = 5
    np.testing.assert_array_equal(n, np.arange(6) * 2.0)


@pytest.mark.parametrize("dev", SHARING)
def test_torch_consumer_gets_a_copy_unless_it_asks(dev, needs_torch):
    a = fa.device_put(fnp.arange(6, dtype=fnp.float32), _dev(dev))
    t = torch.from_dlpack(a)
    assert t.data_ptr() != _ptr(a)  # torch ignores the read-only flag, so it gets its own copy
    t[0] = 99.0
    assert float(np.asarray(a)[0]) == 0.0
    np.testing.assert_array_equal(t.numpy()[1:], np.arange(1, 6, dtype=np.float32))
    shared = torch.from_dlpack(a, copy=False)  # an explicit request shares (the tensor must not be written)
    assert shared.data_ptr() == _ptr(a)
    np.testing.assert_array_equal(shared.numpy(), np.arange(6, dtype=np.float32))
    with pytest.raises((BufferError, RuntimeError, ValueError)):
        a.__dlpack__(copy=False)  # a legacy capsule cannot say read-only: refused, not shared


@pytest.mark.parametrize("dev", SHARING)
def test_jax_consumer_gets_the_values(dev):
    a = fa.device_put(fnp.linspace(0, 1, 7, dtype=fnp.float32), _dev(dev))
    j = jnp.from_dlpack(a)
    np.testing.assert_array_equal(np.asarray(j), np.asarray(a))
    j2 = jax.dlpack.from_dlpack(a)
    np.testing.assert_array_equal(np.asarray(j2 + 1), np.asarray(a) + 1)


def test_dlpack_device():
    a = fa.device_put(fnp.ones(2), _dev("numpy:0"))
    assert tuple(a.__dlpack_device__()) == (1, 0)  # kDLCPU
    b = fa.device_put(fnp.ones(2), _dev("jax:0"))
    assert tuple(b.__dlpack_device__()) == (1, 0)


# ------------------------------------------------------------------------------------------- into fnarray


@pytest.mark.parametrize("dev", SHARING)
def test_from_torch_shares(dev, needs_torch):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    a = fnp.from_dlpack(t, device=_dev(dev))
    assert a.device == _dev(dev) and a.shape == (3, 4) and a.dtype == fnp.float32
    assert _ptr(a) == t.data_ptr()
    np.testing.assert_array_equal(np.asarray(a @ fnp.ones(4)), t.numpy() @ np.ones(4, np.float32))
    c = fnp.from_dlpack(t, device=_dev(dev), copy=True)
    assert _ptr(c) != t.data_ptr()
    np.testing.assert_array_equal(np.asarray(c), t.numpy())


def test_asarray_of_torch_copies_unless_copy_false(needs_torch):
    t = torch.arange(5, dtype=torch.int32)
    a = fnp.asarray(t)
    assert _ptr(a) != t.data_ptr()  # as for a NumPy array: the default copy keeps the array immutable
    t[0] = 42
    assert int(np.asarray(a)[0]) == 0
    b = fnp.asarray(t, copy=False)
    assert _ptr(b) == t.data_ptr() and int(np.asarray(b)[0]) == 42
    assert not np.asarray(b).flags.writeable  # fnarray never writes what it shares


@pytest.mark.parametrize("dev", SHARING)
def test_from_jax_shares(dev):
    with jax.default_device(jax.devices("cpu")[0]):
        j = jnp.arange(8, dtype=jnp.float32) * 0.5
    a = fnp.from_dlpack(j, device=_dev(dev))
    assert _ptr(a) == j.unsafe_buffer_pointer()
    if dev.startswith("jax"):
        assert a.buf() is j  # a jax.Array is taken as it is
    np.testing.assert_array_equal(np.asarray(fnp.sum(a)), np.asarray(jnp.sum(j)))


@pytest.mark.parametrize("dev", SHARING)
@pytest.mark.parametrize("dtype", ["float64", "int64", "bool", "uint8", "float16"])
def test_round_trip_dtypes_and_strides(dev, dtype, needs_torch):
    t = (torch.arange(6).reshape(2, 3) % 3).to(getattr(torch, dtype)).T  # a transposed (strided) tensor
    a = fnp.from_dlpack(t, device=_dev(dev))
    assert a.dtype == np.dtype(dtype) and a.shape == (3, 2)
    np.testing.assert_array_equal(np.asarray(a), t.numpy())
    back = torch.from_dlpack(a)
    assert back.dtype == t.dtype
    np.testing.assert_array_equal(back.numpy(), t.numpy())


def test_other_backends_copy_with_the_same_values(device, needs_torch):
    t = torch.arange(6, dtype=torch.float32)
    a = fnp.from_dlpack(t, device=device)
    assert a.device == device
    np.testing.assert_array_equal(np.asarray(a * 2), t.numpy() * 2)
    np.testing.assert_array_equal(torch.from_dlpack(a).numpy(), t.numpy())
    np.testing.assert_array_equal(np.from_dlpack(a), t.numpy())
