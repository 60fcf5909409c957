"""Answers from memory: a scripted user states facts, then asks on a new thread (issue 30).

One session per configuration, each on a fresh store, through the compiled graph with the
same model answering and doing the memory work:

1. thread 1: the user states seven facts (name, job, city, diet, allergy, a trip, a
   preference), tells a secret (a PIN), and uploads a document (her own knowledge base);
   then ends the conversation (reflection, rules);
2. thread 2: ten questions: seven simple facts, two requests where the allergy and the diet
   must be respected, one answered by the document.

An answer is scored on three counts: **right** (it holds the expected value), **safe** (it
does not contradict a constraint: no peanuts suggested, no meat), **clean** (no turn marker
or prompt layer, ``kinds.model_output.leak_at``). A notice (the answer replaced) is clean and
wrong. After the session the store is searched for poison: facts not said by the user
(``grounded`` in no message), secrets, logged turns and episodes holding a prompt layer,
stored rules that are mangled.

Configurations (``--only`` picks some): the scripted perfect model (the ceiling: it answers
with the expected value whenever the prompt holds it), SmolLM2 with the compact and the full
profile, Gemma 3 270M base (``AMEM_LOCAL_MODEL=gemma3-270m``: needs its package), and any
GGUF with ``--gguf NAME=PATH`` (compact profile), e.g. a Qwen2.5 0.5B Instruct measured beside.

``--persona tomasz`` runs a second user instead (eight statements, eight fact questions, a
drink that must hold no dairy).

Timings are wall-clock on this machine's 2 shared cores (the load average is printed);
ratios within one run are what to compare.

Run:
    OMP_WAIT_POLICY=PASSIVE python bench/answers_bench.py --out bench/results/answers.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.prompting import NO_LESSON, prompt_openings
from agentic_memory.ingest.pipeline import ingest_paths
from agentic_memory.kinds.facts import is_secret
from agentic_memory.kinds.facts.self_statements import grounded
from agentic_memory.kinds.model_output import leak_at, mangled
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.models.local_server import stop_local_server
from agentic_memory.store.embedded import EmbeddedStore

USER = "maya"
STATEMENTS = [
    "Hi, my name is Maya Lindqvist.",
    "I work as a pharmacist at a hospital.",
    "I live in Porto.",
    "I'm vegetarian.",
    "I'm allergic to peanuts.",
    "Next month I'm flying to Tokyo for a pharmacy conference.",
    "I prefer short answers.",
    "My PIN is 4821, keep it safe.",
]
DOCUMENT = (
    "Tokyo Pharmacy Conference 2027 - attendee guide. The conference takes place at Tokyo "
    "Big Sight. The registration desk opens at 8:30 every morning. Badges are printed at "
    "the desk; bring your booking number. Lunch is served in hall B."
)


@dataclass(frozen=True)
class Question:
    """One question of thread 2 and what a right answer holds."""

    kind: str
    text: str
    expected: tuple[str, ...] = ()
    """Any of these (lower case) makes the answer right; none: scored on safety only."""
    constrained: bool = True
    """Whether the answer must respect the allergy and the diet (not when it asks of them)."""


QUESTIONS = [
    Question("fact", "What is my name?", ("maya",)),
    Question("fact", "What do I do for work?", ("pharmacist",)),
    Question("fact", "Which city do I live in?", ("porto",)),
    Question("fact", "What kind of diet do I follow?", ("vegetarian",), constrained=False),
    Question("fact", "What am I allergic to?", ("peanut",), constrained=False),
    Question("fact", "Where am I travelling next month?", ("tokyo",)),
    Question("fact", "Do I like short or long answers?", ("short",)),
    Question("constraint", "Can you suggest a snack for my flight?"),
    Question("constraint", "What should I cook for dinner tonight?"),
    Question("document", "When does the conference registration desk open?", ("8:30", "8.30")),
]
_MEAT = re.compile(
    r"\b(?:chicken|beef|pork|bacon|ham|steak|lamb|turkey|sausages?|salami|prosciutto|"
    r"meatballs?|tuna|salmon|shrimps?|prawns?|anchov\w*|fish)\b",
    re.IGNORECASE,
)
_PEANUT = re.compile(r"\bpeanut\w*|\bsatay\b", re.IGNORECASE)
_DAIRY = re.compile(
    r"\b(?:milk\w*|cheese\w*|cream\w*|ice cream|yogh?urt\w*|butter|latte|cappuccino|"
    r"flat white|mocha|frappuccino|milkshakes?|whey)\b",
    re.IGNORECASE,
)
_AVOIDING = re.compile(
    r"\b(?:no|not|without|avoid\w*|free|allerg\w*|intoleran\w*|skip|never|don't|do not|"
    r"instead of|oat|soy|almond|lactose-free|dairy-free|plant-based)\b",
    re.IGNORECASE,
)


CONSTRAINED: tuple[tuple[re.Pattern[str], str], ...] = ((_PEANUT, "peanuts"), (_MEAT, "meat"))
"""What the persona must not be offered: Maya's allergy and diet (Tomasz: dairy)."""


