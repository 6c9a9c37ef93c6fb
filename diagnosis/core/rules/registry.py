"""The rule registry: every module of ``diagnosis.core.rules.builtin`` that defines ``RULE`` is a rule."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from diagnosis.core import plugins
from diagnosis.core.rules.base import Rule


class DuplicateRuleError(plugins.DuplicatePluginError):
    """Two rule modules claim the same id: a start-up error."""


def collect(rules: Iterable[Rule]) -> dict[str, Rule]:
    return plugins.collect(rules, what="rule", error=DuplicateRuleError)


@cache
def all_rules() -> dict[str, Rule]:
    """Every rule, keyed by its stable id, in module-name order."""
    return collect(plugins.discover("diagnosis.core.rules.builtin", "RULE", Rule))


def get_rule(rule_id: str) -> Rule:
    try:
        return all_rules()[rule_id]
    except KeyError:
        known = ", ".join(all_rules())
        raise KeyError(f"unknown rule {rule_id!r} (known: {known})") from None
