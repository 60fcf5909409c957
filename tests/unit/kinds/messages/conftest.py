"""Fixtures of the folders these tests came from, each name with its meaning there.

``tests/unit/api/conftest.py`` (``mem``) and, for the namespace tests, ``amem`` and
``clock`` of ``tests/unit/langgraph_store/conftest.py``.
"""

from tests.unit.api.conftest import embeddings, mem
from tests.unit.langgraph_store.conftest import amem, clock

__all__ = ["amem", "clock", "embeddings", "mem"]
