"""``fnarray doctor`` reports every backend, survives broken drivers and exits 0."""

import io
import json
import subprocess
import sys

import pytest

import fnarray as fa
from fnarray.core.errors import BackendUnavailable
from fnarray.devices import backend as B


@pytest.fixture
def broken_backends():
    saved_loaders, saved_backends, saved_errors = dict(B._LOADERS), dict(B._BACKENDS), dict(B._ERRORS)

    def crashes():
        raise RuntimeError("segfault-ish driver failure in clGetPlatformIDs")

    def unavailable():
        raise BackendUnavailable("backend 'jax' cannot start: no jaxlib for this platform")

    fa.register_backend("brokendrv", crashes, "apt-get install a-working-driver")
    fa.register_backend("jax", unavailable, "pip install 'fnarray[jax]'")
    yield
    B._LOADERS.clear(), B._LOADERS.update(saved_loaders)
    B._BACKENDS.clear(), B._BACKENDS.update(saved_backends)
    B._ERRORS.clear(), B._ERRORS.update(saved_errors)


def test_doctor_reports_unavailable_and_broken_backends(broken_backends):
    out = io.StringIO()
    rep = fa.doctor(file=out)
    text = out.getvalue()
    assert rep["backends"]["numpy"]["usable"]
    assert not rep["backends"]["jax"]["usable"]
    assert "no jaxlib for this platform" in rep["backends"]["jax"]["reason"]
    assert "pip install 'fnarray[jax]'" in text
    assert not rep["backends"]["brokendrv"]["usable"]
    assert "segfault-ish driver failure" in rep["backends"]["brokendrv"]["reason"]
    assert "numpy:0" in text and "usable" in text
    # jax is gone from the usable devices, numpy is still first
    assert [str(d) for d in fa.devices(all_backends=True)][0] == "numpy:0"
    assert all(d.backend != "jax" for d in fa.devices(all_backends=True))


def test_doctor_json_and_exit_code():
    r = subprocess.run([sys.executable, "-m", "fnarray", "doctor", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep) >= {"system", "libraries", "hardware", "drivers", "backends", "default_device"}
    assert rep["backends"]["numpy"]["usable"]
    for name, e in rep["backends"].items():
        assert e["usable"] or e["reason"], name
    from fnarray.devices.backend import get_backend
    for name, e in rep["backends"].items():   # log2 on jax:0 was said to fall back to numpy: it is decomposed
        for d in e.get("devices", ()):
            declared = get_backend(name).expected_decompositions
            assert d["falls_back"]["decomposed"] == sorted(declared), (name, d)
            assert not declared & set(d["falls_back"]["primitives"]), (name, d["falls_back"])
