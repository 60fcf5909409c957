"""A plain model of Weaviate's hybrid ranking at the pinned version, the oracle of the differential tests.

Written straight from the server's source (``weaviate/weaviate`` at tag ``v`` +
``agentic_memory.store.ranking.WEAVIATE_VERSION``, the one constant this model shares with the
store); every function names the file and function it follows. It is deliberately
unoptimised and shares no ranking code with ``agentic_memory.store``: it scores every document
of a shard term by term, as the server's BlockMax-WAND search would if it had to look at all
of them (WAND only skips documents that cannot enter a top k, so the result is the same as
long as its block bounds hold; ``bm25`` reports where they may not, D6).

It models one shard (a tenant, or a shared collection on one node) as the server keeps it:
per searchable property an LSM bucket of the ``inverted`` strategy, with a memtable and the
disk segments that flushes write and compactions merge (``Shard.flush``, ``Shard.compact``),
and the statistics the server reads from them: average lengths that keep deleted and
replaced versions (D2) and are truncated once a segment exists (D3), one top-k heap per
segment (D4), document frequencies that count superseded postings until a compaction (D7).
A shard that was never flushed has exact statistics: what the embedded store computes. The
``Shard`` switches turn each of those behaviours off, for what-if comparisons
(``churn_whatif.py``).

The collection is created without an inverted-index config (BlockMax WAND, k1 and b as
float32 1.2 and 0.75, ``en`` stopwords), fused with relativeScoreFusion, no autocut, and the
default ``QUERY_HYBRID_MAXIMUM_RESULTS`` (100) and ``QUERY_MAXIMUM_RESULTS`` (10,000).

Where the server's behaviour is unspecified (equal cosine distances at the vector candidate
cut, the order of chains of near-equal fused scores, Go map order) the model states the
convention it uses.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from agentic_memory.store.ranking import WEAVIATE_VERSION

SERVER_VERSION = WEAVIATE_VERSION
# usecases/config/config_handler.go DefaultBM25k1/DefaultBM25b are float32; the class config
# carries them as float32 and entities/schema/inverted_index_config.go widens them.
K1 = float(np.float32(1.2))
B = float(np.float32(0.75))
QUERY_HYBRID_MAXIMUM_RESULTS = 100
QUERY_MAXIMUM_RESULTS = 10_000
BLOCK_SIZE = 128
"""``inverted/terms/terms_block.go`` BLOCK_SIZE: postings per block of a disk segment."""
MAX_REUSE_WAL_SIZE = 4096
"""``usecases/config`` DefaultPersistenceMaxReuseWalSize: a memtable whose write-ahead log is
at most this many bytes is not flushed at shutdown (``lsmkv/bucket.go`` shouldReuseWAL); its
log is replayed into a memtable when the shard loads again."""
DEFAULT_AVERAGE_PROP_LENGTH = 40.0
"""``lsmkv/segment_serialization_inverted.go`` defaultAveragePropLength: what the segment
group reports when its segments count no document (it then also reports a count of 0)."""

# adapters/repos/db/inverted/stopwords/presets.go, preset "en".
EN_STOPWORDS = {
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for",
    "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that",
    "the", "their", "then", "there", "these", "they", "this", "to", "was", "will",
    "with",
}  # fmt: skip


# -- tokenisation ------------------------------------------------------------------------------


def _is_letter_or_number(char: str) -> bool:
    # Go: unicode.IsLetter (category L*) || unicode.IsNumber (category N*).
    return unicodedata.category(char)[0] in "LN"


def _go_to_lower_rune(char: str) -> str:
    # Go: unicode.ToLower, the simple (one rune to one rune) mapping of UnicodeData.txt.
    # Python's one-character lower() is the same except where SpecialCasing gives several
    # characters, which is only U+0130 (LATIN CAPITAL LETTER I WITH DOT ABOVE -> i).
    if char == "\u0130":
        return "i"
    lowered = char.lower()
    return lowered if len(lowered) == 1 else char


def tokenize_word(text: str) -> list[str]:
    """``adapters/repos/db/helpers/tokenizer.go`` ``tokenizeWord``.

    ``strings.FieldsFunc`` on "not a letter and not a number", then ``strings.ToLower`` of
    each term, rune by rune.
    """
    terms: list[str] = []
    current: list[str] = []
    for char in text:
        if _is_letter_or_number(char):
            current.append(char)
        elif current:
            terms.append("".join(current))
            current = []
    if current:
        terms.append("".join(current))
    return ["".join(_go_to_lower_rune(c) for c in term) for term in terms]


def tokenize_and_count_duplicates(query: str) -> dict[str, int]:
    """``helpers/tokenizer.go`` ``TokenizeAndCountDuplicates``, then the stopword removal of
    ``inverted/bm25_searcher.go`` ``removeStopwordsFromQueryTerms`` (word tokenisation only).

    The server iterates a Go map (random order); the model keeps first-occurrence order, which
    only decides the order of float64 additions.
    """
    counts: dict[str, int] = {}
    for term in tokenize_word(query):
        counts[term] = counts.get(term, 0) + 1
    return {t: c for t, c in counts.items() if t not in EN_STOPWORDS}


def analyze_text(value: Any) -> dict[str, int]:
    """``inverted/analyzer.go`` ``TextArray``: the terms of every element and their counts."""
    return dict(_analyze(tuple(value) if isinstance(value, list) else (value,)))


@functools.lru_cache(maxsize=1 << 16)
def _analyze(elements: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    # Cached only because the model re-reads every document for every query.
    counts: dict[str, int] = {}
    for element in elements:
        for term in tokenize_word(element):
            counts[term] = counts.get(term, 0) + 1
    return tuple(counts.items())


# -- the shard ---------------------------------------------------------------------------------


@dataclass
class Doc:
    """One stored object; ``doc_id`` is the shard's internal docID."""

    uuid: str
    properties: dict[str, Any]
    vector: list[float]
    doc_id: int


