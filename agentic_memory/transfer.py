"""Export and import every kind of memory as JSON Lines, on any storage backend.

The file starts with a header line (format, version, embedding model and vector size, and the
schema of every collection it holds), followed by one object per line::

    {"kind": "fact", "collection": "UserFact", "user": "alice", "id": "…",
     "properties": {...}, "vector": [...]}

``kind`` is one of ``episode``, ``fact``, ``message``, ``rule``, ``chunk`` (a knowledge-base
chunk) and ``source`` (an entry of a knowledge base's manifest, which says which revision of
each source is visible). Ids and
properties are written exactly as stored, so an export → forget → import round trip restores the
same memories. This is also how memories move from the embedded store to Weaviate: the import
writes through the ``MemoryStore`` interface and re-embeds from the text when the target uses a
different embedding model or vector size.

An import validates the whole file before it writes anything: a bad line is reported with its
line number and the store is left untouched.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_memory.kinds import episodes, facts, messages, rules
from agentic_memory.kinds.episodes import EPISODES
from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.knowledge import (
    CHUNKS_PREFIX,
    KNOWLEDGE_PROPERTIES,
    MANIFEST_PREFIX,
    MANIFEST_PROPERTIES,
    USER_CHUNKS_PREFIX,
    USER_MANIFEST_PREFIX,
)
from agentic_memory.kinds.messages import MESSAGES, MESSAGES_V1
from agentic_memory.kinds.rules import RULES
from agentic_memory.store.base import PAGE_LIMIT, MemoryStore, check_user_id
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Property,
    StoredObject,
    UnknownCollectionError,
    check_text,
)

FORMAT_NAME = "agentic-memory-export"
FORMAT_VERSION = 1

Kind = Literal["episode", "fact", "message", "rule", "chunk", "source"]
KINDS: tuple[Kind, ...] = ("episode", "fact", "message", "rule", "chunk", "source")

_KIND_BY_COLLECTION: dict[str, Kind] = {
    EPISODES.name: "episode",
    FACTS.name: "fact",
    MESSAGES.name: "message",
    RULES.name: "rule",
}


class TransferError(InvalidInputError):
    """An export file is malformed or does not fit the target store; nothing was written."""


@dataclass
class TransferSummary:
    """What an export or import moved: object counts per (collection, user) and notes."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    """``(collection, user)`` → objects; the user is ``""`` for shared collections."""
    reembedded: bool = False
    """The import computed new vectors from the text instead of using the file's vectors."""
    notes: list[str] = field(default_factory=list)
    """Human-readable remarks, for example why vectors were recomputed."""

    @property
    def total(self) -> int:
        """The number of objects moved."""
        return sum(self.counts.values())

    def by_kind(self) -> dict[str, int]:
        """Return the object counts per memory kind."""
        out: dict[str, int] = {}
        for (collection, _user), n in self.counts.items():
            kind = kind_of(collection) or "other"
            out[kind] = out.get(kind, 0) + n
        return out

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly view."""
        return {
            "total": self.total,
            "by_kind": self.by_kind(),
            "counts": [
                {"collection": c, "user": u or None, "count": n}
                for (c, u), n in sorted(self.counts.items())
            ],
            "reembedded": self.reembedded,
            "notes": list(self.notes),
        }


def kind_of(collection: str) -> Kind | None:
    """Return the memory kind stored in ``collection``, or ``None`` for a foreign collection."""
    if collection in _KIND_BY_COLLECTION:
        return _KIND_BY_COLLECTION[collection]
    if collection.startswith((MANIFEST_PREFIX, USER_MANIFEST_PREFIX)):
        return "source"
    if collection.startswith((CHUNKS_PREFIX, USER_CHUNKS_PREFIX)):
        return "chunk"
    return None


# -- the text each kind is embedded from (each kind's own, so imports rank alike) ------------

_TEXT_BY_KIND: dict[Kind, Callable[[Mapping[str, Any]], str]] = {
    "episode": episodes.embedding_text,
    "fact": facts.embedding_text,
    "message": messages.embedding_text_of,
    "rule": rules.embedding_text,
    "chunk": lambda p: str(p.get("text") or ""),
    "source": lambda p: str(p.get("title") or p.get("source") or ""),
}


def embedding_text(kind: Kind, properties: Mapping[str, Any]) -> str:
    """Return the text an object of ``kind`` is embedded from, for re-embedding on import."""
    return _TEXT_BY_KIND[kind](properties) or " "


# -- schemas in the header ---------------------------------------------------------------------


def spec_to_dict(spec: CollectionSpec) -> dict[str, Any]:
    """Serialise a collection schema for the export header."""
    return spec.to_dict()


def spec_from_dict(data: object) -> CollectionSpec:
    """Rebuild a collection schema from the export header; raise ``TransferError`` if malformed."""
    try:
        return CollectionSpec.from_dict(data)
    except InvalidInputError as exc:
        raise TransferError(f"malformed collection schema in the header: {exc}") from None


# -- export ------------------------------------------------------------------------------------


def _page(
    store: MemoryStore, collection: str, user: str | None, page_size: int, vectors: bool
) -> Iterator[StoredObject]:
    # Keyset pages by id: no result-window cap (Weaviate's QUERY_MAXIMUM_RESULTS).
    return store.iterate(collection, user=user, page_size=page_size, include_vector=vectors)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _compact(vector: Sequence[float]) -> list[float]:
    # Both backends keep float32; nine significant digits restore the same float32 exactly
    # and halve the file compared with the float64 repr.
    return [float(f"{x:.9g}") for x in np.asarray(vector, dtype=np.float32).tolist()]


def export_memories(
    store: MemoryStore,
    out: TextIO,
    *,
    users: Sequence[str] | None = None,
    include_shared: bool = True,
    include_vectors: bool = True,
    embedding_model: str,
    page_size: int = 200,
) -> TransferSummary:
    """Write the store's memories to ``out`` as JSON Lines.

    Args:
        store: The store to read.
        out: A text stream opened for writing.
        users: Export only these users' per-user memories; ``None`` exports every user,
            including the global rule scope.
        include_shared: Also export the shared collections (knowledge bases).
        include_vectors: Write each object's vector; without them the import re-embeds.
        embedding_model: The name of the embedding model that produced the store's vectors.
        page_size: Objects read per request.

    Returns:
        The counts written per collection and user.
    """
    if users is not None:
        if isinstance(users, str):
            raise InvalidInputError("users must be a sequence of user ids, not one string")
        for u in users:
            check_user_id(u)
    if not 0 < page_size <= PAGE_LIMIT:
        raise InvalidInputError(f"page_size must be in 1..{PAGE_LIMIT}, got {page_size!r}")
    summary = TransferSummary()
    specs: list[CollectionSpec] = []
    for name in sorted(store.collections()):
        if kind_of(name) is None:
            summary.notes.append(f"skipped collection {name!r}: not an agent memory collection")
            continue
        spec = store.spec(name)
        if not spec.per_user and not include_shared:
            continue
        specs.append(spec)

    plan: list[tuple[CollectionSpec, str | None]] = []
    for spec in specs:
        if not spec.per_user:
            plan.append((spec, None))
            continue
        present = store.users(spec.name)
        wanted = present if users is None else [u for u in users if u in present]
        plan.extend((spec, u) for u in sorted(wanted))
    if users is not None:
        found = {u for _, u in plan}
        summary.notes.extend(
            f"user {u!r} has no memories in this store" for u in users if u not in found
        )

    header = {
        "kind": "header",
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "backend": getattr(store, "backend", "unknown"),
        "embedding_model": embedding_model,
        "dims": store.dims,
        "vectors": include_vectors,
        "users": sorted({u for _, u in plan if u is not None}),
        "collections": {spec.name: spec_to_dict(spec) for spec in specs},
    }
    out.write(json.dumps(header, ensure_ascii=False) + "\n")

    for spec, user in plan:
        kind = kind_of(spec.name)
        assert kind is not None
        n = 0
        for obj in _page(store, spec.name, user, page_size, include_vectors):
            vector = obj.vector if include_vectors else None
            line = {
                "kind": kind,
                "collection": spec.name,
                "user": user,
                "id": obj.id,
                "properties": {k: _json_value(v) for k, v in obj.properties.items()},
                "vector": _compact(vector) if vector is not None else None,
            }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            n += 1
        if n:
            summary.counts[(spec.name, user or "")] = n
    return summary


def export_to_file(store: MemoryStore, path: str | Path, **kwargs: Any) -> TransferSummary:
    """Export to a file path (see ``export_memories`` for the keyword arguments).

    The file is written next to its final name and renamed at the end, so a failed export
    never leaves a truncated file behind. It is private (0600, whatever the umask), like the
    store it comes from: it holds everything the users said.
    """
    target = Path(path)
    if target.is_dir():
        raise InvalidInputError(f"{target} is a directory; give a file name such as mem.jsonl")
    if not target.parent.exists():
        raise InvalidInputError(f"folder {target.parent} does not exist")
    # mkstemp creates the file 0600 under a name no other process uses.
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            summary = export_memories(store, fh, **kwargs)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return summary


# -- import ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportHeader:
    """The first line of an export file."""

    version: int
    embedding_model: str
    dims: int
    collections: dict[str, CollectionSpec]
    users: list[str]


@dataclass
class _Line:
    kind: Kind
    collection: str
    user: str | None
    id: str
    properties: dict[str, Any]
    vector: list[float] | None


def _fail(lineno: int, message: str) -> TransferError:
    return TransferError(f"line {lineno}: {message}")


def _parse_header(text: str) -> ExportHeader:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(1, f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("kind") != "header":
        raise _fail(1, "the first line must be the export header (kind 'header')")
    if data.get("format") != FORMAT_NAME:
        raise _fail(1, f"not an agentic-memory export (format {data.get('format')!r})")
    version = data.get("version")
    if version != FORMAT_VERSION:
        raise _fail(
            1, f"unsupported format version {version!r} (this build reads {FORMAT_VERSION})"
        )
    dims = data.get("dims")
    if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
        raise _fail(1, f"header dims must be a positive integer, got {dims!r}")
    model = data.get("embedding_model")
    if not isinstance(model, str) or not model:
        raise _fail(1, "header embedding_model is missing")
    raw_cols = data.get("collections")
    if not isinstance(raw_cols, dict):
        raise _fail(1, "header collections must be an object")
    collections = {name: spec_from_dict(spec) for name, spec in raw_cols.items()}
    for name, spec in collections.items():
        if spec.name != name:
            raise _fail(1, f"collection {name!r} has a schema named {spec.name!r}")
        if kind_of(name) is None:
            raise _fail(1, f"collection {name!r} is not an agent memory collection")
        _check_known_schema(spec)
    users = data.get("users", [])
    if not isinstance(users, list):
        raise _fail(1, "header users must be a list")
    return ExportHeader(FORMAT_VERSION, model, dims, collections, [str(u) for u in users])


def _structure(properties: Sequence[Property]) -> list[tuple[str, str, bool, bool]]:
    return [(p.name, p.type, p.searchable, p.filterable) for p in properties]


def _check_known_schema(spec: CollectionSpec) -> None:
    """Refuse a file whose schema differs from this build's schema for that collection."""
    known = {c.name: (c.properties, c.per_user) for c in (EPISODES, FACTS, RULES, MESSAGES)}
    shared = {"chunk": KNOWLEDGE_PROPERTIES, "source": MANIFEST_PROPERTIES}
    kind = kind_of(spec.name)
    if spec.name in known:
        expected = known[spec.name]
    elif kind in shared:
        # A user's own knowledge bases are partitioned by user; the shared ones are not.
        own = spec.name.startswith((USER_CHUNKS_PREFIX, USER_MANIFEST_PREFIX))
        expected = (shared[str(kind)], own)
    else:
        raise TransferError(f"collection {spec.name!r} is not an agent memory collection")
    if spec.name == MESSAGES.name and (
        _structure(spec.properties),
        spec.per_user,
    ) == (_structure(MESSAGES_V1.properties), MESSAGES_V1.per_user):
        return  # an earlier version's log: agentic_memory.kinds.messages upgrades it on first use
    # Descriptions may change between versions; names, types and indexing may not. An
    # earlier version's schema may lack properties added at the end since (the import adds
    # them: MemoryStore.extend_collection).
    wanted = _structure(expected[0])
    given = _structure(spec.properties)
    if (given, spec.per_user) != (wanted[: len(given)], expected[1]) or not given:
        raise TransferError(
            f"collection {spec.name!r} in the file has a different schema than this build's "
            "(exported by another version of agentic-memory?)"
        )


