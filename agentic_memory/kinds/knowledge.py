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
Replacing a changed file (see ``agentic_memory.ingest.pipeline``) first records a *pending* entry for the
source (so that a run killed half-way is known even if the file then disappears), writes the
new chunks (invisible), upserts the source's manifest object (one single-object write: the
commit point), renews the generation token, deletes the old chunks and drops the pending
entry. A search reads the generation,
searches among the active revisions and reads the generation again; if it changed, chunks
may have been deleted under it and it searches again. So a search sees either the complete
old set or the complete new set of a source, never a mix and never both, even when an
ingestion process is killed at any point; the next ingestion of that file removes what a
killed run left behind, and :func:`prune_knowledge_base` (``amem ingest --prune``) removes the
sources whose files are gone, with whatever a killed run left for them. Both backends give
read-your-writes for single objects, which is all this needs.

Shared knowledge bases are read by every user and written by operators (``amem ingest``,
or the ``ingest`` graph for a server's operators). Each user also has knowledge bases of
their own, for what they upload: every function here takes ``owner=`` (a user id) to work on
that user's base instead. The users' own bases of one name share the collections
``UserKnowledge_<Kb>`` and ``UserKnowledgeSources_<Kb>``, partitioned by user (a Weaviate
tenant each), so a user's calls never read another user's chunks, and forgetting a user
deletes their partitions. An uploaded document has no path: its source is
``upload://<file name>`` (:func:`upload_source`), and prune never removes it.

Knowledge base names compare case-insensitively: ``docs``, ``Docs`` and ``DOCS`` are one base
(as Weaviate, which refuses two collections whose names differ only in case, would have it).
The spelling of its first ingestion is kept and shown; :func:`resolve_kb` maps any spelling to
it, and every function here resolves the name it is given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_memory.kinds._bound import check_user_id, embedded_part
from agentic_memory.kinds._restage import needs_restage, restage
from agentic_memory.kinds.recall_text import (
    chunk_search_text,
    keyword_query,
    search_text_property,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    Property,
    SearchHit,
    StoredObject,
    Where,
    check_text,
    make_id,
)
from agentic_memory.store.threads import in_thread_function

MANIFEST_PREFIX = "KnowledgeSources_"
CHUNKS_PREFIX = "Knowledge_"
USER_MANIFEST_PREFIX = "UserKnowledgeSources_"
USER_CHUNKS_PREFIX = "UserKnowledge_"
UPLOAD_SCHEME = "upload://"
"""The start of the source of an uploaded document (``upload://notes.md``): not a path."""

_ENTRY_SOURCE = "source"
_ENTRY_GENERATION = "generation"
_ENTRY_PENDING = "pending"

# Up to this many active revisions are passed to the store as one ``in`` filter; above it
# the search over-fetches and filters the hits itself (see docs/ingestion.md for the numbers).
IN_FILTER_MAX_REVISIONS = 32
_SEARCH_ATTEMPTS = 4
_MANIFEST_PAGE = 500
_PRUNE_BATCH = 100

MANIFEST_PROPERTIES: tuple[Property, ...] = (
    Property("entry", "text", description="'source', 'generation' or 'pending'"),
    Property("kb", "text", description="the knowledge base name as given"),
    Property("source", "text", description="absolute path of the file"),
    Property("title", "text", searchable=True),
    Property("revision", "text", description="the active revision of the source's chunks"),
    Property("sha256", "text"),
    Property("pages", "int"),
    Property("chunks", "int"),
    Property("chunk_size", "int"),
    Property("chunk_overlap", "int"),
    Property("ingested_at", "date"),
    Property("token", "text", filterable=False, description="generation token"),
)


KNOWLEDGE_PROPERTIES: tuple[Property, ...] = (
    Property("text", "text", filterable=False, description="the chunk as read, for citations"),
    Property("title", "text"),
    Property("source", "text", description="absolute path of the file, symlinks resolved"),
    Property("sha256", "text", description="of the whole file"),
    Property("page_start", "int"),
    Property("page_end", "int"),
    Property("chunk_index", "int"),
    Property("char_start", "int"),
    Property("char_end", "int"),
    Property(
        "revision",
        "text",
        description="the ingestion of (source, file sha256, splitter settings) the chunk belongs to",
    ),
    Property(
        "section",
        "text",
        filterable=False,
        description="the heading of the section the chunk falls under ('' when none was found)",
    ),
    search_text_property("the title, section heading and text"),
)
"""A chunk's properties. Keyword search reads ``search_text`` only; ``text`` is what is shown
and cited."""

KNOWLEDGE_PROPERTIES_V1: tuple[Property, ...] = (
    Property("text", "text", searchable=True, filterable=False),
    Property("title", "text", searchable=True),
    *KNOWLEDGE_PROPERTIES[2:10],
)
"""A chunk's properties before the prepared keyword text: the raw text and title were
searched. A knowledge base holding them is upgraded on first use (:func:`upgrade_knowledge_base`)."""


_KB_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}$")


