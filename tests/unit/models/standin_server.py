"""A stand-in for llama.cpp's server: same command line, OpenAI answers, and a chosen death.

Run by ``LocalModelServer(server=<this file>)`` through the project's launcher, exactly as the
real server is. It serves ``GET /v1/models`` and ``POST /v1/chat/completions`` (plain and
streamed) on ``--host``/``--port``. ``STANDIN_CONFIG`` names a JSON file:

- ``die_signal`` (e.g. "SIGILL"): the signal the process sends itself in the middle of a
  chat request, after reading it and (when streaming) after the first chunk;
- ``die_on_starts``: which starts die (1 = the first process started with this config);
  the others answer normally;
- ``starts_file``: where the start count is kept;
- ``die_before_stream``: when streaming, die before the first chunk instead of after it;
- ``requests_file``: a file each request body is appended to, one JSON line each.

Only the standard library: it must run wherever the launcher runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any


def _config() -> dict[str, Any]:
    path = os.environ.get("STANDIN_CONFIG")
    return json.loads(Path(path).read_text()) if path else {}


CONFIG = _config()


def _start_number() -> int:
    path = CONFIG.get("starts_file")
    if not path:
        return 1
    counter = Path(path)
    number = int(counter.read_text() or "0") + 1 if counter.exists() else 1
    counter.write_text(str(number))
    return number


START = _start_number()
DIES = START in CONFIG.get("die_on_starts", [1]) and bool(CONFIG.get("die_signal"))


def _die() -> None:
    # No core file: the test machine's core pattern is not ours to fill.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.stdout.flush()
    os.kill(os.getpid(), getattr(signal, CONFIG["die_signal"]))
    time.sleep(5)


def _completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"hello from start {START}"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }


def _chunk(model: str, content: str, finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible server until it is told to die."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        sys.stdout.write(f"standin: {format % args}\n")
        sys.stdout.flush()

    def _json(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._json({"object": "list", "data": [{"id": "standin", "object": "model"}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if CONFIG.get("requests_file"):
            with open(CONFIG["requests_file"], "a", encoding="utf-8") as sink:
                sink.write(json.dumps(request) + "\n")
        model = str(request.get("model", "standin"))
        if not request.get("stream"):
            if DIES:
                _die()
            self._json(_completion(model))
            return
        if DIES and CONFIG.get("die_before_stream"):
            _die()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(_chunk(model, "hel"))
        self.wfile.flush()
        if DIES:
            _die()
        self.wfile.write(_chunk(model, f"lo from start {START}", "stop"))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main() -> None:
    """Parse llama.cpp server's arguments (ignoring those it does not need) and serve."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    sys.stdout.write(f"standin: start {START} (dies: {DIES}) pid {os.getpid()}\n")
    sys.stdout.flush()
    HTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
