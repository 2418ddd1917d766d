"""``examples/llm.py`` in a tiny configuration.

``main([...])`` runs in-process: the decode step must be traced once per sampling mode for a whole generation, the
greedy text from the KV-cache path must equal greedy decoding by full forward passes without a cache (up to
near-ties within float32 rounding: ``assert_argmax``; an
independent check of ``KVCache``, RoPE offsets and the fused attention), the quantized models must be smaller, a
``--save``/``--weights`` round trip must give the same perplexity, every backend must run the example with
``fallback="error"``, and bad
command lines must exit with a message.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import fnarray as fa
from tests.helpers import assert_argmax, fallback_mode

pytest.importorskip("tqdm", reason="the examples need tqdm (pip install 'fnarray[examples]')")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import llm  # noqa: E402
from transformer_lm import encode  # noqa: E402

TINY = ["--steps", "3", "--batch-size", "2", "--context", "16", "--dim", "32", "--heads", "4", "--kv-heads", "2",
        "--layers", "1", "--hidden", "64", "--group-size", "32", "--eval-windows", "4", "--new-tokens", "6",
        "--quiet"]


def test_tiny_run_traces_the_decode_step_once_and_matches_full_forward(tmp_path):
    path = str(tmp_path / "w.safetensors")
    out = llm.main(TINY + ["--device", "numpy:0", "--quantize", "4", "8", "--save", path])
    assert out["decode_traces"] == 2   # greedy and top-p, each traced once for three generations
    f32, q4, q8 = out["results"]
    assert all(r["decode_traces"] == 2 for r in out["results"])
    assert all(math.isfinite(r["perplexity"]) and r["perplexity"] > 1 for r in out["results"])
    assert q4["bytes"] < q8["bytes"] < f32["bytes"]
    assert abs(q8["perplexity"] / f32["perplexity"] - 1) < 0.01
    _assert_greedy_by_one_forward(out["model"], "The ", f32["greedy"])
    assert len(f32["greedy"]) == len("The ") + 6
    for r in out["results"]:
        assert r["greedy"].startswith("The ") and len(r["sampled"]) == len("The ") + 6
    again = llm.main(TINY + ["--device", "numpy:0", "--quantize", "--weights", path])
    assert again["losses"] == [] and len(again["results"]) == 1
    np.testing.assert_allclose(again["results"][0]["perplexity"], f32["perplexity"], rtol=1e-5)
    assert again["results"][0]["greedy"] == f32["greedy"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """Weights trained for one step on numpy:0 (the backends below load them: no training compile there)."""
    path = str(tmp_path_factory.mktemp("llm") / "w.safetensors")
    llm.main(TINY + ["--steps", "1", "--device", "numpy:0", "--quantize", "--save", path])
    return path


#: Logits of the tiny models here are O(1): float32 paths that sum in another order (the cache's fused attention,
#: another backend's kernels) differ by ~1e-6; a pick within this of the maximum is a near-tie, not a wrong id.
GREEDY_ATOL = 1e-4


def _assert_greedy_by_one_forward(model, prompt, text):
    """``text`` is greedy decoding of ``prompt`` by full forward passes without a cache, checked with one pass over
    ``text``: the model is causal, so position ``t``'s logits are those of a pass over ``text[:t + 1]`` (a pass
    that saw later tokens would change them and fail, never pass). Each pick is the argmax, or within
    ``GREEDY_ATOL`` of it (``assert_argmax``: a near-tie that the cached path's float32 sums may break the other
    way; the later positions are then read after that pick, as the text has it)."""
    assert text.startswith(prompt), (prompt, text)
    ids = np.asarray(encode(text), np.int32)
    logits = np.asarray(model(ids[None, :-1]))[0, len(encode(prompt)) - 1:]
    assert_argmax(logits, ids[len(encode(prompt)):], GREEDY_ATOL, msg=f"greedy text {text!r}")


def test_greedy_check_accepts_near_ties_only():
    """The check takes a pick within ``GREEDY_ATOL`` of the maximum, and fails a pick further below it."""
    logits = np.array([[0.0, 2.0, 2.0 - GREEDY_ATOL / 2], [1.0, 0.5, 0.0]])
    assert_argmax(logits, [2, 0], GREEDY_ATOL)
    with pytest.raises(AssertionError, match="id 1 at position 1 is 0.5 below the maximum"):
        assert_argmax(logits, [1, 1], GREEDY_ATOL)
    with pytest.raises(AssertionError, match="at position 0"):
        assert_argmax(logits - np.array([0, 0, GREEDY_ATOL]), [2, 0], GREEDY_ATOL)


def test_every_backend_runs_it(device, weights):
    # The 4-bit model runs on numpy:0 above; here float32 only (the quantized layers under jit on every device,
    # fallback="error" on the kernel backends, against NumPy: test_quantize.py's
    # test_quantized_layers_on_every_device and its quantized_matmul rows).
    with fallback_mode("error"):   # every step on the device's own rules and kernels, top-p sampling included
        out = llm.main(TINY + ["--weights", weights, "--device", str(device), "--quantize", "--new-tokens", "3"])
    assert out["decode_traces"] == 2 and out["device"] == str(device) and len(out["results"]) == 1
    assert all(math.isfinite(r["perplexity"]) for r in out["results"])
    greedy = out["results"][0]["greedy"]
    assert len(greedy) == len("The ") + 3
    _assert_greedy_by_one_forward(out["model"], "The ", greedy)


@pytest.mark.parametrize("argv", [["--heads", "3"], ["--kv-heads", "3"], ["--quantize", "7"], ["--top-p", "0"],
                                  ["--new-tokens", "1"], ["--weights", "/nonexistent.safetensors"],
                                  ["--device", "nope:0"], ["--dim", "12", "--heads", "4"]])
def test_bad_command_lines_exit_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as e:
        llm.parse_args(TINY + argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err
    assert fa.default_device() is not None


def _tiny_steps(device):
    """A tiny model, a key and prompt ids on ``device``, the example's generators (donating where it does) and
    copying ones."""
    model = fa.device_put(llm.Llama(96, 16, 2, 1, 2, 32, key=fa.random.key(1)), device)
    key = fa.device_put(fa.random.key(0), device)
    ids = fa.device_put(np.asarray([[5, 9, 2]], np.int32), device)
    return (model, key, ids, llm.make_generators(device, 0.9, 1.0),
            llm.make_generators(device, 0.9, 1.0, donate=False))


def test_decode_step_donates_its_caches_where_they_are_updated_in_place(device):
    """Where the backend writes a donated cache's update in place (``Backend.updates_in_place``: opencl, webgpu),
    the example's decode step donates its caches: the caches passed in are deleted, the step's kernels write each
    new position in place, no more launches than the copying step, and the next token and the new caches equal
    the copying step's; elsewhere the caches are kept."""
    model, key, ids, (prefill, decode_step, _), (_, copying, _) = _tiny_steps(device)
    donating = device.impl.updates_in_place
    token, caches = prefill(model, model.make_caches(1, 8, device), ids, key, greedy=True)
    want_token, want = copying(model, caches, token, key, greedy=True)
    if donating:
        n_donated = len(decode_step.lower(model, caches, token, key, greedy=True).kernels())
        n_copying = len(copying.lower(model, caches, token, key, greedy=True).kernels())
        assert n_donated <= n_copying
        assert any(k.name.startswith("update") for k in decode_step.lower(model, caches, token, key,
                                                                          greedy=True).kernels())
    got_token, got = decode_step(model, caches, token, key, greedy=True)
    assert all(leaf.is_deleted() == donating for leaf in fa.tree.leaves(caches))
    assert int(got_token[0]) == int(want_token[0])
    for g, w in zip(fa.tree.leaves(got), fa.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_prefill_donates_its_caches_where_they_are_updated_in_place(device):
    """Where the backend writes a donated cache's update in place (opencl, webgpu), the example's prefill donates
    its caches too: the caches passed in are deleted, and the kernels writing them cover the prompt's positions
    only (the copying prefill's cover the whole capacity, so they grow with it; the donated ones do not), with no
    more launches; the token and the new caches equal the copying prefill's. Elsewhere the caches are kept."""
    model, key, ids, (prefill, _, _), (copying, _, _) = _tiny_steps(device)
    donating = device.impl.updates_in_place

    def cache_writes(step, capacity):
        """(launches, work items of the kernels that write the caches: their dynamic_update_slice)."""
        ks = step.lower(model, model.make_caches(1, capacity, device), ids, key, greedy=True).kernels()
        writes = [k for k in ks if any("dynamic_update_slice" in str(e) for e in k.eqns)]
        assert writes
        return len(ks), sum(int(np.prod(k.global_size)) for k in writes)

    if donating:
        (n_don, don64), (n_cop, cop64) = cache_writes(prefill, 64), cache_writes(copying, 64)
        (_, don256), (_, cop256) = cache_writes(prefill, 256), cache_writes(copying, 256)
        assert n_don <= n_cop and don64 < cop64
        assert don256 == don64 and cop256 > cop64   # the prompt's positions against the whole capacity
    want_token, want = copying(model, model.make_caches(1, 8, device), ids, key, greedy=True)
    caches = model.make_caches(1, 8, device)
    got_token, got = prefill(model, caches, ids, key, greedy=True)
    assert all(leaf.is_deleted() == donating for leaf in fa.tree.leaves(caches))
    assert int(got_token[0]) == int(want_token[0])
    for g, w in zip(fa.tree.leaves(got), fa.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parity_subset(keep=lambda device, **_: device.backend in ("mlx", "webgpu"))
def test_unjitted_decode_step_reads_the_offset_once(device, monkeypatch):
    """An unjitted ``Llama`` call with caches reads the step's offset from the device once, not once a layer: every
    layer reads the first cache's offset, and the ``KVCache`` checks (``int(offset)`` in the constructor and in
    ``update``) read that one array, whose host value the first read keeps. Its last logits are a full forward
    pass's over the whole sequence without caches. The reads are the model's and ``ArrayImpl``'s logic, the same on
    every device: mlx:0 and webgpu:0 hold their values off the host; jax:0 and opencl:0 would only add ~15 s of
    eager compiles each (CI's budget)."""
    from fnarray.devices import array_impl
    model, _, ids, _, _ = _tiny_steps(device)
    _, caches = model(ids, model.make_caches(1, 8, device))
    reads = []
    value = array_impl.ArrayImpl._value

    def counted(self):
        if self._host is None:   # a read from the device (later reads of the same array are the kept value)
            reads.append(self.aval.str_short())
        return value(self)
    monkeypatch.setattr(array_impl.ArrayImpl, "_value", counted)
    step = fa.device_put(np.asarray([[7]], np.int32), device)
    logits, caches = model(step, caches)
    assert reads == ["i32[]"], reads
    monkeypatch.undo()
    whole = model(fa.device_put(np.asarray([[5, 9, 2, 7]], np.int32), device))
    np.testing.assert_allclose(np.asarray(logits)[0, -1], np.asarray(whole)[0, -1], rtol=1e-4, atol=1e-5)
