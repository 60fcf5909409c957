"""The graph's nodes and routers.

One run is one user turn. ``admit`` checks the run first: the thread belongs to the user of
its first run, and the new input must fit; a refused input is removed from the thread again
and the run fails in ``refuse`` with the reason. An admitted user message fans out to ``recall_episodic``,
``recall_semantic``, ``load_procedural`` and ``remember_facts`` (in parallel, each writing
its own state keys), joins at ``compact`` and continues to ``generate`` and ``log_turn``.
When the input ends the conversation, ``reflect`` stores an episode and
``update_procedural`` may write a new rules version. Every store, file, model and
embedding call is awaited off the event loop (``langgraph dev`` rejects blocking calls).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import os
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config
from langgraph.errors import NodeError
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel

from agentic_memory import prompts
from agentic_memory.api import Memory
from agentic_memory.checkpoints import adrop_run
from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import (
    assemble_compact,
    assemble_context,
    count_message_tokens,
    count_tokens,
    load_tokenizer,
    pack_items,
    plan_compaction,
)
from agentic_memory.graph.resources import answer_model, background_model, memory_of
from agentic_memory.graph.state import RUN_FIELDS, State, Summary, replace_calls, reset_failures
from agentic_memory.kinds.episodes import Reflection, render_episode
from agentic_memory.kinds.facts import (
    ExtractedFact,
    ExtractedFacts,
    is_secret,
    mentions_secret,
    normalise_subject,
    render_constraints,
    render_facts,
)
from agentic_memory.kinds.knowledge import (
    citation_label,
    default_relevance_floor,
)
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS
from agentic_memory.kinds.model_output import (
    is_protected,
    keep_protected,
    layer_openings,
    leak_at,
    longest_copy,
    mangled,
    prompt_echo,
)
from agentic_memory.kinds.rule_guard import RejectedRule, screen_rules
from agentic_memory.kinds.rules import (
    MAX_RULES,
    Rule,
    RuleConflictError,
    RuleScreenError,
    RuleSet,
    rebase_backoff,
    rebase_rules,
    render_rules,
    rules_scope,
)
from agentic_memory.kinds.self_statements import (
    extract_self_statements,
    looks_like_self_statement,
    merge_facts,
    plausible_fact,
    supported_fact,
)
from agentic_memory.models.calls import (
    MODEL_ERRORS,
    ModelCall,
    ainvoke_structured,
    ainvoke_text,
    calls_of,
)
from agentic_memory.models.chat import describe_model, limit_answer_tokens, model_class
from agentic_memory.store import (
    GLOBAL_SCOPE,
    InvalidInputError,
    StoreError,
    check_user_id,
)

__all__ = [
    "FAN_OUT",
    "InputRefusedError",
    "MissingUserIdError",
    "RunFailedError",
    "ThreadOwnershipError",
    "admit",
    "compact",
    "fail",
    "generate",
    "load_procedural",
    "log_turn",
    "recall_episodic",
    "recall_semantic",
    "reflect",
    "refuse",
    "remember_facts",
    "rollback",
    "route_after_turn",
    "route_turn",
    "update_procedural",
]

logger = logging.getLogger(__name__)
_RULES_ATTEMPTS = 5
"""Model rewrites of the rules when a rebase cannot take another version in (the cap)."""
_REBASES = 64
"""Rebases of one rewrite on versions other conversations created meanwhile."""

FAN_OUT = ("recall_episodic", "recall_semantic", "load_procedural", "remember_facts")
"""The nodes a new user message starts, in parallel."""

DEFAULT_THREAD = "default"
"""Thread id used when a run has none (a graph compiled without a checkpointer)."""

_NONE = "(none)"


class MissingUserIdError(InvalidInputError):
    """A run was started without ``context.user_id``."""


class ThreadOwnershipError(InvalidInputError):
    """A run's user is not the user the thread belongs to."""


class InputRefusedError(InvalidInputError):
    """A run's new input cannot be taken (too long, invalid text, nothing to do)."""


_REFUSALS: dict[str, type[InvalidInputError]] = {
    "user": MissingUserIdError,
    "owner": ThreadOwnershipError,
    "input": InputRefusedError,
}

GLOBAL_RULES_ENV = "AMEM_GLOBAL_RULES"
"""Operator setting: ``learn`` lets conversation ends propose changes to the rules shared by
every user (an operator approves them); anything else (the default) keeps them read-only for runs."""


# -- helpers --------------------------------------------------------------------------------


def _context(runtime: Runtime[Context] | None) -> Context:
    ctx: Any = runtime.context if runtime is not None else None
    if ctx is None:
        return Context()
    if isinstance(ctx, dict):
        return Context(**ctx)
    if not isinstance(ctx, Context):
        raise TypeError(f"the run context must be a Context or a dict, got {type(ctx).__name__}")
    return ctx


def _user(ctx: Context) -> str:
    """Return the run's user: ``context.user_id``, else the server-authenticated user."""
    if not ctx.user_id or not ctx.user_id.strip():
        authenticated = (_config().get("configurable") or {}).get("langgraph_auth_user_id")
        if authenticated:
            return _user(replace(ctx, user_id=str(authenticated)))
        raise MissingUserIdError(
            "context.user_id is required: pass context={'user_id': ...} with the run "
            "(memory is kept per user); nothing was written"
        )
    if ctx.user_id == GLOBAL_SCOPE:
        raise InvalidInputError(f"user id {GLOBAL_SCOPE!r} is reserved for the shared rules")
    return check_user_id(ctx.user_id)


def _thread(config: RunnableConfig | None) -> str:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(thread) if thread else DEFAULT_THREAD


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [b if isinstance(b, str) else str(b.get("text", "")) for b in content]
    return "\n".join(p for p in parts if p)


def _new_message(state: State) -> HumanMessage | None:
    if state.messages and isinstance(state.messages[-1], HumanMessage):
        return state.messages[-1]
    return None


def _require_new_message(state: State) -> HumanMessage:
    message = _new_message(state)
    if message is None:
        raise InvalidInputError("this node needs a new user message as the last message")
    return message


def _transcript(messages: Sequence[BaseMessage]) -> str:
    lines = []
    for m in _without_notices(messages):
        if isinstance(m, HumanMessage):
            lines.append(f"user: {_text(m)}")
        elif isinstance(m, AIMessage) and _text(m).strip():
            lines.append(f"assistant: {_text(m)}")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool: {_text(m)}")
    return "\n".join(lines)


def _scope(ctx: Context, user: str) -> str:
    return rules_scope(user, shared=ctx.rules_scope == "global")


def _label(chunk: dict[str, Any]) -> str:
    return citation_label(str(chunk["source"]), int(chunk["page_start"]), int(chunk["page_end"]))


def _passage(chunk: dict[str, Any]) -> str:
    # The heading tells the model what a passage cut mid-section is about; the label stays
    # first so the citation the model copies is still matched by plain comparison.
    section = str(chunk.get("section") or "")
    where = f" ({section})" if section else ""
    return f"{chunk['label']}{where} {chunk['text']}"


def _config() -> RunnableConfig:
    try:
        return get_config()
    except RuntimeError:
        # Called outside a graph run (a direct call): no thread, default resources.
        return {}


async def _setup(runtime: Runtime[Context]) -> tuple[Context, str, Memory]:
    ctx = _context(runtime)
    user = _user(ctx)
    return ctx, user, memory_of(runtime.store)


# -- admission ------------------------------------------------------------------------------


def _new_input(state: State) -> list[AnyMessage]:
    """Return the messages this run's input added: those after the last settled one.

    A thread from before ``settled_through`` existed (or whose settled message was removed
    from the state) counts the trailing user messages as new.
    """
    messages = list(state.messages)
    ids = [m.id for m in messages]
    if state.settled_through is not None and state.settled_through in ids:
        return messages[ids.index(state.settled_through) + 1 :]
    start = len(messages)
    while start > 0 and isinstance(messages[start - 1], HumanMessage):
        start -= 1
    return messages[start:]


