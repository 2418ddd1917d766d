"""``fnarray.export.onnx``: models run in ONNX Runtime (CPU) and agree with the numpy backend.

Every primitive case of ``fnarray.testing.cases`` is exported on its own and run in
ONNX Runtime (or, for the primitives ONNX cannot express, must raise naming the
primitive); then whole programs: the digits MLP with baked parameters, a ``grad``,
a ``scan`` recurrence, ``cond``, ``while_loop``, nested calls and named pytree inputs.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.errors import UnsupportedOnDevice
from fnarray.export._onnx import RULES, UNSUPPORTED
from fnarray.testing.cases import CASES, NOT_EXECUTED

onnx = pytest.importorskip("onnx", reason="the onnx package is in the test extra (pip install 'fnarray[test]')")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra (pip install 'fnarray[test]')")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import digits_mlp  # noqa: E402

REF = fa.devices("numpy")[0]
rng = np.random.default_rng(11)


def _session(model, optimized=None):
    """A one-thread CPU session; ``optimized``: where ONNX Runtime writes the graph it optimised. Fused
    ``MatMulNBits`` run at accuracy level 0 (float activations; ONNX Runtime's default, 4, quantizes them to int8)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    if optimized is not None:
        opts.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _ort_run(model, feeds, optimized=None):
    sess = _session(model, optimized)
    names = [i.name for i in sess.get_inputs()]
    assert sorted(names) == sorted(feeds), (names, list(feeds))
    return sess.run(None, {k: np.asarray(v) for k, v in feeds.items()})


def _ref(f, *args):
    out = fa.jit(f, device=REF)(*args)
    return [np.asarray(o) for o in fa.tree_util.tree_leaves(out)]


def _close(got, want, what):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, g.dtype, w.shape, w.dtype)
        if dtypes.is_inexact(w.dtype):
            tol = 1e-2 if w.dtype == np.float16 else 2e-5
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


# ------------------------------------------------------------------------------------------- the table


def _case_fn(prim, params):
    def f(*args):
        return prim.bind(*args, **params)
    return f


def test_every_primitive_has_a_rule_or_a_reason():
    from fnarray.core.primitives import PRIMITIVES
    inlined = {"call", "remat", "custom_jvp_call", "custom_vjp_call"}
    from fnarray.core.decompositions import DECOMPOSITIONS
    # A primitive with neither is expanded into its decomposition at export (threefry2x32).
    missing = sorted(p.name for p in PRIMITIVES.values()
                     if p not in RULES and p not in UNSUPPORTED and p not in DECOMPOSITIONS and p.name not in inlined)
    assert not missing, f"primitives with neither an ONNX rule nor a stated reason: {missing}"
    assert not set(RULES) & set(UNSUPPORTED)


@pytest.mark.parametrize("name,prim,inputs,params", [c for c in CASES if c[1] not in NOT_EXECUTED],
                         ids=[c[0] for c in CASES if c[1] not in NOT_EXECUTED])
def test_primitive(tmp_path, name, prim, inputs, params):
    args = [np.asarray(x) for x in inputs]
    f = _case_fn(prim, params)
    path = tmp_path / f"{name}.onnx"
    unsupported = prim in UNSUPPORTED or any(np.dtype(a.dtype).kind == "c" for a in args)
    if unsupported:
        with pytest.raises(UnsupportedOnDevice, match=prim.name):
            fa.export.onnx(f, *args, path=path)
        assert not path.exists()
        return
    model = fa.export.onnx(f, *args, path=path)
    assert path.exists()
    onnx.checker.check_model(onnx.load(str(path)))
    got = _ort_run(model, {f"args.{i}": a for i, a in enumerate(args)})
    want = _ref(f, *args)
    _close(got, want, name)


