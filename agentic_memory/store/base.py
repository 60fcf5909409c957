"""The storage interface every backend implements.

Public methods check their arguments first, once (``agentic_memory.store.checks``), so both
backends reject bad input with the same error before anything is written; backends implement
the ``_``-prefixed hooks. Every method has an ``a``-prefixed coroutine twin that runs it in a
worker thread, so graph nodes never block the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import ClassVar

from agentic_memory.store.bulk import BULK_ROWS, BulkWriter
from agentic_memory.store.checks import (
    GLOBAL_SCOPE,
    MAX_SAFE_INT,
    PAGE_LIMIT,
    RESERVED_PROPERTY_NAMES,
    absent_properties,
    check_alpha,
    check_batch,
    check_filters,
    check_id,
    check_new_properties,
    check_page_size,
    check_positive,
    check_properties,
    check_user,
    check_user_id,
    check_vector,
    missing_suffix,
    property_shape,
    validate_spec,
)
from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.threads import in_thread, in_thread_iterator
from agentic_memory.store.types import (
    CollectionSpec,
    Filters,
    HybridQuery,
    InvalidInputError,
    Listing,
    MemoryObject,
    Page,
    Property,
    SearchHit,
    StoredObject,
    UnknownCollectionError,
    Update,
    UpsertResult,
    Where,
    Writes,
    check_finite,
    check_text,
)

__all__ = [
    # The checks' names callers have imported from here since before ``checks`` existed.
    "GLOBAL_SCOPE",
    "MAX_SAFE_INT",
    "PAGE_LIMIT",
    "RESERVED_PROPERTY_NAMES",
    "MemoryStore",
    "absent_properties",
    "check_alpha",
    "check_properties",
    "check_user_id",
    "missing_suffix",
    "property_shape",
]


class MemoryStore(ABC):
    """A long-term memory store: explicit collections, hybrid search, per-user isolation."""

    backend: ClassVar[str]

    def __init__(self, *, dims: int) -> None:
        check_positive("dims", dims)
        self.dims = dims
        self._specs: dict[str, CollectionSpec] = {}
        self._exclusive = KeyLocks(None)

    # -- schema ---------------------------------------------------------------------------

    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection if it is missing; an existing one must have the same schema."""
        validate_spec(spec)
        self._ensure_collection(spec)
        self._specs[spec.name] = spec

    def spec(self, name: str, *, reload: bool = False) -> CollectionSpec:
        """Return the schema of an existing collection or raise ``UnknownCollectionError``.

        The schema is cached after its first read; ``reload`` reads it again, for a caller
        that must see what another process may have changed (inside ``exclusive``).
        """
        if reload:
            self._specs.pop(name, None)
        if name not in self._specs:
            loaded = self._load_spec(name)
            if loaded is None:
                raise UnknownCollectionError(
                    f"unknown collection {name!r}: call ensure_collection() first "
                    f"(existing: {', '.join(sorted(self.collections())) or 'none'})"
                )
            self._specs[name] = loaded
        return self._specs[name]

    def collections(self) -> list[str]:
        """Names of the collections in this store."""
        return self._collections()

    def drop_collection(self, name: str) -> None:
        """Delete a collection and everything in it."""
        self.spec(name)
        self._drop_collection(name)
        self._specs.pop(name, None)

    def add_properties(self, collection: str, properties: Sequence[Property]) -> list[str]:
        """Add properties to an existing collection; return the names that were added.

        No stored object is rewritten: objects written before have none of the new
        properties (a filter ``ne`` matches them, every other condition does not). A property
        that the collection already has with the same type and indexing is skipped, so
        processes that upgrade one store at the same time all succeed. A searchable property
        cannot be added: its keyword index would miss every stored object.

        Raises:
            UnknownCollectionError: there is no such collection.
            InvalidInputError: a property is malformed, reserved, searchable, or given twice;
                nothing was changed.
            SchemaConflictError: the collection has a property of that name (in any case)
                with another type or indexing; nothing was changed.
        """
        spec = self.spec(collection)
        wanted = check_new_properties(spec, properties)
        if not wanted:
            return []
        stored, added = self._add_properties(spec.name, wanted)
        self._specs[spec.name] = stored
        return added

    def extend_collection(self, spec: CollectionSpec) -> list[str]:
        """Create the collection, or add the properties ``spec`` ends with that it lacks.

        The way a schema grows between versions: new properties are appended to the end of
        the spec, and a store written by an earlier version gets them on first use (see
        :meth:`add_properties`) while its objects stay as they are. Any other difference
        from the stored schema is refused as ``ensure_collection`` refuses it. Returns the
        names of the properties added.

        Raises:
            SchemaConflictError: the stored schema is not ``spec`` without some of its last
                properties; nothing was changed.
        """
        validate_spec(spec)
        if spec.name not in self.collections():
            self.ensure_collection(spec)
            return []
        # Read from the store, not the cache: another process may have extended it already.
        stored = self._load_spec(spec.name)
        if stored is None:  # dropped meanwhile
            self.ensure_collection(spec)
            return []
        self._specs[spec.name] = stored
        missing = missing_suffix(stored, spec)
        added = self.add_properties(spec.name, missing) if missing else []
        self.ensure_collection(spec)
        return added

    # -- writes ---------------------------------------------------------------------------

    def upsert(
        self, collection: str, objects: Sequence[MemoryObject], *, user: str | None = None
    ) -> UpsertResult:
        """Insert or replace objects by id; the whole batch is validated before any write."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_batch(spec, objects, "upsert", self.dims)
        if not objects:
            return UpsertResult()
        # After the per-object checks, so that the batch converts to one array.
        vectors = check_finite([obj.vector for obj in objects])
        return self._upsert(spec, user, Writes(list(objects), vectors))

    @contextmanager
    def bulk(
        self, collection: str, *, user: str | None = None, rows: int = BULK_ROWS
    ) -> Iterator[BulkWriter]:
        """Upsert many objects into one partition in a few large writes (ingestion, imports).

        ``writer.upsert(objects)`` checks each batch at once, as ``upsert`` does, and keeps
        it; every ``rows`` objects, on ``writer.flush()`` and when the block ends, what is
        kept is written with one upsert (on the embedded store one transaction, whose keyword
        blocks are built once for all of it). When the block raises, what was not written yet
        is dropped and what was stays. See ``agentic_memory.store.bulk``.
        """
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_positive("rows", rows)
        writer = BulkWriter(self, collection, user, rows)
        yield writer
        writer.flush()

    @asynccontextmanager
    async def abulk(
        self, collection: str, *, user: str | None = None, rows: int = BULK_ROWS
    ) -> AsyncIterator[BulkWriter]:
        """:meth:`bulk` for a coroutine: ``await writer.aupsert(objects)`` (in a worker thread)."""
        spec = await self.aspec(collection)
        user = check_user(spec, user)
        check_positive("rows", rows)
        writer = BulkWriter(self, collection, user, rows)
        yield writer
        await writer.aflush()

    def insert(
        self,
        collection: str,
        objects: Sequence[MemoryObject],
        *,
        user: str | None = None,
        unless: Filters = (),
    ) -> UpsertResult:
        """Create objects that must not exist yet: all of them, or none.

        The building block for writers that race: derive the id of what you are about to
        create from what you read (the next version, the successor of the current fact),
        insert it, and on ``ConflictError`` read again. ``unless`` adds a guard: the write is
        refused when any object of the partition matches every one of its conditions (for
        example "a message of this thread with a turn above the one I read").

        What is atomic depends on the backend (see ``docs/storage.md``, "Concurrent
        writers"): on the embedded store the checks and the write are one SQLite
        transaction, so they hold across threads and processes; on Weaviate they are
        serialised per partition by locks: this machine's, and PostgreSQL's across machines
        when one is configured (``agentic_memory.store.coordination``).

        Raises:
            ConflictError: an id exists in the partition, or an object matches ``unless``;
                nothing was written.
            InvalidInputError: the batch is malformed; nothing was written.
        """
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_batch(spec, objects, "insert", self.dims)
        check_filters(spec, unless)
        if not objects:
            return UpsertResult()
        vectors = check_finite([obj.vector for obj in objects])
        return self._insert(spec, user, Writes(list(objects), vectors, list(unless)))

    def update(
        self,
        collection: str,
        ids: Sequence[str],
        change: Callable[[StoredObject], MemoryObject | None],
        *,
        user: str | None = None,
    ) -> UpsertResult:
        """Rewrite stored objects from what they hold at the moment of the write.

        ``change`` gets each of the objects as it is stored now (with its vector) and returns
        what to store in its place, under the same id, or ``None`` to leave it as it is; an
        id that is not stored is skipped. What ``change`` returns is checked like an upsert
        before anything is written. Reading and writing are one step: on the embedded store
        one SQLite transaction (across threads and processes); on Weaviate they run under
        the partition's lock that every ``insert`` and ``update`` on this machine takes (see
        ``docs/storage.md``, "Concurrent writers"). So writers that each change other
        properties of one object all keep their change. ``change`` runs while the partition
        is locked: it must be quick and must not use the store.

        Returns:
            The ids that were rewritten.

        Raises:
            InvalidInputError: an id is malformed, or ``change`` returned an object that
                is (another id, a bad property or vector); nothing was written.
        """
        spec = self.spec(collection)
        user = check_user(spec, user)
        if isinstance(ids, str):
            raise InvalidInputError("update takes a sequence of ids, not one string")
        for i in ids:
            check_id(i)
        if not callable(change):
            raise InvalidInputError("update needs a change function")
        wanted = list(dict.fromkeys(str(uuid.UUID(i)) for i in ids))
        if not wanted:
            return UpsertResult()

        def checked(obj: StoredObject) -> MemoryObject | None:
            out = change(obj)
            if out is None:
                return None
            if not isinstance(out, MemoryObject) or str(uuid.UUID(out.id)) != obj.id:
                raise InvalidInputError(
                    f"update: the change of {obj.id} must return a MemoryObject of that id"
                )
            check_batch(spec, [out], "update", self.dims)
            return out

        return self._update(spec, user, Update(wanted, checked))

    def delete(self, collection: str, ids: Sequence[str], *, user: str | None = None) -> int:
        """Delete objects by id; return how many existed."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        if isinstance(ids, str):
            raise InvalidInputError("delete takes a sequence of ids, not one string")
        for i in ids:
            check_id(i)
        return self._delete(spec, list(ids), user) if ids else 0

    def delete_where(self, collection: str, where: Filters, *, user: str | None = None) -> int:
        """Delete the objects matching every condition; an empty filter is refused."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        if not where:
            raise InvalidInputError("delete_where needs at least one condition")
        check_filters(spec, where)
        return self._delete_where(spec, list(where), user)

    def delete_user(self, collection: str, user: str) -> int:
        """Delete everything a user has in a per-user collection; return how many objects."""
        spec = self.spec(collection)
        if not spec.per_user:
            raise InvalidInputError(f"collection {collection!r} is not per-user")
        checked = check_user(spec, user)
        assert checked is not None
        return self._delete_user(spec, checked)

    # -- reads ----------------------------------------------------------------------------

    def get(
        self, collection: str, id: str, *, user: str | None = None, include_vector: bool = False
    ) -> StoredObject | None:
        """Return one object by id, or ``None``."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_id(id)
        return self._get(spec, id, user, include_vector)

    def list_objects(
        self,
        collection: str,
        *,
        user: str | None = None,
        where: Filters = (),
        limit: int = 100,
        offset: int = 0,
        sort_by: str | None = None,
        descending: bool = False,
    ) -> list[StoredObject]:
        """Page through objects, optionally filtered and sorted by a property (ties by id)."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_filters(spec, where)
        check_positive("limit", limit)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")
        if sort_by is not None and spec.prop(sort_by).type == "text[]":
            # Weaviate compares lists element by element, SQLite compares their JSON text.
            raise InvalidInputError(f"cannot sort by the text[] property {sort_by!r}")
        return self._list(spec, user, Listing(list(where), limit, offset, sort_by, descending))

    def iterate(
        self,
        collection: str,
        *,
        user: str | None = None,
        where: Filters = (),
        page_size: int = 1000,
        include_vector: bool = False,
    ) -> Iterator[StoredObject]:
        """Yield every object matching ``where`` once, in id order, fetched page by page.

        Pages are keyset pages on the id (Weaviate: its ``after`` cursor, or ``_id >`` filters
        when there are conditions), so there is no result-window cap such as Weaviate's
        ``QUERY_MAXIMUM_RESULTS`` and deleting the objects already seen while iterating
        (as forgetting does) skips nothing. Objects written meanwhile are seen when their id
        comes after the current page. Arguments are checked before the first page is read.
        """
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_filters(spec, where)
        check_page_size(page_size)
        conditions = list(where)

        def pages() -> Iterator[StoredObject]:
            after: str | None = None
            while True:
                page = self._page_after(
                    spec, user, Page(conditions, after, page_size, include_vector)
                )
                yield from page
                if len(page) < page_size:
                    return
                after = page[-1].id

        return pages()

    def count(self, collection: str, *, user: str | None = None, where: Filters = ()) -> int:
        """Count objects, optionally filtered."""
        spec = self.spec(collection)
        user = check_user(spec, user)
        check_filters(spec, where)
        return self._count(spec, user, list(where))

    def hybrid(
        self,
        collection: str,
        *,
        query: str,
        vector: Sequence[float],
        alpha: float = 0.5,
        limit: int = 10,
        user: str | None = None,
        where: Filters = (),
    ) -> list[SearchHit]:
        """Hybrid search ranked by Weaviate's relativeScoreFusion.

        Each side's candidates are min-max normalised to [0, 1], then fused as
        ``alpha * vector + (1 - alpha) * keyword``; alpha 0 is pure BM25, 1 pure vector.
        """
        spec = self.spec(collection)
        user = check_user(spec, user)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        check_text(query, "the query")
        check_vector(vector, self.dims)
        check_alpha(alpha)
        check_positive("limit", limit)
        if limit > PAGE_LIMIT:
            # Weaviate refuses more than QUERY_MAXIMUM_RESULTS hits (db/search.go).
            raise InvalidInputError(f"limit must be at most {PAGE_LIMIT}, got {limit}")
        check_filters(spec, where)
        search = HybridQuery(query, list(vector), float(alpha), limit, list(where))
        return self._hybrid(spec, user, search)

    def users(self, collection: str) -> list[str]:
        """Users that have objects in a per-user collection."""
        spec = self.spec(collection)
        if not spec.per_user:
            raise InvalidInputError(f"collection {collection!r} is not per-user")
        return self._users(spec)

    def erase_deleted(self) -> bool:
        """Make deleted data unrecoverable from the store's own files, where it can.

        The embedded store empties its write-ahead log (and vacuums an old file once); a
        server backend such as Weaviate manages its own storage, so this does nothing there.
        Returns False when the work could not be completed now (see the backend).
        """
        return True

    def reclaim_space(self) -> int:
        """Give the space of deleted data back to the file system, where the backend can.

        What purges and forgets call once they deleted. The embedded store cuts its file
        when a tenth of it or more is free; a server backend such as Weaviate compacts its
        own storage, so this does nothing there. Returns the bytes given back.
        """
        return 0

    @contextmanager
    def exclusive(self, *key: str) -> Iterator[None]:
        """Hold ``key`` against every other user of this store for the ``with`` block.

        For work that no single write makes atomic, such as a collection's upgrade through a
        staging copy: two writers doing it at once would drop what the other rebuilt. Here,
        the threads sharing this handle; the embedded store adds its other handles and
        processes, Weaviate the processes of this machine and, with a PostgreSQL
        coordinator, other machines. Blocks are not re-entrant: never nest two.
        """
        with self._exclusive.hold(*key):
            yield

    @asynccontextmanager
    async def aexclusive(self, *key: str) -> AsyncIterator[None]:
        """:meth:`exclusive` for a coroutine: waiting for the key never blocks the loop.

        The wait runs in a thread of its own, not in the loop's executor: coroutines parked
        there could take every worker while the holder needs one to finish (every store
        call runs there). A waiter cancelled before it got the key leaves nothing held.
        Thread locks and ``flock`` may be released by another thread than the one that took
        them.
        """
        held = self.exclusive(*key)
        loop = asyncio.get_running_loop()
        entered: asyncio.Future[None] = loop.create_future()
        state = {"abandoned": False, "entered": False}
        guard = threading.Lock()

        def settle(error: BaseException | None) -> None:
            if entered.done():
                return
            if error is None:
                entered.set_result(None)
            else:
                entered.set_exception(error)

        def wait() -> None:
            try:
                held.__enter__()
            except BaseException as exc:  # the waiter re-raises it
                loop.call_soon_threadsafe(settle, exc)
                return
            with guard:
                state["entered"] = not state["abandoned"]
            if not state["entered"]:
                held.__exit__(None, None, None)
                return
            loop.call_soon_threadsafe(settle, None)

        threading.Thread(target=wait, name="amem-exclusive", daemon=True).start()
        try:
            await entered
        except BaseException:
            with guard:
                state["abandoned"] = True
                owned = state["entered"]
            if owned:
                await asyncio.to_thread(held.__exit__, None, None, None)
            raise
        try:
            yield
        finally:
            await asyncio.to_thread(held.__exit__, None, None, None)

    @abstractmethod
    def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- async twins: each runs the method above in a worker thread ------------------------

    aensure_collection = in_thread(ensure_collection)
    aspec = in_thread(spec)
    acollections = in_thread(collections)
    adrop_collection = in_thread(drop_collection)
    aadd_properties = in_thread(add_properties)
    aextend_collection = in_thread(extend_collection)
    aupsert = in_thread(upsert)
    ainsert = in_thread(insert)
    aupdate = in_thread(update)
    adelete = in_thread(delete)
    adelete_where = in_thread(delete_where)
    adelete_user = in_thread(delete_user)
    aget = in_thread(get)
    alist_objects = in_thread(list_objects)
    acount = in_thread(count)
    ahybrid = in_thread(hybrid)
    ausers = in_thread(users)
    aerase_deleted = in_thread(erase_deleted)
    areclaim_space = in_thread(reclaim_space)

    aiterate = in_thread_iterator(iterate)

    # -- backend hooks --------------------------------------------------------------------

    @abstractmethod
    def _ensure_collection(self, spec: CollectionSpec) -> None: ...

    @abstractmethod
    def _load_spec(self, name: str) -> CollectionSpec | None: ...

    @abstractmethod
    def _collections(self) -> list[str]: ...

    @abstractmethod
    def _add_properties(
        self, name: str, properties: list[Property]
    ) -> tuple[CollectionSpec, list[str]]:
        """Add the checked properties the stored schema lacks, as one step where it can.

        Checks them again against the schema in storage (another process may have changed
        it since this one cached it): one of the same name must have the same shape.
        Returns the stored schema afterwards and the names this call added.
        """

    @abstractmethod
    def _drop_collection(self, name: str) -> None: ...

    @abstractmethod
    def _upsert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        """Write a checked batch (its ``unless`` is empty)."""

    @abstractmethod
    def _insert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        """Create a checked batch, or raise ``ConflictError`` and write nothing."""

    @abstractmethod
    def _update(self, spec: CollectionSpec, user: str | None, update: Update) -> UpsertResult:
        """Apply the checked ``update.change`` to its stored objects in one step."""

    @abstractmethod
    def _delete(self, spec: CollectionSpec, ids: list[str], user: str | None) -> int: ...

    @abstractmethod
    def _delete_where(self, spec: CollectionSpec, where: list[Where], user: str | None) -> int: ...

    @abstractmethod
    def _delete_user(self, spec: CollectionSpec, user: str) -> int: ...

    @abstractmethod
    def _get(
        self, spec: CollectionSpec, id: str, user: str | None, include_vector: bool
    ) -> StoredObject | None: ...

    @abstractmethod
    def _list(
        self, spec: CollectionSpec, user: str | None, listing: Listing
    ) -> list[StoredObject]: ...

    @abstractmethod
    def _page_after(self, spec: CollectionSpec, user: str | None, page: Page) -> list[StoredObject]:
        """Return up to ``page.limit`` matching objects with ids after ``page.after``, by id."""

    @abstractmethod
    def _count(self, spec: CollectionSpec, user: str | None, where: list[Where]) -> int: ...

    @abstractmethod
    def _hybrid(
        self, spec: CollectionSpec, user: str | None, search: HybridQuery
    ) -> list[SearchHit]: ...

    @abstractmethod
    def _users(self, spec: CollectionSpec) -> list[str]: ...
