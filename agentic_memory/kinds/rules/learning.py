"""Learning rules from lessons: the memory model rewrites a scope's rules, and the rewrite is kept.

A conversation's end hands its lessons (the reflections' tags, what worked and what to avoid;
never the user's or a document's text) to :func:`alearn`. The model's rewrite is screened
(:func:`agentic_memory.kinds.rules.guard.screen_rules`, and no rule copying or mangling the
prompt), the starting rules and rules protecting a constraint are kept
(:func:`agentic_memory.kinds.model_output.keep_protected`), and the result is stored as a new
version based on the one the model rewrote. When another end created a version meanwhile, the
rewrite is rebased on it (:func:`agentic_memory.kinds.rules.versions.rebase_rules`), bounded; a rewrite
of the rules shared by every user becomes a proposal an operator approves
(:class:`agentic_memory.kinds.rules.shared.SharedRules`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from agentic_memory import prompts
from agentic_memory.kinds.model_output import (
    KeptRules,
    field_bound,
    is_protected,
    keep_protected,
    mangled,
    prompt_echo,
)
from agentic_memory.kinds.rules.book import RuleBook
from agentic_memory.kinds.rules.guard import RejectedRule
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.kinds.rules.versions import (
    MAX_RULES,
    Rule,
    RuleConflictError,
    RuleScreenError,
    RuleSet,
    RuleVersion,
    ascreen_rules,
    rebase_backoff,
    rebase_rules,
)
from agentic_memory.models.calls import MODEL_ERRORS, ainvoke_structured, calls_of
from agentic_memory.store import GLOBAL_SCOPE

__all__ = ["RulesLearned", "alearn"]

logger = logging.getLogger(__name__)

ATTEMPTS = 5
"""Model rewrites of the rules when a rebase cannot take another version in (the cap)."""
REBASES = 64
"""Rebases of one rewrite on versions other conversations created meanwhile."""
_NONE = "(none)"


@dataclass
class RulesLearned:
    """What learning from a conversation's lessons did to the rules."""

    note: str | None = None
    """Why nothing (or not all) was stored, or which dropped rules were kept."""
    rejected: list[dict[str, str]] = field(default_factory=list)
    """The rules of the rewrite that were refused, with the reason."""
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    """Each newer version met while storing, and whether the rewrite was rebased or rewritten."""
    calls: list[dict[str, Any]] = field(default_factory=list)
    """The model calls made."""
    version_created: int | None = None
    proposal: dict[str, Any] | None = None
    """The shared rules' pending proposal this created."""
    keep_pending: bool = False
    """Nothing was learned for a passing reason (the model failed, the rules kept changing):
    the lessons are learned from again at the next end."""


def _lesson(reflection: dict[str, Any]) -> str:
    return (
        f"- tags: {', '.join(reflection.get('context_tags') or []) or _NONE}\n"
        f"  what worked: {reflection['what_worked']}\n"
        f"  what to avoid: {reflection['what_to_avoid']}"
    )


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
                if (why := mangled(rule[part], bound=field_bound(Rule, part), openings=openings))
            ),
            None,
        )
        if echo is None and problem is None:
            kept.append(rule)
            continue
        reason = f"copies the prompt's text ({echo!r})" if echo is not None else str(problem)
        echoed.append(RejectedRule(rule["instruction"], rule["rationale"], reason))
    return kept, echoed


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
        protected=lambda r: is_protected(r.to_dict(), starting),
    )
    return None if merged is None else [r.to_dict() for r in merged]


class _Learning:
    """One end's rewrite of one scope's rules: the model, the prompt, what was said so far."""

    def __init__(
        self,
        book: RuleBook,
        model: BaseChatModel,
        template: prompts.Prompt,
        lessons: Sequence[dict[str, Any]],
        openings: Sequence[str],
        starting: list[dict[str, str]],
    ) -> None:
        self.book = book
        self.starting = starting
        self.refused: list[RejectedRule] = []
        self.model = model
        self.template = template
        self.lesson_text = "\n".join(_lesson(r) for r in lessons)
        self.openings = openings
        self.learned = RulesLearned()

    async def rewrite(self, current: RuleVersion) -> list[dict[str, str]]:
        """Ask the model to rewrite ``current``; return its cleaned rules (calls recorded)."""
        prompt = self.template.format(
            current_rules=current.render(), reflections=self.lesson_text, max_rules=MAX_RULES
        )
        ruleset, records = await ainvoke_structured(
            self.model, RuleSet, [HumanMessage(prompt)], purpose="rules"
        )
        self.learned.calls += [c.to_dict() for c in records]
        return _clean_rules(ruleset.rules)

    async def screened(self, current: RuleVersion, *, shared: bool) -> KeptRules | None:
        """Rewrite ``current`` and screen the rewrite; None (with a note) when none of it stays.

        Raises:
            Exception: one of ``MODEL_ERRORS`` when the model fails.
        """
        learned = self.learned
        rules = await self.rewrite(current)
        refused: list[RejectedRule] = []
        if not shared:
            # A shared rewrite is screened by its proposal (with the user's own values).
            rules, refused = await ascreen_rules(rules, shared=False)
        kept, echoed = _drop_echoes(
            rules, self.template.template, [current.render(), self.lesson_text], self.openings
        )
        self.refused = [*refused, *echoed]
        if not shared:
            for item in self.refused:
                logger.warning("rule not stored (%s): %r", item.reason, item.instruction)
        learned.rejected = [r.to_dict() for r in self.refused]
        learned.note = None
        if not kept:
            learned.note = (
                "no change of the shared rules to propose"
                if shared
                else "no rule of the rewrite could be stored"
            )
            return None
        current_rules = [r.to_dict() for r in current.rules]
        checked = keep_protected(kept, current_rules, self.starting, max_rules=MAX_RULES)
        if checked.refused is not None:
            logger.warning("rules rewrite refused: %s", checked.refused)
            verb = "proposed" if shared else "stored"
            learned.note = f"the rewrite was not {verb}: {checked.refused}"
            return None
        return checked

    async def screened_latest(
        self, scope: str, *, shared: bool
    ) -> tuple[RuleVersion, KeptRules] | None:
        """Rewrite and screen the scope's latest version; None (with a note) when nothing stays.

        A model failure is a None too: the conversation has ended all the same; the episode
        stays pending, so the next conversation end learns from it too.
        """
        current = await self.book.alatest(scope)
        try:
            checked = await self.screened(current, shared=shared)
        except MODEL_ERRORS as exc:
            logger.warning("rules not rewritten this time: %s", exc)
            learned = self.learned
            learned.calls += [c.to_dict() for c in calls_of(exc)]
            learned.rejected = []
            learned.note = f"the rules were not rewritten: the model failed ({exc})"
            learned.keep_pending = True
            return None
        return None if checked is None else (current, checked)


