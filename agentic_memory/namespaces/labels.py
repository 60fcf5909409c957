"""Namespaces of the LangGraph store: checks, labels, and matching."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from langgraph.store.base import InvalidNamespaceError, MatchCondition

from agentic_memory.store import InvalidInputError, check_text

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "MAX_NAMESPACE_CHARS",
    "NamespaceError",
    "SEPARATOR",
    "check_key",
    "check_labels",
    "check_writable",
    "fixed_prefix",
    "join",
    "matches",
    "split",
    "thread_label",
    "thread_of_label",
]

SEPARATOR = "."
"""Joins labels in stored names; LangGraph forbids it inside a label, so joining is injective."""

MAX_LABELS = 16
"""The most labels of a namespace. An item stores every leading part of its namespace (for
prefix searches), so the labels count twice: 40,000 labels grew the store by 82 MB."""
MAX_LABEL_CHARS = 1024
"""The longest label, in characters (a user id has at most 256)."""
MAX_NAMESPACE_CHARS = 2048
"""The longest namespace, in characters of its labels joined by ``.``."""
MAX_KEY_CHARS = 1024
"""The longest item key, in characters."""

_ESCAPES = {"%": "%25", ".": "%2E", "\x00": "%00"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}


class NamespaceError(InvalidInputError, InvalidNamespaceError):
    """A namespace is malformed: the store's ``InvalidInputError`` and LangGraph's error."""


def check_labels(namespace: object, what: str = "namespace") -> tuple[str, ...]:
    """Return ``namespace`` as a tuple of valid labels, or raise ``InvalidInputError``.

    LangGraph's own rules (a label is a non-empty string without ``.`` or NUL), plus
    valid Unicode (no lone surrogate), which no store can write, and the store's limits:
    at most ``MAX_LABELS`` labels, ``MAX_LABEL_CHARS`` each, ``MAX_NAMESPACE_CHARS`` in all.
    """
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise NamespaceError(f"a {what} is a tuple of strings, got {namespace!r:.80}")
    labels = tuple(namespace)
    if len(labels) > MAX_LABELS:
        raise NamespaceError(f"a {what} has at most {MAX_LABELS} labels, got {len(labels):,}")
    for label in labels:
        if not isinstance(label, str):
            raise NamespaceError(
                f"{what} labels must be strings, got {type(label).__name__} in {labels!r:.80}"
            )
        if not label or SEPARATOR in label or "\x00" in label:
            raise NamespaceError(
                f"{what} label {label!r:.80} must be a non-empty string without '.' or NUL"
            )
        if len(label) > MAX_LABEL_CHARS:
            raise NamespaceError(
                f"{what} label {label!r:.40} is longer than {MAX_LABEL_CHARS} characters"
            )
        check_text(label, f"{what} label")
    size = sum(map(len, labels)) + max(0, len(labels) - 1)
    if size > MAX_NAMESPACE_CHARS:
        raise NamespaceError(
            f"a {what} is {size:,} characters long, more than {MAX_NAMESPACE_CHARS:,}"
        )
    return labels


def check_key(key: object) -> str:
    """Return an item key: a string of valid Unicode of at most ``MAX_KEY_CHARS``."""
    if not isinstance(key, str):
        raise InvalidInputError(f"an item key is a string, got {type(key).__name__}")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidInputError(
            f"the item key is {len(key):,} characters, longer than {MAX_KEY_CHARS:,}"
        )
    return check_text(key, "the item key")


def thread_label(thread: str) -> str:
    """Return the namespace label of a thread id: ``%``, ``.`` and NUL percent-escaped.

    LangGraph forbids ``.`` in a label, and thread ids may hold any character; escaping
    ``%`` too makes the label of each thread id unique.
    """
    return "".join(_ESCAPES.get(c, c) for c in thread)


def thread_of_label(label: str) -> str:
    """Return the thread id a label names (see :func:`thread_label`).

    Raises:
        NamespaceError: the label is not the escaped form of any thread id (a ``%`` not
            followed by ``25``, ``2E`` or ``00``), or not its canonical spelling.
    """
    out: list[str] = []
    i = 0
    while i < len(label):
        if label[i] != "%":
            out.append(label[i])
            i += 1
            continue
        code = label[i : i + 3].upper()
        if code not in _UNESCAPES:
            raise NamespaceError(
                f"thread label {label!r:.80}: '%' starts an escape (%25 for '%', %2E for '.', "
                f"%00 for NUL); the label of thread {label!r:.60} is "
                f"{thread_label(label)!r:.80}"
            )
        out.append(_UNESCAPES[code])
        i += 3
    thread = "".join(out)
    if thread_label(thread) != label:
        raise NamespaceError(
            f"thread label {label!r:.80} is not the canonical escape of {thread!r:.60}: use "
            f"{thread_label(thread)!r:.80}"
        )
    return thread


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
