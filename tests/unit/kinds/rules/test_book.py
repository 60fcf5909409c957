from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage

from agentic_memory.kinds.rules import (
    MAX_RULES,
    RuleBook,
    RuleItem,
    parse_rules,
    rebase_rules,
    starting_rules,
)
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError


@pytest.fixture
def book(store, embeddings) -> RuleBook:
    return RuleBook(store, embeddings)


def rules(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"instruction": i, "rationale": r} for i, r in pairs]


def test_parse_rules_accepts_the_three_dashes() -> None:
    parsed = parse_rules("# comment\nDo A – because a\n\nDo B — because b\nDo C - because c\n")
    assert parsed == [
        RuleItem("Do A", "because a"),
        RuleItem("Do B", "because b"),
        RuleItem("Do C", "because c"),
    ]
    with pytest.raises(InvalidInputError, match="line 1 has no"):
        parse_rules("no separator here")
    with pytest.raises(InvalidInputError, match="at most 10"):
        parse_rules("\n".join(f"Rule {i} – why" for i in range(11)))


def test_starting_rules_come_from_the_prompt_file(book: RuleBook) -> None:
    start = starting_rules()
    assert 1 <= len(start) <= MAX_RULES
    latest = asyncio.run(book.alatest("alice"))
    assert (latest.version, latest.rules, latest.stored) == (1, tuple(start), False)
    assert [v.version for v in asyncio.run(book.aversions("alice"))] == [1]


def test_propose_stores_v1_and_v2_with_provenance(book: RuleBook) -> None:
    new = asyncio.run(
        book.apropose(
            "alice",
            rules(
                ("Ask about allergies first", "safety"),
                ("Use metric units", "the user is in Europe"),
            ),
            source_episodes=["ep-1"],
            source_users=["alice"],
            note="after t1",
        )
    )
    assert new is not None and new.version == 2 and new.parent_version == 1
    versions = asyncio.run(book.aversions("alice"))
    assert [(v.version, v.stored) for v in versions] == [(1, True), (2, True)]
    assert versions[0].rules == tuple(starting_rules())
    assert versions[1].source_episodes == ("ep-1",) and versions[1].source_users == ("alice",)
    assert versions[1].note == "after t1"
    # Proposing the same rules again creates nothing.
    assert asyncio.run(book.apropose("alice", versions[1].rules)) is None
    # Other scopes are untouched.
    assert asyncio.run(book.alatest("bob")).version == 1
    assert asyncio.run(book.alatest(GLOBAL_SCOPE)).version == 1


def test_more_than_ten_rules_or_bad_rules_write_nothing(book: RuleBook) -> None:
    with pytest.raises(InvalidInputError, match="at most 10"):
        asyncio.run(book.apropose("alice", rules(*[(f"Rule {i}", "why") for i in range(11)])))
    with pytest.raises(InvalidInputError, match="rationale is empty"):
        asyncio.run(book.apropose("alice", rules(("Do it", " "))))
    with pytest.raises(InvalidInputError, match="at least one"):
        asyncio.run(book.apropose("alice", []))
    assert [v.stored for v in asyncio.run(book.aversions("alice"))] == [False]


def test_a_misspelt_keyword_is_named_and_writes_nothing(book: RuleBook) -> None:
    with pytest.raises(
        TypeError, match=r"apropose\(\) got unexpected keyword arguments \['notes'\]"
    ):
        asyncio.run(book.apropose("alice", rules(("Do A", "a")), notes="typo"))  # type: ignore[call-arg]
    assert [v.stored for v in asyncio.run(book.aversions("alice"))] == [False]


def test_diff_and_rollback(book: RuleBook) -> None:
    asyncio.run(
        book.apropose(
            "alice", rules(("Greet the user by name", "warmth"), ("Answer briefly", "focus"))
        )
    )
    asyncio.run(
        book.apropose(
            "alice",
            rules(("Greet the user by their name", "warmth"), ("Cite sources", "trust")),
        )
    )
    diff = asyncio.run(book.adiff("alice", 2, 3))
    assert [r.instruction for r in diff.added] == ["Cite sources"]
    assert [r.instruction for r in diff.removed] == ["Answer briefly"]
    assert [(a.instruction, b.instruction) for a, b in diff.changed] == [
        ("Greet the user by name", "Greet the user by their name")
    ]
    report = str(diff)
    assert "+ Cite sources – trust" in report and "- Answer briefly – focus" in report

    restored = asyncio.run(book.arollback("alice", 2))
    assert restored.version == 4 and restored.note == "rollback to version 2"
    assert asyncio.run(book.alatest("alice")).rules == asyncio.run(book.aget("alice", 2)).rules
    assert asyncio.run(book.adiff("alice", 2, 4)).unchanged
    with pytest.raises(InvalidInputError, match="already equals"):
        asyncio.run(book.arollback("alice", 4))
    with pytest.raises(InvalidInputError, match="no version 9"):
        asyncio.run(book.aget("alice", 9))


