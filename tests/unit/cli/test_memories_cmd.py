"""`amem memories …`: every inspector command, through typer's CliRunner on the real store."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from agentic_memory.cli import forget as forget_cli
from agentic_memory.cli.main import app
from agentic_memory.graph.persistence import default_sqlite_path, sqlite_checkpointer
from agentic_memory.kinds import PER_USER_COLLECTIONS
from agentic_memory.kinds.rules import RULES
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import GLOBAL_SCOPE
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.cli.conftest import Seeded, add_messages
from tests.unit.cli.helpers import (
    assert_same,
    checkpoint_count,
    snapshot,
    without_shared_rules,
    write_checkpoints,
)
from tests.unit.cli.test_forget import _FakeServer, sid

runner = CliRunner()


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # Table cells would wrap at rich's default 80 columns and split the words looked for.
    monkeypatch.setenv("COLUMNS", "240")


def amem(*args: str) -> Result:
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> Any:
    result = amem(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def fails(*args: str, message: str) -> None:
    result = amem(*args)
    assert result.exit_code == 1, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


# -- episodes ---------------------------------------------------------------------------------


def test_episodes_list_search_show(seeded: Seeded) -> None:
    listed = ok_json("memories", "episodes", "list", "--user", "alice")
    assert [e["id"] for e in listed] == list(reversed(seeded.episodes["alice"]))  # newest first
    found = ok_json(
        "memories", "episodes", "search", "moved to Paris", "--user", "alice", "--k", "1"
    )
    assert [e["id"] for e in found] == [seeded.episodes["alice"][1]]
    assert 0 <= found[0]["score"] <= 1
    shown = ok_json("memories", "episodes", "show", seeded.episodes["alice"][0], "--user", "alice")
    assert shown["conversation"] == "user: I live in Lyon"
    human = amem("memories", "episodes", "list", "--user", "alice")
    assert "Episodes of alice" in human.stdout and "moved to Paris" in human.stdout


def test_episodes_errors(seeded: Seeded) -> None:
    fails("memories", "episodes", "list", message="needs --user")
    fails(
        "memories",
        "episodes",
        "show",
        seeded.episodes["bob"][0],
        "--user",
        "alice",
        message="has no episode",
    )
    fails("memories", "episodes", "list", "--user", "_global", message="reserved")


@pytest.mark.parametrize(
    "args",
    [
        ["memories", "facts", "list", "--user", "al\udcffice"],
        ["memories", "messages", "list", "--user", "alice", "--thread", "t\udcff"],
        ["memories", "messages", "search", "caf\udce9", "--user", "alice"],
        ["memories", "facts", "list", "--user", "alice", "--subject", "di\udcffet"],
        ["memories", "forget", "--user", "alice", "--subject", "\udcff"],
        ["memories", "forget", "--user", "alice", "--thread", "t\udcff"],
        ["memories", "episodes", "search", "\udcff", "--user", "alice"],
    ],
    ids=["user", "thread", "query", "subject", "forget-subject", "forget-thread", "episodes"],
)
def test_arguments_that_are_not_valid_unicode_get_a_clear_error(
    seeded: Seeded, store: EmbeddedStore, args: list[str]
) -> None:
    # A non-UTF-8 byte on a Linux command line reaches Python as a lone surrogate.
    before = snapshot(store, vectors=False)
    fails(*args, message="is not valid Unicode text")
    assert snapshot(store, vectors=False) == before


# -- facts ------------------------------------------------------------------------------------


def test_facts_current_and_history(seeded: Seeded) -> None:
    current = ok_json("memories", "facts", "list", "--user", "alice")
    assert {(f["subject"], f["value"]) for f in current} == {
        ("diet", "vegetarian"),
        ("home city", "Paris"),
    }
    history = ok_json(
        "memories", "facts", "list", "--user", "alice", "--history", "--subject", "Home City"
    )
    assert [(f["value"], f["current"]) for f in history] == [("Lyon", False), ("Paris", True)]
    assert history[0]["superseded_by"] == history[1]["id"]
    assert history[0]["valid_to"] == history[1]["valid_from"]
    human = amem("memories", "facts", "list", "--user", "alice", "--history")
    assert "Facts of alice (history)" in human.stdout and "Lyon" in human.stdout
    assert ok_json("memories", "facts", "list", "--user", "carol") == []


# -- messages ---------------------------------------------------------------------------------


def test_messages_list_and_search(seeded: Seeded) -> None:
    assert len(ok_json("memories", "messages", "list", "--user", "alice")) == 6
    in_thread = ok_json("memories", "messages", "list", "--user", "alice", "--thread", "alice-t2")
    assert [m["content"] for m in in_thread] == ["I moved to Paris", "Congratulations."]
    found = ok_json("memories", "messages", "search", "Paris", "--user", "alice", "--k", "1")
    assert found[0]["content"] == "I moved to Paris"
    fails("memories", "messages", "search", " ", "--user", "alice", message="query")


# -- rules ------------------------------------------------------------------------------------


def test_rules_list_show_diff_rollback(seeded: Seeded) -> None:
    assert [v["version"] for v in ok_json("memories", "rules", "list", "--user", "alice")] == [1, 2]
    versions = ok_json("memories", "rules", "list", "--global")
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert versions[2]["source_users"] == ["alice"]
    shown = ok_json("memories", "rules", "show", "2", "--global")
    assert [r["instruction"] for r in shown["rules"]] == ["Keep answers short"]
    diff = ok_json("memories", "rules", "diff", "2", "3", "--global")
    assert diff["added"] == ["Congratulate on news – alice liked it"]
    assert diff["removed"] == []
    rolled = ok_json("memories", "rules", "rollback", "2", "--global")
    assert rolled["version"] == 4 and rolled["rules"] == shown["rules"]
    assert ok_json("memories", "rules", "show", "--global")["version"] == 4
    human = amem("memories", "rules", "diff", "3", "4", "--global")
    assert "- Congratulate on news" in human.stdout
    fails("memories", "rules", "rollback", "2", "--global", message="already equals the latest")
    fails("memories", "rules", "list", message="--user USER or --global")
    fails("memories", "rules", "list", "--user", "alice", "--global", message="not both")
    fails("memories", "rules", "show", "9", "--user", "alice", message="no version 9")


# -- knowledge bases --------------------------------------------------------------------------


def test_kb_list_sources_delete(seeded: Seeded) -> None:
    kbs = ok_json("memories", "kb", "list")
    assert kbs == [{"name": "manuals", "sources": 1, "chunks": 1, "pages": 1}]
    sources = ok_json("memories", "kb", "sources", "manuals")
    assert [s["source"] for s in sources] == [seeded.kb_source]
    deleted = ok_json("memories", "kb", "delete-source", "manuals", seeded.kb_source)
    assert deleted["chunks_deleted"] == 1
    assert ok_json("memories", "kb", "sources", "manuals") == []
    fails("memories", "kb", "sources", "nope", message="no knowledge base 'nope'")
    fails("memories", "kb", "delete-source", "manuals", "/no/such.pdf", message="no source")


# -- export / import --------------------------------------------------------------------------


def test_export_import_round_trip_through_the_cli(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    everything = snapshot(store)
    path = tmp_path / "mem.jsonl"
    exported = ok_json("memories", "export", "--all", "-o", str(path))
    assert exported["total"] == len(everything)
    assert exported["by_kind"]["source"] == 2
    for spec in PER_USER_COLLECTIONS:
        for user in store.users(spec.name):
            if user != GLOBAL_SCOPE:
                store.delete_user(spec.name, user)
    for name in store.collections():
        store.drop_collection(name)
    # Without --shared, the shared rules and the knowledge base are refused (nothing written).
    fails("memories", "import", str(path), message="--shared")
    assert store.collections() == []
    imported = ok_json("memories", "import", "--shared", str(path))
    rest = without_shared_rules(everything)
    assert imported["total"] == len(rest)
    assert imported["reembedded"] is False
    assert_same(without_shared_rules(snapshot(store)), rest)
    # The shared rules are a proposal for an operator, approved with the CLI.
    (pending,) = ok_json("memories", "rules", "review")
    assert pending["id"] == imported["proposal"] and pending["origin"] == "import"
    assert "starting" in ok_json("memories", "rules", "show", "--global")["note"]
    ok_json("memories", "rules", "approve", pending["id"], "--operator", "olga")
    shown = ok_json("memories", "rules", "show", "--global")
    assert [r["instruction"] for r in shown["rules"]] == [
        "Keep answers short",
        "Congratulate on news",
    ]
    human = amem("memories", "import", "--shared", str(path))
    assert human.exit_code == 0 and "Imported from" in human.stdout
    assert "equal the store's latest version" in " ".join(human.stderr.split())


def test_export_needs_one_scope(seeded: Seeded, tmp_path: Path) -> None:
    fails("memories", "export", "-o", str(tmp_path / "x.jsonl"), message="--user USER")
    fails(
        "memories",
        "export",
        "--all",
        "--user",
        "alice",
        "-o",
        str(tmp_path / "x.jsonl"),
        message="--all",
    )
    fails("memories", "import", str(tmp_path / "missing.jsonl"), message="no such file")
    assert not (tmp_path / "x.jsonl").exists()


def test_repair_on_the_embedded_store_changes_nothing(store: EmbeddedStore, seeded: Seeded) -> None:
    # Its batches are SQLite transactions: nothing is ever held unindexed.
    before = snapshot(store)
    assert ok_json("memories", "repair") == {"backend": "embedded", "rewritten": {}}
    assert_same(before, snapshot(store))


# -- forget -----------------------------------------------------------------------------------


def _checkpoints(seeded: Seeded) -> None:
    async def write() -> None:
        async with sqlite_checkpointer(default_sqlite_path()) as cp:
            await write_checkpoints(cp, {t: u for u, ts in seeded.threads.items() for t in ts})

    asyncio.run(write())


def _count_checkpoints(thread: str) -> int:
    async def count() -> int:
        async with sqlite_checkpointer(default_sqlite_path()) as cp:
            return await checkpoint_count(cp, thread)

    return asyncio.run(count())


def test_forget_user_through_the_cli_is_complete(store: EmbeddedStore, seeded: Seeded) -> None:
    _checkpoints(seeded)
    bob = snapshot(store, users={"bob"})
    report = ok_json("memories", "forget", "--user", "alice", "--all", "--yes")
    rows = {(r["store"], r["collection"]): r for r in report["deleted"]}
    assert rows[("embedded", "EpisodicMemory")]["deleted"] == 2
    assert rows[("embedded", "UserFact")]["deleted"] == 3
    assert rows[("embedded", "MessageLog")]["deleted"] == 6
    assert rows[("embedded", "ProceduralRules")] == {
        "store": "embedded",
        "collection": "ProceduralRules",
        "deleted": 2,
        "scrubbed": 2,
    }
    assert rows[("checkpointer", "checkpoints")]["deleted"] > 0
    assert report["threads"] == ["alice-t1", "alice-t2"]
    # Store by store: nothing of alice is left anywhere.
    for spec in PER_USER_COLLECTIONS:
        assert store.count(spec.name, user="alice") == 0
    for version in store.list_objects(RULES.name, user=GLOBAL_SCOPE):
        assert "alice" not in version.properties["source_users"]
        assert not set(version.properties["source_episodes"]) & set(seeded.episodes["alice"])
    assert all(_count_checkpoints(t) == 0 for t in seeded.threads["alice"])
    assert all(_count_checkpoints(t) > 0 for t in seeded.threads["bob"])
    assert_same(snapshot(store, users={"bob"}), bob)


def test_forget_human_table(seeded: Seeded) -> None:
    result = amem("memories", "forget", "--user", "bob", "--subject", "diet")
    assert result.exit_code == 0, result.output
    assert "Forgotten for bob" in result.stdout
    assert "UserFact" in result.stdout and "total" in result.stdout
    paris = next(
        f for f in ok_json("memories", "facts", "list", "--user", "bob") if f["value"] == "Paris"
    )
    report = ok_json("memories", "forget", "--user", "bob", "--fact", paris["id"])
    assert report["total_deleted"] == 1
    current = ok_json("memories", "facts", "list", "--user", "bob")
    assert [(f["subject"], f["value"]) for f in current] == [("home city", "Oslo")]


def test_forget_thread_and_episode_through_the_cli(store: EmbeddedStore, seeded: Seeded) -> None:
    _checkpoints(seeded)
    report = ok_json("memories", "forget", "--user", "alice", "--thread", "alice-t2")
    assert report["threads"] == ["alice-t2"]
    assert _count_checkpoints("alice-t2") == 0 and _count_checkpoints("alice-t1") > 0
    current = ok_json("memories", "facts", "list", "--user", "alice")
    assert {f["subject"]: f["value"] for f in current}["home city"] == "Lyon"
    report = ok_json(
        "memories", "forget", "--user", "alice", "--episode", seeded.episodes["alice"][0]
    )
    # The episode, and alice's rule version learned only from it (its one rule is gone).
    deleted = {row["collection"]: row["deleted"] for row in report["deleted"]}
    assert deleted == {"EpisodicMemory": 1, "ProceduralRules": 1}
    assert ok_json("memories", "episodes", "list", "--user", "alice") == []


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the test connects


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--all"], "needs --yes"),
        ([], "exactly one of"),
        (["--subject", "diet", "--thread", "t"], "exactly one of"),
        (["--subject", "astrology"], "no fact about 'astrology'"),
        (["--thread", "nope"], "no thread 'nope'"),
        (["--subject", "diet", "--server", "http://127.0.0.1:9"], "goes with --thread or --all"),
        (["--all", "--yes", "--server", "ftp://host"], "must be an http(s) URL"),
        (
            ["--all", "--yes", "--server", f"http://127.0.0.1:{_closed_port()}"],
            "(nothing was deleted)",
        ),
    ],
)
def test_forget_refuses_and_changes_nothing(
    store: EmbeddedStore, seeded: Seeded, args: list[str], message: str
) -> None:
    before = snapshot(store, vectors=False)
    fails("memories", "forget", "--user", "alice", *args, message=message)
    assert snapshot(store, vectors=False) == before


@pytest.mark.parametrize("status", [500, 403])
def test_forget_all_finishes_locally_when_the_server_fails(
    store: EmbeddedStore,
    seeded: Seeded,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
) -> None:
    _checkpoints(seeded)  # her `amem chat` threads (t-…-like ids the server refuses)
    add_messages(store, embeddings, "alice", sid("alice-srv"), ["hello", "hi"])
    server = _FakeServer({sid("alice-srv"): {"user_id": "alice"}})
    server.threads.fail[sid("alice-srv")] = status
    monkeypatch.setattr(forget_cli, "get_client", lambda url: server)
    url = "http://127.0.0.1:9"
    result = amem("memories", "forget", "--user", "alice", "--all", "--yes", "--server", url)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    # The report is printed, then one error naming what the server left.
    assert "Forgotten for alice" in result.stdout
    error = " ".join(result.stderr.split())
    assert f"1 thread of 'alice' is still on the server ({sid('alice-srv')})" in error
    assert "The local memories are forgotten." in error
    if status == 500:
        assert f"forget --user alice --all --yes --server {url}` deletes them" in error
    else:
        assert "refused" in error and "run" not in error.partition("refused")[2]
    for spec in PER_USER_COLLECTIONS:
        assert store.count(spec.name, user="alice") == 0
    assert all(_count_checkpoints(t) == 0 for t in seeded.threads["alice"])
    # Once the server works, the same command finishes (it is not a loop).
    server.threads.fail.clear()
    report = ok_json("memories", "forget", "--user", "alice", "--all", "--yes", "--server", url)
    assert report["server_threads"] == [sid("alice-srv")] and report["server_error"] is None
    assert server.threads.threads == {}


def test_forget_needs_a_user(seeded: Seeded) -> None:
    fails("memories", "forget", "--all", "--yes", message="needs --user")


def test_users_lists_who_has_memories(seeded: Seeded) -> None:
    users = ok_json("memories", "users")
    assert users == [
        {"user": "alice", "episodes": 2, "facts": 3, "messages": 6, "rule_versions": 2, "items": 0},
        {"user": "bob", "episodes": 2, "facts": 3, "messages": 6, "rule_versions": 2, "items": 0},
    ]
    ok_json("memories", "forget", "--user", "alice", "--all", "--yes")
    assert [u["user"] for u in ok_json("memories", "users")] == ["bob"]
