"""Local data is the user's only: folders 0700, files 0600, whatever the umask.

Covers the embedded store, the SQLite checkpointer (with its -wal and -shm files), the local
model server's logs and the models folder under AMEM_HOME; older files are tightened when
opened, and the checkpointer's connection deletes securely whatever the SQLite build says.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.models.local_server as local_server
from agentic_memory.graph.persistence import sqlite_checkpointer
from agentic_memory.models.chat import GEMMA3
from agentic_memory.models.local_server import LocalModelServer, LocalServerError, local_model_path
from agentic_memory.paths import private_dir, private_file
from agentic_memory.store import MemoryObject, StoreError, amem_home, make_id
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore
from tests.unit.store.conftest import DIMS, make_spec, vec


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def _permissive_umask() -> Iterator[None]:
    # The usual default: without explicit modes, files would be 0644 and folders 0755.
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_embedded_store_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store = EmbeddedStore(home / "store", dims=DIMS)
    spec = make_spec("Notes")
    store.ensure_collection(spec)
    store.upsert(spec.name, [MemoryObject(make_id("a"), {"body": "x"}, vec(1))], user="u")
    assert mode(home) == mode(home / "store") == 0o700
    files = sorted((home / "store").iterdir())
    assert [f.name for f in files] == [DB_FILENAME, f"{DB_FILENAME}-shm", f"{DB_FILENAME}-wal"]
    assert all(mode(f) == 0o600 for f in files)
    store.close()


def test_files_of_an_older_store_are_tightened_when_opened(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    EmbeddedStore(folder, dims=DIMS).close()
    folder.chmod(0o755)
    (folder / DB_FILENAME).chmod(0o644)
    EmbeddedStore(folder, dims=DIMS).close()
    assert mode(folder) == 0o700 and mode(folder / DB_FILENAME) == 0o600


async def test_the_sqlite_checkpointer_is_private_and_deletes_securely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sqlite3.connect

    def build_default_off(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.execute("PRAGMA secure_delete = OFF")  # the upstream default
        return conn

    monkeypatch.setattr(sqlite3, "connect", build_default_off)
    target = tmp_path / "home" / "checkpoints.sqlite"
    async with sqlite_checkpointer(target) as saver:
        async with saver.conn.execute("PRAGMA secure_delete") as cursor:
            assert await cursor.fetchone() == (1,)
        await saver.aput(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            {
                "v": 1,
                "id": "1",
                "ts": "",
                "channel_values": {},
                "channel_versions": {},
                "versions_seen": {},
                "updated_channels": None,
            },  # fmt: skip
            {},
            {},
        )
        # The test's own file checks run off the loop, which is guarded (tests/conftest.py).
        files = await asyncio.to_thread(lambda: sorted(target.parent.glob("checkpoints.sqlite*")))
        assert [f.name for f in files] == [
            "checkpoints.sqlite",
            "checkpoints.sqlite-shm",
            "checkpoints.sqlite-wal",
        ]
        assert all(await asyncio.to_thread(lambda: [mode(f) == 0o600 for f in files]))
    assert await asyncio.to_thread(mode, target.parent) == 0o700
    await asyncio.to_thread(target.chmod, 0o644)
    async with sqlite_checkpointer(target):
        assert await asyncio.to_thread(mode, target) == 0o600


def test_local_model_logs_and_models_folders_are_private(monkeypatch: pytest.MonkeyPatch) -> None:
    # No llama.cpp needed: the server "starts" a module that does not exist and exits, after
    # its log was created; the packaged model (Gemma's, assembled from its parts) is a
    # stand-in package that writes a file.
    monkeypatch.setenv("AMEM_LOCAL_MODEL", GEMMA3.name)
    real_find_spec = local_server.importlib.util.find_spec
    package = types.SimpleNamespace(
        MODEL_NAME="stand-in.gguf",
        assemble=lambda path, overwrite: Path(path).write_bytes(b"GGUF"),
    )

    def find_spec(name: str, *args: object) -> object:
        if name == GEMMA3.package or name.split(".")[0] in (
            "llama_cpp",
            "uvicorn",
            "fastapi",
            "sse_starlette",
            "starlette_context",
            "pydantic_settings",
        ):
            return object()
        return real_find_spec(name, *args)

    real_import = local_server.importlib.import_module
    monkeypatch.setattr(local_server.importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(
        local_server.importlib,
        "import_module",
        lambda name: package if name == GEMMA3.package else real_import(name),
    )
    model = local_model_path()
    assert model == amem_home() / "models" / "stand-in.gguf"
    assert mode(amem_home()) == mode(amem_home() / "models") == 0o700

    with pytest.raises(LocalServerError):
        LocalModelServer(model, ready_timeout=30).start()
    logs = amem_home() / "logs"
    assert mode(logs) == 0o700
    written = list(logs.iterdir())
    assert written and all(mode(f) == 0o600 for f in written)


def test_private_helpers_create_exact_modes_and_leave_foreign_folders_alone(
    tmp_path: Path,
) -> None:
    os.umask(0o000)  # even the loosest umask
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    deep = private_dir(shared / "a" / "b")
    assert mode(shared) == 0o777  # existed already, not ours by name
    assert mode(shared / "a") == mode(deep) == 0o700
    made = private_file(deep / "f")
    assert mode(made) == 0o600 and made.read_bytes() == b""
    made.write_bytes(b"kept")
    made.chmod(0o664)
    private_file(made)
    assert mode(made) == 0o600 and made.read_bytes() == b"kept"


def test_a_store_that_cannot_be_created_is_a_store_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    with pytest.raises(StoreError, match="cannot create the embedded store"):
        EmbeddedStore(blocked / "store", dims=DIMS)
