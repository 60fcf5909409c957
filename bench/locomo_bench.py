"""Long-term conversational recall on LoCoMo: the project's recall and its peers, side by side.

LoCoMo (Maharana et al., ACL 2024) holds long conversations between two people, split into
dated sessions, with questions whose ``evidence`` names the turns (``dia_id``) that answer
them. This benchmark writes each conversation into memory the way the agent does and asks
every question the way the agent recalls:

- one user per conversation, one thread per session; the turns are written with
  ``MessageLog.remember`` one exchange (two turns) per call, as ``log_turn`` writes a user
  message and its answer, stamped with the session's date (``now=``); the first speaker
  is the ``user`` role, the second the ``assistant`` role, each message carrying its
  speaker's name (LangChain's ``name`` field); a shared photo's caption is appended to the
  text as ``[shared a photo: …]``;
- each question is answered by ``MessageLog.recall`` over all of that user's threads
  (what ``recall_episodic`` calls for past turns), k = 20.

Systems, in one run:
  amem             the project's recall as the agent runs it (past_turns_alpha unset: per query)
  amem-keyword     the same index, alpha 0 (BM25 only)
  amem-vector      the same index, alpha 1 (vectors only)
  langgraph        LangGraph's ``InMemoryStore`` with semantic search over the same
                   embeddings (what LangMem and the memory-agent template search with)
  lancedb-hybrid   LanceDB's hybrid search (native full-text index + vectors, RRF), the
                   same embeddings
  lancedb-fts      LanceDB's full-text search alone (a lexical reference)
The peers index each turn as ``"<speaker>: <text>"`` (the usual way to index a transcript
turn, and the text the project embeds), with the same vectors; what the project adds on
top (its prepared keyword text and context re-ranking) is the project's own.

Scores: evidence recall@k (the fraction of a question's evidence turns among the top k),
hit@k (at least one among the top k) and MRR (the reciprocal rank of the first evidence
turn within the top 20, 0 if none), per category and overall. The headline ("overall")
pools categories 1-4 (multi-hop, temporal, open-domain, single-hop); category 5
(adversarial: questions about things never said, whose evidence is often unrelated) is
reported in its own column and left out of the headline, as is usual. Evidence ids that
name no turn of the conversation are dropped; a question left with none is skipped
(counted in the report).

Speed: indexing throughput in turns/s, with every text's embedding charged at the time it
first took (so engines that reuse a cached vector pay for it too), and "engine only" with
embedding excluded; recall latency p50/p95 with the query embedding excluded (queries are
embedded once beforehand; that cost is reported on its own line).

Embeddings: the configured ones (``AMEM_EMBEDDINGS``, as the agent), or ``--embeddings``
(``local``, ``minilm``, ``openai:<model>`` with ``AMEM_EMBEDDINGS_BASE_URL`` for any
OpenAI-compatible endpoint).

Run (the data is CC BY-NC 4.0 and never copied into the repository)::

    python bench/locomo_bench.py ../shared/data/locomo-dev.json
    python bench/locomo_bench.py data.json --systems amem,lancedb-hybrid --out results.md

The peers need the benchmark's dependency group: ``pip install -c constraints.txt --group bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from langchain_core.embeddings import Embeddings

from agentic_memory.api import Memory
from agentic_memory.graph.context import Context
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import EmbeddingSettings, embedding_dims, get_embeddings
from agentic_memory.store import InvalidInputError

KS = (1, 5, 10, 20)
DEPTH = max(KS)
HEADLINE_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
DEFAULT_ALPHA = Context().past_turns_alpha
"""The agent's default weight for past messages (``graph.context.Context``)."""
SYSTEMS = ("amem", "amem-keyword", "amem-vector", "langgraph", "lancedb-hybrid", "lancedb-fts")
_EVIDENCE_RE = re.compile(r"D\d+:\d+")
_SESSION_RE = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%d %H:%M", "%Y-%m-%d")


class LocomoFormatError(ValueError):
    """The file is not in LoCoMo's format; the message says where."""


# -- the data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One turn of a session."""

    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    """A dated session (a thread, for the agent)."""

    number: int
    date: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """A question with the turns that answer it."""

    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    skipped_questions: int = 0
    """Questions none of whose evidence ids names a turn of this conversation."""

    @property
    def turns(self) -> int:
        """How many turns the conversation holds."""
        return sum(len(s.turns) for s in self.sessions)