_i8 = rng.integers(-100, 100, (4, 5)).astype(np.int8)
_u32 = rng.integers(0, 2**32 - 1, (3, 6), dtype=np.uint64).astype(np.uint32)
_nanrow = np.array([[1.0, np.nan, 3.0, -2.0, 5.0], [2.0, 1.0, -np.inf, np.inf, 0.0]], np.float32)
EXTRA = [  # beyond the parity cases: odd sizes, several axes, the other dtypes and edge values
    ("reduce_and_int", P.reduce_and, [rng.integers(-9, 9, (3, 5, 7)).astype(np.int32)], dict(axes=(0, 2))),
    ("reduce_or_u32", P.reduce_or, [_u32], dict(axes=(1,))),
    ("reduce_or_empty", P.reduce_or, [np.zeros((0, 3), np.int32)], dict(axes=(0,))),
    ("reduce_max_int8", P.reduce_max, [_i8], dict(axes=(0, 1))),
    ("reduce_min_bool", P.reduce_min, [rng.random((3, 4)) < 0.5], dict(axes=(1,))),
    ("argmin_int8", P.argmin, [_i8], dict(axes=(1,), index_dtype=dtypes.int32)),
    ("argmin_nan", P.argmin, [_nanrow], dict(axes=(1,), index_dtype=dtypes.int32)),
    ("cumprod_neg", P.cumprod, [rng.uniform(-2, 2, (7,)).astype(np.float32)], dict(axis=0, reverse=False)),
    ("cummax_nan", P.cummax, [_nanrow], dict(axis=1, reverse=False)),
    ("cummin_int_rev", P.cummin, [rng.integers(-9, 9, (9,)).astype(np.int32)], dict(axis=0, reverse=True)),
    ("cumlogsumexp_inf", P.cumlogsumexp, [np.array([-np.inf, -np.inf, 0.0, 1.0, -np.inf], np.float32)],
     dict(axis=0, reverse=False)),
    ("pad_crop_interior", P.pad, [rng.standard_normal((4, 3)).astype(np.float32), np.float32(-1)],
     dict(padding_config=((-1, 2, 2), (1, -2, 1)))),
    ("dynamic_slice_clamped", P.dynamic_slice, [rng.standard_normal((5, 6)).astype(np.float32), np.int32(-9),
                                                np.int32(99)], dict(slice_sizes=(2, 4))),
    ("dynamic_update_slice_clamped", P.dynamic_update_slice,
     [rng.standard_normal((5, 6)).astype(np.float32), np.ones((2, 2), np.float32), np.int32(9), np.int32(-4)], {}),
    ("sort_bool_u32", P.sort, [rng.random(7) < 0.5, rng.integers(0, 9, 7).astype(np.uint32)],
     dict(dimension=0, is_stable=True, num_keys=2)),
    ("sort_axis0_int", P.sort, [rng.integers(-5, 5, (6, 3)).astype(np.int32)],
     dict(dimension=0, is_stable=True, num_keys=1)),
    ("dot_general_lhs_t", P.dot_general, [rng.standard_normal((4, 3)).astype(np.float32),
                                          rng.standard_normal((4, 5)).astype(np.float32)],
     dict(dimension_numbers=(((0,), (0,)), ((), ())), preferred_element_type=None)),
    ("dot_general_rhs_t", P.dot_general, [rng.standard_normal((2, 3, 4)).astype(np.float32),
                                          rng.standard_normal((5, 4)).astype(np.float32)],
     dict(dimension_numbers=(((2,), (1,)), ((), ())), preferred_element_type=None)),
    ("dot_general_i32_to_f32", P.dot_general, [rng.integers(-3, 3, (3, 4)).astype(np.int32),
                                               rng.integers(-3, 3, (4, 2)).astype(np.int32)],
     dict(dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=dtypes.float32)),
    ("gather_empty_axis", P.gather, [np.zeros((0, 3), np.float32), np.array([[0], [2]], np.int32)], dict(axes=(0,))),
    ("scatter_add_axis1", P.scatter_add, [rng.standard_normal((3, 4)).astype(np.float32),
                                          np.array([[1], [1], [7], [-1]], np.int32),
                                          rng.standard_normal((4, 3)).astype(np.float32)], dict(axes=(1,))),
    ("div_int_min", P.div, [np.array([-2**31, -2**31, 7], np.int32), np.array([-1, 0, -1], np.int32)], {}),
    ("rem_u32", P.rem, [_u32[0], np.array([0, 1, 7, 2**31, 3, 0], np.uint32)], {}),
    ("neg_u32", P.neg, [_u32[0]], {}),
    ("f32_to_i32_edges", P.convert_element_type,
     [np.array([2.1e9, 2.2e9, -2.2e9, 2147483520.0, -0.9, 0.9, np.nan], np.float32)],
     dict(new_dtype=dtypes.int32, weak_type=False)),
    ("select_n_int_clamped", P.select_n, [np.array([-3, 0, 1, 5], np.int32), np.zeros(4, np.float32),
                                          np.ones(4, np.float32)], {}),
    ("iota_u8", P.iota, [], dict(dtype=dtypes.uint8, shape=(2, 3), dimension=1)),
    ("shift_right_arithmetic_u32", P.shift_right_arithmetic, [_u32[0], np.array([0, 1, 31, 32, 5, 3], np.uint32)],
     {}),
]


