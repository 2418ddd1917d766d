"""Run by tests/test_sharding.py in a subprocess with 8 forced XLA host devices: fnarray's sharding against raw
JAX writing the same program. Prints one ``ok NAME`` line per check; any failure raises (non-zero exit)."""

from __future__ import annotations

import os
import sys

import numpy as np

import fnarray as fa
from fnarray import lax
from fnarray.sharding import NamedSharding, P

import jax
import jax.numpy as jnp

assert len(jax.devices()) == 8, (jax.devices(), os.environ.get("XLA_FLAGS"))
R = np.random.RandomState(0)
devs = fa.devices("jax")
mesh = fa.make_mesh((4, 2), ("x", "y"), devices=devs)
jm = mesh.jax_mesh
JP = jax.sharding.PartitionSpec


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)
    print("ok", what, flush=True)


X = R.randn(8, 6).astype(np.float32)

# device_put: a global array with JAX's sharding, shards and addressability
xs = fa.device_put(X, NamedSharding(mesh, P("x", "y")))
jx = jax.device_put(X, jax.sharding.NamedSharding(jm, JP("x", "y")))
assert xs.sharding == NamedSharding(mesh, P("x", "y")) and xs.is_fully_addressable
assert [(str(s.device), s.index) for s in xs.addressable_shards] == \
    [(f"jax:{s.device.id}", s.index) for s in jx.addressable_shards]
for s, t in zip(xs.addressable_shards, jx.addressable_shards, strict=True):
    assert s.data.shape == (2, 3) and s.data.device == fa.get_device(f"jax:{t.device.id}")
    close(s.data, t.data, f"shard {s.device}")
close(xs * 2 + 1, X * 2 + 1, "eager op on a global array")
assert (xs * 2).sharding.spec == P("x", "y"), (xs * 2).sharding

# shard_map of each collective, eager and under jit, against jax.shard_map
CASES = [
    ("psum", lambda L, v: L.psum(v, "x"), JP("x", "y"), JP(None, "y")),
    ("pmean2", lambda L, v: L.pmean(v, ("x", "y")), JP("x", "y"), JP()),
    ("pmax", lambda L, v: L.pmax(v, "y"), JP("x", "y"), JP("x")),
    ("all_gather", lambda L, v: L.all_gather(v, "x", axis=1), JP("x", "y"), JP(None, None, "y")),
    ("all_gather_tiled", lambda L, v: L.all_gather(v, "x", tiled=True), JP("x", "y"), JP(None, "y")),
    ("psum_scatter", lambda L, v: L.psum_scatter(v, "y", scatter_dimension=1, tiled=True), JP("x", None),
     JP("x", "y")),
    ("all_to_all_tiled", lambda L, v: L.all_to_all(v, "x", 1, 0, tiled=True), JP("x", None), JP("x", None)),
    ("ppermute", lambda L, v: L.ppermute(v, "x", [(i, (i + 1) % 4) for i in range(4)]), JP("x", "y"),
     JP("x", "y")),
    ("axis_index", lambda L, v: v * L.axis_index("x").astype(v.dtype) + L.axis_index("y").astype(v.dtype),
     JP("x", "y"), JP("x", "y")),
    # axis_index_groups (a grouped result still varies over the axis: its out_specs name it)
    ("psum_groups", lambda L, v: L.psum(v, "x", axis_index_groups=[[0, 2], [1, 3]]), JP("x", "y"), JP("x", "y")),
    ("pmax_groups", lambda L, v: L.pmax(v, "x", axis_index_groups=[[3], [0, 1, 2]]), JP("x", "y"), JP("x", "y")),
    ("pmean_groups", lambda L, v: L.pmean(v, "x", axis_index_groups=[[3, 1], [0, 2]]), JP("x", "y"), JP("x", "y")),
    ("all_gather_groups", lambda L, v: L.all_gather(v, "x", axis=1, tiled=True, axis_index_groups=[[3, 0], [1, 2]]),
     JP("x", "y"), JP("x", "y")),
]
Xb = R.randn(8, 8).astype(np.float32)
for name, f, ins, outs in CASES:
    fsm = fa.shard_map(lambda v, f=f: f(lax, v), mesh=mesh, in_specs=P(*ins), out_specs=P(*outs))
    # check_vma=False: JAX counts all_gather results as varying (all_gather_invariant is its replicated form)
    jsm = jax.shard_map(lambda v, f=f: f(jax.lax, v), mesh=jm, in_specs=ins, out_specs=outs, check_vma=False)
    want = jax.jit(jsm)(Xb)
    got = fa.jit(fsm)(Xb)
    close(got, want, f"jit(shard_map) {name}")
    if name in ("psum", "all_to_all_tiled"):  # outside jit too (one XLA compile each: a selection)
        close(fsm(fa.device_put(Xb, "jax:0")), want, f"shard_map {name}")
    assert got.sharding.is_equivalent_to(NamedSharding(mesh, P(*outs)), got.ndim), (name, got.sharding)

