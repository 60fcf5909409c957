"""Forgetting a user leaves no trace: not in any table or column, not in the raw files.

Also: threads found by the owner in their state (a turn that failed before it was logged),
rule text learned only from the user removed from the global rules, bookkeeping rows gone.
"""

from __future__ import annotations

import asyncio
import sqlite3
import zlib
from pathlib import Path
from typing import Any, TypedDict, cast

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph_sdk.client import LangGraphClient

from agentic_memory.forget import checkpoint_user_threads, forget_thread, forget_user
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.persistence import sqlite_checkpointer
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.rules import FORGOTTEN_NOTE, RULES, RuleBook
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore, term_hash
from agentic_memory.store.embedded.sql import decode_body_json
from tests.legacy import write_shared_version
from tests.unit.cli.conftest import T0, Reflection, Seeded, add_messages
from tests.unit.cli.helpers import checkpoint_count, write_checkpoints
from tests.unit.cli.test_forget import _FakeServer, sid

SSN = "987-65-4329"
# What only alice said or what only came from her: none of it may survive her forget.
ALICE_TRACES = ["alice", "Lyon", "vegetarian", SSN, "quokka"]
BOB_TRACES = ["bob", "Oslo", "vegan"]


@pytest.fixture(autouse=True)
def _sqlite_without_secure_delete(monkeypatch: pytest.MonkeyPatch) -> None:
    """Act as a SQLite build whose default is ``secure_delete=OFF`` (the upstream default).

    Debian's build turns it on, which would hide a store that forgot to ask for it.
    Autouse, so it applies before the store and the checkpointer connect.
    """
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.execute("PRAGMA secure_delete = OFF")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)


class _TurnState(TypedDict, total=False):
    messages: list[str]
    owner: str


async def _failed_turn(checkpointer: BaseCheckpointSaver[Any], thread: str, user: str) -> None:
    """A turn that records its owner, then fails before anything is logged or answered.

    Like the agent's first node, ``own`` writes ``owner`` into the thread's state; no run
    metadata is given, so only the state says whose thread it is.
    """

    async def own(state: _TurnState) -> _TurnState:
        return {"owner": user}

    async def fail(state: _TurnState) -> _TurnState:
        raise RuntimeError("the model is unreachable")

    builder: StateGraph[_TurnState, None, _TurnState, _TurnState] = StateGraph(_TurnState)
    builder.add_node("own", own)
    builder.add_node("fail", fail)
    builder.add_edge(START, "own")
    builder.add_edge("own", "fail")
    builder.add_edge("fail", END)
    graph = builder.compile(checkpointer=checkpointer)
    with pytest.raises(RuntimeError, match="unreachable"):
        await graph.ainvoke(
            {"messages": [f"hi, my ssn is {SSN}"]}, {"configurable": {"thread_id": thread}}
        )


