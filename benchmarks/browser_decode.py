"""Per-token decode time of ``examples/browser_llm``'s exported model in headless Chromium (WebGPU), with the key/value
caches updated in place (a decode step writes its one new position into each cache) against the whole cache copied
each step (the export before in-place state: the new cache computed into a partner buffer that swaps with the old).

Both bundles are exported from one model (``examples/llm.py``'s llama, randomly initialised, 4-bit, ``--capacity``
positions per cache) in this process: "copy" with the webgpu backend lowering without donation (what the export did
before), "in place" as it is now. The page (the test harness of ``tests/test_browser.py``: Debian's Chromium driven
by playwright, ``--enable-unsafe-webgpu --use-webgpu-adapter=swiftshader``) runs ``--steps`` decode calls at positions
``--start ..`` for each bundle in turn, ``--rounds`` times interleaved, each call awaited (its token read back);
the median per-token time of each is printed, and the tokens of the two bundles are checked equal. With
``--python``, the same step jitted on webgpu:0 (wgpu-py) with the caches donated (``jit(donate_argnums=(1,))``:
updated in place) against not donated, interleaved the same way.

    PYTHONPATH=. python benchmarks/browser_decode.py [--capacity 1024] [--dim 64 --layers 2 ...] [--python]

The load average is printed first: compare runs at similar loads (docs/traps.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, os.path.join(EXAMPLES, "browser_llm"))

import numpy as np  # noqa: E402

ARGS = ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader",
        "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"]

PAGE = """<!doctype html><html><body><script type="module">
const models = {};
window.decodeRun = async (dir, start, steps) => {
  if (!models[dir]) {
    const { loadModel } = await import(`./${dir}/fnarray-webgpu.js`);
    models[dir] = await loadModel(`./${dir}/`);
  }
  const m = models[dir];
  await m.resetState();
  const u = Float32Array.of(0), temperature = Float32Array.of(0);
  let id = 1;
  const times = [], ids = [];
  for (let k = 0; k < steps; k++) {
    const t0 = performance.now();
    const [tok] = await m.entries.decode.run({ ids: Int32Array.of(id), pos: Int32Array.of(start + k), u, temperature });
    times.push(performance.now() - t0);
    id = tok[0];
    ids.push(id);
  }
  return { times, ids };
};
window.ready = true;
</script></body></html>
"""


def _export(fa, export_llm, model, path, capacity, chunk, in_place):
    """The bundle of ``model``; with ``in_place`` False, lowered without donation (the caches copied each step)."""
    from fnarray.export._webgpu import _webgpu_device
    be = _webgpu_device().impl
    original = be.lower
    if not in_place:
        be.lower = lambda program, device, donate=(): original(program, device)
    try:
        m = export_llm.export_model(path, model, capacity, chunk)
    finally:
        be.lower = original
    decode = next(e for e in m["entries"] if e["name"] == "decode")
    return len(decode["dispatches"]), len(decode["state_in_place"])


def _python(fa, export_llm, q4, capacity, start, steps, rounds):
    """The same decode step jitted on webgpu:0 (wgpu-py), with the caches donated (``donate_argnums``: updated in
    place) and not (a new cache each call): median ms per token of ``rounds`` interleaved runs of ``steps``."""
    import time
    dev = fa.devices("webgpu")[0]
    runs = {"copy": fa.jit(export_llm.make_steps(), device=dev),
            "in_place": fa.jit(export_llm.make_steps(), device=dev, donate_argnums=(1,))}
    times, ids = {n: [] for n in runs}, {}
    u, t = np.float32(0), np.float32(0)
    for r in range(rounds + 1):
        for name, step in runs.items():
            kv = fa.device_put(export_llm.empty_kv(q4, capacity), dev)
            tok, got = np.ones((1, 1), np.int32), []
            for k in range(steps):
                t0 = time.perf_counter()
                token, kv = step(q4, kv, tok, np.int32(start + k), u, t)
                tok = np.asarray(token).reshape(1, 1)       # read back, as the page does
                if r:
                    times[name].append(time.perf_counter() - t0)
                got.append(int(tok[0, 0]))
            ids[name] = got
    assert ids["copy"] == ids["in_place"], ids
    return {n: 1e3 * float(np.median(v)) for n, v in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1024, help="cache positions (default 1024)")
    parser.add_argument("--start", type=int, default=None, help="first decode position (default capacity - 64)")
    parser.add_argument("--steps", type=int, default=32, help="decode calls per run (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved runs of each bundle (default 5)")
    for name, default in (("dim", 64), ("heads", 4), ("kv_heads", 2), ("layers", 2), ("hidden", 192)):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default,
                            help=f"model size, as examples/llm.py's (default {default})")
    parser.add_argument("--python", action="store_true",
                        help="also time the step jitted on webgpu:0 in Python, with and without donate_argnums")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    import fnarray as fa
    import export_llm
    import llm
    from fnarray.export.serve import serve_in_thread
    from playwright.sync_api import sync_playwright

    model = llm.Llama(len(export_llm.VOCAB), args.dim, args.heads, args.kv_heads, args.layers, args.hidden,
                      key=fa.random.key(0))
    q4 = fa.nn.quantize(model, group_size=64 if args.dim % 64 == 0 else 32, bits=4)
    start = args.capacity - 64 if args.start is None else args.start
    root = tempfile.mkdtemp(prefix="browser_decode_")
    try:
        with open(os.path.join(root, "index.html"), "w", encoding="utf-8") as fh:
            fh.write(PAGE)
        info = {}
        for name, in_place in (("copy", False), ("in_place", True)):
            info[name] = _export(fa, export_llm, q4, os.path.join(root, name), args.capacity, 16, in_place)
        att = model.layers[0].attention
        cache = args.capacity * att.kv_heads * att.rope.dims * 4
        print(f"model: width {args.dim}, {args.layers} blocks, {args.heads}/{args.kv_heads} heads, 4-bit; "
              f"{2 * args.layers} caches of {cache / 1024:.0f} KiB ({args.capacity} positions)")
        server, url = serve_in_thread(root)
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path=exe, args=ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(600_000)
            page.goto(url + "index.html")
            page.wait_for_function("window.ready === true")
            times = {name: [] for name in info}
            ids = {}
            for _ in range(args.rounds + 1):          # the first round warms up (pipelines, buffers)
                for name in info:
                    r = page.evaluate("([d, s, n]) => window.decodeRun(d, s, n)", [name, start, args.steps])
                    times[name].append(r["times"])
                    ids[name] = r["ids"]
        finally:
            browser.close()
            pw.stop()
            server.shutdown()
            server.server_close()
        assert ids["copy"] == ids["in_place"], (ids["copy"], ids["in_place"])
        med = {name: float(np.median(np.concatenate(t[1:]))) for name, t in times.items()}
        for name, (n_disp, n_in_place) in info.items():
            print(f"{name:9s}: {med[name]:7.3f} ms/token ({1000 / med[name]:6.1f} tokens/s); decode: {n_disp} "
                  f"dispatches, {n_in_place} caches updated in place")
        print(f"copy / in place: {med['copy'] / med['in_place']:.2f}x  (tokens equal: {json.dumps(ids['copy'][:8])}"
              f"...)  load average {os.getloadavg()[0]:.2f}")
        if args.python:
            py = _python(fa, export_llm, q4, args.capacity, start, args.steps, args.rounds)
            print(f"webgpu:0 in Python: not donated {py['copy']:.3f} ms/token, donated (in place) "
                  f"{py['in_place']:.3f} ms/token: {py['copy'] / py['in_place']:.2f}x  load average "
                  f"{os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
