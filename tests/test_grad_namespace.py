"""``grad`` and ``jvp`` of every differentiable ``fnarray.numpy`` function.

The table ``GRAD_SPECS`` has one row per case: a name (``function[variant]``),
a function ``fn(m, *args)`` written once for both namespaces (``m`` is
``fnarray.numpy`` or a shim over ``jax.numpy``), the argument shapes and the
domain the random float64 inputs come from (chosen away from points where the
function is not differentiable). Each row is checked four ways:

- the value against ``jax.numpy`` (under ``jax.enable_x64`` as a context manager);
- ``grad`` of a random weighting of the outputs against ``jax.grad`` of the same;
- ``jvp`` against ``jax.jvp`` and against central finite differences of the function;
- ``<grad, v>`` against the finite-difference directional derivative.

A coverage test builds the list of functions from ``fnarray.numpy.__all__``: every
public name is either in the table or listed, with its reason, as not
differentiable (integer/bool results, dtype information, creation from shapes).
Second derivatives (``grad(grad)``, ``hessian``, ``jacfwd(jacrev)``) are compared
with JAX on a smaller set, and the NaN-safety idioms of ``docs/transforms.md``
are shown against JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import pytest
from helpers import check_traced

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import tree_util


class _JaxNamespace:
    """``jax.numpy`` plus the few names fnarray.numpy has that JAX keeps elsewhere."""

    _EXTRA = {"logsumexp": jsp.logsumexp, "erf": jsp.erf, "erfc": jsp.erfc, "erfinv": jsp.erfinv,
              "top_k": jax.lax.top_k}

    def __getattr__(self, name):
        if name in self._EXTRA:
            return self._EXTRA[name]
        return getattr(jnp, name)


JNS = _JaxNamespace()


# ----------------------------------------------------------------------------------- domains


def U(lo, hi):
    """Uniform in ``[lo, hi)``."""
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def AWAY(lo, hi, gap):
    """Uniform in ``[lo, hi]`` with ``|x| >= gap`` (away from a kink or pole at 0)."""
    def draw(rng, shape):
        mag = rng.uniform(gap, max(abs(lo), abs(hi)), shape)
        return np.clip(np.where(rng.random(shape) < 0.5, -mag, mag), lo, hi)
    return draw


def SPREAD(lo, hi):
    """Values in ``[lo, hi)`` whose pairwise gaps are at least ``(hi - lo) / (4 n)``: sort, max and
    order statistics stay differentiable under a finite-difference step."""
    def draw(rng, shape):
        n = int(np.prod(shape))
        grid = lo + (hi - lo) * (np.arange(n) + 0.5 + rng.uniform(-0.25, 0.25, n)) / n
        return rng.permutation(grid).reshape(shape)
    return draw


def NONINT(lo, hi):
    """Uniform values at least 0.1 away from integers and half-integers (floor, round, mod)."""
    def draw(rng, shape):
        x = rng.uniform(lo, hi, shape)
        frac = x * 2 - np.floor(x * 2)
        return np.where((frac < 0.2) | (frac > 0.8), x + 0.25, x)
    return draw


STD = U(-2.0, 2.0)
POS = U(0.3, 2.5)


class Spec(NamedTuple):
    name: str                       # "function[variant]"; the part before "[" is the fnarray.numpy name
    fn: Callable                    # fn(m, *args)
    shapes: tuple                   # one shape per argument
    domain: Callable | tuple = STD  # one domain for all arguments, or one per argument
    second: bool = False            # also in the second-derivative set
    h: float = 1e-6                 # finite-difference step
    fd_rtol: float = 1e-6           # finite-difference tolerance (float32 round trips need more)

    @property
    def function(self) -> str:
        return self.name.split("[")[0]


S = (2, 3)  # the default shape: small, so that finite differences and JAX stay cheap


def un(name, domain=STD, shape=S, **kw):
    """A unary elementwise function of the same name in both namespaces."""
    return Spec(name, lambda m, x: getattr(m, name)(x), (shape,), domain, **kw)


def bi(name, domain=STD, shapes=(S, S), **kw):
    return Spec(name, lambda m, x, y: getattr(m, name)(x, y), shapes, domain, **kw)


_IDX = np.array([2, 0, 2])
_IDX2 = np.array([[1, 0, 2], [0, 2, 2]])
_MASK = np.array([[True, False, True], [False, True, True]])

GRAD_SPECS = [
    # ---------------------------------------------------------------- elementwise, unary
    un("abs", AWAY(-2, 2, 0.2)),
    un("acos", U(-0.9, 0.9)), un("acosh", U(1.2, 3.0)), un("asin", U(-0.9, 0.9)), un("asinh"),
    un("atan"), un("atanh", U(-0.9, 0.9)),
    un("ceil", NONINT(-2, 2)), un("floor", NONINT(-2, 2)), un("round", NONINT(-2, 2)),
    un("trunc", NONINT(-2, 2)), un("sign", AWAY(-2, 2, 0.2)),
    un("conj"), un("real"), un("imag"), un("angle", AWAY(-2, 2, 0.2)),
    un("cos", second=True), un("cosh"), un("sin", second=True), un("sinh"), un("tan", U(-1.2, 1.2), second=True),
    un("tanh", second=True),
    un("exp", second=True), un("exp2"), un("expm1"),
    un("log", POS, second=True), un("log1p", U(-0.5, 2.0)), un("log2", POS), un("log10", POS),
    un("negative"), un("positive"), un("reciprocal", AWAY(-2, 2, 0.3), second=True),
    un("square"), un("sqrt", POS, second=True), un("cbrt", AWAY(-2, 2, 0.3)),
    un("deg2rad"), un("rad2deg"),
    un("sinc", AWAY(-2, 2, 0.2)), un("nan_to_num"), un("i0", U(-12, 12)),
    un("erf", second=True), un("erfc"), un("erfinv", U(-0.9, 0.9), second=True),
    Spec("asarray", lambda m, x: m.asarray(x), (S,)),
    Spec("array", lambda m, x: m.array(x), (S,)),
    Spec("astype[float32]", lambda m, x: m.astype(m.astype(x, m.float32), m.float64), (S,), h=1e-2, fd_rtol=1e-4),
    Spec("ldexp", lambda m, x: m.ldexp(x, np.array([[1, -2, 0], [3, 0, -1]], np.int32)), (S,)),
    # ---------------------------------------------------------------- elementwise, binary
    bi("add"), bi("subtract"), bi("multiply", second=True), bi("divide", (STD, AWAY(-2, 2, 0.4)), second=True),
    bi("atan2", (STD, AWAY(-2, 2, 0.3))),
    bi("hypot", AWAY(-2, 2, 0.2)), bi("logaddexp", second=True), bi("logaddexp2"),
    bi("maximum", SPREAD(-2, 2)), bi("minimum", SPREAD(-2, 2)), bi("fmax", SPREAD(-2, 2)), bi("fmin", SPREAD(-2, 2)),
    bi("power", (POS, STD), second=True), bi("float_power", (POS, STD)),
    bi("copysign", AWAY(-2, 2, 0.2)),
    bi("remainder", (NONINT(0.3, 5), U(0.7, 1.3))),
    bi("fmod", (NONINT(0.3, 5), U(0.7, 1.3))), bi("floor_divide", (NONINT(0.3, 5), U(0.7, 1.3))),
    bi("heaviside", (AWAY(-2, 2, 0.2), STD)),
    Spec("add[broadcast]", lambda m, x, y: m.add(x, y), ((2, 1, 3), (4, 1)), second=True),
    Spec("multiply[scalar]", lambda m, x: m.multiply(x, 2.5) + 1.0 - x / 3.0, (S,)),
    Spec("power[int exponent]", lambda m, x: m.power(x, 3) + x ** 2, (S,), second=True),
    # ---------------------------------------------------------------- where, clip, select
    Spec("where", lambda m, x, y: m.where(x > 0, x * y, m.sin(y)), (S, S), AWAY(-2, 2, 0.2), second=True),
    Spec("where[broadcast]", lambda m, x, y: m.where(x > 0, x, y), ((2, 3), (3,)), AWAY(-2, 2, 0.2)),
    Spec("clip", lambda m, x: m.clip(x, -0.5, 1.0), (S,), NONINT(-2, 2)),
    Spec("clip[array bounds]", lambda m, x, lo, hi: m.clip(x, lo, hi), (S, (3,), (2, 1)),
         (NONINT(-2, 2), U(-1.9, -1.1), U(1.1, 1.9))),
    Spec("select", lambda m, x: m.select([x > 0.5, x < -0.5], [x * x, m.sin(x)], 0.25), (S,), NONINT(-2, 2)),
    # ---------------------------------------------------------------- reductions
    Spec("sum", lambda m, x: m.sum(x), (S,)),
    Spec("sum[axis]", lambda m, x: m.sum(x, axis=1, keepdims=True), ((2, 3, 2),)),
    Spec("mean", lambda m, x: m.mean(x, axis=(0, 2)), ((2, 3, 2),)),
    Spec("prod", lambda m, x: m.prod(x, axis=0), ((3, 4),), AWAY(-2, 2, 0.3), second=True),
    Spec("max", lambda m, x: m.max(x, axis=1), (S,), SPREAD(-2, 2)),
    Spec("min", lambda m, x: m.min(x), (S,), SPREAD(-2, 2)),
    Spec("max[axis 0]", lambda m, x: m.max(x, axis=0), (S,), SPREAD(-2, 2)),
    Spec("min[axis -1]", lambda m, x: m.min(x, axis=-1), (S,), SPREAD(-2, 2)),
    Spec("nanmax", lambda m, x: m.nanmax(x, axis=0), (S,), SPREAD(-2, 2)),
    Spec("nanmin", lambda m, x: m.nanmin(x, axis=1), (S,), SPREAD(-2, 2)),
    Spec("nansum", lambda m, x: m.nansum(x, axis=0), (S,)),
    Spec("nanmean", lambda m, x: m.nanmean(x, axis=1), (S,)),
    Spec("ptp", lambda m, x: m.ptp(x, axis=1), (S,), SPREAD(-2, 2)),
    Spec("std", lambda m, x: m.std(x, axis=1), ((2, 4),), second=True),
    Spec("var", lambda m, x: m.var(x, ddof=1), ((2, 4),), second=True),
    Spec("std[mean]", lambda m, x: m.std(x, 1, mean=m.mean(x, 1, keepdims=True) + 0.5, correction=1), ((2, 4),)),
    Spec("average", lambda m, x, w: m.average(x, axis=1, weights=w), ((2, 3), (3,)), (STD, POS)),
    Spec("median", lambda m, x: m.median(x, axis=1), ((2, 5),), SPREAD(-2, 2)),
    Spec("percentile", lambda m, x: m.percentile(x, 30.0, axis=0), ((5, 2),), SPREAD(-2, 2)),
    Spec("quantile", lambda m, x: m.quantile(x, np.array([0.1, 0.65]), axis=1), ((2, 5),), SPREAD(-2, 2)),
    Spec("cumsum", lambda m, x: m.cumsum(x, axis=1), ((2, 4),)),
    Spec("cumprod", lambda m, x: m.cumprod(x, axis=0), ((4, 2),), AWAY(-2, 2, 0.3)),
    Spec("cumulative_sum", lambda m, x: m.cumulative_sum(x, axis=0), ((3, 2),)),
    Spec("cumulative_prod", lambda m, x: m.cumulative_prod(x, axis=1), ((2, 4),), AWAY(-2, 2, 0.3)),
    Spec("diff", lambda m, x: m.diff(x, n=2, axis=1), ((2, 5),)),
    Spec("logsumexp", lambda m, x: m.logsumexp(x, axis=1), ((2, 4),), second=True),
    Spec("logsumexp[b]", lambda m, x, b: m.logsumexp(x, b=b), ((2, 4), (2, 4)), (STD, POS)),
    # ---------------------------------------------------------------- manipulation
    Spec("reshape", lambda m, x: m.reshape(x, (3, -1)), ((2, 3, 2),)),
    Spec("ravel", lambda m, x: m.ravel(x) * np.arange(1.0, 7.0), (S,)),
    Spec("transpose", lambda m, x: m.transpose(x, (2, 0, 1)), ((2, 3, 2),)),
    Spec("permute_dims", lambda m, x: m.permute_dims(x, (1, 0, 2)), ((2, 3, 2),)),
    Spec("matrix_transpose", lambda m, x: m.matrix_transpose(x), ((2, 3, 2),)),
    Spec("moveaxis", lambda m, x: m.moveaxis(x, 0, -1), ((2, 3, 2),)),
    Spec("swapaxes", lambda m, x: m.swapaxes(x, 0, 2), ((2, 3, 2),)),
    Spec("squeeze", lambda m, x: m.squeeze(x, axis=1), ((2, 1, 3),)),
    Spec("expand_dims", lambda m, x: m.expand_dims(x, (0, 2)), (S,)),
    Spec("flip", lambda m, x: m.flip(x, axis=1), (S,)),
    Spec("fliplr", lambda m, x: m.fliplr(x), (S,)),
    Spec("flipud", lambda m, x: m.flipud(x), (S,)),
    Spec("roll", lambda m, x: m.roll(x, (1, -2), axis=(0, 1)), (S,)),
    Spec("rot90", lambda m, x: m.rot90(x, k=3), (S,)),
    Spec("tile", lambda m, x: m.tile(x, (2, 1, 2)), (S,)),
    Spec("repeat", lambda m, x: m.repeat(x, np.array([1, 3]), axis=0), (S,)),
    Spec("broadcast_to", lambda m, x: m.broadcast_to(x, (2, 2, 3)), ((1, 3),)),
    Spec("broadcast_arrays", lambda m, x, y: m.broadcast_arrays(x, y), ((2, 1), (3,))),
    Spec("atleast_1d", lambda m, x: m.atleast_1d(x), ((),)),
    Spec("atleast_2d", lambda m, x: m.atleast_2d(x), ((3,),)),
    Spec("atleast_3d", lambda m, x: m.atleast_3d(x), (S,)),
    Spec("concatenate", lambda m, x, y: m.concatenate([x, y], axis=1), ((2, 2), (2, 3))),
    Spec("concat", lambda m, x, y: m.concat([x, y], axis=0), ((1, 3), (2, 3))),
    Spec("stack", lambda m, x, y: m.stack([x, y], axis=1), (S, S)),
    Spec("hstack", lambda m, x, y: m.hstack([x, y]), ((2, 1), (2, 2))),
    Spec("vstack", lambda m, x, y: m.vstack([x, y]), ((3,), (2, 3))),
    Spec("dstack", lambda m, x, y: m.dstack([x, y]), (S, S)),
    Spec("column_stack", lambda m, x, y: m.column_stack([x, y]), ((3,), (3, 2))),
    Spec("split", lambda m, x: m.split(x, [1, 3], axis=1), ((2, 4),)),
    Spec("array_split", lambda m, x: m.array_split(x, 3, axis=1), ((2, 4),)),
    Spec("hsplit", lambda m, x: m.hsplit(x, 2), ((2, 4),)),
    Spec("vsplit", lambda m, x: m.vsplit(x, 2), ((4, 2),)),
    Spec("dsplit", lambda m, x: m.dsplit(x, [1]), ((2, 1, 3),)),
    Spec("unstack", lambda m, x: m.unstack(x, axis=1), (S,)),
    Spec("pad", lambda m, x: m.pad(x, ((1, 0), (0, 2)), constant_values=0.5), (S,)),
    Spec("pad[edge]", lambda m, x: m.pad(x, ((1, 2), (2, 1)), mode="edge"), (S,)),
    Spec("pad[reflect]", lambda m, x: m.pad(x, ((1, 1), (2, 0)), mode="reflect"), (S,)),
    Spec("linspace", lambda m, a, b: m.linspace(a, b, 5), ((), (2,))),
    Spec("linspace[no endpoint]", lambda m, a, b: m.linspace(a, b, 4, endpoint=False), ((2,), (2,))),
    Spec("logspace", lambda m, a, b: m.logspace(a, b, 4), ((), ()), U(-1, 1)),
    Spec("meshgrid", lambda m, x, y: m.meshgrid(x, y, indexing="ij"), ((2,), (3,))),
    # ---------------------------------------------------------------- creation from arrays
    Spec("tril", lambda m, x: m.tril(x, k=-1), ((3, 3),)),
    Spec("triu", lambda m, x: m.triu(x, k=1), ((3, 4),)),
    Spec("diag", lambda m, x: m.diag(x, k=1), ((3,),)),
    Spec("diag[extract]", lambda m, x: m.diag(x, k=-1), ((3, 4),)),
    Spec("diagflat", lambda m, x: m.diagflat(x), ((2, 2),)),
    # ---------------------------------------------------------------- indexing
    Spec("_getitem[basic]", lambda m, x: x[1:, ::-2], ((3, 4),)),
    Spec("_getitem[int, newaxis, ellipsis]", lambda m, x: x[-1, None, ..., 1:], ((3, 2, 4),)),
    Spec("_getitem[advanced]", lambda m, x: x[_IDX, 1:3], ((3, 4),)),
    Spec("_getitem[advanced pair]", lambda m, x: x[np.array([0, 2, 2]), np.array([-1, 0, 1])], ((3, 4),)),
    Spec("_getitem[mask]", lambda m, x: x[_MASK], (S,)),
    Spec("take", lambda m, x: m.take(x, _IDX, axis=1), (S,)),
    Spec("take[flat]", lambda m, x: m.take(x, np.array([5, 0, 5, 2])), (S,)),
    Spec("take_along_axis", lambda m, x: m.take_along_axis(x, _IDX2, axis=1), (S,)),
    Spec("_IndexUpdateHelper[set]", lambda m, x, v: x.at[np.array([0, 2]), 1].set(v), ((3, 3), (2,))),
    Spec("_IndexUpdateHelper[add]", lambda m, x, v: x.at[_IDX].add(v), ((3, 2), (3, 2))),
    Spec("_IndexUpdateHelper[subtract]", lambda m, x, v: x.at[1:].subtract(v), ((3, 2), (2,))),
    Spec("_IndexUpdateHelper[multiply]", lambda m, x, v: x.at[np.array([1, 0])].multiply(v, unique_indices=True),
         ((3, 2), (2, 2))),
    Spec("_IndexUpdateHelper[min]", lambda m, x, v: x.at[np.array([0, 2])].min(v), ((3, 2), (2, 2)), SPREAD(-2, 2)),
    Spec("_IndexUpdateHelper[max]", lambda m, x, v: x.at[np.array([2, 1])].max(v), ((3, 2), (2, 2)), SPREAD(-2, 2)),
    Spec("_IndexUpdateHelper[get]", lambda m, x: x.at[_IDX].get(), ((3, 2),)),
    # ---------------------------------------------------------------- linear algebra
    Spec("matmul", lambda m, x, y: m.matmul(x, y), ((2, 3), (3, 4)), second=True),
    Spec("matmul[batched]", lambda m, x, y: m.matmul(x, y), ((2, 2, 3), (3, 2))),
    Spec("matmul[vector]", lambda m, x, y: m.matmul(x, y), ((3,), (2, 3, 2))),
    Spec("matmul[operator]", lambda m, x, y: (x @ y) @ x, ((3, 3), (3, 3)), second=True),
    Spec("dot", lambda m, x, y: m.dot(x, y), ((2, 3), (3,))),
    Spec("vdot", lambda m, x, y: m.vdot(x, y), (S, S)),
    Spec("inner", lambda m, x, y: m.inner(x, y), ((2, 3), (4, 3))),
    Spec("outer", lambda m, x, y: m.outer(x, y), ((2,), (3,))),
    Spec("convolve", lambda m, x, y: m.convolve(x, y), ((5,), (3,)), second=True),
    Spec("convolve[same, longer v]", lambda m, x, y: m.convolve(x, y, "same"), ((4,), (6,))),
    Spec("correlate", lambda m, x, y: m.correlate(x, y, "full"), ((5,), (3,))),
    Spec("correlate[same, longer v]", lambda m, x, y: m.correlate(x, y, "same"), ((3,), (5,))),
    Spec("vecdot", lambda m, x, y: m.vecdot(x, y, axis=0), ((3, 2), (3, 2))),
    Spec("tensordot", lambda m, x, y: m.tensordot(x, y, axes=([1, 0], [0, 2])), ((3, 2), (2, 4, 3))),
    Spec("einsum[matmul]", lambda m, x, y: m.einsum("ij,jk->ik", x, y), ((2, 3), (3, 2)), second=True),
    Spec("einsum[batch, trace]", lambda m, x, y: m.einsum("bij,bjk->b", x, y), ((2, 2, 3), (2, 3, 2))),
    Spec("einsum[three operands]", lambda m, x, y, z: m.einsum("i,ij,j", x, y, z), ((2,), (2, 3), (3,)),
         second=True),
    Spec("einsum[diagonal]", lambda m, x: m.einsum("ii->i", x), ((3, 3),)),
    Spec("einsum[outer of matrices]", lambda m, x, y: m.einsum("ij,kl->ikjl", x, y), ((1, 3), (2, 2))),
    Spec("kron", lambda m, x, y: m.kron(x, y), ((2, 2), (1, 3))),
    Spec("cross", lambda m, x, y: m.cross(x, y), ((2, 3), (2, 3))),
    Spec("diagonal", lambda m, x: m.diagonal(x, offset=1), ((3, 4),)),
    Spec("trace", lambda m, x: m.trace(x), ((3, 4),)),
    # ---------------------------------------------------------------- sorting
    Spec("sort", lambda m, x: m.sort(x, axis=0), ((3, 2),), SPREAD(-2, 2)),
    Spec("sort[descending]", lambda m, x: -m.sort(-x, axis=-1), ((2, 4),), SPREAD(-2, 2)),
    # the order after the kth element is unspecified: sort the tail before comparing
    Spec("partition", lambda m, x: m.sort(m.partition(x, 2, axis=1)[:, 2:], axis=1), ((2, 5),), SPREAD(-2, 2)),
    Spec("top_k", lambda m, x: m.top_k(x, 2)[0], ((2, 4),), SPREAD(-2, 2)),
    # ---------------------------------------------------------------- NumPy names outside the array API (_extras)
    un("rint", NONINT(-2, 2)), un("fabs", AWAY(-2, 2, 0.2)), un("copy"),
    Spec("around", lambda m, x: m.around(x * 3, 1), (S,), NONINT(-2, 2)),
    Spec("modf", lambda m, x: m.modf(x)[0] + 2 * m.modf(x)[1], (S,), NONINT(-2, 2)),
    Spec("divmod", lambda m, x: m.divmod(x, 0.75)[1], (S,), NONINT(-2, 2)),
    Spec("append", lambda m, x, y: m.append(x, y, axis=0), (S, (1, 3))),
    Spec("rollaxis", lambda m, x: m.rollaxis(x, 2), ((2, 3, 4),)),
    Spec("trapezoid", lambda m, y: m.trapezoid(y, dx=0.5), (S,)),
    Spec("vander", lambda m, x: m.vander(x, 3), ((4,),)),
    Spec("geomspace", lambda m, a: m.geomspace(a, 8.0, 4), ((),), U(1.0, 4.0)),
    Spec("cov", lambda m, x: m.cov(x), ((2, 4),)), Spec("corrcoef", lambda m, x: m.corrcoef(x), ((2, 4),)),
    Spec("polyval", lambda m, p, x: m.polyval(p, x), ((3,), S)),
    Spec("matvec", lambda m, a, b: m.matvec(a, b), ((2, 3), (3,))),
    Spec("vecmat", lambda m, a, b: m.vecmat(a, b), ((2,), (2, 3))),
    Spec("nanvar", lambda m, x: m.nanvar(m.where(x > 1.5, m.nan, x), axis=1), (S,)),
    Spec("nanstd", lambda m, x: m.nanstd(m.where(x > 1.5, m.nan, x), axis=0, ddof=1), ((3, 2),)),
    Spec("nanprod", lambda m, x: m.nanprod(m.where(x > 1.5, m.nan, x), axis=1), (S,)),
    Spec("nancumsum", lambda m, x: m.nancumsum(m.where(x > 1.5, m.nan, x), axis=1), (S,)),
    Spec("nancumprod", lambda m, x: m.nancumprod(m.where(x > 1.5, m.nan, x)), (S,)),
    # ---------------------------------------------------------------- the eleventh session's probe (_binning,
    # _editing, _vectorize): gradients through values, weights and inserted values; positions are static
    Spec("interp", lambda m, x, fp: m.interp(x, np.array([-1.5, -0.2, 0.4, 1.7]), fp), (S, (4,))),
    Spec("histogram", lambda m, x, w: m.histogram(x, bins=3, range=(-2.0, 2.0), weights=w)[0], (S, S)),
    Spec("histogram_bin_edges", lambda m, x: m.histogram_bin_edges(x, bins=3), (S,), SPREAD(-2, 2)),
    Spec("delete", lambda m, x: m.delete(x, 1, axis=1), (S,)),
    Spec("insert", lambda m, x, y: m.insert(x, 1, y, axis=1), (S, (2,))),
    # size=: JAX's own compress and extract need it under jit, where the reference runs
    Spec("compress", lambda m, x: m.compress(np.array([True, False, True]), x, axis=1, size=2), (S,)),
    Spec("extract", lambda m, x: m.extract(_MASK, x, size=5, fill_value=0.5), (S,)),
    Spec("put", lambda m, x, y: m.put(x, np.array([4, 0]), y, inplace=False), (S, (2,))),
    Spec("fill_diagonal", lambda m, x, v: m.fill_diagonal(x, v, inplace=False), ((3, 3), ())),
    Spec("vectorize", lambda m, x, y: m.vectorize(lambda a, b: m.sum(a * b), signature="(n),(n)->()")(x, y),
         (S, (3,))),
    Spec("apply_along_axis", lambda m, x: m.apply_along_axis(lambda v: m.cumsum(v) * v[0], 1, x), (S,)),
    Spec("piecewise", lambda m, x: m.piecewise(x, [x < 0, x >= 0], [lambda v: v * v, lambda v: m.sin(v)]), (S,),
         AWAY(-2, 2, 0.2)),
    Spec("gradient", lambda m, x: m.gradient(x, 0.5, axis=1), ((2, 4),)),
    Spec("gradient[coordinates]", lambda m, x, c: m.gradient(x, m.cumsum(c * c + 0.5), axis=0), ((4, 2), (4,))),
    # ---------------------------------------------------------------- the twenty-fifth session's composites
    # (_composites, _polynomial, _nan_quantiles); NaNs come from where(x > 1.5, nan, x), as nanvar's row
    Spec("nanquantile", lambda m, x, q: m.nanquantile(m.where(x > 1.5, m.nan, x), q, axis=1), ((2, 5), (2,)),
         (SPREAD(-2, 2), U(0.05, 0.95))),
    Spec("nanquantile[nearest, keepdims]", lambda m, x: m.nanquantile(m.where(x > 1.5, m.nan, x), 0.4, axis=0,
                                                                      method="nearest", keepdims=True),
         ((5, 2),), SPREAD(-2, 2)),
    Spec("nanpercentile[midpoint]", lambda m, x: m.nanpercentile(m.where(x > 1.5, m.nan, x), 30.0, axis=1,
                                                                 method="midpoint"), ((2, 5),), SPREAD(-2, 2)),
    Spec("nanmedian", lambda m, x: m.nanmedian(m.where(x > 1.5, m.nan, x), axis=0), ((4, 3),), SPREAD(-2, 2)),
    Spec("polyadd", lambda m, p, q: m.polyadd(p, q), ((3,), (2,))),
    Spec("polysub", lambda m, p, q: m.polysub(p, q), ((2,), (4,))),
    Spec("polymul", lambda m, p, q: m.polymul(p, q), ((3,), (2,))),
    Spec("polyder", lambda m, p: m.polyder(p, 2), ((4,),)),
    Spec("polyint", lambda m, p, k: m.polyint(p, 2, k), ((3,), (2,))),
    Spec("polyfit", lambda m, x, y, w: m.polyfit(x, y, 2, w=w), ((6,), (6,), (6,)), (SPREAD(-2, 2), STD, POS)),
    Spec("ediff1d", lambda m, x, e: m.ediff1d(x, to_end=e, to_begin=0.5), (S, (2,))),
    Spec("unwrap", lambda m, x: m.unwrap(4 * x, axis=0), ((4, 2),), NONINT(-2, 2)),
    Spec("resize", lambda m, x: m.resize(x, (4, 2)), (S,)),
    Spec("choose", lambda m, x, y: m.choose(np.array([[0, 2, 4], [-1, 1, 2]]), [x, y, m.sin(x)], mode="wrap"),
         (S, (3,))),
    Spec("put_along_axis", lambda m, x, v: m.put_along_axis(x, np.array([[2], [0]]), v, 1, inplace=False),
         (S, (2, 1))),
    Spec("fromfunction", lambda m, x: m.fromfunction(lambda i, j: x * i + m.sin(x) * j, (2, 3)), ((),)),
    Spec("apply_over_axes", lambda m, x: m.apply_over_axes(m.sum, x, (0, 2)), ((2, 3, 2),)),
]

# Aliases that are the same function object as a name in the table (checked, not re-run).
ALIASES = {
    "absolute": "abs", "arccos": "acos", "arccosh": "acosh", "arcsin": "asin", "arcsinh": "asinh",
    "arctan": "atan", "arctanh": "atanh", "arctan2": "atan2", "conjugate": "conj", "true_divide": "divide",
    "pow": "power", "mod": "remainder", "degrees": "rad2deg", "radians": "deg2rad", "amax": "max", "amin": "min",
}

# Public names with no derivative to test, by reason (the coverage test keeps this honest).
NOT_DIFFERENTIABLE = {
    "integer or boolean result": (
        "bitwise_and bitwise_left_shift left_shift bitwise_invert invert bitwise_not bitwise_or "
        "bitwise_right_shift right_shift bitwise_xor equal greater greater_equal less less_equal not_equal "
        "isfinite isinf isnan isclose isreal iscomplex signbit logical_and logical_not logical_or logical_xor "
        "gcd lcm all any argmax argmin count_nonzero argpartition argsort argwhere bincount flatnonzero "
        "lexsort nonzero searchsorted unique unique_all unique_counts unique_inverse unique_values "
        "allclose array_equal array_equiv isin isneginf isposinf nanargmax nanargmin digitize unravel_index "
        "ravel_multi_index"),
    "piecewise constant in ulps (no derivative in JAX either)": "nextafter frexp",
    "creates arrays from shapes or scalars": (
        "zeros ones full empty zeros_like ones_like full_like empty_like arange eye "
        "identity tri indices from_dlpack broadcast_shapes tril_indices triu_indices diag_indices "
        "tril_indices_from triu_indices_from diag_indices_from ix_ mgrid ogrid s_ index_exp hanning hamming "
        "blackman bartlett kaiser"),
    "dtypes, constants and introspection": (
        "Array bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 "
        "complex64 complex128 float8_e4m3fn float8_e5m2 int4 uint4 float0 finfo iinfo isdtype result_type can_cast "
        "promote_types dtype "
        "__array_namespace_info__ __array_api_version__ e pi inf nan newaxis euler_gamma issubdtype "
        "UniqueAllResult UniqueCountsResult UniqueInverseResult bool_ generic number integer signedinteger "
        "unsignedinteger inexact floating complexfloating ndim shape size isscalar iscomplexobj isrealobj"),
    "method implementations, covered through the methods in the table": (
        "_copy _reshape_method _transpose_method _view _cummax_method _cummin_method _logcumsumexp_method "
        "_rsqrt_method"),
    "integer result, dtype aliases (twenty-fifth session)": "bitwise_count cdouble complex_ csingle double float_ int_ "
                                                             "single uint",
    "set operations: the result's values are picked by comparisons between the inputs (test_vmap_namespace.py "
    "and test_api_sweep.py check the picks)": "intersect1d setdiff1d setxor1d union1d",
}


# ----------------------------------------------------------------------------------- machinery


def _rng(name):
    return np.random.default_rng(sum(ord(c) * (i + 1) for i, c in enumerate(name)))


def make_args(spec, rng):
    domains = spec.domain if isinstance(spec.domain, tuple) else (spec.domain,) * len(spec.shapes)
    return [np.asarray(d(rng, s), np.float64) for d, s in zip(domains, spec.shapes, strict=True)]


def _leaves(out):
    return tree_util.tree_leaves(out)


def _compiled(f, *args):
    """``jax.jit(f)(*args)``, compiled without LLVM's optimizations: XLA's compile time, not the run,
    dominates these tiny programs, and the optimization level does not change float64 results."""
    return jax.jit(f).lower(*args).compile({"xla_backend_optimization_level": 0})(*args)


def jax_out_shapes(fn, *args):
    """The output leaves' shapes of ``fn(JNS, *args)``, without compiling."""
    with jax.enable_x64(True):
        out = jax.eval_shape(lambda *xs: fn(JNS, *xs), *[jnp.asarray(a) for a in args])
    return [o.shape for o in jax.tree_util.tree_leaves(out)]


