"""The ``fnarray`` logger: ``FNARRAY_LOG``, and long steps (compiles, exports) reported while they run."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import fnarray as fa
from fnarray.core import log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fast_reports(monkeypatch, caplog):
    monkeypatch.setattr(log, "SLOW_S", 0.2)
    monkeypatch.setattr(log, "EVERY_S", 0.3)
    caplog.set_level(logging.INFO, logger="fnarray")
    return caplog


def test_a_long_step_reports_while_it_runs_and_when_it_ends(fast_reports):
    t0, wall0 = time.perf_counter(), time.time()
    with log.slow_step("compile: a test step"):
        time.sleep(1.2)
    elapsed = time.perf_counter() - t0
    records = [r for r in fast_reports.records if r.name == "fnarray"]
    lines = [r.getMessage() for r in records]
    running = [r.created - wall0 for r in records if r.getMessage().startswith("compile: a test step: still running")]
    # Reports due at 0.2 s, then every 0.3 s (0.2, 0.5, 0.8, 1.1 ...), each when the watchdog (awake every 0.25 s)
    # next looks: never before it is due, at most one per due time within the step (which a loaded machine can
    # stretch past 1.2 s), at least one (a watchdog held off for the whole step would be an idle scheduler's bug).
    assert 1 <= len(running) <= int((elapsed - 0.2) / 0.3) + 1, (elapsed, lines)
    assert all(at >= 0.2 + 0.3 * i - 0.01 for i, at in enumerate(running)), (running, lines)
    assert lines[-1].startswith("compile: a test step: done in") and float(lines[-1].split()[-2]) <= elapsed + 0.01
    assert not log._active


def test_a_short_step_logs_nothing_at_info(fast_reports):
    with log.slow_step("compile: quick"):
        pass
    assert not [r for r in fast_reports.records if "quick" in r.getMessage()]


def test_a_failing_step_says_so(fast_reports):
    with pytest.raises(ZeroDivisionError):
        with log.slow_step("export: broken"):
            time.sleep(0.3)
            1 / 0   # noqa: B018
    assert fast_reports.records[-1].getMessage().startswith("export: broken: failed in")


def test_compiles_and_exports_go_through_the_log(fast_reports, tmp_path, monkeypatch):
    monkeypatch.setattr(log, "SLOW_S", 0.0)     # every step counts as long here
    f = fa.jit(lambda x: x * 2.0 + 1.0, device="numpy:0")
    f(np.ones(3, np.float32))
    messages = [r.getMessage() for r in fast_reports.records]
    assert any(m.startswith("compile: compile for numpy:0: done in") for m in messages), messages
    pytest.importorskip("onnx", reason="the export half needs onnx (pip install -e '.[onnx]')")
    fa.export.onnx(lambda x: x * 2.0, np.ones(3, np.float32), path=str(tmp_path / "m.onnx"))
    messages = [r.getMessage() for r in fast_reports.records]
    assert any(m.startswith("export of <lambda> to ") and "(onnx): done in" in m for m in messages), messages


def test_fnarray_log_environment_variable():
    code = "import numpy as np, fnarray as fa; fa.jit(lambda x: x + 1.0)(np.ones(2, np.float32))"
    env = dict(os.environ, PYTHONPATH=ROOT, FNARRAY_LOG="debug")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "fnarray DEBUG: compile: compile for" in r.stderr, r.stderr
    env["FNARRAY_LOG"] = "loud"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "FNARRAY_LOG='loud': expected one of debug, info" in r.stderr, r.stderr
    env.pop("FNARRAY_LOG")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "fnarray" not in r.stderr, r.stderr
    with pytest.raises(ValueError, match="FNARRAY_LOG='x'"):
        log.configure_from_env("x")
