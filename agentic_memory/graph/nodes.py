"""The graph's nodes and routers.

One run is one user turn. ``admit`` checks the run first (:mod:`agentic_memory.graph.admission`:
the thread belongs to the user of its first run, and the new input must fit); a refused input
is removed from the thread again and the run fails in ``refuse`` with the reason. An admitted
user message fans out to ``recall_episodic``, ``recall_semantic``, ``load_procedural`` and
``remember_facts`` (in parallel, each writing its own state keys), joins at ``compact`` and
continues to ``generate`` and ``log_turn``. When the input ends the conversation, ``reflect``
stores an episode and ``update_procedural`` may write a new rules version. Nodes reach memory
through :mod:`agentic_memory.graph.memory` only; every store, file, model and embedding call
is awaited off the event loop (``langgraph dev`` rejects blocking calls).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.runtime import Runtime

from agentic_memory import prompts
from agentic_memory.graph.admission import (
    InputRefusedError,
    MissingUserIdError,
    RunFailedError,
    ThreadOwnershipError,
    admit,
    fail,
    refuse,
    rollback,
    run_context,
    run_thread,
    run_user,
    settled,
)
from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import count_tokens, load_tokenizer, plan_compaction
from agentic_memory.graph.memory import AgentMemory, extract_facts, memory_of
from agentic_memory.graph.prompting import (
    COMPACT_RECENT,
    ECHOED_ANSWER_NOTICE,
    NONE,
    SUMMARY_HEADING,
    citation_of,
    compact_context,
    excerpt,
    fit_tokens,
    full_context,
    guard_answer,
    history_of,
    is_notice,
    model_reflection,
    pending_chain,
    plain_reflection,
    prompt_openings,
    repeats_last_answer,
    transcript_of,
    without_notices,
)
from agentic_memory.graph.resources import answer_model, background_model
from agentic_memory.graph.state import State, Summary, message_text, replacing
from agentic_memory.kinds.model_output import leak_at
from agentic_memory.models.calls import (
    MODEL_ERRORS,
    ModelCall,
    ainvoke_structured,
    ainvoke_text,
    calls_of,
)
from agentic_memory.models.chat import describe_model, limit_answer_tokens, model_class
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError

__all__ = [
    "ECHOED_ANSWER_NOTICE",
    "FAN_OUT",
    "AnswerFailedError",
    "InputRefusedError",
    "MissingUserIdError",
    "RunFailedError",
    "ThreadOwnershipError",
    "admit",
    "compact",
    "extract_facts",
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

FAN_OUT = ("recall_episodic", "recall_semantic", "load_procedural", "remember_facts")
"""The nodes a new user message starts, in parallel."""

GLOBAL_RULES_ENV = "AMEM_GLOBAL_RULES"
"""Operator setting: ``learn`` lets conversation ends propose changes to the rules shared by
every user (an operator approves them); anything else (the default) keeps them read-only for runs."""


async def _setup(runtime: Runtime[Context]) -> tuple[Context, str, AgentMemory]:
    ctx = run_context(runtime, Context)
    return ctx, run_user(ctx), memory_of(runtime.store)


def _new_message(state: State) -> HumanMessage | None:
    if state.messages and isinstance(state.messages[-1], HumanMessage):
        return state.messages[-1]
    return None


def _require_new_message(state: State) -> HumanMessage:
    message = _new_message(state)
    if message is None:
        raise InvalidInputError("this node needs a new user message as the last message")
    return message


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

_PAST_TURN_KEYS = ("id", "role", "content", "thread_id", "turn", "created_at")
_CHUNK_KEYS = ("text", "source", "title", "section", "page_start", "page_end")


async def recall_episodic(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Recall this user's past episodes and messages from other threads."""
    ctx, user, mem = await _setup(runtime)
    query = message_text(_require_new_message(state))
    if not query.strip():
        return {"episodes": [], "past_turns": []}
    episodes: list[dict[str, Any]] = []
    if ctx.episodic_k:
        episodes = [r.to_dict() for r in await mem.recall_episodes(ctx, user, query)]
    past: list[dict[str, Any]] = []
    if ctx.past_turns_k:
        hits = await mem.recall_turns(ctx, user, query, run_thread())
        openings = await prompt_openings()
        past = [
            {**{k: getattr(h, k) for k in _PAST_TURN_KEYS}, "score": round(float(h.score), 4)}
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
    query = message_text(_require_new_message(state))
    if not ctx.semantic_k or not ctx.knowledge_bases or not query.strip():
        return {"chunks": []}
    chunks: list[dict[str, Any]] = []
    for kb, own, h in await mem.search_knowledge(ctx, user, query):
        chunk = {
            "chunk_id": h.chunk_id,
            "kb": kb,
            "own": own,
            **{k: getattr(h, k) for k in _CHUNK_KEYS},
            "score": round(float(h.score), 4),
            "similarity": round(h.similarity, 4),
        }
        chunk["label"] = citation_of(chunk)
        chunks.append(chunk)
    chunks.sort(key=lambda c: -float(c["score"]))
    return {"chunks": chunks[: ctx.semantic_k]}


async def load_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Load the rules in force (the user's, or the global set)."""
    ctx, user, mem = await _setup(runtime)
    return await mem.rules_in_force(mem.rules_scope(ctx, user))


async def remember_facts(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Extract durable facts from the new message and store them (superseding old values).

    It also starts the turn's bookkeeping: ``model_calls`` and the end-of-conversation
    outputs of an earlier run are reset here. A reply that stays malformed after the
    repair and retry is logged and skipped: a turn never fails for want of a fact
    (:func:`agentic_memory.kinds.facts.extraction.extract_facts`).
    """
    ctx, user, mem = await _setup(runtime)
    message = message_text(_require_new_message(state))
    known = await mem.current_facts(user)
    calls: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    important = False
    if ctx.extract_facts and message.strip():
        model = await background_model(ctx)
        known_text = [f"{f.subject}: {f.value}" for f in known]
        found, important, records = await extract_facts(model, message, known_text)
        calls = [c.to_dict() for c in records]
        stored = await mem.remember_facts(user, found, run_thread())
        if stored:
            changes = [c.to_dict() for c in stored]
            known = await mem.current_facts(user)
    return {
        "facts": [f.to_dict() for f in known],
        "facts_remembered": changes,
        "turn_important": important,
        "model_calls": replacing(calls),
        "reflection": None,
        "rules_version_created": None,
        "rules_proposal": None,
        "conversation_ended": False,
    }


# -- the turn -------------------------------------------------------------------------------


async def compact(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Fold the oldest turns into the rolling summary once the recent turns pass the threshold.

    A no-op until the history passes ``compaction_threshold`` of ``budget_recent``; then the
    summarised messages are removed from the state (never an AI tool call without its
    tool results).
    """
    ctx, _, mem = await _setup(runtime)
    await asyncio.to_thread(load_tokenizer)
    history = history_of(state)
    plan = plan_compaction(history, budget=ctx.budget_recent, threshold=ctx.compaction_threshold)
    if plan is None:
        return {}
    prompt = (await prompts.aload("summary")).format(
        previous_summary=state.summary or NONE, messages=transcript_of(plan.summarise)
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
        text = excerpt(state.summary, plan.summarise)
    removals: list[BaseMessage] = [RemoveMessage(id=m.id) for m in plan.summarise if m.id]
    # The notices among the summarised turns go with them (the plan never sees them), so
    # a long offline session does not keep them in its state for good.
    summarised = {m.id for m in plan.summarise if m.id}
    last = max((i for i, m in enumerate(state.messages) if m.id in summarised), default=-1)
    removals += [
        RemoveMessage(id=m.id) for m in state.messages[: last + 1] if is_notice(m) and m.id
    ]
    room = ctx.budget_summary - count_tokens(SUMMARY_HEADING) - 2
    return {
        "summary": fit_tokens(text, room),
        "messages": removals,
        "model_calls": [c.to_dict() for c in records],
    }


class AnswerFailedError(RuntimeError):
    """The chat model failed while answering: this turn failed, the thread is as it was."""


async def generate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Answer the new message from the token-budgeted context, in the run's prompt profile.

    An answer that runs into a turn marker or a prompt layer is cut there when what comes
    before is an answer of its own, else replaced by a notice (:func:`guard_answer`).

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
    with_turns = None
    if compact:
        with_turns, system = await compact_context(state, ctx, mem, new_message)
        assembled = with_turns(COMPACT_RECENT)
    else:
        assembled, system = await full_context(state, ctx, new_message)
    answer, call = await _answer(model, assembled.messages)
    calls = [call]
    retried = with_turns is not None and repeats_last_answer(answer, state)
    if retried and with_turns is not None:
        # Asked again without the last exchange, the small model has no answer to copy.
        assembled = with_turns(0)
        answer, call = await _answer(model, assembled.messages)
        calls.append(call)
    report: dict[str, Any] = {
        "profile": "compact" if compact else "full",
        "layers": dict(assembled.tokens),
        "left_out": dict(assembled.left_out),
        "prompt_tokens": assembled.total,
        "budget_total": ctx.budgets.total,
    }
    if retried:
        report["answer_retried"] = "the model repeated its previous answer"
    answer, why = await guard_answer(answer, state, new_message, system, small=kind != "capable")
    if why is not None:
        report["answer_cut" if not is_notice(answer) else "answer_replaced"] = why
    if not answer.id:
        answer.id = str(uuid.uuid4())
    return {
        "messages": [answer],
        "settled_through": answer.id,
        "token_report": report,
        "model_calls": [c.to_dict() for c in calls],
    }


async def _answer(model: BaseChatModel, messages: list[BaseMessage]) -> tuple[AIMessage, ModelCall]:
    try:
        return await ainvoke_text(model, messages, purpose="answer")
    except MODEL_ERRORS as exc:
        raise AnswerFailedError(
            f"the chat model ({describe_model(model)}) failed while answering: "
            f"{type(exc).__name__}: {exc}. This turn was not kept and the thread is as it was "
            "before it; send the message again (the next call reaches the model anew)."
        ) from exc


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
        for m in without_notices(state.messages[last_human:])
        if isinstance(m, HumanMessage | AIMessage) and message_text(m).strip()
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
    await mem.log_turn(ctx, user, run_thread(), turn)
    if state.end_conversation:
        return {"turn_answered": True}
    return {"turn_answered": False, **settled(state)}


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
    transcript = transcript_of(messages)
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
            update["model_calls"] = replacing([])
        return update
    model = await background_model(ctx)
    kind = model_class(model)
    if kind == "capable":
        reflection, records, fallback = await model_reflection(model, transcript)
    else:
        # Measured with SmolLM2: its lessons were invented ("Ines is a Japanese-style sushi
        # chef") and the rules rewritten from them were nonsense, so a small model writes no
        # lesson and the rules stay; AMEM_MODEL_CLASS=capable opts a trusted model in.
        reflection, records, fallback = None, [], f"a {kind} model writes no lessons"
    if reflection is None or fallback is not None:
        # The conversation still ends and is remembered: an episode holding what the user
        # said, with no lesson in it (update_procedural learns nothing from it).
        logger.warning("the episode holds no lesson: %s", fallback)
        reflection = plain_reflection(messages, state.summary if start == 0 else "")
    number = state.conversations + 1
    thread = run_thread()
    episode_id = await mem.store_episode(user, thread, reflection, transcript, number)
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
        pending_reflection={**stored, "earlier": [*pending_chain(earlier)]} if earlier else stored,
        conversations=number,
        reflected_through=state.messages[-1].id if state.messages else None,
        model_calls=replacing(calls) if fresh_run else calls,
    )
    return update


async def update_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rewrite the rules from the new reflection; a change is stored as a new version.

    Only the reflection's tags, what worked and what to avoid reach the prompt, never the
    user's or a document's text. The model's rules are screened (nothing about other users,
    no data disclosure, no disguised text, no personal data in the shared rules) and rebased
    on a version another end created meanwhile (each conflict in ``rules_conflicts``);
    an end that still cannot store it keeps its episode pending for the next end
    (:func:`agentic_memory.kinds.rules.learning.alearn`). The rules
    shared by every user are never changed by a conversation: with the operator's
    ``AMEM_GLOBAL_RULES=learn`` the rewrite becomes a proposal an operator reviews
    (``amem memories rules review``); without it, nothing is even proposed.
    """
    done: dict[str, Any] = {
        **settled(state),
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
    pending = pending_chain(state.pending_reflection)
    if not pending and state.reflection:
        pending = [state.reflection]
    if not pending:
        return done
    scope = mem.rules_scope(ctx, user)
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
    learned = await mem.learn_rules(
        await background_model(ctx),
        scope=scope,
        user=user,
        lessons=lessons,
        personal=[str(f.get("value", "")) for f in state.facts] + [user],
        openings=await prompt_openings(),
    )
    update = {
        **done,
        "rules_rejected": learned.rejected,
        "rules_conflicts": learned.conflicts,
        "rules_note": learned.note,
        "rules_version_created": learned.version_created,
        "rules_proposal": learned.proposal,
        "model_calls": learned.calls,
    }
    if learned.keep_pending:
        # Learned from again by the next end of this conversation.
        update["pending_reflection"] = state.pending_reflection or state.reflection
    return update
