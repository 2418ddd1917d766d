"""``fnarray.export.webgpu`` without a browser: the bundle's files and manifest, and the bundle replayed.

The replay (``_replay``) is an interpreter of the bundle written here with wgpu-py
directly: it reads only the folder (manifest, WGSL files, weights) and does what
the JS runtime does (buffers, bind groups, dispatches in order, read back), on a
device with WebGPU's default limits. Its results are compared with the numpy
backend, so a manifest that misstates a binding, a uniform or a dispatch size
fails here even where no browser is installed. ``test_browser.py`` runs the same
bundles in Chromium.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax
from fnarray.core import primitives as P
from fnarray.core.errors import UnsupportedOnDevice
from fnarray.export import MANIFEST_VERSION, runtime_source
from fnarray.export._names import leaf_names
from fnarray.export.serve import MIME_TYPES, serve_in_thread
from fnarray.lowering.webgpu.backend import portable_limits
from helpers import check_traced, in_place_and_swapped_entries, require_backend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import digits_mlp  # noqa: E402

rng = np.random.default_rng(7)
REF = fa.devices("numpy")[0]


@pytest.fixture(scope="module")
def wdev():
    return require_backend("webgpu")[0]


class _Bundle:
    """A bundle loaded as the JS runtime loads it (buffers, weights, state), replayed with wgpu-py.

    ``run(inputs, entry=None)`` writes the inputs, dispatches the entry's list in one pass, reads back the outputs
    that are not state, then copies the state's new values into the state buffers or swaps a state buffer and its
    partner (``"swap"``); ``state(name)`` reads a state buffer."""

    NP_TYPES = {"float32": "<f4", "int32": "<i4", "uint32": "<u4", "bool": "<u4", "float16": "<f2"}

    def __init__(self, device, path):
        import wgpu
        self.wgpu, self.device = wgpu, device
        with open(os.path.join(path, "model.json"), encoding="utf-8") as fh:
            self.m = m = json.load(fh)
        with open(os.path.join(path, m["weights"]["file"]), "rb") as fh:
            weights = fh.read()
        assert len(weights) == m["weights"]["bytes"]
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        self.bufs = [device.create_buffer(size=b["size"], usage=usage) for b in m["buffers"]]
        for b in m["buffers"]:
            if "offset" in b and b["nbytes"]:
                raw = weights[b["offset"]:b["offset"] + b["nbytes"]]
                device.queue.write_buffer(self.bufs[b["id"]], 0, raw + b"\0" * (b["size"] - len(raw)))
        self.modules = []
        for k in m["kernels"]:
            with open(os.path.join(path, k["file"]), encoding="utf-8") as fh:
                self.modules.append(device.create_shader_module(code=fh.read()))
        self.entries = {e["name"]: e for e in m.get("entries", [])} or {None: m}
        self.pipes = {}  # (kernel, binding types) -> (bind group layout, pipeline)
        self.where = {}  # manifest buffer id -> the buffer playing that role now (a state and its partner swap)

    def buf(self, i):
        return self.bufs[self.where.get(i, i)]

    def run(self, inputs, entry=None):
        wgpu, device, m = self.wgpu, self.device, self.m
        e = self.entries[entry]
        for spec in e["inputs"]:
            a = np.asarray(inputs[spec["name"]])
            assert list(a.shape) == spec["shape"], spec
            raw = a.astype(self.NP_TYPES[spec["dtype"]]).tobytes()
            if raw:
                device.queue.write_buffer(self.buf(spec["buffer"]), 0, raw + b"\0" * (-len(raw) % 4))
        enc = device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for d in e["dispatches"]:
            entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": "storage" if b["write"] else "read-only-storage"}}
                       for i, b in enumerate(d["bindings"])]
            res = [{"binding": i, "resource": {"buffer": self.buf(b["buffer"])}} for i, b in enumerate(d["bindings"])]
            if "uniform" in d:
                words = np.asarray(d["uniform"], "<u4").tobytes()
                ub = device.create_buffer_with_data(data=words + b"\0" * (-len(words) % 16),
                                                    usage=wgpu.BufferUsage.UNIFORM)
                entries.append({"binding": len(res), "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": "uniform"}})
                res.append({"binding": len(res), "resource": {"buffer": ub}})
            bgl, pipe = self._pipeline(d["kernel"], entries)
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, device.create_bind_group(layout=bgl, entries=res))
            cp.dispatch_workgroups(*d["workgroups"])
        cp.end()
        device.queue.submit([enc.finish()])
        outs = [self._read(o, o["buffer"]) for o in e["outputs"]]
        enc = device.create_command_encoder()  # then the state's new values replace the old, as in the runtime
        for u in e.get("state_updates", []):
            if u.get("swap"):
                s_now, p_now = self.where.get(u["to"], u["to"]), self.where.get(u["from"], u["from"])
                self.where[u["to"]], self.where[u["from"]] = p_now, s_now
            else:
                enc.copy_buffer_to_buffer(self.buf(u["from"]), 0, self.buf(u["to"]), 0, m["buffers"][u["to"]]["size"])
        device.queue.submit([enc.finish()])
        return outs

    def _pipeline(self, kernel, entries):
        """The bind group layout and pipeline of ``kernel`` with these binding types, made at its first dispatch
        and reused, as the runtime makes each once at load (a pipeline per dispatch per step cost the llm
        bundle's replay ~60% of its test's time in shader compiles)."""
        key = (kernel, tuple(e["buffer"]["type"] for e in entries))
        if key not in self.pipes:
            bgl = self.device.create_bind_group_layout(entries=entries)
            self.pipes[key] = bgl, self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[bgl]),
                compute={"module": self.modules[kernel], "entry_point": self.m["kernels"][kernel]["entry"]})
        return self.pipes[key]

    def _read(self, spec, buffer):
        b = self.m["buffers"][buffer]
        n = int(np.prod(spec["shape"], dtype=np.int64))
        raw = self.device.queue.read_buffer(self.buf(buffer), 0, b["size"])
        a = np.frombuffer(raw, self.NP_TYPES[spec["dtype"]], n).reshape(spec["shape"])
        return a.astype(bool) if spec["dtype"] == "bool" else a

    def state(self, name):
        spec = next(s for s in self.m["state"] if s["name"] == name)
        return self._read(spec, spec["buffer"])


@pytest.fixture(scope="module")
def gpu(wdev):
    """A fresh device of the webgpu adapter with WebGPU's default limits."""
    return wdev.impl.gpu.adapter.request_device_sync()


