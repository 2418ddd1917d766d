"""Row-wise normalisations on the kernel backends: at most two kernels each, values as NumPy's.

A reduction that reads an earlier reduction of the same rows at its own row (softmax's sum of
``exp(x - max)``, layernorm's variance around the mean) runs in the same kernel as it, in a second loop
over the row (``ReduceGroup.stages``): a work-item per row, or a work-group per row cooperating in
local memory when the rows are few and long. The reference is NumPy in float64.
"""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

from helpers import fallback_mode, require_backend


def _layernorm(v):
    mu = fnp.mean(v, axis=-1, keepdims=True)
    var = fnp.mean(fnp.square(v - mu), axis=-1, keepdims=True)
    return (v - mu) * fa.lax.rsqrt(var + 1e-5)


def _ref_layernorm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def _ref_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {
    "softmax": (lambda v: fa.nn.softmax(v, axis=-1), _ref_softmax),
    "log_softmax": (lambda v: fa.nn.log_softmax(v, axis=-1), lambda x: np.log(_ref_softmax(x))),
    "layernorm": (_layernorm, _ref_layernorm),
    "rmsnorm": (lambda v: v * fa.lax.rsqrt(fnp.mean(v * v, axis=-1, keepdims=True) + 1e-6),
                lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)),
    "argmax after max": (lambda v: fnp.argmax(v - fnp.max(v, axis=-1, keepdims=True), axis=-1),
                         lambda x: np.argmax(x, axis=-1)),
}


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("rows", [3, 700])
@pytest.mark.parametrize("name", list(CASES))
def test_row_normalisations(target, rows, name):
    f, ref = CASES[name]
    x = np.random.default_rng(rows).standard_normal((rows, 130)).astype(np.float32) * 3
    x[0, 5] = 40.0  # a large entry: the max must really be subtracted
    z = fa.device_put(fnp.asarray(x), target)
    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(z).as_text()
        got = np.asarray(jf(z))
    n_kernels = text.count("__kernel ") + text.count("@compute")
    assert n_kernels <= 2, text
    want = ref(x.astype(np.float64))
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


# --------------------------------------------------------------------- the row values in the reduction's kernel
# Elementwise values over the rows that read the rows' statistics (softmax's exp(x - max) / sum) run in the
# reduction's kernel, in one more loop over each row (``ReduceGroup.can_take_row_root``): one kernel. Rows
# of 3 x 130 take the cooperative work-group per row (few long rows), 700 x 130 a work-item per row.

ONE_KERNEL = ["softmax", "log_softmax", "layernorm", "rmsnorm"]


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("rows", [3, 700])
@pytest.mark.parametrize("name", ONE_KERNEL)
def test_row_normalisations_are_one_kernel(target, rows, name):
    f, _ = CASES[name]
    z = fa.device_put(np.zeros((rows, 130), np.float32), target)
    with fallback_mode("error"):
        text = fa.jit(f).lower(z).as_text()
    assert text.count("__kernel ") + text.count("@compute") == 1, text


def _softmax_f64(x, axis=-1):
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)


def _edge_rows(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 4
    if x.ndim == 2 and x.shape[0] >= 4 and x.shape[1] >= 3:
        x[1, 2] = np.nan                  # a NaN row: NaN throughout, as NumPy
        x[2, :] = -np.inf                 # max -inf: exp(-inf - -inf) is NaN, as NumPy
        x[3, 0] = np.inf                  # +inf in a row: NaN where inf - inf, as NumPy
    return x


EDGE_SHAPES = [(5, 1), (6, 3), (4, 1000), (1, 513)]   # length 1, short, longer than the work-group, odd, one row


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=str)
def test_row_values_on_edge_rows_match_float64(target, shape):
    x = _edge_rows(shape)
    z = fa.device_put(fnp.asarray(x), target)

    def f(v):   # softmax, a second row value reading the first at its own element, and a layernorm
        s = fa.nn.softmax(v, axis=-1)
        return s, s * v + 1.0, _layernorm(v)

    with fallback_mode("error"):
        got = [np.asarray(g) for g in fa.jit(f)(z)]
    x64 = x.astype(np.float64)
    s = _softmax_f64(x64)
    with np.errstate(invalid="ignore"):
        want = [s, s * x64 + 1.0, _ref_layernorm(x64)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=3e-5, atol=3e-6)


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
def test_row_values_over_a_leading_axis_and_other_rows(target):
    """Softmax over axis 0 (strided rows), and a value reading another row's statistics (not its own),
    which must not join the reduction's kernel."""
    x = np.random.default_rng(3).standard_normal((37, 9)).astype(np.float32) * 3
    z = fa.device_put(fnp.asarray(x), target)

    def f(v):
        m = fnp.max(v, axis=-1, keepdims=True)
        return fa.nn.softmax(v, axis=0), v - fnp.flip(m, axis=0), fnp.exp(v - m) / fnp.sum(fnp.exp(v - m), axis=-1,
                                                                                          keepdims=True)

    with fallback_mode("error"):
        got = [np.asarray(g) for g in fa.jit(f)(z)]
    x64 = x.astype(np.float64)
    m = x64.max(-1, keepdims=True)
    want = [_softmax_f64(x64, 0), x64 - m[::-1], _softmax_f64(x64)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=3e-5, atol=3e-6)


