"""Knowledge chunks' prepared keyword text: section headings, stems, hostile text, upgrades.

Every test ingests real files (PDFs made by fpdf2, text files) into real embedded storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentic_memory.ingest import ingest_paths, ingest_uploads
from agentic_memory.ingest.inputs import Upload
from agentic_memory.ingest.text import assemble, find_headings, split_document
from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.knowledge import (
    KNOWLEDGE_PROPERTIES,
    KNOWLEDGE_PROPERTIES_V1,
    SourceInfo,
    acommit_source,
    arenew_generation,
    chunk_id,
    knowledge_collection,
    list_chunks,
    manifest_collection,
    search_knowledge,
    upgrade_knowledge_base,
)
from agentic_memory.kinds.knowledge.kind import KnowledgeKind
from agentic_memory.kinds.recall_text import chunk_search_text, keyword_query
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import MemoryObject
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.sync_edge import run_sync
from tests.unit.ingest.pdfs import filler, write_pdf
from tests.unit.store import weaviate_reference as ref

# Each section's body never names its heading's words: only the heading says "lighthouse".
SECTIONED = [
    "Abstract\n\nA short account of a coastal survey. "
    + filler(7, 3)
    + "\n\n1 Introduction\n\n"
    + filler(1, 10),
    "2 Lighthouse Maintenance\n\n" + filler(2, 40),
    "3 Harbour Dredging\n\n" + filler(3, 12) + " The Quenwick channel is dredged every spring.",
]


def _ingest(store: EmbeddedStore, embeddings: LocalEmbeddings, *paths: Path, kb: str = "docs"):
    report = ingest_paths(list(paths), kb=kb, store=store, embeddings=embeddings)
    assert report.ok, report.failed
    return report


# -- headings -------------------------------------------------------------------------------


def test_headings_are_numbered_titles_on_their_own_line_and_nothing_else() -> None:
    text = "\n".join(
        [
            "1 Introduction",
            "body text here.",
            "2.1 Node Shapes",
            "E R",  # node labels of a figure: single letters
            "1: digraph G {",  # a numbered listing line
            "3 GHz machines are fast and this long line is a wrapped sentence of the body",
            "Figure 1: Small graph",
            "4 the lower case continuation of a sentence",
            "5 Ends like a sentence.",
            "6 ",  # an empty heading
            "7 \x00\x07",  # control characters only
            "2 Введение",
            "3 方法",
            "References",
            "A Principal Node Attributes",
            "9 " + "Word " * 30,  # too long
        ]
    )
    found = [line for _, line in find_headings(text)]
    assert found == [
        "1 Introduction",
        "2.1 Node Shapes",
        "2 Введение",
        "3 方法",
        "References",
        "A Principal Node Attributes",
    ]


def test_each_chunk_carries_the_heading_it_falls_under(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "survey.pdf", SECTIONED, title="Coastal Survey")
    _ingest(store, embeddings, pdf)
    chunks = list_chunks(store, "docs", str(pdf.resolve()))
    sections = [c.properties["section"] for c in chunks]
    assert sections[0] == "Abstract"
    assert "2 Lighthouse Maintenance" in sections and "3 Harbour Dredging" in sections
    for c in chunks:
        p = c.properties
        assert p["search_text"] == chunk_search_text(
            p["text"], title=p["title"], section=p["section"]
        )
        if p["page_start"] == 2 and p["page_end"] == 2:
            assert p["section"] == "2 Lighthouse Maintenance"


def test_a_chunk_that_opens_with_a_running_header_gets_the_heading_after_it() -> None:
    body = "Words of the first section go on and on here. " * 20
    document = assemble(
        [
            f"1 First Part\n{body}",
            f"Field Manual, June 2015 2\n2 Second Part\n{body}",
        ]
    )
    chunks = split_document(document, chunk_size=800, chunk_overlap=0)
    second = [c for c in chunks if c.text.startswith("Field Manual")]
    assert second and second[0].section == "2 Second Part"
    assert chunks[0].section == "1 First Part"


def test_a_chunk_before_any_heading_has_none(tmp_path: Path) -> None:
    document = assemble(["Plain notes without any heading. " * 40])
    chunks = split_document(document, chunk_size=300, chunk_overlap=50)
    assert len(chunks) > 1 and {c.section for c in chunks} == {""}


def test_a_question_naming_the_section_finds_chunks_that_do_not_say_it(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "survey.pdf", SECTIONED, title="Coastal Survey")
    _ingest(store, embeddings, pdf)
    hits = search_knowledge(store, embeddings, "docs", "lighthouse maintenance", k=5, alpha=0.0)
    assert hits and all(h.section == "2 Lighthouse Maintenance" for h in hits)
    assert any("lighthouse" not in h.text.lower() for h in hits)  # found by the heading
    assert hits[0].page_start <= 2 <= hits[0].page_end


def test_keyword_search_meets_other_word_forms(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "survey.pdf", SECTIONED, title="Coastal Survey")
    _ingest(store, embeddings, pdf)
    # "dredges" and "channels": the text says "dredged" and "channel".
    hits = search_knowledge(store, embeddings, "docs", "Which channels are dredges?", alpha=0.0)
    assert hits and "Quenwick" in hits[0].text


def test_a_query_of_only_stop_words_matches_no_keywords_and_the_vectors_still_rank(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "survey.pdf", SECTIONED, title="Coastal Survey")
    _ingest(store, embeddings, pdf)
    assert keyword_query("what is it that they were") == "what is it that they were"
    assert search_knowledge(store, embeddings, "docs", "what is it that they were", alpha=0.0) == []
    hybrid = search_knowledge(store, embeddings, "docs", "what is it that they were", alpha=0.5)
    assert hybrid and all(h.score >= 0 for h in hybrid)


# -- hostile text -----------------------------------------------------------------------------


def test_hostile_text_is_prepared_and_found(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    hostile = docs / "hostile.md"
    hostile.write_text(
        "1 Введение\n\nКошки спят на крыше каждый день.\n\n"
        "2 方法\n\n東京タワーの観測データ。\n\n"
        "3 \n\n"  # an empty heading
        "4 Control\x01 Characters\x07\n\nThe \x1b[31mzanzibar\x1b[0m beacon\x0b blinks.\n\n"
        + "x" * 5000  # one word longer than a chunk
        + "\n",
        encoding="utf-8",
    )
    # Small chunks: each section starts one of its own.
    report = ingest_paths(
        [hostile], kb="docs", store=store, embeddings=embeddings, chunk_size=60, chunk_overlap=0
    )
    assert report.ok, report.failed
    chunks = list_chunks(store, "docs", str(hostile.resolve()))
    for c in chunks:
        p = c.properties
        assert p["search_text"] == chunk_search_text(
            p["text"], title=p["title"], section=p["section"]
        )
        assert "\x00" not in p["search_text"] and "\x1b" not in p["search_text"]
    sections = {c.properties["section"] for c in chunks}
    assert sections == {"1 Введение", "2 方法", "4 Control Characters"}
    for query, expected in (
        ("кошки", "Кошки"),
        ("東京タワーの観測データ", "東京タワー"),
        ("zanzibar beacons", "zanzibar"),
    ):
        hits = search_knowledge(store, embeddings, "docs", query, alpha=0.0)
        assert hits and expected in hits[0].text, query


def test_a_huge_chunk_is_prepared_and_searched(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    big = docs / "big.txt"
    words = filler(9, 3000)  # ~250,000 characters
    big.write_text(f"{words} The Ostravel quasar hums.", encoding="utf-8")
    report = ingest_paths(
        [big], kb="docs", store=store, embeddings=embeddings, chunk_size=200_000, chunk_overlap=0
    )
    assert report.ok and report.chunks_written == 2
    hits = search_knowledge(store, embeddings, "docs", "ostravel quasars", alpha=0.0)
    assert hits and "Ostravel" in hits[0].text


# -- users, replacement -------------------------------------------------------------------------


def test_two_users_knowledge_bases_stay_separate(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    for owner, word in (("alice", "Pellinor"), ("bob", "Vistrane")):
        text = f"1 Secret Recipes\n\nThe {word} soup needs saffron.\n".encode()
        report = ingest_uploads(
            [Upload("notes.md", text)], kb="mine", owner=owner, store=store, embeddings=embeddings
        )
        assert report.ok
    alice = search_knowledge(store, embeddings, "mine", "vistrane soup", alpha=0.0, owner="alice")
    assert all("Vistrane" not in h.text for h in alice)
    bob = search_knowledge(store, embeddings, "mine", "vistrane soup", alpha=0.0, owner="bob")
    assert bob and "Vistrane" in bob[0].text
    # The heading is everyone's, the chunks are not.
    recipes = search_knowledge(
        store, embeddings, "mine", "secret recipes", alpha=0.0, owner="alice"
    )
    assert recipes and all("Pellinor" in h.text for h in recipes)


def test_reingesting_a_changed_file_keeps_the_keyword_text_in_sync(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    pdf = write_pdf(docs / "fleet.pdf", ["1 Airships\n\nThe zeppelin Hindora flew north."])
    _ingest(store, embeddings, pdf)
    assert search_knowledge(store, embeddings, "docs", "zeppelin", alpha=0.0)
    write_pdf(docs / "fleet.pdf", ["1 Balloons\n\nThe dirigible Hindora flew south."])
    _ingest(store, embeddings, pdf)
    assert search_knowledge(store, embeddings, "docs", "zeppelin", alpha=0.0) == []
    assert search_knowledge(store, embeddings, "docs", "airships", alpha=0.0) == []
    hits = search_knowledge(store, embeddings, "docs", "balloons dirigible", alpha=0.0)
    assert hits and hits[0].section == "1 Balloons"
    stored = list(store.iterate(knowledge_collection("docs").name))
    assert len(stored) == 1
    p = stored[0].properties
    assert p["search_text"] == chunk_search_text(p["text"], title=p["title"], section=p["section"])


# -- both backends rank alike ---------------------------------------------------------------------


def test_the_keyword_text_ranks_as_weaviate_ranks_it(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    """Knowledge search on the embedded store against the reference model of Weaviate's
    hybrid search (tests/unit/store/weaviate_reference.py) over the same chunks: Weaviate
    indexes ``search_text`` as the only searchable property, as the embedded store does."""
    pdf = write_pdf(docs / "survey.pdf", SECTIONED, title="Coastal Survey")
    _ingest(store, embeddings, pdf)
    spec = knowledge_collection("docs")
    assert spec.searchable == ("search_text",)
    shard = ref.Shard(searchable=list(spec.searchable))
    for obj in store.iterate(spec.name, include_vector=True):
        assert obj.vector is not None
        shard.put(obj.id, dict(obj.properties), list(obj.vector))
    for query in ("lighthouse maintenance", "Which channels are dredges?", "coastal survey"):
        for alpha in (0.0, 0.5):
            vector = embeddings.embed_query(query)
            got = [
                h.chunk_id
                for h in search_knowledge(store, embeddings, "docs", query, k=5, alpha=alpha)
            ]
            want = [r.uuid for r in ref.hybrid(shard, keyword_query(query), vector, alpha, 5)]
            assert got == want, (query, alpha)


# -- a knowledge base of the earlier schema ---------------------------------------------------------


def _old_knowledge_base(
    store: EmbeddedStore, embeddings: LocalEmbeddings, kb: str, owner: str | None, word: str
) -> list[str]:
    """Write a knowledge base the way the version before the keyword text did."""
    spec = dataclasses.replace(knowledge_collection(kb, owner), properties=KNOWLEDGE_PROPERTIES_V1)
    store.ensure_collection(spec)
    store.ensure_collection(manifest_collection(kb, owner))
    texts = [f"The {word} observatory tracks comets.", "Tides rise twice a day at the pier."]
    source = f"/papers/{word}.pdf"
    revision = f"rev-{word}"
    vectors = embeddings.embed_documents(texts)
    objects = [
        MemoryObject(
            chunk_id(revision, i),
            {
                "text": text,
                "title": "Old Notes",
                "source": source,
                "sha256": "0" * 64,
                "page_start": i + 1,
                "page_end": i + 1,
                "chunk_index": i,
                "char_start": 0,
                "char_end": len(text),
                "revision": revision,
            },
            vector,
        )
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]
    store.upsert(spec.name, objects, user=owner).raise_for_failures()
    info = SourceInfo(
        source, "Old Notes", revision, "0" * 64, 2, 2, 800, 200, "2026-01-01T00:00:00+00:00"
    )
    run_sync(acommit_source(store, kb, info, owner), instead=None)
    run_sync(arenew_generation(store, kb, owner), instead=None)
    return [o.id for o in objects]


def test_an_old_knowledge_base_is_upgraded_on_first_search(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    ids = _old_knowledge_base(store, embeddings, "docs", None, "Kelmar")
    before = {o.id: o for o in store.iterate("Knowledge_Docs", include_vector=True)}
    for owner, word in (("alice", "Arvel"), ("bob", "Brisk")):
        _old_knowledge_base(store, embeddings, "mine", owner, word)
    store.close()

    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    hits = search_knowledge(reopened, embeddings, "docs", "observatories", alpha=0.0)
    assert [h.chunk_id for h in hits] == [ids[0]]
    spec = reopened.spec("Knowledge_Docs")
    assert [p.name for p in spec.properties] == [p.name for p in KNOWLEDGE_PROPERTIES]
    assert spec.searchable == ("search_text",)
    after = {o.id: o for o in reopened.iterate("Knowledge_Docs", include_vector=True)}
    assert after.keys() == before.keys()
    for oid, old in before.items():
        new = after[oid]
        assert new.vector == pytest.approx(old.vector)
        assert {k: v for k, v in new.properties.items() if k in old.properties} == old.properties
        assert new.properties["search_text"] == chunk_search_text(
            old.properties["text"], title="Old Notes"
        )
        assert new.properties["section"] == ""
    # Users' own bases: every user's chunks upgraded, each still only theirs.
    alice = search_knowledge(reopened, embeddings, "mine", "brisk comets", alpha=0.0, owner="alice")
    assert alice and all("Arvel" in h.text for h in alice if "comets" in h.text)
    bob = search_knowledge(reopened, embeddings, "mine", "brisk", alpha=0.0, owner="bob")
    assert bob and "Brisk" in bob[0].text
    assert not any(n.startswith(STAGING_PREFIX) for n in reopened.collections())
    assert upgrade_knowledge_base(reopened, "docs") is False  # nothing left to do
    reopened.close()


def test_users_searching_an_old_shared_base_at_once_upgrade_it_once(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    # Two users' first turns on one server: both searches find the base of the earlier
    # schema; one upgrades it while the other waits, and neither loses or fails.
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    for owner, word in (("alice", "Arvel"), ("bob", "Brisk"), ("carol", "Cobalt")):
        _old_knowledge_base(store, embeddings, "mine", owner, word)
    store.close()
    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    users = ["alice", "bob", "carol"] * 4
    with ThreadPoolExecutor(len(users)) as pool:
        found = list(
            pool.map(
                lambda owner: search_knowledge(
                    reopened, embeddings, "mine", "observatory comets", alpha=0.0, owner=owner
                ),
                users,
            )
        )
    words = {"alice": "Arvel", "bob": "Brisk", "carol": "Cobalt"}
    for owner, hits in zip(users, found, strict=True):
        assert hits and words[owner] in hits[0].text
    assert not any(n.startswith(STAGING_PREFIX) for n in reopened.collections())
    assert sum(1 for _ in reopened.iterate("UserKnowledge_Mine", user="bob")) == 2
    reopened.close()


def test_forgetting_a_user_during_a_killed_upgrade_leaves_nothing_to_come_back(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    for owner, word in (("alice", "Arvel"), ("bob", "Brisk")):
        _old_knowledge_base(store, embeddings, "mine", owner, word)
    real_drop = store.drop_collection

    def drop_then_die(name: str) -> None:
        real_drop(name)
        if name == "UserKnowledge_Mine":
            raise RuntimeError("killed")

    store.drop_collection = drop_then_die  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        upgrade_knowledge_base(store, "mine", "alice")
    store.drop_collection = real_drop  # type: ignore[method-assign]
    assert STAGING_PREFIX + "UserKnowledge_Mine" in store.collections()

    asyncio.run(KnowledgeKind(store, embeddings).aforget_user_parts("alice"))
    assert not any(n.startswith(STAGING_PREFIX) for n in store.collections())
    assert list(store.iterate("UserKnowledge_Mine", user="alice")) == []
    bob = search_knowledge(store, embeddings, "mine", "brisk", alpha=0.0, owner="bob")
    assert bob and "Brisk" in bob[0].text
    assert search_knowledge(store, embeddings, "mine", "arvel", alpha=0.0, owner="alice") == []
    store.close()


def test_an_old_knowledge_base_is_upgraded_before_an_ingestion_writes_to_it(
    tmp_path: Path, docs: Path, embeddings: LocalEmbeddings
) -> None:
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    _old_knowledge_base(store, embeddings, "docs", None, "Kelmar")
    pdf = write_pdf(docs / "new.pdf", ["1 Comets\n\nThe Yarrowby telescope watches."])
    _ingest(store, embeddings, pdf)
    assert store.spec("Knowledge_Docs").searchable == ("search_text",)
    assert search_knowledge(store, embeddings, "docs", "kelmar", alpha=0.0)
    assert search_knowledge(store, embeddings, "docs", "comets yarrowby", alpha=0.0)
    store.close()


def test_an_upgrade_killed_after_the_old_chunks_were_dropped_is_finished(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    ids = _old_knowledge_base(store, embeddings, "docs", None, "Kelmar")

    class Killed(Exception):
        pass

    real_drop = store.drop_collection

    def drop_then_die(name: str) -> None:
        real_drop(name)
        if name == "Knowledge_Docs":
            raise Killed

    store.drop_collection = drop_then_die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        upgrade_knowledge_base(store, "docs")
    store.drop_collection = real_drop  # type: ignore[method-assign]
    assert "Knowledge_Docs" not in store.collections()  # only the staging copy holds them
    store.close()

    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    hits = search_knowledge(reopened, embeddings, "docs", "tides", alpha=0.0)
    assert [h.chunk_id for h in hits] == [ids[1]]
    assert reopened.count("Knowledge_Docs") == 2
    assert not any(n.startswith(STAGING_PREFIX) for n in reopened.collections())
    reopened.close()


def test_an_export_of_an_old_knowledge_base_imports_in_the_current_schema(
    tmp_path: Path, docs: Path, embeddings: LocalEmbeddings
) -> None:
    from agentic_memory.transfer import export_memories, import_memories

    old = EmbeddedStore(tmp_path / "old", dims=embeddings.dims)
    _old_knowledge_base(old, embeddings, "docs", None, "Kelmar")
    _old_knowledge_base(old, embeddings, "mine", "alice", "Arvel")
    path = tmp_path / "old.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_memories(old, out, embedding_model="wordllama")
    old.close()
    kwargs = {"embeddings": embeddings, "embedding_model": "wordllama", "allow_shared": True}

    # Into a fresh store, and again into the same one (already current: nothing changes).
    fresh = EmbeddedStore(tmp_path / "fresh", dims=embeddings.dims)
    import_memories(fresh, path, **kwargs)
    assert fresh.spec("Knowledge_Docs").searchable == ("search_text",)
    assert fresh.spec("UserKnowledge_Mine").searchable == ("search_text",)
    assert search_knowledge(fresh, embeddings, "docs", "observatories", alpha=0.0)
    again = import_memories(fresh, path, **kwargs)
    assert sum(again.counts.values()) == 0
    fresh.close()

    # Into a store the earlier version wrote (its knowledge base emptied): upgraded first.
    target = EmbeddedStore(tmp_path / "target", dims=embeddings.dims)
    spec = dataclasses.replace(knowledge_collection("docs"), properties=KNOWLEDGE_PROPERTIES_V1)
    target.ensure_collection(spec)
    import_memories(target, path, **kwargs)
    assert target.spec("Knowledge_Docs").searchable == ("search_text",)
    hits = search_knowledge(target, embeddings, "docs", "tides", alpha=0.0)
    assert hits and "Tides" in hits[0].text
    target.close()


def test_markdown_headings_are_sections_outside_fenced_code() -> None:
    text = "\n".join(
        [
            "# Printers",
            "The LaserJet 4 takes toner 92298A.",
            "```bash",
            "# install the driver",  # a shell comment, not a heading
            "```",
            "## Scanners ##",
            "#hashtag is not a heading",
            "### " + "Long " * 40,
        ]
    )
    found = [line for _, line in find_headings(text, markdown=True)]
    assert found == ["Printers", "Scanners", ("Long " * 40)[:80]]
    assert find_headings(text) == []  # a PDF's "# ..." line is no heading


def test_a_markdown_files_chunks_carry_its_headings(
    docs: Path, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    notes = docs / "manual.md"
    notes.write_text(
        "# Printers\n\n" + "The LaserJet 4 takes toner cartridge 92298A. " * 30 + "\n\n"
        "# Scanners\n\n" + "The ScanJet needs a SCSI card and its driver. " * 30 + "\n"
    )
    _ingest(store, embeddings, notes)
    chunks = list_chunks(store, "docs", str(notes.resolve()))
    for name, section in (("LaserJet", "Printers"), ("ScanJet", "Scanners")):
        found = {c.properties["section"] for c in chunks if name in c.properties["text"]}
        assert found == {section}
