"""Devices, placement (JAX's committed/uncommitted rules), partitioning and fallback.

Fallback is tested with ``testdev``, a test-only backend registered through
``fnarray.register_backend``: the numpy backend with its own buffer type (so a
missing transfer fails loudly), declaring ``sin`` and float64 unsupported, and
refusing to compile any program that still holds them.
"""

from __future__ import annotations

import textwrap
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import lax
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.passes import walk_eqns
from fnarray.core.shaped import ShapedArray
from fnarray.devices import partition
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered, backend_names, unregister_backend
from fnarray.devices.placement import parse_device
from fnarray.lowering.numpy.backend import NumpyBackend, NumpyLowered, compile_numpy
from helpers import ALL_DTYPES, BACKEND_UNAVAILABLE, assert_close, check_traced, require_backend

pytest_plugins = ["pytester"]

F32, F64, I32 = np.dtype("float32"), np.dtype("float64"), np.dtype("int32")


# ----------------------------------------------------------------------------- the test-only backend


class _Buf:
    """testdev's buffer: wraps a NumPy array so that nothing else can use it by accident."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _unwrap(b):
    if not isinstance(b, _Buf):
        raise TypeError(f"testdev was handed a buffer of another device ({type(b).__name__}): a transfer is missing")
    return b.value


class _TestDevLowered(Lowered):
    def __init__(self, backend, program, device):
        super().__init__(program, device)
        self.backend = backend

    def as_text(self):
        return "# testdev program\n" + NumpyLowered(self.program, self.device).as_text()

    def compile(self):
        for e in walk_eqns(self.program):
            reason = self.backend.supports(e, self.device)
            if reason is not None:
                raise AssertionError(f"testdev was asked to compile {e.primitive.name}, which it declared "
                                     f"unsupported ({reason}): the partitioner should have moved it")
        run = compile_numpy(self.program)
        self.backend.programs.append([e.primitive.name for e in self.program.eqns])

        def exe(bufs):
            return [_Buf(np.asarray(o)) for o in run([_unwrap(b) for b in bufs])]
        return exe


class _TestDevBackend(NumpyBackend):
    name = "testdev"

    def __init__(self):
        super().__init__()
        self._devices = [Device("testdev", 0, "cpu", "test device 0"), Device("testdev", 1, "gpu", "test device 1")]
        self.programs = []  # the primitives of every program compiled for testdev, in order

    def capabilities(self, device):
        return Capabilities(dtypes=frozenset(d for d in ALL_DTYPES if d != F64))

    def supports(self, eqn, device):
        if eqn.primitive is P.sin:
            return "testdev has no sin"
        return Backend.supports(self, eqn, device)  # the dtype check against capabilities()

    def lower(self, program, device, donate=()):
        return _TestDevLowered(self, program, device)

    def eager_fast(self, primitive, params, in_avals, device):
        run = super().eager_fast(primitive, params, in_avals, device)
        return lambda bufs: [_Buf(np.asarray(o)) for o in run([_unwrap(b) for b in bufs])]

    def to_device(self, array, device):
        return _Buf(super().to_device(array, device))

    def to_host(self, buf):
        return super().to_host(_unwrap(buf))


@pytest.fixture
def testdev():
    """Registers ``testdev`` (devices ``testdev:0`` cpu and ``testdev:1`` gpu) for one test."""
    backend = _TestDevBackend()
    fa.register_backend("testdev", lambda: backend)
    partition._warned.clear()
    mode = fa.config.fallback
    try:
        yield backend
    finally:
        fa.config.fallback = mode
        unregister_backend("testdev")
        partition._warned.clear()


def _fallback_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, fa.FallbackWarning)]


# ----------------------------------------------------------------------------- listing and parsing


def test_devices_lists_usable_devices():
    devs = fa.devices(all_backends=True)
    assert devs and devs[0] == Device("numpy", 0, "cpu")
    assert str(devs[0]) == "numpy:0" and devs[0].platform == "cpu" and devs[0].reason is None
    assert all(d.reason is None for d in devs)
    assert fa.devices("numpy") == [devs[0]]
    assert fa.default_device() in devs


def test_devices_without_argument_lists_the_default_backend_as_jax():
    """``fa.devices()`` is ``jax.devices()``: the default backend's devices only, so a mesh over
    ``fa.devices()[:n]`` holds one backend; ``all_backends=True`` lists every backend's."""
    default = fa.default_device()
    assert fa.devices() == fa.devices(default.backend) and default in fa.devices()
    assert {d.backend for d in fa.devices()} == {default.backend}
    every = fa.devices(all_backends=True)
    assert set(fa.devices()) <= set(every)
    assert [d.backend for d in every] == sorted((d.backend for d in every),
                                                key=[d.backend for d in every].index)  # grouped by backend


