"""Persisted keyword postings: each partition's rows in blocks, written with the rows.

A partition's keyword index is kept in the store file as *blocks* (table ``amem_blocks``):
each block holds a set of the partition's rows (at most ``BLOCK_ROWS``), and for each
searchable property their token counts and their (term hash, row, term frequency) postings,
sorted by term. Every live row is in exactly one block. The transaction that writes rows
tokenises them and adds their block; one that replaces or deletes rows rewrites the blocks
that held them without them (so a forgotten row's term hashes leave the file with it, and
``secure_delete`` zeroes the pages they were on). Loading a partition's index therefore
reads these arrays instead of tokenising the stored text, and a cache learns what another
process changed by comparing the block ids it holds with the file's (``cache.py``).

A block is never changed in place: a rewrite or a merge writes a block with a new id
(``AUTOINCREMENT``: ids are never reused) and deletes the old one. Each row carries its
*birth*, the id of the block its current content was first written in; a rewrite or a merge
keeps it, so a cache can tell a row that only moved from one that changed.

A partition with PCA axes (``vectors.py``) also keeps, per block, its rows' projections on
them (``projected``, tagged with the axes' version ``axes``): computed from the batch's vectors
by the transaction that writes the rows, carried along by rewrites and merges, and recomputed
for every block, in place, by the transaction that chooses new axes. A cache loading the
partition reads them instead of projecting every vector; a block whose tag is not the
partition's axes' version (none is, unless the file was damaged) is projected afresh.

Each block also keeps its rows' vectors (``vectors``: float32, the very values written), and
since layout 7 they are kept there only: the rows' own ``vector`` column holds an empty
value, and a read of a row's vector (``row_vectors``) takes it from the block holding the
row's current entry. They are written by the transaction that writes the rows and carried
along by rewrites and merges like the projections. A cache loading the partition reads a few
of these blobs instead of every row's vector (20,000 rows read one by one were most of a cold
search's time). A block without them (written by the code of layout 6 or before, still
running in a process that had the file open when it was migrated) has its rows' vectors in
their rows, where every read looks first.

A row rewritten in place (an upsert of an existing id) joins a new block with its new
content, and its entry in the block that held it becomes *superseded* (``amem_superseded``)
instead of that block being rewritten: an edit of 10 rows writes one small block, not 10
blocks of ``BLOCK_ROWS`` rows. A row's current entry is the one with the largest birth (a
newer version is born in a newer block). A block is rewritten without its superseded entries
once they are a quarter of its rows (``COMPACT_SHARE``), when it is rewritten or merged for
another reason, and by ``compact_superseded`` (``EmbeddedStore.erase_deleted``); until then
the old version's term hashes, token counts and vector stay in the file (its text does
not: the row itself is overwritten). A deleted row leaves every block that names it in its transaction.

Small blocks are merged as they come (``_merge_tail``): the newest block joins the one before
it once it holds a quarter of its rows, up to ``BLOCK_ROWS``, so a partition written one
message at a time still has O(rows / BLOCK_ROWS + log rows) blocks.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, IntArray
from agentic_memory.store.embedded.keyword import _Postings
from agentic_memory.store.embedded.lists import decode_labels, encode_labels, label_rows
from agentic_memory.store.embedded.postings import _Pairs, _term_starts, _Terms
from agentic_memory.store.embedded.vectors import (
    decode_vectors,
    load_axes,
    load_centroids,
    normalise,
    project,
)
from agentic_memory.store.ranking import sorted_unique
from agentic_memory.store.types import StoreError

BLOCK_ROWS = 1024
"""The most rows a block holds. A replace or delete rewrites each block it touches, so its
cost grows with this; a load and a query look terms up in every block, so theirs shrink."""

MERGE_RATIO = 4
COMPACT_SHARE = 4
"""A block is rewritten without its superseded entries once they are 1/4 of its rows."""

_MAGIC = b"AMB1"
_HEADER = struct.Struct("<4sIHH")
_PROPERTY = struct.Struct("<IIBBH")
_DTYPES: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    1: np.dtype("<u1"),
    2: np.dtype("<u2"),
    4: np.dtype("<u4"),
}

U32Array = npt.NDArray[np.uint32]


def create_tables(conn: sqlite3.Connection) -> None:
    """Create the blocks table and its index (layout 5)."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS amem_blocks ("
        "block INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT NOT NULL, "
        "scope TEXT NOT NULL, rows INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, "
        "rowinfo BLOB NOT NULL, postings BLOB NOT NULL, axes INTEGER, projected BLOB, unit BLOB, "
        "vectors BLOB, labels BLOB)"
    )
    # Files of earlier layouts: the columns are added. ``unit`` (layout 6: the rows' unit
    # vectors, kept beside the rows' own) is NULL in the blocks this code writes; code of
    # those layouts names its columns, so it still reads and writes them.
    columns = {r[1] for r in conn.execute("PRAGMA table_info(amem_blocks)")}
    for name in ("unit", "vectors", "labels"):
        if name not in columns:
            conn.execute(f"ALTER TABLE amem_blocks ADD COLUMN {name} BLOB")
    # Covering for the block list a cache compares and a writer merges by.
    conn.execute(
        "CREATE INDEX IF NOT EXISTS amem_blocks_partition "
        "ON amem_blocks (collection, scope, block, rows, lo, hi)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS amem_superseded (block INTEGER NOT NULL, "
        "rid INTEGER NOT NULL, PRIMARY KEY (block, rid)) WITHOUT ROWID"
    )


