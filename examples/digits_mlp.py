"""Train a multilayer perceptron on scikit-learn's handwritten digits with fnarray.

The data are the 1,797 real 8x8 grey-level images that ship with scikit-learn
(``sklearn.datasets.load_digits``, no download). Pixels (0..16) are divided by 16;
a stratified 20% of the images is held out as the test set (split seed fixed).

The model is a 64-128-128-10 perceptron with ReLU, trained with softmax
cross-entropy and Adam. One jitted function does a whole training step: it
gathers the mini-batch, computes loss and gradients with
``fa.value_and_grad`` and applies the Adam update. Batches are reshuffled
every epoch with ``fa.random.permutation``; the last batch of an epoch may
be smaller.

Usage::

    python examples/digits_mlp.py                       # 30 epochs on the default device
    python examples/digits_mlp.py --device numpy:0 --epochs 5 --plot digits.png --save digits.npz

Importable: ``init_params(key)``, ``predict(params, x)``, ``loss_fn(params, x, y)``
and ``main(argv) -> dict``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import fnarray as fa
from _cli import add_blas_threads_option, blas_threads, check_output_folders, check_plot_format, device_from_arg
import fnarray.numpy as fnp

LAYER_SIZES = (64, 128, 128, 10)
PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")
NUM_CLASSES = LAYER_SIZES[-1]
TEST_FRACTION = 0.2
SPLIT_SEED = 0  # the train/test split is the same for every --seed


def load_data():
    """The digits as ``(x_train, x_test, y_train, y_test)`` NumPy arrays.

    ``x``: float32[n, 64] with pixels scaled to [0, 1]; ``y``: int32[n] labels 0..9.
    The test set is a stratified 20% (360 of 1,797 images), always the same one.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    return train_test_split(x, y, test_size=TEST_FRACTION, stratify=y, random_state=SPLIT_SEED)


def init_params(key):
    """Parameters of the 64-128-128-10 perceptron, He-normal weights and zero biases.

    Args:
      key: an ``fa.random.key``.
    Returns:
      a dict ``{"w1": f32[64, 128], "b1": f32[128], "w2": f32[128, 128], "b2": f32[128],
      "w3": f32[128, 10], "b3": f32[10]}``.
    """
    init = fa.nn.initializers.he_normal()
    keys = fa.random.split(key, len(LAYER_SIZES) - 1)
    params = {}
    for i, (n_in, n_out) in enumerate(zip(LAYER_SIZES[:-1], LAYER_SIZES[1:], strict=True)):
        params[f"w{i + 1}"] = init(keys[i], (n_in, n_out), fnp.float32)
        params[f"b{i + 1}"] = fnp.zeros((n_out,), dtype=fnp.float32)
    return params


def logits_fn(params, x):
    """Unnormalised class scores ``f32[n, 10]`` for images ``x: f32[n, 64]``."""
    h = fa.nn.relu(x @ params["w1"] + params["b1"])
    h = fa.nn.relu(h @ params["w2"] + params["b2"])
    return h @ params["w3"] + params["b3"]


def loss_fn(params, x, y):
    """Mean softmax cross-entropy of the batch ``x: f32[n, 64]`` with labels ``y: int32[n]``."""
    log_probs = fa.nn.log_softmax(logits_fn(params, x), axis=-1)
    return -fnp.mean(fnp.sum(fa.nn.one_hot(y, NUM_CLASSES) * log_probs, axis=-1))


def predict(params, x):
    """Class probabilities for images scaled as in training.

    Args:
      params: the dict from ``init_params`` or training (fnarray or NumPy arrays,
        e.g. loaded from the ``--save`` file).
      x: float32[n, 64], pixels in [0, 1] (the raw 0..16 digits divided by 16).
    Returns:
      float32[n, 10]; each row sums to 1.
    """
    params = {k: fnp.asarray(params[k]) for k in PARAM_NAMES}
    x = fnp.asarray(x, dtype=fnp.float32)
    return fnp.exp(fa.nn.log_softmax(logits_fn(params, x), axis=-1))


def accuracy_fn(params, x, y):
    """The fraction of ``x`` whose most likely class is ``y`` (a float32 scalar)."""
    guess = fnp.argmax(logits_fn(params, x), axis=-1)
    return fnp.mean((guess == y).astype(fnp.float32))


