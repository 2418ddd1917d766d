"""Run by tests/test_distributed.py through ``python -m fnarray.distributed.launch -n 2 --backend mlx``: a mesh
over two mlx processes (``mx.distributed`` ring on 127.0.0.1). Every collective, through ``shard_map`` eagerly
and under ``jit``, is checked against NumPy on the global array; then ``grad``, the errors, and
``examples/data_parallel.py`` against one-device training. Prints ``ok ...`` lines; a failure raises."""

from __future__ import annotations

import os
import sys
import time

import mlx.core as mx
import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax
from fnarray.sharding import Mesh, NamedSharding, P

_T0 = time.perf_counter()  # after the imports
fa.distributed.initialize(timeout=60)
me, n = fa.process_index(), fa.process_count()
assert n == 2, n
devs = fa.devices("mlx")
assert [d.id for d in devs] == [0, 1] and fa.get_device("mlx") == devs[me], (devs, fa.get_device("mlx"))
total = mx.distributed.all_sum(mx.array([float(me + 1)]), group=fa.distributed.mlx_group())
assert float(total.item()) == 3.0  # the raw group of the run
mesh = fa.make_mesh((n,), ("x",))
assert mesh.backend == "mlx" and mesh.size == 2

r = np.random.RandomState(0)  # the same global values in every process
X = r.randn(4, 6).astype(np.float32)
X[1, 2] = np.nan   # pmax/pmin propagate NaN (MLX's all_max drops it)
I = r.randint(-50, 50, size=(4, 6)).astype(np.int32)
shards = [X[:2], X[2:]]

xs = fa.device_put(X, NamedSharding(mesh, P("x")))
assert not xs.is_fully_addressable and len(xs.addressable_shards) == 1 and xs.sharding.spec == P("x")
(sh,) = xs.addressable_shards
assert sh.device == devs[me] and sh.index[0] == slice(2 * me, 2 * me + 2), sh
np.testing.assert_array_equal(np.asarray(sh.data), shards[me])
print("ok device_put", f"({time.perf_counter() - _T0:.1f} s)", flush=True)


def local(a):
    """This process's shard of a global result, with the global index it covers."""
    (s,) = a.addressable_shards
    return np.asarray(s.data), s.index


def check(name, body, out_spec, ref, x=xs, atol=1e-6):
    f = fa.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=out_spec)
    for how, fn in (("eager", f), ("jit", fa.jit(f))):
        got, index = local(fn(x))
        want = ref[index]
        assert got.shape == want.shape and got.dtype == want.dtype, (name, how, got.shape, want.shape, got.dtype)
        np.testing.assert_allclose(got, want, atol=atol, err_msg=f"{name} ({how})")


S = shards[0] + shards[1]
check("psum", lambda v: lax.psum(v, "x"), P(), S)
check("pmean", lambda v: lax.pmean(v, "x"), P(), S / 2)
check("pmax", lambda v: lax.pmax(v, "x"), P(), np.maximum(*shards))
check("pmin", lambda v: lax.pmin(v, "x"), P(), np.minimum(*shards))
ints = fa.device_put(I, NamedSharding(mesh, P("x")))
check("psum int32", lambda v: lax.psum(v, "x"), P(), I[:2] + I[2:], x=ints)
check("pmax int32", lambda v: lax.pmax(v, "x"), P(), np.maximum(I[:2], I[2:]), x=ints)
check("all_gather", lambda v: lax.all_gather(v, "x"), P(), np.stack(shards))
check("all_gather axis=1", lambda v: lax.all_gather(v, "x", axis=1), P(), np.stack(shards, 1))
check("all_gather tiled", lambda v: lax.all_gather(v, "x", axis=1, tiled=True), P(), np.concatenate(shards, 1))
# axis_index_groups: a group per process (each keeps its own), one group in reverse order
check("psum groups", lambda v: lax.psum(v, "x", axis_index_groups=[[0], [1]]), P("x"), X)
check("pmax groups", lambda v: lax.pmax(v, "x", axis_index_groups=[[1, 0]]), P("x"),
      np.concatenate([np.maximum(*shards)] * 2))
