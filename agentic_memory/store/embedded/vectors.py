"""Vector search: cosine top-k over unit vectors, with a PCA shortlist on large partitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, IntArray
from agentic_memory.store.ranking import top_rows

if TYPE_CHECKING:
    from agentic_memory.store.embedded.cache import _Partition

EXACT_VECTOR_ROWS = 20_000
"""Up to this many rows a vector search scores every row; above, it runs in two passes."""
COARSE_DIMS = 64
COARSE_RERANK = 20
"""The coarse pass keeps ``COARSE_RERANK * candidates`` rows (at least 2000) for exact cosine."""


@dataclass
class _CoarseIndex:
    """A PCA projection of a large partition's unit vectors, for a first, cheaper pass."""

    mean: FloatArray
    basis: FloatArray
    """(COARSE_DIMS, dims): the leading principal axes."""
    projected: FloatArray
    """(rows, COARSE_DIMS): the centred unit vectors on those axes."""


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
    shortlist = max(COARSE_RERANK * candidates, 2000)
    if not exact and part.rowids.size > EXACT_VECTOR_ROWS and pool.size > shortlist:
        if part.coarse is None:
            part.coarse = _coarse_index(part.unit)
        coarse = part.coarse
        # The mean's contribution is the same for every row, so it cannot change the order.
        approx = np.einsum("ij,j->i", coarse.projected, np.einsum("ij,j->i", coarse.basis, query))
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


def _coarse_index(unit: FloatArray) -> _CoarseIndex:
    rng = np.random.default_rng(0)
    sample = unit[rng.choice(unit.shape[0], size=min(unit.shape[0], 8192), replace=False)]
    mean = sample.mean(axis=0)
    _, _, vt = np.linalg.svd(sample - mean, full_matrices=False)
    basis = np.ascontiguousarray(vt[:COARSE_DIMS], dtype=np.float32)
    projected = np.ascontiguousarray((unit - mean) @ basis.T, dtype=np.float32)
    return _CoarseIndex(mean=mean.astype(np.float32), basis=basis, projected=projected)
