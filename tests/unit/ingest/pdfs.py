"""PDF files made for the ingestion tests (fpdf2 and pypdf), with known text on known pages."""

from __future__ import annotations

import io
import random
import re
import zlib
from pathlib import Path

from fpdf import FPDF
from PIL import Image
from pypdf import PdfReader, PdfWriter

_WORDS = (
    "river stone lantern orchard meadow copper harbor velvet thunder pillar whisper garden "
    "canyon amber falcon marble signal ladder compass timber glacier saddle beacon quarry "
    "hollow cinder ribbon anchor bramble summit"
).split()


def filler(seed: int, sentences: int) -> str:
    """Deterministic filler prose that shares no rare words with the known sentences."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 14))]
        out.append(" ".join(words).capitalize() + ".")
    return " ".join(out)


def write_pdf(
    path: Path, pages: list[str], *, title: str | None = None, password: str | None = None
) -> Path:
    """Write a PDF with one string of text per page (wrapped by fpdf2 over several lines)."""
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        for paragraph in text.split("\n\n"):
            pdf.multi_cell(0, 5, paragraph)
            pdf.ln(4)
    data = bytes(pdf.output())
    if password is not None:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
        writer.encrypt(
            user_password=password, owner_password="owner-" + password, algorithm="AES-128"
        )
        buffer = io.BytesIO()
        writer.write(buffer)
        data = buffer.getvalue()
    path.write_bytes(data)
    return path


def write_image_only_pdf(path: Path) -> Path:
    """A scanned-looking PDF: one page with an image and a filled rectangle, no text."""
    pdf = FPDF()
    pdf.add_page()
    pdf.image(Image.new("RGB", (40, 40), "gray"), x=20, y=20, w=80)
    pdf.rect(20, 120, 60, 30, style="F")
    path.write_bytes(bytes(pdf.output()))
    return path


def write_blank_pdf(path: Path, pages: int = 2) -> Path:
    """A PDF whose pages are empty: no text, nothing drawn."""
    pdf = FPDF()
    for _ in range(pages):
        pdf.add_page()
    path.write_bytes(bytes(pdf.output()))
    return path


def write_no_pages_pdf(path: Path) -> Path:
    """A well-formed PDF with zero pages."""
    buffer = io.BytesIO()
    PdfWriter().write(buffer)
    path.write_bytes(buffer.getvalue())
    return path


def write_truncated_pdf(path: Path, source: Path) -> Path:
    """The first half of a valid PDF."""
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def write_pdf_with_bad_xref(path: Path, source: Path) -> Path:
    """A valid PDF whose startxref offset is wrong: pypdf repairs it and logs warnings."""
    data = source.read_bytes()
    match = re.search(rb"startxref\s+(\d+)", data)
    assert match is not None
    wrong = str(int(match.group(1)) + 7).encode()
    path.write_bytes(data[: match.start(1)] + wrong + data[match.end(1) :])
    return path


def write_decompression_bomb_pdf(path: Path, inflated_bytes: int = 80_000_000) -> Path:
    """A one-page PDF whose content stream is a FlateDecode stream of ``inflated_bytes``.

    The default inflates past pypdf's 75 MB output limit (``LimitReachedError``) from a file
    of about 80 KB, the shape of a decompression bomb.
    """
    deflate = zlib.compressobj(9)
    block = b" " * 1_000_000
    parts = [deflate.compress(b"BT /F1 12 Tf 72 712 Td (Boom) Tj ET\n")]
    for _ in range(inflated_bytes // len(block)):
        parts.append(deflate.compress(block))
    parts.append(deflate.flush())
    stream = b"".join(parts)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    path.write_bytes(out.getvalue())
    return path
