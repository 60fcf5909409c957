"""``WeaviateStore``: the ``MemoryStore`` contract on a Weaviate server (v4 client, gRPC).

Constructing the class opens nothing; ``WeaviateStore.connect`` does. The translations it
relies on live beside it: ``schema`` (specs, tenants, values), ``filters`` (conditions and
sorting), ``scores`` (explain-score parsing) and ``settings`` (connection and scale).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import weaviate
from weaviate.classes.config import (
    Configure,
    Reconfigure,
    ReplicationDeletionStrategy,
    VectorDistances,
)
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter, HybridFusion, MetadataQuery, Sort
from weaviate.classes.tenants import Tenant
from weaviate.collections.classes.filters import _Filters
from weaviate.exceptions import WeaviateInsertManyAllFailedError

from agentic_memory.paths import amem_home
from agentic_memory.store.base import PAGE_LIMIT, MemoryStore, absent_properties
from agentic_memory.store.coordination import (
    Coordination,
    PostgresLocks,
    WriteLocks,
    coordination_setting,
)
from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.ranking import (
    fuse_relative_score,
    fusion_weights,
    order_hybrid,
    vector_candidates,
)
from agentic_memory.store.types import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    UpsertResult,
    Where,
    check_finite,
)
from agentic_memory.store.weaviate.filters import build_filter, sort_like_weaviate
from agentic_memory.store.weaviate.schema import (
    EXACT_SUFFIX,
    ID_PROPERTY,
    USER_PROPERTY,
    VECTOR_NAME,
    collection_description,
    describe_spec,
    from_weaviate_properties,
    has_exact_copy,
    is_hashed_tenant,
    parse_description,
    schema_signature,
    spec_from_config,
    tenant_name,
    to_weaviate_properties,
    weaviate_properties,
)
from agentic_memory.store.weaviate.scores import parse_explain_score
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
waits for that leader with no deadline of the server's (``_TIMED_OUT_RE``): this bounds the
stall of a turn before the write is sent again."""
ID_LOOKUP = 1000
"""Ids per lookup by id: one request may not ask for more than ``QUERY_MAXIMUM_RESULTS``
objects (10,000 by default), and an ``update`` or ``insert`` may name any number."""
DEEP_PAGE = 5000
"""Page size of the id-ordered reads behind a listing that goes past the result window."""

logger = logging.getLogger(__name__)

_TENANT_GONE_RE = re.compile(
    r"tenant.{0,120}(not found|does not exist)|(not found|no such).{0,40}tenant", re.I | re.S
)
CLUSTER_RETRY_S = 60.0
"""How long a call that met a passing state of the cluster is tried again before it fails.

A node answers such errors while a Raft leader is elected (about 15 s after the leader dies,
measured on the three-node test cluster), and for a moment after a collection or tenant is
created, until the node has applied it (``docs/weaviate.md``, "Scale out").
"""
_NOT_APPLIED_RE = re.compile(
    r"could not read schema with strong consistency|leader not found|node is not the leader"
    r"|failed to execute query|could not wait for update|deadline exceeded for waiting for update"
    r"|determine shard|could not find index for class|store not open",
    re.I,
)
"""Errors a node answers before it writes anything: it could not ask the schema's Raft leader
(a query, which a write makes before it writes: the class, the tenant's shard), or has not
applied a new collection yet. Any call may be tried again."""
_INTERRUPTED_RE = re.compile(r"RST_STREAM|Stream removed|client connection is closing", re.I)
"""A request cut off inside the cluster: it may have been applied, so only calls that can be
repeated without effect are tried again."""
_TIMED_OUT_RE = re.compile(r"Deadline Exceeded|timed out while awaiting a response", re.I)
"""A request the client gave up on (30 s for reads, 90 s for writes): tried once more, as a
cut request is. After the Raft leader dies, a node keeps asking it for a while (about 15-30 s
measured here): schema reads wait until the client's timeout, and a gRPC batch that reached
the node as the leader died waits, with no deadline of the server's (1.32.27
``Raft.QueryTenantsShards``), until the client's or until the old leader is back. Once: a
server that is simply too slow is not waited for again and again."""
P = ParamSpec("P")
R = TypeVar("R")


