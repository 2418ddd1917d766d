"""The call path: Python scalars reach the device once, and every scalar value stays exact.

On jax:0 a device scalar is kept per (type, value, dtype) in a bounded cache, for eager operations
and for scalar arguments of jitted calls (not donated ones). Counted uploads, not timings, are
asserted here; the times are in benchmarks/call_overhead.py.
"""

import functools
import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import count_lowerings, python_calls, run_threads


def _count_uploads(monkeypatch, device):
    impl = fa.devices(device.split(":")[0])[0].impl
    calls = [0]
    orig = impl.to_device

    def counting(array, dev):
        calls[0] += 1
        return orig(array, dev)

    monkeypatch.setattr(impl, "to_device", counting)
    return calls


def test_eager_scalar_operand_is_uploaded_once_on_jax(monkeypatch):
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    calls = _count_uploads(monkeypatch, "jax:0")
    for _ in range(50):
        y = x * 2.5 + 1.0
    assert calls[0] <= 2
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2.5 + 1.0)


def test_jitted_scalar_argument_is_uploaded_once_on_jax(monkeypatch):
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a, s: a * s)
    f(x, 2.5)
    calls = _count_uploads(monkeypatch, "jax:0")
    for _ in range(50):
        y = f(x, 2.5)
    assert calls[0] <= 1
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2.5)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_donated_scalar_gets_its_own_buffer_on_jax():
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a, s: a * s)
    g = fa.jit(lambda a, s: a * s, donate_argnums=(1,))
    want = np.arange(4, dtype=np.float32) * 1.5
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, 1.5)), want)
        np.testing.assert_array_equal(np.asarray(g(x, 1.5)), want)
    np.testing.assert_array_equal(np.asarray(x * 1.5), want)


@pytest.mark.parametrize("value", [2.0, -0.0, 0.0, math.nan, math.inf, -3, True, 1, 1.0, np.float32(0.25)])
def test_scalar_values_exact_in_any_order(device, value):
    """Values that compare equal (0.0 and -0.0, 1 and True and 1.0) never share a cached buffer."""
    x = fa.device_put(fnp.asarray([1.0, -2.0, 0.5], dtype=fnp.float32), device)
    xn = np.asarray([1.0, -2.0, 0.5], dtype=np.float32)
    for v in (value, -0.0, 0.0, 1, True, 1.0, value):
        got = np.asarray(x * v)
        want = xn * np.float32(v)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    f = fa.jit(lambda a, s: a * s)
    for v in (value, -0.0, 0.0, value):
        np.testing.assert_array_equal(np.signbit(np.asarray(f(x, v))), np.signbit(xn * np.float32(v)))


def test_scalar_cache_is_bounded():
    pytest.importorskip("jax")
    from fnarray.lowering.jax import backend as jax_lowering
    x = fa.device_put(fnp.ones(2, dtype=fnp.float32), "jax:0")
    for i in range(jax_lowering._SCALAR_CACHE_SIZE * 2):
        x * (i + 0.5)
    impl = fa.devices("jax")[0].impl
    assert len(impl._scalars._d) <= jax_lowering._SCALAR_CACHE_SIZE


def test_cached_call_on_a_non_default_device_skips_the_trace_lookup(monkeypatch):
    """Arrays on jax:0 with numpy:0 the default: a repeated call is a hit of the per-function table."""
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    f(x)
    looked_up = [0]
    orig = type(f)._trace

    def counting(self, *a, **k):
        looked_up[0] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(type(f), "_trace", counting)
    for _ in range(20):
        y = f(x)
    assert looked_up[0] == 0
    assert str(y.device) == "jax:0"
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2 + 1)


