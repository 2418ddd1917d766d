"""``fnarray doctor``: what this machine can run, from the hardware up.

The report goes bottom to top: the hardware each library sees (OpenCL platforms
and devices, wgpu adapters with their backend type, JAX devices, MLX devices),
drivers and runtimes (OpenCL ICDs, Vulkan ICDs, Mesa), library versions, then
each fnarray backend: usable or not, the reason, the command that fixes it,
and the primitives and dtypes that fall back to numpy on its devices.

Every probe runs under a guard: a broken driver is reported as a failed probe,
never raised (``python -m fnarray doctor`` exits 0 whatever it finds).
"""

from __future__ import annotations

import glob
import importlib
import importlib.metadata
import json
import os
import platform
import sys

__all__ = ["doctor", "report"]

_LIBS = ("numpy", "optree", "ml_dtypes", "jax", "jaxlib", "mlx", "pyopencl", "pocl-binary-distribution", "wgpu",
         "playwright")


def _probe(fn):
    try:
        return {"ok": True, "result": fn()}
    except BaseException as e:  # noqa: BLE001  (a broken driver may raise anything; report it)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _opencl():
    import pyopencl as cl
    out = []
    for p in cl.get_platforms():
        devs = []
        for d in p.get_devices():
            devs.append({"name": d.name.strip(), "type": cl.device_type.to_string(d.type),
                         "version": d.version, "compute_units": d.max_compute_units,
                         "fp64": "cl_khr_fp64" in d.extensions, "fp16": "cl_khr_fp16" in d.extensions})
        out.append({"platform": p.name, "vendor": p.vendor, "version": p.version, "devices": devs})
    return out


def _wgpu():
    from fnarray.lowering.webgpu.backend import _import_wgpu  # sets a private XDG_RUNTIME_DIR first (Mesa's noise)
    wgpu = _import_wgpu()
    out = []
    for a in wgpu.gpu.enumerate_adapters_sync():
        info = a.info
        out.append({"adapter": info.get("device", "?"), "backend": info.get("backend_type", "?"),
                    "type": info.get("adapter_type", "?"), "vendor": info.get("vendor", "?"),
                    "features": sorted(str(f) for f in a.features)})
    return out


def _jax():
    import jax
    return [{"id": d.id, "platform": d.platform, "kind": d.device_kind} for d in jax.devices()]


def _mlx():
    import mlx.core as mx
    devs = [{"device": "cpu"}]
    if mx.metal.is_available():
        devs.append({"device": "gpu", "metal": True})
    return devs


def _icds():
    return {
        "opencl_icds": sorted(glob.glob("/etc/OpenCL/vendors/*.icd")),
        "vulkan_icds": sorted(glob.glob("/usr/share/vulkan/icd.d/*.json") + glob.glob("/etc/vulkan/icd.d/*.json")),
        "mesa_gl": sorted(glob.glob("/usr/lib/*/dri/*swrast*") + glob.glob("/usr/lib/*/libGLX_mesa.so*"))[:4],
    }


_FIXES = {
    "jax": "pip install 'fnarray[jax]'",
    "mlx": "pip install 'fnarray[mlx]' (Metal GPU: Apple silicon with macOS)",
    "opencl": "pip install 'fnarray[opencl]' (pocl-binary-distribution gives a CPU driver on Linux)",
    "webgpu": "pip install 'fnarray[webgpu]' (and a Vulkan/Metal/D3D12/GL driver, e.g. Debian's mesa-vulkan-drivers)",
}


def _fallbacks(device):
    """The primitives and dtypes ``device`` declares unsupported (they run on numpy:0), and the primitives its
    backend lowers through their decompositions (``Backend.expected_decompositions``: they run on ``device``)."""
    from fnarray.core import dtypes
    from fnarray.core.ir import Eqn, Params, Var
    from fnarray.core.shaped import ShapedArray
    from fnarray.testing.cases import CASES, NOT_EXECUTED
    backend = device.impl
    prims, seen = {}, set()
    for _name, prim, inputs, params in CASES:
        if prim in seen or prim in NOT_EXECUTED or prim.kind == "effect":  # a host callback is no fallback
            continue
        import numpy as np
        avals = [ShapedArray(np.shape(x), dtypes.canonicalize(np.asarray(x).dtype)) for x in inputs]
        out = prim.abstract_eval(*avals, **params)
        outs = out if prim.multiple_results else [out]
        if any(a.dtype not in backend.capabilities(device).dtypes for a in list(avals) + list(outs)):
            continue  # a dtype the device lacks: reported under dtypes, not as a primitive
        eqn = Eqn(prim, tuple(Var(a) for a in avals), Params(params), tuple(Var(a) for a in outs))
        reason = backend.supports(eqn, device)
        seen.add(prim)
        # a primitive the backend lowers through its decomposition (log2 on jax:0) runs there: no fallback
        if reason is not None and prim.name not in backend.expected_decompositions:
            prims[prim.name] = reason
    caps = backend.capabilities(device)
    missing_dtypes = sorted(d.name for d in dtypes.KNOWN_DTYPES if d not in caps.dtypes)
    return {"primitives": prims, "dtypes": missing_dtypes, "control_flow": caps.control_flow,
            "decomposed": sorted(backend.expected_decompositions)}


