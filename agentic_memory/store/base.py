"""The storage interface every backend implements, with the validation they share.

Public methods validate their arguments here, once, so both backends reject bad input with
the same error before anything is written; backends implement the ``_``-prefixed hooks.
Every method has an ``a``-prefixed coroutine twin that runs it in a worker thread, so graph
nodes never block the event loop.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from agentic_memory.store.bulk import BULK_ROWS, BulkWriter
from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.threads import in_thread, in_thread_iterator
from agentic_memory.store.types import (
    COLLECTION_NAME_RE,
    MAX_USER_ID_LENGTH,
    PROPERTY_NAME_RE,
    CollectionSpec,
    Filters,
    InvalidInputError,
    MemoryObject,
    MissingUserError,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    UnknownCollectionError,
    UpsertResult,
    VectorSizeError,
    Where,
    canonical_id,
    check_finite,
    check_text,
)

_NUMBER_TYPES: frozenset[type] = frozenset({int, float})

MAX_SAFE_INT = 2**53
"""Integers are refused beyond ±2^53: weaviate-client sends scalar properties in a protobuf
``Struct``, whose numbers are 64-bit floats, so larger ones would be rounded silently (and the
server sorts ints as float64)."""

PAGE_LIMIT = 10_000
"""The largest page ``iterate`` asks for: Weaviate's default ``QUERY_MAXIMUM_RESULTS``."""

RESERVED_PROPERTY_NAMES = frozenset(
    {"id", "vector", "_id", "_additional", "_creationTimeUnix", "_lastUpdateTimeUnix"}
)
"""Names Weaviate refuses (``entities/schema/validation.go`` reservedPropertyNames) or reads as
its own internal properties in filters and sorting, plus the store's own ``id`` and
``vector``."""

_SCALAR_CHECKS: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "date": (str,),
}


