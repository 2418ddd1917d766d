"""Run-time configuration, ``fnarray.config`` (one ``Config``, read from the environment at import)."""

from __future__ import annotations

import contextlib
import difflib
import os
import threading

__all__ = ["config", "x64_scope"]

_FALLBACK_MODES = ("warn", "error", "silent")
_AUTOTUNE_MODES = ("off", "fast", "full")
#: JAX's platform names (``jax_platforms``, ``jax_platform_name``); every device says which it runs on
_PLATFORMS = ("cpu", "gpu", "cuda", "rocm", "tpu", "metal")
#: attributes that fnarray itself sets, not settings (still allowed, not offered)
_INTERNAL = frozenset({"generation", "debug_hook", "device_hook"})
#: cache-size settings: name -> (environment variable, default)
_CACHE_SIZES = {
    "jit_cache_size": ("FNARRAY_JIT_CACHE_SIZE", 128),
    "jit_global_cache_size": ("FNARRAY_JIT_GLOBAL_CACHE_SIZE", 2048),
    "eager_cache_size": ("FNARRAY_EAGER_CACHE_SIZE", 1024),
    "kernel_cache_size": ("FNARRAY_KERNEL_CACHE_SIZE", 1024),
}


def _cache_size(name, value) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"fnarray.config.{name} (env {_CACHE_SIZES[name][0]}) must be an integer >= 0, "
                             f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"fnarray.config.{name} must be an integer >= 0 (a number of cache entries), "
                         f"got {value!r}")
    return value


def _size_property(name):
    attr = "_" + name

    def get(self) -> int:
        return getattr(self, attr)

    def set_(self, value):
        setattr(self, attr, _cache_size(name, value))
    return property(get, set_, doc=f"Cache size (entries); env {_CACHE_SIZES[name][0]}.")


def _env_flag(name) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _flag(name, on) -> bool:
    """A boolean setting's value, checked: ``True``/``False`` (a NumPy bool, 0 or 1 too); a string such as
    ``"no"`` is refused, not read as true."""
    if type(on).__name__ in ("bool", "bool_") or type(on) is int and on in (0, 1):   # (NumPy 2 names it bool)
        return bool(on)
    raise TypeError(f"fnarray.config.{name} takes True or False, got {on!r} ({type(on).__name__}); the environment "
                    f"variable's spellings (\"1\", \"yes\") are read only from the environment")


class _Scoped(threading.local):
    """This thread's overrides of the global settings (``x64_scope``); ``None``: the global value holds."""

    x64 = None


_scoped = _Scoped()
#: how many ``x64_scope`` blocks are open, over all threads (under ``_scope_lock``)
_open_scopes = 0
_scope_lock = threading.Lock()