def knowledge_collection(kb: str, owner: str | None = None) -> CollectionSpec:
    """Return the schema of knowledge base ``kb``: shared, or every user's own ``kb``.

    A shared base (``owner`` None) is one collection read by everyone; the users' own
    bases of one name share a per-user collection, one partition per user, which only that
    user's calls read.
    """
    if not isinstance(kb, str) or not _KB_RE.match(kb):
        raise InvalidInputError(
            f"knowledge base name {kb!r} must start with a letter and contain only letters, "
            "digits and underscores (at most 41 characters)"
        )
    if owner is not None:
        check_user_id(owner)
    return _chunks_spec(kb, own=owner is not None)


def _chunks_spec(kb: str, *, own: bool) -> CollectionSpec:
    if own:
        return CollectionSpec(
            name=f"{USER_CHUNKS_PREFIX}{kb[0].upper()}{kb[1:]}",
            per_user=True,
            description=f"Document chunks of each user's own knowledge base {kb!r}.",
            properties=KNOWLEDGE_PROPERTIES,
        )
    return CollectionSpec(
        name=f"Knowledge_{kb[0].upper()}{kb[1:]}",
        per_user=False,
        description=f"Document chunks of the knowledge base {kb!r}.",
        properties=KNOWLEDGE_PROPERTIES,
    )


def _prefixes(owner: str | None) -> tuple[str, str]:
    """Return the chunk and manifest collection prefixes of shared or own knowledge bases."""
    if owner is None:
        return CHUNKS_PREFIX, MANIFEST_PREFIX
    return USER_CHUNKS_PREFIX, USER_MANIFEST_PREFIX


class UnknownSourceError(InvalidInputError):
    """The knowledge base has no such source."""


def manifest_collection(kb: str, owner: str | None = None) -> CollectionSpec:
    """Return the schema of the manifest of knowledge base ``kb`` (see ``knowledge_collection``)."""
    chunks = knowledge_collection(kb, owner)
    chunks_prefix, manifest_prefix = _prefixes(owner)
    return CollectionSpec(
        name=manifest_prefix + chunks.name.removeprefix(chunks_prefix),
        per_user=owner is not None,
        description=f"Which revision of each source of knowledge base {kb!r} is visible.",
        properties=MANIFEST_PROPERTIES,
    )


def _collection_spelling(kb: str, existing: set[str], owner: str | None = None) -> str:
    """Return a spelling of ``kb`` whose collections are the existing ones (no store reads).

    ``kb`` itself when its collection exists or no spelling of it does; otherwise the one
    existing spelling that equals it case-insensitively.

    Raises:
        InvalidInputError: The name is invalid, or the store holds several collections that
            differ from it only in case (left by an older version) and none is exactly it.
    """
    own = knowledge_collection(kb, owner).name
    if own in existing:
        return kb
    folded = kb.lower()
    prefix = _prefixes(owner)[0]
    matches = sorted(
        name.removeprefix(prefix)
        for name in existing
        if name.startswith(prefix) and name.removeprefix(prefix).lower() == folded
    )
    if not matches:
        return kb
    if len(matches) > 1:
        raise InvalidInputError(
            f"knowledge base names compare case-insensitively, and this store holds "
            f"{len(matches)} spellings of {kb!r} ({', '.join(matches)}, from an older "
            "version): give one of them exactly"
        )
    return matches[0]


def resolve_kb(store: MemoryStore, kb: str, owner: str | None = None) -> str:
    """Return the kept spelling of knowledge base ``kb``, whatever the case of ``kb``.

    For a base that does not exist yet, ``kb`` itself (its first ingestion keeps it).
    ``owner``: the user whose own knowledge base it is (``None``: a shared one).

    Raises:
        InvalidInputError: The name is invalid or ambiguous (see ``_collection_spelling``).
    """
    existing = set(store.collections())
    spelling = _collection_spelling(kb, existing, owner)
    manifest = manifest_collection(spelling, owner).name
    if manifest in existing:
        first = store.list_objects(manifest, limit=1, user=owner)
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