def jax_run(f, *args):
    """``jax.jit(f)(*args)`` in 64-bit mode, with the result's leaves as NumPy arrays."""
    with jax.enable_x64(True):
        args = jax.tree_util.tree_map(jnp.asarray, args)
        return jax.tree_util.tree_map(np.asarray, _compiled(f, *args))


def scalarize(m, fn, weights):
    """``sum_k sum(out_k * w_k)`` over the output leaves: a scalar function with a full gradient."""
    def f(*args):
        leaves = tree_util.tree_leaves(fn(m, *args)) if m is fnp else jax.tree_util.tree_leaves(fn(m, *args))
        total = 0.0
        for o, w in zip(leaves, weights, strict=True):
            total = total + m.sum(o * w)
        return total
    return f


def _as_fa(args):
    return [fnp.asarray(a) for a in args]


def assert_allclose(got, want, rtol, atol, msg):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{msg}: shape {got.shape}, expected {want.shape}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=msg)


FD_ATOL = 1e-7
JAX_TOL = dict(rtol=1e-9, atol=1e-11)


def _shift(args, tangents, s):
    return [fnp.asarray(a + s * t) for a, t in zip(args, tangents, strict=True)]


def finite_difference(fn, args, tangents, h=1e-6):
    """Central differences of each output leaf of ``fn(fnp, ...)`` along ``tangents``."""
    hi = _leaves(fn(fnp, *_shift(args, tangents, h)))
    lo = _leaves(fn(fnp, *_shift(args, tangents, -h)))
    return [(np.asarray(a) - np.asarray(b)) / (2 * h) for a, b in zip(hi, lo, strict=True)]


