"""Fixtures shared with the unit tests: the local model's (``tests/unit/models/conftest.py``)
and the graph's store and embeddings (``tests/unit/graph/conftest.py``)."""

from tests.unit.graph.conftest import agentic, embeddings, store  # noqa: F401  (fixtures)
from tests.unit.models.conftest import (  # noqa: F401  (fixtures)
    _no_model_env,
    local_model_file,
    local_server,
)
