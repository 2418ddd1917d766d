"""Bad input gets fnarray's own errors, naming what was given and what to do (issue 12, item 8)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import DTypeError, ExportError, PyTreeError, ResourceExhaustedError, ShapeError
from fnarray.devices import memory
from fnarray.devices import placement
from fnarray.experimental import enable_x64

HUGE = (2**20, 2**20)  # 4 TiB of float32: more than any device here holds


def _assert_names(msg, *parts):
    for p in parts:
        assert p in msg, f"{p!r} not in message: {msg}"


def test_zeros_beyond_device_memory(device):
    """``zeros`` of 4 TiB raises before allocating, on the device asked for (not on the host first)."""
    with pytest.raises(ResourceExhaustedError) as e:
        fnp.zeros(HUGE, device=device)
    assert isinstance(e.value, MemoryError)
    _assert_names(str(e.value), "float32[1048576, 1048576]", "4.00 TiB", str(device), "smaller")
    ones = fnp.ones((2, 3), dtype=fnp.int32, device=device)  # the fill-on-device path still gives values
    assert ones.device == device and ones.dtype == fnp.int32
    np.testing.assert_array_equal(np.asarray(ones), np.ones((2, 3), np.int32))


def test_jitted_huge_output(device):
    """A jitted op whose result cannot fit raises at compile time, naming the primitive and the device."""
    f = fa.jit(lambda x: fnp.broadcast_to(x, HUGE) * 2.0, device=device)
    with pytest.raises(ResourceExhaustedError) as e:
        f(fnp.ones(HUGE[1]))
    _assert_names(str(e.value), "float32[1048576, 1048576]", "4.00 TiB", str(device))
    # eager, on a committed array
    x = fa.device_put(fnp.ones((HUGE[1],)), device)
    with pytest.raises(MemoryError):
        x[None, :] * fnp.ones((HUGE[0], 1), device=device)


def test_limits_are_read_from_the_device(device, monkeypatch):
    """The check uses the device's limits: with a 1 MiB buffer limit, device_put and results past it raise."""
    monkeypatch.setattr(memory, "limits", lambda dev: (1 << 20, 3 << 20))
    monkeypatch.setattr(placement, "_CHECKED_BYTES", 0)
    big = np.zeros((512, 1024), np.float32)  # 2 MiB
    with pytest.raises(ResourceExhaustedError, match=r"float32\[512, 1024\] \(2.00 MiB\).*at most 1.00 MiB"):
        fa.device_put(big, device)
    f = fa.jit(lambda x: (x + 1.0, x + 2.0, x + 3.0, x + 4.0), device=device)
    with pytest.raises(ResourceExhaustedError, match="more than its memory"):
        f(fa.device_put(np.zeros((256, 1024), np.float32), device))  # 4 x 1 MiB results > 3 MiB


def test_backend_out_of_memory_is_translated(device):
    """What a backend raises when memory runs out at run time becomes ``ResourceExhaustedError``."""
    av = fa.ShapedArray((1000, 1000), fnp.float32)
    for raw in (MemoryError("Unable to allocate 3.64 TiB"),
                RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes")):
        err = memory.translate(raw, device, [av])
        assert isinstance(err, ResourceExhaustedError)
        _assert_names(str(err), str(device), "float32[1000, 1000]", type(raw).__name__, "smaller")
    assert memory.translate(ValueError("bad shape"), device, [av]) is None


@pytest.mark.parametrize("value", ["hello", b"bytes", object(), Ellipsis, [1, "a"]],
                         ids=["str", "bytes", "object", "ellipsis", "list-with-str"])
def test_device_put_non_arrays(device, value):
    with pytest.raises(TypeError) as e:
        fa.device_put(value, device)
    assert isinstance(e.value, DTypeError)
    leaf = value[1] if isinstance(value, list) else value
    _assert_names(str(e.value), f"got a {type(leaf).__name__}", "fnarray.device_put")


def test_device_put_pytrees_follow_jax(device):
    """None is an empty pytree and a ragged list a list of leaves, in jax.device_put as here."""
    jax = pytest.importorskip("jax")
    assert fa.device_put(None, device) is None and jax.device_put(None) is None
    ragged = [[1, 2], [3]]
    ours, theirs = fa.device_put(ragged, device), jax.device_put(ragged)
    assert [[int(v) for v in row] for row in ours] == [[int(v) for v in row] for row in theirs]
    assert all(isinstance(v, fa.Array) and v.device == device for row in ours for v in row)
    with pytest.raises(ValueError, match="uneven lengths"):
        fnp.asarray(ragged, device=device)


def test_tree_unflatten_mismatch():
    tu = fa.tree_util
    spec = tu.tree_structure({"a": 1, "b": (2, 3)})
    with pytest.raises(PyTreeError) as e:
        tu.tree_unflatten(spec, [1, 2])
    _assert_names(str(e.value), "takes 3 leaves, got 2", "'a'")
    assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="treedef must be a tree structure"):
        tu.tree_unflatten([1, 2], [1, 2])
    assert tu.tree_unflatten(spec, [1, 2, 3]) == {"a": 1, "b": (2, 3)}


@pytest.mark.parametrize("make", [lambda: fa.optim.adam(1e-3), lambda: fa.optim.sgd(0.1, momentum=0.9),
                                  lambda: fa.optim.rmsprop(1e-3)], ids=["adam", "sgd-momentum", "rmsprop"])
