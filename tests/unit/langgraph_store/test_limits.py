"""``AgenticStore``'s limits: every oversized or overdeep input is a clear refusal.

Nested values and filters, namespaces (labels, characters), keys, values and the text that
is embedded are bounded; a refusal is ``InvalidInputError`` (LangGraph's server answers
400) and changes nothing, and a ``RecursionError`` never escapes. Thread ids with a ``.``
(which LangGraph forbids inside a label) are addressable by an escaped label.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import ListNamespacesOp, MatchCondition, PutOp, SearchOp

from agentic_memory.kinds._bound import MAX_EMBEDDED_CHARS
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.langgraph_store.store import MIN_SWEEP_MINUTES
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.namespaces.labels import (
    MAX_KEY_CHARS,
    MAX_LABEL_CHARS,
    MAX_LABELS,
    MAX_NAMESPACE_CHARS,
    thread_label,
)
from agentic_memory.namespaces.search import MAX_FILTER_DEPTH, MAX_VALUE_CHARS, MAX_VALUE_DEPTH
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.langgraph_store.conftest import Clock, open_agentic

NS = ("notes", "bob")


def nested(depth: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- depth ------------------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", [NS, ("facts", "bob"), ("episodes", "bob")])
def test_a_value_nested_5000_deep_is_refused(agentic: AgenticStore, namespace: Any) -> None:
    for deep in ({"v": nested(5000)}, {"v": nested_list(5000)}):
        with pytest.raises(InvalidInputError, match=f"more than {MAX_VALUE_DEPTH} levels"):
            agentic.put(namespace, "k", deep)
    assert agentic.search(NS) == []


def test_the_deepest_value_allowed_round_trips(agentic: AgenticStore) -> None:
    value = nested(MAX_VALUE_DEPTH - 1)  # the item itself is the first level
    agentic.put(NS, "deep", value)
    got = agentic.get(NS, "deep")
    assert got is not None and got.value == value
    with pytest.raises(InvalidInputError, match="levels"):
        agentic.put(NS, "deeper", nested(MAX_VALUE_DEPTH))


def test_a_filter_nested_10000_deep_is_refused(agentic: AgenticStore) -> None:
    agentic.put(NS, "k", {"a": 1})
    deep_and: Any = {"a": 1}
    for _ in range(10_000):
        deep_and = {"$and": [deep_and]}
    for flt in (deep_and, {"a": nested(5000)}, {"a": {"$eq": nested_list(5000)}}):
        with pytest.raises(InvalidInputError, match="levels"):
            agentic.search(NS, filter=flt)
    fine: Any = {"a": 1}
    for _ in range(MAX_FILTER_DEPTH - 1):
        fine = {"$and": [fine]}
    assert [i.key for i in agentic.search(NS, filter=fine)] == ["k"]


async def test_async_refusals_are_not_recursion_errors(agentic: AgenticStore) -> None:
    with pytest.raises(InvalidInputError):
        await agentic.aput(NS, "k", {"v": nested(5000)})
    with pytest.raises(InvalidInputError):
        await agentic.abatch([SearchOp(NS, filter={"v": nested(5000)})])


# -- namespaces and keys ----------------------------------------------------------------------


def test_a_huge_namespace_is_refused_before_it_is_stored(
    tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> None:
    store = open_agentic("embedded", tmp_path, embeddings, clock)
    with store:
        store.put(NS, "first", {"text": "x"})
        folder = tmp_path / f"store-{id(clock)}"
        before = size_of(folder)
        huge = tuple(["a" * 9] * 40_000)  # 0.4 MB of labels
        with pytest.raises(InvalidInputError, match=f"at most {MAX_LABELS} labels"):
            store.put(huge, "k", {"text": "x"})
        with pytest.raises(InvalidInputError, match=f"longer than {MAX_LABEL_CHARS}"):
            store.put(("notes", "b" * (MAX_LABEL_CHARS + 1)), "k", {"text": "x"})
        wide = tuple(["c" * MAX_LABEL_CHARS] * (MAX_NAMESPACE_CHARS // MAX_LABEL_CHARS + 1))
        assert len(wide) <= MAX_LABELS
        with pytest.raises(InvalidInputError, match=f"more than {MAX_NAMESPACE_CHARS:,}"):
            store.put(wide, "k", {"text": "x"})
        # Reads, searches and listings are held to the same limits.
        for op in (
            lambda: store.get(huge, "k"),
            lambda: store.search(huge),
            lambda: store.list_namespaces(prefix=huge),
            lambda: store.batch(
                [ListNamespacesOp(match_conditions=(MatchCondition("suffix", huge),))]
            ),
        ):
            with pytest.raises(InvalidInputError, match="labels"):
                op()
        assert size_of(folder) - before < 100_000
        assert store.list_namespaces() == [NS]
        # The largest namespace allowed works.
        biggest = tuple(f"{i:02d}" + "x" * 60 for i in range(MAX_LABELS))
        assert len(".".join(biggest)) <= MAX_NAMESPACE_CHARS
        store.put(biggest, "k", {"text": "y"})
        assert store.get(biggest, "k") is not None


def test_a_huge_key_is_refused(agentic: AgenticStore) -> None:
    with pytest.raises(InvalidInputError, match=f"longer than {MAX_KEY_CHARS:,}"):
        agentic.put(NS, "k" * (MAX_KEY_CHARS + 1), {"text": "x"})
    with pytest.raises(InvalidInputError, match="key"):
        agentic.get(NS, "k" * (MAX_KEY_CHARS + 1))
    agentic.put(NS, "k" * MAX_KEY_CHARS, {"text": "x"})
    assert agentic.get(NS, "k" * MAX_KEY_CHARS) is not None


# -- values and what is embedded ----------------------------------------------------------------


class Recording(Embeddings):
    """The test's embeddings, recording the length of every text they embed."""

    def __init__(self, inner: LocalEmbeddings) -> None:
        self.inner = inner
        self.dims = inner.dims
        self.lengths: list[int] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.lengths += [len(t) for t in texts]
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.lengths.append(len(text))
        return self.inner.embed_query(text)


