"""The collection schemas of the agent's long-term memory.

Per-user collections are partitioned by user inside the store (a Weaviate tenant per user),
so a per-user call can never see another user's objects.
"""

from __future__ import annotations

import re

from agentic_memory.store.types import CollectionSpec, InvalidInputError, Property

EPISODES = CollectionSpec(
    name="EpisodicMemory",
    per_user=True,
    description="One reflection per finished conversation, with the conversation itself.",
    properties=(
        Property("conversation", "text", searchable=True, filterable=False),
        Property("context_tags", "text[]", searchable=True),
        Property("conversation_summary", "text", searchable=True, filterable=False),
        Property("what_worked", "text", searchable=True, filterable=False),
        Property("what_to_avoid", "text", searchable=True, filterable=False),
        Property("thread_id", "text"),
        Property("created_at", "date"),
        Property("importance", "number", description="0..1, set by the reflection"),
    ),
)

FACTS = CollectionSpec(
    name="UserFact",
    per_user=True,
    description="Durable facts about a user, one current value per subject; old values superseded.",
    properties=(
        Property("subject", "text", searchable=True, description="normalised key, e.g. 'diet'"),
        Property("value", "text", searchable=True, filterable=False),
        Property("category", "text", description="identity | preference | constraint | other"),
        Property("current", "bool"),
        Property("valid_from", "date"),
        Property("valid_to", "date", description="when it stopped being true; absent if current"),
        Property("source_thread", "text"),
        Property("superseded_by", "text", description="id of the fact that replaced this one"),
    ),
)

RULES = CollectionSpec(
    name="ProceduralRules",
    per_user=True,
    description=(
        "Versions of the behaviour rule set; the scope is a user, or memstore.GLOBAL_SCOPE "
        "for the rules shared by everyone."
    ),
    properties=(
        Property("version", "int"),
        Property("rules_json", "text", filterable=False, description="JSON list of rules"),
        Property("rules_text", "text", searchable=True, filterable=False),
        Property("source_episodes", "text[]", description="ids of the episodes it came from"),
        Property("source_users", "text[]", description="users whose episodes fed this version"),
        Property("parent_version", "int"),
        Property("note", "text", filterable=False),
        Property("created_at", "date"),
    ),
)

MESSAGES = CollectionSpec(
    name="MessageLog",
    per_user=True,
    description="Every conversation turn, for recall across conversations.",
    properties=(
        Property("content", "text", filterable=False),
        Property("role", "text"),
        Property("speaker", "text", description="the message's name, if it had one"),
        Property("thread_id", "text"),
        Property("turn", "int"),
        Property("created_at", "date"),
        Property("metadata_json", "text", filterable=False, description="caller metadata"),
        Property(
            "search_text",
            "text",
            searchable=True,
            filterable=False,
            description="prepared keyword text (agentic_memory.kinds.recall_text): stems of the content, "
            "speaker, date and preceding turn, without stop words",
        ),
    ),
    # A write reads the thread's last turn; recall's neighbours are (thread, turn) too.
    indexes=(("thread_id", "turn"),),
)

MESSAGES_V1 = CollectionSpec(
    name="MessageLog",
    per_user=True,
    description="The message log as versions before the prepared keyword text stored it.",
    properties=(
        Property("content", "text", searchable=True, filterable=False),
        Property("role", "text"),
        Property("thread_id", "text"),
        Property("turn", "int"),
        Property("created_at", "date"),
        Property("metadata_json", "text", filterable=False, description="caller metadata"),
    ),
    # A write reads the thread's last turn: without this, SQLite walks the user's
    # (user, turn) index across every thread, so a write cost O(user) instead of O(thread).
    indexes=(("thread_id", "turn"),),
)
"""The earlier schema of ``MessageLog``; a store holding it is upgraded on first use."""

KNOWLEDGE_PROPERTIES: tuple[Property, ...] = (
    Property("text", "text", searchable=True, filterable=False),
    Property("title", "text", searchable=True),
    Property("source", "text", description="absolute path of the file, symlinks resolved"),
    Property("sha256", "text", description="of the whole file"),
    Property("page_start", "int"),
    Property("page_end", "int"),
    Property("chunk_index", "int"),
    Property("char_start", "int"),
    Property("char_end", "int"),
    Property(
        "revision",
        "text",
        description="the ingestion of (source, file sha256, splitter settings) the chunk belongs to",
    ),
)

_KB_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}$")


def knowledge_collection(kb: str) -> CollectionSpec:
    """Return the schema of knowledge base ``kb`` (shared by all users, one collection per base)."""
    if not isinstance(kb, str) or not _KB_RE.match(kb):
        raise InvalidInputError(
            f"knowledge base name {kb!r} must start with a letter and contain only letters, "
            "digits and underscores (at most 41 characters)"
        )
    return CollectionSpec(
        name=f"Knowledge_{kb[0].upper()}{kb[1:]}",
        per_user=False,
        description=f"Document chunks of the knowledge base {kb!r}.",
        properties=KNOWLEDGE_PROPERTIES,
    )


PER_USER_COLLECTIONS: tuple[CollectionSpec, ...] = (EPISODES, FACTS, RULES, MESSAGES)
