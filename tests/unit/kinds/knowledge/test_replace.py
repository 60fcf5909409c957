"""``Knowledge.areplace_source`` commits a source only when every chunk it names was written."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentic_memory.kinds.knowledge import (
    Knowledge,
    SourceInfo,
    chunk_id,
    get_source,
    list_chunks,
    manifest_collection,
    now_rfc3339,
    pending_entry_id,
    prune_knowledge_base,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, MemoryObject
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.sync_edge import run_sync

SOURCE = "/papers/gone.md"


def _info(revision: str, chunks: int) -> SourceInfo:
    return SourceInfo(SOURCE, "Gone", revision, "0" * 64, 1, chunks, 800, 200, now_rfc3339())


def _chunk(embeddings: LocalEmbeddings, revision: str, index: int) -> MemoryObject:
    text = f"Chunk {index} of the paper."
    props = {
        "text": text,
        "title": "Gone",
        "source": SOURCE,
        "sha256": "0" * 64,
        "page_start": 1,
        "page_end": 1,
        "chunk_index": index,
        "char_start": 0,
        "char_end": len(text),
        "revision": revision,
        "section": "",
        "search_text": "chunk paper",
    }
    return MemoryObject(chunk_id(revision, index), props, embeddings.embed_query(text))


async def _batches(*batches: list[MemoryObject]) -> AsyncIterator[list[MemoryObject]]:
    for batch in batches:
        yield batch


@pytest.mark.parametrize("revision_given", ["r1", "r2"], ids=["too-few", "another-revision"])
def test_a_replacement_that_does_not_match_its_entry_is_not_committed(
    store: EmbeddedStore, embeddings: LocalEmbeddings, revision_given: str
) -> None:
    knowledge = Knowledge(store)
    kb = run_sync(knowledge.aensure("docs"), instead=None)
    steps: list[str] = []
    batches = _batches([_chunk(embeddings, revision_given, 0)])
    replace = knowledge.areplace_source(
        kb, _info("r1", 2), batches, step=lambda kind, done, of: steps.append(kind)
    )
    with pytest.raises(InvalidInputError):
        run_sync(replace, instead=None)
    assert "committed" not in steps
    assert get_source(store, "docs", SOURCE) is None
    assert list_chunks(store, "docs", SOURCE) == []
    # The pending entry stays: a prune finds what was written and removes it.
    manifest = manifest_collection("docs").name
    assert store.get(manifest, pending_entry_id(SOURCE)) is not None
    assert prune_knowledge_base(store, "docs").sources == [SOURCE]
    assert store.get(manifest, pending_entry_id(SOURCE)) is None


def test_a_replacement_reports_its_steps_and_removes_the_older_chunks(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    knowledge = Knowledge(store)
    kb = run_sync(knowledge.aensure("docs"), instead=None)
    old = _batches([_chunk(embeddings, "r1", 0), _chunk(embeddings, "r1", 1)])
    assert run_sync(knowledge.areplace_source(kb, _info("r1", 2), old), instead=None) == 0
    steps: list[tuple[str, int, int]] = []
    new = _batches([_chunk(embeddings, "r2", 0)], [_chunk(embeddings, "r2", 1)])
    replace = knowledge.areplace_source(
        kb, _info("r2", 2), new, step=lambda kind, done, of: steps.append((kind, done, of))
    )
    assert run_sync(replace, instead=None) == 2
    assert steps == [
        ("chunks_progress", 1, 2),
        ("chunks_progress", 2, 2),
        ("chunks_written", 2, 2),
        ("committed", 2, 2),
        ("old_removed", 2, 2),
    ]
    assert [c.id for c in list_chunks(store, "docs", SOURCE)] == [
        chunk_id("r2", 0),
        chunk_id("r2", 1),
    ]
    assert store.get(manifest_collection("docs").name, pending_entry_id(SOURCE)) is None