def test_default_device_as_a_context_manager(device):
    """``with fa.default_device(d):`` as ``with jax.default_device(d):``: creation functions, ``device_put`` and a
    ``jit`` call without array arguments run on ``d`` inside, values as NumPy's; a device string works too;
    blocks nest; the default before is back after the block, after an exception too."""
    before = fa.default_device()
    f = fa.jit(lambda: fnp.arange(4, dtype=fnp.float32) * 2)
    with fa.default_device(device) as entered:
        assert entered is device and fa.default_device() is device
        assert fnp.zeros(3).device == device and fa.device_put(np.ones(2)).device == device
        got = f()
        assert got.device == device and not got.committed
        np.testing.assert_array_equal(np.asarray(got), np.arange(4) * 2.0)
        with fa.default_device("numpy:0"):
            assert fa.default_device() == fa.get_device("numpy") and f().device == fa.get_device("numpy")
        assert fa.default_device() is device and f().device == device
    assert fa.default_device() is before and f().device == before
    with fa.default_device(str(device)):   # "opencl:0", as get_device takes it
        assert fa.default_device() == device
    with pytest.raises(KeyError):
        with fa.default_device(device):
            raise KeyError("inside")
    assert fa.default_device() is before
    fa.default_device(device)   # without `with`: nothing changes, as in JAX
    assert fa.default_device() is before

    @fa.default_device(device)
    def made():
        return fnp.ones(2).device
    assert made() == device and fa.default_device() is before


def test_default_device_scope_is_per_thread():
    """A ``with fa.default_device(d):`` block holds in its own thread only (JAX's thread-local value): a thread
    started inside it sees the global default, and a thread's block does not change the main thread's."""
    import threading
    devs = fa.devices(all_backends=True)
    other = next((d for d in devs if d != fa.default_device()), None)
    if other is None:
        pytest.skip("one device only")
    before = fa.default_device()
    seen, entered, release = {}, threading.Event(), threading.Event()

    def worker():
        seen["start"] = fa.default_device()
        with fa.default_device(other):
            seen["inside"] = fa.default_device()
            entered.set()
            release.wait(30)
        seen["after"] = fa.default_device()

    with fa.default_device(other):
        t = threading.Thread(target=worker)
        t.start()
        entered.wait(30)
        assert fa.default_device() is other
    assert fa.default_device() is before   # the worker is still inside its own block
    release.set()
    t.join(30)
    assert seen == {"start": before, "inside": other, "after": before}


def test_default_device_scope_and_the_global_setting():
    """A block wins over ``config.update("jax_default_device", d)`` (the process-wide setting, still honoured
    outside it); ``with fa.default_device(None):`` is fnarray's own choice, the setting ignored, as JAX's; a name
    that is no device raises ValueError when ``default_device(name)`` is called."""
    own = fa.default_device()
    other = next((d for d in fa.devices(all_backends=True) if d != own), None)
    if other is None:
        pytest.skip("one device only")
    saved = fa.config.default_device
    try:
        fa.config.update("jax_default_device", str(other))
        assert fa.default_device() == other
        with fa.default_device(own):
            assert fa.default_device() is own
        with fa.default_device(None) as entered:
            assert entered is None and fa.default_device() == own
        assert fa.default_device() == other
    finally:
        fa.config.default_device = saved
    with pytest.raises(ValueError, match="nodevice"):
        fa.default_device("nodevice:0")
    with pytest.raises(TypeError):
        fa.default_device(3)


