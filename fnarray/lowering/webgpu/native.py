"""How a webgpu call records its kernels: wgpu-native's C functions called directly, or wgpu-py's methods.

A cached call (``dispatch.Runner``) makes a bind group for each kernel that binds the call's own buffers (its
inputs, its fresh outputs) and records ``set_pipeline``, ``set_bind_group`` and ``dispatch_workgroups`` per kernel.
Through wgpu-py's methods these cost far more Python than C: ``create_bind_group`` ~20-35 us (descriptor structs
built from dicts) against ~2.5 us for the C function and its release, a pass command ~1.5 us against ~0.3-0.7 us
(measured on lavapipe, wgpu-py 0.32). Most of a pass command's cost is the error capture wgpu-py wraps around
every C call (``_helpers.SafeLibCalls``: a per-thread stack, a slot object, a ``try/finally``).

``Native`` calls the same C functions through wgpu-py's own cffi library (``wgpu.backends.wgpu_native._ffi``),
with one descriptor per kernel whose buffer fields are filled in place. What becomes of errors:

- bind-group creation reports validation errors synchronously, through the device's error callback:
  ``bind_groups`` captures once around all of a call's creations, with wgpu-py's own ``ErrorHandler``
  (``capture``/``release``, what its per-call wrapper does), and raises the ``GPUError`` subclass wgpu-py would
  (``GPUValidationError`` ...) with wgpu-native's message, before anything of the call is recorded;
- commands recorded into a compute pass report nothing when called: wgpu-native validates them when the pass
  ends or the encoder finishes (measured: a dispatch of 100,000 work-groups raised at ``finish``, "In
  wgpuCommandEncoderFinish ... In a dispatch command ... must be less or equal to 65535"). Passes are ended and
  encoders finished through wgpu-py's methods, which raise as before; the capture wgpu-py puts around each
  recorded command never catches anything.

The trade-off is a dependency on wgpu-py internals (``_ffi.ffi``/``lib``, ``_api.error_handler``, the
``_internal`` handles, ``_helpers.ERROR_TYPES``) and on the C declarations of webgpu.h. ``make`` checks them when the
device opens (the functions' C types and the structs' fields against wgpu-py 0.32's); where any is missing (another wgpu-py, another wgpu implementation), or with
``FNARRAY_WEBGPU_CALLS=public``, the backend records through wgpu-py's methods instead (``Public``: the same
commands, the same results, more host time per call).
"""

from __future__ import annotations

import os

__all__ = ["Native", "Public", "make", "parse_types_at_once", "parse_wgpu_types", "window_entry"]

#: The C functions ``Native`` calls and their C types in wgpu-py 0.32's cffi declarations (``make`` checks them:
#: another signature means another wgpu-native, recorded through wgpu-py's methods instead).
_FUNCTIONS = {
    "wgpuDeviceCreateBindGroup": "struct WGPUBindGroupImpl *(*)(struct WGPUDeviceImpl *, WGPUBindGroupDescriptor *)",
    "wgpuBindGroupRelease": "void(*)(struct WGPUBindGroupImpl *)",
    "wgpuComputePassEncoderSetPipeline": "void(*)(struct WGPUComputePassEncoderImpl *, struct WGPUComputePipelineImpl *)",
    "wgpuComputePassEncoderSetBindGroup": ("void(*)(struct WGPUComputePassEncoderImpl *, uint32_t, struct "
                                           "WGPUBindGroupImpl *, size_t, uint32_t *)"),
    "wgpuComputePassEncoderDispatchWorkgroups": "void(*)(struct WGPUComputePassEncoderImpl *, uint32_t, uint32_t, "
                                                "uint32_t)",
}
#: The fields of the structs ``Native`` fills, in order.
_STRUCTS = {
    "WGPUBindGroupEntry": ("nextInChain", "binding", "buffer", "offset", "size", "sampler", "textureView"),
    "WGPUBindGroupDescriptor": ("nextInChain", "label", "layout", "entryCount", "entries"),
}
#: A binder that keeps bind groups (``Native.bind_groups``) stops keeping after this many calls given other
#: buffers than the kept ones: an eager operation's runner, given new arrays call after call, then costs what it
#: did before bind groups were kept (a call that misses the kept ones costs ~3-5 us more than none).
KEEP_MISSES = 8
#: The name ``Native.bind_groups`` captures errors under (wgpu-py's capture stack matches names).
_CAPTURE = "wgpuDeviceCreateBindGroup"