class MemoryStore(ABC):
    """A long-term memory store: explicit collections, hybrid search, per-user isolation."""

    backend: ClassVar[str]

    def __init__(self, *, dims: int) -> None:
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            raise InvalidInputError(f"dims must be a positive integer, got {dims!r}")
        self.dims = dims
        self._specs: dict[str, CollectionSpec] = {}
        self._exclusive = KeyLocks(None)

    # -- schema ---------------------------------------------------------------------------

    def ensure_collection(self, spec: CollectionSpec) -> None:
        """Create the collection if it is missing; an existing one must have the same schema."""
        _validate_spec(spec)
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
        wanted = _check_new_properties(spec, properties)
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
        _validate_spec(spec)
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
        user = self._check_user(spec, user)
        self._check_batch(spec, objects, "upsert")
        if not objects:
            return UpsertResult()
        # After the per-object checks, so that the batch converts to one array.
        vectors = check_finite([obj.vector for obj in objects])
        return self._upsert(spec, list(objects), user, vectors)

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
        user = self._check_user(spec, user)
        _check_positive("rows", rows)
        writer = BulkWriter(self, collection, user, rows)
        yield writer
        writer.flush()

    @asynccontextmanager
    async def abulk(
        self, collection: str, *, user: str | None = None, rows: int = BULK_ROWS
    ) -> AsyncIterator[BulkWriter]:
        """:meth:`bulk` for a coroutine: ``await writer.aupsert(objects)`` (in a worker thread)."""
        spec = await self.aspec(collection)
        user = self._check_user(spec, user)
        _check_positive("rows", rows)
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
        user = self._check_user(spec, user)
        self._check_batch(spec, objects, "insert")
        _check_filters(spec, unless)
        if not objects:
            return UpsertResult()
        vectors = check_finite([obj.vector for obj in objects])
        return self._insert(spec, list(objects), user, vectors, list(unless))

    def _check_batch(
        self, spec: CollectionSpec, objects: Sequence[MemoryObject], verb: str
    ) -> None:
        if isinstance(objects, MemoryObject):
            raise InvalidInputError(f"{verb} takes a sequence of MemoryObject, not one object")
        seen: set[str] = set()
        known = {p.name: p.type for p in spec.properties}
        for obj in objects:
            if not isinstance(obj, MemoryObject):
                raise InvalidInputError(f"expected MemoryObject, got {type(obj).__name__}")
            # Canonical form: "ABC…" and "abc…" are one object on both backends.
            key = canonical_id(obj.id)
            if key in seen:
                raise InvalidInputError(f"id {obj.id} appears twice in one batch")
            seen.add(key)
            self._check_vector_form(obj.vector)
            _check_properties(spec, obj.properties, known)

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
        user = self._check_user(spec, user)
        if isinstance(ids, str):
            raise InvalidInputError("update takes a sequence of ids, not one string")
        for i in ids:
            _check_id(i)
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
            self._check_batch(spec, [out], "update")
            return out

        return self._update(spec, wanted, checked, user)

    def delete(self, collection: str, ids: Sequence[str], *, user: str | None = None) -> int:
        """Delete objects by id; return how many existed."""
        spec = self.spec(collection)
        user = self._check_user(spec, user)
        if isinstance(ids, str):
            raise InvalidInputError("delete takes a sequence of ids, not one string")
        for i in ids:
            _check_id(i)
        return self._delete(spec, list(ids), user) if ids else 0

    def delete_where(self, collection: str, where: Filters, *, user: str | None = None) -> int:
        """Delete the objects matching every condition; an empty filter is refused."""
        spec = self.spec(collection)
        user = self._check_user(spec, user)
        if not where:
            raise InvalidInputError("delete_where needs at least one condition")
        _check_filters(spec, where)
        return self._delete_where(spec, list(where), user)

    def delete_user(self, collection: str, user: str) -> int:
        """Delete everything a user has in a per-user collection; return how many objects."""
        spec = self.spec(collection)
        if not spec.per_user:
            raise InvalidInputError(f"collection {collection!r} is not per-user")
        checked = self._check_user(spec, user)
        assert checked is not None
        return self._delete_user(spec, checked)

    # -- reads ----------------------------------------------------------------------------

    def get(
        self, collection: str, id: str, *, user: str | None = None, include_vector: bool = False
    ) -> StoredObject | None:
        """Return one object by id, or ``None``."""
        spec = self.spec(collection)
        user = self._check_user(spec, user)
        _check_id(id)
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
        user = self._check_user(spec, user)
        _check_filters(spec, where)
        _check_positive("limit", limit)
        if not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")
        if sort_by is not None and spec.prop(sort_by).type == "text[]":
            # Weaviate compares lists element by element, SQLite compares their JSON text.
            raise InvalidInputError(f"cannot sort by the text[] property {sort_by!r}")
        return self._list(spec, user, list(where), limit, offset, sort_by, descending)

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
        user = self._check_user(spec, user)
        _check_filters(spec, where)
        _check_page_size(page_size)
        conditions = list(where)

        def pages() -> Iterator[StoredObject]:
            after: str | None = None
            while True:
                page = self._page_after(spec, user, conditions, after, page_size, include_vector)
                yield from page
                if len(page) < page_size:
                    return
                after = page[-1].id

        return pages()

    def count(self, collection: str, *, user: str | None = None, where: Filters = ()) -> int:
        """Count objects, optionally filtered."""
        spec = self.spec(collection)
        user = self._check_user(spec, user)
        _check_filters(spec, where)
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
        user = self._check_user(spec, user)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        check_text(query, "the query")
        self._check_vector(vector)
        check_alpha(alpha)
        _check_positive("limit", limit)
        if limit > PAGE_LIMIT:
            # Weaviate refuses more than QUERY_MAXIMUM_RESULTS hits (db/search.go).
            raise InvalidInputError(f"limit must be at most {PAGE_LIMIT}, got {limit}")
        _check_filters(spec, where)
        return self._hybrid(spec, query, list(vector), float(alpha), limit, user, list(where))

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

    # -- validation -----------------------------------------------------------------------

    def _check_user(self, spec: CollectionSpec, user: str | None) -> str | None:
        if not spec.per_user:
            if user is not None:
                raise InvalidInputError(
                    f"collection {spec.name!r} is shared, not per-user: do not pass a user"
                )
            return None
        if user is None or user == "":
            raise MissingUserError(f"collection {spec.name!r} is per-user: a user id is required")
        check_user_id(user)
        return user

    def _check_vector(self, vector: Sequence[float]) -> None:
        self._check_vector_form(vector)
        check_finite([vector])

    def _check_vector_form(self, vector: Sequence[float]) -> None:
        if isinstance(vector, str | bytes) or not hasattr(vector, "__len__"):
            raise InvalidInputError(
                f"vector must be a sequence of floats, got {type(vector).__name__}"
            )
        if len(vector) != self.dims:
            raise VectorSizeError(
                f"vector has {len(vector)} dimensions, this store uses {self.dims}"
            )
        if isinstance(vector, np.ndarray):
            if vector.dtype.kind not in "fiu":
                raise InvalidInputError(f"vector values must be floats, got dtype {vector.dtype}")
            if vector.ndim != 1:
                raise InvalidInputError(f"a vector must be one-dimensional, got {vector.shape}")
            return
        kinds = set(map(type, vector))
        if not kinds <= _NUMBER_TYPES and not all(
            issubclass(k, np.floating | np.integer) for k in kinds - _NUMBER_TYPES
        ):
            bad = next(x for x in vector if type(x) not in _NUMBER_TYPES)
            raise InvalidInputError(f"vector values must be finite floats, got {bad!r}")

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
    def _upsert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: npt.NDArray[np.float64],
    ) -> UpsertResult:
        """Write a checked batch; ``vectors[i]`` is ``objects[i].vector`` as checked float64."""

    @abstractmethod
    def _insert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: npt.NDArray[np.float64],
        unless: list[Where],
    ) -> UpsertResult:
        """Create a checked batch, or raise ``ConflictError`` and write nothing."""

    @abstractmethod
    def _update(
        self,
        spec: CollectionSpec,
        ids: list[str],
        change: Callable[[StoredObject], MemoryObject | None],
        user: str | None,
    ) -> UpsertResult:
        """Apply a checked ``change`` to the stored objects of canonical ``ids`` in one step."""

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
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        limit: int,
        offset: int,
        sort_by: str | None,
        descending: bool,
    ) -> list[StoredObject]: ...

    @abstractmethod
    def _page_after(
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        after: str | None,
        limit: int,
        include_vector: bool,
    ) -> list[StoredObject]:
        """Return up to ``limit`` matching objects with ids after ``after``, in id order."""

    @abstractmethod
    def _count(self, spec: CollectionSpec, user: str | None, where: list[Where]) -> int: ...

    @abstractmethod
    def _hybrid(
        self,
        spec: CollectionSpec,
        query: str,
        vector: list[float],
        alpha: float,
        limit: int,
        user: str | None,
        where: list[Where],
    ) -> list[SearchHit]: ...

    @abstractmethod
    def _users(self, spec: CollectionSpec) -> list[str]: ...


