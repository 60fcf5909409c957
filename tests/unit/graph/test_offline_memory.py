"""Memory that works with a weak or failing memory model, through the compiled graph.

The scripted fakes here behave like the offline model as measured (``bench/results/``):
under the facts schema it answers an empty list, it copies the prompt's examples into
reflections and its field descriptions into rules, and its server can die in the middle of
any call. A fake that names itself ``local:...`` is treated as the offline model.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import BaseMessage, HumanMessage

from agentic_memory import prompts
from agentic_memory.graph.nodes import extract_facts
from agentic_memory.kinds.rules import starting_rules
from agentic_memory.models.local_server import LocalServerDied
from tests.fakes import ScriptedChatModel
from tests.unit.graph.conftest import REFLECTION, RULES

LOCAL = {"amem_model": "local:gemma3-270m"}


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def turn(app: Any, thread: str, text: str, **extra: Any) -> dict[str, Any]:
    context = {"user_id": "alice", **extra.pop("context", {})}
    return await app.ainvoke(
        {"messages": [HumanMessage(text)], **extra}, cfg(thread), context=context
    )


async def end(app: Any, thread: str) -> dict[str, Any]:
    return await app.ainvoke({"end_conversation": True}, cfg(thread), context={"user_id": "alice"})


def dies(_: list[BaseMessage]) -> Any:
    raise LocalServerDied(4242, -11, None)


def unreachable(_: list[BaseMessage]) -> Any:
    raise openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1"))


def facts_of(turn_output: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["subject"], f["value"]) for f in turn_output["facts_remembered"]}


# -- facts ------------------------------------------------------------------------------------


async def test_the_offline_model_answering_nothing_still_remembers_plain_statements(
    agentic,
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph

    # What the base model does (measured): an empty list, every time.
    model = ScriptedChatModel(metadata=LOCAL, structured_defaults={"ExtractedFacts": {"facts": []}})
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    out = await turn(app, "t", "I'm vegetarian and allergic to peanuts.")
    assert facts_of(out) == {("diet", "vegetarian"), ("peanuts allergy", "allergic to peanuts")}
    current = {(f.subject, f.category) for f in await agentic.memory.facts.acurrent("alice")}
    assert ("peanuts allergy", "constraint") in current
    # The allergy is restated next to the next answer, as every constraint is.
    await turn(app, "t", "What should I cook tonight?")
    assert "peanuts allergy: allergic to peanuts" in model.calls_for(None)[-1].text
    # The question states nothing: the small model is not asked for facts from it.
    assert [c.name for c in model.calls if c.name] == ["ExtractedFacts"]


async def test_the_offline_models_invented_or_copied_facts_are_not_stored() -> None:
    model = ScriptedChatModel(
        metadata=LOCAL,
        structured_defaults={
            "ExtractedFacts": {
                "facts": [
                    # The prompt's examples, copied: not in the message.
                    {"subject": "diet", "value": "vegetarian", "category": "preference"},
                    {
                        "subject": "allergy",
                        "value": "allergic to peanuts",
                        "category": "constraint",
                    },
                    # Taken from the message: kept.
                    {"subject": "hobby", "value": "sailing", "category": "preference"},
                    # The same as a self-statement's: not stored twice.
                    {"subject": "home", "value": "Lisbon", "category": "identity"},
                    # The message copied into both fields, as the base model likes to.
                    {
                        "subject": "I live in Lisbon and I go",
                        "value": "I live in Lisbon and I go sailing on Sundays.",
                        "category": "other",
                    },
                ]
            }
        },
    )
    facts, _, calls = await extract_facts(model, "I live in Lisbon and I go sailing on Sundays.")
    assert {(f.subject, f.value) for f in facts} == {("city", "Lisbon"), ("hobby", "sailing")}
    assert [c.purpose for c in calls] == ["facts"]


async def test_a_remote_model_is_trusted_and_self_statements_only_back_it_up() -> None:
    remote = ScriptedChatModel(structured_defaults={"ExtractedFacts": {"facts": []}})
    facts, _, _ = await extract_facts(remote, "I'm vegetarian.")
    assert facts == []  # the model said there is nothing: no second guess
    failing = ScriptedChatModel(structured_defaults={"ExtractedFacts": unreachable})
    facts, important, calls = await extract_facts(failing, "I'm vegetarian.")
    assert [(f.subject, f.value) for f in facts] == [("diet", "vegetarian")]
    assert important is False and calls == []


async def test_a_question_gives_no_fact_even_when_the_model_fails() -> None:
    failing = ScriptedChatModel(metadata=LOCAL, structured_defaults={"ExtractedFacts": dies})
    facts, _, _ = await extract_facts(failing, "Am I allergic to peanuts?")
    assert facts == []


# -- compaction ---------------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["invalid", "dead server", "unreachable"])
async def test_a_model_failing_mid_compaction_leaves_a_usable_thread(
    app, model, failure: str
) -> None:
    replies = {"invalid": "not json at all", "dead server": dies, "unreachable": unreachable}
    model.structured_defaults["Summary"] = replies[failure]
    small = {"budget_recent": 120}
    outs = [await turn(app, "t", f"message {i} " + "word " * 20, context=small) for i in range(4)]
    # Compaction ran (the early turns left the window) although the model never summarised.
    assert model.calls_for("Summary"), "compaction never ran"
    last = outs[-1]
    assert last["summary"].startswith("user: message 0") or "message 1" in last["summary"]
    assert len(last["messages"]) < 8
    # The excerpt reaches the next answer's prompt.
    prompt = model.calls_for(None)[-1].text
    assert "Summary of earlier turns of this conversation:" in prompt
    # Every turn was answered, and the thread goes on to end normally.
    assert all(o["messages"][-1].content == "Noted." for o in outs)
    done = await end(app, "t")
    assert done["conversation_ended"] is True and done["reflection"]["what_worked"]


async def test_the_excerpt_that_replaces_a_summary_fits_its_budget(app, model) -> None:
    model.structured_defaults["Summary"] = "not json"
    tight = {"budget_recent": 120, "budget_summary": 40}
    for i in range(6):
        out = await turn(app, "t", f"message {i} " + "word " * 20, context=tight)
    from agentic_memory.graph.context_window import count_tokens

    assert out["summary"].startswith("… ")  # the oldest part went
    assert count_tokens(out["summary"]) <= 40
    assert out["token_report"]["layers"]["summary"] <= 40


async def test_a_long_model_summary_is_cut_to_its_budget(app, model) -> None:
    model.structured_defaults["Summary"] = {"text": "The user said many things. " * 50}
    for i in range(4):
        out = await turn(
            app,
            "t",
            f"message {i} " + "word " * 20,
            context={"budget_recent": 120, "budget_summary": 60},
        )
    assert out["token_report"]["layers"]["summary"] <= 60


# -- reflection -----------------------------------------------------------------------------


def _example_reflection() -> dict[str, Any]:
    """The reflection prompt's own "good reflection", as the base model hands it back."""
    return {
        "context_tags": ["meal planning", "dietary constraints"],
        "conversation_summary": (
            "The user planned a week of dinners; they are vegetarian and allergic to peanuts."
        ),
        "what_worked": (
            "Asking about constraints first, then giving a short list of recipes that respect them."
        ),
        "what_to_avoid": "Suggesting satay sauce: it contains peanuts.",
        "importance": 0.8,
    }


