"""The JAX names a user types, each against JAX itself (JAX is the oracle here).

``fa.lax.cond/switch/while_loop/fori_loop/scan/map/associative_scan``, ``fa.make_jaxpr``,
``fa.jacobian``, ``fa.tree.*`` and the ``*_with_path`` functions of ``fa.tree_util``,
``fa.block_until_ready``, ``fa.device_get``, ``Array.sharding`` and the exception classes
a JAX user catches.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax")
jnp = jax.numpy

R = np.random.RandomState(0)
X = R.randn(6, 3).astype(np.float32)


def _same(a, b, rtol=1e-5, atol=1e-6):
    la, lb = fa.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- fa.lax control flow


def test_lax_module_has_wrappers_and_control_flow():
    import fnarray.lax as lax_mod
    assert fa.lax is lax_mod
    for name in ("cond", "switch", "while_loop", "fori_loop", "scan", "map", "associative_scan", "add",
                 "dot_general", "reduce_sum", "stop_gradient"):
        assert name in fa.lax.__all__ and callable(getattr(fa.lax, name)), name
    assert fa.lax.cond is fa.cond and fa.lax.scan is fa.scan


def test_lax_cond_switch_loops_match_jax():
    x = X[0]
    for p in (True, False):
        _same(fa.lax.cond(p, lambda v: fnp.sin(v), lambda v: v * 2, x),
              jax.lax.cond(p, lambda v: jnp.sin(v), lambda v: v * 2, x))
    branches_fa = [lambda v: v + 1, lambda v: v * v, lambda v: -v]
    branches_jax = [lambda v: v + 1, lambda v: v * v, lambda v: -v]
    for i in (-1, 0, 1, 2, 5):   # out-of-range indices clamp, as in JAX
        _same(fa.lax.switch(i, branches_fa, x), jax.lax.switch(i, branches_jax, x))
    _same(fa.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5), (0, x)),
          jax.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5), (0, x)))
    _same(fa.lax.fori_loop(0, 7, lambda i, c: c + i * c, x), jax.lax.fori_loop(0, 7, lambda i, c: c + i * c, x))

    def step_fa(c, v):
        return c * 0.5 + v, fnp.sum(c)

    def step_jax(c, v):
        return c * 0.5 + v, jnp.sum(c)

    for rev in (False, True):
        _same(fa.lax.scan(step_fa, X[0], X, reverse=rev), jax.lax.scan(step_jax, X[0], X, reverse=rev))


@pytest.mark.parametrize("batch_size", [None, 1, 4, 6, 10])
def test_lax_map_matches_jax(batch_size):
    f_fa = lambda v: {"s": fnp.sum(fnp.sin(v)), "v": v * 2}
    f_jax = lambda v: {"s": jnp.sum(jnp.sin(v)), "v": v * 2}
    _same(fa.lax.map(f_fa, X, batch_size=batch_size), jax.lax.map(f_jax, X, batch_size=batch_size))


def _jax_scan(fn, elems, **kw):
    """The oracle, jitted: JAX's op-by-op dispatch compiles every op (seconds each on this machine)."""
    return jax.jit(lambda e: jax.lax.associative_scan(fn, e, **kw))(elems)


def _affine(p, q):
    """Composition of affine maps x -> a x + b (associative, not commutative)."""
    (a1, b1), (a2, b2) = p, q
    return a2 @ a1, (a2 @ b1[..., None])[..., 0] + b2


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 13, 64])
def test_associative_scan_matches_jax(n):
    r = np.random.RandomState(n)
    x = r.randn(n, 3).astype(np.float32)
    for op_fa, op_jax in ((fnp.add, jnp.add), (fnp.maximum, jnp.maximum), (fnp.multiply, jnp.multiply)):
        for rev in (False, True):
            _same(fa.lax.associative_scan(op_fa, x, reverse=rev), _jax_scan(op_jax, x, reverse=rev))
    a = (r.randn(n, 2, 2) * 0.7).astype(np.float32)
    b = r.randn(n, 2).astype(np.float32)
    for rev in (False, True):
        _same(fa.lax.associative_scan(_affine, (a, b), reverse=rev),
              _jax_scan(_affine, (a, b), reverse=rev), rtol=1e-4, atol=1e-5)