def test_devices_all_gives_reasons(testdev):
    fa.register_backend("brokendev", _broken_factory, install_hint="pip install libbroken")
    try:
        usable = fa.devices(all_backends=True)
        everything = fa.devices(all=True)
        assert [d for d in everything if d.reason is None] == usable
        assert {"numpy:0", "testdev:0", "testdev:1"} <= {str(d) for d in usable}
        broken = [d for d in everything if d.backend == "brokendev"]
        assert len(broken) == 1 and "libbroken" in broken[0].reason and "pip install libbroken" in broken[0].reason
        assert "unavailable" in repr(broken[0])
        assert all(d.reason for d in everything if d not in usable)
        assert not any(d.backend == "brokendev" for d in usable)
        with pytest.raises(fa.BackendUnavailable, match="pip install libbroken"):
            parse_device("brokendev")
    finally:
        unregister_backend("brokendev")


def _broken_factory():
    raise ImportError("No module named 'libbroken'", name="libbroken")


@pytest.mark.parametrize("spec", ["numpy", "numpy:0", "numpy:cpu", " numpy:0 "])
def test_parse_numpy_device(spec):
    d = parse_device(spec)
    assert d == Device("numpy", 0, "cpu") and str(d) == "numpy:0"
    assert parse_device(d) is d
    assert fa.device_put(fnp.ones(2), spec).device == d


def test_parse_picks_by_id_or_platform(testdev):
    assert str(parse_device("testdev")) == "testdev:0"
    assert str(parse_device("testdev:1")) == "testdev:1"
    assert str(parse_device("testdev:gpu")) == "testdev:1"
    assert str(parse_device("testdev:cpu")) == "testdev:0"


def test_unknown_devices_list_the_available_ones():
    with pytest.raises(ValueError, match="available devices: numpy:0"):
        parse_device("cuda")
    with pytest.raises(ValueError, match=r"numpy:7.*numpy:0"):
        parse_device("numpy:7")
    with pytest.raises(ValueError, match="numpy:0"):
        fa.device_put(fnp.ones(2), "tpu:3")
    with pytest.raises(TypeError, match="Device"):
        parse_device(3)


def test_device_identity():
    a, b = Device("numpy", 0, "cpu"), Device("numpy", 0, "cpu", "other description")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Device("numpy", 1, "cpu") and a != "numpy:0"


@pytest.mark.parametrize("name", [n for n in backend_names() if n != "numpy"])
def test_backend_is_available(name):
    """Each known backend starts here; CI (FNARRAY_REQUIRE_ALL_BACKENDS=1) fails on any that does not."""
    devs = require_backend(name)
    assert devs and all(d.backend == name for d in devs)


def test_require_all_backends_turns_a_skip_into_a_failure(pytester, monkeypatch):
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    pytester.makeconftest(open(os.path.join(here, "conftest.py")).read())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.path.dirname(here)]))
    pytester.makepyfile(test_inner=textwrap.dedent(f"""
        import pytest
        from helpers import require_backend

        def test_missing():
            pytest.skip("{BACKEND_UNAVAILABLE}: no driver")

        def test_helper_skip():
            require_backend("numpy")  # available: no skip

        def test_other_skip():
            pytest.skip("needs a GPU this machine lacks")
    """))
    monkeypatch.setenv("FNARRAY_REQUIRE_ALL_BACKENDS", "1")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(failed=1, skipped=1, passed=1)
    monkeypatch.setenv("FNARRAY_REQUIRE_ALL_BACKENDS", "0")
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    res.assert_outcomes(skipped=2, passed=1)


# ----------------------------------------------------------------------------- placement


@pytest.mark.enable_x64
def test_device_put_commits(device):
    x = fnp.asarray(np.array([1.0, 2.0], np.float32))
    assert not x.committed and x.device == fa.default_device()
    y = fa.device_put(x, device)
    assert y.committed and y.device == device
    assert_close(y, np.array([1.0, 2.0], np.float32))
    z = fa.device_put(x)
    assert not z.committed
    tree = fa.device_put({"a": np.arange(3), "b": [1.5]}, device)
    assert tree["a"].device == device and tree["a"].committed and tree["a"].dtype == np.dtype("int64")
    assert tree["b"][0].weak_type
    assert x.to_device(device).committed