def check_user_id(user: object) -> str:
    """Validate a user id: a non-empty string of at most 256 characters, not starting with ``_``.

    A leading underscore is reserved for store-internal scopes (for example the global
    procedural rules).
    """
    if not isinstance(user, str):
        raise InvalidInputError(f"user id must be a string, got {type(user).__name__}")
    if not user.strip():
        raise MissingUserError("user id is empty")
    if len(user) > MAX_USER_ID_LENGTH:
        raise InvalidInputError(f"user id is longer than {MAX_USER_ID_LENGTH} characters")
    if user.startswith("_") and user != GLOBAL_SCOPE:
        raise InvalidInputError("user ids starting with '_' are reserved")
    if any(ord(c) < 32 for c in user):
        raise InvalidInputError("user id contains control characters")
    return check_text(user, "the user id")


GLOBAL_SCOPE = "_global"
"""The reserved 'user' under which shared (non-personal) rows of a per-user collection live."""


def _validate_spec(spec: CollectionSpec) -> None:
    if not isinstance(spec, CollectionSpec):
        raise InvalidInputError(f"expected CollectionSpec, got {type(spec).__name__}")
    if not COLLECTION_NAME_RE.match(spec.name):
        raise InvalidInputError(
            f"collection name {spec.name!r} must start with an upper-case letter and contain "
            "only letters, digits and underscores (at most 63 characters)"
        )
    names: set[str] = set()
    for prop in spec.properties:
        if not PROPERTY_NAME_RE.match(prop.name):
            raise InvalidInputError(f"invalid property name {prop.name!r} in {spec.name!r}")
        if prop.name in RESERVED_PROPERTY_NAMES:
            raise InvalidInputError(
                f"property name {prop.name!r} in {spec.name!r} is reserved "
                f"({', '.join(sorted(RESERVED_PROPERTY_NAMES))})"
            )
        # Weaviate refuses two names that differ only in case (class.go validateProperty).
        if prop.name.lower() in names:
            raise InvalidInputError(f"property {prop.name!r} appears twice in {spec.name!r}")
        names.add(prop.name.lower())
        if prop.searchable and prop.type not in ("text", "text[]"):
            raise InvalidInputError(f"only text properties can be searchable ({prop.name!r})")
    _validate_indexes(spec)


def property_shape(prop: Property) -> tuple[str, str, bool, bool]:
    """Return what must match for two properties to be one: name, type and indexing."""
    return (prop.name, prop.type, prop.searchable, prop.filterable)


