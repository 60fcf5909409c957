"""Array types shared by the embedded store's modules."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
FloatArray64 = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
NO_HITS: tuple[IntArray, FloatArray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


class Growing:
    """An array that grows along its first axis in place, with spare room at the end.

    ``view`` is a view of the filled rows; appending writes into the spare room (reallocating,
    with room to spare again, when it runs out), so adding k rows to n costs O(k), not O(n).
    """

    HEADROOM = 0.125

    def __init__(self, data: npt.NDArray[Any]) -> None:
        """Hold a copy of ``data`` with spare room for about an eighth more rows."""
        self._size = data.shape[0]
        self._buffer = np.empty(
            (self._size + max(256, int(self._size * self.HEADROOM)), *data.shape[1:]),
            dtype=data.dtype,
        )
        self._buffer[: self._size] = data

    @classmethod
    def unfilled(
        cls, rows: int, shape: tuple[int, ...], dtype: npt.DTypeLike, *, scattered: bool = False
    ) -> Growing:
        """Return ``rows`` rows of uninitialised data, with the usual spare room.

        The caller fills ``view``: a large array is then written once, where building it and
        passing it to the constructor copied it. ``scattered``: the rows are written a few at
        a time, anywhere, so the memory is mapped in small pages: numpy asks for huge pages
        (2 MB, each zeroed whole at its first write), and a few thousand rows written across
        a gigabyte then cost as much as writing all of it.
        """
        out = cls.__new__(cls)
        out._size = rows
        full = (rows + max(256, int(rows * cls.HEADROOM)), *shape)
        if scattered:
            items = int(np.prod(full))
            kind = np.dtype(dtype)
            memory = mmap.mmap(-1, max(1, items * kind.itemsize))
            advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
            if advice is not None:
                memory.madvise(advice)
            out._buffer = np.frombuffer(memory, dtype=kind, count=items).reshape(full)
        else:
            out._buffer = np.empty(full, dtype=dtype)
        return out

    @property
    def view(self) -> npt.NDArray[Any]:
        """Return the filled rows (a view: valid until the next append or keep)."""
        return self._buffer[: self._size]

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` more rows (and an eighth more), so appending them copies nothing."""
        end = self._size + rows
        if end > self._buffer.shape[0]:
            self._resize(end + max(256, int(end * self.HEADROOM)))

    def _resize(self, capacity: int) -> None:
        grown = np.empty((capacity, *self._buffer.shape[1:]), dtype=self._buffer.dtype)
        grown[: self._size] = self._buffer[: self._size]
        self._buffer = grown

    def append(self, more: npt.NDArray[Any]) -> None:
        """Add rows at the end."""
        end = self._size + more.shape[0]
        if end > self._buffer.shape[0]:
            self._resize(end + max(256, int(end * 0.5)))
        self._buffer[self._size : end] = more
        self._size = end

    def keep(self, mask: npt.NDArray[np.bool_]) -> None:
        """Keep only the rows where ``mask`` is true, in order."""
        kept = self._buffer[: self._size][mask]
        self._buffer[: kept.shape[0]] = kept
        self._size = kept.shape[0]
