"""The synthetic knowledge base the large-partition benches share, and the systems they drive.

Documents are knowledge-base chunks (``knowledge_collection``) of words sampled by frequency
from the English words of the Python standard library's source; each bench draws its texts
and vectors from its own seeds. ``Embedded`` is the embedded store of whichever checkout the
process imports, ``Lance`` LanceDB 0.40 (the ``bench`` dependency group) with a full-text
index on ``text``, hybrid search with its default RRF reranker and filters as pre-filters;
``Weaviate`` the ``WeaviateStore`` on one node of the pinned server
(``agentic_memory.store.weaviate.launcher``), started on the folder's data by the process.
Imported by ``partition_growth_bench.py`` and ``scale_bench.py`` (run from ``bench/``, or
with ``bench/`` on ``sys.path``).
"""

from __future__ import annotations

import collections
import re
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np

DIMS = 256


def vocabulary() -> tuple[list[str], np.ndarray]:
    """Return the 6,000 most common words of the standard library's source and their shares."""
    counts: collections.Counter[str] = collections.Counter()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        counts.update(
            re.findall(r"\b[a-z]{3,12}\b", path.read_text(encoding="utf-8", errors="ignore"))
        )
    words, freq = zip(*counts.most_common(6000), strict=True)
    p = np.asarray(freq, dtype=np.float64)
    return list(words), p / p.sum()


def properties(i: int, text: str) -> dict[str, Any]:
    """Return the knowledge-chunk properties of document ``i``.

    With its ``search_text`` (the stems keyword search reads), as the knowledge base writes it.
    """
    from agentic_memory.kinds.recall_text import chunk_search_text

    return {
        "text": text,
        "search_text": chunk_search_text(text, title=f"document {i // 100}"),
        "title": f"document {i // 100}",
        "source": f"/data/library/file-{i // 100:05d}.txt",
        "sha256": f"{i // 100:064x}",
        "page_start": 1 + (i % 100) // 10,
        "page_end": 1 + (i % 100) // 10,
        "chunk_index": i % 100,
        "char_start": (i % 100) * 600,
        "char_end": (i % 100) * 600 + 600,
        "revision": f"rev-{i // 100}",
    }


def query_near(rng: np.random.Generator, text: str, vector: np.ndarray) -> tuple[str, list[float]]:
    """Return a query for a document: 2-6 of its words in a row and a vector near its own."""
    words = text.split()
    k = int(rng.integers(2, 7))
    at = int(rng.integers(0, len(words) - k))
    near = vector + 0.5 * rng.standard_normal(DIMS).astype(np.float32)
    return " ".join(words[at : at + k]), near.tolist()


class Embedded:
    """The embedded store of whichever checkout this process imports."""

    name = "embedded"

    def __init__(self, folder: Path) -> None:
        """Open (or create) the store in ``folder``."""
        from agentic_memory.kinds.knowledge import knowledge_collection
        from agentic_memory.store import MemoryStore
        from agentic_memory.store.embedded import EmbeddedStore

        self.folder = folder
        self.spec = knowledge_collection("bench")
        self.store: MemoryStore = EmbeddedStore(folder, dims=DIMS)
        self.store.ensure_collection(self.spec)

    def write(
        self,
        ids: list[int],
        texts: list[str],
        vectors: np.ndarray,
        props: list[dict[str, Any]] | None = None,
    ) -> None:
        """Upsert documents (new or existing ids); ``props``: their properties, if made."""
        from agentic_memory.store import MemoryObject, make_id

        if props is None:
            props = [properties(i, t) for i, t in zip(ids, texts, strict=True)]
        self.store.upsert(
            self.spec.name,
            [
                MemoryObject(make_id("doc", str(i)), p, v.tolist())
                for i, p, v in zip(ids, props, vectors, strict=True)
            ],
        )

    def finish(self) -> None:
        """Nothing to build after the writes."""

    def search(self, text: str, vector: list[float], filtered: bool) -> list[str]:
        """Return the ids of a hybrid search's hits (``filtered``: ``chunk_index < 50``)."""
        from agentic_memory.kinds.recall_text import keyword_query
        from agentic_memory.store import Where

        where = [Where("chunk_index", "lt", 50)] if filtered else []
        # The query prepared as the knowledge base's search prepares it (stems).
        hits = self.store.hybrid(
            self.spec.name,
            query=keyword_query(text),
            vector=vector,
            alpha=0.5,
            limit=10,
            where=where,
        )
        return [h.id for h in hits]

    def doc_id(self, i: int) -> str:
        """Return the id document ``i`` is stored under."""
        from agentic_memory.store import make_id

        return make_id("doc", str(i))

    def vector_recall(self, vectors: list[list[float]]) -> dict[str, float]:
        """Return how much of the exact scan's vector candidates the search keeps.

        ``recall_10``: the share of the exact top 10 by cosine among the search's top 10;
        ``recall_candidates``: of the exact candidates a hybrid search takes, the share
        kept. The bench looks inside the store on purpose: recall is not in the API.
        """
        from agentic_memory.store.embedded import EmbeddedStore, _cosine_top
        from agentic_memory.store.ranking import vector_candidates

        store = self.store
        assert isinstance(store, EmbeddedStore)
        with store._read() as conn:
            part = store._cache.partition(conn, self.spec, None)
            part.rows()  # every vector read in this snapshot (a cold load reads none)
        ten, kept = [], []
        wanted = vector_candidates(10)
        for v in vectors:
            fast_rows, fast_sims = _cosine_top(part, v, part.alive(), wanted)
            exact_rows, exact_sims = _cosine_top(part, v, part.alive(), wanted, exact=True)
            top = set(fast_rows[np.argsort(-fast_sims, kind="stable")[:10]].tolist())
            best = set(exact_rows[np.argsort(-exact_sims, kind="stable")[:10]].tolist())
            ten.append(len(top & best) / len(best))
            kept.append(len(set(fast_rows.tolist()) & set(exact_rows.tolist())) / exact_rows.size)
        return {"recall_10": float(np.mean(ten)), "recall_candidates": float(np.mean(kept))}

    def size(self) -> int:
        """Close the store and return its file size in bytes."""
        self.store.close()
        return sum(f.stat().st_size for f in self.folder.glob("store.sqlite3*"))


