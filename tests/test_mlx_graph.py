"""The MLX graph a jitted program builds on mlx:0: ``mx.fast`` for ``fa.nn.RMSNorm`` (and ``fa.nn.RoPE`` on GPU
platforms), no reshape nodes for a matrix product without batch dimensions, one clamped start per moving axis of a
dynamic slice or update, one reshape for a chain of reshapes, one key-length mask per distinct lengths value
(``lowering/mlx/fused.py``, ``program.py``, ``dot.py``, ``structural.py``, ``attention.py``). MLX evaluates every node of a graph (~2-3 us each on the CPU), so these pin
node counts, counted from ``mx.export_to_dot``; every result is compared with NumPy in float64 or numpy:0.
"""

import collections
import io
import os
import re
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import nn
from helpers import require_backend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


@pytest.fixture(scope="module")
def mdev():
    return require_backend("mlx")[0]


def _nodes(*arrays):
    """The operations of the MLX graph computing ``arrays`` (fnarray arrays), by name."""
    import mlx.core as mx
    out = io.StringIO()
    mx.export_to_dot(out, *[a._buf for a in fa.tree_util.tree_leaves(arrays)])
    return collections.Counter(re.findall(r'label ="([A-Za-z]+)', out.getvalue()))


def _rms_ref(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope_ref(x, dims, base, scale, offset):
    """MLX's non-traditional RoPE in float64: halves ``(x[i], x[i + dims/2])`` rotated by ``(offset + l) * scale *
    base ** (-2i / dims)``, the positions ``l`` along the second-to-last axis."""
    x = x.astype(np.float64)
    half = dims // 2
    theta = ((np.arange(x.shape[-2]) + offset) * scale)[:, None] * base ** (-np.arange(0, dims, 2) / dims)[None]
    a, b = x[..., :half], x[..., half:dims]
    out = np.concatenate([a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)], -1)
    return np.concatenate([out, x[..., dims:]], -1)


def test_rms_norm_lowers_to_mx_fast_and_matches_float64(mdev):
    rng = np.random.default_rng(0)
    norm = nn.RMSNorm(48, eps=1e-4).replace(weight=fnp.asarray(rng.standard_normal(48).astype(np.float32)))
    x = rng.standard_normal((3, 5, 48)).astype(np.float32)
    f = fa.jit(lambda m, v: m(v), device=mdev)
    text = f.lower(norm, x).as_text()
    assert "_rms_norm(" in text and "_sqrt(" not in text and "_integer_pow(" not in text
    got = f(fa.device_put(norm, mdev), fa.device_put(x, mdev))
    assert _nodes(got)["Sqrt"] == 0   # MLX's own rms_norm (its CPU composite takes rsqrt)
    np.testing.assert_allclose(np.asarray(got), _rms_ref(x, np.asarray(norm.weight), 1e-4), rtol=2e-6, atol=2e-6)


def test_unmatched_norms_keep_the_composite(mdev):
    """A norm over two axes, a float16 one and one whose weight has another shape: traced equations, same
    results as numpy:0."""
    rng = np.random.default_rng(1)
    cases = [(nn.RMSNorm((4, 8)), rng.standard_normal((2, 4, 8)).astype(np.float32)),
             (nn.RMSNorm(8, dtype=fnp.float16), rng.standard_normal((2, 8)).astype(np.float16))]
    for norm, x in cases:
        f = fa.jit(lambda m, v: m(v), device=mdev)
        assert "_rms_norm(" not in f.lower(norm, x).as_text()
        want = fa.jit(lambda m, v: m(v), device="numpy:0")(norm, x)
        tol = 2e-3 if x.dtype == np.float16 else 2e-6
        got = f(fa.device_put(norm, mdev), fa.device_put(x, mdev))
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol)
    w = fnp.asarray(rng.standard_normal((5, 8)).astype(np.float32))   # a weight over two axes

    def per_row(v):
        return v / fnp.sqrt(fnp.mean(fnp.square(v), axis=-1, keepdims=True) + 1e-5) * w
    x = rng.standard_normal((5, 8)).astype(np.float32)
    assert "_rms_norm(" not in fa.jit(per_row, device=mdev).lower(x).as_text()
    np.testing.assert_allclose(np.asarray(fa.jit(per_row, device=mdev)(fa.device_put(x, mdev))),
                               _rms_ref(x, np.asarray(w), 1e-5), rtol=2e-6, atol=2e-6)


