"""Pallas kernels as Metal for MLX (``fnarray/lowering/mlx/pallas.py``, ``kernels/metal.py``), checked without an
Apple machine:

- golden files ``tests/golden/pallas_<example>.metal``: the MSL of each ``examples/kernels/`` kernel, rendered from
  the kernel IR that opencl and webgpu print too (``FNARRAY_REGEN_GOLDEN=1`` rewrites them, as in
  ``test_kernels.py``);
- a syntax check of that source with ``g++ -std=c++17 -fsyntax-only`` against ``tests/metal_shim.h``, which
  declares MSL's types, qualifiers, barriers and ``metal::`` functions (skipped without g++);
- the source run: g++ compiles each kernel function with the shim's definitions (``FA_METAL_RUN``) and a driver
  runs it over its grid, a ``std::thread`` per Metal thread, against the interpreter's result;
- the arguments given to ``mx.fast.metal_kernel`` (a stand-in, patched in): names, grid, threadgroup, shapes,
  dtypes, and the source wrapped in the signature MLX would write from them, checked with g++ again;
- the fallback where MLX has no Metal (Linux): the interpreter, with a ``FallbackWarning`` naming the reason.

Nothing here runs on Metal: that needs Apple silicon.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.experimental.pallas as pl
import fnarray.numpy as fnp
from fnarray.core.pallas import pallas_call_p
from fnarray.core.subprograms import subprograms
from fnarray.lowering.kernels import metal
from fnarray.lowering.kernels.groups.pallas import revisited_axes
from fnarray.lowering.kernels.ir import BufferParam, Kernel, Load, Op, Store, Sym, const

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from kernels import flash_attention, layer_norm, matmul, quantized_matvec, softmax, vector_add  # noqa: E402

HERE = pathlib.Path(__file__).parent
GOLDEN = HERE / "golden"
SHIM = HERE / "metal_shim.h"
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed (the MSL syntax check uses it)")

rng = np.random.default_rng(2912)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _qmv_args():
    w, s, b = (np.asarray(a) for a in fa.quantize(_f32(32, 256), group_size=64, bits=4))
    return _f32(256), w, s, b


#: name: (the function of the example's kernel, its inputs), the shapes of tests/test_kernel_examples.py
EXAMPLES = {
    "vector_add": (vector_add.vector_add, lambda: (_f32(1000), _f32(1000))),
    "softmax": (softmax.softmax_forward, lambda: (_f32(16, 40),)),
    "softmax_backward": (softmax.softmax_backward, lambda: (_f32(16, 40), _f32(16, 40))),
    "layer_norm": (layer_norm.layer_norm, lambda: (_f32(16, 48), _f32(48), _f32(48))),
    "matmul": (lambda x, y: matmul.matmul(x, y, 16, 16, 16), lambda: (_f32(64, 48), _f32(48, 32))),
    "flash_attention": (flash_attention.flash_attention, lambda: (_f32(2, 32, 8), _f32(2, 32, 8), _f32(2, 32, 8))),
    "quantized_matvec": (quantized_matvec.quantized_matvec, _qmv_args),
}


def _pallas_eqns(prog):
    for e in prog.eqns:
        if e.primitive is pallas_call_p:
            yield e
        for sub in subprograms(e):
            yield from _pallas_eqns(sub)


def _calls(name):
    from fnarray.lowering.mlx.pallas import metal_call
    f, make = EXAMPLES[name]
    args = make()
    eqns = list(_pallas_eqns(fa.make_ir(f)(*args)))
    assert eqns, f"{name}: no pallas_call traced"
    return [metal_call(e) for e in eqns], eqns, args


def _syntax_check(text, tmp_path, stem):
    """``g++ -fsyntax-only`` of ``text`` after the shim; returns the compiler's complaints ('' when none)."""
    src = tmp_path / f"{stem}.cpp"
    src.write_text(f'#include "{SHIM}"\n{text}')
    r = subprocess.run([GXX, "-std=c++17", "-fsyntax-only", "-Wno-attributes", str(src)], capture_output=True,
                       text=True, timeout=120)
    return "" if r.returncode == 0 else r.stderr