def _parse_date(raw: object, number: int, previous: datetime | None) -> datetime:
    if isinstance(raw, str):
        text = " ".join(raw.split())
        for fmt in _DATE_FORMATS:
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    # Undated or unreadable: one day after the previous session keeps the order.
    base = previous or datetime(2020, 1, 1, tzinfo=UTC)
    return base + timedelta(days=1 if previous else number - 1)


def _turn_text(turn: Mapping[str, Any]) -> str:
    text = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shared a photo: {caption.strip()}]".strip()
    return text


def load_locomo(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo-format JSON file (a list of samples with ``conversation`` and ``qa``).

    Raises:
        LocomoFormatError: the file is missing, not JSON, or not in LoCoMo's format.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LocomoFormatError(f"{file}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LocomoFormatError(f"{file}: not a readable JSON file ({exc})") from None
    if not isinstance(data, list) or not data:
        raise LocomoFormatError(f"{file}: expected a non-empty JSON list of conversations")
    conversations: list[Conversation] = []
    seen: set[str] = set()
    for index, sample in enumerate(data):
        where = f"{file}: item {index}"
        if not isinstance(sample, dict):
            raise LocomoFormatError(f"{where}: expected an object")
        conv = sample.get("conversation")
        qa = sample.get("qa")
        if not isinstance(conv, dict) or not isinstance(qa, list):
            raise LocomoFormatError(f"{where}: needs a 'conversation' object and a 'qa' list")
        sample_id = str(sample.get("sample_id") or f"conversation-{index}")
        if sample_id in seen:
            raise LocomoFormatError(f"{where}: sample_id {sample_id!r} appears twice")
        seen.add(sample_id)
        speaker_a, speaker_b = conv.get("speaker_a"), conv.get("speaker_b")
        if not isinstance(speaker_a, str) or not isinstance(speaker_b, str):
            raise LocomoFormatError(f"{where}: 'speaker_a' and 'speaker_b' must be strings")
        numbers = sorted(
            int(m.group(1)) for key in conv if (m := _SESSION_RE.match(key)) is not None
        )
        if not numbers:
            raise LocomoFormatError(f"{where}: the conversation has no 'session_<n>' list")
        sessions: list[Session] = []
        dia_ids: set[str] = set()
        previous: datetime | None = None
        for number in numbers:
            raw_turns = conv[f"session_{number}"]
            if not isinstance(raw_turns, list):
                raise LocomoFormatError(f"{where}: session_{number} must be a list of turns")
            turns: list[Turn] = []
            for t_index, raw in enumerate(raw_turns):
                if not isinstance(raw, dict) or not isinstance(raw.get("dia_id"), str):
                    raise LocomoFormatError(
                        f"{where}: session_{number} turn {t_index} needs a string 'dia_id'"
                    )
                if raw["dia_id"] in dia_ids:
                    raise LocomoFormatError(f"{where}: dia_id {raw['dia_id']!r} appears twice")
                text = _turn_text(raw)
                if not text:
                    continue
                dia_ids.add(raw["dia_id"])
                turns.append(Turn(raw["dia_id"], str(raw.get("speaker") or ""), text))
            date = _parse_date(conv.get(f"session_{number}_date_time"), number, previous)
            previous = date
            sessions.append(Session(number, date, tuple(turns)))
        questions: list[Question] = []
        skipped = 0
        for q_index, item in enumerate(qa):
            if not isinstance(item, dict) or not isinstance(item.get("question"), str):
                raise LocomoFormatError(f"{where}: qa {q_index} needs a string 'question'")
            category = item.get("category")
            if isinstance(category, bool) or not isinstance(category, int):
                raise LocomoFormatError(f"{where}: qa {q_index} needs an integer 'category'")
            raw_evidence = item.get("evidence") or []
            if not isinstance(raw_evidence, list):
                raise LocomoFormatError(f"{where}: qa {q_index} 'evidence' must be a list")
            # The original file has a few malformed entries ("D8:6; D9:17", "D1:3 "): read
            # every dia_id written in them and keep those naming a turn of this conversation.
            found = [e for raw_e in raw_evidence for e in _EVIDENCE_RE.findall(str(raw_e))]
            evidence = tuple(dict.fromkeys(e for e in found if e in dia_ids))
            if not evidence or not item["question"].strip():
                skipped += 1
                continue
            questions.append(Question(item["question"].strip(), evidence, category))
        conversations.append(
            Conversation(
                sample_id,
                speaker_a,
                speaker_b,
                tuple(sessions),
                tuple(questions),
                skipped,
            )
        )
    return conversations


# -- scoring --------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuestionScore:
    """The scores of one question."""

    category: int
    recall: dict[int, float]
    hit: dict[int, float]
    rr: float


def score_ranking(
    ranked: Sequence[str], evidence: Sequence[str], ks: Sequence[int] = KS
) -> tuple[dict[int, float], dict[int, float], float]:
    """Return recall@k and hit@k for each k, and the reciprocal rank within ``max(ks)``.

    ``ranked`` may hold repeats (only the first counts) and ids that are not evidence.
    """
    wanted = set(evidence)
    if not wanted:
        raise ValueError("a question needs at least one evidence id")
    order = list(dict.fromkeys(ranked))
    recall: dict[int, float] = {}
    hit: dict[int, float] = {}
    for k in ks:
        found = len(wanted.intersection(order[:k]))
        recall[k] = found / len(wanted)
        hit[k] = 1.0 if found else 0.0
    rr = 0.0
    for rank, item in enumerate(order[: max(ks)], start=1):
        if item in wanted:
            rr = 1.0 / rank
            break
    return recall, hit, rr


@dataclass(frozen=True)
class Summary:
    """Mean scores over a set of questions."""

    questions: int
    recall: dict[int, float]
    hit: dict[int, float]
    mrr: float

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "questions": self.questions,
            "recall": {str(k): v for k, v in self.recall.items()},
            "hit": {str(k): v for k, v in self.hit.items()},
            "mrr": self.mrr,
        }


