"""``amem memories rules``: procedural rule versions of a user or of everyone (``--global``).

Conversations never change the rules shared by every user: with ``AMEM_GLOBAL_RULES=learn``
their rewrite becomes a proposal that an operator reviews, approves or rejects here.
"""

from __future__ import annotations

import getpass
from typing import Annotated, Any

import typer

from agentic_memory.api import Memory
from agentic_memory.cli import render
from agentic_memory.cli.scaffold import (
    CliError,
    GlobalOpt,
    JsonOpt,
    OperatorOpt,
    Output,
    Said,
    Shown,
    Table,
    UserOpt,
    memory_command,
    need_user,
)
from agentic_memory.kinds.rules import RuleVersion, rules_scope
from agentic_memory.kinds.rules.shared import RuleProposal
from agentic_memory.store import GLOBAL_SCOPE

app = typer.Typer(help="Procedural rule versions of a user or of everyone (--global).")


def rule_scope(user: str | None, global_scope: bool) -> str:
    """Return the rule scope chosen by ``--user`` or ``--global`` (exactly one)."""
    if global_scope and user:
        raise CliError("give either --user USER or --global, not both")
    if not global_scope and not user:
        raise CliError("rules belong to a user or to everyone: give --user USER or --global")
    return rules_scope("" if global_scope else need_user(user), shared=global_scope)


def _scope_label(scope: str) -> str:
    return "everyone (global)" if scope == GLOBAL_SCOPE else scope


def _version_row(v: RuleVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "created_at": v.created_at,
        "parent_version": v.parent_version,
        "rules": len(v.rules),
        "note": v.note,
        "source_users": list(v.source_users),
        "source_episodes": len(v.source_episodes),
        "stored": v.stored,
    }


@memory_command(app, "list")
async def rules_list(mem: Memory, user: UserOpt = None, global_scope: GlobalOpt = False) -> Output:
    """List every version of a rule set (version 1 is the starting set)."""
    scope = rule_scope(user, global_scope)
    versions = await mem.rules.aversions(scope)
    return Table(
        [v.to_dict() | {"stored": v.stored} for v in versions],
        [
            ("version", "version"),
            ("created", "created_at"),
            ("from", "parent_version"),
            ("rules", "rules"),
            ("learned from users", "source_users"),
            ("episodes", "source_episodes"),
            ("note", "note"),
        ],
        title=f"Rule versions of {_scope_label(scope)}",
        rows=[_version_row(v) for v in versions],
    )


@memory_command(app, "show")
async def rules_show(
    mem: Memory,
    version: Annotated[int | None, typer.Argument(help="Version (default: the latest).")] = None,
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
) -> Output:
    """Show the rules of one version."""
    scope = rule_scope(user, global_scope)
    book = mem.rules
    v = await (book.alatest(scope) if version is None else book.aget(scope, version))
    return Shown(
        v.to_dict(),
        lambda: render.out().print(
            render.table(
                ["#", "instruction", "rationale"],
                [(i, r.instruction, r.rationale) for i, r in enumerate(v.rules, 1)],
                title=f"Rules of {_scope_label(scope)}, version {v.version}",
                caption=v.note or None,
            )
        ),
    )


@memory_command(app, "diff")
async def rules_diff(
    mem: Memory,
    a: Annotated[int, typer.Argument(help="The older version.")],
    b: Annotated[int, typer.Argument(help="The newer version.")],
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
) -> Output:
    """Compare two versions: rules added, removed and reworded."""
    scope = rule_scope(user, global_scope)
    d = await mem.rules.adiff(scope, a, b)
    return Shown(
        {
            "scope": scope,
            "a": a,
            "b": b,
            "added": [r.render() for r in d.added],
            "removed": [r.render() for r in d.removed],
            "changed": [{"from": x.render(), "to": y.render()} for x, y in d.changed],
        },
        lambda: render.out().print(render.diff_text(rules_diff_lines(str(d)))),
    )


