"""Semantic memory: knowledge bases of document chunks, searched with citations.

A knowledge base ``kb`` lives in two collections of the store:

- ``Knowledge_<Kb>`` holds the chunks. Every chunk carries the *revision* it was written
  by: a hash of (source path, file sha256, splitter settings).
- ``KnowledgeSources_<Kb>`` is the manifest: one object per source naming its *active*
  revision, plus one *generation* object whose token changes before any chunk is deleted.

Searches only return chunks of active revisions, so the manifest decides what is visible.
Their keyword side reads a chunk's prepared keyword text (``search_text``: the stems of its
document's title, its section heading and its text, without stop words; see
:mod:`agentic_memory.kinds.recall_text`), the same on both backends; the raw ``text`` is
kept for display and citations. A knowledge base written before that text existed is
upgraded on first use (:func:`upgrade_knowledge_base`).
Replacing a changed file (:meth:`Knowledge.areplace_source`, which ingestion calls) first
records a *pending* entry for the source (so that a run killed half-way is known even if the file then disappears), writes the
new chunks (invisible), upserts the source's manifest object (one single-object write: the
commit point), renews the generation token, deletes the old chunks and drops the pending
entry. A search reads the generation,
searches among the active revisions and reads the generation again; if it changed, chunks
may have been deleted under it and it searches again. So a search sees either the complete
old set or the complete new set of a source, never a mix and never both, even when an
ingestion process is killed at any point; the next ingestion of that file removes what a
killed run left behind, and :meth:`Knowledge.aprune` (``amem ingest --prune``) removes the
sources whose files are gone, with whatever a killed run left for them. Both backends give
read-your-writes for single objects, which is all this needs.

Shared knowledge bases are read by every user and written by operators (``amem ingest``,
or the ``ingest`` graph for a server's operators). Each user also has knowledge bases of
their own, for what they upload: every method here takes ``owner=`` (a user id) to work on
that user's base instead. The users' own bases of one name share the collections
``UserKnowledge_<Kb>`` and ``UserKnowledgeSources_<Kb>``, partitioned by user (a Weaviate
tenant each), so a user's calls never read another user's chunks, and forgetting a user
deletes their partitions. An uploaded document has no path: its source is
``upload://<file name>`` (:func:`upload_source`), and prune never removes it.

Knowledge base names compare case-insensitively: ``docs``, ``Docs`` and ``DOCS`` are one base
(as Weaviate, which refuses two collections whose names differ only in case, would have it).
The spelling of its first ingestion is kept and shown; :meth:`Knowledge.aresolve` maps any
spelling to it, and every method here resolves the name it is given.

:class:`Knowledge` owns these operations, asynchronous over the store's ``a…`` methods. The
module's store-first functions are its edge: ``alist_sources(store, kb)`` and the like await
them, and the documented sync names (``list_sources``, ``search_knowledge``, ...) block on
those (:func:`agentic_memory.sync_edge.blocking_function`, which works in a notebook cell too).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import uuid
from collections.abc import AsyncIterable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds._bound import embedded_part
from agentic_memory.kinds._restage import needs_restage
from agentic_memory.kinds.knowledge.schema import (
    _ENTRY_GENERATION,
    _ENTRY_PENDING,
    _ENTRY_SOURCE,
    _MANIFEST_PAGE,
    _PRUNE_BATCH,
    UPLOAD_SCHEME,
    KnowledgeHit,
    SourceInfo,
    UnknownSourceError,
    _collection_spelling,
    _generation_id,
    _marker_vector,
    _prefixes,
    knowledge_collection,
    manifest_collection,
    source_entry_id,
    source_key,
    upgrade_chunk_collection,
)
from agentic_memory.kinds.knowledge.search import (
    aactive_revisions,
    agen,
    aread_sources,
    asearch_active,
    check_min_similarity,
)
from agentic_memory.kinds.recall_text import keyword_query
from agentic_memory.store import (
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    Where,
    check_text,
    make_id,
)
from agentic_memory.sync_edge import blocking_function

P = ParamSpec("P")
R = TypeVar("R")

_SEARCH_ATTEMPTS = 4

ReplaceStep = Literal["chunks_progress", "chunks_written", "committed", "old_removed"]
"""The steps :meth:`Knowledge.areplace_source` reports (with chunks done and the total)."""

# -- the replace protocol's steps (tests run them one by one to fake a killed run) ------------


def pending_entry_id(source: str) -> str:
    """Return the manifest object id of a source's pending ingestion."""
    return make_id("knowledge-pending", source)