def summarise(scores: Sequence[QuestionScore], ks: Sequence[int] = KS) -> Summary:
    """Average question scores (an empty set gives zeros and ``questions=0``)."""
    n = len(scores)
    if not n:
        return Summary(0, dict.fromkeys(ks, 0.0), dict.fromkeys(ks, 0.0), 0.0)
    return Summary(
        n,
        {k: sum(s.recall[k] for s in scores) / n for k in ks},
        {k: sum(s.hit[k] for s in scores) / n for k in ks},
        sum(s.rr for s in scores) / n,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """Return the q-th percentile (0-100) by linear interpolation; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# -- embeddings with the query cost taken out ----------------------------------------------


class MeteredEmbeddings(Embeddings):
    """Embeddings that remember every vector and what it cost.

    A text is embedded once; later requests for it return the stored vector and are charged
    the time it first took (``charged_seconds``), so every engine pays the same embedding
    cost per text while the model runs only once. Queries embedded with :meth:`prepare`
    are served from the cache, so a search is timed without its query embedding.
    """

    def __init__(self, inner: Embeddings) -> None:
        self.inner = inner
        self.dims = embedding_dims(inner)
        self._vectors: dict[str, list[float]] = {}
        self._cost: dict[str, float] = {}
        self.charged_seconds = 0.0
        self.computed_seconds = 0.0
        self.uncached_queries = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts, each at most once."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            start = time.perf_counter()
            vectors = self.inner.embed_documents(missing)
            spent = time.perf_counter() - start
            self.computed_seconds += spent
            for text, vector in zip(missing, vectors, strict=True):
                self._vectors[text] = vector
                self._cost[text] = spent / len(missing)
        self.charged_seconds += sum(self._cost[t] for t in texts)
        return [self._vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Return a prepared query's vector (embedding it now if it was not prepared)."""
        key = "\x00q\x00" + text
        if key not in self._vectors:
            self.uncached_queries += 1
            self._vectors[key] = self.inner.embed_query(text)
        return self._vectors[key]

    def prepare(self, queries: Sequence[str]) -> list[float]:
        """Embed queries one by one, as the agent does; return each one's seconds."""
        took: list[float] = []
        for query in queries:
            key = "\x00q\x00" + query
            if key in self._vectors:
                continue
            start = time.perf_counter()
            self._vectors[key] = self.inner.embed_query(query)
            took.append(time.perf_counter() - start)
        return took


# -- systems --------------------------------------------------------------------------------


class Retriever(Protocol):
    """A recall engine under test."""

    name: str

    def index(self, conversation: Conversation) -> None:
        """Write a whole conversation."""

    def search(self, conversation: Conversation, question: str, k: int) -> list[str]:
        """Return the dia_ids of the best ``k`` turns for ``question``, best first."""

    def close(self) -> None:
        """Free what it holds."""


def _messages(conversation: Conversation, session: Session) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if t.speaker == conversation.speaker_a else "assistant",
            "content": t.text,
            "name": t.speaker,
            "id": t.dia_id,
        }
        for t in session.turns
    ]


