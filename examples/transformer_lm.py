"""Train a small character-level transformer language model with fnarray.nn modules.

The text is the docstrings of a fixed list of pure-Python standard-library modules (difflib,
statistics, _pydecimal, inspect, typing, logging, ...), read from this Python's own sources
with ``ast`` (no download; about 300-400 KB of English prose on CPython 3.11-3.13, the exact
size depends on the Python version and is printed). Characters outside printable ASCII
become ``?``. The last 10% of the text is held out for validation.

The model is a GPT-style decoder built from ``fnarray.nn`` modules: token and position
``Embedding``, ``--layers`` pre-norm blocks (``LayerNorm``, causal ``MultiHeadAttention``,
``LayerNorm``, a GELU ``MLP``) and a final ``LayerNorm`` and ``Linear`` head, trained with
``losses.cross_entropy`` and Adam. One jitted function does a whole step: it draws the
batch of random windows on the device (``fa.random.randint``), computes loss and gradients of
the model (a pytree) with ``fa.value_and_grad`` and applies the update. At the end it reports
validation loss, perplexity and bits per character, and samples text from the model.

Usage::

    python examples/transformer_lm.py                          # 200 steps on the default device
    python examples/transformer_lm.py --device jax:0 --steps 2000 --plot lm.png --save lm.safetensors

Importable: ``load_text()``, ``TransformerLM``, ``make_train_step``, ``sample`` and ``main(argv) -> dict``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import math
import sys
import time

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from _cli import add_blas_threads_option, blas_threads, check_output_folders, check_plot_format, device_from_arg
from fnarray import nn

# Pure-Python modules whose docstrings make the corpus (those missing from a Python are skipped).
CORPUS_MODULES = ("difflib", "statistics", "_pydecimal", "inspect", "typing", "logging", "threading", "subprocess",
                  "email.message", "unittest.case", "tarfile", "argparse", "collections", "textwrap", "enum",
                  "functools", "fractions", "random", "shutil", "zipfile", "http.client", "datetime", "tempfile")
MIN_CORPUS = 100_000
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))   # newline and printable ASCII
UNKNOWN = "?"
VAL_FRACTION = 0.1


def load_text(modules=CORPUS_MODULES) -> str:
    """The docstrings of ``modules`` (module, class and function docstrings, in source order), joined by blank lines.

    Returns: the text, at least 100,000 characters.
    Raises: RuntimeError when this Python's standard library has too few of the sources (a
      stripped install without ``.py`` files).
    """
    parts = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    parts.append(doc)
    text = "\n\n".join(parts)
    if len(text) < MIN_CORPUS:
        raise RuntimeError(f"the standard library's docstrings gave only {len(text)} characters (need "
                           f"{MIN_CORPUS}); this Python seems to lack its .py sources")
    return text


def encode(text: str) -> np.ndarray:
    """Character ids ``int32[len(text)]`` in ``VOCAB`` (unknown characters as ``?``)."""
    table = {c: i for i, c in enumerate(VOCAB)}
    unk = table[UNKNOWN]
    return np.fromiter((table.get(c, unk) for c in text), dtype=np.int32, count=len(text))


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in np.asarray(ids).reshape(-1))


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``, causal."""

    ln1: nn.LayerNorm
    attn: nn.MultiHeadAttention
    ln2: nn.LayerNorm
    mlp: nn.MLP

    def __init__(self, dim: int, heads: int, *, key):
        k1, k2 = fa.random.split(key)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiHeadAttention(heads, dim, key=k1)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.MLP(dim, dim, 4 * dim, 1, activation=nn.gelu, key=k2)

    def __call__(self, x):
        x = x + self.attn(self.ln1(x), is_causal=True)
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """A GPT-style character model: ``ids: int32[B, T] -> logits: float32[B, T, vocab]`` (``T <= context``)."""

    tok: nn.Embedding
    pos: nn.Embedding
    blocks: tuple
    ln_f: nn.LayerNorm
    head: nn.Linear
    context: int

    def __init__(self, vocab: int, context: int, dim: int = 64, heads: int = 4, layers: int = 2, *, key):
        keys = fa.random.split(key, layers + 3)
        small = nn.initializers.normal(0.02)
        self.tok = nn.Embedding(vocab, dim, key=keys[0], weight_init=small)
        self.pos = nn.Embedding(context, dim, key=keys[1], weight_init=small)
        self.blocks = tuple(Block(dim, heads, key=keys[2 + i]) for i in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, key=keys[-1])
        self.context = context

    def __call__(self, ids):
        t = ids.shape[-1]
        h = self.tok(ids) + self.pos(fnp.arange(t, dtype=fnp.int32))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def loss_fn(model, windows):
    """Mean next-character cross-entropy (nats) of ``windows: int32[B, T + 1]``."""
    return nn.losses.cross_entropy(model(windows[:, :-1]), windows[:, 1:])