async def test_a_reflection_copying_the_prompts_example_is_not_stored_as_a_lesson(
    app, model, resources
) -> None:
    res, _ = resources
    model.structured_defaults["Reflection"] = _example_reflection()
    # The user really is vegetarian and allergic to peanuts, as in the README's demo: the
    # copy must still be recognised.
    await turn(app, "t", "I'm vegetarian and allergic to peanuts. What can I cook?")
    done = await end(app, "t")
    episode = done["reflection"]
    assert "copied the prompt" in episode["fallback"]
    kept = {k: v for k, v in episode.items() if k != "fallback"}
    assert "satay" not in str(kept) and "week of dinners" not in str(kept)
    assert episode["conversation_summary"] == (
        "The user said: I'm vegetarian and allergic to peanuts. What can I cook?"
    )
    [stored] = await res.episodes.alist("alice")
    assert "satay" not in stored.what_to_avoid
    assert model.calls_for("RuleSet") == []  # nothing to learn from


async def test_a_genuine_reflection_sharing_a_few_words_with_the_example_is_kept(
    app, model
) -> None:
    # REFLECTION says "Asking about constraints first, then listing..." (five words in a
    # row from the example) and "Suggesting satay sauce, which contains peanuts.".
    await turn(app, "t", "I'm vegetarian and allergic to peanuts. What can I cook?")
    done = await end(app, "t")
    assert "fallback" not in done["reflection"]
    assert done["reflection"]["what_worked"] == REFLECTION["what_worked"]


