"""The rule registry: every module of ``diagnosis.core.rules.builtin`` that defines ``RULE`` is a
rule, keyed by its stable id (a :class:`~diagnosis.core.plugins.Registry`)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from diagnosis.core import plugins
from diagnosis.core.rules.base import Rule


class DuplicateRuleError(plugins.DuplicatePluginError):
    """Two rule modules claim the same id: a start-up error."""


def collect(rules: Iterable[Rule]) -> plugins.Registry[Rule]:
    return plugins.Registry(rules, what="rule", error=DuplicateRuleError)


@cache
def all_rules() -> plugins.Registry[Rule]:
    """Every rule, keyed by its stable id, in module-name order."""
    return collect(plugins.discover("diagnosis.core.rules.builtin", "RULE", Rule))


def get_rule(rule_id: str) -> Rule:
    """The rule of that id, or a ``KeyError`` naming the known ones."""
    return all_rules()[rule_id]
