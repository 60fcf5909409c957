"""Upgrading a message log written by an earlier version, before its first use."""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.messages.schema import (
    MESSAGES,
    MESSAGES_V1,
    MESSAGES_V2,
    PAGE,
    embedding_text_of,
    message_properties,
)
from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    MemoryStore,
    UnknownCollectionError,
)

_UPGRADE_COLLECTION = "MessageLogUpgrade"


def _shape(spec: CollectionSpec) -> tuple[Any, ...]:
    return (
        spec.per_user,
        tuple((p.name, p.type, p.searchable, p.filterable) for p in spec.properties),
    )


async def aupgrade_message_log(store: MemoryStore, embeddings: Embeddings) -> bool:
    """Bring a ``MessageLog`` of an earlier schema to the current one.

    A log of the second schema (:data:`MESSAGES_V2`) only lacks the importance properties:
    they are added (``MemoryStore.add_properties``) and no message is rewritten. A log of
    the first (:data:`MESSAGES_V1`) is copied as follows.

    Every message is copied, with its keyword text and vector computed as
    :meth:`MessageLog.aremember` computes them, into a staging collection; only once the copy
    is complete is the old collection dropped, recreated with the new schema and filled from
    the staging copy, which is then dropped. Each step can be repeated, so a process killed at
    any point leaves the messages in the old log or in the staging copy, and the next first use
    finishes the job. Upgraders take turns (``MemoryStore.aexclusive``), as for the other
    kinds (``kinds._restage``): two copying at once could drop what the other refills from.
    Returns whether anything was upgraded.
    """
    async with store.aexclusive("upgrade", MESSAGES.name):
        return await _aupgrade(store, embeddings)


async def _aupgrade(store: MemoryStore, embeddings: Embeddings) -> bool:
    staging = dataclasses.replace(MESSAGES, name=_UPGRADE_COLLECTION)
    names = set(await store.acollections())
    extended = False
    for spec in (MESSAGES, staging):
        # The staging copy too: an upgrade from the first schema that an earlier version
        # left half-done holds the second.
        if spec.name in names and _shape(await store.aspec(spec.name, reload=True)) == _shape(
            MESSAGES_V2
        ):
            extended = bool(await store.aextend_collection(spec)) or extended
    if MESSAGES.name in names:
        current = _shape(await store.aspec(MESSAGES.name, reload=True))
        if current == _shape(MESSAGES_V1):
            await store.aensure_collection(staging)
            for user in await store.ausers(MESSAGES.name):
                await _acopy_upgraded(store, embeddings, user, staging.name)
            await store.adrop_collection(MESSAGES.name)
        elif current != _shape(MESSAGES) or _UPGRADE_COLLECTION not in names:
            return extended  # current now, or unknown (ensure_collection then says so)
    elif _UPGRADE_COLLECTION not in names:
        return extended
    await store.aensure_collection(MESSAGES)
    for user in await store.ausers(staging.name):
        batch: list[MemoryObject] = []
        async for obj in store.aiterate(
            staging.name, user=user, page_size=PAGE, include_vector=True
        ):
            if obj.vector is not None:
                batch.append(MemoryObject(obj.id, obj.properties, obj.vector))
            if len(batch) >= PAGE:
                (await store.aupsert(MESSAGES.name, batch, user=user)).raise_for_failures()
                batch = []
        if batch:
            (await store.aupsert(MESSAGES.name, batch, user=user)).raise_for_failures()
    try:
        await store.adrop_collection(staging.name)
    except UnknownCollectionError:
        pass  # another process finished the same upgrade
    return True


async def _acopy_upgraded(
    store: MemoryStore, embeddings: Embeddings, user: str, target: str
) -> None:
    old = [o async for o in store.aiterate(MESSAGES.name, user=user, page_size=PAGE)]
    texts = {
        (str(o.properties.get("thread_id", "")), int(o.properties.get("turn", 0))): str(
            o.properties.get("content", "")
        )
        for o in old
    }
    for start in range(0, len(old), PAGE):
        batch = old[start : start + PAGE]
        props = []
        for o in batch:
            p = o.properties
            thread, turn = str(p.get("thread_id", "")), int(p.get("turn", 0))
            props.append(
                message_properties(
                    str(p.get("content", "")),
                    str(p.get("role", "human")),
                    thread,
                    turn,
                    str(p.get("created_at", "")),
                    "",
                    p.get("metadata_json"),
                    texts.get((thread, turn - 1), ""),
                    texts.get((thread, turn + 1), ""),
                )
            )
        vectors = await embeddings.aembed_documents([embedding_text_of(p) for p in props])
        objects = [MemoryObject(o.id, p, v) for o, p, v in zip(batch, props, vectors, strict=True)]
        (await store.aupsert(target, objects, user=user)).raise_for_failures()