def missing_suffix(stored: CollectionSpec, spec: CollectionSpec) -> list[Property]:
    """Return the properties ``spec`` adds to ``stored`` at its end ([] when none).

    Raises:
        SchemaConflictError: ``stored`` is not ``spec`` without some of its last properties
            (compared by name, type and indexing; the order of the shared ones is not
            compared, as Weaviate keeps its own).
    """
    names = {p.name for p in stored.properties}
    missing = [p for p in spec.properties if p.name not in names]
    common = [p for p in spec.properties if p.name in names]
    if (
        stored.per_user != spec.per_user
        or {property_shape(p) for p in stored.properties} != {property_shape(p) for p in common}
        or (missing and list(spec.properties[-len(missing) :]) != missing)
    ):
        raise SchemaConflictError(
            f"collection {spec.name!r} exists with a schema that {spec.name!r} cannot be "
            "reached from by adding properties at its end: stored "
            f"{', '.join(p.name for p in stored.properties)}; "
            f"requested {', '.join(p.name for p in spec.properties)}"
        )
    return missing


_PROPERTY_TYPES = frozenset({"text", "text[]", "int", "number", "bool", "date"})


def absent_properties(stored: CollectionSpec, properties: Sequence[Property]) -> list[Property]:
    """Return the properties ``stored`` lacks; one it has (in any case) must be the same.

    Raises:
        SchemaConflictError: ``stored`` has a property of that name with another type or
            indexing.
    """
    known = {p.name.lower(): p for p in stored.properties}
    absent = []
    for prop in properties:
        old = known.get(prop.name.lower())
        if old is None:
            absent.append(prop)
        elif property_shape(old) != property_shape(prop):
            raise SchemaConflictError(
                f"collection {stored.name!r} already has a property {old.name!r} "
                f"({old.type}, searchable={old.searchable}, filterable={old.filterable})"
            )
    return absent


def _check_new_properties(spec: CollectionSpec, properties: object) -> list[Property]:
    """Validate properties to add to ``spec``; return those it does not have yet."""
    if isinstance(properties, Property) or not isinstance(properties, Sequence):
        raise InvalidInputError("add_properties takes a sequence of Property")
    seen: set[str] = set()
    for prop in properties:
        if not isinstance(prop, Property):
            raise InvalidInputError(f"expected Property, got {type(prop).__name__}")
        if not isinstance(prop.name, str) or not PROPERTY_NAME_RE.match(prop.name):
            raise InvalidInputError(f"invalid property name {prop.name!r}")
        if prop.type not in _PROPERTY_TYPES:
            raise InvalidInputError(f"unknown property type {prop.type!r} for {prop.name!r}")
        if prop.searchable:
            raise InvalidInputError(
                f"cannot add the searchable property {prop.name!r} to {spec.name!r}: the "
                "objects already stored would be missing from its keyword index"
            )
        if prop.name.lower() in seen:
            raise InvalidInputError(f"property {prop.name!r} is given twice")
        seen.add(prop.name.lower())
    wanted = absent_properties(spec, list(properties))
    # Reserved words and the other rules of a new collection's names.
    _validate_spec(replace(spec, properties=(*spec.properties, *wanted)))
    return wanted


def _validate_indexes(spec: CollectionSpec) -> None:
    if not isinstance(spec.indexes, tuple):
        raise InvalidInputError(f"indexes of {spec.name!r} must be a tuple of tuples")
    known = {p.name: p for p in spec.properties}
    seen: set[tuple[str, ...]] = set()
    for index in spec.indexes:
        if not isinstance(index, tuple) or not index:
            raise InvalidInputError(f"an index of {spec.name!r} must be a non-empty tuple")
        if index in seen or len(set(index)) != len(index):
            raise InvalidInputError(f"index {index!r} of {spec.name!r} repeats itself")
        seen.add(index)
        for name in index:
            prop = known.get(name) if isinstance(name, str) else None
            if prop is None or not prop.filterable or prop.type == "text[]":
                raise InvalidInputError(
                    f"index {index!r} of {spec.name!r}: {name!r} is not a filterable "
                    "scalar property"
                )


def _check_id(value: object) -> None:
    canonical_id(value)


