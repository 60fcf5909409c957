"""Passing cluster states are outlasted, and only calls that may repeat are repeated.

The errors are the ones the three-node cluster answered in the live tests
(``tests/integration/cluster``): a node that has not applied a new collection yet, schema
reads while a Raft leader is elected, a request cut off as a node dies. They come from
``FakeWeaviate`` through the real client, as the server's JSON or the client's own errors.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from weaviate.exceptions import WeaviateBatchError

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.retries as wv_store
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import ConflictError, MemoryObject, StoreError, make_id
from agentic_memory.store.types import canonical_id
from tests.unit.store.weaviate.conftest import disconnect, scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

VEC = [1.0, 0.0, 0.0, 0.0]
NOT_APPLIED = (
    "could not find index for class MessageLog. It might have been deleted in the meantime"
)
ELECTION = (
    "could not read schema with strong consistency: failed to execute query: rpc error: "
    "code = Canceled desc = grpc: the client connection is closing"
)
NO_SHARD = (
    "put object: import into index messagelog: determine shard: failed to execute query: "
    "leader not found"
)
CUT_OFF = "Stream removed (Received RST_STREAM with error code 8 (RST_STREAM))."


class FlakyWeaviate(FakeWeaviate):
    """``FakeWeaviate`` that fails the next calls of a kind with scripted errors."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_failures: list[Exception | str] = []
        """Per batch: raise the exception, or fail every object with the message."""
        self.rest_failures: dict[tuple[str, str], list[httpx.Response]] = {}
        """(method, path) -> responses given before the real ones."""
        self.landed_then_failed: list[httpx.Response] = []
        """Creates that are stored, then answered with these responses."""

    def batch_objects(self, request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        if self.batch_failures:
            self.grpc.append(("batch_objects", request))
            failure = self.batch_failures.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return dict.fromkeys(range(len(request.objects)), failure)
        return super().batch_objects(request, timeout, max_retries)

    def handle(self, request: httpx.Request) -> httpx.Response:
        queued = self.rest_failures.get((request.method, request.url.path))
        if queued:
            self.rest.append((request.method, request.url.path, None))
            return queued.pop(0)
        response = super().handle(request)
        if (request.method, request.url.path) == ("POST", "/v1/objects"):
            if response.status_code == 200 and self.landed_then_failed:
                return self.landed_then_failed.pop(0)
        return response


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"error": [{"message": message}]})


@pytest.fixture
def server() -> FlakyWeaviate:
    return FlakyWeaviate()


@pytest.fixture
def store(server: FlakyWeaviate, tmp_path: Any) -> Iterator[wv.WeaviateStore]:
    client = scripted_client(server)
    opened = wv.WeaviateStore(client, dims=len(VEC), lock_dir=tmp_path / "locks")
    opened.ensure_collection(MESSAGES)
    yield opened
    disconnect(client)


def _turn(i: int) -> MemoryObject:
    return MemoryObject(make_id("turn", str(i)), {"content": f"turn {i}"}, VEC)


def _count(server: FlakyWeaviate, method: str, path: str) -> int:
    return sum(1 for m, p, _ in server.rest if (m, p) == (method, path))


