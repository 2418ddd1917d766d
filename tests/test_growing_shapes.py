"""A jitted step whose shapes grow (a decode loop's cache) and mlx:0's program of it (issue 28, seventeenth session).

Pinned by counts, never times: from the loop's second pass on every call takes jit's hot records (no key built,
no ``mx.eval``), and the mlx program of a softmax makes MLX's keepdims reductions and leaves broadcasts to MLX's
binary operations (the generated text), with the values of a NumPy float64 loop.
"""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.transforms import jit as jit_module
from helpers import cpu_opencl, decode_loop, decode_step, no_shapeless_rules, python_calls, require_backend

W, STEPS = 8, 5


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.normal(size=s).astype(np.float32) for s in ((1, W), (1, W), (1, W))]


def _reference(steps=STEPS):
    cache, q, row = (a.astype(np.float64) for a in _inputs())
    for _ in range(steps):
        cache, out = decode_step(np)(cache, q, row)
    return cache, out


@pytest.mark.parametrize("backend", ["numpy", "mlx", "jax"])
def test_a_growing_loop_takes_the_hot_records_from_its_second_pass(backend, monkeypatch):
    dev = require_backend(backend)[0]
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = fa.jit(decode_step(fnp))
    steps = 3 if backend == "jax" else STEPS  # (each shape an XLA compile on jax:0)

    def run(each=None):
        return decode_loop(step, cache0, q, row, steps, each)
    run()  # the first pass traces each shape (and makes its hot record)
    keyed, evals = [], []
    orig = jit_module.Jitted._call_keyed
    monkeypatch.setattr(jit_module.Jitted, "_call_keyed", lambda self, a, k: keyed.append(1) or orig(self, a, k))
    if backend == "mlx":
        import mlx.core as mx
        real_eval = mx.eval
        monkeypatch.setattr(mx, "eval", lambda *a: evals.append(1) or real_eval(*a))
    frames = []
    cache, out = run(lambda c: frames.append(python_calls(lambda: step(c, q, row))))
    assert keyed == [] and evals == []
    # one record looked up by the arrays' avals and run by __call__ itself: no flatten, no key, no second check;
    # then the outputs made (_hot_outputs)
    assert all(f[:2] == ["<lambda>", "__call__"] and f[-1] == "_hot_outputs" for f in frames[1:]), frames
    if backend == "mlx":  # between them the program's direct entry (warm-up count included) and the program
        assert all(f[2:-1] == ["call_args", "program"] for f in frames[1:]), frames
    if backend == "jax":  # jax.jit's callable, called by __call__ with no frame of ours between it and the caller:
        assert all(len(f) == 3 for f in frames[1:]), frames  # JAX records the Python stack with each call's outputs
    want_cache, want_out = _reference(steps)
    np.testing.assert_allclose(np.asarray(cache), want_cache, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-5, atol=1e-6)


def test_a_hot_call_on_jax_takes_the_fallback_where_xla_refuses_the_comparator():
    # jit's hot path calls jax.jit's callable itself (no frame of the backend's between); where XLA's partitioner
    # refuses the NaN-keeping max (arrays sharded across devices; simulated here), the backend's fallback runs the
    # program with plain reductions, as its ``call_args`` does; any other error is raised as it is
    import jax
    dev = require_backend("jax")[0]
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = fa.jit(decode_step(fnp))
    want = [np.asarray(a) for a in step(cache0, q, row)]   # (the first call makes the hot record)
    hot, tried = step._hot[0], []

    def refusing(message):
        def call(*bufs):
            tried.append(len(bufs))
            raise jax.errors.JaxRuntimeError(message)
        return call
    hot.call = refusing("INVALID_ARGUMENT: Unsupported reduction computation")
    got = step(cache0, q, row)
    assert tried == [3]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
    hot.call = refusing("INTERNAL: another error")
    with pytest.raises(jax.errors.JaxRuntimeError, match="another error"):
        step(cache0, q, row)


