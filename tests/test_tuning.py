"""Autotuning (``fnarray.lowering.kernels.tuning``, issue 28 item 4): the modes, the caches in memory and on
disk (a second process reuses a choice without timing), the configuration's errors, and every declared
choice of the kernel groups giving the same results within the documented tolerance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels import tuning
from fnarray.lowering.kernels.groups import base as base_group
from fnarray.lowering.kernels.groups import conv as conv_group
from fnarray.lowering.kernels.groups import dot as dot_group
from fnarray.lowering.kernels.groups import pallas as pallas_group
from fnarray.lowering.kernels.groups import quantized as quantized_group
from fnarray.lowering.kernels.groups import reduce as reduce_group
from fnarray.lowering.kernels.groups import register_tiles
from helpers import config_setting

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDS = [{"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}]
#: docs/internals.md, "Tunable choices": float32 results of any two choices agree within this
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def _fresh():
    tuning.clear()
    yield
    tuning.clear()


@pytest.fixture
def cache_dir(tmp_path):
    with config_setting("compilation_cache_dir", str(tmp_path / "cache")):
        yield tmp_path / "cache"


def _kernel_devices():
    return [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]


class Clock:
    """A measure whose candidate ``v`` takes ``v`` ms, except ``slow`` (100 ms) and ``broken`` (raises)."""

    def __init__(self, slow=(), broken=()):
        self.calls = []
        self.slow, self.broken = slow, broken

    def __call__(self, c):
        self.calls.append(c["v"])
        if c["v"] in self.broken:
            raise RuntimeError("does not build")
        return 0.1 if c["v"] in self.slow else c["v"] * 1e-3


# ------------------------------------------------------------------------------------------------- modes


def test_off_returns_the_default_and_never_times():
    clock = Clock()
    with config_setting("autotune", "off"):
        assert tuning.choose("dev", "sig", CANDS, clock, {"v": 3}) == {"v": 3}
        assert tuning.choose("dev", "sig", CANDS, clock, {"v": 3}, cost=lambda c: c["v"]) == {"v": 3}
    assert clock.calls == [] and tuning.stats()["measured"] == 0


def test_off_lowers_kernels_without_timing():
    for dev in _kernel_devices():
        with config_setting("autotune", "off"):
            x = fa.device_put(np.linspace(-3, 3, 1000, dtype=np.float32), dev)
            y = fa.jit(lambda x: fnp.tanh(x * 2.0 + 1.0) * x)(x)
            np.testing.assert_allclose(np.asarray(y), np.tanh(np.asarray(x, np.float64) * 2 + 1) * np.asarray(x),
                                       rtol=RTOL, atol=ATOL)
    assert tuning.stats()["measured"] == 0 and tuning.stats()["searches"] == 0


def test_full_times_every_candidate_and_keeps_the_fastest():
    clock = Clock(slow=(1,), broken=(2,))
    with config_setting("autotune", "full"):
        got = tuning.choose("dev", "sig", CANDS, clock, {"v": 1})
    assert got == {"v": 3}
    assert set(clock.calls) == {1, 2, 3, 4}
    (d,) = tuning.decisions()
    assert d.source == "full" and d.times['{"v":2}'] == float("inf")
    # reused from memory: no more timing
    n = len(clock.calls)
    with config_setting("autotune", "full"):
        assert tuning.choose("dev", "sig", CANDS, clock, {"v": 1}) == {"v": 3}
    assert len(clock.calls) == n and tuning.stats()["memory_hits"] == 1


def test_fast_uses_the_cost_model_or_the_default():
    clock = Clock()
    with config_setting("autotune", "fast"):
        assert tuning.choose("dev", "a", CANDS, clock, {"v": 4}) == {"v": 4}
        assert clock.calls == []
        # the two cheapest by the model (4 and 3) are timed; 3 is faster
        got = tuning.choose("dev", "b", CANDS, clock, {"v": 4}, cost=lambda c: -c["v"], fast_candidates=2)
    assert got == {"v": 3} and set(clock.calls) == {3, 4}


def test_fast_reuses_a_full_choice_but_full_does_not_reuse_a_fast_one():
    clock = Clock()
    with config_setting("autotune", "fast"):
        tuning.choose("dev", "s", CANDS, clock, {"v": 4}, cost=lambda c: -c["v"], fast_candidates=1)
    assert set(clock.calls) == {4}
    with config_setting("autotune", "full"):
        assert tuning.choose("dev", "s", CANDS, clock, {"v": 4}) == {"v": 1}
    n = len(clock.calls)
    with config_setting("autotune", "fast"):
        assert tuning.choose("dev", "s", CANDS, clock, {"v": 4}) == {"v": 1}
    assert len(clock.calls) == n


def test_a_cached_choice_no_longer_offered_is_searched_again():
    clock = Clock()
    with config_setting("autotune", "full"):
        assert tuning.choose("dev", "s", CANDS, clock, {"v": 4}) == {"v": 1}
        assert tuning.choose("dev", "s", CANDS[1:], clock, {"v": 4}) == {"v": 2}
    assert tuning.stats()["searches"] == 2


def test_devices_and_drivers_are_kept_apart():
    with config_setting("autotune", "full"):
        assert tuning.choose("dev A", "s", CANDS, Clock(), {"v": 4}) == {"v": 1}
        assert tuning.choose("dev B", "s", CANDS, Clock(slow=(1,)), {"v": 4}) == {"v": 2}
    dev = _kernel_devices()
    for d in dev:
        name, driver = tuning.device_identity(d)
        assert name and isinstance(driver, str)
        if d.backend == "opencl":
            assert driver  # the platform and driver versions


def test_bad_arguments_and_bad_configuration_values():
    with pytest.raises(tuning.TuningError, match="no candidates"):
        tuning.choose("dev", "s", [], Clock(), {"v": 1}, mode="full")
    with pytest.raises(tuning.TuningError, match="JSON"):
        tuning.choose("dev", "s", [{"v": object()}, {"v": 2}], Clock(), {"v": 1}, mode="full")
    with pytest.raises(ValueError, match="mode must be"):
        tuning.choose("dev", "s", CANDS, Clock(), {"v": 1}, mode="slow")
    with pytest.raises(ValueError, match=r"autotune \(env FNARRAY_AUTOTUNE\) must be one of"):
        fa.config.autotune = "fulll"
    with pytest.raises(ValueError, match="must be one of"):
        fa.config.update("autotune", True)
    assert fa.config.autotune in ("off", "fast", "full")
    with config_setting("autotune", " FULL "):
        assert fa.config.autotune == "full"
    env = dict(os.environ, PYTHONPATH=ROOT, FNARRAY_AUTOTUNE="sometimes")
    r = subprocess.run([sys.executable, "-c", "import fnarray"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "FNARRAY_AUTOTUNE" in r.stderr and "'sometimes'" in r.stderr


def test_a_mode_change_applies_to_later_lowerings_only(monkeypatch):
    devs = [d for d in _kernel_devices() if d.backend == "opencl"]
    if not devs:
        pytest.skip("backend unavailable: needs an opencl device")
    g = fa.config.generation
    seen = []
    _with_candidate(monkeypatch, "math", 1, seen)
    f = fa.jit(lambda x: fnp.tanh(x) * 3.0)
    x = fa.device_put(np.linspace(-2, 2, 999, dtype=np.float32), devs[0])
    with config_setting("autotune", "full"):
        f(x)
    assert fa.config.generation == g and len(seen) == 1
    with config_setting("autotune", "off"):
        np.testing.assert_allclose(np.asarray(f(x)), np.tanh(np.asarray(x, np.float64)) * 3, rtol=RTOL, atol=ATOL)
    assert len(seen) == 1  # the tuned executable is kept: no new lowering


# ------------------------------------------------------------------------------------------------- disk


def test_disk_cache_is_one_json_file_per_device(cache_dir):
    with config_setting("autotune", "full"):
        tuning.choose("dev A", "s1", CANDS, Clock(), {"v": 4})
        tuning.choose("dev A", "s2", CANDS, Clock(slow=(1,)), {"v": 4})
        tuning.choose("dev B", "s1", CANDS, Clock(), {"v": 4})
    files = sorted(p for p in os.listdir(cache_dir / "tuning") if p.endswith(".json"))
    assert len(files) == 2 and not [p for p in os.listdir(cache_dir / "tuning") if p.startswith(".tmp")]
    data = json.loads((cache_dir / "tuning" / files[0]).read_text())
    assert data["format"] == 1 and set(data["entries"]) in ({"s1", "s2"}, {"s1"})
    # a damaged file is ignored (searched again) and replaced
    for f in files:
        (cache_dir / "tuning" / f).write_text("{not json")
    tuning.clear()
    clock = Clock()
    with config_setting("autotune", "full"):
        assert tuning.choose("dev A", "s1", CANDS, clock, {"v": 4}) == {"v": 1}
    assert clock.calls


_CHOOSER = textwrap.dedent("""
    import sys
    from fnarray.lowering.kernels import tuning
    def measure(c):
        return c["v"] * 1e-3
    cands = [{"v": v} for v in (3, 1, 2)]
    for i in range(int(sys.argv[2])):
        tuning.choose("proc dev", f"{sys.argv[1]}-{i}", cands, measure, {"v": 3})
    print(tuning.stats()["measured"], tuning.stats()["disk_hits"])
