"""The contract of a memory kind (the registry the rest of the library iterates is in ``registry``).

A memory kind (facts, episodes, rules, messages, knowledge, or one of your own) is one
:class:`MemoryKind`: it names its collections and their schemas, the LangGraph namespaces it
serves (its :class:`~agentic_memory.namespaces.family.KindSpace` families: how items are
written, read, searched and listed there), how a user's part of it is forgotten, how its
stored objects are checked and embedded when a file is imported, and how ``amem memories``
shows it. ``AgenticStore``, :mod:`agentic_memory.forget`, :mod:`agentic_memory.transfer` and
``amem memories`` read the kinds from a :class:`~agentic_memory.kinds.registry.KindRegistry`
(by default :data:`agentic_memory.kinds.registry.BUILTIN_KINDS`) instead of naming each
one, so adding a kind is its package plus one line in the registry (``docs/architecture.md``, "Adding a
memory kind").

Everything that reads or writes the store is a coroutine (the async core), but for the
import: its checks (:meth:`MemoryKind.check_line`, :meth:`MemoryKind.embedding_text`) are pure
functions of a stored object, and its merge rules (:meth:`MemoryKind.import_group`) write
through an :class:`ImportTarget`, inside the import's one transaction (storage code, run in a
worker thread when a loop serves the caller).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from langchain_core.embeddings import Embeddings

from agentic_memory.store.base import GLOBAL_SCOPE, MemoryStore
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Property,
    StoredObject,
)

if TYPE_CHECKING:
    from agentic_memory.namespaces.family import KindSpace, SpaceContext

__all__ = [
    "GateOutcome",
    "ImportGate",
    "ImportLine",
    "ImportTarget",
    "KindInfo",
    "MemoryKind",
    "ThreadForgotten",
    "StagedLines",
    "UniqueKey",
    "threads_of",
    "whose",
]


@dataclass(frozen=True)
class KindInfo:
    """What a memory kind is called and where it lives."""

    name: str
    """The kind's name: the registry key and ``amem memories list <name>``."""
    title: str
    """One line that says what the kind remembers (CLI help, docs)."""
    roots: tuple[str, ...]
    """The first labels of the LangGraph namespaces the kind serves (``("facts",)``)."""
    line_kinds: tuple[str, ...]
    """The ``kind`` of its objects in an export file, in the order an import writes them."""
    users_column: str | None = None
    """Its column in ``amem memories users`` (``None``: not counted there)."""

    @classmethod
    def one(cls, name: str, line_kind: str, title: str, users_column: str = "") -> KindInfo:
        """Describe a kind of one namespace root (its name) and one line kind, counted per user."""
        return cls(name, title, (name,), (line_kind,), users_column or name)


@dataclass
class ImportLine:
    """One object of an export file, checked by its kind before anything is written."""

    lineno: int
    kind: str
    """The line kind (one of the kind's ``KindInfo.line_kinds``)."""
    collection: str
    user: str
    """The owner; "" for a shared collection."""
    id: str
    properties: dict[str, Any]
    vector: list[float] | None
    keys: dict[str, Any] = field(default_factory=dict)
    """What the kind's invariants are checked on across lines (subject, turn, version)."""


@dataclass(frozen=True)
class UniqueKey:
    """A key at most one line of a file may hold, per collection and user."""

    name: str
    a: str
    b: str
    clash: str
    """What a second line with that key is, for the error (the first line's number follows)."""


class StagedLines(Protocol):
    """The checked lines of an import file, staged on disk (memory stays bounded)."""

    def groups(self, line_kind: str) -> list[tuple[str, str]]:
        """Return the ``(collection, user)`` groups holding lines of ``line_kind``, sorted."""
        ...

    def batches(
        self,
        line_kind: str,
        collection: str,
        user: str,
        size: int,
        *,
        order_by: str | None = None,
        descending: bool = False,
    ) -> Iterator[list[ImportLine]]:
        """Yield one group's lines in batches of at most ``size``.

        In file order, or by the property ``order_by`` (then file order).
        """
        ...

    def has(self, collection: str, user: str, oid: str) -> bool:
        """Whether the file holds the object ``oid`` of ``user`` in ``collection``."""
        ...


