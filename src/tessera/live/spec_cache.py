"""A bounded cache of decoded job specs: least recently used out, by count and by bytes.

Every round of the scheduling loop, every dashboard poll and every listing reads job rows; a
row's spec is JSON that never changes once stored, so :class:`~tessera.live.store.Store`
decodes each spec once and keeps the result here. Unbounded, that cache held every job ever
read -- a tenant's 300 jobs with a megabyte of ``env`` each kept the service near a gigabyte
after all of them were cancelled (issue 30). Two things bound it now:

* the store caches **lean** specs only: the spec without its ``env`` values (which only a
  launch needs, and which the store reads for that launch alone, uncached), so an entry is at
  most a few kilobytes (the ``command`` and ``checkpoint_dir`` limits of
  :class:`~tessera.live.limits.ApiLimits`);
* this cache drops its least recently used entries once it holds more than ``max_entries``
  specs or more than ``max_bytes`` (each entry charged the length of its JSON plus
  :data:`ENTRY_OVERHEAD_BYTES` for the Python objects around it -- an estimate, on the safe
  side, of what the decoded spec takes).

A spec read again after it was dropped is decoded again (a few microseconds): the bound costs
time only when more jobs are in play than the cache holds. The cache is not thread-safe; the
store uses it under its own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

#: What a cached entry is charged beyond its JSON's length (dataclasses, tuples, dict slot).
ENTRY_OVERHEAD_BYTES = 1024
#: Default bounds: room for every active job of ten full queues' lean specs, and no more than
#: 64 MiB whatever they hold.
DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class SpecCache(Generic[V]):
    """An LRU map from a job id to its decoded spec, bounded by entries and by bytes.

    Args:
        max_entries: most specs kept.
        max_bytes: most bytes kept, each entry charged ``size_bytes + ENTRY_OVERHEAD_BYTES``.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a spec cache needs room for at least one entry and one byte")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    @property
    def size_bytes(self) -> int:
        """Bytes charged to the entries held now (never more than ``max_bytes``)."""
        return self._bytes

    def get(self, key: str) -> V | None:
        """The spec cached under ``key`` (now the most recently used), or ``None``."""
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def put(self, key: str, value: V, size_bytes: int) -> None:
        """Cache ``value`` (its JSON ``size_bytes`` long), then drop the least recently used
        entries until both bounds hold. An entry larger than the whole byte bound is not
        kept at all."""
        cost = size_bytes + ENTRY_OVERHEAD_BYTES
        self.discard(key)
        if cost > self.max_bytes:
            return
        self._items[key] = (value, cost)
        self._bytes += cost
        while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped

    def discard(self, key: str) -> None:
        """Forget ``key`` (a job that was deleted)."""
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old[1]

    def clear(self) -> None:
        self._items.clear()
        self._bytes = 0