class _Generation:
    """``Config.generation`` while some thread is in an ``x64_scope``: the global count, paired with the
    scope's setting in a thread that is in one, so that a cache entry made under one thread's 64-bit setting
    never serves another's. A non-data descriptor: while no scope is open anywhere, the instance's own
    ``generation`` attribute (the plain count) shadows it, and the hot paths that compare it (jit's, eager
    operations') read an attribute, not a property (a property costs them ~3% of a small eager op)."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        x64 = _scoped.x64
        return obj._generation if x64 is None else (obj._generation, x64)


class Config:
    """``fnarray.config``: the run-time settings, each also read from an environment variable at import.

    - ``fallback``: ``"warn"`` (default; unsupported equations run on the numpy
      backend with a ``FallbackWarning``), ``"error"`` (raise
      ``UnsupportedOnDevice``) or ``"silent"``. Env: ``FNARRAY_FALLBACK``.
    - ``default_device``: a device string, or ``None`` to pick one. Env: ``FNARRAY_DEVICE``.
    - ``compilation_cache_dir``: a folder for the persistent compilation cache (OpenCL program binaries,
      JAX's XLA executables; ``fnarray.devices.compile_cache``), or ``None`` (default): off. On PoCL the
      binaries are written at exit.
      Env: ``FNARRAY_CACHE_DIR``.
    - ``debug_nans`` / ``debug_infs``: when a jitted call or an eager op produces a NaN (an inf) in a
      floating output, raise ``FloatingPointError`` naming the first primitive that made it and the
      user's source line (a jitted call is re-run op by op to find it; ``fnarray.devices.nan_check``).
      Off by default; when off the call path is unchanged. Env: ``FNARRAY_DEBUG_NANS=1``,
      ``FNARRAY_DEBUG_INFS=1``.
    - ``enable_x64``: keep 64-bit dtypes (``float64``, ``int64``, ``uint64``, ``complex128``). Off by default,
      as ``jax_enable_x64``: 64-bit inputs (NumPy arrays and scalars, ``dtype=float64`` requests, ``astype``)
      become their 32-bit counterparts where they enter (``asarray``, creation functions, ``device_put``,
      ``jit`` arguments), with JAX's ``UserWarning`` where a 64-bit dtype was explicitly requested
      (``fnarray.core.dtypes``). Part of the jit cache key. Env: ``FNARRAY_ENABLE_X64=1``.
    - ``autotune``: how the opencl and webgpu kernels' tunable choices (work per item, vector width, dot tiles,
      a transcendental's form) are picked (``fnarray.lowering.kernels.tuning``): ``"off"`` (the hand-tuned
      defaults, nothing timed), ``"fast"`` (default: a choice cached for this device is reused, else a few
      candidates ranked by a cost model where one is known are timed, else the default) or ``"full"`` (every
      candidate timed on the device, the fastest kept). Choices are cached per device and driver, in
      ``compilation_cache_dir`` too when it is set. A change applies to programs lowered afterwards (not part
      of the jit cache key: a function already compiled keeps its kernels).
      Env: ``FNARRAY_AUTOTUNE``.

    - ``stage_eager_transforms``: an eager ``jacfwd``/``jacrev``/``hessian`` call on concrete arrays runs a
      cached ``jit`` of the transformed function, keyed by the function's code, closure values, defaults and
      the globals it names, where those are values the rule of ``fnarray.transforms.staged_transforms`` keys
      (immutable values, arrays, functions, modules); the function's Python (its side effects) then runs once
      per key and avals, at the trace, not at every call (docs/design.md, "Staged eager transforms"). Off by
      default. Env: ``FNARRAY_STAGE_EAGER_TRANSFORMS=1``.
    - ``platforms`` (also ``platform_name``): JAX's ``jax_platforms`` / ``jax_platform_name``, the platforms
      (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, ``"metal"``; a comma-separated list, in order of
      preference) the default device may run on, or ``None`` (default): any. It narrows fnarray's own choice
      of default device (``fnarray.devices.placement.default_device``) and never disables a backend:
      ``"cpu"`` keeps a CPU default (numpy:0, or jax:0 where ``XLA_FLAGS`` forces several XLA host devices)
      where fnarray would have picked a GPU. An explicit ``default_device`` wins over it. Env: none (JAX
      scripts set it with ``update``).
    - ``explain_cache_misses``: JAX's ``jax_explain_cache_misses``. When a jitted function is traced again (or
      its trace compiled again), log one WARNING through the ``fnarray.jit`` logger saying why: the function
      (qualified name, file:line) and the call site, then its first call, a signature evicted from a full cache,
      or what differs from the most similar signature traced before (an argument's path such as
      ``args[0]['w']`` with its old and new shape, dtype or weak type; a static value; the structure; the
      device or a setting that changes lowering); ``jit(shapeless=True)`` says why its pattern's trace did not
      serve (``fnarray.transforms.cache_miss``). Off by default; jit's hit path never reads it. Not part of any
      cache key. Env: ``FNARRAY_EXPLAIN_CACHE_MISSES=1``.

    ``update(name, value)`` sets one of these by name, as ``jax.config.update``; JAX's names
    ``"jax_enable_x64"``, ``"jax_debug_nans"``, ``"jax_debug_infs"``, ``"jax_default_device"``,
    ``"jax_platforms"``, ``"jax_platform_name"`` and ``"jax_explain_cache_misses"`` are accepted.

    In-memory cache sizes (every cache is an LRU: the least recently used entry goes first; a change
    applies at the next insert; 0 keeps nothing). As JAX bounds its in-memory executable
    caches, so that a program that calls with ever new shapes runs in bounded memory:

    - ``jit_cache_size``: traced programs, and compiled executables, kept per jitted
      function (each its own LRU). Default 128. Env: ``FNARRAY_JIT_CACHE_SIZE``.
    - ``jit_global_cache_size``: compiled executables kept over all jitted functions
      together; half of it bounds the whole-function programs of eager namespace calls. Default 2048 (a
      decode loop of 40 growing shapes calls ~10 namespace functions a step: 400 programs, which the
      former 512 evicted before the loop came round again). Env: ``FNARRAY_JIT_GLOBAL_CACHE_SIZE``.
    - ``eager_cache_size``: compiled eager operations, one per (primitive, params,
      input types, device). Default 1024. Env: ``FNARRAY_EAGER_CACHE_SIZE``.
    - ``kernel_cache_size``: built OpenCL programs and WebGPU pipelines kept per device
      (keyed by kernel source). Default 1024. Env: ``FNARRAY_KERNEL_CACHE_SIZE``.

    A jitted function's entries die with it: its caches live on the function object, and
    the global LRU only holds weak references.

    A name that is not a setting raises ``AttributeError`` naming the nearest one (``config.debug_nan = True``
    would otherwise be accepted and do nothing); ``config.update(name, value)`` (JAX's spelling) sets one.
    The settings are whatever the class and ``__init__`` define, so a new one needs no list of names.
    """

    def __init__(self):
        self._generation = 0  # bumped by every change, so caches keyed on the configuration can check it
        self.generation = 0   # the same, read by the hot paths (``_Generation``)
        self._fallback = "warn"
        self._default_device = os.environ.get("FNARRAY_DEVICE") or None
        self._platforms = None
        self.fallback = os.environ.get("FNARRAY_FALLBACK", "warn")
        for name, (env, default) in _CACHE_SIZES.items():
            setattr(self, "_" + name, _cache_size(name, os.environ.get(env, default)))
        self._cache_dir = None
        self.compilation_cache_dir = os.environ.get("FNARRAY_CACHE_DIR") or None
        self._debug_nans = _env_flag("FNARRAY_DEBUG_NANS")
        self._debug_infs = _env_flag("FNARRAY_DEBUG_INFS")
        self._enable_x64 = _env_flag("FNARRAY_ENABLE_X64")
        self._autotune = "fast"
        self.autotune = os.environ.get("FNARRAY_AUTOTUNE", "fast")
        self.stage_eager_transforms = _env_flag("FNARRAY_STAGE_EAGER_TRANSFORMS")
        self._explain = _env_flag("FNARRAY_EXPLAIN_CACHE_MISSES")
        self.debug_hook = None  # set by fnarray.devices.nan_check: called when debug_nans/debug_infs change
        self.device_hook = None  # set by fnarray.devices.lookup: called when default_device/platforms change
        self._frozen = True  # from here on, only names defined above (or on the class) may be set

    def settings(self) -> list:
        """The public names that may be set: the class's properties and the attributes ``__init__`` made."""
        names = {n for n in dir(type(self)) if isinstance(getattr(type(self), n, None), property)}
        names |= set(vars(self))
        return sorted(n for n in names if not n.startswith("_") and n not in _INTERNAL)

    def _unknown(self, name):
        near = difflib.get_close_matches(name, self.settings(), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return AttributeError(f"fnarray.config has no setting {name!r}; {hint}the settings are: "
                              f"{', '.join(self.settings())}")

    def __setattr__(self, name, value):
        if (not name.startswith("_") and self.__dict__.get("_frozen") and name not in vars(self)
                and not hasattr(type(self), name)):
            raise self._unknown(name)
        object.__setattr__(self, name, value)

    def __getattr__(self, name):  # only reached for a name that is not defined
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._unknown(name)

    def update(self, name: str, value):
        """Set the setting ``name`` to ``value``, as ``jax.config.update(name, value)``.

        ``name`` is one of this object's settings (``"enable_x64"``, ``"debug_nans"``, ...) or JAX's name of one
        (``"jax_enable_x64"``: the ``jax_`` prefix is dropped).

        Raises:
          AttributeError: ``name`` is not a setting (the message names the nearest one).
          TypeError: ``name`` is not a string.
        """
        if not isinstance(name, str):
            raise TypeError(f"fnarray.config.update takes a setting's name as a str, got {type(name).__name__}")
        attr = name[4:] if name.startswith("jax_") else name
        if attr.startswith("_") or (attr not in vars(self) and not hasattr(type(self), attr)):
            raise self._unknown(name)
        setattr(self, attr, value)

    @property
    def debug_nans(self) -> bool:
        return self._debug_nans

    @debug_nans.setter
    def debug_nans(self, on):
        self._debug_nans = _flag("debug_nans", on)
        self._debug_changed()

    @property
    def debug_infs(self) -> bool:
        return self._debug_infs

    @debug_infs.setter
    def debug_infs(self, on):
        self._debug_infs = _flag("debug_infs", on)
        self._debug_changed()

    #: the configuration's version, which caches keyed on it compare: bumped by every change of a setting that
    #: changes lowering, a tuple inside an ``x64_scope`` (``_Generation``)
    generation = _Generation()

    def _bump(self):
        with _scope_lock:
            self._generation += 1
            if not _open_scopes:
                object.__setattr__(self, "generation", self._generation)

    @property
    def enable_x64(self) -> bool:
        x64 = _scoped.x64
        return self._enable_x64 if x64 is None else x64

    @enable_x64.setter
    def enable_x64(self, on):
        self._enable_x64 = _flag("enable_x64", on)
        self._bump()

    @property
    def explain_cache_misses(self) -> bool:
        return self._explain

    @explain_cache_misses.setter
    def explain_cache_misses(self, on):
        self._explain = _flag("explain_cache_misses", on)

    def _debug_changed(self):
        self._bump()
        if self.debug_hook is not None:
            self.debug_hook()

    # Cache sizes do not change lowering: setting them bumps no generation.
    jit_cache_size = _size_property("jit_cache_size")
    jit_global_cache_size = _size_property("jit_global_cache_size")
    eager_cache_size = _size_property("eager_cache_size")
    kernel_cache_size = _size_property("kernel_cache_size")

    @property
    def compilation_cache_dir(self):
        return self._cache_dir

    @compilation_cache_dir.setter
    def compilation_cache_dir(self, path):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"fnarray.config.compilation_cache_dir is a folder path or None, got {type(path).__name__}")
        self._cache_dir = None if path is None else os.path.abspath(os.path.expanduser(os.fspath(path)))

    @property
    def autotune(self) -> str:
        return self._autotune

    @autotune.setter
    def autotune(self, mode: str):
        if isinstance(mode, str) and mode.strip().lower() in _AUTOTUNE_MODES:
            mode = mode.strip().lower()
        if mode not in _AUTOTUNE_MODES:
            raise ValueError(f"fnarray.config.autotune (env FNARRAY_AUTOTUNE) must be one of {_AUTOTUNE_MODES}: "
                             f"'off' (the default kernel choices), 'fast' (cached or cost-model choices) or 'full' "
                             f"(time every candidate on the device); got {mode!r}")
        # Not part of ``lowering_key``: a change applies to programs lowered afterwards, and a function compiled
        # with tuned kernels keeps them (switching to "off" after tuning does not recompile everything).
        self._autotune = mode

    @property
    def default_device(self):
        return self._default_device

    @default_device.setter
    def default_device(self, device):
        self._default_device = device
        self._bump()
        if self.device_hook is not None:
            self.device_hook()

    @property
    def platforms(self):
        """The platforms the default device may run on (a tuple of JAX's names), or ``None`` for any."""
        return self._platforms

    @platforms.setter
    def platforms(self, value):
        if value is None or value == "":
            names = None
        else:
            if isinstance(value, (tuple, list)) and all(isinstance(n, str) for n in value):
                value = ",".join(value)   # (what reading the setting returns)
            if not isinstance(value, str):
                raise TypeError(f"fnarray.config.platforms takes a comma-separated str of platform names (JAX's "
                                f"jax_platforms), got {type(value).__name__}")
            names = tuple(n.strip().lower() for n in value.split(",") if n.strip())
            bad = [n for n in names if n not in _PLATFORMS]
            if bad or not names:
                raise ValueError(f"fnarray.config.platforms: unknown platform {bad[0] if bad else value!r}; JAX's "
                                 f"platform names are {', '.join(_PLATFORMS)}")
        self._platforms = names
        self._bump()
        if self.device_hook is not None:
            self.device_hook()

    # JAX's jax_platform_name names one platform; here it is the same setting as jax_platforms
    platform_name = platforms

    @property
    def fallback(self) -> str:
        return self._fallback

    @fallback.setter
    def fallback(self, mode: str):
        if mode not in _FALLBACK_MODES:
            raise ValueError(f"fnarray.config.fallback must be one of {_FALLBACK_MODES}, got {mode!r}")
        self._fallback = mode
        self._bump()

    def lowering_key(self) -> tuple:
        """The part of the configuration that changes lowering (a jit cache key component)."""
        return (self._fallback, self._debug_nans, self._debug_infs, self.enable_x64)

    def __repr__(self):
        sizes = ", ".join(f"{n}={getattr(self, n)}" for n in _CACHE_SIZES)
        return f"Config(fallback={self.fallback!r}, default_device={self.default_device!r}, {sizes})"


config = Config()


@contextlib.contextmanager
def x64_scope(on: bool = True):
    """Within the ``with`` block, in this thread only, ``config.enable_x64`` reads ``on`` (as JAX's
    ``jax.experimental.enable_x64`` / ``disable_x64`` context managers); other threads, and this one after the
    block, see the global setting. Scopes nest; the global ``config.enable_x64 = ...`` is unchanged by them.

    Args:
      on: ``True`` keeps 64-bit dtypes in the block, ``False`` narrows them to 32-bit.
    Raises:
      TypeError: ``on`` is not a bool (or NumPy bool).
    """
    if not isinstance(on, bool) and type(on).__name__ != "bool_":   # (NumPy's bool, without importing NumPy)
        raise TypeError(f"x64_scope(on) takes a bool (True: 64-bit dtypes in the block), got {type(on).__name__}")
    global _open_scopes
    with _scope_lock:
        _open_scopes += 1
        config.__dict__.pop("generation", None)   # the descriptor answers while a scope is open
    previous = _scoped.x64
    _scoped.x64 = bool(on)
    try:
        yield
    finally:
        _scoped.x64 = previous
        with _scope_lock:
            _open_scopes -= 1
            if not _open_scopes:
                object.__setattr__(config, "generation", config._generation)