def test_optim_pytree_mismatch(device, make):
    opt = make()
    params = {"w": fnp.ones(3, device=device), "b": fnp.zeros(2, device=device)}
    state = opt.init(params)
    with pytest.raises(PyTreeError) as e:
        opt.update({"w": fnp.ones(3, device=device)}, state, params)
    _assert_names(str(e.value), "updates has structure", "{'w': *}", "(1 leaves)", "'b': *", "(2 leaves)", "init")
    with pytest.raises(PyTreeError, match=r"params has structure .* but updates has"):
        fa.optim.apply_updates(params, [fnp.ones(3, device=device)])
    upd, _ = opt.update(params, state, params)  # the matching call still works
    assert set(upd) == {"w", "b"}
    # MLX's order, optimizer.update(model, grads): named, with optax's order to use instead
    with pytest.raises(TypeError, match=r"model \(Linear\).*MLX's.*update\(grads, state, params\)"):
        opt.update(fa.nn.Linear(3, 2, key=fa.random.key(0)), params)


def test_export_bad_paths(tmp_path):
    f = fa.jit(lambda x: x * 2.0)
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="path must be a folder name .* got int"):
        fa.export.webgpu(f, x, path=42)
    with pytest.raises(ExportError, match="empty"):
        fa.export.webgpu(f, x, path="")
    a_file = tmp_path / "model.txt"
    a_file.write_text("x")
    with pytest.raises(ExportError, match="is an existing file, not a folder"):
        fa.export.webgpu(f, x, path=a_file)
    with pytest.raises(ExportError, match="is a file, not a folder") as e:
        fa.export.webgpu(f, x, path=a_file / "sub" / "model")
    assert isinstance(e.value, OSError)
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        try:
            with pytest.raises(ExportError, match="no permission"):
                fa.export.webgpu(f, x, path=locked / "model")
        finally:
            locked.chmod(0o700)


@pytest.mark.parametrize("axis", [1.5, 1.0, np.float32(0.0)])
def test_a_float_axis_raises(axis):
    """``sum(x, axis=1.5)`` summed axis 1 (``int(axis)``); NumPy and JAX raise ``TypeError``."""
    x = fnp.ones((2, 3))
    for f in (fnp.sum, fnp.max, fnp.argmax, fnp.cumsum, fnp.sort, fnp.flip):
        with pytest.raises(TypeError, match="axis must be an int, got float"):
            f(x, axis=axis)
    assert fnp.sum(x, axis=np.int64(1)).shape == (2,)   # NumPy integers are integers
    with pytest.raises(TypeError, match="mark it static"):
        fa.jit(lambda v, a: fnp.sum(v, axis=a))(x, 1)


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_length_must_be_a_positive_int(name):
    """``fft(x, n=-1)`` returned the untransformed length (``-1`` means "the input's size" only in the
    n-D functions' ``s``, as NumPy 2); ``n=1.5`` gave length 1. NumPy and JAX raise for both."""
    f = getattr(fnp.fft, name)
    x = fnp.ones(4, dtype=fnp.complex64) if name in ("irfft", "hfft") else fnp.ones(4)
    with pytest.raises(ValueError, match=r"invalid number of FFT data points \(-1\)"):
        f(x, n=-1)
    with pytest.raises(TypeError, match="n must be an int"):
        f(x, n=1.5)
    assert f(x, n=3).shape == getattr(np.fft, name)(np.ones(4), n=3).shape
    assert fnp.fft.fftn(fnp.ones((3, 3)), s=(-1, 2), axes=(0, 1)).shape == (3, 2)   # -1 in s: as the input


# ----------------------------------------------------------------------------- issue 27, item 5: silently wrong


@pytest.mark.parametrize("how", ["attribute", "update"])
def test_unknown_config_name_names_the_nearest_setting(how):
    # The report: fa.config.debug_nan = True (for debug_nans) was accepted and did nothing.
    with pytest.raises(AttributeError) as e:
        if how == "attribute":
            fa.config.debug_nan = True
        else:
            fa.config.update("debug_nan", True)
    _assert_names(str(e.value), "'debug_nan'", "did you mean 'debug_nans'")
    assert "debug_nan" not in vars(fa.config)
    with pytest.raises(AttributeError, match="did you mean 'fallback'"):
        fa.config.update("fallbak", "error")


def test_every_setting_is_accepted_by_name():
    # The check is derived from what Config defines: each listed setting can be set back to its own value.
    names = fa.config.settings()
    assert {"debug_nans", "fallback", "jit_cache_size"} <= set(names)
    for name in names:
        old = getattr(fa.config, name)
        fa.config.update(name, old)
        setattr(fa.config, name, old)
        assert getattr(fa.config, name) == old
    with pytest.raises(TypeError, match="str"):
        fa.config.update(3, True)


def _logits():
    return fnp.asarray(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))


def test_cross_entropy_label_out_of_range_raises_eagerly(device):
    # The report: a label >= the number of classes gave another class's loss.
    from fnarray.nn import losses
    lg = fa.device_put(_logits(), device)
    for bad in ([0, 4, 1], [0, -1, 1]):
        with pytest.raises(ValueError) as e:
            losses.cross_entropy(lg, fa.device_put(fnp.asarray(np.array(bad, np.int32)), device))
        _assert_names(str(e.value), "[0, 4)", "index (1,)", "mode='clip'")
    with pytest.raises(ValueError, match="mode must be one of"):
        losses.cross_entropy(lg, fnp.asarray(np.array([0, 1, 2], np.int32)), mode="wrap")


