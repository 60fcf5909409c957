"""Export/import of every memory kind: round trips, re-embedding, validation before writing."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.episodes import EPISODES, EPISODES_V1
from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.rules import RULES, RuleBook
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import GLOBAL_SCOPE
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import (
    FORMAT_NAME,
    TransferError,
    aimport_memories,
    export_memories,
    export_to_file,
    import_memories,
    read_header,
)
from agentic_memory.transfer.staging import _Staging
from tests.unit.cli.conftest import Seeded
from tests.unit.cli.helpers import assert_same, snapshot, without_shared_rules

MODEL = "wordllama-l2-supercat-256"


def _export(store: EmbeddedStore, path: Path, **kwargs: object) -> None:
    export_to_file(store, path, embedding_model=MODEL, **kwargs)


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _shared_versions(lines: list[dict[str, object]]) -> int:
    """The lines holding versions of the shared rules (an import proposes, never writes them)."""
    return sum(1 for ln in lines[1:] if ln["kind"] == "rule" and ln["user"] == GLOBAL_SCOPE)


def test_export_writes_header_and_every_kind(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _lines(path)
    header = lines[0]
    assert header["kind"] == "header"
    assert header["format"] == FORMAT_NAME
    assert header["dims"] == 256
    assert header["embedding_model"] == MODEL
    assert header["users"] == sorted(["alice", "bob", GLOBAL_SCOPE])
    kinds = {line["kind"] for line in lines[1:]}
    assert kinds == {"episode", "fact", "message", "rule", "chunk", "source"}
    # Every object of the store is in the file, each once.
    assert len(lines) - 1 == len(snapshot(store))
    fact_lines = [ln for ln in lines if ln["kind"] == "fact" and ln["user"] == "alice"]
    assert len(fact_lines) == 3  # the superseded home city is exported too
    assert all(len(ln["vector"]) == 256 for ln in lines[1:])  # type: ignore[arg-type]


def test_round_trip_into_a_fresh_store_keeps_ids_properties_and_vectors(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    before = snapshot(store)
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        summary = import_memories(
            target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert not summary.reembedded
        rest = without_shared_rules(before)
        assert len(rest) < len(before)  # the store has versions of the shared rules
        assert summary.total == len(rest)
        assert_same(rest, without_shared_rules(snapshot(target)))
        # The shared rules come in through their gate: the file's latest version is a pending
        # proposal, and the rules in force change only when an operator approves it.
        gate = SharedRules(target, embeddings)
        (pending,) = asyncio.run(gate.apending())
        latest = asyncio.run(RuleBook(store, embeddings).alatest(GLOBAL_SCOPE))
        assert summary.proposal == pending.id
        # Proposed from the target's starting rules (version 1, not stored).
        assert (pending.origin, pending.proposer, pending.base_version) == ("import", "_global", 1)
        assert pending.rules == latest.rules and pending.source_users == ()
        assert not asyncio.run(RuleBook(target, embeddings).alatest(GLOBAL_SCOPE)).stored
        approved = asyncio.run(gate.aapprove(pending.id, operator="olga"))
        assert approved.version == 2 and approved.rules == latest.rules


def test_import_is_idempotent(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    before = snapshot(store)
    import_memories(store, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True)
    assert_same(before, snapshot(store))


def test_export_without_vectors_reembeds_to_the_vectors_the_domain_modules_write(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path, include_vectors=False)
    assert all(line["vector"] is None for line in _lines(path)[1:])
    before = snapshot(store)
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        summary = import_memories(
            target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert summary.reembedded
        assert any("no vector" in n for n in summary.notes)
        # Same text embedded as episodes/facts/rules/messages/chunks are when first written.
        assert_same(without_shared_rules(before), without_shared_rules(snapshot(target)), tol=1e-4)


class _TinyEmbeddings(LocalEmbeddings):
    """A 64-d model: the first 64 WordLlama components, renormalised."""

    dims = 64

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for vec in super().embed_documents(texts):
            head = vec[:64]
            norm = sum(x * x for x in head) ** 0.5 or 1.0
            out.append([x / norm for x in head])
        return out


def test_import_into_another_vector_size_reembeds_and_says_so(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    before = without_shared_rules(snapshot(store, vectors=False))
    with EmbeddedStore(tmp_path / "small", dims=64) as target:
        summary = import_memories(
            target, path, embeddings=_TinyEmbeddings(), embedding_model="tiny", allow_shared=True
        )
        assert summary.reembedded
        assert "256 dimensions" in summary.notes[0]
        after = without_shared_rules(snapshot(target))
        assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
        assert all(v[1] is not None and len(v[1]) == 64 for v in after.values())


def test_import_with_another_model_name_reembeds(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        summary = import_memories(
            target, path, embeddings=embeddings, embedding_model="other-model", allow_shared=True
        )
        assert summary.reembedded
        assert "'other-model'" in summary.notes[0]


def test_user_export_holds_only_that_user(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    path = tmp_path / "alice.jsonl"
    _export(store, path, users=["alice"], include_shared=False)
    lines = _lines(path)
    assert lines[0]["users"] == ["alice"]
    assert {ln["user"] for ln in lines[1:]} == {"alice"}
    assert {ln["collection"] for ln in lines[1:]} == {
        EPISODES.name,
        FACTS.name,
        MESSAGES.name,
        RULES.name,
    }


def _append_bad(bad: str) -> Callable[[list[str]], None]:
    def mutate(lines: list[str]) -> None:
        lines.append(bad)  # after every good line: none of those may be written either

    return mutate


def _edit_header(old: str, new: str) -> Callable[[list[str]], None]:
    def mutate(lines: list[str]) -> None:
        assert old in lines[0]
        lines[0] = lines[0].replace(old, new)

    return mutate


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (_append_bad("{not json"), r"line \d+: not JSON"),
        (
            _append_bad(json.dumps({"kind": "memo", "collection": "UserFact"})),
            r"line \d+: unknown kind 'memo'",
        ),
        (
            _append_bad(json.dumps({"kind": "fact", "collection": "Nope", "user": "a", "id": "x"})),
            r"line \d+: collection 'Nope' is not declared",
        ),
        (_edit_header('"dims": 256', '"dims": "big"'), r"line 1: header dims"),
        (_edit_header('"version": 1', '"version": 9'), r"line 1: unsupported format version 9"),
        (lambda lines: lines.pop(0), r"line 1: the first line must be the export header"),
    ],
)
def test_a_bad_file_writes_nothing(
    store: EmbeddedStore,
    seeded: Seeded,
    tmp_path: Path,
    embeddings: LocalEmbeddings,
    mutate: Callable[[list[str]], None],
    pattern: str,
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = path.read_text().splitlines()
    mutate(lines)
    path.write_text("\n".join(lines) + "\n")
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        with pytest.raises(TransferError, match=pattern):
            import_memories(
                target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
            )
        assert target.collections() == []


def test_a_wrong_property_type_is_reported_with_its_line(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _lines(path)
    fact_at = next(i for i, ln in enumerate(lines) if ln["kind"] == "fact")
    lines[fact_at]["properties"]["current"] = "yes"  # type: ignore[index]
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        with pytest.raises(
            TransferError, match=rf"line {fact_at + 1}: UserFact.current must be bool"
        ):
            import_memories(
                target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
            )
        assert target.collections() == []


def test_export_to_file_refuses_a_missing_folder(store: EmbeddedStore, tmp_path: Path) -> None:
    from agentic_memory.store import InvalidInputError

    with pytest.raises(InvalidInputError, match="does not exist"):
        export_to_file(store, tmp_path / "nope" / "m.jsonl", embedding_model=MODEL)


def test_header_reader_rejects_other_files(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"kind": "header", "format": "something-else", "version": 1}) + "\n")
    with pytest.raises(TransferError, match="not an agentic-memory export"):
        read_header(path)


def test_export_to_a_stream(store: EmbeddedStore, seeded: Seeded) -> None:
    buf = io.StringIO()
    summary = export_memories(store, buf, users=["bob"], embedding_model=MODEL)
    assert summary.by_kind()["fact"] == 3
    assert summary.by_kind()["chunk"] == 1
    assert summary.by_kind()["source"] == 2  # the manifest: the source and its generation


def test_exporting_an_unknown_user_says_so(store: EmbeddedStore, seeded: Seeded) -> None:
    buf = io.StringIO()
    summary = export_memories(
        store, buf, users=["zoe"], include_shared=False, embedding_model=MODEL
    )
    assert summary.total == 0
    assert summary.notes == ["user 'zoe' has no memories in this store"]
    assert len(buf.getvalue().splitlines()) == 1  # the header only


def test_a_changed_schema_in_the_header_is_refused(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _lines(path)
    chunks = next(name for name in lines[0]["collections"] if name.startswith("Knowledge_"))  # type: ignore[attr-defined]
    lines[0]["collections"][chunks]["properties"][0]["type"] = "int"  # type: ignore[index]
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        with pytest.raises(TransferError, match="different schema"):
            import_memories(
                target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
            )
        assert target.collections() == []


def test_text_with_a_lone_surrogate_is_reported_with_its_line(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    # JSON may escape half of a surrogate pair ("\ud83d"): that is not text any store takes.
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _lines(path)
    at = next(i for i, ln in enumerate(lines) if ln["kind"] == "message")
    lines[at]["properties"]["content"] = "my ssn is \ud83d"  # type: ignore[index]
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        with pytest.raises(
            TransferError, match=rf"line {at + 1}: MessageLog.content is not valid Unicode text"
        ):
            import_memories(
                target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
            )
        assert target.collections() == []


def test_an_export_whose_schema_only_differs_in_descriptions_is_imported(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    # An older version described the manifest's "entry" property differently.
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _lines(path)
    for spec in lines[0]["collections"].values():  # type: ignore[attr-defined]
        for prop in spec["properties"]:
            prop["description"] = "described otherwise"
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    with EmbeddedStore(tmp_path / "other", dims=256) as target:
        summary = import_memories(
            target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert summary.total == len(lines) - 1 - _shared_versions(lines)


def _as_before_importance(path: Path) -> list[dict[str, object]]:
    """Rewrite an export as the version before importance wrote it (no such properties)."""
    lines = _lines(path)
    added = {"important", "important_by"}
    spec = lines[0]["collections"][MESSAGES.name]  # type: ignore[index]
    spec["properties"] = [p for p in spec["properties"] if p["name"] not in added]
    # That version's episodes had no keyword text either: their raw texts were searched.
    lines[0]["collections"][EPISODES.name] = EPISODES_V1.to_dict()  # type: ignore[index]
    for line in lines[1:]:
        if line["kind"] in ("message", "episode"):
            props = line["properties"]
            for key in (*added, *(("search_text",) if line["kind"] == "episode" else ())):
                props.pop(key, None)  # type: ignore[attr-defined]
    path.write_text("\n".join(json.dumps(ln) for ln in lines) + "\n")
    return lines


def test_an_export_from_before_importance_is_imported_anywhere(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    lines = _as_before_importance(path)
    # Into a fresh store: its collections take the file's schema and gain the new properties
    # on first use, as a store written by that version does.
    with EmbeddedStore(tmp_path / "fresh", dims=256) as fresh:
        summary = import_memories(
            fresh, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert summary.total == len(lines) - 1 - _shared_versions(lines)
        log = MessageLog(fresh, embeddings)
        turns = asyncio.run(log.alist("alice"))
        assert turns and not any(m.important for m in turns)
        asyncio.run(log.amark_important("alice", [turns[0].id]))
        assert "important" in {p.name for p in fresh.spec(MESSAGES.name).properties}
    # Into a store of this version: the objects come in without the properties.
    with EmbeddedStore(tmp_path / "current", dims=256) as current:
        asyncio.run(
            MessageLog(current, embeddings).aremember(
                "carol", "t", [{"role": "user", "content": "hi"}]
            )
        )
        summary = import_memories(
            current, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert summary.total == len(lines) - 1 - _shared_versions(lines)
        assert current.spec(MESSAGES.name).properties == MESSAGES.properties
        assert not any(
            m.important for m in asyncio.run(MessageLog(current, embeddings).alist("alice"))
        )


def test_an_export_is_private_whatever_the_umask(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    target = tmp_path / "alice.jsonl"
    target.write_text("an older, world-readable export")
    os.chmod(target, 0o644)
    old = os.umask(0o022)
    try:
        export_to_file(store, target, embedding_model=MODEL, users=["alice"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert read_header(target).users == ["alice"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


# -- the async import ---------------------------------------------------------------------------


@pytest.fixture
def exported(store: EmbeddedStore, seeded: Seeded, tmp_path: Path) -> Path:
    """The seeded store's export file."""
    path = tmp_path / "mem.jsonl"
    _export(store, path)
    return path