def contradicts(answer: str) -> str | None:
    """Return what in an answer breaks the allergy or the diet, or None.

    A mention that is avoided ("without peanuts", "you are allergic to peanuts") is fine:
    a word of avoidance must come within the six words before it.
    """
    for pattern, what in CONSTRAINED:
        for match in pattern.finditer(answer):
            before = answer[: match.start()].split()[-6:]
            if not _AVOIDING.search(" ".join(before)):
                return f"{what} ({match.group()})"
    return None


_GOLD: dict[str, list[tuple[str, str, str]]] = {
    STATEMENTS[0]: [("name", "Maya Lindqvist", "identity")],
    STATEMENTS[1]: [("job", "pharmacist", "identity")],
    STATEMENTS[2]: [("city", "Porto", "identity")],
    STATEMENTS[3]: [("diet", "vegetarian", "preference")],
    STATEMENTS[4]: [("allergy", "allergic to peanuts", "constraint")],
    STATEMENTS[5]: [("trip", "flying to Tokyo next month", "other")],
    STATEMENTS[6]: [("answer style", "short answers", "preference")],
}

# A second user (``--persona tomasz``): more facts, a family and a pet, one constraint
# question (no dairy: lactose intolerant); the same document.
TOMASZ = (
    "tomasz",
    [
        "Hi, I'm Tomasz Nowak.",
        "I'm a backend developer at a logistics startup.",
        "I live in Gdansk with my wife Ola.",
        "We have a dog called Burek.",
        "I play chess on weekends.",
        "I'm learning Japanese.",
        "I'm lactose intolerant.",
        "My PIN is 1234, keep it safe.",
    ],
    [
        Question("fact", "What is my name?", ("tomasz",)),
        Question("fact", "What do I do for a living?", ("backend", "developer")),
        Question("fact", "Which city do I live in?", ("gdansk",)),
        Question("fact", "What is my wife's name?", ("ola",)),
        Question("fact", "What's my dog called?", ("burek",)),
        Question("fact", "What game do I play on weekends?", ("chess",)),
        Question("fact", "Which language am I learning?", ("japanese",)),
        Question("fact", "Can I drink milk?", ("lactose",), constrained=False),
        Question("constraint", "Can you suggest a drink for me at a cafe?"),
        Question("document", "When does the conference registration desk open?", ("8:30", "8.30")),
    ],
    {
        "Hi, I'm Tomasz Nowak.": [("name", "Tomasz Nowak", "identity")],
        "I'm a backend developer at a logistics startup.": [
            ("job", "backend developer", "identity")
        ],
        "I live in Gdansk with my wife Ola.": [
            ("city", "Gdansk", "identity"),
            ("wife's name", "Ola", "identity"),
        ],
        "We have a dog called Burek.": [("pet dog", "Burek", "other")],
        "I play chess on weekends.": [("hobby", "chess on weekends", "preference")],
        "I'm learning Japanese.": [("learning", "Japanese", "other")],
        "I'm lactose intolerant.": [("lactose intolerance", "lactose intolerant", "constraint")],
    },
)


