"""``WeaviateStore``: the ``MemoryStore`` contract on a Weaviate server (v4 client, gRPC).

Constructing the class opens nothing; ``WeaviateStore.connect`` does. Here: the schema,
tenants and writes. Beside it: ``reads`` (lookups, pages and hybrid search on a bound
collection), ``retries`` (closed store, passing cluster states), ``schema`` (specs, tenants,
values), ``filters`` (conditions and sorting), ``scores`` (explain-score parsing) and
``settings`` (connection and scale).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import weaviate
from weaviate.classes.config import (
    Configure,
    Reconfigure,
    ReplicationDeletionStrategy,
    VectorDistances,
)
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter
from weaviate.classes.tenants import Tenant
from weaviate.exceptions import WeaviateInsertManyAllFailedError

from agentic_memory.paths import amem_home
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.checks import absent_properties, check_positive
from agentic_memory.store.coordination import (
    Coordination,
    PostgresLocks,
    WriteLocks,
    coordination_setting,
)
from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.types import (
    CollectionSpec,
    ConflictError,
    HybridQuery,
    Listing,
    Page,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    Update,
    UpsertResult,
    Where,
    Writes,
    canonical_id,
    check_finite,
)
from agentic_memory.store.weaviate.filters import build_filter
from agentic_memory.store.weaviate.reads import (
    fetch_after,
    fetch_by_ids,
    hybrid_hits,
    is_active,
    list_page,
    stored,
    users_of,
    vector_side_only,
)
from agentic_memory.store.weaviate.repair import reindex_unindexed
from agentic_memory.store.weaviate.retries import (
    TENANT_GONE_RE,
    create_settled,
    guarded,
    no_repeat,
)
from agentic_memory.store.weaviate.schema import (
    VECTOR_NAME,
    collection_description,
    describe_spec,
    parse_description,
    schema_signature,
    spec_from_config,
    tenant_name,
    to_weaviate_properties,
    weaviate_properties,
)
from agentic_memory.store.weaviate.settings import (
    CONSISTENCY_LEVELS,
    ScaleSettings,
    connection_settings,
    scale_settings,
)

BATCH_SIZE = 100
"""Objects per insert or delete request."""
WRITE_TIMEOUT_S = 30.0
"""How long the client waits for a write (the client's default is 90 s, for batches far
larger than ``BATCH_SIZE``). A batch that reached a node as the cluster's Raft leader died
waits for that leader with no deadline of the server's (``retries._TIMED_OUT_RE``): this bounds the
stall of a turn before the write is sent again."""

logger = logging.getLogger(__name__)


class WeaviateStore(MemoryStore):
    """A ``MemoryStore`` on a Weaviate server (v4 collections API, gRPC)."""

    backend = "weaviate"

    def __init__(
        self,
        client: Any,
        *,
        dims: int,
        scale: ScaleSettings | None = None,
        lock_dir: str | Path | None = None,
        coordinator: str | None = None,
    ) -> None:
        """Wrap a connected ``weaviate.WeaviateClient``; the store closes it on ``close()``.

        ``scale`` defaults to ``ScaleSettings()`` (one shard per shared collection, the
        server's replication factor and consistency level). ``lock_dir`` holds the lock files
        that serialise ``insert`` between processes of this machine (default
        ``$AMEM_HOME/locks/weaviate``): processes that should exclude each other must use the
        same one. ``coordinator`` serialises ``insert`` between machines: a PostgreSQL URI,
        or ``"local"`` for this machine only; default ``AMEM_COORDINATOR_URI``, else the
        deployment's PostgreSQL (``AMEM_POSTGRES_URI``, ``DATABASE_URI``, ``POSTGRES_URI``;
        see ``agentic_memory.store.coordination``). No connection to PostgreSQL is opened
        before the first ``insert``.

        Raises:
            InvalidInputError: ``coordinator`` (or the variable it came from) is not a
                PostgreSQL URI nor ``local``.
        """
        super().__init__(dims=dims)
        self.coordination: Coordination = coordination_setting(coordinator)
        self._client = client
        self.scale = scale or ScaleSettings()
        self._closed = False
        self._lock = threading.Lock()
        # Tenants known to exist, per collection: saves a round trip on every call.
        self._tenants: dict[str, set[str]] = {}
        self._volume_issues: dict[str, str] = {}
        locks = Path(lock_dir) if lock_dir is not None else amem_home() / "locks" / "weaviate"
        self._inserts = WriteLocks(
            KeyLocks(locks),
            PostgresLocks(self.coordination.uri) if self.coordination.uri is not None else None,
        )
        # Lock files of their own: an insert made inside an exclusive block must not wait
        # for its own stripe. PostgreSQL's keys are hashed apart from the inserts' keys.
        self._exclusive_locks = WriteLocks(KeyLocks(locks / "exclusive"), self._inserts.remote)
        logger.info("Weaviate create-only writes coordinated by %s", self.coordination.describe())

    @classmethod
    def connect(
        cls,
        dims: int,
        url: str | None = None,
        api_key: str | None = None,
        grpc_port: int | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        scale: ScaleSettings | None = None,
        coordinator: str | None = None,
    ) -> WeaviateStore:
        """Connect to Weaviate and return a store using vectors of size ``dims``.

        Arguments win over ``WEAVIATE_URL``, ``WEAVIATE_API_KEY``, ``WEAVIATE_GRPC_PORT``
        and ``WEAVIATE_GRPC_HOST``; ``scale`` over ``scale_settings()`` (the
        ``WEAVIATE_REPLICATION_FACTOR``, ``WEAVIATE_SHARDS``, ``WEAVIATE_CONSISTENCY_LEVEL`` and
        ``WEAVIATE_QUERY_MAXIMUM_RESULTS`` variables); ``coordinator`` over
        ``AMEM_COORDINATOR_URI`` (see ``__init__``).
        """
        check_positive("dims", dims)
        settings = connection_settings(url, api_key, grpc_port)
        scale = scale or scale_settings()
        # Checked before connecting: a bad setting is refused without touching the server.
        coordination_setting(coordinator)
        try:
            client = weaviate.connect_to_custom(
                http_host=settings.http_host,
                http_port=settings.http_port,
                http_secure=settings.http_secure,
                grpc_host=settings.grpc_host,
                grpc_port=settings.grpc_port,
                grpc_secure=settings.grpc_secure,
                headers=dict(headers) if headers else None,
                auth_credentials=Auth.api_key(settings.api_key) if settings.api_key else None,
                additional_config=AdditionalConfig(timeout=Timeout(insert=WRITE_TIMEOUT_S)),
                # The client's start-up checks ask pypi.org for its latest version on every
                # connect: a call out of the deployment (an offline one waits for it). The
                # server's meta is still read, and gRPC is reached by the first query.
                skip_init_checks=True,
            )
        except weaviate.exceptions.WeaviateBaseError as exc:
            scheme = "https" if settings.http_secure else "http"
            raise StoreError(
                f"cannot reach Weaviate at {scheme}://{settings.http_host}:{settings.http_port} "
                f"(gRPC {settings.grpc_host}:{settings.grpc_port}); is it running "
                f"(`docker compose up -d`)? {exc}"
            ) from exc
        try:
            return cls(client, dims=dims, scale=scale, coordinator=coordinator)
        except BaseException:
            client.close()
            raise

    @contextmanager
    def exclusive(self, *key: str) -> Iterator[None]:
        """Hold ``key`` against this machine's processes and, with a coordinator, others'."""
        with self._exclusive_locks.hold("exclusive", *key):
            yield

    def reindex_unindexed(self) -> dict[str, int]:
        """Write again what the connected node holds but its indexes miss (``repair``).

        After a node was killed mid-write, run it on a store connected to that node. Returns
        the objects rewritten per collection (``Collection`` or ``Collection/tenant``).
        Cold tenants are not read (reading would wake every one of them): a tenant is written
        out whole when it is deactivated, so a crash leaves nothing unindexed in it.
        """
        repaired: dict[str, int] = {}
        for name in self.collections():
            collection = self._collection(name)
            try:
                per_user = self.spec(name).per_user
                tenants = (
                    sorted(n for n, t in collection.tenants.get().items() if is_active(t))
                    if per_user
                    else [None]
                )
                for tenant in tenants:
                    bound = collection if tenant is None else collection.with_tenant(tenant)
                    count = reindex_unindexed(bound)
                    if count:
                        repaired[name if tenant is None else f"{name}/{tenant}"] = count
            except weaviate.exceptions.WeaviateBaseError as exc:
                raise StoreError(f"Weaviate repair of {name!r} failed: {exc}") from exc
        return repaired

    def close(self) -> None:
        """Close the client's HTTP and gRPC connections (and PostgreSQL's, if used).

        Later calls raise ``StoreError``.
        """
        if not self._closed:
            self._closed = True
            self._inserts.close()
            self._client.close()

    # -- schema ---------------------------------------------------------------------------

    @guarded
    def _ensure_collection(self, spec: CollectionSpec) -> None:
        props = weaviate_properties(spec)
        existing = self._load_spec_and_dims(spec.name)
        if existing is None and self._client.collections.exists(spec.name):
            # Another process (a replica starting at the same time) may have created it
            # between the two reads: read it once more before calling it foreign.
            existing = self._load_spec_and_dims(spec.name)
            if existing is None:
                raise SchemaConflictError(
                    f"Weaviate already has a collection {spec.name!r} that this store did "
                    "not create"
                )
        if existing is None:
            try:
                self._client.collections.create(
                    spec.name,
                    description=collection_description(spec, self.dims),
                    properties=props,
                    vector_config=Configure.Vectors.self_provided(
                        name=VECTOR_NAME,
                        vector_index_config=Configure.VectorIndex.hnsw(
                            distance_metric=VectorDistances.COSINE
                        ),
                    ),
                    # No inverted-index config: the server's defaults (k1 1.2, b 0.75, "en"
                    # stopwords) are the BM25 both backends rank with, and no filter of ours
                    # needs null-state, length or timestamp indexes (NotEqual is "all minus
                    # equal" on the filterable index). BlockMax WAND does not depend on it:
                    # since 1.32.22 the server turns it on for every new collection
                    # (usecases/schema/class.go setInvertedConfigDefaults); before, sending a
                    # config gave the older scorer, which _check_scorer reports.
                    # Async replication: a replica that was down catches up by itself
                    # (see _repair_replicas); deletions resolved by time, so that what was
                    # forgotten meanwhile does not come back from it.
                    replication_config=Configure.replication(
                        factor=self.scale.replication_factor,
                        async_enabled=True,
                        deletion_strategy=ReplicationDeletionStrategy.TIME_BASED_RESOLUTION,
                    ),
                    # Shared collections get one shard unless configured: the server's
                    # default is one per node, which makes BM25 statistics per shard.
                    sharding_config=(
                        None
                        if spec.per_user
                        else Configure.sharding(desired_count=self.scale.shards)
                    ),
                    multi_tenancy_config=(
                        Configure.multi_tenancy(
                            enabled=True, auto_tenant_creation=True, auto_tenant_activation=True
                        )
                        if spec.per_user
                        else None
                    ),
                )
                return
            except weaviate.exceptions.UnexpectedStatusCodeError:
                # Another process may have created it between our check and the create.
                existing = self._load_spec_and_dims(spec.name)
                if existing is None:
                    raise
        current, dims = existing
        if dims != self.dims:
            raise SchemaConflictError(
                f"collection {spec.name!r} was created for {dims}-dimensional vectors; "
                f"this store uses {self.dims} dimensions"
            )
        if schema_signature(current) != schema_signature(spec):
            raise SchemaConflictError(
                f"collection {spec.name!r} exists with a different schema: "
                f"{describe_spec(current)} != {describe_spec(spec)}"
            )
        self._repair_replicas(spec.name)

    def _repair_replicas(self, name: str) -> None:
        """Turn async replication on for a replicated collection created without it.

        The store creates every collection with it (and deletions resolved by time): a
        replica that was down misses the writes made meanwhile, and searches, listings and
        counts read the replica of the node they reach, which a read at ``ALL`` repairs only
        for the objects it found. Collections created by earlier versions get it here.
        """
        config = self._client.collections.get(name).config
        replication = config.get().replication_config
        if replication.factor > 1 and not replication.async_enabled:
            config.update(
                replication_config=Reconfigure.replication(
                    async_enabled=True,
                    deletion_strategy=ReplicationDeletionStrategy.TIME_BASED_RESOLUTION,
                )
            )
            logger.warning(
                "Weaviate collection %r has %d replicas without async replication: turned "
                "it on, so that a replica that was down catches up",
                name,
                replication.factor,
            )

    @guarded
    def _add_properties(
        self, name: str, properties: list[Property]
    ) -> tuple[CollectionSpec, list[str]]:
        stored = self._stored_spec(name)
        wanted = absent_properties(stored, properties)
        config = self._client.collections.get(name).config
        added: list[str] = []
        for prop in wanted:
            # Per-user collections are multi-tenant: the server adds the property to the
            # class, and every tenant's shard gets its (empty) index on load.
            for translated in weaviate_properties(
                CollectionSpec(name=name, properties=(prop,), per_user=False)
            ):
                try:
                    config.add_property(translated)
                except weaviate.exceptions.WeaviateBaseError:
                    # The client checks first, then posts: another process may add the same
                    # property in between (the server then answers 422 "already in use").
                    # That is success if it is there now with the same shape.
                    if absent_properties(self._stored_spec(name), [prop]):
                        raise
                    break
            else:
                added.append(prop.name)
        after = self._stored_spec(name)
        if absent_properties(after, wanted):
            raise StoreError(f"Weaviate did not keep the properties added to {name!r}")
        return after, added

    def _stored_spec(self, name: str) -> CollectionSpec:
        loaded = self._load_spec_and_dims(name)
        if loaded is None:
            raise UnknownCollectionError(f"collection {name!r} does not exist in Weaviate")
        return loaded[0]

    def _load_spec_and_dims(self, name: str) -> tuple[CollectionSpec, int] | None:
        if not self._client.collections.exists(name):
            return None
        config = self._client.collections.get(name).config.get()
        loaded = spec_from_config(
            config.name,
            config.description,
            bool(config.multi_tenancy_config.enabled),
            config.properties,
        )
        if loaded is not None:
            self._check_scorer(name)
        return loaded

    def _check_scorer(self, name: str) -> None:
        """Note (and log once) a collection that ranks with Weaviate's older BM25 scorer.

        Weaviate 1.32.22 and later create every collection with BlockMax WAND, the ranking
        both backends follow. A volume from an earlier server (this project pinned 1.32.9,
        and its first versions sent an inverted-index config, which gave the older ``wand``
        scorer there) keeps such collections: their schema lacks ``usingBlockMaxWAND``, which
        the parsed config does not show, so it is read from the raw schema.
        """
        if name in self._volume_issues:
            return
        reply = self._client._connection.get(path=f"/schema/{name}")
        inverted = (reply.json() or {}).get("invertedIndexConfig") or {}
        if inverted.get("usingBlockMaxWAND") is not True:
            self._note_volume_issue(
                name,
                "created by a Weaviate server before 1.32.22 with an inverted-index config: "
                "it ranks with the older BM25 scorer (document length = distinct terms, one "
                "BM25F score over all properties), unlike the embedded store; export, drop "
                "and import it to move it to BlockMax WAND (docs/weaviate-migration.md)",
            )

    def _note_volume_issue(self, name: str, issue: str) -> None:
        with self._lock:
            known = name in self._volume_issues
            self._volume_issues[name] = issue
        if not known:
            logger.warning("Weaviate collection %r was %s", name, issue)

    def volume_issues(self) -> dict[str, str]:
        """Return what this store found wrong with the server's collections, per collection.

        Filled as collections are opened and searched (``check_volume`` opens them all): a
        collection kept from an older server that ranks with the older BM25 scorer, or whose
        keyword scores came back NaN (a BM25 average from Weaviate 1.32.9-1.32.25, D1).
        """
        with self._lock:
            return dict(self._volume_issues)

    @guarded
    def check_volume(self) -> dict[str, str]:
        """Open every collection of this project on the server; return ``volume_issues()``."""
        for name in self._collections():
            self._load_spec_and_dims(name)
        return self.volume_issues()

    @guarded
    def _load_spec(self, name: str) -> CollectionSpec | None:
        loaded = self._load_spec_and_dims(name)
        return loaded[0] if loaded else None

    @guarded
    def _collections(self) -> list[str]:
        configs = self._client.collections.list_all(simple=True)
        return sorted(
            name
            for name, config in configs.items()
            if parse_description(config.description) is not None
        )

    @guarded
    def _drop_collection(self, name: str) -> None:
        self._client.collections.delete(name)
        with self._lock:
            self._tenants.pop(name, None)

    # -- tenants --------------------------------------------------------------------------

    def _known(self, collection: str, tenant: str) -> bool:
        with self._lock:
            return tenant in self._tenants.get(collection, set())

    def _remember_tenant(self, collection: str, tenant: str) -> None:
        with self._lock:
            self._tenants.setdefault(collection, set()).add(tenant)

    def _forget_tenants(self, collection: str) -> bool:
        """Drop the cached tenants of a collection; return whether there were any."""
        with self._lock:
            return bool(self._tenants.pop(collection, None))

    def _collection(self, name: str) -> Any:
        collection = self._client.collections.get(name)
        if self.scale.consistency is not None:
            collection = collection.with_consistency_level(
                CONSISTENCY_LEVELS[self.scale.consistency]
            )
        return collection

    def _for_write(self, spec: CollectionSpec, user: str | None) -> Any:
        """Return the collection bound to the user's tenant, created if it has none yet."""
        return self._tenant(spec, user, create=True)

    def _for_read(self, spec: CollectionSpec, user: str | None) -> Any | None:
        """Return the collection bound to the user's tenant, or ``None`` if it has none yet."""
        return self._tenant(spec, user, create=False)

    def _tenant(self, spec: CollectionSpec, user: str | None, *, create: bool) -> Any | None:
        collection = self._collection(spec.name)
        if not spec.per_user:
            return collection
        assert user is not None
        tenant = tenant_name(user)
        if not self._known(spec.name, tenant):
            if collection.tenants.get_by_name(tenant) is None:
                if not create:
                    return None
                # Auto-creation would also do it, but creating explicitly makes the first
                # write's failure mode (permissions, limits) an error here, not a batch failure.
                try:
                    collection.tenants.create([Tenant(name=tenant)])
                except weaviate.exceptions.UnexpectedStatusCodeError:
                    if collection.tenants.get_by_name(tenant) is None:
                        raise
            self._remember_tenant(spec.name, tenant)
        return collection.with_tenant(tenant)

    # -- writes ---------------------------------------------------------------------------

    @guarded
    def _upsert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        collection = self._for_write(spec, user)
        objects, rows = batch.objects, batch.vectors.tolist()
        failed: dict[str, str] = {}
        # One gRPC batch request per chunk, answered at once. The client's batch context
        # (``batch.fixed_size``) waits about a second for more objects before sending a
        # small batch, which made every small write (a fact, a turn) take a second.
        for start in range(0, len(objects), BATCH_SIZE):
            chunk = objects[start : start + BATCH_SIZE]
            data = [
                DataObject(
                    properties=to_weaviate_properties(spec, obj.properties, user),
                    # The client sends a batch object's id as given and the server keeps
                    # that text in its id index, while lookups by id are sent canonical: an
                    # id in another spelling would be stored and then never found.
                    uuid=canonical_id(obj.id),
                    vector={VECTOR_NAME: vector},
                )
                for obj, vector in zip(chunk, rows[start : start + BATCH_SIZE], strict=True)
            ]
            try:
                result = collection.data.insert_many(data)
            except WeaviateInsertManyAllFailedError as exc:
                failed.update((obj.id, str(exc)) for obj in chunk)
                continue
            except weaviate.exceptions.WeaviateBaseError as exc:
                # A lost connection or a timeout: the chunks before this one are written,
                # so report them instead of raising, which would hide them. This chunk may or
                # may not have been stored; the rest was not sent. Upserts are idempotent:
                # writing the failed ids again is safe. Nothing written yet: raise as before
                # (a tenant deleted meanwhile is retried by guarded).
                if start == 0 or TENANT_GONE_RE.search(str(exc)):
                    raise
                for obj in chunk:
                    failed[obj.id] = f"the request failed, it may or may not be stored: {exc}"
                for obj in objects[start + BATCH_SIZE :]:
                    failed[obj.id] = f"not sent: an earlier request failed: {exc}"
                break
            for index, error in result.errors.items():
                failed[chunk[index].id] = error.message
        return UpsertResult(ids=[o.id for o in objects if o.id not in failed], failed=failed)

    @guarded
    @no_repeat
    def _insert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        # Weaviate has no transaction and no conditional write: its own create (POST
        # /v1/objects) checks that the id is free and then writes, with nothing held in
        # between (usecases/objects/add.go), and a batch simply overwrites. So the checks
        # and the creates run under a lock per partition that every insert takes: this
        # machine's (threads: a mutex; processes: a lock file), then, when configured,
        # PostgreSQL's advisory lock for every machine; see docs/storage.md.
        collection = self._for_write(spec, user)
        key = (spec.name, tenant_name(user) if user is not None else "")
        with self._inserts.hold(*key) as held:
            ids = [canonical_id(o.id) for o in batch.objects]
            existing = sorted(
                str(o.uuid) for o in fetch_by_ids(collection, ids, self.scale.query_maximum_results)
            )
            if existing:
                raise ConflictError(
                    f"{len(existing)} object(s) already exist in {spec.name!r}: "
                    f"{', '.join(existing[:3])}",
                    existing=existing,
                )
            if batch.unless:
                guard = build_filter(spec, batch.unless)
                hit = collection.query.fetch_objects(filters=guard, limit=1)
                if hit.objects:
                    raise ConflictError(
                        f"object {hit.objects[0].uuid} of {spec.name!r} matches the insert's guard",
                        guarded=True,
                    )
            created: list[str] = []
            try:
                for obj, vector in zip(batch.objects, batch.vectors.tolist(), strict=True):
                    held.check()
                    # Undone with the others if its create fails: a create the server stored
                    # but answered with an error (or still holds) is this insert's.
                    created.append(canonical_id(obj.id))
                    # The server's create refuses an id that exists when it checks: a last
                    # line of defence against a writer that does not take the same locks.
                    create_settled(
                        collection,
                        canonical_id(obj.id),
                        to_weaviate_properties(spec, obj.properties, user),
                        vector,
                    )
            except weaviate.exceptions.UnexpectedStatusCodeError as exc:
                if "already exists" in str(exc):
                    # That id is the other writer's: only this insert's own go.
                    taken = created.pop()
                    self._undo_inserts(collection, created, exc)
                    raise ConflictError(
                        f"an object of {spec.name!r} was created by another writer: {exc}",
                        existing=[taken],
                    ) from exc
                self._undo_inserts(collection, created, exc)
                raise
            except BaseException as exc:
                self._undo_inserts(collection, created, exc)
                raise
        return UpsertResult(ids=[o.id for o in batch.objects])

    @guarded
    @no_repeat
    def _update(self, spec: CollectionSpec, user: str | None, update: Update) -> UpsertResult:
        # Weaviate has no transaction: the read and the write run under the partition's lock
        # that every insert and update of this machine takes, as _insert does.
        collection = self._for_read(spec, user)
        if collection is None:
            return UpsertResult()
        key = (spec.name, tenant_name(user) if user is not None else "")
        with self._inserts.hold(*key):
            changed = [
                new
                for obj in fetch_by_ids(
                    collection, update.ids, self.scale.query_maximum_results, include_vector=True
                )
                if (new := update.change(stored(spec, obj, True))) is not None
            ]
            if not changed:
                return UpsertResult()
            # The server stores NaN and infinite vectors as given: refuse them before writing.
            vectors = check_finite([o.vector for o in changed])
            return self._upsert(spec, user, Writes(changed, vectors))

    @staticmethod
    def _undo_inserts(collection: Any, ids: list[str], cause: BaseException) -> None:
        """Delete what a failed insert created, so that it writes all or nothing.

        Best effort: the insert's own error is what its caller must see, so an undo that fails
        too (the same unhealthy cluster) is added to it as a note, naming what may be left.
        """
        try:
            for start in range(0, len(ids), BATCH_SIZE):
                chunk = ids[start : start + BATCH_SIZE]
                collection.data.delete_many(where=Filter.by_id().contains_any(chunk))
        except Exception as undo:
            logger.warning("a failed insert could not be undone: %s", undo)
            cause.add_note(
                f"undoing the insert failed too ({type(undo).__name__}: {undo}); these ids may "
                f"be left: {', '.join(ids[:10])}"
            )

    @guarded
    def _delete(self, spec: CollectionSpec, ids: list[str], user: str | None) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        total = 0
        unique = list(dict.fromkeys(canonical_id(i) for i in ids))
        for start in range(0, len(unique), BATCH_SIZE):
            chunk = unique[start : start + BATCH_SIZE]
            result = collection.data.delete_many(where=Filter.by_id().contains_any(chunk))
            _check_deleted(result)
            total += int(result.matches)
        return total

    @guarded
    def _delete_where(self, spec: CollectionSpec, where: list[Where], user: str | None) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        filters = build_filter(spec, where)
        total = 0
        # The server caps one delete_many at QUERY_MAXIMUM_RESULTS: repeat until none is left.
        while True:
            result = collection.data.delete_many(where=filters)
            _check_deleted(result)
            if int(result.successful) == 0:
                break
            total += int(result.successful)
        return total

    @guarded
    def _delete_user(self, spec: CollectionSpec, user: str) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        count = self._count(spec, user, [])
        self._client.collections.get(spec.name).tenants.remove([tenant_name(user)])
        with self._lock:
            self._tenants.get(spec.name, set()).discard(tenant_name(user))
        return count

    # -- reads ----------------------------------------------------------------------------

    @guarded
    def _get(
        self, spec: CollectionSpec, id: str, user: str | None, include_vector: bool
    ) -> StoredObject | None:
        collection = self._for_read(spec, user)
        if collection is None:
            return None
        obj = collection.query.fetch_object_by_id(
            canonical_id(id), include_vector=[VECTOR_NAME] if include_vector else False
        )
        if obj is None:
            return None
        return stored(spec, obj, include_vector)

    @guarded
    def _list(self, spec: CollectionSpec, user: str | None, listing: Listing) -> list[StoredObject]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        return list_page(spec, collection, listing, self.scale.query_maximum_results)

    @guarded
    def _page_after(self, spec: CollectionSpec, user: str | None, page: Page) -> list[StoredObject]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        return fetch_after(spec, collection, page)

    @guarded
    def _count(self, spec: CollectionSpec, user: str | None, where: list[Where]) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        result = collection.aggregate.over_all(total_count=True, filters=build_filter(spec, where))
        return int(result.total_count or 0)

    @guarded
    def _hybrid(
        self, spec: CollectionSpec, user: str | None, search: HybridQuery
    ) -> list[SearchHit]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        filters = build_filter(spec, search.where)
        if search.query.strip() and spec.searchable:
            hits = hybrid_hits(spec, collection, search, filters)
            if hits is not None:
                return hits
            self._note_volume_issue(
                spec.name,
                "searched and its keyword scores are NaN (a BM25 average written by "
                "Weaviate 1.32.9-1.32.25): searches rank by the vector alone until it is "
                "exported, dropped and imported (docs/weaviate-migration.md)",
            )
        # No keyword candidates: a blank query finds none, and a collection without
        # searchable text has none. Asked to search no property, the server refuses
        # ("No properties provided, and no indexed properties found in class",
        # db/index.go objectSearch); the embedded store finds nothing on that side.
        return vector_side_only(spec, collection, search, filters)

    @guarded
    def _users(self, spec: CollectionSpec) -> list[str]:
        return users_of(self._collection(spec.name))


def _check_deleted(result: Any) -> None:
    if int(result.failed):
        raise StoreError(
            f"Weaviate matched {int(result.matches)} object(s) but failed to delete "
            f"{int(result.failed)}"
        )
