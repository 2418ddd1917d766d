"""Bad input to every public module's entry points: a clear error, of the right type, that says what was given
and what was expected (issue 27). Each module gets at least one wrong type, one wrong shape and one wrong value.

A case is ``(module, kind, call, error type, parts of the message)``; ``call(x, key)`` gets a float32 ``(2, 3)``
array and a PRNG key on the device under test. ``tests/test_bad_input.py`` holds the older cases (memory, device
placement, dtypes); this file is the per-module sweep.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.scipy.linalg as sl
import fnarray.scipy.special as sp
import fnarray.scipy.stats as st
from fnarray import debug, distributed, export, lax, nn, optim, profiler, random, sharding, tree_util
from fnarray.core.errors import PyTreeError, ShapeError


def _mesh():
    return sharding.Mesh(np.array(fa.devices("numpy")[:1]), ("a",))


def _adam_update(grads, params):
    opt = optim.adam(1e-3)
    return opt.update(grads, opt.init(params))


CASES = [
    # fnarray (top level)
    ("fnarray", "type", lambda x, k: fa.jit(3), TypeError, ["jit", "callable", "int"]),
    ("fnarray", "shape", lambda x, k: fa.grad(lambda a: a * 2)(x), TypeError, ["scalar output", "(2, 3)", "jacrev"]),
    ("fnarray", "shape", lambda x, k: fa.vmap(lambda a, b: a + b)(x, fnp.ones(4)), ShapeError,
     ["inconsistent sizes", "size 2", "size 4"]),
    ("fnarray", "value", lambda x, k: fa.grad(lambda a: a.sum(), argnums=3)(x), ValueError, ["argnums 3", "1"]),
    ("fnarray", "value", lambda x, k: fa.device_put(x, "nope:0"), ValueError, ["'nope:0'", "available devices"]),
    # fnarray.numpy
    ("numpy", "type", lambda x, k: fnp.zeros("a"), TypeError, ["shape", "tuple of ints", "'a'"]),
    ("numpy", "shape", lambda x, k: fnp.reshape(x, (4, 5)), ShapeError, ["(2, 3)", "(4, 5)", "6", "20"]),
    ("numpy", "shape", lambda x, k: fnp.matmul(x, x), ValueError, ["matmul", "size 3", "size 2"]),
    ("numpy", "value", lambda x, k: fnp.sum(x, axis=5), ValueError, ["axis 5", "rank 2", "[-2, 2)"]),
    ("numpy", "value", lambda x, k: fnp.arange(0, 5, 0), ValueError, ["step", "zero"]),
    # fnarray.lax
    ("lax", "type", lambda x, k: lax.add(x, "a"), TypeError, ["add", "str", "Array or a scalar"]),
    ("lax", "type", lambda x, k: lax.fori_loop(0, "a", lambda i, c: c, 0.0), TypeError,
     ["fori_loop", "integers", "str"]),
    ("lax", "shape", lambda x, k: lax.add(x, fnp.ones((3, 2))), ShapeError, ["add", "(2, 3)", "(3, 2)"]),
    ("lax", "shape", lambda x, k: lax.dot_general(x, x, (((1,), (0,)), ((), ()))), ValueError, ["3", "2"]),
    ("lax", "value", lambda x, k: lax.slice(x, (0, 0), (5, 3)), ValueError, ["out of bounds", "(2, 3)", "5"]),
    ("lax", "value", lambda x, k: lax.reshape(x, (-1, 3)), ValueError, ["non-negative", "(-1, 3)"]),
    # fnarray.random
    ("random", "type", lambda x, k: random.normal(3, (2,)), TypeError, ["normal", "PRNG key", "int"]),
    ("random", "type", lambda x, k: random.normal(k, "ab"), TypeError, ["shape", "tuple of ints", "'ab'"]),
    ("random", "shape", lambda x, k: random.normal(fnp.ones(3, dtype=fnp.uint32), (2,)), ShapeError,
     ["(2,)", "(3,)", "fnarray.random.key"]),
    ("random", "shape", lambda x, k: random.categorical(k, x, shape=(5,)), ShapeError, ["(5,)", "(2,)", "(2, 3)"]),
    ("random", "value", lambda x, k: random.choice(k, 3, (5,), replace=False), ValueError,
     ["5 samples", "3", "replace=True"]),
    ("random", "value", lambda x, k: random.split(k, -1), ValueError, ["split", "-1", "negative"]),
    # fnarray.nn
    ("nn", "type", lambda x, k: nn.relu("a"), TypeError, ["relu", "str", "asarray"]),
    ("nn", "type", lambda x, k: nn.Linear("4", 2, key=k), ValueError, ["in_features", "positive int", "'4'"]),
    ("nn", "shape", lambda x, k: nn.Linear(4, 2, key=k)(x), ShapeError, ["in_features=4", "(2, 3)"]),
    ("nn", "shape", lambda x, k: nn.losses.cross_entropy(x, fnp.ones((5,), dtype=fnp.int32)), ShapeError,
     ["cross_entropy", "(2,)", "(5,)"]),
    ("nn", "value", lambda x, k: nn.softmax(x, axis=3), ValueError, ["axis 3", "rank 2"]),
    ("nn", "value", lambda x, k: nn.one_hot(fnp.array([1]), -3), ValueError, ["num_classes", "-3"]),
    # fnarray.optim
    ("optim", "type", lambda x, k: optim.adam("a"), TypeError, ["learning_rate", "number or a schedule", "str"]),
    ("optim", "shape", lambda x, k: _adam_update({"a": fnp.ones(4)}, {"a": x}), ShapeError,
     ["fnarray.optim", "(4,)", "(2, 3)", "['a']", "init"]),
    ("optim", "shape", lambda x, k: _adam_update({"a": x}, {"b": x}), PyTreeError,
     ["structure", "'a'", "'b'", "init"]),
    ("optim", "value", lambda x, k: optim.clip_by_global_norm(-1.0), ValueError, ["max_norm", "positive", "-1.0"]),
    # fnarray.scipy
    ("scipy", "type", lambda x, k: sp.gammaln("a"), TypeError, ["gammaln", "str"]),
    ("scipy", "type", lambda x, k: st.poisson.pmf("a", 1.0), TypeError, ["poisson", "str"]),
    ("scipy", "shape", lambda x, k: sl.solve(x, fnp.ones(2)), ShapeError, ["solve", "square", "(2, 3)"]),
    ("scipy", "shape", lambda x, k: st.multivariate_normal.logpdf(fnp.ones(3), fnp.ones(3), fnp.eye(2)),
     ShapeError, ["cov", "3, 3", "(2, 2)"]),
    ("scipy", "value", lambda x, k: sp.logsumexp(x, axis=4), ValueError, ["axis 4", "rank 2"]),
    # fnarray.tree_util
    ("tree_util", "type", lambda x, k: tree_util.tree_map(3, {"a": 1}), TypeError, ["tree_map", "function", "int"]),
    ("tree_util", "shape", lambda x, k: tree_util.tree_map(lambda a, b: a, {"a": 1}, {"b": 1}), ValueError,
     ["'a'", "'b'"]),
    ("tree_util", "value", lambda x, k: tree_util.tree_unflatten(tree_util.tree_structure([1, 2]), [1]),
     ValueError, ["2 leaves", "got 1"]),
    # fnarray.sharding
    ("sharding", "type", lambda x, k: sharding.NamedSharding(_mesh(), "a"), TypeError,
     ["PartitionSpec", "'a'"]),
    ("sharding", "shape", lambda x, k: sharding.Mesh(np.array(fa.devices("numpy")[:1]), ("a", "b")), ValueError,
     ["(1,)", "1 axis names", "('a', 'b')"]),
    ("sharding", "value", lambda x, k: fa.device_put(x, sharding.NamedSharding(_mesh(), sharding.P("zz"))),
     ValueError, ["'zz'", "('a',)"]),
    ("sharding", "value", lambda x, k: sharding.make_mesh((4,), ("a",), devices=fa.devices("numpy")), ValueError,
     ["4", "numpy"]),
    # fnarray.export
    ("export", "type", lambda x, k: export.webgpu(lambda a: a * 2, x, path=3), TypeError, ["path", "int"]),
    ("export", "type", lambda x, k: export.onnx(3, x, path="m.onnx"), TypeError, ["callable", "int"]),
    ("export", "shape", lambda x, k: export.onnx(lambda a: a @ a, x, path="/tmp/fnarray_bad.onnx"), ValueError,
     ["matmul", "size 3", "size 2"]),
    ("export", "value", lambda x, k: export.webgpu(lambda a: a * 2, fnp.ones(3, dtype=fnp.int8),
                                                   path="/tmp/fnarray_bad_bundle"), NotImplementedError,
     ["int8", "browser", "WebGPU"]),
    ("export", "value", lambda x, k: export.onnx(lambda a: a, x, path="/tmp"), IsADirectoryError,
     ["path", ".onnx", "folder", "/tmp"]),
    # fnarray.serialization (fa.save / fa.load)
    ("serialization", "type", lambda x, k: fa.save("/tmp/fnarray_bad_leaf.safetensors", {"a": object()}),
     TypeError, ["leaf a", "object", "arrays and scalars"]),
    ("serialization", "shape", lambda x, k: _save_load({"a": x}, {"a": fnp.ones(4)}), ValueError,
     ["float32[2, 3]", "float32[4]"]),
    ("serialization", "value", lambda x, k: fa.load("/tmp/fnarray_no_such_checkpoint.safetensors"),
     FileNotFoundError, ["fnarray_no_such_checkpoint"]),
    # fnarray.profiler
    ("profiler", "type", lambda x, k: profiler.summary(3), TypeError, ["summary", "Profile", "int"]),
    ("profiler", "value", lambda x, k: profiler.stop_trace(), RuntimeError, ["no trace", "start_trace"]),
    # fnarray.debug
    ("debug", "type", lambda x, k: debug.print(3), TypeError, ["format string", "int"]),
    ("debug", "type", lambda x, k: debug.callback("f", x), TypeError, ["callable", "str"]),
    ("debug", "value", lambda x, k: debug.print("{} {}", x), ValueError, ["'{} {}'", "value 1", "1 were given"]),
    ("debug", "value", lambda x, k: fa.jit(lambda a: debug.print("{y}", a))(x), ValueError, ["'y'", "keyword"]),
    # fnarray.distributed (all raised before any engine starts)
    ("distributed", "type", lambda x, k: distributed.initialize(3, 2, 1), TypeError,
     ["coordinator_address", "'host:port'", "int"]),
    ("distributed", "type", lambda x, k: distributed.initialize("127.0.0.1:1", "2", 1), TypeError,
     ["num_processes", "int", "'2'"]),
    ("distributed", "value", lambda x, k: distributed.initialize(backend="numpy"), ValueError,
     ["numpy", "no distributed engine", "jax", "mlx"]),
    ("distributed", "value", lambda x, k: distributed.initialize("127.0.0.1:1", 2, 5), ValueError,
     ["process_id 5", "[0, 2)"]),
    ("distributed", "value", lambda x, k: distributed.initialize("127.0.0.1:1", 2, 1, timeout=-1), ValueError,
     ["timeout", "positive", "-1"]),
]


def _save_load(tree, like):
    """``fa.load`` of ``tree`` saved in a folder of this call's own (never a fixed path that another run may write)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "like.safetensors")
        fa.save(path, tree)
        return fa.load(path, like)


