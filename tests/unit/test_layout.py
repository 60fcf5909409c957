"""The test tree's split: unit tests mirror the package, integration tests sit apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import conftest

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "agentic_memory"
# Unit folders that test the repository around the package rather than one of its modules.
BEYOND_THE_PACKAGE = {"security", "docs", "examples", "bench", "tools"}


def test_every_test_file_is_either_a_unit_or_an_integration_test() -> None:
    stray = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in ("unit", "integration")
    ]
    assert stray == []


def test_the_unit_folders_mirror_the_package() -> None:
    for folder in (TESTS / "unit").iterdir():
        if not folder.is_dir() or folder.name == "__pycache__":
            continue
        module = PACKAGE / folder.name
        assert (
            module.is_dir()
            or module.with_suffix(".py").is_file()
            or folder.name in BEYOND_THE_PACKAGE
        ), f"tests/unit/{folder.name} mirrors nothing in agentic_memory/"
    assert (TESTS / "unit" / "store" / "weaviate").is_dir() == (
        PACKAGE / "store" / "weaviate"
    ).is_dir()


@dataclass
class _Item:
    """What the collection hook reads of a pytest item."""

    fspath: Path
    marked: bool = False
    added: list[str] = field(default_factory=list)

    @property
    def nodeid(self) -> str:
        return str(self.fspath.relative_to(TESTS))

    def get_closest_marker(self, name: str) -> object:
        return object() if self.marked and name == "integration" else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker.name)


def test_the_folder_sets_the_marker_and_a_misplaced_mark_is_refused() -> None:
    inside = _Item(TESTS / "integration" / "server" / "test_x.py")
    unit = _Item(TESTS / "unit" / "store" / "test_y.py")
    conftest.pytest_collection_modifyitems(None, [inside, unit])  # type: ignore[arg-type, list-item]
    assert inside.added == ["integration"]
    assert unit.added == []
    misplaced = _Item(TESTS / "unit" / "graph" / "test_z.py", marked=True)
    with pytest.raises(pytest.UsageError, match="unit/graph/test_z.py"):
        conftest.pytest_collection_modifyitems(None, [misplaced])  # type: ignore[arg-type, list-item]
