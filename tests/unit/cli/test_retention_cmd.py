"""`amem memories retention | purge | messages important | episodes important` on the real store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from agentic_memory.cli.main import app
from agentic_memory.kinds.episodes import EPISODES, EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.kinds.rules import RULES
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.cli.conftest import Reflection, Seeded

runner = CliRunner()
NO_AUTO_PURGE = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=None)


@pytest.fixture(autouse=True)
def _policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    monkeypatch.setenv("AMEM_MESSAGE_RETENTION_DAYS", "60")
    monkeypatch.setenv("AMEM_MAX_MESSAGES", "off")


def amem(*args: str) -> Result:
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> Any:
    result = amem(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _old_turns(store: EmbeddedStore, embeddings: LocalEmbeddings, user: str) -> None:
    """Two old exchanges (past the 60 days) and a recent one; the CLI's clock is the real one."""
    log = MessageLog(store, embeddings, retention=NO_AUTO_PURGE)
    now = datetime.now(UTC)
    for thread, days in (("old-1", 100), ("old-2", 90), ("recent", 5)):
        asyncio.run(
            log.aremember(
                user,
                thread,
                [
                    {"role": "user", "content": f"{thread} question"},
                    {"role": "assistant", "content": f"{thread} answer"},
                ],
                now=now - timedelta(days=days),
            )
        )


def _snapshot(store: EmbeddedStore, collection: str) -> dict[str, Any]:
    return {
        o.id: o.properties
        for user in store.users(collection)
        for o in store.iterate(collection, user=user)
    }


