"""Fixtures of the folders these tests came from, each name with its meaning there.

``tests/unit/ingest/conftest.py`` (the ingestion's store and documents) and, for the
namespace tests, ``amem`` and ``clock`` of ``tests/unit/langgraph_store/conftest.py``.
"""

from tests.unit.ingest.conftest import docs, embeddings, report_pdf, store, store_path
from tests.unit.langgraph_store.conftest import amem, clock

__all__ = ["amem", "clock", "docs", "embeddings", "report_pdf", "store", "store_path"]