def test_a_call_without_arrays_runs_on_the_default_device():
    """An entry made for jax:0 arrays never decides where a call without array arguments runs."""
    pytest.importorskip("jax")
    f = fa.jit(lambda s: fnp.full((3,), 1.0) * s)
    a = fa.device_put(fnp.asarray(2.0, dtype=fnp.float32), "jax:0")
    assert str(f(a).device) == "jax:0"
    y = f(np.float32(3.0))
    assert y.device == fa.default_device()
    np.testing.assert_array_equal(np.asarray(y), np.full(3, 3.0, np.float32))
    b = fa.device_put(fnp.asarray(2.0, dtype=fnp.float32), "numpy:0")
    assert str(f(b).device) == "numpy:0" and str(f(a).device) == "jax:0"


# ---------------------------------------------------------------------------------------------- jit's hot path


class _CountingDict(dict):
    """A jitted function's fast table that counts its look-ups (the hot path makes none)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.gets = 0

    def get(self, *a):
        self.gets += 1
        return super().get(*a)


def _hot(f):
    return f._hot[0]


def test_hot_path_builds_no_key(device):
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), device)
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    f(x)
    f(x)
    assert _hot(f) is not None
    counting = f._fast = _CountingDict(f._fast)
    f._compiled._on_evict = None  # the partial holds the old table: nothing is evicted in this test
    for _ in range(5):
        y = f(x)
    assert counting.gets == 0
    assert y.device == device and y.committed
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2 + 1)


@pytest.mark.enable_x64
def test_hot_path_checks_each_argument():
    """Each call that differs from the hot record in any way the cache key sees takes the general path and is
    right: another dtype, shape, weak type, structure, container for a leaf, NumPy or scalar argument, device."""
    f = fa.jit(lambda p, s: {"y": p["w"] * s + p["b"], "n": fnp.sum(p["w"])})
    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)

    def args(w_, b_, s_):
        return {"w": fnp.asarray(w_), "b": fnp.asarray(b_)}, s_

    p, s = args(w, b, fnp.asarray(np.float32(2.0)))
    for _ in range(3):
        out = f(p, s)
    assert _hot(f) is not None and _hot(f).tree is not None  # a pytree argument: flattened along the record
    np.testing.assert_array_equal(np.asarray(out["y"]), w * 2 + b)
    cases = [
        (args(w.astype(np.float64), b.astype(np.float64), fnp.asarray(np.float64(2.0))), np.float64),
        (args(w[:1], b, fnp.asarray(np.float32(2.0))), np.float32),
        (args(w, b, fnp.asarray(2.0)), np.float32),                      # a weak scalar array
        (args(w, b, 2.0), np.float32),                                   # a Python scalar
        (({"w": w, "b": b}, np.float32(2.0)), np.float32),               # NumPy leaves
        (args(w, b, fnp.asarray(np.float32(2.0))), np.float32),          # the hot case again
    ]
    for (p_, s_), want in cases:
        out = f(p_, s_)
        wn = np.asarray(p_["w"])
        np.testing.assert_array_equal(np.asarray(out["y"]), wn * np.asarray(s_) + np.asarray(p_["b"]))
        assert out["y"].dtype == want and out["n"].shape == ()
    with pytest.raises(KeyError):
        f({"w": fnp.asarray(w), "c": fnp.asarray(b)}, 2.0)  # another structure: retraced, the function's error
    with pytest.raises((TypeError, KeyError)):
        f({"w": [fnp.asarray(w)], "b": fnp.asarray(b)}, 2.0)  # a container where the record has an array


def test_hot_path_follows_devices_and_placement():
    pytest.importorskip("jax")
    f = fa.jit(lambda a, b: a - b)
    xn = np.arange(3, dtype=np.float32)
    u = fnp.asarray(xn)                          # uncommitted on the default device
    c = fa.device_put(xn, "numpy:0")             # committed there
    j = fa.device_put(xn, "jax:0")
    for _ in range(3):
        assert not f(u, u).committed
    assert f(u, c).committed and f(c, u).committed
    assert str(f(j, j).device) == "jax:0" and str(f(u, u).device) == "numpy:0"
    with pytest.raises(ValueError, match="committed to different devices"):
        f(c, j)
    g = fa.jit(lambda a: a + 1.0, device="numpy:0")
    for _ in range(3):
        assert g(u).committed  # jit(device=...) commits its outputs


def test_hot_path_raises_for_a_deleted_argument():
    f = fa.jit(lambda a: a * 2.0)
    x = fnp.arange(3, dtype=fnp.float32)
    f(x)
    f(x)
    fa.jit(lambda a: a + 1.0, donate_argnums=0)(x)
    with pytest.raises(RuntimeError, match="donated"):
        f(x)


def test_hot_path_sees_configuration_changes():
    f = fa.jit(lambda a: a / a)
    x = fnp.asarray(np.array([0.0, 1.0], np.float32))
    f(x)
    f(x)
    old = fa.config.debug_nans
    fa.config.debug_nans = True
    try:
        with pytest.raises(FloatingPointError):
            f(x)
    finally:
        fa.config.debug_nans = old
    assert np.isnan(np.asarray(f(x))[0])


def test_hot_path_inside_a_transformation_stages_a_call():
    f = fa.jit(lambda a: a * 2.0)
    x = fnp.arange(3, dtype=fnp.float32)
    f(x)
    f(x)
    prog = fa.make_ir(lambda y: f(x) + f(y))(x)
    assert [e.primitive.name for e in prog.eqns] == ["call", "call", "add"]
    np.testing.assert_allclose(np.asarray(fa.grad(lambda y: fnp.sum(f(y)))(x)), 2.0)


def test_hot_record_dies_with_its_executable():
    import weakref
    old = fa.config.jit_cache_size
    fa.config.jit_cache_size = 1
    try:
        f = fa.jit(lambda a: a + 1.0)
        x3, x4 = fnp.ones(3, dtype=fnp.float32), fnp.ones(4, dtype=fnp.float32)
        f(x3)
        f(x3)
        (ex,) = f._compiled.values()
        assert _hot(f).gid == ex.gid
        first = weakref.ref(ex)
        del ex
        f(x4)  # evicts the executable of f32[3] (a bound of 1): freed at once, without a garbage collection
        f(x4)
        assert first() is None
        assert _hot(f) is None or _hot(f).in_avals == (x4.aval,)
        np.testing.assert_array_equal(np.asarray(f(x3)), np.full(3, 2.0, np.float32))
    finally:
        fa.config.jit_cache_size = old


def test_hot_path_outputs_keep_their_structure(device):
    f = fa.jit(lambda a: (a, {"s": a * 2.0, "t": [a + 1.0, None]}))
    x = fa.device_put(fnp.arange(2, dtype=fnp.float32), device)
    for _ in range(3):
        a, d = f(x)
    assert d["t"][1] is None and a.device == device
    np.testing.assert_array_equal(np.asarray(d["t"][0]), [1.0, 2.0])


def test_hot_path_is_thread_safe():
    f = fa.jit(lambda a, b: a * b + 1.0)

    def work(k):
        for i in range(200):
            n = 1 + (i + k) % 3  # three signatures, alternating: the hot record changes under the others
            x = fnp.asarray(np.full(n, k, np.float32))
            np.testing.assert_array_equal(np.asarray(f(x, x)), np.full(n, k * k + 1.0, np.float32))

    run_threads(work)


def test_a_hot_call_takes_few_python_calls():
    """Counted, not timed: a repeated jitted call is __call__, the executable and the result's creation."""
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    x = fnp.arange(4, dtype=fnp.float32)
    f(x)
    f(x)
    calls = python_calls(lambda: f(x))
    assert len(calls) <= 5, calls  # the lambda, __call__, ...