@dataclass(frozen=True)
class Posting:
    """One document's entry for a term: its count and the property's length (the map pair's
    value, ``shard_write_inverted_lsm.go``)."""

    tf: int
    length: int


def _wal_bytes(term: str, posting: Posting | None) -> int:
    """Bytes one map-pair write adds to the write-ahead log (``Bucket.MapSet`` and
    ``MapDeleteKey`` append one pair each).

    ``lsmkv/commitlogger.go`` writeEntry: type, version and node length (6), the node, a CRC32
    (4); the node (``segmentCollectionNode.KeyIndexAndWriteTo``): value count (8), tombstone
    flag and value length (9), ``MapPair.Bytes`` (key length 2, docID 8, value length 2, the
    value: tf and length as float32, 8 bytes, none for a tombstone), key length (4), the term.
    """
    value = 0 if posting is None else 8
    return 6 + 8 + 9 + 2 + 8 + 2 + value + 4 + len(term.encode("utf-8")) + 4


WAL_MARGIN = 256
"""Bytes either side of ``MAX_REUSE_WAL_SIZE`` within which ``flush`` reports the outcome as
uncertain, a guard against a miscount of the log's format."""


@dataclass
class Memtable:
    """The active memtable of one property's bucket (``lsmkv/memtable.go``, inverted strategy)."""

    pairs: dict[str, dict[int, Posting | None]] = field(default_factory=dict)
    """Per term and docID, the last pair written: ``binarySearchNodeMap.insert`` appends and
    ``sortAndDedupValues`` keeps the last write of a docID. ``None`` is a tombstone pair
    (``Bucket.MapDeleteKey``)."""
    tombstones: set[int] = field(default_factory=set)
    """docIDs deleted in this memtable (``MapDeleteKey`` calls ``SetTombstone``): they hide
    the docID in every older segment."""
    wal: int = 0
    """Bytes written to the write-ahead log (``commitLogger.size``)."""

    def write(self, term: str, doc_id: int, posting: Posting | None) -> None:
        self.pairs.setdefault(term, {})[doc_id] = posting
        if posting is None:
            self.tombstones.add(doc_id)
        self.wal += _wal_bytes(term, posting)

    def live(self) -> dict[str, dict[int, Posting]]:
        """The pairs that are not tombstones, per term, in docID order."""
        out: dict[str, dict[int, Posting]] = {}
        for term, docs in self.pairs.items():
            kept = {d: p for d, p in sorted(docs.items()) if p is not None}
            if kept:
                out[term] = kept
        return out

    def lengths(self) -> dict[int, int]:
        """``Memtable.GetPropLengths`` and ``flushDataInverted``: the length of every docID
        with a live pair, counted once (keys in byte order, first occurrence)."""
        out: dict[int, int] = {}
        for term in sorted(self.pairs, key=lambda t: t.encode("utf-8")):
            for doc_id, posting in sorted(self.pairs[term].items()):
                if posting is not None and doc_id not in out:
                    out[doc_id] = posting.length
        return out


@dataclass
class Segment:
    """One disk segment of a property's bucket (``lsmkv/segment_inverted.go``)."""

    postings: dict[str, dict[int, Posting]]
    """Per term, the postings written, in docID order; their number is the term's docCount
    (``getDocCount``), whether or not a later segment deleted the document."""
    tombstones: set[int]
    """The segment's own deletions and every later flush's (``MergeTombstones``)."""
    average: float
    """``avgPropertyLengthsAvg``: the mean length of the documents written to the segment."""
    count: int
    """``avgPropertyLengthsCount``: how many documents that mean is over."""
    level: int = 0
    build_average: float = 0.0
    """The average the block bounds were computed with (the bucket's, at flush or compaction)."""


