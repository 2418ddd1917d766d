"""``fnarray.experimental.pallas``: kernels from JAX's Pallas documentation on every device, against
``jax.experimental.pallas`` with ``interpret=True`` on the same inputs (the oracle), the transforms (jit, vmap,
custom_vjp, grad's error) and the bad inputs of issue 29 (each a clear error).

The kernels below are written once as functions of ``(jnp, pl, ShapeDtypeStruct)``: the same source runs
with ``jax.numpy``/``jax.experimental.pallas`` and with ``fnarray.numpy``/``fnarray.experimental.pallas``.
Every device runs them with ``fallback="error"`` (a kernel of its own, or JAX's Pallas on jax), except mlx
without Metal, whose interpreter fallback is expected.

Tiers (docs/design.md, "Testing"): a matrix over ``compiler_params`` (hints that only opencl and webgpu read) runs
whole on numpy:0, opencl and webgpu; jax and mlx, which ignore the hints, run it with one setting of them
(``_hints_parity``).
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl
from fnarray.lowering.mlx.pallas import metal_available
from helpers import fallback_mode

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jpl = pytest.importorskip("jax.experimental.pallas")

rng = np.random.default_rng(29)


def _interpreted(device, aliased):
    """Whether ``device`` runs pallas_call in the interpreter (expected): mlx, except a GPU with Metal for a
    call without ``input_output_aliases`` (``mx.fast.metal_kernel`` makes fresh outputs)."""
    if device.backend != "mlx":
        return False
    return aliased or device.platform != "gpu" or not metal_available()


@contextlib.contextmanager
def own_kernels(device, aliased=False):
    """``fallback="error"`` where the backend runs pallas_call itself (mlx on a Metal GPU too, unless the call is
    ``aliased``); elsewhere on mlx the interpreter runs it (expected)."""
    with fallback_mode("silent" if _interpreted(device, aliased) else "error"), warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        yield


# ------------------------------------------------------------------------------------------ the docs' kernels


def doc_kernels(np_, pl_, sds):
    """The quickstart's ``add_vectors``, its ``matmul`` with BlockSpecs (and the version accumulating over a
    k axis of the grid), and a row softmax, written against the namespaces given."""

    def add_vectors_kernel(x_ref, y_ref, o_ref):
        x, y = x_ref[...], y_ref[...]
        o_ref[...] = x + y

    def add_vectors(x, y):
        return pl_.pallas_call(add_vectors_kernel, out_shape=sds(x.shape, x.dtype))(x, y)

    def matmul_kernel(x_ref, y_ref, z_ref):
        z_ref[...] = x_ref[...] @ y_ref[...]

    def matmul(x, y):
        return pl_.pallas_call(
            matmul_kernel, out_shape=sds((x.shape[0], y.shape[1]), x.dtype), grid=(2, 2),
            in_specs=[pl_.BlockSpec((x.shape[0] // 2, x.shape[1]), lambda i, j: (i, 0)),
                      pl_.BlockSpec((y.shape[0], y.shape[1] // 2), lambda i, j: (0, j))],
            out_specs=pl_.BlockSpec((x.shape[0] // 2, y.shape[1] // 2), lambda i, j: (i, j)))(x, y)

    def matmul_k_kernel(x_ref, y_ref, z_ref):
        @pl_.when(pl_.program_id(2) == 0)
        def _():
            z_ref[...] = np_.zeros_like(z_ref)
        z_ref[...] += x_ref[...] @ y_ref[...]

    def matmul_k(x, y, bm=8, bk=8, bn=8):
        m, k = x.shape
        n = y.shape[1]
        return pl_.pallas_call(
            matmul_k_kernel, out_shape=sds((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl_.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl_.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl_.BlockSpec((bm, bn), lambda i, j, kk: (i, j)))(x, y)

    def softmax_kernel(x_ref, o_ref):
        x = x_ref[...]
        e = np_.exp(x - np_.max(x, axis=-1, keepdims=True))
        o_ref[...] = e / np_.sum(e, axis=-1, keepdims=True)

    def softmax(x, block_rows=2):
        return pl_.pallas_call(
            softmax_kernel, out_shape=sds(x.shape, x.dtype), grid=(x.shape[0] // block_rows,),
            in_specs=[pl_.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0))],
            out_specs=pl_.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0)))(x)

    def row_sum_kernel(x_ref, o_ref):
        def body(i, acc):
            return acc + x_ref[:, pl_.ds(i * 4, 4)]
        acc = jax_or_fa_fori(0, x_ref.shape[1] // 4, body, np_.zeros((x_ref.shape[0], 4), np_.float32))
        o_ref[...] = np_.sum(acc, axis=1)

    def row_sums(x):
        return pl_.pallas_call(
            row_sum_kernel, out_shape=sds((x.shape[0],), x.dtype), grid=(x.shape[0] // 4,),
            in_specs=[pl_.BlockSpec((4, x.shape[1]), lambda i: (i, 0))],
            out_specs=pl_.BlockSpec((4,), lambda i: (i,)))(x)

    jax_or_fa_fori = jax.lax.fori_loop if np_ is jnp else fa.lax.fori_loop
    return {"add_vectors": add_vectors, "matmul": matmul, "matmul_k": matmul_k, "softmax": softmax,
            "row_sums": row_sums}


def _jax_pl():
    """JAX's Pallas with interpret=True on every pallas_call (the oracle)."""
    class _P:
        def __getattr__(self, name):
            return getattr(jpl, name)

        @staticmethod
        def pallas_call(*a, **k):
            return jpl.pallas_call(*a, interpret=True, **k)
    return _P()


OURS = doc_kernels(fnp, pl, pl.ShapeDtypeStruct)
THEIRS = doc_kernels(jnp, _jax_pl(), jax.ShapeDtypeStruct)
INPUTS = {
    "add_vectors": lambda: (rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)),
    "matmul": lambda: (rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)),
    "matmul_k": lambda: (rng.standard_normal((16, 24)).astype(np.float32),
                         rng.standard_normal((24, 16)).astype(np.float32)),
    "softmax": lambda: (rng.standard_normal((6, 10)).astype(np.float32) * 3,),
    "row_sums": lambda: (rng.standard_normal((8, 12)).astype(np.float32),),
}


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_doc_kernels_match_jax_pallas(name, device):
    args = INPUTS[name]()
    want = np.asarray(THEIRS[name](*[jnp.asarray(a) for a in args]))
    with own_kernels(device):
        got = OURS[name](*[fa.device_put(a, device) for a in args])
        jitted = fa.jit(OURS[name])(*[fa.device_put(a, device) for a in args])
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=2e-5, atol=2e-6)


# ------------------------------------------------------------------------------------------ masks and refs


def _masked_add(x, y, block=16):
    n = x.shape[0]

    def kernel(x_ref, y_ref, o_ref):
        pid = pl.program_id(0)
        offs = pid * block + fnp.arange(block)
        mask = offs < n
        xv = pl.load(x_ref, pl.ds(pid * block, block), mask=mask, other=0.0)
        yv = pl.load(y_ref, pl.ds(pid * block, block), mask=mask, other=0.0)
        pl.store(o_ref, pl.ds(pid * block, block), xv + yv, mask=mask)
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(pl.cdiv(n, block),))(x, y)


def test_masked_loads_and_stores(device):
    x, y = (rng.standard_normal(37).astype(np.float32) for _ in range(2))
    with own_kernels(device):
        got = _masked_add(fa.device_put(x, device), fa.device_put(y, device))
    np.testing.assert_allclose(np.asarray(got), x + y, rtol=1e-6)


def test_padded_blocks_with_mask(device):
    """A block that does not divide the array: the last block is padded, its loads masked, its stores dropped."""
    x = rng.standard_normal(10).astype(np.float32)

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        mask = i * 4 + fnp.arange(4) < 10
        o_ref[...] = pl.load(x_ref, (slice(None),), mask=mask, other=0.0) * 2.0

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((10,), fnp.float32), grid=(3,),
                       in_specs=[pl.BlockSpec((4,), lambda i: (i,))], out_specs=pl.BlockSpec((4,), lambda i: (i,)))
    with own_kernels(device):
        got = f(fa.device_put(x, device))
    np.testing.assert_allclose(np.asarray(got), 2 * x, rtol=1e-6)


def test_zero_size_arrays(device):
    """Whole-array refs of size 0 (no grid) and an empty grid return empty results, as in JAX's Pallas
    (a whole-array block of an empty axis once divided by zero)."""
    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    for shape in [(0,), (0, 16), (3, 0)]:
        z = fa.device_put(np.zeros(shape, np.float32), device)
        with own_kernels(device):
            got = pl.pallas_call(add, out_shape=pl.ShapeDtypeStruct(shape, fnp.float32))(z, z)
            jitted = fa.jit(lambda a: pl.pallas_call(add, out_shape=pl.ShapeDtypeStruct(shape, fnp.float32))(a, a))(z)
        assert np.asarray(got).shape == shape and np.asarray(jitted).shape == shape


