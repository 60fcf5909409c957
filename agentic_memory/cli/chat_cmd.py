"""``amem chat``: talk to the agent in the terminal, over the same graph and checkpointer.

Each line typed is one turn of the graph (``compile_graph``) on a thread kept by the
checkpointer (SQLite in ``$AMEM_HOME``, or PostgreSQL when ``AMEM_POSTGRES_URI`` is set), so
``amem chat --user alice --thread T`` resumes a conversation later, also from another process.
Lines are read from stdin, so a script or a pseudo-terminal can drive the REPL; end of input
leaves like ``/quit``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import typer
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from rich.text import Text

from agentic_memory.api import Memory
from agentic_memory.cli import render
from agentic_memory.cli.rules import rules_diff_lines
from agentic_memory.cli.scaffold import CliError, need_user
from agentic_memory.forget import forget_subject
from agentic_memory.graph.context import Context
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.persistence import CheckpointerError, open_checkpointer
from agentic_memory.kinds.knowledge import alist_knowledge_bases
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import rules_scope
from agentic_memory.models.chat import ModelNotConfiguredError, resolve_chat_model
from agentic_memory.models.local_server import LocalServerError
from agentic_memory.store import InvalidInputError, StoreError
from agentic_memory.sync_edge import run_session

HELP = """\
Type a message and press Enter. Commands:
  /end            end the conversation: reflect on it, update the rules, show what was learned
  /quit           leave without reflecting (the thread can be resumed with --thread)
  /facts          the facts remembered about you
  /rules          the behaviour rules in force
  /recall QUERY   search your past conversations (episodes and messages)
  /important      keep the last exchange (your message and the answer) for good: never
                  purged, recalled first; /important MESSAGE sends MESSAGE and keeps it
  /forget SUBJECT forget every value of a fact (e.g. /forget diet)
  /help           this help"""

PROMPT = "you> "
ANSWER_PREFIX = "assistant> "

Outcome = Literal["continue", "end", "quit"]


@dataclass
class TurnResult:
    """What one turn produced, for printing and for tests."""

    answer: str = ""
    streamed: bool = False
    facts_remembered: list[dict[str, Any]] = field(default_factory=list)
    flagged_important: bool = False
    """The memory model flagged the user's message as worth keeping for good."""
    chunks: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)


def describe_fact_change(change: dict[str, Any]) -> str:
    """Say what was remembered: ``diet = vegetarian`` (``(was omnivore)`` when superseded)."""
    line = f"{change.get('subject')} = {change.get('value')}"
    previous = change.get("previous_value")
    if change.get("action") == "superseded" and previous:
        line += f" (was {previous})"
    return line


