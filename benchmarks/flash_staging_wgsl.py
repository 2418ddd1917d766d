"""The flash-attention example on a WebGPU adapter with its ``k``/``v`` blocks staged in work-group memory, by
editing the generated WGSL (issue 29: would staging each key/value block once per work-group, instead of every
work item reading the same elements, make the Pallas kernel faster on lavapipe?).

The Pallas lowering's row-mode kernel (``groups/pallas.py``, one work item per query row, ``k``/``v`` read as
``vec4<f32>`` through the bindings ``wide*``) is rendered as usual; the edited variants replace its text before
compilation (``render_wgsl`` is wrapped for kernels named ``pallas_flash*``):

- ``staged``: at the top of the key loop a barrier, each work item copying ``blocks`` key blocks' rows of ``k``
  and ``v`` into ``var<workgroup>`` arrays (every ``blocks`` iterations), a barrier; the loop's ``wide*`` reads
  read the arrays instead;
- ``staged_first``, ``staged_second``: both copied, only the first (``k``) or the second (``v``) vector binding
  read from the copy, the other still from its buffer; ``copied``: both copied, neither read from the copy;
- ``barrier``: only a ``workgroupBarrier()`` at the top of the key loop (the cost of a barrier there);
- ``barrier_once``: one ``workgroupBarrier()`` before the loop;
- ``half_loads`` (an estimate, wrong results): half of the loop's ``k`` and ``v`` vector loads repeat the
  addresses of the other half (merged by the compiler), as two query rows per work item would read each
  vector once for both rows.

All variants and the example's unfused reference are timed interleaved (process CPU time, median), and each
variant's output is compared with the unedited kernel's (equal to the last bit: the same products in the same
order). The edits assume the benchmark's shapes (``(4, 256, 32)``, 16 x 16 blocks) and the names the WGSL
printer gives today (the key loop ``it*``, its first statement the block offset): it raises where they moved.

Run: ``FNARRAY_AUTOTUNE=off python benchmarks/flash_staging_wgsl.py [--repeats 9] [--blocks 1]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import sys
import time

import numpy as np

import _checkout  # noqa: F401  (this checkout's fnarray, not an installed one)

import fnarray as fa
from fnarray.lowering.webgpu import backend as wgpu

sys.path.insert(0, os.path.join(_checkout.ROOT, "examples"))
from kernels import flash_attention  # noqa: E402

HEADS, LENGTH, D, BLOCK = 4, 256, 32, 16
#: the edits timed against the unedited kernel (``_edit``)
VARIANTS = ("staged", "staged_first", "staged_second", "copied", "barrier", "barrier_once", "half_loads")
_LOOP = re.compile(r"for \(var (it\d+): i32 = 0i; \1 < \w+; \1 \+= 1i\) \{\n(\s*let (x\d+): i32 = [^\n]*\n)")


def _closing(src, i):
    """The index of the ``]`` closing the ``[`` at ``src[i]``."""
    depth = 0
    for j in range(i, len(src)):
        depth += {"[": 1, "]": -1}.get(src[j], 0)
        if depth == 0:
            return j
    raise ValueError("unbalanced brackets")


def _edit(src, variant, blocks):
    m = _LOOP.search(src)
    if m is None:
        raise RuntimeError("the key loop was not found in the flash kernel's WGSL")
    it, first = m.group(1), m.end()
    if variant == "barrier_once":
        return src[:m.start()] + "workgroupBarrier();\n    " + src[m.start():]
    if variant == "half_loads":
        return _half_loads(src, m.group(3))
    if variant == "barrier":
        return src[:first] + "        workgroupBarrier();\n" + src[first:]
    wides = sorted(set(re.findall(r"var<storage, read> (wide\d+): array<vec4<f32>>", src)))
    per_block, per_head = BLOCK * D // 4, LENGTH * D // 4
    n = per_block * blocks
    body, i = [], 0
    read = {"staged": wides, "copied": [], "staged_first": wides[:1], "staged_second": wides[1:]}[variant]
    for w in re.finditer(r"\b(wide\d+)\[", src[first:]):   # the loop's reads: of the staged copy
        s = first + w.start()
        if s < i or w.group(1) not in read:
            continue
        j = _closing(src, first + w.end() - 1)
        body.append(src[i:s] + f"fa_s_{w.group(1)}[({src[first + w.end():j]}) - fa_base]")
        i = j + 1
    src = "".join(body) + src[i:]
    copy = "".join(f"                fa_s_{w}[fe] = {w}[fa_base + fe];\n" for w in wides)
    code = (f"        let fa_first: i32 = {it} - ({it} % {blocks}i);\n"
            f"        let fa_base: i32 = (pid0 * {per_head}i) + (fa_first * {per_block}i);\n"
            f"        if ({it} % {blocks}i == 0i) {{\n"
            "            workgroupBarrier();\n"
            f"            for (var fc: i32 = 0i; fc < {n // BLOCK}i; fc += 1i) {{\n"
            f"                let fe: i32 = i32(fa_lid.x) * {n // BLOCK}i + fc;\n"
            f"                if (fa_first * {per_block}i + fe < {per_head}i) {{\n{copy}                }}\n"
            "            }\n            workgroupBarrier();\n        }\n")
    decls = "".join(f"var<workgroup> fa_s_{w}: array<vec4<f32>, {n}>;\n" for w in wides)
    src = src[:first] + code + src[first:]
    return decls + src


def _flash(q, k, v, adds):
    """The example, with ``adds`` additions of zero after it: a distinct program per variant, compiled (and its
    WGSL edited) on its own."""
    out = flash_attention.flash_attention(q, k, v)
    for _ in range(adds):
        out = out + 0.0
    return out


def _half_loads(src, x):
    """The kernel with half of its ``k`` and ``v`` vector loads made repeats of the other half (the same
    address, merged by the compiler): what two query rows per work item, each vector serving both, would save
    in loads. The results are wrong (not compared)."""
    wides = sorted(set(re.findall(r"var<storage, read> (wide\d+): array<vec4<f32>>", src)))
    # k: the score block's keys 8..15 read as keys 0..7
    src = re.sub(rf"({wides[0]}\[\(\(\(pid0 \* \d+i\) \+ \(\({x} \+ )(\d+)i\)",
                 lambda m: m.group(1) + f"{int(m.group(2)) % 8}i)", src)
    # v: in each unrolled run of 4 keys, the 3rd and 4th read as the 1st and 2nd
    names = list(dict.fromkeys(re.findall(rf"{wides[1]}\[\(*pid0 \* \d+i\) \+ \(\({x} \+ (\w+)\)", src)))
    for run in range(0, len(names) - 3, 4):
        for a, b in zip(names[run + 2:run + 4], names[run:run + 2], strict=True):
            src = re.sub(rf"({wides[1]}\[\(*pid0 \* \d+i\) \+ \(\({x} \+ ){a}\)", rf"\g<1>{b})", src)
    return src


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="webgpu:0")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--blocks", type=int, default=1, help="key blocks staged per pair of barriers")
    args = p.parse_args(argv)
    real, mode, rendered = wgpu.render_wgsl, {"variant": None}, []

    def render(kernel):
        src = real(kernel)
        if kernel.name.startswith("pallas_flash"):
            rendered.append(mode["variant"])
            if mode["variant"]:
                src = _edit(src, mode["variant"], args.blocks)
        return src
    wgpu.render_wgsl = render
    dev = fa.devices(args.device.split(":")[0])[int(args.device.split(":")[1])]
    rng = np.random.default_rng(0)
    xs = [fa.device_put(rng.standard_normal((HEADS, LENGTH, D)).astype(np.float32), dev) for _ in range(3)]
    fns = {"reference": fa.jit(flash_attention.reference)}
    want = None
    for k, variant in enumerate((None, *VARIANTS)):
        mode["variant"] = variant
        fns[variant or "plain"] = f = fa.jit(functools.partial(_flash, adds=k))
        out = np.asarray(f(*xs))
        if variant == "half_loads":
            continue   # an estimate: its results are wrong
        if variant not in rendered:
            raise RuntimeError(f"the {variant} variant was not compiled (a cached executable was reused)")
        want = out if want is None else want
        print(f"{variant or 'plain':<13} max |difference| from plain: {float(np.max(np.abs(out - want))):.3g}")
    mode["variant"] = None
    np.asarray(fns["reference"](*xs))
    times = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, f in fns.items():
            t0 = time.process_time()
            np.asarray(f(*xs))
            times[name].append(time.process_time() - t0)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    for name, ms in med.items():
        print(f"{name:<13} {ms:8.2f} ms  {ms / med['plain']:.2f}x plain  {ms / med['reference']:.2f}x reference")
    print(f"\nload average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1, 5, 15 min)")


if __name__ == "__main__":
    main()