def find_knowledge_base(store: MemoryStore, kb: str, owner: str | None = None) -> str | None:
    """Return the kept spelling of ``kb`` if that knowledge base exists, else ``None``.

    A user's own base exists once something was ingested into it (the collection it
    shares with other users' bases of that name is not enough).
    """
    resolved = resolve_kb(store, kb, owner)
    existing = set(store.collections())
    if knowledge_collection(resolved, owner).name not in existing:
        return None
    if owner is not None:
        manifest = manifest_collection(resolved, owner).name
        if manifest not in existing or owner not in store.users(manifest):
            return None
    return resolved


def ensure_knowledge_base(store: MemoryStore, kb: str, owner: str | None = None) -> str:
    """Create the chunk and manifest collections of ``kb`` if missing; return its kept spelling.

    A knowledge base an earlier version wrote is upgraded first (:func:`upgrade_knowledge_base`).
    """
    kept = resolve_kb(store, kb, owner)
    upgrade_knowledge_base(store, kept, owner)
    store.ensure_collection(knowledge_collection(kept, owner))
    store.ensure_collection(manifest_collection(kept, owner))
    return kept


def upgraded_chunk(props: dict[str, Any]) -> dict[str, Any]:
    """Return a chunk stored before the keyword text with it (its section unknown)."""
    text, title = str(props.get("text") or ""), str(props.get("title") or "")
    return {**props, "section": "", "search_text": chunk_search_text(text, title=title)}


def upgrade_knowledge_base(store: MemoryStore, kb: str, owner: str | None = None) -> bool:
    """Bring the chunks of ``kb`` written before the prepared keyword text to the current schema.

    Every chunk gets its ``search_text`` (from its title and text; its section is unknown,
    the next ingestion of a changed file finds it), keeping its id and vector, through a
    staging copy (:mod:`agentic_memory.kinds._restage`: a process killed at any point loses
    nothing, and the next use finishes the job). The users' own bases of one name share a
    collection, so every user's chunks are upgraded at once. The manifest is not touched.
    Returns whether anything was upgraded; a current base costs one cached schema read.
    """
    return upgrade_chunk_collection(store, knowledge_collection(kb, owner).name)


def upgrade_chunk_collection(store: MemoryStore, collection: str) -> bool:
    """:func:`upgrade_knowledge_base` of a chunk collection given by name."""
    own = collection.startswith(USER_CHUNKS_PREFIX)
    prefix = USER_CHUNKS_PREFIX if own else CHUNKS_PREFIX
    spec = _chunks_spec(collection.removeprefix(prefix), own=own)
    if not needs_restage(store, spec, set(store.collections())):
        return False
    earlier = dataclasses.replace(spec, properties=KNOWLEDGE_PROPERTIES_V1)
    return restage(store, spec, [earlier], upgraded_chunk)


def source_key(path: str | Path) -> str:
    """Return the key a file is stored under: its absolute path, symlinks resolved."""
    if not isinstance(path, str | Path) or str(path) == "":
        raise InvalidInputError(f"a source is a non-empty path, got {path!r}")
    if isinstance(path, str) and path.startswith(UPLOAD_SCHEME):
        return path
    return str(Path(path).expanduser().resolve())


def upload_source(name: str) -> str:
    """Return the source key of an uploaded document called ``name`` (a file name, no path)."""
    return UPLOAD_SCHEME + name


def source_entry_id(source: str) -> str:
    """Return the manifest object id of a source."""
    return make_id("knowledge-source", source)


def chunk_id(revision: str, index: int) -> str:
    """Return the id of chunk ``index`` of a revision (deterministic: re-runs overwrite)."""
    return make_id("chunk", revision, str(index))


def _generation_id() -> str:
    return make_id("knowledge-generation")


def _marker_vector(dims: int) -> list[float]:
    # Manifest objects are never searched by vector, but both backends require one of the
    # store's size; a unit vector avoids the undefined cosine of a zero vector.
    return [1.0] + [0.0] * (dims - 1)