# grad through shard_map (outside and inside jit) against JAX's: a data-parallel loss
W = R.randn(6, 3).astype(np.float32) * 0.3
Y = R.randn(8, 3).astype(np.float32)


def loss(L, w, x, y):
    return L.pmean(((jnp.tanh(x @ w) if L is jax.lax else fa.numpy.tanh(x @ w)) - y) ** 2, "x").mean()


fl = fa.shard_map(lambda w, x, y: loss(lax, w, x, y), mesh=mesh, in_specs=(P(), P("x"), P("x")), out_specs=P())
jl = jax.shard_map(lambda w, x, y: loss(jax.lax, w, x, y), mesh=jm, in_specs=(JP(), JP("x"), JP("x")),
                   out_specs=JP())
gw = jax.jit(jax.grad(jl))(W, X, Y)
close(fa.grad(fl)(W, X, Y), gw, "grad(shard_map)")
close(fa.jit(fa.grad(fl))(W, X, Y), gw, "jit(grad(shard_map))")
close(fa.grad(fl, argnums=1)(W, X, Y), jax.grad(jl, argnums=1)(W, X, Y), "grad(shard_map) wrt a sharded input")
G = [[3, 0], [1, 2]]
fg = fa.shard_map(lambda v: lax.all_gather(v, "x", tiled=True, axis_index_groups=G), mesh=mesh, in_specs=P("x"),
                  out_specs=P("x"))
jg = jax.shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True, axis_index_groups=G), mesh=jm, in_specs=JP("x"),
                   out_specs=JP("x"), check_vma=False)
Wg = R.randn(16, 6).astype(np.float32)
close(fa.jit(fa.grad(lambda v: (fg(v) * Wg).sum()))(X), jax.jit(jax.grad(lambda v: (jg(v) * Wg).sum()))(X),
      "grad(shard_map(all_gather with axis_index_groups))")
close(fa.vmap(fl, in_axes=(0, None, None))(np.stack([W, 2 * W]), X, Y),
      jax.vmap(jl, in_axes=(0, None, None))(np.stack([W, 2 * W]), X, Y), "vmap(shard_map)")

# A data-parallel SGD step, jitted: the same all-reduces in the lowered text as raw JAX's, and once warm no data
# moves between devices (a constant the body captures, here an arange, is placed on the mesh once; handed to the
# program as a one-device array, JAX copied it to every device on every call).
C6 = np.arange(6, dtype=np.float32) / 6


def dp_step(L, value_and_grad, tanh, w, x, y):
    value, g = value_and_grad(lambda w: ((tanh(x @ w) * C6[:3] - y) ** 2).mean())(w)
    return w - 0.1 * L.pmean(g, "x"), L.pmean(value, "x")


fs = fa.jit(fa.shard_map(lambda w, x, y: dp_step(lax, fa.value_and_grad, fa.numpy.tanh, w, x, y), mesh=mesh,
                         in_specs=(P(), P("x"), P("x")), out_specs=(P(), P())))
js = jax.jit(jax.shard_map(lambda w, x, y: dp_step(jax.lax, jax.value_and_grad, jnp.tanh, w, x, y), mesh=jm,
                           in_specs=(JP(), JP("x"), JP("x")), out_specs=(JP(), JP()), check_vma=False))
xd, yd = (fa.device_put(v, NamedSharding(mesh, P("x"))) for v in (X, Y))
w1, l1 = fs(fa.device_put(W, NamedSharding(mesh, P())), xd, yd)
jw1, jl1 = js(W, X, Y)
close(w1, jw1, "data-parallel step")
close(l1, jl1, "data-parallel step's loss")
n_fa = fs.lower(w1, xd, yd).as_text().count("stablehlo.all_reduce")
n_raw = js.lower(jw1, X, Y).as_text().count("stablehlo.all_reduce")
assert n_fa == n_raw == 2, (n_fa, n_raw)
print("ok all-reduces of the data-parallel step:", n_fa, flush=True)
with jax.transfer_guard("disallow"):
    w2, l2 = fs(w1, xd, yd)
jw2, jl2 = js(jw1, X, Y)
close(w2, jw2, "data-parallel step without transfers between devices")

# jit with in_shardings / out_shardings: the placement is JAX's
s_in, s_out = NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, "y"))
fj = fa.jit(lambda a: fa.numpy.sin(a) * 2, in_shardings=s_in, out_shardings=s_out)
jj = jax.jit(lambda a: jnp.sin(a) * 2, in_shardings=s_in.jax_sharding, out_shardings=s_out.jax_sharding)
got, want = fj(X), jj(X)
close(got, want, "jit(in_shardings, out_shardings)")
assert got.sharding == s_out, got.sharding
assert want.sharding.spec == JP(None, "y")
print("ok sharding of jit outputs", flush=True)

# bad input: never a hang, a clear error
def raises(exc, match, fn):
    try:
        fn()
    except exc as e:
        assert match in str(e), (match, str(e))
        print("ok error:", match, flush=True)
        return
    raise AssertionError(f"no {exc.__name__} ({match})")