@dataclass
class Bucket:
    """One searchable property's ``inverted`` bucket: a memtable and disk segments, oldest first."""

    memtable: Memtable = field(default_factory=Memtable)
    segments: list[Segment] = field(default_factory=list)

    def disk_average(self) -> tuple[float, int]:
        """``lsmkv/segment_group.go`` ``GetAveragePropertyLength``: the segments' averages,
        weighted by their counts, and the total count."""
        if not self.segments:
            return 0.0, 0
        total = sum(s.count for s in self.segments)
        if total == 0:
            return DEFAULT_AVERAGE_PROP_LENGTH, 0
        weighted = 0.0
        for s in self.segments:
            weighted += float(s.count) / float(total) * s.average
        return weighted, total

    def flush(self) -> None:
        """``lsmkv/memtable_flush_inverted.go`` ``flushDataInverted`` and ``Bucket.FlushAndSwitch``.

        The segment's average is over the docIDs with a live pair (0, with a count of 0, when
        the memtable held only deletions: 1.32.26 and later; earlier versions wrote 0/0, a NaN
        that spread to every later average, D1). The memtable's tombstones are merged into
        every existing segment.
        """
        memtable = self.memtable
        lengths = memtable.lengths()
        count = len(lengths)
        total = sum(lengths.values())
        average = float(total) / float(count) if count else 0.0
        disk, disk_count = self.disk_average()
        # setAveragePropertyLength(disk) then flushDataInverted's weighted m.averagePropLength.
        if disk == 0:
            build = average
        else:
            build = (disk * float(disk_count) + float(total)) / float(disk_count + count)
        for segment in self.segments:
            segment.tombstones |= memtable.tombstones
        self.segments.append(
            Segment(memtable.live(), set(memtable.tombstones), average, count, 0, build)
        )
        self.memtable = Memtable()

    def compaction_pair(self) -> int | None:
        """``lsmkv/segment_group_compaction.go`` ``findCompactionCandidates`` for segments of
        ordered levels and no size limit: the oldest pair of the newest run of equal levels."""
        found: int | None = None
        for i in range(len(self.segments) - 2, -1, -1):
            left, right = self.segments[i].level, self.segments[i + 1].level
            if left < right:
                break
            if left == right:
                found = i
            elif found is not None:
                break
        return found

    def compact_once(self, i: int) -> None:
        """``lsmkv/compactor_inverted.go``: merge segments i and i + 1.

        The older segment's postings of documents the newer one's tombstones hold are dropped
        (``cleanupValues``), the newer segment's win; the average and count are the counts'
        weighted mean and sum (``combinePropertyLengths``: deleted and replaced versions stay
        counted, D2); the tombstones go when the pair starts the bucket.
        """
        old, new = self.segments[i], self.segments[i + 1]
        postings: dict[str, dict[int, Posting]] = {}
        for term in set(old.postings) | set(new.postings):
            merged = {
                d: p for d, p in old.postings.get(term, {}).items() if d not in new.tombstones
            }
            merged.update(new.postings.get(term, {}))
            if merged:
                postings[term] = dict(sorted(merged.items()))
        count = old.count + new.count
        average = 0.0
        for part in (old, new):
            if part.count > 0 and math.isfinite(part.average):
                average += part.average * (float(part.count) / float(count))
        build = self.disk_average()[0]
        tombstones = set() if i == 0 else old.tombstones | new.tombstones
        merged_segment = Segment(postings, tombstones, average, count, old.level + 1, build)
        self.segments[i : i + 2] = [merged_segment]


def _items(properties: dict[str, Any], name: str) -> dict[str, int]:
    value = properties.get(name)
    return {} if value is None else analyze_text(value)


def _vectors_equal(a: list[float], b: list[float]) -> bool:
    # common.VectorsEqual on the stored float32 vectors.
    return len(a) == len(b) and bool(
        np.array_equal(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32))
    )


