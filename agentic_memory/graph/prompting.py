"""What the models are given and what is kept of what they write.

The answer's prompt in its two profiles (``full``: every layer in its token budget;
``compact``: an instruction, the facts as short lines and two recalled lines, for small
models), the rolling summary's text, and the checks on what a model wrote: an answer that
runs into the prompt is cut or replaced by a notice (never model input, logged or
reflected on), and a reflection that copies or mangles its prompt holds no lesson.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage

from agentic_memory import prompts
from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import (
    assemble_compact,
    assemble_context,
    count_tokens,
    pack_items,
)
from agentic_memory.graph.memory import (
    AgentMemory,
    Reflection,
    citation_label,
    looks_like_self_statement,
    mentions_secret,
    render_constraints,
    render_episode,
    render_facts,
    render_rules,
)
from agentic_memory.graph.state import State, message_text
from agentic_memory.kinds.model_output import (
    copied_share,
    field_bound,
    layer_openings,
    leak_at,
    longest_copy,
    mangled,
    prompt_echo,
)
from agentic_memory.models.calls import MODEL_ERRORS, ModelCall, ainvoke_structured, calls_of

__all__ = [
    "NONE",
    "passage",
    "COMPACT_RECALLED",
    "COMPACT_RECENT",
    "ECHOED_ANSWER_NOTICE",
    "MIN_CUT_WORDS",
    "NOTICE_MARK",
    "NO_LESSON",
    "RECITED_WORDS",
    "repeats_last_answer",
    "SUMMARY_HEADING",
    "compact_context",
    "excerpt",
    "fit_tokens",
    "full_context",
    "guard_answer",
    "history_of",
    "is_notice",
    "citation_of",
    "model_reflection",
    "pending_chain",
    "plain_reflection",
    "prompt_openings",
    "transcript_of",
    "without_echo",
    "without_notices",
]

logger = logging.getLogger(__name__)

NONE = "(none)"
"""What a prompt shows for an empty layer."""

SUMMARY_HEADING = "Summary of earlier turns of this conversation:\n"
_EXCERPT_CHARS = 300


def citation_of(chunk: dict[str, Any]) -> str:
    """Return a recalled passage's citation: its source and pages."""
    return citation_label(str(chunk["source"]), int(chunk["page_start"]), int(chunk["page_end"]))


def passage(chunk: dict[str, Any]) -> str:
    """Return a recalled passage as the prompt shows it: citation, section, text."""
    # The heading tells the model what a passage cut mid-section is about; the label stays
    # first so the citation the model copies is still matched by plain comparison.
    section = str(chunk.get("section") or "")
    where = f" ({section})" if section else ""
    return f"{chunk['label']}{where} {chunk['text']}"


def transcript_of(messages: Sequence[BaseMessage]) -> str:
    """Return the conversation as lines ("user: ...", "assistant: ..."), notices left out."""
    lines = []
    for m in without_notices(messages):
        if isinstance(m, HumanMessage):
            lines.append(f"user: {message_text(m)}")
        elif isinstance(m, AIMessage) and message_text(m).strip():
            lines.append(f"assistant: {message_text(m)}")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool: {message_text(m)}")
    return "\n".join(lines)


def excerpt(previous: str, messages: Sequence[BaseMessage]) -> str:
    """Return the rolling summary without a model: the old summary, then each turn cut short."""
    lines = [previous.strip()] if previous.strip() else []
    for line in transcript_of(messages).splitlines():
        cut = line if len(line) <= _EXCERPT_CHARS else line[: _EXCERPT_CHARS - 1] + "…"
        lines.append(cut)
    return "\n".join(lines) or NONE


def fit_tokens(text: str, budget: int) -> str:
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


def history_of(state: State) -> list[AnyMessage]:
    """Return the thread's turns before the new message, notices left out."""
    messages = state.messages
    if messages and isinstance(messages[-1], HumanMessage):
        messages = messages[:-1]
    return without_notices(messages)


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


def is_notice(message: BaseMessage) -> bool:
    """Tell whether a message is a notice the agent wrote in place of the model's answer."""
    if not isinstance(message, AIMessage):
        return False
    text = message_text(message)
    return bool(message.additional_kwargs.get(NOTICE_MARK)) or (
        text.startswith(_NOTICE_OPENING) and "so no answer was kept" in text
    )


def without_notices(messages: Sequence[_Message]) -> list[_Message]:
    """Return the messages without the agent's notices."""
    # A notice is shown to the user only: as model input the base model copied it into
    # every later answer (seen in a whole offline session), and it is nobody's memory.
    return [m for m in messages if not is_notice(m)]


_OPENINGS: list[str] = []


