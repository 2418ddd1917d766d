"""The persistent compilation cache: compiled artifacts kept on disk across processes.

Off unless ``fnarray.config.compilation_cache_dir`` (env ``FNARRAY_CACHE_DIR``) names a folder.
What is kept there:

- OpenCL program binaries (``Program.binaries``), rebuilt from the binary in a later process
  instead of compiling the OpenCL C again. On PoCL, which compiles a kernel at its first launch,
  reading the binary makes it compile every kernel once more: there the binary is read at exit,
  after the process's calls (``fnarray/lowering/opencl/backend.py``, ``_DeviceState._build``);
- kernel schedules of the opencl and webgpu backends (the fused kernels, their generated source and
  launch plans, pickled), so a later process neither schedules nor renders them again (the WGSL
  pipelines themselves are created anew: wgpu-py 0.32 has no pipeline cache);
- JAX's own persistent cache (XLA executables), in the ``jax`` subfolder, with JAX's minimum
  compile time and entry size thresholds lowered to zero so that small programs are kept too.

Entries are keyed by a digest of the program's text, the library versions and the device
(``key``). An entry is written to a temporary file in the same folder and renamed into place
(``os.replace``), so concurrent writers never leave a partial entry; each entry carries a SHA-256
of its payload, and an entry that does not match it (truncated, corrupted) is ignored with a
``CacheWarning``, deleted, and rebuilt by the caller. Entries are read with ``pickle`` (schedules):
the folder must be writable only by its user, as any cache of code is. Nothing is evicted: delete the
folder to reclaim its space. Generated numpy-backend code is not kept: generating it costs less
than reading it back (well under a millisecond per program).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import warnings

from fnarray.core.config import config

__all__ = ["cache_dir", "key", "get", "put", "CacheWarning"]

_MAGIC = b"FNACACHE1\n"
_HEADER = struct.Struct("<32sQ")  # sha256 of the payload, payload length


class CacheWarning(UserWarning):
    """A persistent cache entry was unreadable (ignored and rebuilt) or could not be written."""


def cache_dir() -> str | None:
    """The cache folder, or ``None`` when the persistent cache is off."""
    return config.compilation_cache_dir


def key(*parts) -> str:
    """A hex digest of ``parts`` (strings or bytes): the program text, versions, device..."""
    h = hashlib.sha256()
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _path(root, namespace, k):
    return os.path.join(root, namespace, k[:2], k + ".bin")


def get(namespace: str, k: str) -> bytes | None:
    """The payload stored under ``namespace``/``k``, or ``None`` (absent, cache off, or a bad entry)."""
    root = cache_dir()
    if root is None:
        return None
    path = _path(root, namespace, k)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    payload = _unpack(data)
    if payload is None:
        warnings.warn(f"fnarray's compilation cache entry {path} is truncated or corrupted; it is ignored and "
                      "rebuilt", CacheWarning, stacklevel=2)
        try:
            os.remove(path)
        except OSError:
            pass
    return payload


def _unpack(data: bytes) -> bytes | None:
    n = len(_MAGIC) + _HEADER.size
    if len(data) < n or not data.startswith(_MAGIC):
        return None
    digest, length = _HEADER.unpack_from(data, len(_MAGIC))
    payload = data[n:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


_write_failed: set = set()


def put(namespace: str, k: str, payload: bytes) -> None:
    """Store ``payload``: written to a temporary file beside the entry, then renamed over it (atomic)."""
    root = cache_dir()
    if root is None:
        return
    path = _path(root, namespace, k)
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".bin")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + _HEADER.pack(hashlib.sha256(payload).digest(), len(payload)) + payload)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        if root not in _write_failed:
            _write_failed.add(root)
            warnings.warn(f"fnarray could not write its compilation cache in {root}: {e}; compiled programs "
                          "are not kept across processes", CacheWarning, stacklevel=2)
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass


_jax_dir: list = [None]


def configure_jax() -> None:
    """Point JAX's persistent compilation cache at ``<cache dir>/jax`` (or leave it alone when off)."""
    root = cache_dir()
    if root is None or _jax_dir[0] == root:
        return
    import jax
    from jax.experimental.compilation_cache import compilation_cache as jax_cache
    jax.config.update("jax_compilation_cache_dir", os.path.join(root, "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # JAX opens its cache once, at its first compilation: a folder set later needs the cache reopened.
    jax_cache.reset_cache()
    _jax_dir[0] = root
