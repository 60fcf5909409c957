"""``amem ingest``: exit codes, the summary, --json and --list, through typer's runner."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

from typer.testing import CliRunner

from agentic_memory.cli.main import app
from agentic_memory.kinds.knowledge import list_knowledge_bases, list_sources, search_knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.ingest.conftest import KNOWN
from tests.unit.ingest.pdfs import write_pdf

runner = CliRunner()


def test_ingest_prints_a_summary_and_exits_zero(
    report_pdf: Path, store_path: Path, embeddings: LocalEmbeddings
) -> None:
    result = runner.invoke(app, ["ingest", str(report_pdf), "--collection", "manuals"])

    assert result.exit_code == 0, result.output
    assert "Summary" in result.output and "report.pdf" in result.output
    assert "written" in result.output
    with EmbeddedStore(store_path, dims=embeddings.dims) as store:
        (source,) = list_sources(store, "manuals")
        assert source.pages == 4
        hit = search_knowledge(store, embeddings, "manuals", KNOWN[4], k=1)[0]
        assert hit.page_start <= 4 <= hit.page_end


def test_a_failed_file_gives_exit_code_one_and_its_message(docs: Path, report_pdf: Path) -> None:
    write_pdf(docs / "locked.pdf", ["secret"], password="pw")
    (docs / "empty.pdf").write_bytes(b"")

    result = runner.invoke(app, ["ingest", str(docs), "-c", "manuals"])

    assert result.exit_code == 1
    assert "locked.pdf: encrypted; pass --password" in result.output
    assert "empty.pdf: empty file (0 bytes)" in result.output
    assert "report.pdf" in result.output


def test_json_report_and_rerun_is_unchanged(report_pdf: Path) -> None:
    first = runner.invoke(app, ["ingest", str(report_pdf), "--json", "--chunk-size", "500"])
    second = runner.invoke(app, ["ingest", str(report_pdf), "--json", "--chunk-size", "500"])

    assert first.exit_code == second.exit_code == 0
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["kb"] == "default" and one["chunk_size"] == 500
    assert one["totals"]["chunks_written"] > 0
    assert two["totals"]["chunks_written"] == 0
    assert two["totals"]["chunks_unchanged"] == one["totals"]["chunks_written"]
    assert two["files"][0]["status"] == "unchanged"


def test_list_knowledge_bases_and_sources(report_pdf: Path) -> None:
    runner.invoke(app, ["ingest", str(report_pdf), "-c", "manuals"])

    bases = runner.invoke(app, ["ingest", "--list", "--json"])
    sources = runner.invoke(app, ["ingest", "--list", "-c", "manuals", "--json"])

    assert bases.exit_code == sources.exit_code == 0
    (base,) = json.loads(bases.stdout)
    assert base["kb"] == "manuals" and base["sources"] == 1 and base["chunks"] > 0
    (source,) = json.loads(sources.stdout)
    assert source["source"] == str(report_pdf.resolve())
    assert source["title"] == "Annual Field Report"


def test_bad_arguments_exit_two_and_write_nothing(report_pdf: Path, store_path: Path) -> None:
    for args in (
        ["ingest", str(report_pdf), "-c", "bad name"],
        ["ingest", str(report_pdf), "--chunk-size", "100", "--chunk-overlap", "100"],
        ["ingest"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Error" in result.output
    assert not store_path.exists()


async def test_ingest_graph_runs_and_returns_the_report(
    report_pdf: Path, store_path: Path, embeddings: LocalEmbeddings
) -> None:
    from agentic_memory.ingest.graph import graph

    upload = {
        "name": "report.pdf",
        "data_base64": base64.b64encode(await asyncio.to_thread(report_pdf.read_bytes)).decode(),
    }
    out = await graph.ainvoke(
        {"documents": [upload], "kb": "studio", "chunk_size": 600},
        context={"user_id": "alice"},
    )

    assert set(out) == {"report"}
    report = out["report"]
    assert report["ok"] and report["kb"] == "studio" and report["chunk_size"] == 600
    assert report["totals"]["pages"] == 4 and report["totals"]["chunks_written"] > 0
    assert report["files"][0]["source"] == "upload://report.pdf"

    def stored() -> None:
        assert store_path.exists()  # written to the store the environment configures
        with EmbeddedStore(store_path, dims=embeddings.dims) as store:
            # The caller's own knowledge base: nobody else's, and not a shared one.
            assert list_knowledge_bases(store, "alice") == ["studio"]
            assert list_knowledge_bases(store) == [] and list_knowledge_bases(store, "bob") == []
            hit = search_knowledge(store, embeddings, "studio", KNOWN[4], k=1, owner="alice")[0]
            assert hit.citation.startswith("[report.pdf p.")

    await asyncio.to_thread(stored)


def test_a_file_name_that_is_not_utf8_fails_alone_with_a_clear_message(docs: Path) -> None:
    # Linux file names are bytes; Python hands a non-UTF-8 one over with lone surrogates.
    with open(bytes(docs) + b"/caf\xe9.txt", "wb") as handle:
        handle.write(b"A note saved by a Latin-1 system.")
    (docs / "plain.txt").write_text("A plain note with an ordinary name.")

    result = runner.invoke(app, ["ingest", str(docs), "--json"])

    assert result.exit_code == 1
    report = json.loads(result.stdout)
    failed = [f for f in report["files"] if f["status"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["error"].startswith("the path is not valid UTF-8 (")
    assert failed[0]["error"].endswith("); rename the file to ingest it")
    assert report["totals"]["written"] == 1
    assert "caf\\xe9.txt" in failed[0]["path"]
    table = runner.invoke(app, ["ingest", str(docs), "-c", "other"])
    assert table.exit_code == 1, table.output
    assert "caf\\xe9.txt: the path is not valid UTF-8" in table.output