@dataclass
class Shard:
    """The live objects of one shard, the searchable properties of its class, and their buckets.

    Writes go to the memtables; ``flush`` writes them to segments (what a shard does 60 s
    after its first unflushed write, at shutdown, or when deactivated), ``compact`` merges
    segments (every few seconds on a server). The switches below are the server's
    behaviour; turning one off gives the exact statistic instead, for what-if comparisons.
    """

    searchable: list[str]
    docs: dict[str, Doc] = field(default_factory=dict)
    counter: int = 0
    buckets: dict[str, Bucket] = field(default_factory=dict)
    memtable_pruning: bool = False
    """Model 1.32.x's memtable WAND bound: a memtable term's upper bound is 0 after ``SetIdf``
    (``lsmkv/bucket.go`` addDataToTerm leaves MaxImpactTf at 0; fixed upstream in 2a4878d6,
    1.36.19), so once the memtable's heap of a property holds k documents no further one of
    the memtable is scored. Off by default: the embedded store ranks as the fix does."""
    keep_versions: bool = True
    """D2: averages keep deleted and replaced versions once they were flushed."""
    truncate_average: bool = True
    """D3: the segments' share of an average is truncated to an integer sum."""
    heap_per_segment: bool = True
    """D4: each segment (and the memtable) of a property keeps its own top k."""
    count_superseded: bool = True
    """D7: n counts every posting a segment holds, also of deleted or replaced versions."""
    replay_loses_tombstones: bool = True
    """D13: a memtable replayed from its write-ahead log loses its tombstones (``reload``)."""
    uncertain_rewrites: list[str] = field(default_factory=list)
    """Updates whose outcome depends on Go map order (see ``put``)."""
    uncertain_flushes: list[str] = field(default_factory=list)
    """Properties whose write-ahead log size could not tell whether a shutdown flushed them."""

    def __post_init__(self) -> None:
        for name in self.searchable:
            self.buckets.setdefault(name, Bucket())

    def put(self, uuid: str, properties: dict[str, Any], vector: list[float]) -> None:
        """``shard_write_put.go`` ``putObjectLSM``.

        ``determineInsertStatus``: a new object, or an update whose vector changed, gets the
        next docID and the old docID's postings are deleted; an update with the same vector
        keeps its docID and, unless nothing changed (``skipUpsert``), rewrites each
        searchable property whose terms changed (``inverted/delta_analyzer.go``
        ``DeltaSkipSearchable``: all its old postings deleted, all new ones added).
        ``listsIdentical`` compares the terms in Go map order (``Analyzer.TextArray`` counts
        them in a map), so an unchanged property of more than one distinct term is rewritten
        unless two random orders agree: the model rewrites it and notes the object in
        ``uncertain_rewrites``.
        """
        props = dict(properties)
        previous = self.docs.get(uuid)
        if previous is None:
            doc_id = self._next_doc_id()
            self._index(doc_id, props)
        elif _vectors_equal(previous.vector, vector):
            if previous.properties == props:
                return
            doc_id = previous.doc_id
            for name in self.searchable:
                before, after = _items(previous.properties, name), _items(props, name)
                if before == after:
                    if len(before) > 1:
                        self.uncertain_rewrites.append(uuid)
                    else:
                        continue
                self._write(name, doc_id, before, None)
                self._write(name, doc_id, after, sum(after.values()))
        else:
            doc_id = self._next_doc_id()
            self._unindex(previous.doc_id, previous.properties)
            self._index(doc_id, props)
        self.docs[uuid] = Doc(uuid, props, list(vector), doc_id)

    def delete(self, uuid: str) -> None:
        """``shard_write_delete.go``: every searchable term of the object gets a tombstone."""
        previous = self.docs.pop(uuid, None)
        if previous is not None:
            self._unindex(previous.doc_id, previous.properties)

    def flush(self, *, force: bool = False) -> dict[str, bool]:
        """Flush each property's memtable whose log exceeds 4 KB to a new segment; return
        which were flushed.

        The server never writes a memtable whose write-ahead log is at most
        ``MAX_REUSE_WAL_SIZE`` bytes to a segment (``lsmkv/bucket.go`` shouldReuseWAL): the
        periodic flush (``flushAndSwitchIfThresholdsMet``, 60 s after the first write) returns
        before its timer is even read, and a shutdown or a deactivation (``Bucket.Shutdown``)
        keeps the log, replayed when the shard loads again (``reload``). A size within
        ``WAL_MARGIN`` of that limit is named in ``uncertain_flushes``; an empty memtable is
        never flushed. ``force`` flushes small memtables too, which no path of the store's
        does: tests use it to build segments of a few objects by hand.
        """
        flushed: dict[str, bool] = {}
        for name, bucket in self.buckets.items():
            size = bucket.memtable.wal
            if not force and abs(size - MAX_REUSE_WAL_SIZE) <= WAL_MARGIN:
                self.uncertain_flushes.append(name)
            if not bucket.memtable.pairs or (not force and size <= MAX_REUSE_WAL_SIZE):
                flushed[name] = False
                continue
            bucket.flush()
            flushed[name] = True
        return flushed

    def reload(self) -> None:
        """The shard loads again (a restart, a crash, a tenant activated after a deactivation):
        each memtable that was kept is replayed from its write-ahead log
        (``lsmkv/bucket_recover_from_wal.go``).

        D13: 1.32 replays a tombstone pair with the docID read from the serialised pair
        instead of its key (``commitlogger_parser_collection.go`` parseMapNode,
        ``binary.BigEndian.Uint64(val.value)``: the key's length and six bytes of the docID),
        so the replayed memtable's tombstones name no real document: the older segments'
        postings of every document that memtable deleted or rewrote are visible again, now
        and after the memtable is flushed (its segment carries the same tombstones).
        Fixed upstream in 7d9fb00b (weaviate#10271: 1.33.14, 1.34.11, 1.36.0), never in 1.32.
        """
        if self.replay_loses_tombstones:
            for bucket in self.buckets.values():
                bucket.memtable.tombstones = set()

    def compact(self) -> None:
        """Compact every bucket until no pair of equal levels is left."""
        for bucket in self.buckets.values():
            while (pair := bucket.compaction_pair()) is not None:
                bucket.compact_once(pair)

    def compaction_states(self) -> list[Shard]:
        """Every state a server's background compaction passes through from this one.

        Each bucket (a searchable property) is compacted on its own, one pair at a time, so a
        search between two cycles can meet any bucket at any of its steps: this shard, the
        fully compacted one, and every mix in between.
        """
        steps: dict[str, list[Bucket]] = {}
        for name, bucket in self.buckets.items():
            current = copy.deepcopy(bucket)
            found = [copy.deepcopy(current)]
            while (pair := current.compaction_pair()) is not None:
                current.compact_once(pair)
                found.append(copy.deepcopy(current))
            steps[name] = found
        states = []
        for combination in itertools.product(*steps.values()):
            state = copy.deepcopy(self)
            state.buckets = dict(zip(steps, combination, strict=True))
            states.append(state)
        return states

    def by_doc_id(self) -> list[Doc]:
        return sorted(self.docs.values(), key=lambda d: d.doc_id)

    def _next_doc_id(self) -> int:
        doc_id = self.counter
        self.counter += 1
        return doc_id

    def _index(self, doc_id: int, props: dict[str, Any]) -> None:
        for name in self.searchable:
            items = _items(props, name)
            self._write(name, doc_id, items, sum(items.values()))

    def _unindex(self, doc_id: int, props: dict[str, Any]) -> None:
        for name in self.searchable:
            self._write(name, doc_id, _items(props, name), None)

    def _write(self, name: str, doc_id: int, items: dict[str, int], length: int | None) -> None:
        memtable = self.buckets[name].memtable
        for term, tf in items.items():
            memtable.write(term, doc_id, None if length is None else Posting(tf, length))


