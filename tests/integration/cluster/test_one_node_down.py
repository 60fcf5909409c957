"""With one node of three down, the agent keeps recalling and remembering at ``QUORUM``.

``QUORUM`` is the level ``docs/weaviate.md`` and ``docs/deployment.md`` name for a cluster of
three (``WEAVIATE_CONSISTENCY_LEVEL``): a write waits for two replicas, and a search is
answered by the node it reaches, the objects it found checked against a second replica.
The agent's graph runs in this process on a store connected to one node (a scripted model,
the offline embeddings): a first conversation leaves facts, an episode and a rule version,
and a manual is ingested. Then one node is killed, a follower first, then (the follower
back) the Raft leader, and a turn on a new thread must recall the facts, the episode and the
manual's passage, and store what it learned, while the node is down.

What ``ALL`` means with a node down is pinned down too: the replicas that are up (a write at
``ALL`` succeeds on two of three), which ``docs/weaviate.md`` states.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.facts import FACTS
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.store.weaviate.launcher import Node
from tests.fakes import ScriptedChatModel
from tests.integration.cluster.conftest import LiveCluster
from tests.unit.graph.conftest import REFLECTION, RULES

pytestmark = [pytest.mark.weaviate, pytest.mark.timeout(900)]

USER = "alice"
CONTEXT = {"user_id": USER, "knowledge_bases": ["manual"]}


def _facts(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"facts": [{"subject": s, "value": v, "category": "preference"} for s, v in pairs]}


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(
        default_text="Noted.",
        structured={
            "ExtractedFacts": [
                _facts(("diet", "vegetarian")),
                _facts(("city", "Lisbon")),
                # One per turn while a node is down: the recalling turn's, then bob's.
                _facts(("drink", "green tea")),
                _facts(("pet", "a cat")),
                _facts(("sport", "sailing")),
                _facts(("pet", "a dog")),
            ]
        },
        structured_defaults={
            "ExtractedFacts": {"facts": []},
            "Summary": {"text": "Earlier the user and the assistant talked."},
            "Reflection": REFLECTION,
            "RuleSet": RULES,
        },
    )


async def _turn(app: Any, thread: str, text: str, user: str = USER, **extra: Any) -> dict[str, Any]:
    out = await app.ainvoke(
        {"messages": [HumanMessage(text)], **extra},
        {"configurable": {"thread_id": thread}},
        context={**CONTEXT, "user_id": user},
    )
    assert isinstance(out, dict)
    return out


def _manual(folder: Path) -> Path:
    path = folder / "rice-cooker.md"
    path.write_text(
        "# Rice cooker manual\n\nUse 1.5 cups of water per cup of white rice. "
        "Brown rice needs 2 cups of water and the long programme.\n"
    )
    return path


async def _recall_with(
    app: Any, model: ScriptedChatModel, thread: str, episode: str, said: str
) -> float:
    """A turn on a new thread; check what reached the model; return its seconds."""
    started = time.monotonic()
    # What the turn says about the user supports the fact the model extracts from it.
    out = await _turn(
        app, thread, f"{said} What should I cook tonight, and how much water for rice?"
    )
    seconds = time.monotonic() - started
    prompt = model.calls_for(None)[-1].text
    for line in ("- diet: vegetarian (preference)", "- city: Lisbon (preference)"):
        assert line in prompt, line
    assert [e["id"] for e in out["episodes"]][:1] == [episode]
    assert str(REFLECTION["what_to_avoid"]) in prompt
    assert "1.5 cups of water" in prompt and "[rice-cooker.md" in prompt
    assert out["chunks"] and "1.5 cups" in out["chunks"][0]["text"]
    return seconds


async def test_the_agent_recalls_and_remembers_with_one_node_down(
    cluster: LiveCluster, tmp_path: Path
) -> None:
    embeddings = LocalEmbeddings()
    leader = cluster.leader()
    follower, entry = [n for n in cluster.nodes if n is not leader]
    store = cluster.store(entry, embeddings.dims)  # QUORUM
    model = _model()
    agentic = AgenticStore(store, embeddings)
    facts = agentic.memory.facts
    app = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    try:
        await _turn(app, "t1", "I'm vegetarian.")
        ended = await _turn(app, "t1", "I live in Lisbon.", end_conversation=True)
        episode = ended["reflection"]["id"]
        assert ingest_paths([_manual(tmp_path)], kb="manual", store=store, embeddings=embeddings).ok

        learned = iter([("drink", "I drink green tea."), ("sport", "I go sailing.")])
        pets = iter(["cat", "dog"])
        for victim in (follower, leader):
            role = "leader" if victim is leader else "follower"
            victim.kill()
            try:
                subject, said = next(learned)
                seconds = await _recall_with(app, model, f"t-{victim.name}", episode, said)
                print(f"\n{role} {victim.name} down: the recalling turn took {seconds:.1f}s")
                # What the turn learned is stored (QUORUM: two replicas of three).
                assert subject in {f.subject for f in await facts.acurrent(USER)}, subject
                # A new user's first turn creates the user's tenants with the node down.
                newcomer = f"bob-{victim.name}"
                out = await _turn(app, newcomer, f"I have a {next(pets)}.", user=newcomer)
                assert [f["subject"] for f in out["facts_remembered"]] == ["pet"]
                if victim is follower:
                    _all_with_a_node_down(cluster, entry, embeddings.dims)
            finally:
                cluster.restart(victim)
    finally:
        store.close()


def _all_with_a_node_down(cluster: LiveCluster, entry: Node, dims: int) -> None:
    """``ALL`` counts the replicas the node can reach, not the replication factor.

    Weaviate 1.32 leaves a node that gossip lost out of the routing plan
    (``cluster/router/router.go`` ``buildReplicas``) and resolves the level over the rest:
    with one node of three down, a write at ``ALL`` goes to the two that are up and
    succeeds, and a search at ``ALL`` answers.
    """
    strict = cluster.store(entry, dims, consistency="ALL")
    try:
        before = strict.count(FACTS.name, user=USER)
        [stored] = strict.list_objects(FACTS.name, user=USER, limit=1)
        full = strict.get(FACTS.name, stored.id, user=USER, include_vector=True)
        assert full is not None and full.vector is not None
        copy = MemoryObject(make_id("all", "probe"), full.properties, full.vector)
        assert strict.upsert(FACTS.name, [copy], user=USER).ok
        assert strict.count(FACTS.name, user=USER) == before + 1
        hits = strict.hybrid(FACTS.name, query="vegetarian", vector=full.vector, user=USER)
        assert hits
        assert strict.delete(FACTS.name, [copy.id], user=USER) == 1
    finally:
        strict.close()
