"""Run by tests/test_sharding.py in a subprocess with 8 forced XLA host devices: JAX 0.10's mesh names (the
ambient mesh, ``shard_map`` as a decorator with inferred ``in_specs``, ``device_put(x, P(...))``, ``AxisType``,
``typeof``, ``pcast``, ``out_sharding=``, ``debug.print`` per device, ``visualize_array_sharding``) against raw
JAX writing the same program. Prints one ``ok NAME`` line per check; any failure raises (non-zero exit)."""

from __future__ import annotations

import contextlib
import io
import threading
from functools import partial

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax
from fnarray.sharding import AxisType, Mesh, NamedSharding, P

import jax
import jax.numpy as jnp

JP = jax.sharding.PartitionSpec
R = np.random.RandomState(0)
X = R.randn(8, 4).astype(np.float32)


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6, err_msg=what)
    assert np.asarray(a).shape == np.asarray(b).shape, what
    print("ok", what, flush=True)


def raises(exc, match, fn, what):
    try:
        fn()
    except exc as e:
        assert match in str(e), (match, str(e))
        print("ok error:", what, flush=True)
        return
    raise AssertionError(f"no {exc.__name__}: {what}")


# fa.devices() is jax.devices(): XLA_FLAGS forcing host devices makes jax:0 the default device
assert [str(d) for d in fa.devices()] == [f"jax:{d.id}" for d in jax.devices()], fa.devices()
assert fa.default_device() == fa.devices()[0]
assert {"numpy"} <= {d.backend for d in fa.devices(all_backends=True)}
m2 = Mesh(np.array(fa.devices()[:2]), ("i",))
assert m2.axis_types == (AxisType.Auto,) and m2.size == 2
print("ok devices", flush=True)

mesh = fa.make_mesh((4, 2), ("x", "y"))
jmesh = jax.make_mesh((4, 2), ("x", "y"))
assert mesh.axis_types == (AxisType.Explicit,) * 2 and tuple(map(repr, mesh.axis_types)) == \
    tuple(map(repr, jmesh.axis_types))
assert fa.make_mesh((8,), ("i",), axis_types=(AxisType.Auto,)).axis_types == (AxisType.Auto,)

W = R.randn(4, 6).astype(np.float32)
C8 = np.arange(8, dtype=np.float32)
want = {}
# JAX first, under its own ambient mesh (fnarray's jax meshes are Auto inside JAX: the two set_mesh do not nest)
with jax.set_mesh(jmesh):
    ja, jb = jax.device_put(X, JP("x")), jax.device_put(X, JP("x", "y"))
    want["typeof"] = (str(jax.typeof(ja)), str(jax.typeof(jb)))

    @jax.shard_map(out_specs=JP("x"))
    def jf(v):
        return v * jax.lax.axis_index("x").astype(v.dtype) + jax.lax.psum(v, "y")

    want["f"], want["f_np"] = jf(ja), jf(np.asarray(X))

    @partial(jax.shard_map, mesh=jmesh, in_specs=JP("x", "y"), out_specs=JP("x", "y"))
    def jg(v):
        return jax.lax.pmean(v, "x") - v

    want["g"], want["jit_g"] = jg(jb), jax.jit(jg)(jb)
    try:
        jax.shard_map(lambda v: v, in_specs=JP("y"), out_specs=JP("y"))(ja)
        raise AssertionError("JAX accepted contradicting in_specs")
    except ValueError:
        pass
    jh = jax.shard_map(lambda u: jax.lax.pcast(u, "x", to="varying") * jax.lax.axis_index("x"), out_specs=JP("x"))
    want["pcast"] = jh(jax.device_put(C8, JP()))
    jw = jax.device_put(W, JP())
    r = jax.sharding.reshard(ja, JP(None, "y"))
    want["reshard"] = (str(jax.typeof(r)), str(jax.typeof(jax.jit(lambda v: jax.sharding.reshard(v * 2, JP("y")))(ja))))
    for name, jfn in [("dot", lambda p, q: jnp.dot(p, q, out_sharding=JP("x"))),
                      ("matmul", lambda p, q: jnp.matmul(p, q, out_sharding=JP("x", "y"))),
                      ("einsum", lambda p, q: jnp.einsum("ij,jk->ik", p, q, out_sharding=JP("x")))]:
        r = jfn(ja, jw)
        want[name] = (r, str(jax.typeof(r)))