def _importing(target: EmbeddedStore, path: Path, embeddings: LocalEmbeddings) -> asyncio.Task[Any]:
    """Start importing every memory of ``path`` (the shared ones too) into ``target``."""
    return asyncio.create_task(
        aimport_memories(
            target, path, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
    )


async def test_an_async_import_writes_what_the_blocking_one_writes(
    store: EmbeddedStore, exported: Path, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    with (
        EmbeddedStore(tmp_path / "awaited", dims=256) as awaited,
        EmbeddedStore(tmp_path / "blocking", dims=256) as blocking,
    ):
        summary = await _importing(awaited, exported, embeddings)
        # The blocking twin works in a running loop too (a notebook cell), beside it.
        again = import_memories(
            blocking, exported, embeddings=embeddings, embedding_model=MODEL, allow_shared=True
        )
        assert summary.total == again.total == len(without_shared_rules(snapshot(store)))
        assert_same(
            without_shared_rules(snapshot(awaited)), without_shared_rules(snapshot(blocking))
        )
        for target, done in ((awaited, summary), (blocking, again)):
            (pending,) = await SharedRules(target, embeddings).apending()
            assert done.proposal == pending.id


async def test_an_import_cancelled_while_it_writes_leaves_nothing(
    exported: Path, tmp_path: Path, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing, cancelled = threading.Event(), threading.Event()
    real = EmbeddedStore.transaction

    @contextlib.contextmanager
    def held(self: EmbeddedStore) -> Iterator[None]:
        with real(self):
            yield
            # Every object is written: the write thread cannot be stopped, and commits after.
            writing.set()
            assert cancelled.wait(30)

    with EmbeddedStore(tmp_path / "target", dims=256) as target:
        monkeypatch.setattr(EmbeddedStore, "transaction", held)
        task = _importing(target, exported, embeddings)
        assert await asyncio.to_thread(writing.wait, 30)
        task.cancel()
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        assert snapshot(target) == {}
        assert target.collections() == []


async def test_an_import_cancelled_at_its_gate_leaves_nothing(
    exported: Path, tmp_path: Path, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_gate = asyncio.Event()

    async def waiting(self: SharedRules, *args: Any, **kwargs: Any) -> Any:
        at_gate.set()
        await asyncio.Event().wait()  # an operator's store that never answers

    monkeypatch.setattr(SharedRules, "apropose", waiting)
    with EmbeddedStore(tmp_path / "target", dims=256) as target:
        task = _importing(target, exported, embeddings)
        await at_gate.wait()
        assert await target.acollections()  # the users' memories are in by now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert snapshot(target) == {}
        assert target.collections() == []


async def test_an_import_cancelled_while_it_reads_the_file_leaves_no_staging_copy(
    exported: Path, tmp_path: Path, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    reading, cancelled = threading.Event(), threading.Event()
    real = _Staging.add

    def held(self: _Staging, line: Any) -> None:
        reading.set()
        assert cancelled.wait(30)  # the reading thread cannot be stopped: it goes on after
        real(self, line)

    monkeypatch.setattr(_Staging, "add", held)
    with EmbeddedStore(tmp_path / "target", dims=256) as target:
        task = _importing(target, exported, embeddings)
        assert await asyncio.to_thread(reading.wait, 30)
        assert [p.name.startswith("amem-import-") for p in temp.iterdir()] == [True]
        task.cancel()
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert list(temp.iterdir()) == []
        assert target.collections() == []
