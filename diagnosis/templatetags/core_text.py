"""``{% load core_text %}``: English text of the pure core (rule titles and docs, severities,
states, bucket names) in the reader's language; text the catalog lacks stays as it is."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.translation import gettext, gettext_noop

register = template.Library()

# words the core and the models say that pages show as they are
CORE_WORDS = (
    gettext_noop("critical"),
    gettext_noop("warning"),
    gettext_noop("info"),
    gettext_noop("pending"),
    gettext_noop("firing"),
    gettext_noop("resolved"),
    # the fairness report's presets (diagnosis/reports/period.py)
    gettext_noop("Last 24 hours"),
    gettext_noop("Last 7 days"),
    gettext_noop("Last 30 days"),
    # report subscriptions (diagnosis/models/subscriptions.py ReportFrequency)
    gettext_noop("Weekly (the last 7 days)"),
    gettext_noop("Monthly (the last 30 days)"),
    # a recommendation's predicted verdicts (diagnosis/core/recommend/base.py)
    gettext_noop("improves"),
    gettext_noop("no measurable effect"),
    gettext_noop("harms"),
    gettext_noop("not simulated"),
    gettext_noop("impact pending"),
    # the simulated impact's metrics (diagnosis/core/recommend/impact.py MetricSpec labels)
    gettext_noop("allocation utilization"),
    gettext_noop("fragmented free GPUs (mean)"),
    gettext_noop("mean wait"),
    gettext_noop("share started"),
    gettext_noop("wait p95"),
    gettext_noop("share of allocated GPU-hours"),
)


@register.filter
def core_text(value: Any) -> Any:
    """``{{ rule.title|core_text }}``: the translation of ``value`` (a str), else ``value``."""
    if isinstance(value, str) and value:
        return gettext(value)
    return value