def _threadgroup_arrays_at_kernel_scope(text):
    """MSL wants ``threadgroup`` variables at the kernel function's scope: each declaration one level in."""
    for line in text.splitlines():
        if re.match(r"\s*threadgroup \w+ \w+\[", line):
            assert line.startswith("    threadgroup ") and not line.startswith("     "), line


# ------------------------------------------------------------------------------------------------ golden files


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_golden_metal_kernels(name):
    calls, _, _ = _calls(name)
    text = "\n".join(metal.render_metal(c.kernel) for c in calls)
    path = GOLDEN / f"pallas_{name}.metal"
    if os.environ.get("FNARRAY_REGEN_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with FNARRAY_REGEN_GOLDEN=1 to create it"
    assert text == path.read_text(), (f"the Metal kernel of {name!r} changed; review the difference and run with "
                                      "FNARRAY_REGEN_GOLDEN=1 if it is intended")
    _threadgroup_arrays_at_kernel_scope(text)


@needs_gxx
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_golden_metal_kernels_compile_with_the_shim(name, tmp_path):
    text = (GOLDEN / f"pallas_{name}.metal").read_text()
    assert _syntax_check(text, tmp_path, name) == ""


@needs_gxx
def test_the_syntax_check_can_fail(tmp_path):
    """The shim declares only what MSL has: a function MSL lacks, an unqualified math call, a store into an input,
    a bit cast between sizes and a mixed-type ``min`` each fail."""
    head = "[[kernel]] void k(const device float* a [[buffer(0)]], device float* o [[buffer(1)]]) {\n"
    good = head + "    o[0] = metal::exp(a[0]);\n}\n"
    assert _syntax_check(good, tmp_path, "good") == ""
    for stem, line in [("erf", "o[0] = metal::erf(a[0]);"), ("unqualified", "o[0] = exp(a[0]);"),
                       ("const", "a[0] = 1.0f;"), ("bitcast", "o[0] = as_type<float>(1L);"),
                       ("mixed", "o[0] = (float)metal::min(1, (long)2);"), ("undeclared", "o[0] = b[0];")]:
        assert _syntax_check(head + f"    {line}\n}}\n", tmp_path, stem) != "", line


@needs_gxx
def test_renderer_spellings_compile(tmp_path):
    """The spellings that the examples do not reach: half and 64-bit literals, NaN and infinity, bit casts, the
    float remainder (fmod), bool min/max, integer abs and popcount, and each ``FUNCTIONS`` name on floats."""
    f32, f16, i64, u32 = (np.dtype(t) for t in (np.float32, np.float16, np.int64, np.uint32))
    a = Load("global", "a", const(0, np.int32), f32)
    body = [Store("global", "o", const(0, np.int32), Op("rem", (a, const(3.0, f32)), f32)),
            Store("global", "o", const(1, np.int32), Op("add", (a, Op("fabs", (const(np.nan, f32),), f32)), f32)),
            Store("global", "h", const(0, np.int32), Op("mul", (Load("global", "h", const(0, np.int32), f16),
                                                             const(np.inf, f16)), f16)),
            Store("global", "n", const(0, np.int32), Op("add", (Op("fabs", (const(-2**62, i64),), i64),
                                                             const(-2**63, i64)), i64)),
            Store("global", "u", const(0, np.int32), Op("popcount", (Op("max", (const(7, u32), const(9, u32)), u32),),
                                                         u32))]
    for k, fn in enumerate(sorted(metal.FUNCTIONS - {"popcount", "isnan", "isinf", "isfinite"})):
        args = (a,) * (2 if fn in ("atan2", "copysign", "fmod", "pow", "min", "max") else 1)
        body.append(Store("global", "o", const(k + 2, np.int32), Op(fn, args, f32)))
    flag = Op("max", (Op("isnan", (a,), np.dtype(np.bool_)), Op("isinf", (a,), np.dtype(np.bool_))),
              np.dtype(np.bool_))
    body.append(Store("global", "b", const(0, np.int32), flag))
    params = (BufferParam("a", f32, False), BufferParam("o", f32, True), BufferParam("h", f16, True),
              BufferParam("n", i64, True), BufferParam("u", u32, True), BufferParam("b", np.dtype(np.bool_), True))
    text = metal.render_metal(Kernel("spellings", params, tuple(body)))
    assert "((half)(" in text and "L" in text and "as_type<" in text
    assert _syntax_check(text, tmp_path, "spellings") == "", text


def test_renderer_refuses_what_metal_lacks():
    k = Kernel("k", (BufferParam("o", np.dtype(np.float64), True),),
               (Store("global", "o", const(0, np.int32), const(1.0, np.float64)),))
    with pytest.raises(TypeError, match="float64"):
        metal.render_metal(k)
    k = Kernel("k", (BufferParam("o", np.dtype(np.int32), True),),
               (Store("global", "o", const(0, np.int32), Op("lgamma", (Sym("x", np.dtype(np.int32)),),
                                                           np.dtype(np.int32))),))
    with pytest.raises(TypeError, match="lgamma"):
        metal.render_metal(k)


def test_shim_declares_every_function_the_renderer_prints():
    shim = SHIM.read_text()
    for fn in metal.FUNCTIONS:
        assert re.search(rf"\b{fn}\b", shim), fn


# ------------------------------------------------------------------------------- the Metal source, run on the CPU

_ATTRIBUTE_VALUES = {"thread_position_in_grid": "uint3{uint(g * wg + t), 0u, 0u}",
                     "thread_position_in_threadgroup": "uint3{uint(t), 0u, 0u}",
                     "threadgroup_position_in_grid": "uint3{uint(g), 0u, 0u}",
                     "threads_per_grid": "uint3{uint(groups * wg), 1u, 1u}"}


def _driver(call):
    """A C++ program that runs ``call``'s kernel function (as ``render_metal`` prints it) over its grid on the
    CPU: buffers read from and written to ``<dir>/<name>.bin``, results starting as zeros (``init_value=0``). The
    shim includes the C++ headers it needs (before its macros)."""
    src = call.source
    by_name = {p.name: p for p in call.kernel.params}
    types_ = {n: metal.MLX_TYPE_NAMES[np.dtype(by_name[n].dtype)] for n in src.input_names + src.output_names}
    lines = ["#undef thread   // the shim's address space, not std::thread",
             "static std::vector<unsigned char> fa_read(const std::string& path) {",
             "  std::vector<unsigned char> b; FILE* f = std::fopen(path.c_str(), \"rb\"); int c;",
             "  while ((c = std::fgetc(f)) != EOF) b.push_back((unsigned char)c);",
             "  std::fclose(f); return b; }",
             "int main(int argc, char** argv) {", "  const std::string dir = argv[1];"]
    for n in src.input_names + src.output_names:
        lines.append(f'  std::vector<unsigned char> {n} = fa_read(dir + "/{n}.bin");')
    wg, total = call.threadgroup[0], call.grid[0]
    lines += [f"  const int wg = {wg}, groups = {total // wg};", "  for (int g = 0; g < groups; ++g) {",
              "    std::barrier<> group(wg); fa_barrier = &group;", "    std::vector<std::thread> threads;",
              "    for (int t = 0; t < wg; ++t) threads.emplace_back([&, t] {"]
    args = [f"reinterpret_cast<{'const ' if n in src.input_names else ''}{types_[n]}*>({n}.data())"
            for n in src.input_names + src.output_names]
    args += [_ATTRIBUTE_VALUES[a] for a in src.attributes]
    lines += [f"      {call.kernel.name}({', '.join(args)});", "    });",
              "    for (auto& th : threads) th.join();", "  }"]
    for n in src.output_names:
        lines.append(f'  {{ FILE* f = std::fopen((dir + "/{n}.out").c_str(), "wb"); '
                     f"std::fwrite({n}.data(), 1, {n}.size(), f); std::fclose(f); }}")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _run_on_cpu(f, args, tmp_path, label, tol=2e-5):
    """``f``'s one ``pallas_call`` as its Metal kernel function, compiled by g++ with the shim's definitions and
    run by ``_driver`` over its grid, against ``f`` on numpy:0 (the interpreter)."""
    from fnarray.lowering.mlx.pallas import metal_call
    traced = fa.jit(f).trace(*args)
    prog = traced.program
    (eqn,) = list(_pallas_eqns(prog))
    assert list(prog.outvars) == list(eqn.outputs)
    call = metal_call(eqn)
    env = dict(zip(prog.constvars, [np.asarray(c) for c in traced.consts], strict=True))
    env.update(zip(prog.invars, [np.asarray(a) for a in args], strict=True))
    for n, k in zip(call.source.input_names, call.operands, strict=True):
        (tmp_path / f"{n}.bin").write_bytes(np.ascontiguousarray(env[eqn.inputs[k]]).tobytes())
    outs = eqn.params["out_avals"]
    for n, k in zip(call.source.output_names, call.results, strict=True):
        (tmp_path / f"{n}.bin").write_bytes(np.zeros(outs[k].shape, outs[k].dtype).tobytes())
    cpp = tmp_path / "run.cpp"
    cpp.write_text(f'#define FA_METAL_RUN\n#include "{SHIM}"\n{metal.render_metal(call.kernel)}\n{_driver(call)}')
    exe = tmp_path / "run"
    r = subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing", "-Wno-attributes", str(cpp),
                        "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    subprocess.run([str(exe), str(tmp_path)], check=True, timeout=300)
    want = [np.asarray(w) for w in fa.tree_util.tree_leaves(f(*[fa.device_put(a, "numpy:0") for a in args]))]
    for n, k in zip(call.source.output_names, call.results, strict=True):
        got = np.frombuffer((tmp_path / f"{n}.out").read_bytes(), outs[k].dtype).reshape(outs[k].shape)
        np.testing.assert_allclose(got.astype(np.float64), want[k].astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=label)


@needs_gxx
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_metal_source_runs_on_the_cpu(name, tmp_path):
    """The kernel function of each example, compiled by g++ with the shim's definitions and run over its grid (a
    thread per Metal thread, a threadgroup at a time, ``threadgroup_barrier`` a ``std::barrier``), equals the
    interpreter's result: what the Metal source computes, short of Metal's compiler and hardware."""
    f, make = EXAMPLES[name]
    _run_on_cpu(f, make(), tmp_path, name)


def _masked_add(x, y, block=16):   # docs/kernels.md: a padded last block, masked loads and stores
    n = x.shape[0]

    def kernel(x_ref, y_ref, o_ref):
        start = pl.program_id(0) * block
        mask = start + fnp.arange(block) < n
        v = pl.load(x_ref, pl.ds(start, block), mask=mask) + pl.load(y_ref, pl.ds(start, block), mask=mask)
        pl.store(o_ref, pl.ds(start, block), v, mask=mask)
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(pl.cdiv(n, block),))(x, y)