@dataclass
class Block:
    """A block's rows (rid ascending), their births, token counts and postings."""

    rids: IntArray
    births: IntArray
    lengths: U32Array
    """(rows, searchable properties): each row's token count in each property."""
    props: list[_Pairs]
    """Per searchable property: pairs sorted by term hash, then row; ``docs`` index ``rids``."""
    projected: FloatArray | None = None
    """(rows, axes): the rows' unit vectors on the partition's PCA axes, if it has axes."""
    axes: int | None = None
    """The version of the axes ``projected`` was computed on."""
    vectors: FloatArray | None = None
    """(rows, dims): the rows' stored vectors (a superseded entry's may be its newer content's)."""
    labels: npt.NDArray[Any] | None = None
    """Each row's inverted list (``lists.py``) among the centroids of the axes ``axes``."""

    @property
    def rows(self) -> int:
        """Return the number of rows."""
        return int(self.rids.size)


def encode_rowinfo(rids: IntArray, births: IntArray) -> bytes:
    """Return a block's ``rowinfo``: its rids, then their births (int64 each)."""
    return (
        np.ascontiguousarray(rids, dtype="<i8").tobytes()
        + np.ascontiguousarray(births, dtype="<i8").tobytes()
    )


def decode_rowinfo(blob: bytes) -> tuple[IntArray, IntArray]:
    """Return the rids and births of a block's ``rowinfo``."""
    both = np.frombuffer(blob, dtype="<i8")
    half = both.size // 2
    return both[:half].astype(np.int64), both[half:].astype(np.int64)


def _smallest(maximum: int) -> tuple[int, np.dtype[np.unsignedinteger[Any]]]:
    for code in (1, 2, 4):
        if maximum < 1 << (8 * code):
            return code, _DTYPES[code]
    raise StoreError("a term occurs more than 2^32 times in one property")


def _pad(data: bytes) -> bytes:
    return data + b"\x00" * (-len(data) % 8)


def encode_postings(block: Block) -> bytes:
    """Return a block's ``postings``: token counts, then each property's sorted postings.

    Per property: term count, posting count, the byte widths of rows and term frequencies,
    the sorted term hashes (int64), the postings per term (uint32), the rows (local, uint8
    to uint32) and the frequencies (uint8 to uint32), each section padded to 8 bytes.
    """
    width = len(block.props)
    parts = [
        _HEADER.pack(_MAGIC, block.rows, width, 0),
        _pad(np.ascontiguousarray(block.lengths, dtype="<u4").tobytes()),
    ]
    for pairs in block.props:
        starts = _term_starts(pairs.pair_hash)
        hashes = pairs.pair_hash[starts]
        counts = np.diff(np.append(starts, pairs.pair_hash.size))
        doc_code, doc_type = _smallest(max(block.rows - 1, 0))
        tf_code, tf_type = _smallest(int(pairs.tf.max()) if pairs.tf.size else 0)
        parts.append(_PROPERTY.pack(hashes.size, pairs.docs.size, doc_code, tf_code, 0))
        parts.append(_pad(hashes.astype("<i8").tobytes()))
        parts.append(_pad(counts.astype("<u4").tobytes()))
        parts.append(_pad(pairs.docs.astype(doc_type).tobytes()))
        parts.append(_pad(pairs.tf.astype(tf_type).tobytes()))
    return b"".join(parts)


