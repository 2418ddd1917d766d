"""The memory check counts what a backend allocates after fusion (issue 27, item 6).

A device with ``Capabilities(memory_check="compiled")`` (jax: XLA fuses; opencl/webgpu: the kernel
scheduler computes most values inline) is not refused for an intermediate value that never gets a
buffer; what the lowered program does allocate is still checked, and the outputs always are.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import ResourceExhaustedError
from fnarray.devices import memory

N = 10 ** 5  # ones((N, N)) is 37.25 GiB of float32: more than this machine's memory


def _jax():
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "jax"]
    if not devs:
        pytest.skip("backend unavailable: jax")
    return devs[0]


def test_fused_reduction_of_a_huge_value_runs_on_jax():
    """``sum(ones((1e5, 1e5)))`` under jit: XLA fuses the fill into the reduction (as raw ``jax.jit`` does)."""
    dev = _jax()
    t = time.perf_counter()
    out = fa.jit(lambda: fnp.ones((N, N)).sum(), device=dev)()
    assert float(out) == 1e10
    assert time.perf_counter() - t < 60


def test_unfusable_huge_intermediate_is_refused_on_jax():
    """A cumulative sum over the same value needs XLA buffers of ~40 GiB: refused before it runs, naming
    the device, the backend's fusion and the sizes."""
    dev = _jax()
    f = fa.jit(lambda: fnp.cumsum(fnp.ones((N, N)), axis=0).sum(), device=dev)
    with pytest.raises(ResourceExhaustedError) as e:
        f()
    msg = str(e.value)
    for part in ("jax:0", "after the jax backend fused it", "GiB", "smaller"):
        assert part in msg, msg


def test_huge_output_is_refused_before_compiling(device):
    """Outputs are buffers whatever the fusion: ``ones((1e5, 1e5)) + 1`` is refused on every device."""
    with pytest.raises(ResourceExhaustedError, match=r"float32\[100000, 100000\] \(37.25 GiB\)"):
        fa.jit(lambda: fnp.ones((N, N)) + 1.0, device=device)()


def test_eager_huge_value_names_jit(device):
    """Eagerly every result is a buffer (raw JAX refuses ``jnp.ones((1e5, 1e5))`` too); the message says so."""
    with pytest.raises(ResourceExhaustedError, match="under fnarray.jit"):
        fnp.ones((N, N), device=device)


@pytest.fixture
def small_device_memory(monkeypatch):
    """Every device holds 1 MiB per buffer and 8 MiB in all."""
    monkeypatch.setattr(memory, "limits", lambda dev: (1 << 20, 8 << 20))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_fused_cast_and_sum_fit_where_the_backend_fuses(device, small_device_memory, dtype):
    """``sum(x.astype(dtype))`` over 512 Ki uint8 (docs/internals.md's opencl case, scaled down): the cast value
    (2 MiB) exceeds one buffer. Where the backend fuses the cast into the sum nothing that large is allocated
    and the sum is right; on backends that allocate every value (numpy, mlx) it is refused, naming the value.
    XLA on the CPU fuses the float32 cast but gives the int32 one a temporary buffer (raw ``jax.jit`` too:
    ``memory_analysis``), so there the int32 case is refused after fusion; the kernel compiler fuses both."""
    caps = device.impl.capabilities(device)
    src = np.uint8 if np.dtype(np.uint8) in caps.dtypes else np.bool_  # WGSL has no 8-bit integers
    x = (np.arange(512 * 1024) % 3 == 0).astype(src)
    f = fa.jit(lambda v: v.astype(dtype).sum(), device=device)
    xd = fa.device_put(x, device)
    lowered = f.lower(xd)
    if caps.memory_check == "compiled" and (dtype == "float32" or hasattr(lowered._backend_lowered, "kernels")):
        assert int(f(xd)) == int(x.astype(np.int64).sum())
    else:
        with pytest.raises(ResourceExhaustedError, match=rf"{dtype}\[524288\] \(2.00 MiB\)|fused it"):
            f(xd)


def test_buffers_after_fusion_are_still_checked(device, small_device_memory):
    """A cumulative sum gets a buffer on every backend: 2 MiB of int32 is refused everywhere, after the
    backend's fusion where it decides (the message says so)."""
    x = fa.device_put(np.ones(512 * 1024, np.bool_), device)
    f = fa.jit(lambda v: fnp.cumsum(v.astype(fnp.int32)).sum(), device=device)
    with pytest.raises(ResourceExhaustedError) as e:
        f(x)
    if device.impl.capabilities(device).memory_check == "compiled":
        assert f"after the {device.backend} backend fused it" in str(e.value)