# ----------------------------------------------------------------------------------- tests


def test_table_covers_the_namespace():
    """Every public fnarray.numpy name is in the table or listed as not differentiable."""
    covered = {s.function for s in GRAD_SPECS}
    for alias, name in ALIASES.items():
        assert getattr(fnp, alias) is getattr(fnp, name), f"{alias} is no longer an alias of {name}: add a row"
        assert name in covered
    covered |= set(ALIASES)
    excluded = {n for names in NOT_DIFFERENTIABLE.values() for n in names.split()}
    public = set(fnp.__all__)
    missing = sorted(public - covered - excluded)
    assert not missing, f"fnarray.numpy functions with no grad case and no exclusion reason: {missing}"
    stale = sorted((covered | excluded) - public)
    assert not stale, f"table names that fnarray.numpy does not have: {stale}"
    assert not covered & excluded, f"both tested and excluded: {sorted(covered & excluded)}"


def jax_reference(spec, args, rng):
    """Values, weights, tangents, ``jax.grad`` and ``jax.jvp`` of a row in one ``jax.jit`` (one compile)."""
    with jax.enable_x64(True):
        j_args = [jnp.asarray(a) for a in args]
        shapes = [o.shape for o in jax.tree_util.tree_leaves(jax.eval_shape(lambda *xs: spec.fn(JNS, *xs), *j_args))]
        weights = [rng.standard_normal(s) for s in shapes]
        tangents = [rng.standard_normal(a.shape) for a in args]
        argnums = tuple(range(len(args)))

        def everything(xs, ts):
            values = jax.tree_util.tree_leaves(spec.fn(JNS, *xs))
            grads = jax.grad(scalarize(JNS, spec.fn, weights), argnums=argnums)(*xs)
            _, t_out = jax.jvp(lambda *v: spec.fn(JNS, *v), tuple(xs), tuple(ts))
            return values, grads, jax.tree_util.tree_leaves(t_out)

        out = _compiled(everything, j_args, [jnp.asarray(t) for t in tangents])
        values, grads, t_out = jax.tree_util.tree_map(np.asarray, out)
    return values, weights, tangents, grads, t_out


