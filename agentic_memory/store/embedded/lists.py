"""Inverted lists over a large partition's PCA projections: the coarse pass's candidates.

Above ``vectors.IVF_ROWS`` rows, scanning every row's projection is what a vector search
costs (256 MB per query at a million rows). The projections are clustered by k-means
(centroids chosen with the PCA axes from the same sample, kept in the file beside them), each
row belongs to the list of its nearest centroid, and a query scans only the lists nearest to
it, the way an IVF index, or Weaviate's HNSW, trades a little recall for speed.

A row's list is a function of its projection and the stored centroids alone, computed
exactly (integers below 2**24 in float32, see ``InvertedLists.label``): a row labelled
alone, or by another process, or after being rewritten, lands in the list a fresh load puts
it in, so a cache updated in place probes the same rows a fresh load does. Nothing but the
centroids is stored: the lists are rebuilt from the projections when a partition is loaded.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, Growing, IntArray
from agentic_memory.store.ranking import sorted_unique

LIST_ROWS = 2048
"""Rows per list (at most ``MAX_LISTS``) when the centroids are chosen."""
MAX_LISTS = 256
"""At most this many lists: the sample of 8,192 rows gives each centroid about 32 rows."""
MIN_LISTS = 16
PROBE_ROWS = 24_576
"""A query scans the nearest lists until they hold about this many rows it may return."""

_SCALE = 2048.0
"""Projections and centroids are labelled in fixed point: components times 2**11, rounded.

Both have length at most 1 (a unit vector's components on orthonormal axes, a mean of
those), so every product, partial sum and distance is an integer below 3 * (2**11 + 4)**2 <
2**24: float32 holds each exactly, whatever order BLAS adds in.
"""
_MAGIC = 0x49564631
"""Ends a stored centroids value (a damaged one is taken for none)."""
_ITERATIONS = 12
_LABEL_ROWS = 8192
_REBUILD_SHARE = 16
"""Rows changed since the lists were sorted are kept aside and scanned by every query;
the lists are sorted again once they are a 16th of the rows."""
_REBUILD_FLOOR = 4096


def choose_centroids(projected: FloatArray, rows: int) -> IntArray:
    """Return k-means centroids (fixed point) of a sample's projections, for ``rows`` rows.

    One list per ``LIST_ROWS`` rows, between ``MIN_LISTS`` and ``MAX_LISTS`` (and no more than
    a sample row each); a fixed seed and iteration count, so the choice is reproducible.
    """
    count = int(min(MAX_LISTS, max(MIN_LISTS, rows // LIST_ROWS), projected.shape[0]))
    points = projected.astype(np.float64)
    rng = np.random.default_rng(0)
    centres = points[np.sort(rng.choice(points.shape[0], size=count, replace=False))]
    for _ in range(_ITERATIONS):
        nearest = np.argmin(
            (centres * centres).sum(axis=1)[None, :] - 2 * points @ centres.T, axis=1
        )
        sizes = np.bincount(nearest, minlength=count)
        sums = np.zeros_like(centres)
        np.add.at(sums, nearest, points)
        filled = sizes > 0  # an empty list keeps its centre
        centres[filled] = sums[filled] / sizes[filled, None]
    fixed: IntArray = np.rint(centres * _SCALE).astype(np.int64)
    return fixed


def label_rows(projected: FloatArray, centroids: IntArray) -> npt.NDArray[np.int32]:
    """Return the nearest centroid of each projected row (ties: the lowest); exact, see above.

    A function of the row and the centroids alone: a block's writer, a load and a cache
    updated in place give a row the same list.
    """
    fixed = centroids.astype(np.float32)
    norms = (fixed * fixed).sum(axis=1, dtype=np.float32)
    out = np.empty(projected.shape[0], dtype=np.int32)
    for start in range(0, projected.shape[0], _LABEL_ROWS):
        chunk = np.rint(projected[start : start + _LABEL_ROWS] * np.float32(_SCALE))
        # Squared distance less the row's own norm (the same for every centroid). Exact
        # either way; a few rows go through numpy's own loop, since waking BLAS threads on
        # shared cores cost tens of milliseconds.
        if chunk.shape[0] >= 1024:
            product = chunk @ fixed.T
        else:
            product = np.einsum("ij,kj->ik", chunk, fixed)
        distance = norms - 2 * product
        out[start : start + _LABEL_ROWS] = np.argmin(distance, axis=1)
    return out


def encode_labels(labels: npt.NDArray[Any]) -> bytes | None:
    """Return rows' lists as a block keeps them (one byte each), None if one would not fit."""
    if labels.size and int(labels.max()) > 255:
        return None
    return np.ascontiguousarray(labels, dtype=np.uint8).tobytes()


def decode_labels(blob: bytes | None, rows: int) -> npt.NDArray[np.uint8] | None:
    """Return a block's rows' lists, None if it keeps none (or not those rows')."""
    if blob is None or len(blob) != rows:
        return None
    return np.frombuffer(blob, dtype=np.uint8)


def encode_centroids(centroids: IntArray) -> bytes:
    """Return centroids as stored (``amem_axes.centroids``): values, count, width, a marker."""
    count, width = centroids.shape
    return (
        centroids.astype("<i4").tobytes()
        + np.asarray([count, width, _MAGIC], dtype="<i4").tobytes()
    )


def decode_centroids(blob: bytes) -> IntArray | None:
    """Return stored centroids, None when the value is not such (a damaged file)."""
    if len(blob) < 12:
        return None
    count, width, magic = np.frombuffer(blob[-12:], dtype="<i4").tolist()
    if magic != _MAGIC or count <= 0 or width <= 0 or 4 * count * width + 12 != len(blob):
        return None
    centroids = np.frombuffer(blob[:-12], dtype="<i4").astype(np.int64)
    return centroids.reshape(count, width)


