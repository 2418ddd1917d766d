"""Shared pytest configuration: the ``device`` fixture and the rule for missing backends.

``device`` runs a test once per usable device (``fnarray.devices(all_backends=True)``: every backend's). A test that
needs a backend this machine lacks calls ``helpers.require_backend(name)``, which
skips with a reason starting ``"backend unavailable"``. CI sets
``FNARRAY_REQUIRE_ALL_BACKENDS=1``: such skips then count as failures, so that
nothing this machine can run is silently skipped (docs/design.md, "Testing").
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fnarray  # noqa: E402

from helpers import BACKEND_UNAVAILABLE  # noqa: E402


def pytest_configure(config):
    # fnarray silences NumPy's RuntimeWarnings about the pinned edge cases (1/0, casts) in its numpy
    # backend with a filter set at import; pytest restores the filters after collection, so repeat it.
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.lowering\.numpy")
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.devices\.eager_ops")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        devs = fnarray.devices(all_backends=True)
        metafunc.parametrize("device", devs, ids=[str(d) for d in devs])


def _require_all() -> bool:
    return os.environ.get("FNARRAY_REQUIRE_ALL_BACKENDS", "") not in ("", "0")


def _skip_reason(report) -> str:
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        reason = str(lr[2])
    else:
        reason = str(lr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and _require_all():
        reason = _skip_reason(report)
        if reason.startswith(BACKEND_UNAVAILABLE):
            report.outcome = "failed"
            report.longrepr = (f"{reason}\nFNARRAY_REQUIRE_ALL_BACKENDS=1 turns a skip for a missing backend, "
                               "driver or browser into a failure: install what the reason names.")
