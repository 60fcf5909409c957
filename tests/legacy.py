"""Store states that only an earlier version of agentic-memory could write, for tests.

Versions of the shared rules are now written only through the operator's gate
(``agentic_memory.kinds.rules.shared``), which records one source user per version and
screens every rule. Stores written before the gate may hold versions learned from several
users, or rules the screen would refuse; forgetting must still clean those. This writes such
versions directly, through the rule book's own writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.rules import RuleBook, RuleVersion
from agentic_memory.store import GLOBAL_SCOPE, MemoryStore


def write_shared_version(
    store: MemoryStore,
    embeddings: Embeddings,
    rules: Sequence[Any],
    *,
    source_episodes: Sequence[str] = (),
    source_users: Sequence[str] = (),
    note: str = "",
    now: datetime | None = None,
) -> RuleVersion:
    """Write the next version of the shared rules as a store from before the gate holds it."""
    created = asyncio.run(
        RuleBook(store, embeddings)._apropose_version(
            GLOBAL_SCOPE,
            rules,
            source_episodes=source_episodes,
            source_users=source_users,
            note=note,
            now=now,
        )
    )
    assert created is not None
    return created
