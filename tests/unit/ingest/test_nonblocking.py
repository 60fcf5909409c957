"""Ingestion and the knowledge kind make no blocking call on a running event loop.

A server runs the ``ingest`` graph and the knowledge kind's searches under blockbuster
(``langgraph dev``), which fails any blocking call on the loop. The check runs in a fresh
interpreter, as ``tests/unit/graph/test_blocking.py`` says why: first-use loading (the
embedding model, the store's schema) must happen off the loop too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import delete_source, list_sources, search_knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.scripts import run_script

SCRIPT = r"""
import asyncio, sys, tempfile
from pathlib import Path
from blockbuster import BlockingError, blockbuster_ctx
from agentic_memory.ingest import Upload, aingest_paths, aingest_uploads
from agentic_memory.kinds.knowledge import Knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

async def main():
    folder = Path(tempfile.mkdtemp())
    notes = folder / "notes.md"
    notes.write_text("# Turbines\n\n" + "The turbine output is limited by the gearbox. " * 30)
    store = EmbeddedStore(folder / "store", dims=256)
    embeddings = LocalEmbeddings()
    options = dict(kb="docs", store=store, embeddings=embeddings, chunk_size=200,
                   chunk_overlap=0, batch_size=2)
    with blockbuster_ctx():
        try:
            open(__file__).read()
        except BlockingError:
            print("guard active")
        first = await aingest_paths([str(notes)], **options)
        print("written", first.ok, first.files[0].status, first.chunks_written > 2)
        again = await aingest_paths([str(notes)], **options)
        print("again", again.files[0].status)
        upload = Upload("plan.md", b"# Plan\n\nThe gearbox is replaced in spring.")
        own = await aingest_uploads([upload], owner="alice", **options)
        print("uploaded", own.ok, own.files[0].status)
        knowledge = Knowledge(store)
        hits = await knowledge.asearch(embeddings, "docs", "gearbox", k=3)
        mine = await knowledge.asearch(embeddings, "docs", "spring", k=3, owner="alice")
        print("hits", len(hits), len(mine))
        print("bases", await knowledge.alist_bases(), await knowledge.alist_bases("alice"))
        pruned = await knowledge.aprune("docs", gone=lambda source: True)
        print("pruned", len(pruned.sources), await knowledge.alist_sources("docs"))

asyncio.run(main())
"""


def test_ingesting_and_searching_make_no_blocking_call_on_the_event_loop(tmp_path: Path) -> None:
    lines = run_script(tmp_path, "ingestion.py", SCRIPT)
    assert "guard active" in lines
    assert "written True written True" in lines
    assert "again unchanged" in lines
    assert "uploaded True written" in lines
    assert "hits 3 1" in lines
    assert "bases ['docs'] ['docs']" in lines
    assert "pruned 1 []" in lines


def test_the_sync_names_work_in_a_notebook_cell(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    """A cell runs in a running event loop: the blocking names run beside it and return."""
    notes = docs / "notes.md"
    notes.write_text("# Turbines\n\nThe turbine output is limited by the gearbox.")

    async def cell() -> tuple[bool, int, int, int]:
        report = ingest_paths([notes], kb="docs", store=store, embeddings=embeddings)
        hits = search_knowledge(store, embeddings, "docs", "gearbox", k=3)
        sources = list_sources(store, "docs")
        removed = delete_source(store, "docs", notes)
        return report.ok, len(hits), len(sources), removed

    ok, hits, sources, removed = asyncio.run(cell())
    assert ok
    assert hits == 1
    assert sources == 1
    assert removed == 1
    assert list_sources(store, "docs") == []
