"""An ingestion killed (SIGKILL) between phases leaves a consistent, searchable knowledge base."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import (
    get_source,
    knowledge_collection,
    list_chunks,
    search_knowledge,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.ingest.conftest import KNOWN, report_pages
from tests.unit.ingest.pdfs import write_pdf

CHUNKS = knowledge_collection("docs").name
NEW_SENTENCE = "Doctor Verbena catalogued the indigo comet in twenty twenty."

# The child ingests with a progress callback that kills its own process, uncatchably, at a
# chosen step: what it leaves on disk is exactly what a crash at that point leaves.
_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from agentic_memory.ingest import ingest_paths
    from agentic_memory.models.embeddings import LocalEmbeddings
    from agentic_memory.store.embedded import EmbeddedStore

    store_path, path, kill_at, kill_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def progress(event):
        if event.kind == kill_at and event.chunks_done >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    embeddings = LocalEmbeddings()
    store = EmbeddedStore(store_path, dims=embeddings.dims)
    ingest_paths([path], kb="docs", store=store, embeddings=embeddings, chunk_size=300,
                 chunk_overlap=0, batch_size=4, progress=progress)
    print("finished without being killed")
    """
)


def _run_killed(store_path: Path, pdf: Path, kill_at: str, kill_after: int = 0) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _CHILD, str(store_path), str(pdf), kill_at, str(kill_after)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert completed.returncode == -signal.SIGKILL, completed.stderr + completed.stdout


def _visible_ids(store: EmbeddedStore, embeddings: LocalEmbeddings) -> set[str]:
    hits = search_knowledge(store, embeddings, "docs", "nebula comet turbine aqueduct", k=500)
    return {h.chunk_id for h in hits}


def _stored_ids(store: EmbeddedStore) -> set[str]:
    return {o.id for o in store.list_objects(CHUNKS, limit=5000)}


@pytest.fixture
def setup_v1(
    report_pdf: Path, store_path: Path, embeddings: LocalEmbeddings
) -> tuple[Path, set[str]]:
    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        report = ingest_paths(
            [report_pdf],
            kb="docs",
            store=store,
            embeddings=embeddings,
            chunk_size=300,
            chunk_overlap=0,
        )
        assert report.ok
        old = {c.id for c in list_chunks(store, "docs", str(report_pdf.resolve()))}
    changed = dict(KNOWN)
    changed[2] = NEW_SENTENCE
    write_pdf(report_pdf, report_pages(changed), title="Version two")
    return report_pdf, old


@pytest.mark.parametrize(
    ("kill_at", "kill_after"),
    [("chunks_progress", 4), ("chunks_written", 0)],
    ids=["mid-write", "before-commit"],
)
def test_killed_before_commit_keeps_the_old_set_visible(
    kill_at: str,
    kill_after: int,
    setup_v1: tuple[Path, set[str]],
    store_path: Path,
    embeddings: LocalEmbeddings,
) -> None:
    pdf, old_ids = setup_v1
    _run_killed(store_path, pdf, kill_at, kill_after)

    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        # While the killed state is on disk: new chunks exist but are invisible.
        assert len(_stored_ids(store)) > len(old_ids)
        assert _visible_ids(store, embeddings) == old_ids
        hits = search_knowledge(store, embeddings, "docs", "indigo comet Verbena", k=500)
        assert all(NEW_SENTENCE not in h.text for h in hits)
        assert any(KNOWN[2] in h.text for h in hits)

        report = ingest_paths(
            [pdf], kb="docs", store=store, embeddings=embeddings, chunk_size=300, chunk_overlap=0
        )
        _assert_consistent_new(store, embeddings, pdf, report.chunks_written)
        assert report.chunks_removed == len(old_ids)


def test_killed_after_commit_shows_the_new_set_and_rerun_cleans_up(
    setup_v1: tuple[Path, set[str]], store_path: Path, embeddings: LocalEmbeddings
) -> None:
    pdf, old_ids = setup_v1
    _run_killed(store_path, pdf, "committed")

    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        source = get_source(store, "docs", str(pdf.resolve()))
        assert source is not None and source.title == "Version two"
        new_ids = {c.id for c in list_chunks(store, "docs", str(pdf.resolve()))}
        # Old chunks are still stored, but only the complete new set is visible.
        assert old_ids <= _stored_ids(store)
        assert len(new_ids) == source.chunks
        assert _visible_ids(store, embeddings) == new_ids

        report = ingest_paths(
            [pdf], kb="docs", store=store, embeddings=embeddings, chunk_size=300, chunk_overlap=0
        )
        assert report.files[0].status == "unchanged"
        assert report.chunks_written == 0 and report.chunks_removed == len(old_ids)
        _assert_consistent_new(store, embeddings, pdf, source.chunks)


def _assert_consistent_new(
    store: EmbeddedStore, embeddings: LocalEmbeddings, pdf: Path, expected: int
) -> None:
    new_ids = {c.id for c in list_chunks(store, "docs", str(pdf.resolve()))}
    assert len(new_ids) == expected > 0
    assert _stored_ids(store) == new_ids
    assert _visible_ids(store, embeddings) == new_ids
    top = search_knowledge(store, embeddings, "docs", "indigo comet Verbena", k=1)[0]
    assert NEW_SENTENCE in top.text
