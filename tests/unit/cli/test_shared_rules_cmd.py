"""The operator's commands: review, approve and reject proposals; users' own knowledge bases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentic_memory.ingest.inputs import Upload
from agentic_memory.ingest.pipeline import ingest_uploads
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.cli.test_memories_cmd import amem, fails, ok_json
from tests.unit.security.payloads import PAYLOADS


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")


def propose(store: EmbeddedStore, embeddings: LocalEmbeddings, user: str, *rules: str) -> str:
    gate = SharedRules(store, embeddings)
    proposed = asyncio.run(
        gate.apropose(
            [{"instruction": r, "rationale": "it helped"} for r in rules],
            proposer=user,
            source_episodes=[f"{user}-episode"],
        )
    )
    assert proposed.proposal is not None
    return proposed.proposal.id


def test_review_approve_reject(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    assert ok_json("memories", "rules", "review") == []
    first = propose(store, embeddings, "alice", "Be brief", PAYLOADS[0].rules[0][0])
    second = propose(store, embeddings, "bob", "Use bullet points")
    pending = ok_json("memories", "rules", "review")
    assert [p["id"] for p in pending] == [first, second]
    assert pending[0]["screened_out"][0]["reason"] == "it is about other users"
    human = amem("memories", "rules", "review")
    assert "+ Be brief – it helped" in human.stdout and "screened out" in human.stdout
    assert "reveal other users" in human.stdout.lower()

    approved = ok_json("memories", "rules", "approve", first, "--operator", "olga")
    assert approved["version"] == 2 and approved["source_users"] == ["alice"]
    assert [
        r["instruction"] for r in ok_json("memories", "rules", "show", "--global")["rules"]
    ] == ["Be brief"]
    fails("memories", "rules", "approve", second, message="at version 2 now")
    rejected = ok_json(
        "memories", "rules", "reject", second, "--reason", "stale", "--operator", "olga"
    )
    assert (rejected["status"], rejected["reason"], rejected["decided_by"]) == (
        "rejected",
        "stale",
        "olga",
    )
    assert ok_json("memories", "rules", "review") == []
    everything = ok_json("memories", "rules", "review", "--all")
    assert [p["status"] for p in everything] == ["approved", "rejected"]
    fails("memories", "rules", "reject", first, message="approved already")
    fails("memories", "rules", "approve", "nope", message="no proposal")
    rolled = ok_json("memories", "rules", "rollback", "1", "--global", "--operator", "olga")
    assert rolled["version"] == 3 and "olga" in rolled["note"]


def test_own_knowledge_bases_through_the_cli(
    store: EmbeddedStore, embeddings: LocalEmbeddings, tmp_path: Path
) -> None:
    doc = Upload("tea.md", b"# Tea\n\nAlice drinks oolong.\n")
    assert ingest_uploads([doc], kb="notes", owner="alice", store=store, embeddings=embeddings).ok
    assert ok_json("memories", "kb", "list") == []
    assert [k["name"] for k in ok_json("memories", "kb", "list", "--user", "alice")] == ["notes"]
    assert ok_json("memories", "kb", "list", "--user", "bob") == []
    sources = ok_json("memories", "kb", "sources", "notes", "--user", "alice")
    assert [s["source"] for s in sources] == ["upload://tea.md"]
    fails("memories", "kb", "sources", "notes", message="no knowledge base 'notes'")
    deleted = ok_json(
        "memories", "kb", "delete-source", "notes", "upload://tea.md", "--user", "alice"
    )
    assert deleted["chunks_deleted"] == 1
    # An operator ingests a file into a user's own knowledge base.
    (tmp_path / "coffee.md").write_text("# Coffee\n\nBob drinks espresso.\n")
    result = amem("ingest", str(tmp_path / "coffee.md"), "--user", "bob", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["totals"]["written"] == 1
    listed = amem("ingest", "--list", "--user", "bob", "--json")
    assert [k["kb"] for k in json.loads(listed.stdout)] == ["default"]
    assert amem("ingest", "x.md", "--user", "_global").exit_code == 2
