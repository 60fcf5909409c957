"""llama.cpp's OpenAI-compatible server, with the chat format the offline model answers in.

The packaged model is the *base* Gemma 3 270M: it was never trained on Gemma's turn markers,
and given the layered prompt in that format it recites the prompt instead of answering
(measured: every answer of a 6-turn session, 256 tokens each). Given the same prompt as a
plain transcript ending in ``Assistant:``, it continues the transcript with a short answer
(6 to 15 tokens in the same session). So this server registers ``amem-transcript``:

- a request with tools (the memory's structured outputs: facts, reflections, rules) is
  formatted as before, in llama-cpp-python's ``gemma`` format, whose grammar-constrained
  tool calls were measured valid (``bench/results/local_model.md``); the client folds the
  system messages into the user turns for it (``chat.merge_system_messages``);
- any other request is rendered by :func:`render_transcript`.

Run by path (``python llama_server.py <llama_cpp.server arguments>``) under the launcher,
so only the standard library is imported at module level: the tests import
:func:`render_transcript` without llama.cpp installed.
"""

from __future__ import annotations

import runpy
from collections.abc import Mapping, Sequence
from typing import Any

TRANSCRIPT_FORMAT = "amem-transcript"
"""The ``--chat_format`` name this server registers."""
USER_LABEL = "User:"
ASSISTANT_LABEL = "Assistant:"
TRANSCRIPT_STOP = ("\nUser:", "\nAssistant:", "<end_of_turn>", "<start_of_turn>")
"""Where a transcript answer ends: the model starting the next turn, or Gemma's markers."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return "" if content is None else str(content)


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """Render OpenAI chat messages as the plain transcript a base model continues.

    System (and developer) messages become paragraphs where they stand; user, assistant
    and tool messages become ``User:`` / ``Assistant:`` / ``Tool result:`` lines, a run of
    them one block; the transcript ends with ``Assistant:`` for the model to continue.
    An assistant message with no text (a bare tool call) adds nothing.

    Args:
        messages: OpenAI chat messages (``role``, ``content``: a string or content parts,
            whose text parts are kept).

    Returns:
        The prompt text.
    """
    blocks: list[str] = []
    dialogue: list[str] = []
    for message in messages:
        role = message.get("role")
        text = _text(message.get("content")).strip()
        if role in ("system", "developer"):
            if text:
                if dialogue:
                    blocks.append("\n".join(dialogue))
                    dialogue = []
                blocks.append(text)
        elif role == "user":
            dialogue.append(f"{USER_LABEL} {text}")
        elif role == "assistant":
            if text:
                dialogue.append(f"{ASSISTANT_LABEL} {text}")
        elif role in ("tool", "function"):
            dialogue.append(f"Tool result: {text}")
    dialogue.append(ASSISTANT_LABEL)
    blocks.append("\n".join(dialogue))
    return "\n\n".join(blocks)


def format_transcript(messages: list[Any], **kwargs: Any) -> Any:
    """Format a request in ``amem-transcript``: Gemma's format for tools, else a transcript.

    Returns:
        llama-cpp-python's ``ChatFormatterResponse`` (the prompt and its stop sequences).
    """
    from llama_cpp.llama_chat_format import (  # noqa: PLC0415  (only where llama.cpp runs)
        ChatFormatterResponse,
        format_gemma,
    )

    if kwargs.get("tools") or kwargs.get("functions"):
        return format_gemma(messages=messages, **kwargs)
    return ChatFormatterResponse(prompt=render_transcript(messages), stop=list(TRANSCRIPT_STOP))


def register() -> None:
    """Register ``amem-transcript`` with llama-cpp-python (in the server's process)."""
    from llama_cpp.llama_chat_format import register_chat_format  # noqa: PLC0415

    register_chat_format(TRANSCRIPT_FORMAT)(format_transcript)


if __name__ == "__main__":
    register()
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