def _extends(longer: CollectionSpec, shorter: CollectionSpec) -> bool:
    """Whether ``longer`` is ``shorter`` with properties added at its end."""
    a, b = _structure(longer.properties), _structure(shorter.properties)
    return a[: len(b)] == b


def _is_text(value: object) -> bool:
    """Say whether a value is a string of valid Unicode (JSON escapes can make lone surrogates)."""
    if not isinstance(value, str):
        return False
    try:
        check_text(value, "text")
    except InvalidInputError:
        return False
    return True


_PROPERTY_CHECKS: dict[str, Callable[[Any], bool]] = {
    "text": _is_text,
    "text[]": lambda v: isinstance(v, list) and all(_is_text(x) for x in v),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: (
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))
    ),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, str) and _is_rfc3339(v),
}


def _is_rfc3339(value: str) -> bool:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


def _parse_line(lineno: int, text: str, header: ExportHeader, need_vectors: bool) -> _Line:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(lineno, f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise _fail(lineno, "expected a JSON object")
    kind = data.get("kind")
    if kind not in KINDS:
        raise _fail(lineno, f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    collection = data.get("collection")
    if not isinstance(collection, str) or collection not in header.collections:
        raise _fail(lineno, f"collection {collection!r} is not declared in the header")
    if kind_of(collection) != kind:
        raise _fail(lineno, f"kind {kind!r} does not match collection {collection!r}")
    spec = header.collections[collection]
    user = data.get("user")
    if spec.per_user:
        try:
            check_user_id(user)
        except InvalidInputError as exc:
            raise _fail(lineno, f"{collection} is per-user: {exc}") from None
    elif user is not None:
        raise _fail(lineno, f"{collection} is shared: user must be null")
    obj_id = data.get("id")
    try:
        uuid.UUID(str(obj_id))
    except ValueError:
        raise _fail(lineno, f"id {obj_id!r} is not a UUID") from None
    if not isinstance(obj_id, str):
        raise _fail(lineno, "id must be a string")
    props = data.get("properties")
    if not isinstance(props, dict):
        raise _fail(lineno, "properties must be an object")
    types = {p.name: p.type for p in spec.properties}
    for key, value in props.items():
        if key not in types:
            raise _fail(lineno, f"{collection} has no property {key!r}")
        if value is not None and not _PROPERTY_CHECKS[types[key]](value):
            raise _fail(lineno, f"{collection}.{key} must be {types[key]}, got {value!r:.60}")
    vector = data.get("vector")
    if vector is not None:
        if not isinstance(vector, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in vector
        ):
            raise _fail(lineno, "vector must be a list of finite numbers or null")
        if len(vector) != header.dims:
            raise _fail(
                lineno, f"vector has {len(vector)} dimensions, the header says {header.dims}"
            )
    elif need_vectors:
        raise _fail(lineno, "vector is missing")
    return _Line(kind, collection, user, obj_id, props, vector)


def read_header(path: str | Path) -> ExportHeader:
    """Read and validate the header of an export file."""
    with _open(path) as fh:
        first = fh.readline()
    if not first.strip():
        raise TransferError(f"{path} is empty")
    return _parse_header(first)


def _open(path: str | Path) -> TextIO:
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"no such file: {p}")
    return p.open("r", encoding="utf-8")


def _iter_lines(path: str | Path, header: ExportHeader, need_vectors: bool) -> Iterator[_Line]:
    with _open(path) as fh:
        fh.readline()
        for lineno, text in enumerate(fh, start=2):
            if not text.strip():
                continue
            yield _parse_line(lineno, text, header, need_vectors)


def _reembed(embeddings: Embeddings, lines: Sequence[_Line], dims: int) -> list[list[float]]:
    # Manifest entries are never searched by vector: they keep the unit marker vector
    # agentic_memory.kinds.knowledge gives them, whatever the model.
    texts = [embedding_text(ln.kind, ln.properties) for ln in lines if ln.kind != "source"]
    computed = iter(embeddings.embed_documents(texts) if texts else [])
    marker = [1.0] + [0.0] * (dims - 1)
    return [list(marker) if ln.kind == "source" else next(computed) for ln in lines]


def import_memories(
    store: MemoryStore,
    path: str | Path,
    *,
    embeddings: Embeddings | None,
    embedding_model: str,
    reembed: bool = False,
    batch_size: int = 100,
    progress: Callable[[int], None] | None = None,
) -> TransferSummary:
    """Import an export file into ``store``; objects keep their ids (an import is idempotent).

    The file is read twice: first to validate every line (nothing is written if any line is
    bad), then to write. Vectors are recomputed from each object's text when ``reembed`` is set,
    when the file has no vectors, or when the file's embedding model or vector size differs from
    the target's.

    Args:
        store: The target store, opened with the target's vector size.
        path: The JSON Lines file written by ``export_memories``.
        embeddings: The target's embedding model; needed only when re-embedding.
        embedding_model: The target embedding model's name, compared with the file's.
        reembed: Recompute every vector even when the file's vectors fit.
        batch_size: Objects per upsert.
        progress: Called with the number of objects written after each batch.

    Returns:
        The counts written per collection and user, and whether vectors were recomputed.
    """
    if batch_size <= 0:
        raise InvalidInputError(f"batch_size must be positive, got {batch_size!r}")
    header = read_header(path)
    summary = TransferSummary()
    why: str | None = None
    if reembed:
        why = "re-embedding was requested"
    elif header.dims != store.dims:
        why = f"the file's vectors have {header.dims} dimensions, the target store {store.dims}"
    elif header.embedding_model != embedding_model:
        why = (
            f"the file was embedded with {header.embedding_model!r}, "
            f"the target uses {embedding_model!r}"
        )
    # Validation pass: every line is parsed before anything is written.
    missing_vectors = 0
    total = 0
    for line in _iter_lines(path, header, need_vectors=False):
        total += 1
        if line.vector is None:
            missing_vectors += 1
    if why is None and missing_vectors:
        why = f"{missing_vectors} object(s) in the file have no vector"
    if why is not None:
        if embeddings is None:
            raise TransferError(f"the import must re-embed ({why}) but no embeddings were given")
        dims = getattr(embeddings, "dims", None)
        if dims != store.dims:
            raise TransferError(
                f"the target embeddings give {dims}-d vectors but the store uses {store.dims}"
            )
        summary.reembedded = True
        summary.notes.append(f"vectors recomputed from the text: {why}")

    older: set[str] = set()
    for name, spec in header.collections.items():
        try:
            existing = store.spec(name)
        except UnknownCollectionError:
            continue
        if existing.per_user != spec.per_user:
            raise TransferError(f"collection {name!r} exists in the target with another schema")
        if _extends(existing, spec):
            older.add(name)  # the file was written before properties the target has
        elif not _extends(spec, existing):
            raise TransferError(f"collection {name!r} exists in the target with another schema")
    for spec in header.collections.values():
        if spec.name not in older:
            # Creates it, or adds what a target written by an earlier version lacks.
            store.extend_collection(spec)

    # Keyed by id: a later line for the same id replaces the earlier one, as a second upsert would.
    pending: dict[tuple[str, str | None], dict[str, _Line]] = {}
    written = 0

    def flush(key: tuple[str, str | None]) -> None:
        nonlocal written
        lines = list(pending.pop(key, {}).values())
        if not lines:
            return
        if summary.reembedded:
            assert embeddings is not None
            vectors = _reembed(embeddings, lines, store.dims)
        else:
            vectors = [ln.vector if ln.vector is not None else [] for ln in lines]
        objects = [
            MemoryObject(id=ln.id, properties=ln.properties, vector=vec)
            for ln, vec in zip(lines, vectors, strict=True)
        ]
        result = store.upsert(key[0], objects, user=key[1])
        result.raise_for_failures()
        count_key = (key[0], key[1] or "")
        summary.counts[count_key] = summary.counts.get(count_key, 0) + len(result.ids)
        written += len(result.ids)
        if progress is not None:
            progress(written)

    for line in _iter_lines(path, header, need_vectors=False):
        key = (line.collection, line.user)
        bucket = pending.setdefault(key, {})
        bucket[line.id] = line
        if len(bucket) >= batch_size:
            flush(key)
    for key in list(pending):
        flush(key)
    if total == 0:
        summary.notes.append("the file holds no memories")
    return summary


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KINDS",
    "ExportHeader",
    "Kind",
    "TransferError",
    "TransferSummary",
    "embedding_text",
    "export_memories",
    "export_to_file",
    "import_memories",
    "kind_of",
    "read_header",
    "spec_from_dict",
    "spec_to_dict",
]