def _ms(v, axis=-1):
    return fnp.mean(v ** 2, axis=axis, keepdims=True)


#: RMSNorm-like functions of ``(v, w)`` that are almost the pattern, the pattern itself at odd shapes and values,
#: and the pattern under transformations; each with its ``x`` shape (``w``: ``(8,)``).
_NEAR_NORMS = {
    "eps outside sqrt": (lambda v, w: v / (fnp.sqrt(_ms(v)) + 1e-5) * w, (3, 8)),
    "eps first": (lambda v, w: v / fnp.sqrt(1e-5 + _ms(v)) * w, (3, 8)),
    "weight first": (lambda v, w: w * (v / fnp.sqrt(_ms(v) + 1e-5)), (3, 8)),
    "sum over D - 1": (lambda v, w: v / fnp.sqrt(fnp.sum(v ** 2, -1, keepdims=True) / 7 + 1e-5) * w, (3, 8)),
    "another numerator": (lambda v, w: (v + 1) / fnp.sqrt(_ms(v) + 1e-5) * w, (3, 8)),
    "mean over axis 0": (lambda v, w: v / fnp.sqrt(_ms(v, 0) + 1e-5) * w, (8, 8)),
    "axis 0 reshaped": (lambda v, w: v / fnp.sqrt(fnp.mean(v ** 2, axis=0).reshape(8, 1) + 1e-5) * w, (8, 8)),
    "weight on axis 0": (lambda v, w: v / fnp.sqrt(_ms(v) + 1e-5) * w[:, None], (8, 8)),
    "scalar weight": (lambda v, w: v / fnp.sqrt(_ms(v) + 1e-5) * w[0], (3, 8)),
    "bfloat16 x": (lambda v, w: (v.astype(fnp.bfloat16) / fnp.sqrt(_ms(v.astype(fnp.bfloat16)) + 1e-2)
                                 * w.astype(fnp.bfloat16)).astype(fnp.float32), (3, 8)),
    "transposed x": (lambda v, w: v.T / fnp.sqrt(_ms(v.T) + 1e-5) * w, (8, 5)),
    "zero rows": (lambda v, w: v[:0] / fnp.sqrt(_ms(v[:0]) + 1e-5) * w, (3, 8)),
    "one element": (lambda v, w: v[:, :1] / fnp.sqrt(_ms(v[:, :1]) + 1e-5) * w[:1], (3, 8)),
    "grad": (fa.grad(lambda v, w: fnp.sum((v / fnp.sqrt(_ms(v) + 1e-5) * w) ** 2), argnums=(0, 1)), (3, 8)),
    "vmap": (fa.vmap(lambda v, w: v / fnp.sqrt(_ms(v) + 1e-5) * w, in_axes=(1, None)), (3, 4, 8)),
    "scan": (lambda v, w: fa.lax.scan(lambda c, r: (c + 1, r / fnp.sqrt(_ms(r) + 1e-5) * w), 0, v)[1],
             (4, 3, 8)),
}


