"""``fa.save`` / ``fa.load`` (safetensors checkpoints): bit-exact round trips, structure, ``like=``, damage, atomicity.

References: the bytes of the NumPy arrays that went in (``tobytes``), the safetensors package's own
reader for the file layout, and a killed process for the atomic write.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.serialization import CheckpointError

safetensors = pytest.importorskip("safetensors", reason="checkpoints need safetensors (pip install safetensors)")

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64", "complex64", "complex128"]

Point = collections.namedtuple("Point", "x y")


def _values(dtype, shape=(2, 3), seed=0):
    """Arrays with awkward bit patterns: extremes, negative zero, NaN/inf, subnormals where the dtype has them."""
    rng = np.random.RandomState(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return (rng.rand(*shape) > 0.5)
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        base = [int(info.min), int(info.max), 0, 1] + [int(v) for v in rng.randint(0, 100, max(n - 4, 0))]
        return np.array(base[:n], dtype=dt).reshape(shape)
    if dt.kind == "c":
        real = np.array([np.inf, -0.0, np.nan, 1e-40, 3.5, -2.25] * (n // 6 + 1))[:n]
        return (real + 1j * rng.randn(n)).astype(dt).reshape(shape)
    vals = np.array([np.inf, -0.0, np.nan, -np.inf, 1.5, -2.75] * (n // 6 + 1))[:n]
    return vals.astype(dt).reshape(shape)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype_bit_exact(tmp_path, dtype):
    tree = {"a": _values(dtype), "scalar": _values(dtype, ())[()] if dtype != "bool" else np.bool_(True),
            "empty": np.zeros((0, 4), dtype=_values(dtype).dtype)}
    path = tmp_path / "ck.safetensors"
    fa.save(path, tree)
    out = fa.load(path)
    assert sorted(out) == sorted(tree)
    for k in tree:
        assert isinstance(out[k], fa.Array)
        assert _bits_equal(out[k], tree[k]), (k, np.asarray(out[k]), tree[k])


def test_round_trip_every_backend(tmp_path, device):
    tree = {d: fa.device_put(_values(d, (3, 2), seed=1), device) for d in DTYPES}
    path = tmp_path / "ck.safetensors"
    fa.save(path, tree)
    out = fa.load(path, device=device)
    for d in DTYPES:
        assert out[d].device == device
        assert _bits_equal(out[d], tree[d]), d
    # and back through like= on the same device
    again = fa.load(path, like=tree, device=device)
    assert all(_bits_equal(again[d], tree[d]) for d in DTYPES)


@pytest.mark.enable_x64
def test_nested_structure_rebuilt_without_like(tmp_path):
    tree = {"list": [np.arange(3), (np.ones(2, np.float32), None)], "nt": Point(np.int8(3), np.zeros((1, 1))),
            3: {"deep": {"er": np.float16(2.5)}}, "none": None, "empty_t": (), "empty_d": {},
            "weak": fnp.asarray(1.5) * 2}
    path = tmp_path / "nested.safetensors"
    fa.save(path, tree)
    out = fa.load(path)
    assert fa.tree_util.tree_structure(out) == fa.tree_util.tree_structure(tree)
    assert type(out["nt"]) is Point and isinstance(out["list"][1], tuple) and out["none"] is None
    assert list(out) == list(tree)  # dict order kept
    assert out["weak"].weak_type
    for a, b in zip(fa.tree_util.tree_leaves(out), fa.tree_util.tree_leaves(tree), strict=True):
        assert _bits_equal(a, b)


def test_int_keys_at_the_root_and_prng_keys_round_trip(tmp_path):
    """An int key at the root names a tensor by its digits (it reached safetensors as an int and failed there);
    typed PRNG keys (a custom node without aux data) rebuild without like=, as a training state saved with its
    key needs; an int key and the same number as a str collide, saying so."""
    keys = fa.random.split(fa.random.key(3), 2)
    tree = {0: np.arange(3, dtype=np.float32), 7: [np.ones(2, np.int16)], "rng": keys, "one": fa.random.key(9),
            "opt": fa.optim.adam(0.1).init({"w": fnp.ones(2)})}
    fa.save(tmp_path / "k.safetensors", tree)
    out = fa.load(tmp_path / "k.safetensors")
    assert list(out) == [0, 7, "rng", "one", "opt"]
    assert fa.tree_util.tree_structure(out) == fa.tree_util.tree_structure(tree)
    assert out["rng"].dtype == keys.dtype and out["rng"].shape == (2,)
    np.testing.assert_array_equal(np.asarray(fa.random.key_data(out["rng"])), np.asarray(fa.random.key_data(keys)))
    np.testing.assert_array_equal(np.asarray(fa.random.normal(out["one"], (3,))),
                                  np.asarray(fa.random.normal(fa.random.key(9), (3,))))
    for a, b in zip(fa.tree_util.tree_leaves(out), fa.tree_util.tree_leaves(tree), strict=True):
        assert _bits_equal(a, b)
    with pytest.raises(ValueError, match="int key and the same number as a str key"):
        fa.save(tmp_path / "c.safetensors", {1: np.ones(1), "1": np.zeros(1)})


def test_tensor_names_are_dotted_paths_readable_by_safetensors(tmp_path):
    model = fa.nn.MLP(3, 2, 4, 1, key=fa.random.key(0))
    path = tmp_path / "m.safetensors"
    fa.save(path, {"model": model, "step": 7})
    from safetensors.numpy import load_file
    raw = load_file(str(path))
    assert set(raw) == {"model.layers.0.weight", "model.layers.0.bias", "model.layers.1.weight",
                        "model.layers.1.bias", "step"}
    np.testing.assert_array_equal(raw["model.layers.1.weight"], np.asarray(model.layers[1].weight))


def test_modules_and_optimizer_states_round_trip(tmp_path):
    key = fa.random.key(1)
    model = fa.nn.Sequential([fa.nn.Linear(3, 4, key=key), fa.nn.relu, fa.nn.LayerNorm(4),
                              fa.nn.Dropout(0.25), fa.nn.Linear(4, 2, use_bias=False, key=key)])
    opt = fa.optim.adamw(1e-3)
    state = opt.init(model)
    grads = fa.grad(lambda m: fnp.sum(m(fnp.ones((2, 3)), training=False) ** 2))(model)
    _, state = opt.update(grads, state, model)
    path = tmp_path / "train.safetensors"
    fa.save(path, {"model": model, "opt": state})
    out = fa.load(path)
    assert type(out["model"]) is fa.nn.Sequential and out["model"][3].rate == 0.25
    assert out["model"][1].fn is fa.nn.relu and out["model"][4].bias is None
    assert fa.tree_util.tree_structure(out) == fa.tree_util.tree_structure({"model": model, "opt": state})
    x = fnp.asarray(np.random.RandomState(0).randn(5, 3).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(out["model"](x, training=False)), np.asarray(model(x, training=False)))
    # the restored state continues the optimisation exactly as the original
    u1, _ = opt.update(grads, state, model)
    u2, _ = opt.update(grads, out["opt"], out["model"])
    for a, b in zip(fa.tree_util.tree_leaves(u1), fa.tree_util.tree_leaves(u2), strict=True):
        assert _bits_equal(a, b)


@pytest.mark.enable_x64
def test_like_restores_structure_and_names_the_first_mismatch(tmp_path):
    model = fa.nn.MLP(3, 2, 4, 1, activation=lambda x: x * 2, key=fa.random.key(0))
    path = tmp_path / "m.safetensors"
    fa.save(path, model)
    with pytest.raises(CheckpointError, match="like="):  # a lambda cannot be rebuilt from the file
        fa.load(path)
    out = fa.load(path, like=model)
    assert out.activation is model.activation
    shapes = fa.tree_util.tree_map(lambda a: fa.ShapedArray(a.shape, a.dtype), model)
    assert _bits_equal(fa.load(path, like=shapes).layers[0].weight, model.layers[0].weight)
    wider = fa.nn.MLP(3, 2, 5, 1, key=fa.random.key(0))
    with pytest.raises(CheckpointError, match=r"layers\.0\.weight is float32\[4, 3\] in the checkpoint but "
                                              r"float32\[5, 3\]"):
        fa.load(path, like=wider)
    f64 = fa.tree_util.tree_map(lambda a: a.astype(np.float64), model)
    with pytest.raises(CheckpointError, match=r"layers\.0\.weight .*float64"):
        fa.load(path, like=f64)
    deeper = fa.nn.MLP(3, 2, 4, 2, key=fa.random.key(0))   # the first difference is layer 1's shape
    with pytest.raises(CheckpointError, match=r"leaf layers\.1\.weight is float32\[2, 4\] in the checkpoint"):
        fa.load(path, like=deeper)
    fa.save(path, {"a": np.ones(2), "b": np.ones(3)})
    with pytest.raises(CheckpointError, match="leaf c .*lacks"):
        fa.load(path, like={"a": np.ones(2), "b": np.ones(3), "c": np.ones(1)})
    with pytest.raises(CheckpointError, match="tensor 'b' .*no leaf"):
        fa.load(path, like={"a": np.ones(2)})


def test_damaged_files_raise_clear_errors(tmp_path):
    path = tmp_path / "ok.safetensors"
    fa.save(path, {"w": np.arange(1000, dtype=np.float32), "b": np.ones(3)})
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "header_only": data[:40],
        "empty": b"",
        "bit_flip_in_data": data[:-7] + bytes([data[-7] ^ 0x10]) + data[-6:],
        "garbage": b"\x00" * 64,
        "not_safetensors": b"PK\x03\x04 a zip file, not a checkpoint",
    }
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.safetensors"
        bad.write_bytes(blob)
        with pytest.raises(CheckpointError) as info:
            fa.load(bad)
        msg = str(info.value)
        assert str(bad) in msg and ("corrupted" in msg or "truncated" in msg), (name, msg)
    with pytest.raises(FileNotFoundError):
        fa.load(tmp_path / "missing.safetensors")


def test_foreign_safetensors_file_needs_like(tmp_path):
    from safetensors.numpy import save_file
    path = tmp_path / "foreign.safetensors"
    save_file({"w": np.ones((2, 2), np.float32)}, str(path))
    with pytest.raises(CheckpointError, match="like="):
        fa.load(path)
    out = fa.load(path, like={"w": fa.ShapedArray((2, 2), np.dtype(np.float32))})
    np.testing.assert_array_equal(np.asarray(out["w"]), np.ones((2, 2)))


def test_save_rejects_what_it_cannot_store(tmp_path):
    with pytest.raises(TypeError, match="leaf x"):
        fa.save(tmp_path / "a", {"x": "a string"})
    with pytest.raises(ValueError, match="both named"):
        fa.save(tmp_path / "a", {"a.b": np.ones(1), "a": {"b": np.ones(1)}})
    with pytest.raises(TypeError, match="traced"):
        fa.jit(lambda x: fa.save(tmp_path / "a", x))(fnp.ones(2))
    assert not os.path.exists(tmp_path / "a")
    # a missing folder is named (not the temporary file that could not be made in it)
    with pytest.raises(FileNotFoundError, match=r"the folder .*nope' of .* does not exist; create it"):
        fa.save(tmp_path / "nope" / "a.safetensors", {"x": np.ones(1)})


def test_save_replaces_atomically_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "ck.safetensors"
    fa.save(path, {"v": np.zeros(3)})
    fa.save(path, {"v": np.ones(3)})
    np.testing.assert_array_equal(np.asarray(fa.load(path)["v"]), np.ones(3))
    assert os.listdir(tmp_path) == ["ck.safetensors"]


_CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    import numpy as np
    import fnarray as fa
    mode = sys.argv[1]
    big = {{f"layer{{i}}": np.full((1024, 1024), i, np.float32) for i in range(48)}}   # 192 MiB
    if mode == "block":
        real_replace = os.replace
        def replace(src, dst):   # the temp file is complete: stop just before the rename
            print("WRITTEN", flush=True)
            time.sleep(60)
            real_replace(src, dst)
        os.replace = replace
    print("SAVING", flush=True)
    fa.save(sys.argv[2], big)
    print("DONE", flush=True)
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"),
                    reason="needs POSIX signals (signal.SIGKILL: an uncatchable kill mid-save); absent on Windows")
@pytest.mark.parametrize("mode", ["block", "timed"])
def test_kill_during_save_keeps_the_previous_file(tmp_path, mode):
    """SIGKILL a process in the middle of ``fa.save`` of a 192 MiB tree: the old checkpoint loads intact."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = tmp_path / "ck.safetensors"
    old = {"v": np.arange(10, dtype=np.int32), "w": np.float32(3.5)}
    fa.save(path, old)
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(root=root))
    proc = subprocess.Popen([sys.executable, str(script), mode, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        wait_for = "WRITTEN" if mode == "block" else "SAVING"
        line = ""
        deadline = time.time() + 120
        while wait_for not in line and time.time() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert wait_for in line, f"the child did not reach {wait_for}"
        if mode == "timed":
            time.sleep(0.05)   # inside the serialization of 192 MiB (which takes far longer here)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    out = fa.load(path)
    if "layer0" in out:   # the child finished before the kill (not expected): then the new file is whole
        assert mode == "timed" and len(out) == 48
    else:
        assert _bits_equal(out["v"], old["v"]) and _bits_equal(out["w"], old["w"])
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert mode == "timed" or leftovers, "the blocked child should have left its complete temp file"


def test_metadata_layout(tmp_path):
    path = tmp_path / "m.safetensors"
    fa.save(path, {"z": np.array([1 + 2j], np.complex64)})
    data = path.read_bytes()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    meta = header["__metadata__"]
    assert meta["fnarray.format"] == "1"
    assert json.loads(meta["fnarray.tree"]) == {"dict": [["z", {"leaf": "z"}]]}
    assert json.loads(meta["fnarray.leaves"])["z"]["dtype"] == "complex64"
    assert header["z"]["dtype"] == "F32" and header["z"]["shape"] == [1, 2]   # complex stored as pairs


def test_checkpoint_names_do_not_shadow_remat():
    """``fa.checkpoint`` stays remat (JAX's name); the checkpoint files live in ``fnarray.serialization``."""
    from fnarray.transforms.ad import checkpoint
    assert fa.checkpoint is checkpoint and fa.CheckpointError is CheckpointError


def test_sharded_round_trip_on_8_host_devices():
    """Save a tree of arrays split over a 4x2 mesh of 8 forced XLA host devices and load it back with like=,
    shardings= (a tree, one sharding) and shardings="saved" (tests/checkpoint_8_devices.py, in a subprocess)."""
    from helpers import require_backend
    require_backend("jax")
    pytest.importorskip("safetensors", reason="checkpoints need safetensors (pip install -e '.[io]')")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(root, "tests", "checkpoint_8_devices.py")], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), r.stdout + r.stderr
    assert r.stdout.count("ok ") >= 12, r.stdout
