"""Money in templates (docs/accounting.md "Cost"): ``{{ costs|cost_of:bucket }}`` is a bucket's
cost or nothing at all: a cluster without a price shows no amount, never 0.00."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

register = template.Library()


@register.filter
def cost_of(costs: Any, key: str) -> Any:
    """``costs[key]`` (a ``Money``), or "" when it is not priced."""
    if not isinstance(costs, Mapping):
        return ""
    return costs.get(key) or ""
