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

An import checks the whole file before it writes anything (a bad line is reported with its
line number), then writes it all or nothing: one transaction on the embedded store, undone on
Weaviate. Into a store that holds memories already it merges by each kind's rules (see
:func:`import_memories`). A user's own knowledge bases (their uploads) are their data, like
their facts. The shared knowledge bases and the rules shared by every user are imported only
when the operator allows it (``allow_shared``, ``amem memories import --shared``), and the
shared rules even then only through their gate: the file's latest version becomes a pending
proposal (:class:`agentic_memory.kinds.shared_rules.SharedRules`) that an operator approves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.builtin import MAX_EPISODE_CHARS
from agentic_memory.kinds.contract import (
    ImportGate,
    ImportLine,
    KindRegistry,
    MemoryKind,
    StagedLines,
    current_kinds,
    whose,
)
from agentic_memory.kinds.registry import BUILTIN_KINDS
from agentic_memory.store.base import (
    GLOBAL_SCOPE,
    PAGE_LIMIT,
    MemoryStore,
    check_properties,
    check_user_id,
)
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Property,
    StoredObject,
)
from agentic_memory.twins import run_sync

FORMAT_NAME = "agentic-memory-export"
FORMAT_VERSION = 1

Kind = str
"""The ``kind`` of an export line: one of a memory kind's ``KindInfo.line_kinds``."""
KINDS: tuple[Kind, ...] = BUILTIN_KINDS.line_kinds
"""The line kinds of the built-in memory kinds (``fact``, ``episode``, ``rule``,
``message``, ``chunk``, ``source``); a registry set by ``use_kinds`` may add others."""


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
    proposal: str | None = None
    """The pending proposal of the shared rules an import made from the file's shared rules
    (an operator approves it: ``amem memories rules approve``); ``None`` when it made none."""

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
            "proposal": self.proposal,
            "notes": list(self.notes),
        }


def kind_of(collection: str) -> Kind | None:
    """Return the line kind stored in ``collection``, or ``None`` for a foreign collection."""
    found = current_kinds().of_collection(collection)
    return None if found is None else found[1]


def _memory_kind(kind: Kind) -> MemoryKind:
    found = current_kinds().of_line_kind(kind)
    if found is None:
        raise TransferError(f"no memory kind stores {kind!r} objects")
    return found


# -- the text each kind is embedded from (each kind's own, so imports rank alike) ------------


def embedding_text(kind: Kind, properties: Mapping[str, Any]) -> str:
    """Return the text an object of ``kind`` is embedded from, for re-embedding on import."""
    return _memory_kind(kind).embedding_text(kind, properties) or " "


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
    kinds: Sequence[str] | None = None,
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
        kinds: Export only these memory kinds (their registry names; ``None``: every kind).

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
    registry = current_kinds()
    if isinstance(kinds, str):
        raise InvalidInputError("kinds must be a sequence of kind names, not one string")
    chosen = None if kinds is None else {registry.get(k).info.name for k in kinds}
    for name in sorted(store.collections()):
        if name in registry.bookkeeping:
            continue  # no memory: the store it is in keeps it
        # A collection a kind keeps but does not export: said when that kind is exported.
        kept = [(k.info.name, why) for k in registry if (why := k.export_note(name)) is not None]
        if kept:
            summary.notes.extend(why for k, why in kept if chosen is None or k in chosen)
            continue
        if kind_of(name) is None:
            summary.notes.append(f"skipped collection {name!r}: not an agent memory collection")
            continue
        owner = registry.of_collection(name)
        if chosen is not None and owner is not None and owner[0].info.name not in chosen:
            continue
        spec = store.spec(name)
        owned = owner is not None and owner[0].owned_objects
        if not spec.per_user and not include_shared and not owned:
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
        keeps = _objects_kept(registry, spec, users, include_shared)
        n = 0
        for obj in _page(store, spec.name, user, page_size, include_vectors):
            if not keeps(obj):
                continue
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


