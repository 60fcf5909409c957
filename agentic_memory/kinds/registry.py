"""The built-in memory kinds, in order: adding a kind is its package plus one line here.

The order is the order ``AgenticStore`` searches and lists their namespaces in and the order
an import writes them in. See ``docs/architecture.md`` ("Adding a memory kind").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.contract import MemoryKind
from agentic_memory.kinds.episodes.memory import EpisodicMemory
from agentic_memory.kinds.facts.kind import FactsKind
from agentic_memory.kinds.items import ItemsKind
from agentic_memory.kinds.knowledge.kind import KnowledgeKind
from agentic_memory.kinds.messages.kind import MessagesKind
from agentic_memory.kinds.rules.kind import RulesKind
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.types import CollectionSpec, InvalidInputError

__all__ = ["BUILTIN_KINDS", "KindRegistry", "check_registry"]


class KindRegistry:
    """The memory kinds, in order: what ``AgenticStore``, forget, transfer and the CLI serve.

    The order is the order namespaces are searched and listed in and the order an import
    writes the kinds in. Names, namespace roots, line kinds and fixed collection names are
    each one kind's.
    """

    def __init__(self, kinds: Iterable[type[MemoryKind]]) -> None:
        self._kinds: tuple[type[MemoryKind], ...] = tuple(kinds)
        for what, labels in (
            ("name", [k.info.name for k in self._kinds]),
            ("namespace root", [r for k in self._kinds for r in k.info.roots]),
            ("export line kind", [lk for k in self._kinds for lk in k.info.line_kinds]),
            ("collection", [s.name for k in self._kinds for s in k.specs]),
            ("bookkeeping collection", [n for k in self._kinds for n in k.bookkeeping]),
        ):
            seen: set[str] = set()
            for label in labels:
                if label in seen:
                    raise InvalidInputError(f"two memory kinds claim the {what} {label!r}")
                seen.add(label)

    def __iter__(self) -> Iterator[type[MemoryKind]]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def __repr__(self) -> str:
        return f"KindRegistry({', '.join(self.names)})"

    @property
    def names(self) -> tuple[str, ...]:
        """The kinds' names, in order."""
        return tuple(k.info.name for k in self._kinds)

    @property
    def roots(self) -> tuple[str, ...]:
        """Every namespace root a kind serves, in order."""
        return tuple(r for k in self._kinds for r in k.info.roots)

    @property
    def line_kinds(self) -> tuple[str, ...]:
        """Every export line kind, in the order an import writes them."""
        return tuple(lk for k in self._kinds for lk in k.info.line_kinds)

    @property
    def bookkeeping(self) -> frozenset[str]:
        """The collections the kinds keep for themselves (see ``MemoryKind.bookkeeping``)."""
        return frozenset(name for k in self._kinds for name in k.bookkeeping)

    @property
    def per_user_specs(self) -> tuple[CollectionSpec, ...]:
        """The kinds' per-user collections with a fixed name, in order."""
        return tuple(spec for k in self._kinds for spec in k.specs if spec.per_user)

    def get(self, name: str) -> type[MemoryKind]:
        """Return the kind named ``name``; raise ``InvalidInputError`` naming the others."""
        for kind in self._kinds:
            if kind.info.name == name:
                return kind
        raise InvalidInputError(f"no memory kind {name!r} (the kinds: {', '.join(self.names)})")

    def of_collection(self, collection: str) -> tuple[type[MemoryKind], str] | None:
        """Return the kind a collection belongs to and its line kind, or ``None`` (foreign)."""
        for kind in self._kinds:
            line_kind = kind.line_kind(collection)
            if line_kind is not None:
                return kind, line_kind
        return None

    def of_line_kind(self, line_kind: str) -> type[MemoryKind] | None:
        """Return the kind whose export lines are ``line_kind``."""
        for kind in self._kinds:
            if line_kind in kind.info.line_kinds:
                return kind
        return None

    def with_kind(self, kind: type[MemoryKind]) -> KindRegistry:
        """Return a registry with ``kind`` added after these (a test's, or an app's own)."""
        return KindRegistry((*self._kinds, kind))

    def open(self, store: MemoryStore, embeddings: Embeddings) -> tuple[MemoryKind, ...]:
        """Return the kinds opened on ``store``, in order: what runs their hooks."""
        return tuple(kind(store, embeddings) for kind in self._kinds)


def check_registry(kinds: object) -> KindRegistry:
    """Return ``kinds`` if it is a :class:`KindRegistry`.

    Raises:
        InvalidInputError: it is anything else (a list of names, one kind).
    """
    if not isinstance(kinds, KindRegistry):
        raise InvalidInputError(f"kinds must be a KindRegistry, got {type(kinds).__name__}")
    return kinds


BUILTIN_KINDS = KindRegistry(
    (
        FactsKind,
        EpisodicMemory,
        RulesKind,
        MessagesKind,
        KnowledgeKind,
        ItemsKind,
    )
)
"""The memory kinds the library serves (``kinds=`` of a caller serves another registry)."""
