"""Cleaning, page bookkeeping and splitting of extracted text."""

from __future__ import annotations

import random

import pytest

from agentic_memory.ingest.text import (
    _inline_ascii,
    _inline_general,
    assemble,
    check_split_settings,
    clean_text,
    split_document,
)
from tests.unit.ingest.pdfs import filler


def test_hyphenation_at_line_end_is_joined() -> None:
    assert clean_text("an exam-\nple of hyphen-\n  ation") == "an example of hyphenation"


def test_capitalised_continuation_keeps_the_hyphen() -> None:
    assert clean_text("Jean-\nPaul went home") == "Jean-Paul went home"


def test_hyphen_inside_a_line_is_untouched() -> None:
    assert clean_text("a well-known fact") == "a well-known fact"


def test_whitespace_is_normalised_and_paragraph_breaks_kept() -> None:
    raw = "  First\tline   here  \r\nsecond line\n\n\n\n  Next   paragraph\u00a0ends.  "
    assert clean_text(raw) == "First line here\nsecond line\n\nNext paragraph ends."


def test_ligatures_and_invisible_characters_are_normalised() -> None:
    assert clean_text("e\ufb03cient \ufb01le\u00ad name\u200b") == "efficient file name"


def test_ascii_fast_path_matches_the_general_path() -> None:
    # The fast path for ASCII text must not change what gets indexed: compare both on
    # random text made of exactly the characters the cleaning rules care about.
    rng = random.Random(5)
    alphabet = ["a", "b", "Q", "7", "_", "-", " ", "  ", "\t", "\n", "\x0b", "\x0c", "\x00", "\x1f"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16)))
        assert _inline_ascii(text) == _inline_general(text), repr(text)
    assert _inline_ascii("exam-\n ple  and\tso-\nOn") == "example and so-On"


def test_assemble_records_where_each_page_starts() -> None:
    doc = assemble(["Page one text.", "", "  \n ", "Page four text."])
    assert doc.text == "Page one text.\n\nPage four text."
    assert doc.page_numbers == (1, 4)
    assert doc.page_count == 4
    assert doc.page_at(0) == 1
    assert doc.page_at(doc.text.index("Page four")) == 4


def test_chunks_are_exact_slices_with_pages() -> None:
    pages = [filler(p, 25) for p in range(1, 5)]
    doc = assemble(pages)
    chunks = split_document(doc, chunk_size=400, chunk_overlap=80)
    assert len(chunks) > 8
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert doc.text[chunk.char_start : chunk.char_end] == chunk.text
        assert len(chunk.text) <= 400
        assert doc.page_at(chunk.char_start) == chunk.page_start
        assert chunk.page_start <= chunk.page_end
    # Every page's text is covered by some chunk.
    covered = {p for c in chunks for p in range(c.page_start, c.page_end + 1)}
    assert covered == {1, 2, 3, 4}
    # Offsets advance and overlap by at most the configured amount.
    for prev, cur in zip(chunks, chunks[1:], strict=False):
        assert cur.char_start > prev.char_start
        assert prev.char_end - cur.char_start <= 80


def test_a_chunk_across_a_page_break_spans_both_pages() -> None:
    doc = assemble(["The end of page one is short.", "Page two begins right after."])
    (chunk,) = split_document(doc, chunk_size=200, chunk_overlap=0)
    assert (chunk.page_start, chunk.page_end) == (1, 2)


def test_chunks_prefer_sentence_ends() -> None:
    text = " ".join(f"Sentence number {i} says something quite ordinary here." for i in range(40))
    chunks = split_document(assemble([text]), chunk_size=300, chunk_overlap=0)
    assert all(c.text.endswith(".") for c in chunks)


def test_empty_document_has_no_chunks() -> None:
    assert split_document(assemble(["", "  "])) == []


@pytest.mark.parametrize(
    ("size", "overlap", "message"),
    [
        (10, 0, "at least 50"),
        (500, -1, "non-negative"),
        (500, 500, "smaller than the chunk size"),
        (True, 0, "at least 50"),
        ("800", 0, "at least 50"),
    ],
)
def test_bad_split_settings_are_refused(size: object, overlap: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_split_settings(size, overlap)
