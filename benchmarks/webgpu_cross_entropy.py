"""Cross-entropy with integer labels: the label's ``log_softmax`` picked by an index read (``take_along_axis``,
whose gradient is a scatter) against optax's form with the label's logit as a sum over the row where the class
equals the label (whose gradient is a select), on webgpu:0 (lavapipe) and numpy:0 (issue 28).

``nn.losses.cross_entropy`` takes the per-example loss from ``losses._label_loss``; the ``gather`` variant swaps in
the index read of ``log_softmax`` (the form before the fourteenth session's branch s14-wgpuxent) while each program
is traced. Two programs per
device: the loss and its gradient alone (``--rows`` rows of ``--classes`` classes, the transformer's 1024 x 96) and
``backward_steps.py``'s transformer step (batch 16, context 64, width 64, 2 layers, Adam). Each variant is jitted
in one process and called interleaved: best of ``--rounds`` rounds of ``--calls`` calls, process CPU time (a CPU
device's threads included) per call, and the kernels per call (webgpu:0).

Usage: python benchmarks/webgpu_cross_entropy.py [--devices webgpu:0,numpy:0] [--rounds 7] [--calls 4]
Asserts nothing.
"""

from __future__ import annotations

import argparse

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)
import _timing
import backward_steps
import fnarray as fa
import fnarray.numpy as fnp
from fnarray.nn import losses


def _gather_loss(logits, labels, ax):
    """The label's ``-log_softmax`` by an index read: the gradient is a scatter into zeros."""
    logp = fa.nn.log_softmax(logits, axis=ax)
    return -fnp.squeeze(fnp.take_along_axis(logp, fnp.expand_dims(labels, ax), axis=ax), axis=ax)


VARIANTS = (("gather", _gather_loss), ("select", losses._label_loss))


def _loss_alone(dev, rows, classes):
    rng = np.random.default_rng(0)
    logits = fa.device_put(rng.normal(size=(rows, classes)).astype(np.float32), dev)
    labels = fa.device_put(rng.integers(0, classes, rows).astype(np.int32), dev)
    return fa.value_and_grad(lambda z, y: fa.nn.losses.cross_entropy(z, y)), (logits, labels)


def lowered(dev, f, args, label_loss, calls):
    """``(callable making calls calls, kernels per call)`` with ``label_loss`` as the cross-entropy's per-example
    loss while ``f`` is traced."""
    run, names = _timing.jit_swapped(fa, losses, "_label_loss", label_loss, dev, f, args, calls)
    return run, len(names)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="webgpu:0,numpy:0")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--classes", type=int, default=96)
    a = ap.parse_args(argv)
    print(_timing.load_line())
    print(f"{'device':>9} {'program':>12} | {'kernels gather':>14} {'select':>6} | {'CPU ms gather':>13} "
          f"{'select':>7} {'ratio':>5}")
    for name, dev in _timing.available_devices(fa, a.devices):
        programs = {"loss+grad": _loss_alone(dev, a.rows, a.classes),
                    "step": backward_steps.STEPS["transformer"](dev)}
        for pname, (f, args) in programs.items():
            built = [lowered(dev, f, args, loss, a.calls) for _, loss in VARIANTS]
            _, cpu = _timing.best_of([run for run, _ in built], a.rounds)
            ms = [c / a.calls * 1e3 for c in cpu]
            print(f"{name:>9} {pname:>12} | {built[0][1]:14d} {built[1][1]:6d} | {ms[0]:13.2f} {ms[1]:7.2f} "
                  f"{ms[1] / ms[0]:5.2f}", flush=True)
    print(_timing.load_line())


if __name__ == "__main__":
    main()