def test_uncommitted_arrays_follow_committed_ones(testdev):
    a = fnp.asarray(np.arange(3, dtype=np.float32))      # uncommitted, on numpy:0
    b = fa.device_put(fnp.ones(3), "testdev:1")
    for out in (a + b, b + a, fa.jit(lambda u, v: u * v)(a, b)):
        assert str(out.device) == "testdev:1" and out.committed
    assert_close(a + b, np.arange(3, dtype=np.float32) + 1)
    c = a + 1.0
    assert c.device == fa.default_device() and not c.committed


def test_committed_arrays_on_two_devices_raise_naming_both(testdev):
    b0 = fa.device_put(fnp.ones(3), "testdev:0")
    b1 = fa.device_put(fnp.ones(3), "testdev:1")
    n = fa.device_put(fnp.ones(3), "numpy:0")
    for f in (lambda: b0 + b1, lambda: n * b1, lambda: fa.jit(lambda u, v: u - v)(b0, n)):
        with pytest.raises(ValueError) as e:
            f()
        msg = str(e.value)
        assert msg.count("testdev:") + msg.count("numpy:0") >= 2 and "device_put" in msg
    with pytest.raises(ValueError, match=r"testdev:0.*numpy:0|numpy:0.*testdev:0"):
        b0 + n
    # Moving one first is the fix.
    assert_close(fa.device_put(b0, "testdev:1") + b1, np.full(3, 2.0, np.float32))


def test_uncommitted_arrays_run_on_the_default_device():
    """JAX's rule (as ``jax.default_device`` on two XLA host devices shows): an operation on uncommitted arrays
    only runs on the default device wherever they lie, its result uncommitted, in either operand order; eagerly
    (an operator, a ``fnarray.numpy`` function) and in ``jit`` (the first call and the cached ones); a committed
    operand decides instead (JAX's ``committed`` placement); after the block the default is back, for ``grad`` and
    the Jacobians too."""
    home = fa.get_device("numpy")
    jdev, kdev = require_backend("jax")[0], require_backend("opencl")[0]
    f, g = fa.jit(lambda a, b: a * b + 1), fa.jit(lambda a: a * 2)
    with fa.default_device(home):
        w = fnp.arange(3.0)
        for out in (w * w, w * 2.0, 2.0 * w, -w, fnp.sum(w)):  # (the operators' cached entries learn home's)
            assert out.device == home
        for d in (jdev, kdev):
            with fa.default_device(d):
                x = fnp.ones(3)
                for _ in range(3):  # first calls, then the cached paths (eager cache and tapes, jit's hot records)
                    for out in (w * w, w * x, x * w, w * 2.0, 2.0 * w, -w, fnp.sum(w), f(w, x), f(w, w), g(w)):
                        assert out.device == d and not out.committed
                c = fa.device_put(w, home)
                for out in (c * x, x * c, f(x, c)):
                    assert out.device == home and out.committed
                assert_close(f(w, x), np.arange(3, dtype=np.float32) + 1)
            for out in (x * x, w * x, f(x, x), g(x)):
                assert out.device == home and not out.committed
            # transforms too (jax.grad/jacfwd/jacrev/hessian of arrays made in a jax.default_device block, after it)
            loss = lambda a, b: fnp.sum(fnp.sin(a) * b)
            outs = (fa.grad(loss)(x, x), *fa.value_and_grad(loss)(x, x), fa.jacfwd(fnp.sin)(x),
                    fa.jacrev(fnp.sin)(x), fa.hessian(lambda a: fnp.sum(a ** 3))(x))
            assert all(out.device == home and not out.committed for out in outs)
            assert_close(outs[3], np.diag(np.cos(np.ones(3, np.float32))))


def test_jit_device_argument(testdev):
    a = fnp.ones(2)
    out = fa.jit(lambda v: v + 1, device="testdev:0")(a)
    assert str(out.device) == "testdev:0" and out.committed
    assert_close(out, np.full(2, 2.0, np.float32))
    b1 = fa.device_put(fnp.ones(2), "testdev:1")
    with pytest.raises(ValueError, match=r"testdev:0.*testdev:1|testdev:1.*testdev:0"):
        fa.jit(lambda v: v + 1, device="testdev:0")(b1)


