"""Export: a store's memories written as an export file (sync storage iteration)."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry
from agentic_memory.store.base import PAGE_LIMIT, MemoryStore, check_user_id
from agentic_memory.store.types import CollectionSpec, InvalidInputError, StoredObject
from agentic_memory.transfer.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    TransferSummary,
    kind_of,
    spec_to_dict,
)


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
    registry: KindRegistry = BUILTIN_KINDS,
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
        registry: The memory kinds served (default the built-in ones).

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
    if not isinstance(registry, KindRegistry):
        raise InvalidInputError(f"registry must be a KindRegistry, got {type(registry).__name__}")
    summary = TransferSummary(kinds=registry)
    specs: list[CollectionSpec] = []
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
        if kind_of(name, registry) is None:
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
        kind = kind_of(spec.name, registry)
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
