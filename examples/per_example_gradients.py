"""Per-example gradients with ``fa.vmap(fa.grad(loss))``, and DP-SGD on the digits.

``fa.grad(loss)`` differentiates the loss of *one* image; ``fa.vmap`` maps it over
a batch, giving every example's own gradient in one vectorised call (the
parameters are shared: ``in_axes=(None, 0, 0)``). That is what differentially
private SGD needs: each example's gradient is clipped to norm ``C``, the clipped
gradients are averaged, and Gaussian noise of standard deviation
``noise_multiplier * C / batch`` is added before the step.

The script

1. computes the per-example gradients of a batch and compares them with a
   Python loop of single-example ``fa.grad`` calls (prints the max abs difference
   and both times);
2. trains a small 64-32-10 perceptron with DP-SGD and prints its test accuracy.

No privacy accounting is done here: the script shows the mechanics only.

Usage::

    python examples/per_example_gradients.py [--steps 300] [--batch-size 64] [--clip 1.0]
                                             [--noise-multiplier 1.0] [--lr 0.5] [--seed 0] [--device numpy:0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

import fnarray as fa
from _cli import add_blas_threads_option, blas_threads, device_from_arg
import fnarray.numpy as fnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_mlp import NUM_CLASSES, load_data  # noqa: E402  (the same data and split)

HIDDEN = 32


def init_params(key):
    """A 64-32-10 perceptron: ``{"w1": f32[64, 32], "b1": f32[32], "w2": f32[32, 10], "b2": f32[10]}``."""
    k1, k2 = fa.random.split(key)
    init = fa.nn.initializers.he_normal()
    return {"w1": init(k1, (64, HIDDEN), fnp.float32), "b1": fnp.zeros((HIDDEN,), dtype=fnp.float32),
            "w2": init(k2, (HIDDEN, NUM_CLASSES), fnp.float32), "b2": fnp.zeros((NUM_CLASSES,), dtype=fnp.float32)}


def logits_fn(params, x):
    """Class scores for ``x: f32[..., 64]`` -> ``f32[..., 10]``."""
    return fa.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def example_loss(params, x, y):
    """Cross-entropy of ONE image ``x: f32[64]`` with label ``y: int32[]`` (a scalar)."""
    log_probs = fa.nn.log_softmax(logits_fn(params, x))
    return -fnp.sum(fa.nn.one_hot(y, NUM_CLASSES) * log_probs)


# Every example's gradient: a dict of the params' shapes with a leading batch axis.
per_example_grads = fa.vmap(fa.grad(example_loss), in_axes=(None, 0, 0))


def global_norms(grads):
    """The L2 norm of each example's whole gradient: ``f32[batch]``."""
    squares = [fnp.sum(g.reshape((g.shape[0], -1)) ** 2, axis=1) for g in fa.tree_util.tree_leaves(grads)]
    return fnp.sqrt(sum(squares[1:], squares[0]))


def dp_sgd_step(params, x, y, key, clip, noise_multiplier, lr):
    """One DP-SGD step on the batch ``x: f32[b, 64]``, ``y: int32[b]``.

    Returns ``(new_params, per-example gradient norms f32[b], mean loss f32[])``.
    """
    grads = per_example_grads(params, x, y)
    norms = global_norms(grads)
    scale = fnp.minimum(1.0, clip / fnp.maximum(norms, 1e-12))  # clip each example to norm <= clip
    batch = x.shape[0]
    # One draw of Gaussian noise for all parameters, cut into pieces (one draw is cheaper than one per array).
    sizes = {name: p.size for name, p in params.items()}
    noise = fa.random.normal(key, (sum(sizes.values()),)) * (noise_multiplier * clip / batch)
    new, offset = {}, 0
    for name in sorted(params):
        g = grads[name]
        clipped = fnp.mean(g * scale.reshape((batch,) + (1,) * (g.ndim - 1)), axis=0)
        piece = noise[offset:offset + sizes[name]].reshape(clipped.shape)
        offset += sizes[name]
        new[name] = params[name] - lr * (clipped + piece)
    loss = fnp.mean(fa.vmap(example_loss, in_axes=(None, 0, 0))(params, x, y))
    return new, norms, loss


def accuracy_fn(params, x, y):
    """Fraction of correctly classified images (float32 scalar)."""
    return fnp.mean((fnp.argmax(logits_fn(params, x), axis=-1) == y).astype(fnp.float32))


