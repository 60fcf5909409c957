"""The churn scenario against a live Weaviate: writes, a flush, deletes and rewrites, another
flush, then the server's own compaction; every step's rankings compared with the reference
model of the server (``weaviate_reference.py``) in the same state.

Runs against the session's live server (``tests/live_weaviate.py``: the pinned server, whose
periodic flush is moved to an hour so that only this suite's flushes happen).

How the state is known:

- Objects are written one at a time, so the server's docIDs follow write order as the model's
  do (the objects of one batch are stored concurrently).
- A flush is forced as a server does it at shutdown: the tenant is deactivated (its shard
  shuts down; ``Bucket.Shutdown`` writes each memtable whose write-ahead log exceeds 4 KB to a
  segment and keeps the others) and activated again. The model flushes with the same rule.
- The periodic flush (60 s after a memtable's first write) must not come in between:
  the session's server sets it to an hour; against another server each phase must take
  less than a minute.
- After the second flush the server compacts the two segments by itself (its compaction cycle
  ticks every 3 s): a query must match the model with or without that compaction.

Tolerances, where rankings cannot be exact (``differential.py`` states them):

- D9, an arm64 server's fused multiply-adds: scores within ``FLOAT32_ULPS`` float32 ulps, and
  results that close may trade places;
- D6, block bounds of an older average: where the model reports one, the top-10 overlap must
  reach ``TOP10_OVERLAP`` and common hits keep the model's raw scores;
- the vector side beyond 100 objects (an HNSW search, and equal distances at its candidate
  cut, which the server does not order): queries with alpha above 0 are held to the D6
  tolerance; pure keyword queries (alpha 0) to the D9 one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agentic_memory.store import CollectionSpec, open_store
from agentic_memory.store.weaviate import WeaviateStore, tenant_name
from tests.live_weaviate import LiveWeaviate
from tests.unit.store import differential as diff
from tests.unit.store import weaviate_reference as ref

pytestmark = pytest.mark.weaviate

CORPORA = int(os.environ.get("AMEM_LIVE_CHURN_CORPORA", "6"))
QUERIES = 16
STATUS_TIMEOUT_S = 60.0
COMPACTION_WAIT_S = 12.0


@pytest.fixture
def made() -> list[str]:
    """Names of the collections a test created (dropped afterwards)."""
    return []


@pytest.fixture
def live(made: list[str], weaviate_env: LiveWeaviate) -> Iterator[WeaviateStore]:
    store = open_store(diff.DIMS, backend="weaviate")
    assert isinstance(store, WeaviateStore)
    try:
        yield store
    finally:
        existing = set(store.collections())
        for name in made:
            if name in existing:
                store.drop_collection(name)
        store.close()


def _status(collection: Any, tenant: str) -> str:
    found = collection.tenants.get_by_name(tenant)
    status = getattr(found, "activity_status", None)
    return str(getattr(status, "value", status))


def _wait_status(collection: Any, tenant: str, wanted: set[str]) -> None:
    deadline = time.monotonic() + STATUS_TIMEOUT_S
    while (status := _status(collection, tenant)) not in wanted:
        if time.monotonic() > deadline:
            raise AssertionError(f"tenant {tenant} stayed {status}, expected {wanted}")
        time.sleep(0.2)


def restart_tenant(store: WeaviateStore, spec: CollectionSpec, user: str) -> None:
    """Deactivate and reactivate a user's tenant: its shard shuts down (flushing its
    memtables as ``Bucket.Shutdown`` does) and loads again from disk."""
    collection = store._client.collections.get(spec.name)
    tenant = tenant_name(user)
    collection.tenants.deactivate(tenant)
    _wait_status(collection, tenant, {"INACTIVE", "COLD"})
    collection.tenants.activate(tenant)
    _wait_status(collection, tenant, {"ACTIVE", "HOT"})


def _write_one_by_one(
    store: WeaviateStore, spec: CollectionSpec, user: str, batches: list[list[Any]]
) -> None:
    for batch in batches:
        for obj in batch:
            store.upsert(spec.name, [obj], user=user).raise_for_failures()


def _check(
    store: WeaviateStore,
    spec: CollectionSpec,
    user: str,
    query: diff.Query,
    models: list[ref.Shard],
) -> str | None:
    """``None`` when the server's answer matches one of the model states within the stated
    tolerances, else why it matches none."""
    got = diff.store_rows(store, spec, user, query)
    reasons = []
    for shard in models:
        report: list[str] = []
        want = diff.model_rows_with(shard, spec, query, diff.SERVER, report)
        if report or query.alpha > 0:
            why = diff.top10_difference(got, want)
        else:
            why = diff.tolerant_difference(got, want)
        if why is None:
            return None
        reasons.append(why)
    return "; ".join(reasons)


def _run_step(
    store: WeaviateStore,
    spec: CollectionSpec,
    user: str,
    case: diff.ChurnCorpus,
    label: str,
    models: list[ref.Shard],
) -> list[str]:
    failures = []
    for i, query in enumerate(case.queries):
        why = _check(store, spec, user, query, models)
        if why is not None:
            failures.append(f"{user} ({label}) query {i} {query!r}: {why}")
    return failures


def _known_corpora(count: int, specs: dict[int, CollectionSpec]) -> list[diff.ChurnCorpus]:
    """The first ``count`` churn corpora whose server state the model knows: no flush near
    the 4 KB limit (``Shard.uncertain_flushes``), no update decided by Go map order."""
    found: list[diff.ChurnCorpus] = []
    seed = 9_100_000
    while len(found) < count:
        case = diff.churn_corpus(seed, QUERIES, moved=True)
        seed += 1
        spec = specs[len(case.searchable)]
        trial = ref.Shard(list(case.searchable))
        diff.churn_first(None, spec, "trial", case, trial)
        trial.flush()
        trial.reload()
        diff.churn_second(None, spec, "trial", case, trial)
        trial.flush()
        if not trial.uncertain_flushes and not trial.uncertain_rewrites:
            found.append(case)
    return found


def test_churn_ranks_like_the_model_of_the_server(live: WeaviateStore, made: list[str]) -> None:
    specs = {
        n: CollectionSpec(f"Churn{os.getpid()}x{n}", spec.properties, True)
        for n, spec in diff.specs("C").items()
    }
    for spec in specs.values():
        live.ensure_collection(spec)
        made.append(spec.name)
    failures: list[str] = []
    steps = 0
    for n, case in enumerate(_known_corpora(CORPORA, specs)):
        # Half the queries keyword-only: the exact check of the churned statistics.
        for i, query in enumerate(case.queries):
            if i % 2 == 0:
                query.alpha = 0.0
        spec = specs[len(case.searchable)]
        user = f"churn{n}"
        shard = ref.Shard(list(case.searchable), memtable_pruning=True)

        _write_one_by_one(live, spec, user, case.first)
        diff.churn_first(None, spec, user, case, shard)
        failures += _run_step(live, spec, user, case, "written", [shard])

        restart_tenant(live, spec, user)
        shard.flush()
        shard.reload()
        if case.deletes:
            live.delete(spec.name, case.deletes, user=user)
        _write_one_by_one(live, spec, user, [case.rewrites, case.moved, case.added])
        diff.churn_second(None, spec, user, case, shard)
        failures += _run_step(live, spec, user, case, "flushed, deleted, rewritten", [shard])

        restart_tenant(live, spec, user)
        shard.flush()
        shard.reload()
        # The server compacts each property's segments on its own, a pair at a time: a search
        # meets any step of it (measured: a score between the flushed and the compacted state).
        states = shard.compaction_states()
        failures += _run_step(live, spec, user, case, "flushed again", states)
        time.sleep(COMPACTION_WAIT_S)
        failures += _run_step(live, spec, user, case, "compaction cycle", states[::-1])
        steps += 4
        assert not shard.uncertain_flushes and not shard.uncertain_rewrites, (
            shard.uncertain_flushes,
            shard.uncertain_rewrites,
        )
    checked = steps * QUERIES
    assert checked == CORPORA * QUERIES * 4
    assert not failures, f"{len(failures)} of {checked} differ:\n" + "\n".join(failures[:8])
