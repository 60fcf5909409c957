"""Namespaces of the LangGraph store: checks, the reserved kind roots, and matching."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from langgraph.store.base import InvalidNamespaceError, MatchCondition

from agentic_memory.store import InvalidInputError, check_text

__all__ = [
    "KIND_ROOTS",
    "NamespaceError",
    "SEPARATOR",
    "check_labels",
    "check_writable",
    "fixed_prefix",
    "join",
    "matches",
    "split",
]

KIND_ROOTS = ("facts", "episodes", "rules", "messages", "knowledge", "user_knowledge")
"""First labels reserved for the memory kinds, in the order results list them."""

SEPARATOR = "."
"""Joins labels in stored names; LangGraph forbids it inside a label, so joining is injective."""


class NamespaceError(InvalidInputError, InvalidNamespaceError):
    """A namespace is malformed: the store's ``InvalidInputError`` and LangGraph's error."""


def check_labels(namespace: object, what: str = "namespace") -> tuple[str, ...]:
    """Return ``namespace`` as a tuple of valid labels, or raise ``InvalidInputError``.

    LangGraph's own rules (a label is a non-empty string without ``.`` or NUL), plus
    valid Unicode (no lone surrogate), which no store can write.
    """
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise NamespaceError(f"a {what} is a tuple of strings, got {namespace!r:.80}")
    labels = tuple(namespace)
    for label in labels:
        if not isinstance(label, str):
            raise NamespaceError(
                f"{what} labels must be strings, got {type(label).__name__} in {labels!r:.80}"
            )
        if not label or SEPARATOR in label or "\x00" in label:
            raise NamespaceError(
                f"{what} label {label!r:.80} must be a non-empty string without '.' or NUL"
            )
        check_text(label, f"{what} label")
    return labels


def check_writable(namespace: object) -> tuple[str, ...]:
    """Check the namespace of a put: not empty, and not under LangGraph's ``langgraph`` root."""
    labels = check_labels(namespace)
    if not labels:
        raise NamespaceError("the namespace of an item cannot be empty")
    if labels[0] == "langgraph":
        raise NamespaceError(f'the root label "langgraph" is reserved by LangGraph: {labels}')
    return labels


def join(labels: Sequence[str]) -> str:
    """Return the stored name of a namespace."""
    return SEPARATOR.join(labels)


def split(name: str) -> tuple[str, ...]:
    """Return the namespace of a stored name."""
    return tuple(name.split(SEPARATOR))


def prefixes(labels: Sequence[str]) -> list[str]:
    """Return the stored names of every leading part of a namespace, itself included."""
    return [join(labels[:n]) for n in range(1, len(labels) + 1)]


def matches(conditions: Iterable[MatchCondition], namespace: tuple[str, ...]) -> bool:
    """Whether a namespace meets every prefix/suffix condition (``*`` matches any label)."""
    for condition in conditions:
        path = tuple(condition.path)
        if len(namespace) < len(path):
            return False
        if condition.match_type == "prefix":
            part = namespace[: len(path)]
        elif condition.match_type == "suffix":
            part = namespace[len(namespace) - len(path) :]
        else:
            raise InvalidInputError(f"unknown namespace match type {condition.match_type!r}")
        if any(want != "*" and got != want for got, want in zip(part, path, strict=True)):
            return False
    return True


def fixed_prefix(conditions: Iterable[MatchCondition]) -> tuple[str, ...]:
    """Return the leading labels every matching namespace must have (prefix, no wildcard)."""
    best: tuple[str, ...] = ()
    for condition in conditions:
        if condition.match_type != "prefix":
            continue
        fixed: list[str] = []
        for label in condition.path:
            if label == "*":
                break
            fixed.append(label)
        if len(fixed) > len(best):
            best = tuple(fixed)
    return best
