"""One epoch of the digits MLP training: fnarray's jitted step against the same loop in plain NumPy.

Both sides train the 64-128-128-10 perceptron of ``examples/digits_mlp.py``
(ReLU, softmax cross-entropy, Adam with optax's defaults) on the same batches
from the same initial parameters. The NumPy side writes the forward pass, the
backward pass and the Adam update out by hand, in float32, as one would
without a framework. fnarray runs ``examples/digits_mlp.make_train_step`` (one
jitted call per step: gather the batch, ``value_and_grad``, Adam) on the numpy
backend (or ``--device``).

Each side runs one warm-up epoch (fnarray compiles there), then ``--repeat``
timed epochs, interleaved; the best epoch of each is reported, in wall-clock time
and in the process's CPU time (which a busy, shared machine disturbs less), with
the ratio (the target is fnarray <= 2x the hand-written step, 1.5x the goal). The final
losses of both sides are printed as a sanity check: they should agree to float32
rounding. Asserts nothing.

BLAS threads are limited to ``--blas-threads`` (default 1) for both sides: the
matrices are tiny (at most 128 x 128), where extra BLAS threads only add
synchronisation, and on a busy machine they can slow each product down 100-fold.

Usage: python benchmarks/digits_step.py [--device numpy:0] [--repeat 5] [--batch-size 64] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import digits_mlp  # noqa: E402

B1, B2, EPS = 0.9, 0.999, 1e-8  # Adam's defaults (optax.adam)


# ------------------------------------------------------------------------------ plain NumPy


class NumpyTrainer:
    """The training step written out by hand in NumPy (float32 throughout)."""

    def __init__(self, params, lr):
        self.p = {k: np.array(v, dtype=np.float32) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.p.items()}
        self.t = 0
        self.lr = np.float32(lr)

    def step(self, x_all, y_all, idx):
        p = self.p
        x, y = x_all[idx], y_all[idx]
        n = x.shape[0]
        # forward
        z1 = x @ p["w1"] + p["b1"]
        h1 = np.maximum(z1, 0)
        z2 = h1 @ p["w2"] + p["b2"]
        h2 = np.maximum(z2, 0)
        logits = h2 @ p["w3"] + p["b3"]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(n)
        loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, y]))
        # backward: d loss / d logits = (softmax - one_hot) / n
        d_logits = exp / total
        d_logits[rows, y] -= 1
        d_logits /= np.float32(n)
        grads = {"w3": h2.T @ d_logits, "b3": d_logits.sum(axis=0)}
        d_z2 = (d_logits @ p["w3"].T) * (z2 > 0)
        grads["w2"], grads["b2"] = h1.T @ d_z2, d_z2.sum(axis=0)
        d_z1 = (d_z2 @ p["w2"].T) * (z1 > 0)
        grads["w1"], grads["b1"] = x.T @ d_z1, d_z1.sum(axis=0)
        # Adam, with bias correction (eps outside the square root, as optax.adam)
        self.t += 1
        c1 = np.float32(1 - B1 ** self.t)
        c2 = np.float32(1 - B2 ** self.t)
        for k, g in grads.items():
            self.m[k] = B1 * self.m[k] + (1 - B1) * g
            self.v[k] = B2 * self.v[k] + (1 - B2) * g * g
            p[k] = p[k] - self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + np.float32(EPS))
        return loss


# ------------------------------------------------------------------------------ runs


def run_numpy_epoch(trainer, x, y, batches):
    """``((wall seconds, CPU seconds), last loss)`` of one epoch of the NumPy trainer."""
    w0, c0 = time.perf_counter(), time.process_time()
    for idx in batches:
        loss = trainer.step(x, y, idx)
    return (time.perf_counter() - w0, time.process_time() - c0), loss


def run_fnarray_epoch(state, step, x, y, batches):
    """``((wall seconds, CPU seconds), last loss)`` of one epoch of fnarray's jitted step."""
    params, opt_state = state
    w0, c0 = time.perf_counter(), time.process_time()
    for idx in batches:
        params, opt_state, loss = step(params, opt_state, x, y, idx)
    loss = float(loss)  # waits for the last step
    elapsed = (time.perf_counter() - w0, time.process_time() - c0)
    state[:] = [params, opt_state]
    return elapsed, loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="numpy:0", help="fnarray device (default numpy:0)")
    ap.add_argument("--repeat", type=int, default=5, help="timed epochs per side (default 5)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for both sides (default 1; 0 keeps the library's default)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.batch_size < 1:
        ap.error("--repeat and --batch-size must be >= 1")

    limiter = None
    if args.blas_threads > 0:
        from threadpoolctl import threadpool_limits
        limiter = threadpool_limits(args.blas_threads, user_api="blas")

    x_train, _, y_train, _ = digits_mlp.load_data()
    n = x_train.shape[0]
    key_init, key_shuffle = fa.random.split(fa.random.key(0))
    params0 = {k: np.asarray(v) for k, v in digits_mlp.init_params(key_init).items()}
    epochs = []
    for e in range(2 * args.repeat + 2):
        order = np.asarray(fa.random.permutation(fa.random.fold_in(key_shuffle, e), n))
        epochs.append([order[i:i + args.batch_size] for i in range(0, n, args.batch_size)])

    device = fa.devices()[0] if args.device is None else args.device
    optimizer = fa.optim.adam(args.lr)
    params = fa.device_put(params0, device)
    state = [params, optimizer.init(params)]
    step = digits_mlp.make_train_step(optimizer, device)
    x_fa, y_fa = fa.device_put(x_train, device), fa.device_put(y_train, device)
    trainer = NumpyTrainer(params0, args.lr)

    t_compile, _ = run_fnarray_epoch(state, step, x_fa, y_fa, epochs[0])  # warm-up: compiles
    run_numpy_epoch(trainer, x_train, y_train, epochs[0])
    t_fa, t_np = [], []
    for r in range(args.repeat):
        t, loss_fa = run_fnarray_epoch(state, step, x_fa, y_fa, epochs[1 + r])
        t_fa.append(t)
        t, loss_np = run_numpy_epoch(trainer, x_train, y_train, epochs[1 + r])
        t_np.append(t)
    diff = max(float(np.max(np.abs(np.asarray(state[0][k]) - trainer.p[k]))) for k in trainer.p)

    steps = len(epochs[0])
    wall_fa, cpu_fa = (min(t[i] for t in t_fa) for i in (0, 1))
    wall_np, cpu_np = (min(t[i] for t in t_np) for i in (0, 1))
    print(f"digits MLP 64-128-128-10, one epoch = {steps} steps of batch {args.batch_size} "
          f"({n} images), best of {args.repeat} epochs; BLAS threads: "
          f"{args.blas_threads if args.blas_threads > 0 else 'library default'}")
    print(f"  {'':34s} {'wall ms/epoch':>14s} {'CPU ms/epoch':>13s} {'CPU us/step':>12s}")
    print(f"  {'fnarray jitted step on ' + str(device):34s} {wall_fa * 1e3:14.2f} {cpu_fa * 1e3:13.2f} "
          f"{cpu_fa / steps * 1e6:12.1f}")
    print(f"  {'hand-written NumPy step':34s} {wall_np * 1e3:14.2f} {cpu_np * 1e3:13.2f} {cpu_np / steps * 1e6:12.1f}")
    print(f"  ratio fnarray / NumPy: {cpu_fa / cpu_np:.2f}x in CPU time, {wall_fa / wall_np:.2f}x in wall time "
          f"[target <= 2x, goal 1.5x]; fnarray's warm-up epoch (compiles) took {t_compile[0] * 1e3:.0f} ms")
    print(f"  sanity: last batch loss fnarray {loss_fa:.5f}, NumPy {loss_np:.5f}; "
          f"max |parameter difference| after {args.repeat + 1} epochs {diff:.2e}")
    if limiter is not None:
        limiter.restore_original_limits()
    return {"fnarray_cpu": cpu_fa, "numpy_cpu": cpu_np, "fnarray_wall": wall_fa, "numpy_wall": wall_np,
            "ratio": cpu_fa / cpu_np, "steps": steps}


if __name__ == "__main__":
    main()