@pytest.mark.parametrize("name,prim,inputs,params", EXTRA, ids=[c[0] for c in EXTRA])
def test_primitive_extra(tmp_path, name, prim, inputs, params):
    test_primitive(tmp_path, name, prim, inputs, params)


@pytest.mark.parametrize("n", [1, 5, 4097])
def test_reductions_and_arg_with_nan_at_sizes(tmp_path, n):
    x = rng.standard_normal(n).astype(np.float32)
    x[n // 2] = np.nan
    for fn in (fnp.max, fnp.min, fnp.argmax, fnp.argmin, fnp.sort, fnp.cumsum):
        model = fa.export.onnx(fn, x, path=tmp_path / "m.onnx")
        _close(_ort_run(model, {"a": x} if "a" in [i.name for i in model.graph.input] else
                        {model.graph.input[0].name: x}), _ref(fn, x), f"{fn.__name__} n={n}")


def test_indexing_clamps_and_drops_as_fnarray(tmp_path):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    idx = np.array([0, 4, 9, -1, -7, 2], np.int32)  # negative counts from the end, then clamp

    def f(x, idx):
        return x[idx], x.at[idx].add(1.0), fnp.take(x, idx, axis=0, mode="clip")
    model = fa.export.onnx(f, x, idx, path=tmp_path / "m.onnx")
    _close(_ort_run(model, {"x": x, "idx": idx}), _ref(f, x, idx), "indexing")


# ------------------------------------------------------------------------------------------- programs


@pytest.fixture(scope="module")
def digits_params():
    return {k: np.asarray(v) for k, v in digits_mlp.init_params(fa.random.key(0)).items()}


def test_digits_mlp_baked(tmp_path, digits_params):
    x = rng.uniform(0, 1, (8, 64)).astype(np.float32)
    path = tmp_path / "digits.onnx"
    model = fa.export.onnx(digits_mlp.predict, digits_params, x, path=path, bake_argnums=(0,))
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["out"]
    assert {i.name for i in model.graph.initializer} >= {f"params.{k}" for k in digits_mlp.PARAM_NAMES}
    got = _ort_run(model, {"x": x})
    _close(got, _ref(digits_mlp.predict, digits_params, x), "digits predict")
    np.testing.assert_allclose(got[0].sum(-1), 1.0, rtol=1e-5)


def test_digits_mlp_params_as_named_inputs(tmp_path, digits_params):
    x = rng.uniform(0, 1, (3, 64)).astype(np.float32)
    model = fa.export.onnx(fa.jit(digits_mlp.logits_fn), digits_params, x, path=tmp_path / "m.onnx")
    feeds = {f"params.{k}": v for k, v in digits_params.items()} | {"x": x}
    _close(_ort_run(model, feeds), _ref(digits_mlp.logits_fn, digits_params, x), "logits with inputs")


def test_grad_function(tmp_path, digits_params):
    x = rng.uniform(0, 1, (6, 64)).astype(np.float32)
    y = rng.integers(0, 10, 6).astype(np.int32)
    g = fa.grad(digits_mlp.loss_fn)
    model = fa.export.onnx(g, digits_params, x, y, path=tmp_path / "grad.onnx", bake_argnums=(0,))
    out_names = [o.name for o in model.graph.output]
    assert out_names == [f"out.{k}" for k in sorted(digits_params)]
    _close(_ort_run(model, {"x": x, "y": y}), _ref(g, digits_params, x, y), "grad of the digits loss")

    def small(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    xs = rng.standard_normal((5, 4)).astype(np.float32)
    gs = fa.grad(small)
    model = fa.export.onnx(gs, w, xs, path=tmp_path / "small.onnx")
    _close(_ort_run(model, {"w": w, "x": xs}), _ref(gs, w, xs), "grad of a small loss")


def test_scan_recurrence_and_its_grad(tmp_path):
    def rnn(w, xs):
        def step(h, x):
            h = fnp.tanh(h @ w + x)
            return h, fnp.sum(h)
        return fa.scan(step, fnp.zeros(3, dtype=fnp.float32), xs)

    def rev(xs):
        return fa.scan(lambda c, x: (c * 0.5 + x, c), 0.0 * xs[0], xs, reverse=True)

    w = rng.standard_normal((3, 3)).astype(np.float32) * 0.5
    xs = rng.standard_normal((7, 3)).astype(np.float32)
    model = fa.export.onnx(rnn, w, xs, path=tmp_path / "scan.onnx")
    assert any(n.op_type == "Loop" for n in model.graph.node)
    _close(_ort_run(model, {"w": w, "xs": xs}), _ref(rnn, w, xs), "scan rnn")
    model = fa.export.onnx(rev, xs, path=tmp_path / "rev.onnx")
    _close(_ort_run(model, {"xs": xs}), _ref(rev, xs), "reverse scan")

    def loss(w, xs):
        return fnp.sum(rnn(w, xs)[1] ** 2)
    g = fa.grad(loss)
    model = fa.export.onnx(g, w, xs, path=tmp_path / "gscan.onnx")
    _close(_ort_run(model, {"w": w, "xs": xs}), _ref(g, w, xs), "grad through scan")

    def fori(x):
        return fa.fori_loop(0, 5, lambda i, c: c * 1.5 + i, x)
    x = rng.standard_normal(4).astype(np.float32)
    model = fa.export.onnx(fori, x, path=tmp_path / "fori.onnx")
    _close(_ort_run(model, {"x": x}), _ref(fori, x), "fori_loop")


def test_cond_switch_and_while(tmp_path):
    def f(p, x):
        return fa.cond(p > 0, lambda v: fnp.sin(v) * 2, lambda v: fnp.cos(v) - 1, x)

    def sw(i, x):
        return fa.switch(i, [lambda v: v + 1, lambda v: v * 3, lambda v: -v], x)

    def wl(x):
        return fa.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.1), (0, x))

    x = rng.standard_normal(5).astype(np.float32)
    model = fa.export.onnx(f, np.float32(1.0), x, path=tmp_path / "cond.onnx")
    assert any(n.op_type == "If" for n in model.graph.node)
    for p in (1.0, -1.0):
        p = np.float32(p)
        _close(_ort_run(model, {"p": p, "x": x}), _ref(f, p, x), f"cond p={p}")
    model = fa.export.onnx(sw, np.int32(0), x, path=tmp_path / "sw.onnx")
    for i in (-3, 0, 1, 2, 9):  # the index is clamped into range
        i = np.int32(i)
        _close(_ort_run(model, {"i": i, "x": x}), _ref(sw, i, x), f"switch i={i}")
    model = fa.export.onnx(wl, x, path=tmp_path / "while.onnx")
    _close(_ort_run(model, {"x": x}), _ref(wl, x), "while_loop")


