"""The graph's nodes and routers.

One run is one user turn. A new user message fans out to ``recall_episodic``,
``recall_semantic``, ``load_procedural`` and ``remember_facts`` (in parallel, each writing
its own state keys), joins at ``compact`` and continues to ``generate`` and ``log_turn``.
When the input ends the conversation, ``reflect`` stores an episode and
``update_procedural`` may write a new rules version. Every store, file, model and
embedding call is awaited off the event loop (``langgraph dev`` rejects blocking calls).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.runtime import Runtime

import prompts
from graph.context import Context
from graph.context_window import (
    assemble_context,
    count_tokens,
    load_tokenizer,
    pack_items,
    plan_compaction,
)
from graph.resources import Resources, aget_resources
from graph.schemas import MAX_RULES, ExtractedFacts, Reflection, RuleSet, Summary
from graph.state import State, replace_calls
from llm.calls import StructuredOutputError, ainvoke_structured, ainvoke_text
from memory.knowledge import asearch_knowledge
from memstore import GLOBAL_SCOPE, InvalidInputError, check_user_id

__all__ = [
    "FAN_OUT",
    "MissingUserIdError",
    "compact",
    "generate",
    "load_procedural",
    "log_turn",
    "recall_episodic",
    "recall_semantic",
    "reflect",
    "remember_facts",
    "route_after_turn",
    "route_turn",
    "update_procedural",
]

logger = logging.getLogger(__name__)

FAN_OUT = ("recall_episodic", "recall_semantic", "load_procedural", "remember_facts")
"""The nodes a new user message starts, in parallel."""

DEFAULT_THREAD = "default"
"""Thread id used when a run has none (a graph compiled without a checkpointer)."""

_NONE = "(none)"


class MissingUserIdError(InvalidInputError):
    """A run was started without ``context.user_id``."""


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
    if not ctx.user_id or not ctx.user_id.strip():
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
    for m in messages:
        if isinstance(m, HumanMessage):
            lines.append(f"user: {_text(m)}")
        elif isinstance(m, AIMessage) and _text(m).strip():
            lines.append(f"assistant: {_text(m)}")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool: {_text(m)}")
    return "\n".join(lines)


def _scope(ctx: Context, user: str) -> str:
    return GLOBAL_SCOPE if ctx.rules_scope == "global" else user


def _label(chunk: dict[str, Any]) -> str:
    name = Path(str(chunk["source"])).name
    start, end = int(chunk["page_start"]), int(chunk["page_end"])
    pages = f"p.{start}" if start == end else f"p.{start}-{end}"
    return f"[{name} {pages}]"


def _config() -> RunnableConfig:
    try:
        return get_config()
    except RuntimeError:
        # Called outside a graph run (a direct call): no thread, default resources.
        return {}


async def _setup(runtime: Runtime[Context]) -> tuple[Context, str, Resources]:
    ctx = _context(runtime)
    user = _user(ctx)
    return ctx, user, await aget_resources(_config(), ctx)


# -- routers --------------------------------------------------------------------------------


def route_turn(state: State, runtime: Runtime[Context]) -> list[str] | Literal["reflect"]:
    """Start a turn: fan out on a new user message, or go straight to ``reflect``.

    Raises:
        MissingUserIdError: the run has no ``context.user_id`` (nothing is written).
        InvalidInputError: there is neither a new message nor ``end_conversation``.
    """
    _user(_context(runtime))
    if _new_message(state) is not None:
        return list(FAN_OUT)
    if state.end_conversation:
        return "reflect"
    raise InvalidInputError(
        "nothing to do: send a new user message, or end_conversation=true to end the conversation"
    )


def route_after_turn(state: State) -> Literal["reflect", "__end__"]:
    """After the answer: reflect when the input ended the conversation, else stop."""
    return "reflect" if state.end_conversation else "__end__"


# -- recall (fan-out) -----------------------------------------------------------------------


async def recall_episodic(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Recall this user's past episodes and messages from other threads."""
    ctx, user, res = await _setup(runtime)
    query = _text(_require_new_message(state))
    if not query.strip():
        return {"episodes": [], "past_turns": []}
    episodes: list[dict[str, Any]] = []
    if ctx.episodic_k:
        recalled = await res.episodes.arecall(
            user,
            query,
            k=ctx.episodic_k,
            alpha=ctx.episodic_alpha,
            half_life_days=ctx.recency_half_life_days,
        )
        episodes = [r.to_dict() for r in recalled]
    past: list[dict[str, Any]] = []
    if ctx.past_turns_k:
        hits = await res.messages.arecall(
            user,
            query,
            k=ctx.past_turns_k,
            alpha=ctx.past_turns_alpha,
            exclude_thread=_thread(_config()),
        )
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
        ]
    return {"episodes": episodes, "past_turns": past}