async def test_tags_copied_from_the_example_are_dropped(app, model) -> None:
    model.structured_defaults["Reflection"] = {**REFLECTION, "context_tags": ["chat", "tides"]}
    await turn(app, "t", "Tell me about tides.")
    done = await end(app, "t")
    assert done["reflection"]["context_tags"] == ["tides"]  # "chat" is the bad example's


@pytest.mark.parametrize("failure", [dies, unreachable], ids=["dead server", "unreachable"])
async def test_a_model_failing_mid_reflection_leaves_a_usable_thread(
    app, model, resources, failure: Any
) -> None:
    res, _ = resources
    model.structured_defaults["Reflection"] = failure
    await turn(app, "t", "I like sailing.")
    done = await end(app, "t")
    assert done["conversation_ended"] is True and done["reflection"]["fallback"]
    assert len(await res.episodes.alist("alice")) == 1
    model.structured_defaults["Reflection"] = REFLECTION
    nxt = await turn(app, "t", "Back again.")
    assert nxt["messages"][-1].content == "Noted." and nxt["conversation_ended"] is False
    again = await end(app, "t")
    assert "fallback" not in again["reflection"] and again["rules_version_created"] == 2


# -- rules --------------------------------------------------------------------------------


async def test_rules_copying_the_prompts_placeholders_are_rejected(app, model, resources) -> None:
    res, _ = resources
    model.structured_defaults["RuleSet"] = {
        "rules": [
            {"instruction": "What to do", "rationale": "Why, one short clause"},
            {
                "instruction": "Keep a current rule unless a lesson contradicts it",
                "rationale": "merge duplicates",
            },
            *RULES["rules"],
        ]
    }
    await turn(app, "t", "Hello.")
    done = await end(app, "t")
    reasons = {r["instruction"]: r["reason"] for r in done["rules_rejected"]}
    assert reasons["What to do"] == "copies the prompt's text ('what to do')"
    assert reasons["Keep a current rule unless a lesson contradicts it"].startswith(
        "copies the prompt's text"
    )
    stored = [r.instruction for r in (await res.rules.alatest("alice")).rules]
    assert "What to do" not in stored
    assert stored[:2] == [r["instruction"] for r in RULES["rules"]]


async def test_a_rule_repeated_by_the_model_is_stored_once(app, model, resources) -> None:
    res, _ = resources
    junk = {"instruction": "I am sorry, I don't know what to do", "rationale": "You are busy."}
    model.structured_defaults["RuleSet"] = {
        "rules": [{**junk, "instruction": junk["instruction"].upper()}, *[junk] * 4]
    }
    await turn(app, "t", "Hello.")
    done = await end(app, "t")
    stored = [r.instruction for r in (await res.rules.alatest("alice")).rules]
    assert stored.count(junk["instruction"].upper()) == 1 and junk["instruction"] not in stored
    assert done["rules_version_created"] == 2


async def test_only_copied_rules_keep_the_current_version(app, model, resources) -> None:
    res, _ = resources
    model.structured_defaults["RuleSet"] = {
        "rules": [{"instruction": "What to do", "rationale": "Why, one short clause"}]
    }
    await turn(app, "t", "Hello.")
    done = await end(app, "t")
    assert done["rules_version_created"] is None
    assert (await res.rules.alatest("alice")).version == 1


async def test_a_rewrite_never_drops_a_seed_rule_or_a_rule_protecting_a_constraint(
    app, model, resources
) -> None:
    res, _ = resources
    allergy_rule = {
        "instruction": "Check every dish against the user's allergies",
        "rationale": "a missed allergen can hurt",
    }
    model.structured["RuleSet"] = [
        {"rules": [allergy_rule]},
        # The next rewrite drops both the learned allergy rule and every starting rule.
        {"rules": [{"instruction": "Use metric units", "rationale": "the user is in Europe"}]},
    ]
    await turn(app, "t1", "Hello.")
    await end(app, "t1")
    await turn(app, "t2", "Hi again.")
    done = await end(app, "t2")
    assert done["rules_version_created"] == 3
    stored = [r.instruction for r in (await res.rules.alatest("alice")).rules]
    seeds = [r.instruction for r in starting_rules()]
    assert stored == ["Use metric units", allergy_rule["instruction"], *seeds]
    assert allergy_rule["instruction"] in done["rules_note"]


