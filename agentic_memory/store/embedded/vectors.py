"""Vector search: cosine top-k over unit vectors, with a PCA shortlist on large partitions.

Up to ``EXACT_VECTOR_ROWS`` rows every row is scored exactly. Above, a coarse pass ranks the
rows on a 64-axis PCA projection and the best of them get an exact cosine. Above
``IVF_ROWS`` the coarse pass itself covers only the rows of the inverted lists nearest the
query (``lists.py``): k-means centroids of the projections, chosen with the axes and kept
in the file beside them.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded import lists as inverted
from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, Growing, IntArray
from agentic_memory.store.embedded.lists import (
    InvertedLists,
    choose_centroids,
    decode_centroids,
    encode_centroids,
)
from agentic_memory.store.ranking import sorted_unique, top_rows
from agentic_memory.store.types import StoreError

EXACT_VECTOR_ROWS = 20_000
"""Up to this many rows a vector search scores every row; above, it runs in two passes."""
COARSE_DIMS = 64
COARSE_RERANK = 20
COARSE_MIN_SHORTLIST = 2000
"""The coarse pass keeps ``COARSE_RERANK * candidates`` rows (at least ``COARSE_MIN_SHORTLIST``)
for exact cosine."""


IVF_ROWS = 150_000
"""Above this many rows the coarse pass covers the nearest inverted lists only."""

_SAMPLE = 8192
_FIXED = 2.0**15
"""Unit vectors and axes are projected in fixed point: components times 2**15, rounded."""


def unit_rows(blobs: list[bytes], dims: int, out: FloatArray | None = None) -> FloatArray:
    """Return stored float32 vectors scaled to unit length (zero vectors stay zero).

    Written into ``out`` (rows, dims) when given.
    """
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dims)
    return normalise(matrix, out)


def normalise(matrix: FloatArray, out: FloatArray | None = None) -> FloatArray:
    """Return float32 vectors (rows, dims) scaled to unit length (zero vectors stay zero).

    Row by row: a row gets the same bits alone as in any batch. Written into ``out`` when
    given.
    """
    # np.linalg.norm's own arithmetic (float32 squares, pairwise sums): the same bits as before.
    norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1))
    norms[norms == 0] = 1.0
    if out is None:
        out = np.empty(matrix.shape, dtype=np.float32)
    np.divide(matrix, norms[:, None], out=out)
    return out


def decode_vectors(blob: bytes | None, rows: int, dims: int) -> FloatArray | None:
    """Return the (rows, dims) vectors of a block's ``vectors``, None if absent or not those."""
    if blob is None or rows == 0 or len(blob) != 4 * rows * dims:
        return None
    return np.frombuffer(blob, dtype="<f4").reshape(rows, dims)