""")


def test_a_choice_is_persisted_and_reused_by_a_second_process(tmp_path):
    script = tmp_path / "chooser.py"
    script.write_text(_CHOOSER)
    env = dict(os.environ, PYTHONPATH=ROOT, FNARRAY_CACHE_DIR=str(tmp_path / "cache"), FNARRAY_AUTOTUNE="full")
    first = subprocess.run([sys.executable, str(script), "s", "3"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    assert int(first.stdout.split()[0]) > 0
    second = subprocess.run([sys.executable, str(script), "s", "3"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "3"]


def test_two_processes_writing_at_once_keep_every_entry(tmp_path):
    script = tmp_path / "chooser.py"
    script.write_text(_CHOOSER)
    env = dict(os.environ, PYTHONPATH=ROOT, FNARRAY_CACHE_DIR=str(tmp_path / "cache"), FNARRAY_AUTOTUNE="full")
    procs = [subprocess.Popen([sys.executable, str(script), tag, "25"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    (path,) = [p for p in (tmp_path / "cache" / "tuning").iterdir() if p.suffix == ".json"]
    entries = json.loads(path.read_text())["entries"]
    assert set(entries) == {f"{t}-{i}" for t in "ab" for i in range(25)}
    assert all(e["choice"] == '{"v":1}' for e in entries.values())


_KERNELS = textwrap.dedent("""
    import sys
    import numpy as np
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.lowering.kernels import tuning
    dev = [d for d in fa.devices(all_backends=True) if str(d) == sys.argv[1]][0]
    x = fa.device_put(np.linspace(-3, 3, 5000, dtype=np.float32), dev)
    y = fa.jit(lambda x: fnp.tanh(x * 2.0 + 1.0) * x + 1.0)(x)
    s = tuning.stats()
    print(s["measured"], s["disk_hits"], " ".join(sorted(str(d.choice) for d in tuning.decisions())))
    np.save(sys.argv[2], np.asarray(y))
