"""``jax_platforms`` / ``jax_platform_name`` through ``fa.config.update`` (issue 25): JAX's example scripts set
them to ``"cpu"`` first thing; fnarray narrows its choice of default device to the platforms named."""

from __future__ import annotations

import pytest

import fnarray as fa
from fnarray.devices import lookup, placement


@pytest.fixture
def restore_platforms():
    old = fa.config.platforms
    yield
    fa.config.platforms = old


@pytest.mark.parametrize("name", ["jax_platform_name", "jax_platforms", "platforms", "platform_name"])
def test_cpu_is_accepted_and_keeps_a_cpu_default(name, restore_platforms):
    fa.config.update(name, "cpu")
    assert fa.config.platforms == fa.config.platform_name == ("cpu",)
    d = fa.default_device()
    assert d.platform == "cpu"
    # what fnarray picks with no platform named, when that runs on the CPU (numpy:0 here; jax:0 under XLA_FLAGS)
    fa.config.update(name, None)
    if fa.default_device().platform == "cpu":
        assert d == fa.default_device()
    x = fa.numpy.ones(3)
    assert x.device == fa.default_device()


def test_platform_lists_unknown_platforms_and_names(restore_platforms):
    fa.config.update("jax_platforms", "cuda,cpu")    # a preference order: cpu where there is no GPU
    assert fa.config.platforms == ("cuda", "cpu")
    assert fa.default_device().platform in ("cpu", "gpu", "cuda")
    with pytest.raises(ValueError, match="unknown platform 'cpux'.*cpu, gpu"):
        fa.config.update("jax_platforms", "cpux")
    with pytest.raises(TypeError, match="comma-separated"):
        fa.config.update("jax_platform_name", 3)
    with pytest.raises(AttributeError, match="did you mean 'platform_name'"):
        fa.config.update("jax_platfrom_name", "cpu")
    with pytest.raises(AttributeError, match="no setting 'jax_xla_backend'"):
        fa.config.update("jax_xla_backend", "cpu")


def test_a_platform_no_backend_has_raises_when_a_device_is_needed(restore_platforms, monkeypatch):
    chosen = placement.default_device()
    if chosen.platform == "tpu":
        pytest.skip("a TPU is present")
    monkeypatch.setattr(lookup, "_ON_PLATFORMS", {})
    fa.config.update("jax_platforms", "tpu")
    with pytest.raises(RuntimeError, match="no installed backend has a device on it"):
        fa.default_device()
