"""Retention: how long each kind of memory is kept, and what a purge may delete.

=================  ==========================================================================
kind               retention
=================  ==========================================================================
messages           a logged turn expires ``message_days`` after it was logged (off by
                   default), unless it is important; a user keeps at most ``max_messages``
                   turns (default 50,000), the oldest unimportant ones pruned first.
                   Purged automatically after a write and by AgenticStore's sweeper
                   (at most every ``purge_interval_minutes`` per user and process) and
                   by an explicit purge.
episodes           a user keeps at most ``max_episodes`` (default 1,000): beyond it the least
                   important, then the oldest, go; important ones never. Only an explicit
                   purge (``amem memories purge``, ``Memory.purge``) prunes them, and it
                   names each one: never silently.
facts, rules       never purged: a purge does not read them. They go only when forgotten
                   explicitly (``amem memories forget``).
=================  ==========================================================================

Why these defaults. The agent's promise is that it does not forget what the user said, so
turns never expire by age unless an operator says so (``AMEM_MESSAGE_RETENTION_DAYS=365``,
for a data-minimisation policy). The caps only bound the store: 50,000 turns is about three
years of 50 turns a day (80 LoCoMo-length conversations), and keeps one user's in-memory
search index of the embedded store to ~50 MB at the default 256-dimensional embeddings.
1,000 episodes is about three conversation ends a day for a year; each episode carries its
whole conversation, so this bounds a user's episodes to tens of MB.

Settings come from the operator's environment (:meth:`RetentionPolicy.from_env`), or as
explicit arguments in Python (``Memory(store, embeddings, retention=RetentionPolicy(...))``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from agentic_memory.store import InvalidInputError

__all__ = [
    "DEFAULT_MAX_EPISODES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_PURGE_INTERVAL_MINUTES",
    "ENV_MAX_EPISODES",
    "ENV_MAX_MESSAGES",
    "ENV_MESSAGE_DAYS",
    "ENV_PURGE_INTERVAL",
    "NEVER_PURGED",
    "EpisodePurge",
    "MessagePurge",
    "PurgeReport",
    "RetentionPolicy",
]

ENV_MESSAGE_DAYS = "AMEM_MESSAGE_RETENTION_DAYS"
ENV_MAX_MESSAGES = "AMEM_MAX_MESSAGES"
ENV_MAX_EPISODES = "AMEM_MAX_EPISODES"
ENV_PURGE_INTERVAL = "AMEM_PURGE_INTERVAL_MINUTES"

DEFAULT_MAX_MESSAGES = 50_000
DEFAULT_MAX_EPISODES = 1_000
DEFAULT_PURGE_INTERVAL_MINUTES = 60.0

NEVER_PURGED = ("UserFact", "ProceduralRules")
"""Collections retention never reads or deletes: facts and rule versions."""

_T = TypeVar("_T")
_OFF = frozenset({"off", "never", "none", "no"})


@dataclass(frozen=True)
class RetentionPolicy:
    """What is kept, per kind of memory (see the module doc for the rules and defaults)."""

    message_days: float | None = None
    """Logged turns expire this many days after they were logged, unless important;
    ``None``: never by age."""
    max_messages: int | None = DEFAULT_MAX_MESSAGES
    """At most this many logged turns per user (the oldest unimportant go first); ``None``:
    no cap."""
    max_episodes: int | None = DEFAULT_MAX_EPISODES
    """At most this many episodes per user after an explicit purge; ``None``: no cap."""
    purge_interval_minutes: float | None = DEFAULT_PURGE_INTERVAL_MINUTES
    """A message write purges its user's log when this long has passed since the last
    purge of that user in this process (0: after every write); ``None``: never
    automatically (only ``amem memories purge``)."""

    def __post_init__(self) -> None:
        for name in ("message_days", "purge_interval_minutes"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInputError(f"{name} must be a number or None, got {value!r}")
            smallest_ok = 0 if name == "purge_interval_minutes" else 1e-9
            if not math.isfinite(value) or value < smallest_ok:
                raise InvalidInputError(
                    f"{name} must be a {'non-negative' if smallest_ok == 0 else 'positive'} "
                    f"number (or None for off), got {value!r}"
                )
        for name in ("max_messages", "max_episodes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidInputError(f"{name} must be a positive integer or None, got {value!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RetentionPolicy:
        """Read the policy the operator set; unset variables keep the defaults.

        ``AMEM_MESSAGE_RETENTION_DAYS`` (days, default off), ``AMEM_MAX_MESSAGES`` (default
        50000), ``AMEM_MAX_EPISODES`` (default 1000) and ``AMEM_PURGE_INTERVAL_MINUTES``
        (default 60); ``off`` turns any of them off.

        Raises:
            InvalidInputError: a variable holds something else; its name is in the message.
        """
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            message_days=_setting(env, ENV_MESSAGE_DAYS, defaults.message_days, _number),
            max_messages=_setting(env, ENV_MAX_MESSAGES, defaults.max_messages, _count),
            max_episodes=_setting(env, ENV_MAX_EPISODES, defaults.max_episodes, _count),
            purge_interval_minutes=_setting(
                env, ENV_PURGE_INTERVAL, defaults.purge_interval_minutes, _number
            ),
        )

    def message_cutoff(self, now: datetime) -> str | None:
        """Return the instant before which turns have expired (RFC 3339); ``None``: never."""
        if self.message_days is None:
            return None
        return (now.astimezone(UTC) - timedelta(days=self.message_days)).isoformat()

    def message_expiry(self, created_at: str, important: bool) -> str | None:
        """Return when a turn logged at ``created_at`` expires; ``None``: not by age."""
        if important or self.message_days is None or not created_at:
            return None
        try:
            logged = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (logged.astimezone(UTC) + timedelta(days=self.message_days)).isoformat()

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict (``None`` meaning off)."""
        return asdict(self)

    def describe(self) -> list[str]:
        """Say the policy in force, one line per kind."""
        days = self.message_days
        age = (
            "never expire by age"
            if days is None
            else f"expire {days:g} days after they were logged unless important"
        )
        cap = (
            "no cap"
            if self.max_messages is None
            else f"at most {self.max_messages:,} per user, the oldest unimportant pruned first"
        )
        every = self.purge_interval_minutes
        auto = (
            "purged only on request (amem memories purge)"
            if every is None
            else "purged after each write"
            if every == 0
            else f"purged after a write at most every {every:g} minutes per user"
        )
        episodes = (
            "no cap"
            if self.max_episodes is None
            else f"at most {self.max_episodes:,} per user, pruned only by an explicit purge "
            "(least important, then oldest; important ones never)"
        )
        return [
            f"messages: {age}; {cap}; {auto}",
            f"episodes: {episodes}",
            "facts and rules: never purged (forget them with amem memories forget)",
        ]


