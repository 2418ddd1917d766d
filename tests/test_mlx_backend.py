"""The mlx backend's own guarantees: devices, transfers, fallback, laziness, host-driven control flow,
``mx.compile`` policy, transforms and random bits against the numpy backend.

The parity tier (``test_parity.py``) runs every primitive on ``mlx:*`` as well; these tests cover
what is particular to MLX. References are the numpy backend (fnarray's semantics), NumPy in float64,
or Python loops.
"""

import math
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.devices.placement import parse_device
from helpers import require_backend

REF = "numpy:0"


@pytest.fixture(scope="module")
def mdev():
    return require_backend("mlx")[0]


@pytest.fixture(scope="module")
def mx():
    require_backend("mlx")
    import mlx.core
    return mlx.core


@pytest.fixture
def fallback_mode():
    before = fa.config.fallback
    yield
    fa.config.fallback = before


def _put(x, dev):
    return fa.device_put(fnp.asarray(x), dev)


def _both(f, *args, dev, **kw):
    """``jit(f)`` on ``dev`` and on the numpy backend, after verifying the traced program."""
    fa.check_program(fa.make_ir(f)(*[fnp.asarray(a) for a in args]))
    got = fa.jit(f, device=dev, **kw)(*[_put(a, dev) for a in args])
    want = fa.jit(f, device=REF, **kw)(*[fnp.asarray(a) for a in args])
    return got, want


def _close(got, want, rtol=2e-5, atol=1e-6):
    import optree
    g_leaves, w_leaves = optree.tree_leaves(got), optree.tree_leaves(want)
    assert len(g_leaves) == len(w_leaves)
    for g, w in zip(g_leaves, w_leaves):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------------ devices


def test_devices_and_platforms(mdev, mx):
    devs = fa.devices("mlx")
    platforms = [d.platform for d in devs]
    assert platforms.count("cpu") == 1
    assert set(platforms) <= {"cpu", "gpu"}
    if mx.is_available(mx.gpu):
        assert platforms[0] == "gpu"  # the accelerator first, as JAX orders devices
    for i, d in enumerate(devs):
        assert str(d) == f"mlx:{i}" and mx.__version__ in d.description
    assert fa.devices(all_backends=True)[0].backend == "numpy"  # the embedded default stays first
    from fnarray.devices.placement import parse_device
    assert parse_device("mlx:cpu") == devs[platforms.index("cpu")]
    assert parse_device("mlx") == devs[0]


@pytest.mark.enable_x64
def test_host_transfers_share_memory_and_inputs_are_copied(mdev, mx):
    from fnarray.lowering.mlx.common import to_numpy
    src = np.arange(6, dtype=np.float32)
    x = _put(src, mdev)
    src[0] = 100.0  # a later write to the caller's array is not seen
    assert float(x[0]) == 0.0
    buf = x.buf()
    assert isinstance(buf, mx.array)
    a, b = to_numpy(buf), to_numpy(buf)
    assert np.shares_memory(a, b)  # a view of MLX's buffer, not a copy per read
    v = np.asarray(x)
    assert not v.flags.writeable
    for d in (np.float16, dtypes.bfloat16, np.int8, np.uint64, np.bool_, np.complex64, np.float64):
        vals = (np.arange(5) % 2 == 1) if d is np.bool_ else np.arange(5).astype(d)
        y = _put(vals, mdev)
        assert y.dtype == np.dtype(d) and y.device == mdev
        np.testing.assert_array_equal(np.asarray(y), vals)


# ------------------------------------------------------------------------------------ fallback


@pytest.mark.enable_x64
def test_float64_exact_ops_stay_on_mlx_cpu(mdev):
    cpu = parse_device("mlx:cpu")
    x = np.linspace(0.1, 2.0, 7)  # float64 stays float64
    with warnings.catch_warnings():
        warnings.simplefilter("error", fa.FallbackWarning)
        got, want = _both(lambda a: fnp.sqrt(a) * a / 3.0 + fnp.arctan(a), x, dev=cpu)
    assert got.dtype == np.float64 and got.device == cpu
    np.testing.assert_allclose(np.asarray(got), np.sqrt(x) * x / 3.0 + np.arctan(x), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-14)