def _peer_text(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}" if turn.speaker else turn.text


def _user(conversation: Conversation) -> str:
    return f"locomo-{conversation.sample_id}"


def _thread(session: Session) -> str:
    return f"session-{session.number}"


class ProjectIndex:
    """The project's message log on an embedded store in a temporary folder."""

    def __init__(self, embeddings: MeteredEmbeddings, folder: Path) -> None:
        # The conversations are dated years back: an operator's retention policy
        # (AMEM_MESSAGE_RETENTION_DAYS) would purge them as they are written.
        keep = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=None)
        self.memory = Memory.open(
            home=folder, backend="embedded", embeddings=embeddings, retention=keep
        )
        self.log: MessageLog = self.memory.messages
        self._dia: dict[str, str] = {}

    def index(self, conversation: Conversation) -> None:
        """Write every session as a thread, one exchange per call (as ``log_turn`` does)."""
        user = _user(conversation)
        for session in conversation.sessions:
            messages = _messages(conversation, session)
            for start in range(0, len(messages), 2):
                ids = asyncio.run(
                    self.log.aremember(
                        user, _thread(session), messages[start : start + 2], now=session.date
                    )
                )
                for oid, msg in zip(ids, messages[start : start + 2], strict=True):
                    self._dia[oid] = msg["id"]

    def search(
        self, conversation: Conversation, question: str, k: int, alpha: float | None
    ) -> list[str]:
        """Recall as ``recall_episodic`` does for past turns (all of the user's threads)."""
        hits = asyncio.run(self.log.arecall(_user(conversation), question, k=k, alpha=alpha))
        return [self._dia[h.id] for h in hits]

    def close(self) -> None:
        """Close the store."""
        self.memory.close()


@dataclass
class ProjectView:
    """One alpha over the shared project index (``None``: chosen per query)."""

    name: str
    shared: ProjectIndex
    alpha: float | None
    owns_index: bool

    def index(self, conversation: Conversation) -> None:
        """Write the conversation (only the view that owns the shared index writes)."""
        if self.owns_index:
            self.shared.index(conversation)

    def search(self, conversation: Conversation, question: str, k: int) -> list[str]:
        """Search the shared index with this view's alpha."""
        return self.shared.search(conversation, question, k, self.alpha)

    def close(self) -> None:
        """Close the shared index once."""
        if self.owns_index:
            self.shared.close()


class LangGraphStore:
    """LangGraph's ``InMemoryStore`` with its semantic index over the same embeddings."""

    name = "langgraph"

    def __init__(self, embeddings: MeteredEmbeddings) -> None:
        from langgraph.store.memory import InMemoryStore

        self.store = InMemoryStore(
            index={"dims": embeddings.dims, "embed": embeddings, "fields": ["text"]}
        )

    def index(self, conversation: Conversation) -> None:
        """Put every turn under (user, thread), one exchange per batch."""
        from langgraph.store.base import PutOp

        user = _user(conversation)
        for session in conversation.sessions:
            turns = session.turns
            for start in range(0, len(turns), 2):
                self.store.batch(
                    [
                        PutOp((user, _thread(session)), t.dia_id, {"text": _peer_text(t)})
                        for t in turns[start : start + 2]
                    ]
                )

    def search(self, conversation: Conversation, question: str, k: int) -> list[str]:
        """Semantic search over every thread of the user (namespace prefix)."""
        items = self.store.search((_user(conversation),), query=question, limit=k)
        return [item.key for item in items]

    def close(self) -> None:
        """Nothing to free."""


