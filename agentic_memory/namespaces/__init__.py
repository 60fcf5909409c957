"""The LangGraph store's namespaces below the memory kinds: they import only the store.

- :mod:`~agentic_memory.namespaces.labels`: namespace and key checks, labels, matching;
- :mod:`~agentic_memory.namespaces.search`: results, JSON value checks, search filters.
"""