@pytest.mark.enable_x64
def test_unsupported_dtype_falls_back_with_a_warning(mdev, fallback_mode):
    fa.config.fallback = "warn"
    from fnarray.devices import partition
    partition._warned.clear()
    x = np.array([0.5, 1.5, -2.0], np.complex128)  # MLX has no complex128
    with pytest.warns(fa.FallbackWarning, match="complex128.*mlx|mlx.*complex128"):
        got, want = _both(lambda a: a * a + 1.0, x, dev=mdev)
    assert got.device == mdev and got.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(got), x * x + 1.0, rtol=1e-15)
    # float64 exp on the CPU is float32-accurate in MLX: it falls back and stays exact.
    y = np.linspace(-1, 1, 5)
    with pytest.warns(fa.FallbackWarning, match="exp"):
        g = fa.jit(lambda a: fnp.exp(a) * 2.0, device=mdev)(_put(y, mdev))
    np.testing.assert_allclose(np.asarray(g), np.exp(y) * 2.0, rtol=1e-15)


@pytest.mark.enable_x64
def test_fallback_error_mode_raises(mdev, fallback_mode):
    fa.config.fallback = "error"
    x = _put(np.array([1.0, 2.0], np.complex128), mdev)
    with pytest.raises(fa.UnsupportedOnDevice, match="complex128"):
        fa.jit(lambda a: a * 3.0 - 1.0, device=mdev)(x)
    fa.config.fallback = "warn"
    with pytest.warns(fa.FallbackWarning):
        r = fa.jit(lambda a: a * 3.0 - 2.0, device=mdev)(x)
    np.testing.assert_allclose(np.asarray(r), [1.0, 4.0])


@pytest.mark.enable_x64
def test_fallback_inside_a_loop_moves_the_loop(mdev, fallback_mode):
    fa.config.fallback = "silent"

    def f(a):
        return fa.fori_loop(0, 3, lambda i, v: fnp.exp(v) * 0.5, a)
    x = np.array([0.1, 0.2], np.float64)
    got, want = _both(f, x, dev=mdev)
    assert got.device == mdev
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-15)


# ------------------------------------------------------------------------------------ laziness


def test_jitted_call_is_lazy_until_needed(mdev, mx):
    n = 1 << 22  # 16 MiB of float32 output

    @fa.jit
    def f(a):
        return fnp.tanh(a * 1.5 + 0.25) * a

    x = fa.device_put(fnp.ones(n, dtype=fnp.float32) * 0.5, mdev).block_until_ready()
    f(x).block_until_ready()  # warm: trace and lower
    mx.synchronize()
    before = mx.get_active_memory()
    y = f(x)
    assert isinstance(y.buf(), mx.array)
    assert mx.get_active_memory() - before < n  # nothing computed: no 16 MiB output yet
    y.block_until_ready()
    assert mx.get_active_memory() - before >= 4 * n  # now it is
    np.testing.assert_allclose(np.asarray(y[:3]), np.tanh(0.5 * 1.5 + 0.25) * 0.5, rtol=1e-6)


def test_eager_ops_are_lazy_and_scalars_force(mdev, mx):
    n = 1 << 22
    x = fa.device_put(fnp.ones(n, dtype=fnp.float32), mdev).block_until_ready()
    mx.synchronize()
    before = mx.get_active_memory()
    y = fnp.exp(x) + 1.0
    assert mx.get_active_memory() - before < n
    assert math.isclose(float(y[7]), math.e + 1.0, rel_tol=1e-6)  # a Python scalar forces evaluation


# ------------------------------------------------------------------------------------ host control flow


class _Readbacks:
    """Counts ``to_host`` calls of the mlx backend."""

    def __init__(self, monkeypatch, dev):
        impl = dev.impl
        self.n = 0
        orig = impl.to_host

        def counting(buf):
            self.n += 1
            return orig(buf)
        monkeypatch.setattr(impl, "to_host", counting)


def test_while_reads_back_one_predicate_per_iteration(mdev, monkeypatch):
    def f(x):
        return fa.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, c[1] * 1.5 + fnp.sin(c[1])), (0, x))

    x = np.linspace(-1, 1, 4).astype(np.float32)
    prog = fa.make_ir(f)(fnp.asarray(x))
    fa.check_program(prog)
    jf = fa.jit(f, device=mdev)
    xm = _put(x, mdev)
    jf(xm)  # compile first
    rb = _Readbacks(monkeypatch, mdev)
    k, v = jf(xm)
    assert rb.n == 8  # 7 true predicates and the final false one
    monkeypatch.undo()
    want = x.astype(np.float64)
    for _ in range(7):
        want = want * 1.5 + np.sin(want)
    assert int(k) == 7
    np.testing.assert_allclose(np.asarray(v), want, rtol=1e-5)