def make_train_step(optimizer, device, loss=None):
    """A jitted step ``(params, opt_state, x_all, y_all, idx) -> (params, opt_state, loss)``.

    ``idx`` (int32[b]) picks the mini-batch out of the training set, which stays
    on the device; the step returns the batch's loss before the update. ``loss``
    is ``loss_fn`` unless given (``digits_cnn.py`` passes its own).
    """
    loss_and_grads = fa.value_and_grad(loss_fn if loss is None else loss)

    def train_step(params, opt_state, x_all, y_all, idx):
        loss, grads = loss_and_grads(params, x_all[idx], y_all[idx])
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return fa.optim.apply_updates(params, updates), opt_state, loss

    return fa.jit(train_step, device=device)


def parse_args(argv=None, description=None, saved="w1 b1 w2 b2 w3 b3"):
    """The command line shared by the digits examples (``digits_cnn.py`` passes its description and names)."""
    parser = argparse.ArgumentParser(description=description or __doc__.splitlines()[0])
    parser.add_argument("--device", default=None,
                        help="device to train on, a name from fnarray.devices(all_backends=True) such as numpy:0 "
                             "(default: the default device)")
    parser.add_argument("--epochs", type=int, default=30, help="passes over the training set (default 30)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per step (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation and shuffling (default 0)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 1e-3)")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of training loss and test accuracy per epoch")
    parser.add_argument("--save", metavar="PATH", help=f"write the trained parameters to PATH, a .npz name ({saved})")
    add_blas_threads_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    args.device = device_from_arg(parser, args.device)
    if args.epochs < 1:
        parser.error(f"--epochs must be a positive number of passes over the data, got {args.epochs}")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be a positive number of images, got {args.batch_size}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr must be a positive finite learning rate, got {args.lr}")
    check_output_folders(parser, args, ("plot", "save"))
    check_plot_format(parser, args.plot)
    if args.save and not args.save.endswith(".npz"):
        parser.error(f"--save {args.save}: the parameters are written as a NumPy .npz archive (np.savez would add "
                     ".npz to this name); give a name ending in .npz")
    return args


def save_params(path, params):
    """Write ``params`` as an uncompressed ``.npz`` of float32 arrays (no pickled objects)."""
    np.savez(path, **{k: np.asarray(params[k], dtype=np.float32) for k in PARAM_NAMES})