class PendingUnits:
    """The unit vectors a lazy load left in the file: which slots wait, and where each is kept.

    A cold load of a partition whose blocks all keep their vectors reads none of them: at a
    million rows they are a gigabyte of fresh memory, and first touching it (page faults,
    zeroed pages) was a third to a half of a cold search. A search reads the rows it scores
    (``read``: SQLite's incremental blob reads, in the search's snapshot); after a search a
    thread reads the rest block by block on a read-only connection of its own (``start``),
    if the file is still at the generation the slots were loaded at. Both write the same bits
    into a slot (a row is normalised alone as in any batch). The cache updates a partition in
    place only once nothing waits (``settle``).
    """

    def __init__(self, unit: FloatArray, places: dict[int, tuple[IntArray, IntArray, int]]) -> None:
        """Wait for every slot of ``places`` (per block: its slots, their rows in it, its rows).

        ``unit``: the slots' unit vectors, filled as they are read.
        """
        self._unit = unit
        self._places = places
        self.waiting = np.zeros(unit.shape[0], dtype=bool)
        self._block = np.zeros(unit.shape[0], dtype=np.int64)
        self._row = np.zeros(unit.shape[0], dtype=np.int64)
        for block, (slots, rows, _) in places.items():
            self.waiting[slots] = True
            self._block[slots] = block
            self._row[slots] = rows
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    def read(self, conn: sqlite3.Connection, slots: IntArray | None) -> None:
        """Fill the waiting slots among ``slots`` (all when None) in ``conn``'s snapshot."""
        wanted = np.flatnonzero(self.waiting) if slots is None else slots[self.waiting[slots]]
        if wanted.size == 0:
            return
        wanted = sorted_unique(wanted)
        blocks = self._block[wanted]
        order = np.argsort(blocks, kind="stable")
        wanted = wanted[order]
        dims = self._unit.shape[1]
        for group in np.split(wanted, np.flatnonzero(np.diff(blocks[order])) + 1):
            block = int(self._block[group[0]])
            total = self._places[block][2]
            rows = self._row[group]
            if 8 * group.size >= total:
                # Many of its rows: the block's whole value in one read.
                stored = _block_vectors(conn, block, total, dims)
                if stored is None:
                    raise StoreError("the vectors of a keyword block of the store are damaged")
                picked = stored[rows]
            else:
                with conn.blobopen("amem_blocks", "vectors", block, readonly=True) as blob:
                    if len(blob) != 4 * dims * total:
                        raise StoreError("the vectors of a keyword block of the store are damaged")
                    parts = []
                    for row in rows.tolist():
                        blob.seek(4 * dims * row)
                        parts.append(blob.read(4 * dims))
                picked = np.frombuffer(b"".join(parts), dtype="<f4").reshape(-1, dims)
            self._unit[group] = normalise(picked)
            self.waiting[group] = False

    def start(self, path: Path, token: str, collection: str, scope: str) -> None:
        """Read every slot still waiting in a thread of its own (tried once).

        Once only: after a refusal every search would open a connection again. Its snapshot is taken here, while the caller holds the store's lock: no write of
        this process comes between the partition's generation and the thread's.
        """
        if self._started:
            return
        self._started = True
        try:
            conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
        except sqlite3.Error:
            return
        try:
            conn.execute("BEGIN")
            row = conn.execute(
                "SELECT token FROM amem_generations WHERE collection = ? AND scope = ?",
                (collection, scope),
            ).fetchone()
        except sqlite3.Error:
            row = None
        if row is None or row[0] != token:
            # Another process wrote since: searches read what they score, in their snapshot.
            conn.close()
            return
        self._thread = threading.Thread(
            target=self._read_rest, args=(conn,), name="amem-partition-vectors", daemon=True
        )
        self._thread.start()

    def _read_rest(self, conn: sqlite3.Connection) -> None:
        dims = self._unit.shape[1]
        try:
            for block, (slots, rows, total) in self._places.items():
                if self._stop.is_set():
                    return
                need = self.waiting[slots]
                if not need.any():
                    continue
                stored = _block_vectors(conn, block, total, dims)
                if stored is None:
                    return  # a search reading this block raises the error itself
                self._unit[slots[need]] = normalise(stored[rows[need]])
                self.waiting[slots[need]] = False
        except sqlite3.Error:
            return
        finally:
            conn.close()

    def settle(self) -> bool:
        """Wait for the thread, if one was started; return whether no slot waits."""
        if self._thread is not None:
            self._thread.join()
        return not self.waiting.any()

    def stop(self) -> None:
        """End the thread early: the partition is dropped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _block_vectors(conn: sqlite3.Connection, block: int, rows: int, dims: int) -> FloatArray | None:
    found = conn.execute("SELECT vectors FROM amem_blocks WHERE block = ?", (block,)).fetchone()
    return decode_vectors(found[0] if found else None, rows, dims)


def choose_axes(unit: FloatArray) -> FloatArray64:
    """Return the leading principal axes of a sample of unit vectors, in fixed point.

    The covariance's eigenvectors are the principal axes; a dims x dims eigenproblem costs
    milliseconds where the sample's SVD took up to seconds on a loaded machine.
    """
    centred = unit.astype(np.float64) - unit.mean(axis=0, dtype=np.float64)
    _, vectors = np.linalg.eigh(centred.T @ centred)
    axes = vectors[:, ::-1][:, :COARSE_DIMS].T
    fixed: FloatArray64 = np.rint(axes * _FIXED)
    return fixed


def maintain_axes(
    conn: sqlite3.Connection,
    collection: str,
    scope: str,
    table: str,
    user: str | None,
    rows: int,
    read: Callable[[IntArray], FloatArray],
) -> str | None:
    """Choose a partition's PCA axes when it first exceeds ``EXACT_VECTOR_ROWS``.

    And again each time it has doubled since (inside the write transaction that made it so).

    The axes are kept in the file (``amem_axes``), so every process, and a cache updated in
    place, projects with the same ones whatever rows were replaced or deleted since; they
    come from a sample (``_SAMPLE`` rows, a fixed seed) of the partition's rows then. The
    inverted lists' centroids (``lists.choose_centroids``) come from the same sample and are
    kept beside the axes with the axes' version; axes stored without them (files written
    before the lists existed), or with those of earlier axes, get theirs from the next
    write, without a new version. ``read(rids)`` returns the vectors of rows ``rids``
    (ascending). Returns "axes" when it chose axes (the caller then projects every row on
    them, and lists it), "centroids" when it chose centroids alone (the caller lists every
    row again), else None.
    """
    if rows <= EXACT_VECTOR_ROWS:
        return None
    row = conn.execute(
        "SELECT rows, axes, centroids, centroid_rows FROM amem_axes "
        "WHERE collection = ? AND scope = ?",
        (collection, scope),
    ).fetchone()
    renew = row is None or rows >= 2 * int(row[0])
    if not renew and row[2] is not None and row[3] == row[0]:
        return None
    rids = np.fromiter(
        (
            r[0]
            for r in conn.execute(f"SELECT rid FROM {table} WHERE user IS ? ORDER BY rid", (user,))
        ),
        dtype=np.int64,
    )
    rng = np.random.default_rng(0)
    pick = rids[np.sort(rng.choice(rids.size, size=min(rids.size, _SAMPLE), replace=False))]
    sample = normalise(read(pick))
    dims = sample.shape[1]
    if renew:
        version, fixed = rids.size, choose_axes(sample)
    else:
        version = int(row[0])
        fixed = np.frombuffer(row[1], dtype="<i4").astype(np.float64).reshape(-1, dims)
    centroids = choose_centroids(project(sample, fixed), version)
    conn.execute(
        "INSERT INTO amem_axes (collection, scope, rows, axes, centroids, centroid_rows) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (collection, scope) DO UPDATE SET "
        "rows = excluded.rows, axes = excluded.axes, centroids = excluded.centroids, "
        "centroid_rows = excluded.centroid_rows",
        (
            collection,
            scope,
            version,
            fixed.astype("<i4").tobytes(),
            encode_centroids(centroids),
            version,
        ),
    )
    return "axes" if renew else "centroids"


def load_axes(
    conn: sqlite3.Connection, collection: str, scope: str, dims: int
) -> tuple[int, FloatArray64] | None:
    """Return a partition's axes (the row count they were chosen at, fixed-point axes)."""
    row = conn.execute(
        "SELECT rows, axes FROM amem_axes WHERE collection = ? AND scope = ?", (collection, scope)
    ).fetchone()
    if row is None:
        return None
    fixed = np.frombuffer(row[1], dtype="<i4").astype(np.float64).reshape(-1, dims)
    return int(row[0]), fixed


