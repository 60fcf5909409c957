"""Each event loop's model HTTP client is closed, and let go, when that loop shuts down.

A web app's workers and the sync edge run the graph on a new loop per call
(``asyncio.run``): every one of those loops gets a client of its own
(:mod:`agentic_memory.graph.resources`), which must not outlive it, open or kept.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentic_memory.graph.resources as resources
from agentic_memory.graph.context import Context
from agentic_memory.graph.resources import answer_model, background_model

SPEC = "compatible:fake-model"
LOOPS = 25


@pytest.fixture(autouse=True)
def _own_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "_RESOLVED", {})
    monkeypatch.setattr(resources, "_PER_LOOP", {})
    # Nothing listens there: building a client connects nowhere.
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:9/v1")


async def _clients() -> list[Any]:
    context = Context(model=SPEC, memory_model=SPEC)
    models = [await answer_model(context), await background_model(context)]
    again = await answer_model(context)
    assert again is models[0]  # reused on its loop
    assert len(resources._PER_LOOP) == 1
    return [model.http_async_client for model in models]  # type: ignore[attr-defined]


def test_many_asyncio_runs_leave_no_client_behind() -> None:
    clients = [client for _ in range(LOOPS) for client in asyncio.run(_clients())]
    assert resources._PER_LOOP == {}
    assert len({id(c) for c in clients}) == LOOPS  # one per loop, shared by its models
    assert all(c.is_closed for c in clients)


def test_a_loop_closed_without_shutting_down_is_let_go_at_the_next_loop() -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_clients())
    finally:
        loop.close()  # no shutdown_asyncgens: nothing can run on it any more
    asyncio.run(_clients())
    assert resources._PER_LOOP == {}
