"""Admission and rollback: who a run acts for, whether its input is taken, and undoing a failed run.

``admit`` checks the run before anything is read or written; a refused input and a node's
error both go to ``rollback``, which puts the thread back exactly as it was, and ``refuse``
fails the run with the reason (or the node's own error). The errors waiting for ``refuse``
are kept by the compiled graph that ran them (:class:`RunErrors`), never process-wide.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import NodeError
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from agentic_memory.checkpoints import adrop_run
from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import count_message_tokens, load_tokenizer
from agentic_memory.graph.memory import MAX_MESSAGE_CHARS, memory_of
from agentic_memory.graph.resources import run_config
from agentic_memory.graph.state import (
    RUN_FIELDS,
    State,
    message_text,
    replacing,
)
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError, StoreError, check_user_id

__all__ = [
    "ERRORS_KEY",
    "InputRefusedError",
    "MissingUserIdError",
    "RunErrors",
    "RunFailedError",
    "ThreadOwnershipError",
    "admit",
    "fail",
    "refuse",
    "rollback",
    "run_context",
    "run_thread",
    "run_user",
    "settled",
]

logger = logging.getLogger(__name__)
_Schema = TypeVar("_Schema")

DEFAULT_THREAD = "default"
"""Thread id used when a run has none (a graph compiled without a checkpointer)."""

ERRORS_KEY = "__amem_run_errors"
"""The ``configurable`` key of the compiled graph's :class:`RunErrors` (the ``__`` prefix keeps
it out of checkpoint metadata)."""


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


# -- the run -------------------------------------------------------------------------------


def run_context(runtime: Runtime[Any] | None, schema: type[_Schema]) -> _Schema:
    """Return the run's context (a dict given by a client becomes a ``schema``)."""
    ctx: Any = runtime.context if runtime is not None else None
    if ctx is None:
        return schema()
    if isinstance(ctx, dict):
        return schema(**ctx)
    if not isinstance(ctx, schema):
        raise TypeError(
            f"the run context must be a {schema.__name__} or a dict, got {type(ctx).__name__}"
        )
    return ctx


def run_user(ctx: Context) -> str:
    """Return the run's user: ``context.user_id``, else the server-authenticated user."""
    if not ctx.user_id or not ctx.user_id.strip():
        authenticated = (run_config().get("configurable") or {}).get("langgraph_auth_user_id")
        if authenticated:
            return run_user(replace(ctx, user_id=str(authenticated)))
        raise MissingUserIdError(
            "context.user_id is required: pass context={'user_id': ...} with the run "
            "(memory is kept per user); nothing was written"
        )
    if ctx.user_id == GLOBAL_SCOPE:
        raise InvalidInputError(f"user id {GLOBAL_SCOPE!r} is reserved for the shared rules")
    return check_user_id(ctx.user_id)


def run_thread(config: RunnableConfig | None = None) -> str:
    """Return the run's thread id (this run's when no config is given)."""
    if config is None:
        config = run_config()
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return str(thread) if thread else DEFAULT_THREAD


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


def settled(state: State) -> dict[str, Any]:
    """Return what the last node of a completed run writes: the new copy, no rollback data."""
    return {
        "settled_messages": list(state.messages),
        "run_before": None,
        "run_failures": replacing([]),
        "end_conversation": False,
    }


