"""Whole training steps on CPU OpenCL with the kernels of ``backward_products.py``'s variants, in one process.

The digits MLP and CNN steps (``examples/digits_mlp.py``, ``digits_cnn.py``: batch 64, Adam), the transformer LM
step (``examples/transformer_lm.py``: batch 16, context 64, width 64, 2 layers, as ``programs.py``) and the VAE
step of ``programs.py`` (784-512-512-10, batch 32, momentum) are each jitted once per variant (``before``: a panel
row per pack work item and every product packed, the kernels of the main checkout before this change; ``after``:
``backward_products.VARIANTS``' last) and called on the same inputs, interleaved (best of ``--rounds``: wall-clock
and process CPU time per step, which on a CPU device counts the driver's threads), then profiled: the kernels'
device time per step, and the dot kernels' (packs and products) share of it.

Usage: sh benchmarks/pocl31.sh /work/pocl31 run python benchmarks/backward_steps.py --devices opencl:0,opencl:1
       [--steps mlp,cnn,transformer,vae] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import _timing  # noqa: E402
import fnarray as fa
import fnarray.numpy as fnp
from backward_products import VARIANTS, device_us, lowered

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def _digits(dev, model):
    """``(step, args)`` of the digits MLP or CNN on ``dev``."""
    import digits_cnn
    import digits_mlp
    mod = digits_mlp if model == "mlp" else digits_cnn
    x, _, y, _ = digits_mlp.load_data()
    opt = fa.optim.adam(1e-3)
    params = fa.device_put({k: np.asarray(v) for k, v in mod.init_params(fa.random.key(0)).items()}, dev)
    idx = np.random.default_rng(0).permutation(x.shape[0])[:64].astype(np.int32)
    loss = None if model == "mlp" else mod.loss_fn
    step = digits_mlp.make_train_step(opt, dev, loss=loss).fun
    return step, (params, opt.init(params), fa.device_put(x, dev), fa.device_put(y, dev), fa.device_put(idx, dev))


def _transformer(dev):
    import transformer_lm as lm
    data = lm.encode(lm.load_text())[:200_000]
    model = fa.device_put(lm.TransformerLM(len(lm.VOCAB), 64, 64, 4, 2, key=fa.random.key(0)), dev)
    opt = fa.optim.adam(3e-3)
    step = lm.make_train_step(opt, 16, 64, dev).fun
    return step, (model, opt.init(model), fa.device_put(data, dev), fa.device_put(fa.random.key(1), dev))


def _vae(dev):
    """``programs.py``'s VAE step (784-512-512-10 encoder and decoder, batch 32, momentum)."""
    rng = np.random.default_rng(0)
    h, latent = 512, 10
    shapes = {"e0": (784, h), "e1": (h, h), "mu": (h, latent), "sg": (h, latent), "d0": (latent, h), "d1": (h, h),
              "d2": (h, 784)}
    p = {}
    for name, (i, o) in shapes.items():
        p[name + "w"] = rng.normal(0, i ** -0.5, (i, o)).astype(np.float32)
        p[name + "b"] = np.zeros(o, np.float32)
    p = fa.device_put(p, dev)
    x = fa.device_put((rng.random((32, 784)) < 0.3).astype(np.float32), dev)

    def softplus(v):
        return fnp.logaddexp(v, 0.0)

    def elbo(p, key, x):
        hid = fa.nn.relu(fa.nn.relu(x @ p["e0w"] + p["e0b"]) @ p["e1w"] + p["e1b"])
        mu, s2 = hid @ p["muw"] + p["mub"], softplus(hid @ p["sgw"] + p["sgb"])
        z = mu + fnp.sqrt(s2) * fa.random.normal(key, mu.shape)
        logits = fa.nn.relu(fa.nn.relu(z @ p["d0w"] + p["d0b"]) @ p["d1w"] + p["d1b"]) @ p["d2w"] + p["d2b"]
        loglik = -fnp.sum(softplus(-logits) * x + softplus(logits) * (1 - x))
        return loglik + 0.5 * fnp.sum(1 + fnp.log(s2) - mu * mu - s2)

    def step(p, m, key, x):
        loss, g = fa.value_and_grad(lambda p: -elbo(p, key, x) / 32)(p)
        m = fa.tree.map(lambda m, g: 0.9 * m + g, m, g)
        return fa.tree.map(lambda p, m: p - 1e-3 * m, p, m), m, loss
    return step, (p, fa.tree.map(lambda v: v * 0, p), fa.device_put(fa.random.key(3), dev), x)


STEPS = {"mlp": lambda d: _digits(d, "mlp"), "cnn": lambda d: _digits(d, "cnn"), "transformer": _transformer,
         "vae": _vae}


def _profile(call, reps):
    """``(device ms per step, dot kernels' ms per step)`` from the profiler's kernel spans."""
    dots, others = device_us(call, reps, "dot_")
    return (dots + others) / 1e3, dots / 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    print(_timing.load_line())
    variants = (VARIANTS[0], VARIANTS[-1])
    for name, dev in _timing.available_devices(fa, a.devices):
        print(f"{name}: {dev.impl.state(dev).cl_device.platform.version.split(' Linux')[0]}")
        print(f"{'step':>12} | {'wall ms before':>14} {'after':>6} {'ratio':>5} | {'cpu ms before':>13} {'after':>6} "
              f"{'ratio':>5} | {'device ms (dot) before':>22} {'after':>12}")
        for sname in a.steps.split(","):
            step, args = STEPS[sname](dev)
            calls = [lowered(dev, step, args, v) for v in variants]
            wall, cpu = _timing.best_of(calls, a.rounds, warm=2)
            prof = [min((_profile(c, 3) for _ in range(3)), key=lambda t: t[0]) for c in calls]
            print(f"{sname:>12} | {wall[0] * 1e3:14.2f} {wall[1] * 1e3:6.2f} {wall[1] / wall[0]:5.2f} | "
                  f"{cpu[0] * 1e3:13.2f} {cpu[1] * 1e3:6.2f} {cpu[1] / cpu[0]:5.2f} | "
                  f"{prof[0][0]:13.2f} ({prof[0][1]:5.2f}) {prof[1][0]:5.2f} ({prof[1][1]:5.2f})", flush=True)
    print(_timing.load_line())


if __name__ == "__main__":
    main()
