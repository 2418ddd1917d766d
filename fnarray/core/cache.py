"""Bounded, thread-safe caches (``LRUCache``), as JAX bounds its in-memory executable caches.

Every cache of fnarray that grows with what users call (jit traces and executables, eager
operations, kernel programs and pipelines) is an ``LRUCache`` whose size is read from
``fnarray.config`` (docs/design.md, "State and memory").

A lookup is one GIL-atomic ``OrderedDict`` operation pair (``get``, ``move_to_end``) and takes
no lock, so the call path stays fast and several threads may look up at once; an insert takes
the cache's lock, keeps the first value inserted for a key (two threads that missed together
share one compiled value) and evicts the least recently used entries beyond the size. Values
are built *outside* the lock: building runs user code (tracing) that may use the same cache.
"""

from __future__ import annotations

import collections
import threading

__all__ = ["LRUCache", "used_since"]


class LRUCache:
    """A mapping of at most ``maxsize()`` entries, least recently used evicted first.

    Args:
      maxsize: a callable returning the bound (read at every insert, so a change of
        ``fnarray.config`` applies at the next insert), or an int.
      on_evict: called as ``on_evict(key, value)`` for every evicted entry, outside the lock.
      second_chance: for caches whose hits do not call ``get`` (re-hashing a large key costs more
        than the hit): ``second_chance(value)`` is asked before evicting an entry; when it returns
        true (the value was used since it last came up, and the callable clears that mark) the entry
        moves to the most recent end instead (the CLOCK approximation of LRU).
    """

    __slots__ = ("_d", "_lock", "_maxsize", "_on_evict", "_second_chance", "__weakref__")

    def __init__(self, maxsize, on_evict=None, second_chance=None):
        self._d: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._maxsize = maxsize if callable(maxsize) else (lambda n=int(maxsize): n)
        self._on_evict = on_evict
        self._second_chance = second_chance

    @property
    def maxsize(self) -> int:
        return self._maxsize()

    def get(self, key, default=None):
        """The value of ``key`` (marked most recently used), else ``default``."""
        d = self._d
        v = d.get(key, default)
        if v is not default:
            try:
                d.move_to_end(key)
            except KeyError:  # evicted by another thread between the two calls
                pass
        return v

    def peek(self, key, default=None):
        """The value of ``key`` without changing the LRU order."""
        return self._d.get(key, default)

    def touch(self, key) -> None:
        """Mark ``key`` most recently used, if present."""
        try:
            self._d.move_to_end(key)
        except KeyError:
            pass

    def put(self, key, value):
        """Insert ``value`` unless ``key`` is present; returns the value now cached for ``key``.

        Evicts least recently used entries so that at most ``maxsize`` remain (0: nothing is kept).
        """
        evicted = []
        with self._lock:
            d = self._d
            old = d.get(key)
            if old is not None:
                d.move_to_end(key)
                return old
            limit = self._maxsize()
            if len(d) < limit:  # room already (most inserts): no eviction pass
                d[key] = value
                return value
            limit = max(0, limit)
            self._evict(d, limit - 1, evicted)  # first make room: the length never exceeds the bound
            if limit:
                d[key] = value
        if evicted and self._on_evict is not None:
            for k, v in evicted:
                self._on_evict(k, v)
        return value

    def set(self, key, value) -> None:
        """Insert or replace ``key``'s value (most recently used), evicting beyond ``maxsize``."""
        evicted = []
        with self._lock:
            d = self._d
            old = d.pop(key, None)
            limit = max(0, self._maxsize())
            self._evict(d, limit - 1, evicted)
            if limit:
                d[key] = value
        if self._on_evict is not None:
            for k, v in evicted:
                self._on_evict(k, v)
        del old  # a replaced value is dropped outside the lock (its finalizers may use other caches)

    def _evict(self, d, limit, evicted):
        """Pop least recently used entries into ``evicted`` until ``limit`` remain (lock held)."""
        chances = len(d) if self._second_chance is not None else 0
        while d and len(d) > limit:
            k, v = d.popitem(last=False)
            if chances > 0 and self._second_chance(v):
                chances -= 1
                d[k] = v
                continue
            evicted.append((k, v))

    def pop(self, key, default=None):
        """Remove ``key`` (no ``on_evict`` call); returns its value or ``default``."""
        with self._lock:
            return self._d.pop(key, default)

    def clear(self) -> None:
        """Remove every entry, each passed to ``on_evict`` as an eviction is."""
        with self._lock:
            old = list(self._d.items())  # the mapping object stays: callers may hold ``_d``
            self._d.clear()
        if self._on_evict is not None:
            for k, v in old:
                self._on_evict(k, v)
        del old  # values are dropped outside the lock (their finalizers may use other caches)

    def trim(self) -> None:
        """Evict down to the current ``maxsize`` (after the configuration shrank it)."""
        evicted = []
        with self._lock:
            d = self._d
            self._evict(d, max(0, self._maxsize()), evicted)
        if self._on_evict is not None:
            for k, v in evicted:
                self._on_evict(k, v)

    def keys(self) -> list:
        """The keys, least recently used first (a snapshot)."""
        with self._lock:
            return list(self._d)

    def values(self) -> list:
        with self._lock:
            return list(self._d.values())

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    def __repr__(self):
        return f"LRUCache({len(self._d)}/{self._maxsize()} entries)"


def used_since(value) -> bool:
    """A ``second_chance`` for values with a ``used`` mark that their hits set: whether ``value`` was used since
    the cache last came to it (the mark is cleared)."""
    used, value.used = value.used, False
    return used
