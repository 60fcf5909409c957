"""How similar is the best passage for a real question, and for a message unrelated to the documents?

Run: ``python bench/relevance_floor_bench.py [--locomo ../shared/data/locomo-dev.json]``

The knowledge base is this repository's own documentation (``docs/*.md``: real technical
text about agent memory, storage and serving), ingested with the default splitter into a
fresh embedded store with the configured embeddings (``AMEM_EMBEDDINGS``). Two query sets
are searched as the graph's ``recall_semantic`` searches (hybrid, ``alpha`` 0.5, ``k`` 4):

* **relevant**: 40 questions a reader of those documents asks, each with the file that
  answers it;
* **irrelevant**: what users say in conversation that no passage answers: the turns and the
  questions of the LoCoMo conversations (personal lives), and everyday statements about
  diets, allergies, family and plans (the diet statement that printed "Sources: CoALA p.13").

For each query it records the cosine similarity (``KnowledgeHit.similarity``) of the best
passage overall and, for the relevant questions, of the best passage from the answering
file. It prints both distributions and, for candidate floors, the share of relevant
questions that keep their answering passage and the share of irrelevant messages that keep
no passage at all; ``bench/results/relevance_floor.md`` records a run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import KnowledgeHit, search_knowledge
from agentic_memory.models.embeddings import EmbeddingSettings, embedding_dims, get_embeddings
from agentic_memory.store.embedded import EmbeddedStore

REPO = Path(__file__).resolve().parents[1]

RELEVANT: list[tuple[str, str]] = [
    ("How do I resume an earlier conversation with amem chat?", "cli.md"),
    ("What does amem memories forget --all delete?", "cli.md"),
    ("What format does amem memories export write?", "cli.md"),
    ("How do I list a user's facts with their history from the command line?", "cli.md"),
    ("Which nodes does the memory graph run in parallel for each turn?", "agentic_memory.graph.md"),
    ("In what order is the prompt assembled from the memory layers?", "agentic_memory.graph.md"),
    (
        "What does the reflection node store at the end of a conversation?",
        "agentic_memory.graph.md",
    ),
    ("Which settings can be passed per run in the graph context?", "agentic_memory.graph.md"),
    ("How are procedural rules versioned and rolled back?", "agentic_memory.graph.md"),
    ("How do I ingest a folder of PDFs into a knowledge base?", "ingestion.md"),
    ("What happens when a document is ingested again after it changed?", "ingestion.md"),
    ("How are chunk sizes and overlaps chosen when splitting documents?", "ingestion.md"),
    ("What does ingestion do with an encrypted or damaged PDF?", "ingestion.md"),
    ("Which properties are stored for every knowledge chunk?", "ingestion.md"),
    ("Which namespaces does the LangGraph store expose for memory kinds?", "langgraph-store.md"),
    ("How do TTLs work for items in generic namespaces?", "langgraph-store.md"),
    ("Can I write to the knowledge namespace through client.store?", "langgraph-store.md"),
    ("How does AgenticStore search with a filter and alpha?", "langgraph-store.md"),
    ("How do I use OpenAI instead of the offline model?", "models.md"),
    ("Why is llama.cpp built without -march=native?", "models.md"),
    ("What happens when the local model server dies?", "models.md"),
    ("Which embedding models can the agent use offline?", "models.md"),
    ("How is structured output kept valid with a small model?", "models.md"),
    ("How do I run the quickstart notebook headless?", "notebook.md"),
    ("Where does the SQLite checkpointer keep its file?", "persistence.md"),
    ("When does compaction summarise the older turns of a thread?", "persistence.md"),
    ("Which tokenizer counts tokens for the context window budgets?", "persistence.md"),
    ("How do I serve the agent with langgraph dev and the SDK?", "persistence.md"),
    ("How do I delete every checkpoint of a thread?", "persistence.md"),
    ("How do I search a user's message log from Python?", "python-api.md"),
    ("How do I mark a turn as important so it is never purged?", "python-api.md"),
    ("How does the embedded store compute BM25 scores?", "storage.md"),
    ("How is relativeScoreFusion computed for hybrid search?", "storage.md"),
    ("What happens when two processes write to the embedded store at once?", "storage.md"),
    ("How does paging through a large collection with iterate work?", "storage.md"),
    ("Where does the embedded backend keep its vectors on disk?", "storage.md"),
    ("How do I move my memories from the embedded store to Weaviate?", "weaviate-migration.md"),
    ("How do I start a local Weaviate with docker compose?", "weaviate.md"),
    ("How do I scale Weaviate out to three nodes with replication?", "weaviate.md"),
    ("How are memory collections mapped onto Weaviate classes and tenants?", "weaviate.md"),
]

EVERYDAY = [
    "I'm vegetarian and allergic to peanuts.",
    "I'm vegetarian.",
    "Actually I eat fish now, so I'm pescatarian.",
    "My daughter starts school next week.",
    "Can you suggest a recipe for dinner tonight?",
    "I moved to Lyon last month.",
    "My dog Rex is twelve years old.",
    "What should I buy my wife for her birthday?",
    "I work as a nurse on night shifts.",
    "Remind me that the plumber comes on Friday.",
    "I hate coriander.",
    "We are flying to Lisbon in June.",
    "My name is Alice.",
    "I'm lactose intolerant.",
    "How long should I boil an egg?",
    "Thanks, that was helpful!",
    "My brother is getting married in Spain.",
    "I started learning the piano.",
    "What's a good book for a long train ride?",
    "I ran my first marathon yesterday.",
]


def _locomo_messages(path: Path, n: int, seed: int) -> list[str]:
    data = json.loads(path.read_text())
    turns: list[str] = []
    questions: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        for key, value in conv.items():
            if key.startswith("session_") and isinstance(value, list):
                turns.extend(t["text"] for t in value if len(t["text"].split()) >= 5)
        questions.extend(q["question"] for q in sample["qa"])
    rng = random.Random(seed)
    return rng.sample(turns, n // 2) + rng.sample(questions, n // 2)


def _best(hits: Sequence[KnowledgeHit], source: str | None = None) -> float:
    scores = [h.similarity for h in hits if source is None or Path(h.source).name == source]
    return max(scores, default=0.0)


def _quantiles(values: Sequence[float]) -> str:
    q = statistics.quantiles(values, n=20)
    return f"min {min(values):.3f} · p5 {q[0]:.3f} · median {statistics.median(values):.3f} · p95 {q[-1]:.3f} · max {max(values):.3f}"


def main() -> None:
    """Ingest the docs, search both query sets, print the distributions and the trade-off."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=REPO.parent / "shared/data/locomo-dev.json")
    parser.add_argument("--irrelevant", type=int, default=200, help="LoCoMo messages sampled")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    embeddings = get_embeddings()
    irrelevant = EVERYDAY + _locomo_messages(args.locomo, args.irrelevant, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedStore(Path(tmp) / "store", dims=embedding_dims(embeddings)) as store:
            report = ingest_paths(
                sorted((REPO / "docs").glob("*.md")), kb="docs", store=store, embeddings=embeddings
            )
            assert report.ok, report.failed
            relevant_any = []
            relevant_own = []
            rank_ok = 0
            for question, source in RELEVANT:
                hits = search_knowledge(store, embeddings, "docs", question, k=args.k)
                relevant_any.append(_best(hits))
                relevant_own.append(_best(hits, source))
                rank_ok += any(Path(h.source).name == source for h in hits)
            irrelevant_best = [
                _best(search_knowledge(store, embeddings, "docs", text, k=args.k))
                for text in irrelevant
            ]
            everyday_best = irrelevant_best[: len(EVERYDAY)]
            closest = sorted(zip(irrelevant_best, irrelevant, strict=True), reverse=True)[:5]
            diet = irrelevant_best[:3]
    model = EmbeddingSettings.from_env().model
    print(f"embeddings: {model}; {report.chunks_written} chunks from docs/*.md; k={args.k}")
    print(f"relevant questions: {len(RELEVANT)}; answering file in the top {args.k}: {rank_ok}")
    print(f"irrelevant messages: {len(irrelevant)} ({len(EVERYDAY)} everyday, rest LoCoMo)\n")
    print("| set | cosine of the best passage |")
    print("|---|---|")
    print(f"| relevant, best passage | {_quantiles(relevant_any)} |")
    print(
        f"| relevant, best passage of the answering file | {_quantiles([v for v in relevant_own if v])} |"
    )
    print(f"| irrelevant (all) | {_quantiles(irrelevant_best)} |")
    print(f"| irrelevant (everyday statements) | {_quantiles(everyday_best)} |")
    print()
    print(
        "The issue's statements: "
        + ", ".join(f"{text!r} {score:.3f}" for text, score in zip(EVERYDAY[:3], diet, strict=True))
    )
    print()
    print("Irrelevant messages closest to a passage:")
    for score, text in closest:
        print(f"- {score:.3f} {text[:100]!r}")
    print()
    print(
        "| floor | relevant keeping the answering passage | irrelevant left with no passage | everyday left with none |"
    )
    print("|---:|---:|---:|---:|")
    for step in range(0, 13):
        floor = 0.15 + step * 0.025
        kept = sum(v >= floor for v in relevant_own) / len(relevant_own)
        dropped = sum(v < floor for v in irrelevant_best) / len(irrelevant_best)
        everyday = sum(v < floor for v in everyday_best) / len(everyday_best)
        print(f"| {floor:.3f} | {kept:.0%} | {dropped:.0%} | {everyday:.0%} |")


if __name__ == "__main__":
    main()
