"""Every kernel the opencl and webgpu backends generate for the parity cases (and a few larger programs that
reach the tiled, register-blocked and multi-kernel paths, and the Pallas examples of ``benchmarks/kernels.py``
beside fnarray's own kernels for them), written to one text file per target.

Used to check that a refactoring of the kernel groups leaves the generated source byte-identical: run it before
and after the change and diff the two folders. Nothing is compiled or run on the device: the backends' schedules
are rendered where they would be compiled (``_compile_schedule``), then the call stops. Autotuning is off (each
group's default choice).

Each target is rendered twice: with the device's own capabilities (PoCL and lavapipe here: register tiles,
uniform guards) and as a GPU (``GPU``: tiles staged in work-group memory, per-item guards, one element per work
item), so that the GPU forms of the groups (the conv tiled kernel, the quantized cooperative kernel) are written
too. Files: ``OUT_DIR/<target>[_gpu].txt`` and the programs that were not rendered, ``<...>.failed.txt``.

``--compiled`` (opencl only) renders the kernels as ``_compile_schedule`` hands them to the driver instead: after
``literals_as_args``, the phases of ``kernels/phases.py`` (CPU devices) and ``kernels/int_args.py`` (whose
per-device record of kernel structures carries from one program to the next, in this file's order), each under
its digest-suffixed name; a change to those passes shows there.

Usage: FNARRAY_AUTOTUNE=off python benchmarks/render_kernels.py OUT_DIR [--only opencl|webgpu] [--compiled]
Prints one line per file: the number of programs and rendered kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pathlib
import warnings

os.environ.setdefault("FNARRAY_AUTOTUNE", "off")

import numpy as np  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa  # noqa: E402
import fnarray.numpy as fnp  # noqa: E402
from fnarray.testing.cases import CASES, NOT_EXECUTED  # noqa: E402


class _Rendered(Exception):
    """Raised where the backend would compile the schedule: its kernels are recorded, nothing runs."""


def _record(cls, named_source, sink):
    def compile_schedule(self, sched):
        for launch in sched.launches:
            name, src = named_source(launch.kernel)
            sink.append(f"// {name} global={tuple(launch.global_size)} local={launch.local_size}\n{src}")
        raise _Rendered
    cls._compile_schedule = compile_schedule


def _record_compiled(module, sink):
    """``module.Executable`` (the OpenCL backend's) records the named sources ``_compile_schedule`` built."""
    def executable(state, sched, named):
        for launch, (name, src) in zip(sched.launches, named, strict=True):
            sink.append(f"// {name} global={tuple(launch.global_size)} local={launch.local_size}\n{src}")
        raise _Rendered
    module.Executable = executable


#: what the GPU variant changes in a device's capabilities
GPU = {"tiling_pays": True, "local_memory": True, "matmul_tiling": "local", "uniform_guard": False,
       "items_per_work_item": 1}


@contextlib.contextmanager
def _as_gpu(device):
    """The device's backend reports GPU-like capabilities (``GPU``) inside the block."""
    impl = device.impl
    real = impl.capabilities(device)
    fake = dataclasses.replace(real, **GPU)
    state = getattr(impl, "_states", {}).get(device)
    if state is not None:            # opencl: the schedule reads the device state's caps
        state.caps = fake
    else:                            # webgpu: the backend's cached caps
        impl._caps = fake
    try:
        yield
    finally:
        if state is not None:
            state.caps = real
        else:
            impl._caps = real


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def _long_chain(x, y):
    """An elementwise chain whose inlined expression trees pass the scheduler's cost limit."""
    for _ in range(8):
        x = fnp.sin(x) * fnp.cos(y) + fnp.exp(x * 0.1)
        y = fnp.tanh(x + y) * x
    return x + fnp.sum(y, axis=0, keepdims=True)


def _extra_programs():
    """Programs larger than the parity cases: tiled matmuls and convolutions, long FFTs, linalg, sorts."""
    lax = fa.lax
    yield "long_chain", _long_chain, (_f32(64, 64), _f32(64, 64, seed=1))
    yield "expensive_broadcast", (lambda x, y: fnp.exp(fnp.sin(x))[:, None] * y + fnp.log(fnp.sum(x))), (
        _f32(64), _f32(64, 64, seed=1))
    yield "many_inputs", (lambda *xs: sum(fnp.sin(x) * i for i, x in enumerate(xs))), tuple(
        _f32(300, seed=i) for i in range(12))
    yield "matmul_256", (lambda a, b: a @ b), (_f32(256, 256), _f32(256, 256, seed=1))
    yield "matmul_bias_relu", (lambda a, b, c: fnp.maximum(a @ b + c, 0.0)), (_f32(128, 96), _f32(96, 64),
                                                                               _f32(64))
    yield "batched_matmul", (lambda a, b: a @ b), (_f32(4, 64, 48), _f32(4, 48, 80, seed=1))
    for n in (256, 100, 97, 1000, 4096):
        yield f"fft_{n}", (lambda x: fnp.fft.fft(x)), ((_f32(3, n) + 1j * _f32(3, n, seed=1)).astype(np.complex64),)
        yield f"rfft_{n}", (lambda x: fnp.fft.rfft(x)), (_f32(2, n),)
    for shape, k in (((1, 3, 32, 32), (8, 3, 3, 3)), ((2, 16, 28, 28), (32, 16, 3, 3)), ((1, 64, 14, 14),
                                                                                         (64, 64, 1, 1)),
                     ((4, 8, 64, 64), (16, 8, 5, 5)), ((1, 32, 56, 56), (64, 32, 3, 3))):
        yield f"conv_{shape}_{k}", (lambda x, w: lax.conv(x, w, (1, 1), "SAME")), (_f32(*shape), _f32(*k, seed=1))
        yield f"conv_s2_{shape}_{k}", (lambda x, w: lax.conv(x, w, (2, 2), "VALID")), (_f32(*shape),
                                                                                      _f32(*k, seed=1))
    for shape, k in (((8, 16, 16, 16), (16, 16, 3, 3)), ((4, 8, 12, 12), (8, 8, 5, 5))):
        yield f"conv_weight_grad_{shape}_{k}", fa.grad(lambda w, x: fnp.sum(lax.conv(x, w, (1, 1), "SAME") ** 2)), (
            _f32(*k, seed=1), _f32(*shape))
        yield f"conv_input_grad_{shape}_{k}", fa.grad(lambda x, w: fnp.sum(lax.conv(x, w, (1, 1), "SAME") ** 2)), (
            _f32(*shape), _f32(*k, seed=1))
    yield "conv_nhwc", (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))), (
        _f32(2, 20, 20, 16), _f32(3, 3, 16, 32, seed=1))
    for dil in ((1, 1), (2, 2)):
        yield f"conv_nhwc_weight_grad_{dil}", fa.grad(lambda w, x, dil=dil: fnp.sum(lax.conv_general_dilated(
            x, w, (1, 1), "SAME", rhs_dilation=dil, dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2)), (
            _f32(3, 3, 16, 32, seed=1), _f32(8, 20, 20, 16))
    yield "conv_grouped", (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=4)), (
        _f32(2, 16, 20, 20), _f32(32, 4, 3, 3, seed=1))
    yield "conv_dilated", (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(2, 2))), (
        _f32(2, 8, 20, 20), _f32(16, 8, 3, 3, seed=1))
    spd = _f32(64, 64)
    spd = spd @ spd.T + 64 * np.eye(64, dtype=np.float32)
    yield "cholesky_64", (lambda a: fa.lax.linalg.cholesky(a)), (spd,)
    yield "triangular_solve_64", (lambda a, b: fa.lax.linalg.triangular_solve(a, b, left_side=True, lower=True)), (
        np.tril(spd), _f32(64, 16, seed=1))
    yield "triangular_solve_inline", (lambda a, b: fa.lax.linalg.triangular_solve(
        a * 2.0, b + 1.0, left_side=False, lower=False, transpose_a=True)), (np.triu(spd)[:16, :16], _f32(8, 16))
    yield "lu_64", (lambda a: fa.lax.linalg.lu(a)), (_f32(64, 64),)
    yield "lu_inline", (lambda a: fa.lax.linalg.lu(a * 2.0)), (_f32(2, 24, 40),)
    yield "cholesky_inline", (lambda a: fa.lax.linalg.cholesky(a * 2.0)), (spd[:20, :20],)
    yield "qr_48", (lambda a: fa.lax.linalg.qr(a)), (_f32(48, 32),)
    yield "eigh_32", (lambda a: fa.lax.linalg.eigh(a)), (spd[:32, :32],)
    yield "svd_24", (lambda a: fa.lax.linalg.svd(a)), (_f32(24, 16),)
    yield "sort_rows", (lambda x: fnp.sort(x, axis=-1)), (_f32(16, 1000),)
    yield "sort_long", (lambda x: fnp.sort(x)), (_f32(5000),)
    yield "argsort", (lambda x: fnp.argsort(x, axis=0)), (_f32(300, 7),)
    yield "sort_pairs", (lambda k, v: fa.lax.sort((k, v), num_keys=1)), (_f32(513), _f32(513, seed=1))
    yield "logsumexp_rows", (lambda x: fnp.log(fnp.sum(fnp.exp(x - fnp.max(x, axis=1, keepdims=True)), axis=1))), (
        _f32(64, 3000),)
    yield "sum_all", (lambda x: fnp.sum(x)), (_f32(1 << 20),)
    yield "cumsum", (lambda x: fnp.cumsum(x, axis=1)), (_f32(8, 5000),)
    yield "attention", (lambda q, k, v: fa.nn.dot_product_attention(q, k, v, is_causal=True)), (
        _f32(2, 64, 4, 32), _f32(2, 64, 2, 32, seed=1), _f32(2, 64, 2, 32, seed=2))
    w = _f32(256, 512)
    for bits, gs in ((4, 64), (8, 32), (4, 128)):
        wq, s, b = fa.quantize(w, group_size=gs, bits=bits)
        wq, s, b = (np.asarray(t) for t in (wq, s, b))
        for rows in (1, 4, 33):
            yield (f"qmm_{bits}_{gs}_{rows}",
                   (lambda x, wq, s, b, gs=gs, bits=bits: fa.quantized_matmul(x, wq, s, b, group_size=gs, bits=bits)),
                   (_f32(rows, 512), wq, s, b))