def test_cross_entropy_label_out_of_range_under_jit_follows_mode(device):
    from fnarray.nn import losses
    lg = fa.device_put(_logits(), device)
    labels = fa.device_put(fnp.asarray(np.array([0, 4, 1], np.int32)), device)
    ref = -np.asarray(fa.nn.log_softmax(_logits()))  # per-class losses, the oracle of each row
    got = np.asarray(fa.jit(lambda a, y: losses.cross_entropy(a, y, reduction="none"))(lg, labels))
    assert np.isnan(got[1]) and np.allclose(got[[0, 2]], ref[[0, 2], [0, 1]], rtol=1e-5)
    got = np.asarray(fa.jit(lambda a, y: losses.cross_entropy(a, y, reduction="none", mode="clip"))(lg, labels))
    np.testing.assert_allclose(got, ref[[0, 1, 2], [0, 3, 1]], rtol=1e-5)
    eager = np.asarray(losses.cross_entropy(lg, labels, reduction="none", mode="clip"))
    np.testing.assert_allclose(eager, got, rtol=1e-6)


@pytest.mark.parametrize("name", ["x.npz", "x.npy", "x.pt", "x.pkl", "x.SAFETENSORS.bak"])
def test_save_refuses_another_formats_extension(tmp_path, name):
    # The report: fa.save("x.npz", tree) wrote safetensors under an .npz name (np.load could not read it).
    path = tmp_path / name
    with pytest.raises(ValueError) as e:
        fa.save(path, {"w": np.ones(2, np.float32)})
    _assert_names(str(e.value), "safetensors", os.path.splitext(name)[1], ".safetensors'")
    assert not path.exists() and not list(tmp_path.iterdir())
    fa.save(tmp_path / "x.safetensors", {"w": np.ones(2, np.float32)})
    fa.save(tmp_path / "x", {"w": np.ones(2, np.float32)})  # no extension: safetensors, as before
    np.testing.assert_array_equal(np.asarray(fa.load(tmp_path / "x")["w"]), np.ones(2))


# ----------------------------------------------------------------------------- issue 27, item 8: unclear errors


def _foreign_array(lib):
    """A float32 ``[0, 1, 2]`` of ``lib``; skips without torch (the optional ``interop`` extra, as the README says)."""
    if lib == "torch":
        torch = pytest.importorskip("torch", reason="torch is not installed (optional: pip install -e '.[interop]')")
        return torch.arange(3.0)
    import jax.numpy as jnp
    return jnp.arange(3.0, dtype=jnp.float32)


@pytest.mark.parametrize("lib", ["jax", "torch"])
def test_jit_takes_another_librarys_array(device, lib):
    # The report: a jax.Array or torch.Tensor passed to a jitted function was told to "mark it static"; jit
    # now takes it as jax.numpy takes NumPy arrays (through __array__, or DLPack).
    x = _foreign_array(lib)
    f = fa.jit(lambda a, b: a * 2 + b, device=device)
    got = f(x, fnp.ones(3))
    assert got.device == device
    np.testing.assert_array_equal(np.asarray(got), np.arange(3.0) * 2 + 1)
    c = fa.jit(lambda a: a + 1).lower(np.zeros(3, np.float32)).compile()
    np.testing.assert_array_equal(np.asarray(c(x)), np.arange(3.0) + 1)


@pytest.mark.parametrize("lib", ["jax", "torch"])
def test_mixed_operator_names_the_libraries(lib):
    x = _foreign_array(lib)
    for a, b in ((fnp.ones(3), x), (x, fnp.ones(3))):
        with pytest.raises(TypeError) as e:
            a + b
        _assert_names(str(e.value), "fnarray array", f"a {lib} array", "fnarray.numpy.asarray")
    assert (fnp.ones(2) == None) is False  # noqa: E711 (no array of any library: Python's default still applies)


def test_compiled_called_with_another_structure_shows_the_difference():
    c = fa.jit(lambda t: t[0]).lower((fnp.ones(2), fnp.ones(2))).compile()
    with pytest.raises(TypeError) as e:
        c([fnp.ones(2), fnp.ones(2)])
    _assert_names(str(e.value), "structure differs", "(*, *)", "[*, *]")
    with pytest.raises(TypeError) as e:
        c((fnp.ones(3), fnp.ones(2)))
    _assert_names(str(e.value), "leaf 0", "f32[2]", "f32[3]")
    with pytest.raises(TypeError) as e:
        c((fnp.ones(2), 1.0))
    _assert_names(str(e.value), "leaf 1", "weakly typed")


def test_grad_of_a_tuple_output_mentions_has_aux():
    with pytest.raises(TypeError) as e:
        fa.grad(lambda x: (fnp.sum(x), x))(fnp.ones(2))
    _assert_names(str(e.value), "has_aux=True", "tuple")
    g, aux = fa.grad(lambda x: (fnp.sum(x), x), has_aux=True)(fnp.ones(2))
    np.testing.assert_array_equal(np.asarray(g), np.ones(2))


def test_non_arrays_are_named_fully_with_what_to_do():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(TypeError, match=r"sin requires arrays or scalars, got jaxlib\S*ArrayImpl; .*asarray\(x\)"):
        fnp.sin(jnp.ones(2))
    with pytest.raises(TypeError, match="the function being differentiated returned str 'a' as its output"):
        fa.grad(lambda x: "a")(1.0)


def test_misspelled_default_device_is_named_with_the_nearest(monkeypatch):
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, FNARRAY_DEVICE="nmupy:0", PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-c", "import fnarray.numpy as fnp; fnp.ones(2)"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    _assert_names(r.stderr, "FNARRAY_DEVICE", "'nmupy:0'", "did you mean 'numpy:0'")
    with pytest.raises(ValueError, match="did you mean 'numpy:0'"):
        fa.get_device("nunpy:0")


