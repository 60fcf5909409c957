"""The raw keyword and vector scores, read back from Weaviate's hybrid ``explain_score``.

The server prints float32 scores with Go's ``%v``; reading them back as the same float32
makes them equal to the embedded store's bit for bit.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

_EXPLAIN_RE = re.compile(
    r"Result Set (?P<set>[^)]*)\)[^:]*:\s*original score:?\s*(?P<score>[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)"
)


def parse_float32(text: str) -> float:
    """Return the float32 nearest to a decimal number, as a Python float.

    The server writes a float32 with Go's ``%v``: the shortest decimal that reads back as the
    same float32. Reading it as a float64 gives a different number (``2.4123456`` is not the
    float32 2.41234564781188...); this rounds the decimal to float32 exactly (via the
    nearest float64 and a check of its float32 neighbours against the exact decimal, so a
    double rounding cannot move it), ties to even.

    Raises:
        ValueError: ``text`` is not a number.
    """
    wide = float(text)
    if not math.isfinite(wide):
        return wide
    exact = Fraction(text.strip())
    with np.errstate(over="ignore"):
        narrow = np.float32(wide)
        if not np.isfinite(narrow):
            return float(narrow)
        candidates = [
            np.nextafter(narrow, np.float32(-np.inf)),
            narrow,
            np.nextafter(narrow, np.float32(np.inf)),
        ]

    def distance(c: np.float32) -> tuple[Fraction, int]:
        odd = int(np.array(c, dtype=np.float32).view(np.uint32)) & 1
        return abs(Fraction(float(c)) - exact), odd

    return float(min((c for c in candidates if np.isfinite(c)), key=distance))


def parse_explain_score(text: str | None) -> tuple[float | None, float | None]:
    """Extract (keyword, vector) raw scores from Weaviate's hybrid ``explain_score``.

    Weaviate writes one line per result set that found the object, e.g.
    ``Hybrid (Result Set keyword,bm25) Document <id>: original score 2.41, normalized
    score: 0.5``; the keyword line carries the BM25 score, the vector line ``1 - cosine
    distance``, both float32 values printed with Go's ``%v``, read back here as the same
    float32 (``parse_float32``), so they equal the embedded store's bit for bit. A side that
    did not find the object, or text that does not parse, gives ``None``.
    """
    keyword: float | None = None
    vector: float | None = None
    if not text:
        return None, None
    for match in _EXPLAIN_RE.finditer(text):
        kind = match.group("set").lower()
        try:
            score = parse_float32(match.group("score"))
        except ValueError:
            continue
        if not math.isfinite(score):
            continue
        if "keyword" in kind or "bm25" in kind:
            keyword = score
        elif "vector" in kind:
            vector = score
    return keyword, vector
