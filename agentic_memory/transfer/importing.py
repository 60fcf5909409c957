"""Import: a checked, staged export file written into a store, all of it or nothing."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.contract import ImportGate, ImportTarget, StagedLines, whose
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.types import CollectionSpec, InvalidInputError, MemoryObject, StoredObject
from agentic_memory.sync_edge import blocking_function
from agentic_memory.transfer.format import (
    ExportHeader,
    Kind,
    TransferError,
    TransferSummary,
    _extends,
    _fail,
    _Line,
    _memory_kind,
    _parse_line,
    _read_lines,
    read_header,
)
from agentic_memory.transfer.staging import _Staging

_BATCH = 200
T = TypeVar("T")


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


class _Import(ImportTarget):
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
        for kind in self.summary.kinds:
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
                    upgraded = _memory_kind(line_kind, self.summary.kinds).upgraded_properties(
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


async def aimport_memories(
    store: MemoryStore,
    path: str | Path,
    *,
    embeddings: Embeddings | None,
    embedding_model: str,
    reembed: bool = False,
    allow_shared: bool = False,
    batch_size: int = _BATCH,
    progress: Callable[[int], None] | None = None,
    registry: KindRegistry = BUILTIN_KINDS,
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

    Reading and checking the file, and the write, each run in one worker thread (the
    embedded store's transaction is bound to its thread); the embedding model and the
    kinds' gates are awaited. Cancelled, the import waits for the thread at work to end
    and takes back what it did. :func:`import_memories` is the blocking twin, which also
    works from a running event loop (a notebook cell): there it runs on a thread of its own.

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
        registry: The memory kinds served (default the built-in ones): the file's lines
            are checked and merged by theirs.

    Returns:
        The counts written per collection and user, whether vectors were recomputed, notes.

    Raises:
        TransferError: the file is malformed or does not fit the store; nothing was written.

    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError(f"batch_size must be positive, got {batch_size!r}")
    if not isinstance(registry, KindRegistry):
        raise InvalidInputError(f"registry must be a KindRegistry, got {type(registry).__name__}")
    staged = await _to_the_end(
        asyncio.to_thread(_stage, path, allow_shared, registry), _Staged.close
    )
    summary = TransferSummary(kinds=registry)
    try:
        gates = staged.gates
        if gates and embeddings is None:
            raise TransferError(
                f"the file holds {gates[0].what}: proposing them needs the target's "
                "embeddings, but none were given"
            )
        why = _why_reembed(staged.header, store, embedding_model, reembed, staged.missing)
        if why is not None:
            if embeddings is None:
                raise TransferError(
                    f"the import must re-embed ({why}) but no embeddings were given"
                )
            dims = getattr(embeddings, "dims", None)
            if dims != store.dims:
                raise TransferError(
                    f"the target embeddings give {dims}-d vectors but the store uses {store.dims}"
                )
            await _areembed(staged.staging, embeddings, store.dims)
            summary.reembedded = True
            summary.notes.append(f"vectors recomputed from the text: {why}")
        writes = await _to_the_end(
            asyncio.to_thread(_write, store, staged, summary, progress, min(batch_size, _BATCH)),
            _undo,
        )
        if gates:
            assert embeddings is not None
            # After the other writes (on the embedded store after their transaction: a
            # gate writes from worker threads, which the transaction's lock would keep
            # waiting), and undone with them when it fails.
            try:
                await _pass_gates(store, embeddings, gates, Path(path), summary)
            except BaseException:
                await asyncio.to_thread(_undo, writes)
                raise
    finally:
        await asyncio.to_thread(staged.close)
    if staged.total == 0:
        summary.notes.append("the file holds no memories")
    return summary


import_memories = blocking_function(aimport_memories)
"""Import an export file into a store, all of it or nothing: :func:`aimport_memories`, blocking."""


@dataclass(frozen=True)
class _Staged:
    """An import file, read and checked into its staging copy."""

    header: ExportHeader
    staging: _Staging
    gates: list[ImportGate]
    """The kinds' gates the file's lines pass after the import's writes."""
    missing: int
    """Objects of the file without a vector."""
    total: int
    """Objects in the file."""

    def close(self) -> None:
        """Delete the staging copy."""
        self.staging.close()


def _stage(path: str | Path, allow_shared: bool, registry: KindRegistry) -> _Staged:
    """Read the header and check every line into a staging copy on disk (one worker thread)."""
    header = read_header(path, registry)
    staging = _Staging(registry)
    try:
        for lineno, text in _read_lines(path):
            if lineno == 1 or not text.strip():
                continue
            staging.add(_parse_line(lineno, text, header, allow_shared))
        gates = [g for g in (k.import_gate(staging) for k in registry) if g]
        return _Staged(header, staging, gates, staging.missing_vectors(), staging.count())
    except BaseException:
        staging.close()
        raise


async def _areembed(staging: _Staging, embeddings: Embeddings, dims: int) -> None:
    """Compute every staged object's vector from its text, a batch at a time."""
    after = 0
    while (batch := await asyncio.to_thread(staging.to_embed, after, dims)) is not None:
        after, texts = batch
        if texts:
            vectors = await embeddings.aembed_documents([text for _, text in texts])
            await asyncio.to_thread(staging.set_vectors, texts, vectors, dims)


def _write(
    store: MemoryStore,
    staged: _Staged,
    summary: TransferSummary,
    progress: Callable[[int], None] | None,
    batch_size: int,
) -> _Writes:
    """Write the staged file, all of it or nothing (one worker thread: one transaction)."""
    converted = _converted(staged.header)
    with _all_or_nothing(store) as writes:
        _prepare_collections(store, staged.header, writes, converted)
        _Import(store, staged.staging, writes, summary, progress, batch_size, converted).run()
    return writes


async def _to_the_end(job: Coroutine[Any, Any, T], undo: Callable[[T], object]) -> T:
    """Await ``job``, a worker thread's; cancelled, wait for it to end and ``undo`` what it did.

    A thread cannot be stopped: what it finishes after the import is cancelled (a committed
    write, a staging copy) would be left behind.
    """
    task = asyncio.ensure_future(job)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            done: T | None = await task
        except Exception:
            done = None  # it failed: rolled back, undone or deleted already
        if done is not None:
            await asyncio.to_thread(undo, done)
        raise


async def _pass_gates(
    store: MemoryStore,
    embeddings: Embeddings,
    gates: Sequence[ImportGate],
    source: Path,
    summary: TransferSummary,
) -> None:
    """Pass the lines the kinds take through their gates (the shared rules: a proposal)."""
    for gate in gates:
        outcome = await gate.apply(store, embeddings, source.name)
        summary.notes.append(outcome.note)
        if outcome.proposal is not None:
            summary.proposal = outcome.proposal


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
        found = header.kinds.of_collection(name)
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
        found = header.kinds.of_collection(name)
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