def test_a_traced_operation_takes_few_python_calls():
    """Counted, not timed: what tracing costs an operation of the namespace (issue 28: a jitted loop whose shapes
    grow traces each new shape, so its first pass is mostly this). Each operation binds each of its equations
    once (one ``bind`` and one ``process_primitive`` an equation), and the Python calls an
    operation stays within bounds: main before the twenty-sixth session read 24 (``exp``), 46 (a broadcasting
    ``-``), 22 (``@``) and 104 (``x - x.sum(axis=-1, keepdims=True)``); 16, 21, 9 and 50 after."""
    from fnarray.core.builder import trace_to_program
    from fnarray.core.shaped import ShapedArray

    n = 10
    f32 = np.dtype(np.float32)
    a, b, r = ShapedArray((4, 8), f32), ShapedArray((8, 8), f32), ShapedArray((4, 1), f32)
    cases = {  # name: (operation, its second operand, equations an operation, bound on Python calls an operation)
        "exp": (lambda x, y: fnp.exp(x), a, 1, 17),
        "broadcasting -": (lambda x, y: x - y, r, 2, 23),
        "@": (lambda x, y: x @ y, b, 1, 10),
        "softmax's shift": (lambda x, y: x - x.sum(axis=-1, keepdims=True), a, 4, 54),
    }
    for name, (op, other, eqns, bound) in cases.items():
        def chain(x, y, op=op):
            for _ in range(n):
                x = op(x, y)
            return [x]
        trace_to_program(chain, [a, other])
        calls = python_calls(lambda: trace_to_program(chain, [a, other]))   # noqa: B023 (called at once)
        bare = python_calls(lambda: trace_to_program(lambda x, y: [x], [a, other]))   # noqa: B023
        prog, _ = trace_to_program(chain, [a, other])
        assert len(prog.eqns) == n * eqns, (name, prog)
        assert calls.count("bind") == calls.count("process_primitive") == n * eqns, (name, calls)
        per_op = (len(calls) - len(bare)) / n
        assert per_op <= bound, (name, per_op, calls)