@pytest.mark.parametrize("spec", GRAD_SPECS, ids=lambda s: s.name)
@pytest.mark.enable_x64
def test_grad_and_jvp(spec):
    rng = _rng(spec.name)
    args = make_args(spec, rng)
    want, weights, tangents, g_jax, t_jax = jax_reference(spec, args, rng)
    got = _leaves(spec.fn(fnp, *_as_fa(args)))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, fa.Array) and g.dtype == np.float64, f"{spec.name}: {type(g)} {g.dtype}"
        assert_allclose(g, w, 1e-12, 1e-13, f"{spec.name}: value")
    argnums = tuple(range(len(args)))

    # grad against jax.grad
    g_fa = fa.grad(scalarize(fnp, spec.fn, weights), argnums=argnums)(*_as_fa(args))
    for i, (g, w) in enumerate(zip(g_fa, g_jax, strict=True)):
        assert g.dtype == np.float64 and g.shape == args[i].shape
        assert_allclose(g, w, **JAX_TOL, msg=f"{spec.name}: grad of argument {i} vs jax.grad")

    # jvp against jax.jvp and finite differences
    def f_fa(*xs):
        return spec.fn(fnp, *xs)

    p_out, t_out = fa.jvp(f_fa, tuple(_as_fa(args)), tuple(_as_fa(tangents)))
    fd = finite_difference(spec.fn, args, tangents, spec.h)
    for k, (p, t, tj, d, w) in enumerate(zip(_leaves(p_out), _leaves(t_out), t_jax, fd, want, strict=True)):
        assert_allclose(p, w, 1e-12, 1e-13, f"{spec.name}: jvp primal {k}")
        assert t.dtype == np.float64
        assert_allclose(t, tj, **JAX_TOL, msg=f"{spec.name}: jvp tangent {k} vs jax.jvp")
        assert_allclose(t, d, spec.fd_rtol, FD_ATOL, msg=f"{spec.name}: jvp tangent {k} vs finite differences")

    # <grad, v> against the directional finite difference
    directional = sum(float(np.sum(d * w)) for d, w in zip(fd, weights, strict=True))
    g_dot_v = sum(float(np.sum(np.asarray(g) * t)) for g, t in zip(g_fa, tangents, strict=True))
    np.testing.assert_allclose(g_dot_v, directional, rtol=spec.fd_rtol, atol=FD_ATOL,
                               err_msg=f"{spec.name}: <grad, v> vs FD")

    # the programs that grad and jvp produce verify
    check_traced(fa.grad(scalarize(fnp, spec.fn, weights), argnums=argnums), *_as_fa(args))
    check_traced(lambda *xs: fa.jvp(f_fa, xs[:len(args)], xs[len(args):]), *_as_fa(args), *_as_fa(tangents))


