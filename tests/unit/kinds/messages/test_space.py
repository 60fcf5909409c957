"""The ``("messages", user, thread)`` namespaces: a message is numbered by ``remember``.

A value that cannot be a memory is refused with a clear error and changes nothing
(moved from ``tests/unit/langgraph_store/test_kinds.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_memory.kinds.messages import MessageLog
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import InvalidInputError

THREAD = ("messages", "alice", "t1")


def test_messages_are_logged_through_the_message_log(amem: AgenticStore) -> None:
    amem.put(THREAD, "m1", {"role": "user", "content": "My printer is a LaserJet 4"})
    amem.put(THREAD, "m2", {"role": "assistant", "content": "Noted.", "speaker": "Bot"})
    logged = asyncio.run(amem.messages.alist("alice", thread_id="t1"))
    assert [(m.turn, m.role, m.content) for m in logged] == [
        (0, "human", "My printer is a LaserJet 4"),
        (1, "ai", "Noted."),
    ]
    stored_id = MessageLog.message_id("alice", "t1", "m1")
    by_own_id = amem.get(THREAD, "m1")
    by_stored_id = amem.get(THREAD, stored_id)
    assert by_own_id is not None and by_stored_id is not None
    assert by_own_id.key == "m1" and by_stored_id.key == stored_id
    assert by_own_id.value == by_stored_id.value
    assert by_own_id.value["turn"] == 0 and by_own_id.value["role"] == "human"
    # Logging the same message id again edits it in place: same turn.
    amem.put(THREAD, "m1", {"role": "user", "content": "My printer is a LaserJet 5"})
    assert [m.content for m in asyncio.run(amem.messages.alist("alice", thread_id="t1"))][
        0
    ].endswith("5")
    with pytest.raises(InvalidInputError, match="stored id of a logged message"):
        amem.put(THREAD, stored_id, {"role": "user", "content": "rewritten"})
    with pytest.raises(InvalidInputError, match="set by the message log"):
        amem.put(THREAD, "m1", {"role": "user", "content": "x", "turn": 7})
    listed = amem.search(("messages", "alice"))
    assert [i.key for i in listed] == [stored_id, MessageLog.message_id("alice", "t1", "m2")]
    hits = amem.search(("messages", "alice"), query="which printer do I have")
    assert hits[0].value["content"] == "My printer is a LaserJet 5"
    assert hits[0].namespace == THREAD
    amem.delete(THREAD, "m2")
    assert [m.turn for m in asyncio.run(amem.messages.alist("alice", thread_id="t1"))] == [0]
    amem.delete(("messages", "alice", "t2"), "m1")  # another thread: nothing deleted
    assert len(asyncio.run(amem.messages.alist("alice"))) == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"role": "system", "content": "x"}, "system and tool messages are not logged"),
        ({"role": "user", "content": "   "}, "non-empty string"),
        ({"role": "user"}, "needs 'content'"),
        ({"role": "user", "content": "x", "metadata": ["a"]}, "metadata"),
        ({"role": "user", "content": "x" * 100_001}, "100,000"),
        ({"role": "user", "content": "x", "created_at": "2026"}, "set by the message log"),
    ],
)
def test_a_value_that_is_not_a_message_is_refused(
    amem: AgenticStore, value: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        amem.put(THREAD, "m1", value)
    assert asyncio.run(amem.messages.alist("alice")) == []