# ------------------------------------------------- the hot path with static arguments, donation, modules, device=

def _counting_trace(monkeypatch, f):
    """A list that grows by one each time ``f``'s general path looks up a trace (a call that is not a hit)."""
    looked_up = []
    orig = type(f)._trace

    def counting(self, *a, **k):
        looked_up.append(1)
        return orig(self, *a, **k)
    monkeypatch.setattr(type(f), "_trace", counting)
    return looked_up


def test_static_arguments_take_the_hot_path(device, monkeypatch):
    traced = []

    def fun(a, n, *, mode):
        traced.append((n, mode))
        return a * n if mode == "mul" else a + n
    f = fa.jit(fun, static_argnums=1, static_argnames="mode")
    x = fa.device_put(fnp.arange(3, dtype=fnp.float32), device)
    xn = np.arange(3, dtype=np.float32)
    for _ in range(2):
        f(x, 2, mode="mul")
    lowered = count_lowerings(monkeypatch, device)
    looked_up = _counting_trace(monkeypatch, f)
    for _ in range(5):
        y = f(x, 2, mode="mul")
    assert looked_up == [] and lowered == [] and traced == [(2, "mul")]
    np.testing.assert_array_equal(np.asarray(y), xn * 2)
    # another static value, by position or by keyword: the general path, a trace of its own, right results
    np.testing.assert_array_equal(np.asarray(f(x, 3, mode="mul")), xn * 3)
    np.testing.assert_array_equal(np.asarray(f(x, 2, mode="add")), xn + 2)
    np.testing.assert_array_equal(np.asarray(f(x, 2.0, mode="mul")), xn * 2)  # equal, another type: a miss
    np.testing.assert_array_equal(np.asarray(f(x, 2, mode="mul")), xn * 2)
    assert sorted(set(traced), key=str) == sorted({(2, "mul"), (3, "mul"), (2, "add")}, key=str)
    assert len(looked_up) == 2  # the two new keys; 2.0 equals 2 in the key (as in JAX): the fast table's
    with pytest.raises(TypeError):
        f(x, 2)  # the keyword is missing: the hot record must not run the call
    with pytest.raises(TypeError, match="unhashable"):
        f(x, [2], mode="mul")


