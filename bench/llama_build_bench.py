"""Compare llama.cpp builds on this machine: generation and prompt speed, rounds interleaved.

Each build is a folder holding an installed ``llama_cpp`` package (``pip install --target
DIR --no-deps <wheel>``); the installed one is used for a label given as ``installed``.
Every round starts each build's server in turn (with ``PYTHONPATH`` pointing at its folder)
and times the same requests, so both builds see the same machine load; the report gives
medians and the ratio per round. Token counts are the server's own.

Run:
    python bench/llama_build_bench.py --build portable=installed --build native=/tmp/llama-native
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from agentic_memory.models.local_server import LocalModelServer, local_model_path

PARAGRAPH = (
    "The harbour was quiet in the early morning, and the fishermen checked their nets "
    "while gulls circled above the boats and the tide slowly turned. "
)


def _post(base_url: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.loads(response.read())
    return reply, time.perf_counter() - started


def measure(folder: str | None, model: Path, run: int) -> dict[str, float]:
    """Start one build's server and time a generation and a long prompt."""
    saved = os.environ.get("PYTHONPATH")
    if folder:
        os.environ["PYTHONPATH"] = folder
    try:
        with LocalModelServer(model, n_ctx=4096) as server:
            base = server.base_url
            _post(base, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            generated, seconds = _post(
                base,
                {
                    "messages": [
                        {"role": "user", "content": f"Story {run}: tell me about the sea."}
                    ],
                    "max_tokens": 128,
                    "temperature": 0,
                },
            )
            gen_rate = generated["usage"]["completion_tokens"] / seconds
            prompt = f"Text {run}:\n" + PARAGRAPH * 45 + "\nSummarise it in one sentence."
            processed, seconds = _post(
                base,
                {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1},
            )
            prompt_rate = processed["usage"]["prompt_tokens"] / seconds
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return {"generation": gen_rate, "prompt": prompt_rate}


def main() -> None:
    """Measure every build for a number of interleaved rounds and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", required=True, help="LABEL=DIR|installed")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    builds = dict(item.split("=", 1) for item in args.build)
    model = local_model_path()
    results: dict[str, list[dict[str, float]]] = {label: [] for label in builds}
    for run in range(args.rounds):
        for label, folder in builds.items():
            results[label].append(measure(None if folder == "installed" else folder, model, run))
            print(f"round {run + 1} {label}: {results[label][-1]}", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}; {args.rounds} rounds, interleaved\n")
    print("| build | generation tokens/s (median) | prompt tokens/s (median) |")
    print("|---|---|---|")
    for label, rows in results.items():
        gen = statistics.median(r["generation"] for r in rows)
        prompt = statistics.median(r["prompt"] for r in rows)
        print(f"| {label} | {gen:.1f} | {prompt:.0f} |")
    labels = list(builds)
    if len(labels) == 2:
        a, b = (results[label] for label in labels)
        for kind in ("generation", "prompt"):
            ratios = [x[kind] / y[kind] for x, y in zip(a, b, strict=True)]
            print(
                f"{kind}: {labels[0]}/{labels[1]} per round "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + f" (median {statistics.median(ratios):.2f})"
            )


if __name__ == "__main__":
    main()
