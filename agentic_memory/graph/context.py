"""Per-run settings of the graph (its ``context_schema``).

A client passes these with each run (``context={"user_id": "alice", ...}``); Studio shows
every field with its description. The environment never overrides a value given here:
model endpoints and keys come from the environment, choices come from the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Literal, TypeVar

from agentic_memory.graph.context_window import TokenBudgets
from agentic_memory.kinds.retention import RetentionPolicy

__all__ = ["Context"]

_BUDGETS = TokenBudgets()
_T = TypeVar("_T")


def _setting(default: _T, text: str) -> _T:
    """Return a field with its description (what Studio shows)."""
    found: _T = field(default=default, metadata={"description": text})
    return found


@dataclass(kw_only=True)
class Context:
    """Settings of one run."""

    user_id: str = _setting(
        "", "Whose memory to use. Required: a run without it fails before anything is written."
    )
    model: str = _setting(
        "auto", "Model that answers: 'auto', 'openai:<model>', 'compatible:<model>' or 'local'."
    )
    memory_model: str = _setting(
        "auto", "Model for facts, summaries, reflections and rules (same forms as 'model')."
    )
    answer_max_tokens: int | None = _setting(
        None,
        "Most tokens in one answer. Unset: the model's own limit (1024; 256 for the "
        "offline model, a base model that rarely ends its turn by itself).",
    )
    episodic_k: int = _setting(3, "How many past conversations (episodes) to recall (0: off).")
    episodic_alpha: float = _setting(
        0.5, "Episodic hybrid search weight: 0 = keyword (BM25), 1 = vector."
    )
    past_turns_k: int = _setting(
        3, "How many messages from the user's other threads to recall (0: off)."
    )
    past_turns_alpha: float | None = _setting(
        None,
        "Past-message hybrid search weight: 0 = keyword (BM25), 1 = vector. Unset: chosen "
        "per query, the share of the keyword side's best ten that the vector side also "
        "ranks in its best ten.",
    )
    recency_half_life_days: float = _setting(
        30.0, "Days after which an episode's recency weight halves."
    )
    semantic_k: int = _setting(4, "How many knowledge-base passages to recall (0: off).")
    semantic_alpha: float = _setting(
        0.5, "Knowledge hybrid search weight: 0 = keyword (BM25), 1 = vector."
    )
    semantic_min_similarity: float | None = _setting(
        None,
        "Relevance floor of knowledge passages: a passage whose cosine similarity to the "
        "message is below it is left out, so a message the documents do not answer gets "
        "no passage (-1: keep all). Unset: the value measured for the embedding model "
        "(0.25 for the offline WordLlama; none for other models).",
    )
    knowledge_bases: list[str] = field(
        default_factory=lambda: ["default"],
        metadata={
            "description": (
                "Knowledge bases to search: for each name, the shared one and the user's own "
                "(their uploads); one that does not exist gives nothing."
            )
        },
    )
    rules_scope: Literal["user", "global"] = _setting(
        "user", "Whose procedural rules to use and rewrite: this user's, or one set shared by all."
    )
    prompt_profile: Literal["auto", "compact", "full"] = _setting(
        "auto",
        "How the answer's prompt is written. 'compact': one short instruction, the user's "
        "facts as short lines (the most relevant last), the one or two most relevant "
        "recalled passages or past messages, recent turns, the message: what a small "
        "model can use. 'full': the system prompt, the rules and every recalled layer. "
        "'auto': compact for the offline model and small local endpoints, full for "
        "capable ones (agentic_memory.models.chat.model_class).",
    )
    extract_facts: bool = _setting(
        True, "Extract durable facts from each user message (one model call)."
    )
    budget_system: int = _setting(_BUDGETS.system, "Token budget of the system prompt.")
    budget_rules: int = _setting(_BUDGETS.rules, "Token budget of the procedural rules.")
    budget_facts: int = _setting(_BUDGETS.facts, "Token budget of the user's facts.")
    budget_episodic: int = _setting(
        _BUDGETS.episodic, "Token budget of recalled episodes and past messages."
    )
    budget_semantic: int = _setting(
        _BUDGETS.semantic, "Token budget of knowledge passages (and the per-turn notes)."
    )
    budget_summary: int = _setting(_BUDGETS.summary, "Token budget of the rolling summary.")
    budget_recent: int = _setting(
        _BUDGETS.recent, "Token budget of the recent turns kept verbatim."
    )
    budget_reserve: int = _setting(_BUDGETS.reserve, "Tokens kept free for the answer.")
    message_retention_days: float | None = _setting(
        None,
        "Days after which this user's logged turns expire unless marked important "
        "(0: never by age). Unset: the operator's AMEM_MESSAGE_RETENTION_DAYS (default: "
        "never). Facts and rules never expire.",
    )
    max_messages: int | None = _setting(
        None,
        "Most logged turns kept for this user; beyond it the oldest unimportant ones are "
        "purged (0: no cap). Unset: the operator's AMEM_MAX_MESSAGES (default 50000).",
    )
    compaction_threshold: float = _setting(
        0.65, "Summarise older turns when the recent turns pass this fraction of budget_recent."
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("budget_") or f.name.endswith("_k"):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"context {f.name} must be a non-negative integer: {value!r}")
            elif f.name.endswith("_alpha"):
                if value is None and f.name == "past_turns_alpha":
                    continue
                if not _number(value) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"context {f.name} must be a number in [0, 1]: {value!r}")
        cap = self.answer_max_tokens
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"context answer_max_tokens must be a positive integer: {cap!r}")
        if not isinstance(self.user_id, str):
            raise ValueError(f"context user_id must be a string: {self.user_id!r}")
        for name in ("model", "memory_model"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"context {name} must be a non-empty string")
        if self.rules_scope not in ("user", "global"):
            raise ValueError(
                f"context rules_scope must be 'user' or 'global': {self.rules_scope!r}"
            )
        if not isinstance(self.knowledge_bases, list) or not all(
            isinstance(kb, str) for kb in self.knowledge_bases
        ):
            raise ValueError("context knowledge_bases must be a list of names")
        floor = self.semantic_min_similarity
        if floor is not None and (not _number(floor) or not -1.0 <= floor <= 1.0):
            raise ValueError(
                f"context semantic_min_similarity must be a number in [-1, 1] or unset: {floor!r}"
            )
        if not _number(self.recency_half_life_days) or self.recency_half_life_days <= 0:
            raise ValueError("context recency_half_life_days must be a positive number")
        if not _number(self.compaction_threshold) or not 0 < self.compaction_threshold <= 1:
            raise ValueError("context compaction_threshold must be in (0, 1]")
        if self.prompt_profile not in ("auto", "compact", "full"):
            raise ValueError(
                "context prompt_profile must be 'auto', 'compact' or 'full': "
                f"{self.prompt_profile!r}"
            )
        if not isinstance(self.extract_facts, bool):
            raise ValueError("context extract_facts must be true or false")
        days = self.message_retention_days
        if days is not None and (not _number(days) or days < 0):
            raise ValueError(
                "context message_retention_days must be a non-negative number of days "
                f"(0: never by age) or unset: {days!r}"
            )
        cap = self.max_messages
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
            raise ValueError(
                f"context max_messages must be a non-negative integer (0: no cap) or unset: {cap!r}"
            )

    def retention(self, operator: RetentionPolicy) -> RetentionPolicy:
        """Return the operator's policy with this run's retention settings in its place.

        A setting the run leaves unset keeps the operator's value (from the environment);
        one it sets always wins, 0 meaning off.
        """
        policy = operator
        if self.message_retention_days is not None:
            days = float(self.message_retention_days)
            policy = replace(policy, message_days=days or None)
        if self.max_messages is not None:
            policy = replace(policy, max_messages=self.max_messages or None)
        return policy

    @property
    def budgets(self) -> TokenBudgets:
        """The token budgets as the context-window module takes them."""
        names = [f.name for f in fields(TokenBudgets)]
        return TokenBudgets(**{name: getattr(self, f"budget_{name}") for name in names})


def _number(value: object) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(float(value))
    )