def test_every_module_has_each_kind():
    """At least one wrong type, one wrong shape and one wrong value per public module (serialization's value
    case is a missing file)."""
    kinds: dict = {}
    for module, kind, *_ in CASES:
        kinds.setdefault(module, set()).add(kind)
    # No array shapes reach these: a profile, a format string, a process group have no shape to get wrong.
    waived = {"profiler": {"shape"}, "debug": {"shape"}, "distributed": {"shape"}}
    for module in ("fnarray", "numpy", "lax", "random", "nn", "optim", "scipy", "tree_util", "sharding", "export",
                   "serialization", "profiler", "debug", "distributed"):
        missing = {"type", "shape", "value"} - kinds.get(module, set()) - waived.get(module, set())
        assert not missing, f"{module} has no {sorted(missing)} case"


#: Modules whose errors are raised before any array reaches a device: checked once, on the default device.
_HOST_ONLY = ("sharding", "distributed", "export", "serialization", "profiler")
DEVICE_CASES = [c for c in CASES if c[0] not in _HOST_ONLY]
HOST_CASES = [c for c in CASES if c[0] in _HOST_ONLY]


def _check(device, call, error, parts):
    x = fa.device_put(np.ones((2, 3), np.float32), device)
    key = fa.device_put(random.key(0), device)
    with pytest.raises(error) as e:
        call(x, key)
    msg = str(e.value)
    for p in parts:
        assert p in msg, f"{p!r} not in the {type(e.value).__name__} message: {msg}"


@pytest.mark.parametrize("module,kind,call,error,parts", DEVICE_CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(DEVICE_CASES)])
def test_bad_input_is_a_clear_error(device, module, kind, call, error, parts):
    _check(device, call, error, parts)


@pytest.mark.parametrize("module,kind,call,error,parts", HOST_CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(HOST_CASES)])
def test_bad_input_before_any_device_is_a_clear_error(module, kind, call, error, parts):
    _check(fa.devices("numpy")[0], call, error, parts)