def load_centroids(conn: sqlite3.Connection, collection: str, scope: str) -> IntArray | None:
    """Return a partition's inverted lists' centroids (fixed point), None if it has none."""
    row = conn.execute(
        "SELECT rows, centroids, centroid_rows FROM amem_axes WHERE collection = ? AND scope = ?",
        (collection, scope),
    ).fetchone()
    # Centroids of earlier axes (a process of layout 5 chose new ones since) are none.
    if row is None or row[1] is None or row[2] != row[0]:
        return None
    return decode_centroids(row[1])


class _CoarseIndex:
    """A PCA projection of a large partition's unit vectors, for a first, cheaper pass.

    Rows are projected in fixed point (components and axes scaled by 2**15 and rounded):
    every product and partial sum is an integer below 2**53, so the float64 matrix product
    is exact whatever order BLAS adds in, and a row projected alone gets the same bits as in
    a batch. With the axes kept in the file, a cache updated in place projects exactly what
    a fresh load does.
    """

    def __init__(
        self,
        unit: FloatArray,
        axes: tuple[int, FloatArray64],
        projected: Growing | None = None,
        centroids: IntArray | None = None,
        labels: npt.NDArray[Any] | None = None,
    ) -> None:
        """Project every row of ``unit`` on ``axes`` (their version, fixed-point axes).

        ``projected``: those projections, already made (read from the file). ``centroids``:
        the partition's inverted lists' centroids, if it has any, and ``labels`` each row's
        list among them, if read from the file (used if the lists are made before any row
        changes).
        """
        self.version, self.fixed = axes
        self.basis: FloatArray = (self.fixed / _FIXED).astype(np.float32)
        """(axes, dims): the leading principal axes, as the rows are projected on them."""
        if projected is None:
            projected = Growing.unfilled(unit.shape[0], (self.fixed.shape[0],), np.float32)
            project(unit, self.fixed, projected.view)
        self.projected = projected
        """(rows, axes): the unit vectors on those axes."""
        self.centroids = centroids
        self._labels = labels
        self._lists: InvertedLists | None = None

    def lists(self) -> InvertedLists | None:
        """Return the inverted lists (sorted on first use), None without centroids."""
        if self._lists is None and self.centroids is not None:
            if self.centroids.shape[1] != self.fixed.shape[0]:
                return None  # centroids of other axes: the next write chooses new ones
            labels = self._labels
            if labels is not None and labels.shape[0] != self.projected.view.shape[0]:
                labels = None
            self._lists = InvertedLists(self.centroids, self.projected, labels)
            self._labels = None
        return self._lists

    def set_centroids(self, centroids: IntArray | None) -> None:
        """Use new centroids (a write gave axes stored without them theirs)."""
        same = (
            centroids is not None
            and self.centroids is not None
            and np.array_equal(centroids, self.centroids)
        )
        if not same:
            self.centroids = centroids
            self._lists = None
            self._labels = None

    def append(self, unit: FloatArray) -> None:
        """Project rows added at the end."""
        added = project(unit, self.fixed)
        self.projected.append(added)
        self._labels = None  # the lists, when made, label every row
        if self._lists is not None:
            self._lists.append(added)

    def update(self, slots: IntArray, unit: FloatArray) -> None:
        """Project rows whose vectors changed."""
        changed = project(unit, self.fixed)
        self._labels = None
        self.projected.view[slots] = changed
        if self._lists is not None:
            self._lists.update(slots, changed)


