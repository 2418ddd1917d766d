"""``vmap`` of every ``fnarray.numpy`` function against a Python loop over the examples.

The rows are those of ``test_grad_namespace.GRAD_SPECS`` (float64 inputs) plus
``EXTRA`` below: integer, boolean and complex inputs, functions without a
derivative, and integer arguments that are mapped themselves (batched indices,
batched shift amounts, batched sort keys). Each row runs with ``in_axes`` 0, 1
(where every example has an axis 1) and -1, with each argument in turn
unbatched (``None``) where the function has several, and nested (``vmap`` of
``vmap``, the inner one over the last axis). The reference applies the function
to each example and stacks the results with ``np.stack``; dtypes and shapes
must agree exactly, values exactly for integers and bools and to rounding for
floats, and the traced program of every vmapped function verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from helpers import check_traced
from test_grad_namespace import ALIASES, GRAD_SPECS, make_args

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import tree_util

B = 3          # batch size
B_OUTER = 2    # outer batch size of the nested case


class Arg(NamedTuple):
    """How to draw one example of an argument: its shape, its kind and range."""
    shape: tuple
    kind: str = "f"          # f: float64, i: int32, b: bool, c: complex128, s: float64 with nan/inf, o: sorted
    lo: float = -2.0
    hi: float = 2.0

    def draw(self, rng):
        if self.kind == "i":
            return rng.integers(int(self.lo), int(self.hi), size=self.shape, endpoint=True).astype(np.int32)
        if self.kind == "b":
            return rng.random(self.shape) < 0.5
        if self.kind == "c":
            return rng.uniform(self.lo, self.hi, self.shape) + 1j * np.where(
                rng.random(self.shape) < 0.3, 0.0, rng.uniform(self.lo, self.hi, self.shape))
        x = rng.uniform(self.lo, self.hi, self.shape)
        if self.kind == "s":
            specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
            x = np.where(rng.random(self.shape) < 0.4, rng.choice(specials, self.shape), x)
        if self.kind == "o":
            x = np.sort(x, axis=-1)
        return x


class VSpec(NamedTuple):
    name: str
    fn: Callable              # on fnarray.numpy arrays
    shapes: tuple
    make: Callable            # rng -> list of NumPy example arguments

    @property
    def function(self) -> str:
        return self.name.split("[")[0]


def V(name, fn, *args: Arg):
    return VSpec(name, fn, tuple(a.shape for a in args), lambda rng: [a.draw(rng) for a in args])


F23, I23, B23 = Arg((2, 3)), Arg((2, 3), "i", -9, 9), Arg((2, 3), "b")
_IDX = np.array([1, 0, 1])

EXTRA = [
    # ---------------------------------------------------------------- integers and bits
    V("bitwise_and", fnp.bitwise_and, I23, I23), V("bitwise_or", fnp.bitwise_or, I23, I23),
    V("bitwise_xor", fnp.bitwise_xor, I23, I23),
    V("bitwise_left_shift", fnp.bitwise_left_shift, I23, Arg((2, 3), "i", 0, 40)),
    V("left_shift", fnp.left_shift, I23, Arg((3,), "i", 0, 5)),
    V("bitwise_right_shift", fnp.bitwise_right_shift, Arg((2, 3), "i", -99, 99), Arg((2, 3), "i", 0, 40)),
    V("right_shift", fnp.right_shift, I23, Arg((), "i", 0, 3)),
    V("bitwise_invert", fnp.bitwise_invert, I23), V("invert", fnp.invert, B23), V("bitwise_not", fnp.bitwise_not, I23),
    V("gcd", fnp.gcd, Arg((4,), "i", -12, 12), Arg((4,), "i", -12, 12)),
    V("lcm", fnp.lcm, Arg((4,), "i", -12, 12), Arg((4,), "i", -12, 12)),
    V("floor_divide[int, by zero]", fnp.floor_divide, I23, Arg((2, 3), "i", -2, 2)),
    V("remainder[int, by zero]", fnp.remainder, I23, Arg((2, 3), "i", -2, 2)),
    V("divide[int]", fnp.divide, I23, Arg((3,), "i", 1, 4)),
    V("abs[int]", fnp.abs, I23), V("sign[int]", fnp.sign, I23), V("square[int]", fnp.square, I23),
    V("power[int]", fnp.power, I23, Arg((2, 3), "i", 0, 3)),
    V("clip[int]", lambda x, lo: fnp.clip(x, lo, 5), I23, Arg((), "i", -5, 0)),
    V("astype[saturating int8]", lambda x: fnp.astype(x * 100, fnp.int8), Arg((2, 3), "s")),
    V("round[decimals]", lambda x: fnp.round(x, decimals=1), F23),
    # ---------------------------------------------------------------- comparisons and predicates
    V("equal", fnp.equal, I23, Arg((2, 3), "i", -1, 1)), V("not_equal", fnp.not_equal, I23, I23),
    V("greater", fnp.greater, F23, F23), V("greater_equal", fnp.greater_equal, I23, Arg((3,), "i", -3, 3)),
    V("less", fnp.less, F23, Arg(())), V("less_equal", fnp.less_equal, I23, I23),
    V("isfinite", fnp.isfinite, Arg((2, 3), "s")), V("isinf", fnp.isinf, Arg((2, 3), "s")),
    V("isnan", fnp.isnan, Arg((2, 3), "s")), V("signbit", fnp.signbit, Arg((2, 3), "s")),
    V("isclose", lambda a, b: fnp.isclose(a, fnp.round(b, decimals=1)), Arg((2, 3), "s"), F23),
    V("isreal", fnp.isreal, Arg((2, 3), "c")), V("iscomplex", fnp.iscomplex, Arg((2, 3), "c")),
    V("logical_and", fnp.logical_and, B23, B23), V("logical_or", fnp.logical_or, B23, B23),
    V("logical_xor", fnp.logical_xor, B23, B23), V("logical_not", fnp.logical_not, B23),
    V("nextafter", fnp.nextafter, F23, Arg((2, 3), lo=-1, hi=1)),
    V("frexp", fnp.frexp, Arg((2, 3), lo=-50, hi=50)),
    # ---------------------------------------------------------------- complex
    V("exp[complex]", fnp.exp, Arg((2, 3), "c")), V("abs[complex]", fnp.abs, Arg((2, 3), "c")),
    V("angle[complex]", fnp.angle, Arg((2, 3), "c")), V("real[complex]", fnp.real, Arg((2, 3), "c")),
    V("imag[complex]", fnp.imag, Arg((2, 3), "c")), V("conj[complex]", fnp.conj, Arg((2, 3), "c")),
    V("matmul[complex]", fnp.matmul, Arg((2, 3), "c"), Arg((3, 2), "c")),
    # ---------------------------------------------------------------- reductions of integers and bools
    V("all", lambda x: fnp.all(x, axis=1), B23), V("any", lambda x: fnp.any(x, axis=0), B23),
    V("argmax", lambda x: fnp.argmax(x, axis=1), Arg((2, 3), "s")), V("argmin", fnp.argmin, F23),
    V("count_nonzero", lambda x: fnp.count_nonzero(x, axis=0), Arg((2, 3), "i", 0, 2)),
    V("sum[bool]", lambda x: fnp.sum(x, axis=1), B23), V("mean[int]", fnp.mean, I23),
    V("prod[int]", lambda x: fnp.prod(x, axis=0), Arg((2, 3), "i", -3, 3)),
    V("max[int]", lambda x: fnp.max(x, axis=1), I23), V("cumsum[bool]", lambda x: fnp.cumsum(x, axis=1), B23),
    V("max[nan]", lambda x: fnp.max(x, axis=0), Arg((2, 3), "s")),
    V("quantile[mapped q]", lambda x, q: fnp.quantile(x, q, axis=0), Arg((4, 2)), Arg((), lo=0, hi=1)),
    # ---------------------------------------------------------------- sorting and searching
    V("sort[int]", lambda x: fnp.sort(x, axis=0), I23), V("sort[nan]", fnp.sort, Arg((2, 4), "s")),
    V("argsort", lambda x: fnp.argsort(x, axis=1), I23),
    V("argsort[descending]", lambda x: fnp.argsort(x, axis=0, descending=True), I23),
    V("argpartition", lambda x: fnp.argpartition(x, 1, axis=1)[:, 1], Arg((2, 4))),
    V("lexsort", fnp.lexsort, Arg((2, 5), "i", 0, 2)),
    V("searchsorted", fnp.searchsorted, Arg((5,), "o"), Arg((3,))),
    V("searchsorted[right]", lambda a, v: fnp.searchsorted(a, v, side="right"), Arg((5,), "i", 0, 3),
      Arg((4,), "i", 0, 3)),
    V("top_k[int]", lambda x: fnp.top_k(x, 2), Arg((2, 4), "i", -99, 99)),
    V("nonzero", lambda x: fnp.nonzero(x, size=5, fill_value=-1), Arg((2, 3), "i", 0, 1)),
    V("argwhere", lambda x: fnp.argwhere(x, size=4), Arg((3, 2), "i", 0, 1)),
    V("flatnonzero", lambda x: fnp.flatnonzero(x, size=3, fill_value=7), Arg((2, 3), "i", 0, 1)),
    V("bincount", lambda x: fnp.bincount(x, length=5), Arg((6,), "i", 0, 4)),
    V("bincount[weights]", lambda x, w: fnp.bincount(x, weights=w, length=4), Arg((5,), "i", 0, 3), Arg((5,))),
    V("unique", lambda x: fnp.unique(x, size=4, fill_value=-1), Arg((5,), "i", 0, 4)),
    # ---------------------------------------------------------------- mapped integer arguments (indices)
    V("take[mapped indices]", lambda x, i: fnp.take(x, i, axis=1), F23, Arg((4,), "i", -3, 2)),
    V("_getitem[mapped index]", lambda x, i: x[i], F23, Arg((), "i", -2, 1)),
    V("_getitem[mapped index array]", lambda x, i: x[:, i], F23, Arg((2,), "i", -3, 2)),
    V("take_along_axis[mapped indices]", lambda x, i: fnp.take_along_axis(x, i, axis=0), F23,
      Arg((2, 3), "i", 0, 1)),
    V("_IndexUpdateHelper[set, mapped indices]", lambda x, i, v: x.at[i].set(v), Arg((4,)), Arg((2,), "i", -4, 3),
      Arg((2,))),
    V("_IndexUpdateHelper[add, mapped indices]", lambda x, i: x.at[i, 1].add(1.5), F23, Arg((3,), "i", 0, 1)),
    V("_IndexUpdateHelper[get, mapped indices]", lambda x, i: x.at[i].get(), Arg((4,)),
      Arg((3,), "i", -6, 6)),
    V("roll[int]", lambda x: fnp.roll(x, 2), I23),
    V("where[mapped condition]", lambda c, x: fnp.where(c, x, -x), B23, F23),
    V("where[int]", lambda c, x: fnp.where(c, x, 0), B23, I23),
    V("select[int]", lambda x: fnp.select([x > 2, x < -2], [x, -x], 7), I23),
    # ---------------------------------------------------------------- creation from mapped values
    V("zeros_like", fnp.zeros_like, I23), V("ones_like", fnp.ones_like, F23),
    V("full_like", lambda x: fnp.full_like(x, 2.5), I23),
    V("full[mapped fill]", lambda v: fnp.full((2, 3), v), Arg(())),
    V("linspace", lambda a, b: fnp.linspace(a, b, 5), Arg(()), Arg(())),
    V("logspace", lambda a, b: fnp.logspace(a, b, 4), Arg(()), Arg(())),
    V("diag[int]", fnp.diag, Arg((3,), "i")),
    V("tril[bool]", fnp.tril, Arg((3, 3), "b")),
    V("meshgrid[xy]", lambda a, b: fnp.meshgrid(a, b), Arg((2,)), Arg((3,), "i")),
    V("concatenate[mixed dtypes]", lambda a, b: fnp.concatenate([a, b]), Arg((2,), "i"), Arg((3,))),
    V("stack[int]", lambda a, b: fnp.stack([a, b], axis=-1), I23, I23),
    # ---------------------------------------------------------------- NumPy names outside the array API (_extras)
    V("allclose", lambda a, b: fnp.allclose(a, fnp.round(b, decimals=1), atol=0.1), F23, F23),
    V("array_equal", lambda a, b: fnp.array_equal(a, b), I23, Arg((2, 3), "i", -1, 1)),
    V("array_equiv", lambda a, b: fnp.array_equiv(a, b), I23, Arg((3,), "i", -1, 1)),
    V("isin", fnp.isin, I23, Arg((4,), "i", -3, 3)),
    V("nanvar", lambda x: fnp.nanvar(x, axis=1), Arg((2, 3), "s")),
    V("nanstd", lambda x: fnp.nanstd(x, axis=0, ddof=1), Arg((3, 2), "s")),
    V("nanargmax", lambda x: fnp.nanargmax(x, axis=1), Arg((2, 3), "s")),
    V("nanargmin", fnp.nanargmin, Arg((2, 3), "s")),
    V("nanprod", lambda x: fnp.nanprod(x, axis=0), Arg((2, 3), "s")),
    V("nancumsum", lambda x: fnp.nancumsum(x, axis=1), Arg((2, 3), "s")),
    V("nancumprod", fnp.nancumprod, Arg((2, 3), "s")),
    V("rint", fnp.rint, F23), V("fabs", fnp.fabs, I23), V("around", lambda x: fnp.around(x, 1), F23),
    V("copy", fnp.copy, F23), V("modf", fnp.modf, F23), V("divmod", fnp.divmod, I23, Arg((3,), "i", 1, 3)),
    V("append", lambda a, b: fnp.append(a, b, axis=0), F23, Arg((1, 3))),
    V("rollaxis", lambda x: fnp.rollaxis(x, 1), Arg((2, 3, 4))),
    V("trapezoid", lambda y, x: fnp.trapezoid(y, x), F23, Arg((3,), "o")),
    V("vander", lambda x: fnp.vander(x, 3), Arg((4,))),
    V("cov", fnp.cov, Arg((2, 4))), V("corrcoef", fnp.corrcoef, Arg((2, 4))),
    V("digitize", lambda x: fnp.digitize(x, np.array([-1.0, 0.0, 1.0])), F23),
    V("geomspace", lambda a: fnp.geomspace(a, 8.0, 4), Arg((), "f", 1.0, 4.0)),
    V("isneginf", fnp.isneginf, Arg((2, 3), "s")), V("isposinf", fnp.isposinf, Arg((2, 3), "s")),
    V("polyval", fnp.polyval, Arg((3,)), F23),
    V("matvec", fnp.matvec, Arg((2, 3)), Arg((3,))), V("vecmat", fnp.vecmat, Arg((2,)), Arg((2, 3))),
    V("unravel_index", lambda i: fnp.unravel_index(i, (3, 4)), Arg((3,), "i", -12, 15)),
    V("ravel_multi_index", lambda i, j: fnp.ravel_multi_index((i, j), (3, 4), mode="clip"),
      Arg((3,), "i", -1, 4), Arg((3,), "i", -1, 5)),
    V("ix_", lambda x: x[fnp.ix_(fnp.asarray([0, 1]), fnp.asarray([2, 0]))], F23),
    # ---------------------------------------------------------------- the twenty-fifth session's composites (the
    # differentiable ones come from GRAD_SPECS): sizes given, as under jit; mapped integer indices
    V("union1d", lambda a, b: fnp.union1d(a, b, size=7), Arg((4,), "i", 0, 5), Arg((3,), "i", 0, 5)),
    V("intersect1d", lambda a, b: fnp.intersect1d(a, b, size=3, fill_value=-1), Arg((5,), "i", 0, 4),
      Arg((3,), "i", 0, 4)),
    V("setdiff1d", lambda a, b: fnp.setdiff1d(a, b, size=4), Arg((5,), "i", 0, 4), Arg((3,), "i", 0, 4)),
    V("setxor1d", lambda a, b: fnp.setxor1d(a, b, size=5), Arg((4,), "i", 0, 4), Arg((3,), "i", 0, 4)),
    V("bitwise_count", fnp.bitwise_count, Arg((2, 3), "i", -300, 300)),
    V("choose[mapped indices]", lambda i, x: fnp.choose(i, [x, -x, 2 * x], mode="clip"), Arg((3,), "i", -1, 3),
      Arg((2, 3))),
    V("put_along_axis[mapped indices]", lambda x, i: fnp.put_along_axis(x, i, 9.0, 0, inplace=False), F23,
      Arg((1, 3), "i", 0, 1)),
    V("nanquantile[nan slices]", lambda x: fnp.nanquantile(x, 0.5, axis=0), Arg((2, 3), "s")),
]

# Public names that vmap cannot map, or that take no arrays, by reason.
NOT_MAPPED = {
    "the result's shape depends on the values (use unique(..., size=n))": (
        "unique_all unique_counts unique_inverse unique_values"),
    "creates arrays from shapes or Python scalars": (
        "zeros ones full empty arange eye identity tri indices broadcast_shapes from_dlpack mgrid ogrid s_ "
        "index_exp hanning hamming blackman bartlett kaiser"),
    "values unspecified": "empty_like",
    "dtypes, constants and introspection": (
        "Array bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
        "complex64 complex128 float8_e4m3fn float8_e5m2 int4 uint4 float0 finfo iinfo isdtype result_type can_cast "
        "promote_types dtype "
        "__array_namespace_info__ __array_api_version__ e pi inf nan newaxis euler_gamma issubdtype "
        "UniqueAllResult UniqueCountsResult UniqueInverseResult"),
    "method implementations, covered through the methods": (
        "_copy _reshape_method _transpose_method _view _cummax_method _cummin_method _logcumsumexp_method "
        "_rsqrt_method"),
    "dtype aliases (twenty-fifth session)": "cdouble complex_ csingle double float_ int_ single uint",
    "static answers about shapes and dtypes, or index arrays from Python ints": (
        "ndim shape size isscalar iscomplexobj isrealobj tril_indices triu_indices diag_indices tril_indices_from "
        "triu_indices_from diag_indices_from bool_ generic number integer signedinteger unsignedinteger inexact "
        "floating complexfloating"),
}


def _from_grad(spec):
    return VSpec(spec.name, lambda *xs, _f=spec.fn: _f(fnp, *xs), spec.shapes,
                 lambda rng, _s=spec: make_args(_s, rng))


VSPECS = [_from_grad(s) for s in GRAD_SPECS] + EXTRA


def _variants(spec):
    n = len(spec.shapes)
    out = [0, -1]
    if all(len(s) >= 1 for s in spec.shapes):
        out.append(1)
    if n > 1:
        out += [tuple(None if k == j else 0 for k in range(n)) for j in range(n)]
    return out


CASES = [pytest.param(s, ax, id=f"{s.name}-in_axes={ax}") for s in VSPECS for ax in _variants(s)]


def _seed(name):
    return np.random.default_rng(sum(ord(c) * (i + 3) for i, c in enumerate(name)))


def _leaves(out):
    return tree_util.tree_leaves(out)


def assert_match(got, want, msg):
    got, want = _leaves(got), list(want)
    assert len(got) == len(want), f"{msg}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert isinstance(g, fa.Array), f"{msg}: output {k} is a {type(g).__name__}"
        assert g.dtype == w.dtype, f"{msg}: output {k} has dtype {g.dtype}, the loop gives {w.dtype}"
        assert g.shape == w.shape, f"{msg}: output {k} has shape {g.shape}, the loop gives {w.shape}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12, equal_nan=True,
                                       err_msg=f"{msg}: output {k}")
        else:
            np.testing.assert_array_equal(np.asarray(g), w, err_msg=f"{msg}: output {k}")


def _stack(per_example, axis=0):
    """``np.stack`` of each output leaf over the examples."""
    leaves = [[np.asarray(o) for o in _leaves(out)] for out in per_example]
    return [np.stack([ex[k] for ex in leaves], axis=axis) for k in range(len(leaves[0]))]


def _axes(in_axes, n):
    return in_axes if isinstance(in_axes, tuple) else (in_axes,) * n


@pytest.mark.enable_x64
@pytest.mark.parametrize("spec,in_axes", CASES)
def test_vmap_matches_loop(spec, in_axes):
    rng = _seed(spec.name)
    examples = [spec.make(rng) for _ in range(B)]
    axes = _axes(in_axes, len(spec.shapes))
    args = [examples[0][k] if ax is None else np.stack([ex[k] for ex in examples], axis=ax)
            for k, ax in enumerate(axes)]
    want = _stack([spec.fn(*[fnp.asarray(examples[0][k] if ax is None else ex[k]) for k, ax in enumerate(axes)])
                   for ex in examples])
    fa_args = [fnp.asarray(a) for a in args]
    got = fa.vmap(spec.fn, in_axes=in_axes)(*fa_args)
    assert_match(got, want, f"{spec.name} with in_axes={in_axes}")
    check_traced(fa.vmap(spec.fn, in_axes=in_axes), *fa_args)


@pytest.mark.enable_x64
@pytest.mark.parametrize("spec", VSPECS, ids=lambda s: s.name)
def test_nested_vmap_matches_double_loop(spec):
    """``vmap(vmap(f, in_axes=-1), in_axes=0)`` on inputs of shape ``(B_OUTER,) + example + (B,)``."""
    rng = _seed(spec.name + "nested")
    grid = [[spec.make(rng) for _ in range(B)] for _ in range(B_OUTER)]
    n = len(spec.shapes)
    args = [fnp.asarray(np.stack([np.stack([ex[k] for ex in row], axis=-1) for row in grid], axis=0))
            for k in range(n)]
    want = [np.stack(leaf_rows, axis=0) for leaf_rows in zip(*[
        _stack([spec.fn(*[fnp.asarray(a) for a in ex]) for ex in row]) for row in grid], strict=True)]
    f = fa.vmap(fa.vmap(spec.fn, in_axes=-1), in_axes=0)
    assert_match(f(*args), want, f"{spec.name} nested")
    check_traced(f, *args)


def test_rows_cover_the_namespace():
    covered = {s.function for s in VSPECS} | set(ALIASES)
    excluded = {n for names in NOT_MAPPED.values() for n in names.split()}
    public = set(fnp.__all__)
    missing = sorted(public - covered - excluded)
    assert not missing, f"fnarray.numpy functions with no vmap case and no reason: {missing}"
    assert not sorted((covered | excluded) - public)


@pytest.mark.parametrize("out_axes", [0, 1, -1])
def test_out_axes(out_axes):
    rng = _seed("out_axes")
    x = rng.standard_normal((B, 2, 4))
    want = np.stack([np.asarray(fnp.cumsum(fnp.asarray(x[i]), axis=1)) for i in range(B)], axis=out_axes)
    got = fa.vmap(lambda v: fnp.cumsum(v, axis=1), out_axes=out_axes)(fnp.asarray(x))
    assert_match(got, [want], f"out_axes={out_axes}")


@pytest.mark.enable_x64
def test_pytree_in_axes():
    """``in_axes`` given per leaf of a dict argument, mapped and unmapped leaves mixed."""
    rng = _seed("pytree")
    w = rng.standard_normal((3, 2))
    xs = rng.standard_normal((B, 3))
    b = rng.standard_normal((2, B))

    def f(p):
        return fnp.tanh(p["x"] @ p["w"] + p["b"])

    got = fa.vmap(f, in_axes=({"w": None, "x": 0, "b": 1},))({"w": fnp.asarray(w), "x": fnp.asarray(xs),
                                                             "b": fnp.asarray(b)})
    want = np.stack([np.tanh(xs[i] @ w + b[:, i]) for i in range(B)])
    assert_match(got, [want], "dict in_axes")


# ----------------------------------------------------------------------------------- errors


def test_mismatched_sizes_name_every_argument():
    with pytest.raises(fa.ShapeError) as e:
        fa.vmap(lambda a, b: a + b)(np.ones((3, 2)), np.ones((4, 2)))
    msg = str(e.value)
    assert "argument a" in msg and "argument b" in msg and "size 3" in msg and "size 4" in msg


def test_mismatched_sizes_with_in_axes_name_axes():
    with pytest.raises(fa.ShapeError) as e:
        fa.vmap(lambda a, b: a * b, in_axes=(0, 1))(np.ones((3, 2)), np.ones((2, 5)))
    msg = str(e.value)
    assert "axis 0" in msg and "axis 1" in msg and "size 3" in msg and "size 5" in msg


def test_in_axes_structure_mismatch_names_both_structures():
    with pytest.raises(ValueError) as e:
        fa.vmap(lambda p: p["x"] + p["y"], in_axes=({"x": 0},))({"x": np.ones((3, 2)), "y": np.ones((3, 2))})
    msg = str(e.value)
    assert "{'x': 0}" in msg and "'y'" in msg
    with pytest.raises(ValueError) as e:
        fa.vmap(lambda p: p[0] + p[1], in_axes=((0, 0, 0),))((np.ones((3, 2)), np.ones((3, 2))))
    msg = str(e.value)
    assert "(0, 0, 0)" in msg and "(*, *)" in msg


def test_in_axes_length_mismatch_names_both_counts():
    with pytest.raises(ValueError) as e:
        fa.vmap(lambda a, b: a + b, in_axes=(0, 0, 0))(np.ones((3, 2)), np.ones((3, 2)))
    msg = str(e.value)
    assert "3 entries" in msg and "2 positional arguments" in msg


def test_in_axes_out_of_range():
    with pytest.raises(fa.ShapeError) as e:
        fa.vmap(lambda a: a, in_axes=2)(np.ones((3, 2)))
    msg = str(e.value)
    assert "argument a" in msg and "axis 2" in msg and "(3, 2)" in msg and "[-2, 2)" in msg
