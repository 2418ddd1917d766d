"""Array's fast operators (fnarray/devices/eager_ops.py) against the general path they shortcut.

Every case runs three ways: the operator's first call (the general path, which then makes an entry), its
second call (the entry, where the case has one) and ``Array``'s own operator (always the general path).
The three must agree on the value's bits, dtype, weak type, shape, committed flag and device, on the
error's type and message, and on the warnings a user sees. The full table (14 binary operators and unary
minus, 15 dtypes, Python floats and ints of awkward values, arrays of the same aval) runs on numpy:0; a
smaller one on every other device.
"""

from __future__ import annotations

import math
import operator
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.devices import eager_ops, placement
from helpers import no_shapeless_rules, python_calls, run_threads


@pytest.fixture(autouse=True)
def _entries_everywhere(monkeypatch):
    """The operators' entries on every device: mlx's float32 calls take its rules of any shape otherwise
    (``fnarray.devices.shapeless``, compared with the keyed path in ``test_mlx_shapeless.py``)."""
    no_shapeless_rules(monkeypatch)

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
    "ne": operator.ne,
    "radd": lambda x, s: s + x, "rsub": lambda x, s: s - x, "rmul": lambda x, s: s * x,
    "rtruediv": lambda x, s: s / x,
}
FLOATS = (2.5, -0.0, 0.0, math.nan, math.inf, 1e6, 1e300, 0.1)
INTS = (3, -7, 0, 300, 2**31, -2**31 - 1, 2**70)


def _general(code, x, *other):
    """``Array``'s own operator: the namespace's function through ``bind``, never the fast path."""
    return getattr(fa.Array, eager_ops._DUNDER[code])(x, *other)


