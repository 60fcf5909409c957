"""How fast each offline embedder encodes conversation turns, and how close MiniLM's runtimes agree.

Encoders, in one process, on the same turns (``"<speaker>: <text>"`` of a LoCoMo file, as the
message log embeds them), two at a time as ``log_turn`` writes an exchange:

  wordllama     the default (WordLlama 256-d)
  minilm-numpy  all-MiniLM-L6-v2, the numpy reference encoder
  minilm-fp32   the same model in onnxruntime, float32
  minilm-int8   the same model in onnxruntime, int8 weights (``AMEM_EMBEDDINGS=minilm``)

Each encoder runs in rounds interleaved with the others, so a shared machine's load falls on
all of them alike. Reported: turns per wall second and per CPU second of this process (the
latter is what one otherwise idle core would do), with 1 and with 2 onnxruntime threads,
and, for the MiniLM runtimes, the cosine to the numpy vectors and the overlap of each
turn's 10 nearest turns with the numpy ones.

Run::

    python bench/minilm_runtime_bench.py ../shared/data/locomo-dev.json [--turns 400]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.models.minilm import NumpyMiniLM, minilm_model_dir
from agentic_memory.models.minilm_onnx import OnnxMiniLM
from bench.locomo_bench import _peer_text, load_locomo

Encode = Callable[[list[str]], Any]


def _turns(path: Path, limit: int) -> list[str]:
    texts: list[str] = []
    for conversation in load_locomo(path):
        for session in conversation.sessions:
            texts.extend(_peer_text(turn) for turn in session.turns)
    # Every conversation contributes, not only the first: spread the sample over the file.
    step = max(1, len(texts) // limit)
    return texts[::step][:limit]


def _time(encode: Encode, texts: Sequence[str]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), 2):
        encode(list(texts[start : start + 2]))
    return time.perf_counter() - wall, time.process_time() - cpu


def _neighbours(vectors: np.ndarray[Any, Any], k: int = 10) -> np.ndarray[Any, Any]:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1)[:, :k]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("data", type=Path, help="a LoCoMo-format JSON file")
    parser.add_argument("--turns", type=int, default=400, help="turns per encoder and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    texts = _turns(args.data, args.turns)
    folder = minilm_model_dir()
    home = Path(tempfile.mkdtemp(prefix="amem-minilm-bench-"))
    local = LocalEmbeddings()
    numpy_model = NumpyMiniLM(folder)
    encoders: dict[str, Encode] = {
        "wordllama": local.embed_documents,
        "minilm-numpy": numpy_model.encode,
    }
    built: dict[str, float] = {}
    for variant in ("fp32", "int8"):
        start = time.perf_counter()
        OnnxMiniLM(folder, variant=variant, home=home)  # builds the file once
        built[variant] = time.perf_counter() - start
        for threads in (1, 2):
            model = OnnxMiniLM(folder, variant=variant, home=home, threads=threads)
            encoders[f"minilm-{variant} ({threads} thread{'s' if threads > 1 else ''})"] = (
                model.encode
            )
    for encode in encoders.values():
        encode(texts[:4])  # warm up: first-call allocations are not throughput
    wall = dict.fromkeys(encoders, 0.0)
    cpu = dict.fromkeys(encoders, 0.0)
    for _ in range(args.rounds):
        for name, encode in encoders.items():
            w, c = _time(encode, texts)
            wall[name] += w
            cpu[name] += c
    reference = numpy_model.encode(texts)
    ref_neighbours = _neighbours(reference)
    n = len(texts) * args.rounds
    load = os.getloadavg()
    print(
        f"{len(texts)} turns x {args.rounds} rounds, two per call; load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs; "
        f"ONNX build: fp32 {built['fp32']:.1f} s, int8 {built['int8']:.1f} s (once per machine)\n"
    )
    print(
        "| encoder | turns/s (wall) | turns per CPU-second | min cosine to numpy | top-10 overlap |"
    )
    print("|---|---|---|---|---|")
    for name, encode in encoders.items():
        agreement = ""
        if name.startswith("minilm-"):
            vectors = np.asarray(encode(texts), dtype=np.float32)
            cosine = float((vectors * reference).sum(axis=1).min())
            neighbours = _neighbours(vectors)
            overlap = np.mean(
                [
                    len(set(a) & set(b)) / len(a)
                    for a, b in zip(neighbours, ref_neighbours, strict=True)
                ]
            )
            agreement = f"{cosine:.4f} | {overlap:.3f}"
        else:
            agreement = "– | –"
        print(f"| {name} | {n / wall[name]:.0f} | {n / cpu[name]:.0f} | {agreement} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
