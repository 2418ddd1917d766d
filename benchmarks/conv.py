"""A convolution layer and a max-pool, forward + backward: fnarray against raw libraries, in one interleaved run.

Workloads (issue 14):
  conv: ``y = conv(x, w)`` with x f32[32, 32, 32, 32] (NHWC), w f32[3, 3, 32, 64] (HWIO), stride 1, SAME, and
        its vector-Jacobian product with a cotangent f32[32, 32, 32, 64]: ``(y, dx, dw)`` in one call
        (3.6 GFLOP);
  pool: 2x2 max pooling, stride 2, of f32[32, 32, 32, 64] and its gradient: ``(p, dy)`` in one call.

Rivals:
  jax:0          raw JAX: ``jax.jit`` of ``lax.conv_general_dilated`` / ``lax.reduce_window`` through ``jax.vjp``
                 (fnarray's jax lowering calls the same functions; target ratio >= 0.95);
  opencl, webgpu NumPy: im2col (a strided view copied into a (32768, 288) matrix) and BLAS matmuls, col2im
                 by 9 shifted adds; pooling by reshape + max and the first-maximum mask;
  opencl         tinygrad (PyPI ``tinygrad``, ``DEV=CL``) on the same OpenCL device (NCHW, the same sizes),
                 jitted with ``TinyJit``, when it is installed (``--no-tinygrad`` to leave it out).

Every round times each variant once, in turn (interleaved, so machine load hits all alike); the table
gives the median of the rounds and the ratio rival time / fnarray time (>= 1: fnarray is as fast).
Usage:
  python benchmarks/conv.py [--devices jax:0,opencl:0,webgpu:0] [--rounds 5] [--webgpu-rounds 2]
Prints a Markdown table and the load average; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.lax as lax
from fnarray.devices.placement import parse_device

N, H, W, C, O, K = 32, 32, 32, 32, 64, 3
DN = ("NHWC", "HWIO", "NHWC")


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, H, W, C)).astype(np.float32)
    w = (rng.standard_normal((K, K, C, O)) / np.sqrt(K * K * C)).astype(np.float32)
    ct = rng.standard_normal((N, H, W, O)).astype(np.float32)
    ctp = rng.standard_normal((N, H // 2, W // 2, O)).astype(np.float32)
    return x, w, ct, ctp


# ------------------------------------------------------------------------ fnarray

def fn_conv_step(x, w, ct):
    y, vjp = fa.vjp(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN), x, w)
    dx, dw = vjp(ct)
    return y, dx, dw


def fn_pool_step(y, ct):
    p, vjp = fa.vjp(lambda y: lax.reduce_window_max(y, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), y)
    return p, vjp(ct)[0]


# ------------------------------------------------------------------------ raw JAX

def jax_steps():
    import jax

    def conv_step(x, w, ct):
        y, vjp = jax.vjp(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN), x, w)
        dx, dw = vjp(ct)
        return y, dx, dw

    def pool_step(y, ct):
        p, vjp = jax.vjp(lambda y: jax.lax.reduce_window(y, -np.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                                         "VALID"), y)
        return p, vjp(ct)[0]
    return jax.jit(conv_step), jax.jit(pool_step)


# ------------------------------------------------------------------------ NumPy im2col + BLAS

def np_conv_step(x, w, ct):
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (K, K), axis=(1, 2))     # N, H, W, C, K, K
    cols = np.ascontiguousarray(win.transpose(0, 1, 2, 4, 5, 3)).reshape(N * H * W, K * K * C)
    w2 = w.reshape(K * K * C, O)
    y = (cols @ w2).reshape(N, H, W, O)
    g = ct.reshape(N * H * W, O)
    dw = (cols.T @ g).reshape(K, K, C, O)
    dcols = (g @ w2.T).reshape(N, H, W, K, K, C)
    dxp = np.zeros_like(xp)
    for i in range(K):
        for j in range(K):
            dxp[:, i:i + H, j:j + W, :] += dcols[:, :, :, i, j, :]
    return y, dxp[:, 1:-1, 1:-1, :], dw


def np_pool_step(y, ct):
    win = y.reshape(N, H // 2, 2, W // 2, 2, O).transpose(0, 1, 3, 5, 2, 4).reshape(N, H // 2, W // 2, O, 4)
    p = win.max(axis=-1)
    first = np.argmax(win, axis=-1)   # the first maximal element, as XLA's select-and-scatter
    mask = (np.arange(4) == first[..., None]) * ct[..., None]
    dy = mask.reshape(N, H // 2, W // 2, O, 2, 2).transpose(0, 1, 4, 2, 5, 3).reshape(N, H, W, O)
    return p, dy


# ------------------------------------------------------------------------ tinygrad

def tinygrad_worker():
    """``--tinygrad-worker``: tinygrad in its own process (once fnarray's OpenCL backend has started,
    tinygrad's ``clGetPlatformIDs`` fails with -1001 in the same process). Reads ``conv`` / ``pool`` /
    ``save PATH`` lines, runs and synchronises, answers the seconds taken (or ``ok``)."""
    import sys
    os.environ.setdefault("DEV", "CL")
    from tinygrad import Device, Tensor, TinyJit
    x, w, ct, ctp = inputs()
    y = np_conv_step(x, w, ct)[0]
    t = {k: Tensor(np.ascontiguousarray(v.transpose(p))).realize() for k, v, p in (
        ("x", x, (0, 3, 1, 2)), ("w", w, (3, 2, 0, 1)), ("ct", ct, (0, 3, 1, 2)), ("y", y, (0, 3, 1, 2)),
        ("ctp", ctp, (0, 3, 1, 2)))}

    @TinyJit
    def conv(a, b, g):
        out = a.conv2d(b, padding=1)
        da, db = out.gradient(a, b, gradient=g)
        return out.realize(), da.realize(), db.realize()

    @TinyJit
    def pool(a, g):
        out = a.max_pool2d((2, 2), stride=2)
        return out.realize(), out.gradient(a, gradient=g)[0].realize()

    runs = {"conv": lambda: conv(t["x"], t["w"], t["ct"]), "pool": lambda: pool(t["y"], t["ctp"])}
    last = {}
    print(f"ready {Device.DEFAULT} {getattr(Device[Device.DEFAULT], 'device_name', '?')}", flush=True)
    for line in sys.stdin:
        cmd, *rest = line.split()
        if cmd == "save":
            # NCHW / OIHW back to NHWC / HWIO
            perms = {"conv": [(0, 2, 3, 1), (0, 2, 3, 1), (2, 3, 1, 0)], "pool": [(0, 2, 3, 1)] * 2}
            try:
                np.savez(rest[0], **{f"{k}{i}": o.contiguous().realize().numpy().transpose(p)
                                     for k, outs in last.items()
                                     for i, (o, p) in enumerate(zip(outs, perms[k], strict=True))})
                print("ok", flush=True)
            except Exception as e:  # noqa: BLE001 (reading back can need tinygrad's CPU compiler, clang)
                print(f"unreadable {type(e).__name__}", flush=True)
            continue
        t0 = time.perf_counter()
        last[cmd] = runs[cmd]()
        Device[Device.DEFAULT].synchronize()
        print(time.perf_counter() - t0, flush=True)


class _Tinygrad:
    """The worker process, driven one run at a time (so its runs interleave with the others)."""

    def __init__(self, device, tmp):
        import subprocess
        import sys
        env = dict(os.environ)
        if "+debian" not in device.description:
            # fnarray's device is the PoCL that pyopencl's wheel ships: point the system's ICD loader (which
            # tinygrad uses) at that library, so both run on the same OpenCL implementation.
            import pyopencl
            libs = os.path.join(os.path.dirname(pyopencl.__file__), ".libs")
            lib = next((f for f in os.listdir(libs) if f.startswith("libpocl")), None)
            if lib is not None:
                with open(os.path.join(tmp, "pocl.icd"), "w") as f:
                    f.write(os.path.join(libs, lib) + "\n")
                env["OCL_ICD_VENDORS"] = tmp
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--tinygrad-worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        first = self.proc.stdout.readline().split(maxsplit=2)
        if not first or first[0] != "ready":
            raise RuntimeError("the tinygrad worker did not start (is tinygrad installed? pip install tinygrad)")
        self.device, self.device_name = first[1], first[2].strip()

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def run(self, work):
        return float(self.ask(work))

    def results(self, work, path):
        """The worker's last results of ``work`` in NHWC/HWIO, or ``None`` where it could not read them."""
        if self.ask(f"save {path}") != "ok":
            return None
        with np.load(path) as z:
            return [z[k] for k in sorted(z.files) if k.startswith(work)]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# ------------------------------------------------------------------------ the run

def timed(fn, sync=None):
    t = time.perf_counter()
    out = fn()
    if sync == "external":
        return out   # the worker's own measurement
    if sync is not None:
        sync(out)
    return time.perf_counter() - t


def _fa_sync(out):
    for a in fa.tree_util.tree_leaves(out):
        a.block_until_ready()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="jax:0,opencl:0,webgpu:0")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--webgpu-rounds", type=int, default=2, help="rounds on webgpu (lavapipe is ~30x slower)")
    ap.add_argument("--no-tinygrad", action="store_true")
    ap.add_argument("--tinygrad-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tinygrad_worker:
        return tinygrad_worker()
    fa.config.fallback = "error"
    x, w, ct, ctp = inputs()
    y_ref, *_ = np_conv_step(x, w, ct)
    import tempfile
    icd_dir = tempfile.mkdtemp(prefix="fnarray-bench-icd-")
    tg = None
    rows = []   # (workload, device, rival name, fnarray median s, rival median s, max abs error vs rival)
    for dev in args.devices.split(","):
        rounds = args.webgpu_rounds if dev.startswith("webgpu") else args.rounds
        d = parse_device(dev)
        fconv = fa.jit(fn_conv_step, device=d)
        fpool = fa.jit(fn_pool_step, device=d)
        fx, fw, fct, fctp = (fa.device_put(a, d) for a in (x, w, ct, ctp))
        fy = fa.device_put(y_ref, d)
        variants = {("conv", "fnarray"): (lambda: fconv(fx, fw, fct), _fa_sync),
                    ("pool", "fnarray"): (lambda: fpool(fy, fctp), _fa_sync)}
        rivals = {}
        if dev.startswith("jax"):
            import jax
            jconv, jpool = jax_steps()
            jx, jw, jct, jy, jctp = (jax.device_put(a) for a in (x, w, ct, y_ref, ctp))
            jsync = jax.block_until_ready
            variants[("conv", "raw JAX")] = (lambda: jconv(jx, jw, jct), jsync)
            variants[("pool", "raw JAX")] = (lambda: jpool(jy, jctp), jsync)
            rivals = {"conv": ["raw JAX"], "pool": ["raw JAX"]}
        else:
            variants[("conv", "NumPy im2col + BLAS")] = (lambda: np_conv_step(x, w, ct), None)
            variants[("pool", "NumPy reshape + mask")] = (lambda: np_pool_step(y_ref, ctp), None)
            rivals = {"conv": ["NumPy im2col + BLAS"], "pool": ["NumPy reshape + mask"]}
            if dev.startswith("opencl") and not args.no_tinygrad:
                try:
                    tg = _Tinygrad(d, icd_dir)
                except (RuntimeError, OSError) as e:
                    print(f"tinygrad left out: {e}")
                    tg = None
                if tg is not None:
                    same = "same device" if tg.device_name in d.description else f"device {tg.device_name}"
                    name = f"tinygrad DEV={tg.device} ({same}, own process)"
                    for work in ("conv", "pool"):
                        variants[(work, name)] = (lambda work=work, tg=tg: tg.run(work), "external")
                        rivals[work].append(name)
        # Warm-up (compiles), and the results that the table's error column compares.
        results = {}
        for key, (fn, sync) in variants.items():
            t0 = time.perf_counter()
            out = fn()
            if sync not in (None, "external"):
                sync(out)
            print(f"{dev} {key[0]} {key[1]}: first call {time.perf_counter() - t0:.1f} s", flush=True)
            results[key] = out
        times = {k: [] for k in variants}
        for _ in range(rounds):
            for key, (fn, sync) in variants.items():
                times[key].append(timed(fn, sync))
        for work in ("conv", "pool"):
            mine = statistics.median(times[(work, "fnarray")])
            ours = [np.asarray(a) for a in fa.tree_util.tree_leaves(results[(work, "fnarray")])]
            for rival in rivals[work]:
                if rival.startswith("tinygrad"):
                    import tempfile
                    with tempfile.TemporaryDirectory() as tmp:
                        theirs = tg.results(work, os.path.join(tmp, "tg.npz"))
                else:
                    theirs = [np.asarray(a) for a in results[(work, rival)]]
                err = (float("nan") if theirs is None else
                       max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True)))
                rows.append((work, dev, rival, mine, statistics.median(times[(work, rival)]), err, rounds))
        if tg is not None:
            tg.close()
            tg = None
    print()
    print("| workload | device | fnarray (ms) | rival | rival (ms) | ratio rival/fnarray | max abs diff | rounds |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    label = {"conv": "conv 3x3 32→64, fwd+bwd", "pool": "max-pool 2x2, fwd+bwd"}
    for work, dev, rival, mine, theirs, err, rounds in rows:
        print(f"| {label[work]} | {dev} | {mine * 1e3:.1f} | {rival} | {theirs * 1e3:.1f} | {theirs / mine:.2f} | "
              f"{err:.1e} | {rounds} |")
    print(f"\nload average: {' '.join(f'{v:.2f}' for v in os.getloadavg())} (1, 5, 15 min), "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