with fa.sharding.set_mesh(mesh):
    a, b = fa.device_put(X, P("x")), fa.device_put(X, P("x", "y"))
    assert a.sharding == NamedSharding(mesh, P("x"))
    assert (str(fa.typeof(a)), str(fa.typeof(b))) == want["typeof"] == ("float32[8@x,4]", "float32[8@x,4@y]"), \
        (fa.typeof(a), fa.typeof(b), want["typeof"])
    print("ok device_put(x, P) and typeof", flush=True)

    @fa.shard_map(out_specs=P("x"))
    def f(v):
        return v * lax.axis_index("x").astype(v.dtype) + lax.psum(v, "y")

    close(f(a), want["f"], "decorator without mesh or in_specs (inferred from the argument)")
    close(f(np.asarray(X)), want["f_np"], "inferred in_specs of a NumPy value (replicated)")

    @partial(fa.shard_map, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    def g(v):
        return lax.pmean(v, "x") - v

    close(g(b), want["g"], "partial(shard_map, mesh=, in_specs=, out_specs=)")
    close(fa.jit(g)(b), want["jit_g"], "jit of the decorated shard_map")
    raises(ValueError, "do not match the sharding of the input",
           lambda: fa.shard_map(lambda v: v, in_specs=P("y"), out_specs=P("y"))(a), "in_specs contradict (JAX too)")

    # pcast: a replicated input made varying, so out_specs may name the axis and check_vma counts it
    c = fa.device_put(C8, P())
    h = fa.shard_map(lambda u: lax.pcast(u, "x", to="varying") * lax.axis_index("x"), out_specs=P("x"))
    close(h(c), want["pcast"], "pcast(to='varying')")
    raises(ValueError, "leave out the mesh axis 'x'",
           lambda: fa.shard_map(lambda u: lax.pcast(u, "x", to="varying"), out_specs=P())(c), "pcast then P()")

    w = fa.device_put(W, P())
    for name, fn in [("dot", lambda p, q: fnp.dot(p, q, out_sharding=P("x"))),
                     ("matmul", lambda p, q: fnp.matmul(p, q, out_sharding=P("x", "y"))),
                     ("einsum", lambda p, q: fnp.einsum("ij,jk->ik", p, q, out_sharding=P("x")))]:
        got = fn(a, w)
        close(got, want[name][0], f"{name}(out_sharding=)")
        assert str(fa.typeof(got)) == want[name][1], (name, fa.typeof(got), want[name][1])

    r = fa.sharding.reshard(a, P(None, "y"))
    got = (str(fa.typeof(r)), str(fa.typeof(fa.jit(lambda v: fa.sharding.reshard(v * 2, P("y")))(a))))
    assert got == want["reshard"], (got, want["reshard"])
    close(r, X, "reshard")

    # debug.print inside shard_map: each device prints its block
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = fa.shard_map(lambda v: (fa.debug.print("block {}", v.sum()), v)[1], out_specs=P("x", "y"))(b)
        np.asarray(out)
    lines = buf.getvalue().split("\n")[:-1]
    assert len(lines) == 8 and all(t.startswith("block ") for t in lines), lines
    blocks = sorted(X[i:i + 2, j:j + 2].sum() for i in range(0, 8, 2) for j in range(0, 4, 2))
    np.testing.assert_allclose(sorted(float(t.split()[1]) for t in lines), blocks, rtol=1e-5)
    print("ok debug.print per device", flush=True)

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fa.debug.visualize_array_sharding(b)
    text = buf.getvalue()
    assert all(f"jax:{i}" in text for i in range(8)) and text.count("\n") == 9, text
    print("ok visualize_array_sharding", flush=True)

# max/min of a global array: XLA's partitioner refuses the NaN-keeping comparator; the plain form takes over
Xn = X.copy()
Xn[5, 1] = np.nan
g = fa.device_put(Xn, NamedSharding(mesh, P("x", "y")))
assert np.isnan(float(fnp.max(g))) and np.isnan(float(fa.jit(fnp.min)(g)))
close(fnp.max(fa.device_put(X, NamedSharding(mesh, P("x", "y"))), axis=0), X.max(0), "max of a global array")
close(fa.jit(lambda v: fnp.min(v, axis=1))(fa.device_put(X, NamedSharding(mesh, P("x")))), X.min(1),
      "jit(min) of a global array")

# the ambient mesh is per thread, and restored after the block
assert fa.sharding.get_mesh() is None
seen = []
with fa.sharding.use_mesh(mesh):
    t = threading.Thread(target=lambda: seen.append(fa.sharding.get_mesh()))
    t.start()
    t.join()
    assert fa.sharding.get_mesh() is mesh
assert seen == [None] and fa.sharding.get_mesh() is None
fa.sharding.set_mesh(mesh)
assert fa.sharding.get_mesh() is mesh
fa.sharding.set_mesh(None)
print("ok ambient mesh per thread", flush=True)
raises(ValueError, "needs a mesh", lambda: fa.shard_map(lambda v: v, out_specs=P())(X), "no ambient mesh")
raises(ValueError, "needs a mesh", lambda: fa.device_put(X, P("x")), "device_put(x, P) without a mesh")
auto = Mesh(np.array(fa.devices()).reshape(4, 2), ("x", "y"))
raises(TypeError, "in_specs must be given", lambda: fa.shard_map(lambda v: v, mesh=auto, out_specs=P())(X),
       "inferred in_specs over Auto axes (JAX too)")
print("done", flush=True)
