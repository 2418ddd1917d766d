"""mlx:0's eager calls of any shape straight to MLX (``fnarray.lowering.mlx.shapeless``) against the keyed path.

Every rule's result is compared with the same call on the keyed path (the rules switched off: each new shape's
primitives, records and tapes) and with NumPy in float64: values, aval (shape, dtype, weak type), device and
committed flag. The rule must be what served the call (no tape, no primitive bound), and every case it does not
take (another dtype, a weak type, a rank promotion, an error, a keyword at another value) must reach the keyed
path, which raises its own errors. A decode loop's step, whose shapes grow, is counted in Python calls.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.devices import memory, shapeless
from fnarray.lowering.mlx import shapeless as mlx_shapeless
from fnarray.transforms import eager_jit
from helpers import decode_step, no_shapeless_rules, python_calls, require_backend

RNG = np.random.default_rng(21)
A = RNG.standard_normal((3, 5)).astype(np.float32)
A[0, :3] = np.inf, np.nan, -0.0  # (NaN propagates, -0.0 keeps its sign, as on the keyed path)
B = RNG.standard_normal((5, 4)).astype(np.float32)
ROW = RNG.standard_normal((1, 5)).astype(np.float32)
COL = RNG.standard_normal((3, 1)).astype(np.float32)
C3 = RNG.standard_normal((2, 3, 5)).astype(np.float32)

# name -> (call, operands): each served by a rule on mlx:0
CASES = {
    "exp": (lambda a: fnp.exp(a), (A,)),
    "tanh": (lambda a: fnp.tanh(a), (A,)),
    "negative": (lambda a: -a, (A,)),
    "subtract broadcast": (lambda a, c: a - c, (A, COL)),
    "divide broadcast": (lambda a, r: fnp.divide(a, r), (A, ROW)),
    "multiply same": (lambda a, b: a * b, (A, A + 1)),
    "maximum": (lambda a, r: fnp.maximum(a, r), (A, ROW)),
    "matmul": (lambda a, b: a @ b, (A, B)),
    "T": (lambda a: a.T, (A,)),
    "transpose axes": (lambda c: fnp.transpose(c, (2, 0, 1)), (C3,)),
    "concatenate": (lambda a, r: fnp.concatenate([a, r, a], axis=0), (A, ROW)),
    "concatenate -1": (lambda a, c: fnp.concatenate((a, c), -1), (A, COL)),
    "sum keepdims": (lambda a: a.sum(axis=-1, keepdims=True), (A,)),
    "sum all": (lambda a: fnp.sum(a), (A,)),
    "max axis": (lambda a: fnp.max(a, 0), (A,)),
    "min axes": (lambda a: fnp.min(a, axis=(0, 1), keepdims=True), (A,)),
}
REFERENCE = {
    "exp": np.exp, "tanh": np.tanh, "negative": np.negative, "subtract broadcast": np.subtract,
    "divide broadcast": np.divide, "multiply same": np.multiply, "maximum": np.maximum, "matmul": np.matmul,
    "T": np.transpose, "transpose axes": lambda c: np.transpose(c, (2, 0, 1)),
    "concatenate": lambda a, r: np.concatenate([a, r, a], 0), "concatenate -1": lambda a, c: np.concatenate((a, c), -1),
    "sum keepdims": lambda a: a.sum(-1, keepdims=True), "sum all": np.sum, "max axis": lambda a: a.max(0),
    "min axes": lambda a: a.min((0, 1), keepdims=True),
}


@pytest.fixture
def dev():
    d = require_backend("mlx")[0]
    if id(d) not in shapeless.SERVED:
        pytest.skip("mlx:0 runs on a GPU stream here: its eager calls take the keyed path")
    return d


def _check(got, want, device, committed):
    assert got.aval == want.aval and got.device is device and got.committed == committed
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_equals_the_keyed_path_and_numpy(name, dev, monkeypatch):
    call, operands = CASES[name]
    for committed in (True, False):
        with fa.default_device(dev):  # (placed there; uncommitted, the operation runs on the default device)
            xs = [fa.device_put(a, dev) if committed else fnp.asarray(a) for a in operands]
            tapes = eager_jit.cache_info()["tapes"]
            frames = python_calls(lambda: call(*xs))
            got = call(*xs)
            assert "bind" not in frames and eager_jit.cache_info()["tapes"] == tapes, frames
            if name in ("T", "matmul", "sum keepdims"):  # ``ArrayImpl``'s methods ask the rule itself (no wrapper)
                assert frames[2] == "method" and "f" not in frames, frames
            with monkeypatch.context() as m:
                no_shapeless_rules(m)
                want = call(*xs)
        _check(got, want, dev, committed)
        with np.errstate(all="ignore"):  # (inf - inf, 0 * inf: NaN on both sides)
            want64 = REFERENCE[name](*[a.astype(np.float64) for a in operands])
        np.testing.assert_allclose(np.asarray(got), want64, rtol=1e-5, atol=1e-6)


def test_calls_the_rules_do_not_take_reach_the_keyed_path(dev, monkeypatch):
    served = []

    def spy(rule):
        def f(args, kwargs):
            out = rule(args, kwargs)
            served.append(out is not None)
            return out
        return f
    for name, rule in list(shapeless.RULES.items()):
        monkeypatch.setitem(shapeless.RULES, name, spy(rule))
    F = RNG.standard_normal((3, 5)).astype(np.float32)
    x = fa.device_put(F, dev)
    big = fa.device_put(np.ones((memory.SMALL_BYTES // 4 + 1,), np.float32), dev)
    xi = fa.device_put(F.astype(np.int32), dev)
    keyed = [
        (lambda: fnp.exp(xi), np.exp(F.astype(np.int32))),  # another dtype
        (lambda: xi.sum(axis=0) + (xi @ xi.T)[0, 0], F.astype(np.int32).sum(0)  # (``ArrayImpl``'s methods too)
         + (F.astype(np.int32) @ F.astype(np.int32).T)[0, 0]),
        (lambda: x - fa.device_put(F[0], dev), F - F[0]),  # a rank promotion
        (lambda: fnp.sum(x, axis=1, dtype=fnp.float32), F.sum(1)),  # a keyword at another value than its default
        (lambda: fnp.exp(big), np.full(big.shape, np.e)),  # past memory.SMALL_BYTES
        (lambda: fnp.concatenate([x], axis=0), F),  # one array
    ]
    for call, want in keyed:
        np.testing.assert_allclose(np.asarray(call()), want, rtol=1e-6)
    assert served and not any(served), served
    # errors are the keyed path's own
    with pytest.raises(Exception, match="matmul|contract|dimension"):
        x @ x
    with pytest.raises(Exception, match="axis"):
        fnp.sum(x, axis=2)
    with pytest.raises(Exception, match="axis|repeated"):
        fnp.max(x, axis=(0, 0))
    with pytest.raises(Exception):
        fnp.concatenate([x, fa.device_put(B, dev)], axis=0)
    with pytest.raises(TypeError):
        fnp.sum(x, 1, axis=1)
    # a weak type is left to the keyed path (its result keeps the weak type)
    w = fnp.asarray(2.0)
    assert w.weak_type and fnp.exp(fa.device_put(w, dev)).weak_type
    assert not any(served), served


def test_a_record_under_way_takes_no_rule(dev):
    """Inside a wrapped function's recorded first call (``eager_tape.record``) the namespace's calls take the
    keyed path, so that their executables are recorded: the function gets its tape from the record (no trace)."""
    f = eager_jit._wrap(lambda a: fnp.exp(a - a.max(axis=-1, keepdims=True)), "tests")
    x = fa.device_put(RNG.standard_normal((2, 9)).astype(np.float32), dev)
    tapes = eager_jit.cache_info()["tapes"]
    want = np.exp(np.asarray(x, np.float64) - np.asarray(x, np.float64).max(-1, keepdims=True))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-6)
    assert eager_jit.cache_info()["tapes"] == tapes + 1


def test_a_growing_decode_step_is_a_few_python_calls_an_operation(dev):
    """The decode step of ``benchmarks/programs.py`` on a cache of a length no call made: each of its nine
    operations one rule (issue 28, twenty-first session: 1044-1250 Python calls a first call on main, ~75 on a
    key's second call; here 52 either way, counted alone; twenty-second session: 40 on new shapes, 18 on the same
    ones, with ``x @ y``, ``x.T``, ``x.sum`` asking the rules themselves and the operands' avals known; twenty-fourth:
    ``fnp.exp`` is its operator's method, 40 and 23, the second call writing the operators' last hits), with the
    values of NumPy in float64."""
    step = decode_step(fnp)
    q = fa.device_put(RNG.standard_normal((1, 5)).astype(np.float32), dev)
    row = fa.device_put(ROW, dev)
    cache = fa.device_put(RNG.standard_normal((11, 5)).astype(np.float32), dev)
    first = python_calls(lambda: step(cache, q, row))
    second = python_calls(lambda: step(cache, q, row))
    assert len(first) <= 40 and len(second) <= 26, (len(first), len(second))
    assert "bind" not in first and "_miss" not in first and "_early" not in first, first
    # a length served before, after another one (a growing loop's later passes): every rule finds the call by its
    # operands' avals (``_SERVED_CALLS``: twenty-third session), no operand tested and no shape computed again
    longer = fnp.concatenate([cache, row], axis=0)
    step(longer, q, row)
    again = python_calls(lambda: step(cache, q, row))
    tests = {"_plain", "_plain_aval", "_aval", "_pair", "broadcast_same_rank", "_concatenate_new"}
    assert len(again) <= 24 and not tests & set(again), again
    for c in (longer, cache):
        got_cache, got = step(c, q, row)
        want_cache, want = decode_step(np)(*(np.asarray(a, np.float64) for a in (c, q, row)))
        np.testing.assert_array_equal(np.asarray(got_cache), want_cache.astype(np.float32))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    mlx_shapeless._forget()  # (the interned and known avals emptied: the rules test the operands again)
    got_cache, got = step(cache, q, row)
    want_cache, want = decode_step(np)(*(np.asarray(a, np.float64) for a in (cache, q, row)))
    np.testing.assert_array_equal(np.asarray(got_cache), want_cache.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_a_repeated_aval_takes_the_last_hit(dev):
    """A loop whose shapes repeat: an operator's rule of one elementwise function becomes its last hit at its second
    call on the same avals, as ``eager_ops``' learned entries (``-x``, ``x * y``, a broadcasting ``x - m``: the
    operator's method alone; a growing loop's calls, each on new avals, write no last hit), and ``x.T`` and ``@``
    skip their checks for the avals they served last; the values are NumPy's."""
    x = fa.device_put(RNG.standard_normal((4, 6)).astype(np.float32), dev)
    y = fa.device_put(RNG.standard_normal((4, 6)).astype(np.float32), dev)
    m = x.max(axis=-1, keepdims=True)
    calls = {"x * y": lambda: x * y, "-x": lambda: -x, "x - m": lambda: x - m, "x @ y.T": lambda: x @ y.T}
    for f in calls.values():
        f()
    assert python_calls(calls["-x"])[2:] == ["_shapeless", "rule"]  # (one call on these avals: the rule)
    for f in calls.values():
        f()
    frames = {k: python_calls(f) for k, f in calls.items()}
    assert frames["x * y"] == frames["-x"] == frames["x - m"] == ["<lambda>", "method"], frames
    assert len(frames["x @ y.T"]) <= 7 and "_plain" not in frames["x @ y.T"], frames
    x64, y64, m64 = (np.asarray(a, np.float64) for a in (x, y, m))
    for k, want in (("x * y", x64 * y64), ("-x", -x64), ("x - m", x64 - m64), ("x @ y.T", x64 @ y64.T)):
        np.testing.assert_allclose(np.asarray(calls[k]()), want, rtol=1e-6, atol=1e-6)
    # one aval served with other static arguments and operand orders (each its own entry), twice each
    for _ in range(2):
        for axis, keepdims in ((-1, True), (-1, False), (0, True), (None, False), (1, False)):
            np.testing.assert_allclose(np.asarray(x.sum(axis=axis, keepdims=keepdims)),
                                       x64.sum(axis=axis, keepdims=keepdims), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(m - x), m64 - x64, rtol=1e-6, atol=1e-6)
        for axis in (0, -1, 1):
            np.testing.assert_array_equal(np.asarray(fnp.concatenate([x, y], axis=axis)),
                                          np.concatenate([x64, y64], axis=axis).astype(np.float32))
