"""Regressions found by the twenty-sixth session's audit (branch s26-audit) of what the twenty-fourth and
twenty-fifth sessions added: the kernel backends' eager tapes, webgpu:0's deferred operands, blocked long
reductions, uncommitted arrays on the default device, shapeless jit. Each test compares with NumPy in float64
(or exact integers) on inputs that gave a wrong result, a crash or an unclear error before its fix."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import config_setting, kernel_capabilities, require_backend

KERNEL_BACKENDS = ["opencl", "webgpu"]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_arg_reductions_of_rows_shorter_than_the_work_group(backend):
    """A row of 65-127 elements into few outputs is reduced by a work-group of 128, whose items past the row
    start empty (value 0, position -1): the combining tree took such an item's 0.0 wherever it beat the row's
    extreme, so ``argmin`` of positive values and ``argmax`` of negative ones (log-probabilities) returned -1."""
    dev = require_backend(backend)[0]
    rng = np.random.default_rng(0)
    x = rng.uniform(1.0, 2.0, (2, 100)).astype(np.float32)
    x[1, 40] = x[1, 90] = 0.5                      # a tie: the first position
    z = fa.device_put(x, dev)
    got = fa.jit(lambda v: (fnp.argmin(v, axis=1), fnp.argmax(-v, axis=1), fnp.argmax(v - 2.0, axis=1)))(z)
    for g, want in zip(got, (np.argmin(x, 1), np.argmax(-x, 1), np.argmax(x - 2.0, 1)), strict=True):
        np.testing.assert_array_equal(np.asarray(g), want)


def test_rows_past_the_loop_limit_take_a_work_group_however_many_outputs():
    """A work item per output loops over its whole row: past lavapipe's 65,535 iterations the row's tail was
    dropped, silently (``max`` of f16[1024, 65536] with the maximum in the last column read 0). Reductions into
    1,024 outputs or more kept a work item per output whatever the row's length; now a row whose loops pass the
    device's ``max_loop_iterations`` takes a work-group (here a small limit stands in for lavapipe's)."""
    dev = require_backend("webgpu")[0]
    x = np.random.default_rng(1).standard_normal((1100, 150)).astype(np.float32)
    x[:, -1] = 9.0
    z = fa.device_put(x, dev)
    with kernel_capabilities(dev, max_loop_iterations=100):
        jf = fa.jit(lambda v: fnp.max(v, axis=1))
        (kernel,) = jf.lower(z).kernels()
        got = np.asarray(jf(z))
    assert kernel.global_size[0] == 1100 * kernel.local_size[0], (kernel.global_size, kernel.local_size)
    np.testing.assert_array_equal(got, x.max(axis=1))


def test_like_creations_of_a_committed_array_lie_on_its_device():
    """JAX's ``lax.full_like`` takes ``x``'s sharding outside ``jit``: ``zeros_like(x)`` of an array committed to
    webgpu:0 lies there, committed (an optimiser's moments of parameters on a kernel device lay on numpy:0, and
    every update moved them); on numpy:0 the flag changed at the key's third call (its eager program). A weakly
    typed or uncommitted ``x`` gives the default device, uncommitted, as JAX's."""
    dev = require_backend("webgpu")[0]
    x = fa.device_put(np.arange(3, dtype=np.float32), dev)
    makers = [fnp.zeros_like, fnp.ones_like, lambda v: fnp.full_like(v, 2.0), fnp.empty_like,
              lambda v: fnp.zeros_like(v, dtype=fnp.int32), lambda v: fa.lax.full_like(v, 3.0)]
    for make in makers:
        got = [make(x) for _ in range(3)]
        assert [(g.device, g.committed) for g in got] == [(dev, True)] * 3
    want = [float(v) for v in (0, 1, 2, 0, 0, 3)]
    assert [float(make(x)[0]) for make in makers] == want
    on_numpy = fa.device_put(np.ones(3, np.float32), "numpy:0")
    assert [fnp.zeros_like(on_numpy).committed for _ in range(4)] == [True] * 4
    assert not any(fnp.zeros_like(v).committed for v in (fnp.ones(3), fa.device_put(fnp.asarray(2.0), dev)))


def test_jacobians_of_uncommitted_arrays_run_on_the_default_device():
    """``jacfwd``/``jacrev``/``hessian`` entered a ``default_device`` scope of their arguments' device wherever
    those lay: inside ``with default_device(mlx)`` they ran numpy:0 arrays on numpy:0, and outside an uncommitted
    mlx:0 array's on mlx:0 (its backend's own transforms, staged or not). JAX runs uncommitted arrays on the default device;
    committed ones keep theirs. Values against the closed forms in float64."""
    mlx = require_backend("mlx")[0]
    numpy0 = fa.devices("numpy")[0]

    def f(v):
        return fnp.sin(v) * v[::-1]
    x = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    v, r = x.astype(np.float64), np.eye(3)[::-1]     # f_i = sin(v_i) v_(2-i): r is the reversal
    jac = np.diag(np.cos(v) * v[::-1]) + np.sin(v)[:, None] * r
    hess = np.diag(-np.sin(v) * v[::-1]) + np.cos(v)[:, None] * r + (np.cos(v)[:, None] * r).T
    want = {"jacfwd": jac, "hessian": hess}

    def run(v):
        return {"jacfwd": fa.jacfwd(f)(v), "hessian": fa.hessian(lambda u: f(u).sum())(v)}
    on_numpy = fa.device_put(x)              # uncommitted, on numpy:0 (the default outside the block)
    with fa.default_device(mlx):
        inside = run(on_numpy)
        on_mlx = fa.device_put(x)            # uncommitted, on mlx:0
    outside = run(on_mlx)
    committed = run(fa.device_put(x, mlx))
    with config_setting("stage_eager_transforms", True):   # mlx:0's staged_jacobian took it over too
        staged = run(on_mlx)
    for name, w in want.items():
        for got, dev in ((inside[name], mlx), (outside[name], numpy0), (committed[name], mlx), (staged[name], numpy0)):
            assert got.device == dev, (name, got.device, dev)
            np.testing.assert_allclose(np.asarray(got), np.asarray(w), rtol=1e-5, atol=1e-6, err_msg=name)


def test_take_of_an_index_past_int64_names_it():
    """``take(x, 10**20)`` said "indices must be integers, got object" (NumPy's array of a Python int past int64);
    JAX raises ``OverflowError``: now so does fnarray, naming the index."""
    x = fnp.arange(6.0)
    for index in (10**20, [1, -(10**19) - 1]):
        with pytest.raises(OverflowError, match="does not fit in int64"):
            fnp.take(x, index, mode="clip")
    np.testing.assert_array_equal(np.asarray(fnp.take(x, [5, -1], mode="clip")), [5.0, 0.0])


def test_round_to_more_places_than_the_dtype_holds_is_the_identity():
    """``round(x, 10**6)`` raised ``OverflowError`` from ``10.0 ** decimals``; JAX returns ``x`` wherever
    ``10**decimals`` overflows the dtype (float32 from 39 places), and rounds as before below that."""
    x = np.array([1.5, 2.25, -3.7, np.inf, np.nan], np.float32)
    for decimals in (10**6, 400, 39):
        np.testing.assert_array_equal(np.asarray(fnp.round(fnp.asarray(x), decimals)), x)
        np.testing.assert_array_equal(np.asarray(fa.jit(lambda v, d=decimals: fnp.round(v, d))(x)), x)
    np.testing.assert_array_equal(np.asarray(fnp.round(fnp.asarray(x), 1)), np.round(x, 1))