def _check_page_size(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= PAGE_LIMIT:
        raise InvalidInputError(f"page_size must be an integer in 1..{PAGE_LIMIT}, got {value!r}")


def check_alpha(alpha: object) -> float:
    """Return a hybrid-search ``alpha`` as a float, or raise ``InvalidInputError``."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
        raise InvalidInputError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")


def _check_value(spec: CollectionSpec, prop_name: str, ptype: str, value: object) -> None:
    # The common cases first: plain text and integers in range (bool is an int subclass,
    # so ``type(...) is`` keeps it out).
    if type(value) is str and ptype == "text":
        if not value.isascii():
            check_text(value, f"{spec.name}.{prop_name}")
        return
    if type(value) is int and ptype in ("int", "number") and -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return

    if ptype == "text[]":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidInputError(
                f"{spec.name}.{prop_name} must be a list of strings, got {value!r:.80}"
            )
        for item in value:
            check_text(item, f"{spec.name}.{prop_name}")
        return
    allowed = _SCALAR_CHECKS[ptype]
    if isinstance(value, bool) and ptype != "bool":
        raise InvalidInputError(f"{spec.name}.{prop_name} must be {ptype}, got a bool")
    if not isinstance(value, allowed):
        raise InvalidInputError(
            f"{spec.name}.{prop_name} must be {ptype}, got {type(value).__name__}"
        )
    if ptype == "text":
        check_text(value, f"{spec.name}.{prop_name}")  # type: ignore[arg-type]
    if ptype == "date":
        from datetime import UTC, datetime  # noqa: PLC0415

        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"{spec.name}.{prop_name} must be an RFC 3339 date, got {value!r}"
            ) from None
        if parsed.tzinfo is None:
            raise InvalidInputError(f"{spec.name}.{prop_name} must carry a timezone: {value!r}")
        try:
            # Both backends store the moment in UTC: year 1 at +14:00 has none.
            parsed.astimezone(UTC)
        except OverflowError:
            raise InvalidInputError(
                f"{spec.name}.{prop_name} is out of range in UTC (years 1 to 9999): {value!r}"
            ) from None
    if ptype == "int" and not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:  # type: ignore[operator]
        raise InvalidInputError(
            f"{spec.name}.{prop_name} must be within ±2^53 (Weaviate's client sends integers "
            f"as 64-bit floats), got {value!r}"
        )
    if ptype == "number":
        try:
            finite = math.isfinite(float(value))  # type: ignore[arg-type]
        except OverflowError:
            finite = False
        if not finite:
            raise InvalidInputError(f"{spec.name}.{prop_name} must be a finite number")


def check_properties(spec: CollectionSpec, properties: object) -> None:
    """Check an object's properties as every write does (names, types, ranges, text)."""
    _check_properties(spec, properties)


def _check_properties(
    spec: CollectionSpec, properties: object, known: Mapping[str, str] | None = None
) -> None:
    if not isinstance(properties, dict):
        raise InvalidInputError(f"properties must be a dict, got {type(properties).__name__}")
    if known is None:
        known = {p.name: p.type for p in spec.properties}
    for key, value in properties.items():
        ptype = known.get(key)
        if ptype is None:
            raise InvalidInputError(f"collection {spec.name!r} has no property {key!r}")
        if value is None:
            continue
        _check_value(spec, key, ptype, value)


def _check_filters(spec: CollectionSpec, where: Filters) -> None:
    if isinstance(where, Where):
        raise InvalidInputError("filters are a sequence of Where, not one Where")
    for cond in where:
        if not isinstance(cond, Where):
            raise InvalidInputError(f"expected Where, got {type(cond).__name__}")
        prop = spec.prop(cond.prop)
        if not prop.filterable:
            raise InvalidInputError(f"{spec.name}.{cond.prop} is not filterable")
        if cond.op == "in":
            if not isinstance(cond.value, list | tuple) or not cond.value:
                raise InvalidInputError(f"'in' on {cond.prop!r} needs a non-empty list")
            for v in cond.value:
                _check_value(spec, cond.prop, prop.type.removesuffix("[]"), v)
        elif cond.op == "contains":
            if prop.type != "text[]":
                raise InvalidInputError(
                    f"'contains' needs a text[] property, {cond.prop!r} is {prop.type}"
                )
            _check_value(spec, cond.prop, "text", cond.value)
        elif cond.op in ("eq", "ne", "gt", "gte", "lt", "lte"):
            if prop.type == "text[]":
                raise InvalidInputError(f"use 'contains' on the text[] property {cond.prop!r}")
            if cond.op not in ("eq", "ne") and prop.type in ("text", "bool"):
                raise InvalidInputError(
                    f"{cond.op!r} is not defined on {prop.type} ({cond.prop!r})"
                )
            _check_value(spec, cond.prop, prop.type, cond.value)
        else:
            raise InvalidInputError(f"unknown filter operator {cond.op!r}")
