"""``jit`` caches by function, as JAX (issue 25 item 2): traces counted with a Python side effect, JAX's count
as the oracle, on every device; the function table's lifetime (weak), bound and thread safety."""

from __future__ import annotations

import functools
import gc
import operator
import threading
import time
import weakref

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.transforms import jit as jit_mod
from helpers import count_lowerings, require_backend, run_threads

jax = pytest.importorskip("jax")
jnp = jax.numpy


def _on(device):
    """``jit`` with ``device=`` for fnarray, plain ``jax.jit`` for JAX: the same scenario under both."""
    return {"fa": functools.partial(fa.jit, device=device), "jax": jax.jit}


def _both(scenario, device):
    """``scenario(jit, xp)`` under fnarray and JAX: (its result under fnarray, under JAX)."""
    jits = _on(device)
    return scenario(jits["fa"], fnp), scenario(jits["jax"], jnp)


def _counts_and_values(scenario, device):
    (n_fa, v_fa), (n_jax, v_jax) = _both(scenario, device)
    assert n_fa == n_jax, f"fnarray traced {n_fa} times, JAX {n_jax}"
    for a, b in zip(v_fa, v_jax, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    return n_fa


def test_jit_made_twice_traces_once(device):
    def scenario(jit, xp):
        n = [0]

        def f(x):
            n[0] += 1
            return x * 2.0
        outs = [jit(f)(1.0), jit(f)(2.0)]
        return n[0], outs
    assert _counts_and_values(scenario, device) == 1


def test_jit_in_a_loop_traces_once_per_signature(device):
    def scenario(jit, xp):
        n = [0]

        def f(x):
            n[0] += 1
            return xp.sin(x) + 1.0
        outs = [jit(f)(xp.arange(3.0) * i) for i in range(4)]
        outs += [jit(f)(xp.arange(5.0) * i) for i in range(3)]   # a second signature: one more trace
        return n[0], outs
    assert _counts_and_values(scenario, device) == 2


def test_static_arguments_and_names_are_in_the_key(device):
    def scenario(jit, xp):
        n = [0]

        def f(x, k):
            n[0] += 1
            return x * k
        outs = [jit(f, static_argnums=1)(1.0, 2), jit(f, static_argnums=1)(3.0, 2),
                jit(f, static_argnums=1)(1.0, 3), jit(f, static_argnames="k")(1.0, k=2),
                jit(f, static_argnames="k")(5.0, k=2), jit(f)(1.0, 2)]
        return n[0], outs
    assert _counts_and_values(scenario, device) == 4


def test_donation_and_device_options_keep_executables_apart(device):
    """A trace is shared by every option (JAX: a donating jit of ``f`` reuses ``f``'s trace), but executables
    are not: a non-donating call never deletes its input, and ``device=`` runs where it says."""
    n = [0]

    def f(x):
        n[0] += 1
        return x + 1.0
    x = fa.device_put(np.arange(3, dtype=np.float32), device)
    np.testing.assert_allclose(np.asarray(fa.jit(f, device=device)(x)), [1, 2, 3])
    y = fa.device_put(np.arange(3, dtype=np.float32), device)
    np.testing.assert_allclose(np.asarray(fa.jit(f, device=device, donate_argnums=0)(y)), [1, 2, 3])
    assert y.is_deleted()
    np.testing.assert_allclose(np.asarray(fa.jit(f, device=device)(x)), [1, 2, 3])
    assert not x.is_deleted()
    other = "numpy:0" if str(device) != "numpy:0" else None
    if other is not None:
        out = fa.jit(f, device=other)(np.arange(3, dtype=np.float32))
        assert str(out.device) == other
    m = [0]

    def g(x):
        m[0] += 1
        return x + 1.0
    jax.jit(g)(jnp.arange(3.0))
    jax.jit(g, donate_argnums=0)(jnp.arange(3.0))
    assert n[0] == m[0] == 1


class _Counter:
    def __init__(self):
        self.k = 0

    def method(self, x):
        self.k += 1
        return x + 1.0


class _EqualCallable:
    """Equal when their ``v`` is: JAX shares one cache between equal callables."""

    def __init__(self, v):
        self.v, self.calls = v, 0

    def __eq__(self, other):
        return isinstance(other, _EqualCallable) and other.v == self.v

    def __hash__(self):
        return hash(self.v)

    def __call__(self, x):
        self.calls += 1
        return x * self.v


def test_bound_methods_partials_and_equal_callables_as_jax(device):
    """JAX keys jit's caches by the callable's ``==`` while it lives: a bound method made twice shares while the
    first lives (``obj.m == obj.m``), a temporary one does not; ``functools.partial`` objects compare by identity;
    callables equal by ``__eq__`` share (the second never runs its Python)."""
    def scenario(jit, xp):
        a = _Counter()
        jit(a.method)(1.0)
        jit(a.method)(2.0)            # the first bound method died with its wrapper: traced again
        kept = jit(a.method)
        kept(1.0)
        jit(a.method)(3.0)            # equal to the live one: shared
        b = _Counter()
        jit(b.method)(1.0)            # another object: its own trace
        n = [0]

        def g(x, y):
            n[0] += 1
            return x + y
        p = functools.partial(g, 1.0)
        jit(p)(1.0)
        jit(p)(2.0)
        jit(functools.partial(g, 1.0))(1.0)
        e1, e2 = _EqualCallable(2.0), _EqualCallable(2.0)
        out = [jit(e1)(1.0), jit(e2)(3.0)]
        return (a.k, b.k, n[0], e1.calls, e2.calls), out
    (c_fa, v_fa), (c_jax, v_jax) = _both(scenario, device)
    assert c_fa == c_jax
    np.testing.assert_allclose(np.asarray(v_fa), np.asarray(v_jax))


class _Unhashable:
    __hash__ = None

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x - 1.0


def test_callables_that_cannot_be_keyed_still_work(device):
    """Not weakly referenceable (``operator.itemgetter``), unhashable, or builtins: each wrapper caches alone."""
    jit = functools.partial(fa.jit, device=device)
    assert float(jit(operator.itemgetter(1))((1.0, 2.0))) == 2.0
    assert float(jit(operator.neg)(1.5)) == -1.5
    np.testing.assert_allclose(np.asarray(jit(fnp.sin)(1.0)), np.sin(np.float32(1.0)), rtol=1e-6)
    u = _Unhashable()
    j = jit(u)
    assert float(j(3.0)) == 2.0 and float(j(4.0)) == 3.0 and u.calls == 1
    assert float(jit(u)(5.0)) == 4.0 and u.calls == 2


def test_entries_die_with_their_function(device):
    def f(x):
        return x * 3.0
    ref = weakref.ref(f)
    j = fa.jit(f, device=device)
    j(1.0)
    traces = [weakref.ref(e) for e in j._traces.values()]
    cache = weakref.ref(jit_mod.function_cache(f))
    before = jit_mod.jit_cache_info()["functions"][0]
    del f, j
    gc.collect()
    assert ref() is None and all(t() is None for t in traces)
    # f's entry left the table (other functions may die in the same collection: the count drops by at least 1)
    assert cache() is None
    assert jit_mod.jit_cache_info()["functions"][0] <= before - 1


@pytest.fixture
def sizes():
    old = (fa.config.jit_cache_size, fa.config.jit_global_cache_size)
    yield fa.config
    fa.config.jit_cache_size, fa.config.jit_global_cache_size = old


def test_the_table_of_functions_is_bounded(sizes):
    sizes.jit_global_cache_size = 3
    fs = []
    for k in range(6):
        def f(x, k=k):
            return x + k
        fs.append(f)
        fa.jit(f)(1.0)
        assert jit_mod.jit_cache_info()["functions"][0] <= 3
    n = [0]

    def g(x):
        n[0] += 1
        return x
    fa.jit(g)(1.0)
    for f in fs:          # evicting g's entry from the table loses only its traces: results stay right
        fa.jit(f)(1.0)
    assert float(fa.jit(g)(2.0)) == 2.0 and n[0] == 2
    sizes.jit_global_cache_size = 0    # nothing kept (the next insert empties the table): caches of their own

    def h(x):
        return x
    fa.jit(h)(1.0)
    assert jit_mod.jit_cache_info()["functions"][0] == 0


def test_first_call_from_8_threads_traces_once(device, monkeypatch):
    """JAX traces once; so does fnarray (the other threads wait for the first one's trace and executable)."""
    compiles = []

    def counting_compile(program, device, **kw):
        compiles.append(program)
        return compile_program(program, device, **kw)
    compile_program = jit_mod.compile_program
    monkeypatch.setattr(jit_mod, "compile_program", counting_compile)
    for make in (lambda jit, f: [jit(f)] * 8, lambda jit, f: [None] * 8):   # one wrapper, or one per thread
        compiles.clear()
        counts = {}
        for name, jit in _on(device).items():
            n = [0]
            lock = threading.Lock()

            def f(x):
                with lock:
                    n[0] += 1
                time.sleep(0.05)  # a slow trace: every thread misses before the first one finishes
                return x * 2.0 + 1.0
            wrappers = make(jit, f)
            outs = [None] * 8

            def work(k, jit=jit, f=f, wrappers=wrappers, outs=outs):
                outs[k] = float((wrappers[k] or jit(f))(np.float32(k)))  # read here (MLX's streams)
            run_threads(work, n=8)
            np.testing.assert_allclose(outs, np.arange(8) * 2.0 + 1.0)
            counts[name] = n[0]
        assert counts["fa"] == counts["jax"] == 1
        assert len(compiles) == 1  # and compiles once


def test_a_failing_first_trace_does_not_block_the_waiters(device):
    calls = [0]

    def f(x):
        calls[0] += 1
        time.sleep(0.05)
        raise ValueError("not traceable")
    j = fa.jit(f, device=device)
    errors = []

    def work(k):
        try:
            j(1.0)
        except ValueError as e:
            errors.append(e)
    run_threads(work, n=4, timeout=30)
    assert len(errors) == 4 and calls[0] == 4   # each waiter traced in turn and got the error itself


def test_a_recursive_jitted_function_still_traces(device):
    @functools.partial(fa.jit, static_argnums=1, device=device)
    def power(x, k):
        return x if k == 1 else x * power(x, k - 1)
    assert float(power(2.0, 5)) == 32.0


def test_direct_entry_after_the_first_call():
    """``Jitted.direct_entry``: none before a call (``None``: ask again), the executable's own entry after it on
    numpy:0 (its buffers in and out, the output avals and structure), ``False`` where outputs are always committed
    (``device=``) or the executable takes constants (here a captured array)."""
    dev = fa.devices("numpy")[0]
    x = fa.device_put(np.arange(4, dtype=np.float32), dev)
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    assert f.direct_entry(1, dev) is None
    f(x)
    call, out_avals, out_tree, single = f.direct_entry(1, dev)
    assert single and out_avals == (x.aval,) and out_tree.num_leaves == 1
    np.testing.assert_array_equal(np.asarray(call(x.buf())[0]), np.arange(4) * 2.0 + 1.0)
    assert f.direct_entry(2, dev) is False
    g = fa.jit(lambda a: a + 1.0, device=dev)
    g(x)
    assert g.direct_entry(1, dev) is False
    c = fa.device_put(np.ones(4, np.float32), dev)
    h = fa.jit(lambda a: a + c)
    h(x)
    assert h.direct_entry(1, dev) is False


def test_eager_transforms_of_a_jitted_function_lower_once(monkeypatch):
    """An eager ``value_and_grad`` or ``vmap`` of a function that calls a jitted one (which closes over an array
    and loops in ``scan``) derives the call's JVP, known/unknown split, transpose and batched programs once
    (``transforms/derived.py``): the second call lowers nothing (it compiled the forward and backward programs
    again: ~2.4 s a call of a Burgers solver on jax:0). Values against the closed form in NumPy float64."""
    require_backend("jax")
    c = np.array([0.5, 1.0, 2.0], np.float32)

    @fa.jit
    def run(u, nu):
        return fa.lax.scan(lambda v, _: (v - nu * c * v, fnp.sum(v)), u, None, length=3)

    def energy(nu, u):
        v, ys = run(u, nu)
        return fnp.sum(v * v) + fnp.sum(ys)

    vg = fa.value_and_grad(energy, argnums=(0, 1))
    batched = fa.vmap(lambda s: energy(0.1, s * fnp.ones(3)))
    with fa.default_device("jax:0"):
        u = fnp.asarray([1.0, -2.0, 0.5])
        vg(0.1, u), batched(fnp.arange(1.0, 3.0))
        per_scale = [float(energy(0.1, s * fnp.ones(3))) for s in (1.0, 2.0)]
        lowered = count_lowerings(monkeypatch, u.device)
        _vg_and_vmap_against_float64(vg, batched, u, c, per_scale)
    assert lowered == [], lowered


def _vg_and_vmap_against_float64(vg, batched, u, c, per_scale):
    for nu in (0.1, 0.2):
        value, (g_nu, g_u) = vg(nu, u)
        a, u64 = 1 - nu * c.astype(np.float64), np.asarray(u, np.float64)
        np.testing.assert_allclose(float(value), np.sum(u64 ** 2 * a ** 6) + sum(np.sum(u64 * a ** k)
                                                                                  for k in range(3)), rtol=1e-5)
        np.testing.assert_allclose(float(g_nu), np.sum(-6 * c * u64 ** 2 * a ** 5)
                                   + sum(np.sum(-k * c * u64 * a ** (k - 1)) for k in range(1, 3)), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(g_u), 2 * u64 * a ** 6 + 1 + a + a ** 2, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(batched(fnp.arange(1.0, 3.0))), per_scale, rtol=1e-6)