@pytest.fixture(scope="module")
def replay(gpu):
    """``replay(path, inputs) -> [ndarray]``: one run of a bundle of one function."""
    return lambda path, inputs: _Bundle(gpu, path).run(inputs)


def _reference(f, *args):
    check_traced(f, *args)
    out = fa.jit(f, device=REF)(*args)
    return [np.asarray(x) for x in fa.tree_util.tree_leaves(out)]


def _mlp_params(sizes=digits_mlp.LAYER_SIZES):
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        params[f"w{i + 1}"] = rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32)
        params[f"b{i + 1}"] = rng.normal(0, 0.1, (b,)).astype(np.float32)
    return params


def _assert_outputs(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=3e-5, atol=3e-5)
        else:
            np.testing.assert_array_equal(g, w)


# ------------------------------------------------------------------------------------ the bundle's files


def test_mlp_bundle_bakes_parameters_and_reuses_the_webgpu_kernels(wdev, tmp_path, replay):
    params = _mlp_params()
    x = rng.uniform(0, 1, (3, 64)).astype(np.float32)
    m = fa.export.webgpu(digits_mlp.predict, params, x, path=tmp_path, bake_argnums=(0,))
    assert sorted(os.listdir(tmp_path)) == ["fnarray-webgpu.js", "kernels", "model.json", "weights.bin"]
    assert m == json.loads((tmp_path / "model.json").read_text())
    assert (m["format"], m["version"], m["name"]) == ("fnarray-webgpu", MANIFEST_VERSION, "predict")
    assert m["inputs"] == [{"name": "x", "dtype": "float32", "shape": [3, 64], "buffer": m["inputs"][0]["buffer"]}]
    assert [(o["name"], o["dtype"], o["shape"]) for o in m["outputs"]] == [("out", "float32", [3, 10])]
    # The parameters are in weights.bin under their dotted names, bit for bit.
    weights = (tmp_path / "weights.bin").read_bytes()
    baked = {b["name"]: b for b in m["buffers"] if b["kind"] == "weight"}
    assert set(baked) == {f"params.{k}" for k in digits_mlp.PARAM_NAMES}
    for k in digits_mlp.PARAM_NAMES:
        b = baked[f"params.{k}"]
        assert b["offset"] % 16 == 0 and b["shape"] == list(params[k].shape)
        np.testing.assert_array_equal(np.frombuffer(weights, "<f4", params[k].size, b["offset"]),
                                      params[k].ravel())
    # The kernels are the webgpu backend's for the same program, not a second code generator: its lowering
    # within the browser's limits (on a native CPU adapter it adds options, such as vec4 product stores).
    with portable_limits():
        lowered = fa.jit(digits_mlp.predict, device=wdev).lower(params, x)
        native = [k.source for k in lowered.kernels()]
    files = [(tmp_path / k["file"]).read_text() for k in m["kernels"]]
    assert files == list(dict.fromkeys(native))
    assert [m["kernels"][d["kernel"]]["entry"] for d in m["dispatches"]] == [k.name for k in lowered.kernels()]
    assert m["limits"]["maxStorageBuffersPerShaderStage"] <= 8 and m["features"] == []
    assert (tmp_path / "fnarray-webgpu.js").read_text() == runtime_source()
    _assert_outputs(replay(tmp_path, {"x": x}), _reference(digits_mlp.predict, params, x))


