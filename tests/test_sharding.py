"""Meshes, shardings and ``shard_map``: 8 forced XLA host devices in a subprocess against raw JAX
(``tests/spmd_8_devices.py``), and meshes of one device on every backend (a named vmap of size 1)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import fnarray as fa
from fnarray import lax
from fnarray.sharding import Mesh, NamedSharding, P, PartitionSpec

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def test_eight_host_devices_against_raw_jax():
    pytest.importorskip("jax")
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=8", FNARRAY_DEVICE="jax:0",
               JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, os.path.join(_ROOT, "tests", "spmd_8_devices.py")], env=env, cwd=_ROOT,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("ok ") >= 30, r.stdout


def test_mesh_names_of_jax_0_10_against_raw_jax():
    """set_mesh, shard_map as a decorator with inferred in_specs, device_put(x, P), AxisType, typeof, pcast,
    out_sharding=, debug.print per device and fa.devices() as jax.devices(), on 8 host devices (only XLA_FLAGS
    set: the forced host devices make jax:0 the default device)."""
    pytest.importorskip("jax")
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    env.pop("FNARRAY_DEVICE", None)
    r = subprocess.run([sys.executable, os.path.join(_ROOT, "tests", "spmd_mesh_names.py")], env=env, cwd=_ROOT,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("ok ") >= 18, r.stdout


def test_ambient_mesh_of_one_device_on_every_backend(device):
    mesh = Mesh([device], ("x",), axis_types=fa.sharding.AxisType.Explicit)
    x = np.arange(6, dtype=np.float32)
    with fa.sharding.set_mesh(mesh):
        @fa.shard_map(out_specs=P("x"))
        def f(v):
            return lax.pcast(v, "x", to="varying") * 2 + lax.axis_index("x").astype(v.dtype)
        np.testing.assert_allclose(np.asarray(f(fa.device_put(x, P("x")))), 2 * x)
        assert str(fa.typeof(fa.device_put(x, device))) == "float32[6]"
    assert fa.sharding.get_mesh() is None


def test_one_device_mesh_on_every_backend(device):
    mesh = Mesh([device], ("x",))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = fa.shard_map(lambda v: lax.psum(v, "x") + lax.axis_index("x").astype(v.dtype), mesh=mesh,
                     in_specs=P("x"), out_specs=P("x"))
    np.testing.assert_allclose(np.asarray(fa.jit(f)(fa.device_put(x, device))), x)
    g = fa.shard_map(lambda v: lax.all_gather(v, "x", tiled=True), mesh=mesh, in_specs=P(None, "x"),
                     out_specs=P(None, "x"))
    np.testing.assert_allclose(np.asarray(g(fa.device_put(x, device))), x)
    if device.backend == "numpy":  # the transforms through it: grad and vmap
        loss = fa.shard_map(lambda w, v: lax.pmean((v @ w) ** 2, "x").sum(), mesh=mesh, in_specs=(P(), P("x")),
                            out_specs=P())
        w = np.ones((4, 2), np.float32) * 0.5
        np.testing.assert_allclose(np.asarray(fa.grad(loss)(w, x)), 2 * x.T @ (x @ w), rtol=1e-5)
        xs = fa.device_put(x, NamedSharding(mesh, P("x")))
        assert xs.device == device and xs.sharding.device_set == {device}
        assert len(xs.addressable_shards) == 1 and xs.is_fully_addressable


def test_engineless_backends_refuse_larger_meshes():
    with pytest.raises(ValueError, match="jax backend"):
        fa.make_mesh((2,), ("x",), devices=["numpy:0", "numpy:0"])
    with pytest.raises(ValueError, match="no distributed engine"):
        Mesh(np.array([fa.get_device("numpy:0"), fa.get_device("numpy:0")]), ("x",))
    if fa.default_device().backend == "numpy":
        with pytest.raises(ValueError, match="mlx backend"):
            fa.make_mesh((2, 2), ("x", "y"))
    assert fa.make_mesh((1,), ("x",), devices=["numpy:0"]).size == 1


def test_bad_specs_on_one_device():
    mesh = Mesh(["numpy:0"], ("x",))
    with pytest.raises(ValueError, match="names the axis 'z', which the mesh does not have"):
        NamedSharding(mesh, P("z"))
    with pytest.raises(ValueError, match="uses a mesh axis twice"):
        NamedSharding(mesh, P("x", "x"))
    with pytest.raises(ValueError, match="leave out the mesh axis 'x'"):
        fa.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P())(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="does not match"):
        fa.shard_map(lambda a, b: a, mesh=mesh, in_specs=({"k": P()},), out_specs=P())(np.ones(3), np.ones(3))
    assert PartitionSpec("x", ["a"]) == ("x", "a") and P("x").padded(3) == P("x", None, None)


@pytest.mark.parametrize("case", ["jit", "cond", "while"])
def test_check_vma_looks_inside_calls_and_control_flow(case):
    """A collective inside a nested ``jit``, a ``cond`` branch or a loop body makes its result replicated, so an
    ``out_specs`` of ``P()`` is accepted (it was refused: the check took the union of the call's inputs); the
    same program without the collective is still refused."""
    mesh = Mesh(["numpy:0"], ("x",))
    x = np.arange(5, dtype=np.float32)
    reduce_ = {
        "jit": lambda v, red: fa.jit(red)(v),
        "cond": lambda v, red: lax.cond(True, red, lambda u: red(u) + 1, v),
        "while": lambda v, red: lax.fori_loop(0, 3, lambda i, c: c + red(v), red(v)),
    }[case]
    want = {"jit": x, "cond": x, "while": 4 * x}[case]  # a psum over one device is the identity
    ok = fa.shard_map(lambda v: reduce_(v, lambda u: lax.psum(u, "x")), mesh=mesh, in_specs=P("x"), out_specs=P())
    np.testing.assert_allclose(np.asarray(ok(x)), want)
    bad = fa.shard_map(lambda v: reduce_(v, lambda u: u * 2), mesh=mesh, in_specs=P("x"), out_specs=P())
    with pytest.raises(ValueError, match="leave out the mesh axis 'x'"):
        bad(x)


def test_distributed_without_initialize():
    assert fa.process_index() == 0 and fa.process_count() == 1
    with pytest.raises(ValueError, match="no distributed engine"):
        fa.distributed.initialize(backend="numpy")


def test_the_mesh_types_are_the_devices_layers_and_engines_are_the_spmd_backends():
    """``fnarray.sharding`` re-exports the types of ``devices/mesh.py`` and ``devices/sharding.py`` (the same
    objects), and the backends with a distributed engine are those whose ``Backend.spmd`` is set."""
    from fnarray.devices import mesh, sharding
    for name in ("Mesh", "PartitionSpec", "P", "AxisType", "set_mesh", "use_mesh", "get_mesh", "get_abstract_mesh"):
        assert getattr(fa.sharding, name) is getattr(mesh, name), name
    for name in ("Sharding", "SingleDeviceSharding", "NamedSharding", "Shard"):
        assert getattr(fa.sharding, name) is getattr(sharding, name), name
    started = {d.backend for d in fa.devices(all_backends=True)}
    for name in started:
        assert fa.devices(name)[0].impl.spmd == (name in fa.sharding.ENGINE_BACKENDS), name
