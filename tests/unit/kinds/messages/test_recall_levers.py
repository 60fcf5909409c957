"""The message log's recall levers: prepared keyword text, speakers, context re-ranking, upgrade."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from agentic_memory.api import Memory
from agentic_memory.kinds.messages import (
    MESSAGES,
    MESSAGES_V1,
    MessageLog,
    aupgrade_message_log,
)
from agentic_memory.kinds.messages import recall as recall_module
from agentic_memory.kinds.recall_text import (
    STOPWORDS,
    date_words,
    embedding_text,
    keyword_query,
    keyword_text,
    keywords,
    search_text,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, MemoryObject, StoreError, make_id
from agentic_memory.store.embedded import EmbeddedStore, tokenize
from agentic_memory.text_cache import TextCache
from tests.unit.api.conftest import logged

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


# -- the prepared text ---------------------------------------------------------------------


def test_keywords_stem_and_drop_stop_words() -> None:
    assert keywords("What did you say about hiking with the dogs?") == ["say", "hike", "dog"]
    assert keywords("I've been running; she RUNS daily") == ["run", "run", "daili"]
    # Tokens are what the store's tokeniser gives back: a prepared text round-trips.
    text = keyword_text(["Café owners' résumés, e-mails & 2023 plans"])
    assert tokenize(text) == text.split()
    assert "2023" in text.split()


def test_keyword_query_falls_back_to_the_query_when_it_is_only_stop_words() -> None:
    assert keyword_query("Which hikes did Caroline plan?") == "hike carolin plan"
    assert keyword_query("what was that?") == "what was that?"
    assert all(w in STOPWORDS for w in tokenize("what was that"))


def test_date_words_and_unreadable_dates() -> None:
    assert date_words("2023-05-08T13:56:00+00:00") == "8 May 2023"
    assert date_words("2023-05-08T13:56:00Z") == "8 May 2023"
    assert date_words("not a date") == ""


def test_search_text_holds_speaker_date_content_and_previous_turn() -> None:
    prepared = search_text(
        "Twice a week, usually.",
        speaker="Melanie",
        created_at=T0.isoformat(),
        previous="How often do you go swimming?",
    ).split()
    assert prepared == [
        "8",
        "may",
        "2023",
        "melani",
        "twice",
        "week",
        "usual",
        "often",
        "go",
        "swim",
    ]
    assert embedding_text("hello", speaker="Melanie") == "Melanie: hello"
    assert embedding_text("hello") == "hello"


# -- the log stores and uses it --------------------------------------------------------------


def test_names_are_kept_as_speakers_and_given_back(mem: Memory) -> None:
    asyncio.run(
        mem.messages.aremember(
            "alice",
            "t1",
            [
                HumanMessage("I adopted a puppy", id="h", name="Caroline"),
                {"role": "assistant", "content": "Congratulations!", "id": "a", "name": " Mel  B "},
                {"role": "user", "content": "Thanks", "id": "u"},
            ],
            now=T0,
        )
    )
    listed = mem.list("alice", thread_id="t1")
    assert [m.speaker for m in listed] == ["Caroline", "Mel B", ""]
    message = listed[0].to_message()
    assert isinstance(message, HumanMessage) and message.name == "Caroline"
    stored = mem.store.get(MESSAGES.name, listed[1].id, user="alice")
    assert stored is not None
    assert stored.properties["search_text"].split()[:4] == ["8", "may", "2023", "mel"]
    # The reply's keyword text holds the turn before it.
    assert "puppi" in stored.properties["search_text"].split()


def test_a_name_that_is_not_text_is_refused_and_nothing_is_written(mem: Memory) -> None:
    with pytest.raises(InvalidInputError, match="message 1: name must be a string"):
        mem.remember(
            "alice",
            "t1",
            [
                {"role": "user", "content": "hi"},
                {"role": "user", "content": "there", "name": 42},
            ],
        )
    assert logged(mem, "alice") == 0


def test_the_previous_turn_comes_from_earlier_calls_of_the_thread(mem: Memory) -> None:
    log = mem.messages
    asyncio.run(
        log.aremember("alice", "t1", [HumanMessage("Where do you go swimming?", id="q")], now=T0)
    )
    asyncio.run(
        log.aremember("alice", "t1", [AIMessage("At the lake near the cabin.", id="a")], now=T0)
    )
    asyncio.run(log.aremember("alice", "t2", [HumanMessage("Unrelated thread.", id="x")], now=T0))
    reply = mem.store.get(MESSAGES.name, make_id("msg", "alice", "t1", "a"), user="alice")
    first = mem.store.get(MESSAGES.name, make_id("msg", "alice", "t2", "x"), user="alice")
    assert reply is not None and first is not None
    assert "swim" in reply.properties["search_text"].split()
    assert "swim" not in first.properties["search_text"].split()


def _keyword_text(mem: Memory, user: str, thread: str, key: str) -> list[str]:
    stored = mem.store.get(MESSAGES.name, make_id("msg", user, thread, key), user=user)
    assert stored is not None
    return list(stored.properties["search_text"].split())


def test_search_text_holds_the_turn_after_it() -> None:
    prepared = search_text(
        "We went camping again.",
        speaker="Melanie",
        previous="Any plans?",
        following="In the forest? Which one?",
    ).split()
    assert prepared == ["melani", "went", "camp", "plan", "forest", "one"]


def test_a_remark_is_found_by_the_words_of_the_turn_after_it(mem: Memory) -> None:
    log = mem.messages
    asyncio.run(
        log.aremember(
            "alice", "t1", [HumanMessage("We went camping again.", id="r", name="Mel")], now=T0
        )
    )
    assert "forest" not in _keyword_text(mem, "alice", "t1", "r")
    # The answer comes in a later call: the remark, the thread's last turn until then,
    # gets its words.
    asyncio.run(
        log.aremember("alice", "t1", [AIMessage("In the forest? Which one?", id="a")], now=T0)
    )
    asyncio.run(log.aremember("alice", "t2", [HumanMessage("My printer is broken", id="p")]))
    assert "forest" in _keyword_text(mem, "alice", "t1", "r")
    hits = mem.recall("alice", "Where did Mel go in the forest?", k=2, alpha=0.0)
    assert {h.content for h in hits} == {"We went camping again.", "In the forest? Which one?"}
    # Within one call too (a user message and its answer), and the last turn has none.
    mem.remember(
        "bob",
        "t1",
        [
            {"role": "user", "content": "We went camping again.", "id": "r"},
            {"role": "assistant", "content": "In the forest?", "id": "a"},
        ],
    )
    assert "forest" in _keyword_text(mem, "bob", "t1", "r")
    assert _keyword_text(mem, "bob", "t1", "a")[-3:] == ["forest", "went", "camp"]


def test_a_turn_logged_again_keeps_both_neighbours_in_its_keyword_text(mem: Memory) -> None:
    turns = [
        {"role": "user", "content": "Any plans for the weekend?", "id": "1"},
        {"role": "assistant", "content": "Camping with the kids.", "id": "2"},
        {"role": "user", "content": "In the forest?", "id": "3"},
    ]
    for turn in turns:
        mem.remember("alice", "t1", [turn])
    before = {key: _keyword_text(mem, "alice", "t1", key) for key in "123"}
    assert "forest" in before["2"] and "weekend" in before["2"]
    # Logging the same turn again alone reads its stored neighbours: nothing changes.
    mem.remember("alice", "t1", [turns[1]])
    assert {key: _keyword_text(mem, "alice", "t1", key) for key in "123"} == before
    # An edit of the middle turn keeps both of them.
    mem.remember("alice", "t1", [{**turns[1], "content": "Hiking with the kids."}])
    edited = _keyword_text(mem, "alice", "t1", "2")
    assert {"hike", "weekend", "forest"} <= set(edited) and "camp" not in edited


def test_concurrent_writers_give_every_turn_the_turn_after_it(mem: Memory) -> None:
    def write(writer: int) -> None:
        for n in range(6):
            mem.remember(
                "alice",
                "shared",
                [{"role": "user", "content": f"word{writer}x{n} said", "id": f"{writer}-{n}"}],
            )

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(write, range(3)))
    turns = mem.list("alice", thread_id="shared")
    assert [m.turn for m in turns] == list(range(18))
    for m, after in zip(turns, turns[1:], strict=False):
        stored = mem.store.get(MESSAGES.name, m.id, user="alice")
        assert stored is not None
        assert set(keywords(after.content)) <= set(stored.properties["search_text"].split())


def test_marking_a_turn_while_its_answer_is_logged_keeps_the_answers_words(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One writer marks the thread's last turn important (logging it again, unchanged);
    # between its read and its rewrite another writer logs the answer, whose words go into
    # that turn's keyword text. The mark must not write back the keyword text it read.
    log = mem.messages
    turn = {"role": "user", "content": "We went camping.", "id": "r"}
    mem.remember("alice", "t1", [turn])
    real = mem.store.aupdate
    fired: list[bool] = []

    async def answer_first(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(True)
            await log.aremember(
                "alice", "t1", [{"role": "assistant", "content": "In the forest?", "id": "a"}]
            )
        return await real(*args, **kwargs)

    monkeypatch.setattr(mem.store, "aupdate", answer_first)
    mem.remember("alice", "t1", [{**turn, "important": True}])
    assert fired
    stored = mem.store.get(MESSAGES.name, make_id("msg", "alice", "t1", "r"), user="alice")
    assert stored is not None and stored.properties["important"] is True
    assert "forest" in stored.properties["search_text"].split()


def test_a_failure_after_the_new_turns_are_stored_does_not_lose_or_repeat_them(
    mem: Memory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mem.remember("alice", "t1", [{"role": "user", "content": "We went camping.", "id": "1"}])

    async def broken(*args: object, **kwargs: object) -> None:
        raise StoreError("the store went away")

    monkeypatch.setattr(mem.store, "aupdate", broken)
    with caplog.at_level("WARNING", logger="agentic_memory.kinds.messages"):
        ids = mem.remember("alice", "t1", [{"role": "user", "content": "In the forest?"}])
    assert len(ids) == 1
    assert "keeps its keyword text without the turn after it" in caplog.text
    monkeypatch.undo()
    assert [m.content for m in mem.list("alice", thread_id="t1")] == [
        "We went camping.",
        "In the forest?",
    ]
    # The turn is searchable by its own words, and the next write goes on as usual.
    assert "forest" not in _keyword_text(mem, "alice", "t1", "1")
    assert mem.recall("alice", "camping", k=1, alpha=0.0)[0].content == "We went camping."
    mem.remember("alice", "t1", [{"role": "user", "content": "Yes, by the lake.", "id": "3"}])
    assert [m.turn for m in mem.list("alice", thread_id="t1")] == [0, 1, 2]


def test_keyword_recall_meets_other_word_forms(mem: Memory) -> None:
    mem.remember(
        "alice", "t1", [{"role": "user", "content": "We hiked up the mountains", "id": "1"}]
    )
    mem.remember("alice", "t2", [{"role": "user", "content": "My printer is broken", "id": "2"}])
    hits = mem.recall("alice", "any hiking on a mountain?", k=1, alpha=0.0)
    assert [h.content for h in hits] == ["We hiked up the mountains"]
    assert 0.0 <= hits[0].score <= 1.0


def test_a_reply_is_found_by_the_words_of_the_question_it_answers(mem: Memory) -> None:
    mem.remember(
        "alice",
        "t1",
        [
            {"role": "assistant", "content": "Which instrument do you play?", "id": "q"},
            {"role": "user", "content": "The cello, for ten years now.", "id": "a"},
            {"role": "assistant", "content": "Lovely.", "id": "z"},
        ],
    )
    mem.remember("alice", "t2", [{"role": "user", "content": "I like the sea", "id": "s"}])
    hits = mem.recall("alice", "what instrument does she play", k=2, alpha=0.0)
    assert {h.content for h in hits} == {
        "Which instrument do you play?",
        "The cello, for ten years now.",
    }


def test_context_reranking_prefers_the_turn_whose_thread_and_neighbours_match(
    mem: Memory,
) -> None:
    # Two turns match "lasagna" alike; only one sits in a conversation about the recipe.
    mem.remember(
        "alice",
        "cooking",
        [
            {"role": "user", "content": "My grandmother's recipe book is great", "id": "1"},
            {"role": "user", "content": "Her lasagna takes three hours", "id": "2"},
            {"role": "user", "content": "The recipe uses fresh pasta sheets", "id": "3"},
        ],
    )
    mem.remember(
        "alice",
        "office",
        [
            {"role": "user", "content": "The meeting ran late today", "id": "4"},
            {"role": "user", "content": "Someone brought lasagna for lunch", "id": "5"},
            {"role": "user", "content": "Then the printer jammed again", "id": "6"},
        ],
    )
    hits = mem.recall("alice", "grandmother recipe lasagna", k=3, alpha=0.0)
    assert hits[0].thread_id == "cooking"
    lasagna = [h for h in hits if "lasagna" in h.content]
    assert [h.thread_id for h in lasagna][:1] == ["cooking"]
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_recall_and_arecall_agree_and_respect_thread_filters(mem: Memory) -> None:
    for t in ("t1", "t2", "t3"):
        mem.remember("alice", t, [{"role": "user", "content": f"trip to Rome in {t}", "id": t}])
    sync = mem.recall("alice", "Rome trip", k=5, exclude_thread="t2")
    asyn = asyncio.run(mem.arecall("alice", "Rome trip", k=5, exclude_thread="t2"))
    assert [(h.id, round(h.score, 9)) for h in sync] == [(h.id, round(h.score, 9)) for h in asyn]
    assert {h.thread_id for h in sync} == {"t1", "t3"}
    only = mem.recall("alice", "Rome trip", k=5, thread_id="t3")
    assert [h.thread_id for h in only] == ["t3"]


# -- a log written before the prepared text is upgraded ----------------------------------------


def _old_store(path: Path, embeddings: LocalEmbeddings) -> EmbeddedStore:
    store = EmbeddedStore(path, dims=embeddings.dims)
    store.ensure_collection(MESSAGES_V1)
    rows = [
        ("t1", 0, "human", "Where do you go swimming?"),
        ("t1", 1, "ai", "At the lake near the cabin."),
        ("t2", 0, "human", "My printer is broken"),
    ]
    vectors = embeddings.embed_documents([r[3] for r in rows])
    for user in ("alice", "bob"):
        store.upsert(
            MESSAGES_V1.name,
            [
                MemoryObject(
                    make_id("msg", user, thread, f"#{turn}"),
                    {
                        "content": text,
                        "role": role,
                        "thread_id": thread,
                        "turn": turn,
                        "created_at": T0.isoformat(),
                        "metadata_json": '{"k": 1}',
                    },
                    vector,
                )
                for (thread, turn, role, text), vector in zip(rows, vectors, strict=True)
            ],
            user=user,
        ).raise_for_failures()
    return store


def test_an_old_message_log_is_upgraded_on_first_use(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = _old_store(tmp_path / "s", embeddings)
    log = MessageLog(store, embeddings)
    hits = asyncio.run(log.arecall("alice", "swimming spot", k=2, alpha=0.0))
    assert [h.content for h in hits][:2] == [
        "Where do you go swimming?",
        "At the lake near the cabin.",
    ]
    # No staging copy left; the log's turn marks beside it (kinds/messages/schema.py).
    assert sorted(store.collections()) == ["MessageLog", "MessageTurnMarks"]
    assert store.count(MESSAGES.name, user="bob") == 3
    listed = asyncio.run(log.alist("bob", thread_id="t1"))
    assert [(m.turn, m.content, m.metadata) for m in listed] == [
        (0, "Where do you go swimming?", {"k": 1}),
        (1, "At the lake near the cabin.", {"k": 1}),
    ]
    reply = store.get(MESSAGES.name, listed[1].id, user="bob")
    assert reply is not None and "swim" in reply.properties["search_text"].split()
    assert asyncio.run(aupgrade_message_log(store, embeddings)) is False  # nothing left to do
    store.close()


def test_an_upgrade_killed_after_the_old_log_was_dropped_is_finished(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = _old_store(tmp_path / "s", embeddings)

    class Killed(Exception):
        pass

    real_drop = store.drop_collection
    calls: list[str] = []

    def drop_then_die(name: str) -> None:
        calls.append(name)
        real_drop(name)
        if name == MESSAGES.name:
            raise Killed

    store.drop_collection = drop_then_die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        asyncio.run(aupgrade_message_log(store, embeddings))
    store.drop_collection = real_drop  # type: ignore[method-assign]
    assert "MessageLog" not in store.collections()  # only the staging copy holds them now
    store.close()

    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    log = MessageLog(reopened, embeddings)
    assert [m.content for m in asyncio.run(log.alist("alice", thread_id="t2"))] == [
        "My printer is broken"
    ]
    assert sorted(reopened.collections()) == ["MessageLog", "MessageTurnMarks"]
    assert reopened.count(MESSAGES.name, user="alice") == 3
    reopened.close()


@pytest.fixture
def cold_old_log(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    _old_store(tmp_path / "s", embeddings).close()
    # Reopened off the loop: its first calls find empty caches, as after a server restart.
    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    yield reopened
    reopened.close()


async def test_an_old_log_is_upgraded_without_blocking_the_loop(
    cold_old_log: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    # Under blockbuster (tests/conftest.py): the upgrade is async like the rest of the log,
    # so it reaches the cold store only through its async methods, never on the loop.
    log = MessageLog(cold_old_log, embeddings)
    listed = await log.alist("alice", thread_id="t2")
    assert [m.content for m in listed] == ["My printer is broken"]
    assert sorted(await cold_old_log.acollections()) == ["MessageLog", "MessageTurnMarks"]
    assert await cold_old_log.acount(MESSAGES.name, user="alice") == 3
    assert await aupgrade_message_log(cold_old_log, embeddings) is False


def test_the_turn_that_says_the_words_outranks_the_reply_that_only_follows_them(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reply's keyword text holds the turn before it and is shorter, so BM25 alone ranks
    # the reply first; the share of the query's words a turn says itself reverses that.
    messages = [
        {
            "role": "assistant",
            "content": "Tell me everything about your weekend plans, the weather and the trip",
            "id": "0",
        },
        {"role": "user", "content": "I visited the pottery studio", "id": "1"},
        {"role": "assistant", "content": "Nice!", "id": "2"},
    ]
    mem.remember("alice", "t1", messages)
    hits = mem.recall("alice", "pottery studio", k=2, alpha=0.0)
    assert [h.content for h in hits] == ["I visited the pottery studio", "Nice!"]
    monkeypatch.setattr(recall_module, "OWN_WORDS_WEIGHT", 0.0)
    without = mem.recall("alice", "pottery studio", k=2, alpha=0.0)
    assert [h.content for h in without] == ["Nice!", "I visited the pottery studio"]


def test_an_export_of_an_old_log_imports_and_is_upgraded(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    from agentic_memory.transfer import export_memories, import_memories

    old = _old_store(tmp_path / "old", embeddings)
    path = tmp_path / "old.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_memories(old, out, embedding_model="wordllama")
    old.close()
    target = EmbeddedStore(tmp_path / "new", dims=embeddings.dims)
    import_memories(target, path, embeddings=embeddings, embedding_model="wordllama")
    log = MessageLog(target, embeddings)
    hits = asyncio.run(log.arecall("bob", "swimming", k=1, alpha=0.0))
    assert [h.content for h in hits] == ["Where do you go swimming?"]
    assert target.spec(MESSAGES.name).searchable == ("search_text",)
    target.close()


# -- bounded caches ----------------------------------------------------------------------------


def test_text_cache_drops_the_least_recently_used_past_either_bound() -> None:
    calls: list[str] = []

    def compute(text: str) -> int:
        calls.append(text)
        return len(text)

    cache = TextCache(compute, max_entries=3, max_chars=10)
    assert [cache(t) for t in ("aa", "bb", "cc")] == [2, 2, 2]
    assert cache("aa") == 2  # a hit, and "aa" is now the most recently used
    assert calls == ["aa", "bb", "cc"]
    cache("dd")  # a fourth entry: "bb", the least recently used, goes
    assert len(cache) == 3 and cache.chars == 6
    cache("bb")
    assert calls[-1] == "bb", "bb was dropped and computed again"
    cache("eeeeeeee")  # 8 characters: the oldest go until 10 or fewer are held
    assert cache.chars <= 10 and len(cache) == 2
    cache("x" * 11)  # longer than the whole cache: computed, never kept
    assert cache.chars <= 10 and "x" * 11 not in cache._entries
    cache.clear()
    assert len(cache) == 0 and cache.chars == 0
    with pytest.raises(ValueError, match="positive"):
        TextCache(compute, max_entries=0, max_chars=10)


def test_text_cache_stays_consistent_under_threads() -> None:
    cache = TextCache(len, max_entries=50, max_chars=400)
    texts = [f"text number {i}" for i in range(300)]

    def work(offset: int) -> list[int]:
        return [cache(texts[(offset + i) % len(texts)]) for i in range(2000)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(0, 400, 100)))
    for offset, got in zip(range(0, 400, 100), results, strict=True):
        assert got == [len(texts[(offset + i) % len(texts)]) for i in range(2000)]
    assert len(cache) <= 50
    assert cache.chars == sum(len(t) for t in cache._entries) <= 400


def test_recalled_turns_keywords_are_cached_within_bounds() -> None:
    # A long-running process recalls new turns every turn: keyed by whole messages, the
    # cache of their keywords grew until 16,384 of them were held, whatever their length.
    cache = recall_module.OWN_KEYWORDS
    cache.clear()
    long_turn = " ".join(f"word{i}" for i in range(150))
    for n in range(2000):
        got = recall_module._own_keywords("Caroline", f"turn {n} {long_turn}")
        assert got == frozenset(keywords(f"Caroline turn {n} {long_turn}"))
    assert len(cache) <= cache.max_entries
    assert 0 < cache.chars <= cache.max_chars
    assert cache.max_chars < 2000 * len(long_turn), "the test must overflow the bound"
    cache.clear()


def test_recall_with_a_small_keyword_cache_ranks_as_without_one(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(12):
        asyncio.run(
            mem.messages.aremember(
                "alice",
                f"t{n % 3}",
                [
                    {"role": "user", "content": f"hiking trip {n} with the dogs", "id": f"h{n}"},
                    {"role": "ai", "content": f"sounds fun, trip {n}", "id": f"a{n}"},
                ],
                now=T0,
            )
        )
    queries = ["hiking with dogs", "trip 7", "fun"]
    want = [[(m.id, m.score) for m in mem.recall("alice", q, k=5)] for q in queries]
    small = TextCache(recall_module._keyword_set, max_entries=3, max_chars=60)
    monkeypatch.setattr(recall_module, "OWN_KEYWORDS", small)
    for _ in range(2):
        got = [[(m.id, m.score) for m in mem.recall("alice", q, k=5)] for q in queries]
        assert got == want
    assert 0 < len(small) <= 3 and small.chars <= 60
