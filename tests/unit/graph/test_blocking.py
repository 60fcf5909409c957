"""``langgraph dev`` runs nodes under blockbuster, which fails any blocking call on the loop.

The check runs in a fresh interpreter: inside pytest, blockbuster lets some file reads
through (it exempts pytest's own frames), and a fresh process also proves that first-use
loading (prompt files, the tokenizer, WordLlama, the store) happens off the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.ingest import ingest_paths
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel
from tests.scripts import run_script
from tests.unit.graph.conftest import REFLECTION, RULES

SCRIPT = r"""
import asyncio, sys, tempfile
from blockbuster import BlockingError, blockbuster_ctx
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from agentic_memory.graph.graph import compile_graph
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel
from tests.unit.graph.conftest import REFLECTION, RULES

async def main():
    store = EmbeddedStore(tempfile.mkdtemp(), dims=256)
    model = ScriptedChatModel(structured_defaults={
        "ExtractedFacts": {"facts": [{"subject": "name", "value": "Al", "category": "identity"}]},
        "Reflection": REFLECTION, "RuleSet": RULES, "Summary": {"text": "They said hi."}})
    app = compile_graph(checkpointer=InMemorySaver(), store=store,
                        embeddings=LocalEmbeddings(), chat_model=model)
    config = {"configurable": {"thread_id": "t1"}}
    context = {"user_id": "alice", "budget_recent": 120}
    with blockbuster_ctx():
        try:
            open(__file__).read()
        except BlockingError:
            print("guard active")
        for text in ["Hi, I'm Al. " * 10, "Tell me more. " * 8, "And more. " * 8]:
            await app.ainvoke({"messages": [HumanMessage(text)]}, config, context=context)
        out = await app.ainvoke({"end_conversation": True}, config, context=context)
    print("rules version", out["rules_version_created"])
    print("calls", ",".join(str(c.name) for c in model.calls))

asyncio.run(main())
"""


def test_a_whole_conversation_makes_no_blocking_call_on_the_event_loop(tmp_path: Path) -> None:
    lines = run_script(tmp_path, "conversation.py", SCRIPT)
    assert "guard active" in lines
    assert "rules version 2" in lines
    calls = lines[-1].removeprefix("calls ").split(",")
    assert "Summary" in calls  # compaction ran under the guard too
    assert calls[-2:] == ["Reflection", "RuleSet"]


# -- a restarted graph: conversations on a store that already holds memories -----------------


def _facts_model() -> ScriptedChatModel:
    return ScriptedChatModel(
        default_text="Noted.",
        structured_defaults={
            "ExtractedFacts": {
                "facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]
            },
            "Summary": {"text": "Earlier the user and the assistant talked."},
            "Reflection": REFLECTION,
            "RuleSet": RULES,
        },
    )


def _context() -> dict[str, Any]:
    return {"user_id": "alice", "knowledge_bases": ["manual"], "budget_recent": 120}


async def _converse(app: Any, thread: str, texts: list[str]) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    for text in texts:
        await app.ainvoke({"messages": [HumanMessage(text)]}, config, context=_context())
    out: dict[str, Any] = await app.ainvoke({"end_conversation": True}, config, context=_context())
    return out


@pytest.fixture
def remembered(tmp_path: Path, embeddings: LocalEmbeddings) -> Path:
    """A store holding every kind the graph reads: facts, an episode, rules, turns, knowledge."""
    manual = tmp_path / "manual.md"
    manual.write_text("Rice cooker manual.\n\nUse 1.5 cups of water per cup of white rice.\n")
    path = tmp_path / "store"
    with EmbeddedStore(path, dims=embeddings.dims) as store:
        assert ingest_paths([manual], kb="manual", store=store, embeddings=embeddings).ok
        app = compile_graph(
            checkpointer=InMemorySaver(),
            store=AgenticStore(store, embeddings),
            chat_model=_facts_model(),
        )
        # A sync fixture runs outside the test's loop: a loop of its own for the first session.
        out = asyncio.run(_converse(app, "first", ["Hi, I am vegetarian.", "How much water?"]))
        assert out["rules_version_created"] == 2
    return path


async def test_a_conversation_on_a_reopened_store_makes_no_blocking_call(
    remembered: Path, embeddings: LocalEmbeddings
) -> None:
    # What a restarted server does: a new store on the data (empty caches), then runs.
    store = await asyncio.to_thread(EmbeddedStore, remembered, dims=embeddings.dims)
    try:
        model = _facts_model()
        app = await asyncio.to_thread(
            compile_graph,
            checkpointer=InMemorySaver(),
            store=AgenticStore(store, embeddings),
            chat_model=model,
        )
        out = await _converse(app, "second", ["What should I cook tonight?", "And rice?"])
    finally:
        await asyncio.to_thread(store.close)
    assert out["reflection"]["conversation_summary"]  # the second episode was written too
    answer_prompts = [str(c.messages) for c in model.calls_for(None)]
    assert any("vegetarian" in p for p in answer_prompts)  # the fact of the first session
    assert any("The user planned dinners" in p for p in answer_prompts)  # its episode
    assert any("1.5 cups" in p for p in answer_prompts)  # the knowledge base
