"""Measure fact extraction on plain self-statements: the offline model, the patterns, both.

The statements are ``bench/data/fact_statements.json`` (48 written first and used while
writing the patterns, 20 held out, 12 messages that state nothing). Every message is sent
through the graph's own prompt; the rates are computed for:

- ``model``: the model's facts under ``ExtractedFacts`` (an empty list is allowed);
- ``model, plausible``: those with a short key and a value taken from the message;
- ``patterns``: the self-statement patterns alone (no model);
- ``graph``: what ``graph.nodes.extract_facts`` returns, i.e. what a turn stores: with the
  offline model, the patterns plus the model's plausible facts.

``--forced`` also asks the model a third time with a schema that forbids the empty list
(``StatedFacts``) when the message speaks of the user (constrained decoding), and scores
its plausible facts alone and added to the patterns.

The last line counts the statements the graph remembers and the patterns alone do not:
what the model adds.

Run:
    python bench/fact_extraction_bench.py                 # the offline model
    python bench/fact_extraction_bench.py --model openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from pydantic import Field

from agentic_memory import prompts
from agentic_memory.graph.nodes import extract_facts
from agentic_memory.kinds.facts import ExtractedFact, ExtractedFacts
from agentic_memory.kinds.facts.self_statements import (
    extract_self_statements,
    looks_like_self_statement,
    merge_facts,
    plausible_fact,
)
from agentic_memory.models.calls import MODEL_ERRORS, ainvoke_structured
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.local_server import stop_local_server

DATA = Path(__file__).with_name("data") / "fact_statements.json"


class StatedFacts(ExtractedFacts):
    """Durable facts in a message where the user speaks of themself: at least one."""

    facts: list[ExtractedFact] = Field(min_length=1, max_length=5)


def remembered(facts: Sequence[ExtractedFact], item: dict[str, Any]) -> bool:
    """Tell whether one of the facts holds what the statement says (see the data file)."""
    for fact in facts:
        subject, value = fact.subject.lower(), fact.value.lower()
        if not any(stem in subject for stem in item["subjects"]):
            continue
        if all(any(alt in value for alt in part.split("|")) for part in item["value"]):
            return True
    return False


async def ask(model: Any, schema: type[ExtractedFacts], message: str) -> tuple[Any, float]:
    """Ask the model once with the graph's prompt; (reply or None, seconds)."""
    prompt = prompts.load("fact_extraction").format(known_facts="(none)", message=message)
    started = time.perf_counter()
    try:
        value, _ = await ainvoke_structured(model, schema, [HumanMessage(prompt)], purpose="facts")
    except MODEL_ERRORS as exc:
        logging.warning("no reply for %r: %s", message, exc)
        return None, time.perf_counter() - started
    return value, time.perf_counter() - started


async def main(spec: str, verbose: bool, forced: bool) -> None:
    """Score every mode on every part of the data and print Markdown tables."""
    data = json.loads(DATA.read_text())
    model = resolve_chat_model(spec, max_tokens=1024)
    parts = {"dev": data["dev"], "held_out": data["held_out"]}
    modes = ["model", "model, plausible", "patterns", "graph"]
    if forced:
        modes += ["non-empty, plausible", "patterns + non-empty"]
    hits: dict[tuple[str, str], int] = {}
    false_positive = {m: 0 for m in modes}
    empty = important = added = 0
    seconds: dict[str, list[float]] = {"ExtractedFacts": [], "graph": [], "StatedFacts": []}
    try:
        for part, items in [*parts.items(), ("none", [{"text": t} for t in data["none"]])]:
            for item in items:
                text = item["text"]
                reply, took = await ask(model, ExtractedFacts, text)
                seconds["ExtractedFacts"].append(took)
                raw = list(reply.facts) if reply is not None else []
                empty += not raw
                important += bool(reply is not None and reply.important)
                started = time.perf_counter()
                stored, _, _ = await extract_facts(model, text)
                seconds["graph"].append(time.perf_counter() - started)
                results = {
                    "model": raw,
                    "model, plausible": [f for f in raw if plausible_fact(f, text)],
                    "patterns": extract_self_statements(text),
                    "graph": stored,
                }
                if forced:
                    schema = StatedFacts if looks_like_self_statement(text) else ExtractedFacts
                    again, took = await ask(model, schema, text)
                    seconds["StatedFacts"].append(took)
                    more = [f for f in (again.facts if again else []) if plausible_fact(f, text)]
                    results["non-empty, plausible"] = more
                    results["patterns + non-empty"] = merge_facts(results["patterns"], more)
                if verbose:
                    shown = {k: [(f.subject, f.value) for f in v] for k, v in results.items()}
                    print(f"[{part}] {text!r}: {shown}", flush=True)
                for mode in modes:
                    if part == "none":
                        false_positive[mode] += bool(results[mode])
                    else:
                        hits[(part, mode)] = hits.get((part, mode), 0) + remembered(
                            results[mode], item
                        )
                if part != "none":
                    added += remembered(stored, item) and not remembered(results["patterns"], item)
    finally:
        stop_local_server()
    total = len(parts["dev"]) + len(parts["held_out"])
    messages = total + len(data["none"])
    print(f"\nmodel: {spec}; {messages} messages")
    for name, values in seconds.items():
        if not values:
            continue
        print(f"- {name} call: median {statistics.median(values):.1f} s, max {max(values):.1f} s")
    print(
        f"- empty replies under ExtractedFacts: {empty} of {messages}; important=true: {important}\n"
    )
    print("| mode | dev (48) | held out (20) | all (68) | facts from the 12 non-statements |")
    print("|---|---|---|---|---|")
    for mode in modes:
        dev, held = hits.get(("dev", mode), 0), hits.get(("held_out", mode), 0)
        print(
            f"| {mode} | {dev}/{len(parts['dev'])} ({dev / len(parts['dev']):.0%}) "
            f"| {held}/{len(parts['held_out'])} ({held / len(parts['held_out']):.0%}) "
            f"| {dev + held}/{total} ({(dev + held) / total:.0%}) "
            f"| {false_positive[mode]} |"
        )
    print(f"\nStatements the graph remembers that the patterns alone miss: {added}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local", help="model spec (default: local)")
    parser.add_argument("--verbose", action="store_true", help="print every model reply")
    parser.add_argument("--forced", action="store_true", help="also try a non-empty schema")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.model, args.verbose, args.forced))
