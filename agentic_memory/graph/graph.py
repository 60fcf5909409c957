"""The memory agent graph: the served ``graph``, its ``builder`` and ``compile_graph``.

``graph`` is compiled without a checkpointer or a store: ``langgraph dev`` and LangGraph
Platform bring their own checkpointer, and the store ``langgraph.json`` names (agentic
memory's). ``compile_graph`` compiles the same builder with a given checkpointer and store
for notebooks and tests, and can bind given models.
"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from agentic_memory.graph.admission import ERRORS_KEY, RunErrors
from agentic_memory.graph.context import Context
from agentic_memory.graph.nodes import (
    FAN_OUT,
    admit,
    compact,
    fail,
    generate,
    load_procedural,
    log_turn,
    recall_episodic,
    recall_semantic,
    reflect,
    refuse,
    remember_facts,
    rollback,
    route_after_turn,
    route_turn,
    update_procedural,
)
from agentic_memory.graph.resources import MODELS_KEY, BoundModels
from agentic_memory.graph.state import InputState, State
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import get_embeddings
from agentic_memory.store import MemoryStore

__all__ = ["GRAPH_NAME", "builder", "compile_graph", "graph"]

GRAPH_NAME = "Agentic Memory"

_DEFAULT_HANDLER = "__default_error_handler__"


class _Builder(StateGraph[State, Context, InputState, State]):
    """The graph's builder; it compiles any number of times.

    LangGraph adds the graph-wide error handler's node to the builder when it compiles, and
    refuses to compile a builder that already has it: it is taken out again first.
    """

    def compile(
        self, *args: Any, **kwargs: Any
    ) -> CompiledStateGraph[State, Context, InputState, State]:
        self.nodes.pop(_DEFAULT_HANDLER, None)
        # Each compiled graph keeps its failed runs' errors for ``refuse`` (no process-wide list).
        compiled = super().compile(*args, **kwargs)
        return compiled.with_config(configurable={ERRORS_KEY: RunErrors()})


builder = _Builder(State, input_schema=InputState, context_schema=Context)
# A node that raises is handled by ``fail``: the run is rolled back, then fails with the error.
# (LangGraph injects the ``error: NodeError`` parameter; its stubs do not list the signature.)
builder.set_node_defaults(error_handler=fail)  # type: ignore[arg-type]
builder.add_node(admit)
builder.add_node(rollback, destinations=("refuse",))
builder.add_node(refuse)  # type: ignore[call-overload]  # its input is rollback's Send
builder.add_node(recall_episodic)
builder.add_node(recall_semantic)
builder.add_node(load_procedural)
builder.add_node(remember_facts)
builder.add_node(compact)
builder.add_node(generate)
builder.add_node(log_turn)
builder.add_node(reflect)
builder.add_node(update_procedural)
builder.add_edge(START, "admit")
builder.add_conditional_edges("admit", route_turn, [*FAN_OUT, "reflect", "rollback"])
builder.add_edge("refuse", END)
builder.add_edge(list(FAN_OUT), "compact")
builder.add_edge("compact", "generate")
builder.add_edge("generate", "log_turn")
builder.add_conditional_edges("log_turn", route_after_turn, ["reflect", END])
builder.add_edge("reflect", "update_procedural")
builder.add_edge("update_procedural", END)

graph = builder.compile(name=GRAPH_NAME)
"""The served graph (no checkpointer: the server provides one)."""


def compile_graph(
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | MemoryStore | None = None,
    embeddings: Embeddings | None = None,
    chat_model: BaseChatModel | None = None,
    memory_model: BaseChatModel | None = None,
    name: str = GRAPH_NAME,
) -> CompiledStateGraph[State, Context, InputState, State]:
    """Compile the graph with a checkpointer, the memory store, and optionally models.

    Args:
        checkpointer: Keeps each thread's working memory between runs (see
            ``agentic_memory.graph.persistence``); ``None`` keeps nothing between runs.
        store: The long-term memory: an ``AgenticStore``, or a ``MemoryStore`` to wrap in
            one (with ``embeddings``); default: ``AgenticStore.from_env()``, the store and
            embeddings the environment configures. The caller owns it and closes it.
        embeddings: For a ``MemoryStore`` (or the default store); default:
            ``agentic_memory.models.embeddings.get_embeddings()`` (offline WordLlama).
        chat_model: The model that answers; default: resolved from ``context.model``.
        memory_model: The model for facts, summaries, reflections and rules; default:
            ``chat_model`` when given, else resolved from ``context.memory_model``.
        name: The graph's name.

    Returns:
        The compiled graph; every run uses this store (as ``runtime.store``) and these models.
    """
    if isinstance(store, MemoryStore):
        store = AgenticStore(store, embeddings or get_embeddings())
    elif store is None:
        store = AgenticStore.from_env(embeddings=embeddings)
    compiled = builder.compile(checkpointer=checkpointer, store=store, name=name)
    if chat_model is None and memory_model is None:
        return compiled
    bound = BoundModels(answer=chat_model, memory=memory_model or chat_model)
    return compiled.with_config(configurable={MODELS_KEY: bound})
