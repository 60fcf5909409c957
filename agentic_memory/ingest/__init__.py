"""Ingest PDF, text and Markdown files into knowledge bases that search with citations."""

from agentic_memory.ingest.inputs import Upload
from agentic_memory.ingest.pipeline import (
    DEFAULT_BATCH_SIZE,
    FileResult,
    IngestEvent,
    IngestReport,
    aingest_paths,
    aingest_uploads,
    ingest_paths,
    ingest_uploads,
)
from agentic_memory.ingest.readers import SUPPORTED_SUFFIXES, IngestFileError
from agentic_memory.ingest.text import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "SUPPORTED_SUFFIXES",
    "FileResult",
    "IngestEvent",
    "IngestFileError",
    "IngestReport",
    "Upload",
    "aingest_paths",
    "aingest_uploads",
    "ingest_paths",
    "ingest_uploads",
]