def _setting(
    env: Mapping[str, str],
    name: str,
    default: _T | None,
    parse: Callable[[str, str, str], _T],
) -> _T | None:
    # Unset or blank keeps the default, "off" turns it off; anything else is ``parse``d
    # (name, lower-cased text, the text as given for the error).
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in _OFF:
        return None
    return parse(name, raw, env[name])


def _number(name: str, raw: str, given: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(f"{name} must be a number or 'off', got {given!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and name != ENV_PURGE_INTERVAL):
        raise InvalidInputError(f"{name} must be a positive number or 'off', got {given!r}")
    return value


def _count(name: str, raw: str, given: str) -> int:
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise InvalidInputError(f"{name} must be a whole number or 'off', got {given!r}") from None
    if value < 1:
        raise InvalidInputError(f"{name} must be at least 1 (or 'off'), got {given!r}")
    return value


@dataclass(frozen=True)
class MessagePurge:
    """What a purge of one user's message log deleted (or, in a dry run, would delete)."""

    user: str
    expired: int = 0
    """Unimportant turns logged before ``cutoff``."""
    over_cap: int = 0
    """The oldest unimportant turns beyond ``max_messages``."""
    cutoff: str | None = None
    remaining: int = 0
    """Turns the user has afterwards."""
    important_over_cap: int = 0
    """How far important turns alone keep the user over the cap (they are never pruned)."""

    @property
    def deleted(self) -> int:
        """Every turn this purge deleted."""
        return self.expired + self.over_cap


@dataclass(frozen=True)
class EpisodePurge:
    """The episodes an explicit purge deleted (or would delete): least important, then oldest."""

    user: str
    pruned: list[dict[str, Any]] = field(default_factory=list)
    """Each one's id, thread_id, created_at, importance and summary."""
    remaining: int = 0
    important_over_cap: int = 0


@dataclass(frozen=True)
class PurgeReport:
    """What a purge did for one user, kind by kind; facts and rules are never touched."""

    user: str
    dry_run: bool
    messages: MessagePurge
    episodes: EpisodePurge | None
    """``None`` when episodes were not purged (automatic purges never prune them)."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "user": self.user,
            "dry_run": self.dry_run,
            "messages": {**asdict(self.messages), "deleted": self.messages.deleted},
            "episodes": asdict(self.episodes) if self.episodes is not None else None,
            "never_purged": list(NEVER_PURGED),
        }