# ----------------------------------------------------------------------------------- second order

SECOND = [s for s in GRAD_SPECS if s.second]


@pytest.mark.parametrize("spec", SECOND, ids=lambda s: s.name)
@pytest.mark.enable_x64
def test_hessian_and_jacfwd_jacrev(spec):
    """``hessian`` and ``jacfwd(jacrev)`` of the weighted scalar function against ``jax.hessian``."""
    rng = _rng(spec.name + "2")
    args = make_args(spec, rng)
    weights = [rng.standard_normal(s) for s in jax_out_shapes(spec.fn, *args)]
    argnums = tuple(range(len(args)))
    f_fa = scalarize(fnp, spec.fn, weights)
    h_jax = jax_run(jax.hessian(scalarize(JNS, spec.fn, weights), argnums=argnums), *args)
    h_fa = fa.hessian(f_fa, argnums=argnums)(*_as_fa(args))
    h_fr = fa.jacfwd(fa.jacrev(f_fa, argnums=argnums), argnums=argnums)(*_as_fa(args))
    for i in argnums:
        for j in argnums:
            want = np.asarray(h_jax[i][j])
            assert want.shape == args[i].shape + args[j].shape
            assert_allclose(h_fa[i][j], want, **JAX_TOL, msg=f"{spec.name}: hessian block ({i}, {j})")
            assert_allclose(h_fr[i][j], want, **JAX_TOL, msg=f"{spec.name}: jacfwd(jacrev) block ({i}, {j})")
    check_traced(fa.hessian(f_fa, argnums=argnums), *_as_fa(args))