async def prompt_openings() -> list[str]:
    """Return the openings of every prompt's fixed lines and of the code's layer headings."""
    if not _OPENINGS:

        def read() -> list[str]:
            # The starting rules are content, shown to the model and rewritten by it: not a layer.
            names = [n for n in prompts.available() if n != "procedural_rules"]
            templates = [prompts.load(name).template for name in names]
            headings = [SUMMARY_HEADING, "Behaviour rules (version", NO_LESSON]
            return layer_openings(templates, headings)

        # Listing and reading the prompt files touches the disk: off the event loop.
        openings = await asyncio.to_thread(read)
        if not _OPENINGS:
            _OPENINGS.extend(openings)
    return _OPENINGS


MIN_CUT_WORDS = 3
"""An answer cut before a leak keeps at least this many words, or it is replaced by a notice."""


async def guard_answer(
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
    text = message_text(answer)
    openings = await prompt_openings()
    at = leak_at(text, openings, turns=small)
    if at is not None:
        kept = text[:at].rstrip(" \t\n-:(")
        if len(kept.split()) >= MIN_CUT_WORDS and leak_at(kept, openings, turns=small) is None:
            why = f"the answer ran into the prompt or an invented turn ({text[at : at + 40]!r})"
            logger.warning("%s: it was cut there", why)
            return AIMessage(content=kept, id=answer.id), why
        text = kept
    given = [message_text(new_message)] + [str(f.get("value", "")) for f in state.facts]
    echo = prompt_echo(text, system, [*given, state.summary])
    recited = 0
    if small:
        # Only small models continue the transcript instead of answering; a chat model
        # asked to repeat the user's words must be free to.
        said = [message_text(m) for m in history_of(state) if isinstance(m, HumanMessage)]
        recited = longest_copy(text, said)
    if at is None and echo is None and recited < RECITED_WORDS:
        return answer, None
    if at is not None:
        why = f"the answer was the prompt or an invented turn ({message_text(answer)[at : at + 40]!r})"
    elif echo is not None:
        why = f"the model recited its instructions ({echo!r})"
    else:
        why = f"the model recited the conversation ({recited} words in a row)"
    logger.warning("%s: the answer was replaced by a notice", why)
    return AIMessage(content=ECHOED_ANSWER_NOTICE, additional_kwargs={NOTICE_MARK: True}), why


async def full_context(state: State, ctx: Context, new_message: HumanMessage) -> tuple[Any, str]:
    """Write the full prompt: system prompt and rules, facts, summary, turns, recall, message."""
    budgets = ctx.budgets
    system = (await prompts.aload("system")).format().strip()
    facts_text = ""
    if state.facts:
        facts_text = (
            (await prompts.aload("user_facts")).format(facts=render_facts(state.facts)).strip()
        )
    summary_text = f"{SUMMARY_HEADING}{state.summary}" if state.summary else ""
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
        episodes=NONE,
        past_turns=NONE,
        knowledge=semantic_prompt.format(chunks=""),
        now=now,
        constraints=constraints or NONE,
    )
    # The frame (headings, time, constraints) is paid from the semantic budget, with a
    # margin because tokens can merge across the joins.
    semantic_room = max(0, budgets.semantic - count_tokens(frame) - 16)
    chunk_items = [passage(c) for c in state.chunks]
    kept_chunks, _, left_semantic = pack_items(chunk_items, semantic_room)
    variable = turn_prompt.format(
        episodes="\n".join(kept_eps) or NONE,
        past_turns="\n".join(kept_past) or NONE,
        knowledge=(
            semantic_prompt.format(chunks="\n".join(kept_chunks)).strip()
            if kept_chunks
            else "(no document passages)"
        ),
        now=now,
        constraints=constraints or NONE,
    ).strip()

    assembled = assemble_context(
        system=system,
        rules=render_rules(state.rules, state.rules_version),
        facts=facts_text,
        summary=summary_text,
        recent=history_of(state),
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


REPEATED_SHARE = 0.8
"""Share of an answer's words copied from the previous answer that makes it a repeat."""


def repeats_last_answer(answer: AIMessage, state: State) -> bool:
    """Tell whether ``answer`` copies the previous answer, in a long run or nearly whole.

    A copy is ``RECITED_WORDS`` words in a row, or ``REPEATED_SHARE`` of the answer's words
    in runs of ``ECHO_RUN`` words the previous answer holds. SmolLM2 at temperature 0
    sometimes answers a new message with its previous answer word for word (a product
    session, 2026-12-05: two of six turns), the last exchange being in its prompt; a short
    one too ("You're travelling to Tokyo next month." to "Do I like short or long
    answers?", the answers bench), or with one word changed ("You can't do anything for a
    wife, but you could help out with your own business." after the same about a dog). A
    reply shorter than a run given twice ("Noted.", "Got it, thanks!") is not counted.
    """
    answers = [m for m in history_of(state) if isinstance(m, AIMessage)]
    if not answers:
        return False
    said, before = message_text(answer), [message_text(answers[-1])]
    return longest_copy(said, before) >= RECITED_WORDS or (
        copied_share(said, before) >= REPEATED_SHARE
    )


async def compact_context(
    state: State, ctx: Context, mem: AgentMemory, new_message: HumanMessage
) -> tuple[Callable[[int], Any], str]:
    """Write the compact prompt: an instruction, facts as short lines, two recalled lines.

    Returns:
        The prompt with the last ``turns`` messages before the new one as chat turns (a
        function of ``turns``: a second prompt without them ranks no fact again), and its own
        text (the instruction, without the memory lines).
    """
    template = await prompts.aload("compact_answer")
    query = message_text(new_message)
    facts = await mem.rank_facts(query, state.facts)
    lines = [f"- your {f['subject']}: {f['value']}" for f in facts]
    recalled: list[str] = []
    if state.chunks:
        recalled.append(f"- from your documents {passage(state.chunks[0])}")
    said = [p for p in state.past_turns if p.get("role") in ("human", "user")]
    # What the user said about themselves comes before what they asked (a question states
    # nothing); otherwise the recall's order stands.
    said.sort(key=lambda p: not looks_like_self_statement(str(p.get("content", ""))))
    if said:
        recalled.append(f"- you said before: {said[0]['content']}")
    elif state.episodes:
        recalled.append(f"- last time: {state.episodes[0].get('conversation_summary', '')}")
    recalled = recalled[:COMPACT_RECALLED]
    left = len(state.chunks) + len(state.past_turns) + len(state.episodes) - len(recalled)
    constraints = render_constraints(state.facts)
    restated = f"Never suggest anything against: {constraints}." if constraints else ""
    recent = history_of(state)

    def frame(memory: str) -> str:
        return template.format(memory=memory or "- (nothing yet)", constraints=restated).strip()

    def with_turns(turns: int) -> Any:
        kept = recent[max(0, len(recent) - turns) :]
        return assemble_compact(
            frame=frame,
            facts=lines,
            recalled=recalled,
            summary=f"{SUMMARY_HEADING}{state.summary}" if state.summary else "",
            recent=kept,
            new_message=new_message,
            budgets=ctx.budgets,
            left_out={"recalled": left, "recent": len(recent) - len(kept)},
        )

    # Only the instruction is the prompt's own text: an answer may copy the memory lines
    # ("You work as a pharmacist at a hospital.") and must, to be right.
    return with_turns, frame("")


async def model_reflection(
    model: BaseChatModel, transcript: str
) -> tuple[Reflection | None, list[ModelCall], str | None]:
    """Ask the memory model for the reflection; name why it is unusable, if it is."""
    template = await prompts.aload("reflection")
    try:
        reflection, records = await ainvoke_structured(
            model,
            Reflection,
            [HumanMessage(template.format(conversation=transcript))],
            purpose="reflection",
        )
    except MODEL_ERRORS as exc:
        return None, calls_of(exc), f"the model's reflection failed ({type(exc).__name__}: {exc})"
    reflection, echo = without_echo(
        reflection, template.template, transcript, await prompt_openings()
    )
    if echo is not None:
        return reflection, records, f"the model's reflection copied the prompt ({echo!r})"
    return reflection, records, None


# What the reflection prompt asks for word for word: writing it is no echo.
_INSTRUCTED = ("nothing notable",)
NO_LESSON = "No lesson recorded: the memory model wrote no usable reflection."


def without_echo(
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
            getattr(reflection, name), bound=field_bound(Reflection, name), openings=openings
        )
        if problem is not None:
            return reflection, f"{name} {problem}"
    tags = [t for t in reflection.context_tags if prompt_echo(t, template, given) is None]
    return reflection.model_copy(update={"context_tags": tags}), None


def plain_reflection(messages: Sequence[BaseMessage], summary: str) -> Reflection:
    """Write the episode of a conversation without a model: what the user said, cut short.

    ``summary`` is the rolling summary of the turns that already left the window (a long
    conversation): it comes first, so the episode still holds what the user said early on.
    """

    # A secret the user told stays in its conversation, never in an episode recalled later.
    def screened(text: str) -> str:
        return "(a secret, not kept here)" if mentions_secret(text) else text

    said = [
        screened(text)
        for text in (message_text(m).strip() for m in messages if isinstance(m, HumanMessage))
        if text
    ]
    earlier = [screened(line.strip()) for line in summary.splitlines() if line.strip()]
    text = " / ".join(said)
    if earlier:
        text = f"(earlier) {' / '.join(earlier)}" + (f" / (then) {text}" if text else "")
    limit = field_bound(Reflection, "conversation_summary") or len(text) + 20
    summary_text = f"The user said: {text or NONE}"
    if len(summary_text) > limit:
        summary_text = summary_text[: limit - 1] + "…"
    return Reflection(
        context_tags=[],
        conversation_summary=summary_text,
        what_worked=NO_LESSON,
        what_to_avoid=NO_LESSON,
        importance=0.5,
    )


def pending_chain(pending: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Flatten pending episodes, oldest first (each may carry the ones before it)."""
    if not pending:
        return []
    own = {k: v for k, v in pending.items() if k != "earlier"}
    return [*pending.get("earlier", []), own]