# --------------------------------------------------------------------- every reduction kind, cooperatively
# Three rows of 1,000 (few long rows: a work-group per row, combined by a tree in local memory), along the
# last axis and along the first (strided rows); argmax/argmin carry (value, index) pairs through the tree
# with NumPy's rules: the first maximal index wins a tie, the first NaN wins over any number.

def _coop_input(axis):
    rng = np.random.default_rng(7)
    x = rng.integers(-20, 20, (3, 1000)).astype(np.float32)   # many ties
    x[1, 600] = np.nan
    x[1, 900] = np.nan
    x[2, :] = 5.0                                                # all tied: index 0
    x[0, 999] = 100.0                                            # the maximum at the end of the row
    return x if axis == 1 else np.ascontiguousarray(x.T)


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("axis", [0, 1])
def test_every_reduction_kind_cooperatively(target, axis):
    x = _coop_input(axis)
    z = fa.device_put(fnp.asarray(x), target)

    def f(v):
        w = fnp.where(fnp.isnan(v), 0.0, v)
        return (fnp.argmax(v, axis=axis), fnp.argmin(v, axis=axis), fnp.max(v, axis=axis), fnp.min(w, axis=axis),
                fnp.sum(w, axis=axis), fnp.prod(1.0 + w / 4096.0, axis=axis),
                fnp.all(w > -20, axis=axis), fnp.any(w > 18, axis=axis))

    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(z).as_text()
        got = [np.asarray(g) for g in jf(z)]
    assert "barrier(" in text or "workgroupBarrier" in text, text   # the cooperative form
    x64 = x.astype(np.float64)
    w = np.where(np.isnan(x64), 0.0, x64)
    want = [np.argmax(x64, axis), np.argmin(x64, axis), np.max(x64, axis), np.min(w, axis), np.sum(w, axis),
            np.prod(1.0 + w / 4096.0, axis), np.all(w > -20, axis), np.any(w > 18, axis)]
    for g, wv in zip(got, want, strict=True):
        if g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, wv)
        else:
            np.testing.assert_allclose(g, wv, rtol=2e-5, atol=1e-4)


# --------------------------------------------------------------------- cumulative ops, a work-group per line
# Few long lines (fewer than 1,024, longer than 64) take the work-group scan (groups/cumulative.py): each
# work-item scans a chunk, work-item 0 the chunks' aggregates, each chunk again from its prefix. Lengths
# just past the threshold, past the work-group, odd; along the last axis, the first (strided), reversed.