def _windows(data, starts, length):
    """``data[starts[:, None] + arange(length)]``: ``int32[B, length]``."""
    return data[starts[:, None] + fnp.arange(length, dtype=fnp.int32)[None, :]]


def make_train_step(optimizer, batch_size: int, context: int, device):
    """A jitted step ``(model, opt_state, data, key) -> (model, opt_state, loss)``.

    The batch is ``batch_size`` random windows of ``context + 1`` characters of ``data`` (drawn
    on the device from ``key``); the loss is the batch's before the update.
    """
    grad_fn = fa.value_and_grad(loss_fn)

    def step(model, opt_state, data, key):
        starts = fa.random.randint(key, (batch_size,), 0, data.shape[0] - context - 1)
        loss, grads = grad_fn(model, _windows(data, starts, context + 1))
        updates, opt_state = optimizer.update(grads, opt_state, model)
        return fa.optim.apply_updates(model, updates), opt_state, loss

    return fa.jit(step, device=device)


def make_eval(context: int, device):
    """A jitted ``(model, data, starts) -> mean loss`` over the windows at ``starts``."""
    return fa.jit(lambda model, data, starts: loss_fn(model, _windows(data, starts, context + 1)), device=device)


def sample(model, prompt: str, length: int, key, temperature: float = 0.8, device=None) -> str:
    """``prompt`` continued by ``length`` characters drawn from the model (softmax at ``temperature``).

    The model sees the last ``context`` characters (the prompt left-padded with newlines); one
    jitted call per character.
    """
    ctx = model.context
    ids = list(encode(prompt)) or [0]

    @fa.jit
    def next_id(model, window, key):
        logits = model(window[None])[0, -1]
        return fa.random.categorical(key, logits / temperature)

    keys = fa.random.split(key, length)
    for i in range(length):
        window = ids[-ctx:]
        window = [0] * (ctx - len(window)) + window
        w = fa.device_put(np.asarray(window, np.int32), device) if device is not None else np.asarray(window, np.int32)
        ids.append(int(next_id(model, w, keys[i])))
    return decode(ids)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None,
                        help="device to train on, a name from fnarray.devices(all_backends=True) such as numpy:0 "
                             "(default: the default device)")
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per step (default 16)")
    parser.add_argument("--context", type=int, default=64, help="characters the model sees (default 64)")
    parser.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initialisation, batches and sample")
    parser.add_argument("--sample-length", type=int, default=200, help="characters to sample at the end")
    parser.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (default 0.8)")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the training and validation loss")
    parser.add_argument("--save", metavar="PATH", help="write model and optimizer state with fa.save (safetensors)")
    add_blas_threads_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    args.device = device_from_arg(parser, args.device)
    for name in ("steps", "batch_size", "context", "dim", "heads", "layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.sample_length < 0:
        parser.error(f"--sample-length must be >= 0, got {args.sample_length}")
    if args.dim % args.heads:
        parser.error(f"--dim {args.dim} must be a multiple of --heads {args.heads}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr must be a positive finite learning rate, got {args.lr}")
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        parser.error(f"--temperature must be positive, got {args.temperature}")
    check_output_folders(parser, args, ("plot", "save"))
    check_plot_format(parser, args.plot)
    return args


def plot_history(path, losses, val_points):
    """A PNG of the training loss per step (and its running mean) and the validation loss."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(losses) + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="training batch")
    k = max(1, len(losses) // 30)
    smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
    ax.plot(steps[k - 1:], smooth, color="tab:blue", label=f"training (mean of {k})")
    if val_points:
        vs, vl = zip(*val_points, strict=True)
        ax.plot(vs, vl, "o-", color="tab:orange", label="validation")
    ax.axhline(math.log(len(VOCAB)), color="grey", linestyle=":", label=f"uniform over {len(VOCAB)} characters")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title("fnarray.nn: character-level transformer on the stdlib's docstrings")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    """Train, evaluate and sample; returns a dict.

    Keys: ``losses`` (training loss of every step), ``val_losses`` (``(step, loss)`` pairs),
    ``val_loss``, ``perplexity`` (``exp(val_loss)``), ``bits_per_char``, ``sample`` (the text),
    ``step_time`` (seconds per step after the first, which compiles), ``first_step_time``,
    ``corpus_chars``, ``device``, ``model`` (the trained model) and ``opt_state``.
    """
    args = parse_args(argv)
    with blas_threads(args.blas_threads):
        return _run(args)


def _run(args) -> dict:
    from tqdm import tqdm

    device = args.device
    text = load_text()
    data = encode(text)
    n_val = int(len(data) * VAL_FRACTION)
    train_np, val_np = data[:-n_val], data[-n_val:]
    key_init, key_steps, key_sample = fa.random.split(fa.random.key(args.seed), 3)
    model = TransformerLM(len(VOCAB), args.context, args.dim, args.heads, args.layers, key=key_init)
    model = fa.device_put(model, device)
    optimizer = fa.optim.adam(args.lr)
    opt_state = optimizer.init(model)
    train_step = make_train_step(optimizer, args.batch_size, args.context, device)
    evaluate = make_eval(args.context, device)
    train_data, val_data = fa.device_put(train_np, device), fa.device_put(val_np, device)
    # a fixed validation set: 4 batches of evenly spaced windows
    n_eval = 4 * args.batch_size
    val_starts = fa.device_put(np.linspace(0, len(val_np) - args.context - 2, n_eval).astype(np.int32), device)

    print(f"corpus: {len(text):,} characters of docstrings from {len(CORPUS_MODULES)} stdlib modules "
          f"({len(train_np):,} train / {n_val:,} validation), vocabulary {len(VOCAB)}")
    n_params = sum(int(np.prod(leaf.shape)) for leaf in fa.tree.leaves(model))
    print(f"model: {args.layers} blocks, width {args.dim}, {args.heads} heads, context {args.context}: "
          f"{n_params:,} parameters; device {device}")

    losses, val_points, pending = [], [], []
    eval_every = max(1, args.steps // 5)
    refresh = max(1, min(25, args.steps // 20))
    bar = tqdm(total=args.steps, desc="training", unit="step", disable=args.quiet, file=sys.stderr)
    t0 = time.perf_counter()
    first = None
    for step in range(1, args.steps + 1):
        model, opt_state, loss = train_step(model, opt_state, train_data, fa.random.fold_in(key_steps, step))
        pending.append(loss)
        if step == 1:
            float(loss)
            first = time.perf_counter() - t0
            t1 = time.perf_counter()
        if step % refresh == 0 or step == args.steps:
            losses.extend(float(v) for v in pending)   # reading synchronises: only every few steps
            bar.update(len(pending))
            pending.clear()
            bar.set_postfix(loss=f"{np.mean(losses[-refresh:]):.3f}", refresh=False)
        if step % eval_every == 0 or step == args.steps:
            val_points.append((step, float(evaluate(model, val_data, val_starts))))
    train_time = time.perf_counter() - t1
    bar.close()
    step_time = train_time / (args.steps - 1) if args.steps > 1 else first

    val_loss = val_points[-1][1]
    ppl = math.exp(val_loss)
    bpc = val_loss / math.log(2)
    print(f"validation: loss {val_loss:.4f} nats/char, perplexity {ppl:.2f}, {bpc:.3f} bits/char "
          f"(uniform: perplexity {len(VOCAB)}); final training loss {np.mean(losses[-refresh:]):.4f}")
    print(f"time: {step_time * 1e3:.1f} ms per step (steps 2-{args.steps}; the first, which compiles, took "
          f"{first * 1e3:.0f} ms)" if args.steps > 1 else f"time: {first * 1e3:.0f} ms for the only step")
    text_out = ""
    if args.sample_length:
        text_out = sample(model, "The ", args.sample_length, key_sample, args.temperature, device)
        print(f"sample (temperature {args.temperature}):\n---\n{text_out}\n---")
    if args.plot:
        plot_history(args.plot, losses, val_points)
        print(f"wrote plot: {args.plot}")
    if args.save:
        fa.save(args.save, {"model": model, "opt_state": opt_state, "step": args.steps})
        print(f"wrote checkpoint: {args.save} (fa.load restores model and optimizer state)")
    return {"losses": losses, "val_losses": val_points, "val_loss": val_loss, "perplexity": ppl,
            "bits_per_char": bpc, "sample": text_out, "step_time": step_time, "first_step_time": first,
            "corpus_chars": len(text), "device": str(device), "model": model, "opt_state": opt_state}


if __name__ == "__main__":
    main()
