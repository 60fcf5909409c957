"""Every kind of bad input gets its own one-line message, and the other files still go in."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from agentic_memory.ingest import ingest_paths
from agentic_memory.ingest.readers import IngestFileError, derive_title, parse, read_bytes
from agentic_memory.kinds.knowledge import list_sources, search_knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.ingest.pdfs import (
    filler,
    write_blank_pdf,
    write_decompression_bomb_pdf,
    write_image_only_pdf,
    write_no_pages_pdf,
    write_pdf,
    write_pdf_with_bad_xref,
    write_truncated_pdf,
)


def _bad_files(docs: Path) -> dict[str, str]:
    """Create one file per failure class; map its name to the expected message fragment."""
    good = write_pdf(docs / "source.pdf", ["A perfectly fine page."])
    write_pdf(docs / "locked.pdf", ["Top secret page."], password="s3cret")
    write_truncated_pdf(docs / "truncated.pdf", good)
    (docs / "garbage.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(2000) + b"\n%%EOF\n")
    (docs / "notes.pdf").write_text("This is plain text saved with a .pdf name.\n")
    (docs / "zero.pdf").write_bytes(b"")
    write_no_pages_pdf(docs / "nopages.pdf")
    write_blank_pdf(docs / "blank.pdf")
    write_image_only_pdf(docs / "scan.pdf")
    (docs / "empty.txt").write_text("  \n\n ")
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02binary")
    good.unlink()
    return {
        "locked.pdf": "encrypted; pass --password",
        "truncated.pdf": "corrupt or truncated PDF: the end-of-file marker is missing",
        "garbage.pdf": "corrupt or truncated PDF",
        "notes.pdf": "not a PDF: the file contains text, not PDF data",
        "zero.pdf": "empty file (0 bytes)",
        "nopages.pdf": "empty PDF: it has no pages",
        "blank.pdf": "empty PDF: 2 blank page(s), no text",
        "scan.pdf": "no extractable text; OCR is not supported",
        "empty.txt": "empty file: only whitespace",
        "binary.txt": "not a text file: it contains binary data",
    }


def test_each_bad_file_class_has_its_message_and_the_rest_continue(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    expected = _bad_files(docs)
    (docs / "good.md").write_text("# Valve guide\n\nTurn the brass valve clockwise to close it.\n")

    report = ingest_paths([docs], kb="mixed", store=store, embeddings=embeddings)

    by_name = {Path(f.path).name: f for f in report.files}
    assert by_name["good.md"].status == "written"
    assert by_name["good.md"].title == "Valve guide"
    for name, message in expected.items():
        result = by_name[name]
        assert result.status == "failed", name
        assert result.error is not None and message in result.error, (name, result.error)
        assert "\n" not in result.error
        assert result.chunks_written == 0
    assert not report.ok
    assert len(report.failed) == len(expected)
    assert [s.title for s in list_sources(store, "mixed")] == ["Valve guide"]
    hits = search_knowledge(store, embeddings, "mixed", "brass valve clockwise", k=1)
    assert hits and hits[0].source == str((docs / "good.md").resolve())


def test_a_decompression_bomb_fails_alone_and_later_files_are_ingested(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    # ~80 KB on disk, 80 MB once inflated: past pypdf's 75 MB limit (LimitReachedError).
    bomb = write_decompression_bomb_pdf(docs / "a_bomb.pdf")
    assert bomb.stat().st_size < 200_000
    write_pdf(docs / "b_after.pdf", ["The copper lighthouse keeper logs every ship."])
    (docs / "c_after.md").write_text("# Tides\n\nThe tide tables are printed weekly.\n")

    report = ingest_paths([docs], kb="bombs", store=store, embeddings=embeddings)

    by_name = {Path(f.path).name: f for f in report.files}
    assert list(by_name) == ["a_bomb.pdf", "b_after.pdf", "c_after.md"]
    failed = by_name["a_bomb.pdf"]
    assert failed.status == "failed" and failed.chunks_written == 0
    assert failed.error is not None and "\n" not in failed.error
    assert failed.error.startswith("refused: a compressed stream inflates past")
    assert by_name["b_after.pdf"].status == "written"
    assert by_name["c_after.md"].status == "written"
    assert {s.title for s in list_sources(store, "bombs")} == {
        "The copper lighthouse keeper logs every ship.",
        "Tides",
    }


def test_encrypted_pdf_is_read_with_the_password(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    locked = write_pdf(docs / "locked.pdf", ["The vault code is amber falcon."], password="pw")

    wrong = ingest_paths([locked], kb="vault", store=store, embeddings=embeddings, password="no")
    assert wrong.files[0].error == "encrypted; the password is wrong"

    right = ingest_paths([locked], kb="vault", store=store, embeddings=embeddings, password="pw")
    assert right.ok and right.chunks_written == 1
    assert "amber falcon" in search_knowledge(store, embeddings, "vault", "vault code")[0].text


def test_missing_paths_and_empty_patterns_are_reported(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "keep.txt").write_text("Something to keep.")
    report = ingest_paths(
        [docs / "nope.pdf", str(docs / "*.docx"), docs / "keep.txt"],
        kb="misc",
        store=store,
        embeddings=embeddings,
    )
    errors = {Path(f.path).name: f.error for f in report.failed}
    assert errors == {
        "nope.pdf": "no such file or directory",
        "*.docx": "no files match this pattern",
    }
    assert report.chunks_written == 1


def test_unsupported_type_named_explicitly_is_an_error_but_skipped_inside_a_folder(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "sheet.csv").write_text("a,b\n1,2\n")
    (docs / "readme.txt").write_text("Read me first.")
    explicit = ingest_paths([docs / "sheet.csv"], kb="misc", store=store, embeddings=embeddings)
    assert explicit.files[0].error is not None
    assert explicit.files[0].error.startswith("unsupported file type '.csv'")

    folder = ingest_paths([docs], kb="misc", store=store, embeddings=embeddings)
    assert folder.ok
    assert folder.skipped == [str(docs / "sheet.csv")]


def test_directory_without_supported_files_is_an_error(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "image.png").write_bytes(b"\x89PNG")
    report = ingest_paths([docs], kb="misc", store=store, embeddings=embeddings)
    assert report.failed[0].error == "directory has no .pdf, .txt, .md, .markdown files to ingest"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file(docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    secret = docs / "secret.txt"
    secret.write_text("hidden")
    secret.chmod(0)
    try:
        report = ingest_paths([secret], kb="misc", store=store, embeddings=embeddings)
    finally:
        secret.chmod(0o600)
    assert report.failed[0].error == "unreadable: permission denied"


def test_unreadable_file_as_root_via_a_refusing_filesystem(
    docs: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Root can read a chmod-000 file, so the refusal is simulated where the bytes are read.
    secret = docs / "secret.pdf"
    write_pdf(secret, ["Classified."])
    (docs / "open.txt").write_text("Open text.")
    real_open = os.open

    def refuse(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: object) -> int:
        if Path(path).name == "secret.pdf":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)
    report = ingest_paths([docs], kb="misc", store=store, embeddings=embeddings)
    errors = {Path(f.path).name: f.error for f in report.failed}
    assert errors == {"secret.pdf": "unreadable: permission denied"}
    assert report.chunks_written == 1


def test_a_directory_named_like_a_file_is_walked_and_cannot_be_read_as_one(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "folder.pdf").mkdir()
    (docs / "folder.pdf" / "inner.txt").write_text("inner text")
    report = ingest_paths([docs / "folder.pdf"], kb="misc", store=store, embeddings=embeddings)
    assert report.ok and report.chunks_written == 1
    with pytest.raises(IngestFileError, match="unreadable: is a directory"):
        read_bytes(docs / "folder.pdf")


@pytest.mark.timeout(60)
def test_special_files_named_like_documents_are_refused_without_being_opened(
    docs: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Opening a FIFO for reading blocks until a writer comes: the ingestion used to hang.
    os.mkfifo(docs / "pipe.txt")
    (docs / "zero_device.md").symlink_to("/dev/zero")
    (docs / "real.txt").write_text("The regular file is still ingested.")
    opened: list[str] = []
    real_open = os.open

    def spy(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: object) -> int:
        opened.append(Path(path).name)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    report = ingest_paths([docs], kb="misc", store=store, embeddings=embeddings)

    errors = {Path(f.path).name: f.error for f in report.failed}
    assert errors == {
        "pipe.txt": "not a regular file (a named pipe (FIFO)); only regular files are read",
        "zero_device.md": "not a regular file (a character device); only regular files are read",
    }
    assert "pipe.txt" not in opened and "zero_device.md" not in opened
    assert report.chunks_written == 1
    # Named explicitly, the FIFO gets the same error.
    alone = ingest_paths([docs / "pipe.txt"], kb="misc", store=store, embeddings=embeddings)
    assert alone.failed[0].error == errors["pipe.txt"]


def test_pypdf_warnings_are_counted_not_printed(
    docs: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = write_pdf(docs / "good.pdf", ["Repaired documents still have text."])
    damaged = write_pdf_with_bad_xref(docs / "damaged.pdf", good)
    good.unlink()
    caplog.set_level(logging.DEBUG)

    report = ingest_paths([damaged], kb="misc", store=store, embeddings=embeddings)

    assert report.ok
    result = report.files[0]
    assert result.warnings >= 1
    assert result.warning_sample is not None and "startxref" in result.warning_sample
    captured = capfd.readouterr()
    assert "startxref" not in captured.err + captured.out
    assert not [r for r in caplog.records if r.name.startswith("pypdf")]


def test_text_and_markdown_titles_and_form_feed_pages(tmp_path: Path) -> None:
    md = parse(tmp_path / "guide.md", b"Intro line\n\n## Setup guide\n\nStep one.")
    assert md.kind == "markdown" and md.pages == ["Intro line\n\n## Setup guide\n\nStep one."]
    txt = parse(tmp_path / "log.txt", "first page\fsecond page\f\u00e9t\u00e9".encode())
    assert txt.pages == ["first page", "second page", "\u00e9t\u00e9"]
    assert txt.encoding == "utf-8"
    legacy = parse(tmp_path / "old.txt", "caf\u00e9 cr\u00e8me".encode("cp1252"))
    assert legacy.pages == ["caf\u00e9 cr\u00e8me"] and legacy.encoding == "cp1252"
    with pytest.raises(IngestFileError, match="it is a PDF"):
        parse(tmp_path / "x.txt", b"%PDF-1.7 whatever")


def test_glob_matching_only_other_types_is_an_error(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    (docs / "a.docx").write_bytes(b"PK")
    report = ingest_paths([str(docs / "*.docx")], kb="misc", store=store, embeddings=embeddings)
    assert report.failed[0].error == "no .pdf, .txt, .md, .markdown files match this pattern"
    assert report.skipped == [str(docs / "a.docx")]


HEADER = "Published in Transactions on Machine Learning Research (02/2024)"
TITLE = "Cognitive Architectures for Language Agents"


def _paper(first_page_top: list[str], pages: int = 3) -> list[str]:
    """A paper's pages: a running header on each, a page number at the foot of each."""
    out = []
    for n in range(1, pages + 1):
        top = first_page_top if n == 1 else [HEADER]
        out.append("\n\n".join([*top, filler(n, 6), str(n)]))
    return out


