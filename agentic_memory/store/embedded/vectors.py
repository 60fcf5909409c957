"""Vector search: cosine top-k over unit vectors, with a PCA shortlist on large partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, Growing, IntArray
from agentic_memory.store.ranking import top_rows

if TYPE_CHECKING:
    from agentic_memory.store.embedded.cache import _Partition

EXACT_VECTOR_ROWS = 20_000
"""Up to this many rows a vector search scores every row; above, it runs in two passes."""
COARSE_DIMS = 64
COARSE_RERANK = 20
COARSE_MIN_SHORTLIST = 2000
"""The coarse pass keeps ``COARSE_RERANK * candidates`` rows (at least ``COARSE_MIN_SHORTLIST``)
for exact cosine."""


_SAMPLE = 8192
_FIXED = 2.0**15
"""Unit vectors and axes are projected in fixed point: components times 2**15, rounded."""


class _CoarseIndex:
    """A PCA projection of a large partition's unit vectors, for a first, cheaper pass.

    Its result depends only on the partition's rows, never on how the cache got them, so a
    cache extended in place shortlists exactly what a fresh load does:

    - The axes come from a sample of the first ``span`` rows, ``span`` the largest power of
      two not above the row count. Rows added later do not change them until the partition
      doubles (then the index is rebuilt); a deletion drops the index.
    - Rows are projected in fixed point (components and axes scaled by 2**15 and rounded):
      every product and partial sum is an integer below 2**53, so the float64 matrix product
      is exact whatever order BLAS adds in, and a row projected alone gets the same bits as
      in a batch.
    """

    def __init__(self, unit: FloatArray) -> None:
        """Choose the axes from a sample of ``unit`` and project every row."""
        self.span = _span(unit.shape[0])
        rng = np.random.default_rng(0)
        sample = unit[np.sort(rng.choice(self.span, size=min(self.span, _SAMPLE), replace=False))]
        centred = sample.astype(np.float64) - sample.mean(axis=0, dtype=np.float64)
        # The covariance's eigenvectors are the principal axes; a dims x dims eigenproblem
        # costs milliseconds where the sample's SVD took up to seconds on a loaded machine.
        _, vectors = np.linalg.eigh(centred.T @ centred)
        axes = vectors[:, ::-1][:, :COARSE_DIMS].T
        self.fixed: FloatArray64 = np.rint(axes * _FIXED)
        self.basis: FloatArray = (self.fixed / _FIXED).astype(np.float32)
        """(axes, dims): the leading principal axes, as the rows are projected on them."""
        self.projected = Growing(_project(unit, self.fixed))
        """(rows, axes): the unit vectors on those axes."""

    def fits(self, rows: int) -> bool:
        """Return whether a fresh load of ``rows`` rows would choose these axes."""
        return _span(rows) == self.span

    def append(self, unit: FloatArray) -> None:
        """Project rows added at the end."""
        self.projected.append(_project(unit, self.fixed))


def _span(rows: int) -> int:
    return 1 << (rows.bit_length() - 1) if rows else 0


def _project(unit: FloatArray, fixed: FloatArray64) -> FloatArray:
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


def _cosine_top(
    part: _Partition,
    vector: list[float],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
    *,
    exact: bool = False,
) -> tuple[IntArray, FloatArray]:
    """Rank the partition by cosine similarity; return the candidate rows and their cosines.

    Large partitions are first ranked on a PCA projection (a quarter of the memory traffic)
    and only the best ``COARSE_RERANK * candidates`` rows get an exact cosine, the way an ANN
    index such as Weaviate's HNSW trades a little recall for speed. ``exact`` forces the full
    scan (the benchmark uses it to measure that recall).
    """
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm > 0:
        query = query / norm
    pool = np.flatnonzero(allowed) if allowed is not None else np.arange(part.rowids.size)
    shortlist = max(COARSE_RERANK * candidates, COARSE_MIN_SHORTLIST)
    if not exact and part.rowids.size > EXACT_VECTOR_ROWS and pool.size > shortlist:
        if part.coarse is None or not part.coarse.fits(part.rowids.size):
            part.coarse = _CoarseIndex(part.unit)
        coarse = part.coarse
        # Uncentred: the mean's contribution is the same for every row, so it cannot change
        # the order.
        approx = np.einsum(
            "ij,j->i", coarse.projected.view, np.einsum("ij,j->i", coarse.basis, query)
        )
        pool = np.sort(pool[np.argpartition(-approx[pool], shortlist - 1)[:shortlist]])
        sims = np.einsum("ij,j->i", part.unit[pool], query)
    else:
        # einsum runs numpy's own single-threaded loop: a multi-threaded BLAS matvec stalls
        # for tens of milliseconds when other processes share the cores.
        sims = np.einsum("ij,j->i", part.unit[pool] if allowed is not None else part.unit, query)
    # The server ranks by the float32 cosine distance 1 - dot (ties: lowest docID) and
    # reports 1 - distance as the raw vector score.
    distance = np.float32(1) - sims
    keep = top_rows(distance, np.arange(pool.size), candidates, smallest=True)
    return pool[keep], np.float32(1) - distance[keep]