def decode_terms(blob: bytes, rows: int) -> tuple[U32Array, list[_Terms]]:
    """Return the token counts and per-property postings of a ``postings`` blob.

    The arrays are views of ``blob`` (rows and frequencies in their stored widths).
    """
    magic, stored_rows, width, _ = _HEADER.unpack_from(blob, 0)
    if magic != _MAGIC or stored_rows != rows:
        raise StoreError("a keyword block of the store is damaged")
    at = _HEADER.size
    lengths = np.frombuffer(blob, dtype="<u4", count=rows * width, offset=at).reshape(rows, width)
    at += _padded(rows * width * 4)
    props: list[_Terms] = []
    for _ in range(width):
        terms, postings, doc_code, tf_code, _ = _PROPERTY.unpack_from(blob, at)
        at += _PROPERTY.size
        hashes = np.frombuffer(blob, dtype="<i8", count=terms, offset=at)
        at += _padded(terms * 8)
        counts = np.frombuffer(blob, dtype="<u4", count=terms, offset=at)
        at += _padded(terms * 4)
        docs = np.frombuffer(blob, dtype=_DTYPES[doc_code], count=postings, offset=at)
        at += _padded(postings * doc_code)
        tf = np.frombuffer(blob, dtype=_DTYPES[tf_code], count=postings, offset=at)
        at += _padded(postings * tf_code)
        props.append(_Terms(hashes.astype(np.int64), counts.astype(np.int64), docs, tf))
    return lengths, props


def decode_postings(blob: bytes, rids: IntArray, births: IntArray) -> Block:
    """Return the block whose ``postings`` blob is ``blob`` and rows ``rids``."""
    lengths, props = decode_terms(blob, rids.size)
    return Block(rids, births, lengths.astype(np.uint32), [t.pairs() for t in props])


def encode_projected(projected: FloatArray) -> bytes:
    """Return a block's ``projected``: its rows' projections, float32 each."""
    return np.ascontiguousarray(projected, dtype="<f4").tobytes()


