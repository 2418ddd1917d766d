"""``benchmarks/programs.py`` cannot rot: every workload runs on tiny sizes, on numpy:0 and its raw sides.

Times are not asserted (docs/performance.md has them); what is: each workload returns its rows with finite
positive seconds for fnarray on numpy:0 and for raw JAX and raw MLX where installed, one real child process
answers the driver, and the driver's table has a row per (workload row, backend) with the ratios to the raw
library on jax:0's and mlx:0's rows and to numpy:0.
"""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.append(str(BENCH))  # after examples/: both have an llm.py
import programs  # noqa: E402

TINY = {
    "vae": dict(n=(64, 64), hidden=(8, 8), batch=(32, 32), nrow=(2, 2), test=(8, 8)),
    "transformer": dict(dim=(16, 16), context=(8, 8), batch=(2, 2), layers=(1, 1), steps=(1, 1)),
    "decode": dict(steps=(3, 3), width=(4, 4)),
    "jacobians": dict(functions=(5, 5), n=(3, 3)),
    "stack": dict(arrays=(20, 20)),
}


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(programs, "SIZES", TINY)


def _check(out):
    assert out and all(set(v) == {"first_s", "steady_s"} for v in out.values()), out
    for v in out.values():
        assert all(math.isfinite(t) and t > 0 for t in v.values()), out


@pytest.mark.parametrize("name", programs.WORKLOADS)
def test_workload_on_numpy(tiny, name):
    _check(getattr(programs, name)(programs._lib("fnarray", "numpy:0"), True))


RAW = [pytest.param(which, name, marks=[pytest.mark.slow] if (which, name) in SLOW else [])
       for SLOW in [{("jax", "vae"), ("jax", "jacobians")}]   # XLA compiles: 20-30 s under load
       for which in ("jax", "mlx") for name in ("vae", "decode_jit", "jacobians", "stack")]
RAW.append(pytest.param("mlx", "decode_shapeless"))   # (raw JAX's is its decode_jit: jax.jit has no shapeless)


@pytest.mark.parametrize("which,name", RAW)
def test_workload_raw(tiny, which, name):
    pytest.importorskip("mlx.core" if which == "mlx" else "jax")
    _check(getattr(programs, name)(programs._lib(which, None), True))


def test_child_process_answers():
    out = programs._one("fnarray", "numpy:0", "stack", True, timeout=300)
    assert "error" not in out, out
    _check(out)


def test_table(monkeypatch, capsys):
    def fake(which, device, name, quick, timeout, clock="wall"):
        if device == "webgpu:0":
            return {"error": "timeout 1 s"}
        base = {"numpy:0": 1.0, "jax:0": 2.0, "mlx:0": 3.0, "opencl:0": 4.0, None: 0.5}[device]
        return {"stack": {"first_s": base, "steady_s": base / 10}}
    monkeypatch.setattr(programs, "_one", fake)
    programs.main(["--workloads", "stack", "--backends", ",".join(programs.BACKENDS)])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| stack")]
    cells = {r[1].strip(): [c.strip() for c in r] for r in rows}
    assert list(cells) == list(programs.BACKENDS)
    assert cells["jax:0"][4:6] == ["4.00", "4.00"] and cells["jax:0"][7:9] == ["2.00", "2.00"]
    assert cells["mlx:0"][4] == "6.00" and cells["mlx:0"][6].startswith("mlx")
    assert cells["opencl:0"][4] == "—" and cells["opencl:0"][7] == "4.00"
    assert cells["webgpu:0"][2] == "—" and "timeout" in cells["webgpu:0"][9]


def test_bad_workload_exits():
    with pytest.raises(SystemExit):
        programs.main(["--workloads", "nope"])


def test_pocl31_script_parses():
    assert subprocess.run(["sh", "-n", os.fspath(BENCH / "pocl31.sh")]).returncode == 0
