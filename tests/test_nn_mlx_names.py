"""``mlx.nn``'s layer names, ``Module.parameters``/``update``/``load_weights`` by MLX's dotted names,
``fnarray.utils``/``tree_util.tree_unflatten`` of named lists and ``optim.SGD``/``Adam``/``AdamW``: each against
MLX itself, the MLX layer's initialised weights copied in by name, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.nn as nn

mx = pytest.importorskip("mlx.core")
mnn = pytest.importorskip("mlx.nn")
mopt = pytest.importorskip("mlx.optimizers")
from mlx.utils import tree_flatten as mlx_flatten  # noqa: E402
from mlx.utils import tree_unflatten as mlx_unflatten  # noqa: E402

R = np.random.RandomState(0)
X3 = R.randn(2, 5, 8).astype(np.float32)        # (N, L, C)
X4 = R.randn(2, 4, 6, 8).astype(np.float32)     # (N, H, W, C)
TOL = dict(rtol=2e-5, atol=2e-5)


def _close(got, want, what):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), err_msg=what, **TOL)


def _ours(mlx_layer, ours):
    """``ours`` with the MLX layer's weights, loaded by their dotted names (strict)."""
    return ours.load_weights(list(mlx_flatten(mlx_layer.parameters())))


ACTIVATIONS = ["ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "CELU", "SELU", "Softplus",
               "Softsign", "Softmax", "LogSoftmax", "LogSigmoid", "Hardswish", "HardTanh", "Mish", "Step", "GLU",
               "ReLU2", "Softmin", "HardShrink", "Softshrink"]


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_modules_match_mlx(name, device):
    x = fa.device_put(X3, device)
    _close(getattr(nn, name)()(x), getattr(mnn, name)()(mx.array(X3)), name)


def test_prelu_loads_its_slopes_by_name(device):
    theirs = mnn.PReLU(8, 0.1)
    _close(_ours(theirs, nn.PReLU(8))(fa.device_put(X3, device)), theirs(mx.array(X3)), "PReLU")


@pytest.mark.parametrize("approx", ["none", "precise", "tanh", "fast"])
def test_gelu_approximations_and_arguments_match_mlx(approx):
    _close(nn.GELU(approx)(X3), mnn.GELU(approx)(mx.array(X3)), approx)
    _close(nn.LeakyReLU(0.2)(X3), mnn.LeakyReLU(0.2)(mx.array(X3)), "LeakyReLU(0.2)")
    with pytest.raises(ValueError, match="approx"):
        nn.GELU("exact")


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("dims", [8, 4])
def test_rope_matches_mlx(traditional, dims, device):
    x = fa.device_put(X3, device)
    for kw in ({}, {"base": 100.0, "scale": 0.5}):
        ours, theirs = nn.RoPE(dims, traditional, **kw), mnn.RoPE(dims, traditional, **kw)
        _close(ours(x), theirs(mx.array(X3)), f"RoPE {kw}")
        _close(ours(x, offset=3), theirs(mx.array(X3), offset=3), f"RoPE offset {kw}")
    with pytest.raises(ValueError, match="even"):
        nn.RoPE(5)


def test_positional_encodings_match_mlx(device):
    pos = fa.device_put(np.arange(7, dtype=np.float32), device)
    for kw in ({}, {"cos_first": True, "full_turns": True, "scale": 0.3}, {"min_freq": 1e-3, "max_freq": 2.0}):
        _close(nn.SinusoidalPositionalEncoding(8, **kw)(pos),
               mnn.SinusoidalPositionalEncoding(8, **kw)(mx.array(np.arange(7, dtype=np.float32))), f"sin {kw}")
    scores = R.randn(2, 4, 5, 7).astype(np.float32)
    mask = R.randn(5, 7).astype(np.float32)
    for off in (0, 2):
        _close(nn.ALiBi()(fa.device_put(scores, device), offset=off),
               mnn.ALiBi()(mx.array(scores), offset=off), f"ALiBi offset {off}")
    _close(nn.ALiBi()(scores, mask=mask), mnn.ALiBi()(mx.array(scores), mask=mx.array(mask)), "ALiBi mask")
    assert np.array_equal(np.asarray(nn.MultiHeadAttention.create_additive_causal_mask(6)),
                          np.asarray(mnn.MultiHeadAttention.create_additive_causal_mask(6)))