""")


def _run_script(script, dev, out, cache, mode, timeout=300):
    """``script dev out`` in a fresh process with ``cache`` as the cache folder and autotuning ``mode``: its
    printed words (measured, disk hits, the rest)."""
    env = dict(os.environ, PYTHONPATH=ROOT, FNARRAY_CACHE_DIR=str(cache), FNARRAY_AUTOTUNE=mode)
    done = subprocess.run([sys.executable, str(script), dev, str(out)], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.split(maxsplit=2)


@pytest.mark.parametrize("dev", [str(d) for d in _kernel_devices()])
def test_generated_kernels_tuned_in_one_process_are_reused_in_the_next(tmp_path, dev):
    script = tmp_path / "kernels.py"
    script.write_text(_KERNELS)
    cache = tmp_path / "cache"
    measured, disk_hits, *choices = _run_script(script, dev, tmp_path / "a.npy", cache, "full")
    assert int(measured) > 0 and int(disk_hits) == 0
    # Without the cached schedules, the second process schedules again and asks for every choice: from disk.
    shutil.rmtree(cache / "schedule", ignore_errors=True)
    measured2, disk_hits2, *choices2 = _run_script(script, dev, tmp_path / "b.npy", cache, "full")
    assert int(measured2) == 0 and int(disk_hits2) > 0 and choices2 == choices
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


_PRODUCT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.lowering.kernels import tuning
    dev = [d for d in fa.devices(all_backends=True) if str(d) == sys.argv[1]][0]
    a = np.linspace(-1, 1, 96 * 128, dtype=np.float32).reshape(96, 128)
    y = fa.jit(lambda a, b: fnp.maximum(a @ b, 0.0))(fa.device_put(a, dev), fa.device_put(a.T.copy(), dev))
    s = tuning.stats()
    blocks = [(d.source, d.choice) for d in tuning.decisions()
              if d.signature.startswith(("dot_block:", "dot_subgroup:"))]
    print(s["measured"], s["disk_hits"], json.dumps(blocks))
    np.save(sys.argv[2], np.asarray(y))
""")