def best_of(fn, repeat):
    """``(fn(), the shortest of repeat timed runs in seconds)``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, min(times)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None,
                   help="a name from fnarray.devices(all_backends=True) (default: the default device)")
    p.add_argument("--steps", type=int, default=300, help="DP-SGD steps (default 300)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    p.add_argument("--clip", type=float, default=1.0, help="per-example gradient norm bound C (default 1.0)")
    p.add_argument("--noise-multiplier", type=float, default=1.0,
                   help="noise standard deviation in units of C (default 1.0)")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (default 0.5)")
    p.add_argument("--seed", type=int, default=0, help="seed of initialisation, batches and noise (default 0)")
    add_blas_threads_option(p)
    args = p.parse_args(argv)
    args.device = device_from_arg(p, args.device)
    if args.steps < 0:
        p.error(f"--steps must be >= 0, got {args.steps}")
    if args.batch_size < 1:
        p.error(f"--batch-size must be a positive number of examples, got {args.batch_size}")
    if not (math.isfinite(args.clip) and args.clip > 0):
        p.error(f"--clip must be a positive norm, got {args.clip}")
    if not (math.isfinite(args.noise_multiplier) and args.noise_multiplier >= 0):
        p.error(f"--noise-multiplier must be >= 0, got {args.noise_multiplier}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        p.error(f"--lr must be a positive finite learning rate, got {args.lr}")
    return args


def main(argv=None) -> dict:
    """Run the check and the DP-SGD training; returns a dict.

    Keys: ``max_abs_diff`` (vmap vs loop), ``norms`` (the first batch's per-example
    gradient norms, NumPy), ``vmap_time``/``loop_time`` (seconds for one batch),
    ``losses`` (mean batch loss per step), ``accuracy`` (test), ``device``.
    """
    args = parse_args(argv)
    with blas_threads(args.blas_threads):
        return _run(args)


def _run(args) -> dict:
    dev = args.device
    x_train, x_test, y_train, y_test = load_data()
    n_train = x_train.shape[0]
    batch = min(args.batch_size, n_train)
    k_init, k_data, k_noise = fa.random.split(fa.random.key(args.seed), 3)
    params = fa.device_put(init_params(k_init), dev)

    # 1. per-example gradients: vmap against a Python loop of single-example grads.
    idx = np.asarray(fa.random.permutation(k_data, n_train))[:batch]
    xb, yb = fa.device_put(x_train[idx], dev), fa.device_put(y_train[idx], dev)
    vmapped = fa.jit(per_example_grads, device=dev)
    single = fa.jit(fa.grad(example_loss), device=dev)
    vmapped(params, xb, yb)
    single(params, xb[0], yb[0])  # compile both before timing

    def run_vmap():
        return {k: np.asarray(v) for k, v in vmapped(params, xb, yb).items()}

    def run_loop():
        out = [single(params, xb[i], yb[i]) for i in range(batch)]
        return {k: np.stack([np.asarray(g[k]) for g in out]) for k in out[0]}

    grads, vmap_time = best_of(run_vmap, 5)
    loop, loop_time = best_of(run_loop, 3)
    max_diff = max(float(np.max(np.abs(grads[k] - loop[k]))) for k in grads)
    norms = np.asarray(fa.jit(global_norms, device=dev)(grads))
    print(f"per-example gradients of {batch} examples: "
          + ", ".join(f"{k} {grads[k].shape}" for k in sorted(grads)))
    print(f"  gradient norms: min {norms.min():.4f}, median {np.median(norms):.4f}, max {norms.max():.4f}")
    print(f"  max |vmap - loop of single-example grads| = {max_diff:.3e}")
    print(f"  vmap: {vmap_time * 1e3:.2f} ms per batch; Python loop of jitted grads: {loop_time * 1e3:.2f} ms "
          f"({loop_time / vmap_time:.1f}x slower; best of 5 and 3 runs)")

    # 2. DP-SGD training: one jitted call per step gathers the batch, derives the step's noise key
    # and runs dp_sgd_step; the data stay on the device.
    def train_step(params, x_all, y_all, idx, key, step_number, clip, noise_multiplier, lr):
        return dp_sgd_step(params, x_all[idx], y_all[idx], fa.random.fold_in(key, step_number),
                           clip, noise_multiplier, lr)

    step = fa.jit(train_step, device=dev)
    shuffle = fa.jit(lambda key, epoch: fa.random.permutation(fa.random.fold_in(key, epoch), n_train), device=dev)
    x_tr, y_tr = fa.device_put(x_train, dev), fa.device_put(y_train, dev)
    losses, clipped_fraction = [], []
    steps_per_epoch = max(1, n_train // batch)
    order = None
    t0 = 0.0
    for s in range(args.steps):
        if s == 1:
            t0 = time.perf_counter()  # the first step compiles; time the others
        pos = s % steps_per_epoch
        if pos == 0:
            order = np.asarray(shuffle(k_data, s // steps_per_epoch + 1))
        idx = order[pos * batch:(pos + 1) * batch]
        params, step_norms, loss = step(params, x_tr, y_tr, idx, k_noise, s,
                                        args.clip, args.noise_multiplier, args.lr)
        losses.append(float(loss))
        clipped_fraction.append(float(np.mean(np.asarray(step_norms) > args.clip)))
    train_time = time.perf_counter() - t0 if args.steps > 1 else 0.0
    acc = float(fa.jit(accuracy_fn, device=dev)(params, fa.device_put(x_test, dev), fa.device_put(y_test, dev)))
    if args.steps:
        print(f"DP-SGD: {args.steps} steps of {batch} examples, clip C={args.clip}, "
              f"noise multiplier {args.noise_multiplier}, lr {args.lr}")
        print(f"  loss: first step {losses[0]:.4f}, last 20 steps {np.mean(losses[-20:]):.4f}; "
              f"examples clipped: {100 * np.mean(clipped_fraction):.0f}%")
        if args.steps > 1:
            print(f"  {train_time / (args.steps - 1) * 1e3:.2f} ms per step (after the first, which compiles)")
    print(f"test accuracy: {100 * acc:.2f}% on {x_test.shape[0]} held-out images")
    print(f"device: {dev}")
    return {"max_abs_diff": max_diff, "norms": norms, "vmap_time": vmap_time, "loop_time": loop_time,
            "losses": losses, "accuracy": acc, "device": str(dev), "grads": grads, "loop_grads": loop}


if __name__ == "__main__":
    main()
