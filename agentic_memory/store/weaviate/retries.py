"""How ``WeaviateStore`` calls the server: refused once closed, retried through passing states.

A cluster answers some errors while a Raft leader is elected or before a node has applied
a new collection or tenant; ``guarded`` tries such a call again for ``CLUSTER_RETRY_S`` and
turns what is left into ``StoreError``. ``create_settled`` settles an insert's create that
may or may not have landed.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import weaviate

from agentic_memory.store.types import CollectionSpec, StoreError, UpsertResult
from agentic_memory.store.weaviate.schema import VECTOR_NAME

logger = logging.getLogger(__name__)

TENANT_GONE_RE = re.compile(
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


class Guarded(Protocol):
    """What ``guarded`` needs of a store: whether it is closed, and its cache of tenants."""

    _closed: bool

    def _forget_tenants(self, collection: str) -> bool: ...


S = TypeVar("S", bound=Guarded)


def no_repeat(fn: Callable[P, R]) -> Callable[P, R]:
    """Mark a call ``guarded`` may retry only on errors that say nothing was written.

    An ``_insert`` is not run again once its creates may have landed (``create_settled`` settles
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
            if not failed or not all(_passing(m, no_repeat, timed_out) for m in failed.values()):
                return result
            deadline = deadline or time.monotonic() + CLUSTER_RETRY_S
            if time.monotonic() + delay > deadline:
                return result
            reason = next(iter(failed.values()))
            # Per-object timeouts are a slow server too: tried once more, as a raised one is.
            timed_out = timed_out or any(_TIMED_OUT_RE.search(m) for m in failed.values())
        logger.info("Weaviate %s met %s; trying again in %.2f s", name, reason[:200], delay)
        time.sleep(delay)
        delay = min(2 * delay, 4.0)


def guarded(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Refuse calls on a closed store, outlast passing cluster states, raise ``StoreError``."""
    name = fn.__name__.strip("_")
    no_repeat = bool(getattr(fn, "_no_repeat", False))

    @functools.wraps(fn)
    def wrapper(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
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
                and TENANT_GONE_RE.search(str(exc))
                and store._forget_tenants(spec.name)
            ):
                try:
                    return _riding_out(call, name, no_repeat)
                except weaviate.exceptions.WeaviateBaseError as again:
                    exc = again
            raise StoreError(f"Weaviate {name} failed: {exc}") from exc

    return wrapper


def create_settled(
    collection: Any, oid: str, properties: Mapping[str, Any], vector: list[float]
) -> None:
    """Create one object of an insert; settle a create that may or may not have landed.

    ``properties`` are Weaviate's (translated). A create the client gave up on, or that was
    cut off (a cluster losing its Raft leader, ``_TIMED_OUT_RE``), is looked up by id: under
    the partition's lock, which the caller holds, nobody else creates that id, so if it is
    there it is this one. Else it is sent again, and an "already exists" then means the
    earlier one landed.
    """
    deadline: float | None = None
    delay = 0.25
    while True:
        try:
            collection.data.insert(
                properties=dict(properties), uuid=oid, vector={VECTOR_NAME: vector}
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