def rules_diff_lines(text: str) -> list[str]:
    """Map a ``RuleDiff`` report onto diff-style lines (``~`` rewordings shown as -/+)."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("~ "):
            lines.append("-" + line[1:])
        elif line.startswith("  -> "):
            lines.append("+ " + line[5:])
        else:
            lines.append(line)
    return lines


@memory_command(app, "rollback")
async def rules_rollback(
    mem: Memory,
    version: Annotated[int, typer.Argument(help="The version to restore.")],
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
    operator: OperatorOpt = None,
) -> Output:
    """Restore an old version: it is written again as the newest version."""
    scope = rule_scope(user, global_scope)
    if scope == GLOBAL_SCOPE:
        created = await mem.shared_rules.arollback(version, operator=operator_name(operator))
    else:
        created = await mem.rules.arollback(scope, version)
    return Said(
        created.to_dict(),
        f"Rules of {_scope_label(scope)}: version {created.version} now equals version {version}.",
    )


def _proposal_changes(proposal: RuleProposal, base: RuleVersion | None) -> list[str]:
    """Return diff-style lines: the proposal's rules against the version it was written from."""
    before = list(base.rules) if base is not None else []
    lines = [f"+ {r.render()}" for r in proposal.rules if r not in before]
    lines += [f"- {r.render()}" for r in before if r not in proposal.rules]
    return lines or ["  (same rules as its base version)"]


def _print_review(
    proposals: list[RuleProposal], versions: dict[int, RuleVersion], all_proposals: bool
) -> None:
    if not proposals:
        render.say("No proposal waits for review." if not all_proposals else "No proposal.")
        return
    latest = max(versions)
    for p in proposals:
        who = p.proposer if p.origin == "conversation" else p.origin
        stale = " (stale: the rules changed since)" if p.base_version != latest else ""
        render.say(
            f"Proposal {p.id} [{p.status}] by {who}, {p.created_at[:16]}, from version "
            f"{p.base_version}{stale}"
        )
        if p.note:
            render.say(f"  {p.note}")
        render.out().print(render.diff_text(_proposal_changes(p, versions.get(p.base_version))))
        for rejected in p.screened_out:
            render.say(f"  screened out: {rejected.instruction[:80]!r} ({rejected.reason})")
        if p.status != "pending":
            render.say(f"  {p.status} by {p.decided_by} {p.decided_at[:16]} {p.reason}".rstrip())
    render.note(
        "Approve with `amem memories rules approve ID`, reject with "
        "`amem memories rules reject ID --reason ...`."
    )


@memory_command(app, "review")
async def rules_review(
    mem: Memory,
    all_proposals: Annotated[
        bool, typer.Option("--all", help="Also the approved and rejected proposals.")
    ] = False,
    json_out: JsonOpt = False,
) -> Output:
    """List the proposed changes of the shared rules that wait for an operator.

    Conversations never change the rules shared by every user: with AMEM_GLOBAL_RULES=learn
    their rewrite becomes a proposal, screened, which takes effect only once approved.
    """
    gate = mem.shared_rules
    proposals = await (gate.alist() if all_proposals else gate.apending())
    versions = {}
    if proposals and not json_out:  # only what people see compares with the versions
        versions = {v.version: v for v in await mem.rules.aversions(GLOBAL_SCOPE)}
    return Shown(
        [p.to_dict() for p in proposals],
        lambda: _print_review(proposals, versions, all_proposals),
    )


ProposalArg = Annotated[str, typer.Argument(help="The proposal's id (from `review`).")]


@memory_command(app, "approve")
async def rules_approve(
    mem: Memory,
    proposal_id: ProposalArg,
    note: Annotated[str, typer.Option("--note", help="Why it was approved.")] = "",
    operator: OperatorOpt = None,
) -> Output:
    """Approve a proposal: it becomes the next version of the shared rules."""
    created = await mem.shared_rules.aapprove(
        proposal_id, operator=operator_name(operator), note=note
    )
    return Said(
        created.to_dict(), f"Shared rules: version {created.version} is proposal {proposal_id}."
    )


@memory_command(app, "reject")
async def rules_reject(
    mem: Memory,
    proposal_id: ProposalArg,
    reason: Annotated[str, typer.Option("--reason", help="Why it was rejected.")] = "",
    operator: OperatorOpt = None,
) -> Output:
    """Reject a proposal: the shared rules stay as they are; it stays listed with the reason."""
    rejected = await mem.shared_rules.areject(
        proposal_id, operator=operator_name(operator), reason=reason
    )
    return Said(rejected.to_dict(), f"Proposal {proposal_id} rejected.")


def operator_name(given: str | None) -> str:
    """Return the operator recorded with a decision: ``--operator``, else the login name."""
    if given is not None:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"