def _unstored_kernels():
    """Kernels that leave part of their output unwritten, or read it before writing it: ``(name, f, want)``
    for an input ``x`` of 16 float32s (``want(x)`` in float64, the unwritten elements 0)."""
    def first_half(x_ref, o_ref):
        o_ref[:8] = x_ref[:8] * 2.0
    half = pl.pallas_call(first_half, out_shape=pl.ShapeDtypeStruct((16,), fnp.float32))

    def one_block(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    spec = pl.BlockSpec((8,), lambda i: (0,))   # both instances write block 0; block 1 is never written
    blocks = pl.pallas_call(one_block, out_shape=pl.ShapeDtypeStruct((16,), fnp.float32), grid=(2,),
                            in_specs=[spec], out_specs=spec)

    def first_only(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...] * 3.0
    spec2 = pl.BlockSpec((8,), lambda i: (i,))
    when = pl.pallas_call(first_only, out_shape=pl.ShapeDtypeStruct((16,), fnp.float32), grid=(2,),
                          in_specs=[spec2], out_specs=spec2)

    def accumulate(x_ref, o_ref, p_ref):
        o_ref[...] += x_ref[...]   # reads the output before any write: it starts as zeros

    two = pl.pallas_call(accumulate, out_shape=(pl.ShapeDtypeStruct((16,), fnp.float32),
                                                pl.ShapeDtypeStruct((4,), fnp.int32)))
    return [("half", half, lambda x: np.concatenate([2 * x[:8], np.zeros(8)])),
            ("one_block", blocks, lambda x: np.concatenate([x[:8] + 1, np.zeros(8)])),
            ("when", when, lambda x: np.concatenate([3 * x[:8], np.zeros(8)])),
            ("accumulate", lambda x: two(x)[0], lambda x: x.astype(np.float64)),
            ("untouched", lambda x: two(x)[1], lambda x: np.zeros(4))]


def test_unstored_results_start_as_zeros(device):
    """What a kernel never stores is 0 on the numpy interpreter and the kernel backends (opencl, webgpu: a fill
    launch before the kernel; mlx: ``init_value=0``), not a reused buffer's old values (docs/kernels.md
    "Results the kernel does not write"); jax:0 follows JAX (unspecified: NaN in its interpreter), not checked."""
    if device.backend == "jax":
        pytest.skip("JAX leaves unwritten results unspecified (its interpreter fills NaN)")
    x = rng.standard_normal(16).astype(np.float32)
    for name, f, want in _unstored_kernels():
        for _ in range(2):   # a freed buffer of old values is there to be reused by the second call
            junk = fa.device_put(np.full(64, 7.0, np.float32), device) + 1.0
            fa.block_until_ready(junk)
            del junk
            with own_kernels(device):
                got = fa.jit(f)(fa.device_put(x, device))
            np.testing.assert_allclose(np.asarray(got), want(x), rtol=1e-6, err_msg=name)


def test_zero_fill_only_where_a_kernel_may_not_write_everything():
    """The fill launch is left out where every block is written whole before it is read (``stores_everything``):
    the docs' kernels, the k-accumulating product zeroed at ``k == 0``, a result carried unused through a
    ``fori_loop`` (flash attention); it is there for the kernels of ``_unstored_kernels``."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]
    if not devs:
        pytest.skip("no kernel backend")
    d = devs[0]
    x = fa.device_put(rng.standard_normal(16).astype(np.float32), d)
    for name, f, _ in _unstored_kernels():
        with own_kernels(d):
            assert "pallas_zero_fill" in fa.jit(f).lower(x).as_text(), name
    from examples.kernels import flash_attention
    k = doc_kernels(fnp, pl, pl.ShapeDtypeStruct)
    a = fa.device_put(rng.standard_normal((32, 32)).astype(np.float32), d)
    q = fa.device_put(rng.standard_normal((1, 32, 16)).astype(np.float32), d)
    cases = [(k["add_vectors"], (x, x)), (k["matmul"], (a, a)), (k["matmul_k"], (a, a)), (k["softmax"], (a,)),
             (k["row_sums"], (a,)), (flash_attention.flash_attention, (q, q, q))]
    for f, args in cases:
        with own_kernels(d):
            text = fa.jit(f).lower(*args).as_text()
        assert "pallas" in text and "pallas_zero_fill" not in text, f


def test_index_map_past_the_array_raises_on_every_backend(device):
    """A block index past the array at a corner of the grid raises IndexError when the call is made (the
    interpreter's error), not only on numpy: on a device the kernel would read and write past the buffer."""
    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    x = fa.device_put(np.ones(16, np.float32), device)
    f = pl.pallas_call(add, out_shape=pl.ShapeDtypeStruct((16,), fnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((8,), lambda i: (i + 1,))] * 2,
                       out_specs=pl.BlockSpec((8,), lambda i: (i,)))
    with own_kernels(device), pytest.raises(IndexError, match="block 2 on axis 0, past the end"):
        f(x, x)
    with own_kernels(device), pytest.raises(IndexError, match="past the end"):
        fa.jit(f)(x, x)


def test_scratch_and_aliases(device):
    """A scratch ref in work-group memory, and an output aliased to its input (it starts as the input)."""
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def kernel(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] * 3.0
        o_ref[0, :] = s_ref[1, :] + o_ref[0, :]

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), scratch_shapes=[pl.Local((4, 8),
                       fnp.float32)], input_output_aliases={0: 0})
    want = x.copy()
    want[0] = 3 * x[1] + x[0]
    with own_kernels(device, aliased=True):
        got = f(fa.device_put(x, device))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def _acc_matmul(zero, swapped, scale=None, bm=16, bn=32, bk=8):
    """``c + x @ y`` (``c`` aliased to the output) or ``x @ y`` (``zero``) accumulated over a ``k`` grid axis."""
    def kernel(x_ref, y_ref, c_ref, o_ref):
        if zero:
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = fnp.zeros_like(o_ref)
        p = fnp.dot(x_ref[...], y_ref[...])
        if scale is not None:
            p = p * scale
        o_ref[...] = p + o_ref[...] if swapped else o_ref[...] + p

    def f(x, y, c):
        (m, k), n = x.shape, y.shape[1]
        return pl.pallas_call(
            kernel, out_shape=pl.ShapeDtypeStruct((m, n), x.dtype), grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                      pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)), input_output_aliases={2: 0})(x, y, c)
    return f


