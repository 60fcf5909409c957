"""The ``("knowledge", kb)`` namespaces: knowledge is written by ingestion only.

A value that cannot be a memory is refused with a clear error and changes nothing
(moved from ``tests/unit/langgraph_store/test_kinds.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.store.base import PutOp

from agentic_memory.ingest import ingest_paths
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import InvalidInputError


def test_knowledge_is_read_only(amem: AgenticStore, tmp_path: Path) -> None:
    doc = tmp_path / "printers.md"
    doc.write_text(
        "1 Printers\n\nThe LaserJet 4 takes toner cartridge 92298A.\n\n"
        "2 Scanners\n\nThe ScanJet needs a SCSI card.\n"
    )
    report = ingest_paths([doc], kb="manuals", store=amem.memory_store, embeddings=amem.embeddings)
    assert report.ok
    chunks = amem.search(("knowledge", "manuals"))
    assert chunks and all(c.value["source"] == str(doc.resolve()) for c in chunks)
    hits = amem.search(("knowledge", "Manuals"), query="toner cartridge")
    assert "92298A" in hits[0].value["text"]
    assert hits[0].value["citation"] == "[printers.md p.1]"
    assert hits[0].value["section"] == "1 Printers"
    assert amem.get(("knowledge", "manuals"), hits[0].key).value["section"] == "1 Printers"
    assert amem.get(("knowledge", "manuals"), hits[0].key) is not None
    assert ("knowledge", "manuals") in amem.list_namespaces(prefix=("knowledge",))
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.put(("knowledge", "manuals"), hits[0].key, {"text": "edited"})
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.delete(("knowledge", "manuals"), hits[0].key)
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.batch([PutOp(("knowledge", "manuals"), "x", {"text": "y"}, ttl=3)])
    assert amem.search(("knowledge", "nothing_here")) == []
    with pytest.raises(InvalidInputError, match="knowledge base name"):
        amem.search(("knowledge", "not a name"))
