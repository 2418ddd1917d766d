"""The example's decode step with ``KVCache`` keys and values heads first ``(B, K, S, H)`` (now) against the
``(B, S, K, H)`` layout before, and raw MLX, in one process: per device, best of ``--number`` interleaved calls.

The layout before is a ``KVCache`` subclass here (``_PositionsFirst``: its ``update`` writes the new positions
without transposing them, its ``attend`` passes ``kv_heads_first=False``), so both run the same model and jitted
step. On mlx:0 the step runs uncompiled (``COMPILE_MODE = "never"``: what ``benchmarks/llm.py``'s default times,
the calls before the 16th, and what raw mlx-lm runs: it does not ``mx.compile`` its model) or, with ``--compiled``,
through ``mx.compile`` (``"always"``: the calls from the 16th). ``--donate``: the caches donated and written in
place, as the example's step does on opencl and webgpu (copied otherwise). Prints wall-clock and process-CPU milliseconds and
the ratios to the new layout's.

    PYTHONPATH=. python benchmarks/kv_layout.py [--devices mlx:0,jax:0,opencl:0,webgpu:0] [--number 40] [--compiled] [--donate]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import available_devices, benchmark_module, best_of, load_line  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import numpy as np  # noqa: E402

import fnarray as fa  # noqa: E402
import fnarray.numpy as fnp  # noqa: E402
from fnarray import lax, nn  # noqa: E402


class _PositionsFirst(nn.KVCache):
    """``KVCache`` as it was: keys and values ``(B, capacity, K, H)``."""

    def update(self, keys, values):
        zero = fnp.zeros((), dtype="int32")
        start = (zero, self.offset, zero, zero)
        return _PositionsFirst(lax.dynamic_update_slice(self.keys, keys, start),
                               lax.dynamic_update_slice(self.values, values, start), self.offset + keys.shape[1])

    def attend(self, queries, *, scale=None):
        lengths = fnp.broadcast_to(fnp.asarray(self.offset).astype("int32"), (self.keys.shape[0],))
        return nn.dot_product_attention(queries, self.keys, self.values, mask=None if queries.shape[1] == 1 else
                                        "causal", scale=scale, key_value_seq_lengths=lengths)


def _caches(model, capacity, dev, before):
    caches = model.make_caches(1, capacity, dev)
    if not before:
        return caches
    return tuple(_PositionsFirst(fnp.swapaxes(c.keys, 1, 2), fnp.swapaxes(c.values, 1, 2), c.offset) for c in caches)


def _decode(llm, model, dev, prompt, capacity, before, donate):
    """A zero-argument decode step at position ``prompt``, each call decoding the same position (as raw MLX's
    ``_mlx_steps``): the caches it returns dropped, or with ``donate`` (the example's step on opencl and webgpu,
    writing the new position in place) taken for the next call with their offset put back (a new offset array)."""
    prefill, decode, _ = llm.make_generators(dev, 0.9, 1.0, donate=donate)
    ids = fa.device_put(np.arange(prompt, dtype=np.int32)[None] % 96, dev)
    key = fa.device_put(fa.random.key(0), dev)
    token, caches = prefill(model, _caches(model, capacity, dev, before), ids, key, greedy=True)
    state = {"caches": caches}

    def run():
        if donate:
            at = fa.device_put(np.int32(prompt), dev)
            state["caches"] = tuple(type(c)(c.keys, c.values, at) for c in state["caches"])
            new, state["caches"] = decode(model, state["caches"], token, key, greedy=True)
            return int(new[0])
        return int(decode(model, caches, token, key, greedy=True)[0][0])
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="mlx:0,jax:0,opencl:0,webgpu:0")
    ap.add_argument("--number", type=int, default=40)
    ap.add_argument("--compiled", action="store_true", help="mlx:0: through mx.compile (calls from the 16th)")
    ap.add_argument("--donate", action="store_true", help="donate the caches (in place on opencl and webgpu)")
    args = ap.parse_args(argv)
    import llm
    from fnarray.lowering.mlx import backend as mlx_backend
    mlx_backend.COMPILE_MODE = "always" if args.compiled else "never"
    print(load_line())
    base = llm.Llama(96, 256, 8, 4, 4, 768, key=fa.random.key(0))
    print(f"{'device':10} {'weights':8} {'heads first ms':>14} {'before ms':>9} {'raw ms':>7} {'before / now':>12} "
          f"{'now / raw':>9}  (CPU time: before / now, now / raw)")
    for name, dev in available_devices(fa, args.devices):
        for label, m in (("float32", base), ("4-bit", nn.quantize(base, group_size=64, bits=4))):
            m = fa.device_put(m, dev)
            fns = [_decode(llm, m, dev, 64, 128, before, args.donate) for before in (False, True)]
            if dev.backend == "mlx":
                fns.append(benchmark_module("llm")._mlx_steps(m, (4, 8, 4, 32), 64, 128)[0])
            tokens = {fn() for fn in fns}
            wall, cpu = best_of(fns, args.number, warm=2)
            raw = f"{wall[2] * 1e3:7.2f}" if len(fns) > 2 else f"{'':7}"
            line = (f"{name:10} {label:8} {wall[0] * 1e3:14.2f} {wall[1] * 1e3:9.2f} {raw} {wall[1] / wall[0]:12.2f} "
                    f"{wall[0] / wall[2] if len(fns) > 2 else float('nan'):9.2f}  ({cpu[1] / cpu[0]:.2f}"
                    f"{f', {cpu[0] / cpu[2]:.2f}' if len(fns) > 2 else ''})")
            print(line + ("" if len(tokens) == 1 else f"  tokens differ: {sorted(tokens)}"), flush=True)


if __name__ == "__main__":
    main()