class Weaviate(Embedded):
    """The ``WeaviateStore`` on one node of the pinned server, its data in ``folder/data``.

    Opening starts the node (on the folder's data, if any) and waits until it is ready, so a
    fresh process's first search includes the server's start. The store's calls are the
    embedded store's (``Embedded``): the same requests, the same ranking rules.
    """

    name = "weaviate"

    def __init__(self, folder: Path) -> None:
        """Start the node on ``folder/data`` and open the store on it."""
        from agentic_memory.kinds.knowledge import knowledge_collection
        from agentic_memory.store.weaviate import WeaviateStore
        from agentic_memory.store.weaviate.launcher import Node

        self.folder = folder
        self.spec = knowledge_collection("bench")
        self.node = Node(folder / "data").start()
        self.store = WeaviateStore.connect(
            DIMS, url=self.node.url, grpc_port=self.node.ports.grpc, coordinator="local"
        )
        self.store.ensure_collection(self.spec)

    def server_mb(self) -> tuple[float, float]:
        """Return the server process's resident memory now and at its peak, in MB."""
        status = Path(f"/proc/{self.node.pid}/status").read_text()
        kb = {
            line.split(":")[0]: int(line.split()[1])
            for line in status.splitlines()
            if line.startswith(("VmRSS", "VmHWM"))
        }
        return kb["VmRSS"] / 1e3, kb["VmHWM"] / 1e3

    def close(self) -> None:
        """Close the store and stop the node (SIGTERM: it flushes its memtables)."""
        self.store.close()
        self.node.stop()

    def size(self) -> int:
        """Stop the node and return the bytes of its data folder."""
        self.close()
        return sum(f.stat().st_size for f in (self.folder / "data").rglob("*") if f.is_file())


class Lance:
    """LanceDB with a full-text index; ``vector_index``: also an ``IVF_HNSW_SQ`` index.

    Without the vector index its vector search is an exact scan. Writes append, or, once the
    caller sets ``finished``, rewrite existing ids in place (merge on ``id``).
    """

    name = "lancedb"

    def __init__(self, folder: Path, *, vector_index: bool = False) -> None:
        """Connect to the database in ``folder`` (opening its table if there is one)."""
        import lancedb

        self.folder = folder
        self.vector_index = vector_index
        self.finished = False
        self.db = lancedb.connect(str(folder))
        self.table: Any = self.db.open_table("bench") if "bench" in self.db.table_names() else None

    def _rows(
        self,
        ids: list[int],
        texts: list[str],
        vectors: np.ndarray,
        props: list[dict[str, Any]] | None = None,
    ) -> Any:
        import pyarrow as pa  # type: ignore[import-untyped]

        if props is None:
            props = [properties(i, t) for i, t in zip(ids, texts, strict=True)]
        columns: dict[str, list[Any]] = collections.defaultdict(list)
        for i, given in zip(ids, props, strict=True):
            columns["id"].append(str(i))
            for key, value in given.items():
                if key != "search_text":  # LanceDB's full-text index reads ``text``
                    columns[key].append(value)
        table = {k: pa.array(v) for k, v in columns.items()}
        table["vector"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMS)
        return pa.table(table)

    def write(
        self,
        ids: list[int],
        texts: list[str],
        vectors: np.ndarray,
        props: list[dict[str, Any]] | None = None,
    ) -> None:
        """Add documents, or (once ``finished``) rewrite existing ones in place."""
        batch = self._rows(ids, texts, vectors, props)
        if self.table is None:
            self.table = self.db.create_table("bench", data=batch)
        elif self.finished:
            (
                self.table.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(batch)
            )
        else:
            self.table.add(batch)

    def finish(self) -> None:
        """Build the indexes over everything written so far."""
        from lancedb.index import FTS

        self.table.create_index("text", config=FTS())
        if self.vector_index:
            self.table.create_index(
                metric="cosine", vector_column_name="vector", index_type="IVF_HNSW_SQ"
            )

    def search(self, text: str, vector: list[float], filtered: bool) -> list[str]:
        """Return the ids of a hybrid search's hits (RRF)."""
        query = (
            self.table.search(query_type="hybrid", vector_column_name="vector")
            .vector(vector)
            .text(text)
        )
        if filtered:
            query = query.where("chunk_index < 50", prefilter=True)
        return [str(r["id"]) for r in query.limit(10).to_list()]

    def doc_id(self, i: int) -> str:
        """Return the id document ``i`` is stored under."""
        return str(i)

    def size(self) -> int:
        """Return the bytes of the database folder."""
        return sum(f.stat().st_size for f in self.folder.rglob("*") if f.is_file())