def _add_global_rules_from_alice(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    """A global version learned only from alice, holding her text word for word."""
    episode = asyncio.run(
        EpisodicMemory(store, embeddings).astore(
            "alice",
            "alice-t3",
            Reflection(["pets"], "alice has a quokka", "asking about the quokka", "nothing"),
            "user: my pet quokka",
            now=T0,
        )
    )
    book = RuleBook(store, embeddings)
    current = asyncio.run(book.alatest(GLOBAL_SCOPE)).rules
    # Written as before the operator's gate: the screen would refuse the ssn today.
    write_shared_version(
        store,
        embeddings,
        [
            *current,
            {"instruction": f"Remind users that alice's ssn is {SSN}", "rationale": "she asked"},
            {"instruction": "Ask about the quokka", "rationale": "alice liked it"},
        ],
        source_episodes=[episode],
        source_users=["alice"],
        note="rewritten after conversation 1 of thread alice-t3",
    )


def _inflated(raw: bytes) -> bytes:
    """Return ``raw`` followed by every zlib stream found in it, decompressed.

    The store keeps each row's properties deflated (a tag byte 1, then a zlib stream): a grep
    of the raw bytes alone would not see their text, in live rows or in stale free space.
    """
    found = [raw]
    view = memoryview(raw)
    at = raw.find(b"\x01\x78")
    while at >= 0:
        inflater = zlib.decompressobj()
        try:
            found.append(inflater.decompress(view[at + 1 : at + 1 + (1 << 20)]))
        except zlib.error:
            pass
        at = raw.find(b"\x01\x78", at + 1)
    return b"".join(found)


def _sql_values(path: Path) -> list[tuple[str, str, Any]]:
    """Every value of every column of every table of a SQLite file, read through SQL.

    Stored properties (``body``) are given decompressed.
    """
    out: list[tuple[str, str, Any]] = []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables
        for table in tables:
            cursor = conn.execute(f'SELECT * FROM "{table}"')
            columns = [d[0] for d in cursor.description]
            for row in cursor:
                out.extend(
                    (table, col, decode_body_json(value) if col == "body" else value)
                    for col, value in zip(columns, row, strict=True)
                )
    return out


def _needles(words: list[str]) -> list[bytes]:
    """The words as UTF-8, plus the 8-byte hashes the keyword index stores for them."""
    found = [w.encode() for w in words]
    for word in words:
        for token in word.lower().replace("-", " ").split():
            found.append(term_hash(token).to_bytes(8, "little", signed=True))
    return found


def _traces(files: list[Path], words: list[str]) -> list[str]:
    """Where the words (or their term hashes) occur: raw bytes of each file, then SQL values."""
    needles = _needles(words)
    hits: list[str] = []
    for path in files:
        if not path.exists():
            continue
        raw = _inflated(path.read_bytes())
        hits += [f"{path.name}: raw bytes {n!r}" for n in needles if n in raw]
        if path.suffix in (".sqlite", ".sqlite3"):
            for table, column, value in _sql_values(path):
                blob = value if isinstance(value, bytes) else str(value).encode()
                hits += [f"{path.name}: {table}.{column} {n!r}" for n in needles if n in blob]
    return hits


async def test_forgetting_a_user_leaves_no_trace_in_any_store_file(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    await asyncio.to_thread(_add_global_rules_from_alice, store, embeddings)
    cp_path = tmp_path / "amem-home" / "checkpoints.sqlite"
    store_files = [store.path / (DB_FILENAME + s) for s in ("", "-wal", "-shm")]
    cp_files = [cp_path.with_name(cp_path.name + s) for s in ("", "-wal", "-shm")]
    async with sqlite_checkpointer(cp_path) as cp:
        await write_checkpoints(cp, {t: u for u, ts in seeded.threads.items() for t in ts})
        await _failed_turn(cp, "t-untold", "alice")
        # The grep finds what is there: before the forget, alice is everywhere.
        before = _traces(store_files + cp_files, ALICE_TRACES)
        assert any("store.sqlite3" in h for h in before)
        assert any(SSN.encode() in h.encode() or "checkpoints" in h for h in before)

        report = await forget_user(store, "alice", checkpointer=cp, embeddings=embeddings)

        assert "t-untold" in report.threads
        assert report.notes == []
        # With both files still open (as a running server holds them) ...
        assert _traces(store_files + cp_files, ALICE_TRACES) == []
        # ... and bob's memories are all still there, so the grep does see real data.
        assert len(_traces(store_files + cp_files, BOB_TRACES)) > 10
        # The write-ahead logs were checkpointed and emptied.
        assert store_files[1].stat().st_size == 0
        assert cp_files[1].stat().st_size == 0
    store.close()
    assert _traces(store_files + cp_files, ALICE_TRACES) == []


async def test_the_global_rules_lose_the_text_learned_only_from_the_forgotten_user(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    await asyncio.to_thread(_add_global_rules_from_alice, store, embeddings)
    book = RuleBook(store, embeddings)
    before = {v.version: v for v in await book.aversions(GLOBAL_SCOPE)}
    old_vectors = {
        o.properties["version"]: store.get(RULES.name, o.id, user=GLOBAL_SCOPE, include_vector=True)
        for o in store.list_objects(RULES.name, user=GLOBAL_SCOPE)
    }

    await forget_user(store, "alice", embeddings=embeddings)

    after = {v.version: v for v in await book.aversions(GLOBAL_SCOPE)}
    assert sorted(after) == sorted(before)  # no version lost: each still has a rule
    for version in after.values():
        text = version.render()
        assert SSN not in text and "quokka" not in text and "alice" not in text
        assert "alice" not in version.source_users
    # Learned from alice and bob: kept. The starting rules: kept.
    latest = after[max(after)]
    assert [r.instruction for r in latest.rules] == [
        r.instruction
        for r in before[max(before)].rules
        if "alice" not in r.render() and "quokka" not in r.render()
    ]
    assert any(r.instruction == "Keep answers short" for r in latest.rules)
    assert after[1].rules == before[1].rules
    # The rewritten versions were embedded again; their notes no longer name her thread.
    for number in (3, 4):
        stored = next(
            o
            for o in store.list_objects(RULES.name, user=GLOBAL_SCOPE)
            if o.properties["version"] == number
        )
        full = store.get(RULES.name, stored.id, user=GLOBAL_SCOPE, include_vector=True)
        assert full is not None and full.vector != old_vectors[number].vector  # type: ignore[union-attr]
        assert full.properties["note"] == FORGOTTEN_NOTE
        expected = embeddings.embed_query(full.properties["rules_text"])
        assert max(abs(a - b) for a, b in zip(full.vector, expected, strict=True)) < 1e-5


async def test_a_version_learned_only_from_a_forgotten_thread_is_emptied_and_deleted(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    book = RuleBook(store, embeddings)
    episode = await EpisodicMemory(store, embeddings).astore(
        "bob", "bob-t9", Reflection(["x"], "s", "w", "a"), "user: secret plan", now=T0
    )
    await asyncio.to_thread(
        add_messages, store, embeddings, "bob", "bob-t9", ["the secret plan", "ok"]
    )
    await book.apropose(
        "bob",
        [{"instruction": "Mention the secret plan", "rationale": "bob said so"}],
        source_episodes=[episode],
        source_users=["bob"],
    )
    assert [v.version for v in await book.aversions("bob")] == [1, 2, 3]
    report = await forget_thread(store, "bob", "bob-t9", embeddings=embeddings)
    assert [v.version for v in await book.aversions("bob")] == [1, 2]
    assert report.deleted[("embedded", RULES.name)] == 1
    assert all("secret plan" not in v.render() for v in await book.aversions("bob"))


async def test_threads_are_found_by_the_owner_in_their_state(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as cp:
        await _failed_turn(cp, "alice-untold", "alice")  # no metadata, nothing logged
        await _failed_turn(cp, "bob-untold", "bob")
        # Named in alice's memories, but the state says it is bob's: kept.
        await asyncio.to_thread(add_messages, store, embeddings, "alice", "b-own", ["x"])
        await _failed_turn(cp, "b-own", "bob")
        assert await checkpoint_user_threads(cp, "alice") == ["alice-untold"]
        report = await forget_user(store, "alice", checkpointer=cp)
        assert await checkpoint_count(cp, "alice-untold") == 0
        assert await checkpoint_count(cp, "bob-untold") > 0
        assert await checkpoint_count(cp, "b-own") > 0
        assert "alice-untold" in report.threads and "b-own" in report.kept_threads
        # The state's owner also guards forgetting one thread.
        with pytest.raises(InvalidInputError, match="no thread"):
            await forget_thread(store, "alice", "bob-untold", checkpointer=cp)


@pytest.mark.parametrize("stateless_thread", [False, True], ids=["search", "inmem-500"])
async def test_server_threads_are_found_by_the_owner_in_their_values(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings, stateless_thread: bool
) -> None:
    # A server thread her memories name, whose state says bob owns it.
    await asyncio.to_thread(add_messages, store, embeddings, "alice", sid("named"), ["hello", "hi"])
    values: dict[str, Any] = {
        sid("untold"): {"owner": "alice"},
        sid("bobs"): {"owner": "bob"},
        sid("named"): {"owner": "bob"},
    }
    threads: dict[str, dict[str, Any]] = {sid("untold"): {}, sid("bobs"): {}, sid("named"): {}}
    if stateless_thread:
        # A thread created but never run: langgraph dev's values search fails on it.
        threads[sid("never-ran")] = {}
        values[sid("never-ran")] = None
    server = _FakeServer(threads, values=values)
    report = await forget_user(store, "alice", server=cast(LangGraphClient, server))
    assert report.server_threads == [sid("untold")]
    assert report.kept_threads == [sid("named")]
    assert sorted(server.threads.threads) == sorted(set(threads) - {sid("untold")})


async def test_forget_removes_the_bookkeeping_rows_that_name_the_user(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    def scopes() -> set[str]:
        with sqlite3.connect(store.path / DB_FILENAME) as conn:
            return {r[0] for r in conn.execute("SELECT scope FROM amem_generations")}

    assert {"alice", "bob"} <= scopes()
    await forget_user(store, "alice")
    assert "alice" not in scopes() and "bob" in scopes()
    # The store still works for everyone, alice included, afterwards.
    log = MessageLog(store, embeddings)
    await log.aremember("alice", "new", [{"role": "user", "content": "back again"}])
    assert [m.content for m in await log.arecall("alice", "back again")] == ["back again"]


async def test_files_written_before_secure_deletion_are_vacuumed_once(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    cp_path = tmp_path / "old-checkpoints.sqlite"
    # An older version: rows deleted without secure deletion leave their text in free space,
    # and the files carry no mark that says otherwise.
    # Enough long rows to fill whole pages: their deletion frees those pages with the text
    # still in them, whatever the row layout (one short row's page may instead be rebuilt
    # by SQLite's rebalancing, which drops the deleted text and proves nothing).
    story = [f"my old quokka story, part {i}: " + "we walked on and on " * 150 for i in range(12)]
    await asyncio.to_thread(add_messages, store, embeddings, "alice", "alice-old", story)
    async with AsyncSqliteSaver.from_conn_string(str(cp_path)) as cp:
        await cp.setup()
        await _failed_turn(cp, "alice-old", "alice")
    for path, statements in (
        (
            store.path / DB_FILENAME,
            [
                "DELETE FROM \"o_MessageLog\" WHERE user = 'alice' AND amem_props(body) LIKE "
                "'%quokka%'",
                "DELETE FROM amem_meta WHERE key = 'free_space_zeroed'",
            ],
        ),
        (
            cp_path,
            [
                "DELETE FROM checkpoints WHERE thread_id = 'alice-old'",
                "DELETE FROM writes WHERE thread_id = 'alice-old'",
            ],
        ),
    ):
        with sqlite3.connect(path) as conn:
            conn.create_function("amem_props", 1, decode_body_json)
            for statement in statements:
                conn.execute(statement)
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert b"quokka" in _inflated((store.path / DB_FILENAME).read_bytes())
    assert SSN.encode() in cp_path.read_bytes()

    # The application's own checkpointer, opened without this package's settings.
    async with AsyncSqliteSaver.from_conn_string(str(cp_path)) as cp:
        await _failed_turn(cp, "alice-new", "alice")
        report = await forget_user(store, "alice", checkpointer=cp, embeddings=embeddings)
        assert "alice-new" in report.threads
        files = [store.path / DB_FILENAME, cp_path, cp_path.with_name(cp_path.name + "-wal")]
        assert _traces(files, ALICE_TRACES) == []
        # Marked now: the next forget relies on secure deletion alone (no second vacuum).
        await _failed_turn(cp, "alice-again", "alice")
        await forget_user(store, "alice", checkpointer=cp)
        assert _traces(files, ALICE_TRACES) == []


class _UnreachableModel(BaseChatModel):
    """A chat model whose server is down: every call fails."""

    @property
    def _llm_type(self) -> str:
        return "unreachable"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise RuntimeError("the model server is unreachable")

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


async def test_a_real_graph_turn_that_failed_before_it_was_logged_is_forgotten(
    store: EmbeddedStore, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    cp_path = tmp_path / "checkpoints.sqlite"
    async with sqlite_checkpointer(cp_path) as cp:
        app = compile_graph(
            checkpointer=cp, store=store, embeddings=embeddings, chat_model=_UnreachableModel()
        )
        # No run metadata: only the owner the graph records in the state names the user.
        with pytest.raises(Exception, match="unreachable"):
            await app.ainvoke(
                {"messages": [HumanMessage(f"hi, my ssn is {SSN}")]},
                {"configurable": {"thread_id": "t-failed"}},
                context={"user_id": "alice"},
            )
        state = await app.aget_state({"configurable": {"thread_id": "t-failed"}})
        # The failed run was rolled back: the thread reads as it was (empty, unowned)...
        assert state.values.get("owner") is None
        assert SSN not in str(state.values.get("messages"))
        # ...and its history holds nothing of the run either: the checkpoints the run wrote
        # before the rollback are deleted with their writes (checkpoints.adrop_run).
        files = [cp_path, cp_path.with_name(cp_path.name + "-wal")]
        assert _traces(files, [SSN]) == []
        assert (
            MESSAGES.name not in store.collections()
            or store.count(MESSAGES.name, user="alice") == 0
        )

        report = await forget_user(store, "alice", checkpointer=cp)

        # The thread names no one and holds nothing of alice: nothing of hers is left.
        assert report.threads == []
        assert _traces(files, [SSN, "alice"]) == []


async def test_a_refused_first_run_is_forgotten_with_its_user(
    store: EmbeddedStore, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    """A refused run leaves the thread as it was, its history included: none of its input."""
    from agentic_memory.graph.nodes import InputRefusedError

    cp_path = tmp_path / "checkpoints.sqlite"
    async with sqlite_checkpointer(cp_path) as cp:
        app = compile_graph(
            checkpointer=cp, store=store, embeddings=embeddings, chat_model=_UnreachableModel()
        )
        with pytest.raises(InputRefusedError):
            await app.ainvoke(
                {"messages": [HumanMessage(f"my ssn is {SSN} " + "word " * 5000)]},
                {"configurable": {"thread_id": "t-refused"}},
                context={"user_id": "alice"},
            )
        assert (await app.aget_state({"configurable": {"thread_id": "t-refused"}})).values.get(
            "owner"
        ) is None
        # Nothing of the refused input stays, even before forgetting: the thread is empty.
        files = [cp_path, cp_path.with_name(cp_path.name + "-wal")]
        assert _traces(files, [SSN]) == []
        assert await checkpoint_user_threads(cp, "alice") == []
        assert await checkpoint_user_threads(cp, "bob") == []
        report = await forget_user(store, "alice", checkpointer=cp)
        assert report.threads == []
        assert _traces(files, [SSN]) == []
