"""Measure the offline local model: start time, prompt and generation speed, structured calls.

Starts its own llama.cpp server (Gemma 3 270M Q4_K_M from the [local] extra) and calls it
the way the agent does (``resolve_chat_model("local")`` + ``agentic_memory.models.calls``). Token counts are
the server's own usage figures. The machine's load average is printed with the numbers,
because a shared CPU changes them a lot.

Run:
    python bench/local_model_bench.py               # 3 runs of each measurement
    python bench/local_model_bench.py --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Annotated

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field, StringConstraints

from agentic_memory.models.calls import (
    ModelCall,
    StructuredOutputError,
    ainvoke_structured,
    ainvoke_text,
)
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.local_server import LocalModelServer, get_local_server, local_model_path

Short = Annotated[str, StringConstraints(max_length=60)]


class UserFacts(BaseModel):
    """Facts the user stated about themself."""

    facts: list[Short] = Field(max_length=3, description="short facts, one per item")


class Reflection(BaseModel):
    """What to remember from a conversation."""

    summary: str = Field(max_length=200)
    what_worked: str = Field(max_length=120)
    what_to_avoid: str = Field(max_length=120)


CONVERSATION = (
    "User: Hi, I'm Ana. I moved to Lisbon last year and I work as a nurse.\n"
    "Assistant: Nice to meet you, Ana! How are you finding Lisbon?\n"
    "User: I love it, but the hills are hard on my bike. I prefer short answers, by the way.\n"
)


def _long_prompt(run: int) -> list[BaseMessage]:
    # A different first line each run: the server reuses a cached prompt prefix otherwise.
    paragraph = (
        "The harbour was quiet in the early morning, and the fishermen checked their nets "
        "while gulls circled above the boats and the tide slowly turned. "
    )
    return [HumanMessage(f"Text {run}:\n" + paragraph * 45 + "\nSummarise it in one sentence.")]


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


async def _text_runs(runs: int, max_tokens: int) -> list[ModelCall]:
    model = resolve_chat_model("local", max_tokens=max_tokens)
    out = []
    for i in range(runs):
        _, call = await ainvoke_text(
            model,
            [HumanMessage(f"Tell me a short story about a lighthouse keeper (take {i}).")],
            purpose="answer",
        )
        out.append(call)
    return out


async def _prompt_runs(runs: int) -> list[ModelCall]:
    model = resolve_chat_model("local", max_tokens=1)
    out = []
    for run in range(runs):
        _, call = await ainvoke_text(model, _long_prompt(run), purpose="prompt")
        out.append(call)
    return out


async def _structured_runs(
    runs: int, schema: type[BaseModel], instruction: str, max_tokens: int
) -> tuple[list[list[ModelCall]], int]:
    model = resolve_chat_model("local", max_tokens=max_tokens)
    results: list[list[ModelCall]] = []
    failures = 0
    for _ in range(runs):
        prompt = [SystemMessage(instruction), HumanMessage(CONVERSATION)]
        try:
            value, calls = await ainvoke_structured(model, schema, prompt, purpose="structured")
            print(f"    {value!r}"[:200])
        except StructuredOutputError as exc:
            failures += 1
            calls = exc.calls
            print(f"    FAILED: {exc}"[:200])
        results.append(calls)
    return results, failures


def _row(name: str, calls: list[ModelCall], *, prompt: bool = False) -> str:
    seconds = [c.seconds for c in calls]
    tokens = [c.input_tokens if prompt else c.output_tokens for c in calls]
    rates = [t / s for t, s in zip(tokens, seconds, strict=True) if s > 0]
    return (
        f"| {name} | {len(calls)} | {statistics.median(tokens):.0f} | "
        f"{statistics.median(seconds):.2f} | {statistics.median(rates):.1f} |"
    )


async def main(runs: int) -> None:
    """Run every measurement and print a Markdown table."""
    print(f"load average before: {_load()}  cores: {os.cpu_count()}")
    path = local_model_path()
    started = time.perf_counter()
    with LocalModelServer(path):
        cold = time.perf_counter() - started
    print(f"cold start (process + model load, then stop): {cold:.2f} s")

    server = get_local_server()
    server.model_path = path
    try:
        started = time.perf_counter()
        server.ensure_started()
        print(f"start of the shared server: {time.perf_counter() - started:.2f} s")
        text = await _text_runs(runs, 128)
        prompt = await _prompt_runs(runs)
        facts, facts_failed = await _structured_runs(
            runs, UserFacts, "List facts the user stated about themself.", 96
        )
        refl, refl_failed = await _structured_runs(
            runs, Reflection, "Reflect on this conversation for next time.", 200
        )
    finally:
        server.stop()

    print(f"\nload average after: {_load()}\n")
    print("| measurement | runs | median tokens | median seconds | median tokens/s |")
    print("|---|---|---|---|---|")
    print(_row("free text, 128-token answer (generation)", text))
    print(_row("~1000-token prompt, 1-token answer (prompt processing)", prompt, prompt=True))
    facts_first = [calls[0] for calls in facts]
    refl_first = [calls[0] for calls in refl]
    print(_row("structured UserFacts (≤3 × 60 chars), first call", facts_first))
    print(_row("structured Reflection (3 strings ≤200/120/120), first call", refl_first))
    retries = sum(len(c) - 1 for c in facts + refl)
    print(
        f"\nstructured calls: {2 * runs}, failures after retry: {facts_failed + refl_failed}, "
        f"retries needed: {retries}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(main(parser.parse_args().runs))