async def recall_semantic(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search the context's knowledge bases; passages keep their source and pages."""
    ctx, _, res = await _setup(runtime)
    query = _text(_require_new_message(state))
    if not ctx.semantic_k or not ctx.knowledge_bases or not query.strip():
        return {"chunks": []}
    found = await asyncio.gather(
        *(
            asearch_knowledge(
                res.memory_store,
                res.embeddings,
                kb,
                query,
                k=ctx.semantic_k,
                alpha=ctx.semantic_alpha,
            )
            for kb in ctx.knowledge_bases
        )
    )
    chunks: list[dict[str, Any]] = []
    for kb, hits in zip(ctx.knowledge_bases, found, strict=True):
        for h in hits:
            chunk = {
                "chunk_id": h.chunk_id,
                "kb": kb,
                "text": h.text,
                "source": h.source,
                "title": h.title,
                "page_start": h.page_start,
                "page_end": h.page_end,
                "score": round(float(h.score), 4),
            }
            chunk["label"] = _label(chunk)
            chunks.append(chunk)
    chunks.sort(key=lambda c: -float(c["score"]))
    return {"chunks": chunks[: ctx.semantic_k]}


async def load_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Load the rules in force (the user's, or the global set)."""
    ctx, user, res = await _setup(runtime)
    latest = await res.rules.alatest(_scope(ctx, user))
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
    ctx, user, res = await _setup(runtime)
    message = _require_new_message(state)
    known = await res.facts.acurrent(user)
    calls: list[dict[str, Any]] = []
    changes: list[dict[str, Any]] = []
    if ctx.extract_facts and _text(message).strip():
        prompt = (await prompts.aload("fact_extraction")).format(
            known_facts="\n".join(f"- {f.subject}: {f.value}" for f in known) or _NONE,
            message=_text(message),
        )
        model = await res.abackground_model(ctx)
        try:
            extracted, records = await ainvoke_structured(
                model, ExtractedFacts, [HumanMessage(prompt)], purpose="facts"
            )
        except StructuredOutputError as exc:
            logger.warning("fact extraction skipped this turn: %s", exc)
            calls = [c.to_dict() for c in exc.calls]
        else:
            calls = [c.to_dict() for c in records]
            if extracted.facts:
                stored = await res.facts.aremember(
                    user, extracted.facts, source_thread=_thread(_config())
                )
                changes = [c.to_dict() for c in stored]
                known = await res.facts.acurrent(user)
    return {
        "facts": [f.to_dict() for f in known],
        "facts_remembered": changes,
        "model_calls": replace_calls(calls),
        "reflection": None,
        "rules_version_created": None,
        "conversation_ended": False,
    }


# -- the turn -------------------------------------------------------------------------------


async def compact(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Fold the oldest turns into the rolling summary once the recent turns pass the threshold.

    A no-op until the history passes ``compaction_threshold`` of ``budget_recent``; then the
    summarised messages are removed from the state (never an AI tool call without its
    tool results).
    """
    ctx, _, res = await _setup(runtime)
    await asyncio.to_thread(load_tokenizer)
    history = _history(state)
    plan = plan_compaction(history, budget=ctx.budget_recent, threshold=ctx.compaction_threshold)
    if plan is None:
        return {}
    prompt = (await prompts.aload("summary")).format(
        previous_summary=state.summary or _NONE, messages=_transcript(plan.summarise)
    )
    model = await res.abackground_model(ctx)
    summary, records = await ainvoke_structured(
        model, Summary, [HumanMessage(prompt)], purpose="summary"
    )
    removals: list[BaseMessage] = [RemoveMessage(id=m.id) for m in plan.summarise if m.id]
    return {
        "summary": summary.text,
        "messages": removals,
        "model_calls": [c.to_dict() for c in records],
    }


def _history(state: State) -> list[AnyMessage]:
    if state.messages and isinstance(state.messages[-1], HumanMessage):
        return list(state.messages[:-1])
    return list(state.messages)


def _render_rules(state: State) -> str:
    if not state.rules:
        return ""
    lines = [f"Behaviour rules (version {state.rules_version}):"]
    lines += [f"{i}. {r['instruction']} – {r['rationale']}" for i, r in enumerate(state.rules, 1)]
    return "\n".join(lines)


def _render_episode(e: dict[str, Any]) -> str:
    tags = ", ".join(e.get("context_tags") or [])
    return (
        f"- {str(e.get('created_at', ''))[:10]} [{tags}] {e.get('conversation_summary', '')}\n"
        f"  What worked: {e.get('what_worked', '')}\n"
        f"  What to avoid: {e.get('what_to_avoid', '')}"
    )


async def generate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Answer the new message from the token-budgeted context.

    Raises:
        ContextOverflowError: a layer that cannot be dropped is over its budget.
    """
    ctx, _, res = await _setup(runtime)
    await asyncio.to_thread(load_tokenizer)
    new_message = _require_new_message(state)
    budgets = ctx.budgets
    system = (await prompts.aload("system")).format().strip()
    facts_text = ""
    if state.facts:
        facts_text = (
            (await prompts.aload("user_facts"))
            .format(
                facts="\n".join(
                    f"- {f['subject']}: {f['value']} ({f.get('category', 'other')})"
                    for f in state.facts
                )
            )
            .strip()
        )
    summary_text = (
        f"Summary of earlier turns of this conversation:\n{state.summary}" if state.summary else ""
    )
    constraints = "; ".join(
        f"{f['subject']}: {f['value']}" for f in state.facts if f.get("category") == "constraint"
    )
    now = datetime.now(UTC).isoformat(timespec="minutes")
    turn_prompt = await prompts.aload("turn_context")
    semantic_prompt = await prompts.aload("semantic_context")

    episodic_items = [_render_episode(e) for e in state.episodes]
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
    chunk_items = [f"{c['label']} {c['text']}" for c in state.chunks]
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
        rules=_render_rules(state),
        facts=facts_text,
        summary=summary_text,
        recent=_history(state),
        variable=variable,
        new_message=new_message,
        budgets=budgets,
        left_out={"episodic": left_episodic, "semantic": left_semantic},
    )
    model = await res.achat_model(ctx)
    answer, call = await ainvoke_text(model, assembled.messages, purpose="answer")
    report = {
        "layers": dict(assembled.tokens),
        "left_out": dict(assembled.left_out),
        "prompt_tokens": assembled.total,
        "budget_total": budgets.total,
    }
    return {"messages": [answer], "token_report": report, "model_calls": [call.to_dict()]}


async def log_turn(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Write this turn's user message and answer to the message log (for later recall)."""
    _, user, res = await _setup(runtime)
    last_human = max(
        (i for i, m in enumerate(state.messages) if isinstance(m, HumanMessage)), default=None
    )
    if last_human is None:
        raise InvalidInputError("log_turn found no user message in this turn")
    turn = [
        m
        for m in state.messages[last_human:]
        if isinstance(m, HumanMessage | AIMessage) and _text(m).strip()
    ]
    await res.messages.aremember(user, _thread(_config()), turn)
    return {"turn_answered": state.end_conversation}


# -- end of conversation --------------------------------------------------------------------


async def reflect(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Reflect on the finished conversation and store it as an episode.

    The reflection must validate against :class:`graph.schemas.Reflection`; the model
    gets a repair and one retry, then the run fails with ``StructuredOutputError`` and
    nothing is stored. An empty conversation ends without an episode.
    """
    ctx, user, res = await _setup(runtime)
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
    update: dict[str, Any] = {"conversation_ended": True, "rules_version_created": None}
    if fresh_run:
        update["facts_remembered"] = []
    if not transcript.strip():
        update["reflection"] = None
        if fresh_run:
            update["model_calls"] = replace_calls([])
        return update
    prompt = (await prompts.aload("reflection")).format(conversation=transcript)
    model = await res.abackground_model(ctx)
    reflection, records = await ainvoke_structured(
        model, Reflection, [HumanMessage(prompt)], purpose="reflection"
    )
    number = state.conversations + 1
    thread = _thread(_config())
    episode_id = await res.episodes.astore(
        user, thread, reflection, transcript, conversation=number
    )
    calls = [c.to_dict() for c in records]
    update.update(
        reflection={
            "id": episode_id,
            "thread_id": thread,
            "conversation": number,
            **reflection.model_dump(),
        },
        conversations=number,
        reflected_through=state.messages[-1].id if state.messages else None,
        model_calls=replace_calls(calls) if fresh_run else calls,
    )
    return update


async def update_procedural(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rewrite the rules from the new reflection; a change is stored as a new version.

    Only the reflection's tags, what worked and what to avoid reach the prompt, never
    the user's or a document's text. The new version records the episode and the user.
    """
    done = {"end_conversation": False, "turn_answered": False}
    ctx, user, res = await _setup(runtime)
    reflection = state.reflection
    if not reflection:
        return {**done, "rules_version_created": None}
    scope = _scope(ctx, user)
    current = await res.rules.alatest(scope)
    lesson = (
        f"- tags: {', '.join(reflection.get('context_tags') or []) or _NONE}\n"
        f"  what worked: {reflection['what_worked']}\n"
        f"  what to avoid: {reflection['what_to_avoid']}"
    )
    prompt = (await prompts.aload("procedural_update")).format(
        current_rules=current.render(), reflections=lesson, max_rules=MAX_RULES
    )
    model = await res.abackground_model(ctx)
    ruleset, records = await ainvoke_structured(
        model, RuleSet, [HumanMessage(prompt)], purpose="rules"
    )
    created = await res.rules.apropose(
        scope,
        ruleset.rules,
        source_episodes=[str(reflection["id"])],
        source_users=[user],
        note=(
            f"rewritten after conversation {reflection.get('conversation')} "
            f"of thread {reflection.get('thread_id')}"
        ),
    )
    return {
        **done,
        "rules_version_created": created.version if created else None,
        "model_calls": [c.to_dict() for c in records],
    }
