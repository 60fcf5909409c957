"""MessageLog and the Memory facade on the real embedded store with real embeddings."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from agentic_memory.api import Memory, SubAPI
from agentic_memory.kinds.messages import MESSAGES, MessageLog, RecalledMessage
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, MissingUserError, make_id
from tests.unit.api.conftest import logged

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_logs_only_human_and_ai_text_turns_in_order(mem: Memory) -> None:
    ids = mem.remember(
        "alice",
        "t1",
        [
            SystemMessage("you are helpful", id="s"),
            HumanMessage("Book me a train to Paris", id="h1"),
            AIMessage("", id="a0", tool_calls=[{"name": "book", "args": {}, "id": "c1"}]),
            ToolMessage("booked", tool_call_id="c1", id="tool"),
            AIMessage("Your train to Paris is booked.", id="a1"),
            {"role": "user", "content": "   "},
        ],
    )
    assert ids == [make_id("msg", "alice", "t1", "h1"), make_id("msg", "alice", "t1", "a1")]
    listed = mem.list("alice")
    assert [(m.turn, m.role, m.content) for m in listed] == [
        (0, "human", "Book me a train to Paris"),
        (1, "ai", "Your train to Paris is booked."),
    ]
    assert [m.id for m in listed] == ids
    assert isinstance(listed[0].to_message(), HumanMessage)
    assert isinstance(listed[1].to_message(), AIMessage)


def test_turns_continue_from_the_thread(mem: Memory) -> None:
    mem.remember("alice", "t1", [HumanMessage("one", id="1"), AIMessage("two", id="2")])
    mem.remember("alice", "t2", [HumanMessage("other thread", id="x")])
    mem.remember("alice", "t1", [HumanMessage("three", id="3"), {"role": "ai", "content": "four"}])
    t1 = mem.list("alice", thread_id="t1")
    assert [(m.turn, m.content) for m in t1] == [(0, "one"), (1, "two"), (2, "three"), (3, "four")]
    assert t1[3].id == make_id("msg", "alice", "t1", "#3")
    assert [m.turn for m in mem.list("alice", thread_id="t2")] == [0]


def test_remembering_the_same_messages_again_changes_nothing(mem: Memory) -> None:
    msgs = [HumanMessage("I am vegetarian", id="h"), AIMessage("Noted.", id="a")]
    first = asyncio.run(mem.messages.aremember("alice", "t1", msgs, metadata={"k": 1}, now=T0))
    before = mem.list("alice")
    later = datetime(2026, 12, 1, tzinfo=UTC)
    again = asyncio.run(mem.messages.aremember("alice", "t1", msgs, metadata={"k": 1}, now=later))
    assert again == first
    assert mem.list("alice") == before
    assert logged(mem, "alice") == 2
    # Omitting metadata keeps the stored metadata; the turn and timestamp stay too.
    asyncio.run(mem.messages.aremember("alice", "t1", msgs[:1], now=later))
    after = mem.list("alice")
    assert after[0].metadata == {"k": 1}
    assert after[0].created_at == before[0].created_at
    assert logged(mem, "alice") == 2


def test_messages_without_ids_are_new_each_time(mem: Memory) -> None:
    msg = {"role": "user", "content": "hello"}
    a = mem.remember("alice", "t1", [msg])
    b = mem.remember("alice", "t1", [msg])
    assert a != b
    assert [m.turn for m in mem.list("alice")] == [0, 1]


def test_metadata_and_created_at_round_trip(mem: Memory) -> None:
    meta = {"source": "notebook", "tags": ["a", "é"], "nested": {"n": 1.5, "ok": True, "x": None}}
    asyncio.run(
        mem.messages.aremember("alice", "t1", [HumanMessage("hi", id="h")], metadata=meta, now=T0)
    )
    (msg,) = mem.list("alice")
    assert msg.metadata == meta
    assert datetime.fromisoformat(msg.created_at.replace("Z", "+00:00")) == T0
    assert msg.to_dict()["metadata"] == meta


def test_content_blocks_keep_their_text(mem: Memory) -> None:
    mem.remember(
        "alice",
        "t1",
        [
            HumanMessage(
                content=[
                    {"type": "text", "text": "What is in"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                    "this picture?",
                ],
                id="h",
            )
        ],
    )
    assert mem.list("alice")[0].content == "What is in\nthis picture?"


def _seed(mem: Memory) -> None:
    mem.remember(
        "alice",
        "trip",
        [
            HumanMessage("I want to go hiking in the Alps next summer", id="1"),
            AIMessage("Mountain hiking in the Alps is wonderful in July.", id="2"),
        ],
    )
    mem.remember(
        "alice",
        "money",
        [
            HumanMessage("Please pay my electricity invoice", id="3"),
            AIMessage("The invoice was paid from your account.", id="4"),
        ],
    )
    mem.remember("bob", "bob-1", [HumanMessage("I also love hiking in the Alps", id="5")])


def test_recall_finds_the_relevant_turns(mem: Memory) -> None:
    _seed(mem)
    hits = mem.recall("alice", "hiking holiday in the mountains", k=4)
    assert all(isinstance(h, RecalledMessage) for h in hits)
    assert {h.thread_id for h in hits[:2]} == {"trip"}
    assert hits[0].score >= hits[-1].score
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    invoice = mem.recall("alice", "invoice", k=1)
    assert invoice[0].thread_id == "money"
    assert "invoice" in invoice[0].content


def test_recall_thread_filters(mem: Memory) -> None:
    _seed(mem)
    assert {h.thread_id for h in mem.recall("alice", "hiking", k=10, exclude_thread="trip")} == {
        "money"
    }
    assert {h.thread_id for h in mem.recall("alice", "invoice", k=10, thread_id="trip")} == {"trip"}


def test_users_are_isolated(mem: Memory) -> None:
    _seed(mem)
    assert {h.thread_id for h in mem.recall("bob", "hiking Alps invoice", k=10)} == {"bob-1"}
    assert [m.content for m in mem.list("bob")] == ["I also love hiking in the Alps"]
    assert mem.threads("alice") == ["money", "trip"]
    assert mem.threads("carol") == []
    assert mem.recall("carol", "hiking") == []
    # Bob's ids are not Alice's: forgetting them as Alice deletes nothing.
    assert mem.forget("alice", ids=[m.id for m in mem.list("bob")]) == 0
    assert logged(mem, "bob") == 1


def test_list_pages_across_threads_by_thread_then_turn(mem: Memory) -> None:
    for thread in ("c", "a", "b"):
        mem.remember(
            "alice",
            thread,
            [HumanMessage(f"{thread} question", id="q"), AIMessage(f"{thread} answer", id="r")],
        )
    full = [(m.thread_id, m.turn) for m in mem.list("alice")]
    assert full == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("c", 1)]
    for offset in range(7):
        for limit in (1, 2, 3, 5):
            page = [(m.thread_id, m.turn) for m in mem.list("alice", limit=limit, offset=offset)]
            assert page == full[offset : offset + limit]


def test_forget_by_ids_thread_and_user(mem: Memory) -> None:
    _seed(mem)
    trip = mem.list("alice", thread_id="trip")
    assert mem.forget("alice", ids=[trip[0].id]) == 1
    assert mem.forget("alice", ids=[trip[0].id]) == 0
    assert mem.forget("alice", thread_id="money") == 2
    assert [m.content for m in mem.list("alice")] == [trip[1].content]
    assert asyncio.run(mem.messages.aforget_user("alice")) == 1
    assert logged(mem, "alice") == 0
    assert logged(mem, "bob") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one"),
        ({"ids": ["x"], "thread_id": "t"}, "exactly one"),
        ({"ids": "abc"}, "list"),
    ],
)
def test_forget_needs_exactly_one_selector(mem: Memory, kwargs: dict, message: str) -> None:
    _seed(mem)
    with pytest.raises(InvalidInputError, match=message):
        mem.forget("alice", **kwargs)
    assert logged(mem, "alice") == 4


@pytest.mark.parametrize(
    ("user", "thread", "messages", "metadata", "error"),
    [
        (
            "alice",
            "t1",
            [HumanMessage("ok", id="1"), {"role": "user", "content": 123}],
            None,
            InvalidInputError,
        ),
        ("alice", "t1", [{"role": "user", "content": {"text": "x"}}], None, InvalidInputError),
        (
            "alice",
            "t1",
            [HumanMessage("ok", id="1")],
            {"when": datetime.now(UTC)},
            InvalidInputError,
        ),
        ("alice", "t1", [HumanMessage("ok", id="1")], {"x": math.nan}, InvalidInputError),
        ("alice", "t1", [HumanMessage("ok", id="1")], ["not", "a", "dict"], InvalidInputError),
        ("", "t1", [HumanMessage("ok", id="1")], None, MissingUserError),
        (None, "t1", [HumanMessage("ok", id="1")], None, InvalidInputError),
        ("_internal", "t1", [HumanMessage("ok", id="1")], None, InvalidInputError),
        ("alice", "", [HumanMessage("ok", id="1")], None, InvalidInputError),
        ("alice", "t1", "just a string", None, InvalidInputError),
        ("alice", "t1", HumanMessage("one message, not a list"), None, InvalidInputError),
        ("alice", "t1", [{"role": "wizard", "content": "x"}], None, InvalidInputError),
        ("alice", "t1", [{"content": "no role"}], None, InvalidInputError),
        (
            "alice",
            "t1",
            [HumanMessage("a", id="same"), AIMessage("b", id="same")],
            None,
            InvalidInputError,
        ),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    mem: Memory, user: object, thread: object, messages: object, metadata: object, error: type
) -> None:
    mem.remember("alice", "t1", [HumanMessage("existing", id="0")])
    before = mem.list("alice")
    with pytest.raises(error):
        mem.remember(user, thread, messages, metadata=metadata)  # type: ignore[arg-type]
    assert mem.list("alice") == before
    assert logged(mem, "alice") == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"query": ""}, {"query": "  "}, {"query": 5}, {"k": 0}, {"k": True}, {"exclude_thread": ""}],
)
def test_bad_recall_arguments(mem: Memory, kwargs: dict) -> None:
    args = {"query": "hiking", **kwargs}
    with pytest.raises(InvalidInputError):
        asyncio.run(mem.messages.arecall("alice", **args))


def test_bad_list_arguments(mem: Memory) -> None:
    for kwargs in ({"limit": 0}, {"offset": -1}, {"thread_id": ""}, {"limit": "5"}):
        with pytest.raises(InvalidInputError):
            mem.list("alice", **kwargs)  # type: ignore[arg-type]


async def test_the_message_log_is_async(mem: Memory) -> None:
    log = mem.messages
    ids = await log.aremember(
        "alice",
        "t1",
        [
            HumanMessage("I collect vintage fountain pens", id="h"),
            AIMessage("Lovely hobby!", id="a"),
        ],
        metadata={"via": "async"},
    )
    assert ids == await log.aremember(
        "alice",
        "t1",
        [
            HumanMessage("I collect vintage fountain pens", id="h"),
            AIMessage("Lovely hobby!", id="a"),
        ],
    )
    hits = await log.arecall("alice", "fountain pens", k=1)
    assert hits[0].id == ids[0]
    assert hits[0].metadata == {"via": "async"}
    assert [m.id for m in await log.alist("alice")] == ids
    assert await log.athreads("alice") == ["t1"]
    assert [h.id for h in await mem.arecall("alice", "fountain pens", k=1)] == [ids[0]]
    assert await log.aforget("alice", ids=[ids[1]]) == 1
    assert await log.aforget_user("alice") == 1
    assert await mem.store.acount(MESSAGES.name, user="alice") == 0


def test_memory_open_uses_home_and_closes(tmp_path: Path, embeddings: LocalEmbeddings) -> None:
    home = tmp_path / "nb"
    with Memory.open(home=home, embeddings=embeddings) as mem:
        mem.remember("alice", "t1", [HumanMessage("persist me", id="1")])
        assert mem.store.backend == "embedded"
    assert (home / "store").is_dir()
    with pytest.raises(InvalidInputError, match="closed"):
        _ = mem.messages
    mem.close()  # twice is harmless
    with Memory.open(home=home, embeddings=embeddings) as again:
        assert [m.content for m in asyncio.run(again.alist("alice"))] == ["persist me"]


def test_memory_open_defaults_to_amem_home_and_local_embeddings() -> None:
    # The root conftest points AMEM_HOME at a temp dir and clears AMEM_STORE/AMEM_EMBEDDINGS.
    with Memory.open() as mem:
        assert mem.store.backend == "embedded"
        assert getattr(mem.embeddings, "dims", None) == 256
        assert "256-d" in repr(mem)


def test_memory_rejects_wrong_parts(mem: Memory, embeddings: LocalEmbeddings) -> None:
    with pytest.raises(InvalidInputError):
        Memory(object(), embeddings)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Memory(mem.store, object())  # type: ignore[arg-type]


def test_a_sub_api_is_one_line_and_built_once(mem: Memory) -> None:
    class Extended(Memory):
        log_again = SubAPI(MessageLog)

    ext = Extended(mem.store, mem.embeddings)
    assert ext.log_again is ext.log_again
    assert ext.log_again is not ext.messages
    assert ext.log_again.store is mem.store
    assert isinstance(Extended.log_again, SubAPI)
    asyncio.run(ext.log_again.aremember("alice", "t", [HumanMessage("via the extra part", id="1")]))
    assert mem.store.count(MESSAGES.name, user="alice") == 1


def test_long_threads_are_read_page_by_page(mem: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentic_memory.kinds._bound as bound_module

    # The page size of the reads behind threads() and the listing of every thread.
    monkeypatch.setattr(bound_module, "_PAGE", 3)
    first = [HumanMessage(f"message {i}", id=str(i)) for i in range(7)]
    ids = mem.remember("alice", "long", first)
    for t in range(4):
        mem.remember("alice", f"other-{t}", [HumanMessage("x", id="x")])
    more = mem.remember("alice", "long", [*first, HumanMessage("message 7", id="7")])
    assert more[:7] == ids
    assert [m.turn for m in mem.list("alice", thread_id="long")] == list(range(8))
    assert logged(mem, "alice") == 12
    assert mem.threads("alice") == ["long", "other-0", "other-1", "other-2", "other-3"]


def test_memory_open_on_weaviate_ignores_home_and_needs_a_url(
    tmp_path: Path, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEAVIATE_URL", raising=False)
    with pytest.raises(InvalidInputError, match="WEAVIATE_URL"):
        Memory.open(home=tmp_path, backend="weaviate", embeddings=embeddings)
    monkeypatch.setenv("AMEM_STORE", "weaviate")
    with pytest.raises(InvalidInputError, match="WEAVIATE_URL"):
        Memory.open(home=tmp_path, embeddings=embeddings)
    assert not (tmp_path / "store").exists()


def test_chunks_and_chat_messages_are_logged_by_their_role(mem: Memory) -> None:
    from langchain_core.messages import AIMessageChunk, ChatMessage, FunctionMessage

    mem.remember(
        "alice",
        "t1",
        [
            ChatMessage(role="user", content="from a chat message", id="c"),
            AIMessageChunk(content="streamed answer", id="s"),
            ChatMessage(role="system", content="not logged", id="sys"),
            FunctionMessage(name="f", content="not logged either", id="f"),
        ],
    )
    assert [(m.role, m.content) for m in mem.list("alice")] == [
        ("human", "from a chat message"),
        ("ai", "streamed answer"),
    ]
    with pytest.raises(InvalidInputError, match="unknown role"):
        mem.remember("alice", "t1", [ChatMessage(role="wizard", content="x")])