class LanceTables:
    """One LanceDB table per conversation (text, vector), with its native full-text index."""

    def __init__(self, embeddings: MeteredEmbeddings, folder: Path) -> None:
        import lancedb

        self.embeddings = embeddings
        self.db = lancedb.connect(str(folder))
        self.tables: dict[str, Any] = {}

    def index(self, conversation: Conversation) -> None:
        """Add every turn (one exchange per write), then build the full-text index."""
        from lancedb.index import FTS

        rows = [(t, s) for s in conversation.sessions for t in s.turns]
        name = re.sub(r"[^A-Za-z0-9_]", "_", _user(conversation))
        table = None
        for start in range(0, len(rows), 2):
            chunk = rows[start : start + 2]
            vectors = self.embeddings.embed_documents([_peer_text(t) for t, _ in chunk])
            data = [
                {"dia_id": t.dia_id, "thread": _thread(s), "text": _peer_text(t), "vector": v}
                for (t, s), v in zip(chunk, vectors, strict=True)
            ]
            if table is None:
                table = self.db.create_table(name, data=data, mode="overwrite")
            else:
                table.add(data)
        if table is None:
            return
        # Built once at the end: LanceDB's full-text index is not updated by later appends
        # (new rows are searched by a flat scan until the index is rebuilt).
        table.create_index("text", config=FTS())
        self.tables[conversation.sample_id] = table

    def search(
        self, conversation: Conversation, question: str, k: int, mode: str = "hybrid"
    ) -> list[str]:
        """Hybrid (RRF, LanceDB's default) or full-text search."""
        table = self.tables.get(conversation.sample_id)
        if table is None:
            return []
        if mode == "fts":
            rows = table.search(question, query_type="fts").limit(k).to_list()
        else:
            vector = self.embeddings.embed_query(question)
            rows = (
                table.search(query_type="hybrid", vector_column_name="vector")
                .vector(vector)
                .text(question)
                .limit(k)
                .to_list()
            )
        return [str(r["dia_id"]) for r in rows]

    def close(self) -> None:
        """Drop the tables' handles."""
        self.tables.clear()


@dataclass
class LanceView:
    """One query mode over the shared LanceDB tables."""

    name: str
    shared: LanceTables
    mode: str
    owns_index: bool

    def index(self, conversation: Conversation) -> None:
        """Write the conversation (only the view that owns the tables writes)."""
        if self.owns_index:
            self.shared.index(conversation)

    def search(self, conversation: Conversation, question: str, k: int) -> list[str]:
        """Search the shared tables in this view's mode."""
        return self.shared.search(conversation, question, k, self.mode)

    def close(self) -> None:
        """Nothing of its own."""


# -- the run --------------------------------------------------------------------------------


@dataclass
class SystemResult:
    """What one system scored and how fast it was."""

    name: str
    overall: Summary
    per_category: dict[int, Summary]
    index_seconds: float
    index_embed_seconds: float
    turns: int
    latencies_ms: list[float] = field(repr=False)
    shares_index_with: str | None = None

    @property
    def turns_per_s(self) -> float:
        """Indexing throughput, every text's embedding charged."""
        return self.turns / self.index_seconds if self.index_seconds > 0 else math.nan

    @property
    def engine_turns_per_s(self) -> float:
        """Indexing throughput with embedding excluded."""
        engine = self.index_seconds - self.index_embed_seconds
        return self.turns / engine if engine > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "name": self.name,
            "overall": self.overall.to_dict(),
            "per_category": {str(c): s.to_dict() for c, s in self.per_category.items()},
            "index_turns_per_s": self.turns_per_s,
            "index_engine_turns_per_s": self.engine_turns_per_s,
            "latency_p50_ms": percentile(self.latencies_ms, 50),
            "latency_p95_ms": percentile(self.latencies_ms, 95),
            "shares_index_with": self.shares_index_with,
        }


@dataclass
class Report:
    """A whole run."""

    source: str
    embeddings: str
    conversations: int
    turns: int
    questions: int
    skipped_questions: int
    query_embed_ms: list[float]
    results: list[SystemResult]
    started: str

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "source": self.source,
            "embeddings": self.embeddings,
            "conversations": self.conversations,
            "turns": self.turns,
            "questions": self.questions,
            "skipped_questions": self.skipped_questions,
            "query_embed_p50_ms": percentile(self.query_embed_ms, 50),
            "query_embed_p95_ms": percentile(self.query_embed_ms, 95),
            "results": [r.to_dict() for r in self.results],
            "started": self.started,
        }


