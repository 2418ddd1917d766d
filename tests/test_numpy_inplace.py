"""The numpy backend's generated code reuses dead temporaries (``out=``) without changing any value.

Each function is checked against the same expression in NumPy float64 (the independent reference),
that its inputs are left as they were, and, from the generated source, which equations write into a
temporary: never a program input, a program output, a view, or a value read later.
"""

import re

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp


def _source(f, *args):
    return fa.jit(f).lower(*args).as_text()


def _writes(src):
    """``{result name: overwritten name}`` of every ``out=`` line of a generated program."""
    return dict(re.findall(r"^\s+(v\d+) = \w+\(.*out=(v\d+)\)$", src, re.M))


def _check(f, ref, *xs):
    args = [fnp.asarray(x) for x in xs]
    before = [x.copy() for x in xs]
    got = fa.jit(f)(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = ref(*[x.astype(np.float64) for x in xs])
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-6, atol=1e-6)
    for a, b, x in zip(args, before, xs, strict=True):
        np.testing.assert_array_equal(np.asarray(a), b)
        np.testing.assert_array_equal(x, b)
    return got


def test_a_chain_reuses_its_temporaries_and_never_its_inputs():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 256)).astype(np.float32)

    def f(x, y):
        return fnp.tanh(x * 2.0 + y) * x - y / 3.0 + fnp.exp(-x)

    _check(f, lambda x, y: np.tanh(x * 2 + y) * x - y / 3 + np.exp(-x), x, y)
    src = _source(f, fnp.asarray(x), fnp.asarray(y))
    writes = _writes(src)
    assert len(writes) >= 4, src
    params = re.match(r"def program\((.*)\):", src).group(1).split(", ")
    assert not set(writes.values()) & set(params), src


def test_a_temporary_read_later_or_returned_is_not_overwritten():
    x = np.linspace(-2, 2, 64, dtype=np.float32)

    def f(x):
        t = x * 3.0
        u = t + 1.0          # t is read again below: u must not overwrite it
        v = fnp.sin(u) * t   # u is dead after this line: may be overwritten
        return v, t          # t is an output

    got = _check(f, lambda x: (np.sin(x * 3 + 1) * (x * 3), x * 3), x)
    np.testing.assert_allclose(np.asarray(got[1]), x.astype(np.float64) * 3, rtol=1e-6)


def test_a_temporary_with_a_view_is_not_overwritten():
    x = np.arange(12, dtype=np.float32)

    def f(x):
        t = x + 1.0
        r = fnp.reshape(t, (3, 4))        # a view of t's buffer
        s = fnp.exp(t * 0.1) - t          # t's last elementwise reader
        return r, s

    _check(f, lambda x: ((x + 1).reshape(3, 4), np.exp((x + 1) * 0.1) - (x + 1)), x)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.float64])
def test_other_dtypes_and_broadcasts(dtype):
    x = (np.arange(24).reshape(4, 6) % 5).astype(dtype)
    b = (np.arange(6) % 3 + 1).astype(dtype)

    def f(x, b):
        t = x * b            # broadcast operand b: t is (4, 6)
        return fnp.maximum(t + x, b) - t

    got = fa.jit(f)(fnp.asarray(x), fnp.asarray(b))
    want = np.maximum(x * b + x, b) - x * b
    np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64), rtol=1e-3)
    assert np.asarray(got).dtype == dtype


def test_scalars_and_loops():
    def body(i, c):
        return c * 0.5 + fnp.sin(c) * 0.1

    def f(x):
        s = x.sum() * 2.0 + 1.0          # rank-0 temporaries: never written into
        return fa.lax.fori_loop(0, 5, body, x) + s

    x = np.linspace(0, 1, 16, dtype=np.float32)
    c = x.astype(np.float64)
    for _ in range(5):
        c = c * 0.5 + np.sin(c) * 0.1
    _check(f, lambda x: c + (x.sum() * 2 + 1), x)
