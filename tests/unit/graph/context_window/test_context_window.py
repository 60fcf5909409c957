from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from agentic_memory.graph.context_window import (
    MESSAGE_OVERHEAD_TOKENS,
    AssembledContext,
    ContextOverflowError,
    TokenBudgets,
    assemble_context,
    count_message_tokens,
    count_tokens,
    pack_items,
    plan_compaction,
)

MakeHistory = Callable[[random.Random, int], list[BaseMessage]]


# --- counting -------------------------------------------------------------------------


def test_count_tokens_uses_the_llama_sentencepiece_vocabulary() -> None:
    # "▁Hello" and "▁world" are single pieces in the Llama-2 vocabulary.
    assert count_tokens("Hello world") == 2
    assert count_tokens("") == 0
    assert count_tokens("word " * 100) >= 100


def test_count_tokens_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match="expects a str"):
        count_tokens(None)  # type: ignore[arg-type]


def test_message_tokens_include_overhead_tool_calls_and_blocks() -> None:
    plain = HumanMessage("Hello world")
    assert count_message_tokens([plain]) == 2 + MESSAGE_OVERHEAD_TOKENS
    assert count_message_tokens([]) == 0
    with_call = AIMessage(
        "",
        tool_calls=[{"name": "search_notes", "args": {"query": "peanut allergy"}, "id": "c1"}],
    )
    assert count_message_tokens([with_call]) > MESSAGE_OVERHEAD_TOKENS + 5
    broken = AIMessage(
        "",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "name": "search_notes",
                "args": "{bad",
                "id": "c2",
                "error": "x",
            }
        ],
    )
    assert count_message_tokens([broken]) > MESSAGE_OVERHEAD_TOKENS + 2
    blocks = HumanMessage(content=[{"type": "text", "text": "Hello world"}])
    assert count_message_tokens([blocks]) == count_message_tokens([plain])
    tool = ToolMessage("three results", tool_call_id="c1", name="search_notes")
    assert count_message_tokens([tool]) > count_message_tokens(
        [ToolMessage("three results", tool_call_id="c1")]
    )


def test_count_message_tokens_rejects_non_messages() -> None:
    with pytest.raises(TypeError, match="expected BaseMessage"):
        count_message_tokens(["hello"])  # type: ignore[list-item]


# --- budgets and packing -------------------------------------------------------------


def test_token_budgets_defaults_and_validation() -> None:
    budgets = TokenBudgets()
    assert budgets.total == 7900
    assert budgets.variable == budgets.episodic + budgets.semantic
    with pytest.raises(ValueError, match="'facts' must be a non-negative integer"):
        TokenBudgets(facts=-1)
    with pytest.raises(ValueError, match="'recent'"):
        TokenBudgets(recent=1.5)  # type: ignore[arg-type]


def test_pack_items_keeps_whole_items_in_rank_order() -> None:
    long = "episode " * 50
    items = ["first short item", long, "second short item", "third short item"]
    costs = [count_tokens(i) + 1 for i in items]
    budget = costs[0] + costs[2] + costs[3]
    kept, tokens, left_out = pack_items(items, budget)
    assert kept == ["first short item", "second short item", "third short item"]
    assert tokens == budget
    assert left_out == 1


def test_pack_items_edge_cases() -> None:
    assert pack_items([], 10) == ([], 0, 0)
    assert pack_items(["a b c"], 0) == ([], 0, 1)
    with pytest.raises(ValueError, match="non-negative"):
        pack_items(["x"], -1)


# --- assembly ------------------------------------------------------------------------


def _assemble(**overrides: object) -> AssembledContext:
    args: dict[str, object] = {
        "system": "You are a helpful assistant with memory.",
        "rules": "1. Answer briefly.",
        "facts": "The user is vegetarian.",
        "summary": "Earlier the user planned a trip to Paris.",
        "recent": [HumanMessage("hi"), AIMessage("hello")],
        "variable": "Current time: 2026-11-30T05:00:00Z",
        "new_message": HumanMessage("What should I eat?"),
        "budgets": TokenBudgets(),
    }
    args.update(overrides)
    return assemble_context(**args)  # type: ignore[arg-type]


def test_assemble_context_orders_layers() -> None:
    result = _assemble()
    kinds = [type(m).__name__ for m in result.messages]
    assert kinds == [
        "SystemMessage",
        "SystemMessage",
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "SystemMessage",
        "HumanMessage",
    ]
    assert (
        result.messages[0].content
        == "You are a helpful assistant with memory.\n\n1. Answer briefly."
    )
    assert result.messages[1].content == "The user is vegetarian."
    assert result.messages[2].content.startswith("Earlier")
    assert result.messages[5].content.startswith("Current time")
    assert result.messages[-1].content == "What should I eat?"
    assert set(result.tokens) == {
        "system",
        "rules",
        "facts",
        "summary",
        "recent",
        "variable",
        "new_message",
        "reserve",
    }
    assert result.tokens["reserve"] == TokenBudgets().reserve
    assert result.tokens["recent"] == count_message_tokens([HumanMessage("hi"), AIMessage("hello")])
    assert result.total == count_message_tokens(result.messages)
    assert result.left_out == {}


