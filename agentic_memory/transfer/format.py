"""The export file's format: its header, its lines and the checks each line passes.

An export is JSON Lines: a header (format, version, embedding model and vector size, the
schema of every collection it holds), then one object per line. Everything here reads or
checks; nothing writes to a store.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from agentic_memory.kinds.contract import ImportLine, MemoryKind
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry
from agentic_memory.store.base import GLOBAL_SCOPE, check_properties, check_user_id
from agentic_memory.store.types import CollectionSpec, InvalidInputError, Property

FORMAT_NAME = "agentic-memory-export"
FORMAT_VERSION = 1

Kind = str
"""The ``kind`` of an export line: one of a memory kind's ``KindInfo.line_kinds``."""
KINDS: tuple[Kind, ...] = BUILTIN_KINDS.line_kinds
"""The line kinds of the built-in memory kinds (``fact``, ``episode``, ``rule``,
``message``, ``chunk``, ``source``); a registry given as ``kinds=`` may add others."""


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
    kinds: KindRegistry = field(default=BUILTIN_KINDS, repr=False, compare=False)
    """The memory kinds the export or import served (which names ``by_kind`` uses)."""

    @property
    def total(self) -> int:
        """The number of objects moved."""
        return sum(self.counts.values())

    def by_kind(self) -> dict[str, int]:
        """Return the object counts per memory kind."""
        out: dict[str, int] = {}
        for (collection, _user), n in self.counts.items():
            kind = kind_of(collection, self.kinds) or "other"
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


def kind_of(collection: str, kinds: KindRegistry = BUILTIN_KINDS) -> Kind | None:
    """Return the line kind stored in ``collection``, or ``None`` for a foreign collection."""
    found = kinds.of_collection(collection)
    return None if found is None else found[1]


def _memory_kind(kind: Kind, kinds: KindRegistry) -> type[MemoryKind]:
    found = kinds.of_line_kind(kind)
    if found is None:
        raise TransferError(f"no memory kind stores {kind!r} objects")
    return found


# -- the text each kind is embedded from (each kind's own, so imports rank alike) ------------


def embedding_text(
    kind: Kind, properties: Mapping[str, Any], kinds: KindRegistry = BUILTIN_KINDS
) -> str:
    """Return the text an object of ``kind`` is embedded from, for re-embedding on import."""
    return _memory_kind(kind, kinds).embedding_text(kind, properties) or " "


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


# -- the header --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportHeader:
    """The first line of an export file."""

    version: int
    embedding_model: str
    dims: int
    collections: dict[str, CollectionSpec]
    users: list[str]
    kinds: KindRegistry = field(default=BUILTIN_KINDS, repr=False, compare=False)
    """The memory kinds it was read with: its lines are checked against them."""


def _fail(lineno: int, message: str) -> TransferError:
    return TransferError(f"line {lineno}: {message}")


def _parse_header(text: str, kinds: KindRegistry) -> ExportHeader:
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
        if kind_of(name, kinds) is None:
            raise _fail(1, f"collection {name!r} is not an agent memory collection")
        _check_known_schema(spec, kinds)
    users = data.get("users", [])
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise _fail(1, "header users must be a list of user ids")
    return ExportHeader(
        FORMAT_VERSION, model, dims, collections, [str(u) for u in users], kinds=kinds
    )


def _structure(properties: Sequence[Property]) -> list[tuple[str, str, bool, bool]]:
    return [(p.name, p.type, p.searchable, p.filterable) for p in properties]


def _check_known_schema(spec: CollectionSpec, kinds: KindRegistry) -> None:
    """Refuse a file whose schema differs from this build's schema for that collection."""
    found = kinds.of_collection(spec.name)
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


def read_header(path: str | Path, kinds: KindRegistry = BUILTIN_KINDS) -> ExportHeader:
    """Read and validate the header of an export file against ``kinds``."""
    for lineno, text in _read_lines(path):
        if lineno == 1 and text.strip():
            return _parse_header(text, kinds)
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
    known = header.kinds.line_kinds
    if not isinstance(kind, str) or kind not in known:
        raise _fail(lineno, f"unknown kind {kind!r:.60} (expected one of {', '.join(known)})")
    memory_kind = _memory_kind(kind, header.kinds)
    collection = data.get("collection")
    if not isinstance(collection, str) or collection not in header.collections:
        raise _fail(lineno, f"collection {collection!r:.80} is not declared in the header")
    if kind_of(collection, header.kinds) != kind:
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
