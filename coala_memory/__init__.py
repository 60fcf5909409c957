"""Agentic Memory: a LangGraph agent's long-term memory, the way CoALA describes a mind.

Subpackages, one idea each:

- :mod:`coala_memory.store`: the storage engine (embedded SQLite + numpy, or Weaviate) with
  hybrid search ranked as Weaviate ranks it;
- :mod:`coala_memory.kinds`: the memory kinds (facts, episodes, rules, messages, knowledge),
  each in one module;
- :mod:`coala_memory.models`: chat models, structured calls, the offline local model and
  embeddings;
- :mod:`coala_memory.cli`: the ``amem`` command line;
- :mod:`coala_memory.api`, :mod:`coala_memory.forget`, :mod:`coala_memory.transfer`: the
  Python API for notebooks, forgetting, export and import.

The graph itself is the top-level :mod:`graph` package (``langgraph.json`` serves it), with
:mod:`ingest` and :mod:`prompts` beside it.
"""
