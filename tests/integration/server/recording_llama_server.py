"""llama.cpp's server, recording every prompt exactly as the model is fed it.

Run in place of ``llama_cpp.server`` (``AMEM_LOCAL_SERVER=<this file>``), with
``RECORD_PROMPTS`` naming a file: each completion appends one JSON line with the prompt
detokenised with its special tokens (Gemma's turn markers included), whether a grammar
constrained it, and its token limit. Everything else is the real server.
"""

from __future__ import annotations

import json
import os
import runpy
from typing import Any

import llama_cpp

_create_completion = llama_cpp.Llama.create_completion


def _recording(self: llama_cpp.Llama, prompt: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(prompt, list):
        text = self.detokenize(prompt, special=True).decode("utf-8", errors="replace")
    else:
        text = str(prompt)
    record = {
        "prompt": text,
        "tokens": len(prompt) if isinstance(prompt, list) else None,
        "grammar": kwargs.get("grammar") is not None,
        "max_tokens": kwargs.get("max_tokens"),
    }
    with open(os.environ["RECORD_PROMPTS"], "a", encoding="utf-8") as sink:
        sink.write(json.dumps(record) + "\n")
    return _create_completion(self, prompt, *args, **kwargs)


llama_cpp.Llama.create_completion = _recording  # type: ignore[method-assign]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