SCALAR_FUNCTIONS = [
    ("sin*exp", lambda m, x: m.sin(x) * m.exp(x), U(-2, 2)),
    ("log1p(x^2)", lambda m, x: m.log1p(x * x), U(-2, 2)),
    ("tanh(x)^3", lambda m, x: m.tanh(x) ** 3, U(-2, 2)),
    ("sqrt/x", lambda m, x: m.sqrt(x) / x, U(0.3, 3)),
    ("erf(x)*cos", lambda m, x: m.erf(x) * m.cos(x), U(-2, 2)),
    ("atan2(x, x^2+1)", lambda m, x: m.arctan2(x, x * x + 1.0), U(-2, 2)),
    ("logaddexp(x, -x)", lambda m, x: m.logaddexp(x, -x), U(-2, 2)),
]


@pytest.mark.parametrize("name,fn,domain", SCALAR_FUNCTIONS, ids=[c[0] for c in SCALAR_FUNCTIONS])
@pytest.mark.enable_x64
def test_grad_of_grad(name, fn, domain):
    """``grad(grad(f))`` and ``grad(grad(grad(f)))`` of scalar functions against JAX."""
    xs = domain(_rng(name), (3,))
    g2 = jax.grad(jax.grad(lambda v: fn(JNS, v)))
    want2, want3 = jax_run(jax.vmap(lambda v: (g2(v), jax.grad(g2)(v))), xs)
    f2 = fa.grad(fa.grad(lambda v: fn(fnp, v)))
    f3 = fa.grad(f2)
    got2, got3 = fa.vmap(lambda v: (f2(v), f3(v)))(fnp.asarray(xs))
    assert got2.dtype == np.float64 and got3.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got2), want2, **JAX_TOL, err_msg=f"{name}: grad(grad) at {xs}")
    np.testing.assert_allclose(np.asarray(got3), want3, rtol=1e-8, atol=1e-10,
                               err_msg=f"{name}: grad(grad(grad)) at {xs}")
    x0 = fnp.asarray(np.float64(xs[0]))  # unmapped, too
    np.testing.assert_allclose(float(f3(x0)), want3[0], rtol=1e-8, atol=1e-10)
    check_traced(f3, x0)