def _check_text(message: BaseMessage, budget: int) -> str | None:
    """Say why a new message cannot be taken, or None when it can."""
    text = message_text(message)
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
    refused, so the input never reaches a prompt, a memory or a later turn. Either way,
    the values the thread had before the run are kept in ``run_before`` until it completes.
    """
    # A graph compiled without agentic memory's store cannot work at all: say so first.
    memory = memory_of(runtime.store)
    given = _split_input(state)
    start = _run_start(state, given)

    def refused(kind: str, message: str) -> dict[str, Any]:
        return {"run_before": start, "run_failures": [{"kind": kind, "message": message}]}

    try:
        ctx = run_context(runtime, Context)
        user = run_user(ctx)
    except (InvalidInputError, TypeError, ValueError) as exc:
        return refused("user", str(exc))
    # Who ran it: until ``refuse`` deletes a rolled-back run's checkpoints (from the one this
    # node started from on), they hold its input; forgetting the user finds them by this
    # (agentic_memory.forget) when they stay (a process killed before, a checkpointer that
    # cannot delete single checkpoints).
    start["user"] = user
    start["checkpoint"] = _checkpoint_of(run_config())
    configurable = run_config().get("configurable") or {}
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
        owner = await memory.thread_owner(user, run_thread())
    if owner is not None and owner != user:
        return refused(
            "owner",
            f"thread {run_thread()!r} belongs to another user: start a new thread; "
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
    last = new[-1].id if new else state.settled_through
    return {"owner": user, "settled_through": last, "run_before": start}


class RunFailedError(RuntimeError):
    """A run failed in a node whose error cannot be raised again in this process."""


class RunErrors:
    """The errors of a compiled graph's failed runs, until ``refuse`` raises them again.

    ``rollback`` runs between the failing node and ``refuse``, so the error itself (not only
    its message) waits here, by token; the oldest go past :data:`KEPT` (a run whose
    ``refuse`` never came).
    """

    KEPT = 256

    def __init__(self) -> None:
        self._errors: OrderedDict[str, BaseException] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, error: BaseException) -> str:
        """Keep an error; return its token."""
        token = uuid.uuid4().hex
        with self._lock:
            self._errors[token] = error
            while len(self._errors) > self.KEPT:
                self._errors.popitem(last=False)
        return token

    def take(self, token: str) -> BaseException | None:
        """Return and forget the error of a token (None: unknown here)."""
        with self._lock:
            return self._errors.pop(token, None)

    def __len__(self) -> int:
        return len(self._errors)


def _run_errors() -> RunErrors | None:
    found = (run_config().get("configurable") or {}).get(ERRORS_KEY)
    return found if isinstance(found, RunErrors) else None


async def fail(state: State, error: NodeError) -> Command[Literal["rollback"]]:
    """Handle a node's error (the graph's error handler): roll the run back, then fail it.

    The error waits in :class:`RunErrors` for ``refuse`` to raise it again once ``rollback``
    has restored the thread. An error of ``rollback`` or ``refuse`` fails the run at once.
    """
    del state
    if error.node in ("rollback", "refuse"):
        raise error.error
    failure = {
        "kind": "error",
        "node": error.node,
        "message": f"{type(error.error).__name__}: {error.error}"[:2000],
    }
    errors = _run_errors()
    if errors is not None:
        failure["token"] = errors.keep(error.error)
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
            update[name] = replacing(value) if name == "model_calls" else value
    if list(state.messages) != before:
        update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *before]
    update.update(run_before=None, run_failures=replacing([]))
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
    try:
        await memory_of(runtime.store).take_back_turns(user, run_thread(), keys, started_at)
    except (StoreError, InvalidInputError) as exc:
        logger.warning("could not take back the turns a failed run logged: %s", exc)


async def refuse(failure: dict[str, str]) -> None:
    """Fail the run with the reason ``admit`` or the failing node gave (after ``rollback``).

    A node's own error is raised again (``RunFailedError`` with its message when it was
    raised in another process); a refusal as its ``InvalidInputError`` subclass.
    """
    await _drop_run(str(failure.get("since", "")))
    errors = _run_errors()
    error = None if errors is None else errors.take(str(failure.get("token", "")))
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
    config = run_config()
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
        await adrop_run(checkpointer, run_thread(config), since, head)
    except Exception:  # the refusal is what the caller must see, not a cleanup's failure
        logger.exception("the checkpoints of a rolled-back run could not be deleted")


# -- routers --------------------------------------------------------------------------------
