"""Clean extracted page text, join pages into one document and split it into located chunks.

Offsets are character positions in the cleaned document text, so every chunk can be mapped
back to the pages it came from: a chunk that runs across a page break gets
``page_start < page_end``.

Each chunk also gets the section heading it falls under (:func:`find_headings`): the last
heading line that starts before the chunk's 100th character, or its first quarter when it
is shorter (:data:`HEADING_LOOKAHEAD`: a chunk that begins at the top of a page often opens
with the running header, then the heading). A heading is a line of its own that
is either a numbered section title (``2.1 Node Shapes``, ``4 Command Line Options``, an
appendix ``A Principal Node Attributes``): a section number, then a title of at most ten
words that starts with a letter that is not lower-case (a capital, or a letter of a script
without case) and holds a word of two letters or more, the line at most 80 characters and
not ending like a sentence; or one of the unnumbered headings papers use (``Abstract``,
``References``...). Markdown files also have their ATX headings (``## Node Shapes``, outside
fenced code, where ``#`` starts a comment), cut to 80 characters.
PDFs carry no reliable structure (font sizes differ between producers), so the rule reads
the text only; on ``dotguide.pdf`` it finds every numbered section and appendix heading and
nothing else (``bench/results/ingest.md``).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_text_splitters import RecursiveCharacterTextSplitter

DEFAULT_CHUNK_SIZE = 800
"""Characters per chunk; chosen with ``bench/ingest_recall.py`` (see docs/ingestion.md)."""
DEFAULT_CHUNK_OVERLAP = 200
"""Characters shared by neighbouring chunks; chosen with the same check."""

PAGE_SEPARATOR = "\n\n"
"""Pages are joined as paragraphs, so the splitter prefers to cut at a page break."""

# Paragraphs first, then sentence ends, then lines and words: chunks end at natural
# boundaries and the splitter only cuts inside a word when a single word is too long.
_SEPARATORS = [r"\n\n", r"(?<=[.!?…])\s+", r"\n", r" ", ""]

# The patterns start with a literal or a rare character where possible: a leading lookbehind
# or a class that matches every space made the regex engine try every position, and cleaning
# cost as much as a fifth of pypdf's extraction time.
_HYPHEN_BREAK = re.compile(r"-(?<=[^\W\d_]-)[ \t]*\n[ \t]*(?=[^\W\d_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_OTHER_SPACES = "\t\u00a0\u2000-\u200a\u202f\u205f\u3000"
# A single plain space is left alone; only runs and other space characters are replaced.
_SPACES = re.compile(rf"[{_OTHER_SPACES}][ {_OTHER_SPACES}]*| [ {_OTHER_SPACES}]+")
_ASCII_BLANKS = str.maketrans(
    {chr(c): " " for c in (*range(0x00, 0x0A), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}
)
"""ASCII control characters and tabs, all turned into spaces."""
_ZERO_WIDTH = re.compile(r"[\u00ad\u200b\u200c\u200d\u2060\ufeff]")


def clean_text(text: str) -> str:
    r"""Return page text with line-end hyphenation joined and whitespace normalised.

    ``exam-\nple`` becomes ``example`` when the next line starts with a lower-case letter (a
    capital usually means a real hyphen, as in ``Jean-\nPaul``); runs of spaces become one
    space; lines are stripped; paragraph breaks (blank lines) are kept, at most one blank line
    in a row. NFKC normalisation turns ligatures such as ``ﬁ`` back into letters, so keyword
    search finds the words.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _inline_ascii(text) if text.isascii() else _inline_general(text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip()


def _inline_general(text: str) -> str:
    """Normalise characters, join hyphenated line ends and collapse spaces."""
    text = unicodedata.normalize("NFKC", text)
    text = _ZERO_WIDTH.sub("", text)
    text = _CONTROL.sub(" ", text)
    text = _HYPHEN_BREAK.sub(_join_hyphenated, text)
    return _SPACES.sub(" ", text)


def _inline_ascii(text: str) -> str:
    """``_inline_general`` for ASCII text (a test compares them), several times faster.

    String methods replace the regexes that visit every character; most extracted text is
    ASCII, and NFKC and zero-width characters do not apply to it.
    """
    text = _HYPHEN_BREAK.sub(_join_hyphenated, text.translate(_ASCII_BLANKS))
    while "  " in text:
        text = text.replace("  ", " ")
    return text


def _join_hyphenated(match: re.Match[str]) -> str:
    following = match.string[match.end() : match.end() + 1]
    return "" if following.islower() else "-"


@dataclass(frozen=True)
class CleanDocument:
    """The cleaned text of a whole document and where each page starts in it."""

    text: str
    page_numbers: tuple[int, ...]
    """1-based numbers of the pages that have text, in order."""
    page_offsets: tuple[int, ...]
    """``page_offsets[i]`` is where page ``page_numbers[i]`` starts in ``text``."""
    page_count: int
    """All pages of the file, including those without text."""

    def page_at(self, offset: int) -> int:
        """Return the page number of the character at ``offset``."""
        if not self.page_numbers:
            raise ValueError("the document has no text")
        index = bisect.bisect_right(self.page_offsets, offset) - 1
        return self.page_numbers[max(index, 0)]


def assemble(pages: Sequence[str]) -> CleanDocument:
    """Clean each page and join the non-empty ones into one document, keeping page offsets."""
    parts: list[str] = []
    numbers: list[int] = []
    offsets: list[int] = []
    position = 0
    for number, raw in enumerate(pages, start=1):
        cleaned = clean_text(raw)
        if not cleaned:
            continue
        if parts:
            position += len(PAGE_SEPARATOR)
        numbers.append(number)
        offsets.append(position)
        parts.append(cleaned)
        position += len(cleaned)
    return CleanDocument(
        text=PAGE_SEPARATOR.join(parts),
        page_numbers=tuple(numbers),
        page_offsets=tuple(offsets),
        page_count=len(pages),
    )


@dataclass(frozen=True)
class TextChunk:
    """One chunk of a document, located by character offsets and pages."""

    index: int
    text: str
    char_start: int
    char_end: int
    page_start: int
    page_end: int
    section: str = ""
    """The heading of the section the chunk falls under ("" before the first heading)."""


_NUMBERED_HEADING = re.compile(
    r"^(?:\d{1,2}(?:\.\d{1,2}){0,3}|[A-Z](?:\.\d{1,2}){0,3})\.? +([^\W\d_][^\n]{0,78})$",
    re.MULTILINE,
)
_LONG_WORD = re.compile(r"[^\W\d_]{2}")
_NAMED_HEADINGS = frozenset(
    {
        "abstract",
        "introduction",
        "background",
        "related work",
        "discussion",
        "conclusion",
        "conclusions",
        "acknowledgments",
        "acknowledgements",
        "references",
        "bibliography",
        "appendix",
    }
)
"""Unnumbered headings of papers, compared case-insensitively with a whole line."""
_MAX_HEADING_WORDS = 10
_MAX_HEADING_CHARS = 80
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _markdown_headings(text: str) -> dict[int, str]:
    found: dict[int, str] = {}
    fence: str | None = None
    start = 0
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if opened and (fence is None or opened.group(1) == fence):
            fence = opened.group(1) if fence is None else None
        elif fence is None and (match := _ATX_HEADING.match(line)):
            title = match.group(1).strip()
            if _LONG_WORD.search(title):
                found[start] = title[:_MAX_HEADING_CHARS]
        start += len(line) + 1
    return found


def find_headings(text: str, *, markdown: bool = False) -> list[tuple[int, str]]:
    """Return the section headings of a cleaned document: ``(offset of the line, the heading)``.

    See the module doc for the rule; ``markdown`` adds the ATX headings. Offsets ascend.
    """
    found: dict[int, str] = _markdown_headings(text) if markdown else {}
    for match in _NUMBERED_HEADING.finditer(text):
        line, title = match.group(0), match.group(1)
        if (
            len(line) <= _MAX_HEADING_CHARS
            and len(line.split()) <= _MAX_HEADING_WORDS + 1
            and not title[0].islower()
            and _LONG_WORD.search(title)
            and not line.endswith((".", ",", ";", ":"))
        ):
            found[match.start()] = line
    start = 0
    for line in text.split("\n"):
        if len(line) <= 20 and line.strip().lower() in _NAMED_HEADINGS:
            found[start] = line.strip()
        start += len(line) + 1
    return sorted(found.items())


def check_split_settings(chunk_size: object, chunk_overlap: object) -> tuple[int, int]:
    """Validate splitter settings and return them; raise ``ValueError`` with the reason."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 50:
        raise ValueError(f"chunk size must be an integer of at least 50, got {chunk_size!r}")
    if isinstance(chunk_overlap, bool) or not isinstance(chunk_overlap, int) or chunk_overlap < 0:
        raise ValueError(f"chunk overlap must be a non-negative integer, got {chunk_overlap!r}")
    if chunk_overlap >= chunk_size:
        raise ValueError(
            f"chunk overlap ({chunk_overlap}) must be smaller than the chunk size ({chunk_size})"
        )
    return chunk_size, chunk_overlap


def split_document(
    document: CleanDocument,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    markdown: bool = False,
) -> list[TextChunk]:
    """Split a cleaned document into chunks with their offsets, page ranges and sections.

    ``markdown`` says the document is Markdown, whose ``#`` headings are sections.
    """
    check_split_settings(chunk_size, chunk_overlap)
    if not document.text:
        return []
    splitter = RecursiveCharacterTextSplitter(
        separators=_SEPARATORS,
        is_separator_regex=True,
        keep_separator="end",
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        strip_whitespace=True,
    )
    text = document.text
    headings = find_headings(text, markdown=markdown)
    heading_offsets = [offset for offset, _ in headings]
    chunks: list[TextChunk] = []
    previous_start, previous_end = -1, 0
    for piece in splitter.split_text(text):
        start = _locate(text, piece, previous_start, previous_end, chunk_overlap)
        end = start + len(piece)
        chunks.append(
            TextChunk(
                index=len(chunks),
                text=piece,
                char_start=start,
                char_end=end,
                page_start=document.page_at(start),
                page_end=document.page_at(end - 1),
                section=_section_at(headings, heading_offsets, start, end),
            )
        )
        previous_start, previous_end = start, end
    return chunks


HEADING_LOOKAHEAD = 100
"""A heading that starts this few characters into a chunk (at most a quarter of the chunk) is
the chunk's own: a chunk that begins at a page's top often starts with the running header,
then the new section."""


def _section_at(headings: list[tuple[int, str]], offsets: list[int], start: int, end: int) -> str:
    ahead = min(HEADING_LOOKAHEAD, (end - start) // 4)
    at = bisect.bisect_right(offsets, start + ahead) - 1
    return headings[at][1] if at >= 0 else ""


def _locate(text: str, piece: str, previous_start: int, previous_end: int, overlap: int) -> int:
    # With separators kept, every chunk is a verbatim slice of the text. Chunks advance
    # monotonically and overlap their predecessor by at most ``overlap`` characters, so the
    # search starts there: a phrase repeated earlier in the document cannot be matched.
    lower_bound = max(previous_start + 1, previous_end - overlap)
    found = text.find(piece, lower_bound)
    if found < 0:
        found = text.find(piece, previous_start + 1)
    if found < 0:
        raise RuntimeError("the text splitter returned a chunk that is not part of the document")
    return found
