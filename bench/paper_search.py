"""Page-hit@1 and @5 of knowledge search on a real paper, next to plain BM25.

Run: ``python bench/paper_search.py PDF [--minilm] [--out FILE]``

The paper is "Drawing graphs with dot" (Gansner, Koutsofios, North), ``dotguide.pdf`` of the
Debian package ``graphviz-doc`` (EPL-1.0). Nothing is downloaded here; get it with::

    apt-get download graphviz-doc
    dpkg -x graphviz-doc_*.deb graphviz-doc
    gunzip -k graphviz-doc/usr/share/doc/graphviz/pdf/dotguide.pdf.gz

The questions and the pages that answer them are in ``bench/data/dotguide_questions.json``;
each question's evidence phrase is looked for on its page first, so another edition of the
PDF is refused rather than scored. A question is a page hit at k when one of the top k
chunks covers one of its answer pages (``page_start`` to ``page_end``).

Systems, all over the same chunks (the ingestion defaults: 800 characters, overlap 200):

- ``before``: knowledge search as it was before the prepared keyword text: hybrid (alpha 0.5)
  with BM25 over the raw text and title, the raw query (a collection of the earlier schema).
- ``before, keyword side``: the same at alpha 0.
- ``after``: ``search_knowledge`` as it is now: hybrid (alpha 0.5) with BM25 over the prepared
  keyword text (stems without stop words, the title and the section heading).
- ``after, keyword side``: the same at alpha 0.
- ``vector side``: alpha 1 (WordLlama vectors alone).
- ``plain BM25``: textbook Okapi BM25 (k1 1.2, b 0.75) over the chunks' lower-cased words,
  no stemming, no stop words, no title: what any BM25 library gives.
- ``after, MiniLM hybrid`` (with ``--minilm``): ``search_knowledge`` with all-MiniLM-L6-v2.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import platform
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from langchain_core.embeddings import Embeddings

from agentic_memory.ingest import ingest_paths
from agentic_memory.ingest.readers import parse
from agentic_memory.ingest.text import assemble, clean_text, find_headings
from agentic_memory.kinds.knowledge import (
    KNOWLEDGE_PROPERTIES_V1,
    knowledge_collection,
    search_knowledge,
)
from agentic_memory.models.embeddings import (
    EmbeddingSettings,
    LocalEmbeddings,
    embedding_dims,
    get_embeddings,
)
from agentic_memory.store import CollectionSpec, MemoryObject, StoredObject
from agentic_memory.store.embedded import EmbeddedStore

QUESTIONS = Path(__file__).parent / "data" / "dotguide_questions.json"
KB = "paper"
KS = (1, 5)

Ranked = list[tuple[int, int]]
"""A system's answer to one question: the (page_start, page_end) of its top chunks."""


def _norm(text: str) -> str:
    return " ".join(text.split())


def load_questions(pdf: Path) -> list[dict[str, object]]:
    """Return the questions after checking every evidence phrase on its page of ``pdf``."""
    data = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    raw = parse(pdf, pdf.read_bytes())
    pages = [_norm(clean_text(text)) for text in raw.pages]
    questions: list[dict[str, object]] = data["questions"]
    for item in questions:
        first = int(item["pages"][0])  # type: ignore[index]
        if first > len(pages) or _norm(str(item["evidence"])) not in pages[first - 1]:
            sys.exit(
                f"{pdf} is not the edition the questions were written for: page {first} "
                f"lacks {item['evidence']!r}"
            )
    return questions


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def plain_bm25(chunks: Sequence[StoredObject]) -> Callable[[str, int], Ranked]:
    """Return a textbook Okapi BM25 ranker over the chunks' raw words."""
    docs = [collections.Counter(_tokens(str(c.properties["text"]))) for c in chunks]
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(lengths)
    df = collections.Counter(term for d in docs for term in d)
    n = len(docs)
    k1, b = 1.2, 0.75

    def rank(query: str, k: int) -> Ranked:
        terms = set(_tokens(query))
        scores = []
        for i, d in enumerate(docs):
            score = 0.0
            for t in terms:
                if t in d:
                    idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                    tf = d[t]
                    score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / average))
            scores.append((score, i))
        scores.sort(key=lambda pair: (-pair[0], pair[1]))
        return [_pages(chunks[i]) for score, i in scores[:k] if score > 0]

    return rank


def _pages(obj: StoredObject) -> tuple[int, int]:
    return int(obj.properties["page_start"]), int(obj.properties["page_end"])


def _hit(ranked: Ranked, pages: Sequence[int], k: int) -> bool:
    return any(a <= p <= b for a, b in ranked[:k] for p in pages)


