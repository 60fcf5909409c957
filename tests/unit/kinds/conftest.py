"""Fixtures for the memory-kind contract tests: the CLI tests' real embedded store and embeddings.

The store lives where ``amem memories`` looks (``AMEM_HOME``, ``tests/conftest.py``).
"""

from tests.unit.cli.conftest import embeddings, store

__all__ = ["embeddings", "store"]
