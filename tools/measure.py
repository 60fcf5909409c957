"""The house's structure in numbers (issue 33): run before and after a refactor.

``python tools/measure.py`` prints the product lines, the largest files, the file-level and
package-level import circles, the imports of ``agentic_memory`` made inside functions, the
upward package arrows and, per memory kind, the product modules outside the kind's home that
import it or name its classes. ``--tests`` prints the count of test functions and of
assertions (``assert`` statements and ``pytest.raises`` calls) under ``tests/``.

``tests/unit/test_layers.py`` reads the same import graph through :func:`read_imports`.
Standard library only, so it runs before the package is installed.
"""

from __future__ import annotations

import argparse
import ast
import re
import signal
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "agentic_memory"

KIND_HOMES: Mapping[str, tuple[str, ...]] = {
    "facts": ("kinds.facts",),
    "episodes": ("kinds.episodes",),
    "rules": ("kinds.rules",),
    "messages": ("kinds.messages",),
    "knowledge": ("kinds.knowledge",),
}
"""Where each built-in kind lives (module prefixes under the package)."""

KIND_CLASSES: Mapping[str, str] = {
    "facts": r"FactsKind|FactsSpace|FactStore",
    "episodes": r"EpisodesKind|EpisodesSpace|EpisodicMemory",
    "rules": r"RulesKind|RulesSpace|RuleBook|SharedRules",
    "messages": r"MessagesKind|MessagesSpace|MessageLog",
    "knowledge": r"KnowledgeKind|KnowledgeSpace|KnowledgeBase|UserKnowledgeSpace",
}
"""The class names of each kind: a module naming one touches the kind."""

PACKAGE_ORDER = (
    ("paths",),
    ("text_cache",),
    ("sync_edge", "twins"),
    ("operators",),
    ("checkpoints",),
    ("prompts",),
    ("models",),
    ("store",),
    ("namespaces",),
    ("kinds",),
    ("api",),
    ("langgraph_store",),
    ("forget",),
    ("transfer",),
    ("tools",),
    ("ingest",),
    ("graph",),
    ("ingest.graph",),
    ("cli",),
    ("",),
)
"""The packages bottom first: an arrow to a later entry runs up (the root package is last)."""


@dataclass(frozen=True)
class Import:
    """One import of a package module by another (``target`` is the deepest module named)."""

    source: str
    target: str
    line: int
    function: str | None
    """The enclosing function's name, or None for an import at module (or class) level."""


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Map every module of the package by dotted name (a package by its own name) to its file."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def short(module: str) -> str:
    """``agentic_memory.kinds.facts`` -> ``kinds.facts`` (the root package -> ``""``)."""
    return module.removeprefix(PACKAGE).removeprefix(".")


def _functions(tree: ast.AST) -> dict[int, str]:
    """Map the id of every import node inside a function to the innermost function's name."""
    inside: dict[int, str] = {}

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
            else:
                if function and isinstance(child, ast.Import | ast.ImportFrom):
                    inside[id(child)] = function
                visit(child, function)

    visit(tree, None)
    return inside


def read_imports(root: Path = ROOT) -> list[Import]:
    """Read every import between package modules.

    Module level, inside functions and under TYPE_CHECKING alike. Imports of a package
    ``__init__`` that is an ancestor of the importer are left out (importing a submodule runs
    them anyway).
    """
    found = modules(root)
    imports = []
    for module, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = _functions(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".") if is_package else module.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            else:
                continue
            targets = set()
            for name in names:
                while name and name not in found:
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):
                    targets.add(name)
            for target in sorted(targets):
                imports.append(Import(module, target, node.lineno, inside.get(id(node))))
    return imports


def circles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Find the strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def file_edges(imports: Iterable[Import]) -> dict[str, set[str]]:
    """Map each module to the modules it imports."""
    edges: dict[str, set[str]] = defaultdict(set)
    for found in imports:
        edges[found.source].add(found.target)
    return edges


def package_edges(imports: Iterable[Import], root: Path = ROOT) -> dict[str, set[str]]:
    """Map each package to the packages it imports (not its own ancestors)."""
    found = modules(root)

    def of(module: str) -> str:
        return module if found[module].name == "__init__.py" else module.rpartition(".")[0]

    edges: dict[str, set[str]] = defaultdict(set)
    for imported in imports:
        source, target = of(imported.source), of(imported.target)
        if source != target and not source.startswith(target + "."):
            edges[source].add(target)
    return edges