def test_scan_reads_nothing_back_and_matches(mdev, monkeypatch):
    def f(c0, xs):
        def step(c, x):
            c = c * 0.9 + x
            return c, (c * 2.0, fnp.sum(x))
        return fa.scan(step, c0, xs)

    rng = np.random.default_rng(0)
    c0 = rng.standard_normal(3).astype(np.float32)
    xs = rng.standard_normal((150, 3)).astype(np.float32)  # more than one stacking group
    jf = fa.jit(f, device=mdev)
    args = (_put(c0, mdev), _put(xs, mdev))
    jf(*args)
    rb = _Readbacks(monkeypatch, mdev)
    c, (ys, sums) = jf(*args)
    assert rb.n == 0
    monkeypatch.undo()
    want_c, want_ys = c0.astype(np.float64), []
    for x in xs:
        want_c = want_c * 0.9 + x
        want_ys.append(want_c * 2.0)
    np.testing.assert_allclose(np.asarray(c), want_c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), np.stack(want_ys), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sums), xs.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    got, want = _both(lambda c, x: fa.scan(lambda a, b: (a + b, a * b), c, x, reverse=True), c0, xs[:5], dev=mdev)
    _close(got, want)


def test_scan_of_length_zero_and_nested_loops(mdev):
    def empty(c):
        return fa.scan(lambda a, _: (a + 1.0, a * 2.0), c, None, length=0)
    got, want = _both(empty, np.ones(3, np.float32), dev=mdev)
    assert np.asarray(got[1]).shape == (0, 3)
    _close(got, want)

    def nested(x):
        def outer(i, v):
            inner = fa.while_loop(lambda c: c[0] < i, lambda c: (c[0] + 1, c[1] + fnp.cos(c[1])), (0, v))
            return fa.cond(i % 2 == 0, lambda u: u * 0.5, lambda u: u - 0.25, inner[1])
        return fa.fori_loop(0, 5, outer, x)
    got, want = _both(nested, np.linspace(0, 1, 4).astype(np.float32), dev=mdev)
    _close(got, want)


def test_cond_runs_one_branch(mdev, monkeypatch):
    def f(i, x):
        return fa.switch(i, [lambda v: v * 2.0, lambda v: fnp.sin(v), lambda v: v - 1.0], x)
    x = np.linspace(-1, 1, 5).astype(np.float32)
    for i in (-3, 0, 1, 2, 9):  # the index is clamped
        got, want = _both(f, np.int32(i), x, dev=mdev)
        _close(got, want)
    from fnarray.devices import host_control
    calls = []
    orig = host_control._Cond.__call__

    def spy(self, bufs):
        calls.append(len(self.branches))
        return orig(self, bufs)
    monkeypatch.setattr(host_control._Cond, "__call__", spy)
    fa.jit(f, device=mdev)(_put(np.int32(1), mdev), _put(x, mdev))
    assert calls == [3]


def test_scan_step_program_verifies():
    from fnarray.core.builder import trace_to_program
    from fnarray.core.passes import consts_as_inputs
    from fnarray.core.shaped import ShapedArray
    from fnarray.devices.host_control import _stack_program, _step_program
    f32 = ShapedArray((), dtypes.float32)
    row = ShapedArray((3,), dtypes.float32)
    prog, _ = trace_to_program(lambda c, x: [fa.lax.add(c, fa.lax.reduce_sum(x, axes=(0,))), x], [f32, row])
    step = _step_program(consts_as_inputs(prog), [f32, ShapedArray((4, 3), dtypes.float32)], 1)
    fa.check_program(step)
    fa.check_program(_stack_program("stack", row, 5))
    fa.check_program(_stack_program("concat", row, (2, 3)))


# ------------------------------------------------------------------------------------ transforms


def test_transform_compositions(mdev):
    def f(w, x):
        return fnp.sum(fnp.tanh(x @ w) ** 2)

    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    xs = rng.standard_normal((5, 4, 3)).astype(np.float32)
    got, want = _both(fa.vmap(fa.grad(f), in_axes=(None, 0)), w, xs, dev=mdev)
    assert got.device == mdev
    _close(got, want, rtol=1e-5)
    h = fa.hessian(lambda v: fnp.sum(fnp.sin(v) * v))
    got, want = _both(h, w[:, 0], dev=mdev)
    _close(got, want, rtol=1e-5)

    def scanned(v):
        c, ys = fa.scan(lambda c, x: (c * fnp.cos(x) + x, c * x), v[0], v)
        return c + fnp.sum(ys ** 2)
    got, want = _both(fa.grad(scanned), xs[0, 0], dev=mdev)
    _close(got, want, rtol=1e-5)

    def loop(c):
        return fa.fori_loop(0, 4, lambda i, v: v * 1.5 + fnp.sin(v), c)
    got, want = _both(fa.grad(lambda v: fnp.sum(loop(v))), w[:, 0], dev=mdev)
    _close(got, want, rtol=1e-5)

    def wl(x, n):
        return fa.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0), (0, x))[1]
    got, want = _both(wl, xs[0], np.int32(6), dev=mdev)
    _close(got, want)
    got, want = _both(fa.vmap(wl, in_axes=(0, 0)), xs[:, 0], np.arange(5, dtype=np.int32), dev=mdev)
    _close(got, want)

    def cnd(p, x):
        return fa.cond(p > 0, lambda v: fnp.exp(v), lambda v: v * v, x)
    for p in (1.0, -1.0):
        got, want = _both(fa.grad(lambda x: fnp.sum(cnd(np.float32(p), x))), xs[0, 0], dev=mdev)
        _close(got, want)
    got, want = _both(fa.vmap(cnd), np.array([1, -1, 2, -2, 0], np.float32), xs[:, 0, 0], dev=mdev)
    _close(got, want)


