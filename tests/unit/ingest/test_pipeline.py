"""Ingestion into a real embedded store: search with pages, idempotence, replacement."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from agentic_memory.graph import prompting
from agentic_memory.ingest import IngestEvent, ingest_paths, ingest_uploads
from agentic_memory.ingest.inputs import Upload
from agentic_memory.kinds.knowledge import (
    KnowledgeHit,
    UnknownSourceError,
    adelete_source,
    alist_knowledge_bases,
    alist_sources,
    asearch_knowledge,
    delete_source,
    drop_knowledge_base,
    knowledge_collection,
    list_chunks,
    list_knowledge_bases,
    list_sources,
    manifest_collection,
    search_knowledge,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.sync_edge import run_sync
from tests.unit.ingest.conftest import KNOWN, report_pages
from tests.unit.ingest.pdfs import write_pdf
from tests.unit.store.conftest import count_extensions

CHUNKS = knowledge_collection("docs").name


def _ingest(paths: object, store: EmbeddedStore, embeddings: LocalEmbeddings, **kw: object):  # type: ignore[no-untyped-def]
    return ingest_paths(paths, kb="docs", store=store, embeddings=embeddings, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("page", sorted(KNOWN))
def test_search_finds_known_sentence_on_its_page(
    page: int, report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    report = _ingest([report_pdf], store, embeddings, chunk_size=400, chunk_overlap=50)
    assert report.ok and report.pages == 4

    hits = search_knowledge(store, embeddings, "docs", KNOWN[page], k=3)

    top = hits[0]
    assert KNOWN[page] in top.text
    assert top.page_start <= page <= top.page_end
    assert top.title == "Annual Field Report"
    assert top.source == str(report_pdf.resolve())
    assert top.citation in (
        f"[report.pdf p.{page}]",
        f"[report.pdf p.{top.page_start}-{top.page_end}]",
    )


def test_chunks_keep_offsets_pages_and_file_hash(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _ingest([report_pdf], store, embeddings, chunk_size=300, chunk_overlap=60)
    chunks = list_chunks(store, "docs", str(report_pdf.resolve()))
    assert [c.properties["chunk_index"] for c in chunks] == list(range(len(chunks)))
    import hashlib

    sha = hashlib.sha256(report_pdf.read_bytes()).hexdigest()
    for c in chunks:
        p = c.properties
        assert p["sha256"] == sha
        assert p["char_end"] - p["char_start"] == len(p["text"])
        assert 1 <= p["page_start"] <= p["page_end"] <= 4
    assert {c.properties["page_start"] for c in chunks} == {1, 2, 3, 4}


def test_reingesting_unchanged_file_writes_nothing(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    first = _ingest([report_pdf], store, embeddings)
    count = store.count(CHUNKS)
    ids = {o.id for o in store.list_objects(CHUNKS, limit=1000)}

    again = _ingest([report_pdf], store, embeddings)

    assert first.chunks_written == count > 0
    assert again.files[0].status == "unchanged"
    assert (again.chunks_written, again.chunks_unchanged, again.chunks_removed) == (0, count, 0)
    assert store.count(CHUNKS) == count
    assert {o.id for o in store.list_objects(CHUNKS, limit=1000)} == ids


def test_changed_file_replaces_its_chunks(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _ingest([report_pdf], store, embeddings, chunk_size=400, chunk_overlap=50)
    old_count = store.count(CHUNKS)
    changed = dict(KNOWN)
    changed[2] = "Doctor Verbena catalogued the indigo comet in twenty twenty."
    write_pdf(report_pdf, report_pages(changed)[:3], title="Annual Field Report v2")

    report = _ingest([report_pdf], store, embeddings, chunk_size=400, chunk_overlap=50)

    new_count = report.chunks_written
    assert report.files[0].status == "written"
    assert report.chunks_removed == old_count
    assert store.count(CHUNKS) == new_count
    (source,) = list_sources(store, "docs")
    assert (source.pages, source.chunks, source.title) == (3, new_count, "Annual Field Report v2")
    texts = " ".join(
        h.text for h in search_knowledge(store, embeddings, "docs", "nebula Quillon", k=10)
    )
    assert "saffron nebula" not in texts
    assert "Marigold" not in " ".join(
        c.properties["text"] for c in store.list_objects(CHUNKS, limit=1000)
    )
    hit = search_knowledge(store, embeddings, "docs", "indigo comet Verbena", k=1)[0]
    assert "indigo comet" in hit.text and hit.page_start <= 2 <= hit.page_end


def test_new_splitter_settings_replace_the_chunks(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    big = _ingest([report_pdf], store, embeddings, chunk_size=1200, chunk_overlap=0)
    small = _ingest([report_pdf], store, embeddings, chunk_size=300, chunk_overlap=0)
    assert small.files[0].status == "written"
    assert small.chunks_removed == big.chunks_written
    assert store.count(CHUNKS) == small.chunks_written > big.chunks_written


def test_searches_during_a_replacement_see_old_or_new_never_a_mix(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _ingest([report_pdf], store, embeddings, chunk_size=300, chunk_overlap=0)
    old_ids = {c.id for c in list_chunks(store, "docs", str(report_pdf.resolve()))}
    write_pdf(report_pdf, report_pages()[::-1], title="Reversed")
    seen: dict[str, set[str]] = {}

    def probe(event: IngestEvent) -> None:
        if event.kind in ("chunks_progress", "chunks_written", "committed", "old_removed"):
            hits = search_knowledge(store, embeddings, "docs", "turbine nebula aqueduct", k=100)
            seen[f"{event.kind}:{event.chunks_done}"] = {h.chunk_id for h in hits}

    report = _ingest(
        [report_pdf],
        store,
        embeddings,
        chunk_size=300,
        chunk_overlap=0,
        batch_size=3,
        progress=probe,
    )
    new_ids = {c.id for c in list_chunks(store, "docs", str(report_pdf.resolve()))}
    assert report.chunks_written > 3 and not old_ids & new_ids
    for step, ids in seen.items():
        if step.startswith(("chunks_progress", "chunks_written")):
            assert ids == old_ids, step
        elif step.startswith("committed"):
            # Committed but the generation not yet renewed: a search may still use the
            # manifest it cached, whose (complete) old chunks are all still there.
            assert ids in (old_ids, new_ids), step
        else:
            assert ids == new_ids, step
    assert "old_removed:0" in seen


def test_same_content_at_two_paths_are_two_sources(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    a = docs / "a.md"
    a.write_text("# Copy\n\nThe heron nests by the mill pond.")
    b = docs / "sub" / "b.md"
    b.parent.mkdir()
    b.write_text(a.read_text())
    _ingest([docs], store, embeddings)
    assert [Path(s.source).name for s in list_sources(store, "docs")] == ["a.md", "b.md"]
    assert store.count(CHUNKS) == 2

    assert delete_source(store, "docs", b) == 1
    (hit,) = search_knowledge(store, embeddings, "docs", "heron mill pond", k=5)
    assert hit.source == str(a.resolve())


def test_globs_and_recursive_directories(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "deep" / "er").mkdir(parents=True)
    (docs / "deep" / "er" / "one.md").write_text("Deep file one.")
    (docs / "deep" / "two.txt").write_text("Deep file two.")
    (docs / ".hidden").mkdir()
    (docs / ".hidden" / "three.md").write_text("Hidden file.")
    report = _ingest([str(docs / "**" / "*.md"), docs / "deep"], store, embeddings)
    names = sorted(Path(f.path).name for f in report.files)
    assert names == ["one.md", "two.txt"]  # one.md matched twice, ingested once


def test_delete_source_and_list_knowledge_bases(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _ingest([report_pdf], store, embeddings)
    ingest_paths([report_pdf], kb="other_Base", store=store, embeddings=embeddings)
    assert list_knowledge_bases(store) == ["docs", "other_Base"]

    removed = delete_source(store, "docs", str(report_pdf))
    assert removed > 0 and store.count(CHUNKS) == 0
    assert list_sources(store, "docs") == []
    assert search_knowledge(store, embeddings, "docs", KNOWN[1]) == []
    with pytest.raises(UnknownSourceError, match="has no source"):
        delete_source(store, "docs", report_pdf)
    with pytest.raises(UnknownSourceError, match="does not exist"):
        delete_source(store, "nothing", report_pdf)

    drop_knowledge_base(store, "other_Base")
    assert list_knowledge_bases(store) == ["docs"]


def test_missing_knowledge_base_or_blank_query_gives_no_hits(
    store: EmbeddedStore, embeddings: LocalEmbeddings, report_pdf: Path
) -> None:
    assert search_knowledge(store, embeddings, "never_made", "anything") == []
    _ingest([report_pdf], store, embeddings)
    assert search_knowledge(store, embeddings, "docs", "   ") == []
    with pytest.raises(InvalidInputError):
        search_knowledge(store, embeddings, "bad name!", "anything")
    with pytest.raises(InvalidInputError):
        search_knowledge(store, embeddings, "docs", "x", k=0)


def test_many_sources_use_the_post_filter_path(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        (docs / f"n{i}.md").write_text(f"Note {i}: the lighthouse keeper counted {i} gulls.")
    _ingest([docs], store, embeddings)
    filtered = search_knowledge(store, embeddings, "docs", "lighthouse keeper gulls", k=4)
    monkeypatch.setattr("agentic_memory.kinds.knowledge.search.IN_FILTER_MAX_REVISIONS", 2)
    post = search_knowledge(store, embeddings, "docs", "lighthouse keeper gulls", k=4)
    assert [h.chunk_id for h in post] == [h.chunk_id for h in filtered]
    assert len(post) == 4


def test_invalid_arguments_change_nothing(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    for kwargs, message in [
        ({"kb": "no spaces"}, "knowledge base name"),
        ({"chunk_size": 10}, "at least 50"),
        ({"chunk_size": 100, "chunk_overlap": 100}, "smaller than"),
        ({"batch_size": 0}, "batch size"),
    ]:
        args = {"kb": "docs", **kwargs}
        with pytest.raises(InvalidInputError, match=message):
            ingest_paths([report_pdf], store=store, embeddings=embeddings, **args)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="no paths"):
        ingest_paths([], store=store, embeddings=embeddings)
    # The options travel as keywords: a misspelt one is named, with the function called.
    with pytest.raises(
        TypeError, match=r"aingest_paths\(\) got an unexpected keyword argument 'kbb'"
    ):
        ingest_paths([report_pdf], store=store, embeddings=embeddings, kbb="docs")  # type: ignore[call-arg]
    upload = Upload("a.txt", b"some text")
    with pytest.raises(
        TypeError, match=r"aingest_uploads\(\) got an unexpected keyword argument 'prune'"
    ):
        ingest_uploads([upload], store=store, embeddings=embeddings, prune=True)  # type: ignore[call-arg]
    assert store.collections() == []


def test_citation_formats() -> None:
    def hit(source: str, a: int, b: int) -> KnowledgeHit:
        return KnowledgeHit("id", "t", source, "T", a, b, 1.0)

    assert hit("/x/report.pdf", 3, 3).citation == "[report.pdf p.3]"
    assert hit("/x/report.pdf", 3, 4).citation == "[report.pdf p.3-4]"
    assert hit("/x/notes.md", 1, 1).citation == "[notes.md p.1]"
    assert hit("/x/log.txt", 2, 2).citation == "[log.txt p.2]"
    # The graph labels its passages with the very same string (one format everywhere).
    chunk = {"source": "/x/report.pdf", "page_start": 3, "page_end": 4}
    assert prompting.citation_of(chunk) == hit("/x/report.pdf", 3, 4).citation


async def test_the_async_knowledge_functions(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    await asyncio.to_thread(_ingest, [report_pdf], store, embeddings)  # storage: off the loop
    hits = await asearch_knowledge(store, embeddings, "docs", KNOWN[3], k=1)
    assert KNOWN[3] in hits[0].text
    assert await alist_knowledge_bases(store) == ["docs"]
    assert len(await alist_sources(store, "docs")) == 1
    assert await adelete_source(store, "docs", report_pdf) > 0
    assert await store.acount(manifest_collection("docs").name) == 1  # the generation marker


class _StopHere(Exception):
    pass


def test_search_retries_when_old_chunks_are_deleted_under_it(
    report_pdf: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentic_memory.kinds.knowledge import aremove_stale_chunks, get_source

    _ingest([report_pdf], store, embeddings, chunk_size=300, chunk_overlap=0)
    old_ids = {h.chunk_id for h in search_knowledge(store, embeddings, "docs", "turbine", k=100)}
    write_pdf(report_pdf, report_pages()[:2], title="Shorter")

    def stop(event: IngestEvent) -> None:
        if event.kind == "committed":
            raise _StopHere

    with pytest.raises(_StopHere):
        _ingest([report_pdf], store, embeddings, chunk_size=300, chunk_overlap=0, progress=stop)
    source = str(report_pdf.resolve())
    active = get_source(store, "docs", source)
    assert active is not None
    calls: list[int] = []
    real_hybrid = store.hybrid

    def racing_hybrid(collection: str, **kwargs: object):  # type: ignore[no-untyped-def]
        hits = real_hybrid(collection, **kwargs)  # type: ignore[arg-type]
        if not calls:
            # Another process finishes the replacement while this search is running.
            run_sync(aremove_stale_chunks(store, "docs", source, active.revision), instead=None)
        calls.append(len(hits))
        return hits

    monkeypatch.setattr(store, "hybrid", racing_hybrid)
    hits = search_knowledge(store, embeddings, "docs", "turbine", k=100)

    new_ids = {c.id for c in list_chunks(store, "docs", source)}
    assert len(calls) == 2
    assert {h.chunk_id for h in hits} == new_ids
    assert not new_ids & old_ids


def test_post_filter_skips_uncommitted_chunks_that_rank_first(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agentic_memory.kinds.knowledge.search.IN_FILTER_MAX_REVISIONS", 0)
    notes = docs / "notes.md"
    notes.write_text("\n\n".join(f"Old paragraph {i} about sparrows." for i in range(3)))
    _ingest([notes], store, embeddings, chunk_size=60, chunk_overlap=0)
    old_ids = {c.id for c in list_chunks(store, "docs", str(notes.resolve()))}
    # The uncommitted new version matches the query far better than the old one.
    notes.write_text("\n\n".join(f"Kingfisher kingfisher note {i}." for i in range(40)))

    def stop(event: IngestEvent) -> None:
        if event.kind == "chunks_written":
            raise _StopHere

    with pytest.raises(_StopHere):
        _ingest([notes], store, embeddings, chunk_size=60, chunk_overlap=0, progress=stop)
    assert store.count(CHUNKS) == 43

    hits = search_knowledge(store, embeddings, "docs", "kingfisher kingfisher", k=3)
    assert {h.chunk_id for h in hits} == old_ids


def test_new_and_changed_files_update_the_cached_index_in_place(
    report_pdf: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A long-lived process (a server) has the knowledge base cached; another ingestion adds a
    # file. Its next search extends the cached partition, finds the new file, and ranks
    # exactly as a process that loads everything afresh.
    assert _ingest([report_pdf], store, embeddings).ok
    search_knowledge(store, embeddings, "docs", KNOWN[1], k=3)
    extended = count_extensions(monkeypatch)
    note = tmp_path / "note.md"
    note.write_text("# Field note\n\nThe heron colony moved to the northern marsh in spring.\n")
    other = EmbeddedStore(store.path, dims=store.dims)
    assert _ingest([note], other, embeddings).ok
    other.close()

    def same_as_a_fresh_process(query: str) -> list[KnowledgeHit]:
        hits = search_knowledge(store, embeddings, "docs", query, k=3)
        fresh = EmbeddedStore(store.path, dims=store.dims)
        again = search_knowledge(fresh, embeddings, "docs", query, k=3)
        fresh.close()
        assert [(h.text, h.score) for h in hits] == [(h.text, h.score) for h in again]
        return hits

    hits = same_as_a_fresh_process("heron colony northern marsh")
    assert extended == [1]
    assert "heron colony" in hits[0].text

    # Changing the file replaces its chunks: new ones added, old ones deleted. The cache is
    # still updated in place (the deleted chunks are not the newest rows).
    note.write_text("# Field note\n\nThe heron colony returned to the southern lagoon in autumn.\n")
    other = EmbeddedStore(store.path, dims=store.dims)
    report = _ingest([note], other, embeddings)
    other.close()
    assert report.chunks_written == 1 and report.chunks_removed == 1
    hits = same_as_a_fresh_process("heron colony southern lagoon")
    assert extended == [1, 1]
    assert "southern lagoon" in hits[0].text
    assert not any("northern marsh" in h.text for h in hits)


def test_every_hit_carries_its_cosine_similarity_and_the_floor_drops_the_rest(
    report_pdf: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    assert _ingest([report_pdf], store, embeddings, chunk_size=400, chunk_overlap=50).ok
    query = KNOWN[2]
    vector = np.asarray(embeddings.embed_query(query))
    for alpha in (0.0, 0.5, 1.0):
        # With alpha 0 the search has no vector side: the similarity is read back.
        hits = search_knowledge(store, embeddings, "docs", query, k=4, alpha=alpha)
        assert hits
        for hit in hits:
            stored = store.get(CHUNKS, hit.chunk_id, include_vector=True)
            assert stored is not None and stored.vector is not None
            expected = float(vector @ np.asarray(stored.vector))
            assert hit.similarity == pytest.approx(expected, abs=1e-4)
    everything = search_knowledge(store, embeddings, "docs", query, k=10)
    floor = sorted(h.similarity for h in everything)[len(everything) // 2]
    kept = search_knowledge(store, embeddings, "docs", query, k=10, min_similarity=floor)
    assert kept == [h for h in everything if h.similarity >= floor] and len(kept) < len(everything)
    for bad in (1.5, -2, "0.3", True):
        with pytest.raises(InvalidInputError, match="min_similarity"):
            search_knowledge(store, embeddings, "docs", query, min_similarity=bad)  # type: ignore[arg-type]
