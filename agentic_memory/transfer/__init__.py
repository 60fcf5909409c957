"""Export and import every kind of memory as JSON Lines, on any storage backend.

The file starts with a header line (format, version, embedding model and vector size, and the
schema of every collection it holds), followed by one object per line::

    {"kind": "fact", "collection": "UserFact", "user": "alice", "id": "…",
     "properties": {...}, "vector": [...]}

``kind`` is one of ``episode``, ``fact``, ``message``, ``rule``, ``chunk`` (a knowledge-base
chunk) and ``source`` (an entry of a knowledge base's manifest, which says which revision of
each source is visible). Ids and
properties are written exactly as stored, so an export → forget → import round trip restores the
same memories. This is also how memories move from the embedded store to Weaviate: the import
writes through the ``MemoryStore`` interface and re-embeds from the text when the target uses a
different embedding model or vector size.

An import checks the whole file before it writes anything (a bad line is reported with its
line number), then writes it all or nothing: one transaction on the embedded store, undone on
Weaviate. Into a store that holds memories already it merges by each kind's rules (see
:func:`import_memories`). A user's own knowledge bases (their uploads) are their data, like
their facts. The shared knowledge bases and the rules shared by every user are imported only
when the operator allows it (``allow_shared``, ``amem memories import --shared``), and the
shared rules even then only through their gate: the file's latest version becomes a pending
proposal (:class:`agentic_memory.kinds.rules.shared.SharedRules`) that an operator approves.

The import is asynchronous at its core (:func:`aimport_memories`); :func:`import_memories` is
its blocking twin for scripts and the CLI. The export is storage iteration, synchronous.

* :mod:`~agentic_memory.transfer.format`: the header, the lines and their checks;
* :mod:`~agentic_memory.transfer.export`: writing an export file;
* :mod:`~agentic_memory.transfer.staging`: the checked file, staged on disk;
* :mod:`~agentic_memory.transfer.importing`: writing it into a store, all or nothing.
"""

from __future__ import annotations

from agentic_memory.kinds.importing import MAX_EPISODE_CHARS
from agentic_memory.transfer.export import export_memories, export_to_file
from agentic_memory.transfer.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    KINDS,
    MAX_LINE_CHARS,
    ExportHeader,
    Kind,
    TransferError,
    TransferSummary,
    embedding_text,
    kind_of,
    read_header,
    spec_from_dict,
    spec_to_dict,
)
from agentic_memory.transfer.importing import aimport_memories, import_memories

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KINDS",
    "MAX_EPISODE_CHARS",
    "MAX_LINE_CHARS",
    "ExportHeader",
    "Kind",
    "TransferError",
    "TransferSummary",
    "aimport_memories",
    "embedding_text",
    "export_memories",
    "export_to_file",
    "import_memories",
    "kind_of",
    "read_header",
    "spec_from_dict",
    "spec_to_dict",
]
