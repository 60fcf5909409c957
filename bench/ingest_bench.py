"""Ingestion throughput on a generated ~30-page PDF, next to pypdf extraction alone.

Run: ``python bench/ingest_bench.py [--pages 30] [--repeat 5] [--out bench/results/ingest.md]``

Stages timed (best and median of ``--repeat`` interleaved runs, each ingest on a fresh store):

- ``pypdf extraction``: ``PdfReader`` + ``extract_text`` on every page, nothing else.
- ``read + clean + split``: the ingestion front end (hash, pypdf with warnings captured,
  cleaning, page offsets, splitting): embedding and storage excluded.
- ``ingest, embedding excluded``: ``ingest_paths`` into the embedded store with a
  constant-vector embedder, so it measures everything except the model.
- ``ingest, WordLlama embeddings``: the full default pipeline.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fpdf import FPDF
from langchain_core.embeddings import Embeddings
from pypdf import PdfReader

from agentic_memory.ingest import ingest_paths
from agentic_memory.ingest.readers import parse
from agentic_memory.ingest.text import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    assemble,
    split_document,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

_VOCABULARY = (
    "analysis method sample result model energy system water pressure signal budget report "
    "survey region station measure network policy design review growth market value process "
    "control quality research field study period rate level average table figure section "
    "the of and to in a is that for on with as by from at this are be was were it"
).split()


class ConstantEmbeddings(Embeddings):
    """Returns the same unit vector for every text: takes the model out of the measurement."""

    def __init__(self, dims: int = 256) -> None:
        self.dims = dims
        self._vector = [1.0] + [0.0] * (dims - 1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Return one constant vector per text."""
        return [list(self._vector) for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        """Return the constant vector."""
        return list(self._vector)


def make_pdf(path: Path, pages: int, seed: int = 7) -> Path:
    """Write a report-like PDF: a few paragraphs of prose per page, some words hyphenated."""
    rng = random.Random(seed)
    pdf = FPDF()
    pdf.set_title("Generated benchmark report")
    pdf.set_font("Helvetica", size=10)
    for page in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 13)
        pdf.cell(0, 8, f"Section {page}: findings of the survey")
        pdf.ln(10)
        pdf.set_font("Helvetica", size=10)
        for _ in range(6):
            sentences = []
            for _ in range(rng.randint(3, 5)):
                words = [rng.choice(_VOCABULARY) for _ in range(rng.randint(10, 18))]
                sentences.append(" ".join(words).capitalize() + ".")
            pdf.multi_cell(0, 5, " ".join(sentences))
            pdf.ln(3)
    path.write_bytes(bytes(pdf.output()))
    return path


def main() -> None:
    """Run the benchmark and write the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pdf = make_pdf(root / "bench.pdf", args.pages)
        data = pdf.read_bytes()

        def extract_only() -> int:
            reader = PdfReader(io.BytesIO(data))
            return sum(len(p.extract_text() or "") for p in reader.pages)

        def front_end() -> int:
            hashlib.sha256(data).hexdigest()
            raw = parse(pdf, data)
            document = assemble(raw.pages)
            return len(split_document(document))

        warm_pdf = make_pdf(root / "warm.pdf", 1, seed=99)
        opened: list[EmbeddedStore] = []

        def full(embeddings: Embeddings, label: str) -> Callable[[], int]:
            # Opening a store and creating its collections are one-offs per session, not
            # per-file costs: each run gets a fresh store that already holds the knowledge
            # base (one small other file), so every run really writes all its chunks.
            stores: list[EmbeddedStore] = []
            for i in range(args.repeat):
                store = EmbeddedStore(root / f"{label}{i}", dims=256)
                ingest_paths([warm_pdf], kb="bench", store=store, embeddings=embeddings)
                stores.append(store)
            opened.extend(stores)
            pending = iter(stores)

            def run() -> int:
                report = ingest_paths([pdf], kb="bench", store=next(pending), embeddings=embeddings)
                assert report.ok, report.failed
                return report.chunks_written

            return run

        local = LocalEmbeddings()
        local.embed_documents(["warm up"])  # model load is a one-off, not per-file cost
        chunk_count = front_end()
        stages: list[tuple[str, Callable[[], object], int]] = [
            ("pypdf extraction alone", extract_only, 0),
            ("read + clean + split (no embedding, no store)", front_end, chunk_count),
            (
                "ingest_paths, embedding excluded (embedded store)",
                full(ConstantEmbeddings(), "constant"),
                chunk_count,
            ),
            (
                "ingest_paths, WordLlama embeddings (embedded store)",
                full(local, "local"),
                chunk_count,
            ),
        ]
        extract_only()
        # Stages take turns, so that load from other processes on a shared machine hits
        # them alike; the best run of each is reported next to the median.
        times: dict[str, list[float]] = {name: [] for name, _, _ in stages}
        for _ in range(args.repeat):
            for name, fn, _ in stages:
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
        rows = [
            (name, min(times[name]), statistics.median(times[name]), n) for name, _, n in stages
        ]
        for store in opened:
            store.close()

    base, base_median = rows[0][1], rows[0][2]
    lines = [
        f"Generated PDF: {args.pages} pages, {chunk_count} chunks at chunk size "
        f"{DEFAULT_CHUNK_SIZE} / overlap {DEFAULT_CHUNK_OVERLAP}; best and median of "
        f"{args.repeat} interleaved runs; {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}.",
        "",
        "| stage | best s | median s | pages/s | chunks/s | × extraction (best) "
        "| × extraction (median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, best, median, chunks in rows:
        chunks_rate = f"{chunks / best:,.0f}" if chunks else "–"
        lines.append(
            f"| {name} | {best:.3f} | {median:.3f} | {args.pages / best:,.1f} | "
            f"{chunks_rate} | {base / best:.2f} | {base_median / median:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
