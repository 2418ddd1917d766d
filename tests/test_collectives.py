"""Named axes and collectives (``fa.vmap(axis_name=)``, ``fa.lax.psum``...): against a NumPy loop over the
examples on every backend (eager, jit outside and inside the vmap), and against ``jax.vmap(axis_name=)`` for
the values and for the gradients (outer ``grad`` and per-example ``vmap(grad)``).

Tiers (docs/design.md): every case on numpy:0 and jax:0; a selection on mlx, opencl and webgpu.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
from fnarray import lax

jax = pytest.importorskip("jax")
jlax = jax.lax

N = 4
R = np.random.RandomState(0)


def _x(*shape):
    return R.uniform(-2, 2, (N,) + shape).astype(np.float32)


def _ring(n):
    return [(i, (i + 1) % n) for i in range(n)]


# name, f(lax module, x), per-example shape, NumPy reference over the stacked examples, differentiable
CASES = [
    ("psum", lambda L, x: L.psum(x, "i"), (3,), lambda X: np.broadcast_to(X.sum(0), X.shape), True),
    ("pmean", lambda L, x: L.pmean(x, "i"), (3,), lambda X: np.broadcast_to(X.mean(0), X.shape), True),
    ("pmax", lambda L, x: L.pmax(x, "i"), (3,), lambda X: np.broadcast_to(X.max(0), X.shape), False),
    ("pmin", lambda L, x: L.pmin(x, "i"), (3,), lambda X: np.broadcast_to(X.min(0), X.shape), False),
    ("psum_shared", lambda L, x: x + L.psum(2.0, "i"), (3,), lambda X: X + 2.0 * N, True),
    ("all_gather0", lambda L, x: L.all_gather(x, "i"), (3,), lambda X: np.stack([X] * N), True),
    ("all_gather1", lambda L, x: L.all_gather(x, "i", axis=1), (2, 3),
     lambda X: np.stack([np.moveaxis(X, 0, 1)] * N), True),
    ("all_gather_tiled", lambda L, x: L.all_gather(x, "i", tiled=True), (2,),
     lambda X: np.stack([X.reshape(-1)] * N), True),
    ("psum_scatter", lambda L, x: L.psum_scatter(x, "i"), (N, 2), lambda X: X.sum(0), True),
    ("psum_scatter_tiled", lambda L, x: L.psum_scatter(x, "i", scatter_dimension=1, tiled=True), (3, 2 * N),
     lambda X: np.stack([X.sum(0)[:, 2 * i:2 * i + 2] for i in range(N)]), True),
    ("all_to_all", lambda L, x: L.all_to_all(x, "i", 0, 0), (N, 3), lambda X: np.swapaxes(X, 0, 1), True),
    ("all_to_all_c1", lambda L, x: L.all_to_all(x, "i", 0, 1), (N, 2),
     lambda X: np.stack([X[:, i, :].T for i in range(N)]), True),
    ("all_to_all_tiled", lambda L, x: L.all_to_all(x, "i", 0, 1, tiled=True), (2 * N, 3),
     lambda X: np.stack([np.concatenate([X[j, 2 * i:2 * i + 2] for j in range(N)], 1) for i in range(N)]), True),
    ("ppermute", lambda L, x: L.ppermute(x, "i", _ring(N)), (3,), lambda X: np.roll(X, 1, 0), True),
    ("ppermute_partial", lambda L, x: L.ppermute(x, "i", [(0, 2), (1, 0)]), (3,),
     lambda X: np.stack([X[1], np.zeros(3, np.float32), X[0], np.zeros(3, np.float32)]), True),
    ("axis_index", lambda L, x: x * L.axis_index("i").astype(x.dtype), (3,),
     lambda X: X * np.arange(N, dtype=np.float32)[:, None], True),
    ("centered", lambda L, x: x - L.pmean(x, "i") * L.axis_size("i") / N, (2, 3), lambda X: X - X.mean(0), True),
]
SELECTION = {"all_gather1", "all_to_all_tiled", "ppermute_partial", "axis_index"}
IDS = [c[0] for c in CASES]


def _run_fa(f, X, device, how):
    x = fa.device_put(X, device)
    g = lambda v: f(lax, v)  # noqa: E731
    if how == "eager":
        out = fa.vmap(g, axis_name="i")(x)
    elif how == "jit":
        out = fa.jit(fa.vmap(g, axis_name="i"))(x)
    else:  # a jitted function inside the named vmap: its program is batched over the axis
        out = fa.vmap(fa.jit(g), axis_name="i")(x)
    assert out.device == device
    return np.asarray(out)


def _cases_for(device, how):
    if device.backend == "numpy" or (device.backend == "jax" and how == "jit"):
        return CASES
    if how == "jit":  # the parity tier: a selection, compiled (eager kernels cost seconds each on PoCL)
        return [c for c in CASES if c[0] in SELECTION]
    return []


@pytest.mark.parametrize("how", ["eager", "jit", "jit_inside"])
def test_against_numpy_loop(device, how):
    cases = _cases_for(device, how)
    if not cases:
        pytest.skip(f"the parity tier runs {device.backend} compiled only")
    for name, f, shape, ref, _ in cases:
        X = _x(*shape)
        got = _run_fa(f, X, device, how)
        np.testing.assert_allclose(got, ref(X), rtol=1e-5, atol=1e-5, err_msg=f"{name} on {device} ({how})")


@pytest.mark.parametrize("name,f,shape,ref,diff", CASES, ids=IDS)
def test_values_and_grads_against_jax_vmap(name, f, shape, ref, diff):
    if name == "ppermute_partial":
        pytest.skip("jax.vmap's ppermute takes only full permutations: test_partial_ppermute_gradient")
    X = _x(*shape)
    got = np.asarray(fa.vmap(lambda v: f(lax, v), axis_name="i")(X))
    want = np.asarray(jax.jit(jax.vmap(lambda v: f(jlax, v), axis_name="i"))(X))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if not diff:
        return
    W = R.uniform(-1, 1, got.shape).astype(np.float32)

    def outer(L, vmap, v):
        return (vmap(lambda a: f(L, a), axis_name="i")(v) * W).sum()
    g = np.asarray(fa.grad(lambda v: outer(lax, fa.vmap, v))(X))
    gj = np.asarray(jax.jit(jax.grad(lambda v: outer(jlax, jax.vmap, v)))(X))
    np.testing.assert_allclose(g, gj, rtol=1e-4, atol=1e-5, err_msg=f"grad of vmap({name})")
    w1 = W[0]  # per-example grads: vmap(grad), the loss of each example weighted alike

    def inner(L, v):
        return (f(L, v) * w1).sum()
    pe = np.asarray(fa.vmap(fa.grad(lambda v: inner(lax, v)), axis_name="i")(X))
    pjit = np.asarray(fa.jit(fa.vmap(fa.grad(lambda v: inner(lax, v)), axis_name="i"))(X))
    np.testing.assert_allclose(pjit, pe, rtol=1e-5, atol=1e-6, err_msg=f"jit(vmap(grad({name})))")
    try:
        pj = np.asarray(jax.jit(jax.vmap(jax.grad(lambda v: inner(jlax, v)), axis_name="i"))(X))
    except ValueError as e:  # JAX 0.10.2 cannot transpose all_to_all under vmap ("Expected cotangent type")
        assert name.startswith("all_to_all"), e
        return
    np.testing.assert_allclose(pe, pj, rtol=1e-4, atol=1e-5, err_msg=f"vmap(grad({name}))")


def test_pmax_gradient_goes_to_the_maximum():
    # JAX defines no derivative for pmax; the reference is the maximum's position (no ties here).
    X = _x(3)
    W = R.uniform(-1, 1, X.shape).astype(np.float32)
    g = np.asarray(fa.grad(lambda v: (fa.vmap(lambda a: lax.pmax(a, "i"), axis_name="i")(v) * W).sum())(X))
    want = (X == X.max(0)) * W.sum(0)
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_nested_names():
    X = R.uniform(-1, 1, (2, 3, 4)).astype(np.float32)

    def f(L, v):
        return L.psum(v, "i") * 10 + L.psum(v, ("i", "j")) + L.all_gather(v, "i").sum(0) + \
            L.axis_index("j").astype(v.dtype)
    nest = lambda vm, L: vm(vm(lambda v: f(L, v), axis_name="j"), axis_name="i")  # noqa: E731
    got = np.asarray(nest(fa.vmap, lax)(X))
    want = np.asarray(jax.jit(nest(jax.vmap, jlax))(X))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    g = fa.jit(fa.grad(lambda v: (nest(fa.vmap, lax)(v) ** 2).sum()))(X)
    gj = jax.jit(jax.grad(lambda v: (nest(jax.vmap, jlax)(v) ** 2).sum()))(X)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gj), rtol=1e-4, atol=1e-4)


def test_collective_in_a_loop_body_under_the_named_vmap():
    X = _x(3)

    def f(v):
        return fa.lax.fori_loop(0, 3, lambda i, c: c + lax.psum(c, "i") * 0.1, v)
    got = np.asarray(fa.vmap(f, axis_name="i")(X))
    want = np.asarray(jax.vmap(lambda v: jax.lax.fori_loop(0, 3, lambda i, c: c + jlax.psum(c, "i") * 0.1, v),
                               axis_name="i")(X))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_unmapped_inputs_and_pytrees():
    X = _x(3)
    c = np.float32(3.0)
    out = fa.vmap(lambda v, k: lax.psum({"a": v, "b": k}, "i"), in_axes=(0, None), axis_name="i")(X, c)
    np.testing.assert_allclose(np.asarray(out["a"]), np.broadcast_to(X.sum(0), X.shape), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"]), c * N)
    assert fa.vmap(lambda v: v * 0 + lax.axis_size("i"), axis_name="i")(X).shape == X.shape


def test_bad_input():
    x = np.ones(3, np.float32)
    with pytest.raises(NameError, match="no enclosing vmap or shard_map binds that name"):
        lax.psum(x, "i")
    with pytest.raises(NameError, match="bound axes: 'j'"):
        fa.vmap(lambda v: lax.psum(v, "i"), axis_name="j")(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="numeric"):
        fa.vmap(lambda v: lax.psum(v > 0, "i"), axis_name="i")(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="repeats"):
        fa.vmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 1)]), axis_name="i")(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="outside"):
        fa.vmap(lambda v: lax.ppermute(v, "i", [(0, 5)]), axis_name="i")(np.ones((2, 3), np.float32))
    with pytest.raises(fa.ShapeError, match="equal the axis size"):
        fa.vmap(lambda v: lax.psum_scatter(v, "i"), axis_name="i")(np.ones((2, 3), np.float32))
    with pytest.raises(fa.ShapeError, match="not divisible"):
        fa.vmap(lambda v: lax.all_to_all(v, "i", 0, 0, tiled=True), axis_name="i")(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError):
        fa.vmap(lambda v: v, axis_name=["unhashable"])


def test_partial_ppermute_gradient():
    X = _x(3)
    W = R.uniform(-1, 1, X.shape).astype(np.float32)
    perm = [(0, 2), (1, 0)]
    g = np.asarray(fa.grad(lambda v: (fa.vmap(lambda a: lax.ppermute(a, "i", perm), axis_name="i")(v) * W).sum())(X))
    want = np.zeros_like(X)
    for src, dst in perm:
        want[src] = W[dst]
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_jit_of_values_every_example_shares():
    # A jitted function called inside the named vmap with operands that do not vary still meets the axis.
    c = np.float32(2.0)
    f = fa.jit(lambda k: lax.psum(k, "i"))
    out = fa.vmap(lambda v, k: f(k) + v, in_axes=(0, None), axis_name="i")(np.zeros(3, np.float32), c)
    np.testing.assert_allclose(np.asarray(out), np.full(3, 6.0))


def test_control_flow_on_values_every_example_shares():
    c = np.float32(2.0)
    z = np.zeros(3, np.float32)
    out = fa.vmap(lambda v, k: fa.lax.cond(k > 0, lambda k: lax.psum(k, "i"), lambda k: k, k) + v,
                  in_axes=(0, None), axis_name="i")(z, c)
    np.testing.assert_allclose(np.asarray(out), np.full(3, 6.0))
    out = fa.vmap(lambda v, k: fa.lax.fori_loop(0, 2, lambda i, a: a + lax.psum(k, "i"), k) + v,
                  in_axes=(0, None), axis_name="i")(z, c)
    np.testing.assert_allclose(np.asarray(out), np.full(3, 14.0))


def test_jit_trace_from_inside_a_named_vmap_called_outside_raises_name_error():
    """jit's trace cache is keyed by the arguments, not by the bound axes: a program traced inside
    vmap(axis_name="i") and then called with the same shapes outside any vmap raises the collective's
    NameError (as a fresh trace would), not a lowering error."""
    import fnarray.numpy as fnp
    f = fa.jit(lambda x: fa.lax.psum(x, "i"))
    np.testing.assert_array_equal(np.asarray(fa.vmap(f, axis_name="i")(fnp.ones((3, 4)))), np.full((3, 4), 3.0))
    with pytest.raises(NameError, match="'i'"):
        f(fnp.ones(4))
    np.testing.assert_array_equal(np.asarray(fa.vmap(f, axis_name="i")(fnp.ones((2, 4)))), np.full((2, 4), 2.0))


# ----------------------------------------------------------------------------- axis_index_groups

EVEN, UNEVEN, ORDERED = ((0, 2), (1, 3)), ((3,), (0, 1, 2)), ((3, 0), (1, 2))


def _group_of(groups):
    return {i: list(g) for g in groups for i in g}


def _grouped(reduce):
    return lambda X, groups: np.stack([reduce(X[_group_of(groups)[i]]) for i in range(N)])


def _gathered(X, groups, axis, tiled):
    out = []
    for i in range(N):
        members = [X[j] for j in _group_of(groups)[i]]
        out.append(np.concatenate(members, axis) if tiled else np.stack(members, axis))
    return np.stack(out)


# name, f(lax module, x, groups), groups, per-example shape, NumPy reference(X, groups)
GROUPED = [
    ("psum", lambda L, x, g: L.psum(x, "i", axis_index_groups=g), UNEVEN, (3,), _grouped(lambda m: m.sum(0))),
    ("psum_even", lambda L, x, g: L.psum(x, "i", axis_index_groups=g), EVEN, (2, 3), _grouped(lambda m: m.sum(0))),
    ("pmean", lambda L, x, g: L.pmean(x, "i", axis_index_groups=g), EVEN, (3,), _grouped(lambda m: m.mean(0))),
    ("pmax", lambda L, x, g: L.pmax(x, "i", axis_index_groups=g), UNEVEN, (3,), _grouped(lambda m: m.max(0))),
    ("pmin", lambda L, x, g: L.pmin(x, "i", axis_index_groups=g), EVEN, (3,), _grouped(lambda m: m.min(0))),
    ("psum_shared", lambda L, x, g: x + L.psum(2.0, "i", axis_index_groups=g), UNEVEN, (3,),
     lambda X, g: X + 2.0 * np.array([len(_group_of(g)[i]) for i in range(N)], np.float32)[:, None]),
    ("all_gather", lambda L, x, g: L.all_gather(x, "i", axis=1, axis_index_groups=g), ORDERED, (2, 3),
     lambda X, g: _gathered(X, g, 1, False)),
    ("all_gather_tiled", lambda L, x, g: L.all_gather(x, "i", tiled=True, axis_index_groups=g), ORDERED, (2,),
     lambda X, g: _gathered(X, g, 0, True)),
]
GROUPED_SELECTION = {"psum", "all_gather"}


@pytest.mark.parametrize("how", ["eager", "jit", "jit_inside"])
def test_axis_index_groups_against_numpy_loop(device, how):
    if device.backend == "numpy" or (device.backend == "jax" and how == "jit"):
        cases = GROUPED
    elif how == "jit":
        cases = [c for c in GROUPED if c[0] in GROUPED_SELECTION]
    else:
        pytest.skip(f"the parity tier runs {device.backend} compiled only (jit of the vmap)")
    for name, f, groups, shape, ref in cases:
        X = _x(*shape)
        got = _run_fa(lambda L, v, f=f, groups=groups: f(L, v, groups), X, device, how)
        np.testing.assert_allclose(got, ref(X, groups), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{name} with groups {groups} on {device} ({how})")


def test_axis_index_groups_gradients():
    # The references: d/dx_j of sum_i W_i * y_i, by hand. psum within groups: the group's sum of W; all_gather
    # within groups: the group's sum of the W blocks at x_j's place in its group; pmax: the maximum's position.
    X = _x(2, 3)
    for name, f, want in [
            ("psum", lambda a: lax.psum(a, "i", axis_index_groups=UNEVEN),
             lambda W: _grouped(lambda m: m.sum(0))(W, UNEVEN)),
            ("all_gather", lambda a: lax.all_gather(a, "i", axis_index_groups=ORDERED),
             lambda W: np.stack([sum(W[i][_group_of(ORDERED)[j].index(j)] for i in _group_of(ORDERED)[j])
                                 for j in range(N)])),
            ("all_gather_tiled", lambda a: lax.all_gather(a, "i", axis=1, tiled=True, axis_index_groups=ORDERED),
             lambda W: np.stack([sum(W[i][:, 3 * p:3 * p + 3] for i in _group_of(ORDERED)[j])
                                          for j in range(N) for p in [_group_of(ORDERED)[j].index(j)]])),
            ("pmax", lambda a: lax.pmax(a, "i", axis_index_groups=EVEN),
             lambda W: np.stack([(X[j] == X[_group_of(EVEN)[j]].max(0)) * W[_group_of(EVEN)[j]].sum(0)
                                 for j in range(N)]))]:
        out_shape = fa.vmap(f, axis_name="i")(X).shape
        W = R.uniform(-1, 1, out_shape).astype(np.float32)
        g = fa.grad(lambda v, f=f, W=W: (fa.vmap(f, axis_name="i")(v) * W).sum())(X)
        np.testing.assert_allclose(np.asarray(g), want(W), rtol=1e-5, atol=1e-6, err_msg=f"grad of vmap({name})")
        gj = fa.jit(fa.grad(lambda v, f=f, W=W: (fa.vmap(f, axis_name="i")(v) * W).sum()))(X)
        np.testing.assert_allclose(np.asarray(gj), want(W), rtol=1e-5, atol=1e-6, err_msg=f"jit(grad(vmap({name})))")
    # per-example gradients (the transpose runs inside the named vmap): every example's loss weighted alike
    w1 = R.uniform(-1, 1, (2, 2, 3)).astype(np.float32)
    pe = fa.vmap(fa.grad(lambda a: (lax.all_gather(a, "i", axis_index_groups=ORDERED) * w1).sum()), axis_name="i")(X)
    want = np.stack([len(ORDERED[0]) * w1[_group_of(ORDERED)[j].index(j)] for j in range(N)])
    np.testing.assert_allclose(np.asarray(pe), want, rtol=1e-5, atol=1e-6)


def test_axis_index_groups_bad_input():
    x = np.ones((N, 3), np.float32)

    def run(f):
        return fa.vmap(f, axis_name="i")(x)
    with pytest.raises(ValueError, match="exactly once"):
        run(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1], [1, 2, 3]]))
    with pytest.raises(ValueError, match="exactly once"):
        run(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1]]))
    with pytest.raises(ValueError, match="same size"):
        run(lambda v: lax.all_gather(v, "i", axis_index_groups=UNEVEN))
    with pytest.raises(ValueError, match="same size"):
        run(lambda v: lax.pmean(v, "i", axis_index_groups=UNEVEN))
    with pytest.raises(TypeError, match="lists of axis positions"):
        run(lambda v: lax.psum(v, "i", axis_index_groups=[0, 1, 2, 3]))
    with pytest.raises(ValueError, match="one axis"):
        fa.vmap(fa.vmap(lambda v: lax.psum(v, ("i", "j"), axis_index_groups=[[0], [1]]), axis_name="j"),
                axis_name="i")(np.ones((2, 2), np.float32))
    with pytest.raises(NotImplementedError, match="all_gather take it"):
        run(lambda v: lax.psum_scatter(v, "i", axis_index_groups=EVEN))
