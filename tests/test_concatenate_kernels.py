"""Concatenations inside fused kernels on opencl:0 and webgpu:0 (``fnarray/lowering/kernels/emitter.py``), with
``fallback="error"``, against NumPy: along each axis with 1, 2, 7, 40 and 130 pieces of mixed sizes (some
empty, from two inputs and an elementwise value), int32 and float32; pieces that are one chain at shifted slices
(``kernels/uniform_pieces.py``: an image grid of reversed, transposed slices, strided slices) and pieces that look
alike but are not (a start that does not move by a constant step, a shared value read from a moving slice); and
the analysis itself on traced programs (which pieces it takes, which it refuses).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels.uniform_pieces import slice_steps

pytestmark = pytest.mark.usefixtures("no_fallback")


def _mixed(np_, x, y, n, axis, seed):
    """``n`` pieces along ``axis``: slices of ``x`` or ``y`` (0-3 wide, overlapping) and ``x * 2`` slices."""
    rng = np.random.default_rng(seed)
    pieces = []
    for j in range(n):
        src = y if j % 3 == 1 else x
        width = int(rng.integers(0, 4))
        start = int(rng.integers(0, src.shape[axis] - width + 1))
        sl = tuple(slice(start, start + width) if d == axis else slice(None) for d in range(3))
        piece = src[sl]
        pieces.append(piece * 2 if j % 5 == 2 else piece)
    return np_.concatenate(pieces, axis=axis)


def _run(dev, fn, *args):
    return [np.asarray(o) for o in fa.jit(fn, device=dev)(*args)]


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-50, 50, (5, 4, 6)).astype(dt) for dt in (np.float32, np.float32, np.int32, np.int32)]


def test_few_pieces_along_each_axis(kdev):
    """1, 2 and 7 pieces along each axis, float32 and int32, flattened into one output per dtype (few kernels
    to compile)."""
    def f(np_, xf, yf, xi, yi):
        return tuple(np_.concatenate([_mixed(np_, x, y, n, axis, seed=n + axis).ravel()
                                      for n in (1, 2, 7) for axis in range(3)]) for x, y in ((xf, yf), (xi, yi)))
    args = _inputs(0)
    _check(_run(kdev, lambda *a: f(fnp, *a), *args), f(np, *args))


@pytest.mark.parametrize("n, axis, dtype", [(40, 2, np.float32), (130, 0, np.int32)])
def test_many_pieces(kdev, n, axis, dtype):
    x, y = _inputs(n)[:2] if dtype == np.float32 else _inputs(n)[2:]
    got = _run(kdev, lambda a, b: (_mixed(fnp, a, b, n, axis, seed=1),), x, y)
    _check(got, (_mixed(np, x, y, n, axis, seed=1),))


def _grid(np_, ims, nrow):
    """``nrow x nrow`` images of ``ims [k, h, w]`` as one picture (``benchmarks/programs.py``'s grid, small)."""
    rows = [np_.concatenate([ims[r * nrow + c].T for c in range(nrow)][::-1], axis=0) for r in range(nrow)]
    return np_.concatenate(rows, axis=1).T


def _strided(np_, z, n):
    """``n`` pieces ``z[1 + 2k : 3 + 2k : 1, ::2]``, reversed, plus one ``exp`` on the way (one chain)."""
    return np_.concatenate([np_.exp(z[1 + 2 * k:3 + 2 * k, ::2]) for k in range(n)][::-1], axis=1)


def _not_affine(np_, z):
    return np_.concatenate([z[s:s + 2] for s in (0, 1, 3, 4)], axis=0)


def _shared_moving(np_, z):
    """Piece 0 reads ``z[0:1]`` twice: once where the other pieces' slice moves, once where theirs stays."""
    s = z[0:1]
    return np_.concatenate([s + s] + [z[k:k + 1] + s for k in range(1, 5)], axis=0)


def test_pieces_of_one_chain(kdev):
    """Pieces taken as one chain at shifted slices (2 and 130 of them), beside pieces that only look so (one
    output: fewer kernels to compile)."""
    rng = np.random.default_rng(3)
    ims = rng.normal(size=(9, 4, 5)).astype(np.float32)
    z = rng.normal(size=(263, 6)).astype(np.float32)

    def f(np_, a, b):
        return (np_.concatenate([_grid(np_, a, 3).ravel(), _strided(np_, b, 2).ravel(),
                                 _strided(np_, b, 130).ravel(), _not_affine(np_, b).ravel(),
                                 _shared_moving(np_, b).ravel()]),)
    got = _run(kdev, lambda a, b: f(fnp, a, b), ims, z)
    for g, want in zip(got, f(np, ims.astype(np.float64), z.astype(np.float64)), strict=True):
        np.testing.assert_allclose(g, want, rtol=2e-6, atol=1e-6)


def _steps_of(fn, *args, which=-1):
    """``slice_steps`` on the pieces of ``fn``'s ``concatenate`` number ``which`` (inputs in buffers)."""
    prog = fa.make_jaxpr(fn)(*args)
    prog = getattr(prog, "jaxpr", prog)
    producer = {o: e for e in prog.eqns for o in e.outputs}
    inputs = set(prog.invars)
    em = types.SimpleNamespace(producer=producer, buffer_of=lambda v: "buf" if v in inputs else None)
    cat = [e for e in prog.eqns if e.primitive.name == "concatenate"][which]
    return slice_steps(em, list(cat.inputs))


def test_analysis_takes_and_refuses():
    z = np.zeros((20, 6), np.float32)
    ims = np.zeros((9, 4, 5), np.float32)
    rows = _steps_of(lambda a: _grid(fnp, a, 3), ims)           # each row's 3 slices move 3 images a row
    assert [s for _e, s in rows.values()] == [(3, 0, 0)] * 3
    row = _steps_of(lambda a: _grid(fnp, a, 3), ims, which=0)   # within a row, reversed: one image back a piece
    assert [s for _e, s in row.values()] == [(-1, 0, 0)]
    strided = _steps_of(lambda b: _strided(fnp, b, 4), z)
    assert [s for _e, s in strided.values()] == [(-2, 0)]
    assert _steps_of(lambda b: _not_affine(fnp, b), z) is None
    assert _steps_of(lambda b: _shared_moving(fnp, b), z) is None
    assert _steps_of(lambda b: fnp.concatenate([b, b, b]), z) == {}
