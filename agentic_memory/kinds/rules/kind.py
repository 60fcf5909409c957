"""The rules kind's contract: its namespaces, forgetting, import rules and listing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.contract import (
    GateOutcome,
    ImportGate,
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    StagedLines,
)
from agentic_memory.kinds.importing import text_property
from agentic_memory.kinds.rules.book import RuleBook
from agentic_memory.kinds.rules.guard import screen_rules
from agentic_memory.kinds.rules.shared import PROPOSALS, SharedRules
from agentic_memory.kinds.rules.space import RulesSpace
from agentic_memory.kinds.rules.versions import RULES, RuleVersion, embedding_text, parse_rule_list
from agentic_memory.store.base import GLOBAL_SCOPE, MemoryStore
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    make_id,
)


class RulesKind(MemoryKind):
    """Versioned procedural rules of a user, and the shared ones (scope ``_global``).

    The shared rules change only through their proposal gate
    (:class:`agentic_memory.kinds.rules.shared.SharedRules`): a store's ``("rules",
    "_global")`` namespace and an import of shared rules make proposals an operator decides.
    """

    info = KindInfo.one(
        "rules",
        "rule",
        "Procedural rule versions of a user or of everyone (_global).",
        users_column="rule_versions",
    )
    specs = (RULES,)
    space_types = (RulesSpace,)  # ("rules", user) and ("rules", "_global")
    allows_global_scope = True
    cli_columns = (
        ("version", "version"),
        ("created", "created_at"),
        ("parent", "parent_version"),
        ("rules", "rules"),
        ("note", "note"),
    )

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's rule versions (the shared ones are scrubbed by ``forget``)."""
        return {RULES.name: await RuleBook(self.store, self.embeddings).aforget_user(user)}

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the rules' text."""
        return embedding_text(properties)

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check a version's id, rules a conversation could have stored, one source."""
        props = line.properties
        version = props.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidInputError(f"version must be a positive integer, got {version!r:.40}")
        if line.id != str(uuid.UUID(make_id("rules", line.user, str(version)))):
            raise InvalidInputError(f"the id of version {version} of {line.user!r} is not its own")
        try:
            raw = json.loads(text_property(props, "rules_json"))
        except (ValueError, RecursionError):
            raise InvalidInputError("rules_json is not JSON") from None
        if not isinstance(raw, list):
            raise InvalidInputError("rules_json must be a list of rules")
        items = parse_rule_list(raw)
        if props.get("rules_text") != RuleVersion(line.user, version, tuple(items)).render():
            raise InvalidInputError("rules_text does not match rules_json")
        parent = props.get("parent_version")
        if parent is not None and (not isinstance(parent, int) or not 1 <= parent < version):
            raise InvalidInputError(f"parent_version must be below version {version}")
        others = sorted({str(u) for u in props.get("source_users") or []} - {line.user})
        if line.user != GLOBAL_SCOPE and others:
            # RuleBook.propose: a user's rules are learned from that user only.
            raise InvalidInputError(
                f"version {version} of {line.user!r} names other users as its source "
                f"({', '.join(map(repr, others))[:100]}): a user's rules are learned from "
                "that user only"
            )
        _kept, rejected = screen_rules(items, shared=line.user == GLOBAL_SCOPE)
        if rejected:
            raise InvalidInputError(
                f"version {version} of {line.user!r} holds a rule no conversation may store "
                f"({rejected[0].reason}): {rejected[0].instruction!r:.100}"
            )
        line.keys = {"version": version}

    @classmethod
    def shared_what(cls, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say a line of scope ``_global`` is the shared rules."""
        if line.user == GLOBAL_SCOPE:
            return "the shared rules (imported as a proposal an operator approves)"
        return None

    @classmethod
    def export_note(cls, collection: str) -> str | None:
        """Keep the proposals of the shared rules in their store: an operator decides them."""
        if collection != PROPOSALS.name:
            return None
        return (
            f"the proposals of the shared rules ({collection}) are not exported: an operator "
            "decides them in this store (`amem memories rules review`)"
        )

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Write a user's versions when they continue the store's; the shared ones: the gate.

        Versions that do not continue the store's history would mix two histories.
        """
        if user == GLOBAL_SCOPE:
            return  # through the shared rules' gate: import_gate
        latest = target.store.list_objects(
            spec.name, user=user, limit=1, sort_by="version", descending=True
        )
        if latest and not target.staged.has(spec.name, user, latest[0].id):
            version = latest[0].properties.get("version")
            raise target.fail(
                None,
                f"the rules of {user!r} already have versions up to {version} in the store, "
                "and the file's versions do not continue them: importing them would mix two "
                "histories; forget those rules first, or import into an empty store",
            )
        target.merge_plain(line_kind, spec, user)

    @classmethod
    def import_gate(cls, staged: StagedLines) -> ImportGate | None:
        """Make the file's latest version of the shared rules a proposal, never a version.

        The rules every user's prompt carries change only through ``SharedRules``: what a
        file holds is proposed from the store's latest version, and applies once an operator
        approves it. The same file imported again gives the same proposal.
        """
        line = None
        for collection, user in staged.groups("rule"):
            if user == GLOBAL_SCOPE:
                newest = staged.batches(
                    "rule", collection, user, 1, order_by="version", descending=True
                )
                line = next(newest)[0]
                break
        if line is None:
            return None
        shared = line

        async def propose(store: MemoryStore, embeddings: Embeddings, source: str) -> GateOutcome:
            version = shared.properties["version"]
            gate = SharedRules(store, embeddings)
            latest = await gate.rules.alatest(GLOBAL_SCOPE)
            proposed = await gate.apropose(
                parse_rule_list(json.loads(str(shared.properties["rules_json"]))),
                proposer=GLOBAL_SCOPE,
                origin="import",
                base_version=latest.version,
                note=f"imported from {source[:200]} (its shared rules' version {version})",
            )
            proposal = proposed.proposal
            if proposal is None:
                return GateOutcome(
                    f"the file's shared rules (version {version}) equal the store's latest "
                    f"version ({latest.version}): nothing to propose"
                )
            if proposal.status != "pending":
                return GateOutcome(
                    f"the file's shared rules (version {version}) are proposal {proposal.id}, "
                    f"which was {proposal.status} already by {proposal.decided_by}",
                    proposal.id,
                )
            return GateOutcome(
                f"the file's shared rules (version {version}) were not written: they are "
                f"proposal {proposal.id}, from version {latest.version} of the store's, and "
                "apply once an operator approves it (`amem memories rules review`, "
                f"`amem memories rules approve {proposal.id}`)",
                proposal.id,
            )

        return ImportGate("the shared rules", propose)

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's rule versions, oldest first."""
        versions = await RuleBook(self.store, self.embeddings).aversions(user)
        return [
            {
                "version": v.version,
                "created_at": v.created_at,
                "parent_version": v.parent_version,
                "rules": len(v.rules),
                "note": v.note,
            }
            for v in versions[:limit]
        ]
