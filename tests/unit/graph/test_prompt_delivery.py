"""The model receives the whole prompt, on every provider path, as it reaches the server.

A graph turn with memories of every kind (a fact, an episode, a document passage, the
starting rules) is answered through each way a model is reached: OpenAI (``openai:``, with
``OPENAI_BASE_URL``), an OpenAI-compatible server (``compatible:``) and the offline model
(``local``). The request is read where it arrives: the recording OpenAI-compatible server
(``tests/fake_openai.py``), or the stand-in that takes llama.cpp's place under the real
launcher. The offline model's chat format has no system role (llama-cpp-python's ``gemma``
format drops system messages), so there every layer must arrive inside the user turns.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fpdf import FPDF
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import agentic_memory.graph.resources as resources
from agentic_memory.graph.graph import compile_graph
from agentic_memory.ingest.pipeline import ingest_paths
from agentic_memory.kinds.episodes import Reflection
from agentic_memory.kinds.facts import ExtractedFact
from agentic_memory.langgraph_store import AgenticStore
from tests.fake_openai import FakeOpenAIServer, message_text
from tests.integration.local_model.test_local_server_lifecycle import standin

__all__ = ["standin"]  # the fixture, imported for this module

QUESTION = "What are the four kinds of memory of a language agent in CoALA?"
# One distinctive piece of each layer, as the graph renders it.
LAYERS = {
    "system prompt": "You are a helpful assistant with a long-term memory of this user.",
    "rules": "Respect every stated constraint such as allergies",
    "facts": "- diet: vegetarian (preference)",
    "constraints": "peanut allergy: allergic to peanuts",
    "episode": "Listing three recipes without nuts helped.",
    "passage": "working, episodic, semantic and procedural",
    "passage label": "[coala.pdf p.1]",
    "new message": QUESTION,
}


@pytest.fixture(autouse=True)
def _fresh_models(monkeypatch: pytest.MonkeyPatch) -> None:
    # Models are resolved once per spec per process: each test points them elsewhere.
    monkeypatch.setattr(resources, "_RESOLVED", {})


@pytest.fixture
def recorded(standin: Path) -> Path:
    """The file the stand-in server appends each request body to."""
    requests = standin.with_name("requests.jsonl")
    data = json.loads(standin.read_text())
    standin.write_text(json.dumps({**data, "requests_file": str(requests)}))
    return requests


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="fake-model") as server:
        yield server


async def _seed(agentic: AgenticStore, tmp_path: Path) -> None:
    memory = agentic.memory
    await memory.facts.aremember(
        "alice",
        [
            ExtractedFact(subject="diet", value="vegetarian", category="preference"),
            ExtractedFact(
                subject="peanut allergy", value="allergic to peanuts", category="constraint"
            ),
        ],
    )
    await memory.episodes.astore(
        "alice",
        "earlier-thread",
        Reflection(
            context_tags=["memory", "coala"],
            conversation_summary="The user asked about the kinds of memory in CoALA.",
            what_worked="Listing three recipes without nuts helped.",
            what_to_avoid="Long answers about memory.",
            importance=0.8,
        ),
        "user: kinds of memory in CoALA?",
    )

    def ingest() -> bool:
        pdf = FPDF()
        pdf.set_font("Helvetica", size=11)
        pdf.add_page()
        pdf.multi_cell(
            0,
            5,
            "CoALA describes the four kinds of memory of a language agent: working, episodic, "
            "semantic and procedural memory. " * 3,
        )
        path = tmp_path / "coala.pdf"
        path.write_bytes(bytes(pdf.output()))
        return ingest_paths([path], store=memory.store, embeddings=memory.embeddings).ok

    # File writes and ingestion are blocking work: off the event loop, as a server does it.
    assert await asyncio.to_thread(ingest)


async def _turn(agentic: AgenticStore, spec: str, profile: str = "auto") -> dict[str, Any]:
    app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic)
    return await app.ainvoke(
        {"messages": [HumanMessage(QUESTION)]},
        {"configurable": {"thread_id": "t1"}},
        context={
            "user_id": "alice",
            "model": spec,
            "memory_model": spec,
            "prompt_profile": profile,
        },
    )


def _check_every_layer(messages: list[dict[str, Any]]) -> None:
    text = "\n".join(message_text(m) for m in messages)
    missing = [name for name, piece in LAYERS.items() if piece not in text]
    assert not missing, f"the model did not receive: {missing}\n{text}"


@pytest.mark.parametrize("provider", ["openai", "compatible"])
async def test_remote_models_receive_every_layer_with_the_system_role(
    provider: str,
    fake: FakeOpenAIServer,
    agentic: AgenticStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if provider == "openai":
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    else:
        monkeypatch.setenv("AMEM_BASE_URL", fake.base_url)
        # At 127.0.0.1 the endpoint counts as a small model; this one is said to be capable.
        monkeypatch.setenv("AMEM_MODEL_CLASS", "capable")
    await _seed(agentic, tmp_path)
    out = await _turn(agentic, f"{provider}:fake-model")
    assert out["token_report"]["profile"] == "full"
    [answer] = fake.requests_for(None)
    _check_every_layer(answer["messages"])
    assert answer["messages"][0]["role"] == "system"
    assert LAYERS["system prompt"] in message_text(answer["messages"][0])
    assert answer["messages"][-1] == {"role": "user", "content": QUESTION}
    assert out["token_report"]["layers"]["facts"] > 0
    assert out["token_report"]["layers"]["variable"] > 0


async def test_the_offline_model_with_gemma_receives_every_layer_in_its_user_turn(
    recorded: Path, agentic: AgenticStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gemma's chat format has no system role: the full prompt is folded into the user turn.
    monkeypatch.setenv("AMEM_LOCAL_MODEL", "gemma3-270m")
    await _seed(agentic, tmp_path)
    out = await _turn(agentic, "local", profile="full")
    lines = (await asyncio.to_thread(recorded.read_text)).splitlines()
    bodies = [json.loads(line) for line in lines]
    [answer] = [b for b in bodies if not b.get("tools")]
    roles = [m["role"] for m in answer["messages"]]
    assert roles == ["user"], roles  # no system message: the format would drop it
    _check_every_layer(answer["messages"])
    # The layers come first, the user's message last, as Gemma's template orders them.
    content = message_text(answer["messages"][0])
    assert content.startswith(LAYERS["system prompt"]) and content.endswith(QUESTION)
    assert out["messages"][-1].content.startswith("hello from start")


# One distinctive piece of each layer of the compact profile.
COMPACT = {
    "instruction": "Answer the user's last message in one or two short sentences",
    "facts": "- your diet: vegetarian",
    "constraint fact": "- your peanut allergy: allergic to peanuts",
    "constraints": "Never suggest anything against: peanut allergy: allergic to peanuts.",
    "passage": "[coala.pdf p.1]",
}


@pytest.mark.parametrize("where", ["bundled", "small endpoint"])
async def test_small_models_receive_the_compact_prompt_with_its_system_role(
    where: str,
    recorded: Path,
    fake: FakeOpenAIServer,
    agentic: AgenticStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _seed(agentic, tmp_path)
    if where == "bundled":
        out = await _turn(agentic, "local")
        lines = (await asyncio.to_thread(recorded.read_text)).splitlines()
        [answer] = [b for b in map(json.loads, lines) if not b.get("tools")]
    else:
        monkeypatch.setenv("AMEM_BASE_URL", fake.base_url)  # 127.0.0.1: a small model
        out = await _turn(agentic, "compatible:fake-model")
        [answer] = fake.requests_for(None)
    messages = answer["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    system = message_text(messages[0])
    missing = [name for name, piece in COMPACT.items() if piece not in system]
    assert not missing, f"the compact prompt lacks {missing}:\n{system}"
    # No layer of the full profile: a small model is lost in them.
    for piece in ("Behaviour rules (version", "Critical constraints", "Current time"):
        assert piece not in system
    assert messages[-1] == {"role": "user", "content": QUESTION}
    report = out["token_report"]
    assert report["profile"] == "compact" and report["layers"]["rules"] == 0
    # What was recalled but not shown is counted, never dropped in silence.
    recalled = len(out["chunks"]) + len(out["episodes"]) + len(out["past_turns"])
    assert recalled >= 2 and report["left_out"]["recalled"] == recalled - 2
    assert report["layers"]["facts"] > 0 and report["layers"]["variable"] > 0