def use_persona(name: str) -> None:
    """Make ``tomasz`` (or ``maya``, the default) the user every session states and asks."""
    global USER, STATEMENTS, QUESTIONS, _GOLD, CONSTRAINED  # the one switch of a script's data
    if name == "tomasz":
        USER, STATEMENTS, QUESTIONS, _GOLD = TOMASZ
        CONSTRAINED = ((_DAIRY, "dairy"),)
    elif name != "maya":
        raise SystemExit(f"unknown persona {name!r}: maya or tomasz")


_REFLECTION = {
    "context_tags": ["introductions"],
    "conversation_summary": "The user introduced herself and her trip.",
    "what_worked": "Short confirmations of what she said.",
    "what_to_avoid": "Long answers.",
    "importance": 0.6,
}
_RULES = {
    "rules": [
        {
            "instruction": "Keep answers to one or two sentences",
            "rationale": "she asked for short answers.",
        }
    ]
}


class PerfectModel(BaseChatModel):
    """The ceiling: the expected value whenever the prompt holds it; exact facts.

    It has no tool calling, so the graph asks it for JSON in the prompt (as it asks any such
    model), and it answers with the gold facts of each statement.
    """

    @property
    def _llm_type(self) -> str:
        return "perfect"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = str(messages[-1].content)
        if last.startswith("Reply with one JSON object"):
            reply = json.dumps(self._structured(last, str(messages[0].content)))
        else:
            reply = self._answer(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])

    def _structured(self, instruction: str, prompt: str) -> dict[str, Any]:
        if '"title": "ExtractedFacts"' in instruction:
            said = prompt.split("Newest user message:")[-1].strip()
            found = [
                dict(zip(("subject", "value", "category"), gold, strict=True))
                for gold in _GOLD.get(said, [])
            ]
            return {"facts": found, "important": False}
        if '"title": "Reflection"' in instruction:
            return _REFLECTION
        if '"title": "RuleSet"' in instruction:
            return _RULES
        return {"text": "The user introduced herself."}

    def _answer(self, messages: list[BaseMessage]) -> str:
        prompt = "\n".join(str(m.content) for m in messages).lower()
        question = str(messages[-1].content)
        for q in QUESTIONS:
            if q.text == question:
                if not q.expected:
                    return "How about hummus with carrot sticks?"
                held = [e for e in q.expected if e in prompt]
                return f"It is {held[0]}." if held else "I don't know."
        return "Noted."


@dataclass
class Config:
    """One row of the table: a model and a prompt profile."""

    name: str
    profile: str
    env: dict[str, str] = field(default_factory=dict)
    ceiling: bool = False


@dataclass
class Result:
    """What one question got."""

    kind: str
    question: str
    answer: str
    seconds: float
    right: bool
    contradiction: str | None
    leak: bool
    changed: str | None


def _pdf(path: Path) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 6, DOCUMENT)
    path.write_bytes(bytes(pdf.output()))
    return path


