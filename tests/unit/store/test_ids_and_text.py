"""Deterministic ids stay what they were and never collide; invalid Unicode is refused cleanly."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agentic_memory.store import (
    InvalidInputError,
    MemoryObject,
    Where,
    check_text,
    check_user_id,
    make_id,
)
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.types import ID_NAMESPACE, KEY_SEPARATOR
from tests.unit.store.conftest import DIMS, make_spec, vec

# Ids computed by the code that wrote existing stores (before the separator was escaped):
# stored objects are found again by these exact ids, so they must never change.
RECORDED_IDS = {
    ("msg", "alice", "t1", "#0"): "4f687f22-082d-523f-b39b-a12d12287cb0",
    ("rules", "_global", "2"): "4396f617-0406-5f6e-93a8-ff514cf68e94",
    ("chunk", "abc123", "7"): "5c028252-946e-56b8-879f-9d4c852a3a84",
    ("knowledge-generation",): "7847e28e-80fc-5992-b05f-1370b0cd9d1a",
    ("fact", "alice", "diet", "1"): "18aef845-2471-57c2-ba79-6f7c971330a3",
    ("episode", "\u00e9lodie", "\u7ebf\u7a0b", "3"): "284defee-b39c-5467-a4a3-703f054e8a0a",
}

SURROGATE = "bad\ud800text"


@pytest.mark.parametrize("parts", list(RECORDED_IDS))
def test_ids_of_keys_without_the_separator_are_unchanged(parts: tuple[str, ...]) -> None:
    assert make_id(*parts) == RECORDED_IDS[parts]
    assert make_id(*parts) == str(uuid.uuid5(ID_NAMESPACE, KEY_SEPARATOR.join(parts)))


def test_keys_with_the_separator_inside_a_part_no_longer_collide() -> None:
    colliding = [("a\x1fb", "c"), ("a", "b\x1fc"), ("a", "b", "c"), ("a\x1fb\x1fc",)]
    ids = [make_id(*parts) for parts in colliding]
    assert len(set(ids)) == len(ids)
    # Still deterministic.
    assert make_id("a\x1fb", "c") == make_id("a\x1fb", "c")
    # A part that *is* the separator, or ends with it, is told apart from an extra empty part.
    edge = [("x", "\x1f"), ("x", "", ""), ("x\x1f",), ("x", "")]
    assert len({make_id(*p) for p in edge}) == len(edge)


def test_make_id_refuses_parts_that_are_not_text() -> None:
    with pytest.raises(InvalidInputError, match="at least one"):
        make_id()
    with pytest.raises(InvalidInputError, match="must be strings"):
        make_id("a", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="lone surrogate '\\\\ud800' at position 3"):
        make_id("msg", SURROGATE)


def test_check_text_accepts_any_valid_unicode_and_names_the_surrogate() -> None:
    assert check_text("caf\u00e9 \U0001f600 \u7ebf", "x") == "caf\u00e9 \U0001f600 \u7ebf"
    with pytest.raises(InvalidInputError) as info:
        check_text("ok\udcff", "the file name")
    # The message itself is printable: the surrogate appears escaped, never raw.
    message = str(info.value)
    message.encode("utf-8")
    assert message.startswith("the file name is not valid Unicode text")


def test_the_store_refuses_lone_surrogates_everywhere_with_invalid_input(tmp_path: Path) -> None:
    spec = make_spec("Notes")
    store = EmbeddedStore(tmp_path / "s", dims=DIMS)
    try:
        store.ensure_collection(spec)
        good = MemoryObject(make_id("n1"), {"body": "fine", "kind": "a", "tags": ["t"]}, vec(1))
        assert store.upsert(spec.name, [good], user="alice").ok
        attempts = {
            "user id": lambda: store.count(spec.name, user="al\ud800ice"),
            "text property": lambda: store.upsert(
                spec.name,
                [MemoryObject(make_id("n2"), {"body": SURROGATE}, vec(2))],
                user="alice",
            ),
            "text[] property": lambda: store.upsert(
                spec.name,
                [MemoryObject(make_id("n3"), {"tags": ["ok", SURROGATE]}, vec(3))],
                user="alice",
            ),
            "filter value": lambda: store.list_objects(
                spec.name, user="alice", where=[Where("kind", "eq", SURROGATE)]
            ),
            "query": lambda: store.hybrid(spec.name, query=SURROGATE, vector=vec(1), user="alice"),
        }
        for what, attempt in attempts.items():
            with pytest.raises(InvalidInputError, match="lone surrogate"):
                attempt()
            assert store.count(spec.name, user="alice") == 1, what
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            check_user_id("\udcffbob")
    finally:
        store.close()