def test_retention_shows_what_expires_when(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    _old_turns(store, embeddings, "alice")
    status = ok_json("memories", "retention", "--user", "alice", "--next", "2")
    assert status["policy"]["message_days"] == 60.0 and status["policy"]["max_messages"] is None
    messages = status["messages"]
    assert messages["expired"] == 4  # the two old exchanges; the seeded turns are from T0
    # The oldest unimportant turns first (a question and its answer share an instant).
    assert {m["content"] for m in messages["next"]} == {"old-1 question", "old-1 answer"}
    first = messages["next"][0]
    logged = datetime.fromisoformat(first["created_at"])
    assert datetime.fromisoformat(first["expires_at"]) == logged + timedelta(days=60)
    # Every stored fact version counts (history included): none of them is ever purged.
    assert (
        status["facts"]
        == store.count("UserFact", user="alice")
        > len(asyncio.run(FactStore(store, embeddings).acurrent("alice")))
    )
    assert status["never_purged"] == ["UserFact", "ProceduralRules"]
    everyone = ok_json("memories", "retention")
    assert {u["user"] for u in everyone["users"]} >= {"alice", "bob"}
    # The policy is said once: at the top, not again for every user.
    assert everyone["policy"]["message_days"] == 60.0
    assert json.dumps(everyone).count('"message_days"') == 1
    human = amem("memories", "retention", "--user", "alice")
    assert human.exit_code == 0, human.output
    assert human.stdout.count("expire 60 days after they were logged unless important") == 1
    overview = amem("memories", "retention")
    assert overview.stdout.count("expire 60 days after they were logged unless important") == 1
    assert "old-1 question" in human.stdout
    listed = amem("memories", "messages", "list", "--user", "alice", "--thread", "old-1")
    assert "expires" in listed.stdout and logged.strftime("%Y-") in listed.stdout


def test_marked_turns_survive_the_purge_and_facts_and_rules_are_untouched(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    _old_turns(store, embeddings, "alice")
    _old_turns(store, embeddings, "bob")
    marked = ok_json(
        "memories", "messages", "important", "--user", "alice", "--thread", "old-1", "--turn", "0"
    )
    assert [(m["content"], m["important_by"], m["expires_at"]) for m in marked] == [
        ("old-1 question", "user", None)
    ]
    facts, rules = _snapshot(store, "UserFact"), _snapshot(store, RULES.name)
    bob = {o.id: o.properties for o in store.iterate(MESSAGES.name, user="bob")}

    dry = ok_json("memories", "purge", "--user", "alice", "--dry-run")
    assert [r["messages"]["expired"] for r in dry] == [3]
    assert store.count(MESSAGES.name, user="alice") > 3  # a dry run deletes nothing

    done = ok_json("memories", "purge", "--user", "alice", "--yes")
    assert [(r["user"], r["messages"]["expired"]) for r in done] == [("alice", 3)]
    left = {o.properties["content"] for o in store.iterate(MESSAGES.name, user="alice")}
    assert "old-1 question" in left and not left & {"old-1 answer", "old-2 question"}
    assert "recent question" in left
    assert _snapshot(store, "UserFact") == facts and _snapshot(store, RULES.name) == rules
    assert {o.id: o.properties for o in store.iterate(MESSAGES.name, user="bob")} == bob

    undo = amem(
        "memories", "messages", "important", "--unmark", "--user", "alice", "--thread", "old-1"
    )
    assert undo.exit_code == 0, undo.output
    ok_json("memories", "purge", "--user", "alice", "--yes")
    left = {o.properties["content"] for o in store.iterate(MESSAGES.name, user="alice")}
    assert "old-1 question" not in left


def test_an_episode_cap_prunes_the_least_important_and_names_them(
    store: EmbeddedStore,
    seeded: Seeded,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    episodes = EpisodicMemory(store, embeddings)
    ids = seeded.episodes["alice"]
    extra = asyncio.run(
        episodes.astore(
            "alice", "alice-t9", Reflection(["x"], "A minor chat.", "", "", 0.05), "user: hi"
        )
    )
    monkeypatch.setenv("AMEM_MAX_EPISODES", "1")
    marked = ok_json("memories", "episodes", "important", ids[0], "--user", "alice")
    assert [e["id"] for e in marked] == [ids[0]]
    done = ok_json("memories", "purge", "--user", "alice", "--yes")
    pruned = {e["id"] for e in done[0]["episodes"]["pruned"]}
    assert ids[0] not in pruned and extra in pruned
    assert {o.id for o in store.iterate(EPISODES.name, user="alice")} == {ids[0]}
    # Important ones alone over the cap stay, and the report says so.
    assert done[0]["episodes"]["important_over_cap"] == 0
    assert store.count(EPISODES.name, user="bob") == len(seeded.episodes["bob"])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AMEM_MESSAGE_RETENTION_DAYS", "a month"),
        ("AMEM_MAX_MESSAGES", "0"),
        ("AMEM_MAX_EPISODES", "lots"),
        ("AMEM_PURGE_INTERVAL_MINUTES", "-1"),
    ],
)
def test_a_bad_setting_is_a_clear_error_and_changes_nothing(
    store: EmbeddedStore,
    seeded: Seeded,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
) -> None:
    _old_turns(store, embeddings, "alice")
    before = _snapshot(store, MESSAGES.name)
    monkeypatch.setenv(name, value)
    for args in (("memories", "purge", "--user", "alice", "--yes"), ("memories", "retention")):
        result = amem(*args)
        assert result.exit_code == 1, result.output
        assert name in result.stderr and "Traceback" not in result.output
    assert _snapshot(store, MESSAGES.name) == before


def test_marking_errors(store: EmbeddedStore, seeded: Seeded) -> None:
    for args, message in (
        (("--user", "alice", "--thread", "nope"), "no logged turn in thread 'nope'"),
        (("--user", "alice", "--turn", "0"), "--turn"),
        (("--user", "alice", "00000000-0000-0000-0000-000000000000"), "no logged message"),
    ):
        result = amem("memories", "messages", "important", *args)
        assert result.exit_code != 0, result.output
        assert message in result.output
        assert "Traceback" not in result.output
    # bob's turn is not alice's to mark.
    bob_turn = next(iter(store.iterate(MESSAGES.name, user="bob")))
    result = amem("memories", "messages", "important", "--user", "alice", bob_turn.id)
    assert result.exit_code == 1 and "no logged message" in result.stderr
    after = store.get(MESSAGES.name, bob_turn.id, user="bob")
    assert after is not None and not after.properties.get("important")