def _scratch_rows(x):   # a scratch ref in threadgroup memory; a store reading the ref it overwrites
    def kernel(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] * 3.0
        o_ref[...] = s_ref[...][::-1] + 1.0
        o_ref[...] = o_ref[...][:, ::-1] * 2.0
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pl.Local(x.shape, fnp.float32)])(x)


def _row_sums_by_loop(x, bc=8):   # a 2-d grid, fori_loop over column blocks, pl.when on the first instance
    rows, cols = x.shape

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = fnp.zeros_like(o_ref)

        def body(j, acc):
            return acc + fnp.sum(x_ref[:, pl.ds(j * bc, bc)], axis=1)
        o_ref[...] += fa.lax.fori_loop(0, cols // bc, body, fnp.zeros(o_ref.shape, fnp.float32))
    spec = pl.BlockSpec((4, cols), lambda i, k: (i, 0))
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((rows,), x.dtype), grid=(rows // 4, 2),
                          in_specs=[spec], out_specs=pl.BlockSpec((4,), lambda i, k: (i,)))(x)


def _integer_ops(a, b):   # int32 max/min/abs/where, a bool mask, an int64 result
    def kernel(a_ref, b_ref, o_ref, p_ref):
        a, b = a_ref[...], b_ref[...]
        o_ref[...] = fnp.where(a > b, fnp.abs(a - b), fnp.minimum(a, b) * fnp.maximum(a, 3))
        p_ref[...] = (a.astype(fnp.int64) * 4_000_000_000) // (fnp.abs(b).astype(fnp.int64) + 1)
    return pl.pallas_call(kernel, out_shape=(pl.ShapeDtypeStruct(a.shape, a.dtype),
                                             pl.ShapeDtypeStruct(a.shape, fnp.int64)))(a, b)


def _half_math(x):   # float16 through the float32 bodies (erf, log1p) and Metal's exp
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = fnp.exp(v) + fa.lax.erf(v) + fnp.log1p(fnp.abs(v))
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype))(x)