@pytest.mark.parametrize("zero,swapped,scale", [(True, False, None), (False, True, None), (True, True, 2.0)])
def test_k_accumulating_matmul(device, zero, swapped, scale):
    """The k-accumulating product: CPU devices walk the k axis in one work-group, the output tile in registers
    (``_accumulating_dot``; a scaled product is another body and takes the general path); the result is the same."""
    x = rng.standard_normal((32, 40)).astype(np.float32)
    y = rng.standard_normal((40, 64)).astype(np.float32)
    c = rng.standard_normal((32, 64)).astype(np.float32)
    want = (0 if zero else c.astype(np.float64)) + (scale or 1.0) * (x.astype(np.float64) @ y)
    with own_kernels(device, aliased=True):
        got = fa.jit(_acc_matmul(zero, swapped, scale))(*[fa.device_put(a, device) for a in (x, y, c)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def _decay_kernel(seq):
    """``o = o * 0.5 + x`` per grid step, zeroed where every axis in ``seq`` is 0: the result depends on the
    order the steps of one output block run in (a later step halves what the earlier ones added)."""
    def kernel(x_ref, o_ref):
        first = pl.program_id(seq[0]) == 0
        for a in seq[1:]:
            first = fnp.logical_and(first, pl.program_id(a) == 0)

        @pl.when(first)
        def _():
            o_ref[...] = fnp.zeros_like(o_ref)
        o_ref[...] = o_ref[...] * 0.5 + x_ref[...]
    return kernel


def _decay_reference(x, grid, step_of, block_of, rows):
    """NumPy float64: the grid's instances one after another in Pallas's order (row-major), each halving its
    output block and adding its ``x`` block (``step_of(pid)``: the step's index into ``x``, ``block_of(pid)``:
    the output's row block); zeroed before the first step."""
    out = np.zeros((x.shape[1], x.shape[2]))
    seen = set()
    for pid in np.ndindex(*grid):
        i = block_of(pid)
        sl = slice(i * rows, (i + 1) * rows)
        if i not in seen:
            out[sl], _ = 0.0, seen.add(i)
        out[sl] = out[sl] * 0.5 + x[step_of(pid), sl].astype(np.float64)
    return out


#: grid, the axes the output ignores (walked in order inside one block's instances), step of x, output block, the
#: block's (rows, cols): big enough that on main, where each instance was a work-group, PoCL's and lavapipe's
#: threads ran some of one block's instances at once or out of order in most calls (the first case in every call)
_REVISITS = {"last": ((4, 48), (1,), lambda p: p[1], lambda p: p[0], (32, 256)),
             "first": ((64, 4), (0,), lambda p: p[0], lambda p: p[1], (64, 256)),
             "two": ((8, 4, 6), (0, 2), lambda p: p[0] * 6 + p[2], lambda p: p[1], (32, 256))}


@pytest.mark.parametrize("case", sorted(_REVISITS))
def test_revisited_block_runs_its_steps_in_order(device, case):
    """Grid instances that write the same output block (along axes its index map ignores) run one after another
    in the grid's row-major order, as Pallas's sequential grid: ``o = o * 0.5 + x`` (which the matched product
    form does not take) against NumPy's float64 loop over the grid. On opencl/webgpu they were separate
    work-groups, which ran at once and in any order (a race: the CI's scaled k-accumulating product); called three
    times, as a race shows in some calls only."""
    grid, seq, step_of, block_of, (rows, cols) = _REVISITS[case]
    nb = grid[[a for a in range(len(grid)) if a not in seq][0]]
    steps = math.prod(grid[a] for a in seq)
    x = rng.standard_normal((steps, nb * rows, cols)).astype(np.float32)

    def imap_x(*p):
        return (step_of(p), block_of(p), 0)

    f = pl.pallas_call(_decay_kernel(seq), out_shape=pl.ShapeDtypeStruct((nb * rows, cols), fnp.float32), grid=grid,
                       in_specs=[pl.BlockSpec((None, rows, cols), imap_x)],
                       out_specs=pl.BlockSpec((rows, cols), lambda *p: (block_of(p), 0)))
    want = _decay_reference(x, grid, step_of, block_of, rows)
    g, xd = fa.jit(f), fa.device_put(x, device)
    with own_kernels(device):
        for _ in range(3):   # a race shows in some calls only
            np.testing.assert_allclose(np.asarray(g(xd)), want, rtol=1e-5, atol=1e-5)


def test_scaled_k_accumulating_matmul_many_steps(device):
    """The scaled k-accumulating product (the general path, not ``_accumulating_dot``'s matched form) over 32
    ``k`` steps: each output block's steps accumulate in order (before, concurrent work-groups lost updates)."""
    x = rng.standard_normal((32, 256)).astype(np.float32)
    y = rng.standard_normal((256, 64)).astype(np.float32)
    c = np.zeros((32, 64), np.float32)
    want = 2.0 * (x.astype(np.float64) @ y)
    with own_kernels(device, aliased=True):
        got = fa.jit(_acc_matmul(True, True, 2.0))(*[fa.device_put(a, device) for a in (x, y, c)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def _decay_call(grid, out_map, x_map, rows, cols, nb, extra=False):
    """``o = o * 0.5 + x`` per instance, ``o`` starting as an aliased ``c`` (``(nb * rows, cols)``); ``x``
    blocks ``(rows, cols)`` at ``x_map``; ``extra``: a second output (``x``'s shape) each instance writes its own
    block of (``x * 2`` at ``x_map``), which moves along every axis."""
    def kernel(x_ref, c_ref, *refs):
        o_ref = refs[0]
        o_ref[...] = o_ref[...] * 0.5 + x_ref[...]
        if extra:
            refs[1][...] = x_ref[...] * 2.0

    def f(x, c):
        xs, os_ = pl.BlockSpec((None, rows, cols), x_map), pl.BlockSpec((rows, cols), out_map)
        shapes = [pl.ShapeDtypeStruct(c.shape, c.dtype)] + ([pl.ShapeDtypeStruct(x.shape, x.dtype)] if extra else [])
        return pl.pallas_call(kernel, out_shape=shapes, grid=grid, in_specs=[xs, os_],
                              out_specs=[os_] + ([xs] if extra else []), input_output_aliases={1: 0})(x, c)
    return f


def _decay_loop(x, c, grid, out_map, x_map, rows):
    """NumPy float64: ``_decay_call``'s first output, the grid's instances one after another (row-major)."""
    out = c.astype(np.float64)
    for pid in np.ndindex(*grid):
        i, (s, j, _) = out_map(*pid)[0], x_map(*pid)
        out[i * rows:(i + 1) * rows] = out[i * rows:(i + 1) * rows] * 0.5 + x[s, j * rows:(j + 1) * rows]
    return out


#: grid, the output's index map, x's (step, row block, 0): pairs of instances sharing a block through ``i // 2``
#: (a map that depends on ``i`` but not one to one), and a second output that moves along ``k`` while the first
#: ignores it
_SHARED_BLOCKS = {"halves": ((8, 6), lambda i, k: (i // 2, 0), lambda i, k: (k, i // 2, 0), 4),
                  "two_outputs": ((4, 12), lambda i, k: (i, 0), lambda i, k: (k, i, 0), 4)}


#: the capabilities a kernel backend's device is also run with (``helpers.kernel_capabilities``): 3 work-groups
#: per dispatch (each walking several blocks' instances), and a GPU's (tiles in work-group memory)
_FORMS = [{}, {"max_dispatch": 3}, {"tiling_pays": True, "local_memory": True, "matmul_tiling": "local",
                                    "uniform_guard": False}]


@pytest.mark.parametrize("case", sorted(_SHARED_BLOCKS))
def test_instances_sharing_a_block_run_in_order(device, case):
    """Instances whose output block is the same (``revisited_axes``) run in the grid's order on every device;
    on opencl/webgpu in every form of the kernel (``_FORMS``). NumPy's float64 loop over the grid is the
    reference; the second output of ``two_outputs`` (each instance its own block) is ``2 * x``."""
    from helpers import kernel_capabilities
    grid, out_map, x_map, nb = _SHARED_BLOCKS[case]
    rows, cols = 16, 64
    steps = max(x_map(*p)[0] for p in np.ndindex(*grid)) + 1
    x = rng.standard_normal((steps, nb * rows, cols)).astype(np.float32)
    c = rng.standard_normal((nb * rows, cols)).astype(np.float32)
    want = _decay_loop(x, c, grid, out_map, x_map, rows)
    extra = case == "two_outputs"
    for change in _FORMS if device.backend in ("opencl", "webgpu") else _FORMS[:1]:
        with own_kernels(device, aliased=True), \
                kernel_capabilities(device, **change) if change else contextlib.nullcontext():
            got = fa.jit(_decay_call(grid, out_map, x_map, rows, cols, nb, extra))(
                *[fa.device_put(a, device) for a in (x, c)])
        np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-5, atol=1e-5, err_msg=str(change))
        if extra:
            np.testing.assert_array_equal(np.asarray(got[1]), x * 2)


def test_revisited_axes_follow_the_output_index_maps():
    """``revisited_axes``: the grid axes along which some output's index map does not move its block one to
    one (ignored, ``i // 2``, ``min``, ``i + j``), for outputs the body reads or writes other than atomically;
    axes of one index never count."""
    from fnarray.core.pallas import pallas_call_p
    from fnarray.lowering.kernels.groups.pallas import revisited_axes

    def axes(grid, out_map, kernel=None, out_shape=(64, 64), block=(8, 8)):
        def store(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        f = pl.pallas_call(kernel or store, out_shape=pl.ShapeDtypeStruct(out_shape, fnp.float32), grid=grid,
                           in_specs=[pl.BlockSpec(block, lambda *p: (0, 0))],
                           out_specs=None if out_map is None else pl.BlockSpec(block, out_map))
        prog = fa.make_ir(f)(np.zeros((64, 64), np.float32))
        eqn = next(e for e in prog.eqns if e.primitive is pallas_call_p)
        return revisited_axes(eqn.params)

    assert axes((8, 8), lambda i, j: (i, j)) == ()
    assert axes((8, 8, 4), lambda i, j, k: (i, j)) == (2,)
    assert axes((4, 8, 8), lambda k, i, j: (i, j)) == (0,)
    assert axes((8, 1, 8), lambda i, k, j: (i, j)) == ()          # one index: nothing to order
    assert axes((4, 8), lambda i, j: (2 * i + 1, 7 - j)) == ()
    assert axes((8, 8), lambda i, j: (i // 2, j)) == (0,)
    assert axes((8, 8), lambda i, j: (fnp.minimum(i, 3), j)) == (0,)
    assert axes((4, 4), lambda i, j: (i + j, 0), out_shape=(64, 8)) == (0, 1)
    assert axes((4, 4), None, out_shape=(8, 8)) == (0, 1)   # a whole-array output: every instance's block

    def atomic(x_ref, o_ref):
        pl.atomic_add(o_ref, (slice(None), slice(None)), x_ref[...])
    assert axes((4, 4), lambda i, j: (0, 0), atomic, out_shape=(8, 8)) == ()


def test_k_accumulating_matmul_renders_without_barriers():
    """On a CPU OpenCL device the matched body renders as one loop over k per work item: no barrier, and the
    instances of one output block are one work-group (not several updating it unordered)."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "opencl"]
    if not devs or devs[0].impl.capabilities(devs[0]).matmul_tiling != "register":
        pytest.skip("no CPU OpenCL device")
    args = [fa.device_put(rng.standard_normal(s).astype(np.float32), devs[0]) for s in ((32, 40), (40, 64), (32, 64))]
    with own_kernels(devs[0], aliased=True):
        text = fa.jit(_acc_matmul(True, False)).lower(*args).as_text()
    assert "pallas" in text and "barrier(" not in text
    assert "(long)" in text   # the wide addresses the tile's column loads share


def _plain_matmul(bm, bn, bk, squeeze=False, params=None, reverse=False):
    """``x @ y`` accumulated over a ``k`` grid axis, zeroed at ``k == 0``, no aliases (the example's form);
    ``squeeze``: the operands and result carry a leading axis of 1 that the blocks drop; ``params``: the
    ``compiler_params``; ``reverse``: the blocks of k taken last to first (they do not follow each other along
    the contraction: a loop per grid step, ``_walks_contraction``)."""
    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = fnp.zeros_like(o_ref)
        o_ref[...] += fnp.dot(x_ref[...], y_ref[...])

    def spec(shape, f):
        return pl.BlockSpec((None,) + shape, lambda i, j, kk: (0,) + f(i, j, kk)) if squeeze else pl.BlockSpec(
            shape, f)

    def f(x, y):
        (m, k), n = x.shape[-2:], y.shape[-1]
        nk = k // bk

        def at(kk):
            return nk - 1 - kk if reverse else kk
        return pl.pallas_call(
            kernel, out_shape=pl.ShapeDtypeStruct(x.shape[:-1] + (n,), x.dtype), grid=(m // bm, n // bn, nk),
            in_specs=[spec((bm, bk), lambda i, j, kk: (i, at(kk))), spec((bk, bn), lambda i, j, kk: (at(kk), j))],
            out_specs=spec((bm, bn), lambda i, j, kk: (i, j)), compiler_params=params)(x, y)
    return f


#: (m, k, n), (bm, bn, bk), squeeze, whether a CPU WebGPU adapter reads the operands as vectors
_PLAIN_MATMULS = [((32, 40, 64), (16, 32, 8), False, True), ((24, 36, 48), (8, 24, 12), True, True),
                  ((16, 10, 16), (8, 8, 5), False, False), ((12, 16, 18), (6, 6, 16), False, False),
                  ((64, 64, 64), (32, 32, 32), False, True)]


@pytest.mark.parametrize("case", range(len(_PLAIN_MATMULS)))
def test_k_accumulating_matmul_vector_reads(device, case):
    """The k-accumulating product without aliases: on a CPU WebGPU adapter (the scheduler option ``dot_vec4``)
    both operands are read four float32 elements per load where their last axes and blocks are multiples of 4
    (``_accumulate_vectors``; WGSL ``vec4<f32>`` bindings), else one element per load; on CPU OpenCL devices a
    4 x 16 register tile where the block allows it. Same result as NumPy in float64 everywhere."""
    (m, k, n), (bm, bn, bk), squeeze, vec = _PLAIN_MATMULS[case]
    x = rng.standard_normal((1, m, k) if squeeze else (m, k)).astype(np.float32)
    y = rng.standard_normal((1, k, n) if squeeze else (k, n)).astype(np.float32)
    want = x.astype(np.float64) @ y
    f = fa.jit(_plain_matmul(bm, bn, bk, squeeze))
    args = [fa.device_put(a, device) for a in (x, y)]
    with own_kernels(device):
        got = f(*args)
        eager = _plain_matmul(bm, bn, bk, squeeze)(*[fa.device_put(a, device) for a in (x, y)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(eager))
    caps = device.impl.capabilities(device) if device.backend == "webgpu" else None
    if caps is not None and not caps.tiling_pays:
        with own_kernels(device):
            text = f.lower(*args).as_text()
        assert ("vec4<f32>" in text) == vec



#: (m, k, n), (bm, bn, bk), compiler_params of the k-accumulating product in the subgroup form on a CPU WebGPU
#: adapter with subgroups (8 lanes on lavapipe): one subgroup per block (32 rows x 4 columns per work item), four
#: (a 64 x 64 block: two subgroups down, two across), eight columns per item (16 work items of a 32 x 128
#: block), and a contraction walked per grid step (its blocks not consecutive: ``bk`` below the whole).
_SUBGROUP_MATMULS = [((64, 64, 96), (32, 32, 32), None), ((128, 48, 128), (64, 64, 16), None),
                     ((32, 24, 256), (32, 128, 8), {"workgroup": 16})]


def test_subgroup_tiles_cover_the_block_once():
    """``_subgroup_tile``: rows a multiple of the subgroup's lanes and dividing the block, ``lanes x cols``
    columns dividing it, ``rows x cols`` the block's outputs per work item; ``None`` where none fits."""
    from fnarray.lowering.kernels.groups import pallas as pg
    assert pg._subgroup_tile((32, 32), 8, 8) == (32, 4)
    assert pg._subgroup_tile((64, 64), 32, 8) == (32, 4)
    assert pg._subgroup_tile((32, 128), 16, 8) == (32, 8)
    assert pg._subgroup_tile((16, 32), 8, 8) == (16, 4)
    assert pg._subgroup_tile((32, 64), 8, 8) == (32, 8)
    for shape, wg, lanes in [((32, 32), 8, 0), ((32, 32), 12, 8), ((8, 8), 8, 8), ((32, 32), 8, 16), ((24, 32), 6, 8)]:
        assert pg._subgroup_tile(shape, wg, lanes) is None, (shape, wg, lanes)


@pytest.mark.parametrize("walks", [True, False], ids=["one_loop", "per_step"])
@pytest.mark.parametrize("case", range(len(_SUBGROUP_MATMULS)))
def test_k_accumulating_matmul_shares_rows_across_a_subgroup(device, case, walks, monkeypatch):
    """The k-accumulating product on a CPU WebGPU adapter with subgroups: each subgroup's work items load
    their rows of ``x`` and broadcast them (``_subgroup_elements``, WGSL ``subgroupBroadcast``); NumPy's float64
    product, and the bits of the form without subgroups (each accumulator adds its products in the same
    order). Elsewhere the usual forms, the same result."""
    from fnarray.lowering.kernels.groups import pallas as pg
    (m, k, n), (bm, bn, bk), params = _SUBGROUP_MATMULS[case]
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
    args = [fa.device_put(a, device) for a in (x, y)]
    def form():
        return fa.jit(_plain_matmul(bm, bn, bk, params=params, reverse=not walks))
    f = form()
    with own_kernels(device):
        got = np.asarray(f(*args))
        text = f.lower(*args).as_text() if device.backend == "webgpu" else ""
    want = x.astype(np.float64) @ y
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    sub = device.backend == "webgpu" and device.platform == "cpu" and getattr(device.impl.gpu, "has_subgroups", False)
    assert ("subgroupBroadcast" in text) == sub
    if sub:
        monkeypatch.setattr(pg, "_subgroup_tile", lambda oshape, wg, lanes: None)
        with own_kernels(device):
            g = form()
            plain = np.asarray(g(*args))
            assert "subgroupBroadcast" not in g.lower(*args).as_text()
        np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))

def _attention_like(rows, d, n, params):
    """``(x @ y.T) @ z`` per block of ``rows`` rows of ``x`` (``(m, d)``), ``y`` ``(n, d)`` read whole, ``z``
    ``(n, d)`` read in two halves of its rows: the two products of flash attention's body."""
    def kernel(x_ref, y_ref, z_ref, o_ref):
        s = x_ref[...] @ y_ref[...].T
        h = n // 2
        o_ref[...] = s[:, :h] @ z_ref[pl.ds(0, h), :] + s[:, h:] @ z_ref[pl.ds(h, h), :]

    def f(x, y, z):
        m = x.shape[0]
        return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((m, d), x.dtype), grid=(m // rows,),
                              in_specs=[pl.BlockSpec((rows, d), lambda i: (i, 0)),
                                        pl.BlockSpec((n, d), lambda i: (0, 0)), pl.BlockSpec((n, d), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((rows, d), lambda i: (i, 0)), compiler_params=params)(x, y, z)
    return f


def _hints_parity(device, params=None, row_tile=8, **_):
    """Whether a case of a ``compiler_params`` matrix runs on ``device`` besides numpy:0: every case on the kernel
    backends (which read the hints), on jax and mlx only the cases with no hints (``params=None``) or 8 rows a
    work item (``row_tile``)."""
    return device.backend in ("opencl", "webgpu") or (params is None and row_tile == 8)


@pytest.mark.parity_subset(keep=_hints_parity)
@pytest.mark.parametrize("d,n,vec", [(32, 16, True), (8, 8, True), (6, 16, False), (32, 12, True)])
@pytest.mark.parametrize("params", [None, {"rows": False, "workgroup": 16}, {"rows": False, "tile": 64},
                                    {"rows": False, "workgroup": 8, "tile": 64, "stage": True},
                                    {"rows": True, "row_tile": 1}, {"rows": True, "row_tile": 2},
                                    {"rows": True, "row_tile": 4}])
def test_dot_operands_read_as_vectors(device, d, n, vec, params):
    """A ``dot`` operand that is a plain load of a float32 input, contiguous and 4-aligned along the
    contraction (``y.T``) or along the register tile's columns (``z``), is read four elements per load on a
    CPU WebGPU adapter (``_vector_plans``), in row mode and in the shared form; the products keep their order,
    so the result equals the scalar form's and NumPy's (float64) within float32 rounding, on every device; also
    with register tiles of up to 64 outputs (``compiler_params={"tile": 64}``, ``PALLAS_TUNABLE``'s ``tile``)
    and in row mode with one, two or four rows per work item (``row_tile``: one register tile over the item's
    rows)."""
    x = rng.standard_normal((32, d)).astype(np.float32)
    y = rng.standard_normal((n, d)).astype(np.float32)
    z = rng.standard_normal((n, d)).astype(np.float32)
    want = (x.astype(np.float64) @ y.T) @ z
    f = fa.jit(_attention_like(16, d, n, params))
    args = [fa.device_put(a, device) for a in (x, y, z)]
    with own_kernels(device):
        got = f(*args)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    caps = device.impl.capabilities(device) if device.backend == "webgpu" else None
    if caps is not None and not caps.tiling_pays:
        with own_kernels(device):
            text = f.lower(*args).as_text()
        assert ("vec4<f32>" in text) == vec



@pytest.mark.parametrize("d,n,row_tile,whole", [(32, 16, 2, True), (8, 32, 2, True), (32, 16, 4, False),
                                                (16, 64, 8, False)])
def test_row_mode_dot_shares_the_right_operand_across_a_subgroup(device, d, n, row_tile, whole, monkeypatch):
    """``(x @ y.T) @ z`` in row mode with several rows per work item: on a native CPU WebGPU adapter with
    subgroups the vectors of ``y.T`` and ``z`` (the same in every work item) are loaded once per subgroup and
    broadcast (``_shared_vectors``, WGSL ``subgroupBroadcast``), where the tile's vectors per iteration are a
    multiple of the subgroup's lanes and the work-group is ``whole`` subgroups (16 rows, ``row_tile`` 2: 8 work
    items, lavapipe's 8 lanes); NumPy's float64 result, and the bits of the kernel without sharing."""
    from fnarray.lowering.kernels.groups import pallas as pg
    x = rng.standard_normal((32, d)).astype(np.float32)
    y = rng.standard_normal((n, d)).astype(np.float32)
    z = rng.standard_normal((n, d)).astype(np.float32)
    args = [fa.device_put(a, device) for a in (x, y, z)]
    params = {"rows": True, "row_tile": row_tile}
    with own_kernels(device):
        f = fa.jit(_attention_like(16, d, n, params))
        got = np.asarray(f(*args))
        text = f.lower(*args).as_text() if device.backend == "webgpu" else ""
    np.testing.assert_allclose(got, (x.astype(np.float64) @ y.T) @ z, rtol=1e-4, atol=1e-4)
    sub = device.backend == "webgpu" and device.platform == "cpu" and getattr(device.impl.gpu, "has_subgroups", False)
    assert ("subgroupBroadcast" in text) == (sub and whole)
    monkeypatch.setattr(pg, "_shared_vectors", lambda *a: {})
    with own_kernels(device):
        g = fa.jit(_attention_like(16, d, n, params))
        plain = np.asarray(g(*args))
        assert "subgroupBroadcast" not in (g.lower(*args).as_text() if device.backend == "webgpu" else "")
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))

@pytest.mark.parametrize("rows", [True, False], ids=["rows", "shared"])
def test_dot_operand_computed_from_a_load_reads_vectors(device, rows, monkeypatch):
    """``(x * 0.5 + c) @ y.T`` with ``c`` a rank-0 input: the left operand an elementwise function of a load and
    a rank-0 value (flash attention's ``q * scale``). On a native CPU WebGPU adapter (the option
    ``pallas_lane_maps``) it is read as ``vec4`` lanes of ``x`` (``_lane_map``): a kernel other than the one
    without, the same bits (each product in the contraction's order); NumPy's float64 result everywhere."""
    from fnarray.lowering.kernels.groups import pallas as pg

    def kernel(c_ref, x_ref, y_ref, o_ref):
        o_ref[...] = (x_ref[...] * 0.5 + c_ref[0]) @ y_ref[...].T

    def f(c, x, y):
        return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((32, 16), x.dtype), grid=(2,),
                              in_specs=[pl.BlockSpec((1,), lambda i: (0,)), pl.BlockSpec((16, 32), lambda i: (i, 0)),
                                        pl.BlockSpec((16, 32), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((16, 16), lambda i: (i, 0)), compiler_params={"rows": rows})(c, x, y)
    c = np.array([0.25], np.float32)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((32, 32), (16, 32)))
    args = [fa.device_put(a, device) for a in (c, x, y)]
    with own_kernels(device):
        g = fa.jit(f)
        got = np.asarray(g(*args))
        text = g.lower(*args).as_text() if device.backend == "webgpu" else ""
    np.testing.assert_allclose(got, (x.astype(np.float64) * 0.5 + 0.25) @ y.T, rtol=1e-4, atol=1e-4)
    native = device.backend == "webgpu" and device.platform == "cpu"
    monkeypatch.setattr(pg, "_lane_map", lambda *a: (None, None))
    with own_kernels(device):
        h = fa.jit(f)
        plain = np.asarray(h(*args))
        other = h.lower(*args).as_text() if device.backend == "webgpu" else ""
    assert (text != other) == native
    np.testing.assert_array_equal(got.view(np.uint32), plain.view(np.uint32))

@pytest.mark.parametrize("pairs", [2, 3])
def test_dot_vector_bindings_within_the_buffer_limit(device, pairs):
    """``sum_i x_i @ y_i.T``: every operand could be read as vectors (each one more binding of its buffer), but a
    WebGPU kernel binds at most ``max_buffers_per_kernel`` buffers (8 on lavapipe): the bindings past it are
    not made (2 pairs: 3 of the 4 wanted; 3 pairs: none), those operands are read one element per load, and
    the result is the same."""
    xs = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(2 * pairs)]

    def kernel(*refs):
        o_ref = refs[-1]
        acc = refs[0][...] @ refs[1][...].T
        for i in range(1, pairs):
            acc = acc + refs[2 * i][...] @ refs[2 * i + 1][...].T
        o_ref[...] = acc

    def f(*args):
        spec = pl.BlockSpec((16, 16), lambda i: (i, 0))
        whole = pl.BlockSpec((32, 16), lambda i: (0, 0))
        return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((32, 32), np.float32), grid=(2,),
                              in_specs=[spec, whole] * pairs, out_specs=pl.BlockSpec((16, 32), lambda i: (i, 0)))(
            *args)
    want = sum(xs[2 * i].astype(np.float64) @ xs[2 * i + 1].T for i in range(pairs))
    with own_kernels(device):
        got = fa.jit(f)(*[fa.device_put(a, device) for a in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_store_reading_its_own_ref(device):
    """``o[...] = o[::-1]``-like stores (the value reads other elements of the ref it overwrites)."""
    x = rng.standard_normal(64).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[...] = fnp.flip(o_ref[...]) + 1.0

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype))
    with own_kernels(device):
        got = f(fa.device_put(x, device))
    np.testing.assert_allclose(np.asarray(got), x[::-1] + 1, rtol=1e-6)


@pytest.mark.parametrize("n", [64, 20, 256])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_row_mode_rows_reduced_together(device, n, kind):
    """Row mode with four rows per work item in a body without a ``dot`` (``compiler_params={"rows": True,
    "row_tile": 4}``): each reduction of a value that reads refs takes the item's rows in one loop
    (``_joint_reduce``: ``v``'s elements loaded once for the four rows; on lavapipe ``x`` and ``v`` read as lanes of
    ``vec4`` loads, ``_lane_load``, the ``arange`` term telling a lane from another), runs of 8 elements where 8
    divides the row (64, 256; 20 and the halves of 20: one element a run), one result per row and per column of a
    two-axis result; against NumPy (float64) on every device."""
    x = rng.standard_normal((32, n)).astype(np.float32)
    v = rng.standard_normal(n).astype(np.float32)
    red = {"sum": fnp.sum, "max": fnp.max}[kind]

    def kernel(x_ref, v_ref, o_ref):
        p = x_ref[...] * (v_ref[...] + fnp.arange(n, dtype=fnp.float32) * 0.125)[None, :]
        halves = fnp.sum(p.reshape(16, 2, n // 2), axis=2)
        o_ref[...] = red(p, axis=1) + halves[:, 1] * 0.5

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((32,), x.dtype), grid=(2,),
                       in_specs=[pl.BlockSpec((16, n), lambda i: (i, 0)), pl.BlockSpec((n,), lambda i: (0,))],
                       out_specs=pl.BlockSpec((16,), lambda i: (i,)), compiler_params={"rows": True, "row_tile": 4})
    p = x.astype(np.float64) * (v + np.arange(n) * 0.125)
    want = {"sum": p.sum, "max": p.max}[kind](axis=1) + p[:, n // 2:].sum(axis=1) * 0.5
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(fa.device_put(x, device), fa.device_put(v, device)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True, None])
def test_bad_row_tile_raises_at_pallas_call(bad):
    """``compiler_params={"rows": True, "row_tile": bad}``: a ``ValueError`` naming the value and what is expected
    when ``pallas_call`` is made (was: 0 and -2 silently one row, 2.5 silently two, ``"4"`` four, ``None`` a bare
    ``int()`` error at lowering)."""
    def kernel(x_ref, o_ref):
        o_ref[...] = fnp.sum(x_ref[...], axis=1)

    with pytest.raises(ValueError, match=re.escape(f"row_tile must be a positive int, got {bad!r}")):
        pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((16,), fnp.float32),
                       compiler_params={"rows": True, "row_tile": bad})


@pytest.mark.parity_subset(keep=_hints_parity)
@pytest.mark.parametrize("row_tile", [3, 5, 8, 32])
@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_row_tile_any_value_masked_reductions(device, row_tile, kind, dtype):
    """Row mode with ``row_tile`` rows per work item that do (8) or do not (3, 5, 32) divide the block's 16 rows
    (then one row an item), a masked load (the last 3 columns ``other=0``), sum/max/min, float32 and int32
    (wrapping products): the joint reductions (``_joint_reduce``) against NumPy (float64 or int64 wrapped)."""
    n = 20
    x = (rng.standard_normal((32, n)) * 10).astype(dtype)
    v = (rng.standard_normal(n) * 3).astype(dtype)
    red = {"sum": fnp.sum, "max": fnp.max, "min": fnp.min}[kind]

    def kernel(x_ref, v_ref, o_ref):
        a = pl.load(x_ref, (slice(None), slice(None)), mask=(fnp.arange(n) < n - 3)[None, :], other=0)
        o_ref[...] = red(a * v_ref[...][None, :], axis=1)

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((32,), dtype), grid=(2,),
                       in_specs=[pl.BlockSpec((16, n), lambda i: (i, 0)), pl.BlockSpec((n,), lambda i: (0,))],
                       out_specs=pl.BlockSpec((16,), lambda i: (i,)),
                       compiler_params={"rows": True, "row_tile": row_tile})
    wide = np.float64 if dtype == np.float32 else np.int64
    p = x.astype(wide) * v
    p[:, n - 3:] = 0
    want = {"sum": p.sum, "max": p.max, "min": p.min}[kind](axis=1).astype(dtype)
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(fa.device_put(x, device), fa.device_put(v, device)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("row_tile", [1, 2])
@pytest.mark.parametrize("case", ["transposed", "shifted_store", "scratch"])
def test_row_mode_only_where_rows_stay_private(device, case, row_tile):
    """``compiler_params={"rows": True}`` asks for one work item per row without barriers; where an item would
    read another's row (a transposed ``dot`` result, a store one row down read back, a scratch row read by the
    next row) the kernel keeps the shared form and its barriers, and the result is right on every device; also
    with two rows per work item (``row_tile``), whose rows are ``lid`` and ``lid + 8``."""
    x = rng.standard_normal((32, 16)).astype(np.float32)

    def transposed(x_ref, o_ref):
        s = fnp.dot(x_ref[...], x_ref[...].T)
        o_ref[...] = s.T[:, :16] + fnp.max(s, axis=0)[:, None]

    def shifted_store(x_ref, o_ref):
        o_ref[...] = fnp.zeros((16, 16), fnp.float32)
        o_ref[pl.ds(1, 15), :] = x_ref[pl.ds(0, 15), :] * 2.0
        o_ref[...] = o_ref[...] + fnp.sum(x_ref[...], axis=1, keepdims=True)

    def scratch(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] @ x_ref[...].T
        o_ref[...] = fnp.flip(s_ref[...], axis=0) + fnp.min(s_ref[...], axis=1, keepdims=True)

    def want_of(xb):
        s = xb @ xb.T
        if case == "transposed":
            return s.T[:, :16] + s.max(axis=0)[:, None]
        if case == "shifted_store":
            o = np.zeros((16, 16), np.float32)
            o[1:] = xb[:15] * 2
            return o + xb.sum(axis=1, keepdims=True)
        return s[::-1] + s.min(axis=1, keepdims=True)

    kernel = {"transposed": transposed, "shifted_store": shifted_store, "scratch": scratch}[case]
    spec = pl.BlockSpec((16, 16), lambda i: (i, 0))
    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,), in_specs=[spec],
                       out_specs=spec, compiler_params={"rows": True, "row_tile": row_tile},
                       scratch_shapes=[pl.Local((16, 16), fnp.float32)] if case == "scratch" else ())
    xd = fa.device_put(x, device)
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(xd))
        text = fa.jit(f).lower(xd).as_text() if device.backend in ("opencl", "webgpu") else None
    want = np.concatenate([want_of(x[:16]), want_of(x[16:])])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    if text is not None:
        assert "arrier(" in text


def test_pallas_tunable_offers_row_mode_at_its_row_count():
    """``PALLAS_TUNABLE``'s candidates: row mode once, at the work-group size of the block's rows (the group's
    ``rows`` fact), and with two rows per work item (``row_tile``) at half that; not at all where ``row_count``
    gives none (fact 0)."""
    from fnarray.lowering.kernels.groups.pallas import PALLAS_TUNABLE
    default = {"workgroup": 8, "rows": False, "stage": False, "tile": 16, "row_tile": 1}
    rows = [c for c in PALLAS_TUNABLE.candidates(default, {"rows": 16, "workgroup_limit": 256}) if c["rows"]]
    assert rows == [{"workgroup": 16, "rows": True, "stage": False, "tile": 16, "row_tile": 1},
                    {"workgroup": 8, "rows": True, "stage": False, "tile": 16, "row_tile": 2}]
    assert not [c for c in PALLAS_TUNABLE.candidates(default, {"rows": 0, "workgroup_limit": 256}) if c["rows"]]
    assert all(c["row_tile"] == 1 for c in PALLAS_TUNABLE.candidates(default, {"rows": 0}))


def test_pallas_cost_model_stages_transposed_operands_on_llvm_15():
    """``PALLAS_TUNABLE``'s cost model (mode ``"fast"``): on PoCL with LLVM 15 or later the default plus a staged
    transposed ``dot`` operand and register tiles of up to 64 outputs; on LLVM 14 and elsewhere the default
    itself."""
    from fnarray.lowering.kernels import tuning
    from fnarray.lowering.kernels.groups.pallas import PALLAS_TUNABLE
    default = {"workgroup": 8, "rows": False, "stage": False, "tile": 16, "row_tile": 1}
    base = {"workgroup_limit": 4096, "rows": 16, "device": "cpu", "compiler": "pocl"}
    assert tuning.modelled(PALLAS_TUNABLE, default, {**base, "llvm": 15}, mode="fast") == {**default, "stage": True,
                                                                                           "tile": 64}
    assert tuning.modelled(PALLAS_TUNABLE, default, {**base, "llvm": 14}, mode="fast") == default
    assert tuning.modelled(PALLAS_TUNABLE, default, {**base, "llvm": 15}, mode="off") == default
    # a body without a dot (reductions only) keeps its default, row mode on CPU OpenCL devices
    rows = {"workgroup": 16, "rows": True, "stage": False, "tile": 16, "row_tile": 1}
    assert tuning.modelled(PALLAS_TUNABLE, rows, {**base, "llvm": 15, "dot": 0}, mode="fast") == rows
    assert tuning.modelled(PALLAS_TUNABLE, default, {**base, "llvm": 15, "dot": 1}, mode="fast")["stage"]


def test_row_mode_by_default_on_cpu_opencl_without_a_dot():
    """On a CPU OpenCL device (PoCL) a body of reductions only (the softmax and layer-norm examples) renders in row
    mode by default (no barrier), one with a ``dot`` (the flash-attention example) does not."""
    import sys
    import pathlib
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "opencl"]
    if not devs or devs[0].impl.capabilities(devs[0]).matmul_tiling != "register":
        pytest.skip("no CPU OpenCL device")
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "examples"))
    from kernels import flash_attention, softmax
    x = fa.device_put(rng.standard_normal((16, 64)).astype(np.float32), devs[0])
    q = fa.device_put(rng.standard_normal((1, 32, 16)).astype(np.float32), devs[0])
    with own_kernels(devs[0]):
        assert "barrier(" not in fa.jit(softmax.softmax_forward).lower(x).as_text()
        assert "barrier(" in fa.jit(flash_attention.flash_attention).lower(q, q, q).as_text()