# ----------------------------------------------------------------------------------- complex jvp

COMPLEX_JVP = [
    ("exp", lambda m, z: m.exp(z)),
    ("sin*z", lambda m, z: m.sin(z) * z),
    ("abs", lambda m, z: m.abs(z)),
    ("real+imag", lambda m, z: m.real(z) * m.imag(z)),
    ("conj", lambda m, z: m.conj(z) * z),
    ("angle", lambda m, z: m.angle(z)),
    ("matmul", lambda m, z: m.matmul(z, m.swapaxes(z, 0, 1))),
    ("sqrt", lambda m, z: m.sqrt(z)),
]


@pytest.mark.parametrize("name,fn", COMPLEX_JVP, ids=[c[0] for c in COMPLEX_JVP])
@pytest.mark.enable_x64
def test_complex_jvp_and_real_grad(name, fn):
    """``jvp`` on complex128 inputs against ``jax.jvp``; ``grad`` of ``sum(|f(z)|^2)`` against ``jax.grad``."""
    rng = _rng(name)
    z = rng.standard_normal(S) + 1j * rng.standard_normal(S)
    t = rng.standard_normal(S) + 1j * rng.standard_normal(S)
    _, t_fa = fa.jvp(lambda v: fn(fnp, v), (fnp.asarray(z),), (fnp.asarray(t),))
    t_jax, g_jax = jax_run(lambda v, w: (jax.jvp(lambda u: fn(jnp, u), (v,), (w,))[1],
                                         jax.grad(lambda u: jnp.sum(jnp.abs(fn(jnp, u)) ** 2))(v)), z, t)
    assert t_fa.dtype == np.asarray(t_jax).dtype
    assert_allclose(t_fa, t_jax, **JAX_TOL, msg=f"{name}: complex jvp")
    g_fa = fa.grad(lambda v: fnp.sum(fnp.abs(fn(fnp, v)) ** 2))(fnp.asarray(z))
    assert g_fa.dtype == np.complex128
    assert_allclose(g_fa, g_jax, **JAX_TOL, msg=f"{name}: grad of a real function of complex input")


