"""Raw wgpu-py timing on lavapipe of fnarray's subgroup product kernels (WGSL) with their operands bound as storage
arrays, as uniform arrays, and with 32 x 8 tiles (issue 28): the experiment behind ``dot_uniform``.

Each kernel is fnarray's own (``dot.UNIFORM_OPERANDS`` off, ``dot.SUBGROUP_TILE`` forced, autotuning off), taken
from ``jit(...).lower(...).kernels()``; a variant rewrites an operand's ``var<storage, read>`` binding into a
``var<uniform>`` array of the same ``vec4`` elements (the kernel's loads unchanged). Each variant runs on buffers of
random values through wgpu-py directly (one pipeline, one bind group, ``--calls`` dispatches, then a readback):
process CPU ms per dispatch, best of ``--rounds``, interleaved; the outputs are compared with the first variant's.

Usage: python benchmarks/webgpu_uniform_raw.py [--rounds 5] [--calls 10]
Asserts nothing.
"""

from __future__ import annotations

import os
import re

os.environ["FNARRAY_AUTOTUNE"] = "off"   # the tile forced below, not the cost model's

import numpy as np  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import _timing  # noqa: E402
import fnarray as fa  # noqa: E402
from fnarray.lowering.kernels.groups import dot  # noqa: E402

#: (M, N, K, lhs layout): a transformer forward product (rhs 16 KiB), a VAE forward product (lhs 64 KiB) and a VAE
#: weight gradient (both operands 64 KiB; "col": the lhs stored transposed, as x.T @ d reads it)
SHAPES = [(1024, 64, 64, "row"), (32, 512, 512, "row"), (512, 512, 32, "col")]


def kernel(dev, shape, tile):
    """fnarray's WGSL for ``shape`` with subgroup ``tile`` (rows, cols) and storage bindings only."""
    m, n, k, lay = shape
    x = fa.device_put(np.zeros((m, k) if lay == "row" else (k, m), np.float32), dev)
    y = fa.device_put(np.zeros((k, n), np.float32), dev)
    old = dot.UNIFORM_OPERANDS, dot.SUBGROUP_TILE
    dot.UNIFORM_OPERANDS, dot.SUBGROUP_TILE = False, {"rows": tile[0], "cols": tile[1]}
    try:
        f = (lambda a, b: a @ b) if lay == "row" else (lambda a, b: a.T @ b)
        return fa.jit(f, device=dev).lower(x, y).kernels()[0].source
    finally:
        dot.UNIFORM_OPERANDS, dot.SUBGROUP_TILE = old


def as_uniform(source, binding, elements):
    """``source`` with storage binding ``binding`` (``array<vec4<f32>>``) declared a uniform array instead."""
    pat = rf"@group\(0\) @binding\({binding}\) var<storage, read> (\w+): array<vec4<f32>>;"
    name = re.search(pat, source).group(1)
    return re.sub(pat, f"@group(0) @binding({binding}) var<uniform> {name}: array<vec4<f32>, {elements // 4}>;", source)


def runner(wgpu, dev, source, sizes, uniform, calls):
    """``(run, output)``: ``run`` dispatches ``source`` ``calls`` times over buffers of ``sizes`` float32 (the last
    written; ``uniform``: the bindings that are uniform arrays), then reads 16 bytes back."""
    layout, entries, bufs = [], [], []
    for i, n in enumerate(sizes):
        u = wgpu.BufferUsage
        usage = u.STORAGE | u.COPY_SRC | u.COPY_DST | u.UNIFORM
        buf = dev.create_buffer(size=4 * n, usage=usage)
        dev.queue.write_buffer(buf, 0, np.random.default_rng(i).standard_normal(n).astype(np.float32).tobytes())
        bufs.append(buf)
        kind = "uniform" if i in uniform else "storage" if i == len(sizes) - 1 else "read-only-storage"
        layout.append({"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kind}})
        entries.append({"binding": i, "resource": {"buffer": buf}})
    bgl = dev.create_bind_group_layout(entries=layout)
    pipe = dev.create_compute_pipeline(layout=dev.create_pipeline_layout(bind_group_layouts=[bgl]), compute={
        "module": dev.create_shader_module(code=source), "entry_point": re.search(r"fn (\w+)\(", source).group(1)})
    bg = dev.create_bind_group(layout=bgl, entries=entries)
    tiles = int(re.search(r"select\((\d+)i, sg0", source).group(1)) + 1
    groups = tiles * 8 // int(re.search(r"workgroup_size\((\d+)", source).group(1))

    def run():
        for _ in range(calls):
            enc = dev.create_command_encoder()
            p = enc.begin_compute_pass()
            p.set_pipeline(pipe)
            p.set_bind_group(0, bg)
            p.dispatch_workgroups(groups, 1, 1)
            p.end()
            dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(bufs[-1], 0, 16)
    run()
    return run, np.frombuffer(dev.queue.read_buffer(bufs[-1]), np.float32)


def main(argv=None):
    a, fdev = _timing.webgpu_options(__doc__, argv, rounds=5, calls=10)
    import wgpu
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = adapter.request_device_sync(required_features=["subgroup"])
    for shape in SHAPES:
        m, n, k, _ = shape
        sizes = [m * k, k * n, m * n]
        base = {t: kernel(fdev, shape, t) for t in ((32, 4), (32, 8))}
        variants = {f"{t[0]}x{t[1]} storage": (src, ()) for t, src in base.items()}
        for i, what in enumerate(("lhs", "rhs")):
            if 4 * sizes[i] <= 1 << 16:
                variants[f"32x4 {what} uniform"] = (as_uniform(base[(32, 4)], i, sizes[i]), (i,))
        if 4 * max(sizes[:2]) <= 1 << 16:
            variants["32x4 both uniform"] = (as_uniform(as_uniform(base[(32, 4)], 0, sizes[0]), 1, sizes[1]), (0, 1))
        built = {name: runner(wgpu, dev, src, sizes, u, a.calls) for name, (src, u) in variants.items()}
        first = next(iter(built.values()))[1]
        _, cpu = _timing.best_of([run for run, _ in built.values()], a.rounds, warm=0)
        print(f"{m}x{n}x{k} ({shape[3]} lhs)")
        for (name, (_, out)), c in zip(built.items(), cpu, strict=True):
            same = "same bits" if np.array_equal(out.view(np.uint32), first.view(np.uint32)) else "DIFFERENT"
            print(f"  {name:20} {c / a.calls * 1e3:8.3f} CPU ms  {same}")
    print(_timing.load_line())


if __name__ == "__main__":
    main()