def project(unit: FloatArray, fixed: FloatArray64, out: FloatArray | None = None) -> FloatArray:
    """Return (into ``out`` if given) unit vectors on fixed-point axes: exact, see ``_CoarseIndex``."""
    if out is None:
        out = np.empty((unit.shape[0], fixed.shape[0]), dtype=np.float32)
    for start in range(0, unit.shape[0], _SAMPLE):
        chunk = np.rint(unit[start : start + _SAMPLE] * np.float32(_FIXED)).astype(np.float64)
        # Exact either way; a few rows go through numpy's own loop, since waking BLAS
        # threads on shared cores cost milliseconds.
        if chunk.shape[0] >= 1024:
            product = chunk @ fixed.T
        else:
            product = np.einsum("ij,kj->ik", chunk, fixed)
        out[start : start + _SAMPLE] = product * (1 / _FIXED**2)
    return out


class VectorPartition(Protocol):
    """What a vector search reads of a cached partition."""

    @property
    def slots(self) -> int:
        """Return the number of slots, dead ones included."""

    def rows(self, slots: IntArray | None = None) -> FloatArray:
        """Return the unit vectors of ``slots`` (every slot's when None)."""

    @property
    def live(self) -> int:
        """Return the number of rows (slots not deleted)."""

    def coarse(self) -> _CoarseIndex | None:
        """Return the PCA projection of the slots, None without axes."""