def decode_projected(blob: bytes, rows: int) -> FloatArray:
    """Return the (rows, axes) projections of a block's ``projected``."""
    flat = np.frombuffer(blob, dtype="<f4")
    if rows == 0 or flat.size % rows:
        raise StoreError("the projections of a keyword block are damaged")
    return flat.reshape(rows, flat.size // rows)


def encode_vectors(vectors: FloatArray) -> bytes:
    """Return a block's ``vectors``: its rows' vectors, float32 each."""
    return np.ascontiguousarray(vectors, dtype="<f4").tobytes()


def _padded(size: int) -> int:
    return size + (-size % 8)


def block_of(
    rids: IntArray,
    births: IntArray,
    postings: _Postings,
    projected: tuple[int, FloatArray] | None = None,
    vectors: FloatArray | None = None,
    labels: npt.NDArray[Any] | None = None,
) -> Block:
    """Return the block of rows ``rids`` (any order) with the postings of a batch.

    ``postings`` numbers the rows 0..n-1 in the order of ``rids`` (as does ``projected``, the
    rows' projections and the axes' version, ``vectors``, their vectors, and ``labels``, their
    inverted lists); the block orders them by rid and its pairs by term hash, then row.
    """
    order = np.argsort(rids, kind="stable")
    place = np.empty_like(order)
    place[order] = np.arange(order.size)
    props = []
    for pairs in postings.props:
        docs = place[pairs.docs]
        sort = np.lexsort((docs, pairs.pair_hash))
        props.append(_Pairs(pairs.pair_hash[sort], docs[sort], pairs.tf[sort]))
    return Block(
        rids[order].astype(np.int64),
        births[order].astype(np.int64),
        postings.lengths[order].astype(np.uint32),
        props,
        None if projected is None else projected[1][order],
        None if projected is None else projected[0],
        None if vectors is None else vectors[order],
        None if labels is None else labels[order],
    )


def _keep_rows(block: Block, keep: npt.NDArray[np.bool_]) -> Block:
    """Return ``block`` without the rows not kept (their postings dropped, order kept)."""
    number = np.cumsum(keep) - 1
    props = []
    for pairs in block.props:
        mine = keep[pairs.docs]
        props.append(_Pairs(pairs.pair_hash[mine], number[pairs.docs[mine]], pairs.tf[mine]))
    return Block(
        block.rids[keep],
        block.births[keep],
        block.lengths[keep],
        props,
        None if block.projected is None else block.projected[keep],
        block.axes,
        None if block.vectors is None else block.vectors[keep],
        None if block.labels is None else block.labels[keep],
    )


def _merge(a: Block, b: Block) -> Block:
    """Return one block holding the rows of two (whose rids differ)."""
    rids = np.concatenate((a.rids, b.rids))
    order = np.argsort(rids, kind="stable")
    place = np.empty_like(order)
    place[order] = np.arange(order.size)
    props = []
    for pa, pb in zip(a.props, b.props, strict=True):
        hashes = np.concatenate((pa.pair_hash, pb.pair_hash))
        docs = place[np.concatenate((pa.docs, pb.docs + a.rows))]
        tf = np.concatenate((pa.tf, pb.tf))
        sort = np.lexsort((docs, hashes))
        props.append(_Pairs(hashes[sort], docs[sort], tf[sort]))
    both = a.projected is not None and b.projected is not None and a.axes == b.axes
    return Block(
        rids[order],
        np.concatenate((a.births, b.births))[order],
        np.concatenate((a.lengths, b.lengths))[order],
        props,
        np.concatenate((a.projected, b.projected))[order] if both else None,  # type: ignore[arg-type]
        a.axes if both else None,
        np.concatenate((a.vectors, b.vectors))[order]
        if a.vectors is not None and b.vectors is not None
        else None,
        np.concatenate((a.labels, b.labels))[order]
        if both and a.labels is not None and b.labels is not None
        else None,
    )


class PartitionBlocks:
    """The blocks of one partition, as a write transaction changes them."""

    def __init__(self, conn: sqlite3.Connection, collection: str, scope: str, width: int):
        """Work on the blocks of (``collection``, ``scope``) inside ``conn``'s transaction."""
        self.conn = conn
        self.collection = collection
        self.scope = scope
        self.width = width

    @functools.cached_property
    def dims(self) -> int:
        """Return the size of the collection's vectors."""
        row = self.conn.execute(
            "SELECT dims FROM amem_collections WHERE name = ?", (self.collection,)
        ).fetchone()
        if row is None:
            raise StoreError(f"collection {self.collection!r} was dropped meanwhile")
        return int(row[0])

    def _next_id(self) -> int:
        row = self.conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'amem_blocks'"
        ).fetchone()
        return 1 if row is None else int(row[0]) + 1

    def _insert(self, block: Block) -> int:
        block_id = self._next_id()
        self.conn.execute(
            "INSERT INTO amem_blocks "
            "(block, collection, scope, rows, lo, hi, rowinfo, postings, axes, projected, vectors, "
            "labels) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                block_id,
                self.collection,
                self.scope,
                block.rows,
                int(block.rids[0]),
                int(block.rids[-1]),
                encode_rowinfo(block.rids, block.births),
                encode_postings(block),
                block.axes,
                None if block.projected is None else encode_projected(block.projected),
                None if block.vectors is None else encode_vectors(block.vectors),
                None if block.labels is None else encode_labels(block.labels),
            ),
        )
        return block_id

    def _load(self, block_id: int) -> Block:
        rowinfo, postings, axes, projected, vectors, labels = self.conn.execute(
            "SELECT rowinfo, postings, axes, projected, vectors, labels FROM amem_blocks "
            "WHERE block = ?",
            (block_id,),
        ).fetchone()
        block = decode_postings(postings, *decode_rowinfo(rowinfo))
        if projected is not None:
            block.projected = decode_projected(projected, block.rows)
            block.axes = axes
            block.labels = decode_labels(labels, block.rows)
        if vectors is not None:
            block.vectors = decode_vectors(vectors, block.rows, self.dims)
            if block.vectors is None:
                raise StoreError("the vectors of a keyword block of the store are damaged")
        marked = [
            r[0]
            for r in self.conn.execute(
                "SELECT rid FROM amem_superseded WHERE block = ?", (block_id,)
            )
        ]
        if marked:
            # Whatever rewrites a block leaves its superseded entries out.
            block = _keep_rows(block, ~np.isin(block.rids, np.asarray(marked, dtype=np.int64)))
        return block

    def _delete(self, block_ids: list[int]) -> None:
        self.conn.executemany("DELETE FROM amem_blocks WHERE block = ?", [(b,) for b in block_ids])
        self.conn.executemany(
            "DELETE FROM amem_superseded WHERE block = ?", [(b,) for b in block_ids]
        )

    def _holding(self, wanted: IntArray) -> list[tuple[int, IntArray, IntArray]]:
        """Return (block, rids, births) of the blocks that name any of ``wanted`` (sorted)."""
        candidates = self.conn.execute(
            "SELECT block, lo, hi FROM amem_blocks WHERE collection = ? AND scope = ? "
            "ORDER BY block",
            (self.collection, self.scope),
        ).fetchall()
        if not candidates:
            return []
        info = np.asarray(candidates, dtype=np.int64)
        inside = np.searchsorted(wanted, info[:, 2], "right") - np.searchsorted(
            wanted, info[:, 1], "left"
        )
        out = []
        for block_id in info[inside > 0, 0].tolist():
            (rowinfo,) = self.conn.execute(
                "SELECT rowinfo FROM amem_blocks WHERE block = ?", (block_id,)
            ).fetchone()
            block_rids, block_births = decode_rowinfo(rowinfo)
            if np.isin(block_rids, wanted, assume_unique=True).any():
                out.append((block_id, block_rids, block_births))
        return out

    def _homes(self, wanted: IntArray) -> tuple[IntArray, dict[int, int]]:
        """Find where each row of ``wanted`` (sorted) has its current entry.

        Returns, per row, the block of its newest entry and the entry's place in that block
        (both -1: in no block), and the number of rows of each block read.
        """
        newest = np.full(wanted.size, -1, dtype=np.int64)
        home = np.full((wanted.size, 2), -1, dtype=np.int64)
        sizes: dict[int, int] = {}
        for block_id, block_rids, block_births in self._holding(wanted):
            sizes[block_id] = block_rids.size
            at = np.searchsorted(wanted, block_rids)
            mine = at < wanted.size
            mine[mine] = wanted[at[mine]] == block_rids[mine]
            newer = np.zeros(block_rids.size, dtype=bool)
            newer[mine] = block_births[mine] > newest[at[mine]]
            newest[at[newer]] = block_births[newer]
            home[at[newer], 0] = block_id
            home[at[newer], 1] = np.flatnonzero(newer)
        return home, sizes

    def supersede(self, rids: IntArray) -> None:
        """Mark the current entries of rows rewritten in place as superseded.

        The caller adds the rows' new content (``add``). A block whose superseded entries
        reach ``1 / COMPACT_SHARE`` of its rows is rewritten without them.
        """
        if rids.size == 0:
            return
        wanted = sorted_unique(rids)
        home = self._homes(wanted)[0][:, 0]
        found = home >= 0
        if not found.all():
            raise StoreError("a stored row is in no keyword block")
        self.conn.executemany(
            "INSERT INTO amem_superseded (block, rid) VALUES (?, ?)",
            zip(home.tolist(), wanted.tolist(), strict=True),
        )
        for block_id in sorted_unique(home).tolist():
            (rows, marked) = self.conn.execute(
                "SELECT rows, (SELECT count(*) FROM amem_superseded WHERE block = ?) "
                "FROM amem_blocks WHERE block = ?",
                (block_id, block_id),
            ).fetchone()
            if marked * COMPACT_SHARE >= rows:
                self.compact(block_id)

    def compact(self, block_id: int) -> None:
        """Rewrite a block without its superseded entries."""
        block = self._load(block_id)
        self._delete([block_id])
        if block.rows:
            self._insert(block)

    def add(
        self, rids: IntArray, postings: _Postings, vectors: FloatArray | None, dims: int
    ) -> None:
        """Add rows not held by any block (new rows, or rows ``remove`` just took out).

        Their births are the id of the first block they go in. ``vectors`` (the rows' vectors,
        (rows, dims) float32 in the order of ``rids``) are kept, and projected on the
        partition's axes if it has any; None leaves the blocks without either (the layout
        migrations give them theirs).
        """
        if rids.size == 0:
            return
        axes = None if vectors is None else load_axes(self.conn, self.collection, self.scope, dims)
        projected = labels = None
        if axes is not None and vectors is not None:
            projected = (axes[0], project(normalise(vectors), axes[1]))
            labels = self._labels(projected[1])
        birth = self._next_id()
        block = block_of(
            rids, np.full(rids.size, birth, dtype=np.int64), postings, projected, vectors, labels
        )

        for start in range(0, block.rows, BLOCK_ROWS):
            keep = np.zeros(block.rows, dtype=bool)
            keep[start : start + BLOCK_ROWS] = True
            self._insert(block if block.rows <= BLOCK_ROWS else _keep_rows(block, keep))
        self._merge_tail()

    def remove(self, rids: IntArray) -> None:
        """Take rows out of every block that names them (each rewritten without them)."""
        if rids.size == 0:
            return
        wanted = sorted_unique(rids)
        gone: list[int] = []
        for block_id, _, _ in self._holding(wanted):
            block = self._load(block_id)
            keep = ~np.isin(block.rids, wanted)
            if keep.any():
                self._insert(_keep_rows(block, keep))
            gone.append(block_id)
        self._delete(gone)
        self._merge_tail()

    def _merge_tail(self) -> None:
        """Merge the newest block into the one before it while it is not much smaller."""
        while True:
            tail = self.conn.execute(
                "SELECT block, rows FROM amem_blocks WHERE collection = ? AND scope = ? "
                "ORDER BY block DESC LIMIT 2",
                (self.collection, self.scope),
            ).fetchall()
            if len(tail) < 2:
                return
            (last, last_rows), (prev, prev_rows) = tail
            if last_rows * MERGE_RATIO < prev_rows or last_rows + prev_rows > BLOCK_ROWS:
                return
            merged = _merge(self._load(prev), self._load(last))
            self._delete([prev, last])
            self._insert(merged)

    def _labels(self, projected: FloatArray) -> npt.NDArray[np.int32] | None:
        """Return projected rows' inverted lists, None if the partition has no centroids."""
        centroids = load_centroids(self.conn, self.collection, self.scope)
        if centroids is None or centroids.shape[1] != projected.shape[1]:
            return None
        return label_rows(projected, centroids)

    def reproject(self, table: str, user: str | None, dims: int) -> None:
        """Give every block the projections of its rows on the partition's current axes.

        And their inverted lists. Run by the transaction that chose them; the blocks keep
        their ids (their rows did not change), and a cache sees the axes' new version and
        reads the projections again.
        """
        axes = load_axes(self.conn, self.collection, self.scope, dims)
        listed = [
            r[0]
            for r in self.conn.execute(
                "SELECT block FROM amem_blocks WHERE collection = ? AND scope = ?",
                (self.collection, self.scope),
            )
        ]
        for block_id in listed:
            if axes is None:
                self.conn.execute(
                    "UPDATE amem_blocks SET axes = NULL, projected = NULL, labels = NULL "
                    "WHERE block = ?",
                    (block_id,),
                )
                continue
            # One block at a time: the vectors of a large partition are gigabytes.
            rowinfo, blob = self.conn.execute(
                "SELECT rowinfo, vectors FROM amem_blocks WHERE block = ?", (block_id,)
            ).fetchone()
            rids, _ = decode_rowinfo(rowinfo)
            vectors = _block_vectors(self.conn, table, user, rids, blob, dims)
            projected = project(normalise(vectors), axes[1])
            labels = self._labels(projected)
            self.conn.execute(
                "UPDATE amem_blocks SET axes = ?, projected = ?, labels = ? WHERE block = ?",
                (
                    axes[0],
                    encode_projected(projected),
                    None if labels is None else encode_labels(labels),
                    block_id,
                ),
            )

    def relabel(self, dims: int) -> None:
        """Give every block projected on the current axes its rows' inverted lists.

        From the projections it keeps (a migration: the rows and their vectors are as they
        were).
        """
        axes = load_axes(self.conn, self.collection, self.scope, dims)
        if axes is None:
            return
        listed = self.conn.execute(
            "SELECT block, rows FROM amem_blocks WHERE collection = ? AND scope = ? AND axes = ?",
            (self.collection, self.scope, axes[0]),
        ).fetchall()
        for block_id, rows in listed:
            (blob,) = self.conn.execute(
                "SELECT projected FROM amem_blocks WHERE block = ?", (block_id,)
            ).fetchone()
            labels = None if blob is None else self._labels(decode_projected(blob, int(rows)))
            self.conn.execute(
                "UPDATE amem_blocks SET labels = ? WHERE block = ?",
                (None if labels is None else encode_labels(labels), block_id),
            )

    def rows(self) -> int:
        """Return the number of rows the partition's blocks hold (superseded entries aside)."""
        (total, superseded) = self.conn.execute(
            "SELECT coalesce(sum(rows), 0), (SELECT count(*) FROM amem_superseded AS s "
            "JOIN amem_blocks AS b ON b.block = s.block WHERE b.collection = ?1 "
            "AND b.scope = ?2) FROM amem_blocks WHERE collection = ?1 AND scope = ?2",
            (self.collection, self.scope),
        ).fetchone()
        return int(total) - int(superseded)


