"""``fnarray.export.webgpu``: a jitted function as a folder that runs in a web page through WebGPU.

The export does not generate code of its own. It traces ``f``, makes the program
straight-line (``_flatten.straight_line``: calls inlined, scans unrolled), checks
every equation against the ``webgpu`` device with fallback ``"error"``, lowers it
there and reads the launch plan that the native runtime would run
(``WebGPULowered.launch_plan``): the same WGSL kernels, value slots, uniform
arguments and work-group counts. The bundle is that plan written down:

- ``kernels/NNN_<entry>.wgsl``: each distinct kernel source once;
- ``weights.bin``: the baked arguments and captured constants, each at a
  16-byte-aligned offset, little-endian (``bool`` as ``u32``, as the kernels read it);
- ``model.json``: the manifest (format, version, inputs, outputs, state and how each entry
  updates it, buffers, kernels, dispatches in order, required limits and features);
- ``fnarray-webgpu.js``: the runtime that replays the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
from importlib import resources

import numpy as np

from fnarray.core.log import logged_step
from fnarray.core.config import config
from fnarray.core.errors import BackendUnavailable, ExportError, UnsupportedOnDevice
from fnarray.core.ir import Literal, check_program
from fnarray.export._flatten import straight_line
from fnarray.export._names import export_leaves, fname as _fname, out_names as _out_names
from fnarray.lowering.kernels.ir import ArrayDecl, BufferParam, For, If, ScalarParam
from fnarray.lowering.kernels.wgsl import uniform_bytes, wgsl_layout

__all__ = ["webgpu", "MANIFEST_VERSION", "FORMAT", "MANIFEST_FILE", "WEIGHTS_FILE", "RUNTIME_FILE", "KERNEL_DIR",
           "runtime_source"]

FORMAT = "fnarray-webgpu"
#: Bumped whenever the manifest changes incompatibly; the JS runtime refuses other versions.
MANIFEST_VERSION = 2
MANIFEST_FILE = "model.json"
WEIGHTS_FILE = "weights.bin"
RUNTIME_FILE = "fnarray-webgpu.js"
KERNEL_DIR = "kernels"
_ALIGN = 16
# The dtypes the JS runtime reads and writes (as Float32Array, Int32Array, Uint32Array, Uint8Array, Uint16Array).
_DTYPE_NAMES = {"float32", "int32", "uint32", "bool", "float16", "complex64"}  # complex64: (re, im) float32 pairs
_WEIGHT_ONLY_DTYPES = {"uint8"}   # baked, never an input, output or state the page reads or writes


def runtime_source() -> str:
    """The text of the JS runtime ``fnarray-webgpu.js`` shipped with fnarray (what ``webgpu`` copies into a bundle).

    Args:
      (none)
    Returns:
      the ES module's source as a ``str``.
    Raises:
      OSError: the packaged file is missing (a broken installation).

    Mirrors no NumPy/JAX function.
    """
    return resources.files("fnarray.export").joinpath(RUNTIME_FILE).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------- device


def _webgpu_device():
    from fnarray.devices.backend import get_backend
    try:
        backend = get_backend("webgpu")
    except BackendUnavailable as e:
        raise BackendUnavailable(f"fnarray.export.webgpu schedules the browser's kernels with the webgpu backend "
                                 f"(the same WGSL that runs natively), which cannot start here: {e}") from None
    return backend.devices()[0]


@contextlib.contextmanager
def _fallback_error():
    old = config.fallback
    config.fallback = "error"
    try:
        yield
    finally:
        config.fallback = old


def _check_supported(program, device) -> None:
    from fnarray.devices.partition import unsupported_reason
    for e in program.eqns:
        reason = unsupported_reason(e, device)
        if reason is not None:
            dts = sorted({a.aval.dtype.name for a in list(e.inputs) + list(e.outputs)})
            raise UnsupportedOnDevice(
                f"fnarray.export.webgpu: {e.primitive.name} ({', '.join(dts)}) cannot run in the browser: {reason}. "
                "A browser bundle runs every equation on WebGPU (there is no numpy fallback in a web page): "
                "use float32/int32/uint32/bool arrays and the operations the webgpu backend has "
                "(fnarray.config.fallback = 'error' on the webgpu device finds them natively).")


# ------------------------------------------------------------------------------------------- bundle


def _storage_bytes(dtype, shape) -> int:
    d = np.dtype(dtype)
    return math.prod(shape) * (4 if d == np.bool_ else d.itemsize)


def _padded(n: int) -> int:
    return max(4, (n + 3) // 4 * 4)


def _raw(value, dtype, shape) -> bytes:
    a = np.asarray(value)
    if a.shape != tuple(shape):
        raise ValueError(f"a baked value has shape {a.shape}, the program expects {tuple(shape)}")
    d = np.dtype(dtype)
    if d == np.bool_:
        return a.astype("<u4").tobytes()
    return np.ascontiguousarray(a, dtype=d.newbyteorder("<")).tobytes()


def _local_bytes(stmts) -> int:
    total = 0
    for s in stmts:
        if isinstance(s, ArrayDecl) and s.space == "local":
            d = np.dtype(s.dtype)
            total += s.size * (4 if d == np.bool_ else d.itemsize)
        elif isinstance(s, For):
            total += _local_bytes(s.body)
        elif isinstance(s, If):
            total += _local_bytes(s.then) + _local_bytes(s.orelse)
    return total


def _dtype_name(d, weight=False) -> str:
    """The manifest's name of dtype ``d``; a baked ``weight`` may also be uint8 (mxfp4/mxfp8/nvfp4 scales): the
    runtime copies weights as bytes, and the kernels read uint8 buffers as little-endian words, four to a word."""
    name = np.dtype(d).name
    if weight and name in _WEIGHT_ONLY_DTYPES:
        return name
    if name not in _DTYPE_NAMES:
        raise UnsupportedOnDevice(f"fnarray.export.webgpu: a value of dtype {name} cannot cross into the browser "
                                  f"runtime (it reads {', '.join(sorted(_DTYPE_NAMES))}); cast it first")
    return name


def _log_name(f, *a, path, **k):
    what = f"entries {', '.join(map(str, f))}" if isinstance(f, dict) else getattr(f, "__name__", "a function")
    return f"export of {what} to {path} (webgpu)"


@dataclasses.dataclass
class _Lowered:
    """One entry point, traced and scheduled: what ``_write`` turns into the manifest's entry."""

    name: str
    fun: object
    plan: object
    consts: list
    leaves: list          # (name, value, baked) per flattened argument leaf
    is_state: list        # per leaf: whether it belongs to a state argument
    out_names: list       # the names of the outputs that are not state
    n_outputs: int        # how many of the plan's outputs are not state (the state's new values follow)


