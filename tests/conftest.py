"""Shared pytest configuration: the ``device`` fixture and the rule for missing backends.

``device`` runs a test once per usable device (``fnarray.devices(all_backends=True)``: every backend's). A test that
needs a backend this machine lacks calls ``helpers.require_backend(name)``, which
skips with a reason starting ``"backend unavailable"``. CI sets
``FNARRAY_REQUIRE_ALL_BACKENDS=1``: such skips then count as failures, so that
nothing this machine can run is silently skipped (docs/design.md, "Testing").

A parametrized matrix marked ``@pytest.mark.parity_subset(keep=f)`` runs whole on numpy:0 (the full-matrix tier)
and, on the other devices, only the cases where ``f(**params)`` is true (the parity tier); the rest are deselected.

64-bit dtypes: tests run with ``fnarray.config.enable_x64`` as the user gets it (off, as in JAX, unless
``FNARRAY_ENABLE_X64`` is set). A test that needs float64/int64 arrays (a NumPy-float64 oracle that checks the
dtype, float64 parity cases) turns it on with the marker ``@pytest.mark.enable_x64`` (on a test, a class, or a
module as ``pytestmark = pytest.mark.enable_x64``), or takes the ``x64`` fixture; either restores the setting
after the test. A test parametrized with a 64-bit dtype (``float64``, ``np.int64``, ``"complex128"``...) gets
the marker by itself. ``X64_MODULES`` lists the modules that still run entirely with x64 on.

Kernel backends: ``kdev`` runs a test once per kernel backend (opencl's and webgpu's first device, required as
above), and ``no_fallback`` makes an equation that the device cannot run raise instead of running on numpy; a
module whose every test needs it says ``pytestmark = pytest.mark.usefixtures("no_fallback")``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _share_xla_compiles() -> str | None:
    """Point JAX's persistent compilation cache at one folder for the whole run, made by the first process (the
    pytest-xdist controller; the workers it starts inherit ``FNARRAY_TESTS_XLA_CACHE``). Returns the folder when
    this process made it (to remove at the end), else ``None``.

    Half of the suite's XLA compiles are the same program compiled again: each ``device`` parametrization builds
    the same JAX oracle afresh (a new ``jax.jit(lambda ...)``), and jax:0 tests compile programs that other tests
    (or the other worker) already compiled. JAX keys its cache by the optimized program's text, so those become
    reads (``tests/test_attention.py``'s forward cases: 50 -> 29 s of CPU). Set through JAX's environment
    variables, read when ``jax`` is first imported (not before this point: ``fnarray`` imports it lazily).
    Tests of fnarray's own cache (``compilation_cache_dir``) repoint it for their process, as a user's would."""
    path = os.environ.get("FNARRAY_TESTS_XLA_CACHE")
    made = None
    if path is None:
        path = made = tempfile.mkdtemp(prefix="fnarray-tests-xla-")
        os.environ["FNARRAY_TESTS_XLA_CACHE"] = path
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", path)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return made


_XLA_CACHE_MADE = _share_xla_compiles()

import fnarray  # noqa: E402

from helpers import BACKEND_UNAVAILABLE, config_setting, fallback_mode, require_backend  # noqa: E402


#: Test modules that run every test with ``enable_x64`` on. They were written when 64-bit values were always
#: kept and compare float64/int64 results with NumPy in many places (finite differences in float64, float64
#: parity cases, ``np.float64`` inputs whose dtype they check); the switch (issue 25) came late, so these were
#: not yet gone through test by test. A module leaves this list once the tests in it that need 64-bit carry
#: ``@pytest.mark.enable_x64`` themselves and the rest pass with x64 off (the user's default): 47 of 52 have
#: (the backend suites mlx, opencl, webgpu, browser on 2026-12-07: 32-bit backends tested as users run them, now
#: that x64 on also makes Python scalars and defaults 64-bit). Left: the table-driven ones (ad_rules,
#: compositions, which crawls with x64 off, parity, fuzz, ports), not yet gone through.
X64_MODULES = frozenset({"test_ad_rules", "test_compositions", "test_fuzz", "test_parity", "test_ports"})


def _x64_on():
    """x64 on in this process and in the subprocesses a test starts (``FNARRAY_ENABLE_X64``), both restored."""
    env = os.environ.get("FNARRAY_ENABLE_X64")
    os.environ["FNARRAY_ENABLE_X64"] = "1"
    try:
        with config_setting("enable_x64", True):
            yield
    finally:
        if env is None:
            os.environ.pop("FNARRAY_ENABLE_X64", None)
        else:
            os.environ["FNARRAY_ENABLE_X64"] = env


@pytest.fixture(params=("opencl", "webgpu"), scope="module")
def kdev(request):
    """The first device of each kernel backend (the test runs once per backend; a missing one skips, which CI
    counts as a failure)."""
    return require_backend(request.param)[0]


@pytest.fixture
def no_fallback():
    """``fa.config.fallback = "error"`` for the test: a kernel backend must run every equation itself."""
    with fallback_mode("error"):
        yield


@pytest.fixture
def x64():
    """``fnarray.config.enable_x64`` on for the test, restored after it."""
    yield from _x64_on()


@pytest.fixture(autouse=True)
def _x64_marker(request):
    if request.node.get_closest_marker("enable_x64") is None:
        yield
    else:
        yield from _x64_on()


_64_BIT = frozenset(np.dtype(n) for n in ("float64", "int64", "uint64", "complex128"))


def _is_64_bit_dtype(v) -> bool:
    """Whether a test parameter names a 64-bit dtype (``np.float64``, ``np.dtype("int64")``, ``"complex128"``,
    ``fnarray.numpy.float64``)."""
    if not isinstance(v, (str, np.dtype, type)):
        return False
    d = getattr(v, "dtype", None)  # fnarray.numpy's scalar types carry their np.dtype
    try:
        return (d if isinstance(d, np.dtype) else np.dtype(v)) in _64_BIT
    except (TypeError, ValueError, SyntaxError):  # not a dtype (a string parameter such as "valid" or "a,b")
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """An ``X64_MODULES`` module is imported with x64 on: its module-level arrays are made as its tests expect."""
    if isinstance(collector, pytest.Module) and collector.path.stem in X64_MODULES:
        yield from _x64_on()
    else:
        yield


def pytest_collection_modifyitems(config, items):
    """``enable_x64`` on the tests of ``X64_MODULES`` and on every test parametrized with a 64-bit dtype (a
    ``float64`` parity case checks float64 results, which exist only with x64 on)."""
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in X64_MODULES:
            item.add_marker(pytest.mark.enable_x64)
        else:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if any(_is_64_bit_dtype(v) for v in params.values()):
                item.add_marker(pytest.mark.enable_x64)
    _deselect_outside_the_parity_subset(config, items)


def _deselect_outside_the_parity_subset(config, items):
    """The two test tiers of docs/design.md ("Testing") in one parametrized test: a test marked
    ``@pytest.mark.parity_subset(keep=...)`` runs every case of its matrix on the numpy backend and, on every other
    device, only the cases where ``keep(**params)`` (its parameters, ``device`` among them) is true; the others are
    deselected at collection (not skipped: ``FNARRAY_REQUIRE_ALL_BACKENDS`` stays about missing backends)."""
    kept, dropped = [], []
    for item in items:
        mark = item.get_closest_marker("parity_subset")
        params = getattr(getattr(item, "callspec", None), "params", {})
        device = params.get("device")
        if mark is None or device is None or device.backend == "numpy" or mark.kwargs["keep"](**params):
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config):
    # fnarray silences NumPy's RuntimeWarnings about the pinned edge cases (1/0, casts) in its numpy
    # backend with a filter set at import; pytest restores the filters after collection, so repeat it.
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.lowering\.numpy")
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.devices\.eager_ops")
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.devices\.placement")
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.transforms\.eager_tape")
    config.addinivalue_line("filterwarnings", r"ignore::RuntimeWarning:fnarray\.transforms\.tape_source")
    config.addinivalue_line("markers", "parity_subset(keep=f): the full parameter matrix on the numpy backend, on "
                            "other devices only the cases where f(**params) is true (docs/design.md's tiers)")
    config.addinivalue_line("markers", "enable_x64: run the test with fnarray.config.enable_x64 on (64-bit dtypes "
                            "kept), restored after it")


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


def pytest_unconfigure(config):
    if _XLA_CACHE_MADE is not None:
        shutil.rmtree(_XLA_CACHE_MADE, ignore_errors=True)


def pytest_runtest_logreport(report):
    """With ``FNARRAY_TEST_DURATIONS=<file>``, the run's main process (the xdist controller) appends one JSON line
    per test phase to the file (node id, phase, seconds, outcome): ``benchmarks/ci_time.py`` sums them by file,
    to find where CI's time goes (docs/internals.md, open work)."""
    path = os.environ.get("FNARRAY_TEST_DURATIONS")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        import json
        with open(path, "a") as f:
            f.write(json.dumps({"id": report.nodeid, "when": report.when, "seconds": report.duration,
                                "outcome": report.outcome}) + "\n")
