"""Count what a conversation costs: model calls, tokens and seconds per turn and at its end.

Runs a short scripted conversation through the real graph (embedded store in a temp
folder, offline embeddings) with the offline local model, or with any model spec
(``--model openai:gpt-4o-mini`` needs a key). Token counts are the server's own usage
figures. Prints one row per run and the totals per purpose.

Run:
    python bench/conversation_cost.py                  # local model, 4 turns + end
    python bench/conversation_cost.py --model openai:gpt-4o-mini
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.models.calls import summarize_calls
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.embeddings import get_embeddings
from agentic_memory.models.local_server import stop_local_server
from agentic_memory.store.embedded import EmbeddedStore

TURNS = [
    "Hi, I'm Ana. I moved to Lisbon last year and I work as a nurse.",
    "I like sailing on weekends, but I get seasick on big waves.",
    "Can you suggest a calm place near Lisbon to sail?",
    "Great. Please keep your answers short, I read them on my phone.",
]


async def main(spec: str, answer_tokens: int, memory_tokens: int) -> None:
    """Run the conversation and print a Markdown table of its model calls."""
    answer_model = resolve_chat_model(spec, max_tokens=answer_tokens)
    memory_model = resolve_chat_model(spec, max_tokens=memory_tokens)
    embeddings = get_embeddings()
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(Path(tmp) / "store", dims=int(getattr(embeddings, "dims", 256)))
        try:
            app: Any = compile_graph(
                checkpointer=InMemorySaver(),
                store=store,
                embeddings=embeddings,
                chat_model=answer_model,
                memory_model=memory_model,
            )
            config = {"configurable": {"thread_id": "bench"}}
            context = {"user_id": "ana"}
            every: list[dict[str, Any]] = []
            print("| run | calls (purpose: in/out tokens) | seconds |")
            print("|---|---|---|")
            runs: list[tuple[str, dict[str, Any]]] = [
                (f"turn {i + 1}", {"messages": [HumanMessage(text)]})
                for i, text in enumerate(TURNS)
            ]
            runs.append(
                ("end", {"messages": [HumanMessage("Thanks, bye!")], "end_conversation": True})
            )
            for label, payload in runs:
                result = await app.ainvoke(payload, config, context=context)
                calls = list(result.get("model_calls") or [])
                every.extend(calls)
                described = ", ".join(
                    f"{c['purpose']}: {c['input_tokens']}/{c['output_tokens']}" for c in calls
                )
                seconds = sum(c["seconds"] for c in calls)
                print(f"| {label} | {described} | {seconds:.1f} |")
        finally:
            store.close()
    total = summarize_calls(every)
    print(
        f"\ntotal: {total['calls']} calls, {total['input_tokens']} input + "
        f"{total['output_tokens']} output tokens, {total['seconds']:.1f} s"
        f"{' (some counts estimated)' if total['estimated'] else ''}"
    )
    for purpose, bucket in sorted(total["by_purpose"].items()):
        print(
            f"  {purpose}: {bucket['calls']} calls, {bucket['input_tokens']} in / "
            f"{bucket['output_tokens']} out, {bucket['seconds']:.1f} s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--answer-tokens", type=int, default=128)
    parser.add_argument("--memory-tokens", type=int, default=512)
    args = parser.parse_args()
    # WordLlama calls basicConfig(level=INFO) on import; configuring first keeps httpx quiet.
    logging.basicConfig(level=logging.WARNING)
    try:
        asyncio.run(main(args.model, args.answer_tokens, args.memory_tokens))
    finally:
        stop_local_server()
