"""fa.debug.print / fa.debug.callback under every transform, and config.debug_nans / debug_infs.

References: Python loops over NumPy float64 values (what each call must see, in order), analytic
gradients, and the line numbers of this file (where the NaN is made).
"""

import inspect
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import primitives as P
from fnarray.core.errors import FallbackWarning, UnsupportedOnDevice
from fnarray.core.passes import dce
from fnarray.devices import placement


def _put(x, device):
    return fa.device_put(fnp.asarray(np.asarray(x, np.float32)), device)


@pytest.fixture(autouse=True)
def _no_fallback_warning():
    # A host callback runs on the host by design: it must never warn as a fallback does.
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield


def test_print_jit_vmap_one_line_per_example_in_order(device, capsys):
    xs = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)

    def f(x, s):
        fa.debug.print("x={x} s={}", s, x=x * 2.0)
        return x + s

    out = fa.jit(fa.vmap(f, in_axes=(0, None)))(_put(xs, device), _put(10.0, device))
    expected = "".join(f"x={row * 2.0} s={np.float32(10.0)}\n" for row in xs)
    assert capsys.readouterr().out == expected
    np.testing.assert_allclose(np.asarray(out), xs + 10.0)


def test_nested_vmap_calls_in_index_order(device):
    seen = []
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = fa.vmap(fa.vmap(lambda x: fa.debug.callback(lambda v: seen.append(float(v)), x) or x), in_axes=1)
    fa.jit(f)(_put(xs, device))
    assert seen == [float(v) for v in xs.T.reshape(-1)]  # outer vmap over columns first, then rows


def test_callback_under_grad_sees_primals_and_changes_nothing(device):
    seen = []
    x = np.array([0.5, -1.0, 2.0], np.float32)

    def loss(x):
        y = fnp.sin(x)
        fa.debug.callback(lambda v: seen.append(np.array(v, np.float64)), y)
        return fnp.sum(y * y)

    for g in (fa.grad(loss), fa.jit(fa.grad(loss)), fa.grad(fa.jit(loss))):
        seen.clear()
        out = g(_put(x, device))
        np.testing.assert_allclose(np.asarray(out), 2 * np.sin(x) * np.cos(x), rtol=1e-5, atol=1e-6)
        assert len(seen) == 1, "one call, in the forward pass"
        np.testing.assert_allclose(seen[0], np.sin(x.astype(np.float64)), rtol=1e-5)


def test_print_inside_scan_while_fori_cond(device):
    seen = []

    def rec(tag):
        return lambda *v: seen.append((tag,) + tuple(float(a) for a in v))

    def f(xs, n):
        def body(c, x):
            fa.debug.callback(rec("scan"), c, x)
            return c + x, c

        c, _ = fa.scan(body, 0.0, xs)

        def wbody(k):
            fa.debug.callback(rec("while"), k)
            return k + 1

        k = fa.while_loop(lambda k: k < n, wbody, 0)
        t = fa.fori_loop(0, 2, lambda i, a: (fa.debug.callback(rec("fori"), i, a), a * 2.0)[1], c)
        r = fa.cond(c > 1.0, lambda v: (fa.debug.callback(rec("cond"), v), v + 1.0)[1], lambda v: v, t)
        return r, k

    xs = np.array([0.5, 1.0, 2.0], np.float32)
    r, k = fa.jit(f)(_put(xs, device), fa.device_put(fnp.asarray(2), device))
    expected, c = [], 0.0  # the same program as a Python loop
    for x in xs:
        expected.append(("scan", c, float(x)))
        c += float(x)
    expected += [("while", 0.0), ("while", 1.0)]
    t = c
    for i in range(2):
        expected.append(("fori", float(i), t))
        t *= 2.0
    expected.append(("cond", t))
    assert seen == expected
    assert float(r) == t + 1.0 and int(k) == 2


def test_callback_in_scan_under_grad(device):
    seen = []

    def loss(w):
        def body(c, x):
            fa.debug.callback(lambda v: seen.append(float(v)), c)
            return c * w + x, c
        c, _ = fa.scan(body, 1.0, fnp.asarray([1.0, 2.0], dtype=fnp.float32))
        return c

    g = fa.jit(fa.grad(loss))(_put(3.0, device))
    # c0 = 1, c1 = w + 1, c2 = w (w + 1) + 2: dc2/dw = 2 w + 1
    assert float(g) == pytest.approx(7.0)
    assert seen == [1.0, 4.0]