def test_calls_are_inlined_and_captured_arrays_baked(tmp_path):
    table = fnp.asarray(rng.standard_normal((4,)).astype(np.float32))

    @fa.jit
    def inner(x):
        return x * table

    @fa.custom_jvp
    def softplus(x):
        return fnp.log1p(fnp.exp(x))
    softplus.defjvp(lambda primals, tangents: (softplus(primals[0]), tangents[0] * fa.nn.sigmoid(primals[0])))

    def f(x):
        return fa.checkpoint(lambda v: softplus(inner(v)))(x)

    x = rng.standard_normal(4).astype(np.float32)
    model = fa.export.onnx(f, x, path=tmp_path / "m.onnx")
    assert [i.name for i in model.graph.input] == ["x"]
    assert any(i.name.startswith("const.") for i in model.graph.initializer)
    _close(_ort_run(model, {"x": x}), _ref(f, x), "inlined calls")


def test_pytree_inputs_and_outputs_are_named(tmp_path):
    def f(batch, *rest):
        return {"loss": fnp.sum(batch["a"] * rest[0]), "y": batch["b"] + 1}

    batch = {"a": np.ones(3, np.float32), "b": np.arange(2, dtype=np.int32)}
    z = np.full(3, 2.0, np.float32)
    model = fa.export.onnx(f, batch, z, path=tmp_path / "m.onnx")
    assert [i.name for i in model.graph.input] == ["batch.a", "batch.b", "rest.0"]
    assert [o.name for o in model.graph.output] == ["out.loss", "out.y"]
    got = _ort_run(model, {"batch.a": batch["a"], "batch.b": batch["b"], "rest.0": z})
    _close(got, _ref(f, batch, z), "pytree")