@pytest.mark.parametrize("pytorch_compatible", [False, True])
def test_group_and_instance_norm_match_mlx(pytorch_compatible, device):
    x = fa.device_put(X4, device)
    theirs = mnn.GroupNorm(4, 8, pytorch_compatible=pytorch_compatible)
    theirs.update({"weight": mx.array(R.rand(8).astype(np.float32)), "bias": mx.array(R.randn(8).astype(np.float32))})
    ours = _ours(theirs, nn.GroupNorm(4, 8, pytorch_compatible=pytorch_compatible))
    _close(ours(x), theirs(mx.array(X4)), "GroupNorm")
    for affine in (False, True):
        _close(nn.InstanceNorm(8, affine=affine)(x), mnn.InstanceNorm(8, affine=affine)(mx.array(X4)), "InstanceNorm")
    with pytest.raises(ValueError, match="divide"):
        nn.GroupNorm(3, 8)


@pytest.mark.parametrize("name, kw", [
    ("MaxPool1d", {"kernel_size": 3, "stride": 2}), ("AvgPool1d", {"kernel_size": 2, "padding": 1}),
    ("MaxPool2d", {"kernel_size": 2, "stride": 1, "padding": 1}), ("AvgPool2d", {"kernel_size": (2, 3)}),
])
def test_pooling_modules_match_mlx(name, kw, device):
    x = X3 if "1d" in name else X4
    _close(getattr(nn, name)(**kw)(fa.device_put(x, device)), getattr(mnn, name)(**kw)(mx.array(x)), name)


@pytest.mark.parametrize("norm_first", [True, False])
def test_transformer_encoder_loads_mlx_weights_by_name(norm_first, device):
    mx.random.seed(1)
    theirs = mnn.TransformerEncoder(2, 8, 2, mlp_dims=16, norm_first=norm_first)
    ours = nn.TransformerEncoder(2, 8, 2, mlp_dims=16, norm_first=norm_first, key=fa.random.key(0))
    assert sorted(k for k, _ in mlx_flatten(theirs.parameters())) == \
        sorted(k for k, _ in fa.utils.tree_flatten(ours.parameters()))
    ours = _ours(theirs, ours)
    mask = mnn.MultiHeadAttention.create_additive_causal_mask(5)
    _close(ours(fa.device_put(X3, device), np.asarray(mask)), theirs(mx.array(X3), mask), "encoder")


