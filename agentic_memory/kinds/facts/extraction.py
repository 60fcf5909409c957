"""Reading a user message's durable facts: the memory model's, checked against the message."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from agentic_memory import prompts
from agentic_memory.kinds.facts.self_statements import (
    extract_self_statements,
    looks_like_self_statement,
    merge_facts,
    plausible_fact,
    supported_fact,
)
from agentic_memory.kinds.facts.store import (
    ExtractedFact,
    ExtractedFacts,
    is_secret,
    mentions_secret,
    normalise_subject,
)
from agentic_memory.models.calls import MODEL_ERRORS, ModelCall, ainvoke_structured, calls_of
from agentic_memory.models.chat import model_class
from agentic_memory.store import InvalidInputError

__all__ = ["extract_facts", "usable_facts"]

logger = logging.getLogger(__name__)

_REMEMBER = re.compile(r"\b(?:remember|note|keep in mind|don't forget)\b", re.IGNORECASE)


async def extract_facts(
    model: BaseChatModel, message: str, known: Sequence[str] = ()
) -> tuple[list[ExtractedFact], bool, list[ModelCall]]:
    """Extract the durable facts of a user message with the memory model (and self-statements).

    Only facts the message supports are kept, whatever the model. For a small model (the
    bundled one or a small endpoint: :func:`agentic_memory.models.chat.model_class`) the
    message's self-statements are always read
    (:func:`agentic_memory.kinds.facts.self_statements.extract_self_statements`) and the model's
    own facts are kept only when plausible: a short key and a value taken from the message
    (:func:`~agentic_memory.kinds.facts.self_statements.plausible_fact`); the offline base model
    answered an empty list to every plain statement measured, and SmolLM2 copies the
    prompt's examples; for a message that states nothing in the first person (a question,
    a request) and asks nothing to be remembered, a small model is not even asked. A
    capable model's facts are kept when the message supports them
    (:func:`~agentic_memory.kinds.facts.self_statements.supported_fact`). A secret the user states
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
        known_facts="\n".join(f"- {k}" for k in known) or "(none)", message=message
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


def _not_secret(facts: Sequence[ExtractedFact]) -> list[ExtractedFact]:
    kept = [f for f in facts if not is_secret(f)]
    if len(kept) < len(facts):
        logger.warning("a secret the user stated was not stored as a fact")
    return kept


def usable_facts(facts: Sequence[ExtractedFact]) -> list[ExtractedFact]:
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