# -- filters -----------------------------------------------------------------------------------


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _field_token(value: str) -> str:
    # helpers/tokenizer.go tokenizeField: strings.TrimFunc(in, unicode.IsSpace).
    return value.strip()


def matches(doc: Doc, where: list[tuple[str, str, Any, str]]) -> bool:
    """Evaluate AND-ed conditions ``(property, operator, value, type)`` on one object.

    ``inverted/searcher.go`` and the row readers: text is compared as the field token (the
    whole value, surrounding whitespace trimmed); ``NotEqual`` is every document minus the
    equal ones, so objects without the property match it; ``ContainsAny`` on an array matches
    when any element is among the values.
    """
    for prop, op, value, ptype in where:
        have = doc.properties.get(prop)
        if op == "ne":
            if have is not None and _compare(have, value, ptype) == 0:
                return False
            continue
        if have is None:
            return False
        if op == "contains":
            if not any(_field_token(v) == _field_token(value) for v in have):
                return False
        elif op == "in":
            if not any(_compare(have, v, ptype) == 0 for v in value):
                return False
        else:
            c = _compare(have, value, ptype)
            ok = {"eq": c == 0, "gt": c > 0, "gte": c >= 0, "lt": c < 0, "lte": c <= 0}[op]
            if not ok:
                return False
    return True


def _compare(have: Any, value: Any, ptype: str) -> int:
    if ptype == "text":
        a, b = _field_token(have), _field_token(value)
    elif ptype == "date":
        a, b = _instant(have), _instant(value)
    else:
        a, b = have, value
    return (a > b) - (a < b)


# -- BM25: BlockMax WAND ------------------------------------------------------------------------


def _live_lengths(shard: Shard, prop: str) -> list[int]:
    lengths = [sum(analyze_text(d.properties[prop]).values()) for d in _having(shard, prop)]
    return [n for n in lengths if n > 0]


def property_average_length(shard: Shard, prop: str) -> float:
    """``lsmkv/bucket.go`` ``Bucket.GetAveragePropertyLength``.

    The memtable's sum and count of lengths (exact: deletions replace postings there), plus
    the segments' weighted average times their count, truncated to an integer
    (``uint64(...)``, D3), over the memtable's and the segments' counts together. Segments
    count every version they were written with (D2). A shard that was never flushed gives
    the mean length of the documents with at least one token in the property.
    """
    if not shard.keep_versions:
        lengths = _live_lengths(shard, prop)
        return sum(lengths) / len(lengths) if lengths else 0.0
    bucket = shard.buckets[prop]
    memtable = bucket.memtable.lengths()
    total: float = float(sum(memtable.values()))
    count = len(memtable)
    disk, disk_count = bucket.disk_average()
    if disk_count != 0:
        share = disk * float(disk_count)
        total += float(int(share)) if shard.truncate_average else share
        count += disk_count
    if count == 0:
        return 0.0
    return total / float(count)


def _having(shard: Shard, prop: str) -> list[Doc]:
    return [d for d in shard.by_doc_id() if d.properties.get(prop) is not None]


def doc_frequency(shard: Shard, prop: str, term: str) -> int:
    """``lsmkv/bucket.go`` ``createDiskTermFromCV``: n counts the memtable's live pairs of the
    term and every posting the segments hold (``getDocCount``), before any filter: a posting
    a later segment deleted or replaced still counts until a compaction drops it (D7)."""
    if not shard.count_superseded:
        return sum(1 for d in _having(shard, prop) if term in analyze_text(d.properties[prop]))
    bucket = shard.buckets[prop]
    memtable = sum(1 for p in bucket.memtable.pairs.get(term, {}).values() if p is not None)
    return memtable + sum(len(s.postings.get(term, {})) for s in bucket.segments)


def global_idf(shard: Shard, term: str, repeats: int) -> float:
    """``inverted/bm25_searcher_block.go`` ``wandBlock``: the per-property document frequencies
    that are not zero are averaged with an integer division; N is the shard's object count
    (``generateQueryTermsAndStats``). With superseded postings counted, n can exceed N and
    the idf go negative."""
    freqs = [doc_frequency(shard, p, term) for p in shard.searchable]
    nonzero = [n for n in freqs if n > 0]
    if not nonzero:
        return 0.0
    n = sum(nonzero) // len(nonzero)
    big_n = len(shard.docs)
    return math.log(1.0 + (big_n - n + 0.5) / (n + 0.5)) * repeats


