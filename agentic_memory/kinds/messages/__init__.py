"""The message log: every human and AI turn of every thread, recallable across conversations.

What is logged: LangChain ``HumanMessage``/``AIMessage`` objects (and their streamed
chunks), ``ChatMessage`` and dicts whose ``role`` is ``user``/``human`` or
``assistant``/``ai``. System, developer, tool and function messages are skipped, and so is
a turn whose text is empty (an AI message that only calls tools). Content given as a list of
blocks keeps its text blocks.

Ids are deterministic: ``make_id("msg", user, thread_id, message_id)``, where the message id
is the message's own ``id`` (LangGraph gives every message one) or, without it, ``#<turn>``.
Remembering a message with an id again changes nothing (same turn, same timestamp); a
message without an id is new every time it is given.

Turn numbers are unique and increasing per thread, also with concurrent writers and purges:
new turns are numbered after the thread's last stored turn and after the turns purges
deleted from it (``TURN_MARKS``: a purge's number is never given again; forgetting a whole
thread forgets its numbers too), and created with the store's create-only ``insert``,
guarded by "no message of this thread after that turn"; a writer that finds one reads the
thread's last turn again and renumbers. A write reads only the given messages'
ids and the thread's last two turns (and rewrites the former last turn's keyword text), so
its cost does not grow with the user's log.

A message's ``name`` (LangChain's field, or a dict's ``"name"``) is kept as its ``speaker``.
Recall searches a keyword text the log prepares for every message (``search_text``, see
:mod:`agentic_memory.kinds.recall_text`: stems without stop words, of the message, its speaker, its date
and the turns before and after it) and the vector of ``"<speaker>: <content>"``. The hybrid hits are
then re-ranked with their context (see :meth:`MessageLog.arecall`).

Importance: a turn can be marked important by the user (:meth:`MessageLog.amark_important`,
``amem memories messages important``, ``/important`` in ``amem chat``) or flagged by the
memory model when it extracts facts (``ExtractedFacts.important``; ``log_turn`` stores it).
An important turn is recalled before an equally relevant one and is never purged.

Retention (:mod:`agentic_memory.kinds.retention`): a turn expires ``message_days`` after it
was logged (off by default), unless important, and a user keeps at most ``max_messages``
turns, the oldest unimportant ones pruned first. Writes purge their user's log at most every
``purge_interval_minutes``; :meth:`MessageLog.apurge` does it on request. Listings show each
turn's expiry (``expires_at``).

The package splits the log along its jobs: ``schema`` (the collection, its earlier versions,
a logged turn), ``checks`` (input checks, pure), ``writing`` (numbering and writing turns),
``recall`` (re-ranking hybrid hits), ``purge`` (retention), ``upgrade`` (a log of an earlier
schema, brought up to date on first use) and ``log`` (the ``MessageLog`` facade). Tests that
patch a module-level value patch it where it is read, e.g.
``agentic_memory.kinds.messages.recall.OWN_WORDS_WEIGHT``.
"""

from __future__ import annotations

from agentic_memory.kinds._bound import MAX_MESSAGE_CHARS
from agentic_memory.kinds.messages.checks import check_message_text
from agentic_memory.kinds.messages.log import MessageLog
from agentic_memory.kinds.messages.recall import (
    AGREEMENT_DEPTH,
    IMPORTANCE_WEIGHT,
    NEIGHBOUR_WEIGHT,
    OWN_WORDS_WEIGHT,
    RERANK_POOL,
    SPEAKER_WEIGHT,
    THREAD_WEIGHT,
    adaptive_fusion,
)
from agentic_memory.kinds.messages.schema import (
    MESSAGES,
    MESSAGES_V1,
    MESSAGES_V2,
    TURN_MARKS,
    LoggedMessage,
    MarkedBy,
    MessageRetention,
    RecalledMessage,
    Role,
    embedding_text_of,
)
from agentic_memory.kinds.messages.upgrade import aupgrade_message_log

__all__ = [
    "AGREEMENT_DEPTH",
    "IMPORTANCE_WEIGHT",
    "MAX_MESSAGE_CHARS",
    "MESSAGES",
    "MESSAGES_V1",
    "MESSAGES_V2",
    "NEIGHBOUR_WEIGHT",
    "OWN_WORDS_WEIGHT",
    "RERANK_POOL",
    "SPEAKER_WEIGHT",
    "THREAD_WEIGHT",
    "TURN_MARKS",
    "adaptive_fusion",
    "aupgrade_message_log",
    "check_message_text",
    "embedding_text_of",
    "LoggedMessage",
    "MarkedBy",
    "MessageLog",
    "MessageRetention",
    "RecalledMessage",
    "Role",
]
