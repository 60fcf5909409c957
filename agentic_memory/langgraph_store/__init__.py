"""LangGraph's ``BaseStore`` over the agent's memory store: ``AgenticStore``.

>>> from agentic_memory.langgraph_store import AgenticStore
>>> with AgenticStore.from_env() as store:                      # doctest: +SKIP
...     store.put(("facts", "alice"), "diet", {"value": "vegetarian"})
...     store.search(("facts", "alice"), query="what does she eat?")

See ``docs/langgraph-store.md``.
"""

from agentic_memory.kinds.registry import BUILTIN_KINDS
from agentic_memory.kinds.rules.space import (
    PROPOSALS_NAMESPACE,
    OperatorRequiredError,
    RuleVersionConflictError,
)
from agentic_memory.langgraph_store.store import DEFAULT_ALPHA, AgenticStore
from agentic_memory.namespaces.search import ALPHA_KEY

__all__ = [
    "ALPHA_KEY",
    "DEFAULT_ALPHA",
    "KIND_ROOTS",
    "PROPOSALS_NAMESPACE",
    "AgenticStore",
    "OperatorRequiredError",
    "RuleVersionConflictError",
]

KIND_ROOTS = BUILTIN_KINDS.roots
"""First labels reserved for the built-in memory kinds, in the order results list them
(an ``AgenticStore`` serves its own registry's: ``AgenticStore.kinds.roots``)."""
