"""The retention report lists the turns to go in the order a purge takes them.

A message and its answer logged in one call share their date; the store breaks such ties by
id, so the report showed an answer before its question ("out of order within a minute"),
and a purge could take the answer and keep the question.
"""

from __future__ import annotations

import asyncio
from itertools import count

from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import NOW, exchange, log_with


def _reversed_thread() -> str:
    """A thread whose answer's id sorts before its question's (as half of them do)."""
    for n in count():
        thread = f"t{n}"
        question = MessageLog.message_id("alice", thread, "#0")
        if MessageLog.message_id("alice", thread, "#1") < question:
            return thread
    raise AssertionError("unreachable")


def test_the_report_lists_a_question_before_its_answer(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    thread = _reversed_thread()
    log = log_with(store, embeddings, max_messages=1)
    exchange(log, "alice", thread, "Where is the lake?", days=3)
    exchange(log, "alice", thread, "And the hut?", days=2)
    report = asyncio.run(log.aretention("alice", now=NOW, upcoming=4))
    assert [(m.turn, m.content) for m in report.next] == [
        (0, "Where is the lake?"),
        (1, "About Where is the lake?."),
        (2, "And the hut?"),
        (3, "About And the hut?."),
    ]


def test_a_purge_takes_the_question_before_its_answer(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    thread = _reversed_thread()
    log = log_with(store, embeddings, max_messages=1)
    exchange(log, "alice", thread, "Where is the lake?", days=3)
    assert asyncio.run(log.apurge("alice", now=NOW)).over_cap == 1
    [kept] = list(store.iterate(MESSAGES.name, user="alice"))
    assert kept.properties["turn"] == 1