@dataclass(frozen=True)
class SourceInfo:
    """A source of a knowledge base, as recorded by its last committed ingestion."""

    source: str
    title: str
    revision: str
    sha256: str
    pages: int
    chunks: int
    chunk_size: int
    chunk_overlap: int
    ingested_at: str

    @property
    def name(self) -> str:
        """The file name of the source."""
        return Path(self.source).name

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> SourceInfo:
        """Build from a manifest object's properties."""
        return cls(
            source=str(props["source"]),
            title=str(props.get("title") or ""),
            revision=str(props["revision"]),
            sha256=str(props.get("sha256") or ""),
            pages=int(props.get("pages") or 0),
            chunks=int(props.get("chunks") or 0),
            chunk_size=int(props.get("chunk_size") or 0),
            chunk_overlap=int(props.get("chunk_overlap") or 0),
            ingested_at=str(props.get("ingested_at") or ""),
        )


@dataclass(frozen=True)
class KnowledgeHit:
    """One chunk found by ``search_knowledge``."""

    chunk_id: str
    text: str
    source: str
    title: str
    page_start: int
    page_end: int
    score: float
    chunk_index: int = 0
    similarity: float = 0.0
    """Cosine similarity of the chunk to the query: what the relevance floor compares."""
    section: str = ""
    """The heading of the section the chunk falls under ("" when none was found)."""

    @property
    def citation(self) -> str:
        """Where the text comes from, as answers cite it: see :func:`citation_label`."""
        return citation_label(self.source, self.page_start, self.page_end)


def citation_label(source: str, page_start: int, page_end: int) -> str:
    """Return the one citation format: ``[report.pdf p.3]``, or ``[report.pdf p.3-4]``.

    The same string labels a passage in the graph's prompt (``[source p.N]``, which the
    prompts tell the model to cite), in its ``chunks`` state, in the store's ``citation``
    value and in ``amem chat``'s ``Sources:`` line (without the brackets), so a citation in
    an answer can be matched to its passage by plain comparison. Text files are page 1
    unless split at form feeds, and say so like PDFs.
    """
    name = Path(source).name
    pages = f"p.{page_start}" if page_start == page_end else f"p.{page_start}-{page_end}"
    return f"[{name} {pages}]"


# -- manifest ---------------------------------------------------------------------------------


def get_source(
    store: MemoryStore, kb: str, source: str, owner: str | None = None
) -> SourceInfo | None:
    """Return the committed manifest entry of ``source`` (a key from ``source_key``), or None."""
    existing = set(store.collections())
    manifest = manifest_collection(_collection_spelling(kb, existing, owner), owner).name
    if manifest not in existing:
        return None
    obj = store.get(manifest, source_entry_id(source), user=owner)
    if obj is None or obj.properties.get("entry") != _ENTRY_SOURCE:
        return None
    return SourceInfo.from_properties(obj.properties)


def commit_source(store: MemoryStore, kb: str, info: SourceInfo, owner: str | None = None) -> None:
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
    obj = MemoryObject(source_entry_id(info.source), props, _marker_vector(store.dims))
    store.upsert(manifest_collection(kb, owner).name, [obj], user=owner).raise_for_failures()


def pending_entry_id(source: str) -> str:
    """Return the manifest object id of a source's pending ingestion."""
    return make_id("knowledge-pending", source)


def mark_pending(
    store: MemoryStore, kb: str, source: str, revision: str, owner: str | None = None
) -> None:
    """Record that ``revision`` of ``source`` is being written (before its first chunk).

    A run killed before it finishes leaves this entry, so its chunks can be found and removed
    even when the file is renamed or deleted afterwards (:func:`prune_knowledge_base`).
    """
    props = {"entry": _ENTRY_PENDING, "kb": kb, "source": source, "revision": revision}
    obj = MemoryObject(pending_entry_id(source), props, _marker_vector(store.dims))
    store.upsert(manifest_collection(kb, owner).name, [obj], user=owner).raise_for_failures()


def clear_pending(store: MemoryStore, kb: str, source: str, owner: str | None = None) -> None:
    """Drop a source's pending entry once its ingestion is complete (or cleaned up)."""
    store.delete(manifest_collection(kb, owner).name, [pending_entry_id(source)], user=owner)