def _np_cum(name, x, axis, reverse):
    v = np.flip(x, axis) if reverse else x
    with np.errstate(invalid="ignore", over="ignore"):
        out = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate,
               "cummin": np.minimum.accumulate, "cumlogsumexp": np.logaddexp.accumulate}[name](v, axis=axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("shape,axis,reverse", [((3, 1000), 1, False), ((2, 65), 1, True), ((4097, 2), 0, False)],
                         ids=str)
def test_cumulative_ops_by_work_group_match_float64(target, shape, axis, reverse):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[shape[0] * shape[1] // 3] = np.nan       # cummax/cummin carry the NaN on, as NumPy
    xi = rng.integers(-9, 9, shape).astype(np.int32)
    z, zi = fa.device_put(fnp.asarray(x), target), fa.device_put(fnp.asarray(xi), target)
    names = ["cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"]

    def f(v, vi):
        w = fnp.where(fnp.isnan(v), 0.5, v)
        outs = [getattr(fa.lax, n)(1.0 + w / 64.0 if n == "cumprod" else (v if n in ("cummax", "cummin") else w),
                                   axis=axis % v.ndim, reverse=reverse) for n in names]
        return (*outs, fa.lax.cumsum(vi, axis=axis % v.ndim, reverse=reverse),
                fa.lax.cummax(vi, axis=axis % v.ndim, reverse=reverse))

    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(z, zi).as_text()
        got = [np.asarray(g) for g in jf(z, zi)]
    assert "barrier(" in text or "workgroupBarrier" in text, text
    x64 = x.astype(np.float64)
    w = np.where(np.isnan(x64), 0.5, x64)
    ins = {"cumsum": w, "cumprod": 1.0 + w / 64.0, "cummax": x64, "cummin": x64, "cumlogsumexp": w}
    want = [_np_cum(n, ins[n], axis, reverse) for n in names]
    want += [_np_cum("cumsum", xi, axis, reverse), _np_cum("cummax", xi, axis, reverse)]
    for name, g, wv in zip(names + ["int cumsum", "int cummax"], got, want, strict=True):
        if g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, wv, err_msg=name)
        else:
            np.testing.assert_allclose(g, wv, rtol=2e-5, atol=2e-4, err_msg=name)


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
def test_row_values_stay_within_the_loop_limit(target):
    """A work-item per row runs one loop per stage and one for the row values: where that would pass the
    driver's loop limit (lavapipe stops an invocation after 65,535 iterations, silently), the row values
    take a kernel of their own, and the results stay right. Here a small limit stands in for it."""
    import dataclasses
    import importlib
    dev = fa.devices(target.split(":")[0])[0]
    be = dev.impl
    x = np.random.default_rng(5).standard_normal((1100, 40)).astype(np.float32)
    z = fa.device_put(fnp.asarray(x), dev)
    st = be.state(dev) if dev.backend == "opencl" else None
    old = st.caps if st is not None else be.capabilities(dev)
    new = dataclasses.replace(old, max_loop_iterations=100)   # 3 loops of 40 pass it, 2 do not
    if st is not None:
        st.caps = new
    else:
        be._caps = new
    try:
        with fallback_mode("error"):
            jf = fa.jit(lambda v: fa.nn.softmax(v, axis=-1))
            text = jf.lower(z).as_text()
            got = np.asarray(jf(z))
    finally:
        if st is not None:
            st.caps = old
        else:
            be._caps = old
    assert importlib.import_module("fnarray.lowering.kernels.groups.reduce").ROW_VALUES
    # two kernels (a row kernel dispatched once per uniform window of rows prints its source once a dispatch)
    assert len({line for line in text.splitlines() if " kernel, global " in line}) == 2, text
    np.testing.assert_allclose(got, _softmax_f64(x.astype(np.float64)), rtol=3e-5, atol=3e-6)


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
def test_reductions_by_work_item_with_several_accumulators(target):
    """Many short rows: a work-item per row, on opencl:0 with 4 accumulators over ``r = 4j + k`` and a tail
    (37 = 4 * 9 + 1); ties, NaN, and the maximum in the tail or in every lane."""
    rng = np.random.default_rng(9)
    x = rng.integers(-5, 5, (1100, 37)).astype(np.float32)
    x[0, 36] = 50.0            # in the tail
    x[1, :] = 2.0              # a tie in every lane: index 0
    x[2, [3, 6]] = np.nan      # NaN in lanes 3 and 2: the first NaN
    x[3, [5, 9]] = -50.0       # the minimum twice in lane 1: the first
    z = fa.device_put(fnp.asarray(x), target)
    with fallback_mode("error"):
        got = [np.asarray(g) for g in fa.jit(lambda v: (fnp.argmax(v, axis=1), fnp.argmin(v, axis=1),
                                                        fnp.max(v, axis=1), fnp.sum(v, axis=1)))(z)]
    x64 = x.astype(np.float64)
    want = [np.argmax(x64, 1), np.argmin(x64, 1), np.max(x64, 1), np.sum(x64, 1)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-5)


# --------------------------------------------------------------------- vec4 rows on a CPU adapter
# On webgpu with a CPU adapter (lavapipe) a work-item's loops over a float32 row whose length is a multiple of 4
# read it, and a (R,) operand broadcast along the rows (a layernorm's scale and offset), one vec4 per four
# elements (the scheduler option ``row_vec4``, ``_ReduceKernel.vector_vars``); other lengths keep one load per
# element. Every element is still folded in order, so the results are those of the scalar form.

def _scaled_layernorm(v, g, b):
    return _layernorm(v) * g + b


@pytest.mark.parametrize("cols", [256, 64, 4, 130, 37], ids=lambda c: f"R{c}")
def test_vec4_rows_match_float64(cols):
    dev = require_backend("webgpu")[0]
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((1000, cols)).astype(np.float32) * 3
    x[0, cols - 1] = 40.0   # the maximum in a vector's last lane
    x[1, :] = 2.0           # ties: argmax takes the first
    gam = rng.standard_normal(cols).astype(np.float32)
    bet = rng.standard_normal(cols).astype(np.float32)
    z, zg, zb = (fa.device_put(fnp.asarray(a), dev) for a in (x, gam, bet))

    def f(v, g, b):
        loss = lambda v: fnp.sum(_scaled_layernorm(v, g, b) ** 2)   # noqa: E731  (the layernorm's backward)
        return (fa.nn.softmax(v, axis=-1), _scaled_layernorm(v, g, b), fnp.argmax(v, axis=-1),
                fnp.sum(v, axis=-1), fa.grad(loss)(v))

    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(z, zg, zb).as_text()
        got = [np.asarray(a) for a in jf(z, zg, zb)]
    cpu = dev.impl.capabilities(dev).tiling_pays is False
    assert ("array<vec4<f32>>" in text) == (cpu and cols % 4 == 0), text
    # rows over 64 KiB read through uniform windows of whole rows, a dispatch each (reduce.UNIFORM_ROWS): 1000 rows
    # of 64 in 4 windows (the last moved back to end at the buffer's end); of 256 they would take 16, more than
    # reduce.ROW_WINDOWS_MOST: storage; the scale (R,) whole
    assert ("- w_off)]" in text) == (cpu and cols == 64), text
    assert (f"array<vec4<f32>, {cols // 4}>;" in text) == (cpu and cols in (64, 256)), text
    x64, g64, b64 = x.astype(np.float64), gam.astype(np.float64), bet.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    sd = np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x64 - mu) / sd
    y = xhat * g64 + b64
    dxhat = 2 * y * g64   # d(sum y^2)/dxhat
    dx = (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)) / sd
    want = [_softmax_f64(x64), y, np.argmax(x64, -1), x64.sum(-1), dx]
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=3e-5, atol=3e-5 * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("O,R,align,count,most", [(1100, 64, 256, 5, 64), (4096, 64, 256, 16, 64),
                                                   (1100, 40, 256, 0, 64), (100, 64, 256, 0, 64), (1100, 256, 64, 18, 64),
                                                   (20000, 64, 256, 0, 64), (1000, 64, 256, 4, None),
                                                   (1100, 64, 256, 0, None)])
