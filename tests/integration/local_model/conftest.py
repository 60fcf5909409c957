"""The local model's fixtures, shared with the model unit tests (``tests/unit/models/conftest.py``)."""

from tests.unit.models.conftest import (  # noqa: F401  (fixtures)
    _no_model_env,
    local_model_file,
    local_server,
)