def test_random_bits_equal_numpy_backend(mdev):
    k = fa.random.key(42)
    a = fa.jit(lambda k: fa.random.bits(k, (1000,)), device=mdev)(k)
    b = fa.jit(lambda k: fa.random.bits(k, (1000,)), device=REF)(k)
    assert a.device == mdev and a.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    km = fa.device_put(k, mdev)
    np.testing.assert_array_equal(np.asarray(fa.random.bits(km, (64,))), np.asarray(fa.random.bits(k, (64,))))
    k1, k2 = fa.random.split(km)
    np.testing.assert_array_equal(np.asarray(fa.random.uniform(k2, (100,))),
                                  np.asarray(fa.random.uniform(fa.random.split(k)[1], (100,))))
    np.testing.assert_array_equal(np.asarray(fa.random.randint(k1, (50,), -5, 9)),
                                  np.asarray(fa.random.randint(fa.random.split(k)[0], (50,), -5, 9)))


# ------------------------------------------------------------------------------------ mx.compile policy


@pytest.mark.parametrize("mode", ["always", "never"])
def test_compile_modes_agree(mdev, mode, monkeypatch):
    from fnarray.lowering.mlx import backend as mlx_lowering
    monkeypatch.setattr(mlx_lowering, "COMPILE_MODE", mode)

    def f(x, idx, upd):
        y = x.at[idx].set(upd)             # scatter
        z = y.at[idx].add(1.0)              # scatter_add with out-of-bounds dropped
        s = fnp.sort(z, axis=1)
        return fnp.cumsum(s, axis=0)[::-1] + fnp.take(x, idx, axis=0).sum() - (x // 0.7)

    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([0, 5, -1, 3], np.int32)
    upd = rng.standard_normal((4, 4)).astype(np.float32)
    got, want = _both(f, x, idx, upd, dev=mdev)
    _close(got, want, rtol=1e-5, atol=1e-5)
    exe = fa.jit(f, device=mdev).lower(*[_put(v, mdev) for v in (x, idx, upd)]).compile().entry.exe
    exe = getattr(exe, "__wrapped__", exe)  # partition's out-of-memory translating wrapper
    if mode == "always":
        exe([_put(v, mdev).buf() for v in (x, idx, upd)])
        assert exe.fn is not exe.raw  # MLX compiled it (no silent eager fallback)
    else:
        assert not isinstance(exe, mlx_lowering._WarmCompile)


def test_long_programs_run_interpreted_until_compiled(mdev, monkeypatch):
    """A program of ``INTERPRET_FROM`` equations or more runs its rules' functions in a loop until ``mx.compile``
    takes it: its Python source is never compiled; results as numpy's (a two-result ``threefry2x32``, literals
    shared between equations, an output that is an input)."""
    from fnarray.lowering.common import code_of
    from fnarray.lowering.mlx import backend as mlx_lowering
    from fnarray.lowering.mlx import program
    monkeypatch.setattr(mlx_lowering, "INTERPRET_FROM", 1)
    monkeypatch.setattr(mlx_lowering, "CPU_COMPILE_AFTER_CALLS", 1000)
    sources = []
    monkeypatch.setattr(program, "code_of", lambda *a: sources.append(a) or code_of(*a))

    def f(key, x):
        return fa.random.uniform(key, x.shape) * 2.0 + x * 2.0, (x > 0.5).sum(), x

    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    for _ in range(2):
        got, want = _both(f, fa.random.key_data(fa.random.key(3)), x, dev=mdev)
        _close(got, want)
    assert sources == []


@pytest.mark.enable_x64  # (population_count of int64)
def test_composed_functions_at_special_values(mdev):
    special = np.array([0.0, -0.0, 1.0, 2.0, -1.0, -2.5, 0.5, 1e-30, -1e-30, 1e30, 3e38, np.inf, -np.inf, np.nan],
                       np.float32)
    for prim in (P.lgamma, P.digamma, P.cbrt, P.sign, P.exp2, P.logistic, P.round_p):
        got = prim.bind(_put(special, mdev))
        want = prim.bind(fnp.asarray(special))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-6, equal_nan=True,
                                   err_msg=prim.name)
    for prim in (P.nextafter, P.rem, P.max_p, P.min_p, P.atan2):
        got = prim.bind(_put(special, mdev), _put(special[::-1].copy(), mdev))
        want = prim.bind(fnp.asarray(special), fnp.asarray(special[::-1].copy()))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=0, equal_nan=True,
                                   err_msg=prim.name)
    bits = np.array([0, 1, 0xFF, 0x80000000, 0xFFFFFFFF, 0x12345678], np.uint32)
    for d in (np.uint32, np.int32, np.int8, np.uint16, np.int64):
        x = bits.astype(d)
        np.testing.assert_array_equal(np.asarray(P.population_count.bind(_put(x, mdev))),
                                      [bin(int(v) & ((1 << (8 * x.itemsize)) - 1)).count("1") for v in x])


