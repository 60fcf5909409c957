"""Hostile input to the Memory API: invalid Unicode, the reserved global scope, huge messages.

Each is refused with ``InvalidInputError`` before anything is embedded or written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.api import Memory
from agentic_memory.kinds.knowledge import search_knowledge
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError
from tests.unit.api.conftest import logged

BAD = "my ssn is \ud83d"  # half of a surrogate pair: not valid Unicode


@dataclass
class Reflection:
    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float = 0.5


class CountingEmbeddings(LocalEmbeddings):
    """Real embeddings that count the texts they were asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.texts += 1
        return super().embed_query(text)


@pytest.fixture
def counted(tmp_path: Path) -> Any:
    emb = CountingEmbeddings()
    with Memory.open(home=tmp_path / "h", backend="embedded", embeddings=emb) as mem:
        yield mem, emb


def _reflection(**overrides: Any) -> Reflection:
    fields = {
        "context_tags": ["travel"],
        "conversation_summary": "Planned a trip.",
        "what_worked": "Short answers.",
        "what_to_avoid": "Long lists.",
    }
    fields.update(overrides)
    return Reflection(**fields)


def test_lone_surrogates_are_refused_everywhere_before_any_work(counted: Any) -> None:
    mem, emb = counted
    msg = [{"role": "user", "content": "hello"}]
    attempts: dict[str, Callable[[], object]] = {
        "content": lambda: mem.remember("alice", "t1", [{"role": "user", "content": BAD}]),
        "content block": lambda: mem.remember(
            "alice", "t1", [{"role": "user", "content": [{"type": "text", "text": BAD}]}]
        ),
        "thread": lambda: mem.remember("alice", "t\udc80", msg),
        "user": lambda: mem.remember("al\udcffice", "t1", msg),
        "message id": lambda: mem.remember(
            "alice", "t1", [{"role": "user", "content": "hi", "id": "m\ud800"}]
        ),
        "metadata": lambda: mem.remember("alice", "t1", msg, metadata={"note": BAD}),
        "recall query": lambda: mem.recall("alice", BAD),
        "recall thread": lambda: mem.recall("alice", "hello", thread_id="t\ud800"),
        "list thread": lambda: mem.list("alice", thread_id="t\ud800"),
        "forget thread": lambda: mem.forget("alice", thread_id="t\ud800"),
        "threads user": lambda: mem.threads("\ud800"),
        "fact subject": lambda: asyncio.run(
            mem.facts.aremember("alice", [{"subject": BAD, "value": "x", "category": "other"}])
        ),
        "fact value": lambda: asyncio.run(
            mem.facts.aremember("alice", [{"subject": "diet", "value": BAD, "category": "other"}])
        ),
        "fact thread": lambda: asyncio.run(
            mem.facts.aremember(
                "alice", [{"subject": "diet", "value": "v"}], source_thread="t\ud800"
            )
        ),
        "episode text": lambda: asyncio.run(mem.episodes.astore("alice", "t1", _reflection(), BAD)),
        "episode summary": lambda: asyncio.run(
            mem.episodes.astore("alice", "t1", _reflection(conversation_summary=BAD), "user: hi")
        ),
        "episode tag": lambda: asyncio.run(
            mem.episodes.astore("alice", "t1", _reflection(context_tags=[BAD]), "user: hi")
        ),
        "episode query": lambda: asyncio.run(mem.episodes.arecall("alice", BAD)),
        "rule": lambda: asyncio.run(
            mem.rules.apropose("alice", [{"instruction": BAD, "rationale": "r"}])
        ),
        "knowledge query": lambda: search_knowledge(mem.store, emb, "docs", BAD),
    }
    for what, attempt in attempts.items():
        with pytest.raises(InvalidInputError, match="lone surrogate") as info:
            attempt()
        str(info.value).encode("utf-8")  # the message itself can be printed
        assert emb.texts == 0, what
    assert logged(mem, "alice") == 0
    assert asyncio.run(mem.facts.acurrent("alice")) == []
    assert asyncio.run(mem.episodes.alist("alice")) == []


def test_the_global_scope_is_not_a_user_of_messages_facts_or_episodes(mem: Memory) -> None:
    msg = [{"role": "user", "content": "hello"}]
    attempts: dict[str, Callable[[], object]] = {
        "remember": lambda: mem.remember(GLOBAL_SCOPE, "t1", msg),
        "aremember": lambda: __import__("asyncio").run(mem.aremember(GLOBAL_SCOPE, "t1", msg)),
        "recall": lambda: mem.recall(GLOBAL_SCOPE, "hello"),
        "list": lambda: mem.list(GLOBAL_SCOPE),
        "threads": lambda: mem.threads(GLOBAL_SCOPE),
        "forget": lambda: mem.forget(GLOBAL_SCOPE, thread_id="t1"),
        "facts": lambda: asyncio.run(
            mem.facts.aremember(GLOBAL_SCOPE, [{"subject": "a", "value": "b"}])
        ),
        "facts current": lambda: asyncio.run(mem.facts.acurrent(GLOBAL_SCOPE)),
        "episodes": lambda: asyncio.run(
            mem.episodes.astore(GLOBAL_SCOPE, "t1", _reflection(), "user: hi")
        ),
        "episodes list": lambda: asyncio.run(mem.episodes.alist(GLOBAL_SCOPE)),
    }
    for what, attempt in attempts.items():
        with pytest.raises(InvalidInputError, match="reserved for the rules shared"):
            attempt()
        assert mem.store.collections() == [] or logged(mem, GLOBAL_SCOPE) == 0, what
    # The global rules themselves are still written under that scope, by an operator.
    created = asyncio.run(
        mem.shared_rules.aput([{"instruction": "Be brief", "rationale": "r"}], operator="ops")
    )
    assert created is not None and created.scope == GLOBAL_SCOPE


def test_a_message_over_the_maximum_size_is_refused_before_it_is_embedded(counted: Any) -> None:
    mem, emb = counted
    huge = "x" * (MAX_MESSAGE_CHARS + 1)
    with pytest.raises(InvalidInputError, match="more than the 100,000 a message may have"):
        mem.remember("alice", "t1", [{"role": "user", "content": huge}])
    with pytest.raises(InvalidInputError, match="more than the 100,000"):
        mem.remember(
            "alice", "t1", [{"role": "user", "content": "hi"}, {"role": "ai", "content": huge}]
        )
    with pytest.raises(InvalidInputError, match="more than the 100,000"):
        mem.recall("alice", huge)
    assert emb.texts == 0
    assert logged(mem, "alice") == 0
    # At the limit exactly, the message is logged; a system message is not logged, so its
    # size does not matter.
    at_limit = ("word " * (MAX_MESSAGE_CHARS // 5))[:MAX_MESSAGE_CHARS]
    ids = mem.remember(
        "alice",
        "t1",
        [{"role": "system", "content": huge}, {"role": "user", "content": at_limit}],
    )
    assert len(ids) == 1 and logged(mem, "alice") == 1
    assert mem.list("alice")[0].content == at_limit