def renew_generation(store: MemoryStore, kb: str, owner: str | None = None) -> None:
    """Change the generation token; call it after a commit and before deleting any chunk."""
    props = {"entry": _ENTRY_GENERATION, "kb": kb, "token": uuid.uuid4().hex}
    obj = MemoryObject(_generation_id(), props, _marker_vector(store.dims))
    store.upsert(manifest_collection(kb, owner).name, [obj], user=owner).raise_for_failures()


def _generation(store: MemoryStore, manifest: str, owner: str | None) -> str | None:
    obj = store.get(manifest, _generation_id(), user=owner)
    return None if obj is None else str(obj.properties.get("token"))


def _read_sources(store: MemoryStore, manifest: str, owner: str | None) -> dict[str, SourceInfo]:
    sources: dict[str, SourceInfo] = {}
    where = [Where("entry", "eq", _ENTRY_SOURCE)]
    for obj in store.iterate(manifest, user=owner, where=where, page_size=_MANIFEST_PAGE):
        info = SourceInfo.from_properties(obj.properties)
        sources[info.source] = info
    return sources


# The active revisions of a manifest, cached per store and generation: a search then costs
# two single-object reads and one hybrid query while nothing is being ingested.
_ActiveKey = tuple[str, str | None]
_ACTIVE_CACHE: weakref.WeakKeyDictionary[
    MemoryStore, dict[_ActiveKey, tuple[str | None, frozenset[str]]]
]
_ACTIVE_CACHE = weakref.WeakKeyDictionary()


def _active_revisions(
    store: MemoryStore, manifest: str, generation: str | None, owner: str | None
) -> frozenset[str]:
    per_store = _ACTIVE_CACHE.setdefault(store, {})
    cached = per_store.get((manifest, owner))
    if cached is not None and generation is not None and cached[0] == generation:
        return cached[1]
    active = frozenset(info.revision for info in _read_sources(store, manifest, owner).values())
    per_store[(manifest, owner)] = (generation, active)
    return active


def list_sources(store: MemoryStore, kb: str, owner: str | None = None) -> list[SourceInfo]:
    """Return the committed sources of a knowledge base, sorted by path (none if it is missing)."""
    existing = set(store.collections())
    manifest = manifest_collection(_collection_spelling(kb, existing, owner), owner).name
    if manifest not in existing:
        return []
    return sorted(_read_sources(store, manifest, owner).values(), key=lambda s: s.source)


def list_knowledge_bases(store: MemoryStore, owner: str | None = None) -> list[str]:
    """Return the names of the shared knowledge bases, or of ``owner``'s own ones."""
    names: list[str] = []
    existing = set(store.collections())
    chunks_prefix, manifest_prefix = _prefixes(owner)
    for collection in sorted(existing):
        if not collection.startswith(chunks_prefix):
            continue
        suffix = collection.removeprefix(chunks_prefix)
        manifest = manifest_prefix + suffix
        name = suffix
        if owner is not None and (manifest not in existing or owner not in store.users(manifest)):
            continue
        if manifest in existing:
            # The manifest remembers the name as the user typed it (``docs``, not ``Docs``).
            first = store.list_objects(manifest, limit=1, user=owner)
            if first and isinstance(first[0].properties.get("kb"), str):
                name = first[0].properties["kb"]
        names.append(name)
    return names


