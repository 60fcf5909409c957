"""Structured facts about a user, superseded rather than overwritten (``FactStore``).

- :mod:`~agentic_memory.kinds.facts.store`: the schema, the history algebra and :class:`FactStore`;
- :mod:`~agentic_memory.kinds.facts.self_statements`: facts the user states about themselves;
- :mod:`~agentic_memory.kinds.facts.kind`: the contract (``FactsKind``);
- :mod:`~agentic_memory.kinds.facts.space`: the ``("facts", user)`` namespaces (``FactsSpace``).
"""

from agentic_memory.kinds.facts.store import (
    FACTS,
    ExtractedFact,
    ExtractedFacts,
    Fact,
    FactStore,
    is_secret,
    mentions_secret,
    normalise_subject,
    render_constraints,
    render_facts,
    root_id,
    successor_id,
)

__all__ = [
    "ExtractedFact",
    "ExtractedFacts",
    "FACTS",
    "Fact",
    "FactStore",
    "is_secret",
    "mentions_secret",
    "normalise_subject",
    "render_constraints",
    "render_facts",
    "root_id",
    "successor_id",
]