@dataclass(frozen=True)
class _Input:
    """A run's input against the thread's history."""

    before: list[AnyMessage]
    """The thread's messages before the input."""
    new: list[AnyMessage]
    """The messages the input added."""
    rewritten: list[AnyMessage]
    """Earlier messages the input rewrote (sent again under their id with other content)."""
    kept: bool
    """Whether ``before`` is the thread's kept copy (``settled_messages``), which a
    rollback restores; otherwise it is saved with the run (``run_before``)."""


def _split_input(state: State) -> _Input:
    """Tell the thread's history from this run's input (LangGraph applied it before ``admit``).

    The kept copy of the settled messages says exactly what the thread held; a thread from
    before the copy was kept, or whose last run died without completing or rolling back,
    falls back to ``settled_through``.
    """
    if state.settled_messages is not None and state.run_before is None:
        before = list(state.settled_messages)
        current = {m.id: m for m in state.messages}
        rewritten = [current[m.id] for m in before if m.id in current and current[m.id] != m]
        known = {m.id for m in before}
        new = [m for m in state.messages if m.id not in known]
        return _Input(before, new, rewritten, kept=True)
    new = _new_input(state)
    added = {id(m) for m in new}
    return _Input([m for m in state.messages if id(m) not in added], new, [], kept=False)


def _run_start(state: State, given: _Input) -> dict[str, Any]:
    """Return what a rollback restores: every field's value before this run, and its start.

    Only ``messages`` and ``end_conversation`` can be changed by a run's input; every other
    field still holds its value from before the run when ``admit`` (the first node) reads
    it. ``end_conversation`` is False between runs (a completed end resets it, a rollback
    restores it).
    """
    values = {
        f.name: copy.deepcopy(getattr(state, f.name))
        for f in fields(State)
        if f.name not in RUN_FIELDS
    }
    values["end_conversation"] = False
    start: dict[str, Any] = {"values": values, "started_at": datetime.now(UTC).isoformat()}
    if not given.kept:
        start["messages"] = list(given.before)
    return start


def _settled(state: State) -> dict[str, Any]:
    """Return what the last node of a completed run writes: the new copy, no rollback data."""
    return {
        "settled_messages": list(state.messages),
        "run_before": None,
        "run_failures": reset_failures(),
        "end_conversation": False,
    }


def _check_text(message: BaseMessage, budget: int) -> str | None:
    """Say why a new message cannot be taken, or None when it can."""
    text = _text(message)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "the message contains invalid Unicode (a lone surrogate): nothing was kept"
    if len(text) > MAX_MESSAGE_CHARS:
        return (
            f"the message has {len(text):,} characters; at most {MAX_MESSAGE_CHARS:,} are "
            "accepted: nothing was kept (ingest long documents with `amem ingest` instead)"
        )
    tokens = count_message_tokens([message])
    if tokens > budget:
        return (
            f"the message needs {tokens:,} tokens but this conversation takes at most "
            f"{budget:,} per message (budget_recent): shorten it, raise budget_recent, or "
            "ingest it as a document with `amem ingest`; nothing was kept"
        )
    return None