def _weight(tf: float, length: float, avg: float) -> float:
    # lsmkv/segment_blockmax.go Score: freq / (freq + k1*((1-b) + b*(propLength/avg))).
    return tf / (tf + K1 * ((1 - B) + B * (length / avg)))


@dataclass
class _Part:
    """A segment (or the memtable) of one property, as a query sees it."""

    postings: dict[str, dict[int, Posting]]
    hidden: set[int]
    segment: Segment | None  # None: the memtable


def _parts(shard: Shard, prop: str) -> list[_Part]:
    """``createDiskTermFromCV``: the disk segments, oldest first, then the memtable. A
    segment's postings are hidden when a later segment's or the memtable's tombstones hold
    the docID (its own tombstones only hide older segments)."""
    bucket = shard.buckets[prop]
    parts: list[_Part] = []
    for j, segment in enumerate(bucket.segments):
        hidden = set(bucket.memtable.tombstones)
        for later in bucket.segments[j + 1 :]:
            hidden |= later.tombstones
        parts.append(_Part(segment.postings, hidden, segment))
    parts.append(_Part(bucket.memtable.live(), set(), None))
    if shard.heap_per_segment:
        return parts
    # One heap per property: the visible postings of every part together.
    merged: dict[str, dict[int, Posting]] = {}
    for part in parts:
        for term, docs in part.postings.items():
            for doc_id, posting in docs.items():
                if doc_id not in part.hidden:
                    merged.setdefault(term, {})[doc_id] = posting
    return [_Part(merged, set(), None)]


def _part_scores(
    part: _Part,
    terms: dict[str, int],
    idfs: dict[str, float],
    avg: float,
    allowed: set[int] | None,
) -> dict[int, float]:
    """Per matching, visible, allowed docID: the float64 sum over the query terms of
    ``weight · idf`` (``DoBlockMaxWand`` adds a document's terms in the order of its term
    lists; the model adds them in query order)."""
    scores: dict[int, float] = {}
    for term in terms:
        for doc_id, posting in part.postings.get(term, {}).items():
            if doc_id in part.hidden or (allowed is not None and doc_id not in allowed):
                continue
            w = _weight(float(posting.tf), float(posting.length), avg)
            scores[doc_id] = scores.get(doc_id, 0.0) + w * idfs[term] * 1.0
    return scores


def _top_k(scores: dict[int, float], k: int) -> list[int]:
    """``priorityqueue.NewMinWithId`` with ``ShouldEnqueue`` (strictly greater) over documents
    in docID order: the k best float32 scores, ties kept by the lowest docIDs."""
    return sorted(scores, key=lambda d: (-float(np.float32(scores[d])), d))[:k]


def _block_bounds_fail(
    part: _Part,
    terms: dict[str, int],
    idfs: dict[str, float],
    avg: float,
    allowed: set[int] | None,
    scores: dict[int, float],
    kept: list[int],
) -> str | None:
    """Why BlockMax WAND might miss a document of this segment's top k, or ``None``.

    A block stores the (tf, length) pair of its best posting at the average of its flush or
    compaction (``segment_serialization_inverted.go`` createBlocks); a query recomputes that
    pair's impact at the current average (``computeCurrentBlockImpact``). When the averages
    differ another posting of the block can score higher than the bound, and WAND may skip
    it (D6). The bounds are also float32 sums of float32 impacts, which can fall a rounding
    step below a document's float32 score.
    """
    segment = part.segment
    if segment is None:
        return None
    for term in terms:
        postings = list(part.postings.get(term, {}).items())
        for start in range(0, len(postings), BLOCK_SIZE):
            block = postings[start : start + BLOCK_SIZE]
            best, pair = 0.0, (0, 0)
            for _, p in block:
                impact = _weight(float(p.tf), float(p.length), segment.build_average)
                if impact > best:
                    best, pair = impact, (p.tf, p.length)
            bound = np.float32(idfs[term] * _weight(float(pair[0]), float(pair[1]), avg) * 1.0)
            for doc_id, p in block:
                if doc_id in part.hidden or (allowed is not None and doc_id not in allowed):
                    continue
                own = np.float32(idfs[term] * _weight(float(p.tf), float(p.length), avg) * 1.0)
                if own > bound:
                    return f"D6: a block bound of {term!r} is below a posting's impact"
    kth = np.float32(scores[kept[-1]])
    for doc_id in kept:
        own_sum = np.float32(0)
        for term in terms:
            posting = part.postings.get(term, {}).get(doc_id)
            if posting is not None:
                w = _weight(float(posting.tf), float(posting.length), avg)
                own_sum = np.float32(own_sum + np.float32(idfs[term] * w * 1.0))
        score = np.float32(scores[doc_id])
        if own_sum < score and own_sum < kth:
            return "D6: a float32 sum of block bounds is below a kept document's score"
    return None


