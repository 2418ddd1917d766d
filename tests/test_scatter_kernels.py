"""Scatter kernels whose index columns are iotas of the update batch (``kernels/groups/scatter.py``).

``take_along_axis`` and ``x[arange(n)]`` gather with the batch coordinates concatenated beside the data's
index; their transposes scatter with the same columns. The scatter kernel reads those columns off the program
and walks only the updates that can land on an output element (one per element for a cross-entropy
gradient, instead of every update of the batch): the schedule is checked without a device, the values
against NumPy float64 on every device.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import schedule
from fnarray.lowering.kernels.groups.scatter import iota_dim
from fnarray.lowering.kernels.ir import For

CAPS = Capabilities(dtypes=frozenset(dtypes.ALL_DTYPES), max_workgroup_size=256, local_memory=True,
                    tiling_pays=True, control_flow="host")


def _scatter_loops(f, *args, **opts):
    """The trip counts of the update walks of ``f``'s scatter kernels (their outermost ``For``); ``opts``: the
    scheduler's options (``scatter_columns``)."""
    prog = fa.make_ir(f)(*args)
    trips = []
    for launch in schedule(prog, CAPS, workgroup=64, **opts).launches:
        if launch.kind != "scatter":
            continue
        loops = [s for s in _statements(launch.kernel.body) if isinstance(s, For)]
        trips.append(int(loops[0].stop.value))
    return trips


def _statements(body):
    for s in body:
        yield s
        for field in ("body", "then", "orelse"):
            inner = getattr(s, field, None)
            if isinstance(inner, tuple):
                yield from _statements(inner)


def _xent(logits, labels):
    logp = logits - fnp.max(logits, axis=-1, keepdims=True)
    return -fnp.sum(fnp.take_along_axis(logp, labels[..., None], axis=-1))


def test_take_along_axis_gradient_walks_one_update_per_element():
    logits = np.zeros((4, 6, 9), np.float32)
    labels = np.zeros((4, 6), np.int32)
    assert _scatter_loops(fa.grad(_xent), logits, labels) == [1]   # was 24: every (batch, position)


def test_arange_rows_gradient_pins_the_row():
    def f(w):
        return fnp.sum(w[fa.lax.iota(np.int32, 5)] ** 2)
    assert _scatter_loops(fa.grad(f), np.zeros((8, 3), np.float32)) == [1]


def test_data_indices_still_walk_every_update():
    def f(w, i):
        return fnp.sum(w[i] ** 2)
    assert _scatter_loops(fa.grad(f), np.zeros((8, 3), np.float32), np.zeros(7, np.int32)) == [7]


def _embedding_grad(t, i):
    return fa.grad(lambda t: fnp.sum(fnp.tanh(t[i])))(t)


def _scatter_plan(f, *args, **opts):
    """Per scatter kernel of ``f``: its work items and the trip counts of all its loops."""
    prog = fa.make_ir(f)(*args)
    return [(math.prod(launch.global_size), [int(s.stop.value) for s in _statements(launch.kernel.body)
                                             if isinstance(s, For)])
            for launch in schedule(prog, CAPS, workgroup=64, **opts).launches if launch.kind == "scatter"]


def test_column_plan_counts_the_pinned_dimensions():
    """With ``scatter_columns`` (CPU OpenCL and webgpu on a CPU adapter) the column kernel runs where it is less
    work than the element walk, which skips the pinned batch dimensions: an embedding gradient copies and walks
    its 512 rows once per column of the table (not once per element); a cross-entropy gradient keeps its
    one-update element walk; a batch of 4 embeddings (``vmap``: the batch column pinned, the token column data)
    walks all 800 rows per column against 200 per element of 200x more work items."""
    table, rows = np.zeros((300, 64), np.float32), np.zeros((16, 32), np.int32)
    assert _scatter_plan(_embedding_grad, table, rows) == [(300 * 64, [512])]
    assert _scatter_plan(_embedding_grad, table, rows, scatter_columns=True) == [(64, [300, 512])]
    xent = fa.grad(_xent), np.zeros((16, 20, 30), np.float32), np.zeros((16, 20), np.int32)
    assert _scatter_plan(*xent, scatter_columns=True) == _scatter_plan(*xent) == [(16 * 20 * 30, [1])]

    def batched(t, i):
        return fa.grad(lambda t: fnp.sum(fnp.tanh(fa.vmap(lambda a, b: a[b])(t, i))))(t)
    args = np.zeros((4, 50, 64), np.float32), np.zeros((4, 200), np.int32)
    assert _scatter_plan(batched, *args) == [(4 * 50 * 64, [200])]
    assert _scatter_plan(batched, *args, scatter_columns=True) == [(64, [200, 800])]