def _objects_kept(
    registry: KindRegistry, spec: CollectionSpec, users: Sequence[str] | None, shared: bool
) -> Callable[[StoredObject], bool]:
    """Return which objects of a collection an export takes.

    All of them, but in a shared collection whose objects each belong to a user (plain
    LangGraph items): the chosen users' (every user's when none are chosen), and the
    objects of no one only with the shared data.
    """
    found = registry.of_collection(spec.name)
    if spec.per_user or found is None or not found[0].owned_objects:
        return lambda obj: True
    kind = found[0]
    wanted = None if users is None else set(users)

    def keeps(obj: StoredObject) -> bool:
        owner = kind.owner_of(spec.name, obj.properties)
        if owner is None:
            return shared and wanted is None
        return wanted is None or owner in wanted

    return keeps


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


def _fail(lineno: int, message: str) -> TransferError:
    return TransferError(f"line {lineno}: {message}")


def _parse_header(text: str) -> ExportHeader:
    data = _loads(1, text)
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
    if not isinstance(dims, int) or isinstance(dims, bool) or not 0 < dims <= _MAX_DIMS:
        raise _fail(1, f"header dims must be a positive integer, got {dims!r:.40}")
    model = data.get("embedding_model")
    if not isinstance(model, str) or not model:
        raise _fail(1, "header embedding_model is missing")
    raw_cols = data.get("collections")
    if not isinstance(raw_cols, dict):
        raise _fail(1, "header collections must be an object")
    try:
        collections = {name: spec_from_dict(spec) for name, spec in raw_cols.items()}
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise _fail(1, f"malformed collection schema in the header: {exc}") from None
    for name, spec in collections.items():
        if spec.name != name:
            raise _fail(1, f"collection {name!r} has a schema named {spec.name!r}")
        if kind_of(name) is None:
            raise _fail(1, f"collection {name!r} is not an agent memory collection")
        _check_known_schema(spec)
    users = data.get("users", [])
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise _fail(1, "header users must be a list of user ids")
    return ExportHeader(FORMAT_VERSION, model, dims, collections, [str(u) for u in users])


def _structure(properties: Sequence[Property]) -> list[tuple[str, str, bool, bool]]:
    return [(p.name, p.type, p.searchable, p.filterable) for p in properties]


def _check_known_schema(spec: CollectionSpec) -> None:
    """Refuse a file whose schema differs from this build's schema for that collection."""
    found = current_kinds().of_collection(spec.name)
    expected = None if found is None else found[0].expected_schema(spec.name)
    if found is None or expected is None:
        raise TransferError(f"collection {spec.name!r} is not an agent memory collection")
    if found[0].accepts_earlier_schema(spec):
        return  # an earlier version's schema: the kind upgrades it on first use
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


MAX_LINE_CHARS = 8_000_000
"""The longest line an import reads, in characters: an object's text (a message at most
``MAX_MESSAGE_CHARS``, an episode at most ``MAX_EPISODE_CHARS``) with its vector, escaped.
A longer line is refused before it is held in memory whole."""

_BATCH = 200
_EMBED_BATCH = 64
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_MAX_DIMS = 65_536
_Line = ImportLine