async def test_a_rewrite_with_no_room_for_the_protected_rules_is_refused(
    app, model, resources
) -> None:
    res, _ = resources
    model.structured_defaults["RuleSet"] = {
        "rules": [
            {"instruction": f"Follow house style number {i}", "rationale": f"lesson {i}"}
            for i in range(10)
        ]
    }
    await turn(app, "t", "Hello.")
    done = await end(app, "t")
    assert done["rules_version_created"] is None
    assert done["rules_note"].startswith("the rewrite was not stored: the rewrite dropped ")
    assert "Respect every stated constraint" in done["rules_note"]
    assert (await res.rules.alatest("alice")).version == 1


# -- streaming -----------------------------------------------------------------------------


async def test_the_messages_stream_carries_the_answer_and_no_memory_call(app, model) -> None:
    model.structured_defaults["ExtractedFacts"] = {
        "facts": [{"subject": "hobby", "value": "sailing", "category": "preference"}]
    }
    model.structured_defaults["Summary"] = {"text": "Earlier turns."}
    nodes: list[str] = []
    for i in range(4):
        async for message, metadata in app.astream(
            {"messages": [HumanMessage(f"I like sailing {i}. " + "word " * 20)]},
            cfg("t"),
            context={"user_id": "alice", "budget_recent": 120},
            stream_mode="messages",
        ):
            if message.type == "ai":
                nodes.append(metadata["langgraph_node"])
    assert model.calls_for("Summary") and model.calls_for("ExtractedFacts")
    assert set(nodes) == {"generate"}, nodes


def test_the_reflection_prompt_still_holds_the_example_the_checks_look_for() -> None:
    # The echo checks compare with the prompt's own text: if the example changes, the test
    # reflection above must change with it.
    text = prompts.load("reflection").template
    assert "Suggesting satay sauce: it contains peanuts." in text
    assert "The user planned a week of dinners" in text


# -- answers --------------------------------------------------------------------------------