def property_scores(
    shard: Shard,
    prop: str,
    terms: dict[str, int],
    idfs: dict[str, float],
    allowed: set[str] | None,
    k: int,
    report: list[str] | None = None,
) -> dict[str, np.float32]:
    """One property's candidates: ``DoBlockMaxWand`` per segment, ``combineResults``.

    Each segment (and the memtable) keeps its own top k (``wandBlock`` runs one heap per
    property and segment, D4), kept as float32 (``priorityqueue.InsertAndPop``); the kept
    documents of all segments are the property's. With ``memtable_pruning`` the memtable
    keeps its first k matches in docID order instead. ``allowed`` ``None``: no filter.
    """
    avg = property_average_length(shard, prop)
    # Without a filter every posting is scored, also a deleted document's that D13 left
    # visible: it takes a place in the heap, and then has no object (below).
    allowed_ids = None if allowed is None else {shard.docs[u].doc_id for u in allowed}
    uuid_of = {d.doc_id: d.uuid for d in shard.docs.values()}
    out: dict[str, np.float32] = {}
    for part in _parts(shard, prop):
        scores = _part_scores(part, terms, idfs, avg, allowed_ids)
        if part.segment is None and shard.memtable_pruning and shard.heap_per_segment:
            kept = sorted(scores)[:k]
        else:
            kept = _top_k(scores, k)
        if report is not None and len(scores) > k:
            reason = _block_bounds_fail(part, terms, idfs, avg, allowed_ids, scores, kept)
            if reason is not None:
                report.append(f"{reason} (property {prop!r})")
        for doc_id in kept:
            # A docID in several parts: the later part's score wins (``combineResults``).
            # A deleted document has no object: ``getObjectsAndScores`` skips it.
            if doc_id in uuid_of:
                out[uuid_of[doc_id]] = np.float32(scores[doc_id])
    return out


def top_k_by_score_then_doc_id(
    shard: Shard, scores: dict[str, np.float32], k: int
) -> dict[str, np.float32]:
    """The k best scores, ties kept by the lowest docIDs (``sortResultsByScore`` reversed)."""
    order = sorted(scores, key=lambda u: (-float(scores[u]), shard.docs[u].doc_id))
    return {u: scores[u] for u in order[:k]}


def bm25(
    shard: Shard,
    query: str,
    limit: int,
    allowed: set[str] | None,
    report: list[str] | None = None,
) -> list[tuple[str, np.float32]]:
    """``inverted/bm25_searcher_block.go`` ``wandBlock`` and ``combineResults``, then
    ``getObjectsAndScores``' order (score desc, UUID asc); ``allowed`` ``None``: no filter."""
    terms = tokenize_and_count_duplicates(query)
    if not terms or not shard.searchable:
        return []
    idfs = {t: global_idf(shard, t, c) for t, c in terms.items()}
    per_property = int(max(float(limit) * 1.1, float(limit + 10)))
    combined: dict[str, np.float32] = {}
    for prop in shard.searchable:  # query properties, in the order the client sends them
        kept = property_scores(shard, prop, terms, idfs, allowed, per_property, report)
        for uuid, score in kept.items():
            combined[uuid] = score if uuid not in combined else np.float32(combined[uuid] + score)
    best = top_k_by_score_then_doc_id(shard, combined, limit)
    return sorted(best.items(), key=lambda kv: (-float(kv[1]), kv[0]))


# -- vector search -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def _normalize(vector: tuple[float, ...]) -> tuple[float, ...]:
    # vector/hnsw/distancer Normalize: each float32 component divided by the float32 norm.
    values = np.asarray(vector, dtype=np.float32)
    norm = np.float32(math.sqrt(math.fsum(float(x) * float(x) for x in values)))
    return tuple(float(np.float32(x / norm)) for x in values)


def cosine_distance(a: list[float], b: list[float]) -> np.float32:
    """The ``cosine-dot`` distancer: ``1 - dot`` of the normalised float32 vectors.

    The dot product is taken exactly and rounded once; the server's SIMD float32 sum may differ
    in the last bits (``docs/storage.md`` measures what that changes).
    """
    dot = math.fsum(x * y for x, y in zip(_normalize(tuple(a)), _normalize(tuple(b)), strict=True))
    return np.float32(np.float32(1) - np.float32(dot))


def near_vector(
    shard: Shard, vector: list[float], limit: int, allowed: set[str]
) -> list[tuple[str, np.float32]]:
    """The k nearest objects by cosine distance. A flat or HNSW search; equal distances at the
    cut are not ordered by the server, the model keeps the lowest docIDs."""
    dists = {
        d.uuid: cosine_distance(vector, d.vector) for d in shard.by_doc_id() if d.uuid in allowed
    }
    order = sorted(dists, key=lambda u: (float(dists[u]), shard.docs[u].doc_id))[:limit]
    return [(u, dists[u]) for u in order]


# -- hybrid --------------------------------------------------------------------------------------


@dataclass
class Result:
    uuid: str
    score: np.float32
    secondary: np.float32
    keyword: np.float32 | None = None
    vector: np.float32 | None = None


