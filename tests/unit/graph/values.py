"""The values of a thread as the graph reads them, for comparing a thread before and after."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentic_memory.graph.state import State


def thread_values(values: dict[str, Any]) -> dict[str, Any]:
    """Every field of the state, a field never written with its default; messages by
    (type, id, content) so that two reads of one checkpoint compare equal."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(State):
        if f.name in values:
            value = values[f.name]
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = f.default
        if f.name in ("messages", "settled_messages") and value is not None:
            value = [(type(m).__name__, m.id, m.content) for m in value]
        out[f.name] = value
    return out