def sources_used(answer: str, chunks: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Return each recalled passage's label once, with whether the answer cites it."""
    seen: dict[str, bool] = {}
    for chunk in chunks:
        label = str(chunk.get("label") or "")
        if label and label not in seen:
            seen[label] = label in answer or label.strip("[]") in answer
    return list(seen.items())


class ChatSession:
    """One REPL session: a user, a thread, a compiled graph and the stores behind it."""

    def __init__(
        self,
        *,
        graph: Any,
        memory: Memory,
        context: Context,
        thread_id: str,
        stream: bool = True,
        kbs_chosen: bool = False,
        resume: bool | None = None,
    ) -> None:
        self.graph = graph
        self.memory = memory
        self.store = memory.store
        self.context = context
        self.user = context.user_id
        self.thread_id = thread_id
        self.stream = stream
        self.kbs_chosen = kbs_chosen
        """Whether the knowledge bases were named with --kb (else the default is searched)."""
        self.resume = resume
        """True: the thread must exist (--thread); False: it must not (--thread T --new);
        None: a generated id, new by construction."""
        self.config: RunnableConfig = {
            "configurable": {"thread_id": thread_id},
            # Copied into every checkpoint: how a user's threads are found to forget them.
            "metadata": {"user_id": context.user_id},
        }

    @property
    def scope(self) -> str:
        """The rules scope this session uses (and rewrites, when that is allowed)."""
        return rules_scope(self.user, shared=self.context.rules_scope == "global")

    # -- turns ----------------------------------------------------------------------------

    async def _run(self, graph_input: dict[str, Any]) -> TurnResult:
        result = TurnResult()
        started_answer = False
        async for mode, chunk in self.graph.astream(
            graph_input,
            self.config,
            context=self.context,
            # Without "messages" LangGraph does not ask the model to stream at all.
            stream_mode=["messages", "updates", "values"] if self.stream else ["updates", "values"],
        ):
            if mode == "messages":
                message, meta = chunk
                if (
                    self.stream
                    and isinstance(message, AIMessageChunk)
                    and meta.get("langgraph_node") == "generate"
                ):
                    token = _text(message)
                    if token:
                        if not started_answer:
                            render.out().print(Text(ANSWER_PREFIX, style="bold cyan"), end="")
                            started_answer = True
                        sys.stdout.write(token)
                        sys.stdout.flush()
                        result.streamed = True
            elif mode == "updates":
                if (chunk.get("remember_facts") or {}).get("turn_important"):
                    result.flagged_important = True
                    render.out().print(
                        Text("I'll keep your message word for word ", style="green")
                        + Text(
                            "(the model marked it important; amem memories messages list "
                            f"--user {self.user} --thread {self.thread_id} shows it)"
                        )
                    )
                remembered = (chunk.get("remember_facts") or {}).get("facts_remembered")
                if remembered:
                    # Shown before the answer: the facts node finishes before generate starts.
                    result.facts_remembered = list(remembered)
                    for change in remembered:
                        render.out().print(
                            Text("I'll remember: ", style="green")
                            + Text(describe_fact_change(change))
                        )
            elif mode == "values":
                result.state = chunk
        if started_answer:
            sys.stdout.write("\n")
            sys.stdout.flush()
        messages = result.state.get("messages") or []
        if messages and isinstance(messages[-1], AIMessage):
            result.answer = _text(messages[-1])
        result.chunks = list(result.state.get("chunks") or [])
        return result

    async def send(self, text: str) -> TurnResult:
        """Run one turn for a user message; print the answer (streamed) and its sources."""
        result = await self._run({"messages": [HumanMessage(content=text)]})
        if not result.streamed:
            render.out().print(Text(ANSWER_PREFIX, style="bold cyan") + Text(result.answer))
        sources = sources_used(result.answer, result.chunks)
        if sources:
            line = Text("Sources: ", style="dim")
            for i, (label, cited) in enumerate(sources):
                if i:
                    line.append("; ", style="dim")
                line.append(label.strip("[]"), style="bold" if cited else "dim")
                if cited:
                    line.append(" (cited)", style="dim")
            render.out().print(line)
        return result

    async def end(self) -> TurnResult:
        """End the conversation: reflect, update the rules, print what was learned."""
        render.note("Reflecting on the conversation…")
        result = await self._run({"end_conversation": True})
        reflection = result.state.get("reflection")
        if not reflection:
            render.say("Nothing to reflect on: the conversation is empty.")
            return result
        render.print_mapping(
            {
                "tags": reflection.get("context_tags") or [],
                "summary": reflection.get("conversation_summary", ""),
                "what worked": reflection.get("what_worked", ""),
                "what to avoid": reflection.get("what_to_avoid", ""),
                "importance": reflection.get("importance"),
                "episode": reflection.get("id"),
            },
            title="What I learned",
        )
        version = result.state.get("rules_version_created")
        if version:
            book = self.memory.rules
            created = await book.aget(self.scope, int(version))
            parent = created.parent_version or int(version) - 1
            diff = await book.adiff(self.scope, parent, int(version))
            render.out().print(Text(f"Rules updated: version {version}", style="bold"))
            render.out().print(render.diff_text(rules_diff_lines(str(diff))))
        else:
            latest = await self.memory.rules.alatest(self.scope)
            render.say(f"Rules unchanged (version {latest.version}).")
        return result

    # -- commands -------------------------------------------------------------------------

    async def show_facts(self) -> None:
        """Print the user's current facts."""
        facts = await self.memory.facts.acurrent(self.user)
        render.print_records(
            [f.to_dict() for f in facts],
            [("subject", "subject"), ("value", "value"), ("category", "category")],
            title=f"Facts about {self.user}",
            empty="No facts remembered yet.",
        )

    async def show_rules(self) -> None:
        """Print the rules in force."""
        latest = await self.memory.rules.alatest(self.scope)
        render.out().print(
            render.table(
                ["#", "instruction", "rationale"],
                [(i, r.instruction, r.rationale) for i, r in enumerate(latest.rules, 1)],
                title=f"Rules, version {latest.version}",
            )
        )

    async def recall(self, query: str) -> None:
        """Print the episodes and past messages that match ``query``."""
        if not query.strip():
            render.error("usage: /recall QUERY")
            return
        episodes = await self.memory.episodes.arecall(self.user, query, k=3)
        render.print_records(
            [e.to_dict() for e in episodes],
            [
                ("created", "created_at"),
                ("thread", "thread_id"),
                ("tags", "context_tags"),
                ("summary", "conversation_summary"),
                ("score", "score"),
            ],
            title="Past conversations",
            empty="No past conversation matches.",
        )
        messages = await self.memory.messages.arecall(self.user, query, k=5)
        render.print_records(
            [m.to_dict() for m in messages],
            [("thread", "thread_id"), ("role", "role"), ("content", "content"), ("score", "score")],
            title="Past messages",
            empty="No past message matches.",
        )

    async def mark_important(self, text: str) -> list[str]:
        """Mark the last exchange important (after sending ``text``, when given).

        The user's last message and the answers after it are marked in the message log:
        kept for good (never purged) and recalled first. Returns the marked ids.
        """
        if text.strip():
            await self.send(text)
        snapshot = await self.graph.aget_state(self.config)
        messages = (snapshot.values or {}).get("messages") or []
        last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
        if last is None:
            render.error("nothing to mark yet: send a message first, or /important MESSAGE")
            return []
        exchange = [
            m
            for m in messages[last:]
            if isinstance(m, HumanMessage | AIMessage) and m.id and _text(m).strip()
        ]
        ids = [MessageLog.message_id(self.user, self.thread_id, str(m.id)) for m in exchange]
        try:
            marked = await self.memory.messages.amark_important(self.user, ids)
        except InvalidInputError:
            render.error(
                "the last exchange is not in the message log (its turn failed?): nothing was "
                "marked; send the message again"
            )
            return []
        quote = " ".join(_text(exchange[0]).split())
        if len(quote) > 60:
            quote = quote[:59] + "…"
        answers = len(exchange) - 1
        turns = " ".join(f"--turn {m.turn}" for m in marked)
        render.say(
            f'Marked important: "{quote}"'
            + (" and the answer" if answers == 1 else f" and {answers} answers" if answers else "")
            + ". Kept for good and recalled first (undo: amem memories messages important "
            f"--unmark --user {self.user} --thread {self.thread_id} {turns})."
        )
        return ids

    async def forget(self, subject: str) -> None:
        """Forget every value of one fact subject."""
        if not subject.strip():
            render.error("usage: /forget SUBJECT")
            return
        try:
            report = await forget_subject(self.store, self.user, subject)
        except StoreError as exc:
            render.error(str(exc))
            return
        n = sum(report.deleted.values())
        render.say(f"Forgotten: {subject.strip()} ({n} value(s) deleted).")

    async def handle(self, line: str) -> Outcome:
        """Handle one input line; return whether to go on, or why to stop."""
        text = line.strip()
        if not text:
            return "continue"
        if not text.startswith("/"):
            await self.send(text)
            return "continue"
        command, _, arg = text.partition(" ")
        command = command.lower()
        if command in ("/quit", "/exit"):
            return "quit"
        if command == "/end":
            await self.end()
            return "end"
        if command == "/help":
            render.out().print(HELP, markup=False)
            render.out().print(await self.knowledge_status(), markup=False)
        elif command == "/facts":
            await self.show_facts()
        elif command == "/rules":
            await self.show_rules()
        elif command == "/recall":
            await self.recall(arg)
        elif command == "/forget":
            await self.forget(arg)
        elif command == "/important":
            await self.mark_important(arg)
        else:
            render.error(f"unknown command {command}; type /help")
        return "continue"

    async def greet(self) -> None:
        """Say which thread this is, and whether it resumes an earlier conversation."""
        snapshot = await self.graph.aget_state(self.config)
        owner = (snapshot.values or {}).get("owner") or (snapshot.metadata or {}).get("user_id")
        if owner and owner != self.user:
            # Thread ids are not secret; the conversation they hold belongs to one user.
            raise CliError(f"thread {self.thread_id!r} belongs to another user")
        # A checkpoint exists once a turn has started, even one that failed before answering.
        exists = snapshot.created_at is not None
        if self.resume and not exists:
            # A typo in --thread would otherwise start a conversation the user did not mean.
            raise CliError(
                f"{self.user!r} has no thread {self.thread_id!r} to resume (`amem memories "
                f"messages list --user {self.user}` shows the threads); to start a new "
                f"conversation with this id, add --new"
            )
        if self.resume is False and exists:
            raise CliError(f"thread {self.thread_id!r} already exists; resume it without --new")
        messages = (snapshot.values or {}).get("messages") or []
        if messages:
            render.say(
                f"Resuming thread {self.thread_id} ({len(messages)} messages). /help for commands."
            )
        else:
            render.say(
                f"New conversation on thread {self.thread_id} "
                f"(resume later with --thread {self.thread_id}). /help for commands."
            )
        if self.kbs_chosen:
            # Only a base the user named is worth a warning; the default one not existing
            # yet is the normal state of a fresh machine (/help says how to add one).
            known = await alist_knowledge_bases(self.store)
            # Names compare case-insensitively, as everywhere (agentic_memory.kinds.knowledge.resolve_kb).
            folded = {name.lower() for name in known}
            missing = [kb for kb in self.context.knowledge_bases if kb.lower() not in folded]
            if missing:
                available = ", ".join(known) or "none yet: add documents with `amem ingest`"
                render.note(
                    f"no knowledge base {', '.join(map(repr, missing))} to search "
                    f"(available: {available}; choose with --kb NAME)"
                )

    async def knowledge_status(self) -> str:
        """Say which knowledge bases this chat searches, and how to add documents."""
        known = await alist_knowledge_bases(self.store)
        chosen = {kb.lower() for kb in self.context.knowledge_bases}
        searched = [kb for kb in known if kb.lower() in chosen]
        if searched:
            line = f"Documents: searching {', '.join(searched)}"
        else:
            line = "Documents: no knowledge base to search yet"
        others = [kb for kb in known if kb not in searched]
        if others:
            line += f" (also available: {', '.join(others)}; choose with --kb NAME)"
        return f"{line}. Add documents with `amem ingest FILES --collection NAME`."


async def _read_line() -> str | None:
    """Read one line with ``input()`` (line editing on a terminal); ``None`` at end of input.

    The read runs in a daemon thread rather than the default executor: on Ctrl-C, asyncio
    would otherwise wait for the blocked read before the process could exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str | None] = loop.create_future()

    def deliver(line: str | None) -> None:
        if not done.done():
            done.set_result(line)

    def read() -> None:
        try:
            line: str | None = input(PROMPT)
        except EOFError:
            line = None
        try:
            loop.call_soon_threadsafe(deliver, line)
        except RuntimeError:
            pass  # the loop closed while we were reading: the session is over

    threading.Thread(target=read, name="amem-chat-input", daemon=True).start()
    return await done


async def repl(session: ChatSession) -> Outcome:
    """Read lines until ``/end``, ``/quit`` or end of input."""
    await session.greet()
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401, PLC0415  (line editing for input(), terminals only)
        except ImportError:
            pass
    while True:
        line = await _read_line()
        if line is None:
            sys.stdout.write("\n")
            return "quit"
        try:
            outcome = await session.handle(line)
        except (StoreError, ValueError) as exc:
            render.error(str(exc))
            continue
        except LocalServerError as exc:
            # Its message already says what died, why, where the log is, and what to do.
            render.error(f"this turn failed: {exc}")
            continue
        except Exception as exc:
            # A model server that is down or a reply that never validates fails this turn
            # only; the thread keeps its last checkpoint and the user can try again.
            render.error(f"this turn failed: {type(exc).__name__}: {exc}")
            continue
        if outcome != "continue":
            return outcome


@dataclass
class ChatOptions:
    """The options of ``amem chat``."""

    user: str
    thread: str | None = None
    new: bool = False
    """With ``thread``: start that thread instead of resuming it."""
    model: str = "auto"
    memory_model: str | None = None
    kbs: list[str] = field(default_factory=list)
    rules_scope: Literal["user", "global"] = "user"
    stream: bool = True


def resolve_models(options: ChatOptions) -> tuple[BaseChatModel, BaseChatModel]:
    """Resolve the answer and memory models now, so a missing model fails before any turn."""
    answer = resolve_chat_model(options.model, max_tokens=1024)
    memory = (
        resolve_chat_model(options.memory_model, max_tokens=512)
        if options.memory_model
        else resolve_chat_model(options.model, max_tokens=512)
    )
    return answer, memory


@asynccontextmanager
async def open_session(options: ChatOptions) -> AsyncIterator[ChatSession]:
    """Open the store, checkpointer and graph for a chat, and close them afterwards."""
    answer_model, memory_model = resolve_models(options)
    context = Context(
        user_id=options.user,
        model=options.model,
        memory_model=options.memory_model or options.model,
        knowledge_bases=options.kbs or ["default"],
        rules_scope=options.rules_scope,
    )
    memory = await asyncio.to_thread(Memory.open)
    try:
        async with open_checkpointer() as checkpointer:
            graph = compile_graph(
                checkpointer=checkpointer,
                store=memory.store,
                embeddings=memory.embeddings,
                chat_model=answer_model,
                memory_model=memory_model,
            )
            yield ChatSession(
                graph=graph,
                memory=memory,
                context=context,
                thread_id=options.thread or f"t-{uuid.uuid4().hex[:12]}",
                stream=options.stream,
                kbs_chosen=bool(options.kbs),
                resume=None if options.thread is None else not options.new,
            )
    finally:
        memory.close()


async def run_chat(options: ChatOptions) -> Outcome:
    """Run the REPL to its end."""
    async with open_session(options) as session:
        return await repl(session)


def chat(
    user: Annotated[str | None, typer.Option("--user", "-u", help="Who is talking.")] = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Resume this thread (default: a new one); it must exist, unless --new.",
        ),
    ] = None,
    new: Annotated[
        bool,
        typer.Option("--new", help="With --thread: start a new conversation with that id."),
    ] = False,
    model: Annotated[
        str,
        typer.Option(help="Answer model: auto, openai:<model>, compatible:<model> or local."),
    ] = "auto",
    memory_model: Annotated[
        str | None,
        typer.Option(help="Model for facts, reflections and rules (default: --model)."),
    ] = None,
    kb: Annotated[
        list[str] | None,
        typer.Option("--kb", help="Knowledge base to search; repeat for several."),
    ] = None,
    global_rules: Annotated[
        bool,
        typer.Option(
            "--global-rules",
            help="Use the rules shared by all (rewriting them needs AMEM_GLOBAL_RULES=learn).",
        ),
    ] = False,
    no_stream: Annotated[
        bool, typer.Option("--no-stream", help="Print each answer whole, not token by token.")
    ] = False,
) -> None:
    """Chat with the agent; /help lists the commands (/end, /quit, /facts, /rules, ...)."""
    render.quiet_library_logs()
    try:
        if new and thread is None:
            raise CliError("--new goes with --thread T (without --thread, every chat is new)")
        options = ChatOptions(
            user=need_user(user),
            thread=thread,
            new=new,
            model=model,
            memory_model=memory_model,
            kbs=list(kb or []),
            rules_scope="global" if global_rules else "user",
            stream=not no_stream,
        )
        run_session(run_chat(options))
    except ModelNotConfiguredError as exc:
        render.error(str(exc))
        raise typer.Exit(2) from None
    except (CliError, StoreError, CheckpointerError, ValueError) as exc:
        render.error(str(exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        raise typer.Exit(130) from None
