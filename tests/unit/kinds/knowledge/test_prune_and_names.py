"""Sources whose files are gone are pruned (with what killed runs left); kb names ignore case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_memory.cli.main import app
from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import (
    delete_source,
    drop_knowledge_base,
    find_knowledge_base,
    get_source,
    knowledge_collection,
    list_knowledge_bases,
    list_sources,
    manifest_collection,
    pending_entry_id,
    prune_knowledge_base,
    resolve_kb,
    search_knowledge,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, Where
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.ingest.conftest import KNOWN, report_pages
from tests.unit.ingest.pdfs import write_pdf
from tests.unit.ingest.test_crash import _run_killed

CHUNKS = knowledge_collection("docs").name
MANIFEST = manifest_collection("docs").name
runner = CliRunner()


def _chunks_of(store: EmbeddedStore, source: Path | str) -> int:
    return store.count(CHUNKS, where=[Where("source", "eq", str(source))])


def _ingest(store: EmbeddedStore, embeddings: LocalEmbeddings, *paths: Path, **kw: object) -> None:
    report = ingest_paths(
        list(paths),
        kb="docs",
        store=store,
        embeddings=embeddings,
        chunk_size=300,
        chunk_overlap=0,
        **kw,  # type: ignore[arg-type]
    )
    assert report.ok, report.failed


def test_leftovers_of_a_killed_run_and_deleted_files_are_pruned(
    docs: Path, store_path: Path, embeddings: LocalEmbeddings
) -> None:
    kept = write_pdf(docs / "kept.pdf", ["The heron nests beside the quiet millpond."])
    deleted = write_pdf(docs / "deleted.pdf", ["Obsolete valve torque is ninety newton metres."])
    killed = write_pdf(docs / "killed.pdf", report_pages())
    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        _ingest(store, embeddings, kept, deleted)
    # Killed half-way through writing its chunks: they are stored but never committed.
    _run_killed(store_path, killed, "chunks_progress", 4)
    killed_key = str(killed.resolve())
    renamed = killed.rename(docs / "renamed.pdf")
    deleted_key = str(deleted.resolve())
    deleted.unlink()

    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        assert _chunks_of(store, killed_key) >= 4
        assert store.get(MANIFEST, pending_entry_id(killed_key)) is not None
        # The deleted file is still cited until it is pruned.
        hit = search_knowledge(store, embeddings, "docs", "valve torque newton", k=1)[0]
        assert hit.source == deleted_key

        # Re-ingesting the folder (the renamed file) leaves both behind without --prune.
        _ingest(store, embeddings, docs)
        assert _chunks_of(store, killed_key) >= 4
        assert get_source(store, "docs", deleted_key) is not None

        _ingest(store, embeddings, docs, prune=True)

        assert _chunks_of(store, killed_key) == 0
        assert _chunks_of(store, deleted_key) == 0
        assert store.get(MANIFEST, pending_entry_id(killed_key)) is None
        assert get_source(store, "docs", deleted_key) is None
        assert [Path(s.source).name for s in list_sources(store, "docs")] == [
            "kept.pdf",
            "renamed.pdf",
        ]
        hits = search_knowledge(store, embeddings, "docs", "valve torque newton", k=10)
        assert all(h.source != deleted_key for h in hits)
        # Only the two live sources' chunks remain, and no pending entry.
        remaining = {o.properties["source"] for o in store.list_objects(CHUNKS, limit=1000)}
        assert remaining == {str(kept.resolve()), str(renamed.resolve())}
        assert store.count(MANIFEST, where=[Where("entry", "eq", "pending")]) == 0
        # Nothing left to prune.
        again = prune_knowledge_base(store, "docs")
        assert again.sources == [] and again.chunks == 0


def test_a_completed_or_rerun_ingestion_leaves_no_pending_entry(
    docs: Path, store_path: Path, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "report.pdf", report_pages())
    _run_killed(store_path, pdf, "committed")  # killed after the commit, before the cleanup
    key = str(pdf.resolve())
    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        assert store.get(MANIFEST, pending_entry_id(key)) is not None
        report = ingest_paths(
            [pdf], kb="docs", store=store, embeddings=embeddings, chunk_size=300, chunk_overlap=0
        )
        assert report.files[0].status == "unchanged"
        assert store.get(MANIFEST, pending_entry_id(key)) is None
        # A file that still exists is never pruned, committed or not.
        assert prune_knowledge_base(store, "docs").sources == []
        assert get_source(store, "docs", key) is not None


def test_prune_never_removes_a_source_it_cannot_prove_gone(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "a.pdf", ["Unreachable but not deleted."])
    _ingest(store, embeddings, pdf)
    key = str(pdf.resolve())
    pruned = prune_knowledge_base(store, "docs", gone=lambda source: False)
    assert pruned.sources == [] and get_source(store, "docs", key) is not None
    pruned = prune_knowledge_base(store, "DOCS", gone=lambda source: source == key)
    assert pruned.sources == [key] and pruned.kb == "docs"
    assert get_source(store, "docs", key) is None and _chunks_of(store, key) == 0


def test_cli_prune_alone_and_with_paths(docs: Path, store_path: Path) -> None:
    gone = docs / "gone.txt"
    gone.write_text("A note that will be deleted.")
    stays = docs / "stays.txt"
    stays.write_text("A note that stays.")
    assert runner.invoke(app, ["ingest", str(docs), "-c", "notes"]).exit_code == 0
    gone.unlink()

    result = runner.invoke(app, ["ingest", "--prune", "-c", "Notes", "--json"])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "kb": "notes",
        "sources": [str(gone.resolve())],
        "chunks": 1,
    }
    stays.unlink()
    (docs / "new.txt").write_text("A new note.")
    table = runner.invoke(app, ["ingest", str(docs), "-c", "notes", "--prune"])
    assert table.exit_code == 0, table.output
    assert "Pruned 1 source(s) whose files no longer exist from 'notes'" in table.output
    listed = runner.invoke(app, ["ingest", "--list", "-c", "NOTES", "--json"])
    assert [Path(s["source"]).name for s in json.loads(listed.stdout)] == ["new.txt"]


def test_knowledge_base_names_compare_case_insensitively_everywhere(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    a = write_pdf(docs / "a.pdf", [KNOWN[1]])
    b = write_pdf(docs / "b.pdf", [KNOWN[2]])
    c = write_pdf(docs / "c.pdf", [KNOWN[3]])
    for path, name in ((a, "myDocs"), (b, "mydocs"), (c, "MYDOCS")):
        report = ingest_paths([path], kb=name, store=store, embeddings=embeddings)
        assert report.ok and report.kb == "myDocs"
    # One base, stored once, shown with its first spelling.
    assert sorted(n for n in store.collections() if "ocs" in n) == [
        "KnowledgeSources_MyDocs",
        "Knowledge_MyDocs",
    ]
    assert list_knowledge_bases(store) == ["myDocs"]
    for spelling in ("myDocs", "mydocs", "MYDOCS", "MyDocs"):
        assert resolve_kb(store, spelling) == "myDocs"
        assert find_knowledge_base(store, spelling) == "myDocs"
        assert len(list_sources(store, spelling)) == 3
        hit = search_knowledge(store, embeddings, spelling, "saffron nebula Quillon", k=1)[0]
        assert hit.source == str(b.resolve())
        assert get_source(store, spelling, str(c.resolve())) is not None
    assert find_knowledge_base(store, "other") is None
    assert delete_source(store, "MYDOCS", str(a.resolve())) == 1
    assert len(list_sources(store, "mydocs")) == 2
    drop_knowledge_base(store, "MyDOCS")
    assert list_knowledge_bases(store) == []


def test_several_stored_spellings_are_refused_unless_one_is_given_exactly(
    store: EmbeddedStore, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither SQLite (table names ignore case) nor Weaviate (it refuses "similar" class
    # names) can hold two spellings, but another backend could: that is refused, not guessed.
    store.ensure_collection(knowledge_collection("mydocs"))
    store.ensure_collection(manifest_collection("mydocs"))
    real = store.collections()
    monkeypatch.setattr(store, "collections", lambda: [*real, "Knowledge_MyDocs"])
    with pytest.raises(InvalidInputError, match="holds 2 spellings of 'MYDOCS'"):
        resolve_kb(store, "MYDOCS")
    with pytest.raises(InvalidInputError, match="give one of them exactly"):
        search_knowledge(store, embeddings, "MyDOCS", "note")
    assert resolve_kb(store, "mydocs") == "mydocs"