def test_a_folder_named_fnarray_shadowing_the_package_is_named(tmp_path):
    # A folder 'fnarray' without __init__.py in the working directory becomes the namespace package 'fnarray'
    # while the installed package's subpackages still load (an editable install's finder supplies them):
    # fnarray/__init__.py never runs. Simulated here with that namespace module.
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "fnarray").mkdir()
    code = ("import sys, types\n"
            f"m = types.ModuleType('fnarray'); m.__path__ = [{str(tmp_path / 'fnarray')!r}, "
            f"{os.path.join(root, 'fnarray')!r}]; sys.modules['fnarray'] = m\n"
            "import fnarray.numpy as fnp\nfnp.ones(2)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    _assert_names(r.stderr, str(tmp_path / "fnarray"), "shadows the package", "rename it")


# ----------------------------------------------------------------- new-user probe, thirteenth session (newuser5)
# Pallas, quantization, RoPE/attention and ``python -m fnarray tune`` inputs that were accepted silently, gave a
# wrong result on opencl/webgpu, or ended in an unclear error.

def _pallas():
    import fnarray.experimental.pallas as pl
    return pl


def _rows_kernel(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = x - fnp.max(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("params, names", [
    ({"workgroup": 2.5}, ["workgroup", "positive int", "2.5"]),
    ({"workgroup": "64"}, ["workgroup", "positive int", "'64'"]),
    ({"workgroup": True}, ["workgroup", "positive int", "True"]),
    ({"tile": 0}, ["tile", "positive int", "got 0", "16 or 64"]),      # was a ZeroDivisionError on opencl
    ({"tile": -1}, ["tile", "positive int"]),
    ({"stage": "False"}, ["stage", "a bool", "'False'"]),              # was bool("False"): staged
    ({"rows": 1}, ["rows", "a bool"]),
    ({"wokgroup": 64}, ["'wokgroup'", "does not read", "workgroup", "spelling"]),
    ("workgroup=64", ["must be a dict", "'workgroup=64'"]),
])
def test_pallas_compiler_params_are_checked(params, names):
    """Every ``compiler_params`` key fnarray reads is checked when ``pallas_call`` is made, and an unknown key
    raises (each of these ran silently before, some as another value)."""
    pl = _pallas()
    with pytest.raises((ValueError, TypeError)) as e:
        pl.pallas_call(_rows_kernel, out_shape=pl.ShapeDtypeStruct((16, 4), fnp.float32), compiler_params=params)
    _assert_names(str(e.value), "compiler_params", *names)


def test_pallas_jax_backend_compiler_params_are_accepted():
    """JAX's per-backend entries (``{"triton": {...}}``) and ``CompilerParams`` objects are accepted, unused."""
    pl = _pallas()
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    for params in ({"triton": {"num_warps": 4}}, {"mosaic": {"dimension_semantics": ("parallel",)}}, object(),
                   {"workgroup": np.int64(16), "rows": np.bool_(False)}):
        f = pl.pallas_call(_rows_kernel, out_shape=pl.ShapeDtypeStruct((16, 4), fnp.float32),
                           compiler_params=params)
        np.testing.assert_array_equal(np.asarray(f(x)), x - x.max(-1, keepdims=True))


def test_pallas_grid_with_a_zero_axis_runs_no_instance(device):
    """A grid with a zero-size axis runs no program instance: outputs are zeros (aliased ones their input) on
    every backend, as the interpreter (opencl and webgpu launched one work-group and returned ``x + 1``)."""
    pl = _pallas()

    def kernel(x_ref, y_ref, o_ref, p_ref):
        o_ref[...] = x_ref[...] + 1
        p_ref[...] = y_ref[...] * 2

    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    spec = pl.BlockSpec((4, 8), lambda i, j: (i, 0))
    for grid in ((0, 1), (2, 0)):
        f = pl.pallas_call(kernel, out_shape=[pl.ShapeDtypeStruct((8, 8), fnp.float32)] * 2, grid=grid,
                           in_specs=[spec, spec], out_specs=[spec, spec], input_output_aliases={1: 1})
        o, p = fa.jit(f, device=device)(x, x + 5)
        np.testing.assert_array_equal(np.asarray(o), np.zeros((8, 8), np.float32))
        np.testing.assert_array_equal(np.asarray(p), x + 5)


@pytest.mark.parametrize("body, names", [
    (lambda x_ref, o_ref: o_ref.__setitem__(pl_ds(0, 8), x_ref[pl_ds(4, 8)]), ["pl.load", "[4:12]", "mask="]),
    (lambda x_ref, o_ref: o_ref.__setitem__(pl_ds(4, 8), x_ref[...]), ["pl.store", "[4:12]", "mask="]),
    (lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[:, pl_ds(-1, 8)]), ["pl.load", "[-1:7] on axis 1"]),
])
def test_pallas_static_ds_outside_the_ref_raises_on_every_backend(device, body, names):
    """An unmasked ``pl.ds`` with a static start that leaves the ref raises ``IndexError`` when the kernel is
    traced, on every backend (opencl and webgpu read undefined memory or wrote the wrong rows; the interpreter
    raised only when it ran). With a mask the same load is allowed."""
    pl = _pallas()
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    with pytest.raises(IndexError) as e:
        fa.jit(pl.pallas_call(body, out_shape=pl.ShapeDtypeStruct((8, 8), fnp.float32)), device=device)(x)
    _assert_names(str(e.value), "outside the ref", *names)
    if device.backend == "jax":
        return   # JAX's Pallas refuses a static slice past the ref even with a mask ("Out of bound slice")

    def masked(x_ref, o_ref):
        o_ref[pl.ds(0, 8)] = pl.load(x_ref, pl.ds(4, 8), mask=(fnp.arange(8) < 4)[:, None], other=-1.0)
    got = fa.jit(pl.pallas_call(masked, out_shape=pl.ShapeDtypeStruct((8, 8), fnp.float32)), device=device)(x)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([x[4:], np.full((4, 8), -1, np.float32)]))



def _before_load(x_ref, o_ref):
    o_ref[...] = x_ref[_pallas().program_id(0) - 1]


def _before_scalar(x_ref, o_ref):
    o_ref[0] = x_ref[_pallas().program_id(0) - 1, 0] + fnp.zeros(4)


def _before_store(x_ref, o_ref):
    o_ref[...] = fnp.zeros((4,))
    o_ref[_pallas().program_id(0) - 3] = x_ref[0, 0] + fnp.zeros(4)


@pytest.mark.parametrize("body, names", [(_before_load, ["a load of", "ref[-1, 0:4]", "mask="]),
                                         (_before_scalar, ["a load of", "ref[-1, 0]"]),
                                         (_before_store, ["a store to", "ref[-3", "mask="])])
def test_pallas_traced_index_folding_outside_the_ref_raises(device, body, names):
    """A traced ref index that folds to a constant outside the ref (``program_id(0) - 1`` in a grid of 1) raises
    ``IndexError`` on every backend, as the interpreter does (webgpu's WGSL compiler refused the kernel as "a bug
    in fnarray", opencl read undefined memory or wrote before the buffer); JAX's own Pallas wraps it. The same
    index under ``pl.when(program_id(0) > 0)``, which never runs, is allowed."""
    pl = _pallas()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    shape = (4,) if body is _before_load else (2, 4)
    f = pl.pallas_call(body, out_shape=pl.ShapeDtypeStruct(shape, fnp.float32), grid=(1,))
    if device.backend != "jax":
        with pytest.raises(IndexError) as e:
            np.asarray(fa.jit(f, device=device)(x))
        _assert_names(str(e.value), "outside the ref", *names)

    def guarded(x_ref, o_ref):
        o_ref[...] = x_ref[0] * 2

        @pl.when(pl.program_id(0) > 0)
        def _():
            o_ref[...] = x_ref[pl.program_id(0) - 1]
            o_ref[pl.program_id(0) - 1] = x_ref[1, 0]
    got = fa.jit(pl.pallas_call(guarded, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32), grid=(1,)),
                 device=device)(x)
    np.testing.assert_array_equal(np.asarray(got), x[0] * 2)


