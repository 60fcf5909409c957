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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from agentic_memory.checkpoints import SqliteEraser, adrop_run
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import InputRefusedError
from agentic_memory.graph.persistence import sqlite_checkpointer
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


async def test_a_refused_input_only_deletes(
    agentic: AgenticStore, model: ScriptedChatModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Emptying the log waits for other connections, under the lock every write takes:
    a refusal tries once, without waiting."""
    erased: list[object] = []

    async def aerase(self: SqliteEraser) -> bool:
        erased.append(self)
        return True

    monkeypatch.setattr(SqliteEraser, "aerase", aerase)
    async with sqlite_checkpointer(tmp_path / "checkpoints.sqlite") as checkpointer:
        app: Any = compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)
        await _run(app, "Hello.")
        statements: list[str] = []
        execute = checkpointer.conn.execute

        def spy(sql: str, *args: Any) -> Any:
            statements.append(sql)
            return execute(sql, *args)

        monkeypatch.setattr(checkpointer.conn, "execute", spy)
        for _ in range(3):
            with pytest.raises(InputRefusedError):
                await _run(app, MARKER * 60_000)
        assert await _traces(checkpointer) == 0
    assert erased == []
    assert any(s.startswith("DELETE") for s in statements)
    assert not [s for s in statements if s.strip() == "VACUUM"]
    # One attempt to empty the log per refusal, which does not wait for other connections.
    emptied = [i for i, s in enumerate(statements) if "wal_checkpoint" in s]
    assert len(emptied) == 3
    assert all(statements[i - 1] == "PRAGMA busy_timeout = 0" for i in emptied)


async def test_a_rolled_back_history_has_no_missing_parent(
    saver: Saver, agentic: AgenticStore, model: ScriptedChatModel
) -> None:
    async with saver() as checkpointer:
        app: Any = compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)
        for thread in ("t", "fresh"):
            if thread == "t":
                await _run(app, "Hello, I plan a trip.")
            with pytest.raises(InputRefusedError):
                await _run(app, MARKER * 60_000, thread=thread)
            history = [s async for s in app.aget_state_history(cfg(thread))]
            assert history
            for snapshot in history:
                if snapshot.parent_config is not None:
                    assert await checkpointer.aget_tuple(snapshot.parent_config) is not None
        head = await app.aget_state(cfg())
        # The restored checkpoint follows the one the refused run started from.
        assert head.parent_config is not None


class Count(TypedDict):
    n: int


Spaces = Callable[[BaseCheckpointSaver[Any], dict[str, Any]], Awaitable[set[str]]]


async def drops_a_subgraph_run(
    checkpointer: BaseCheckpointSaver[Any], config: dict[str, Any], spaces: Spaces
) -> None:
    """Run a graph with a subgraph twice on a thread, drop the second run, check its namespace."""
    inner = StateGraph(Count)
    inner.add_node("inc", lambda s: {"n": s["n"] + 1})
    inner.add_edge(START, "inc")
    outer = StateGraph(Count)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    app: Any = outer.compile(checkpointer=checkpointer)
    await app.ainvoke({"n": 0}, config)
    first = await spaces(checkpointer, config)
    await app.ainvoke({"n": 5}, config)
    run = [s async for s in app.aget_state_history(config)]
    since = next(
        str(s.config["configurable"]["checkpoint_id"])
        for s in reversed(run)
        if s.metadata and s.metadata.get("source") == "loop" and s.values["n"] == 5
    )
    head = str(run[0].config["configurable"]["checkpoint_id"])
    assert len(await spaces(checkpointer, config)) == len(first) + 1
    assert await adrop_run(checkpointer, config["configurable"]["thread_id"], since, head) > 0
    assert await spaces(checkpointer, config) == first


async def test_a_dropped_run_takes_its_subgraphs_checkpoints(saver: Saver) -> None:
    async with saver() as checkpointer:
        await drops_a_subgraph_run(checkpointer, cfg(), _spaces)


async def _spaces(checkpointer: BaseCheckpointSaver[Any], config: dict[str, Any]) -> set[str]:
    """Return the thread's subgraph namespaces that hold a checkpoint."""
    found = set()
    async for saved in checkpointer.alist(config):
        ns = str(saved.config["configurable"].get("checkpoint_ns", ""))
        if ns:
            found.add(ns)
    return found