def test_pytree_inputs_flatten_to_dotted_names_in_jit_order(tmp_path, replay):
    def f(params, x, *rest):
        h = x @ params["w"][0] + params["b"]
        return {"h": h, "s": fnp.sum(h * rest[0]["scale"]) + rest[1]}

    params = {"w": [rng.normal(size=(4, 3)).astype(np.float32)], "b": rng.normal(size=(3,)).astype(np.float32)}
    x = rng.normal(size=(2, 4)).astype(np.float32)
    rest = ({"scale": np.float32(0.5)}, np.float32(2.0))
    m = fa.export.webgpu(f, params, x, *rest, path=tmp_path)
    names = [i["name"] for i in m["inputs"]]
    assert names == ["params.b", "params.w.0", "x", "rest.0.scale", "rest.1"]
    assert [o["name"] for o in m["outputs"]] == ["out.h", "out.s"]
    inputs = dict(zip(names, [params["b"], params["w"][0], x, rest[0]["scale"], rest[1]], strict=True))
    _assert_outputs(replay(tmp_path, inputs), _reference(f, params, x, *rest))


def test_captured_constants_and_literal_outputs_are_weights(tmp_path, replay):
    table = rng.normal(size=(5,)).astype(np.float32)
    t = fnp.asarray(table)

    def f(x):
        return x * t, 3.0, x > 0

    x = rng.normal(size=(5,)).astype(np.float32)
    m = fa.export.webgpu(f, x, path=tmp_path)
    kinds = {b.get("name"): b["kind"] for b in m["buffers"]}
    assert kinds["const.0"] == "weight" and kinds["out.1"] == "constant"
    assert [o["dtype"] for o in m["outputs"]] == ["float32", "float32", "bool"]
    _assert_outputs(replay(tmp_path, {"x": x}), _reference(f, x))


def test_int_bool_reduction_and_matmul_bundles_replay(tmp_path, replay):
    cases = {
        "where": (lambda k, m: fnp.where(m, k * 3, -k), [rng.integers(-9, 9, (4, 6)).astype(np.int32),
                                                         rng.random((4, 6)) < 0.5]),
        "reduce": (lambda a: (fnp.sum(a, axis=0), fnp.max(a, axis=1), fnp.argmax(a, axis=1),
                              fa.nn.logsumexp(a, axis=-1)), [rng.normal(size=(37, 9)).astype(np.float32)]),
        "matmul": (lambda a, b: a @ b, [rng.normal(size=(33, 17)).astype(np.float32),
                                        rng.normal(size=(17, 9)).astype(np.float32)]),
    }
    for name, (f, args) in cases.items():
        m = fa.export.webgpu(f, *args, path=tmp_path / name)
        inputs = dict(zip([i["name"] for i in m["inputs"]], args, strict=True))
        _assert_outputs(replay(tmp_path / name, inputs), _reference(f, *args))
    # max starts from -inf: written as a call, since browsers reject a constant bitcast to a non-finite float.
    wgsl = "".join((tmp_path / "reduce" / k["file"]).read_text()
                   for k in json.loads((tmp_path / "reduce" / "model.json").read_text())["kernels"])
    assert "fa_f32_bits(0xff800000u)" in wgsl and not re.search(r"bitcast<f32>\(0x[7f]f[89a-f]", wgsl)


def test_scan_unrolls_into_the_dispatch_list(tmp_path, replay):
    w = rng.normal(0, 0.3, (6, 6)).astype(np.float32)

    def rnn(h0, xs, w):
        def step(h, x):
            h = fnp.tanh(h @ w + x)
            return h, fnp.sum(h)
        return fa.scan(step, h0, xs)

    h0 = rng.normal(size=(6,)).astype(np.float32)
    for length in (3, 20):
        xs = rng.normal(size=(length, 6)).astype(np.float32)
        path = tmp_path / f"len{length}"
        m = fa.export.webgpu(rnn, h0, xs, w, path=path, bake_argnums=(2,))
        assert [i["name"] for i in m["inputs"]] == ["h0", "xs"]
        assert len(m["dispatches"]) >= length  # one matrix-vector product per step at least
        assert m["limits"]["maxStorageBuffersPerShaderStage"] <= 8  # 20 ys stacked in groups
        _assert_outputs(replay(path, {"h0": h0, "xs": xs}), _reference(rnn, h0, xs, w))
    m = fa.export.webgpu(lambda xs: fa.scan(lambda c, x: (c + x, c), 0.0, xs, reverse=True),
                         np.arange(4, dtype=np.float32), path=tmp_path / "rev")
    xs = np.arange(4, dtype=np.float32)
    _assert_outputs(replay(tmp_path / "rev", {"xs": xs}),
                    _reference(lambda xs: fa.scan(lambda c, x: (c + x, c), 0.0, xs, reverse=True), xs))