def report() -> dict:
    """The doctor's findings as a JSON-serializable dict."""
    from fnarray.devices.backend import backend_names, get_backend
    from fnarray.core.errors import BackendUnavailable
    rep = {
        "system": {"python": sys.version.split()[0], "platform": platform.platform(),
                   "machine": platform.machine()},
        "libraries": {lib: _version(lib) for lib in _LIBS},
        "hardware": {},
        "drivers": _probe(_icds),
        "backends": {},
    }
    probes = {"opencl": ("pyopencl", _opencl), "wgpu": ("wgpu", _wgpu), "jax": ("jax", _jax),
              "mlx": ("mlx", _mlx)}
    for key, (mod, fn) in probes.items():
        if importlib.util.find_spec(mod) is None:
            rep["hardware"][key] = {"ok": False, "error": f"{mod} is not installed"}
        else:
            rep["hardware"][key] = _probe(fn)
    for name in backend_names():
        entry = {"usable": False}
        try:
            b = get_backend(name)
            devs = b.devices()
            entry["usable"] = True
            entry["devices"] = []
            for d in devs:
                fb = _probe(lambda d=d: _fallbacks(d))
                entry["devices"].append({"device": str(d), "platform": d.platform, "description": d.description,
                                         "falls_back": fb.get("result", fb.get("error"))})
        except BackendUnavailable as e:
            entry["reason"] = str(e)
            entry["fix"] = _FIXES.get(name, "")
        except Exception as e:  # noqa: BLE001  (never crash on a broken driver)
            entry["reason"] = f"probe failed: {type(e).__name__}: {e}"
            entry["fix"] = _FIXES.get(name, "")
        rep["backends"][name] = entry
    try:
        from fnarray.devices.placement import default_device
        rep["default_device"] = str(default_device())
    except Exception as e:  # noqa: BLE001
        rep["default_device"] = f"probe failed: {e}"
    return rep


def _fmt(rep) -> str:
    lines = ["fnarray doctor", "", "System", f"  Python {rep['system']['python']} on {rep['system']['platform']}", "",
             "Hardware seen by each library"]
    for key, res in rep["hardware"].items():
        if not res["ok"]:
            lines.append(f"  {key}: none ({res['error']})")
            continue
        items = res["result"]
        if key == "opencl":
            for p in items:
                lines.append(f"  opencl: platform {p['platform']} ({p['version']})")
                for d in p["devices"]:
                    lines.append(f"    - {d['name']} [{d['type']}], {d['compute_units']} compute units, "
                                 f"fp64={'yes' if d['fp64'] else 'no'}, fp16={'yes' if d['fp16'] else 'no'}")
        elif key == "wgpu":
            for a in items:
                lines.append(f"  wgpu: {a['adapter']} via {a['backend']} ({a['type']})")
        elif key == "jax":
            lines.append("  jax: " + ", ".join(f"{d['platform']}:{d['id']} ({d['kind']})" for d in items))
        elif key == "mlx":
            lines.append("  mlx: " + ", ".join(d["device"] for d in items))
    lines += ["", "Drivers and runtimes"]
    drv = rep["drivers"]
    if drv["ok"]:
        for k, v in drv["result"].items():
            lines.append(f"  {k}: {', '.join(os.path.basename(p) for p in v) if v else 'none found'}")
    else:
        lines.append(f"  probe failed: {drv['error']}")
    lines += ["", "Libraries"]
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in rep["libraries"].items() if v) or "  none")
    missing = [k for k, v in rep["libraries"].items() if not v]
    if missing:
        lines.append("  not installed: " + ", ".join(missing))
    lines += ["", f"fnarray backends (default device: {rep['default_device']})"]
    for name, e in rep["backends"].items():
        if e["usable"]:
            for d in e["devices"]:
                fb = d["falls_back"]
                lines.append(f"  {d['device']:10s} usable   {d['description']}")
                if isinstance(fb, dict):
                    prims = ", ".join(f"{p} ({r})" for p, r in fb["primitives"].items()) or "none"
                    lines.append(f"             falls back to numpy: primitives: {prims}; "
                                 f"dtypes: {', '.join(fb['dtypes']) or 'none'}; control flow: {fb['control_flow']}")
                    if fb["decomposed"]:
                        lines.append(f"             runs through decompositions: {', '.join(fb['decomposed'])}")
                else:
                    lines.append(f"             fallback probe failed: {fb}")
        else:
            lines.append(f"  {name:10s} unusable: {e['reason']}")
            if e.get("fix") and "to fix" not in e["reason"]:
                lines.append(f"             to fix: {e['fix']}")
    return "\n".join(lines)


def doctor(json_output: bool = False, file=None) -> dict:
    """Print the report (text, or JSON with ``json_output``) and return it as a dict.

    ``fnarray.doctor()`` (also ``python -m fnarray doctor``) probes the installed
    libraries, drivers and hardware and tries to start every backend; it has no
    JAX counterpart (it plays the part of ``jax.print_environment_info``).

    Args:
      json_output: print JSON instead of the text table.
      file: a text stream to print to (default ``sys.stdout``).

    Returns:
      The JSON-serializable report: ``system``, ``libraries`` (versions),
      ``hardware``, ``drivers`` and ``backends`` (each with ``usable`` and the
      reason when not).

    Raises:
      Nothing: a backend that fails to start is reported, not raised.
    """
    rep = report()
    out = file or sys.stdout
    print(json.dumps(rep, indent=2, default=str) if json_output else _fmt(rep), file=out)
    return rep