@pytest.mark.parametrize("name", sorted(_NEAR_NORMS))
def test_almost_rms_norms_match_numpy(mdev, name):
    """Near misses of the ``mx.fast.rms_norm`` pattern (``fused.py``) keep their meaning, and the pattern under
    ``grad``/``vmap``/``scan``, at zero-size and one-element rows, in bfloat16 and on a transposed input gives
    numpy:0's results: a wrong match would compute another function."""
    fn, shape = _NEAR_NORMS[name]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    want = fa.tree_util.tree_leaves(fa.jit(fn, device="numpy:0")(x, w))
    got = fa.tree_util.tree_leaves(fa.jit(fn, device=mdev)(fa.device_put(x, mdev), fa.device_put(w, mdev)))
    tol = 2e-2 if "bfloat16" in name else 2e-5
    for g, v in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(v, np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dims, offset, scale", [(16, 4, 1.0), (12, 9, 0.5), (16, None, 1.0)])
def test_rope_pattern_runs_mx_fast_rope(mdev, dims, offset, scale):
    """On a GPU platform ``fa.nn.RoPE`` at an int32 offset array (a cache's position) becomes ``mx.fast.rope`` (the
    pattern lowered here with the GPU's patterns and run on MLX's CPU), with features past ``dims`` too; a Python
    offset (a float32 constant to the lowering; MLX takes integer offsets only) keeps the composite. Results
    against float64."""
    import mlx.core as mx
    from fnarray.lowering.mlx.program import Generated
    rng = np.random.default_rng(2)
    rope = nn.RoPE(dims, base=500.0, scale=scale)
    x = rng.standard_normal((2, 3, 5, 16)).astype(np.float32)
    if offset is None:
        prog = fa.make_ir(lambda v: rope(v, offset=6))(x)
        args, at = [x], 6
    else:
        prog = fa.make_ir(lambda v, o: rope(v, offset=o))(x, np.int32(offset))
        args, at = [x, np.array(offset, np.int32)], offset
    gpu, cpu = Generated(prog, platform="gpu"), Generated(prog, platform="cpu")
    assert ("_rope(" in gpu.source) == (offset is not None) and "_rope(" not in cpu.source
    inv = (500.0 ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)).astype(np.float32)
    consts = [mx.array(inv)] if offset is not None else [mx.array(np.float32(at)), mx.array(inv)]
    assert len(consts) == len(prog.constvars)
    for gen in (gpu, cpu):
        out = gen.fn(*consts, *[mx.array(a) for a in args])[0]
        np.testing.assert_allclose(np.array(out), _rope_ref(x, dims, 500.0, scale, at), rtol=1e-5, atol=2e-5)


