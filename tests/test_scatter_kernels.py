"""Scatter kernels whose index columns are iotas of the update batch (``kernels/groups/scatter.py``).

``take_along_axis`` and ``x[arange(n)]`` gather with the batch coordinates concatenated beside the data's
index; their transposes scatter with the same columns. The scatter kernel reads those columns off the program
and walks only the updates that can land on an output element (one per element for a cross-entropy
gradient, instead of every update of the batch): the schedule is checked without a device, the values
against NumPy float64 on every device.
"""

from __future__ import annotations

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


def _scatter_loops(f, *args):
    """The trip counts of the update walks of ``f``'s scatter kernels (their outermost ``For``)."""
    prog = fa.make_ir(f)(*args)
    trips = []
    for launch in schedule(prog, CAPS, workgroup=64).launches:
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