#: The C type strings that opening a webgpu device and its first calls hand cffi (``ffi.new``/``typeof``), as
#: wgpu-py 0.32 and ``Native`` spell them (measured with a counting ``FFI._typeof_locked``: 45 in a process that
#: opens webgpu:0 and runs a jitted product, a sort and a map). One missing here is parsed as before.
_TYPE_STRINGS = (
    "WGPUStringView *", "WGPURequestAdapterOptions *", "WGPURequestAdapterCallbackInfo *", "WGPUInstanceDescriptor *",
    "WGPUAdapterInfo *", "WGPUChainedStruct *", "WGPUChainedStruct * ", "WGPUNativeLimits *", "WGPULimits *",
    "WGPUQueueDescriptor *", "WGPUDeviceExtras *", "WGPUDeviceLostCallbackInfo *", "WGPUUncapturedErrorCallbackInfo *",
    "WGPUDeviceDescriptor *", "WGPURequestDeviceCallbackInfo *", "WGPUBindGroupEntry", "WGPUBindGroupDescriptor",
    "WGPUBufferDescriptor *", "uint8_t *", "WGPUBufferBindingLayout *", "WGPUBindGroupLayoutEntry *",
    "WGPUBindGroupLayoutDescriptor *", "WGPUShaderSourceWGSL *", "WGPUShaderModuleDescriptor *",
    "WGPUPipelineLayoutDescriptor *", "WGPUComputeState *", "WGPUComputePipelineDescriptor *",
    "WGPUBindGroupDescriptor *", "WGPUCommandEncoderDescriptor *", "WGPUComputePassDescriptor *",
    "WGPUCommandBufferDescriptor *", "WGPUBindGroupEntry *", "uintptr_t", "intptr_t",
    "char []", "uint8_t []", "WGPUFeatureName[]", "WGPUBindGroupLayoutEntry[]", "WGPUBindGroupLayout[]",
    "WGPUBindGroupEntry[]", "WGPUCommandBuffer[]",
    "void(WGPURequestAdapterStatus, WGPUAdapter, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUDeviceLostReason, WGPUStringView, void *, void *)",
    "void(WGPUDevice const *, WGPUErrorType, WGPUStringView, void *, void *)",
    "void(WGPURequestDeviceStatus, WGPUDevice, WGPUStringView, void *, void *)",
)


def _as_argument(cdecl: str) -> tuple[str, str]:
    """How ``cdecl`` is spelled as a parameter of a function-pointer type, and what of that parameter's C type is
    ``cdecl``'s: ``"arg"`` (itself), ``"item"`` (what it points to) or ``"function"`` (a function type)."""
    text = cdecl.strip()
    if text.endswith("[]"):                           # an open array: a pointer to one, whose item it is
        return f"{text[:-2].strip()} (*)[]", "item"
    if text.endswith(")"):                            # a function type: as a pointer to a function
        ret, _, params = text.partition("(")
        return f"{ret}(*)({params}", "function"
    if text.endswith("*") or not text.startswith("WGPU"):
        return text, "arg"
    return f"{text} *", "item"                        # a struct by value: a pointer to one, whose item it is


def parse_types_at_once(ffi, strings=_TYPE_STRINGS) -> int:
    """Enter ``strings``' C types into ``ffi``'s table of parsed type strings with one parse; returns how many.

    cffi parses each type string it is given once per process, and each parse re-reads a ``typedef`` line for
    every type name of webgpu.h (~430): the ~45 strings a webgpu device's start and first calls use cost ~1-3 s of
    every process that opens one (measured on the 2-core machine, loaded and not: docs/performance.md, "CI
    time"). One function-pointer type taking them all as parameters is parsed once instead, and each parameter's
    C type entered under the string wgpu-py passes, as ``FFI.typeof`` would (``FFI._parsed_types``: the same
    ``(ctype, is a function type)`` pairs, the same ctype objects, tests/test_webgpu_backend.py). Where cffi or
    the declarations differ (another version), nothing is entered and each string is parsed when used, as before.
    """
    table = getattr(ffi, "_parsed_types", None)
    if not isinstance(table, dict):
        return 0
    todo = [(s, *_as_argument(s)) for s in strings if s not in table]
    if not todo:
        return 0
    try:
        params = ffi.typeof(f"void(*)({', '.join(arg for _, arg, _ in todo)})").args
    except Exception:  # noqa: BLE001 (cffi's CDefError, FFIError...: declarations other than wgpu-py 0.32's)
        return 0
    with ffi._lock:
        for (s, _, what), ctype in zip(todo, params, strict=True):
            table.setdefault(s, (ctype.item if what == "item" else ctype, what == "function"))
    return len(todo)


def parse_wgpu_types() -> int:
    """``parse_types_at_once`` on wgpu-py's own cffi library (``wgpu.backends.wgpu_native._ffi.ffi``), before a
    device opens; 0 where wgpu-py has no such module."""
    try:
        from wgpu.backends.wgpu_native import _ffi
    except ImportError:
        return 0
    return parse_types_at_once(getattr(_ffi, "ffi", None))


