"""Agentic Memory: a LangGraph agent's long-term memory, the way CoALA describes a mind.

Subpackages, one idea each:

- :mod:`agentic_memory.store`: the storage engine (embedded SQLite + numpy, or Weaviate) with
  hybrid search ranked as Weaviate ranks it;
- :mod:`agentic_memory.kinds`: the memory kinds (facts, episodes, rules, messages, knowledge),
  each in one module;
- :mod:`agentic_memory.models`: chat models, structured calls, the offline local model and
  embeddings;
- :mod:`agentic_memory.cli`: the ``amem`` command line;
- :mod:`agentic_memory.api`, :mod:`agentic_memory.forget`, :mod:`agentic_memory.transfer`: the
  Python API for notebooks, forgetting, export and import.

The graph itself is the top-level :mod:`graph` package (``langgraph.json`` serves it), with
:mod:`ingest` and :mod:`prompts` beside it.
"""
