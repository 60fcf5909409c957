"""The agent graph keeps each thread's working memory in a SQLite or PostgreSQL checkpointer."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agentic_memory.graph.context import Context
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import (
    AnswerFailedError,
    InputRefusedError,
    ThreadOwnershipError,
)
from agentic_memory.graph.persistence import (
    adelete_thread,
    postgres_checkpointer,
    sqlite_checkpointer,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel
from tests.unit.graph.test_refused_input_traces import drops_a_subgraph_run
from tests.unit.graph.values import thread_values

_EMBEDDINGS = LocalEmbeddings()

OpenSaver = Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


def _echo(messages: list[BaseMessage]) -> str:
    """Answer with the last user message, so each reply shows which thread it came from."""
    last = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
    return f"echo: {last.content}"


def _facts(messages: list[BaseMessage]) -> dict[str, Any]:
    text = str(messages[-1].content).rpartition("Newest user message:")[2].lower()
    if "vegetarian" in text:
        return {"facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]}
    return {"facts": []}


class _FreshIdModel(ScriptedChatModel):
    """The scripted fake with globally unique message ids, as real providers give.

    ``ScriptedChatModel`` numbers ids per instance ("fake-1", ...); a second instance
    resuming a thread would reuse them, and ``add_messages`` would then *replace* the
    earlier answer with the same id instead of appending.
    """

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        result = super()._generate(*args, **kwargs)
        for generation in result.generations:
            generation.message.id = f"fake-{uuid.uuid4()}"
        return result


def _model() -> ScriptedChatModel:
    return _FreshIdModel(
        default_text=_echo,
        structured_defaults={
            "ExtractedFacts": _facts,
            "Summary": {"text": "Earlier turns."},
        },
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path / "store", dims=_EMBEDDINGS.dims)
    yield opened
    opened.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def open_saver(request: pytest.FixtureRequest, tmp_path: Path) -> OpenSaver:
    """Open the same durable checkpointer again each call (a new connection each time)."""
    if request.param == "sqlite":
        path = tmp_path / "checkpoints.sqlite"
        return lambda: sqlite_checkpointer(path)
    uri: str = request.getfixturevalue("postgres_uri")
    return lambda: postgres_checkpointer(uri)


# The PostgreSQL database lives for the whole session: keep thread ids unique per run.
_RUN = uuid.uuid4().hex[:8]


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"{thread}-{_RUN}"}}


async def _say(app: Any, thread: str, text: str, user: str = "alice") -> dict[str, Any]:
    result: dict[str, Any] = await app.ainvoke(
        {"messages": [HumanMessage(text)]}, _config(thread), context=Context(user_id=user)
    )
    return result


def _contents(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages]


async def test_two_turns_resume_on_one_thread(open_saver: OpenSaver, store: EmbeddedStore) -> None:
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        await _say(app, "resume", "I'm vegetarian.")
        out = await _say(app, "resume", "What did I say?")
    assert _contents(out["messages"]) == [
        "I'm vegetarian.",
        "echo: I'm vegetarian.",
        "What did I say?",
        "echo: What did I say?",
    ]
    assert [f["value"] for f in out["facts"]] == ["vegetarian"]


async def test_a_new_graph_and_connection_resume_the_thread(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    async with open_saver() as saver:
        first = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        await _say(first, "restart", "Remember: I'm vegetarian.")
    # A new process would do exactly this: new connection, new compiled graph, new model.
    model = _model()
    async with open_saver() as reopened:
        second = compile_graph(
            checkpointer=reopened, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        state = await second.aget_state(_config("restart"))
        assert _contents(state.values["messages"]) == [
            "Remember: I'm vegetarian.",
            "echo: Remember: I'm vegetarian.",
        ]
        out = await _say(second, "restart", "And now?")
    assert len(out["messages"]) == 4
    # The resumed history reached the answer prompt of the new graph.
    answer_prompt = model.calls_for(None)[-1]
    assert "Remember: I'm vegetarian." in answer_prompt.text
    assert "echo: Remember: I'm vegetarian." in answer_prompt.text


async def test_threads_never_mix(open_saver: OpenSaver, store: EmbeddedStore) -> None:
    model = _model()
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        await _say(app, "a", "alpha one")
        await _say(app, "b", "bravo one", user="bob")
        await _say(app, "a", "alpha two")
        out_b = await _say(app, "b", "bravo two", user="bob")
        state_a = await app.aget_state(_config("a"))
    assert _contents(state_a.values["messages"]) == [
        "alpha one",
        "echo: alpha one",
        "alpha two",
        "echo: alpha two",
    ]
    assert _contents(out_b["messages"]) == [
        "bravo one",
        "echo: bravo one",
        "bravo two",
        "echo: bravo two",
    ]
    for call in model.calls_for(None):
        text = call.text
        assert not ("alpha" in text and "bravo" in text), "a prompt mixed two threads"


async def test_deleting_a_thread_forgets_its_working_memory(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        await _say(app, "gone", "something to forget")
        await _say(app, "kept", "something to keep")
        await adelete_thread(saver, _config("gone")["configurable"]["thread_id"])
        assert (await app.aget_state(_config("gone"))).values == {}
        kept = await app.aget_state(_config("kept"))
    assert _contents(kept.values["messages"])[0] == "something to keep"


async def test_end_of_conversation_state_persists(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    model = _model()
    model.structured_defaults["Reflection"] = {
        "context_tags": ["diet"],
        "conversation_summary": "The user said they are vegetarian.",
        "what_worked": "Short answers.",
        "what_to_avoid": "Meat dishes.",
        "importance": 0.6,
    }
    model.structured_defaults["RuleSet"] = {
        "rules": [
            {"instruction": "Offer vegetarian options.", "rationale": "The user is vegetarian."}
        ]
    }
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        await _say(app, "end", "I'm vegetarian.")
        ended = await app.ainvoke(
            {"messages": [], "end_conversation": True},
            _config("end"),
            context=Context(user_id="alice"),
        )
    assert ended["conversation_ended"] is True
    async with open_saver() as reopened:
        app = compile_graph(
            checkpointer=reopened, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        state = await app.aget_state(_config("end"))
    assert state.values["conversation_ended"] is True
    assert (
        state.values["reflection"]["conversation_summary"] == "The user said they are vegetarian."
    )
    assert state.values["rules_version_created"] == 2
    assert isinstance(state.values["messages"][-1], AIMessage)


async def test_refused_and_failed_runs_leave_the_stored_thread_as_it_was(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    model = _model()
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        await _say(app, "guarded", "I'm vegetarian.")
        before = (await app.aget_state(_config("guarded"))).values
        # Another user's end, and the owner's turn whose answer fails.
        with pytest.raises(ThreadOwnershipError):
            await app.ainvoke(
                {"messages": [], "end_conversation": True},
                _config("guarded"),
                context=Context(user_id="bob"),
            )

        def down(_: list[BaseMessage]) -> str:
            raise ConnectionError("the model server is down")

        model.text_replies = [down]
        with pytest.raises(AnswerFailedError, match="the model server is down") as failed:
            await _say(app, "guarded", "Plan my week.")
        assert isinstance(failed.value.__cause__, ConnectionError)
    # Read back over a new connection, as another process would.
    async with open_saver() as reopened:
        app = compile_graph(
            checkpointer=reopened, store=store, embeddings=_EMBEDDINGS, chat_model=model
        )
        after = (await app.aget_state(_config("guarded"))).values
        assert thread_values(after) == thread_values(before)
        assert after["end_conversation"] is False
        out = await _say(app, "guarded", "Plan my week.")
    assert out["conversation_ended"] is False
    assert _contents(out["messages"])[-1] == "echo: Plan my week."


async def test_a_refused_input_leaves_nothing_in_the_stored_checkpoints(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    refused = "qzxv" * 500_000  # 2 MB: over MAX_MESSAGE_CHARS
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        await _say(app, "refused", "I'm vegetarian.")
        with pytest.raises(InputRefusedError, match="nothing was kept"):
            await _say(app, "refused", refused)
    # Read back over a new connection: no checkpoint and no write holds the message.
    async with open_saver() as reopened:
        held = [
            saved
            async for saved in reopened.alist(_config("refused"))
            if "qzxv" * 50 in repr(saved.checkpoint) + repr(saved.pending_writes)
        ]
        assert held == []
        assert await _stored_bytes(reopened, _config("refused")) < 200_000  # 2 MB before
        app = compile_graph(
            checkpointer=reopened, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        out = await _say(app, "refused", "Plan my week.")
    assert _contents(out["messages"])[-1] == "echo: Plan my week."


async def _stored_bytes(saver: BaseCheckpointSaver[Any], config: dict[str, Any]) -> int:
    """Every byte the database keeps for the thread: checkpoints, writes, channel values."""
    thread = config["configurable"]["thread_id"]
    if isinstance(saver, AsyncPostgresSaver):
        total = 0
        async with saver._cursor() as cur:
            for table, column in (
                ("checkpoints", "checkpoint::text"),
                ("checkpoint_writes", "blob"),
                ("checkpoint_blobs", "blob"),
            ):
                await cur.execute(
                    f"SELECT coalesce(sum(length({column})), 0) AS n FROM {table} "
                    "WHERE thread_id = %s",
                    (thread,),
                )
                row = await cur.fetchone()
                total += int(row["n"]) if row else 0
        return total
    assert isinstance(saver, AsyncSqliteSaver)
    total = 0
    for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
        async with saver.conn.execute(
            f"SELECT coalesce(sum(length({column})), 0) FROM {table} WHERE thread_id = ?",
            (thread,),
        ) as cursor:
            row = await cursor.fetchone()
        total += int(row[0]) if row else 0
    return total


async def test_a_rolled_back_history_has_no_missing_parent(
    open_saver: OpenSaver, store: EmbeddedStore
) -> None:
    async with open_saver() as saver:
        app = compile_graph(
            checkpointer=saver, store=store, embeddings=_EMBEDDINGS, chat_model=_model()
        )
        await _say(app, "parents", "I'm vegetarian.")
        with pytest.raises(InputRefusedError):
            await _say(app, "parents", "qzxv" * 60_000)
    async with open_saver() as reopened:
        history = [s async for s in reopened.alist(_config("parents"))]
        assert history
        for saved in history:
            if saved.parent_config is not None:
                assert await reopened.aget_tuple(saved.parent_config) is not None
        assert history[0].parent_config is not None


async def test_a_dropped_run_takes_its_subgraphs_checkpoints(open_saver: OpenSaver) -> None:
    async with open_saver() as saver:
        await drops_a_subgraph_run(saver, _config("subgraphs"), _spaces)


async def _spaces(saver: BaseCheckpointSaver[Any], config: dict[str, Any]) -> set[str]:
    """Return the thread's subgraph namespaces that hold a checkpoint, a write or a value."""
    thread = config["configurable"]["thread_id"]
    found: set[str] = set()
    if isinstance(saver, AsyncPostgresSaver):
        async with saver._cursor() as cur:
            for table in ("checkpoints", "checkpoint_writes", "checkpoint_blobs"):
                await cur.execute(
                    f"SELECT DISTINCT checkpoint_ns FROM {table} "
                    "WHERE thread_id = %s AND checkpoint_ns <> ''",
                    (thread,),
                )
                found |= {str(row["checkpoint_ns"]) for row in await cur.fetchall()}
        return found
    assert isinstance(saver, AsyncSqliteSaver)
    for table in ("checkpoints", "writes"):
        async with saver.conn.execute(
            f"SELECT DISTINCT checkpoint_ns FROM {table} WHERE thread_id = ? "
            "AND checkpoint_ns <> ''",
            (thread,),
        ) as cursor:
            found |= {str(row[0]) for row in await cursor.fetchall()}
    return found
