"""Horizontal fusion (``lowering/kernels/groups/horizontal.py``) on and off, in one process, interleaved.

Two measurements per device:

- launches: the digits MLP training step (``examples/digits_mlp.py``, Adam) and the transformer step
  (``examples/transformer_lm.py`` at ``benchmarks/programs.py``'s full size), scheduled with
  ``Capabilities.horizontal_fusion`` off and on;
- time: momentum-SGD updates of a weight and its bias (``m = 0.9 m + g; p - 1e-3 m`` for both; three weight
  shapes), where the bias's map rides along as a guest of the weight's kernel: CPU time per call (lavapipe and
  PoCL run kernels in the process's own threads), the median of ``--rounds`` rounds of ``--number`` calls, with
  fusion off and on alternating in each round (fresh ``fa.jit`` functions, so each keeps its own schedule).

Usage: python benchmarks/horizontal.py [--devices webgpu:0,opencl:0] [--rounds 5] [--number 50]
PoCL 3.1: sh benchmarks/pocl31.sh /work/pocl31 run python benchmarks/horizontal.py --devices opencl:0
Asserts nothing; checks the two forms give the same results.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray)
import fnarray as fa
from _timing import available_devices, load_line

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

SHAPES = ((784, 64), (64, 784), (128, 128))


def _with_fusion(device, on):
    """Schedule later lowerings of ``device`` with horizontal fusion ``on`` (the capability replaced in place)."""
    impl = device.impl
    caps = dataclasses.replace(impl.capabilities(device), horizontal_fusion=on)
    if hasattr(impl, "_states"):
        impl._states[device].caps = caps
    else:
        impl._caps = caps


def _launches(device, f, *args):
    counts = []
    for on in (False, True):
        _with_fusion(device, on)
        counts.append(len(list(f.lower(*args).kernels())))
    return counts


def step_launches(device):
    """``{"digits": (off, on), "transformer": (off, on)}`` launch counts."""
    import digits_mlp
    import transformer_lm as lm
    x, _, y, _ = digits_mlp.load_data()
    params = fa.device_put({k: np.asarray(v) for k, v in digits_mlp.init_params(fa.random.key(0)).items()}, device)
    opt = fa.optim.adam(1e-3)
    step = digits_mlp.make_train_step(opt, device)
    out = {"digits": _launches(device, step, params, opt.init(params), fa.device_put(x, device),
                               fa.device_put(y, device), fa.device_put(np.arange(64, dtype=np.int32), device))}
    model = fa.device_put(lm.TransformerLM(len(lm.VOCAB), 64, 64, 4, 2, key=fa.random.key(0)), device)
    opt = fa.optim.adam(3e-3)
    f = lm.make_train_step(opt, 16, 64, device)
    data = fa.device_put(lm.encode(lm.load_text())[:200_000], device)
    out["transformer"] = _launches(device, f, model, opt.init(model), data, fa.random.key(1))
    return out


def _update(p, m, g, b, mb, gb):
    m2, mb2 = 0.9 * m + g, 0.9 * mb + gb
    return p - 1e-3 * m2, m2, b - 1e-3 * mb2, mb2


def update_times(device, rounds, number):
    """``{shape: (off us, on us, off launches' work items, on's)}``: CPU time per call of ``_update``."""
    rng = np.random.default_rng(0)
    fns = {}
    for shape in SHAPES:
        sizes = (shape,) * 3 + ((shape[1],),) * 3
        args = [fa.device_put(rng.normal(size=s).astype(np.float32), device) for s in sizes]
        for on in (False, True):
            _with_fusion(device, on)
            f = fa.jit(lambda *a: _update(*a), device=device)
            items = sum(int(np.prod(k.global_size)) for k in f.lower(*args).kernels())
            fns[shape, on] = (f, args, items)
        a, b = (fns[shape, on][0](*args) for on in (False, True))
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    times: dict = {}
    for _ in range(rounds):
        for key, (f, args, _) in fns.items():
            t0 = time.process_time()
            for _ in range(number):
                out = f(*args)
            out[0].block_until_ready()
            times.setdefault(key, []).append((time.process_time() - t0) / number * 1e6)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {s: (med[s, False], med[s, True], fns[s, False][2], fns[s, True][2]) for s in SHAPES}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="webgpu:0,opencl:0")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=50)
    args = ap.parse_args(argv)
    print(load_line())
    print("| device | launches digits step off / on | transformer step off / on |")
    print("|---|---|---|")
    devices = [d for _, d in available_devices(fa, args.devices)]
    for d in devices:
        n = step_launches(d)
        print(f"| {d} | {n['digits'][0]} / {n['digits'][1]} | "
              f"{n['transformer'][0]} / {n['transformer'][1]} |")
    print()
    print("| device | weight | CPU us/call off | on | on / off | work items off / on |")
    print("|---|---|---|---|---|---|")
    for d in devices:
        for shape, (off, on, i_off, i_on) in update_times(d, args.rounds, args.number).items():
            print(f"| {d} | {shape[0]}x{shape[1]} | {off:.1f} | {on:.1f} | {on / off:.3f} | {i_off} / {i_on} |")
    print(load_line())


if __name__ == "__main__":
    main()