def plot_history(path, losses, accuracies, title="fnarray: 64-128-128-10 MLP on scikit-learn digits"):
    """A PNG with the mean training loss and the test accuracy of every epoch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(losses) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, losses, marker="o", markersize=3)
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("mean training loss (cross-entropy)")
    ax_loss.set_yscale("log")
    ax_loss.set_title("training loss")
    ax_loss.grid(True, alpha=0.3)
    ax_acc.plot(epochs, 100.0 * np.asarray(accuracies), marker="o", markersize=3, color="tab:green")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.set_title("test accuracy (360 held-out images)")
    ax_acc.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train(args, params, loss_of, accuracy_of, key_shuffle):
    """Adam on ``loss(params, x, y)`` over the digits' training set, ``args.epochs`` passes of mini-batches.

    Args:
      args: the parsed command line (``device``, ``epochs``, ``batch_size``, ``lr``, ``blas_threads``, ``quiet``).
      params: the initial parameters (a pytree of arrays on ``args.device``).
      loss_of: ``(params, x: f32[n, 64], y: int32[n]) -> f32[]``.
      accuracy_of: ``(params, x, y) -> f32[]``, evaluated on the test set after every epoch.
      key_shuffle: the key of the per-epoch shuffles.
    Returns:
      ``(params, losses, test_accuracies, epoch_times, batches_per_epoch)``.
    """
    with blas_threads(args.blas_threads):
        return _train(args, params, loss_of, accuracy_of, key_shuffle)


def _train(args, params, loss_of, accuracy_of, key_shuffle):
    from tqdm import tqdm

    device = args.device
    x_train, x_test, y_train, y_test = load_data()
    n_train = x_train.shape[0]
    optimizer = fa.optim.adam(args.lr)
    opt_state = optimizer.init(params)
    train_step = make_train_step(optimizer, device, loss_of)
    accuracy = fa.jit(accuracy_of, device=device)
    x_tr, y_tr = fa.device_put(fnp.asarray(x_train), device), fa.device_put(fnp.asarray(y_train), device)
    x_te, y_te = fa.device_put(fnp.asarray(x_test), device), fa.device_put(fnp.asarray(y_test), device)

    n_batches = -(-n_train // args.batch_size)
    refresh = max(1, n_batches // 8)  # reading the loss synchronises: only a few times an epoch
    losses, test_accs, epoch_times = [], [], []
    shuffle = fa.jit(lambda key, epoch: fa.random.permutation(fa.random.fold_in(key, epoch), n_train),
                     device=device)
    for epoch in range(1, args.epochs + 1):
        order = np.asarray(shuffle(key_shuffle, epoch))  # this epoch's order of the training images
        bar = tqdm(total=n_batches, desc=f"epoch {epoch:3d}/{args.epochs}", unit="batch",
                   disable=args.quiet, leave=True, file=sys.stderr)
        pending, total, seen = [], 0.0, 0
        t0 = time.perf_counter()
        for b in range(n_batches):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_tr, y_tr, idx)
            pending.append((loss, idx.shape[0]))
            if (b + 1) % refresh == 0 or b == n_batches - 1:
                for value, size in pending:
                    total += float(value) * size
                    seen += size
                bar.set_postfix(loss=f"{total / seen:.4f}", refresh=False)
                bar.update(len(pending))
                pending.clear()
        epoch_times.append(time.perf_counter() - t0)  # the last float() above waited for the step
        losses.append(total / seen)
        test_accs.append(float(accuracy(params, x_te, y_te)))
        bar.set_postfix(loss=f"{losses[-1]:.4f}", test_acc=f"{test_accs[-1]:.3f}")
        bar.close()

    return params, losses, test_accs, epoch_times, n_batches


def summarize(args, losses, test_accs, epoch_times, n_batches, n_test) -> float:
    """Print the final accuracy, the time per epoch and the device; returns the steady-state epoch time."""
    if len(epoch_times) > 1:
        epoch_time = float(np.mean(epoch_times[1:]))
        timing = (f"{epoch_time * 1e3:.1f} ms per epoch of {n_batches} steps (mean of epochs 2-{args.epochs}; "
                  f"the first epoch, which includes compilation, took {epoch_times[0] * 1e3:.0f} ms)")
    else:
        epoch_time = epoch_times[0]
        timing = (f"{epoch_time * 1e3:.1f} ms for the only epoch of {n_batches} steps "
                  "(this includes compilation: run 2 or more epochs for the steady-state time)")
    print(f"test accuracy: {100 * test_accs[-1]:.2f}% on {n_test} held-out images "
          f"(final training loss {losses[-1]:.4f})")
    print(f"time: {timing}")
    print(f"device: {args.device} ({args.device.description})")
    return epoch_time


def main(argv=None) -> dict:
    """Train and evaluate; returns a dict.

    Keys: ``accuracy`` (final test accuracy, 0..1), ``losses`` (mean training loss of
    every epoch), ``test_accuracies`` (every epoch), ``epoch_time`` (seconds per epoch
    of training steps without the first epoch, which includes compilation; the
    first epoch's time when there is only one), ``first_epoch_time``, ``device``
    (its name), ``params`` (the trained parameters as NumPy arrays).
    """
    args = parse_args(argv)
    device = args.device
    x_test = load_data()[1]
    key_init, key_shuffle = fa.random.split(fa.random.key(args.seed))
    params = fa.device_put(init_params(key_init), device)
    params, losses, test_accs, epoch_times, n_batches = train(args, params, loss_fn, accuracy_fn, key_shuffle)

    epoch_time = summarize(args, losses, test_accs, epoch_times, n_batches, x_test.shape[0])

    host_params = {k: np.asarray(params[k]) for k in PARAM_NAMES}
    if args.plot:
        plot_history(args.plot, losses, test_accs)
        print(f"wrote plot: {args.plot}")
    if args.save:
        save_params(args.save, host_params)
        print(f"wrote parameters: {args.save}")
    return {"accuracy": test_accs[-1], "losses": losses, "test_accuracies": test_accs,
            "epoch_time": epoch_time, "first_epoch_time": epoch_times[0], "device": str(device),
            "params": host_params}


if __name__ == "__main__":
    main()