async def test_async_twins(book: RuleBook) -> None:
    created = await book.apropose("alice", rules(("Be kind", "people")), source_users=["alice"])
    assert created is not None
    assert (await book.alatest("alice")).version == 2
    assert len(await book.aversions("alice")) == 2
    assert (await book.arollback("alice", 1)).version == 3


def test_search_ranks_stored_versions_of_one_scope(book: RuleBook) -> None:
    assert (
        asyncio.run(book.asearch("alice", "bullet points")) == []
    )  # the starting set is never stored
    asyncio.run(book.apropose("alice", rules(("Answer with bullet points", "she skims"))))
    asyncio.run(
        book.apropose("alice", rules(("Cite the page of every claim", "she checks sources")))
    )
    asyncio.run(book.apropose("bob", rules(("Answer with bullet points", "he skims too"))))

    found = asyncio.run(book.asearch("alice", "cite the page", alpha=0.0, limit=5))
    assert [v.version for v, _ in found][0] == 3
    assert {v.scope for v, _ in found} == {"alice"}
    assert found[0][0].rules[0].instruction == "Cite the page of every claim"


def test_search_refuses_bad_arguments(book: RuleBook) -> None:
    for query, message in (("", "non-empty"), ("\udc00", "lone surrogate")):
        with pytest.raises(InvalidInputError, match=message):
            asyncio.run(book.asearch("alice", query))
    with pytest.raises(InvalidInputError, match="alpha"):
        asyncio.run(book.asearch("alice", "bullet", alpha=-0.1))
    with pytest.raises(InvalidInputError, match="reserved|empty"):
        asyncio.run(book.asearch("", "bullet"))


def _items(*names: str) -> list[RuleItem]:
    return [RuleItem(n, "why") for n in names]


def test_rebase_replays_a_rewrite_on_a_newer_version() -> None:
    base = _items("A", "B", "C")
    mine = _items("A", "C", "Mine")  # dropped B, added Mine
    theirs = _items("A", "B", "C", "Theirs")  # added Theirs
    assert rebase_rules(base, mine, theirs) == _items("A", "C", "Theirs", "Mine")
    # Their removal stays removed, and a rule both added is kept once.
    assert rebase_rules(base, _items("A", "B", "C", "X"), _items("A", "X")) == _items("A", "X")
    # Nothing to replay: the newer version as it is.
    assert rebase_rules(base, base, theirs) == theirs


def test_rebase_over_ten_lets_the_oldest_carried_rules_give_way() -> None:
    base = _items(*(f"R{i}" for i in range(10)))
    mine = [*base[1:], *_items("Mine")]
    theirs = [*base[1:], *_items("Theirs")]
    # Both rewrites kept R1..R9 and added one rule each: R1 gives way to stay at ten.
    assert rebase_rules(base, mine, theirs) == [*base[2:], *_items("Theirs", "Mine")]
    # When only additions are left, a rewrite must choose.
    full = _items(*(f"T{i}" for i in range(10)))
    assert rebase_rules(base, [*base[:9], *_items("Mine")], full) is None


def test_rebase_over_ten_never_lets_a_protected_rule_give_way() -> None:
    base = _items(*(f"R{i}" for i in range(10)))
    mine = [*base[1:], *_items("Mine")]
    theirs = [*base[1:], *_items("Theirs")]
    # R1 would give way first; protected, it stays and R2 (the next oldest) goes.
    merged = rebase_rules(base, mine, theirs, protected=lambda r: r.instruction == "R1")
    assert merged == [base[1], *base[3:], *_items("Theirs", "Mine")]
    # When every carried-over rule is protected, only a new rewrite may choose.
    assert rebase_rules(base, mine, theirs, protected=lambda r: True) is None


async def test_an_end_that_keeps_meeting_newer_rules_fails_nothing_and_stays_pending(
    app, model, resources, monkeypatch
) -> None:
    res, _ = resources
    from agentic_memory.kinds.rules import RuleConflictError

    async def always_newer(scope: str, *args: object, **kwargs: object) -> None:
        raise RuleConflictError(scope, 1, 2)

    config = {"configurable": {"thread_id": "t"}}
    await app.ainvoke({"messages": [HumanMessage("Hello.")]}, config, context={"user_id": "a"})
    with monkeypatch.context() as patched:
        patched.setattr(res.rules, "apropose", always_newer)
        ended = await app.ainvoke({"end_conversation": True}, config, context={"user_id": "a"})
    assert ended["rules_version_created"] is None
    assert "kept changing" in ended["rules_note"]
    assert len(ended["rules_conflicts"]) == 64 and ended["pending_reflection"] is not None
    # The next end learns from the same episode: nothing was lost.
    again = await app.ainvoke({"end_conversation": True}, config, context={"user_id": "a"})
    assert again["rules_version_created"] == 2 and again["rules_conflicts"] == []
    episode = (await res.episodes.alist("a"))[0]
    assert (await res.rules.alatest("a")).source_episodes == (episode.id,)
