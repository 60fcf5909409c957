"""Fixtures of the folders these tests came from, each name with its meaning there.

``tests/unit/graph/conftest.py`` (the graph's store, model and nodes) and, for the namespace
tests, ``amem`` and ``clock`` of ``tests/unit/langgraph_store/conftest.py``.
"""

from tests.unit.graph.conftest import agentic, app, embeddings, model, resources, run_node, store
from tests.unit.langgraph_store.conftest import amem, clock

__all__ = [
    "agentic",
    "amem",
    "app",
    "clock",
    "embeddings",
    "model",
    "resources",
    "run_node",
    "store",
]