def test_assemble_context_omits_empty_layers_and_passes_left_out() -> None:
    result = _assemble(
        rules="", facts="", summary="", recent=[], variable="", left_out={"episodic": 2}
    )
    assert [m.content for m in result.messages] == [
        "You are a helpful assistant with memory.",
        "What should I eat?",
    ]
    assert isinstance(result.messages[0], SystemMessage)
    assert result.left_out == {"episodic": 2}


def test_stable_prefix_is_byte_identical_across_turns() -> None:
    first = _assemble(variable="Current time: Monday", recent=[], new_message=HumanMessage("a"))
    second = _assemble(
        variable="Current time: Tuesday\nRecalled: trip to Paris",
        recent=[HumanMessage("a"), AIMessage("b")],
        new_message=HumanMessage("c"),
        summary="A different summary",
    )
    assert first.messages[0].content.encode() == second.messages[0].content.encode()
    changed_rules = _assemble(rules="1. Answer in French.")
    assert changed_rules.messages[0].content != first.messages[0].content


@pytest.mark.parametrize(
    ("layer", "overrides"),
    [
        ("system", {"system": "word " * 60, "budgets": TokenBudgets(system=20)}),
        ("rules", {"rules": "rule " * 60, "budgets": TokenBudgets(rules=20)}),
        ("facts", {"facts": "fact " * 60, "budgets": TokenBudgets(facts=20)}),
        ("summary", {"summary": "sum " * 60, "budgets": TokenBudgets(summary=20)}),
        (
            "new_message",
            {"new_message": HumanMessage("long " * 60), "budgets": TokenBudgets(recent=40)},
        ),
        ("recent", {"recent": [HumanMessage("turn " * 60)], "budgets": TokenBudgets(recent=40)}),
        (
            "variable",
            {"variable": "chunk " * 60, "budgets": TokenBudgets(episodic=10, semantic=10)},
        ),
    ],
)
def test_overflow_names_the_layer_and_numbers(layer: str, overrides: dict[str, object]) -> None:
    with pytest.raises(ContextOverflowError) as info:
        _assemble(**overrides)
    error = info.value
    assert error.layer == layer
    assert error.tokens > error.budget
    assert (
        f"context layer {layer!r} needs {error.tokens} tokens but its budget is {error.budget}"
        in str(error)
    )
    assert isinstance(error, ValueError)


def test_assemble_context_rejects_a_non_message() -> None:
    with pytest.raises(TypeError, match="new_message"):
        _assemble(new_message="hello")


# --- compaction ----------------------------------------------------------------------


def _tool_pairs_intact(part: list[BaseMessage]) -> bool:
    """Every tool result in ``part`` has its calling AI message in ``part`` and vice versa."""
    call_ids = {c["id"] for m in part if isinstance(m, AIMessage) for c in m.tool_calls}
    result_ids = {m.tool_call_id for m in part if isinstance(m, ToolMessage)}
    return call_ids == result_ids


def test_no_compaction_under_the_threshold(make_history: MakeHistory) -> None:
    history = make_history(random.Random(1), 3)
    tokens = count_message_tokens(history)
    budget = int(tokens / 0.65) + 10
    assert plan_compaction(history, budget=budget) is None
    assert plan_compaction([], budget=100) is None


@pytest.mark.parametrize("seed", range(300))
def test_compaction_properties_on_random_histories(make_history: MakeHistory, seed: int) -> None:
    rng = random.Random(seed)
    history = make_history(rng, rng.randint(1, 25))
    budget = rng.randint(60, 3000)
    threshold = rng.choice((0.5, 0.65, 0.8, 1.0))
    total = count_message_tokens(history)
    plan = plan_compaction(history, budget=budget, threshold=threshold)
    if plan is None:
        humans = sum(isinstance(m, HumanMessage) for m in history)
        assert total <= threshold * budget or (humans == 1 and total <= budget)
        return
    assert total > threshold * budget
    assert plan.summarise + plan.keep == history
    assert plan.summarise, "a plan always summarises something"
    assert _tool_pairs_intact(plan.summarise)
    assert _tool_pairs_intact(plan.keep)
    last_human = max(i for i, m in enumerate(history) if isinstance(m, HumanMessage))
    kept = count_message_tokens(plan.keep)
    assert kept <= budget, "what is kept always fits the budget"
    if not plan.keep:
        # Everything summarised: only when the last exchange alone is over the budget.
        assert count_message_tokens(history[last_human:]) > budget or last_human == 0
        return
    assert isinstance(plan.keep[0], HumanMessage)
    assert len(plan.keep) >= len(history) - last_human, "the last exchange is kept if it fits"
    target = threshold * budget / 2
    if kept > target:
        # Only allowed when no later boundary exists: the keep is exactly the last exchange.
        assert len(plan.keep) == len(history) - last_human
    else:
        # The cut is the earliest one that fits: one more turn kept would not fit.
        humans = [i for i, m in enumerate(history) if isinstance(m, HumanMessage) and i > 0]
        earlier = [i for i in humans if i < len(plan.summarise)]
        if earlier:
            assert count_message_tokens(history[earlier[-1] :]) > target


