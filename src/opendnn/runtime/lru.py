"""The bounded in-process caches: a least-recently-used map whose bound is read at each
insert, so that a switch in ``opendnn.backends`` (``plan_cache_size``,
``legacy_cache_size``) applies from the next insert on, and a smaller bound drops the
oldest entries then. A bound of 0 keeps nothing.

A cache is shared between threads (a framework's data-parallel workers, the compile
threads): every operation holds the cache's lock. The values a cache hands out are kept
by their users too; dropping an entry only lets it go once they are done with it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable


class LRU:
    """A dict-like map keeping the ``size()`` most recently used entries.

    ``get`` and ``[]`` count as a use; ``in``, ``len`` and iteration do not. Iteration
    (``keys``, ``values``, ``items``, ``for k in cache``) walks a snapshot, oldest first.
    ``on_evict(key, value)``, when given, is called for each entry the bound drops, after
    the cache's lock is released (it may read the cache).
    """

    def __init__(
        self, size: Callable[[], int], on_evict: Callable[[object, object], None] | None = None
    ):
        self._size = size
        self._on_evict = on_evict
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _trim(self, bound: int) -> list:
        """Drop the oldest entries beyond ``bound`` (lock held); returns them."""
        dropped = []
        while len(self._data) > bound:
            dropped.append(self._data.popitem(last=False))
        return dropped

    def _evicted(self, dropped: list) -> None:
        if self._on_evict is not None:
            for key, value in dropped:
                self._on_evict(key, value)

    def get(self, key, default=None):
        with self._lock:
            try:
                value = self._data[key]
            except KeyError:
                return default
            self._data.move_to_end(key)
            return value

    def __getitem__(self, key):
        with self._lock:
            value = self._data[key]
            self._data.move_to_end(key)
            return value

    def __setitem__(self, key, value) -> None:
        bound = max(0, int(self._size()))
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            dropped = self._trim(bound)
        self._evicted(dropped)

    def setdefault(self, key, value):
        """The value kept for ``key``, or ``value`` kept and returned (one lock: two
        threads inserting the same key get the same value)."""
        bound = max(0, int(self._size()))
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            self._data[key] = value
            dropped = self._trim(bound)
        self._evicted(dropped)
        return value

    def pop(self, key, *default):
        with self._lock:
            return self._data.pop(key, *default)

    def __delitem__(self, key) -> None:
        with self._lock:
            del self._data[key]

    def __contains__(self, key) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def keys(self) -> list:
        with self._lock:
            return list(self._data.keys())

    def values(self) -> list:
        with self._lock:
            return list(self._data.values())

    def items(self) -> list:
        with self._lock:
            return list(self._data.items())

    def copy(self) -> dict:
        """A snapshot of the entries, oldest first (a plain dict)."""
        with self._lock:
            return dict(self._data)

    def __iter__(self):
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"LRU({len(self._data)} of {self._size()})"


def plan_cache_size() -> int:
    """``backends.plan_cache_size``, read now."""
    from .. import backends

    return backends.plan_cache_size


def legacy_cache_size() -> int:
    """``backends.legacy_cache_size``, read now."""
    from .. import backends

    return backends.legacy_cache_size
