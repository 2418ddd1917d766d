"""Run by tests/test_checkpoint.py in a subprocess with 8 forced XLA host devices: a checkpoint of sharded arrays
saved and loaded back with ``like=``, ``shardings=`` and ``shardings="saved"``, each array compared with what was
saved and its sharding with the expected one. Prints one ``ok NAME`` line per check; any failure raises."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import fnarray as fa
from fnarray.sharding import NamedSharding, P, SingleDeviceSharding

import jax

if len(jax.devices()) != 8:
    raise SystemExit(f"expected 8 XLA host devices, got {jax.devices()} (XLA_FLAGS={os.environ.get('XLA_FLAGS')})")
R = np.random.RandomState(0)
mesh = fa.make_mesh((4, 2), ("x", "y"), devices=fa.devices("jax"))
W = R.randn(8, 8).astype(np.float32)
B = R.randn(6).astype(np.float32)
C = np.arange(12, dtype=np.int32).reshape(4, 3)
tree = {"w": fa.device_put(W, NamedSharding(mesh, P("x", "y"))),
        "b": fa.device_put(B, NamedSharding(mesh, P(None))),
        "c": fa.device_put(C, "jax:3"),
        "host": np.float64(2.5)}


def same(got, want, sharding, what):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=what)
    if isinstance(sharding, NamedSharding):
        if not got.sharding.is_equivalent_to(sharding, got.ndim):
            raise AssertionError(f"{what}: sharding {got.sharding}, expected {sharding}")
        # The shards themselves: each device holds its block of the saved array.
        for shard in got.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want)[shard.index], err_msg=what)
    else:
        if got.device != sharding or not got.committed:
            raise AssertionError(f"{what}: on {got.device} (committed {got.committed}), expected {sharding}")
    print("ok", what, flush=True)


folder = tempfile.mkdtemp()
path = os.path.join(folder, "sharded.safetensors")
fa.save(path, tree)

# The file says where each array was.
saved = fa.serialization.saved_shardings(path)
if set(saved) != {"w", "b", "c"}:
    raise AssertionError(saved)
if saved["w"] != NamedSharding(mesh, P("x", "y")) or saved["c"] != fa.get_device("jax:3"):
    raise AssertionError(saved)
print("ok saved_shardings", flush=True)

# Without like: the default device, uncommitted (as before); "saved" restores where it was.
plain = fa.load(path)
if plain["w"].committed or len(plain["w"].sharding.device_set) != 1:
    raise AssertionError(plain["w"].sharding)
print("ok load without like: default device", flush=True)
back = fa.load(path, shardings="saved")
same(back["w"], W, NamedSharding(mesh, P("x", "y")), "shardings='saved' w")
same(back["b"], B, NamedSharding(mesh, P(None)), "shardings='saved' b")
same(back["c"], C, fa.get_device("jax:3"), "shardings='saved' c")

# like=: each array takes its like leaf's sharding, here different from the saved ones.
other = fa.make_mesh((2, 4), ("a", "b"), devices=fa.devices("jax"))
like = {"w": fa.device_put(np.zeros_like(W), NamedSharding(other, P("b", "a"))),
        "b": fa.device_put(np.zeros_like(B), NamedSharding(other, P("a"))),
        "c": fa.device_put(np.zeros_like(C), "jax:5"),
        "host": np.float64(0)}
got = fa.load(path, like=like)
same(got["w"], W, NamedSharding(other, P("b", "a")), "like= w")
same(got["b"], B, NamedSharding(other, P("a")), "like= b")
same(got["c"], C, fa.get_device("jax:5"), "like= c")
if got["host"].committed or float(got["host"]) != 2.5:
    raise AssertionError(got["host"])
print("ok like= host leaf stays uncommitted", flush=True)

# like= of abstract leaves with a .sharding (jax.ShapeDtypeStruct), and shardings= as a tree.
abstract = {"w": jax.ShapeDtypeStruct(W.shape, W.dtype, sharding=NamedSharding(mesh, P("y", "x")).jax_sharding),
            "b": fa.ShapedArray(B.shape, B.dtype), "c": fa.ShapedArray(C.shape, C.dtype),
            "host": fa.ShapedArray((), np.float64)}
tree_sh = {"w": None, "b": None, "c": SingleDeviceSharding(fa.get_device("jax:7")),
           "host": "jax:1"}
got = fa.load(path, like=abstract, shardings=tree_sh)
same(got["w"], W, NamedSharding(mesh, P("y", "x")), "like= of a jax.ShapeDtypeStruct with a sharding: w")
same(got["c"], C, fa.get_device("jax:7"), "shardings= tree c")
same(got["host"], np.float64(2.5), fa.get_device("jax:1"), "shardings= tree host")
if got["b"].committed:
    raise AssertionError("a None entry of shardings= keeps the default")
print("ok shardings= None entry", flush=True)
one = fa.load(path, shardings=NamedSharding(mesh, P()))
same(one["w"], W, NamedSharding(mesh, P()), "shardings= one replicated sharding for all")
print("done", flush=True)
sys.exit(0)