#: label: (function, inputs, tolerance): kernels beyond the examples, for the forms they do not reach
MORE = {
    "masked_add": (_masked_add, lambda: (_f32(37), _f32(37)), 1e-6),
    "scratch_rows": (_scratch_rows, lambda: (_f32(4, 8),), 1e-6),
    "row_sums_by_loop": (_row_sums_by_loop, lambda: (_f32(8, 32),), 1e-5),
    "integer_ops": (_integer_ops, lambda: tuple(rng.integers(-50, 50, (3, 40)).astype(np.int32) for _ in "ab"), 0),
    "half_math": (_half_math, lambda: (_f32(64).astype(np.float16),), 2e-3),
}


@needs_gxx
@pytest.mark.parametrize("label", list(MORE))
def test_more_kernels_run_on_the_cpu(label, tmp_path, x64):
    f, make, tol = MORE[label]
    _run_on_cpu(f, make(), tmp_path, label, tol)


# ------------------------------------------------------------------------------------ the mx.fast.metal_kernel call


class _FakeMetalKernel:
    """Stands in for ``mx.fast.metal_kernel``: records the construction and each call; a call returns
    ``compute(inputs)`` if given, else zeros of the output shapes."""

    def __init__(self, compute=None):
        self.made, self.calls, self.compute = [], [], compute

    def __call__(self, **kwargs):
        self.made.append(kwargs)
        assert set(kwargs) <= {"name", "input_names", "output_names", "source", "header", "ensure_row_contiguous",
                               "atomic_outputs"}, kwargs

        def kernel(**call):
            import mlx.core as mx
            self.calls.append(call)
            assert set(call) <= {"inputs", "template", "grid", "threadgroup", "output_shapes", "output_dtypes",
                                 "init_value", "verbose", "stream"}, call
            if self.compute is not None:
                return self.compute(call["inputs"])
            return [mx.zeros(s, dtype=d) for s, d in zip(call["output_shapes"], call["output_dtypes"], strict=True)]
        return kernel