def fusion_relative_score(
    weights: list[float], sets: list[list[tuple[str, np.float32]]]
) -> dict[str, Result]:
    """``usecases/traverser/hybrid/hybrid_fusion.go`` ``FusionRelativeScore``."""
    merged: dict[str, Result] = {}
    for i, result_set in enumerate(sets):
        if not result_set:
            continue
        maximum = max(v for _, v in result_set)
        minimum = min(v for _, v in result_set)
        weight = np.float32(weights[i])
        for uuid, value in result_set:
            score = weight
            if maximum != minimum:
                score = np.float32(score * np.float32((value - minimum) / (maximum - minimum)))
            previous = merged.get(uuid)
            if previous is not None:
                score = np.float32(score + previous.score)
            result = Result(uuid, score, value)
            if previous is not None:
                result.keyword, result.vector = previous.keyword, previous.vector
            merged[uuid] = result
    return merged


def _less(a: Result, b: Result) -> bool:
    """The ``sort.Slice`` comparison of ``FusionRelativeScore`` (descending)."""
    a_b = float(np.float32(b.score - a.score))
    if a_b * a_b < 1e-14:
        a_b2 = float(np.float32(b.secondary - a.secondary))
        if a_b2 * a_b2 < 1e-14:
            return a.uuid < b.uuid
        return bool(a.secondary > b.secondary)
    return float(a.score) > float(b.score)


def _near(a: np.float32, b: np.float32) -> bool:
    a_b = float(np.float32(b - a))
    return a_b * a_b < 1e-14


def sort_fused(results: list[Result]) -> list[Result]:
    """Sort with the server's comparison (``_less``).

    Go runs an unstable pdqsort over map order. When the comparison is a strict weak order the
    sorted order is unique, and this finds it: results pre-ordered by score and secondary
    descending, then UUID ascending, split into runs of neighbours whose scores are within 1e-7; results of
    different runs compare by score alone, so only each run needs the full comparison. When
    near ties chain the server's order is unspecified; the model then merge-sorts each run
    (Python's stable sort) from the pre-order, a convention the embedded store shares.
    """
    pre = sorted(results, key=lambda r: r.uuid)
    pre.sort(key=lambda r: (-float(r.score), -float(r.secondary)))

    def compare(a: Result, b: Result) -> int:
        return -1 if _less(a, b) else (1 if _less(b, a) else 0)

    out: list[Result] = []
    run: list[Result] = []
    for result in pre:
        if run and not _near(run[-1].score, result.score):
            out.extend(sorted(run, key=functools.cmp_to_key(compare)))
            run = []
        run.append(result)
    out.extend(sorted(run, key=functools.cmp_to_key(compare)))
    return out


def hybrid(
    shard: Shard,
    query: str,
    vector: list[float],
    alpha: float,
    limit: int,
    where: list[tuple[str, str, Any, str]] | None = None,
    report: list[str] | None = None,
    allowed: set[str] | None = None,
    vector_ids: list[str] | None = None,
) -> list[Result]:
    """``usecases/traverser/explorer_hybrid.go`` ``Hybrid`` with relativeScoreFusion.

    alpha travels as a float32 (``base_search.proto`` Hybrid.alpha); each side takes
    ``max(QUERY_HYBRID_MAXIMUM_RESULTS, limit)`` candidates after the filter; the vector set
    comes first, the keyword set last; the fused list is sorted, cut to ``limit`` (offset 0,
    no autocut). ``report`` collects why the server's WAND might deviate (D6). ``allowed``,
    when given, is the set of objects a filter lets through, evaluated by the caller.
    ``vector_ids``, when given, are the vector candidates a server chose: among equal
    distances at the cut its HNSW search keeps any of them, the model the lowest docIDs.
    """
    filtered = bool(where) or allowed is not None
    allowed = {d.uuid for d in shard.docs.values() if matches(d, where or [])} & (
        set(shard.docs) if allowed is None else allowed
    )
    alpha64 = float(np.float32(alpha))
    sets: list[list[tuple[str, np.float32]]] = []
    weights: list[float] = []
    vector_hits: dict[str, np.float32] = {}
    keyword_hits: dict[str, np.float32] = {}
    candidates = max(QUERY_HYBRID_MAXIMUM_RESULTS, limit)
    if alpha64 > 0:
        # denseSearch: SecondarySortValue = 1 - distance (float32).
        nearest = near_vector(shard, vector, candidates, allowed)
        if vector_ids is not None:
            nearest = [(u, cosine_distance(vector, shard.docs[u].vector)) for u in vector_ids]
        found = [(u, np.float32(np.float32(1) - d)) for u, d in nearest]
        vector_hits = dict(found)
        sets.append(found)
        weights.append(alpha64)
    if 1 - alpha64 > 0:
        # sparseSearch: limit max(offset + 100, min(offset + limit, QUERY_MAXIMUM_RESULTS)).
        keyword_limit = max(QUERY_HYBRID_MAXIMUM_RESULTS, min(limit, QUERY_MAXIMUM_RESULTS))
        found = bm25(shard, query, keyword_limit, allowed if filtered else None, report)
        keyword_hits = dict(found)
        sets.append(found)
        weights.append(1 - alpha64)
    merged = fusion_relative_score(weights, sets)
    for uuid, result in merged.items():
        result.keyword = keyword_hits.get(uuid)
        result.vector = vector_hits.get(uuid)
    return sort_fused(list(merged.values()))[:limit]
