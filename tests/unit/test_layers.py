"""The package's floors: every module sits on one, and imports only its floor or below.

The floors are docs/architecture.md's ("The floors"). ``KNOWN`` lists the violations the
tree still holds while issue 33 removes them: a fix deletes its entries (a stale entry fails
too), and the list ends empty.
"""

from __future__ import annotations

from collections.abc import Iterable

from tools.measure import (
    Import,
    circles,
    file_edges,
    home_of,
    modules,
    read_imports,
    short,
)

FLOORS: tuple[tuple[str, ...], ...] = (
    ("paths", "text_cache", "sync_edge", "operators", "checkpoints", "prompts", "models"),
    ("store.types", "store.locks", "store.ranking", "store.threads", "store.checks", "store.bulk"),
    ("store.base", "store.coordination"),
    ("store.embedded", "store.weaviate"),
    ("store.open", "store"),
    ("namespaces",),
    (
        "kinds.contract",
        "kinds.importing",
        "kinds.recall_text",
        "kinds._restage",
        "kinds.retention",
        "kinds.model_output",
        "kinds._bound",
        "kinds.items",
    ),
    (
        "kinds.facts",
        "kinds.messages",
        "kinds.knowledge",
        "kinds.episodes",
        "kinds.rules",
    ),
    ("kinds.registry", "kinds"),
    ("api",),
    ("langgraph_store",),
    ("forget", "transfer", "tools", "ingest"),
    ("graph.context_window", "graph.state", "graph.context", "graph.resources", "graph.memory"),
    ("graph.admission", "graph.prompting"),
    ("graph.nodes",),
    ("graph",),
    ("ingest.graph",),
    ("cli",),
    ("",),
)
"""Bottom first; a module's floor is its longest matching prefix (``""``: the root package)."""

ALLOWED_INNER = frozenset(
    {
        # weaviate-client and gRPC load only when Weaviate is chosen.
        ("store.open", "open_store", "store.weaviate"),
    }
)
"""(module, function, imported module) of the imports inside functions kept on purpose."""

KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()
"""(module, imported module) of today's upward imports."""

KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()

KNOWN_INNER = frozenset({})

KNOWN_CROSS_KIND: frozenset[tuple[str, str]] = frozenset()
"""(module, imported module) of today's imports from one kind's home into another's."""

IMPORTS = read_imports()


def floor_of(module: str) -> int:
    name = short(module)
    best, floor = -1, -1
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            matches = name == prefix or name.startswith(prefix + ".") or prefix == ""
            if matches and len(prefix) > best:
                best, floor = len(prefix), level
    return floor


def _pairs(imports: Iterable[Import]) -> set[tuple[str, str]]:
    return {(short(found.source), short(found.target)) for found in imports}


def test_every_module_sits_on_exactly_one_floor() -> None:
    prefixes = [prefix for floor in FLOORS for prefix in floor]
    assert len(prefixes) == len(set(prefixes)), "a prefix is placed on two floors"
    unplaced = [
        short(m) for m in modules() if m != "agentic_memory" and floor_of(m) == len(FLOORS) - 1
    ]
    assert unplaced == [], "place these modules on a floor"


def test_no_module_imports_a_floor_above_its_own() -> None:
    upward = _pairs(f for f in IMPORTS if floor_of(f.target) > floor_of(f.source))
    assert upward == KNOWN_UPWARD


def test_no_two_files_import_each_other_through_a_circle() -> None:
    found = {frozenset(short(m) for m in circle) for circle in circles(file_edges(IMPORTS))}
    assert found == KNOWN_CIRCLES


def test_no_kind_imports_another_kind() -> None:
    crossing = _pairs(
        f
        for f in IMPORTS
        if home_of(f.source) and home_of(f.target) and home_of(f.source) != home_of(f.target)
    )
    assert crossing == KNOWN_CROSS_KIND


def test_imports_inside_functions_are_the_allowed_ones() -> None:
    inner = {(short(f.source), f.function, short(f.target)) for f in IMPORTS if f.function}
    assert inner == ALLOWED_INNER | KNOWN_INNER