@pytest.mark.parametrize("row_tile", [1, 2, 3, 4])
def test_flash_attention_rows_per_work_item(device, row_tile):
    """The flash-attention example (a ``fori_loop`` with carries, two ``dot`` s, row reductions, a causal
    mask) in row mode with ``row_tile`` rows per work item equals NumPy's float64 attention on every device and
    the one-row form to float32 rounding (the same products in the same order); 3 does not divide the block's
    16 rows: one row per item. On a CPU WebGPU adapter (lavapipe) two rows per item are the default: 8 work
    items for 16 query rows; not within ``portable_limits()`` (browser bundles)."""
    import sys
    import pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "examples"))
    from kernels import flash_attention
    from fnarray.lowering.kernels.groups import pallas as pallas_group
    q, k, v = (rng.standard_normal((2, 64, 16)).astype(np.float32) for _ in range(3))
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k) / 4.0
    s = np.where(np.tril(np.ones((64, 64), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)
    args = [fa.device_put(a, device) for a in (q, k, v)]
    old = pallas_group.ROW_TILE, pallas_group._rows_by_default
    pallas_group.ROW_TILE, pallas_group._rows_by_default = row_tile, lambda caps, program: True
    try:
        with own_kernels(device):
            f = fa.jit(lambda q, k, v: flash_attention.flash_attention(q, k, v) + 0.0 * row_tile)
            got = np.asarray(f(*args))
    finally:
        pallas_group.ROW_TILE, pallas_group._rows_by_default = old
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    caps = device.impl.capabilities(device) if device.backend == "webgpu" else None
    if caps is not None and not caps.tiling_pays and row_tile == 2:
        with own_kernels(device):
            text = fa.jit(flash_attention.flash_attention).lower(*args).as_text()
        assert "@workgroup_size(8," in text and "workgroupBarrier" not in text
        # a browser bundle keeps one row per item (Chromium's SwiftShader took minutes to compile two)
        from fnarray.lowering.webgpu.backend import portable_limits
        with portable_limits(), own_kernels(device):
            text = fa.jit(lambda q, k, v: flash_attention.flash_attention(q, k, v) * 1.0).lower(*args).as_text()
        assert "@workgroup_size(16," in text


def test_atomics_in_the_interpreter():
    x = rng.standard_normal(8).astype(np.float32)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = fnp.zeros_like(o_ref)
        pl.atomic_add(o_ref, (0,), fnp.sum(x_ref[...]))

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((1,), fnp.float32), grid=(3,))
    np.testing.assert_allclose(np.asarray(f(x)), [3 * x.sum()], rtol=1e-5)


_ATOMIC = {"add": (pl.atomic_add, np.add, 0), "max": (pl.atomic_max, np.maximum, -50),
           "min": (pl.atomic_min, np.minimum, 50)}


@pytest.mark.parametrize("kind", list(_ATOMIC))
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_atomics_render_on_every_device(device, kind, dtype):
    """Atomics of every program instance into one block (each instance adds its row; with a mask), and the old
    values of one instance, against the interpreter and NumPy, with ``fallback="error"``."""
    fn, npf, start = _ATOMIC[kind]
    x = (rng.standard_normal((12, 40)) * 20).astype(dtype)
    init = np.full(40, start, dtype)
    masked = device.backend != "jax"   # JAX's Pallas atomics take no mask

    def kernel(x_ref, init_ref, o_ref):
        keep = fnp.arange(40) % 3 != 1
        fn(o_ref, (slice(None),), x_ref[...], mask=keep if masked else None)

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((40,), x.dtype), grid=(12,),
                       in_specs=[pl.BlockSpec((None, 40), lambda i: (i, 0)), pl.BlockSpec((40,), lambda i: (0,))],
                       out_specs=pl.BlockSpec((40,), lambda i: (0,)), input_output_aliases={1: 0})
    want = np.where((np.arange(40) % 3 != 1) | (not masked), npf.reduce(np.concatenate([init[None], x]), axis=0), init)
    interp = np.asarray(fa.jit(lambda a, b: pl.pallas_call(
        kernel, out_shape=pl.ShapeDtypeStruct((40,), x.dtype), grid=(12,),
        in_specs=[pl.BlockSpec((None, 40), lambda i: (i, 0)), pl.BlockSpec((40,), lambda i: (0,))],
        out_specs=pl.BlockSpec((40,), lambda i: (0,)), input_output_aliases={1: 0}, interpret=True)(a, b))(x, init))
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(fa.device_put(x, device), fa.device_put(init, device)))
    tol = 1e-4 if dtype == np.float32 else 0
    np.testing.assert_allclose(interp, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)

    def olds(x_ref, init_ref, o_ref, old_ref):
        old_ref[...] = fn(o_ref, (pl.ds(8, 16),), x_ref[pl.ds(0, 16)])

    g = pl.pallas_call(olds, out_shape=(pl.ShapeDtypeStruct((40,), x.dtype), pl.ShapeDtypeStruct((16,), x.dtype)),
                       input_output_aliases={1: 0})
    with own_kernels(device):
        total, old = (np.asarray(v) for v in fa.jit(g)(fa.device_put(x[0], device), fa.device_put(init, device)))
    np.testing.assert_array_equal(old, init[8:24])
    np.testing.assert_allclose(total[8:24], npf(init[8:24], x[0, :16]), rtol=tol)
    np.testing.assert_array_equal(np.delete(total, np.s_[8:24]), np.delete(init, np.s_[8:24]))


