"""The built-in memory kinds, in order: adding a kind is its module plus one line here.

The order is the order ``AgenticStore`` searches and lists their namespaces in and the order
an import writes them in. See ``docs/architecture.md`` ("Adding a memory kind").
"""

from __future__ import annotations

from agentic_memory.kinds.builtin import (
    EpisodesKind,
    FactsKind,
    KnowledgeKind,
    MessagesKind,
    RulesKind,
)
from agentic_memory.kinds.contract import KindRegistry
from agentic_memory.kinds.items import ItemsKind

__all__ = ["BUILTIN_KINDS"]

BUILTIN_KINDS = KindRegistry(
    (
        FactsKind(),
        EpisodesKind(),
        RulesKind(),
        MessagesKind(),
        KnowledgeKind(),
        ItemsKind(),
    )
)
"""The memory kinds the library serves (``use_kinds`` serves another registry)."""