def _own_vectors(
    conn: sqlite3.Connection, table: str, user: str | None, rids: IntArray
) -> list[Any]:
    """Return (rid, vector column) of the rows ``rids``, in no set order: one query."""
    return conn.execute(
        f"SELECT o.rid, o.vector FROM json_each(?) AS j CROSS JOIN {table} AS o "
        "ON o.rid = j.value WHERE o.user IS ?",
        (json.dumps(rids.tolist()), user),
    ).fetchall()


def inline_vectors(
    conn: sqlite3.Connection, table: str, user: str | None, rids: IntArray, dims: int
) -> FloatArray:
    """Return the vectors rows ``rids`` (ascending) hold in their own column (layout 6 or before).

    A superseded entry gets its row's current vector: no read takes it.
    """
    rows = sorted(_own_vectors(conn, table, user, rids))
    if [r[0] for r in rows] != rids.tolist():
        raise StoreError("a keyword block names rows that are not stored")
    if any(len(r[1]) != 4 * dims for r in rows):
        raise StoreError("rows of a keyword block without vectors hold none either")
    return np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(rids.size, dims)


def _block_vectors(
    conn: sqlite3.Connection,
    table: str,
    user: str | None,
    rids: IntArray,
    blob: bytes | None,
    dims: int,
) -> FloatArray:
    """Return a block's vectors: its own, or its rows' (a block of layout 6 or before)."""
    if blob is None:
        return inline_vectors(conn, table, user, rids, dims)
    vectors = decode_vectors(blob, rids.size, dims)
    if vectors is None:
        raise StoreError("the vectors of a keyword block of the store are damaged")
    return vectors