def test_effect_survives_dead_code_elimination():
    def f(x):
        fa.debug.print("{}", x)
        return x * 2.0

    prog = fa.make_ir(f)(np.float32(1.0))
    fa.check_program(prog)
    pruned, _ = dce(prog, [False])
    assert [e.primitive for e in pruned.eqns] == [P.debug_callback]


def test_eager_print_and_pytree_arguments(capsys):
    fa.debug.print("{a} {b[0]} {c}", a=fnp.asarray([1, 2]), b=(np.float32(0.5),), c="text")
    assert capsys.readouterr().out == "[1 2] 0.5 text\n"
    with pytest.raises(TypeError, match="format string"):
        fa.debug.print(1, 2)


def test_browser_export_names_the_callback(tmp_path):
    pytest.importorskip("wgpu")

    def f(x):
        fa.debug.print("{}", x)
        return x + 1.0

    with pytest.raises(UnsupportedOnDevice, match="debug_callback.*fnarray.debug.print"):
        fa.export.webgpu(f, np.ones(3, np.float32), path=tmp_path / "bundle")


# ------------------------------------------------------------------------------------------------ NaN


def _line_of(text):
    src, start = inspect.getsourcelines(_nan_fun)
    return start + next(i for i, s in enumerate(src) if text in s)


def _nan_fun(x):
    y = x * 2.0
    z = fnp.log(y - 3.0)  # the NaN is made here
    return fnp.sum(z + 1.0)  # not exp(z): Mesa folds exp(log(v)) to v on webgpu (see the report)


@pytest.fixture
def debug_nans():
    fa.config.debug_nans = True
    try:
        yield
    finally:
        fa.config.debug_nans = False


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_debug_nans_names_primitive_and_line(device, debug_nans, mode):
    g = fa.jit(_nan_fun) if mode == "jit" else _nan_fun
    with pytest.raises(FloatingPointError) as err:
        g(_put([1.0, 2.0], device))
    msg = str(err.value)
    assert "(nan) encountered in log at " in msg
    assert f"test_debug.py:{_line_of('fnp.log')}:" in msg


def test_debug_nans_does_not_blame_a_nan_from_the_inputs(device, debug_nans):
    x = _put([np.nan, 1.0], device)
    np.testing.assert_equal(np.asarray(fa.jit(lambda v: v * 2.0 + 1.0)(x)), [np.nan, 3.0])
    np.testing.assert_equal(np.asarray(x * 2.0), [np.nan, 2.0])


def test_debug_infs(device):
    fa.config.debug_infs = True
    try:
        with pytest.raises(FloatingPointError, match=r"\(inf\) encountered in exp"):
            fa.jit(lambda v: fnp.exp(v) + 1.0)(_put([1.0, 100.0], device))
        fa.jit(lambda v: fnp.log(v))(_put([-1.0], device))  # a NaN is not an inf
    finally:
        fa.config.debug_infs = False


def test_flag_off_leaves_the_call_path_as_it_was():
    x = fnp.ones(3)
    f = fa.jit(lambda v: v + 1.0)
    f(x)
    (off,) = f._fast.values()
    exe_off = off.exe
    assert placement.debug_check is None
    fa.config.debug_nans = True
    try:
        f(x)
        assert placement.debug_check is not None
        (on,) = f._fast.values()
        assert on.exe is not exe_off
    finally:
        fa.config.debug_nans = False
    f(x)
    (again,) = f._fast.values()
    assert again.exe is exe_off and placement.debug_check is None


def test_debug_nans_from_the_environment():
    import os
    import subprocess
    import sys
    code = ("import fnarray as fa, fnarray.numpy as fnp\n"
            "try:\n    fa.jit(lambda v: fnp.sqrt(v))(fnp.asarray([-1.0]))\n"
            "except FloatingPointError as e:\n    print('raised:', str(e).split(' at ')[0])\n")
    env = dict(os.environ, FNARRAY_DEBUG_NANS="1", FNARRAY_DEVICE="numpy:0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "raised: invalid value (nan) encountered in sqrt", out.stderr[-2000:]


def test_debug_nans_inside_a_loop_names_the_loop_and_its_line(device, debug_nans):
    def f(xs):
        return fa.scan(lambda c, x: (c + fnp.log(x), c), 0.0, xs)[0]  # the scan line
    line = inspect.getsourcelines(f)[1] + 1
    for g in (f, fa.jit(f)):
        with pytest.raises(FloatingPointError, match=rf"in scan at .*test_debug.py:{line}:.*inside the scan's body"):
            g(_put([1.0, -1.0], device))