def test_errors(tmp_path):
    x = np.ones(3, np.float32)
    with pytest.raises(UnsupportedOnDevice, match="erf_inv"):
        fa.export.onnx(fnp.erfinv, x, path=tmp_path / "a.onnx")
    with pytest.raises(UnsupportedOnDevice, match=r"complex64"):
        fa.export.onnx(lambda v: v * (1 + 1j), x, path=tmp_path / "b.onnx")
    with pytest.raises(UnsupportedOnDevice, match="opset=18"):
        fa.export.onnx(lambda v: v & 3, np.arange(3, dtype=np.int32), path=tmp_path / "c.onnx", opset=17)
    with pytest.raises(ValueError, match="opset"):
        fa.export.onnx(lambda v: v, x, path=tmp_path / "d.onnx", opset=13)
    with pytest.raises(ValueError, match="bake_argnums"):
        fa.export.onnx(lambda v: v, x, path=tmp_path / "e.onnx", bake_argnums=(3,))
    with pytest.raises(TypeError, match="callable"):
        fa.export.onnx(3, x, path=tmp_path / "f.onnx")
    assert not list(tmp_path.iterdir())


def test_opset_17_model_runs(tmp_path, digits_params):
    x = rng.uniform(0, 1, (2, 64)).astype(np.float32)

    def f(params, x):
        p = digits_mlp.predict(params, x)
        return fnp.max(p, axis=-1), fnp.prod(p[:, :3], axis=-1)
    model = fa.export.onnx(f, digits_params, x, path=tmp_path / "m.onnx", bake_argnums=0, opset=17)
    assert model.opset_import[0].version == 17
    _close(_ort_run(model, {"x": x}), _ref(f, digits_params, x), "opset 17")


def test_float16_model(tmp_path):
    x = np.linspace(-1, 1, 12, dtype=np.float16).reshape(3, 4)

    def f(x):
        return fnp.tanh(x @ x.T + 1), fnp.max(x, axis=0), fnp.sum(x, axis=1)
    model = fa.export.onnx(f, x, path=tmp_path / "f16.onnx")
    _close(_ort_run(model, {"x": x}), _ref(f, x), "float16")


# ------------------------------------------------------------------------------------------- the other examples

import nbody  # noqa: E402
import newton  # noqa: E402
import per_example_gradients as peg  # noqa: E402


def test_nbody_scan(tmp_path):
    pos, vel, masses = nbody.initial_state(fa.random.key(1), 4)

    def run(pos, vel, masses):
        return nbody.simulate(pos, vel, masses, 0.01, 20)
    model = fa.export.onnx(run, pos, vel, masses, path=tmp_path / "nbody.onnx")
    _close(_ort_run(model, {"pos": pos, "vel": vel, "masses": masses}), _ref(run, pos, vel, masses), "nbody")


