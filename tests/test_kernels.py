"""The kernel compiler without a device: index algebra, scheduling (fusion, limits), rendering, golden kernels.

Kernel counts are checked on the schedule of traced programs for fixed
capabilities, so these tests run where no OpenCL driver is installed. Golden
files under ``tests/golden/`` hold the OpenCL C (``.cl``) and WGSL (``.wgsl``) of a few kernels; set
``FNARRAY_REGEN_GOLDEN=1`` to rewrite them after an intended change (and review
the diff).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import pickle
import re
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import render_opencl, schedule
from fnarray.lowering.kernels.index import ix_const, ix_data, ix_var, linearize, to_expr, unravel
from fnarray.lowering.kernels.ir import BufferParam, Const, Kernel, Load, Op, Store, Sym, const
from fnarray.lowering.kernels.opencl_c import OpenCLRenderer
from fnarray.lowering.kernels.wgsl import render_wgsl

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))  # after examples/: both have an llm.py
from backend_vs_raw import fn_init, fn_loss  # noqa: E402

GOLDEN = pathlib.Path(__file__).parent / "golden"
CAPS = Capabilities(dtypes=frozenset(dtypes.ALL_DTYPES), max_workgroup_size=256, local_memory=True,
                    tiling_pays=True, control_flow="host")
WEBGPU_LIKE = Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_}),
                           max_buffers_per_kernel=8, max_workgroup_size=256, max_dispatch=65535,
                           local_memory=True, tiling_pays=True, control_flow="host")
# The fusion tests run for both kernel backends: their capabilities and their renderer.
TARGETS = {"opencl": (CAPS, render_opencl), "webgpu": (WEBGPU_LIKE, render_wgsl)}


@pytest.fixture(params=sorted(TARGETS))
def target(request):
    return TARGETS[request.param]


def traced(f, *args):
    prog = fa.make_ir(f)(*args)
    fa.check_program(prog)
    return prog


def kernels(f, *args, caps=CAPS, target=None):
    """The launches of ``f``'s schedule; with a ``target``, for its capabilities, each kernel printed by its
    renderer (which raises on what the target cannot express)."""
    if target is not None:
        caps, render = target
    launches = schedule(traced(f, *args), caps, workgroup=64).launches
    if target is not None:
        for launch in launches:
            render(launch.kernel)
    return launches


def f32(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


# ------------------------------------------------------------------------------------- index algebra


def test_reshape_round_trip_reads_the_same_element():
    i, j = ix_var("i0", 3), ix_var("i1", 4)
    flat = linearize((i, j), (3, 4))
    assert unravel(flat, (3, 4)) == (i, j)
    # Through a different shape and back: still the identity.
    mid = unravel(flat, (2, 6))
    assert linearize(unravel(linearize(mid, (2, 6)), (3, 4)), (3, 4)) == flat


def test_division_and_remainder_use_bounds():
    i, j = ix_var("i", 5), ix_var("j", 4)
    assert (i * 4 + j) // 4 == i
    assert (i * 4 + j) % 4 == j
    assert (i * 8 + j) // 4 == i * 2
    assert ((i * 4 + j) // 2).bounds() == (0, 9)
    d = ix_data(Sym("k", np.dtype(np.int32)), 0, 2)
    assert (d * 6 + j) % 6 == j
    assert ix_const(7) // 2 == ix_const(3) and ix_const(7) % 2 == ix_const(1)


def test_index_expression_matches_python():
    i, j = ix_var("i", 6), ix_var("j", 5)
    form = ((i * 5 + j) // 3) % 4 + 2
    e = to_expr(form)
    rendered = OpenCLRenderer().expr(e)
    for iv in range(6):
        for jv in range(5):
            want = ((iv * 5 + jv) // 3) % 4 + 2
            got = eval(rendered.replace("/", "//"), {"i": iv, "j": jv})  # noqa: S307 (our own int expression)
            assert got == want


# ------------------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("value,dtype,text", [
    (1.5, np.float32, "1.5f"), (-0.0, np.float32, "(-0.0f)"), (np.inf, np.float32, "((float)INFINITY)"),
    (-np.inf, np.float32, "(-(float)INFINITY)"), (np.nan, np.float32, "((float)NAN)"),
    (0.1, np.float64, "0.1"), (-2147483648, np.int32, "(-2147483647 - 1)"), (7, np.uint32, "7u"),
    (-3, np.int8, "((char)-3)"), (True, np.bool_, "true"), (2**40, np.int64, "1099511627776L"),
])
def test_literals(value, dtype, text):
    assert OpenCLRenderer().literal(const(value, dtype)) == text


def test_float32_literal_round_trips():
    for v in np.random.default_rng(0).standard_normal(200).astype(np.float32):
        text = OpenCLRenderer().literal(const(v, np.float32))
        assert np.float32(float(text.strip("()").rstrip("f"))) == v


def test_constants_keep_sign_of_zero_and_nan_apart():
    assert const(0.0, np.float32) != const(-0.0, np.float32)
    assert const(np.nan, np.float32) == const(np.nan, np.float32)
    assert isinstance(Load("global", "x", const(0, np.int32), np.dtype(np.float32)).index, Const)


def test_an_expression_hashes_its_fields_once_and_pickles_without_the_hash(monkeypatch):
    hashed = []   # every expression whose fields were hashed (kept alive: their ids stay distinct)
    for cls in (Op, Sym):
        monkeypatch.setattr(cls, "_field_hash", lambda e, real=cls._field_hash: (hashed.append(e), real(e))[1])
    f32_ = np.dtype(np.float32)
    e = Sym("x", f32_)
    for _ in range(10):   # 11 nodes, a tree of 2**10 leaves: a structural hash per lookup is exponential here
        e = Op("add", (e, e), f32_)
    kernel = Kernel("k", (BufferParam("y", f32_, True),), (Store("global", "y", const(0, np.int32), e),))
    for render in (render_opencl, render_wgsl):
        assert render(kernel) == render(kernel)
    assert len({id(x) for x in hashed}) == len(hashed) < 11 * 8   # each node once, the rewrite passes' copies too
    back = pickle.loads(pickle.dumps(kernel))
    assert back == kernel and not hasattr(back.body[0].value, "_hash") and "_hash" not in repr(e)
    assert hash(back) == hash(kernel) and back.body[0].value._hash == e._hash


def test_generated_source_is_deterministic(target):
    def f(x, y):
        return fnp.sum(fnp.exp(x - fnp.max(x, axis=1, keepdims=True)) * y, axis=1)
    x, y = f32(8, 20), f32(8, 20, seed=1)
    render = target[1]
    first = [render(launch.kernel) for launch in kernels(f, x, y, target=target)]
    second = [render(launch.kernel) for launch in kernels(f, x, y, target=target)]
    assert first == second


def test_flat_kernels_take_the_size_as_an_argument(target):
    # One compiled kernel serves every shape: the source of add on (3, 4) and on (7,) is the same.
    render = target[1]
    a = [render(k.kernel) for k in kernels(lambda x, y: x + y, f32(3, 4), f32(3, 4), target=target)]
    b = [render(k.kernel) for k in kernels(lambda x, y: x + y, f32(7), f32(7), target=target)]
    assert a == b and len(a) == 1
    r1 = [render(k.kernel) for k in kernels(lambda x: fnp.sum(x, axis=1), f32(3, 40), target=target)]
    r2 = [render(k.kernel) for k in kernels(lambda x: fnp.sum(x, axis=1), f32(5, 50), target=target)]
    assert r1 == r2


# ------------------------------------------------------------------------------------- fusion


def test_elementwise_chain_is_one_kernel(target):
    a, x, b = f32(1000), f32(1000, seed=1), f32(1000, seed=2)
    ks = kernels(lambda a, x, b: fnp.tanh(a * x + b) * x + 1.0, a, x, b, target=target)
    assert len(ks) == 1
    assert {e.primitive for e in ks[0].eqns} == {P.mul, P.add, P.tanh}


def test_broadcasts_transposes_and_slices_fuse(target):
    def f(x, y, z):
        return (x.T[1:, ::2] * y[None, :] + z[:, None]).reshape(-1)
    x, y, z = f32(6, 5), f32(3), f32(4)
    ks = kernels(f, x, y, z, target=target)
    assert len(ks) == 1
    assert {P.transpose, P.slice_p, P.broadcast_in_dim, P.reshape} <= {e.primitive for e in ks[0].eqns}


def test_softmax_normaliser_is_at_most_two_kernels(target):
    ks = kernels(lambda x: fnp.sum(fnp.exp(x - fnp.max(x))), f32(1000), target=target)
    assert len(ks) <= 2
    assert all(k.kind == "reduce" for k in ks)


def test_matmul_bias_relu_is_one_matmul_kernel(target):
    x, w, b = f32(64, 32), f32(32, 48, seed=1), f32(48, seed=2)
    ks = kernels(lambda x, w, b: fa.nn.relu(x @ w + b), x, w, b, target=target)
    assert len(ks) == 1 and ks[0].kind == "dot"
    prims = {e.primitive for e in ks[0].eqns}
    assert P.dot_general in prims and P.add in prims and P.max_p in prims
    # The product itself is not written: only the activation is.
    writes = [p for p in ks[0].kernel.params if isinstance(p, BufferParam) and p.writes]
    assert len(writes) == 1


def test_mlp_gradient_runs_in_fewer_kernels_than_primitives(target):
    params = fn_init()
    x = f32(64, 64)
    y = np.eye(10, dtype=np.float32)[np.random.default_rng(0).integers(0, 10, 64)]
    prog = traced(fa.grad(fn_loss), params, x, y)
    ks = kernels(fa.grad(fn_loss), params, x, y, target=target)
    assert len(ks) < len(prog.eqns) / 2, (len(ks), len(prog.eqns))


def test_multi_output_elementwise_shares_a_kernel(target):
    def adam_like(m, v, g):
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * g * g
        return m2, v2, m2 / (fnp.sqrt(v2) + 1e-8)
    ks = kernels(adam_like, f32(100), f32(100, seed=1), f32(100, seed=2), target=target)
    assert len(ks) == 1
    assert sum(isinstance(p, BufferParam) and p.writes for p in ks[0].kernel.params) == 3


def test_weight_gradient_transpose_folds_into_the_matmul(target):
    x, g = f32(64, 32), f32(64, 16, seed=1)
    ks = kernels(lambda x, g: (x.T @ g).T, x, g, target=target)
    assert len(ks) == 1 and ks[0].kind == "dot"


def test_reduction_epilogue_fuses(target):
    ks = kernels(lambda x: fnp.mean(x, axis=1) * 2.0 + 1.0, f32(16, 50), target=target)
    assert len(ks) == 1 and ks[0].kind == "reduce"


def test_reductions_over_one_iteration_space_share_a_kernel(target):
    # Mean and variance as two independent sums: one pass over x. A sum that reads the max at its own row
    # runs in the same kernel, in a second loop over the row; one that reads another row's max waits.
    ks = kernels(lambda x: (fnp.sum(x, axis=1), fnp.sum(x * x, axis=1)), f32(16, 50), target=target)
    assert len(ks) == 1
    for rows in (16, 2048):  # a work-group per row, and a work-item per row
        ks = kernels(lambda x: fnp.sum(fnp.exp(x - fnp.max(x, axis=1, keepdims=True)), axis=1), f32(rows, 90),
                     target=target)
        assert len(ks) == 1
        ks = kernels(lambda x: fnp.sum(x - fnp.max(x, axis=1, keepdims=True)[::-1], axis=1), f32(rows, 90),
                     target=target)
        assert len(ks) == 2


def test_small_independent_values_ride_along(target):
    # A loop body's counter beside its array: one launch, in either order.
    for f in (lambda i, x: (i + 1, fnp.tanh(x) * 0.5), lambda i, x: (fnp.tanh(x) * 0.5, i + 1)):
        ks = kernels(f, np.int32(3), f32(100), target=target)
        assert len(ks) == 1 and ks[0].kind == "map"


# ------------------------------------------------------------------------------------- target limits


def test_buffer_limit_is_respected():
    xs = [f32(16, seed=i) for i in range(12)]

    def f(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = acc * 0.5 + x
        return acc
    for launch in kernels(f, *xs, caps=WEBGPU_LIKE):
        assert sum(isinstance(p, BufferParam) for p in launch.kernel.params) <= 8
    assert len(kernels(f, *xs)) == 1  # without the limit: one kernel


def test_large_dispatch_folds_into_two_dimensions():
    caps = Capabilities(dtypes=CAPS.dtypes, max_workgroup_size=64, max_dispatch=16, control_flow="host")
    ks = kernels(lambda x: x * 2.0, f32(64 * 40), caps=caps)
    assert len(ks[0].global_size) == 2 and ks[0].global_size[0] // 64 <= 16
    assert ks[0].global_size[0] * ks[0].global_size[1] >= 64 * 40


def test_no_local_memory_means_serial_reductions_and_untiled_matmuls():
    caps = Capabilities(dtypes=CAPS.dtypes, max_workgroup_size=64, local_memory=False, control_flow="host")
    ks = kernels(lambda x, w: fnp.sum(x @ w, axis=0), f32(128, 128), f32(128, 128, seed=1), caps=caps)
    assert "__local" not in "".join(render_opencl(k.kernel) for k in ks)


@pytest.mark.enable_x64
def test_64_bit_and_half_kernels_enable_their_extensions():
    x64 = np.linspace(0, 1, 16)
    src = "".join(render_opencl(k.kernel) for k in kernels(lambda x: fnp.exp(x) * 2.0, x64))
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in src and "double" in src
    x16 = np.linspace(0, 1, 16).astype(np.float16)
    src = "".join(render_opencl(k.kernel) for k in kernels(lambda x: fnp.exp(x) * 2.0, x16))
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src
    # float16 math computes in float32 and rounds back, as the reference does.
    assert "fa_exp_f32(((float)(" in src and "((half)(" in src   # the float32 exp helper (opencl_c.py)


# ------------------------------------------------------------------------------------- golden kernels


def _golden_programs():
    rng = np.random.default_rng(0)
    a, x, b = f32(1000), f32(1000, seed=1), f32(1000, seed=2)
    yield "chain", (lambda a, x, b: fnp.tanh(a * x + b) * x + 1.0), (a, x, b)
    yield "logsumexp_rows", (lambda x: fnp.log(fnp.sum(fnp.exp(x - fnp.max(x, axis=1, keepdims=True)), axis=1))), (
        f32(8, 300),)
    yield "matmul_bias_relu", (lambda x, w, b: fa.nn.relu(x @ w + b)), (f32(64, 64), f32(64, 128, seed=1),
                                                                         f32(128, seed=2))
    yield "gather_transpose", (lambda x, i: x[i].T * 2.0), (f32(10, 3), rng.integers(0, 10, 7).astype(np.int32))
    yield "scatter_add", (lambda x, i, u: x.at[i].add(u)), (f32(10, 3), rng.integers(0, 10, 7).astype(np.int32),
                                                             f32(7, 3, seed=3))
    yield "argsort", (lambda x: fnp.argsort(x)), (f32(20),)
    yield "cumsum_rows", (lambda x: fnp.cumsum(x, axis=0)), (f32(5, 4),)
    # CPU OpenCL's form (``uniform_guard``): full work-groups unguarded; the NaN-propagating clip as
    # one IEEE comparison per bound, the maximum's NaN test as x != x.
    yield "clip_max_cpu", (lambda a, x, b: fnp.maximum(fnp.clip(a * x + b, -4.0, 4.0), x)), (a, x, b)


# Golden programs scheduled for other capabilities than CAPS.
_GOLDEN_CAPS = {"clip_max_cpu": dataclasses.replace(CAPS, uniform_guard=True)}


def _special_functions(x, y):
    # The transcendental and special-function bodies (kernels/transcendental.py) as each target prints them.
    return (fnp.tanh(x) + fa.lax.erf(x) + fa.lax.lgamma(y) + fnp.log1p(y) + fnp.expm1(x) + fnp.cbrt(x)
            + fnp.arctan2(x, y) + fnp.arcsin(x / 4.0) + fnp.arccos(x / 4.0) + fnp.power(y, x) + fnp.fmod(x, y)
            + fnp.hypot(x, y) + fnp.nextafter(x, y) + fnp.arccosh(y + 1.0) + fnp.copysign(y, x))


# The golden kernels per target: capabilities, renderer, file suffix. WGSL is rendered with the launch's
# work-group size, as the webgpu backend does.
_GOLDEN_TARGETS = {"opencl": (CAPS, render_opencl, ".cl"), "webgpu": (WEBGPU_LIKE, render_wgsl, ".wgsl")}


def _golden_cases():
    for name, f, args in _golden_programs():
        yield "opencl", name, f, args
        yield "webgpu", name, f, args
    yield "webgpu", "special_functions", _special_functions, (f32(100), f32(100, seed=1) + 2.0)


@pytest.mark.parametrize("target,name,f,args", list(_golden_cases()),
                         ids=[f"{t}-{n}" for t, n, _, _ in _golden_cases()])
def test_golden_kernels(target, name, f, args):
    caps, render, suffix = _GOLDEN_TARGETS[target]
    if target == "opencl":
        caps = _GOLDEN_CAPS.get(name, caps)
    seen, parts = set(), []
    for launch in schedule(traced(f, *args), caps, workgroup=64).launches:
        kernel = launch.kernel
        if target == "webgpu" and kernel.local_size is None:
            kernel = dataclasses.replace(kernel, local_size=tuple(launch.local_size))
        src = render(kernel)
        if src not in seen:  # a sort's compare-exchange kernel is launched once per stage
            seen.add(src)
            parts.append(src)
    text = "\n".join(parts)
    path = GOLDEN / f"{name}{suffix}"
    if os.environ.get("FNARRAY_REGEN_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with FNARRAY_REGEN_GOLDEN=1 to create it"
    assert text == path.read_text(), (f"generated kernels for {name!r} changed; review the difference and "
                                      "run with FNARRAY_REGEN_GOLDEN=1 if it is intended")


def test_opencl_conditions_are_not_doubly_parenthesised():
    """``if (r12 == r10)``, not ``if ((r12 == r10))``: clang (PoCL) warns of an equality in doubled parentheses
    whose left side is assignable, and printed "1 warning generated." at the first opencl:0 ``cholesky``; an
    ``if`` of two parenthesised terms keeps its parentheses."""
    spd = np.eye(5, dtype=np.float32) * 4 + 1
    launches = schedule(traced(fnp.linalg.cholesky, spd), CAPS, workgroup=64).launches
    src = render_opencl(launches[0].kernel)
    assert re.search(r"if \(r\d+ == r\d+\) \{", src) and not re.search(r"if \(\([^()]*\)\)", src)
    from fnarray.lowering.kernels.opencl_c import _outer_parentheses_dropped
    assert _outer_parentheses_dropped("(a == b)") == "a == b"
    assert _outer_parentheses_dropped("(a) && (b)") == "(a) && (b)"


# ------------------------------------------------------------------------------------- in-place updates


def _cache_update(cache, x, pos):
    new = fa.lax.dynamic_update_slice(cache, fnp.tanh(x) * 2.0, (pos, 0))
    return fnp.sum(new, axis=0), new


def test_donated_dynamic_update_slice_writes_only_the_update_into_the_input(target):
    """With ``donate`` (input position -> output position), a ``dynamic_update_slice`` of a donated input that
    nothing else reads is one kernel over the update's elements, writing into the input's buffer, which the
    output shares; without donation (or donated to another output) a kernel writes the whole new array."""
    args = (f32(1024, 16), f32(1, 16), np.int32(3))
    caps, render = target
    prog = traced(_cache_update, *args)

    def writes_of(sched):
        return [(la.kind, la.global_size) for la in sched.launches
                if any(isinstance(p, BufferParam) and p.writes and a is sched.outputs[1]
                       for p, a in zip(la.kernel.params, la.args, strict=True))]

    sched = schedule(prog, caps, workgroup=64, donate={0: 1})
    for la in sched.launches:
        render(la.kernel)
    assert sched.outputs[1] is sched.inputs[0]
    assert writes_of(sched) == [("update", (64,))]           # 16 elements: one work-group; the cache has 16,384
    for donate in (None, {0: 0}, {1: 1}):
        other = schedule(prog, caps, workgroup=64, donate=donate)
        assert other.outputs[1] is not other.inputs[0]
        assert sum(math.prod(g) for _, g in writes_of(other)) >= 1024 * 16
    # any output (jit's donate_argnums): the same
    anywhere = schedule(prog, caps, workgroup=64, donate={0: None})
    assert anywhere.outputs[1] is anywhere.inputs[0]


def _two_caches(keys, values, k, v, pos):
    """A layer's key and value caches updated at ``pos`` (``v`` with more rows than ``k``: the two updates differ in
    size) and a read of both new caches."""
    new_k = fa.lax.dynamic_update_slice(keys, fnp.tanh(k), (pos, 0))
    new_v = fa.lax.dynamic_update_slice(values, v * 2.0, (pos, 0))
    return fnp.sum(new_k) + fnp.sum(new_v), new_k, new_v


def test_donated_caches_of_one_layer_are_one_update_kernel(target):
    """Two donated caches updated side by side (a layer's keys and values) are written by one in-place kernel,
    over the larger update, never more launches than without donation; each output shares its input's buffer."""
    caps, render = target
    args = (f32(256, 8), f32(256, 8, seed=1), f32(1, 8), f32(3, 8), np.int32(5))
    prog = traced(_two_caches, *args)
    sched = schedule(prog, caps, workgroup=64, donate={0: 1, 1: 2})
    for la in sched.launches:
        render(la.kernel)
    assert sched.outputs[1] is sched.inputs[0] and sched.outputs[2] is sched.inputs[1]
    updates = [la for la in sched.launches if la.kind == "update"]
    assert len(updates) == 1 and updates[0].global_size == (64,)
    written = {a for p, a in zip(updates[0].kernel.params, updates[0].args, strict=True)
               if isinstance(p, BufferParam) and p.writes}
    assert {sched.inputs[0], sched.inputs[1]} <= written
    assert len(sched.launches) <= len(schedule(prog, caps, workgroup=64).launches)


def test_donated_input_read_elsewhere_is_not_updated_in_place():
    """Another read of the donated input (the old value, after the update would have overwritten it) keeps the
    copy: the output gets a buffer of its own."""
    def f(cache, x):
        return fa.lax.dynamic_update_slice(cache, x, (2, 0)), fnp.sum(cache)

    prog = traced(f, f32(64, 4), f32(1, 4))
    sched = schedule(prog, WEBGPU_LIKE, workgroup=64, donate={0: 0})
    assert sched.outputs[0] is not sched.inputs[0]
    assert all(la.kind != "update" for la in sched.launches)


def test_donated_scatter_writes_only_the_updated_rows(target):
    """A scatter into a donated input: one kernel over the updates (4 rows of 16), writing into the input's
    buffer; the copying scatter kernel walks every element of the 1024 x 16 result."""
    caps, render = target

    def f(x, i, u):
        return x.at[i].add(u)

    prog = traced(f, f32(1024, 16), np.asarray([3, 5, 3, 7], np.int32), f32(4, 16))
    sched = schedule(prog, caps, workgroup=64, donate={0: 0})
    for la in sched.launches:
        render(la.kernel)
    assert sched.outputs[0] is sched.inputs[0]
    assert [(la.kind, la.global_size) for la in sched.launches] == [("update", (64,))]
    plain = schedule(prog, caps, workgroup=64)
    assert [la.kind for la in plain.launches] == ["scatter"] and plain.launches[0].global_size[0] >= 1024 * 16


def test_value_of_an_in_place_update_is_not_read_in_its_own_kernel():
    """A cache-sized value read after an in-place update (``new * 2``) is not computed by the update's kernel, even
    when that kernel iterates over the cache's shape (it took over a cache-sized map kernel): its work items write
    the updated rows, not their own elements, so a read of the result there would race with them."""
    def f(cache, other, x):
        big = other * 3.0                                   # a cache-sized map kernel the update can take over
        new = fa.lax.dynamic_update_slice(cache, x, (5, 0))
        return new, big, new * 2.0

    prog = traced(f, f32(64, 4), f32(64, 4), f32(1, 4))
    sched = schedule(prog, WEBGPU_LIKE, workgroup=64, donate={0: 0})
    assert sched.outputs[0] is sched.inputs[0]
    update = next(la for la in sched.launches if la.kind == "update")
    assert sched.outputs[2] not in update.args and sched.outputs[1] in update.args