def test_vmap_and_grad_bundles_replay(tmp_path, replay):
    params = _mlp_params((8, 16, 4))

    def loss(params, x, y):
        h = fa.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
        return -fnp.mean(fnp.sum(fa.nn.one_hot(y, 4) * fa.nn.log_softmax(h, axis=-1), axis=-1))

    x = rng.normal(size=(5, 8)).astype(np.float32)
    y = rng.integers(0, 4, (5,)).astype(np.int32)
    g = fa.grad(loss)
    m = fa.export.webgpu(g, params, x, y, path=tmp_path / "grad")
    assert [o["name"] for o in m["outputs"]] == ["out.b1", "out.b2", "out.w1", "out.w2"]
    inputs = {f"params.{k}": v for k, v in params.items()} | {"x": x, "y": y}
    _assert_outputs(replay(tmp_path / "grad", inputs), _reference(g, params, x, y))

    vf = fa.vmap(lambda a, b: fnp.dot(a, b) + fnp.tanh(a).sum(), in_axes=(0, None))
    a, b = rng.normal(size=(7, 5)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)
    fa.export.webgpu(vf, a, b, path=tmp_path / "vmap")
    _assert_outputs(replay(tmp_path / "vmap", {"a": a, "b": b}), _reference(vf, a, b))


def test_literal_cond_is_resolved_and_a_reexport_replaces_old_kernels(tmp_path, replay):
    branches = tuple(fa.make_ir(fn)(np.zeros(4, np.float32)) for fn in (lambda x: [x * 2.0], lambda x: [fnp.sin(x)]))
    f = lambda x: P.cond.bind(np.int32(1), x, branches=branches)[0]  # noqa: E731
    x = rng.normal(size=(4,)).astype(np.float32)
    fa.export.webgpu(lambda x: (x + 1.0) * fnp.exp(x) - fnp.log1p(x * x), x, path=tmp_path)
    m = fa.export.webgpu(f, x, path=tmp_path)
    assert sorted(os.listdir(tmp_path / "kernels")) == sorted(os.path.basename(k["file"]) for k in m["kernels"])
    _assert_outputs(replay(tmp_path, {"x": x}), [np.sin(x)])


# ------------------------------------------------------------------------------------ what cannot be exported


def test_while_loop_fails_at_export_naming_the_primitive(wdev, tmp_path):
    f = lambda x: fa.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]  # noqa: E731
    with pytest.raises(UnsupportedOnDevice, match=r"while cannot run in the browser.*scan"):
        fa.export.webgpu(f, np.ones(3, np.float32), path=tmp_path / "w")
    g = lambda p, x: fa.cond(fnp.sum(x) > p, lambda v: v * 2.0, lambda v: -v, x)  # noqa: E731
    with pytest.raises(UnsupportedOnDevice, match=r"cond cannot run in the browser.*where"):
        fa.export.webgpu(g, np.float32(0), np.ones(3, np.float32), path=tmp_path / "c")
    assert not (tmp_path / "w").exists() and not (tmp_path / "c").exists()


@pytest.mark.enable_x64
def test_a_dtype_webgpu_lacks_fails_naming_the_primitive(wdev, tmp_path):
    before = fa.config.fallback
    with pytest.raises(UnsupportedOnDevice, match=r"sin \(float64\) cannot run in the browser: WebGPU has no float64"):
        fa.export.webgpu(lambda x: fnp.sin(x) * 2, np.ones(3, np.float64), path=tmp_path)
    assert fa.config.fallback == before  # the export lowers with "error" and restores the mode


def test_bad_bake_argnums_and_argument_counts(tmp_path):
    with pytest.raises(ValueError, match="bake_argnums holds 2"):
        fa.export.webgpu(lambda a, b: a + b, np.ones(2, np.float32), np.ones(2, np.float32), path=tmp_path,
                         bake_argnums=(2,))
    with pytest.raises(TypeError, match="takes 1 positional arguments, 2 example arguments"):
        fa.export.webgpu(lambda a: a, np.ones(2, np.float32), np.ones(2, np.float32), path=tmp_path)


# ------------------------------------------------------------------------------------ runtime and server


def test_runtime_checks_the_same_manifest_version():
    src = runtime_source()
    assert f"export const MANIFEST_VERSION = {MANIFEST_VERSION};" in src
    assert "export async function loadModel(" in src
    assert not [line for line in src.splitlines() if line.startswith(("import", "export * from"))]  # no dependencies