def _build_systems(
    names: Sequence[str], embeddings: MeteredEmbeddings, folder: Path
) -> list[Retriever]:
    systems: list[Retriever] = []
    project: ProjectIndex | None = None
    lance: LanceTables | None = None
    alphas: dict[str, float | None] = {
        "amem": DEFAULT_ALPHA,
        "amem-keyword": 0.0,
        "amem-vector": 1.0,
    }
    for name in names:
        if name in alphas:
            owns = project is None
            if project is None:
                project = ProjectIndex(embeddings, folder / "amem")
            systems.append(ProjectView(name, project, alphas[name], owns))
        elif name == "langgraph":
            systems.append(LangGraphStore(embeddings))
        elif name in ("lancedb-hybrid", "lancedb-fts"):
            owns = lance is None
            if lance is None:
                lance = LanceTables(embeddings, folder / "lancedb")
            systems.append(LanceView(name, lance, name.removeprefix("lancedb-"), owns))
        else:
            raise ValueError(f"unknown system {name!r} (choose from {', '.join(SYSTEMS)})")
    return systems


def run(
    conversations: Sequence[Conversation],
    systems: Sequence[str],
    embeddings: Embeddings,
    *,
    source: str = "",
    embeddings_name: str = "",
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Index every conversation in every system, ask every question, and score the answers."""
    say = progress or (lambda _msg: None)
    metered = MeteredEmbeddings(embeddings)
    questions = [q.text for c in conversations for q in c.questions]
    query_ms = [1000.0 * s for s in metered.prepare(questions)]
    turns = sum(c.turns for c in conversations)
    results: list[SystemResult] = []
    with tempfile.TemporaryDirectory(prefix="amem-locomo-") as tmp:
        built = _build_systems(systems, metered, Path(tmp))
        try:
            for system in built:
                shared = getattr(system, "owns_index", True) is False
                say(f"{system.name}: indexing {turns} turns")
                charged_before = metered.charged_seconds
                computed_before = metered.computed_seconds
                start = time.perf_counter()
                for conversation in conversations:
                    system.index(conversation)
                # Engine time is the wall time less the embedding computed meanwhile; every
                # text is then charged what its embedding took, cached or not.
                engine = (time.perf_counter() - start) - (
                    metered.computed_seconds - computed_before
                )
                embed_took = metered.charged_seconds - charged_before
                # Each search warms its partition first: the first search after writes
                # builds the in-memory index, a one-off cost that is not recall latency.
                scores: list[QuestionScore] = []
                latencies: list[float] = []
                say(f"{system.name}: {len(questions)} questions")
                for conversation in conversations:
                    if conversation.questions:
                        system.search(conversation, conversation.questions[0].text, DEPTH)
                    for question in conversation.questions:
                        t0 = time.perf_counter()
                        ranked = system.search(conversation, question.text, DEPTH)
                        latencies.append(1000.0 * (time.perf_counter() - t0))
                        recall, hit, rr = score_ranking(ranked, question.evidence)
                        scores.append(QuestionScore(question.category, recall, hit, rr))
                headline = [s for s in scores if s.category in HEADLINE_CATEGORIES]
                categories = sorted({s.category for s in scores})
                owner = next(
                    (
                        o.name
                        for o in built
                        if shared
                        and getattr(o, "shared", None) is getattr(system, "shared", None)
                        and getattr(o, "owns_index", False)
                    ),
                    None,
                )
                results.append(
                    SystemResult(
                        name=system.name,
                        overall=summarise(headline),
                        per_category={
                            c: summarise([s for s in scores if s.category == c]) for c in categories
                        },
                        index_seconds=engine + embed_took,
                        index_embed_seconds=embed_took,
                        turns=turns,
                        latencies_ms=latencies,
                        shares_index_with=owner,
                    )
                )
        finally:
            for system in built:
                system.close()
    if metered.uncached_queries:
        raise RuntimeError(
            f"{metered.uncached_queries} queries were embedded during the timed searches"
        )
    return Report(
        source=source,
        embeddings=embeddings_name,
        conversations=len(conversations),
        turns=turns,
        questions=len(questions),
        skipped_questions=sum(c.skipped_questions for c in conversations),
        query_embed_ms=query_ms,
        results=results,
        started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


# -- the report -----------------------------------------------------------------------------


def _f(value: float, digits: int = 3) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def _rate(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:,.0f}"


def render_markdown(report: Report) -> str:
    """Return the side-by-side tables as Markdown."""
    headline = "+".join(str(c) for c in HEADLINE_CATEGORIES)
    lines = [
        f"Data: `{report.source}` ({report.conversations} conversations, {report.turns} turns, "
        f"{report.questions} questions, {report.skipped_questions} skipped for want of "
        f"evidence). Embeddings: {report.embeddings}. Run {report.started}.",
        "",
        f"Overall = categories {headline} pooled; category 5 (adversarial) on its own, "
        "not in the overall. MRR within the top 20. Latency excludes the query embedding "
        f"(p50 {_f(percentile(report.query_embed_ms, 50), 2)} ms, "
        f"p95 {_f(percentile(report.query_embed_ms, 95), 2)} ms per query, measured apart).",
        "",
        "| system | R@1 | R@5 | R@10 | R@20 | hit@10 | MRR | cat 5 R@10 | index turns/s "
        "| engine-only turns/s | recall p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        o = r.overall
        adversarial = r.per_category.get(5)
        shared = r.shares_index_with is not None
        lines.append(
            f"| {r.name} | {_f(o.recall[1])} | {_f(o.recall[5])} | **{_f(o.recall[10])}** "
            f"| {_f(o.recall[20])} | {_f(o.hit[10])} | **{_f(o.mrr)}** "
            f"| {_f(adversarial.recall[10]) if adversarial else '–'} "
            f"| {f'({r.shares_index_with})' if shared else _rate(r.turns_per_s)} "
            f"| {'' if shared else _rate(r.engine_turns_per_s)} "
            f"| {_f(percentile(r.latencies_ms, 50), 2)} | {_f(percentile(r.latencies_ms, 95), 2)} |"
        )
    categories = sorted({c for r in report.results for c in r.per_category})
    lines += [
        "",
        "Recall@10 / MRR per category (questions):",
        "",
        "| system | "
        + " | ".join(
            f"{c} {CATEGORY_NAMES.get(c, '?')} ({report.results[0].per_category[c].questions})"
            if report.results and c in report.results[0].per_category
            else str(c)
            for c in categories
        )
        + " |",
        "|---|" + "---|" * len(categories),
    ]
    for r in report.results:
        cells = []
        for c in categories:
            s = r.per_category.get(c)
            cells.append(f"{_f(s.recall[10])} / {_f(s.mrr)}" if s else "–")
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# -- command line ---------------------------------------------------------------------------


def _select(conversations: list[Conversation], spec: str | None) -> list[Conversation]:
    if not spec:
        return conversations
    chosen: list[Conversation] = []
    by_id = {c.sample_id: c for c in conversations}
    for part in spec.split(","):
        part = part.strip()
        if part in by_id:
            chosen.append(by_id[part])
        elif part.isdigit() and int(part) < len(conversations):
            chosen.append(conversations[int(part)])
        else:
            raise LocomoFormatError(
                f"--conversations: {part!r} is neither a sample_id nor an index below "
                f"{len(conversations)}"
            )
    return chosen


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark from the command line; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("data", help="a LoCoMo-format JSON file (e.g. locomo10.json)")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated, from {', '.join(SYSTEMS)} (default: all)",
    )
    parser.add_argument(
        "--conversations", help="comma-separated sample_ids or 0-based indexes (default: all)"
    )
    parser.add_argument(
        "--embeddings",
        help="local, minilm, minilm-fp32, minilm-numpy or openai:<model> "
        "(default: AMEM_EMBEDDINGS, as the agent)",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown tables to this file")
    parser.add_argument("--json", type=Path, help="also write every number as JSON")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        parser.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    try:
        conversations = _select(load_locomo(args.data), args.conversations)
        with _env("AMEM_EMBEDDINGS", args.embeddings):
            settings = EmbeddingSettings.from_env()
            embeddings = get_embeddings(settings)
    except (LocomoFormatError, ValueError, InvalidInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = [n for n in names if n.startswith("lancedb") and not _has("lancedb")]
    if missing:
        print(
            "error: the LanceDB peers need the benchmark dependencies: "
            "pip install -c constraints.txt --group bench (or leave them out with --systems)",
            file=sys.stderr,
        )
        return 2
    model = settings.model
    if settings.provider == "minilm":
        model += f" {settings.minilm_runtime}"
    label = f"{settings.provider}:{model} ({embedding_dims(embeddings)}-d)"
    report = run(
        conversations,
        names,
        embeddings,
        source=Path(args.data).name,
        embeddings_name=label,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    table = render_markdown(report)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table, encoding="utf-8")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
