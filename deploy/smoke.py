r"""Check a running deployment of the agent: a turn, a restart, another replica continues.

Run it against the replicas of a deployment (each addressed directly, not through the load
balancer, so the script knows which one answers)::

    python deploy/smoke.py --replica http://127.0.0.1:8124 --replica http://127.0.0.1:8125 \\
        --token "$SMOKE_TOKEN" --user smoke \\
        --restart "docker compose -f deploy/compose.yml restart agent-1"

Steps (each printed with its time; the exit status is 1 at the first that fails):

1. every replica answers ``/ok``;
2. replica A creates a thread for ``--user`` (B is told of it at once, for replicas that keep
   their own list of threads, as ``langgraph dev`` does; a no-op where they share LangGraph's
   database) and runs a turn on it; the answer is an AI message and the turn is in the
   thread's state;
3. the store shows the turn: the thread's logged messages (``("messages", user, thread)``)
   hold the text, with a marker of this run;
4. ``--restart`` runs (a shell command that restarts replica A) and A answers ``/ok`` again;
5. replica B sees the thread's state as A left it (the checkpointer is shared), runs the
   next turn on it, and finds both turns in the store (the memory is shared);
6. replica A, restarted, sees the thread with B's turn.

Then the thread and the turns it logged are deleted (``--keep`` keeps them). Needs the
``langgraph-sdk`` package only (installed with the agent). With authentication on
(``langgraph.auth.json``), ``--token`` is a bearer token mapped to ``--user``
(``AMEM_AUTH_TOKENS``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_sdk import get_client

GRAPH = "agent"


class SmokeError(RuntimeError):
    """A step of the smoke check failed; the message says what was expected."""


@dataclass
class Step:
    """One step of the check and how it went."""

    name: str
    ok: bool
    seconds: float
    detail: str = ""


def wait_ready(url: str, timeout: float) -> None:
    """Wait until ``url``/ok answers 200.

    Raises:
        SmokeError: it did not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/ok", timeout=5) as response:
                if response.status == 200:
                    return
                last = f"status {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(1)
    raise SmokeError(f"{url}/ok did not answer within {timeout:g} s ({last})")


