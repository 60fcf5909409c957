"""Procedural memory: versioned behaviour rules (``RuleBook``), screened, and the shared ones.

- :mod:`~agentic_memory.kinds.rules.versions`: rule sets, versions, parsing, rebasing;
- :mod:`~agentic_memory.kinds.rules.book`: :class:`RuleBook`, a scope's versions in the store;
- :mod:`~agentic_memory.kinds.rules.guard`: the screen every rule set passes;
- :mod:`~agentic_memory.kinds.rules.shared`: the shared rules' gate (``SharedRules``);
- :mod:`~agentic_memory.kinds.rules.kind`: the contract (``RulesKind``);
- :mod:`~agentic_memory.kinds.rules.space`: the ``("rules", scope)`` namespaces.
"""

from agentic_memory.kinds.rules.book import RuleBook
from agentic_memory.kinds.rules.versions import (
    FORGOTTEN_NOTE,
    MAX_RULES,
    RULES,
    Rule,
    RuleConflictError,
    RuleItem,
    RuleScreenError,
    RuleSet,
    RuleVersion,
    SharedRulesGateError,
    parse_rules,
    rebase_backoff,
    rebase_rules,
    render_rules,
    rules_scope,
    starting_rules,
)

__all__ = [
    "FORGOTTEN_NOTE",
    "MAX_RULES",
    "RULES",
    "Rule",
    "RuleBook",
    "RuleConflictError",
    "RuleItem",
    "RuleScreenError",
    "RuleSet",
    "RuleVersion",
    "SharedRulesGateError",
    "parse_rules",
    "rebase_backoff",
    "rebase_rules",
    "render_rules",
    "rules_scope",
    "starting_rules",
]