def test_kvcache_built_directly_checks_its_fields(device):
    """``KVCache(keys, values, offset)`` built directly checks what ``create``/``update`` did (it took mismatched
    shapes, a rank-3 cache and an offset of -3 or past the capacity without a word); unflattening does not."""
    k = fa.device_put(fnp.zeros((1, 2, 8, 4)), device)
    cases = [((k, fa.device_put(fnp.zeros((1, 2, 8, 3)), device), 0), ShapeError, ["(1, 2, 8, 4)", "(1, 2, 8, 3)"]),
             ((k[0], k[0], 0), ShapeError, ["keys", "(B, K, capacity, H)", "(2, 8, 4)", "KVCache.create"]),
             ((None, k, 0), ShapeError, ["keys", "NoneType"]),
             ((k, k, -3), ValueError, ["offset", "0..8", "-3"]),
             ((k, k, fa.device_put(fnp.array(9, dtype="int32"), device)), ValueError, ["0..8", "got 9"]),
             ((k, k, 1.5), TypeError, ["offset", "integer scalar", "1.5"]),
             ((k, k, fnp.array([1])), TypeError, ["offset", "integer scalar"]),
             ((k, k, True), TypeError, ["offset", "True"])]
    for args, kind, names in cases:
        with pytest.raises(kind) as e:
            fa.nn.KVCache(*args)
        _assert_names(str(e.value), "KVCache", *names)
    c = fa.nn.KVCache(k, k, fa.device_put(fnp.array(8, dtype="int32"), device))
    assert c.capacity == 8 and int(c.offset) == 8
    c = fa.jit(lambda c, x: c.update(x, x))(fa.nn.KVCache(k, k, 3), fnp.ones((1, 2, 2, 4)))
    assert int(c.offset) == 5 and fa.tree_util.tree_map(lambda a: None, c).keys is None

def pl_ds(start, size):
    return _pallas().ds(start, size)


def test_pallas_program_id_axis_and_aliases_types():
    """``pl.program_id(0.0)`` named tuple indexing; a list of alias pairs was an ``AttributeError`` and
    ``{0.5: 0}`` silently input 0."""
    pl = _pallas()
    x = np.ones((8, 8), np.float32)
    bad_axis = pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + pl.program_id(0.0)),
                              out_shape=pl.ShapeDtypeStruct((8, 8), fnp.float32), grid=(1,))
    with pytest.raises(TypeError) as e:
        bad_axis(x)
    _assert_names(str(e.value), "pl.program_id", "static int", "0.0", "(1,)")
    for aliases, names in (([(0, 0)], ["must be a dict", "[(0, 0)]"]), ({0.5: 0}, ["ints", "0.5"])):
        with pytest.raises(TypeError) as e:
            pl.pallas_call(lambda x_ref, o_ref: None, out_shape=pl.ShapeDtypeStruct((8, 8), fnp.float32),
                           input_output_aliases=aliases)
        _assert_names(str(e.value), "input_output_aliases", *names)