raises(ValueError, "does not have", lambda: NamedSharding(mesh, P("z")))
raises(ValueError, "divisible", lambda: fa.device_put(np.ones((6, 4), np.float32), NamedSharding(mesh, P("x"))))
raises(ValueError, "divisible", lambda: fa.shard_map(lambda v: v, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
    np.ones((6,), np.float32)))
raises(ValueError, "leave out the mesh axis 'x'", lambda: fa.shard_map(lambda v: v * 2, mesh=mesh, in_specs=P("x"),
                                                                       out_specs=P())(np.ones((8,), np.float32)))
raises(ValueError, "needs 16 devices", lambda: fa.make_mesh((4, 4), ("a", "b"), devices=devs))
# examples/data_parallel.py: both modes equal one-device training (it exits non-zero otherwise)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import data_parallel  # noqa: E402

for mode in ("dp", "tp"):
    res = data_parallel.main(["--devices", "8", "--mode", mode, "--steps", "8"])
    assert res["relative_difference"] < 1e-4 and res["losses"][-1] < res["losses"][0], res
    print("ok example", mode, flush=True)
# pmap against jax.pmap: collectives, in_axes/out_axes, static arguments, the classic data-parallel step
Xp = R.randn(4, 3, 2).astype(np.float32)
Wp = R.randn(2, 3).astype(np.float32)
for L, pm in ((jax.lax, jax.pmap), (lax, fa.pmap)):
    outs = []
    ring = [(i, (i + 1) % 4) for i in range(4)]
    outs.append(pm(lambda v: (v - L.pmean(v, "i")) * L.pmax(v, "i") + L.axis_index("i"), "i")(Xp))
    outs.append(pm(lambda v: L.all_gather(v, "i").sum(0) + L.ppermute(v, "i", ring), "i")(Xp))
    outs.append(pm(lambda v, w: L.psum(v @ w, "i"), "i", in_axes=(1, None), out_axes=1)(Xp.transpose(1, 0, 2), Wp))
    outs.append(pm(lambda v, k, d: {"s": L.psum(v * k, "i"), "v": v * d["c"]}, "i", in_axes=(0, None, {"c": 0}),
                   out_axes={"s": None, "v": 2}, static_broadcasted_argnums=1)(Xp, 3.0, {"c": Xp[:, :1, :1]}))
    outs.append(pm(lambda v: jax.vmap(lambda r: r * L.axis_index("i"))(v) if L is jax.lax else
                   fa.vmap(lambda r: r * L.axis_index("i"))(v), "i")(Xp))
    if L is jax.lax:
        want = outs
    else:
        pairs = zip(jax.tree_util.tree_leaves(outs), jax.tree_util.tree_leaves(want), strict=True)
        for k, (g, w) in enumerate(pairs):
            close(g, w, f"pmap case {k}")
        assert outs[0].sharding.spec == fa.P("i") and len(outs[0].addressable_shards) == 4, outs[0].sharding

Yp = R.randn(8, 5, 3).astype(np.float32)
Xq = R.randn(8, 5, 2).astype(np.float32)
for np_, g_, L, pm in ((jnp, jax.grad, jax.lax, jax.pmap), (fa.numpy, fa.grad, lax, fa.pmap)):
    def update(w, x, y, np_=np_, g_=g_, L=L):
        loss = lambda w: np_.mean((np_.tanh(x @ w) - y) ** 2)
        return w - 0.5 * L.pmean(g_(loss)(w), "batch"), L.pmean(loss(w), "batch")
    step = pm(update, "batch")
    w = np.broadcast_to(Wp, (8, 2, 3))
    losses = []
    for _ in range(3):
        w, value = step(w, Xq, Yp)
        losses.append(value)
    if pm is jax.pmap:
        want = (w, losses)
close(want[0], w, "pmap training step: weights")
close(np.stack(want[1]), np.stack(losses), "pmap training step: losses")
try:
    fa.pmap(lambda v: v)(np.ones((9, 2), np.float32))
    raise AssertionError("no error for 9 > 8 devices")
except ValueError as e:
    assert "size 9" in str(e) and "8 device" in str(e) and "xla_force_host_platform_device_count=9" in str(e), e
    print("ok error: pmap over more devices than there are", flush=True)

# a jitted max over a sharded global array, called again from jit's hot path (jax.jit's callable itself there):
# XLA's partitioner refuses the NaN-keeping comparator, the backend's fallback runs the plain reductions
XN = X.copy()
XN[3, 2] = np.nan
softmax_num = fa.jit(lambda a: fa.numpy.exp(a - a.max(axis=-1, keepdims=True)))
xn = fa.device_put(XN, NamedSharding(mesh, P("x", "y")))
for i in range(3):
    close(softmax_num(xn), np.exp(XN - XN.max(axis=-1, keepdims=True)), f"jitted max over a sharded array, call {i}")

print("done", flush=True)
sys.exit(0)
