"""Exported bundles in a real browser: Debian's Chromium, headless, WebGPU on SwiftShader, driven by Playwright.

One browser for the module; bundles are served from 127.0.0.1 (WebGPU needs a
secure context, which loopback is) and nothing else is contacted. The tests:

- exported functions (elementwise, reductions, matmul, the digits MLP with baked
  parameters, a ``vmap``-ed and a ``grad`` function, an unrolled ``scan``, int/bool
  inputs) run through ``fnarray-webgpu.js`` on random inputs and agree with the
  numpy backend at float32 tolerance;
- the runtime rejects bad inputs naming the input, the shape and the length, refuses
  another manifest version, and says how to enable WebGPU when ``navigator.gpu`` is missing;
- every WGSL kernel that the webgpu parity cases generate compiles in Chromium's Tint
  (Naga, which the native backend uses, accepts more);
- the digits demo page: a digit drawn with the mouse is classified in the page as
  Python classifies the same 8x8 input; a screenshot is saved
  (into ``$FNARRAY_BROWSER_ARTIFACTS`` when set, else the test's temporary folder);
- the language-model page (``examples/browser_llm``): a 4-bit llama's prefill and decode entry points with the
  key/value caches kept on the GPU and updated in place (a step writes only its new positions); the page's greedy
  characters for a text set at once, and for a text typed
  character by character (reusing the cache), equal Python's, and it shows tokens per second; the runtime's
  state API (``entries``, ``readState``, ``resetState``) on that bundle.

Without playwright or chromium the tests skip with "backend unavailable" (a failure
under ``FNARRAY_REQUIRE_ALL_BACKENDS=1``): ``apt-get install chromium`` and
``pip install playwright`` (no ``playwright install``: Debian's chromium is used).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.export.serve import serve_in_thread
from helpers import BACKEND_UNAVAILABLE, assert_argmax, in_place_and_swapped_entries, require_backend

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, os.path.join(EXAMPLES, "browser_digits"))
sys.path.insert(0, os.path.join(EXAMPLES, "browser_llm"))
import digits_mlp  # noqa: E402

CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"]
REF = fa.devices("numpy")[0]
TIMEOUT_MS = 30_000

HARNESS = """<!doctype html><html><body><p>fnarray export harness</p><script type="module">
const TYPES = { float32: Float32Array, int32: Int32Array, uint32: Uint32Array, bool: Uint8Array };
const models = {};
async function model(dir) {
  if (!models[dir]) {
    const { loadModel } = await import(`./${dir}/fnarray-webgpu.js`);
    models[dir] = await loadModel(`./${dir}/`);
  }
  return models[dir];
}
window.runBundle = async (dir, inputs) => {
  const m = await model(dir);
  const typed = {};
  for (const [name, { dtype, data }] of Object.entries(inputs)) typed[name] = TYPES[dtype].from(data);
  return (await m.run(typed)).map((o) => Array.from(o));
};
window.model = model;
window.harnessReady = true;
</script></body></html>
"""


def _chromium() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip(f"{BACKEND_UNAVAILABLE}: the browser tests need Python's playwright package "
                    "(pip install playwright; no 'playwright install': they drive Debian's chromium)")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip(f"{BACKEND_UNAVAILABLE}: no chromium executable on PATH (apt-get install chromium)")
    return exe


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    from playwright.sync_api import sync_playwright
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
    except Exception as e:  # noqa: BLE001 (a chromium that cannot start is a missing browser)
        pw.stop()
        pytest.skip(f"{BACKEND_UNAVAILABLE}: chromium at {exe} did not start under playwright: {e}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="module")
def wdev():
    return require_backend("webgpu")[0]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "harness.html").write_text(HARNESS)
    server, url = serve_in_thread(root)
    yield root, url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def page(browser, site):
    root, url = site
    p = browser.new_page()
    p.set_default_timeout(TIMEOUT_MS)
    p.goto(url + "harness.html")
    p.wait_for_function("window.harnessReady === true")
    yield p
    p.close()


# ------------------------------------------------------------------------------------------- functions

rng = np.random.default_rng(11)


def _f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _mlp_params(sizes):
    params = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        params[f"w{i + 1}"] = rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32)
        params[f"b{i + 1}"] = rng.normal(0, 0.1, (b,)).astype(np.float32)
    return params


def _loss(params, x, y):
    h = fa.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return -fnp.mean(fnp.sum(fa.nn.one_hot(y, 4) * fa.nn.log_softmax(h, axis=-1), axis=-1))


def _spd_batch(b, n):
    m = rng.normal(size=(b, n, n))
    return (m @ np.swapaxes(m, -1, -2) / n + np.eye(n)).astype(np.float32)


def _cho_solve(x, y):
    c = fa.lax.linalg.cholesky(x)
    z = fa.lax.linalg.triangular_solve(c, y, left_side=True, lower=True)
    return fa.lax.linalg.triangular_solve(c, z, left_side=True, lower=True, transpose_a=True), c


def _quantized_layer(rows=3):
    """A 4-bit layer (packed uint32 weights as inputs) with its bias and activation fused."""
    packed = [np.asarray(a) for a in fa.quantize(_f32(24, 128), group_size=64, bits=4)]
    return (lambda x, w, s, b: fa.nn.relu(fa.quantized_matmul(x, w, s, b, group_size=64, bits=4) + 0.25),
            (_f32(rows, 128), *packed), (), 1e-4)


def _cases():
    digits = _mlp_params(digits_mlp.LAYER_SIZES)
    small = _mlp_params((8, 16, 4))
    return {
        "elementwise": (lambda x, y: fnp.tanh(x) * y + fnp.exp(-x * x) - fnp.sqrt(fnp.abs(y)) / (1.0 + x * x)
                        + fnp.log1p(y * y), (_f32(37, 5), _f32(37, 5)), ()),
        # WGSL lets sin/cos be off by 2**-11 absolute on [-pi, pi] (SwiftShader is, ~2e-4): that bound, not float32's.
        "trig": (lambda x: (fnp.sin(x), fnp.cos(x) * 2.0), (_f32(40, lo=-3.1, hi=3.1),), (), 2.0**-11),
        "reductions": (lambda a: (fnp.sum(a, axis=0), fnp.max(a, axis=1), fnp.mean(a), fnp.argmax(a, axis=1),
                                  fa.nn.logsumexp(a, axis=-1)), (_f32(29, 11),), ()),
        "matmul": (lambda a, b: a @ b, (_f32(33, 17), _f32(17, 9)), ()),
        # Exported with tiling_pays (as on a GPU adapter): the tiled kernel with work-group memory and barriers.
        "matmul_tiled": (lambda a, b: fa.nn.relu(a @ b + 0.5), (_f32(64, 80), _f32(80, 48)), ()),
        "mlp": (digits_mlp.predict, (digits, _f32(4, 64, lo=0.0, hi=1.0)), (0,)),
        "vmap": (fa.vmap(lambda a, b: fnp.dot(a, b) + fnp.tanh(a).sum(), in_axes=(0, None)),
                 (_f32(7, 5), _f32(5)), ()),
        "grad": (fa.grad(_loss), (small, _f32(5, 8), rng.integers(0, 4, (5,)).astype(np.int32)), ()),
        "scan": (lambda h0, xs: fa.scan(lambda h, x: (fnp.tanh(0.5 * h + x), h.sum()), h0, xs),
                 (_f32(6), _f32(9, 6)), ()),
        # The linear-algebra kernels (lowering/kernels/groups/linalg.py): a Cholesky solve of a batch of SPD systems.
        "cholesky_solve": (_cho_solve, (_spd_batch(3, 6), _f32(3, 6, 2)), (), 1e-4),
        "int_bool": (lambda k, m: (fnp.where(m, k * 3, -k), m & (k > 0)),
                     (rng.integers(-9, 9, (4, 6)).astype(np.int32), rng.random((4, 6)) < 0.5), ()),
        # The fft kernels: Bluestein (24 points) inside a real filter, Stockham (8 x 16) in a 2-D power spectrum.
        # Their twiddles come from sin/cos (SwiftShader's are off by up to 2**-11): a bound scaled by the sums.
        "fft": (lambda x, y: (fnp.fft.irfft(fnp.fft.rfft(x) * fnp.exp(-0.1 * fnp.arange(13.0)), n=24),
                              fnp.abs(fnp.fft.fft2(y)) / 16.0),
                (_f32(3, 24), _f32(8, 16)), (), 2e-3),
        # quantized_matmul's kernels (lowering/kernels/groups/quantized.py): the CPU form, and the GPU form
        # (exported with tiling_pays: a work-group per column reduced in work-group memory).
        "quantized": _quantized_layer(),
        "quantized_gpu": _quantized_layer(),
        # 11 rows (a prefill): the weights laid out in panels by a copy kernel, then the tiled kernel (2-D grid).
        "quantized_prefill": _quantized_layer(11),
    }


CASES = _cases()


@pytest.fixture(scope="module")
def bundles(wdev, site):
    root, _ = site
    out = {}
    for name, (f, args, bake, *_) in CASES.items():
        with _tiling(wdev, name in ("matmul_tiled", "quantized_gpu")):
            out[name] = fa.export.webgpu(f, *args, path=root / name, bake_argnums=bake)
    assert any(k["name"].startswith("dot_tiled") for k in out["matmul_tiled"]["kernels"])
    assert any(k["name"].startswith("quantized_wg") for k in out["quantized_gpu"]["kernels"])
    assert [k["name"][:14] for k in out["quantized_prefill"]["kernels"]] == ["quantized_pack", "quantized_tile"]
    return out


@contextlib.contextmanager
def _tiling(wdev, on=True):
    """Schedule as for a GPU adapter (``tiling_pays``), where this machine's CPU adapter says it does not pay."""
    be = wdev.impl
    old = be.capabilities(wdev)
    if on:
        be._caps = dataclasses.replace(old, tiling_pays=True)
    try:
        yield
    finally:
        be._caps = old