def test_transfers_between_devices(testdev):
    x_np = np.arange(6, dtype=np.int16).reshape(2, 3)
    x = fa.device_put(fnp.asarray(x_np), "testdev:0")
    assert isinstance(x._buf, _Buf)
    y = fa.device_put(x, "numpy:0")
    assert isinstance(y._buf, np.ndarray) and not isinstance(y._buf, _Buf)
    assert_close(y, x_np)
    assert_close(x, x_np)
    assert x.tolist() == x_np.tolist()


# ----------------------------------------------------------------------------- partitioning and fallback


def test_fallback_of_an_unsupported_primitive(testdev):
    x_np = np.linspace(-1, 1, 5).astype(np.float32)
    x = fa.device_put(fnp.asarray(x_np), "testdev:0")

    def f(v):
        return fnp.sin(v * 2.0) + 1.0

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fa.jit(f)(x)
        out2 = fa.jit(f)(fa.device_put(fnp.asarray(np.ones(7, np.float32)), "testdev:0"))   # another shape
        eager = fnp.sin(x)
    assert_close(out, (np.sin(x_np.astype(np.float64) * 2) + 1).astype(np.float32))
    assert_close(out2, np.full(7, np.sin(2.0) + 1, np.float32))
    assert_close(eager, np.sin(x_np))
    assert str(out.device) == "testdev:0" and str(eager.device) == "testdev:0"
    msgs = _fallback_warnings(rec)
    assert len(msgs) == 1, msgs  # once per kind, however often it falls back
    assert "sin" in msgs[0] and "float32" in msgs[0] and "testdev:0" in msgs[0] and "no sin" in msgs[0]
    # The device ran the rest: mul and add were compiled for it, sin never.
    assert ["mul"] in testdev.programs and ["add"] in testdev.programs
    assert not any("sin" in p for p in testdev.programs)
    check_traced(f, x)
    assert "testdev program" in fa.jit(f).lower(x).as_text()


@pytest.mark.enable_x64
def test_fallback_of_an_unsupported_dtype(testdev):
    x_np = np.array([0.1, 0.2, 1e-300])
    x = fa.device_put(fnp.asarray(x_np), "testdev:1")
    assert x.dtype == F64
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fa.jit(lambda v: v * 3.0 - 1.0)(x)
        e1 = x * 3.0
    assert_close(out, x_np * 3.0 - 1.0, F64)
    assert_close(e1, x_np * 3.0, F64)
    msgs = _fallback_warnings(rec)
    assert any("mul" in m and "float64" in m and "testdev:1" in m for m in msgs), msgs
    assert len(msgs) == len(set(msgs)) == 2  # mul and sub under jit; the eager mul is the same kind


def test_a_second_device_and_kind_warns_again(testdev):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for dev in ("testdev:0", "testdev:1", "testdev:0"):
            fnp.sin(fa.device_put(fnp.ones(2), dev))
        fnp.sin(fa.device_put(fnp.ones(2, dtype=fnp.float16), "testdev:0"))
    msgs = _fallback_warnings(rec)
    assert len(msgs) == 3, msgs
    assert sum("testdev:1" in m for m in msgs) == 1 and sum("float16" in m for m in msgs) == 1


@pytest.mark.enable_x64
def test_fallback_error_mode(testdev, monkeypatch):
    # The warning comes once per primitive, dtype and device per process: forget earlier tests' warnings.
    # An eager op compiled by an earlier test on testdev:0 is cached, and a cached op does not warn again.
    from fnarray.devices import partition, placement
    monkeypatch.setattr(partition, "_warned", set())
    placement._eager_cache.clear()
    x = fa.device_put(fnp.ones(3, fnp.float32), "testdev:0")
    with pytest.warns(fa.FallbackWarning):
        fnp.sin(x)  # cached in "warn" mode first: the mode must still be honoured afterwards
    fa.config.fallback = "error"
    with pytest.raises(fa.UnsupportedOnDevice, match=r"sin.*testdev:0.*fallback") as e:
        fa.jit(lambda v: fnp.sin(v) + 1)(x)
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(fa.UnsupportedOnDevice, match="sin"):
        fnp.sin(x)
    with pytest.raises(fa.UnsupportedOnDevice, match="float64"):
        fa.device_put(fnp.asarray(np.ones(2)), "testdev:0") + 1.0
    assert_close(fa.jit(lambda v: v * 2)(x), np.full(3, 2.0, np.float32))   # supported work still runs
    fa.config.fallback = "silent"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert_close(fnp.sin(x), np.full(3, np.sin(1.0), np.float32))
    assert _fallback_warnings(rec) == []
    with pytest.raises(ValueError, match="fallback"):
        fa.config.fallback = "sometimes"