def test_atomic_add_of_a_data_dependent_index(device):
    """A histogram: each program instance adds 1 at the bin its value names (a traced scalar index)."""
    vals = rng.integers(0, 9, 64).astype(np.int32)

    def kernel(x_ref, h0_ref, h_ref):
        pl.atomic_add(h_ref, x_ref[0], 1)

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((9,), fnp.int32), grid=(64,),
                       in_specs=[pl.BlockSpec((1,), lambda i: (i,)), pl.BlockSpec((9,), lambda i: (0,))],
                       out_specs=pl.BlockSpec((9,), lambda i: (0,)), input_output_aliases={1: 0})
    with own_kernels(device):
        got = f(fa.device_put(vals, device), fa.device_put(np.zeros(9, np.int32), device))
    np.testing.assert_array_equal(np.asarray(got), np.bincount(vals, minlength=9))


def test_atomics_without_a_kernel_form_say_so():
    """An atomic on a scratch ref (or of a dtype without device atomics) has no kernel form: under
    ``fallback="error"`` the error names it."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]
    if not devs:
        pytest.skip("no kernel backend")

    def kernel(x_ref, o_ref, s_ref):
        s_ref[...] = fnp.zeros_like(s_ref)
        pl.atomic_add(s_ref, (slice(None),), x_ref[...])
        o_ref[...] = s_ref[...]

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((8,), fnp.float32),
                       scratch_shapes=[pl.Local((8,), fnp.float32)])
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x)   # the interpreter
    old = fa.config.fallback
    fa.config.fallback = "error"
    try:
        for dev in devs:
            with pytest.raises(Exception, match="atomic_add on a scratch"):
                fa.jit(f)(fa.device_put(x, dev))
    finally:
        fa.config.fallback = old


# ------------------------------------------------------------------------------------------ transforms


def test_vmap_adds_a_grid_axis(device):
    xs = rng.standard_normal((3, 6, 10)).astype(np.float32)
    want = np.stack([np.asarray(THEIRS["softmax"](jnp.asarray(x))) for x in xs])
    with own_kernels(device):
        got = fa.vmap(OURS["softmax"])(fa.device_put(xs, device))
        got_jit = fa.jit(fa.vmap(OURS["softmax"]))(fa.device_put(xs, device))
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(got_jit), want, rtol=2e-5, atol=2e-6)


def test_vmap_of_one_operand():
    x = rng.standard_normal(8).astype(np.float32)
    ys = rng.standard_normal((4, 8)).astype(np.float32)
    got = fa.vmap(OURS["add_vectors"], in_axes=(None, 0))(x, ys)
    np.testing.assert_allclose(np.asarray(got), x + ys, rtol=1e-6)


def test_grad_without_custom_vjp_names_it():
    x = rng.standard_normal(8).astype(np.float32)
    with pytest.raises(TypeError, match="custom_vjp"):
        fa.grad(lambda v: fnp.sum(OURS["add_vectors"](v, v)))(x)


def test_softmax_custom_vjp_backward_kernel(device):
    from examples.kernels.softmax import softmax
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((8, 16)).astype(np.float32)

    def loss(v):
        return fnp.sum(softmax(v) * w)

    jx = jnp.asarray(x)
    want = np.asarray(jax.grad(lambda v: jnp.sum(jax.nn.softmax(v, axis=-1) * w))(jx))
    with own_kernels(device):
        got = fa.grad(loss)(fa.device_put(x, device))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------ bad input


def test_block_that_does_not_divide_without_mask():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((10,), fnp.float32), grid=(3,),
                       in_specs=[pl.BlockSpec((4,), lambda i: (i,))], out_specs=pl.BlockSpec((4,), lambda i: (i,)))
    with pytest.raises(fa.ShapeError, match="does not divide.*mask"):
        f(np.zeros(10, np.float32))


def test_index_map_of_the_wrong_arity():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((8,), fnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((4,), lambda i, j: (i,))], out_specs=pl.BlockSpec((4,), lambda i: (i,)))
    with pytest.raises(TypeError, match="index_map.*cannot take 1 arguments"):
        f(np.zeros(8, np.float32))


def test_index_map_returning_too_few_indices():
    f = pl.pallas_call(lambda x_ref, o_ref: None, out_shape=pl.ShapeDtypeStruct((8, 2), fnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((4, 2), lambda i: (i,))])
    with pytest.raises(ValueError, match="returns 1 block indices for an array of 2 axes"):
        f(np.zeros((8, 2), np.float32))


def test_out_of_bounds_unmasked_load_in_interpret_mode():
    def kernel(x_ref, o_ref):
        o_ref[...] = pl.load(x_ref, pl.ds(pl.program_id(0) * 4, 4))

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32), grid=(2,), interpret=True)
    with pytest.raises(IndexError, match="outside the ref without a mask"):
        f(np.zeros(6, np.float32))


def test_kernel_writing_an_input():
    def kernel(x_ref, o_ref):
        x_ref[...] = o_ref[...]

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32))
    with pytest.raises(ValueError, match="writes input ref 0.*input_output_aliases"):
        f(np.zeros(4, np.float32))


def test_mismatched_out_shape():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    with pytest.raises(fa.ShapeError, match="does not broadcast"):
        pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((3,), fnp.float32))(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="out_shape leaves need .shape and .dtype"):
        pl.pallas_call(kernel, out_shape=(4,))(np.zeros(4, np.float32))
    with pytest.raises(fa.ShapeError, match="block_shape .* has 2 axes"):
        pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32),
                       out_specs=pl.BlockSpec((2, 2), lambda: (0, 0)))(np.zeros(4, np.float32))


def test_grid_past_the_dispatch_limit(device):
    """More program instances than a dispatch may have work-groups (65,535 on WebGPU): each work-group walks
    several."""
    n = 70_000 if device.backend == "webgpu" else 4_000

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(0).astype(fnp.float32)

    x = np.zeros(n, np.float32)
    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((n,), fnp.float32), grid=(n,),
                       in_specs=[pl.BlockSpec((1,), lambda i: (i,))], out_specs=pl.BlockSpec((1,), lambda i: (i,)))
    with own_kernels(device):
        got = fa.jit(f)(fa.device_put(x, device))
    np.testing.assert_array_equal(np.asarray(got), np.arange(n, dtype=np.float32))


def test_operation_the_target_cannot_render():
    devs = [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]
    if not devs:
        pytest.skip("no kernel backend")

    def kernel(x_ref, o_ref):
        o_ref[...] = fnp.sort(x_ref[...])

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((5,), fnp.float32))
    x = np.array([3, 1, 2, 5, 4], np.float32)
    old = fa.config.fallback
    fa.config.fallback = "error"
    try:
        with pytest.raises(Exception, match="sort inside a kernel has no kernel form"):
            f(fa.device_put(x, devs[0]))
    finally:
        fa.config.fallback = old
    np.testing.assert_array_equal(np.asarray(f(x)), np.sort(x))


def test_unsupported_index_forms_name_what_is_supported():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[fnp.arange(4)]

    with pytest.raises(NotImplementedError, match="pl.ds"):
        pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32))(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="unsupported arguments"):
        pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((4,), fnp.float32), bogus=1)


# ------------------------------------------------------------------------------------------ autotune


def test_autotune_times_the_configs_once_per_key(tmp_path):
    from fnarray.experimental.pallas import _autotune
    sys_path = __import__("sys").path
    sys_path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "examples"))
    from kernels.matmul import matmul
    calls = []

    @pl.autotune(configs=[{"bm": 8, "bn": 8, "bk": 8}, {"bm": 16, "bn": 16, "bk": 16}], key=["x", "y"])
    def tuned(x, y, bm, bn, bk):
        calls.append(bm)
        return matmul(x, y, bm, bn, bk)

    old = fa.config.compilation_cache_dir
    fa.config.compilation_cache_dir = str(tmp_path)
    _autotune._memory.clear()
    try:
        x, y = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
        got = tuned(x, y)
        n = len(calls)
        assert n >= 2 * 4   # each config: a warm-up and three timed runs, then the chosen one
        got2 = tuned(x, y)
        assert len(calls) == n + 1   # remembered: no more timing
        np.testing.assert_allclose(np.asarray(got), x @ y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(got2), x @ y, rtol=1e-5, atol=1e-5)
        files = sorted((tmp_path / "tuning").glob("*.json"))   # kernels/tuning.py: one file per device
        entries = __import__("json").loads(files[0].read_text())["entries"]
        assert len(entries) == 1 and __import__("json").loads(list(entries.values())[0]["choice"])["bm"] in (8, 16)
        _autotune._memory.clear()   # a new process reads the file
        tuned(x, y)
        assert len(calls) == n + 2
        jitted = fa.jit(tuned)(x, y)   # traced: the remembered choice
        np.testing.assert_allclose(np.asarray(jitted), x @ y, rtol=1e-5, atol=1e-5)
    finally:
        fa.config.compilation_cache_dir = old


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_dot_operands_staged_in_local_memory_as_on_a_gpu(backend):
    """Where tiles pay (GPU adapters: ``Capabilities.tiling_pays``) the operands of a ``dot`` are staged in
    work-group memory; forced here on the CPU devices, the results are the same."""
    import dataclasses
    import importlib
    devs = [d for d in fa.devices(all_backends=True) if d.backend == backend]
    if not devs:
        pytest.skip(f"no {backend} device")
    dev = devs[0]
    be = dev.impl
    groups = importlib.import_module("fnarray.lowering.kernels.groups.pallas")
    old = be.capabilities(dev)
    gpu = dataclasses.replace(old, tiling_pays=True, local_memory=True, matmul_tiling="local")
    if backend == "webgpu":
        be._caps = gpu
    else:
        be.state(dev).caps = gpu
    groups._REASONS.clear()
    try:
        args = INPUTS["matmul_k"]()
        want = np.asarray(THEIRS["matmul_k"](*[jnp.asarray(a) for a in args]))
        with own_kernels(dev):
            got = fa.jit(lambda x, y: OURS["matmul_k"](x, y) * 1.0)(*[fa.device_put(a, dev) for a in args])
            src = fa.jit(lambda x, y: OURS["matmul_k"](x, y) * 1.0).lower(*[fa.device_put(a, dev) for a in args])
        assert "ta" in src.as_text()   # the staged tiles
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
    finally:
        if backend == "webgpu":
            be._caps = old
        else:
            be.state(dev).caps = old
        groups._REASONS.clear()


def test_local_memory_budget_is_the_devices():
    """Blocks in work-group memory past the device's reported local memory size (WebGPU's 16 KiB of the device
    fnarray opens; PoCL's 1 MiB) have no kernel form there: under ``fallback="error"`` the error names the size;
    where the device has the room, the kernel runs."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]
    if not devs:
        pytest.skip("no kernel backend")
    n = 6000   # 24,000 bytes of float32 scratch

    def kernel(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] * 2.0
        o_ref[...] = s_ref[...] + 1.0

    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((n,), fnp.float32),
                       scratch_shapes=[pl.Local((n,), fnp.float32)])
    x = rng.standard_normal(n).astype(np.float32)
    old = fa.config.fallback
    fa.config.fallback = "error"
    try:
        for dev in devs:
            limit = dev.impl.capabilities(dev).local_memory_bytes
            if limit >= 4 * n:
                np.testing.assert_allclose(np.asarray(fa.jit(f)(fa.device_put(x, dev))), x * 2 + 1, rtol=1e-6)
            else:
                with pytest.raises(Exception, match=f"more than the {limit} bytes the device gives"):
                    fa.jit(f)(fa.device_put(x, dev))
    finally:
        fa.config.fallback = old