def test_row_windows_cover_the_rows(monkeypatch, O, R, align, count, most):
    """``reduce._row_windows``: windows of whole rows, all of one size (at most 64 KiB, a multiple of the alignment)
    and at aligned offsets, in order, each holding its rows (the last one moved back to end at the buffer's end);
    none where the rows fit one binding (100 x 64), the buffer's size is not aligned (1100 x 40: 176,000 bytes) or
    more than ``ROW_WINDOWS_MOST`` (``most``; ``None``: the default, 4) windows would be needed."""
    from fnarray.lowering.kernels.groups import reduce
    if most is not None:
        monkeypatch.setattr(reduce, "ROW_WINDOWS_MOST", most)
    plan = reduce._row_windows(O, R, (1 << 16, align))
    assert len(plan[1] if plan else ()) == count
    if not plan:
        return
    per, wins = plan
    size = 4 * per * R
    assert size <= 1 << 16 and size % align == 0
    assert [w[0] for w in wins] == list(range(0, O, per)) and [w[1] for w in wins] == [*[w[0] for w in wins[1:]], O]
    for o0, o1, at in wins:
        assert at % align == 0 and at <= 4 * o0 * R and 4 * o1 * R <= at + size <= 4 * O * R


def test_vec4_rows_of_a_gather_match_float64():
    """A layernorm of embedding rows (``table[ids]``, the transformer's first one): the gathered rows' reads
    keep one load per element (their index is a value loaded in the kernel), the scale's are vec4."""
    dev = require_backend("webgpu")[0]
    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    ids = rng.integers(0, 50, (1100,)).astype(np.int32)
    gam = rng.standard_normal(64).astype(np.float32)
    args = [fa.device_put(fnp.asarray(a), dev) for a in (table, ids, gam)]
    with fallback_mode("error"):
        got = np.asarray(fa.jit(lambda t, i, g: _layernorm(t[i]) * g)(*args))
    np.testing.assert_allclose(got, _ref_layernorm(table[ids].astype(np.float64)) * gam, rtol=3e-5, atol=3e-5)
