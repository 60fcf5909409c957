"""The retention policy: defaults, the operator's environment, and what it says."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentic_memory.kinds.retention import (
    DEFAULT_MAX_EPISODES,
    DEFAULT_MAX_MESSAGES,
    ENV_MAX_EPISODES,
    ENV_MAX_MESSAGES,
    ENV_MESSAGE_DAYS,
    ENV_PURGE_INTERVAL,
    RetentionPolicy,
)
from agentic_memory.store import InvalidInputError


def test_the_defaults_keep_every_turn_by_age_and_cap_the_store() -> None:
    policy = RetentionPolicy.from_env({})
    assert policy == RetentionPolicy()
    assert policy.message_days is None
    assert policy.max_messages == DEFAULT_MAX_MESSAGES == 50_000
    assert policy.max_episodes == DEFAULT_MAX_EPISODES == 1_000
    assert policy.purge_interval_minutes == 60
    assert policy.message_cutoff(datetime.now(UTC)) is None
    assert policy.message_expiry("2020-01-01T00:00:00+00:00", False) is None
    lines = policy.describe()
    assert lines[0].startswith("messages: never expire by age; at most 50,000 per user")
    assert "explicit purge" in lines[1]
    assert lines[2].startswith("facts and rules: never purged")


def test_the_environment_sets_each_part() -> None:
    policy = RetentionPolicy.from_env(
        {
            ENV_MESSAGE_DAYS: " 365 ",
            ENV_MAX_MESSAGES: "20_000",
            ENV_MAX_EPISODES: "off",
            ENV_PURGE_INTERVAL: "0",
        }
    )
    assert policy == RetentionPolicy(
        message_days=365, max_messages=20_000, max_episodes=None, purge_interval_minutes=0
    )
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert policy.message_cutoff(now) == "2025-11-30T12:00:00+00:00"
    assert policy.message_expiry("2026-01-01T10:00:00+02:00", False) == "2027-01-01T08:00:00+00:00"
    assert policy.message_expiry("2026-01-01T10:00:00+02:00", True) is None  # important
    assert "expire 365 days after they were logged unless important" in policy.describe()[0]
    assert "purged after each write" in policy.describe()[0]
    off = RetentionPolicy.from_env({ENV_MAX_MESSAGES: "OFF", ENV_PURGE_INTERVAL: "never"})
    assert off.max_messages is None and off.purge_interval_minutes is None
    assert "only on request" in off.describe()[0]
    assert RetentionPolicy.from_env({ENV_MESSAGE_DAYS: "0.5"}).message_days == 0.5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (ENV_MESSAGE_DAYS, "0"),  # zero days would delete every turn as it is written
        (ENV_MESSAGE_DAYS, "-3"),
        (ENV_MESSAGE_DAYS, "a year"),
        (ENV_MESSAGE_DAYS, "inf"),
        (ENV_MAX_MESSAGES, "0"),
        (ENV_MAX_MESSAGES, "1.5"),
        (ENV_MAX_EPISODES, "many"),
        (ENV_PURGE_INTERVAL, "-1"),
        (ENV_PURGE_INTERVAL, "nan"),
    ],
)
def test_a_bad_setting_is_refused_with_its_name(name: str, value: str) -> None:
    with pytest.raises(InvalidInputError, match=name):
        RetentionPolicy.from_env({name: value})


@pytest.mark.parametrize(
    "fields",
    [
        {"message_days": 0},
        {"message_days": True},
        {"message_days": float("nan")},
        {"max_messages": 0},
        {"max_messages": 2.0},
        {"max_episodes": -1},
        {"purge_interval_minutes": -5},
        {"purge_interval_minutes": "10"},
    ],
)
def test_bad_arguments_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        RetentionPolicy(**fields)  # type: ignore[arg-type]


def test_the_environment_is_read_when_nothing_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MESSAGE_DAYS, "30")
    monkeypatch.setenv(ENV_MAX_MESSAGES, "500")
    assert RetentionPolicy.from_env() == RetentionPolicy(message_days=30, max_messages=500)
