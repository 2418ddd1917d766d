"""Bounded caches (issue 12): jit per function and global, eager, kernels; entries die with their function."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.cache import LRUCache
from fnarray.core.config import Config
from fnarray.devices import placement
from fnarray.transforms import jit as jit_mod

from helpers import run_threads


@pytest.fixture
def sizes():
    """Restore the cache sizes a test changes."""
    names = ("jit_cache_size", "jit_global_cache_size", "eager_cache_size", "kernel_cache_size")
    old = {n: getattr(fa.config, n) for n in names}
    yield fa.config
    for n, v in old.items():
        setattr(fa.config, n, v)
    placement._eager_cache.trim()


def _counting(device):
    traces = []

    def fun(x):
        traces.append(x.shape)
        return x * 2.0 + 1.0
    return fa.jit(fun, device=device), traces


def _call(f, n, device):
    x = np.arange(n, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(f(fa.device_put(x, device))), x * 2.0 + 1.0)


def _order(f):
    """The input shapes of ``f``'s executables, least recently used first."""
    return [e.ckey[0][1][0].shape for e in f._compiled.values()]


def test_jit_cache_is_an_lru_per_function(device, sizes):
    sizes.jit_cache_size = 3
    f, traces = _counting(device)
    for n in (1, 2, 3):
        _call(f, n, device)
    _call(f, 1, device)          # a hit: 1 becomes the most recently used
    _call(f, 4, device)          # evicts 2, the least recently used
    assert traces == [(1,), (2,), (3,)] + [(4,)]
    assert len(f._compiled) == 3 and len(f._traces) == 3 and len(f._fast) <= 3 and len(f._by_ckey) == 3
    assert _order(f) == [(3,), (1,), (4,)]
    _call(f, 1, device)
    _call(f, 3, device)
    assert len(traces) == 4      # both still cached
    assert _order(f) == [(4,), (1,), (3,)]
    _call(f, 2, device)          # evicted before: compiled again (traced again unless its trace survived)
    assert _order(f) == [(1,), (3,), (2,)]
    assert len(traces) in (4, 5)
    for n in range(5, 12):
        _call(f, n, device)
        assert len(f._compiled) <= 3 and len(f._traces) <= 3 and len(f._fast) <= 3 and len(f._by_ckey) <= 3
    assert f.cache_info() == {"traces": 3, "executables": 3, "bound": 3}


def _serving_every_size(monkeypatch):
    """numpy:0's executables marked as serving every size (as mlx:0's shapeless ones do: ``Jitted._sized``);
    returns the ranks of the programs compiled and of those an earlier program's executable served, in order."""
    compiled, served = [], []
    real = jit_mod.compile_program

    def compile_program(program, device, **kw):
        compiled.append(program.invars[0].aval.ndim)
        exe = real(program, device, **kw)
        exe.shape_free = True
        return exe

    def at_sizes(exe, program, device):
        served.append(program.invars[0].aval.ndim)
        return real(program, device)   # (numpy:0's executables keep their sizes: this program's own)
    monkeypatch.setattr(jit_mod, "compile_program", compile_program)
    monkeypatch.setattr(jit_mod, "at_sizes", at_sizes)
    return compiled, served


def _call_at(f, shape, device):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_allclose(np.asarray(f(fa.device_put(x, device))), x * 2.0 + 1.0)


def test_jit_executables_serving_every_size_are_an_lru(sizes, monkeypatch):
    """The executables that serve every size are kept per program up to its sizes (``core/size_free.py``; here one
    form per rank), the ``jit_cache_size`` most recently used: a kept form's new shape compiles nothing, a new form
    evicts the least recently used one (it cleared them all)."""
    sizes.jit_cache_size = 3
    compiled, served = _serving_every_size(monkeypatch)
    dev = fa.devices("numpy")[0]
    f = _counting(dev)[0]
    for shape in [(2,), (2, 3), (2, 3, 4), (5,), (2, 3, 4, 5), (6,), (5, 6, 7), (5, 6)]:
        _call_at(f, shape, dev)
    # (5,) used rank 1's last, so rank 2's went for rank 4's; ranks 1 and 3 still serve, rank 2 compiles again
    assert compiled == [1, 2, 3, 4, 2] and served == [1, 1, 3], (compiled, served)
    assert len(f._tables.sizes) == 3


def test_jit_executables_serving_every_size_under_threads(sizes, monkeypatch):
    """Four threads compiling programs of three forms within a bound of two: every call is compiled or served,
    every result right, and the executables kept never pass the bound."""
    sizes.jit_cache_size = 2
    compiled, served = _serving_every_size(monkeypatch)
    dev = fa.devices("numpy")[0]
    f = _counting(dev)[0]
    kept = []

    def work(k):
        for i in range(6):
            first = 2 + i + 6 * k   # a new shape every call: each goes through ``_sized``
            _call_at(f, tuple(range(first, first + 1 + (k + i) % 3)), dev)
            kept.append(len(f._tables.sizes))
    run_threads(work)
    assert len(compiled) + len(served) == 24 and set(compiled) == {1, 2, 3}
    assert max(kept) <= 2


