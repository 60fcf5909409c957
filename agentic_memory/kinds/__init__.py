"""The kinds of long-term memory, each in one package that holds everything about it.

- :mod:`~agentic_memory.kinds.facts`: structured facts about a user, superseded, never
  overwritten (``FactStore``);
- :mod:`~agentic_memory.kinds.episodes`: one reflection per finished conversation
  (``EpisodicMemory``);
- :mod:`~agentic_memory.kinds.rules`: versioned procedural rules (``RuleBook``), screened by
  :mod:`~agentic_memory.kinds.rules.guard`, and the shared rules' gate;
- :mod:`~agentic_memory.kinds.messages`: every logged turn, recalled across conversations
  (``MessageLog``), with its keyword text from :mod:`~agentic_memory.kinds.recall_text`;
- :mod:`~agentic_memory.kinds.knowledge`: knowledge bases of document chunks, with citations.

Each package owns its collection schema, what the memory model writes for it, the text it is
embedded from, how it is shown in the prompt, how it is stored, recalled and forgotten, its
contract (``kind.py``, listed in :mod:`~agentic_memory.kinds.registry`) and its LangGraph
namespaces (``space.py``). No kind's package imports another's.
"""

from agentic_memory.kinds.registry import BUILTIN_KINDS
from agentic_memory.store import CollectionSpec

__all__ = ["PER_USER_COLLECTIONS"]

PER_USER_COLLECTIONS: tuple[CollectionSpec, ...] = BUILTIN_KINDS.per_user_specs
"""The per-user collections with a fixed name of the built-in kinds, in registry order (rules:
per scope, a user or the shared one); ``KindRegistry.per_user_specs`` of another registry."""
