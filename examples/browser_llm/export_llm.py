"""Export the quantized language model of ``examples/llm.py`` as a web page that writes text as you type.

The page (``index.html`` + ``app.js`` beside this script) continues the text in its box (greedily, or sampled at the
temperature its slider sets), a character at a
time, computed in the browser through WebGPU by the WGSL kernels that ``fnarray.export.webgpu`` writes. The bundle
(``model/``) has two entry points sharing the weights and the key/value caches:

- ``prefill(model, kv, ids, pos, u, temperature)``: ``ids`` int32[1, CHUNK] written at positions
  ``pos .. pos + CHUNK - 1``;
- ``decode(model, kv, ids, pos, u, temperature)``: the same function at ``ids`` int32[1, 1];

both return the next character id (int32[1], picked on the GPU: the most likely one when ``temperature`` is 0,
else drawn from the softmax at ``temperature`` by the page's uniform number ``u``) and the new caches. The model is
baked (``bake_argnums=(0,)``: the 4-bit weights are the packed uint32 words of ``fa.nn.quantize``, stored as they
are, never dequantized at export), ``kv`` (one ``(keys, values)`` pair of float32[1, K, CAPACITY, H] per layer) is
state (``state_argnums=(1,)``): it stays on the GPU between steps, a step writes only its new positions into it (in
place: ``state_in_place`` in the manifest), and a step reads back only the character id.
``pos`` (int32, rank 0) is where the new positions go: the page rewinds it to reuse the cache of the text that did
not change (typing a character costs one decode step, not a new prefill).

The page feeds a text of ``n`` characters as ``n // CHUNK`` prefill chunks then single decode steps
(``generate_like_page`` is the same schedule in Python), then decodes ``--new-tokens`` characters and shows the
decode speed in tokens per second. The vocabulary (``vocab.json``) is ``examples/transformer_lm.py``'s: newline
and printable ASCII, one id per character, anything else read as ``?``.

Usage::

    python examples/llm.py --save llm.safetensors --quantize          # train (300 steps) and save float32 weights
    python examples/browser_llm/export_llm.py --weights llm.safetensors --out llm_site
    python -m fnarray.export.serve llm_site                          # then open http://127.0.0.1:8000/

Without ``--weights`` the script trains first (``--steps``, on numpy:0); the size options (``--dim``, ``--heads``,
``--kv-heads``, ``--layers``, ``--hidden``) must match the weights. The export schedules the kernels with the webgpu
backend, so it needs ``wgpu`` and a driver (on Debian/Ubuntu without a GPU: ``apt-get install mesa-vulkan-drivers``).

Importable: ``make_steps()``, ``export_model(path, model, ...)``, ``build_site(out_dir, model, ...) -> manifest``,
``generate_like_page(...)``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # examples/, for llm and transformer_lm

import llm  # noqa: E402
from transformer_lm import UNKNOWN, VOCAB, encode  # noqa: E402

import fnarray as fa  # noqa: E402
import fnarray.numpy as fnp  # noqa: E402
from fnarray import nn  # noqa: E402

PAGE_FILES = ("index.html", "app.js")
MODEL_DIR = "model"
VOCAB_FILE = "vocab.json"
CAPACITY = 256      # positions in each layer's cache: the page keeps the last CAPACITY - new_tokens characters
CHUNK = 16          # positions per prefill call
NEW_TOKENS = 40     # characters generated after the text


def make_steps():
    """``step(model, kv, ids, pos, u, temperature) -> (next id int32[1], kv)``: the model's logits for ``ids``
    int32[1, T] written into the caches at ``pos`` (int32, rank 0), and the pick after the last of them: the argmax
    when ``temperature`` (float32, rank 0) is 0, else the id at which the cumulative softmax of the logits divided
    by ``temperature`` first exceeds ``u`` (float32 in [0, 1), rank 0: inverse-CDF sampling). ``kv`` is a tuple of
    ``(keys, values)`` per layer (float32[1, K, capacity, H], heads first as ``nn.KVCache``); the same function
    serves prefill (T = CHUNK) and decode (T = 1)."""

    def step(model, kv, ids, pos, u, temperature):
        caches = tuple(nn.KVCache(k, v, pos) for k, v in kv)
        logits, caches = model(ids, caches)
        last = logits[:, -1]
        greedy = fnp.argmax(last, axis=-1).astype(fnp.int32)
        probs = nn.softmax(last / fnp.maximum(temperature, 1e-3), axis=-1)
        below = fnp.sum((fnp.cumsum(probs, axis=-1) <= u).astype(fnp.int32), axis=-1)
        sampled = fnp.minimum(below, last.shape[-1] - 1)
        token = fnp.where(temperature > 0, sampled, greedy)
        return token, tuple((c.keys, c.values) for c in caches)

    return step


def empty_kv(model, capacity):
    """Zero caches for ``model``: a ``(keys, values)`` pair of float32[1, K, capacity, H] per layer (NumPy)."""
    att = model.layers[0].attention
    shape = (1, att.kv_heads, capacity, att.rope.dims)
    return tuple((np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in model.layers)


def export_model(path, model, capacity=CAPACITY, chunk=CHUNK):
    """Write the bundle of ``model`` (float32 or quantized) with entries ``prefill`` and ``decode`` to ``path``;
    returns the manifest."""
    step = make_steps()
    kv = empty_kv(model, capacity)
    scalars = (np.zeros((), np.int32), np.zeros((), np.float32), np.zeros((), np.float32))   # pos, u, temperature
    return fa.export.webgpu({"prefill": (step, model, kv, np.zeros((1, chunk), np.int32), *scalars),
                             "decode": (step, model, kv, np.zeros((1, 1), np.int32), *scalars)},
                            path=path, bake_argnums=(0,), state_argnums=(1,))


def generate_like_page(model, prompt, new_tokens=NEW_TOKENS, capacity=CAPACITY, chunk=CHUNK, device=None,
                     temperature=0.0, uniforms=None):
    """The page's generation in Python: ``prompt``'s last ``capacity - new_tokens`` characters fed as chunks of
    ``chunk`` then single steps, then ``new_tokens`` steps; returns the generated ids (a list of ints). Greedy, or
    with ``temperature > 0`` drawn with the uniform numbers ``uniforms`` (one per generated id, as the page's)."""
    # the caches donated: on webgpu:0 a step writes its new positions into them in place, as the page's bundle
    step = fa.jit(make_steps(), device=device, donate_argnums=(1,))
    ids = [int(i) for i in encode(prompt)][-(capacity - new_tokens):]
    u = np.zeros(new_tokens, np.float32) if uniforms is None else np.asarray(uniforms, np.float32)
    t = np.float32(temperature)
    kv = empty_kv(model, capacity)
    pos, out, token = 0, [], None
    while len(ids) - pos >= chunk:
        token, kv = step(model, kv, np.asarray([ids[pos:pos + chunk]], np.int32), np.int32(pos), u[0], t)
        pos += chunk
    while pos < len(ids):
        token, kv = step(model, kv, np.asarray([[ids[pos]]], np.int32), np.int32(pos), u[0], t)
        pos += 1
    out.append(int(np.asarray(token)[0]))
    while len(out) < new_tokens:
        token, kv = step(model, kv, np.asarray([[out[-1]]], np.int32), np.int32(pos), u[len(out)], t)
        pos += 1
        out.append(int(np.asarray(token)[0]))
    return out


def build_site(out_dir, model, capacity=CAPACITY, chunk=CHUNK, new_tokens=NEW_TOKENS, info=None) -> dict:
    """Write the page, the exported model (``out_dir/model``) and ``vocab.json``.

    Args:
      out_dir: the site folder (created; the page files and the model there are replaced).
      model: an ``llm.Llama`` (float32, or quantized by ``fa.nn.quantize``).
      capacity, chunk, new_tokens: the cache's positions, the prefill's, and the characters generated per text.
      info: a short description of the model for the page (a string).
    Returns: the export's manifest.
    Raises: ValueError when ``new_tokens`` or ``chunk`` leave no room for text in ``capacity``.
    """
    if not 1 <= chunk < capacity - new_tokens or new_tokens < 1:
        raise ValueError(f"capacity {capacity} must exceed new_tokens {new_tokens} + chunk {chunk}")
    os.makedirs(out_dir, exist_ok=True)
    manifest = export_model(os.path.join(out_dir, MODEL_DIR), model, capacity, chunk)
    with open(os.path.join(out_dir, VOCAB_FILE), "w", encoding="utf-8") as fh:
        json.dump({"vocab": VOCAB, "unknown": UNKNOWN, "capacity": capacity, "chunk": chunk,
                   "new_tokens": new_tokens, "model": info or ""}, fh)
    for name in PAGE_FILES:
        shutil.copyfile(os.path.join(HERE, name), os.path.join(out_dir, name))
    return manifest


SIZE_OPTIONS = ("dim", "heads", "kv_heads", "layers", "hidden")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", metavar="PATH", help="float32 weights from llm.py --save (default: train now)")
    parser.add_argument("--steps", type=int, default=300, help="training steps without --weights (default 300)")
    parser.add_argument("--quantize", type=int, default=4, metavar="BITS",
                        help="bits of the exported weights (MLX's widths 1-6 and 8; 0: float32; default 4)")
    parser.add_argument("--group-size", type=int, default=64, help="quantization group size (default 64)")
    parser.add_argument("--capacity", type=int, default=CAPACITY, help=f"cache positions (default {CAPACITY})")
    parser.add_argument("--chunk", type=int, default=CHUNK, help=f"positions per prefill call (default {CHUNK})")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                        help=f"characters generated after the text (default {NEW_TOKENS})")
    for name, default in zip(SIZE_OPTIONS, (64, 4, 2, 2, 192), strict=True):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default,
                            help=f"model size, as llm.py's (default {default})")
    parser.add_argument("--out", default="llm_site", help="the site folder to write (default llm_site)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar while training")
    args = parser.parse_args(argv)
    if args.quantize:
        try:
            fa.core.quantized.check_format(args.group_size, args.quantize, where="--quantize")
        except ValueError as e:
            parser.error(str(e))
    if args.weights and not os.path.isfile(args.weights):
        parser.error(f"--weights {args.weights}: no such file")
    if not 1 <= args.chunk < args.capacity - args.new_tokens or args.new_tokens < 1:
        parser.error(f"--capacity {args.capacity} must exceed --new-tokens {args.new_tokens} + --chunk {args.chunk}")
    sizes = [f"--{n.replace('_', '-')}={getattr(args, n)}" for n in SIZE_OPTIONS]
    if args.weights:
        model = llm.Llama(len(VOCAB), args.dim, args.heads, args.kv_heads, args.layers, args.hidden,
                          key=fa.random.key(0))
        model = fa.load(args.weights, like=model)
    else:
        print(f"no --weights: training first ({args.steps} steps on numpy:0; llm.py --save PATH makes a file to "
              "pass instead)", flush=True)
        model = llm.main(sizes + ["--steps", str(args.steps), "--device", "numpy:0", "--quantize",
                                  "--new-tokens", "2"] + (["--quiet"] if args.quiet else []))["model"]
    bits = "float32" if not args.quantize else f"{args.quantize}-bit (group size {args.group_size})"
    if args.quantize:
        model = nn.quantize(model, group_size=args.group_size, bits=args.quantize)
    info = (f"llama, {args.layers} blocks, width {args.dim}, {args.heads}/{args.kv_heads} heads, SwiGLU "
            f"{args.hidden}, {bits} weights")
    print(f"exporting to {args.out}/ ({info}; tracing, WGSL kernels, weights)", flush=True)
    m = build_site(args.out, model, args.capacity, args.chunk, args.new_tokens, info)
    per_entry = ", ".join(f"{e['name']} {len(e['dispatches'])}" for e in m["entries"])
    print(f"wrote {args.out}/{MODEL_DIR}/: {len(m['kernels'])} WGSL kernels, dispatches per step: {per_entry}; "
          f"{m['weights']['bytes']:,} bytes of weights, {len(m['state'])} state buffers")
    print(f"wrote {args.out}/: {', '.join(PAGE_FILES)}, {VOCAB_FILE}")
    print(f"view it with: python -m fnarray.export.serve {args.out}   (then open http://127.0.0.1:8000/)")


if __name__ == "__main__":
    main()
