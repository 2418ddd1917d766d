"""Test utilities: the NumPy float64 oracle, per-dtype tolerances and IR checks.

The oracle is independent of fnarray: values come from NumPy in float64 (or
complex128, or the exact integer dtype), dtypes from JAX's promotion rules
(``jax.numpy`` under ``jax.enable_x64``). It applies only the differences that
docs/design.md pins on purpose:

- 32-bit defaults: a *weak* result (one decided by Python scalars) takes the
  32-bit default of its kind, where 64-bit JAX would take the 64-bit one; integer
  inputs of floating functions give ``float32``;
- integer division and remainder by zero give 0;
- shifts by >= the bit width give 0 (or -1 for a negative arithmetic right shift);
- float -> int conversion saturates, NaN -> 0.
"""

from __future__ import annotations

import contextlib
import functools

import ml_dtypes
import numpy as np
import pytest

import fnarray as fa

__all__ = [
    "BACKEND_UNAVAILABLE", "require_backend", "needs_namespace", "tolerance", "jax_promote",
    "oracle_promote", "to_inexact", "reference", "assert_close", "assert_same", "check_traced",
    "eager_and_jit", "random_array", "on_device", "int_div_ref", "int_rem_ref", "shift_ref",
    "saturating_cast_ref", "ALL_DTYPES", "DTYPE_NAMES", "fallback_mode", "config_setting", "python_calls",
    "run_threads", "kernel_capabilities", "no_shapeless_rules", "decode_loop", "cpu_opencl", "assert_argmax",
]

BACKEND_UNAVAILABLE = "backend unavailable"


def no_shapeless_rules(monkeypatch) -> None:
    """Switch off the backends' eager rules of any shape (``fnarray.devices.shapeless``: mlx's float32 calls) for
    a test, so that its eager calls take the keyed path (records, tapes, programs) that it pins."""
    from fnarray.devices import eager_ops
    from fnarray.transforms import eager_jit
    monkeypatch.setattr(eager_jit, "_SHAPELESS", {})
    monkeypatch.setattr(eager_jit, "_SERVED", {})
    monkeypatch.setattr(eager_ops, "_SERVED", {})