@logged_step(_log_name)
def webgpu(f, *example_args, path, bake_argnums=(), state_argnums=()):
    """Export ``f`` as a folder that runs in a web page through WebGPU (``navigator.gpu``).

    The function is traced at the types of ``example_args`` and lowered for the
    ``webgpu`` backend with ``fnarray.config.fallback = "error"``; the folder holds
    its WGSL kernels, a manifest, the baked weights and the JS runtime
    ``fnarray-webgpu.js``. In a page::

        import { loadModel } from "./model/fnarray-webgpu.js";
        const model = await loadModel("./model/");
        const [probs] = await model.run({ x: new Float32Array(64) });

    Several entry points share one bundle (their weights stored once, their state
    buffers shared): ``webgpu({"prefill": (prefill, *args), "decode": (decode, *args)},
    path=..., bake_argnums=(0,), state_argnums=(1,))``, run in the page as
    ``model.entries.decode.run({...})``.

    Args:
      f: a function of arrays and pytrees of arrays returning the same (a ``jit`` function is fine);
        or a dict ``{entry name: (function, *example_args)}`` of several entry points (then no
        ``example_args`` after it). Entry names are identifiers (letters, digits, ``_``).
      *example_args: positional arguments whose shapes and dtypes the bundle is made for;
        the browser passes arrays of exactly these shapes.
      path: the folder to write (created if missing; files of an earlier export there are replaced).
      bake_argnums: positions of arguments (a trained model's parameters) stored in
        ``weights.bin`` with their example values; they are not run-time inputs. With several
        entries, the same positions in each; equal arrays are stored once.
      state_argnums: positions of arguments that the page keeps on the GPU between runs (a
        KV cache): ``f`` must return ``(outputs, new_state)``, ``new_state`` with the structure,
        shapes and dtypes of the state argument (a tuple of them for several positions). The
        runtime holds each state leaf in a GPU buffer, initialised with the example value
        (``model.resetState()`` restores it), passes it to every run and keeps the new value: a new
        value that is a ``dynamic_update_slice`` of the state leaf (``fa.nn.KVCache.update``) or a
        scatter into it, where nothing else reads the old value, is written in place (only the
        updated elements: the leaf is donated to it, as ``jit``'s ``donate_argnums``; listed in the
        entry's ``state_in_place``); any other is computed into a partner buffer that then swaps
        roles with it, or copied at the end of the run;
        ``run`` returns only ``outputs``. State leaves are named as
        inputs (``caches.0.keys``) and shared by the entries that name them alike.
    Returns:
      the manifest (a dict, also written as ``model.json``). Run-time inputs are named by
      ``f``'s parameter names, pytree leaves by dotted paths (``params.w1``); outputs come
      back in the order of ``f``'s flattened outputs (named ``out``, ``out.0``...).
    Raises:
      UnsupportedOnDevice: naming the primitive, for anything the browser cannot run: a
        dtype WebGPU lacks (float64, int64, complex), a ``while_loop`` or a ``cond`` on a
        computed value (a ``scan`` of static length is unrolled into the dispatch list).
      BackendUnavailable: when the webgpu backend (wgpu-py and a driver) cannot start:
        the kernels are scheduled for it.
      ValueError / TypeError: for a bad ``bake_argnums``/``state_argnums``, argument count or entry
        dict, a function with state that does not return ``(outputs, new_state)`` of the state's
        structure, state leaves of one name with different shapes in two entries, or a ``path``
        that is not a string or ``os.PathLike`` (``TypeError`` naming its type).
      ExportError: (an ``OSError``) for a ``path`` that cannot be a folder (an existing file, or
        a file among its parents) or cannot be written (permissions, read-only file system).

    Mirrors no NumPy/JAX function; JAX's closest relative is ``jax.export`` (state as
    ``jit``'s ``donate_argnums``: the updated value replaces the argument).
    """
    path = _check_path(path)
    if isinstance(f, dict):
        if example_args:
            raise TypeError("fnarray.export.webgpu: with a dict of entries, give each entry's example arguments in "
                            "its tuple ({'decode': (decode, *args)}), not after the dict")
        if not f:
            raise ValueError("fnarray.export.webgpu: the dict of entries is empty")
        specs = []
        for name, spec in f.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"fnarray.export.webgpu: entry name {name!r} is not an identifier (letters, digits "
                                 "and _, not starting with a digit): the page calls model.entries.<name>.run")
            if not isinstance(spec, tuple) or not spec or not callable(spec[0]):
                raise TypeError(f"fnarray.export.webgpu: entry {name!r} must be a tuple (function, *example_args), "
                                f"got {type(spec).__name__}")
            specs.append((name, spec[0], spec[1:]))
    else:
        specs = [(None, f, example_args)]
    device = _webgpu_device()
    entries = [_lower(name, fn, args, bake_argnums, state_argnums, device) for name, fn, args in specs]
    try:
        return _write(path, entries, several=isinstance(f, dict))
    except ExportError:
        raise
    except OSError as e:
        raise ExportError(f"fnarray.export.webgpu: could not write the bundle to {path!r}: {e.strerror or e} "
                          f"({type(e).__name__}); give a folder you can write, with free space") from e