async def admit(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Check the run before anything is read or written: its user, the thread's owner, the input.

    A thread belongs to the user of its first run. A run by anyone else, a run without a
    user, and input that cannot be taken (invalid text, longer than ``MAX_MESSAGE_CHARS``
    or than ``budget_recent`` tokens, or no message and no end of conversation) are
    refused: ``rollback`` puts the thread back exactly as it was (its messages from the
    copy the last completed run kept, whatever the input removed or rewrote), so the input
    never reaches a prompt, a memory or a later turn, and ``refuse`` fails the run with
    the reason. Either way, the values the thread had before the run are kept in
    ``run_before`` until the run completes.
    """
    # A graph compiled without agentic memory's store cannot work at all: say so first.
    memory = memory_of(runtime.store)
    given = _split_input(state)
    start = _run_start(state, given)

    def refused(kind: str, message: str) -> dict[str, Any]:
        return {"run_before": start, "run_failures": [{"kind": kind, "message": message}]}

    try:
        ctx = _context(runtime)
        user = _user(ctx)
    except (InvalidInputError, TypeError, ValueError) as exc:
        return refused("user", str(exc))
    # Who ran it: until ``refuse`` deletes a rolled-back run's checkpoints (from the one this
    # node started from on), they hold its input; forgetting the user finds them by this
    # (agentic_memory.forget) when they stay (a process killed before, a checkpointer that
    # cannot delete single checkpoints).
    start["user"] = user
    start["checkpoint"] = _checkpoint_of(_config())
    configurable = _config().get("configurable") or {}
    authenticated = configurable.get("langgraph_auth_user_id")
    if authenticated and str(authenticated) != user:
        return refused(
            "owner",
            f"context.user_id {user!r} is not the authenticated user: runs act for the "
            "user the server authenticated; nothing was read or written",
        )
    owner = state.owner
    if owner is None and len(given.before) + len(given.new) > 1:
        # History without an owner: a thread from before owners were recorded (or a first
        # input of several messages, which no log names: then it is claimed below).
        owner = await memory.messages.athread_owner(user, _thread(_config()))
    if owner is not None and owner != user:
        return refused(
            "owner",
            f"thread {_thread(_config())!r} belongs to another user: start a new thread; "
            "nothing was read or written",
        )
    new = given.new
    if not any(isinstance(m, HumanMessage) for m in new) and not state.end_conversation:
        return refused(
            "input",
            "nothing to do: send a new user message, or end_conversation=true to end the "
            "conversation",
        )
    await asyncio.to_thread(load_tokenizer)
    # A rewritten earlier message is input too: it reaches the prompt like a new one.
    for message in [*given.rewritten, *new]:
        problem = _check_text(message, ctx.budget_recent)
        if problem is not None:
            return refused("input", problem)
    settled = new[-1].id if new else state.settled_through
    return {"owner": user, "settled_through": settled, "run_before": start}


class RunFailedError(RuntimeError):
    """A run failed in a node whose error cannot be raised again in this process."""


_FAILED: OrderedDict[str, BaseException] = OrderedDict()
"""Errors of failed runs until ``refuse`` raises them again, by token (this process)."""
_FAILED_LOCK = threading.Lock()
_FAILED_KEPT = 256


def _keep_error(error: BaseException) -> str:
    token = uuid.uuid4().hex
    with _FAILED_LOCK:
        _FAILED[token] = error
        while len(_FAILED) > _FAILED_KEPT:
            _FAILED.popitem(last=False)
    return token


def _take_error(token: str) -> BaseException | None:
    with _FAILED_LOCK:
        return _FAILED.pop(token, None)


async def fail(state: State, error: NodeError) -> Command[Literal["rollback"]]:
    """Handle a node's error (the graph's error handler): roll the run back, then fail it.

    The error is kept (in this process) for ``refuse`` to raise again once ``rollback`` has
    restored the thread. An error of ``rollback`` or ``refuse`` themselves fails the run.
    """
    del state
    if error.node in ("rollback", "refuse"):
        raise error.error
    failure = {
        "kind": "error",
        "node": error.node,
        "message": f"{type(error.error).__name__}: {error.error}"[:2000],
        "token": _keep_error(error.error),
    }
    return Command(update={"run_failures": [failure]}, goto="rollback")


async def rollback(state: State, runtime: Runtime[Context]) -> Command[Literal["refuse"]]:
    """Put a refused or failed run's thread back exactly as it was, then fail the run.

    Every field gets its value from before the run again (from ``run_before``; the messages
    from the kept copy), including ``end_conversation``: a refused end never ends the
    conversation later. The turns a failed run logged are taken back from the message log,
    so the thread and its log agree; what it stored in long-term memory otherwise (facts
    the user stated, an episode) stays, and the same run sent again replaces the episode.
    """
    failures = state.run_failures or [{"kind": "error", "message": "the run failed"}]
    start = state.run_before
    if start is None:
        # admit itself failed: the state is the thread plus this run's input.
        start = _run_start(state, _split_input(state))
    before: list[AnyMessage] = list(
        start["messages"] if "messages" in start else state.settled_messages or []
    )
    if failures[0].get("kind") == "error" and state.run_before is not None:
        await _take_back_logged(state, runtime, before, str(start.get("started_at", "")))
    update: dict[str, Any] = {}
    for name, value in start["values"].items():
        if getattr(state, name) != value:
            update[name] = replace_calls(value) if name == "model_calls" else value
    if list(state.messages) != before:
        update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *before]
    update.update(run_before=None, run_failures=reset_failures())
    refusal = {**failures[0], "since": str(start.get("checkpoint") or "")}
    return Command(update=update, goto=Send("refuse", refusal))


async def _take_back_logged(
    state: State, runtime: Runtime[Context], before: Sequence[BaseMessage], started_at: str
) -> None:
    """Forget the turns this run logged (those of its own messages, logged since it began)."""
    user = state.owner
    if user is None or not started_at:
        return
    known = {m.id for m in before}
    keys = [str(m.id) for m in state.messages if m.id and m.id not in known]
    if not keys:
        return
    mem = memory_of(runtime.store)
    try:
        await mem.messages.aforget_logged_since(user, _thread(_config()), keys, started_at)
    except (StoreError, InvalidInputError) as exc:
        logger.warning("could not take back the turns a failed run logged: %s", exc)


async def refuse(failure: dict[str, str]) -> None:
    """Fail the run with the reason ``admit`` or the failing node gave (after ``rollback``).

    Raises:
        MissingUserIdError: the run has no ``context.user_id``.
        ThreadOwnershipError: the thread belongs to another user.
        InputRefusedError: the input cannot be taken.
        Exception: the error a node raised (``RunFailedError`` with its message when it
            was raised in another process).
    """
    await _drop_run(str(failure.get("since", "")))
    error = _take_error(str(failure.get("token", "")))
    if error is not None:
        raise error
    kind, message = failure.get("kind", ""), failure.get("message", "")
    raise _REFUSALS.get(kind, RunFailedError)(message or "the run failed")


def _checkpoint_of(config: RunnableConfig) -> str:
    """Return the id of the checkpoint the current step started from ("" outside a run)."""
    found = (config.get("configurable") or {}).get("checkpoint_map") or {}
    return str(found.get("", "")) if isinstance(found, Mapping) else ""


async def _drop_run(since: str) -> None:
    """Delete the checkpoints the rolled-back run wrote before the restored one.

    Its input (a refused 2 MB message, a failed run's message) is in them; the thread's
    history keeps nothing of it (:func:`agentic_memory.checkpoints.adrop_run`). Nothing to
    do when LangGraph saves only at the end of a run (``durability="exit"``), or without a
    checkpointer.
    """
    config = _config()
    configurable = config.get("configurable") or {}
    # LangGraph's keys for the run's checkpointer and durability (langgraph._internal).
    checkpointer = configurable.get("__pregel_checkpointer")
    head = _checkpoint_of(config)
    if (
        not since
        or not head
        or not isinstance(checkpointer, BaseCheckpointSaver)
        or configurable.get("__pregel_durability") == "exit"
    ):
        return
    try:
        await adrop_run(checkpointer, _thread(config), since, head)
    except Exception:  # the refusal is what the caller must see, not a cleanup's failure
        logger.exception("the checkpoints of a rolled-back run could not be deleted")


# -- routers --------------------------------------------------------------------------------


def route_turn(state: State) -> list[str] | Literal["reflect", "rollback"]:
    """After admission: fan out on a new user message, go to ``reflect``, or roll back."""
    if state.run_failures:
        return "rollback"
    if _new_message(state) is not None:
        return list(FAN_OUT)
    return "reflect"


def route_after_turn(state: State) -> Literal["reflect", "__end__"]:
    """After the answer: reflect when the input ended the conversation, else stop."""
    return "reflect" if state.end_conversation else "__end__"


# -- recall (fan-out) -----------------------------------------------------------------------


async def recall_episodic(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Recall this user's past episodes and messages from other threads."""
    ctx, user, mem = await _setup(runtime)
    query = _text(_require_new_message(state))
    if not query.strip():
        return {"episodes": [], "past_turns": []}
    episodes: list[dict[str, Any]] = []
    if ctx.episodic_k:
        recalled = await mem.episodes.arecall(
            user,
            query,
            k=ctx.episodic_k,
            alpha=ctx.episodic_alpha,
            half_life_days=ctx.recency_half_life_days,
        )
        episodes = [r.to_dict() for r in recalled]
    past: list[dict[str, Any]] = []
    if ctx.past_turns_k:
        hits = await mem.messages.arecall(
            user,
            query,
            k=ctx.past_turns_k,
            alpha=ctx.past_turns_alpha,
            exclude_thread=_thread(_config()),
        )
        openings = await _layer_openings()
        past = [
            {
                "id": h.id,
                "role": h.role,
                "content": h.content,
                "thread_id": h.thread_id,
                "turn": h.turn,
                "created_at": h.created_at,
                "score": round(float(h.score), 4),
            }
            for h in hits
            # A turn logged before answers were checked may hold the prompt: never recalled.
            if leak_at(h.content, openings) is None
        ]
    return {"episodes": episodes, "past_turns": past}


async def recall_semantic(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search the context's knowledge bases; passages keep their source and pages.

    Each name in ``knowledge_bases`` is searched twice: the shared knowledge base of that
    name, and the user's own one (what they uploaded); never another user's.
    """
    ctx, user, mem = await _setup(runtime)
    query = _text(_require_new_message(state))
    if not ctx.semantic_k or not ctx.knowledge_bases or not query.strip():
        return {"chunks": []}
    searches = [(kb, owner) for kb in ctx.knowledge_bases for owner in (None, user)]
    floor = ctx.semantic_min_similarity
    if floor is None:
        floor = default_relevance_floor(mem.embeddings)
    found = await asyncio.gather(
        *(
            mem.asearch_knowledge(
                kb,
                query,
                k=ctx.semantic_k,
                alpha=ctx.semantic_alpha,
                owner=owner,
                min_similarity=floor,
            )
            for kb, owner in searches
        )
    )
    chunks: list[dict[str, Any]] = []
    for (kb, owner), hits in zip(searches, found, strict=True):
        for h in hits:
            chunk = {
                "chunk_id": h.chunk_id,
                "kb": kb,
                "own": owner is not None,
                "text": h.text,
                "source": h.source,
                "title": h.title,
                "section": h.section,
                "page_start": h.page_start,
                "page_end": h.page_end,
                "score": round(float(h.score), 4),
                "similarity": round(h.similarity, 4),
            }
            chunk["label"] = _label(chunk)
            chunks.append(chunk)
    chunks.sort(key=lambda c: -float(c["score"]))
    return {"chunks": chunks[: ctx.semantic_k]}


async def load_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Load the rules in force (the user's, or the global set)."""
    ctx, user, mem = await _setup(runtime)
    latest = await mem.rules.alatest(_scope(ctx, user))
    return {
        "rules": [{"instruction": r.instruction, "rationale": r.rationale} for r in latest.rules],
        "rules_version": latest.version,
    }


async def remember_facts(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Extract durable facts from the new message and store them (superseding old values).

    It also starts the turn's bookkeeping: ``model_calls`` and the end-of-conversation
    outputs of an earlier run are reset here. A reply that stays malformed after the
    repair and retry is logged and skipped: a turn never fails for want of a fact.
    """
    ctx, user, mem = await _setup(runtime)
    message = _require_new_message(state)
    known = await mem.facts.acurrent(user)
    calls: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    important = False
    if ctx.extract_facts and _text(message).strip():
        model = await background_model(ctx)
        known_text = [f"{f.subject}: {f.value}" for f in known]
        found, important, records = await extract_facts(model, _text(message), known_text)
        calls = [c.to_dict() for c in records]
        usable = _usable_facts(found)
        if usable:
            stored = await mem.facts.aremember(user, usable, source_thread=_thread(_config()))
            changes = [c.to_dict() for c in stored]
            known = await mem.facts.acurrent(user)
    return {
        "facts": [f.to_dict() for f in known],
        "facts_remembered": changes,
        "turn_important": important,
        "model_calls": replace_calls(calls),
        "reflection": None,
        "rules_version_created": None,
        "rules_proposal": None,
        "conversation_ended": False,
    }


async def extract_facts(
    model: BaseChatModel, message: str, known: Sequence[str] = ()
) -> tuple[list[ExtractedFact], bool, list[ModelCall]]:
    """Extract the durable facts of a user message with the memory model (and self-statements).

    Only facts the message supports are kept, whatever the model. For a small model (the
    bundled one or a small endpoint: :func:`agentic_memory.models.chat.model_class`) the
    message's self-statements are always read
    (:func:`agentic_memory.kinds.self_statements.extract_self_statements`) and the model's
    own facts are kept only when plausible: a short key and a value taken from the message
    (:func:`~agentic_memory.kinds.self_statements.plausible_fact`); the offline base model
    answered an empty list to every plain statement measured, and SmolLM2 copies the
    prompt's examples; for a message that states nothing in the first person (a question,
    a request) and asks nothing to be remembered, a small model is not even asked. A
    capable model's facts are kept when the message supports them
    (:func:`~agentic_memory.kinds.self_statements.supported_fact`). A secret the user states
    (a PIN, a password, a card number: :func:`agentic_memory.kinds.facts.is_secret`) is never
    a fact, and a message naming one is never marked important. A model that fails (an
    invalid reply after the retry, an API error, a dead server) costs the turn nothing: the
    facts are then the message's self-statements.

    Args:
        model: The memory model.
        message: The user's message.
        known: The user's current facts, "subject: value".

    Returns:
        The facts, whether the message is important, and the model calls made.
    """
    small = model_class(model) != "capable"
    if small and not (looks_like_self_statement(message) or _REMEMBER.search(message)):
        # A question or a request states no fact, and a small model's facts from one were
        # never kept: its call (the slower half of a small model's turn) is not made.
        return [], False, []
    template = await prompts.aload("fact_extraction")
    prompt = template.format(
        known_facts="\n".join(f"- {k}" for k in known) or _NONE, message=message
    )
    secret = mentions_secret(message)
    try:
        extracted, records = await ainvoke_structured(
            model, ExtractedFacts, [HumanMessage(prompt)], purpose="facts"
        )
    except MODEL_ERRORS as exc:
        logger.warning("fact extraction fell back to self-statements this turn: %s", exc)
        return _not_secret(extract_self_statements(message)), False, calls_of(exc)
    facts = list(extracted.facts)
    if not small:
        facts = [f for f in facts if supported_fact(f, message, template.template)]
    else:
        own = [f for f in facts if plausible_fact(f, message)]
        facts = merge_facts(extract_self_statements(message), own)
    return _not_secret(facts), bool(extracted.important) and not secret, records


_REMEMBER = re.compile(r"\b(?:remember|note|keep in mind|don't forget)\b", re.IGNORECASE)


def _not_secret(facts: Sequence[ExtractedFact]) -> list[ExtractedFact]:
    kept = [f for f in facts if not is_secret(f)]
    if len(kept) < len(facts):
        logger.warning("a secret the user stated was not stored as a fact")
    return kept


def _usable_facts(facts: Sequence[ExtractedFact]) -> list[ExtractedFact]:
    """Keep the extracted facts the store accepts; a bad one is logged, never fails the turn."""
    usable = []
    for fact in facts:
        try:
            normalise_subject(fact.subject)
            if not fact.value.strip():
                raise InvalidInputError("fact value is empty")
        except InvalidInputError as exc:
            logger.warning("skipped an extracted fact (%s): %r", exc, fact.subject)
            continue
        usable.append(fact)
    return usable


# -- the turn -------------------------------------------------------------------------------


async def compact(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Fold the oldest turns into the rolling summary once the recent turns pass the threshold.

    A no-op until the history passes ``compaction_threshold`` of ``budget_recent``; then the
    summarised messages are removed from the state (never an AI tool call without its
    tool results).
    """
    ctx, _, mem = await _setup(runtime)
    await asyncio.to_thread(load_tokenizer)
    history = _history(state)
    plan = plan_compaction(history, budget=ctx.budget_recent, threshold=ctx.compaction_threshold)
    if plan is None:
        return {}
    prompt = (await prompts.aload("summary")).format(
        previous_summary=state.summary or _NONE, messages=_transcript(plan.summarise)
    )
    model = await background_model(ctx)
    try:
        summary, records = await ainvoke_structured(
            model, Summary, [HumanMessage(prompt)], purpose="summary"
        )
        text = summary.text
    except MODEL_ERRORS as exc:
        # The turns must leave the window all the same, or every later turn would try (and
        # fail) again: they are kept as an excerpt, the user's words and the answers cut short.
        logger.warning("compaction kept an excerpt instead of a summary: %s", exc)
        records = calls_of(exc)
        text = _excerpt(state.summary, plan.summarise)
    removals: list[BaseMessage] = [RemoveMessage(id=m.id) for m in plan.summarise if m.id]
    # The notices among the summarised turns go with them (the plan never sees them), so
    # a long offline session does not keep them in its state for good.
    summarised = {m.id for m in plan.summarise if m.id}
    last = max((i for i, m in enumerate(state.messages) if m.id in summarised), default=-1)
    removals += [
        RemoveMessage(id=m.id) for m in state.messages[: last + 1] if _is_notice(m) and m.id
    ]
    room = ctx.budget_summary - count_tokens(_SUMMARY_HEADING) - 2
    return {
        "summary": _fit_tokens(text, room),
        "messages": removals,
        "model_calls": [c.to_dict() for c in records],
    }


_SUMMARY_HEADING = "Summary of earlier turns of this conversation:\n"
_EXCERPT_CHARS = 300


def _excerpt(previous: str, messages: Sequence[BaseMessage]) -> str:
    """Return the rolling summary without a model: the old summary, then each turn cut short."""
    lines = [previous.strip()] if previous.strip() else []
    for line in _transcript(messages).splitlines():
        cut = line if len(line) <= _EXCERPT_CHARS else line[: _EXCERPT_CHARS - 1] + "…"
        lines.append(cut)
    return "\n".join(lines) or _NONE


def _fit_tokens(text: str, budget: int) -> str:
    """Keep the end of a rolling summary within ``budget`` tokens (the oldest part goes)."""
    if count_tokens(text) <= budget:
        return text
    words = text.split(" ")
    low, high = 1, len(words)
    while low < high:  # the fewest leading words to drop
        middle = (low + high) // 2
        if count_tokens("… " + " ".join(words[middle:])) <= budget:
            high = middle
        else:
            low = middle + 1
    return "… " + " ".join(words[low:]) if low < len(words) else ""


def _history(state: State) -> list[AnyMessage]:
    messages = state.messages
    if messages and isinstance(messages[-1], HumanMessage):
        messages = messages[:-1]
    return _without_notices(messages)


ECHOED_ANSWER_NOTICE = (
    "(The model repeated its prompt instead of answering, so no answer was kept. "
    "The offline model is a very small model; a short, direct question works best, and "
    "OPENAI_API_KEY or AMEM_BASE_URL gives a model that answers well.)"
)
NOTICE_MARK = "amem_notice"
"""``additional_kwargs`` key of an answer the agent wrote itself in place of the model's."""
RECITED_WORDS = 20
"""An offline answer that copies this many words in a row from the user's earlier turns
recites the transcript (the base model continuing it) rather than answering. An answer
that recalls what the user said ("You told me you live in Berlin and work as a nurse")
copies far fewer; repeating an earlier answer is not counted."""
_NOTICE_OPENING = "(The model repeated its "
"""How every notice begins, the wording of earlier versions ("its instructions") included."""
_Message = TypeVar("_Message", bound=BaseMessage)


def _is_notice(message: BaseMessage) -> bool:
    if not isinstance(message, AIMessage):
        return False
    text = _text(message)
    return bool(message.additional_kwargs.get(NOTICE_MARK)) or (
        text.startswith(_NOTICE_OPENING) and "so no answer was kept" in text
    )


def _without_notices(messages: Sequence[_Message]) -> list[_Message]:
    # A notice is shown to the user only: as model input the base model copied it into
    # every later answer (seen in a whole offline session), and it is nobody's memory.
    return [m for m in messages if not _is_notice(m)]


class AnswerFailedError(RuntimeError):
    """The chat model failed while answering: this turn failed, the thread is as it was."""


async def generate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Answer the new message from the token-budgeted context, in the run's prompt profile.

    An answer that runs into a turn marker or a prompt layer is cut there when what comes
    before is an answer of its own, else replaced by a notice (:func:`_guard_answer`).

    Raises:
        ContextOverflowError: a layer that cannot be dropped is over its budget.
        AnswerFailedError: the model (or its server) failed: the run fails with that one
            message and the thread is put back as it was (``rollback``).
    """
    ctx, _, mem = await _setup(runtime)
    await asyncio.to_thread(load_tokenizer)
    new_message = _require_new_message(state)
    model = limit_answer_tokens(await answer_model(ctx), ctx.answer_max_tokens)
    kind = model_class(model)
    compact = ctx.prompt_profile == "compact" or (
        ctx.prompt_profile == "auto" and kind != "capable"
    )
    if compact:
        assembled, system = await _compact_context(state, ctx, mem, new_message)
    else:
        assembled, system = await _full_context(state, ctx, new_message)
    try:
        answer, call = await ainvoke_text(model, assembled.messages, purpose="answer")
    except MODEL_ERRORS as exc:
        raise AnswerFailedError(
            f"the chat model ({describe_model(model)}) failed while answering: "
            f"{type(exc).__name__}: {exc}. This turn was not kept and the thread is as it was "
            "before it; send the message again (the next call reaches the model anew)."
        ) from exc
    report: dict[str, Any] = {
        "profile": "compact" if compact else "full",
        "layers": dict(assembled.tokens),
        "left_out": dict(assembled.left_out),
        "prompt_tokens": assembled.total,
        "budget_total": ctx.budgets.total,
    }
    answer, why = await _guard_answer(answer, state, new_message, system, small=kind != "capable")
    if why is not None:
        report["answer_cut" if not _is_notice(answer) else "answer_replaced"] = why
    if not answer.id:
        answer.id = str(uuid.uuid4())
    return {
        "messages": [answer],
        "settled_through": answer.id,
        "token_report": report,
        "model_calls": [call.to_dict()],
    }


_OPENINGS: list[str] = []


async def _layer_openings() -> list[str]:
    """Return the openings of every prompt's fixed lines and of the code's layer headings."""
    if not _OPENINGS:

        def read() -> list[str]:
            # The starting rules are content, shown to the model and rewritten by it: not a layer.
            names = [n for n in prompts.available() if n != "procedural_rules"]
            templates = [prompts.load(name).template for name in names]
            headings = [_SUMMARY_HEADING, "Behaviour rules (version", _NO_LESSON]
            return layer_openings(templates, headings)

        # Listing and reading the prompt files touches the disk: off the event loop.
        openings = await asyncio.to_thread(read)
        if not _OPENINGS:
            _OPENINGS.extend(openings)
    return _OPENINGS


MIN_CUT_WORDS = 3
"""An answer cut before a leak keeps at least this many words, or it is replaced by a notice."""


async def _guard_answer(
    answer: AIMessage, state: State, new_message: HumanMessage, system: str, *, small: bool
) -> tuple[AIMessage, str | None]:
    """Keep an answer that is one; cut one that runs into the prompt, replace one that is it.

    The small models (measured: Gemma base, SmolLM2) recite their instructions, continue the
    transcript, or run on past their answer into the prompt's layers and invented turns. The
    user is told so by a notice, which is never model input, logged or reflected on; an
    answer that ran on is kept up to where it did (measured in ``bench/results/answers.md``:
    the part before is the answer).

    Returns:
        The answer to keep and why it was changed (None when it was not).
    """
    text = _text(answer)
    openings = await _layer_openings()
    at = leak_at(text, openings, turns=small)
    if at is not None:
        kept = text[:at].rstrip(" \t\n-:(")
        if len(kept.split()) >= MIN_CUT_WORDS and leak_at(kept, openings, turns=small) is None:
            why = f"the answer ran into the prompt or an invented turn ({text[at : at + 40]!r})"
            logger.warning("%s: it was cut there", why)
            return AIMessage(content=kept, id=answer.id), why
        text = kept
    given = [_text(new_message)] + [str(f.get("value", "")) for f in state.facts]
    echo = prompt_echo(text, system, [*given, state.summary])
    recited = 0
    if small:
        # Only small models continue the transcript instead of answering; a chat model
        # asked to repeat the user's words must be free to.
        said = [_text(m) for m in _history(state) if isinstance(m, HumanMessage)]
        recited = longest_copy(text, said)
    if at is None and echo is None and recited < RECITED_WORDS:
        return answer, None
    if at is not None:
        why = f"the answer was the prompt or an invented turn ({_text(answer)[at : at + 40]!r})"
    elif echo is not None:
        why = f"the model recited its instructions ({echo!r})"
    else:
        why = f"the model recited the conversation ({recited} words in a row)"
    logger.warning("%s: the answer was replaced by a notice", why)
    return AIMessage(content=ECHOED_ANSWER_NOTICE, additional_kwargs={NOTICE_MARK: True}), why


async def _full_context(state: State, ctx: Context, new_message: HumanMessage) -> tuple[Any, str]:
    """Write the full prompt: system prompt and rules, facts, summary, turns, recall, message."""
    budgets = ctx.budgets
    system = (await prompts.aload("system")).format().strip()
    facts_text = ""
    if state.facts:
        facts_text = (
            (await prompts.aload("user_facts")).format(facts=render_facts(state.facts)).strip()
        )
    summary_text = f"{_SUMMARY_HEADING}{state.summary}" if state.summary else ""
    constraints = render_constraints(state.facts)
    now = datetime.now(UTC).isoformat(timespec="minutes")
    turn_prompt = await prompts.aload("turn_context")
    semantic_prompt = await prompts.aload("semantic_context")

    episodic_items = [render_episode(e) for e in state.episodes]
    episodic_items += [
        f"- ({p['role']}, {str(p.get('created_at', ''))[:10]}) {p['content']}"
        for p in state.past_turns
    ]
    kept_episodic, _, left_episodic = pack_items(episodic_items, budgets.episodic)
    n_episodes = len(state.episodes)
    kept_eps = [i for i in kept_episodic if i in episodic_items[:n_episodes]]
    kept_past = [i for i in kept_episodic if i not in kept_eps]

    frame = turn_prompt.format(
        episodes=_NONE,
        past_turns=_NONE,
        knowledge=semantic_prompt.format(chunks=""),
        now=now,
        constraints=constraints or _NONE,
    )
    # The frame (headings, time, constraints) is paid from the semantic budget, with a
    # margin because tokens can merge across the joins.
    semantic_room = max(0, budgets.semantic - count_tokens(frame) - 16)
    chunk_items = [_passage(c) for c in state.chunks]
    kept_chunks, _, left_semantic = pack_items(chunk_items, semantic_room)
    variable = turn_prompt.format(
        episodes="\n".join(kept_eps) or _NONE,
        past_turns="\n".join(kept_past) or _NONE,
        knowledge=(
            semantic_prompt.format(chunks="\n".join(kept_chunks)).strip()
            if kept_chunks
            else "(no document passages)"
        ),
        now=now,
        constraints=constraints or _NONE,
    ).strip()

    assembled = assemble_context(
        system=system,
        rules=render_rules(state.rules, state.rules_version),
        facts=facts_text,
        summary=summary_text,
        recent=_history(state),
        variable=variable,
        new_message=new_message,
        budgets=budgets,
        left_out={"episodic": left_episodic, "semantic": left_semantic},
    )
    return assembled, system


COMPACT_RECALLED = 2
"""Recalled lines in the compact prompt: a small model is lost among more."""
COMPACT_RECENT = 2
"""Recent messages in the compact prompt (the last exchange; the rest is counted as left
out): SmolLM2 copies the form of its earlier answers into every later one ("I'm happy to
help. What's your job?" to eight questions in a row). Measured on the answers bench, facts
right of 7: 4 messages 1, 2 messages 2, none 3, the user's messages alone 1 (one run each);
the last exchange is kept so that a follow-up question keeps its context."""


async def _compact_context(
    state: State, ctx: Context, mem: Memory, new_message: HumanMessage
) -> tuple[Any, str]:
    """Write the compact prompt: an instruction, facts as short lines, two recalled lines.

    Returns:
        The prompt, and its own text (the instruction, without the memory lines).
    """
    template = await prompts.aload("compact_answer")
    query = _text(new_message)
    facts = await _rank_facts(mem, query, state.facts)
    lines = [f"- your {f['subject']}: {f['value']}" for f in facts]
    recalled: list[str] = []
    if state.chunks:
        recalled.append(f"- from your documents {_passage(state.chunks[0])}")
    said = [p for p in state.past_turns if p.get("role") in ("human", "user")]
    if said:
        recalled.append(f"- you said before: {said[0]['content']}")
    elif state.episodes:
        recalled.append(f"- last time: {state.episodes[0].get('conversation_summary', '')}")
    recalled = recalled[:COMPACT_RECALLED]
    left = len(state.chunks) + len(state.past_turns) + len(state.episodes) - len(recalled)
    constraints = render_constraints(state.facts)
    restated = f"Never suggest anything against: {constraints}." if constraints else ""
    recent = _history(state)

    def frame(memory: str) -> str:
        return template.format(memory=memory or "- (nothing yet)", constraints=restated).strip()

    assembled = assemble_compact(
        frame=frame,
        facts=lines,
        recalled=recalled,
        summary=f"{_SUMMARY_HEADING}{state.summary}" if state.summary else "",
        recent=recent[max(0, len(recent) - COMPACT_RECENT) :],
        new_message=new_message,
        budgets=ctx.budgets,
        left_out={"recalled": left, "recent": max(0, len(recent) - COMPACT_RECENT)},
    )
    # Only the instruction is the prompt's own text: an answer may copy the memory lines
    # ("You work as a pharmacist at a hospital.") and must, to be right.
    return assembled, frame("")


async def _rank_facts(
    mem: Memory, query: str, facts: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Order facts by their similarity to the message, most similar first (embeddings)."""
    if len(facts) < 2 or not query.strip():
        return list(facts)
    texts = [query, *(f"{f['subject']}: {f['value']}" for f in facts)]
    try:
        vectors = await mem.embeddings.aembed_documents(texts)
    except Exception as exc:
        logger.warning("facts not ranked for the compact prompt: %s", exc)
        return list(facts)
    head = vectors[0]

    def similarity(vector: Sequence[float]) -> float:
        dot = sum(a * b for a, b in zip(head, vector, strict=False))
        norm = math.sqrt(sum(a * a for a in vector)) or 1.0
        return float(dot / norm)

    order = sorted(range(len(facts)), key=lambda i: -similarity(vectors[i + 1]))
    return [facts[i] for i in order]


async def log_turn(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Write this turn's user message and answer to the message log (for later recall).

    When the memory model flagged the user message (``turn_important``), it is logged
    marked important, by the model: kept for good and recalled first.
    """
    ctx, user, mem = await _setup(runtime)
    last_human = max(
        (i for i, m in enumerate(state.messages) if isinstance(m, HumanMessage)), default=None
    )
    if last_human is None:
        raise InvalidInputError("log_turn found no user message in this turn")
    turn: list[BaseMessage | dict[str, Any]] = [
        m
        for m in _without_notices(state.messages[last_human:])
        if isinstance(m, HumanMessage | AIMessage) and _text(m).strip()
    ]
    if state.turn_important and turn and isinstance(turn[0], HumanMessage):
        flagged = turn[0]
        turn[0] = {
            "role": "user",
            "content": flagged.content,
            "id": flagged.id,
            "name": flagged.name,
            "important": True,
        }
    await mem.messages.aremember(
        user,
        _thread(_config()),
        turn,
        marked_by="model",
        retention=ctx.retention(mem.retention),
    )
    if state.end_conversation:
        return {"turn_answered": True}
    return {"turn_answered": False, **_settled(state)}


# -- end of conversation --------------------------------------------------------------------


async def reflect(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Reflect on the finished conversation and store it as an episode.

    The reflection must validate against :class:`agentic_memory.kinds.episodes.Reflection`; the model
    gets a repair and one retry, then the run fails with ``StructuredOutputError`` and
    nothing is stored. An empty conversation ends without an episode. The episode stays
    pending until ``update_procedural`` has learned from it, so an end that failed (or a
    process that died) between the two is completed by the next end.
    """
    ctx, user, mem = await _setup(runtime)
    fresh_run = not state.turn_answered
    start = 0
    if state.reflected_through:
        ids = [m.id for m in state.messages]
        if state.reflected_through in ids:
            start = ids.index(state.reflected_through) + 1
    messages = state.messages[start:]
    transcript = _transcript(messages)
    if state.summary and start == 0:
        transcript = f"(summary of earlier turns) {state.summary}\n{transcript}".strip()
    update: dict[str, Any] = {
        "conversation_ended": True,
        "rules_version_created": None,
        "rules_proposal": None,
    }
    if fresh_run:
        update["facts_remembered"] = []
    if not transcript.strip():
        # Nothing new to reflect on; an episode still waiting for its rules update (in
        # pending_reflection) goes on to update_procedural.
        update["reflection"] = None
        if fresh_run:
            update["model_calls"] = replace_calls([])
        return update
    template = await prompts.aload("reflection")
    model = await background_model(ctx)
    fallback: str | None = None
    try:
        reflection, records = await ainvoke_structured(
            model,
            Reflection,
            [HumanMessage(template.format(conversation=transcript))],
            purpose="reflection",
        )
        reflection, echo = _without_echo(
            reflection, template.template, transcript, await _layer_openings()
        )
        if echo is not None:
            fallback = f"the model's reflection copied the prompt ({echo!r})"
    except MODEL_ERRORS as exc:
        records = calls_of(exc)
        fallback = f"the model's reflection failed ({type(exc).__name__}: {exc})"
    if fallback is not None:
        # The conversation still ends and is remembered: an episode holding what the user
        # said, with no lesson in it (update_procedural learns nothing from it).
        logger.warning("the episode holds no lesson: %s", fallback)
        reflection = _plain_reflection(messages, state.summary if start == 0 else "")
    number = state.conversations + 1
    thread = _thread(_config())
    episode_id = await mem.episodes.astore(
        user, thread, reflection, transcript, conversation=number
    )
    calls = [c.to_dict() for c in records]
    stored = {
        "id": episode_id,
        "thread_id": thread,
        "conversation": number,
        **reflection.model_dump(),
        **({"fallback": fallback} if fallback else {}),
    }
    earlier = state.pending_reflection
    update.update(
        reflection=stored,
        # An earlier episode whose update never ran is learned from together with this one.
        pending_reflection={**stored, "earlier": [*_pending_chain(earlier)]} if earlier else stored,
        conversations=number,
        reflected_through=state.messages[-1].id if state.messages else None,
        model_calls=replace_calls(calls) if fresh_run else calls,
    )
    return update


# What the reflection prompt asks for word for word: writing it is no echo.
_INSTRUCTED = ("nothing notable",)
_NO_LESSON = "No lesson recorded: the memory model wrote no usable reflection."


def _without_echo(
    reflection: Reflection, template: str, transcript: str, openings: Sequence[str] = ()
) -> tuple[Reflection, str | None]:
    """Drop tags copied from the prompt; name a text field that copies or mangles it, if one does.

    Mangled (:func:`agentic_memory.kinds.model_output.mangled`): a field holding a turn
    marker or a prompt layer, an unfilled placeholder, or cut at its bound.
    """
    given = [transcript, *_INSTRUCTED]
    for name in ("conversation_summary", "what_worked", "what_to_avoid"):
        echo = prompt_echo(getattr(reflection, name), template, given)
        if echo is not None:
            return reflection, echo
        problem = mangled(
            getattr(reflection, name), bound=_bound(Reflection, name), openings=openings
        )
        if problem is not None:
            return reflection, f"{name} {problem}"
    tags = [t for t in reflection.context_tags if prompt_echo(t, template, given) is None]
    return reflection.model_copy(update={"context_tags": tags}), None


def _plain_reflection(messages: Sequence[BaseMessage], summary: str) -> Reflection:
    """Write the episode of a conversation without a model: what the user said, cut short."""
    said = [_text(m).strip() for m in messages if isinstance(m, HumanMessage)]
    text = " / ".join(s for s in said if s) or summary.strip() or _NONE
    limit = next(
        int(m.max_length)
        for m in Reflection.model_fields["conversation_summary"].metadata
        if getattr(m, "max_length", None) is not None
    )
    summary_text = f"The user said: {text}"
    if len(summary_text) > limit:
        summary_text = summary_text[: limit - 1] + "…"
    return Reflection(
        context_tags=[],
        conversation_summary=summary_text,
        what_worked=_NO_LESSON,
        what_to_avoid=_NO_LESSON,
        importance=0.5,
    )


def _pending_chain(pending: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Flatten pending episodes, oldest first (each may carry the ones before it)."""
    if not pending:
        return []
    own = {k: v for k, v in pending.items() if k != "earlier"}
    return [*pending.get("earlier", []), own]


def _lesson(reflection: dict[str, Any]) -> str:
    return (
        f"- tags: {', '.join(reflection.get('context_tags') or []) or _NONE}\n"
        f"  what worked: {reflection['what_worked']}\n"
        f"  what to avoid: {reflection['what_to_avoid']}"
    )


async def _rewrite_rules(
    model: BaseChatModel, template: prompts.Prompt, current: str, lessons: str
) -> tuple[RuleSet, list[ModelCall]]:
    """Ask the memory model to rewrite ``current`` rules from the pending lessons."""
    prompt = template.format(current_rules=current, reflections=lessons, max_rules=MAX_RULES)
    return await ainvoke_structured(model, RuleSet, [HumanMessage(prompt)], purpose="rules")


def _drop_echoes(
    rules: Sequence[dict[str, str]],
    template: str,
    given: Sequence[str],
    openings: Sequence[str] = (),
) -> tuple[list[dict[str, str]], list[RejectedRule]]:
    """Split rules into those the model wrote and those copying or mangling the prompt.

    Refused: a rule sharing a run of words with the prompt's own text
    (:func:`agentic_memory.kinds.model_output.prompt_echo`), or whose instruction or
    rationale is mangled (:func:`agentic_memory.kinds.model_output.mangled`: a turn marker,
    a prompt layer, an unfilled placeholder, or cut: at its bound or mid-sentence).
    """
    kept: list[dict[str, str]] = []
    echoed: list[RejectedRule] = []
    for rule in rules:
        echo = prompt_echo(rule["instruction"], template, given) or prompt_echo(
            rule["rationale"], template, given
        )
        problem = next(
            (
                f"its {part} {why}"
                for part in ("instruction", "rationale")
                if (why := mangled(rule[part], bound=_bound(Rule, part), openings=openings))
            ),
            None,
        )
        if echo is None and problem is None:
            kept.append(rule)
            continue
        reason = f"copies the prompt's text ({echo!r})" if echo is not None else str(problem)
        echoed.append(RejectedRule(rule["instruction"], rule["rationale"], reason))
    return kept, echoed


def _bound(schema: type[BaseModel], name: str) -> int | None:
    """Return a schema field's ``max_length``, if it has one."""
    for item in schema.model_fields[name].metadata:
        bound = getattr(item, "max_length", None)
        if isinstance(bound, int):
            return bound
    return None


def _rule_dicts(rules: Sequence[Any]) -> list[dict[str, str]]:
    return [{"instruction": r.instruction, "rationale": r.rationale} for r in rules]


def _clean_rules(rules: Sequence[Any]) -> list[dict[str, str]]:
    """Normalise the model's rules; a blank one, or a repeat of an earlier one, is dropped.

    The offline model repeats one rule up to the limit (measured: ten copies of "I am sorry,
    I don't know what to do").
    """
    cleaned = []
    seen: set[str] = set()
    for rule in rules:
        instruction = " ".join(str(getattr(rule, "instruction", "")).split())
        rationale = " ".join(str(getattr(rule, "rationale", "")).split())
        if instruction and rationale and instruction.casefold() not in seen:
            seen.add(instruction.casefold())
            cleaned.append({"instruction": instruction, "rationale": rationale})
    return cleaned


async def update_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rewrite the rules from the new reflection; a change is stored as a new version.

    Only the reflection's tags, what worked and what to avoid reach the prompt, never
    the user's or a document's text. Rules the model wrote are screened before they are
    stored (:func:`agentic_memory.kinds.rule_guard.screen_rules`: nothing about other users, no data
    disclosure, no disguised text, and no personal data in the shared rules); the new version
    records the episode and the user. When another end of the same user created a version
    meanwhile, the rewrite is rebased on it (:func:`agentic_memory.kinds.rules.rebase_rules`,
    each conflict listed in ``rules_conflicts``) and proposed again, bounded; an end that
    still cannot store it keeps its episode pending for the next end.

    The rules shared by every user are never changed by a conversation: with the operator's
    ``AMEM_GLOBAL_RULES=learn`` (where the graph runs), the rewrite becomes a pending proposal
    (:class:`agentic_memory.kinds.shared_rules.SharedRules`) that an operator approves or
    rejects (``amem memories rules review``); without it, nothing is even proposed.
    """
    done: dict[str, Any] = {
        **_settled(state),
        "end_conversation": False,
        "turn_answered": False,
        "pending_reflection": None,
        "rules_rejected": [],
        "rules_conflicts": [],
        "rules_note": None,
        "rules_version_created": None,
        "rules_proposal": None,
    }
    ctx, user, mem = await _setup(runtime)
    pending = _pending_chain(state.pending_reflection)
    if not pending and state.reflection:
        pending = [state.reflection]
    if not pending:
        return done
    scope = _scope(ctx, user)
    if scope == GLOBAL_SCOPE and os.environ.get(GLOBAL_RULES_ENV, "").strip() != "learn":
        return {
            **done,
            "rules_note": (
                "the rules shared by every user are read-only for runs; an operator lets "
                f"conversations propose changes to them with {GLOBAL_RULES_ENV}=learn"
            ),
        }
    # An episode written without the model holds no lesson: nothing to learn from it.
    lessons = [r for r in pending if not r.get("fallback")]
    if not lessons:
        return {**done, "rules_note": "no lesson to learn from: the episode has no reflection"}
    model = await background_model(ctx)
    personal = [str(f.get("value", "")) for f in state.facts] + [user]
    last = lessons[-1]
    note = (
        f"rewritten after conversation {last.get('conversation')} of thread {last.get('thread_id')}"
    )
    episodes = [str(r["id"]) for r in lessons]
    template = await prompts.aload("procedural_update")
    lesson_text = "\n".join(_lesson(r) for r in lessons)
    # The starting rules (version 1) and rules protecting a stated constraint are never
    # dropped by a rewrite (keep_protected).
    starting = _rule_dicts((await mem.rules.aversions(scope))[0].rules)
    calls: list[dict[str, Any]] = []
    conflicts: list[dict[str, Any]] = []

    def model_failed(exc: BaseException) -> dict[str, Any]:
        # The conversation has ended all the same; the episode stays pending, so the next
        # conversation end learns from it too.
        logger.warning("rules not rewritten this time: %s", exc)
        return {
            **done,
            "pending_reflection": state.pending_reflection or state.reflection,
            "rules_conflicts": conflicts,
            "model_calls": calls + [c.to_dict() for c in calls_of(exc)],
            "rules_note": f"the rules were not rewritten: the model failed ({exc})",
        }

    if scope == GLOBAL_SCOPE:
        # Proposals are created, never based on each other: concurrent ends in the shared
        # scope do not conflict (an operator's approval refuses a stale one instead).
        current = await mem.rules.alatest(scope)
        try:
            ruleset, records = await _rewrite_rules(model, template, current.render(), lesson_text)
        except MODEL_ERRORS as exc:
            return model_failed(exc)
        calls += [c.to_dict() for c in records]
        kept, echoed = _drop_echoes(
            _clean_rules(ruleset.rules),
            template.template,
            [current.render(), lesson_text],
            await _layer_openings(),
        )
        result = {**done, "rules_rejected": [r.to_dict() for r in echoed], "model_calls": calls}
        if not kept:
            return {**result, "rules_note": "no change of the shared rules to propose"}
        checked = keep_protected(kept, _rule_dicts(current.rules), starting, max_rules=MAX_RULES)
        if checked.refused is not None:
            logger.warning("shared rules rewrite refused: %s", checked.refused)
            return {**result, "rules_note": f"the rewrite was not proposed: {checked.refused}"}
        proposed = await mem.shared_rules.apropose(
            checked.rules,
            proposer=user,
            base_version=current.version,
            source_episodes=episodes,
            personal_values=personal,
            note=note,
        )
        rejected = [*echoed, *proposed.rejected]
        for item in rejected:
            logger.warning("rule not proposed (%s): %r", item.reason, item.instruction)
        result["rules_rejected"] = [r.to_dict() for r in rejected]
        if proposed.proposal is None:
            return {**result, "rules_note": "no change of the shared rules to propose"}
        return {
            **result,
            "rules_proposal": proposed.proposal.to_dict(),
            "rules_note": (
                f"proposed a change of the shared rules ({proposed.proposal.id}); it applies "
                "once an operator approves it"
            ),
        }
    rejected_all: list[dict[str, str]] = []
    for _ in range(_RULES_ATTEMPTS):
        current = await mem.rules.alatest(scope)
        try:
            ruleset, records = await _rewrite_rules(model, template, current.render(), lesson_text)
        except MODEL_ERRORS as exc:
            return model_failed(exc)
        calls += [c.to_dict() for c in records]
        kept, rejected = screen_rules(_clean_rules(ruleset.rules), shared=False)
        kept, echoed = _drop_echoes(
            kept, template.template, [current.render(), lesson_text], await _layer_openings()
        )
        rejected = [*rejected, *echoed]
        for item in rejected:
            logger.warning("rule not stored (%s): %r", item.reason, item.instruction)
        rejected_all = [r.to_dict() for r in rejected]
        result = {
            **done,
            "rules_rejected": rejected_all,
            "rules_conflicts": conflicts,
            "model_calls": calls,
        }
        if not kept:
            return {**result, "rules_note": "no rule of the rewrite could be stored"}
        checked = keep_protected(kept, _rule_dicts(current.rules), starting, max_rules=MAX_RULES)
        if checked.refused is not None:
            logger.warning("rules rewrite refused: %s", checked.refused)
            return {**result, "rules_note": f"the rewrite was not stored: {checked.refused}"}
        if checked.restored:
            result["rules_note"] = "kept rules the rewrite dropped: " + "; ".join(
                r["instruction"] for r in checked.restored
            )
        base, rules = current, checked.rules
        for rebase in range(1, _REBASES + 1):
            try:
                # Based on the version the model rewrote (or the rewrite was rebased on):
                # another conversation's new version is never replaced by one that did not
                # see it.
                created = await mem.rules.apropose(
                    scope,
                    rules,
                    base_version=base.version,
                    source_episodes=episodes,
                    source_users=[user],
                    note=note,
                )
            except RuleScreenError as exc:
                # A rule kept from the version in force or merged from a newer one that,
                # beside the rewrite's, makes a request: nothing of this end is stored.
                for item in exc.rejected:
                    logger.warning("rule not stored (%s): %r", item.reason, item.instruction)
                return {
                    **result,
                    "rules_rejected": [*rejected_all, *(r.to_dict() for r in exc.rejected)],
                    "rules_note": f"the rewrite was not stored: {exc}",
                }
            except RuleConflictError as exc:
                latest = await mem.rules.alatest(scope)
                merged = _rebased(base.rules, rules, latest.rules, starting)
                conflicts.append(
                    {
                        "based_on": base.version,
                        "found": max(exc.latest_version, latest.version),
                        "resolution": "rebased" if merged is not None else "rewritten",
                    }
                )
                if merged is None:
                    break  # the merge would pass the cap: the model rewrites the latest
                base, rules = latest, merged
                await asyncio.sleep(rebase_backoff(rebase))
                continue
            return {**result, "rules_version_created": created.version if created else None}
        else:
            break  # every rebase met a newer version still: give up for this end
    logger.warning("rules of %r kept changing: this end's rewrite was not stored", scope)
    return {
        **done,
        "rules_rejected": rejected_all,
        "rules_conflicts": conflicts,
        "model_calls": calls,
        # Learned from again by the next end of this conversation.
        "pending_reflection": state.pending_reflection or state.reflection,
        "rules_note": (
            f"the rules kept changing while this conversation rewrote them "
            f"({len(conflicts)} newer versions met): nothing was stored; the next end of "
            "this conversation learns from it again"
        ),
    }


def _rebased(
    base: Sequence[Any],
    mine: Sequence[dict[str, str]],
    theirs: Sequence[Any],
    starting: Sequence[dict[str, str]],
) -> list[dict[str, str]] | None:
    """Replay a rewrite on a newer version (``rebase_rules``), never losing a protected rule.

    Over ten rules the oldest carried-over rules give way, but never a starting rule or
    one protecting a constraint (``is_protected``); when that leaves too many, only a new
    rewrite may choose.
    """
    merged = rebase_rules(
        base,
        mine,
        theirs,
        protected=lambda r: is_protected(
            {"instruction": r.instruction, "rationale": r.rationale}, starting
        ),
    )
    return None if merged is None else _rule_dicts(merged)