def _rank(module: str) -> int:
    name = short(module)
    best, rank = -1, len(PACKAGE_ORDER) - 1
    for position, prefixes in enumerate(PACKAGE_ORDER):
        for prefix in prefixes:
            if prefix and (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), position
    return rank


def upward_arrows(imports: Iterable[Import]) -> list[tuple[str, str]]:
    """Package arrows that run up PACKAGE_ORDER, as (from, to) short names."""
    arrows = set()
    for imported in imports:
        source, target = _rank(imported.source), _rank(imported.target)
        if target > source:
            arrows.add(
                (
                    "/".join(PACKAGE_ORDER[source]) or PACKAGE,
                    "/".join(PACKAGE_ORDER[target]) or PACKAGE,
                )
            )
    return sorted(arrows)


def home_of(module: str) -> str | None:
    """Name the kind whose home holds ``module``, if any."""
    name = short(module)
    for kind, homes in KIND_HOMES.items():
        if any(name == home or name.startswith(home + ".") for home in homes):
            return kind
    return None


def kind_touches(imports: Iterable[Import], root: Path = ROOT) -> dict[str, list[str]]:
    """List per kind the product modules outside its home that import it or name its classes."""
    touched: dict[str, set[str]] = {kind: set() for kind in KIND_HOMES}
    for imported in imports:
        kind = home_of(imported.target)
        if kind and home_of(imported.source) != kind:
            touched[kind].add(short(imported.source))
    for module, path in modules(root).items():
        text = path.read_text(encoding="utf-8")
        for kind, pattern in KIND_CLASSES.items():
            if home_of(module) != kind and re.search(rf"\b({pattern})\b", text):
                touched[kind].add(short(module))
    return {kind: sorted(found) for kind, found in touched.items()}


def inner_imports(imports: Iterable[Import]) -> list[Import]:
    """Keep the imports made inside functions."""
    return [found for found in imports if found.function]


def product_lines(root: Path = ROOT) -> list[tuple[int, str]]:
    """Count the lines of every product file: (lines, path), largest first."""
    sizes = [
        (len(path.read_text(encoding="utf-8").splitlines()), str(path.relative_to(root)))
        for path in modules(root).values()
    ]
    return sorted(sizes, reverse=True)


def test_counts(root: Path = ROOT) -> tuple[int, int]:
    """Count (test functions, assertions) under tests/: ``assert`` and ``pytest.raises`` nodes."""
    functions = assertions = 0
    for path in (root / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions += node.name.startswith("test_")
            elif isinstance(node, ast.Assert):
                assertions += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "raises"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "pytest"
            ):
                assertions += 1
    return functions, assertions


def main(argv: list[str] | None = None) -> int:
    """Print the measures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="count test functions and asserts")
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout (default: this one)")
    options = parser.parse_args(argv)
    root = options.root.resolve()
    if options.tests:
        functions, assertions = test_counts(root)
        print(f"test functions: {functions}  assertions: {assertions}")
        return 0
    sizes = product_lines(root)
    print(f"product lines: {sum(lines for lines, _ in sizes)} in {len(sizes)} files")
    print("largest files: " + ", ".join(f"{path} {lines}" for lines, path in sizes[:10]))
    print(f"files over 800 lines: {sum(lines > 800 for lines, _ in sizes)}")
    imports = read_imports(root)
    file_circles = circles(file_edges(imports))
    print(f"file-level circles: {len(file_circles)}")
    for circle in file_circles:
        print("   " + " ".join(short(module) for module in circle))
    package_circles = circles(package_edges(imports, root))
    print(f"package-level circles: {len(package_circles)}")
    for circle in package_circles:
        print("   " + " ".join(short(module) or PACKAGE for module in circle))
    arrows = upward_arrows(imports)
    print(f"upward package arrows: {len(arrows)}")
    for source, target in arrows:
        print(f"   {source} -> {target}")
    inner = inner_imports(imports)
    print(f"imports inside functions: {len(inner)}")
    for found in inner:
        print(f"   {short(found.source)}:{found.line} {found.function} -> {short(found.target)}")
    print("modules outside a kind's home that touch it:")
    for kind, touching in kind_touches(imports, root).items():
        print(f"   {kind} {len(touching)}: {' '.join(touching)}")
    return 0


if __name__ == "__main__":
    # A reader that stops early (``| head``) ends the run quietly, as other filters do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
