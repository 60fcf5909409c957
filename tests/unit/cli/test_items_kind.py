"""Plain LangGraph items (``("notes", user)``) are a user's memories like the others.

They were missing from ``amem memories`` and from a user's export: a user exporting their
memories left what LangGraph code kept for them behind. Now ``items`` is a memory kind
(``agentic_memory.kinds.items``): counted, listed, shown, exported with its user, imported,
and forgotten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentic_memory.cli.main import app
from agentic_memory.forget import forget_user
from agentic_memory.kinds.items import ITEMS, TOUCHES
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import export_to_file, import_memories

MODEL = "wordllama-l2-supercat-256"


@pytest.fixture
def items(store: EmbeddedStore, embeddings: LocalEmbeddings) -> AgenticStore:
    agentic = AgenticStore(store, embeddings)
    agentic.put(("notes", "alice"), "trip", {"text": "Alice plans Norway in June"})
    agentic.put(("memories", "alice"), "m1", {"text": "Alice likes tea"}, ttl=60)
    agentic.put(("notes", "bob"), "car", {"text": "Bob's car is blue"})
    agentic.put(("announcements",), "welcome", {"text": "Hello everyone"})
    agentic.get(("memories", "alice"), "m1", refresh_ttl=True)  # a TTL refresh: bookkeeping
    return agentic


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_cli_counts_lists_and_shows_a_users_items(items: AgenticStore) -> None:
    users = {row["user"]: row for row in _cli("memories", "users")}
    assert (users["alice"]["items"], users["bob"]["items"]) == (2, 1)
    listed = _cli("memories", "list", "items", "--user", "alice")
    assert [(r["namespace"], r["key"]) for r in listed] == [
        (["memories", "alice"], "m1"),
        (["notes", "alice"], "trip"),
    ]
    shown = _cli("memories", "show", "items", listed[1]["id"], "--user", "alice")
    assert json.loads(shown["value_json"]) == {"text": "Alice plans Norway in June"}
    # Bob's item is not alice's to show.
    refused = CliRunner().invoke(
        app, ["memories", "show", "items", listed[1]["id"], "--user", "bob"]
    )
    assert refused.exit_code == 1 and "has no item" in refused.stderr


def test_a_users_export_takes_their_items_and_no_one_elses(
    items: AgenticStore, store: EmbeddedStore, tmp_path: Path
) -> None:
    path = tmp_path / "alice.jsonl"
    export_to_file(store, path, users=["alice"], embedding_model=MODEL)
    exported = [line for line in _lines(path)[1:] if line["kind"] == "item"]
    assert sorted(line["properties"]["key"] for line in exported) == ["m1", "trip"]
    assert all(line["user"] is None for line in exported)
    assert TOUCHES.name not in _lines(path)[0]["collections"]  # bookkeeping stays
    # A full export takes every user's, and the items of no one with the shared data.
    full = tmp_path / "all.jsonl"
    export_to_file(store, full, embedding_model=MODEL)
    keys = sorted(line["properties"]["key"] for line in _lines(full)[1:] if line["kind"] == "item")
    assert keys == ["car", "m1", "trip", "welcome"]


def test_a_users_items_come_back_from_their_export(
    items: AgenticStore, store: EmbeddedStore, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "alice.jsonl"
    export_to_file(store, path, users=["alice"], embedding_model=MODEL)
    with EmbeddedStore(tmp_path / "other", dims=embeddings.dims) as target:
        # Alice's items are hers: no --shared needed.
        import_memories(target, path, embeddings=embeddings, embedding_model=MODEL)
        moved = AgenticStore(target, embeddings)
        item = moved.get(("notes", "alice"), "trip")
        assert item is not None and item.value == {"text": "Alice plans Norway in June"}
        assert [i.key for i in moved.search(("notes", "alice"), query="Norway")] == ["trip"]
        assert moved.get(("notes", "bob"), "car") is None


async def test_forgetting_a_user_forgets_their_items(
    items: AgenticStore, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    report = await forget_user(store, "alice", embeddings=embeddings)
    assert report.deleted[("embedded", ITEMS.name)] == 2
    assert await items.aget(("notes", "alice"), "trip") is None
    assert await items.aget(("notes", "bob"), "car") is not None
    assert await items.aget(("announcements",), "welcome") is not None
    assert await store.acount(TOUCHES.name) == 0  # alice's refresh went with her item