def test_matrix_product_without_batch_dimensions_adds_no_reshape(mdev):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)
    got = fa.jit(lambda a, b: a @ b.T, device=mdev)(fa.device_put(x, mdev), fa.device_put(w, mdev))
    assert _nodes(got) == {"Transpose": 1, "Matmul": 1}   # (counted before evaluating: then the graph is gone)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    xs = rng.standard_normal((3, 2, 64)).astype(np.float32)   # batched: still (B, M, K) @ (B, K, N)
    got = fa.jit(lambda a, b: fnp.einsum("bmk,nk->bmn", a, b), device=mdev)(fa.device_put(xs, mdev),
                                                                          fa.device_put(w, mdev))
    np.testing.assert_allclose(np.asarray(got), xs.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    ints = fa.jit(lambda a, b: a @ b, device=mdev)(fa.device_put(np.arange(6, dtype=np.int32).reshape(2, 3), mdev),
                                                   fa.device_put(np.arange(12, dtype=np.int32).reshape(3, 4), mdev))
    np.testing.assert_array_equal(np.asarray(ints), np.arange(6).reshape(2, 3) @ np.arange(12).reshape(3, 4))


@pytest.mark.parametrize("start", [5, -3, 200])
def test_cache_update_clamps_only_the_moving_axis(mdev, start):
    """A KV cache's one-position update: the start of the one axis that can move is clamped (out-of-range starts
    too), the starts of the whole axes are not read (any value: clamped to 0); 4 nodes and the update."""
    from fnarray import lax
    rng = np.random.default_rng(4)
    cache, new = rng.standard_normal((1, 16, 2, 4)).astype(np.float32), rng.standard_normal((1, 1, 2, 4)).astype(
        np.float32)

    def update(c, u, s):
        return lax.dynamic_update_slice(c, u, (7, s, -2, 9))   # whole axes' starts clamp to 0 whatever they are
    got = fa.jit(update, device=mdev)(fa.device_put(cache, mdev), fa.device_put(new, mdev),
                                      fa.device_put(np.int32(start), mdev))
    nodes = _nodes(got)
    assert nodes["DynamicSliceUpdate"] == 1 and sum(nodes.values()) <= 5, nodes
    want = cache.copy()
    at = min(max(start, 0), 15)
    want[:, at:at + 1] = new
    np.testing.assert_array_equal(np.asarray(got), want)

    def read(c, s):
        return lax.dynamic_slice(c, (3, s, 1, -4), (1, 2, 2, 4))
    got = fa.jit(read, device=mdev)(fa.device_put(cache, mdev), fa.device_put(np.int32(start), mdev))
    at = min(max(start, 0), 14)
    np.testing.assert_array_equal(np.asarray(got), cache[:, at:at + 2])


def test_a_chain_of_reshapes_is_one_node(mdev):
    from fnarray.lowering.mlx.program import Generated
    x = np.arange(24, dtype=np.float32)

    def chain(v):
        return fnp.reshape(fnp.reshape(fnp.reshape(v * 2, (4, 6)), (2, 12)), (2, 3, 4)) + 1
    prog = fa.make_ir(chain)(x)
    assert Generated(prog).source.count(".reshape(") == 1
    got = fa.jit(chain, device=mdev)(fa.device_put(x, mdev))
    assert _nodes(got)["Reshape"] == 1
    np.testing.assert_array_equal(np.asarray(got), (x * 2).reshape(2, 3, 4) + 1)


def test_a_jitted_draw_is_the_cipher_and_evaluates_nothing_until_read(mdev, monkeypatch):
    """The VAE grid of ``benchmarks/programs.py`` draws Bernoulli samples in a jitted program (issue 28: 1.1x raw MLX
    steady, all of it the cipher's passes and nodes: docs/performance.md, twenty-third session). The draw's graph is
    Threefry-2x32 as one MLX operation per operation of its 20 rounds (``lowering/mlx/prng.py``: no range checks of
    shifts by literal amounts, ~130 equations before the twenty-second session), and the call evaluates nothing
    until its result is read (one ``mx.eval``, as raw MLX's ``mx.eval(tree)``); the samples are numpy:0's."""
    import mlx.core as mx
    import fnarray.random as fr
    evals = []
    for name in ("eval", "async_eval"):
        real = getattr(mx, name)
        monkeypatch.setattr(mx, name, lambda *a, real=real, name=name: evals.append(name) or real(*a))
    p = np.linspace(0, 1, 42, dtype=np.float32).reshape(6, 7)
    f = fa.jit(lambda k, p: fr.bernoulli(k, p))
    got = f(fa.device_put(fr.key(3), mdev), fa.device_put(p, mdev))
    nodes = _nodes(got)
    assert not evals and nodes["LeftShift"] == 20 and nodes["RightShift"] == 21 and sum(nodes.values()) <= 205, \
        (evals, nodes)
    fa.block_until_ready(got)
    assert evals == ["eval"], evals
    cpu = fa.devices("numpy")[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(f(fa.device_put(fr.key(3), cpu), fa.device_put(p, cpu))))


def test_llm_decode_step_graph(mdev):
    """The example llama's jitted decode step (2 blocks, width 64): the graph MLX evaluates per token, 315 nodes
    where it was 420 before these rewrites (108 of them reshapes, now 43; the benchmark's 4-block model: 786 -> 583,
    and raw MLX's own step, as mlx-lm writes it, 584). Its tokens are numpy:0's."""
    import llm
    base = llm.Llama(96, 64, 4, 2, 2, 192, key=fa.random.key(0))
    tokens = {}
    for dev in (mdev, fa.get_device("numpy:0")):
        m = fa.device_put(base, dev)
        prefill, decode, _ = llm.make_generators(dev, 0.9, 1.0)
        key = fa.device_put(fa.random.key(0), dev)
        ids = fa.device_put(np.arange(9, dtype=np.int32)[None] % 96, dev)
        token, caches = prefill(m, m.make_caches(1, 32, dev), ids, key, greedy=True)
        out = [int(token[0])]
        for _ in range(4):
            token, caches = decode(m, caches, token, key, greedy=True)
            out.append(int(token[0]))
        tokens[dev.backend] = out
        if dev is mdev:
            text = decode.lower(m, caches, token, key, greedy=True).as_text()
            nodes = _nodes(decode(m, caches, token, key, greedy=True))
    assert tokens["mlx"] == tokens["numpy"]
    assert len(re.findall(r"= f\d+_length_mask\(", text)) == 1, text    # the layers read one offset: one mask
    assert nodes["Sqrt"] == 0 and nodes["Rsqrt"] == 5      # five norms through mx.fast.rms_norm
    assert nodes["Maximum"] == nodes["Minimum"] == 5       # four cache updates' clamps and the embedding's
    assert nodes["Reshape"] <= 45 and sum(nodes.values()) <= 320, nodes


def _attention_ref(q, k, v, lengths, heads_first):
    """Attention of queries ``(B, T, N, H)`` over the first ``lengths[b]`` keys, in float64 (every key removed: the
    values' mean, JAX's)."""
    k, v = (np.swapaxes(a, 1, 2) if heads_first else a for a in (k, v))   # (B, S, K, H)
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    kk, vv = (np.repeat(a.astype(np.float64), N // K, axis=2) for a in (k, v))
    logits = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), kk) / np.sqrt(H)
    keep = np.arange(S)[None, None, None, :] < np.asarray(lengths)[:, None, None, None]
    logits = np.where(keep, logits, -1e30)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), vv)