def _mlx_signature(made, call):
    """The function MLX's ``metal_kernel`` compiles for these arguments, written from its rules (MLX's
    ``write_signature``): inputs as ``const device T*`` (``constant`` below 8 elements, a reference when 0-d),
    outputs as ``device T*``, then each ``uint3`` attribute the source names, alphabetically."""
    names = {np.dtype(k): v for k, v in metal.MLX_TYPE_NAMES.items()}
    params = []
    for name, a in zip(made["input_names"], call["inputs"], strict=True):
        t = names[np.dtype(str(a.dtype).split(".")[-1])]
        space = "constant" if a.size < 8 else "device"
        params.append(f"const {space} {t}{'&' if a.ndim == 0 else '*'} {name}")
    for name, d in zip(made["output_names"], call["output_dtypes"], strict=True):
        params.append(f"device {names[np.dtype(str(d).split('.')[-1])]}* {name}")
    params = [f"  {p} [[buffer({k})]]" for k, p in enumerate(params)]
    for attr in ("thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
                 "threadgroups_per_grid", "threads_per_grid", "threads_per_threadgroup"):
        if attr in made["source"]:
            params.append(f"  uint3 {attr} [[{attr}]]")
    return (made["header"] + f"[[kernel]] void custom_kernel_{made['name']}(\n" + ",\n".join(params) + ") {\n"
            + made["source"] + "\n}\n")


