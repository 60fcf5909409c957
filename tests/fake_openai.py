"""A scripted OpenAI-compatible chat server for integration tests (stdlib only, no network).

It serves ``GET /v1/models``, ``POST /v1/chat/completions`` (plain JSON and SSE
streaming) and ``POST /v1/embeddings`` on 127.0.0.1 and a free port, from a daemon thread.
Embeddings are a deterministic hashed bag of words (``embedding_dims`` floats, L2-normalised,
as JSON floats or base64 float32 as the request asks), so texts sharing words are close;
their requests are kept in ``server.embedding_requests``. How a chat request is answered
depends on the request:

- with ``tools``: a forced tool call of the function named by ``tool_choice`` (else the
  first tool). Its arguments come from ``tool_scripts[name]`` (a dict, or a callable that
  receives the request body); without a script they are built from the function's JSON
  schema (every required field filled with a valid minimal value), so structured output of
  any bounded schema validates;
- without tools: the text from ``text_script`` (a callable on the request body, or a list
  of replies used in order, the last one repeated); by default "Reply N: <last user text>".

Every request body is kept in ``server.requests`` for assertions. ``keep_alive=True`` answers
over HTTP/1.1 and keeps connections open, as OpenAI does (clients then reuse them).

Usage::

    with FakeOpenAIServer(tool_scripts={"ExtractedFacts": {...}}) as server:
        os.environ["AMEM_BASE_URL"] = server.base_url
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Request = dict[str, Any]
ToolScript = Mapping[str, Any] | Callable[[Request], Mapping[str, Any]]
TextScript = Callable[[Request], str] | Sequence[str]


def message_text(message: Mapping[str, Any]) -> str:
    """Return the text of an OpenAI chat message (string or content parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def last_user_text(request: Request) -> str:
    """Return the text of the last user message of a chat request."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            return message_text(message)
    return ""


def prompt_text(request: Request) -> str:
    """Return every message's text, joined: what the model was shown."""
    return "\n".join(message_text(m) for m in request.get("messages", []))


def fill_schema(schema: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> Any:
    """Build a minimal value that validates against a (pydantic-generated) JSON schema."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return fill_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return fill_schema(options[0], defs)
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: fill_schema(properties[name], defs)
            for name in schema.get("required", list(properties))
            if name in properties
        }
    if kind == "array":
        count = int(schema.get("minItems", 0))
        return [fill_schema(schema.get("items", {}), defs) for _ in range(count)]
    if kind == "string":
        low = int(schema.get("minLength", 0))
        high = int(schema.get("maxLength", 64))
        return ("fake" * 16)[: max(low, min(4, high))]
    if kind in ("number", "integer"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 1))
        value = (low + high) / 2 if high >= low else low
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    return None


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeOpenAIServer:
    """A scripted OpenAI-compatible server; use as a context manager."""

    def __init__(
        self,
        *,
        model: str = "fake-model",
        text_script: TextScript | None = None,
        tool_scripts: Mapping[str, ToolScript] | None = None,
        embedding_dims: int = 32,
        keep_alive: bool = False,
    ) -> None:
        self.model = model
        # OpenAI keeps connections open (HTTP/1.1), so clients pool them: a pooled connection
        # is bound to the event loop that opened it, which a test of loop handling needs.
        self.keep_alive = keep_alive
        self.embedding_dims = embedding_dims
        self.embedding_requests: list[Request] = []
        self._text_script = text_script
        self._tool_scripts = dict(tool_scripts or {})
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._text_index = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind 127.0.0.1 on a free port and serve from a daemon thread."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if self.keep_alive else "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    server._send_json(
                        self,
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": server.model,
                                    "object": "model",
                                    "created": 0,
                                    "owned_by": "fake",
                                }
                            ],
                        },
                    )
                else:
                    server._send_error(self, 404, f"no route GET {self.path}")

            def do_POST(self) -> None:
                if self.path.rstrip("/") in ("/v1/embeddings", "/embeddings"):
                    length = int(self.headers.get("Content-Length") or 0)
                    try:
                        body = json.loads(self.rfile.read(length) or b"{}")
                    except ValueError as exc:
                        server._send_error(self, 400, f"bad request: {exc}")
                        return
                    server._handle_embeddings(self, body)
                    return
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    server._send_error(self, 404, f"no route POST {self.path}")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                        raise ValueError("'messages' must be a list")
                except ValueError as exc:
                    server._send_error(self, 400, f"bad request: {exc}")
                    return
                server._handle_chat(self, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        if self._httpd is None:
            raise RuntimeError("the fake server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ------------------------------------------------------------------

    def requests_for(self, tool: str | None) -> list[Request]:
        """Recorded requests that forced ``tool`` (``None``: plain text requests)."""
        with self._lock:
            recorded = list(self.requests)
        return [r for r in recorded if _forced_tool(r) == tool]

    def _text_reply(self, request: Request) -> str:
        script = self._text_script
        with self._lock:
            index = self._text_index
            self._text_index += 1
        if script is None:
            return f"Reply {index + 1}: {last_user_text(request)[:200]}"
        if callable(script):
            return script(request)
        if not script:
            return ""
        return script[min(index, len(script) - 1)]

    def _tool_arguments(self, name: str, request: Request) -> Mapping[str, Any]:
        script = self._tool_scripts.get(name)
        if script is None:
            function = next(
                t["function"] for t in request["tools"] if t["function"]["name"] == name
            )
            filled = fill_schema(function.get("parameters", {"type": "object"}))
            return filled if isinstance(filled, dict) else {}
        return script(request) if callable(script) else script

    # --- HTTP -----------------------------------------------------------------------

    def _send_json(self, handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _send_error(self, handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
        self._send_json(
            handler, status, {"error": {"message": message, "type": "invalid_request_error"}}
        )

    def embed(self, text: str) -> list[float]:
        """The vector this server returns for ``text`` (hashed words, L2-normalised)."""
        vector = [0.0] * self.embedding_dims
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % self.embedding_dims] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def _handle_embeddings(self, handler: BaseHTTPRequestHandler, request: Any) -> None:
        raw = request.get("input") if isinstance(request, dict) else None
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self._send_error(handler, 400, "'input' must be a string or a list of strings")
            return
        with self._lock:
            self.embedding_requests.append(request)
        as_base64 = request.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = self.embed(text)
            encoded: Any = (
                base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                if as_base64
                else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(_approx_tokens(t) for t in texts)
        self._send_json(
            handler,
            200,
            {
                "object": "list",
                "data": data,
                "model": request.get("model", self.model),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _handle_chat(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
        tool = _forced_tool(request)
        completion_id = f"chatcmpl-fake-{uuid.uuid4().hex}"
        prompt_tokens = _approx_tokens(prompt_text(request))
        if tool is not None:
            arguments = json.dumps(self._tool_arguments(tool, request))
            call = {
                "id": f"call_fake_{number}",
                "type": "function",
                "function": {"name": tool, "arguments": arguments},
            }
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
            completion_tokens = _approx_tokens(arguments)
        else:
            text = self._text_reply(request)
            message = {"role": "assistant", "content": text}
            finish = "stop"
            completion_tokens = _approx_tokens(text)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if request.get("stream"):
            self._stream(handler, request, completion_id, message, finish, usage)
            return
        self._send_json(
            handler,
            200,
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.get("model", self.model),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            },
        )

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        request: Request,
        completion_id: str,
        message: Mapping[str, Any],
        finish: str,
        usage: Mapping[str, int],
    ) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        created = int(time.time())
        model = request.get("model", self.model)

        def chunk(delta: Mapping[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["function"]["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for piece in (arguments[:half], arguments[half:]):
                events.append(
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                )
        else:
            words = str(message.get("content") or "").split(" ")
            for position, word in enumerate(words):
                events.append(chunk({"content": word if position == 0 else " " + word}))
        events.append(chunk({}, finish))
        if (request.get("stream_options") or {}).get("include_usage"):
            final = chunk({})
            final["choices"] = []
            final["usage"] = dict(usage)
            events.append(final)
        for event in events:
            handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


def _forced_tool(request: Request) -> str | None:
    tools = request.get("tools") or []
    if not tools:
        return None
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return name
    return str(tools[0]["function"]["name"])