@pytest.mark.parametrize("heads_first", [True, False])
def test_attention_calls_on_one_lengths_value_build_one_mask(mdev, heads_first):
    """Float32 attention masked by key lengths alone (a decode step's) is the mask's equation and the kernel's
    (``attention.share_length_masks``): calls on the same lengths build one mask, calls on other lengths their
    own, and each result is NumPy's in float64 (a zero length: the values' mean)."""
    rng = np.random.default_rng(7)
    q1, q2 = (rng.standard_normal((2, 1, 4, 8)).astype(np.float32) for _ in range(2))
    kv_shape = (2, 2, 12, 8) if heads_first else (2, 12, 2, 8)
    k, v = (rng.standard_normal(kv_shape).astype(np.float32) for _ in range(2))
    l1, l2 = np.array([5, 12], np.int32), np.array([0, 3], np.int32)

    def f(q1, q2, k, v, l1, l2):
        def att(q, lengths):
            return nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths, kv_heads_first=heads_first)
        return att(q1, l1), att(q2, l1), att(q1, l2)
    step = fa.jit(f, device=mdev)
    args = (q1, q2, k, v, l1, l2)
    text = step.lower(*args).as_text()
    assert len(re.findall(r"= f\d+_length_mask\(", text)) == 2 and "_dot_product_attention(" not in text, text
    for got, (q, lengths) in zip(step(*args), [(q1, l1), (q2, l1), (q1, l2)], strict=True):
        np.testing.assert_allclose(np.asarray(got), _attention_ref(q, k, v, lengths, heads_first), rtol=1e-5,
                                   atol=1e-5)


def _by_rules(prog, args):
    """``prog`` run equation by equation through each rule's own function (``common.RULES``), on MLX arrays."""
    from fnarray.core.ir import Literal
    from fnarray.lowering.mlx.common import RULES, from_numpy
    env = dict(zip(prog.invars, [from_numpy(a) for a in args]))

    def read(a):
        return from_numpy(np.asarray(a.val, a.aval.dtype)) if isinstance(a, Literal) else env[a]
    for e in prog.eqns:
        fn = RULES[e.primitive](e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])
        env[e.outputs[0]] = fn(*[read(a) for a in e.inputs])
    return [np.asarray(env[v]) for v in prog.outvars]


def test_one_expression_rules_are_written_into_the_source(mdev):
    """The rules that are one MLX expression (``common.expression``) appear in the generated source as direct
    ``mx`` calls, not rule calls, and give the bits their rule functions give and numpy:0's results."""
    from fnarray import lax
    from fnarray.lowering.mlx.program import Generated
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    cache, at = rng.standard_normal((1, 16, 2, 3)).astype(np.float32), np.int32(4)

    def step(x, w, cache, at):
        h = (x @ w.T).reshape(2, 2, 3).transpose(1, 0, 2)                  # dot_general, reshape, transpose
        b = fnp.broadcast_to(fnp.sum(h, axis=0)[None], (4, 2, 3))           # broadcast_in_dim
        c = fnp.concatenate([b[:2], h], axis=0).astype(np.float16)         # slice, concatenate, convert
        low = c.reshape(4, 6) @ c.reshape(4, 6).T                           # float16 product (in float32)
        new = lax.dynamic_update_slice(cache, h[:1].transpose(1, 0, 2)[None, :1], (0, at, 0, 0))
        return low, lax.dynamic_slice(new, (0, at, 0, 0), (1, 2, 2, 3)), lax.stop_gradient(x) + 1
    args = (x, w, cache, at)
    prog = fa.make_ir(step)(*args)
    src = Generated(prog).source
    for call in ("mx.matmul(", "mx.transpose(", ".reshape(", "mx.broadcast_to(", "mx.concatenate(", ".astype(",
                 "mx.slice_update(", "mx.slice(", "mx.clip("):
        assert call in src, (call, src)
    for prim in ("dot_general", "reshape", "transpose", "broadcast_in_dim", "concatenate", "slice",
                 "convert_element_type", "dynamic_update_slice", "dynamic_slice", "stop_gradient"):
        assert not re.search(rf"= f\d+_{prim}\(", src), (prim, src)
    got = fa.jit(step, device=mdev)(*[fa.device_put(a, mdev) for a in args])
    ndev = fa.devices("numpy")[0]
    want = fa.jit(step, device=ndev)(*[fa.device_put(a, ndev) for a in args])
    for g, r, ref in zip(got, _by_rules(prog, args), want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), r)     # the same MLX operations
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), np.asarray(ref).astype(np.float64),
                                   rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("heads_first", [True, False])
