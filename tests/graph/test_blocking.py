"""``langgraph dev`` runs nodes under blockbuster, which fails any blocking call on the loop.

The check runs in a fresh interpreter: inside pytest, blockbuster lets some file reads
through (it exempts pytest's own frames), and a fresh process also proves that first-use
loading (prompt files, the tokenizer, WordLlama, the store) happens off the event loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import asyncio, sys, tempfile
from blockbuster import BlockingError, blockbuster_ctx
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from graph.graph import compile_graph
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel
from tests.graph.conftest import REFLECTION, RULES

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
    script = tmp_path / "conversation.py"
    script.write_text(SCRIPT)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "guard active" in lines
    assert "rules version 2" in lines
    calls = lines[-1].removeprefix("calls ").split(",")
    assert "Summary" in calls  # compaction ran under the guard too
    assert calls[-2:] == ["Reflection", "RuleSet"]