@pytest.fixture
def fake_metal(monkeypatch):
    mx = pytest.importorskip("mlx.core")
    from fnarray.lowering.mlx import pallas as mlx_pallas
    fake = _FakeMetalKernel()
    monkeypatch.setattr(mx.fast, "metal_kernel", fake)
    monkeypatch.setattr(mlx_pallas, "metal_available", lambda: True)
    return fake


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_metal_kernel_arguments(name, fake_metal, tmp_path):
    """What the mlx lowering passes to ``mx.fast.metal_kernel`` for each example, and (with g++) the source MLX
    would compile from it."""
    import mlx.core as mx
    from fnarray.lowering.mlx.common import mx_dtype
    from fnarray.lowering.mlx.pallas import mlx_pallas_call
    calls, eqns, _ = _calls(name)
    for call, eqn in zip(calls, eqns, strict=True):
        in_avals = [a.aval for a in eqn.inputs]
        out_avals = [o.aval for o in eqn.outputs]
        operands = [mx.array(rng.standard_normal(a.shape).astype(a.dtype)) if a.dtype.kind == "f"
                    else mx.array(rng.integers(0, 7, a.shape).astype(a.dtype)) for a in in_avals]
        outs = mlx_pallas_call(eqn.params, in_avals, out_avals)(*operands)
        made, got = fake_metal.made[-1], fake_metal.calls[-1]
        src = call.source
        # names: the operands the kernel reads and the results it writes, as the body names them
        assert made["input_names"] == list(src.input_names) and made["output_names"] == list(src.output_names)
        assert made["source"] == src.source and made["header"] == src.header
        assert made["ensure_row_contiguous"] is True and made["atomic_outputs"] is False
        for n in src.input_names + src.output_names:
            assert re.search(rf"\b{n}\[", src.source), n
        assert all(re.fullmatch(r"in\d+", n) for n in src.input_names)
        assert all(re.fullmatch(r"out\d+", n) for n in src.output_names)
        # the inputs are the operands, in the order of input_names
        assert len(got["inputs"]) == len(src.input_names)
        for a, k in zip(got["inputs"], call.operands, strict=True):
            assert a is operands[k] or np.array_equal(np.asarray(a), np.asarray(operands[k]).reshape(a.shape))
        # grid = program instances x threadgroup size (MLX's grid counts threads); one threadgroup per instance,
        # except the instances sharing an output block (the matmul's k axis: ``revisited_axes``), which one walks
        grid = eqn.params["grid"]
        instances = int(np.prod([n for a, n in enumerate(grid) if a not in revisited_axes(eqn.params)]))
        tg = got["threadgroup"]
        assert tg == (call.kernel.local_size[0], 1, 1) and 32 <= tg[0] <= 256
        assert got["grid"] == (instances * tg[0], 1, 1)
        # results: shapes and dtypes of out_shape, zeros where the kernel stores nothing (the interpreter's)
        assert got["output_shapes"] == [tuple(out_avals[k].shape) for k in call.results]
        assert got["output_dtypes"] == [mx_dtype(out_avals[k].dtype) for k in call.results]
        assert got["init_value"] == 0 and "template" not in got
        assert [tuple(o.shape) for o in outs] == [tuple(a.shape) for a in out_avals]
        # the kernel name is MLX-safe and changes with the source (MLX caches libraries by name)
        assert re.fullmatch(r"fnarray_pallas_\w+_[0-9a-f]{12}", made["name"])
        if GXX is not None:
            text = _mlx_signature(made, got)
            assert _syntax_check(text, tmp_path, name) == "", text


def test_zero_dimensional_operands_travel_as_one_element(fake_metal):
    """A 0-d operand is passed as one element (MLX would make it a reference, which the body indexes)."""
    import mlx.core as mx
    from fnarray.lowering.mlx.pallas import mlx_pallas_call

    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[...]
    f = pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct((8,), np.float32))
    eqn = next(_pallas_eqns(fa.make_ir(f)(np.float32(2.0), _f32(8))))
    mlx_pallas_call(eqn.params, [a.aval for a in eqn.inputs], [o.aval for o in eqn.outputs])(
        mx.array(np.float32(2.0)), mx.array(_f32(8)))
    got = fake_metal.calls[-1]
    assert [tuple(a.shape) for a in got["inputs"]] == [(1,), (8,)]