def test_associative_scan_axis_pytrees_and_transforms():
    x = R.randn(3, 9, 2).astype(np.float32)
    for axis in (0, 1, 2, -2):
        _same(fa.lax.associative_scan(fnp.add, x, axis=axis), _jax_scan(jnp.add, x, axis=axis))
    # JAX's reverse with a negative axis fails inside lax.rev; compare through the positive axis
    _same(fa.lax.associative_scan(fnp.add, x, axis=-1, reverse=True),
          _jax_scan(jnp.add, x, axis=2, reverse=True))
    tree = {"a": x, "b": x * 2}
    _same(fa.lax.associative_scan(lambda p, q: {"a": p["a"] + q["a"], "b": fnp.maximum(p["b"], q["b"])}, tree),
          _jax_scan(lambda p, q: {"a": p["a"] + q["a"], "b": jnp.maximum(p["b"], q["b"])}, tree))
    v = X[:, 0]
    _same(fa.jit(lambda v: fa.lax.associative_scan(fnp.multiply, v))(v), _jax_scan(jnp.multiply, v))
    _same(fa.grad(lambda v: fnp.sum(fa.lax.associative_scan(fnp.multiply, v)))(v),
          jax.jit(jax.grad(lambda v: jnp.sum(jax.lax.associative_scan(jnp.multiply, v))))(v))
    _same(fa.vmap(lambda r: fa.lax.associative_scan(fnp.add, r))(X), jax.vmap(lambda r: jnp.cumsum(r))(X))
    with pytest.raises(fa.ShapeError, match="same length"):
        fa.lax.associative_scan(lambda p, q: p, (np.ones(3), np.ones(4)))
    with pytest.raises(fa.ShapeError, match="elementwise"):
        fa.lax.associative_scan(lambda p, q: fnp.sum(p + q, keepdims=True), np.ones(4))


# ----------------------------------------------------------------------------- transforms' JAX names


