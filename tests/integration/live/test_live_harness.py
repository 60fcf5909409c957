"""The live churn suite run against ``ChurningWeaviate`` through the real client.

This checks the suite itself where no server can run: the tenant lifecycle it drives (the
REST calls weaviate-client 4.16 sends to deactivate and activate a tenant, the status waits),
one-at-a-time writes, deletes and rewrites, and its comparisons with the model states and the
stated tolerances. The fake ranks with the model, so a pass here says nothing about the
server: ``make test-weaviate`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.integration.live.test_live_churn as live_churn
from agentic_memory.store.weaviate import WeaviateStore
from tests.integration.live.churning_server import ChurningWeaviate
from tests.unit.store import differential as diff
from tests.unit.store.weaviate.conftest import scripted_client


def test_the_churn_suite_passes_against_a_server_that_churns_like_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ChurningWeaviate()
    store = WeaviateStore(scripted_client(server), dims=diff.DIMS, lock_dir=tmp_path / "locks")
    monkeypatch.setattr(live_churn, "CORPORA", 1)
    monkeypatch.setattr(live_churn, "COMPACTION_WAIT_S", 0.0)
    made: list[str] = []
    live_churn.test_churn_ranks_like_the_model_of_the_server(store, made)
    # Two flushes went through the tenant lifecycle, and wrote segments.
    assert len(server.flushes) == 2
    assert all(any(flushed.values()) for _, _, flushed in server.flushes)
    puts = [body for method, path, body in server.rest if method == "PUT"]
    # weaviate-client 4.16 sends the older names the server still takes (COLD, HOT).
    assert [t["activityStatus"] for body in puts for t in body] == ["COLD", "HOT"] * 2
    assert len(made) == len(diff.SPECS)


def test_the_churn_suite_catches_a_server_that_ranks_with_exact_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server that never flushes keeps exact statistics: the suite must notice that its
    # rankings are not those of a churned shard.
    server = ChurningWeaviate()
    monkeypatch.setattr(
        ChurningWeaviate, "_set_status", lambda self, c, t, s: self.status.__setitem__((c, t), s)
    )
    store = WeaviateStore(scripted_client(server), dims=diff.DIMS, lock_dir=tmp_path / "locks")
    monkeypatch.setattr(live_churn, "CORPORA", 1)
    monkeypatch.setattr(live_churn, "COMPACTION_WAIT_S", 0.0)
    with pytest.raises(AssertionError, match="differ"):
        live_churn.test_churn_ranks_like_the_model_of_the_server(store, [])
