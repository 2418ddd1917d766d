"""What a user coming from JAX and MLX hit first (the tenth session's new-user probe, docs/internals.md "Open work").

Each test is a program written for JAX (or MLX), run with its imports changed, against JAX itself or NumPy
float64, or a bad input that once gave an unclear error or a wrong result.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl
from fnarray import nn
from helpers import fallback_mode


def _rng():
    return np.random.default_rng(0)


# ------------------------------------------------------------------------------------------ JAX's names


def test_shape_dtype_struct_and_eval_shape_as_jax():
    jax = pytest.importorskip("jax")

    def f(x, y):
        return {"a": x @ y, "b": fnp.sum(x) * 2.0}

    structs = (fa.ShapeDtypeStruct((3, 4), fnp.float32), fa.ShapeDtypeStruct((4, 5), "float32"))
    got = fa.eval_shape(f, *structs)
    want = jax.eval_shape(lambda x, y: {"a": x @ y, "b": x.sum() * 2.0},
                          jax.ShapeDtypeStruct((3, 4), np.float32), jax.ShapeDtypeStruct((4, 5), np.float32))
    for k in ("a", "b"):
        assert (got[k].shape, got[k].dtype) == (want[k].shape, want[k].dtype)
    assert fa.eval_shape(f, fnp.ones((3, 4)), fnp.ones((4, 5)))["a"] == fa.ShapeDtypeStruct((3, 5), "float32")
    assert fa.eval_shape(lambda a: a * 2, 1.0).weak_type
    prog = fa.make_jaxpr(f)(*structs)     # structs stand for arrays when tracing, too
    assert [v.aval.shape for v in prog.outvars] == [(3, 5), ()]
    compiled = fa.jit(lambda a: fnp.sin(a) * 2).lower(fa.ShapeDtypeStruct((3,), "float32")).compile()
    np.testing.assert_allclose(np.asarray(compiled(fnp.ones(3))), np.full(3, 2 * np.sin(1.0)), rtol=1e-6)
    assert pl.ShapeDtypeStruct is fa.ShapeDtypeStruct
    assert repr(fa.ShapeDtypeStruct((2,), "int8")) == "ShapeDtypeStruct(shape=(2,), dtype=int8)"
    with pytest.raises(fa.ContractionShapeError):
        fa.eval_shape(f, structs[0], fa.ShapeDtypeStruct((5, 5), "float32"))
    with pytest.raises(ValueError, match=">= 0"):
        fa.ShapeDtypeStruct((-1,), "float32")
    with pytest.raises(TypeError, match="ints"):
        fa.ShapeDtypeStruct((2.5,), "float32")


def test_pallas_quickstart_with_imports_only(device):
    """The quickstart's kernels as written for JAX (``jax.ShapeDtypeStruct``, ``jax.nn.relu`` as the fused
    activation, ``jax.vmap``), with ``fnarray`` imported as ``jax``: no fallback on any backend but mlx."""
    import fnarray as jax
    import fnarray.numpy as jnp

    def add_vectors_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    @jax.jit
    def add_vectors(x, y):
        return pl.pallas_call(add_vectors_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    def iota_kernel(o_ref):
        i = pl.program_id(0)
        o_ref[i] = i

    def matmul_kernel(x_ref, y_ref, z_ref, *, activation):
        z_ref[...] = activation(x_ref[...] @ y_ref[...])

    def matmul(x, y, *, activation):
        return pl.pallas_call(
            partial(matmul_kernel, activation=activation),
            out_shape=jax.ShapeDtypeStruct((x.shape[0], y.shape[1]), x.dtype), grid=(2, 2),
            in_specs=[pl.BlockSpec((x.shape[0] // 2, x.shape[1]), lambda i, j: (i, 0)),
                      pl.BlockSpec((y.shape[0], y.shape[1] // 2), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((x.shape[0] // 2, y.shape[1] // 2), lambda i, j: (i, j)))(x, y)

    rng = _rng()
    x64, y64 = rng.standard_normal((3, 16, 16)), rng.standard_normal((3, 16, 16))
    x, y = (fa.device_put(a.astype(np.float32), device) for a in (x64, y64))
    with fallback_mode("silent" if str(device).startswith("mlx") else "error"), warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        assert np.array_equal(np.asarray(add_vectors(jnp.arange(8), jnp.arange(8))), 2 * np.arange(8))
        iota = pl.pallas_call(iota_kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), grid=(8,))()
        z = matmul(x[0], y[0], activation=jax.nn.relu)
        zb = jax.vmap(partial(matmul, activation=jax.nn.relu))(x, y)
    assert np.array_equal(np.asarray(iota), np.arange(8))
    np.testing.assert_allclose(np.asarray(z), np.maximum(x64[0] @ y64[0], 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(zb), np.maximum(x64 @ y64, 0), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------ MLX's modules


def test_mlx_style_module_without_annotations_is_refused():
    """``self.layers = [...]`` in ``__init__`` without ``layers: list`` was an attribute no transform saw:
    ``fa.nn.quantize`` returned the float model and ``grad`` had nothing to differentiate, silently."""

    class MLP(nn.Module):
        def __init__(self, key):
            k1, k2 = fa.random.split(key)
            self.layers = [nn.Linear(8, 16, key=k1), nn.Linear(16, 4, key=k2)]

        def __call__(self, x):
            return self.layers[1](nn.relu(self.layers[0](x)))

    with pytest.raises(TypeError, match=r"self\.layers.*`layers: list`"):
        MLP(fa.random.key(0))

    class Annotated(MLP):
        layers: list

        def __init__(self, key):
            super().__init__(key)

    model = Annotated(fa.random.key(0))
    assert len(fa.tree.leaves(fa.grad(lambda m: fnp.sum(m(fnp.ones((2, 8)))))(model))) == 4
    wide = model.replace(layers=[nn.Linear(64, 32, key=fa.random.key(1)), nn.Linear(32, 64, key=fa.random.key(2))])
    quantized = nn.quantize(wide, group_size=32, bits=8)
    assert [type(layer).__name__ for layer in quantized.layers] == ["QuantizedLinear", "QuantizedLinear"]


# ------------------------------------------------------------------------------------------ bad inputs


def test_pallas_call_bad_kernels_say_what_is_wrong():
    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    x = fnp.ones((4,))
    sds = fa.ShapeDtypeStruct((4,), "float32")
    with pytest.raises(TypeError, match=r"called with 2 refs \(1 input, 1 output.*\(x_ref, y_ref, o_ref\)"):
        pl.pallas_call(add_kernel, out_shape=sds)(x)
    with pytest.raises(TypeError, match=r"called with 4 refs \(3 inputs, 1 output"):
        pl.pallas_call(add_kernel, out_shape=sds)(x, x, x)
    with pytest.raises(TypeError, match=r"pallas_call needs a callable as the kernel \(a function of refs\), got NoneType"):
        pl.pallas_call(None, out_shape=sds)(x, x)


def test_pallas_call_of_zero_d_arrays(device):
    """A 0-d ref's store failed in the interpreter (``setting an array element with a sequence``)."""
    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    a, b = (fa.device_put(fnp.asarray(v), device) for v in (1.5, 2.0))
    call = pl.pallas_call(add_kernel, out_shape=fa.ShapeDtypeStruct((), "float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        assert float(call(a, b)) == 3.5
        assert float(fa.jit(call)(a, b)) == 3.5


def test_kv_cache_rope_and_attention_bad_inputs():
    cache = nn.KVCache.create(1, 4, 2, 8)
    k = fnp.ones((1, 1, 2, 8))
    with pytest.raises(fa.ShapeError, match="same number of new positions"):
        cache.update(k, fnp.ones((1, 2, 2, 8)))     # was: values' second position dropped, offset + 1
    with pytest.raises(TypeError, match="sizes must be ints"):
        nn.KVCache.create(1, 2.5, 2, 8)             # was: a capacity of 2
    with pytest.raises(fa.DTypeError, match="must be floating"):
        nn.RoPE(8)(fnp.ones((1, 4, 8), dtype=fnp.int32))    # was: an int32 result, truncated
    with pytest.raises(ValueError, match="base must be positive"):
        nn.RoPE(8, base=0.0)                        # was: NaN
    q = fnp.ones((2, 5, 4, 0))
    out = nn.dot_product_attention(q, fnp.ones((2, 7, 2, 0)), fnp.ones((2, 7, 2, 0)))   # was: ZeroDivisionError
    assert out.shape == (2, 5, 4, 0)


_THREADS = """
import threading, numpy as np
import fnarray as fa, fnarray.numpy as fnp
f = fa.jit(lambda x: fnp.tanh(x) * 2, device="mlx:0")
x = np.ones((4, 4), np.float32)
bad = []
def work():
    for _ in range(40):   # past the calls after which the main thread would use mx.compile
        if not np.allclose(np.asarray(f(x)), np.tanh(x) * 2):
            bad.append(1)
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("wrong", len(bad))
"""


def test_mlx_jit_from_threads_exits_cleanly():
    """MLX keeps ``mx.compile``'s cache per thread and aborted the process at exit when worker threads had called
    a compiled function (5 runs of 6 in raw MLX 0.32); fnarray runs programs eagerly outside the main thread."""
    import os
    import subprocess
    import sys
    helpers = pytest.importorskip("helpers")
    helpers.require_backend("mlx")
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert run.returncode == 0, run.stderr[-2000:]
        assert "wrong 0" in run.stdout


def test_donated_array_passed_twice(device):
    """``f(donate(a), a)`` and ``f(donate(a), donate(a))``: a ``RuntimeError`` before the call on every backend, as
    XLA's ``INVALID_ARGUMENT`` in JAX (jax-ml/jax#9635), the array kept; ``f(donate(a), a.copy())`` runs."""
    step = fa.jit(lambda p, x: p - 0.5 * x, donate_argnums=(0,), device=device)
    both = fa.jit(lambda p, x: p - 0.5 * x, donate_argnums=(0, 1), device=device)
    q = fa.device_put(np.full(8, 2.0, np.float32), device)
    for f, which in ((step, "0 donated"), (both, "both donated")):
        with pytest.raises(RuntimeError, match=f"arguments 0 and 1 of the call .* one array, {which}"):
            f(q, q)
    np.testing.assert_array_equal(np.asarray(step(q, q.copy())), np.full(8, 1.0, np.float32))
    with pytest.raises(RuntimeError, match="donated"):
        np.asarray(q)


def test_s21_probe_leftovers_as_jax(device):
    """The twenty-first probe's leftovers, each as JAX 0.10 gives it: ``full`` of NaN into an integer dtype gives 0
    (was NumPy's "cannot convert float NaN to integer"), ``jacfwd`` of an integer or boolean output gives zeros of its dtype (was float0, which jax:0 and
    mlx:0 could not hold), and ``jacrev`` through one raises (gave float zeros; mlx:0 has a path of its own)."""
    assert np.asarray(fnp.full(2, np.nan, dtype=fnp.int32, device=device)).tolist() == [0, 0]
    v = fa.device_put(np.array([0.5, -1.0], np.float32), device)
    jac = fa.jacfwd(lambda a: a > 0)(v)   # (an int32 output: test_bad_input's host test)
    assert (jac.dtype, jac.shape, np.asarray(jac).any()) == (fnp.bool_, (2, 2), False)
    with pytest.raises(TypeError, match="jacrev requires real-valued outputs .*dtype bool"):
        fa.jacrev(lambda a: a > 0)(v)


@pytest.mark.parametrize("mask", [None, "causal", "bool", "additive"])
def test_scaled_dot_product_attention_in_mlx_layout(device, mask):
    """``mx.fast.scaled_dot_product_attention(q, k, v, scale=, mask=)`` ports with ``mx.fast`` -> ``fa.nn``."""
    mx = pytest.importorskip("mlx.core")
    rng = _rng()
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 7, 8)).astype(np.float32) for _ in range(2))
    m = {"bool": rng.random((2, 1, 5, 7)) > 0.3, "additive": rng.standard_normal((2, 4, 5, 7)).astype(np.float32)
         }.get(mask, mask)
    want = mx.fast.scaled_dot_product_attention(mx.array(q), mx.array(k), mx.array(v), scale=0.3,
                                                mask=mx.array(m) if isinstance(m, np.ndarray) else m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        got = nn.scaled_dot_product_attention(*(fa.device_put(a, device) for a in (q, k, v)), scale=0.3, mask=m)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6)
    with pytest.raises(fa.ShapeError, match="MLX's layout"):
        nn.scaled_dot_product_attention(q[0], k[0], v[0], scale=0.3)