def _no_repeat(fn: Callable[P, R]) -> Callable[P, R]:
    """Mark a call ``_guarded`` may retry only on errors that say nothing was written.

    An ``_insert`` is not run again once its creates may have landed (``_create`` settles
    each create itself, by reading), and an ``_update`` applies its change to what it
    reads: both are retried as a whole only on errors that say nothing was written (an
    update's writes go through ``_upsert``, which retries itself).
    """
    fn._no_repeat = True  # type: ignore[attr-defined]
    return fn


def _passing(message: str, no_repeat: bool, timed_out_before: bool = False) -> bool:
    """Whether ``message`` is a passing state of the cluster that a retry can outlast."""
    if _NOT_APPLIED_RE.search(message):
        return True
    if no_repeat:
        return False
    if _TIMED_OUT_RE.search(message):
        return not timed_out_before
    return _INTERRUPTED_RE.search(message) is not None


def _riding_out(call: Callable[[], R], name: str, no_repeat: bool) -> R:
    """Run ``call``, again while it meets a passing cluster state, for ``CLUSTER_RETRY_S``.

    An ``UpsertResult`` whose failures are all such states is retried too (the server
    reports them per object): upserts rewrite the same ids, so repeating one is harmless.
    """
    deadline: float | None = None  # counted from the first failure: an attempt may be long
    delay = 0.25
    timed_out = False
    while True:
        try:
            result = call()
        except weaviate.exceptions.WeaviateBaseError as exc:
            deadline = deadline or time.monotonic() + CLUSTER_RETRY_S
            reason = str(exc)
            if not _passing(reason, no_repeat, timed_out) or time.monotonic() + delay > deadline:
                raise
            timed_out = timed_out or _TIMED_OUT_RE.search(reason) is not None
        else:
            failed = result.failed if isinstance(result, UpsertResult) and not no_repeat else {}
            if not failed or not all(_passing(m, no_repeat) for m in failed.values()):
                return result
            deadline = deadline or time.monotonic() + CLUSTER_RETRY_S
            if time.monotonic() + delay > deadline:
                return result
            reason = next(iter(failed.values()))
        logger.info("Weaviate %s met %s; trying again in %.2f s", name, reason[:200], delay)
        time.sleep(delay)
        delay = min(2 * delay, 4.0)