def window_entry(windows, k) -> dict:
    """The ``offset`` and ``size`` (bytes) of a bind-group entry's buffer resource where binding ``k`` is a window
    of its buffer (``windows[k]``, ``backend._Step.windows``); empty for the whole buffer."""
    w = windows[k] if windows is not None and k < len(windows) else None
    return {} if w is None else {"offset": w[0], "size": w[1]}


def make(device):
    """``Native`` for a wgpu-py device where its internals are as expected, else ``Public``."""
    if os.environ.get("FNARRAY_WEBGPU_CALLS", "").lower() == "public":
        return Public(device)
    try:
        return Native(device)
    except (ImportError, AttributeError, TypeError):   # another wgpu-py: its methods instead
        return Public(device)


class Public:
    """Records through wgpu-py's methods (the fallback; the same commands as ``Native``)."""

    native = False

    def __init__(self, device):
        self.device = device

    def handle(self, obj):
        """What ``record`` takes for a pipeline or a bind group made at compile time: the wgpu-py object."""
        return obj

    def binder(self, bgl, fixed, uniform, windows=None, keep=0):
        """A bind-group maker for a layout: ``fixed[k]`` the buffer of binding ``k`` or ``None`` where the call's
        value slot ``slots[k]`` gives it; ``uniform`` a uniform buffer bound last, or ``None``; ``windows[k]``:
        ``(offset, size)`` where binding ``k`` is a window of its buffer (``backend._Step.windows``). ``keep``
        (how many bind groups ``Native`` keeps) is ignored: wgpu-py's methods make one a call."""
        return (bgl, tuple(fixed), uniform, windows)

    def bind_groups(self, binders, vals):
        """A bind group per ``(binder, slots)`` for the buffers ``vals[slot]`` of this call."""
        made = []
        for (bgl, fixed, uniform, windows), slots in binders:
            entries = [{"binding": k,
                        "resource": {"buffer": b if b is not None else vals[s]} | window_entry(windows, k)}
                       for k, (b, s) in enumerate(zip(fixed, slots, strict=True))]
            if uniform is not None:
                entries.append({"binding": len(fixed), "resource": {"buffer": uniform}})
            made.append(self.device.create_bind_group(layout=bgl, entries=entries))
        return made

    def record(self, cp, launches, made, last):
        """Record ``launches`` (``(pipeline, bind group or None, groups)``; ``None``: the next of ``made``) into
        the compute pass ``cp`` whose current pipeline is ``last``; returns the pass's pipeline after them."""
        it = iter(made)
        for pipe, bg, groups in launches:
            if pipe is not last:
                cp.set_pipeline(pipe)
                last = pipe
            cp.set_bind_group(0, bg if bg is not None else next(it))
            cp.dispatch_workgroups(*groups)
        return last

    def release(self, made):
        """Let go of a call's bind groups once recorded (the command buffer keeps what it uses)."""

    def forget(self, binders):
        """Nothing kept (``Native.forget``)."""


