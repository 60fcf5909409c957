"""Episodic memory: one reflection per finished conversation (``EpisodicMemory``).

- :mod:`~agentic_memory.kinds.episodes.schema`: the collections and the ``Episode`` record;
- :mod:`~agentic_memory.kinds.episodes.memory`: recall and :class:`EpisodicMemory`, the kind
  itself (its domain and its ``MemoryKind`` contract);
- :mod:`~agentic_memory.kinds.episodes.space`: the ``("episodes", user)`` namespaces.
"""

from agentic_memory.kinds.episodes.memory import (
    EPISODES,
    EPISODES_V1,
    EPISODES_V2,
    IMPORTANCE_WEIGHT,
    RECENCY_WEIGHT,
    RELEVANCE_WEIGHT,
    Episode,
    EpisodicMemory,
    Reflection,
    embedding_text,
    render_episode,
    search_text_of,
)

__all__ = [
    "EPISODES",
    "EPISODES_V1",
    "EPISODES_V2",
    "Episode",
    "EpisodicMemory",
    "IMPORTANCE_WEIGHT",
    "RECENCY_WEIGHT",
    "RELEVANCE_WEIGHT",
    "Reflection",
    "embedding_text",
    "render_episode",
    "search_text_of",
]