@pytest.mark.parametrize("name", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_match_mlx(name, bias, device):
    mx.random.seed(5)
    x, h = X3[..., :3], R.randn(2, 4).astype(np.float32)
    theirs = getattr(mnn, name)(3, 4, bias=bias)
    ours = _ours(theirs, getattr(nn, name)(3, 4, bias=bias, key=fa.random.key(0)))
    for hidden in (None, h):
        got = ours(fa.device_put(x, device), hidden)
        want = theirs(mx.array(x), None if hidden is None else mx.array(hidden))
        for g, w in (zip(got, want, strict=True) if name == "LSTM" else [(got, want)]):
            _close(g, w, f"{name} hidden={hidden is not None}")
    one = ours(x[0])  # (L, D) without a batch axis
    _close(one[0] if name == "LSTM" else one, theirs(mx.array(x[0]))[0] if name == "LSTM" else
           theirs(mx.array(x[0])), f"{name} unbatched")


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_transpose_matches_mlx(rank, device):
    mx.random.seed(6)
    x = R.randn(*((1,) + (4,) * rank + (3,))).astype(np.float32)
    for kw in ({}, {"stride": 2, "padding": 1, "output_padding": 1, "dilation": 2}):
        theirs = getattr(mnn, f"ConvTranspose{rank}d")(3, 5, 3, **kw)
        theirs.update({"bias": mx.array(R.randn(5).astype(np.float32))})
        ours = _ours(theirs, getattr(nn, f"ConvTranspose{rank}d")(3, 5, 3, **kw, key=fa.random.key(0)))
        _close(ours(fa.device_put(x, device)), theirs(mx.array(x)), f"ConvTranspose{rank}d {kw}")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_matches_mlx(mode, device):
    for x in (X3, X4):
        for scale, corners in ((2, False), (1.5, True), (0.6, False)):
            _close(nn.Upsample(scale, mode, corners)(fa.device_put(x, device)),
                   mnn.Upsample(scale, mode, corners)(mx.array(x)), f"{mode} {scale} {corners}")
    with pytest.raises(NotImplementedError, match="cubic"):
        nn.Upsample(2, "cubic")


def test_bias_keyword_as_mlx():
    assert nn.Linear(3, 2, bias=False, key=fa.random.key(0)).bias is None
    assert nn.Conv2d(3, 2, 3, bias=False, key=fa.random.key(0)).bias is None


def test_transformer_and_decoder_match_mlx():
    mx.random.seed(2)
    theirs = mnn.Transformer(8, 2, 1, 2, mlp_dims=16)
    ours = _ours(theirs, nn.Transformer(8, 2, 1, 2, mlp_dims=16, key=fa.random.key(1)))
    tgt = R.randn(2, 3, 8).astype(np.float32)
    tm = mnn.MultiHeadAttention.create_additive_causal_mask(3)
    _close(ours(X3, tgt, None, np.asarray(tm), None), theirs(mx.array(X3), mx.array(tgt), None, tm, None),
           "Transformer")


def test_conv_weights_load_from_mlx_files_and_back(tmp_path, device):
    mx.random.seed(3)
    theirs = mnn.Conv2d(8, 6, 3, padding=1)
    x = fa.device_put(X4, device)
    for ext in ("npz", "safetensors"):
        theirs.save_weights(str(tmp_path / f"mlx.{ext}"))
        ours = nn.Conv2d(8, 6, 3, padding=1, key=fa.random.key(2)).load_weights(str(tmp_path / f"mlx.{ext}"))
        assert ours.weight.shape == (6, 8, 3, 3)  # fnarray's layout; MLX's file holds (6, 3, 3, 8)
        _close(ours(x), theirs(mx.array(X4)), f"Conv2d from .{ext}")
        ours.save_weights(str(tmp_path / f"ours.{ext}"))
        again = mnn.Conv2d(8, 6, 3, padding=1)
        again.load_weights(str(tmp_path / f"ours.{ext}"))
        _close(again(mx.array(X4)), theirs(mx.array(X4)), f"Conv2d back into MLX from .{ext}")


def test_update_and_load_weights_errors_and_non_strict():
    layer = nn.Linear(4, 3, key=fa.random.key(0))
    new = layer.update({"bias": np.ones(3, np.float32)})
    assert new is not layer and np.array_equal(np.asarray(new.bias), np.ones(3)) and new.weight is layer.weight
    assert sorted(layer.trainable_parameters()) == sorted(layer.parameters()) == ["bias", "weight"]
    with pytest.raises(ValueError, match="missing parameters: bias"):
        layer.load_weights([("weight", np.zeros((3, 4), np.float32))])
    with pytest.raises(ValueError, match="not in the model: extra"):
        layer.load_weights([("weight", np.zeros((3, 4), np.float32)), ("bias", np.zeros(3, np.float32)),
                            ("extra", np.zeros(1, np.float32))])
    with pytest.raises(ValueError, match="has shape"):
        layer.update({"weight": np.zeros((4, 3), np.float32)})
    with pytest.raises(ValueError, match="no parameter"):
        layer.update({"kernel": np.zeros(3, np.float32)})
    assert layer.update({"kernel": np.zeros(3, np.float32)}, strict=False) is layer
    partial_ = layer.load_weights([("bias", np.full(3, 2.0, np.float32))], strict=False)
    assert np.array_equal(np.asarray(partial_.bias), np.full(3, 2.0))
    with pytest.raises(ValueError, match="neither .npz nor .safetensors"):
        layer.load_weights("weights.pt")


def test_named_tree_helpers_match_mlx_utils():
    tree = {"layers": [{"weight": 1, "bias": 2}, {"weight": 3}], "norm": {"weight": 4}, "scale": 5}
    flat = fa.utils.tree_flatten(tree)
    assert flat == mlx_flatten(tree)
    assert fa.utils.tree_unflatten(flat) == mlx_unflatten(flat) == tree
    assert fa.tree_util.tree_unflatten(flat) == tree  # MLX's one-argument form
    leaves, treedef = fa.tree_util.tree_flatten(tree)
    assert fa.tree_util.tree_unflatten(treedef, leaves) == tree  # JAX's form still works
    assert fa.utils.tree_map(lambda v: v * 2, tree) == {"layers": [{"weight": 2, "bias": 4}, {"weight": 6}],
                                                       "norm": {"weight": 8}, "scale": 10}
    with pytest.raises(TypeError, match="leaves missing"):
        fa.tree_util.tree_unflatten(treedef)


@pytest.mark.parametrize("name, kw", [
    ("SGD", {"learning_rate": 0.1}),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01, "dampening": 0.1}),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adam", {"learning_rate": 0.01}),
    ("Adam", {"learning_rate": 0.01, "betas": [0.8, 0.99], "bias_correction": True}),
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.1}),
])
def test_optimizer_classes_follow_mlx_trajectories(name, kw):
    mx.random.seed(4)
    x, y = R.randn(16, 4).astype(np.float32), R.randn(16, 2).astype(np.float32)
    theirs = mnn.Linear(4, 2)
    ours = _ours(theirs, nn.Linear(4, 2, key=fa.random.key(0)))
    mlx_opt, opt = getattr(mopt, name)(**kw), getattr(fa.optim, name)(**kw)
    assert isinstance(opt, fa.optim.GradientTransformation)

    def loss(model, x, y):
        return ((model(x) - y) ** 2).mean()

    step = mnn.value_and_grad(theirs, loss)
    state = opt.init(ours)
    for _ in range(5):
        _, g = step(theirs, mx.array(x), mx.array(y))
        mlx_opt.update(theirs, g)
        updates, state = opt.update(fa.grad(loss)(ours, x, y), state, ours)
        ours = fa.optim.apply_updates(ours, updates)
    _close(ours.weight, theirs.weight, f"{name} {kw}")
    _close(ours.bias, theirs.bias, f"{name} {kw} bias")


def test_value_and_grad_of_a_model_as_mlx():
    mx.random.seed(7)
    x, y = R.randn(8, 4).astype(np.float32), R.randn(8, 2).astype(np.float32)
    theirs = mnn.Linear(4, 2)
    ours = _ours(theirs, nn.Linear(4, 2, key=fa.random.key(0)))

    def loss(model, x, y):
        return ((model(x) - y) ** 2).mean()

    want_value, want_grads = mnn.value_and_grad(theirs, loss)(theirs, mx.array(x), mx.array(y))
    value, grads = nn.value_and_grad(ours, loss)(ours, x, y)
    _close(value, want_value, "value")
    for name, g in mlx_flatten(want_grads):
        _close(dict(fa.utils.tree_flatten(grads.parameters()))[name], g, name)
    with pytest.raises(TypeError, match="Module"):
        nn.value_and_grad(loss, loss)
