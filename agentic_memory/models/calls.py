"""Model calls with cost records, and structured output that survives small models.

Every call returns :class:`ModelCall` records (purpose, model, tokens, seconds) that the
graph keeps in its state. Token counts come from the provider's ``usage_metadata``; when a
server reports none they are estimated as ``ceil(characters / 4)`` of the prompt and the
reply (the usual rule of thumb for English with BPE tokenizers) and the record says
``estimated=True``.

Structured output asks for a forced tool call (``method="function_calling"``, the one
method every OpenAI-compatible server here handles). A reply that does not validate is
repaired when that needs no invention: JSON is dug out of prose or tool arguments,
strings and lists longer than the schema allows are cut to their bounds, and numbers past
an inclusive bound (``le``/``ge``) are set to it. Otherwise the
model gets ONE retry with the validation errors; still invalid raises
:class:`StructuredOutputError`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any, TypeVar

import httpx
import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError

from agentic_memory.models.chat import describe_model
from agentic_memory.models.local_server import LocalServerError

T = TypeVar("T", bound=BaseModel)

_CHARS_PER_TOKEN = 4
# LangGraph's "messages" stream mode leaves out model calls tagged so: structured calls
# (facts, summaries, reflections, rules) are memory work, never part of the answer.
_NOSTREAM = "nostream"
_MAX_REPAIR_ROUNDS = 8
# How much of a bad reply is quoted back to the model in the retry prompt.
_QUOTE_LIMIT = 1500


@dataclass(frozen=True)
class ModelCall:
    """One model call, for cost accounting.

    Attributes:
        purpose: What the call was for ("answer", "facts", "reflection", ...).
        model: Which model answered, as ``describe_model`` names it.
        input_tokens: Prompt tokens.
        output_tokens: Reply tokens.
        seconds: Wall-clock time of the call.
        estimated: True when the token counts were estimated from text length because the
            server reported no usage.
    """

    purpose: str
    model: str
    input_tokens: int
    output_tokens: int
    seconds: float
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus reply tokens."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict for graph state."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelCall:
        """Rebuild a record from :meth:`to_dict` output.

        Raises:
            ValueError: A field is missing or has the wrong type.
        """
        try:
            return cls(
                purpose=str(data["purpose"]),
                model=str(data["model"]),
                input_tokens=int(data["input_tokens"]),
                output_tokens=int(data["output_tokens"]),
                seconds=float(data["seconds"]),
                estimated=bool(data.get("estimated", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a model call record: {dict(data)!r} ({exc})") from exc


class StructuredOutputError(RuntimeError):
    """The model's structured reply stayed invalid after repair and one retry.

    Attributes:
        calls: Every model call made, so callers can still account for their cost.
    """

    def __init__(self, message: str, calls: Sequence[ModelCall] = ()) -> None:
        super().__init__(message)
        self.calls = list(calls)


MODEL_ERRORS: tuple[type[Exception], ...] = (
    StructuredOutputError,
    openai.OpenAIError,
    httpx.HTTPError,
    LocalServerError,
    ConnectionError,
    TimeoutError,
)
"""What a failed model call raises: an invalid reply, an API or connection error, a timeout,
a local server that died twice. Memory work catches these and falls back; it never lets one
fail a turn or leave a thread unusable."""


def calls_of(exc: BaseException) -> list[ModelCall]:
    """Return the cost records a failed call still made (``StructuredOutputError.calls``)."""
    return list(exc.calls) if isinstance(exc, StructuredOutputError) else []


def summarize_calls(calls: Iterable[ModelCall | Mapping[str, Any]]) -> dict[str, Any]:
    """Add up call records, overall and per purpose.

    Args:
        calls: ``ModelCall`` objects or their ``to_dict()`` form.

    Returns:
        ``{"calls", "input_tokens", "output_tokens", "total_tokens", "seconds",
        "estimated", "by_purpose": {purpose: same keys without by_purpose}}``;
        ``estimated`` is true when any count in the sum was estimated.
    """

    def empty() -> dict[str, Any]:
        return {
            "calls": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "seconds": 0.0,
            "estimated": False,
        }

    total = empty()
    by_purpose: dict[str, dict[str, Any]] = {}
    for item in calls:
        call = item if isinstance(item, ModelCall) else ModelCall.from_dict(item)
        for bucket in (total, by_purpose.setdefault(call.purpose, empty())):
            bucket["calls"] += 1
            bucket["input_tokens"] += call.input_tokens
            bucket["output_tokens"] += call.output_tokens
            bucket["total_tokens"] += call.total_tokens
            bucket["seconds"] += call.seconds
            bucket["estimated"] = bucket["estimated"] or call.estimated
    total["by_purpose"] = by_purpose
    return total


def _estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def _reply_text(message: AIMessage) -> str:
    text = str(message.text)
    for call in message.tool_calls:
        text += json.dumps(call.get("args", {}), ensure_ascii=False)
    for bad in message.invalid_tool_calls:
        text += str(bad.get("args") or "")
    return text


def _record(
    purpose: str,
    model_name: str,
    messages: Sequence[BaseMessage],
    reply: AIMessage | None,
    seconds: float,
) -> ModelCall:
    usage = reply.usage_metadata if reply is not None else None
    if usage and (usage.get("input_tokens", 0) > 0 or usage.get("output_tokens", 0) > 0):
        return ModelCall(
            purpose=purpose,
            model=model_name,
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            seconds=seconds,
        )
    prompt = "".join(str(m.text) for m in messages)
    return ModelCall(
        purpose=purpose,
        model=model_name,
        input_tokens=_estimate_tokens(prompt),
        output_tokens=_estimate_tokens(_reply_text(reply)) if reply is not None else 0,
        seconds=seconds,
        estimated=True,
    )


def _check_purpose(purpose: str) -> None:
    if not isinstance(purpose, str) or not purpose.strip():
        raise ValueError("purpose must be a non-empty string (it labels the cost record)")


def _check_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    if isinstance(messages, (str, BaseMessage)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a sequence of BaseMessage")
    out = list(messages)
    if not out:
        raise ValueError("messages is empty: a model call needs at least one message")
    for m in out:
        if not isinstance(m, BaseMessage):
            raise TypeError(f"messages must be BaseMessage objects, got {type(m).__name__}")
    return out


async def ainvoke_text(
    model: BaseChatModel, messages: Sequence[BaseMessage], *, purpose: str
) -> tuple[AIMessage, ModelCall]:
    """Call a chat model for free text and record the call.

    Args:
        model: Any LangChain chat model.
        messages: The prompt.
        purpose: Label of the cost record ("answer", "summary", ...).

    Returns:
        The reply and its cost record.

    Raises:
        TypeError: The model did not return an ``AIMessage``.
    """
    _check_purpose(purpose)
    prompt = _check_messages(messages)
    started = time.perf_counter()
    reply = await model.ainvoke(prompt)
    seconds = time.perf_counter() - started
    if not isinstance(reply, AIMessage):
        raise TypeError(f"the model returned {type(reply).__name__}, not an AIMessage")
    return reply, _record(purpose, describe_model(model), prompt, reply, seconds)


# --- schema bounds -----------------------------------------------------------------------


def _unbounded_paths(node: Any, path: str, out: list[str]) -> None:
    if isinstance(node, dict):
        kind = node.get("type")
        if (
            kind == "string"
            and "maxLength" not in node
            and not {"enum", "const", "format"} & node.keys()
        ):
            out.append(path or "<root>")
        if kind == "array" and "maxItems" not in node:
            out.append(path or "<root>")
        for key, value in node.items():
            if key in ("enum", "const", "default", "examples"):
                continue
            _unbounded_paths(value, f"{path}.{key}" if path else key, out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _unbounded_paths(value, f"{path}[{i}]", out)


@cache
def _check_bounded(schema: type[BaseModel]) -> None:
    missing: list[str] = []
    _unbounded_paths(schema.model_json_schema(), "", missing)
    if missing:
        raise ValueError(
            f"{schema.__name__} has unbounded fields ({', '.join(missing)}): give every "
            "string a max_length and every list a max_length so small models stay valid"
        )


# --- repair -------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


def _json_objects(text: str) -> list[Any]:
    """Find JSON objects in text: fenced blocks, each balanced ``{...}``, a cut-off tail.

    A reply cut off by the token limit is closed at its last complete value; a string
    cut mid-way keeps the characters it has (they are the model's own).
    """
    found: list[Any] = []
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    candidates.append(text)
    decoder = json.JSONDecoder(strict=False)  # small models put raw newlines in strings
    for chunk in candidates:
        start = chunk.find("{")
        complete_until = -1
        while start != -1:
            try:
                value, end = decoder.raw_decode(chunk, start)
            except json.JSONDecodeError:
                if complete_until < start:
                    closed = _close_truncated(chunk[start:])
                    if closed is not None:
                        found.append(closed)
                        complete_until = len(chunk)
                start = chunk.find("{", start + 1)
                continue
            found.append(value)
            complete_until = end
            start = chunk.find("{", end)
    return found


def _close_truncated(text: str) -> Any | None:
    """Parse a JSON object whose end is missing, or return None."""
    stack: list[str] = []
    in_string = False
    escaped = False
    # (position, closers needed there) at each comma outside strings: fallback cut points.
    cuts: list[tuple[int, str]] = []
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack:
                return None
            stack.pop()
            if not stack:
                return None  # complete object: raw_decode would have taken it
        elif char == ",":
            cuts.append((i, "".join(reversed(stack))))
    if not stack:
        return None
    tail = text.rstrip()
    if escaped:
        tail = tail[:-1]
    attempts = [tail + ('"' if in_string else "") + "".join(reversed(stack))]
    attempts.extend(text[:pos] + closers for pos, closers in reversed(cuts))
    for attempt in attempts:
        try:
            value = json.loads(attempt, strict=False)
        except json.JSONDecodeError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _unwrap(candidate: Any, schema: type[BaseModel]) -> list[Any]:
    """Return the candidate plus versions with a wrapper key removed.

    Small models often nest the arguments under the tool's name or under
    "properties"/"arguments"/"parameters"; those wrappers carry no information.
    """
    out = [candidate]
    if isinstance(candidate, str):
        out.extend(_json_objects(candidate))
    if isinstance(candidate, dict) and len(candidate) == 1:
        key, inner = next(iter(candidate.items()))
        wrappers = {schema.__name__, schema.__name__.lower(), "properties", "arguments"}
        wrappers |= {"parameters", "args", "input", "output", "result"}
        if key in wrappers and key not in schema.model_fields:
            if isinstance(inner, str):
                out.extend(_json_objects(inner))
            else:
                out.append(inner)
    return out


def _set_at(data: Any, loc: tuple[int | str, ...], value: Any) -> bool:
    target = data
    for key in loc[:-1]:
        try:
            target = target[key]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        target[loc[-1]] = value
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _get_at(data: Any, loc: tuple[int | str, ...]) -> Any:
    target = data
    for key in loc:
        target = target[key]
    return target


def _drop_truncated_tail(data: Any, exc: ValidationError) -> bool:
    """Drop the last item of a list when a required field is missing from it, and only it.

    A reply cut off by the token limit is closed at its last complete value, which can leave
    the final list item without some fields; dropping that item invents nothing.
    """
    for err in exc.errors():
        if err["type"] != "missing":
            continue
        loc = tuple(err["loc"])
        for depth in range(len(loc) - 1, -1, -1):
            if isinstance(loc[depth], int):
                try:
                    container = _get_at(data, loc[:depth])
                except (KeyError, IndexError, TypeError):
                    break
                if isinstance(container, list) and loc[depth] == len(container) - 1:
                    container.pop()
                    return True
                break
    return False


_NUMBER_BOUNDS = {"less_than_equal": "le", "greater_than_equal": "ge"}


def _coerce_to_bounds(schema: type[T], data: Any) -> T:
    """Validate, cutting over-long strings and lists, and numbers, to their bounds.

    Raises:
        ValidationError: Errors remain that cutting cannot fix.
    """
    data = json.loads(json.dumps(data))  # a private, JSON-shaped copy to edit
    for _ in range(_MAX_REPAIR_ROUNDS):
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            fixed = _drop_truncated_tail(data, exc)
            for err in exc.errors():
                if fixed:
                    break  # locations shift once an item is dropped: validate again first
                loc = tuple(err["loc"])
                bound = _NUMBER_BOUNDS.get(err["type"])
                if bound is not None:
                    # A grammar constrains a number's form, not its range (llama.cpp ignores
                    # minimum/maximum): a number past an inclusive bound is set to the bound.
                    limit_value = (err.get("ctx") or {}).get(bound)
                    try:
                        current = _get_at(data, loc)
                    except (KeyError, IndexError, TypeError):
                        continue
                    if isinstance(limit_value, int | float) and isinstance(current, int | float):
                        fixed = _set_at(data, loc, limit_value) or fixed
                    continue
                limit = (err.get("ctx") or {}).get("max_length")
                if err["type"] not in ("string_too_long", "too_long") or limit is None:
                    continue
                try:
                    current = _get_at(data, loc)
                except (KeyError, IndexError, TypeError):
                    continue
                if isinstance(current, (str, list)) and len(current) > int(limit):
                    fixed = _set_at(data, loc, current[: int(limit)]) or fixed
            if not fixed:
                raise
    return schema.model_validate(data)


def _candidates(raw: AIMessage | None, parsed_dict: Any) -> list[Any]:
    out: list[Any] = []
    if parsed_dict is not None:
        out.append(parsed_dict)
    if raw is None:
        return out
    out.extend(call.get("args") for call in raw.tool_calls)
    for bad in raw.invalid_tool_calls:
        args = bad.get("args")
        if isinstance(args, str):
            out.extend(_json_objects(args))
    legacy = raw.additional_kwargs.get("function_call")
    if isinstance(legacy, Mapping) and isinstance(legacy.get("arguments"), str):
        out.extend(_json_objects(legacy["arguments"]))
    for call in raw.additional_kwargs.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
            out.extend(_json_objects(function["arguments"]))
    out.extend(_json_objects(str(raw.text)))
    return out


def _repair(schema: type[T], candidates: list[Any]) -> tuple[T | None, str]:
    """Return the first candidate that validates after bounded coercion, else the errors."""
    first_error = ""
    for candidate in candidates:
        for option in _unwrap(candidate, schema):
            if not isinstance(option, dict):
                continue
            try:
                return _coerce_to_bounds(schema, option), ""
            except ValidationError as exc:
                first_error = first_error or _describe_errors(exc)
    return None, first_error or "the reply held no JSON object for the schema"


def _describe_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        where = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _structured_runnable(model: BaseChatModel, schema: type[BaseModel]) -> Any | None:
    try:
        return model.with_structured_output(schema, method="function_calling", include_raw=True)
    except (TypeError, ValueError):
        pass  # a with_structured_output without a method argument: its default is tool calling
    except NotImplementedError:
        return None
    try:
        return model.with_structured_output(schema, include_raw=True)
    except NotImplementedError:
        # Models without tool calling: fall back to a JSON instruction in the prompt.
        return None


def _json_instruction(schema: type[BaseModel]) -> SystemMessage:
    return SystemMessage(
        content=(
            "Reply with one JSON object and nothing else. It must validate against this "
            f"JSON schema:\n{json.dumps(schema.model_json_schema(), ensure_ascii=False)}"
        )
    )


async def _attempt(
    model: BaseChatModel,
    runnable: Any | None,
    schema: type[T],
    prompt: list[BaseMessage],
    purpose: str,
    model_name: str,
) -> tuple[T | None, str, str, ModelCall]:
    """Make one call; return (valid result or None, error text, raw reply text, record)."""
    started = time.perf_counter()
    raw: AIMessage | None = None
    parsed: Any = None
    error: Any = None
    if runnable is None:
        result: Any = await model.ainvoke(
            [*prompt, _json_instruction(schema)], config={"tags": [_NOSTREAM]}
        )
        raw = result if isinstance(result, AIMessage) else None
    else:
        result = await runnable.ainvoke(prompt, config={"tags": [_NOSTREAM]})
        if isinstance(result, Mapping) and "raw" in result:
            raw = result["raw"] if isinstance(result["raw"], AIMessage) else None
            parsed = result.get("parsed")
            error = result.get("parsing_error")
        else:
            parsed = result
    seconds = time.perf_counter() - started
    record = _record(purpose, model_name, prompt, raw, seconds)
    if isinstance(parsed, schema) and error is None:
        return parsed, "", "", record
    parsed_dict = parsed.model_dump() if isinstance(parsed, BaseModel) else parsed
    value, problem = _repair(schema, _candidates(raw, parsed_dict))
    if value is not None:
        return value, "", "", record
    if error is not None and not isinstance(error, ValidationError):
        problem = f"{problem} ({type(error).__name__}: {error})"
    raw_text = _reply_text(raw) if raw is not None else repr(parsed)
    return None, problem, raw_text, record


async def ainvoke_structured(
    model: BaseChatModel, schema: type[T], messages: Sequence[BaseMessage], *, purpose: str
) -> tuple[T, list[ModelCall]]:
    """Ask a model for an instance of a bounded pydantic schema, repairing or retrying once.

    Args:
        model: Any LangChain chat model; tool calling is used when it supports it.
        schema: A pydantic model whose strings and lists all have a ``max_length``.
        messages: The prompt.
        purpose: Label of the cost records.

    Returns:
        The validated object and every call made (one, or two after a retry).

    Raises:
        ValueError: The schema has an unbounded string or list field.
        StructuredOutputError: The reply was still invalid after the retry; its ``calls``
            attribute holds the cost records.
    """
    _check_purpose(purpose)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise TypeError(f"schema must be a pydantic BaseModel class, got {schema!r}")
    _check_bounded(schema)
    prompt = _check_messages(messages)
    model_name = describe_model(model)
    runnable = _structured_runnable(model, schema)

    value, problem, raw_text, record = await _attempt(
        model, runnable, schema, prompt, purpose, model_name
    )
    calls = [record]
    if value is not None:
        return value, calls

    quoted = raw_text[:_QUOTE_LIMIT] or "(empty)"
    feedback = HumanMessage(
        content=(
            f"Your previous reply did not match the {schema.__name__} schema.\n"
            f"Reply was: {quoted}\n"
            f"Problems: {problem}\n"
            f"Answer again with every required field, respecting the length limits."
        )
    )
    value, retry_problem, _, record = await _attempt(
        model, runnable, schema, [*prompt, feedback], purpose, model_name
    )
    calls.append(record)
    if value is not None:
        return value, calls
    raise StructuredOutputError(
        f"{purpose}: the model's reply did not validate as {schema.__name__} after a "
        f"repair and one retry: {retry_problem}",
        calls,
    )