async def _aput_entry(
    store: MemoryStore, kb: str, entry_id: str, props: dict[str, Any], owner: str | None
) -> None:
    obj = MemoryObject(entry_id, props, _marker_vector(store.dims))
    result = await store.aupsert(manifest_collection(kb, owner).name, [obj], user=owner)
    result.raise_for_failures()


async def amark_pending(
    store: MemoryStore, kb: str, source: str, revision: str, owner: str | None = None
) -> None:
    """Record that ``revision`` of ``source`` is being written (before its first chunk).

    A run killed before it finishes leaves this entry, so its chunks can be found and removed
    even when the file is renamed or deleted afterwards (:meth:`Knowledge.aprune`).
    """
    props = {"entry": _ENTRY_PENDING, "kb": kb, "source": source, "revision": revision}
    await _aput_entry(store, kb, pending_entry_id(source), props, owner)


async def acommit_source(
    store: MemoryStore, kb: str, info: SourceInfo, owner: str | None = None
) -> None:
    """Make ``info.revision`` the visible revision of its source: the one-object commit point."""
    props: dict[str, Any] = {
        "entry": _ENTRY_SOURCE,
        "kb": kb,
        "source": info.source,
        "title": info.title,
        "revision": info.revision,
        "sha256": info.sha256,
        "pages": info.pages,
        "chunks": info.chunks,
        "chunk_size": info.chunk_size,
        "chunk_overlap": info.chunk_overlap,
        "ingested_at": info.ingested_at,
    }
    await _aput_entry(store, kb, source_entry_id(info.source), props, owner)


async def arenew_generation(store: MemoryStore, kb: str, owner: str | None = None) -> None:
    """Change the generation token; call it after a commit and before deleting any chunk."""
    props = {"entry": _ENTRY_GENERATION, "kb": kb, "token": uuid.uuid4().hex}
    await _aput_entry(store, kb, _generation_id(), props, owner)


async def aremove_stale_chunks(
    store: MemoryStore,
    kb: str,
    source: str,
    keep_revision: str,
    *,
    renew: bool = True,
    owner: str | None = None,
) -> int:
    """Delete the chunks of ``source`` whose revision is not ``keep_revision``; return how many.

    With ``renew`` (the default) the generation is renewed first, so that a search running
    meanwhile notices and searches again; pass ``renew=False`` only right after a renewal.
    """
    chunks = knowledge_collection(kb, owner).name
    stale = [Where("source", "eq", source), Where("revision", "ne", keep_revision)]
    if await store.acount(chunks, user=owner, where=stale) == 0:
        return 0
    if renew:
        await arenew_generation(store, kb, owner)
    return await store.adelete_where(chunks, stale, user=owner)


async def aclear_pending(
    store: MemoryStore, kb: str, source: str, owner: str | None = None
) -> None:
    """Drop a source's pending entry once its ingestion is complete (or cleaned up)."""
    manifest = manifest_collection(kb, owner).name
    await store.adelete(manifest, [pending_entry_id(source)], user=owner)


# -- pruning ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneReport:
    """What :meth:`Knowledge.aprune` removed."""

    kb: str
    sources: list[str]
    """Sources whose files no longer exist: committed ones and those of killed runs."""
    chunks: int
    """Chunks removed with them."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready view."""
        return {"kb": self.kb, "sources": list(self.sources), "chunks": self.chunks}