def _kernel_examples():
    """The Pallas examples (``examples/kernels/``) at ``benchmarks/kernels.py``'s sizes, each beside fnarray's own
    computation of the same thing (issue 29: a change to ``groups/pallas.py`` shows here)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernels_bench", pathlib.Path(__file__).parent / "kernels.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for label, kernel, own, inputs in bench._cases(False):
        name = "pallas_example_" + "_".join(label.replace("(", "").replace(")", "").split())
        yield name, kernel, inputs
        yield name + "_own", own, inputs


def _programs():
    for name, prim, inputs, params in CASES:
        if prim in NOT_EXECUTED:
            continue
        yield name, (lambda *a, prim=prim, params=params: prim.bind(*a, **params)), inputs
    yield from _extra_programs()
    yield from _kernel_examples()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--only", choices=("opencl", "webgpu"))
    parser.add_argument("--compiled", action="store_true", help="opencl's kernels after its compile-time passes")
    args = parser.parse_args()
    from fnarray.lowering.opencl import backend as ocl
    from fnarray.lowering.webgpu import backend as wgpu
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    targets = {"opencl": (ocl.OpenCLLowered, ocl._named_source), "webgpu": (wgpu.WebGPULowered, wgpu._named_source)}
    warnings.simplefilter("ignore")
    for target, (cls, named) in targets.items():
        if args.only and target != args.only or args.compiled and target != "opencl":
            continue
        device = fa.devices(target)[0]
        for variant, caps in ((target, contextlib.nullcontext()), (f"{target}_gpu", _as_gpu(device))):
            with caps:
                _render_all(cls, named, device, out, variant, ocl if args.compiled else None)


def _render_all(cls, named, device, out, variant, compiled=None):
    lines, cases, kernels, failed = [], 0, 0, []
    for name, f, inputs in _programs():
        sink: list = []
        if compiled is None:
            _record(cls, named, sink)
        else:
            _record_compiled(compiled, sink)
        try:
            fa.jit(f, device=device)(*[fa.device_put(np.asarray(x), device) for x in inputs])
        except _Rendered:
            pass
        except Exception as e:  # noqa: BLE001 (a case the device refuses: listed, not rendered)
            failed.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
        cases += 1
        kernels += len(sink)
        lines.append(f"==== {name}\n" + "\n".join(sink))
    (out / f"{variant}.txt").write_text("\n".join(lines) + "\n")
    (out / f"{variant}.failed.txt").write_text("\n".join(failed) + "\n")
    print(f"{variant}: {cases} programs, {kernels} kernels rendered, {len(failed)} not rendered")


if __name__ == "__main__":
    main()