def remove_stale_chunks(
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
    if store.count(chunks, user=owner, where=stale) == 0:
        return 0
    if renew:
        renew_generation(store, kb, owner)
    return store.delete_where(chunks, stale, user=owner)


def delete_source(store: MemoryStore, kb: str, source: str | Path, owner: str | None = None) -> int:
    """Remove a source and its chunks from a knowledge base; return how many chunks were removed.

    The manifest entry goes first, so searches stop seeing the source at once; a process
    killed before the chunks are gone leaves invisible chunks that the next ``delete_source``
    or ingestion of that path removes.
    """
    existing = set(store.collections())
    kb = _collection_spelling(kb, existing, owner)
    spec = knowledge_collection(kb, owner)
    manifest = manifest_collection(kb, owner).name
    if spec.name not in existing or manifest not in existing:
        raise UnknownSourceError(f"knowledge base {kb!r} does not exist")
    key = str(source) if get_source(store, kb, str(source), owner) else source_key(source)
    of_source = [Where("source", "eq", key)]
    pending = store.get(manifest, pending_entry_id(key), user=owner)
    if (
        get_source(store, kb, key, owner) is None
        and pending is None
        and store.count(spec.name, user=owner, where=of_source) == 0
    ):
        raise UnknownSourceError(f"knowledge base {kb!r} has no source {key!r}")
    store.delete(manifest, [source_entry_id(key)], user=owner)
    renew_generation(store, kb, owner)
    removed = store.delete_where(spec.name, of_source, user=owner)
    # Last: while it exists, a prune still knows the source's leftovers.
    clear_pending(store, kb, key, owner)
    return removed


@dataclass(frozen=True)
class PruneReport:
    """What :func:`prune_knowledge_base` removed."""

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


def prune_knowledge_base(
    store: MemoryStore,
    kb: str,
    *,
    gone: Callable[[str], bool] = file_is_gone,
    owner: str | None = None,
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
        store: The store.
        kb: The knowledge base (any case).
        gone: Decides whether a source path no longer exists (default: ``file_is_gone``).
        owner: The user whose own knowledge base it is (``None``: a shared one).
    """
    spelling = resolve_kb(store, kb, owner)
    existing = set(store.collections())
    chunks = knowledge_collection(spelling, owner).name
    manifest = manifest_collection(spelling, owner).name
    if chunks not in existing or manifest not in existing:
        return PruneReport(kb=spelling, sources=[], chunks=0)
    candidates: set[str] = set()
    offset = 0
    while True:
        page = store.list_objects(
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
    missing = sorted(source for source in candidates if source and gone(source))
    removed = 0
    for start in range(0, len(missing), _PRUNE_BATCH):
        batch = missing[start : start + _PRUNE_BATCH]
        store.delete(manifest, [source_entry_id(source) for source in batch], user=owner)
        renew_generation(store, spelling, owner)
        removed += store.delete_where(chunks, [Where("source", "in", batch)], user=owner)
        store.delete(manifest, [pending_entry_id(source) for source in batch], user=owner)
    return PruneReport(kb=spelling, sources=missing, chunks=removed)


def drop_knowledge_base(store: MemoryStore, kb: str, owner: str | None = None) -> None:
    """Delete a knowledge base (its chunks and its manifest); a missing one is not an error.

    A user's own base is deleted from the collections it shares with other users' bases
    of the same name; theirs stay.
    """
    existing = set(store.collections())
    kb = _collection_spelling(kb, existing, owner)
    # The manifest goes first: without it, no chunk is visible any more.
    for name in (manifest_collection(kb, owner).name, knowledge_collection(kb, owner).name):
        if name not in existing:
            continue
        if owner is None:
            store.drop_collection(name)
        else:
            store.delete_user(name, owner)


# -- search -----------------------------------------------------------------------------------


def search_knowledge(
    store: MemoryStore,
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
    upgraded first (:func:`upgrade_knowledge_base`). ``owner``: search
    that user's own knowledge base ``kb`` instead of the shared one. ``min_similarity`` is a
    relevance floor (``None``: none): a chunk whose cosine similarity to the query is below
    it is left out, so a message the documents do not answer gets no passage at all (the fused score cannot
    serve: relativeScoreFusion rescales every search so that its best hit scores near 1).
    See :data:`RELEVANCE_FLOORS` for the measured defaults.
    """
    knowledge_collection(kb, owner)
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
    check_text(query, "the query")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    if min_similarity is not None:
        check_min_similarity(min_similarity)
    existing = set(store.collections())
    kb = _collection_spelling(kb, existing, owner)
    spec = knowledge_collection(kb, owner)
    manifest = manifest_collection(kb, owner).name
    if not query.strip() or manifest not in existing:
        return []
    if needs_restage(store, spec, existing):
        upgrade_knowledge_base(store, kb, owner)
        existing = set(store.collections())
    if spec.name not in existing:
        return []
    vector = embeddings.embed_query(embedded_part(query))
    keywords = keyword_query(query)
    hits: list[KnowledgeHit] = []
    for _ in range(_SEARCH_ATTEMPTS):
        before = _generation(store, manifest, owner)
        active = _active_revisions(store, manifest, before, owner)
        if not active:
            return []
        hits = _search_active(store, spec.name, keywords, vector, k, alpha, active, owner)
        if _generation(store, manifest, owner) == before:
            break
    if min_similarity is None:
        return hits
    return [h for h in hits if h.similarity >= min_similarity]


def _search_active(
    store: MemoryStore,
    collection: str,
    query: str,
    vector: list[float],
    k: int,
    alpha: float,
    active: frozenset[str],
    owner: str | None,
) -> list[KnowledgeHit]:
    if len(active) <= IN_FILTER_MAX_REVISIONS:
        found = store.hybrid(
            collection,
            query=query,
            vector=vector,
            alpha=alpha,
            limit=k,
            user=owner,
            where=[Where("revision", "in", sorted(active))],
        )
        return [_hit(store, collection, h, vector, owner) for h in found]
    # Too many revisions for one filter: over-fetch and keep the active ones. Invisible
    # chunks are rare (only what a killed run left), so one round nearly always suffices.
    limit = k * 4
    while True:
        found = store.hybrid(
            collection, query=query, vector=vector, alpha=alpha, limit=limit, user=owner
        )
        kept = [h for h in found if h.properties.get("revision") in active]
        if len(kept) >= k or len(found) < limit:
            return [_hit(store, collection, h, vector, owner) for h in kept[:k]]
        limit *= 4


def _similarity(
    store: MemoryStore, collection: str, hit: SearchHit, vector: list[float], owner: str | None
) -> float:
    """Return the hit's cosine similarity to the query vector.

    The hybrid search reports it for the chunks among its vector candidates; a chunk found by
    its keywords alone (or with ``alpha`` 0) is read back with its vector.
    """
    if hit.vector_score is not None:
        return float(hit.vector_score)
    stored = store.get(collection, hit.id, user=owner, include_vector=True)
    if stored is None or not stored.vector:
        return 0.0
    a, b = np.asarray(vector, dtype=np.float64), np.asarray(stored.vector, dtype=np.float64)
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


def _hit(
    store: MemoryStore,
    collection: str,
    found: SearchHit,
    vector: list[float],
    owner: str | None,
) -> KnowledgeHit:
    id, props, score = found.id, found.properties, found.score
    return KnowledgeHit(
        chunk_id=id,
        text=str(props.get("text") or ""),
        source=str(props.get("source") or ""),
        title=str(props.get("title") or ""),
        page_start=int(props.get("page_start") or 1),
        page_end=int(props.get("page_end") or props.get("page_start") or 1),
        score=float(score),
        chunk_index=int(props.get("chunk_index") or 0),
        similarity=_similarity(store, collection, found, vector, owner),
        section=str(props.get("section") or ""),
    )


RELEVANCE_FLOORS: dict[str, float] = {"wordllama-l2-supercat-256": 0.25}
"""Default relevance floor (cosine) per embedding model, measured by
``bench/relevance_floor_bench.py`` (``bench/results/relevance_floor.md``): with the offline
WordLlama model, the passage answering each of 40 real questions about this project's docs
scored at least 0.28, while the best passage for 220 messages the docs do not answer (LoCoMo
conversation turns and questions, everyday statements such as "I'm vegetarian and allergic
to peanuts") scored 0.17 at the median and 0.27 at the 95th percentile. 0.25 keeps every
answering passage with a 0.03 margin and leaves 90 % of those messages (95 % of the
everyday statements, every diet and allergy one) without a passage. Cosine scales differ
between models, so an unmeasured model gets no floor until the run sets one."""


def check_min_similarity(value: object) -> float:
    """Return a valid relevance floor (a number in [-1, 1]) or raise ``InvalidInputError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
        raise InvalidInputError(f"min_similarity must be a number in [-1, 1], got {value!r}")
    return float(value)


def default_relevance_floor(embeddings: Embeddings) -> float | None:
    """Return the measured floor of ``embeddings``' model (:data:`RELEVANCE_FLOORS`), else None."""
    if isinstance(embeddings, LocalEmbeddings):
        return RELEVANCE_FLOORS["wordllama-l2-supercat-256"]
    return None


def list_chunks(
    store: MemoryStore, kb: str, source: str, owner: str | None = None
) -> list[StoredObject]:
    """Return the visible chunks of one source in order (for inspection and tests)."""
    kb = _collection_spelling(kb, set(store.collections()), owner)
    info = get_source(store, kb, source, owner)
    if info is None:
        return []
    chunks = knowledge_collection(kb, owner).name
    where = [Where("source", "eq", source), Where("revision", "eq", info.revision)]
    found = store.iterate(chunks, user=owner, where=where, page_size=_MANIFEST_PAGE)
    return sorted(found, key=lambda o: (int(o.properties.get("chunk_index") or 0), o.id))


def revision_of(
    source: str, sha256: str, chunk_size: int, chunk_overlap: int, pipeline: str
) -> str:
    """Return the revision key of one ingestion of a source with given splitter settings."""
    key = "\x1f".join((pipeline, source, sha256, str(chunk_size), str(chunk_overlap)))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def now_rfc3339() -> str:
    """Return the current time as an RFC 3339 string with a timezone."""
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- one knowledge base and its replace protocol ------------------------------------------------


class KnowledgeBase:
    """One knowledge base (shared, or ``owner``'s own) and the replace protocol of its sources.

    Ingestion (``agentic_memory.ingest.pipeline``) writes a source only through these steps, in this order
    (the module doc says why each is safe when a process is killed between two of them):

    1. :meth:`keep`: the source's committed revision is the one about to be written and
       complete, so nothing is written (what a killed run left is cleaned up);
    2. otherwise :meth:`begin` (the pending entry), :meth:`write_chunks` (invisible to
       searches), :meth:`commit` (the one-object commit point) and :meth:`finish` (a new
       generation, the old revision's chunks deleted, the pending entry dropped).

    Storage code, synchronous like the rest of this module: ingestion runs it in a worker
    thread.
    """

    def __init__(self, store: MemoryStore, kb: str, owner: str | None = None) -> None:
        """Use the knowledge base ``kb`` (any spelling; created when missing) of ``owner``."""
        self.store = store
        self.owner = owner
        self.name = ensure_knowledge_base(store, kb, owner)
        """The knowledge base's kept spelling."""
        self.chunks = knowledge_collection(self.name, owner).name
        self.manifest = manifest_collection(self.name, owner).name

    def current(self, source: str) -> SourceInfo | None:
        """Return the committed entry of ``source``, or ``None``."""
        return get_source(self.store, self.name, source, self.owner)

    def is_complete(self, info: SourceInfo) -> bool:
        """Whether every chunk of the committed revision ``info`` is stored."""
        where = [Where("source", "eq", info.source), Where("revision", "eq", info.revision)]
        return self.store.count(self.chunks, user=self.owner, where=where) == info.chunks

    def unchanged(self, source: str, revision: str) -> SourceInfo | None:
        """Return the committed entry if ``revision`` is it and complete, else ``None``."""
        current = self.current(source)
        if current is None or current.revision != revision or not self.is_complete(current):
            return None
        return current

    def keep(self, source: str, revision: str) -> int:
        """Keep the committed ``revision``: remove what a killed run left; return chunks removed."""
        removed = remove_stale_chunks(self.store, self.name, source, revision, owner=self.owner)
        # A read first: an up-to-date file costs no write unless a killed run left a mark.
        if self.store.get(self.manifest, pending_entry_id(source), user=self.owner):
            clear_pending(self.store, self.name, source, self.owner)
        return removed

    def begin(self, source: str, revision: str) -> None:
        """Record that ``revision`` of ``source`` is being written (before its first chunk)."""
        mark_pending(self.store, self.name, source, revision, self.owner)

    def write_chunks(self, objects: list[MemoryObject]) -> None:
        """Write chunks of a begun revision (invisible until :meth:`commit`)."""
        self.store.upsert(self.chunks, objects, user=self.owner).raise_for_failures()

    def commit(self, info: SourceInfo) -> None:
        """Make ``info.revision`` visible: the one-object commit point."""
        commit_source(self.store, self.name, info, self.owner)

    def finish(self, info: SourceInfo) -> int:
        """After :meth:`commit`: delete the older chunks and the pending entry; return chunks."""
        renew_generation(self.store, self.name, self.owner)
        removed = remove_stale_chunks(
            self.store, self.name, info.source, info.revision, renew=False, owner=self.owner
        )
        clear_pending(self.store, self.name, info.source, self.owner)
        return removed


# -- coroutine functions: each runs its storage function whole in a worker thread -------------

aprune_knowledge_base = in_thread_function(prune_knowledge_base)
asearch_knowledge = in_thread_function(search_knowledge)
alist_sources = in_thread_function(list_sources)
adelete_source = in_thread_function(delete_source)
alist_knowledge_bases = in_thread_function(list_knowledge_bases)
afind_knowledge_base = in_thread_function(find_knowledge_base)
aget_source = in_thread_function(get_source)
alist_chunks = in_thread_function(list_chunks)