def test_jit_global_cache_bounds_all_functions(device, sizes):
    sizes.jit_cache_size = 10
    sizes.jit_global_cache_size = 4
    fs = [_counting(device)[0] for _ in range(3)]
    for f in fs:
        for n in (1, 2, 3):
            _call(f, n, device)
            assert len(jit_mod._GLOBAL) <= 4
    live = sum(len(f._compiled) for f in fs)
    assert live <= 4 and sum(len(f._by_ckey) for f in fs) <= 4 and sum(len(f._fast) for f in fs) <= 4
    assert jit_mod.jit_cache_info()["global"][1] == 4
    # the most recent ones survive; the oldest (fs[0]'s) were evicted from their function
    assert len(fs[2]._compiled) == 3 and len(fs[0]._compiled) == 0
    _call(fs[0], 1, device)  # still correct after eviction: compiles again


def test_executables_die_with_their_function(device):
    f, _ = _counting(device)
    _call(f, 3, device)
    _call(f, 4, device)
    entries = [weakref.ref(e) for e in f._compiled.values()]
    exes = []
    for e in f._compiled.values():
        try:
            exes.append(weakref.ref(e.exe))
        except TypeError:  # an executable type without weak references: its entry is checked
            pass
    traces = [weakref.ref(e) for e in f._traces.values()]
    assert entries and traces
    n_global = len(jit_mod._GLOBAL)
    del f, e
    gc.collect()
    assert all(r() is None for r in entries + exes + traces)
    _call(fa.jit(lambda x: x * 2.0 + 1.0, device=device), 2, device)  # the next insert drops dead ids
    assert len(jit_mod._GLOBAL) <= n_global - 1


def test_eager_cache_is_bounded(device, sizes):
    sizes.eager_cache_size = 5
    for n in range(1, 12):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(fa.device_put(x, device) * 3.0), x * 3.0)
        assert len(placement._eager_cache) <= 5
    keys = placement._eager_cache.keys()
    # The most recent operation is the last in LRU order: its general entry (primitive, params, avals, ...),
    # then the fast operator's entry (operator, aval, operand type) that fnarray.devices.eager_ops adds.
    assert keys[-1][0] == "mul" and keys[-1][1].shape == (11,)
    assert keys[-2][2][0].shape == (11,)


def test_kernel_caches_are_bounded(sizes):
    from helpers import require_backend
    fns = [fnp.sin, fnp.cos, fnp.exp, fnp.tanh, fnp.sqrt]
    x = np.linspace(0.1, 1.0, 6, dtype=np.float32)
    sizes.kernel_cache_size = 2
    checked = 0
    for name in ("opencl", "webgpu"):
        for device in require_backend(name)[:1]:
            if name == "opencl":
                cache = device.impl.state(device).programs
            else:
                cache = device.impl.gpu.pipelines
            cache.trim()  # a new size applies at the next insert; earlier tests may have filled it
            assert len(cache) <= 2
            for fn in fns + fns[:1]:  # the first again after eviction: rebuilt, still right
                got = np.asarray(fa.jit(fn, device=device)(fa.device_put(x, device)))
                np.testing.assert_allclose(got, getattr(np, fn.__name__)(x.astype(np.float64)), rtol=1e-5)
                assert len(cache) <= 2
            checked += 1
    assert checked == 2


def test_pallas_kernel_answers_are_bounded(sizes):
    """``groups.pallas.unsupported_reason`` keeps its answer per (kernel body, blocks, capabilities), each key holding
    its body's program: at most ``kernel_cache_size`` of them, the least recently used evicted (its body no
    longer held), and an evicted body's answer found again."""
    from fnarray.experimental import pallas as pl
    from fnarray.lowering.kernels.groups import pallas as kernel_pallas
    from helpers import require_backend
    device = require_backend("opencl")[0]
    caps = device.impl.capabilities(device)
    sizes.kernel_cache_size = 2
    kernel_pallas._REASONS.trim()

    def body(c):  # a new kernel body per call (its constant c)
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * c
        x = fnp.zeros(8, fnp.float32)
        (eqn,) = fa.make_ir(lambda x: pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((8,), fnp.float32))(x))(
            x).eqns
        return eqn

    kept, dropped = body(2.0), body(3.0)
    assert kernel_pallas.unsupported_reason(kept, caps) is None
    assert kernel_pallas.unsupported_reason(dropped, caps) is None
    for c in (4.0, 5.0):
        assert kernel_pallas.unsupported_reason(body(c), caps) is None
        assert len(kernel_pallas._REASONS) <= 2
    assert not any(key[0] is dropped.params["body"] for key in kernel_pallas._REASONS.keys())  # not held
    assert kernel_pallas.unsupported_reason(kept, caps) is None  # evicted too: rendered again
    assert len(kernel_pallas._REASONS) == 2