def _ingest(pdf: Path, folder: Path, embeddings: Embeddings, dims: int) -> EmbeddedStore:
    store = EmbeddedStore(folder, dims=dims)
    report = ingest_paths([pdf], kb=KB, store=store, embeddings=embeddings)
    if not report.ok:
        sys.exit(f"ingestion failed: {report.failed[0].error}")
    return store


def _before_collection(store: EmbeddedStore) -> str:
    """Copy the chunks into a collection of the earlier schema: BM25 over raw text and title."""
    spec = CollectionSpec(name="Before", properties=KNOWLEDGE_PROPERTIES_V1, per_user=False)
    store.ensure_collection(spec)
    old = {p.name for p in KNOWLEDGE_PROPERTIES_V1}
    objects = [
        MemoryObject(o.id, {k: v for k, v in o.properties.items() if k in old}, o.vector or [])
        for o in store.iterate(knowledge_collection(KB).name, include_vector=True)
    ]
    store.upsert(spec.name, objects).raise_for_failures()
    return spec.name


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print (or write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pdf", type=Path, help="dotguide.pdf (see the module doc)")
    parser.add_argument("--minilm", action="store_true", help="also the MiniLM hybrid")
    parser.add_argument("--out", type=Path, help="append the results to this Markdown file")
    args = parser.parse_args(argv)
    questions = load_questions(args.pdf)
    local = LocalEmbeddings()
    systems: dict[str, Callable[[str, int], Ranked]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = _ingest(args.pdf, Path(tmp) / "wordllama", local, local.dims)
        chunks = sorted(
            store.iterate(knowledge_collection(KB).name),
            key=lambda o: int(o.properties["chunk_index"]),
        )
        before = _before_collection(store)

        def old_search(alpha: float) -> Callable[[str, int], Ranked]:
            def rank(query: str, k: int) -> Ranked:
                vector = local.embed_query(query)
                hits = store.hybrid(before, query=query, vector=vector, alpha=alpha, limit=k)
                return [_pages(StoredObject(h.id, h.properties)) for h in hits]

            return rank

        def new_search(
            on: EmbeddedStore, embeddings: Embeddings, alpha: float
        ) -> Callable[[str, int], Ranked]:
            def rank(query: str, k: int) -> Ranked:
                hits = search_knowledge(on, embeddings, KB, query, k=k, alpha=alpha)
                return [(h.page_start, h.page_end) for h in hits]

            return rank

        systems["before (raw text, hybrid 0.5)"] = old_search(0.5)
        systems["before, keyword side (alpha 0)"] = old_search(0.0)
        systems["after (prepared text, hybrid 0.5)"] = new_search(store, local, 0.5)
        systems["after, keyword side (alpha 0)"] = new_search(store, local, 0.0)
        systems["vector side alone (alpha 1)"] = new_search(store, local, 1.0)
        systems["plain BM25 (Okapi, raw words)"] = plain_bm25(chunks)
        if args.minilm:
            minilm = get_embeddings(EmbeddingSettings(provider="minilm", model="all-MiniLM-L6-v2"))
            dims = embedding_dims(minilm)
            mini_store = _ingest(args.pdf, Path(tmp) / "minilm", minilm, dims)
            systems["after, MiniLM hybrid 0.5"] = new_search(mini_store, minilm, 0.5)
        rows = []
        misses: dict[str, list[str]] = {}
        for name, rank in systems.items():
            hits = {k: 0 for k in KS}
            for item in questions:
                ranked = rank(str(item["question"]), max(KS))
                pages = [int(p) for p in item["pages"]]  # type: ignore[attr-defined]
                for k in KS:
                    hits[k] += _hit(ranked, pages, k)
                if not _hit(ranked, pages, 1):
                    misses.setdefault(name, []).append(str(item["question"]))
            rows.append((name, hits))
        document = assemble(parse(args.pdf, args.pdf.read_bytes()).pages)
        headings = find_headings(document.text)
        sections = sum(bool(c.properties.get("section")) for c in chunks)
        store.close()
    n = len(questions)
    lines = [
        f"## Page-hit on a real paper (`bench/paper_search.py`, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"{args.pdf.name}: {len(document.page_numbers)} pages with text, {len(chunks)} chunks "
        f"(800 / 200), {len(headings)} headings found, {sections} of {len(chunks)} chunks "
        f"under one. {n} held-out questions (`bench/data/dotguide_questions.json`). "
        f"One run; {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}.",
        "",
        "| system | page-hit@1 | page-hit@5 |",
        "|---|---:|---:|",
        *(
            f"| {name} | {h[1]}/{n} ({h[1] / n:.2f}) | {h[5]}/{n} ({h[5] / n:.2f}) |"
            for name, h in rows
        ),
        "",
        "Headings found: " + "; ".join(h for _, h in headings),
        "",
    ]
    for name, missed in misses.items():
        lines.append(f"- missed at 1 by {name}: " + " / ".join(missed))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write("\n" + text)


if __name__ == "__main__":
    main()
