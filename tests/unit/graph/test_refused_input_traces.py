"""A refused or failed run leaves nothing of its input in the thread's checkpoints.

LangGraph saves a run's input in a checkpoint before the first node runs, and the writes of
every step after it. A 2 MB message refused with "nothing was kept" was nonetheless kept
there (6 MB of checkpoints and 2 MB of writes for the thread). ``refuse`` now deletes the
checkpoints the run wrote before the one its rollback restored (``checkpoints.adrop_run``),
on the in-memory and the SQLite checkpointer (PostgreSQL: ``tests/integration/persistence``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import InputRefusedError
from agentic_memory.langgraph_store import AgenticStore
from tests.fakes import ScriptedChatModel
from tests.unit.graph.test_failed_runs import Saver, saver

__all__ = ["saver"]  # the fixture, imported for this module

MARKER = "qzxv"
"""Letters the refused message is made of, and no other text here."""


def cfg(thread: str = "t") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def _traces(saver: BaseCheckpointSaver[Any], thread: str = "t") -> int:
    """Count the saved checkpoints and writes of the thread that hold the marker."""
    found = 0
    async for saved in saver.alist(cfg(thread)):
        texts = [repr(saved.checkpoint), *(repr(w) for w in saved.pending_writes or [])]
        found += sum(MARKER * 50 in text for text in texts)
    return found


async def _run(app: Any, text: str, thread: str = "t") -> dict[str, Any]:
    result: dict[str, Any] = await app.ainvoke(
        {"messages": [HumanMessage(text)]}, cfg(thread), context={"user_id": "alice"}
    )
    return result


async def test_a_refused_two_megabyte_message_leaves_no_trace(
    saver: Saver, agentic: AgenticStore, model: ScriptedChatModel, tmp_path: Path
) -> None:
    async with saver() as checkpointer:
        app: Any = compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)
        await _run(app, "Hello, I plan a trip.")
        before = (await app.aget_state(cfg())).values
        with pytest.raises(InputRefusedError, match="nothing was kept"):
            await _run(app, MARKER * 500_000)
        assert await _traces(checkpointer) == 0
        # The thread is as it was, its history readable, and it goes on.
        assert (await app.aget_state(cfg())).values["messages"] == before["messages"]
        assert [s async for s in app.aget_state_history(cfg())]
        out = await _run(app, "And a second question.")
        assert [m.content for m in out["messages"] if isinstance(m, HumanMessage)] == [
            "Hello, I plan a trip.",
            "And a second question.",
        ]
    if isinstance(checkpointer, InMemorySaver):
        return
    stored, size = await asyncio.to_thread(_bytes_of, tmp_path / "checkpoints.sqlite")
    assert stored < 200_000  # was 8 MB: three checkpoints and a write of 2 MB
    # Its pages were given back: the file is not the size of what it once held.
    assert size < 1_000_000


def _bytes_of(path: Path) -> tuple[int, int]:
    """Return the bytes of the thread's checkpoints and writes, and the file's size."""
    with sqlite3.connect(path) as db:
        (stored,) = db.execute(
            "SELECT coalesce(sum(length(checkpoint)), 0) FROM checkpoints WHERE thread_id = 't'"
        ).fetchone()
        (written,) = db.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = 't'"
        ).fetchone()
    return int(stored) + int(written), path.stat().st_size


async def test_a_refused_first_message_leaves_an_empty_thread(
    saver: Saver, agentic: AgenticStore, model: ScriptedChatModel
) -> None:
    async with saver() as checkpointer:
        app: Any = compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)
        with pytest.raises(InputRefusedError):
            await _run(app, MARKER * 50_000, thread="fresh")
        assert await _traces(checkpointer, "fresh") == 0
        assert (await app.aget_state(cfg("fresh"))).values.get("messages", []) == []


async def test_a_failed_run_leaves_no_trace_of_its_input_either(
    saver: Saver, agentic: AgenticStore, model: ScriptedChatModel
) -> None:
    async with saver() as checkpointer:
        app: Any = compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)
        await _run(app, "Hello.")

        def down(_: list[BaseMessage]) -> Any:
            raise RuntimeError("the model server is down")

        model.structured_defaults["ExtractedFacts"] = down
        with pytest.raises(RuntimeError, match="down"):
            await _run(app, MARKER * 60)
        assert await _traces(checkpointer) == 0
        assert all(
            MARKER not in str(m.content) for m in (await app.aget_state(cfg())).values["messages"]
        )