def test_make_jaxpr_and_jacobian():
    f_fa = lambda x, y: fnp.sin(x) * y
    f_jax = lambda x, y: jnp.sin(x) * y
    prog = fa.make_jaxpr(f_fa)(X[0], X[1])
    jaxpr = jax.make_jaxpr(f_jax)(X[0], X[1])
    assert fa.make_jaxpr is fa.make_ir
    assert [e.primitive.name for e in prog.eqns] == [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert len(prog.invars) == len(jaxpr.in_avals) and len(prog.outvars) == len(jaxpr.out_avals)
    assert "sin" in str(prog)
    g_fa = lambda x: fnp.stack([fnp.sum(x ** 2), fnp.prod(x)])
    g_jax = lambda x: jnp.stack([jnp.sum(x ** 2), jnp.prod(x)])
    _same(fa.jacobian(g_fa)(X[1]), jax.jacobian(g_jax)(X[1]))
    _same(fa.jacobian(lambda x, y: x * y, argnums=1)(X[1], X[2]),
          jax.jacobian(lambda x, y: x * y, argnums=1)(X[1], X[2]))


# ----------------------------------------------------------------------------- fa.tree and paths

NT = collections.namedtuple("NT", "x y")
TREE = {"b": [1.0, (2.0, None)], "a": NT(3.0, {"z": 4.0, "y": 5.0}), "c": ()}


def test_tree_namespace_matches_jax_tree():
    assert fa.tree.leaves(TREE) == jax.tree.leaves(TREE)
    assert fa.tree.map(lambda v: v * 2, TREE) == jax.tree.map(lambda v: v * 2, TREE)
    assert fa.tree.reduce(lambda a, b: a + b, TREE, 0.0) == jax.tree.reduce(lambda a, b: a + b, TREE, 0.0)
    assert fa.tree.all({"a": True, "b": [1]}) == jax.tree.all({"a": True, "b": [1]})
    leaves, td = fa.tree.flatten(TREE)
    jleaves, jtd = jax.tree.flatten(TREE)
    assert leaves == jleaves and td.num_leaves == jtd.num_leaves and td.num_nodes == jtd.num_nodes
    assert fa.tree.unflatten(td, [v + 1 for v in leaves]) == jax.tree.unflatten(jtd, [v + 1 for v in jleaves])
    assert fa.tree.structure(TREE) == td
    outer, inner = fa.tree.structure([0, 0]), fa.tree.structure((0, 0, 0))
    jouter, jinner = jax.tree.structure([0, 0]), jax.tree.structure((0, 0, 0))
    xs = [(1, 2, 3), (4, 5, 6)]
    assert fa.tree.transpose(outer, inner, xs) == jax.tree.transpose(jouter, jinner, xs)


def _keys(tree):
    """Every dict's key order in ``tree`` (a dict compares equal whatever its order)."""
    if isinstance(tree, dict):
        return [list(tree)] + [k for v in tree.values() for k in _keys(v)]
    if isinstance(tree, (list, tuple)):
        return [k for v in tree for k in _keys(v)]
    return []


@pytest.mark.parametrize("outer, inner, tree", [
    ({"b": 0, "a": 0}, (0, 0), {"b": (1, 2), "a": (3, 4)}),
    ([0, 0], {"z": 0, "y": 0}, [{"z": 1, "y": 2}, {"y": 3, "z": 4}]),
    ({"k": 0, "c": 0}, {"z": 0, "b": [0]}, {"k": {"z": 1, "b": [2]}, "c": {"b": [3], "z": 4}}),
    ([0, 0], None, [(1, 2), (3, 4)]),
])
def test_tree_transpose_as_jax_with_keywords_and_sorted_dicts(outer, inner, tree):
    kw = dict(outer_treedef=fa.tree.structure(outer), pytree_to_transpose=tree,
              inner_treedef=None if inner is None else fa.tree.structure(inner))
    jkw = dict(outer_treedef=jax.tree.structure(outer), pytree_to_transpose=tree,
               inner_treedef=None if inner is None else jax.tree.structure(inner))
    got, want = fa.tree.transpose(**kw), jax.tree.transpose(**jkw)
    assert got == want and _keys(got) == _keys(want)
    assert fa.tree_util.tree_transpose(**kw) == want


def test_tree_transpose_refuses_what_jax_refuses():
    mixed = [{"b": 1, 1: 2}, {"b": 3, 1: 4}]
    with pytest.raises(ValueError, match="Comparator raised exception while sorting pytree dictionary keys"):
        jax.tree.transpose(jax.tree.structure([0, 0]), jax.tree.structure(mixed[0]), mixed)
    with pytest.raises(ValueError, match="Comparator raised exception while sorting pytree dictionary keys"):
        fa.tree.transpose(fa.tree.structure([0, 0]), fa.tree.structure(mixed[0]), mixed)
    bad = {"a": (1, 2, 3), "b": (1, 2)}
    with pytest.raises(TypeError):
        jax.tree.transpose(jax.tree.structure({"a": 0, "b": 0}), jax.tree.structure((0, 0)), bad)
    with pytest.raises(TypeError, match="inner structure"):
        fa.tree.transpose(fa.tree.structure({"a": 0, "b": 0}), fa.tree.structure((0, 0)), bad)


def test_with_path_functions_match_jax():
    pairs, _ = fa.tree.flatten_with_path(TREE)
    jpairs, _ = jax.tree.flatten_with_path(TREE)
    assert [fa.tree_util.keystr(p) for p, _ in pairs] == [jax.tree_util.keystr(p) for p, _ in jpairs]
    assert [v for _, v in pairs] == [v for _, v in jpairs]
    # the key objects have JAX's attribute names
    first = pairs[0][0]
    assert first[0].key == "a" and first[1].name == "x"
    assert isinstance(pairs[-1][0][1], fa.tree_util.SequenceKey) and pairs[-1][0][1].idx == 1
    assert fa.tree_util.tree_leaves_with_path(TREE) == fa.tree.leaves_with_path(TREE)
    got = fa.tree.map_with_path(lambda p, v: f"{fa.tree_util.keystr(p)}={v}", TREE)
    want = jax.tree.map_with_path(lambda p, v: f"{jax.tree_util.keystr(p)}={v}", TREE)
    assert got == want
    assert fa.tree_util.tree_map_with_path(lambda p, a, b: a + b, TREE, TREE) == \
        jax.tree_util.tree_map_with_path(lambda p, a, b: a + b, TREE, TREE)


# ----------------------------------------------------------------------------- devices, sharding, errors


def test_block_until_ready_device_get_and_sharding(device):
    tree = {"a": fa.device_put(fnp.arange(4.0), device), "b": [fa.device_put(fnp.ones(2), device), 3, None]}
    assert fa.block_until_ready(tree) is tree
    host = fa.device_get(tree)
    jhost = jax.device_get({"a": jnp.arange(4.0), "b": [jnp.ones(2), 3, None]})
    assert type(host["a"]) is type(jhost["a"]) is np.ndarray
    np.testing.assert_array_equal(host["a"], jhost["a"])
    assert host["b"][1] == 3 and host["b"][2] is None
    s = tree["a"].sharding
    js = jnp.arange(4.0).sharding
    assert s.device_set == {device} and len(js.device_set) == 1
    assert s.is_fully_addressable == js.is_fully_addressable
    assert s.num_devices == js.num_devices == 1
    assert s.shard_shape((4,)) == js.shard_shape((4,))
    assert s == tree["b"][0].sharding and hash(s) == hash(tree["b"][0].sharding)
    with pytest.raises(fa.ConcretizationError):
        fa.jit(lambda x: fa.device_get(x))(fnp.ones(2))


@pytest.mark.parametrize("call", ["dot", "matmul", "dot_general", "tensordot", "inner"])
def test_contraction_mismatch_is_the_type_error_jax_raises(call):
    a, b = np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)
    calls = {
        "dot": lambda m: m.dot(a, b),
        "matmul": lambda m: m.matmul(a, b),
        "dot_general": lambda m: (fa.lax if m is fnp else jax.lax).dot_general(m.asarray(a), m.asarray(b),
                                                                              (((1,), (0,)), ((), ()))),
        "tensordot": lambda m: m.tensordot(a, b, axes=([1], [0])),
        "inner": lambda m: m.inner(a, b.T),
    }
    with pytest.raises(TypeError):
        calls[call](jnp)
    with pytest.raises(TypeError) as info:   # what `except TypeError` written for JAX catches
        calls[call](fnp)
    assert isinstance(info.value, fa.ContractionShapeError)
    assert isinstance(info.value, fa.ShapeError) and isinstance(info.value, ValueError)   # NumPy's class too