@pytest.mark.parametrize("dev", [str(d) for d in _kernel_devices() if d.backend == "webgpu" and d.platform == "cpu"])
def test_a_product_block_chosen_by_full_tuning_is_reused_by_fast_in_the_next_process(tmp_path, dev):
    # The blocked product's outputs per work item (dot_group.BLOCK_TUNABLE: webgpu on a CPU adapter; its subgroup
    # form's SUBGROUP_TUNABLE where the adapter has subgroups): mode "full" times every block and keeps the choice
    # on disk; a second process in mode "fast" (which alone would take
    # the cost model's block untimed) reads it from there and times nothing.
    script = tmp_path / "product.py"
    script.write_text(_PRODUCT)
    cache = tmp_path / "cache"
    measured, disk_hits, blocks = _run_script(script, dev, tmp_path / "a.npy", cache, "full", timeout=600)
    ((source, choice),) = json.loads(blocks)
    assert int(measured) > 0 and int(disk_hits) == 0 and source == "full"
    shutil.rmtree(cache / "schedule", ignore_errors=True)
    measured2, disk_hits2, blocks2 = _run_script(script, dev, tmp_path / "b.npy", cache, "fast")
    assert int(measured2) == 0 and int(disk_hits2) > 0 and json.loads(blocks2) == [["disk", choice]]
    a = np.linspace(-1, 1, 96 * 128).reshape(96, 128)
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), np.maximum(a @ a.T, 0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


# ----------------------------------------------------------------------------- every candidate, same results


def _with_candidate(monkeypatch, kind, index, seen):
    """``tuning.choose`` replaced: for signatures of ``kind``, candidate ``index`` (or the last one)."""
    real = tuning.choose

    def forced(device, signature, candidates, measure, default, **kw):
        if signature.startswith(kind + ":"):
            seen.append(len(candidates))
            return candidates[min(index, len(candidates) - 1)]
        return real(device, signature, candidates, measure, default, mode="off")
    monkeypatch.setattr(tuning, "choose", forced)


def _tunable_cases():
    x = np.linspace(-4, 4, 3001, dtype=np.float32)
    a = np.random.default_rng(1).standard_normal((37, 70)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((70, 45)).astype(np.float32)
    xs = x.astype(np.float64)
    rows = np.random.default_rng(3).standard_normal((1100, 301)).astype(np.float32)
    r64 = rows.astype(np.float64)
    e = np.exp(r64 - r64.max(-1, keepdims=True))
    w_q, scales, biases = (np.asarray(v) for v in fa.quantize(b.T.copy()[:, :64], group_size=32, bits=4))
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=32, bits=4), np.float64)
    xc = np.random.default_rng(4).standard_normal((2, 8, 8, 6)).astype(np.float32)
    kc = np.random.default_rng(5).standard_normal((3, 3, 6, 20)).astype(np.float32)
    return {
        # 6 input features (a tail after the 4- or 8-step loop), 20 output features (a partial panel of every
        # width)
        "conv_register": (_conv_plus_one, (xc, kc), _conv_plus_one_want(xc, kc), conv_group.CONV_TUNABLE),
        "reduce": (lambda v: fa.nn.softmax(v, axis=-1) + fnp.max(v, axis=-1, keepdims=True), (rows,),
                   e / e.sum(-1, keepdims=True) + r64.max(-1, keepdims=True), reduce_group.REDUCE_TUNABLE),
        "map": (lambda x: fnp.tanh(x * 2.0 + 1.0) * x + fnp.exp(-x * x), (x,),
                np.tanh(xs * 2 + 1) * xs + np.exp(-xs * xs), base_group.MAP_TUNABLE),
        "math": (lambda x: fnp.tanh(x) + fnp.log1p(fnp.abs(x)) + fnp.sin(x) + fnp.erf(x), (x,),
                 np.tanh(xs) + np.log1p(np.abs(xs)) + np.sin(xs) + _erf(xs), tuning.MATH),
        "dot_register": (lambda a, b: fnp.maximum(a @ b + 1.0, 0.0), (a, b),
                         np.maximum(a.astype(np.float64) @ b + 1, 0), register_tiles.TUNABLE),
        # 6 rows: fewer than a subgroup's (8 on lavapipe), so the blocked form, not the subgroup one
        "dot_block": (lambda a, b: fnp.maximum(a @ b + 1.0, 0.0), (a[:6, :64].copy(), b[:64, :44].copy()),
                      np.maximum(a[:6, :64].astype(np.float64) @ b[:64, :44] + 1, 0), dot_group.BLOCK_TUNABLE),
        "dot_subgroup": (lambda a, b: fnp.maximum(a @ b + 1.0, 0.0), (a[:36, :64].copy(), b[:64, :44].copy()),
                         np.maximum(a[:36, :64].astype(np.float64) @ b[:64, :44] + 1, 0), dot_group.SUBGROUP_TUNABLE),
        "pallas_workgroup": (_pallas_rows_matmul, (a[:32], b[:, :32]), _pallas_rows_matmul_want(a[:32], b[:, :32]),
                             pallas_group.PALLAS_TUNABLE),
        "quantized_tile": (lambda a, w, s, c: fa.quantized_matmul(a, w, s, c, group_size=32, bits=4) + 1.0,
                           (a[:, :64].copy(), w_q, scales, biases), a[:, :64].astype(np.float64) @ wd.T + 1,
                           quantized_group.TILE_TUNABLE),
        # 37 rows: the subgroup prefill form on a CPU WebGPU adapter with subgroups
        "quantized_subgroup": (lambda a, w, s, c: fa.quantized_matmul(a, w, s, c, group_size=32, bits=4) + 1.0,
                               (a[:, :64].copy(), w_q, scales, biases), a[:, :64].astype(np.float64) @ wd.T + 1,
                               quantized_group.SUBGROUP_TUNABLE),
        "quantized_rows": (lambda a, w, s, c: fa.quantized_matmul(a, w, s, c, group_size=32, bits=4) + 1.0,
                           (a[:3, :64].copy(), w_q, scales, biases), a[:3, :64].astype(np.float64) @ wd.T + 1,
                           quantized_group.WIDE_TUNABLE),
    }


def _conv_plus_one(x, k):
    """A 3x3 SAME convolution (NHWC, HWIO) plus 1."""
    return fa.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + 1.0


