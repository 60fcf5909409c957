"""Ingestion through a server reads only the documents folders the operator allows.

Issue 18: any user made the server read its own files (a password file, ``/etc/``) into the
shared ``default`` knowledge base and read them back. Now a server reads no path unless the
operator sets ``AMEM_INGEST_DIRS``, checks every path after symlinks and ``..`` (and again on
the file it opened), answers the same for everything outside, and writes the caller's own
knowledge base; a shared one is an operator's.
"""

from __future__ import annotations

import base64
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.forget import forget_user
from agentic_memory.ingest import readers
from agentic_memory.ingest.graph import graph as ingest_graph
from agentic_memory.ingest.inputs import Upload, ingest_roots
from agentic_memory.ingest.pipeline import ingest_paths, ingest_uploads
from agentic_memory.ingest.readers import OUTSIDE_FOLDERS, IngestFileError, read_bytes
from agentic_memory.kinds.knowledge import (
    list_knowledge_bases,
    list_sources,
    search_knowledge,
)
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import export_to_file, import_memories

SECRET = "The vault password is hunter2-quokka."


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A documents folder the server may read, and a private folder next to it."""
    docs, private = tmp_path / "docs", tmp_path / "private"
    docs.mkdir()
    private.mkdir()
    (docs / "manual.md").write_text("# Pump\n\nThe pump needs oil every 200 hours.\n")
    (private / "secret.md").write_text(f"# Secret\n\n{SECRET}\n")
    return docs, private


def ingest_confined(
    store: EmbeddedStore, embeddings: LocalEmbeddings, docs: Path, paths: list[str]
) -> dict[str, Any]:
    report = ingest_paths(
        paths, kb="default", owner="bob", store=store, embeddings=embeddings, roots=[docs]
    )
    return report.to_dict()


def errors(report: dict[str, Any]) -> list[str]:
    return [str(f["error"]) for f in report["files"] if f["status"] == "failed"]


def nothing_secret(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    for owner in (None, "bob"):
        for kb in list_knowledge_bases(store, owner):
            hits = search_knowledge(store, embeddings, kb, "vault password", k=10, owner=owner)
            assert all("hunter2" not in h.text for h in hits)


@pytest.mark.parametrize(
    "given",
    [
        "{private}/secret.md",  # absolute, outside
        "{private}/missing.md",  # absolute, outside, not even there: the same answer
        "../private/secret.md",  # relative, up and out
        "{docs}/../private/secret.md",
        "/proc/self/environ",
        "/proc/self/cwd/secret.md",
        "/etc/passwd",
        "~/secret.md",
    ],
)
def test_a_path_outside_the_folders_is_refused_with_one_answer(
    store: EmbeddedStore, embeddings: LocalEmbeddings, folders: tuple[Path, Path], given: str
) -> None:
    docs, private = folders
    path = given.format(docs=docs, private=private)
    report = ingest_confined(store, embeddings, docs, [path])
    assert report["totals"]["written"] == 0
    (error,) = errors(report)
    assert error in (OUTSIDE_FOLDERS, "no such file or directory")
    if path.startswith("/"):
        assert error == OUTSIDE_FOLDERS  # never "no such file": that would say what exists
    nothing_secret(store, embeddings)


def test_a_symlink_inside_the_folder_to_a_file_outside_is_refused(
    store: EmbeddedStore, embeddings: LocalEmbeddings, folders: tuple[Path, Path]
) -> None:
    docs, private = folders
    (docs / "link.md").symlink_to(private / "secret.md")
    (docs / "dirlink").symlink_to(private, target_is_directory=True)
    report = ingest_confined(store, embeddings, docs, [str(docs)])
    assert report["totals"]["written"] == 1  # manual.md; the linked folder is not entered
    assert errors(report) == [OUTSIDE_FOLDERS]
    for given in ("link.md", "dirlink", "dirlink/secret.md", str(docs / "dirlink" / "*.md")):
        assert errors(ingest_confined(store, embeddings, docs, [given]))
    nothing_secret(store, embeddings)


def test_a_pattern_reaching_outside_matches_nothing_and_names_nothing(
    store: EmbeddedStore, embeddings: LocalEmbeddings, folders: tuple[Path, Path]
) -> None:
    docs, private = folders
    report = ingest_confined(store, embeddings, docs, [f"{private}/*.md", "../private/*.md"])
    assert errors(report) == ["no files match this pattern"] * 2
    assert "secret" not in str(report)
    inside = ingest_confined(store, embeddings, docs, ["*.md"])
    assert inside["totals"]["written"] == 1


def test_a_fifo_in_the_folder_is_refused_without_waiting(
    store: EmbeddedStore, embeddings: LocalEmbeddings, folders: tuple[Path, Path]
) -> None:
    docs, _ = folders
    os.mkfifo(docs / "pipe.md")
    done: list[dict[str, Any]] = []
    worker = threading.Thread(
        target=lambda: done.append(ingest_confined(store, embeddings, docs, ["pipe.md"])),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=30)
    assert done, "reading a FIFO blocked"
    assert errors(done[0]) == [
        "not a regular file (a named pipe (FIFO)); only regular files are read"
    ]


def test_the_opened_file_is_checked_again(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, private = folders
    (docs / "swapped.md").symlink_to(private / "secret.md")
    with pytest.raises(IngestFileError, match="not inside the documents folders"):
        read_bytes(docs / "swapped.md", within=[docs])
    # A check by path that was passed before the swap: the descriptor still tells the truth.
    monkeypatch.setattr(readers.os.path, "realpath", lambda p: str(docs / "manual.md"))
    with pytest.raises(IngestFileError, match="not inside the documents folders"):
        read_bytes(docs / "swapped.md", within=[docs])
    assert read_bytes(docs / "manual.md", within=[docs]).startswith(b"# Pump")


def test_the_folders_setting_is_checked(tmp_path: Path) -> None:
    assert ingest_roots("") == []
    assert ingest_roots(f"{tmp_path}{os.pathsep}") == [tmp_path.resolve()]
    for bad in ("relative/docs", str(tmp_path / "missing")):
        with pytest.raises(ValueError, match="AMEM_INGEST_DIRS"):
            ingest_roots(bad)


# -- the ingest graph -------------------------------------------------------------------------


async def run_graph(payload: dict[str, Any], *, user: str = "", **configurable: Any) -> Any:
    config = {"configurable": configurable}
    return await ingest_graph.ainvoke(payload, config, context={"user_id": user})


async def test_without_folders_the_graph_reads_no_path(folders: tuple[Path, Path]) -> None:
    _, private = folders
    with pytest.raises(InvalidInputError, match="reads no paths"):
        await run_graph({"paths": [str(private / "secret.md")]}, user="bob")


async def test_the_graph_writes_the_callers_own_knowledge_base(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, embeddings: LocalEmbeddings
) -> None:
    docs, private = folders
    monkeypatch.setenv("AMEM_INGEST_DIRS", str(docs))
    out = await run_graph({"paths": ["manual.md", str(private / "secret.md")]}, user="bob")
    assert out["report"]["totals"]["written"] == 1
    assert errors(out["report"]) == [OUTSIDE_FOLDERS]
    text = base64.b64encode(b"%PDF-1.4 not really").decode()
    out = await run_graph(
        {"documents": [{"name": "notes.md", "text": "Bob likes tea."}], "kb": "mine"},
        user="bob",
    )
    assert out["report"]["files"][0]["source"] == "upload://notes.md"
    with AgenticStore.from_env(embeddings=embeddings) as opened:
        store = opened.memory_store
        assert list_knowledge_bases(store) == []  # nothing shared was written
        assert sorted(list_knowledge_bases(store, "bob")) == ["default", "mine"]
        assert list_knowledge_bases(store, "alice") == []
    with pytest.raises(InvalidInputError, match="data_base64 is not base64"):
        await run_graph({"documents": [{"name": "x.pdf", "data_base64": text + "!"}]}, user="bob")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"name": "../etc/notes.md", "text": "x"}, "a file name, not a path"),
        ({"name": "/etc/notes.md", "text": "x"}, "a file name, not a path"),
        ({"name": "notes.exe", "text": "x"}, "unsupported file type"),
        ({"name": "notes.md"}, "exactly one of text or data_base64"),
        ({"name": "notes.md", "text": "x", "path": "/etc"}, "each document is"),
    ],
)
async def test_a_bad_upload_is_refused_before_anything_is_written(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await run_graph({"documents": [document]}, user="bob")


async def test_the_shared_knowledge_base_is_an_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    upload = {"documents": [{"name": "faq.md", "text": "Opening hours: 9 to 5."}], "shared": True}
    with pytest.raises(InvalidInputError, match="operator's right"):
        await run_graph(upload, user="bob")
    with pytest.raises(InvalidInputError, match="operator's right"):
        await run_graph(upload, langgraph_auth_user_id="bob", langgraph_auth_permissions=[])
    out = await run_graph(
        upload, langgraph_auth_user_id="olga", langgraph_auth_permissions=["operator"]
    )
    assert out["report"]["ok"]
    monkeypatch.setenv("AMEM_OPERATORS", "*")  # a server only its operator can reach
    assert (await run_graph(upload, user="bob"))["report"]["ok"]


async def test_a_run_acts_for_the_authenticated_user_only() -> None:
    upload = {"documents": [{"name": "notes.md", "text": "Mine."}]}
    with pytest.raises(InvalidInputError, match="not the authenticated user"):
        await run_graph(upload, user="alice", langgraph_auth_user_id="bob")
    with pytest.raises(InvalidInputError, match="whose knowledge base"):
        await run_graph(upload)


# -- own knowledge bases ----------------------------------------------------------------------


def test_an_own_knowledge_base_is_read_by_its_owner_only(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    secret = Upload("vault.md", f"# Vault\n\n{SECRET}\n".encode())
    report = ingest_uploads(
        [secret], kb="default", owner="alice", store=store, embeddings=embeddings
    )
    assert report.ok
    assert search_knowledge(store, embeddings, "default", "vault password", owner="alice")
    assert search_knowledge(store, embeddings, "default", "vault password", owner="bob") == []
    assert search_knowledge(store, embeddings, "default", "vault password") == []
    items = AgenticStore(store, embeddings)
    mine = items.search(("user_knowledge", "alice", "default"), query="vault password")
    assert mine and SECRET in mine[0].value["text"]
    assert items.search(("user_knowledge", "bob", "default"), query="vault password") == []
    assert items.search(("knowledge", "default"), query="vault password") == []
    assert ("user_knowledge", "alice", "default") in items.list_namespaces()
    with pytest.raises(InvalidInputError, match="read-only"):
        items.put(("user_knowledge", "alice", "default"), "k", {"text": "forged"})
    # Uploading the same name again replaces the document.
    again = Upload("vault.md", b"# Vault\n\nMoved to the other room.\n")
    ingest_uploads([again], kb="default", owner="alice", store=store, embeddings=embeddings)
    (source,) = list_sources(store, "default", "alice")
    assert source.source == "upload://vault.md"
    hits = search_knowledge(store, embeddings, "default", "vault", k=10, owner="alice")
    assert all("hunter2" not in h.text for h in hits)


async def test_forgetting_a_user_deletes_their_own_knowledge_bases(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    for user in ("alice", "bob"):
        doc = Upload("notes.md", f"# Notes\n\n{user} keeps notes about tea.\n".encode())
        ingest_uploads([doc], kb="default", owner=user, store=store, embeddings=embeddings)
    await forget_user(store, "alice", embeddings=embeddings)
    assert list_knowledge_bases(store, "alice") == []
    assert list_knowledge_bases(store, "bob") == ["default"]
    hits = search_knowledge(store, embeddings, "default", "tea", owner="bob")
    assert hits and "bob" in hits[0].text


def test_a_users_export_carries_their_own_knowledge_bases(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    for user in ("alice", "bob"):
        doc = Upload("notes.md", f"# Notes\n\n{user} keeps notes about tea.\n".encode())
        ingest_uploads([doc], kb="default", owner=user, store=store, embeddings=embeddings)
    path = tmp_path / "alice.jsonl"
    summary = export_to_file(
        store, path, users=["alice"], include_shared=False, embedding_model="wordllama"
    )
    assert {u for (_, u) in summary.counts} == {"alice"}
    assert "bob" not in path.read_text()
    with EmbeddedStore(tmp_path / "other", dims=embeddings.dims) as other:
        import_memories(other, path, embeddings=embeddings, embedding_model="wordllama")
        assert list_knowledge_bases(other, "alice") == ["default"]
        assert list_knowledge_bases(other, "bob") == [] and list_knowledge_bases(other) == []
        hits = search_knowledge(other, embeddings, "default", "tea", owner="alice")
        assert hits and "alice" in hits[0].text