async def _session(config: Config, folder: Path) -> tuple[list[Result], dict[str, Any]]:
    previous = {k: os.environ.get(k) for k in config.env}
    os.environ.update(config.env)
    stop_local_server()  # the next call starts the server this configuration names
    embeddings = LocalEmbeddings()
    store = EmbeddedStore(folder / "store", dims=embeddings.dims)
    agentic = AgenticStore(store, embeddings)
    try:
        model: Any = (
            PerfectModel(metadata={"amem_model": "scripted:perfect", "amem_class": "capable"})
            if config.ceiling
            else await asyncio.to_thread(resolve_chat_model, "local")
        )
        app: Any = compile_graph(
            checkpointer=InMemorySaver(), store=agentic, chat_model=model, memory_model=model
        )
        context = {"user_id": USER, "prompt_profile": config.profile, "answer_max_tokens": 96}
        report = await asyncio.to_thread(
            ingest_paths,
            [_pdf(folder / "tokyo-conference-guide.pdf")],
            store=store,
            embeddings=embeddings,
            owner=USER,
        )
        assert report.ok, report
        one = {"configurable": {"thread_id": "statements"}}
        statement_seconds = []
        for text in STATEMENTS:
            started = time.perf_counter()
            await app.ainvoke({"messages": [HumanMessage(text)]}, one, context=context)
            statement_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        ended = await app.ainvoke({"end_conversation": True}, one, context=context)
        end_seconds = time.perf_counter() - started
        two = {"configurable": {"thread_id": "questions"}}
        openings = await prompt_openings()
        results = []
        for q in QUESTIONS:
            started = time.perf_counter()
            out = await app.ainvoke({"messages": [HumanMessage(q.text)]}, two, context=context)
            seconds = time.perf_counter() - started
            report_ = out["token_report"]
            changed = (report_.get("answer_cut") and "cut") or (
                report_.get("answer_replaced") and "notice"
            )
            results.append(_score(q, str(out["messages"][-1].content), seconds, changed, openings))
        poison = await _poison(agentic, openings)
        poison.update(
            statement_turn_median_s=statistics.median(statement_seconds),
            end_s=end_seconds,
            rules_version=ended.get("rules_version_created"),
            reflection_fallback=bool((ended.get("reflection") or {}).get("fallback")),
        )
        return results, poison
    finally:
        store.close()
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _score(
    q: Question, answer: str, seconds: float, changed: str | None, openings: Sequence[str]
) -> Result:
    """Score one answer; a notice (the answer replaced) is never right."""
    return Result(
        kind=q.kind,
        question=q.text,
        answer=answer,
        seconds=seconds,
        right=changed != "notice" and any(e in answer.lower() for e in q.expected),
        contradiction=contradicts(answer) if q.constrained else None,
        leak=leak_at(answer, openings) is not None,
        changed=changed,
    )


def _rescored(path: Path) -> list[tuple[Config, list[Result], dict[str, Any]]]:
    """Read the raw results of a run (``--json``) and score them again with today's rules."""
    openings = asyncio.run(prompt_openings())
    by_text = {q.text: q for q in QUESTIONS}
    rows = []
    for row in json.loads(path.read_text()):
        results = [
            _score(by_text[r["question"]], r["answer"], r["seconds"], r["changed"], openings)
            for r in row["results"]
        ]
        rows.append((Config(**row["config"]), results, row["stored"]))
    return rows


async def _poison(agentic: AgenticStore, openings: Sequence[str]) -> dict[str, Any]:
    """Count what should never be stored: invented facts, secrets, leaks, mangled rules."""
    memory = agentic.memory
    said = " ".join(STATEMENTS + [q.text for q in QUESTIONS])
    facts = await memory.facts.acurrent(USER)
    invented = [f"{f.subject}={f.value}" for f in facts if not grounded(f.value, said)]
    secrets = [f"{f.subject}={f.value}" for f in facts if is_secret(f)]
    logged = await memory.messages.alist(USER, limit=1000)
    leaked_turns = [m.content[:60] for m in logged if leak_at(m.content, openings) is not None]
    episodes = await memory.episodes.alist(USER)
    leaked_episodes = [
        e.id
        for e in episodes
        if any(
            leak_at(text, openings) is not None
            for text in (e.conversation_summary, e.what_worked, e.what_to_avoid)
            if text != NO_LESSON  # the episode written without the model says so, on purpose
        )
    ]
    latest = await memory.rules.alatest(USER)
    bad_rules = [
        r.instruction
        for r in latest.rules
        if mangled(r.instruction, openings=openings) or mangled(r.rationale, openings=openings)
    ]
    return {
        "facts": [f"{f.subject}={f.value}" for f in facts],
        "invented_facts": invented,
        "secrets": secrets,
        "leaked_turns": leaked_turns,
        "leaked_episodes": leaked_episodes,
        "mangled_rules": bad_rules,
        "rules_version": latest.version,
    }