def _cosine_top(
    part: VectorPartition,
    vector: list[float],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
    *,
    exact: bool = False,
) -> tuple[IntArray, FloatArray]:
    """Rank the partition by cosine similarity; return the candidate slots and their cosines.

    ``allowed`` (None: every slot) must leave out deleted slots. Large partitions are first
    ranked on a PCA projection (a quarter of the memory traffic) and only the best
    ``COARSE_RERANK * candidates`` rows get an exact cosine, the way an ANN index such as
    Weaviate's HNSW trades a little recall for speed; above ``IVF_ROWS`` rows only the rows
    of the inverted lists nearest the query are ranked so (``lists.py``), unless a filter
    leaves fewer than twice as many rows as a probe takes. ``exact`` forces the full scan
    (the benchmarks use it to measure that recall).
    """
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm > 0:
        query = query / norm
    allowed_rows = part.slots if allowed is None else int(np.count_nonzero(allowed))
    shortlist = max(COARSE_RERANK * candidates, COARSE_MIN_SHORTLIST)
    coarse = None
    if not exact and part.live > EXACT_VECTOR_ROWS and allowed_rows > shortlist:
        coarse = part.coarse()
    lists = None
    if coarse is not None and part.live > IVF_ROWS and allowed_rows > 2 * inverted.PROBE_ROWS:
        lists = coarse.lists()
    if coarse is not None and lists is not None:
        # The rows of the lists nearest the query stand in for the partition: a pool sized
        # by PROBE_ROWS (lists.py) whatever the partition holds.
        reduced = np.einsum("ij,j->i", coarse.basis, query)
        pool, approx = lists.probe(reduced, allowed, allowed_rows / part.live, part.live)
        pool = np.sort(_best_coarse(pool, approx, shortlist))
        sims = np.einsum("ij,j->i", part.rows(pool), query)
        distance = np.float32(1) - sims
        keep = top_rows(distance, np.arange(pool.size), candidates, smallest=True)
        return pool[keep], np.float32(1) - distance[keep]
    pool = np.flatnonzero(allowed) if allowed is not None else np.arange(part.slots)
    if coarse is not None:
        # Uncentred: the mean's contribution is the same for every row, so it cannot change
        # the order.
        approx = np.einsum(
            "ij,j->i", coarse.projected.view, np.einsum("ij,j->i", coarse.basis, query)
        )
        pool = np.sort(pool[np.argpartition(-approx[pool], shortlist - 1)[:shortlist]])
        sims = np.einsum("ij,j->i", part.rows(pool), query)
    else:
        # einsum runs numpy's own single-threaded loop: a multi-threaded BLAS matvec stalls
        # for tens of milliseconds when other processes share the cores.
        sims = np.einsum("ij,j->i", part.rows(pool) if allowed is not None else part.rows(), query)
    # The server ranks by the float32 cosine distance 1 - dot (ties: lowest docID) and
    # reports 1 - distance as the raw vector score.
    distance = np.float32(1) - sims
    keep = top_rows(distance, np.arange(pool.size), candidates, smallest=True)
    return pool[keep], np.float32(1) - distance[keep]


def _best_coarse(pool: IntArray, approx: FloatArray, k: int) -> IntArray:
    """Return the ``k`` slots of ``pool`` with the best coarse scores (ties: the lowest slots).

    The choice depends on the set of (slot, score) pairs only, not on their order: a cache
    updated in place lists its rows in another order than a fresh load, and must choose the
    same rows (equal vectors, written twice, tie).
    """
    if pool.size <= k:
        return pool
    kth = np.partition(approx, approx.size - k)[approx.size - k]
    better = pool[approx > kth]
    tied = np.sort(pool[approx == kth])
    return np.concatenate((better, tied[: k - better.size]))
