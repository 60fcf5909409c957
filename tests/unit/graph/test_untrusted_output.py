"""Nothing a model invents becomes memory (issue 30): hostile and broken model output.

The scripted replies are what small models were seen to write here: answers that run on
into the prompt's layers and into turns they invent (``mendatang\\nmodel`` then a made-up
dish), the prompt's examples copied as facts for a question, reflections holding prompt
layers, rules cut at their bound. Each is checked where it would be stored: the thread, the
message log, recall, the facts, the episode and the rules.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import ECHOED_ANSWER_NOTICE, extract_facts
from agentic_memory.kinds.facts import ExtractedFact, is_secret, mentions_secret
from agentic_memory.kinds.model_output import leak_at, mangled
from tests.fakes import ScriptedChatModel
from tests.unit.graph.conftest import REFLECTION

BUNDLED = {"amem_model": "local:smollm2-135m", "amem_class": "bundled"}
SMALL = {"amem_model": "compatible:qwen2.5:0.5b", "amem_class": "small"}
CAPABLE = {"amem_model": "openai:gpt-4o-mini", "amem_class": "capable"}
NO_FACTS = {"ExtractedFacts": {"facts": []}}

# What an answer of the offline model looked like in a whole session (issue 30).
RAN_ON = (
    "A lentil curry with rice would suit you. mendatang\nmodel\nRoasted pork and rice "
    "(peanuts)\nCritical constraints (never violate): none"
)


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def turn(app: Any, thread: str, text: str) -> dict[str, Any]:
    return await app.ainvoke(
        {"messages": [HumanMessage(text)]}, cfg(thread), context={"user_id": "alice"}
    )


def graph(agentic: Any, model: ScriptedChatModel) -> Any:
    return compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)


async def logged_text(agentic: Any, thread: str) -> str:
    return " ".join(
        m.content for m in await agentic.memory.messages.alist("alice", thread_id=thread)
    )


# -- answers --------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [BUNDLED, SMALL], ids=["bundled", "small endpoint"])
async def test_an_answer_that_runs_into_invented_turns_is_cut_before_them(
    agentic: Any, metadata: dict[str, str]
) -> None:
    model = ScriptedChatModel(
        metadata=metadata, text_replies=[RAN_ON], structured_defaults=NO_FACTS
    )
    app = graph(agentic, model)
    out = await turn(app, "t", "What should I cook tonight?")
    answer = out["messages"][-1].content
    assert answer == "A lentil curry with rice would suit you. mendatang"
    assert "invented turn" in out["token_report"]["answer_cut"]
    logged = await logged_text(agentic, "t")
    assert "lentil curry" in logged
    for leaked in ("pork", "Critical constraints", "\nmodel"):
        assert leaked not in logged and leaked not in answer


async def test_an_answer_that_is_only_the_prompt_becomes_a_notice_that_is_never_logged(
    agentic: Any,
) -> None:
    leaked = "Current time: 2026-12-04T10:00+00:00\nCritical constraints (never violate): none"
    model = ScriptedChatModel(metadata=BUNDLED, text_replies=[leaked], structured_defaults=NO_FACTS)
    app = graph(agentic, model)
    out = await turn(app, "t", "Hello there")
    assert out["messages"][-1].content == ECHOED_ANSWER_NOTICE
    assert "answer_replaced" in out["token_report"]
    assert "Current time" not in await logged_text(agentic, "t")


async def test_a_capable_model_may_write_a_dialogue(agentic: Any) -> None:
    dialogue = "Here is a short script.\nUser: Hi!\nAssistant: Hello, how can I help?"
    model = ScriptedChatModel(
        metadata=CAPABLE, text_replies=[dialogue], structured_defaults=NO_FACTS
    )
    out = await turn(graph(agentic, model), "t", "Write a two-line chat between a user and a bot.")
    assert out["messages"][-1].content == dialogue
    assert "answer_cut" not in out["token_report"]
    # A chat-template marker is never an answer, whoever wrote it.
    assert leak_at("Sure.<|im_start|>user\nhi", turns=False) == len("Sure.")


async def test_a_poisoned_turn_already_in_the_log_is_never_recalled(agentic: Any) -> None:
    await agentic.memory.messages.aremember(
        "alice",
        "old-thread",
        [
            HumanMessage("What can I eat tonight?"),
            {
                "role": "assistant",
                "content": "Tonight: roasted pork and rice with peanuts. Critical constraints "
                "(never violate): none. Current time: 2026-11-30T10:00",
            },
            HumanMessage("I love cooking rice dishes at night."),
        ],
    )
    model = ScriptedChatModel(metadata=BUNDLED, structured_defaults=NO_FACTS)
    out = await turn(graph(agentic, model), "new", "What rice dish can I eat tonight?")
    recalled = " ".join(p["content"] for p in out["past_turns"])
    assert "cooking rice dishes" in recalled  # recall itself works
    assert "pork" not in recalled
    assert "pork" not in model.calls_for(None)[-1].text


# -- facts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metadata", [BUNDLED, SMALL, CAPABLE], ids=["bundled", "small endpoint", "capable"]
)
async def test_the_prompts_examples_copied_for_a_question_are_never_facts(
    metadata: dict[str, str],
) -> None:
    # Issue 30: bob got diet = vegetarian for asking what the agent knew about him.
    copied = {
        "facts": [
            {"subject": "diet", "value": "vegetarian", "category": "preference"},
            {"subject": "allergy", "value": "allergic to peanuts", "category": "constraint"},
        ],
        "important": True,
    }
    model = ScriptedChatModel(metadata=metadata, structured_defaults={"ExtractedFacts": copied})
    facts, important, calls = await extract_facts(model, "What do you know about me?")
    assert facts == []
    # A small model is not even asked about a question; a capable one may flag it.
    assert (important, len(calls)) == ((True, 1) if metadata is CAPABLE else (False, 0))
    facts, _, _ = await extract_facts(model, "I live in Porto and I work as a nurse.")
    assert ("diet", "vegetarian") not in {(f.subject, f.value) for f in facts}


async def test_a_capable_model_may_word_a_fact_its_own_way() -> None:
    worded = {"facts": [{"subject": "food to avoid", "value": "meat", "category": "constraint"}]}
    model = ScriptedChatModel(metadata=CAPABLE, structured_defaults={"ExtractedFacts": worded})
    facts, _, _ = await extract_facts(model, "I don't eat any meat at all.")
    assert [(f.subject, f.value) for f in facts] == [("food to avoid", "meat")]


@pytest.mark.parametrize(
    "message",
    [
        "My PIN is 4821.",
        "my password is hunter2, remember it",
        "My card number is 4111 1111 1111 1111 and it expires 09/29",
        "Remember my API key: sk-proj-4f9a8b7c6d5e4f3a2b1c0d9e",
    ],
)
@pytest.mark.parametrize("metadata", [BUNDLED, CAPABLE], ids=["bundled", "capable"])
async def test_a_secret_the_user_states_is_never_a_fact(
    agentic: Any, message: str, metadata: dict[str, str]
) -> None:
    # Both the patterns (PIN 4821 was stored as "pin" before) and a model that obeys.
    obeying = {
        "facts": [{"subject": "pin", "value": "4821", "category": "other"}],
        "important": True,
    }
    model = ScriptedChatModel(metadata=metadata, structured_defaults={"ExtractedFacts": obeying})
    out = await turn(graph(agentic, model), "t", message)
    assert out["facts_remembered"] == []
    assert await agentic.memory.facts.acurrent("alice") == []
    # Nor is the message kept for good as important.
    [logged] = [
        m for m in await agentic.memory.messages.alist("alice", thread_id="t") if m.role == "human"
    ]
    assert not logged.important


def test_secret_detection_leaves_ordinary_facts_alone() -> None:
    for subject, value in [
        ("city", "Porto"),
        ("job", "pharmacist"),
        ("age", "34"),
        ("phone", "a Pixel 8"),
    ]:
        assert not is_secret(ExtractedFact(subject=subject, value=value, category="other"))
    assert mentions_secret("card 4539 1488 0343 6467")  # a Luhn-valid number
    assert not mentions_secret("my order number is 1234 5678 9012 3456 7")  # not Luhn-valid


# -- episodes and rules -----------------------------------------------------------------------


async def test_a_reflection_holding_the_prompt_leaves_an_episode_without_a_lesson(
    agentic: Any,
) -> None:
    poisoned = {
        **REFLECTION,
        "what_worked": "What worked: No lesson recorded. Current time: 2026-11-30T10:00",
    }
    model = ScriptedChatModel(
        metadata=CAPABLE, structured_defaults={**NO_FACTS, "Reflection": poisoned}
    )
    app = graph(agentic, model)
    await turn(app, "t", "I'm planning a dinner party.")
    end = await app.ainvoke({"end_conversation": True}, cfg("t"), context={"user_id": "alice"})
    assert "what_worked" in end["reflection"]["fallback"]
    [episode] = await agentic.memory.episodes.alist("alice")
    assert "Current time" not in episode.what_worked
    assert end["rules_version_created"] is None  # nothing learned from it


async def test_rules_that_are_cut_or_hold_the_prompt_are_refused(agentic: Any) -> None:
    rules = {
        "rules": [
            {"instruction": "Offer two dinner options", "rationale": "x" * 199 + "y"},  # cut
            {"instruction": "Keep {max_rules} rules", "rationale": "it is the limit"},
            {"instruction": "Suggest dishes", "rationale": "because the"},
            {
                "instruction": "Ask about the guests",
                "rationale": "user: what about wine?\nmodel",
            },
            {
                "instruction": "Offer a vegetarian main course",
                "rationale": "guests may not eat meat",
            },
        ]
    }
    model = ScriptedChatModel(
        metadata=CAPABLE,
        structured_defaults={**NO_FACTS, "Reflection": REFLECTION, "RuleSet": rules},
    )
    app = graph(agentic, model)
    await turn(app, "t", "I'm planning a dinner party.")
    end = await app.ainvoke({"end_conversation": True}, cfg("t"), context={"user_id": "alice"})
    reasons = {r["instruction"]: r["reason"] for r in end["rules_rejected"]}
    assert "cut at its 200-character bound" in reasons["Offer two dinner options"]
    assert "placeholder" in reasons["Keep {max_rules} rules"]
    assert "cut mid-sentence" in reasons["Suggest dishes"]
    assert "turn marker" in reasons["Ask about the guests"]
    stored = [r.instruction for r in (await agentic.memory.rules.alatest("alice")).rules]
    assert "Offer a vegetarian main course" in stored
    assert not set(reasons) & set(stored)


def test_mangled_accepts_what_a_rule_normally_says() -> None:
    for text in (
        "short lists were easier to act on",
        "it shows you remember them.",
        "Cite [a p.2]",
    ):
        assert mangled(text, bound=200) is None


async def test_the_compact_prompt_recalls_a_statement_before_a_question(agentic: Any) -> None:
    # A session's recalled line was the user's own earlier question, which told the model nothing.
    asked = "What do I do for work at the hospital?"
    said = "I work as a pharmacist at the hospital. Do you know it?"
    await agentic.memory.messages.aremember(
        "alice", "old", [HumanMessage(asked), {"role": "assistant", "content": "No idea."}]
    )
    await agentic.memory.messages.aremember(
        "alice", "older", [HumanMessage(said), {"role": "assistant", "content": "Noted."}]
    )
    model = ScriptedChatModel(metadata=BUNDLED, text_replies=["ok"], structured_defaults=NO_FACTS)
    out = await turn(graph(agentic, model), "t", asked)
    assert {p["content"] for p in out["past_turns"]} >= {asked, said}
    assert f"- you said before: {said}" in model.calls_for(None)[-1].text


async def test_an_answer_that_uses_the_memory_lines_word_for_word_is_kept(agentic: Any) -> None:
    # Measured with Qwen2.5 0.5B: right answers copy the recalled line they use, and were
    # taken for recitals of the (compact) prompt until only its instruction counted.
    said = "I work as a pharmacist at the central hospital in Porto."
    await agentic.memory.messages.aremember(
        "alice",
        "old",
        [HumanMessage("Hello!"), {"role": "assistant", "content": "Hi."}, HumanMessage(said)],
    )
    answer = "You said: I work as a pharmacist at the central hospital in Porto."
    model = ScriptedChatModel(metadata=BUNDLED, text_replies=[answer], structured_defaults=NO_FACTS)
    out = await turn(graph(agentic, model), "t", "What do I do for work at the hospital?")
    assert f"- you said before: {said}" in model.calls_for(None)[-1].text
    assert out["messages"][-1].content == answer
    assert "answer_replaced" not in out["token_report"]