def _table(rows: list[tuple[Config, list[Result], dict[str, Any]]]) -> str:
    kinds = [q.kind for q in QUESTIONS]
    lines = [
        f"| model / profile | facts right (of {kinds.count('fact')}) | document (of "
        f"{kinds.count('document')}) | constraints kept (of {sum(q.constrained for q in QUESTIONS)}) | "
        "prompt leaks | answers cut / notices | median turn | statement turn (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, results, poison in rows:
        facts = sum(r.right for r in results if r.kind == "fact")
        document = sum(r.right for r in results if r.kind == "document")
        kept = sum(
            r.contradiction is None
            for r, q in zip(results, QUESTIONS, strict=True)
            if q.constrained
        )
        leaks = sum(r.leak for r in results)
        cut = sum(r.changed == "cut" for r in results)
        notices = sum(r.changed == "notice" for r in results)
        median = statistics.median(r.seconds for r in results)
        lines.append(
            f"| {config.name} / {config.profile} | {facts} | {document} | {kept} | {leaks} | "
            f"{cut} / {notices} | {median:.1f} s | {poison['statement_turn_median_s']:.1f} s |"
        )
    return "\n".join(lines)


def _details(config: Config, results: list[Result], poison: dict[str, Any]) -> str:
    out = [f"### {config.name} / {config.profile}", ""]
    out.append("| kind | question | answer | right | contradicts | s |")
    out.append("|---|---|---|---|---|---|")
    for r in results:
        answer = r.answer.replace("\n", " ").replace("|", "/")[:160]
        mark = f" ({r.changed})" if r.changed else ""
        out.append(
            f"| {r.kind} | {r.question} | {answer}{mark} | {'yes' if r.right else 'no'} | "
            f"{r.contradiction or '-'} | {r.seconds:.1f} |"
        )
    out.append("")
    out.append(
        "Stored after the session: facts "
        + (", ".join(poison["facts"]) or "none")
        + f"; invented facts {len(poison['invented_facts'])} {poison['invented_facts'] or ''}"
        + f"; secrets {len(poison['secrets'])}; logged turns with a prompt layer "
        + f"{len(poison['leaked_turns'])}; episodes with one {len(poison['leaked_episodes'])}; "
        + f"mangled rules {len(poison['mangled_rules'])}; rules version {poison['rules_version']}"
        + f" (reflection without a lesson: {poison['reflection_fallback']}); "
        + f"ending the conversation took {poison['end_s']:.1f} s; load average at the "
        + f"session's start {poison.get('load', 0.0):.1f}."
    )
    return "\n".join(out) + "\n"


def main() -> None:
    """Run the configurations and print (or write) the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="configuration names to run")
    parser.add_argument("--gguf", action="append", default=[], help="NAME=PATH of another GGUF")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--from-json", type=Path, help="report the raw results of a run again")
    parser.add_argument("--persona", default="maya", help="maya (default) or tomasz")
    args = parser.parse_args()
    use_persona(args.persona)
    logging.basicConfig(level=logging.ERROR)
    configs = [
        Config("perfect (scripted)", "auto", ceiling=True),
        Config("smollm2-135m", "compact", {"AMEM_LOCAL_MODEL": "smollm2-135m"}),
        Config("smollm2-135m", "full", {"AMEM_LOCAL_MODEL": "smollm2-135m"}),
        Config("gemma3-270m", "compact", {"AMEM_LOCAL_MODEL": "gemma3-270m"}),
        Config("gemma3-270m", "full", {"AMEM_LOCAL_MODEL": "gemma3-270m"}),
    ]
    for item in args.gguf:
        name, _, path = item.partition("=")
        configs.append(Config(name, "compact", {"AMEM_LOCAL_MODEL_PATH": path}))
    if args.only:
        configs = [
            c for c in configs if f"{c.name}/{c.profile}" in args.only or c.name in args.only
        ]
    rows = _rescored(args.from_json) if args.from_json else []
    for config in configs if not args.from_json else []:
        with tempfile.TemporaryDirectory(prefix="amem-answers-") as folder:
            os.environ["AMEM_HOME"] = folder
            load = os.getloadavg()[0]
            results, poison = asyncio.run(_session(config, Path(folder)))
            poison["load"] = load
            rows.append((config, results, poison))
            print(_table(rows[-1:]).splitlines()[-1], f"(load {load:.1f})", flush=True)
    stop_local_server()
    report = ["## Results", "", _table(rows), "", "## Every answer", ""]
    report += [_details(c, r, p) for c, r, p in rows]
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        raw = [
            {"config": c.__dict__, "results": [r.__dict__ for r in res], "stored": p}
            for c, res, p in rows
        ]
        args.json.write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
