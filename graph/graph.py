"""The memory agent graph: the served ``graph`` and ``compile_graph`` for notebooks and tests.

``graph`` is compiled without a checkpointer because ``langgraph dev`` and LangGraph
Platform bring their own; it opens the default store and models from the environment on
first use. ``compile_graph`` binds a given store, embeddings, models and checkpointer.
"""

from __future__ import annotations

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import MemoryStore, open_store
from graph.context import Context
from graph.nodes import (
    FAN_OUT,
    admit,
    compact,
    generate,
    load_procedural,
    log_turn,
    recall_episodic,
    recall_semantic,
    reflect,
    refuse,
    remember_facts,
    route_after_turn,
    route_turn,
    update_procedural,
)
from graph.resources import RESOURCES_KEY, Resources, register
from graph.state import InputState, State

__all__ = ["GRAPH_NAME", "builder", "compile_graph", "graph"]

GRAPH_NAME = "Agentic Memory"

builder = StateGraph(State, input_schema=InputState, context_schema=Context)
builder.add_node(admit)
builder.add_node(refuse)
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
builder.add_conditional_edges("admit", route_turn, [*FAN_OUT, "reflect", "refuse"])
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
    store: MemoryStore | None = None,
    embeddings: Embeddings | None = None,
    chat_model: BaseChatModel | None = None,
    memory_model: BaseChatModel | None = None,
    name: str = GRAPH_NAME,
) -> CompiledStateGraph[State, Context, InputState, State]:
    """Compile the graph bound to the given resources.

    Args:
        checkpointer: Keeps each thread's working memory between runs (see
            ``graph.persistence``); ``None`` keeps nothing between runs.
        store: The long-term memory store; default: ``agentic_memory.store.open_store`` from the
            environment, sized for the embeddings.
        embeddings: Default: ``agentic_memory.models.embeddings.get_embeddings()`` (offline WordLlama).
        chat_model: The model that answers; default: resolved from ``context.model``.
        memory_model: The model for facts, summaries, reflections and rules; default:
            ``chat_model`` when given, else resolved from ``context.memory_model``.
        name: The graph's name.

    Returns:
        The compiled graph; every run uses these resources. The caller still owns the
        store and closes it.
    """
    embeddings = embeddings or get_embeddings()
    if store is None:
        store = open_store(embedding_dims(embeddings))
    resources = Resources(
        memory_store=store,
        embeddings=embeddings,
        answer_model=chat_model,
        memory_model=memory_model or chat_model,
    )
    token = register(resources)
    compiled = builder.compile(checkpointer=checkpointer, name=name)
    return compiled.with_config(configurable={RESOURCES_KEY: token})