def test_newton_cholesky_and_hessian(tmp_path):
    x = newton.with_bias(rng.uniform(0, 1, (20, 8)).astype(np.float32)[:, :7])
    t = (rng.random(20) < 0.5).astype(np.float32)
    w = (rng.standard_normal(8) * 0.1).astype(np.float32)

    def step(x, t, w):  # the Hessian, the gradient and a Hessian-vector product: what a Newton step needs
        loss = newton.make_loss(x, t, 1e-2)
        return fa.hessian(loss)(w), fa.grad(loss)(w), newton.hvp(loss, w, w)
    model = fa.export.onnx(step, x, t, w, path=tmp_path / "newton.onnx")
    got = _ort_run(model, {"x": x, "t": t, "w": w})
    want = _ref(step, x, t, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5)

    # The example's Cholesky solve is fnarray.scipy.linalg's now; ONNX has no factorization operator.
    def solve(x, t, w):
        _, _, d = newton.newton_direction(newton.make_loss(x, t, 1e-2), w, "cholesky", 0)
        return d
    with pytest.raises(fa.UnsupportedOnDevice, match="cholesky"):
        fa.export.onnx(solve, x, t, w, path=tmp_path / "newton_solve.onnx")


def test_per_example_gradients_and_dp_sgd(tmp_path):
    params = {k: np.asarray(v) for k, v in peg.init_params(fa.random.key(2)).items()}
    x = rng.uniform(0, 1, (5, 64)).astype(np.float32)
    y = rng.integers(0, 10, 5).astype(np.int32)
    model = fa.export.onnx(peg.per_example_grads, params, x, y, path=tmp_path / "peg.onnx", bake_argnums=0)
    _close(_ort_run(model, {"x": x, "y": y}), _ref(peg.per_example_grads, params, x, y), "per-example grads")

    key = np.asarray(fa.random.PRNGKey(3))   # raw uint32[2] words: an ONNX input

    def step(params, x, y, key):
        return peg.dp_sgd_step(params, x, y, key, 1.0, 1.0, 0.5)
    # fa.random.normal turns Threefry bits into floats with a bitcast, which ONNX lacks: named at export.
    with pytest.raises(UnsupportedOnDevice, match=r"bitcast_convert_type \(uint32, float32\)"):
        fa.export.onnx(step, params, x, y, key, path=tmp_path / "dp.onnx", bake_argnums=0)

    def bits(key):  # the Threefry half of it (uint32 shifts, rotations, xor, adds) does export
        return fa.random.bits(key, (7,))
    model = fa.export.onnx(bits, key, path=tmp_path / "bits.onnx")
    _close(_ort_run(model, {"key": key}), _ref(bits, key), "threefry bits")


