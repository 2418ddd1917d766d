"""``jit(f, shapeless=True)`` (``fnarray/transforms/shapeless_jit.py``): one trace serves calls that differ only in
their sizes, as ``mx.compile(f, shapeless=True)``, once a trace at a second size confirmed that its program is the
first one renamed; a program that does not rename to the new sizes is traced again there (never wrong, never a
shape error of its own). Traces counted with a Python side effect; NumPy float64 as
the reference."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.transforms import shapeless_jit
from helpers import count_lowerings, decode_step, on_device, require_backend

W = 16   # the decode step's width: no cache length below reaches it (equal sizes are another pattern)


def _counted(f):
    """``f`` with a count of its Python runs (traces) in ``.n``."""
    def g(*args, **kwargs):
        g.n += 1
        return f(*args, **kwargs)
    g.n = 0
    return g


def test_decode_step_traced_twice_for_every_length(device, monkeypatch):
    # numpy:0 and mlx:0 run 10 lengths; the backends that compile each program (XLA, kernels) 3: the two traced
    # and one derived (the derivation is the backends' same; their compile of it is what differs), to stay fast
    lengths = range(2, 12) if device.backend in ("numpy", "mlx") else range(2, 5)
    step = _counted(decode_step(fnp))
    f = fa.jit(step, shapeless=True)
    ref = decode_step(np)
    rng = np.random.default_rng(0)
    q, row = rng.normal(size=(1, W)), rng.normal(size=(1, W))
    lowered = count_lowerings(monkeypatch, device)
    calls = [(rng.normal(size=(n, W)), q, row) for n in lengths]

    def check(passes):
        for cache, q, row in calls:
            n = cache.shape[0]
            for _ in range(passes):
                got_cache, got = f(*[on_device(a.astype(np.float32), device) for a in (cache, q, row)])
                want_cache, want = ref(cache, q, row)
                assert got.shape == want.shape and got_cache.shape == (n + 1, W)
                np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6, err_msg=f"length {n}")
                np.testing.assert_allclose(np.asarray(got_cache), want_cache, rtol=1e-6, err_msg=f"length {n}")
    check(1)
    assert step.n == 2, f"{step.n} traces for {len(lengths)} lengths"   # (the second confirms the first)
    if device.backend == "mlx":   # one program for every length: MLX's shapeless compile, called directly
        assert len(lowered) == 1 and len(f._shapeless.direct) == 1, lowered
        # a second pass finds each length's sizes and output avals kept: only lengths 3's and 4's (run by the
        # general path, 3 traced to confirm 2's trace and 4 derived, before the direct call was made) are checked
        # and made; new lengths past a bound of 4 empty them
        direct = f._shapeless.direct[0]
        checked = []
        monkeypatch.setattr(type(direct), "_fits", lambda d, flat, fits=type(direct)._fits: checked.append(flat) or
                            fits(d, flat))
        check(1)
        assert [flat[2] for flat in checked] == [3, 4] and step.n == 2, checked
        monkeypatch.setattr(shapeless_jit, "FITS_KEPT", 4)
        calls[:] = [(rng.normal(size=(n, W)), q, row) for n in range(12, W)]
        check(2)
        assert len(direct.fits) <= 4 and len(direct.shaped[0]) <= 4 and step.n == 2 and len(lowered) == 1
    # without shapeless: a trace per length, as before
    plain = _counted(decode_step(fnp))
    for n in (2, 3):
        fa.jit(plain)(fnp.ones((n, W)), fnp.ones((1, W)), fnp.ones((1, W)))
    assert plain.n == 2


@pytest.mark.parametrize("fun, traces", [
    (lambda x: x.reshape(-1) * 2.5, 4),         # a reshape to the traced size: retraced at each size
    (lambda x: x[1:] + 1.5, 4),                  # a slice's limit is the size: retraced
    (lambda x: x[:-1, ::2] * 2.5, 4),            # limits computed from the sizes, 3 and 6 at 4 rows: retraced
    (lambda x: x.mean(axis=0), 4),               # mean divides by the size, a literal: retraced
    (lambda x: x.mean() + 1.5, 4),               # ... by a product of sizes (7n): retraced
    (lambda x: fnp.tanh(x) * 2 + x.sum(axis=0), 3),   # 2.0 ties the size 2 of the first trace only
])
def test_programs_that_do_not_rename_are_traced_again(fun, traces):
    f = _counted(fun)
    jf = fa.jit(f, shapeless=True)
    for n in (2, 3, 4, 5):
        x = np.arange(n * 7, dtype=np.float64).reshape(n, 7) / 7
        np.testing.assert_allclose(np.asarray(jf(x.astype(np.float32))), fun(x), rtol=1e-6)
    assert f.n == traces


def test_values_computed_from_sizes_are_traced_again():
    # a mean's divisor 12 at (3, 4), though equal to y's size, which stays (main before s24b: 1.67)
    f = fa.jit(lambda x, y: x.mean() + y.sum(), shapeless=True)
    assert float(f(fnp.ones((3, 4)), fnp.zeros(12))) == 1.0 and float(f(fnp.ones((5, 4)), fnp.zeros(12))) == 1.0
    # "SAME" padding with strides and convolve's "full" padding depend on the sizes ((1, 1) at 5 points, (0, 1) at
    # 6; 2 for a kernel of 3, 3 for 4): never renamed (main before s24b ran the traced padding: wrong values)
    conv = lambda x, w: fa.lax.conv_general_dilated(x, w, (2,), "SAME")   # noqa: E731
    full = lambda x, w: fnp.convolve(x, w)                                  # noqa: E731
    # a strided "SAME" window pads (0, 0) at 6 points, (0, 1) at 7: strides tie the sizes too
    pool = lambda x, w: fa.lax.reduce_window(x * w.sum(), 0.0, fa.lax.add, (2,), (2,), "SAME")   # noqa: E731
    for fun, shapes in ((conv, [((1, 1, 5), (1, 1, 3)), ((1, 1, 6), (1, 1, 3))]), (full, [(5, 3), (7, 4)]),
                        (pool, [(6, 3), (7, 3)])):
        jf = fa.jit(fun, shapeless=True)
        for xs, ws in shapes:
            x, w = np.linspace(1, 2, np.prod(xs)).reshape(xs), np.linspace(-1, 1, np.prod(ws)).reshape(ws)
            args = (fnp.asarray(x, dtype=fnp.float32), fnp.asarray(w, dtype=fnp.float32))
            np.testing.assert_allclose(np.asarray(jf(*args)), np.asarray(fa.jit(fun)(*args)), rtol=1e-6)


def test_patterns_and_options():
    # another dtype, rank, a 1 where a size was, or two sizes that were different now equal: new traces
    f = _counted(lambda x, y: x * y.sum())
    jf = fa.jit(f, shapeless=True)
    for shape, dtype in [((3, 4), "float32"), ((5, 6), "float32"), ((5, 6), "int32"), ((1, 6), "float32"),
                         ((6, 6), "float32"), ((7, 8), "float32"), ((2, 3, 4), "float32")]:
        x = np.ones(shape, dtype)
        np.testing.assert_array_equal(np.asarray(jf(x, np.ones(2, dtype))), x * 2)
    assert f.n == 6   # (5 patterns, the first confirmed at (5, 6))
    # static arguments (part of the pattern), pytrees, donation: derived all the same
    g = _counted(lambda d, k: {"y": d["a"] * k + d["b"].sum()})
    jg = fa.jit(g, static_argnums=1, donate_argnums=0, shapeless=True)
    for n in (2, 3, 4):
        a = fnp.ones((n, 5))
        out = jg({"a": a, "b": fnp.ones((n,))}, 3.0)
        np.testing.assert_allclose(np.asarray(out["y"]), np.full((n, 5), 3.0 + n))
        assert a.is_deleted()
    jg({"a": fnp.ones((4, 5)), "b": fnp.ones((4,))}, 2.0)
    assert g.n == 3
    # the ahead-of-time API traces, lowers and compiles the derived program
    assert "f32[9,5]" in str(jg.trace({"a": fnp.ones((9, 5)), "b": fnp.ones((9,))}, 3.0).program)
    compiled = jg.lower({"a": fnp.ones((8, 5)), "b": fnp.ones((8,))}, 3.0).compile()
    np.testing.assert_allclose(np.asarray(compiled({"a": fnp.ones((8, 5)), "b": fnp.ones((8,))}, 3.0)["y"]), 11.0)
    assert g.n == 3
    with pytest.raises(TypeError, match="shapeless must be True or False, got 'yes'"):
        fa.jit(lambda x: x, shapeless="yes")


def test_grad_vmap_jvp_use_the_derived_programs():
    f = _counted(lambda x: (fnp.tanh(x) * x).sum())
    jf = fa.jit(f, shapeless=True)
    for n in (3, 4, 5, 6):
        x = np.linspace(-1, 1, n)
        t = np.tanh(x)
        np.testing.assert_allclose(np.asarray(fa.grad(jf)(x.astype(np.float32))), t + x * (1 - t * t), rtol=1e-5)
        dx = np.linspace(0.5, 1.5, n)
        _, dy = fa.jvp(jf, (x.astype(np.float32),), (dx.astype(np.float32),))
        np.testing.assert_allclose(float(dy), ((t + x * (1 - t * t)) * dx).sum(), rtol=1e-5, atol=1e-6)
        xs = np.stack([x, 2 * x]).astype(np.float32)
        np.testing.assert_allclose(np.asarray(fa.vmap(jf)(xs)), (np.tanh(xs) * xs).sum(1), rtol=1e-5)
    assert f.n == 2


def _rows(*sizes):
    return [[(n, 3)] for n in sizes]


def _vectors(*sizes):
    return [[(n,)] for n in sizes]


def _attention(q):
    return fa.nn.dot_product_attention(q, q, q, is_causal=True)


def _pool_grad(x):
    pool = lambda x: fa.lax.reduce_window(x, -fnp.inf, fa.lax.max, (2,), (2,), "SAME").sum()   # noqa: E731
    return fa.grad(pool)(x)


#: class of risk -> functions and the shapes of their arguments at each call, in order: each shapeless call must
#: give plain jit's values (main before s25-audit gave wrong values or shapes for those marked "was wrong")
RISKS = {
    # fixed indices computed from the size (x[-1] indexes 2 at 3 rows): was wrong
    "fixed indices": ([lambda x: fnp.take(x, -1, axis=0), lambda x: x[[0, -1]], lambda x: x.at[-1].add(1.0),
                       lambda x: x.at[1:].set(0.0), lambda x: fnp.pad(x, (1, 2), mode="edge"),
                       lambda x: fnp.pad(x, 1, mode="wrap")], _rows(3, 4, 5, 6)),
    # a constant equal to a size of the first trace (x[-2:] at 2 rows is the whole array; fnp.ones((3, 2))
    # broadcasts to a shape renamed with the batch of 2 rows): was wrong
    "a constant equal to a size": ([lambda x: x[-2:], lambda x: fnp.sort(x, axis=0)[-2:],
                                    lambda x: fnp.broadcast_to(x, (2,) + x.shape), lambda x: x.reshape(2, -1),
                                    lambda x: fnp.roll(x, 2, axis=0), lambda x: x @ fnp.ones((3, 2))],
                                   _rows(2, 4, 6, 8)),
    # values computed from a size by Python, in fnarray or in the function: was wrong
    "sizes in Python": ([lambda x: fnp.var(x, axis=0, ddof=1) + x.sum(), lambda x: x * (x.shape[0] - 1),
                         lambda x: x / x.shape[0] ** 0.5, lambda x: fa.lax.dynamic_slice_in_dim(x, 0, len(x) - 1),
                         lambda x: (x, len(x))],
                        _rows(2, 3, 4, 5)),
    # attention's default scale is 1 / sqrt(head size), a float parameter: was wrong
    "attention": ([_attention], [[(1, 3, 2, h)] for h in (2, 4, 5, 8)] + [[(1, t, 2, 4)] for t in (2, 5, 6)]),
    # parameters that hold sizes: iota, window shapes, padding, k, fft lengths, splits, classes
    "size parameters": ([lambda x: x + fnp.arange(len(x))[:, None], lambda x: fnp.tril(x @ x.T),
                         lambda x: x @ fnp.eye(3, k=1) * fnp.linspace(0, 1, len(x))[:, None],
                         lambda x: fa.lax.reduce_window(x, 0.0, fa.lax.add, (2, 1), (1, 1), "VALID"),
                         lambda x: fnp.convolve(x[:, 0], x[:2, 1]), lambda x: fa.lax.top_k(x.T, 2)[0],
                         lambda x: fnp.abs(fnp.fft.rfft(x, axis=0)), lambda x: fnp.array_split(x, 2)[1],
                         lambda x: fa.nn.one_hot(fnp.argmax(x, axis=0), len(x)), lambda x: fnp.cumsum(x, 0),
                         lambda x: fnp.argsort(x, axis=0), lambda x: fnp.fft.fftshift(x, axes=0),
                         lambda x: fa.random.normal(fa.random.PRNGKey(0), x.shape) + x], _rows(2, 3, 5)),
    "windows and their gradients": ([_pool_grad], _vectors(6, 7, 8, 9)),
    # structure: contractions, joins, selections, sub-programs (never renamed), zero sizes
    "structure": ([lambda x: fa.lax.dot_general(x, x, (((1,), (1,)), ((), ()))),
                   lambda x: fnp.concatenate([x, x[:1], x], 0), lambda x: fa.lax.select_n(x > 0, x, -x),
                   lambda x: fa.lax.fori_loop(0, 2, lambda i, c: c * 2.0 + c.sum(), x),
                   lambda x: fa.lax.cond(x.sum() > 0, lambda v: v[::-1], lambda v: v, x)], _rows(0, 2, 3, 4, 5)),
    # several arguments whose sizes tie, and two sizes equal at one call only
    "tied arguments": ([lambda x, y: x @ y + x.sum(), lambda x, y: (x.T * y[:, :1]).mean(1)],
                       [[(n, 3), (3, m)] for n, m in ((2, 3), (4, 5), (5, 4), (3, 3), (6, 7))]),
}


@pytest.mark.parametrize("risk", sorted(RISKS))
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_every_size_gives_plain_jits_values(risk, backend):
    dev = require_backend(backend)[0]
    funs, calls = RISKS[risk]
    rng = np.random.default_rng(3)
    for fun in funs:
        jf = fa.jit(fun, shapeless=True)
        for shapes in calls:
            args = [on_device(rng.standard_normal(s).astype(np.float32), dev) for s in shapes]
            got = jf(*args)   # (first: plain jit's trace of these sizes would serve it)
            want = fa.jit(fun)(*args)
            for g, w in zip(fa.tree_util.tree_leaves(got), fa.tree_util.tree_leaves(want), strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype, (risk, shapes, g.shape, w.shape)
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6,
                                           err_msg=f"{risk}: {shapes}")


def test_dtypes_static_arguments_and_x64_are_patterns():
    f = _counted(lambda x, k: (x * k).astype(float) + 0.5)
    jf = fa.jit(f, static_argnums=1, shapeless=True)
    for n, dtype, k in [(3, "float32", 2), (4, "float32", 2), (5, "float32", 2), (6, "int32", 2), (7, "float32", 3)]:
        out = jf(np.arange(n, dtype=dtype), k)
        assert out.dtype == np.float32 and out.shape == (n,)
        np.testing.assert_array_equal(np.asarray(out), np.arange(n) * k + 0.5)
    assert f.n == 4   # (float32 at 3, confirmed at 4; int32; k = 3)
    with fa.experimental.enable_x64():   # another pattern: float is float64 now
        out = jf(np.arange(7, dtype="float32"), 2)
    assert out.dtype == np.float64 and f.n == 5
