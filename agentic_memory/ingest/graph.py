"""A one-node graph that ingests documents, so a server (and LangGraph Studio) can take them.

Input: the documents' content, ``{"documents": [{"name": "notes.md", "text": "..."},
{"name": "paper.pdf", "data_base64": "JVBERi0..."}], "kb": "default"}``, or, where the
operator allows it, paths on the server: ``{"paths": ["manuals/"], "kb": "manuals"}``
(plus optional ``chunk_size``, ``chunk_overlap`` and ``password``). Output: the ingestion
report as a dictionary.

Who may write what:

* by default the documents go to the caller's own knowledge base ``kb``, which only they
  recall and read. The caller is the server's authenticated user, else ``context.user_id``
  (a run whose ``context.user_id`` names someone else is refused);
* ``"shared": true`` writes the shared knowledge base every user reads: an operator's
  right (:mod:`agentic_memory.operators`), refused to anyone else;
* ``paths`` are read only inside the documents folders the operator configures
  (``AMEM_INGEST_DIRS``, see ``agentic_memory.ingest.inputs``); without them the server reads no path,
  and a path outside them is refused with one message whatever is there.

The chunks go to the run's store (the one ``langgraph.json`` names, the agent's own);
compiled without one, the configured store is opened for the run.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from agentic_memory.graph.admission import run_context
from agentic_memory.graph.memory import memory_of
from agentic_memory.graph.resources import run_config
from agentic_memory.ingest.inputs import INGEST_DIRS_ENV, Upload, ingest_roots
from agentic_memory.ingest.pipeline import IngestOptions, aingest_paths, aingest_uploads
from agentic_memory.ingest.text import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from agentic_memory.operators import run_identity
from agentic_memory.store import InvalidInputError, check_user_id

__all__ = [
    "GRAPH_NAME",
    "IngestContext",
    "IngestDocument",
    "IngestInput",
    "IngestOutput",
    "builder",
    "graph",
]

GRAPH_NAME = "Ingest"
MAX_DOCUMENTS = 100
"""The most documents one run takes."""


class IngestDocument(TypedDict):
    """One uploaded document: a file name and its content, as text or as base64 bytes."""

    name: str
    text: NotRequired[str]
    data_base64: NotRequired[str]


class IngestInput(TypedDict, total=False):
    """What to ingest and where: ``documents`` (content) or ``paths`` (on the server)."""

    documents: list[IngestDocument]
    paths: list[str]
    kb: str
    shared: bool
    chunk_size: int
    chunk_overlap: int
    password: str


class IngestOutput(TypedDict):
    """The report of the ingestion (``IngestReport.to_dict``)."""

    report: dict[str, Any]


class IngestState(IngestInput, IngestOutput, total=False):
    """Input and output together."""


@dataclass(kw_only=True)
class IngestContext:
    """Settings of one ingestion run."""

    user_id: str = field(
        default="",
        metadata={
            "description": "Whose own knowledge base takes the documents (default: the "
            "server's authenticated user)."
        },
    )


def _owner(ctx: IngestContext) -> tuple[str | None, bool]:
    """Return the user the run acts for (``None``: nobody known) and whether an operator."""
    identity, operator = run_identity(run_config().get("configurable") or {})
    given = ctx.user_id.strip() if isinstance(ctx.user_id, str) else ""
    if identity and given and given != identity:
        raise InvalidInputError(
            f"context.user_id {given!r} is not the authenticated user: an ingestion acts for "
            "the user the server authenticated; nothing was read or written"
        )
    user = identity or given or None
    return (check_user_id(user) if user else None), operator


def _uploads(raw: object) -> list[Upload]:
    if not isinstance(raw, list) or not raw:
        raise InvalidInputError("documents is a non-empty list of {name, text | data_base64}")
    if len(raw) > MAX_DOCUMENTS:
        raise InvalidInputError(f"at most {MAX_DOCUMENTS} documents per run, got {len(raw)}")
    uploads = []
    for item in raw:
        if not isinstance(item, dict) or set(item) - {"name", "text", "data_base64"}:
            raise InvalidInputError(
                "each document is {'name': file name, 'text': str} or {'name', 'data_base64'}"
            )
        if ("text" in item) == ("data_base64" in item):
            raise InvalidInputError(
                f"document {str(item.get('name'))[:80]!r} needs exactly one of text or data_base64"
            )
        if "text" in item:
            if not isinstance(item["text"], str):
                raise InvalidInputError("a document's text is a string")
            try:
                data = item["text"].encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInputError("a document's text is not valid Unicode") from None
        else:
            try:
                data = base64.b64decode(str(item["data_base64"]), validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInputError("a document's data_base64 is not base64") from None
        try:
            uploads.append(Upload(str(item.get("name")), data))
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
    return uploads


async def ingest_files(state: IngestState, runtime: Runtime[IngestContext]) -> dict[str, Any]:
    """Ingest the uploaded documents (or allowed server paths) into a knowledge base."""
    ctx = run_context(runtime, IngestContext)
    owner, operator = _owner(ctx)
    shared = state.get("shared", False)
    if not isinstance(shared, bool):
        raise InvalidInputError(f"shared is true or false, got {shared!r}")
    if shared and not operator:
        raise InvalidInputError(
            "writing a shared knowledge base is an operator's right (AMEM_OPERATORS): "
            "leave shared out to ingest into your own knowledge base; nothing was written"
        )
    if not shared and owner is None:
        raise InvalidInputError(
            "whose knowledge base? pass context={'user_id': ...} (or authenticate); nothing "
            "was written"
        )
    if ("documents" in state) == ("paths" in state):
        raise InvalidInputError("give either documents (their content) or paths, not both")
    # Without a store the pipeline opens the configured one; a foreign store is an error.
    store, embeddings = (
        (None, None) if runtime.store is None else memory_of(runtime.store).for_ingestion()
    )
    options: IngestOptions = {
        "kb": state.get("kb", "default"),
        "store": store,
        "embeddings": embeddings,
        "chunk_size": state.get("chunk_size", DEFAULT_CHUNK_SIZE),
        "chunk_overlap": state.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
        "password": state.get("password"),
        "owner": None if shared else owner,
    }
    if "documents" in state:
        # Decoding base64 touches every byte: off the event loop.
        uploads = await asyncio.to_thread(_uploads, state["documents"])
        return {"report": (await aingest_uploads(uploads, **options)).to_dict()}
    # The configured folders are resolved on the disk: off the event loop.
    roots = await asyncio.to_thread(ingest_roots)
    if not roots:
        raise InvalidInputError(
            "this server reads no paths: send the documents' content (documents=[...]); "
            f"an operator can allow folders with {INGEST_DIRS_ENV}"
        )
    paths = state["paths"]
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InvalidInputError("paths is a list of strings")
    return {"report": (await aingest_paths(list(paths), roots=roots, **options)).to_dict()}


builder = StateGraph(
    IngestState,
    input_schema=IngestInput,
    output_schema=IngestOutput,
    context_schema=IngestContext,
)
builder.add_node(ingest_files)
builder.add_edge(START, "ingest_files")
builder.add_edge("ingest_files", END)

graph = builder.compile(name=GRAPH_NAME)
"""The served ingestion graph: ``"ingest": "agentic_memory.ingest.graph:graph"`` in langgraph.json."""