def _conv_plus_one_want(x, k):
    """``_conv_plus_one`` in float64 NumPy (windows of the zero-padded input)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))   # n, y, x, c, a, b
    return np.einsum("nyxcab,abco->nyxo", win, k.astype(np.float64)) + 1


def _pallas_rows_matmul(a, b):
    """A Pallas kernel per block of 8 rows: softmax of the rows' products with ``b`` (a dot, a reduction)."""
    import fnarray.experimental.pallas as pl

    def kernel(a_ref, b_ref, o_ref):
        s = a_ref[...] @ b_ref[...]
        e = fnp.exp(s - fnp.max(s, axis=-1, keepdims=True))
        o_ref[...] = e / fnp.sum(e, axis=-1, keepdims=True)
    m, n = a.shape[0], b.shape[1]
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((m, n), a.dtype), grid=(m // 8,),
                          in_specs=[pl.BlockSpec((8, a.shape[1]), lambda i: (i, 0)), pl.BlockSpec(b.shape,
                                                                                                   lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((8, n), lambda i: (i, 0)))(a, b)


def _pallas_rows_matmul_want(a, b):
    s = a.astype(np.float64) @ b
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _erf(x):
    from math import erf
    return np.vectorize(erf)(x)


@pytest.mark.parametrize("kind", ["map", "math", "dot_register", "conv_register", "dot_block", "dot_subgroup",
                                  "reduce", "pallas_workgroup", "quantized_tile", "quantized_subgroup",
                                  "quantized_rows"])
def test_every_candidate_of_every_group_gives_the_same_results(monkeypatch, kind):
    fn, args, want, _ = _tunable_cases()[kind]
    ran = 0
    counts = []
    for dev in _kernel_devices():
        ref = None
        index = -1
        while True:
            index += 1
            seen = []
            _with_candidate(monkeypatch, kind, index, seen)
            with config_setting("autotune", "full"):
                got = np.asarray(fa.jit(lambda *a: fn(*a))(*[fa.device_put(v, dev) for v in args]))
            if not seen:
                break  # this device does not offer the choice (math on WGSL, register tiles off a CPU)
            ran += 1
            counts.append(seen[0])
            np.testing.assert_allclose(got, want, rtol=RTOL * 10, atol=ATOL * 10)
            if ref is None:
                ref = got
            np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
            if index >= seen[0] - 1:
                break
            assert index < 64
    if not ran:
        pytest.skip(f"no kernel device here offers the {kind} choice")
    assert ran >= max(counts)  # every candidate offered on some device ran


def test_declared_tables_make_candidates_with_the_default_first():
    default = {"per": 1, "wg": 64}
    cands = base_group.MAP_TUNABLE.candidates(default, {"workgroup_limit": 64})
    assert cands[0] == default and all(c["wg"] <= 64 for c in cands) and len(cands) == len(
        {json.dumps(c, sort_keys=True) for c in cands})
    tiles = register_tiles.TUNABLE.candidates(register_tiles.DEFAULT_TILE)
    assert tiles[0] == register_tiles.DEFAULT_TILE and all(c["rm"] * c["rn"] <= 64 for c in tiles)


# ------------------------------------------------------------------------------------------------ cost models

POCL30 = {"device": "cpu", "compiler": "pocl", "llvm": 14, "workgroup_limit": 4096}
POCL31 = {**POCL30, "llvm": 15}
MAP_DEFAULT = {"per": 1, "wg": 64, "guard": True}


def test_cost_models_pick_what_full_tuning_measured_on_each_pocl():
    with config_setting("autotune", "fast"):
        # PoCL 3.1 (LLVM 15) gathers the clamped loads: the per-item test; 3.0 keeps the once-per-group test
        assert tuning.modelled(base_group.MAP_TUNABLE, MAP_DEFAULT, POCL31) == {**MAP_DEFAULT, "guard": False}
        assert tuning.modelled(base_group.MAP_TUNABLE, MAP_DEFAULT, POCL30) == MAP_DEFAULT
        lanes = tuning.modelled(reduce_group.REDUCE_TUNABLE, {"lanes": 4, "wg": 64}, {**POCL30, "row": 1024})
        assert lanes == {"lanes": 8, "wg": 64}
        # a row shorter than 8 cannot take 8 accumulators (the table's validity rule): the best it allows
        assert tuning.modelled(reduce_group.REDUCE_TUNABLE, {"lanes": 4, "wg": 64}, {**POCL30, "row": 6}) == \
            {"lanes": 4, "wg": 64}
        tile = tuning.modelled(register_tiles.TUNABLE, register_tiles.DEFAULT_TILE,
                               {**POCL30, "rows": 1024, "cols": 1024})
        assert tile["rm"] * tile["rn"] == 64 and tile["uk"] == 8
    assert tuning.stats()["modelled"] == 3 and tuning.stats()["measured"] == 0


def test_the_conv_model_takes_wider_feature_blocks_where_they_fill_their_panels():
    # the 3x3 conv 32 -> 64 of vs_tinygrad.py: full tuning picked 4 x 16 or 2 x 32 on both PoCLs (4 x 8: 1.4-1.6x
    # slower); 8 output features keep 8-wide panels (16 would be half padding); 8 rows apart cost more than 4
    with config_setting("autotune", "fast"):
        wide = tuning.modelled(conv_group.CONV_TUNABLE, conv_group.CONV_DEFAULT, {**POCL30, "rows": 32768, "cols": 64})
        assert (wide["rm"], wide["rn"]) == (4, 16)
        narrow = tuning.modelled(conv_group.CONV_TUNABLE, conv_group.CONV_DEFAULT, {**POCL31, "rows": 32768, "cols": 8})
        assert (narrow["rm"], narrow["rn"]) == (4, 8)
        # its weight gradient: 8 rows of one run of input (the batch innermost), where full tuning picked 8 x 8
        rows = tuning.modelled(conv_group.CONV_TUNABLE, conv_group.CONV_DEFAULT,
                               {**POCL30, "rows": 288, "cols": 64, "rows_together": True})
        assert (rows["rm"], rows["rn"]) == (8, 8)
    assert tuning.modelled(conv_group.CONV_TUNABLE, conv_group.CONV_DEFAULT, POCL30, mode="off") == \
        conv_group.CONV_DEFAULT


def test_cost_models_keep_the_default_without_facts_and_in_mode_off():
    tables = [(base_group.MAP_TUNABLE, {"per": 4, "wg": 64, "guard": False}),
              (reduce_group.REDUCE_TUNABLE, {"lanes": 1, "wg": 128}),
              (register_tiles.TUNABLE, register_tiles.DEFAULT_TILE)]
    for tunable, default in tables:
        for facts in ({}, {"device": "gpu"}, {"device": "cpu", "compiler": "other", "row": 64}):
            with config_setting("autotune", "fast"):
                assert tuning.modelled(tunable, default, facts) == default
        with config_setting("autotune", "off"):
            assert tuning.modelled(tunable, default, POCL31 | {"row": 64, "rows": 64, "cols": 64}) == default


def test_the_tile_model_weighs_padding_against_wider_tiles():
    with config_setting("autotune", "fast"):
        for rows, cols in [(1024, 1024), (64, 10), (5, 300), (37, 45), (4096, 7)]:
            facts = {**POCL30, "rows": rows, "cols": cols}
            tile = tuning.modelled(register_tiles.TUNABLE, register_tiles.DEFAULT_TILE, facts)
            assert tile in register_tiles.TUNABLE.candidates(register_tiles.DEFAULT_TILE, facts)
            costs = [register_tiles.TUNABLE.cost(c, register_tiles.DEFAULT_TILE, facts)
                     for c in register_tiles.TUNABLE.candidates(register_tiles.DEFAULT_TILE, facts)]
            assert register_tiles.TUNABLE.cost(tile, register_tiles.DEFAULT_TILE, facts) == min(costs)


LAVAPIPE = {"device": "cpu", "simd_bits": 256, "llvm": 15, "workgroup_limit": 256}
BLOCK_DEFAULT = {"rows": 8, "cols": 4}


def test_the_block_model_picks_what_full_tuning_measured_on_lavapipe():
    # docs/performance.md: `full` picked 8 x 16 or 16 x 8 for 29 of the transformer and MLP steps' 34 products;
    # the model prices those two alike but for the row addresses and takes the wider one
    cases = [(1024, 256, "k", "rows"), (1024, 64, "k", "k"), (64, 256, "rows", "rows"), (64, 64, None, None),
             (96, 64, "rows", "rows")]
    with config_setting("autotune", "fast"):
        for rows, cols, lv, rv in cases:
            facts = {**LAVAPIPE, "rows": rows, "cols": cols, "lhs_vec": lv, "rhs_vec": rv}
            assert tuning.modelled(dot_group.BLOCK_TUNABLE, BLOCK_DEFAULT, facts) == {"rows": 8, "cols": 16}
        # 20 columns: 16 would compute 32 of them, 8 24; four per block waste none
        facts = {**LAVAPIPE, "rows": 1000, "cols": 20, "lhs_vec": "k", "rhs_vec": "k"}
        assert tuning.modelled(dot_group.BLOCK_TUNABLE, BLOCK_DEFAULT, facts) == {"rows": 16, "cols": 4}
        # scalar loads (no vec4) cost four times a vector's: larger blocks still, each within 128 accumulators
        facts = {**LAVAPIPE, "rows": 512, "cols": 512, "lhs_vec": None, "rhs_vec": None}
        block = tuning.modelled(dot_group.BLOCK_TUNABLE, BLOCK_DEFAULT, facts)
        assert block["rows"] * block["cols"] == dot_group.BLOCK_ACCUMULATORS
    # a product under BLOCK_MIN_WORK multiply-adds: the larger block's compile costs more than it saves
    small = {**LAVAPIPE, "rows": 1024, "cols": 64, "lhs_vec": "k", "rhs_vec": "k", "work": 1024 * 64 * 64}
    for facts in ({}, {"device": "gpu", "rows": 64, "cols": 64}, {"device": "cpu"}, small):
        with config_setting("autotune", "fast"):
            assert tuning.modelled(dot_group.BLOCK_TUNABLE, BLOCK_DEFAULT, facts) == BLOCK_DEFAULT
    with config_setting("autotune", "off"):
        assert tuning.modelled(dot_group.BLOCK_TUNABLE, BLOCK_DEFAULT, {**LAVAPIPE, "rows": 64, "cols": 64}) == \
            BLOCK_DEFAULT


def test_the_subgroup_model_takes_32_rows_past_the_work_bound_and_the_default_below():
    # docs/performance.md: 32 x 4 ran the transformer's and VAE's large products 1.1-1.3x faster than 16 x 4 but
    # compiles ~0.5 s longer (cold shader cache); below SUBGROUP_MIN_WORK multiply-adds the default stays. Past it
    # the row order (twenty-third session: 0.65-0.97x the time of the "k" order on all 24 of those products) where
    # the contraction runs four steps an iteration ("step"), the "k" order where it cannot (no gain to price)
    default = dict(dot_group.SUBGROUP_TILE)
    tile32, tile16x8 = {"rows": 32, "cols": 4, "order": "rows"}, {"rows": 16, "cols": 8, "order": "rows"}
    with config_setting("autotune", "fast"):
        for rows, cols, k in [(1024, 256, 64), (64, 256, 1024), (32, 512, 784), (784, 512, 32), (1024, 64, 64)]:
            facts = {**LAVAPIPE, "lanes": 8, "rows": rows, "cols": cols, "work": rows * cols * k, "step": 4}
            assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == tile32
            assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, {**facts, "step": 1}) == {**tile32, "order": "k"}
        # the VAE step's products as bound there (twenty-second session, benchmarks/webgpu_tiles.py): 32 x 4 ran
        # each 0.79-0.99x the time of the next tile: [32, K] activations uniform times a storage weight, and the
        # K = 32 weight gradients, an lhs uniform only four rows a load times a uniform rhs
        vae = [(32, 512, 784, dict(lhs_uniform=True, lhs_uniform_tall=True, rhs_uniform=False)),
               (512, 784, 32, dict(lhs_uniform=False, lhs_uniform_tall=True, rhs_uniform=True, lhs_rows=True))]
        for rows, cols, k, bound in vae:
            facts = {**LAVAPIPE, "lanes": 8, "rows": rows, "cols": cols, "work": rows * cols * k, "step": 4, **bound}
            assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == tile32
        # 10 columns: one per work item of a subgroup of 8 (the tile narrows to it), rows as long as they pay
        facts = {**LAVAPIPE, "lanes": 8, "rows": 4096, "cols": 10, "work": 4096 * 10 * 512, "step": 4}
        assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts)["rows"] == 32
        # eighteenth session (docs/performance.md): an lhs gathered from storage lane by lane and a uniform rhs
        # (the transformer's activations times a weight): fewer lhs rows, more columns, 0.67-0.73x the time of 32 x 4
        for rows, cols, k in [(1024, 256, 64), (1024, 64, 64), (1024, 64, 256)]:
            facts = {**LAVAPIPE, "lanes": 8, "rows": rows, "cols": cols, "work": rows * cols * k, "step": 4,
                     "lhs_uniform": False, "lhs_uniform_tall": False, "rhs_uniform": True}
            assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == tile16x8
            # the lhs uniform when read four rows a load (32 rows), both from storage, or the lhs from storage
            # four rows a load (a quarter of the gathers: the transformer's 256 x 64 x 1024 weight gradient,
            # 1.10-1.20 ms at 32 x 4 against 1.30-1.43 at 16 x 8 in the row order): 32 x 4 again
            for lhs_tall, rhs, lhs_rows in ((True, True, False), (False, False, False), (False, True, True)):
                facts.update(lhs_uniform_tall=lhs_tall, rhs_uniform=rhs, lhs_rows=lhs_rows)
                assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == tile32
        small = {**LAVAPIPE, "lanes": 8, "rows": 1024, "cols": 64, "work": 1024 * 64 * 32, "step": 4}
        for facts in ({}, {"device": "gpu", "rows": 512, "cols": 512}, small):
            assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == default
    with config_setting("autotune", "off"):
        facts = {**LAVAPIPE, "lanes": 8, "rows": 1024, "cols": 256, "work": 1 << 24, "step": 4}
        assert tuning.modelled(dot_group.SUBGROUP_TUNABLE, default, facts) == default
    # every candidate keeps whole row loads of the subgroup and at most BLOCK_ACCUMULATORS accumulators
    for c in dot_group.SUBGROUP_TUNABLE.candidates(default, {"lanes": 16}):
        assert c["rows"] % 16 == 0 and c["rows"] * c["cols"] <= dot_group.BLOCK_ACCUMULATORS


