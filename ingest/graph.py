"""A one-node graph that ingests files, so LangGraph Studio can trigger ingestion.

Input: ``{"paths": ["docs/"], "kb": "manuals"}`` (plus optional ``chunk_size``,
``chunk_overlap`` and ``password``); output: the ingestion report as a dictionary. Paths are
read on the machine that runs the graph server. The chunks go to the run's store (the one
``langgraph.json`` names, the agent's own); compiled without one, the configured store is
opened for the run.
"""

from __future__ import annotations

import asyncio
from typing import Any, NotRequired, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from ingest.pipeline import ingest_paths
from ingest.text import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE

__all__ = ["GRAPH_NAME", "IngestInput", "IngestOutput", "builder", "graph"]

GRAPH_NAME = "Ingest"


class IngestInput(TypedDict):
    """What to ingest and where."""

    paths: list[str]
    kb: NotRequired[str]
    chunk_size: NotRequired[int]
    chunk_overlap: NotRequired[int]
    password: NotRequired[str]


class IngestOutput(TypedDict):
    """The report of ``ingest.ingest_paths`` (``IngestReport.to_dict``)."""

    report: dict[str, Any]


class IngestState(IngestInput, IngestOutput):
    """Input and output together."""


async def ingest_files(state: IngestState, runtime: Runtime[None]) -> dict[str, Any]:
    """Ingest the given paths into the knowledge base of the run's memory store."""
    memory = getattr(runtime.store, "memory", None)
    report = await asyncio.to_thread(
        ingest_paths,
        list(state["paths"]),
        kb=state.get("kb", "default"),
        store=getattr(memory, "store", None),
        embeddings=getattr(memory, "embeddings", None),
        chunk_size=state.get("chunk_size", DEFAULT_CHUNK_SIZE),
        chunk_overlap=state.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
        password=state.get("password"),
    )
    return {"report": report.to_dict()}


builder = StateGraph(IngestState, input_schema=IngestInput, output_schema=IngestOutput)
builder.add_node(ingest_files)
builder.add_edge(START, "ingest_files")
builder.add_edge("ingest_files", END)

graph = builder.compile(name=GRAPH_NAME)
"""The served ingestion graph: ``"ingest": "./ingest/graph.py:graph"`` in langgraph.json."""
