"""Row kernels that keep a computed row in a private array between their loops (webgpu on a CPU adapter).

A work item's row kernel loops over its row once per dependent reduction and once more for its row values
(``groups/reduce.py``). With the scheduler option ``row_cache`` (native webgpu on a CPU adapter: lavapipe) an
operand that the first loop computes inline and a later loop reads again at the same element (layernorm's
gathered embedding row, a masked and scaled score row) is stored by the first loop in a private array of the
row and read there by the later ones (``_ReduceKernel.cache_rows``); rows longer than the option's bound, and
plain buffer reads, are computed in each loop as before. The reference is NumPy in float64, on every kernel
backend (opencl:0 never keeps a row: the values must agree either way).
"""

import re

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.webgpu import backend as webgpu_backend

from helpers import fallback_mode, require_backend


def _device(target):
    return require_backend(target.split(":")[0])[0]


def _keeps_rows(dev) -> bool:
    """Whether ``dev`` is a native webgpu CPU adapter, where the option is on."""
    return dev.backend == "webgpu" and dev.impl.capabilities(dev).tiling_pays is False


def _private_rows(text, R) -> int:
    return len(re.findall(rf"var row\d+: array<f32, {R}>", text))


def _embedded_layernorm(ids, tok, pos, g, b):
    h = tok[ids] + pos[fnp.arange(ids.shape[1])]
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    return (h - mu) / fnp.sqrt(var + 1e-5) * g + b


def _ref_embedded_layernorm(ids, tok, pos, g, b):
    h = tok.astype(np.float64)[ids] + pos.astype(np.float64)[np.arange(ids.shape[1])]
    mu = h.mean(-1, keepdims=True)
    return (h - mu) / np.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


@pytest.mark.parametrize("target", ["webgpu:0", "opencl:0"])
@pytest.mark.parametrize("batch,seq,width", [(3, 7, 64), (2, 5, 37), (2, 3, 300), (0, 4, 64)],
                         ids=["R64", "R37-remainder", "R300-longer-than-kept", "empty"])
def test_embedding_layernorm_rows_match_float64(target, batch, seq, width):
    dev = _device(target)
    rng = np.random.default_rng(width + batch)
    vocab = 11
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    arrays = [ids] + [rng.standard_normal(s).astype(np.float32) * 2 for s in ((vocab, width), (seq, width),
                                                                           (width,), (width,))]
    arrays[1][3, width - 1] = 40.0   # a large entry in a row's last element
    args = [fa.device_put(a, dev) for a in arrays]
    with fallback_mode("error"):
        jf = fa.jit(_embedded_layernorm)
        text = jf.lower(*args).as_text()
        got = np.asarray(jf(*args))
    want = _ref_embedded_layernorm(*arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5 * max(1.0, float(np.abs(want).max(initial=0))))
    kept = _keeps_rows(dev) and batch > 0 and width <= webgpu_backend.CPU_ROW_CACHE
    assert (_private_rows(text, width) > 0) == kept, text
    if width <= 64:   # a work item per row (longer rows of so few outputs: a work-group): the token id is read
        # once before the row's first loop, not once per element in it (the scheduler option ``row_hoist``)
        ids_bufs = re.findall(r"var<storage, read> (\w+): array<i32>", text)
        before = text.split("for (")[0]
        assert any(f"{n}[" in before for n in ids_bufs) == kept, text


def _masked_softmax(s):
    t = s.shape[-1]
    causal = fnp.tril(fnp.ones((s.shape[-2], t), bool))
    return fa.nn.softmax(fnp.where(causal, s * 0.125, -1e9), axis=-1)


def _ref_masked_softmax(s):
    t = s.shape[-1]
    x = np.where(np.tril(np.ones((s.shape[-2], t), bool)), s.astype(np.float64) * 0.125, -1e9)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("target", ["webgpu:0", "opencl:0"])
@pytest.mark.parametrize("shape", [(2, 3, 16, 64), (2, 13, 13), (0, 4, 8)], ids=["R64", "R13", "empty"])
def test_masked_softmax_rows_and_gradient_match_float64(target, shape):
    """The attention softmax of ``examples/transformer_lm.py`` (scale, causal mask) and its gradient; row 0 of
    the mask keeps one element, rows of a square mask past the diagonal none of the later ones."""
    dev = _device(target)
    rng = np.random.default_rng(len(shape))
    s = rng.standard_normal(shape).astype(np.float32) * 4
    w = rng.standard_normal(shape).astype(np.float32)
    zs, zw = fa.device_put(s, dev), fa.device_put(w, dev)

    def f(s, w):
        return _masked_softmax(s), fa.grad(lambda s: fnp.sum(_masked_softmax(s) * w))(s)

    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(zs, zw).as_text()
        got = [np.asarray(a) for a in jf(zs, zw)]
    p = _ref_masked_softmax(s)
    mask = np.tril(np.ones(shape[-2:], bool))
    gs = p * (w - (p * w).sum(-1, keepdims=True)) * 0.125 * mask   # d/ds of sum(softmax * w)
    for a, want in zip(got, (p, gs), strict=True):
        np.testing.assert_allclose(a, want, rtol=3e-5, atol=3e-6)
    kept = _keeps_rows(dev) and s.size > 0
    assert (_private_rows(text, shape[-1]) > 0) == kept, text
    # the exps that the row values divide: a private row too, not their output buffer stored and read back
    assert (len(re.findall(rf"var kept\d+: array<f32, {shape[-1]}>", text)) > 0) == kept, text