def test_the_block_model_counts_vector_loads_and_row_addresses():
    assert dot_group.block_loads((8, 16), ("k", "rows")) == (6, 12)
    assert dot_group.block_loads((16, 8), ("k", "rows")) == (6, 18)
    assert dot_group.block_loads((8, 4), (None, None)) == (12, 12)


@pytest.mark.parametrize("dev", [d for d in _kernel_devices() if d.backend == "webgpu"], ids=str)
def test_webgpu_adapters_report_their_vector_width_to_the_cost_models(dev):
    facts = dict(dev.impl.capabilities(dev).tuning_facts)
    assert facts["device"] == dev.platform
    if "llvmpipe" in dev.description:
        assert facts["simd_bits"] in (128, 256, 512) and facts["llvm"] >= 10


def test_fast_mode_blocks_a_product_by_the_model_untimed_with_the_same_results():
    devs = [d for d in _kernel_devices() if d.backend == "webgpu" and d.platform == "cpu"]
    if not devs:
        pytest.skip("no CPU webgpu adapter here (the blocked product is its form)")
    # 256 x 256 x 132: past BLOCK_MIN_WORK multiply-adds, the model takes a larger block
    a = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float32)
    b = np.random.default_rng(6).standard_normal((256, 132)).astype(np.float32)
    want = np.maximum(a.astype(np.float64) @ b, 0)
    got = {}
    for mode in ("off", "fast"):
        tuning.clear()
        with config_setting("autotune", mode):
            got[mode] = np.asarray(fa.jit(lambda a, b: fnp.maximum(a @ b, 0.0))(fa.device_put(a, devs[0]),
                                                                                  fa.device_put(b, devs[0])))
        np.testing.assert_allclose(got[mode], want, rtol=RTOL * 10, atol=1e-4)
        assert tuning.stats()["measured"] == 0
        assert tuning.stats()["modelled"] == (mode == "fast")
    # each accumulator adds its products in the contraction's order whatever the block: the same bits
    np.testing.assert_array_equal(got["off"], got["fast"])


