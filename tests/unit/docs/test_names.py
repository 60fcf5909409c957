"""Every Python name and repository path the README and docs/ mention in backticks exists.

A name is checked where it can be: a dotted name that starts at one of the repository's
packages (``agentic_memory.kinds.messages.MessageLog``) is imported and looked up attribute
by attribute; ``Class.attribute`` must be an attribute of a class of that name in the
packages; a call ``name(...)`` or an attribute of a variable (``mem.recall``) must be a name
the packages define (a module, a module-level name, or an attribute of one of their classes).
Names of other libraries, of the standard library and of example variables are listed in
``ALLOWED``; a path under one of the repository's folders must exist.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from agentic_memory.store import CollectionSpec

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PACKAGES = ("agentic_memory", "graph", "ingest", "prompts")
PATH_ROOTS = (
    "agentic_memory/",
    "graph/",
    "ingest/",
    "prompts/",
    "tests/",
    "docs/",
    "bench/",
    "tools/",
)

ALLOWED = frozenset(
    {
        # The standard library and builtins.
        "asyncio",
        "asyncio.run",
        "os",
        "os.environ",
        "json",
        "datetime",
        "uuid",
        "time",
        # LangGraph, LangChain, the SDK and other libraries the docs show beside ours.
        "langgraph",
        "get_client",
        "setup",
        "create_react_agent",
        "get_store",
        "get_config",
        "get_runtime",
        "init_chat_model",
        "InMemoryStore",
        "BaseStore",
        "client",
        # Formulas and the Go source of the Weaviate server, which docs/storage.md and
        # docs/weaviate.md cite.
        "ceil",
        "ln",
        "bm25",
        # The toy kind of docs/architecture.md lives in the tests (tests/unit/kinds/toy_kind.py).
        "BookmarksKind",
        "float32",
        "float64",
        "uint64",
        "propose",
        # Weaviate client calls the Weaviate docs name.
        "contains_any",
        "fetch_objects",
        "isoformat",
        # PostgreSQL's functions (the cross-machine write locks in docs/storage.md).
        "pg_advisory_xact_lock",
    }
)
"""Names the docs may mention that this repository does not define."""

ABSENT = frozenset({"MessageLog.aget", "MessageLog.aedit"})
"""Names docs/langgraph-store.md mentions as what the kinds do not offer yet."""

_FILE = re.compile(r"\.(py|go|md|toml|txt|json|sqlite|ipynb|yaml|yml|sh|lock)$")

_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# ``page(s)`` and ``http(s)`` are words, not calls.
_CALL = re.compile(rf"(?<![\w.])({_IDENT}(?:\.{_IDENT})*)\((?!s\))")
_DOTTED = re.compile(rf"^({_IDENT}(?:\.{_IDENT})+)$")
_PATH = re.compile(r"^[\w./-]+$")
_ASSIGNED = re.compile(r"\bself\.(\w+)\s*(?::[^=\n]+)?=")


def spans(text: str) -> Iterator[str]:
    """Yield the inline code spans of a Markdown text (fenced blocks are not prose)."""
    yield from _CODE.findall(_FENCE.sub("", text))


def mentioned(text: str) -> set[str]:
    """Return the Python names a Markdown text mentions: calls and dotted names in code spans."""
    names: set[str] = set()
    for span in spans(text):
        names.update(_CALL.findall(span))
        if (dotted := _DOTTED.match(span.strip())) is not None:
            names.add(dotted.group(1))
    return {n for n in names if not _FILE.search(n)}


def paths(text: str) -> set[str]:
    """Return the repository paths a Markdown text mentions in code spans."""
    found: set[str] = set()
    for span in spans(text):
        candidate = span.strip().split(":")[0].split("#")[0]
        if candidate.startswith(PATH_ROOTS) and _PATH.match(candidate):
            found.add(candidate)
    return found


@cache
def modules() -> tuple[ModuleType, ...]:
    """Import every module of the repository's packages (none connects at import)."""
    found: list[ModuleType] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(package)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            found.append(importlib.import_module(info.name))
    return tuple(found)


@cache
def defined() -> tuple[frozenset[str], dict[str, set[str]]]:
    """Return every name the packages define, and the attributes of their classes by class name."""
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for module in modules():
        names.update(module.__name__.split("."))
        for attr, value in vars(module).items():
            names.add(attr)
            if inspect.isclass(value) and value.__module__.startswith(PACKAGES):
                members = set()
                for klass in value.__mro__:
                    members |= set(vars(klass))
                    if klass.__module__.startswith(PACKAGES):
                        # Attributes an instance gets in its methods (``self.memory = ...``).
                        members |= set(_ASSIGNED.findall(inspect.getsource(klass)))
                members |= set(getattr(value, "__dataclass_fields__", {}))
                members |= set(getattr(value, "model_fields", {}))
                classes.setdefault(attr, set()).update(members)
                names.update(members)
            elif isinstance(value, CollectionSpec):
                # A collection is named like a class: ``EpisodicMemory.context_tags``.
                props = {p.name for p in value.properties}
                classes.setdefault(value.name, set()).update(props)
                names.update(props)
    return frozenset(names), classes


def resolves(name: str) -> bool:
    """Return whether a mentioned name exists (see the module doc for how it is checked)."""
    if name in ALLOWED or name in ABSENT or hasattr(builtins, name):
        return True
    parts = name.split(".")
    if parts[0] in ALLOWED:
        return True
    names, classes = defined()
    if parts[0] in PACKAGES:
        for cut in range(len(parts), 0, -1):
            try:
                value: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(value, attr):
                    return False
                value = getattr(value, attr)
            return True
        return False
    if len(parts) > 1:
        # ``Class.attribute`` of one of ours; any other receiver is a variable of an example
        # or a name of another project (the Weaviate server's Go source), not checked.
        return parts[0] not in classes or parts[1] in classes[parts[0]]
    return name in names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_name_the_docs_mention_exists(doc: Path) -> None:
    missing = sorted(n for n in mentioned(doc.read_text(encoding="utf-8")) if not resolves(n))
    assert missing == [], f"{doc.name} names what does not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_the_docs_mention_exists(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    missing = sorted(p for p in paths(text) if not (ROOT / p).exists())
    assert missing == [], f"{doc.name} names paths that do not exist: {missing}"


def test_the_checks_catch_dead_names_and_paths() -> None:
    text = (
        "Call `forget_everything(store)` or `AgenticStore.open()`; see "
        "`agentic_memory.kinds.messages.MessageLg` in `agentic_memory/store/weaviate.py`, "
        "but `agentic_memory.forget.forget_thread(...)` and `MessageLog.arecall` exist."
    )
    names = mentioned(text)
    assert {n for n in names if not resolves(n)} == {
        "forget_everything",
        "AgenticStore.open",
        "agentic_memory.kinds.messages.MessageLg",
    }
    assert paths(text) == {"agentic_memory/store/weaviate.py"}
    assert not (ROOT / "agentic_memory/store/weaviate.py").exists()
