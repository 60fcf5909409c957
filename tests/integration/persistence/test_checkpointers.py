"""The checkpointer factories against real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from agentic_memory.forget import checkpoint_user_threads
from agentic_memory.graph.persistence import (
    CheckpointerError,
    adelete_thread,
    adelete_threads_where,
    athread_ids,
    default_sqlite_path,
    open_checkpointer,
    postgres_checkpointer,
    sqlite_checkpointer,
)


class _Echo(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def _echo(state: _Echo) -> dict[str, Any]:
    return {
        "messages": [AIMessage(f"echo {len(state['messages'])}: {state['messages'][-1].content}")]
    }


def _echo_graph(checkpointer: BaseCheckpointSaver[Any]) -> Any:
    builder = StateGraph(_Echo)
    builder.add_node("echo", _echo)
    builder.add_edge(START, "echo")
    return builder.compile(checkpointer=checkpointer)


def _thread(thread_id: str, user_id: str = "alice") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "metadata": {"user_id": user_id}}


async def _exercise(saver: BaseCheckpointSaver[Any]) -> None:
    """Resume, isolation, listing by metadata and deletion on one checkpointer."""
    graph = _echo_graph(saver)
    await graph.ainvoke({"messages": [HumanMessage("one")]}, _thread("t1"))
    out = await graph.ainvoke({"messages": [HumanMessage("two")]}, _thread("t1"))
    assert [m.content for m in out["messages"]] == ["one", "echo 1: one", "two", "echo 3: two"]
    await graph.ainvoke({"messages": [HumanMessage("other")]}, _thread("t2", "bob"))
    state = await graph.aget_state(_thread("t2"))
    assert [m.content for m in state.values["messages"]] == ["other", "echo 1: other"]

    assert await athread_ids(saver, {"user_id": "alice"}) == ["t1"]
    assert await athread_ids(saver, {"user_id": "nobody"}) == []
    await adelete_thread(saver, "t2")
    assert (await graph.aget_state(_thread("t2"))).values == {}
    assert (await graph.aget_state(_thread("t1"))).values["messages"][-1].content == "echo 3: two"
    assert await adelete_threads_where(saver, {"user_id": "alice"}) == ["t1"]
    assert (await graph.aget_state(_thread("t1"))).values == {}


async def test_sqlite_default_path_is_under_amem_home(tmp_path: Path) -> None:
    expected = tmp_path / "amem-home" / "checkpoints.sqlite"
    assert default_sqlite_path() == expected
    assert not expected.exists()
    async with sqlite_checkpointer() as saver:
        assert isinstance(saver, AsyncSqliteSaver)
        await _exercise(saver)
    assert expected.is_file()


async def test_sqlite_resumes_from_a_new_connection(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "cp.sqlite"
    async with sqlite_checkpointer(path) as saver:
        await _echo_graph(saver).ainvoke({"messages": [HumanMessage("hello")]}, _thread("t"))
    async with sqlite_checkpointer(str(path)) as reopened:
        out = await _echo_graph(reopened).ainvoke(
            {"messages": [HumanMessage("again")]}, _thread("t")
        )
    assert [m.content for m in out["messages"]] == [
        "hello",
        "echo 1: hello",
        "again",
        "echo 3: again",
    ]


async def test_sqlite_in_memory() -> None:
    async with sqlite_checkpointer(":memory:") as saver:
        await _exercise(saver)


async def test_sqlite_bad_paths_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(CheckpointerError, match="is a directory"):
        async with sqlite_checkpointer(tmp_path):
            pass
    with pytest.raises(CheckpointerError, match="empty"):
        async with sqlite_checkpointer("  "):
            pass
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointerError, match="cannot create the checkpoint directory"):
        async with sqlite_checkpointer(blocker / "sub" / "cp.sqlite"):
            pass
    with pytest.raises(TypeError, match="str or Path"):
        async with sqlite_checkpointer(42):  # type: ignore[arg-type]
            pass


async def test_thread_helpers_validate_input(tmp_path: Path) -> None:
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as saver:
        with pytest.raises(ValueError, match="thread_id must be a non-empty string"):
            await adelete_thread(saver, "")
        with pytest.raises(ValueError, match="non-empty mapping"):
            await athread_ids(saver, {})


async def test_postgres_needs_a_uri() -> None:
    with pytest.raises(CheckpointerError, match="AMEM_POSTGRES_URI"):
        async with postgres_checkpointer():
            pass


async def test_open_checkpointer_defaults_to_sqlite(tmp_path: Path) -> None:
    async with open_checkpointer() as saver:
        assert isinstance(saver, AsyncSqliteSaver)
    assert default_sqlite_path().is_file()


@pytest.mark.integration
async def test_postgres_unreachable_redacts_the_password() -> None:
    from tests.integration.persistence.conftest import _free_port

    uri = f"postgresql://amem:s3cret@127.0.0.1:{_free_port()}/nothing?connect_timeout=3"
    with pytest.raises(CheckpointerError) as info:
        async with postgres_checkpointer(uri):
            pass
    assert "s3cret" not in str(info.value)
    assert "amem:***@127.0.0.1" in str(info.value)


@pytest.mark.integration
async def test_postgres_checkpointer(postgres_uri: str) -> None:
    async with postgres_checkpointer(postgres_uri) as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        await _exercise(saver)


@pytest.mark.integration
async def test_open_checkpointer_picks_postgres_from_env(
    postgres_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async with open_checkpointer(postgres_uri=postgres_uri) as saver:
        assert isinstance(saver, AsyncPostgresSaver)
    monkeypatch.setenv("AMEM_POSTGRES_URI", postgres_uri)
    async with open_checkpointer() as saver:
        assert isinstance(saver, AsyncPostgresSaver)
    # With a URI configured, a SQLite path (only a fallback) is not used.
    async with open_checkpointer(sqlite_path=tmp_path / "unused.sqlite") as saver:
        assert isinstance(saver, AsyncPostgresSaver)
    assert not (tmp_path / "unused.sqlite").exists()


class _Owned(TypedDict, total=False):
    messages: list[str]
    owner: str


async def _owned_then_failed(saver: BaseCheckpointSaver[Any], thread: str, user: str) -> None:
    """The agent's first step records the owner; the turn then fails, with no run metadata."""

    async def own(state: _Owned) -> _Owned:
        return {"owner": user}

    async def fail(state: _Owned) -> _Owned:
        raise RuntimeError("turn failed")

    builder: StateGraph[_Owned, None, _Owned, _Owned] = StateGraph(_Owned)
    builder.add_node("own", own)
    builder.add_node("fail", fail)
    builder.add_edge(START, "own")
    builder.add_edge("own", "fail")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(RuntimeError):
        await graph.ainvoke({"messages": ["my ssn is 1"]}, {"configurable": {"thread_id": thread}})