def test_opencl_devices_report_their_compiler_to_the_cost_models():
    devs = [d for d in _kernel_devices() if d.backend == "opencl"]
    if not devs:
        pytest.skip("no OpenCL device here")
    for dev in devs:
        facts = dict(dev.impl.capabilities(dev).tuning_facts)
        assert facts["device"] in ("cpu", "gpu")
        if "PoCL" in dev.description:
            assert facts["compiler"] == "pocl" and facts["llvm"] >= 10


def test_fast_mode_compiles_the_modelled_kernels_untimed_with_the_same_results():
    x = np.linspace(-3, 3, 5000, dtype=np.float32)
    rows = np.random.default_rng(4).standard_normal((300, 513)).astype(np.float32)
    r64 = rows.astype(np.float64)
    for dev in _kernel_devices():
        for mode in ("off", "fast"):
            with config_setting("autotune", mode):
                y = fa.jit(lambda x: fnp.tanh(x * 2.0 + 1.0) * x)(fa.device_put(x, dev))
                s = fa.jit(lambda r: fnp.sum(r * r, axis=-1))(fa.device_put(rows, dev))
                p = fa.jit(lambda a: a @ a.T)(fa.device_put(rows, dev))
            xs = x.astype(np.float64)
            np.testing.assert_allclose(np.asarray(y), np.tanh(xs * 2 + 1) * xs, rtol=RTOL, atol=ATOL)
            np.testing.assert_allclose(np.asarray(s), (r64 * r64).sum(-1), rtol=RTOL * 10)
            np.testing.assert_allclose(np.asarray(p), r64 @ r64.T, rtol=RTOL * 10, atol=1e-3)
    assert tuning.stats()["measured"] == 0


