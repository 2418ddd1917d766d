"""fnarray.numpy linear algebra against NumPy in float64, eagerly and under jit.

Every case runs on float32, float64 and int32 inputs: the eager result is compared with NumPy
computed wide, the jitted result must equal the eager one exactly, and the traced program
must pass the verifier. ``einsum`` is compared with ``numpy.einsum`` over a table of
subscripts (implicit and explicit output, ellipses, diagonals, sums, broadcasting, chains).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from helpers import assert_close, assert_same, check_traced, eager_and_jit, random_array, reference

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import ShapeError

DTYPES = [np.float32, np.float64, np.int32]


class Case(NamedTuple):
    name: str
    fa_fn: Callable
    np_fn: Callable
    shapes: tuple


def same(name, shapes, *args, label="", **kw):
    """A case where fnarray.numpy.<name> and numpy.<name> take the same arguments."""
    return Case(f"{name}{label}-{shapes}".replace(" ", ""), lambda *a: getattr(fnp, name)(*a, *args, **kw),
                lambda *a: getattr(np, name)(*a, *args, **kw), shapes)


CASES = [
    same("matmul", ((2, 3), (3, 4))),
    same("matmul", ((3,), (3,))),
    same("matmul", ((3,), (3, 4))),
    same("matmul", ((2, 3), (3,))),
    same("matmul", ((5, 2, 3), (3, 4))),
    same("matmul", ((2, 3), (5, 3, 4))),
    same("matmul", ((3,), (5, 3, 4))),
    same("matmul", ((5, 2, 3), (3,))),
    same("matmul", ((5, 1, 2, 3), (1, 6, 3, 4))),
    same("matmul", ((2, 1, 2, 3), (6, 3, 4))),
    same("matmul", ((0, 2, 3), (3, 4))),
    same("matmul", ((2, 0), (0, 4))),
    same("dot", ((2, 3), (3, 4))),
    same("dot", ((3,), (3,))),
    same("dot", ((2, 3, 4), (5, 4, 6))),
    same("dot", ((2, 3, 4), (4,))),
    same("dot", ((), (2, 3))),
    same("vdot", ((2, 3), (6,))),
    same("inner", ((2, 4), (3, 4))),
    same("inner", ((4,), (4,))),
    same("inner", ((), (3,))),
    same("outer", ((3,), (4,))),
    same("outer", ((2, 2), (3,))),
    same("tensordot", ((2, 3, 4), (3, 4, 5))),
    same("tensordot", ((2, 3), (4, 5)), 0),
    same("tensordot", ((2, 3, 4), (4, 3, 2)), ([0, 2], [2, 0]), label="_pairs"),
    same("tensordot", ((2, 3, 4), (4, 5)), (-1, 0), label="_ints"),
    same("vecdot", ((2, 1, 4), (3, 4))),
    same("vecdot", ((4, 3), (4, 3)), axis=0),
    same("vecdot", ((2, 3, 4), (3, 4)), axis=-2),
    same("matrix_transpose", ((2, 3, 4),)),
    same("trace", ((3, 3),)),
    same("trace", ((3, 4, 2),), 1, 0, 1, label="_offset"),
    same("trace", ((2, 3, 4),), -1, 2, 0, label="_axes"),
    Case("diagonal-default", lambda a: fnp.diagonal(a), lambda a: np.diagonal(a, 0, -2, -1), ((2, 3, 4),)),
    Case("diagonal-offset", lambda a: fnp.diagonal(a, 2), lambda a: np.diagonal(a, 2, -2, -1), ((3, 5),)),
    Case("diagonal-neg", lambda a: fnp.diagonal(a, -1, 0, 2), lambda a: np.diagonal(a, -1, 0, 2), ((4, 2, 3),)),
    Case("diagonal-far", lambda a: fnp.diagonal(a, 7), lambda a: np.diagonal(a, 7, -2, -1), ((3, 4),)),
    same("kron", ((2, 3), (4, 1))),
    same("kron", ((3,), (2, 2))),
    same("kron", ((), (2,))),
    same("cross", ((4, 3), (3,))),
    same("cross", ((3, 2), (2, 3, 1)), axisa=0, axisb=1, axisc=0),
    same("cross", ((2, 3, 5), (3, 5)), axis=-2),
]


def _tol(dtype):
    # Products of sums: float32 accumulates rounding relative to the operands' magnitude.
    return {"rtol": 1e-5, "atol": 1e-4} if np.dtype(dtype) == np.float32 else {}


def _wide(dtype):
    return np.float64 if np.dtype(dtype).kind == "f" else np.int64


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_against_numpy(case, dtype):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    xs = [random_array(rng, s, dtype) for s in case.shapes]
    eager, jitted = eager_and_jit(case.fa_fn, *[fnp.asarray(x) for x in xs])
    expected = reference(case.np_fn, *xs, dtype=dtype, compute_in=_wide(dtype))
    assert_close(eager, expected, msg=case.name, **_tol(dtype))
    assert_same(eager, jitted, case.name)


# ----------------------------------------------------------------------------- einsum


EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("Ba,aC", [(2, 3), (3, 4)]),
    ("ba,ab", [(2, 3), (3, 2)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),
    ("iii->i", [(2, 2, 2)]),
    ("i,i", [(4,), (4,)]),
    ("i,j", [(2,), (3,)]),
    ("i,j,k", [(2,), (3,), (4,)]),
    (",i", [(), (3,)]),
    ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bij,bjk->bki", [(5, 2, 3), (5, 3, 4)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]),
    ("...ij,...jk", [(2, 1, 2, 3), (6, 3, 4)]),
    ("a...b,b->...a", [(2, 4, 5, 3), (3,)]),
    ("...,...", [(2, 3), (3,)]),
    ("i...->...", [(3, 2)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("abc,cd,de->ae", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("ijk,ikl,j->il", [(2, 3, 4), (2, 4, 5), (3,)]),
    ("ij,kl->ijkl", [(2, 3), (2, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 4)]),
    ("ij,j->", [(2, 0), (0,)]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("subscripts,shapes", EINSUM, ids=[s for s, _ in EINSUM])
def test_einsum(subscripts, shapes, dtype):
    rng = np.random.default_rng(zlib.crc32(subscripts.encode()))
    xs = [random_array(rng, s, dtype) for s in shapes]

    def f(*ops):
        return fnp.einsum(subscripts, *ops)
    eager, jitted = eager_and_jit(f, *[fnp.asarray(x) for x in xs])
    expected = reference(lambda *a: np.einsum(subscripts, *a), *xs, dtype=dtype, compute_in=_wide(dtype))
    assert_close(eager, expected, msg=subscripts, **_tol(dtype))
    assert_same(eager, jitted, subscripts)


@pytest.mark.enable_x64
def test_einsum_interleaved_and_errors():
    rng = np.random.default_rng(1)
    a, b = random_array(rng, (2, 3), np.float64), random_array(rng, (3,), np.float64)
    fa_a, fa_b = fnp.asarray(a), fnp.asarray(b)
    assert_close(fnp.einsum(fa_a, [0, 1], fa_b, [1], [0]), np.einsum(a, [0, 1], b, [1], [0]))
    assert_close(fnp.einsum(fa_a, [Ellipsis, 1], fa_b, [1]), np.einsum(a, [Ellipsis, 1], b, [1]))
    with pytest.raises(ShapeError, match="'j'"):
        fnp.einsum("ij,jk", fa_a, fnp.asarray(np.ones((4, 2))))
    with pytest.raises(ShapeError):
        fnp.einsum("ijk", fa_a)
    with pytest.raises(ValueError):
        fnp.einsum("ij,j->k", fa_a, fa_b)
    with pytest.raises(ValueError):
        fnp.einsum("ij,j", fa_a)
    with pytest.raises(ValueError):
        fnp.einsum("i...->i", fa_a)
    with pytest.raises(ValueError):
        fnp.einsum("i1", fa_a)
    with pytest.raises(ValueError):
        fnp.einsum("ij->ii", fa_a)


def test_einsum_contracts_pairwise_with_dot_general():
    x = [fnp.asarray(np.ones(s, np.float32)) for s in [(2, 3), (3, 4), (4, 5)]]
    prog = check_traced(lambda *o: fnp.einsum("ij,jk,kl->il", *o), *x)
    names = [e.primitive.name for e in prog.eqns]
    assert names.count("dot_general") == 2
    prog = check_traced(lambda a: fnp.einsum("ii->i", a), fnp.asarray(np.ones((3, 3), np.float32)))
    assert "dot_general" not in [e.primitive.name for e in prog.eqns]


# ----------------------------------------------------------------------------- matmul rules


def test_matmul_error_names_contracting_dimensions():
    a = fnp.asarray(np.ones((2, 3), np.float32))
    b = fnp.asarray(np.ones((4, 5), np.float32))
    with pytest.raises(ShapeError, match=r"^matmul: contracting dimension of f32\[2,3\] \(size 3\) does not match "
                                         r"f32\[4,5\] \(size 4\)"):
        fnp.matmul(a, b)
    with pytest.raises(ShapeError, match="contracting"):
        a @ b
    with pytest.raises(ShapeError, match="contracting"):
        fa.jit(fnp.matmul)(a, b)
    with pytest.raises(ShapeError, match="batch"):
        fnp.matmul(fnp.asarray(np.ones((2, 2, 3))), fnp.asarray(np.ones((3, 3, 4))))
    with pytest.raises(ShapeError, match="rank"):
        fnp.matmul(fnp.asarray(np.float32(1)), a)


@pytest.mark.enable_x64
def test_matmul_promotion_and_bool():
    rng = np.random.default_rng(2)
    a32, a64 = random_array(rng, (2, 3), np.float32), random_array(rng, (3, 2), np.float64)
    ai = random_array(rng, (3, 2), np.int32)
    out = fnp.asarray(a32) @ fnp.asarray(a64)
    assert_close(out, a32.astype(np.float64) @ a64)
    out = fnp.matmul(fnp.asarray(a32), fnp.asarray(ai))
    assert_close(out, (a32.astype(np.float64) @ ai).astype(np.float32), rtol=1e-5, atol=1e-5)
    b1, b2 = rng.random((3, 4)) < 0.3, rng.random((4, 2)) < 0.3
    assert_close(fnp.matmul(fnp.asarray(b1), fnp.asarray(b2)), np.matmul(b1, b2))
    out = fnp.matmul(fnp.asarray(a32), fnp.asarray(a64.astype(np.float32)), preferred_element_type=np.float64)
    assert out.dtype == np.float64


def test_matmul_batch_dims_in_one_dot_general():
    a = fnp.asarray(np.ones((5, 1, 2, 3), np.float32))
    b = fnp.asarray(np.ones((6, 3, 4), np.float32))
    prog = check_traced(fnp.matmul, a, b)
    dots = [e for e in prog.eqns if e.primitive.name == "dot_general"]
    assert len(dots) == 1
    assert dots[0].params["dimension_numbers"][1] == ((0, 1), (0, 1))
    assert prog.out_avals[0].shape == (5, 6, 2, 4)


def test_complex_products_conjugate():
    rng = np.random.default_rng(3)
    a, b = random_array(rng, (3, 4), np.complex64), random_array(rng, (3, 4), np.complex64)
    fa_a, fa_b = fnp.asarray(a), fnp.asarray(b)
    tol = {"rtol": 1e-5, "atol": 1e-5}
    assert_close(fnp.vdot(fa_a, fa_b), reference(np.vdot, a, b, dtype=np.complex64), **tol)
    assert_close(fnp.vecdot(fa_a, fa_b), reference(np.vecdot, a, b, dtype=np.complex64), **tol)
    assert_close(fnp.matmul(fa_a, fnp.matrix_transpose(fa_b)), reference(lambda x, y: x @ y.T, a, b,
                                                                         dtype=np.complex64), **tol)


def test_shape_errors():
    x = fnp.asarray(np.ones((2, 3), np.float32))
    with pytest.raises(ShapeError):
        fnp.dot(x, x)
    with pytest.raises(ShapeError):
        fnp.inner(x, fnp.asarray(np.ones((2,), np.float32)))
    with pytest.raises(ShapeError):
        fnp.tensordot(x, x, axes=([0], [1]))
    with pytest.raises(ShapeError):
        fnp.tensordot(x, x, axes=3)
    with pytest.raises(ShapeError):
        fnp.vecdot(x, fnp.asarray(np.ones((2, 2), np.float32)))
    with pytest.raises(ShapeError):
        fnp.vdot(x, fnp.asarray(np.ones((5,), np.float32)))
    with pytest.raises(ShapeError):
        fnp.cross(fnp.asarray(np.ones((2, 2), np.float32)), x)
    with pytest.raises(ShapeError):
        fnp.matrix_transpose(fnp.asarray(np.ones((3,), np.float32)))
    with pytest.raises(ShapeError):
        fnp.diagonal(x, 0, 1, 1)
    with pytest.raises(ShapeError):
        fnp.trace(fnp.asarray(np.ones((3,), np.float32)))


def test_trace_dtype_follows_sum():
    x = fnp.asarray(np.ones((3, 3), np.int8))
    assert fnp.trace(x).dtype == np.int32
    assert fnp.trace(x, dtype=np.float32).dtype == np.float32


# ----------------------------------------------------------------------------- transforms


@pytest.mark.enable_x64
def test_grad_of_products():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    ga, gb = fa.grad(lambda x, y: fnp.sum(fnp.matmul(x, y) ** 2), argnums=(0, 1))(fnp.asarray(a), fnp.asarray(b))
    c = a @ b
    assert_close(ga, 2 * c @ b.T)
    assert_close(gb, np.einsum("bij,bik->jk", a, 2 * c))
    m = rng.standard_normal((3, 3))
    g = fa.grad(lambda x: fnp.einsum("ij,ji->", x, x))(fnp.asarray(m))
    assert_close(g, 2 * m.T)
    g = fa.grad(lambda x: fnp.trace(x, offset=1))(fnp.asarray(m))
    assert_close(g, np.eye(3, k=1))


def test_vmap_against_loop():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 3))
    fns = [fnp.matmul, lambda x, y: fnp.einsum("ij,j->i", x, y), lambda x, y: fnp.outer(x, y),
           lambda x, y: fnp.cross(x, y), lambda x, y: fnp.tensordot(x, y, 1)]
    for f in fns:
        batched = fa.vmap(f)(fnp.asarray(a), fnp.asarray(b))
        looped = np.stack([np.asarray(f(fnp.asarray(a[i]), fnp.asarray(b[i]))) for i in range(4)])
        assert_close(batched, looped)
