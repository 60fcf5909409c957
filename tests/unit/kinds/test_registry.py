"""Adding a memory kind is one module plus one registry line.

The toy kind of ``tests/unit/kinds/toy_kind.py`` (bookmarks), added to a test registry and nowhere
else, is served by ``AgenticStore``, forgotten by ``forget_user``, exported and imported by
``transfer`` and listed by ``amem memories``; without the registry line none of that knows
it. The registry itself refuses two kinds that claim the same name, root or collection.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from langgraph.store.base import PutOp
from typer.testing import CliRunner

from agentic_memory.api import Memory
from agentic_memory.cli.main import app, make_app
from agentic_memory.forget import forget_thread, forget_user, user_threads
from agentic_memory.kinds import PER_USER_COLLECTIONS
from agentic_memory.kinds.episodes import EPISODES
from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.kinds.registry import BUILTIN_KINDS
from agentic_memory.kinds.rules import RULES
from agentic_memory.langgraph_store import KIND_ROOTS, AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import (
    TransferError,
    export_to_file,
    import_memories,
    kind_of,
)
from tests.unit.kinds.toy_kind import BOOKMARKS, BookmarksKind

WITH_BOOKMARKS = BUILTIN_KINDS.with_kind(BookmarksKind)
BOOKMARKS_APP = make_app(WITH_BOOKMARKS)
MODEL = "wordllama-l2-supercat-256"
runner = CliRunner()


def _agentic(store: EmbeddedStore, embeddings: LocalEmbeddings) -> AgenticStore:
    return AgenticStore(store, embeddings, kinds=WITH_BOOKMARKS)


async def _seed(amem: AgenticStore) -> None:
    await amem.aput(("bookmarks", "alice"), "docs", {"url": "https://langchain.com/docs"})
    await amem.aput(
        ("bookmarks", "alice"), "paris", {"url": "https://paris.fr", "title": "Visit Paris"}
    )
    await amem.aput(("bookmarks", "bob"), "news", {"url": "https://news.example"})


# -- the registry -----------------------------------------------------------------------------


def test_the_builtin_registry_is_the_store_s_reserved_roots(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    assert BUILTIN_KINDS.names == ("facts", "episodes", "rules", "messages", "knowledge", "items")
    # Plain LangGraph items have no root: they are every namespace no kind claims.
    assert BUILTIN_KINDS.roots == KIND_ROOTS
    assert BUILTIN_KINDS.line_kinds == (
        "fact",
        "episode",
        "rule",
        "message",
        "chunk",
        "source",
        "item",
    )
    assert Memory(store, embeddings).kinds is BUILTIN_KINDS
    assert WITH_BOOKMARKS.roots[-1] == "bookmarks"
    assert Memory(store, embeddings, kinds=WITH_BOOKMARKS).kinds is WITH_BOOKMARKS
    assert AgenticStore(store, embeddings).kinds is BUILTIN_KINDS


def test_the_per_user_collections_come_from_the_registry() -> None:
    assert PER_USER_COLLECTIONS == (FACTS, EPISODES, RULES, MESSAGES)
    assert WITH_BOOKMARKS.per_user_specs == (*PER_USER_COLLECTIONS, BOOKMARKS)


def test_two_kinds_cannot_claim_the_same_name_root_or_collection(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    with pytest.raises(InvalidInputError, match="two memory kinds claim the name 'bookmarks'"):
        WITH_BOOKMARKS.with_kind(BookmarksKind)

    class Shadow(BookmarksKind):
        info = BookmarksKind.info.__class__(
            name="shadow", title="", roots=("facts",), line_kinds=("shadow",)
        )

    with pytest.raises(InvalidInputError, match="namespace root 'facts'"):
        BUILTIN_KINDS.with_kind(Shadow)
    with pytest.raises(InvalidInputError, match="no memory kind 'bookmark'"):
        WITH_BOOKMARKS.get("bookmark")
    with pytest.raises(InvalidInputError, match="KindRegistry"):
        make_app(["facts"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="KindRegistry"):
        AgenticStore(store, embeddings, kinds=("facts",))  # type: ignore[arg-type]


# -- AgenticStore -----------------------------------------------------------------------------


async def test_the_toy_kind_is_served_under_its_namespace(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    amem = _agentic(store, embeddings)
    await _seed(amem)
    got = await amem.aget(("bookmarks", "alice"), "paris")
    assert got is not None
    assert got.value == {"url": "https://paris.fr", "title": "Visit Paris", "source_thread": None}
    created = got.created_at
    # A put replaces the value and keeps when the item was made.
    await amem.aput(("bookmarks", "alice"), "paris", {"url": "https://paris.fr/en"})
    again = await amem.aget(("bookmarks", "alice"), "paris")
    assert again is not None
    assert again.value == {"url": "https://paris.fr/en", "title": None, "source_thread": None}
    assert again.created_at == created and again.updated_at >= created

    listed = await amem.asearch(("bookmarks", "alice"))
    assert [i.key for i in listed] == ["docs", "paris"]
    ranked = await amem.asearch(("bookmarks", "alice"), query="langchain documentation")
    assert ranked[0].key == "docs" and ranked[0].score is not None
    filtered = await amem.asearch(("bookmarks",), filter={"url": "https://news.example"})
    assert [(i.namespace, i.key) for i in filtered] == [(("bookmarks", "bob"), "news")]
    assert await amem.alist_namespaces(prefix=("bookmarks",)) == [
        ("bookmarks", "alice"),
        ("bookmarks", "bob"),
    ]
    # The store's own rows are not generic items: the generic family never sees them.
    assert ("bookmarks", "alice") in await amem.alist_namespaces()

    await amem.adelete(("bookmarks", "alice"), "docs")
    assert await amem.aget(("bookmarks", "alice"), "docs") is None
    assert [i.key for i in await amem.asearch(("bookmarks", "alice"))] == ["paris"]
    # Only the toy kind's collection holds them.
    assert store.count(BOOKMARKS.name, user="alice") == 1


async def test_a_bad_bookmark_is_refused_and_changes_nothing(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    amem = _agentic(store, embeddings)
    await _seed(amem)
    for value, message in (
        ({"title": "no address"}, "needs 'url'"),
        ({"url": 42}, "url must be a str"),
        ({"url": "https://x", "colour": "red"}, "has no field 'colour'"),
    ):
        with pytest.raises(InvalidInputError, match=message):
            await amem.aput(("bookmarks", "alice"), "bad", value)
    with pytest.raises(InvalidInputError, match="reserved for that memory kind"):
        await amem.aput(("bookmarks", "alice", "deeper"), "k", {"url": "https://x"})
    with pytest.raises(InvalidInputError, match="holds only the shared rules"):
        await amem.aput(("bookmarks", "_global"), "k", {"url": "https://x"})
    # A batch with one bad put writes none of it.
    with pytest.raises(InvalidInputError):
        await amem.abatch(
            [
                PutOp(("bookmarks", "alice"), "fine", {"url": "https://fine.example"}),
                PutOp(("bookmarks", "alice"), "bad", {"url": None}),
            ]
        )
    assert [i.key for i in await amem.asearch(("bookmarks", "alice"))] == ["docs", "paris"]


async def test_without_the_registry_line_bookmarks_are_generic_items(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    amem = AgenticStore(store, embeddings)
    assert amem.kinds is BUILTIN_KINDS
    await amem.aput(("bookmarks", "alice"), "docs", {"anything": ["goes"]})
    assert BOOKMARKS.name not in store.collections()


# -- forget -----------------------------------------------------------------------------------


async def test_forget_user_forgets_the_toy_kind(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    amem = _agentic(store, embeddings)
    await _seed(amem)
    await FactStore(store, embeddings).aremember(
        "alice", [{"subject": "city", "value": "Paris", "category": "identity"}]
    )
    report = await forget_user(store, "alice", embeddings=embeddings, kinds=WITH_BOOKMARKS)
    assert report.deleted[(report.store, BOOKMARKS.name)] == 2
    assert await amem.asearch(("bookmarks", "alice")) == []
    assert [i.key for i in await amem.asearch(("bookmarks", "bob"))] == ["news"]
    assert await FactStore(store, embeddings).acurrent("alice") == []


async def test_forget_thread_forgets_what_the_toy_kind_learned_in_it(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    amem = _agentic(store, embeddings)
    await _seed(amem)
    saved = {"url": "https://lyon.fr", "source_thread": "t-trip"}
    await amem.aput(("bookmarks", "alice"), "lyon", saved)
    assert await user_threads(store, "alice", kinds=WITH_BOOKMARKS) == ["t-trip"]
    report = await forget_thread(
        store, "alice", "t-trip", embeddings=embeddings, kinds=WITH_BOOKMARKS
    )
    assert report.deleted[(report.store, BOOKMARKS.name)] == 1
    assert await user_threads(store, "alice", kinds=WITH_BOOKMARKS) == []
    with pytest.raises(InvalidInputError, match="has no thread 't-trip'"):
        await forget_thread(store, "alice", "t-trip", embeddings=embeddings, kinds=WITH_BOOKMARKS)
    keys = sorted(i.key for i in await amem.asearch(("bookmarks", "alice")))
    assert keys == ["docs", "paris"]
    # Without the registry line no kind remembers the thread.
    await amem.aput(("bookmarks", "alice"), "lyon", saved)
    assert await user_threads(store, "alice") == []


# -- transfer ---------------------------------------------------------------------------------


async def _seeded_store(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    await _seed(_agentic(store, embeddings))


def _export(store: EmbeddedStore, path: Path, **kwargs: Any) -> list[dict[str, Any]]:
    export_to_file(store, path, embedding_model=MODEL, **kwargs)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_transfer_exports_and_imports_the_toy_kind(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    before = {
        (o.id, json.dumps(o.properties, sort_keys=True))
        for o in store.list_objects(BOOKMARKS.name, user="alice")
    }
    path = tmp_path / "mem.jsonl"
    assert kind_of(BOOKMARKS.name, WITH_BOOKMARKS) == "bookmark"
    lines = _export(store, path, registry=WITH_BOOKMARKS)
    assert BOOKMARKS.name in lines[0]["collections"]
    assert sorted(ln["user"] for ln in lines[1:] if ln["kind"] == "bookmark") == [
        "alice",
        "alice",
        "bob",
    ]
    store.delete_user(BOOKMARKS.name, "alice")
    summary = import_memories(
        store, path, embeddings=embeddings, embedding_model=MODEL, registry=WITH_BOOKMARKS
    )
    assert summary.by_kind() == {"bookmark": 2}  # bob's were there already, unchanged
    after = {
        (o.id, json.dumps(o.properties, sort_keys=True))
        for o in store.list_objects(BOOKMARKS.name, user="alice")
    }
    assert after == before
    # Into another model's store the kind's own text is embedded again.
    other = EmbeddedStore(tmp_path / "other", dims=embeddings.dims)
    try:
        summary = import_memories(
            other,
            path,
            embeddings=embeddings,
            embedding_model="another-model",
            registry=WITH_BOOKMARKS,
        )
        assert summary.reembedded and summary.by_kind() == {"bookmark": 3}
        docs = other.get(BOOKMARKS.name, lines[1]["id"], user=lines[1]["user"], include_vector=True)
        assert docs is not None and docs.vector is not None
    finally:
        other.close()


def test_transfer_merges_the_toy_kind_by_its_own_rule(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    path = tmp_path / "mem.jsonl"
    other = EmbeddedStore(tmp_path / "other", dims=embeddings.dims)
    try:
        # alice saved the same page under another key in the target store.
        asyncio.run(
            _agentic(other, embeddings).aput(
                ("bookmarks", "alice"), "lc", {"url": "https://langchain.com/docs"}
            )
        )
        _export(store, path, registry=WITH_BOOKMARKS)
        summary = import_memories(
            other, path, embeddings=embeddings, embedding_model=MODEL, registry=WITH_BOOKMARKS
        )
        assert summary.by_kind() == {"bookmark": 2}  # alice's paris and bob's news
        assert (
            "bookmark 'docs' of 'alice': https://langchain.com/docs is saved already as 'lc'"
            in summary.notes
        )
        keys = sorted(
            str(o.properties["key"]) for o in other.list_objects(BOOKMARKS.name, user="alice")
        )
        assert keys == ["lc", "paris"]
    finally:
        other.close()


def test_the_cli_exports_one_kind_of_the_registry(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    asyncio.run(
        FactStore(store, embeddings).aremember(
            "alice", [{"subject": "city", "value": "Paris", "category": "identity"}]
        )
    )
    path = tmp_path / "bookmarks.jsonl"
    done = _json("export", "--all", "--kind", "bookmarks", "-o", str(path), cli=BOOKMARKS_APP)
    assert done["by_kind"] == {"bookmark": 3}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert list(lines[0]["collections"]) == [BOOKMARKS.name]
    both = _json(
        "export",
        "-u",
        "alice",
        "-k",
        "bookmarks",
        "-k",
        "facts",
        "-o",
        str(path),
        cli=BOOKMARKS_APP,
    )
    assert both["by_kind"] == {"bookmark": 2, "fact": 1}
    wrong = runner.invoke(
        app, ["memories", "export", "--all", "--kind", "bookmarks", "-o", str(path)]
    )
    assert wrong.exit_code == 1 and "no memory kind 'bookmarks'" in wrong.stderr


def test_transfer_checks_the_toy_kind_s_lines(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    path = tmp_path / "mem.jsonl"
    lines = _export(store, path, registry=WITH_BOOKMARKS)
    lines[1]["properties"]["url"] = " "
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with pytest.raises(TransferError, match="line 2: bookmark: a bookmark needs a url"):
        import_memories(
            store, path, embeddings=embeddings, embedding_model=MODEL, registry=WITH_BOOKMARKS
        )


def test_without_the_registry_line_transfer_skips_and_refuses_the_toy_kind(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    path = tmp_path / "mem.jsonl"
    _export(store, path, registry=WITH_BOOKMARKS)
    assert kind_of(BOOKMARKS.name) is None
    plain = tmp_path / "plain.jsonl"
    assert not any(ln["kind"] == "bookmark" for ln in _export(store, plain))
    with pytest.raises(TransferError, match="'Bookmark' is not an agent memory collection"):
        import_memories(store, path, embeddings=embeddings, embedding_model=MODEL)


# -- amem memories ----------------------------------------------------------------------------


def _json(*args: str, cli: typer.Typer = app) -> Any:
    result = runner.invoke(cli, ["memories", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_cli_lists_the_toy_kind(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    asyncio.run(_seeded_store(store, embeddings))
    assert [k["kind"] for k in _json("kinds", cli=BOOKMARKS_APP)][-1] == "bookmarks"
    users = _json("users", cli=BOOKMARKS_APP)
    assert [(u["user"], u["bookmarks"]) for u in users] == [("alice", 2), ("bob", 1)]
    rows = _json("list", "bookmarks", "--user", "alice", cli=BOOKMARKS_APP)
    assert sorted((r["key"], r["url"]) for r in rows) == [
        ("docs", "https://langchain.com/docs"),
        ("paris", "https://paris.fr"),
    ]
    table = runner.invoke(BOOKMARKS_APP, ["memories", "list", "bookmarks", "--user", "alice"])
    assert table.exit_code == 0 and "Visit Paris" in table.stdout
    paris = next(r for r in rows if r["key"] == "paris")
    shown = _json("show", "bookmarks", paris["id"], "--user", "alice", cli=BOOKMARKS_APP)
    assert shown == paris
    missing = runner.invoke(
        BOOKMARKS_APP, ["memories", "show", "bookmarks", paris["id"], "-u", "bob"]
    )
    assert missing.exit_code == 1 and f"'bob' has no bookmark '{paris['id']}'" in missing.stderr
    result = runner.invoke(app, ["memories", "list", "bookmarks", "--user", "alice"])
    assert result.exit_code == 1 and "no memory kind 'bookmarks'" in result.stderr
    assert _json("users") == []  # only bookmarks are stored: no built-in kind counts them