# ------------------------------------------------------------------------------------------------- command


def test_tune_command_prints_the_table_and_keeps_the_choices(tmp_path):
    if not any(d.backend == "opencl" for d in _kernel_devices()):
        pytest.skip("backend unavailable: the tune command's kernels need an opencl device here")
    (tmp_path / "tmod.py").write_text("import fnarray.numpy as fnp\n\ndef f(x, w):\n    return fnp.tanh(x @ w)\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("FNARRAY_CACHE_DIR", None)
    cmd = [sys.executable, "-m", "fnarray", "tune", "tmod:f", "f32[40,64]", "f32[64,48]", "--device", "opencl:0",
           "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "dot_register" in r.stdout and "math" in r.stdout and " full" in r.stdout
    r2 = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r2.returncode == 0 and " disk" in r2.stdout and " full\n" not in r2.stdout
    bad = subprocess.run(cmd[:5] + ["float32[4,"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "dtype[dims]" in bad.stderr


def test_the_default_stays_unless_a_candidate_beats_it_by_the_margin():
    clock = Clock()
    times = {1: 0.98e-3, 2: 1.0e-3, 3: 2e-3, 4: 3e-3}
    with config_setting("autotune", "full"):
        got = tuning.choose("dev", "m", CANDS, lambda c: times[c["v"]], {"v": 2})
        assert got == {"v": 2}  # 2% faster: noise
        times[1] = 0.5e-3
        got = tuning.choose("dev", "m2", CANDS, lambda c: times[c["v"]], {"v": 2})
        assert got == {"v": 1}
    assert clock.calls == []


def test_a_default_faster_than_skip_below_ends_the_search():
    clock = Clock()
    with config_setting("autotune", "full"):
        assert tuning.choose("dev", "k", CANDS, clock, {"v": 3}, skip_below=5e-3) == {"v": 3}
        assert set(clock.calls) == {3}
        assert tuning.choose("dev", "k2", CANDS, clock, {"v": 3}, skip_below=1e-3) == {"v": 1}
    assert set(clock.calls) == {1, 2, 3, 4}


def test_threads_asking_for_one_signature_share_one_search():
    import threading
    import time as _time
    clock = Clock()

    def slow(c):
        _time.sleep(0.002)
        return clock(c)
    got = []
    with config_setting("autotune", "full"):
        threads = [threading.Thread(target=lambda: got.append(tuning.choose("dev", "t", CANDS, slow, {"v": 4})))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got == [{"v": 1}] * 4 and tuning.stats()["searches"] == 1