async def _owner_lookup(saver: BaseCheckpointSaver[Any]) -> None:
    await _owned_then_failed(saver, "a1", "alice")
    await _owned_then_failed(saver, "b1", "bob")
    await _echo_graph(saver).ainvoke({"messages": [HumanMessage("x")]}, _thread("a2"))
    assert await checkpoint_user_threads(saver, "alice") == ["a1", "a2"]
    assert await checkpoint_user_threads(saver, "bob") == ["b1"]
    assert await checkpoint_user_threads(saver, "carol") == []


async def test_sqlite_threads_are_found_by_their_owner(tmp_path: Path) -> None:
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as saver:
        await _owner_lookup(saver)


@pytest.mark.integration
async def test_postgres_threads_are_found_by_their_owner(postgres_uri: str) -> None:
    async with postgres_checkpointer(postgres_uri) as saver:
        for thread in ("a1", "a2", "b1"):
            await saver.adelete_thread(thread)
        await _owner_lookup(saver)


async def test_replicas_starting_together_migrate_the_checkpointer_once(postgres_uri: str) -> None:
    """Replicas start together on a new database: each runs the checkpointer's migrations,
    which insert numbered rows, so unserialised they collide on the same row."""
    import psycopg

    base, _, _ = postgres_uri.rpartition("/")
    for attempt in range(3):
        name = f"amem_fresh_{attempt}"
        async with await psycopg.AsyncConnection.connect(postgres_uri, autocommit=True) as admin:
            await admin.execute(f"DROP DATABASE IF EXISTS {name}")
            await admin.execute(f"CREATE DATABASE {name}")
        fresh = f"{base}/{name}"

        async def start(uri: str) -> None:
            async with postgres_checkpointer(uri):
                pass

        await asyncio.gather(*(start(fresh) for _ in range(6)))
        async with postgres_checkpointer(fresh) as saver:
            await _exercise(saver)
        async with await psycopg.AsyncConnection.connect(fresh) as conn:
            cur = await conn.execute(
                "SELECT count(*), count(DISTINCT v) FROM checkpoint_migrations"
            )
            assert await cur.fetchone() == (len(AsyncPostgresSaver.MIGRATIONS),) * 2