def test_a_static_keyword_call_keeps_weak_types_apart(device):
    f = fa.jit(lambda a, b, *, k: a * b + k, static_argnames="k")
    x = fa.device_put(fnp.arange(3, dtype=fnp.float32), device)
    strong = fa.device_put(fnp.asarray(np.float32(2.0)), device)
    weak = fa.device_put(fnp.asarray(2.0), device)
    assert weak.aval.weak_type and not strong.aval.weak_type
    for _ in range(3):
        ys, yw = f(x, strong, k=1), f(x, weak, k=1)
        hs, hw = f(strong, strong, k=1), f(weak, weak, k=1)
    assert ys.dtype == yw.dtype == np.float32
    assert not hs.aval.weak_type and hw.aval.weak_type  # weak in, weak out: another executable
    np.testing.assert_array_equal(np.asarray(yw), np.arange(3, dtype=np.float32) * 2 + 1)


def test_donating_calls_take_the_hot_path(device, monkeypatch):
    """A donating call makes its hot record at its first call, as any call does (the record holds the donated
    leaves' positions, no input): fresh inputs then take the hot path (one trace, one key, one compile), each
    deleted after its call and the other argument kept; a donated input raises when used again."""
    f = fa.jit(lambda s, a: s + a, donate_argnums=0)
    a = fa.device_put(fnp.ones(3, dtype=fnp.float32), device)
    keyed, call_keyed = [], type(f)._call_keyed

    def counted(self, *args):
        keyed.append(self is f)
        return call_keyed(self, *args)
    monkeypatch.setattr(type(f), "_call_keyed", counted)
    traced, lowered = _counting_trace(monkeypatch, f), count_lowerings(monkeypatch, device)
    for i in range(3):
        fresh = fa.device_put(np.full(3, i, np.float32), device)
        out = f(fresh, a)
        assert fresh.is_deleted() and not a.is_deleted()
        np.testing.assert_array_equal(np.asarray(out), np.full(3, i + 1.0, np.float32))
    assert (keyed, len(traced), len(lowered)) == ([True], 1, 1), (keyed, traced, lowered)
    assert _hot(f).donated == (0,)
    s = fa.device_put(fnp.zeros(3, dtype=fnp.float32), device)
    for _ in range(2):
        s = f(s, a)
    looked_up = _counting_trace(monkeypatch, f)
    for _ in range(5):
        old, s = s, f(s, a)
        assert old.is_deleted() and not a.is_deleted()
    assert looked_up == [] and _hot(f).donated == (0,)
    np.testing.assert_array_equal(np.asarray(s), np.full(3, 7.0, np.float32))
    with pytest.raises(RuntimeError, match="donated"):
        f(old, a)


def test_a_fixed_device_takes_the_hot_path(monkeypatch):
    g = fa.jit(lambda a, b: a * b, device="numpy:0")
    x = fnp.arange(3, dtype=fnp.float32)
    for _ in range(2):
        g(x, x)
    looked_up = _counting_trace(monkeypatch, g)
    for _ in range(3):
        y = g(x, x)
    assert looked_up == [] and y.committed
    np.testing.assert_array_equal(np.asarray(y), np.arange(3, dtype=np.float32) ** 2)


class _Affine(fa.nn.Module):
    w: object
    b: object
    scale: float = 1.0

    def __call__(self, x):
        return (x @ self.w + self.b) * self.scale


class _Listed(fa.nn.Module):
    parts: object   # a list of arrays: a mutable container, never kept by the hot path


