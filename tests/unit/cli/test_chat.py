"""The chat REPL, driven through a pseudo-terminal and through a stdin script.

The CLI runs as a real subprocess against the scripted OpenAI-compatible server
(``tests/fake_openai.py``), with the embedded store and the SQLite checkpointer in a
temporary ``AMEM_HOME``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from agentic_memory.ingest.pipeline import ingest_paths
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fake_openai import FakeOpenAIServer, last_user_text, prompt_text

AMEM = str(Path(sys.executable).with_name("amem"))
TIMEOUT = 120


def _facts(request: dict[str, Any]) -> dict[str, Any]:
    text = last_user_text(request)
    if "I am vegetarian" in text:
        return {"facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]}
    # The memory model flags a message that records something to keep exactly.
    return {"facts": [], "important": "locker code" in text}


def _answer(request: dict[str, Any]) -> str:
    prompt = prompt_text(request)
    question = last_user_text(request)
    if "pump" in question.lower() and "[pump.md p.1]" in prompt:
        return "Oil it every 200 hours [pump.md p.1]."
    if "diet: vegetarian" in prompt:
        return "Since you are vegetarian, try the lentil curry."
    return "Hello! How can I help?"


REFLECTION = {
    "context_tags": ["food"],
    "conversation_summary": "The user said they are vegetarian and asked about the pump.",
    "what_worked": "short answers with a citation",
    "what_to_avoid": "meat dishes",
    "importance": 0.8,
}
RULES = {
    "rules": [
        {"instruction": "Suggest vegetarian dishes", "rationale": "the user is vegetarian"},
        {"instruction": "Cite the manual page", "rationale": "the user checks sources"},
    ]
}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(
        text_script=_answer,
        tool_scripts={"ExtractedFacts": _facts, "Reflection": REFLECTION, "RuleSet": RULES},
    ) as srv:
        yield srv


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return Path(os.environ["AMEM_HOME"])


@pytest.fixture
def env(server: FakeOpenAIServer, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AMEM_BASE_URL": server.base_url,
        "AMEM_MODEL_NAME": "fake-model",
        # The scripted server plays a capable model (the full prompt), though at 127.0.0.1.
        "AMEM_MODEL_CLASS": "capable",
        "COLUMNS": "120",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


@pytest.fixture
def manual(home: Path, tmp_path: Path, embeddings: LocalEmbeddings) -> str:
    doc = tmp_path / "pump.md"
    doc.write_text("# Pump manual\n\nThe pump needs oil every 200 hours.\n")
    with EmbeddedStore(home / "store", dims=256) as store:
        assert ingest_paths([doc], kb="manuals", store=store, embeddings=embeddings).ok
    return str(doc)


def _spawn(env: dict[str, str], *args: str) -> pexpect.spawn:
    child = pexpect.spawn(
        AMEM, ["chat", *args], env=env, encoding="utf-8", timeout=TIMEOUT, dimensions=(50, 120)
    )
    return child


def _say(child: pexpect.spawn, line: str) -> None:
    child.expect_exact("you> ")
    child.sendline(line)


def test_a_conversation_ends_and_a_new_thread_remembers(
    env: dict[str, str],
    server: FakeOpenAIServer,
    home: Path,
    manual: str,
    embeddings: LocalEmbeddings,
) -> None:
    child = _spawn(env, "--user", "alice", "--thread", "t1", "--new", "--kb", "manuals")
    child.expect_exact("New conversation on thread t1")
    _say(child, "Hi there")
    child.expect_exact("assistant> Hello! How can I help?")
    _say(child, "I am vegetarian")
    child.expect_exact("I'll remember: diet = vegetarian")
    child.expect_exact("assistant> Since you are vegetarian, try the lentil curry.")
    _say(child, "How often does the pump need oil?")
    child.expect_exact("Oil it every 200 hours [pump.md p.1].")
    child.expect_exact("Sources: pump.md p.1 (cited)")
    _say(child, "/facts")
    child.expect(r"diet\s+.\s+vegetarian")
    _say(child, "/end")
    child.expect_exact("What I learned")
    child.expect_exact("meat dishes")
    child.expect_exact("Rules updated: version 2")
    child.expect_exact("+ Suggest vegetarian dishes")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    # Answers were streamed token by token from the server.
    answers = server.requests_for(None)
    assert answers and all(r.get("stream") for r in answers)

    child = _spawn(env, "--user", "alice")
    child.expect(r"New conversation on thread (t-[0-9a-f]+)")
    new_thread = child.match.group(1)
    _say(child, "What should I cook tonight?")
    child.expect_exact("Since you are vegetarian, try the lentil curry.")
    _say(child, "/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    last_prompt = prompt_text(server.requests_for(None)[-1])
    assert "diet: vegetarian" in last_prompt
    # The episode of the first conversation was recalled into the new thread's prompt.
    assert "asked about the pump" in last_prompt

    with EmbeddedStore(home / "store", dims=256) as store:
        episodes = asyncio.run(EpisodicMemory(store, embeddings).alist("alice"))
        assert [e.thread_id for e in episodes] == ["t1"]  # /quit did not reflect
        assert asyncio.run(RuleBook(store, embeddings).alatest("alice")).version == 2
        assert asyncio.run(MessageLog(store, embeddings).athreads("alice")) == sorted(
            ["t1", new_thread]
        )


def test_a_stdin_script_resumes_a_thread(env: dict[str, str], server: FakeOpenAIServer) -> None:
    def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AMEM, "chat", "--user", "bob", "--no-stream", *args],
            input=script,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    first = run("Hi there\nI am vegetarian\n", "--thread", "b1", "--new")  # EOF: like /quit
    assert first.returncode == 0, first.stderr
    assert "I'll remember: diet = vegetarian" in first.stdout
    assert "Traceback" not in first.stderr
    assert not any(r.get("stream") for r in server.requests_for(None))

    second = run(
        "/help\n/rules\n/recall vegetarian\n/forget diet\n/facts\n/nope\n/quit\n", "--thread", "b1"
    )
    assert second.returncode == 0, second.stderr
    assert "Resuming thread b1 (4 messages)" in second.stdout
    # No knowledge base yet is a fresh machine's normal state: a hint in /help, no warning.
    assert "knowledge base" not in second.stderr
    assert "/recall QUERY" in second.stdout  # the help
    assert "Documents: no knowledge base to search yet." in second.stdout
    assert "Rules, version 1" in second.stdout
    assert "I am vegetarian" in second.stdout  # found by /recall in the message log
    assert "Forgotten: diet (1 value(s) deleted)." in second.stdout
    assert "No facts remembered yet." in second.stdout
    assert "unknown command /nope" in second.stderr

    other = subprocess.run(
        [AMEM, "chat", "--user", "mallory", "--thread", "b1"],
        input="What is my diet?\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert other.returncode == 1
    assert "thread 'b1' belongs to another user" in other.stderr
    assert "vegetarian" not in other.stdout


def test_an_unknown_thread_is_an_error_not_a_new_conversation(
    env: dict[str, str], server: FakeOpenAIServer, home: Path
) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AMEM, "chat", "--user", "dana", "--no-stream", *args],
            input="Hello\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    typo = run("--thread", "t-doesnotexist")
    assert typo.returncode == 1, typo.stdout
    assert typo.stderr.startswith("Error: 'dana' has no thread 't-doesnotexist' to resume")
    assert "add --new" in typo.stderr and "Traceback" not in typo.stderr
    assert server.requests == [], "no turn ran"
    started = run("--thread", "trip", "--new")
    assert started.returncode == 0, started.stderr
    assert "New conversation on thread trip" in started.stdout
    again = run("--thread", "trip", "--new")
    assert again.returncode == 1
    assert "thread 'trip' already exists; resume it without --new" in again.stderr
    resumed = run("--thread", "trip")
    assert resumed.returncode == 0 and "Resuming thread trip (2 messages)" in resumed.stdout
    alone = run("--new")
    assert alone.returncode == 1 and "--new goes with --thread" in alone.stderr
    # The refused runs wrote nothing: only "trip" holds turns.
    with EmbeddedStore(home / "store", dims=256) as store:
        assert asyncio.run(MessageLog(store, LocalEmbeddings()).athreads("dana")) == ["trip"]


def test_a_knowledge_base_named_with_kb_that_does_not_exist_is_warned_about(
    env: dict[str, str], server: FakeOpenAIServer
) -> None:
    done = subprocess.run(
        [AMEM, "chat", "--user", "erin", "--kb", "nope", "--no-stream"],
        input="/help\n/quit\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "no knowledge base 'nope' to search (available: none yet" in done.stderr


_STANDIN_CHAT = """
import sys
import agentic_memory.models.local_server as local_server
local_server._SINGLETON = local_server.LocalModelServer(sys.argv[1], server=sys.argv[2])
import agentic_memory.models.chat
agentic_memory.models.chat.local_model_available = lambda: True
from agentic_memory.cli.main import app
sys.argv = ["amem", *sys.argv[3:]]
app()
"""


def test_a_local_server_that_dies_is_told_in_one_line_and_restarted(
    env: dict[str, str], tmp_path: Path
) -> None:
    # The real CLI with llama.cpp's place taken by a stand-in that dies by SIGILL on its
    # first request, as llama.cpp does on a CPU that refuses its instructions.
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    config = tmp_path / "standin.json"
    config.write_text(
        # The first turn's answer and its one retry die (the turn fails). "Hello" states
        # nothing, so the small model is not asked for facts from it.
        '{"die_signal": "SIGILL", "die_on_starts": [1, 2], "starts_file": "%s"}'
        % (tmp_path / "starts")
    )
    standin = Path(__file__).resolve().parents[1] / "models" / "standin_server.py"
    env = {k: v for k, v in env.items() if k not in ("AMEM_BASE_URL", "AMEM_MODEL_NAME")}
    done = subprocess.run(
        [sys.executable, "-c", _STANDIN_CHAT, str(model), str(standin)]
        + ["chat", "--user", "fay", "--model", "local", "--no-stream"],
        input="Hello\nHello again\n/quit\n",
        env={**env, "STANDIN_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    failed = [line for line in done.stderr.splitlines() if "this turn failed" in line]
    assert len(failed) == 1, done.stderr
    line = failed[0]
    assert "local model server" in line and "died: killed by SIGILL" in line
    assert "llama.cpp was built for another CPU: rebuild it with" in line
    assert "local-model-" in line and ".log" in line
    assert "Traceback" not in done.stderr
    assert "assistant> hello from start 3" in done.stdout  # the next turn restarted it


def test_without_a_model_it_says_how_to_configure_one(env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if k not in ("AMEM_BASE_URL", "AMEM_MODEL_NAME")}
    done = subprocess.run(
        [AMEM, "chat", "--user", "alice", "--model", "openai:gpt-4o-mini"],
        input="hello\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert "needs OPENAI_API_KEY" in done.stderr
    assert "No chat model is configured" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_chat_needs_a_user(env: dict[str, str]) -> None:
    done = subprocess.run(
        [AMEM, "chat"], input="", env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 1
    assert "needs --user" in done.stderr


def test_a_failed_turn_is_reported_and_the_session_goes_on(env: dict[str, str]) -> None:
    # The model refuses every request: the turn fails, the REPL says so and keeps running.
    # (A failing memory model alone fails no turn: its calls fall back.)
    def refuse(_: dict[str, object]) -> str:
        raise RuntimeError("the model is down")

    with FakeOpenAIServer(text_script=refuse) as broken:
        env = {**env, "AMEM_BASE_URL": broken.base_url}
        done = subprocess.run(
            [AMEM, "chat", "--user", "carol", "--thread", "c1", "--new", "--no-stream"],
            input="Hello\n/facts\n/quit\n",
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    assert done.returncode == 0, done.stderr
    assert "this turn failed: AnswerFailedError: the chat model (compatible:fake-model)" in (
        done.stderr
    )
    assert "OpenAIConnectionError" in done.stderr and "the thread is as it was" in done.stderr
    assert "No facts remembered yet." in done.stdout  # the command after the failure ran
    assert "Traceback" not in done.stderr


def test_ctrl_c_at_the_prompt_leaves_at_once(env: dict[str, str]) -> None:
    child = _spawn(env, "--user", "dan")
    _say(child, "Hello")
    child.expect_exact("assistant> ")
    child.expect_exact("you> ")
    child.sendintr()
    child.expect(pexpect.EOF, timeout=30)  # the blocked read does not hold the exit
    child.close()
    assert child.exitstatus == 130
    assert "Traceback" not in (child.before or "")


def test_knowledge_base_names_given_in_another_case_are_found(
    env: dict[str, str], server: FakeOpenAIServer, manual: str
) -> None:
    # Ingested as "manuals": "--kb MANUALS" names the same base and its passages are cited.
    result = subprocess.run(
        [AMEM, "chat", "--user", "carol", "--no-stream", "--kb", "MANUALS"],
        input="How often does the pump need oil?\n/help\n/quit\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "no knowledge base" not in result.stderr
    assert "Oil it every 200 hours [pump.md p.1]." in result.stdout
    assert "Documents: searching manuals." in result.stdout


def test_important_marks_the_last_exchange_and_the_model_flags_what_to_keep(
    env: dict[str, str], server: FakeOpenAIServer, home: Path, embeddings: LocalEmbeddings
) -> None:
    child = _spawn(env, "--user", "alice", "--thread", "t1", "--new")
    _say(child, "/important")
    child.expect_exact("nothing to mark yet")
    _say(child, "Hi there")
    child.expect_exact("assistant> Hello! How can I help?")
    _say(child, "/important")
    child.expect_exact('Marked important: "Hi there" and the answer.')
    _say(child, "/important Remember the plumber comes on Friday")
    child.expect_exact('Marked important: "Remember the plumber comes on Friday" and the answer.')
    _say(child, "My locker code is 4411")
    child.expect_exact("I'll keep your message word for word")
    _say(child, "Just chatting")
    child.expect_exact("assistant> Hello! How can I help?")
    _say(child, "/quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    with EmbeddedStore(home / "store", dims=256) as store:
        logged = asyncio.run(MessageLog(store, embeddings).alist("alice", thread_id="t1"))
    marks = {(m.role, m.content): m.important_by for m in logged if m.important}
    assert marks == {
        ("human", "Hi there"): "user",
        ("ai", "Hello! How can I help?"): "user",
        ("human", "Remember the plumber comes on Friday"): "user",
        ("human", "My locker code is 4411"): "model",
    }  # the two marked answers have the same text: one key
    assert [m.content for m in logged if not m.important and m.role == "human"] == ["Just chatting"]
    assert [m.important for m in logged if m.role == "ai"] == [True, True, False, False]
