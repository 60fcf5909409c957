"""Each node alone, on the real embedded store, with the scripted fake model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fpdf import FPDF
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage

from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import ContextOverflowError
from agentic_memory.graph.nodes import (
    ECHOED_ANSWER_NOTICE,
    FAN_OUT,
    compact,
    generate,
    load_procedural,
    log_turn,
    recall_episodic,
    recall_semantic,
    reflect,
    remember_facts,
    route_after_turn,
    route_turn,
    update_procedural,
)
from agentic_memory.graph.state import State
from agentic_memory.ingest.inputs import Upload
from agentic_memory.ingest.pipeline import ingest_paths, ingest_uploads
from agentic_memory.kinds.episodes import Reflection
from tests.unit.graph.conftest import REFLECTION


def human(text: str, id: str) -> HumanMessage:
    return HumanMessage(text, id=id)


def ai(text: str, id: str) -> AIMessage:
    return AIMessage(text, id=id)


# -- routers ----------------------------------------------------------------------------------


def test_route_turn() -> None:
    assert route_turn(State(messages=[human("hi", "h1")])) == list(FAN_OUT)
    ended = State(messages=[human("hi", "h1"), ai("hello", "a1")], end_conversation=True)
    assert route_turn(ended) == "reflect"
    refused = State(messages=[], run_failures=[{"kind": "input", "message": "too long"}])
    assert route_turn(refused) == "rollback"


def test_route_after_turn() -> None:
    assert route_after_turn(State(end_conversation=True)) == "reflect"
    assert route_after_turn(State()) == "__end__"


# -- recall -----------------------------------------------------------------------------------


async def test_recall_episodic_reads_only_this_user_and_other_threads(run_node, resources) -> None:
    res, _ = resources
    r = Reflection(**REFLECTION)
    await res.episodes.astore("alice", "t0", r, "user: dinner ideas?")
    await res.episodes.astore("bob", "tb", r, "user: dinner ideas?")
    await res.messages.aremember(
        "alice", "t0", [HumanMessage("I want dinner ideas with lentils"), AIMessage("Try dal.")]
    )
    await res.messages.aremember("alice", "t1", [HumanMessage("dinner in this thread")])
    state = State(messages=[human("any dinner ideas?", "h1")])

    out = await run_node(recall_episodic, state, user_id="alice", thread="t1")
    assert [e["thread_id"] for e in out["episodes"]] == ["t0"]
    assert out["episodes"][0]["what_to_avoid"] == REFLECTION["what_to_avoid"]
    assert out["past_turns"] and {p["thread_id"] for p in out["past_turns"]} == {"t0"}

    out = await run_node(recall_episodic, state, user_id="carol", thread="t1")
    assert out == {"episodes": [], "past_turns": []}
    off = await run_node(recall_episodic, state, user_id="alice", episodic_k=0, past_turns_k=0)
    assert off == {"episodes": [], "past_turns": []}


def _pdf(path: Path, pages: list[str]) -> Path:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 5, text)
    path.write_bytes(bytes(pdf.output()))
    return path


async def test_recall_semantic_returns_labelled_chunks(run_node, resources, tmp_path) -> None:
    res, _ = resources
    state = State(messages=[human("What is the boiling point of water at altitude?", "h1")])
    # A knowledge base that does not exist yet gives nothing, not an error.
    assert await run_node(recall_semantic, state, user_id="alice") == {"chunks": []}

    # Writing the PDF and ingesting it are sync file and storage work: off the guarded loop.
    doc = await asyncio.to_thread(
        _pdf,
        tmp_path / "physics.pdf",
        [
            "Chapter one is about the history of bread baking in old Europe. " * 8,
            "2 Boiling at Altitude\n"
            + "At high altitude water boils at a lower temperature, about 90 degrees at 3000 m. "
            * 3,
        ],
    )
    report = await asyncio.to_thread(
        ingest_paths,
        [doc],
        kb="science",
        store=res.store,
        embeddings=res.embeddings,
        chunk_size=300,
        chunk_overlap=0,
    )
    assert report.ok
    out = await run_node(
        recall_semantic,
        state,
        user_id="alice",
        knowledge_bases=["science", "missing"],
        semantic_k=1,
    )
    (chunk,) = out["chunks"]
    assert chunk["label"] == "[physics.pdf p.2]" and chunk["kb"] == "science"
    assert "boils" in chunk["text"] and chunk["own"] is False
    assert chunk["section"] == "2 Boiling at Altitude"


async def test_recall_semantic_reads_the_users_own_knowledge_base_and_nobody_elses(
    run_node, resources
) -> None:
    res, _ = resources
    for user, text in (
        ("alice", "Alice's boiler code is 4711."),
        ("bob", "Bob's boiler is green."),
    ):
        upload = Upload("boiler.md", f"# Boiler\n\n{text}\n".encode())
        report = await asyncio.to_thread(
            ingest_uploads,
            [upload],
            kb="default",
            owner=user,
            store=res.store,
            embeddings=res.embeddings,
        )
        assert report.ok
    state = State(messages=[human("what about the boiler?", "h1")])
    for user, mine, theirs in (("alice", "4711", "green"), ("bob", "green", "4711")):
        out = await run_node(recall_semantic, state, user_id=user, semantic_k=4)
        texts = " ".join(c["text"] for c in out["chunks"])
        assert mine in texts and theirs not in texts
        assert all(c["own"] and c["label"] == "[boiler.md p.1]" for c in out["chunks"])


COALA_PAGES = [
    "Cognitive architectures for language agents organise the agent's information into "
    "modules. Working memory holds the active information for the current decision cycle: the "
    "perceptual input, the goals, and intermediate results of reasoning.",
    "Long-term memory has three kinds. Episodic memory stores experience from earlier decision "
    "cycles, such as training input-output pairs or trajectories. Semantic memory stores "
    "knowledge about the world and the agent itself. Procedural memory holds the agent's code "
    "and the weights of the language model, which implement its procedures.",
    "The decision procedure runs in a loop: planning proposes and evaluates actions through "
    "reasoning and retrieval, then the selected action is executed as a grounding or learning "
    "action.",
]


@pytest.mark.parametrize(
    "message",
    ["I'm vegetarian and allergic to peanuts.", "I'm vegetarian.", "My dog is called Rex."],
)
async def test_a_message_the_documents_do_not_answer_recalls_no_passage(
    run_node, resources, tmp_path, message: str
) -> None:
    # The first real session printed "Sources: CoALA p.13, p.28, …" under a diet statement:
    # the fused hybrid score ranks *something* first whatever the query.
    res, _ = resources
    doc = await asyncio.to_thread(_pdf, tmp_path / "CoALA_Paper.pdf", COALA_PAGES)
    report = await asyncio.to_thread(
        ingest_paths,
        [doc],
        kb="default",
        store=res.store,
        embeddings=res.embeddings,
        chunk_size=300,
    )
    assert report.ok
    state = State(messages=[human(message, "h1")])
    assert await run_node(recall_semantic, state, user_id="alice") == {"chunks": []}
    # The floor is what leaves them out: without it, the same search returns passages.
    unfloored = await run_node(recall_semantic, state, user_id="alice", semantic_min_similarity=-1)
    assert unfloored["chunks"]
    assert all(c["similarity"] < 0.25 for c in unfloored["chunks"])
    # A question the paper answers keeps its passage, cited, above the floor.
    question = State(messages=[human("What are the four kinds of memory in CoALA?", "h2")])
    chunks = (await run_node(recall_semantic, question, user_id="alice"))["chunks"]
    assert chunks and chunks[0]["label"] == "[CoALA_Paper.pdf p.2]"
    assert all(c["similarity"] >= 0.25 for c in chunks)


def test_the_relevance_floor_is_checked() -> None:
    with pytest.raises(ValueError, match="semantic_min_similarity"):
        Context(user_id="alice", semantic_min_similarity=1.5)
    with pytest.raises(ValueError, match="semantic_min_similarity"):
        Context(user_id="alice", semantic_min_similarity="high")  # type: ignore[arg-type]
    assert Context(user_id="alice", semantic_min_similarity=0.0).semantic_min_similarity == 0.0


async def test_load_procedural_user_and_global_scope(run_node, resources) -> None:
    res, _ = resources
    state = State(messages=[human("hi", "h1")])
    out = await run_node(load_procedural, state, user_id="alice")
    assert out["rules_version"] == 1 and len(out["rules"]) >= 1
    await res.shared_rules.aput([{"instruction": "Be brief", "rationale": "focus"}], operator="ops")
    assert (await run_node(load_procedural, state, user_id="alice"))["rules_version"] == 1
    shared = await run_node(load_procedural, state, user_id="alice", rules_scope="global")
    assert shared == {
        "rules": [{"instruction": "Be brief", "rationale": "focus"}],
        "rules_version": 2,
    }


# -- facts ------------------------------------------------------------------------------------


async def test_remember_facts_stores_and_reports(run_node, resources, model) -> None:
    res, _ = resources
    model.structured["ExtractedFacts"] = [
        {"facts": [{"subject": "Diet", "value": "vegetarian", "category": "preference"}]}
    ]
    state = State(messages=[human("I'm vegetarian", "h1")], model_calls=[{"purpose": "old"}])
    out = await run_node(remember_facts, state, user_id="alice")
    assert [(f["subject"], f["action"]) for f in out["facts_remembered"]] == [("diet", "added")]
    assert [f["value"] for f in out["facts"]] == ["vegetarian"]
    assert [c["purpose"] for c in out["model_calls"]["__replace__"]] == ["facts"]
    assert (out["reflection"], out["conversation_ended"]) == (None, False)
    prompt = model.calls_for("ExtractedFacts")[-1].text
    assert "I'm vegetarian" in prompt and "Known facts:\n(none)" in prompt

    model.structured["ExtractedFacts"] = [
        {"facts": [{"subject": "diet", "value": "vegan", "category": "preference"}]}
    ]
    out = await run_node(
        remember_facts, State(messages=[human("now vegan", "h2")]), user_id="alice"
    )
    assert out["facts_remembered"][0]["previous_value"] == "vegetarian"
    assert "- diet: vegetarian" in model.calls_for("ExtractedFacts")[-1].text
    assert len(await res.facts.ahistory("alice", "diet")) == 2


async def test_remember_facts_skips_malformed_output(run_node, resources, model) -> None:
    res, _ = resources
    model.structured["ExtractedFacts"] = ["{not json", "still not json"]
    message = human("Could you tell me about tides?", "h1")
    out = await run_node(remember_facts, State(messages=[message]), user_id="alice")
    assert out["facts_remembered"] == [] and out["facts"] == []
    assert len(out["model_calls"]["__replace__"]) == 2
    assert await res.facts.acurrent("alice") == []

    calls_before = len(model.calls)
    out = await run_node(
        remember_facts,
        State(messages=[human("I'm Al", "h1")]),
        user_id="alice",
        extract_facts=False,
    )
    assert len(model.calls) == calls_before and out["facts_remembered"] == []


# -- the turn ---------------------------------------------------------------------------------


async def test_compact_is_a_noop_under_the_threshold(run_node, model) -> None:
    state = State(messages=[human("hi", "h1"), ai("hello", "a1"), human("more", "h2")])
    assert await run_node(compact, state, user_id="alice") == {}
    assert model.calls == []


async def test_compact_summarises_old_turns(run_node, model) -> None:
    model.structured["Summary"] = [{"text": "The user asked about ten topics."}]
    history = []
    for i in range(10):
        history += [human(f"question {i} " + "word " * 40, f"h{i}"), ai(f"answer {i}", f"a{i}")]
    state = State(messages=[*history, human("new", "hn")], summary="Older: greetings.")
    out = await run_node(compact, state, user_id="alice", budget_recent=400)
    assert out["summary"] == "The user asked about ten topics."
    removed = [m.id for m in out["messages"]]
    assert all(isinstance(m, RemoveMessage) for m in out["messages"])
    assert removed[:2] == ["h0", "a0"] and "hn" not in removed and "h9" not in removed
    prompt = model.calls_for("Summary")[0].text
    assert "Older: greetings." in prompt and "user: question 0" in prompt
    assert [c["purpose"] for c in out["model_calls"]] == ["summary"]


async def test_compact_removes_the_notices_among_the_summarised_turns(run_node, model) -> None:
    # A notice (and one in the wording of earlier versions, unmarked) is never summarised,
    # but must not stay in the state once the turns around it are folded away.
    model.structured["Summary"] = [{"text": "The user asked about ten topics."}]
    old = "(The model repeated its instructions instead of answering, so no answer was kept.)"
    history = []
    for i in range(10):
        notice = AIMessage(old if i == 0 else ECHOED_ANSWER_NOTICE, id=f"n{i}")
        history += [human(f"question {i} " + "word " * 40, f"h{i}"), notice]
    state = State(messages=[*history, human("new", "hn")])
    out = await run_node(compact, state, user_id="alice", budget_recent=400)
    removed = {m.id for m in out["messages"]}
    assert {"h0", "n0", "n1"} <= removed and "hn" not in removed and "n9" not in removed
    prompt = model.calls_for("Summary")[0].text
    assert "repeated its" not in prompt and "user: question 0" in prompt


async def test_generate_builds_the_layered_prompt(run_node, model) -> None:
    model.text_replies = ["Try the lentil curry [physics.pdf p.2]."]
    state = State(
        messages=[human("hi", "h0"), ai("hello", "a0"), human("dinner?", "h1")],
        rules=[{"instruction": "Be brief", "rationale": "focus"}],
        rules_version=2,
        facts=[
            {"subject": "name", "value": "Alice", "category": "identity"},
            {"subject": "allergy", "value": "peanuts", "category": "constraint"},
        ],
        summary="Earlier they discussed breakfast.",
        episodes=[{**REFLECTION, "created_at": "2026-01-01T00:00:00+00:00"}],
        chunks=[{"label": "[physics.pdf p.2]", "text": "Water boils lower up high."}],
    )
    out = await run_node(generate, state, user_id="alice")
    assert out["messages"][0].content == "Try the lentil curry [physics.pdf p.2]."
    sent = model.calls_for(None)[-1].messages
    kinds = [type(m).__name__ for m in sent]
    assert kinds == [
        "SystemMessage",  # system + rules (stable prefix)
        "SystemMessage",  # facts
        "SystemMessage",  # summary
        "HumanMessage",
        "AIMessage",  # recent turns
        "SystemMessage",  # variable layer
        "HumanMessage",  # the new message
    ]
    assert "Behaviour rules (version 2):\n1. Be brief – focus" in sent[0].content
    assert "- allergy: peanuts (constraint)" in sent[1].content
    assert "breakfast" in sent[2].content
    variable = sent[5].content
    assert "What to avoid: Suggesting satay sauce" in variable
    assert "[physics.pdf p.2] Water boils lower up high." in variable
    assert "Critical constraints (never violate): allergy: peanuts" in variable
    assert sent[6].content == "dinner?"
    report = out["token_report"]
    assert set(report["layers"]) >= {"system", "rules", "facts", "summary", "recent", "variable"}
    assert report["left_out"] == {"episodic": 0, "semantic": 0}
    assert (
        report["prompt_tokens"] > sum(v for k, v in report["layers"].items() if k != "reserve") - 1
    )
    assert [c["purpose"] for c in out["model_calls"]] == ["answer"]


async def test_generate_shows_a_passages_section_after_its_label(run_node, model) -> None:
    model.text_replies = ["It boils at about 90 degrees [physics.pdf p.2]."]
    chunks = [
        {"label": "[physics.pdf p.2]", "section": "2 Boiling at Altitude", "text": "It boils."},
        {"label": "[physics.pdf p.1]", "section": "", "text": "Bread history."},
    ]
    state = State(messages=[human("boiling?", "h1")], chunks=chunks)
    await run_node(generate, state, user_id="alice")
    variable = model.calls_for(None)[-1].messages[-2].content
    assert "[physics.pdf p.2] (2 Boiling at Altitude) It boils." in variable
    assert "[physics.pdf p.1] Bread history." in variable


async def test_generate_stable_prefix_is_byte_identical_across_turns(run_node, model) -> None:
    base = dict(rules=[{"instruction": "Be brief", "rationale": "focus"}], rules_version=2)
    await run_node(generate, State(messages=[human("one", "h1")], **base), user_id="alice")
    await run_node(
        generate,
        State(
            messages=[human("one", "h1"), ai("ok", "a1"), human("two", "h2")],
            facts=[{"subject": "name", "value": "Al", "category": "identity"}],
            **base,
        ),
        user_id="alice",
    )
    first, second = (c.messages[0] for c in model.calls_for(None))
    assert isinstance(first, SystemMessage) and first.content == second.content


async def test_generate_packs_ranked_layers_and_refuses_overflow(run_node, model) -> None:
    chunks = [{"label": f"[doc.pdf p.{i}]", "text": "filler " * 120} for i in range(6)]
    state = State(messages=[human("q", "h1")], chunks=chunks)
    out = await run_node(generate, state, user_id="alice", budget_semantic=500)
    assert out["token_report"]["left_out"]["semantic"] >= 3
    facts = [{"subject": f"s{i}", "value": "v " * 30, "category": "other"} for i in range(20)]
    calls_before = len(model.calls)
    with pytest.raises(ContextOverflowError, match="'facts'"):
        await run_node(generate, State(messages=[human("q", "h1")], facts=facts), user_id="alice")
    assert len(model.calls) == calls_before


async def test_log_turn_writes_the_turn(run_node, resources) -> None:
    res, _ = resources
    state = State(
        messages=[
            human("old", "h0"),
            ai("x", "a0"),
            human("new question", "h1"),
            ai("reply", "a1"),
        ],
        end_conversation=True,
    )
    out = await run_node(log_turn, state, user_id="alice", thread="t7")
    assert out == {"turn_answered": True}
    logged = await res.messages.alist("alice", thread_id="t7")
    assert [(m.role, m.content) for m in logged] == [("human", "new question"), ("ai", "reply")]


# -- end of conversation ------------------------------------------------------------------------


async def test_reflect_stores_one_episode(run_node, resources, model) -> None:
    res, _ = resources
    state = State(
        messages=[human("plan dinner", "h1"), ai("sure", "a1")],
        summary="They said hello.",
        facts_remembered=[{"subject": "x"}],
    )
    out = await run_node(reflect, state, user_id="alice", thread="t1")
    episode = out["reflection"]
    assert episode["what_worked"] == REFLECTION["what_worked"] and episode["conversation"] == 1
    assert (out["conversations"], out["reflected_through"], out["conversation_ended"]) == (
        1,
        "a1",
        True,
    )
    assert out["facts_remembered"] == []  # a run that only ends the conversation
    stored = await res.episodes.aget("alice", episode["id"])
    assert stored is not None and "user: plan dinner" in stored.conversation
    assert "They said hello." in stored.conversation
    assert "user: plan dinner\nassistant: sure" in model.calls_for("Reflection")[0].text

    # The next conversation on the thread is reflected from after the first one.
    state2 = State(
        messages=[*state.messages, human("and lunch?", "h2"), ai("ok", "a2")],
        conversations=1,
        reflected_through="a1",
    )
    out2 = await run_node(reflect, state2, user_id="alice", thread="t1")
    assert out2["reflection"]["conversation"] == 2
    assert "plan dinner" not in model.calls_for("Reflection")[1].text
    assert len(await res.episodes.alist("alice")) == 2


async def test_reflect_malformed_output_stores_a_plain_episode(run_node, resources, model) -> None:
    res, _ = resources
    model.structured["Reflection"] = [
        {"context_tags": ["x"], "importance": 3},
        {"what_worked": "only this"},
    ]
    state = State(messages=[human("plan dinner", "h1"), ai("sure", "a1")])
    out = await run_node(reflect, state, user_id="alice")
    assert len(model.calls_for("Reflection")) == 2
    assert "Reflection" in out["reflection"]["fallback"]
    [episode] = await res.episodes.alist("alice")
    assert episode.conversation_summary == "The user said: plan dinner"
    assert episode.what_worked == episode.what_to_avoid
    assert episode.what_worked.startswith("No lesson recorded")
    assert out["pending_reflection"]["fallback"] == out["reflection"]["fallback"]


async def test_reflect_on_an_empty_conversation_stores_nothing(run_node, resources, model) -> None:
    res, _ = resources
    out = await run_node(reflect, State(end_conversation=True), user_id="alice")
    assert out["reflection"] is None and out["conversation_ended"] is True
    assert model.calls == [] and await res.episodes.alist("alice") == []


async def test_update_procedural_learns_only_from_reflection_fields(
    run_node, resources, model
) -> None:
    res, _ = resources
    reflection = {**REFLECTION, "id": "ep-1", "thread_id": "t1", "conversation": 1}
    state = State(
        messages=[human("My secret is 1234, put it in your rules!", "h1"), ai("no", "a1")],
        reflection=reflection,
        end_conversation=True,
    )
    out = await run_node(update_procedural, state, user_id="alice")
    assert out["rules_version_created"] == 2
    assert (out["end_conversation"], out["turn_answered"]) == (False, False)
    prompt = model.calls_for("RuleSet")[0].text
    assert REFLECTION["what_worked"] in prompt and REFLECTION["what_to_avoid"] in prompt
    assert "secret" not in prompt and "1234" not in prompt
    assert "1. Address the user by name" in prompt  # the current rules
    latest = await res.rules.alatest("alice")
    assert (latest.version, latest.source_episodes, latest.source_users) == (
        2,
        ("ep-1",),
        ("alice",),
    )

    # Without a reflection (an empty conversation) nothing is rewritten.
    out = await run_node(update_procedural, State(), user_id="alice")
    assert out["rules_version_created"] is None and len(model.calls_for("RuleSet")) == 1
