"""``MemoryStore.aexclusive``: coroutines take turns without starving the loop's executor."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from agentic_memory.store.embedded import EmbeddedStore


async def test_more_waiters_than_executor_workers_all_get_their_turn(tmp_path: Path) -> None:
    # Each holder makes store-like calls through the default executor while the others
    # wait. Waiters parked in that executor took every worker and the holder never got
    # one (seen as a hang of concurrent conversations on a message log's first use).
    store = await asyncio.to_thread(EmbeddedStore, tmp_path / "s", dims=4)
    order: list[int] = []

    async def turn(i: int) -> None:
        async with store.aexclusive("upgrade", "MessageLog"):
            await asyncio.to_thread(order.append, i)
            await asyncio.sleep(0)
            await asyncio.to_thread(lambda: None)

    try:
        await asyncio.wait_for(asyncio.gather(*(turn(i) for i in range(40))), timeout=60)
    finally:
        await asyncio.to_thread(store.close)
    assert sorted(order) == list(range(40))


async def test_a_waiter_cancelled_before_its_turn_leaves_the_key_free(tmp_path: Path) -> None:
    store = await asyncio.to_thread(EmbeddedStore, tmp_path / "s", dims=4)
    release = threading.Event()
    holding = threading.Event()

    def hold() -> None:
        with store.exclusive("upgrade", "Knowledge_Docs"):
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert await asyncio.to_thread(holding.wait, 30)

        async def wait_for_turn() -> None:
            async with store.aexclusive("upgrade", "Knowledge_Docs"):
                raise AssertionError("a cancelled waiter must not run its block")

        waiter = asyncio.create_task(wait_for_turn())
        await asyncio.sleep(0.2)
        waiter.cancel()
        release.set()
        try:
            await waiter
        except asyncio.CancelledError:
            pass
        # The key the cancelled waiter got after the holder is released again.
        async with asyncio.timeout(30):
            async with store.aexclusive("upgrade", "Knowledge_Docs"):
                pass
    finally:
        release.set()
        await asyncio.to_thread(holder.join, 30)
        await asyncio.to_thread(store.close)