def test_jit_on_a_metal_device_calls_the_kernel(fake_metal, monkeypatch):
    """The whole path (jit, partition, the mlx program) on a device that claims Metal: the stand-in computes
    x + y from the inputs it gets, which must come back as the result."""
    dev = fa.devices("mlx")[0]
    monkeypatch.setattr(dev, "platform", "gpu")
    fake_metal.compute = lambda ins: [ins[0] + ins[1]]

    def kernel(x_ref, y_ref, o_ref):   # a kernel of its own (its programs are cached under its own text)
        o_ref[...] = x_ref[...] + y_ref[...]
    spec = pl.BlockSpec((128,), lambda i: (i,))
    f = fa.jit(lambda x, y: pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                                           in_specs=[spec, spec], out_specs=spec, name="metal_jit_path")(x, y))
    x, y = _f32(512), _f32(512)
    old = fa.config.fallback
    fa.config.fallback = "error"
    try:
        got = np.asarray(f(fa.device_put(x, dev), fa.device_put(y, dev)))
    finally:
        fa.config.fallback = old
    np.testing.assert_array_equal(got, x + y)
    assert fake_metal.calls and fake_metal.calls[-1]["grid"][0] == 4 * fake_metal.calls[-1]["threadgroup"][0]


# ------------------------------------------------------------------------------------------- what falls back


def _device_like(platform):
    return types.SimpleNamespace(platform=platform, backend="mlx", id=0)


def test_reasons_on_metal(monkeypatch):
    pytest.importorskip("mlx.core")
    from fnarray.lowering.mlx import pallas as mlx_pallas
    monkeypatch.setattr(mlx_pallas, "metal_available", lambda: True)
    f, make = EXAMPLES["softmax"]
    eqn = next(_pallas_eqns(fa.make_ir(f)(*make())))
    assert mlx_pallas.unsupported_reason(eqn, _device_like("gpu")) is None
    assert "CPU device" in mlx_pallas.unsupported_reason(eqn, _device_like("cpu"))

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    aliased = pl.pallas_call(add_one, out_shape=pl.ShapeDtypeStruct((8,), np.float32), input_output_aliases={0: 0})
    eqn = next(_pallas_eqns(fa.make_ir(aliased)(_f32(8))))
    assert "input_output_aliases" in mlx_pallas.unsupported_reason(eqn, _device_like("gpu"))

    def atomic(x_ref, o_ref):
        pl.atomic_add(o_ref, (pl.ds(0, 8),), x_ref[...])
    eqn = next(_pallas_eqns(fa.make_ir(pl.pallas_call(atomic, out_shape=pl.ShapeDtypeStruct((8,), np.float32)))(
        _f32(8))))
    assert "atomic" in mlx_pallas.unsupported_reason(eqn, _device_like("gpu"))
    interp = pl.pallas_call(add_one, out_shape=pl.ShapeDtypeStruct((8,), np.float32), interpret=True)
    eqn = next(_pallas_eqns(fa.make_ir(interp)(_f32(8))))
    assert "interpret=True" in mlx_pallas.unsupported_reason(eqn, _device_like("gpu"))


def test_without_metal_the_interpreter_runs_with_the_reason():
    """MLX without Metal (Linux): the interpreter's result, with a FallbackWarning naming why."""
    mx = pytest.importorskip("mlx.core")
    from fnarray.lowering.mlx.pallas import NO_METAL
    if mx.metal.is_available():
        pytest.skip("this MLX has Metal: pallas_call runs as a Metal kernel")
    dev = fa.devices("mlx")[0]
    x, y = _f32(1000), _f32(1000)
    old = fa.config.fallback
    fa.config.fallback = "warn"
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = np.asarray(vector_add.vector_add(fa.device_put(x, dev), fa.device_put(y, dev)))
    finally:
        fa.config.fallback = old
    np.testing.assert_allclose(got, x + y, rtol=1e-6)
    msgs = [str(w.message) for w in seen if issubclass(w.category, fa.FallbackWarning)]
    assert any("mx.metal.is_available() is False" in m for m in msgs), msgs
    assert "mx.metal.is_available() is False" in NO_METAL
    from fnarray.devices.backend import get_backend
    assert ("pallas_call", "*") in get_backend("mlx").device_fallbacks(dev)
