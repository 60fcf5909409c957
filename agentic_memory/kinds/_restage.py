"""Bringing a collection of an earlier schema to the current one by copying it through a stage.

A change of what a collection indexes for keyword search (a property that becomes searchable,
or stops being) cannot be made in place: Weaviate fixes a property's indexing when the
property is created, and :meth:`~agentic_memory.store.MemoryStore.add_properties` refuses a
searchable property because the objects already stored would be missing from its index. So
the collection is copied, every object rewritten by the kind (its new properties computed
from the old ones, its vector kept), into a staging collection; only once the copy is
complete is the old collection dropped, recreated with the current schema and filled from
the staging copy, which is then dropped. Each step can be repeated, so a process killed at
any point leaves the objects in the old collection or in the staging copy, and the next
first use finishes the job. The message log's upgrade
(:mod:`agentic_memory.kinds.messages.upgrade`) works the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    MemoryStore,
    UnknownCollectionError,
)
from agentic_memory.store.base import property_shape

STAGING_PREFIX = "Upgrade_"
"""Start of the name of a staging copy: ``Upgrade_<collection>``. No kind claims it, so a
staging copy is never listed, exported or searched as memories."""

_PAGE = 500


Convert = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns an object's properties under an earlier schema into its properties under the current."""


def shape(spec: CollectionSpec) -> tuple[bool, frozenset[tuple[str, str, bool, bool]]]:
    """Return what identifies a schema: per-user or not, and each property's name and indexing.

    The order of the properties is left out: Weaviate reports them in its own.
    """
    return spec.per_user, frozenset(property_shape(p) for p in spec.properties)


def staging_spec(spec: CollectionSpec) -> CollectionSpec:
    """Return the schema of the staging copy of ``spec``: the same, under another name."""
    return dataclasses.replace(spec, name=STAGING_PREFIX + spec.name, indexes=())


def needs_restage(store: MemoryStore, spec: CollectionSpec, existing: set[str]) -> bool:
    """Whether :func:`restage` has work to do (``existing``: the store's collections now).

    Cheap: the stored schema is cached by the store after its first read.
    """
    if STAGING_PREFIX + spec.name in existing:
        return True
    return spec.name in existing and shape(store.spec(spec.name)) != shape(spec)


def restage(
    store: MemoryStore,
    spec: CollectionSpec,
    earlier: Sequence[CollectionSpec],
    convert: Convert,
) -> bool:
    """Bring the collection ``spec.name`` to ``spec`` if it holds one of the ``earlier`` schemas.

    Finishes an upgrade a killed process left half-done. A collection of another, unknown
    schema is left alone (``ensure_collection`` then says what differs). Callers take
    turns (``MemoryStore.exclusive``: threads, processes and, for Weaviate with a
    coordinator, machines), and the second finds the collection current: otherwise one
    could drop what the other rebuilt. Returns whether anything was upgraded.
    """
    with store.exclusive("upgrade", spec.name):
        return _restage(store, spec, earlier, convert)


def _restage(
    store: MemoryStore,
    spec: CollectionSpec,
    earlier: Sequence[CollectionSpec],
    convert: Convert,
) -> bool:
    staging = staging_spec(spec)
    names = set(store.collections())
    if spec.name in names:
        # Read again: another process may have upgraded it while this one waited.
        current = shape(store.spec(spec.name, reload=True))
        if current in {shape(e) for e in earlier}:
            store.ensure_collection(staging)
            _copy(store, spec, staging.name, convert)
            store.drop_collection(spec.name)
        elif current != shape(spec) or staging.name not in names:
            return False  # current now, or unknown
    elif staging.name not in names:
        return False
    store.ensure_collection(spec)
    _copy(store, staging, spec.name, None)
    try:
        store.drop_collection(staging.name)
    except UnknownCollectionError:
        pass  # another process finished the same upgrade
    return True


def _copy(store: MemoryStore, source: CollectionSpec, target: str, convert: Convert | None) -> None:
    users: list[str | None] = list(store.users(source.name)) if source.per_user else [None]
    for user in users:
        batch: list[MemoryObject] = []
        for obj in store.iterate(source.name, user=user, page_size=_PAGE, include_vector=True):
            if obj.vector is None:
                continue  # both backends store a vector with every object
            props = obj.properties if convert is None else convert(dict(obj.properties))
            batch.append(MemoryObject(obj.id, props, obj.vector))
            if len(batch) >= _PAGE:
                store.upsert(target, batch, user=user).raise_for_failures()
                batch = []
        if batch:
            store.upsert(target, batch, user=user).raise_for_failures()