def _loads(lineno: int, text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise _fail(lineno, "not an export line (JSON nested too deeply)") from None
    except json.JSONDecodeError as exc:
        raise _fail(lineno, f"not JSON ({exc.msg})") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise _fail(lineno, f"not JSON the import can read ({exc})") from None


def _read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) of a file, never holding more than one bounded line."""
    with _open(path) as fh:
        lineno = 0
        while True:
            lineno += 1
            try:
                text = fh.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError as exc:
                raise _fail(lineno, f"the file is not UTF-8 text here ({exc.reason})") from None
            if not text:
                return
            if len(text) > MAX_LINE_CHARS and not text.endswith("\n"):
                raise _fail(
                    lineno,
                    f"longer than {MAX_LINE_CHARS:,} characters: no memory is that large "
                    "(a message has at most 100,000)",
                )
            yield lineno, text


def read_header(path: str | Path) -> ExportHeader:
    """Read and validate the header of an export file."""
    for lineno, text in _read_lines(path):
        if lineno == 1 and text.strip():
            return _parse_header(text)
        break
    raise TransferError(f"{path} is empty")


def _open(path: str | Path) -> TextIO:
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"no such file: {p}")
    return p.open("r", encoding="utf-8", newline="\n")


# -- checking one line ---------------------------------------------------------------------------


def _check_vector(lineno: int, vector: object, dims: int) -> list[float] | None:
    if vector is None:
        return None
    if not isinstance(vector, list):
        raise _fail(lineno, "vector must be a list of numbers or null")
    out: list[float] = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise _fail(lineno, f"vector elements must be numbers, got {x!r:.40}")
        try:
            value = float(x)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
            raise _fail(lineno, f"vector element {x!r:.40} is not a finite number a store can hold")
        out.append(value)
    if len(out) != dims:
        raise _fail(lineno, f"vector has {len(out)} dimensions, the header says {dims}")
    return out


def _parse_line(lineno: int, text: str, header: ExportHeader, allow_shared: bool) -> _Line:
    data = _loads(lineno, text)
    if not isinstance(data, dict):
        raise _fail(lineno, "expected a JSON object")
    kind = data.get("kind")
    known = current_kinds().line_kinds
    if not isinstance(kind, str) or kind not in known:
        raise _fail(lineno, f"unknown kind {kind!r:.60} (expected one of {', '.join(known)})")
    memory_kind = _memory_kind(kind)
    collection = data.get("collection")
    if not isinstance(collection, str) or collection not in header.collections:
        raise _fail(lineno, f"collection {collection!r:.80} is not declared in the header")
    if kind_of(collection) != kind:
        raise _fail(lineno, f"kind {kind!r} does not match collection {collection!r}")
    spec = header.collections[collection]
    user = data.get("user")
    if spec.per_user:
        try:
            check_user_id(user)
        except InvalidInputError as exc:
            raise _fail(lineno, f"{collection} is per-user: {exc}") from None
        assert isinstance(user, str)
        if user == GLOBAL_SCOPE and not memory_kind.allows_global_scope:
            raise _fail(
                lineno,
                f"a {kind} cannot belong to {GLOBAL_SCOPE!r}: that scope holds only the rules "
                "shared by every user",
            )
    elif user is not None:
        raise _fail(lineno, f"{collection} is shared: user must be null")
    obj_id = data.get("id")
    try:
        canonical = str(uuid.UUID(obj_id)) if isinstance(obj_id, str) else None
    except ValueError:
        canonical = None
    props = data.get("properties")
    # A user's own knowledge base (per-user collections) is their data, like their facts;
    # so is a plain item of theirs (its namespace names them).
    what = memory_kind.shared_what(
        _Line(
            lineno,
            kind,
            collection,
            user or "",
            canonical or "",
            props if isinstance(props, dict) else {},
            None,
        ),
        spec,
    )
    if what is not None and not allow_shared:
        raise _fail(
            lineno,
            f"the file holds {what}, which every user's conversations read: only an operator "
            "imports those, with --shared (Python: allow_shared=True); nothing was written",
        )
    if canonical is None:
        raise _fail(lineno, f"id {obj_id!r:.60} is not a UUID")
    if not isinstance(props, dict):
        raise _fail(lineno, "properties must be an object")
    try:
        check_properties(spec, props)
    except InvalidInputError as exc:
        raise _fail(lineno, str(exc)) from None
    line = _Line(
        lineno,
        kind,
        collection,
        user or "",
        canonical,
        {k: v for k, v in props.items() if v is not None},
        _check_vector(lineno, data.get("vector"), header.dims),
    )
    try:
        memory_kind.check_line(line)
    except InvalidInputError as exc:
        raise _fail(lineno, f"{kind}: {exc}") from None
    return line


# -- the staging copy: the validated file, on disk ------------------------------------------------


class _Staging:
    """The validated file in a temporary SQLite database.

    The import's memory so stays bounded whatever the file's size, and unique keys check
    the kinds' invariants across lines: an id once, one current value per fact subject,
    one message per turn of a thread.
    """

    def __init__(self, folder: Path) -> None:
        self.db = sqlite3.connect(str(folder / "staging.sqlite"))
        self.db.executescript(
            """
            PRAGMA journal_mode = OFF;
            PRAGMA synchronous = OFF;
            CREATE TABLE objects (
                seq INTEGER PRIMARY KEY, lineno INT, kind TEXT, collection TEXT, user TEXT,
                id TEXT, props TEXT, vector BLOB, UNIQUE (collection, user, id));
            CREATE INDEX objects_group ON objects (kind, collection, user, seq);
            CREATE TABLE keys (
                name TEXT, collection TEXT, user TEXT, a TEXT, b TEXT, lineno INT,
                PRIMARY KEY (name, collection, user, a, b));
            """
        )

    def add(self, line: _Line) -> None:
        vector = (
            None if line.vector is None else np.asarray(line.vector, dtype=np.float32).tobytes()
        )
        unique = _memory_kind(line.kind).unique_keys(line)
        try:
            self.db.execute(
                "INSERT INTO objects (lineno, kind, collection, user, id, props, vector) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    line.lineno,
                    line.kind,
                    line.collection,
                    line.user,
                    line.id,
                    json.dumps(line.properties, ensure_ascii=False),
                    vector,
                ),
            )
        except sqlite3.IntegrityError:
            first = self._first(
                "SELECT lineno FROM objects WHERE collection = ? AND user = ? AND id = ?",
                (line.collection, line.user, line.id),
            )
            raise _fail(
                line.lineno, f"id {line.id} appears twice (first on line {first})"
            ) from None
        for key in unique:
            try:
                self.db.execute(
                    "INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)",
                    (key.name, line.collection, line.user, key.a, key.b, line.lineno),
                )
            except sqlite3.IntegrityError:
                first = self._first(
                    "SELECT lineno FROM keys WHERE name = ? AND collection = ? AND user = ? "
                    "AND a = ? AND b = ?",
                    (key.name, line.collection, line.user, key.a, key.b),
                )
                raise _fail(line.lineno, f"{key.clash} (the first is on line {first})") from None

    def _first(self, sql: str, args: tuple[Any, ...]) -> int:
        row = self.db.execute(sql, args).fetchone()
        return int(row[0]) if row else 0

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM objects").fetchone()[0])

    def missing_vectors(self) -> int:
        return int(
            self.db.execute("SELECT count(*) FROM objects WHERE vector IS NULL").fetchone()[0]
        )

    def groups(self, line_kind: Kind) -> list[tuple[str, str]]:
        rows = self.db.execute(
            "SELECT DISTINCT collection, user FROM objects WHERE kind = ? ORDER BY 1, 2",
            (line_kind,),
        )
        return [(str(c), str(u)) for c, u in rows]

    def batches(
        self,
        line_kind: Kind,
        collection: str,
        user: str,
        size: int,
        *,
        order_by: str | None = None,
        descending: bool = False,
    ) -> Iterator[list[_Line]]:
        """Yield the group's objects in batches of at most ``size``.

        In file order, or by the property ``order_by`` (then file order).
        """
        order = "seq"
        if order_by is not None:
            if not order_by.isidentifier():
                raise ValueError(f"not a property name: {order_by!r}")
            order = f"json_extract(props, '$.{order_by}') {'DESC' if descending else 'ASC'}, seq"
        cursor = self.db.execute(
            "SELECT lineno, id, props, vector FROM objects WHERE kind = ? AND collection = ? "
            f"AND user = ? ORDER BY {order}",
            (line_kind, collection, user),
        )
        while rows := cursor.fetchmany(size):
            yield [
                _Line(
                    int(lineno),
                    line_kind,
                    collection,
                    user,
                    str(oid),
                    json.loads(props),
                    None
                    if vector is None
                    else np.frombuffer(vector, dtype=np.float32).astype(np.float64).tolist(),
                )
                for lineno, oid, props, vector in rows
            ]

    def has(self, collection: str, user: str, oid: str) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM objects WHERE collection = ? AND user = ? AND id = ?",
            (collection, user, oid),
        ).fetchone()
        return row is not None

    def reembed(self, embeddings: Embeddings, dims: int) -> None:
        """Compute every object's vector from its text, a batch at a time."""
        marker = np.asarray([1.0] + [0.0] * (dims - 1), dtype=np.float32).tobytes()
        last = 0
        while True:
            rows = self.db.execute(
                "SELECT seq, kind, props FROM objects WHERE seq > ? ORDER BY seq LIMIT ?",
                (last, _EMBED_BATCH),
            ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            texts = [
                (int(seq), embedding_text(kind, json.loads(props)))
                for seq, kind, props in rows
                if _memory_kind(kind).embeds(kind)
            ]
            # Objects never searched by vector (a knowledge base's manifest entries) keep the
            # unit marker vector their kind gives them, whatever the model.
            self.db.executemany(
                "UPDATE objects SET vector = ? WHERE seq = ?",
                [
                    (marker, int(seq))
                    for seq, kind, _ in rows
                    if not _memory_kind(kind).embeds(kind)
                ],
            )
            if texts:
                vectors = embeddings.embed_documents([t for _, t in texts])
                if any(len(v) != dims for v in vectors):
                    raise TransferError(f"the embeddings did not give {dims}-d vectors")
                self.db.executemany(
                    "UPDATE objects SET vector = ? WHERE seq = ?",
                    [
                        (np.asarray(v, dtype=np.float32).tobytes(), seq)
                        for (seq, _), v in zip(texts, vectors, strict=True)
                    ],
                )

    def close(self) -> None:
        self.db.close()


# -- writing: one transaction, or undone -------------------------------------------------------


class _Writes:
    """The import's writes, recorded so that a backend without transactions can undo them."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.created: list[tuple[str, str | None, list[str]]] = []
        self.replaced: list[tuple[str, str | None, StoredObject]] = []
        self.new_collections: list[str] = []

    def create(self, collection: str, user: str | None, objects: list[MemoryObject]) -> int:
        if not objects:
            return 0
        result = self.store.upsert(collection, objects, user=user)
        self.created.append((collection, user, list(result.ids)))
        result.raise_for_failures()
        return len(result.ids)

    def replace(
        self, collection: str, user: str | None, before: StoredObject, after: MemoryObject
    ) -> None:
        self.replaced.append((collection, user, before))
        self.store.upsert(collection, [after], user=user).raise_for_failures()

    def undo(self) -> None:
        """Take back everything written, newest first (Weaviate: no transaction to roll back)."""
        for collection, user, before in reversed(self.replaced):
            assert before.vector is not None
            restored = MemoryObject(before.id, before.properties, before.vector)
            self.store.upsert(collection, [restored], user=user)
        for collection, user, ids in reversed(self.created):
            for start in range(0, len(ids), _BATCH):
                self.store.delete(collection, ids[start : start + _BATCH], user=user)
        for name in reversed(self.new_collections):
            self.store.drop_collection(name)


@contextlib.contextmanager
def _all_or_nothing(store: MemoryStore) -> Iterator[_Writes]:
    writes = _Writes(store)
    if isinstance(store, EmbeddedStore):
        with store.transaction():
            yield writes
        return
    try:
        yield writes
    except BaseException:
        _undo(writes)
        raise


def _undo(writes: _Writes) -> None:
    """Take back what the import wrote; say what may be left when that fails too."""
    try:
        writes.undo()
    except Exception as undo_error:  # a server gone mid-import: say what may be left
        raise TransferError(
            f"the import failed and undoing what it had written failed too ({undo_error}): "
            "the store may hold part of the file; import it again into an empty store"
        ) from undo_error


# -- merging into what the store holds ------------------------------------------------------------


def _canonical(spec: CollectionSpec, props: Mapping[str, Any]) -> dict[str, Any]:
    """Properties as a store gives them back: no None, dates in UTC, numbers as floats."""
    types = {p.name: p.type for p in spec.properties}
    out: dict[str, Any] = {}
    for key, value in props.items():
        if value is None:
            continue
        kind = types.get(key)
        if kind == "date":
            value = _utc(str(value)).isoformat()
        elif kind == "number":
            value = float(value)
        elif kind == "text[]":
            value = list(value)
        out[key] = value
    return out


def _utc(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def _same(spec: CollectionSpec, stored: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    return _canonical(spec, stored) == _canonical(spec, given)


class _Import:
    """Write the staged file into the store, each group by its kind's merge rule.

    It is the :class:`~agentic_memory.kinds.contract.ImportTarget` the kinds write through.
    """

    def __init__(
        self,
        store: MemoryStore,
        staging: _Staging,
        writes: _Writes,
        summary: TransferSummary,
        progress: Callable[[int], None] | None,
        batch_size: int,
        converted: dict[str, CollectionSpec],
    ) -> None:
        self.batch_size = batch_size
        self.converted = converted
        self.store = store
        self.staged: StagedLines = staging
        self.writes = writes
        self.summary = summary
        self.progress = progress
        self.written = 0
        self.skipped = 0

    def run(self) -> None:
        for kind in current_kinds():
            for line_kind in kind.info.line_kinds:
                for collection, user in self.staged.groups(line_kind):
                    kind.import_group(self, line_kind, self.store.spec(collection), user)
        if self.skipped:
            self.summary.notes.append(
                f"{self.skipped} object(s) the store already held unchanged were left as they are"
            )

    # -- the ImportTarget the kinds write through ---------------------------------------------

    def existing(self, collection: str, user: str, oid: str) -> StoredObject | None:
        return self.store.get(collection, oid, user=user or None, include_vector=True)

    def same(
        self, spec: CollectionSpec, stored: Mapping[str, Any], given: Mapping[str, Any]
    ) -> bool:
        return _same(spec, stored, given)

    def create(self, collection: str, user: str, objects: list[MemoryObject]) -> None:
        n = self.writes.create(collection, user or None, objects)
        if not n:
            return
        key = (collection, user)
        self.summary.counts[key] = self.summary.counts.get(key, 0) + n
        self.written += n
        if self.progress is not None:
            self.progress(self.written)

    def replace(
        self, collection: str, user: str, before: StoredObject, after: MemoryObject
    ) -> None:
        self.writes.replace(collection, user or None, before, after)

    def skip(self) -> None:
        self.skipped += 1

    def note(self, text: str) -> None:
        self.summary.notes.append(text)

    def fail(self, lineno: int | None, message: str) -> TransferError:
        return TransferError(message) if lineno is None else _fail(lineno, message)

    def merge_plain(
        self,
        line_kind: Kind,
        spec: CollectionSpec,
        user: str,
        admit: Callable[[_Line], bool] | None = None,
    ) -> None:
        for batch in self.staged.batches(line_kind, spec.name, user, self.batch_size):
            new: list[MemoryObject] = []
            for line in batch:
                if spec.name in self.converted:
                    upgraded = _memory_kind(line_kind).upgraded_properties(
                        spec.name, line.properties
                    )
                    assert upgraded is not None  # _converted asked the kind
                    line.properties = upgraded
                found = self.existing(spec.name, user, line.id)
                if found is not None:
                    if _same(spec, found.properties, line.properties):
                        self.skip()
                        continue
                    raise _fail(
                        line.lineno,
                        f"{line_kind} {line.id} {whose(user)} is in the store with other "
                        "content: an import never overwrites a memory; forget it first, or "
                        "import into an empty store",
                    )
                if admit is not None and not admit(line):
                    self.skip()
                    continue
                assert line.vector is not None
                new.append(MemoryObject(line.id, line.properties, line.vector))
            self.create(spec.name, user, new)


def import_memories(
    store: MemoryStore,
    path: str | Path,
    *,
    embeddings: Embeddings | None,
    embedding_model: str,
    reembed: bool = False,
    allow_shared: bool = False,
    batch_size: int = _BATCH,
    progress: Callable[[int], None] | None = None,
) -> TransferSummary:
    """Import an export file into ``store``, all of it or nothing.

    The whole file is checked before anything is written, a line at a time into a staging
    copy on disk (memory stays bounded whatever the file's size): the JSON, every value
    (numbers, dates, vectors, text), sizes (a line at most ``MAX_LINE_CHARS``, a message at
    most ``MAX_MESSAGE_CHARS``) and each kind's invariants (one current value per fact
    subject, one message per turn of a thread, an episode's importance in [0, 1], no fact,
    episode or message under ``_global``, rule sets that a conversation could have stored).
    Vectors are then recomputed from each object's text where needed (``reembed``, no
    vectors in the file, another model or size), still before any write.

    The write is one transaction on the embedded store; on another backend what was
    written is deleted again (and what was changed restored) when the import fails. Into a
    store that already holds memories it merges by each kind's rules: an object the store
    holds unchanged is left as it is (importing twice changes nothing); a fact value newer
    than the subject's current one supersedes it, an older one is kept as history, so a
    newer value is never overwritten; messages keep their turn numbers; anything that would
    overwrite a different memory (another message in the same turn, another episode or rule
    version under the same id, rule versions that do not continue the store's, a knowledge
    base the store already holds) is refused with the line and what to do.

    Args:
        store: The target store, opened with the target's vector size.
        path: The JSON Lines file written by ``export_memories``.
        embeddings: The target's embedding model; needed only when re-embedding.
        embedding_model: The target embedding model's name, compared with the file's.
        reembed: Recompute every vector even when the file's vectors fit.
        allow_shared: Also import the rules shared by every user and knowledge bases, which
            every user's conversations read: an operator's decision (``--shared``); without
            it a file holding them is refused.
        batch_size: Objects per write (at most 200).
        progress: Called with the number of objects written after each batch.

    Returns:
        The counts written per collection and user, whether vectors were recomputed, notes.

    Raises:
        TransferError: the file is malformed or does not fit the store; nothing was written.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError(f"batch_size must be positive, got {batch_size!r}")
    header = read_header(path)
    summary = TransferSummary()
    with tempfile.TemporaryDirectory(prefix="amem-import-") as folder:
        staging = _Staging(Path(folder))
        try:
            for lineno, text in _read_lines(path):
                if lineno == 1 or not text.strip():
                    continue
                staging.add(_parse_line(lineno, text, header, allow_shared))
            total = staging.count()
            gates = [g for g in (k.import_gate(staging) for k in current_kinds()) if g]
            if gates and embeddings is None:
                raise TransferError(
                    f"the file holds {gates[0].what}: proposing them needs the target's "
                    "embeddings, but none were given"
                )
            why = _why_reembed(header, store, embedding_model, reembed, staging.missing_vectors())
            if why is not None:
                if embeddings is None:
                    raise TransferError(
                        f"the import must re-embed ({why}) but no embeddings were given"
                    )
                dims = getattr(embeddings, "dims", None)
                if dims != store.dims:
                    raise TransferError(
                        f"the target embeddings give {dims}-d vectors but the store uses "
                        f"{store.dims}"
                    )
                staging.reembed(embeddings, store.dims)
                summary.reembedded = True
                summary.notes.append(f"vectors recomputed from the text: {why}")
            converted = _converted(header)
            with _all_or_nothing(store) as writes:
                _prepare_collections(store, header, writes, converted)
                _Import(
                    store, staging, writes, summary, progress, min(batch_size, _BATCH), converted
                ).run()
            if gates:
                assert embeddings is not None
                # After the other writes (on the embedded store after their transaction: a
                # gate writes from worker threads, which the transaction's lock would keep
                # waiting), and undone with them when it fails.
                try:
                    _pass_gates(store, embeddings, gates, Path(path), summary)
                except BaseException:
                    _undo(writes)
                    raise
        finally:
            staging.close()
    if total == 0:
        summary.notes.append("the file holds no memories")
    return summary


