"""A least-recently-used cache keyed by text, bounded in entries and in the text it holds.

``functools.lru_cache`` bounds only the number of entries: keyed by whole messages, 16,384
of them can hold hundreds of megabytes (one pasted document per entry), and a long-running
process grew turn after turn until they were full. This cache also bounds the characters of
its keys, which bounds the values too when they grow no faster than their keys (a count, the
set of a text's words).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class TextCache(Generic[V]):
    """Values computed from texts, the least recently used dropped past either bound.

    A text longer than ``max_chars`` is computed every time and never kept. Safe to share
    between threads (the graph's nodes call into it from worker threads).
    """

    def __init__(self, compute: Callable[[str], V], *, max_entries: int, max_chars: int) -> None:
        """Cache ``compute`` for up to ``max_entries`` texts of ``max_chars`` characters in all.

        Raises:
            ValueError: a bound is not positive.
        """
        if max_entries < 1 or max_chars < 1:
            raise ValueError("a TextCache needs positive bounds")
        self._compute = compute
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: collections.OrderedDict[str, V] = collections.OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> V:
        """Return ``compute(text)``, from the cache when it holds it."""
        with self._lock:
            if text in self._entries:
                self._entries.move_to_end(text)
                return self._entries[text]
        value = self._compute(text)
        if len(text) > self.max_chars:
            return value
        with self._lock:
            if text not in self._entries:
                self._entries[text] = value
                self._chars += len(text)
                while len(self._entries) > self.max_entries or self._chars > self.max_chars:
                    dropped, _ = self._entries.popitem(last=False)
                    self._chars -= len(dropped)
        return value

    def __len__(self) -> int:
        """Return the number of texts held."""
        return len(self._entries)

    @property
    def chars(self) -> int:
        """Return the characters of the texts held."""
        return self._chars

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._chars = 0