def row_vectors(
    conn: sqlite3.Connection,
    collection: str,
    table: str,
    user: str | None,
    rids: IntArray,
    dims: int,
) -> FloatArray:
    """Return the vectors of the stored rows ``rids`` (ascending, distinct), in that order.

    A row written by this code holds none itself: its vector is read from the block of its
    current entry (the newest birth), a slice of the blob, not the blob. A row written by
    the code of layout 6 or before holds its own.
    """
    out = np.empty((rids.size, dims), dtype=np.float32)
    if rids.size == 0:
        return out
    own = dict(_own_vectors(conn, table, user, rids))
    if len(own) != rids.size:
        raise StoreError(f"rows of {collection!r} are gone")
    size = 4 * dims
    missing: list[int] = []
    for i, rid in enumerate(rids.tolist()):
        blob = own[rid]
        if len(blob) == size:
            out[i] = np.frombuffer(blob, dtype="<f4")
        else:
            missing.append(i)
    if not missing:
        return out
    at = np.asarray(missing, dtype=np.int64)
    home, sizes = PartitionBlocks(conn, collection, user or "", 0)._homes(rids[at])
    if (home[:, 0] < 0).any():
        raise StoreError(f"a row of {collection!r} is in no keyword block")
    for block_id in sorted_unique(home[:, 0]).tolist():
        held = np.flatnonzero(home[:, 0] == block_id)
        with conn.blobopen("amem_blocks", "vectors", block_id, readonly=True) as blob:
            if len(blob) != sizes[block_id] * size:
                raise StoreError("the vectors of a keyword block of the store are damaged")
            for i, position in zip(held.tolist(), home[held, 1].tolist(), strict=True):
                blob.seek(position * size)
                out[at[i]] = np.frombuffer(blob.read(size), dtype="<f4")
    return out