def test_warm_compile_switches_after_calls(mdev, monkeypatch):
    from fnarray.lowering.mlx import backend as mlx_lowering
    monkeypatch.setattr(mlx_lowering, "COMPILE_MODE", "auto")
    monkeypatch.setattr(mlx_lowering, "CPU_COMPILE_AFTER_CALLS", 3)
    cpu = parse_device("mlx:cpu")
    f = fa.jit(lambda a, b: fnp.tanh(a * b + 0.5) - b, device=cpu)
    a, b = _put(np.linspace(0, 1, 8, dtype=np.float32), cpu), _put(np.ones(8, np.float32), cpu)
    exe = f.lower(a, b).compile().entry.exe.__wrapped__  # under partition's out-of-memory translation
    assert isinstance(exe, mlx_lowering._WarmCompile)
    want = np.tanh(np.linspace(0, 1, 8) + 0.5) - 1.0
    for _ in range(5):
        np.testing.assert_allclose(np.asarray(exe([a.buf(), b.buf()])[0]), want, rtol=1e-6)
    assert exe.fn is not exe.raw  # now compiled
    # Large programs are compiled too (memory-bound chains gain from fusion: benchmarks/mlx_compile.py), unless
    # CPU_COMPILE_MAX_ELEMENTS bounds them.
    big = _put(np.ones(20000, np.float32), cpu)
    exe_big = fa.jit(lambda a: a * 2.0 + 1.0, device=cpu).lower(big).compile().entry.exe.__wrapped__
    assert isinstance(exe_big, mlx_lowering._WarmCompile)
    for _ in range(4):
        np.testing.assert_array_equal(np.asarray(exe_big([big.buf()])[0]), np.full(20000, 3.0, np.float32))
    assert exe_big.fn is not exe_big.raw
    monkeypatch.setattr(mlx_lowering, "CPU_COMPILE_MAX_ELEMENTS", 16384)
    exe_big = fa.jit(lambda a: a * 3.0 + 1.0, device=cpu).lower(big).compile().entry.exe.__wrapped__
    assert not isinstance(exe_big, mlx_lowering._WarmCompile)  # over the bound: eager


def test_as_text_is_the_generated_source(mdev):
    low = fa.jit(lambda a: fnp.sin(a) * 2.0).lower(_put(np.ones(3, np.float32), mdev))
    text = low.as_text()
    assert "def program(" in text and "sin" in text and "mul" in text


# ------------------------------------------------------------------------------------ semantics


def test_integer_edge_cases_do_not_trap(mdev):
    imin = np.iinfo(np.int32).min
    x = np.array([imin, imin, 7, -7, 5], np.int32)
    y = np.array([-1, 0, -1, 2, 0], np.int32)
    for prim in (P.div, P.rem):
        got = prim.bind(_put(x, mdev), _put(y, mdev))
        want = prim.bind(fnp.asarray(x), fnp.asarray(y))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # C semantics: truncation toward zero, remainder with the dividend's sign, by zero -> 0
    np.testing.assert_array_equal(np.asarray(P.div.bind(_put(x[2:], mdev), _put(y[2:], mdev))), [-7, -3, 0])
    np.testing.assert_array_equal(np.asarray(P.rem.bind(_put(x[2:], mdev), _put(y[2:], mdev))), [0, -1, 0])


@pytest.mark.enable_x64
def test_saturating_casts_and_wide_types(mdev):
    v = np.array([np.nan, np.inf, -np.inf, 3e19, -3e19, 2.0**63, -2.0**63, 1.9, -1.9, 255.5, 2.0**31], np.float64)

    def saturate(x, d):  # Python reference: truncate, clamp into the type's range, NaN -> 0
        info = np.iinfo(d)
        if math.isnan(x):
            return 0
        if math.isinf(x):
            return info.max if x > 0 else info.min
        return min(max(math.trunc(x), info.min), info.max)

    for d in (np.int64, np.uint64, np.int32, np.uint32, np.int8, np.uint8):
        got = fa.jit(lambda a: a.astype(d), device=mdev)(_put(v, mdev))
        want = np.array([saturate(x, d) for x in v.tolist()], dtype=object).astype(d)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=str(np.dtype(d)))


