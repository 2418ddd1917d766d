"""``examples/transformer_lm.py`` on a small budget, checked against a NumPy float64 forward pass.

As in ``test_examples.py``: ``main([...])`` runs in-process with few steps; the trained model's
logits are compared with the same network written here in NumPy float64, the reported
validation loss with that reference's cross-entropy, a short run on every backend with the
numpy:0 run, and bad command lines must exit non-zero with a message.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import fnarray as fa

from helpers import check_traced

pytest.importorskip("tqdm", reason="the examples need tqdm (pip install 'fnarray[examples]')")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import transformer_lm as lm  # noqa: E402

TINY = ["--steps", "6", "--batch-size", "4", "--context", "16", "--dim", "16", "--heads", "2", "--layers", "1",
        "--sample-length", "12", "--quiet"]


def _p(x):
    return np.asarray(x, np.float64)


def _layernorm(x, ln):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + ln.eps) * _p(ln.weight) + _p(ln.bias)


def _linear(x, lin):
    y = x @ _p(lin.weight).T
    return y + _p(lin.bias) if lin.bias is not None else y


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward64(model, ids):
    """The TransformerLM's logits in NumPy float64, from its weights."""
    t = ids.shape[-1]
    h = _p(model.tok.weight)[ids] + _p(model.pos.weight)[np.arange(t)]
    for blk in model.blocks:
        a = _layernorm(h, blk.ln1)
        n, hs = blk.attn.num_heads, blk.attn.qk_size
        b = a.shape[0]
        q = _linear(a, blk.attn.query_proj).reshape(b, t, n, hs)
        k = _linear(a, blk.attn.key_proj).reshape(b, t, n, hs)
        v = _linear(a, blk.attn.value_proj).reshape(b, t, n, hs)
        logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(hs)
        logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        h = h + _linear(np.einsum("bnts,bsnh->btnh", p, v).reshape(b, t, n * hs), blk.attn.output_proj)
        m = _layernorm(h, blk.ln2)
        h = h + _linear(_gelu_tanh(_linear(m, blk.mlp.layers[0])), blk.mlp.layers[1])
    return _linear(_layernorm(h, model.ln_f), model.head)


def test_corpus_and_codec():
    text = lm.load_text()
    assert len(text) >= lm.MIN_CORPUS
    ids = lm.encode("Tab\there é\n")
    assert ids.dtype == np.int32 and lm.decode(ids) == "Tab?here ?\n"
    assert lm.decode(lm.encode(text[:5000])) == "".join(c if c in lm.VOCAB else "?" for c in text[:5000])


def test_example_trains_and_matches_a_float64_forward(tmp_path):
    plot, ck = tmp_path / "lm.png", tmp_path / "lm.safetensors"
    out = lm.main(TINY + ["--device", "numpy:0", "--plot", str(plot), "--save", str(ck), "--steps", "25",
                          "--lr", "1e-2"])
    losses = out["losses"]
    assert len(losses) == 25 and all(math.isfinite(v) for v in losses)
    assert abs(losses[0] - math.log(len(lm.VOCAB))) < 0.3   # starts near uniform over the vocabulary
    assert np.mean(losses[-5:]) < losses[0] - 0.3            # and learns
    assert out["perplexity"] == pytest.approx(math.exp(out["val_loss"]))
    assert out["sample"].startswith("The ") and len(out["sample"]) == 4 + 12
    assert plot.stat().st_size > 10_000
    model = out["model"]
    ids = lm.encode(lm.load_text()[-2000:])[:3 * 16].reshape(3, 16)
    np.testing.assert_allclose(np.asarray(model(ids)), forward64(model, ids), rtol=2e-4, atol=2e-4)
    windows = lm.encode(lm.load_text()[:4000])[:5 * 17].reshape(5, 17)
    ref = forward64(model, windows[:, :-1])
    ref = ref - ref.max(-1, keepdims=True)
    logp = ref - np.log(np.exp(ref).sum(-1, keepdims=True))
    want = -np.mean(np.take_along_axis(logp, windows[:, 1:, None], -1))
    assert float(lm.loss_fn(model, windows)) == pytest.approx(want, rel=1e-4)
    check_traced(lm.loss_fn, model, windows)
    # the checkpoint restores the model and the optimizer state
    saved = fa.load(ck)
    assert saved["step"] == 25 and type(saved["model"]) is lm.TransformerLM
    for a, b in zip(fa.tree.leaves(saved), fa.tree.leaves({"model": model, "opt_state": out["opt_state"],
                                                           "step": 25}), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture(scope="module")
def numpy_run():
    """The tiny run on numpy:0, once for the module: the reference every backend's run is compared with."""
    return lm.main(TINY + ["--device", "numpy:0", "--sample-length", "0"])


def test_example_on_every_backend(device, numpy_run):
    out = lm.main(TINY + ["--device", str(device), "--sample-length", "0"])
    ref = numpy_run
    assert out["device"] == str(device)
    np.testing.assert_allclose(out["losses"], ref["losses"], rtol=2e-3, atol=2e-4)
    assert out["val_loss"] == pytest.approx(ref["val_loss"], rel=2e-3)
    assert all(leaf.device == device for leaf in fa.tree.leaves(out["model"]))


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--dim", "10", "--heads", "4"], ["--lr", "-1"],
                                  ["--device", "nope:7"], ["--plot", "/no/such/folder/x.png"],
                                  ["--temperature", "0"]])
def test_bad_command_lines_exit_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as info:
        lm.parse_args(argv)
    assert info.value.code != 0
    assert capsys.readouterr().err.strip()