def _messages(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    values = state.get("values") or {}
    return list(values.get("messages") or []) if isinstance(values, dict) else []


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class Smoke:
    """The check, step by step, against replicas ``a`` and ``b``."""

    def __init__(
        self,
        a: str,
        b: str,
        *,
        user: str,
        token: str | None = None,
        timeout: float = 300.0,
        restart: Callable[[], None] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.urls = (a.rstrip("/"), b.rstrip("/"))
        self.a = get_client(url=self.urls[0], headers=headers)
        self.b = get_client(url=self.urls[1], headers=headers)
        self.user = user
        self.timeout = timeout
        self.restart = restart
        self.marker = f"smoke-{uuid.uuid4().hex[:10]}"
        self.thread_id = ""
        """Made by replica A's server when the thread is created (the auth example refuses
        an id a client chose for a thread that is not yet the caller's)."""
        self.steps: list[Step] = []

    async def _step(self, name: str, run: Callable[[], Awaitable[str]]) -> None:
        started = time.monotonic()
        try:
            # A step's own waits end first and say what they waited for; this is the backstop.
            detail = await asyncio.wait_for(run(), 2 * self.timeout + 30)
        except TimeoutError:
            exc = SmokeError(f"no answer within {2 * self.timeout + 30:g} s")
            self.steps.append(Step(name, False, time.monotonic() - started, str(exc)))
            raise exc from None
        except Exception as exc:
            self.steps.append(Step(name, False, time.monotonic() - started, _describe(exc)))
            raise SmokeError(f"{name}: {_describe(exc)}") from exc
        self.steps.append(Step(name, True, time.monotonic() - started, detail))

    async def _known(self, client: Any) -> None:
        # In a deployment whose replicas share LangGraph's database this is a no-op on the
        # caller's own thread; a replica that keeps its own list of threads (`langgraph dev`)
        # learns the thread (right after it was made: the auth example takes a thread id it
        # does not know only while it is fresh).
        await client.threads.create(
            thread_id=self.thread_id,
            if_exists="do_nothing",
            metadata={"user_id": self.user},
            graph_id=GRAPH,  # the server reads a thread's state through its graph
        )

    async def _turn(self, client: Any, text: str) -> dict[str, Any]:
        await self._known(client)
        result = await client.runs.wait(
            self.thread_id,
            GRAPH,
            input={"messages": [{"role": "user", "content": text}]},
            context={"user_id": self.user},
            raise_error=True,
        )
        if not isinstance(result, dict):
            raise SmokeError(f"the run returned {type(result).__name__}, not the state")
        return result

    async def _logged(self, client: Any) -> list[str]:
        items = await client.store.search_items(["messages", self.user, self.thread_id], limit=100)
        return [str((item.get("value") or {}).get("content", "")) for item in items["items"]]

    async def run(self) -> list[Step]:
        """Run every step; return them (raise ``SmokeError`` at the first failure)."""
        first = f"Please remember the code word {self.marker}. Answer in one sentence."
        second = f"Which code word did I give you? ({self.marker}, second turn)"

        async def ready() -> str:
            for url in self.urls:
                await asyncio.to_thread(wait_ready, url, self.timeout)
            return ", ".join(self.urls)

        async def turn_on_a() -> str:
            made = await self.a.threads.create(metadata={"user_id": self.user}, graph_id=GRAPH)
            self.thread_id = str(made["thread_id"])
            await self._known(self.b)
            state = await self._turn(self.a, first)
            messages = _messages({"values": state})
            if len(messages) < 2 or messages[-1].get("type") != "ai":
                raise SmokeError(f"expected the question and an AI answer, got {messages!r:.300}")
            if self.marker not in _text(messages[-2]):
                raise SmokeError("the thread's state does not hold the question just asked")
            return f"thread {self.thread_id}: {_text(messages[-1])[:80]!r}"

        async def stored_by_a() -> str:
            logged = await self._logged(self.a)
            if not any(self.marker in text for text in logged):
                raise SmokeError(
                    f"the store holds no logged turn with {self.marker}: {logged!r:.300}"
                )
            return f"{len(logged)} logged message(s)"

        async def restart_a() -> str:
            if self.restart is None:
                return "skipped (no --restart)"
            await asyncio.to_thread(self.restart)
            await asyncio.to_thread(wait_ready, self.urls[0], self.timeout)
            return "restarted, answering"

        async def b_continues() -> str:
            await self._known(self.b)
            before = _messages(await self.b.threads.get_state(self.thread_id))
            if not any(self.marker in _text(m) for m in before):
                raise SmokeError(
                    "replica B does not see the thread's first turn: is the checkpointer "
                    "shared by every replica (one PostgreSQL)?"
                )
            state = await self._turn(self.b, second)
            messages = _messages({"values": state})
            if len(messages) < len(before) + 2 or messages[-1].get("type") != "ai":
                raise SmokeError(f"replica B did not continue the thread: {messages!r:.300}")
            logged = await self._logged(self.b)
            found = [t for t in logged if self.marker in t]
            if len(found) < 2:
                raise SmokeError(
                    f"replica B's store shows {len(found)} of the two turns: is the memory "
                    "store shared by every replica (AMEM_STORE=weaviate, one cluster)?"
                )
            return f"{len(messages)} messages in the thread, {len(found)} turns with the marker"

        async def a_after_restart() -> str:
            await self._known(self.a)
            messages = _messages(await self.a.threads.get_state(self.thread_id))
            if not any(second in _text(m) for m in messages):
                raise SmokeError("replica A does not see the turn replica B added")
            return f"{len(messages)} messages"

        for name, step in (
            ("replicas ready", ready),
            ("a turn on replica A", turn_on_a),
            ("the turn is in the memory store", stored_by_a),
            ("replica A restarts", restart_a),
            ("replica B continues the thread and sees the memories", b_continues),
            ("replica A, restarted, sees replica B's turn", a_after_restart),
        ):
            await self._step(name, step)
        return self.steps

    async def cleanup(self) -> str:
        """Delete the smoke thread and the turns it logged; return what was done."""
        done = []
        try:
            items = await self.a.store.search_items(
                ["messages", self.user, self.thread_id], limit=100
            )
            for item in items["items"]:
                await self.a.store.delete_item(item["namespace"], item["key"])
            done.append(f"{len(items['items'])} logged message(s) deleted")
            await self.a.threads.delete(self.thread_id)
            done.append("thread deleted")
        except Exception as exc:
            done.append(f"cleanup incomplete: {_describe(exc)}")
        return "; ".join(done)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, SmokeError) else f"{type(exc).__name__}: {text}"


def shell_restart(command: str) -> Callable[[], None]:
    """Return a restart step that runs ``command`` in a shell and requires it to succeed."""

    def restart() -> None:
        result = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise SmokeError(
                f"restart command exited with {result.returncode}: {result.stderr.strip()[-300:]}"
            )

    return restart


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; print each step; return the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replica", action="append", required=True, help="a replica's URL (two)")
    parser.add_argument("--user", default="smoke", help="the user the turns are for")
    parser.add_argument("--token", default=None, help="bearer token of that user (auth on)")
    parser.add_argument("--restart", default=None, help="shell command restarting replica A")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per step")
    parser.add_argument("--keep", action="store_true", help="keep the thread and its turns")
    args = parser.parse_args(argv)
    if len(args.replica) != 2:
        parser.error("give exactly two --replica URLs: A (turn, restart) and B (continues)")
    smoke = Smoke(
        args.replica[0],
        args.replica[1],
        user=args.user,
        token=args.token,
        timeout=args.timeout,
        restart=shell_restart(args.restart) if args.restart else None,
    )

    async def go() -> int:
        status = 0
        try:
            await smoke.run()
        except SmokeError:
            status = 1
        for step in smoke.steps:
            mark = "ok  " if step.ok else "FAIL"
            print(f"{mark} {step.name} ({step.seconds:.1f} s): {step.detail}")
        if not args.keep and smoke.thread_id:
            print(f"cleanup: {await smoke.cleanup()}")
        print("smoke check passed" if status == 0 else "smoke check FAILED")
        return status

    return asyncio.run(go())


if __name__ == "__main__":
    sys.exit(main())