class InvertedLists:
    """Which list each slot is in, and each list's slots and projections, side by side.

    ``labels`` is kept current by every append and update. As of the last sort, ``order``
    holds the slots sorted by list and ``rows`` their projections in that order, so that a
    probe reads each list it scans as one contiguous run (a gather of scattered rows cost a
    cache miss per row). Slots changed since wait in ``_changed`` (read from the projections
    by every probe that scans their list) and their old place in ``order`` is marked stale,
    until they are a 16th of the rows: then the lists are sorted again.
    """

    def __init__(
        self, centroids: IntArray, projected: Growing, labels: npt.NDArray[Any] | None = None
    ) -> None:
        """Label every row of ``projected`` (rows, axes) and sort the slots into lists.

        ``labels``: those rows' lists, already made (read from the file).
        """
        self.centroids = centroids
        self._unit_centroids: FloatArray64 = centroids.astype(np.float64) / _SCALE
        self._projected = projected
        if labels is None:
            labels = self.label(projected.view)
        self._labels = Growing(labels.astype(np.int32))
        self._changed: list[IntArray] = []
        self._changed_rows = 0
        self.order = np.zeros(0, dtype=np.int64)
        self.rows: FloatArray = np.zeros((0, centroids.shape[1]), dtype=np.float32)
        self._current = np.zeros(0, dtype=bool)
        self._place = np.zeros(0, dtype=np.int64)
        self.starts = np.zeros(centroids.shape[0] + 1, dtype=np.int64)
        self._sort()

    @property
    def labels(self) -> npt.NDArray[np.int32]:
        """Return each slot's list."""
        return self._labels.view

    def label(self, projected: FloatArray) -> npt.NDArray[np.int32]:
        """Return the nearest centroid of each projected row (ties: the lowest)."""
        return label_rows(projected, self.centroids)

    def _sort(self) -> None:
        labels = self.labels
        self.order = np.argsort(labels, kind="stable").astype(np.int64)
        self.rows = self._projected.view[self.order]
        self._current = np.ones(self.order.size, dtype=bool)
        self._place = np.empty(self.order.size, dtype=np.int64)
        self._place[self.order] = np.arange(self.order.size)
        self.starts = np.concatenate(
            ([0], np.cumsum(np.bincount(labels, minlength=self.centroids.shape[0])))
        ).astype(np.int64)
        self._changed = []
        self._changed_rows = 0

    def append(self, projected: FloatArray) -> None:
        """Label rows added at the end (their projections already appended)."""
        first = self.labels.shape[0]
        self._labels.append(self.label(projected))
        self._note(np.arange(first, first + projected.shape[0], dtype=np.int64))

    def update(self, slots: IntArray, projected: FloatArray) -> None:
        """Label rows whose vectors changed (their projections already replaced)."""
        self._labels.view[slots] = self.label(projected)
        self._note(slots.astype(np.int64))

    def _note(self, slots: IntArray) -> None:
        sorted_ = slots[slots < self._place.size]
        self._current[self._place[sorted_]] = False
        self._changed.append(slots)
        self._changed_rows += int(slots.size)

    def probe(
        self, query: FloatArray, allowed: npt.NDArray[np.bool_] | None, share: float, live: int
    ) -> tuple[IntArray, FloatArray]:
        """Return the allowed slots of the lists nearest ``query`` and their coarse scores.

        ``query`` is the query's projection; each slot comes with its projection's dot product
        with ``query``, in no set order (the caller's choice of rows must not depend on it).
        The nearest lists are taken, as many as hold ``PROBE_ROWS`` allowed rows on average:
        ``share`` is the fraction of the ``live`` rows ``allowed`` lets through (1 without a
        filter).
        """
        if self._changed_rows > max(_REBUILD_FLOOR, self.labels.shape[0] // _REBUILD_SHARE):
            self._sort()
        centres = self._unit_centroids
        q = query.astype(np.float64)
        # numpy's own loop: a BLAS matrix-vector product stalls on shared cores.
        closeness = np.einsum("ij,j->i", centres, q)
        nearest = np.argsort((centres * centres).sum(axis=1) - 2 * closeness, kind="stable")
        # As many lists as hold PROBE_ROWS allowed rows on average: a count of the live rows
        # alone, which a cache updated in place and a fresh load agree on (the sizes of the
        # lists as last sorted would differ).
        count = self.centroids.shape[0]
        taken = math.ceil(PROBE_ROWS * count / max(share * live, 1.0))
        chosen = np.sort(nearest[: min(count, taken)])
        slots: list[IntArray] = []
        scores: list[FloatArray] = []
        for lst in chosen.tolist():
            a, b = int(self.starts[lst]), int(self.starts[lst + 1])
            if a == b:
                continue
            keep = self._current[a:b]
            segment = self.order[a:b]
            if allowed is not None:
                keep = keep & allowed[segment]
            # Scored as a run, then masked: masking the rows first would copy them.
            slots.append(segment[keep])
            scores.append(np.einsum("ij,j->i", self.rows[a:b], query)[keep])
        if self._changed:
            picked = np.zeros(self.centroids.shape[0], dtype=bool)
            picked[chosen] = True
            changed = sorted_unique(np.concatenate(self._changed))
            changed = changed[picked[self.labels[changed]]]
            if allowed is not None:
                changed = changed[allowed[changed]]
            slots.append(changed)
            scores.append(np.einsum("ij,j->i", self._projected.view[changed], query))
        if not slots:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return np.concatenate(slots), np.concatenate(scores)