def _inputs(manifest, f, args, bake):
    """The run-time inputs of ``manifest``: the example leaves that were not baked, by dotted name."""
    leaves = []
    for i, a in enumerate(args):
        if i not in bake:
            leaves.extend(fa.tree_util.tree_leaves(a))
    assert len(leaves) == len(manifest["inputs"])
    return {spec["name"]: {"dtype": spec["dtype"], "data": np.asarray(v).astype(
        np.uint8 if spec["dtype"] == "bool" else np.asarray(v).dtype).ravel().tolist()}
        for spec, v in zip(manifest["inputs"], leaves, strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_exported_function_matches_the_numpy_backend(page, bundles, name):
    f, args, bake, *tol = CASES[name]
    atol = tol[0] if tol else 3e-5
    m = bundles[name]
    got = page.evaluate("([dir, inputs]) => window.runBundle(dir, inputs)", [name, _inputs(m, f, args, bake)])
    want = [np.asarray(x) for x in fa.tree_util.tree_leaves(fa.jit(f, device=REF)(*args))]
    assert len(got) == len(want) == len(m["outputs"])
    for g, w, spec in zip(got, want, m["outputs"], strict=True):
        assert spec["shape"] == list(w.shape) and spec["dtype"] == w.dtype.name, (spec, w.shape, w.dtype)
        g = np.asarray(g).reshape(w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=3e-5, atol=atol, err_msg=f"{name}: {spec['name']}")
        else:
            np.testing.assert_array_equal(g.astype(w.dtype), w, err_msg=f"{name}: {spec['name']}")


def test_state_updated_in_place_in_chromium(page, site, wdev):
    """State written in place by the update kernels Tint compiles: a row written at a clamped position and a scatter
    with a repeated and an out-of-bounds index, run three times in the page (the state kept between runs), against
    NumPy in float64."""
    root, _ = site

    def step(rows, acc, x, pos, i):
        new_rows = fa.lax.dynamic_update_slice(rows, x, (pos, 0))
        new_acc = acc.at[i].add(x[0, :4])
        return fnp.sum(new_rows, axis=0) + fnp.sum(new_acc), (new_rows, new_acc)

    rows0, acc0 = np.zeros((512, 8), np.float32), np.zeros((64, 4), np.float32)
    m = fa.export.webgpu(step, rows0, acc0, np.zeros((1, 8), np.float32), np.int32(0), np.zeros(3, np.int32),
                         path=root / "in_place", state_argnums=(0, 1))
    assert m["state_in_place"] == ["rows", "acc"] and m["state_updates"] == []
    rows, acc = rows0.astype(np.float64), acc0.astype(np.float64)
    for pos, idx in ((3, [5, 9, 5]), (700, [63, 64, 0]), (0, [1, 1, 1])):
        x = rng.normal(size=(1, 8)).astype(np.float32)
        i = np.asarray(idx, np.int32)
        rows[min(pos, 511)] = x[0]
        keep = i < 64
        np.add.at(acc, i[keep], np.broadcast_to(x[0, :4].astype(np.float64), (3, 4))[keep])
        inputs = {"x": {"dtype": "float32", "data": x.ravel().tolist()}, "pos": {"dtype": "int32", "data": [pos]},
                  "i": {"dtype": "int32", "data": i.tolist()}}
        (got,) = page.evaluate("([dir, inputs]) => window.runBundle(dir, inputs)", ["in_place", inputs])
        np.testing.assert_allclose(got, rows.sum(0) + acc.sum(), rtol=1e-5, atol=1e-5)


def test_in_place_and_swapped_entries_of_one_state_in_chromium(page, site, wdev):
    """One state written in place by one entry and swapped with its partner by the other, alternated in the page:
    the in-place entry writes whichever buffer holds the state after a swap (the runtime's bind groups follow)."""
    root, _ = site
    cache = np.zeros((32, 4), np.float32)
    m = fa.export.webgpu(in_place_and_swapped_entries(cache), path=root / "alternate", state_argnums=(0,))
    assert [e["state_in_place"] for e in m["entries"]] == [["cache"], []]
    xs = rng.normal(size=(4, 4)).astype(np.float32)
    got = page.evaluate("""async (xs) => {
      const m = await window.model('alternate');
      const totals = [];
      for (let k = 0; k < xs.length; k++) {
        await m.entries.write.run({ x: Float32Array.from(xs[k]), pos: Int32Array.of(3 * k) });
        const [t] = await m.entries.bump.run({ scale: Float32Array.of(0.5) });
        totals.push(t[0]);
      }
      return { totals, cache: Array.from(await m.readState('cache')) };
    }""", xs.tolist())
    want, totals = np.zeros((32, 4)), []
    for k, x in enumerate(xs):
        want[3 * k] = x
        totals.append(want.sum())
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(got["totals"], totals, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["cache"], (32, 4)), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------- runtime errors


def _rejection(page, script):
    return page.evaluate(f"async () => {{ try {{ {script}; return 'resolved'; }} "
                         "catch (e) { return `${e.name}: ${e.message}`; } }")


def test_bad_inputs_reject_naming_input_shape_and_length(page, bundles):
    run = "const m = await window.model('mlp'); await m.run"
    msg = _rejection(page, f"{run}({{x: new Float32Array(10)}})")
    assert msg == ('RangeError: input "x": expected float32[4, 64] (256 elements) as a Float32Array, '
                   'got a Float32Array of length 10')
    msg = _rejection(page, f"{run}({{x: new Float64Array(256)}})")
    assert msg.startswith('TypeError: input "x": expected float32[4, 64]') and "Float64Array of length 256" in msg
    msg = _rejection(page, f"{run}({{x: Array(256).fill(0)}})")
    assert "an Array of length 256" in msg
    assert _rejection(page, f"{run}({{}})") == ('TypeError: missing input "x": expected float32[4, 64] '
                                                '(256 elements) as a Float32Array')
    msg = _rejection(page, f"{run}({{x: new Float32Array(256), y: new Float32Array(1)}})")
    assert msg == 'TypeError: unknown input "y": this model\'s inputs are "x"'
    msg = _rejection(page, f"{run}(new Float32Array(256))")
    assert msg.startswith("TypeError: model.run takes an object mapping input names")
    # A rejected run does not break the next one.
    ok = page.evaluate("async () => (await (await window.model('mlp')).run({x: new Float32Array(256)}))[0].length")
    assert ok == 40


def test_manifest_version_is_checked(page, bundles, site):
    root, _ = site
    shutil.copytree(root / "matmul", root / "future")
    m = json.loads((root / "future" / "model.json").read_text())
    m["version"] = 999
    (root / "future" / "model.json").write_text(json.dumps(m))
    msg = _rejection(page, "await window.model('future')")
    assert f"has manifest version 999, but this fnarray-webgpu.js reads version {fa.export.MANIFEST_VERSION}" in msg


@contextlib.contextmanager
def _page_without_webgpu(browser):
    """A page of a browser context in which ``navigator.gpu`` is undefined (as in a browser without WebGPU)."""
    context = browser.new_context()
    context.add_init_script("Object.defineProperty(Navigator.prototype, 'gpu', "
                            "{ get() { return undefined; }, configurable: true });")
    p = context.new_page()
    p.set_default_timeout(TIMEOUT_MS)
    try:
        yield p
    finally:
        context.close()


def test_without_webgpu_loading_rejects_saying_how_to_enable_it(browser, bundles, site):
    _, url = site
    with _page_without_webgpu(browser) as p:
        p.goto(url + "harness.html")
        p.wait_for_function("window.harnessReady === true")
        msg = _rejection(p, "await window.model('matmul')")
        assert msg.startswith("WebGPUUnavailableError: WebGPU is not available") and "chrome://flags" in msg


# ------------------------------------------------------------------------------------------- WGSL in Tint


def _parity_kernels(wdev):
    """Every distinct WGSL source the webgpu backend generates for the parity cases it runs (as scheduled for
    this machine's adapter), and for matrix products large enough to be tiled where tiling pays (a GPU's)."""
    from fnarray.core import primitives as P
    from fnarray.devices.partition import unsupported_reason
    from fnarray.testing.cases import CASES as PARITY
    mm = dict(dimension_numbers=(((1,), (0,)), ((), ())), preferred_element_type=None)
    bmm = dict(dimension_numbers=(((2,), (1,)), ((0,), (0,))), preferred_element_type=None)
    tiled = [("dot_tiled", P.dot_general, [_f32(64, 96), _f32(96, 80)], mm),
             ("dot_tiled_batch", P.dot_general, [_f32(2, 40, 72), _f32(2, 72, 36)], bmm),
             ("dot_tiled_int", P.dot_general, [rng.integers(-5, 5, (64, 64)).astype(np.int32),
                                               rng.integers(-5, 5, (64, 64)).astype(np.int32)], mm)]
    sources = {}
    for cases, tiling in ((PARITY, False), (tiled, True)):
        with _tiling(wdev, tiling):
            for name, prim, inputs, params in cases:
                fn = lambda *a, prim=prim, params=params: prim.bind(*a, **params)  # noqa: E731
                if any(unsupported_reason(e, wdev) is not None for e in fa.make_ir(fn)(*inputs).eqns):
                    continue  # runs on numpy through the fallback: no kernel
                for k in fa.jit(fn, device=wdev).lower(*inputs).kernels():
                    sources.setdefault(k.source, f"{name}: {k.name}")
    assert sum(label.startswith("dot_tiled") and ": dot_tiled" in label for label in sources.values()) >= 3
    # Row kernels: softmax and layernorm with their row values in the reduction's kernel (a work-group per row
    # for few long rows, with barriers; a work-item per row), argmax by work-group, a work-group scan.
    def layernorm(v):
        mu = fnp.mean(v, axis=-1, keepdims=True)
        return (v - mu) * fa.lax.rsqrt(fnp.mean(fnp.square(v - mu), axis=-1, keepdims=True) + 1e-5)

    rows = [("softmax", lambda v: fa.nn.softmax(v, axis=-1)), ("layernorm", layernorm),
            ("argmax", lambda v: fnp.argmax(v, axis=-1)), ("cumsum", lambda v: fnp.cumsum(v, axis=-1)),
            ("zero terms", lambda v: (v * 0.0 + 0.0) - (-0.0))]  # the helpers Mesa's folds need (fa_mulz, fa_addz)
    for n_rows in (3, 700):
        for name, fn in rows:
            for k in fa.jit(fn, device=wdev).lower(_f32(n_rows, 130)).kernels():
                sources.setdefault(k.source, f"{name} rows {n_rows}: {k.name}")
    return sources


def test_every_parity_kernel_compiles_in_chromium(page, wdev):
    sources = _parity_kernels(wdev)
    assert len(sources) > 100
    result = page.evaluate("""async (kernels) => {
      const adapter = await navigator.gpu.requestAdapter();
      const f16 = adapter.features.has("shader-f16");
      const device = await adapter.requestDevice({ requiredFeatures: f16 ? ["shader-f16"] : [] });
      const failures = [], skipped = [];
      for (const [label, code] of kernels) {
        if (!f16 && code.includes("enable f16;")) { skipped.push(label); continue; }
        const module = device.createShaderModule({ code });
        const info = await module.getCompilationInfo();
        const errors = info.messages.filter((m) => m.type === "error");
        if (errors.length) {
          failures.push(`${label}: ` + errors.map((e) => `${e.lineNum}:${e.linePos} ${e.message}`).join("; "));
          continue;
        }
        device.pushErrorScope("validation");
        const entryPoint = code.match(/@compute[^]*?fn ([A-Za-z0-9_]+)\\(/)[1];
        try {
          await device.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint } });
        } catch (e) {
          failures.push(`${label}: pipeline: ${e.message}`);
        }
        const err = await device.popErrorScope();
        if (err) failures.push(`${label}: pipeline: ${err.message}`);
      }
      return { failures, skipped, f16 };
    }""", [[label, code] for code, label in sources.items()])
    assert result["failures"] == [], "\n".join(result["failures"])
    # SwiftShader has no shader-f16: only float16 kernels may be left out, and the parity cases have none.
    assert all("f16" in s or "float16" in s for s in result["skipped"]), result["skipped"]


# ------------------------------------------------------------------------------------------- the demo page


@pytest.fixture(scope="module")
def digits_models(wdev, site):
    """The demo site with both models (briefly trained): ``{"mlp": params, "cnn": params}``."""
    pytest.importorskip("sklearn", reason="the digits demo needs scikit-learn's data set (pip install scikit-learn)")
    import digits_cnn
    import export_digits
    root, _ = site
    trained = digits_mlp.main(["--epochs", "4", "--device", "numpy:0", "--quiet"])["params"]
    cnn = digits_cnn.main(["--epochs", "1", "--device", "numpy:0", "--quiet"])["params"]
    export_digits.build_site(root / "digits", trained, n_test_images=16, cnn_params=cnn)
    return {"mlp": trained, "cnn": cnn}


@pytest.fixture(scope="module")
def digits_site(digits_models):
    return digits_models["mlp"]


def _python_probs(params, counts, module=digits_mlp):
    x = (np.asarray(counts, np.float32) / 16.0).reshape(1, 64)
    return np.asarray(fa.jit(module.predict, device=REF)(params, x))[0]


def _artifact(tmp_path, name):
    folder = os.environ.get("FNARRAY_BROWSER_ARTIFACTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, name)
    return str(tmp_path / name)


def test_demo_page_without_webgpu_shows_how_to_enable_it(browser, digits_site, site):
    _, url = site
    with _page_without_webgpu(browser) as p:
        p.goto(url + "digits/index.html")
        p.wait_for_function("document.body.dataset.ready === 'no-webgpu'")
        status = p.locator("#status")
        assert status.is_visible() and "error" in status.get_attribute("class")
        text = status.inner_text()
        assert text.startswith("WebGPU is not available") and "secure context" in text


@contextlib.contextmanager
def _demo_page(browser, address):
    """A page of a demo at ``address``, loaded and ready (``document.body.dataset.ready === "yes"``)."""
    p = browser.new_page(viewport={"width": 1280, "height": 760})
    p.set_default_timeout(TIMEOUT_MS)
    try:
        p.goto(address)
        p.wait_for_function("['yes', 'error'].includes(document.body.dataset.ready)")
        assert p.evaluate("document.body.dataset.ready") == "yes", p.inner_text("#status")
        yield p
    finally:
        p.close()


def test_demo_page_classifies_a_drawn_digit_as_python_does(browser, digits_site, site, tmp_path):
    _, url = site
    with _demo_page(browser, url + "digits/index.html") as p:
        box = p.locator("#pad").bounding_box()

        def at(u, v):
            return box["x"] + u * box["width"], box["y"] + v * box["height"]

        # A "7": the top bar, then the diagonal down to the bottom.
        p.mouse.move(*at(0.25, 0.2))
        p.mouse.down()
        p.mouse.move(*at(0.75, 0.2), steps=12)
        p.mouse.move(*at(0.42, 0.85), steps=16)
        p.mouse.up()
        p.wait_for_function("document.querySelector('#prediction').dataset.runs === '1'")
        counts = json.loads(p.get_attribute("#input-grid", "data-values"))
        assert len(counts) == 64 and 0 < sum(counts) and max(counts) <= 16
        label = int(p.inner_text("#prediction"))
        probs = np.asarray(json.loads(p.get_attribute("#prediction", "data-probs")), np.float32)
        want = _python_probs(digits_site, counts)
        assert label == int(np.argmax(want))
        np.testing.assert_allclose(probs, want, rtol=3e-5, atol=3e-6)
        shot = _artifact(tmp_path, "browser_digits_drawn.png")
        p.screenshot(path=shot, full_page=True)
        assert os.path.getsize(shot) > 10_000

        # Picking a test image classifies its 0..16 pixels the same way.
        p.locator("#gallery canvas").nth(3).click()
        p.wait_for_function("document.querySelector('#prediction').dataset.runs === '2'")
        counts = json.loads(p.get_attribute("#input-grid", "data-values"))
        probs = np.asarray(json.loads(p.get_attribute("#prediction", "data-probs")), np.float32)
        np.testing.assert_allclose(probs, _python_probs(digits_site, counts), rtol=3e-5, atol=3e-6)
        assert int(p.inner_text("#prediction")) == int(np.argmax(probs))
        assert "true label" in p.inner_text("#picked-label")
        p.screenshot(path=_artifact(tmp_path, "browser_digits_test_image.png"), full_page=True)


def test_demo_page_classifies_with_the_cnn_as_python_does(browser, digits_models, site):
    import digits_cnn
    _, url = site
    with _demo_page(browser, url + "digits/index.html") as p:
        assert p.locator("#model-choice option").count() == 2
        p.locator("#gallery canvas").nth(5).click()            # with the default model, the MLP
        p.wait_for_function("document.querySelector('#prediction').dataset.runs === '1'")
        assert p.get_attribute("#prediction", "data-model") == "mlp" and "MLP" in p.inner_text("#answered-by")
        counts = json.loads(p.get_attribute("#input-grid", "data-values"))
        p.select_option("#model-choice", "cnn")                # switching re-classifies the same image
        p.wait_for_function("document.querySelector('#prediction').dataset.runs === '2'")
        assert p.get_attribute("#prediction", "data-model") == "cnn" and "CNN" in p.inner_text("#answered-by")
        probs = np.asarray(json.loads(p.get_attribute("#prediction", "data-probs")), np.float32)
        want = _python_probs(digits_models["cnn"], counts, digits_cnn)
        np.testing.assert_allclose(probs, want, rtol=3e-5, atol=3e-6)
        assert int(p.inner_text("#prediction")) == int(np.argmax(probs))
        # the page's pick is Python's, up to a near-tie within the tolerance of the probabilities above
        assert_argmax(want[None], [int(np.argmax(probs))], 3e-5 * float(want.max()) + 3e-6, msg="CNN's digit")

        box = p.locator("#pad").bounding_box()                 # a drawn "1", classified by the CNN
        p.mouse.move(box["x"] + 0.5 * box["width"], box["y"] + 0.15 * box["height"])
        p.mouse.down()
        p.mouse.move(box["x"] + 0.5 * box["width"], box["y"] + 0.85 * box["height"], steps=16)
        p.mouse.up()
        p.wait_for_function("document.querySelector('#prediction').dataset.runs === '3'")
        counts = json.loads(p.get_attribute("#input-grid", "data-values"))
        probs = np.asarray(json.loads(p.get_attribute("#prediction", "data-probs")), np.float32)
        np.testing.assert_allclose(probs, _python_probs(digits_models["cnn"], counts, digits_cnn), rtol=3e-5,
                                   atol=3e-6)
        assert p.get_attribute("#prediction", "data-model") == "cnn"


# ------------------------------------------------------------------------------------------- the LLM page

LLM_SIZES = dict(capacity=96, chunk=16, new_tokens=24)


@pytest.fixture(scope="module")
def llm_site(wdev, site):
    """The language-model page with examples/llm.py's llama at its default size, trained briefly (250 steps, ~10 s
    on numpy:0: it writes English-like character runs, so the greedy ids vary) and quantized to 4 bits."""
    pytest.importorskip("tqdm", reason="the examples need tqdm (pip install 'fnarray[examples]')")
    import export_llm
    import llm
    root, _ = site
    model = llm.main(["--steps", "250", "--batch-size", "8", "--context", "32", "--lr", "1e-2", "--quantize",
                      "--new-tokens", "2", "--eval-windows", "2", "--device", "numpy:0", "--quiet"])["model"]
    q4 = fa.nn.quantize(model, group_size=64, bits=4)
    export_llm.build_site(root / "llm", q4, info="test model (250 training steps)", **LLM_SIZES)
    return q4


def _page_greedy(p, text, temperature="0"):
    """The ids the page generated for ``text`` at ``temperature`` (waiting for that generation to finish) and how
    many positions of the cache it reused."""
    p.wait_for_function("([t, temp]) => { const c = document.querySelector('#continuation');"
                        " return c.dataset.done === 'yes' && c.dataset.prompt === t"
                        " && c.dataset.temperature === temp; }", arg=[text, temperature], timeout=60_000)
    c = p.locator("#continuation")
    return json.loads(c.get_attribute("data-ids")), int(c.get_attribute("data-reused"))


#: The LLM page's model has |logits| up to ~7; one pass on webgpu:0 (lavapipe) or opencl:0 differs from numpy:0's
#: by up to 2e-5 (2026-12-07, the four texts below). A greedy pick that differs from numpy:0's must lie within
#: ten times that of the reference's maximum (a near-tie of the top two; their gaps here are 0.016 and more).
GREEDY_ATOL = 2e-4


_GREEDY = {}


def _greedy_reference(export_llm, model, text):
    """numpy:0's greedy ids for ``text`` (``generate_like_page``), computed once per model and text."""
    key = (id(model), text)
    if key not in _GREEDY:
        _GREEDY[key] = export_llm.generate_like_page(model, text, device=REF, **LLM_SIZES)
    return _GREEDY[key]


def _assert_greedy_like_python(export_llm, model, text, ids):
    """The page's greedy ``ids`` for ``text`` equal numpy:0's (``generate_like_page``, the page's schedule);
    where they differ, every page pick must be the argmax of numpy:0's logits after the page's own earlier
    picks, or within ``GREEDY_ATOL`` of it (``assert_argmax``): a near-tie that SwiftShader's float32 sums broke
    the other way. The logits come from one pass over the window the page reads (causal: position ``t``'s
    logits are those of a pass over its first ``t + 1`` ids)."""
    want = _greedy_reference(export_llm, model, text)
    if ids == want:
        return
    window = [int(i) for i in export_llm.encode(text)][-(LLM_SIZES["capacity"] - LLM_SIZES["new_tokens"]):]
    seq = np.asarray(window + ids[:-1], np.int32)[None]
    logits = np.asarray(fa.jit(lambda m, s: m(s), device=REF)(model, seq))[0, len(window) - 1:]
    assert_argmax(logits, ids, GREEDY_ATOL, msg=f"page's greedy ids for {text!r} (numpy:0's {want})")


def _assert_sampled_like_python(export_llm, model, text, ids, uniforms, temperature, margin=5e-4):
    """The page's sampled ``ids`` equal numpy:0's for the same uniform draws; where they first differ, the draw must
    lie within ``margin`` of the page's id's interval in the cumulative softmax (float32 sums on SwiftShader and
    NumPy round differently): a draw moved by at most ``margin`` then gives the page's ids in the reference, every
    later one included (they follow from the same draws). The id drawn at a position grows with its draw, so the
    moved draw is found by bisection; ids of tiny probability between two boundaries (several within ``margin``)
    are found too."""
    def like_page(draw):
        draws = list(uniforms)
        if draw is not None:
            draws[first] = min(max(draw, 0.0), 1.0 - 1e-7)
        return export_llm.generate_like_page(model, text, device=REF, temperature=temperature, uniforms=draws,
                                             **LLM_SIZES)
    first = None
    want = like_page(None)
    if ids == want:
        return
    first = next(i for i, (a, b) in enumerate(zip(ids, want)) if a != b)
    lo, hi = uniforms[first] - margin, uniforms[first] + margin
    seen = {}
    for _ in range(40):                                 # float32 draws: the interval is spent in ~20 halvings
        mid = (lo + hi) / 2
        got = seen[mid] = like_page(mid)
        if got[first] == ids[first] or hi - lo < 1e-9:
            break
        lo, hi = (mid, hi) if got[first] < ids[first] else (lo, mid)
    assert ids in seen.values(), (
        f"sampled ids differ from numpy:0's at position {first} and no draw within {margin} of "
        f"{uniforms[first]} gives the page's: page {ids}, numpy:0 {want}, moved draws {list(seen.values())[:4]}")


def test_sampled_comparison_rejects_ids_not_explained_by_a_boundary(llm_site):
    import export_llm
    text, uniforms = "Return a new list of the ", [0.37, 0.91, 0.05] + [0.5] * (LLM_SIZES["new_tokens"] - 3)
    greedy = _greedy_reference(export_llm, llm_site, text)
    wrong = greedy[:5] + [(greedy[5] + 7) % len(export_llm.VOCAB)] + greedy[6:]
    with pytest.raises(AssertionError, match="at position 5 is"):    # greedy: a pick off the maximum fails too
        _assert_greedy_like_python(export_llm, llm_site, text, wrong)
    ids = export_llm.generate_like_page(llm_site, text, device=REF, temperature=0.8, uniforms=uniforms, **LLM_SIZES)
    _assert_sampled_like_python(export_llm, llm_site, text, ids, uniforms, temperature=0.8)
    wrong = ids[:2] + [(ids[2] + 7) % len(export_llm.VOCAB)] + ids[3:]
    with pytest.raises(AssertionError, match="at position 2"):
        _assert_sampled_like_python(export_llm, llm_site, text, wrong, uniforms, temperature=0.8)


def test_sampled_comparison_accepts_a_draw_moved_across_a_boundary(llm_site):
    """A page whose float32 sums put a draw on the other side of a boundary (the harness's CPU once did) passes."""
    import export_llm
    text, uniforms = "Return a new list of the ", [0.5] * LLM_SIZES["new_tokens"]

    def at(draw):
        draws = uniforms[:2] + [draw] + uniforms[3:]
        return export_llm.generate_like_page(llm_site, text, device=REF, temperature=0.8, uniforms=draws,
                                             **LLM_SIZES)
    lo, hi = 0.02, 0.98                                  # a boundary at position 2, found by bisection
    assert at(lo)[2] != at(hi)[2]
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if at(mid)[2] == at(lo)[2] else (lo, mid)
    page = at(hi + 2e-4)
    assert page != at(lo - 2e-4)
    _assert_sampled_like_python(export_llm, llm_site, text, page, uniforms[:2] + [lo - 2e-4] + uniforms[3:],
                                temperature=0.8)
    with pytest.raises(AssertionError, match="at position 2"):
        _assert_sampled_like_python(export_llm, llm_site, text, page, uniforms[:2] + [lo - 2e-3] + uniforms[3:],
                                    temperature=0.8)


def test_llm_page_continues_text_with_python_greedy_tokens(browser, llm_site, site, tmp_path):
    import export_llm
    _, url = site
    with _demo_page(browser, url + "llm/index.html") as p:
        ids, _ = _page_greedy(p, "The ")                        # the text the page starts with
        _assert_greedy_like_python(export_llm, llm_site, "The ", ids)

        text = "Return a new list of the items in "               # 34 characters: 2 prefill chunks, 2 decodes
        p.fill("#prompt", text)
        ids, reused = _page_greedy(p, text)
        _assert_greedy_like_python(export_llm, llm_site, text, ids)
        assert len(ids) == LLM_SIZES["new_tokens"] and len(set(ids)) > 3
        assert p.inner_text("#continuation") == "".join(export_llm.VOCAB[i] for i in ids)
        rate = float(p.get_attribute("#speed", "data-tokens-per-second"))
        assert rate > 0 and "tokens/s" in p.inner_text("#speed")
        p.screenshot(path=_artifact(tmp_path, "browser_llm.png"), full_page=True)

        p.locator("#prompt").press("End")                       # typed: each character one decode step
        p.locator("#prompt").press_sequentially("order", delay=30)
        ids, reused = _page_greedy(p, text + "order")
        assert reused >= len(text)                              # the cache of the unchanged text was kept
        _assert_greedy_like_python(export_llm, llm_site, text + "order", ids)

        p.click("#reset")                                       # model.resetState(), then fed from the start
        p.wait_for_function("document.querySelector('#continuation').dataset.reused === '0'")
        ids, reused = _page_greedy(p, text + "order")
        assert reused == 0
        _assert_greedy_like_python(export_llm, llm_site, text + "order", ids)
        long = "The function returns a list of the names of the files in the folder, sorted by " * 2
        p.fill("#prompt", long)                                 # past the window: its last 72 characters are read
        ids, _ = _page_greedy(p, long)
        _assert_greedy_like_python(export_llm, llm_site, long, ids)
        p.evaluate("() => { const t = document.querySelector('#temperature'); t.value = '0.8';"
                   " t.dispatchEvent(new Event('input')); }")          # sampled on the GPU with the page's draws
        ids, _ = _page_greedy(p, long, "0.8")
        uniforms = json.loads(p.get_attribute("#continuation", "data-uniforms"))
        _assert_sampled_like_python(export_llm, llm_site, long, ids, uniforms, temperature=0.8)
        print(f"browser LLM page on SwiftShader: {rate:.1f} tokens/s")


def test_runtime_entries_and_state_api(page, llm_site):
    result = page.evaluate("""async () => {
      const m = await window.model('llm/model');
      const out = { entries: Object.keys(m.entries), state: m.state.map((s) => s.name),
                    inPlace: m.manifest.entries.map((e) => e.state_in_place) };
      try { await m.run({}); } catch (e) { out.run = `${e.name}: ${e.message}`; }
      try { await m.readState("nope"); } catch (e) { out.unknown = e.message; }
      const u = Float32Array.of(0), temperature = Float32Array.of(0);
      try { await m.entries.decode.run({ ids: Int32Array.of(1), pos: Int32Array.of(0), u, temperature, "kv.0.0": 1 }); }
      catch (e) { out.stateAsInput = e.message; }
      const sum = (a) => a.reduce((x, y) => x + Math.abs(y), 0);
      await m.resetState();
      out.zero = sum(await m.readState("kv.0.0"));
      const [t] = await m.entries.decode.run({ ids: Int32Array.of(5), pos: Int32Array.of(3), u, temperature });
      const k = await m.readState("kv.0.0");
      out.token = t.length;
      out.filled = k.length;
      // kv.0.0 is float32[1, K=2, capacity=96, H=16] (heads first): position 3 of each head
      out.row3 = sum(k.slice(3 * 16, 4 * 16)) + sum(k.slice(96 * 16 + 3 * 16, 96 * 16 + 4 * 16));
      out.others = sum(k) - out.row3;
      await m.resetState();
      out.reset = sum(await m.readState("kv.0.0"));
      await m.writeState("kv.1.1", new Float32Array(k.length).fill(0.5));
      out.written = sum(await m.readState("kv.1.1"));
      try { await m.writeState("kv.1.1", new Float32Array(3)); } catch (e) { out.badWrite = e.message; }
      await m.resetState();
      return out;
    }""")
    assert result["entries"] == ["prefill", "decode"]
    assert result["state"] == ["kv.0.0", "kv.0.1", "kv.1.0", "kv.1.1"]
    assert result["inPlace"] == [result["state"]] * 2          # both entries write the caches' new rows in place
    assert "several entry points" in result["run"] and "model.entries.<name>.run" in result["run"]
    assert result["unknown"].startswith('unknown state "nope"')
    assert '"kv.0.0" is state' in result["stateAsInput"]
    assert result["zero"] == 0 and result["token"] == 1 and result["filled"] == LLM_SIZES["capacity"] * 32
    assert result["row3"] > 0 and result["others"] == 0 and result["reset"] == 0   # the write went to position 3
    assert result["written"] == 0.5 * result["filled"]
    assert result["badWrite"].startswith('state "kv.1.1": expected float32[1, 2, 96, 16] (3072 elements)')
