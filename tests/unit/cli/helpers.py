"""Shared test helpers: whole-store snapshots and a tiny graph that writes checkpoints."""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph

from agentic_memory.kinds.rules import RULES
from agentic_memory.kinds.rules.shared import PROPOSALS
from agentic_memory.store import GLOBAL_SCOPE, MemoryStore

Snapshot = dict[tuple[str, str, str], tuple[dict[str, Any], list[float] | None]]


def snapshot(
    store: MemoryStore, *, users: set[str] | None = None, vectors: bool = True
) -> Snapshot:
    """Every object of the store keyed by (collection, user, id), with properties and vector."""
    out: Snapshot = {}
    for name in store.collections():
        spec = store.spec(name)
        scopes: list[str | None] = list(store.users(name)) if spec.per_user else [None]
        for user in scopes:
            if users is not None and user not in users:
                continue
            for obj in store.list_objects(name, user=user, limit=10_000):
                full = store.get(name, obj.id, user=user, include_vector=vectors)
                assert full is not None
                out[(name, user or "", obj.id)] = (full.properties, full.vector)
    return out


def without_shared_rules(snap: Snapshot) -> Snapshot:
    """The snapshot without the shared rules' versions and proposals.

    An import never writes a version of the shared rules: it proposes the file's latest one
    (``SharedRules``), so a round trip restores everything else exactly.
    """
    return {
        key: value
        for key, value in snap.items()
        if key[0] != PROPOSALS.name and not (key[0] == RULES.name and key[1] == GLOBAL_SCOPE)
    }


def assert_same(a: Snapshot, b: Snapshot, *, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key, (props, vec) in a.items():
        other_props, other_vec = b[key]
        assert props == other_props, key
        if vec is None or other_vec is None:
            assert vec is other_vec
            continue
        assert len(vec) == len(other_vec)
        assert max(abs(x - y) for x, y in zip(vec, other_vec, strict=True)) < tol, key


class _State(TypedDict):
    n: int


async def write_checkpoints(
    checkpointer: BaseCheckpointSaver[Any], threads: dict[str, str]
) -> None:
    """Run a one-node graph once per thread (thread → user), as the agent would."""

    async def step(state: _State) -> _State:
        return {"n": state["n"] + 1}

    builder: StateGraph[_State, None, _State, _State] = StateGraph(_State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile(checkpointer=checkpointer)
    for thread, user in threads.items():
        await graph.ainvoke(
            {"n": 0},
            {"configurable": {"thread_id": thread}, "metadata": {"user_id": user}},
        )


async def checkpoint_count(checkpointer: BaseCheckpointSaver[Any], thread: str) -> int:
    n = 0
    async for _ in checkpointer.alist({"configurable": {"thread_id": thread}}):
        n += 1
    return n
