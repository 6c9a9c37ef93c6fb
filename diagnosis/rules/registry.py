"""The rule registry: every module of ``diagnosis.rules`` that defines ``RULE`` is a rule."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from diagnosis.rules.base import Rule


class DuplicateRuleError(RuntimeError):
    """Two rule modules claim the same id: a start-up error."""


def collect(rules: list[Rule]) -> dict[str, Rule]:
    registry: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in registry:
            raise DuplicateRuleError(f"rule id {rule.id!r} is defined twice")
        registry[rule.id] = rule
    return registry


@cache
def all_rules() -> dict[str, Rule]:
    """Every rule, keyed by its stable id, in module-name order."""
    package = importlib.import_module("diagnosis.rules")
    found: list[Rule] = []
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"diagnosis.rules.{module_info.name}")
        rule = getattr(module, "RULE", None)
        if isinstance(rule, Rule):
            found.append(rule)
    return collect(found)


def get_rule(rule_id: str) -> Rule:
    try:
        return all_rules()[rule_id]
    except KeyError:
        known = ", ".join(all_rules())
        raise KeyError(f"unknown rule {rule_id!r} (known: {known})") from None