def test_serve_gives_mime_types_on_loopback_only(tmp_path):
    files = {"a.js": b"export const x = 1;\n", "k.wgsl": b"fn f() {}\n", "m.json": b"{}", "w.bin": b"\0\1",
             "index.html": b"<p>hi</p>"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    server, url = serve_in_thread(tmp_path)
    try:
        assert server.server_address[0] == "127.0.0.1" and url.startswith("http://127.0.0.1:")
        for name, data in files.items():
            with urllib.request.urlopen(url + name, timeout=10) as r:
                assert r.read() == data
                assert r.headers["Content-Type"] == MIME_TYPES[os.path.splitext(name)[1]], name
                assert r.headers["Cache-Control"] == "no-store"
    finally:
        server.shutdown()
        server.server_close()
    assert MIME_TYPES[".js"] == "text/javascript" and MIME_TYPES[".wgsl"] == "text/wgsl"


def test_serve_command_line(tmp_path):
    (tmp_path / "m.json").write_text("{}")
    proc = subprocess.Popen([sys.executable, "-m", "fnarray.export.serve", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(url + "m.json", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/json" and r.read() == b"{}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "fnarray.export.serve", str(tmp_path / "missing")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "is not a folder" in bad.stderr


def test_colliding_input_names_are_rejected(tmp_path):
    p = {"a.b": np.ones(2, np.float32), "a": {"b": np.full(2, 5.0, np.float32)}}
    with pytest.raises(ValueError, match="both be named 'p.a.b'"):
        fa.export.webgpu(lambda p: p["a.b"] - p["a"]["b"], p, path=str(tmp_path / "bundle"))


# ------------------------------------------------------------------------------------ entries and state


def test_entries_share_weights_and_state_kept_between_runs(gpu, tmp_path):
    w = rng.normal(size=(4,)).astype(np.float32)

    def add(w, acc, x):                        # acc: the state; returns (outputs, new state)
        acc = {"sum": acc["sum"] + x * w, "n": acc["n"] + 1}
        return fnp.sum(acc["sum"]), acc

    def peek(w, acc, scale):                   # reads the state, leaves it as it is
        return acc["sum"] * scale + w, acc

    acc = {"sum": np.zeros(4, np.float32), "n": np.full((), 10, np.int32)}
    m = fa.export.webgpu({"add": (add, w, acc, np.zeros(4, np.float32)), "peek": (peek, w, acc, np.float32(0))},
                         path=tmp_path, bake_argnums=(0,), state_argnums=(1,))
    assert [e["name"] for e in m["entries"]] == ["add", "peek"] and "inputs" not in m
    assert [e["inputs"][0]["name"] for e in m["entries"]] == ["x", "scale"]
    assert [o["name"] for o in m["entries"][0]["outputs"]] == ["out"]
    assert [(s["name"], s["dtype"], s["shape"]) for s in m["state"]] == [("acc.n", "int32", []),
                                                                        ("acc.sum", "float32", [4])]
    assert [b["name"] for b in m["buffers"] if b["kind"] == "weight"] == ["w"]      # stored once for both
    state = {s["name"]: m["buffers"][s["buffer"]] for s in m["state"]}
    assert "offset" in state["acc.n"] and "offset" not in state["acc.sum"]      # 10 is stored, zeros are not
    assert m["entries"][1]["state_updates"] == []                               # peek returns the state unchanged
    # add computes both new values into the states' partners: the runs swap buffers, nothing is copied
    partners = {s["name"]: s["partner"] for s in m["state"]}
    assert sorted((u["name"], u["from"], u.get("swap")) for u in m["entries"][0]["state_updates"]) == [
        ("acc.n", partners["acc.n"], True), ("acc.sum", partners["acc.sum"], True)]
    bundle = _Bundle(gpu, tmp_path)
    xs = rng.normal(size=(3, 4)).astype(np.float32)
    for k, x in enumerate(xs, 1):
        (total,) = bundle.run({"x": x}, "add")
        np.testing.assert_allclose(total, np.sum(xs[:k] * w), rtol=1e-5, atol=1e-6)
    (got,) = bundle.run({"scale": np.float32(2)}, "peek")
    np.testing.assert_allclose(got, 2 * np.sum(xs * w, axis=0) + w, rtol=1e-5, atol=1e-6)
    assert int(bundle.state("acc.n")) == 13
    # One function with state: the entry's fields at the top level, as in a bundle without state.
    m = fa.export.webgpu(add, w, acc, np.zeros(4, np.float32), path=tmp_path / "one", bake_argnums=(0,),
                         state_argnums=1)
    assert "entries" not in m and [i["name"] for i in m["inputs"]] == ["x"] and len(m["state_updates"]) == 2
    bundle = _Bundle(gpu, tmp_path / "one")
    for k, x in enumerate(xs, 1):
        (total,) = bundle.run({"x": x})
        np.testing.assert_allclose(total, np.sum(xs[:k] * w), rtol=1e-5, atol=1e-6)


def test_state_copied_where_it_cannot_swap(gpu, tmp_path):
    """A new state that is an input, or that is also an output, is copied into the state buffer."""
    def take(s, x):
        return fnp.sum(s), x

    def both(s, x):
        t = s * 2.0 + x
        return t, t

    x0, x1 = rng.normal(size=(2, 3)).astype(np.float32)
    z = np.zeros(3, np.float32)
    m = fa.export.webgpu({"take": (take, z, z), "both": (both, z, z)}, path=tmp_path, state_argnums=(0,))
    assert all("swap" not in u for e in m["entries"] for u in e["state_updates"])
    assert "partner" not in m["state"][0]
    bundle = _Bundle(gpu, tmp_path)
    np.testing.assert_allclose(bundle.run({"x": x0}, "take")[0], 0.0)
    np.testing.assert_allclose(bundle.run({"x": x1}, "take")[0], np.sum(x0), rtol=1e-6)
    np.testing.assert_allclose(bundle.run({"x": x0}, "both")[0], 2 * x1 + x0, rtol=1e-6)
    np.testing.assert_allclose(bundle.state("s"), 2 * x1 + x0, rtol=1e-6)


def test_state_errors(wdev, tmp_path):
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"must return \(outputs, new_state\)"):
        fa.export.webgpu(lambda s, x: s + x, x, x, path=tmp_path / "a", state_argnums=(0,))
    with pytest.raises(ValueError, match=r"new value of state 's' is float32\[2\]"):
        fa.export.webgpu(lambda s, x: (x, s[:2]), x, x, path=tmp_path / "b", state_argnums=(0,))
    with pytest.raises(ValueError, match="both bake_argnums and state_argnums"):
        fa.export.webgpu(lambda s, x: (x, s), x, x, path=tmp_path / "c", state_argnums=0, bake_argnums=0)
    with pytest.raises(ValueError, match="state_argnums holds 5"):
        fa.export.webgpu(lambda s, x: (x, s), x, x, path=tmp_path / "d", state_argnums=(5,))
    step = lambda s, x: (x, s + x)  # noqa: E731
    with pytest.raises(ValueError, match=r"entry 'b' has state 's' as float32\[2\], an earlier entry as float32\[3\]"):
        fa.export.webgpu({"a": (step, x, x), "b": (step, x[:2], x[:2])}, path=tmp_path / "e", state_argnums=(0,))
    with pytest.raises(ValueError, match="not an identifier"):
        fa.export.webgpu({"a b": (step, x, x)}, path=tmp_path / "f")
    with pytest.raises(TypeError, match="in its tuple"):
        fa.export.webgpu({"a": (step, x, x)}, x, path=tmp_path / "g")


def _state_writes(path, m, entry) -> dict:
    """``{dispatch index: work items}`` of the entry's dispatches that write a state buffer (each work item writes at
    most one element of it: the in-place update kernels)."""
    state = {s["buffer"] for s in m["state"]}
    out = {}
    for k, d in enumerate(entry["dispatches"]):
        if any(b["write"] and b["buffer"] in state for b in d["bindings"]):
            src = (path / m["kernels"][d["kernel"]]["file"]).read_text()
            size = re.search(r"@workgroup_size\(([^)]*)\)", src).group(1)
            out[k] = math.prod(d["workgroups"]) * math.prod(int(v) for v in size.split(","))
    return out


def _cache_step(cache, x, pos):
    """A step with a cache as state: ``x`` (float32[1, 16]) written at row ``pos`` of ``cache`` (float32[1024, 16]),
    the sum of the new cache's rows returned."""
    new = lax.dynamic_update_slice(cache, fnp.tanh(x) * 2.0, (pos, 0))
    return fnp.sum(new, axis=0), new


def test_state_updated_in_place_writes_only_the_new_rows(gpu, tmp_path):
    """A state whose new value is a ``dynamic_update_slice`` of it is written in place: one small kernel writes the
    update into the state buffer (no partner, no copy, no kernel over the whole cache), and the replayed runs
    equal NumPy's step by step, clamped start included."""
    cache = np.zeros((1024, 16), np.float32)
    m = fa.export.webgpu(_cache_step, cache, np.zeros((1, 16), np.float32), np.int32(0), path=tmp_path,
                         state_argnums=(0,))
    assert m["state_updates"] == [] and m["state_in_place"] == ["cache"] and "partner" not in m["state"][0]
    assert not any(b["kind"] == "temp" and b["shape"] == [1024, 16] for b in m["buffers"])
    assert list(_state_writes(tmp_path, m, m).values()) == [64]        # one work-group; the cache has 16,384
    bundle = _Bundle(gpu, tmp_path)
    want = np.zeros((1024, 16))
    for pos in (0, 5, 1023, 2000, -3):                                # past the end and negative: clamped
        x = rng.normal(size=(1, 16)).astype(np.float32)
        row = min(max(pos, 0), 1023)
        want[row] = np.tanh(x[0].astype(np.float64)) * 2.0
        (total,) = bundle.run({"x": x, "pos": np.int32(pos)})
        np.testing.assert_allclose(total, want.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bundle.state("cache"), want, rtol=1e-6, atol=1e-6)


def test_state_read_besides_its_update_is_not_updated_in_place(gpu, tmp_path):
    """Where the old value is also read (here: its sum, besides the update), writing in place would change what
    that read sees: the new value goes to the partner buffer as before, and the results stay right."""
    def step(cache, x, pos):
        return fnp.sum(cache), lax.dynamic_update_slice(cache, x, (pos, 0))

    cache = np.zeros((64, 4), np.float32)
    m = fa.export.webgpu(step, cache, np.zeros((1, 4), np.float32), np.int32(0), path=tmp_path, state_argnums=(0,))
    assert m["state_in_place"] == [] and [u.get("swap") for u in m["state_updates"]] == [True]
    bundle = _Bundle(gpu, tmp_path)
    total = 0.0
    for pos in range(3):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        (got,) = bundle.run({"x": x, "pos": np.int32(pos)})
        np.testing.assert_allclose(got, total, rtol=1e-5, atol=1e-5)
        total += float(np.sum(x.astype(np.float64)))


@pytest.fixture(scope="module")
def llm_model():
    """A small llama of ``examples/llm.py`` (random weights), float32 and 4-bit."""
    import llm
    from transformer_lm import VOCAB
    model = llm.Llama(len(VOCAB), 32, 4, 2, 2, 64, key=fa.random.key(3))
    return model, fa.nn.quantize(model, group_size=32, bits=4)


@pytest.mark.parametrize("gpu_schedule", [False, True], ids=["cpu_adapter", "gpu_adapter"])
def test_llm_bundle_keeps_packed_weights_and_generates_python_greedy_tokens(wdev, gpu, llm_model, tmp_path,
                                                                            gpu_schedule):
    """The 4-bit prefill and decode of examples/browser_llm: the packed words in weights.bin as they are, the
    caches as state, and the greedy ids, replayed step by step as the page runs them, equal Python's. Scheduled
    as for this machine's adapter and as for a GPU's (``tiling_pays``: the work-group forms of the kernels)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                                    "browser_llm"))
    import export_llm
    import llm
    from transformer_lm import encode
    _, q4 = llm_model
    capacity, chunk, new = 64, 8, 12
    be, caps = wdev.impl, wdev.impl.capabilities(wdev)
    be._caps = dataclasses.replace(caps, tiling_pays=gpu_schedule)
    try:
        m = export_llm.export_model(tmp_path, q4, capacity, chunk)
    finally:
        be._caps = caps
    assert any(k["name"].startswith("quantized_wg") for k in m["kernels"]) == gpu_schedule
    assert [e["name"] for e in m["entries"]] == ["prefill", "decode"]
    for e, t in zip(m["entries"], (chunk, 1), strict=True):
        assert [(i["name"], i["dtype"], i["shape"]) for i in e["inputs"]] == [
            ("ids", "int32", [1, t]), ("pos", "int32", []), ("u", "float32", []), ("temperature", "float32", [])]
        assert [(o["name"], o["dtype"], o["shape"]) for o in e["outputs"]] == [("out", "int32", [1])]
        # each cache updated in place: no partner, no copy, and only the new positions written
        assert e["state_updates"] == [] and e["state_in_place"] == ["kv.0.0", "kv.0.1", "kv.1.0", "kv.1.1"]
        writes = _state_writes(tmp_path, m, e)
        state = {st["buffer"] for st in m["state"]}
        written = {b["buffer"] for k in writes for b in e["dispatches"][k]["bindings"] if b["write"]} & state
        # every cache written (a layer's keys and values by one kernel where the schedule fuses their updates)
        assert written == state and len(writes) in (2, 4) and all(n < capacity * 2 * 8 for n in writes.values()), \
            writes
    assert [s["name"] for s in m["state"]] == ["kv.0.0", "kv.0.1", "kv.1.0", "kv.1.1"]
    assert all("partner" not in s for s in m["state"])
    # Each packed matrix once, bit for bit; nothing of the size of a dequantized matrix.
    weights = (tmp_path / "weights.bin").read_bytes()
    packed = {n: np.asarray(v) for n, v in leaf_names("model", q4) if np.asarray(v).dtype == np.uint32}
    baked = {b["name"]: b for b in m["buffers"] if b["kind"] == "weight"}
    assert len(packed) == 2 * 7 + 1 + 1
    for name, v in packed.items():
        b = baked[name]
        assert b["dtype"] == "uint32" and b["shape"] == list(v.shape)
        np.testing.assert_array_equal(np.frombuffer(weights, "<u4", v.size, b["offset"]).reshape(v.shape), v)
    smallest = min(v.size * 32 // 4 for v in packed.values())   # the elements of the smallest matrix
    assert all(b["dtype"] != "float32" or np.prod(b["shape"]) < smallest for b in baked.values())
    assert m["weights"]["bytes"] < sum(v.nbytes for v in packed.values()) * 1.6

    prompt = "Return the number of "
    want = export_llm.generate_like_page(q4, prompt, new, capacity, chunk, device=REF)
    ids = [int(i) for i in encode(prompt)]
    gens = llm.make_generators(REF, 0.9, 1.0)
    text, _, _ = llm.generate(q4, prompt, new, fa.random.key(0), gens, REF, greedy=True, capacity=capacity)
    assert text[len(prompt):] == "".join(export_llm.VOCAB[i] for i in want)   # the page's schedule = llm.py's
    bundle = _Bundle(gpu, tmp_path)
    assert _replay_generation(bundle, ids, new, chunk) == want
    # Sampling at temperature 0.8 with the page's uniform numbers: the same draws as Python's.
    uniforms = rng.random(new).astype(np.float32)
    want = export_llm.generate_like_page(q4, prompt, new, capacity, chunk, device=REF, temperature=0.8,
                                         uniforms=uniforms)
    assert want != export_llm.generate_like_page(q4, prompt, new, capacity, chunk, device=REF)
    assert _replay_generation(bundle, ids, new, chunk, 0.8, uniforms) == want


def _replay_generation(bundle, ids, new, chunk, temperature=0.0, uniforms=None):
    """The page's schedule on a replayed bundle: ``ids`` in chunks then single steps, then ``new`` ids."""
    u = np.zeros(new, np.float32) if uniforms is None else uniforms

    def step(entry, tokens, pos, k):
        (tok,) = bundle.run({"ids": np.asarray([tokens], np.int32), "pos": np.int32(pos), "u": u[k],
                             "temperature": np.float32(temperature)}, entry)
        return int(tok[0])

    pos = 0
    while len(ids) - pos >= chunk:
        tok = step("prefill", ids[pos:pos + chunk], pos, 0)
        pos += chunk
    for t in ids[pos:]:
        tok = step("decode", [t], pos, 0)
        pos += 1
    got = [tok]
    while len(got) < new:
        got.append(step("decode", [got[-1]], pos, len(got)))
        pos += 1
    return got


def test_state_scattered_into_is_updated_in_place(gpu, tmp_path):
    """A state updated by a scatter (``acc.at[i].add(x)``: repeated rows add up, rows out of bounds are dropped)
    is written in place too, and the replayed runs equal NumPy's ``np.add.at``."""
    def step(acc, i, x):
        new = acc.at[i].add(x)
        return fnp.max(new), new

    acc = np.zeros((256, 4), np.float32)
    m = fa.export.webgpu(step, acc, np.zeros(3, np.int32), np.zeros((3, 4), np.float32), path=tmp_path,
                         state_argnums=(0,))
    assert m["state_updates"] == [] and m["state_in_place"] == ["acc"]
    assert list(_state_writes(tmp_path, m, m).values()) == [64]
    bundle = _Bundle(gpu, tmp_path)
    want = np.zeros((256, 4))
    for i in ([1, 7, 1], [300, 0, 255]):
        x = rng.normal(size=(3, 4)).astype(np.float32)
        i = np.asarray(i, np.int32)
        np.add.at(want, i[i < 256], x[i < 256].astype(np.float64))
        (top,) = bundle.run({"i": i, "x": x})
        np.testing.assert_allclose(top, want.max(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bundle.state("acc"), want, rtol=1e-5, atol=1e-6)


def test_in_place_and_swapped_updates_of_one_state_alternate(gpu, tmp_path):
    """One state written in place by one entry and swapped with its partner by another: whichever buffer holds the
    state after a swap is the one the in-place entry writes (the runtime's bind groups follow the roles)."""
    cache = np.zeros((32, 4), np.float32)
    m = fa.export.webgpu(in_place_and_swapped_entries(cache), path=tmp_path, state_argnums=(0,))
    assert [e["state_in_place"] for e in m["entries"]] == [["cache"], []]
    assert [u.get("swap") for u in m["entries"][1]["state_updates"]] == [True]
    bundle = _Bundle(gpu, tmp_path)
    want = np.zeros((32, 4))
    for k in range(4):
        x = rng.normal(size=(1, 4)).astype(np.float32)
        bundle.run({"x": x, "pos": np.int32(3 * k)}, "write")
        want[3 * k] = x[0]
        (total,) = bundle.run({"scale": np.float32(0.5)}, "bump")
        np.testing.assert_allclose(total, want.sum(), rtol=1e-5, atol=1e-5)
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(bundle.state("cache"), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_floating_mode_quantized_matmul_with_baked_uint8_scales_replays(tmp_path, replay, mode):
    """A floating mode's uint8 scales may be baked weights (the runtime copies weights as bytes and the kernels
    read uint8 buffers four to a word); before, the export refused them ("cast it first"), so no mxfp4/mxfp8/
    nvfp4 model reached a page. A uint8 run-time input still raises."""
    w = rng.standard_normal((25, 96)).astype(np.float32)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    q, s = (np.asarray(a) for a in fa.quantize(w, mode=mode))
    assert s.dtype == np.uint8 and s.size % 4   # a byte count that is no whole number of words

    def f(x, q, s):
        return fa.quantized_matmul(x, q, s, mode=mode)
    fa.export.webgpu(f, x, q, s, path=str(tmp_path), bake_argnums=(1, 2))
    with open(tmp_path / "model.json", encoding="utf-8") as fh:
        m = json.load(fh)
    assert [b["dtype"] for b in m["buffers"] if b["kind"] == "weight" and b["shape"] == list(s.shape)] == ["uint8"]
    _assert_outputs(replay(tmp_path, {"x": x}), _reference(f, x, q, s))
    with pytest.raises(UnsupportedOnDevice, match="uint8 cannot cross into the browser"):
        fa.export.webgpu(f, x, q, s, path=str(tmp_path / "input"), bake_argnums=(1,))