def python_calls(fn) -> list:
    """The names of the Python functions ``fn()`` calls (``fn`` itself first), counted with
    ``sys.setprofile``: what the call-path tests bound, instead of timing."""
    import sys
    calls = []

    def prof(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def count_lowerings(monkeypatch, device) -> list:
    """A list that grows by one entry (the program's equation count) each time ``device``'s backend lowers a
    program: a jitted or eager call's whole program, or one primitive's where the eager path compiles one."""
    impl = device.impl
    lowered = []
    real = impl.lower

    def counting(program, dev, *args, **kwargs):
        lowered.append(len(program.eqns))
        return real(program, dev, *args, **kwargs)
    monkeypatch.setattr(impl, "lower", counting)
    return lowered


def fresh_eager_keys(monkeypatch) -> None:
    """Empty key caches of ``eager_jit`` for one test: an earlier test in this process (the file before it, or
    whatever an xdist worker ran) may have called the same functions on the same avals, so that a key's stage
    (general path, record, tape, program) would be that test's, not the one this test's calls give it."""
    from fnarray.core.cache import LRUCache, used_since
    from fnarray.transforms import eager_jit
    seen = LRUCache(eager_jit._seen_size)
    programs = LRUCache(eager_jit._programs_size, second_chance=used_since)
    for name, value in (("_seen", seen), ("_seen_d", seen._d), ("_programs", programs), ("_programs_d", programs._d)):
        monkeypatch.setattr(eager_jit, name, value)


def run_threads(work, n=4, timeout=60.0) -> None:
    """Run ``work(k)`` for ``k`` in ``range(n)`` in ``n`` threads started together; fail if one still runs after
    ``timeout`` seconds (a hang), and re-raise the first failure."""
    import threading
    barrier = threading.Barrier(n)
    errors = []

    def target(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 (re-raised in the calling thread below)
            errors.append(e)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"a thread still runs after {timeout} s"
    if errors:
        raise errors[0]


@contextlib.contextmanager
def config_setting(name, value):
    """``fa.config.<name>`` set to ``value`` for the block, and restored after it, also when the block raises."""
    old = getattr(fa.config, name)
    setattr(fa.config, name, value)
    try:
        yield
    finally:
        setattr(fa.config, name, old)


def fallback_mode(mode):
    """``fa.config.fallback`` set to ``mode`` ("error": an equation the device cannot run raises instead of
    running on numpy) for the block, and restored after it, also when the block raises."""
    return config_setting("fallback", mode)

# The dtypes fnarray has, spelled with NumPy / ml_dtypes (not with fnarray's own objects).
DTYPE_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
ALL_DTYPES = tuple(np.dtype(ml_dtypes.bfloat16) if n == "bfloat16" else np.dtype(n) for n in DTYPE_NAMES)
_BF16 = np.dtype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------------------------- skips


def require_backend(name: str):
    """The devices of backend ``name``; skips the test when the backend cannot start.

    The skip reason starts with ``"backend unavailable"``, which
    ``FNARRAY_REQUIRE_ALL_BACKENDS=1`` turns into a failure (see ``conftest.py``).
    """
    from fnarray.devices.backend import backend_error
    reason = backend_error(name)
    if reason is not None:
        pytest.skip(f"{BACKEND_UNAVAILABLE}: {reason}")
    return fa.devices(name)


def needs_namespace(*names: str) -> None:
    """Skip while a ``fnarray.numpy`` function that another module provides is not written yet."""
    missing = [n for n in names if not hasattr(fa.numpy, n)]
    if missing:
        pytest.skip(f"fnarray.numpy lacks {', '.join(missing)} (module in progress)")


# ------------------------------------------------------------------------------------- dtypes

_TOL = {
    np.dtype("float16"): (5e-3, 5e-3),
    _BF16: (4e-2, 4e-2),
    np.dtype("float32"): (2e-5, 2e-6),
    np.dtype("float64"): (1e-11, 1e-12),
    np.dtype("complex64"): (2e-5, 2e-6),
    np.dtype("complex128"): (1e-11, 1e-12),
}


def tolerance(dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for results of ``dtype``; ``(0, 0)`` for integers and bool."""
    return _TOL.get(np.dtype(dtype), (0.0, 0.0))


def _is_inexact(d) -> bool:
    d = np.dtype(d)
    return d.kind in "fc" or d == _BF16


_WEAK_TO_32 = {np.dtype("float64"): np.dtype("float32"), np.dtype("complex128"): np.dtype("complex64"),
               np.dtype("int64"): np.dtype("int32")}


@functools.lru_cache(maxsize=None)
def jax_promote(*operands) -> tuple[np.dtype, bool]:
    """JAX's (64-bit mode) result dtype and weak flag for ``operands``.

    Each operand is a NumPy dtype (a strong array of it) or a Python scalar (weak).
    """
    import jax
    import jax.numpy as jnp

    def f(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = jnp.add(out, x)
        return jnp.asarray(out)

    args = [jax.ShapeDtypeStruct((), d) if isinstance(d, np.dtype) else d for d in operands]
    with jax.enable_x64(True):
        if len(args) == 1 and not isinstance(operands[0], np.dtype):
            s = jax.eval_shape(lambda: jnp.asarray(operands[0]))
        else:
            s = jax.eval_shape(f, *args)
    return np.dtype(s.dtype), bool(s.weak_type)


def oracle_promote(*operands) -> tuple[np.dtype, bool]:
    """``jax_promote`` (computed with JAX's x64 on) as fnarray's setting gives it: with ``enable_x64`` off a weak
    result takes the 32-bit default, as JAX with x64 off; with it on, JAX's answer itself.

    The exception is a weak result that the arrays alone already give (uint64 with a signed
    integer: float64, weak, in JAX and in fnarray); Python scalars then do not narrow it.
    """
    d, weak = jax_promote(*operands)
    strong = tuple(o for o in operands if isinstance(o, np.dtype))
    if weak and not fa.config.enable_x64 and not (strong and jax_promote(*strong)[1]):
        d = _WEAK_TO_32.get(d, d)
    return d, weak


def index_dtype() -> np.dtype:
    """The dtype of indices (``argmax``, ``argsort``, ``nonzero``) and ``arange(n)``: the default integer, ``int32``
    (``int64`` with ``enable_x64`` on, as JAX)."""
    return np.dtype("int64" if fa.config.enable_x64 else "int32")


def to_inexact(d) -> np.dtype:
    """The dtype a floating function returns for input ``d``: integers and bool give float32 (64-bit integers
    float64 with x64 on, as JAX)."""
    d = np.dtype(d)
    if _is_inexact(d):
        return d
    return np.dtype("float64" if d.itemsize == 8 and fa.config.enable_x64 else "float32")


# ------------------------------------------------------------------------------------- values


def _wide(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    if _is_inexact(a.dtype):
        return a.astype(np.float64)
    return a


def reference(np_fn, *operands, dtype, compute_in=None):
    """``np_fn`` on NumPy ``operands``, computed wide, cast to ``dtype``.

    Floating results are computed in float64/complex128 (``compute_in`` overrides),
    integer and bool results in ``dtype`` itself (so wrap-around matches).
    """
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        if compute_in is not None:
            ops = [np.asarray(o).astype(compute_in) for o in operands]
        elif _is_inexact(dtype):
            ops = [_wide(o) if _is_inexact(np.asarray(o).dtype) else np.asarray(o).astype(
                np.complex128 if dtype.kind == "c" else np.float64) for o in operands]
        else:
            ops = [np.asarray(o) if np.asarray(o).dtype == np.bool_ else np.asarray(o).astype(dtype)
                   for o in operands]
        out = np.asarray(np_fn(*ops))
        return out.astype(dtype)


def int_div_ref(x, y):
    """Floor division of integers with ``x // 0 == 0`` (the pinned semantics)."""
    x, y = np.asarray(x), np.asarray(y)
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, 1, y).astype(y.dtype)
        return np.where(y == 0, 0, np.floor_divide(x, safe)).astype(np.result_type(x, y))


def int_rem_ref(x, y):
    """Python-style remainder of integers with ``x % 0 == 0``."""
    x, y = np.asarray(x), np.asarray(y)
    with np.errstate(all="ignore"):
        safe = np.where(y == 0, 1, y).astype(y.dtype)
        return np.where(y == 0, 0, np.remainder(x, safe)).astype(np.result_type(x, y))


def shift_ref(x, y, direction):
    """Shifts on Python ints: by >= the bit width (or < 0) give 0, or -1 for negative ``x`` shifted right."""
    x, y = np.asarray(x), np.asarray(y)
    d = x.dtype
    bits = d.itemsize * 8
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), d)
    for idx in np.ndindex(out.shape):
        xv = int(np.broadcast_to(x, out.shape)[idx])
        yv = int(np.broadcast_to(y, out.shape)[idx])
        if direction == "left":
            r = 0 if not 0 <= yv < bits else (xv << yv)
        elif not 0 <= yv < bits:
            r = -1 if xv < 0 else 0
        else:
            r = xv >> yv  # Python's >> is arithmetic; unsigned values are non-negative
        out[idx] = np.array(r & ((1 << bits) - 1), dtype=np.uint64).astype(np.dtype(f"u{d.itemsize}")).view(d)
    return out


def saturating_cast_ref(x, dtype):
    """Float -> int: truncate toward zero, clamp to the dtype's range, NaN -> 0."""
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    out = []
    for v in np.asarray(x, np.float64).ravel():
        if np.isnan(v):
            out.append(0)
        elif v >= info.max:
            out.append(info.max)
        elif v <= info.min:
            out.append(info.min)
        else:
            out.append(int(np.trunc(v)))
    return np.array(out, dtype=object).reshape(np.shape(x)).astype(dtype)


def random_array(rng: np.random.Generator, shape, dtype, low=-3.0, high=3.0) -> np.ndarray:
    """Random NumPy values of ``dtype``: uniform floats in ``[low, high)``, integers in ``[low, high]``."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(int(np.floor(low)), int(np.iinfo(dtype).min))
        hi = min(int(np.ceil(high)), int(np.iinfo(dtype).max))
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        part = np.float32 if dtype == np.complex64 else np.float64
        re, im = rng.uniform(low, high, shape).astype(part), rng.uniform(low, high, shape).astype(part)
        return (re + 1j * im).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


# ------------------------------------------------------------------------------------- checks


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, fa.Array):
        return np.asarray(x)
    return np.asarray(x)


def assert_close(actual, expected, dtype=None, *, rtol=None, atol=None, weak_type=None, msg=""):
    """``actual`` (an fnarray ``Array``) equals ``expected`` (NumPy) within the tolerance of its dtype.

    Checks the dtype (``dtype``, default ``expected.dtype``), the shape and, if
    given, the weak type. NaN matches NaN; integers and bools must be exact.
    """
    assert isinstance(actual, fa.Array), f"{msg}: expected an fnarray Array, got {type(actual).__name__}"
    expected = np.asarray(expected)
    want = np.dtype(dtype) if dtype is not None else expected.dtype
    assert actual.dtype == want, f"{msg}: dtype {actual.dtype}, expected {want}"
    assert actual.shape == expected.shape, f"{msg}: shape {actual.shape}, expected {expected.shape}"
    if weak_type is not None:
        assert actual.weak_type == weak_type, f"{msg}: weak_type {actual.weak_type}, expected {weak_type}"
    got = _as_numpy(actual)
    if _is_inexact(want):
        r, a = tolerance(want)
        r, a = (rtol if rtol is not None else r), (atol if atol is not None else a)
        np.testing.assert_allclose(_wide(got), _wide(expected.astype(want)), rtol=r, atol=a, equal_nan=True,
                                   err_msg=msg)
    else:
        np.testing.assert_array_equal(got, expected.astype(want), err_msg=msg)


def assert_argmax(logits, ids, atol, msg=""):
    """Each ``ids[t]`` is the argmax of the reference's ``logits[t]`` (float[T, V]), or within ``atol`` of its
    maximum: a near-tie that another backend's or driver's float32 rounding may break the other way (the
    reference's own margin, the top-2 gap, is then within the float tolerance). An id further below the maximum
    fails, naming the position, the id, the argmax and the gap."""
    logits, ids = np.asarray(logits, np.float64), np.asarray(ids)
    assert logits.shape == (len(ids), logits.shape[-1]), f"{msg}: logits {logits.shape} for {len(ids)} ids"
    gap = logits.max(axis=-1) - logits[np.arange(len(ids)), ids]
    bad = np.flatnonzero(gap > atol)
    assert not bad.size, (f"{msg}: id {ids[bad[0]]} at position {bad[0]} is {gap[bad[0]]:.3g} below the maximum "
                          f"(id {np.argmax(logits[bad[0]])}), more than the tolerance {atol}; ids {ids.tolist()}")


def assert_same(a, b, msg=""):
    """Two fnarray results agree exactly: dtype, shape, weak type and values (NaN == NaN)."""
    assert isinstance(a, fa.Array) and isinstance(b, fa.Array), msg
    assert (a.dtype, a.shape, a.weak_type) == (b.dtype, b.shape, b.weak_type), \
        f"{msg}: {a.dtype}{a.shape} weak={a.weak_type} vs {b.dtype}{b.shape} weak={b.weak_type}"
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=msg)


def decode_step(np_):
    """``benchmarks/programs.py``'s decode step in namespace ``np_`` (``fnarray.numpy`` or NumPy, the reference):
    ``step(cache, q, row) -> (cache with row appended, softmax(q @ cache.T) @ cache)``; its shapes grow by a row
    a call."""
    def step(cache, q, row):
        cache = np_.concatenate([cache, row], axis=0)
        sc = q @ cache.T
        e = np_.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    return step


def decode_loop(step, cache, q, row, steps, each=None):
    """``steps`` calls of a ``decode_step`` ``step``, the cache growing a row each (``each(cache)`` before each
    call); returns the last ``(cache, out)``."""
    for _ in range(steps):
        if each is not None:
            each(cache)
        cache, out = step(cache, q, row)
    return cache, out


def cpu_opencl():
    """The first OpenCL device where it is a CPU device (PoCL: ``matmul_tiling == "register"``); skips otherwise
    (merged launches, ``kernels/phases.py``, are for CPU OpenCL)."""
    dev = require_backend("opencl")[0]
    if dev.impl.capabilities(dev).matmul_tiling != "register":
        import pytest
        pytest.skip("merged launches are for CPU OpenCL devices (PoCL); this one is a GPU")
    return dev


def check_traced(f, *args, **kwargs):
    """Trace ``f`` with ``fa.make_ir`` and run the verifier on the program; returns the program."""
    prog = fa.make_ir(f)(*args, **kwargs)
    fa.check_program(prog)
    return prog


def eager_and_jit(f, *args):
    """``[f(*args), jit(f)(*args)]`` after checking that the traced program verifies."""
    check_traced(f, *args)
    return [f(*args), fa.jit(f)(*args)]


def on_device(value, device):
    """``value`` (NumPy array or scalar) as an fnarray array committed to ``device``."""
    return fa.device_put(fa.numpy.asarray(value), device)


@contextlib.contextmanager
def kernel_capabilities(device, **changes):
    """A kernel backend's device (opencl, webgpu) scheduled with its ``Capabilities`` changed by ``changes`` for
    the duration (a GPU's ``tiling_pays``, a small ``max_loop_iterations``...), restored after."""
    import dataclasses
    be = device.impl
    if device.backend == "opencl":
        state = be.state(device)
        old = state.caps
        state.caps = dataclasses.replace(old, **changes)
        try:
            yield
        finally:
            state.caps = old
    else:
        old = be.capabilities(device)
        be._caps = dataclasses.replace(old, **changes)
        try:
            yield
        finally:
            be._caps = old


def in_place_and_swapped_entries(cache):
    """Export entries sharing the state ``cache`` (float32[n, 4]): ``write(cache, x, pos)`` writes row ``x`` at
    ``pos`` (a ``dynamic_update_slice``, updated in place) and returns the new first row's sum; ``bump(cache,
    scale)`` returns the sum and ``cache * scale + 1`` (computed into the partner buffer, which swaps roles)."""
    import fnarray.numpy as fnp

    def write(cache, x, pos):
        new = fa.lax.dynamic_update_slice(cache, x, (pos, 0))
        return fnp.sum(new[:1]), new

    def bump(cache, scale):
        return fnp.sum(cache), cache * scale + 1.0

    return {"write": (write, cache, np.zeros((1, 4), np.float32), np.int32(0)),
            "bump": (bump, cache, np.float32(1))}