async def alearn(
    book: RuleBook,
    shared: SharedRules,
    model: BaseChatModel,
    *,
    scope: str,
    user: str,
    lessons: Sequence[dict[str, Any]],
    personal: Sequence[str],
    openings: Sequence[str] = (),
) -> RulesLearned:
    """Rewrite a scope's rules from conversations' lessons; a change is stored as a new version.

    Args:
        book: The rules.
        shared: The shared rules' proposals (``scope`` is :data:`GLOBAL_SCOPE`).
        model: The memory model.
        scope: The rules' scope.
        user: Whose conversation ended.
        lessons: The reflections learned from (``id``, ``conversation``, ``thread_id``,
            ``context_tags``, ``what_worked``, ``what_to_avoid``), oldest first.
        personal: The user's own values (facts, id): never in a shared rule.
        openings: The prompts' layer openings (a rule holding one is mangled).
    """
    last = lessons[-1]
    note = (
        f"rewritten after conversation {last.get('conversation')} of thread {last.get('thread_id')}"
    )
    episodes = [str(r["id"]) for r in lessons]
    template = await prompts.aload("procedural_update")
    # The starting rules (version 1) and rules protecting a stated constraint are never
    # dropped by a rewrite (keep_protected).
    starting = [r.to_dict() for r in (await book.aversions(scope))[0].rules]
    learning = _Learning(book, model, template, lessons, openings, starting)
    if scope == GLOBAL_SCOPE:
        return await _propose_shared(
            learning, shared, user=user, episodes=episodes, personal=personal, note=note
        )
    return await _store_own(learning, scope, user=user, episodes=episodes, note=note)


async def _propose_shared(
    learning: _Learning,
    shared: SharedRules,
    *,
    user: str,
    episodes: list[str],
    personal: Sequence[str],
    note: str,
) -> RulesLearned:
    # Proposals are created, never based on each other: concurrent ends in the shared
    # scope do not conflict (an operator's approval refuses a stale one instead).
    learned = learning.learned
    found = await learning.screened_latest(GLOBAL_SCOPE, shared=True)
    if found is None:
        return learned
    current, checked = found
    proposed = await shared.apropose(
        checked.rules,
        proposer=user,
        base_version=current.version,
        source_episodes=episodes,
        personal_values=list(personal),
        note=note,
    )
    rejected = [*learning.refused, *proposed.rejected]
    for item in rejected:
        logger.warning("rule not proposed (%s): %r", item.reason, item.instruction)
    learned.rejected = [r.to_dict() for r in rejected]
    if proposed.proposal is None:
        learned.note = "no change of the shared rules to propose"
        return learned
    learned.proposal = proposed.proposal.to_dict()
    learned.note = (
        f"proposed a change of the shared rules ({proposed.proposal.id}); it applies once an "
        "operator approves it"
    )
    return learned


async def _store_own(
    learning: _Learning, scope: str, *, user: str, episodes: list[str], note: str
) -> RulesLearned:
    learned, book = learning.learned, learning.book
    for _ in range(ATTEMPTS):
        found = await learning.screened_latest(scope, shared=False)
        if found is None:
            return learned
        current, checked = found
        if checked.restored:
            learned.note = "kept rules the rewrite dropped: " + "; ".join(
                r["instruction"] for r in checked.restored
            )
        base, rules = current, checked.rules
        for rebase in range(1, REBASES + 1):
            try:
                # Based on the version the model rewrote (or the rewrite was rebased on):
                # another conversation's new version is never replaced by one that did not
                # see it.
                created = await book.apropose(
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
                learned.rejected += [r.to_dict() for r in exc.rejected]
                learned.note = f"the rewrite was not stored: {exc}"
                return learned
            except RuleConflictError as exc:
                latest = await book.alatest(scope)
                merged = _rebased(base.rules, rules, latest.rules, learning.starting)
                learned.conflicts.append(
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
            learned.version_created = created.version if created else None
            return learned
        else:
            break  # every rebase met a newer version still: give up for this end
    logger.warning("rules of %r kept changing: this end's rewrite was not stored", scope)
    learned.keep_pending = True
    learned.note = (
        f"the rules kept changing while this conversation rewrote them "
        f"({len(learned.conflicts)} newer versions met): nothing was stored; the next end of "
        "this conversation learns from it again"
    )
    return learned