def _outcome(fn):
    """What a user can observe of ``fn()``: its result (or error) and its warnings."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.lowering\.numpy")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.devices\.eager_ops")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.devices\.placement")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.transforms\.eager_tape")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.transforms\.tape_source")
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001 (the error is what is compared)
            res = ("error", type(e), str(e))
        else:
            if r is NotImplemented:
                res = ("NotImplemented",)
            else:
                v = np.asarray(r)
                if v.dtype.kind in "fc":  # a NaN's sign and payload are not values (XLA folds them its way)
                    v = np.where(np.isnan(v), np.array(np.nan, v.dtype), v)
                res = ("ok", r.dtype, r.weak_type, r.shape, r.committed, str(r.device), v.tobytes())
    return res, sorted((str(x.category), str(x.message)) for x in w)


def _same(got, general, what):
    """One outcome, and no warning the general path does not give. A repeated call may give fewer: from its
    second call on, a function's call runs as one jitted program (fnarray.transforms.eager_jit) whose
    constants were converted once, when it was traced (as Python shows a warning once per place anyway)."""
    assert got[0] == general[0], what
    assert set(got[1]) <= set(general[1]), what


def _operand_values(d):
    if dtypes.is_bool(d):
        return np.array([True, False, True, False, False])
    if dtypes.is_int(d):
        info = np.iinfo(d)
        return np.array([info.min, -3 if info.min else 0, 0, 5, info.max], dtype=d)
    vals = np.array([0.0, -0.0, np.nan, np.inf, 1.5])
    if dtypes.is_complex(d):
        vals = vals + 1j * np.array([1.0, -2.0, 0.0, np.nan, 0.5])
    return vals.astype(d)


def _key(code, x, other):
    if other is None:
        return (code, x.aval)
    return (code, x.aval, type(other))  # an array operand: ArrayImpl (its aval must equal x's)


def _check(code, x, other, learned):
    """The first call, the second and the general path agree; ``learned`` lists the keys whose kind of case
    succeeded before (an entry serves every value of its kind once one succeeded through the general path)."""
    fn = BINARY[code] if other is not None else operator.neg
    args = () if other is None else (other,)
    first = _outcome(lambda: fn(x, *args))
    second = _outcome(lambda: fn(x, *args))
    general = _outcome(lambda: _general(code, x, *args))
    what = f"{code} of {x.aval} on {x.device} with {other!r:.40}"
    _same(first, general, what)
    _same(second, general, what)
    key = _key(code, x, other)
    if _eligible(code, x, other) and general[0][0] == "ok":
        learned.add(key)
    entry = placement._eager_d.get(key if placement._eager_d.get(key, None) is None
                                   or placement._eager_d[key].device is x.device else key + (id(x.device),))
    made = entry is not None and entry.device is x.device and entry.generation == fa.config.generation
    assert made == (key in learned), f"{what}: entry {entry}, expected {key in learned}"


def _eligible(code, x, other) -> bool:
    """Which kinds of case get an entry (the rules of eager_ops, restated independently)."""
    aval = x.aval
    d = aval.dtype
    if code in ("truediv", "rtruediv"):
        prim_ok = dtypes.is_inexact(d)
    elif code in ("eq", "ne"):
        prim_ok = True
    elif code in ("lt", "le", "gt", "ge"):
        prim_ok = not dtypes.is_complex(d)
    else:
        prim_ok = not dtypes.is_bool(d)
    if aval.weak_type or not prim_ok:
        return False
    if other is None:
        # A device with a slow compiler (XLA) compiles no second program for a unary case: the whole-function
        # program of fnarray.transforms.eager_jit serves it.
        return x.device.impl.capabilities(x.device).eager_programs != "first_call"
    if isinstance(other, fa.Array):
        return not code.startswith("r") and other.aval == aval and other.device == x.device
    return dtypes.scalar_operand_dtype(d, type(other)) is not None


def _others(code, x, d):
    others = list(FLOATS) + list(INTS) + [fnp.asarray(_operand_values(d)[::-1].copy()), True, 1 + 2j,
                                          fnp.asarray(2.0)]
    if not code.startswith("r"):
        others.append(np.float32(2.0))  # np.float32(2.0) + x is NumPy's own operator, not the array's
    return others


@pytest.fixture(autouse=True)
def _fresh_cache():
    placement._eager_cache.clear()
    yield


@pytest.mark.parametrize("code", list(BINARY))
def test_binary_operators_match_the_general_path_numpy(code):
    learned: set = set()
    for d in dtypes.ALL_DTYPES:
        x = fnp.asarray(_operand_values(d))
        for other in _others(code, x, d):
            _check(code, x, other, learned)
    assert learned  # every operator has fast cases


def test_an_overflowing_int_raises_the_general_error_after_an_entry_exists():
    x = fnp.asarray(np.arange(3, dtype=np.int32))
    assert np.asarray(x + 1).tolist() == [1, 2, 3]
    assert ("add", x.aval, int) in placement._eager_d
    with pytest.raises(OverflowError) as fast:
        x + 2**31
    with pytest.raises(OverflowError) as general:
        _general("add", x, 2**31)
    assert str(fast.value) == str(general.value)
    assert "astype" in str(fast.value) and "[-2147483648, 2147483647]" in str(fast.value)  # says what to do


@pytest.mark.enable_x64
def test_unary_minus_matches_the_general_path_numpy():
    learned: set = set()
    for d in dtypes.ALL_DTYPES:
        _check("neg", fnp.asarray(_operand_values(d)), None, learned)
    assert len(learned) == len(dtypes.ALL_DTYPES) - 1  # all but bool
    w = fnp.asarray(2.0)  # weak: the general path, which keeps it weak
    assert (-w).weak_type and _outcome(lambda: -w) == _outcome(lambda: _general("neg", w))


def test_operators_match_the_general_path(device):
    """The parity selection on every device: float32 and int32, Python scalars and arrays."""
    learned: set = set()
    for d in (dtypes.float32, dtypes.int32):
        x = fa.device_put(fnp.asarray(_operand_values(d)), device)
        y = fa.device_put(fnp.asarray(_operand_values(d)[::-1].copy()), device)
        codes = ("mul", "rsub", "truediv", "lt", "eq") if device.backend in ("opencl", "webgpu") else BINARY
        for code in codes:
            for other in (2.5, -0.0, math.nan, 3, 2**31, y):
                _check(code, x, other, learned)
        _check("neg", x, None, learned)
    assert learned


def test_placement_follows_the_operands(device):
    x = fnp.asarray(np.arange(4, dtype=np.float32))            # uncommitted, default device
    c = fa.device_put(np.arange(4, dtype=np.float32), device)  # committed to device
    for _ in range(2):
        assert not (x * 2.0).committed and (x * 2.0).device == x.device
        assert (c * 2.0).committed and (c * 2.0).device == device
        assert (c + c).committed and (-c).committed
    u = fa.device_put(fnp.asarray(np.ones(4, np.float32)), device)
    for _ in range(2):
        r = c * u
        assert r.committed and r.device == device


def test_entries_per_device_do_not_evict_each_other():
    pytest.importorskip("jax")
    a = fa.device_put(np.arange(4, dtype=np.float32), "numpy:0")
    b = fa.device_put(np.arange(4, dtype=np.float32), "jax:0")
    for _ in range(3):
        ra, rb = a * 2.0, b * 2.0
    assert str(ra.device) == "numpy:0" and str(rb.device) == "jax:0"
    key = ("mul", a.aval, float)
    assert placement._eager_d[key].device == a.device
    assert placement._eager_d[key + (id(b.device),)].device == b.device
    np.testing.assert_array_equal(np.asarray(ra), np.asarray(rb))


def test_inside_a_transformation_the_operation_is_staged():
    x = fnp.asarray(np.arange(3, dtype=np.float32))
    x * 2.0
    x * 2.0  # an entry exists
    prog = fa.make_ir(lambda y: x * 2.0 + y)(x)
    assert [e.primitive.name for e in prog.eqns] == ["mul", "add"]
    g = fa.grad(lambda s: fnp.sum(x * s))(2.0)
    np.testing.assert_allclose(np.asarray(g), 3.0)
    v = fa.vmap(lambda r: r * 2.0)(fnp.ones((2, 3), dtype=fnp.float32))
    np.testing.assert_array_equal(np.asarray(v), np.full((2, 3), 2.0, np.float32))


def test_a_donated_array_raises_the_general_error():
    x = fnp.asarray(np.arange(3, dtype=np.float32))
    x * 2.0
    x * 2.0
    y = fa.jit(lambda a: a + 1.0, donate_argnums=0)(x)
    with pytest.raises(RuntimeError, match="donated"):
        x * 2.0
    with pytest.raises(RuntimeError, match="donated"):
        y + x
    with pytest.raises(RuntimeError, match="donated"):
        _ = -x


def test_debug_nans_sees_fast_operations():
    x = fnp.asarray(np.array([0.0, 1.0], np.float32))
    x / 1.0
    x / 1.0
    old = fa.config.debug_nans
    fa.config.debug_nans = True
    try:
        with pytest.raises(FloatingPointError, match="div"):
            x / 0.0
    finally:
        fa.config.debug_nans = old
    r = x / 0.0
    assert np.isnan(np.asarray(r)[0])


def test_the_profiler_sees_fast_operations():
    x = fnp.asarray(np.arange(3, dtype=np.float32))
    x * 3.0
    x * 3.0
    with fa.profiler.trace() as prof:
        x * 3.0
    names = [r.name for r in prof.profile.records]
    assert "mul" in names, names


def test_a_fast_entry_keeps_the_primitives_entry_that_the_profiler_runs(device):
    """A loop that a fast entry serves never runs the primitive's own entry, which the general path (the
    profiler's eager apply) runs: the eager cache keeps it while the fast entry is cached, so after other
    operations churned the cache (8 entries here; the suite's 1024 in a long run) the warmed loop compiles nothing
    under the profiler (``placement._used_since``: a warmed jax:0 loop compiled again inside the trace)."""
    x = fa.device_put(np.arange(5, dtype=np.float32), device)
    for _ in range(2):
        y = x * 1.5
    with fa.profiler.trace():  # (the profiler's own first use on the device: webgpu's timestamp queries)
        y = x * 1.5
    key = ("mul", x.aval, float)
    entry = placement._eager_d.get(key + (id(x.device),)) or placement._eager_d.get(key)
    assert entry is not None and entry.device is x.device
    old = fa.config.eager_cache_size
    fa.config.eager_cache_size = 8
    try:
        for n in range(6, 22):  # reductions of their own (on numpy:0) fill the cache, while x * 1.5 is a hit
            fnp.sum(fa.device_put(np.arange(n, dtype=np.float32), "numpy:0"))
            y = x * 1.5
    finally:
        fa.config.eager_cache_size = old
    with fa.profiler.trace() as prof:
        y = x * 1.5
    kinds = [r.kind for r in prof.profile.records]
    assert "compile" not in kinds and "lower" not in kinds, kinds
    np.testing.assert_array_equal(np.asarray(y), np.arange(5, dtype=np.float32) * np.float32(1.5))


def test_clearing_the_eager_cache_clears_the_entries():
    x = fnp.asarray(np.arange(3, dtype=np.float32))
    x - 1.0
    assert ("sub", x.aval, float) in placement._eager_d
    placement._eager_cache.clear()
    assert ("sub", x.aval, float) not in placement._eager_d
    np.testing.assert_array_equal(np.asarray(x - 1.0), np.arange(3, dtype=np.float32) - 1)


def test_entries_are_bounded_by_the_eager_cache_size():
    old = fa.config.eager_cache_size
    fa.config.eager_cache_size = 6
    try:
        for n in range(1, 30):
            x = fnp.asarray(np.arange(n, dtype=np.float32))
            for _ in range(2):
                np.testing.assert_array_equal(np.asarray(x * 2.0 - x), np.arange(n, dtype=np.float32))
            assert len(placement._eager_cache) <= 6
    finally:
        fa.config.eager_cache_size = old
        placement._eager_cache.trim()


def test_operators_are_thread_safe():
    """Threads on shapes of their own and on a shared one, with a cache small enough to evict meanwhile."""
    old = fa.config.eager_cache_size
    fa.config.eager_cache_size = 8

    def work(k):
        rng = np.random.default_rng(k)
        for i in range(150):
            n = 1 + (k * 7 + i) % 5
            xn = rng.standard_normal(n).astype(np.float32)
            x = fnp.asarray(xn)
            got = np.asarray((x * 2.0 + x) / 3.0 - 1)
            np.testing.assert_array_equal(got, ((xn * np.float32(2.0) + xn) / np.float32(3.0)) - np.float32(1))
            assert np.asarray(x < 0.5).tolist() == (xn < 0.5).tolist()

    try:
        run_threads(work)
    finally:
        fa.config.eager_cache_size = old
        placement._eager_cache.trim()
    assert len(placement._eager_cache) <= old


def test_a_repeated_operation_takes_fewpython_calls():
    """Counted, not timed: a repeated ``x * 2.0`` is the operator, the NumPy call and the array's creation."""
    import sys
    x = fnp.asarray(np.arange(4, dtype=np.float32))
    x * 2.0
    x * 2.0
    calls = []

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            calls.append(frame.f_code.co_name if event == "call" else getattr(arg, "__name__", "?"))
    sys.setprofile(prof)
    try:
        x * 2.0
    finally:
        sys.setprofile(None)
    assert len(calls) <= 8, calls


NAMESPACE_OTHERS = (2.5, -0.0, math.nan, 1e300, 3, -7, 2**31, 2**70, True, 1 + 2j)


def _namespace_check(fn, args, what):
    general = _outcome(lambda: fn.__wrapped__(*args))
    for _ in range(2):  # the general path (which makes the entry), then the entry
        _same(_outcome(lambda: fn(*args)), general, what)


@pytest.mark.enable_x64
@pytest.mark.parametrize("name", sorted(eager_ops._NAMESPACE_BINARY))
def test_namespace_binary_functions_match_the_function_they_wrap_numpy(name):
    fn = getattr(fnp, name)
    served = 0
    for d in dtypes.ALL_DTYPES:
        x = fnp.asarray(_operand_values(d))
        y = fnp.asarray(_operand_values(d)[::-1].copy())
        for other in NAMESPACE_OTHERS + (y, [1, 2, 3, 4, 5], None, np.float32(2.0)):
            _namespace_check(fn, (x, other), f"{name}({x.aval}, {other!r:.30})")
            if type(other) in (float, int):
                _namespace_check(fn, (other, x), f"{name}({other!r:.30}, {x.aval})")
        code = eager_ops._NAMESPACE_BINARY[name][0]
        served += (code, x.aval, type(y)) in placement._eager_d
    assert served  # some dtypes take the entries


@pytest.mark.parametrize("name", sorted(eager_ops._NAMESPACE_UNARY))
def test_namespace_unary_functions_match_the_function_they_wrap_numpy(name):
    fn = getattr(fnp, name)
    served = 0
    for d in dtypes.ALL_DTYPES:
        x = fnp.asarray(_operand_values(d))
        _namespace_check(fn, (x,), f"{name}({x.aval})")
        served += (eager_ops._NAMESPACE_UNARY[name], x.aval) in placement._eager_d
    _namespace_check(fn, (fnp.asarray(0.5),), f"{name} of a weak array")
    _namespace_check(fn, (0.5,), f"{name} of a Python float")
    assert served


def test_namespace_functions_keep_their_names_and_aliases():
    assert fnp.multiply.__name__ == "multiply" and "Args:" in fnp.multiply.__doc__
    assert fnp.absolute is fnp.abs and fnp.arcsin is fnp.asin
    assert fnp.multiply.__wrapped__ is not fnp.multiply


def test_a_repeated_namespace_call_takes_the_fast_path():
    x = fnp.asarray(np.arange(4, dtype=np.float32))
    y = fnp.asarray(np.ones(4, dtype=np.float32))
    assert x.aval is y.aval  # placed arrays of one shape and dtype share their aval
    for _ in range(2):
        fnp.multiply(x, y), fnp.exp(x), fnp.subtract(1.0, x)
    for f in (lambda: fnp.multiply(x, y), lambda: fnp.exp(x), lambda: fnp.subtract(1.0, x)):
        assert len(python_calls(f)) <= 4, python_calls(f)


def test_an_evicted_entry_is_not_served_from_the_last_hit():
    x = fnp.asarray(np.arange(4, dtype=np.float32))
    for _ in range(3):
        x * x
    assert len(python_calls(lambda: x * x)) <= 2
    placement._eager_cache.clear()  # the entry goes, and with it the operator's last hit
    assert len(python_calls(lambda: x * x)) > 8  # the general path again (which makes a new entry)
    x * x  # the new entry becomes the last hit
    assert len(python_calls(lambda: x * x)) <= 2
    old = fa.config.eager_cache_size
    fa.config.eager_cache_size = 4
    try:
        for n in range(5, 15):  # other operations evict the entry
            z = fnp.asarray(np.arange(n, dtype=np.float32))
            z * z
            z * z
        assert ("mul", x.aval, type(x)) not in placement._eager_d
        assert len(python_calls(lambda: x * x)) > 8
    finally:
        fa.config.eager_cache_size = old
        placement._eager_cache.trim()