def _loop(body_fn):
    """A ``while`` equation: ``for i in range(3): x = body_fn(x)``, built from primitives."""
    i32, f32 = ShapedArray((), I32), ShapedArray((4,), F32)
    cond, _ = trace_to_program(lambda i, x: [lax.lt(i, 3)], [i32, f32])
    body, _ = trace_to_program(lambda i, x: [lax.add(i, 1), body_fn(x)], [i32, f32])

    def f(x):
        y = lax.mul(x, 0.5)                      # on the device
        _, z = P.while_p.bind(np.int32(0), y, cond_program=cond, body_program=body, cond_nconsts=0,
                              body_nconsts=0)
        return lax.add(z, 1.0)                   # on the device again
    return f


def test_an_unsupported_equation_in_a_loop_body_moves_the_whole_loop(testdev):
    x_np = np.linspace(0, 2, 4).astype(np.float32)
    x = fa.device_put(fnp.asarray(x_np), "testdev:0")
    f = _loop(lambda v: lax.add(lax.sin(v), v))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fa.jit(f)(x)
    want = x_np.astype(np.float64) * 0.5
    for _ in range(3):
        want = np.sin(want) + want
    assert_close(out, (want + 1).astype(np.float32))
    msgs = _fallback_warnings(rec)
    assert len(msgs) == 1 and msgs[0].startswith("while") and "no sin" in msgs[0] and "testdev:0" in msgs[0]
    # The partitioner's plan: the device runs what comes before and after the loop; the loop moved
    # to numpy whole (testdev refuses to compile a program holding sin anywhere, sub-programs included).
    check_traced(f, x)
    assert testdev.programs == [["mul"], ["add"]]


def test_a_supported_loop_stays_on_the_device(testdev):
    x = fa.device_put(fnp.asarray(np.ones(4, np.float32)), "testdev:0")
    f = _loop(lambda v: lax.mul(v, 2.0))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        out = fa.jit(f)(x)
    assert_close(out, np.full(4, 0.5 * 8 + 1, np.float32))
    assert _fallback_warnings(rec) == []
    assert testdev.programs == [["mul", "while", "add"]]


# ----------------------------------------------------------------------------- meshes on a new backend


def test_a_new_backend_gets_meshes_of_one_device_from_the_hook_defaults(testdev):
    """``testdev`` defines no mesh hook (``Backend.check_mesh``, ``put_global``, ``binds_shard_map``...): a mesh of
    one of its devices works as on numpy (global ``device_put`` commits, ``shard_map`` is a named vmap whose psum
    is the identity), and a mesh of both of its devices is refused (no distributed engine)."""
    from fnarray.sharding import Mesh, NamedSharding, P, SingleDeviceSharding
    dev = fa.get_device("testdev:1")
    mesh = Mesh([dev], ("x",))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = fa.device_put(x, NamedSharding(mesh, P("x")))
    assert g.device == dev and g.committed and g.sharding == SingleDeviceSharding(dev)
    assert g.is_fully_addressable and [s.device for s in g.addressable_shards] == [dev]
    out = fa.shard_map(lambda v: fa.lax.psum(v * 2, "x"), mesh=mesh, in_specs=P("x"), out_specs=P())(g)
    np.testing.assert_array_equal(np.asarray(out), 2 * x)
    assert out.device == dev
    with pytest.raises(ValueError, match="testdev has no distributed engine"):
        Mesh([fa.get_device("testdev:0"), dev], ("x",))
    with pytest.raises(ValueError, match="not jax ones"):
        _ = mesh.jax_mesh