def _lower(name, f, example_args, bake_argnums, state_argnums, device) -> _Lowered:
    """Trace and schedule one entry point on the webgpu ``device``."""
    from fnarray import tree_util
    from fnarray.export._names import argnum_positions, leaf_names, param_names
    from fnarray.lowering.webgpu.backend import portable_limits
    from fnarray.transforms.jit import Jitted

    who = "fnarray.export.webgpu" + (f" (entry {name!r})" if name else "")
    fun, leaves = export_leaves(who, f, example_args, bake_argnums, "the page's model.run({...})")
    state = argnum_positions(who, state_argnums, len(example_args), "state_argnums")
    both = set(state) & set(argnum_positions(who, bake_argnums, len(example_args), "bake_argnums"))
    if both:
        raise ValueError(f"{who}: argument {min(both)} is in both bake_argnums and state_argnums; a state argument "
                         "is kept by the page, a baked one is fixed")
    is_state = []
    for i, pname in enumerate(param_names(fun, len(example_args), who)):
        is_state.extend([i in state] * len(leaf_names(pname, example_args[i])))
    # The kernels are scheduled within WebGPU's default limits (8 storage buffers per kernel), which every
    # browser gives, however many the native device was opened with.
    with _fallback_error(), portable_limits():
        traced = Jitted(fun).trace(*example_args)
        program, consts = traced.program, traced.consts
        if len(program.invars) != len(leaves):
            raise RuntimeError(f"{who}: the traced program has {len(program.invars)} inputs for "
                               f"{len(leaves)} argument leaves")
        caps = device.impl.capabilities(device)
        flat = straight_line(program, stack_group=max(2, (caps.max_buffers_per_kernel or 8) - 1))
        check_program(flat)
        _check_supported(flat, device)
        for v in flat.constvars:
            _dtype_name(v.aval.dtype, weight=True)
        for v, (_, _, baked) in zip(flat.invars, leaves, strict=True):
            _dtype_name(v.aval.dtype, weight=baked)
        out_tree = traced.entry.out_tree
        if state:
            want = tree_util.tree_structure(example_args[state[0]] if len(state) == 1
                                            else tuple(example_args[i] for i in state))
            kids = out_tree.children() if out_tree.type in (tuple, list) else []
            if len(kids) != 2 or kids[1] != want:
                raise ValueError(f"{who}: with state_argnums={tuple(state)}, {_fname(fun)} must return (outputs, "
                                 f"new_state) with new_state structured as the state argument"
                                 f"{'s' if len(state) > 1 else ''} {want}; it returns {out_tree}")
            n_out = kids[0].num_leaves
        state_in = [k for k, s in enumerate(is_state) if s]
        # Each state leaf is donated to its own new value: a dynamic_update_slice of it (a KV cache's update) or a
        # scatter into it writes only the updated elements, into the state's buffer (groups/in_place.py).
        donate = {len(consts) + k: n_out + j for j, k in enumerate(state_in)} if state else {}
        plan = device.impl.lower(flat, device, donate=donate).launch_plan()
    if plan is None:
        raise RuntimeError(f"{who}: the webgpu backend planned host-driven control flow for a straight-line program")
    if not state:
        return _Lowered(name or _fname(fun), fun, plan, consts, leaves, is_state, _out_names(out_tree),
                        out_tree.num_leaves)
    outs = plan.schedule.outputs
    for j, k in enumerate(state_in):
        o, spec = outs[n_out + j], plan.schedule.inputs[len(consts) + k]
        o_dtype, o_shape = (o.aval.dtype, o.aval.shape) if isinstance(o, Literal) else (o.dtype, o.shape)
        if np.dtype(o_dtype) != np.dtype(spec.dtype) or tuple(o_shape) != tuple(spec.shape):
            raise ValueError(f"{who}: the new value of state {leaves[k][0]!r} is {np.dtype(o_dtype).name}"
                             f"{list(o_shape)}, the state is {np.dtype(spec.dtype).name}{list(spec.shape)}")
    return _Lowered(name or _fname(fun), fun, plan, consts, leaves, is_state, _out_names(kids[0]), n_out)


