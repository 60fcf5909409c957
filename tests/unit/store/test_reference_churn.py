"""The reference model on a churned shard: each server behaviour of docs/storage.md's table of
differences (D1-D7, D13), on hand-made shards whose numbers are worked out here.

Each test turns the behaviour off (the ``Shard`` switches) to show that it, and nothing else,
makes the difference.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from tests.unit.store import weaviate_reference as ref


def _id(i: int) -> str:
    return f"00000000-0000-0000-0000-{i:012d}"


V = [1.0, 0.0]


def _average(shard: ref.Shard, prop: str = "body") -> float:
    return ref.property_average_length(shard, prop)


def test_a_flush_of_only_deletions_writes_no_nan_average_d1() -> None:
    shard = ref.Shard(["body"])
    shard.put(_id(0), {"body": "zebra lion"}, V)
    shard.put(_id(1), {"body": "zebra"}, V)
    shard.flush(force=True)
    shard.delete(_id(1))
    shard.flush(force=True)  # the memtable holds only tombstones
    second = shard.buckets["body"].segments[1]
    # 1.32.9 wrote 0/0 here, a NaN that every later average and compaction carried.
    assert (second.average, second.count) == (0.0, 0)
    assert math.isfinite(_average(shard))
    hits = ref.hybrid(shard, "zebra", V, 0.0, 5)
    assert [h.uuid for h in hits] == [_id(0)] and math.isfinite(float(hits[0].score))


def test_averages_keep_deleted_and_replaced_versions_d2() -> None:
    shard = ref.Shard(["body"])
    shard.put(_id(0), {"body": "zebra lion"}, V)  # length 2
    shard.put(_id(1), {"body": "zebra"}, V)  # length 1
    assert _average(shard) == 1.5  # memtable only: exact
    shard.flush(force=True)
    shard.delete(_id(1))
    shard.put(_id(0), {"body": "zebra lion tiger bear"}, V)  # same vector: same docID
    assert _average(shard) == (1 + 2 + 4) / 3  # memtable (4) plus the segment (1 and 2)
    shard.flush(force=True)
    # Two segments: (2/3 * 1.5 + 1/3 * 4) * 3 is 6.999999999999999, truncated to 6 (D3).
    weighted = 2 / 3 * 1.5 + 1 / 3 * 4.0
    assert int(weighted * 3) == 6 and _average(shard) == 6 / 3
    shard.compact()  # combinePropertyLengths adds, never subtracts (fixed in 1.37.13)
    assert shard.buckets["body"].segments[0].count == 3
    assert _average(shard) == 6 / 3
    shard.truncate_average = False
    assert _average(shard) == weighted
    shard.keep_versions = False
    assert _average(shard) == 4.0


def test_the_segments_share_of_an_average_is_truncated_d3() -> None:
    shard = ref.Shard(["body"])
    for i in range(11):  # seven of length 1, four of length 2: 15 tokens
        shard.put(_id(i), {"body": "zebra" if i < 7 else "zebra lion"}, V)
    assert _average(shard) == 15 / 11
    shard.flush(force=True)
    # (15/11)*11 is 14.999999999999998 in float64, and uint64() truncates it.
    assert _average(shard) == 14 / 11
    shard.truncate_average = False
    assert _average(shard) == 15 / 11


def test_each_segment_keeps_its_own_top_k_d4() -> None:
    shard = ref.Shard(["body"])
    for i in range(30):
        shard.put(_id(i), {"body": "zebra " + "lion " * (i % 5)}, V)
    shard.flush(force=True)
    for i in range(30, 60):
        shard.put(_id(i), {"body": "zebra " + "lion " * (i % 5)}, V)
    terms = {"zebra": 1}
    idfs = {"zebra": ref.global_idf(shard, "zebra", 1)}
    allowed = set(shard.docs)
    kept = ref.property_scores(shard, "body", terms, idfs, allowed, 10)
    assert len(kept) == 20  # ten from the segment, ten from the memtable
    shard.heap_per_segment = False
    assert len(ref.property_scores(shard, "body", terms, idfs, allowed, 10)) == 10


def test_n_counts_superseded_postings_until_a_compaction_d7() -> None:
    shard = ref.Shard(["body"])
    for i in range(3):
        shard.put(_id(i), {"body": "zebra"}, V)
    shard.flush(force=True)
    shard.delete(_id(1))
    shard.delete(_id(2))
    assert ref.doc_frequency(shard, "body", "zebra") == 3  # the segment's docCount
    # N = 1 object, n = 3: ln(1 + (1 - 3 + 0.5) / 3.5) < 0, a negative keyword score.
    assert ref.global_idf(shard, "zebra", 1) == math.log(1 + (1 - 3 + 0.5) / 3.5)
    (hit,) = ref.hybrid(shard, "zebra", V, 0.0, 5)
    assert hit.keyword is not None and float(hit.keyword) < 0
    shard.flush(force=True)
    assert ref.doc_frequency(shard, "body", "zebra") == 3
    shard.compact()  # the older segment's postings of deleted documents are dropped
    assert ref.doc_frequency(shard, "body", "zebra") == 1
    assert ref.global_idf(shard, "zebra", 1) > 0


def test_superseded_postings_switch_gives_live_counts() -> None:
    shard = ref.Shard(["body"])
    for i in range(3):
        shard.put(_id(i), {"body": "zebra"}, V)
    shard.flush(force=True)
    shard.put(_id(0), {"body": "zebra zebra"}, V)  # a rewrite: one more posting
    assert ref.doc_frequency(shard, "body", "zebra") == 4
    shard.count_superseded = False
    assert ref.doc_frequency(shard, "body", "zebra") == 3


def test_block_bounds_computed_at_an_older_average_are_reported_d6() -> None:
    shard = ref.Shard(["body"])
    shard.put(_id(0), {"body": "t"}, V)  # tf 1, length 1: the block's best at average ~2
    shard.put(_id(1), {"body": "t t t a b c d e f g"}, V)  # tf 3, length 10
    for i in range(2, 121):
        shard.put(_id(i), {"body": "t x"}, V)
    shard.flush(force=True)
    report: list[str] = []
    ref.hybrid(shard, "t", V, 0.0, 1, report=report)
    assert report == []  # the bounds were computed at this average
    for i in range(121, 421):  # long documents without "t" raise the average to ~214
        shard.put(_id(i), {"body": " ".join(["y"] * 300)}, V)
    ref.hybrid(shard, "t", V, 0.0, 1, report=report)
    assert report and report[0].startswith("D6: a block bound")


def test_memtable_pruning_of_1_32() -> None:
    # Unflushed, a property's heap takes the first k matches in docID order and scores no
    # other: a better match written later is lost (fixed upstream in 2a4878d6, 1.36.19).
    shard = ref.Shard(searchable=["body"])
    for i in range(120):
        shard.put(_id(i), {"body": "common words"}, V)
    late = _id(999_999)
    shard.put(late, {"body": "common rare rare"}, V)
    assert ref.hybrid(shard, "common rare", V, 0.0, 5)[0].uuid == late
    shard.memtable_pruning = True
    assert late not in {r.uuid for r in ref.hybrid(shard, "common rare", V, 0.0, 5)}
    shard.flush(force=True)  # on disk the block bounds hold
    assert ref.hybrid(shard, "common rare", V, 0.0, 5)[0].uuid == late


def test_a_small_write_ahead_log_is_never_flushed() -> None:
    # Neither the 60 s timer nor a shutdown writes a memtable whose log holds 4 KB or less.
    shard = ref.Shard(["body"])
    shard.put(_id(0), {"body": "zebra lion"}, V)
    # Two postings of 51 bytes plus the term: far below 4096.
    assert shard.buckets["body"].memtable.wal == (51 + 5) + (51 + 4)
    assert shard.flush() == {"body": False}
    assert not shard.buckets["body"].segments
    for i in range(1, 80):
        shard.put(_id(i), {"body": "zebra lion"}, V)
    assert shard.flush() == {"body": True}
    assert shard.uncertain_flushes == []


def test_a_replayed_memtable_loses_its_tombstones_d13() -> None:
    # 40 objects flushed; then one rewritten (same vector: same docID) and one deleted, a
    # memtable far below 4 KB, kept at shutdown and replayed when the shard loads.
    shard = ref.Shard(["body"])
    for i in range(40):
        shard.put(_id(i), {"body": f"zebra w{i}"}, V)
    assert shard.flush() == {"body": True}
    shard.put(_id(0), {"body": "lion"}, V)
    shard.delete(_id(1))
    assert shard.flush() == {"body": False}

    def zebras(s: ref.Shard) -> dict[str, float]:
        return {r.uuid: float(r.keyword or 0) for r in ref.hybrid(s, "zebra", V, 0.0, 100)}

    exact = copy.deepcopy(shard)
    exact.replay_loses_tombstones = False
    for s in (shard, exact):
        assert _id(0) not in zebras(s) and _id(1) not in zebras(s)
        s.reload()
    # Replayed: the rewritten object matches its old words again; the deleted one's posting
    # is scored too, but it has no object, so it is never returned.
    assert _id(0) in zebras(shard) and _id(1) not in zebras(shard)
    assert _id(0) not in zebras(exact) and len(zebras(exact)) == 38
    # Flushed later, the memtable's segment carries the same (lost) tombstones: it stays.
    for i in range(100):
        shard.put(_id(100 + i), {"body": f"tiger t{i}"}, V)
    assert shard.flush()["body"] is True
    shard.compact()
    assert _id(0) in zebras(shard)


def test_an_unchanged_property_is_left_alone_or_rewritten_by_map_order() -> None:
    shard = ref.Shard(["title", "body"])
    shard.put(_id(0), {"title": "zebra", "body": "lion tiger", "rank": 1}, V)
    shard.flush(force=True)
    # Same vector, same single-term title: listsIdentical, the title bucket is untouched.
    shard.put(_id(0), {"title": "zebra", "body": "bear", "rank": 1}, V)
    assert shard.buckets["title"].memtable.pairs == {}
    assert shard.uncertain_rewrites == []
    # Two distinct terms compared in Go map order: the outcome is not known.
    shard.put(_id(0), {"title": "zebra", "body": "bear", "rank": 2}, V)
    assert shard.uncertain_rewrites == []  # body has one term: left alone
    shard.put(_id(0), {"title": "zebra", "body": "lion tiger", "rank": 2}, V)
    shard.put(_id(0), {"title": "zebra", "body": "lion tiger", "rank": 3}, V)
    assert shard.uncertain_rewrites == [_id(0)]


def test_a_new_vector_gives_a_new_doc_id_and_tombstones_the_old_one() -> None:
    shard = ref.Shard(["body"])
    shard.put(_id(0), {"body": "zebra"}, V)
    shard.flush(force=True)
    shard.put(_id(0), {"body": "zebra"}, [0.0, 1.0])
    assert shard.docs[_id(0)].doc_id == 1
    assert shard.buckets["body"].memtable.tombstones == {0}
    shard.flush(force=True)
    assert _average(shard) == 1.0
    assert ref.doc_frequency(shard, "body", "zebra") == 2  # both versions until compaction


def test_compaction_merges_the_oldest_pair_of_the_newest_equal_levels() -> None:
    shard = ref.Shard(["body"])
    for round_ in range(3):
        shard.put(_id(round_), {"body": "zebra"}, V)
        shard.flush(force=True)
    bucket = shard.buckets["body"]
    assert [s.level for s in bucket.segments] == [0, 0, 0]
    shard.compact()
    assert [s.level for s in bucket.segments] == [1, 0]
    shard.put(_id(9), {"body": "zebra"}, V)
    shard.flush(force=True)
    shard.compact()
    assert [s.level for s in bucket.segments] == [2]


def test_k1_is_the_float32_value() -> None:
    assert ref.K1 == float(np.float32(1.2)) == 1.2000000476837158
    assert ref.B == 0.75
