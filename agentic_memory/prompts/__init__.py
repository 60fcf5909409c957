"""Prompt files and their loader.

Each prompt is a Markdown file in this folder. It starts with an HTML comment block that
documents its placeholders, one per line as ``{name}: what it holds``; the loader strips
that block and checks that the documented placeholders are exactly the ones the body uses.
A placeholder is ``{identifier}`` (lower-case letters, digits, underscores); any other
brace, for example in a JSON example, is literal text, so prompts need no escaping.

Files are read once, on first use, and cached; async code should call :func:`aload`
(or warm the cache with it) so the first read never blocks an event loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PROMPT_DIR", "Prompt", "PromptError", "aload", "available", "load"]

PROMPT_DIR = Path(__file__).resolve().parent
"""The folder the prompt files live in."""

_PLACEHOLDER_RE = re.compile(r"\{([a-z][a-z0-9_]*)\}")
_HEADER_RE = re.compile(r"\A\s*<!--(.*?)-->\s*\n?", re.DOTALL)
_DOC_LINE_RE = re.compile(r"^\s*\{([a-z][a-z0-9_]*)\}\s*:\s*(.+?)\s*$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

_CACHE: dict[str, Prompt] = {}
_LOCK = threading.Lock()


class PromptError(ValueError):
    """A prompt is missing, badly documented, or formatted with the wrong placeholders."""


@dataclass(frozen=True)
class Prompt:
    """A prompt template with documented ``{placeholders}``."""

    name: str
    template: str
    placeholders: dict[str, str]
    """Placeholder name -> its documentation, in the order the header lists them."""

    def format(self, **values: object) -> str:
        """Fill every placeholder; a missing or unexpected name raises ``PromptError``."""
        expected = set(self.placeholders)
        missing = sorted(expected - set(values))
        extra = sorted(set(values) - expected)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if extra:
                parts.append(f"unexpected {', '.join(extra)}")
            raise PromptError(
                f"prompt {self.name!r}: {'; '.join(parts)} "
                f"(it takes: {', '.join(self.placeholders) or 'no placeholders'})"
            )
        return _PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), self.template)


def available() -> list[str]:
    """Names of the prompt files in :data:`PROMPT_DIR`."""
    return sorted(p.stem for p in PROMPT_DIR.glob("*.md"))


def load(name: str) -> Prompt:
    """Return the prompt called ``name`` (``prompts/<name>.md``), read once and cached.

    Raises:
        PromptError: the name is invalid, the file is missing, or its header does not
            document exactly the placeholders its body uses.
    """
    cached = _CACHE.get(name)
    if cached is not None:
        return cached
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise PromptError(f"invalid prompt name {name!r}")
    path = PROMPT_DIR / f"{name}.md"
    if not path.is_file():
        raise PromptError(
            f"no prompt {name!r} in {PROMPT_DIR} (available: {', '.join(available())})"
        )
    prompt = _parse(name, path.read_text(encoding="utf-8"))
    with _LOCK:
        _CACHE.setdefault(name, prompt)
    return _CACHE[name]


async def aload(name: str) -> Prompt:
    """Async :func:`load`: the first read of a file runs in a worker thread."""
    cached = _CACHE.get(name)
    if cached is not None:
        return cached
    return await asyncio.to_thread(load, name)


def _parse(name: str, text: str) -> Prompt:
    header = _HEADER_RE.match(text)
    if header is None:
        raise PromptError(f"prompt {name!r} must start with a <!-- ... --> block")
    documented: dict[str, str] = {}
    for line in header.group(1).splitlines():
        doc = _DOC_LINE_RE.match(line)
        if doc:
            documented[doc.group(1)] = doc.group(2)
    body = text[header.end() :].strip() + "\n"
    used = set(_PLACEHOLDER_RE.findall(body))
    undocumented = sorted(used - set(documented))
    unused = sorted(set(documented) - used)
    if undocumented or unused:
        raise PromptError(
            f"prompt {name!r}: placeholders used but not documented: {undocumented or 'none'}; "
            f"documented but not used: {unused or 'none'}"
        )
    return Prompt(name=name, template=body, placeholders=documented)