class ImportTarget(Protocol):
    """What a kind's merge rule (:meth:`MemoryKind.import_group`) reads and writes through.

    Its writes are the import's: one transaction on the embedded store, undone on another
    backend when the import fails; they are counted in the import's summary.
    """

    store: MemoryStore
    """The target store (read it to see what it holds already; write through the methods)."""
    staged: StagedLines
    batch_size: int

    def existing(self, collection: str, user: str, oid: str) -> StoredObject | None:
        """Return the store's object ``oid`` of ``user`` (with its vector), or ``None``."""
        ...

    def same(
        self, spec: CollectionSpec, stored: Mapping[str, Any], given: Mapping[str, Any]
    ) -> bool:
        """Whether two objects' properties are the same as the store gives them back."""
        ...

    def create(self, collection: str, user: str, objects: list[MemoryObject]) -> None:
        """Write new objects of ``user`` ("": a shared collection)."""
        ...

    def replace(
        self, collection: str, user: str, before: StoredObject, after: MemoryObject
    ) -> None:
        """Overwrite a stored object (restored when the import is undone)."""
        ...

    def skip(self) -> None:
        """Count a line the store held unchanged (left as it is)."""
        ...

    def note(self, text: str) -> None:
        """Add a remark to the import's summary."""
        ...

    def fail(self, lineno: int | None, message: str) -> InvalidInputError:
        """Return the import's error (a ``TransferError``) for ``message``, at a line if given."""
        ...

    def merge_plain(
        self,
        line_kind: str,
        spec: CollectionSpec,
        user: str,
        admit: Callable[[ImportLine], bool] | None = None,
    ) -> None:
        """Merge a group by the generic rule (see :meth:`MemoryKind.import_group`).

        ``admit`` is called with each line the store does not hold yet, before it is
        written: it returns ``False`` to leave the line out (the store holds it in another
        form: counted as left as it is), or raises ``fail(...)`` to refuse the import.
        """
        ...


@dataclass(frozen=True)
class GateOutcome:
    """What a kind's import gate did."""

    note: str
    """What happened, for the import's summary."""
    proposal: str | None = None
    """The pending proposal it made (an operator decides it), if any."""


@dataclass(frozen=True)
class ImportGate:
    """Lines of a file a kind does not write but passes through its gate after the import.

    ``apply`` runs once the import's own writes are done, and they are undone when it fails.
    """

    what: str
    """What the lines are, for errors (``"the shared rules"``)."""
    apply: Callable[[MemoryStore, Embeddings, str], Awaitable[GateOutcome]]
    """Called with the store, the target's embeddings and the file's name."""


@dataclass
class ThreadForgotten:
    """What one kind forgot of a conversation (:meth:`MemoryKind.aforget_thread_parts`)."""

    deleted: dict[str, int] = field(default_factory=dict)
    """Objects deleted per collection (zero counts kept, for the report's table)."""
    rewritten: dict[str, int] = field(default_factory=dict)
    """Objects rewritten per collection to stay coherent (a fact's history re-linked)."""
    episodes: list[str] = field(default_factory=list)
    """The episodes forgotten: the rules learned from them lose what they taught."""


def threads_of(objects: Iterable[StoredObject], prop: str) -> set[str]:
    """Return the conversations objects came from: their thread ids in ``prop``, when set."""
    return {str(o.properties[prop]) for o in objects if o.properties.get(prop)}


def whose(user: str) -> str:
    """Say whose a group is in a message: ``of 'alice'``, or ``(shared)``."""
    return f"of {user!r}" if user else "(shared)"