def test_multi_key_sort_is_lexicographic_and_stable(mdev):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 3000).astype(np.int32)
    b = np.where(rng.random(3000) < 0.1, np.nan, rng.integers(-2, 2, 3000)).astype(np.float32)
    c = np.arange(3000, dtype=np.int32)
    out = P.sort.bind(_put(a, mdev), _put(b, mdev), _put(c, mdev), dimension=0, is_stable=True, num_keys=2)
    order = sorted(range(3000), key=lambda i: (a[i], (1, 0.0) if np.isnan(b[i]) else (0, float(b[i])), i))
    np.testing.assert_array_equal(np.asarray(out[2]), c[order])


def test_integer_matmul_is_exact(mdev):
    rng = np.random.default_rng(4)
    a = rng.integers(-1000, 1000, (17, 300)).astype(np.int32)
    b = rng.integers(-1000, 1000, (300, 9)).astype(np.int32)
    got = fa.jit(lambda x, y: x @ y, device=mdev)(_put(a, mdev), _put(b, mdev))
    np.testing.assert_array_equal(np.asarray(got), a.astype(np.int64) @ b.astype(np.int64))


def test_donation_on_mlx(mdev):
    f = fa.jit(lambda p, g: p - 0.1 * g, donate_argnums=0, device=mdev)
    p = _put(np.ones(1024, np.float32), mdev)
    out = f(p, _put(np.ones(1024, np.float32), mdev))
    np.testing.assert_allclose(np.asarray(out), 0.9, rtol=1e-6)
    assert p.is_deleted()


def test_backend_unavailable_names_the_fix(monkeypatch):
    require_backend("mlx")
    from fnarray.lowering.mlx import backend as mlx_lowering
    monkeypatch.setattr(mlx_lowering, "mx", None)
    monkeypatch.setattr(mlx_lowering, "IMPORT_ERROR", "the mlx backend needs MLX: No module named 'mlx'")
    with pytest.raises(fa.BackendUnavailable, match="MLX"):
        mlx_lowering.make_backend()


def test_direct_entries_with_a_stream_check(mdev, monkeypatch):
    """jit's hot path and the eager cache call an mlx executable's ``call_args`` directly: the generated function
    itself where MLX has one device (mlx[cpu]), else a wrapper that picks the device's stream first. The second
    form, forced here (a machine with a GPU takes it for its CPU device), gives the same results."""
    from fnarray.lowering.mlx import backend as mlx_lowering
    monkeypatch.setattr(mlx_lowering, "_only_device", lambda handle: False)
    monkeypatch.setattr(mlx_lowering, "COMPILE_MODE", "never")  # (the stream wrapper of an uncompiled program)
    x = np.linspace(-2, 2, 13).astype(np.float32)  # a shape no other test's eager entries have
    f = fa.jit(lambda a: fnp.tanh(a) * 2.0 + a[::-1], device=mdev)
    exe = f.lower(_put(x, mdev)).compile().entry.exe
    assert exe.call_args is not getattr(exe, "__wrapped__", exe)
    want = np.tanh(x.astype(np.float64)) * 2 + x[::-1]
    for _ in range(3):  # the first call, then jit's hot path through call_args
        np.testing.assert_allclose(np.asarray(f(_put(x, mdev))), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(_put(x, mdev) * 3.0), x * 3.0, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(P.sort.bind(_put(x[::-1].copy(), mdev), dimension=0, is_stable=True,
                                                          num_keys=1)[0]), x, rtol=0)


