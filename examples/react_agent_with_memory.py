"""Any LangGraph agent can use agentic memory: a prebuilt tool-calling agent with memory tools.

The agent keeps its own notes in ``("memories", <user>)`` and searches them together with the
facts the memory agent learned about the user (``("facts", <user>)``), all through
:class:`~agentic_memory.langgraph_store.AgenticStore`, the same LangGraph store the memory
agent, ``langgraph dev`` and the SDK's ``client.store`` use, with its hybrid search.

``create_agent`` is LangChain's prebuilt agent (LangGraph's ``create_react_agent`` moved
there in LangGraph 1.0); ``pip install langchain`` if your environment lacks it. Run it with a
model that calls tools (OpenAI, or an OpenAI-compatible server)::

    OPENAI_API_KEY=... python examples/react_agent_with_memory.py alice "Remember I prefer tea"
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel

from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.tools import memory_tools

PROMPT = (
    "You help the user. Before answering, search what you remember about them with "
    "search_memory; when they tell you something worth keeping, save it with save_memory."
)


def build_agent(model: BaseChatModel, store: AgenticStore) -> Any:
    """Return a ReAct-style agent (``langchain.agents.create_agent``) with the memory tools."""
    return create_agent(model, memory_tools(), system_prompt=PROMPT, store=store)


async def main(user: str, text: str) -> None:
    """Ask the agent once, as ``user``."""
    with AgenticStore.from_env() as store:
        agent = build_agent(resolve_chat_model("auto"), store)
        out = await agent.ainvoke(
            {"messages": [{"role": "user", "content": text}]},
            {"configurable": {"user_id": user}},
        )
        print(out["messages"][-1].content)  # noqa: T201


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], " ".join(sys.argv[2:]) or "What do you remember about me?"))