class MemoryKind(ABC):
    """One kind of memory: its storage, its namespaces, its forgetting, its import, its CLI.

    A subclass sets :attr:`info`, :attr:`specs` and :attr:`space_types` and implements
    :meth:`embedding_text`; the rest has defaults that fit a kind stored in fixed per-user
    collections (override them where the kind has more rules).
    """

    info: ClassVar[KindInfo]
    specs: ClassVar[tuple[CollectionSpec, ...]] = ()
    """The kind's collections with a fixed name (a kind with collections per name, like the
    knowledge bases, overrides :meth:`line_kind` and :meth:`expected_schema`)."""
    cli_columns: ClassVar[tuple[tuple[str, str], ...]] = (("id", "id"),)
    """``(header, key)`` of the table ``amem memories list <name>`` prints."""
    allows_global_scope: ClassVar[bool] = False
    """Whether objects may belong to ``_global`` (the scope shared by every user)."""
    owned_objects: ClassVar[bool] = False
    """Whether each object of the kind's shared (not per-user) collections belongs to a user
    (:meth:`owner_of`): a user's export takes theirs, and a full export takes them as
    memories, not as shared data (plain LangGraph items)."""
    space_types: ClassVar[tuple[type[KindSpace], ...]] = ()
    """The kind's namespace families, one per root, that :meth:`spaces` opens (none: the kind
    serves no namespace of its own)."""
    bookkeeping: ClassVar[tuple[str, ...]] = ()
    """Collections the kind keeps for itself, holding no memory (the message log's turn
    marks): never exported, and cleaned by the kind's own ``aforget_user_parts`` and
    ``aforget_thread_parts`` rather than reported as another program's data."""

    def __init__(self, store: MemoryStore, embeddings: Embeddings) -> None:
        # What the kind needs without a store is on the class (the registry holds classes);
        # the hooks that read or delete memories run on a kind opened on one store.
        self.store = store
        self.embeddings = embeddings

    # -- storage ---------------------------------------------------------------------------

    @classmethod
    def line_kind(cls, collection: str) -> str | None:
        """Return the line kind of the objects in ``collection``; ``None``: not this kind's."""
        if any(spec.name == collection for spec in cls.specs):
            return cls.info.line_kinds[0]
        return None

    @classmethod
    def expected_schema(cls, collection: str) -> tuple[tuple[Property, ...], bool] | None:
        """Return this build's properties and ``per_user`` of one of the kind's collections."""
        for spec in cls.specs:
            if spec.name == collection:
                return spec.properties, spec.per_user
        return None

    @classmethod
    def accepts_earlier_schema(cls, spec: CollectionSpec) -> bool:
        """Whether ``spec`` is an earlier version's schema the kind upgrades on first use."""
        del spec
        return False

    @classmethod
    def upgraded_properties(
        cls, collection: str, properties: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Return an object of an accepted earlier schema as the current schema stores it.

        ``None``: the kind cannot convert one object alone (the message log needs the turn
        before). An import writes the objects of a kind that can into the current schema
        directly (also into a target already upgraded); otherwise it creates the earlier
        schema, which the kind upgrades on first use. Called with ``{}`` to ask whether the
        kind converts ``collection``'s objects at all.
        """
        del collection, properties
        return None

    @classmethod
    def upgrade_collection(cls, store: MemoryStore, collection: str) -> None:
        """Bring one of the kind's collections an earlier version wrote to the current schema.

        Synchronous storage work (an import runs it before writing); by default nothing:
        the kind upgrades on first use.
        """
        del store, collection

    # -- LangGraph namespaces --------------------------------------------------------------

    @classmethod
    def spaces(cls, ctx: SpaceContext) -> Sequence[KindSpace]:
        """Return the kind's namespace families for one ``AgenticStore``, one per root."""
        return tuple(space(ctx) for space in cls.space_types)

    # -- forgetting ------------------------------------------------------------------------

    @classmethod
    async def collections_in(cls, store: MemoryStore) -> list[str]:
        """Return the store's collections that are the kind's, sorted."""
        return sorted(n for n in await store.acollections() if cls.line_kind(n) is not None)

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete everything of ``user`` the kind holds; return the count per collection.

        The default deletes the user's partition of each per-user collection the kind has
        in the store (a shared collection is nobody's to forget).
        """
        out: dict[str, int] = {}
        for name in await self.collections_in(self.store):
            schema = self.expected_schema(name)
            if schema is not None and schema[1]:
                out[name] = await self.store.adelete_user(name, user)
        return out

    async def athreads(self, user: str) -> set[str]:
        """Return the conversations of ``user`` the kind remembers something from.

        The default: none (a kind that keeps no thread); forget finds a user's threads and
        their checkpoints by these.
        """
        del user
        return set()

    async def aforget_thread_parts(self, user: str, thread: str) -> ThreadForgotten:
        """Forget what the kind learned in one conversation of ``user`` (default: nothing)."""
        del user, thread
        return ThreadForgotten()

    async def ausers(self) -> set[str]:
        """Return the users the kind holds something for (``_global`` left out)."""
        users: set[str] = set()
        for name in await self.collections_in(self.store):
            schema = self.expected_schema(name)
            if schema is not None and schema[1]:
                users.update(await self.store.ausers(name))
        users.discard(GLOBAL_SCOPE)
        return users

    async def acount(self, user: str) -> int:
        """Return how many objects the kind holds for ``user``."""
        total = 0
        for name in await self.collections_in(self.store):
            schema = self.expected_schema(name)
            if schema is not None and schema[1] and user in await self.store.ausers(name):
                total += await self.store.acount(name, user=user)
        return total

    # -- export and import -----------------------------------------------------------------

    @classmethod
    @abstractmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the text a stored object is embedded from (re-embedding on import)."""

    @classmethod
    def embeds(cls, line_kind: str) -> bool:
        """Whether objects of ``line_kind`` are embedded (else they keep a unit marker vector)."""
        del line_kind
        return True

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check one object of an import file; raise ``InvalidInputError``.

        The store's schema is checked already (types, unknown properties); this checks the
        kind's own rules and may set ``line.keys``.
        """
        del line

    @classmethod
    def unique_keys(cls, line: ImportLine) -> list[UniqueKey]:
        """Return the keys at most one line of the file may hold (after :meth:`check_line`)."""
        del line
        return []

    @classmethod
    def shared_what(cls, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say what shared data a line is (only an operator imports it); ``None``: a user's."""
        if spec.per_user:
            return None
        return f"shared {cls.info.name}"

    @classmethod
    def owner_of(cls, collection: str, properties: Mapping[str, Any]) -> str | None:
        """Return the user an object of a shared collection belongs to (``None``: no one).

        Read only for a kind with :attr:`owned_objects`.
        """
        del collection, properties
        return None

    @classmethod
    def export_note(cls, collection: str) -> str | None:
        """Say why a collection the kind keeps is not exported; ``None``: not such a one."""
        del collection
        return None

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge one ``(collection, user)`` group of an import file into the store.

        The generic rule: an object the store holds unchanged is left as it is (importing
        twice changes nothing), one it holds under the same id with other content is
        refused (an import never overwrites a memory), a new one is written. A kind with
        more rules (facts supersede by date, messages keep their turns) overrides this.
        """
        target.merge_plain(line_kind, spec, user)

    @classmethod
    def import_gate(cls, staged: StagedLines) -> ImportGate | None:
        """Return the gate the file's lines of this kind pass after the import, if any.

        The lines the gate takes are left out by :meth:`import_group`.
        """
        del staged
        return None

    # -- the CLI ---------------------------------------------------------------------------

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return what ``amem memories list <name> --user`` shows, at most ``limit`` rows.

        The default shows the user's stored objects as stored (id and properties).
        """
        rows: list[dict[str, Any]] = []
        for name in await self.collections_in(self.store):
            schema = self.expected_schema(name)
            if schema is None or not schema[1] or user not in await self.store.ausers(name):
                continue
            for obj in await self.store.alist_objects(name, user=user, limit=limit - len(rows)):
                rows.append({"id": obj.id, **obj.properties})
            if len(rows) >= limit:
                break
        return rows

    async def ashow(self, user: str, oid: str) -> dict[str, Any] | None:
        """Return what ``amem memories show <name> ID --user`` shows; ``None``: no such object.

        The default shows the user's stored object as stored (id and properties).
        """
        for name in await self.collections_in(self.store):
            schema = self.expected_schema(name)
            if schema is None or not schema[1]:
                continue
            found = await self.store.aget(name, oid, user=user)
            if found is not None:
                return {"id": found.id, **found.properties}
        return None
