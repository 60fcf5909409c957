"""The memory agent graph (LangGraph): ``graph`` for the server, ``compile_graph`` for code."""

from agentic_memory.graph.graph import builder, compile_graph, graph

__all__ = ["builder", "compile_graph", "graph"]
