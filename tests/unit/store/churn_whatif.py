"""What the server's statistics on a churned shard change, measured on the reference model.

Generated churn corpora (``differential.churn_corpus`` with rewrites that keep and that change
the vector) are written to a model shard in two phases (writes; deletes, rewrites and new
objects), and every query is run in three states a long-lived shard goes through:

- ``S1 + memtable``: phase 1 flushed, phase 2 still in the memtable;
- ``S1 + S2``: both phases flushed, not yet compacted;
- ``S12``: the two segments compacted into one.

In each state the query runs with the server's statistics (``differential.SERVER``) and with
each mechanism turned off in turn, and with exact statistics (``differential.EXACT``, what the
embedded store computes). The report counts the queries whose hit list (ids and order)
differs, whose top 10 differs, the mean top-10 overlap, and the largest relative change of a
common hit's keyword score. Turning D2 off gives exact averages, so it also removes D3 (the
truncation applies to the kept versions' sum).

Run: ``python -m tests.unit.store.churn_whatif [--corpora 60] [--queries 25] [--out FILE]``.
``docs/storage.md`` ("Remaining differences") quotes the result of the default run.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.unit.store import differential as diff
from tests.unit.store import weaviate_reference as ref

MECHANISMS = {
    "D2 versions kept in the average": "keep_versions",
    "D3 truncated average": "truncate_average",
    "D4 a top k per segment": "heap_per_segment",
    "D7 superseded postings in n": "count_superseded",
    "the memtable WAND bound (1.32.x)": "memtable_pruning",
}


@dataclass
class Tally:
    """Differences between two ways of running the same queries."""

    queries: int = 0
    lists: int = 0
    top10: int = 0
    overlap: float = 0.0
    keyword_change: float = 0.0
    flagged: int = 0

    def add(self, got: list[diff.Row], want: list[diff.Row], flagged: bool = False) -> None:
        self.queries += 1
        self.lists += [r[0] for r in got] != [r[0] for r in want]
        self.top10 += {r[0] for r in got[:10]} != {r[0] for r in want[:10]}
        self.overlap += diff.top10_overlap(got, want)
        self.flagged += flagged
        want_kw = {r[0]: r[2] for r in want}
        for row in got:
            a, b = row[2], want_kw.get(row[0])
            if a is not None and b is not None and b != 0:
                self.keyword_change = max(self.keyword_change, abs(a - b) / abs(b))

    def row(self, label: str) -> str:
        mean = self.overlap / self.queries if self.queries else 1.0
        return (
            f"| {label} | {self.lists} ({100 * self.lists / max(1, self.queries):.1f} %) "
            f"| {self.top10} ({100 * self.top10 / max(1, self.queries):.1f} %) | {mean:.3f} "
            f"| {100 * self.keyword_change:.1f} % |"
        )


@dataclass
class State:
    """The tallies of one shard state."""

    name: str
    combined: Tally = field(default_factory=Tally)
    marginal: dict[str, Tally] = field(default_factory=dict)
    flags: int = 0


def run(corpora: int, queries: int, seed: int = 1) -> tuple[list[State], dict[str, int]]:
    """Measure ``corpora`` churn corpora of ``queries`` queries each."""
    specs = diff.specs("WhatIf")
    states = [State("S1 + memtable"), State("S1 + S2"), State("S12 (compacted)")]
    counts = {"objects": 0, "deletes": 0, "rewrites": 0, "moved": 0, "added": 0}
    for n in range(corpora):
        case = diff.churn_corpus(seed * 1_000_003 + n, queries, moved=True)
        spec = specs[len(case.searchable)]
        shard = ref.Shard(list(case.searchable))
        diff.churn_first(None, spec, "u", case, shard)
        shard.flush()
        diff.churn_second(None, spec, "u", case, shard)
        counts["objects"] += sum(len(b) for b in case.first)
        counts["deletes"] += len(case.deletes)
        counts["rewrites"] += len(case.rewrites)
        counts["moved"] += len(case.moved)
        counts["added"] += len(case.added)
        for i, state in enumerate(states):
            if i == 1:
                shard.flush()
            if i == 2:
                shard.compact()
            for query in case.queries:
                report: list[str] = []
                server = diff.model_rows_with(shard, spec, query, diff.SERVER, report)
                exact = diff.model_rows_with(shard, spec, query, diff.EXACT)
                state.flags += bool(report)
                state.combined.add(server, exact, bool(report))
                for label, switch in MECHANISMS.items():
                    without = diff.model_rows_with(
                        shard, spec, query, {**diff.SERVER, switch: False}
                    )
                    state.marginal.setdefault(label, Tally()).add(server, without)
    return states, counts


def report(states: list[State], counts: dict[str, int], corpora: int, queries: int) -> str:
    """Format the measurements as markdown."""
    lines = [
        f"{corpora} churn corpora, {queries} queries each; {counts['objects']} objects written, "
        f"then {counts['deletes']} deleted, {counts['rewrites']} rewritten with the same vector, "
        f"{counts['moved']} with a new vector, {counts['added']} added.",
        "",
        "| state, comparison | hit lists differ | top 10 differs | mean top-10 overlap "
        "| largest keyword score change |",
        "|---|---:|---:|---:|---:|",
    ]
    for state in states:
        lines.append(state.combined.row(f"**{state.name}**: server vs exact statistics"))
        for label, tally in state.marginal.items():
            lines.append(tally.row(f"{state.name}: without {label}"))
    lines.append("")
    lines.append(
        "D6 (a block bound below a posting's impact, or a float32 bound sum below a kept "
        "score) flagged in: "
        + ", ".join(f"{s.name} {s.flags} of {s.combined.queries}" for s in states)
        + "."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=int, default=60)
    parser.add_argument("--queries", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    states, counts = run(args.corpora, args.queries, args.seed)
    text = report(states, counts, args.corpora, args.queries)
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