class Native:
    """Records through wgpu-native's C functions (see the module docstring). ``lib`` is read at each call, so that
    a test may count the calls by replacing it."""

    native = True

    def __init__(self, device):
        from wgpu.backends.wgpu_native import _api, _ffi, _helpers
        self.ffi, self.lib = _ffi.ffi, _ffi.lib
        self._errors = _api.error_handler
        self._error_types = _helpers.ERROR_TYPES
        self._fallback_error = _helpers.GPUError
        self.device = device._internal
        ffi = self.ffi
        for name, ctype in _FUNCTIONS.items():
            if ffi.typeof(getattr(self.lib, name)).cname != ctype:
                raise TypeError(f"{name} is declared as {ffi.typeof(getattr(self.lib, name)).cname}")
        for name, fields in _STRUCTS.items():
            if tuple(f for f, _ in ffi.typeof(name).fields) != fields:
                raise TypeError(f"{name} has other fields")
        self._whole = self.lib.WGPU_WHOLE_SIZE
        self._null = ffi.NULL
        if self.device is None:
            raise AttributeError("a wgpu-py device without its native handle")

    def handle(self, obj):
        """The native handle of a wgpu-py pipeline or bind group (kept alive by the caller)."""
        return obj._internal

    def binder(self, bgl, fixed, uniform, windows=None, keep=0):
        """A descriptor for ``bgl`` with the ``fixed`` buffers (and ``uniform``; ``windows`` as
        ``Public.binder``'s) filled in, and the entries that each call fills: ``[entries, descriptor, variable
        entry indices, what the descriptor points to, kept]``. With ``keep`` (a count), the last ``keep`` bind
        groups made are kept (``kept``: ``[{buffers: handle}, misses, keep]``, oldest first) and bound again
        where a call gives the same buffers (``bind_groups``)."""
        ffi = self.ffi
        n = len(fixed) + (uniform is not None)
        entries = ffi.new("WGPUBindGroupEntry[]", n)
        buffers = list(fixed) + ([uniform] if uniform is not None else [])
        for k, b in enumerate(buffers):
            entries[k].binding = k
            w = windows[k] if windows is not None and k < len(fixed) else None
            entries[k].offset = 0 if w is None else w[0]
            entries[k].size = self._whole if w is None else w[1]
            entries[k].buffer = b._internal if b is not None else self._null
        desc = ffi.new("WGPUBindGroupDescriptor *")
        desc.layout = bgl._internal
        desc.entryCount = n
        desc.entries = entries
        return [entries, desc, tuple(k for k, b in enumerate(fixed) if b is None), (bgl, buffers),
                [{}, -1, keep] if keep else None]

    def bind_groups(self, binders, vals):
        """A bind group per ``(binder, slots)`` for the buffers ``vals[slot]`` of this call; a validation error
        raises wgpu-py's ``GPUError`` subclass, after the ones made are released.

        A binder made with ``keep`` binds a kept bind group again where the call's buffers are the ones it was
        made for (the same wgpu-py buffer objects, which the binder keeps alive, so none is freed and none's
        identity reused while kept: a bind group names buffers, not their contents). Otherwise the new bind
        group is kept too, the oldest released where more than ``keep`` are, and after ``KEEP_MISSES`` such calls
        the binder stops keeping. A jitted decode step's or ``stack``'s call is given the same buffers pass after
        pass (the pool hands back the buffers last freed), an eager decode step's operations one of three sets in
        turn, and then make none. Returns the handles to bind, in order, whose ``drop`` lists those ``release``
        lets go once recorded."""
        create = self.lib.wgpuDeviceCreateBindGroup
        dev = self.device
        made, new, errors = _Made(), [], None
        try:
            for binder, slots in binders:
                entries, desc, var, _, kept = binder
                if kept is not None:
                    key = tuple([vals[slots[k]] for k in var])
                    h = kept[0].get(key)
                    if h is not None:
                        made.append(h)
                        continue
                if errors is None:
                    errors = self._errors
                    errors.capture(_CAPTURE)
                for k in var:
                    entries[k].buffer = vals[slots[k]]._internal
                h = create(dev, desc)
                made.append(h)
                new.append((binder, h, key if kept is not None else None))
        finally:
            err = errors.release(_CAPTURE) if errors is not None else None
        if err is not None:
            self.release([h for _, h, _ in new])
            raise self._error_types.get(err[0], self._fallback_error)(err[1])
        made.drop = drop = []
        for binder, h, key in new:
            if key is None:
                drop.append(h)
                continue
            kept = binder[4]
            groups = kept[0]
            if kept[1] >= KEEP_MISSES:   # an eager operation's binder, given new arrays call after call: keeps
                binder[4] = None          # nothing from now on (a pass that bound one holds its own reference)
                drop.extend(groups.values())
                drop.append(h)
                continue
            kept[1] += 1
            groups[key] = h
            if len(groups) > kept[2]:
                drop.append(groups.pop(next(iter(groups))))
        return made

    def forget(self, binders):
        """Release the bind groups ``binders`` keep (their runner is gone)."""
        release = self.lib.wgpuBindGroupRelease
        for binder, _ in binders:
            kept = binder[4]
            if kept is not None:
                binder[4] = None
                for h in kept[0].values():
                    release(h)

    def record(self, cp, launches, made, last):
        """As ``Public.record``, with native handles."""
        lib = self.lib
        set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
        dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        h, null = cp._internal, self._null
        it = iter(made)
        for pipe, bg, (x, y, z) in launches:
            if pipe is not last:
                set_pipeline(h, pipe)
                last = pipe
            set_bind_group(h, 0, bg if bg is not None else next(it), 0, null)
            dispatch(h, x, y, z)
        return last

    def release(self, made):
        """Release a call's bind groups once recorded (``made.drop`` where ``bind_groups`` made it: the kept ones
        stay): wgpu-native's pass holds its own reference to each (checked: a bind group released before its
        command buffer was submitted still bound its buffers)."""
        release = self.lib.wgpuBindGroupRelease
        for h in getattr(made, "drop", made):
            release(h)


class _Made(list):
    """``Native.bind_groups``' handles to bind, with ``drop``: those to release once recorded."""

    __slots__ = ("drop",)