def _indices_of(f, *args):
    prog = fa.make_ir(f)(*args)
    producer = {o: e for e in prog.eqns for o in e.outputs}
    scatter = next(e for e in prog.eqns if e.primitive is P.scatter_add)
    return producer, scatter.inputs[1]


def test_iota_dim_reads_batch_columns_and_refuses_data_and_changing_clamps():
    producer, idx = _indices_of(fa.grad(_xent), np.zeros((4, 6, 9), np.float32), np.zeros((4, 6), np.int32))
    assert [iota_dim(producer, idx, k) for k in range(3)] == [0, 1, None]

    def clamped(w):   # rows 0..5 clamped to 3: the clamp changes the index, so no column is an iota
        return fnp.sum(fnp.take(w, fa.lax.min(fa.lax.iota(np.int32, 6), 3), axis=0) ** 2)
    producer, idx = _indices_of(fa.grad(clamped), np.zeros((8, 3), np.float32))
    assert iota_dim(producer, idx, 0) is None


@pytest.mark.parametrize("rows", [3, 8])
def test_pinned_scatters_match_numpy(device, rows):
    """``x.at[arange(rows)].add(u)`` into 5 rows: fewer rows than the output (the rest untouched), and more
    (the updates past the end dropped); and the cross-entropy gradient."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    u = rng.normal(size=(rows, 3)).astype(np.float32)
    def add_rows(x, u):
        return x.at[fa.lax.iota(np.int32, rows)].add(u, mode="drop")
    assert _scatter_loops(add_rows, x, u) == [1]
    f = fa.jit(add_rows, device=device)
    want = x.astype(np.float64)
    want[:min(rows, 5)] += u[:5].astype(np.float64)
    np.testing.assert_allclose(np.asarray(f(x, u)), want, rtol=1e-6, atol=1e-6)

    logits = rng.normal(size=(rows, 4, 7)).astype(np.float32)
    labels = rng.integers(0, 7, (rows, 4)).astype(np.int32)
    g = fa.jit(fa.grad(_xent), device=device)(logits, labels)
    ref = np.zeros(logits.shape)
    np.put_along_axis(ref, labels[..., None], -1.0, axis=-1)   # -d logits[label]
    ref += np.eye(7)[logits.argmax(axis=-1)]                   # + d max (no ties in normal samples)
    np.testing.assert_allclose(np.asarray(g), ref, rtol=1e-6, atol=1e-6)


def test_iota_dim_refuses_a_narrowing_cast_that_wraps():
    def narrowed(w):   # 300 rows counted in int8 wrap past 127: not the batch coordinate
        rows = fa.lax.convert_element_type(fa.lax.iota(np.int32, 300), np.int8)
        return fnp.sum(fnp.take(w, rows, axis=0, mode="fill") ** 2)

    def widened(w):
        rows = fa.lax.convert_element_type(fa.lax.iota(np.int8, 100), np.int32)
        return fnp.sum(fnp.take(w, rows, axis=0, mode="fill") ** 2)
    producer, idx = _indices_of(fa.grad(narrowed), np.zeros((400, 2), np.float32))
    assert iota_dim(producer, idx, 0) is None
    producer, idx = _indices_of(fa.grad(widened), np.zeros((400, 2), np.float32))
    assert iota_dim(producer, idx, 0) == 0


# ------------------------------------------------------------------ the column kernel on CPU kernel devices


@pytest.fixture(scope="module")
def ref():
    return fa.devices("numpy")[0]


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _on(dev, *xs):
    return [fa.device_put(fnp.asarray(x), dev) for x in xs]


def _cpu_columns(dev) -> bool:
    """Whether ``dev``'s backend asks for the column kernel (``scatter_columns``): a CPU OpenCL device (register
    tiles) or webgpu on a CPU adapter (no tiling)."""
    caps = dev.impl.capabilities(dev)
    return dev.platform == "cpu" and (caps.matmul_tiling == "register" or not caps.tiling_pays)


# Scatters the column kernel runs on a CPU (a work item per column, updates walked in order): duplicates,
# out-of-range and negative indices, two scattered axes, a batch of indices; (name, operand shape, indices, axes).
_rng = np.random.default_rng(7)
COLUMN_SCATTERS = [
    ("rows", (40, 24), np.array([[0], [3], [3], [39], [40], [-1], [17], [3]] * 4, np.int32), (0,)),
    ("two_axes", (6, 5, 20), np.array([[0, 1], [5, 4], [5, 4], [6, 0], [2, -2], [1, 1]] * 4, np.int32), (0, 1)),
    ("batched", (30, 24), _rng.integers(-2, 33, (5, 6, 1)).astype(np.int32), (0,)),
    ("inner_axis", (16, 50), _rng.integers(0, 50, (40, 1)).astype(np.int32), (1,)),
    ("every_axis", (8, 40), np.array([[0, 1], [7, 39], [7, 39], [8, 0], [-1, 2], [3, 3]] * 9, np.int32), (0, 1)),
    ("few_columns", (3000, 2), _rng.integers(-5, 3005, (200, 1)).astype(np.int32), (0,)),
]


@pytest.mark.parametrize("prim", ["scatter", "scatter_add", "scatter_mul", "scatter_min", "scatter_max"])
@pytest.mark.parametrize("name,shape,idx,axes", COLUMN_SCATTERS, ids=[c[0] for c in COLUMN_SCATTERS])
def test_column_scatters_equal_the_reference(kdev, ref, prim, name, shape, idx, axes):
    p = getattr(P, prim)
    rest = tuple(n for d, n in enumerate(shape) if d not in axes)
    x = _f32(*shape)
    u = _f32(*(idx.shape[:-1] + rest), seed=1) + (1.0 if prim == "scatter_mul" else 0.0)

    def f(x, i, u):
        return p.bind(x, i, u, axes=axes)
    got = np.asarray(fa.jit(f)(*_on(kdev, x, idx, u)))
    want = np.asarray(fa.jit(f, device=ref)(x, idx, u))
    # the same updates combined in the same order per element: equal, not only close
    np.testing.assert_array_equal(got, want)


def test_embedding_gradient_is_one_column_kernel(kdev):
    table, ids = _f32(300, 64), np.random.default_rng(0).integers(0, 300, (16, 32)).astype(np.int32)
    g = fa.jit(fa.grad(lambda t, i: fnp.sum(fnp.tanh(t[i]))))
    got = np.asarray(g(*_on(kdev, table, ids)))
    want = np.zeros((300, 64), np.float64)
    np.add.at(want, ids.reshape(-1), 1 - np.tanh(table[ids.reshape(-1)].astype(np.float64)) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if _cpu_columns(kdev):
        (k,) = [k for k in g.lower(*_on(kdev, table, ids)).kernels() if k.kind == "scatter"]
        assert k.global_size[0] == 64   # one work item per column of the table


def test_set_keeps_the_last_of_repeated_rows(kdev, ref):
    """``x.at[i].set(u)`` with repeated rows by column: the last update of a row wins, as NumPy's assignment."""
    x, u = _f32(50, 64), _f32(400, 64, seed=1)
    i = np.random.default_rng(3).integers(0, 50, 400).astype(np.int32)
    f = fa.jit(lambda x, i, u: x.at[i].set(u))
    want = x.copy()
    want[i] = u
    np.testing.assert_array_equal(np.asarray(f(*_on(kdev, x, i, u))), want)
    if _cpu_columns(kdev):
        (k,) = [k for k in f.lower(*_on(kdev, x, i, u)).kernels() if k.kind == "scatter"]
        assert k.global_size[0] == 64


def test_one_hot_gradient_walks_its_updates_once(kdev):
    """Every axis scattered (the gradient of ``take_along_axis``): its batch index columns are iotas
    (``iota_dim``), so each output element walks only its own update, in one kernel with no copy (the column
    kernel, a copy and then one work item, walks every update: more work than the pinned walk)."""
    logits, ids = _f32(16, 20, 30), np.random.default_rng(0).integers(0, 30, (16, 20, 1)).astype(np.int32)
    g = fa.jit(fa.grad(lambda x, i: fnp.sum(fnp.take_along_axis(x, i, axis=-1) ** 2)))
    got = np.asarray(g(*_on(kdev, logits, ids)))
    want = np.zeros(logits.shape)
    np.put_along_axis(want, ids, 2 * np.take_along_axis(logits.astype(np.float64), ids, axis=-1), axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    kinds = [k for k in g.lower(*_on(kdev, logits, ids)).kernels() if k.kind == "scatter"]
    assert [k.name.startswith("scatter_copy") for k in kinds] == [False], kinds