def test_a_module_argument_keeps_its_leaves_and_stays_right(device, monkeypatch):
    """The same module object passed again is read from the leaves it keeps; another module, one with another
    static field, one holding a list that changes in place, and a module whose array was donated are all right."""
    rng = np.random.default_rng(0)
    wn, bn = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    put = functools.partial(fa.device_put, device=device)
    m = _Affine(put(wn), put(bn))
    x = put(np.ones((4, 3), np.float32))
    f = fa.jit(lambda m, x: m(x))
    want = np.ones((4, 3), np.float32) @ wn + bn
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(m, x)), want, rtol=1e-6)
    looked_up = _counting_trace(monkeypatch, f)
    for _ in range(3):
        f(m, x)
    assert looked_up == []
    m2 = m.replace(b=put(bn + 1))
    np.testing.assert_allclose(np.asarray(f(m2, x)), want + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(f(m.replace(scale=2.0), x)), want * 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(f(m, x)), want, rtol=1e-6)
    g = fa.jit(lambda m: sum(m.parts))
    parts = [put(np.ones(2, np.float32)), put(np.ones(2, np.float32))]
    lm = _Listed(parts)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(g(lm)), [2.0, 2.0])
    parts[0] = put(np.full(2, 5.0, np.float32))  # changed in place: read again on every call
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(g(lm)), [6.0, 6.0])
    fa.jit(lambda a: a * 2.0, donate_argnums=0)(m.w)
    with pytest.raises(RuntimeError, match="donated"):
        f(m, x)


def test_hot_path_with_statics_and_modules_is_thread_safe(device):
    put = functools.partial(fa.device_put, device=device)
    models = [_Affine(put(np.full((2, 2), k, np.float32)), put(np.full(2, k, np.float32))) for k in range(4)]
    f = fa.jit(lambda m, x, *, add: m(x) + add, static_argnames="add")

    def work(k):
        for i in range(150):
            n = 1 + (i + k) % 3              # three shapes and two static values, alternating between threads
            add = float((i + k) % 2)
            j = (i + k) % 4
            m = models[j]
            x = put(np.full((n, 2), k, np.float32))
            want = np.full((n, 2), k * j * 2 + j + add, np.float32)   # x @ w + b + add, w and b filled with j
            np.testing.assert_array_equal(np.asarray(f(m, x, add=add)), want)

    run_threads(work)


def test_a_hot_call_with_a_static_keyword_takes_few_python_calls():
    f = fa.jit(lambda a, b, *, k: a * b + k, static_argnames="k")
    x = fnp.arange(4, dtype=fnp.float32)
    f(x, x, k=1)
    f(x, x, k=1)
    calls = python_calls(lambda: f(x, x, k=1))
    assert len(calls) <= 6, calls  # the lambda, __call__, _call_hot, _hot_dynamic_args, the program, _hot_outputs


@pytest.mark.filterwarnings("ignore:.*cannot run on webgpu")   # float64 falls back to numpy:0 there
def test_hot_path_with_a_static_keyword_follows_the_x64_switch(device):
    f = fa.jit(lambda a, *, k: a + np.float64(k), static_argnames="k")
    x = fa.device_put(fnp.asarray(np.arange(3, dtype=np.float32)), device)
    for _ in range(3):
        assert f(x, k=1).dtype == np.float32  # the float64 constant is float32 with x64 off
    old = fa.config.enable_x64
    fa.config.enable_x64 = True
    try:
        for _ in range(3):
            y = f(x, k=1)
            assert y.dtype == np.float64
    finally:
        fa.config.enable_x64 = old
    assert f(x, k=1).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(y), [1.0, 2.0, 3.0])


class _Odd:
    """A static value whose equality raises: the hot path must leave it to the general path's key."""

    def __hash__(self):
        return 7

    def __eq__(self, other):
        if other is not self:
            raise RuntimeError("no comparison")
        return True


def test_hot_path_static_values_that_do_not_compare():
    f = fa.jit(lambda a, o: a * 2.0, static_argnums=1)
    x = fnp.arange(3, dtype=fnp.float32)
    o = _Odd()
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, o)), [0.0, 2.0, 4.0])
    with pytest.raises(RuntimeError, match="no comparison"):
        f(x, _Odd())  # the key's own comparison raises, as in JAX
