"""``benchmarks/first_call.py --breakdown`` cannot rot: a child answers with the first call's parts (here on
numpy:0, where no part is wrapped; opencl:0 and webgpu:0 when installed), and the driver prints a row per device
with a column per part. Times are not asserted (docs/performance.md has them)."""

from __future__ import annotations

import json
import math
import pathlib
import sys
import types

import pytest

import fnarray as fa

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.append(str(BENCH))
import first_call  # noqa: E402

KERNEL_PARTS = {"opencl": {"schedule", "render", "build", "launch"}, "webgpu": {"schedule", "render", "pipeline"}}


def _kernel_devices():
    return [str(d) for d in fa.devices(all_backends=True) if str(d) in ("opencl:0", "webgpu:0")]


@pytest.mark.parametrize("name", ["numpy:0", *_kernel_devices()])
def test_breakdown_child(name, capsys, monkeypatch):
    platform = name.split(":")[0]
    if platform in KERNEL_PARTS:   # the child wraps backend functions in place: undo after the test
        mod = __import__(f"fnarray.lowering.{platform}.backend", fromlist=["x"])
        for fn in ("render_opencl", "render_wgsl"):
            if hasattr(mod, fn):
                monkeypatch.setattr(mod, fn, getattr(mod, fn))
        for cls in ("OpenCLLowered", "_DeviceState", "WebGPULowered", "_GPU"):
            c = getattr(mod, cls, None)
            for meth in ("_schedule_now", "_build", "_new_pipeline"):
                if c is not None and meth in vars(c):
                    monkeypatch.setattr(c, meth, vars(c)[meth])
        if platform == "opencl":
            from fnarray.lowering.opencl import dispatch
            monkeypatch.setattr(dispatch.cl, "enqueue_nd_range_kernel", dispatch.cl.enqueue_nd_range_kernel)
    first_call.child_breakdown(name)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert math.isfinite(out["first_ms"]) and out["first_ms"] > 0
    assert {"wait", "other"} <= set(out["parts_ms"])
    assert set(out["parts_ms"]) - {"wait", "other"} <= KERNEL_PARTS.get(platform, set())
    if platform == "opencl":   # one program build for the whole jitted step, whatever its number of kernels
        assert out["counts"].get("build", 0) <= 1 and 1 <= out["counts"]["render"] <= out["counts"]["launch"], out


def test_breakdown_table(monkeypatch, capsys):
    answers = {"opencl:0": {"first_ms": 100.0, "parts_ms": {"build": 40.0, "wait": 50.0, "other": 10.0},
                            "counts": {"build": 1}},
               "webgpu:0": {"first_ms": 20.0, "parts_ms": {"pipeline": 15.0, "wait": 1.0, "other": 4.0},
                            "counts": {"pipeline": 7}}}

    def fake(cmd, **kw):
        return types.SimpleNamespace(returncode=0, stdout=json.dumps(answers[cmd[-1]]) + "\n", stderr="")
    monkeypatch.setattr(first_call.subprocess, "run", fake)
    first_call.main(["--breakdown"])
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"opencl:0", "webgpu:0"}
    assert "40 (  1)" in rows["opencl:0"] and "15 (  7)" in rows["webgpu:0"] and "—" in rows["webgpu:0"]