def _pass_gates(
    store: MemoryStore,
    embeddings: Embeddings,
    gates: Sequence[ImportGate],
    source: Path,
    summary: TransferSummary,
) -> None:
    """Pass the lines the kinds take through their gates (the shared rules: a proposal)."""

    async def apply() -> None:
        for gate in gates:
            outcome = await gate.apply(store, embeddings, source.name)
            summary.notes.append(outcome.note)
            if outcome.proposal is not None:
                summary.proposal = outcome.proposal

    # Imports are storage code (sync, in a worker thread when a loop serves the caller).
    run_sync(apply(), instead="await asyncio.to_thread(import_memories, ...)")


def _why_reembed(
    header: ExportHeader, store: MemoryStore, model: str, requested: bool, missing: int
) -> str | None:
    if requested:
        return "re-embedding was requested"
    if header.dims != store.dims:
        return f"the file's vectors have {header.dims} dimensions, the target store {store.dims}"
    if header.embedding_model != model:
        return f"the file was embedded with {header.embedding_model!r}, the target uses {model!r}"
    if missing:
        return f"{missing} object(s) in the file have no vector"
    return None


def _converted(header: ExportHeader) -> dict[str, CollectionSpec]:
    """Return the current schema of each collection whose objects the import converts.

    Those the file holds in an earlier schema that their kind converts one object at a time
    (``MemoryKind.upgraded_properties``): they are written in the current schema.
    """
    out: dict[str, CollectionSpec] = {}
    for name, spec in header.collections.items():
        found = current_kinds().of_collection(name)
        if found is None or not found[0].accepts_earlier_schema(spec):
            continue
        expected = found[0].expected_schema(name)
        if expected is not None and found[0].upgraded_properties(name, {}) is not None:
            out[name] = dataclasses.replace(spec, properties=expected[0], per_user=expected[1])
    return out


def _prepare_collections(
    store: MemoryStore, header: ExportHeader, writes: _Writes, converted: dict[str, CollectionSpec]
) -> None:
    existing = set(store.collections())
    for name in header.collections:
        found = current_kinds().of_collection(name)
        if name in existing and found is not None:
            # A target an earlier version wrote: brought to the current schema first.
            found[0].upgrade_collection(store, name)
    existing = set(store.collections())
    specs = {name: converted.get(name, spec) for name, spec in header.collections.items()}
    older: set[str] = set()
    for name, spec in specs.items():
        if name not in existing:
            continue
        stored = store.spec(name)
        if stored.per_user != spec.per_user:
            raise TransferError(f"collection {name!r} exists in the target with another schema")
        if _extends(stored, spec):
            older.add(name)  # the file was written before properties the target has
        elif not _extends(spec, stored):
            raise TransferError(f"collection {name!r} exists in the target with another schema")
    for spec in specs.values():
        if spec.name not in older:
            # Creates it, or adds what a target written by an earlier version lacks.
            store.extend_collection(spec)
            if spec.name not in existing:
                writes.new_collections.append(spec.name)


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KINDS",
    "MAX_EPISODE_CHARS",
    "MAX_LINE_CHARS",
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