def test_index_arithmetic_folds_keep_the_value():
    """The renderer's index folds (``_div``, ``_rem``, ``_linear``'s re-joined splits) equal plain C division and
    remainder on non-negative indices: ``(t*256 + x*8 + j) / 64``, ``% 8``, ``(q + a/c)*c + a%c``..."""
    from fnarray.lowering.kernels.groups import pallas as G
    from fnarray.lowering.kernels.ir import Const, INT32, Sym

    def ev(e, env):
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Sym):
            return env[e.name]
        a, b = (ev(x, env) for x in e.args)
        f = {"add": int.__add__, "mul": int.__mul__, "sub": int.__sub__, "div": int.__floordiv__, "rem": int.__mod__}
        return f[e.op](a, b)

    t, x = Sym("t", INT32), Sym("x", INT32)
    r = np.random.default_rng(3)
    for j in range(8):
        flat = G._i(0)
        for term in (G.op("mul", t, G._i(256)), G.op("mul", x, G._i(8)), G._i(j)):
            flat = G.op("add", flat, term)
        for shape in ((16, 64), (128, 8), (4, 4, 64), (1024,)):
            idx = G._unravel(flat, shape)
            back = G._linear(idx, shape)
            for _ in range(20):
                env = {"t": int(r.integers(0, 4)), "x": int(r.integers(0, 32))}
                v = ev(flat, env)
                assert [ev(i, env) for i in idx] == list(np.unravel_index(v, shape)), (shape, j)
                assert ev(back, env) == v
        assert isinstance(G._rem(flat, 8), Const) and isinstance(G._rem(G.op("rem", flat, G._i(64)), 8), Const)
        assert "div" not in repr(G._div(flat, 8))