@pytest.mark.parametrize("kwargs, name", [({"bits": 4.0}, "bits"), ({"bits": True}, "bits"),
                                          ({"group_size": 64.0}, "group_size")])
def test_quantize_format_must_be_ints(kwargs, name):
    """``bits=True`` quantized to 1 bit and ``4.0`` passed as 4 (``4.0 in (1, 2, ...)``); MLX takes ints."""
    w = np.ones((4, 64), np.float32)
    for f in (lambda: fa.quantize(w, **kwargs), lambda: fa.nn.Linear(64, 4, key=fa.random.key(0)).to_quantized(
            **kwargs)):
        with pytest.raises(TypeError) as e:
            f()
        _assert_names(str(e.value), f"{name} must be an int", repr(kwargs[name]))


def test_dequantize_to_an_integer_dtype_raises():
    parts = fa.quantize(np.ones((4, 64), np.float32))
    with pytest.raises(DTypeError, match=r"\[dequantize\] dtype must be a float dtype, got int32"):
        fa.dequantize(*parts, dtype=fnp.int32)
    assert fa.dequantize(*parts, dtype=fnp.float16).dtype == fnp.float16


def test_nn_quantize_class_predicate_answers_are_checked():
    """As MLX: a predicate answers a bool or a dict of ``group_size``/``bits``/``mode`` (``"yes"`` quantized
    everything, a misspelt dict key was ignored)."""
    model = fa.nn.Sequential([fa.nn.Linear(64, 8, key=fa.random.key(0))])
    with pytest.raises(ValueError) as e:
        fa.nn.quantize(model, class_predicate=lambda p, m: "yes")
    _assert_names(str(e.value), "bool or a dict", "'yes'", "Sequential")
    with pytest.raises(ValueError) as e:
        fa.nn.quantize(model, class_predicate=lambda p, m: isinstance(m, fa.nn.Linear) and {"bitz": 8})
    _assert_names(str(e.value), "'layers.0'", "group_size, bits, mode", "not bitz")
    q = fa.nn.quantize(model, class_predicate=lambda p, m: isinstance(m, fa.nn.Linear) and {"bits": 8})
    assert isinstance(q.layers[0], fa.nn.QuantizedLinear) and q.layers[0].bits == 8
    assert fa.nn.quantize(model, class_predicate=lambda p, m: 0) is model   # a false answer skips, as MLX


@pytest.mark.parametrize("kwargs, names", [({"dims": 8.0}, ["dims", "8.0"]), ({"dims": 8, "base": "1e4"},
                                           ["base", "'1e4'"]), ({"dims": 8, "scale": "1"}, ["scale", "'1'"])])
def test_rope_arguments_are_numbers(kwargs, names):
    """``RoPE(8.0)`` raised a slicing ``IndexError`` at the call, ``base="1e4"`` a comparison ``TypeError``."""
    with pytest.raises(ValueError) as e:
        fa.nn.RoPE(**kwargs)
    _assert_names(str(e.value), "RoPE", *names)


def test_attention_scale_must_be_a_number():
    q = np.ones((1, 3, 2, 4), np.float32)
    with pytest.raises(TypeError) as e:
        fa.nn.dot_product_attention(q, q, q, scale="0.5")   # float("0.5") took it
    _assert_names(str(e.value), "scale must be a real number", "'0.5'")