def _guarded(
    fn: Callable[Concatenate[WeaviateStore, P], R],
) -> Callable[Concatenate[WeaviateStore, P], R]:
    """Refuse calls on a closed store, outlast passing cluster states, raise ``StoreError``."""
    name = fn.__name__.strip("_")
    no_repeat = bool(getattr(fn, "_no_repeat", False))

    @functools.wraps(fn)
    def wrapper(store: WeaviateStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if store._closed:
            raise StoreError("this Weaviate store is closed: open a new one")

        def call() -> R:
            return fn(store, *args, **kwargs)

        try:
            return _riding_out(call, name, no_repeat)
        except weaviate.exceptions.WeaviateBaseError as exc:
            spec = args[0] if args else None
            # Another process may have deleted a tenant this one remembers: forget the
            # cached tenants of the collection and try once more.
            if (
                isinstance(spec, CollectionSpec)
                and _TENANT_GONE_RE.search(str(exc))
                and store._forget_tenants(spec.name)
            ):
                try:
                    return _riding_out(call, name, no_repeat)
                except weaviate.exceptions.WeaviateBaseError as again:
                    exc = again
            raise StoreError(f"Weaviate {name} failed: {exc}") from exc

    return wrapper


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
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            raise InvalidInputError(f"dims must be a positive integer, got {dims!r}")
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

    def close(self) -> None:
        """Close the client's HTTP and gRPC connections (and PostgreSQL's, if used).

        Later calls raise ``StoreError``.
        """
        if not self._closed:
            self._closed = True
            self._inserts.close()
            self._client.close()

    # -- schema ---------------------------------------------------------------------------

    @_guarded
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

    @_guarded
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

    @_guarded
    def check_volume(self) -> dict[str, str]:
        """Open every collection of this project on the server; return ``volume_issues()``."""
        for name in self._collections():
            self._load_spec_and_dims(name)
        return self.volume_issues()

    @_guarded
    def _load_spec(self, name: str) -> CollectionSpec | None:
        loaded = self._load_spec_and_dims(name)
        return loaded[0] if loaded else None

    @_guarded
    def _collections(self) -> list[str]:
        configs = self._client.collections.list_all(simple=True)
        return sorted(
            name
            for name, config in configs.items()
            if parse_description(config.description) is not None
        )

    @_guarded
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
        collection = self._collection(spec.name)
        if not spec.per_user:
            return collection
        assert user is not None
        tenant = tenant_name(user)
        if not self._known(spec.name, tenant):
            # Auto-creation would also do it, but creating explicitly makes the first
            # write's failure mode (permissions, limits) an error here, not a batch failure.
            if collection.tenants.get_by_name(tenant) is None:
                try:
                    collection.tenants.create([Tenant(name=tenant)])
                except weaviate.exceptions.UnexpectedStatusCodeError:
                    if collection.tenants.get_by_name(tenant) is None:
                        raise
            self._remember_tenant(spec.name, tenant)
        return collection.with_tenant(tenant)

    def _for_read(self, spec: CollectionSpec, user: str | None) -> Any | None:
        """Return the collection bound to the user's tenant, or ``None`` if it has none yet."""
        collection = self._collection(spec.name)
        if not spec.per_user:
            return collection
        assert user is not None
        tenant = tenant_name(user)
        if not self._known(spec.name, tenant):
            if collection.tenants.get_by_name(tenant) is None:
                return None
            self._remember_tenant(spec.name, tenant)
        return collection.with_tenant(tenant)

    # -- writes ---------------------------------------------------------------------------

    @_guarded
    def _upsert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: npt.NDArray[np.float64],
    ) -> UpsertResult:
        collection = self._for_write(spec, user)
        rows = vectors.tolist()
        failed: dict[str, str] = {}
        # One gRPC batch request per chunk, answered at once. The client's batch context
        # (``batch.fixed_size``) waits about a second for more objects before sending a
        # small batch, which made every small write (a fact, a turn) take a second.
        for start in range(0, len(objects), BATCH_SIZE):
            chunk = objects[start : start + BATCH_SIZE]
            data = [
                DataObject(
                    properties=to_weaviate_properties(spec, obj.properties, user),
                    uuid=_canonical_id(obj.id),
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
                # (a tenant deleted meanwhile is retried by _guarded).
                if start == 0 or _TENANT_GONE_RE.search(str(exc)):
                    raise
                for obj in chunk:
                    failed[obj.id] = f"the request failed, it may or may not be stored: {exc}"
                for obj in objects[start + BATCH_SIZE :]:
                    failed[obj.id] = f"not sent: an earlier request failed: {exc}"
                break
            for index, error in result.errors.items():
                failed[chunk[index].id] = error.message
        return UpsertResult(ids=[o.id for o in objects if o.id not in failed], failed=failed)

    def _fetch_by_ids(
        self, collection: Any, ids: list[str], include_vector: bool = False
    ) -> list[Any]:
        """Return the stored objects of canonical ``ids``, looked up ``ID_LOOKUP`` at a time."""
        size = max(1, min(ID_LOOKUP, self.scale.query_maximum_results))
        found: list[Any] = []
        for start in range(0, len(ids), size):
            chunk = ids[start : start + size]
            reply = collection.query.fetch_objects(
                filters=Filter.by_id().contains_any(chunk),
                limit=len(chunk),
                include_vector=[VECTOR_NAME] if include_vector else False,
            )
            found.extend(reply.objects)
        return found

    @_guarded
    @_no_repeat
    def _insert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: npt.NDArray[np.float64],
        unless: list[Where],
    ) -> UpsertResult:
        # Weaviate has no transaction and no conditional write: its own create (POST
        # /v1/objects) checks that the id is free and then writes, with nothing held in
        # between (usecases/objects/add.go), and a batch simply overwrites. So the checks
        # and the creates run under a lock per partition that every insert takes: this
        # machine's (threads: a mutex; processes: a lock file), then, when configured,
        # PostgreSQL's advisory lock for every machine; see docs/storage.md.
        collection = self._for_write(spec, user)
        key = (spec.name, tenant_name(user) if user is not None else "")
        with self._inserts.hold(*key) as held:
            ids = [_canonical_id(o.id) for o in objects]
            existing = sorted(str(o.uuid) for o in self._fetch_by_ids(collection, ids))
            if existing:
                raise ConflictError(
                    f"{len(existing)} object(s) already exist in {spec.name!r}: "
                    f"{', '.join(existing[:3])}",
                    existing=existing,
                )
            if unless:
                hit = collection.query.fetch_objects(filters=build_filter(spec, unless), limit=1)
                if hit.objects:
                    raise ConflictError(
                        f"object {hit.objects[0].uuid} of {spec.name!r} matches the insert's guard",
                        guarded=True,
                    )
            created: list[str] = []
            try:
                for obj, vector in zip(objects, vectors.tolist(), strict=True):
                    held.check()
                    # The server's create refuses an id that exists when it checks: a last
                    # line of defence against a writer that does not take the same locks.
                    self._create(
                        collection, _canonical_id(obj.id), spec, obj.properties, vector, user
                    )
                    created.append(_canonical_id(obj.id))
            except weaviate.exceptions.UnexpectedStatusCodeError as exc:
                self._undo_inserts(collection, created)
                if "already exists" in str(exc):
                    raise ConflictError(
                        f"an object of {spec.name!r} was created by another writer: {exc}",
                        existing=[i for i in ids if i not in created][:1],
                    ) from exc
                raise
            except BaseException:
                self._undo_inserts(collection, created)
                raise
        return UpsertResult(ids=[o.id for o in objects])

    @_guarded
    @_no_repeat
    def _update(
        self,
        spec: CollectionSpec,
        ids: list[str],
        change: Callable[[StoredObject], MemoryObject | None],
        user: str | None,
    ) -> UpsertResult:
        # Weaviate has no transaction: the read and the write run under the partition's lock
        # that every insert and update of this machine takes, as _insert does.
        collection = self._for_read(spec, user)
        if collection is None:
            return UpsertResult()
        key = (spec.name, tenant_name(user) if user is not None else "")
        with self._inserts.hold(*key):
            changed = [
                new
                for obj in self._fetch_by_ids(collection, ids, include_vector=True)
                if (new := change(self._stored(spec, obj, True))) is not None
            ]
            if not changed:
                return UpsertResult()
            # The server stores NaN and infinite vectors as given: refuse them before writing.
            vectors = check_finite([o.vector for o in changed])
            return self._upsert(spec, changed, user, vectors)

    def _create(
        self,
        collection: Any,
        oid: str,
        spec: CollectionSpec,
        properties: Mapping[str, Any],
        vector: list[float],
        user: str | None,
    ) -> None:
        """Create one object of an insert; settle a create that may or may not have landed.

        A create the client gave up on, or that was cut off (a cluster losing its Raft
        leader, ``_TIMED_OUT_RE``), is looked up by id: under the partition's lock, which
        the caller holds, nobody else creates that id, so if it is there it is this one.
        Else it is sent again, and an "already exists" then means the earlier one landed.
        """
        deadline: float | None = None
        delay = 0.25
        while True:
            try:
                collection.data.insert(
                    properties=to_weaviate_properties(spec, properties, user),
                    uuid=oid,
                    vector={VECTOR_NAME: vector},
                )
                return
            except weaviate.exceptions.WeaviateBaseError as exc:
                message = str(exc)
                if deadline is not None and "already exists" in message:
                    return
                if not (_TIMED_OUT_RE.search(message) or _INTERRUPTED_RE.search(message)):
                    raise
                deadline = deadline or time.monotonic() + CLUSTER_RETRY_S
                if collection.query.fetch_object_by_id(oid) is not None:
                    return
                if time.monotonic() + delay > deadline:
                    raise
                logger.info("Weaviate create of %s met %s; sent again", oid, message[:200])
                time.sleep(delay)
                delay = min(2 * delay, 4.0)

    @staticmethod
    def _undo_inserts(collection: Any, ids: list[str]) -> None:
        """Delete what a failed insert created, so that it writes all or nothing."""
        for start in range(0, len(ids), BATCH_SIZE):
            chunk = ids[start : start + BATCH_SIZE]
            collection.data.delete_many(where=Filter.by_id().contains_any(chunk))

    @_guarded
    def _delete(self, spec: CollectionSpec, ids: list[str], user: str | None) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        total = 0
        unique = list(dict.fromkeys(_canonical_id(i) for i in ids))
        for start in range(0, len(unique), BATCH_SIZE):
            chunk = unique[start : start + BATCH_SIZE]
            result = collection.data.delete_many(where=Filter.by_id().contains_any(chunk))
            _check_deleted(result)
            total += int(result.matches)
        return total

    @_guarded
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

    @_guarded
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

    @_guarded
    def _get(
        self, spec: CollectionSpec, id: str, user: str | None, include_vector: bool
    ) -> StoredObject | None:
        collection = self._for_read(spec, user)
        if collection is None:
            return None
        obj = collection.query.fetch_object_by_id(
            _canonical_id(id), include_vector=[VECTOR_NAME] if include_vector else False
        )
        if obj is None:
            return None
        return self._stored(spec, obj, include_vector)

    def _stored(self, spec: CollectionSpec, obj: Any, include_vector: bool) -> StoredObject:
        vector: list[float] | None = None
        if include_vector and obj.vector:
            raw = obj.vector.get(VECTOR_NAME) if isinstance(obj.vector, dict) else obj.vector
            vector = [float(x) for x in raw] if raw is not None else None
        return StoredObject(
            id=str(obj.uuid),
            properties=from_weaviate_properties(spec, obj.properties),
            vector=vector,
        )

    @_guarded
    def _list(
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        limit: int,
        offset: int,
        sort_by: str | None,
        descending: bool,
    ) -> list[StoredObject]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        if offset + limit > self.scale.query_maximum_results:
            # The server refuses offset + limit beyond QUERY_MAXIMUM_RESULTS (db/search.go
            # getTotalLimit): read every match in id order and sort here the way it would.
            matches = list(self._all_after(spec, collection, where))
            return sort_like_weaviate(spec, matches, sort_by, descending)[offset : offset + limit]
        # Weaviate does not order ties itself: the id is always the last sort key.
        sort = Sort.by_id(ascending=True)
        if sort_by:
            # The exact copy holds the same value and is indexed for filtering.
            prop = spec.prop(sort_by)
            target = sort_by + EXACT_SUFFIX if has_exact_copy(prop) else sort_by
            sort = Sort.by_property(target, ascending=not descending).by_id(ascending=True)
        result = collection.query.fetch_objects(
            limit=limit, offset=offset, filters=build_filter(spec, where), sort=sort
        )
        return [self._stored(spec, obj, False) for obj in result.objects]

    def _all_after(
        self, spec: CollectionSpec, collection: Any, where: list[Where]
    ) -> list[StoredObject]:
        out: list[StoredObject] = []
        after: str | None = None
        while True:
            page = self._fetch_after(spec, collection, where, after, DEEP_PAGE, False)
            out.extend(page)
            if len(page) < DEEP_PAGE:
                return out
            after = page[-1].id

    @_guarded
    def _page_after(
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        after: str | None,
        limit: int,
        include_vector: bool,
    ) -> list[StoredObject]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        return self._fetch_after(spec, collection, where, after, limit, include_vector)

    def _fetch_after(
        self,
        spec: CollectionSpec,
        collection: Any,
        where: list[Where],
        after: str | None,
        limit: int,
        include_vector: bool,
    ) -> list[StoredObject]:
        """One keyset page: the ``after`` cursor, or ``_id > after`` with the conditions.

        The cursor is refused together with filters (``entities/filters/cursor_validator.go``),
        so filtered pages are sorted by id and start past the last id with a ``GreaterThan``
        on ``_id``, which the server evaluates on its id index (``row_reader_roaring_set.go``).
        """
        vectors: list[str] | bool = [VECTOR_NAME] if include_vector else False
        limit = min(limit, PAGE_LIMIT)
        if not where:
            result = collection.query.fetch_objects(
                limit=limit, after=after, include_vector=vectors
            )
        else:
            filters = build_filter(spec, where)
            assert filters is not None  # where is not empty
            if after is not None:
                filters = Filter.all_of(
                    [filters, Filter.by_property(ID_PROPERTY).greater_than(after)]
                )
            result = collection.query.fetch_objects(
                limit=limit,
                filters=filters,
                sort=Sort.by_id(ascending=True),
                include_vector=vectors,
            )
        return [self._stored(spec, obj, include_vector) for obj in result.objects]

    @_guarded
    def _count(self, spec: CollectionSpec, user: str | None, where: list[Where]) -> int:
        collection = self._for_read(spec, user)
        if collection is None:
            return 0
        result = collection.aggregate.over_all(total_count=True, filters=build_filter(spec, where))
        return int(result.total_count or 0)

    @_guarded
    def _hybrid(
        self,
        spec: CollectionSpec,
        query: str,
        vector: list[float],
        alpha: float,
        limit: int,
        user: str | None,
        where: list[Where],
    ) -> list[SearchHit]:
        collection = self._for_read(spec, user)
        if collection is None:
            return []
        filters = build_filter(spec, where)
        # The server searches only the sides whose float32 weight is not zero.
        vector_weight, keyword_weight = fusion_weights(alpha)
        if not query.strip() or not spec.searchable:
            # No keyword candidates: a blank query finds none, and a collection without
            # searchable text has none. Asked to search no property, the server refuses
            # ("No properties provided, and no indexed properties found in class",
            # db/index.go objectSearch); the embedded store finds nothing on that side.
            hits = self._vector_side_only(spec, collection, vector, alpha, limit, filters)
        else:
            result = collection.query.hybrid(
                query=query,
                vector=[float(x) for x in vector],
                alpha=alpha,
                limit=limit,
                fusion_type=HybridFusion.RELATIVE_SCORE,
                query_properties=list(spec.searchable),
                target_vector=VECTOR_NAME,
                filters=filters,
                return_metadata=MetadataQuery(score=True, explain_score=True),
            )
            if any(_nan_score(obj.metadata) for obj in result.objects):
                # D1: Weaviate 1.32.9-1.32.25 could write a NaN average length, which every
                # later average carries: every BM25 score of the property is NaN and the
                # fused order meaningless. Rank by the vector side alone and say why.
                self._note_volume_issue(
                    spec.name,
                    "searched and its keyword scores are NaN (a BM25 average written by "
                    "Weaviate 1.32.9-1.32.25): searches rank by the vector alone until it is "
                    "exported, dropped and imported (docs/weaviate-migration.md)",
                )
                return self._vector_side_only(spec, collection, vector, alpha, limit, filters)
            hits = []
            for obj in result.objects:
                keyword, vec = parse_explain_score(obj.metadata.explain_score)
                hits.append(
                    SearchHit(
                        id=str(obj.uuid),
                        properties=from_weaviate_properties(spec, obj.properties),
                        score=float(obj.metadata.score or 0.0),
                        # A side with no weight is not searched (as on the embedded store).
                        keyword_score=None if keyword_weight == 0 else keyword,
                        vector_score=None if vector_weight == 0 else vec,
                    )
                )
        # The server's order stands: it broke near ties (raw score, then UUID) before cutting.
        return hits[:limit]

    def _vector_side_only(
        self,
        spec: CollectionSpec,
        collection: Any,
        vector: list[float],
        alpha: float,
        limit: int,
        filters: _Filters | None,
    ) -> list[SearchHit]:
        """Rank without keyword candidates: relativeScoreFusion of the vector side alone.

        A blank query has no keyword candidates on the server, nor has a collection without
        searchable text (the embedded store's rule; the server would refuse to search no
        property); the vector side is fetched with
        ``near_vector`` (``max(limit, 100)`` candidates, as a hybrid search takes) and fused
        and ordered here with the server's rules (``agentic_memory.store.ranking``), exactly as the
        embedded store does. Older servers answered ``hybrid(query="")`` as a plain
        near-vector search (weaviate/weaviate#4048), whose scores are not fusion scores.
        """
        vector_weight, _ = fusion_weights(alpha)
        if vector_weight == 0:
            # Pure keyword search for nothing: no candidates, as on the server.
            return []
        result = collection.query.near_vector(
            near_vector=[float(x) for x in vector],
            limit=vector_candidates(limit),
            target_vector=VECTOR_NAME,
            filters=filters,
            return_metadata=MetadataQuery(distance=True),
        )
        # explorer_hybrid.go denseSearch: the raw score is 1 - distance, in float32.
        sims = {
            str(obj.uuid): float(np.float32(1) - np.float32(obj.metadata.distance or 0.0))
            for obj in result.objects
        }
        objects = {str(obj.uuid): obj for obj in result.objects}
        fused, secondary = fuse_relative_score([(float(vector_weight), sims)])
        order = order_hybrid(fused, fused, secondary, {k: k for k in fused}, limit)
        return [
            SearchHit(
                id=key,
                properties=from_weaviate_properties(spec, objects[key].properties),
                score=fused[key],
                keyword_score=None,
                vector_score=sims[key],
            )
            for key in order
        ]

    @_guarded
    def _users(self, spec: CollectionSpec) -> list[str]:
        collection = self._collection(spec.name)
        users: list[str] = []
        for name, tenant in collection.tenants.get().items():
            status = getattr(tenant, "activity_status", None)
            active = status is None or str(getattr(status, "value", status)) in _ACTIVE
            if not active and not is_hashed_tenant(str(name)):
                # A plain tenant name is the user id itself: reported without reading the
                # tenant, which would wake a cold one (auto tenant activation is on).
                users.append(str(name))
                continue
            # An active tenant is read to skip it when empty; a hashed name must be read
            # to recover the raw user id, even when that wakes the tenant (docs/weaviate.md).
            result = collection.with_tenant(name).query.fetch_objects(
                limit=1, return_properties=[USER_PROPERTY]
            )
            if not result.objects:
                continue
            raw = result.objects[0].properties.get(USER_PROPERTY)
            users.append(str(raw) if raw else str(name))
        return sorted(users)


_ACTIVE = frozenset({"ACTIVE", "HOT"})


def _nan_score(metadata: Any) -> bool:
    score = metadata.score
    explain = metadata.explain_score or ""
    return (score is not None and math.isnan(score)) or "original score NaN" in explain


def _check_deleted(result: Any) -> None:
    if int(result.failed):
        raise StoreError(
            f"Weaviate matched {int(result.matches)} object(s) but failed to delete "
            f"{int(result.failed)}"
        )


def _canonical_id(value: str) -> str:
    """Return the one spelling of an id the server finds again: lower-case, hyphenated.

    weaviate-client sends a batch object's id as given and the server keeps that text in its
    id index, while lookups by id (filters, ``fetch_object_by_id``) are sent canonical: an id
    written in another spelling (upper case, no hyphens, braces; ``uuid.UUID`` takes them
    all and the base class has checked it) would be stored and then never found.
    """
    return str(uuid.UUID(value))