def move_vectors(conn: sqlite3.Connection, collection: str, table: str, dims: int) -> None:
    """Move a collection's vectors from its rows into its blocks (the migration to layout 7).

    Each block without vectors gets its rows' (a superseded entry: its row's current one);
    then every row's own vector is emptied, and layout 6's unit vectors are dropped.
    """
    listed = [
        r[0]
        for r in conn.execute(
            "SELECT block FROM amem_blocks WHERE collection = ? AND vectors IS NULL", (collection,)
        )
    ]
    for block_id in listed:
        scope, rowinfo = conn.execute(
            "SELECT scope, rowinfo FROM amem_blocks WHERE block = ?", (block_id,)
        ).fetchone()
        rids, _ = decode_rowinfo(rowinfo)
        # A shared collection's rows have no user (scope ""); a per-user one's always one.
        vectors = inline_vectors(conn, table, scope or None, rids, dims)
        conn.execute(
            "UPDATE amem_blocks SET vectors = ?, unit = NULL WHERE block = ?",
            (encode_vectors(vectors), block_id),
        )
    conn.execute("UPDATE amem_blocks SET unit = NULL WHERE collection = ?", (collection,))
    conn.execute(f"UPDATE {table} SET vector = x'' WHERE length(vector) > 0")


def drop_partition(conn: sqlite3.Connection, collection: str, scope: str) -> None:
    """Delete every block of a partition."""
    conn.execute(
        "DELETE FROM amem_superseded WHERE block IN "
        "(SELECT block FROM amem_blocks WHERE collection = ? AND scope = ?)",
        (collection, scope),
    )
    conn.execute("DELETE FROM amem_blocks WHERE collection = ? AND scope = ?", (collection, scope))


def drop_collection(conn: sqlite3.Connection, collection: str) -> None:
    """Delete every block of a collection."""
    conn.execute(
        "DELETE FROM amem_superseded WHERE block IN "
        "(SELECT block FROM amem_blocks WHERE collection = ?)",
        (collection,),
    )
    conn.execute("DELETE FROM amem_blocks WHERE collection = ?", (collection,))


def compact_superseded(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Rewrite every block that has superseded entries; return the partitions changed."""
    changed = conn.execute(
        "SELECT DISTINCT b.block, b.collection, b.scope FROM amem_superseded AS s "
        "JOIN amem_blocks AS b ON b.block = s.block"
    ).fetchall()
    for block_id, collection, scope in changed:
        PartitionBlocks(conn, collection, scope, 0).compact(block_id)
    return sorted({(c, sc) for _, c, sc in changed})