def test_s24_derivatives_at_kinks_as_jax():
    """The conventions where the derivative is not unique, each as JAX 0.10 gives it (one jitted JAX program as the
    reference): ``abs`` at 0 (+1; so ``hypot`` at (0, 0) has 1/2), ``remainder`` at exact multiples (1 in x,
    -trunc(x / y) in y; was 0), ``x ** y`` at 0 (NaN for y < 0 in y and for y == 0.0 in x), ``lax.clamp`` at its
    bounds (0), ``det`` of singular matrices (the adjugate, JAX's cofactor form; was NaN), ``logaddexp`` at ties
    (1/2 each: JAX's custom JVP). JAX's values, stated (its programs take seconds to compile): the median of a tie has 1/2 each (was
    1 and 0), ``sinc`` twice at 0 is -pi**2 / 3 (was 0), ``cbrt`` twice -inf (was NaN), ``entr`` at 0 +inf; ``cummax`` ties:
    test_ad_rules.test_rules_against_jax_jvp."""
    jax = pytest.importorskip("jax")
    x = np.array([3.0, -3.0, 3.0, 0.0, 2.5], np.float32)
    y = np.array([1.5, 1.5, -1.5, 1.0, 1.0], np.float32)
    pw = (np.zeros(4, np.float32), np.array([0.0, -1.0, 2.0, 0.5], np.float32))
    clamped = np.array([-1.0, 0.0, 1.0, 2.0, 3.0], np.float32)
    zeros2 = np.zeros(2, np.float32)
    singular = [np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], np.float32),   # rank 2: adj(a)^T
                np.outer([1.0, 2.0, 3.0], [1.0, 0.5, 2.0]).astype(np.float32)]                # rank 1: 0

    def grads(L, lax_, grad):
        s = lambda f: (lambda *a: L.sum(f(*a)))   # noqa: E731
        return {"abs": grad(s(L.abs))(np.array([0.0, -0.0, -2.0], np.float32)),
                "hypot": grad(s(L.hypot), (0, 1))(zeros2, zeros2),
                "remainder": grad(s(L.remainder), (0, 1))(x, y),
                "pow": grad(s(L.power), (0, 1))(*pw),
                "clamp": grad(s(lambda v, lo, hi: lax_.clamp(lo, v, hi)), (0, 1, 2))(clamped, 0 * clamped,
                                                                                      0 * clamped + 2),
                "det": [grad(L.linalg.det)(m) for m in singular],
                # JAX's own rule, not the formula's: its max and |x - y| kinks would cancel to 0 at a tie (a GP
                # port's softplus(0) = logaddexp(0, 0.) then never moved its parameters)
                "logaddexp": grad(s(L.logaddexp), (0, 1))(np.array([0.0, 1.0, -np.inf, np.inf], np.float32),
                                                          np.array([0.0, -2.0, 0.0, np.inf], np.float32))}
    want = jax.jit(lambda: grads(jax.numpy, jax.lax, jax.grad))()
    got = grads(fnp, fa.lax, fa.grad)
    for k, w in want.items():
        for g, wv in zip(fa.tree_util.tree_leaves(got[k]), jax.tree_util.tree_leaves(w), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(wv), rtol=1e-6, err_msg=k)
    np.testing.assert_array_equal(np.asarray(fa.grad(fnp.median)(np.array([1.0, 1.0, 0.0, 3.0], np.float32))),
                                  [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(float(fa.hessian(fnp.sinc)(np.float32(0.0))), -np.pi ** 2 / 3, rtol=1e-6)
    assert float(fa.hessian(fnp.cbrt)(np.float32(0.0))) == -np.inf
    entr = fa.scipy.special.entr   # one-sided at 0: +inf, then -inf (were 0)
    assert (float(fa.grad(entr)(np.float32(0.0))), float(fa.hessian(entr)(np.float32(0.0)))) == (np.inf, -np.inf)


def test_s24_keys_cov_and_weak_types_as_jax():
    """``random.clone``/``key_dtype``, ``cov`` with ``fweights``/``aweights`` (NumPy float64 the reference), and
    the weak types of Python-scalar entry points (``full(2, 1)``, ``relu(1.0)``, ``lax.clamp`` of scalars: weak;
    ``gelu(1.0)``: strong), each as ``jax.eval_shape`` gives it; ``relu6`` of ints computes in float32 and
    ``hard_tanh`` keeps them (JAX's dtypes)."""
    jax = pytest.importorskip("jax")
    k = fa.random.key(3)
    assert fa.random.clone(k) is k and fa.random.key_dtype() == k.dtype == fa.random.key_dtype("threefry2x32")
    np.testing.assert_array_equal(np.asarray(fa.random.key_data(fa.random.clone(k))),
                                  np.asarray(jax.random.key_data(jax.random.clone(jax.random.key(3)))))
    rng = _rng()
    m = rng.normal(size=(3, 6)).astype(np.float32)
    aw, fw = rng.uniform(0.5, 2.0, 6).astype(np.float32), np.array([1, 2, 0, 3, 1, 1])
    for kw in ({"aweights": aw}, {"fweights": fw}, {"aweights": aw, "fweights": fw, "ddof": 2},
               {"fweights": fw, "bias": True}):
        np.testing.assert_allclose(np.asarray(fnp.cov(m, **kw)), np.cov(m.astype(np.float64), **kw), rtol=2e-5,
                                   atol=1e-6, err_msg=str(list(kw)))
    with pytest.raises(TypeError, match="fweights must be integer"):
        fnp.cov(m, fweights=aw)
    with pytest.raises(fa.ShapeError, match="one weight per observation"):
        fnp.cov(m, aweights=aw[:4])
    jnp = jax.numpy
    pairs = [(lambda: fnp.full(2, 1), lambda: jnp.full(2, 1)), (lambda: fnp.full((), 1.0), lambda: jnp.full((), 1.0)),
             (lambda: fnp.full(2, 1, dtype="int32"), lambda: jnp.full(2, 1, dtype="int32")),
             (lambda: fnp.zeros_like(1.0), lambda: jnp.zeros_like(1.0)),
             (lambda: fnp.full_like(fnp.ones(2), 3), lambda: jnp.full_like(jnp.ones(2), 3)),
             (lambda: fa.nn.relu(1.0), lambda: jax.nn.relu(1.0)), (lambda: fa.nn.relu(1), lambda: jax.nn.relu(1)),
             (lambda: fa.nn.softplus(1.0), lambda: jax.nn.softplus(1.0)),
             (lambda: fa.nn.gelu(1.0), lambda: jax.nn.gelu(1.0)),
             (lambda: fa.lax.clamp(0.0, 1.0, 2.0), lambda: jax.lax.clamp(0.0, 1.0, 2.0)),
             (lambda: fnp.clip(1.0, 0.0, 2.0), lambda: jnp.clip(1.0, 0.0, 2.0))]
    for i, (f, j) in enumerate(pairs):
        got, want = fa.eval_shape(f), jax.eval_shape(j)
        assert (got.shape, got.dtype, got.weak_type) == (want.shape, want.dtype, want.weak_type), i
    for f, j in ((fa.nn.relu6, jax.nn.relu6), (fa.nn.hard_tanh, jax.nn.hard_tanh)):   # (JAX's int results are
        assert f(fnp.arange(3)).dtype == j(jnp.arange(3)).dtype                       # weak: not followed)
    assert fa.scipy.special.logsumexp is not None    # fa.scipy without its own import, as jax.scipy