@pytest.mark.parametrize(
    ("top", "metadata", "expected"),
    [
        ([HEADER, TITLE], None, TITLE),  # the running header is skipped
        (["arXiv:2309.02427v3 [cs.AI] 15 Mar 2024", HEADER, TITLE], None, TITLE),
        ([HEADER, TITLE], "Microsoft Word - draft3.docx", TITLE),  # a placeholder is no title
        ([HEADER, TITLE], "The Metadata Title", "The Metadata Title"),  # metadata wins
    ],
    ids=["running-header", "arxiv-stamp", "placeholder-metadata", "metadata"],
)
def test_a_pdf_title_is_never_its_running_header(
    tmp_path: Path,
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    top: list[str],
    metadata: str | None,
    expected: str,
) -> None:
    pdf = write_pdf(tmp_path / "paper.pdf", _paper(top), title=metadata)
    report = ingest_paths([pdf], kb="papers", store=store, embeddings=embeddings)
    assert report.ok, report.failed
    assert [s.title for s in list_sources(store, "papers")] == [expected]
    hits = search_knowledge(store, embeddings, "papers", filler(2, 6), k=1)
    assert hits and hits[0].title == expected


def test_a_one_page_pdf_without_metadata_is_titled_by_its_first_line(tmp_path: Path) -> None:
    pdf = write_pdf(tmp_path / "memo.pdf", ["Quarterly pump memo\n\n" + filler(7, 3)])
    raw = parse(pdf, pdf.read_bytes())
    assert derive_title(raw, "", pdf) == "Quarterly pump memo"