def _tune(tmp_path, *args):
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    (tmp_path / "tmod5.py").write_text("import fnarray.numpy as fnp\n\nnot_a_function = 3\n\n"
                                       "def f(x):\n    return fnp.tanh(x)\n")
    env = dict(os.environ, PYTHONPATH=root)
    return subprocess.run([sys.executable, "-m", "fnarray", "tune", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_tune_command_usage_errors(tmp_path):
    """``tune mod:not_a_function`` exited with status 3 and no message (the int was taken for an exit status);
    an unwritable ``--cache-dir`` printed "kept in ..."; a huge input spec ended in NumPy's MemoryError."""
    r = _tune(tmp_path, "tmod5:not_a_function", "f32[4]")
    assert r.returncode == 2
    _assert_names(r.stderr, "tmod5:not_a_function is not a function", "int")
    (tmp_path / "afile").write_text("")
    r = _tune(tmp_path, "tmod5:f", "f32[4]", "--device", "numpy:0", "--cache-dir", str(tmp_path / "afile"))
    assert r.returncode == 2 and "kept in" not in r.stdout
    _assert_names(r.stderr, "--cache-dir", "afile", "cannot create")
    r = _tune(tmp_path, "tmod5:f", "float32[100000,100000]", "--device", "numpy:0")
    assert r.returncode == 2 and "MemoryError" not in r.stderr
    _assert_names(r.stderr, "37.3 GiB", "smaller shapes")


def test_pallas_grid_beyond_int32_program_ids_and_bad_scratch_shapes():
    """A grid of 2**31 instances would wrap ``pl.program_id`` (an int32; the interpreter would run for hours);
    ``pl.VMEM((8.7, 8))`` made 8 rows and ``pl.VMEM((-1, 8))`` said "length should not be negative"."""
    pl = _pallas()
    with pytest.raises(ValueError) as e:
        pl.pallas_call(_rows_kernel, out_shape=pl.ShapeDtypeStruct((16, 4), fnp.float32), grid=(2**16, 2**15))
    _assert_names(str(e.value), "(65536, 32768)", "2147483648 program instances", "int32", "larger blocks")
    for shape in ((8.7, 8), (-1, 8), (True, 8)):
        with pytest.raises(ShapeError) as e:
            pl.VMEM(shape, fnp.float32)
        _assert_names(str(e.value), "pl.Local", "non-negative ints", repr(shape))
    assert pl.VMEM(8, fnp.float32).shape == (8,) and pl.VMEM((np.int64(2), 3), "float32").shape == (2, 3)


# ---- new-user probe, twenty-first session (branch s21-newuser)

def test_transforms_name_a_non_callable_and_argnums_of_the_wrong_type():
    """``jacfwd(None)``, ``vjp(5, x)``, ``checkpoint(3)``... said "'int' object is not callable" from deep inside;
    ``grad(argnums=1.0)`` "'float' object is not iterable"; ``jit(static_argnums="b")`` "'<=' not supported"."""
    x = fnp.ones(2)
    for make in (lambda: fa.jacfwd(None)(x), lambda: fa.jacrev(None)(x), lambda: fa.hessian([])(x),
                 lambda: fa.linearize(3, x), lambda: fa.vjp(5, x), lambda: fa.jvp(5, (x,), (x,)),
                 lambda: fa.checkpoint(3)(x), lambda: fa.lax.map(3, x), lambda: fa.custom_vjp(3),
                 lambda: fa.custom_jvp(3), lambda: fa.custom_vjp(fnp.sin).defvjp(3, 4),
                 lambda: fa.lax.cond(True, fnp.sin, 3, x), lambda: fa.lax.while_loop(fnp.sin, 3, x),
                 lambda: fa.lax.fori_loop(0, 2, 3, x), lambda: fa.lax.scan(3, x, x),
                 lambda: fa.checkpoint(fnp.sin, policy=3), lambda: fa.tree_util.tree_map([], x),
                 lambda: fa.debug.callback(3), lambda: fa.lax.reduce(x, 0.0, 3, (0,))):
        with pytest.raises(TypeError, match="needs a callable as .*, got (NoneType None|int [345]|list)"):
            make()
    with pytest.raises(TypeError, match=r"tree_map needs a callable as f \(a function of the leaves\), got list "
                                        r"\[\]; call it as tree_map\(f, tree, \*rest\)"):
        fa.tree_util.tree_map([], x)
    with pytest.raises(TypeError, match="custom_jvp: nondiff_argnums must be an int or a sequence of ints"):
        fa.custom_jvp(fnp.sin, nondiff_argnums="n")
    f = fa.custom_vjp(fnp.sin, nondiff_argnums=(2,))
    f.defvjp(lambda v: (fnp.sin(v), v), lambda v, g: (g * fnp.cos(v),))
    with pytest.raises(ValueError, match="custom_vjp function sin: nondiff_argnums holds 2, but the call has 1"):
        f(x)
    with pytest.raises(TypeError) as e:
        fa.grad(lambda a, b: a * b, argnums=1.0)
    _assert_names(str(e.value), "grad: argnums must be an int or a sequence of ints", "1.0")
    with pytest.raises(TypeError) as e:
        fa.jit(lambda a, b: a * b, static_argnums="b")
    _assert_names(str(e.value), "static_argnums", "'b'", "static_argnames=")
    with pytest.raises(TypeError, match="donate_argnums"):
        fa.jit(lambda a: a, donate_argnums=0.5)
    g = fa.grad(lambda a, b: a * b, argnums=np.int64(1))(2.0, 3.0)   # a NumPy int names one argument, as in JAX
    assert not isinstance(g, tuple) and float(g) == 2.0


def test_vjp_cotangent_of_another_dtype_is_named():
    """An int32 cotangent for a float32 output raised "mul needs operands of one dtype" from a backward rule."""
    y, pull = fa.vjp(fnp.sin, fnp.arange(3.0))
    with pytest.raises(DTypeError) as e:
        pull(fnp.arange(3))
    _assert_names(str(e.value), "vjp: cotangent 0 has dtype int32", "float32", ".astype('float32')")
    _, pull_s = fa.vjp(lambda v: fnp.sum(fnp.sin(v)), fnp.arange(3.0, dtype=fnp.float16))
    np.testing.assert_allclose(np.asarray(pull_s(2.0)[0], np.float32), 2 * np.cos(np.arange(3.0)), rtol=2e-3)


def test_jit_python_int_argument_beyond_int32_is_named():
    """A Python int argument is a weak int32: 2**40 gave NumPy's "out of bounds for int32", 2**70 "too large to
    convert to C long", once the call reached the device."""
    f = fa.jit(lambda a: a + 1)
    assert int(f(5)) == 6
    for big in (2**40, -2**31 - 1, 2**70):
        with pytest.raises(OverflowError) as e:
            f(big)
        _assert_names(str(e.value), f"the Python int {big}", "does not fit int32", "static_argnums")
    assert int(f(2**31 - 1)) == -2**31   # in range: wraps as JAX's int32
    with enable_x64():   # a weak int64 there (as JAX): 2**70 gave "too large to convert to C long"
        assert int(f(2**40)) == 2**40 + 1
        with pytest.raises(OverflowError) as e:
            f(2**70)
        _assert_names(str(e.value), f"the Python int {2**70}", "does not fit int64", "static_argnums")


def test_static_int_indices_beyond_int64_clamp_as_any_out_of_bounds_index():
    """``x[2**70]`` raised NumPy's "Python int too large to convert to C long" where ``x[2**40]`` clamps."""
    x = fnp.arange(3.0)
    assert float(x[2**70]) == 2.0 and float(x[-2**70]) == 0.0
    np.testing.assert_array_equal(np.asarray(x.at[2**70].set(9.0)), [0.0, 1.0, 2.0])
    assert np.isnan(float(x.at[-2**70].get(mode="fill")))


def test_custom_vjp_fwd_must_return_a_pair():
    """A fwd returning only the output: an array of two rows unpacked into a wrong output and residual, and
    ``vjp`` returned the first row as the function's output."""
    f = fa.custom_vjp(fnp.sin)
    f.defvjp(lambda v: fnp.sin(v), lambda r, g: (g * fnp.cos(r),))
    for run in (lambda: fa.vjp(f, fnp.asarray([0.5, 1.0])), lambda: fa.grad(lambda v: fnp.sum(f(v)))(fnp.ones(3))):
        with pytest.raises(TypeError) as e:
            run()
        _assert_names(str(e.value), "custom_vjp fwd", "must return a pair (output, residuals)", "an array f32[")


def test_lax_static_parameters_of_the_wrong_kind():
    """``fori_loop(0, 2**40, ...)`` ran a scan of 2**40 steps (a hang; JAX raises OverflowError);
    ``integer_pow(x, 2.5)`` squared; ``dot_general`` with axis 5 of a matrix said "tuple index out of range";
    ``argmax(index_dtype=float32)`` returned float positions."""
    for lo, hi in ((0, 2**40), (-2**40, 0)):
        with pytest.raises(OverflowError) as e:
            fa.lax.fori_loop(lo, hi, lambda i, c: c + 1, 0)
        _assert_names(str(e.value), f"fori_loop bound {lo or hi}", "int32", "enable_x64")
    with pytest.raises(TypeError) as e:
        fa.lax.integer_pow(fnp.arange(3.0), 2.5)
    _assert_names(str(e.value), "integer_pow", "float 2.5", "power")
    m = fnp.ones((2, 3))
    with pytest.raises(ShapeError) as e:
        fa.lax.dot_general(m, m, (((5,), (1,)), ((), ())))
    _assert_names(str(e.value), "dot_general", "(5,)", "[0, 2)")
    with pytest.raises(DTypeError, match="index_dtype must be an integer dtype"):
        fa.lax.argmax(fnp.arange(3.0), 0, fnp.float32)


def test_s21_probe_leftovers_on_the_host():
    """``full`` of a float into an integer dtype converts as ``astype`` (JAX's: truncated, saturated, NaN -> 0;
    NumPy raised for NaN, wrapped a float32 NaN to the minimum, and said "Python integer -2 out of bounds" for
    -2.5 into uint8); ``lax.reshape``'s ``dimensions`` transposes first (``jax.lax.reshape``); ``device_put`` of a
    leaked tracer returned it; reverse mode through an integer output names the transform and the dtype."""
    for fill, dtype, want in ((np.inf, fnp.int32, 2**31 - 1), (-2.5, fnp.uint8, 0), (300.0, fnp.uint8, 255),
                              (np.float32(np.nan), fnp.int32, 0), (-7.9, fnp.int8, -7), (-1e30, fnp.int16, -2**15)):
        assert np.asarray(fnp.full_like(np.zeros(2, dtype), fill)).tolist() == [want] * 2, (fill, dtype)
    x = fnp.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(fa.lax.reshape(x, (3, 2), dimensions=(1, 0))),
                                  np.arange(6).reshape(2, 3).T.reshape(3, 2))
    with pytest.raises(TypeError) as e:
        fa.lax.reshape(x, (6,), dimensions=(0, 0))
    _assert_names(str(e.value), "reshape: dimensions must be a permutation", "(0, 1)", "(0, 0)")
    with pytest.raises(TypeError, match=r"eye: shape must be an int or a tuple of ints, got \(2.0, 2.0\)"):
        fnp.eye(2.0)   # (was the identity: NumPy and JAX refuse it)
    with pytest.raises(TypeError, match="arange: bounds and step must be real numbers"):
        fnp.arange(3j)   # (was "must be real number, not complex")
    leaked = []
    fa.jit(lambda a: leaked.append(a) or a)(1.0)
    for put in (fa.device_put, lambda t: fa.device_put({"w": t}, "numpy:0")):
        with pytest.raises(fa.TracerLeakError, match="used after the transformation that made it returned"):
            put(leaked[0])
    jac = fa.jacfwd(lambda a: (fnp.sin(a), (a * 4).astype(fnp.int32)))(fnp.ones(2))
    assert [(j.dtype, j.shape) for j in jac] == [(fnp.float32, (2, 2)), (fnp.int32, (2, 2))]
    assert not np.asarray(jac[1]).any()
    for transform, name in ((fa.hessian, "jacrev"), (lambda f: fa.grad(lambda a: f(a).sum()), "grad")):
        with pytest.raises(DTypeError) as e:
            transform(lambda a: (a * 2).astype(fnp.int32))(fnp.ones(2))
        _assert_names(str(e.value), f"{name} requires real-valued outputs", "int32", "fnarray.vjp")


def test_transformed_functions_may_return_numpy_arrays():
    """As in JAX, a NumPy array a jitted or vmapped function returns is a constant output: jit said "ndarray is
    not an array or a scalar", vmap "broadcast_in_dim got ndarray"."""
    x = fnp.arange(3.0)
    out = fa.jit(lambda a: (a * 2, np.ones(2)))(x)[1]
    assert out.dtype == fnp.float32 and np.array_equal(np.asarray(out), np.ones(2))
    np.testing.assert_array_equal(np.asarray(fa.vmap(lambda a: np.arange(2.0))(x)), np.tile(np.arange(2.0), (3, 1)))
    _, aux = fa.grad(lambda a: (fnp.sum(a), np.zeros(1)), has_aux=True)(x)
    np.testing.assert_array_equal(np.asarray(aux), [0.0])