@pytest.fixture
def recorded(tmp_path: Path, embeddings: LocalEmbeddings) -> Any:
    rec = Recording(embeddings)
    memory = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    with AgenticStore(memory, rec, close_store=True) as store:
        yield store, rec


EPISODE = {
    "thread_id": "t1",
    "conversation": "user: hi",
    "context_tags": ["greeting"],
    "what_worked": "Short answers.",
    "what_to_avoid": "Long ones.",
    "importance": 0.5,
}


def test_only_a_bounded_part_of_a_long_text_is_embedded(recorded: Any) -> None:
    store, rec = recorded
    from agentic_memory.kinds.episodes import EpisodicMemory

    key = EpisodicMemory.episode_id("bob", "t1", 1)
    summary = "The user planned a trip. " * 36_000  # 900,000 characters
    store.put(("episodes", "bob"), key, {**EPISODE, "conversation_summary": summary})
    got = store.get(("episodes", "bob"), key)
    assert got is not None and got.value["conversation_summary"] == summary  # stored whole
    store.put(("messages", "bob", "t"), "m1", {"role": "user", "content": "y" * MAX_MESSAGE_CHARS})
    store.put(NS, "long", {"text": "word " * 19_000})
    assert max(rec.lengths) <= MAX_EMBEDDED_CHARS
    # Still found by words past the embedded part (the keyword side reads the whole text).
    hits = store.search(("episodes", "bob"), query="planned trip", filter={"$alpha": 0.0})
    assert [h.key for h in hits] == [key]


def test_a_value_over_the_size_limit_is_refused_for_every_kind(recorded: Any) -> None:
    store, rec = recorded
    from agentic_memory.kinds.episodes import EpisodicMemory

    key = EpisodicMemory.episode_id("bob", "t1", 1)
    too_big = {**EPISODE, "conversation_summary": "z" * (MAX_VALUE_CHARS + 1)}
    with pytest.raises(InvalidInputError, match="more than the 1,000,000"):
        store.put(("episodes", "bob"), key, too_big)
    with pytest.raises(InvalidInputError, match="more than the 1,000,000"):
        store.put(NS, "k", {"text": "z" * (MAX_VALUE_CHARS + 1)})
    assert rec.lengths == []  # refused before anything was embedded
    assert store.search(("episodes", "bob")) == []


# -- sweeps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("minutes", [1e-12, 0.001, MIN_SWEEP_MINUTES / 2, math.inf, -1.0])
async def test_a_sweep_interval_that_would_spin_is_refused(
    tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock, minutes: float
) -> None:
    with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
        await asyncio.to_thread(
            open_agentic,
            "embedded",
            tmp_path,
            embeddings,
            clock,
            ttl={"sweep_interval_minutes": minutes},
        )
    store = await asyncio.to_thread(
        open_agentic, "embedded", tmp_path, embeddings, clock, ttl={"default_ttl": 5}
    )
    async with store:
        with pytest.raises(InvalidInputError, match="sweep_interval_minutes"):
            await store.start_ttl_sweeper(sweep_interval_minutes=minutes)
        task = await store.start_ttl_sweeper(sweep_interval_minutes=MIN_SWEEP_MINUTES)
        await asyncio.sleep(0)
        assert not task.done()


# -- thread ids that LangGraph cannot take as a label ------------------------------------------


@pytest.mark.parametrize("thread", ["conv.1", "a.b.c", "100%", "50%2E", ".", "%"])
def test_a_thread_id_with_any_character_is_listed_and_addressable(
    amem: AgenticStore, thread: str
) -> None:
    asyncio.run(
        amem.memory.messages.aremember(
            "alice", thread, [{"role": "user", "content": f"hello from {thread}", "id": "m1"}]
        )
    )
    label = thread_label(thread)
    assert "." not in label
    namespace = ("messages", "alice", label)
    assert namespace in amem.list_namespaces(prefix=("messages", "alice"))
    got = amem.get(namespace, "m1")
    assert got is not None and got.value["content"] == f"hello from {thread}"
    assert got.namespace == namespace
    found = amem.search(namespace)
    assert [(i.namespace, i.value["content"]) for i in found] == [
        (namespace, f"hello from {thread}")
    ]
    hits = amem.search(("messages", "alice"), query="hello")
    assert {h.namespace for h in hits} == {namespace}
    amem.put(namespace, "m2", {"role": "assistant", "content": "hi back"})
    assert [
        m.content for m in asyncio.run(amem.memory.messages.alist("alice", thread_id=thread))
    ] == [
        f"hello from {thread}",
        "hi back",
    ]
    amem.delete(namespace, "m2")
    assert [
        m.content for m in asyncio.run(amem.memory.messages.alist("alice", thread_id=thread))
    ] == [f"hello from {thread}"]


def test_a_label_that_is_not_the_escaped_form_is_refused(amem: AgenticStore) -> None:
    asyncio.run(
        amem.memory.messages.aremember(
            "alice", "50%", [{"role": "user", "content": "x", "id": "m"}]
        )
    )
    with pytest.raises(InvalidInputError, match="50%25"):
        amem.get(("messages", "alice", "50%"), "m")
    with pytest.raises(InvalidInputError, match="escape"):
        amem.batch([PutOp(("messages", "alice", "a%zz"), "m", {"role": "user", "content": "x"})])