async def test_an_answer_that_recites_the_instructions_is_not_kept(agentic: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph
    from agentic_memory.graph.nodes import ECHOED_ANSWER_NOTICE

    # What the base model answered on every turn of a whole session (measured): the first
    # 256 tokens of its own system prompt.
    recited = (await prompts.aload("system")).format().strip()[:900]
    model = ScriptedChatModel(
        metadata=LOCAL,
        text_replies=[recited, "Peanuts are in satay sauce, so skip it."],
        structured_defaults={"ExtractedFacts": {"facts": []}},
    )
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    out = await turn(app, "t", "What should I avoid at a Thai restaurant?")
    assert out["messages"][-1].content == ECHOED_ANSWER_NOTICE
    assert out["token_report"]["answer_replaced"]
    logged = await agentic.memory.messages.alist("alice", thread_id="t")
    assert recited[:60] not in " ".join(m.content for m in logged)
    # An answer of its own is kept as it is, even one that repeats the user's words.
    out = await turn(app, "t", "Peanuts are in satay sauce, so skip it.")
    assert out["messages"][-1].content == "Peanuts are in satay sauce, so skip it."
    assert "answer_replaced" not in out["token_report"]


async def test_the_notice_is_never_model_input_nor_memory(agentic: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph
    from agentic_memory.graph.nodes import ECHOED_ANSWER_NOTICE

    recited = (await prompts.aload("system")).format().strip()[:900]
    # Measured in a whole offline session: once a notice was in the recent turns, the base
    # model began every later answer with it, followed by the earlier turns.
    model = ScriptedChatModel(
        metadata=LOCAL,
        text_replies=[recited, "Lisbon is lovely in March; pack a light jacket."],
        structured_defaults={
            "ExtractedFacts": {"facts": []},
            "Reflection": REFLECTION,
            "RuleSet": RULES,
        },
    )
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    await turn(app, "t", "I'm vegetarian, any dinner ideas for tonight?")
    out = await turn(app, "t", "I'm planning a trip to Lisbon in March. Any tips?")
    assert out["messages"][-1].content == "Lisbon is lovely in March; pack a light jacket."
    second_prompt = " ".join(str(m.content) for m in model.calls_for(None)[1].messages)
    assert "repeated its prompt" not in second_prompt
    assert "I'm vegetarian, any dinner ideas" in second_prompt  # the user's turn stays
    # The thread keeps the notice for the user to see.
    contents = [m.content for m in out["messages"]]
    assert ECHOED_ANSWER_NOTICE in contents
    logged = await agentic.memory.messages.alist("alice", thread_id="t")
    assert all("repeated its prompt" not in m.content for m in logged)
    assert [m.role for m in logged] == ["human", "human", "ai"]
    await end(app, "t")
    # A bundled model writes no reflection: the episode is what the user said.
    assert model.calls_for("Reflection") == []
    episodes = await agentic.memory.episodes.alist("alice")
    assert len(episodes) == 1
    assert "Lisbon" in episodes[0].conversation_summary
    assert all("repeated its prompt" not in str(e) for e in episodes)


async def test_an_offline_answer_that_recites_the_conversation_is_replaced(
    agentic: Any,
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph
    from agentic_memory.graph.nodes import ECHOED_ANSWER_NOTICE

    first = (
        "I live in Berlin and work as a nurse at the Charite hospital, and my laptop is a "
        "ThinkPad X1 whose Wi-Fi keeps dropping on Ubuntu every evening."
    )
    continued = f"{first} I am planning to go"
    quoting = "Since the Wi-Fi keeps dropping on Ubuntu, try turning off power saving."
    recalling = "You told me you live in Berlin and work as a nurse at the Charite hospital."
    thread_number = 0
    for metadata, reply, kept in (
        (LOCAL, continued, False),
        (LOCAL, quoting, True),  # quotes a few words in a sentence of its own
        (LOCAL, recalling, True),  # recalls what the user said: the agent's job
        ({"amem_model": "openai:gpt-4o-mini"}, continued, True),  # a chat model may repeat
    ):
        thread_number += 1
        model = ScriptedChatModel(
            metadata=metadata,
            text_replies=["Noted.", reply],
            structured_defaults={"ExtractedFacts": {"facts": []}},
        )
        app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
        thread = f"t{thread_number}"
        await turn(app, thread, first)
        out = await turn(app, thread, "What do you think?")
        if kept:
            assert out["messages"][-1].content == reply
            assert "answer_replaced" not in out["token_report"]
        else:
            assert out["messages"][-1].content == ECHOED_ANSWER_NOTICE
            assert "recited the conversation" in out["token_report"]["answer_replaced"]


@pytest.mark.parametrize("kind", ["bundled", "small"])
async def test_a_small_model_writes_no_lesson_and_no_rule(agentic: Any, kind: str) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph

    # What SmolLM2 wrote in a whole session: an invented lesson and a nonsense rule.
    invented = {**REFLECTION, "what_to_avoid": "Ines is a Japanese-style sushi chef."}
    nonsense = {
        "rules": [
            {
                "instruction": "When you ask a question, please provide the answer in one sentence.",
                "rationale": "This is how I do things when someone asks me to help them.",
            }
        ]
    }
    model = ScriptedChatModel(
        metadata={"amem_class": kind},
        text_replies=["Noted."] * 3,
        structured_defaults={
            "ExtractedFacts": {"facts": []},
            "Reflection": invented,
            "RuleSet": nonsense,
        },
    )
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    await turn(app, "t", "My sister's name is Ines and her birthday is 12 March.")
    await turn(app, "t", "My bank PIN is 4821.")
    done = await end(app, "t")
    assert model.calls_for("Reflection") == [] and model.calls_for("RuleSet") == []
    assert done["reflection"]["fallback"] == f"a {kind} model writes no lessons"
    assert done["rules_version_created"] is None
    assert (await agentic.memory.rules.alatest("alice")).version == 1
    (episode,) = await agentic.memory.episodes.alist("alice")
    assert "Ines" in episode.conversation_summary
    assert "sushi" not in str(episode) and episode.what_to_avoid.startswith("No lesson")
    # The secret stays in its conversation, never in an episode recalled later.
    assert "4821" not in episode.conversation_summary
    assert "a secret, not kept here" in episode.conversation_summary


async def test_a_capable_model_still_writes_the_lesson(app, model, resources) -> None:
    res, _ = resources
    await turn(app, "t", "I like sailing.")
    done = await end(app, "t")
    assert "fallback" not in done["reflection"]
    assert done["reflection"]["what_worked"] == REFLECTION["what_worked"]
    assert done["rules_version_created"] == 2


async def test_a_small_models_episode_keeps_what_left_the_window_and_no_secret(
    agentic: Any,
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph

    # A long offline conversation: the early turns are folded into the rolling summary (here
    # the excerpt written when the model's summary is unusable) before the conversation ends.
    model = ScriptedChatModel(
        metadata={"amem_class": "bundled"},
        text_replies=["Noted."] * 8,
        structured_defaults={"ExtractedFacts": {"facts": []}, "Summary": "not json"},
    )
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
    small = {"budget_recent": 120}
    await turn(app, "t", "My sister's name is Ines and she lives in Lyon.", context=small)
    await turn(app, "t", "My bank PIN is 4821, keep it safe.", context=small)
    for i in range(4):
        out = await turn(app, "t", f"message {i} " + "word " * 20, context=small)
    assert "Ines" in out["summary"], "the first turn should have left the window"
    assert all("Ines" not in str(m.content) for m in out["messages"])
    await end(app, "t")
    (episode,) = await agentic.memory.episodes.alist("alice")
    assert episode.conversation_summary.startswith("The user said: (earlier) ")
    assert "Ines" in episode.conversation_summary
    assert "4821" not in episode.conversation_summary
    assert "a secret, not kept here" in episode.conversation_summary


async def test_an_offline_answer_that_repeats_the_previous_one_is_asked_again(
    agentic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph
    from agentic_memory.graph.memory import AgentMemory
    from agentic_memory.graph.nodes import ECHOED_ANSWER_NOTICE

    ranked: list[str] = []
    rank = AgentMemory.rank_facts

    async def counted(self: AgentMemory, query: str, facts: Any) -> Any:
        ranked.append(query)
        return await rank(self, query, facts)

    monkeypatch.setattr(AgentMemory, "rank_facts", counted)

    # What SmolLM2 answered twice in a row in a product session, to two different messages.
    earlier = (
        "You're right, I'll make sure to keep that in mind for any food ideas. You can always "
        "try using a shellfish-free recipe or ingredients when you have the option."
    )
    fresh = "Short answers with bullet points it is."
    for second, third, shown, retried in (
        (earlier, fresh, fresh, True),  # asked again: the new answer is kept
        (fresh, None, fresh, False),  # a new answer: one call
        (earlier, earlier, earlier, True),  # the same again: kept (a repeat is no leak)
    ):
        replies = [earlier, second] + ([third] if third is not None else [])
        model = ScriptedChatModel(
            metadata=LOCAL,
            text_replies=replies,
            structured_defaults={"ExtractedFacts": {"facts": []}},
        )
        app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)
        thread = f"r{len(replies)}{shown[:3]}"
        await turn(app, thread, "I'm allergic to shellfish, keep it in mind for food ideas.")
        ranked.clear()
        out = await turn(app, thread, "I prefer short answers with bullet points.")
        assert len(ranked) == 1, "a second prompt ranks no fact again"
        assert out["messages"][-1].content == shown != ECHOED_ANSWER_NOTICE
        answers = model.calls_for(None)
        assert len(answers) == (3 if retried else 2)
        assert ("answer_retried" in out["token_report"]) is retried
        if retried:
            # The second prompt holds no earlier answer to copy.
            assert not any(isinstance(m, AIMessage) for m in answers[-1].messages)
            assert any(isinstance(m, AIMessage) for m in answers[-2].messages)


@pytest.mark.parametrize(
    ("previous", "answer", "repeated"),
    [
        # Whole short answers given again to a new question (the answers bench, 2026-12-05).
        ("You're travelling to Tokyo next month.", "You're travelling to Tokyo next month.", True),
        (
            "I'm a backend developer at a logistics startup.",
            "I'm a backend developer at a logistics startup!",
            True,
        ),
        # One word changed (a product session after a restart, 2026-12-05).
        (
            "You can't do anything for a dog, but you could help out with your own business.",
            "You can't do anything for a wife, but you could help out with your own business.",
            True,
        ),
        # A short reply twice is no copy; nor is an answer that only starts like the last one.
        ("Noted.", "Noted.", False),
        ("Got it, thanks!", "Got it, thanks!", False),
        (
            "You're travelling to Tokyo next month.",
            "You're travelling to Tokyo next month, and you live in Porto.",
            False,
        ),
        ("Your city is Porto.", "Your name is Maya Lindqvist.", False),
        (
            "You're travelling to Tokyo next month for a pharmacy conference.",
            "You're travelling to Tokyo next month; the registration desk opens at 8:30 "
            "every morning at Tokyo Big Sight.",
            False,
        ),
    ],
)
def test_a_short_answer_given_again_whole_or_nearly_is_a_repeat(
    previous: str, answer: str, repeated: bool
) -> None:
    from langchain_core.messages import AIMessage

    from agentic_memory.graph.prompting import repeats_last_answer
    from agentic_memory.graph.state import State

    state = State(messages=[HumanMessage("first"), AIMessage(previous), HumanMessage("second")])
    assert repeats_last_answer(AIMessage(answer), state) is repeated
