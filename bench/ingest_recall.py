"""Choose the default chunk size and overlap: recall@k of hybrid search over a grid.

Run: ``python bench/ingest_recall.py [--facts 80] [--seed 11] [--out FILE]``

A generated ~40-page PDF hides facts among distractors. Each fact is two sentences: the
first names a place, the second gives the answer and refers to the place only as "its"
("Vornal is a river town in the north. Its lighthouse was built in 1843."), so a chunk
answers the question only if it keeps both sentences together. Distractor sentences reuse
the same attributes for other places. For every fact the question ("When was the
lighthouse of Vornal built?") is searched with ``search_knowledge`` (hybrid, alpha 0.5);
a hit is a chunk among the top k that contains the place name and the answer.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from fpdf import FPDF

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import search_knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

SIZES = (300, 500, 800, 1200)
OVERLAPS = (0, 100, 200)
KS = (1, 3, 5)

_SYLLABLES = "vor nal tes ka mi dra lo quen bar sel fi ron tam gu weth ost pel ari bek um".split()
_KINDS = ["river town", "mountain village", "harbour city", "farming parish", "mining town"]
_REGIONS = ["north", "south", "east", "west", "central highlands"]
_ATTRIBUTES = [
    ("Its lighthouse was built in {v}.", "When was the lighthouse of {e} built?", "year"),
    ("Its mayor is called {v}.", "Who is the mayor of {e}?", "person"),
    ("Its main export is {v}.", "What is the main export of {e}?", "goods"),
    ("Its oldest bridge spans {v} metres.", "How long is the oldest bridge in {e}?", "length"),
    ("Its annual festival honours {v}.", "Which festival does {e} hold every year?", "saint"),
]
_GOODS = "saffron copper wool tin amber salt barley indigo cedar marble slate honey".split()
_FIRST = "Alda Brin Cato Dorel Esme Fenn Galen Hesper Ivo Jora Kestrel Lio Mira Noor".split()
_LAST = "Ashdown Brackett Corvane Dunmore Ellery Farrow Greaves Hollis Ingram Jessop".split()
_FILLER = (
    "The council met again to discuss the budget for roads and schools. Travellers note "
    "that the weather changes quickly in spring. Markets open early on market days and "
    "close at noon. Records from the archive describe several floods over the centuries. "
    "Local guides recommend walking the old trail at dawn. The regional rail line stops "
    "twice a day in most towns."
).split(". ")


def _name(rng: random.Random, used: set[str]) -> str:
    while True:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if name not in used:
            used.add(name)
            return name


def _value(kind: str, rng: random.Random, used: set[str]) -> str:
    # Every kind has more than 100 distinct values; the bound turns a too-large --facts
    # into an error instead of an endless loop.
    for _ in range(10_000):
        if kind == "year":
            value = str(rng.randint(1600, 1990))
        elif kind == "person":
            value = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        elif kind == "goods":
            value = f"{rng.choice(_GOODS)} and {rng.choice(_GOODS)}"
        elif kind == "length":
            value = str(rng.randint(40, 900))
        else:
            value = f"Saint {rng.choice(_FIRST)} of {rng.choice(_LAST)}"
        if value not in used:
            used.add(value)
            return value
    raise ValueError(f"ran out of distinct {kind} values: use fewer --facts")


def make_corpus(path: Path, facts: int, seed: int = 11) -> list[tuple[str, str, str]]:
    """Write the PDF; return (question, place, answer) for every hidden fact."""
    rng = random.Random(seed)
    names: set[str] = set()
    values: set[str] = set()
    paragraphs: list[str] = []
    truth: list[tuple[str, str, str]] = []
    for _ in range(facts):
        place = _name(rng, names)
        sentence, question, kind = rng.choice(_ATTRIBUTES)
        answer = _value(kind, rng, values)
        intro = f"{place} is a {rng.choice(_KINDS)} in the {rng.choice(_REGIONS)}."
        # One to three unrelated sentences separate the place from its answer, so a chunk
        # boundary can fall between them.
        gap = ". ".join(rng.sample(_FILLER, rng.randint(1, 3)))
        lead, tail = ". ".join(rng.sample(_FILLER, 2)), ". ".join(rng.sample(_FILLER, 2))
        paragraphs.append(f"{lead}. {intro} {gap}. {sentence.format(v=answer)} {tail}.")
        # Distractors: another attribute of the same place, and this attribute elsewhere.
        other_sentence, _, other_kind = rng.choice([a for a in _ATTRIBUTES if a[0] != sentence])
        same_place = other_sentence.format(v=_value(other_kind, rng, values))
        paragraphs.append(f"Visitors to {place} also ask about it. {same_place} {tail}.")
        other = _name(rng, names)
        elsewhere = sentence.format(v=_value(kind, rng, values))
        paragraphs.append(f"{other} is another {rng.choice(_KINDS)}. {elsewhere} {lead}.")
        truth.append((question.format(e=place), place, answer))
    rng.shuffle(paragraphs)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    per_page = max(1, len(paragraphs) // 40)
    for start in range(0, len(paragraphs), per_page):
        pdf.add_page()
        for paragraph in paragraphs[start : start + per_page]:
            pdf.multi_cell(0, 5, paragraph)
            pdf.ln(3)
    path.write_bytes(bytes(pdf.output()))
    return truth


def _has(text: str, place: str, answer: str) -> bool:
    # PDF line wraps turn spaces into newlines: compare on normalised whitespace.
    flat = " ".join(text.split())
    return place in flat and answer in flat


def main() -> None:
    """Run the grid and print (and optionally write) the recall table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=80)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    embeddings = LocalEmbeddings()
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pdf = root / "places.pdf"
        truth = make_corpus(pdf, args.facts, seed=args.seed)
        for size in SIZES:
            for overlap in OVERLAPS:
                if overlap >= size:
                    continue
                with EmbeddedStore(root / f"s{size}_{overlap}", dims=embeddings.dims) as store:
                    started = time.perf_counter()
                    report = ingest_paths(
                        [pdf],
                        kb="grid",
                        store=store,
                        embeddings=embeddings,
                        chunk_size=size,
                        chunk_overlap=overlap,
                    )
                    seconds = time.perf_counter() - started
                    assert report.ok, report.failed
                    found = {k: 0 for k in KS}
                    for question, place, answer in truth:
                        hits = search_knowledge(store, embeddings, "grid", question, k=max(KS))
                        for k in KS:
                            if any(_has(h.text, place, answer) for h in hits[:k]):
                                found[k] += 1
                recalls = " | ".join(f"{found[k] / len(truth):.2f}" for k in KS)
                rows.append(
                    f"| {size} | {overlap} | {report.chunks_written} | {recalls} | {seconds:.2f} |"
                )
                print(rows[-1], flush=True)
    header = [
        f"{args.facts} split facts among {2 * args.facts} distractor paragraphs in a "
        f"{report.pages}-page PDF (seed {args.seed}); hybrid search, alpha 0.5, WordLlama 256-d.",
        "",
        "| chunk size | overlap | chunks | "
        + " | ".join(f"recall@{k}" for k in KS)
        + " | ingest s |",
        "|---:|---:|---:|" + "---:|" * len(KS) + "---:|",
    ]
    table = "\n".join(header + rows)
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