def test_each_new_length_leaves_no_reference_cycles():
    # a trace's tracers go with their last reference (``Builder.release``; partial evaluation's builder too), so
    # a growing loop leaves CPython's cycle collector nothing of its traces to find: the builder held its tracers,
    # each tracer its builder (through its trace), ~20 objects a length that only collections freed, ~90 us of
    # each new length's ~470 us on mlx:0 (issue 28). (Counted by type: objects of earlier tests that a cache
    # evicts meanwhile may be in cycles of their own.)
    import gc
    from fnarray.core.tracing import MainTrace, Tracer
    dev = require_backend("numpy")[0]
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = fa.jit(decode_step(fnp))
    cache, _ = decode_loop(step, cache0, q, row, 2)
    grad = fa.jit(fa.grad(lambda w, x: fnp.sum(fnp.tanh(x @ w) ** 2)))   # (a linearization's builder too)
    w = fa.device_put(np.ones((W, 2), np.float32), dev)
    grad(w, fa.device_put(np.ones((1, W), np.float32), dev))
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        decode_loop(step, cache, q, row, 3)   # three new lengths, each traced and compiled
        for n in (2, 3):
            grad(w, fa.device_put(np.ones((n, W), np.float32), dev))
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found = [type(o).__name__ for o in gc.garbage if isinstance(o, (Tracer, MainTrace))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert found == [], found


def test_mlx_programs_equal_up_to_sizes_share_one_shapeless_executable(monkeypatch):
    # a new cache length lowers nothing where the step's program reads no size (``core/size_free.py``); the shared
    # program goes through mx.compile(shapeless=True) at its second call here, and serves every later length
    from fnarray.lowering.mlx import backend as mlx_backend
    dev = require_backend("mlx")[0]
    monkeypatch.setattr(mlx_backend, "CPU_COMPILE_AFTER_CALLS", 2)
    compiles, real_compile = [], mlx_backend.mx.compile
    monkeypatch.setattr(mlx_backend.mx, "compile", lambda f, **k: compiles.append(k) or real_compile(f, **k))
    lowered, traced = [], []
    real = jit_module.compile_program
    monkeypatch.setattr(jit_module, "compile_program", lambda *a, **k: lowered.append(1) or real(*a, **k))
    real_trace = jit_module.trace_to_program
    monkeypatch.setattr(jit_module, "trace_to_program", lambda *a, **k: traced.append(1) or real_trace(*a, **k))
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = fa.jit(decode_step(fnp))
    cache, out = decode_loop(step, cache0, q, row, 6)
    # the one-row cache (a size of 1 is told apart), then every other length (up to 7 rows: 8 would equal W, a
    # new key, as any size equal to another is); the function itself runs once per length (as under jax.jit:
    # shapes are static, its Python may read them), and a second pass runs none of it
    assert len(lowered) == 2 and compiles == [{"shapeless": True}], (lowered, compiles)
    assert len(traced) == 6, traced
    decode_loop(step, cache0, q, row, 6)
    assert len(traced) == 6 and len(lowered) == 2, (traced, lowered)
    want_cache, want_out = _reference(6)
    np.testing.assert_allclose(np.asarray(cache), want_cache, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-5, atol=1e-6)
    # a branch on a size: each length is traced, so a longer input takes the other branch (two programs, each
    # shared by the lengths of its branch)
    branchy = fa.jit(lambda x: x * 2.0 if x.shape[0] > 3 else x + 1.0)
    traced[:], lowered[:] = [], []
    for n in range(2, 7):
        x = np.linspace(-1, 1, 16 * n).reshape(n, 16)
        got = np.asarray(branchy(fa.device_put(x.astype(np.float32), dev)))
        np.testing.assert_allclose(got, x * 2.0 if n > 3 else x + 1.0, rtol=1e-6, atol=1e-7)
    assert len(traced) == 5 and len(lowered) == 2, (traced, lowered)
    # programs that read a size are not shared: a mean over the growing axis divides by a literal of its length, a
    # reshape by the traced length has its sizes in the rule; a sum over it is shared, and right at every length
    fs = [lambda x: x - x.mean(axis=0), lambda x: fnp.exp(x.reshape(x.shape[0] * 2, -1)), lambda x: x.sum(axis=0)]
    refs = [lambda x: x - x.mean(axis=0), lambda x: np.exp(x.reshape(x.shape[0] * 2, -1)), lambda x: x.sum(axis=0)]
    for f, ref in zip(fs, refs):
        f, lowered[:] = fa.jit(f), []
        for n in range(2, 7):
            x = np.linspace(-1, 1, 16 * n).reshape(n, 16)
            np.testing.assert_allclose(np.asarray(f(fa.device_put(x.astype(np.float32), dev))), ref(x), rtol=1e-5,
                                       atol=1e-6)
        assert len(lowered) == (1 if ref is refs[2] else 5), lowered


def test_mlx_programs_keep_reduced_axes_and_leave_broadcasts_to_mlx():
    dev = require_backend("mlx")[0]
    cache, q, row = (fa.device_put(a, dev) for a in _inputs())
    text = fa.jit(decode_step(fnp)).lower(cache, q, row).as_text()
    assert "reduce_max_keepdims" in text and "reduce_sum_keepdims" in text, text
    assert "broadcast_in_dim" not in text and "reshape" not in text, text
    # integers keep the rules' own reduction (MLX widens small integer sums) and their broadcast
    xi = fa.device_put(np.arange(12, dtype=np.int32).reshape(3, 4), dev)
    f = fa.jit(lambda x: x - x.max(axis=1, keepdims=True))
    text = f.lower(xi).as_text()
    assert "keepdims" not in text and "broadcast_in_dim" in text, text
    np.testing.assert_array_equal(np.asarray(f(xi)), np.asarray(xi) - np.asarray(xi).max(1, keepdims=True))
    # an operand broadcast against another broadcast (no operand of the output's shape) stays broadcast
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    g = fa.jit(lambda a, b: fnp.broadcast_to(a[:, None], (4, 3)) * fnp.broadcast_to(b[None, :3], (4, 3)))
    got = g(fa.device_put(x, dev), fa.device_put(x, dev))
    np.testing.assert_allclose(np.asarray(got), x[:, None].astype(np.float64) * x[None, :3], rtol=1e-6)


def _mlx_calls_of_tapes(shape):
    """``{(function name, dtype name): MLX calls a replay makes}`` of the eager tapes whose first array has
    ``shape``."""
    from fnarray.lowering.mlx import keepdims
    from fnarray.transforms import eager_jit
    calls = {}
    for key, p in eager_jit._programs._d.items():
        first = next((k for k in key[1:] if type(k).__name__ == "ShapedArray"), None)
        if p.tape is not None and first is not None and tuple(first.shape) == shape:
            calls[key[0].__name__, first.dtype.name] = sum(call is not keepdims.same for call, _ins, _single in p.tape.steps)
    return calls


def test_mlx_eager_tapes_keep_reduced_axes_and_leave_broadcasts_to_mlx(monkeypatch):
    # eighteenth session: the keepdims rewrite of the programs above, made on the eager tapes' steps (each of these
    # calls was two MLX calls, a reduction and its reshape, a broadcast and the operation); the float32 calls
    # reach their tapes where mlx's rules of any shape do not serve them (``test_mlx_shapeless.py``)
    dev = require_backend("mlx")[0]
    no_shapeless_rules(monkeypatch)
    x64 = np.random.default_rng(1).normal(size=(3, 11))
    x = fa.device_put(x64.astype(np.float32), dev)
    xi = fa.device_put(np.arange(33, dtype=np.int32).reshape(3, 11), dev)
    for _ in range(3):   # the first call records each key's tape, the second and third replay it
        d = fnp.exp(x - x.max(axis=-1, keepdims=True))
        got = d / d.sum(axis=-1, keepdims=True)
        got_i = xi - xi.max(axis=0, keepdims=True)
        np.testing.assert_allclose(np.asarray(got), np.exp(x64 - x64.max(-1, keepdims=True)) /
                                   np.exp(x64 - x64.max(-1, keepdims=True)).sum(-1, keepdims=True), rtol=1e-5)
        np.testing.assert_array_equal(np.asarray(got_i), np.asarray(xi) - np.asarray(xi).max(0, keepdims=True))
    calls = _mlx_calls_of_tapes((3, 11))
    want = {("max", "float32"): 1, ("subtract", "float32"): 1, ("sum", "float32"): 1, ("divide", "float32"): 1,
            ("max", "int32"): 2, ("subtract", "int32"): 2}   # integers: the rules' own reduction and broadcast
    assert {k: calls.get(k) for k in want} == want, calls
    # nineteenth session: a replay names a passed-on operand in place of calling ``keepdims.same`` (the reshape
    # after the keepdims reduction), and a broadcasting operator goes to the namespace's wrapper without
    # eager_ops' ``_miss`` (which learns nothing from two avals)
    m = x.max(axis=-1, keepdims=True)
    names = python_calls(lambda: x.max(axis=-1, keepdims=True)) + python_calls(lambda: x - m)
    assert "same" not in names and "_miss" not in names and "_keyed" not in names, names


def test_an_eager_growing_loop_on_jax_reaches_its_programs_without_misses(monkeypatch):
    """The eager step on jax:0 from the loop's second pass: each function's eager_jit program, and ``fnp.exp``
    (a unary function, whose entries a device of slow compiles never learns) straight to it, without a lookup of
    an entry or ``eager_ops._miss`` (main: 8 of the step's 44 Python calls; issue 28, twentieth session)."""
    from fnarray.devices import eager_ops
    dev = require_backend("jax")[0]
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = decode_step(fnp)
    steps = 2  # (each operation's each shape an XLA compile)

    def run(each=None):
        return decode_loop(step, cache0, q, row, steps, each)
    run()
    run()  # a key's second call promotes its program
    misses = []
    orig = eager_ops._miss
    monkeypatch.setattr(eager_ops, "_miss", lambda *a, **k: misses.append(1) or orig(*a, **k))
    frames = []
    cache, out = run(lambda c: frames.append(python_calls(lambda: step(c, q, row))))
    assert misses == [] and all("_remember" not in f for f in frames), frames
    # (39 from s25c-device: an uncommitted-operand check of the default device in eager_jit's wrapper and
    # `_keyed`, JAX's placement rule; 36 before)
    assert all(len(f) <= 39 for f in frames), [len(f) for f in frames]
    want_cache, want_out = _reference(steps)
    np.testing.assert_allclose(np.asarray(cache), want_cache, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-5, atol=1e-6)


def test_an_opencl_growing_loop_is_one_launch_a_step_and_a_few_builds(monkeypatch):
    """On a CPU OpenCL device (PoCL) each step is one launch (its attention kernel reads the concatenation's
    pieces: ``kernels/softmax_products.py``; small kernels left beside it are phases of one launch:
    ``kernels/phases.py``), and the lengths share one kernel source, the constants that follow the length its
    arguments (``kernels/int_args.py``): at most three programs built for five lengths (main: five, two kernels
    each; issue 28, twenty-first session); none when an earlier test in the process built that source."""
    import pyopencl as cl
    dev = cpu_opencl()
    state = dev.impl.state(dev)
    built = []
    orig_build = state._build
    monkeypatch.setattr(state, "_build", lambda text: built.append(text) or orig_build(text))
    cache0, q, row = (fa.device_put(a, dev) for a in _inputs())
    step = fa.jit(decode_step(fnp))
    decode_loop(step, cache0, q, row, STEPS)
    assert len(built) <= 3, len(built)   # none where an earlier test built the same source
    launches = []
    orig_enqueue = cl.enqueue_nd_range_kernel
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", lambda *a, **k: launches.append(1) or orig_enqueue(*a, **k))
    cache, out = decode_loop(step, cache0, q, row, STEPS)
    assert len(launches) == STEPS
    want_cache, want_out = _reference()
    np.testing.assert_allclose(np.asarray(cache), want_cache, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out), want_out, rtol=1e-5, atol=1e-6)
