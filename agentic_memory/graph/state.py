"""The graph's state: what one thread remembers between turns (its working memory).

``InputState`` is what a client sends each turn; ``State`` adds what the nodes write.
Everything is plain JSON (messages aside), because checkpointers and the server
serialise it. Items recalled from long-term memory are dicts with documented keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.graph.message import add_messages
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "RUN_FIELDS",
    "InputState",
    "State",
    "Summary",
    "append_or_replace",
    "message_text",
    "replacing",
]

_REPLACE = "__replace__"
_T = TypeVar("_T")


def message_text(message: BaseMessage) -> str:
    """Return a message's text: its string content, or its blocks' text joined by lines."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = [b if isinstance(b, str) else str(b.get("text", "")) for b in content]
    return "\n".join(p for p in parts if p)


def replacing(items: Sequence[_T]) -> dict[str, Any]:
    """Wrap a list so that it *replaces* the field's list (see :func:`append_or_replace`)."""
    return {_REPLACE: list(items)}


def append_or_replace(left: list[_T] | None, right: list[_T] | dict[str, Any] | None) -> list[_T]:
    """Append a node's items, or start over when given :func:`replacing`.

    A reducer, not a last value: two nodes that run in parallel can both fail, or both call
    a model. The first node of a turn that calls a model starts ``model_calls`` over, so it
    holds the current turn's calls only; a completed or rolled back run empties
    ``run_failures``.
    """
    if right is None:
        return list(left or [])
    if isinstance(right, dict):
        return list(right.get(_REPLACE, []))
    return [*(left or []), *right]


@dataclass(kw_only=True)
class InputState:
    """What a client sends for one turn."""

    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    """The conversation of this thread; a turn appends the user's new message."""

    end_conversation: bool = False
    """True ends the conversation after this turn (at once with no new message): reflect."""


@dataclass(kw_only=True)
class State(InputState):
    """The full state of a thread."""

    owner: str | None = None
    """The user of the thread's first run; another user's run is refused (``admit``)."""

    settled_through: str | None = None
    """Id of the newest message the graph admitted or wrote; what follows it is a run's new
    input, which ``admit`` checks (and removes again when it refuses it)."""

    settled_messages: list[AnyMessage] | None = None
    """The thread's messages as the last completed run left them: what a refused or failed
    run restores, and what tells a run's new input from the history it must not change.
    ``None`` for a thread from before it was kept (written at the end of its next run)."""

    run_before: dict[str, Any] | None = None
    """While a run is under way: the thread's values before it (``admit``). Internal."""

    run_failures: Annotated[list[dict[str, str]], append_or_replace] = field(default_factory=list)
    """While a refused or failed run is rolled back: why (kind, message). Internal."""

    pending_reflection: dict[str, Any] | None = None
    """An episode stored at a conversation end whose rules update has not completed yet;
    the next end (or a re-sent one) runs that update."""

    rules_rejected: list[dict[str, str]] = field(default_factory=list)
    """Rules of this run's rewrite that were not stored, with the reason (this run only)."""

    rules_conflicts: list[dict[str, Any]] = field(default_factory=list)
    """Newer rules versions this end met while it rewrote the rules (this run only): each
    says the version the rewrite was based on (``based_on``), the one it found (``found``)
    and how it went on: ``rebased`` (its changes replayed on the newer version, no model
    call) or ``rewritten`` (the merge would pass ten rules: the model rewrote the newer)."""

    rules_note: str | None = None
    """Why the rules were not rewritten at this conversation end."""

    episodes: list[dict[str, Any]] = field(default_factory=list)
    """Episodes recalled for this turn: id, thread_id, context_tags, conversation_summary,
    what_worked, what_to_avoid, importance, created_at, relevance, recency, score."""

    past_turns: list[dict[str, Any]] = field(default_factory=list)
    """Messages of the user's other threads recalled for this turn: id, role, content,
    thread_id, turn, created_at, score."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    """Knowledge-base passages recalled for this turn: chunk_id, kb, own (from the user's own
    knowledge base, else a shared one), text, source, title, section (the heading the passage
    falls under, "" when none was found), page_start, page_end, label
    ("[source p.N]"), score, similarity (cosine to the message; passages below the run's
    relevance floor are not recalled)."""

    rules: list[dict[str, str]] = field(default_factory=list)
    """The procedural rules in force: instruction, rationale."""

    rules_version: int = 0
    """Version of those rules (1 = the starting rules)."""

    facts: list[dict[str, Any]] = field(default_factory=list)
    """The user's current facts after this turn: subject, value, category, ..."""

    turn_important: bool = False
    """The memory model flagged this turn's message as worth keeping for good (``log_turn``)."""

    facts_remembered: list[dict[str, Any]] = field(default_factory=list)
    """Facts stored this turn: subject, value, category, action ("added"/"superseded"),
    previous_value. A client can say "I'll remember that you're vegetarian"."""

    summary: str = ""
    """Rolling summary of turns removed from ``messages`` by compaction."""

    token_report: dict[str, Any] = field(default_factory=dict)
    """Tokens per context layer in this turn's prompt, items left out, compaction."""

    model_calls: Annotated[list[dict[str, Any]], append_or_replace] = field(default_factory=list)
    """Every model call of this turn (purpose, model, tokens, seconds)."""

    reflection: dict[str, Any] | None = None
    """The episode stored when the conversation ended (this run only). ``fallback`` (a reason)
    is set when the memory model's reflection failed or copied its prompt: the episode then
    holds what the user said and no lesson."""

    rules_version_created: int | None = None
    """The rules version this conversation end created (this run only)."""

    rules_proposal: dict[str, Any] | None = None
    """With the shared rules: this end's proposal (id, rules, status), for an operator."""

    conversation_ended: bool = False
    """True after a run that ended the conversation."""

    conversations: int = 0
    """How many conversations of this thread have ended (numbers the episodes)."""

    reflected_through: str | None = None
    """Id of the last message covered by a reflection; a later reflection starts after it."""

    turn_answered: bool = False
    """Set by ``log_turn`` before an end, so ``reflect`` adds to the turn's ``model_calls``."""


RUN_FIELDS = frozenset({"messages", "settled_messages", "run_before", "run_failures"})
"""Fields a rollback does not restore from ``run_before``: the messages (restored from
``settled_messages``) and the bookkeeping of the run itself."""


class Summary(BaseModel):
    """The rolling summary of older turns (what the memory model writes when compacting)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=1500, description="The updated summary.")