def test_a_collection_the_node_has_not_applied_yet_is_written_on_a_retry(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    server.batch_failures = [NOT_APPLIED, NOT_APPLIED]
    result = store.upsert(MESSAGES.name, [_turn(0), _turn(1)], user="u")
    assert result.ok and result.ids == [_turn(0).id, _turn(1).id]
    assert len(server.requests("batch_objects")) == 3
    assert store.get(MESSAGES.name, _turn(1).id, user="u") is not None


def test_a_batch_cut_off_is_sent_again_since_an_upsert_may_repeat(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    server.batch_failures = [WeaviateBatchError(CUT_OFF)]
    assert store.upsert(MESSAGES.name, [_turn(0)], user="u").ok
    assert len(server.requests("batch_objects")) == 2


def test_a_timeout_is_tried_once_more_for_a_call_that_may_repeat(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    """A batch that reached a node as the leader died waits until the client gives up."""
    server.batch_failures = [WeaviateBatchError("Deadline Exceeded")]
    assert store.upsert(MESSAGES.name, [_turn(0)], user="u").ok
    # A server that is only slow is not waited for again and again.
    server.batch_failures = [WeaviateBatchError("Deadline Exceeded")] * 3
    with pytest.raises(StoreError, match="Deadline Exceeded"):
        store.upsert(MESSAGES.name, [_turn(1)], user="u")
    assert len(server.requests("batch_objects")) == 2 + 2


def test_schema_reads_wait_out_an_election(server: FlakyWeaviate, store: wv.WeaviateStore) -> None:
    server.rest_failures[("GET", "/v1/schema")] = [_error(403, ELECTION), _error(403, ELECTION)]
    assert store.collections() == [MESSAGES.name]
    assert _count(server, "GET", "/v1/schema") == 3


def test_a_create_refused_before_it_wrote_is_repeated(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    store.upsert(MESSAGES.name, [_turn(0)], user="u")  # the tenant exists
    server.rest_failures[("POST", "/v1/objects")] = [_error(422, NO_SHARD)]
    assert store.insert(MESSAGES.name, [_turn(1)], user="u").ok
    assert _count(server, "POST", "/v1/objects") == 2
    assert server.creates == 1


def test_a_create_cut_off_before_it_landed_is_sent_again(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    store.upsert(MESSAGES.name, [_turn(0)], user="u")
    server.rest_failures[("POST", "/v1/objects")] = [_error(500, CUT_OFF)]
    assert store.insert(MESSAGES.name, [_turn(1)], user="u").ok
    assert _count(server, "POST", "/v1/objects") == 2 and server.creates == 1


def test_a_create_that_landed_but_timed_out_is_found_not_sent_again(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    """Sent again, it would be refused ("already exists") and read as another writer's."""
    store.upsert(MESSAGES.name, [_turn(0)], user="u")
    server.landed_then_failed = [_error(500, CUT_OFF)]
    assert store.insert(MESSAGES.name, [_turn(1), _turn(2)], user="u").ok
    assert _count(server, "POST", "/v1/objects") == 2 and server.creates == 2
    assert store.count(MESSAGES.name, user="u") == 3


def test_other_errors_fail_at_once(server: FlakyWeaviate, store: wv.WeaviateStore) -> None:
    server.batch_failures = [WeaviateBatchError("vector lengths don't match")]
    with pytest.raises(StoreError, match="vector lengths"):
        store.upsert(MESSAGES.name, [_turn(0)], user="u")
    assert len(server.requests("batch_objects")) == 1


def test_a_state_that_does_not_pass_fails_after_the_window(
    server: FlakyWeaviate, store: wv.WeaviateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wv_store, "CLUSTER_RETRY_S", 0.6)
    server.batch_failures = [NOT_APPLIED] * 50
    started = time.monotonic()
    result = store.upsert(MESSAGES.name, [_turn(0)], user="u")
    # Reported as any failed object is.
    assert list(result.failed) == [_turn(0).id] and NOT_APPLIED in result.failed[_turn(0).id]
    server.rest_failures[("GET", "/v1/schema")] = [_error(403, ELECTION)] * 50
    with pytest.raises(StoreError, match="strong consistency"):
        store.collections()
    assert time.monotonic() - started < 10


def test_per_object_timeouts_are_tried_once_more_not_for_the_whole_window(
    server: FlakyWeaviate, store: wv.WeaviateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose objects each report a timeout is a slow server, as a raised timeout is."""
    monkeypatch.setattr(wv_store, "CLUSTER_RETRY_S", 600.0)
    server.batch_failures = ["Deadline Exceeded"] * 5
    result = store.upsert(MESSAGES.name, [_turn(0)], user="u")
    assert "Deadline Exceeded" in result.failed[_turn(0).id]
    assert len(server.requests("batch_objects")) == 2


def test_a_create_stored_but_answered_with_an_error_is_undone_with_the_others(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    # Insert writes all or nothing: the object the server stored before failing the call
    # is this insert's, and goes with the ones created before it.
    store.upsert(MESSAGES.name, [_turn(0)], user="u")
    server.landed_then_failed = [_error(500, "unexpected error from the node")]
    with pytest.raises(StoreError, match="unexpected error from the node"):
        store.insert(MESSAGES.name, [_turn(1), _turn(2)], user="u")
    assert server.creates == 1
    assert store.count(MESSAGES.name, user="u") == 1
    assert store.get(MESSAGES.name, _turn(1).id, user="u") is None


def test_another_writers_object_is_never_undone(
    server: FlakyWeaviate, store: wv.WeaviateStore
) -> None:
    store.upsert(MESSAGES.name, [_turn(0)], user="u")
    server.rest_failures[("POST", "/v1/objects")] = [
        httpx.Response(200, json={"id": _turn(1).id}),
        _error(422, f"id '{_turn(2).id}' already exists"),
    ]
    with pytest.raises(ConflictError) as raised:
        store.insert(MESSAGES.name, [_turn(1), _turn(2)], user="u")
    assert list(raised.value.existing) == [canonical_id(_turn(2).id)]


def test_an_undo_that_fails_too_keeps_the_inserts_own_error(
    server: FlakyWeaviate, store: wv.WeaviateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.upsert(MESSAGES.name, [_turn(0)], user="u")

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the cluster is gone")

    server.landed_then_failed = [_error(500, "unexpected error from the node")]
    collection_type = type(store._for_write(MESSAGES, "u").data)
    monkeypatch.setattr(collection_type, "delete_many", broken)
    with pytest.raises(StoreError, match="unexpected error from the node") as raised:
        store.insert(MESSAGES.name, [_turn(1)], user="u")
    cause = raised.value.__cause__
    assert cause is not None
    assert any("undoing the insert failed too" in n for n in getattr(cause, "__notes__", []))