# ----------------------------------------------------------------------------------- NaN safety


def _naive_sqrt(m):
    return lambda x: m.where(x > 0, m.sqrt(x), 0.0)


def _safe_sqrt(m):
    return lambda x: m.where(x > 0, m.sqrt(m.where(x > 0, x, 1.0)), 0.0)


def _naive_log(m):
    return lambda x: m.where(x > 0, m.log(x), 0.0)


def _safe_log(m):
    return lambda x: m.where(x > 0, m.log(m.where(x > 0, x, 1.0)), 0.0)


@pytest.mark.parametrize("make", [_naive_sqrt, _naive_log], ids=["sqrt", "log"])
def test_naive_where_gives_nan_like_jax(make):
    """The unselected branch's infinite derivative times a zero cotangent is NaN, in JAX and here."""
    want = float(jax_run(jax.grad(make(jnp)), np.float32(0.0)))
    got = fa.grad(make(fnp))(0.0)
    assert np.isnan(want) and np.isnan(float(got))
    assert got.dtype == np.float32


@pytest.mark.parametrize("make", [_safe_sqrt, _safe_log], ids=["sqrt", "log"])
def test_double_where_is_finite(make):
    """The double-``where`` idiom gives a finite gradient at 0 and the true one elsewhere (as JAX)."""
    points = np.array([0.0, -1.5, 0.7, 2.0], np.float32)
    want = jax_run(jax.vmap(jax.grad(make(jnp))), points)
    for x, w in zip(points, want, strict=True):
        got = fa.grad(make(fnp))(float(x))
        assert np.isfinite(float(got))
        np.testing.assert_allclose(float(got), w, rtol=1e-6, err_msg=f"at {x}")
    assert float(fa.grad(make(fnp))(0.0)) == 0.0
    xs = fnp.asarray(np.array([-1.0, 0.0, 0.5, 4.0]))
    g = fa.grad(lambda v: fnp.sum(make(fnp)(v)))(xs)
    assert np.all(np.isfinite(np.asarray(g)))
    check_traced(fa.grad(lambda v: fnp.sum(make(fnp)(v))), xs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logsumexp_grad_large_inputs(dtype):
    """``grad(fa.nn.logsumexp)`` at inputs of 1e4 is finite and equals softmax (float64 reference)."""
    x = np.array([1e4, 1e4 - 1.0, 1e4 + 2.0, -1e4], dtype)
    g = fa.grad(fa.nn.logsumexp)(fnp.asarray(x))
    assert g.dtype == dtype
    assert np.all(np.isfinite(np.asarray(g)))
    x64 = x.astype(np.float64)
    softmax = np.exp(x64 - x64.max()) / np.exp(x64 - x64.max()).sum()
    np.testing.assert_allclose(np.asarray(g, np.float64), softmax, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-7)
    want = jax_run(jax.grad(jax.nn.logsumexp), x)
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-7)
    v = fnp.asarray(np.full((2, 3), 1e4, dtype))
    gn = fa.grad(lambda a: fnp.sum(fnp.logsumexp(a, axis=1)))(v)
    np.testing.assert_allclose(np.asarray(gn, np.float64), np.full((2, 3), 1 / 3), rtol=1e-6)


# ----------------------------------------------------------------------------------- errors


def test_grad_of_non_scalar_names_jacrev_and_vjp():
    with pytest.raises(TypeError) as e:
        fa.grad(lambda x: fnp.sin(x))(np.ones(3))
    msg = str(e.value)
    assert "(3,)" in msg and "jacrev" in msg and "vjp" in msg


def test_grad_of_integer_argument_raises_dtype_error():
    with pytest.raises(fa.DTypeError) as e:
        fa.grad(lambda x, n: fnp.sum(x * n), argnums=(0, 1))(np.ones(3), np.arange(3, dtype=np.int32))
    msg = str(e.value)
    assert "argument 1" in msg and "int32" in msg and "allow_int" in msg
    assert isinstance(e.value, TypeError)


def test_grad_allow_int_gives_float0():
    g = fa.grad(lambda x, n: fnp.sum(x * n), argnums=(0, 1), allow_int=True)(np.ones(3),
                                                                            np.arange(3, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(g[0]), np.arange(3.0))
    assert g[1].dtype == fnp.float0 and g[1].shape == (3,)
    with jax.enable_x64(True):
        gj = jax.grad(lambda x, n: jnp.sum(x * n), argnums=(0, 1), allow_int=True)(jnp.ones(3), jnp.arange(3))
    assert np.asarray(gj[1]).dtype == jax.dtypes.float0


@pytest.mark.enable_x64
def test_reverse_mode_through_while_loop_says_what_to_use():
    def f(x):
        return fa.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, fnp.sin(c[1])), (0, x))[1]
    with pytest.raises(Exception) as e:
        fa.grad(f)(1.0)
    msg = str(e.value)
    assert "while_loop" in msg and "scan" in msg and "fori_loop" in msg
    # forward mode works and agrees with the unrolled derivative
    _, t = fa.jvp(f, (np.float64(1.0),), (np.float64(1.0),))
    with jax.enable_x64(True):
        want = jax.grad(lambda v: jnp.sin(jnp.sin(jnp.sin(v))))(1.0)
    np.testing.assert_allclose(float(t), float(want), rtol=1e-12)