def test_compaction_keeps_a_last_exchange_over_the_target_that_fits() -> None:
    history: list[BaseMessage] = [
        HumanMessage("short"),
        AIMessage("short"),
        HumanMessage("big " * 60),
        AIMessage("big " * 60),
    ]
    plan = plan_compaction(history, budget=200)
    assert plan is not None
    assert plan.summarise == history[:2]
    assert plan.keep == history[2:]


@pytest.mark.parametrize("before", [0, 2])
def test_a_last_exchange_over_the_whole_budget_is_summarised(before: int) -> None:
    # Kept verbatim, it could never fit again: the thread would fail on every turn.
    history: list[BaseMessage] = [HumanMessage("short"), AIMessage("short")][:before] + [
        HumanMessage("huge " * 400),
        AIMessage("huge " * 400),
    ]
    plan = plan_compaction(history, budget=200)
    assert plan is not None
    assert plan.summarise == history
    assert plan.keep == []


def test_compaction_never_cuts_inside_a_tool_exchange() -> None:
    call = {"name": "lookup", "args": {"q": "x"}, "id": "c9", "type": "tool_call"}
    history: list[BaseMessage] = [
        HumanMessage("old " * 100),
        AIMessage("old " * 100),
        HumanMessage("use a tool"),
        AIMessage("", tool_calls=[call]),
        # A human message interleaved before the tool result must not become a cut.
        HumanMessage("are you there?"),
        ToolMessage("result " * 50, tool_call_id="c9"),
        AIMessage("done"),
    ]
    plan = plan_compaction(history, budget=100, threshold=0.65)
    assert plan is not None
    assert plan.summarise == history[:2]


def test_one_exchange_without_a_boundary_is_kept_while_it_fits() -> None:
    history: list[BaseMessage] = [HumanMessage("only " * 30), AIMessage("reply " * 30)]
    assert plan_compaction(history, budget=100) is None  # above 65 %, within the budget
    plan = plan_compaction(history, budget=50)  # over the budget: summarised whole
    assert plan is not None and plan.keep == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget": 0}, "budget must be a positive integer"),
        ({"budget": -5}, "budget must be a positive integer"),
        ({"budget": 100, "threshold": 0.0}, r"threshold must be in \(0, 1\]"),
        ({"budget": 100, "threshold": 1.5}, r"threshold must be in \(0, 1\]"),
    ],
)
def test_compaction_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_compaction([HumanMessage("x")], **kwargs)  # type: ignore[arg-type]


def test_compaction_hysteresis_runs_every_several_turns(make_history: MakeHistory) -> None:
    """Simulate a growing conversation: compaction fires rarely, kept tokens stay bounded."""
    rng = random.Random(7)
    turns = make_history(rng, 120)
    budget, threshold = 1500, 0.65
    window: list[BaseMessage] = []
    fired_at: list[int] = []
    peak = 0
    turn_index = 0
    for message in turns:
        window.append(message)
        if isinstance(message, AIMessage) and not message.tool_calls:
            turn_index += 1
            plan = plan_compaction(window, budget=budget, threshold=threshold)
            if plan is not None:
                fired_at.append(turn_index)
                window = plan.keep
            peak = max(peak, count_message_tokens(window))
    assert len(fired_at) >= 3
    gaps = [b - a for a, b in zip(fired_at, fired_at[1:], strict=False)]
    assert min(gaps) >= 2, "hysteresis: compaction does not fire on consecutive turns"
    assert peak <= threshold * budget


async def test_first_load_does_no_blocking_io_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`langgraph dev` runs nodes under blockbuster; a cold tokenizer load must pass it."""
    from blockbuster import BlockBuster

    import agentic_memory.graph.context_window as cw

    monkeypatch.setattr(cw, "_TOKENIZER", None)
    cw.TOKEN_COUNTS.clear()
    detector = BlockBuster()
    detector.activate()
    try:
        assert count_tokens("Hello world") == 2
    finally:
        detector.deactivate()
    assert cw._TOKENIZER is not None


def test_token_counts_are_cached_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keyed by whole messages, 16,384 pasted documents stayed in memory for the life of the
    # process: the cache is bounded by the characters of its texts too.
    import agentic_memory.graph.context_window as cw
    from agentic_memory.text_cache import TextCache

    assert cw.TOKEN_COUNTS.max_chars <= 1 << 22
    small = TextCache(cw._count, max_entries=100, max_chars=5000)
    monkeypatch.setattr(cw, "TOKEN_COUNTS", small)
    texts = [f"document {n}: " + "lorem ipsum dolor " * 40 for n in range(30)]
    for _ in range(2):
        for text in texts:
            assert count_tokens(text) == cw._count(text)
    assert 0 < len(small) < len(texts)
    assert small.chars <= 5000
    count_tokens("x" * 6000)  # longer than the cache: counted, not kept
    assert "x" * 6000 not in small._entries