@pytest.mark.parametrize("lengths", [[7, 7], [5, 12], [0, 3], [20, 9], [12, 12]])
def test_eager_programs_slice_the_keys_to_the_lengths_read_on_the_host(mdev, monkeypatch, heads_first, lengths):
    """A program that runs eagerly reads attention's key lengths on the host once per lengths value
    (``attention.host_length_slice``) and gives the kernel the keys up to the longest (no mask where all reach it);
    ``mx.compile``'s form keeps the mask. Both are NumPy's in float64 for equal, unequal, zero and past-the-end
    lengths, and the lengths are read once for two calls on them."""
    from fnarray.lowering.mlx import attention as mlx_attention
    from fnarray.lowering.mlx import backend as mlx_backend
    from fnarray.lowering.mlx.program import Generated
    rng = np.random.default_rng(11)
    q1, q2 = (rng.standard_normal((2, 1, 4, 8)).astype(np.float32) for _ in range(2))
    kv_shape = (2, 2, 12, 8) if heads_first else (2, 12, 2, 8)
    k, v = (rng.standard_normal(kv_shape).astype(np.float32) for _ in range(2))
    lens = np.array(lengths, np.int32)

    def f(q1, q2, k, v, lens):
        def att(q):
            return nn.dot_product_attention(q, k, v, key_value_seq_lengths=lens, kv_heads_first=heads_first)
        return att(q1), att(q2)
    args = (q1, q2, k, v, lens)
    src = Generated(fa.make_ir(f)(*args), host_lengths=True).source
    assert len(re.findall(r"= f\d+_length_slice\(", src)) == 1 and "length_mask" not in src, src
    reads = []
    real = mlx_attention.host_length_slice
    monkeypatch.setattr(mlx_attention, "host_length_slice", lambda ls, S: reads.append(1) or real(ls, S))
    want = [_attention_ref(q, k, v, lens, heads_first) for q in (q1, q2)]
    for mode, n_reads in (("never", 1), ("always", 0)):
        monkeypatch.setattr(mlx_backend, "COMPILE_MODE", mode)
        reads.clear()
        got = fa.jit(lambda *a: f(*a), device=mdev)(*[fa.device_put(a, mdev) for a in args])   # a new trace
        assert len(reads) == n_reads, mode
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


def test_host_length_slice_keeps_the_filled_keys(mdev):
    """``host_length_slice``'s ``(n, mask)``: the longest length within ``S``, no mask where all lengths reach it;
    every key (``S``) and the mask for a length below 1; the mask's rows keep ``s < lengths[b]``."""
    import mlx.core as mx

    from fnarray.lowering.mlx.attention import host_length_slice
    assert host_length_slice(mx.array([5], dtype=mx.int32), 12) == (5, None)
    assert host_length_slice(mx.array([30, 14], dtype=mx.int32), 12) == (12, None)
    for lengths, n in (([3, 7], 7), ([0, 4], 12), ([-2, 20], 12)):
        got_n, mask = host_length_slice(mx.array(lengths, dtype=mx.int32), 12)
        keep = np.arange(n)[None, :] < np.array(lengths)[:, None]
        assert got_n == n
        np.testing.assert_array_equal(np.asarray(mask)[:, 0, 0] == 0, keep)
