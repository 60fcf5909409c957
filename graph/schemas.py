"""Structured outputs the memory model fills in.

Every string and list is bounded (``max_length``) so that even a 270M base model, whose
output is constrained by the JSON schema, returns something that validates; the bounds
also keep stored memories small.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Tag = Annotated[str, Field(min_length=1, max_length=40)]

FactCategory = Literal["identity", "preference", "constraint", "other"]

MAX_RULES = 10
"""The procedural rule set never holds more rules than this."""


class Reflection(BaseModel):
    """A reflection on a finished conversation, stored as an episodic memory."""

    model_config = ConfigDict(extra="forbid")

    context_tags: list[Tag] = Field(
        default_factory=list,
        max_length=5,
        description="Up to 5 short lower-case topic tags.",
    )
    conversation_summary: str = Field(
        min_length=1, max_length=600, description="What the user wanted and what happened."
    )
    what_worked: str = Field(
        min_length=1, max_length=400, description="The approach that helped, to repeat."
    )
    what_to_avoid: str = Field(
        min_length=1, max_length=400, description="What should not be repeated."
    )
    importance: float = Field(
        ge=0.0, le=1.0, description="How useful this is for future conversations, 0 to 1."
    )


class ExtractedFact(BaseModel):
    """One durable fact about the user."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=60, description="Short lower-case key.")
    value: str = Field(min_length=1, max_length=200, description="The value in a few words.")
    category: FactCategory = Field(description="identity, preference, constraint or other.")


class ExtractedFacts(BaseModel):
    """Durable facts found in the user's newest message (possibly none)."""

    model_config = ConfigDict(extra="forbid")

    facts: list[ExtractedFact] = Field(default_factory=list, max_length=5)


class Rule(BaseModel):
    """One behaviour rule: an instruction and why."""

    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1, max_length=200, description="What to do.")
    rationale: str = Field(min_length=1, max_length=200, description="Why.")


class RuleSet(BaseModel):
    """The rewritten procedural rules."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(min_length=1, max_length=MAX_RULES)


class Summary(BaseModel):
    """The rolling summary of older turns."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=1500, description="The updated summary.")
