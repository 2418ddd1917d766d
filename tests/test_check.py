"""fa.check: every device against numpy:0, and a test-only backend that is wrong on purpose."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import primitives as P
from fnarray.devices.backend import Device, unregister_backend
from fnarray.lowering.numpy.backend import NumpyBackend, NumpyLowered


def _off_by_one_mul(fn, which):
    """``fn``'s outputs, with 1 added to those at positions ``which``: what a buggy ``mul`` kernel gives."""
    def run(bufs):
        return [o + np.ones((), o.dtype) if k in which else o for k, o in enumerate(fn(bufs))]
    return run


class _WrongLowered(NumpyLowered):
    def compile(self):
        exe = super().compile()
        made_by_mul = {o for e in self.program.eqns if e.primitive is P.mul for o in e.outputs}
        which = {k for k, v in enumerate(self.program.outvars) if v in made_by_mul}
        return _off_by_one_mul(exe, which) if which else exe


class _WrongMulBackend(NumpyBackend):
    """numpy:0 semantics, except that every program with a ``mul`` comes out 1 too large."""

    name = "wrongdev"

    def __init__(self):
        super().__init__()
        self._devices = [Device("wrongdev", 0, "cpu", "a backend that gets mul wrong on purpose")]

    def lower(self, program, device, donate=()):
        return _WrongLowered(program, device)

    def eager_fast(self, primitive, params, in_avals, device):
        exe = super().eager_fast(primitive, params, in_avals, device)
        return _off_by_one_mul(exe, {0}) if primitive is P.mul else exe


@pytest.fixture
def wrongdev():
    fa.register_backend("wrongdev", _WrongMulBackend)
    try:
        yield
    finally:
        unregister_backend("wrongdev")


def _f(x):
    return {"a": x + 1.0, "b": x * 3.0, "c": fnp.sum(x)}


def test_check_names_the_wrong_backend_and_leaf(wrongdev):
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    report = fa.check(_f, x, devices=["numpy:0", "wrongdev:0"])
    assert not report.ok
    bad = report.first_failure
    assert bad.device == "wrongdev:0" and bad.mode == "eager" and bad.bad_leaf == "['b']"
    assert bad.max_abs == pytest.approx(1.0, rel=1e-6)
    rows = {(r.device, r.mode): r for r in report.rows}
    assert rows[("numpy:0", "eager")].ok and rows[("numpy:0", "jit")].ok
    assert not rows[("wrongdev:0", "jit")].ok and rows[("wrongdev:0", "jit")].bad_leaf == "['b']"
    text = str(report)
    assert "first disagreement: wrongdev:0 (eager), output leaf ['b']" in text
    assert "MISMATCH at ['b']" in text


def test_check_agrees_on_every_device_and_reports_nan_agreement(device):
    x = np.array([0.5, 1.0, 4.0, -1.0], np.float32)   # log(-1) is NaN everywhere

    def g(a):
        return fnp.log(a) * 2.0, fnp.exp(a) / 3.0
    report = fa.check(g, x, devices=[device])
    assert report.ok, str(report)
    assert all(r.nan_ok and r.inf_ok for r in report.rows)
    assert {r.mode for r in report.rows} == {"eager", "jit"}
    assert report.leaves == ["[0]", "[1]"]


def test_check_reports_fallbacks():
    from test_devices import _TestDevBackend  # no sin
    backend = _TestDevBackend()
    fa.register_backend("testdev", lambda: backend)
    try:
        report = fa.check(lambda a: fnp.sin(a) + 1.0, np.ones(3, np.float32), devices=["testdev:0"])
        assert report.ok, str(report)
        assert all(any("sin (float32)" in f for f in r.fallback) for r in report.rows)
    finally:
        unregister_backend("testdev")


def test_check_nan_disagreement_is_a_mismatch():
    from fnarray._check import CheckRow, _compare
    row = CheckRow("x", "eager")
    _compare(row, [("o", np.array([1.0, np.nan], np.float32))], [("o", np.array([1.0, 2.0], np.float32))], None, None)
    assert not row.ok and not row.nan_ok and row.bad_leaf == "o"


def test_check_command_line(tmp_path):
    (tmp_path / "mymod.py").write_text(textwrap.dedent("""
        import numpy as np
        import fnarray as fa
        import fnarray.numpy as fnp

        @fa.check.example(np.arange(4, dtype=np.float32))
        def step(x):
            return fnp.tanh(x) * 2.0

        def undeclared(x):
            return x
    """))
    import os
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    r = subprocess.run([sys.executable, "-m", "fnarray", "check", "mymod:step", "--device", "numpy:0",
                        "--device", "jax:0"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every device agrees with numpy:0" in r.stdout and "jax:0" in r.stdout
    r = subprocess.run([sys.executable, "-m", "fnarray", "check", "mymod:undeclared"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "example_args" in r.stderr


def test_check_command_exit_statuses(tmp_path):
    """0: every device agrees; 1: a device disagrees; 2: a usage error, as `check --help` documents."""
    (tmp_path / "exitmod.py").write_text(textwrap.dedent("""
        import numpy as np
        import fnarray as fa
        import fnarray.numpy as fnp

        @fa.check.example(np.arange(4, dtype=np.float32))
        def agrees(x):
            return fnp.tanh(x) * 2.0

        @fa.check.example(np.array([-3e-39, 4.0], dtype=np.float32))
        def disagrees(x):   # a subnormal operand: NaN on numpy:0, -0.0 on jax:0 (XLA flushes it; README)
            return fnp.sqrt(x)
    """))
    import os
    env = dict(os.environ, PYTHONPATH=os.getcwd())

    def run(*argv):
        r = subprocess.run([sys.executable, "-m", "fnarray", "check", *argv], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
        return r.returncode, r.stdout + r.stderr

    code, out = run("--help")
    assert code == 0 and "0 when every device agrees" in " ".join(out.split()) and "2 on a usage error" in out
    assert run("exitmod:agrees", "--device", "numpy:0")[0] == 0
    code, out = run("exitmod:disagrees", "--device", "numpy:0", "--device", "jax:0")
    assert code == 1, out
    code, out = run("no_such_module:f")
    assert code == 2 and "no module named 'no_such_module'" in out, out
    code, out = run("exitmod:no_such_function")
    assert code == 2 and "no attribute 'no_such_function'" in out and "agrees" in out, out
    code, out = run("exitmod:agrees", "--device", "nosuchdevice:0")
    assert code == 2 and "nosuchdevice:0" in out and "usable devices: numpy:0" in out, out
    code, out = run("exitmod")
    assert code == 2 and "expected module:function" in out, out