def test_digits_cnn_baked_and_its_grad(tmp_path):
    # The convolutions (ONNX Conv) and the max pools (the window rules' tap graphs), forward and backward
    # (select_and_scatter_add and the convolution transposes); the file size and a run's latency printed.
    import time

    import digits_cnn
    params = {k: np.asarray(v) for k, v in digits_cnn.init_params(fa.random.key(1)).items()}
    x = rng.uniform(0, 1, (8, 64)).astype(np.float32)
    path = tmp_path / "digits_cnn.onnx"
    model = fa.export.onnx(digits_cnn.predict, params, x, path=path, bake_argnums=(0,))
    onnx.checker.check_model(onnx.load(str(path)))
    assert [i.name for i in model.graph.input] == ["x"]
    ops = {n.op_type for n in model.graph.node}
    assert "Conv" in ops and "Max" in ops, sorted(ops)
    sess = _session(model)
    got = sess.run(None, {"x": x})
    _close(got, _ref(digits_cnn.predict, params, x), "digits CNN predict")
    t0 = time.perf_counter()
    for _ in range(20):
        sess.run(None, {"x": x})
    print(f"digits CNN ONNX: {os.path.getsize(path)} bytes, {(time.perf_counter() - t0) / 20 * 1e3:.2f} ms "
          "per batch of 8 images in onnxruntime (CPU, 1 thread)")
    y = rng.integers(0, 10, 8).astype(np.int32)
    g = fa.grad(digits_cnn.loss_fn)
    gm = fa.export.onnx(g, params, x, y, path=tmp_path / "cnn_grad.onnx", bake_argnums=(0,))
    _close(_ort_run(gm, {"x": x, "y": y}), _ref(g, params, x, y), "grad of the digits CNN loss")


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("form", ["qdq", "unpacked", "weights_as_inputs"])
def test_quantized_matmul(tmp_path, bits, form):
    # Weights known at export with 4 or 8 bits at opset 21: QDQ (a uint4/uint8 initializer and the blocked
    # DequantizeLinear, which ONNX Runtime fuses into MatMulNBits); otherwise the packed words are unpacked
    # with BitShift/BitwiseAnd. Both against the numpy backend's quantized_matmul, for both transposes.
    for transpose, gs in ((True, 32), (False, 64)):
        w = rng.standard_normal((96, 128) if transpose else (128, 192)).astype(np.float32)
        wq, s, b = (np.asarray(a) for a in fa.quantize(fnp.asarray(w), group_size=gs, bits=bits))
        x = rng.standard_normal((3, 128)).astype(np.float32)

        def f(x, wq, s, b):
            return fa.quantized_matmul(x, wq, s, b, transpose=transpose, group_size=gs, bits=bits)
        opset = 18 if form == "unpacked" else 21
        if form == "weights_as_inputs":
            model = fa.export.onnx(f, x, wq, s, b, path=tmp_path / "q.onnx", opset=opset)
            feeds = dict(zip([i.name for i in model.graph.input], (x, wq, s, b)))
        else:
            model = fa.export.onnx(f, x, wq, s, b, path=tmp_path / "q.onnx", opset=opset, bake_argnums=(1, 2, 3))
            feeds = {model.graph.input[0].name: x}
        ops = {n.op_type for n in model.graph.node}
        qdq = form == "qdq" and bits in (4, 8)
        assert ("DequantizeLinear" in ops) == qdq and ("BitShift" in ops) == (not qdq), sorted(ops)
        if qdq:  # the packed uint32 words are not exported beside their uint4/uint8 form
            assert all(t.data_type != onnx.TensorProto.UINT32 for t in model.graph.initializer)
            packed = w.nbytes * bits // 32 + s.nbytes + b.nbytes   # the integers at their width, scales, biases
            assert os.path.getsize(tmp_path / "q.onnx") < packed * 1.2 + 4096
        got = _ort_run(model, feeds, optimized=tmp_path / "opt.onnx")
        _close(got, _ref(f, x, wq, s, b), f"quantized_matmul bits={bits} {form}")
        # x @ W.T's QDQ is ONNX Runtime's MatMulNBits pattern (DequantizeLinear along the contraction into MatMul)
        fused = {n.op_type for n in onnx.load(tmp_path / "opt.onnx").graph.node}
        assert ("MatMulNBits" in fused) == (qdq and transpose), (bits, form, transpose, sorted(fused))


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_quantized_matmul_float_modes(tmp_path, mode):
    # MLX's floating modes: the packed codes unpacked with BitShift/BitwiseAnd, their element values and the uint8
    # scales' values looked up in constant tables (Gather), per group; weights baked and as inputs, both transposes.
    for transpose in (True, False):
        w = rng.standard_normal((96, 128) if transpose else (128, 192)).astype(np.float32)
        wq, s = (np.asarray(a) for a in fa.quantize(fnp.asarray(w), mode=mode))
        x = rng.standard_normal((3, 128)).astype(np.float32)

        def f(x, wq, s):
            return fa.quantized_matmul(x, wq, s, transpose=transpose, mode=mode)
        for baked in (False, True):
            if baked:
                model = fa.export.onnx(f, x, wq, s, path=tmp_path / "q.onnx", opset=18, bake_argnums=(1, 2))
                feeds = {model.graph.input[0].name: x}
            else:
                model = fa.export.onnx(f, x, wq, s, path=tmp_path / "q.onnx", opset=18)
                feeds = dict(zip([i.name for i in model.graph.input], (x, wq, s)))
            assert {"BitShift", "Gather"} <= {n.op_type for n in model.graph.node}
            _close(_ort_run(model, feeds), _ref(f, x, wq, s), f"quantized_matmul {mode} baked={baked}")


def test_quantized_matmul_needs_bitwise_ops(tmp_path):
    wq, s, b = fa.quantize(fnp.ones((32, 64)), group_size=32, bits=4)
    with pytest.raises(UnsupportedOnDevice, match="opset 18"):
        fa.export.onnx(lambda x, w: fa.quantized_matmul(x, w, s, b, group_size=32), np.ones((1, 64), np.float32),
                       np.asarray(wq), path=tmp_path / "q.onnx", opset=17)