def file_is_gone(path: str) -> bool:
    """Whether ``path`` certainly no longer exists (an unreadable parent is not proof).

    An uploaded document (``upload://...``) has no file: it is never gone.
    """
    if path.startswith(UPLOAD_SCHEME):
        return False
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def revision_of(
    source: str, sha256: str, chunk_size: int, chunk_overlap: int, pipeline: str
) -> str:
    """Return the revision key of one ingestion of a source with given splitter settings."""
    key = "\x1f".join((pipeline, source, sha256, str(chunk_size), str(chunk_overlap)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def now_rfc3339() -> str:
    """Return the current time as an RFC 3339 string with a timezone."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- the kind's operations ----------------------------------------------------------------------


class Knowledge:
    """The knowledge bases of a store (shared ones and each user's own) and their operations.

    Every operation is a coroutine over the store's ``a…`` methods (which run the storage
    work in worker threads); the module doc describes the protocol they keep.
    """

    def __init__(self, store: MemoryStore) -> None:
        """Work on the knowledge bases of ``store``."""
        self.store = store

    async def _aexisting(self) -> set[str]:
        return set(await self.store.acollections())

    async def _aspelling(self, kb: str, owner: str | None) -> tuple[str, set[str]]:
        """Return the spelling of ``kb`` whose collections exist, and the store's collections."""
        existing = await self._aexisting()
        return _collection_spelling(kb, existing, owner), existing

    # -- names ------------------------------------------------------------------------------

    async def aresolve(self, kb: str, owner: str | None = None) -> str:
        """Return the kept spelling of knowledge base ``kb``, whatever the case of ``kb``.

        For a base that does not exist yet, ``kb`` itself (its first ingestion keeps it).
        ``owner``: the user whose own knowledge base it is (``None``: a shared one).

        Raises:
            InvalidInputError: The name is invalid or ambiguous (several collections of the
                store differ from it only in case, left by an older version).
        """
        spelling, existing = await self._aspelling(kb, owner)
        manifest = manifest_collection(spelling, owner).name
        if manifest in existing:
            first = await self.store.alist_objects(manifest, limit=1, user=owner)
            kept = first[0].properties.get("kb") if first else None
            if isinstance(kept, str) and kept.lower() == kb.lower():
                try:
                    if (
                        knowledge_collection(kept, owner).name
                        == knowledge_collection(spelling, owner).name
                    ):
                        return kept
                except InvalidInputError:
                    pass
        return spelling

    async def afind(self, kb: str, owner: str | None = None) -> str | None:
        """Return the kept spelling of ``kb`` if that knowledge base exists, else ``None``.

        A user's own base exists once something was ingested into it (the collection it
        shares with other users' bases of that name is not enough).
        """
        resolved = await self.aresolve(kb, owner)
        existing = await self._aexisting()
        if knowledge_collection(resolved, owner).name not in existing:
            return None
        if owner is not None:
            manifest = manifest_collection(resolved, owner).name
            if manifest not in existing or owner not in await self.store.ausers(manifest):
                return None
        return resolved

    async def aupgrade(self, kb: str, owner: str | None = None) -> bool:
        """Bring the chunks of ``kb`` written before the prepared keyword text to the current schema.

        Every chunk gets its ``search_text`` (from its title and text; its section is unknown,
        the next ingestion of a changed file finds it), keeping its id and vector, through a
        staging copy (:mod:`agentic_memory.kinds._restage`: a process killed at any point loses
        nothing, and the next use finishes the job). The users' own bases of one name share a
        collection, so every user's chunks are upgraded at once. The manifest is not touched.
        Returns whether anything was upgraded; a current base costs one cached schema read.
        """
        name = knowledge_collection(kb, owner).name
        # The restage is storage code that takes turns with other processes: one thread.
        return await asyncio.to_thread(upgrade_chunk_collection, self.store, name)

    async def aensure(self, kb: str, owner: str | None = None) -> str:
        """Create the collections of ``kb`` if missing (upgrading an old one); return its spelling."""
        kept = await self.aresolve(kb, owner)
        await self.aupgrade(kept, owner)
        await self.store.aensure_collection(knowledge_collection(kept, owner))
        await self.store.aensure_collection(manifest_collection(kept, owner))
        return kept

    async def alist_bases(self, owner: str | None = None) -> list[str]:
        """Return the names of the shared knowledge bases, or of ``owner``'s own ones."""
        names: list[str] = []
        existing = await self._aexisting()
        chunks_prefix, manifest_prefix = _prefixes(owner)
        for collection in sorted(existing):
            if not collection.startswith(chunks_prefix):
                continue
            suffix = collection.removeprefix(chunks_prefix)
            manifest = manifest_prefix + suffix
            name = suffix
            if owner is not None and (
                manifest not in existing or owner not in await self.store.ausers(manifest)
            ):
                continue
            if manifest in existing:
                # The manifest remembers the name as the user typed it (``docs``, not ``Docs``).
                first = await self.store.alist_objects(manifest, limit=1, user=owner)
                if first and isinstance(first[0].properties.get("kb"), str):
                    name = first[0].properties["kb"]
            names.append(name)
        return names

    # -- sources ----------------------------------------------------------------------------

    async def aget_source(
        self, kb: str, source: str, owner: str | None = None
    ) -> SourceInfo | None:
        """Return the committed manifest entry of ``source`` (a key from ``source_key``), or None."""
        spelling, existing = await self._aspelling(kb, owner)
        manifest = manifest_collection(spelling, owner).name
        if manifest not in existing:
            return None
        obj = await self.store.aget(manifest, source_entry_id(source), user=owner)
        if obj is None or obj.properties.get("entry") != _ENTRY_SOURCE:
            return None
        return SourceInfo.from_properties(obj.properties)

    async def alist_sources(self, kb: str, owner: str | None = None) -> list[SourceInfo]:
        """Return the committed sources of a knowledge base, sorted by path (none if it is missing)."""
        spelling, existing = await self._aspelling(kb, owner)
        manifest = manifest_collection(spelling, owner).name
        if manifest not in existing:
            return []
        sources = await aread_sources(self.store, manifest, owner)
        return sorted(sources.values(), key=lambda s: s.source)

    async def alist_chunks(
        self, kb: str, source: str, owner: str | None = None
    ) -> list[StoredObject]:
        """Return the visible chunks of one source in order (for inspection and tests)."""
        kb = (await self._aspelling(kb, owner))[0]
        info = await self.aget_source(kb, source, owner)
        if info is None:
            return []
        chunks = knowledge_collection(kb, owner).name
        where = [Where("source", "eq", source), Where("revision", "eq", info.revision)]
        found = [
            obj
            async for obj in self.store.aiterate(
                chunks, user=owner, where=where, page_size=_MANIFEST_PAGE
            )
        ]
        return sorted(found, key=lambda o: (int(o.properties.get("chunk_index") or 0), o.id))

    async def adelete_source(self, kb: str, source: str | Path, owner: str | None = None) -> int:
        """Remove a source and its chunks from a knowledge base; return how many chunks were removed.

        The manifest entry goes first, so searches stop seeing the source at once; a process
        killed before the chunks are gone leaves invisible chunks that the next deletion or
        ingestion of that path removes.
        """
        kb, existing = await self._aspelling(kb, owner)
        spec = knowledge_collection(kb, owner)
        manifest = manifest_collection(kb, owner).name
        if spec.name not in existing or manifest not in existing:
            raise UnknownSourceError(f"knowledge base {kb!r} does not exist")
        given = await self.aget_source(kb, str(source), owner)
        key = str(source) if given else source_key(source)
        of_source = [Where("source", "eq", key)]
        pending = await self.store.aget(manifest, pending_entry_id(key), user=owner)
        if (
            await self.aget_source(kb, key, owner) is None
            and pending is None
            and await self.store.acount(spec.name, user=owner, where=of_source) == 0
        ):
            raise UnknownSourceError(f"knowledge base {kb!r} has no source {key!r}")
        await self.store.adelete(manifest, [source_entry_id(key)], user=owner)
        await arenew_generation(self.store, kb, owner)
        removed = await self.store.adelete_where(spec.name, of_source, user=owner)
        # Last: while it exists, a prune still knows the source's leftovers.
        await aclear_pending(self.store, kb, key, owner)
        return removed

    async def akeep_unchanged(
        self, kb: str, source: str, revision: str, *, owner: str | None = None
    ) -> tuple[SourceInfo, int] | None:
        """Keep the committed ``revision`` of ``source`` if it is that one and complete.

        Then nothing is written: what a killed run left is removed, and the committed entry
        is returned with the number of chunks removed. ``None``: the source must be replaced
        (:meth:`areplace_source`). ``kb`` is the kept spelling (:meth:`aensure`).
        """
        current = await self.aget_source(kb, source, owner)
        if current is None or current.revision != revision:
            return None
        chunks = knowledge_collection(kb, owner).name
        where = [Where("source", "eq", source), Where("revision", "eq", revision)]
        if await self.store.acount(chunks, user=owner, where=where) != current.chunks:
            return None
        removed = await aremove_stale_chunks(self.store, kb, source, revision, owner=owner)
        # A read first: an up-to-date file costs no write unless a killed run left a mark.
        manifest = manifest_collection(kb, owner).name
        if await self.store.aget(manifest, pending_entry_id(source), user=owner):
            await aclear_pending(self.store, kb, source, owner)
        return current, removed

    async def areplace_source(
        self,
        kb: str,
        info: SourceInfo,
        batches: AsyncIterable[list[MemoryObject]],
        *,
        owner: str | None = None,
        step: Callable[[ReplaceStep, int, int], None] | None = None,
    ) -> int:
        """Make ``info`` the visible revision of its source, its chunks written from ``batches``.

        The replace protocol, in its order (the module doc says why a process killed between
        any two steps leaves a consistent knowledge base): the pending entry, the chunks
        (invisible until the commit), the commit (one manifest object), a new generation, the
        older revisions' chunks deleted, the pending entry dropped. ``step`` hears of each
        (``chunks_progress`` after every batch, then ``chunks_written``, ``committed`` and
        ``old_removed``) with the chunks written and ``info.chunks``. ``kb`` is the kept
        spelling (:meth:`aensure`). Returns how many older chunks were deleted.

        Raises:
            InvalidInputError: ``batches`` held a chunk of another revision or not
                ``info.chunks`` chunks; nothing was committed.
        """
        report = step or _no_step
        total = info.chunks
        await amark_pending(self.store, kb, info.source, info.revision, owner)
        chunks = knowledge_collection(kb, owner).name
        written = 0
        async for batch in batches:
            if any(o.properties.get("revision") != info.revision for o in batch):
                raise InvalidInputError(f"a chunk of {info.source!r} is not of its revision")
            result = await self.store.aupsert(chunks, batch, user=owner)
            result.raise_for_failures()
            written += len(batch)
            report("chunks_progress", written, total)
        if written != total:
            raise InvalidInputError(
                f"{info.source!r} has {total} chunks, but {written} were given; not committed"
            )
        report("chunks_written", written, total)
        await acommit_source(self.store, kb, info, owner)
        report("committed", written, total)
        await arenew_generation(self.store, kb, owner)
        removed = await aremove_stale_chunks(
            self.store, kb, info.source, info.revision, renew=False, owner=owner
        )
        await aclear_pending(self.store, kb, info.source, owner)
        report("old_removed", written, total)
        return removed

    async def aprune(
        self, kb: str, *, gone: Callable[[str], bool] = file_is_gone, owner: str | None = None
    ) -> PruneReport:
        """Remove the sources of ``kb`` whose files no longer exist, with all their chunks.

        The candidates are the committed sources and the sources of ingestions that never
        finished (their pending entries): a run killed half-way leaves chunks nobody searches,
        and when its file was renamed or deleted since, no later ingestion of that path will
        clean them. Sources whose files still exist are left alone (their next ingestion removes
        any leftovers), so an ingestion running meanwhile is never disturbed.

        Existence is judged on this machine: prune from the machine (and mounts) the files were
        ingested from. The manifest entries go first, so searches stop citing a removed source
        at once; a prune killed half-way is finished by the next one.

        Args:
            kb: The knowledge base (any case).
            gone: Decides whether a source path no longer exists (default: ``file_is_gone``).
            owner: The user whose own knowledge base it is (``None``: a shared one).
        """
        spelling = await self.aresolve(kb, owner)
        existing = await self._aexisting()
        chunks = knowledge_collection(spelling, owner).name
        manifest = manifest_collection(spelling, owner).name
        if chunks not in existing or manifest not in existing:
            return PruneReport(kb=spelling, sources=[], chunks=0)
        candidates: set[str] = set()
        offset = 0
        while True:
            page = await self.store.alist_objects(
                manifest,
                user=owner,
                where=[Where("entry", "in", [_ENTRY_SOURCE, _ENTRY_PENDING])],
                limit=_MANIFEST_PAGE,
                offset=offset,
                sort_by="source",
            )
            candidates.update(str(o.properties.get("source") or "") for o in page)
            if len(page) < _MANIFEST_PAGE:
                break
            offset += len(page)
        # ``gone`` looks at the disk: off the event loop.
        missing = await asyncio.to_thread(
            lambda: sorted(source for source in candidates if source and gone(source))
        )
        removed = 0
        for start in range(0, len(missing), _PRUNE_BATCH):
            batch = missing[start : start + _PRUNE_BATCH]
            await self.store.adelete(manifest, [source_entry_id(s) for s in batch], user=owner)
            await arenew_generation(self.store, spelling, owner)
            removed += await self.store.adelete_where(
                chunks, [Where("source", "in", batch)], user=owner
            )
            await self.store.adelete(manifest, [pending_entry_id(s) for s in batch], user=owner)
        return PruneReport(kb=spelling, sources=missing, chunks=removed)

    async def adrop(self, kb: str, owner: str | None = None) -> None:
        """Delete a knowledge base (its chunks and its manifest); a missing one is not an error.

        A user's own base is deleted from the collections it shares with other users' bases
        of the same name; theirs stay.
        """
        kb, existing = await self._aspelling(kb, owner)
        # The manifest goes first: without it, no chunk is visible any more.
        for name in (manifest_collection(kb, owner).name, knowledge_collection(kb, owner).name):
            if name not in existing:
                continue
            if owner is None:
                await self.store.adrop_collection(name)
            else:
                await self.store.adelete_user(name, owner)

    async def asearch(
        self,
        embeddings: Embeddings,
        kb: str,
        query: str,
        *,
        k: int = 5,
        alpha: float = 0.5,
        owner: str | None = None,
        min_similarity: float | None = None,
    ) -> list[KnowledgeHit]:
        """Hybrid-search a knowledge base; return up to ``k`` chunks with their citations.

        A knowledge base that does not exist, or a blank query, gives no hits. ``alpha`` weighs
        vector against keyword similarity (0 is pure BM25, 1 pure vector); the keyword side
        searches the chunks' prepared keyword text (``search_text``: stems of the document
        title, the section heading and the text, see :mod:`agentic_memory.kinds.recall_text`)
        with the query prepared the same way. A knowledge base an earlier version wrote is
        upgraded first (:meth:`aupgrade`). ``owner``: search that user's own knowledge base
        ``kb`` instead of the shared one. ``min_similarity`` is a relevance floor (``None``:
        none): a chunk whose cosine similarity to the query is below it is left out, so a
        message the documents do not answer gets no passage at all (the fused score cannot
        serve: relativeScoreFusion rescales every search so that its best hit scores near 1).
        See :data:`~agentic_memory.kinds.knowledge.search.RELEVANCE_FLOORS` for the measured
        defaults.
        """
        knowledge_collection(kb, owner)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        check_text(query, "the query")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        if min_similarity is not None:
            check_min_similarity(min_similarity)
        kb, existing = await self._aspelling(kb, owner)
        spec = knowledge_collection(kb, owner)
        manifest = manifest_collection(kb, owner).name
        if not query.strip() or manifest not in existing:
            return []
        # In worker threads: the first read of a reopened store's schema is file I/O.
        if await asyncio.to_thread(needs_restage, self.store, spec, existing):
            await self.aupgrade(kb, owner)
            existing = await self._aexisting()
        if spec.name not in existing:
            return []
        vector = await embeddings.aembed_query(embedded_part(query))
        keywords = keyword_query(query)
        hits: list[KnowledgeHit] = []
        # A search sees one generation whole: chunks deleted under it make it search again.
        for _ in range(_SEARCH_ATTEMPTS):
            before = await agen(self.store, manifest, owner)
            active = await aactive_revisions(self.store, manifest, before, owner)
            if not active:
                return []
            hits = await asearch_active(
                self.store, spec.name, keywords, vector, k, alpha, active, owner
            )
            if await agen(self.store, manifest, owner) == before:
                break
        if min_similarity is None:
            return hits
        return [h for h in hits if h.similarity >= min_similarity]


def _no_step(kind: ReplaceStep, done: int, of: int) -> None:
    del kind, done, of


# -- the module's edge: store-first coroutine functions and their blocking names ---------------


def _of_store(
    method: Callable[Concatenate[Knowledge, P], Coroutine[Any, Any, R]], name: str
) -> Callable[Concatenate[MemoryStore, P], Coroutine[Any, Any, R]]:
    """Return ``Knowledge.<method>`` as the coroutine function ``name(store, ...)``."""

    async def on_store(store: MemoryStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(Knowledge(store), *args, **kwargs)

    on_store.__name__ = on_store.__qualname__ = name
    on_store.__doc__ = method.__doc__
    signature = inspect.signature(method)
    store = inspect.Parameter("store", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [store, *list(signature.parameters.values())[1:]]
    on_store.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return on_store


asearch_knowledge = _of_store(Knowledge.asearch, "asearch_knowledge")
aresolve_kb = _of_store(Knowledge.aresolve, "aresolve_kb")
afind_knowledge_base = _of_store(Knowledge.afind, "afind_knowledge_base")
aupgrade_knowledge_base = _of_store(Knowledge.aupgrade, "aupgrade_knowledge_base")
alist_knowledge_bases = _of_store(Knowledge.alist_bases, "alist_knowledge_bases")
aget_source = _of_store(Knowledge.aget_source, "aget_source")
alist_sources = _of_store(Knowledge.alist_sources, "alist_sources")
alist_chunks = _of_store(Knowledge.alist_chunks, "alist_chunks")
adelete_source = _of_store(Knowledge.adelete_source, "adelete_source")
aprune_knowledge_base = _of_store(Knowledge.aprune, "aprune_knowledge_base")
adrop_knowledge_base = _of_store(Knowledge.adrop, "adrop_knowledge_base")

search_knowledge = blocking_function(asearch_knowledge)
resolve_kb = blocking_function(aresolve_kb)
find_knowledge_base = blocking_function(afind_knowledge_base)
upgrade_knowledge_base = blocking_function(aupgrade_knowledge_base)
list_knowledge_bases = blocking_function(alist_knowledge_bases)
get_source = blocking_function(aget_source)
list_sources = blocking_function(alist_sources)
list_chunks = blocking_function(alist_chunks)
delete_source = blocking_function(adelete_source)
prune_knowledge_base = blocking_function(aprune_knowledge_base)
drop_knowledge_base = blocking_function(adrop_knowledge_base)
