"""The ``("rules", scope)`` namespaces: a rule version is immutable and numbered by ``propose``.

A value that cannot be a memory is refused with a clear error and changes nothing
(moved from ``tests/unit/langgraph_store/test_kinds.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_memory.langgraph_store import (
    AgenticStore,
    OperatorRequiredError,
    RuleVersionConflictError,
)
from agentic_memory.store import InvalidInputError

RULES = ("rules", "alice")


def rule(n: int) -> dict[str, str]:
    return {"instruction": f"Rule number {n}", "rationale": f"reason {n}"}


def test_a_rules_put_creates_the_next_version(amem: AgenticStore) -> None:
    assert amem.get(RULES, "latest") is None  # the starting set is not stored yet
    amem.put(RULES, "latest", {"rules": [rule(1), rule(2)], "note": "from the SDK"})
    versions = asyncio.run(amem.rules.aversions("alice"))
    assert [v.version for v in versions] == [1, 2]  # the starting set is stored with it
    latest = amem.get(RULES, "latest")
    assert latest is not None and latest.key == "latest"
    assert latest.value["version"] == 2
    assert latest.value["rules"] == [rule(1), rule(2)]
    assert latest.value["note"] == "from the SDK"
    assert latest.value["parent_version"] == 1
    assert amem.get(RULES, "2").value == latest.value  # type: ignore[union-attr]
    assert amem.get(RULES, "1").value["note"] == "starting rules"  # type: ignore[union-attr]
    assert amem.get(RULES, "3") is None and amem.get(RULES, "two") is None
    assert [i.key for i in amem.search(RULES)] == ["2", "1"]  # newest first
    # The same rules again: no new version.
    amem.put(RULES, "latest", {"rules": [rule(1), rule(2)]})
    assert len(asyncio.run(amem.rules.aversions("alice"))) == 2


def test_a_rule_set_read_back_can_be_edited_and_put_again(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    read = amem.get(RULES, "latest")
    assert read is not None
    amem.put(RULES, "latest", {**read.value, "rules": [rule(1), rule(2)]})
    latest = asyncio.run(amem.rules.alatest("alice"))
    assert latest.version == 3 and latest.parent_version == 2
    # An edit of version 2 after version 3 exists: a conflict, nothing written.
    with pytest.raises(RuleVersionConflictError, match="at version 3, not 2"):
        amem.put(RULES, "latest", {**read.value, "rules": [rule(5)]})
    assert asyncio.run(amem.rules.alatest("alice")).version == 3
    with pytest.raises(InvalidInputError, match="set by the store"):
        amem.put(RULES, "latest", {"rules": [rule(7)], "created_at": "2020-01-01T00:00:00+00:00"})


def test_rule_versions_are_immutable(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    with pytest.raises(InvalidInputError, match="immutable"):
        amem.put(RULES, "2", {"rules": [rule(9)]})
    with pytest.raises(InvalidInputError, match="cannot be deleted"):
        amem.delete(RULES, "2")
    with pytest.raises(InvalidInputError, match="cannot be deleted"):
        amem.delete(RULES, "latest")
    assert amem.get(RULES, "2").value["rules"] == [rule(1)]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rules": [rule(n) for n in range(11)]}, "at most 10 rules, got 11"),
        ({"rules": []}, "non-empty list"),
        ({"rules": ["Be brief – short is better"]}, "each rule is"),
        ({"rules": [{"instruction": "x"}]}, "each rule is"),
        ({"rules": [{"instruction": "", "rationale": "r"}]}, "empty"),
        ({"rules": [rule(1)], "rollback_to": 1}, "exactly one of"),
        ({}, "exactly one of"),
        ({"rules": [rule(1)], "version": "2"}, "version number"),
        ({"rules": [rule(1)], "source_users": ["bob"]}, "source_users is set by the store"),
        ({"rules": [rule(1)], "source_episodes": "e1"}, "list of strings"),
        ({"rules": [rule(1)], "priority": 1}, "no field 'priority'"),
    ],
)
def test_a_value_that_is_not_a_rule_set_is_refused(
    amem: AgenticStore, value: dict[str, Any], message: str
) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    with pytest.raises(InvalidInputError, match=message):
        amem.put(RULES, "latest", value)
    assert [v.version for v in asyncio.run(amem.rules.aversions("alice"))] == [1, 2]


def test_rollback_and_the_global_scope(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    amem.put(RULES, "latest", {"rules": [rule(2)]})
    amem.put(RULES, "latest", {"rollback_to": 2})
    latest = asyncio.run(amem.rules.alatest("alice"))
    assert latest.version == 4 and latest.rules == asyncio.run(amem.rules.aget("alice", 2)).rules
    assert latest.note == "rollback to version 2"
    assert latest.source_users == ()  # a put credits no one: the store never names a source
    # The shared rules are an operator's: this store is none, another one is.
    with pytest.raises(OperatorRequiredError, match="only an operator"):
        amem.put(("rules", "_global"), "latest", {"rules": [rule(3)]})
    ops = AgenticStore(amem.memory_store, amem.embeddings, operator="ops")
    with pytest.raises(InvalidInputError, match="source_users is set by the store"):
        ops.put(("rules", "_global"), "latest", {"rules": [rule(3)], "source_users": ["alice"]})
    ops.put(("rules", "_global"), "latest", {"rules": [rule(3)]})
    shared = amem.get(("rules", "_global"), "latest")
    assert shared is not None and shared.value["source_users"] == []
    assert "ops" in shared.value["note"]
    assert amem.list_namespaces(prefix=("rules",)) == [("rules", "_global"), ("rules", "alice")]
    assert amem.search(("rules", "alice"), query="Rule number 2")[0].key in {"3", "4"}
