"""One whole session with the offline model, as a new user meets it (issue 17).

A real ``langgraph dev`` on a free port, the real offline model that ``make install``
installs (llama.cpp's server and SmolLM2-135M-Instruct, started by the graph's process), the
LangGraph SDK: memories are seeded through the SDK and the Python API, the server is
restarted, one thread holds six turns (so compaction runs) and ends, and a new thread
recalls the episode and the facts. Every prompt the model is fed is recorded by a thin
wrapper of llama.cpp's server (``recording_llama_server.py``), so each turn checks what the
model received: the compact prompt (the offline model's profile) in ChatML's system turn,
and a prompt size that matches the turn's ``token_report``.

Answers are capped at 48 tokens (``answer_max_tokens``) to keep the run short; what is
slow is the model itself (2 shared cores).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fpdf import FPDF
from langgraph_sdk import get_client

from agentic_memory.api import Memory
from agentic_memory.graph.memory import looks_like_self_statement
from agentic_memory.ingest.pipeline import ingest_paths
from agentic_memory.models.embeddings import LocalEmbeddings
from tests.integration.server.conftest import run_dev_server
from tests.unit.models.conftest import local_model_file, requires_local

pytestmark = [pytest.mark.integration, requires_local, pytest.mark.timeout(1800)]

__all__ = ["local_model_file"]  # the fixture, imported for this module

RECORDER = Path(__file__).with_name("recording_llama_server.py")
USER = "alice"
SYSTEM_FIRST_LINE = "You are a helpful assistant. Answer the user's last message"
TURNS = [
    "Hi, my name is Alice and I live in Lisbon.",
    "I'm vegetarian.",
    "What are the four kinds of memory in CoALA?",
    "I like sailing on weekends.",
    "I work as a nurse.",
    "Can you suggest a dinner for me tonight?",
]
CONTEXT = {
    "user_id": USER,
    "model": "local",
    "memory_model": "local",
    "answer_max_tokens": 48,
    # A small window, so that six short turns are compacted even when every answer of the
    # base model was replaced by a notice (a notice is never part of the history).
    "budget_recent": 60,
}


def _pdf(path: Path) -> Path:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(
        0,
        5,
        "CoALA organises the memory of a language agent in four kinds: working memory, "
        "episodic memory, semantic memory and procedural memory. " * 3,
    )
    path.write_bytes(bytes(pdf.output()))
    return path


class Prompts:
    """The prompts the recording server saw, read as they come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = 0

    def new(self) -> list[dict[str, Any]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        fresh = [json.loads(line) for line in lines[self.seen :]]
        self.seen = len(lines)
        return fresh


def _answer_prompt(fresh: list[dict[str, Any]]) -> dict[str, Any]:
    answers = [p for p in fresh if not p["grammar"]]
    assert len(answers) == 1, f"expected one answer prompt, got {len(answers)}"
    return answers[0]


def _check_turn(out: dict[str, Any], fresh: list[dict[str, Any]], message: str) -> dict[str, Any]:
    assert isinstance(out, dict) and "__error__" not in out, out
    prompt = _answer_prompt(fresh)
    text = prompt["prompt"]
    # ChatML with the system role kept: the compact prompt is the system turn.
    assert text.startswith("<|im_start|>system\n" + SYSTEM_FIRST_LINE)
    assert "What you remember about the user:" in text.split("<|im_end|>", 1)[0]
    assert "Behaviour rules (version" not in text  # the compact profile has no rules
    assert text.rstrip().endswith("<|im_start|>assistant")
    assert f"<|im_start|>user\n{message}<|im_end|>" in text
    assert prompt["max_tokens"] == 48
    # What the model was fed matches what the graph assembled: the server's own count (its
    # Gemma tokenizer) against the graph's count (a Llama tokenizer, ~1.1-1.3x OpenAI's).
    [answer] = [c for c in out["model_calls"] if c["purpose"] == "answer"]
    assembled = out["token_report"]["prompt_tokens"]
    assert answer["input_tokens"] == prompt["tokens"]
    assert 0.6 * assembled <= answer["input_tokens"] <= 1.4 * assembled, (answer, assembled)
    assert not answer["estimated"]
    return prompt


async def _run(client: Any, thread_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    out = await client.runs.wait(thread_id, "agent", input=payload, context=CONTEXT)
    assert isinstance(out, dict), out
    # What each run cost, shown with -s (numbers for bench/results, never asserted).
    calls = ", ".join(
        f"{c['purpose']} {c['input_tokens']}/{c['output_tokens']} {c['seconds']:.1f}s"
        for c in out.get("model_calls", [])
    )
    print(f"run {time.perf_counter() - started:.1f}s: {calls}")
    return out


async def _seed(url: str) -> None:
    client = get_client(url=url)
    await client.store.put_item(
        ["facts", USER],
        "peanut allergy",
        {"value": "allergic to peanuts", "category": "constraint"},
    )
    await client.store.put_item(["memories", USER], "tea", {"text": "likes green tea"})


async def _session(url: str, prompts: Prompts) -> None:
    client = get_client(url=url)
    item = await client.store.get_item(["facts", USER], "peanut allergy")
    assert item is not None and item["value"]["value"] == "allergic to peanuts"
    thread = (await client.threads.create(metadata={"user_id": USER}))["thread_id"]
    outs = []
    for i, message in enumerate(TURNS):
        payload = {"messages": [{"role": "user", "content": message}]}
        out = await _run(client, thread, payload)
        prompt = _check_turn(out, prompts.new(), message)
        # The facts and the restated constraint reach the model every turn.
        assert "- your peanut allergy: allergic to peanuts" in prompt["prompt"]
        assert "Never suggest anything against: peanut allergy" in prompt["prompt"]
        if i == 2:  # the CoALA question: the passage and its label reach the model
            assert "[coala.pdf p.1]" in prompt["prompt"]
            assert "episodic memory, semantic memory" in prompt["prompt"]
        outs.append(out)
    final = outs[-1]
    remembered = {(f["subject"], f["value"]) for f in final["facts"]}
    assert {("name", "Alice"), ("city", "Lisbon"), ("diet", "vegetarian")} <= remembered
    assert ("job", "nurse") in remembered
    # Compaction ran: older turns left the window for the rolling summary.
    purposes = [c["purpose"] for o in outs for c in o["model_calls"]]
    assert "summary" in purposes, purposes
    state = (await client.threads.get_state(thread))["values"]
    assert state["summary"] and len(state["messages"]) < 2 * len(TURNS)
    assert "Summary of earlier turns of this conversation:" in prompts.path.read_text()

    ended = await _run(client, thread, {"messages": [], "end_conversation": True})
    assert ended["conversation_ended"] is True
    episode = ended["reflection"]
    assert episode is not None and episode["thread_id"] == thread
    # Whether the model's reflection or the plain episode, it copies no prompt example.
    assert "satay" not in json.dumps(episode)
    prompts.new()

    # A new thread recalls the episode and the facts.
    second = (await client.threads.create(metadata={"user_id": USER}))["thread_id"]
    message = "Do you remember what I told you about food?"
    out = await _run(client, second, {"messages": [{"role": "user", "content": message}]})
    prompt = _check_turn(out, prompts.new(), message)
    assert [e["id"] for e in out["episodes"]][:1] == [episode["id"]]
    # The compact prompt shows one recalled item besides passages: what the user wrote in
    # the other thread, or else the episode.
    said = [p["content"] for p in out["past_turns"] if p["role"] in ("human", "user")]
    said.sort(key=lambda text: not looks_like_self_statement(text))  # statements first
    shown = f"- you said before: {said[0]}" if said else episode["conversation_summary"][:40]
    assert shown in prompt["prompt"]
    assert out["token_report"]["profile"] == "compact"
    for line in ("- your name: Alice", "- your diet: vegetarian", "- your city: Lisbon"):
        assert line in prompt["prompt"]


# A sync test: it starts, stops and restarts server processes between its async parts.
def test_an_offline_session_with_restart_compaction_and_recall(
    tmp_path: Path, local_model_file: Path
) -> None:
    record = tmp_path / "agentic_memory.prompts.jsonl"
    env = {
        "AMEM_LOCAL_MODEL_PATH": str(local_model_file),
        "AMEM_LOCAL_SERVER": str(RECORDER),
        "RECORD_PROMPTS": str(record),
        # No endpoint: the runs name the local model, and nothing else is configured.
        "AMEM_BASE_URL": "",
    }
    # Seed memories (through the SDK, and a document through the Python API while the
    # server is stopped), then restart on the same data and hold the session.
    with run_dev_server(tmp_path, env=env) as server:
        asyncio.run(_seed(server.url))
        home = server.home
    with Memory.open(home=home, backend="embedded", embeddings=LocalEmbeddings()) as memory:
        report = ingest_paths(
            [_pdf(tmp_path / "coala.pdf")], store=memory.store, embeddings=memory.embeddings
        )
        assert report.ok
    with run_dev_server(tmp_path, env=env) as server:
        asyncio.run(_session(server.url, Prompts(record)))
    assert "Traceback" not in server.log_text()