def test_webgpu_pool_does_not_grow_on_cached_calls():
    """Cached calls that upload their inputs reuse pooled buffers (before: one more wgpu buffer per call). An upload
    while calls are recorded takes a pooled buffer that no recorded work uses, or a new one: the pool grows during
    the first command buffer's worth of calls (the warm-up below), not after."""
    from helpers import require_backend
    device = require_backend("webgpu")[0]
    gpu = device.impl.gpu
    f = fa.jit(lambda x: x * 2.0 + 1.0, device=device)
    x = np.arange(16, dtype=np.float32)

    def pooled():
        gpu.alloc(np.float32, (1,))  # an allocation takes back the buffers returned meanwhile
        return sum(len(v) for v in gpu.pool.values())

    for _ in range(100):
        f(x)
        fa.device_put(x, device) * 2.0
    before = pooled()
    for _ in range(200):
        y = f(x)  # a NumPy input: uploaded on every call
        z = fa.device_put(x, device) * 2.0  # an eager operation with an uploaded scalar
    np.testing.assert_allclose(np.asarray(y), x * 2.0 + 1.0)
    np.testing.assert_allclose(np.asarray(z), x * 2.0)
    assert pooled() <= before + 4


def test_config_cache_sizes(monkeypatch):
    monkeypatch.setenv("FNARRAY_JIT_CACHE_SIZE", "7")
    monkeypatch.setenv("FNARRAY_KERNEL_CACHE_SIZE", "0")
    c = Config()
    assert c.jit_cache_size == 7 and c.kernel_cache_size == 0
    assert c.jit_global_cache_size == 2048 and c.eager_cache_size == 1024
    for bad in (-1, 2.5, "many", True):
        with pytest.raises(ValueError, match="jit_cache_size"):
            c.jit_cache_size = bad
    monkeypatch.setenv("FNARRAY_EAGER_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="FNARRAY_EAGER_CACHE_SIZE"):
        Config()


def test_lru_cache_order_and_bound():
    evicted = []
    c = LRUCache(3, on_evict=lambda k, v: evicted.append(k))
    for k in "abc":
        c.put(k, k.upper())
    assert c.get("a") == "A"          # a: most recent
    c.put("d", "D")                   # evicts b
    assert c.keys() == ["c", "a", "d"] and evicted == ["b"]
    assert c.put("c", "other") == "C"  # put keeps the first value
    c.set("c", "new")
    assert c.peek("c") == "new" and c.keys() == ["a", "d", "c"]
    assert c.get("b") is None


def test_lru_cache_under_threads():
    c = LRUCache(16)
    errors = []

    def work(t):
        try:
            for i in range(5000):
                k = (t * 7 + i) % 40
                v = c.get(k)
                if v is None:
                    v = c.put(k, ("v", k))
                if v != ("v", k):
                    errors.append((k, v))
                if len(c) > 16:
                    errors.append(("len", len(c)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    assert not errors
    assert len(c) == 16


def test_lru_cache_second_chance():
    """A cache whose hits only mark the value evicts unmarked entries first (CLOCK)."""
    marks = {}

    def used(v):
        u, marks[v] = marks.get(v, False), False
        return u

    c = LRUCache(3, second_chance=used)
    for k in "abc":
        c.put(k, k)
    marks["a"] = True               # a hit on a
    c.put("d", "d")                 # b goes (a had its second chance)
    assert sorted(c.keys()) == ["a", "c", "d"]
    c.put("e", "e")                 # a's mark was cleared: now c, the oldest unmarked... a or c
    assert len(c) == 3 and "e" in c
    marks.update(a=True, c=True, d=True, e=True)
    c.put("f", "f")                 # every entry marked: one pass clears the marks, then one goes
    assert len(c) == 3 and "f" in c


def test_cache_size_zero_keeps_nothing(sizes):
    sizes.jit_cache_size = 0
    f, traces = _counting("numpy:0")
    for _ in range(3):
        _call(f, 2, "numpy:0")
    assert len(traces) == 3  # traced every call
    assert len(f._compiled) == len(f._by_ckey) == len(f._fast) == len(f._traces) == 0
    sizes.jit_cache_size = 8
    sizes.jit_global_cache_size = 0
    g, _ = _counting("numpy:0")
    _call(g, 2, "numpy:0")
    _call(g, 2, "numpy:0")
    assert len(g._compiled) == len(g._by_ckey) == len(g._fast) == 0


def test_gc_paused_blocks_nest_and_leave_collection_as_they_found_it():
    """``gc_pause.paused`` (around kernel scheduling and compiling): automatic collection is off inside, nested
    blocks included, back on after the outermost only where it was on before."""
    import gc

    from fnarray.core import gc_pause
    assert gc.isenabled()
    with gc_pause.paused():
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