check("all_gather groups", lambda v: lax.all_gather(v, "x", axis_index_groups=[[1, 0]]), P("x"),
      np.concatenate([np.stack(shards[::-1])] * 2))
check("all_gather tiled groups", lambda v: lax.all_gather(v, "x", axis=1, tiled=True, axis_index_groups=[[1, 0]]),
      P("x"), np.concatenate([np.concatenate(shards[::-1], 1)] * 2))
check("psum_scatter", lambda v: lax.psum_scatter(v, "x"), P("x"), S.reshape(-1))
check("psum_scatter tiled", lambda v: lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True), P(None, "x"), S)
a2a = np.concatenate([np.stack([shards[s][q] for s in range(2)]) for q in range(2)])
check("all_to_all", lambda v: lax.all_to_all(v, "x", 0, 0), P("x"), a2a)
a2a_t = np.concatenate([np.concatenate([shards[s][:, 3 * q:3 * q + 3] for s in range(2)]) for q in range(2)])
check("all_to_all tiled", lambda v: lax.all_to_all(v, "x", 1, 0, tiled=True), P("x"), a2a_t)
check("ppermute swap", lambda v: lax.ppermute(v, "x", [(0, 1), (1, 0)]), P("x"), np.concatenate(shards[::-1]))
check("ppermute one way", lambda v: lax.ppermute(v, "x", [(0, 1)]), P("x"),
      np.concatenate([np.zeros_like(shards[0]), shards[0]]))
check("axis_index", lambda v: v * 0 + lax.axis_index("x"), P("x"),
      np.concatenate([np.zeros((2, 6)), np.ones((2, 6))]).astype(np.int32), x=ints)
X3 = np.nan_to_num(X).reshape(2, 4, 3)  # vmap of a shard_map: a batch dimension in front of each spec
out = fa.vmap(fa.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))(
    fa.device_put(X3, NamedSharding(mesh, P(None, "x"))))
np.testing.assert_allclose(np.asarray(out), X3[:, :2] + X3[:, 2:], rtol=1e-6)
print("ok collectives vs NumPy, eager and jit", f"({time.perf_counter() - _T0:.1f} s)", flush=True)

# Large enough that two processes sending first would hang in the ring backend (measured at 4 elements already).
big = fa.device_put(np.arange(2 * 300_000, dtype=np.float32), NamedSharding(mesh, P("x")))
got, _ = local(fa.jit(fa.shard_map(lambda v: lax.ppermute(v, "x", [(0, 1), (1, 0)]), mesh=mesh, in_specs=P("x"),
                                   out_specs=P("x")))(big))
np.testing.assert_array_equal(got, np.arange(600_000, dtype=np.float32)[300_000 * (1 - me):300_000 * (2 - me)])
print("ok ppermute of 1.2 MB", f"({time.perf_counter() - _T0:.1f} s)", flush=True)

# grad of a pmean'd loss: against the formula on the global arrays.
Xg = np.nan_to_num(X)
W = r.randn(6, 3).astype(np.float32)
xg = fa.device_put(Xg, NamedSharding(mesh, P("x")))
wg = fa.device_put(W, NamedSharding(mesh, P()))
loss = fa.shard_map(lambda w, v: lax.pmean(fnp.sum(fnp.tanh(v @ w)), "x"), mesh=mesh, in_specs=(P(), P("x")),
                    out_specs=P())