def _check_path(path) -> str:
    """``path`` as a string, checked before any tracing: a folder that exists or can be made."""
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"fnarray.export.webgpu: path must be a folder name (str or os.PathLike), got "
                        f"{type(path).__name__} {path!r:.60}")
    path = os.fspath(path)
    if not path:
        raise ExportError("fnarray.export.webgpu: path is empty; give the folder to write the bundle to, "
                          "e.g. path='model'")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ExportError(f"fnarray.export.webgpu: path {path!r} is an existing file, not a folder; give a folder "
                          "name (it is created if missing) or remove the file")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ExportError(f"fnarray.export.webgpu: path {path!r} cannot be made: {parent!r} is a file, not a "
                          "folder; give a path under an existing folder")
    target = path if os.path.isdir(path) else parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise ExportError(f"fnarray.export.webgpu: cannot write to {target!r} (no permission) for path "
                          f"{path!r}; give a folder you can write")
    return path


def _write(path, entries, several):
    buffers, weights, state = [], bytearray(), {}
    stored = {}  # (dtype, shape, bytes) -> the weight buffer holding them: equal arrays are stored once

    def add_buffer(kind, dtype, shape, name=None, value=None):
        nbytes = _storage_bytes(dtype, shape)
        entry = {"id": len(buffers), "kind": kind, "dtype": _dtype_name(dtype, weight=kind == "weight"),
                 "shape": list(shape), "size": _padded(nbytes)}
        if name is not None:
            entry["name"] = name
        if value is not None:
            weights.extend(b"\0" * (-len(weights) % _ALIGN))
            entry["offset"], entry["nbytes"] = len(weights), nbytes
            weights.extend(_raw(value, dtype, shape))
        buffers.append(entry)
        return entry["id"]

    def add_weight(dtype, shape, name, value):
        key = (np.dtype(dtype).name, tuple(shape), _raw(value, dtype, shape))
        if key not in stored:
            stored[key] = add_buffer("weight", dtype, shape, name, value)
        return stored[key]

    def add_state(dtype, shape, name, value, who):
        hit = state.get(name)
        if hit is not None:
            b = buffers[hit]
            if b["dtype"] != np.dtype(dtype).name or b["shape"] != list(shape):
                raise ValueError(f"fnarray.export.webgpu: {who} has state {name!r} as {np.dtype(dtype).name}"
                                 f"{list(shape)}, an earlier entry as {b['dtype']}{b['shape']}; state leaves of one "
                                 "name are one buffer")
            return hit
        a = np.asarray(value)
        state[name] = add_buffer("state", dtype, shape, name, a if a.any() else None)
        return state[name]

    partners = {}  # state buffer -> its partner: the state's new value is written there, then the two swap roles

    def partner_of(state_bid):
        if state_bid not in partners:
            b = buffers[state_bid]
            partners[state_bid] = add_buffer("state", b["dtype"], b["shape"], b["name"])
        return partners[state_bid]

    kernels, kernel_of = [], {}
    need = {"maxStorageBuffersPerShaderStage": 0, "maxComputeWorkgroupSizeX": 1, "maxComputeWorkgroupSizeY": 1,
            "maxComputeWorkgroupSizeZ": 1, "maxComputeInvocationsPerWorkgroup": 1,
            "maxComputeWorkgroupsPerDimension": 1, "maxComputeWorkgroupStorageSize": 0,
            "maxStorageBufferBindingSize": 4, "maxBufferSize": 4}
    features = set()
    written = [_entry(e, add_buffer, add_weight, add_state, partner_of, buffers, kernels, kernel_of, need, features)
               for e in entries]
    need["maxBufferSize"] = max([4] + [b["size"] for b in buffers])
    if any(b["dtype"] == "float16" for b in buffers):
        features.add("shader-f16")

    manifest = {"format": FORMAT, "version": MANIFEST_VERSION,
                "name": ",".join(e.name for e in entries) if several else written[0]["name"],
                "runtime": RUNTIME_FILE, "weights": {"file": WEIGHTS_FILE, "bytes": len(weights)}}
    if several:
        manifest["entries"] = written
    else:
        manifest.update({k: v for k, v in written[0].items() if k != "name"})
    manifest["state"] = [{"name": n, "dtype": buffers[b]["dtype"], "shape": buffers[b]["shape"], "buffer": b}
                         | ({"partner": partners[b]} if b in partners else {}) for n, b in state.items()]
    manifest.update({"buffers": buffers,
                     "kernels": [{k2: v for k2, v in kern.items() if k2 != "source"} for kern in kernels],
                     "limits": need, "features": sorted(features)})
    if not several:  # the single entry's fields in the order of earlier manifests
        manifest = {k: manifest[k] for k in ("format", "version", "name", "runtime", "weights", "inputs", "outputs",
                                             "state", "state_updates", "state_in_place", "buffers", "kernels",
                                             "dispatches", "limits", "features")}
    os.makedirs(path, exist_ok=True)
    kdir = os.path.join(path, KERNEL_DIR)
    if os.path.isdir(kdir):
        shutil.rmtree(kdir)
    os.makedirs(kdir)
    for kern in kernels:
        with open(os.path.join(path, kern["file"]), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(kern["source"])
    with open(os.path.join(path, WEIGHTS_FILE), "wb") as fh:
        fh.write(bytes(weights))
    with open(os.path.join(path, RUNTIME_FILE), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(runtime_source())
    with open(os.path.join(path, MANIFEST_FILE), "w", encoding="utf-8", newline="\n") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    return manifest


def _entry(low, add_buffer, add_weight, add_state, partner_of, buffers, kernels, kernel_of, need, features):
    """One entry point's ``inputs``, ``outputs``, ``state_updates`` and ``dispatches``, adding its buffers and
    kernels to the bundle's and raising the limits ``need`` and ``features`` it requires.

    A state leaf's new value that a kernel computes into a buffer of its own (a slot holds one value) is
    computed into the state's partner buffer instead: the run swaps the two (``"swap": true``) rather than
    copying. Other new values (an input, a constant, one value for two state leaves) are copied. A new value that
    is a ``dynamic_update_slice`` of the state (a KV cache's new positions) or a scatter into it is written into
    the state's buffer in place by a kernel over the update alone (the state is donated to it:
    ``kernels/groups/in_place.py``); such states are listed in ``state_in_place`` and need no update."""
    plan, consts, leaves = low.plan, low.consts, low.leaves
    sched = plan.schedule
    who = f"entry {low.name!r}"
    inputs, outputs, updates = [], [], []
    slot_buffer = {}
    n_consts = len(consts)
    if plan.n_inputs != n_consts + len(leaves):
        raise RuntimeError(f"fnarray.export.webgpu: the webgpu plan takes {plan.n_inputs} inputs, the program has "
                           f"{n_consts} constants and {len(leaves)} arguments")
    state_buffers = []
    for k, spec in enumerate(sched.inputs[:plan.n_inputs]):
        if k < n_consts:
            slot_buffer[k] = add_weight(spec.dtype, spec.shape, f"const.{k}", np.asarray(consts[k]))
            continue
        name, value, baked = leaves[k - n_consts]
        if baked:
            slot_buffer[k] = add_weight(spec.dtype, spec.shape, name, np.asarray(value))
        elif low.is_state[k - n_consts]:
            slot_buffer[k] = add_state(spec.dtype, spec.shape, name, value, who)
            state_buffers.append((name, slot_buffer[k]))
        else:
            bid = add_buffer("input", spec.dtype, spec.shape, name)
            slot_buffer[k] = bid
            inputs.append({"name": name, "dtype": _dtype_name(spec.dtype), "shape": list(spec.shape),
                           "buffer": bid})
    new_slots = [o for o in plan.outputs[low.n_outputs:] if isinstance(o, int)]
    swapped = {}  # the slot of a state's new value -> the state's partner
    for (_, bid), o in zip(state_buffers, plan.outputs[low.n_outputs:], strict=True):
        if isinstance(o, int) and o >= plan.n_inputs and new_slots.count(o) == 1 and \
                o not in plan.outputs[:low.n_outputs]:
            swapped[o] = partner_of(bid)   # a kernel's output of the state's dtype and shape (checked in _lower)
    for k, spec in plan.allocs:
        slot_buffer[k] = swapped[k] if k in swapped else add_buffer("temp", spec.dtype, spec.shape)

    names = low.out_names + [n for n, _ in state_buffers]
    unchanged = set()   # state buffers that hold their new value at the end of the dispatches
    for i, (name, slot, spec) in enumerate(zip(names, plan.outputs, sched.outputs, strict=True)):
        if isinstance(spec, Literal):
            bid = add_buffer("constant", spec.aval.dtype, spec.aval.shape, name,
                             np.broadcast_to(np.asarray(spec.val, spec.aval.dtype), spec.aval.shape))
            dtype, shape = spec.aval.dtype, spec.aval.shape
        else:
            bid, dtype, shape = slot_buffer[slot], spec.dtype, spec.shape
        if i < low.n_outputs:
            outputs.append({"name": name, "dtype": _dtype_name(dtype), "shape": list(shape), "buffer": bid})
            continue
        target = state_buffers[i - low.n_outputs][1]
        if bid == target:
            unchanged.add(name)   # returned unchanged, or updated in place by the dispatches
            continue
        if isinstance(slot, int) and slot in swapped:
            updates.append({"name": name, "from": bid, "to": target, "swap": True})
            continue
        if buffers[bid]["kind"] == "state":
            raise ValueError(f"fnarray.export.webgpu: {who} returns state {buffers[bid]['name']!r} as the new value "
                             f"of state {name!r}; exchanging state buffers is not supported (copy it: x + 0)")
        updates.append({"name": name, "from": bid, "to": target})

    dispatches = []
    for st in plan.steps:
        kernel = st.launch.kernel
        k = kernel_of.get(st.source)
        if k is None:
            k = kernel_of[st.source] = len(kernels)
            kernels.append({"name": st.entry, "entry": st.entry,
                            "file": f"{KERNEL_DIR}/{k:03d}_{st.entry}.wgsl", "source": st.source})
            if "enable f16;" in st.source:
                features.add("shader-f16")
        bparams = [p for p in kernel.params if isinstance(p, BufferParam)]
        scalars = {p.name: a for p, a in zip(kernel.params, st.launch.args, strict=True) if isinstance(p, ScalarParam)}
        layout = wgsl_layout(kernel)
        bindings = [{"buffer": slot_buffer[s], "write": bool(p.writes)}
                    for s, p in zip(st.slots, bparams, strict=True)]
        d = {"kernel": k, "bindings": bindings, "workgroups": list(st.groups)}
        if layout.uniform_fields:
            d["uniform"] = np.frombuffer(uniform_bytes(layout, scalars), "<u4").tolist()
        dispatches.append(d)
        group = wgsl_layout(_with_local_size(st.launch)).group_size
        need["maxStorageBuffersPerShaderStage"] = max(need["maxStorageBuffersPerShaderStage"], len(bindings))
        for axis, g in zip("XYZ", group, strict=True):
            need[f"maxComputeWorkgroupSize{axis}"] = max(need[f"maxComputeWorkgroupSize{axis}"], g)
        need["maxComputeInvocationsPerWorkgroup"] = max(need["maxComputeInvocationsPerWorkgroup"], math.prod(group))
        need["maxComputeWorkgroupsPerDimension"] = max([need["maxComputeWorkgroupsPerDimension"]] + list(st.groups))
        need["maxComputeWorkgroupStorageSize"] = max(need["maxComputeWorkgroupStorageSize"],
                                                     _local_bytes(kernel.body))
        for bnd in bindings:
            need["maxStorageBufferBindingSize"] = max(need["maxStorageBufferBindingSize"],
                                                      buffers[bnd["buffer"]]["size"])
    written = {b["buffer"] for d in dispatches for b in d["bindings"] if b["write"]}
    in_place = [n for n, bid in state_buffers if n in unchanged and bid in written]
    return {"name": low.name, "inputs": inputs, "outputs": outputs, "state_updates": updates,
            "state_in_place": in_place, "dispatches": dispatches}


def _with_local_size(launch):
    """The launch's kernel with its work-group size fixed, as the runtime renders and compiles it."""
    k = launch.kernel
    return k if k.local_size is not None else dataclasses.replace(k, local_size=tuple(launch.local_size))
