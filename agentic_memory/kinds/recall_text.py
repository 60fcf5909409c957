"""The text recall searches: keyword text prepared by the application, the same for every backend.

Weaviate's ``word`` tokenisation (and the embedded store, which follows it) neither stems
nor drops more than a handful of stop words, so "hiking" never meets "hike" and "what did
she say" matches every turn containing "did". The message log therefore stores a prepared
keyword text next to the message (``search_text``): English stop words dropped and every
other word reduced to its Snowball stem, with what a bare message lacks and a question
often names: who spoke, the date it was said, and the turns just before and after it. A query is prepared
the same way. Both backends index the prepared text as an ordinary searchable property, so
they rank it alike; nothing here depends on one backend.

Knowledge chunks and episodes get the same treatment (:func:`chunk_search_text`,
:func:`episode_search_text`): a chunk's keyword text holds its document's title and the
section heading it sits under, which a question names far more often than the chunk
itself does ("What are the node shapes in dot?" against a passage of the section "Node
Shapes" that only lists them); an episode's holds its tags and reflection besides the
conversation. The raw text stays stored beside it for display and citations.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import datetime

import snowballstemmer

from agentic_memory.kinds._bound import embedded_part
from agentic_memory.store import Property

__all__ = [
    "STOPWORDS",
    "chunk_search_text",
    "date_words",
    "embedding_text",
    "episode_search_text",
    "keyword_query",
    "keyword_text",
    "keywords",
    "search_text",
    "search_text_property",
]

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before
    being below between both but by can cannot could couldn d did didn do does doesn doing don
    down during each few for from further had hadn has hasn have haven having he her here hers
    herself him himself his how i if in into is isn it its itself just ll m me more most must
    mustn my myself no nor not now o of off on once only or other ought our ours ourselves out
    over own re s same shan she should shouldn so some such t than that the their theirs them
    themselves then there these they this those through to too under until up us ve very was
    wasn we were weren what when where which while who whom why will with won would wouldn y
    you your yours yourself yourselves
    """.split()
)
"""English function words (pronouns, determiners, auxiliaries, prepositions, conjunctions,
question words and the fragments contractions split into); they carry no topic."""

_WORD_RE = re.compile(r"[^\W_]+")
_STEMMER = snowballstemmer.stemmer("english")
_STEM_CACHE = 1 << 16


@functools.lru_cache(maxsize=_STEM_CACHE)
def _stem(word: str) -> str:
    stemmed: str = _STEMMER.stemWord(word)
    return stemmed


def keywords(text: str) -> list[str]:
    """Return the stems of the words of ``text`` that are not stop words, in order.

    Words are lower-cased runs of letters and digits, as Weaviate's ``word`` tokenisation
    splits them, so the stems joined by spaces are tokenised back into exactly these.
    """
    return [_stem(w) for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]


def keyword_text(parts: Iterable[str]) -> str:
    """Return the prepared keyword text of several texts: their stems joined by spaces."""
    return " ".join(stem for part in parts if part for stem in keywords(part))


def keyword_query(query: str) -> str:
    """Prepare a query for keyword search the way documents are prepared.

    A query made only of stop words ("what was that?") keeps its own words: it then matches
    no prepared text, and the vector side alone ranks, as it would anyway.
    """
    prepared = keyword_text([query])
    return prepared or query


def date_words(created_at: str) -> str:
    """Return the calendar date of an RFC 3339 time in words ("8 May 2023"); "" if unreadable."""
    try:
        moment = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return ""
    return f"{moment.day} {moment.strftime('%B')} {moment.year}"


def search_text(
    content: str,
    *,
    speaker: str = "",
    created_at: str = "",
    previous: str = "",
    following: str = "",
) -> str:
    """Return the prepared keyword text of a logged message.

    Args:
        content: The message's text.
        speaker: Who said it (the message's ``name``), if known.
        created_at: When it was said (RFC 3339); its date is added in words.
        previous: The text of the turn before it in the same thread: a reply ("yes, twice a
            week") is found by the words of the question it answers.
        following: The text of the turn after it in the same thread ("" while it is the
            last): a remark ("we went camping again") is found by the words its answer
            adds ("in the forest? which one?"), as a reply is found by its question's.
    """
    return keyword_text([date_words(created_at), speaker, content, previous, following])


def embedding_text(content: str, *, speaker: str = "") -> str:
    """Return the text a logged message is embedded from: ``"<speaker>: <content>"``.

    At most ``MAX_EMBEDDED_CHARS`` of it: the beginning of a long message.
    """
    return embedded_part(f"{speaker}: {content}" if speaker else content)


def chunk_search_text(text: str, *, title: str = "", section: str = "") -> str:
    """Return the prepared keyword text of a knowledge chunk.

    Args:
        text: The chunk's text.
        title: The title of the document it comes from.
        section: The heading of the section it falls under ("" when none was found).
    """
    return keyword_text([title, section, text])


def episode_search_text(
    *,
    context_tags: Iterable[str] = (),
    conversation_summary: str = "",
    what_worked: str = "",
    what_to_avoid: str = "",
    conversation: str = "",
) -> str:
    """Return the prepared keyword text of an episode: its tags, reflection and conversation."""
    return keyword_text(
        [" ".join(context_tags), conversation_summary, what_worked, what_to_avoid, conversation]
    )


def search_text_property(holds: str) -> Property:
    """Return the ``search_text`` property of a collection: the one its keyword search reads.

    Args:
        holds: What the prepared text is made of, for the schema's description.
    """
    return Property(
        "search_text",
        "text",
        searchable=True,
        filterable=False,
        description=f"prepared keyword text (agentic_memory.kinds.recall_text): stems of {holds}, "
        "without stop words",
    )