def test_float32_scalars_round_as_numpy(mdev, mx):
    """``scalar_to_device`` makes float32 scalars with ``mx.array`` itself: each value's bits equal NumPy's
    float32 rounding (ties, subnormals, overflow to inf, signed zeros, NaN, the largest exact ints), and
    other dtypes and larger ints still go through NumPy (their dtypes and range checks)."""
    impl = mdev.impl
    f32 = np.dtype(np.float32)
    rng = np.random.default_rng(0)
    values = [0.1, -0.0, 0.0, 1e-40, -1e-45, 3.4028235677973366e+38, 3.4028236e+38, 1e39, -1e39,
              float("inf"), float("-inf"), 1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 16777217.0,
              2 ** 24, -(2 ** 24), 7, 0, -3] + list(rng.normal(0, 1e3, 50)) + list(rng.uniform(-1, 1, 50) * 1e-38)
    for v in values:
        got = np.asarray(impl.to_host(impl.scalar_to_device(v, f32, mdev)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy warns of the overflow to inf
            want = np.asarray(v, f32)
        assert got.dtype == np.float32 and got.shape == ()
        assert got.tobytes() == want.tobytes(), (v, got, want)
    nan = np.asarray(impl.to_host(impl.scalar_to_device(float("nan"), f32, mdev)))
    assert np.isnan(nan) and nan.dtype == np.float32
    big = np.asarray(impl.to_host(impl.scalar_to_device(2 ** 24 + 1, f32, mdev)))  # NumPy's path: its rounding
    assert big.tobytes() == np.asarray(2 ** 24 + 1, f32).tobytes()
    i32 = np.asarray(impl.to_host(impl.scalar_to_device(5, np.dtype(np.int32), mdev)))
    assert i32.dtype == np.int32 and int(i32) == 5
    # an eager product with a Python float under a transform takes this path: its value is NumPy's
    x = fa.device_put(np.linspace(-2, 2, 7).astype(np.float32), mdev)
    got = fa.jvp(lambda x: 0.1 * x, (x,), (fnp.ones_like(x),))
    assert np.array_equal(np.asarray(got[0]), np.float32(0.1) * np.linspace(-2, 2, 7).astype(np.float32))
    assert np.array_equal(np.asarray(got[1]), np.full(7, np.float32(0.1)))


def test_jacobians_make_their_arrays_on_the_arguments_device(mdev, monkeypatch):
    """``jacfwd``/``jacrev``/``hessian`` of arrays on mlx:0 while numpy:0 is the default make their basis and
    zeros on mlx:0: nothing is read back from numpy:0 (main copied ~10 buffers a Jacobian over), and the values
    equal central finite differences of the function in float64 NumPy; an argument-free zero block lands on
    mlx:0 too."""
    rng = np.random.default_rng(3)
    xn = rng.uniform(-1, 1, 5)
    mat = rng.normal(0, 0.5, (5, 5))
    x = fa.device_put(xn.astype(np.float32), mdev)
    m = fa.device_put(mat.astype(np.float32), mdev)

    def f(x):
        return fnp.tanh(m @ (0.7 * x)) * x + 1 / (1 + x * x)

    def f64(v):
        return np.tanh(mat @ (0.7 * v)) * v + 1 / (1 + v * v)

    def fd_jac(g, v, eps=1e-5):
        return np.stack([(g(v + eps * e) - g(v - eps * e)) / (2 * eps) for e in np.eye(len(v))], axis=-1)

    numpy_dev = parse_device("numpy:0")
    reads = []
    orig = numpy_dev.impl.to_host
    monkeypatch.setattr(numpy_dev.impl, "to_host", lambda b: reads.append(1) or orig(b))
    with fa.default_device(numpy_dev):
        jf, jr = fa.jacfwd(f)(x), fa.jacrev(f)(x)
        h = fa.hessian(lambda x: f(x).sum())(x)
        zero = fa.jacfwd(lambda x: fnp.ones(3))(x)
    assert reads == []
    want = fd_jac(f64, xn)
    for got in (jf, jr):
        assert got.device == mdev
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-5)
    want_h = fd_jac(lambda v: fd_jac(lambda u: np.atleast_1d(f64(u).sum()), v, 1e-4)[0], xn, 1e-4)
    np.testing.assert_allclose(np.asarray(h), want_h, rtol=2e-3, atol=2e-3)
    assert zero.device == mdev and np.array_equal(np.asarray(zero), np.zeros((3, 5), np.float32))


def test_eager_jacobians_through_mlx_transforms(mdev, mx, monkeypatch):
    """Eager ``jacfwd``/``jacrev``/``hessian`` on mlx:0 run through MLX's ``vmap``/``jvp``/``vjp`` where every
    primitive the function binds is one MLX differentiates as fnarray does (``lowering/mlx/jacobians.py``): the
    results equal numpy:0's (shape, dtype, weak type, committed flag, values), the function's Python runs once a
    call, and a Jacobian takes ~60-130 Python calls (fnarray's transforms: ~2,700 on main fbdeeb4; issue 28).
    ``stop_gradient``, a ``custom_jvp`` rule, ``maximum`` (ties) and a float -> int cast run as fnarray's transform,
    with its semantics. ``fa.block_until_ready`` of a tree of mlx arrays is one ``mx.eval``."""
    from fnarray.lowering.mlx import jacobians
    from helpers import python_calls
    rng = np.random.default_rng(4)
    xn, mat = rng.uniform(-1, 1, 5).astype(np.float32), rng.normal(0, 0.5, (5, 5)).astype(np.float32)
    runs = []

    @fa.custom_jvp
    def sin_rule(x):
        return fnp.sin(x)

    @sin_rule.defjvp
    def _(p, t):
        return sin_rule(p[0]), 2 * fnp.cos(p[0]) * t[0]   # (not sin's derivative: the rule must win)

    def native(m):
        def f(x):
            runs.append(1)
            return fnp.tanh(m @ (0.7 * x)) * x + 1 / (1 + x * x) + fnp.where(x > 0, x * x, -x).sum()
        return f

    def refused(m):
        return [lambda x: fa.lax.stop_gradient(x) * x, lambda x: sin_rule(x) * x,
                lambda x: fnp.maximum(x, x * 1.0) * 2.0, lambda x: x.astype(fnp.int32) + x * x]

    def sweep(dev):
        x, m = fa.device_put(xn, dev), fa.device_put(mat, dev)
        return [t(f)(x) for f in [native(m)] + refused(m) for t in
                (fa.jacfwd, fa.jacrev, lambda f: fa.hessian(lambda x, f=f: f(x).sum()))]
    before = dict(jacobians.stats)
    got, want = sweep(mdev), sweep(parse_device(REF))
    assert jacobians.stats["native"] - before["native"] == 3 and len(runs) == 6   # (3 on numpy:0)
    for g, w in zip(got, want, strict=True):
        assert g.aval == w.aval and g.device == mdev and g.committed == w.committed
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)
    x, m = fa.device_put(xn, mdev), fa.device_put(mat, mdev)
    for f, bounds in ((native(m), (300, 300, 320)), (lambda x: fnp.tanh(0.7 * x) * x, (60, 60, 75))):
        # Python calls a Jacobian (main fbdeeb4: 1,567 / 3,293 / 6,253 for the first, 461 / 911 / 2,084 for the
        # second: programs.py's jacobians' first form)
        ts = (fa.jacfwd(f), fa.jacrev(f), fa.hessian(lambda x, f=f: f(x).sum()))
        for t in ts:
            t(x)   # (jacrev's and hessian's first call, by forward mode, learns the output aval)
        calls = [len(python_calls(lambda: t(x))) for t in ts]
        assert all(c <= b for c, b in zip(calls, bounds, strict=True)), calls
    evals = []
    real = mx.eval
    monkeypatch.setattr(mx, "eval", lambda *a: evals.append(len(a)) or real(*a))
    fa.block_until_ready([fa.jacfwd(f)(x), {"h": fa.jacrev(f)(x)}, x * 2.0])
    assert evals == [3]