def test_prune_barriers_keeps_only_ordering_barriers():
    """``kernels/barriers.prune_barriers`` on hand-built statements: a barrier between regions that touch no
    shared array in conflicting ways goes, one between a write and a read of a work-group array stays, a loop's
    last barrier moves after the loop where its last region does not conflict with its first."""
    from fnarray.lowering.kernels.barriers import prune_barriers
    from fnarray.lowering.kernels.ir import ArrayDecl, Barrier, For, Let, Load, Special, Store, const
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    lid = Special("local_id", 0)
    decls = tuple(ArrayDecl("local", n, f32, 8) for n in ("a", "b", "c"))

    def put(name):
        return Store("local", name, lid, const(1.0, f32))

    def get(name, to):
        return Let(to, Load("local", name, lid, f32))

    store_out = Store("global", "out", lid, const(0.0, f32))
    body = decls + (put("a"), Barrier(), put("b"), Barrier(), get("b", "x"), Barrier(), store_out)
    # a | b: nothing ordered; b | read b: kept; the last one (before the kernel's end) is ``_trim_barriers``' to drop
    assert prune_barriers(body) == decls + (put("a"), put("b"), Barrier(), get("b", "x"), Barrier(), store_out)
    loop = For("i", const(0, i32), const(4, i32), const(1, i32), (put("a"), Barrier(), get("a", "y"), put("b"),
                                                                  Barrier(), get("b", "w"), put("c"), Barrier()))
    moved = prune_barriers(decls + (loop, get("c", "z")))
    assert isinstance(moved[3], For) and moved[3].body.count(Barrier()) == 2 and moved[4] == Barrier()
    racing = For("i", const(0, i32), const(4, i32), const(1, i32), (put("a"), Barrier(), get("a", "y"), Barrier()))
    kept = prune_barriers(decls + (racing,))
    assert kept[3].body.count(Barrier()) == 2   # the next iteration writes what this one's last region reads