t = 1 - np.tanh(Xg.astype(np.float64) @ W) ** 2
dw, dx = Xg.T @ t / n, t @ W.T / n
for how, g in (("eager", fa.grad(loss, argnums=(0, 1))), ("jit", fa.jit(fa.grad(loss, argnums=(0, 1))))):
    gw, gx = g(wg, xg)
    np.testing.assert_allclose(np.asarray(gw), dw, rtol=1e-4, atol=1e-5, err_msg=how)  # replicated: a full copy
    got, index = local(gx)
    np.testing.assert_allclose(got, dx[index], rtol=1e-4, atol=1e-5, err_msg=how)
    val = loss(wg, xg)
    np.testing.assert_allclose(float(val), np.tanh(Xg.astype(np.float64) @ W).sum() / n, rtol=1e-5)
print("ok grad through shard_map", f"({time.perf_counter() - _T0:.1f} s)", flush=True)

# A ppermute of a lazy collective's result (both processes hung in send/recv while one forced its all_sum), and
# grad through a ppermute, whose transpose puts a psum before the inverse ppermute.
check("ppermute of a psum", lambda v: lax.all_gather(lax.ppermute(lax.psum(v, "x"), "x", [(0, 1)]), "x", tiled=True),
      P(), np.concatenate([np.zeros_like(shards[0]), shards[0] + shards[1]]))
cw = np.array([[1.0], [3.0]], np.float32)  # weighs a shard's 2 rows, the same on both processes
perm_loss = fa.shard_map(lambda v: lax.psum(fnp.sum(lax.ppermute(v, "x", [(0, 1), (1, 0)]) ** 2 * cw), "x"),
                         mesh=mesh, in_specs=P("x"), out_specs=P())
for how, g in (("eager", fa.grad(perm_loss)), ("jit", fa.jit(fa.grad(perm_loss)))):
    got, index = local(g(xg))
    np.testing.assert_allclose(got, 2 * Xg.astype(np.float64)[index] * cw, rtol=1e-5, atol=1e-6, err_msg=how)
print("ok ppermute after a collective, grad through ppermute", f"({time.perf_counter() - _T0:.1f} s)", flush=True)

# Replicated global arrays work outside shard_map; split ones only elementwise alike; the rest is an error.
tot = fa.jit(fa.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))(xg)
np.testing.assert_allclose(np.asarray(fa.jit(lambda a: fnp.sum(a * 2))(tot)), 2 * (Xg[:2] + Xg[2:]).sum(), rtol=1e-5)
np.testing.assert_allclose(local(xg * 2 + 1)[0], 2 * Xg[2 * me:2 * me + 2] + 1, rtol=1e-6)


def raises(what, fn, *words):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the message is what is checked)
        msg = str(e)
        assert all(w in msg for w in words), (what, msg)
        return
    raise AssertionError(f"{what}: no error")


raises("np.asarray of a split array", lambda: np.asarray(xg), "addressable_shards")
assert "split over processes" in repr(xg) and "shape=(4, 6)" in repr(xg), repr(xg)
raises("a reduction of a split array", lambda: fnp.sum(xg), "inside the shard_map")
raises("a 2-D mesh", lambda: fa.make_mesh((2, 1), ("a", "b")), "1-D")
raises("a mesh of 3 over 2 processes", lambda: fa.make_mesh((3,), ("a",)), "every process once")
raises("a mesh in another order", lambda: Mesh(np.array(devs[::-1]), ("a",)), "process order")
raises("another process's device", lambda: Mesh(np.array([devs[1 - me]]), ("a",)), "this process's own")
raises("placing on another process's device", lambda: fa.device_put(np.ones(2), devs[1 - me]), "not of this process")
assert fa.make_mesh((1,), ("a",), devices=devs).devices[0] == devs[me]  # one device: this process's
print("ok errors", f"({time.perf_counter() - _T0:.1f} s)", flush=True)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import data_parallel  # noqa: E402

res = data_parallel.main(["--steps", "4"])
assert res["relative_difference"] < 1e-4, res
print("ok example over two mlx processes", res["relative_difference"], f"({time.perf_counter() - _T0:.1f} s)",
      flush=True)
print("done", me, flush=True)
