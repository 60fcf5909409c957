"""A refused or failed run leaves the thread's checkpointed state exactly as it was.

LangGraph writes a run's input into the checkpoint before the first node runs, and every
node's writes after it; a run that ``admit`` refuses, or in which any node raises, is rolled
back to the values the thread had before (``graph.nodes.rollback``) and then fails with the
reason. Checked with every refusal of ``admit`` and a failure in every node, on the
in-memory and the SQLite checkpointer (PostgreSQL: ``tests/integration/persistence``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from agentic_memory.graph.admission import ERRORS_KEY, RunErrors
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import (
    InputRefusedError,
    MissingUserIdError,
    ThreadOwnershipError,
)
from agentic_memory.graph.persistence import sqlite_checkpointer
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError
from tests.fakes import ScriptedChatModel
from tests.unit.graph.values import thread_values

Saver = Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


class ModelDownError(RuntimeError):
    """What a model call raises when its server is gone."""


def _down(_: list[BaseMessage]) -> Any:
    raise ModelDownError("the model server is down")


@asynccontextmanager
async def _memory_saver() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    yield InMemorySaver()


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Saver:
    if request.param == "memory":
        return _memory_saver
    return lambda: sqlite_checkpointer(tmp_path / "checkpoints.sqlite")


def cfg(thread: str = "t", **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **extra}}


async def values_of(app: Any, thread: str = "t") -> dict[str, Any]:
    return thread_values((await app.aget_state(cfg(thread))).values)


async def say(app: Any, text: str, user: str = "alice", thread: str = "t", **ctx: Any) -> Any:
    return await app.ainvoke(
        {"messages": [HumanMessage(text)]}, cfg(thread), context={"user_id": user, **ctx}
    )


async def end(app: Any, user: str = "alice", thread: str = "t") -> Any:
    return await app.ainvoke({"end_conversation": True}, cfg(thread), context={"user_id": user})


@pytest.fixture
async def graph_with(
    saver: Saver, agentic: AgenticStore, model: ScriptedChatModel
) -> AsyncIterator[Any]:
    async with saver() as checkpointer:
        yield compile_graph(checkpointer=checkpointer, store=agentic, chat_model=model)


# -- refusals of admit ----------------------------------------------------------------------


async def test_another_users_refused_end_does_not_end_the_owners_conversation(
    graph_with, model, resources
) -> None:
    res, _ = resources
    await say(graph_with, "Hello, I plan dinners.")
    before = await values_of(graph_with)
    with pytest.raises(ThreadOwnershipError):
        await graph_with.ainvoke(
            {"messages": [], "end_conversation": True}, cfg(), context={"user_id": "bob"}
        )
    assert await values_of(graph_with) == before
    # Alice's next turn is a turn: no episode, no rules rewrite.
    out = await say(graph_with, "And for Tuesday?")
    assert out["reflection"] is None and out["conversation_ended"] is False
    assert await res.episodes.alist("alice") == []
    assert model.calls_for("Reflection") == []


REFUSALS: list[tuple[str, dict[str, Any], dict[str, Any], type[Exception], str]] = [
    (
        "other-user-message",
        {"messages": [HumanMessage("What did she say?")]},
        {"user_id": "bob"},
        ThreadOwnershipError,
        "belongs to another user",
    ),
    (
        "other-user-message-and-end",
        {"messages": [HumanMessage("bye")], "end_conversation": True},
        {"user_id": "bob"},
        ThreadOwnershipError,
        "belongs to another user",
    ),
    (
        "other-user-wipes-the-thread",
        {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)], "end_conversation": True},
        {"user_id": "bob"},
        ThreadOwnershipError,
        "belongs to another user",
    ),
    (
        "missing-user",
        {"messages": [HumanMessage("hi")], "end_conversation": True},
        {},
        MissingUserIdError,
        "context.user_id is required",
    ),
    (
        "reserved-user",
        {"messages": [HumanMessage("hi")]},
        {"user_id": GLOBAL_SCOPE},
        InvalidInputError,
        "reserved",
    ),
    (
        "oversized-message",
        {"messages": [HumanMessage("x" * (MAX_MESSAGE_CHARS + 1))], "end_conversation": True},
        {"user_id": "alice"},
        InputRefusedError,
        "characters; at most",
    ),
    (
        "over-the-token-budget",
        {"messages": [HumanMessage("word " * 3000)]},
        {"user_id": "alice"},
        InputRefusedError,
        "tokens but this conversation takes at most",
    ),
    (
        "lone-surrogate",
        {"messages": [HumanMessage("bad \ud800 text")]},
        {"user_id": "alice"},
        InputRefusedError,
        "lone surrogate",
    ),
    ("nothing-to-do", {"messages": []}, {"user_id": "alice"}, InputRefusedError, "nothing to do"),
    (
        "owner-wipes-the-thread-with-an-oversized-message",
        {
            "messages": [
                RemoveMessage(id=REMOVE_ALL_MESSAGES),
                HumanMessage("x" * (MAX_MESSAGE_CHARS + 1)),
            ]
        },
        {"user_id": "alice"},
        InputRefusedError,
        "characters; at most",
    ),
]


@pytest.mark.parametrize(
    ("payload", "context", "error", "match"),
    [r[1:] for r in REFUSALS],
    ids=[r[0] for r in REFUSALS],
)
async def test_every_refusal_leaves_the_thread_exactly_as_it_was(
    graph_with, model, payload: dict[str, Any], context: dict[str, Any], error: type, match: str
) -> None:
    await say(graph_with, "Hello.")
    await say(graph_with, "Plan Monday.")
    before = await values_of(graph_with)
    calls = len(model.calls)
    with pytest.raises(error, match=match):
        await graph_with.ainvoke(payload, cfg(), context=context)
    assert await values_of(graph_with) == before
    assert len(model.calls) == calls  # nothing was asked of a model
    # The owner goes on as if nothing happened.
    out = await say(graph_with, "Plan Tuesday.")
    assert [m.content for m in out["messages"]][-2:] == ["Plan Tuesday.", "Noted."]
    assert out["reflection"] is None


async def test_a_rewritten_earlier_message_is_input_checked_and_restored(graph_with) -> None:
    first = await say(graph_with, "My first question.")
    before = await values_of(graph_with)
    original = first["messages"][0]
    # Rewritten under its id with content no message may have: refused, the original back.
    forged = HumanMessage("x" * (MAX_MESSAGE_CHARS + 1), id=original.id)
    with pytest.raises(InputRefusedError, match="characters; at most"):
        await graph_with.ainvoke(
            {"messages": [forged], "end_conversation": True}, cfg(), context={"user_id": "alice"}
        )
    assert await values_of(graph_with) == before
    # The owner may edit her own thread's history (RemoveMessage, a message under its id).
    edited = HumanMessage("My first question, edited.", id=original.id)
    out = await graph_with.ainvoke(
        {"messages": [edited, HumanMessage("Next.")]}, cfg(), context={"user_id": "alice"}
    )
    assert [m.content for m in out["messages"]] == [
        "My first question, edited.",
        "Noted.",
        "Next.",
        "Noted.",
    ]
    assert out["settled_messages"] == out["messages"]


async def test_a_refused_first_run_leaves_a_fresh_thread_unowned(graph_with) -> None:
    with pytest.raises(InputRefusedError):
        await say(graph_with, "x" * (MAX_MESSAGE_CHARS + 1), user="bob")
    assert await values_of(graph_with) == thread_values({})
    out = await say(graph_with, "Hi, it's Alice.")
    assert out["owner"] == "alice"


async def test_an_authenticated_mismatch_changes_nothing(graph_with) -> None:
    await say(graph_with, "Hello.")
    before = await values_of(graph_with)
    with pytest.raises(ThreadOwnershipError, match="not the authenticated user"):
        await graph_with.ainvoke(
            {"messages": [HumanMessage("hi")], "end_conversation": True},
            cfg(langgraph_auth_user_id="mallory"),
            context={"user_id": "alice"},
        )
    assert await values_of(graph_with) == before


# -- failures of nodes ------------------------------------------------------------------------


def _fail_method(obj: Any, name: str) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(monkeypatch: pytest.MonkeyPatch) -> None:
        async def boom(*args: Any, **kwargs: Any) -> Any:
            raise ModelDownError(f"{name} failed")

        monkeypatch.setattr(obj, name, boom)

    return apply


NODE_FAILURES = [
    "admit",
    "recall_episodic",
    "recall_semantic",
    "load_procedural",
    "remember_facts",
    "compact",
    "generate",
    "log_turn",
    "reflect",
    "update_procedural",
]


@pytest.mark.parametrize("node", NODE_FAILURES)
async def test_a_failing_node_leaves_the_thread_exactly_as_it_was(
    graph_with, model, resources, monkeypatch, node: str
) -> None:
    res, agentic = resources
    small = {"budget_recent": 200}  # compaction on the third turn
    await say(graph_with, "Hello, I plan dinners for the week. " * 6, **small)
    await say(graph_with, "Monday is pasta, Tuesday is soup, and Friday is fish. " * 4, **small)
    before = await values_of(graph_with)
    logged = await res.messages.alist("alice")
    text, ending = "Wednesday should be something with rice, please.", False
    if node == "admit":
        import agentic_memory.graph.admission as admission

        def broken() -> None:
            raise ModelDownError("the tokenizer cannot be loaded")

        monkeypatch.setattr(admission, "load_tokenizer", broken)
    elif node == "recall_episodic":
        _fail_method(res.episodes, "arecall")(monkeypatch)
    elif node == "recall_semantic":
        _fail_method(res, "asearch_knowledge")(monkeypatch)
    elif node == "load_procedural":
        _fail_method(res.rules, "alatest")(monkeypatch)
    elif node == "remember_facts":
        model.structured["ExtractedFacts"] = [_down]
    elif node == "compact":
        model.structured["Summary"] = [_down]
    elif node == "generate":
        model.text_replies = [_down]
    elif node == "log_turn":
        _fail_method(res.messages, "aremember")(monkeypatch)
    elif node == "reflect":
        model.structured["Reflection"] = [_down]
        ending = True
    else:
        # A model failure of the rules update fails nothing (the episode stays pending):
        # the store refusing the new version does.
        _fail_method(res.rules, "apropose")(monkeypatch)
        ending = True
    with pytest.raises(ModelDownError):
        await graph_with.ainvoke(
            {"messages": [HumanMessage(text)], "end_conversation": ending},
            cfg(),
            context={"user_id": "alice", **small},
        )
    after = await values_of(graph_with)
    assert after == before
    assert (await graph_with.aget_state(cfg())).next == ()
    # What the failed run logged is taken back with it: the thread and its log agree.
    assert await res.messages.alist("alice") == logged

    # Nothing is left broken: the same turn, sent again, goes through.
    monkeypatch.undo()
    model.structured.clear()
    model.text_replies = []
    out = await graph_with.ainvoke(
        {"messages": [HumanMessage(text)], "end_conversation": ending},
        cfg(),
        context={"user_id": "alice", **small},
    )
    assert out["messages"][-1].content == "Noted."
    if ending:
        assert out["conversation_ended"] is True
        assert len(await res.episodes.alist("alice")) == 1


async def test_a_failed_runs_error_waits_in_its_own_graph_and_is_taken_once(
    agentic: AgenticStore, model: ScriptedChatModel
) -> None:
    # The error ``refuse`` raises again is kept by the compiled graph that ran it: another
    # graph never sees it, and nothing stays once it was raised.
    first = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    second = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    kept = [app.config["configurable"][ERRORS_KEY] for app in (first, second)]
    assert isinstance(kept[0], RunErrors) and kept[0] is not kept[1]
    model.text_replies = [_down]
    with pytest.raises(ModelDownError, match="the model server is down"):
        await say(first, "What should I cook tonight?")
    assert (len(kept[0]), len(kept[1])) == (0, 0)


def test_the_kept_errors_are_bounded() -> None:
    errors = RunErrors()
    tokens = [errors.keep(ValueError(str(i))) for i in range(RunErrors.KEPT + 10)]
    assert len(errors) == RunErrors.KEPT
    assert errors.take(tokens[0]) is None  # the oldest went first
    last = errors.take(tokens[-1])
    assert isinstance(last, ValueError) and str(last) == str(RunErrors.KEPT + 9)
    assert errors.take(tokens[-1]) is None


def test_errors_kept_by_threads_at_once_each_come_back_to_their_own_run() -> None:
    # One compiled graph serves runs on several threads (each with its event loop): every
    # failed run takes back its own error, and none is left over.
    import threading

    errors = RunErrors()
    taken: dict[int, BaseException | None] = {}

    def run(i: int) -> None:
        token = errors.keep(ValueError(f"run {i}"))
        taken[i] = errors.take(token)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: str(e) for i, e in taken.items()} == {i: f"run {i}" for i in range(32)}
    assert len(errors) == 0
