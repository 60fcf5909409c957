"""Knowledge bases' names, collections and records: what a chunk and a manifest entry are.

The protocol is described in :mod:`agentic_memory.kinds.knowledge.base`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_memory.kinds._bound import check_user_id
from agentic_memory.kinds._restage import needs_restage, restage
from agentic_memory.kinds.recall_text import (
    chunk_search_text,
    search_text_property,
)
from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryStore,
    Property,
    make_id,
)

MANIFEST_PREFIX = "KnowledgeSources_"
CHUNKS_PREFIX = "Knowledge_"
USER_MANIFEST_PREFIX = "UserKnowledgeSources_"
USER_CHUNKS_PREFIX = "UserKnowledge_"
UPLOAD_SCHEME = "upload://"
"""The start of the source of an uploaded document (``upload://notes.md``): not a path."""

_ENTRY_SOURCE = "source"
_ENTRY_GENERATION = "generation"
_ENTRY_PENDING = "pending"


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
searched. A knowledge base holding them is upgraded on first use (``Knowledge.aupgrade``)."""


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


def upgraded_chunk(props: dict[str, Any]) -> dict[str, Any]:
    """Return a chunk stored before the keyword text with it (its section unknown)."""
    text, title = str(props.get("text") or ""), str(props.get("title") or "")
    return {**props, "section": "", "search_text": chunk_search_text(text, title=title)}


def upgrade_chunk_collection(store: MemoryStore, collection: str) -> bool:
    """Upgrade a chunk collection an earlier version wrote (``Knowledge.aupgrade``).

    Storage code: it takes turns with other processes (``_restage``); callers in a loop run
    it in a worker thread.
    """
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
