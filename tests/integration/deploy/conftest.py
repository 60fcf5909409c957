"""The deployment tests start PostgreSQL as the persistence tests do (their fixture)."""

from __future__ import annotations

from tests.integration.persistence.conftest import postgres_uri

__all__ = ["postgres_uri"]