def test_staged_jacobians_replay_a_record_under_mlx_transforms(mdev):
    """With ``stage_eager_transforms`` on, a Jacobian on mlx:0 records its function's MLX operations once a key
    and avals and replays them under MLX's transforms (``jacobians.staged``; issue 28: the jitted program's trace,
    transforms and lowering made programs.py's staged sweep's first call 8.7x raw MLX): a later call runs none of
    the function's Python and reads its other argument's new value; results equal numpy:0's eager transform
    (aval, committed flag, values). ``stop_gradient`` is refused and runs as the staged (jitted) program."""
    from fnarray.lowering.mlx import jacobians
    from helpers import config_setting, python_calls
    rng = np.random.default_rng(5)
    xn, mat = rng.uniform(-1, 1, 4).astype(np.float32), rng.normal(0, 0.5, (4, 4)).astype(np.float32)

    def f(x, m):
        return fnp.tanh(m @ (0.7 * x)) * x + 1 / (1 + x * x)

    def sweep(dev, m):
        x, m = fa.device_put(xn, dev), fa.device_put(m, dev)
        return [fa.jacfwd(f)(x, m), fa.jacrev(f)(x, m), fa.hessian(lambda x, m: f(x, m).sum())(x, m),
                fa.jacrev(lambda x: fa.lax.stop_gradient(x) * x)(x)]
    want = sweep(parse_device(REF), mat) + sweep(parse_device(REF), 2 * mat)
    with config_setting("stage_eager_transforms", True):
        before = dict(jacobians.stats)
        got = sweep(mdev, mat) + sweep(mdev, 2 * mat)
        assert [jacobians.stats[k] - before[k] for k in ("taped", "replayed", "refused")] == [2, 6, 1]
        x, m = fa.device_put(xn, mdev), fa.device_put(mat, mdev)
        calls = python_calls(lambda: fa.jacrev(f)(x, m))
    assert "f" not in calls and len(calls) <= 55, calls   # (48: the transform's wrapper, fingerprint, replay)
    for g, w in zip(got, want, strict=True):
        assert g.aval == w.aval and g.device == mdev and g.committed == w.committed
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)
