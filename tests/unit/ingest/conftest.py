"""Fixtures for the ingestion tests: real embedded storage, offline embeddings, generated files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.ingest.pdfs import filler, write_pdf

# Sentences with rare words, each placed on a known page of report.pdf.
KNOWN = {
    1: "The Glenmoor zephyr turbine produces forty two megawatts of electricity.",
    2: "Professor Quillon discovered the saffron nebula in nineteen eighty one.",
    3: "The Tarvish aqueduct was rebuilt with basalt blocks after the flood.",
    4: "Marigold the tortoise celebrated her hundredth birthday with strawberries.",
}


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "amem-home" / "store"


@pytest.fixture
def store(store_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(store_path, dims=embeddings.dims)
    yield s
    s.close()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    return folder


def report_pages(known: dict[int, str] = KNOWN) -> list[str]:
    """Four pages of filler with one known sentence in the middle of each."""
    return [
        f"{filler(page, 6)}\n\n{known[page]}\n\n{filler(page + 100, 6)}" for page in sorted(known)
    ]


@pytest.fixture
def report_pdf(docs: Path) -> Path:
    return write_pdf(docs / "report.pdf", report_pages(), title="Annual Field Report")
